/* elastic.c: the mesh and microbatches of a job on fewer ranks, for the supervisor's elastic
 * shrink (launch/launch.h: LaunchRebuild; driver.h: drv_elastic_plan).
 *
 * The plan reads the resolved config a trainer embeds (`TRAINER --config`) and the frontend's
 * axis table: which axes split the batch (FE_AXIS_BATCH) and in which order they give up devices,
 * those that carry no experts first, in the order of fe_axes (data, fsdp), then the expert axis
 * (its experts per device would change). The global batch stays, so the data order stays; the
 * microbatches rise so that a microbatch holds the rows per device it held. */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "driver/driver.h"

/* The mesh of the config (axes in the order of /mesh/axes, sizes of /mesh/shape; -1: sized by
 * the device count). */
typedef struct Mesh {
  int n;
  const FeAxis *axes[IR_MAX_MESH_AXES]; /* NULL: an axis the table does not name */
  int64_t shape[IR_MAX_MESH_AXES];
} Mesh;

static int64_t int_at(json_object *o, const char *a, const char *b, int64_t dflt) {
  json_object *x, *y;
  if (!json_object_object_get_ex(o, a, &x) || !json_object_object_get_ex(x, b, &y)) return dflt;
  return json_object_get_int64(y);
}

/* 0, or -1 when the config has no such mesh. */
static int mesh_read(json_object *cfg, Mesh *m) {
  json_object *mesh, *axes, *shape;
  if (!json_object_object_get_ex(cfg, "mesh", &mesh) ||
      !json_object_object_get_ex(mesh, "axes", &axes) ||
      !json_object_object_get_ex(mesh, "shape", &shape) ||
      json_object_array_length(axes) != json_object_array_length(shape) ||
      json_object_array_length(axes) > IR_MAX_MESH_AXES)
    return -1;
  m->n = (int)json_object_array_length(axes);
  for (int i = 0; i < m->n; i++) {
    const char *name = json_object_get_string(json_object_array_get_idx(axes, (size_t)i));
    m->axes[i] = name ? fe_axis(name) : NULL;
    m->shape[i] = json_object_get_int64(json_object_array_get_idx(shape, (size_t)i));
  }
  return 0;
}

static bool splits_batch(const FeAxis *a) { return a && (a->roles & FE_AXIS_BATCH); }

/* The batch shards of mesh m on `devices` devices (a -1 axis sized by them), or 0 when the
 * mesh does not fit that count. */
static int64_t batch_shards(const Mesh *m, int64_t devices) {
  int64_t fixed = 1, shards = 1, free_axis = -1;
  for (int i = 0; i < m->n; i++)
    if (m->shape[i] < 0)
      free_axis = i;
    else
      fixed *= m->shape[i];
  if (fixed <= 0 || devices % fixed) return 0;
  if (free_axis < 0 && fixed != devices) return 0;
  for (int i = 0; i < m->n; i++)
    if (splits_batch(m->axes[i])) shards *= i == free_axis ? devices / fixed : m->shape[i];
  return shards;
}

/* A mesh for `to` devices from m on `from`: a -1 axis stays (the target sizes it); else the
 * first batch axis in shrink order whose size the factor from/to divides gives it up. 0, or -1
 * when none. */
static int mesh_shrink(const Mesh *m, int from, int to, Mesh *out) {
  *out = *m;
  for (int i = 0; i < m->n; i++)
    if (m->shape[i] < 0) return batch_shards(out, to) ? 0 : -1;
  if (from % to) return -1;
  int64_t f = from / to;
  for (int pass = 0; pass < 2; pass++) /* the expert axis in the second pass */
    for (int k = 0; k < fe_naxes; k++) {
      const FeAxis *a = &fe_axes[k];
      if (!splits_batch(a) || (bool)(a->roles & FE_AXIS_EXPERTS) != (pass == 1)) continue;
      for (int i = 0; i < m->n; i++)
        if (m->axes[i] == a && m->shape[i] % f == 0) {
          out->shape[i] = m->shape[i] / f;
          return 0;
        }
    }
  return -1;
}

int drv_elastic_plan(const char *config, int from, int to, DrvElasticPlan *plan, char *why,
                     size_t cap) {
  json_object *cfg = json_tokener_parse(config);
  Mesh m, small;
  int64_t global = int_at(cfg, "input", "global_batch_size", 0);
  int64_t mb = int_at(cfg, "learner", "microbatches", 1);
  int bad = !cfg || mesh_read(cfg, &m) || global <= 0 || mb <= 0;
  /* the interleaved pipeline schedule runs microbatches in groups of its stages */
  int64_t group = 1;
  json_object *mesh, *sched;
  if (!bad && json_object_object_get_ex(cfg, "mesh", &mesh) &&
      json_object_object_get_ex(mesh, "pipeline_schedule", &sched) &&
      !strcmp(json_object_get_string(sched), "interleaved"))
    for (int i = 0; i < m.n; i++)
      if (m.axes[i] && !strcmp(m.axes[i]->name, "pipeline") && m.shape[i] > 1) group = m.shape[i];
  json_object_put(cfg);
  if (bad) {
    snprintf(why, cap,
             "the config has no /mesh/axes and /mesh/shape, /input/global_batch_size "
             "or /learner/microbatches");
    return -1;
  }
  int64_t s_old = batch_shards(&m, from), s_new = 0;
  if (!s_old || mesh_shrink(&m, from, to, &small) || !(s_new = batch_shards(&small, to)) ||
      global % s_new) {
    snprintf(why, cap, "no mesh of %d ranks keeps this job's global batch of %lld", to,
             (long long)global);
    return -1;
  }
  /* rows per microbatch and device before: global / s_old / mb; keep it, or the next count
   * above that divides the rows each device now holds (and is a multiple of the group) */
  int64_t rows = global / s_new, k = (mb * s_old + s_new - 1) / s_new;
  while (k <= rows && (rows % k || k % group)) k++;
  if (k > rows) {
    snprintf(why, cap, "no microbatch count divides the %lld rows per device of %d ranks",
             (long long)rows, to);
    return -1;
  }
  plan->naxes = small.n;
  memcpy(plan->shape, small.shape, sizeof plan->shape);
  plan->microbatches = k;
  plan->global_batch = global;
  return 0;
}
