/*
 * weights.c: checks a weights file given to --init against the program's parameter table
 * before anything is read from it.
 *
 * Every parameter must be present, by path, in its shape; every tensor of the file must be
 * used, unless the caller allows extras. All problems are listed, one line each, not only
 * the first: a file converted from another framework is usually wrong in many tensors at
 * once, and the fix is easier with the whole list. An unused tensor is shown with the
 * closest missing parameter path, a missing parameter with the closest unused tensor. A
 * 2-D tensor whose shape is the parameter's reversed is called out as PyTorch's (out, in)
 * nn.Linear layout; a square matrix cannot be told apart by its shape, so when the file
 * shows that layout anywhere, or its metadata says "format": "pt", the report says that
 * square projections need transposing too.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_impl.h"

/* A growing text of report lines. */
typedef struct Report {
    char *s;
    size_t len, cap;
} Report;

static void report_add(Report *r, const char *fmt, ...) RT_PRINTF(2, 3);
static void report_add(Report *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (r->len + (size_t)n + 2 > r->cap) {
        size_t cap = (r->len + (size_t)n + 2) * 2;
        char *s = realloc(r->s, cap);
        if (!s)
            return; /* the report is cut; the counts still refuse the file */
        r->s = s;
        r->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(r->s + r->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    r->len += (size_t)n;
    r->s[r->len++] = '\n';
    r->s[r->len] = 0;
}

/* Edit distance of a and b (names are compared by their first 255 bytes). */
static int distance(const char *a, const char *b) {
    int n = (int)strnlen(a, 255), m = (int)strnlen(b, 255);
    int row[256];
    for (int j = 0; j <= m; j++)
        row[j] = j;
    for (int i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= m; j++) {
            int up = row[j];
            int sub = diag + (a[i - 1] != b[j - 1]);
            int best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return row[m];
}

/* The closest of names[i] with used[i] == want (NULL if none is within half its length). */
static const char *closest(const char *name, const char *const *names, const char *used, char want, int n) {
    const char *best = NULL;
    int bd = (int)strnlen(name, 255) / 2 + 1;
    for (int i = 0; i < n; i++) {
        if (used[i] != want)
            continue;
        int d = distance(name, names[i]);
        if (d < bd) {
            bd = d;
            best = names[i];
        }
    }
    return best;
}

static int reversed_2d(const RtTensor *t, const RtParamSlot *p) {
    return t->ndim == 2 && p->rank == 2 && t->shape[0] == p->global_shape[1] && t->shape[1] == p->global_shape[0];
}

static int same_shape(const RtTensor *t, const RtParamSlot *p) {
    if (t->ndim != p->rank)
        return 0;
    for (int i = 0; i < p->rank; i++)
        if (t->shape[i] != p->global_shape[i]) /* whole tensors: each rank keeps its chunk */
            return 0;
    return 1;
}

/* Missing parameters and shape mismatches; used[j] marks the file's tensors that match. */
static void check_params(const RtParamSlot *params, int n, const RtSt *st, char *used, char *pmiss, Report *r,
                         RtInitCheck *c) {
    int nt = rt_st_count(st);
    for (int i = 0; i < n; i++) {
        const RtParamSlot *p = &params[i];
        const RtTensor *t = rt_st_find(st, p->path);
        pmiss[i] = !t;
        if (!t)
            continue;
        for (int j = 0; j < nt; j++)
            if (rt_st_tensor(st, j) == t)
                used[j] = 1;
        if (same_shape(t, p))
            continue;
        char got[160], want[160];
        rt_shape_text(got, sizeof got, t->shape, t->ndim);
        rt_shape_text(want, sizeof want, p->global_shape, p->rank);
        c->mismatched++;
        if (reversed_2d(t, p)) {
            c->transposed++;
            report_add(r,
                       "  tensor '%s': shape %s, expected %s: PyTorch's nn.Linear (out, in) layout? "
                       "axlc's projections are (in, out); transpose it",
                       p->path, got, want);
        } else {
            report_add(r, "  tensor '%s': shape %s, expected %s", p->path, got, want);
        }
    }
}

int rt_init_refuse_shard(const RtSt *st, const char *path, RtError *err) {
    if (!rt_st_meta(st, "axlc.regions"))
        return 0;
    return rt_error_set(err,
                        "--init: %s: one rank's file of a sharded checkpoint: it holds only that rank's parts "
                        "of the tensors; --init takes whole weights (axlc convert --to hf the step "
                        "directory, then --from hf, writes them)",
                        path);
}

int rt_init_check(const RtParamSlot *params, int n, const RtSt *st, int allow_unused, RtInitCheck *c) {
    memset(c, 0, sizeof *c);
    int nt = rt_st_count(st);
    char *used = calloc((size_t)nt + 1, 1), *pmiss = calloc((size_t)n + 1, 1);
    const char **tnames = malloc(((size_t)nt + 1) * sizeof *tnames);
    const char **pnames = malloc(((size_t)n + 1) * sizeof *pnames);
    if (!used || !pmiss || !tnames || !pnames) {
        free(used), free(pmiss), free(tnames), free(pnames);
        return -1;
    }
    for (int j = 0; j < nt; j++)
        tnames[j] = rt_st_tensor(st, j)->name;
    for (int i = 0; i < n; i++)
        pnames[i] = params[i].path;
    Report r = {0};
    check_params(params, n, st, used, pmiss, &r, c);
    for (int i = 0; i < n; i++) {
        if (!pmiss[i])
            continue;
        c->missing++;
        const char *near = closest(pnames[i], tnames, used, 0, nt);
        report_add(&r, "  missing: '%s'%s%s%s", pnames[i], near ? " (closest unused tensor: '" : "", near ? near : "",
                   near ? "')" : "");
    }
    for (int j = 0; j < nt; j++) {
        if (used[j])
            continue;
        c->unused++;
        const char *near = closest(tnames[j], pnames, pmiss, 1, n);
        report_add(&r, "  %s: '%s'%s%s%s", allow_unused ? "unused (allowed)" : "unused", tnames[j],
                   near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
    }
    const char *fmt = rt_st_meta(st, "format");
    c->pytorch = (fmt && strcmp(fmt, "pt") == 0) || c->transposed > 0;
    if (c->pytorch)
        report_add(&r,
                   "  note: %s; axlc stores projections (in, out) and nn.Linear weights are (out, in): "
                   "square ones (dim x dim) need transposing too, and their shape cannot show it",
                   c->transposed ? "some tensors are in PyTorch's (out, in) layout"
                                 : "the file's metadata says \"format\": \"pt\" (PyTorch)");
    c->report = r.s;
    free(used), free(pmiss), free(tnames), free(pnames);
    return 0;
}
