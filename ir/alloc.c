/* alloc.c: the compiler's one allocator. Running out of memory while compiling is not an error a
 * user can act on, so every allocation of compiler code (ir/, frontend/, passes/, driver/,
 * backends/, tools/) that is not sized by user data goes through these: they print
 * "axlc: out of memory (N bytes)" and abort, and never return NULL. Allocations sized by user
 * data (a tensor's elements in the interpreter, a checkpoint's tensors in convert) keep plain
 * malloc and report a user error (docs/design.md, "Errors and out-of-memory").
 */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

static void *oom(size_t n) {
  fprintf(stderr, "axlc: out of memory (%zu bytes)\n", n);
  abort();
}

void *ir_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  return p ? p : oom(n);
}

void *ir_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  return p ? p : oom(n * size);
}

void *ir_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  return q ? q : oom(n);
}

char *ir_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(ir_xmalloc(n), s, n);
}
