/*
 * driver.h: the compilation pipeline, shared by the axlc command line and
 * the tests. What happens to the lowered graph is a backend's business
 * (backends/backend.h); drv_backend_job() hands a job over to one.
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
#include "passes/passes.h"
#include "backends/backend.h"
#include "runtime/axrt.h"

/* ---- pipeline.c ---------------------------------------------------------- */

typedef struct DrvJob {
  const char *file;     /* the config file */
  FeDiag diag;          /* every user error of the job */
  json_object *cfg;     /* canonical config */
  FeBuild build;        /* parameter table and mesh */
  FeTrainFacts facts;   /* the config's training facts, read once */
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

/* The view of j (lowered through every pass) that a backend takes. */
BackendJob drv_backend_job(DrvJob *j);

#endif /* AXLC_DRIVER_H */
