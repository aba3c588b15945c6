/*
 * plot.c: `axlc plot METRICS.jsonl -o FILE.svg`, a trainer's metrics as one SVG.
 *
 * Reads the JSON lines a trainer writes with --metrics (docs/runtime.md: step, loss,
 * grad_norm, lr, tokens_per_s, eval_loss on eval steps; null for a value that was not
 * finite) and draws four panels against the step, one above the other: the loss with the eval
 * loss, the learning rate, the gradient norm, tokens per second. Each panel has its own y
 * axis with round tick values, and the x axis is shared. A null value breaks its line. The
 * SVG is plain text with no scripts or external references, so any viewer shows it.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/plot.h"

enum { COL_LOSS, COL_EVAL, COL_LR, COL_GNORM, COL_TOKS, NCOL };
static const char *const COL_KEY[NCOL] = {"loss", "eval_loss", "lr", "grad_norm", "tokens_per_s"};

typedef struct Series {
  double *step;    /* (n) */
  double *v[NCOL]; /* (n) each; NAN where absent or null */
  int n, cap;
} Series;

/* Page geometry, in SVG user units. */
#define W       960.0
#define PANEL_H 210.0
#define LEFT    90.0
#define RIGHT   30.0
#define TOP     64.0
#define GAP     40.0

static int series_push(Series *s) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 256;
    double *p = realloc(s->step, (size_t)cap * sizeof *p);
    if (!p) return -1;
    s->step = p;
    for (int c = 0; c < NCOL; c++) {
      p = realloc(s->v[c], (size_t)cap * sizeof *p);
      if (!p) return -1;
      s->v[c] = p;
    }
    s->cap = cap;
  }
  s->n++;
  return 0;
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
  if (series_push(s)) {
    json_object_put(o);
    snprintf(why, cap, "out of memory");
    return -1;
  }
  int i = s->n - 1;
  s->step[i] = (double)json_object_get_int64(step);
  for (int c = 0; c < NCOL; c++) {
    json_object *v = NULL;
    bool num =
        json_object_object_get_ex(o, COL_KEY[c], &v) &&
        (json_object_get_type(v) == json_type_double || json_object_get_type(v) == json_type_int);
    s->v[c][i] = num ? json_object_get_double(v) : NAN;
  }
  json_object_put(o);
  return 0;
}

static int read_metrics(const char *path, Series *s) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "error: %s: cannot open: %s\n", path, strerror(errno));
    return -1;
  }
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
  fclose(f);
  if (rc == 0 && s->n == 0) {
    fprintf(stderr,
            "error: %s: no metrics lines (expected the file a trainer writes with --metrics)\n",
            path);
    rc = -1;
  }
  return rc;
}

/* Range of the finite values of columns c0..c1 of s (lo == hi widened); false if none. */
static bool value_range(const Series *s, int c0, int c1, double *lo, double *hi) {
  *lo = INFINITY, *hi = -INFINITY;
  for (int c = c0; c <= c1; c++)
    for (int i = 0; i < s->n; i++)
      if (isfinite(s->v[c][i])) *lo = fmin(*lo, s->v[c][i]), *hi = fmax(*hi, s->v[c][i]);
  if (*lo > *hi) return false;
  if (*lo == *hi) {
    double d = *lo ? fabs(*lo) * 0.1 : 1.0;
    *lo -= d, *hi += d;
  }
  return true;
}

/* A round tick spacing giving about 5 ticks over [lo, hi]: 1, 2 or 5 times a power of 10. */
static double tick_step(double lo, double hi) {
  double raw = (hi - lo) / 5, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

typedef struct Panel {
  double x0, y0, w, h;       /* plot area */
  double xlo, xhi, ylo, yhi; /* data range */
} Panel;

static double px(const Panel *p, double x) {
  return p->x0 + (x - p->xlo) / (p->xhi - p->xlo) * p->w;
}
static double py(const Panel *p, double y) {
  return p->y0 + p->h - (y - p->ylo) / (p->yhi - p->ylo) * p->h;
}

static void draw_axes(FILE *f, const Panel *p, const char *title, bool xlabels) {
  fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='#fafafa' stroke='#888'/>\n",
          p->x0, p->y0, p->w, p->h);
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='15' font-weight='bold'>%s</text>\n", p->x0,
          p->y0 - 8, title);
  double dy = tick_step(p->ylo, p->yhi);
  for (double y = ceil(p->ylo / dy) * dy; y <= p->yhi + dy * 1e-9; y += dy) {
    double yy = py(p, fabs(y) < dy * 1e-9 ? 0 : y);
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
  for (double x = ceil(p->xlo / dx) * dx; x <= p->xhi + dx * 1e-9; x += dx) {
    double xx = px(p, x);
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", xx, p->y0, xx,
            p->y0 + p->h);
    if (xlabels)
      fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle'>%.0f</text>\n", xx,
              p->y0 + p->h + 16, x);
  }
}

/* Column c as polylines (a non-finite value ends one) and, for sparse columns, dots. */
static void draw_line(FILE *f, const Panel *p, const Series *s, int c, const char *color,
                      bool dots) {
  bool open = false;
  for (int i = 0; i < s->n; i++) {
    double v = s->v[c][i];
    if (!isfinite(v)) {
      if (open) fprintf(f, "'/>\n");
      open = false;
      continue;
    }
    if (!open) fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", color);
    fprintf(f, "%.1f,%.1f ", px(p, s->step[i]), py(p, v));
    open = true;
  }
  if (open) fprintf(f, "'/>\n");
  for (int i = 0; dots && i < s->n; i++)
    if (isfinite(s->v[c][i]))
      fprintf(f, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'/>\n", px(p, s->step[i]),
              py(p, s->v[c][i]), color);
}

static void draw_legend(FILE *f, const Panel *p, const char *color, const char *label, int slot) {
  double x = p->x0 + p->w - 150, y = p->y0 + 18 + 18 * slot;
  fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='3'/>\n", x,
          y - 4, x + 24, y - 4, color);
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='13'>%s</text>\n", x + 30, y, label);
}

static void draw_empty(FILE *f, const Panel *p) {
  fprintf(f,
          "<text x='%.1f' y='%.1f' font-size='14' text-anchor='middle' fill='#888'>no finite "
          "values</text>\n",
          p->x0 + p->w / 2, p->y0 + p->h / 2);
}

/* Panel k (0 at the top) of columns c0..c1. */
static void draw_panel(FILE *f, const Series *s, int k, int nk, int c0, int c1, const char *title,
                       double xlo, double xhi) {
  Panel p = {LEFT, TOP + k * (PANEL_H + GAP), W - LEFT - RIGHT, PANEL_H, xlo, xhi, 0, 1};
  bool any = value_range(s, c0, c1, &p.ylo, &p.yhi);
  if (any) {
    double pad = (p.yhi - p.ylo) * 0.05;
    p.ylo -= pad, p.yhi += pad;
  }
  draw_axes(f, &p, title, k == nk - 1);
  if (!any) {
    draw_empty(f, &p);
    return;
  }
  static const char *const color[NCOL] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"};
  for (int c = c0; c <= c1; c++) draw_line(f, &p, s, c, color[c], c == COL_EVAL);
  if (c1 > c0)
    for (int c = c0; c <= c1; c++) draw_legend(f, &p, color[c], COL_KEY[c], c - c0);
}

static int write_svg(const Series *s, const char *src, const char *out) {
  FILE *f = fopen(out, "w");
  if (!f) {
    fprintf(stderr, "error: %s: cannot write: %s\n", out, strerror(errno));
    return -1;
  }
  double xlo = s->step[0], xhi = s->step[0];
  for (int i = 0; i < s->n; i++) xlo = fmin(xlo, s->step[i]), xhi = fmax(xhi, s->step[i]);
  if (xlo == xhi) xlo -= 1, xhi += 1;
  int nk = 4;
  double h = TOP + nk * (PANEL_H + GAP) + 10;
  fprintf(f,
          "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' "
          "width='%.0f' height='%.0f' viewBox='0 0 %.0f %.0f' font-family='sans-serif'>\n",
          W, h, W, h);
  fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n");
  const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
  fprintf(f, "<text x='%.1f' y='24' font-size='17'>", LEFT);
  for (const char *c = base; *c; c++) /* the file name, XML-escaped */
    fputs(*c == '<' ? "&lt;" : *c == '>' ? "&gt;" : *c == '&' ? "&amp;" : (char[2]){*c, 0}, f);
  fprintf(f, ": %d steps (%.0f to %.0f)</text>\n", s->n, s->step[0], s->step[s->n - 1]);
  draw_panel(f, s, 0, nk, COL_LOSS, COL_EVAL, "loss", xlo, xhi);
  draw_panel(f, s, 1, nk, COL_LR, COL_LR, "learning rate", xlo, xhi);
  draw_panel(f, s, 2, nk, COL_GNORM, COL_GNORM, "gradient norm (before clipping)", xlo, xhi);
  draw_panel(f, s, 3, nk, COL_TOKS, COL_TOKS, "tokens per second", xlo, xhi);
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='13' text-anchor='middle'>step</text>\n</svg>\n",
          LEFT + (W - LEFT - RIGHT) / 2, h - 4);
  if (fclose(f) != 0) {
    fprintf(stderr, "error: %s: write failed: %s\n", out, strerror(errno));
    return -1;
  }
  return 0;
}

int plot_metrics(const char *metrics, const char *out) {
  Series s = {0};
  int rc = read_metrics(metrics, &s) == 0 && write_svg(&s, metrics, out) == 0 ? 0 : -1;
  series_free(&s);
  return rc;
}
