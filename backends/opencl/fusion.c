/* fusion.c: which values get a buffer and a kernel of their own.
 *
 * The rule is the LLVM backend's (backends/llvm/fusion.c), so both backends plan the same
 * memory: an elementwise value, broadcast, splat constant or iota whose consumers are all
 * elementwise values of its own shape is computed inside its consumer's kernel, at the same
 * position. Only one consumer may inline a value, except the cheap ones (splat constants, iota),
 * so nothing is computed twice. Parameters, inputs, outputs and every operand of a value that is
 * not elementwise (reductions, matrix products, gathers, ...) keep their buffers: those kernels
 * read their operands at other positions. pass_memplan_fused keeps the operands of an inlined
 * value live until its consumer runs.
 */
#include <stdlib.h>

#include "backends/opencl/opencl.h"

static bool inlinable(const IrValue *x) {
  if (x->op == IR_CONSTANT) return x->attr.data == NULL;
  return x->op == IR_BROADCAST || x->op == IR_IOTA || (ir_op_flags(x->op) & IR_ELEMENTWISE);
}

int ocl_fusion_plan(const IrGraph *g, bool *mat) {
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
  for (int32_t v = 0; v < n; v++) {
    bool cheap = g->values[v].op == IR_CONSTANT || g->values[v].op == IR_IOTA;
    mat[v] = !(ok[v] && uses[v] >= 1 && (uses[v] == 1 || cheap));
  }
  free(uses);
  free(ok);
  return 0;
}
