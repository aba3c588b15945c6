/*
 * precision.c: gradients of the f32 masters keep their f32 accumulators (pass_widen_grads).
 *
 * Under a bf16 compute policy the forward reads each parameter P as cast(P, bf16), and
 * autodiff's cast rule hands P's gradient back as cast(g, f32) of a bf16 cotangent g. Left
 * so, every weight gradient is rounded to bf16 once before it reaches the f32 optimizer,
 * and the gradient all-reduce that pass_shard places on the product moves bf16 partial
 * sums. This pass moves such a widening cast into what computes the cotangent, where that
 * value is read by nothing else:
 *   cast(dot_general(a, b), f32)     -> dot_general(a, b) with an f32 result (the accumulator)
 *   cast(transpose/reshape(x), f32)  -> transpose/reshape(cast(x, f32)), and on into x
 *   cast(add(x, y), f32)             -> add(cast(x, f32), cast(y, f32)), and on into both
 *   cast(reduce_sum(x), f32)         -> reduce_sum(cast(x, f32))   (bias and norm gradients)
 *   cast(pad / scatter_add(.., x))   -> pad / scatter_add(.., cast(x, f32))   (embeddings)
 * so the weight gradient comes out of its product or sum in f32, its partial sums are reduced
 * across devices in f32 (AXLearn's default), and the gradients of a tied parameter are added
 * in f32.
 * The result is closer to the exact gradient, never further: it drops roundings, adds none.
 * A value with another reader keeps its bf16 form for that reader. With the policy's
 * `grads: bf16` the driver does not run this pass.
 */
#include <stdlib.h>

#include "passes/passes.h"

typedef struct {
  const IrGraph *g;
  IrGraph *ng;
  int32_t *map;  /* old value -> new value */
  int32_t *uses; /* readers of each old value (operands and outputs) */
  int changes;
} Widen;

static bool low(IrDType dt) { return dt == DT_BF16 || dt == DT_F16; }

/* Whether old value x (bf16, read once) can give its f32 form directly. */
static bool widenable(const Widen *w, int32_t x) {
  const IrValue *v = &w->g->values[x];
  if (!low(v->dtype) || w->uses[x] != 1) return false;
  switch (v->op) {
  case IR_DOT:
  case IR_TRANSPOSE:
  case IR_RESHAPE:
  case IR_PAD:
  case IR_ADD:
  case IR_REDUCE_SUM:
  case IR_SCATTER_ADD: return true;
  default: return false;
  }
}

static int32_t widen(Widen *w, int32_t x);

/* The f32 form of old value x in the new graph: its own widening, or a cast of its copy. */
static int32_t as_f32(Widen *w, int32_t x) {
  if (widenable(w, x)) return widen(w, x);
  if (w->g->values[x].dtype == DT_F32) return w->map[x];
  int32_t c = ir_cast(w->ng, w->map[x], DT_F32);
  if (c != IR_NONE) ir_value_set_origin(w->ng, c, w->g->values[x].origin);
  return c;
}

static int32_t widen(Widen *w, int32_t x) {
  IrValue v = w->g->values[x]; /* a copy, given new operands and an f32 result */
  int32_t ops[2];
  for (int32_t k = 0; k < v.nops; k++) /* a dot keeps its operands; the others go f32 */
    ops[k] = v.op != IR_DOT && low(w->g->values[v.ops[k]].dtype) ? as_f32(w, v.ops[k])
                                                                 : w->map[v.ops[k]];
  v.ops = ops;
  v.dtype = DT_F32;
  w->changes++;
  return ir_graph_add(w->ng, &v);
}

int pass_widen_grads(IrGraph *g, const PassOptions *opt) {
  if (opt && opt->bf16_grads) return IR_OK;
  Widen w = {g, ir_graph_new(), base_xmalloc(((size_t)g->nvalues + 1) * sizeof(int32_t)),
             base_xcalloc((size_t)g->nvalues + 1, sizeof(int32_t)), 0};
  for (int32_t i = 0; i < g->nvalues; i++)
    for (int32_t k = 0; k < g->values[i].nops; k++) w.uses[g->values[i].ops[k]]++;
  for (int32_t k = 0; k < g->noutputs; k++) w.uses[g->outputs[k].value]++;
  w.ng->mesh = g->mesh;
  w.ng->matmul = g->matmul;
  ir_graph_reserve(w.ng, g->nvalues);
  int st = IR_OK;
  for (int32_t i = 0; i < g->nvalues && st == IR_OK; i++) {
    const IrValue *v = &g->values[i];
    bool widening = v->op == IR_CAST && v->dtype == DT_F32 && widenable(&w, v->ops[0]);
    /* the operand's bf16 copy made above is dead now; simplify's dead-code pass drops it */
    w.map[i] = widening ? widen(&w, v->ops[0]) : ir_graph_add_mapped(w.ng, g, i, w.map);
    if (w.map[i] == IR_NONE)
      st = ir_graph_fail(g, "widen_grads: rebuilding %%%d: %s", i,
                         ir_graph_error(w.ng) ? ir_graph_error(w.ng) : "?");
  }
  for (int32_t k = 0; k < g->noutputs && st == IR_OK; k++)
    st = ir_graph_add_output(w.ng, g->outputs[k].name, w.map[g->outputs[k].value]);
  if (st == IR_OK && w.changes) ir_graph_replace(g, w.ng);
  ir_graph_free(w.ng);
  free(w.map);
  free(w.uses);
  return st;
}
