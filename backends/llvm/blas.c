/* blas.c: dot_general as cblas_sgemm calls, one per batch element.
 *
 * Applies when both operands are f32, the batch dims lead in order on both sides (lhs_batch =
 * rhs_batch = [0, 1, ...]), and each operand's contracting dims are consecutive and sit either
 * right after the batch dims or at the end, so that per batch element the lhs is an (M, K) or
 * (K, M) row-major matrix and the rhs a (K, N) or (N, K) one; the transposed cases use
 * CblasTrans. The result (batch, lhs free, rhs free) is then (M, N) row-major per batch
 * element. Everything else takes the loop nest in reduce.c. The calls run on the calling thread:
 * OpenBLAS has its own threads.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <limits.h>

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 }; /* cblas.h's values */

typedef struct DotLayout {
  int64_t batch, m, n, k;
  bool ta, tb; /* lhs stored (K, M) / rhs stored (N, K) */
} DotLayout;

static int64_t prod(const IrShape *s, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t d = from; d < to; d++) p *= s->dims[d];
  return p;
}

/* One operand: batch dims [0, nb), contracting dims c (consecutive) first or last after them.
 * *trans: contracting dims first. */
static bool side_ok(const IrShape *s, const IrDims *b, const IrDims *c, bool *contract_first) {
  for (int32_t k = 0; k < b->n; k++)
    if (b->v[k] != k) return false;
  for (int32_t k = 1; k < c->n; k++)
    if (c->v[k] != c->v[0] + k) return false;
  int32_t nb = b->n;
  if (c->n == 0) {
    *contract_first = false;
    return true;
  }
  bool last = c->v[c->n - 1] == s->rank - 1, first = c->v[0] == nb;
  *contract_first = !last;
  return last || first;
}

static bool dot_layout(const IrGraph *g, int32_t v, DotLayout *L) {
  const IrValue *x = &g->values[v];
  const IrShape *as = &g->values[x->ops[0]].shape, *bs = &g->values[x->ops[1]].shape;
  if (x->dtype != DT_F32) return false;
  bool a_kfirst, b_kfirst;
  if (!side_ok(as, &x->attr.lb, &x->attr.lc, &a_kfirst)) return false;
  if (!side_ok(bs, &x->attr.rb, &x->attr.rc, &b_kfirst)) return false;
  int32_t nb = x->attr.lb.n;
  L->batch = prod(as, 0, nb);
  L->k = 1;
  for (int32_t k = 0; k < x->attr.lc.n; k++) L->k *= as->dims[x->attr.lc.v[k]];
  L->m = prod(as, nb, as->rank) / (L->k ? L->k : 1);
  L->n = prod(bs, nb, bs->rank) / (L->k ? L->k : 1);
  L->ta = a_kfirst; /* lhs (K, M): transposed */
  L->tb = !b_kfirst && x->attr.rc.n > 0; /* rhs (N, K): transposed */
  return L->k > 0 && L->m < INT_MAX && L->n < INT_MAX && L->k < INT_MAX;
}

bool llvm_dot_blas_ok(const IrGraph *g, int32_t v) {
  DotLayout L;
  return dot_layout(g, v, &L);
}

static LLVMValueRef sgemm_decl(LlvmCtx *C) {
  LLVMTypeRef fp = LLVMPointerType(C->t_f32, 0), i = C->t_i32;
  LLVMTypeRef p[] = {i, i, i, i, i, i, C->t_f32, fp, i, fp, i, C->t_f32, fp, i};
  return llvm_fn_get(C, "cblas_sgemm", C->t_void, p, 14);
}

static LLVMValueRef at(LlvmCtx *C, int32_t v, LLVMValueRef b, int64_t stride) {
  LLVMValueRef off = LLVMBuildNSWMul(C->b, b, llvm_i64(C, stride), "");
  return LLVMBuildInBoundsGEP2(C->b, C->t_f32, llvm_buffer_ptr(C, v), &off, 1, "");
}

static LLVMValueRef i32c(LlvmCtx *C, int64_t v) {
  return LLVMConstInt(C->t_i32, (unsigned long long)v, 0);
}

int llvm_dot_blas_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = &C->g->values[v];
  DotLayout L;
  if (!dot_layout(C->g, v, &L)) return llvm_fail(C, "%%%d (dot_general): not a BLAS layout", v);
  char name[64];
  snprintf(name, sizeof name, "k%d_sgemm", v);
  LLVMValueRef fn = llvm_kernel_begin(C, name);
  LlvmLoop B;
  LLVMValueRef b = llvm_loop_begin(C, &B, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2), "b");
  int64_t lda = L.ta ? L.m : L.k, ldb = L.tb ? L.k : L.n;
  LLVMValueRef args[] = {
      i32c(C, CBLAS_ROW_MAJOR), i32c(C, L.ta ? CBLAS_TRANS : CBLAS_NO_TRANS),
      i32c(C, L.tb ? CBLAS_TRANS : CBLAS_NO_TRANS), i32c(C, L.m), i32c(C, L.n), i32c(C, L.k),
      LLVMConstReal(C->t_f32, 1.0), at(C, x->ops[0], b, L.m * L.k), i32c(C, lda > 1 ? lda : 1),
      at(C, x->ops[1], b, L.k * L.n), i32c(C, ldb > 1 ? ldb : 1), LLVMConstReal(C->t_f32, 0.0),
      at(C, v, b, L.m * L.n), i32c(C, L.n > 1 ? L.n : 1)};
  LLVMValueRef f = sgemm_decl(C);
  LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, args, 14, "");
  llvm_loop_end(C, &B);
  llvm_kernel_end(C);
  llvm_kernel_call(C, fn, L.batch, false);
  return 0;
}
