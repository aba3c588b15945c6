/* test_interp.c: the reference interpreter against hand-computed values for every op, on one
 * device and on simulated meshes of 2 and 4 devices, plus its error paths. */
#include "tests/ir/ir_test.h"

static const int64_t d3[] = {3};

/* Builds out = op(x) for x = [0, 1, 4] (f64) and checks the three results. */
static void check_unary(IrOp op, double x0, double x1, double x2, double w0, double w1, double w2) {
  IrGraph *g = ir_graph_new();
  int32_t x = ir_input(g, "x", DT_F64, 1, d3);
  ir_graph_add_output(g, "out", ir_unary(g, op, x));
  CU_ASSERT_PTR_NULL_FATAL(ir_graph_error(g));
  double in[] = {x0, x1, x2}, want[] = {w0, w1, w2};
  const char *names[] = {"x"};
  const double *data[] = {in};
  double *got = test_run(g, 1, names, data, "out");
  if (!got) fprintf(stderr, "op %s\n", ir_op_name(op));
  CHECK_ARRAY(got, want, 3, 1e-15);
  free(got);
  ir_graph_free(g);
}

static void test_unary(void) {
  check_unary(IR_NEG, 1, -2, 0, -1, 2, 0);
  check_unary(IR_EXP, 0, 1, -1, 1, 2.718281828459045, 0.36787944117144233);
  check_unary(IR_LOG, 1, 2.718281828459045, 0.5, 0, 1, -0.6931471805599453);
  check_unary(IR_TANH, 0, 1, -1, 0, 0.7615941559557649, -0.7615941559557649);
  check_unary(IR_SQRT, 4, 2, 0, 2, 1.4142135623730951, 0);
  check_unary(IR_RSQRT, 4, 0.25, 1, 0.5, 2, 1);
  check_unary(IR_ABS, -3, 2, -0.5, 3, 2, 0.5);
  check_unary(IR_SIN, 0, 1.5707963267948966, 0.5, 0, 1, 0.479425538604203);
  check_unary(IR_COS, 0, 3.141592653589793, 0.5, 1, -1, 0.8775825618903728);
  check_unary(IR_ERF, 0, 1, -0.5, 0, 0.8427007929497149, -0.5204998778130465);
  check_unary(IR_LOGISTIC, 0, 2, -1, 0.5, 0.8807970779778823, 0.2689414213699951);
}

static void check_binary(IrOp op, IrDType dt, const double *a, const double *b,
                         const double *want) {
  IrGraph *g = ir_graph_new();
  int32_t x = ir_input(g, "a", dt, 1, d3), y = ir_input(g, "b", dt, 1, d3);
  ir_graph_add_output(g, "out", ir_binary(g, op, x, y));
  CU_ASSERT_PTR_NULL_FATAL(ir_graph_error(g));
  const char *names[] = {"a", "b"};
  const double *data[] = {a, b};
  double *got = test_run(g, 2, names, data, "out");
  if (!got) fprintf(stderr, "op %s\n", ir_op_name(op));
  CHECK_ARRAY(got, want, 3, 1e-15);
  free(got);
  ir_graph_free(g);
}

static void test_binary(void) {
  const double a[] = {1, 2, 3}, b[] = {4, -5, 3};
  check_binary(IR_ADD, DT_F64, a, b, (double[]){5, -3, 6});
  check_binary(IR_SUB, DT_F64, a, b, (double[]){-3, 7, 0});
  check_binary(IR_MUL, DT_F64, a, b, (double[]){4, -10, 9});
  check_binary(IR_DIV, DT_F64, a, b, (double[]){0.25, -0.4, 1});
  check_binary(IR_MAX, DT_F64, a, b, (double[]){4, 2, 3});
  check_binary(IR_MIN, DT_F64, a, b, (double[]){1, -5, 3});
  check_binary(IR_POW, DT_F64, a, b, (double[]){1, 0.03125, 27});
  check_binary(IR_EQ, DT_F64, a, b, (double[]){0, 0, 1});
  check_binary(IR_NE, DT_F64, a, b, (double[]){1, 1, 0});
  check_binary(IR_LT, DT_F64, a, b, (double[]){1, 0, 0});
  check_binary(IR_LE, DT_F64, a, b, (double[]){1, 0, 1});
  check_binary(IR_GT, DT_F64, a, b, (double[]){0, 1, 0});
  check_binary(IR_GE, DT_F64, a, b, (double[]){0, 1, 1});
  check_binary(IR_DIV, DT_I32, (double[]){7, -7, 1}, (double[]){2, 2, 3}, (double[]){3, -3, 0});
}

static void test_select_cast(void) {
  IrGraph *g = ir_graph_new();
  int32_t p = ir_input(g, "p", DT_F32, 1, d3), a = ir_input(g, "a", DT_F64, 1, d3);
  int32_t b = ir_input(g, "b", DT_F64, 1, d3);
  ir_graph_add_output(g, "sel", ir_select(g, p, a, b));
  ir_graph_add_output(g, "f32", ir_cast(g, a, DT_F32));
  ir_graph_add_output(g, "bf16", ir_cast(g, a, DT_BF16));
  ir_graph_add_output(g, "f16", ir_cast(g, a, DT_F16));
  ir_graph_add_output(g, "i32", ir_cast(g, a, DT_I32));
  CU_ASSERT_PTR_NULL_FATAL(ir_graph_error(g));
  const char *names[] = {"p", "a", "b"};
  const double pv[] = {1, 0, -2}, av[] = {1.0 / 3, -2.7, 70000}, bv[] = {10, 20, 30};
  const double *data[] = {pv, av, bv};
  double *sel = test_run(g, 3, names, data, "sel"), *f32 = test_run(g, 3, names, data, "f32");
  double *bf16 = test_run(g, 3, names, data, "bf16"), *f16 = test_run(g, 3, names, data, "f16");
  double *i32 = test_run(g, 3, names, data, "i32");
  CHECK_ARRAY(sel, ((double[]){1.0 / 3, 20, 70000}), 3, 0);
  CHECK_ARRAY(f32, ((double[]){0.3333333432674408, -2.700000047683716, 70000}), 3, 0);
  CHECK_ARRAY(bf16, ((double[]){0.333984375, -2.703125, 70144}), 3, 0);
  CHECK_NEAR(f16[0], 0.333251953125, 0);
  CHECK_NEAR(f16[1], -2.69921875, 0);
  CU_ASSERT(isinf(f16[2]));
  CHECK_ARRAY(i32, ((double[]){0, -2, 70000}), 3, 0);
  free(sel), free(f32), free(bf16), free(f16), free(i32);
  ir_graph_free(g);
}

/* Runs a graph with one input x = 0, 1, 2, ... and returns output "out". */
static double *run_iota_input(IrGraph *g, int32_t x) {
  int64_t n = ir_shape_numel(&g->values[x].shape);
  double *in = malloc((size_t)n * sizeof *in);
  for (int64_t i = 0; i < n; i++) in[i] = (double)i;
  const char *names[] = {g->values[x].name};
  const double *data[] = {in};
  CU_ASSERT_PTR_NULL(ir_graph_error(g));
  double *out = test_run(g, 1, names, data, "out");
  free(in);
  return out;
}

static void test_data_movement(void) {
  const int64_t d23[] = {2, 3}, d32[] = {3, 2}, d2[] = {2}, d13[] = {1, 3}, d6[] = {6};
  struct {
    double *got;
    double want[24];
    int n;
  } cases[8];
  int nc = 0;
  IrGraph *g;
#define CASE(build, ...)                                                                           \
  do {                                                                                             \
    g = ir_graph_new();                                                                            \
    int32_t out_ = build;                                                                          \
    ir_graph_add_output(g, "out", out_);                                                           \
    cases[nc].got = run_iota_input(g, 0);                                                          \
    double w_[] = {__VA_ARGS__};                                                                   \
    memcpy(cases[nc].want, w_, sizeof w_);                                                         \
    cases[nc++].n = (int)(sizeof w_ / sizeof w_[0]);                                               \
    ir_graph_free(g);                                                                              \
  } while (0)
  CASE(ir_broadcast(g, ir_input(g, "x", DT_F64, 1, d2), 2, d23, (int32_t[]){0}), 0, 0, 0, 1, 1, 1);
  CASE(ir_broadcast(g, ir_input(g, "x", DT_F64, 2, d13), 2, d23, (int32_t[]){0, 1}), 0, 1, 2, 0, 1,
       2);
  CASE(ir_reshape(g, ir_input(g, "x", DT_F64, 2, d23), 1, d6), 0, 1, 2, 3, 4, 5);
  CASE(ir_transpose(g, ir_input(g, "x", DT_F64, 2, d23), (int32_t[]){1, 0}), 0, 3, 1, 4, 2, 5);
  CASE(ir_slice(g, ir_input(g, "x", DT_F64, 2, d32), (int64_t[]){1, 1}, (int64_t[]){3, 2}), 3, 5);
  CASE(ir_pad(g, ir_input(g, "x", DT_F64, 1, d2), (int64_t[]){1}, (int64_t[]){2}, -1), -1, 0, 1, -1,
       -1);
  CASE(ir_concat(
           g, 2,
           ((int32_t[]){ir_input(g, "x", DT_F64, 2, d23), ir_const_scalar(g, DT_F64, 9, 2, d23)}),
           1),
       0, 1, 2, 9, 9, 9, 3, 4, 5, 9, 9, 9);
  CASE(ir_concat(g, 2,
                 ((int32_t[]){ir_input(g, "x", DT_F64, 2, d23), ir_iota(g, DT_F64, 2, d23, 1)}), 0),
       0, 1, 2, 3, 4, 5, 0, 1, 2, 0, 1, 2);
#undef CASE
  for (int i = 0; i < nc; i++) {
    CHECK_ARRAY(cases[i].got, cases[i].want, cases[i].n, 0);
    free(cases[i].got);
  }
}

static void test_reduce(void) {
  const int64_t d234[] = {2, 3, 4};
  IrGraph *g = ir_graph_new();
  int32_t x = ir_input(g, "x", DT_F64, 3, d234);
  ir_graph_add_output(g, "out", ir_reduce_sum(g, x, 2, (int32_t[]){0, 2}));
  double *sum = run_iota_input(g, x);
  /* sum over i, k of 12 i + 4 j + k = 8 * 4 j + 2*6 + 12*4 = 32 j + 60 */
  CHECK_ARRAY(sum, ((double[]){60, 92, 124}), 3, 0);
  free(sum);
  ir_graph_free(g);
  g = ir_graph_new();
  x = ir_input(g, "x", DT_F64, 3, d234);
  ir_graph_add_output(g, "out", ir_reduce_max(g, ir_neg(g, x), 1, (int32_t[]){1}));
  double *mx = run_iota_input(g, x);
  CHECK_ARRAY(mx, ((double[]){0, -1, -2, -3, -12, -13, -14, -15}), 8, 0);
  free(mx);
  ir_graph_free(g);
}

static void test_dot(void) {
  const int64_t d23[] = {2, 3}, d32[] = {3, 2}, d223[] = {2, 2, 3}, d232[] = {2, 3, 2};
  IrGraph *g = ir_graph_new();
  int32_t a = ir_input(g, "x", DT_F64, 2, d23), b = ir_iota(g, DT_F64, 2, d32, 0);
  ir_graph_add_output(g, "out", ir_matmul(g, a, b)); /* [[0,1,2],[3,4,5]] x [[0,0],[1,1],[2,2]] */
  double *mm = run_iota_input(g, a);
  CHECK_ARRAY(mm, ((double[]){5, 5, 14, 14}), 4, 0);
  free(mm);
  ir_graph_free(g);
  /* batched, rhs transposed: out[b,i,j] = sum_k x[b,i,k] y[b,k,j] with y = x^T per batch + 1 */
  g = ir_graph_new();
  a = ir_input(g, "x", DT_F64, 3, d223);
  b = ir_add(g, ir_transpose(g, a, (int32_t[]){0, 2, 1}), ir_const_scalar(g, DT_F64, 1, 3, d232));
  ir_graph_add_output(
      g, "out",
      ir_dot(g, a, b, 1, (int32_t[]){0}, (int32_t[]){0}, 1, (int32_t[]){2}, (int32_t[]){1}));
  double *bm = run_iota_input(g, a);
  /* batch 0: rows r0=[0,1,2], r1=[3,4,5]; out[i][j] = r_i . r_j + sum(r_i) */
  /* batch 1: rows [6,7,8], [9,10,11] */
  CHECK_ARRAY(bm,
              ((double[]){5 + 3, 14 + 3, 14 + 12, 50 + 12, 149 + 21, 212 + 21, 212 + 30, 302 + 30}),
              8, 0);
  free(bm);
  ir_graph_free(g);
}

static void test_gather_scatter_topk(void) {
  const int64_t d32[] = {3, 2}, d22[] = {2, 2}, d4[] = {4}, d24[] = {2, 4};
  IrGraph *g = ir_graph_new();
  int32_t t = ir_input(g, "x", DT_F64, 2, d32);
  int32_t idx = ir_const_data(g, DT_I32, (double[]){2, 0, 2, 1}, 2, d22);
  int32_t gat = ir_gather(g, t, idx); /* (2, 2, 2) */
  ir_graph_add_output(g, "out", gat);
  ir_graph_add_output(g, "sc", ir_scatter_add(g, idx, gat, 4));
  double *got = run_iota_input(g, t);
  CHECK_ARRAY(got, ((double[]){4, 5, 0, 1, 4, 5, 2, 3}), 8, 0);
  free(got);
  double xs[6] = {0, 1, 2, 3, 4, 5};
  double *sc = test_run(g, 1, (const char *[]){"x"}, (const double *[]){xs}, "sc");
  CHECK_ARRAY(sc, ((double[]){0, 1, 2, 3, 8, 10, 0, 0}), 8, 0);
  free(sc);
  ir_graph_free(g);

  g = ir_graph_new();
  t = ir_input(g, "x", DT_F32, 2, d24);
  ir_graph_add_output(g, "out", ir_top_k_indices(g, t, 3));
  double xv[] = {0.5, 3, -1, 3, 7, 1, 2, 0};
  double *tk = test_run(g, 1, (const char *[]){"x"}, (const double *[]){xv}, "out");
  CHECK_ARRAY(tk, ((double[]){1, 3, 0, 0, 2, 1}), 6, 0);
  free(tk);
  ir_graph_free(g);
  (void)d4;
}

static void test_errors(void) {
  const int64_t d2[] = {2}, d3x[] = {3}, d22[] = {2};
  IrGraph *g = ir_graph_new();
  int32_t t = ir_input(g, "x", DT_F64, 1, d2);
  ir_graph_add_output(g, "out",
                      ir_gather(g, t, ir_const_data(g, DT_I32, (double[]){1, 5}, 1, d22)));
  IrInterp *it = ir_interp_new(g, NULL);
  CU_ASSERT_EQUAL(ir_interp_run(it), IR_ERR); /* x unset */
  CHECK_HAS(ir_interp_error(it), "input 'x' is not set");
  CU_ASSERT_EQUAL(ir_interp_set(it, -1, "x", 1, d3x, (double[]){1, 2, 3}), IR_ERR);
  CHECK_HAS(ir_interp_error(it), "shape");
  CU_ASSERT_EQUAL(ir_interp_set(it, -1, "nope", 1, d2, (double[]){1, 2}), IR_ERR);
  CU_ASSERT_EQUAL(ir_interp_set(it, -1, "x", 1, d2, (double[]){1, 2}), IR_OK);
  CU_ASSERT_EQUAL(ir_interp_run(it), IR_ERR); /* index 5 out of range */
  CHECK_HAS(ir_interp_error(it), "index 5");
  CU_ASSERT_PTR_NULL(ir_interp_output(it, 0, "missing", NULL));
  ir_interp_free(it);
  ir_graph_free(g);
}

/* ---- collectives on simulated meshes ---- */

static IrMesh mesh_make(int n, const char *const *names, const int64_t *sizes) {
  IrMesh m;
  memset(&m, 0, sizeof m);
  m.naxes = n;
  for (int i = 0; i < n; i++) {
    snprintf(m.names[i], sizeof m.names[i], "%s", names[i]);
    m.sizes[i] = sizes[i];
  }
  return m;
}

/* Device d holds x = 10 d + [0, 1, ...]. Returns output "out" of device dev. */
static const double *run_mesh(IrInterp *it, const IrGraph *g) {
  int32_t x = ir_graph_find(g, IR_INPUT, "x");
  int64_t n = ir_shape_numel(&g->values[x].shape);
  for (int64_t d = 0; d < ir_interp_devices(it); d++) {
    double buf[64];
    for (int64_t i = 0; i < n; i++) buf[i] = 10.0 * (double)d + (double)i;
    ir_interp_set(it, d, "x", g->values[x].shape.rank, g->values[x].shape.dims, buf);
  }
  if (ir_interp_run(it)) fprintf(stderr, "run_mesh: %s\n", ir_interp_error(it));
  return NULL;
}

static void test_collectives_2(void) {
  IrMesh m = mesh_make(1, (const char *[]){"data"}, (int64_t[]){2});
  const char *ax[] = {"data"};
  const int64_t d22[] = {2, 2};
  IrGraph *g = ir_graph_new();
  ir_graph_set_mesh(g, &m);
  int32_t x = ir_input(g, "x", DT_F64, 2, d22);
  ir_graph_add_output(g, "ar", ir_all_reduce(g, x, 1, ax));
  ir_graph_add_output(g, "ag", ir_all_gather(g, x, 1, ax, 1));
  ir_graph_add_output(g, "rs", ir_reduce_scatter(g, x, 1, ax, 0));
  ir_graph_add_output(g, "a2a", ir_all_to_all(g, x, 1, ax, 0, 1));
  CU_ASSERT_PTR_NULL_FATAL(ir_graph_error(g));
  IrInterp *it = ir_interp_new(g, NULL);
  run_mesh(it, g); /* dev0 x = [[0,1],[2,3]], dev1 x = [[10,11],[12,13]] */
  CHECK_ARRAY(ir_interp_output(it, 1, "ar", NULL), ((double[]){10, 12, 14, 16}), 4, 0);
  CHECK_ARRAY(ir_interp_output(it, 0, "ag", NULL), ((double[]){0, 1, 10, 11, 2, 3, 12, 13}), 8, 0);
  CHECK_ARRAY(ir_interp_output(it, 0, "rs", NULL), ((double[]){10, 12}), 2, 0);
  CHECK_ARRAY(ir_interp_output(it, 1, "rs", NULL), ((double[]){14, 16}), 2, 0);
  CHECK_ARRAY(ir_interp_output(it, 0, "a2a", NULL), ((double[]){0, 1, 10, 11}), 4, 0);
  CHECK_ARRAY(ir_interp_output(it, 1, "a2a", NULL), ((double[]){2, 3, 12, 13}), 4, 0);
  ir_interp_free(it);
  ir_graph_free(g);
}

static void test_collectives_4(void) {
  IrMesh m = mesh_make(2, (const char *[]){"data", "model"}, (int64_t[]){2, 2});
  const char *data_ax[] = {"data"}, *model_ax[] = {"model"}, *both[] = {"model", "data"};
  const int64_t d2[] = {2}, d4[] = {4};
  IrGraph *g = ir_graph_new();
  ir_graph_set_mesh(g, &m);
  int32_t x = ir_input(g, "x", DT_F64, 1, d2);
  ir_graph_add_output(g, "ar_data", ir_all_reduce(g, x, 1, data_ax));
  ir_graph_add_output(g, "ar_model", ir_all_reduce(g, x, 1, model_ax));
  ir_graph_add_output(g, "ag_both", ir_all_gather(g, x, 2, both, 0));
  int32_t x4 = ir_concat(g, 2, (int32_t[]){x, x}, 0);
  ir_graph_add_output(g, "a2a_both", ir_all_to_all(g, x4, 2, both, 0, 0));
  ir_graph_add_output(g, "rs_both", ir_reduce_scatter(g, x4, 2, both, 0));
  ir_graph_add_output(g, "ls_both", ir_local_slice(g, x4, 2, both, 0));
  CU_ASSERT_PTR_NULL_FATAL(ir_graph_error(g));
  IrInterp *it = ir_interp_new(g, NULL);
  CHECK_INT(ir_interp_devices(it), 4);
  run_mesh(it, g); /* device (d, m) = 2d + m holds [10 dev, 10 dev + 1] */
  CHECK_ARRAY(ir_interp_output(it, 1, "ar_data", NULL), ((double[]){40, 42}), 2, 0); /* dev 1 + 3 */
  CHECK_ARRAY(ir_interp_output(it, 2, "ar_model", NULL), ((double[]){50, 52}), 2, 0); /* 2 + 3 */
  /* group order: model major, data minor -> devices 0, 2, 1, 3 */
  CHECK_ARRAY(ir_interp_output(it, 3, "ag_both", NULL), ((double[]){0, 1, 20, 21, 10, 11, 30, 31}),
              8, 0);
  /* x4 on dev = [x0, x1, x0, x1]; a2a chunk r of each member; device 2 has group rank 1 */
  CHECK_ARRAY(ir_interp_output(it, 2, "a2a_both", NULL), ((double[]){1, 21, 11, 31}), 4, 0);
  CHECK_ARRAY(ir_interp_output(it, 1, "rs_both", NULL), ((double[]){60}), 1,
              0); /* rank 2: x0 sum */
  CHECK_ARRAY(ir_interp_output(it, 1, "ls_both", NULL), ((double[]){10}), 1, 0); /* rank 2: x0 */
  CHECK_ARRAY(ir_interp_output(it, 2, "ls_both", NULL), ((double[]){21}), 1, 0); /* rank 1: x1 */
  (void)d4;
  ir_interp_free(it);
  ir_graph_free(g);
}

static void test_mesh_mismatch(void) {
  IrMesh m = mesh_make(1, (const char *[]){"data"}, (int64_t[]){2});
  IrMesh other = mesh_make(1, (const char *[]){"data"}, (int64_t[]){4});
  IrGraph *g = ir_graph_new();
  ir_graph_set_mesh(g, &m);
  ir_graph_add_output(
      g, "out", ir_all_reduce(g, ir_input(g, "x", DT_F32, 0, NULL), 1, (const char *[]){"data"}));
  IrInterp *it = ir_interp_new(g, &other);
  CU_ASSERT_EQUAL(ir_interp_run(it), IR_ERR);
  CHECK_HAS(ir_interp_error(it), "mesh");
  ir_interp_free(it);
  ir_graph_free(g);
}

static void test_rounding(void) {
  IrGraph *g = ir_graph_new();
  int32_t x = ir_input(g, "x", DT_F32, 0, NULL);
  ir_graph_add_output(g, "out", ir_div(g, x, ir_const_scalar(g, DT_F32, 3, 0, NULL)));
  IrInterp *it = ir_interp_new(g, NULL);
  ir_interp_set(it, -1, "x", 0, NULL, (double[]){1});
  CU_ASSERT_EQUAL_FATAL(ir_interp_run(it), IR_OK);
  CHECK_NEAR(ir_interp_output(it, 0, "out", NULL)[0], (double)(1.0f / 3.0f), 0);
  ir_interp_set_rounding(it, false);
  CU_ASSERT_EQUAL_FATAL(ir_interp_run(it), IR_OK);
  CHECK_NEAR(ir_interp_output(it, 0, "out", NULL)[0], 1.0 / 3.0, 0);
  ir_interp_free(it);
  ir_graph_free(g);
}

/* keep_all false: outputs survive the run, dead intermediates are freed. */
static void test_release_dead_values(void) {
  char msg[IR_ERR_LEN] = "";
  IrGraph *g = ir_graph_parse("%0 = input \"x\" : f32[3]\n"
                              "%1 = exp %0 : f32[3]\n"
                              "%2 = neg %1 : f32[3]\n"
                              "%3 = add %2, %0 : f32[3]\n"
                              "output \"y\" = %3\n"
                              "output \"e\" = %1\n",
                              msg, sizeof msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  IrInterp *it = ir_interp_new(g, NULL);
  ir_interp_set_keep_all(it, false);
  const double x[3] = {0, 1, 2};
  int64_t dims[1] = {3};
  CU_ASSERT_EQUAL(ir_interp_set(it, -1, "x", 1, dims, x), IR_OK);
  CU_ASSERT_EQUAL_FATAL(ir_interp_run(it), IR_OK);
  IrShape s;
  const double *y = ir_interp_output(it, 0, "y", &s), *e = ir_interp_output(it, 0, "e", &s);
  CU_ASSERT_PTR_NOT_NULL_FATAL(y);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  for (int i = 0; i < 3; i++) {
    CHECK_NEAR(y[i], (double)(float)-(float)exp(x[i]) + x[i], 1e-6);
    CHECK_NEAR(e[i], exp(x[i]), 1e-6);
  }
  CU_ASSERT_PTR_NULL(ir_interp_value(it, 0, 2)); /* read by %3 only: freed */
  CU_ASSERT_PTR_NULL(ir_interp_value(it, 0, 0)); /* the input's copy too */
  ir_interp_free(it);
  ir_graph_free(g);
}

/* A value as large as a model may ask for (here 2^45 elements, 256 TB, more than any address
 * space) is a user error with the value and its size, not an abort: value buffers are sized by
 * the model's shapes (docs/design.md, "Errors and out-of-memory"). AddressSanitizer reports an
 * allocation that large instead of returning NULL, so the check is left to the plain build. */
static void test_value_too_large(void) {
#ifdef UNDER_ASAN
  return;
#endif
  IrGraph *g = ir_graph_new();
  ir_graph_set_origin(g, "/model/huge");
  ir_graph_add_output(g, "out", ir_iota(g, DT_F32, 2, (const int64_t[]){1 << 23, 1 << 22}, 0));
  CU_ASSERT_PTR_NULL_FATAL(ir_graph_error(g));
  IrInterp *it = ir_interp_new(g, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(it);
  CU_ASSERT_EQUAL(ir_interp_run(it), IR_ERR);
  CHECK_HAS(ir_interp_error(it),
            "%0 (iota) at /model/huge: out of memory for 35184372088832 elements");
  ir_interp_free(it);
  ir_graph_free(g);
}

/* matmul tf32: a dot_general rounds its f32 operands to TF32 (10 mantissa bits, ties away
 * from zero, as cvt.rna.tf32.f32) before it multiplies; the sum is not rounded to TF32. 1 + 2^-11
 * is a tie: up to 1 + 2^-10 (ties to even would give 1), and -1 - 2^-11 to -1 - 2^-10. The text
 * form keeps the policy; matmul f32 (the default) multiplies the f32 values. */
static void test_dot_tf32(void) {
  static const char *const text = "matmul tf32\n"
                                  "%0 = parameter \"a\" : f32[1,4]\n"
                                  "%1 = parameter \"b\" : f32[4,1]\n"
                                  "%2 = dot_general %0, %1 lhs_contract=[1] rhs_contract=[0] : "
                                  "f32[1,1]\n"
                                  "output \"y\" = %2\n";
  const double a[4] = {1 + 0x1p-11, -1 - 0x1p-11, 1 + 0x1p-12, 3 + 0x1p-9};
  const double ones[4] = {1, 1, 1, 1}, t11 = 0x1p-11;
  char msg[256];
  for (int tf32 = 1; tf32 >= 0; tf32--) {
    IrGraph *g = ir_graph_parse(tf32 ? text : text + strlen("matmul tf32\n"), msg, sizeof msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(g->matmul, tf32 ? IR_MATMUL_TF32 : IR_MATMUL_F32);
    char *printed = ir_graph_to_string(g);
    CU_ASSERT_EQUAL(strncmp(printed, "matmul tf32\n", 12) == 0, tf32);
    free(printed);
    IrInterp *it = ir_interp_new(g, NULL);
    const int64_t d14[] = {1, 4}, d41[] = {4, 1};
    ir_interp_set(it, -1, "a", 2, d14, a);
    ir_interp_set(it, -1, "b", 2, d41, ones);
    CU_ASSERT_EQUAL_FATAL(ir_interp_run(it), IR_OK);
    IrShape s;
    const double *y = ir_interp_output(it, 0, "y", &s);
    /* tf32: (1 + 2^-10) + (-1 - 2^-10) + 1 + (3 + 2^-9): 1 + 2^-12 rounds down to 1 */
    double want = tf32 ? 4 + 0x1p-9 : (double)(float)(4 + t11 * 0.5 + 0x1p-9);
    CU_ASSERT_DOUBLE_EQUAL(y[0], want, 0);
    ir_interp_free(it);
    ir_graph_free(g);
  }
  CU_ASSERT_EQUAL(ir_tf32_round(1 + 0x1p-11), 1 + 0x1p-10);
  CU_ASSERT_EQUAL(ir_tf32_round(-1 - 0x1p-11), -1 - 0x1p-10);
  CU_ASSERT_EQUAL(ir_tf32_round(1 + 0x1p-11 - 0x1p-23), 1);
  CU_ASSERT_EQUAL(ir_tf32_round(0x1.fffffep127), INFINITY); /* f32 max: past TF32's largest */
  CU_ASSERT(isnan(ir_tf32_round(NAN)));
  CU_ASSERT_EQUAL(ir_tf32_round(-INFINITY), -INFINITY);
  CU_ASSERT_PTR_NULL(ir_graph_parse("matmul bf32\n", msg, sizeof msg));
  CHECK_HAS(msg, "expected matmul f32 or tf32");
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"release_dead_values", test_release_dead_values},
      {"unary", test_unary},
      {"binary_compare", test_binary},
      {"select_cast", test_select_cast},
      {"data_movement", test_data_movement},
      {"reduce", test_reduce},
      {"dot", test_dot},
      {"dot_tf32", test_dot_tf32},
      {"gather_scatter_topk", test_gather_scatter_topk},
      {"errors", test_errors},
      {"collectives_2", test_collectives_2},
      {"collectives_4", test_collectives_4},
      {"mesh_mismatch", test_mesh_mismatch},
      {"rounding", test_rounding},
      {"value_too_large", test_value_too_large},
      {NULL, NULL},
  };
  return test_main(argc, argv, "interp", cases);
}
