/* test_ops.c: every op kind through the LLVM backend, against the interpreter.
 *
 * Each test builds a small graph with the IR builder, names its results as outputs, and lets
 * bt_check run it fused at O3 (on a one-buffer-per-value plan and on pass_memplan's shared
 * slab) and unfused at O0 without BLAS. Also: the errors for what the backend does not do.
 */
#include "backend_test.h"

#include <unistd.h>

#define RTOL            1e-5
#define OUT(g, name, v) CU_ASSERT_EQUAL(ir_graph_add_output((g), (name), (v)), IR_OK)

static const int64_t D35[] = {3, 5};

/* The cases backend_ops and backend_bf16 share (op_cases.c), on f32. */
OP_CASES(DT_F32, RTOL)

static void test_i32(void) {
  IrGraph *g = ir_graph_new();
  int32_t a = ir_input(g, "a", DT_I32, 2, D35), b = ir_input(g, "b", DT_I32, 2, D35);
  double ad[15], bd[15];
  for (int i = 0; i < 15; i++) {
    ad[i] = i * 7 - 50;
    bd[i] = (i % 4) - 1; /* -1, 0, 1, 2: division by zero and by -1 */
  }
  const IrOp ops[] = {IR_ADD, IR_SUB, IR_MUL, IR_DIV, IR_MAX, IR_MIN, IR_EQ, IR_LT, IR_GE};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    OUT(g, ir_op_name(ops[i]), ir_binary(g, ops[i], a, b));
  OUT(g, "neg", ir_neg(g, a));
  OUT(g, "abs", ir_abs(g, a));
  OUT(g, "tof32", ir_cast(g, a, DT_F32));
  OUT(g, "select", ir_select(g, b, a, ir_neg(g, a)));
  BtBind binds[] = {{"a", ad}, {"b", bd}};
  bt_check(g, binds, 2, 0);
  ir_graph_free(g);
}

static void test_layout(void) {
  IrGraph *g = ir_graph_new();
  const int64_t d3[] = {2, 3, 4}, d5[] = {5}, d2x12[] = {2, 12};
  int32_t x = ir_param(g, "x", DT_F32, 3, d3), v = ir_param(g, "v", DT_F32, 1, d5);
  const int32_t b1[] = {1}, b0[] = {0};
  const int64_t d53[] = {5, 3};
  OUT(g, "bcast_row", ir_broadcast(g, v, 2, d53, b0));
  OUT(g, "bcast_col", ir_broadcast(g, v, 2, D35, b1));
  int32_t s = ir_param(g, "s", DT_F32, 0, NULL);
  OUT(g, "bcast_scalar", ir_broadcast(g, s, 3, d3, NULL));
  OUT(g, "reshape", ir_reshape(g, x, 2, d2x12));
  const int32_t perm[] = {2, 0, 1};
  OUT(g, "transpose", ir_transpose(g, x, perm));
  const int64_t lo[] = {1, 0, 1}, hi[] = {2, 3, 3};
  OUT(g, "slice", ir_slice(g, x, lo, hi));
  const int32_t parts[] = {x, ir_neg(g, x), x};
  OUT(g, "concat", ir_concat(g, 3, parts, 1));
  const int64_t pl[] = {0, 1, 2}, ph[] = {1, 0, 1};
  OUT(g, "pad", ir_pad(g, x, pl, ph, -7.5));
  OUT(g, "iota_f32", ir_iota(g, DT_F32, 3, d3, 1));
  OUT(g, "iota_i32", ir_iota(g, DT_I32, 3, d3, 2));
  double cd[5] = {1.5, -2, 3.25, 0, 9};
  OUT(g, "const_data", ir_add(g, v, ir_const_data(g, DT_F32, cd, 1, d5)));
  OUT(g, "const_splat", ir_const_scalar(g, DT_F32, 2.5, 3, d3));
  bt_check(g, NULL, 0, RTOL);
  ir_graph_free(g);
}

static void test_reduce(void) {
  IrGraph *g = ir_graph_new();
  const int64_t d3[] = {3, 4, 5};
  int32_t x = ir_param(g, "x", DT_F32, 3, d3);
  const int32_t a1[] = {1}, a02[] = {0, 2}, all[] = {0, 1, 2}, last[] = {2};
  OUT(g, "sum1", ir_reduce_sum(g, x, 1, a1));
  OUT(g, "sum02", ir_reduce_sum(g, x, 2, a02));
  OUT(g, "sum_all", ir_reduce_sum(g, x, 3, all));
  OUT(g, "max_last", ir_reduce_max(g, x, 1, last));
  OUT(g, "max02", ir_reduce_max(g, x, 2, a02));
  int32_t i = ir_cast(g, ir_mul(g, x, ir_const_scalar(g, DT_F32, 10, 3, d3)), DT_I32);
  OUT(g, "isum", ir_reduce_sum(g, i, 1, last));
  OUT(g, "imax", ir_reduce_max(g, i, 2, a02));
  bt_check(g, NULL, 0, RTOL);
  ir_graph_free(g);
}

/* Transposes that move the last axis run over 32 x 32 tiles (kernel.c): partial tiles at the
 * edges, outer axes, and a fused operand. */
static void test_transpose_tiles(void) {
  IrGraph *g = ir_graph_new();
  const int64_t d2[] = {40, 70}, d3[] = {33, 34, 35};
  int32_t a = ir_param(g, "a", DT_F32, 2, d2), b = ir_param(g, "b", DT_F32, 3, d3);
  const int32_t p10[] = {1, 0}, p120[] = {1, 2, 0}, p021[] = {0, 2, 1};
  OUT(g, "t2", ir_transpose(g, a, p10));
  OUT(g, "t120", ir_transpose(g, b, p120));
  OUT(g, "t021_fused", ir_transpose(g, ir_exp(g, b), p021));
  bt_check(g, NULL, 0, RTOL);
  ir_graph_free(g);
}

static void test_collectives_one_device(void) {
  IrGraph *g = ir_graph_new();
  IrMesh mesh = {.naxes = 1, .names = {"data"}, .sizes = {1}};
  CU_ASSERT_EQUAL(ir_graph_set_mesh(g, &mesh), IR_OK);
  int32_t x = ir_param(g, "x", DT_F32, 2, D35);
  const char *axes[] = {"data"};
  OUT(g, "all_reduce", ir_all_reduce(g, x, 1, axes));
  OUT(g, "all_gather", ir_all_gather(g, ir_exp(g, x), 1, axes, 0));
  OUT(g, "reduce_scatter", ir_reduce_scatter(g, x, 1, axes, 1));
  OUT(g, "all_to_all", ir_all_to_all(g, x, 1, axes, 0, 1));
  bt_check(g, NULL, 0, RTOL);
  ir_graph_free(g);
}

/* A layer norm: broadcasts and elementwise chains that fusion turns into few loops. */
static void test_fused_chain(void) {
  IrGraph *g = ir_graph_new();
  const int64_t d[] = {4, 16}, c[] = {16}, r[] = {4};
  const int32_t last[] = {1}, b0[] = {0}, b1[] = {1};
  int32_t x = ir_param(g, "x", DT_F32, 2, d), gamma = ir_param(g, "gamma", DT_F32, 1, c);
  int32_t beta = ir_param(g, "beta", DT_F32, 1, c);
  int32_t inv = ir_const_scalar(g, DT_F32, 1.0 / 16, 1, r);
  int32_t mean = ir_mul(g, ir_reduce_sum(g, x, 1, last), inv);
  int32_t xc = ir_sub(g, x, ir_broadcast(g, mean, 2, d, b0));
  int32_t var = ir_mul(g, ir_reduce_sum(g, ir_mul(g, xc, xc), 1, last), inv);
  int32_t rs = ir_rsqrt(g, ir_add(g, var, ir_const_scalar(g, DT_F32, 1e-5, 1, r)));
  int32_t y = ir_mul(g, xc, ir_broadcast(g, rs, 2, d, b0));
  y = ir_add(g, ir_mul(g, y, ir_broadcast(g, gamma, 2, d, b1)), ir_broadcast(g, beta, 2, d, b1));
  OUT(g, "y", ir_tanh(g, y));
  bool mat[64];
  CU_ASSERT_EQUAL(pass_fusion_plan(g, mat), 0);
  int nmat = 0;
  for (int32_t v = 0; v < g->nvalues; v++) nmat += mat[v];
  CU_ASSERT(nmat < g->nvalues - 6); /* most of the chain needs no buffer */
  bt_check(g, NULL, 0, RTOL);
  ir_graph_free(g);
}

/* Kernel calls of g compiled with the fusion plan and its memory plan. */
static int32_t fused_kernel_calls(IrGraph *g) {
  bool *mat = malloc((size_t)g->nvalues + 1);
  MemPlan mp;
  CU_ASSERT_FATAL(mat && pass_fusion_plan(g, mat) == 0 && pass_memplan_fused(g, mat, &mp) == 0);
  LlvmOptions o = llvm_options_default();
  LlvmModule *m = NULL;
  char err[512] = "";
  CU_ASSERT_EQUAL(llvm_compile(g, &mp, &o, &m, err, sizeof err), 0);
  int32_t calls = m ? llvm_module_stats(m)->kernels : -1;
  llvm_module_free(m);
  pass_memplan_free(&mp);
  free(mat);
  return calls;
}

/* Reductions over trailing axes compute a single-use elementwise operand inline (blocks of 64,
 * then 16, then a scalar tail: runs of 150), softmax-like with a broadcast inside, over two
 * axes with a flat operand, and a max; over a leading axis the operand stays stored. */
static void test_fused_reduce(void) {
  IrGraph *g = ir_graph_new();
  const int64_t d[] = {3, 2, 150};
  const int32_t last[] = {2}, a12[] = {1, 2}, a0[] = {0}, b01[] = {0, 1};
  int32_t x = ir_param(g, "x", DT_F32, 3, d), y = ir_param(g, "y", DT_F32, 3, d);
  int32_t mx = ir_reduce_max(g, x, 1, last);
  int32_t e = ir_exp(g, ir_sub(g, x, ir_broadcast(g, mx, 3, d, b01)));
  OUT(g, "softmax_sum", ir_reduce_sum(g, e, 1, last));
  int32_t sq = ir_mul(g, ir_sub(g, x, y), ir_add(g, x, ir_const_scalar(g, DT_F32, 0.5, 3, d)));
  OUT(g, "sum12", ir_reduce_sum(g, sq, 2, a12));
  OUT(g, "max_last", ir_reduce_max(g, ir_neg(g, ir_mul(g, x, y)), 1, last));
  int32_t yy = ir_mul(g, y, y);
  OUT(g, "sum0", ir_reduce_sum(g, yy, 1, a0));
  /* the cross-entropy's one-hot: index-only, recomputed in the loss's reduction and in the
   * gradient's kernel, never stored */
  int32_t t = ir_input(g, "t", DT_I32, 2, (int64_t[]){3, 2});
  int32_t hot =
      ir_cast(g, ir_eq(g, ir_iota(g, DT_I32, 3, d, 2), ir_broadcast(g, t, 3, d, b01)), DT_F32);
  OUT(g, "picked", ir_reduce_sum(g, ir_mul(g, x, hot), 1, last));
  OUT(g, "dx", ir_sub(g, y, hot));
  bool mat[64];
  CU_ASSERT_FATAL(g->nvalues <= 64);
  CU_ASSERT_EQUAL(pass_fusion_plan(g, mat), 0);
  CU_ASSERT_FALSE(mat[e]);  /* inside softmax_sum */
  CU_ASSERT_FALSE(mat[sq]); /* inside sum12: flat, two axes */
  CU_ASSERT_TRUE(mat[yy]);  /* read down columns by sum0 */
  CU_ASSERT_FALSE(mat[hot]);
  double td[6] = {0, 149, 7, 64, 80, 15};
  BtBind binds[] = {{"t", td}};
  bt_check(g, binds, 1, RTOL);
  ir_graph_free(g);
}

/* AdamW's shape: new moments that only the parameter update reads are computed and stored by
 * the update's kernel (backends/llvm/fusion.c: llvm_fusion_defer), updated in place. */
static void test_deferred_stores(void) {
  IrGraph *g = ir_graph_new();
  const int64_t d[] = {7, 45};
  int32_t p = ir_param(g, "p", DT_F32, 2, d), m = ir_param(g, "m", DT_F32, 2, d);
  int32_t v = ir_param(g, "v", DT_F32, 2, d), gr = ir_param(g, "g", DT_F32, 2, d);
  int32_t nm = ir_add(g, ir_mul(g, ir_const_scalar(g, DT_F32, 0.9, 2, d), m),
                      ir_mul(g, ir_const_scalar(g, DT_F32, 0.1, 2, d), gr));
  int32_t nv = ir_add(g, ir_mul(g, ir_const_scalar(g, DT_F32, 0.99, 2, d), v),
                      ir_mul(g, ir_const_scalar(g, DT_F32, 0.01, 2, d), ir_mul(g, gr, gr)));
  int32_t den = ir_add(g, ir_sqrt(g, nv), ir_const_scalar(g, DT_F32, 1e-8, 2, d));
  int32_t np = ir_sub(g, p, ir_mul(g, ir_const_scalar(g, DT_F32, 0.01, 2, d), ir_div(g, nm, den)));
  OUT(g, "new:p", np);
  OUT(g, "new:m", nm);
  OUT(g, "new:v", nv);
  double vd[7 * 45];
  for (int i = 0; i < 7 * 45; i++) vd[i] = 0.01 * (i % 13); /* the second moment is >= 0 */
  BtBind binds[] = {{"v", vd}};
  bt_check(g, binds, 1, RTOL);
  CU_ASSERT_EQUAL(fused_kernel_calls(g), 1); /* one pass writes p, m and v */
  ir_graph_free(g);
}

static void expect_error(IrGraph *g, const char *needle) {
  MemPlan mp;
  bt_plan_simple(g, &mp);
  char err[512] = "";
  LlvmModule *m = NULL;
  CU_ASSERT_EQUAL(llvm_compile(g, &mp, NULL, &m, err, sizeof err), -1);
  CU_ASSERT_PTR_NULL(m);
  if (!strstr(err, needle)) fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, needle);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
  free(mp.offset);
  free(mp.bytes);
}

static void test_errors(void) {
  IrGraph *g = ir_graph_new();
  IrMesh mesh = {.naxes = 1, .names = {"data"}, .sizes = {2}};
  ir_graph_set_mesh(g, &mesh);
  const char *axes[] = {"data"};
  OUT(g, "y", ir_all_reduce(g, ir_param(g, "x", DT_F32, 2, D35), 1, axes));
  { /* a mesh of two: the collective is a call into the runtime (tests/mpi checks what it does) */
    MemPlan mp;
    bt_plan_simple(g, &mp);
    char err[512] = "";
    LlvmModule *m = NULL;
    LlvmOptions o = llvm_options_default();
    o.keep_ir = true;
    CU_ASSERT_EQUAL(llvm_compile(g, &mp, &o, &m, err, sizeof err), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CU_ASSERT_EQUAL(llvm_emit_text(m, f, false, err, sizeof err), 0);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "rt_comm_collective"));
    free(text);
    llvm_module_free(m);
    free(mp.offset);
    free(mp.bytes);
  }
  ir_graph_free(g);
  g = ir_graph_new();
  OUT(g, "y", ir_exp(g, ir_param(g, "x", DT_F64, 2, D35)));
  expect_error(g, "f64");
  ir_graph_free(g);
}

/* The object and text emitters on a small module. */
static void test_emit(void) {
  IrGraph *g = ir_graph_new();
  OUT(g, "y", ir_exp(g, ir_param(g, "x", DT_F32, 2, D35)));
  MemPlan mp;
  bt_plan_simple(g, &mp);
  char err[512];
  LlvmModule *m;
  LlvmOptions o = llvm_options_default();
  o.keep_ir = true;
  CU_ASSERT_EQUAL_FATAL(llvm_compile(g, &mp, &o, &m, err, sizeof err), 0);
  CU_ASSERT_EQUAL(llvm_module_stats(m)->units, 2); /* the step and the exp kernel */
  char path[] = "/tmp/axlc_backend_XXXXXX";
  int fd = mkstemp(path);
  CU_ASSERT(fd >= 0);
  close(fd);
  /* two units joined into one relocatable object */
  CU_ASSERT_EQUAL(llvm_emit_object(m, path, err, sizeof err), 0);
  FILE *f = fopen(path, "rb");
  char magic[4] = {0};
  CU_ASSERT(f && fread(magic, 1, 4, f) == 4 &&
            !memcmp(magic,
                    "\x7f"
                    "ELF",
                    4));
  if (f) fclose(f);
  remove(path);
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  CU_ASSERT_EQUAL(llvm_emit_text(m, mem, false, err, sizeof err), 0);
  CU_ASSERT_EQUAL(llvm_emit_text(m, mem, true, err, sizeof err), 0);
  fclose(mem);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "define void @axlc_step"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "axlc_step:"));
  free(text);
  llvm_module_free(m);
  free(mp.offset);
  free(mp.bytes);
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"unary", test_unary},
      {"binary", test_binary},
      {"i32", test_i32},
      {"layout", test_layout},
      {"reduce", test_reduce},
      {"reduce_runs", test_reduce_runs},
      {"transpose_tiles", test_transpose_tiles},
      {"dot", test_dot},
      {"gather_scatter_topk", test_gather_scatter_topk},
      {"attention", test_attention},
      {"collectives_one_device", test_collectives_one_device},
      {"fused_chain", test_fused_chain},
      {"fused_reduce", test_fused_reduce},
      {"deferred_stores", test_deferred_stores},
      {"errors", test_errors},
      {"emit", test_emit},
      {NULL, NULL},
  };
  return test_main(argc, argv, "backend_ops", cases);
}
