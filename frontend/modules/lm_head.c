/*
 * lm_head.c: projection from the model width to vocabulary logits, either
 * tied to the token embedding (no parameters of its own) or a separate
 * (vocab, dim) matrix.
 */
#include "frontend/frontend.h"

static const FeField fields[] = {
    F_BOOL("tied", "true", "reuse the token embedding table"),
    F_FLOAT("init_std", "0.02", FE_ATLEAST(0), "standard deviation of the normal init"),
    F_TYPED("param_partition_specs", FT_PSPECS, "{\"weight\": [\"model\", \"fsdp\"]}",
            "partition spec of the (vocab, dim) matrix: vocabulary-parallel, dim over fsdp"),
};

static int build(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                 const FeDims *in) {
  if (fe_get_bool(node, "tied")) return 0;
  return fe_vocab_param(b, node, cfg, prm, in);
}

/* Untied head: (B, T, D) . (V, D) -> (B, T, V). Tied heads are emitted by the model. */
static int32_t emit(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                    const FeDims *in, int32_t x) {
  (void)node, (void)cfg, (void)in;
  int32_t lc = 2, rc = 1;
  return ir_dot(e->g, x, fe_emit_param(e, prm, "weight"), 0, NULL, NULL, 1, &lc, &rc);
}

const FeKind fe_kind_lm_head = {
    .name = "lm_head",
    .doc = "output projection to the vocabulary",
    .fields = fields,
    .nfields = FE_NFIELDS(fields),
    .spec_names = "weight",
    .build = build,
    .emit = emit,
};
