/* fusion.c: a check that the memory plan allows the fusion plan (passes/fusion.c).
 *
 * The memory plan may not know about fusion: it ends an operand's life at the fused value that
 * reads it, while the consumer really reads it later. llvm_fusion_check finds a fused kernel
 * whose inputs a value written in between overwrites (or whose own result overlaps an input it
 * reads at another position) and stores that kernel's fused values after all, which needs the
 * plan to have given them their bytes.
 *
 * llvm_fusion_defer then lets one kernel store several values. A stored elementwise value
 * whose only reader is an elementwise value of its shape (inlined or not) is an output that
 * nothing else reads: AdamW's new moments, each read once by the parameter update. Instead of a
 * kernel of its own, the kernel that computes that reader computes it at the same position and
 * stores it there too, so the update reads gradient, moments and parameter once and writes the
 * three in one pass (13 passes over gpt2-124m's parameters per step become 10 with it). The
 * value is then written later than its index, and its inputs read later: the same check as
 * above says whether the plan keeps them intact until then; where it does not, the value keeps
 * its kernel.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <stdlib.h>

/* ---- the check against the plan ---- */

static bool overlap(const MemPlan *mp, int32_t a, int32_t b) {
  if (mp->bytes[a] == 0 || mp->bytes[b] == 0 || pass_memplan_apart(mp, a, b)) return false;
  return mp->offset[a] < mp->offset[b] + mp->bytes[b] &&
         mp->offset[b] < mp->offset[a] + mp->bytes[a];
}

/* Whether result w, written at the position where L is read, leaves L intact for the read
 * (same_pos: an exact in-place alias is fine). */
static bool result_safe(const MemPlan *mp, int32_t w, int32_t L, bool same_pos) {
  if (!overlap(mp, w, L)) return true;
  return same_pos && mp->offset[w] == mp->offset[L] && mp->bytes[w] == mp->bytes[L];
}

/* Whether a buffer leaf L read by root r's kernel stays intact until r, and r's result does not
 * clobber it (same_pos: L is read at r's own position). also: a value that r's kernel stores
 * with its own (a deferred one), or -1. */
static bool leaf_safe(const LlvmCtx *C, int32_t L, int32_t r, int32_t also, bool same_pos) {
  const MemPlan *mp = C->mp;
  for (int32_t w = L + 1; w < r; w++)
    if (C->mat[w] && (w == also ? !result_safe(mp, w, L, same_pos) : overlap(mp, w, L)))
      return false;
  return result_safe(mp, r, L, same_pos);
}

/* Walks the fused part of v's tree, computed in r's kernel; false if a leaf is unsafe.
 * *fused: it has fused values. */
static bool tree_safe(const LlvmCtx *C, int32_t r, int32_t also, int32_t v, bool same_pos,
                      bool *fused) {
  const IrValue *x = &C->g->values[v];
  bool elementwise = ir_op_flags(x->op) & IR_ELEMENTWISE, safe = true;
  for (int32_t k = 0; k < x->nops; k++) {
    int32_t o = x->ops[k];
    bool sp = same_pos && elementwise;
    if (C->mat[o]) {
      safe = leaf_safe(C, o, r, also, sp) && safe;
    } else {
      *fused = true;
      safe = tree_safe(C, r, also, o, sp, fused) && safe;
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
      if (tree_safe(C, r, -1, r, same, &fused) || !fused) continue;
      if (materialize_tree(C, r)) return -1;
      changed = true;
    }
  }
  return 0;
}

/* ---- kernels that store more than their own value ---- */

static bool elementwise(const IrValue *x) { return ir_op_flags(x->op) & IR_ELEMENTWISE; }

/* The stored value whose kernel computes u's one reader, or -1: u's reader chain, one reader
 * per value and each elementwise of u's shape, up to the first stored value. */
static int32_t defer_host(const LlvmCtx *C, const int32_t *uses, const int32_t *reader, int32_t u) {
  const IrGraph *g = C->g;
  int32_t c = u;
  do {
    if (uses[c] != 1) return -1;
    c = reader[c];
    const IrValue *x = &g->values[c];
    if (!elementwise(x) || !ir_shape_eq(&x->shape, &g->values[u].shape)) return -1;
  } while (!C->mat[c]);
  return C->coll[c] < 0 ? c : -1;
}

/* Whether writing u at r instead of at u (and reading its inputs there) is safe: every stored
 * input of u's computation stays intact until r, as for a fused value, and u's own result
 * (now written at r's position) overwrites none but an exact in-place alias. tree_safe looks
 * at every stored value between the input and r whatever kernel writes it, so the values
 * deferred before u are covered too. */
static bool defer_safe(const LlvmCtx *C, int32_t u, int32_t r) {
  bool fused = false;
  return tree_safe(C, r, u, u, true, &fused);
}

int llvm_fusion_defer(LlvmCtx *C) {
  const IrGraph *g = C->g;
  int32_t n = g->nvalues;
  int32_t *uses = base_xcalloc((size_t)n + 1, sizeof *uses);
  int32_t *reader = base_xmalloc(((size_t)n + 1) * sizeof *reader), *hosted = C->hosted;
  for (int32_t v = 0; v < n; v++) {
    C->defer[v] = -1;
    hosted[v] = 0;
    for (int32_t k = 0; k < g->values[v].nops; k++) {
      uses[g->values[v].ops[k]]++;
      reader[g->values[v].ops[k]] = v;
    }
  }
  for (int32_t u = 0; u < n; u++) {
    const IrValue *x = &g->values[u];
    if (!C->mat[u] || !elementwise(x) || C->coll[u] >= 0 || hosted[u]) continue;
    int32_t r = defer_host(C, uses, reader, u);
    /* a pipeline's stages run their own kernels: u stays where its stage runs it */
    if (r < 0 || g->values[r].stage != x->stage || hosted[r] >= LLVM_MAX_DEFERRED ||
        !defer_safe(C, u, r))
      continue;
    C->defer[u] = r; /* r, itself not deferred: it hosts u (hosted[r] > 0) */
    hosted[r]++;
  }
  free(uses);
  free(reader);
  return 0;
}
