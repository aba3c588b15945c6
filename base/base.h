/*
 * base.h: the ground floor under every compiler layer (ir/, frontend/, passes/, backends/,
 * driver/, launch/, tools/): the allocator that aborts, and running a tool and waiting for it.
 * It includes nothing of axlc, so a layer that needs only these (launch/, tools/plot.c) links
 * axlc_base and not the IR. The runtime (libaxrt) does not use it: a trainer reports its
 * allocation failures as errors of its own.
 */
#ifndef AXLC_BASE_H
#define AXLC_BASE_H

#include <stddef.h>

/* ======================================================================== alloc.c */

/* The compiler's allocator: prints "axlc: out of memory (N bytes)" and aborts rather than return
 * NULL. All compiler code uses these, except for allocations sized by user data (tensor elements),
 * which are checked and reported as user errors (docs/design.md, "Errors and out-of-memory"). */
void *base_xmalloc(size_t n);
void *base_xcalloc(size_t n, size_t size);
void *base_xrealloc(void *p, size_t n);
char *base_xstrdup(const char *s);
/* a, sep and b joined into a malloc'd string ("DIR", "/", "NAME"); aborts when out of memory. */
char *base_join(const char *a, const char *sep, const char *b);

/* ======================================================================== proc.c */

/* Runs argv (NULL-terminated; argv[0] is looked up on PATH) and waits: its exit status, 128 +
 * the signal that ended it, or -1 if it could not be started (127: exec failed). */
int base_run(char *const *argv);
/* base_run, with the tool's stderr passed on and kept in log: all of it when it fits in cap - 1
 * bytes, else its first cap / 4 bytes and its last ones. */
int base_run_log(char *const *argv, char *log, size_t cap);
/* base_run with the tool's stdout written to the file out (created or truncated). */
int base_run_to_file(char *const *argv, const char *out);
/* The full path of the executable `name` on PATH (malloc'd), or NULL. */
char *base_which(const char *name);

#endif /* AXLC_BASE_H */
