/*
 * test_compose.c: the composer (fe_compose and the kinds' emit functions)
 * on small configs: what happens when a builder call fails, and the bound
 * on the size of the training step's tensors, checked before any graph.
 */
#include <stdlib.h>

#include "tests/frontend/fe_test.h"

static char cfg[4096], moe[4096], rope[4096];

/* One module of a resolved tree: its config path and parameter prefix. */
typedef struct {
  const char *cfg, *prm;
} Site;

static const Site sites[] = {
    {"/model/emb", "model/emb"},
    {"/model/pos_emb", "model/pos_emb"},
    {"/model/decoder", "model/decoder"},
    {"/model/decoder/layer", "model/decoder/layer_0"},
    {"/model/decoder/layer/norm", "model/decoder/layer_0/attn_norm"},
    {"/model/decoder/layer/self_attention", "model/decoder/layer_0/self_attention"},
    {"/model/decoder/layer/feed_forward", "model/decoder/layer_0/feed_forward"},
    {"/model/decoder/output_norm", "model/decoder/output_norm"},
    {"/model/lm_head", "model/lm_head"},
};

/* Calls every module's emit on IR_NONE, as a failed builder call hands it
 * on, in a graph that recorded the failure: each must return IR_NONE and
 * keep the first error, without reading the graph at index -1 (which the
 * ASan build reports). Both the kind's emit itself and fe_emit_node. */
static void emit_all_on_failure(json_object *tree, FeBuild *b) {
  IrGraph *g = ir_graph_new();
  int32_t *vals = malloc((size_t)b->nparams * sizeof *vals);
  for (int i = 0; i < b->nparams; i++) vals[i] = IR_NONE;
  int64_t bt[2] = {2, 8};
  FeEmit e = {.g = g,
              .b = b,
              .param_vals = vals,
              .batch = 2,
              .seq = 8,
              .ids = ir_input(g, "ids", DT_I32, 2, bt),
              .targets = ir_input(g, "targets", DT_I32, 2, bt),
              .aux_loss = IR_NONE,
              .compute = DT_F32,
              .pos = IR_NONE};
  ir_graph_fail(g, "injected failure");
  json_object *model = fe_path_get(tree, "/model");
  FeDims in = {.dim = fe_get_int(model, "dim"),
               .vocab_size = fe_get_int(model, "vocab_size"),
               .num_layers = 2,
               .seq_len = 8,
               .max_steps = 10,
               .dtype = "f32"};
  for (size_t i = 0; i < sizeof sites / sizeof sites[0]; i++) {
    json_object *node = fe_path_get(tree, sites[i].cfg);
    const FeKind *k = fe_kind_find(fe_node_kind(node));
    CHECK(k && k->emit);
    if (!k || !k->emit) continue;
    CHECK_INT(k->emit(&e, node, sites[i].cfg, sites[i].prm, &in, IR_NONE), IR_NONE);
    CHECK_INT(fe_emit_node(&e, node, sites[i].cfg, sites[i].prm, &in, IR_NONE), IR_NONE);
    CHECK_STR(ir_graph_error(g), "injected failure");
  }
  free(vals);
  ir_graph_free(g);
}

/* frontend/modules/norm.c, emit_norm (and attention.c's emit_rope, the MoE
 * router's route_mask and add_balance_loss): the input's shape was read
 * with fe_shape before checking it, so after a failed builder call (which
 * returns IR_NONE) they read values[-1].
 * Input: every emitting kind, with IR_NONE as input, in two configs: tiny
 *        (layer_norm, learned positions, GELU, tied head) and tiny with
 *        rms_norm, RoPE, MoE and an untied head.
 * Expected: IR_NONE and the graph's first error kept.
 * Actual:   heap-buffer-overflow in fe_shape from emit_norm. */
static void test_emit_failure_propagates(void) {
  snprintf(cfg, sizeof cfg, "%s", fe_t_write_tiny());
  snprintf(moe, sizeof moe, "%s/modifiers/moe.json", AXLC_MODELS_DIR);
  snprintf(rope, sizeof rope, "%s/modifiers/rope.json", AXLC_MODELS_DIR);
  const char *none[] = {NULL}, *both[] = {moe, rope, NULL};
  const char *plain[] = {NULL}, *variant[] = {"/model/decoder/layer/norm={\"kind\": \"rms_norm\"}",
                                              "/model/lm_head/tied=false", NULL};
  const char *const *applies[2] = {none, both}, *const * sets[2] = {plain, variant};
  for (int c = 0; c < 2; c++) {
    FeT t;
    FeBuild b;
    fe_t_resolve(&t, cfg, NULL, applies[c], sets[c]);
    REQUIRE_RESOLVED(&t);
    int64_t nparams = fe_t_params(&t, 0, &b);
    CHECK(nparams > 0);
    emit_all_on_failure(t.tree, &b);
    fe_build_free(&b);
    fe_t_done(&t);
  }
}

/* Resolves and builds `file` (expected to succeed: the config itself is
 * fine), then composes it: returns the messages of the composition, which
 * is expected to fail before making a graph, and checks that the build
 * kept the same message for the warning of config and params. */
static void compose_fails(FeT *t, const char *file, const char *target, const char *const *apply,
                          const char *const *sets) {
  fe_t_resolve(t, file, target, apply, sets);
  REQUIRE_RESOLVED(t);
  FeBuild b;
  int64_t devices;
  CU_ASSERT_FATAL(fe_target_devices(&t->d, target, &devices) == 0);
  int64_t n = fe_t_params(t, devices, &b);
  CU_ASSERT_FATAL(n > 0);
  IrGraph *g = fe_compose(&t->d, file, t->tree, &b);
  CHECK(g == NULL);
  ir_graph_free(g);
  t->msgs[0] = 0;
  fe_t_collect(t);
  CHECK(b.step_error && strstr(t->msgs, b.step_error) != NULL);
  fe_build_free(&b);
}

/* The composer built the attention scores (B, N, T, T) of tiny-lm with
 * seq_len 2^24 and batch 65536 (2^66 elements): the IR builder failed deep
 * in the graph ("%41 (constant) at /model/decoder/layer/self_attention: too
 * many elements", after the overflow above). It is a config error, found
 * before any graph, naming the field most responsible: seq_len, since even
 * one sequence is too large. */
static void test_step_too_large_seq(void) {
  FeT t;
  fe_t_write_tiny();
  snprintf(cfg, sizeof cfg, "%s",
           fe_t_write("cfg.json",
                      "{\"base\": \"tiny.json\", \"input\": {\"kind\": \"lm_input\","
                      " \"seq_len\": 16777216, \"global_batch_size\": 65536}, \"model\":"
                      " {\"kind\": \"causal_lm\", \"pos_emb\": {\"kind\":"
                      " \"learned_pos_emb\", \"max_len\": 16777216}}}"));
  compose_fails(&t, cfg, NULL, NULL, NULL);
  char want[8192];
  snprintf(want, sizeof want,
           "%s: /input/seq_len: the attention scores (batch x heads x seq x seq"
           " = 65536 x 4 x 16777216 x 16777216) would hold 7.379e+19 elements on each device, more"
           " than the limit of 281474976710656 in one tensor (expected a smaller seq_len)\n",
           cfg);
  CHECK_STR(t.msgs, want);
  fe_t_done(&t);
}

/* When one sequence fits, the global batch is to blame, and more devices
 * on the batch axes make the same config fine: 2^30 x 4 x 1024 x 1024
 * elements is 2^52 on one device, 2^46 on each of 64. */
static void test_step_too_large_batch(void) {
  FeT t;
  fe_t_write_tiny();
  const char *sets[] = {"/input/seq_len=1024", "/model/pos_emb/max_len=1024",
                        "/input/global_batch_size=1073741824", NULL};
  compose_fails(&t, fe_t_path("tiny.json"), NULL, NULL, sets);
  CHECK_STR(t.msgs,
            "--set: /input/global_batch_size: the attention scores (batch x heads x seq x"
            " seq = 1073741824 x 4 x 1024 x 1024) would hold 4503599627370496 elements on each"
            " device, more than the limit of 281474976710656 in one tensor (expected a smaller"
            " global_batch_size, or more devices on the mesh's data, expert and fsdp axes)\n");
  fe_t_done(&t);
  fe_t_resolve(&t, fe_t_path("tiny.json"), "cpu-64", NULL, sets);
  REQUIRE_RESOLVED(&t);
  FeBuild b;
  CHECK_INT(fe_t_params(&t, 64, &b), FE_T_TINY_PARAMS + (1024 - 128) * 64);
  CHECK(b.step_error == NULL);
  fe_build_free(&b);
  fe_t_done(&t);
}

/* The largest tensor is the one reported, and a module's own field is
 * blamed when one sequence alone is too large: the MoE routing mask
 * (B, T, top_k, E) with 65536 experts all chosen, over 2^17 tokens. */
static void test_step_too_large_experts(void) {
  FeT t;
  fe_t_write_tiny();
  snprintf(moe, sizeof moe, "%s/modifiers/moe.json", AXLC_MODELS_DIR);
  const char *apply[] = {moe, NULL};
  const char *sets[] = {"/input/seq_len=131072",
                        "/model/pos_emb/max_len=131072",
                        "/input/global_batch_size=1",
                        "/model/decoder/layer/feed_forward/num_experts=65536",
                        "/model/decoder/layer/feed_forward/top_k=65536",
                        NULL};
  compose_fails(&t, fe_t_path("tiny.json"), NULL, apply, sets);
  CHECK_STR(t.msgs,
            "--set: /model/decoder/layer/feed_forward/num_experts: the routing mask"
            " (batch x seq x top_k x experts = 1 x 131072 x 65536 x 65536) would hold"
            " 562949953421312 elements on each device, more than the limit of 281474976710656 in"
            " one tensor (expected a smaller num_experts)\n");
  fe_t_done(&t);
}

static const TestCase cases[] = {
    {"emit_failure_propagates", test_emit_failure_propagates},
    {"step_too_large_seq", test_step_too_large_seq},
    {"step_too_large_batch", test_step_too_large_batch},
    {"step_too_large_experts", test_step_too_large_experts},
    {NULL, NULL},
};

int main(int argc, char **argv) { return fe_t_main(argc, argv, "frontend_compose", cases); }
