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
  d.num_layers = fe_get_int(fe_get_child(node, "decoder"), "num_layers");
  int64_t btd[3] = {d.batch, d.seq_len, d.dim}, btv[3] = {d.batch, d.seq_len, d.vocab_size};
  fe_step_tensor(b, "the activations", "batch x seq x dim", 3, btd, node, cfg, "dim");
  fe_step_tensor(b, "the logits", "batch x seq x vocab", 3, btv, node, cfg, "vocab_size");
  int rc = 0;
  const char *children[] = {"emb", "pos_emb", "decoder", "lm_head"};
  for (int i = 0; i < 4; i++)
    if (fe_build_child(b, node, children[i], cfg, prm, &d)) rc = -1;
  return rc;
}

/* Mean next-token cross-entropy of logits (B, T, V) against targets (B, T). The row max that
 * keeps exp in range is a constant to the gradient (the loss does not depend on it), so no
 * gradient is computed through it: d logits = softmax - one-hot, as in PyTorch. */
static int32_t cross_entropy(FeEmit *e, int32_t logits, int32_t targets) {
  IrGraph *g = e->g;
  logits = fe_emit_f32(e, logits); /* the max, log-sum-exp and mean in f32 */
  if (logits == IR_NONE) return IR_NONE;
  IrShape s = fe_shape(e, logits);
  int32_t last = 2, lead[2] = {0, 1}, both[2] = {0, 1};
  int32_t m = ir_stop_gradient(g, ir_reduce_max(g, logits, 1, &last)); /* (B, T) */
  int32_t z = ir_sub(g, logits, fe_emit_bcast(e, m, logits, 2, lead)); /* (B, T, V) */
  int32_t lse = ir_log(g, ir_reduce_sum(g, ir_exp(g, z), 1, &last));   /* (B, T) */
  int32_t iota = ir_iota(g, DT_I32, 3, s.dims, 2);
  int32_t hit = ir_eq(g, iota, ir_broadcast(g, targets, 3, s.dims, lead));
  int32_t tl = ir_reduce_sum(g, ir_mul(g, z, ir_cast(g, hit, DT_F32)), 1, &last);
  int32_t nll = ir_sub(g, lse, tl); /* (B, T) */
  double inv = 1.0 / (double)(s.dims[0] * s.dims[1]);
  int32_t sum = ir_reduce_sum(g, nll, 2, both);
  return ir_mul(g, sum, ir_const_scalar(g, DT_F32, inv, 0, NULL));
}

static int32_t emit(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                    const FeDims *in, int32_t x) {
  (void)x;
  FeDims d = *in;
  d.dim = fe_get_int(node, "dim");
  d.vocab_size = fe_get_int(node, "vocab_size");
  d.num_layers = fe_get_int(fe_get_child(node, "decoder"), "num_layers");
  int32_t h = fe_emit_child(e, node, "emb", cfg, prm, &d, e->ids);
  h = fe_emit_child(e, node, "pos_emb", cfg, prm, &d, h);
  h = fe_emit_child(e, node, "decoder", cfg, prm, &d, h);
  int32_t logits;
  if (fe_get_bool(fe_get_child(node, "lm_head"), "tied")) {
    char ep[512];
    snprintf(ep, sizeof ep, "%s/emb", prm);
    int32_t lc = 2, rc = 1; /* (B, T, D) . (V, D) -> (B, T, V) */
    logits = ir_dot(e->g, h, fe_emit_param(e, ep, "weight"), 0, NULL, NULL, 1, &lc, &rc);
  } else {
    logits = fe_emit_child(e, node, "lm_head", cfg, prm, &d, h);
  }
  if (logits == IR_NONE) return IR_NONE;
  ir_value_set_tag(e->g, logits, "lm_head.logits");
  if (e->forward) return logits; /* sampling (forward, decode): the logits are the output */
  int32_t loss = cross_entropy(e, logits, e->targets);
  return e->aux_loss == IR_NONE ? loss : ir_add(e->g, loss, e->aux_loss);
}

const FeKind fe_kind_causal_lm = {
    .name = "causal_lm",
    .doc = "decoder-only language model",
    .fields = fields,
    .nfields = FE_NFIELDS(fields),
    .build = build,
    .emit = emit,
};
