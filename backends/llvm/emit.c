/* emit.c: the compiled module as an ELF object (linked with libaxrt into a trainer), or as LLVM
 * IR or assembly text (axlc --emit llvm|asm). An object for another CPU than the one the module
 * was optimized for gets its own target machine; the module stays usable afterwards.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t cap, const char *what, char *msg) {
  if (err && cap) snprintf(err, cap, "%s%s", what, msg ? msg : "");
  if (msg) LLVMDisposeMessage(msg);
  return -1;
}

/* M's own machine, or a new one for cpu/features (*own set: the caller disposes it). */
static LLVMTargetMachineRef machine_for(LlvmModule *M, const char *cpu, const char *features,
                                        bool *own) {
  *own = false;
  if ((!cpu || !strcmp(cpu, M->cpu)) && (!features || !strcmp(features, M->features))) return M->tm;
  LLVMTargetRef target = LLVMGetTargetMachineTarget(M->tm);
  char *triple = LLVMGetTargetMachineTriple(M->tm);
  LLVMTargetMachineRef tm =
      LLVMCreateTargetMachine(target, triple, cpu ? cpu : M->cpu, features ? features : M->features,
                              LLVMCodeGenLevelAggressive, LLVMRelocPIC, LLVMCodeModelDefault);
  LLVMDisposeMessage(triple);
  *own = tm != NULL;
  return tm;
}

int llvm_emit_object(LlvmModule *M, const char *path, const char *cpu, const char *features,
                     char *err, size_t cap) {
  if (!M || !M->mod)
    return fail(err, cap, "llvm_emit_object: the module was moved into a JIT", NULL);
  bool own;
  LLVMTargetMachineRef tm = machine_for(M, cpu, features, &own);
  if (!tm) return fail(err, cap, "LLVM: no target machine for that CPU", NULL);
  char *file = strdup(path), *msg = NULL;
  int rc = file ? LLVMTargetMachineEmitToFile(tm, M->mod, file, LLVMObjectFile, &msg) : 1;
  free(file);
  if (own) LLVMDisposeTargetMachine(tm);
  if (rc) {
    char what[512];
    snprintf(what, sizeof what, "%s: cannot write the object: ", path);
    return fail(err, cap, what, msg);
  }
  return 0;
}

int llvm_emit_text(LlvmModule *M, FILE *out, bool as_asm, char *err, size_t cap) {
  if (!M || !M->mod) return fail(err, cap, "llvm_emit_text: the module was moved into a JIT", NULL);
  if (!as_asm) {
    char *s = LLVMPrintModuleToString(M->mod);
    int rc = fputs(s, out) < 0 ? -1 : 0;
    LLVMDisposeMessage(s);
    return rc ? fail(err, cap, "cannot write the LLVM IR", NULL) : 0;
  }
  LLVMMemoryBufferRef buf = NULL;
  char *msg = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(M->tm, M->mod, LLVMAssemblyFile, &msg, &buf))
    return fail(err, cap, "LLVM assembly: ", msg);
  size_t n = LLVMGetBufferSize(buf);
  int rc = fwrite(LLVMGetBufferStart(buf), 1, n, out) == n ? 0 : -1;
  LLVMDisposeMemoryBuffer(buf);
  return rc ? fail(err, cap, "cannot write the assembly", NULL) : 0;
}
