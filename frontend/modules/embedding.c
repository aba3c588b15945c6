/*
 * embedding.c: token embedding and learned position embedding tables.
 * The vocabulary and width come from the model; the position table must
 * cover the training sequence length.
 */
#include "frontend/frontend.h"

static const FeField emb_fields[] = {
    F_FLOAT("init_std", "0.02", FE_ATLEAST(0), "standard deviation of the normal init"),
    F_TYPED("param_partition_specs", FT_PSPECS, "{\"weight\": [null, \"model\"]}",
            "partition spec of the (vocab, dim) table"),
};

static int build_emb(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                     const FeDims *in) {
  int64_t shape[2] = {in->vocab_size, in->dim}; /* (V, D) */
  return fe_param(b, node, cfg, prm, "weight", 2, shape, "normal", fe_get_float(node, "init_std"),
                  "weight", NULL, 1.0, in);
}

const FeKind fe_kind_embedding = {"embedding", "token embedding table", emb_fields,
                                  FE_NFIELDS(emb_fields), "weight", build_emb};

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
  return fe_param(b, node, cfg, prm, "weight", 2, shape, "normal", fe_get_float(node, "init_std"),
                  "weight", NULL, 1.0, in);
}

const FeKind fe_kind_learned_pos_emb = {"learned_pos_emb", "learned position embedding",
                                        pos_fields, FE_NFIELDS(pos_fields), "weight", build_pos};
