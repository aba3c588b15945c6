/*
 * train_impl.h: the trainer's internals, shared by its files, one job each:
 *   train.c          the Trainer's lifecycle: setup, the start, the step loop, eval, signals
 *   train_util.c     the helpers the others call: memory samples, the slab, clocks, warnings
 *   train_opts.c     the options (--steps, --data, ...) over the program's defaults
 *   train_program.c  the generated program's tables checked before anything runs
 *   train_state.c    the first state: init, --init, resume from a checkpoint
 *   train_save.c     checkpoint saves, in the background or blocking
 *   train_outlier.c  --skip-outliers: the loss window and undoing an outlier's update
 *   train_report.c   metrics, progress, the banner, goodput
 * Private like rt_impl.h: generated trainers see only axrt.h.
 */
#ifndef TRAIN_IMPL_H
#define TRAIN_IMPL_H

/* --outlier-window when --skip-outliers is given without it */
#define RT_OUTLIER_WINDOW 100

#include <pthread.h>
#include <stdio.h>

#include "rt_impl.h"

/* The options as given (train_opts.c), over the program's defaults. */
typedef struct TrainOpts {
    const char *data, *eval_data, *init, *ckpt_dir, *metrics, *prompt, *tokenizer;
    int64_t steps, eval_every, eval_batches, ckpt_every, keep, threads, log_every, sample;
    int64_t sdc_every; /* replay every N-th step and compare the bits of its update (0: never) */
    int64_t top_k;     /* 0: not given (every token) */
    uint64_t seed;
    double temperature;      /* -1: not given (1) */
    double top_p;            /* -1: not given (1) */
    int64_t restart_step;    /* the step the job reached before the failure this run restarts from */
    double restart_downtime; /* seconds from that failure to this start */
    double peak_flops;       /* FLOP/s per device for MFU (0: the program's, the device table's) */
    double skip_outliers;    /* z-score above which a step's update is skipped (0: never) */
    int64_t outlier_window;  /* the steps it is measured against (0: not given, RT_OUTLIER_WINDOW) */
    int64_t skip_batches;    /* global batches of --data passed over before the first step */
    int resume, partial, help, config, init_allow_unused, no_kv_cache;
    int ckpt_sync; /* periodic saves block the run (the default writes them in the background) */
} TrainOpts;

/* The checkpoint save in flight (train_save.c): its phase, the snapshot it writes, the writer
 * thread and what it found. */
typedef struct AsyncSave {
    int phase;   /* SAVE_IDLE, SAVE_WRITING (each rank its file), SAVE_INDEXING (rank 0) */
    int running; /* thread is to be joined */
    int done;    /* set by the thread when its part is written (atomic) */
    pthread_t thread;
    char *buf; /* (buf_bytes) mapped: the snapshot of the parameters and moments */
    int64_t buf_bytes;
    RtTensor *tensors; /* (3 * nparams) the trainer's table over the snapshot */
    int64_t *first;    /* (3 * nparams + 1) the first copy block of each tensor (train_save.c) */
    char *bad;         /* (blocks) 1 where a block holds a value that is not finite */
    RtCkptState state; /* what is being saved */
    int64_t *info;     /* (3 * world) each rank's (failed, bytes, CRC-32) of its file */
    int rc;            /* the thread's result */
    RtError why;       /* and its message */
} AsyncSave;

/* Where the wall time of the job went, in seconds (train_report.c): since the process started,
 * plus what the run it resumes had counted (its --metrics line at the checkpoint's step). */
enum { GP_WALL, GP_STEPS, GP_STARTUP, GP_CKPT, GP_LOST, GP_DOWN, GP_N };
typedef struct Goodput {
    double start_ms;    /* the process's start, on train_util.c's clock (train_now_ms) */
    double prior[GP_N]; /* carried over from the run resumed */
    double startup_ms;  /* process start to the first step */
    double steps_ms;    /* in steps that count (productive) */
    double lost_ms;     /* in steps run again after a failure (--restart-step) */
    double ideal_s;     /* the productive steps' time at the device's peak (MFU's numerator) */
} Goodput;

/* The last steps' losses and gradient norms (train_outlier.c), oldest first, and the copy of the
 * state that lets an outlier's update be undone. */
typedef struct Outliers {
    float *loss, *gnorm; /* (cap) */
    int n, cap;
    char *text;   /* the window as checkpoint metadata */
    char *backup; /* the parameters and moments before the step (with --skip-outliers) */
} Outliers;

/* One run of the trainer: everything rt_train_main sets up, and where the run stands. */
typedef struct Trainer {
    const RtProgram *p;
    TrainOpts o;
    const char *prog;                        /* for messages */
    char *slab;                              /* (slab_bytes) */
    char *eval_slab;                         /* (slab_bytes), with --eval-data or --sdc-check-every */
    int64_t slab_bytes;                      /* this device's: its pipeline stage's (RtProgram.stage_slab_bytes) */
    void (*sync)(char *slab, int dir);       /* rt_train_main_sync's; NULL: the slab is the state */
    int (*copy)(char *dst, const char *src); /* RtTrainHooks.copy, or NULL */
    const RtSampleIo *sample_io;             /* RtTrainHooks.sample, or NULL */
    int64_t (*device_bytes)(void);           /* RtTrainHooks.device_bytes, or NULL */
    int64_t slab_mapped, eval_mapped;        /* their mappings' sizes (train_slab_new) */
    RtPool *pool;
    RtData *data, *eval;
    RtTok *tok;                       /* --tokenizer, or NULL */
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
    int64_t heap_base;     /* heap bytes in use when the trainer began (axlc run's compiler heap) */
    int64_t heap_peak;     /* most heap bytes in use at a sample point (train_mem_sample) */
    int64_t sdc_flip_step; /* the test hook AXLC_TEST_SDC_FLIP (train.c), or -1 */
    int sdc_flip_rank;
    Outliers outliers; /* the window of --skip-outliers */
    int64_t skipped;   /* steps whose update was skipped */
    AsyncSave save;    /* the checkpoint in flight */
    Goodput gp;        /* where the run's wall time went */
    double ckpt_ms;    /* time the run waited for checkpoint saves */
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

/* ===== train_util.c ===================================================================== */

/* The heap in use as the C library counts it (0 where it cannot say); train_mem_sample, after
 * start-up, every step and every save, keeps the peak above the heap the trainer began with. */
int64_t train_heap_in_use(void);
void train_mem_sample(Trainer *t);
/* Peak resident set in bytes; anonymous memory in transparent huge pages now (-1: unknown). */
int64_t train_peak_rss(void);
int64_t train_huge_resident(void);
/* A zeroed slab of `bytes` mapped on its own (*mapped: its size), with huge 2 MiB-aligned and
 * advised for huge pages; NULL when the mapping fails. */
char *train_slab_new(int64_t bytes, int huge, int64_t *mapped);
void train_slab_free(char *slab, int64_t mapped);
float *train_slab_f32(char *slab, int64_t off);
int32_t *train_slab_i32(char *slab, int64_t off);
/* Parameter i's slot k in slab: 0 the value, 1 and 2 AdamW's moments (NULL for a frozen one). */
float *train_slot_data(const Trainer *t, char *slab, int i, int k);
/* RtProgram.sync, where the program has one: RT_SYNC_TO_HOST before the runtime reads a slab
 * whole, RT_SYNC_FROM_HOST after it wrote one whole. */
void train_sync(const Trainer *t, char *slab, int dir);
/* A frozen parameter (a LoRA run's base): no moments, no update, not checkpointed. */
int train_slot_frozen(const RtParamSlot *s);
/* Whether this device holds parameter i and its moments (held together): under a pipeline a
 * stage's own parameters and moments (RtParamSlot.apart) lie in bytes the other stages' use on
 * their devices (passes/memplan.c), so they are filled on that stage alone. */
int train_slot_held(const Trainer *t, int i);
double train_now_ms(void);
/* When this process started, on train_now_ms's clock (exec, MPI's start, axlc run's compile). */
double train_process_start_ms(void);
/* A warning on stderr: "PROG: [rank R: ]MESSAGE", the event line kept out of the text. */
void train_warn(const Trainer *t, const char *fmt, ...) RT_PRINTF(2, 3);

/* ===== train_state.c ==================================================================== */

int train_state_init(Trainer *t, RtError *err);
int train_start_rank0(Trainer *t, int starts, RtError *err);
const char *train_last_good(const Trainer *t, char *buf, size_t cap);

/* ===== train_save.c ===================================================================== */

/* A periodic save (in the background unless --ckpt-sync): 0, or 1 when the state is not finite
 * (reported); a failed save is reported and the run goes on. */
int train_ckpt_save_periodic(Trainer *t);
/* The blocking last save, after waiting for the one in flight. */
int train_ckpt_save_final(Trainer *t, RtError *err);
/* Whether this rank is done with the current phase of the save in flight (0 when none is). */
int train_save_done(const Trainer *t);
/* Takes the save in flight one phase on: called on every rank together, once all are done. */
void train_save_advance(Trainer *t);
/* Waits for the save in flight to complete (every rank together). */
void train_save_wait(Trainer *t);
/* Joins the writer thread and frees the snapshot (any rank, alone). */
void train_save_free(Trainer *t);

/* ===== train_outlier.c ================================================================== */

int train_outlier_init(Trainer *t, RtError *err);
void train_outlier_free(Trainer *t);
/* Before a step: keeps a copy of the state (with --skip-outliers). */
void train_outlier_before(Trainer *t);
/* After a finite step: 1 when it was an outlier, its update undone and reported; else 0, and
 * its loss and gradient norm join the window. */
int train_outlier_after(Trainer *t, const StepOut *s);
/* The window as text for a checkpoint (valid until the next call), and back. */
const char *train_outlier_text(Trainer *t);
int train_outlier_restore(Trainer *t, const char *text, const char *where, RtError *err);

/* ===== train_report.c =================================================================== */

int train_metrics_open(Trainer *t, RtError *err);
void train_metrics_write(Trainer *t, const StepOut *s, double tok_s, const double *eval, int skipped);
/* Whether progress is one rewritten terminal line (1) or plain lines every --log-every steps (0):
 * AXLC_PROGRESS=terminal or plain, which axlc launch and axlc run --target cpu-N set from their
 * own stdout (rank 0 writes to mpirun's pty, which is a terminal whatever the log is), else
 * whether stdout is a terminal. */
int train_progress_tty(void);
void train_progress_print(Trainer *t, const StepOut *s, double tok_s, const double *eval);
void train_banner_print(const Trainer *t);
void train_report_stop(Trainer *t, const char *what, const char *tensor);
/* The seconds of step `ms` at the device's peak (0: the FLOPs or the peak unknown). */
double train_ideal_s(const Trainer *t);
/* The job's seconds so far, by kind (GP_*). */
void train_goodput(const Trainer *t, double now_ms, double *secs);
void train_goodput_print(const Trainer *t, double now_ms);
/* A pipeline's stages (every rank calls it): rank 0 prints, for each stage, the time its first
 * device waited in the stage's recvs against its time in steps (the bubble, measured). */
void train_stages_print(const Trainer *t);

#endif /* TRAIN_IMPL_H */
