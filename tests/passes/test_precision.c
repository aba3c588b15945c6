/* test_precision.c: pass_widen_grads, each rewrite as IR text in and out, the readers it must
 * leave alone, and the interpreter's values: the widened gradient is the f32 product of the
 * same bf16 operands, within a bf16 rounding of the unwidened one. */
#include "passes/passes.h"
#include "tests/ir/ir_test.h"

static int widen_then_dce(IrGraph *g, const PassOptions *opt) {
  if (pass_widen_grads(g, opt) != IR_OK) return IR_ERR;
  return pass_dce(g, NULL) < 0 ? IR_ERR : IR_OK;
}

static IrGraph *parse(const char *text) {
  char msg[IR_ERR_LEN] = "";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  if (!g) fprintf(stderr, "parse: %s\n", msg);
  return g;
}

static void check(const char *in, const char *want, const PassOptions *opt) {
  IrGraph *g = parse(in);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_EQUAL(widen_then_dce(g, opt), IR_OK);
  char msg[IR_ERR_LEN] = "";
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  char *got = ir_graph_to_string(g);
  if (strcmp(got, want) != 0) fprintf(stderr, "--- got:\n%s--- want:\n%s", got, want);
  CU_ASSERT_STRING_EQUAL(got, want);
  free(got);
  ir_graph_free(g);
}

/* A weight gradient as autodiff leaves it: bf16 product, transpose, cast back to f32. */
static const char *weight_grad =
    "%0 = input \"x\" : bf16[4,3]\n"
    "%1 = input \"dy\" : bf16[4,2]\n"
    "%2 = dot_general %0, %1 lhs_contract=[0] rhs_contract=[0] : bf16[3,2]\n"
    "%3 = transpose %2 perm=[1,0] : bf16[2,3]\n"
    "%4 = cast %3 : f32[2,3]\n"
    "output \"g\" = %4\n";

static void test_dot_keeps_accumulator(void) {
  check(weight_grad,
        "%0 = input \"x\" : bf16[4,3]\n"
        "%1 = input \"dy\" : bf16[4,2]\n"
        "%2 = dot_general %0, %1 lhs_batch=[] rhs_batch=[] lhs_contract=[0] rhs_contract=[0] : "
        "f32[3,2]\n"
        "%3 = transpose %2 perm=[1,0] : f32[2,3]\n"
        "output \"g\" = %3\n",
        NULL);
  /* grads: bf16 (the driver's bf16_grads): the pass leaves the graph as it is */
  PassOptions keep = {0};
  keep.bf16_grads = true;
  check(weight_grad,
        "%0 = input \"x\" : bf16[4,3]\n"
        "%1 = input \"dy\" : bf16[4,2]\n"
        "%2 = dot_general %0, %1 lhs_batch=[] rhs_batch=[] lhs_contract=[0] rhs_contract=[0] : "
        "bf16[3,2]\n"
        "%3 = transpose %2 perm=[1,0] : bf16[2,3]\n"
        "%4 = cast %3 : f32[2,3]\n"
        "output \"g\" = %4\n",
        &keep);
}

static void test_sums_widen(void) {
  /* a tied parameter's two gradients are added in f32; a bias gradient sums in f32 */
  check("%0 = input \"a\" : bf16[2,3]\n"
        "%1 = input \"b\" : bf16[2,3]\n"
        "%2 = add %0, %1 : bf16[2,3]\n"
        "%3 = cast %2 : f32[2,3]\n"
        "%4 = reduce_sum %0 axes=[0] : bf16[3]\n"
        "%5 = cast %4 : f32[3]\n"
        "output \"tied\" = %3\n"
        "output \"bias\" = %5\n",
        "%0 = input \"a\" : bf16[2,3]\n"
        "%1 = input \"b\" : bf16[2,3]\n"
        "%2 = cast %0 : f32[2,3]\n"
        "%3 = cast %1 : f32[2,3]\n"
        "%4 = add %2, %3 : f32[2,3]\n"
        "%5 = cast %0 : f32[2,3]\n" /* one cast per widening; simplify's CSE merges them */
        "%6 = reduce_sum %5 axes=[0] : f32[3]\n"
        "output \"tied\" = %4\n"
        "output \"bias\" = %6\n",
        NULL);
}

static void test_other_readers_keep_bf16(void) {
  /* the product has a second reader: it stays bf16 for it, and the cast stays too */
  const char *in = "%0 = input \"x\" : bf16[4,3]\n"
                   "%1 = input \"dy\" : bf16[4,2]\n"
                   "%2 = dot_general %0, %1 lhs_batch=[] rhs_batch=[] lhs_contract=[0] "
                   "rhs_contract=[0] : bf16[3,2]\n"
                   "%3 = cast %2 : f32[3,2]\n"
                   "%4 = neg %2 : bf16[3,2]\n"
                   "output \"g\" = %3\n"
                   "output \"other\" = %4\n";
  check(in, in, NULL);
  /* an f32 graph has nothing to widen */
  const char *f32 = "%0 = input \"x\" : f32[2]\n"
                    "%1 = cast %0 : f32[2]\n"
                    "output \"y\" = %1\n";
  check(f32, f32, NULL);
}

/* Runs g on inputs x (4, 3) and dy (4, 2) made of bf16 values; returns output g (6). */
static double *run(const IrGraph *g) {
  double x[12], dy[8];
  for (int i = 0; i < 12; i++) x[i] = ir_dtype_round(DT_BF16, 1.0 + 0.013 * i * i);
  for (int i = 0; i < 8; i++) dy[i] = ir_dtype_round(DT_BF16, 0.7 - 0.091 * i);
  const char *names[2] = {"x", "dy"};
  const double *data[2] = {x, dy};
  return test_run(g, 2, names, data, "g");
}

static void test_values(void) {
  IrGraph *g = parse(weight_grad);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  double *before = run(g);
  CU_ASSERT_EQUAL(pass_widen_grads(g, NULL), IR_OK);
  double *after = run(g);
  double x[12], dy[8];
  for (int i = 0; i < 12; i++) x[i] = ir_dtype_round(DT_BF16, 1.0 + 0.013 * i * i);
  for (int i = 0; i < 8; i++) dy[i] = ir_dtype_round(DT_BF16, 0.7 - 0.091 * i);
  int rounded = 0;
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 3; c++) { /* g[r][c] = sum_k x[k][c] dy[k][r] */
      double exact = 0;
      for (int k = 0; k < 4; k++) exact += x[k * 3 + c] * dy[k * 2 + r];
      CHECK_NEAR(after[r * 3 + c], ir_dtype_round(DT_F32, exact), 0);
      CHECK_NEAR(before[r * 3 + c], ir_dtype_round(DT_BF16, exact), 0);
      rounded += before[r * 3 + c] != after[r * 3 + c];
    }
  CU_ASSERT(rounded > 0); /* the widening is visible: bf16 rounding is gone */
  free(before), free(after);
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"dot_keeps_accumulator", test_dot_keeps_accumulator},
      {"sums_widen", test_sums_widen},
      {"other_readers_keep_bf16", test_other_readers_keep_bf16},
      {"values", test_values},
      {NULL, NULL},
  };
  return test_main(argc, argv, "precision", cases);
}
