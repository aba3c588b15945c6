/*
 * train_state.c: the state a run starts from and what it saves: the seeded init, --init files,
 * checkpoints (periodic and final saves, never of weights that are not finite) and the resume
 * policy: the newest checkpoint that verifies, damaged newer ones set aside, --partial loads of
 * another model's checkpoint, and a fresh directory that already holds checkpoints refused.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_impl.h"

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

/* Each rank fills its chunk of the unsharded init: a sharded run starts from the same weights.
 * With trainable_only, the frozen parameters (a LoRA run's base) keep what they hold. */
static int params_seed(Trainer *t, int trainable_only, RtError *err) {
    for (int i = 0; i < t->p->nparams; i++) {
        const RtParamSlot *s = &t->p->params[i];
        if ((trainable_only && train_slot_frozen(s)) || !train_slot_held(t, i))
            continue;
        SeedRun r = {train_slot_data(t, t->slab, i, 0), s, t->o.seed};
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
    float *dst = train_slot_data(t, t->slab, j % t->p->nparams, j / t->p->nparams);
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

/* Tensors [0, count) from a checkpoint, each rank its own chunk, whichever files hold it. */
static int tensors_read_ckpt(Trainer *t, const RtCkpt *ck, int count, RtError *err) {
    int n = t->p->nparams;
    for (int j = 0; j < count; j++) {
        const RtTensor *ts = &t->tensors[j];
        if (train_slot_frozen(&t->p->params[j % n])) /* not saved: the base came before */
            continue;
        if (!train_slot_held(t, j % n)) /* another stage's moments */
            continue;
        if (rt_ckpt_read_f32(ck, ts->name, t->regions[j].shape, ts->ndim, t->regions[j].start, ts->shape,
                             train_slot_data(t, t->slab, j % n, j / n), err) != 0)
            return -1;
    }
    return 0;
}

/* Whether --init file st must or may set parameter i: every one, but under LoRA an adapter the
 * file lacks starts from its init (the file is the base). */
static int init_wants(const Trainer *t, const RtSt *st, int i) {
    const RtParamSlot *s = &t->p->params[i];
    return !t->frozen || train_slot_frozen(s) || rt_st_find(st, s->path) != NULL;
}

/* Every problem of an --init file is listed (weights.c), then refused in one line. */
static int init_file_check(Trainer *t, const RtSt *st, RtError *err) {
    RtInitCheck c;
    if (rt_init_refuse_shard(st, t->o.init, err) != 0)
        return -1;
    RtParamSlot *want = malloc(((size_t)t->p->nparams + 1) * sizeof *want);
    int n = 0;
    for (int i = 0; want && i < t->p->nparams; i++)
        if (init_wants(t, st, i))
            want[n++] = t->p->params[i];
    int rc = want ? rt_init_check(want, n, st, t->o.init_allow_unused, &c) : -1;
    free(want);
    if (rc != 0)
        return rt_error_set(err, "--init: %s: out of memory", t->o.init);
    int bad = c.missing || c.mismatched || (c.unused && !t->o.init_allow_unused);
    size_t len = c.report ? strlen(c.report) : 0;
    if (len && c.report[len - 1] == '\n')
        c.report[len - 1] = 0; /* train_warn() ends the line */
    if (c.report)
        train_warn(t, "%s --init %s:\n%s", bad ? "error:" : "note:", t->o.init, c.report);
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
        if (init_wants(t, st, i) && rt_st_check_finite(st, t->p->params[i].path, &why) != 0)
            return rt_error_set(err, "--init: %s; refusing to start from weights that are not finite", why.msg);
    return 0;
}

/* FNV-1a 64 over the bytes of the frozen parameters as the --init file stores them: what a LoRA
 * run's checkpoints record of their base (whatever the mesh), in t->base. */
static void base_record(Trainer *t, const RtSt *st) {
    uint64_t h = RT_FNV1A64_BASIS;
    for (int i = 0; i < t->p->nparams; i++)
        if (train_slot_frozen(&t->p->params[i]))
            h = rt_st_hash_tensor(st, t->p->params[i].path, h);
    char abs[4096];
    snprintf(t->base, sizeof t->base, "init %s fnv1a64:%016llx", realpath(t->o.init, abs) ? abs : t->o.init,
             (unsigned long long)h);
}

static int params_load(Trainer *t, RtError *err) {
    RtSt *st;
    RtError why;
    if (rt_st_open(&st, t->o.init, &why) != 0)
        return rt_error_set(err, "--init: %s", why.msg);
    rt_st_dump_as_weights(st); /* an interpreter's --dump: its new parameters */
    int rc = init_file_check(t, st, err) != 0 || init_file_finite(t, st, err) != 0 ? -1 : 0;
    if (rc == 0 && t->frozen) /* the adapters the file lacks: their init */
        rc = params_seed(t, 1, err);
    for (int i = 0; rc == 0 && i < t->p->nparams; i++)
        if (init_wants(t, st, i) && train_slot_held(t, i) && tensor_read_st(t, st, i, &why) != 0)
            rc = rt_error_set(err, "--init: %s", why.msg);
    if (rc == 0 && t->frozen)
        base_record(t, st);
    rt_st_close(st);
    return rc;
}

/* "the last good checkpoint is DIR/step_N (step N); --resume continues from it", or why
 * there is none: the end of every message about a run that stops or fails to save. */
const char *train_last_good(const Trainer *t, char *buf, size_t cap) {
    if (!t->o.ckpt_dir)
        snprintf(buf, cap, "no checkpoint to go back to (no --ckpt-dir)");
    else if (t->saved < 0)
        snprintf(buf, cap, "no checkpoint was saved in %s yet", t->o.ckpt_dir);
    else
        snprintf(buf, cap, "the last good checkpoint is %s/step_%08lld (step %lld); --resume continues from it",
                 t->o.ckpt_dir, (long long)t->saved, (long long)t->saved);
    return buf;
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
        train_warn(t, "set the damaged checkpoint aside as %s", to);
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
            train_warn(t, "--partial: %s holds another model: %s", where, diff);
    }
    if (rt_config_diff_outside_model(t->p->config, rt_ckpt_config(ck), diff, sizeof diff) > 0 && t->rank == 0)
        train_warn(t, "note: the config differs from the checkpoint's: %s; continuing with this one", diff);
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
    if (params_seed(t, t->frozen > 0, err) != 0) /* a frozen base was restored already */
        return -1;
    for (int j = 0; j < 3 * n; j++) {
        if (train_slot_frozen(&t->p->params[j % n]) || !train_slot_held(t, j % n))
            continue;
        const RtTensor *want = &t->tensors[j], *have = rt_ckpt_find(ck, want->name);
        const RtCkptRegion *rg = &t->regions[j];
        if (!have || have->ndim != want->ndim ||
            memcmp(have->shape, rg->shape, (size_t)want->ndim * sizeof *want->shape) != 0)
            continue;
        if (rt_ckpt_read_f32(ck, want->name, rg->shape, want->ndim, rg->start, want->shape,
                             train_slot_data(t, t->slab, j % n, j / n), err) != 0)
            return -1;
        loaded += j < n;
    }
    if (loaded == 0)
        return partial_none(t, ck, where, err);
    if (t->rank == 0)
        train_warn(t, "--partial: loaded %d of %d parameters from the checkpoint", loaded, n);
    return 0;
}

/* A LoRA run's checkpoint holds only the adapters: the frozen base comes again from where its
 * record (axlc.base) says, --init (which may name the same weights elsewhere) or the seed, and
 * must be the weights the adapters were trained on. */
static int base_restore(Trainer *t, const RtCkpt *ck, const char *where, RtError *err) {
    const char *rec = rt_ckpt_base(ck), *hash = strrchr(rec, ' ');
    if (!t->frozen)
        return 0;
    if (strcmp(rec, "seed") == 0) {
        if (t->o.init)
            return rt_error_set(err,
                                "%s: its adapters were trained on the seeded base weights (the run had no "
                                "--init); --init %s would put them on other weights",
                                where, t->o.init);
        t->o.seed = rt_ckpt_rng_state(ck);
        snprintf(t->base, sizeof t->base, "seed");
        return params_seed(t, 0, err);
    }
    if (strncmp(rec, "init ", 5) != 0 || !hash || hash < rec + 5 || strncmp(hash, " fnv1a64:", 9) != 0)
        return rt_error_set(err,
                            "%s holds no record of the base weights its adapters were trained on "
                            "(metadata axlc.base is '%.200s'; expected a LoRA run's checkpoint)",
                            where, rec);
    snprintf(t->base_file, sizeof t->base_file, "%.*s", (int)(hash - rec - 5), rec + 5);
    if (!t->o.init && access(t->base_file, R_OK) != 0)
        return rt_error_set(err,
                            "%s holds only the adapters of a LoRA run; its base weights came from %s, which "
                            "cannot be read (%s); pass --init with those base weights",
                            where, t->base_file, strerror(errno));
    if (!t->o.init)
        t->o.init = t->base_file;
    if (params_load(t, err) != 0)
        return -1;
    const char *got = strrchr(t->base, ' ');
    if (strcmp(got, hash) != 0)
        return rt_error_set(err,
                            "--init %s: these base weights differ from the ones the adapters of %s were "
                            "trained on (%s, recorded%s from %s); pass the base weights that run started from",
                            t->o.init, where, got + 1, hash, t->base_file);
    return 0;
}

static int ckpt_restore(Trainer *t, RtCkpt *ck, RtError *err) {
    char where[4096];
    snprintf(where, sizeof where, "%s/step_%08lld", t->o.ckpt_dir, (long long)rt_ckpt_step(ck));
    if (check_model(t, ck, where, err) != 0 || base_restore(t, ck, where, err) != 0)
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
    if (train_outlier_restore(t, rt_ckpt_trainer_state(ck), where, err) != 0)
        return -1;
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
        train_warn(t, "skipping a damaged checkpoint: %s", damage.msg);
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
/* --skip-batches: the data position moves on by N global batches, as N steps would move it. */
static int skip_batches(Trainer *t, RtError *err) {
    const RtProgram *p = t->p;
    RtError why;
    int wrapped = 0;
    if (t->o.skip_batches == 0)
        return 0;
    if (rt_data_skip(t->data, (int)p->batch, (int)p->seq, t->o.skip_batches, &wrapped, &why) != 0)
        return rt_error_set(err, "--skip-batches %lld: %s", (long long)t->o.skip_batches, why.msg);
    if (wrapped && t->rank == 0)
        fprintf(stderr,
                "note: --skip-batches %lld passes the end of the data and starts over at its first "
                "batch, as that many steps would (an epoch)\n",
                (long long)t->o.skip_batches);
    return 0;
}

int train_state_init(Trainer *t, RtError *err) {
    if (t->o.ckpt_dir && !t->o.resume && check_fresh_dir(t, err) != 0)
        return -1;
    int resumed = t->o.resume ? resume(t, err) : 0;
    if (resumed < 0)
        return -1;
    t->resumed = resumed;
    int rc = 0;
    if (!resumed && t->o.init) {
        rc = params_load(t, err);
    } else if (!resumed) {
        snprintf(t->base, sizeof t->base, "seed"); /* a LoRA run on the seeded base */
        rc = params_seed(t, 0, err);
    }
    return rc == 0 ? skip_batches(t, err) : -1;
}

/* What rank 0 alone does once every rank holds its state: set aside the damaged checkpoints
 * newer than the one resumed (only now: every rank has chosen its checkpoint), say where the
 * run starts, and open --metrics. */
int train_start_rank0(Trainer *t, int starts, RtError *err) {
    if (t->rank != 0)
        return 0;
    if (t->resumed && set_aside_newer(t, t->step, err) != 0)
        return -1;
    if (starts && train_metrics_open(t, err) != 0)
        return -1;
    if (t->resumed) {
        char msg[RT_ERROR_MAX], text[RT_ERROR_MAX + 16];
        snprintf(msg, sizeof msg, "%s: resumed from %s/step_%08lld", t->prog, t->o.ckpt_dir, (long long)t->step);
        printf("%s\n", rt_event_text(msg, text, sizeof text));
        rt_event_resumed(t->rank, t->step);
        if (t->o.init && !t->frozen)
            train_warn(t, "note: --init is ignored when resuming from a checkpoint");
        else if (t->frozen)
            printf("%s: the frozen base weights (%d tensors) came from %s\n", t->prog, t->frozen,
                   strcmp(t->base, "seed") ? t->o.init : "the seeded init");
    }
    return 0;
}
