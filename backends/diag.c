/*
 * diag.c: how a backend reports a user error (backend.h: BackendDiag).
 *
 * Backends know nothing of the config reader's diagnostics: a message goes to the job's sink,
 * which the driver points at its own (driver.h: drv_backend_diag), so that what the user reads
 * is the same whichever layer found the mistake.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/backend.h"

static char *vformat(const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  char *s = malloc(n > 0 ? (size_t)n + 1 : 1);
  if (!s) {
    fprintf(stderr, "axlc: out of memory\n");
    abort();
  }
  vsnprintf(s, n > 0 ? (size_t)n + 1 : 1, fmt, again);
  va_end(again);
  return s;
}

char *backend_asprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

int backend_error(const BackendDiag *d, const char *file, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = vformat(fmt, ap);
  va_end(ap);
  if (d && d->report)
    d->report(d->ctx, file, path, msg);
  else /* no sink: the message as the driver would print it */
    fprintf(stderr, "error: %s%s%s%s%s\n", file ? file : "", file ? ": " : "",
            path && *path ? path : "", path && *path ? ": " : "", msg);
  free(msg);
  return -1;
}
