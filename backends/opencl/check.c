/* check.c: the printed kernels checked with libclang at compile time.
 *
 * `axlc compile --target opencl` runs where the trainer will not: often a machine without
 * an OpenCL device. So the source is parsed here, as OpenCL C 1.2 with clang's OpenCL
 * builtin declarations, from memory (an unsaved file), and any error becomes a compile-time
 * error naming the kernel it is in (by its first line, OclKernels.kernel_line), the line and
 * column and clang's message. Warnings are not errors: the device compiler decides those. A
 * source with tensor-core bodies (#if AX_MMA) is parsed once per body.
 */
#include <clang-c/Index.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/opencl.h"

#define SOURCE_NAME "axlc_kernels.cl"

/* The kernel holding source line `line`, or NULL (the shared prelude). */
static const char *kernel_at(const OclKernels *k, unsigned line) {
  const char *name = NULL;
  int32_t best = 0;
  for (int32_t i = 0; i < k->nlaunches; i++)
    if ((unsigned)k->kernel_line[i] <= line && k->kernel_line[i] > best) {
      best = k->kernel_line[i];
      name = k->launches[i].kernel;
    }
  return name;
}

/* Appends one error diagnostic to err (n errors so far). */
static void report(const OclKernels *k, CXDiagnostic d, int n, char *err, size_t cap) {
  CXSourceLocation loc = clang_getDiagnosticLocation(d);
  unsigned line = 0, col = 0;
  clang_getSpellingLocation(loc, NULL, &line, &col, NULL);
  CXString msg = clang_getDiagnosticSpelling(d);
  const char *kernel = kernel_at(k, line);
  size_t used = strlen(err);
  snprintf(err + used, cap - used, "%skernel %s (%s:%u:%u): %s", n ? "; " : "",
           kernel ? kernel : "(prelude)", SOURCE_NAME, line, col, clang_getCString(msg));
  clang_disposeString(msg);
}

/* The bodies one source carries (gemm.c): the SIMT kernels; with AX_MMA, the tensor-core
 * body's emulation and its PTX form (NVIDIA's compiler takes `asm`, which clang's OpenCL C
 * spells __asm__; parsed for the host's target: libclang finds no OpenCL header for nvptx). */
static const struct {
  const char *what;
  int nargs;
  const char *args[3];
} bodies[] = {
    {"", 0, {0}},
    {" (the emulated tensor-core body, -DAX_MMA=2)", 1, {"-DAX_MMA=2"}},
    {" (the PTX tensor-core body, -DAX_MMA=1)", 2, {"-DAX_MMA=1", "-Dasm=__asm__"}},
};

/* Parses the source as one body; returns its errors, the first three reported into err. */
static int check_body(const OclKernels *k, int body, int before, char *err, size_t cap) {
  CXIndex index = clang_createIndex(0, 0);
  struct CXUnsavedFile file = {SOURCE_NAME, k->source, (unsigned long)strlen(k->source)};
  const char *args[8] = {"-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header"};
  int nargs = 5;
  for (int i = 0; i < bodies[body].nargs; i++) args[nargs++] = bodies[body].args[i];
  CXTranslationUnit tu = NULL;
  enum CXErrorCode e = clang_parseTranslationUnit2(index, SOURCE_NAME, args, nargs, &file, 1,
                                                   CXTranslationUnit_None, &tu);
  int errors = 0;
  if (e != CXError_Success || !tu) {
    snprintf(err, cap, "libclang could not parse the kernels%s (CXErrorCode %d)", bodies[body].what,
             (int)e);
    errors = 1;
  } else {
    unsigned n = clang_getNumDiagnostics(tu);
    for (unsigned i = 0; i < n; i++) {
      CXDiagnostic d = clang_getDiagnostic(tu, i);
      if (clang_getDiagnosticSeverity(d) >= CXDiagnostic_Error && before + errors < 3) {
        report(k, d, before + errors, err, cap);
        if (*bodies[body].what) {
          size_t used = strlen(err);
          snprintf(err + used, cap - used, "%s", bodies[body].what);
        }
      }
      if (clang_getDiagnosticSeverity(d) >= CXDiagnostic_Error) errors++;
      clang_disposeDiagnostic(d);
    }
    clang_disposeTranslationUnit(tu);
  }
  clang_disposeIndex(index);
  return errors;
}

int ocl_check_source(const OclKernels *k, char *err, size_t cap) {
  if (!err || cap == 0) return -1;
  err[0] = 0;
  bool mma = strstr(k->source, "#if AX_MMA") != NULL;
  int errors = 0;
  for (int b = 0; b < (mma ? 3 : 1); b++) errors += check_body(k, b, errors, err, cap);
  if (errors > 3) {
    size_t used = strlen(err);
    snprintf(err + used, cap - used, "; and %d more errors", errors - 3);
  }
  return errors ? -1 : 0;
}
