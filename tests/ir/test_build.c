/* test_build.c: builder shape rules (result types) and builder errors (first error kept, naming
 * the config path; later calls given IR_NONE stay quiet). */
#include "tests/ir/ir_test.h"

static void expect_shape(const IrGraph *g, int32_t v, IrDType dt, int32_t rank,
                         const int64_t *dims) {
  CU_ASSERT_FATAL(v >= 0);
  CHECK_INT(g->values[v].dtype, dt);
  CHECK_INT(g->values[v].shape.rank, rank);
  for (int32_t d = 0; d < rank && d < g->values[v].shape.rank; d++)
    CHECK_INT(g->values[v].shape.dims[d], dims[d]);
}

static void test_result_types(void) {
  IrGraph *g = ir_graph_new();
  int32_t x = ir_input(g, "x", DT_BF16, 3, (int64_t[]){2, 3, 4});
  int32_t w = ir_param(g, "w", DT_BF16, 2, (int64_t[]){4, 5});
  expect_shape(g, ir_matmul(g, x, w), DT_BF16, 3, (int64_t[]){2, 3, 5});
  int32_t b = ir_param(g, "b", DT_BF16, 3, (int64_t[]){2, 6, 4});
  expect_shape(
      g, ir_dot(g, x, b, 1, (int32_t[]){0}, (int32_t[]){0}, 1, (int32_t[]){2}, (int32_t[]){2}),
      DT_BF16, 3, (int64_t[]){2, 3, 6});
  expect_shape(g, ir_reduce_sum(g, x, 2, (int32_t[]){2, 0}), DT_BF16, 1, (int64_t[]){3});
  expect_shape(g, ir_transpose(g, x, (int32_t[]){1, 2, 0}), DT_BF16, 3, (int64_t[]){3, 4, 2});
  expect_shape(g, ir_slice(g, x, (int64_t[]){0, 1, 0}, (int64_t[]){2, 3, 2}), DT_BF16, 3,
               (int64_t[]){2, 2, 2});
  expect_shape(g, ir_pad(g, x, (int64_t[]){1, 0, 0}, (int64_t[]){0, 0, 3}, 0), DT_BF16, 3,
               (int64_t[]){3, 3, 7});
  expect_shape(g, ir_concat(g, 2, (int32_t[]){x, x}, 1), DT_BF16, 3, (int64_t[]){2, 6, 4});
  int32_t idx = ir_input(g, "tok", DT_I32, 2, (int64_t[]){2, 7});
  int32_t emb = ir_gather(g, w, idx);
  expect_shape(g, emb, DT_BF16, 3, (int64_t[]){2, 7, 5});
  expect_shape(g, ir_scatter_add(g, idx, emb, 4), DT_BF16, 2, (int64_t[]){4, 5});
  expect_shape(g, ir_top_k_indices(g, x, 2), DT_I32, 3, (int64_t[]){2, 3, 2});
  expect_shape(g, ir_lt(g, x, x), DT_BF16, 3, (int64_t[]){2, 3, 4});
  expect_shape(g, ir_cast(g, x, DT_F32), DT_F32, 3, (int64_t[]){2, 3, 4});
  expect_shape(g, ir_iota(g, DT_I32, 2, (int64_t[]){3, 3}, 1), DT_I32, 2, (int64_t[]){3, 3});
  /* grouped-query attention: 6 query heads, 2 key heads; the gradient per key head */
  int32_t q = ir_param(g, "q", DT_BF16, 4, (int64_t[]){2, 6, 5, 4});
  int32_t kv = ir_param(g, "kv", DT_BF16, 4, (int64_t[]){2, 2, 5, 4});
  expect_shape(g, ir_attention(g, q, kv, kv, true, 0.5), DT_BF16, 4, (int64_t[]){2, 6, 5, 4});
  expect_shape(g, ir_attention_grad(g, q, kv, kv, q, true, 0.5), DT_BF16, 5,
               (int64_t[]){2, 2, 5, 5, 4});
  expect_shape(g, ir_attention_grad(g, q, q, q, q, false, 0.5), DT_BF16, 5,
               (int64_t[]){3, 2, 6, 5, 4});
  IrMesh m = {.naxes = 2, .names = {"data", "model"}, .sizes = {2, 4}};
  CU_ASSERT_EQUAL(ir_graph_set_mesh(g, &m), IR_OK);
  const char *model[] = {"model"}, *both[] = {"data", "model"};
  expect_shape(g, ir_all_gather(g, x, 1, model, 2), DT_BF16, 3, (int64_t[]){2, 3, 16});
  expect_shape(g, ir_reduce_scatter(g, x, 1, model, 2), DT_BF16, 3, (int64_t[]){2, 3, 1});
  expect_shape(g, ir_all_to_all(g, ir_concat(g, 2, (int32_t[]){x, x}, 2), 2, both, 2, 0), DT_BF16,
               3, (int64_t[]){16, 3, 1});
  CU_ASSERT_PTR_NULL(ir_graph_error(g));
  ir_graph_free(g);
}

/* Runs build on a fresh graph with origin /model/m and expects an error containing want. */
static void expect_error(int32_t (*build)(IrGraph *g), const char *want) {
  IrGraph *g = ir_graph_new();
  ir_graph_set_origin(g, "/model/decoder/layer/self_attention");
  int32_t v = build(g);
  CHECK_INT(v, IR_NONE);
  CHECK_HAS(ir_graph_error(g), want);
  CHECK_HAS(ir_graph_error(g), "/model/decoder/layer/self_attention");
  ir_graph_free(g);
}

static const int64_t d23[] = {2, 3}, d32[] = {3, 2}, d4[] = {4};
static int32_t e_add(IrGraph *g) {
  return ir_add(g, ir_input(g, "a", DT_F32, 2, d23), ir_input(g, "b", DT_F32, 2, d32));
}
static int32_t e_dtype(IrGraph *g) {
  return ir_mul(g, ir_input(g, "a", DT_F32, 2, d23), ir_input(g, "b", DT_F16, 2, d23));
}
static int32_t e_dot(IrGraph *g) {
  return ir_matmul(g, ir_input(g, "a", DT_F32, 2, d23), ir_input(g, "b", DT_F32, 2, d23));
}
static int32_t e_bcast(IrGraph *g) {
  return ir_broadcast(g, ir_input(g, "a", DT_F32, 1, d4), 2, d23, (int32_t[]){1});
}
static int32_t e_bcast_order(IrGraph *g) {
  return ir_broadcast(g, ir_input(g, "a", DT_F32, 2, d23), 3, (int64_t[]){3, 2, 3},
                      (int32_t[]){2, 1});
}
static int32_t e_reshape(IrGraph *g) {
  return ir_reshape(g, ir_input(g, "a", DT_F32, 2, d23), 1, d4);
}
static int32_t e_perm(IrGraph *g) {
  return ir_transpose(g, ir_input(g, "a", DT_F32, 2, d23), (int32_t[]){1, 1});
}
static int32_t e_slice(IrGraph *g) {
  return ir_slice(g, ir_input(g, "a", DT_F32, 2, d23), (int64_t[]){0, 2}, (int64_t[]){2, 4});
}
static int32_t e_concat(IrGraph *g) {
  return ir_concat(
      g, 2, (int32_t[]){ir_input(g, "a", DT_F32, 2, d23), ir_input(g, "b", DT_F32, 2, d32)}, 0);
}
static int32_t e_reduce(IrGraph *g) {
  return ir_reduce_max(g, ir_input(g, "a", DT_F32, 2, d23), 1, (int32_t[]){2});
}
static int32_t e_gather(IrGraph *g) {
  return ir_gather(g, ir_input(g, "t", DT_F32, 2, d23), ir_input(g, "i", DT_F32, 1, d4));
}
static int32_t e_topk(IrGraph *g) {
  return ir_top_k_indices(g, ir_input(g, "a", DT_F32, 2, d23), 4);
}
static int32_t e_log_int(IrGraph *g) { return ir_log(g, ir_input(g, "a", DT_I32, 2, d23)); }
static int32_t e_rank(IrGraph *g) {
  return ir_input(g, "a", DT_F32, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1});
}
static int32_t e_noname(IrGraph *g) { return ir_param(g, "", DT_F32, 1, d4); }
static int32_t e_axis(IrGraph *g) {
  return ir_all_reduce(g, ir_input(g, "a", DT_F32, 1, d4), 1, (const char *[]){"data"});
}
static int32_t e_divisible(IrGraph *g) {
  IrMesh m = {.naxes = 1, .names = {"data"}, .sizes = {3}};
  ir_graph_set_mesh(g, &m);
  return ir_reduce_scatter(g, ir_input(g, "a", DT_F32, 1, d4), 1, (const char *[]){"data"}, 0);
}
static int32_t e_select(IrGraph *g) {
  return ir_select(g, ir_input(g, "p", DT_F32, 2, d32), ir_input(g, "a", DT_F32, 2, d23),
                   ir_input(g, "b", DT_F32, 2, d23));
}
static int32_t e_scatter(IrGraph *g) {
  return ir_scatter_add(g, ir_input(g, "i", DT_I32, 1, d4), ir_input(g, "u", DT_F32, 2, d23), 5);
}
static int32_t e_gqa(IrGraph *g) { /* 4 key heads for 6 query heads */
  int32_t q = ir_input(g, "q", DT_F32, 4, (int64_t[]){1, 6, 5, 4});
  int32_t k = ir_input(g, "k", DT_F32, 4, (int64_t[]){1, 4, 5, 4});
  return ir_attention(g, q, k, k, true, 0.5);
}
static int32_t e_gqa_v(IrGraph *g) { /* v's heads differ from k's */
  int32_t q = ir_input(g, "q", DT_F32, 4, (int64_t[]){1, 6, 5, 4});
  int32_t k = ir_input(g, "k", DT_F32, 4, (int64_t[]){1, 2, 5, 4});
  return ir_attention(g, q, k, q, true, 0.5);
}

static void test_errors(void) {
  expect_error(e_add, "operand shapes differ: [2,3] vs [3,2]");
  expect_error(e_dtype, "operand dtypes differ: f32 vs f16");
  expect_error(e_dot, "contracting dim 0: lhs dim 1 has 3, rhs dim 0 has 2");
  expect_error(e_bcast, "cannot broadcast");
  expect_error(e_bcast_order, "bdims must increase");
  expect_error(e_reshape, "cannot reshape [2,3] to [4]");
  expect_error(e_perm, "perm repeats axis 1");
  expect_error(e_slice, "dim 1: [2, 4) not within 0..3");
  expect_error(e_concat, "operand 1 dim 1 is 2, operand 0 has 3");
  expect_error(e_reduce, "axes[0] = 2 outside 0..1");
  expect_error(e_gather, "indices must be i32");
  expect_error(e_topk, "k = 4 outside 1..3");
  expect_error(e_log_int, "needs a float operand");
  expect_error(e_rank, "rank 9");
  expect_error(e_noname, "parameter needs a name");
  expect_error(e_axis, "mesh axis 'data' is not in the graph's mesh");
  expect_error(e_divisible, "not divisible by 3 devices");
  expect_error(e_select, "predicate shape [3,2] differs from [2,3]");
  expect_error(e_scatter, "updates dim 0 is 2, indices have 4");
  expect_error(e_gqa, "keys must have the query's shape, or (..., K, T, H) with the query's "
                      "(..., N, T, H) a multiple N of K heads");
  expect_error(e_gqa_v, "operand 2 must have the shape and dtype of the keys");
}

static void test_first_error_kept(void) {
  IrGraph *g = ir_graph_new();
  ir_graph_set_origin(g, "/model/a");
  int32_t bad = ir_add(g, ir_input(g, "a", DT_F32, 1, d4), ir_input(g, "b", DT_F32, 2, d23));
  ir_graph_set_origin(g, "/model/b");
  int32_t later = ir_exp(g, ir_neg(g, bad));
  CHECK_INT(later, IR_NONE);
  ir_matmul(g, ir_input(g, "c", DT_F32, 2, d23),
            ir_input(g, "d", DT_F32, 2, d23)); /* a second error */
  CHECK_HAS(ir_graph_error(g), "%2 (add) at /model/a:");
  CHECK_INT(g->nvalues, 4); /* a, b, c, d: nothing half-built */
  ir_graph_clear_error(g);
  CU_ASSERT_PTR_NULL(ir_graph_error(g));
  ir_graph_free(g);
}

static void test_origin_and_tags(void) {
  IrGraph *g = ir_graph_new();
  ir_graph_set_origin(g, "/model/decoder/layer/self_attention");
  ir_graph_set_tag(g, "attention.q_proj");
  int32_t x = ir_input(g, "x", DT_F32, 1, d4);
  ir_graph_set_tag(g, NULL);
  int32_t y = ir_exp(g, x);
  ir_value_set_tag(g, y, "attention.softmax");
  CU_ASSERT_STRING_EQUAL(g->values[x].origin, "/model/decoder/layer/self_attention");
  CU_ASSERT_STRING_EQUAL(g->values[x].tag, "attention.q_proj");
  CU_ASSERT_STRING_EQUAL(g->values[y].tag, "attention.softmax");
  CU_ASSERT_STRING_EQUAL(g->values[y].name, "");
  CU_ASSERT_EQUAL(ir_graph_add_output(g, "y", y), IR_OK);
  CU_ASSERT_EQUAL(ir_graph_add_output(g, "y", x), IR_ERR);
  CHECK_HAS(ir_graph_error(g), "output 'y' defined twice");
  CHECK_INT(ir_graph_output(g, "y"), y);
  CHECK_INT(ir_graph_find(g, IR_INPUT, "x"), x);
  ir_graph_free(g);
}

static void test_op_table(void) {
  IrOp op;
  CU_ASSERT_EQUAL(ir_op_lookup("dot_general", 11, &op), IR_OK);
  CHECK_INT(op, IR_DOT);
  CU_ASSERT_STRING_EQUAL(ir_op_name(IR_ALL_TO_ALL), "all_to_all");
  CHECK_INT(ir_op_arity(IR_CONCAT), -1);
  CU_ASSERT(ir_op_flags(IR_REDUCE_MAX) & IR_REDUCTION);
  CU_ASSERT(ir_op_flags(IR_ALL_GATHER) & IR_COLLECTIVE);
  CU_ASSERT(!(ir_op_flags(IR_EQ) & IR_HAS_GRAD));
  CHECK_NEAR(ir_dtype_round(DT_BF16, 1.00390625), 1.0, 0);      /* tie to even */
  CHECK_NEAR(ir_dtype_round(DT_BF16, 1.01171875), 1.015625, 0); /* tie to even, up */
  CHECK_NEAR(ir_dtype_round(DT_F16, 65519), 65504, 0);
  CU_ASSERT(isinf(ir_dtype_round(DT_F16, 65520)));
  CHECK_NEAR(ir_dtype_round(DT_F16, 1e-8), 0, 0); /* below half the smallest subnormal */
  CHECK_NEAR(ir_dtype_round(DT_F16, 6e-8), 5.9604644775390625e-08, 0); /* smallest subnormal */
  CHECK_NEAR(ir_dtype_round(DT_I32, -3.9), -3, 0);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"result_types", test_result_types},
      {"errors", test_errors},
      {"first_error_kept", test_first_error_kept},
      {"origin_and_tags", test_origin_and_tags},
      {"op_table", test_op_table},
      {NULL, NULL},
  };
  return test_main(argc, argv, "build", cases);
}
