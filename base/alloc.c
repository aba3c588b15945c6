/* alloc.c: the compiler's one allocator (base.h). Running out of memory while compiling is not an
 * error a user can act on, so every allocation of compiler code (ir/, frontend/, passes/, driver/,
 * backends/, tools/) that is not sized by user data goes through these: they print
 * "axlc: out of memory (N bytes)" and abort, and never return NULL. Allocations sized by user
 * data (a tensor's elements in the interpreter, a checkpoint's tensors in convert) keep plain
 * malloc and report a user error (docs/design.md, "Errors and out-of-memory").
 */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *oom(size_t n) {
  fprintf(stderr, "axlc: out of memory (%zu bytes)\n", n);
  abort();
}

void *base_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  return p ? p : oom(n);
}

void *base_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  return p ? p : oom(n * size);
}

void *base_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  return q ? q : oom(n);
}

char *base_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(base_xmalloc(n), s, n);
}

char *base_join(const char *a, const char *sep, const char *b) {
  size_t na = strlen(a), ns = strlen(sep), nb = strlen(b);
  char *s = base_xmalloc(na + ns + nb + 1);
  memcpy(s, a, na);
  memcpy(s + na, sep, ns);
  memcpy(s + na + ns, b, nb + 1);
  return s;
}
