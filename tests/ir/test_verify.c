/* test_verify.c: the verifier accepts built graphs and catches malformed IR (as a buggy pass
 * would leave it), naming the value, its op and its config path. */
#include "tests/ir/ir_test.h"

/* A small well-formed graph: %0 x, %1 w, %2 matmul, %3 tanh, %4 reduce_sum. */
static IrGraph *good_graph(void) {
  IrGraph *g = ir_graph_new();
  ir_graph_set_origin(g, "/model/ffn");
  int32_t x = ir_input(g, "x", DT_F32, 2, (int64_t[]){2, 3});
  int32_t w = ir_param(g, "w", DT_F32, 2, (int64_t[]){3, 4});
  ir_graph_set_origin(g, "/model/ffn/linear1");
  int32_t h = ir_tanh(g, ir_matmul(g, x, w));
  ir_graph_add_output(g, "y", ir_reduce_sum(g, h, 1, (int32_t[]){1}));
  return g;
}

static void expect_bad(IrGraph *g, const char *want1, const char *want2) {
  char msg[IR_ERR_LEN] = "";
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_ERR);
  CHECK_HAS(msg, want1);
  CHECK_HAS(msg, want2);
  ir_graph_free(g);
}

static void test_good(void) {
  IrGraph *g = good_graph();
  char msg[IR_ERR_LEN] = "";
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  CU_ASSERT_STRING_EQUAL(msg, "");
  ir_graph_free(g);
}

static void test_wrong_shape(void) {
  IrGraph *g = good_graph();
  g->values[3].shape.dims[1] = 5;
  expect_bad(g, "%3 (tanh) at /model/ffn/linear1:", "stored shape");
}

static void test_forward_reference(void) {
  IrGraph *g = good_graph();
  int32_t *ops = ir_graph_alloc(g, sizeof *ops);
  ops[0] = 4;
  g->values[3].ops = ops;
  expect_bad(g, "%3 (tanh) at /model/ffn/linear1:", "operand 0 is %4, which does not precede it");
}

static void test_arity(void) {
  IrGraph *g = good_graph();
  g->values[3].nops = 2;
  expect_bad(g, "%3 (tanh)", "2 operands, expected 1");
}

static void test_dtype(void) {
  IrGraph *g = good_graph();
  g->values[2].dtype = DT_F16;
  expect_bad(g, "%2 (dot_general) at /model/ffn/linear1:", "dtype is f16, the rule gives f32");
}

static void test_shape_rule(void) {
  IrGraph *g = good_graph();
  g->values[1].shape.dims[0] = 7; /* w no longer fits x: the matmul's rule fails */
  expect_bad(g, "%2 (dot_general) at /model/ffn/linear1:",
             "contracting dim 0: lhs dim 1 has 3, rhs dim 0 has 7");
}

static void test_duplicate_name(void) {
  IrGraph *g = good_graph();
  g->values[1].op = IR_INPUT;
  g->values[1].name = g->values[0].name;
  expect_bad(g, "%1 (input) at /model/ffn:", "name 'x' already used by %0");
}

/* Three parameters named "w": the second is reported, naming the first; a third input or
 * parameter of another name is no repeat. (The check sorts the names, not a scan per value.) */
static void test_repeated_names(void) {
  IrGraph *g = good_graph();
  ir_param(g, "v", DT_F32, 1, (int64_t[]){4});
  ir_graph_set_origin(g, "/model/head");
  int32_t a = ir_param(g, "w2", DT_F32, 1, (int64_t[]){4});
  int32_t b = ir_param(g, "w3", DT_F32, 1, (int64_t[]){4});
  g->values[a].name = g->values[1].name;
  g->values[b].name = g->values[1].name;
  expect_bad(g, "%6 (parameter) at /model/head:", "name 'w' already used by %1");
}

static void test_duplicate_output(void) {
  IrGraph *g = good_graph();
  ir_graph_add_output(g, "z", 3);
  ir_graph_add_output(g, "u", 2);
  g->outputs[2].name = g->outputs[0].name; /* as a pass writing outputs directly might */
  expect_bad(g, "output 'y'", "defined twice");
  g = good_graph();
  char msg[IR_ERR_LEN] = "";
  CU_ASSERT_EQUAL(ir_graph_add_output(g, "y", 2), IR_ERR);
  CHECK_HAS(ir_graph_error(g), "output 'y' defined twice");
  CU_ASSERT_EQUAL(ir_graph_output(g, "y"), 4);
  CU_ASSERT_EQUAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  ir_graph_free(g);
}

static void test_bad_output(void) {
  IrGraph *g = good_graph();
  g->outputs[0].value = 99;
  expect_bad(g, "output 'y'", "%99");
}

static void test_unknown_mesh_axis(void) {
  IrGraph *g = ir_graph_new();
  IrMesh m = {.naxes = 1, .names = {"data"}, .sizes = {2}};
  ir_graph_set_mesh(g, &m);
  ir_graph_set_origin(g, "/model/grad_sync");
  int32_t x = ir_input(g, "x", DT_F32, 1, (int64_t[]){4});
  ir_all_reduce(g, x, 1, (const char *[]){"data"});
  g->mesh.naxes = 0; /* a pass dropped the mesh */
  expect_bad(g,
             "%1 (all_reduce) at /model/grad_sync:", "mesh axis 'data' is not in the graph's mesh");
}

static void test_bad_attr(void) {
  IrGraph *g = good_graph();
  g->values[4].attr.axes.v[0] = 5;
  expect_bad(g, "%4 (reduce_sum) at /model/ffn/linear1:", "axes[0] = 5 outside 0..1");
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"good", test_good},
      {"repeated_names", test_repeated_names},
      {"duplicate_output", test_duplicate_output},
      {"wrong_shape", test_wrong_shape},
      {"forward_reference", test_forward_reference},
      {"arity", test_arity},
      {"dtype", test_dtype},
      {"shape_rule", test_shape_rule},
      {"duplicate_name", test_duplicate_name},
      {"bad_output", test_bad_output},
      {"unknown_mesh_axis", test_unknown_mesh_axis},
      {"bad_attr", test_bad_attr},
      {NULL, NULL},
  };
  return test_main(argc, argv, "verify", cases);
}
