/*
 * test_pool.c: the thread pool: every index of [0, n) is visited exactly once, by at most
 * one call per thread, in contiguous chunks that depend only on (n, threads); a NULL pool
 * and nested calls run inline; many back-to-back jobs (the sleep/wake path) lose nothing.
 * rt_parallel_for_claimed: every index once, one call per index, and a thread held up on
 * one item leaves the rest of its chunk to the others.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "rt_test.h"

typedef struct Visit {
  int *count; /* (n) visits per index */
  int64_t lo[64], hi[64];
  int calls;
  pthread_mutex_t mu;
} Visit;

static void visit(void *ctx, int64_t lo, int64_t hi) {
  Visit *v = ctx;
  for (int64_t i = lo; i < hi; i++)
    v->count[i]++; /* each index is owned by one call: no race unless the pool is wrong */
  pthread_mutex_lock(&v->mu);
  if (v->calls < 64) {
    v->lo[v->calls] = lo;
    v->hi[v->calls] = hi;
  }
  v->calls++;
  pthread_mutex_unlock(&v->mu);
}

static void check_cover(RtPool *pool, int threads, int64_t n, int claimed) {
  Visit v = {.count = calloc((size_t)n + 1, sizeof(int))};
  pthread_mutex_init(&v.mu, NULL);
  if (claimed)
    rt_parallel_for_claimed(pool, n, visit, &v);
  else
    rt_parallel_for(pool, n, visit, &v);
  int bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++)
    if (v.count[i] != 1) bad = (int)i;
  CHECK_MSG(bad < 0, "threads %d n %lld: index %d not visited once", threads, (long long)n, bad);
  if (claimed && threads > 1 && n > 1) { /* one call per index */
    CHECK_INT(v.calls, (int)n);
    for (int c = 0; c < v.calls && c < 64; c++) CHECK_INT(v.hi[c] - v.lo[c], 1);
    pthread_mutex_destroy(&v.mu);
    free(v.count);
    return;
  }
  CHECK_INT(v.calls <= threads, 1);
  CHECK_INT(n == 0 ? v.calls == 0 : v.calls >= 1, 1);
  int64_t q = n / threads, longest = q + (n % threads != 0);
  for (int c = 0; c < v.calls && c < 64; c++)
    CHECK_INT(v.hi[c] - v.lo[c] <= longest && v.hi[c] > v.lo[c], 1);
  pthread_mutex_destroy(&v.mu);
  free(v.count);
}

static void test_cover(void) {
  static const int threads[] = {1, 2, 3, 4, 7, 16};
  static const int64_t sizes[] = {0, 1, 2, 3, 5, 7, 8, 15, 16, 17, 100, 1001, 65537};
  RtError err;
  for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
    RtPool *pool;
    CHECK_OK(rt_pool_new(&pool, threads[t], &err));
    CHECK_INT(rt_pool_threads(pool), threads[t]);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
      check_cover(pool, threads[t], sizes[s], 0);
      check_cover(pool, threads[t], sizes[s], 1);
    }
    rt_pool_free(pool);
  }
}

static void test_null_pool(void) {
  check_cover(NULL, 1, 10, 0);
  check_cover(NULL, 1, 10, 1);
  CHECK_INT(rt_pool_threads(NULL), 1);
}

static void test_bad_size(void) {
  RtError err;
  RtPool *pool = (RtPool *)&err;
  CHECK_FAIL(rt_pool_new(&pool, 0, &err), "0 threads");
  CHECK_INT(pool == NULL, 1);
  CHECK_FAIL(rt_pool_new(&pool, 100000, &err), "expected 1..");
}

/* A kernel that calls rt_parallel_for on the same pool from inside a chunk. */
typedef struct Nest {
  RtPool *pool;
  int *count; /* (8 * 8) */
} Nest;

static void inner(void *ctx, int64_t lo, int64_t hi) {
  int *row = ctx;
  for (int64_t i = lo; i < hi; i++) row[i]++;
}

static void outer(void *ctx, int64_t lo, int64_t hi) {
  Nest *n = ctx;
  for (int64_t i = lo; i < hi; i++) rt_parallel_for(n->pool, 8, inner, n->count + 8 * i);
}

static void test_nested(void) {
  RtError err;
  int count[64] = {0};
  Nest n = {NULL, count};
  CHECK_OK(rt_pool_new(&n.pool, 4, &err));
  rt_parallel_for(n.pool, 8, outer, &n);
  int ones = 0;
  for (int i = 0; i < 64; i++) ones += count[i] == 1;
  CHECK_INT(ones, 64);
  rt_pool_free(n.pool);
}

/* Deterministic sums: each chunk writes its own slots, summed afterwards in index order. */
static void square(void *ctx, int64_t lo, int64_t hi) {
  double *x = ctx;
  for (int64_t i = lo; i < hi; i++) x[i] = (double)i * (double)i;
}

static void test_many_jobs(void) {
  RtError err;
  RtPool *pool;
  CHECK_OK(rt_pool_new(&pool, 5, &err));
  double x[333];
  int wrong = 0;
  for (int job = 0; job < 3000; job++) {
    memset(x, 0, sizeof x);
    int64_t n = 1 + job % 333;
    if (job % 2)
      rt_parallel_for_claimed(pool, n, square, x);
    else
      rt_parallel_for(pool, n, square, x);
    for (int64_t i = 0; i < n; i++) wrong += x[i] != (double)i * (double)i;
  }
  CHECK_INT(wrong, 0);
  rt_pool_free(pool);
}

/* Claimed items: which thread ran each; item 0 holds its thread up for 300 ms. */
typedef struct Slow {
  pthread_t by[8];
} Slow;

static void slow_item(void *ctx, int64_t lo, int64_t hi) {
  Slow *s = ctx;
  for (int64_t i = lo; i < hi; i++) {
    s->by[i] = pthread_self();
    if (i == 0) {
      struct timespec t = {0, 300 * 1000 * 1000};
      nanosleep(&t, NULL);
    }
  }
}

static void test_claimed_steals(void) {
  RtError err;
  RtPool *pool;
  CHECK_OK(rt_pool_new(&pool, 2, &err));
  Slow s;
  /* chunks [0, 4) (the caller) and [4, 8) (the worker): while item 0 sleeps, the worker runs
   * its own four, then items 3, 2 and 1 of the caller's chunk */
  rt_parallel_for_claimed(pool, 8, slow_item, &s);
  int others = 0;
  for (int i = 1; i < 8; i++) others += !pthread_equal(s.by[i], s.by[0]);
  CHECK_INT(others, 7);
  rt_pool_free(pool);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"cover each index once", test_cover},
      {"NULL pool runs inline", test_null_pool},
      {"bad thread count", test_bad_size},
      {"nested call runs inline", test_nested},
      {"3000 back-to-back jobs", test_many_jobs},
      {"claimed items move to a free thread", test_claimed_steals},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_pool", cases);
}
