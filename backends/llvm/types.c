/* types.c: what every file of backends/llvm/ uses, below all of them: the error of a
 * compilation (llvm_fail) and the LLVM types of the context being emitted into.
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
