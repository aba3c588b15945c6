/* buf.c: a growing string for the printers (running out of memory aborts, base/alloc.c). */
#include <stdarg.h>
#include <stdlib.h>

#include "backends/opencl/opencl.h"

void ocl_buf_printf(OclBuf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    if (b->s && b->n + (size_t)w < b->cap) {
      b->n += (size_t)w;
      return;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap <= b->n + (size_t)w) cap *= 2;
    char *s = base_xrealloc(b->s, cap);
    if (!b->s) s[0] = 0;
    b->s = s;
    b->cap = cap;
  }
}

void ocl_buf_free(OclBuf *b) {
  free(b->s);
  *b = (OclBuf){0};
}
