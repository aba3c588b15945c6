/*
 * transformer_layer.c: a pre-norm transformer layer:
 *   x = x + attention(norm(x)); x = x + feed_forward(norm(x))
 * The `norm` config is instantiated twice (attn_norm and ffn_norm).
 * The feed-forward slot takes a dense MLP or a mixture of experts.
 */
#include "frontend/frontend.h"

static const FeField fields[] = {
    F_CHILD("norm", NULL, "layer_norm|rms_norm", "norm before attention and feed-forward"),
    F_CHILD("self_attention", NULL, "attention", "causal self-attention"),
    F_CHILD("feed_forward", NULL, "feed_forward|moe", "MLP or mixture of experts"),
    F_TYPED("remat_policy", FT_REMAT, "\"none\"", "rematerialization policy for this layer"),
};

static int build(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                 const FeDims *in) {
  char ncfg[512], nprm[512];
  fe_path_join(ncfg, sizeof ncfg, cfg, "norm");
  json_object *norm = fe_get_child(node, "norm");
  snprintf(nprm, sizeof nprm, "%s/attn_norm", prm);
  if (fe_build_node(b, norm, ncfg, nprm, in)) return -1;
  if (fe_build_child(b, node, "self_attention", cfg, prm, in)) return -1;
  snprintf(nprm, sizeof nprm, "%s/ffn_norm", prm);
  if (fe_build_node(b, norm, ncfg, nprm, in)) return -1;
  return fe_build_child(b, node, "feed_forward", cfg, prm, in);
}

static int32_t emit(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                    const FeDims *in, int32_t x) {
  if (x == IR_NONE) return IR_NONE;
  ir_value_set_tag(e->g, x, "transformer_layer.input");
  char ncfg[512], nprm[512];
  fe_path_join(ncfg, sizeof ncfg, cfg, "norm");
  json_object *norm = fe_get_child(node, "norm");
  snprintf(nprm, sizeof nprm, "%s/attn_norm", prm);
  int32_t h = fe_emit_node(e, norm, ncfg, nprm, in, x);
  x = ir_add(e->g, x, fe_emit_child(e, node, "self_attention", cfg, prm, in, h));
  snprintf(nprm, sizeof nprm, "%s/ffn_norm", prm);
  h = fe_emit_node(e, norm, ncfg, nprm, in, x);
  return ir_add(e->g, x, fe_emit_child(e, node, "feed_forward", cfg, prm, in, h));
}

const FeKind fe_kind_transformer_layer = {
    .name = "transformer_layer",
    .doc = "pre-norm transformer layer",
    .fields = fields,
    .nfields = FE_NFIELDS(fields),
    .build = build,
    .emit = emit,
};
