/*
 * driver.h: the compilation pipeline, shared by the axlc command line and
 * the tests. What happens to the lowered graph is a backend's business
 * (backends/backend.h); drv_backend_job() hands a job over to one, expanding
 * the fused ops it lacks.
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

#include "backends/backend.h"
#include "frontend/frontend.h"
#include "ir/ir.h"
#include "launch/launch.h"
#include "passes/passes.h"
#include "runtime/axrt.h"

/* ---- pipeline.c ---------------------------------------------------------- */

typedef struct DrvJob {
  const char *file;   /* the config file */
  const char *target; /* --target, or NULL */
  FeDiag diag;        /* every user error of the job */
  json_object *cfg;   /* canonical config */
  FeBuild build;      /* parameter table and mesh */
  FeTrainFacts facts; /* the config's training facts, read once */
  bool built;
  IrGraph *graph;        /* NULL until lowered */
  IrGraph *forward;      /* the forward of one sequence for sampling (fe_compose_forward, then
                            simplify), made when drv_lower runs every pass; never sharded */
  IrGraph *decode;       /* the one-token decode step with a KV cache (fe_compose_decode, then
                            simplify), made with the forward when every attention is causal;
                            the forward then also outputs the keys and values (the prefill) */
  const char *last_pass; /* the pass the graph is after */
  /* What drv_backend_job hands a backend besides the graphs (BackendProgram), owned here. */
  BackendParam *backend_params; /* (build.nparams) */
  char *config_text;            /* the canonical config as text */
} DrvJob;

/* The passes, in pipeline order: the name (--after, messages), the function (NULL for
 * compose, which makes the graph the others rewrite) and what it does, for the usage text. */
typedef struct {
  const char *name;
  int (*run)(IrGraph *g, const PassOptions *opt);
  const char *what;
} DrvPass;
extern const DrvPass drv_passes[];
extern const int drv_npasses;
/* The pass names joined by `sep`, the last two by `last_sep`, into buf. */
const char *drv_pass_list(char *buf, size_t cap, const char *sep, const char *last_sep);

/* Resolves and builds `file`; errors are in j->diag. */
int drv_load(DrvJob *j, const char *file, const FeOptions *opt);

/* Whether `/precision/compute: auto` means bf16 on this target (driver/precision.c): the CPU
 * that runs the trainer (the host's, or --cpu / --features) multiplies bf16 faster than f32
 * (AMX-BF16). *why gets the reason, for the config's origin and the note that says what was
 * chosen. */
bool drv_bf16_dot(const char *target, const char *cpu, const char *features, const char **why);
/* Composes the forward graph and runs the passes up to and including
 * `stop_after` (NULL: all). Unknown pass names are an error. With every pass
 * run, also composes j->forward and j->decode, the graphs trainers sample with. */
int drv_lower(DrvJob *j, const char *stop_after);
void drv_free(DrvJob *j);

/* Hands j (lowered through every pass) over to backend b: fills *out with the view b takes,
 * after rewriting j's graphs (the step and the sampling forward) into ops b supports: where b
 * lacks attention or attention_grad, pass_expand. The view is the graphs, the program made from
 * the frontend's objects (parameter table, init kinds, training facts, config text; owned by j)
 * and an error sink into j->diag. Every path from the driver to a backend's compile or run
 * comes through here. 0, or -1 with the reason in j->diag. */
int drv_backend_job(DrvJob *j, const Backend *b, BackendJob *out);
/* The trainer's program facts of j (runtime/axrt.h: RT_PROGRAM_FACTS): the config's, typed by
 * the frontend (j->facts.program), and the step's FLOPs from j->graph; the peaks stay 0 (the
 * CLI adds the device table's). drv_backend_job puts them in the program. */
void drv_program_facts(const DrvJob *j, RtFacts *f);
/* A backend's error sink that records into d, with the frontend's message format: what the
 * user reads is the same whichever layer found the mistake. */
BackendDiag drv_backend_diag(FeDiag *d);
/* The backend whose fusion plan stands for `target`'s (NULL: cpu): the target's own backend
 * when it plans, else the default backend of the host CPU (a device with no backend here is
 * reported as if it fused like the host); NULL when neither plans. */
const Backend *drv_plan_backend(const char *target);

/* ---- run.c: axlc run ------------------------------------------------------ */

/* Trains job j, handed to backend b as bj, with the trainer options argv[1..argc) (argv[0]
 * names the program): in this process by b->run, unless the job runs on several devices and
 * this process is none of its ranks (and does not --sample), or b runs as its trainer
 * (run_trainer). Then b links the trainer (compile's default emit) into a temporary directory
 * and the launch layer starts it: under the supervisor sv (its trainer, ranks, launcher and
 * options are filled in here) on several devices, or alone as a job. The exit status; the
 * reasons of a failure are in j->diag, or already printed. */
int drv_run(DrvJob *j, const Backend *b, const BackendJob *bj, const BackendOptions *o,
            const LaunchSupervisor *sv, int argc, char **argv);

/* ---- elastic.c: a job on fewer ranks ------------------------------------- */

/* Elastic shrink: the mesh and microbatches of a job on `to` ranks instead of `from`. */
typedef struct DrvElasticPlan {
  int naxes;
  int64_t shape[IR_MAX_MESH_AXES]; /* /mesh/shape: a -1 axis stays (--target cpu-TO sizes it);
                                      else the batch axes (fe_axes: FE_AXIS_BATCH) give up the
                                      factor from/to, the expert axis last */
  int64_t microbatches; /* so that a microbatch holds the rows per device it held, or the next
                           count above that divides the rows each device now holds */
  int64_t global_batch; /* /input/global_batch_size, unchanged */
} DrvElasticPlan;
/* The plan for config (the resolved config text a trainer embeds: `TRAINER --config`). 0, or
 * -1 with the reason in why (cap bytes): no such mesh, or its batch shards do not divide the
 * global batch. */
int drv_elastic_plan(const char *config, int from, int to, DrvElasticPlan *plan, char *why,
                     size_t cap);

/* ---- memcheck.c: the ahead-of-time memory report ------------------------- */

/* One kind of device (models/rules/devices.json). */
typedef struct DrvDevice {
  char name[64];                /* "gpu-h100" */
  char doc[160];                /* "NVIDIA H100 SXM5 80GB" */
  double memory;                /* bytes per device */
  bool host;                    /* memory is this host's RAM */
  double flops_f32, flops_bf16; /* peak FLOP/s */
  double mem_bw, link_bw;       /* bytes/s: memory, and sent to the other devices */
  char backend[16];             /* the backend that trains on it ("llvm", "opencl"); "": none */
  char opencl_device[64];       /* what its OpenCL device name holds ("H100"); "": any device */
  double max_alloc;             /* the largest buffer one allocation holds; 0: memory */
} DrvDevice;

/* The device kind of `target` ("gpu-h100-256" -> gpu-h100) in the table `file`. */
int drv_device_lookup(FeDiag *d, const char *file, const char *target, DrvDevice *out);

enum { DRV_MEM_SAVED, DRV_MEM_GRAD, DRV_MEM_TEMP, DRV_MEM_COMM };

/* A value live at the peak, described so that a renderer needs no graph. */
typedef struct DrvMemItem {
  int32_t value; /* in the job's graph */
  int64_t bytes;
  int kind; /* DRV_MEM_* */
  IrOp op;
  IrDType dtype;
  IrShape shape;      /* per device */
  char *origin, *tag; /* the value's config path and remat tag ("" for none) */
} DrvMemItem;

/* One pipeline stage's plan (DrvMemReport.per_stage). */
typedef struct DrvMemStage {
  int64_t peak, code, params, opt_state, saved; /* saved: activations live at its peak */
  int64_t live_micro; /* the schedule's microbatches with saved activations at once (GPipe: M;
                         1F1B: min(P - s, M)); 0 where the schedule has no such rule */
  int64_t peak_micro; /* microbatches whose saved activations are live at the plan's peak */
  double flops, bf16_flops, comm_bytes; /* per step on a device of the stage */
} DrvMemStage;

/* Per device, from the memory plan of the per-device program: what the analysis (drv_memcheck)
 * found, everything the renderers (memreport.c) print. */
typedef struct DrvMemReport {
  char *file, *target; /* the config file; the target ("cpu" when none was named) */
  FeMesh mesh;         /* the config's mesh */
  const char *fusion;  /* the backend whose fusion plan was applied, or "none" */
  int64_t params, opt_state, inputs, fixed; /* the fixed region and its parts */
  int64_t grads, saved, temps, comm;        /* live at the peak, by kind */
  int64_t temp_peak, peak, slab, code;      /* slab >= fixed + temp_peak; code: estimate */
  int64_t largest;                          /* the largest value: one buffer must hold it */
  /* Outside the slab, on the heap of a trainer under MPI: the runtime's collective scratch
   * (rt_coll_scratch_bytes of the largest collective) and the MPI library's own heap
   * (RT_MPI_HEAP_BYTES, where the job has more than one device). peak = slab + both. */
  int64_t comm_scratch, mpi_heap;
  int32_t nvalues, peak_at;
  int64_t *timeline; /* (nvalues) live temporaries after each value */
  uint8_t *phase;    /* (nvalues) 0 forward, 1 backward, 2 update */
  DrvMemItem *items; /* live at the peak, largest first */
  int32_t nitems;
  double flops, matmul_flops, comm_bytes; /* per step; bytes sent by a ring algorithm */
  double bf16_flops; /* of flops: the products with bf16 operands (the device's bf16 rate) */
  int collectives;
  /* A pipeline (stages > 1): each stage is planned on its own (the values its devices run,
   * every device's included, and only the leaves they read), and the fields above are the
   * worst stage's (the largest peak plus code). */
  int32_t stages, worst;  /* P, and the stage the fields above describe */
  int64_t microbatches;   /* M */
  char schedule[32];      /* "gpipe", "1f1b", ... (the config's /mesh/pipeline_schedule) */
  DrvMemStage *per_stage; /* (stages) */
  /* the schedule run one unit a time step (pass_pipeline_run): its time steps, and the units
   * each stage runs (2 V M); the stages idle (steps - units) / steps of the step */
  int64_t sched_steps, sched_units;
} DrvMemReport;

/* j lowered through every pass, planned as the backend of device kind dev trains it: that
 * backend's fusion plan, and for OpenCL the slab in pieces of dev->max_alloc (dev NULL: the
 * target's backend by name, one piece). drv_memcheck is drv_memcheck_on(j, NULL, r). */
int drv_memcheck(DrvJob *j, DrvMemReport *r);
int drv_memcheck_on(DrvJob *j, const DrvDevice *dev, DrvMemReport *r);
/* The FLOPs of one run of g (the report's flops), and in *bf16 those of bf16 products. */
double drv_step_flops(const IrGraph *g, double *bf16);
void drv_memreport_free(DrvMemReport *r);
/* The lower bound on the compute time of a step: products with bf16 operands at the device's
 * bf16 rate, the rest at its f32 rate. */
double drv_memreport_compute_s(const DrvMemReport *r, const DrvDevice *dev);
/* A pipeline's slowest stage (*slowest) and its busy time per step: compute or communication,
 * whichever is longer, for its M microbatches. */
double drv_memreport_stage_s(const DrvMemReport *r, const DrvDevice *dev, int32_t *slowest);
/* The lower bound on the step time: compute or communication, whichever is longer; under a
 * pipeline the slowest stage's, stretched by the bubble: busy x (M + P - 1) / M, so the stages
 * wait (P - 1) / (M + P - 1) of the step. */
double drv_memreport_step_s(const DrvMemReport *r, const DrvDevice *dev);
/* Whether the peak and the generated code fit the memory of one device of kind dev. */
bool drv_memreport_fits(const DrvMemReport *r, const DrvDevice *dev);

/* What fits where the job does not: --set options, each tried (the job lowered and planned
 * again with it), not guessed. */
typedef struct DrvMemFix {
  char set[128]; /* PATH=VALUE */
  int64_t peak;  /* per device: its peak plus the generated code */
} DrvMemFix;

typedef struct DrvMemFixes {
  DrvMemFix fix[12];
  int n;
} DrvMemFixes;

/* Lowers `file` with the options of j (opt) again under each remat preset and a few mesh changes
 * (every batch device on fsdp; twice the model axis, taken from data or fsdp), and keeps those
 * whose peak fits dev. */
void drv_memcheck_fixes(const char *file, const FeOptions *opt, const DrvJob *j,
                        const DrvDevice *dev, DrvMemFixes *out);

/* ---- memreport.c: the memory report as text, JSON and SVG --------------- */

void drv_memreport_print(const DrvMemReport *r, const DrvDevice *dev, int top, FILE *out);
char *drv_memreport_json(const DrvMemReport *r, const DrvDevice *dev, int top);
int drv_memreport_svg(const DrvMemReport *r, const DrvDevice *dev, FILE *out);
/* "what would fit": the fixes found, or that none was. */
void drv_memfixes_print(const DrvMemFixes *f, const DrvDevice *dev, FILE *out);

#endif /* AXLC_DRIVER_H */
