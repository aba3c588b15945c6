/* test_text.c: the text form round-trips (print(parse(print(g))) == print(g), structurally equal
 * graphs) on a small attention block with a mesh, every attribute kind, origins and tags; parse
 * errors give line:col; the DOT printer emits every value and edge. */
#include "tests/ir/ir_test.h"

/* Causal self-attention, B=2 T=4 C=8, 2 heads of 4, with an all_reduce over "model" (a tensor-
 * parallel partial sum), plus embedding and top-k to cover the remaining attributes. */
static IrGraph *attention_graph(void) {
  IrGraph *g = ir_graph_new();
  IrMesh m = {.naxes = 2, .names = {"data", "model"}, .sizes = {2, 1}};
  ir_graph_set_mesh(g, &m);
  const int64_t btc[] = {2, 4, 8}, cc[] = {8, 8}, bthd[] = {2, 4, 2, 4}, bhtt[] = {2, 2, 4, 4};
  ir_graph_set_origin(g, "/model/decoder/emb");
  int32_t tok = ir_input(g, "tokens", DT_I32, 2, (int64_t[]){2, 4});
  int32_t table = ir_param(g, "/model/decoder/emb/weight", DT_F32, 2, (int64_t[]){16, 8});
  int32_t x = ir_gather(g, table, tok); /* (2, 4, 8) */
  ir_graph_set_origin(g, "/model/decoder/layer/self_attention");
  int32_t proj[4];
  const char *names[] = {"wq", "wk", "wv", "wo"},
             *tags[] = {"attention.q_proj", "attention.k_proj", "attention.v_proj",
                        "attention.o_proj"};
  for (int i = 0; i < 3; i++) {
    int32_t w = ir_param(g, names[i], DT_F32, 2, cc);
    ir_graph_set_tag(g, tags[i]);
    int32_t p = ir_reshape(g, ir_matmul(g, x, w), 4, bthd);
    proj[i] = ir_transpose(g, p, (int32_t[]){0, 2, 1, 3}); /* (B, H, T, D) */
    ir_graph_set_tag(g, NULL);
  }
  int32_t s = ir_dot(g, proj[0], proj[1], 2, (int32_t[]){0, 1}, (int32_t[]){0, 1}, 1,
                     (int32_t[]){3}, (int32_t[]){3}); /* (B, H, T, T) */
  s = ir_mul(g, s, ir_const_scalar(g, DT_F32, 0.5, 4, bhtt));
  int32_t causal = ir_ge(g, ir_iota(g, DT_I32, 4, bhtt, 2), ir_iota(g, DT_I32, 4, bhtt, 3));
  s = ir_select(g, causal, s, ir_const_scalar(g, DT_F32, -1e30, 4, bhtt));
  int32_t mx = ir_reduce_max(g, s, 1, (int32_t[]){3});
  int32_t e = ir_exp(g, ir_sub(g, s, ir_broadcast(g, mx, 4, bhtt, (int32_t[]){0, 1, 2})));
  int32_t p = ir_div(
      g, e, ir_broadcast(g, ir_reduce_sum(g, e, 1, (int32_t[]){3}), 4, bhtt, (int32_t[]){0, 1, 2}));
  ir_value_set_tag(g, p, "attention.probs");
  int32_t o = ir_dot(g, p, proj[2], 2, (int32_t[]){0, 1}, (int32_t[]){0, 1}, 1, (int32_t[]){3},
                     (int32_t[]){2});
  o = ir_reshape(g, ir_transpose(g, o, (int32_t[]){0, 2, 1, 3}), 3, btc);
  proj[3] = ir_param(g, names[3], DT_F32, 2, cc);
  ir_graph_set_tag(g, tags[3]);
  o = ir_all_reduce(g, ir_matmul(g, o, proj[3]), 1, (const char *[]){"model"});
  ir_graph_set_tag(g, NULL);
  ir_graph_set_origin(g, "/model/decoder");
  int32_t y = ir_add(g, x, o);
  int32_t sl = ir_slice(g, y, (int64_t[]){0, 1, 0}, (int64_t[]){2, 4, 8});
  int32_t pd = ir_pad(g, sl, (int64_t[]){0, 1, 0}, (int64_t[]){0, 0, 0}, -0.25);
  int32_t cat = ir_concat(g, 2, (int32_t[]){pd, y}, 2);
  ir_graph_add_output(g, "hidden", cat);
  ir_graph_add_output(g, "top2", ir_top_k_indices(g, cat, 2));
  ir_graph_add_output(g, "w_scatter", ir_scatter_add(g, tok, x, 16));
  ir_graph_add_output(
      g, "consts",
      ir_const_data(g, DT_F64, (double[]){0.1, -2.5e-300, 1e300, 3}, 1, (int64_t[]){4}));
  ir_graph_add_output(g, "a2a", ir_all_to_all(g, y, 1, (const char *[]){"data"}, 0, 2));
  ir_graph_add_output(g, "ag",
                      ir_reduce_scatter(g, ir_all_gather(g, y, 1, (const char *[]){"data"}, 1), 1,
                                        (const char *[]){"data"}, 1));
  ir_graph_add_output(g, "cast", ir_cast(g, ir_logistic(g, y), DT_BF16));
  return g;
}

static bool dims_eq(const IrDims *a, const IrDims *b) {
  return a->n == b->n && memcmp(a->v, b->v, (size_t)a->n * sizeof a->v[0]) == 0;
}

static bool values_equal(const IrValue *a, const IrValue *b) {
  bool eq = a->op == b->op && a->dtype == b->dtype && ir_shape_eq(&a->shape, &b->shape) &&
            a->nops == b->nops && strcmp(a->name, b->name) == 0 &&
            strcmp(a->origin, b->origin) == 0 && strcmp(a->tag, b->tag) == 0;
  for (int32_t k = 0; eq && k < a->nops; k++) eq = a->ops[k] == b->ops[k];
  const IrAttrs *x = &a->attr, *y = &b->attr;
  eq = eq && dims_eq(&x->axes, &y->axes) && dims_eq(&x->lo, &y->lo) && dims_eq(&x->hi, &y->hi) &&
       dims_eq(&x->lb, &y->lb) && dims_eq(&x->rb, &y->rb) && dims_eq(&x->lc, &y->lc) &&
       dims_eq(&x->rc, &y->rc) && x->axis == y->axis && x->axis2 == y->axis2 && x->k == y->k &&
       x->value == y->value && x->nmesh == y->nmesh && !x->data == !y->data;
  for (int32_t i = 0; eq && i < x->nmesh; i++) eq = strcmp(x->mesh[i], y->mesh[i]) == 0;
  eq = eq && memcmp(&a->split, &b->split, sizeof a->split) == 0;
  for (int64_t i = 0; eq && x->data && i < ir_shape_numel(&a->shape); i++)
    eq = x->data[i] == y->data[i];
  return eq;
}

static void test_round_trip(void) {
  IrGraph *g = attention_graph();
  CU_ASSERT_PTR_NULL_FATAL(ir_graph_error(g));
  char *t1 = ir_graph_to_string(g), msg[IR_ERR_LEN] = "";
  IrGraph *h = ir_graph_parse(t1, msg, sizeof msg);
  if (!h) fprintf(stderr, "parse: %s\n%s", msg, t1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(h);
  char *t2 = ir_graph_to_string(h);
  CU_ASSERT_STRING_EQUAL(t1, t2);
  CHECK_INT(h->nvalues, g->nvalues);
  CHECK_INT(h->noutputs, g->noutputs);
  CHECK_INT(h->mesh.naxes, 2);
  for (int32_t i = 0; i < g->nvalues && i < h->nvalues; i++) {
    if (!values_equal(&g->values[i], &h->values[i])) fprintf(stderr, "value %%%d differs\n", i);
    CU_ASSERT(values_equal(&g->values[i], &h->values[i]));
  }
  for (int32_t k = 0; k < g->noutputs && k < h->noutputs; k++) {
    CU_ASSERT_STRING_EQUAL(g->outputs[k].name, h->outputs[k].name);
    CHECK_INT(g->outputs[k].value, h->outputs[k].value);
  }
  /* spot checks of the syntax docs/ir.md describes */
  CHECK_HAS(t1, "mesh data=2 model=1\n");
  CHECK_HAS(t1, "= parameter \"wq\" : f32[8,8] @\"/model/decoder/layer/self_attention\"\n");
  CHECK_HAS(t1, "lhs_batch=[0,1] rhs_batch=[0,1] lhs_contract=[3] rhs_contract=[3] : f32[2,2,4,4]");
  CHECK_HAS(t1, "#\"attention.probs\"");
  CHECK_HAS(t1, "mesh_axes=[model] : f32[2,4,8] @\"/model/decoder/layer/self_attention\" "
                "#\"attention.o_proj\"");
  CHECK_HAS(t1, "data=[0.1,-2.5e-300,1e+300,3] : f64[4]");
  CHECK_HAS(t1, "value=-1e+30 : f32[2,2,4,4]");
  free(t1);
  free(t2);
  ir_graph_free(h);
  ir_graph_free(g);
}

/* pass_shard's per-device values carry which chunk of the global value they are. */
static void test_split(void) {
  const char *text =
      "mesh data=2 expert=2 model=2\n"
      "%0 = parameter \"w\" : f32[2,8,3] split=[data.expert,_,model]\n"
      "%1 = local_slice %0 axis=1 mesh_axes=[model] : f32[2,4,3] split=[data.expert,model,model]\n"
      "output \"y\" = %1\n";
  char msg[IR_ERR_LEN] = "";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  if (!g) fprintf(stderr, "%s\n", msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  char *t = ir_graph_to_string(g);
  CU_ASSERT_STRING_EQUAL(t, text);
  free(t);
  const IrSplit *s = &g->values[0].split;
  CHECK_INT(ir_split_count(&g->mesh, s, 0), 4);
  CHECK_INT(ir_split_count(&g->mesh, s, 1), 1);
  CHECK_INT(ir_split_count(&g->mesh, s, 2), 2);
  CHECK_INT(ir_split_index(&g->mesh, s, 0, 5), 2); /* device 5 = (data 1, expert 0, model 1) */
  CHECK_INT(ir_split_index(&g->mesh, s, 2, 5), 1);
  CHECK_INT(ir_split_index(&g->mesh, s, 1, 5), 0);
  ir_graph_free(g);
  static const char *bad[] = {
      "mesh data=2\n%0 = parameter \"w\" : f32[2] split=[fsdp]\n",
      "mesh data=2\n%0 = parameter \"w\" : f32[2] split=[data,_]\n",
      "mesh data=2\n%0 = parameter \"w\" : f32[2,2] split=[data]\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    IrGraph *h = ir_graph_parse(bad[i], msg, sizeof msg);
    CU_ASSERT_PTR_NULL(h);
    ir_graph_free(h);
  }
}

static void test_parse_extras(void) {
  const char *text = "; comments and blank lines are fine\n"
                     "\n"
                     "%10 = input \"x\\\"q\\n\" : f32[2]   ; a name with escapes\n"
                     "%3 = constant value=nan : f32[2]\n"
                     "%7 = add %10, %3 : f32[2] #\"t\\\\\"\n"
                     "output \"y\" = %7\n";
  char msg[IR_ERR_LEN] = "";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  if (!g) fprintf(stderr, "%s\n", msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_STRING_EQUAL(g->values[0].name, "x\"q\n");
  CU_ASSERT(isnan(g->values[1].attr.value));
  CU_ASSERT_STRING_EQUAL(g->values[2].tag, "t\\");
  char *t = ir_graph_to_string(g);
  CU_ASSERT_STRING_EQUAL(t, "%0 = input \"x\\\"q\\n\" : f32[2]\n"
                            "%1 = constant value=nan : f32[2]\n"
                            "%2 = add %0, %1 : f32[2] #\"t\\\\\"\n"
                            "output \"y\" = %2\n");
  free(t);
  ir_graph_free(g);
}

static void expect_parse_error(const char *text, const char *want) {
  char msg[IR_ERR_LEN] = "";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  CU_ASSERT_PTR_NULL(g);
  CHECK_HAS(msg, want);
  ir_graph_free(g);
}

static void test_parse_errors(void) {
  expect_parse_error("%0 = input \"x\" : f32[2]\n%1 = frobnicate %0 : f32[2]\n",
                     "2:6: unknown op 'frobnicate'");
  expect_parse_error("%0 = input \"x\" : f32[2]\n%1 = exp %5 : f32[2]\n",
                     "2:10: %5 is not defined before this use");
  expect_parse_error("%0 = input \"x\" : f32[2]\n%1 = exp %0 : f32[3]\n",
                     "2:1: declared type does not match exp's rule");
  expect_parse_error("%0 = input \"x\" : f32[2]\n%1 = exp %0 perm=[0] : f32[2]\n",
                     "2:13: exp has no attribute 'perm'");
  expect_parse_error("%0 = input \"x\" : f33[2]\n", "1:18: unknown dtype 'f33'");
  expect_parse_error("%0 = input \"x : f32[2]\n", "unterminated string");
  expect_parse_error("%0 = input \"x\" : f32[2]\n%0 = exp %0 : f32[2]\n", "2:3: %0 defined twice");
  expect_parse_error("%0 = input \"x\" : f32[2] junk\n", "1:25: unexpected 'j'");
  expect_parse_error("%0 = input \"x\" : f32[2]\n%1 = add %0, %0 : f32[2]\n%2 = add %1 : f32[2]\n",
                     "3:1: %2 (add) at ?: 1 operands, expected 2");
  expect_parse_error("%0 = constant data=[1,2] : f32[3]\n", "data has 2 values, the type has 3");
  expect_parse_error("%0 = input \"x\" : f32[2]\n%1 = all_reduce %0 mesh_axes=[data] : f32[2]\n",
                     "mesh axis 'data' is not in the graph's mesh");
  expect_parse_error("%0 = input \"x\" : f32[2]\nbogus\n", "2:1: expected '%N = ...'");
  expect_parse_error("%0 = input \"x\" : f32[2]\noutput \"y\" = %3\n", "2:14: %3 is not defined");
}

static void test_dot_output(void) {
  IrGraph *g = attention_graph();
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CU_ASSERT_EQUAL(ir_graph_print_dot(g, f), IR_OK);
  fclose(f);
  CHECK_HAS(buf, "digraph ir {");
  CHECK_HAS(buf, "label=\"/model/decoder/layer/self_attention\"");
  CHECK_HAS(buf, "#attention.probs");
  int edges = 0, nodes = 0, want_edges = 0;
  for (const char *p = buf; (p = strstr(p, " -> v")); p++) edges++;
  for (const char *p = buf; (p = strstr(p, " [label=\"%")); p++) nodes++;
  for (int32_t i = 0; i < g->nvalues; i++) want_edges += g->values[i].nops;
  CHECK_INT(edges, want_edges);
  CHECK_INT(nodes, g->nvalues);
  free(buf);
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"round_trip_attention", test_round_trip}, {"split", test_split},
      {"parse_extras", test_parse_extras},       {"parse_errors", test_parse_errors},
      {"dot_output", test_dot_output},           {NULL, NULL},
  };
  return test_main(argc, argv, "text", cases);
}
