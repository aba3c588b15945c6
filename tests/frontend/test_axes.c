/*
 * test_axes.c: the one table of mesh axes (frontend.h: FE_AXES). Everything that names an axis
 * is made from it or checked against it: fe_axes[], the default mesh, the role queries the
 * driver and the modules use instead of names, and the module defaults that name axes as config
 * data (partition specs, expert_axis).
 */
#include "tests/frontend/fe_test.h"

/* fe_axes[] and the default mesh's JSON are the same rows, in the same order. */
static void test_default_mesh_is_the_table(void) {
  json_object *axes = json_tokener_parse(FE_AXES_JSON),
              *sizes = json_tokener_parse(FE_AXES_SIZES_JSON);
  REQUIRE_MSG(axes && sizes, "the default mesh does not parse: %s %s", FE_AXES_JSON,
              FE_AXES_SIZES_JSON);
  CHECK_INT((int64_t)json_object_array_length(axes), fe_naxes);
  CHECK_INT((int64_t)json_object_array_length(sizes), fe_naxes);
  int wild = 0;
  for (int i = 0; i < fe_naxes && i < (int)json_object_array_length(axes); i++) {
    CHECK_STR(json_object_get_string(json_object_array_get_idx(axes, i)), fe_axes[i].name);
    int64_t s = json_object_get_int64(json_object_array_get_idx(sizes, i));
    CHECK(s == 1 || s == -1);
    wild += s == -1;
    if (s == -1) CHECK(fe_axes[i].roles & FE_AXIS_BATCH); /* the devices left split the batch */
  }
  CHECK_INT(wild, 1);
  /* the schema's default is that text */
  const FeField *f = fe_kind_field(fe_kind_find("device_mesh"), "axes");
  REQUIRE_MSG(f != NULL, "device_mesh has no axes field");
  CHECK_STR(f->dflt, FE_AXES_JSON);
  CHECK_STR(fe_kind_field(fe_kind_find("device_mesh"), "shape")->dflt, FE_AXES_SIZES_JSON);
  json_object_put(axes);
  json_object_put(sizes);
}

/* The queries by role find what the code used to find by name. */
static void test_roles(void) {
  char buf[128];
  CHECK_STR(fe_axis_names(FE_AXIS_BATCH, " x ", buf, sizeof buf), "data x expert x fsdp");
  CHECK_STR(fe_axis_names(FE_AXIS_BATCH | FE_AXIS_PIPELINE, ", ", buf, sizeof buf), "");
  CHECK_STR(fe_axis_names(FE_AXIS_PARAMS, ",", buf, 6), "fsdp,"); /* cut at the buffer */
  CHECK_STR(fe_axis_with(FE_AXIS_TENSOR)->name, "model");
  CHECK_STR(fe_axis_with(FE_AXIS_SEQUENCE)->name, "seq");
  CHECK_STR(fe_axis_with(FE_AXIS_EXPERTS)->name, "expert");
  CHECK_STR(fe_axis_with(FE_AXIS_PIPELINE)->name, "pipeline");
  CHECK(fe_axis_with(FE_AXIS_TENSOR | FE_AXIS_BATCH) == NULL);
  /* a mesh in another order than the table's, without every axis */
  FeMesh m = {.n = 4, .shape = {2, 3, 5, 7}};
  snprintf(m.axes[0], sizeof m.axes[0], "model");
  snprintf(m.axes[1], sizeof m.axes[1], "fsdp");
  snprintf(m.axes[2], sizeof m.axes[2], "data");
  snprintf(m.axes[3], sizeof m.axes[3], "seq");
  CHECK_INT(fe_mesh_axis(&m, FE_AXIS_BATCH, FE_AXIS_PARAMS | FE_AXIS_EXPERTS), 2);
  CHECK_INT(fe_mesh_axis(&m, FE_AXIS_BATCH | FE_AXIS_PARAMS, FE_AXIS_EXPERTS), 1);
  CHECK_INT(fe_mesh_axis(&m, FE_AXIS_TENSOR, 0), 0);
  CHECK_INT(fe_mesh_axis(&m, FE_AXIS_EXPERTS, 0), -1);
  CHECK_INT(fe_batch_split(&m), 15);
  CHECK_INT(fe_seq_split(&m), 7);
  CHECK_INT(fe_role_split(&m, FE_AXIS_TENSOR), 2);
  CHECK_INT(fe_role_split(&m, FE_AXIS_PARAMS), 6);
  CHECK_INT(fe_role_split(&m, FE_AXIS_PIPELINE), 1);
}

/* Checks one axis name of a module default against the table: known, with the roles wanted. */
static void check_axis(const char *kind, const char *field, const char *name, unsigned roles) {
  const FeAxis *a = fe_axis(name);
  CHECK_MSG(a != NULL, "%s.%s's default names \"%s\", which is not in the axis table", kind, field,
            name);
  CHECK_MSG(!a || (a->roles & roles) == roles,
            "%s.%s's default names \"%s\", whose row lacks the role it is used for", kind, field,
            name);
}

/* The module defaults that name axes are config data, like the shipped rules: each name is a
 * row of the table, with the role it is named for. */
static void test_module_defaults_name_table_axes(void) {
  int specs = 0, experts = 0;
  for (int k = 0; k < fe_kind_count(); k++) {
    const FeKind *kind = fe_kind_at(k);
    for (int i = 0; i < kind->nfields; i++) {
      const FeField *f = &kind->fields[i];
      if (!f->dflt) continue;
      json_object *d = json_tokener_parse(f->dflt);
      if (f->type == FT_PSPECS) {
        json_object_object_foreach(d, param, spec) {
          (void)param;
          for (size_t j = 0; j < json_object_array_length(spec); j++) {
            json_object *e = json_object_array_get_idx(spec, j);
            if (json_object_is_type(e, json_type_string)) {
              check_axis(kind->name, f->name, json_object_get_string(e), FE_AXIS_PARAMS);
              specs++;
            }
            for (size_t l = 0;
                 json_object_is_type(e, json_type_array) && l < json_object_array_length(e); l++)
              check_axis(kind->name, f->name,
                         json_object_get_string(json_object_array_get_idx(e, l)), FE_AXIS_PARAMS);
          }
        }
      } else if (!strcmp(f->name, "expert_axis")) {
        check_axis(kind->name, f->name, json_object_get_string(d), FE_AXIS_EXPERTS);
        experts++;
      }
      json_object_put(d);
    }
  }
  CHECK(specs > 0);
  CHECK(experts > 0);
}

static const TestCase cases[] = {
    {"default_mesh_is_the_table", test_default_mesh_is_the_table},
    {"roles", test_roles},
    {"module_defaults_name_table_axes", test_module_defaults_name_table_axes},
    {NULL, NULL},
};

int main(int argc, char **argv) { return fe_t_main(argc, argv, "frontend_axes", cases); }
