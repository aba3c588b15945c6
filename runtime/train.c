/*
 * train.c: the trainer every generated program runs: options, initialization or resume, the
 * step loop, evaluation, progress, metrics and checkpoints.
 *
 * The compiled step (RtProgram.step) owns the math; this file owns everything around it. All
 * of the step's buffers live in one slab; before each step the loop writes the next batch
 * (ids, targets) and the 1-based step number into it, calls the step, which updates the
 * parameters and AdamW moments in place, and reads back loss, gradient norm and learning
 * rate. The step is deterministic, so the run is a function of (parameters, moments, data
 * position, step number): exactly what a checkpoint stores, which makes a resumed run
 * continue bit for bit.
 *
 * Evaluation must not change the run. Since a step always updates, eval runs the step on a
 * second slab, a fresh copy of the training slab for every eval batch, and keeps only the
 * loss (computed from the parameters before the update). That costs one extra slab of
 * memory while --eval-data is given, and no assumption about which slab bytes are scratch.
 *
 * No mistake or fault may lose the run. Before step 1 the checkpoint directory is made,
 * locked against a second trainer and checked for room; a checkpoint that fails to save
 * mid-run is reported and tried again at the next one; SIGINT and SIGTERM end the run after
 * the current step with a checkpoint; a checkpoint of another model is refused with what
 * differs; parameters that are no longer finite are never saved. docs/runtime.md lists the
 * guarantees and the tests behind each.
 *
 * This is the trainer's main, so unlike the rest of libaxrt it prints: progress and results
 * on stdout, problems on stderr. It still never exits; it returns the exit status.
 */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "rt_impl.h"

#define MAX_THREADS 1024

/* OpenBLAS (cblas.h does not declare it in every version). */
extern void openblas_set_num_threads(int);

/* ===== options ======================================================================== */

typedef struct TrainOpts {
    const char *data, *eval_data, *init, *ckpt_dir, *metrics, *prompt;
    int64_t steps, eval_every, eval_batches, ckpt_every, keep, threads, log_every, sample;
    uint64_t seed;
    double temperature; /* -1: not given (1) */
    int resume, partial, help, config, init_allow_unused;
} TrainOpts;

typedef enum OptKind { OPT_STR, OPT_INT, OPT_U64, OPT_FLAG, OPT_DBL } OptKind;

/* One trainer option; --help prints this table. */
typedef struct OptSpec {
    const char *name, *arg;
    OptKind kind;
    size_t field; /* offset in TrainOpts */
    int64_t min, max;
    const char *help;
} OptSpec;

#define F(x) offsetof(TrainOpts, x)
static const OptSpec OPTS[] = {
    {"--data", "FILE", OPT_STR, F(data), 0, 0, "training tokens: plain text (bytes) or an llm.c token file"},
    {"--steps", "N", OPT_INT, F(steps), 0, INT64_MAX, "train until step N (default: the config's max_steps)"},
    {"--seed", "S", OPT_U64, F(seed), 0, 0,
     "parameter init seed, or with --sample the draws' seed (default: the config's)"},
    {"--init", "FILE", OPT_STR, F(init), 0, 0, "initial parameters from a safetensors file, by path"},
    {"--init-allow-unused", NULL, OPT_FLAG, F(init_allow_unused), 0, 0,
     "with --init: accept a file with "
     "tensors no parameter uses"},
    {"--eval-data", "FILE", OPT_STR, F(eval_data), 0, 0, "evaluation tokens (same formats as --data)"},
    {"--eval-every", "N", OPT_INT, F(eval_every), 0, INT64_MAX, "evaluate every N steps (0: after the last)"},
    {"--eval-batches", "N", OPT_INT, F(eval_batches), 1, 1 << 20, "batches per evaluation"},
    {"--ckpt-dir", "DIR", OPT_STR, F(ckpt_dir), 0, 0, "save checkpoints in DIR (none without it)"},
    {"--ckpt-every", "N", OPT_INT, F(ckpt_every), 0, INT64_MAX,
     "checkpoint every N steps and at the end "
     "(0: at the end only)"},
    {"--keep", "N", OPT_INT, F(keep), 0, INT32_MAX, "keep the newest N checkpoints (0: all)"},
    {"--resume", NULL, OPT_FLAG, F(resume), 0, 0,
     "continue from the newest checkpoint in --ckpt-dir that "
     "verifies"},
    {"--partial", NULL, OPT_FLAG, F(partial), 0, 0,
     "with --resume: accept a checkpoint of another model, load "
     "the parameters that match, start the rest fresh"},
    {"--metrics", "FILE", OPT_STR, F(metrics), 0, 0,
     "append one JSON object per step (truncated unless "
     "--resume)"},
    {"--threads", "N", OPT_INT, F(threads), 1, MAX_THREADS, "CPU threads (default: all online CPUs)"},
    {"--log-every", "N", OPT_INT, F(log_every), 1, INT64_MAX, "log line every N steps when not a terminal"},
    {"--sample", "N", OPT_INT, F(sample), 1, 1 << 30,
     "generate N tokens with the newest checkpoint of --ckpt-dir "
     "(or --init) instead of training"},
    {"--prompt", "TEXT", OPT_STR, F(prompt), 0, 0,
     "with --sample: the text to continue (token ids unless the "
     "vocabulary is bytes)"},
    {"--temperature", "T", OPT_DBL, F(temperature), 0, 0, "with --sample: softmax temperature, 0 greedy [1]"},
    {"--config", NULL, OPT_FLAG, F(config), 0, 0, "print the resolved config and exit"},
    {"--help", NULL, OPT_FLAG, F(help), 0, 0, "print this help and exit"},
};
#undef F
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

static void print_help(FILE *f, const char *prog, const TrainOpts *defaults) {
    fprintf(f,
            "usage: %s --data FILE [options]\n       %s --sample N --ckpt-dir DIR|--init FILE [--prompt TEXT] "
            "[--temperature T] [--seed S]\n\noptions:\n",
            prog, prog);
    for (int i = 0; i < N_OPTS; i++) {
        const OptSpec *o = &OPTS[i];
        const char *field = (const char *)defaults + o->field;
        char head[40], dflt[48] = "";
        snprintf(head, sizeof head, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        if (o->kind == OPT_INT)
            snprintf(dflt, sizeof dflt, " [%lld]", (long long)*(const int64_t *)field);
        else if (o->kind == OPT_U64)
            snprintf(dflt, sizeof dflt, " [%llu]", (unsigned long long)*(const uint64_t *)field);
        fprintf(f, "  %-22s %s%s\n", head, o->help, dflt);
    }
}

static int parse_int(const OptSpec *o, const char *s, int64_t *out, RtError *err) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno == ERANGE)
        return rt_error_set(err, "%s: '%s' is not an integer", o->name, s);
    if (v < o->min || v > o->max)
        return rt_error_set(err, "%s: %lld is out of range, expected %lld..%lld", o->name, v, (long long)o->min,
                            (long long)o->max);
    *out = v;
    return 0;
}

static int parse_u64(const OptSpec *o, const char *s, uint64_t *out, RtError *err) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *s == '-' || *s == '+' || *end || errno == ERANGE)
        return rt_error_set(err, "%s: '%s' is not an unsigned 64-bit integer", o->name, s);
    *out = v;
    return 0;
}

static int parse_dbl(const OptSpec *o, const char *s, double *out, RtError *err) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno == ERANGE || !isfinite(v))
        return rt_error_set(err, "%s: '%s' is not a finite number", o->name, s);
    if (v < 0)
        return rt_error_set(err, "%s: %s is negative; expected 0 (greedy) or more", o->name, s);
    *out = v;
    return 0;
}

static int set_opt(TrainOpts *o, const OptSpec *spec, const char *val, RtError *err) {
    char *field = (char *)o + spec->field;
    switch (spec->kind) {
    case OPT_STR:
        if (!*val)
            return rt_error_set(err, "%s: empty value", spec->name);
        *(const char **)field = val;
        return 0;
    case OPT_INT: return parse_int(spec, val, (int64_t *)field, err);
    case OPT_U64: return parse_u64(spec, val, (uint64_t *)field, err);
    case OPT_DBL: return parse_dbl(spec, val, (double *)field, err);
    case OPT_FLAG: *(int *)field = 1; return 0;
    }
    return 0;
}

static const OptSpec *find_opt(const char *arg, size_t len) {
    for (int i = 0; i < N_OPTS; i++)
        if (strlen(OPTS[i].name) == len && strncmp(OPTS[i].name, arg, len) == 0)
            return &OPTS[i];
    return NULL;
}

/* Accepts "--opt VALUE" and "--opt=VALUE"; a later repetition wins. */
static int parse_args(TrainOpts *o, int argc, char **argv, RtError *err) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const OptSpec *spec = strncmp(arg, "--", 2) == 0 ? find_opt(arg, len) : NULL;
        if (!spec)
            return rt_error_set(err, "unknown %s '%s' (--help lists the options)",
                                arg[0] == '-' ? "option" : "argument", arg);
        const char *val = eq ? eq + 1 : NULL;
        if (spec->kind == OPT_FLAG && val)
            return rt_error_set(err, "%s takes no value", spec->name);
        if (spec->kind != OPT_FLAG && !val) {
            if (i + 1 >= argc)
                return rt_error_set(err, "%s needs a value: %s %s", spec->name, spec->name, spec->arg);
            val = argv[++i];
        }
        if (set_opt(o, spec, val, err) != 0)
            return -1;
    }
    return 0;
}

/* --sample only reads weights: the options that train or write are mistakes next to it. */
static int check_sample_opts(const TrainOpts *o, RtError *err) {
    const char *train_only = o->data        ? "--data"
                             : o->eval_data ? "--eval-data"
                             : o->resume    ? "--resume"
                             : o->partial   ? "--partial"
                             : o->metrics   ? "--metrics"
                                            : NULL;
    if (train_only)
        return rt_error_set(err, "--sample generates text and does not train: %s is not used with it", train_only);
    if (o->init_allow_unused && !o->init)
        return rt_error_set(err, "--init-allow-unused needs --init FILE");
    if (!o->ckpt_dir && !o->init)
        return rt_error_set(err, "--sample needs weights: --ckpt-dir DIR (its newest checkpoint) or --init FILE");
    return 0;
}

/* --metrics is the trainer's one output besides its checkpoints: it must not be a file the run
 * reads (opening it would truncate the mapped --data under the trainer), nor lie inside a
 * checkpoint, which pruning deletes and --resume verifies; nor may --data or --eval-data. */
static int check_files(const TrainOpts *o, RtError *err) {
    const RtPathArg out = {"--metrics", o->metrics, NULL};
    const RtPathArg in[] = {
        {"--data", o->data, NULL},
        {"--eval-data", o->eval_data, NULL},
        {"--init", o->init, NULL},
        {"--ckpt-dir", o->ckpt_dir, "step_"},
    };
    if (rt_file_check_outputs(&out, 1, in, (int)(sizeof in / sizeof in[0]), err) != 0)
        return -1;
    /* the token files are read all run long, while pruning deletes old checkpoints: one inside
     * a step directory would be deleted under the run */
    const RtPathArg data[] = {{"--data", o->data, NULL}, {"--eval-data", o->eval_data, NULL}};
    return rt_file_check_outputs(data, 2, &in[3], 1, err);
}

static int check_opts(const TrainOpts *o, RtError *err) {
    if (rt_env_check(err) != 0)
        return -1;
    if (o->sample > 0)
        return check_sample_opts(o, err);
    if (o->prompt || o->temperature >= 0)
        return rt_error_set(err, "%s needs --sample N", o->prompt ? "--prompt" : "--temperature");
    if (!o->data)
        return rt_error_set(err, "--data FILE is required (--help lists the options)");
    if (o->resume && !o->ckpt_dir)
        return rt_error_set(err, "--resume needs --ckpt-dir DIR");
    if (o->partial && !o->resume)
        return rt_error_set(err, "--partial needs --resume");
    if (o->init_allow_unused && !o->init)
        return rt_error_set(err, "--init-allow-unused needs --init FILE");
    if (o->eval_every > 0 && !o->eval_data)
        return rt_error_set(err, "--eval-every needs --eval-data FILE");
    return check_files(o, err);
}

/* The CPUs of this machine, shared by the ranks of a job that run on it (Open MPI, MPICH and
 * Slurm say how many there are), so that N processes on one machine do not each take them all. */
static int64_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    static const char *const local[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++) {
        const char *s = getenv(local[i]);
        long k = s ? strtol(s, NULL, 10) : 0;
        if (k > 1) {
            n /= k;
            break;
        }
    }
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

static void default_opts(TrainOpts *o, const RtProgram *p) {
    memset(o, 0, sizeof *o);
    o->steps = p->max_steps;
    o->seed = p->seed;
    o->ckpt_every = p->ckpt_every > 0 ? p->ckpt_every : 0;
    o->keep = p->ckpt_keep > 0 ? p->ckpt_keep : 0;
    o->eval_batches = 4;
    o->threads = online_cpus();
    o->log_every = 1;
    o->temperature = -1;
}

/* ===== the program ==================================================================== */

static int64_t slot_numel(const RtParamSlot *s) {
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n = s->shape[d] < 0 || (s->shape[d] > 0 && n > INT64_MAX / 4 / s->shape[d]) ? -1 : n * s->shape[d];
    return n;
}

/* `bytes` at `off` lie in the slab, 4-byte aligned. */
static int check_region(const RtProgram *p, const char *what, const char *path, int64_t off, int64_t bytes,
                        RtError *err) {
    if (bytes < 0 || off < 0 || off % 4 != 0 || off > p->slab_bytes - bytes)
        return rt_error_set(err,
                            "program: %s%s%s: %lld bytes at offset %lld, slab holds %lld (4-byte "
                            "aligned offsets expected)",
                            what, path ? " of " : "", path ? path : "", (long long)bytes, (long long)off,
                            (long long)p->slab_bytes);
    return 0;
}

/* A split names mesh axes (index + 1) of the mesh, each at most once, 0 ending the list. */
static int check_split(const RtProgram *p, const uint8_t axes[RT_MAX_SPLIT_AXES], int64_t *count) {
    *count = 1;
    for (int i = 0, end = 0; i < RT_MAX_SPLIT_AXES; i++) {
        if (!axes[i]) {
            end = 1;
            continue;
        }
        if (end || axes[i] > p->mesh.naxes)
            return -1;
        for (int j = 0; j < i; j++)
            if (axes[j] == axes[i])
                return -1;
        *count *= p->mesh.sizes[axes[i] - 1];
    }
    return 0;
}

static int check_slot(const RtProgram *p, const RtParamSlot *s, RtError *err) {
    if (!s->path || !s->path[0] || s->rank < 0 || s->rank > RT_MAX_PARAM_RANK)
        return rt_error_set(err, "program: a parameter has no path or rank %d", (int)s->rank);
    for (int d = 0; d < s->rank; d++) {
        int64_t count;
        if (check_split(p, s->split[d], &count) != 0 || s->shape[d] < 0 || s->global_shape[d] != s->shape[d] * count)
            return rt_error_set(err, "program: parameter %s: dim %d holds %lld of %lld over a bad split", s->path, d,
                                (long long)s->shape[d], (long long)s->global_shape[d]);
    }
    int64_t bytes = slot_numel(s) * 4;
    if (bytes < 0)
        return rt_error_set(err, "program: parameter %s has a negative or huge shape", s->path);
    if (check_region(p, "parameter", s->path, s->offset, bytes, err) != 0 ||
        check_region(p, "first moment", s->path, s->m_offset, bytes, err) != 0 ||
        check_region(p, "second moment", s->path, s->v_offset, bytes, err) != 0)
        return -1;
    return 0;
}

static int check_mesh(const RtProgram *p, RtError *err) {
    int64_t devices = 1, count;
    if (p->mesh.naxes < 0 || p->mesh.naxes > RT_MAX_MESH_AXES)
        return rt_error_set(err, "program: a mesh of %d axes", (int)p->mesh.naxes);
    for (int a = 0; a < p->mesh.naxes; a++) {
        if (!p->mesh.names[a] || p->mesh.sizes[a] < 1 || p->mesh.sizes[a] > (1 << 20) / devices)
            return rt_error_set(err, "program: mesh axis %d has no name or a bad size", a);
        devices *= p->mesh.sizes[a];
    }
    if (check_split(p, p->batch_split, &count) != 0)
        return rt_error_set(err, "program: the batch split names an axis outside the mesh");
    return 0;
}

static int check_collectives(const RtProgram *p, RtError *err) {
    if (p->ncollectives < 0 || (p->ncollectives > 0 && !p->collectives))
        return rt_error_set(err, "program: no collective table");
    for (int32_t i = 0; i < p->ncollectives; i++) {
        const RtCollective *k = &p->collectives[i];
        if (k->rank < 0 || k->rank > RT_MAX_DIMS)
            return rt_error_set(err, "program: collective %d has rank %d", i, (int)k->rank);
        int64_t in = 4, out = 4;
        for (int d = 0; d < k->rank; d++) {
            if (k->in_shape[d] < 0 || k->out_shape[d] < 0 || (k->in_shape[d] && in > INT64_MAX / 8 / k->in_shape[d]) ||
                (k->out_shape[d] && out > INT64_MAX / 8 / k->out_shape[d]))
                return rt_error_set(err, "program: collective %d has a bad shape", i);
            in *= k->in_shape[d];
            out *= k->out_shape[d];
        }
        char what[48];
        snprintf(what, sizeof what, "collective %d", i);
        if (check_region(p, what, "its operand", k->in_offset, in, err) != 0 ||
            check_region(p, what, "its result", k->out_offset, out, err) != 0)
            return -1;
    }
    return 0;
}

/* The generated program is trusted less than the runtime: a bad table is reported, not run. */
static int check_program(const RtProgram *p, RtError *err) {
    if (p->abi_version != RT_ABI_VERSION)
        return rt_error_set(err, "program: ABI version %d, this runtime implements %d", (int)p->abi_version,
                            RT_ABI_VERSION);
    if (!p->step || p->slab_bytes <= 0 || p->nparams < 0 || (p->nparams > 0 && !p->params))
        return rt_error_set(err, "program: no step function, slab, or parameter table");
    if (p->batch < 1 || p->seq < 1 || p->vocab < 1 || p->batch > INT32_MAX / p->seq || p->vocab > INT32_MAX)
        return rt_error_set(err,
                            "program: batch %lld x sequence %lld, vocabulary %lld: expected positive "
                            "sizes",
                            (long long)p->batch, (long long)p->seq, (long long)p->vocab);
    if (check_mesh(p, err) != 0)
        return -1;
    int64_t bt = p->batch * p->seq * 4;
    if (check_region(p, "ids", NULL, p->ids_offset, bt, err) != 0 ||
        check_region(p, "targets", NULL, p->targets_offset, bt, err) != 0 ||
        check_region(p, "step", NULL, p->step_offset, 4, err) != 0 ||
        check_region(p, "loss", NULL, p->loss_offset, 4, err) != 0 ||
        check_region(p, "grad_norm", NULL, p->grad_norm_offset, 4, err) != 0 ||
        check_region(p, "lr", NULL, p->lr_offset, 4, err) != 0 ||
        (p->has_aux_loss && check_region(p, "aux_loss", NULL, p->aux_loss_offset, 4, err) != 0))
        return -1;
    for (int i = 0; i < p->nparams; i++)
        if (check_slot(p, &p->params[i], err) != 0)
            return -1;
    return check_collectives(p, err);
}

/* ===== the trainer ==================================================================== */

/* Checkpoint tensor k*nparams + i: k = 0 the parameter (name = path), 1 "opt/m/<path>",
 * 2 "opt/v/<path>". Coupled with slot_data. */
static const char *const TENSOR_PREFIX[3] = {"", "opt/m/", "opt/v/"};

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
    RtTensor *tensors; /* (3 * nparams), data pointing into slab */
    char **names;      /* (3 * nparams) */
    int64_t step;      /* completed steps */
    int64_t saved;     /* step of the newest checkpoint on disk from this run or resumed; -1 */
    int tty;
    int alone;     /* failed where the other ranks may not have: the job must be ended */
    int resumed;   /* the step came from a checkpoint */
    int say;       /* how a failed start is printed: SAY_OWN, SAY_NOTHING or SAY_ALL (agree_start) */
    int stopped;   /* the signal all ranks agreed to stop on (agree_stop), or 0 */
    double run_ms; /* time in steps this run, for the ETA */
    int64_t run_steps;
    int64_t heap_base; /* heap bytes in use when the trainer began (axlc run's compiler heap) */
    int64_t heap_peak; /* most heap bytes in use at a sample point (mem_sample) */
} Trainer;

/* The process's heap in use, as the C library counts it (the slabs are mapped on their own,
 * and mem_sample adds them); 0 where the C library cannot say. */
static int64_t heap_in_use(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return (int64_t)(mi.uordblks + mi.hblkhd);
#else
    return 0;
#endif
}

/* Sampled after start-up, after every step and after every checkpoint save: what the trainer
 * holds above the heap it began with is the measured side of `axlc memcheck`'s prediction. */
static void mem_sample(Trainer *t) {
    int64_t heap = heap_in_use();
    if (heap == 0) /* the C library cannot say */
        return;
    int64_t used = heap - t->heap_base + t->slab_mapped + t->eval_mapped;
    if (used > t->heap_peak)
        t->heap_peak = used;
}

/* Peak resident set of the process (code, libraries and stacks included), in bytes. */
static int64_t peak_rss(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0;
}

/* Anonymous memory the process holds in transparent huge pages now, in bytes; -1 where the
 * kernel does not say. */
static int64_t huge_resident(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return -1;
    char line[256];
    long long kib = -1;
    while (kib < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %lld kB", &kib) != 1)
            kib = -1;
    fclose(f);
    return kib < 0 ? -1 : (int64_t)kib * 1024;
}

static float *slab_f32(char *slab, int64_t off) {
    return (float *)(void *)(slab + off);
}
static int32_t *slab_i32(char *slab, int64_t off) {
    return (int32_t *)(void *)(slab + off);
}

static float *slot_data(const Trainer *t, char *slab, int i, int k) {
    const RtParamSlot *s = &t->p->params[i];
    return slab_f32(slab, k == 0 ? s->offset : k == 1 ? s->m_offset : s->v_offset);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A zeroed slab of `bytes`, mapped on its own (its size rounded up to a page is *mapped).
 * With huge set it starts on a 2 MiB boundary and is advised for transparent huge pages: a
 * step streams the parameters, their gradients and AdamW's moments (gpt2-124m: 2.3 GiB), and
 * with 4 KiB pages the misses in the translation caches cost it 1.5 to 6% of its step
 * (docs/bench.md, "Huge pages"). Advice only: where the kernel gives none (transparent_hugepage "never",
 * or no 2 MiB page free) the slab keeps 4 KiB pages. */
static char *slab_new(int64_t bytes, int huge, int64_t *mapped) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), big = (size_t)2 << 20;
    size_t size = ((size_t)bytes + page - 1) / page * page, over = huge ? size + big : size;
    char *m = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    char *s = m;
    if (huge) { /* keep the aligned [s, s + size) of the larger mapping */
        s = (char *)(((uintptr_t)m + big - 1) & ~(uintptr_t)(big - 1));
        if (s > m)
            munmap(m, (size_t)(s - m));
        if (m + over > s + size)
            munmap(s + size, (size_t)(m + over - (s + size)));
#ifdef MADV_HUGEPAGE
        (void)madvise(s, size, MADV_HUGEPAGE);
#endif
    }
    /* The kernel's pages are zero already; writing them now, on one thread before the pool
     * starts, takes the page faults here. Left to the first step they cost gpt2-124m 4 s
     * more than this: a page first read maps the shared zero page, and its first write then
     * replaces it on every thread's core. */
    memset(s, 0, size);
    *mapped = (int64_t)size;
    return s;
}

static void slab_free(char *slab, int64_t mapped) {
    if (slab)
        munmap(slab, (size_t)mapped);
}

/* Where this rank's chunk of parameter s lies in the whole one. The chunk is written to a
 * checkpoint by the first device holding it: the one whose coordinates off the split's axes are
 * all zero. */
static void slot_region(const Trainer *t, const RtParamSlot *s, RtCkptRegion *r) {
    const RtMesh *m = &t->p->mesh;
    int used[RT_MAX_MESH_AXES] = {0};
    memset(r, 0, sizeof *r);
    for (int d = 0; d < s->rank; d++) {
        r->shape[d] = s->global_shape[d];
        r->start[d] = rt_mesh_chunk(m, s->split[d], t->rank, NULL) * s->shape[d];
        for (int i = 0; i < RT_MAX_SPLIT_AXES && s->split[d][i]; i++)
            used[s->split[d][i] - 1] = 1;
    }
    r->owner = 1;
    for (int a = 0; a < m->naxes; a++)
        if (!used[a] && rt_comm_coord(t->comm, a) != 0)
            r->owner = 0;
}

static int tensors_make(Trainer *t, RtError *err) {
    int n = t->p->nparams;
    t->tensors = calloc((size_t)n * 3 + 1, sizeof *t->tensors);
    t->names = calloc((size_t)n * 3 + 1, sizeof *t->names);
    t->regions = calloc((size_t)n * 3 + 1, sizeof *t->regions);
    if (!t->tensors || !t->names || !t->regions)
        return rt_error_set(err, "out of memory");
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < n; i++) {
            const RtParamSlot *s = &t->p->params[i];
            size_t len = strlen(TENSOR_PREFIX[k]) + strlen(s->path) + 1;
            char *name = t->names[k * n + i] = malloc(len);
            if (!name)
                return rt_error_set(err, "out of memory");
            snprintf(name, len, "%s%s", TENSOR_PREFIX[k], s->path);
            RtTensor *ts = &t->tensors[k * n + i];
            *ts = (RtTensor){.name = name, .dtype = RT_DT_F32, .ndim = s->rank, .data = slot_data(t, t->slab, i, k)};
            memcpy(ts->shape, s->shape, sizeof s->shape);
            slot_region(t, s, &t->regions[k * n + i]);
        }
    return 0;
}

static void trainer_free(Trainer *t) {
    for (int i = 0; t->names && i < 3 * t->p->nparams; i++)
        free(t->names[i]);
    free(t->names);
    free(t->tensors);
    free(t->regions);
    if (t->metrics)
        fclose(t->metrics);
    rt_data_close(t->eval);
    rt_data_close(t->data);
    rt_ckpt_unlock(t->lock);
    rt_pool_free(t->pool);
    slab_free(t->eval_slab, t->eval_mapped);
    slab_free(t->slab, t->slab_mapped);
}

static void warn(const Trainer *t, const char *fmt, ...) RT_PRINTF(2, 3);
static void warn(const Trainer *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    if (t->world > 1)
        fprintf(stderr, "%s: rank %d: ", t->prog, t->rank);
    else
        fprintf(stderr, "%s: ", t->prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ===== parameters: init, --init, checkpoints ========================================== */

/* Calls fn on each contiguous run of the box [start, start + count) of a row-major tensor of
 * shape `shape`: the run's offset in the box and in the whole tensor, and its length. */
static int for_runs(int rank, const int64_t *shape, const int64_t *start, const int64_t *count,
                    int (*fn)(void *ctx, int64_t local, int64_t global, int64_t n, RtError *err), void *ctx,
                    RtError *err) {
    int64_t idx[RT_MAX_DIMS] = {0}, rows = 1, len = rank ? count[rank - 1] : 1;
    for (int d = 0; d + 1 < rank; d++)
        rows *= count[d];
    if (len == 0)
        return 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t g = 0;
        for (int d = 0; d < rank; d++)
            g = g * shape[d] + start[d] + (d + 1 < rank ? idx[d] : 0);
        if (fn(ctx, r * len, g, len, err) != 0)
            return -1;
        for (int d = rank - 2; d >= 0 && ++idx[d] == count[d]; d--)
            idx[d] = 0;
    }
    return 0;
}

typedef struct SeedRun {
    float *dst;
    const RtParamSlot *s;
    uint64_t seed;
} SeedRun;

static int seed_run(void *ctx, int64_t local, int64_t global, int64_t n, RtError *err) {
    SeedRun *r = ctx;
    return rt_init_fill(r->dst + local, n, global, r->s->path, r->seed, &r->s->init, err);
}

/* Each rank fills its chunk of the unsharded init: a sharded run starts from the same weights. */
static int params_seed(Trainer *t, RtError *err) {
    for (int i = 0; i < t->p->nparams; i++) {
        const RtParamSlot *s = &t->p->params[i];
        SeedRun r = {slot_data(t, t->slab, i, 0), s, t->o.seed};
        if (for_runs(s->rank, s->global_shape, t->regions[i].start, s->shape, seed_run, &r, err) != 0)
            return -1;
    }
    return 0;
}

typedef struct CopyRun {
    float *dst;
    const float *src;
} CopyRun;

static int copy_run(void *ctx, int64_t local, int64_t global, int64_t n, RtError *err) {
    (void)err;
    CopyRun *r = ctx;
    memcpy(r->dst + local, r->src + global, (size_t)n * sizeof *r->dst);
    return 0;
}

/* Tensor j of the table (its whole global form) from st into this rank's chunk. */
static int tensor_read_st(Trainer *t, const RtSt *st, int j, RtError *err) {
    const RtTensor *ts = &t->tensors[j];
    const RtCkptRegion *rg = &t->regions[j];
    float *dst = slot_data(t, t->slab, j % t->p->nparams, j / t->p->nparams);
    if (t->world == 1)
        return rt_st_read_f32(st, ts->name, ts->shape, ts->ndim, dst, err);
    int64_t n = 1;
    for (int d = 0; d < ts->ndim; d++)
        n *= rg->shape[d];
    float *whole = malloc((size_t)(n ? n : 1) * sizeof *whole);
    if (!whole)
        return rt_error_set(err, "%s: out of memory", ts->name);
    int rc = rt_st_read_f32(st, ts->name, rg->shape, ts->ndim, whole, err);
    CopyRun r = {dst, whole};
    if (rc == 0)
        rc = for_runs(ts->ndim, rg->shape, rg->start, ts->shape, copy_run, &r, err);
    free(whole);
    return rc;
}

/* Reads tensors [0, count) of the checkpoint table from st into the slab. */
static int tensors_read(Trainer *t, const RtSt *st, int count, RtError *err) {
    for (int j = 0; j < count; j++)
        if (tensor_read_st(t, st, j, err) != 0)
            return -1;
    return 0;
}

/* Tensors [0, count) from a checkpoint, each rank its own chunk, whichever files hold it. */
static int tensors_read_ckpt(Trainer *t, const RtCkpt *ck, int count, RtError *err) {
    int n = t->p->nparams;
    for (int j = 0; j < count; j++) {
        const RtTensor *ts = &t->tensors[j];
        if (rt_ckpt_read_f32(ck, ts->name, t->regions[j].shape, ts->ndim, t->regions[j].start, ts->shape,
                             slot_data(t, t->slab, j % n, j / n), err) != 0)
            return -1;
    }
    return 0;
}

/* Every problem of an --init file is listed (weights.c), then refused in one line. */
static int init_file_check(Trainer *t, const RtSt *st, RtError *err) {
    RtInitCheck c;
    if (rt_init_refuse_shard(st, t->o.init, err) != 0)
        return -1;
    if (rt_init_check(t->p->params, t->p->nparams, st, t->o.init_allow_unused, &c) != 0)
        return rt_error_set(err, "--init: %s: out of memory", t->o.init);
    int bad = c.missing || c.mismatched || (c.unused && !t->o.init_allow_unused);
    size_t len = c.report ? strlen(c.report) : 0;
    if (len && c.report[len - 1] == '\n')
        c.report[len - 1] = 0; /* warn() ends the line */
    if (c.report)
        warn(t, "%s --init %s:\n%s", bad ? "error:" : "note:", t->o.init, c.report);
    free(c.report);
    if (!bad)
        return 0;
    return rt_error_set(err, "--init: %s: %d of %d parameters missing, %d in another shape, %d tensors unused%s",
                        t->o.init, c.missing, t->p->nparams, c.mismatched, c.unused,
                        c.unused && !t->o.init_allow_unused ? " (--init-allow-unused accepts unused tensors)" : "");
}

/* A NaN or an infinity in the weights would stop the run at its first step, far from the file
 * that caused it: refused here, naming the tensor and the file. */
static int init_file_finite(Trainer *t, const RtSt *st, RtError *err) {
    RtError why;
    for (int i = 0; i < t->p->nparams; i++)
        if (rt_st_check_finite(st, t->p->params[i].path, &why) != 0)
            return rt_error_set(err, "--init: %s; refusing to start from weights that are not finite", why.msg);
    return 0;
}

static int params_load(Trainer *t, RtError *err) {
    RtSt *st;
    RtError why;
    if (rt_st_open(&st, t->o.init, &why) != 0)
        return rt_error_set(err, "--init: %s", why.msg);
    rt_st_dump_as_weights(st); /* an interpreter's --dump: its new parameters */
    if (init_file_check(t, st, err) != 0 || init_file_finite(t, st, err) != 0) {
        rt_st_close(st);
        return -1;
    }
    int rc = tensors_read(t, st, t->p->nparams, &why);
    rt_st_close(st);
    return rc == 0 ? 0 : rt_error_set(err, "--init: %s", why.msg);
}

/* "the last good checkpoint is DIR/step_N (step N); --resume continues from it", or why
 * there is none: the end of every message about a run that stops or fails to save. */
static const char *last_good(const Trainer *t, char *buf, size_t cap) {
    if (!t->o.ckpt_dir)
        snprintf(buf, cap, "no checkpoint to go back to (no --ckpt-dir)");
    else if (t->saved < 0)
        snprintf(buf, cap, "no checkpoint was saved in %s yet", t->o.ckpt_dir);
    else
        snprintf(buf, cap, "the last good checkpoint is %s/step_%08lld (step %lld); --resume continues from it",
                 t->o.ckpt_dir, (long long)t->saved, (long long)t->saved);
    return buf;
}

/* The first parameter or moment holding a NaN or an infinity, or NULL. Such a state is never
 * saved: "last good checkpoint" must be good. */
static const char *nonfinite_tensor(const Trainer *t) {
    for (int j = 0; j < 3 * t->p->nparams; j++) {
        const float *x = slot_data(t, t->slab, j % t->p->nparams, j / t->p->nparams);
        for (int64_t k = 0, n = slot_numel(&t->p->params[j % t->p->nparams]); k < n; k++)
            if (!isfinite(x[k]))
                return t->names[j];
    }
    return NULL;
}

static void report_stop(Trainer *t, const char *what) {
    char buf[RT_ERROR_MAX];
    if (t->tty)
        printf("\n");
    fflush(stdout);
    if (t->world > 1)
        fprintf(stderr,
                "%s: rank %d: step %lld: %s: not finite; training stopped, nothing saved for this step.\n"
                "%s: %s\n",
                t->prog, t->rank, (long long)t->step, what, t->prog, last_good(t, buf, sizeof buf));
    else
        fprintf(stderr, "%s: step %lld: %s: not finite; training stopped, nothing saved for this step.\n%s: %s\n",
                t->prog, (long long)t->step, what, t->prog, last_good(t, buf, sizeof buf));
}

/* The sum over all ranks of one number (each rank's own when there is one rank). A failed
 * exchange has already ended the job (comm.c), so this returns only agreed values. */
static int64_t agree_sum(Trainer *t, int64_t v) {
    RtError why;
    if (t->world > 1 && rt_comm_sum_i64(t->comm, &v, 1, &why) != 0) {
        warn(t, "%s", why.msg);
        rt_comm_abort(t->comm, 1);
    }
    return v;
}

/* Returns 0 when saved, -1 when the save failed (err says why), 1 when the state is not
 * finite (reported; nothing saved). */
static int ckpt_save(Trainer *t, RtError *err) {
    const char *bad = nonfinite_tensor(t);
    if (agree_sum(t, bad != NULL) > 0) {
        char what[1024];
        snprintf(what, sizeof what, "%.900s after the update", bad ? bad : "a parameter of another rank");
        if (bad || t->rank == 0)
            report_stop(t, what);
        return 1;
    }
    RtCkptState s = {
        .step = t->step,
        .data_position = rt_data_position(t->data),
        .rng_state = t->o.seed,
        .config = t->p->config,
        .tensors = t->tensors,
        .n_tensors = 3 * t->p->nparams,
        .fingerprint = t->fingerprint,
        .comm = t->world > 1 ? t->comm : NULL,
        .regions = t->regions,
    };
    RtError why;
    int rc = rt_ckpt_save(t->o.ckpt_dir, &s, (int)t->o.keep, &why);
    mem_sample(t);
    if (rc < 0)
        return rt_error_set(err, "%s", why.msg);
    if (rc > 0 && t->rank == 0)
        warn(t, "%s", why.msg); /* saved; a stale checkpoint takes room but harms nothing */
    t->saved = t->step;
    return 0;
}

/* A periodic save that fails does not end the run: the work since the last checkpoint is
 * still in memory, and the next save may succeed (space freed, disk remounted). */
static int ckpt_save_periodic(Trainer *t) {
    RtError why;
    char buf[RT_ERROR_MAX];
    int rc = ckpt_save(t, &why);
    int64_t next = t->step + t->o.ckpt_every < t->o.steps ? t->step + t->o.ckpt_every : t->o.steps;
    if (rc < 0 && t->rank == 0)
        warn(t, "step %lld: checkpoint not saved: %s; training goes on and saves again at step %lld%s; %s",
             (long long)t->step, why.msg, (long long)next, next == t->o.steps ? ", the last" : "",
             last_good(t, buf, sizeof buf));
    return rc > 0 ? 1 : 0;
}

/* The last save of a run (at its end, or when stopped by a signal): a failure is an error that
 * names the last good checkpoint. 1 when the state is not finite (reported). */
static int ckpt_save_final(Trainer *t, RtError *err) {
    RtError why;
    char buf[RT_ERROR_MAX];
    if (!t->o.ckpt_dir || t->saved == t->step)
        return 0;
    int rc = ckpt_save(t, &why);
    if (rc < 0)
        return rt_error_set(err, "could not save the checkpoint of step %lld: %s; the run ends without it; %s",
                            (long long)t->step, why.msg, last_good(t, buf, sizeof buf));
    return rc;
}

/* Complete checkpoints newer than the one resumed failed to verify; rt_ckpt_save would refuse
 * to write their steps again. They are renamed to step_<S>.damaged (or .damaged.2, ... when
 * that exists: an earlier resume set one aside), kept for inspection and invisible to the
 * checkpoint code, rather than deleted. The name follows ckpt.c. */
static int set_aside_newer(Trainer *t, int64_t resumed, RtError *err) {
    int64_t step;
    int found;
    while ((found = rt_ckpt_latest(t->o.ckpt_dir, RT_CKPT_ANY, &step, err)) == 1 && step > resumed) {
        char from[4096], to[4096 + 32];
        snprintf(from, sizeof from, "%s/step_%08lld", t->o.ckpt_dir, (long long)step);
        snprintf(to, sizeof to, "%s.damaged", from);
        struct stat st;
        for (int k = 2; lstat(to, &st) == 0; k++) /* a link there counts as taken: never renamed over */
            if (k > 1000)
                return rt_error_set(err, "%s: cannot set the damaged checkpoint aside: %s exists", from, to);
            else
                snprintf(to, sizeof to, "%s.damaged.%d", from, k);
        if (rename(from, to) != 0)
            return rt_error_set(err, "%s: cannot rename to %s: %s", from, to, strerror(errno));
        warn(t, "set the damaged checkpoint aside as %s", to);
    }
    return found < 0 ? -1 : 0;
}

/* The checkpoint must hold this model. A different one is refused with what differs, unless
 * --partial asks to load what matches. Config changes outside /model (learning rate, input)
 * are allowed, with a note. */
static int check_model(Trainer *t, RtCkpt *ck, const char *where, RtError *err) {
    char diff[RT_ERROR_MAX / 2];
    const RtParamSlot *ps = t->p->params;
    if (strcmp(rt_ckpt_fingerprint(ck), t->fingerprint) != 0 &&
        rt_model_diff(ps, t->p->nparams, t->p->config, ck, rt_ckpt_config(ck), diff, sizeof diff) > 0) {
        if (!t->o.partial)
            return rt_error_set(err,
                                "%s holds another model: %s; refusing to resume (--partial loads the parameters "
                                "that match and starts the rest fresh)",
                                where, diff);
        if (t->rank == 0)
            warn(t, "--partial: %s holds another model: %s", where, diff);
    }
    if (rt_config_diff_outside_model(t->p->config, rt_ckpt_config(ck), diff, sizeof diff) > 0 && t->rank == 0)
        warn(t, "note: the config differs from the checkpoint's: %s; continuing with this one", diff);
    return 0;
}

/* Up to 3 names, quoted, then how many more: "'a', 'b', 'c' and 21 more". */
static void names_list(char *buf, size_t cap, const char *const *names, int n) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && i < 3 && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s'%.200s'", i ? ", " : "", names[i]);
    if (n > 3 && len < cap)
        snprintf(buf + len, cap - len, " and %d more", n - 3);
}

/* --partial that matched no parameter: this is another model's checkpoint, and carrying on
 * from its step and data position would train nothing of it. Its parameter names and ours
 * show why (often a different prefix). */
static int partial_none(Trainer *t, const RtCkpt *ck, const char *where, RtError *err) {
    const char *have[3];
    int nhave = 0, total = 0;
    for (int i = 0; i < rt_ckpt_count(ck); i++) {
        const char *name = rt_ckpt_tensor(ck, i)->name;
        if (strncmp(name, "opt/", 4) == 0)
            continue;
        if (nhave < 3)
            have[nhave++] = name;
        total++;
    }
    char want[1024], found[1024];
    names_list(want, sizeof want, (const char *const *)t->names, t->p->nparams);
    names_list(found, sizeof found, have, nhave);
    if (total > nhave)
        snprintf(found + strlen(found), sizeof found - strlen(found), " and %d more", total - nhave);
    return rt_error_set(err,
                        "%s: --partial: 0 of %d parameters matched by name and shape, so nothing of it would be "
                        "loaded; this model expects %s; the checkpoint holds %s",
                        where, t->p->nparams, want, total ? found : "no parameters");
}

/* With --partial, each tensor whose name and shape match is loaded; the others keep their
 * fresh values (the seeded init, zero moments). */
static int tensors_read_partial(Trainer *t, const RtCkpt *ck, const char *where, RtError *err) {
    int n = t->p->nparams, loaded = 0;
    if (params_seed(t, err) != 0)
        return -1;
    for (int j = 0; j < 3 * n; j++) {
        const RtTensor *want = &t->tensors[j], *have = rt_ckpt_find(ck, want->name);
        const RtCkptRegion *rg = &t->regions[j];
        if (!have || have->ndim != want->ndim ||
            memcmp(have->shape, rg->shape, (size_t)want->ndim * sizeof *want->shape) != 0)
            continue;
        if (rt_ckpt_read_f32(ck, want->name, rg->shape, want->ndim, rg->start, want->shape,
                             slot_data(t, t->slab, j % n, j / n), err) != 0)
            return -1;
        loaded += j < n;
    }
    if (loaded == 0)
        return partial_none(t, ck, where, err);
    if (t->rank == 0)
        warn(t, "--partial: loaded %d of %d parameters from the checkpoint", loaded, n);
    return 0;
}

static int ckpt_restore(Trainer *t, RtCkpt *ck, RtError *err) {
    char where[4096];
    snprintf(where, sizeof where, "%s/step_%08lld", t->o.ckpt_dir, (long long)rt_ckpt_step(ck));
    if (check_model(t, ck, where, err) != 0)
        return -1;
    int rc = t->o.partial ? tensors_read_partial(t, ck, where, err) : tensors_read_ckpt(t, ck, 3 * t->p->nparams, err);
    if (rc != 0)
        return -1;
    if (rt_data_seek(t->data, rt_ckpt_data_position(ck), NULL) != 0)
        return rt_error_set(err,
                            "%s: data position %lld is past the end of --data %s (%lld tokens): the checkpoint "
                            "was made with other data",
                            where, (long long)rt_ckpt_data_position(ck), t->o.data,
                            (long long)rt_data_num_tokens(t->data));
    t->step = t->saved = rt_ckpt_step(ck);
    t->o.seed = rt_ckpt_rng_state(ck);
    return 0;
}

/* Returns 1 if resumed, 0 if the directory holds no checkpoint (start from scratch). */
static int resume(Trainer *t, RtError *err) {
    RtCkpt *ck;
    RtError damage;
    int found = rt_ckpt_open_latest(&ck, t->o.ckpt_dir, &damage, err);
    if (found < 0)
        return -1;
    if (damage.msg[0] && t->rank == 0)
        warn(t, "skipping a damaged checkpoint: %s", damage.msg);
    if (found == 0 && damage.msg[0])
        return rt_error_set(err,
                            "--resume: no checkpoint in %s verifies; refusing to start over next to "
                            "them (move them away to start from scratch)",
                            t->o.ckpt_dir);
    if (found == 0)
        return 0;
    int rc = ckpt_restore(t, ck, err);
    rt_ckpt_close(ck);
    return rc != 0 ? -1 : 1;
}

/* Without --resume, a directory that already holds checkpoints is left alone. */
static int check_fresh_dir(Trainer *t, RtError *err) {
    int64_t step;
    int found = rt_ckpt_latest(t->o.ckpt_dir, RT_CKPT_ANY, &step, err);
    if (found == 1)
        return rt_error_set(err,
                            "--ckpt-dir %s already holds checkpoints (newest: step %lld); pass --resume "
                            "to continue from it, or choose another directory",
                            t->o.ckpt_dir, (long long)step);
    return found;
}

/* The state this rank starts from: a checkpoint, --init or the seeded init. It calls no
 * collective: the ranks agree on the outcome afterwards (train). */
static int init_state(Trainer *t, RtError *err) {
    if (t->o.ckpt_dir && !t->o.resume && check_fresh_dir(t, err) != 0)
        return -1;
    int resumed = t->o.resume ? resume(t, err) : 0;
    if (resumed < 0)
        return -1;
    t->resumed = resumed;
    if (resumed)
        return 0;
    if (t->o.init)
        return params_load(t, err);
    return params_seed(t, err);
}

static int open_metrics(Trainer *t, RtError *err);

/* What rank 0 alone does once every rank holds its state: set aside the damaged checkpoints
 * newer than the one resumed (only now: every rank has chosen its checkpoint), say where the
 * run starts, and open --metrics. */
static int start_rank0(Trainer *t, int starts, RtError *err) {
    if (t->rank != 0)
        return 0;
    if (t->resumed && set_aside_newer(t, t->step, err) != 0)
        return -1;
    if (starts && open_metrics(t, err) != 0)
        return -1;
    if (t->resumed) {
        printf("%s: resumed from %s/step_%08lld\n", t->prog, t->o.ckpt_dir, (long long)t->step);
        if (t->o.init)
            warn(t, "note: --init is ignored when resuming from a checkpoint");
    }
    return 0;
}

/* ===== setup ========================================================================== */

/* Each rank reads its part of every global batch: the ranks that differ only on axes the
 * batch is not split over read the same part. */
static int open_data(Trainer *t, RtData **d, const char *opt, const char *path, RtError *err) {
    RtError why;
    const RtProgram *p = t->p;
    if (rt_data_open(d, path, (int)p->vocab, &why) != 0)
        return rt_error_set(err, "%s: %s", opt, why.msg);
    if ((int64_t)rt_data_num_tokens(*d) < t->batch_count * p->batch * p->seq + 1)
        return rt_error_set(err, "%s: %s holds %lld tokens, one batch needs %lld x %lld + 1", opt, path,
                            (long long)rt_data_num_tokens(*d), (long long)(t->batch_count * p->batch),
                            (long long)p->seq);
    if (rt_data_set_rank(*d, (int)t->batch_index, (int)t->batch_count, &why) != 0)
        return rt_error_set(err, "%s: %s", opt, why.msg);
    return 0;
}

/* After --resume the metrics file keeps the lines of the steps the checkpoint covers and
 * drops the rest (from a run that went on past its last checkpoint, or a torn last line):
 * those steps are run and logged again. Rewritten atomically, and only when something goes. */
static int trim_metrics(Trainer *t, RtError *err) {
    RtMapped m;
    if (access(t->o.metrics, F_OK) != 0)
        return 0;
    if (rt_file_map(t->o.metrics, &m, err) != 0)
        return -1;
    const char *text = (const char *)m.data, *at = text, *end = text + m.size, *nl;
    while (at < end && (nl = memchr(at, '\n', (size_t)(end - at))) != NULL) {
        long long step;
        if (sscanf(at, "{\"step\": %lld", &step) == 1 && step > t->step)
            break;
        at = nl + 1;
    }
    int rc = 0;
    if (at < end) {
        RtWfile w;
        rc = rt_wfile_open(&w, t->o.metrics, err);
        if (rc == 0 && (rc = rt_wfile_write(&w, text, (size_t)(at - text), err)) != 0)
            rt_wfile_abort(&w);
        else if (rc == 0)
            rc = rt_wfile_commit(&w, err);
    }
    rt_file_unmap(&m);
    return rc;
}

static int open_metrics(Trainer *t, RtError *err) {
    if (!t->o.metrics || t->rank != 0)
        return 0;
    RtError why;
    if (t->o.resume && trim_metrics(t, &why) != 0)
        return rt_error_set(err, "--metrics: %s", why.msg);
    t->metrics = fopen(t->o.metrics, t->o.resume ? "a" : "w");
    if (!t->metrics)
        return rt_error_set(err, "--metrics: %s: cannot open: %s", t->o.metrics, strerror(errno));
    return 0;
}

static int64_t global_numel(const RtParamSlot *s) {
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n *= s->global_shape[d];
    return n;
}

/* Bytes of one checkpoint (all ranks' files): three f32 tensors per parameter, and a generous
 * header per file. */
static int64_t ckpt_bytes(const Trainer *t) {
    const RtProgram *p = t->p;
    int64_t bytes = (65536 + (p->config ? (int64_t)strlen(p->config) : 0)) * t->world;
    for (int i = 0; i < p->nparams; i++)
        bytes += 3 * (4 * global_numel(&p->params[i]) + (int64_t)strlen(p->params[i].path) + 128);
    return bytes;
}

/* The checkpoint directory is ready before step 1, not found wanting after the work is done.
 * The ranks share the directory; rank 0 holds the lock for all of them. */
static int lock_ckpt_dir(Trainer *t, RtError *err) {
    RtError why;
    if (t->o.ckpt_dir && t->rank == 0 && rt_ckpt_lock(&t->lock, t->o.ckpt_dir, ckpt_bytes(t), &why) != 0)
        return rt_error_set(err, "--ckpt-dir: %s", why.msg);
    char links[512];
    int n = t->o.ckpt_dir && t->rank == 0 ? rt_ckpt_links(t->o.ckpt_dir, links, sizeof links) : 0;
    if (n > 0)
        warn(t, "%s: ignoring %s (%s: never resumed from, written into, pruned or followed)", t->o.ckpt_dir, links,
             n > 1 ? "symbolic links, not checkpoints" : "a symbolic link, not a checkpoint");
    return 0;
}

/* Joins the mesh: the rank decides the part of the data and of each parameter. */
static int join_mesh(Trainer *t, RtError *err) {
    const RtProgram *p = t->p;
    if (rt_comm_new(&t->comm, &p->mesh, p->collectives, p->ncollectives, 0, err) != 0)
        return -1;
    t->rank = rt_comm_rank(t->comm);
    t->world = rt_comm_size(t->comm);
    t->batch_index = rt_mesh_chunk(&p->mesh, p->batch_split, t->rank, &t->batch_count);
    if (t->rank != 0)
        t->tty = 0;
    return 0;
}

static int setup(Trainer *t, RtError *err) {
    const RtProgram *p = t->p;
    if (check_program(p, err) != 0 || join_mesh(t, err) != 0)
        return -1;
    if (open_data(t, &t->data, "--data", t->o.data, err) != 0)
        return -1;
    rt_fingerprint(t->fingerprint, p->params, p->nparams, p->config);
    if (lock_ckpt_dir(t, err) != 0)
        return -1;
    if (t->o.eval_data && open_data(t, &t->eval, "--eval-data", t->o.eval_data, err) != 0)
        return -1;
    int64_t huge;
    if (rt_env_hugepages(&huge, err) != 0)
        return -1;
    t->slab = slab_new(p->slab_bytes, (int)huge, &t->slab_mapped);
    t->eval_slab = t->o.eval_data ? slab_new(p->slab_bytes, (int)huge, &t->eval_mapped) : NULL;
    if (!t->slab || (t->o.eval_data && !t->eval_slab))
        return rt_error_set(err, "cannot allocate the %lld-byte slab%s", (long long)p->slab_bytes,
                            t->o.eval_data ? " (twice, for eval)" : "");
    if (rt_pool_new(&t->pool, (int)t->o.threads, err) != 0 || tensors_make(t, err) != 0)
        return -1;
    /* The pool runs matrix products too (rt_sgemm); OpenBLAS's own spinning workers would
     * compete with it for the cores. */
    openblas_set_num_threads(1);
    return 0;
}

/* ===== steps ========================================================================== */

typedef struct StepOut {
    float loss, grad_norm, lr;
    float aux_loss; /* the auxiliary part of loss (MoE load balance); NAN when the model has none */
    double ms;
    int64_t comm_bytes; /* sent by this device in the step's collectives */
} StepOut;

/* Loads the next batch of `d` into `slab` and runs step number `number` (1-based) on it. */
static int run_step(Trainer *t, char *slab, RtData *d, int64_t number, StepOut *out, RtError *err) {
    const RtProgram *p = t->p;
    double t0 = now_ms();
    if (rt_data_next_batch(d, (int)p->batch, (int)p->seq, slab_i32(slab, p->ids_offset),
                           slab_i32(slab, p->targets_offset), err) != 0)
        return -1;
    *slab_f32(slab, p->step_offset) = (float)number;
    int64_t sent = rt_comm_bytes_sent(t->comm);
    p->step(slab, t->pool, t->comm);
    mem_sample(t);
    out->comm_bytes = rt_comm_bytes_sent(t->comm) - sent;
    out->loss = *slab_f32(slab, p->loss_offset);
    out->grad_norm = *slab_f32(slab, p->grad_norm_offset);
    out->lr = *slab_f32(slab, p->lr_offset);
    out->aux_loss = p->has_aux_loss ? *slab_f32(slab, p->aux_loss_offset) : NAN;
    out->ms = now_ms() - t0;
    return 0;
}

/* Mean loss over the first eval_batches batches of --eval-data, each on a fresh copy of the
 * training slab, so the parameters and moments of the run are untouched. */
static int run_eval(Trainer *t, double *mean, RtError *err) {
    double sum = 0;
    StepOut out;
    if (rt_data_seek(t->eval, 0, err) != 0)
        return -1;
    for (int64_t b = 0; b < t->o.eval_batches; b++) {
        memcpy(t->eval_slab, t->slab, (size_t)t->p->slab_bytes);
        if (run_step(t, t->eval_slab, t->eval, t->step + 1, &out, err) != 0)
            return -1;
        sum += out.loss;
    }
    *mean = sum / (double)t->o.eval_batches;
    return 0;
}

/* ===== reporting ====================================================================== */

static void json_num(FILE *f, const char *key, double v, const char *fmt) {
    fprintf(f, ", \"%s\": ", key);
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

static void write_metrics(Trainer *t, const StepOut *s, double tok_s, const double *eval) {
    if (!t->metrics || t->rank != 0)
        return;
    fprintf(t->metrics, "{\"step\": %lld", (long long)t->step);
    json_num(t->metrics, "loss", s->loss, "%.9g");
    if (t->p->has_aux_loss) { /* loss = ce_loss + aux_loss */
        json_num(t->metrics, "ce_loss", s->loss - s->aux_loss, "%.9g");
        json_num(t->metrics, "aux_loss", s->aux_loss, "%.9g");
    }
    json_num(t->metrics, "grad_norm", s->grad_norm, "%.9g");
    json_num(t->metrics, "lr", s->lr, "%.9g");
    json_num(t->metrics, "tokens_per_s", tok_s, "%.1f");
    json_num(t->metrics, "step_ms", s->ms, "%.3f");
    if (t->world > 1)
        json_num(t->metrics, "comm_bytes", (double)s->comm_bytes, "%.0f");
    if (eval)
        json_num(t->metrics, "eval_loss", *eval, "%.9g");
    fputs("}\n", t->metrics);
    fflush(t->metrics);
}

static void format_eta(char *buf, size_t cap, double ms) {
    double secs = ms / 1e3 + 0.5;
    long long s = secs < 1e12 ? (long long)secs : 999999999999ll; /* no overflowing cast */
    snprintf(buf, cap, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
}

static void print_progress(Trainer *t, const StepOut *s, double tok_s, const double *eval) {
    if (t->rank != 0)
        return;
    char eta[32];
    format_eta(eta, sizeof eta, t->run_ms / (double)t->run_steps * (double)(t->o.steps - t->step));
    if (t->tty) {
        if (eval)
            printf("\r\033[Keval step %lld loss %.6f\n", (long long)t->step, *eval);
        printf("\rstep %lld/%lld  loss %.4f  %.0f tok/s  ETA %s\033[K", (long long)t->step, (long long)t->o.steps,
               s->loss, tok_s, eta);
    } else {
        if (t->step % t->o.log_every == 0 || t->step == t->o.steps || t->run_steps == 1)
            printf("step %lld loss %.6f grad_norm %.4f lr %.4e tok/s %.0f eta %s\n", (long long)t->step, s->loss,
                   s->grad_norm, s->lr, tok_s, eta);
        if (eval)
            printf("eval step %lld loss %.6f\n", (long long)t->step, *eval);
    }
    fflush(stdout);
}

/* ===== the loop ======================================================================= */

static int eval_due(const Trainer *t) {
    if (!t->eval)
        return 0;
    return t->o.eval_every > 0 ? t->step % t->o.eval_every == 0 : t->step == t->o.steps;
}

/* How a run ends; rt_train_main turns it into the exit status. */
typedef enum RunEnd {
    RUN_FAILED = -1, /* err says why */
    RUN_DONE = 0,
    RUN_NONFINITE, /* reported */
    RUN_STOPPED,   /* by SIGINT or SIGTERM, reported */
} RunEnd;

/* One training step and everything that follows it. */
static RunEnd train_one(Trainer *t, RtError *err) {
    StepOut s;
    if (run_step(t, t->slab, t->data, t->step + 1, &s, err) != 0) {
        t->alone = 1;
        return RUN_FAILED;
    }
    t->step++;
    t->run_ms += s.ms;
    t->run_steps++;
    double tok_s = s.ms > 0 ? (double)(t->batch_count * t->p->batch * t->p->seq) * 1e3 / s.ms : 0, eval;
    int finite = isfinite(s.loss) && isfinite(s.grad_norm);
    int do_eval = finite && eval_due(t);
    if (do_eval && run_eval(t, &eval, err) != 0) {
        t->alone = 1;
        return RUN_FAILED;
    }
    write_metrics(t, &s, tok_s, do_eval ? &eval : NULL);
    if (!finite) {
        char what[96];
        snprintf(what, sizeof what, "loss %g, grad_norm %g", s.loss, s.grad_norm);
        if (t->rank == 0)
            report_stop(t, what);
        return RUN_NONFINITE;
    }
    print_progress(t, &s, tok_s, do_eval ? &eval : NULL);
    /* The last step is saved by ckpt_save_final, whose failure ends the run with an error. */
    if (t->o.ckpt_dir && t->o.ckpt_every > 0 && t->step % t->o.ckpt_every == 0 && t->step < t->o.steps &&
        ckpt_save_periodic(t) != 0)
        return RUN_NONFINITE;
    return RUN_DONE;
}

/* ===== signals ======================================================================== */

/* The one piece of global state in libaxrt, because a signal handler can reach nothing else:
 * the first SIGINT or SIGTERM received during rt_train_main. The loop reads it between steps. */
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) {
    static const char msg[] = "\nstopping after this step (signal again to quit at once, without saving)\n";
    stop_signal = sig;
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
}

typedef struct Signals {
    struct sigaction intr, term, xfsz;
} Signals;

/* SIGINT and SIGTERM end the run cleanly after the current step; a second one takes the
 * default action (SA_RESETHAND), so a stuck save can still be interrupted, and saves are
 * atomic, so that loses nothing already saved. A SIGINT ignored by the parent (a background
 * job of a script) stays ignored. SIGXFSZ is ignored: a write past the file-size limit then
 * fails with EFBIG, and the save reports it, instead of the signal killing the trainer. */
static void signals_install(Signals *old) {
    struct sigaction sa, ign;
    memset(&sa, 0, sizeof sa);
    memset(&ign, 0, sizeof ign);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    stop_signal = 0;
    sigaction(SIGINT, NULL, &old->intr);
    if (old->intr.sa_handler != SIG_IGN)
        sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, &old->term);
    sigaction(SIGXFSZ, &ign, &old->xfsz);
}

static void signals_restore(const Signals *old) {
    sigaction(SIGINT, &old->intr, NULL);
    sigaction(SIGTERM, &old->term, NULL);
    sigaction(SIGXFSZ, &old->xfsz, NULL);
}

/* After a signal: save where the run stands, and say how to go on. */
static RunEnd stop_run(Trainer *t, RtError *err) {
    const char *name = t->stopped == SIGINT ? "SIGINT" : "SIGTERM";
    RunEnd end = (RunEnd)ckpt_save_final(t, err);
    if (end != RUN_DONE)
        return end;
    fflush(stdout);
    if (t->rank != 0)
        ;
    else if (t->o.ckpt_dir)
        fprintf(stderr, "%s: %s: stopped after step %lld; checkpoint %s/step_%08lld; --resume continues from it\n",
                t->prog, name, (long long)t->step, t->o.ckpt_dir, (long long)t->saved);
    else
        fprintf(stderr, "%s: %s: stopped after step %lld; nothing saved (no --ckpt-dir)\n", t->prog, name,
                (long long)t->step);
    return RUN_STOPPED;
}

/* A signal may reach some ranks and not others (or at another step): all stop together, after
 * the same step, or none does. The verdict goes to t->stopped, and only it is read afterwards:
 * a signal that arrives on this rank after the sum waits for the next one, instead of stopping
 * this rank while the others go on to the next step. */
static void agree_stop(Trainer *t) {
    int sig = stop_signal;
    int64_t v[2] = {sig != 0, sig == SIGINT};
    RtError why;
    if (t->world > 1 && rt_comm_sum_i64(t->comm, v, 2, &why) != 0) {
        warn(t, "%s", why.msg);
        rt_comm_abort(t->comm, 1);
    }
    t->stopped = v[0] == 0 ? 0 : v[1] > 0 ? SIGINT : SIGTERM;
}

static RunEnd train_loop(Trainer *t, RtError *err) {
    for (;;) {
        agree_stop(t);
        if (t->step >= t->o.steps || t->stopped)
            break;
        RunEnd end = train_one(t, err);
        if (end != RUN_DONE)
            return end;
    }
    if (t->tty && t->run_steps > 0)
        printf("\n");
    if (t->stopped)
        return stop_run(t, err);
    RunEnd end = (RunEnd)ckpt_save_final(t, err);
    if (end != RUN_DONE)
        return end;
    if (t->metrics && ferror(t->metrics))
        return rt_error_set(err, "--metrics: %s: write failed", t->o.metrics);
    return RUN_DONE;
}

static void print_banner(const Trainer *t) {
    int64_t elems = 0;
    if (t->rank != 0)
        return;
    for (int i = 0; i < t->p->nparams; i++)
        elems += global_numel(&t->p->params[i]);
    printf("%s: %d parameters (%lld values), slab %.3f MiB, %lld x %lld tokens per step, %lld threads, "
           "steps %lld..%lld",
           t->prog, (int)t->p->nparams, (long long)elems, (double)t->p->slab_bytes / (1 << 20),
           (long long)(t->batch_count * t->p->batch), (long long)t->p->seq, (long long)t->o.threads,
           (long long)t->step + 1, (long long)t->o.steps);
    if (t->world > 1) {
        printf(", %d devices (", t->world);
        for (int a = 0; a < t->p->mesh.naxes; a++)
            printf("%s%s=%lld", a ? " " : "", t->p->mesh.names[a], (long long)t->p->mesh.sizes[a]);
        printf("), %d collectives sending %lld bytes per device per step", (int)t->p->ncollectives,
               (long long)rt_comm_step_bytes(t->comm));
    }
    printf("\n");
    fflush(stdout);
}

/* This process's rank as its launcher's environment gives it, or -1 when none does. An error
 * found before the ranks join (the options, the mesh size) is the same on every rank, and rank
 * 0 alone prints it. */
static int launched_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v);
    }
    return -1;
}

static const char *prog_name(int argc, char **argv) {
    if (argc < 1 || !argv[0] || !argv[0][0])
        return "trainer";
    const char *slash = strrchr(argv[0], '/');
    return slash ? slash + 1 : argv[0];
}

enum { SAY_OWN, SAY_NOTHING, SAY_ALL };

static int64_t message_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return (int64_t)(h >> 1) + 1; /* 1..2^31: a sum over 2^20 ranks fits */
}

/* The ranks' verdict on one phase of the start: 0 when rc is 0 on every rank, else -1 on every
 * rank. Each phase of the start ends here on every rank, and no phase calls a collective before,
 * so a rank that fails meets the others at this exchange instead of leaving them waiting at
 * another one. The reason is printed once: by the rank that failed (the others stay silent), or,
 * when every rank failed with the same message, by rank 0 alone. *step0 (may be NULL) gets
 * rank 0's step. */
static int agree_start(Trainer *t, int rc, int64_t *step0, RtError *err) {
    if (step0)
        *step0 = t->step;
    if (t->world == 1)
        return rc;
    int64_t v[3] = {rc != 0, rc != 0 ? message_hash(err->msg) : 0, t->rank == 0 ? t->step : 0};
    RtError why;
    if (rt_comm_sum_i64(t->comm, v, 3, &why) != 0) {
        warn(t, "%s", why.msg);
        rt_comm_abort(t->comm, 1);
    }
    if (step0)
        *step0 = v[2];
    if (v[0] == 0)
        return 0;
    if (rc == 0) {
        t->say = SAY_NOTHING;
        return rt_error_set(err, "stopping: another rank failed to start");
    }
    if (v[0] == t->world && v[1] == t->world * message_hash(err->msg))
        t->say = t->rank == 0 ? SAY_ALL : SAY_NOTHING;
    return -1;
}

/* Each rank chose its checkpoint alone; the directory is shared, so they chose the same one,
 * unless it is not the same directory on every machine. */
static int check_same_start(Trainer *t, int64_t step0, RtError *err) {
    if (t->step == step0)
        return 0;
    return rt_error_set(err,
                        "--resume: this rank starts at step %lld, rank 0 at step %lld: the ranks do not see the "
                        "same checkpoints in %s (it must be one directory that every rank shares)",
                        (long long)t->step, (long long)step0, t->o.ckpt_dir ? t->o.ckpt_dir : "--ckpt-dir");
}

/* The start: setup, the state, rank 0's part. Any of them may fail on one rank or on several;
 * after each the ranks agree (agree_start), so every rank stops together, before any collective
 * could wait for one that has gone. */
static RunEnd train(Trainer *t, RtError *err) {
    int64_t step0 = 0;
    int rc = agree_start(t, setup(t, err), NULL, err);
    if (rc == 0)
        rc = agree_start(t, init_state(t, err), &step0, err);
    if (rc == 0)
        rc = agree_start(t, check_same_start(t, step0, err), NULL, err);
    int starts = !(t->step >= t->o.steps && t->saved == t->step);
    if (rc == 0)
        rc = agree_start(t, start_rank0(t, starts, err), NULL, err);
    if (rc != 0)
        return RUN_FAILED;
    if (!starts) {
        if (t->rank == 0)
            printf("%s: checkpoint step %lld already reaches --steps %lld; nothing to do\n", t->prog,
                   (long long)t->step, (long long)t->o.steps);
        return RUN_DONE;
    }
    print_banner(t);
    mem_sample(t);
    RunEnd end = train_loop(t, err);
    if (end == RUN_DONE && t->rank == 0) {
        printf("%s: done at step %lld%s%s\n", t->prog, (long long)t->step, t->o.ckpt_dir ? ", checkpoint in " : "",
               t->o.ckpt_dir ? t->o.ckpt_dir : "");
        int64_t planned = t->p->slab_bytes * (t->eval_slab ? 2 : 1);
        int64_t huge = huge_resident();
        char huge_note[64] = "";
        if (huge >= 0)
            snprintf(huge_note, sizeof huge_note, "; %.2f MiB in huge pages", (double)huge / 1048576);
        if (t->heap_peak > 0)
            printf("%s: memory: predicted %.2f MiB (the planned slab%s, as axlc memcheck reports it), measured "
                   "%.2f MiB (heap the trainer held at its peak, %+.1f%%); peak RSS %.2f MiB (code and libraries "
                   "included)%s\n",
                   t->prog, (double)planned / 1048576, t->eval_slab ? "s of the step and eval" : "",
                   (double)t->heap_peak / 1048576, 100.0 * ((double)t->heap_peak - (double)planned) / (double)planned,
                   (double)peak_rss() / 1048576, huge_note);
    }
    return end;
}

int rt_train_check_args(int argc, char **argv, RtError *err) {
    /* The program gives only defaults (steps, seed, checkpoint policy), which no check reads. */
    static const RtProgram none;
    TrainOpts o;
    default_opts(&o, &none);
    if (parse_args(&o, argc, argv, err) != 0)
        return -1;
    return o.help || o.config ? 0 : check_opts(&o, err); /* --help, --config: nothing to check */
}

int rt_train_main(const RtProgram *p, int argc, char **argv) {
    Trainer t = {.p = p,
                 .prog = prog_name(argc, argv),
                 .saved = -1,
                 .tty = isatty(STDOUT_FILENO),
                 .world = 1,
                 .heap_base = heap_in_use()};
    RtError err = {{0}};
    default_opts(&t.o, p);
    if (parse_args(&t.o, argc, argv, &err) != 0) {
        if (launched_rank() <= 0)
            fprintf(stderr, "%s: %s\n", t.prog, err.msg);
        return 1;
    }
    if (t.o.help || t.o.config) {
        if (t.o.help) {
            TrainOpts defaults;
            default_opts(&defaults, p);
            print_help(stdout, t.prog, &defaults);
        } else {
            printf("%s\n", p->config ? p->config : "");
        }
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (t.o.sample > 0) {
        RtSampleOpts so = {.prog = t.prog,
                           .count = t.o.sample,
                           .prompt = t.o.prompt,
                           .temperature = t.o.temperature < 0 ? 1.0 : t.o.temperature,
                           .seed = t.o.seed,
                           .ckpt_dir = t.o.ckpt_dir,
                           .init = t.o.init,
                           .init_allow_unused = t.o.init_allow_unused,
                           .threads = t.o.threads};
        openblas_set_num_threads(1); /* the pool runs the matrix products (rt_sgemm) */
        int rc = check_opts(&t.o, &err) == 0 ? rt_sample_run(p, &so, stdout, &err) : -1;
        if (rc != 0)
            fprintf(stderr, "%s: %s\n", t.prog, err.msg);
        return rc == 0 ? 0 : 1;
    }
    Signals old;
    signals_install(&old);
    RunEnd end = check_opts(&t.o, &err) == 0 ? train(&t, &err) : RUN_FAILED;
    if (end == RUN_FAILED) {
        if (t.tty && t.run_steps > 0)
            printf("\n");
        fflush(stdout);
        if (t.say == SAY_ALL)
            fprintf(stderr, "%s: every rank: %s\n", t.prog, err.msg);
        else if (t.world > 1 && t.say == SAY_OWN)
            fprintf(stderr, "%s: rank %d: %s\n", t.prog, t.rank, err.msg);
        else if (t.say == SAY_OWN && launched_rank() <= 0)
            fprintf(stderr, "%s: %s\n", t.prog, err.msg);
        if (t.alone && t.world > 1) {
            fflush(stderr);
            rt_comm_abort(t.comm, 1); /* the others would wait for this rank at the next collective */
        }
    }
    int status = end == RUN_DONE ? 0 : end == RUN_STOPPED ? 128 + t.stopped : 1;
    trainer_free(&t);
    rt_comm_free(t.comm);
    signals_restore(&old);
    return status;
}
