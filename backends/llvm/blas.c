/* blas.c: dot_general as cblas_sgemm calls, one per batch element, and the fused attention ops
 * as calls of the runtime's attention kernels (runtime/attention.c).
 *
 * Applies when both operands are f32 (rt_sgemm) or bf16 (rt_sbgemm, f32 accumulation, the
 * result f32 or bf16 as the value's dtype says), the batch dims lead in order on both sides
 * (lhs_batch = rhs_batch = [0, 1, ...]), and each operand's contracting dims are consecutive and
 * sit either right after the batch dims or at the end, so that per batch element the lhs is an (M,
 * K) or (K, M) row-major matrix and the rhs a (K, N) or (N, K) one; the transposed cases use
 * CblasTrans. The result (batch, lhs free, rhs free) is then (M, N) row-major per batch
 * element. Everything else takes the loop nest in reduce.c. The products go to the runtime's
 * rt_sgemm (rt_sbgemm), which splits them over the pool (OpenBLAS runs single-threaded in a
 * trainer).
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

/* The layout rule is ir_dot_sgemm's (ir/shape.c), which the pass folding transposes into dots
 * (passes/simplify.c) shares. bf16 operands take the same layouts (rt_sbgemm), with a bf16 or
 * an f32 result. */
static bool dot_layout(const IrGraph *g, int32_t v, IrGemm *L) {
  const IrValue *x = &g->values[v];
  IrDType dt = x->dtype;
  if (g->values[x->ops[0]].dtype == DT_BF16) {
    if (dt != DT_BF16 && dt != DT_F32) return false;
    dt = DT_F32;
  }
  return ir_dot_sgemm(dt, &g->values[x->ops[0]].shape, &g->values[x->ops[1]].shape, &x->attr, L);
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

/* void rt_sbgemm(RtPool*, i64 batch, i32 ta, i32 tb, i64 m, n, k, u16 *a, i64 lda, i64 sa,
 *                u16 *b, i64 ldb, i64 sb, void *c, i32 c_bf16, i64 ldc, i64 sc) */
static LLVMValueRef sbgemm_decl(LlvmCtx *C) {
  LLVMTypeRef hp = LLVMPointerType(LLVMInt16TypeInContext(C->c), 0), l = C->t_i64, i = C->t_i32;
  LLVMTypeRef p[] = {C->t_i8p, l, i, i, l, l, l, hp, l, l, hp, l, l, C->t_i8p, i, l, l};
  return llvm_fn_get(C, "rt_sbgemm", C->t_void, p, 17);
}

static LLVMValueRef i32c(LlvmCtx *C, int64_t v) {
  return LLVMConstInt(C->t_i32, (unsigned long long)v, 0);
}

/* v's buffer as its storage type's pointer: float* for f32, i16* (uint16_t*) for bf16. */
static LLVMValueRef buf(LlvmCtx *C, int32_t v) {
  LLVMTypeRef et = llvm_storage_type(C, C->g->values[v].dtype);
  return LLVMBuildBitCast(C->b, llvm_buffer_ptr(C, v), LLVMPointerType(et, 0), "");
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
  if (C->g->values[x->ops[0]].dtype != DT_BF16) {
    LLVMValueRef f = sgemm_decl(C);
    LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, args, 16, "");
    return 0;
  }
  /* bf16 operands: the same arguments, with c untyped and c_bf16 after it */
  LLVMValueRef bargs[17];
  for (int i = 0; i < 13; i++) bargs[i] = args[i];
  bargs[13] = LLVMBuildBitCast(C->b, args[13], C->t_i8p, "");
  bargs[14] = i32c(C, x->dtype == DT_BF16);
  bargs[15] = args[14];
  bargs[16] = args[15];
  LLVMValueRef f = sbgemm_decl(C);
  LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, bargs, 17, "");
  return 0;
}

/* void rt_attention(RtPool*, i64 bn, i64 group, i64 tq, i64 tk, i64 h, i32 causal, float scale,
 * float *q, *k, *v, i32 *pos, float *out), void rt_attention_grad(..., float *q, *k, *v, *dout,
 * i32 *pos, float *dqkv) and rt_attention_bf16, rt_attention_grad_bf16: the same on uint16_t
 * tensors. pos is null without the query positions. */
int llvm_attention_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = &C->g->values[v];
  const IrShape *q = &C->g->values[x->ops[0]].shape, *ks = &C->g->values[x->ops[1]].shape;
  int64_t t = q->dims[q->rank - 2], tk = ks->dims[ks->rank - 2], h = q->dims[q->rank - 1];
  int64_t bn = t > 0 && h > 0 ? ir_shape_numel(q) / (t * h) : 0;
  bool grad = x->op == IR_ATTENTION_GRAD, bf16 = x->dtype == DT_BF16;
  LLVMTypeRef fp = LLVMPointerType(llvm_storage_type(C, x->dtype), 0), l = C->t_i64;
  LLVMTypeRef ip = LLVMPointerType(C->t_i32, 0);
  int64_t group = ir_attention_group(q, ks);
  int32_t pos = ir_attention_positions(x), nin = grad ? 4 : 3;
  LLVMTypeRef p[] = {C->t_i8p, l, l, l, l, l, C->t_i32, C->t_f32, fp, fp, fp, fp, fp, fp};
  LLVMValueRef args[14] = {LLVMBuildBitCast(C->b, C->pool, C->t_i8p, ""),
                           llvm_i64(C, bn),
                           llvm_i64(C, group),
                           llvm_i64(C, t),
                           llvm_i64(C, tk),
                           llvm_i64(C, h),
                           i32c(C, x->attr.k != 0),
                           LLVMConstReal(C->t_f32, x->attr.value)};
  int n = 8;
  for (int32_t k = 0; k < nin; k++) args[n++] = buf(C, x->ops[k]);
  p[n] = ip;
  args[n++] =
      pos == IR_NONE ? LLVMConstPointerNull(ip) : LLVMBuildBitCast(C->b, buf(C, pos), ip, "");
  args[n++] = buf(C, v);
  const char *fname = grad ? (bf16 ? "rt_attention_grad_bf16" : "rt_attention_grad")
                           : (bf16 ? "rt_attention_bf16" : "rt_attention");
  LLVMValueRef f = llvm_fn_get(C, fname, C->t_void, p, n);
  LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, args, (unsigned)n, "");
  return 0;
}
