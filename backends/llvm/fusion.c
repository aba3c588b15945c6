/* fusion.c: a check that the memory plan allows the fusion plan (passes/fusion.c).
 *
 * The memory plan may not know about fusion: it ends an operand's life at the fused value that
 * reads it, while the consumer really reads it later. llvm_fusion_check finds a fused kernel
 * whose inputs a value written in between overwrites (or whose own result overlaps an input it
 * reads at another position) and stores that kernel's fused values after all, which needs the
 * plan to have given them their bytes.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

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
