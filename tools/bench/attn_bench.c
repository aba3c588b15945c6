/*
 * attn_bench.c: causal attention, forward and backward, the way compiled trainers do it
 * today (unfused) against the runtime's fused kernels (rt_attention, rt_attention_grad in
 * runtime/attention.c), on the pool of the trainer.
 *
 * Unfused is the step's graph as the compiler lowers it: batched rt_sgemm products that
 * store the whole (bn, t, t) scores, and row loops between them. Forward: S = Q K^T; scale,
 * mask and softmax in one loop over the rows, writing P; O = P V. Backward, from the saved P:
 * dP = dO V^T; dV = P^T dO; dS = scale P (dP - rowsum(P dP)); dQ = dS K; dK = dS^T Q. Its row
 * loops are plain C with libm's expf; a compiled trainer runs them as vectorized kernels, so
 * the "products" column (the unfused rt_sgemm calls alone) is the floor of what it can do.
 * Fused recomputes the probabilities in its backward, so compare forward + backward. Printed
 * per shape: unfused, its products, fused (ms), unfused / fused and products / fused.
 *
 * Each round runs the four (unfused and fused, forward and backward) once, in an order that
 * rotates with the round, so a burst of other work on the machine costs all alike; times are
 * medians over the rounds after two warm-up rounds. The fused results are checked against the
 * unfused (max |x - ref| / max |ref| over o, dq, dk, dv).
 *   usage: attn_bench [-r ROUNDS] [-t THREADS] [BN:T:H ...]
 * Without shapes: (32, 256, 64) the small bench model (batch 8 x 4 heads), (4, 2048, 64) the
 * long one, (48, 64, 64) gpt2 at batch 4 x 12 heads, seq 64. Needs only OpenBLAS and the
 * runtime.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/axrt.h"

extern void openblas_set_num_threads(int);

enum { MAXROUNDS = 200, WARMUP = 2 };

typedef struct {
  int64_t bn, t, h;
  float scale;
  RtPool *pool;
  float *q, *k, *v, *dout; /* (bn, t, h) inputs */
  float *p, *dp;           /* unfused: (bn, t, t) probabilities, dP then dS */
  float *o, *grad;         /* unfused: (bn, t, h) and (3, bn, t, h) */
  float *fo, *fgrad;       /* fused: the same */
  double products;         /* unfused: seconds in rt_sgemm during the last call */
} Bench;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ===== unfused ======================================================================== */

/* Rows [lo, hi) of the (bn * t) score rows: scale, causal mask, softmax. */
static void softmax_rows(void *ctx, int64_t lo, int64_t hi) {
  const Bench *b = ctx;
  for (int64_t r = lo; r < hi; r++) {
    float *s = b->p + r * b->t;
    int64_t n = r % b->t + 1;
    float m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++) m = fmaxf(m, s[j] *= b->scale);
    for (int64_t j = 0; j < n; j++) sum += s[j] = expf(s[j] - m);
    for (int64_t j = 0; j < b->t; j++) s[j] = j < n ? s[j] / sum : 0;
  }
}

/* dS = scale P (dP - rowsum(P dP)), over dP. */
static void dscore_rows(void *ctx, int64_t lo, int64_t hi) {
  const Bench *b = ctx;
  for (int64_t r = lo; r < hi; r++) {
    const float *p = b->p + r * b->t;
    float *dp = b->dp + r * b->t, d = 0;
    for (int64_t j = 0; j < b->t; j++) d += p[j] * dp[j];
    for (int64_t j = 0; j < b->t; j++) dp[j] = b->scale * p[j] * (dp[j] - d);
  }
}

static void unfused_forward(Bench *b) {
  int64_t t = b->t, h = b->h, th = t * h, tt = t * t;
  double t0 = now();
  rt_sgemm(b->pool, b->bn, 0, 1, t, t, h, b->q, h, th, b->k, h, th, b->p, t, tt);
  double t1 = now();
  rt_parallel_for(b->pool, b->bn * t, softmax_rows, b);
  double t2 = now();
  rt_sgemm(b->pool, b->bn, 0, 0, t, h, t, b->p, t, tt, b->v, h, th, b->o, h, th);
  b->products = (t1 - t0) + (now() - t2);
}

static void unfused_backward(Bench *b) {
  int64_t t = b->t, h = b->h, th = t * h, tt = t * t, n = b->bn * th;
  float *dq = b->grad, *dk = dq + n, *dv = dq + 2 * n;
  double t0 = now();
  rt_sgemm(b->pool, b->bn, 0, 1, t, t, h, b->dout, h, th, b->v, h, th, b->dp, t, tt);
  rt_sgemm(b->pool, b->bn, 1, 0, t, h, t, b->p, t, tt, b->dout, h, th, dv, h, th);
  double t1 = now();
  rt_parallel_for(b->pool, b->bn * t, dscore_rows, b);
  double t2 = now();
  rt_sgemm(b->pool, b->bn, 0, 0, t, h, t, b->dp, t, tt, b->k, h, th, dq, h, th);
  rt_sgemm(b->pool, b->bn, 1, 0, t, h, t, b->dp, t, tt, b->q, h, th, dk, h, th);
  b->products = (t1 - t0) + (now() - t2);
}

/* ===== fused ========================================================================== */

static void fused_forward(Bench *b) {
  rt_attention(b->pool, b->bn, 1, b->t, b->t, b->h, 1, b->scale, b->q, b->k, b->v, NULL, b->fo);
}

static void fused_backward(Bench *b) {
  rt_attention_grad(b->pool, b->bn, 1, b->t, b->t, b->h, 1, b->scale, b->q, b->k, b->v, b->dout,
                    NULL, b->fgrad);
}

/* ===== timing ========================================================================= */

static float *alloc_floats(int64_t n) {
  float *x = malloc((size_t)n * sizeof(float));
  if (!x) {
    fprintf(stderr, "attn_bench: out of memory (%lld floats)\n", (long long)n);
    exit(1);
  }
  return x;
}

static void fill(float *x, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(seed >> 40) / 16777216.0 * 4 - 2); /* uniform [-2, 2) */
  }
}

static double max_rel(const float *x, const float *ref, int64_t n) {
  double err = 0, big = 0;
  for (int64_t i = 0; i < n; i++) {
    err = fmax(err, fabs((double)x[i] - (double)ref[i]));
    big = fmax(big, fabs((double)ref[i]));
  }
  return big > 0 ? err / big : err;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

enum { UF, FF, UB, FB, NRUN }; /* unfused / fused forward, unfused / fused backward */

static void run(Bench *b, int which) {
  switch (which) {
  case UF: unfused_forward(b); break;
  case FF: fused_forward(b); break;
  case UB: unfused_backward(b); break;
  default: fused_backward(b); break;
  }
}

static const char *shape_name(const Bench *b) {
  static char name[64];
  snprintf(name, sizeof name, "(%lld, %lld, %lld)", (long long)b->bn, (long long)b->t,
           (long long)b->h);
  return name;
}

static void bench_shape(int64_t bn, int64_t t, int64_t h, RtPool *pool, int rounds) {
  Bench b = {.bn = bn, .t = t, .h = h, .scale = (float)(1 / sqrt((double)h)), .pool = pool};
  int64_t n = bn * t * h, nn = bn * t * t;
  b.q = alloc_floats(4 * n), b.k = b.q + n, b.v = b.q + 2 * n, b.dout = b.q + 3 * n;
  b.p = alloc_floats(nn), b.dp = alloc_floats(nn);
  b.o = alloc_floats(4 * n), b.grad = b.o + n;
  b.fo = alloc_floats(4 * n), b.fgrad = b.fo + n;
  fill(b.q, 4 * n, 7);
  static double ms[NRUN][MAXROUNDS], prod[2][MAXROUNDS];
  for (int r = 0; r < rounds + WARMUP; r++) /* UF comes first in round 0: UB reads its P */
    for (int i = 0; i < NRUN; i++) {
      int which = (i + r) % NRUN;
      double t0 = now();
      run(&b, which);
      double dt = now() - t0;
      if (r < WARMUP) continue;
      ms[which][r - WARMUP] = 1e3 * dt;
      if (which == UF || which == UB) prod[which == UB][r - WARMUP] = 1e3 * b.products;
    }
  double err = fmax(max_rel(b.fo, b.o, n), max_rel(b.fgrad, b.grad, n));
  err = fmax(
      err, fmax(max_rel(b.fgrad + n, b.grad + n, n), max_rel(b.fgrad + 2 * n, b.grad + 2 * n, n)));
  double m[NRUN], pr[2] = {median(prod[0], rounds), median(prod[1], rounds)};
  for (int i = 0; i < NRUN; i++) m[i] = median(ms[i], rounds);
  double un[3] = {m[UF], m[UB], m[UF] + m[UB]}, fu[3] = {m[FF], m[FB], m[FF] + m[FB]};
  double pd[3] = {pr[0], pr[1], pr[0] + pr[1]};
  static const char *pass[3] = {"fwd", "bwd", "f+b"};
  for (int i = 0; i < 3; i++)
    printf("%-18s %s %9.2f %9.2f %9.2f %7.2fx %7.2fx\n", i == 0 ? shape_name(&b) : "", pass[i],
           un[i], pd[i], fu[i], un[i] / fu[i], pd[i] / fu[i]);
  printf("%-18s max |fused - unfused| / max |unfused| over o, dq, dk, dv: %.1e\n", "", err);
  free(b.q);
  free(b.p);
  free(b.dp);
  free(b.o);
  free(b.fo);
}

int main(int argc, char **argv) {
  int rounds = 15, threads = 2, a = 1;
  for (; a + 1 < argc && argv[a][0] == '-'; a += 2) {
    if (!strcmp(argv[a], "-r"))
      rounds = atoi(argv[a + 1]);
    else if (!strcmp(argv[a], "-t"))
      threads = atoi(argv[a + 1]);
    else
      break;
  }
  if (rounds < 1 || rounds > MAXROUNDS || threads < 1) {
    fprintf(stderr, "usage: attn_bench [-r ROUNDS (1..%d)] [-t THREADS] [BN:T:H ...]\n", MAXROUNDS);
    return 2;
  }
  openblas_set_num_threads(1); /* as rt_train_main: one thread per item */
  RtError err;
  RtPool *pool;
  if (rt_pool_new(&pool, threads, &err)) {
    fprintf(stderr, "attn_bench: %s\n", err.msg);
    return 1;
  }
  printf("causal attention, %d threads, ms (median of %d rounds)\n", threads, rounds);
  printf("%-18s %s %9s %9s %9s %8s %8s\n", "(bn, t, h)", "   ", "unfused", "products", "fused",
         "ratio", "to prod");
  static const int64_t dflt[][3] = {{32, 256, 64}, {4, 2048, 64}, {48, 64, 64}};
  if (a >= argc)
    for (int s = 0; s < 3; s++) bench_shape(dflt[s][0], dflt[s][1], dflt[s][2], pool, rounds);
  for (; a < argc; a++) {
    long long bn, t, h;
    if (sscanf(argv[a], "%lld:%lld:%lld", &bn, &t, &h) != 3 || bn < 1 || t < 1 || h < 1) {
      fprintf(stderr, "attn_bench: shape '%s', expected BN:T:H\n", argv[a]);
      return 2;
    }
    bench_shape(bn, t, h, pool, rounds);
  }
  rt_pool_free(pool);
  return 0;
}
