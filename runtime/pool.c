/*
 * pool.c: the CPU thread pool that generated kernels split their loops across.
 *
 * A pool of N threads is the caller plus N-1 workers that sleep on a condition variable
 * between jobs. rt_parallel_for(pool, n, fn, ctx) cuts [0, n) into N contiguous chunks
 * (chunk k = [k*q + min(k, r), (k+1)*q + min(k+1, r)) with q = n / N, r = n % N), hands
 * chunk k to worker k and runs chunk 0 itself, then waits for all of them. Each index is
 * owned by exactly one call, and the chunking depends only on (n, N), so a kernel that
 * writes only the indices it owns gives the same bytes for any thread count.
 *
 * A job is published under the mutex with a new generation number; a worker runs the job
 * of each generation once. Kernels come back to back within a step, so a worker first spins
 * up to about 200 microseconds for the next generation, and the caller for the last chunk to
 * finish, before either sleeps on its condition variable: waking a sleeping thread costs
 * more than the whole job of a small kernel (tiny-lm: 43 ms/step with two threads that slept
 * between kernels, 12 ms with one thread). One job at a time: a call made while the pool is busy (from
 * inside fn, or from another thread) runs fn(ctx, 0, n) on its own thread instead of
 * waiting, so nesting never deadlocks.
 *
 * rt_parallel_for_claimed: the same chunks, claimed an item at a time. A thread runs its own
 * chunk's items from the front, then takes the others' leftovers from their backs, each claim
 * a compare-and-swap on the chunk's [lo, hi). On a shared machine one thread is often slower
 * for a while; with whole chunks the job waits for it, with claims the other takes over.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "axrt.h"

#define POOL_MAX_THREADS 1024

typedef struct PoolJob {
    void (*fn)(void *ctx, int64_t lo, int64_t hi);
    void *ctx;
    int64_t n;
    int claimed; /* items claimed one at a time (rt_parallel_for_claimed), else whole chunks */
} PoolJob;

/* A chunk of a claimed job: its unclaimed items [lo, hi) as hi << 32 | lo, on a cache line
 * of its own (its owner claims from it at every item). */
typedef struct PoolLeft {
    _Alignas(64) _Atomic uint64_t items;
} PoolLeft;

typedef struct PoolWorker {
    RtPool *pool;
    int index; /* 1..threads-1: the chunk it runs */
    pthread_t thread;
} PoolWorker;

struct RtPool {
    int threads;
    PoolWorker *workers;  /* (threads - 1) */
    int started;          /* workers whose thread exists */
    pthread_mutex_t busy; /* held by the caller of the job in flight */
    pthread_mutex_t mu;   /* guards everything below */
    pthread_cond_t wake, done;
    _Atomic uint64_t generation;
    atomic_int pending; /* workers still running the current job */
    atomic_int stop;
    PoolLeft *left; /* (threads) the chunks of a claimed job */
    PoolJob job;
};

/* ===== chunks ========================================================================= */

static void chunk(int64_t n, int parts, int k, int64_t *lo, int64_t *hi) {
    int64_t q = n / parts, r = n % parts;
    *lo = k * q + (k < r ? k : r);
    *hi = *lo + q + (k < r ? 1 : 0);
}

/* Claims an unclaimed item of a chunk: its first (front) or its last; -1 when none is left. */
static int64_t claim(PoolLeft *left, int front) {
    uint64_t v = atomic_load(&left->items);
    for (;;) {
        uint64_t lo = v & 0xffffffffu, hi = v >> 32;
        if (lo >= hi)
            return -1;
        uint64_t rest = front ? hi << 32 | (lo + 1) : (hi - 1) << 32 | lo;
        if (atomic_compare_exchange_weak(&left->items, &v, rest))
            return (int64_t)(front ? lo : hi - 1);
    }
}

static void run_chunk(RtPool *p, const PoolJob *job, int k) {
    if (job->claimed) { /* its own chunk from the front, in order, then the others' from the back */
        for (int j = 0; j < p->threads; j++)
            for (int64_t i; (i = claim(&p->left[(k + j) % p->threads], j == 0)) >= 0;)
                job->fn(job->ctx, i, i + 1);
        return;
    }
    int64_t lo, hi;
    chunk(job->n, p->threads, k, &lo, &hi);
    if (lo < hi)
        job->fn(job->ctx, lo, hi);
}

/* ===== workers ======================================================================== */

/* Iterations of a spin-wait: about 200 microseconds of pause instructions. The chunks of a
 * job can differ by that much (products cut into a few items, attention's causal blocks), and
 * a caller that slept waiting for the last one pays the wake-up on top. 1500 (30 us) before:
 * small 459 -> 439 ms/step and tiny-lm 7.9 -> 6.9 with 10000, long and gpt2 unchanged (2
 * threads, medians of alternating runs). */
enum { SPIN = 10000 };

static void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg) {
    PoolWorker *w = arg;
    RtPool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        for (int i = 0; i < SPIN && atomic_load(&p->generation) == seen && !atomic_load(&p->stop); i++)
            relax();
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
            pthread_cond_wait(&p->wake, &p->mu);
        if (atomic_load(&p->stop)) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        seen = atomic_load(&p->generation);
        PoolJob job = p->job;
        pthread_mutex_unlock(&p->mu);
        run_chunk(p, &job, w->index);
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            pthread_mutex_lock(&p->mu); /* the caller may be asleep on done */
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

/* ===== lifetime ======================================================================= */

static void stop_workers(RtPool *p) {
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->workers[i].thread, NULL);
    p->started = 0;
}

static int start_workers(RtPool *p, RtError *err) {
    for (int i = 0; i < p->threads - 1; i++) {
        p->workers[i] = (PoolWorker){.pool = p, .index = i + 1};
        int rc = pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]);
        if (rc != 0)
            return rt_error_set(err, "thread pool: cannot start thread %d of %d: %s", i + 2, p->threads, strerror(rc));
        p->started++;
    }
    return 0;
}

int rt_pool_new(RtPool **out, int threads, RtError *err) {
    *out = NULL;
    if (threads < 1 || threads > POOL_MAX_THREADS)
        return rt_error_set(err, "thread pool: %d threads, expected 1..%d", threads, POOL_MAX_THREADS);
    RtPool *p = calloc(1, sizeof *p);
    if (!p || !(p->workers = calloc((size_t)threads, sizeof *p->workers)) ||
        !(p->left = aligned_alloc(64, (size_t)threads * sizeof *p->left))) {
        if (p)
            free(p->workers);
        free(p);
        return rt_error_set(err, "thread pool: out of memory");
    }
    p->threads = threads;
    pthread_mutex_init(&p->busy, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (start_workers(p, err) != 0) {
        rt_pool_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

void rt_pool_free(RtPool *pool) {
    if (!pool)
        return;
    stop_workers(pool);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mu);
    pthread_mutex_destroy(&pool->busy);
    free(pool->workers);
    free(pool->left);
    free(pool);
}

int rt_pool_threads(const RtPool *pool) {
    return pool ? pool->threads : 1;
}

/* ===== parallel for =================================================================== */

static void parallel(RtPool *pool, int64_t n, int claimed, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx) {
    if (n <= 0)
        return;
    if (!pool || pool->threads == 1 || n == 1 || pthread_mutex_trylock(&pool->busy) != 0) {
        fn(ctx, 0, n);
        return;
    }
    PoolJob job = {fn, ctx, n, claimed && n < ((int64_t)1 << 32)};
    for (int k = 0; k < pool->threads && job.claimed; k++) {
        int64_t lo, hi;
        chunk(n, pool->threads, k, &lo, &hi);
        atomic_store(&pool->left[k].items, (uint64_t)hi << 32 | (uint64_t)lo);
    }
    pthread_mutex_lock(&pool->mu);
    pool->job = job;
    atomic_store(&pool->pending, pool->threads - 1);
    atomic_fetch_add(&pool->generation, 1);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    run_chunk(pool, &job, 0);
    for (int i = 0; i < SPIN && atomic_load(&pool->pending) > 0; i++)
        relax();
    pthread_mutex_lock(&pool->mu);
    while (atomic_load(&pool->pending) > 0)
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
    pthread_mutex_unlock(&pool->busy);
}

void rt_parallel_for(RtPool *pool, int64_t n, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx) {
    parallel(pool, n, 0, fn, ctx);
}

void rt_parallel_for_claimed(RtPool *pool, int64_t n, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx) {
    parallel(pool, n, 1, fn, ctx);
}
