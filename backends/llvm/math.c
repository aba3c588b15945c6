/* math.c: exp, log, tanh and logistic on f32 as straight-line LLVM IR instead of libm calls.
 *
 * A call to expf or tanhf in a kernel's loop keeps LLVM's loop vectorizer from vectorizing it,
 * and libm's scalar functions were a seventh of a step's time. These are the Cephes single
 * precision algorithms (range reduction, then a minimax polynomial), written without branches:
 * every path is computed and the special cases are selects, so the vectorizer turns each into
 * a few vector instructions. Max error is about 2 ulp over the whole f32 range (tests/backends/
 * test_math.c measures it against libm); NaN propagates, exp underflows to 0 (through the
 * subnormals) and overflows to inf, log gives -inf at 0 and NaN below, tanh saturates to ±1.
 * Every fptosi sees a clamped, non-NaN operand (LLVM makes an out-of-range one poison).
 * llvm.fmuladd fuses where the target has FMA and is a multiply and an add elsewhere; both are
 * accurate here (the Cody-Waite constants are exact in few bits).
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

static LLVMValueRef kf(LlvmCtx *C, double v) { return LLVMConstReal(C->t_f32, v); }
static LLVMValueRef ki(LlvmCtx *C, int32_t v) {
  return LLVMConstInt(C->t_i32, (unsigned long long)(int64_t)v, 1);
}

static LLVMValueRef call_f(LlvmCtx *C, const char *name, LLVMValueRef *args, unsigned n) {
  LLVMTypeRef p[] = {C->t_f32, C->t_f32, C->t_f32};
  LLVMValueRef f = llvm_fn_get(C, name, C->t_f32, p, n);
  return LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, args, n, "");
}

static LLVMValueRef fmuladd(LlvmCtx *C, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMValueRef args[] = {a, b, c};
  return call_f(C, "llvm.fmuladd.f32", args, 3);
}

/* c[0] x^(n-1) + ... + c[n-1] by Horner's rule. */
static LLVMValueRef horner(LlvmCtx *C, LLVMValueRef x, const double *c, int n) {
  LLVMValueRef y = kf(C, c[0]);
  for (int i = 1; i < n; i++) y = fmuladd(C, y, x, kf(C, c[i]));
  return y;
}

static LLVMValueRef fcmp(LlvmCtx *C, LLVMRealPredicate p, LLVMValueRef a, double b) {
  return LLVMBuildFCmp(C->b, p, a, kf(C, b), "");
}

static LLVMValueRef sel(LlvmCtx *C, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(C->b, c, a, b, "");
}

/* x where x is NaN, else y. */
static LLVMValueRef keep_nan(LlvmCtx *C, LLVMValueRef x, LLVMValueRef y) {
  return sel(C, LLVMBuildFCmp(C->b, LLVMRealUNO, x, x, ""), x, y);
}

/* 2^n as a float, for an i32 n in [-126, 127]: n + 127 is the exponent field. */
static LLVMValueRef pow2i(LlvmCtx *C, LLVMValueRef n) {
  LLVMValueRef e = LLVMBuildShl(C->b, LLVMBuildAdd(C->b, n, ki(C, 127), ""), ki(C, 23), "");
  return LLVMBuildBitCast(C->b, e, C->t_f32, "");
}

/* exp(x) = 2^n e^r, n = round(x / ln 2), |r| <= ln2 / 2. x is clamped to [-104, 89] first
 * (NaN to 89, restored at the end), which keeps n in [-150, 128]; 2^n is applied as two
 * factors 2^(n/2) so that both are normal and the result rounds once, to inf above
 * ln(FLT_MAX) and through the subnormals to 0 below ln(2^-150). */
LLVMValueRef llvm_math_exp(LlvmCtx *C, LLVMValueRef x) {
  static const double P[] = {1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                             4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1};
  LLVMValueRef xc = sel(C, fcmp(C, LLVMRealUGT, x, 89.0), kf(C, 89.0), x);
  xc = sel(C, fcmp(C, LLVMRealOLT, xc, -104.0), kf(C, -104.0), xc);
  LLVMValueRef t = LLVMBuildFMul(C->b, xc, kf(C, 1.44269504088896341), "");
  LLVMValueRef half = sel(C, fcmp(C, LLVMRealOLT, t, 0), kf(C, -0.5), kf(C, 0.5));
  LLVMValueRef n = LLVMBuildFPToSI(C->b, LLVMBuildFAdd(C->b, t, half, ""), C->t_i32, "");
  LLVMValueRef fn = LLVMBuildSIToFP(C->b, n, C->t_f32, "");
  LLVMValueRef r = fmuladd(C, fn, kf(C, -0.693359375), xc); /* Cody-Waite: ln 2 = C1 + C2 */
  r = fmuladd(C, fn, kf(C, 2.12194440e-4), r);
  LLVMValueRef y = horner(C, r, P, 6);
  y = fmuladd(C, y, LLVMBuildFMul(C->b, r, r, ""), r);
  y = LLVMBuildFAdd(C->b, y, kf(C, 1.0), "");
  LLVMValueRef n1 = LLVMBuildAShr(C->b, n, ki(C, 1), ""), n2 = LLVMBuildSub(C->b, n, n1, "");
  y = LLVMBuildFMul(C->b, LLVMBuildFMul(C->b, y, pow2i(C, n1), ""), pow2i(C, n2), "");
  return keep_nan(C, x, y);
}

/* log(x) = e ln 2 + log(1 + m), x = 2^e (1 + m), sqrt(1/2) <= 1 + m < sqrt(2). Subnormals are
 * scaled by 2^23 first. x <= 0, inf and NaN are selects at the end. */
LLVMValueRef llvm_math_log(LlvmCtx *C, LLVMValueRef x) {
  static const double P[] = {7.0376836292e-2,  -1.1514610310e-1, 1.1676998740e-1,
                             -1.2420140846e-1, 1.4249322787e-1,  -1.6668057665e-1,
                             2.0000714765e-1,  -2.4999993993e-1, 3.3333331174e-1};
  LLVMValueRef sub = fcmp(C, LLVMRealOLT, x, 1.17549435e-38);
  LLVMValueRef xs = sel(C, sub, LLVMBuildFMul(C->b, x, kf(C, 8388608.0), ""), x);
  LLVMValueRef bits = LLVMBuildBitCast(C->b, xs, C->t_i32, "");
  LLVMValueRef e = LLVMBuildAnd(C->b, LLVMBuildLShr(C->b, bits, ki(C, 23), ""), ki(C, 0xff), "");
  e = LLVMBuildSub(C->b, e, sel(C, sub, ki(C, 126 + 23), ki(C, 126)), "");
  LLVMValueRef mb =
      LLVMBuildOr(C->b, LLVMBuildAnd(C->b, bits, ki(C, 0x007fffff), ""), ki(C, 0x3f000000), "");
  LLVMValueRef m = LLVMBuildBitCast(C->b, mb, C->t_f32, ""); /* [0.5, 1) */
  LLVMValueRef fe = LLVMBuildSIToFP(C->b, e, C->t_f32, "");
  LLVMValueRef lo = fcmp(C, LLVMRealOLT, m, 0.707106781186547524);
  fe = sel(C, lo, LLVMBuildFSub(C->b, fe, kf(C, 1.0), ""), fe);
  m = sel(C, lo, LLVMBuildFAdd(C->b, m, m, ""), m);
  m = LLVMBuildFSub(C->b, m, kf(C, 1.0), "");
  LLVMValueRef z = LLVMBuildFMul(C->b, m, m, "");
  LLVMValueRef y = LLVMBuildFMul(C->b, LLVMBuildFMul(C->b, horner(C, m, P, 9), m, ""), z, "");
  y = fmuladd(C, fe, kf(C, -2.12194440e-4), y);
  y = fmuladd(C, z, kf(C, -0.5), y);
  LLVMValueRef r = fmuladd(C, fe, kf(C, 0.693359375), LLVMBuildFAdd(C->b, m, y, ""));
  r = sel(C, fcmp(C, LLVMRealOEQ, x, 0), kf(C, -__builtin_inf()), r);
  r = sel(C, fcmp(C, LLVMRealOLT, x, 0), kf(C, __builtin_nan("")), r);
  r = sel(C, fcmp(C, LLVMRealOEQ, x, __builtin_inf()), x, r);
  return keep_nan(C, x, r);
}

/* tanh: an odd polynomial below |x| = 0.625, else sign(x) (1 - 2 / (exp(2|x|) + 1)), which
 * reaches 1 as exp overflows. NaN goes through exp. */
LLVMValueRef llvm_math_tanh(LlvmCtx *C, LLVMValueRef x) {
  static const double P[] = {-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                             1.33314422036e-1, -3.33332819422e-1};
  LLVMValueRef ax = call_f(C, "llvm.fabs.f32", &x, 1);
  LLVMValueRef z = LLVMBuildFMul(C->b, x, x, "");
  LLVMValueRef ys = fmuladd(C, LLVMBuildFMul(C->b, horner(C, z, P, 5), z, ""), x, x);
  LLVMValueRef e = llvm_math_exp(C, LLVMBuildFAdd(C->b, ax, ax, ""));
  LLVMValueRef q = LLVMBuildFDiv(C->b, kf(C, 2.0), LLVMBuildFAdd(C->b, e, kf(C, 1.0), ""), "");
  LLVMValueRef args[] = {LLVMBuildFSub(C->b, kf(C, 1.0), q, ""), x};
  LLVMValueRef yl = call_f(C, "llvm.copysign.f32", args, 2);
  return sel(C, fcmp(C, LLVMRealOLT, ax, 0.625), ys, yl);
}

/* logistic(x) = 1 / (1 + exp(-x)) for x >= 0 and exp(x) / (1 + exp(x)) below, which keeps the
 * subnormal results of x < -87 that 1 / (1 + inf) would flush to 0. One exp: of -|x|. */
LLVMValueRef llvm_math_logistic(LlvmCtx *C, LLVMValueRef x) {
  LLVMValueRef ax = call_f(C, "llvm.fabs.f32", &x, 1);
  LLVMValueRef e = llvm_math_exp(C, LLVMBuildFNeg(C->b, ax, ""));
  LLVMValueRef num = sel(C, fcmp(C, LLVMRealOLT, x, 0), e, kf(C, 1.0));
  return LLVMBuildFDiv(C->b, num, LLVMBuildFAdd(C->b, kf(C, 1.0), e, ""), "");
}
