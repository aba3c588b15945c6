/*
 * backend.h: the backend interface and the registry, the one header of
 * backends/ outside its per-backend folders.
 *
 * A backend is a const struct of capability data and functions, chosen by
 * name from backend_table (registry.c), in the manner of QBE's Target and
 * ggml's backend interface. It receives a step graph lowered through every
 * pass (driver/pipeline.c) together with a description of the program that
 * the graph does not hold (BackendProgram: the parameter table and its init
 * kinds, the training facts, the config as text), and either trains in this
 * process (run) or writes an artifact (compile): a trainer executable, an
 * object, or text. A backend never starts a process: a job of several devices,
 * or any job of a backend with run_trainer, is linked through compile and
 * started by the driver's launch layer (launch/). Members marked optional may
 * be NULL.
 *
 * Backends sit below the driver and know nothing of the config language:
 * they include ir/, passes/ and runtime/axrt.h, and nothing of the config
 * reader. They see a BackendJob, never a DrvJob, and report user errors into
 * the job's BackendDiag, which the driver turns into its own messages.
 * Adding one is its own folder (its CMakeLists.txt), its extern below and its
 * line in registry.c's backend_table (both under #ifdef AXLC_HAVE_NAME), and its
 * block in backends/CMakeLists.txt: add_subdirectory, and linking it into
 * axlc_backends with AXLC_HAVE_NAME (docs/backends.md, "Adding a backend").
 */
#ifndef AXLC_BACKENDS_BACKEND_H
#define AXLC_BACKENDS_BACKEND_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "ir/ir.h"
#include "runtime/axrt.h"

/* ======================================================================== diag.c */

/* Where a backend's user errors go: report records one message, fmt and its arguments, which
 * reads "FILE: PATH: MESSAGE" (file and path may be NULL). The driver's (driver.h:
 * drv_backend_diag) records into the job's diagnostics; report NULL prints "error: ..." on
 * stderr. */
typedef struct BackendDiag {
  void (*report)(void *ctx, const char *file, const char *path, const char *fmt, va_list ap);
  void *ctx;
} BackendDiag;

/* Reports a message; always returns -1 so callers can `return backend_error(...)`. */
int backend_error(const BackendDiag *d, const char *file, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ======================================================================== the interface */

/* One parameter of the program: the graph's parameter named path (its moments are "opt/m/PATH"
 * and "opt/v/PATH"), its global shape and how the runtime initializes it. A frozen one (a LoRA
 * run's base) has no moments and no update. */
typedef struct BackendParam {
  const char *path;
  IrShape shape; /* global: the whole tensor, before any mesh split */
  RtInit init;
  bool frozen;
} BackendParam;

/* What a trainer needs that the step graph does not hold, built by the driver from the config
 * (drv_backend_job). */
typedef struct BackendProgram {
  const char *config; /* canonical config text: trainers embed it (`./trainer --config`) */
  int32_t nparams;
  const BackendParam *params; /* (nparams), in the config's declaration order */
  int64_t devices;            /* the config's mesh: devices the job runs on */
  int64_t vocab;              /* token ids lie in [0, vocab) */
  RtFacts facts;              /* the trainer's program facts (runtime/axrt.h: RT_PROGRAM_FACTS),
                                 filled by the driver, embedded whole in the trainer */
  const char *device_kind;    /* the target's kind in the device table ("gpu-h100"); NULL: none */
  const char *device_doc;     /* its doc ("NVIDIA H100 SXM5 80GB"); NULL: none */
  const char *device_match;   /* what its OpenCL device's name holds ("H100"); NULL or "": any */
  int64_t max_alloc;          /* its largest buffer (device table); 0: unknown */
} BackendProgram;

/* One compilation as a backend sees it. The backend may rewrite nothing but
 * the graph (and reads even that only, today). */
typedef struct BackendJob {
  const char *file;       /* the config file, for messages */
  BackendDiag diag;       /* user errors of the job */
  BackendProgram program; /* parameters, training facts, the config text */
  IrGraph *graph;         /* the step graph after every pass */
  IrGraph *forward;       /* the forward of one sequence, for sampling (driver.h); may
                             be NULL */
  IrGraph *decode;        /* the one-token decode step with a KV cache, whose prefill is the
                             forward (driver.h); NULL: sampling recomputes the window */
} BackendJob;

/* Code generation settings from the command line; a backend ignores those
 * it has no use for. */
typedef struct BackendOptions {
  const char *cpu, *features; /* code generation target; NULL: the host's */
  bool no_fuse, no_threads;   /* no elementwise fusion, no multithreaded kernels */
  const char *runtime_dir;    /* the runtime libraries trainers link (libaxrt.a, libaxrt_main.a,
                                 libaxrt_opencl.a), axrt.h in runtime_dir/../include: an
                                 installed axlc's lib/; NULL: the build tree's (link.c) */
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
  /* Optional: bytes its kernels use past the planned slab under that plan (the OpenCL
   * reductions' partial sums), which the trainer's slab holds after the plan's end rounded up
   * to 64 bytes; memcheck counts them as compile does. */
  int64_t (*scratch)(const IrGraph *g, const bool *materialized);
  /* Optional: writes the artifact `emit` (one of emits) to out (NULL: stdout,
   * for emits without needs_file). 0, or -1 with the reason reported to j->diag. */
  int (*compile)(const BackendJob *j, const BackendOptions *o, const char *emit, const char *out);
  /* Optional: trains in this process with the trainer options argv[1..argc)
   * (argv[0] names the program). Returns the exit status; the reasons of a
   * failure are reported to j->diag, or already printed by the runtime. A job of
   * several devices, or one of a backend without run but with run_trainer, is not
   * run here: the driver links compile's default emit (the trainer) and launches
   * it (driver.h: drv_run; launch/). */
  int (*run)(const BackendJob *j, const BackendOptions *o, int argc, char **argv);
  /* axlc run trains with the trainer compile links, started by the driver as a process of
   * its own, even on one device (opencl: the device's driver must not load into axlc). */
  bool run_trainer;
  /* Optional (with run or run_trainer): checks run's options argv[1..argc) as run would, with its
   * messages, before anything is lowered or compiled. 0, or -1 with the reason reported to d. */
  int (*check_run_args)(int argc, char **argv, const BackendDiag *d);
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
/* ======================================================================== link.c */

/* A trainer executable, as a backend hands it to the link step. */
typedef struct BackendLink {
  const char *out;      /* the executable to write */
  char *const *objects; /* (nobjects) object files */
  int nobjects;
  const char *source; /* a C file compiled against axrt.h with the objects, or NULL */
  bool opencl;        /* main() comes from the backend (rt_ocl_main), the runtime from
                         libaxrt_opencl with the OpenCL loader; else libaxrt_main's main */
} BackendLink;

/* Links l with the runtime libraries (o->runtime_dir, else the build tree's), OpenBLAS, json-c,
 * libm and the MPI libraries libaxrt was built with, by $CC (else cc), through lld where the
 * build found that cc can use it. The one link step of every trainer-writing backend. 0, or -1
 * reported to d (naming l->out and what the link needs). */
int backend_link_trainer(const BackendLink *l, const BackendOptions *o, const BackendDiag *d);

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

/* The runtime's collective kind (RT_COLL_*) of a collective op of the IR: the one mapping the
 * backends' collective tables share. */
int32_t backend_coll_kind(IrOp op);
/* A pipeline's shares at the end of the step (docs/pipeline.md, "Under MPI"): what one stage
 * makes and every stage needs, the loss and the other scalar outputs, and each parameter that
 * several stages read (a tied table) once its stage has updated it. Share k gives the bytes of
 * buffer[k] on stage values[stage-1] of made[k] to the other stages. Fills made and buffer
 * (room for noutputs each) and returns how many; 0 without a pipeline. */
int32_t backend_pipeline_shares(const IrGraph *g, int32_t *made, int32_t *buffer);
/* RtParamSlot.stage of parameter `path`: 1 + the pipeline stage that computes its output
 * "new:<path>" (IrValue.stage), or 0: every device (no pipeline, or a frozen parameter). */
int64_t backend_update_stage(const IrGraph *g, const char *path);

/* ======================================================================== the backends */

extern const Backend backend_interp; /* interp/interp.c */
#ifdef AXLC_HAVE_LLVM
extern const Backend backend_llvm; /* llvm/backend.c */
#endif
#ifdef AXLC_HAVE_OPENCL
extern const Backend backend_opencl; /* opencl/backend.c */
#endif

#endif /* AXLC_BACKENDS_BACKEND_H */
