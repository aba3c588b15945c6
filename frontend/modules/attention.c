/*
 * attention.c: causal multi-head attention, grouped-query when num_kv_heads
 * is below num_heads, with optional biases and optional rotary position
 * embedding (the `rope` child).
 *
 * Parameters (D = dim, N = num_heads, K = num_kv_heads, H = dim / N):
 *   q_proj (D, N*H)  k_proj (D, K*H)  v_proj (D, K*H)  o_proj (N*H, D)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

static const FeField fields[] = {
    F_INT("num_heads", NULL, FE_RANGE(1, 65536), "number of query heads"),
    F_INT("num_kv_heads", "0", FE_RANGE(0, 65536),
          "number of key/value heads (grouped-query attention); 0 means num_heads"),
    F_BOOL("causal", "true", "mask attention to future positions"),
    F_BOOL("bias", "false", "learn biases in the projections"),
    F_ENUM("kernel", "\"fused\"", "fused|reference",
           "fused: one attention op, the (B, N, T, T) scores never stored (backends without it "
           "get it expanded); reference: products and softmax as separate ops"),
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
    return fe_field_error(b, node, cfg, "num_heads",
                          "num_heads %lld does not divide dim %lld "
                          "(expected a divisor of %lld)",
                          (long long)*heads, (long long)in->dim, (long long)in->dim);
  }
  if (*kv > *heads || *heads % *kv != 0) {
    return fe_field_error(b, node, cfg, "num_kv_heads",
                          "num_heads %lld is not a multiple of num_kv_heads %lld "
                          "(expected a divisor of %lld)",
                          (long long)*heads, (long long)*kv, (long long)*heads);
  }
  if (fe_get_child(node, "rope") && (in->dim / *heads) % 2 != 0) {
    return fe_field_error(b, node, cfg, "rope",
                          "rotary embedding needs an even head dim, got %lld "
                          "(dim %lld / num_heads %lld)",
                          (long long)(in->dim / *heads), (long long)in->dim, (long long)*heads);
  }
  return 0;
}

static int proj(FeBuild *b, json_object *node, const char *cfg, const char *prm, const char *name,
                int64_t rows, int64_t cols, const FeDims *in) {
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
  /* (B, N, T, T); a seq axis keeps each device's T/c queries against all T keys */
  int64_t scores[4] = {in->batch, heads, in->seq_len / fe_seq_split(&b->mesh), in->seq_len};
  fe_step_tensor(b, "the attention scores", "batch x heads x seq x seq", 4, scores,
                 fe_get_child(b->root, "input"), "/input", "seq_len");
  if (proj(b, node, cfg, prm, "q_proj", in->dim, heads * hd, in)) return -1;
  if (proj(b, node, cfg, prm, "k_proj", in->dim, kv * hd, in)) return -1;
  if (proj(b, node, cfg, prm, "v_proj", in->dim, kv * hd, in)) return -1;
  return proj(b, node, cfg, prm, "o_proj", heads * hd, in->dim, in);
}

static const FeField rope_fields[] = {
    F_FLOAT("theta", "10000.0", FE_ATLEAST(1), "base of the rotary frequencies"),
};

/* Rotary embedding of x (B, T, N, H), rotating the two halves of each head:
 * (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), angle t * theta^(-2i/H), t the position:
 * 0..T-1, or in the decode step the input pos. */
static int32_t emit_rope(FeEmit *e, json_object *rope, int32_t x) {
  if (x == IR_NONE) return IR_NONE;
  IrGraph *g = e->g;
  IrShape s = fe_shape(e, x);
  int64_t B = s.dims[0], T = s.dims[1], N = s.dims[2], H = s.dims[3], half = H / 2;
  double theta = fe_get_float(rope, "theta");
  double *freq = base_xmalloc((size_t)half * sizeof *freq);
  for (int64_t i = 0; i < half; i++) freq[i] = pow(theta, -2.0 * (double)i / (double)H);
  int64_t th[2] = {T, half};
  int32_t f1 = 1, f0 = 0;
  int32_t t = e->decode ? ir_broadcast(g, ir_cast(g, e->pos, DT_F32), 2, th, &f0)
                        : ir_iota(g, DT_F32, 2, th, 0);
  int32_t angle =
      ir_mul(g, t, ir_broadcast(g, ir_const_data(g, DT_F32, freq, 1, &half), 2, th, &f1));
  free(freq);
  int32_t bd[2] = {1, 3};
  int64_t out[4] = {B, T, N, half};
  /* the angles in f32 (t * freq needs its bits at long contexts); cos and sin in x's dtype */
  int32_t c = ir_broadcast(g, fe_emit_compute(e, ir_cos(g, angle)), 4, out, bd);
  int32_t sn = ir_broadcast(g, fe_emit_compute(e, ir_sin(g, angle)), 4, out, bd);
  int64_t z[4] = {0, 0, 0, 0}, mid[4] = {0, 0, 0, half};
  int32_t x1 = ir_slice(g, x, z, out), x2 = ir_slice(g, x, mid, s.dims);
  int32_t parts[2] = {ir_sub(g, ir_mul(g, x1, c), ir_mul(g, x2, sn)),
                      ir_add(g, ir_mul(g, x2, c), ir_mul(g, x1, sn))};
  return ir_concat(g, 2, parts, 3);
}

/* (B, T, heads*H) -> (B, T, heads, H), rotated when rope is set. */
static int32_t split_heads(FeEmit *e, int32_t x, int64_t heads, int64_t H, json_object *rope) {
  int64_t split[4] = {e->batch, e->seq, heads, H};
  x = ir_reshape(e->g, x, 4, split);
  return rope ? emit_rope(e, rope, x) : x;
}

/* (B, T, heads, H) -> (B, N, T, H): repeat kv heads for GQA, heads first. */
static int32_t heads_first(FeEmit *e, int32_t x, int64_t heads, int64_t n, int64_t H) {
  IrGraph *g = e->g;
  int64_t B = e->batch, T = e->seq;
  if (heads != n) { /* query head j uses kv head j / (n / heads) */
    int64_t rep[5] = {B, T, heads, n / heads, H}, full[4] = {B, T, n, H};
    int32_t bd[4] = {0, 1, 2, 4};
    x = ir_reshape(g, ir_broadcast(g, x, 5, rep, bd), 4, full);
  }
  int32_t perm[4] = {0, 2, 1, 3};
  return ir_transpose(g, x, perm);
}

/* The prefill's keys or values (`which`) of the attention at prm: x (1, T, K, H) as the output
 * IR_KV_PREFILL prm/which (1, K, T, H), the rows the decode step's cache starts from. */
static void kv_prefill(FeEmit *e, const char *prm, const char *which, int32_t x) {
  char name[600];
  snprintf(name, sizeof name, IR_KV_PREFILL "%s/%s", prm, which);
  int32_t perm[4] = {0, 2, 1, 3};
  int32_t t = ir_transpose(e->g, x, perm);
  if (t != IR_NONE) ir_graph_add_output(e->g, name, t);
}

/* The decode step's keys or values (`which`): the token's row x (1, 1, K, H) becomes the output
 * IR_KV_ROW prm/which (1, K, 1, H), which the runtime writes into the cache at pos; *cache is
 * the input IR_KV_CACHE prm/which (1, K, W, H), whose rows below pos are the earlier tokens'. */
static int32_t kv_decode(FeEmit *e, const char *prm, const char *which, int32_t x, int32_t *cache) {
  *cache = IR_NONE;
  if (x == IR_NONE) return IR_NONE;
  IrGraph *g = e->g;
  IrShape s = fe_shape(e, x);
  IrDType dt = g->values[x].dtype;
  int64_t kwh[4] = {1, s.dims[2], e->window, s.dims[3]};
  char name[600];
  int32_t perm[4] = {0, 2, 1, 3};
  int32_t row = ir_transpose(g, x, perm); /* (1, K, 1, H) */
  snprintf(name, sizeof name, IR_KV_ROW "%s/%s", prm, which);
  if (row == IR_NONE || ir_graph_add_output(g, name, row) != IR_OK) return IR_NONE;
  snprintf(name, sizeof name, IR_KV_CACHE "%s/%s", prm, which);
  *cache = ir_input(g, name, dt, 4, kwh);
  return row;
}

/* Attention of the decode step: q (1, 1, N, H) against the cache's keys and values at the
 * positions below pos and this token's own k, v (1, 1, K, H); query head j reads kv head
 * j / (N / K). The scores are the cache's (1, K, G, W), positions from pos on masked as the
 * causal forward masks later ones, then the token's own, so that the cache is only read, not
 * copied with the new row in it. (1, 1, N*H). */
static int32_t decode_attention(FeEmit *e, const char *prm, int32_t q, int32_t k, int32_t v,
                                double scale) {
  if (q == IR_NONE || k == IR_NONE) return IR_NONE;
  IrGraph *g = e->g;
  int64_t N = fe_shape(e, q).dims[2], K = fe_shape(e, k).dims[2], H = fe_shape(e, q).dims[3];
  int64_t W = e->window, kgh[4] = {1, K, N / K, H}, kgw[4] = {1, K, N / K, W};
  int32_t kc, vc; /* (1, K, W, H) */
  int32_t kr = kv_decode(e, prm, "k", k, &kc),
          vr = kv_decode(e, prm, "v", v, &vc); /* (1, K, 1, H) */
  int32_t bb[2] = {0, 1}, c3 = 3, c2 = 2, d0 = 0;
  int32_t qg = ir_reshape(g, q, 4, kgh);
  int32_t parts[2] = {ir_dot(g, qg, kc, 2, bb, bb, 1, &c3, &c3),  /* (1, K, G, W) */
                      ir_dot(g, qg, kr, 2, bb, bb, 1, &c3, &c3)}; /* (1, K, G, 1) */
  int32_t before = ir_lt(g, ir_iota(g, DT_I32, 4, kgw, 3), ir_broadcast(g, e->pos, 4, kgw, &d0));
  parts[0] = ir_select(g, before, parts[0], fe_emit_like(e, parts[0], -1e9));
  int32_t s = ir_concat(g, 2, parts, 3); /* (1, K, G, W + 1) */
  s = fe_emit_compute(e, fe_emit_softmax(e, ir_mul(g, s, fe_emit_like(e, s, scale))));
  if (s == IR_NONE) return IR_NONE;
  int64_t z[4] = {0, 0, 0, 0}, at_w[4] = {0, 0, 0, W}, end[4] = {1, K, N / K, W + 1};
  int32_t ctx = ir_add(g, ir_dot(g, ir_slice(g, s, z, kgw), vc, 2, bb, bb, 1, &c3, &c2),
                       ir_dot(g, ir_slice(g, s, at_w, end), vr, 2, bb, bb, 1, &c3, &c2));
  if (ctx != IR_NONE) ir_value_set_tag(g, ctx, "attention.context");
  int64_t merged[3] = {1, 1, N * H};
  return ir_reshape(g, ctx, 3, merged);
}

/* (B, N, T, H) attention of the whole sequence, fused or as products and a softmax. */
static int32_t full_attention(FeEmit *e, json_object *node, int64_t N, int32_t q, int32_t k,
                              int32_t v, double scale) {
  IrGraph *g = e->g;
  bool causal = fe_get_bool(node, "causal");
  if (strcmp(fe_get_str(node, "kernel"), "fused") == 0)
    return ir_attention(g, q, k, v, causal, scale);
  int64_t B = e->batch, T = e->seq;
  int32_t bb[2] = {0, 1}, c3 = 3, c2 = 2;
  int32_t s = ir_dot(g, q, k, 2, bb, bb, 1, &c3, &c3); /* (B, N, T, T) */
  s = ir_mul(g, s, fe_emit_like(e, s, scale));
  if (causal) {
    int64_t tt[2] = {T, T}, bntt[4] = {B, N, T, T};
    int32_t bd[2] = {2, 3};
    int32_t allowed = ir_ge(g, ir_iota(g, DT_I32, 2, tt, 0), ir_iota(g, DT_I32, 2, tt, 1));
    s = ir_select(g, ir_broadcast(g, allowed, 4, bntt, bd), s, fe_emit_like(e, s, -1e9));
  }
  return ir_dot(g, fe_emit_compute(e, fe_emit_softmax(e, s)), v, 2, bb, bb, 1, &c3, &c2);
}

static int32_t emit(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                    const FeDims *in, int32_t x) {
  (void)cfg;
  IrGraph *g = e->g;
  int64_t N = fe_get_int(node, "num_heads"), K = fe_get_int(node, "num_kv_heads");
  if (K == 0) K = N;
  int64_t H = in->dim / N, B = e->batch, T = e->seq;
  json_object *rope = fe_get_child(node, "rope");
  double scale = 1.0 / sqrt((double)H);
  if (e->decode) {
    int32_t q = split_heads(e, fe_emit_linear(e, x, prm, "q_proj", "attention.q_proj"), N, H, rope);
    int32_t k = split_heads(e, fe_emit_linear(e, x, prm, "k_proj", "attention.k_proj"), K, H, rope);
    int32_t v = split_heads(e, fe_emit_linear(e, x, prm, "v_proj", "attention.v_proj"), K, H, NULL);
    return fe_emit_linear(e, decode_attention(e, prm, q, k, v, scale), prm, "o_proj",
                          "attention.o_proj");
  }
  /* q, then k, then v, each whole: the training step's order (its memory plan follows it) */
  int32_t q = heads_first(
      e, split_heads(e, fe_emit_linear(e, x, prm, "q_proj", "attention.q_proj"), N, H, rope), N, N,
      H);
  int32_t k = split_heads(e, fe_emit_linear(e, x, prm, "k_proj", "attention.k_proj"), K, H, rope);
  /* the fused kernel reads the K key heads itself (grouped-query): no broadcast copy, unless
   * tensor parallelism splits the heads over more devices than K divides over */
  int64_t tp = fe_role_split(&e->b->mesh, FE_AXIS_TENSOR);
  int64_t KN = strcmp(fe_get_str(node, "kernel"), "fused") == 0 && K % tp == 0 ? K : N;
  if (e->kv) kv_prefill(e, prm, "k", k);
  k = heads_first(e, k, K, KN, H);
  int32_t v = split_heads(e, fe_emit_linear(e, x, prm, "v_proj", "attention.v_proj"), K, H, NULL);
  if (e->kv) kv_prefill(e, prm, "v", v);
  v = heads_first(e, v, K, KN, H);
  int32_t ctx = full_attention(e, node, N, q, k, v, scale); /* (B, N, T, H) */
  if (ctx != IR_NONE) ir_value_set_tag(g, ctx, "attention.context");
  int32_t perm[4] = {0, 2, 1, 3};
  int64_t merged[3] = {B, T, N * H};
  ctx = ir_reshape(g, ir_transpose(g, ctx, perm), 3, merged);
  return fe_emit_linear(e, ctx, prm, "o_proj", "attention.o_proj");
}

const FeKind fe_kind_attention = {
    .name = "attention",
    .doc = "causal multi-head / grouped-query attention",
    .fields = fields,
    .nfields = FE_NFIELDS(fields),
    .spec_names = "q_proj|k_proj|v_proj|o_proj",
    .build = build,
    .emit = emit,
};

const FeKind fe_kind_rope = {
    .name = "rope",
    .doc = "rotary position embedding",
    .fields = rope_fields,
    .nfields = FE_NFIELDS(rope_fields),
};
