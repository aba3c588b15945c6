/* fusion.c: which values get a buffer, and a check that the memory plan allows the rest.
 *
 * An elementwise value, broadcast, splat constant or iota whose consumers are all elementwise
 * values of its own shape is computed inside those consumers' loops (its element at the same
 * position) instead of being stored: elementwise chains, and the broadcasts feeding them, become
 * one loop. Only a single consumer may inline a value, except the cheap ones (splat constants,
 * iota), so nothing is computed twice.
 *
 * The memory plan may not know about fusion: it ends an operand's life at the fused value that
 * reads it, while the consumer really reads it later. llvm_fusion_check finds a fused kernel
 * whose inputs a value written in between overwrites (or whose own result overlaps an input it
 * reads at another position) and stores that kernel's fused values after all, which needs the
 * plan to have given them their bytes.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <stdlib.h>

static bool inlinable(const IrValue *x) {
  if (x->op == IR_CONSTANT) return x->attr.data == NULL;
  return x->op == IR_BROADCAST || x->op == IR_IOTA || (ir_op_flags(x->op) & IR_ELEMENTWISE);
}

int llvm_fusion_plan(const IrGraph *g, bool *mat) {
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
    const IrValue *x = &g->values[v];
    bool cheap = x->op == IR_CONSTANT || x->op == IR_IOTA;
    mat[v] = !(ok[v] && uses[v] >= 1 && (uses[v] == 1 || cheap));
  }
  free(uses);
  free(ok);
  return 0;
}

/* ---- the check against the plan ---- */

static bool overlap(const MemPlan *mp, int32_t a, int32_t b) {
  if (mp->bytes[a] == 0 || mp->bytes[b] == 0) return false;
  return mp->offset[a] < mp->offset[b] + mp->bytes[b] &&
         mp->offset[b] < mp->offset[a] + mp->bytes[a];
}

/* Whether a buffer leaf L read by root r's kernel stays intact until r, and r's result does not
 * clobber it (same_pos: L is read at r's own position, so an exact in-place alias is fine). */
static bool leaf_safe(const LlvmCtx *C, int32_t L, int32_t r, bool same_pos) {
  const MemPlan *mp = C->mp;
  for (int32_t w = L + 1; w < r; w++)
    if (C->mat[w] && overlap(mp, w, L)) return false;
  if (!overlap(mp, r, L)) return true;
  return same_pos && mp->offset[r] == mp->offset[L] && mp->bytes[r] == mp->bytes[L];
}

/* Walks the fused part of r's tree; false if a leaf is unsafe. *fused: it has fused values. */
static bool tree_safe(const LlvmCtx *C, int32_t r, int32_t v, bool same_pos, bool *fused) {
  const IrValue *x = &C->g->values[v];
  bool elementwise = ir_op_flags(x->op) & IR_ELEMENTWISE, safe = true;
  for (int32_t k = 0; k < x->nops; k++) {
    int32_t o = x->ops[k];
    bool sp = same_pos && elementwise;
    if (C->mat[o]) {
      safe = leaf_safe(C, o, r, sp) && safe;
    } else {
      *fused = true;
      safe = tree_safe(C, r, o, sp, fused) && safe;
    }
  }
  return safe;
}

static int materialize_tree(LlvmCtx *C, int32_t v) {
  const IrValue *x = &C->g->values[v];
  for (int32_t k = 0; k < x->nops; k++) {
    int32_t o = x->ops[k];
    if (C->mat[o]) continue;
    int64_t need =
        ir_shape_numel(&C->g->values[o].shape) * (int64_t)ir_dtype_size(C->g->values[o].dtype);
    if (C->mp->bytes[o] < need)
      return llvm_fail(C,
                       "%%%d (%s): fused into %%%d, but the memory plan lets its inputs be "
                       "overwritten first and gives it no buffer",
                       o, ir_op_name(C->g->values[o].op), v);
    C->mat[o] = true;
    if (materialize_tree(C, o)) return -1;
  }
  return 0;
}

/* Materializing a kernel's fused values adds writes that can break kernels checked before it,
 * so the check repeats until nothing changes (values only ever become materialized). */
int llvm_fusion_check(LlvmCtx *C) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (int32_t r = 0; r < C->g->nvalues; r++) {
      if (!C->mat[r]) continue;
      bool fused = false;
      bool same = ir_op_flags(C->g->values[r].op) & IR_ELEMENTWISE;
      if (tree_safe(C, r, r, same, &fused) || !fused) continue;
      if (materialize_tree(C, r)) return -1;
      changed = true;
    }
  }
  return 0;
}
