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

const FeKind fe_kind_layer_norm = {"layer_norm", "layer normalization", ln_fields,
                                   FE_NFIELDS(ln_fields), NULL, build_ln};

static const FeField rms_fields[] = {
    F_FLOAT("eps", "1e-5", FE_ATLEAST(0), "added to the mean square"),
};

static int build_rms(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                     const FeDims *in) {
  int64_t shape[1] = {in->dim}; /* (D,) */
  return fe_param(b, node, cfg, prm, "scale", 1, shape, "ones", 0, NULL, NULL, 0.0, in);
}

const FeKind fe_kind_rms_norm = {"rms_norm", "RMS normalization", rms_fields,
                                 FE_NFIELDS(rms_fields), NULL, build_rms};
