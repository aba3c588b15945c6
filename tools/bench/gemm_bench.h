/*
 * gemm_bench.h: what the matrix product benchmarks (gemm_libs.c, gemm_cut.c) share: the
 * step's products of the three bench models, a product's operands, and the runtime's cut of a
 * product into blocks (a copy of runtime/blas.c's block(), which the tools check against
 * rt_sgemm's bits).
 */
#ifndef AXLC_TOOLS_BENCH_GEMM_BENCH_H
#define AXLC_TOOLS_BENCH_GEMM_BENCH_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/axrt.h"

/* count x (batch, ta, tb, M, N, K): row-major C = op(A) op(B), natural leading dimensions. */
typedef struct {
  int count, batch, ta, tb, m, n, k;
} Shape;

/* The step's products of gpt2-124m at batch 4, seq 64 (models/gpt2-124m.json, --set
 * /input/global_batch_size=4 --set /input/seq_len=64), small and long (tools/bench/small.json,
 * long.json), from gemm_shapes.awk (docs/bench.md, Matrix product libraries). */
static const Shape GEMM_GPT2[] = {
    {1, 1, 1, 0, 50257, 768, 256}, {12, 1, 1, 0, 3072, 768, 256}, {12, 1, 1, 0, 768, 3072, 256},
    {48, 1, 1, 0, 768, 768, 256},  {1, 1, 0, 1, 256, 50257, 768}, {12, 1, 0, 0, 256, 3072, 768},
    {12, 1, 0, 1, 256, 3072, 768}, {48, 1, 0, 0, 256, 768, 768},  {48, 1, 0, 1, 256, 768, 768},
    {12, 1, 0, 0, 256, 768, 3072}, {12, 1, 0, 1, 256, 768, 3072}, {1, 1, 0, 0, 256, 768, 50257},
    {24, 48, 0, 0, 64, 64, 64},    {24, 48, 0, 1, 64, 64, 64},    {24, 48, 1, 0, 64, 64, 64},
};
static const Shape GEMM_SMALL[] = {
    {17, 1, 0, 0, 2048, 256, 256}, {17, 1, 0, 1, 2048, 256, 256}, {4, 1, 0, 0, 2048, 1024, 256},
    {4, 1, 0, 0, 2048, 256, 1024}, {4, 1, 0, 1, 2048, 1024, 256}, {4, 1, 0, 1, 2048, 256, 1024},
    {4, 1, 1, 0, 1024, 256, 2048}, {17, 1, 1, 0, 256, 256, 2048}, {4, 1, 1, 0, 256, 1024, 2048},
    {4, 32, 1, 0, 256, 64, 256},   {8, 32, 0, 0, 256, 64, 256},   {8, 32, 0, 1, 256, 256, 64},
    {4, 32, 1, 0, 64, 256, 256},
};
static const Shape GEMM_LONG[] = {
    {9, 1, 0, 0, 2048, 256, 256},  {9, 1, 0, 1, 2048, 256, 256},  {2, 1, 0, 0, 2048, 1024, 256},
    {2, 1, 0, 0, 2048, 256, 1024}, {2, 1, 0, 1, 2048, 1024, 256}, {2, 1, 0, 1, 2048, 256, 1024},
    {2, 1, 1, 0, 1024, 256, 2048}, {9, 1, 1, 0, 256, 256, 2048},  {2, 1, 1, 0, 256, 1024, 2048},
    {2, 4, 1, 0, 2048, 64, 2048},  {4, 4, 0, 0, 2048, 64, 2048},  {4, 4, 0, 1, 2048, 2048, 64},
    {2, 4, 1, 0, 64, 2048, 2048},
};

typedef struct {
  const char *name;
  const Shape *shapes;
  int n;
} Model;

static const Model MODELS[] = {
    {"gpt2", GEMM_GPT2, sizeof GEMM_GPT2 / sizeof GEMM_GPT2[0]},
    {"small", GEMM_SMALL, sizeof GEMM_SMALL / sizeof GEMM_SMALL[0]},
    {"long", GEMM_LONG, sizeof GEMM_LONG / sizeof GEMM_LONG[0]},
};

/* One product's operands: batch x (A, B, C) and rt_sgemm's result in ref. */
typedef struct {
  Shape s;
  int lda, ldb, ldc;
  int64_t sa, sb, sc;
  float *a, *b, *c, *ref;
} Prod;

/* Start and length of block i of n cut into `parts` blocks of multiples of 16 (blas.c's). */
static inline void gemm_block(int64_t n, int64_t parts, int64_t i, int64_t *start, int64_t *len) {
  int64_t step = (n + parts - 1) / parts;
  step = (step + 15) / 16 * 16;
  *start = i * step < n ? i * step : n;
  *len = *start + step <= n ? step : n - *start;
}

/* The options the product tools share: -r N (rounds), -t N (threads), -m NAME (one model's
 * shapes). Returns 1, having consumed argv[*i] and its value (advancing *i), when argv[*i]
 * is one of them; 0 otherwise. */
static inline int gemm_common_option(int argc, char **argv, int *i, int *rounds, int *threads,
                                     const char **model) {
  if (*i + 1 >= argc) return 0;
  if (!strcmp(argv[*i], "-r"))
    *rounds = atoi(argv[++*i]);
  else if (!strcmp(argv[*i], "-t"))
    *threads = atoi(argv[++*i]);
  else if (!strcmp(argv[*i], "-m"))
    *model = argv[++*i];
  else
    return 0;
  return 1;
}

static inline double gemm_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* n floats in [-0.5, 0.5) from seed; exits when memory runs out. */
static inline float *gemm_fill(int64_t n, uint32_t seed) {
  float *x = malloc(sizeof(float) * (size_t)n);
  if (!x) {
    fprintf(stderr, "gemm: out of memory (%lld floats)\n", (long long)n);
    exit(1);
  }
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
  }
  return x;
}

/* The operands of s, filled, with rt_sgemm's result in ref (on pool's threads). */
static inline Prod gemm_prod_new(Shape s, RtPool *pool) {
  Prod p = {.s = s};
  p.lda = s.ta ? s.m : s.k;
  p.ldb = s.tb ? s.k : s.n;
  p.ldc = s.n;
  p.sa = (int64_t)s.m * s.k, p.sb = (int64_t)s.k * s.n, p.sc = (int64_t)s.m * s.n;
  p.a = gemm_fill(s.batch * p.sa, 1), p.b = gemm_fill(s.batch * p.sb, 2);
  p.c = gemm_fill(s.batch * p.sc, 3), p.ref = gemm_fill(s.batch * p.sc, 4);
  rt_sgemm(pool, s.batch, s.ta, s.tb, s.m, s.n, s.k, p.a, p.lda, p.sa, p.b, p.ldb, p.sb, p.ref,
           p.ldc, p.sc);
  return p;
}

static inline void gemm_prod_free(Prod *p) {
  free(p->a);
  free(p->b);
  free(p->c);
  free(p->ref);
}

/* max |C - ref| / max |ref|: how far a library's result is from rt_sgemm's. */
static inline double gemm_rel_err(const Prod *p) {
  int64_t n = p->s.batch * p->sc;
  double err = 0, top = 0;
  for (int64_t i = 0; i < n; i++) {
    err = fmax(err, fabs((double)p->c[i] - p->ref[i]));
    top = fmax(top, fabs((double)p->ref[i]));
  }
  return top > 0 ? err / top : err;
}

/* COUNT:BATCH:TA:TB:M:N:K, every size positive. */
static inline int gemm_parse_shape(const char *arg, Shape *s) {
  return sscanf(arg, "%d:%d:%d:%d:%d:%d:%d", &s->count, &s->batch, &s->ta, &s->tb, &s->m, &s->n,
                &s->k) == 7 &&
         s->batch > 0 && s->m > 0 && s->n > 0 && s->k > 0;
}

#endif
