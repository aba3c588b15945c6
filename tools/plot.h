/* plot.h: `axlc plot` (plot.c), a library of its own for its fuzz target. */
#ifndef AXLC_TOOLS_PLOT_H
#define AXLC_TOOLS_PLOT_H

#include <stdio.h>

/* ---- plot.c: `axlc plot` ------------------------------------------------- */

/* Draws the --metrics file `metrics` as an SVG at `out`: loss and eval loss, learning rate,
 * gradient norm, tokens/s against the step, and goodput with MFU where the file holds them. Prints
 * an error naming the file (and line) and returns -1 on a problem. */
int plot_metrics(const char *metrics, const char *out);
/* plot_metrics of n files on shared panels and axes, one color per file, each panel with a
 * legend naming the files by labels[j] (NULL: the files' base names). n >= 1; one file draws
 * as plot_metrics does (with labels[0] as the title's name). Nothing is written when a file
 * is refused. */
int plot_metrics_many(const char *const *metrics, const char *const *labels, int n,
                      const char *out);
/* plot_metrics on streams (the fuzz target's way in): the metrics lines from `in`, named
 * `name` in messages and the title, as an SVG into `out`, which is left open. 0, or -1 with
 * the error printed and nothing written. */
int plot_metrics_stream(FILE *in, const char *name, FILE *out);

#endif
