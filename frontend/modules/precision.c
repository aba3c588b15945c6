/*
 * precision.c: the mixed-precision policy of a training job, `/precision`.
 *
 *   {"kind": "precision_policy", "params": "f32", "compute": "bf16", "grads": "f32",
 *    "optimizer": "f32"}
 *
 * Parameters are the f32 master copy, and the optimizer state is f32: the update is applied
 * to the masters, never to a rounded copy. `compute` is the dtype of the activations and of
 * the matrix products' operands: the forward reads each parameter cast to it (compose.c),
 * and autodiff's cast rule brings the parameters' gradients back to f32. The reductions of
 * softmax, norms, cross-entropy and attention accumulate in f32 whatever `compute` says
 * (the modules cast around them). `grads` is the dtype gradients are reduced in across
 * devices: f32 keeps each weight gradient's f32 accumulator through the all-reduce; bf16
 * rounds it first, halving the traffic.
 *
 * `matmul` is PyTorch's float32 matmul precision: tf32 lets f32 products round their operands to
 * TF32 (10 mantissa bits) and run on NVIDIA's tensor cores. It is a fact of the step graph
 * (IrGraph.matmul), so the interpreter rounds the same way and stays the oracle. The GPU mesh
 * rules set it; the CPU backend refuses it (it has no TF32 arithmetic to gain from).
 *
 * `compute: auto` is for mesh rules: bf16 where the target multiplies bf16 faster than f32
 * (a CPU with AMX-BF16: driver/precision.c), else f32. The precision modifier never lets auto
 * replace a dtype the config chose. fe_resolve settles it (FeOptions.bf16_dot), so the
 * canonical tree, `axlc config` and everything after see f32 or bf16.
 */
#include <string.h>

#include "frontend/frontend.h"

static const FeField fields[] = {
    F_ENUM("params", "\"f32\"", "f32",
           "dtype of the parameters (the master copy the update writes)"),
    F_ENUM("compute", "\"f32\"", "f32|bf16|auto",
           "dtype of activations and matrix-product operands; auto: bf16 where the target has "
           "bf16 dot instructions"),
    F_ENUM("grads", "\"f32\"", "f32|bf16", "dtype gradients are reduced across devices in"),
    F_ENUM("optimizer", "\"f32\"", "f32", "dtype of the optimizer state"),
    F_ENUM("matmul", "\"f32\"", "f32|tf32",
           "f32 matrix products: f32 operands, or tf32 (operands rounded to TF32, NVIDIA's "
           "tensor cores; the GPU rules' choice)"),
};

const FeKind fe_kind_precision_policy = {
    .name = "precision_policy",
    .doc = "mixed-precision policy",
    .fields = fields,
    .nfields = FE_NFIELDS(fields),
};

static IrDType dtype_of(json_object *policy, const char *field) {
  return strcmp(fe_get_str(policy, field), "bf16") == 0 ? DT_BF16 : DT_F32;
}

void fe_precision_facts(json_object *cfg, FePrecision *p) {
  json_object *policy = fe_get_child(cfg, "precision");
  p->params = dtype_of(policy, "params");
  p->compute = dtype_of(policy, "compute");
  p->grads = dtype_of(policy, "grads");
  p->optimizer = dtype_of(policy, "optimizer");
  p->matmul = strcmp(fe_get_str(policy, "matmul"), "tf32") == 0 ? IR_MATMUL_TF32 : IR_MATMUL_F32;
}

int fe_precision_settle(FeDiag *d, json_object *cfg, bool bf16_dot, const char *why) {
  json_object *policy = fe_get_child(cfg, "precision");
  if (!policy || strcmp(fe_get_str(policy, "compute"), "auto") != 0) return 0;
  json_object_object_add(policy, "compute", json_object_new_string(bf16_dot ? "bf16" : "f32"));
  fe_set_origin_key(d, policy, "compute", why ? why : "compute: auto");
  return 0;
}
