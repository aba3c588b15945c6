/*
 * causal_lm.c: a decoder-only language model: token embedding, optional
 * learned positions, a decoder stack, and a head over the vocabulary. Its
 * loss is the mean next-token cross-entropy (plus auxiliary losses of the
 * layers, such as MoE load balancing).
 *
 * It decides the width and vocabulary every child must agree on.
 */
#include "frontend/frontend.h"

static const FeField fields[] = {
    F_INT("vocab_size", NULL, FE_RANGE(1, 1 << 24), "number of token ids"),
    F_INT("dim", NULL, FE_RANGE(1, 1 << 20), "model width"),
    F_ENUM("dtype", "\"f32\"", "f32|bf16", "parameter dtype"),
    F_CHILD("emb", "{\"kind\": \"embedding\"}", "embedding", "token embedding"),
    F_CHILD("pos_emb", "null", "learned_pos_emb|null", "learned position embedding, or null"),
    F_CHILD("decoder", NULL, "decoder", "the transformer stack"),
    F_CHILD("lm_head", "{\"kind\": \"lm_head\"}", "lm_head", "output projection"),
};

static int build(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                 const FeDims *in) {
  FeDims d = *in;
  d.dim = fe_get_int(node, "dim");
  d.vocab_size = fe_get_int(node, "vocab_size");
  d.dtype = fe_get_str(node, "dtype");
  d.num_layers = fe_get_int(fe_get_child(node, "decoder"), "num_layers");
  int rc = 0;
  const char *children[] = {"emb", "pos_emb", "decoder", "lm_head"};
  for (int i = 0; i < 4; i++)
    if (fe_build_child(b, node, children[i], cfg, prm, &d)) rc = -1;
  return rc;
}

const FeKind fe_kind_causal_lm = {"causal_lm", "decoder-only language model", fields,
                                  FE_NFIELDS(fields), NULL, build};
