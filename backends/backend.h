/*
 * backend.h: the backend interface and the registry, the one header of
 * backends/ outside its per-backend folders.
 *
 * A backend is a const struct of capability data and functions, chosen by
 * name from backend_table (registry.c), in the manner of QBE's Target and
 * ggml's backend interface. It receives a step graph lowered through every
 * pass (driver/pipeline.c) together with the parameter table and the
 * training facts of the config (frontend.h: FeTrainFacts), and either trains
 * in this process (run) or writes an artifact (compile): a trainer
 * executable, an object, or text. Members marked optional may be NULL.
 *
 * Backends sit below the driver: they see a BackendJob, never a DrvJob, and
 * report user errors into the job's FeDiag. Adding one is its own folder,
 * one line in registry.c and its add_subdirectory (docs/design.md).
 */
#ifndef AXLC_BACKENDS_BACKEND_H
#define AXLC_BACKENDS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "runtime/axrt.h"

/* ======================================================================== the interface */

/* One compilation as a backend sees it. The backend may rewrite nothing but
 * the graph (and reads even that only, today). */
typedef struct BackendJob {
  const char *file;          /* the config file, for messages */
  FeDiag *diag;              /* user errors of the job */
  json_object *cfg;          /* canonical config: trainers embed it */
  const FeBuild *build;      /* parameter table and mesh */
  const FeTrainFacts *facts; /* steps, seed, batch, vocabulary, checkpoints, learner */
  IrGraph *graph;            /* the step graph after every pass */
  IrGraph *forward;          /* the forward of one sequence, for sampling (driver.h); may
                                be NULL */
} BackendJob;

/* Code generation settings from the command line; a backend ignores those
 * it has no use for. */
typedef struct BackendOptions {
  const char *cpu, *features; /* code generation target; NULL: the host's */
  bool no_fuse, no_threads;   /* no elementwise fusion, no multithreaded kernels */
  const char *runtime_dir;    /* libaxrt.a and libaxrt_main.a for trainers (an installed
                                 axlc's lib/); NULL: the ones of the build tree */
  const char *cache_dir;      /* compiled code kept between compiles; NULL: none */
  int64_t cache_max;          /* its size limit in bytes (backend_cache_limit); 0: none */
  int jobs;                   /* compile threads; 0: one per online CPU */
  bool progress;              /* say on stderr what a long compile is doing */
} BackendOptions;

/* One kind of artifact compile can write (`axlc compile --emit NAME`). */
typedef struct BackendEmit {
  const char *name; /* "exe", "obj", "llvm", "asm", ... */
  bool needs_file;  /* written to -o FILE only; else -o or stdout */
  const char *doc;
} BackendEmit;

typedef struct Backend {
  const char *name; /* `--backend NAME` */
  const char *doc;  /* one line for `axlc backends` */
  /* The --target names (POSIX ERE, whole name) this backend is the default
   * for, or NULL: only chosen by --backend. */
  const char *targets;
  uint32_t dtypes;          /* bit (1u << dt) for each IrDType it computes */
  const BackendEmit *emits; /* what compile writes, {NULL}-terminated, the first the
                             * default; NULL when compile is NULL */
  bool standalone;          /* compile's default emit runs without axlc (a trainer) */

  /* Whether it can compute op on values of dtype dt. Never NULL. */
  bool (*supports_op)(IrOp op, IrDType dt);
  /* Optional: its fusion plan. Sets materialized[v] (g->nvalues) for every
   * value that needs its own buffer (passes/passes.h: pass_memplan_fused). */
  int (*plan)(const IrGraph *g, bool *materialized);
  /* Optional: writes the artifact `emit` (one of emits) to out (NULL: stdout,
   * for emits without needs_file). 0, or -1 with the reason in j->diag. */
  int (*compile)(const BackendJob *j, const BackendOptions *o, const char *emit, const char *out);
  /* Optional: trains in this process with the trainer options argv[1..argc)
   * (argv[0] names the program). Returns the exit status; the reasons of a
   * failure are in j->diag, or already printed by the runtime. */
  int (*run)(const BackendJob *j, const BackendOptions *o, int argc, char **argv);
  /* Optional (with run): checks run's options argv[1..argc) as run would, with its messages,
   * before anything is lowered or compiled. 0, or -1 with the reason in d. */
  int (*check_run_args)(int argc, char **argv, FeDiag *d);
} Backend;

/* ======================================================================== registry.c */

/* Every backend built into this axlc, NULL-terminated, in listing order. */
extern const Backend *const backend_table[];

/* The backend named `name`, or NULL. */
const Backend *backend_find(const char *name);
/* The default backend for --target `target` (see Backend.targets), or NULL. */
const Backend *backend_for_target(const char *target);
/* Writes "interp, llvm", the names in table order, into buf (cap bytes). */
void backend_names(char *buf, size_t cap);
/* The emit kind `name` of b, or NULL. */
const BackendEmit *backend_emit_find(const Backend *b, const char *name);
/* ======================================================================== spawn.c */

/* Runs argv (NULL-terminated; argv[0] is looked up on PATH) and waits: its exit status, 128 +
 * the signal that ended it, or -1 if it could not be started (127: exec failed). */
int backend_spawn(char *const *argv);
/* backend_spawn, with the tool's stderr passed on and its last cap - 1 bytes kept in log. */
int backend_spawn_log(char *const *argv, char *log, size_t cap);
/* The total size of the files among argv[1..] (a link's inputs; not the -o output). */
int64_t backend_inputs_size(char *const *argv);
/* Reports a failed link of `out` by `cc`: a full disk as such (the linker's messages, `log`,
 * say so, or the output's directory or TMPDIR has less room than the inputs, in_bytes, take),
 * anything else as missing libraries (`needs`). Returns -1. */
int backend_link_failed(FeDiag *d, const char *out, const char *cc, const char *log,
                        int64_t in_bytes, const char *needs);

/* ======================================================================== cache.c */

/* The compile cache's size limit when AXLC_CACHE_MAX is not set: 1 GiB. */
#define BACKEND_CACHE_MAX_DEFAULT ((int64_t)1 << 30)

/* The entries of a cache directory (llvm-*.o and ocl-*.bin), and what a trim or a clear did. */
typedef struct BackendCacheStats {
  int64_t entries, bytes; /* the entries there (after a trim or a clear: those left) */
  time_t oldest, newest;  /* the least and the most recent last use (mtime); 0: no entries */
  int64_t removed, removed_bytes; /* trim, clear: the entries removed */
  int64_t temps;                  /* trim, clear: a crashed writer's temporaries removed */
  int64_t recent; /* trim: entries kept over the limit, used or written in the last hour */
} BackendCacheStats;

/* The limit, from AXLC_CACHE_MAX (bytes, or with K, M or G: KiB, MiB, GiB), else
 * BACKEND_CACHE_MAX_DEFAULT; 0 means no limit. 0, or -1 with the variable, its value and what
 * was expected in err when the value does not parse (*max is the default then). */
int backend_cache_limit(int64_t *max, char *err, size_t cap);
/* A size as AXLC_CACHE_MAX takes it, "500M", "2G", "4096", "0": 0, or -1 when s is none. */
int backend_cache_parse_size(const char *s, int64_t *out);
/* The entries of dir (a directory that does not exist has none). 0, or -1 with the path and
 * the reason in err. */
int backend_cache_stats(const char *dir, BackendCacheStats *st, char *err, size_t cap);
/* When the entries of dir total more than max bytes (max > 0; 0 is no limit: dir is not even
 * read), removes the least recently used until they total at most 90% of max, never one used
 * or written in the last hour; and a crashed writer's temporaries over a day old. st: what is
 * left and what was removed. 0, or -1 with the path and the reason in err (what could be
 * removed was). */
int backend_cache_trim(const char *dir, int64_t max, BackendCacheStats *st, char *err, size_t cap);
/* Removes every entry of dir, however recent, and the temporaries over a day old. */
int backend_cache_clear(const char *dir, BackendCacheStats *st, char *err, size_t cap);
/* Records a use of the entry at path: its mtime becomes now (errors are ignored). */
void backend_cache_touch(const char *path);

/* ======================================================================== registry.c */

/* Where compiled code is kept between compiles, into buf: $AXLC_CACHE_DIR, else
 * $XDG_CACHE_HOME/axlc, else ~/.cache/axlc. false when AXLC_NO_CACHE is set (to anything but
 * "" or "0"), when none of those is set, or when the name does not fit. */
bool backend_cache_dir_default(char *buf, size_t cap);
/* How the runtime initializes parameter p (its init kind and std). */
RtInit backend_param_init(const FeParam *p);

/* ======================================================================== the backends */

extern const Backend backend_interp; /* interp/interp.c */
#ifdef AXLC_HAVE_LLVM
extern const Backend backend_llvm; /* llvm/backend.c */
#endif
#ifdef AXLC_HAVE_OPENCL
extern const Backend backend_opencl; /* opencl/backend.c */
#endif

#endif /* AXLC_BACKENDS_BACKEND_H */
