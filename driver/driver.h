/*
 * driver.h: the compilation pipeline and the training loops, shared by the
 * axlc command line and the tests.
 *
 * A DrvJob carries one compilation: the resolved config, its parameter
 * table and the IR graph as the passes rewrite it. drv_lower() runs the
 * passes in one straight list, verifying after each in debug builds (or
 * when AXLC_VERIFY is set), and can stop after any of them.
 */
#ifndef AXLC_DRIVER_H
#define AXLC_DRIVER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "frontend/frontend.h"
#include "ir/ir.h"

/* ---- pipeline.c ---------------------------------------------------------- */

typedef struct DrvJob {
  const char *file;     /* the config file */
  FeDiag diag;          /* every user error of the job */
  json_object *cfg;     /* canonical config */
  FeBuild build;        /* parameter table and mesh */
  bool built;
  IrGraph *graph;       /* NULL until lowered */
  const char *last_pass; /* the pass the graph is after */
} DrvJob;

/* The passes, in pipeline order. */
extern const char *const drv_pass_names[];
extern const int drv_npasses;

/* Resolves and builds `file`; errors are in j->diag. */
int drv_load(DrvJob *j, const char *file, const FeOptions *opt);
/* Composes the forward graph and runs the passes up to and including
 * `stop_after` (NULL: all). Unknown pass names are an error. */
int drv_lower(DrvJob *j, const char *stop_after);
void drv_free(DrvJob *j);

/* ---- train.c: training with the reference interpreter -------------------- */

typedef struct DrvTrainOptions {
  const char *data;       /* text or llm.c token file */
  int64_t steps;          /* 0: the config's max_steps */
  int64_t seed;           /* < 0: the config's seed */
  const char *init;       /* safetensors with initial parameters, or NULL */
  const char *dump;       /* safetensors to write after the last step, or NULL */
  FILE *log;              /* per-step lines */
} DrvTrainOptions;

/* Trains j (lowered through every pass) with the interpreter. */
int drv_train_interp(DrvJob *j, const DrvTrainOptions *o);

#endif /* AXLC_DRIVER_H */
