/*
 * diag.c: user-facing diagnostics.
 *
 * Library code records messages here and returns -1; only the driver prints
 * them and picks the exit status. A message names the file, the JSON path and
 * what was expected, so the user can go straight to the mistake.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

void fe_diag_init(FeDiag *d) { memset(d, 0, sizeof *d); }

void fe_diag_free(FeDiag *d) {
  for (int i = 0; i < d->n; i++) free(d->msgs[i]);
  for (int i = 0; i < d->npool; i++) free(d->pool[i]);
  fe_origins_free(d);
  free(d->files);
  free(d->msgs);
  free(d->pool);
  memset(d, 0, sizeof *d);
}

char *fe_vasprintf(const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  char *s = base_xrealloc(NULL, n > 0 ? (size_t)n + 1 : 1);
  vsnprintf(s, n > 0 ? (size_t)n + 1 : 1, fmt, again);
  va_end(again);
  return s;
}

char *fe_asprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = fe_vasprintf(fmt, ap);
  va_end(ap);
  return s;
}

/* Messages are sized to fit: a long file name or path never cuts off the reason. */
int fe_error(FeDiag *d, const char *file, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *body = fe_vasprintf(fmt, ap);
  va_end(ap);
  char *msg = fe_asprintf("%s%s%s%s%s", file ? file : "", file ? ": " : "",
                          path && *path ? path : "", path && *path ? ": " : "", body);
  free(body);
  if (d->n == d->cap) {
    d->cap = d->cap ? 2 * d->cap : 8;
    d->msgs = base_xrealloc(d->msgs, (size_t)d->cap * sizeof *d->msgs);
  }
  d->msgs[d->n++] = msg;
  return -1;
}

void fe_diag_print(const FeDiag *d, FILE *out) {
  for (int i = 0; i < d->n; i++) fprintf(out, "error: %s\n", d->msgs[i]);
}

const char *fe_intern(FeDiag *d, const char *s) {
  for (int i = 0; i < d->npool; i++)
    if (strcmp(d->pool[i], s) == 0) return d->pool[i];
  if (d->npool == d->cappool) {
    d->cappool = d->cappool ? 2 * d->cappool : 8;
    d->pool = base_xrealloc(d->pool, (size_t)d->cappool * sizeof *d->pool);
  }
  d->pool[d->npool] = base_xstrdup(s);
  return d->pool[d->npool++];
}

/* Levenshtein distance, bounded to short identifiers. */
static int edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 99;
  int row[64];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int prev = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int cur = row[j];
      int sub = prev + (a[i - 1] != b[j - 1]);
      int del = row[j] + 1, ins = row[j - 1] + 1;
      row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
      prev = cur;
    }
  }
  return row[lb];
}

const char *fe_nearest(const char *word, const char *const *cands, int n) {
  const char *best = NULL;
  int bestd = 1 << 30;
  for (int i = 0; i < n; i++) {
    int dd = edit_distance(word, cands[i]);
    if (dd < bestd) bestd = dd, best = cands[i];
  }
  /* Close enough to be a typo: at most a third of the word, at least 2. */
  int limit = (int)strlen(word) / 3;
  if (limit < 2) limit = 2;
  return bestd <= limit ? best : NULL;
}
