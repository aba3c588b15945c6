/*
 * build.c: the module walk over a canonical tree, and the parameter table.
 *
 * fe_build() first reads the device mesh (resolving a -1 axis against the
 * target's device count), then walks the modules from the root. Each kind's
 * build function receives what its parent decided (FeDims), checks what
 * only makes sense with it, declares its parameters through fe_param() and
 * walks its children. fe_param() checks each partition spec against the
 * mesh: known axes, one axis per dimension at most once, sizes that divide.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

/* ---- the mesh axes ------------------------------------------------------ */

/* A new axis, or a new role of one, is a row or a flag of FE_AXES (frontend.h): the mesh checks,
 * the batch split, the shard pass's batch leaves and the refusal of unsupported axes read it. */
#define FE_AXIS_ROW(name, roles, what, size) {name, roles, what},
const FeAxis fe_axes[] = {FE_AXES(FE_AXIS_ROW, )};
#undef FE_AXIS_ROW
const int fe_naxes = (int)(sizeof fe_axes / sizeof fe_axes[0]);

const FeAxis *fe_axis(const char *name) {
  for (int i = 0; i < fe_naxes; i++)
    if (strcmp(name, fe_axes[i].name) == 0) return &fe_axes[i];
  return NULL;
}

const FeAxis *fe_axis_with(unsigned roles) {
  for (int i = 0; i < fe_naxes; i++)
    if ((fe_axes[i].roles & roles) == roles) return &fe_axes[i];
  return NULL;
}

const char *fe_axis_names(unsigned roles, const char *sep, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < fe_naxes; i++)
    if ((fe_axes[i].roles & roles) == roles && len < cap)
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? sep : "", fe_axes[i].name);
  return buf;
}

int fe_mesh_axis(const FeMesh *m, unsigned has, unsigned lacks) {
  for (int i = 0; i < m->n; i++) {
    const FeAxis *a = fe_axis(m->axes[i]);
    if (a && (a->roles & has) == has && !(a->roles & lacks)) return i;
  }
  return -1;
}

int64_t fe_role_split(const FeMesh *m, unsigned roles) {
  int64_t split = 1;
  for (int i = 0; i < m->n; i++) {
    const FeAxis *a = fe_axis(m->axes[i]);
    if (a && (a->roles & roles) == roles) split *= m->shape[i];
  }
  return split;
}

int64_t fe_batch_split(const FeMesh *m) { return fe_role_split(m, FE_AXIS_BATCH); }

int64_t fe_seq_split(const FeMesh *m) { return fe_role_split(m, FE_AXIS_SEQUENCE); }

/* ---- the mesh ----------------------------------------------------------- */

static int mesh_axes(FeBuild *b, json_object *axes) {
  FeMesh *m = &b->mesh;
  int n = (int)json_object_array_length(axes);
  if (n < 1 || n > FE_MAX_MESH)
    return fe_error(b->diag, b->file, "/mesh/axes", "%d axes (expected 1 to %d)", n, FE_MAX_MESH);
  for (int i = 0; i < n; i++) {
    const char *a = json_object_get_string(json_object_array_get_idx(axes, i));
    char p[64];
    snprintf(p, sizeof p, "/mesh/axes/%d", i);
    if (!fe_axis(a)) {
      const char *names[16];
      char list[128];
      size_t len = 0;
      for (int j = 0; j < fe_naxes && j < 16; j++) {
        names[j] = fe_axes[j].name;
        len += (size_t)snprintf(list + len, len < sizeof list ? sizeof list - len : 0, "%s%s",
                                j ? ", " : "", names[j]);
      }
      const char *near = fe_nearest(a, names, fe_naxes < 16 ? fe_naxes : 16);
      return fe_error(b->diag, b->file, p, "unknown mesh axis \"%s\" (expected one of %s)%s%s%s", a,
                      list, near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
    }
    for (int j = 0; j < i; j++)
      if (strcmp(m->axes[j], a) == 0)
        return fe_error(b->diag, b->file, p, "mesh axis \"%s\" appears twice", a);
    snprintf(m->axes[i], sizeof m->axes[i], "%s", a);
  }
  m->n = n;
  return 0;
}

static int mesh_shape(FeBuild *b, json_object *shape, int64_t devices) {
  FeMesh *m = &b->mesh;
  if ((int)json_object_array_length(shape) != m->n)
    return fe_error(b->diag, b->file, "/mesh/shape", "%d sizes for %d axes (expected one per axis)",
                    (int)json_object_array_length(shape), m->n);
  int64_t fixed = 1;
  int wild = -1;
  for (int i = 0; i < m->n; i++) {
    int64_t s = json_object_get_int64(json_object_array_get_idx(shape, i));
    char p[64];
    snprintf(p, sizeof p, "/mesh/shape/%d", i);
    if (s == -1 && wild >= 0)
      return fe_error(b->diag, b->file, p, "a second -1 (expected at most one axis sized -1)");
    if (s == -1)
      wild = i;
    else if (s < 1 || s > FE_MAX_DEVICES)
      return fe_error(b->diag, b->file, p, "size %lld (expected -1 or 1 to %d)", (long long)s,
                      FE_MAX_DEVICES);
    else
      fixed *= s;
    if (fixed > FE_MAX_DEVICES)
      return fe_error(b->diag, b->file, "/mesh/shape", "more than %d devices", FE_MAX_DEVICES);
    m->shape[i] = s;
  }
  if (devices <= 0) devices = fixed; /* no target: the mesh's own size, -1 taking 1 */
  if (devices > FE_MAX_DEVICES)
    return fe_error(b->diag, b->file, "/mesh/shape", "the target has more than %d devices",
                    FE_MAX_DEVICES);
  if (devices % fixed != 0 || (wild < 0 && devices != fixed))
    return fe_error(b->diag, b->file, "/mesh/shape",
                    "the mesh needs %s%lld devices, but the "
                    "target has %lld (expected sizes whose product %s %lld)",
                    wild >= 0 ? "a multiple of " : "", (long long)fixed, (long long)devices,
                    wild >= 0 ? "divides" : "is", (long long)devices);
  if (wild >= 0) m->shape[wild] = devices / fixed;
  m->devices = devices;
  return 0;
}

static int mesh_axis_index(const FeMesh *m, const char *axis) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->axes[i], axis) == 0) return i;
  return -1;
}

/* ---- the walk ----------------------------------------------------------- */

static int by_path(const void *a, const void *b) {
  return strcmp((*(const FeParam *const *)a)->path, (*(const FeParam *const *)b)->path);
}

/* The parameters in path order: the composer looks up every one by path, and
 * a scan per lookup would be quadratic in the number of layers. */
static void index_params(FeBuild *b) {
  b->by_path = base_xmalloc(((size_t)b->nparams + 1) * sizeof *b->by_path);
  for (int i = 0; i < b->nparams; i++) b->by_path[i] = &b->params[i];
  qsort(b->by_path, (size_t)b->nparams, sizeof *b->by_path, by_path);
}

int fe_param_find(const FeBuild *b, const char *path) {
  if (!b->by_path) return -1;
  FeParam key = {.path = (char *)path};
  const FeParam *kp = &key,
                **hit = bsearch(&kp, b->by_path, (size_t)b->nparams, sizeof *b->by_path, by_path);
  return hit ? (int)(*hit - b->params) : -1;
}

int fe_build(FeBuild *b, FeDiag *d, const char *file, json_object *root, int64_t devices) {
  memset(b, 0, sizeof *b);
  b->diag = d;
  b->file = file;
  b->root = root;
  json_object *mesh = fe_get_child(root, "mesh");
  b->file = fe_origin_key(mesh, "axes") ? fe_origin_key(mesh, "axes") : file;
  if (mesh_axes(b, fe_get_child(mesh, "axes"))) return -1;
  b->file = fe_origin_key(mesh, "shape") ? fe_origin_key(mesh, "shape") : file;
  if (mesh_shape(b, fe_get_child(mesh, "shape"), devices)) return -1;
  b->file = file;
  FeDims in = {0};
  if (fe_lora_begin(b, root) || fe_build_node(b, root, "", "", &in) || fe_lora_end(b)) return -1;
  index_params(b);
  return 0;
}

void fe_build_free(FeBuild *b) {
  for (int i = 0; i < b->nparams; i++) {
    free(b->params[i].path);
    free(b->params[i].origin);
  }
  free(b->params);
  free(b->by_path);
  free(b->step_error);
  fe_lora_free(b);
  b->params = NULL;
  b->by_path = NULL;
  b->step_error = NULL;
  b->nparams = b->capparams = 0;
}

/* Every key of param_partition_specs must name something the kind has. */
static int check_spec_names(FeBuild *b, json_object *node, const char *cfg, const FeKind *k) {
  json_object *specs = NULL;
  if (!json_object_object_get_ex(node, "param_partition_specs", &specs)) return 0;
  int rc = 0;
  json_object_object_foreach(specs, name, v) {
    (void)v;
    const char *names[16];
    char buf[16][32];
    int n = 0;
    for (const char *p = k->spec_names ? k->spec_names : ""; *p && n < 16;) {
      size_t m = strcspn(p, "|");
      snprintf(buf[n], 32, "%.*s", (int)m, p);
      names[n] = buf[n];
      bool hit = strcmp(buf[n], name) == 0;
      n++;
      p += m + (p[m] == '|');
      if (hit) goto next;
    }
    {
      char path[512];
      const char *near = fe_nearest(name, names, n);
      snprintf(path, sizeof path, "%s/param_partition_specs/%s", cfg, name);
      const char *file = fe_origin_key(specs, name);
      rc = fe_error(b->diag, file ? file : b->file, path,
                    "kind \"%s\" has no parameter \"%s\" (expected one "
                    "of %s)%s%s%s",
                    k->name, name, k->spec_names ? k->spec_names : "none",
                    near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
    }
  next:;
  }
  return rc;
}

int fe_build_node(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                  const FeDims *in) {
  if (!node) return 0;
  const FeKind *k = fe_kind_find(fe_node_kind(node));
  if (!k) return fe_error(b->diag, b->file, cfg, "internal: unvalidated node");
  /* Messages name the file the node came from (a base file, a modifier). */
  const char *saved = b->file;
  if (fe_origin(node)) b->file = fe_origin(node);
  int rc = check_spec_names(b, node, cfg, k);
  if (rc == 0 && k->build) rc = k->build(b, node, cfg, prm, in);
  b->file = saved;
  return rc;
}

int fe_field_error(FeBuild *b, json_object *node, const char *cfg, const char *field,
                   const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = fe_vasprintf(fmt, ap);
  va_end(ap);
  char *path = fe_asprintf("%s/%s", strcmp(cfg, "/") == 0 ? "" : cfg, field);
  const char *file = fe_origin_key(node, field);
  fe_error(b->diag, file ? file : b->file, path, "%s", msg);
  free(path);
  free(msg);
  return -1;
}

int fe_build_child(FeBuild *b, json_object *node, const char *field, const char *cfg,
                   const char *prm, const FeDims *in) {
  char c[512], p[512];
  fe_path_join(c, sizeof c, cfg, field);
  snprintf(p, sizeof p, "%s%s%s", prm, *prm ? "/" : "", field);
  return fe_build_node(b, fe_get_child(node, field), c, p, in);
}

/* ---- parameters --------------------------------------------------------- */

static FeParam *param_new(FeBuild *b) {
  if (b->nparams == b->capparams) {
    b->capparams = b->capparams ? 2 * b->capparams : 64;
    b->params = base_xrealloc(b->params, (size_t)b->capparams * sizeof *b->params);
  }
  FeParam *p = &b->params[b->nparams++];
  memset(p, 0, sizeof *p);
  return p;
}

/* Splits dimension `dim` of `p` over `axis`, checking it is a mesh axis not
 * already used by this parameter. */
static int split_dim(FeBuild *b, FeParam *p, int dim, const char *axis, const char *epath) {
  if (mesh_axis_index(&b->mesh, axis) < 0) {
    const char *axes[FE_MAX_MESH];
    for (int i = 0; i < b->mesh.n; i++) axes[i] = b->mesh.axes[i];
    const char *near = fe_nearest(axis, axes, b->mesh.n);
    return fe_error(b->diag, b->file, epath,
                    "axis \"%s\" is not a mesh axis (the mesh has %d "
                    "axes; see /mesh/axes)%s%s%s",
                    axis, b->mesh.n, near ? "; did you mean \"" : "", near ? near : "",
                    near ? "\"?" : "");
  }
  for (int d = 0; d < p->rank; d++) {
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s", p->spec[d]);
    for (char *sv = NULL, *t = strtok_r(tmp, "|", &sv); t; t = strtok_r(NULL, "|", &sv))
      if (strcmp(t, axis) == 0)
        return fe_error(b->diag, b->file, epath, "axis \"%s\" is used twice by parameter %s", axis,
                        p->path);
  }
  size_t len = strlen(p->spec[dim]);
  snprintf(p->spec[dim] + len, sizeof p->spec[dim] - len, "%s%s", len ? "|" : "", axis);
  return 0;
}

int64_t fe_spec_split(const FeMesh *m, const char *spec) {
  int64_t n = 1;
  char tmp[64];
  snprintf(tmp, sizeof tmp, "%s", spec);
  for (char *sv = NULL, *t = strtok_r(tmp, "|", &sv); t; t = strtok_r(NULL, "|", &sv)) {
    int i = mesh_axis_index(m, t);
    if (i >= 0) n *= m->shape[i];
  }
  return n;
}

static int check_divides(FeBuild *b, const FeParam *p, int first, const char *lead_path,
                         const char *epath) {
  for (int d = 0; d < p->rank; d++) {
    /* The expert dimension's split comes from expert_axis, the rest from the spec. */
    const char *where = d < first ? lead_path : epath;
    int64_t n = fe_spec_split(&b->mesh, p->spec[d]);
    if (p->shape[d] % n != 0)
      return fe_error(b->diag, b->file, where,
                      "mesh axes %s (%lld devices) do not divide "
                      "dimension %d (size %lld) of parameter %s (expected a divisor of %lld)",
                      p->spec[d], (long long)n, d, (long long)p->shape[d], p->path,
                      (long long)p->shape[d]);
  }
  return 0;
}

/* Applies the spec list `spec` (one entry per dimension from `first`). */
static int apply_spec(FeBuild *b, FeParam *p, json_object *spec, int first, const char *epath) {
  int want = p->rank - first;
  if ((int)json_object_array_length(spec) != want)
    return fe_error(b->diag, b->file, epath,
                    "%d entries for parameter %s of rank %d%s "
                    "(expected %d)",
                    (int)json_object_array_length(spec), p->path, want, first ? " per expert" : "",
                    want);
  for (int i = 0; i < want; i++) {
    json_object *e = json_object_array_get_idx(spec, i);
    if (json_object_get_type(e) == json_type_string) {
      if (split_dim(b, p, first + i, json_object_get_string(e), epath)) return -1;
    } else if (json_object_get_type(e) == json_type_array) {
      for (size_t j = 0; j < json_object_array_length(e); j++)
        if (split_dim(b, p, first + i, json_object_get_string(json_object_array_get_idx(e, j)),
                      epath))
          return -1;
    }
  }
  return 0;
}

static int declare(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                   const char *name, int rank, const int64_t *shape, const char *init, double std,
                   const char *spec_name, const char *lead_axis, double wd_scale,
                   const FeDims *in) {
  double numel = 1;
  for (int i = 0; i < rank; i++) numel *= (double)shape[i];
  b->total_numel += numel;
  if (numel > FE_MAX_TENSOR_NUMEL || b->total_numel > FE_MAX_TOTAL_NUMEL)
    return fe_error(b->diag, b->file, cfg,
                    "parameter %s/%s makes the model too large "
                    "(%.3g elements; expected at most %.3g in one tensor and %.3g in all)",
                    prm, name, numel, FE_MAX_TENSOR_NUMEL, FE_MAX_TOTAL_NUMEL);
  FeParam *p = param_new(b);
  size_t len = strlen(prm) + strlen(name) + 2;
  p->path = base_xmalloc(len);
  snprintf(p->path, len, "%s/%s", prm, name);
  p->origin = base_xstrdup(cfg);
  p->rank = rank;
  memcpy(p->shape, shape, (size_t)rank * sizeof *shape);
  p->dtype = in->dtype ? in->dtype : "f32";
  p->init = init;
  p->init_std = std;
  p->weight_decay_scale = wd_scale;
  char epath[512], lead_path[512];
  snprintf(epath, sizeof epath, "%s", cfg);
  snprintf(lead_path, sizeof lead_path, "%s/expert_axis", cfg);
  int first = 0;
  if (lead_axis) {
    if (split_dim(b, p, 0, lead_axis, lead_path)) return -1;
    first = 1;
  }
  json_object *specs = NULL, *spec = NULL;
  if (spec_name && json_object_object_get_ex(node, "param_partition_specs", &specs) &&
      json_object_object_get_ex(specs, spec_name, &spec)) {
    snprintf(epath, sizeof epath, "%s/param_partition_specs/%s", cfg, spec_name);
    const char *saved = b->file;
    if (fe_origin_key(specs, spec_name)) b->file = fe_origin_key(specs, spec_name);
    int rc =
        apply_spec(b, p, spec, first, epath) ? -1 : check_divides(b, p, first, lead_path, epath);
    b->file = saved;
    return rc;
  }
  return check_divides(b, p, first, lead_path, epath);
}

/* Every parameter passes through fe_lora_param, the one hook LoRA has in the walk. */
int fe_param(FeBuild *b, json_object *node, const char *cfg, const char *prm, const char *name,
             int rank, const int64_t *shape, const char *init, double std, const char *spec_name,
             const char *lead_axis, double wd_scale, const FeDims *in) {
  if (declare(b, node, cfg, prm, name, rank, shape, init, std, spec_name, lead_axis, wd_scale, in))
    return -1;
  return fe_lora_param(b, node, cfg, prm, in);
}

int fe_vocab_param(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                   const FeDims *in) {
  int64_t shape[2] = {in->vocab_size, in->dim}; /* (V, D) */
  json_object *specs = NULL, *spec = NULL;
  if (json_object_object_get_ex(node, "param_partition_specs", &specs) &&
      json_object_object_get_ex(specs, "weight", &spec) &&
      json_object_get_type(spec) == json_type_array && json_object_array_length(spec) == 2) {
    /* the vocabulary dim's axes, as "a|b" */
    json_object *e = json_object_array_get_idx(spec, 0);
    char axes[64] = "";
    if (json_object_get_type(e) == json_type_string)
      snprintf(axes, sizeof axes, "%s", json_object_get_string(e));
    for (size_t j = 0; json_object_get_type(e) == json_type_array &&
                       j < json_object_array_length(e) && strlen(axes) + 1 < sizeof axes;
         j++) {
      size_t len = strlen(axes);
      snprintf(axes + len, sizeof axes - len, "%s%s", len ? "|" : "",
               json_object_get_string(json_object_array_get_idx(e, j)));
    }
    int64_t n = fe_spec_split(&b->mesh, axes);
    if (n > 1 && in->vocab_size % n) {
      char path[512];
      snprintf(path, sizeof path, "%s/param_partition_specs/weight", cfg);
      const char *file = fe_origin_key(specs, "weight");
      return fe_error(b->diag, file ? file : b->file, path,
                      "the vocabulary (vocab_size %lld) does not divide over mesh axes %s (%lld "
                      "devices) of the vocabulary-parallel table %s/weight (expected a "
                      "vocab_size that is a multiple of %lld, e.g. %lld, or the model dim split "
                      "instead: {\"weight\": [null, \"%s\"]})",
                      (long long)in->vocab_size, axes, (long long)n, prm, (long long)n,
                      (long long)((in->vocab_size + n - 1) / n * n),
                      fe_axis_with(FE_AXIS_TENSOR)->name);
    }
  }
  b->lora.not_linear = "the vocabulary table of an embedding or an output head";
  int rc = fe_param(b, node, cfg, prm, "weight", 2, shape, "normal", fe_get_float(node, "init_std"),
                    "weight", NULL, 1.0, in);
  b->lora.not_linear = NULL;
  return rc;
}

/* ---- the training step's tensors ---------------------------------------- */

/* "65536 x 4 x 16777216 x 16777216" */
static char *fmt_dims(int rank, const int64_t *dims) {
  char *s = fe_asprintf("%lld", (long long)dims[0]);
  for (int i = 1; i < rank; i++) {
    char *t = fe_asprintf("%s x %lld", s, (long long)dims[i]);
    free(s);
    s = t;
  }
  return s;
}

void fe_step_tensor(FeBuild *b, const char *what, const char *names, int rank, const int64_t *dims,
                    json_object *node, const char *cfg, const char *field) {
  double numel = 1;
  for (int i = 0; i < rank; i++) numel *= (double)dims[i];
  if (numel <= FE_MAX_TENSOR_NUMEL || numel <= b->step_numel) return;
  /* A smaller batch (or more devices over it) helps unless one sequence is already too large. */
  bool one_seq = numel / (double)dims[0] > FE_MAX_TENSOR_NUMEL;
  if (!one_seq) {
    node = fe_get_child(b->root, "input");
    cfg = "/input";
    field = "global_batch_size";
  }
  const char *file = fe_origin_key(node, field);
  char *shape = fmt_dims(rank, dims);
  free(b->step_error);
  b->step_numel = numel;
  b->step_error = fe_asprintf(
      "%s: %s/%s: %s (%s = %s) would hold %.*g elements on each device, more than the limit "
      "of %.0f in one tensor (expected a smaller %s%s)",
      file ? file : b->file, cfg, field, what, names, shape, numel < 0x1p53 ? 16 : 4, numel,
      FE_MAX_TENSOR_NUMEL, field,
      one_seq ? "" : ", or more devices on the mesh's data, expert and fsdp axes");
  free(shape);
}

int fe_step_check(const FeBuild *b, FeDiag *d) {
  return b->step_error ? fe_error(d, NULL, NULL, "%s", b->step_error) : 0;
}

int64_t fe_param_numel(const FeParam *p) {
  int64_t n = 1;
  for (int i = 0; i < p->rank; i++) n *= p->shape[i];
  return n;
}

int fe_dtype_bytes(const char *dtype) { return strcmp(dtype, "f32") == 0 ? 4 : 2; }

/* Elements of `p` each device holds under the mesh. */
static int64_t param_shard_numel(const FeBuild *b, const FeParam *p) {
  int64_t n = 1;
  for (int i = 0; i < p->rank; i++) n *= p->shape[i] / fe_spec_split(&b->mesh, p->spec[i]);
  return n;
}

/* ---- printing ----------------------------------------------------------- */

static void fmt_shape(const FeParam *p, char *out, size_t n) {
  size_t len = (size_t)snprintf(out, n, "[");
  for (int i = 0; i < p->rank && len < n; i++)
    len += (size_t)snprintf(out + len, n - len, "%s%lld", i ? ", " : "", (long long)p->shape[i]);
  if (len < n) snprintf(out + len, n - len, "]");
}

static void fmt_spec(const FeParam *p, char *out, size_t n) {
  size_t len = (size_t)snprintf(out, n, "(");
  for (int i = 0; i < p->rank && len < n; i++) {
    /* Several axes on one dimension print as a tuple: (fsdp, data). */
    char s[64];
    snprintf(s, sizeof s, "%s", p->spec[i][0] ? p->spec[i] : "None");
    bool multi = strchr(s, '|') != NULL;
    len += (size_t)snprintf(out + len, n - len, "%s%s", i ? ", " : "", multi ? "(" : "");
    for (char *sv = NULL, *t = strtok_r(s, "|", &sv); t && len < n; t = strtok_r(NULL, "|", &sv))
      len += (size_t)snprintf(out + len, n - len, "%s%s", t == s ? "" : ", ", t);
    if (multi && len < n) len += (size_t)snprintf(out + len, n - len, ")");
  }
  if (len < n) snprintf(out + len, n - len, ")");
}

static void fmt_init(const FeParam *p, char *out, size_t n) {
  if (strcmp(p->init, "normal") == 0)
    snprintf(out, n, "normal(%g)", p->init_std);
  else
    snprintf(out, n, "%s", p->init);
}

static void fmt_count(int64_t v, char *out, size_t n) {
  char digits[32];
  snprintf(digits, sizeof digits, "%lld", (long long)v);
  size_t len = strlen(digits), j = 0;
  for (size_t i = 0; i < len && j + 2 < n; i++) {
    if (i && (len - i) % 3 == 0) out[j++] = ',';
    out[j++] = digits[i];
  }
  out[j] = 0;
}

const char *fe_human_bytes(double v, char *out, size_t n) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  snprintf(out, n, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return out;
}

/* Per device, the bytes of each kind the policy gives the parameters: the masters, the copy
 * a step reads in the compute dtype (none when that is f32), and for the parameters that
 * train (all but a LoRA run's frozen base) the gradients (accumulated in f32) and AdamW's two
 * moments. */
typedef struct {
  int64_t masters, compute, grads, optimizer;
} PolicyBytes;

static PolicyBytes policy_bytes(const FeBuild *b, const FePrecision *p) {
  PolicyBytes r = {0};
  for (int i = 0; i < b->nparams; i++) {
    int64_t n = param_shard_numel(b, &b->params[i]);
    r.masters += n * (int64_t)ir_dtype_size(p->params);
    if (p->compute != p->params) r.compute += n * (int64_t)ir_dtype_size(p->compute);
    if (b->params[i].frozen) continue; /* LoRA's base: no gradient, no optimizer state */
    r.grads += n * (int64_t)ir_dtype_size(DT_F32);
    r.optimizer += 2 * n * (int64_t)ir_dtype_size(p->optimizer);
  }
  return r;
}

static void policy_print(const FeBuild *b, json_object *cfg, FILE *out) {
  FePrecision p;
  fe_precision_facts(cfg, &p);
  PolicyBytes r = policy_bytes(b, &p);
  char m[32], c[32], g[32], o[32];
  fprintf(out,
          "precision, per device: parameters %s %s (the masters)%s%s%s%s; gradients f32 %s "
          "(reduced across devices in %s); optimizer state %s %s; activations %s\n",
          ir_dtype_name(p.params), fe_human_bytes((double)r.masters, m, sizeof m),
          r.compute ? "; read as " : "", r.compute ? ir_dtype_name(p.compute) : "",
          r.compute ? " " : "", r.compute ? fe_human_bytes((double)r.compute, c, sizeof c) : "",
          fe_human_bytes((double)r.grads, g, sizeof g), ir_dtype_name(p.grads),
          ir_dtype_name(p.optimizer), fe_human_bytes((double)r.optimizer, o, sizeof o),
          ir_dtype_name(p.compute));
}

void fe_params_print(const FeBuild *b, json_object *cfg, FILE *out) {
  int w = 4;
  for (int i = 0; i < b->nparams; i++) {
    int l = (int)strlen(b->params[i].path);
    if (l > w) w = l;
  }
  fprintf(out, "%-*s  %-22s %-5s %-13s %s\n", w, "path", "shape", "dtype", "init", "partition");
  int64_t total = 0, bytes = 0, dev_bytes = 0;
  for (int i = 0; i < b->nparams; i++) {
    const FeParam *p = &b->params[i];
    char shape[64], spec[128], init[32];
    fmt_shape(p, shape, sizeof shape);
    fmt_spec(p, spec, sizeof spec);
    fmt_init(p, init, sizeof init);
    fprintf(out, "%-*s  %-22s %-5s %-13s %s\n", w, p->path, shape, p->dtype, init, spec);
    total += fe_param_numel(p);
    bytes += fe_param_numel(p) * fe_dtype_bytes(p->dtype);
    dev_bytes += param_shard_numel(b, p) * fe_dtype_bytes(p->dtype);
  }
  char cnt[48], bt[32], dbt[32];
  fmt_count(total, cnt, sizeof cnt);
  fe_human_bytes((double)bytes, bt, sizeof bt);
  fe_human_bytes((double)dev_bytes, dbt, sizeof dbt);
  fprintf(out, "\n%d tensors, %s parameters, %s", b->nparams, cnt, bt);
  fprintf(out, "; %s per device on a mesh of %lld devices (", dbt, (long long)b->mesh.devices);
  for (int i = 0; i < b->mesh.n; i++)
    fprintf(out, "%s%s=%lld", i ? ", " : "", b->mesh.axes[i], (long long)b->mesh.shape[i]);
  fprintf(out, ")\n");
  int64_t tn;
  int nt = fe_lora_trainable(b, &tn);
  if (nt < b->nparams) {
    fmt_count(tn, cnt, sizeof cnt);
    fprintf(out,
            "trainable: %d tensors, %s parameters (LoRA adapters on %d projections); the "
            "other %d tensors are frozen\n",
            nt, cnt, b->lora.matched, b->nparams - nt);
  }
  policy_print(b, cfg, out);
}

char *fe_params_json(const FeBuild *b, json_object *cfg) {
  json_object *root = json_object_new_object(), *list = json_object_new_array();
  int64_t total = 0, bytes = 0, dev_bytes = 0;
  for (int i = 0; i < b->nparams; i++) {
    const FeParam *p = &b->params[i];
    json_object *o = json_object_new_object(), *shape = json_object_new_array(),
                *spec = json_object_new_array();
    for (int d = 0; d < p->rank; d++) {
      json_object_array_add(shape, json_object_new_int64(p->shape[d]));
      json_object_array_add(spec, p->spec[d][0] ? json_object_new_string(p->spec[d]) : NULL);
    }
    json_object_object_add(o, "path", json_object_new_string(p->path));
    json_object_object_add(o, "shape", shape);
    json_object_object_add(o, "dtype", json_object_new_string(p->dtype));
    json_object_object_add(o, "init", json_object_new_string(p->init));
    json_object_object_add(o, "init_std", json_object_new_double(p->init_std));
    json_object_object_add(o, "partition_spec", spec);
    json_object_object_add(o, "weight_decay_scale", json_object_new_double(p->weight_decay_scale));
    json_object_object_add(o, "config_path", json_object_new_string(p->origin));
    json_object_object_add(o, "count", json_object_new_int64(fe_param_numel(p)));
    json_object_object_add(o, "trainable", json_object_new_boolean(!p->frozen));
    json_object_array_add(list, o);
    total += fe_param_numel(p);
    bytes += fe_param_numel(p) * fe_dtype_bytes(p->dtype);
    dev_bytes += param_shard_numel(b, p) * fe_dtype_bytes(p->dtype);
  }
  json_object *mesh = json_object_new_object();
  for (int i = 0; i < b->mesh.n; i++)
    json_object_object_add(mesh, b->mesh.axes[i], json_object_new_int64(b->mesh.shape[i]));
  json_object_object_add(root, "params", list);
  json_object_object_add(root, "total_params", json_object_new_int64(total));
  json_object_object_add(root, "total_bytes", json_object_new_int64(bytes));
  int64_t tn;
  fe_lora_trainable(b, &tn);
  json_object_object_add(root, "trainable_params", json_object_new_int64(tn));
  json_object_object_add(root, "per_device_bytes", json_object_new_int64(dev_bytes));
  json_object_object_add(root, "devices", json_object_new_int64(b->mesh.devices));
  json_object_object_add(root, "mesh", mesh);
  FePrecision p;
  fe_precision_facts(cfg, &p);
  PolicyBytes r = policy_bytes(b, &p);
  json_object *pol = json_object_new_object();
  json_object_object_add(pol, "params", json_object_new_string(ir_dtype_name(p.params)));
  json_object_object_add(pol, "compute", json_object_new_string(ir_dtype_name(p.compute)));
  json_object_object_add(pol, "grads", json_object_new_string(ir_dtype_name(p.grads)));
  json_object_object_add(pol, "optimizer", json_object_new_string(ir_dtype_name(p.optimizer)));
  json_object_object_add(pol, "master_bytes_per_device", json_object_new_int64(r.masters));
  json_object_object_add(pol, "compute_copy_bytes_per_device", json_object_new_int64(r.compute));
  json_object_object_add(pol, "grad_bytes_per_device", json_object_new_int64(r.grads));
  json_object_object_add(pol, "optimizer_bytes_per_device", json_object_new_int64(r.optimizer));
  json_object_object_add(root, "precision", pol);
  char *s = fe_json_canonical(root);
  json_object_put(root);
  return s;
}
