/*
 * attention.c: causal multi-head attention, grouped-query when num_kv_heads
 * is below num_heads, with optional biases and optional rotary position
 * embedding (the `rope` child).
 *
 * Parameters (D = dim, N = num_heads, K = num_kv_heads, H = dim / N):
 *   q_proj (D, N*H)  k_proj (D, K*H)  v_proj (D, K*H)  o_proj (N*H, D)
 */
#include "frontend/frontend.h"

static const FeField fields[] = {
    F_INT("num_heads", NULL, FE_RANGE(1, 65536), "number of query heads"),
    F_INT("num_kv_heads", "0", FE_RANGE(0, 65536),
          "number of key/value heads (grouped-query attention); 0 means num_heads"),
    F_BOOL("causal", "true", "mask attention to future positions"),
    F_BOOL("bias", "false", "learn biases in the projections"),
    F_CHILD("rope", "null", "rope|null", "rotary position embedding, or null"),
    F_FLOAT("init_std", "0.02", FE_ATLEAST(0), "standard deviation of the normal init"),
    F_TYPED("param_partition_specs", FT_PSPECS,
            "{\"q_proj\": [\"fsdp\", \"model\"], \"k_proj\": [\"fsdp\", \"model\"], "
            "\"v_proj\": [\"fsdp\", \"model\"], \"o_proj\": [\"model\", \"fsdp\"]}",
            "partition specs of the projection weights"),
};

static int check_heads(FeBuild *b, json_object *node, const char *cfg, const FeDims *in,
                       int64_t *heads, int64_t *kv) {
  *heads = fe_get_int(node, "num_heads");
  *kv = fe_get_int(node, "num_kv_heads");
  if (*kv == 0) *kv = *heads;
  if (in->dim % *heads != 0) {
    return fe_field_error(b, node, cfg, "num_heads", "num_heads %lld does not divide dim %lld "
                    "(expected a divisor of %lld)", (long long)*heads, (long long)in->dim,
                    (long long)in->dim);
  }
  if (*kv > *heads || *heads % *kv != 0) {
    return fe_field_error(b, node, cfg, "num_kv_heads", "num_heads %lld is not a multiple of num_kv_heads %lld "
                    "(expected a divisor of %lld)", (long long)*heads, (long long)*kv,
                    (long long)*heads);
  }
  if (fe_get_child(node, "rope") && (in->dim / *heads) % 2 != 0) {
    return fe_field_error(b, node, cfg, "rope", "rotary embedding needs an even head dim, got %lld "
                    "(dim %lld / num_heads %lld)", (long long)(in->dim / *heads),
                    (long long)in->dim, (long long)*heads);
  }
  return 0;
}

static int proj(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                const char *name, int64_t rows, int64_t cols, const FeDims *in) {
  char pp[512];
  snprintf(pp, sizeof pp, "%s/%s", prm, name);
  int64_t w[2] = {rows, cols};
  double std = fe_get_float(node, "init_std");
  if (fe_param(b, node, cfg, pp, "weight", 2, w, "normal", std, name, NULL, 1.0, in)) return -1;
  if (!fe_get_bool(node, "bias")) return 0;
  return fe_param(b, node, cfg, pp, "bias", 1, &w[1], "zeros", 0, NULL, NULL, 0.0, in);
}

static int build(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                 const FeDims *in) {
  int64_t heads, kv;
  if (check_heads(b, node, cfg, in, &heads, &kv)) return -1;
  if (fe_build_child(b, node, "rope", cfg, prm, in)) return -1;
  int64_t hd = in->dim / heads;
  if (proj(b, node, cfg, prm, "q_proj", in->dim, heads * hd, in)) return -1;
  if (proj(b, node, cfg, prm, "k_proj", in->dim, kv * hd, in)) return -1;
  if (proj(b, node, cfg, prm, "v_proj", in->dim, kv * hd, in)) return -1;
  return proj(b, node, cfg, prm, "o_proj", heads * hd, in->dim, in);
}

const FeKind fe_kind_attention = {"attention", "causal multi-head / grouped-query attention",
                                  fields, FE_NFIELDS(fields), "q_proj|k_proj|v_proj|o_proj",
                                  build};

static const FeField rope_fields[] = {
    F_FLOAT("theta", "10000.0", FE_ATLEAST(1), "base of the rotary frequencies"),
};

const FeKind fe_kind_rope = {"rope", "rotary position embedding", rope_fields,
                             FE_NFIELDS(rope_fields), NULL, NULL};
