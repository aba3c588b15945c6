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

#define HIDDEN_FIELDS                                                                   \
  F_INT("hidden_dim", "0", FE_RANGE(0, 1 << 24), "hidden size; 0 means hidden_dim_scale * dim"), \
  F_FLOAT("hidden_dim_scale", "4.0", FE_RANGE(0, 1024), "hidden size as a multiple of dim"),  \
  F_INT("hidden_dim_multiple_of", "1", FE_RANGE(1, 65536), "round the scaled hidden size up"), \
  F_ENUM("activation", "\"gelu\"", "gelu|relu|swiglu", "activation; swiglu is gated"),    \
  F_BOOL("bias", "false", "learn biases"),                                                \
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
    return fe_field_error(b, node, cfg, "hidden_dim_scale", "hidden size %lld (expected "
                    "hidden_dim or hidden_dim_scale * dim from 1 to %d)", (long long)*h, 1 << 24);
  }
  return 0;
}

/* One linear layer `name` of shape (lead?, rows, cols) with optional bias. */
static int linear(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                  const char *name, const char *spec, int64_t lead, int64_t rows,
                  int64_t cols, const FeDims *in) {
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

/* The MLP's matrices; `experts` is 0 for a dense MLP. */
static int mlp(FeBuild *b, json_object *node, const char *cfg, const char *prm,
               int64_t experts, const FeDims *in) {
  int64_t h;
  if (hidden_size(b, node, cfg, in, &h)) return -1;
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

const FeKind fe_kind_feed_forward = {"feed_forward", "dense MLP (GELU, ReLU or SwiGLU)",
                                     ffn_fields, FE_NFIELDS(ffn_fields), "linear1|linear2",
                                     build_ffn};

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
    return fe_field_error(b, node, cfg, "top_k", "top_k %lld exceeds num_experts %lld (expected 1 to %lld)",
                    (long long)k, (long long)e, (long long)e);
  }
  char pp[512];
  snprintf(pp, sizeof pp, "%s/gate", prm);
  int64_t g[2] = {in->dim, e}; /* (D, E) */
  if (fe_param(b, node, cfg, pp, "weight", 2, g, "normal", fe_get_float(node, "init_std"), "gate",
               NULL, 1.0, in))
    return -1;
  return mlp(b, node, cfg, prm, e, in);
}

const FeKind fe_kind_moe = {"moe", "mixture of experts with top-k routing", moe_fields,
                            FE_NFIELDS(moe_fields), "gate|linear1|linear2", build_moe};
