/*
 * norm.c: LayerNorm (scale and optional bias) and RMSNorm (scale only) over
 * the last dimension. Their parameters are exempt from weight decay.
 */
#include "frontend/frontend.h"

static const FeField ln_fields[] = {
    F_FLOAT("eps", "1e-5", FE_ATLEAST(0), "added to the variance"),
    F_BOOL("bias", "true", "learn a bias"),
};

static int build_ln(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                    const FeDims *in) {
  int64_t shape[1] = {in->dim}; /* (D,) */
  int rc = fe_param(b, node, cfg, prm, "scale", 1, shape, "ones", 0, NULL, NULL, 0.0, in);
  if (rc == 0 && fe_get_bool(node, "bias"))
    rc = fe_param(b, node, cfg, prm, "bias", 1, shape, "zeros", 0, NULL, NULL, 0.0, in);
  return rc;
}

static const FeField rms_fields[] = {
    F_FLOAT("eps", "1e-5", FE_ATLEAST(0), "added to the mean square"),
};

static int build_rms(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                     const FeDims *in) {
  int64_t shape[1] = {in->dim}; /* (D,) */
  return fe_param(b, node, cfg, prm, "scale", 1, shape, "ones", 0, NULL, NULL, 0.0, in);
}

/* x (B, T, D) -> (B, T, D) normalized over D, times scale (D,), plus bias. */
static int32_t emit_norm(FeEmit *e, json_object *node, const char *prm, int32_t x, bool center) {
  x = fe_emit_f32(e, x); /* mean and variance in f32; the normalized x goes back */
  if (x == IR_NONE) return IR_NONE;
  IrGraph *g = e->g;
  IrShape s = fe_shape(e, x);
  int32_t last = s.rank - 1, lead[IR_MAX_RANK];
  for (int i = 0; i < last; i++) lead[i] = i;
  double inv_d = 1.0 / (double)s.dims[last];
  int32_t xc = x;
  if (center) {
    int32_t mean =
        ir_mul(g, ir_reduce_sum(g, x, 1, &last), ir_const_scalar(g, DT_F32, inv_d, last, s.dims));
    xc = ir_sub(g, x, fe_emit_bcast(e, mean, x, last, lead));
  }
  int32_t var = ir_mul(g, ir_reduce_sum(g, ir_mul(g, xc, xc), 1, &last),
                       ir_const_scalar(g, DT_F32, inv_d, last, s.dims));
  int32_t eps = ir_const_scalar(g, DT_F32, fe_get_float(node, "eps"), last, s.dims);
  int32_t y = ir_mul(g, xc, fe_emit_bcast(e, ir_rsqrt(g, ir_add(g, var, eps)), x, last, lead));
  y = fe_emit_compute(e, y);
  y = ir_mul(g, y, fe_emit_bcast(e, fe_emit_param(e, prm, "scale"), x, 1, NULL));
  if (fe_has_param(e, prm, "bias"))
    y = ir_add(g, y, fe_emit_bcast(e, fe_emit_param(e, prm, "bias"), x, 1, NULL));
  return y;
}

static int32_t emit_ln(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                       const FeDims *in, int32_t x) {
  (void)cfg, (void)in;
  return emit_norm(e, node, prm, x, true);
}

static int32_t emit_rms(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                        const FeDims *in, int32_t x) {
  (void)cfg, (void)in;
  return emit_norm(e, node, prm, x, false);
}

const FeKind fe_kind_layer_norm = {
    .name = "layer_norm",
    .doc = "layer normalization",
    .fields = ln_fields,
    .nfields = FE_NFIELDS(ln_fields),
    .build = build_ln,
    .emit = emit_ln,
};

const FeKind fe_kind_rms_norm = {
    .name = "rms_norm",
    .doc = "RMS normalization",
    .fields = rms_fields,
    .nfields = FE_NFIELDS(rms_fields),
    .build = build_rms,
    .emit = emit_rms,
};
