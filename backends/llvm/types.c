/* types.c: what every file of backends/llvm/ uses, below all of them: the error of a
 * compilation (llvm_fail), the LLVM types of the context being emitted into, and the bf16
 * conversions.
 *
 * A value has two types here. Its compute type (llvm_type_of) is what its elements are in
 * registers: i32 for i32, float for every float dtype. Its storage type (llvm_storage_type) is
 * what they are in its buffer: the same, but i16 for bf16, the upper half of a float's bits. A
 * bf16 load widens (exact), a bf16 store rounds to nearest even (NaN stays NaN: the runtime's
 * rt_bf16_from_f32), and an op with a bf16 result rounds its f32 result to bf16 in registers
 * (llvm_bf16_quantize), as the interpreter rounds every op's result to its value's dtype, so a
 * chain of fused bf16 ops computes what the same ops stored one by one would. Sums accumulated
 * in double round once, straight to bf16 (llvm_bf16_from_f64), as the interpreter's do.
 *
 * The folder reads top-down: compile.c drives the emitters (kernel.c, reduce.c, blas.c,
 * program.c, ...), which build on loop.c, scalar.c and math.c; all of them end here.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <stdarg.h>
#include <stdio.h>

int llvm_fail(LlvmCtx *C, const char *fmt, ...) {
  if (C->err && C->cap && C->err[0]) return -1; /* keep the first message */
  va_list ap;
  va_start(ap, fmt);
  if (C->err && C->cap) vsnprintf(C->err, C->cap, fmt, ap);
  va_end(ap);
  return -1;
}

LLVMTypeRef llvm_type_of(LlvmCtx *C, IrDType dt) { return dt == DT_I32 ? C->t_i32 : C->t_f32; }

LLVMTypeRef llvm_storage_type(LlvmCtx *C, IrDType dt) {
  return dt == DT_BF16 ? LLVMInt16TypeInContext(C->c) : llvm_type_of(C, dt);
}

/* ---- bf16 in registers: on scalars or vectors alike ---- */

/* elem, or a vector of elem as long as like is a vector. */
static LLVMTypeRef shaped(LLVMTypeRef like, LLVMTypeRef elem) {
  if (LLVMGetTypeKind(like) != LLVMVectorTypeKind) return elem;
  return LLVMVectorType(elem, LLVMGetVectorSize(like));
}

/* The i32 constant v, splat to like's shape. */
static LLVMValueRef splat(LlvmCtx *C, LLVMTypeRef like, uint32_t v) {
  LLVMValueRef s = LLVMConstInt(C->t_i32, v, 0);
  if (LLVMGetTypeKind(like) != LLVMVectorTypeKind) return s;
  unsigned n = LLVMGetVectorSize(like);
  LLVMValueRef e[64];
  for (unsigned i = 0; i < n && i < 64; i++) e[i] = s;
  return LLVMConstVector(e, n < 64 ? n : 64);
}

/* The bits of f32 x rounded to bf16, in the upper half (the lower half zero): to nearest, ties
 * to even, by adding 0x7fff plus the kept part's lowest bit; a NaN keeps its upper half with a
 * quiet bit set instead, so the cut cannot make it an infinity. */
static LLVMValueRef bf16_bits(LlvmCtx *C, LLVMValueRef x) {
  LLVMTypeRef it = shaped(LLVMTypeOf(x), C->t_i32);
  LLVMValueRef u = LLVMBuildBitCast(C->b, x, it, "");
  LLVMValueRef mag = LLVMBuildAnd(C->b, u, splat(C, it, 0x7fffffffu), "");
  LLVMValueRef nan = LLVMBuildICmp(C->b, LLVMIntUGT, mag, splat(C, it, 0x7f800000u), "");
  LLVMValueRef lsb =
      LLVMBuildAnd(C->b, LLVMBuildLShr(C->b, u, splat(C, it, 16), ""), splat(C, it, 1), "");
  LLVMValueRef r = LLVMBuildAdd(C->b, LLVMBuildAdd(C->b, u, splat(C, it, 0x7fffu), ""), lsb, "");
  LLVMValueRef q = LLVMBuildOr(C->b, u, splat(C, it, 0x400000u), "");
  return LLVMBuildAnd(C->b, LLVMBuildSelect(C->b, nan, q, r, ""), splat(C, it, 0xffff0000u), "");
}

LLVMValueRef llvm_bf16_widen(LlvmCtx *C, LLVMValueRef h) {
  LLVMTypeRef it = shaped(LLVMTypeOf(h), C->t_i32);
  LLVMValueRef u = LLVMBuildShl(C->b, LLVMBuildZExt(C->b, h, it, ""), splat(C, it, 16), "");
  return LLVMBuildBitCast(C->b, u, shaped(it, C->t_f32), "");
}

LLVMValueRef llvm_bf16_narrow(LlvmCtx *C, LLVMValueRef x) {
  LLVMValueRef u = LLVMBuildLShr(C->b, bf16_bits(C, x), splat(C, LLVMTypeOf(x), 16), "");
  return LLVMBuildTrunc(C->b, u, shaped(LLVMTypeOf(x), LLVMInt16TypeInContext(C->c)), "");
}

LLVMValueRef llvm_bf16_quantize(LlvmCtx *C, LLVMValueRef x) {
  return LLVMBuildBitCast(C->b, bf16_bits(C, x), LLVMTypeOf(x), "");
}

/* Rounding a double to float and that to bf16 can round twice the wrong way at a tie of the
 * second. Rounding to odd first (truncate toward zero, then set the lowest bit if anything was
 * cut) keeps the information the second rounding needs (float has more than bf16's 8 bits + 2),
 * so the result is the double rounded once to bf16, the interpreter's. */
LLVMValueRef llvm_bf16_from_f64(LlvmCtx *C, LLVMValueRef x) {
  LLVMTypeRef ft = shaped(LLVMTypeOf(x), C->t_f32), it = shaped(LLVMTypeOf(x), C->t_i32);
  LLVMValueRef t = LLVMBuildFPTrunc(C->b, x, ft, "");
  LLVMValueRef back = LLVMBuildFPExt(C->b, t, LLVMTypeOf(x), "");
  LLVMValueRef zero = LLVMConstNull(LLVMTypeOf(x));
  /* |t| > |x|: t rounded away from zero; one step back toward zero on the magnitude bits */
  LLVMValueRef neg = LLVMBuildFCmp(C->b, LLVMRealOLT, x, zero, "");
  LLVMValueRef away = LLVMBuildSelect(C->b, neg, LLVMBuildFCmp(C->b, LLVMRealOLT, back, x, ""),
                                      LLVMBuildFCmp(C->b, LLVMRealOGT, back, x, ""), "");
  LLVMValueRef u = LLVMBuildBitCast(C->b, t, it, "");
  u = LLVMBuildSub(C->b, u, LLVMBuildZExt(C->b, away, it, ""), "");
  LLVMValueRef cut = LLVMBuildFCmp(C->b, LLVMRealONE, back, x, "");
  u = LLVMBuildOr(C->b, u, LLVMBuildZExt(C->b, cut, it, ""), "");
  return llvm_bf16_quantize(C, LLVMBuildBitCast(C->b, u, ft, ""));
}

void llvm_ctx_types(LlvmCtx *C) {
  C->t_void = LLVMVoidTypeInContext(C->c);
  C->t_i1 = LLVMInt1TypeInContext(C->c);
  C->t_i8 = LLVMInt8TypeInContext(C->c);
  C->t_i8p = LLVMPointerType(C->t_i8, 0);
  C->t_i32 = LLVMInt32TypeInContext(C->c);
  C->t_i64 = LLVMInt64TypeInContext(C->c);
  C->t_f32 = LLVMFloatTypeInContext(C->c);
  C->t_f64 = LLVMDoubleTypeInContext(C->c);
  LLVMTypeRef kp[] = {C->t_i8p, C->t_i64, C->t_i64};
  C->t_kernel = LLVMFunctionType(C->t_void, kp, 3, 0);
}
