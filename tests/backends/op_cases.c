/* op_cases.c: the op cases backend_ops (f32) and backend_bf16 (bf16) share, written once with
 * the dtype of their floating values as a parameter (backend_test.h declares them). Each builds
 * a small graph and lets bt_check run it through the LLVM backend against the interpreter within
 * rtol (1e-5 for f32; 2^-7 for bf16, whose every op rounds where the interpreter rounds once).
 */
#include "backend_test.h"

#define OUT(g, name, v) CU_ASSERT_EQUAL(ir_graph_add_output((g), (name), (v)), IR_OK)

static const int64_t D35[] = {3, 5};

/* abs(x) + 0.5: a positive operand for log, sqrt, rsqrt, pow. */
static int32_t positive(IrGraph *g, IrDType dt, int32_t x) {
  return ir_add(g, ir_abs(g, x), ir_const_scalar(g, dt, 0.5, 2, D35));
}

void op_unary(IrDType dt, double rtol) {
  IrGraph *g = ir_graph_new();
  int32_t x = ir_param(g, "x", dt, 2, D35);
  const IrOp ops[] = {IR_NEG, IR_EXP, IR_TANH,     IR_ABS,          IR_SIN,
                      IR_COS, IR_ERF, IR_LOGISTIC, IR_STOP_GRADIENT};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    OUT(g, ir_op_name(ops[i]), ir_unary(g, ops[i], x));
  OUT(g, "log", ir_log(g, positive(g, dt, x)));
  OUT(g, "sqrt", ir_sqrt(g, positive(g, dt, x)));
  OUT(g, "rsqrt", ir_rsqrt(g, positive(g, dt, x)));
  bt_check(g, NULL, 0, rtol);
  ir_graph_free(g);
}

void op_binary(IrDType dt, double rtol) {
  IrGraph *g = ir_graph_new();
  int32_t a = ir_param(g, "a", dt, 2, D35), b = ir_param(g, "b", dt, 2, D35);
  double ad[15], bd[15];
  for (int i = 0; i < 15; i++) {
    ad[i] = (i % 5) - 2.0;
    bd[i] = i % 3 == 0 ? ad[i] : 0.25 * i - 1.5; /* ties for max/min/compares */
  }
  const IrOp ops[] = {IR_ADD, IR_SUB, IR_MUL, IR_DIV, IR_MAX, IR_MIN,
                      IR_EQ,  IR_NE,  IR_LT,  IR_LE,  IR_GT,  IR_GE};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    OUT(g, ir_op_name(ops[i]), ir_binary(g, ops[i], a, b));
  OUT(g, "pow", ir_pow(g, positive(g, dt, a), b));
  OUT(g, "select", ir_select(g, ir_gt(g, a, b), a, b));
  OUT(g, "cast",
      ir_cast(g, ir_cast(g, ir_mul(g, b, ir_const_scalar(g, dt, 3.7, 2, D35)), DT_I32), dt));
  /* 1/3 and its multiples are in neither dtype: every result here must be rounded */
  OUT(g, "div3", ir_div(g, b, ir_const_scalar(g, dt, 3, 2, D35)));
  BtBind binds[] = {{"a", ad}, {"b", bd}};
  bt_check(g, binds, 2, rtol);
  ir_graph_free(g);
}

/* Runs long enough for reduce.c's vector lanes (16 a step), with scalar tails, short ones, a
 * NaN in one row and -inf in another; reductions over leading axes (16 columns at a time,
 * leftovers) and over a middle axis. */
void op_reduce_runs(IrDType dt, double rtol) {
  IrGraph *g = ir_graph_new();
  const int64_t d[] = {3, 4, 37}, d2[] = {5, 48}, d3[] = {3, 4, 5};
  int32_t x = ir_param(g, "x", dt, 3, d), y = ir_param(g, "y", dt, 2, d2);
  int32_t z = ir_param(g, "z", dt, 3, d3);
  const int32_t last[] = {2}, a12[] = {1, 2}, all[] = {0, 1, 2}, a1[] = {1}, a01[] = {0, 1};
  const int32_t a0[] = {0};
  OUT(g, "sum_last", ir_reduce_sum(g, x, 1, last));
  OUT(g, "sum12", ir_reduce_sum(g, x, 2, a12));
  OUT(g, "sum_all", ir_reduce_sum(g, x, 3, all));
  OUT(g, "max_last", ir_reduce_max(g, x, 1, last));
  OUT(g, "max12", ir_reduce_max(g, x, 2, a12));
  OUT(g, "ysum", ir_reduce_sum(g, y, 1, a1));
  OUT(g, "ysum_exp", ir_reduce_sum(g, ir_exp(g, y), 1, a1));
  OUT(g, "ymax", ir_reduce_max(g, y, 1, a1));
  OUT(g, "ysum_all", ir_reduce_sum(g, y, 2, a01));
  OUT(g, "sum0", ir_reduce_sum(g, x, 1, a0));
  OUT(g, "sum01", ir_reduce_sum(g, x, 2, a01));
  OUT(g, "max01", ir_reduce_max(g, x, 2, a01));
  OUT(g, "ycolsum", ir_reduce_sum(g, y, 1, a0));
  OUT(g, "ycolmax", ir_reduce_max(g, ir_neg(g, y), 1, a0));
  OUT(g, "zsum_mid", ir_reduce_sum(g, z, 1, a1));
  OUT(g, "zsum_short", ir_reduce_sum(g, z, 1, last));
  OUT(g, "zmax_mid", ir_reduce_max(g, z, 1, a1));
  double yd[5 * 48];
  for (int i = 0; i < 5 * 48; i++) yd[i] = ir_dtype_round(dt, 0.37 * ((i * 7919) % 101) - 18.0);
  yd[48 + 20] = NAN;                                       /* row 1: NaN wins the max and the sum */
  yd[2 * 48 + 45] = NAN;                                   /* row 2: NaN in the scalar tail */
  for (int i = 0; i < 48; i++) yd[3 * 48 + i] = -INFINITY; /* row 3: all -inf */
  yd[4 * 48 + 47] = 1e30;                                  /* row 4: the max in the tail */
  BtBind binds[] = {{"y", yd}};
  bt_check(g, binds, 1, rtol);
  ir_graph_free(g);
}

/* Outputs dot d as name and, for bf16 operands, the same dot keeping its f32 accumulator
 * (ir/shape.c: shape_dot) as name_f32. */
static void dot_out(IrGraph *g, IrDType dt, const char *name, int32_t d) {
  OUT(g, name, d);
  if (dt == DT_F32) return;
  IrValue p = g->values[d];
  p.dtype = DT_F32;
  p.name = NULL;
  int32_t w = ir_graph_add(g, &p);
  CU_ASSERT_EQUAL_FATAL(g->values[w].dtype, DT_F32);
  char n[32];
  snprintf(n, sizeof n, "%s_f32", name);
  OUT(g, n, w);
}

/* GEMM layouts (rt_sgemm, rt_sbgemm at O3); a middle contracting axis and a batch dim that does
 * not lead take the loop nest everywhere; an i32 product. */
void op_dot(IrDType dt, double rtol) {
  IrGraph *g = ir_graph_new();
  const int64_t mk[] = {6, 8}, kn[] = {8, 5}, km[] = {8, 6}, nk[] = {5, 8}, bmk[] = {3, 6, 8},
                bkn[] = {3, 8, 5}, mkp[] = {6, 8, 2}, kbn[] = {8, 3, 5};
  int32_t A = ir_param(g, "A", dt, 2, mk), B = ir_param(g, "B", dt, 2, kn);
  int32_t At = ir_param(g, "At", dt, 2, km), Bt = ir_param(g, "Bt", dt, 2, nk);
  int32_t bA = ir_param(g, "bA", dt, 3, bmk), bB = ir_param(g, "bB", dt, 3, bkn);
  int32_t P = ir_param(g, "P", dt, 3, mkp), Q = ir_param(g, "Q", dt, 3, kbn);
  const int32_t z[] = {0}, one[] = {1}, two[] = {2};
  dot_out(g, dt, "mm", ir_matmul(g, A, B));
  dot_out(g, dt, "ta", ir_dot(g, At, B, 0, NULL, NULL, 1, z, z));
  dot_out(g, dt, "tb", ir_dot(g, A, Bt, 0, NULL, NULL, 1, one, one));
  dot_out(g, dt, "tab", ir_dot(g, At, Bt, 0, NULL, NULL, 1, z, one));
  dot_out(g, dt, "batched", ir_dot(g, bA, bB, 1, z, z, 1, two, one));
  dot_out(g, dt, "middle_k", ir_dot(g, P, B, 0, NULL, NULL, 1, one, z));
  dot_out(g, dt, "batch_mid", ir_dot(g, bA, Q, 1, z, one, 1, two, z));
  dot_out(g, dt, "outer", ir_dot(g, A, B, 0, NULL, NULL, 0, NULL, NULL));
  int32_t ia = ir_cast(g, ir_mul(g, A, ir_const_scalar(g, dt, 5, 2, mk)), DT_I32);
  int32_t ib = ir_cast(g, ir_mul(g, B, ir_const_scalar(g, dt, 5, 2, kn)), DT_I32);
  OUT(g, "i32", ir_matmul(g, ia, ib));
  bt_check(g, NULL, 0, rtol);
  ir_graph_free(g);
}

/* Gathers and scatter-adds (repeated rows accumulate; many rows, several blocks of the kernel's
 * scratch; rows longer than it), top_k_indices (ties to the lower index, NaN largest). */
void op_gather_scatter_topk(IrDType dt, double rtol) {
  IrGraph *g = ir_graph_new();
  const int64_t vd[] = {7, 4}, bt[] = {2, 3}, btd[] = {2, 3, 4}, bn[] = {3, 6};
  int32_t table = ir_param(g, "table", dt, 2, vd);
  int32_t idx = ir_input(g, "idx", DT_I32, 2, bt);
  int32_t upd = ir_param(g, "upd", dt, 3, btd);
  double id[6] = {3, 0, 6, 3, 3, 1};
  OUT(g, "gather", ir_gather(g, table, idx));
  OUT(g, "scatter", ir_scatter_add(g, idx, upd, 7));
  const int64_t ni[] = {40}, nd[] = {40, 300}, wi[] = {3}, wd[] = {3, 9000};
  int32_t idx2 = ir_input(g, "idx2", DT_I32, 1, ni), upd2 = ir_param(g, "upd2", dt, 2, nd);
  int32_t idx3 = ir_input(g, "idx3", DT_I32, 1, wi), upd3 = ir_param(g, "upd3", dt, 2, wd);
  double i2[40], i3[3] = {1, 3, 1};
  for (int i = 0; i < 40; i++) i2[i] = (i * 17) % 50;
  OUT(g, "scatter_rows", ir_scatter_add(g, idx2, upd2, 50));
  OUT(g, "scatter_long", ir_scatter_add(g, idx3, upd3, 4));
  int32_t x = ir_param(g, "x", dt, 2, bn);
  double xd[18] = {1, 5, 5, 2, 0, 5, -1, -1, -1, -1, -1, -1, 3, NAN, 1, 0, 1.001, 1.002};
  OUT(g, "top3", ir_top_k_indices(g, x, 3));
  OUT(g, "top1", ir_top_k_indices(g, ir_neg(g, x), 1));
  BtBind binds[] = {{"idx", id}, {"idx2", i2}, {"idx3", i3}, {"x", xd}};
  bt_check(g, binds, 4, rtol);
  ir_graph_free(g);
}

/* The fused attention ops through the runtime's kernels: causal and not, T not a multiple of
 * the kernel's query block, an odd head size; the gradient's three parts as one output and fused
 * into an add. */
void op_attention(IrDType dt, double rtol) {
  IrGraph *g = ir_graph_new();
  const int64_t s[] = {2, 3, 37, 5};
  int32_t q = ir_param(g, "q", dt, 4, s), k = ir_param(g, "k", dt, 4, s);
  int32_t v = ir_param(g, "v", dt, 4, s), d = ir_param(g, "dout", dt, 4, s);
  OUT(g, "causal", ir_attention(g, q, k, v, true, 0.45));
  OUT(g, "full", ir_attention(g, q, k, v, false, 0.3));
  int32_t gr = ir_attention_grad(g, q, k, v, d, true, 0.45);
  OUT(g, "grad", gr);
  OUT(g, "grad_add", ir_add(g, gr, ir_const_scalar(g, dt, 1, 5, (int64_t[]){3, 2, 3, 37, 5})));
  OUT(g, "grad_full", ir_attention_grad(g, q, k, v, d, false, 0.3));
  bt_check(g, NULL, 0, rtol);
  ir_graph_free(g);
}
