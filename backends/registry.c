/*
 * registry.c: the table of backends and lookups by name and by target.
 *
 * A backend is in this axlc when its line is in backend_table; the order is
 * the order of `axlc backends` and of the names in messages. The LLVM
 * backend's line depends on the build having found LLVM 14
 * (backends/llvm/CMakeLists.txt).
 */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

const Backend *const backend_table[] = {
    &backend_interp,
#ifdef AXLC_HAVE_LLVM
    &backend_llvm,
#endif
#ifdef AXLC_HAVE_OPENCL
    &backend_opencl,
#endif
    NULL,
};

const Backend *backend_find(const char *name) {
  for (int i = 0; name && backend_table[i]; i++)
    if (!strcmp(backend_table[i]->name, name)) return backend_table[i];
  return NULL;
}

/* Whether the whole of `s` matches the extended regex `re`. */
static bool whole_match(const char *re, const char *s) {
  char anchored[256];
  snprintf(anchored, sizeof anchored, "^(%s)$", re);
  regex_t r;
  if (regcomp(&r, anchored, REG_EXTENDED | REG_NOSUB)) return false;
  bool m = regexec(&r, s, 0, NULL, 0) == 0;
  regfree(&r);
  return m;
}

const Backend *backend_for_target(const char *target) {
  for (int i = 0; target && backend_table[i]; i++)
    if (backend_table[i]->targets && whole_match(backend_table[i]->targets, target))
      return backend_table[i];
  return NULL;
}

void backend_names(char *buf, size_t cap) {
  size_t n = 0;
  if (cap) buf[0] = 0;
  for (int i = 0; backend_table[i] && n < cap; i++) {
    int w = snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", backend_table[i]->name);
    if (w < 0) break;
    n += (size_t)w;
  }
}

const BackendEmit *backend_emit_find(const Backend *b, const char *name) {
  for (const BackendEmit *e = b->emits; e && e->name; e++)
    if (!strcmp(e->name, name)) return e;
  return NULL;
}

bool backend_cache_dir_default(char *buf, size_t cap) { return rt_cache_dir(buf, cap) == 0; }
