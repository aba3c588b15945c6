/* passes.h: graph-to-graph passes, the one header of passes/.
 *
 * Every pass has the same signature, int pass_<name>(IrGraph *g, const PassOptions *opt), rewrites
 * g in place, and returns IR_OK or IR_ERR with the reason recorded in the graph (ir_graph_error).
 * The driver calls them in one straight list and verifies the graph after each. opt may be NULL for
 * the defaults.
 */
#ifndef AXLC_PASSES_H
#define AXLC_PASSES_H

#include "ir/ir.h"

/* What the optimizer pass needs from the learner config (see optimizer.c). */
typedef struct PassLearner {
  double learning_rate, b1, b2, eps, weight_decay, max_grad_norm;
  bool cosine; /* cosine decay after warmup; else constant */
  int64_t warmup_steps, decay_steps;
  double min_ratio;               /* cosine: final multiplier */
  int32_t nscales;                /* per-parameter weight-decay scales (default 1) */
  const char *const *scale_names; /* (nscales) */
  const double *scales;           /* (nscales) */
} PassLearner;

/* What the shard pass needs: the mesh (axes of size > 1 only) and the sharding of the leaves
 * (parameters by name; "opt/m/P" and "opt/v/P" follow P; inputs "ids", "targets"); leaves not
 * listed are whole on every device. */
typedef struct PassShardLeaf {
  const char *name;
  IrSplit split;
} PassShardLeaf;

typedef struct PassShard {
  IrMesh mesh;
  int32_t nleaves;
  const PassShardLeaf *leaves; /* an input split on a dim past 0 (the sequence) is bound whole
                                  there and sliced by the program */
  bool sequence_parallel;      /* the activations between the layers split over the sequence on
                                  model (Megatron), not over the hidden dim */
  bool seq_balanced;           /* a dim split on the seq axis is in the balanced order: device c
                                  of S holds chunks c and 2S - 1 - c of 2S (seq_order) */
} PassShard;

/* What the remat pass needs: the modules with a remat policy, by config path. preset is a preset
 * name ("none", "full", "save_dots", "save_qkvo", "offload_dots"), or NULL for a custom policy:
 * save[] tag regexes (whole-tag matches), offload[] (refused for now). */
typedef struct PassRematScope {
  const char *path; /* e.g. "/model/decoder": values whose origin is at or below it */
  const char *preset;
  int32_t nsave, noffload;
  const char *const *save; /* (nsave) */
} PassRematScope;

typedef struct PassRemat {
  int32_t nscopes;
  const PassRematScope *scopes; /* (nscopes) */
} PassRemat;

/* What the pipeline passes need (passes/pipeline.c, docs/pipeline.md): the chunk of each
 * decoder layer and which layer each parameter belongs to. The layers are cut into
 * stages * virtual_stages chunks; chunk c runs on stage c mod stages (one chunk per stage but
 * under the interleaved schedule). */
typedef enum PassSchedule {
  PASS_SCHEDULE_GPIPE,
  PASS_SCHEDULE_1F1B,
  PASS_SCHEDULE_INTERLEAVED
} PassSchedule;

typedef struct PassPipeline {
  int32_t stages;             /* P; < 2: nothing to do */
  PassSchedule schedule;      /* the order of each stage's forwards and backwards */
  int32_t virtual_stages;     /* V, chunks per stage: interleaved only; < 1: 1 */
  int64_t microbatches;       /* M (>= 1) */
  int32_t nlayers;            /* decoder layers, in order */
  const int32_t *layer_stage; /* (nlayers) chunk of each layer (0 .. P * V - 1), non-decreasing */
  int32_t nparams;            /* parameters in a layer */
  const char *const *params;  /* (nparams) names */
  const int32_t *param_layer; /* (nparams) their layer */
} PassPipeline;

typedef struct PassOptions {
  const char *loss;       /* autodiff: name of the scalar output to differentiate; NULL: "loss" */
  int32_t nwrt;           /* autodiff: number of parameter names in wrt; 0: every parameter */
  const char *const *wrt; /* (nwrt) parameter names */
  int64_t fold_limit;     /* simplify: largest constant (elements) folding creates; 0: 4096 */
  const PassLearner *learner; /* optimizer */
  const PassShard *shard;     /* shard; NULL or one device: nothing to do */
  const PassRemat *remat;     /* remat; NULL or no policy but "none": nothing to do */
  bool bf16_grads;            /* widen_grads: the policy reduces gradients in bf16: nothing to do */
  int64_t microbatches;       /* microbatch: forward/backward passes per step; 0 or 1: one */
  const PassPipeline *pipeline; /* stages, pipeline; NULL or one stage: nothing to do */
} PassOptions;

/* ======================================================================== autodiff.c */

/* Appends the gradient of output opt->loss with respect to each chosen parameter P as output
 * "grad:P" (zeros when the loss does not depend on P). The loss must have one element and a float
 * dtype. Under a mesh, the loss differentiated is the sum of the per-device losses. */
int pass_autodiff(IrGraph *g, const PassOptions *opt);
/* The same for any values: grads[i] gets d(y)/d(wrt[i]), appended to g. */
int pass_autodiff_values(IrGraph *g, int32_t y, int32_t nwrt, const int32_t *wrt, int32_t *grads);
bool pass_autodiff_has_rule(IrOp op);

/* ======================================================================== simplify.c */

/* Runs fold, algebra, transpose_dot, cse and dce until nothing changes; transpose_dot only when
 * opt->shard has one device (else pass_shard runs it on the per-device program). */
int pass_simplify(IrGraph *g, const PassOptions *opt);
/* Removes values no output depends on (parameters and inputs stay: they are the interface). */
int pass_dce(IrGraph *g, const PassOptions *opt);
/* Merges values with the same op, operands, attributes and type (the first one's origin stays). */
int pass_cse(IrGraph *g, const PassOptions *opt);
/* Replaces values whose operands are all constants by constants (up to opt->fold_limit elements).
 */
int pass_fold(IrGraph *g, const PassOptions *opt);
/* Algebraic identities: x*1, 1*x, x+0, 0+x, x-0, x/1, neg(neg x), cast to the same dtype,
 * reshape of reshape, reshape/broadcast to the same shape, transpose of transpose. */
int pass_algebra(IrGraph *g, const PassOptions *opt);
/* Folds transposes into dot_general: a transpose read only by a dot becomes the dot's dimension
 * numbers, and a transpose that only swaps the free dims of a dot read only by it becomes the
 * dot of the swapped operands, wherever the new dot is one sgemm per batch element
 * (ir_dot_sgemm), so no transpose copy is made. The numbers stay the same. */
int pass_transpose_dot(IrGraph *g, const PassOptions *opt);

/* ======================================================================== precision.c */

/* Under bf16 compute, the gradients of the f32 parameters keep their f32 accumulators: a cast
 * to f32 of a bf16 dot_general read by nothing else becomes the dot with an f32 result, and the
 * cast moves through single-reader transposes, reshapes and adds on the way (precision.c).
 * Nothing to do in an f32 graph. */
int pass_widen_grads(IrGraph *g, const PassOptions *opt);

/* ======================================================================== microbatch.c */

/* Gradient accumulation: g is one microbatch's forward and backward (inputs of b rows); the
 * result is the step over opt->microbatches of them (inputs of N b rows, the layout the data
 * loader writes): the input-dependent values copied in sequence, one microbatch after the
 * other, over slices of the inputs (each device's rows under opt->shard's batch split), the
 * rest shared, and every input-dependent output the mean of its N copies, summed in f32. */
int pass_microbatch(IrGraph *g, const PassOptions *opt);
/* The remat tag of the sums and the division of a microbatch mean: pass_shard finds each
 * microbatch's gradient under them, and pass_fusion_plan stores each running sum (a tagged add)
 * where it is made, so each microbatch's gradient dies into it. */
#define PASS_MICROBATCH_TAG "microbatch.mean"
/* The tag of the first value of each microbatch after the first: pass_shard makes that
 * microbatch's reshards again (gathers each fsdp weight in each microbatch), so no gathered
 * weight stays alive from the first microbatch to the last. */
#define PASS_MICROBATCH_START_TAG "microbatch.start"

/* ======================================================================== optimizer.c */

/* Appends clipping, the learning-rate schedule and AdamW after autodiff: input "step", state
 * parameters "opt/m/P" and "opt/v/P", outputs "new:P", "new:opt/m/P", "new:opt/v/P", "grad_norm"
 * and "lr". */
int pass_optimizer(IrGraph *g, const PassOptions *opt);
/* ======================================================================== shard.c */

/* Rewrites the global step graph into the program every device of opt->shard->mesh runs: local
 * shapes, each value's IrSplit, and the collectives the shardings need (see shard.c). The
 * per-device program computes the global step's numbers: the same loss, and each device's chunk
 * of the same new parameters. Ends with pass_transpose_dot on the per-device program. */
int pass_shard(IrGraph *g, const PassOptions *opt);

/* ======================================================================== remat.c */

/* Recomputes in the backward the forward values that the policies of opt->remat do not save
 * (see remat.c), so they are not kept alive across the backward. The graph computes the same
 * numbers. Runs after shard: what it clones is the per-device program, collectives included. */
int pass_remat(IrGraph *g, const PassOptions *opt);

/* ======================================================================== pipeline.c */

/* Stamps each input-dependent value of the one-microbatch step (after autodiff) with its
 * pipeline chunk (IrValue.stage: 1 + the chunk, which is the stage but under the interleaved
 * schedule) and phase (forward: what the loss depends on; backward: the rest), from the chunks
 * of the layers' parameters (see pipeline.c). */
int pass_stages(IrGraph *g, const PassOptions *opt);
/* The per-device program of a pipeline (after shard and remat): every value gets the stage
 * that computes it (0: every device; leaves, and values of leaves alone needed by several
 * stages), each stage's values are ordered by the schedule (units: one microbatch's forward or
 * backward on one chunk), and each value one stage needs from another crosses by a send and a
 * recv on the pipeline axis. */
int pass_pipeline(IrGraph *g, const PassOptions *opt);

/* The schedules. A unit is one microbatch's forward or backward on one chunk; each stage runs
 * its units one after another in the schedule's order. Only p's stages, schedule,
 * virtual_stages and microbatches are read. */
/* "1f1b", "interleaved", else gpipe. */
PassSchedule pass_schedule_parse(const char *name);
const char *pass_schedule_name(PassSchedule s);
/* The chunks per stage (V): p->virtual_stages under interleaved (at least 1), else 1. */
int32_t pass_pipeline_virtual(const PassPipeline *p);
/* The position of microbatch k's forward (backward) on chunk c in the order of stage
 * c mod P: 0 .. 2 * V * M - 1 (interleaved: for M a multiple of P, as the frontend checks). */
int64_t pass_pipeline_unit(const PassPipeline *p, int32_t chunk, int64_t k, bool backward);
/* The same for one chunk per stage (chunk = stage s; V = 1). */
int64_t pass_pipeline_slot(PassSchedule sched, int32_t stages, int64_t micro, int32_t s, int64_t k,
                           bool backward);
/* The most units whose forward stage s has run and whose backward it has not, at any point of
 * its order: the microbatches of live activations, each of one of the stage's V chunks (so about
 * V times the whole stage's microbatches under interleaved: divide by V for those). GPipe: M;
 * 1F1B: min(P - s, M). */
int64_t pass_pipeline_live(const PassPipeline *p, int32_t s);
/* Runs the schedule, one time step per unit: a forward waits for the previous chunk's, a
 * backward for the next chunk's (the last chunk's for its own forward). Fills time (P * V * M * 2,
 * may be NULL: [(c * M + k) * 2 + backward], 1-based) and returns the steps of the whole step;
 * -1 when it deadlocks. */
int64_t pass_pipeline_run(const PassPipeline *p, int64_t *time);
/* Prints the schedule as a timeline: one row per stage, one column per time step (F3: forward of
 * microbatch 3; F3.2 under interleaved: of microbatch 3 on chunk 2), and the bubble: the share
 * of the step a stage idles, from the timeline. */
void pass_pipeline_timeline(const PassPipeline *p, FILE *out);

/* ======================================================================== expand.c */

/* Rewrites every attention and attention_grad value into primitive ops computing the same
 * numbers (dot_general, softmax by max/exp/sum/div, a causal mask from iotas), for a backend
 * whose supports_op lacks them. Only the driver's hand-over runs it (driver/pipeline.c:
 * drv_backend_job), after every other pass: on the per-device program (after shard and remat)
 * and on the unsharded sampling forward; and pass_shard runs it on the global step first when
 * the sequence is split (context parallelism: the products' rules then gather K and V).
 * The new values keep the replaced value's origin, remat tag and, on their leading dims, its
 * IrSplit; they take its place in the order, nothing else moves. opt is unused. */
int pass_expand(IrGraph *g, const PassOptions *opt);

/* ======================================================================== memplan.c */

/* Where every value of a step graph lives in the runtime's one slab, and the numbers the
 * memory report prints. Parameters, their optimizer state and the step's inputs come first, at
 * fixed offsets; "new:X" outputs are written over X (in place) when nothing reads X after
 * them; the other values share the rest of the slab by liveness. */
typedef struct MemPlan {
  int32_t nvalues;
  int64_t *offset;         /* (nvalues) byte offset of each value's buffer, 64-byte aligned */
  int64_t *bytes;          /* (nvalues) its size */
  int64_t slab_bytes;      /* the whole slab */
  int64_t param_bytes;     /* model parameters */
  int64_t opt_bytes;       /* optimizer state (opt/...) */
  int64_t input_bytes;     /* batch and step */
  int64_t peak_temp_bytes; /* most bytes of other values live at once */
  int64_t fixed_bytes;     /* the fixed region (parameters, state, inputs) at the slab's start;
                            * a non-leaf value placed below it is an in-place update */
  int32_t *last;           /* (nvalues) index of the last value that reads each value (its own
                            * index if none; g->nvalues for outputs): live from v to last[v] */
  int32_t *region;         /* (nvalues) with pipeline stages, 1 + the stage of a value only that
                            * stage's devices run (0: every device's, or an output), else NULL:
                            * values of two stages may share bytes (pass_memplan_apart) */
  int32_t nstages;         /* with pipeline stages, their number, else 0 */
  int64_t *stage_slab;     /* (nstages) the bytes a device of each stage uses: the fixed region,
                            * and the end of the last of its stage's and every device's values */
} MemPlan;

/* materialized[v] (nvalues) is set when value v gets a buffer written by its own kernel; the
 * others are computed inside their consumers' loops (passes/fusion.c says which). Parameters,
 * inputs, outputs and every operand of a non-elementwise value stay materialized. The plan of
 * both code generators. Returns 0, or -1 if an argument is NULL or memory runs out. */
int pass_fusion_plan(const IrGraph *g, bool *materialized);
/* Plans g in its current order (values are executed in index order). */
int pass_memplan(IrGraph *g, MemPlan *plan);
/* The same when the backend fuses: values with materialized[v] false are computed inside their
 * consumer's loop, get no buffer (bytes 0), and keep their operands live until the consumer. */
int pass_memplan_fused(IrGraph *g, const bool *materialized, MemPlan *plan);
/* pass_memplan_fused for a slab held in buffers of at most `split` bytes (a device's largest
 * allocation): no value of at most split bytes crosses a multiple of split, so the slab can be
 * cut there (runtime/opencl.c). 0: pass_memplan_fused. */
int pass_memplan_split(IrGraph *g, const bool *materialized, int64_t split, MemPlan *plan);
/* Plans g to share one slab with another graph `under` planned as under_plan, the two run one
 * at a time (the sampling forward and the decode step): each parameter of g that `under` has
 * (same name, dtype and shape) keeps under's offset, and g's other values lie past the first
 * under_bytes, which `under` keeps (its whole plan, and anything it writes past it), so that
 * g's inputs survive a run of `under`. slab_bytes covers both; fixed_bytes is g's own region's
 * end. */
int pass_memplan_over(IrGraph *g, const bool *materialized, const IrGraph *under,
                      const MemPlan *under_plan, int64_t under_bytes, MemPlan *plan);
void pass_memplan_free(MemPlan *plan);
/* Whether values a and b never live on one device (two pipeline stages' own), so their bytes
 * may be shared whenever they live. */
bool pass_memplan_apart(const MemPlan *plan, int32_t a, int32_t b);
/* Pairs of values whose buffers overlap while both are live (in-place updates and values of two
 * pipeline stages aside): 0 for a
 * correct plan. Quadratic; for tests and debugging. */
int64_t pass_memplan_conflicts(const IrGraph *g, const bool *materialized, const MemPlan *plan);

#endif
