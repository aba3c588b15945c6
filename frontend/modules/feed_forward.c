/*
 * feed_forward.c: the dense MLP and the mixture of experts. They share the
 * hidden-size rule and most field names, so replacing one by the other keeps
 * the fields they share.
 *
 * Hidden size H: hidden_dim if non-zero, else hidden_dim_scale * dim rounded
 * up to a multiple of hidden_dim_multiple_of (Llama's 8/3 * dim -> 256).
 * Parameters (D = dim, E = num_experts):
 *   gelu:   linear1 (D, H), linear2 (H, D)
 *   swiglu: linear1_0 (D, H) gate, linear1_1 (D, H) up, linear2 (H, D)
 *   moe:    gate (D, E) router, and every expert matrix above with a leading E
 */
#include <math.h>
#include <string.h>

#include "frontend/frontend.h"

#define HIDDEN_FIELDS                                                                              \
  F_INT("hidden_dim", "0", FE_RANGE(0, 1 << 24), "hidden size; 0 means hidden_dim_scale * dim"),   \
      F_FLOAT("hidden_dim_scale", "4.0", FE_RANGE(0, 1024), "hidden size as a multiple of dim"),   \
      F_INT("hidden_dim_multiple_of", "1", FE_RANGE(1, 65536), "round the scaled hidden size up"), \
      F_ENUM("activation", "\"gelu\"", "gelu|relu|swiglu", "activation; swiglu is gated"),         \
      F_BOOL("bias", "false", "learn biases"),                                                     \
      F_FLOAT("init_std", "0.02", FE_ATLEAST(0), "standard deviation of the normal init")

static const FeField ffn_fields[] = {
    HIDDEN_FIELDS,
    F_TYPED("param_partition_specs", FT_PSPECS,
            "{\"linear1\": [\"fsdp\", \"model\"], \"linear2\": [\"model\", \"fsdp\"]}",
            "partition specs of the weights (linear1 covers linear1_0 and linear1_1)"),
};

static int hidden_size(FeBuild *b, json_object *node, const char *cfg, const FeDims *in,
                       int64_t *h) {
  *h = fe_get_int(node, "hidden_dim");
  if (*h == 0) {
    int64_t m = fe_get_int(node, "hidden_dim_multiple_of");
    double scaled = ceil(fe_get_float(node, "hidden_dim_scale") * (double)in->dim - 1e-9);
    *h = ((int64_t)scaled + m - 1) / m * m;
  }
  if (*h < 1 || *h > (1 << 24)) {
    return fe_field_error(b, node, cfg, "hidden_dim_scale",
                          "hidden size %lld (expected "
                          "hidden_dim or hidden_dim_scale * dim from 1 to %d)",
                          (long long)*h, 1 << 24);
  }
  return 0;
}

/* One linear layer `name` of shape (lead?, rows, cols) with optional bias. */
static int linear(FeBuild *b, json_object *node, const char *cfg, const char *prm, const char *name,
                  const char *spec, int64_t lead, int64_t rows, int64_t cols, const FeDims *in) {
  char pp[512];
  snprintf(pp, sizeof pp, "%s/%s", prm, name);
  int64_t w[3] = {lead, rows, cols}, bs[2] = {lead, cols};
  int off = lead ? 0 : 1;
  const char *lead_axis = lead ? fe_get_str(node, "expert_axis") : NULL;
  double std = fe_get_float(node, "init_std");
  if (fe_param(b, node, cfg, pp, "weight", 3 - off, w + off, "normal", std, spec, lead_axis, 1.0,
               in))
    return -1;
  if (!fe_get_bool(node, "bias")) return 0;
  return fe_param(b, node, cfg, pp, "bias", 2 - off, bs + off, "zeros", 0, NULL, lead_axis, 0.0,
                  in);
}

/* The training step's largest tensors here: the hidden activations (B, T, H)
 * of a dense MLP; with experts, (B, T, E, H), (B, T, E, D) and the routing
 * mask (B, T, top_k, E). */
static void step_tensors(FeBuild *b, json_object *node, const char *cfg, int64_t experts, int64_t h,
                         const FeDims *in) {
  const char *hfield = fe_get_int(node, "hidden_dim") ? "hidden_dim" : "hidden_dim_scale";
  if (!experts) {
    int64_t bth[3] = {in->batch, in->seq_len, h};
    fe_step_tensor(b, "the hidden activations", "batch x seq x hidden", 3, bth, node, cfg, hfield);
    return;
  }
  int64_t bteh[4] = {in->batch, in->seq_len, experts, h};
  int64_t bted[4] = {in->batch, in->seq_len, experts, in->dim};
  int64_t btke[4] = {in->batch, in->seq_len, fe_get_int(node, "top_k"), experts};
  fe_step_tensor(b, "the experts' hidden activations", "batch x seq x experts x hidden", 4, bteh,
                 node, cfg, "num_experts");
  fe_step_tensor(b, "the experts' outputs", "batch x seq x experts x dim", 4, bted, node, cfg,
                 "num_experts");
  fe_step_tensor(b, "the routing mask", "batch x seq x top_k x experts", 4, btke, node, cfg,
                 "num_experts");
}

/* The MLP's matrices; `experts` is 0 for a dense MLP. */
static int mlp(FeBuild *b, json_object *node, const char *cfg, const char *prm, int64_t experts,
               const FeDims *in) {
  int64_t h;
  if (hidden_size(b, node, cfg, in, &h)) return -1;
  step_tensors(b, node, cfg, experts, h, in);
  bool gated = strcmp(fe_get_str(node, "activation"), "swiglu") == 0;
  int rc = 0;
  if (gated) {
    rc |= linear(b, node, cfg, prm, "linear1_0", "linear1", experts, in->dim, h, in);
    rc |= linear(b, node, cfg, prm, "linear1_1", "linear1", experts, in->dim, h, in);
  } else {
    rc |= linear(b, node, cfg, prm, "linear1", "linear1", experts, in->dim, h, in);
  }
  if (rc) return -1;
  return linear(b, node, cfg, prm, "linear2", "linear2", experts, h, in->dim, in);
}

static int build_ffn(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                     const FeDims *in) {
  return mlp(b, node, cfg, prm, 0, in);
}

static const FeField moe_fields[] = {
    HIDDEN_FIELDS,
    F_INT("num_experts", NULL, FE_RANGE(1, 65536), "number of experts"),
    F_INT("top_k", "2", FE_RANGE(1, 65536), "experts each token is routed to"),
    F_FLOAT("load_balance_loss_weight", "0.01", FE_ATLEAST(0), "weight of the auxiliary loss"),
    F_FLOAT("capacity_factor", "2.0", FE_ATLEAST(0),
            "expert capacity as a multiple of the even share; 0 means no token is dropped"),
    F_TYPED("expert_axis", FT_STRING, "\"expert\"", "mesh axis the experts are split over"),
    F_TYPED("param_partition_specs", FT_PSPECS,
            "{\"gate\": [null, null], \"linear1\": [\"fsdp\", \"model\"], "
            "\"linear2\": [\"model\", \"fsdp\"]}",
            "partition specs of the router and of each expert's weights"),
};

static int build_moe(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                     const FeDims *in) {
  int64_t e = fe_get_int(node, "num_experts"), k = fe_get_int(node, "top_k");
  if (k > e) {
    return fe_field_error(b, node, cfg, "top_k",
                          "top_k %lld exceeds num_experts %lld (expected 1 to %lld)", (long long)k,
                          (long long)e, (long long)e);
  }
  char pp[512];
  snprintf(pp, sizeof pp, "%s/gate", prm);
  int64_t g[2] = {in->dim, e}; /* (D, E) */
  b->not_linear = "the MoE router";
  int grc = fe_param(b, node, cfg, pp, "weight", 2, g, "normal", fe_get_float(node, "init_std"),
                     "gate", NULL, 1.0, in);
  b->not_linear = NULL;
  if (grc) return -1;
  return mlp(b, node, cfg, prm, e, in);
}

/* GELU, tanh approximation (as GPT-2): 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))). */
static int32_t gelu(FeEmit *e, int32_t a) {
  IrGraph *g = e->g;
  int32_t a3 = ir_mul(g, a, ir_mul(g, a, a));
  int32_t inner = ir_mul(g, fe_emit_like(e, a, sqrt(2.0 / M_PI)),
                         ir_add(g, a, ir_mul(g, fe_emit_like(e, a, 0.044715), a3)));
  int32_t t = ir_add(g, fe_emit_like(e, a, 1.0), ir_tanh(g, inner));
  return ir_mul(g, ir_mul(g, fe_emit_like(e, a, 0.5), a), t);
}

/* The activation between linear1 and linear2; `up` is linear1_1 for gated ones. */
static int32_t activate(FeEmit *e, json_object *node, int32_t a, int32_t up) {
  const char *act = fe_get_str(node, "activation");
  if (!strcmp(act, "swiglu")) return ir_mul(e->g, ir_mul(e->g, a, ir_logistic(e->g, a)), up);
  if (!strcmp(act, "relu")) return ir_max(e->g, a, fe_emit_like(e, a, 0.0));
  return gelu(e, a);
}

static bool gated(json_object *node) { return !strcmp(fe_get_str(node, "activation"), "swiglu"); }

static int32_t emit_ffn(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                        const FeDims *in, int32_t x) {
  (void)cfg, (void)in;
  int32_t a, up = IR_NONE;
  if (gated(node)) {
    a = fe_emit_linear(e, x, prm, "linear1_0", "feed_forward.linear1_0");
    up = fe_emit_linear(e, x, prm, "linear1_1", "feed_forward.linear1_1");
  } else {
    a = fe_emit_linear(e, x, prm, "linear1", "feed_forward.linear1_0");
  }
  return fe_emit_linear(e, activate(e, node, a, up), prm, "linear2", "feed_forward.linear2");
}

/* Every expert's first layer: x (B, T, D) . W (E, D, H) [+ b (E, H)] -> (B, T, E, H). */
static int32_t expert_in(FeEmit *e, int32_t x, const char *prm, const char *name, const char *tag) {
  char pp[512];
  snprintf(pp, sizeof pp, "%s/%s", prm, name);
  int32_t lc = 2, rc = 1;
  int32_t y = ir_dot(e->g, x, fe_emit_param(e, pp, "weight"), 0, NULL, NULL, 1, &lc, &rc);
  if (fe_has_param(e, pp, "bias")) {
    int32_t bd[2] = {2, 3};
    y = ir_add(e->g, y, fe_emit_bcast(e, fe_emit_param(e, pp, "bias"), y, 2, bd));
  }
  if (y != IR_NONE) ir_value_set_tag(e->g, y, tag);
  return y;
}

/* Every expert's second layer: h (B, T, E, H) . W (E, H, D) [+ b (E, D)] -> (E, B, T, D). */
static int32_t expert_out(FeEmit *e, int32_t h, const char *prm) {
  char pp[512];
  snprintf(pp, sizeof pp, "%s/linear2", prm);
  int32_t lb = 2, rb = 0, lc = 3, rc = 1;
  int32_t y = ir_dot(e->g, h, fe_emit_param(e, pp, "weight"), 1, &lb, &rb, 1, &lc, &rc);
  if (fe_has_param(e, pp, "bias")) {
    int32_t bd[2] = {0, 3};
    y = ir_add(e->g, y, fe_emit_bcast(e, fe_emit_param(e, pp, "bias"), y, 2, bd));
  }
  if (y != IR_NONE) ir_value_set_tag(e->g, y, "feed_forward.linear2");
  return y;
}

/* mask (B, T, E): 1 for the top_k experts of each token. */
static int32_t route_mask(FeEmit *e, int32_t probs, int64_t k) {
  if (probs == IR_NONE) return IR_NONE;
  IrGraph *g = e->g;
  IrShape s = fe_shape(e, probs);
  int64_t btke[4] = {s.dims[0], s.dims[1], k, s.dims[2]};
  int32_t bd[3] = {0, 1, 2}, kaxis = 2;
  int32_t idx = ir_top_k_indices(g, probs, k); /* (B, T, k) */
  int32_t hit = ir_eq(g, ir_iota(g, DT_I32, 4, btke, 3), ir_broadcast(g, idx, 4, btke, bd));
  return ir_reduce_sum(g, ir_cast(g, hit, DT_F32), 1, &kaxis);
}

/* Switch-style load balance: weight * E * sum_e (fraction routed to e) * (mean prob of e). */
static void add_balance_loss(FeEmit *e, json_object *node, int32_t probs, int32_t mask) {
  if (probs == IR_NONE || mask == IR_NONE) return; /* the graph holds the error */
  IrGraph *g = e->g;
  IrShape s = fe_shape(e, probs);
  int64_t E = s.dims[2], k = fe_get_int(node, "top_k"), tokens = s.dims[0] * s.dims[1];
  double w = fe_get_float(node, "load_balance_loss_weight");
  if (w == 0) return;
  int32_t bt[2] = {0, 1}, ax0 = 0;
  int32_t frac = ir_reduce_sum(g, mask, 2, bt), mean = ir_reduce_sum(g, probs, 2, bt); /* (E) */
  double scale = w * (double)E / ((double)tokens * (double)k * (double)tokens);
  int32_t aux = ir_mul(g, ir_reduce_sum(g, ir_mul(g, frac, mean), 1, &ax0),
                       ir_const_scalar(g, DT_F32, scale, 0, NULL));
  if (aux != IR_NONE) ir_value_set_tag(g, aux, "moe.load_balance_loss");
  e->aux_loss = e->aux_loss == IR_NONE ? aux : ir_add(g, e->aux_loss, aux);
}

/* The capacity of each expert in each group of S tokens: capacity_factor times the even share
 * S k / E, rounded up, and at most S (a token goes to an expert at most once). */
int64_t fe_moe_capacity(double capacity_factor, int64_t S, int64_t k, int64_t E) {
  double c = ceil(capacity_factor * (double)S * (double)k / (double)E - 1e-9);
  return c < 1 ? 1 : c > (double)S ? S : (int64_t)c;
}

/* GShard's dispatch (B, T, E, C): 1 where token t of sequence b takes slot c of expert e. A
 * sequence is a group: each expert takes at most C of its tokens, in priority order (every
 * token's first choice, in token order, then every token's second choice, ...), and drops the
 * rest (the residual carries a dropped token on). */
static int32_t dispatch_mask(FeEmit *e, int32_t probs, int64_t k, int64_t C) {
  if (probs == IR_NONE) return IR_NONE;
  IrGraph *g = e->g;
  IrShape s = fe_shape(e, probs);
  int64_t B = s.dims[0], T = s.dims[1], E = s.dims[2], KT = k * T;
  int64_t btke[4] = {B, T, k, E};
  int32_t bd3[3] = {0, 1, 2};
  int32_t idx = ir_top_k_indices(g, probs, k); /* (B, T, k) */
  int32_t hit = ir_cast(
      g, ir_eq(g, ir_iota(g, DT_I32, 4, btke, 3), ir_broadcast(g, idx, 4, btke, bd3)), DT_F32);
  int32_t perm[4] = {0, 2, 1, 3}; /* priority order: (B, k, T, E) -> (B, k*T, E) */
  int64_t bje[3] = {B, KT, E};
  int32_t m = ir_reshape(g, ir_transpose(g, hit, perm), 3, bje);
  /* slot of each assignment: how many assignments to the same expert come before it */
  int64_t jj[2] = {KT, KT};
  int32_t earlier =
      ir_cast(g, ir_lt(g, ir_iota(g, DT_I32, 2, jj, 1), ir_iota(g, DT_I32, 2, jj, 0)), DT_F32);
  int32_t c1 = 1, one = 1;
  int32_t pos = ir_dot(g, m, earlier, 0, NULL, NULL, 1, &c1, &one); /* (B, E, KT) */
  int32_t back[3] = {0, 2, 1};
  pos = ir_transpose(g, pos, back); /* (B, KT, E) */
  int64_t bjec[4] = {B, KT, E, C};
  int32_t slot = ir_cast(
      g, ir_eq(g, ir_iota(g, DT_F32, 4, bjec, 3), ir_broadcast(g, pos, 4, bjec, bd3)), DT_F32);
  int32_t d = ir_mul(g, slot, ir_broadcast(g, m, 4, bjec, bd3)); /* slot >= C: none */
  int64_t bktec[5] = {B, k, T, E, C};
  int32_t kaxis = 1;
  d = ir_reduce_sum(g, ir_reshape(g, d, 5, bktec), 1, &kaxis); /* (B, T, E, C) */
  if (d != IR_NONE) ir_value_set_tag(g, d, "moe.dispatch");
  return d;
}

/* MoE with capacity (capacity_factor > 0), GShard's formulation: tokens go to (E, B, C) expert
 * buffers through the dispatch mask, each expert runs on its buffer, and the combine weights
 * (dispatch times the renormalized top-k router probability) bring the outputs back. Under an
 * expert axis the shard pass moves the buffers between devices with all_to_all. */
static int32_t emit_moe_capacity(FeEmit *e, json_object *node, const char *prm, int32_t x,
                                 int32_t probs, int32_t w) {
  IrGraph *g = e->g;
  if (probs == IR_NONE) return IR_NONE;
  IrShape s = fe_shape(e, probs);
  int64_t T = s.dims[1], E = s.dims[2], k = fe_get_int(node, "top_k");
  int64_t C = fe_moe_capacity(fe_get_float(node, "capacity_factor"), T, k, E);
  int32_t disp = dispatch_mask(e, probs, k, C); /* (B, T, E, C) */
  int32_t b0 = 0, t1 = 1;
  /* the 0/1 dispatch is exact in any dtype; the slot counts inside it stay f32 */
  int32_t xin = ir_dot(g, fe_emit_compute(e, disp), x, 1, &b0, &b0, 1, &t1, &t1); /* (B, E, C, D) */
  int32_t ebc[4] = {1, 0, 2, 3};
  xin = ir_transpose(g, xin, ebc); /* (E, B, C, D) */
  if (xin != IR_NONE) ir_value_set_tag(g, xin, "moe.expert_inputs");
  int32_t a, up = IR_NONE;
  int32_t eb = 0, lc = 3, rc = 1;
  char pp[512];
  const char *n1 = gated(node) ? "linear1_0" : "linear1";
  snprintf(pp, sizeof pp, "%s/%s", prm, n1);
  a = ir_dot(g, xin, fe_emit_param(e, pp, "weight"), 1, &eb, &eb, 1, &lc, &rc); /* (E, B, C, H) */
  if (fe_has_param(e, pp, "bias")) {
    int32_t bd[2] = {0, 3};
    a = ir_add(g, a, fe_emit_bcast(e, fe_emit_param(e, pp, "bias"), a, 2, bd));
  }
  if (gated(node)) {
    snprintf(pp, sizeof pp, "%s/linear1_1", prm);
    up = ir_dot(g, xin, fe_emit_param(e, pp, "weight"), 1, &eb, &eb, 1, &lc, &rc);
    if (fe_has_param(e, pp, "bias")) {
      int32_t bd[2] = {0, 3};
      up = ir_add(g, up, fe_emit_bcast(e, fe_emit_param(e, pp, "bias"), up, 2, bd));
    }
  }
  snprintf(pp, sizeof pp, "%s/linear2", prm);
  int32_t y = ir_dot(g, activate(e, node, a, up), fe_emit_param(e, pp, "weight"), 1, &eb, &eb, 1,
                     &lc, &rc); /* (E, B, C, D) */
  if (fe_has_param(e, pp, "bias")) {
    int32_t bd[2] = {0, 3};
    y = ir_add(g, y, fe_emit_bcast(e, fe_emit_param(e, pp, "bias"), y, 2, bd));
  }
  if (y != IR_NONE) ir_value_set_tag(g, y, "feed_forward.linear2");
  int32_t bd3[3] = {0, 1, 2};
  IrShape ds = disp == IR_NONE ? s : fe_shape(e, disp);
  int32_t comb = ir_mul(g, disp, ir_broadcast(g, w, 4, ds.dims, bd3)); /* (B, T, E, C) */
  int32_t lb = 0, rb = 1, lcs[2] = {2, 3}, rcs[2] = {0, 2};
  return ir_dot(g, fe_emit_compute(e, comb), y, 1, &lb, &rb, 2, lcs, rcs); /* (B, T, D) */
}

/* MoE: outputs weighted by the renormalized top-k router probabilities. With capacity_factor 0
 * every expert runs on every token (dense, nothing dropped); otherwise emit_moe_capacity. */
static int32_t emit_moe(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                        const FeDims *in, int32_t x) {
  (void)cfg, (void)in;
  IrGraph *g = e->g;
  char gp[512];
  snprintf(gp, sizeof gp, "%s/gate", prm);
  int32_t router = ir_matmul(g, x, fe_emit_param(e, gp, "weight")); /* (B, T, E) */
  if (router != IR_NONE) ir_value_set_tag(g, router, "moe.router");
  int32_t probs = fe_emit_softmax(e, router); /* routing in f32: probs, masks, weights */
  int32_t mask = route_mask(e, probs, fe_get_int(node, "top_k"));
  add_balance_loss(e, node, probs, mask);
  int32_t eaxis = 2, lead[2] = {0, 1};
  int32_t w = ir_mul(g, probs, mask);
  w = ir_div(g, w, fe_emit_bcast(e, ir_reduce_sum(g, w, 1, &eaxis), w, 2, lead));
  if (fe_get_float(node, "capacity_factor") > 0)
    return emit_moe_capacity(e, node, prm, x, probs, w);
  int32_t a, up = IR_NONE;
  if (gated(node)) {
    a = expert_in(e, x, prm, "linear1_0", "feed_forward.linear1_0");
    up = expert_in(e, x, prm, "linear1_1", "feed_forward.linear1_1");
  } else {
    a = expert_in(e, x, prm, "linear1", "feed_forward.linear1_0");
  }
  int32_t y = expert_out(e, activate(e, node, a, up), prm); /* (E, B, T, D) */
  int32_t perm[3] = {2, 0, 1}, bd[3] = {0, 1, 2}, ax0 = 0;
  int32_t wt = fe_emit_bcast(e, fe_emit_compute(e, ir_transpose(g, w, perm)), y, 3, bd);
  return ir_reduce_sum(g, ir_mul(g, y, wt), 1, &ax0);
}

const FeKind fe_kind_feed_forward = {
    .name = "feed_forward",
    .doc = "dense MLP (GELU, ReLU or SwiGLU)",
    .fields = ffn_fields,
    .nfields = FE_NFIELDS(ffn_fields),
    .spec_names = "linear1|linear2",
    .build = build_ffn,
    .emit = emit_ffn,
};

const FeKind fe_kind_moe = {
    .name = "moe",
    .doc = "mixture of experts with top-k routing",
    .fields = moe_fields,
    .nfields = FE_NFIELDS(moe_fields),
    .spec_names = "gate|linear1|linear2",
    .build = build_moe,
    .emit = emit_moe,
};
