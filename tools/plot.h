/* tools/: helpers of the axlc command (axlc.c). */
#ifndef AXLC_TOOLS_PLOT_H
#define AXLC_TOOLS_PLOT_H

#include <stdbool.h>
#include <stdio.h>

/* ---- plot.c: `axlc plot` ------------------------------------------------- */

/* Draws the --metrics file `metrics` as an SVG at `out`: loss and eval loss, learning rate,
 * gradient norm, tokens/s against the step. Prints an error naming the file (and line) and
 * returns -1 on a problem. */
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

/* ---- convert.c: `axlc convert` ----------------------------------------------- */

struct FeBuild;

/* Converts the weights file `in` of the model built in `b` (config file `model`) to `out`:
 * Hugging Face's names and layouts (GPT-2 or Llama, as the config decides) to axlc's
 * parameter paths (f32), or back when `to_hf` is true, in `dtype` ("f32", "bf16" or "f16";
 * NULL: the dtype the weights came in, docs/convert.md). Prints every problem, naming the file
 * and the tensor, and returns -1 without writing `out`; `out` is written atomically. */
int convert_weights(const struct FeBuild *b, const char *model, bool to_hf, const char *dtype,
                    const char *in, const char *out);

/* ---- merge_lora.c: `axlc convert --merge-lora` ---------------------------------- */

/* Writes to `out` the weights of the model built in `b` (which has /lora) with the adapters of
 * `in` folded in (W + (alpha/r) A B) and no adapter tensors; the other weights come from
 * `base` (NULL: from `in`). Says every problem on stderr and returns -1 without writing. */
int merge_lora(const struct FeBuild *b, const char *model, const char *in, const char *base,
               const char *out);

#endif
