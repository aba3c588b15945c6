/*
 * sgemm_own.c: the runtime's own product (runtime/sgemm.c) against rt_sgemm's OpenBLAS items,
 * on the products one training step runs (gemm_bench.h's shape lists, the few-batch ones, which
 * are the ones rt_sgemm hands to its own product), on the runtime's pool.
 *
 * Each round times every shape once with each, alternating which goes first, so a burst of
 * other work on the machine costs both alike; a time is the mean over enough calls to take about
 * 30 ms, and the table keeps each one's best and median round. A round's step total weighs each
 * shape by how often a step runs it. Both results are compared with each other
 * (max |C_own - C_openblas| / max |C_openblas|).
 *   usage: sgemm_own [-r ROUNDS] [-t THREADS] [-m gpt2|small|long] [-k avx2|avx512]
 * -k avx2 runs the own product on its AVX2 kernels where the CPU has AVX-512 too (the default
 * there: the AVX-512 ones).
 * Needs the runtime and OpenBLAS, and a CPU with AVX2 and FMA.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rt_impl.h"
#include "tools/bench/gemm_bench.h"

extern void openblas_set_num_threads(int);

enum { MAXROUNDS = 200 };

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Mean seconds of one product over enough calls to take about 30 ms. */
static double time_one(RtPool *pool, const Shape *s, int own, const float *a, const float *b,
                       float *c) {
  int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
  int reps = (int)(6e9 / (2.0 * s->m * s->n * s->k)) + 1; /* about 30 ms at 200 GFLOP/s */
  double t0 = gemm_now();
  for (int r = 0; r < reps; r++) {
    if (own)
      rt_sgemm_own(pool, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0, c, s->n);
    else
      rt_sgemm(pool, 1, s->ta, s->tb, s->m, s->n, s->k, a, lda, 0, b, ldb, 0, c, s->n, 0);
  }
  return (gemm_now() - t0) / reps;
}

int main(int argc, char **argv) {
  int rounds = 7, threads = 2;
  const char *only = NULL;
  int avx512 = 1; /* -k avx2: the own product's AVX2 kernels where the CPU has AVX-512 too */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-k") && i + 1 < argc &&
        (!strcmp(argv[i + 1], "avx2") || !strcmp(argv[i + 1], "avx512"))) {
      avx512 = !strcmp(argv[++i], "avx512");
    } else if (!gemm_common_option(argc, argv, &i, &rounds, &threads, &only)) {
      fprintf(stderr, "usage: sgemm_own [-r ROUNDS] [-t THREADS] [-m gpt2|small|long] "
                      "[-k avx2|avx512]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > MAXROUNDS || threads < 1) {
    fprintf(stderr, "sgemm_own: -r takes 1 to %d rounds, -t at least 1 thread\n", MAXROUNDS);
    return 2;
  }
  if (!rt_sgemm_own_available()) {
    fprintf(stderr, "sgemm_own: this CPU lacks AVX2 or FMA: rt_sgemm runs OpenBLAS alone here\n");
    return 1;
  }
  setenv("AXLC_SGEMM", "openblas", 1); /* rt_sgemm: OpenBLAS's items; the own product directly */
  openblas_set_num_threads(1);         /* as rt_train_main */
  RtPool *pool;
  RtError err;
  if (rt_pool_new(&pool, threads, &err)) {
    fprintf(stderr, "sgemm_own: %s\n", err.msg);
    return 1;
  }
  int wide = rt_sgemm_own_avx512(avx512);
  printf("%d threads, %d rounds, the own product on its %s kernels; GFLOP/s of each one's best "
         "round, ratio = OpenBLAS time / own time (above 1: own faster)\n",
         threads, rounds, wide ? "AVX-512" : "AVX2");
  for (size_t mi = 0; mi < sizeof MODELS / sizeof MODELS[0]; mi++) {
    const Model *md = &MODELS[mi];
    if (only && strcmp(only, md->name)) continue;
    printf("\n%s\n%5s  %-22s %9s %9s %7s %9s\n", md->name, "count", "ta tb M N K", "own",
           "openblas", "ratio", "rel err");
    static double tot[2][MAXROUNDS];
    memset(tot, 0, sizeof tot);
    for (int si = 0; si < md->n; si++) {
      const Shape *s = &md->shapes[si];
      if (s->batch >= 4) continue; /* rt_sgemm keeps those on OpenBLAS */
      float *a = gemm_fill((int64_t)s->m * s->k, 1), *b = gemm_fill((int64_t)s->k * s->n, 2);
      float *c[2] = {gemm_fill((int64_t)s->m * s->n, 3), gemm_fill((int64_t)s->m * s->n, 4)};
      double t[2][MAXROUNDS];
      for (int r = 0; r < rounds; r++)
        for (int v = 0; v < 2; v++) {
          int own = (v + r + si) % 2;
          t[own][r] = time_one(pool, s, own, a, b, c[own]);
          tot[own][r] += s->count * t[own][r];
        }
      double err = 0, top = 0;
      for (int64_t x = 0; x < (int64_t)s->m * s->n; x++) {
        err = fmax(err, fabs((double)c[1][x] - c[0][x]));
        top = fmax(top, fabs((double)c[0][x]));
      }
      qsort(t[0], (size_t)rounds, sizeof(double), cmp_double);
      qsort(t[1], (size_t)rounds, sizeof(double), cmp_double);
      double flop = 2.0 * s->m * s->n * s->k;
      char shape[64];
      snprintf(shape, sizeof shape, "%d %d %d %d %d", s->ta, s->tb, s->m, s->n, s->k);
      printf("%5d  %-22s %9.1f %9.1f %7.2f %9.1e\n", s->count, shape, flop / t[1][0] / 1e9,
             flop / t[0][0] / 1e9, t[0][0] / t[1][0], err / (top > 0 ? top : 1));
      free(a), free(b), free(c[0]), free(c[1]);
    }
    double best[2], med[2], ratios[MAXROUNDS];
    for (int r = 0; r < rounds; r++) ratios[r] = tot[0][r] / tot[1][r];
    for (int v = 0; v < 2; v++) {
      qsort(tot[v], (size_t)rounds, sizeof(double), cmp_double);
      best[v] = tot[v][0], med[v] = tot[v][rounds / 2];
    }
    qsort(ratios, (size_t)rounds, sizeof(double), cmp_double);
    printf("step total, ms: own %.1f best / %.1f median, OpenBLAS %.1f / %.1f; ratio %.3f best, "
           "%.3f median, %.3f median of the rounds' ratios\n",
           best[1] * 1e3, med[1] * 1e3, best[0] * 1e3, med[0] * 1e3, best[0] / best[1],
           med[0] / med[1], ratios[rounds / 2]);
  }
  rt_pool_free(pool);
  return 0;
}
