/*
 * decoder.c: a stack of num_layers copies of one layer config, then the
 * output norm. Each copy gets its own parameters (layer_0, layer_1, ...);
 * the config, and so any error in it, is shared, so the walk stops at the
 * first copy that fails instead of repeating the same message per layer.
 */
#include <stdio.h>

#include "frontend/frontend.h"

static const FeField fields[] = {
    F_INT("num_layers", NULL, FE_RANGE(1, 4096), "number of layers"),
    F_CHILD("layer", NULL, "transformer_layer", "the layer config repeated num_layers times"),
    F_CHILD("output_norm", NULL, "layer_norm|rms_norm", "norm after the last layer"),
    F_TYPED("remat_policy", FT_REMAT, "\"none\"", "rematerialization policy for every layer"),
};

static int build(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                 const FeDims *in) {
  char lcfg[512], lprm[512], name[32];
  fe_path_join(lcfg, sizeof lcfg, cfg, "layer");
  json_object *layer = fe_get_child(node, "layer");
  int64_t n = fe_get_int(node, "num_layers");
  for (int64_t i = 0; i < n; i++) {
    snprintf(name, sizeof name, "layer_%lld", (long long)i);
    snprintf(lprm, sizeof lprm, "%s/%s", prm, name);
    if (fe_build_node(b, layer, lcfg, lprm, in)) return -1;
  }
  return fe_build_child(b, node, "output_norm", cfg, prm, in);
}

static int32_t emit(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                    const FeDims *in, int32_t x) {
  char lcfg[512], lprm[512];
  fe_path_join(lcfg, sizeof lcfg, cfg, "layer");
  json_object *layer = fe_get_child(node, "layer");
  int64_t n = fe_get_int(node, "num_layers");
  for (int64_t i = 0; i < n && x != IR_NONE; i++) {
    snprintf(lprm, sizeof lprm, "%s/layer_%lld", prm, (long long)i);
    x = fe_emit_node(e, layer, lcfg, lprm, in, x);
  }
  return fe_emit_child(e, node, "output_norm", cfg, prm, in, x);
}

const FeKind fe_kind_decoder = {
    .name = "decoder",
    .doc = "stack of transformer layers",
    .fields = fields,
    .nfields = FE_NFIELDS(fields),
    .build = build,
    .emit = emit,
};
