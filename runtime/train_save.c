/*
 * train_save.c: the trainer's checkpoint saves: the periodic ones, asynchronous by default, and
 * the final one (the end of the run, a signal), which blocks.
 *
 * An asynchronous save copies the parameters and moments into a host snapshot at the step
 * boundary (the only part the step waits for, with the check that they are finite) and writes
 * it from a background thread while the next steps run. At most one save is in flight: the
 * next one, the end of the run, a signal and a run that stops on values not finite first wait
 * for it. The files are those of a blocking save (ckpt.c): written under temporary names, the
 * index last, so a trainer killed mid-write leaves an incomplete step directory that no resume
 * sees and a later save prunes.
 *
 * Several ranks: the collectives stay on the main thread. The background thread only writes this
 * rank's shard (rt_ckpt_shard_write); before each step the ranks' "done" flags ride on the stop
 * agreement's sum (train.c's agree_stop), and once every rank is done they exchange the shards'
 * sizes and CRC-32s (rt_ckpt_shard_gather). Rank 0's thread then writes the index and prunes
 * (rt_ckpt_shard_index), and when it is done every rank learns the outcome (rt_ckpt_shard_end).
 * Every step of this is taken on an agreed sum, so the ranks call the same collectives in the
 * same order, and the index exists only once every shard is complete.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "train_impl.h"

enum { SAVE_IDLE, SAVE_WRITING, SAVE_INDEXING };

#define WRITER_NICE 10

/* Values of tensor j of the checkpoint's table (this rank's chunk). */
static int64_t tensor_numel(const Trainer *t, int j) {
    const RtTensor *x = &t->ck_tensors[j];
    int64_t n = 1;
    for (int d = 0; d < x->ndim; d++)
        n *= x->shape[d];
    return n;
}

/* The first of the checkpoint's tensors (over the slab, or tensors: the snapshot) holding a NaN or
 * an infinity, or NULL. Such a state is never saved: "last good checkpoint" must be good. */
static const char *nonfinite_tensor(const Trainer *t, const RtTensor *tensors) {
    for (int j = 0; j < t->n_ck; j++) {
        const float *x = tensors[j].data;
        for (int64_t k = 0, n = tensor_numel(t, j); k < n; k++)
            if (!isfinite(x[k]))
                return tensors[j].name;
    }
    return NULL;
}

/* The sum over all ranks of one number (each rank's own when there is one rank). A failed
 * exchange has already ended the job (comm.c), so this returns only agreed values. */
static int64_t agree_sum(Trainer *t, int64_t v) {
    RtError why;
    if (t->world > 1 && rt_comm_sum_i64(t->comm, &v, 1, &why) != 0) {
        train_warn(t, "%s", why.msg);
        rt_comm_abort(t->comm, 1);
    }
    return v;
}

/* 0 when no rank found a tensor that is not finite (bad: this rank's, or NULL); else 1, reported. */
static int agree_finite(Trainer *t, const char *bad) {
    if (agree_sum(t, bad != NULL) == 0)
        return 0;
    char what[1024];
    snprintf(what, sizeof what, "%.900s after the update", bad ? bad : "a parameter of another rank");
    if (bad || t->rank == 0)
        train_report_stop(t, what, bad); /* NULL: another rank's */
    return 1;
}

static RtCkptState ckpt_state(Trainer *t, const RtTensor *tensors) {
    return (RtCkptState){
        .step = t->step,
        .data_position = rt_data_position(t->data),
        .rng_state = t->o.seed,
        .config = t->p->config,
        .tensors = tensors,
        .n_tensors = t->n_ck,
        .fingerprint = t->fingerprint,
        .trainer_state = train_outlier_text(t),
        .comm = t->world > 1 ? t->comm : NULL,
        .regions = t->ck_regions,
        .base = t->frozen ? t->base : NULL,
    };
}

/* A blocking save of the slab. Returns 0 when saved, -1 when the save failed (err says why), 1
 * when the state is not finite (reported; nothing saved). */
static int ckpt_save(Trainer *t, RtError *err) {
    if (agree_finite(t, nonfinite_tensor(t, t->ck_tensors)))
        return 1;
    RtCkptState s = ckpt_state(t, t->ck_tensors);
    RtError why;
    int rc = rt_ckpt_save(t->o.ckpt_dir, &s, (int)t->o.keep, &why);
    train_mem_sample(t);
    if (rc < 0)
        return rt_error_set(err, "%s", why.msg);
    if (rc > 0 && t->rank == 0)
        train_warn(t, "%s", why.msg); /* saved; a stale checkpoint takes room but harms nothing */
    t->saved = t->step;
    return 0;
}

/* What a periodic save that failed says: the run goes on, and where it stands. */
static void report_failed(Trainer *t, int64_t step, const char *msg) {
    char buf[RT_ERROR_MAX];
    int64_t next = step + t->o.ckpt_every < t->o.steps ? step + t->o.ckpt_every : t->o.steps;
    if (t->rank == 0)
        train_warn(t, "step %lld: checkpoint not saved: %s; training goes on and saves again at step %lld%s; %s",
                   (long long)step, msg, (long long)next, next == t->o.steps ? ", the last" : "",
                   train_last_good(t, buf, sizeof buf));
}

/* ===== the background save ============================================================ */

/* The snapshot is copied in blocks of this many values, over the pool. */
#define SNAP_BLOCK ((int64_t)1 << 16)

/* The snapshot: one mapping holding a copy of every tensor of the table, the table over it, and
 * its blocks (tensor j's are first[j] .. first[j + 1] - 1). */
static int snapshot_make(Trainer *t, RtError *err) {
    AsyncSave *a = &t->save;
    int n = t->n_ck;
    int64_t bytes = 0;
    free(a->first); /* what an earlier attempt that ran out of memory left */
    free(a->bad);
    free(a->tensors);
    free(a->info);
    a->bad = NULL;
    a->tensors = NULL;
    a->info = NULL;
    a->first = calloc((size_t)n + 1, sizeof *a->first);
    if (!a->first)
        return rt_error_set(err, "out of memory for the checkpoint snapshot");
    for (int j = 0; j < n; j++) {
        bytes += (tensor_numel(t, j) * 4 + 63) / 64 * 64;
        a->first[j + 1] = a->first[j] + (tensor_numel(t, j) + SNAP_BLOCK - 1) / SNAP_BLOCK;
    }
    a->bad = calloc((size_t)a->first[n] + 1, 1);
    a->tensors = calloc((size_t)n + 1, sizeof *a->tensors);
    a->info = calloc(3 * (size_t)t->world, sizeof *a->info);
    void *m = mmap(NULL, (size_t)(bytes ? bytes : 64), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!a->bad || !a->tensors || !a->info || m == MAP_FAILED) {
        if (m != MAP_FAILED)
            munmap(m, (size_t)(bytes ? bytes : 64));
        return rt_error_set(err, "out of memory for the checkpoint snapshot (%.1f MiB)", (double)bytes / 1048576);
    }
    a->buf = m;
    a->buf_bytes = bytes ? bytes : 64;
    int64_t off = 0;
    for (int j = 0; j < n; j++) {
        a->tensors[j] = t->ck_tensors[j];
        a->tensors[j].data = a->buf + off;
        off += (tensor_numel(t, j) * 4 + 63) / 64 * 64;
    }
    return 0;
}

/* Blocks [lo, hi) of the snapshot: copied, and bad[b] set where one holds a NaN or an infinity. */
static void copy_blocks(void *ctx, int64_t lo, int64_t hi) {
    Trainer *t = ctx;
    AsyncSave *a = &t->save;
    int j = 0;
    while (a->first[j + 1] <= lo)
        j++;
    for (int64_t b = lo; b < hi; b++) {
        while (a->first[j + 1] <= b)
            j++;
        int64_t off = (b - a->first[j]) * SNAP_BLOCK, len = tensor_numel(t, j) - off;
        len = len < SNAP_BLOCK ? len : SNAP_BLOCK;
        const float *src = (const float *)t->ck_tensors[j].data + off;
        float *dst = (float *)a->tensors[j].data + off;
        memcpy(dst, src, (size_t)len * 4);
        int finite = 1;
        for (int64_t k = 0; k < len; k++)
            finite &= isfinite(dst[k]) != 0;
        a->bad[b] = (char)!finite;
    }
}

/* Copies the state into the snapshot on the pool's threads; the first tensor that is not
 * finite, or NULL. */
static const char *snapshot_copy(Trainer *t) {
    AsyncSave *a = &t->save;
    int n = t->n_ck;
    rt_parallel_for(t->pool, a->first[n], copy_blocks, t);
    for (int j = 0; j < n; j++)
        for (int64_t b = a->first[j]; b < a->first[j + 1]; b++)
            if (a->bad[b])
                return t->ck_tensors[j].name;
    return NULL;
}

/* The writer runs at a lower priority than the step's threads (its nice value 10 above theirs;
 * Linux sets a thread's through its id): it fills the cycles the step leaves, rather than taking
 * the step's. */
static void writer_nice(void) {
#ifdef SYS_gettid
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int now = getpriority(PRIO_PROCESS, tid);
    if (errno == 0)
        (void)setpriority(PRIO_PROCESS, tid, now + WRITER_NICE < 19 ? now + WRITER_NICE : 19);
#endif
}

static void *save_thread(void *arg) {
    Trainer *t = arg;
    AsyncSave *a = &t->save;
    if (a->running) /* not when run on the main thread */
        writer_nice();
    if (a->phase == SAVE_INDEXING)
        a->rc = rt_ckpt_shard_index(t->o.ckpt_dir, &a->state, a->info, (int)t->o.keep, &a->why);
    else if (t->world > 1)
        a->rc = rt_ckpt_shard_write(t->o.ckpt_dir, &a->state, a->info + 3 * t->rank, &a->why);
    else
        a->rc = rt_ckpt_save(t->o.ckpt_dir, &a->state, (int)t->o.keep, &a->why);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Starts save_thread for the current phase, with the stop signals blocked in it: they belong to
 * the main thread, and would otherwise interrupt the writes. */
static int thread_start(Trainer *t, RtError *err) {
    AsyncSave *a = &t->save;
    sigset_t all, old;
    sigfillset(&all);
    a->done = 0;
    a->running = 1; /* before the thread starts: it reads it */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&a->thread, NULL, save_thread, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        return 0;
    a->running = 0;
    return rt_error_set(err, "cannot start the checkpoint writer thread: %s", strerror(rc));
}

static void thread_join(AsyncSave *a) {
    if (!a->running)
        return;
    pthread_join(a->thread, NULL);
    a->running = 0;
}

int train_save_done(const Trainer *t) {
    const AsyncSave *a = &t->save;
    if (a->phase == SAVE_IDLE)
        return 0;
    if (a->phase == SAVE_INDEXING && t->rank != 0)
        return 1; /* rank 0 alone writes the index */
    return __atomic_load_n(&a->done, __ATOMIC_ACQUIRE);
}

/* The save is complete (rc 0 or 1) or failed (rc -1, msg says why): reported, and idle again. */
static void save_finish(Trainer *t, int rc, const char *msg) {
    AsyncSave *a = &t->save;
    a->phase = SAVE_IDLE;
    if (rc < 0) {
        report_failed(t, a->state.step, msg);
        return;
    }
    if (rc > 0 && t->rank == 0)
        train_warn(t, "%s", msg);
    t->saved = a->state.step;
}

/* Takes the save one phase on, once every rank is done with the current one (the caller knows:
 * an agreed sum, or a wait). */
void train_save_advance(Trainer *t) {
    AsyncSave *a = &t->save;
    RtError err;
    thread_join(a);
    if (a->phase == SAVE_WRITING && t->world == 1) {
        save_finish(t, a->rc, a->why.msg);
    } else if (a->phase == SAVE_WRITING) {
        if (rt_ckpt_shard_gather(t->o.ckpt_dir, &a->state, a->info, &a->why, &err) != 0) {
            save_finish(t, -1, err.msg);
            return;
        }
        a->phase = SAVE_INDEXING;
        a->rc = 0;
        if (t->rank == 0 && thread_start(t, &a->why) != 0)
            save_thread(t); /* then here */
    } else if (a->phase == SAVE_INDEXING) {
        int rc = rt_ckpt_shard_end(&a->state, a->rc, &a->why, &err);
        save_finish(t, rc, err.msg);
    }
}

void train_save_wait(Trainer *t) {
    if (t->save.phase == SAVE_IDLE)
        return;
    double t0 = (rt_now_s() * 1e3);
    while (t->save.phase != SAVE_IDLE)
        train_save_advance(t);
    t->ckpt_ms += (rt_now_s() * 1e3) - t0;
}

/* Snapshots the state and starts writing it. 0: started (or failed and reported: the run goes
 * on); 1: the state is not finite (reported). Without room for a snapshot on some rank, every
 * rank saves blocking, this time. */
static int save_async(Trainer *t) {
    AsyncSave *a = &t->save;
    RtError err;
    int none = !a->buf && snapshot_make(t, &err) != 0;
    if (agree_sum(t, none) > 0) {
        if (none)
            train_warn(t, "step %lld: %s; this checkpoint is saved before the next step", (long long)t->step, err.msg);
        int rc = ckpt_save(t, &err);
        if (rc < 0)
            report_failed(t, t->step, err.msg);
        return rc > 0;
    }
    if (agree_finite(t, snapshot_copy(t)))
        return 1;
    a->state = ckpt_state(t, a->tensors);
    memset(a->info, 0, 3 * (size_t)t->world * sizeof *a->info);
    if (t->world > 1 && rt_ckpt_shard_begin(t->o.ckpt_dir, &a->state, &err) != 0) {
        report_failed(t, t->step, err.msg);
        return 0;
    }
    a->phase = SAVE_WRITING;
    a->rc = 0;
    if (thread_start(t, &a->why) != 0)
        save_thread(t); /* then here */
    return 0;
}

/* A periodic save that fails does not end the run: the work since the last checkpoint is
 * still in memory, and the next save may succeed (space freed, disk remounted). */
int train_ckpt_save_periodic(Trainer *t) {
    train_save_wait(t);
    double t0 = (rt_now_s() * 1e3);
    train_sync(t, t->slab, RT_SYNC_STATE_TO_HOST); /* the state, read back from a device */
    int rc;
    if (t->o.ckpt_sync) {
        RtError why;
        rc = ckpt_save(t, &why);
        if (rc < 0)
            report_failed(t, t->step, why.msg);
    } else {
        rc = save_async(t);
    }
    t->ckpt_ms += (rt_now_s() * 1e3) - t0;
    return rc > 0 ? 1 : 0;
}

/* The last save of a run (at its end, or when stopped by a signal): a failure is an error that
 * names the last good checkpoint. 1 when the state is not finite (reported). */
int train_ckpt_save_final(Trainer *t, RtError *err) {
    RtError why;
    char buf[RT_ERROR_MAX];
    train_save_wait(t);
    if (!t->o.ckpt_dir || t->saved == t->step)
        return 0;
    double t0 = (rt_now_s() * 1e3);
    train_sync(t, t->slab, RT_SYNC_STATE_TO_HOST);
    int rc = ckpt_save(t, &why);
    t->ckpt_ms += (rt_now_s() * 1e3) - t0;
    if (rc < 0)
        return rt_error_set(err, "could not save the checkpoint of step %lld: %s; the run ends without it; %s",
                            (long long)t->step, why.msg, train_last_good(t, buf, sizeof buf));
    return rc;
}

void train_save_free(Trainer *t) {
    AsyncSave *a = &t->save;
    thread_join(a);
    if (a->phase == SAVE_WRITING && t->world == 1)
        save_finish(t, a->rc, a->why.msg); /* a run that failed: its last save still counts */
    if (a->buf)
        munmap(a->buf, (size_t)a->buf_bytes);
    free(a->tensors);
    free(a->info);
    free(a->first);
    free(a->bad);
    memset(a, 0, sizeof *a);
}
