/* tools/: helpers of the axlc command (axlc.c). */
#ifndef AXLC_TOOLS_PLOT_H
#define AXLC_TOOLS_PLOT_H

/* ---- plot.c: `axlc plot` ------------------------------------------------- */

/* Draws the --metrics file `metrics` as an SVG at `out`: loss and eval loss, learning rate,
 * gradient norm, tokens/s against the step. Prints an error naming the file (and line) and
 * returns -1 on a problem. */
int plot_metrics(const char *metrics, const char *out);

#endif
