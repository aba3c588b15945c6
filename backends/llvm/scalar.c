/* scalar.c: what one element of an elementwise op is, in LLVM IR.
 *
 * ir/interp.c is the spec (scalar_unary, scalar_binary, eval_select, ir_dtype_round). The
 * interpreter computes in double and rounds to f32 after every op; here f32 values compute in
 * float, which agrees exactly for + - * / sqrt and to the last bits for the library functions
 * (exp, log, tanh and logistic are inline polynomials, math.c, within about 2 ulp).
 * Special cases kept exact: max/min pass a NaN first operand through and otherwise prefer a on
 * ties; compares give 1/0 in the operands' dtype; i32 division truncates and x/0 is 0; casts to
 * i32 truncate and saturate (NaN -> 0, as llvm.fptosi.sat does). bf16 computes as f32 (types.c):
 * these functions see f32 operands, and the caller rounds a bf16 result (kernel.c).
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

LLVMValueRef llvm_scalar_const(LlvmCtx *C, IrDType dt, double v) {
  if (dt == DT_I32) return LLVMConstInt(C->t_i32, (unsigned long long)(int64_t)v, 1);
  if (dt == DT_BF16) v = ir_dtype_round(DT_BF16, v); /* once, from the double */
  return LLVMConstReal(C->t_f32, v);
}

/* A call to an f32 -> f32 function (intrinsic or libm). */
static LLVMValueRef call_f1(LlvmCtx *C, const char *name, LLVMValueRef x) {
  LLVMTypeRef p[] = {C->t_f32};
  LLVMValueRef f = llvm_fn_get(C, name, C->t_f32, p, 1);
  return LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, &x, 1, "");
}

static LLVMValueRef call_f2(LlvmCtx *C, const char *name, LLVMValueRef a, LLVMValueRef b) {
  LLVMTypeRef p[] = {C->t_f32, C->t_f32};
  LLVMValueRef f = llvm_fn_get(C, name, C->t_f32, p, 2), args[] = {a, b};
  return LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, args, 2, "");
}

static LLVMValueRef unary_f32(LlvmCtx *C, IrOp op, LLVMValueRef x) {
  LLVMValueRef one = LLVMConstReal(C->t_f32, 1.0);
  switch (op) {
  case IR_NEG: return LLVMBuildFNeg(C->b, x, "");
  case IR_EXP: return llvm_math_exp(C, x);
  case IR_LOG: return llvm_math_log(C, x);
  case IR_TANH: return llvm_math_tanh(C, x);
  case IR_SQRT: return call_f1(C, "llvm.sqrt.f32", x);
  case IR_RSQRT: return LLVMBuildFDiv(C->b, one, call_f1(C, "llvm.sqrt.f32", x), "");
  case IR_ABS: return call_f1(C, "llvm.fabs.f32", x);
  case IR_SIN: return call_f1(C, "llvm.sin.f32", x);
  case IR_COS: return call_f1(C, "llvm.cos.f32", x);
  case IR_ERF: return call_f1(C, "erff", x);
  case IR_LOGISTIC: return llvm_math_logistic(C, x);
  case IR_STOP_GRADIENT: return x;
  default: return NULL;
  }
}

static LLVMValueRef unary_i32(LlvmCtx *C, IrOp op, LLVMValueRef x) {
  LLVMValueRef zero = LLVMConstInt(C->t_i32, 0, 0);
  if (op == IR_NEG) return LLVMBuildSub(C->b, zero, x, "");
  if (op == IR_STOP_GRADIENT) return x;
  if (op == IR_ABS)
    return LLVMBuildSelect(C->b, LLVMBuildICmp(C->b, LLVMIntSLT, x, zero, ""),
                           LLVMBuildSub(C->b, zero, x, ""), x, "");
  /* The float functions on an i32 (the verifier rejects them; the interpreter would compute in
   * double): through f32. */
  LLVMValueRef f = unary_f32(C, op, LLVMBuildSIToFP(C->b, x, C->t_f32, ""));
  return f ? llvm_scalar_cast(C, DT_F32, DT_I32, f) : NULL;
}

LLVMValueRef llvm_scalar_unary(LlvmCtx *C, IrOp op, IrDType dt, LLVMValueRef x) {
  return dt == DT_I32 ? unary_i32(C, op, x) : unary_f32(C, op, x);
}

/* max: a >= b || isnan(a) ? a : b; min with <=. */
static LLVMValueRef minmax_f32(LlvmCtx *C, bool is_max, LLVMValueRef a, LLVMValueRef b) {
  LLVMValueRef ge = LLVMBuildFCmp(C->b, is_max ? LLVMRealOGE : LLVMRealOLE, a, b, "");
  LLVMValueRef nan = LLVMBuildFCmp(C->b, LLVMRealUNO, a, a, "");
  return LLVMBuildSelect(C->b, LLVMBuildOr(C->b, ge, nan, ""), a, b, "");
}

static LLVMValueRef compare_f32(LlvmCtx *C, IrOp op, LLVMValueRef a, LLVMValueRef b) {
  LLVMRealPredicate p = op == IR_EQ   ? LLVMRealOEQ
                        : op == IR_NE ? LLVMRealUNE
                        : op == IR_LT ? LLVMRealOLT
                        : op == IR_LE ? LLVMRealOLE
                        : op == IR_GT ? LLVMRealOGT
                                      : LLVMRealOGE;
  return LLVMBuildUIToFP(C->b, LLVMBuildFCmp(C->b, p, a, b, ""), C->t_f32, "");
}

static LLVMValueRef binary_f32(LlvmCtx *C, IrOp op, LLVMValueRef a, LLVMValueRef b) {
  switch (op) {
  case IR_ADD: return LLVMBuildFAdd(C->b, a, b, "");
  case IR_SUB: return LLVMBuildFSub(C->b, a, b, "");
  case IR_MUL: return LLVMBuildFMul(C->b, a, b, "");
  case IR_DIV: return LLVMBuildFDiv(C->b, a, b, "");
  case IR_MAX: return minmax_f32(C, true, a, b);
  case IR_MIN: return minmax_f32(C, false, a, b);
  case IR_POW: return call_f2(C, "llvm.pow.f32", a, b);
  default: return compare_f32(C, op, a, b);
  }
}

/* Truncating division with x/0 = 0 and INT_MIN/-1 saturating, without LLVM's undefined cases. */
static LLVMValueRef div_i32(LlvmCtx *C, LLVMValueRef a, LLVMValueRef b) {
  LLVMValueRef zero = LLVMConstInt(C->t_i32, 0, 0), one = LLVMConstInt(C->t_i32, 1, 0);
  LLVMValueRef m1 = LLVMConstInt(C->t_i32, (unsigned long long)-1, 1);
  LLVMValueRef bz = LLVMBuildICmp(C->b, LLVMIntEQ, b, zero, "");
  LLVMValueRef bm1 = LLVMBuildICmp(C->b, LLVMIntEQ, b, m1, "");
  LLVMValueRef safe = LLVMBuildSelect(C->b, LLVMBuildOr(C->b, bz, bm1, ""), one, b, "");
  LLVMValueRef q = LLVMBuildSDiv(C->b, a, safe, "");
  LLVMValueRef imin = LLVMConstInt(C->t_i32, 0x80000000u, 0);
  LLVMValueRef neg =
      LLVMBuildSelect(C->b, LLVMBuildICmp(C->b, LLVMIntEQ, a, imin, ""),
                      LLVMConstInt(C->t_i32, 0x7fffffff, 0), LLVMBuildSub(C->b, zero, a, ""), "");
  return LLVMBuildSelect(C->b, bz, zero, LLVMBuildSelect(C->b, bm1, neg, q, ""), "");
}

static LLVMValueRef binary_i32(LlvmCtx *C, IrOp op, LLVMValueRef a, LLVMValueRef b) {
  LLVMIntPredicate p;
  switch (op) {
  case IR_ADD: return LLVMBuildAdd(C->b, a, b, "");
  case IR_SUB: return LLVMBuildSub(C->b, a, b, "");
  case IR_MUL: return LLVMBuildMul(C->b, a, b, "");
  case IR_DIV: return div_i32(C, a, b);
  case IR_MAX: return LLVMBuildSelect(C->b, LLVMBuildICmp(C->b, LLVMIntSGE, a, b, ""), a, b, "");
  case IR_MIN: return LLVMBuildSelect(C->b, LLVMBuildICmp(C->b, LLVMIntSLE, a, b, ""), a, b, "");
  case IR_POW: {
    LLVMValueRef fa = LLVMBuildSIToFP(C->b, a, C->t_f32, ""),
                 fb = LLVMBuildSIToFP(C->b, b, C->t_f32, "");
    return llvm_scalar_cast(C, DT_F32, DT_I32, call_f2(C, "llvm.pow.f32", fa, fb));
  }
  case IR_EQ: p = LLVMIntEQ; break;
  case IR_NE: p = LLVMIntNE; break;
  case IR_LT: p = LLVMIntSLT; break;
  case IR_LE: p = LLVMIntSLE; break;
  case IR_GT: p = LLVMIntSGT; break;
  default: p = LLVMIntSGE; break;
  }
  return LLVMBuildZExt(C->b, LLVMBuildICmp(C->b, p, a, b, ""), C->t_i32, "");
}

LLVMValueRef llvm_scalar_binary(LlvmCtx *C, IrOp op, IrDType dt, LLVMValueRef a, LLVMValueRef b) {
  return dt == DT_I32 ? binary_i32(C, op, a, b) : binary_f32(C, op, a, b);
}

LLVMValueRef llvm_scalar_select(LlvmCtx *C, IrDType pdt, LLVMValueRef p, LLVMValueRef a,
                                LLVMValueRef b) {
  LLVMValueRef t = pdt == DT_I32
                       ? LLVMBuildICmp(C->b, LLVMIntNE, p, LLVMConstInt(C->t_i32, 0, 0), "")
                       : LLVMBuildFCmp(C->b, LLVMRealUNE, p, LLVMConstReal(C->t_f32, 0), "");
  return LLVMBuildSelect(C->b, t, a, b, "");
}

/* Between the compute types: bf16 -> f32 is exact (the same float), f32 -> bf16 rounds, i32 ->
 * bf16 goes through a double (exact) so that it rounds once; bf16 -> i32 is f32 -> i32. */
LLVMValueRef llvm_scalar_cast(LlvmCtx *C, IrDType from, IrDType to, LLVMValueRef x) {
  if (from == to) return x;
  if (from != DT_I32 && to != DT_I32) return to == DT_BF16 ? llvm_bf16_quantize(C, x) : x;
  if (to == DT_BF16) return llvm_bf16_from_f64(C, LLVMBuildSIToFP(C->b, x, C->t_f64, ""));
  if (to != DT_I32) return LLVMBuildSIToFP(C->b, x, C->t_f32, "");
  LLVMTypeRef p[] = {C->t_f32};
  LLVMValueRef f = llvm_fn_get(C, "llvm.fptosi.sat.i32.f32", C->t_i32, p, 1);
  return LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, &x, 1, "");
}

/* The reduce_max step: x > acc || isnan(x) ? x : acc. */
LLVMValueRef llvm_scalar_max_nan(LlvmCtx *C, IrDType dt, LLVMValueRef x, LLVMValueRef acc) {
  if (dt == DT_I32)
    return LLVMBuildSelect(C->b, LLVMBuildICmp(C->b, LLVMIntSGT, x, acc, ""), x, acc, "");
  LLVMValueRef gt = LLVMBuildFCmp(C->b, LLVMRealUGT, x, acc, ""); /* true if either is NaN */
  LLVMValueRef accnan = LLVMBuildFCmp(C->b, LLVMRealUNO, acc, acc, "");
  LLVMValueRef xnan = LLVMBuildFCmp(C->b, LLVMRealUNO, x, x, "");
  /* UGT is also true when only acc is NaN; then the interpreter keeps acc. */
  LLVMValueRef take =
      LLVMBuildAnd(C->b, gt, LLVMBuildOr(C->b, xnan, LLVMBuildNot(C->b, accnan, ""), ""), "");
  return LLVMBuildSelect(C->b, take, x, acc, "");
}
