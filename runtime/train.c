/*
 * train.c: the trainer every generated program runs: its lifecycle (the tables of tensors,
 * setup, the ranks' agreement on the start, the step loop, evaluation, signals) and
 * rt_train_main. Its parts live beside it, each listed in train_impl.h with what they share;
 * the helpers they all call (memory, the slab, the clocks, warnings) are train_util.c's.
 *
 * The compiled step (RtProgram.step) owns the math; the trainer's files own everything around
 * it. All of the step's buffers live in one slab; before each step the loop writes the next
 * batch (ids, targets) and the 1-based step number into it, calls the step, which updates the
 * parameters and AdamW moments in place, and reads back loss, gradient norm and learning rate.
 * The step is deterministic, so the run is a function of (parameters, moments, data position,
 * step number): exactly what a checkpoint stores, which makes a resumed run continue bit for
 * bit.
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
 * This is the trainer's main, so unlike the rest of libaxrt its files print: progress and results
 * on stdout, problems on stderr. It still never exits; it returns the exit status.
 */
#define _DEFAULT_SOURCE /* sigaction, nanosleep */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train_impl.h"

/* OpenBLAS (cblas.h does not declare it in every version). */
extern void openblas_set_num_threads(int);

/* ===== the trainer ==================================================================== */

/* Checkpoint tensor k*nparams + i: k = 0 the parameter (name = path), 1 "opt/m/<path>",
 * 2 "opt/v/<path>". Coupled with train_slot_data. */
static const char *const TENSOR_PREFIX[3] = {"", "opt/m/", "opt/v/"};

/* Where this rank's chunk of parameter s lies in the whole one. The chunk is written to a
 * checkpoint by the first device holding it: the one whose coordinates off the split's axes are
 * all zero, but on the pipeline axis that of the stage that updates it (s->stage): the other
 * stages hold a copy they never update. */
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
    int pipe = rt_mesh_axis(m, "pipeline");
    for (int a = 0; a < m->naxes; a++) {
        int staged = s->stage > 0 && a == pipe;
        if (!used[a] && rt_comm_coord(t->comm, a) != (staged ? s->stage - 1 : 0))
            r->owner = 0;
    }
}

/* The checkpoint's share of the table: every tensor but the frozen parameters' (train_impl.h). */
static int ck_tables(Trainer *t, RtError *err) {
    int n = t->p->nparams;
    t->ck_tensors = calloc((size_t)n * 3 + 1, sizeof *t->ck_tensors);
    t->ck_regions = calloc((size_t)n * 3 + 1, sizeof *t->ck_regions);
    if (!t->ck_tensors || !t->ck_regions)
        return rt_error_set(err, "out of memory");
    for (int j = 0; j < 3 * n; j++)
        if (!train_slot_frozen(&t->p->params[j % n])) {
            t->ck_tensors[t->n_ck] = t->tensors[j];
            t->ck_regions[t->n_ck++] = t->regions[j];
        }
    t->frozen = n - t->n_ck / 3;
    return 0;
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
            *ts = (RtTensor){
                .name = name, .dtype = RT_DT_F32, .ndim = s->rank, .data = train_slot_data(t, t->slab, i, k)};
            memcpy(ts->shape, s->shape, sizeof s->shape);
            slot_region(t, s, &t->regions[k * n + i]);
        }
    return ck_tables(t, err);
}

static void trainer_free(Trainer *t) {
    train_save_free(t);
    train_outlier_free(t);
    for (int i = 0; t->names && i < 3 * t->p->nparams; i++)
        free(t->names[i]);
    free(t->names);
    free(t->tensors);
    free(t->regions);
    free(t->ck_tensors);
    free(t->ck_regions);
    if (t->metrics)
        fclose(t->metrics);
    rt_data_close(t->eval);
    rt_data_close(t->data);
    rt_tok_close(t->tok);
    rt_ckpt_unlock(t->lock);
    rt_pool_free(t->pool);
    train_slab_free(t->eval_slab, t->eval_mapped);
    train_slab_free(t->slab, t->slab_mapped);
}

/* ===== setup ========================================================================== */

/* --tokenizer: its vocabulary must be the model's. */
static int open_tokenizer(Trainer *t, RtError *err) {
    RtError why;
    char model[1100];
    snprintf(model, sizeof model, "%.512s (its config: %.512s --config)", t->prog, t->prog);
    if (rt_tok_open(&t->tok, t->o.tokenizer, &why) != 0 || rt_tok_check_vocab(t->tok, t->p->vocab, model, &why) != 0)
        return rt_error_set(err, "--tokenizer: %s", why.msg);
    return 0;
}

/* Each rank reads its part of every global batch: the ranks that differ only on axes the
 * batch is not split over read the same part. */
static int open_data(Trainer *t, RtData **d, const char *opt, const char *path, RtError *err) {
    RtError why;
    const RtProgram *p = t->p;
    if (rt_data_open_tok(d, path, t->tok, (int)p->vocab, &why) != 0)
        return rt_error_set(err, "%s: %s", opt, why.msg);
    if (t->tok && rt_data_is_token_file(*d))
        train_warn(t,
                   "warning: %s %s is a token file, already tokenized: --tokenizer %s is not used for it (its ids "
                   "must come from that tokenizer; a token file does not record which one made it)",
                   opt, path, t->o.tokenizer);
    if ((int64_t)rt_data_num_tokens(*d) < t->batch_count * p->batch * p->seq + 1)
        return rt_error_set(err, "%s: %s holds %lld tokens, one batch needs %lld x %lld + 1", opt, path,
                            (long long)rt_data_num_tokens(*d), (long long)(t->batch_count * p->batch),
                            (long long)p->seq);
    if (rt_data_set_rank(*d, (int)t->batch_index, (int)t->batch_count, &why) != 0)
        return rt_error_set(err, "%s: %s", opt, why.msg);
    return 0;
}

/* Bytes of one checkpoint (all ranks' files): three f32 tensors per parameter that trains, and
 * a generous header per file. */
static int64_t ckpt_bytes(const Trainer *t) {
    const RtProgram *p = t->p;
    int64_t bytes = (65536 + (p->config ? (int64_t)strlen(p->config) : 0)) * t->world;
    for (int i = 0; i < p->nparams; i++)
        if (!train_slot_frozen(&p->params[i])) /* a frozen base is not saved */
            bytes += 3 * (4 * train_slot_global_numel(&p->params[i]) + (int64_t)strlen(p->params[i].path) + 128);
    return bytes;
}

/* The checkpoint directory is ready before step 1, not found wanting after the work is done.
 * The ranks share the directory; rank 0 holds the lock for all of them. */
static int lock_ckpt_dir(Trainer *t, RtError *err) {
    RtError why;
    /* the saves this run may write: every --ckpt-every steps and the last */
    int64_t saves = t->o.ckpt_every > 0 ? t->o.steps / t->o.ckpt_every + 1 : 1;
    if (t->o.ckpt_dir && t->rank == 0 &&
        rt_ckpt_lock(&t->lock, t->o.ckpt_dir, ckpt_bytes(t), (int)t->o.keep, saves, &why) != 0)
        return rt_error_set(err, "--ckpt-dir: %s", why.msg);
    char links[512];
    int n = t->o.ckpt_dir && t->rank == 0 ? rt_ckpt_links(t->o.ckpt_dir, links, sizeof links) : 0;
    if (n > 0)
        train_warn(t, "%s: ignoring %s (%s: never resumed from, written into, pruned or followed)", t->o.ckpt_dir,
                   links, n > 1 ? "symbolic links, not checkpoints" : "a symbolic link, not a checkpoint");
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
    t->slab_bytes = p->slab_bytes; /* under a pipeline, its stage's part (never past the whole) */
    int pipe = rt_mesh_axis(&p->mesh, "pipeline");
    if (p->stage_slab_bytes && pipe >= 0)
        t->slab_bytes = p->stage_slab_bytes[rt_comm_coord(t->comm, pipe)]; /* checked: 1..slab_bytes */
    return 0;
}

static int sdc_fault_parse(Trainer *t, RtError *err);

static int setup(Trainer *t, RtError *err) {
    const RtProgram *p = t->p;
    if (train_program_check(p, err) != 0 || join_mesh(t, err) != 0)
        return -1;
    if (t->o.tokenizer && open_tokenizer(t, err) != 0)
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
    t->slab = train_slab_new(t->slab_bytes, (int)huge, &t->slab_mapped);
    int spare = t->o.eval_data || t->o.sdc_every > 0; /* a second slab: eval and replays run on it */
    t->eval_slab = spare ? train_slab_new(t->slab_bytes, (int)huge, &t->eval_mapped) : NULL;
    if (!t->slab || (spare && !t->eval_slab))
        return rt_error_set(err, "cannot allocate the %lld-byte slab%s", (long long)t->slab_bytes,
                            spare ? " (twice, for eval or replays)" : "");
    if (sdc_fault_parse(t, err) != 0)
        return -1;
    if (rt_pool_new(&t->pool, (int)t->o.threads, err) != 0 || tensors_make(t, err) != 0 ||
        train_outlier_init(t, err) != 0)
        return -1;
    /* The pool runs matrix products too (rt_sgemm); OpenBLAS's own spinning workers would
     * compete with it for the cores. */
    openblas_set_num_threads(1);
    return 0;
}

/* ===== steps ========================================================================== */

/* Loads the next batch of `d` into `slab` and runs step number `number` (1-based) on it. */
/* What rt_train_step_failed said during the step that runs now ("" : nothing). Global because
 * RtProgram.step has no context to carry it; run_step reads and clears it after each step. */
static char step_failed[RT_ERROR_MAX];

void rt_train_step_failed(const char *msg) {
    if (!step_failed[0])
        snprintf(step_failed, sizeof step_failed, "%s", msg && *msg ? msg : "the step failed");
}

/* A step that rt_train_step_failed stopped: the error names it and the last good checkpoint, after
 * the save in flight is done (with one rank; several wait together only where all of them fail). */
static int step_error(Trainer *t, int64_t number, RtError *err) {
    char buf[RT_ERROR_MAX];
    if (t->world == 1)
        train_save_wait(t);
    rt_error_set(err, "step %lld: %s; training stopped, nothing saved for this step; %s", (long long)number,
                 step_failed, train_last_good(t, buf, sizeof buf));
    step_failed[0] = 0;
    return -1;
}

/* Slab dst becomes a copy of slab src (an eval's or a replay's): where the state lives when the
 * hooks copy there (an OpenCL device: device to device, nothing crosses), else on the host. */
static void slab_copy(const Trainer *t, char *dst, char *src) {
    if (t->copy && t->copy(dst, src) == 0)
        return;
    train_sync(t, src, RT_SYNC_TO_HOST);
    memcpy(dst, src, (size_t)t->slab_bytes);
    train_sync(t, dst, RT_SYNC_FROM_HOST);
}

/* The data and program of the step that runs now, for rt_train_batch_ahead (global for the
 * same reason as step_failed); NULL between steps. */
static RtData *step_data;
static const RtProgram *step_prog;
/* The data the next step reads where it is not the running step's: the training data during
 * an eval's last batch (run_eval), so that the step after an eval finds its batch sent ahead. */
static RtData *next_data;

int rt_train_batch_ahead(int32_t *ids, int32_t *targets) {
    RtData *d = next_data ? next_data : step_data;
    if (!d || !step_prog)
        return -1;
    RtError err;
    int64_t pos = rt_data_position(d);
    int rc = rt_data_next_batch(d, (int)step_prog->batch, (int)step_prog->seq, ids, targets, &err);
    return rt_data_seek(d, pos, &err) == 0 ? rc : -1;
}

static int run_step(Trainer *t, char *slab, RtData *d, int64_t number, StepOut *out, RtError *err) {
    const RtProgram *p = t->p;
    double t0 = train_now_ms();
    if (rt_data_next_batch(d, (int)p->batch, (int)p->seq, train_slab_i32(slab, p->ids_offset),
                           train_slab_i32(slab, p->targets_offset), err) != 0)
        return -1;
    *train_slab_f32(slab, p->step_offset) = (float)number;
    int64_t sent = rt_comm_bytes_sent(t->comm);
    step_data = d;
    step_prog = p;
    p->step(slab, t->pool, t->comm);
    step_data = NULL;
    step_prog = NULL;
    if (step_failed[0])
        return step_error(t, number, err);
    train_mem_sample(t);
    out->comm_bytes = rt_comm_bytes_sent(t->comm) - sent;
    out->loss = *train_slab_f32(slab, p->loss_offset);
    out->grad_norm = *train_slab_f32(slab, p->grad_norm_offset);
    out->lr = *train_slab_f32(slab, p->lr_offset);
    out->aux_loss = p->has_aux_loss ? *train_slab_f32(slab, p->aux_loss_offset) : NAN;
    out->ms = train_now_ms() - t0;
    return 0;
}

/* Mean loss over the first eval_batches batches of --eval-data, each on a fresh copy of the
 * training slab, so the parameters and moments of the run are untouched (on the device where the
 * state lives there: slab_copy). */
static int run_eval(Trainer *t, double *mean, RtError *err) {
    double sum = 0;
    StepOut out;
    if (rt_data_seek(t->eval, 0, err) != 0)
        return -1;
    for (int64_t b = 0; b < t->o.eval_batches; b++) {
        slab_copy(t, t->eval_slab, t->slab);
        next_data = b + 1 == t->o.eval_batches ? t->data : NULL; /* training goes on after it */
        int rc = run_step(t, t->eval_slab, t->eval, t->step + 1, &out, err);
        next_data = NULL;
        if (rc != 0)
            return -1;
        sum += out.loss;
    }
    *mean = sum / (double)t->o.eval_batches;
    return 0;
}

/* ===== silent data corruption ========================================================= */

/* The test hook AXLC_TEST_SDC_FLIP=STEP[@RANK] flips the lowest bit of the last parameter's
 * first value in the replay of step STEP on rank RANK (default 0): a fault the check must catch. */
static int sdc_fault_parse(Trainer *t, RtError *err) {
    const char *s = getenv("AXLC_TEST_SDC_FLIP");
    long long step = 0, rank = 0;
    char extra;
    t->sdc_flip_step = -1;
    if (!s || !*s)
        return 0;
    int n = sscanf(s, "%lld@%lld%c", &step, &rank, &extra);
    if (!(n == 1 || n == 2) || step < 1 || rank < 0 || (n == 1 && strchr(s, '@')))
        return rt_error_set(err, "AXLC_TEST_SDC_FLIP=%s: expected STEP or STEP@RANK (a test hook)", s);
    t->sdc_flip_step = step;
    t->sdc_flip_rank = (int)rank;
    return 0;
}

/* Whether step t->step + 1 is replayed. */
static int sdc_due(const Trainer *t) {
    return t->o.sdc_every > 0 && (t->step + 1) % t->o.sdc_every == 0;
}

/* The step just run (number t->step) again, on the spare slab copied before it (from the data
 * position `pos` it read): the CPU step is deterministic, so its update must be the same bits.
 * 0 when it is on every rank; else 1, with each rank that differs naming the first tensor and
 * value that differ (every rank replays, as the step's collectives need). */
static int sdc_check(Trainer *t, int64_t pos, RtError *err) {
    StepOut out;
    if (rt_data_seek(t->data, pos, err) != 0 || run_step(t, t->eval_slab, t->data, t->step, &out, err) != 0)
        return -1;
    train_sync(t, t->slab, RT_SYNC_STATE_TO_HOST);
    train_sync(t, t->eval_slab, RT_SYNC_STATE_TO_HOST);
    int n = t->p->nparams;
    if (t->step == t->sdc_flip_step && t->rank == t->sdc_flip_rank) {
        uint32_t *x = (uint32_t *)(void *)train_slot_data(t, t->eval_slab, n - 1, 0);
        if (train_slot_numel(&t->p->params[n - 1]) > 0)
            *x ^= 1;
    }
    int bad = 0;
    for (int j = 0; j < 3 * n && !bad; j++) {
        if (j >= n && train_slot_frozen(&t->p->params[j % n]))
            continue; /* no moments */
        const uint32_t *a = (const uint32_t *)(const void *)train_slot_data(t, t->slab, j % n, j / n);
        const uint32_t *b = (const uint32_t *)(const void *)train_slot_data(t, t->eval_slab, j % n, j / n);
        for (int64_t k = 0, len = train_slot_numel(&t->p->params[j % n]); k < len && !bad; k++)
            if (a[k] != b[k]) {
                float fa, fb;
                memcpy(&fa, &a[k], 4);
                memcpy(&fb, &b[k], 4);
                char msg[RT_ERROR_MAX], text[RT_ERROR_MAX + 16];
                snprintf(msg, sizeof msg,
                         "%s: rank %d: step %lld: silent data corruption: tensor %s, value %lld of %lld: 0x%08x (%.9g) "
                         "in the step, 0x%08x (%.9g) in its replay from the same state",
                         t->prog, t->rank, (long long)t->step, t->names[j], (long long)k, (long long)len,
                         (unsigned)a[k], (double)fa, (unsigned)b[k], (double)fb);
                fflush(stdout);
                fprintf(stderr, "%s\n", rt_event_text(msg, text, sizeof text));
                rt_event_failure(RT_CAUSE_SDC, t->rank, t->step, t->names[j]);
                bad = 1;
            }
    }
    int64_t v[2] = {bad, bad ? t->rank : 0};
    RtError why;
    if (t->world > 1 && rt_comm_sum_i64(t->comm, v, 2, &why) != 0) {
        train_warn(t, "%s", why.msg);
        rt_comm_abort(t->comm, 1);
    }
    return v[0] > 0;
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
    RUN_SDC,       /* a replay differed, reported */
} RunEnd;

/* One training step and everything that follows it. */
static RunEnd train_one(Trainer *t, RtError *err) {
    StepOut s;
    int replay = sdc_due(t);
    int64_t pos = rt_data_position(t->data);
    if (replay)
        slab_copy(t, t->eval_slab, t->slab);
    train_outlier_before(t);
    if (run_step(t, t->slab, t->data, t->step + 1, &s, err) != 0) {
        t->alone = 1;
        return RUN_FAILED;
    }
    t->step++;
    int sdc = replay ? sdc_check(t, pos, err) : 0;
    if (sdc < 0) {
        t->alone = 1;
        return RUN_FAILED;
    }
    if (sdc) {
        train_save_wait(t); /* the last checkpoint, for the supervisor to go back to */
        return RUN_SDC;
    }
    t->run_ms += s.ms;
    t->run_steps++;
    /* steps up to --restart-step are run again only after a checkpoint: a run that loaded none
     * starts over, and the failed launch's time is in its --restart-downtime (the supervisor
     * carries it there), so these steps are the ones kept */
    if (t->resumed && t->step <= t->o.restart_step) {
        t->gp.lost_ms += s.ms;
    } else {
        t->gp.steps_ms += s.ms;
        t->gp.ideal_s += train_ideal_s(t);
    }
    double tok_s = s.ms > 0 ? (double)(t->batch_count * t->p->batch * t->p->seq) * 1e3 / s.ms : 0, eval;
    int finite = isfinite(s.loss) && isfinite(s.grad_norm);
    int do_eval = finite && eval_due(t);
    if (do_eval && run_eval(t, &eval, err) != 0) {
        t->alone = 1;
        return RUN_FAILED;
    }
    int skipped = finite && train_outlier_after(t, &s);
    if (skipped && !(t->resumed && t->step <= t->o.restart_step)) {
        /* a skipped update is work thrown away: its time is lost, not productive */
        t->gp.steps_ms -= s.ms;
        t->gp.ideal_s -= train_ideal_s(t);
        t->gp.lost_ms += s.ms;
    }
    train_metrics_write(t, &s, tok_s, do_eval ? &eval : NULL, skipped);
    if (!finite) {
        char what[96];
        train_save_wait(t); /* the last good checkpoint may be the one in flight */
        snprintf(what, sizeof what, "loss %g, grad_norm %g", s.loss, s.grad_norm);
        if (t->rank == 0)
            train_report_stop(t, what, isfinite(s.loss) ? "grad_norm" : "loss");
        return RUN_NONFINITE;
    }
    train_progress_print(t, &s, tok_s, do_eval ? &eval : NULL);
    /* The last step is saved by train_ckpt_save_final, whose failure ends the run with an error. */
    if (t->o.ckpt_dir && t->o.ckpt_every > 0 && t->step % t->o.ckpt_every == 0 && t->step < t->o.steps &&
        train_ckpt_save_periodic(t) != 0)
        return RUN_NONFINITE;
    return RUN_DONE;
}

/* ===== signals ======================================================================== */

/* The one piece of global state in libaxrt, because a signal handler can reach nothing else:
 * the first SIGINT or SIGTERM received during rt_train_main. The loop reads it between steps. */
static volatile sig_atomic_t stop_signal;
/* Set during the start (the options, the data and its tokenizing, the checkpoint's loading,
 * --skip-batches), when no step is running and none may come for long: a signal then ends the
 * process at once. Nothing new exists to save yet, and every save is atomic, so no checkpoint
 * is lost; waiting for "this step" would wait for a step that may never come. */
static volatile sig_atomic_t stop_at_once;
static char stop_prog[64]; /* the trainer's name, for the handler's message; "" on ranks but 0 */

static void say(const char *s) {
    ssize_t ignored = write(STDERR_FILENO, s, strlen(s));
    (void)ignored;
}

static void on_stop(int sig) {
    if (stop_at_once && !stop_prog[0])
        _exit(128 + sig);
    if (stop_at_once) {
        say("\n");
        say(stop_prog);
        say(sig == SIGINT ? ": SIGINT" : ": SIGTERM");
        say(" before the first step: stopped at once; nothing new to save (checkpoints are as they were)\n");
        _exit(128 + sig);
    }
    stop_signal = sig;
    say("\nstopping after this step (signal again to quit at once, without saving)\n");
}

typedef struct Signals {
    struct sigaction intr, term, xfsz;
} Signals;

/* SIGINT and SIGTERM end the run cleanly after the current step; a second one takes the
 * default action (SA_RESETHAND), so a stuck save can still be interrupted, and saves are
 * atomic, so that loses nothing already saved. A SIGINT ignored by the parent (a background
 * job of a script) stays ignored. SIGXFSZ is ignored: a write past the file-size limit then
 * fails with EFBIG, and the save reports it, instead of the signal killing the trainer. */
static void signals_install(Signals *old, const char *prog, int says) {
    snprintf(stop_prog, sizeof stop_prog, "%s", says ? prog : "");
    stop_at_once = 1;
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
    stop_at_once = 0;
    sigaction(SIGINT, &old->intr, NULL);
    sigaction(SIGTERM, &old->term, NULL);
    sigaction(SIGXFSZ, &old->xfsz, NULL);
}

/* After a signal: save where the run stands, and say how to go on. */
static RunEnd stop_run(Trainer *t, RtError *err) {
    const char *name = t->stopped == SIGINT ? "SIGINT" : "SIGTERM";
    RunEnd end = (RunEnd)train_ckpt_save_final(t, err);
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
 * the same step, or none does. The same sum carries each rank's progress on the checkpoint in
 * flight (train_save.c), so the ranks take its next part together. The verdict goes to t->stopped, and only it is read
 * afterwards: a signal that arrives on this rank after the sum waits for the next one, instead of stopping this rank
 * while the others go on to the next step. */
static void agree_stop(Trainer *t) {
    int sig = stop_signal;
    int64_t v[3] = {sig != 0, sig == SIGINT, train_save_done(t)};
    RtError why;
    if (t->world > 1 && rt_comm_sum_i64(t->comm, v, 3, &why) != 0) {
        train_warn(t, "%s", why.msg);
        rt_comm_abort(t->comm, 1);
    }
    t->stopped = v[0] == 0 ? 0 : v[1] > 0 ? SIGINT : SIGTERM;
    if (v[2] == t->world) /* the checkpoint in flight: every rank is done with its current part */
        train_save_advance(t);
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
    RunEnd end = (RunEnd)train_ckpt_save_final(t, err);
    if (end != RUN_DONE)
        return end;
    if (t->metrics && ferror(t->metrics))
        return rt_error_set(err, "--metrics: %s: write failed", t->o.metrics);
    return RUN_DONE;
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
        train_warn(t, "%s", why.msg);
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
        rc = agree_start(t, train_state_init(t, err), &step0, err);
    if (rc == 0)
        rc = agree_start(t, check_same_start(t, step0, err), NULL, err);
    int starts = !(t->step >= t->o.steps && t->saved == t->step);
    if (rc == 0)
        rc = agree_start(t, train_start_rank0(t, starts, err), NULL, err);
    if (rc != 0)
        return RUN_FAILED;
    if (!starts) {
        if (t->rank == 0)
            printf("%s: checkpoint step %lld already reaches --steps %lld; nothing to do\n", t->prog,
                   (long long)t->step, (long long)t->o.steps);
        return RUN_DONE;
    }
    train_banner_print(t);
    train_mem_sample(t);
    t->gp.startup_ms = train_now_ms() - t->gp.start_ms;
    stop_at_once = 0; /* from here a signal stops the run after its step, which saves */
    RunEnd end = train_loop(t, err);
    if (end == RUN_DONE && t->rank == 0) {
        printf("%s: done at step %lld%s%s\n", t->prog, (long long)t->step, t->o.ckpt_dir ? ", checkpoint in " : "",
               t->o.ckpt_dir ? t->o.ckpt_dir : "");
        int64_t slabs = t->slab_bytes * (t->eval_slab ? 2 : 1), scratch = rt_comm_scratch_bytes(t->comm);
        int64_t mpi = rt_comm_size(t->comm) > 1 ? RT_MPI_HEAP_BYTES : 0, planned = slabs + scratch + mpi;
        char parts[160] = "";
        if (scratch + mpi > 0)
            snprintf(parts, sizeof parts, " %.2f MiB, collective scratch %.2f MiB, MPI library %.2f MiB;",
                     (double)slabs / 1048576, (double)scratch / 1048576, (double)mpi / 1048576);
        int64_t huge = train_huge_resident();
        char huge_note[64] = "";
        if (huge >= 0)
            snprintf(huge_note, sizeof huge_note, "; %.2f MiB in huge pages", (double)huge / 1048576);
        int64_t device = t->device_bytes ? t->device_bytes() : 0;
        /* under a pipeline, every rank's slab is planned for the worst stage, whose peak
         * memcheck reports (docs/pipeline.md, "The slab") */
        const char *as = " as axlc memcheck reports it";
        if (device > 0) /* the slabs are on a device: that is what memcheck plans */
            printf("%s: memory: predicted %.2f MiB (the planned slab%s,%s), measured "
                   "%.2f MiB on the device (the buffers the trainer made, %+.1f%%); host heap %.2f MiB at its peak "
                   "(the slab's host copy, staging%s; a CPU device's buffers too); peak RSS %.2f MiB\n",
                   t->prog, (double)slabs / 1048576, t->eval_slab ? "s of the step and eval" : "", as,
                   (double)device / 1048576, 100.0 * ((double)device - (double)slabs) / (double)slabs,
                   (double)t->heap_peak / 1048576, scratch + mpi > 0 ? ", collective scratch, MPI" : "",
                   (double)train_peak_rss() / 1048576);
        else if (t->heap_peak > 0)
            printf("%s: memory: predicted %.2f MiB (the planned slab%s,%s%s), measured "
                   "%.2f MiB (heap the trainer held at its peak, %+.1f%%); peak RSS %.2f MiB (code and libraries "
                   "included)%s\n",
                   t->prog, (double)planned / 1048576, t->eval_slab ? "s of the step and eval" : "", parts, as,
                   (double)t->heap_peak / 1048576, 100.0 * ((double)t->heap_peak - (double)planned) / (double)planned,
                   (double)train_peak_rss() / 1048576, huge_note);
    }
    if (end == RUN_DONE)
        train_stages_print(t);
    if ((end == RUN_DONE || end == RUN_STOPPED) && t->rank == 0)
        train_goodput_print(t, train_now_ms()); /* the last line */
    return end;
}

int rt_train_main(const RtProgram *p, int argc, char **argv) {
    return rt_train_main_sync(p, NULL, argc, argv);
}

int rt_train_main_sync(const RtProgram *p, void (*sync)(char *slab, int dir), int argc, char **argv) {
    RtTrainHooks h = {.sync = sync};
    return rt_train_main_hooks(p, &h, argc, argv);
}

int rt_train_main_hooks(const RtProgram *p, const RtTrainHooks *h, int argc, char **argv) {
    Trainer t = {.p = p,
                 .sync = h ? h->sync : NULL,
                 .copy = h ? h->copy : NULL,
                 .sample_io = h ? h->sample : NULL,
                 .device_bytes = h ? h->device_bytes : NULL,
                 .prog = prog_name(argc, argv),
                 .saved = -1,
                 .tty = train_progress_tty(),
                 .world = 1,
                 .heap_base = train_heap_in_use(),
                 .gp = {.start_ms = train_process_start_ms()}};
    RtError err = {{0}};
    train_opts_default(&t.o, p);
    if (train_opts_parse(&t.o, argc, argv, &err) != 0) {
        if (launched_rank() <= 0)
            fprintf(stderr, "%s: %s\n", t.prog, err.msg);
        return 1;
    }
    if (t.o.help || t.o.config) {
        if (t.o.help) {
            TrainOpts defaults;
            train_opts_default(&defaults, p);
            train_opts_help(stdout, t.prog, &defaults);
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
                           .top_k = t.o.top_k,
                           .top_p = t.o.top_p < 0 ? 1.0 : t.o.top_p,
                           .no_kv_cache = t.o.no_kv_cache,
                           .seed = t.o.seed,
                           .ckpt_dir = t.o.ckpt_dir,
                           .init = t.o.init,
                           .init_allow_unused = t.o.init_allow_unused,
                           .threads = t.o.threads,
                           .io = t.sample_io};
        openblas_set_num_threads(1); /* the pool runs the matrix products (rt_sgemm) */
        int rc = train_opts_check(&t.o, &err) == 0 && (!t.o.tokenizer || open_tokenizer(&t, &err) == 0) ? 0 : -1;
        so.tok = t.tok;
        if (rc == 0)
            rc = rt_sample_run(p, &so, stdout, &err);
        rt_tok_close(t.tok);
        if (rc != 0)
            fprintf(stderr, "%s: %s\n", t.prog, err.msg);
        return rc == 0 ? 0 : 1;
    }
    Signals old;
    signals_install(&old, t.prog, launched_rank() <= 0); /* rank 0 alone says why it stopped */
    RunEnd end = train_opts_check(&t.o, &err) == 0 ? train(&t, &err) : RUN_FAILED;
    if (end == RUN_FAILED) {
        if (t.tty && t.run_steps > 0)
            printf("\n");
        fflush(stdout);
        char text[RT_ERROR_MAX + 16];
        const char *msg = rt_event_text(err.msg, text, sizeof text);
        if (t.say == SAY_ALL)
            fprintf(stderr, "%s: every rank: %s\n", t.prog, msg);
        else if (t.world > 1 && t.say == SAY_OWN)
            fprintf(stderr, "%s: rank %d: %s\n", t.prog, t.rank, msg);
        else if (t.say == SAY_OWN && launched_rank() <= 0)
            fprintf(stderr, "%s: %s\n", t.prog, msg);
        else if (t.say == SAY_OWN && !t.comm)
            /* an error found before the ranks join is rank 0's to print; the launcher stops rank
             * 0 at once when this rank exits, so this one leaves it the time to */
            nanosleep(&(struct timespec){.tv_sec = 2}, NULL);
        if (t.alone && t.world > 1) {
            fflush(stderr);
            rt_comm_abort(t.comm, 1); /* the others would wait for this rank at the next collective */
        }
    }
    int status = end == RUN_DONE        ? 0
                 : end == RUN_STOPPED   ? 128 + t.stopped
                 : end == RUN_NONFINITE ? RT_EXIT_NONFINITE
                 : end == RUN_SDC       ? RT_EXIT_SDC
                                        : 1;
    trainer_free(&t);
    rt_comm_free(t.comm);
    signals_restore(&old);
    return status;
}
