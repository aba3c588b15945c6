/* backend_test.h: helpers shared by the backend_ CUnit tests.
 *
 * bt_check runs a graph on the reference interpreter and through the LLVM backend (compile,
 * JIT, one call of axlc_step on a slab) with the same parameters and inputs, and compares every
 * output. The slab starts filled with NaNs, so a kernel that reads a buffer nothing wrote shows.
 * Plans: pass_memplan (buffers shared by liveness, fusion unknown to it: the backend's check
 * must keep fused inputs alive), pass_memplan_fused (told which values are fused), or
 * bt_plan_simple (one buffer per value), which tests the kernels apart from the planner.
 */
#ifndef AXLC_TESTS_BACKEND_TEST_H
#define AXLC_TESTS_BACKEND_TEST_H

#include "tests/cunit_check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/llvm/llvm.h"

typedef struct BtBind { /* explicit data for a parameter or input (else random) */
  const char *name;
  const double *data;
} BtBind;

static inline int64_t bt_align(int64_t n) { return (n + 63) / 64 * 64; }

static inline int bt_plan_simple(const IrGraph *g, MemPlan *p) {
  memset(p, 0, sizeof *p);
  p->nvalues = g->nvalues;
  p->offset = calloc((size_t)g->nvalues + 1, sizeof *p->offset);
  p->bytes = calloc((size_t)g->nvalues + 1, sizeof *p->bytes);
  for (int32_t v = 0; v < g->nvalues; v++) {
    p->offset[v] = p->slab_bytes;
    p->bytes[v] = ir_shape_numel(&g->values[v].shape) * (int64_t)ir_dtype_size(g->values[v].dtype);
    p->slab_bytes += bt_align(p->bytes[v]);
  }
  return 0;
}

/* Deterministic data: f32 (bf16) in [-1, 1), i32 in [0, 4). */
static inline void bt_random(const IrValue *x, double *d, uint64_t *s) {
  for (int64_t i = 0, n = ir_shape_numel(&x->shape); i < n; i++) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(*s >> 11) / 9007199254740992.0;
    d[i] = x->dtype == DT_I32 ? (double)(int)(u * 4) : ir_dtype_round(x->dtype, 2 * u - 1);
  }
}

static inline const double *bt_bound(const BtBind *b, int nb, const char *name) {
  for (int i = 0; i < nb; i++)
    if (!strcmp(b[i].name, name)) return b[i].data;
  return NULL;
}

/* Element data for every leaf: (nvalues) arrays, NULL for non-leaves. */
static inline double **bt_leaf_data(const IrGraph *g, const BtBind *b, int nb) {
  double **d = calloc((size_t)g->nvalues + 1, sizeof *d);
  uint64_t seed = 12345;
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (x->op != IR_PARAMETER && x->op != IR_INPUT) continue;
    int64_t n = ir_shape_numel(&x->shape);
    d[v] = malloc((size_t)(n ? n : 1) * sizeof **d);
    const double *given = bt_bound(b, nb, x->name);
    if (given)
      memcpy(d[v], given, (size_t)n * sizeof **d);
    else
      bt_random(x, d[v], &seed);
  }
  return d;
}

static inline void bt_slab_put(const IrGraph *g, const MemPlan *mp, char *slab, int32_t v,
                               const double *d) {
  int64_t n = ir_shape_numel(&g->values[v].shape);
  for (int64_t i = 0; i < n; i++) {
    if (g->values[v].dtype == DT_I32)
      ((int32_t *)(slab + mp->offset[v]))[i] = (int32_t)d[i];
    else if (g->values[v].dtype == DT_BF16) /* rounded once, as the interpreter binds it */
      ((uint16_t *)(slab + mp->offset[v]))[i] =
          rt_bf16_from_f32((float)ir_dtype_round(DT_BF16, d[i]));
    else
      ((float *)(slab + mp->offset[v]))[i] = (float)d[i];
  }
}

static inline double bt_slab_get(const IrGraph *g, const MemPlan *mp, const char *slab, int32_t v,
                                 int64_t i) {
  if (g->values[v].dtype == DT_I32) return ((const int32_t *)(slab + mp->offset[v]))[i];
  if (g->values[v].dtype == DT_BF16)
    return rt_bf16_to_f32(((const uint16_t *)(slab + mp->offset[v]))[i]);
  return ((const float *)(slab + mp->offset[v]))[i];
}

/* Compares output o against want (numel n): |got - want| <= rtol * (|want| + max|want| / 100). */
static inline int bt_compare(const IrGraph *g, const MemPlan *mp, const char *slab,
                             const IrOutput *o, const double *want, double rtol, const char *what) {
  int32_t v = o->value;
  int64_t n = ir_shape_numel(&g->values[v].shape), bad = 0;
  double scale = 0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) {
    double got = bt_slab_get(g, mp, slab, v, i);
    bool same = (isnan(got) && isnan(want[i])) || got == want[i] ||
                fabs(got - want[i]) <= rtol * (fabs(want[i]) + scale / 100);
    if (!same && bad++ < 3)
      fprintf(stderr, "%s: output %s (%%%d %s) [%lld]: got %.9g, want %.9g\n", what, o->name, v,
              ir_op_name(g->values[v].op), (long long)i, got, want[i]);
  }
  CU_ASSERT_EQUAL(bad, 0);
  return bad ? -1 : 0;
}

static inline IrInterp *bt_interp(const IrGraph *g, double **leaf) {
  IrInterp *it = ir_interp_new(g, NULL);
  for (int32_t v = 0; v < g->nvalues; v++)
    if (leaf[v]) {
      const IrShape *s = &g->values[v].shape;
      CU_ASSERT_EQUAL(ir_interp_set(it, -1, g->values[v].name, s->rank, s->dims, leaf[v]), IR_OK);
    }
  if (ir_interp_run(it) != IR_OK) {
    fprintf(stderr, "interp: %s\n", ir_interp_error(it));
    CU_FAIL("interpreter");
  }
  return it;
}

/* Compiles, JITs and runs one step of g on a slab filled from leaf; NULL on failure. */
static inline char *bt_run_backend(const IrGraph *g, const MemPlan *mp, const LlvmOptions *o,
                                   double **leaf, RtPool *pool, const char *what) {
  char err[1024];
  LlvmModule *m;
  LlvmJit *jit;
  LlvmStepFn step;
  if (llvm_compile(g, mp, o, &m, err, sizeof err) || llvm_jit(m, &step, &jit, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", what, err);
    CU_FAIL("compile or JIT");
    return NULL;
  }
  llvm_module_free(m);
  char *slab = aligned_alloc(64, (size_t)bt_align(mp->slab_bytes + 1));
  memset(slab, 0xff, (size_t)bt_align(mp->slab_bytes + 1));
  for (int32_t v = 0; v < g->nvalues; v++)
    if (leaf[v]) bt_slab_put(g, mp, slab, v, leaf[v]);
  step(slab, pool, NULL);
  llvm_jit_free(jit);
  return slab;
}

enum { BT_PLAN_SIMPLE, BT_PLAN_MEMPLAN, BT_PLAN_FUSED };

/* A plan of kind BT_PLAN_*; BT_PLAN_FUSED: pass_memplan_fused with pass_fusion_plan. */
static inline int bt_plan(IrGraph *g, int kind, MemPlan *mp) {
  if (kind == BT_PLAN_SIMPLE) return bt_plan_simple(g, mp);
  if (kind == BT_PLAN_MEMPLAN) return pass_memplan(g, mp);
  bool *mat = malloc((size_t)g->nvalues + 1);
  int rc = pass_fusion_plan(g, mat) ? -1 : pass_memplan_fused(g, mat, mp);
  if (rc == 0) CU_ASSERT_EQUAL(pass_memplan_conflicts(g, mat, mp), 0);
  free(mat);
  return rc;
}

#if AXLC_HAVE_RT_POOL
static inline RtPool *bt_pool(void) {
  RtPool *p = NULL;
  CU_ASSERT_EQUAL(rt_pool_new(&p, 3, NULL), 0);
  return p;
}
static inline void bt_pool_free(RtPool *p) { rt_pool_free(p); }
#else
/* Until runtime/pool.c exists: a serial rt_parallel_for over three uneven chunks, which tests
 * the kernels' [lo, hi) splitting. The JIT finds it in this executable (ENABLE_EXPORTS). */
void rt_parallel_for(RtPool *pool, int64_t n, void (*fn)(void *, int64_t, int64_t), void *ctx) {
  (void)pool;
  int64_t a = n / 3, b = n - n / 4;
  fn(ctx, 0, a);
  fn(ctx, a, b);
  fn(ctx, b, n);
}
static inline RtPool *bt_pool(void) { return (RtPool *)&bt_pool; /* any non-NULL pool */ }
static inline void bt_pool_free(RtPool *p) { (void)p; }
#endif

/* The whole check for one plan and option set. */
static inline void bt_check_with(IrGraph *g, const BtBind *b, int nb, const LlvmOptions *o,
                                 int plan, double rtol, const char *what) {
  bool memplan = plan != BT_PLAN_SIMPLE;
  double **leaf = bt_leaf_data(g, b, nb);
  IrInterp *it = bt_interp(g, leaf);
  MemPlan mp;
  int prc = bt_plan(g, plan, &mp);
  if (prc != 0) fprintf(stderr, "%s: memplan: %s\n", what, ir_graph_error(g));
  CU_ASSERT_EQUAL_FATAL(prc, 0);
  RtPool *pool = o->threads ? bt_pool() : NULL;
  char *slab = bt_run_backend(g, &mp, o, leaf, pool, what);
  bt_pool_free(pool);
  for (int32_t i = 0; slab && i < g->noutputs; i++)
    bt_compare(g, &mp, slab, &g->outputs[i], ir_interp_value(it, 0, g->outputs[i].value), rtol,
               what);
  free(slab);
  if (memplan)
    pass_memplan_free(&mp);
  else {
    free(mp.offset);
    free(mp.bytes);
  }
  for (int32_t v = 0; v < g->nvalues; v++) free(leaf[v]);
  free(leaf);
  ir_interp_free(it);
}

/* Every variant: fused O3 on the three plans and split over threads, and unfused O0 without
 * BLAS. */
static inline void bt_check(IrGraph *g, const BtBind *b, int nb, double rtol) {
  char msg[512];
  if (ir_graph_verify(g, msg, sizeof msg) != IR_OK) fprintf(stderr, "verify: %s\n", msg);
  CU_ASSERT_EQUAL_FATAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  LlvmOptions o = llvm_options_default();
  bt_check_with(g, b, nb, &o, BT_PLAN_SIMPLE, rtol, "O3 fused, simple plan");
  bt_check_with(g, b, nb, &o, BT_PLAN_MEMPLAN, rtol, "O3 fused, memplan");
  bt_check_with(g, b, nb, &o, BT_PLAN_FUSED, rtol, "O3 fused, memplan_fused");
  o.threads = true;
  o.parallel_min = 1;
  bt_check_with(g, b, nb, &o, BT_PLAN_MEMPLAN, rtol, "O3 fused, split over threads");
  o.threads = false;
  o.opt_level = 0;
  o.fuse = false;
  o.blas = false;
  bt_check_with(g, b, nb, &o, BT_PLAN_SIMPLE, rtol, "O0 unfused, no BLAS");
}

/* The op cases backend_ops and backend_bf16 share (op_cases.c): floating values of dtype dt,
 * results within rtol of the interpreter's. */
void op_unary(IrDType dt, double rtol);
void op_binary(IrDType dt, double rtol);
void op_reduce_runs(IrDType dt, double rtol);
void op_dot(IrDType dt, double rtol);
void op_gather_scatter_topk(IrDType dt, double rtol);
void op_attention(IrDType dt, double rtol);
/* Defines the cases test_unary, test_binary, test_reduce_runs, test_dot,
 * test_gather_scatter_topk and test_attention: op_cases.c's on dtype dt within rtol. */
#define OP_CASES(dt, rtol)                                                                         \
  static void test_unary(void) { op_unary(dt, rtol); }                                             \
  static void test_binary(void) { op_binary(dt, rtol); }                                           \
  static void test_reduce_runs(void) { op_reduce_runs(dt, rtol); }                                 \
  static void test_dot(void) { op_dot(dt, rtol); }                                                 \
  static void test_gather_scatter_topk(void) { op_gather_scatter_topk(dt, rtol); }                 \
  static void test_attention(void) { op_attention(dt, rtol); }

#endif
