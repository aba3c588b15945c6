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

const FeKind fe_kind_transformer_layer = {"transformer_layer", "pre-norm transformer layer",
                                          fields, FE_NFIELDS(fields), NULL, build};
