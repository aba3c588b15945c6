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
 * of each generation once. One job at a time: a call made while the pool is busy (from
 * inside fn, or from another thread) runs fn(ctx, 0, n) on its own thread instead of
 * waiting, so nesting never deadlocks.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "axrt.h"

#define POOL_MAX_THREADS 1024

typedef struct PoolJob {
    void (*fn)(void *ctx, int64_t lo, int64_t hi);
    void *ctx;
    int64_t n;
} PoolJob;

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
    uint64_t generation;
    int pending; /* workers still running the current job */
    int stop;
    PoolJob job;
};

/* ===== chunks ========================================================================= */

static void chunk(int64_t n, int parts, int k, int64_t *lo, int64_t *hi) {
    int64_t q = n / parts, r = n % parts;
    *lo = k * q + (k < r ? k : r);
    *hi = *lo + q + (k < r ? 1 : 0);
}

static void run_chunk(const PoolJob *job, int parts, int k) {
    int64_t lo, hi;
    chunk(job->n, parts, k, &lo, &hi);
    if (lo < hi)
        job->fn(job->ctx, lo, hi);
}

/* ===== workers ======================================================================== */

static void *worker_main(void *arg) {
    PoolWorker *w = arg;
    RtPool *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->stop)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        PoolJob job = p->job;
        pthread_mutex_unlock(&p->mu);
        run_chunk(&job, p->threads, w->index);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ===== lifetime ======================================================================= */

static void stop_workers(RtPool *p) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
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
    if (!p || !(p->workers = calloc((size_t)threads, sizeof *p->workers))) {
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
    free(pool);
}

int rt_pool_threads(const RtPool *pool) {
    return pool ? pool->threads : 1;
}

/* ===== parallel for =================================================================== */

void rt_parallel_for(RtPool *pool, int64_t n, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx) {
    if (n <= 0)
        return;
    if (!pool || pool->threads == 1 || n == 1 || pthread_mutex_trylock(&pool->busy) != 0) {
        fn(ctx, 0, n);
        return;
    }
    PoolJob job = {fn, ctx, n};
    pthread_mutex_lock(&pool->mu);
    pool->job = job;
    pool->pending = pool->threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    run_chunk(&job, pool->threads, 0);
    pthread_mutex_lock(&pool->mu);
    while (pool->pending > 0)
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
    pthread_mutex_unlock(&pool->busy);
}
