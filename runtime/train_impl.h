/*
 * train_impl.h: the trainer's internals, shared by its files: train.c (the Trainer's
 * lifecycle), train_opts.c (options), train_program.c (checks of the generated program),
 * train_state.c (init, --init, checkpoints, resume) and train_report.c (metrics, progress,
 * messages). Private like rt_impl.h: generated trainers see only axrt.h.
 */
#ifndef TRAIN_IMPL_H
#define TRAIN_IMPL_H

#include <stdio.h>

#include "rt_impl.h"

/* The options as given (train_opts.c), over the program's defaults. */
typedef struct TrainOpts {
    const char *data, *eval_data, *init, *ckpt_dir, *metrics, *prompt;
    int64_t steps, eval_every, eval_batches, ckpt_every, keep, threads, log_every, sample;
    uint64_t seed;
    double temperature; /* -1: not given (1) */
    int resume, partial, help, config, init_allow_unused;
} TrainOpts;

/* One run of the trainer: everything rt_train_main sets up, and where the run stands. */
typedef struct Trainer {
    const RtProgram *p;
    TrainOpts o;
    const char *prog;                 /* for messages */
    char *slab;                       /* (slab_bytes) */
    char *eval_slab;                  /* (slab_bytes), only with --eval-data */
    int64_t slab_mapped, eval_mapped; /* their mappings' sizes (slab_new) */
    RtPool *pool;
    RtData *data, *eval;
    RtCkptLock *lock;                 /* held on --ckpt-dir for the whole run (by rank 0) */
    RtComm *comm;                     /* the mesh: rank and size, collectives */
    int rank, world;                  /* this process's device, and the device count */
    int64_t batch_index, batch_count; /* which part of each global batch this rank reads */
    RtCkptRegion *regions;            /* (3 * nparams) where this rank's tensors lie in the global ones */
    char fingerprint[RT_FINGERPRINT_MAX];
    FILE *metrics;
    RtTensor *tensors; /* (3 * nparams), data pointing into slab; NULL for a frozen one's moments */
    char **names;      /* (3 * nparams) */
    /* What a checkpoint holds: the tensors of the parameters that train, and their regions
     * (all of them but a LoRA run's frozen base, which comes again from --init or the seed). */
    RtTensor *ck_tensors;
    RtCkptRegion *ck_regions;
    int n_ck;
    int frozen;           /* parameters without moments */
    char base[4200];      /* RtCkptState.base of this run, "" while no parameter is frozen */
    char base_file[4096]; /* the base file a resumed LoRA run's checkpoint names */
    int64_t step;         /* completed steps */
    int64_t saved;        /* step of the newest checkpoint on disk from this run or resumed; -1 */
    int tty;
    int alone;     /* failed where the other ranks may not have: the job must be ended */
    int resumed;   /* the step came from a checkpoint */
    int say;       /* how a failed start is printed: SAY_OWN, SAY_NOTHING or SAY_ALL (agree_start) */
    int stopped;   /* the signal all ranks agreed to stop on (agree_stop), or 0 */
    double run_ms; /* time in steps this run, for the ETA */
    int64_t run_steps;
    int64_t heap_base; /* heap bytes in use when the trainer began (axlc run's compiler heap) */
    int64_t heap_peak; /* most heap bytes in use at a sample point (train_mem_sample) */
} Trainer;

/* What one step reports (train.c runs it, train_report.c writes it). */
typedef struct StepOut {
    float loss, grad_norm, lr;
    float aux_loss; /* the auxiliary part of loss (MoE load balance); NAN when the model has none */
    double ms;
    int64_t comm_bytes; /* sent by this device in the step's collectives */
} StepOut;

/* ===== train_opts.c ===================================================================== */

void train_opts_default(TrainOpts *o, const RtProgram *p);
int train_opts_parse(TrainOpts *o, int argc, char **argv, RtError *err);
int train_opts_check(const TrainOpts *o, RtError *err);
void train_opts_help(FILE *f, const char *prog, const TrainOpts *defaults);

/* ===== train_program.c ================================================================== */

int train_program_check(const RtProgram *p, RtError *err);
/* Elements of a parameter's chunk on this device (-1: a negative or huge shape), and of the whole. */
int64_t train_slot_numel(const RtParamSlot *s);
int64_t train_slot_global_numel(const RtParamSlot *s);

/* ===== train.c ========================================================================== */

float *train_slot_data(const Trainer *t, char *slab, int i, int k);
/* A frozen parameter (a LoRA run's base): no moments, no update, not checkpointed. */
int train_slot_frozen(const RtParamSlot *s);
void train_mem_sample(Trainer *t);
void train_warn(const Trainer *t, const char *fmt, ...) RT_PRINTF(2, 3);

/* ===== train_state.c ==================================================================== */

int train_state_init(Trainer *t, RtError *err);
int train_start_rank0(Trainer *t, int starts, RtError *err);
const char *train_last_good(const Trainer *t, char *buf, size_t cap);
int train_ckpt_save_periodic(Trainer *t);
int train_ckpt_save_final(Trainer *t, RtError *err);

/* ===== train_report.c =================================================================== */

int train_metrics_open(Trainer *t, RtError *err);
void train_metrics_write(Trainer *t, const StepOut *s, double tok_s, const double *eval);
void train_progress_print(Trainer *t, const StepOut *s, double tok_s, const double *eval);
void train_banner_print(const Trainer *t);
void train_report_stop(Trainer *t, const char *what);

#endif /* TRAIN_IMPL_H */
