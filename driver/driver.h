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
#include "passes/passes.h"
#include "runtime/axrt.h"
#ifdef AXLC_HAVE_LLVM
#include "backends/llvm/llvm.h"
#endif

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

/* How the runtime initializes parameter p (its init kind and std). */
RtInit drv_param_init(const FeParam *p);

/* ---- compile.c: the CPU backend (when built with LLVM) -------------------- */

#ifdef AXLC_HAVE_LLVM
typedef struct DrvCompileOptions {
  const char *cpu, *features; /* code generation target; NULL: the host's */
  bool no_fuse, no_threads;   /* turn off elementwise fusion, multithreaded kernels */
} DrvCompileOptions;

typedef struct DrvCompiled {
  MemPlan plan;
  LlvmModule *module;
  LlvmProgramInfo info;       /* what the trainer's program table holds */
  LlvmParamInfo *params;
  char *config;               /* canonical config text, embedded in the trainer */
} DrvCompiled;

/* Checks, before compiling, that `path` can be written as an output file:
 * not a directory, in a directory that exists and can be written in, and
 * writable if it exists. -1 with the message in `d` naming the path. */
int drv_check_output(FeDiag *d, const char *path);
/* Plans memory and generates code for j (lowered through every pass). */
int drv_compile_cpu(DrvJob *j, const DrvCompileOptions *o, DrvCompiled *c);
/* Writes the object and links it with the runtime into the executable `out`. */
int drv_link_trainer(DrvJob *j, DrvCompiled *c, const char *out);
void drv_compiled_free(DrvCompiled *c);
#endif

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
