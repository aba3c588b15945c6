/* fusion.c: which values a code generator computes inside their consumers instead of storing.
 *
 * Both code generators (backends/llvm, backends/opencl) follow this plan, so they plan the same
 * memory (pass_memplan_fused). An elementwise value, broadcast, splat constant or iota whose
 * consumers are all elementwise values of its own shape is computed inside those consumers'
 * loops, at the same position, instead of being stored: elementwise chains, and the broadcasts
 * feeding them, become one loop. Only a single consumer may inline an elementwise value, so
 * nothing is computed twice; the cheap ones are inlined into every consumer: splat constants,
 * iota, and broadcasts, whose element is one load from their (stored) operand. A broadcast that
 * several consumers share would otherwise be stored at its full size and read back by each:
 * AdamW's learning rate and bias corrections, broadcast to every parameter's shape and shared by
 * all the parameters of that shape, cost gpt2-124m six extra passes over its 38.6M-element
 * embedding per step.
 *
 * A light elementwise value (one add, subtract, multiply, negation, max or min) of stored or
 * cheap operands is inlined into every consumer too: recomputing it costs an instruction and
 * the same loads its stored copy would, and saves writing it out. AdamW's clipped gradient
 * (gradient times the clip factor), read by the two moment updates, is one.
 *
 * Parameters, inputs, outputs and every operand of a value that is not elementwise (reductions,
 * matrix products, gathers, ...) keep their buffers: those kernels read their operands at other
 * positions.
 */
#include <stdlib.h>

#include "passes/passes.h"

static bool inlinable(const IrValue *x) {
  if (x->op == IR_CONSTANT) return x->attr.data == NULL;
  return x->op == IR_BROADCAST || x->op == IR_IOTA || (ir_op_flags(x->op) & IR_ELEMENTWISE);
}

static bool cheap(const IrValue *x) {
  return x->op == IR_CONSTANT || x->op == IR_IOTA || x->op == IR_BROADCAST;
}

/* Light: one cheap instruction whose operands are stored (mat, decided: they come first) or
 * cheap. */
static bool light(const IrGraph *g, const IrValue *x, const bool *mat) {
  switch (x->op) {
  case IR_ADD:
  case IR_SUB:
  case IR_MUL:
  case IR_NEG:
  case IR_MAX:
  case IR_MIN: break;
  default: return false;
  }
  for (int32_t k = 0; k < x->nops; k++)
    if (!mat[x->ops[k]] && !cheap(&g->values[x->ops[k]])) return false;
  return true;
}

int pass_fusion_plan(const IrGraph *g, bool *mat) {
  if (!g || !mat) return -1;
  int32_t n = g->nvalues;
  int32_t *uses = calloc((size_t)n + 1, sizeof *uses);
  bool *ok = malloc((size_t)n + 1);
  if (!uses || !ok) {
    free(uses);
    free(ok);
    return -1;
  }
  for (int32_t v = 0; v < n; v++) ok[v] = inlinable(&g->values[v]);
  for (int32_t u = 0; u < n; u++) {
    const IrValue *x = &g->values[u];
    bool elementwise = ir_op_flags(x->op) & IR_ELEMENTWISE;
    for (int32_t k = 0; k < x->nops; k++) {
      int32_t o = x->ops[k];
      uses[o]++;
      if (!elementwise || !ir_shape_eq(&g->values[o].shape, &x->shape)) ok[o] = false;
    }
  }
  for (int32_t i = 0; i < g->noutputs; i++) ok[g->outputs[i].value] = false;
  for (int32_t v = 0; v < n; v++) { /* in index order: operands are decided first */
    const IrValue *x = &g->values[v];
    bool any = cheap(x) || light(g, x, mat);
    mat[v] = !(ok[v] && uses[v] >= 1 && (uses[v] == 1 || any));
  }
  free(uses);
  free(ok);
  return 0;
}
