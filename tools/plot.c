/*
 * plot.c: `axlc plot METRICS.jsonl [MORE.jsonl ...] -o FILE.svg`, trainers' metrics as one SVG.
 *
 * Reads the JSON lines a trainer writes with --metrics (docs/runtime.md: step, loss,
 * grad_norm, lr, tokens_per_s, eval_loss on eval steps; null for a value that was not
 * finite) and draws four panels against the step, one above the other: the loss with the eval
 * loss, the learning rate, the gradient norm, tokens per second; and, when a file has them
 * (trainers write them since goodput and MFU were added), a fifth: goodput (the job's share of
 * wall time in steps that count) with MFU (model FLOP utilization) of each step, both in percent.
 * Each panel has its own y axis with round tick values, and the x axis is shared. A null value
 * breaks its line. The SVG is plain text with no scripts or external references, so any viewer
 * shows it.
 *
 * Several files (two runs to compare: bf16 against f32, two learning rates) share the panels
 * and their axes: each file is one color in every panel (its eval loss as dots of that
 * color), and each panel has a legend naming the files, or the labels given for them. One
 * file draws as it always did: a color per metric.
 *
 * Its size does not grow with the file: each panel is split into pixel columns, and a line
 * draws, of the values whose steps fall in one column, only the first and last (by step) and
 * the smallest and largest, so a million steps draw the same picture as every point would,
 * in at most four points a column. A value that is not finite (null, or NaN and Infinity,
 * which json-c also reads) is not drawn: it breaks its line, and the panel says how many there
 * were. Axis ranges come from the finite values alone, and the arithmetic on them works in
 * halves, so that values up to +-1.8e308 still give finite coordinates.
 */
#include <errno.h>
#include <float.h>
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h" /* base_xmalloc: the compiler's allocator */
#include "runtime/axrt.h"
#include "tools/plot.h"

enum { COL_LOSS, COL_EVAL, COL_LR, COL_GNORM, COL_TOKS, COL_GOODPUT, COL_MFU, NCOL };
static const char *const COL_KEY[NCOL] = {"loss",         "eval_loss", "lr", "grad_norm",
                                          "tokens_per_s", "goodput",   "mfu"};
/* Columns drawn in percent (the file holds fractions). */
static bool col_percent(int c) { return c == COL_GOODPUT || c == COL_MFU; }

typedef struct Series {
  double *step;       /* (n) */
  double *v[NCOL];    /* (n) each; NAN where absent or not finite */
  long bad[NCOL];     /* values present but not finite (null, NaN, Infinity, not a number) */
  long present[NCOL]; /* lines that hold the key */
  int n, cap;
} Series;

/* Page geometry, in SVG user units. */
#define W       960.0
#define PANEL_H 210.0
#define LEFT    90.0
#define RIGHT   30.0
#define TOP     64.0
#define GAP     40.0

static void series_push(Series *s) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 256;
    s->step = base_xrealloc(s->step, (size_t)cap * sizeof *s->step);
    for (int c = 0; c < NCOL; c++) s->v[c] = base_xrealloc(s->v[c], (size_t)cap * sizeof *s->v[c]);
    s->cap = cap;
  }
  s->n++;
}

static void series_free(Series *s) {
  free(s->step);
  for (int c = 0; c < NCOL; c++) free(s->v[c]);
}

/* One metrics line into the next row; 1 for a blank line, -1 (with why) for a bad one. */
static int parse_line(Series *s, const char *line, char *why, size_t cap) {
  while (*line == ' ' || *line == '\t' || *line == '\r') line++;
  if (!*line || *line == '\n') return 1;
  json_object *o = json_tokener_parse(line);
  json_object *step = NULL;
  if (!o || json_object_get_type(o) != json_type_object ||
      !json_object_object_get_ex(o, "step", &step) || json_object_get_type(step) != json_type_int) {
    snprintf(why, cap, "expected a JSON object with an integer \"step\" (a --metrics line)");
    json_object_put(o);
    return -1;
  }
  series_push(s);
  int i = s->n - 1;
  s->step[i] = (double)json_object_get_int64(step);
  for (int c = 0; c < NCOL; c++) {
    json_object *v = NULL;
    bool present = json_object_object_get_ex(o, COL_KEY[c], &v);
    bool num = present && (json_object_get_type(v) == json_type_double ||
                           json_object_get_type(v) == json_type_int);
    s->v[c][i] = num ? json_object_get_double(v) * (col_percent(c) ? 100 : 1) : NAN;
    s->present[c] += present;
    if (!isfinite(s->v[c][i])) s->v[c][i] = NAN, s->bad[c] += present;
  }
  json_object_put(o);
  return 0;
}

static int read_metrics(FILE *f, const char *path, Series *s) {
  char *line = NULL, why[128];
  size_t cap = 0;
  int rc = 0;
  for (long no = 1; getline(&line, &cap, f) >= 0; no++) {
    if (parse_line(s, line, why, sizeof why) < 0) {
      fprintf(stderr, "error: %s:%ld: %s\n", path, no, why);
      rc = -1;
      break;
    }
  }
  free(line);
  if (rc == 0 && ferror(f)) {
    fprintf(stderr, "error: %s: read failed: %s\n", path, strerror(errno));
    rc = -1;
  }
  if (rc == 0 && s->n == 0) {
    fprintf(stderr,
            "error: %s: no metrics lines (expected the file a trainer writes with --metrics)\n",
            path);
    rc = -1;
  }
  return rc;
}

/* Makes [*lo, *hi] (finite, lo <= hi) a range a panel can divide: wider than the rounding of
 * doubles at its magnitude (else ticks and coordinates would repeat), kept within the doubles.
 * A single value gets 10% of itself on each side. */
static void range_fix(double *lo, double *hi) {
  double mag = fmax(fabs(*lo), fabs(*hi));
  if (*hi / 2 - *lo / 2 >= fmax(mag * 1e-9, 1e-300)) return;
  double mid = *lo / 2 + *hi / 2, d = fabs(mid) * 0.1;
  if (!(d >= 1e-300)) d = 1;
  *lo = fmax(mid - d, -DBL_MAX), *hi = fmin(mid + d, DBL_MAX);
}

/* Range of the finite values of columns c0..c1 of s (range_fix'ed); false if none. */
static bool value_range(const Series *s, int c0, int c1, double *lo, double *hi) {
  *lo = INFINITY, *hi = -INFINITY;
  for (int c = c0; c <= c1; c++)
    for (int i = 0; i < s->n; i++)
      if (isfinite(s->v[c][i])) *lo = fmin(*lo, s->v[c][i]), *hi = fmax(*hi, s->v[c][i]);
  if (*lo > *hi) return false;
  range_fix(lo, hi);
  return true;
}

/* A round tick spacing giving about 5 ticks over [lo, hi]: 1, 2 or 5 times a power of 10. */
static double tick_step(double lo, double hi) {
  double raw = (hi / 2 - lo / 2) / 2.5, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/* The ticks k * dy in [lo, hi], at most 64 of them: k from the first (returned) to *last.
 * Counted, not summed: y += dy would stop moving where dy is below the rounding of y. */
static double tick_first(double lo, double hi, double dy, double *last) {
  double k0 = ceil(lo / dy);
  *last = fmin(floor(hi / dy), k0 + 63);
  return k0;
}

typedef struct Panel {
  double x0, y0, w, h;       /* plot area */
  double xlo, xhi, ylo, yhi; /* data range */
} Panel;

/* In halves: x - xlo and xhi - xlo may be over DBL_MAX, their halves never are. */
static double px(const Panel *p, double x) {
  return p->x0 + (x / 2 - p->xlo / 2) / (p->xhi / 2 - p->xlo / 2) * p->w;
}
static double py(const Panel *p, double y) {
  return p->y0 + p->h - (y / 2 - p->ylo / 2) / (p->yhi / 2 - p->ylo / 2) * p->h;
}

static void draw_axes(FILE *f, const Panel *p, const char *title, bool xlabels) {
  fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='#fafafa' stroke='#888'/>\n",
          p->x0, p->y0, p->w, p->h);
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='15' font-weight='bold'>%s</text>\n", p->x0,
          p->y0 - 8, title);
  double dy = tick_step(p->ylo, p->yhi), klast;
  for (double k = tick_first(p->ylo, p->yhi, dy, &klast); k <= klast; k++) {
    double y = k * dy, yy = py(p, fabs(y) < dy * 1e-9 ? 0 : y);
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", p->x0, yy,
            p->x0 + p->w, yy);
    double v = fabs(y) < dy * 1e-9 ? 0 : y;
    /* whole numbers in full (tokens/s: 35000, not 3.5e+04) */
    fprintf(f,
            dy >= 1 && fabs(v) < 1e9
                ? "<text x='%.1f' y='%.1f' font-size='12' text-anchor='end'>%.0f</text>\n"
                : "<text x='%.1f' y='%.1f' font-size='12' text-anchor='end'>%.4g</text>\n",
            p->x0 - 6, yy + 4, v);
  }
  double dx = tick_step(p->xlo, p->xhi);
  if (dx < 1) dx = 1; /* steps are integers */
  for (double k = tick_first(p->xlo, p->xhi, dx, &klast); k <= klast; k++) {
    double x = k * dx, xx = px(p, x);
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", xx, p->y0, xx,
            p->y0 + p->h);
    if (xlabels)
      fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle'>%.0f</text>\n", xx,
              p->y0 + p->h + 16, x);
  }
}

/* One pixel column of a panel, for one series: the rows drawn of those whose steps fall in it. */
typedef struct Pixel {
  int first, last, lo, hi;  /* finite rows: smallest and largest step, value; -1: none */
  bool gap_left, gap_right; /* a non-finite value before first or after last (by step) */
  bool gap;                 /* non-finite values only */
} Pixel;

static int pixel_of(const Panel *p, double step, int npix) {
  double x = floor(px(p, step) - p->x0);
  return !(x >= 0) ? 0 : x >= npix ? npix - 1 : (int)x;
}

/* Column c of s reduced to the panel's pixel columns (npix of them). */
static void pixels_fill(const Panel *p, const Series *s, int c, Pixel *px_, int npix) {
  for (int k = 0; k < npix; k++) px_[k] = (Pixel){-1, -1, -1, -1, false, false, false};
  for (int i = 0; i < s->n; i++) {
    double v = s->v[c][i], x = s->step[i];
    if (!isfinite(v)) continue;
    Pixel *q = &px_[pixel_of(p, x, npix)];
    if (q->first < 0 || x < s->step[q->first]) q->first = i;
    if (q->last < 0 || x >= s->step[q->last]) q->last = i;
    if (q->lo < 0 || v < s->v[c][q->lo]) q->lo = i;
    if (q->hi < 0 || v > s->v[c][q->hi]) q->hi = i;
  }
  for (int i = 0; i < s->n; i++) {
    double x = s->step[i];
    if (isfinite(s->v[c][i])) continue;
    Pixel *q = &px_[pixel_of(p, x, npix)];
    if (q->first < 0)
      q->gap = true;
    else if (x < s->step[q->first])
      q->gap_left = true;
    else if (x > s->step[q->last])
      q->gap_right = true;
    /* else between two finite values of one pixel column: too close to show */
  }
}

/* The rows of q in step order (then file order), each once: at most 4. */
static int pixel_rows(const Series *s, const Pixel *q, int rows[4]) {
  int cand[4] = {q->first, q->lo, q->hi, q->last}, n = 0;
  for (int a = 0; a < 4; a++) {
    bool dup = false;
    for (int b = 0; b < n; b++) dup |= rows[b] == cand[a];
    if (!dup) rows[n++] = cand[a];
  }
  for (int a = 1; a < n; a++) /* insertion sort of at most 4 */
    for (int b = a; b > 0; b--) {
      int r = rows[b - 1], t = rows[b];
      if (s->step[r] < s->step[t] || (s->step[r] == s->step[t] && r < t)) break;
      rows[b - 1] = t, rows[b] = r;
    }
  return n;
}

/* Column c as polylines (a non-finite value ends one) and, for sparse columns, dots: per
 * pixel column at most the 4 rows of pixel_rows, and dots at its smallest and largest. */
static void draw_line(FILE *f, const Panel *p, const Series *s, int c, const char *color,
                      bool dots) {
  int npix = (int)p->w + 1;
  Pixel *pix = base_xmalloc((size_t)npix * sizeof *pix);
  pixels_fill(p, s, c, pix, npix);
  bool open = false, gap = false;
  for (int k = 0; k < npix; k++) {
    const Pixel *q = &pix[k];
    if (q->first < 0) {
      gap |= q->gap;
      continue;
    }
    if (open && (gap || q->gap_left)) fprintf(f, "'/>\n"), open = false;
    if (!open)
      fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2'%s points='", color,
              c == COL_MFU ? " stroke-dasharray='6,3'" : "");
    open = true;
    int rows[4], n = pixel_rows(s, q, rows);
    for (int r = 0; r < n; r++)
      fprintf(f, "%.1f,%.1f ", px(p, s->step[rows[r]]), py(p, s->v[c][rows[r]]));
    gap = q->gap_right;
  }
  if (open) fprintf(f, "'/>\n");
  for (int k = 0; dots && k < npix; k++) {
    const Pixel *q = &pix[k];
    for (int r = 0; q->first >= 0 && r < (q->lo == q->hi ? 1 : 2); r++) {
      int i = r ? q->hi : q->lo;
      fprintf(f, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'/>\n", px(p, s->step[i]),
              py(p, s->v[c][i]), color);
    }
  }
  free(pix);
}

static void put_text(FILE *f, const char *t);

static void draw_legend(FILE *f, const Panel *p, const char *color, const char *label, int slot) {
  double x = p->x0 + p->w - 150, y = p->y0 + 18 + 18 * slot;
  fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='3'/>\n", x,
          y - 4, x + 24, y - 4, color);
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='13'>", x + 30, y);
  put_text(f, label); /* a file name may hold markup */
  fputs("</text>\n", f);
}

static void draw_empty(FILE *f, const Panel *p) {
  fprintf(f,
          "<text x='%.1f' y='%.1f' font-size='14' text-anchor='middle' fill='#888'>no finite "
          "values</text>\n",
          p->x0 + p->w / 2, p->y0 + p->h / 2);
}

/* The color of file j of several: every file one color in every panel. */
static const char *series_color(int j) {
  static const char *const color[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return color[j % (int)(sizeof color / sizeof *color)];
}

/* Panel k (0 at the top) of columns c0..c1 of the ns series s (named by name[] in the legend
 * when there are several). */
static void draw_panel(FILE *f, const Series *s, int ns, const char *const *name, int k, int nk,
                       int c0, int c1, const char *title, double xlo, double xhi) {
  Panel p = {LEFT, TOP + k * (PANEL_H + GAP), W - LEFT - RIGHT, PANEL_H, xlo, xhi, 0, 1};
  bool any = false;
  for (int j = 0; j < ns; j++) {
    double lo, hi;
    if (!value_range(&s[j], c0, c1, &lo, &hi)) continue;
    p.ylo = any ? fmin(p.ylo, lo) : lo, p.yhi = any ? fmax(p.yhi, hi) : hi, any = true;
  }
  if (any) {
    double pad = (p.yhi / 2 - p.ylo / 2) * 0.1;
    p.ylo = fmax(p.ylo - pad, -DBL_MAX), p.yhi = fmin(p.yhi + pad, DBL_MAX);
  }
  draw_axes(f, &p, title, k == nk - 1);
  long bad = 0;
  for (int j = 0; j < ns; j++)
    for (int c = c0; c <= c1; c++) bad += s[j].bad[c];
  if (bad)
    fprintf(f,
            "<text x='%.1f' y='%.1f' font-size='12' text-anchor='end' fill='#888'>%ld %s not "
            "finite: not drawn</text>\n",
            p.x0 + p.w, p.y0 - 8, bad, bad == 1 ? "value" : "values");
  if (!any) {
    draw_empty(f, &p);
    return;
  }
  if (ns > 1) {
    for (int j = 0; j < ns; j++) {
      for (int c = c0; c <= c1; c++) draw_line(f, &p, &s[j], c, series_color(j), c == COL_EVAL);
      draw_legend(f, &p, series_color(j), name[j], j);
    }
    return;
  }
  static const char *const color[NCOL] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                          "#9467bd", "#8c564b", "#e377c2"};
  for (int c = c0; c <= c1; c++) draw_line(f, &p, s, c, color[c], c == COL_EVAL);
  if (c1 > c0)
    for (int c = c0; c <= c1; c++) draw_legend(f, &p, color[c], COL_KEY[c], c - c0);
}

/* The text t as XML character data: markup escaped, control characters and bytes that are
 * not UTF-8 as '?' (a file name may hold any byte but '/' and NUL; XML may not). */
static void put_text(FILE *f, const char *t) {
  const unsigned char *c = (const unsigned char *)t;
  while (*c) {
    int n = *c < 0x80             ? 1
            : (*c & 0xe0) == 0xc0 ? 2
            : (*c & 0xf0) == 0xe0 ? 3
            : (*c & 0xf8) == 0xf0 ? 4
                                  : 0;
    bool ok = n > 0 && (*c >= 0x20 || *c == '\t') && *c != 0x7f && (n == 1 || *c >= 0xc2);
    for (int k = 1; ok && k < n; k++) ok = (c[k] & 0xc0) == 0x80;
    if (!ok)
      fputc('?', f), c++;
    else if (*c == '<' || *c == '>' || *c == '&')
      fputs(*c == '<' ? "&lt;" : *c == '>' ? "&gt;" : "&amp;", f), c++;
    else
      fwrite(c, 1, (size_t)n, f), c += n;
  }
}

static const char *base_name(const char *path) {
  return strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
}

/* The SVG of the ns series s into f (the caller closes it); name[j] names series j in the
 * title (one series) or the legends (several). */
static void write_svg(const Series *s, int ns, const char *const *name, FILE *f) {
  double xlo = s->step[0], xhi = s->step[0];
  for (int j = 0; j < ns; j++)
    for (int i = 0; i < s[j].n; i++) xlo = fmin(xlo, s[j].step[i]), xhi = fmax(xhi, s[j].step[i]);
  range_fix(&xlo, &xhi);
  bool efficiency = false; /* goodput and MFU: written by trainers that count them */
  for (int j = 0; j < ns; j++) efficiency |= s[j].present[COL_GOODPUT] + s[j].present[COL_MFU] > 0;
  int nk = efficiency ? 5 : 4;
  double h = TOP + nk * (PANEL_H + GAP) + 10;
  fprintf(f,
          "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' "
          "width='%.0f' height='%.0f' viewBox='0 0 %.0f %.0f' font-family='sans-serif'>\n",
          W, h, W, h);
  fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n");
  fprintf(f, "<text x='%.1f' y='24' font-size='17'>", LEFT);
  if (ns == 1) {
    put_text(f, name[0]);
    fprintf(f, ": %d steps (%.0f to %.0f)</text>\n", s->n, s->step[0], s->step[s->n - 1]);
  } else {
    for (int j = 0; j < ns; j++) {
      put_text(f, name[j]);
      fprintf(f, " (%d steps)%s", s[j].n, j + 1 < ns ? ", " : "");
    }
    fputs("</text>\n", f);
  }
  draw_panel(f, s, ns, name, 0, nk, COL_LOSS, COL_EVAL, "loss", xlo, xhi);
  draw_panel(f, s, ns, name, 1, nk, COL_LR, COL_LR, "learning rate", xlo, xhi);
  draw_panel(f, s, ns, name, 2, nk, COL_GNORM, COL_GNORM, "gradient norm (before clipping)", xlo,
             xhi);
  draw_panel(f, s, ns, name, 3, nk, COL_TOKS, COL_TOKS, "tokens per second", xlo, xhi);
  if (efficiency)
    draw_panel(f, s, ns, name, 4, nk, COL_GOODPUT, COL_MFU, "goodput (solid) and MFU (dashed), %",
               xlo, xhi);
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='13' text-anchor='middle'>step</text>\n</svg>\n",
          LEFT + (W - LEFT - RIGHT) / 2, h - 4);
}

int plot_metrics_stream(FILE *in, const char *name, FILE *out) {
  Series s = {0};
  int rc = read_metrics(in, name, &s);
  const char *base = base_name(name);
  if (rc == 0) write_svg(&s, 1, &base, out);
  series_free(&s);
  return rc;
}

/* Reads metrics file `path` into s; -1 with the error printed. */
static int read_metrics_file(const char *path, Series *s) {
  RtError err;
  FILE *in = rt_file_open(path, "r", &err);
  if (!in) {
    fprintf(stderr, "error: %s\n", err.msg);
    return -1;
  }
  int rc = read_metrics(in, path, s);
  fclose(in);
  return rc;
}

int plot_metrics_many(const char *const *metrics, const char *const *labels, int n,
                      const char *out) {
  Series *s = base_xcalloc((size_t)n, sizeof *s);
  const char **name = base_xcalloc((size_t)n, sizeof *name);
  FILE *f = NULL;
  int rc = -1, read = 0;
  while (read < n && read_metrics_file(metrics[read], &s[read]) == 0) {
    name[read] = labels ? labels[read] : base_name(metrics[read]);
    read++;
  }
  RtError err;
  if (read == n && !(f = rt_file_open(out, "w", &err)))
    fprintf(stderr, "error: %s\n", err.msg);
  else if (f) {
    write_svg(s, n, name, f);
    rc = 0;
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed) {
      fprintf(stderr, "error: %s: write failed: %s\n", out, strerror(errno));
      rc = -1;
    }
  }
  for (int j = 0; j < n; j++) series_free(&s[j]);
  free(s);
  free(name);
  return rc;
}

int plot_metrics(const char *metrics, const char *out) {
  return plot_metrics_many(&metrics, NULL, 1, out);
}
