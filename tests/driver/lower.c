/* lower.c: the driver tests' shared helpers (lower.h). */
#include "tests/driver/lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/axrt.h"

int test_lower(DrvJob *j, const char *model, const char *target, const char **sets, int nsets,
               const char *after, bool quiet) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", AXLC_MODELS, model);
  FeOptions opt = {.target = target, .sets = sets, .nsets = nsets};
  if (drv_load(j, path, &opt) || drv_lower(j, after)) {
    if (!quiet) fe_diag_print(&j->diag, stderr);
    return -1;
  }
  return 0;
}

double *test_leaf_values(const IrValue *v, const IrShape *s, int64_t vocab, uint64_t seed) {
  int64_t n = ir_shape_numel(s);
  double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
  uint64_t h = rt_fnv1a64(v->name);
  for (int64_t k = 0; k < n; k++) {
    double u = (double)(rt_rng_u64(seed, v->name, k, 0) >> 11) / 9007199254740992.0;
    if (v->op == IR_INPUT && strcmp(v->name, "step") == 0)
      d[k] = 3;
    else if (v->op == IR_INPUT)
      d[k] = (double)((k * 37 + (int64_t)(h % 101)) % vocab);
    else if (!strncmp(v->name, "opt/v/", 6))
      d[k] = 1e-4 * u;
    else if (!strncmp(v->name, "opt/m/", 6))
      d[k] = 1e-2 * (u - 0.5);
    else
      d[k] = 0.6 * (u - 0.5) + (strstr(v->name, "scale") ? 1.0 : 0.0);
  }
  return d;
}

int test_count_op(const IrGraph *g, IrOp op) {
  int n = 0;
  for (int32_t v = 0; v < g->nvalues; v++) n += g->values[v].op == op;
  return n;
}
