/* jit.c: running the compiled units in this process through ORC's LLJIT, which links their
 * objects as the system linker would link a trainer.
 *
 * The functions generated code calls are bound to this process's definitions explicitly
 * (absolute symbols): the runtime's products and attention kernels (f32 and bf16), the libm
 * functions LLVM's math intrinsics lower to, and the runtime's rt_parallel_for when the runtime has
 * it, so the JIT works whether or not the executable exports them. Anything else (memset, memcpy
 * that loop idioms become) resolves through a search of the process's loaded libraries.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <cblas.h>
#include <llvm-c/LLJIT.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef AXLC_HAVE_RT_POOL
#define AXLC_HAVE_RT_POOL 0
#endif

struct LlvmJit {
  LLVMOrcLLJITRef j;
  const RtProgram *program;
};

static int fail_err(char *err, size_t cap, const char *what, LLVMErrorRef e) {
  char *m = e ? LLVMGetErrorMessage(e) : NULL;
  if (err && cap) snprintf(err, cap, "LLVM JIT: %s%s%s", what, m ? ": " : "", m ? m : "");
  if (m) LLVMDisposeErrorMessage(m);
  return -1;
}

typedef struct {
  const char *name;
  void *addr;
} HostSym;

static int define_host_symbols(LLVMOrcLLJITRef J, LLVMOrcJITDylibRef jd, char *err, size_t cap) {
  const HostSym syms[] = {
    {"rt_sgemm", (void *)rt_sgemm},
    {"rt_sbgemm", (void *)rt_sbgemm},
    {"rt_attention", (void *)rt_attention},
    {"rt_attention_grad", (void *)rt_attention_grad},
    {"rt_attention_bf16", (void *)rt_attention_bf16},
    {"rt_attention_grad_bf16", (void *)rt_attention_grad_bf16},
    {"rt_comm_collective", (void *)rt_comm_collective},
    {"expf", (void *)expf},
    {"logf", (void *)logf},
    {"tanhf", (void *)tanhf},
    {"erff", (void *)erff},
    {"sinf", (void *)sinf},
    {"cosf", (void *)cosf},
    {"powf", (void *)powf},
    {"sqrtf", (void *)sqrtf},
#if AXLC_HAVE_RT_POOL
    {"rt_parallel_for", (void *)rt_parallel_for},
#endif
  };
  enum { N = sizeof syms / sizeof syms[0] };
  LLVMJITCSymbolMapPair pairs[N];
  for (size_t i = 0; i < N; i++) {
    pairs[i].Name = LLVMOrcLLJITMangleAndIntern(J, syms[i].name);
    pairs[i].Sym.Address = (LLVMOrcExecutorAddress)(uintptr_t)syms[i].addr;
    pairs[i].Sym.Flags.GenericFlags =
        LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable;
    pairs[i].Sym.Flags.TargetFlags = 0;
  }
  LLVMErrorRef e = LLVMOrcJITDylibDefine(jd, LLVMOrcAbsoluteSymbols(pairs, N));
  return e ? fail_err(err, cap, "host symbols", e) : 0;
}

static int add_process_search(LLVMOrcLLJITRef J, LLVMOrcJITDylibRef jd, char *err, size_t cap) {
  LLVMOrcDefinitionGeneratorRef gen;
  LLVMErrorRef e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
      &gen, LLVMOrcLLJITGetGlobalPrefix(J), NULL, NULL);
  if (e) return fail_err(err, cap, "process symbols", e);
  LLVMOrcJITDylibAddGenerator(jd, gen);
  return 0;
}

static int lookup(LlvmJit *jit, const char *name, LLVMOrcJITTargetAddress *addr, char *err,
                  size_t cap) {
  LLVMErrorRef e = LLVMOrcLLJITLookup(jit->j, addr, name);
  return e ? fail_err(err, cap, name, e) : 0;
}

/* Every unit's object: from memory (the JIT takes the buffer) or from the cache file. */
static int jit_setup(LlvmJit *jit, LlvmModule *M, char *err, size_t cap) {
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&jit->j, NULL);
  if (e) return fail_err(err, cap, "cannot create", e);
  LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit->j);
  if (define_host_symbols(jit->j, jd, err, cap) || add_process_search(jit->j, jd, err, cap))
    return -1;
  for (int32_t i = 0; i < M->nunits; i++) {
    LlvmUnit *u = &M->units[i];
    LLVMMemoryBufferRef buf = u->obj;
    char *msg = NULL;
    if (buf) {
      u->obj = NULL; /* the JIT owns it now */
    } else if (!u->file || LLVMCreateMemoryBufferWithContentsOfFile(u->file, &buf, &msg)) {
      if (err && cap) snprintf(err, cap, "LLVM JIT: unit %s: %s", u->name, msg ? msg : "no object");
      LLVMDisposeMessage(msg);
      return -1;
    }
    e = LLVMOrcLLJITAddObjectFile(jit->j, jd, buf);
    if (e) return fail_err(err, cap, u->name, e);
  }
  return 0;
}

int llvm_jit(LlvmModule *M, LlvmStepFn *step, LlvmJit **out, char *err, size_t cap) {
  *out = NULL;
  if (!M || !M->nunits) return fail_err(err, cap, "no module", NULL);
  LlvmJit *jit = base_xcalloc(1, sizeof *jit);
  bool has_program = M->has_program;
  LLVMOrcJITTargetAddress a = 0, p = 0;
  if (jit_setup(jit, M, err, cap) || lookup(jit, "axlc_step", &a, err, cap) ||
      (has_program && lookup(jit, "axlc_program", &p, err, cap))) {
    llvm_jit_free(jit);
    return -1;
  }
  *step = (LlvmStepFn)(uintptr_t)a;
  jit->program = (const RtProgram *)(uintptr_t)p;
  *out = jit;
  return 0;
}

const RtProgram *llvm_jit_program(LlvmJit *jit) { return jit ? jit->program : NULL; }

void llvm_jit_free(LlvmJit *jit) {
  if (!jit) return;
  if (jit->j) {
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(jit->j);
    if (e) LLVMConsumeError(e);
  }
  free(jit);
}
