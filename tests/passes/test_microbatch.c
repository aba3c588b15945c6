/* test_microbatch.c: pass_microbatch. The rewrite as IR text (inputs grown to the whole batch,
 * each copy's slice of rows r mod N = k, copy 0 before copy 1 and copy 1's first value tagged,
 * shared values once, f32 sums divided by N, the same rows under a batch split), and the values: a
 * least-squares step over 2 and 4 microbatches equals the whole-batch step, loss and gradient. */
#include "passes/passes.h"
#include "tests/ir/ir_test.h"

static IrGraph *parse(const char *text) {
  char msg[IR_ERR_LEN] = "";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  if (!g) fprintf(stderr, "parse: %s\n", msg);
  return g;
}

/* One microbatch of 2 rows: a bf16 product with a parameter read through a cast (shared), a
 * loss and a bf16 gradient (summed in f32, handed back in bf16). */
static const char *micro = "%0 = input \"ids\" : f32[2,3]\n"
                           "%1 = parameter \"w\" : f32[3]\n"
                           "%2 = cast %1 : bf16[3]\n"
                           "%3 = cast %0 : bf16[2,3]\n"
                           "%4 = broadcast_in_dim %2 bdims=[1] : bf16[2,3]\n"
                           "%5 = mul %3, %4 : bf16[2,3]\n"
                           "%6 = reduce_sum %5 axes=[0,1] : bf16[]\n"
                           "%7 = cast %6 : f32[]\n"
                           "%8 = reduce_sum %3 axes=[0] : bf16[3]\n"
                           "output \"loss\" = %7\n"
                           "output \"grad:w\" = %8\n"
                           "output \"w16\" = %2\n";

static char *rewrite(const char *in, const PassOptions *opt, int want) {
  IrGraph *g = parse(in);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  int st = pass_microbatch(g, opt);
  CU_ASSERT_EQUAL(st, want);
  if (st != IR_OK) {
    char *err = strdup(ir_graph_error(g) ? ir_graph_error(g) : "");
    ir_graph_free(g);
    return err;
  }
  char msg[IR_ERR_LEN] = "";
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  char *got = ir_graph_to_string(g);
  ir_graph_free(g);
  return got;
}

static void expect_text(const char *got, const char *want) {
  if (strcmp(got, want) != 0) fprintf(stderr, "--- got:\n%s--- want:\n%s", got, want);
  CU_ASSERT_STRING_EQUAL(got, want);
}

static void test_copies_in_sequence(void) {
  PassOptions opt = {0};
  opt.microbatches = 2;
  char *got = rewrite(micro, &opt, IR_OK);
  expect_text(got, "%0 = input \"ids\" : f32[4,3]\n"
                   "%1 = reshape %0 : f32[2,2,3]\n"
                   "%2 = slice %1 start=[0,0,0] limit=[2,1,3] : f32[2,1,3]\n"
                   "%3 = reshape %2 : f32[2,3]\n"
                   "%4 = parameter \"w\" : f32[3]\n"
                   "%5 = cast %4 : bf16[3]\n"
                   "%6 = cast %3 : bf16[2,3]\n"
                   "%7 = broadcast_in_dim %5 bdims=[1] : bf16[2,3]\n"
                   "%8 = mul %6, %7 : bf16[2,3]\n"
                   "%9 = reduce_sum %8 axes=[0,1] : bf16[]\n"
                   "%10 = cast %9 : f32[]\n"
                   "%11 = reduce_sum %6 axes=[0] : bf16[3]\n"
                   "%12 = cast %11 : f32[3] @\"/learner\" #\"microbatch.mean\"\n"
                   /* copy 1: rows 1 and 3, the input's values again; the shared cast and broadcast
                      not */
                   "%13 = reshape %0 : f32[2,2,3]\n"
                   "%14 = slice %13 start=[0,1,0] limit=[2,2,3] : f32[2,1,3] "
                   "#\"microbatch.start\"\n"
                   "%15 = reshape %14 : f32[2,3]\n"
                   "%16 = cast %15 : bf16[2,3]\n"
                   "%17 = mul %16, %7 : bf16[2,3]\n"
                   "%18 = reduce_sum %17 axes=[0,1] : bf16[]\n"
                   "%19 = cast %18 : f32[]\n"
                   "%20 = add %10, %19 : f32[] @\"/learner\" #\"microbatch.mean\"\n"
                   "%21 = constant value=2 : f32[] @\"/learner\" #\"microbatch.mean\"\n"
                   "%22 = div %20, %21 : f32[] @\"/learner\" #\"microbatch.mean\"\n"
                   "%23 = reduce_sum %16 axes=[0] : bf16[3]\n"
                   "%24 = cast %23 : f32[3] @\"/learner\" #\"microbatch.mean\"\n"
                   "%25 = add %12, %24 : f32[3] @\"/learner\" #\"microbatch.mean\"\n"
                   "%26 = constant value=2 : f32[3] @\"/learner\" #\"microbatch.mean\"\n"
                   "%27 = div %25, %26 : f32[3] @\"/learner\" #\"microbatch.mean\"\n"
                   "%28 = cast %27 : bf16[3] @\"/learner\" #\"microbatch.mean\"\n"
                   "output \"loss\" = %22\n"
                   "output \"grad:w\" = %28\n"
                   "output \"w16\" = %5\n");
  free(got);
}

/* With the batch split over 2 devices, microbatch k is still the rows r with r mod 2 = k:
 * (8, 3) -> (4, 2 microbatches, 3), slice [:, k]; each device's 4 rows hold 2 of each
 * microbatch (the shard pass keeps the split on dim 0: test_shard's microbatch layouts). */
static void test_each_device_its_rows(void) {
  IrMesh mesh = {.naxes = 1, .names = {"data"}, .sizes = {2}};
  PassShardLeaf leaves[1] = {{"ids", {.axes = {{1}}}}};
  PassShard shard = {.mesh = mesh, .nleaves = 1, .leaves = leaves};
  PassOptions opt = {0};
  opt.microbatches = 2;
  opt.shard = &shard;
  const char *in = "%0 = input \"ids\" : f32[4,3]\n"
                   "%1 = reduce_sum %0 axes=[0,1] : f32[]\n"
                   "output \"loss\" = %1\n";
  char *got = rewrite(in, &opt, IR_OK);
  expect_text(got, "%0 = input \"ids\" : f32[8,3]\n"
                   "%1 = reshape %0 : f32[4,2,3]\n"
                   "%2 = slice %1 start=[0,0,0] limit=[4,1,3] : f32[4,1,3]\n"
                   "%3 = reshape %2 : f32[4,3]\n"
                   "%4 = reduce_sum %3 axes=[0,1] : f32[]\n"
                   "%5 = reshape %0 : f32[4,2,3]\n"
                   "%6 = slice %5 start=[0,1,0] limit=[4,2,3] : f32[4,1,3] "
                   "#\"microbatch.start\"\n"
                   "%7 = reshape %6 : f32[4,3]\n"
                   "%8 = reduce_sum %7 axes=[0,1] : f32[]\n"
                   "%9 = add %4, %8 : f32[] @\"/learner\" #\"microbatch.mean\"\n"
                   "%10 = constant value=2 : f32[] @\"/learner\" #\"microbatch.mean\"\n"
                   "%11 = div %9, %10 : f32[] @\"/learner\" #\"microbatch.mean\"\n"
                   "output \"loss\" = %11\n");
  free(got);
  /* one microbatch's 3 rows do not divide over the 2 devices */
  char *err = rewrite("%0 = input \"ids\" : f32[3,3]\n"
                      "%1 = reduce_sum %0 axes=[0,1] : f32[]\n"
                      "output \"loss\" = %1\n",
                      &opt, IR_ERR);
  CHECK_HAS(err, "microbatch: input 'ids' has 3 rows per microbatch");
  free(err);
}

static void test_one_is_nothing(void) {
  PassOptions opt = {0};
  opt.microbatches = 1;
  IrGraph *g = parse(micro);
  char *before = ir_graph_to_string(g);
  CU_ASSERT_EQUAL(pass_microbatch(g, &opt), IR_OK);
  CU_ASSERT_EQUAL(pass_microbatch(g, NULL), IR_OK);
  char *after = ir_graph_to_string(g);
  expect_text(after, before);
  free(before), free(after);
  ir_graph_free(g);
}

/* loss = mean over rows of (x w - t)^2, for `rows` rows of 3 features, and its gradient. */
static IrGraph *least_squares(int64_t rows) {
  IrGraph *g = ir_graph_new();
  int64_t xs[2] = {rows, 3}, ts[2] = {rows, 1}, ws[2] = {3, 1};
  int32_t x = ir_input(g, "ids", DT_F32, 2, xs), t = ir_input(g, "targets", DT_F32, 2, ts);
  int32_t w = ir_param(g, "w", DT_F32, 2, ws);
  int32_t e = ir_sub(g, ir_matmul(g, x, w), t);
  int32_t axes[2] = {0, 1};
  int32_t sum = ir_reduce_sum(g, ir_mul(g, e, e), 2, axes);
  int32_t loss = ir_div(g, sum, ir_const_scalar(g, DT_F32, (double)rows, 0, NULL));
  CU_ASSERT_EQUAL(ir_graph_add_output(g, "loss", loss), IR_OK);
  CU_ASSERT_EQUAL(pass_autodiff(g, NULL), IR_OK);
  return g;
}

/* Runs g on 8 rows of data; returns loss and the gradient's 3 elements in out[0..3]. */
static void run(const IrGraph *g, double *out) {
  double x[24], t[8], w[3] = {0.5, -0.25, 0.125};
  for (int i = 0; i < 24; i++) x[i] = sin(0.7 * i + 0.3);
  for (int i = 0; i < 8; i++) t[i] = cos(1.3 * i);
  IrInterp *it = ir_interp_new(g, NULL);
  ir_interp_set_rounding(it, false);
  CU_ASSERT_EQUAL(test_bind(it, g, "ids", x), IR_OK);
  CU_ASSERT_EQUAL(test_bind(it, g, "targets", t), IR_OK);
  CU_ASSERT_EQUAL(test_bind(it, g, "w", w), IR_OK);
  CU_ASSERT_EQUAL_FATAL(ir_interp_run(it), IR_OK);
  out[0] = ir_interp_output(it, 0, "loss", NULL)[0];
  memcpy(out + 1, ir_interp_output(it, 0, "grad:w", NULL), 3 * sizeof *out);
  ir_interp_free(it);
}

static void test_values(void) {
  IrGraph *whole = least_squares(8);
  double want[4], got[4];
  run(whole, want);
  for (int64_t n = 2; n <= 4; n *= 2) {
    IrGraph *g = least_squares(8 / n);
    PassOptions opt = {0};
    opt.microbatches = n;
    CU_ASSERT_EQUAL_FATAL(pass_microbatch(g, &opt), IR_OK);
    run(g, got);
    for (int i = 0; i < 4; i++) CHECK_NEAR(got[i], want[i], 1e-12 * fabs(want[i]));
    ir_graph_free(g);
  }
  ir_graph_free(whole);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"copies_in_sequence", test_copies_in_sequence},
      {"each_device_its_rows", test_each_device_its_rows},
      {"one_is_nothing", test_one_is_nothing},
      {"values", test_values},
      {NULL, NULL},
  };
  return test_main(argc, argv, "microbatch", cases);
}
