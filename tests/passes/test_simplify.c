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
  EXPECT_INT(g->nvalues, 2);
  EXPECT_INT(g->values[1].op, IR_NEG);
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
  EXPECT_NEAR(l1[0], l0[0], 1e-15);
  EXPECT_ARRAY(g1, g0, 12, 1e-15);
  /* the tanh(h * 1) became tanh(h) and merged with the second tanh: one tanh is left */
  int tanhs = 0;
  for (int32_t i = 0; i < g->nvalues; i++) tanhs += g->values[i].op == IR_TANH;
  EXPECT_INT(tanhs, 1);
  free(l0), free(g0), free(l1), free(g1);
  ir_graph_free(g);
}

int main(void) {
  CU_TestInfo tests[] = {
      {"dce", test_dce},
      {"cse", test_cse},
      {"cse_keeps_distinct_attrs", test_cse_keeps_distinct_attrs},
      {"fold", test_fold},
      {"fold_limit_collectives", test_fold_respects_limit_and_collectives},
      {"algebra_identities", test_algebra_identities},
      {"algebra_shapes", test_algebra_shapes},
      {"simplify_preserves_results", test_simplify_preserves_results},
      CU_TEST_INFO_NULL,
  };
  CU_SuiteInfo suites[] = {{.pName = "simplify", .pTests = tests}, CU_SUITE_INFO_NULL};
  return test_main(suites);
}
