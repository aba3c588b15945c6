/*
 * sbgemm_bench.c: the step's matrix products (gemm_bench.h's shapes of gpt2, small and long)
 * with bf16 operands and f32 results, on every candidate for rt_sbgemm, next to the f32
 * product rt_sgemm runs on the same values:
 *   f32     rt_sgemm on f32 operands (what an f32 model runs today)
 *   ref     rt_sbgemm's reference path (widen A and B, then OpenBLAS per batch element)
 *   widen   rt_sbgemm on the runtime's f32 kernels, operands widened as they are packed
 *   dot     rt_sbgemm on the runtime's vdpbf16ps kernel (AVX512_BF16)
 *   dnnl    oneDNN's matmul primitive, bf16 x bf16 -> f32, the whole batch in one call, with
 *           as many OpenMP threads as the pool; the primitive made once per shape
 *   xsmm    libxsmm's bf16 JIT kernels (libxsmm_bsmmdispatch) on tiles of C, items on the
 *           pool as rt_sgemm cuts them; B first copied into libxsmm's VNNI layout (pairs
 *           along k) and A, when stored (k, m), transposed, inside the timed call. Even K only.
 *   openblas cblas_sbgemm, where the OpenBLAS linked has it (found at run time)
 * Each round times every shape once with each (in turn), a time being the mean over enough
 * calls to take about 30 ms; the table keeps each one's best round. Every result is compared
 * with the reference path's (max |C - ref| / max |ref|), so a wrong call cannot look fast. The
 * step total weighs each shape by how often a step runs it.
 *   usage: sbgemm_bench [-r ROUNDS] [-t THREADS] [-m gpt2|small|long] [SHAPE...]
 * with SHAPE as COUNT:BATCH:TA:TB:M:N:K. The shares of the arithmetic ceilings are those of
 * fma_peak and bf16_peak with the same thread count (docs/bench.md, "bf16 products").
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <libxsmm.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include "runtime/rt_impl.h"
#include "tools/bench/gemm_bench.h"

extern void openblas_set_num_threads(int);

/* OpenBLAS's cblas_sbgemm (row-major order 101, no-transpose 111, transpose 112), where built. */
typedef void (*SbgemmFn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                         const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta,
                         float *c, int ldc);

enum { F32, REF, WIDEN, DOT, DNNL, XSMM, OPENBLAS, NKINDS, MAXROUNDS = 50, XT = 64, XK = 256 };
static const char *const NAMES[NKINDS] = {"f32", "ref", "widen", "dot", "dnnl", "xsmm", "openblas"};

typedef struct {
  RtPool *pool;
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  SbgemmFn openblas;
} Ctx;

/* One product's operands: f32 and bf16 copies of the same values, and C. */
typedef struct {
  Shape s;
  int64_t lda, ldb, sa, sb, sc;
  float *af, *bf, *c;
  uint16_t *a, *b;
  uint16_t *bv, *at;     /* libxsmm's copies: B in VNNI pairs, A transposed */
  dnnl_primitive_t prim; /* oneDNN's matmul for the shape, made on the first call */
  dnnl_memory_t mem[3];
} Op;

static void dnnl_check(dnnl_status_t st, const char *what) {
  if (st != dnnl_success) {
    fprintf(stderr, "sbgemm_bench: oneDNN %s: status %d\n", what, (int)st);
    exit(1);
  }
}

static dnnl_memory_desc_t dnnl_md(int64_t batch, int64_t rows, int64_t cols, int t,
                                  dnnl_data_type_t dt) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {batch, rows, cols};
  dnnl_dims_t strides = {rows * cols, t ? 1 : cols, t ? rows : 1};
  dnnl_check(dnnl_memory_desc_init_by_strides(&md, 3, dims, dt, strides), "memory desc");
  return md;
}

/* The matmul primitive and its memories, made once per shape as a user would keep them. */
static void dnnl_make(const Ctx *x, Op *p) {
  const Shape *s = &p->s;
  dnnl_memory_desc_t a = dnnl_md(s->batch, s->m, s->k, s->ta, dnnl_bf16);
  dnnl_memory_desc_t b = dnnl_md(s->batch, s->k, s->n, s->tb, dnnl_bf16);
  dnnl_memory_desc_t c = dnnl_md(s->batch, s->m, s->n, 0, dnnl_f32);
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd;
  dnnl_check(dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c), "matmul desc");
  dnnl_check(dnnl_primitive_desc_create(&pd, &desc, NULL, x->engine, NULL), "matmul pd");
  dnnl_check(dnnl_primitive_create(&p->prim, pd), "matmul");
  dnnl_primitive_desc_destroy(pd);
  dnnl_check(dnnl_memory_create(&p->mem[0], &a, x->engine, p->a), "memory");
  dnnl_check(dnnl_memory_create(&p->mem[1], &b, x->engine, p->b), "memory");
  dnnl_check(dnnl_memory_create(&p->mem[2], &c, x->engine, p->c), "memory");
}

static void run_dnnl(const Ctx *x, Op *p) {
  omp_set_num_threads(rt_pool_threads(x->pool));
  if (!p->prim) dnnl_make(x, p);
  dnnl_exec_arg_t args[] = {
      {DNNL_ARG_SRC, p->mem[0]}, {DNNL_ARG_WEIGHTS, p->mem[1]}, {DNNL_ARG_DST, p->mem[2]}};
  dnnl_check(dnnl_primitive_execute(p->prim, x->stream, 3, args), "matmul execute");
  dnnl_check(dnnl_stream_wait(x->stream), "stream wait");
}

/* ===== libxsmm: column-major, so row-major C = op(A) op(B) is C^T = op(B)^T op(A)^T: op(B)^T
 * (n, k) in VNNI pairs is its first operand, op(A)^T, column-major (k, m), its second ===== */

typedef struct {
  Op *p;
  int64_t split_m, split_n;
} XsmmCut;

/* Batch element e: op(B) into bv[(kk / 2) * 2n + 2j + kk % 2]; op(A) stored (k, m) into at
 * (m, k) row-major, which is op(A)^T column-major with leading dimension k. */
static void xsmm_prepare_items(void *ctx, int64_t lo, int64_t hi) {
  Op *p = ((XsmmCut *)ctx)->p;
  const Shape *s = &p->s;
  for (int64_t e = lo; e < hi; e++) {
    const uint16_t *b = p->b + e * p->sb, *a = p->a + e * p->sa;
    uint16_t *bv = p->bv + e * p->sb, *at = p->at + e * p->sa;
    for (int64_t kk = 0; kk < s->k; kk++)
      for (int64_t j = 0; j < s->n; j++)
        bv[kk / 2 * 2 * s->n + 2 * j + kk % 2] = s->tb ? b[j * p->ldb + kk] : b[kk * p->ldb + j];
    for (int64_t kk = 0; kk < s->k && s->ta; kk++)
      for (int64_t i = 0; i < s->m; i++) at[i * s->k + kk] = a[kk * p->lda + i];
  }
}

static void xsmm_items(void *ctx, int64_t lo, int64_t hi) {
  const XsmmCut *g = ctx;
  Op *p = g->p;
  const Shape *s = &p->s;
  float one = 1.0f;
  for (int64_t it = lo; it < hi; it++) {
    int64_t per = g->split_m * g->split_n, e = it / per, r = it % per, m0, ml, n0, nl;
    gemm_block(s->m, g->split_m, r / g->split_n, &m0, &ml);
    gemm_block(s->n, g->split_n, r % g->split_n, &n0, &nl);
    const uint16_t *a = s->ta ? p->at + e * p->sa : p->a + e * p->sa, *bv = p->bv + e * p->sb;
    float *c = p->c + e * p->sc;
    for (int64_t i0 = m0; i0 < m0 + ml; i0 += XT)
      for (int64_t j0 = n0; j0 < n0 + nl; j0 += XT)
        for (int64_t k0 = 0; k0 < s->k; k0 += XK) {
          libxsmm_blasint mt = m0 + ml - i0 < XT ? m0 + ml - i0 : XT;
          libxsmm_blasint nt = n0 + nl - j0 < XT ? n0 + nl - j0 : XT;
          libxsmm_blasint kc = s->k - k0 < XK ? s->k - k0 : XK, la = s->n, lb = s->k, lc = s->n;
          float beta = k0 ? 1.0f : 0.0f;
          int flags = LIBXSMM_GEMM_FLAG_VNNI_A | (k0 ? 0 : LIBXSMM_GEMM_FLAG_BETA_0);
          libxsmm_bsmmfunction f =
              libxsmm_bsmmdispatch(nt, mt, kc, &la, &lb, &lc, &one, &beta, &flags, NULL);
          if (!f) {
            fprintf(stderr, "sbgemm_bench: libxsmm has no bf16 kernel for %d x %d x %d\n", (int)nt,
                    (int)mt, (int)kc);
            exit(1);
          }
          f((const libxsmm_bfloat16 *)(bv + k0 * s->n + 2 * j0),
            (const libxsmm_bfloat16 *)(a + i0 * s->k + k0), c + i0 * s->n + j0);
        }
  }
}

static int64_t parts(int64_t n) {
  int64_t p = n / 128;
  return p < 1 ? 1 : p > 16 ? 16 : p;
}

static void run_xsmm(const Ctx *x, Op *p) {
  XsmmCut g = {p, 1, 1};
  rt_parallel_for(x->pool, p->s.batch, xsmm_prepare_items, &g);
  if (p->s.batch < 4) {
    if (p->s.m >= p->s.n)
      g.split_m = parts(p->s.m);
    else
      g.split_n = parts(p->s.n);
  }
  rt_parallel_for(x->pool, p->s.batch * g.split_m * g.split_n, xsmm_items, &g);
}

/* ===== timing ===== */

static int has(const Ctx *x, int kind, const Shape *s) {
  if (kind == DOT) return rt_sbgemm_dot_available();
  if (kind == WIDEN) return rt_sgemm_own_available();
  if (kind == XSMM) return s->k % 2 == 0;
  if (kind == OPENBLAS) return x->openblas != NULL;
  return 1;
}

static void run_once(const Ctx *x, int kind, Op *p) {
  const Shape *s = &p->s;
  switch (kind) {
  case F32:
    rt_sgemm(x->pool, s->batch, s->ta, s->tb, s->m, s->n, s->k, p->af, p->lda, p->sa, p->bf, p->ldb,
             p->sb, p->c, s->n, p->sc);
    return;
  case DNNL: run_dnnl(x, p); return;
  case XSMM: run_xsmm(x, p); return;
  case OPENBLAS:
    openblas_set_num_threads(rt_pool_threads(x->pool));
    for (int e = 0; e < s->batch; e++)
      x->openblas(101, s->ta ? 112 : 111, s->tb ? 112 : 111, s->m, s->n, s->k, 1.0f,
                  p->a + e * p->sa, (int)p->lda, p->b + e * p->sb, (int)p->ldb, 0.0f,
                  p->c + e * p->sc, s->n);
    openblas_set_num_threads(1);
    return;
  default:
    rt_sbgemm_path(kind == REF ? RT_SBGEMM_REF : kind == WIDEN ? RT_SBGEMM_WIDEN : RT_SBGEMM_DOT);
    rt_sbgemm(x->pool, s->batch, s->ta, s->tb, s->m, s->n, s->k, p->a, p->lda, p->sa, p->b, p->ldb,
              p->sb, p->c, 0, s->n, p->sc);
  }
}

/* Mean seconds of one product over enough calls to take about 30 ms (at 200 GFLOP/s), after a
 * pause and one call: another kind's idle threads (the pool's, OpenMP's) may still spin. */
static double time_one(const Ctx *x, int kind, Op *p) {
  nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
  run_once(x, kind, p);
  int reps = (int)(6e9 / (2.0 * p->s.batch * p->s.m * p->s.n * p->s.k)) + 1;
  double t0 = gemm_now();
  for (int r = 0; r < reps; r++) run_once(x, kind, p);
  return (gemm_now() - t0) / reps;
}

static Op op_new(Shape s) {
  Op p = {.s = s};
  p.lda = s.ta ? s.m : s.k, p.ldb = s.tb ? s.k : s.n;
  p.sa = (int64_t)s.m * s.k, p.sb = (int64_t)s.k * s.n, p.sc = (int64_t)s.m * s.n;
  p.af = gemm_fill(s.batch * p.sa, 1), p.bf = gemm_fill(s.batch * p.sb, 2);
  p.c = gemm_fill(s.batch * p.sc, 3);
  p.a = malloc(sizeof *p.a * (size_t)(s.batch * p.sa));
  p.b = malloc(sizeof *p.b * (size_t)(s.batch * p.sb));
  p.at = malloc(sizeof *p.at * (size_t)(s.batch * p.sa));
  p.bv = malloc(sizeof *p.bv * (size_t)(s.batch * (p.sb + s.n)));
  p.prim = NULL;
  if (!p.a || !p.b || !p.at || !p.bv) {
    fprintf(stderr, "sbgemm_bench: out of memory\n");
    exit(1);
  }
  /* the f32 copies hold the bf16 values, so every kind computes the same product */
  for (int64_t i = 0; i < s.batch * p.sa; i++)
    p.a[i] = rt_bf16_from_f32(p.af[i]), p.af[i] = rt_bf16_to_f32(p.a[i]);
  for (int64_t i = 0; i < s.batch * p.sb; i++)
    p.b[i] = rt_bf16_from_f32(p.bf[i]), p.bf[i] = rt_bf16_to_f32(p.b[i]);
  return p;
}

static void op_free(Op *p) {
  if (p->prim) {
    dnnl_primitive_destroy(p->prim);
    for (int i = 0; i < 3; i++) dnnl_memory_destroy(p->mem[i]);
  }
  free(p->af), free(p->bf), free(p->c), free(p->a), free(p->b), free(p->at), free(p->bv);
}

static double rel_err(const Op *p, const float *ref) {
  double err = 0, top = 0;
  for (int64_t i = 0; i < p->s.batch * p->sc; i++) {
    err = fmax(err, fabs((double)p->c[i] - ref[i]));
    top = fmax(top, fabs((double)ref[i]));
  }
  return top > 0 ? err / top : err;
}

static void bench_model(const Ctx *x, const Model *md, int rounds) {
  double total[NKINDS] = {0}, flops = 0;
  printf("\n### %s\n\n| count | batch ta tb M N K |", md->name);
  for (int k = 0; k < NKINDS; k++) printf(" %s |", NAMES[k]);
  printf(" max rel err |\n|---:|---|");
  for (int k = 0; k <= NKINDS; k++) printf("---:|");
  printf("\n");
  for (int si = 0; si < md->n; si++) {
    Shape s = md->shapes[si];
    Op p = op_new(s);
    double best[NKINDS], worst = 0, flop = 2.0 * s.batch * s.m * s.n * s.k, err[NKINDS];
    float *ref = gemm_fill(s.batch * p.sc, 4);
    run_once(x, REF, &p);
    memcpy(ref, p.c, sizeof *ref * (size_t)(s.batch * p.sc));
    for (int k = 0; k < NKINDS; k++) {
      best[k] = err[k] = -1;
      if (!has(x, k, &s)) continue;
      memset(p.c, 0x7f, sizeof *p.c * (size_t)(s.batch * p.sc));
      run_once(x, k, &p); /* the warmup, checked */
      err[k] = rel_err(&p, ref);
      worst = fmax(worst, err[k]);
      best[k] = 1e30;
    }
    for (int r = 0; r < rounds; r++)
      for (int k = 0; k < NKINDS; k++)
        if (best[k] > 0) best[k] = fmin(best[k], time_one(x, k, &p));
    printf("| %d | %d %d %d %d %d %d |", s.count, s.batch, s.ta, s.tb, s.m, s.n, s.k);
    for (int k = 0; k < NKINDS; k++) {
      if (best[k] < 0) {
        printf(" - |");
        total[k] = -1e30; /* a kind missing a shape has no step total */
        continue;
      }
      total[k] += s.count * best[k];
      printf(" %.1f%s |", flop / best[k] / 1e9, err[k] > 1e-4 ? " WRONG" : "");
    }
    printf(" %.1e |\n", worst);
    fflush(stdout);
    flops += s.count * flop;
    free(ref);
    op_free(&p);
  }
  printf("| | **step: ms (GFLOP/s)** |");
  for (int k = 0; k < NKINDS; k++)
    if (total[k] <= 0)
      printf(" - |");
    else
      printf(" **%.1f** (%.0f) |", total[k] * 1e3, flops / total[k] / 1e9);
  printf(" |\n");
}

int main(int argc, char **argv) {
  int rounds = 3, threads = 2, nshapes = 0;
  const char *only = NULL;
  Shape *shapes = calloc((size_t)argc, sizeof *shapes);
  for (int i = 1; i < argc; i++) {
    if (gemm_common_option(argc, argv, &i, &rounds, &threads, &only)) continue;
    if (!gemm_parse_shape(argv[i], &shapes[nshapes++])) {
      fprintf(stderr, "usage: sbgemm_bench [-r ROUNDS] [-t THREADS] [-m gpt2|small|long] "
                      "[COUNT:BATCH:TA:TB:M:N:K ...]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > MAXROUNDS || threads < 1) {
    fprintf(stderr, "sbgemm_bench: -r takes 1 to %d rounds, -t at least 1 thread\n", MAXROUNDS);
    return 2;
  }
  openblas_set_num_threads(1); /* as rt_train_main */
  Ctx x = {.openblas = (SbgemmFn)(uintptr_t)dlsym(RTLD_DEFAULT, "cblas_sbgemm")};
  RtError err;
  if (rt_pool_new(&x.pool, threads, &err)) {
    fprintf(stderr, "sbgemm_bench: %s\n", err.msg);
    return 1;
  }
  dnnl_check(dnnl_engine_create(&x.engine, dnnl_cpu, 0), "engine");
  dnnl_check(dnnl_stream_create(&x.stream, x.engine, dnnl_stream_default_flags), "stream");
  libxsmm_init();
  const dnnl_version_t *v = dnnl_version();
  printf("%d threads, best of %d rounds, GFLOP/s. oneDNN %d.%d.%d, libxsmm %s, OpenBLAS "
         "cblas_sbgemm: %s; vdpbf16ps kernel: %s\n",
         threads, rounds, v->major, v->minor, v->patch, LIBXSMM_VERSION,
         x.openblas ? "yes" : "absent from this build", rt_sbgemm_dot_available() ? "yes" : "no");
  if (nshapes) {
    Model cli = {"command line", shapes, nshapes};
    bench_model(&x, &cli, rounds);
  }
  for (size_t i = 0; !nshapes && i < sizeof MODELS / sizeof MODELS[0]; i++)
    if (!only || !strcmp(only, MODELS[i].name)) bench_model(&x, &MODELS[i], rounds);
  libxsmm_finalize();
  dnnl_stream_destroy(x.stream);
  dnnl_engine_destroy(x.engine);
  rt_pool_free(x.pool);
  free(shapes);
  return 0;
}
