/* check.c: the printed kernels checked with libclang at compile time.
 *
 * `axlc compile --target opencl` runs where the trainer will not: often a machine without
 * an OpenCL device. So the source is parsed here, as OpenCL C 1.2 with clang's OpenCL
 * builtin declarations, from memory (an unsaved file), and any error becomes a compile-time
 * error naming the kernel it is in (by its first line, OclKernels.kernel_line), the line and
 * column and clang's message. Warnings are not errors: the device compiler decides those.
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

int ocl_check_source(const OclKernels *k, char *err, size_t cap) {
  if (!err || cap == 0) return -1;
  err[0] = 0;
  CXIndex index = clang_createIndex(0, 0);
  struct CXUnsavedFile file = {SOURCE_NAME, k->source, (unsigned long)strlen(k->source)};
  const char *args[] = {"-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header"};
  CXTranslationUnit tu = NULL;
  enum CXErrorCode e = clang_parseTranslationUnit2(index, SOURCE_NAME, args, 5, &file, 1,
                                                   CXTranslationUnit_None, &tu);
  int errors = 0;
  if (e != CXError_Success || !tu) {
    snprintf(err, cap, "libclang could not parse the kernels (CXErrorCode %d)", (int)e);
    errors = 1;
  } else {
    unsigned n = clang_getNumDiagnostics(tu);
    for (unsigned i = 0; i < n; i++) {
      CXDiagnostic d = clang_getDiagnostic(tu, i);
      if (clang_getDiagnosticSeverity(d) >= CXDiagnostic_Error && errors < 3)
        report(k, d, errors, err, cap);
      if (clang_getDiagnosticSeverity(d) >= CXDiagnostic_Error) errors++;
      clang_disposeDiagnostic(d);
    }
    if (errors > 3) {
      size_t used = strlen(err);
      snprintf(err + used, cap - used, "; and %d more errors", errors - 3);
    }
    clang_disposeTranslationUnit(tu);
  }
  clang_disposeIndex(index);
  return errors ? -1 : 0;
}
