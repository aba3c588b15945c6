/*
 * embedding.c: token embedding and learned position embedding tables.
 * The vocabulary and width come from the model; the position table must
 * cover the training sequence length.
 */
#include "frontend/frontend.h"

static const FeField emb_fields[] = {
    F_FLOAT("init_std", "0.02", FE_ATLEAST(0), "standard deviation of the normal init"),
    F_TYPED("param_partition_specs", FT_PSPECS, "{\"weight\": [\"model\", \"fsdp\"]}",
            "partition spec of the (vocab, dim) table: vocabulary-parallel, dim over fsdp"),
};

static int build_emb(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                     const FeDims *in) {
  return fe_vocab_param(b, node, cfg, prm, in);
}

static const FeField pos_fields[] = {
    F_INT("max_len", NULL, FE_RANGE(1, 1 << 24), "number of positions in the table"),
    F_FLOAT("init_std", "0.01", FE_ATLEAST(0), "standard deviation of the normal init"),
    F_TYPED("param_partition_specs", FT_PSPECS, "{\"weight\": [null, \"model\"]}",
            "partition spec of the (max_len, dim) table"),
};

static int build_pos(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                     const FeDims *in) {
  int64_t max_len = fe_get_int(node, "max_len");
  if (in->seq_len > max_len) {
    return fe_field_error(b, node, cfg, "max_len",
                          "max_len %lld is shorter than the input's seq_len %lld "
                          "(expected at least %lld)",
                          (long long)max_len, (long long)in->seq_len, (long long)in->seq_len);
  }
  int64_t shape[2] = {max_len, in->dim}; /* (P, D) */
  b->not_linear = "a position embedding table";
  int rc = fe_param(b, node, cfg, prm, "weight", 2, shape, "normal", fe_get_float(node, "init_std"),
                    "weight", NULL, 1.0, in);
  b->not_linear = NULL;
  return rc;
}

/* ids (B, T) i32 -> (B, T, D) rows of the table. */
static int32_t emit_emb(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                        const FeDims *in, int32_t ids) {
  (void)node, (void)cfg, (void)in;
  return ir_gather(e->g, fe_emit_param(e, prm, "weight"), ids);
}

/* x (B, T, D) + table[0:T] broadcast over the batch; the decode step's token (1, 1, D) + the
 * row of its position. */
static int32_t emit_pos(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                        const FeDims *in, int32_t x) {
  (void)node, (void)cfg;
  if (e->decode) {
    int64_t one[2] = {1, 1};
    return ir_add(
        e->g, x,
        ir_gather(e->g, fe_emit_param(e, prm, "weight"), ir_reshape(e->g, e->pos, 2, one)));
  }
  int64_t start[2] = {0, 0}, limit[2] = {e->seq, in->dim};
  int32_t rows = ir_slice(e->g, fe_emit_param(e, prm, "weight"), start, limit); /* (T, D) */
  int32_t bd[2] = {1, 2};
  return ir_add(e->g, x, fe_emit_bcast(e, rows, x, 2, bd));
}

const FeKind fe_kind_embedding = {
    .name = "embedding",
    .doc = "token embedding table",
    .fields = emb_fields,
    .nfields = FE_NFIELDS(emb_fields),
    .spec_names = "weight",
    .build = build_emb,
    .emit = emit_emb,
};

const FeKind fe_kind_learned_pos_emb = {
    .name = "learned_pos_emb",
    .doc = "learned position embedding",
    .fields = pos_fields,
    .nfields = FE_NFIELDS(pos_fields),
    .spec_names = "weight",
    .build = build_pos,
    .emit = emit_pos,
};
