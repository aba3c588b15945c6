/*
 * test_compose.c: the composer (fe_compose and the kinds' emit functions)
 * on small configs: what happens when a builder call fails.
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
  FeEmit e = {g, b, vals, 2, 8, ir_input(g, "ids", DT_I32, 2, bt),
              ir_input(g, "targets", DT_I32, 2, bt), IR_NONE};
  ir_graph_fail(g, "injected failure");
  json_object *model = fe_path_get(tree, "/model");
  FeDims in = {.dim = fe_get_int(model, "dim"), .vocab_size = fe_get_int(model, "vocab_size"),
               .num_layers = 2, .seq_len = 8, .max_steps = 10, .dtype = "f32"};
  for (size_t i = 0; i < sizeof sites / sizeof sites[0]; i++) {
    json_object *node = fe_path_get(tree, sites[i].cfg);
    const FeKind *k = fe_kind_find(fe_node_kind(node));
    EXPECT(k && k->emit);
    if (!k || !k->emit) continue;
    EXPECT_INT(k->emit(&e, node, sites[i].cfg, sites[i].prm, &in, IR_NONE), IR_NONE);
    EXPECT_INT(fe_emit_node(&e, node, sites[i].cfg, sites[i].prm, &in, IR_NONE), IR_NONE);
    EXPECT_STR(ir_graph_error(g), "injected failure");
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
  const char *plain[] = {NULL},
             *variant[] = {"/model/decoder/layer/norm={\"kind\": \"rms_norm\"}",
                           "/model/lm_head/tied=false", NULL};
  const char *const *applies[2] = {none, both}, *const *sets[2] = {plain, variant};
  for (int c = 0; c < 2; c++) {
    FeT t;
    FeBuild b;
    fe_t_resolve(&t, cfg, NULL, applies[c], sets[c]);
    EXPECT_OK(&t);
    int64_t nparams = fe_t_params(&t, 0, &b);
    EXPECT(nparams > 0);
    emit_all_on_failure(t.tree, &b);
    fe_build_free(&b);
    fe_t_done(&t);
  }
}

static const FeTCase cases[] = {
    {"emit_failure_propagates", test_emit_failure_propagates},
};

int main(int argc, char **argv) {
  return fe_t_main(argc, argv, "frontend_compose", cases, (int)(sizeof cases / sizeof cases[0]));
}
