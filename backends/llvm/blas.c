/* blas.c: dot_general as cblas_sgemm calls, one per batch element, and the fused attention ops
 * as calls of the runtime's attention kernels (runtime/attention.c).
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

/* The layout rule is ir_dot_sgemm's (ir/shape.c), which the pass folding transposes into dots
 * (passes/simplify.c) shares. */
static bool dot_layout(const IrGraph *g, int32_t v, IrGemm *L) {
  const IrValue *x = &g->values[v];
  return ir_dot_sgemm(x->dtype, &g->values[x->ops[0]].shape, &g->values[x->ops[1]].shape, &x->attr,
                      L);
}

bool llvm_dot_blas_ok(const IrGraph *g, int32_t v) {
  IrGemm L;
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
  IrGemm L;
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

/* void rt_attention(RtPool*, i64 bn, i64 t, i64 h, i32 causal, float scale, float *q, *k, *v,
 *                   float *out)
 * void rt_attention_grad(..., float *q, *k, *v, *dout, float *dqkv) */
int llvm_attention_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = &C->g->values[v];
  const IrShape *q = &C->g->values[x->ops[0]].shape;
  int64_t t = q->dims[q->rank - 2], h = q->dims[q->rank - 1];
  int64_t bn = t > 0 && h > 0 ? ir_shape_numel(q) / (t * h) : 0;
  bool grad = x->op == IR_ATTENTION_GRAD;
  LLVMTypeRef fp = LLVMPointerType(C->t_f32, 0), l = C->t_i64;
  LLVMTypeRef p[] = {C->t_i8p, l, l, l, C->t_i32, C->t_f32, fp, fp, fp, fp, fp};
  LLVMValueRef args[11] = {LLVMBuildBitCast(C->b, C->pool, C->t_i8p, ""),
                           llvm_i64(C, bn),
                           llvm_i64(C, t),
                           llvm_i64(C, h),
                           i32c(C, x->attr.k != 0),
                           LLVMConstReal(C->t_f32, x->attr.value)};
  int n = 6;
  for (int32_t k = 0; k < x->nops; k++) args[n++] = buf(C, x->ops[k]);
  args[n++] = buf(C, v);
  LLVMValueRef f = llvm_fn_get(C, grad ? "rt_attention_grad" : "rt_attention", C->t_void, p, n);
  LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, args, (unsigned)n, "");
  return 0;
}
