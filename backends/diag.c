/*
 * diag.c: how a backend reports a user error (backend.h: BackendDiag).
 *
 * Backends know nothing of the config reader's diagnostics: a message goes to the job's sink,
 * which the driver points at its own (driver.h: drv_backend_diag), so that what the user reads
 * is the same whichever layer found the mistake. The sink formats the message itself, so that
 * this layer keeps no copy of the driver's formatting.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

int backend_error(const BackendDiag *d, const char *file, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (d && d->report) {
    d->report(d->ctx, file, path, fmt, ap);
  } else { /* no sink: the message as the driver would print it */
    fprintf(stderr, "error: %s%s%s%s", file ? file : "", file ? ": " : "",
            path && *path ? path : "", path && *path ? ": " : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
  }
  va_end(ap);
  return -1;
}
