/* test_autodiff.c: reverse-mode gradients against central finite differences, in f64, for every
 * op that has a gradient rule (a test fails if one is missing), on 1, 2 and 4 simulated devices,
 * plus a composite: softmax cross-entropy of a tiny MLP. */
#include "passes/passes.h"
#include "tests/ir/ir_test.h"

typedef int32_t (*Build)(IrGraph *g, const int32_t *p);

typedef struct FdCase {
  IrOp op;     /* the op whose rule this case covers */
  Build build; /* NULL: op applied to the parameters */
  int np;
  int32_t rank[3];
  int64_t dims[3][4];
  double lo, hi; /* parameter values drawn from [lo, hi] */
  int ndev;      /* 1, 2 (axis "x") or 4 ("x" by "y") */
} FdCase;

/* ---- builders for ops that need attributes ---- */

static const char *ax_x[] = {"x"}, *ax_xy[] = {"y", "x"};

static int32_t b_select(IrGraph *g, const int32_t *p) {
  const IrShape s = g->values[p[0]].shape;
  int32_t pred = ir_gt(g, p[0], ir_const_scalar(g, DT_F64, 0, s.rank, s.dims));
  return ir_select(g, pred, p[0], p[1]);
}
static int32_t b_cast(IrGraph *g, const int32_t *p) {
  return ir_cast(g, ir_mul(g, ir_cast(g, p[0], DT_F32), ir_cast(g, p[0], DT_F32)), DT_F64);
}
static int32_t b_broadcast(IrGraph *g, const int32_t *p) {
  return ir_broadcast(g, p[0], 3, (int64_t[]){2, 3, 4}, (int32_t[]){0, 1});
}
static int32_t b_reshape(IrGraph *g, const int32_t *p) {
  return ir_reshape(g, p[0], 2, (int64_t[]){3, 2});
}
static int32_t b_transpose(IrGraph *g, const int32_t *p) {
  return ir_transpose(g, p[0], (int32_t[]){2, 0, 1});
}
static int32_t b_slice(IrGraph *g, const int32_t *p) {
  return ir_slice(g, p[0], (int64_t[]){1, 0}, (int64_t[]){3, 3});
}
static int32_t b_concat(IrGraph *g, const int32_t *p) {
  return ir_concat(g, 3, (int32_t[]){p[0], p[1], p[0]}, 1);
}
static int32_t b_pad(IrGraph *g, const int32_t *p) {
  return ir_pad(g, p[0], (int64_t[]){1, 0}, (int64_t[]){0, 2}, 0.5);
}
static int32_t b_sum(IrGraph *g, const int32_t *p) {
  return ir_reduce_sum(g, p[0], 2, (int32_t[]){0, 2});
}
static int32_t b_max(IrGraph *g, const int32_t *p) {
  return ir_reduce_max(g, p[0], 1, (int32_t[]){1});
}
static int32_t b_dot_batched(IrGraph *g, const int32_t *p) { /* (2,3,4) x (2,5,3) -> (2,4,5) */
  return ir_dot(g, p[0], p[1], 1, (int32_t[]){0}, (int32_t[]){0}, 1, (int32_t[]){1},
                (int32_t[]){2});
}
static int32_t b_dot_two(IrGraph *g, const int32_t *p) { /* (3,2,4) x (4,3,5), unsorted -> (2,5) */
  return ir_dot(g, p[0], p[1], 0, NULL, NULL, 2, (int32_t[]){0, 2}, (int32_t[]){1, 0});
}
static int32_t b_dot_mixed(IrGraph *g,
                           const int32_t *p) { /* (4,2,3) x (3,2,5): batch 1/1 -> (2,4,5) */
  return ir_dot(g, p[0], p[1], 1, (int32_t[]){1}, (int32_t[]){1}, 1, (int32_t[]){2},
                (int32_t[]){0});
}
static int32_t b_gather(IrGraph *g, const int32_t *p) {
  int32_t idx = ir_const_data(g, DT_I32, (double[]){1, 3, 1, 0}, 2, (int64_t[]){2, 2});
  return ir_gather(g, p[0], idx);
}
static int32_t b_scatter(IrGraph *g, const int32_t *p) {
  int32_t idx = ir_const_data(g, DT_I32, (double[]){2, 0, 2}, 1, (int64_t[]){3});
  return ir_scatter_add(g, idx, p[0], 4);
}
static int32_t b_attention(IrGraph *g, const int32_t *p) {
  return ir_attention(g, p[0], p[1], p[2], false, 0.7);
}
static int32_t b_attention_causal(IrGraph *g, const int32_t *p) {
  return ir_attention(g, p[0], p[1], p[2], true, 0.5);
}
static int32_t b_all_reduce(IrGraph *g, const int32_t *p) {
  return ir_all_reduce(g, ir_mul(g, p[0], p[0]), 1, ax_x);
}
static int32_t b_all_gather(IrGraph *g, const int32_t *p) {
  return ir_all_gather(g, p[0], 1, ax_x, 1);
}
static int32_t b_reduce_scatter(IrGraph *g, const int32_t *p) {
  return ir_reduce_scatter(g, p[0], 1, ax_x, 0);
}
static int32_t b_all_to_all(IrGraph *g, const int32_t *p) {
  return ir_all_to_all(g, p[0], 1, ax_x, 0, 1);
}
static int32_t b_all_gather4(IrGraph *g, const int32_t *p) {
  return ir_all_gather(g, ir_sin(g, p[0]), 2, ax_xy, 0);
}
static int32_t b_all_to_all4(IrGraph *g, const int32_t *p) {
  return ir_all_to_all(g, p[0], 2, ax_xy, 1, 0);
}

#define SHAPE1(r, ...)                                                                             \
  1, {r}, {                                                                                        \
    { __VA_ARGS__ }                                                                                \
  }

static const FdCase cases[] = {
    {IR_NEG, NULL, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_EXP, NULL, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_LOG, NULL, SHAPE1(2, 2, 3), 0.5, 2, 1},
    {IR_TANH, NULL, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_SQRT, NULL, SHAPE1(2, 2, 3), 0.5, 2, 1},
    {IR_RSQRT, NULL, SHAPE1(2, 2, 3), 0.5, 2, 1},
    {IR_ABS, NULL, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_SIN, NULL, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_COS, NULL, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_ERF, NULL, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_LOGISTIC, NULL, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_ADD, NULL, 2, {2, 2}, {{2, 3}, {2, 3}}, -1.5, 1.5, 1},
    {IR_SUB, NULL, 2, {2, 2}, {{2, 3}, {2, 3}}, -1.5, 1.5, 1},
    {IR_MUL, NULL, 2, {2, 2}, {{2, 3}, {2, 3}}, -1.5, 1.5, 1},
    {IR_DIV, NULL, 2, {2, 2}, {{2, 3}, {2, 3}}, 0.5, 2, 1},
    {IR_MAX, NULL, 2, {2, 2}, {{2, 3}, {2, 3}}, -1.5, 1.5, 1},
    {IR_MIN, NULL, 2, {2, 2}, {{2, 3}, {2, 3}}, -1.5, 1.5, 1},
    {IR_POW, NULL, 2, {2, 2}, {{2, 3}, {2, 3}}, 0.5, 2, 1},
    {IR_SELECT, b_select, 2, {2, 2}, {{2, 3}, {2, 3}}, -1.5, 1.5, 1},
    {IR_CAST, b_cast, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_BROADCAST, b_broadcast, SHAPE1(2, 2, 1), -1.5, 1.5, 1},
    {IR_RESHAPE, b_reshape, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_TRANSPOSE, b_transpose, SHAPE1(3, 2, 3, 4), -1.5, 1.5, 1},
    {IR_SLICE, b_slice, SHAPE1(2, 3, 4), -1.5, 1.5, 1},
    {IR_CONCAT, b_concat, 2, {2, 2}, {{2, 3}, {2, 2}}, -1.5, 1.5, 1},
    {IR_PAD, b_pad, SHAPE1(2, 2, 3), -1.5, 1.5, 1},
    {IR_REDUCE_SUM, b_sum, SHAPE1(3, 2, 3, 4), -1.5, 1.5, 1},
    {IR_REDUCE_MAX, b_max, SHAPE1(3, 2, 3, 4), -1.5, 1.5, 1},
    {IR_DOT, b_dot_batched, 2, {3, 3}, {{2, 3, 4}, {2, 5, 3}}, -1.5, 1.5, 1},
    {IR_DOT, b_dot_two, 2, {3, 3}, {{3, 2, 4}, {4, 3, 5}}, -1.5, 1.5, 1},
    {IR_DOT, b_dot_mixed, 2, {3, 3}, {{4, 2, 3}, {3, 2, 5}}, -1.5, 1.5, 1},
    {IR_GATHER, b_gather, SHAPE1(2, 4, 3), -1.5, 1.5, 1},
    {IR_SCATTER_ADD, b_scatter, SHAPE1(2, 3, 2), -1.5, 1.5, 1},
    {IR_ATTENTION, b_attention, 3, {3, 3, 3}, {{2, 5, 3}, {2, 5, 3}, {2, 5, 3}}, -1.5, 1.5, 1},
    {IR_ATTENTION,
     b_attention_causal,
     3,
     {4, 4, 4},
     {{2, 1, 4, 3}, {2, 1, 4, 3}, {2, 1, 4, 3}},
     -1.5,
     1.5,
     1},
    {IR_ALL_REDUCE, b_all_reduce, SHAPE1(2, 2, 3), -1.5, 1.5, 2},
    {IR_ALL_GATHER, b_all_gather, SHAPE1(2, 2, 3), -1.5, 1.5, 2},
    {IR_REDUCE_SCATTER, b_reduce_scatter, SHAPE1(2, 4, 3), -1.5, 1.5, 2},
    {IR_ALL_TO_ALL, b_all_to_all, SHAPE1(2, 4, 2), -1.5, 1.5, 2},
    {IR_ALL_GATHER, b_all_gather4, SHAPE1(2, 2, 3), -1.5, 1.5, 4},
    {IR_ALL_TO_ALL, b_all_to_all4, SHAPE1(2, 3, 8), -1.5, 1.5, 4},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

/* ---- the harness ---- */

/* Deterministic values in [lo, hi]: a small LCG, reseeded per case. */
static double next_value(uint64_t *s, double lo, double hi) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (double)(*s >> 11) / 9007199254740992.0;
}

/* loss = sum(y * w) with fixed weights w, so every output element matters differently. */
static int32_t weighted_sum(IrGraph *g, int32_t y) {
  IrShape s = g->values[y].shape;
  int64_t n = ir_shape_numel(&s);
  double *w = malloc((size_t)n * sizeof *w);
  for (int64_t i = 0; i < n; i++) w[i] = 0.5 + 0.4 * sin(1.0 + (double)i);
  int32_t wc = ir_const_data(g, g->values[y].dtype, w, s.rank, s.dims);
  free(w);
  int32_t axes[IR_MAX_RANK];
  for (int32_t d = 0; d < s.rank; d++) axes[d] = d;
  return ir_reduce_sum(g, ir_mul(g, y, wc), s.rank, axes);
}

typedef struct Fd {
  const IrGraph *g;
  IrInterp *it;
  int np;
  const char *names[3];
  int32_t pv[3];
  double *vals[4][3]; /* [device][param] */
} Fd;

static double total_loss(Fd *f) {
  for (int64_t d = 0; d < ir_interp_devices(f->it); d++)
    for (int i = 0; i < f->np; i++) {
      const IrShape *s = &f->g->values[f->pv[i]].shape;
      ir_interp_set(f->it, d, f->names[i], s->rank, s->dims, f->vals[d][i]);
    }
  if (ir_interp_run(f->it)) {
    fprintf(stderr, "run: %s\n", ir_interp_error(f->it));
    return NAN;
  }
  double sum = 0;
  for (int64_t d = 0; d < ir_interp_devices(f->it); d++)
    sum += ir_interp_output(f->it, d, "loss", NULL)[0];
  return sum;
}

/* Compares every analytic gradient element with a central difference. Returns failures. */
static int fd_compare(Fd *f, const char *label) {
  int bad = 0;
  total_loss(f);
  int64_t ndev = ir_interp_devices(f->it);
  double *an[4][3];
  for (int64_t d = 0; d < ndev; d++)
    for (int i = 0; i < f->np; i++) {
      char out[32];
      snprintf(out, sizeof out, "grad:%s", f->names[i]);
      int64_t n = ir_shape_numel(&f->g->values[f->pv[i]].shape);
      an[d][i] = malloc((size_t)n * sizeof(double));
      memcpy(an[d][i], ir_interp_output(f->it, d, out, NULL), (size_t)n * sizeof(double));
    }
  const double h = 1e-6;
  for (int64_t d = 0; d < ndev; d++)
    for (int i = 0; i < f->np; i++)
      for (int64_t e = 0, n = ir_shape_numel(&f->g->values[f->pv[i]].shape); e < n; e++) {
        double x0 = f->vals[d][i][e];
        f->vals[d][i][e] = x0 + h;
        double up = total_loss(f);
        f->vals[d][i][e] = x0 - h;
        double down = total_loss(f);
        f->vals[d][i][e] = x0;
        double fd = (up - down) / (2 * h), a = an[d][i][e];
        if (!(fabs(fd - a) <= 1e-6 * fmax(1.0, fabs(a)))) {
          fprintf(stderr, "%s: dev %lld %s[%lld]: autodiff %.12g, finite difference %.12g\n", label,
                  (long long)d, f->names[i], (long long)e, a, fd);
          bad++;
        }
      }
  for (int64_t d = 0; d < ndev; d++)
    for (int i = 0; i < f->np; i++) free(an[d][i]);
  return bad;
}

static IrMesh fd_mesh(int ndev) {
  IrMesh m;
  memset(&m, 0, sizeof m);
  if (ndev >= 2) m.naxes = 1, snprintf(m.names[0], IR_MAX_AXIS_NAME, "x"), m.sizes[0] = 2;
  if (ndev == 4) m.naxes = 2, snprintf(m.names[1], IR_MAX_AXIS_NAME, "y"), m.sizes[1] = 2;
  return m;
}

/* Builds loss(params), differentiates it, checks against finite differences. */
static int fd_run(const FdCase *k, Build build, const char *label) {
  IrGraph *g = ir_graph_new();
  IrMesh m = fd_mesh(k->ndev);
  ir_graph_set_mesh(g, &m);
  Fd f = {.g = g, .np = k->np};
  static const char *pnames[] = {"p0", "p1", "p2"};
  for (int i = 0; i < k->np; i++) {
    f.names[i] = pnames[i];
    f.pv[i] = ir_param(g, pnames[i], DT_F64, k->rank[i], k->dims[i]);
  }
  int32_t y =
      build ? build(g, f.pv) : ir_graph_add(g, &(IrValue){.op = k->op, .nops = k->np, .ops = f.pv});
  ir_graph_add_output(g, "loss", weighted_sum(g, y));
  CU_ASSERT_EQUAL(pass_autodiff(g, NULL), IR_OK);
  char msg[IR_ERR_LEN] = "";
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  if (ir_graph_error(g) || msg[0]) {
    fprintf(stderr, "%s: %s %s\n", label, ir_graph_error(g) ? ir_graph_error(g) : "", msg);
    ir_graph_free(g);
    return 1;
  }
  f.it = ir_interp_new(g, NULL);
  ir_interp_set_rounding(f.it, false); /* exact doubles, casts included */
  uint64_t seed = 12345;
  for (int64_t d = 0; d < k->ndev; d++)
    for (int i = 0; i < k->np; i++) {
      int64_t n = ir_shape_numel(&g->values[f.pv[i]].shape);
      f.vals[d][i] = malloc((size_t)(n + 1) * sizeof(double));
      for (int64_t e = 0; e < n; e++) f.vals[d][i][e] = next_value(&seed, k->lo, k->hi);
    }
  int bad = fd_compare(&f, label);
  for (int64_t d = 0; d < k->ndev; d++)
    for (int i = 0; i < k->np; i++) free(f.vals[d][i]);
  ir_interp_free(f.it);
  ir_graph_free(g);
  return bad;
}

static void test_every_op(void) {
  bool covered[IR_OP_COUNT] = {false};
  for (int c = 0; c < NCASES; c++) {
    int bad = fd_run(&cases[c], cases[c].build, ir_op_name(cases[c].op));
    if (bad) fprintf(stderr, "case %d (%s): %d mismatches\n", c, ir_op_name(cases[c].op), bad);
    CHECK_INT(bad, 0);
    covered[cases[c].op] = true;
  }
  for (int op = 0; op < IR_OP_COUNT; op++) {
    bool has = (ir_op_flags((IrOp)op) & IR_HAS_GRAD) != 0;
    if (has != pass_autodiff_has_rule((IrOp)op) || covered[op] != has)
      fprintf(stderr, "op %s: flag %d, rule %d, finite-difference case %d\n", ir_op_name((IrOp)op),
              has, pass_autodiff_has_rule((IrOp)op), covered[op]);
    CU_ASSERT_EQUAL(has, pass_autodiff_has_rule((IrOp)op));
    CU_ASSERT_EQUAL(has, covered[op]);
  }
}

/* ---- composite: softmax cross-entropy of a 3 -> 5 -> 4 MLP on 4 examples ---- */

static int32_t b_mlp_xent(IrGraph *g, const int32_t *p) { /* p: W1 (3,5), W2 (5,4), b2 (4) */
  ir_graph_set_origin(g, "/model/mlp");
  double xv[12];
  for (int i = 0; i < 12; i++) xv[i] = sin(0.7 * i) * 1.3;
  int32_t x = ir_const_data(g, DT_F64, xv, 2, (int64_t[]){4, 3});
  int32_t h = ir_tanh(g, ir_matmul(g, x, p[0])); /* (4, 5) */
  int32_t h2 = ir_mul(g, h, ir_logistic(g, h));  /* silu-ish (4, 5) */
  int32_t logits = ir_add(g, ir_matmul(g, h2, p[1]),
                          ir_broadcast(g, p[2], 2, (int64_t[]){4, 4}, (int32_t[]){1})); /* (4, 4) */
  int32_t m = ir_reduce_max(g, logits, 1, (int32_t[]){1});                              /* (4) */
  int32_t z = ir_sub(g, logits, ir_broadcast(g, m, 2, (int64_t[]){4, 4}, (int32_t[]){0}));
  int32_t lse = ir_log(g, ir_reduce_sum(g, ir_exp(g, z), 1, (int32_t[]){1})); /* (4) */
  int32_t labels = ir_const_data(g, DT_I32, (double[]){2, 0, 3, 1}, 1, (int64_t[]){4});
  int32_t onehot = ir_cast(g,
                           ir_eq(g, ir_iota(g, DT_I32, 2, (int64_t[]){4, 4}, 1),
                                 ir_broadcast(g, labels, 2, (int64_t[]){4, 4}, (int32_t[]){0})),
                           DT_F64);
  int32_t picked = ir_reduce_sum(g, ir_mul(g, onehot, z), 1, (int32_t[]){1});
  int32_t nll = ir_reduce_sum(g, ir_sub(g, lse, picked), 1, (int32_t[]){0});
  return ir_div(g, nll, ir_const_scalar(g, DT_F64, 4, 0, NULL));
}

static void test_mlp_cross_entropy(void) {
  FdCase k = {IR_DOT, b_mlp_xent, 3, {2, 2, 1}, {{3, 5}, {5, 4}, {4}}, -1, 1, 1};
  CHECK_INT(fd_run(&k, b_mlp_xent, "mlp_xent"), 0);
}

/* The loss value itself, for a fixed input, against a hand computation: with zero weights the
 * logits are 0 and the cross-entropy is log(4). */
static void test_mlp_loss_value(void) {
  IrGraph *g = ir_graph_new();
  int32_t p[3] = {ir_param(g, "w1", DT_F64, 2, (int64_t[]){3, 5}),
                  ir_param(g, "w2", DT_F64, 2, (int64_t[]){5, 4}),
                  ir_param(g, "b2", DT_F64, 1, (int64_t[]){4})};
  ir_graph_add_output(g, "loss", b_mlp_xent(g, p));
  CU_ASSERT_EQUAL_FATAL(pass_autodiff(g, &(PassOptions){.nwrt = 1, .wrt = (const char *[]){"b2"}}),
                        IR_OK);
  CU_ASSERT_EQUAL(ir_graph_output(g, "grad:w1"), IR_NONE);
  double z[20] = {0};
  double *loss =
      test_run(g, 3, (const char *[]){"w1", "w2", "b2"}, (const double *[]){z, z, z}, "loss");
  double *gb =
      test_run(g, 3, (const char *[]){"w1", "w2", "b2"}, (const double *[]){z, z, z}, "grad:b2");
  CHECK_NEAR(loss[0], log(4.0), 1e-15);
  /* d/db softmax xent = mean(softmax - onehot) = 0.25 - 1/4 (each label once) = 0 */
  CHECK_ARRAY(gb, ((double[]){0, 0, 0, 0}), 4, 1e-15);
  free(loss), free(gb);
  ir_graph_free(g);
}

static void test_errors(void) {
  IrGraph *g = ir_graph_new();
  int32_t w = ir_param(g, "w", DT_F32, 1, (int64_t[]){3});
  ir_graph_add_output(g, "loss", ir_exp(g, w));
  CU_ASSERT_EQUAL(pass_autodiff(g, NULL), IR_ERR); /* not a scalar */
  CHECK_HAS(ir_graph_error(g), "not a float scalar");
  ir_graph_clear_error(g);
  CU_ASSERT_EQUAL(pass_autodiff(g, &(PassOptions){.loss = "nope"}), IR_ERR);
  CHECK_HAS(ir_graph_error(g), "no output named 'nope'");
  ir_graph_free(g);
}

static void test_unused_param_gets_zero(void) {
  IrGraph *g = ir_graph_new();
  int32_t a = ir_param(g, "a", DT_F32, 0, NULL);
  ir_param(g, "b", DT_F32, 1, (int64_t[]){2});
  ir_graph_add_output(g, "loss", ir_mul(g, a, a));
  CU_ASSERT_EQUAL_FATAL(pass_autodiff(g, NULL), IR_OK);
  double av[] = {3}, bv[] = {1, 2};
  double *ga = test_run(g, 2, (const char *[]){"a", "b"}, (const double *[]){av, bv}, "grad:a");
  double *gb = test_run(g, 2, (const char *[]){"a", "b"}, (const double *[]){av, bv}, "grad:b");
  CHECK_NEAR(ga[0], 6, 0);
  CHECK_ARRAY(gb, ((double[]){0, 0}), 2, 0);
  free(ga), free(gb);
  ir_graph_free(g);
}

/* stop_gradient is the identity forward and passes nothing back: loss = a * sg(a) has the value
 * a^2 and the gradient sg(a) = a (not 2a); after simplify the op is gone and the value stays. */
static void test_stop_gradient(void) {
  IrGraph *g = ir_graph_new();
  int32_t a = ir_param(g, "a", DT_F32, 0, NULL);
  ir_graph_add_output(g, "loss", ir_mul(g, a, ir_stop_gradient(g, a)));
  CU_ASSERT_EQUAL_FATAL(pass_autodiff(g, NULL), IR_OK);
  double av[] = {3};
  double *loss = test_run(g, 1, (const char *[]){"a"}, (const double *[]){av}, "loss");
  double *ga = test_run(g, 1, (const char *[]){"a"}, (const double *[]){av}, "grad:a");
  CHECK_NEAR(loss[0], 9, 0);
  CHECK_NEAR(ga[0], 3, 0);
  free(loss), free(ga);
  CU_ASSERT_EQUAL_FATAL(pass_simplify(g, NULL), IR_OK);
  for (int32_t v = 0; v < g->nvalues; v++) CU_ASSERT_NOT_EQUAL(g->values[v].op, IR_STOP_GRADIENT);
  loss = test_run(g, 1, (const char *[]){"a"}, (const double *[]){av}, "loss");
  CHECK_NEAR(loss[0], 9, 0);
  free(loss);
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"every_op_finite_differences", test_every_op},
      {"mlp_cross_entropy", test_mlp_cross_entropy},
      {"mlp_loss_value", test_mlp_loss_value},
      {"errors", test_errors},
      {"unused_param_gets_zero", test_unused_param_gets_zero},
      {"stop_gradient", test_stop_gradient},
      {NULL, NULL},
  };
  return test_main(argc, argv, "autodiff", cases);
}
