/* test_simplify.c: each rewrite of simplify.c shown as IR text in, IR text out, plus a check that
 * simplification keeps results (interpreter before and after). */
#include "passes/passes.h"
#include "tests/ir/ir_test.h"

typedef int (*Pass)(IrGraph *g, const PassOptions *opt);

/* Parses in, runs pass, verifies, and compares the printed result with want. */
static void check_pass(Pass pass, const char *in, const char *want) {
  char msg[IR_ERR_LEN] = "";
  IrGraph *g = ir_graph_parse(in, msg, sizeof msg);
  if (!g) fprintf(stderr, "parse: %s\n", msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_EQUAL(pass(g, NULL), IR_OK);
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  char *got = ir_graph_to_string(g);
  if (strcmp(got, want) != 0) fprintf(stderr, "--- got:\n%s--- want:\n%s", got, want);
  CU_ASSERT_STRING_EQUAL(got, want);
  free(got);
  ir_graph_free(g);
}

static void test_dce(void) {
  check_pass(pass_dce,
             "%0 = input \"x\" : f32[2]\n"
             "%1 = parameter \"unused\" : f32[3]\n"
             "%2 = exp %0 : f32[2] @\"/model/a\"\n"
             "%3 = neg %0 : f32[2]\n"
             "%4 = log %3 : f32[2]\n"
             "output \"y\" = %2\n",
             "%0 = input \"x\" : f32[2]\n"
             "%1 = parameter \"unused\" : f32[3]\n"
             "%2 = exp %0 : f32[2] @\"/model/a\"\n"
             "output \"y\" = %2\n");
}

static void test_cse(void) {
  check_pass(pass_cse,
             "%0 = input \"x\" : f32[2]\n"
             "%1 = exp %0 : f32[2] #\"first\"\n"
             "%2 = exp %0 : f32[2] #\"second\"\n"
             "%3 = add %1, %2 : f32[2]\n"
             "%4 = constant value=2 : f32[2]\n"
             "%5 = constant value=2 : f32[2]\n"
             "%6 = mul %3, %4 : f32[2]\n"
             "%7 = mul %3, %5 : f32[2]\n"
             "%8 = constant data=[1,2] : f32[2]\n"
             "%9 = constant data=[1,3] : f32[2]\n"
             "%10 = add %8, %9 : f32[2]\n"
             "output \"a\" = %6\n"
             "output \"b\" = %7\n"
             "output \"c\" = %10\n",
             "%0 = input \"x\" : f32[2]\n"
             "%1 = exp %0 : f32[2] #\"first\"\n"
             "%2 = add %1, %1 : f32[2]\n"
             "%3 = constant value=2 : f32[2]\n"
             "%4 = mul %2, %3 : f32[2]\n"
             "%5 = constant data=[1,2] : f32[2]\n"
             "%6 = constant data=[1,3] : f32[2]\n"
             "%7 = add %5, %6 : f32[2]\n"
             "output \"a\" = %4\n"
             "output \"b\" = %4\n"
             "output \"c\" = %7\n");
}

static void test_cse_keeps_distinct_attrs(void) {
  const char *in = "%0 = input \"x\" : f32[2,3]\n"
                   "%1 = reduce_sum %0 axes=[0] : f32[3]\n"
                   "%2 = reduce_sum %0 axes=[1] : f32[2]\n"
                   "%3 = transpose %0 perm=[1,0] : f32[3,2]\n"
                   "output \"a\" = %1\n"
                   "output \"b\" = %2\n"
                   "output \"c\" = %3\n";
  check_pass(pass_cse, in, in);
}

static void test_fold(void) {
  check_pass(pass_fold,
             "%0 = input \"x\" : f32[3]\n"
             "%1 = constant value=2 : f32[3]\n"
             "%2 = iota axis=0 : f32[3]\n"
             "%3 = mul %1, %2 : f32[3] @\"/model/scale\"\n"
             "%4 = exp %1 : f32[3]\n"
             "%5 = add %0, %3 : f32[3]\n"
             "%6 = add %5, %4 : f32[3]\n"
             "%7 = constant value=1 : f32[]\n"
             "%8 = constant value=3 : f32[]\n"
             "%9 = div %7, %8 : f32[]\n"
             "output \"y\" = %6\n"
             "output \"third\" = %9\n",
             "%0 = input \"x\" : f32[3]\n"
             "%1 = constant data=[0,2,4] : f32[3] @\"/model/scale\"\n"
             "%2 = constant value=7.3890562057495117 : f32[3]\n"
             "%3 = add %0, %1 : f32[3]\n"
             "%4 = add %3, %2 : f32[3]\n"
             "%5 = constant value=0.3333333432674408 : f32[]\n"
             "output \"y\" = %4\n"
             "output \"third\" = %5\n");
}

static void test_fold_respects_limit_and_collectives(void) {
  const char *in = "mesh data=2\n"
                   "%0 = constant value=1 : f32[4]\n"
                   "%1 = all_reduce %0 mesh_axes=[data] : f32[4]\n"
                   "output \"y\" = %1\n";
  check_pass(pass_fold, in, in);
  IrGraph *g = ir_graph_parse(
      "%0 = constant value=1 : f32[8]\n%1 = neg %0 : f32[8]\noutput \"y\" = %1\n", NULL, 0);
  CU_ASSERT_EQUAL(pass_fold(g, &(PassOptions){.fold_limit = 4}), IR_OK);
  CHECK_INT(g->nvalues, 2);
  CHECK_INT(g->values[1].op, IR_NEG);
  ir_graph_free(g);
}

static void test_algebra_identities(void) {
  check_pass(pass_algebra,
             "%0 = input \"x\" : f32[2]\n"
             "%1 = constant value=1 : f32[2]\n"
             "%2 = constant value=0 : f32[2]\n"
             "%3 = mul %0, %1 : f32[2]\n"
             "%4 = mul %1, %3 : f32[2]\n"
             "%5 = add %4, %2 : f32[2]\n"
             "%6 = add %2, %5 : f32[2]\n"
             "%7 = sub %6, %2 : f32[2]\n"
             "%8 = div %7, %1 : f32[2]\n"
             "%9 = neg %8 : f32[2]\n"
             "%10 = neg %9 : f32[2]\n"
             "%11 = cast %10 : f32[2]\n"
             "%12 = sub %2, %11 : f32[2]\n"
             "output \"y\" = %11\n"
             "output \"z\" = %12\n",
             "%0 = input \"x\" : f32[2]\n"
             "%1 = constant value=0 : f32[2]\n"
             "%2 = sub %1, %0 : f32[2]\n"
             "output \"y\" = %0\n"
             "output \"z\" = %2\n");
}

static void test_algebra_shapes(void) {
  check_pass(pass_algebra,
             "%0 = input \"x\" : f32[2,3,4]\n"
             "%1 = reshape %0 : f32[6,4] @\"/a\"\n"
             "%2 = reshape %1 : f32[24] @\"/b\"\n"
             "%3 = transpose %0 perm=[2,0,1] : f32[4,2,3]\n"
             "%4 = transpose %3 perm=[0,2,1] : f32[4,3,2] #\"t\"\n"
             "%5 = transpose %3 perm=[1,2,0] : f32[2,3,4]\n"
             "%6 = reshape %5 : f32[2,3,4]\n"
             "%7 = broadcast_in_dim %6 bdims=[0,1,2] : f32[2,3,4]\n"
             "output \"flat\" = %2\n"
             "output \"t\" = %4\n"
             "output \"same\" = %7\n",
             "%0 = input \"x\" : f32[2,3,4]\n"
             "%1 = reshape %0 : f32[24] @\"/b\"\n"
             "%2 = transpose %0 perm=[2,1,0] : f32[4,3,2] #\"t\"\n"
             "output \"flat\" = %1\n"
             "output \"t\" = %2\n"
             "output \"same\" = %0\n");
}

/* The whole pipeline on the gradient graph of a small model keeps every output's numbers. */
static void test_simplify_preserves_results(void) {
  IrGraph *g = ir_graph_new();
  const int64_t d23[] = {2, 3}, d34[] = {3, 4};
  ir_graph_set_origin(g, "/model/layer");
  int32_t x = ir_input(g, "x", DT_F64, 2, d23), w = ir_param(g, "w", DT_F64, 2, d34);
  int32_t h = ir_matmul(g, x, w);
  int32_t one = ir_const_scalar(g, DT_F64, 1, 2, (int64_t[]){2, 4});
  int32_t y = ir_mul(g, ir_tanh(g, ir_mul(g, h, one)), ir_tanh(g, h));
  ir_graph_add_output(g, "loss", ir_reduce_sum(g, y, 2, (int32_t[]){0, 1}));
  CU_ASSERT_EQUAL_FATAL(pass_autodiff(g, NULL), IR_OK);
  double xv[6] = {0.1, -0.2, 0.3, 0.4, 0.5, -0.6}, wv[12];
  for (int i = 0; i < 12; i++) wv[i] = 0.1 * (i - 5);
  const char *names[] = {"x", "w"};
  const double *data[] = {xv, wv};
  double *l0 = test_run(g, 2, names, data, "loss"), *g0 = test_run(g, 2, names, data, "grad:w");
  int32_t before = g->nvalues;
  CU_ASSERT_EQUAL(pass_simplify(g, NULL), IR_OK);
  char msg[IR_ERR_LEN] = "";
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  CU_ASSERT(g->nvalues < before);
  double *l1 = test_run(g, 2, names, data, "loss"), *g1 = test_run(g, 2, names, data, "grad:w");
  CHECK_NEAR(l1[0], l0[0], 1e-15);
  CHECK_ARRAY(g1, g0, 12, 1e-15);
  /* the tanh(h * 1) became tanh(h) and merged with the second tanh: one tanh is left */
  int tanhs = 0;
  for (int32_t i = 0; i < g->nvalues; i++) tanhs += g->values[i].op == IR_TANH;
  CHECK_INT(tanhs, 1);
  free(l0), free(g0), free(l1), free(g1);
  ir_graph_free(g);
}

/* ---- transposes into products ---- */

/* Runs g with every parameter and input bound to fixed data; returns output out (malloc'd). */
static double *run_leaves(const IrGraph *g, const char *out) {
  const char *names[16];
  double *data[16];
  int n = 0;
  for (int32_t i = 0; i < g->nvalues && n < 16; i++) {
    const IrValue *v = &g->values[i];
    if (v->op != IR_PARAMETER && v->op != IR_INPUT) continue;
    int64_t numel = ir_shape_numel(&v->shape);
    data[n] = malloc((size_t)(numel + 1) * sizeof *data[n]);
    for (int64_t k = 0; k < numel; k++) data[n][k] = (double)(float)sin(0.7 * (double)k + i);
    names[n++] = v->name;
  }
  double *r = test_run(g, n, names, (const double *const *)data, out);
  for (int k = 0; k < n; k++) free(data[k]);
  return r;
}

static int count_op(const IrGraph *g, IrOp op) {
  int n = 0;
  for (int32_t i = 0; i < g->nvalues; i++) n += g->values[i].op == op;
  return n;
}

typedef struct FoldCase {
  const char *name;
  const char *ir; /* outputs "y" and perhaps "z" */
  int transposes; /* left after pass_transpose_dot */
} FoldCase;

/* In every case pass_transpose_dot keeps each output's numbers exactly (the interpreter sums the
 * same products in the same order) and leaves the transposes it must. */
static const FoldCase fold_cases[] = {
    {"lhs (K, M)",
     "%0 = input \"x\" : f32[3,2]\n%1 = input \"w\" : f32[3,4]\n"
     "%2 = transpose %0 perm=[1,0] : f32[2,3]\n"
     "%3 = dot_general %2, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[1] rhs_contract=[0] : f32[2,4]\noutput \"y\" = %3\n",
     0},
    {"rhs (N, K)",
     "%0 = input \"a\" : f32[2,3]\n%1 = parameter \"w\" : f32[4,3]\n"
     "%2 = transpose %1 perm=[1,0] : f32[3,4]\n"
     "%3 = dot_general %0, %2 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[1] rhs_contract=[0] : f32[2,4]\noutput \"y\" = %3\n",
     0},
    {"both sides",
     "%0 = input \"x\" : f32[3,2]\n%1 = input \"w\" : f32[4,3]\n"
     "%2 = transpose %0 perm=[1,0] : f32[2,3]\n%3 = transpose %1 perm=[1,0] : f32[3,4]\n"
     "%4 = dot_general %2, %3 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[1] rhs_contract=[0] : f32[2,4]\noutput \"y\" = %4\n",
     0},
    {"lhs with a batch dim",
     "%0 = input \"x\" : f32[5,3,2]\n%1 = input \"w\" : f32[5,3,4]\n"
     "%2 = transpose %0 perm=[0,2,1] : f32[5,2,3]\n"
     "%3 = dot_general %2, %1 lhs_batch=[0] rhs_batch=[0] "
     "lhs_contract=[2] rhs_contract=[1] : f32[5,2,4]\noutput \"y\" = %3\n",
     0},
    {"rhs with a batch dim",
     "%0 = input \"a\" : f32[5,2,3]\n%1 = input \"w\" : f32[5,4,3]\n"
     "%2 = transpose %1 perm=[0,2,1] : f32[5,3,4]\n"
     "%3 = dot_general %0, %2 lhs_batch=[0] rhs_batch=[0] "
     "lhs_contract=[2] rhs_contract=[1] : f32[5,2,4]\noutput \"y\" = %3\n",
     0},
    {"batch dims brought to the front: only both sides together are one sgemm",
     "%0 = input \"x\" : f32[5,2,3]\n%1 = input \"w\" : f32[5,3,4]\n"
     "%2 = transpose %0 perm=[1,0,2] : f32[2,5,3]\n%3 = transpose %1 perm=[1,0,2] : f32[3,5,4]\n"
     "%4 = dot_general %2, %3 lhs_batch=[1] rhs_batch=[1] "
     "lhs_contract=[2] rhs_contract=[0] : f32[5,2,4]\noutput \"y\" = %4\n",
     0},
    {"two contracting dims",
     "%0 = input \"x\" : f32[3,4,2]\n%1 = input \"w\" : f32[3,4,5]\n"
     "%2 = transpose %0 perm=[2,0,1] : f32[2,3,4]\n"
     "%3 = dot_general %2, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[1,2] rhs_contract=[0,1] : f32[2,5]\noutput \"y\" = %3\n",
     0},
    {"kept: the batch dim would leave the front",
     "%0 = input \"x\" : f32[2,5,3]\n%1 = input \"w\" : f32[5,3,4]\n"
     "%2 = transpose %0 perm=[1,0,2] : f32[5,2,3]\n"
     "%3 = dot_general %2, %1 lhs_batch=[0] rhs_batch=[0] "
     "lhs_contract=[2] rhs_contract=[1] : f32[5,2,4]\noutput \"y\" = %3\n",
     1},
    {"kept: contracting dims would come out of order",
     "%0 = input \"x\" : f32[4,3,2]\n%1 = input \"w\" : f32[3,4,5]\n"
     "%2 = transpose %0 perm=[2,1,0] : f32[2,3,4]\n"
     "%3 = dot_general %2, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[1,2] rhs_contract=[0,1] : f32[2,5]\noutput \"y\" = %3\n",
     1},
    {"kept: free dims would come out permuted",
     "%0 = input \"x\" : f32[2,3,4]\n%1 = input \"w\" : f32[4,5]\n"
     "%2 = transpose %0 perm=[1,0,2] : f32[3,2,4]\n"
     "%3 = dot_general %2, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[2] rhs_contract=[0] : f32[3,2,5]\noutput \"y\" = %3\n",
     1},
    {"kept: another reader",
     "%0 = input \"x\" : f32[3,2]\n%1 = input \"w\" : f32[3,4]\n"
     "%2 = transpose %0 perm=[1,0] : f32[2,3]\n"
     "%3 = dot_general %2, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[1] rhs_contract=[0] : f32[2,4]\n%4 = exp %2 : f32[2,3]\n"
     "output \"y\" = %3\noutput \"z\" = %4\n",
     1},
    {"kept: an output",
     "%0 = input \"x\" : f32[3,2]\n%1 = input \"w\" : f32[3,4]\n"
     "%2 = transpose %0 perm=[1,0] : f32[2,3]\n"
     "%3 = dot_general %2, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[1] rhs_contract=[0] : f32[2,4]\n"
     "output \"y\" = %3\noutput \"z\" = %2\n",
     1},
    {"kept: f64 (no sgemm)",
     "%0 = input \"x\" : f64[3,2]\n%1 = input \"w\" : f64[3,4]\n"
     "%2 = transpose %0 perm=[1,0] : f64[2,3]\n"
     "%3 = dot_general %2, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[1] rhs_contract=[0] : f64[2,4]\noutput \"y\" = %3\n",
     1},
    {"result (N, M)",
     "%0 = input \"a\" : f32[2,3]\n%1 = input \"b\" : f32[3,4]\n"
     "%2 = dot_general %0, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[1] rhs_contract=[0] : f32[2,4]\n"
     "%3 = transpose %2 perm=[1,0] : f32[4,2]\noutput \"y\" = %3\n",
     0},
    {"result with a batch dim",
     "%0 = input \"a\" : f32[5,2,3]\n%1 = input \"b\" : f32[5,3,4]\n"
     "%2 = dot_general %0, %1 lhs_batch=[0] rhs_batch=[0] "
     "lhs_contract=[2] rhs_contract=[1] : f32[5,2,4]\n"
     "%3 = transpose %2 perm=[0,2,1] : f32[5,4,2]\noutput \"y\" = %3\n",
     0},
    {"result: a weight gradient (x^T dy from dy^T x)",
     "%0 = input \"dy\" : f32[2,3,4]\n%1 = input \"x\" : f32[2,3,5]\n"
     "%2 = dot_general %0, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[0,1] rhs_contract=[0,1] : f32[4,5]\n"
     "%3 = transpose %2 perm=[1,0] : f32[5,4]\noutput \"y\" = %3\n",
     0},
    {"result: two lhs free dims",
     "%0 = input \"a\" : f32[2,6,3]\n%1 = input \"b\" : f32[3,4]\n"
     "%2 = dot_general %0, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[2] rhs_contract=[0] : f32[2,6,4]\n"
     "%3 = transpose %2 perm=[2,0,1] : f32[4,2,6]\noutput \"y\" = %3\n",
     0},
    {"kept: the result's batch dim moves",
     "%0 = input \"a\" : f32[5,2,3]\n%1 = input \"b\" : f32[5,3,4]\n"
     "%2 = dot_general %0, %1 lhs_batch=[0] rhs_batch=[0] "
     "lhs_contract=[2] rhs_contract=[1] : f32[5,2,4]\n"
     "%3 = transpose %2 perm=[1,0,2] : f32[2,5,4]\noutput \"y\" = %3\n",
     1},
    {"kept: the product has another reader",
     "%0 = input \"a\" : f32[2,3]\n%1 = input \"b\" : f32[3,4]\n"
     "%2 = dot_general %0, %1 lhs_batch=[] rhs_batch=[] "
     "lhs_contract=[1] rhs_contract=[0] : f32[2,4]\n"
     "%3 = transpose %2 perm=[1,0] : f32[4,2]\n%4 = exp %2 : f32[2,4]\n"
     "output \"y\" = %3\noutput \"z\" = %4\n",
     1},
};

static void check_fold_case(const FoldCase *c) {
  char msg[IR_ERR_LEN] = "";
  IrGraph *g = ir_graph_parse(c->ir, msg, sizeof msg);
  if (!g) fprintf(stderr, "%s: parse: %s\n", c->name, msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  bool has_z = ir_graph_output(g, "z") != IR_NONE;
  int64_t ny = ir_shape_numel(&g->values[ir_graph_output(g, "y")].shape);
  double *y0 = run_leaves(g, "y"), *z0 = has_z ? run_leaves(g, "z") : NULL;
  CU_ASSERT_EQUAL(pass_transpose_dot(g, NULL), IR_OK);
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  double *y1 = run_leaves(g, "y"), *z1 = has_z ? run_leaves(g, "z") : NULL;
  if (count_op(g, IR_TRANSPOSE) != c->transposes) fprintf(stderr, "case: %s\n", c->name);
  CHECK_INT(count_op(g, IR_TRANSPOSE), c->transposes);
  CHECK_INT(count_op(g, IR_DOT), 1);
  CHECK_ARRAY(y1, y0, ny, 0);
  if (has_z) CHECK_ARRAY(z1, z0, ir_shape_numel(&g->values[ir_graph_output(g, "z")].shape), 0);
  free(y0), free(y1), free(z0), free(z1);
  ir_graph_free(g);
}

static void test_transpose_dot_cases(void) {
  for (size_t i = 0; i < sizeof fold_cases / sizeof fold_cases[0]; i++)
    check_fold_case(&fold_cases[i]);
}

/* The rewritten dims, as text: the dot reads x and w directly, the transpose and the old dot go. */
static void test_transpose_dot_text(void) {
  check_pass(pass_transpose_dot,
             "%0 = input \"x\" : f32[3,2]\n%1 = input \"w\" : f32[3,4]\n"
             "%2 = transpose %0 perm=[1,0] : f32[2,3]\n"
             "%3 = dot_general %2, %1 lhs_batch=[] rhs_batch=[] "
             "lhs_contract=[1] rhs_contract=[0] : f32[2,4] #\"proj\"\n"
             "output \"y\" = %3\n",
             "%0 = input \"x\" : f32[3,2]\n%1 = input \"w\" : f32[3,4]\n"
             "%2 = dot_general %0, %1 lhs_batch=[] rhs_batch=[] "
             "lhs_contract=[0] rhs_contract=[0] : f32[2,4] #\"proj\"\n"
             "output \"y\" = %2\n");
  check_pass(pass_transpose_dot,
             "%0 = input \"dy\" : f32[2,3,4]\n%1 = input \"x\" : f32[2,3,5]\n"
             "%2 = dot_general %0, %1 lhs_batch=[] rhs_batch=[] "
             "lhs_contract=[0,1] rhs_contract=[0,1] : f32[4,5] @\"/m\" #\"w\"\n"
             "%3 = transpose %2 perm=[1,0] : f32[5,4]\noutput \"y\" = %3\n",
             "%0 = input \"dy\" : f32[2,3,4]\n%1 = input \"x\" : f32[2,3,5]\n"
             "%2 = dot_general %1, %0 lhs_batch=[] rhs_batch=[] "
             "lhs_contract=[0,1] rhs_contract=[0,1] : f32[5,4] @\"/m\" #\"w\"\n"
             "output \"y\" = %2\n");
}

/* sum(tanh(x w)^2) for x (2, 3, 4), w (4, 5), differentiated: its weight gradient reads x and
 * dy through transposes until the fold. */
static IrGraph *weight_gradient_graph(void) {
  IrGraph *g = ir_graph_new();
  const int64_t dx[] = {2, 3, 4}, dw[] = {4, 5};
  int32_t x = ir_input(g, "x", DT_F32, 3, dx), w = ir_param(g, "w", DT_F32, 2, dw);
  int32_t y = ir_tanh(g, ir_matmul(g, x, w));
  ir_graph_add_output(g, "loss", ir_reduce_sum(g, ir_mul(g, y, y), 3, (int32_t[]){0, 1, 2}));
  CU_ASSERT_EQUAL_FATAL(pass_autodiff(g, NULL), IR_OK);
  return g;
}

/* Through pass_simplify on an f32 gradient graph: the weight gradient of (B, T, C) x (C, N) is
 * computed without a transpose, with the same numbers. */
static void test_simplify_folds_weight_gradient(void) {
  IrGraph *g = weight_gradient_graph();
  CU_ASSERT(count_op(g, IR_TRANSPOSE) > 0);
  double *g0 = run_leaves(g, "grad:w");
  CU_ASSERT_EQUAL(pass_simplify(g, NULL), IR_OK);
  char msg[IR_ERR_LEN] = "";
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  CHECK_INT(count_op(g, IR_TRANSPOSE), 0);
  double *g1 = run_leaves(g, "grad:w");
  CHECK_ARRAY(g1, g0, 20, 0);
  free(g0), free(g1);
  ir_graph_free(g);
}

/* Under a mesh pass_simplify leaves the fold to pass_shard (a dot with swapped operands would
 * shard differently), which folds the per-device program, keeping the numbers. */
static void test_transpose_dot_waits_for_shard(void) {
  IrGraph *g = weight_gradient_graph();
  double *g0 = run_leaves(g, "grad:w");
  PassShard sh = {.mesh = {.naxes = 1, .names = {"data"}, .sizes = {2}}};
  PassOptions opt = {.shard = &sh};
  CU_ASSERT_EQUAL(pass_simplify(g, &opt), IR_OK);
  int before = count_op(g, IR_TRANSPOSE);
  CU_ASSERT(before > 0);
  CU_ASSERT_EQUAL(pass_shard(g, &opt), IR_OK);
  char msg[IR_ERR_LEN] = "";
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  CHECK_INT(count_op(g, IR_TRANSPOSE), 0);
  double *g1 = run_leaves(g, "grad:w");
  CHECK_ARRAY(g1, g0, 20, 0);
  free(g0), free(g1);
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"dce", test_dce},
      {"cse", test_cse},
      {"cse_keeps_distinct_attrs", test_cse_keeps_distinct_attrs},
      {"fold", test_fold},
      {"fold_limit_collectives", test_fold_respects_limit_and_collectives},
      {"algebra_identities", test_algebra_identities},
      {"algebra_shapes", test_algebra_shapes},
      {"simplify_preserves_results", test_simplify_preserves_results},
      {"transpose_dot_cases", test_transpose_dot_cases},
      {"transpose_dot_text", test_transpose_dot_text},
      {"simplify_folds_weight_gradient", test_simplify_folds_weight_gradient},
      {"transpose_dot_waits_for_shard", test_transpose_dot_waits_for_shard},
      {NULL, NULL},
  };
  return test_main(argc, argv, "simplify", cases);
}
