/*
 * train_opts.c: the trainer's options: the table --help prints, parsing ("--opt VALUE" and
 * "--opt=VALUE"), the defaults the program gives, and the checks of their combinations and
 * files made before anything is opened (rt_train_check_args: axlc run makes them before it
 * compiles).
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_impl.h"

#define MAX_THREADS 1024

typedef enum OptKind { OPT_STR, OPT_INT, OPT_U64, OPT_FLAG, OPT_DBL, OPT_PROB, OPT_PEAK } OptKind;

/* One trainer option; --help prints this table. */
typedef struct OptSpec {
    const char *name, *arg;
    OptKind kind;
    size_t field; /* offset in TrainOpts */
    int64_t min, max;
    const char *help;
} OptSpec;

#define F(x) offsetof(TrainOpts, x)
/* --restart-downtime's bound: about 31 years, more than any job's wall time */
#define MAX_DOWNTIME_S 1000000000
static const OptSpec OPTS[] = {
    {"--data", "FILE", OPT_STR, F(data), 0, 0, "training tokens: plain text (bytes) or an llm.c token file"},
    {"--tokenizer", "FILE", OPT_STR, F(tokenizer), 0, 0,
     "a SentencePiece .model or a Hugging Face tokenizer.json: text --data is encoded with it, and --sample "
     "reads and prints text"},
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
    {"--ckpt-sync", NULL, OPT_FLAG, F(ckpt_sync), 0, 0,
     "write periodic checkpoints before the next step (default: from a snapshot, in the background)"},
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
    {"--restart-step", "N", OPT_INT, F(restart_step), 0, INT64_MAX,
     "the step the job reached before the failure this run restarts after: steps up to N run again "
     "after the checkpoint resumed count as lost work"},
    {"--restart-downtime", "S", OPT_DBL, F(restart_downtime), 0, MAX_DOWNTIME_S,
     "seconds from that failure to this start, counted in goodput's wall time"},
    {"--peak-flops", "F", OPT_PEAK, F(peak_flops), 0, 0,
     "peak FLOP/s of one device for MFU (default: the target's in the device table)"},
    {"--sdc-check-every", "N", OPT_INT, F(sdc_every), 0, INT64_MAX,
     "replay every N-th step from the same state and compare the bits of its update: a difference "
     "is silent data corruption, exit status 4 (0: never)"},
    {"--skip-outliers", "Z", OPT_DBL, F(skip_outliers), 0, 0,
     "skip the update of a step whose loss or gradient norm is more than Z standard deviations above "
     "the last --outlier-window steps' (0: never) [0]"},
    {"--outlier-window", "N", OPT_INT, F(outlier_window), 2, 1 << 20, "steps --skip-outliers measures against [100]"},
    {"--skip-batches", "N", OPT_INT, F(skip_batches), 0, INT64_MAX,
     "pass over the next N global batches of --data before the first step (past a bad batch after "
     "a rollback)"},
    {"--threads", "N", OPT_INT, F(threads), 1, MAX_THREADS, "CPU threads (default: all online CPUs)"},
    {"--log-every", "N", OPT_INT, F(log_every), 1, INT64_MAX, "log line every N steps when not a terminal"},
    {"--sample", "N", OPT_INT, F(sample), 1, 1 << 30,
     "generate N tokens with the newest checkpoint of --ckpt-dir "
     "(or --init) instead of training"},
    {"--prompt", "TEXT", OPT_STR, F(prompt), 0, 0,
     "with --sample: the text to continue (token ids unless the "
     "vocabulary is bytes)"},
    {"--temperature", "T", OPT_DBL, F(temperature), 0, 0, "with --sample: softmax temperature, 0 greedy [1]"},
    {"--top-k", "K", OPT_INT, F(top_k), 1, 1 << 30, "with --sample: draw among the K most likely tokens only"},
    {"--top-p", "P", OPT_PROB, F(top_p), 0, 0,
     "with --sample: draw among the fewest most likely tokens whose probabilities sum to P or more [1]"},
    {"--no-kv-cache", NULL, OPT_FLAG, F(no_kv_cache), 0, 0,
     "with --sample: recompute the whole window for every token instead of decoding with the KV cache"},
    {"--config", NULL, OPT_FLAG, F(config), 0, 0, "print the resolved config and exit"},
    {"--help", NULL, OPT_FLAG, F(help), 0, 0, "print this help and exit"},
};
#undef F
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

void train_opts_help(FILE *f, const char *prog, const TrainOpts *defaults) {
    fprintf(f,
            "usage: %s --data FILE [options]\n       %s --sample N --ckpt-dir DIR|--init FILE [--prompt TEXT] "
            "[--tokenizer FILE] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n\noptions:\n",
            prog, prog);
    for (int i = 0; i < N_OPTS; i++) {
        const OptSpec *o = &OPTS[i];
        const char *field = (const char *)defaults + o->field;
        char head[40], dflt[48] = "";
        snprintf(head, sizeof head, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        if (o->kind == OPT_INT && !strchr(o->help, '[')) /* a help that names its default */
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
    if (!*s || *end)
        return rt_error_set(err, "%s: '%s' is not an integer", o->name, s);
    if (errno == ERANGE)
        return rt_error_set(err, "%s: %s is out of range, expected %lld..%lld", o->name, s, (long long)o->min,
                            (long long)o->max);
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
        return rt_error_set(err, "%s: %s is negative; expected 0%s or more", o->name, s,
                            strcmp(o->name, "--temperature") == 0 ? " (greedy)" : "");
    if (o->max > 0 && v > (double)o->max)
        return rt_error_set(err, "%s: %s is out of range; expected 0 to %lld", o->name, s, (long long)o->max);
    *out = v;
    return 0;
}

/* A device's peak FLOP/s (--peak-flops): 0 would mean the device table's, and a tiny or huge
 * one an MFU of inf% or 0.0%, so only what some device could be is taken. */
static int parse_peak(const OptSpec *o, const char *s, double *out, RtError *err) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno == ERANGE || !isfinite(v))
        return rt_error_set(err, "%s: '%s' is not a finite number", o->name, s);
    if (!(v >= 1e6 && v <= 1e18))
        return rt_error_set(err,
                            "%s: %s is out of range, expected a device's peak FLOP/s from 1e6 to 1e18 (leave "
                            "it out for the device table's)",
                            o->name, s);
    *out = v;
    return 0;
}

/* A probability above 0 and at most 1 (--top-p). */
static int parse_prob(const OptSpec *o, const char *s, double *out, RtError *err) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno == ERANGE || !isfinite(v))
        return rt_error_set(err, "%s: '%s' is not a finite number", o->name, s);
    if (!(v > 0 && v <= 1))
        return rt_error_set(err, "%s: %s is out of range, expected a probability above 0 and at most 1", o->name, s);
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
    case OPT_PROB: return parse_prob(spec, val, (double *)field, err);
    case OPT_PEAK: return parse_peak(spec, val, (double *)field, err);
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
int train_opts_parse(TrainOpts *o, int argc, char **argv, RtError *err) {
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
    if (o->temperature == 0 && (o->top_k > 0 || o->top_p >= 0))
        return rt_error_set(err,
                            "%s: --temperature 0 takes the most likely token; drawing among the most likely "
                            "needs a temperature above 0",
                            o->top_k > 0 ? "--top-k" : "--top-p");
    return 0;
}

/* --metrics is the trainer's one output besides its checkpoints: it must not be a file the run
 * reads (opening it would truncate the mapped --data under the trainer), nor lie inside a
 * checkpoint, which pruning deletes and --resume verifies; nor may --data or --eval-data. */
static int check_files(const TrainOpts *o, RtError *err) {
    const RtPathArg out = {"--metrics", o->metrics, NULL};
    const RtPathArg in[] = {
        {"--data", o->data, NULL},           {"--eval-data", o->eval_data, NULL},
        {"--init", o->init, NULL},           {"--ckpt-dir", o->ckpt_dir, "step_"},
        {"--tokenizer", o->tokenizer, NULL},
    };
    if (rt_file_check_outputs(&out, 1, in, (int)(sizeof in / sizeof in[0]), err) != 0)
        return -1;
    /* a FIFO would block the first write, a link would be written through: refused here, so
     * `axlc run` says so before it compiles */
    RtError why;
    if (o->metrics && rt_file_check_user(o->metrics, 1, &why) != 0)
        return rt_error_set(err, "--metrics: %s", why.msg);
    /* the token files are read all run long, while pruning deletes old checkpoints: one inside
     * a step directory would be deleted under the run */
    const RtPathArg data[] = {{"--data", o->data, NULL}, {"--eval-data", o->eval_data, NULL}};
    return rt_file_check_outputs(data, 2, &in[3], 1, err);
}

int train_opts_check(const TrainOpts *o, RtError *err) {
    if (rt_env_check(err) != 0)
        return -1;
    if (o->sample > 0)
        return check_sample_opts(o, err);
    const char *sample_only = o->prompt             ? "--prompt"
                              : o->temperature >= 0 ? "--temperature"
                              : o->top_k > 0        ? "--top-k"
                              : o->top_p >= 0       ? "--top-p"
                              : o->no_kv_cache      ? "--no-kv-cache"
                                                    : NULL;
    if (sample_only)
        return rt_error_set(err, "%s needs --sample N", sample_only);
    if (o->outlier_window > 0 && !(o->skip_outliers > 0))
        return rt_error_set(err,
                            "--outlier-window %lld needs --skip-outliers Z (the window is what a step's loss "
                            "is measured against; without --skip-outliers nothing is)",
                            (long long)o->outlier_window);
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

void train_opts_default(TrainOpts *o, const RtProgram *p) {
    memset(o, 0, sizeof *o);
    o->steps = p->facts.max_steps;
    o->seed = p->facts.seed;
    o->ckpt_every = p->facts.ckpt_every_n_steps > 0 ? p->facts.ckpt_every_n_steps : 0;
    o->keep = p->facts.ckpt_keep > 0 ? p->facts.ckpt_keep : 0;
    o->eval_batches = 4;
    o->threads = online_cpus();
    o->log_every = 1;
    o->outlier_window = 0; /* unset: RT_OUTLIER_WINDOW under --skip-outliers */
    o->temperature = -1;
    o->top_p = -1;
}

int rt_train_check_args(int argc, char **argv, RtError *err) {
    /* The program gives only defaults (steps, seed, checkpoint policy), which no check reads. */
    static const RtProgram none;
    TrainOpts o;
    train_opts_default(&o, &none);
    if (train_opts_parse(&o, argc, argv, err) != 0)
        return -1;
    return o.help || o.config ? 0 : train_opts_check(&o, err); /* --help, --config: nothing to check */
}
