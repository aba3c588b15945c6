/* blas.c: dot_general as cblas_sgemm calls, one per batch element.
 *
 * Applies when both operands are f32, the batch dims lead in order on both sides (lhs_batch =
 * rhs_batch = [0, 1, ...]), and each operand's contracting dims are consecutive and sit either
 * right after the batch dims or at the end, so that per batch element the lhs is an (M, K) or
 * (K, M) row-major matrix and the rhs a (K, N) or (N, K) one; the transposed cases use
 * CblasTrans. The result (batch, lhs free, rhs free) is then (M, N) row-major per batch
 * element. Everything else takes the loop nest in reduce.c. The products go to the runtime's
 * rt_sgemm, which splits them over the pool (OpenBLAS runs single-threaded in a trainer).
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <limits.h>

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
  L->ta = a_kfirst;                      /* lhs (K, M): transposed */
  L->tb = !b_kfirst && x->attr.rc.n > 0; /* rhs (N, K): transposed */
  return L->k > 0 && L->m < INT_MAX && L->n < INT_MAX && L->k < INT_MAX;
}

bool llvm_dot_blas_ok(const IrGraph *g, int32_t v) {
  DotLayout L;
  return dot_layout(g, v, &L);
}

/* void rt_sgemm(RtPool*, i64 batch, i32 ta, i32 tb, i64 m, n, k, float *a, i64 lda, i64 sa,
 *               float *b, i64 ldb, i64 sb, float *c, i64 ldc, i64 sc) */
static LLVMValueRef sgemm_decl(LlvmCtx *C) {
  LLVMTypeRef fp = LLVMPointerType(C->t_f32, 0), l = C->t_i64, i = C->t_i32;
  LLVMTypeRef p[] = {C->t_i8p, l, i, i, l, l, l, fp, l, l, fp, l, l, fp, l, l};
  return llvm_fn_get(C, "rt_sgemm", C->t_void, p, 16);
}

static LLVMValueRef i32c(LlvmCtx *C, int64_t v) {
  return LLVMConstInt(C->t_i32, (unsigned long long)v, 0);
}

static LLVMValueRef buf(LlvmCtx *C, int32_t v) {
  return LLVMBuildBitCast(C->b, llvm_buffer_ptr(C, v), LLVMPointerType(C->t_f32, 0), "");
}

/* One call from axlc_step: rt_sgemm splits the products over the pool. */
int llvm_dot_blas_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = &C->g->values[v];
  DotLayout L;
  if (!dot_layout(C->g, v, &L)) return llvm_fail(C, "%%%d (dot_general): not a BLAS layout", v);
  int64_t lda = L.ta ? L.m : L.k, ldb = L.tb ? L.k : L.n;
  LLVMValueRef pool = LLVMBuildBitCast(C->b, C->pool, C->t_i8p, "");
  LLVMValueRef args[] = {pool,
                         llvm_i64(C, L.batch),
                         i32c(C, L.ta),
                         i32c(C, L.tb),
                         llvm_i64(C, L.m),
                         llvm_i64(C, L.n),
                         llvm_i64(C, L.k),
                         buf(C, x->ops[0]),
                         llvm_i64(C, lda > 1 ? lda : 1),
                         llvm_i64(C, L.m * L.k),
                         buf(C, x->ops[1]),
                         llvm_i64(C, ldb > 1 ? ldb : 1),
                         llvm_i64(C, L.k * L.n),
                         buf(C, v),
                         llvm_i64(C, L.n > 1 ? L.n : 1),
                         llvm_i64(C, L.m * L.n)};
  LLVMValueRef f = sgemm_decl(C);
  LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, args, 16, "");
  return 0;
}
