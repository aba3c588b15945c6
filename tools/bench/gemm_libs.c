/*
 * gemm_libs.c: the matrix products a training step runs, timed with OpenBLAS, BLIS, oneDNN
 * and libxsmm, to see whether another library would make rt_sgemm faster.
 *
 * Each product (batch, ta, tb, M, N, K) is row-major C = op(A) op(B) with natural leading
 * dimensions and batch strides, as the generated trainers call rt_sgemm. Two modes:
 *   rt   the runtime's cut (runtime/blas.c: one item per batch element when batch >= 4, else
 *        the larger side in blocks), items run on the runtime's own pool (-t, 2 threads), each
 *        item one single-threaded library call. OpenBLAS runs rt_sgemm itself; the others run
 *        a copy of its cut (block/parts below) with the per-item call swapped.
 *   lib  the whole product (each batch element in turn) handed to the library, which uses
 *        as many threads of its own. libxsmm's core library has no threaded GEMM: none.
 *        dnnl-mm is oneDNN's matmul primitive, which takes the whole batch at once: lib only.
 * A library's result is compared with OpenBLAS's rt_sgemm (max |C - ref| / max |ref|), so a
 * wrong call cannot look fast. The per-model totals weigh each shape by how often one
 * training step runs it (the `call void @rt_sgemm` of axlc_step in `--emit llvm`, see
 * tools/bench/gemm_shapes.awk).
 *   usage: gemm_libs [-r REPS] [-s SECS] [-t THREADS] [-m gpt2|small|long] [SHAPE...]
 * with SHAPE as COUNT:BATCH:TA:TB:M:N:K; without one, the shapes of the three models below.
 * Every shape runs at least REPS (5) rounds, and more while it has taken less than SECS (3).
 */
/* OpenBLAS's cblas.h first: blis.h holds a copy of CBLAS under the same include guard, without
 * OpenBLAS's own calls (openblas_set_num_threads). */
#include <cblas.h>

#include <blis.h>
#include <libxsmm.h>
#include <math.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/axrt.h"
#include "tools/bench/gemm_bench.h"

/* What the runs share: the runtime's pool (its thread count is every mode's) and oneDNN's
 * CPU engine and stream for the matmul primitive. */
typedef struct {
  RtPool *pool;
  dnnl_engine_t engine;
  dnnl_stream_t stream;
} Ctx;

/* ===== the libraries: one single-threaded call for an item, one threaded call for all ===== */

/* C (m, n) = op(A) op(B), one thread; A, B, C point at the item's corner. */
typedef void (*BlockFn)(int ta, int tb, int m, int n, int k, const float *a, int lda,
                        const float *b, int ldb, float *c, int ldc);

static void openblas_block(int ta, int tb, int m, int n, int k, const float *a, int lda,
                           const float *b, int ldb, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

/* BLIS's typed API takes a row and a column stride per matrix: row-major is (ld, 1). */
static void blis_call(int threads, int ta, int tb, int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float *c, int ldc) {
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(threads, &rntm);
  float one = 1.0f, zero = 0.0f;
  bli_sgemm_ex(ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m,
               n, k, &one, (float *)a, lda, 1, (float *)b, ldb, 1, &zero, c, ldc, 1, NULL, &rntm);
}

static void blis_block(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                       int ldb, float *c, int ldc) {
  blis_call(1, ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
}

/* oneDNN's sgemm is row-major; it takes its thread count from OpenMP, per calling thread. */
static void dnnl_call(int threads, int ta, int tb, int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float *c, int ldc) {
  omp_set_num_threads(threads);
  if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc) !=
      dnnl_success) {
    fprintf(stderr, "gemm_libs: dnnl_sgemm failed\n");
    exit(1);
  }
}

static void dnnl_block(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                       int ldb, float *c, int ldc) {
  dnnl_call(1, ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
}

/* libxsmm is column-major: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so
 * B is libxsmm's first operand and A its second. Its JIT kernels do not pack: the item is cut
 * into XT x XT tiles of C and XK-deep slices of K (beta 0 on the first slice, 1 after). libxsmm
 * 1.17 has no kernel for a transposed first operand, so with tb the slice of B is transposed
 * into a buffer first (once per column of tiles). */
enum { XT = 64, XK = 256 };

static libxsmm_smmfunction xsmm_kernel(int m, int n, int k, int lda, int ldb, int ldc, int transb,
                                       int first) {
  float one = 1.0f, beta = first ? 0.0f : 1.0f;
  int flags = (transb ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) | (first ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
  libxsmm_blasint la = lda, lb = ldb, lc = ldc;
  libxsmm_smmfunction f = libxsmm_smmdispatch(m, n, k, &la, &lb, &lc, &one, &beta, &flags, NULL);
  if (!f) {
    fprintf(stderr, "gemm_libs: libxsmm has no kernel for %d x %d x %d\n", m, n, k);
    exit(1);
  }
  return f;
}

/* Tiles of one XK slice of K: C[:, n0:n0+nt] (+)= op(A)[:, k0:k0+kc] . Bt, where Bt is the
 * slice of op(B)^T in column-major (nt, kc) with leading dimension ldbt. */
static void xsmm_slice(int ta, int m, int nt, int kc, int k0, const float *a, int lda,
                       const float *bt, int ldbt, float *c, int ldc) {
  for (int m0 = 0; m0 < m; m0 += XT) {
    int mt = m - m0 < XT ? m - m0 : XT;
    const float *as = ta ? a + (int64_t)k0 * lda + m0 : a + (int64_t)m0 * lda + k0;
    libxsmm_smmfunction f = xsmm_kernel(nt, mt, kc, ldbt, lda, ldc, ta, k0 == 0);
    f(bt, as, c + (int64_t)m0 * ldc);
  }
}

static void xsmm_block(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                       int ldb, float *c, int ldc) {
  float buf[XT * XK];
  for (int n0 = 0; n0 < n; n0 += XT) {
    int nt = n - n0 < XT ? n - n0 : XT;
    for (int k0 = 0; k0 < k; k0 += XK) {
      int kc = k - k0 < XK ? k - k0 : XK;
      if (!tb) {
        xsmm_slice(ta, m, nt, kc, k0, a, lda, b + (int64_t)k0 * ldb + n0, ldb, c + n0, ldc);
        continue;
      }
      for (int p = 0; p < kc; p++) /* B stored (n, k): buf (nt, kc) column-major */
        for (int i = 0; i < nt; i++) buf[i + p * nt] = b[(int64_t)(n0 + i) * ldb + k0 + p];
      xsmm_slice(ta, m, nt, kc, k0, a, lda, buf, nt, c + n0, ldc);
    }
  }
}

typedef struct {
  const char *name;
  BlockFn block;
  /* The whole product with the library's own threads; NULL: none. */
  void (*whole)(const Ctx *x, const Prod *p);
} Lib; /* block or whole may be NULL: no such mode */

static void openblas_whole(const Ctx *x, const Prod *p) {
  int threads = rt_pool_threads(x->pool);
  openblas_set_num_threads(threads);
  for (int i = 0; i < p->s.batch; i++)
    openblas_block(p->s.ta, p->s.tb, p->s.m, p->s.n, p->s.k, p->a + i * p->sa, p->lda,
                   p->b + i * p->sb, p->ldb, p->c + i * p->sc, p->ldc);
}

static void blis_whole(const Ctx *x, const Prod *p) {
  int threads = rt_pool_threads(x->pool);
  for (int i = 0; i < p->s.batch; i++)
    blis_call(threads, p->s.ta, p->s.tb, p->s.m, p->s.n, p->s.k, p->a + i * p->sa, p->lda,
              p->b + i * p->sb, p->ldb, p->c + i * p->sc, p->ldc);
}

static void dnnl_whole(const Ctx *x, const Prod *p) {
  int threads = rt_pool_threads(x->pool);
  for (int i = 0; i < p->s.batch; i++)
    dnnl_call(threads, p->s.ta, p->s.tb, p->s.m, p->s.n, p->s.k, p->a + i * p->sa, p->lda,
              p->b + i * p->sb, p->ldb, p->c + i * p->sc, p->ldc);
}

static void dnnl_check(dnnl_status_t st, const char *what) {
  if (st != dnnl_success) {
    fprintf(stderr, "gemm_libs: oneDNN %s: status %d\n", what, (int)st);
    exit(1);
  }
}

/* (batch, rows, cols) stored row-major, or its transpose stored when t: strides in elements. */
static dnnl_memory_desc_t dnnl_md(int64_t batch, int64_t rows, int64_t cols, int t) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {batch, rows, cols};
  dnnl_dims_t strides = {rows * cols, t ? 1 : cols, t ? rows : 1};
  dnnl_check(dnnl_memory_desc_init_by_strides(&md, 3, dims, dnnl_f32, strides), "memory desc");
  return md;
}

/* The matmul primitive takes the whole batch in one call. Made on every call, as a user without
 * a cache of its own would: oneDNN's primitive cache makes that a lookup after the first. */
static void dnnl_matmul_whole(const Ctx *x, const Prod *p) {
  const Shape *s = &p->s;
  omp_set_num_threads(rt_pool_threads(x->pool));
  dnnl_memory_desc_t a = dnnl_md(s->batch, s->m, s->k, s->ta);
  dnnl_memory_desc_t b = dnnl_md(s->batch, s->k, s->n, s->tb);
  dnnl_memory_desc_t c = dnnl_md(s->batch, s->m, s->n, 0);
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t prim;
  dnnl_check(dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c), "matmul desc");
  dnnl_check(dnnl_primitive_desc_create(&pd, &desc, NULL, x->engine, NULL), "matmul pd");
  dnnl_check(dnnl_primitive_create(&prim, pd), "matmul");
  dnnl_memory_t ma, mb, mc;
  dnnl_check(dnnl_memory_create(&ma, &a, x->engine, p->a), "memory");
  dnnl_check(dnnl_memory_create(&mb, &b, x->engine, p->b), "memory");
  dnnl_check(dnnl_memory_create(&mc, &c, x->engine, p->c), "memory");
  dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  dnnl_check(dnnl_primitive_execute(prim, x->stream, 3, args), "matmul execute");
  dnnl_check(dnnl_stream_wait(x->stream), "stream wait");
  dnnl_memory_destroy(ma);
  dnnl_memory_destroy(mb);
  dnnl_memory_destroy(mc);
  dnnl_primitive_destroy(prim);
  dnnl_primitive_desc_destroy(pd);
}

static const Lib LIBS[] = {
    {"openblas", openblas_block, openblas_whole},
    {"blis", blis_block, blis_whole},
    {"dnnl", dnnl_block, dnnl_whole},
    {"xsmm", xsmm_block, NULL},
    {"dnnl-mm", NULL, dnnl_matmul_whole},
};
enum { NLIBS = sizeof LIBS / sizeof LIBS[0] };

/* ===== the runtime's cut: a copy of block() and parts() of runtime/blas.c ===== */

/* Start and length of block i of n cut into `parts` blocks of multiples of 16. */
/* Blocks of at least 128 along the larger side, at most 16. */
static int64_t parts(int64_t n) {
  int64_t p = n / 128;
  return p < 1 ? 1 : p > 16 ? 16 : p;
}

typedef struct {
  const Prod *p;
  BlockFn fn;
  int64_t split_m, split_n;
} Cut;

static void cut_items(void *ctx, int64_t lo, int64_t hi) {
  const Cut *g = ctx;
  const Prod *p = g->p;
  for (int64_t it = lo; it < hi; it++) {
    int64_t per = g->split_m * g->split_n, b = it / per, r = it % per;
    int64_t m0, mlen, n0, nlen;
    gemm_block(p->s.m, g->split_m, r / g->split_n, &m0, &mlen);
    gemm_block(p->s.n, g->split_n, r % g->split_n, &n0, &nlen);
    if (mlen <= 0 || nlen <= 0) continue;
    const float *a = p->a + b * p->sa + (p->s.ta ? m0 : m0 * p->lda);
    const float *bb = p->b + b * p->sb + (p->s.tb ? n0 * p->ldb : n0);
    float *c = p->c + b * p->sc + m0 * p->ldc + n0;
    g->fn(p->s.ta, p->s.tb, (int)mlen, (int)nlen, p->s.k, a, p->lda, bb, p->ldb, c, p->ldc);
  }
}

static void cut_run(RtPool *pool, const Prod *p, BlockFn fn) {
  Cut g = {p, fn, 1, 1};
  if (p->s.batch < 4) {
    if (p->s.m >= p->s.n)
      g.split_m = parts(p->s.m);
    else
      g.split_n = parts(p->s.n);
  }
  rt_parallel_for(pool, p->s.batch * g.split_m * g.split_n, cut_items, &g);
}

/* ===== timing ===== */

static void rt_openblas(RtPool *pool, const Prod *p) {
  rt_sgemm(pool, p->s.batch, p->s.ta, p->s.tb, p->s.m, p->s.n, p->s.k, p->a, p->lda, p->sa, p->b,
           p->ldb, p->sb, p->c, p->ldc, p->sc);
}

static int has_mode(int l, int rt) { return rt ? LIBS[l].block != NULL : LIBS[l].whole != NULL; }

/* One run of library l in mode rt (1) or lib (0). */
static void run_once(const Ctx *x, int l, int rt, const Prod *p) {
  if (rt && l == 0)
    rt_openblas(x->pool, p);
  else if (rt)
    cut_run(x->pool, p, LIBS[l].block);
  else
    LIBS[l].whole(x, p);
}

/* max |C - ref| / max |ref| over the whole batch. */
/* One timed run, after a pause: another library's idle threads may still spin for a while
 * after its last call. */
static double time_once(const Ctx *x, int l, int rt, Prod *p) {
  nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
  openblas_set_num_threads(rt ? 1 : rt_pool_threads(x->pool));
  double t0 = gemm_now();
  run_once(x, l, rt, p);
  return gemm_now() - t0;
}

typedef struct {
  int reps;    /* at least this many rounds */
  double secs; /* and more, up to 100, while a shape has taken less than this */
} Opts;

/* best[l][rt]: seconds of the best run of every library and mode, after one warmup each; one
 * round runs each of them once, so that a burst of other work on the machine costs all alike.
 * err[l][rt]: the warmup's error. -1 where a library has no such mode. Returns the rounds. */
static int time_all(const Ctx *x, Prod *p, const Opts *o, double best[][2], double err[][2]) {
  double t0 = gemm_now();
  for (int l = 0; l < NLIBS; l++)
    for (int rt = 0; rt < 2; rt++) {
      best[l][rt] = err[l][rt] = -1;
      if (!has_mode(l, rt)) continue;
      memset(p->c, 0x7f, sizeof(float) * p->s.batch * p->sc); /* 3.4e38 where not written */
      time_once(x, l, rt, p);
      err[l][rt] = gemm_rel_err(p);
      best[l][rt] = 1e30;
    }
  int r = 0;
  for (; r < o->reps || (r < 100 && gemm_now() - t0 < o->secs); r++)
    for (int l = 0; l < NLIBS; l++)
      for (int rt = 0; rt < 2; rt++) {
        if (best[l][rt] < 0) continue;
        double t = time_once(x, l, rt, p);
        best[l][rt] = t < best[l][rt] ? t : best[l][rt];
      }
  return r;
}

/* ===== products, tables ===== */

/* gemm_prod_new, with a check that the copy of the cut gives rt_sgemm's bits. */
static Prod prod_new(RtPool *pool, Shape s) {
  openblas_set_num_threads(1);
  Prod p = gemm_prod_new(s, pool);
  cut_run(pool, &p, openblas_block);
  if (memcmp(p.c, p.ref, sizeof(float) * s.batch * p.sc)) {
    fprintf(stderr, "gemm_libs: the copy of runtime/blas.c's cut differs from rt_sgemm\n");
    exit(1);
  }
  return p;
}

/* Times one model's shapes; prints a markdown table of GFLOP/s and the weighted step total. */
static void bench_model(const Ctx *x, const Model *m, const Opts *o) {
  double total[NLIBS][2] = {{0}};
  printf("\n### %s\n\n| count | batch ta tb M N K |", m->name);
  for (int l = 0; l < NLIBS; l++) printf(" %s rt | %s lib |", LIBS[l].name, LIBS[l].name);
  printf(" max rel err | rounds |\n|---:|---|");
  for (int l = 0; l < 2 * NLIBS + 2; l++) printf("---:|");
  printf("\n");
  for (int i = 0; i < m->n; i++) {
    Shape s = m->shapes[i];
    Prod p = prod_new(x->pool, s);
    double flop = 2.0 * s.batch * s.m * s.n * s.k, worst = 0, best[NLIBS][2], err[NLIBS][2];
    int rounds = time_all(x, &p, o, best, err);
    printf("| %d | %d %d %d %d %d %d |", s.count, s.batch, s.ta, s.tb, s.m, s.n, s.k);
    for (int l = 0; l < NLIBS; l++)
      for (int rt = 1; rt >= 0; rt--) {
        if (best[l][rt] < 0) {
          printf(" - |");
          continue;
        }
        worst = err[l][rt] > worst ? err[l][rt] : worst;
        total[l][rt] += s.count * best[l][rt];
        printf(" %.1f%s |", flop / best[l][rt] / 1e9, err[l][rt] > 1e-4 ? " WRONG" : "");
      }
    printf(" %.1e | %d |\n", worst, rounds);
    gemm_prod_free(&p);
  }
  printf("| | **step total, ms** |");
  for (int l = 0; l < NLIBS; l++)
    for (int rt = 1; rt >= 0; rt--)
      if (!has_mode(l, rt))
        printf(" - |");
      else
        printf(" **%.1f** |", total[l][rt] * 1e3);
  printf(" | |\n");
  fflush(stdout);
}

static void versions(void) {
  const dnnl_version_t *v = dnnl_version();
  printf("OpenBLAS: %s\nBLIS: %s\noneDNN: %d.%d.%d\nlibxsmm: %s\n", openblas_get_config(),
         bli_info_get_version_str(), v->major, v->minor, v->patch, LIBXSMM_VERSION);
}

int main(int argc, char **argv) {
  /* this tool studies OpenBLAS's items: rt_sgemm must not take its own product (sgemm_own
   * measures that one), so that the copies of its cut here give rt_sgemm's bits */
  setenv("AXLC_SGEMM", "openblas", 1);
  Opts o = {5, 3.0};
  int nshapes = 0, threads = 2;
  const char *only = NULL;
  Shape *shapes = calloc((size_t)argc, sizeof(Shape));
  for (int i = 1; i < argc; i++) {
    if (gemm_common_option(argc, argv, &i, &o.reps, &threads, &only)) continue;
    if (!strcmp(argv[i], "-s") && i + 1 < argc)
      o.secs = atof(argv[++i]);
    else if (!gemm_parse_shape(argv[i], &shapes[nshapes++])) {
      fprintf(stderr, "usage: gemm_libs [-r REPS] [-s SECS] [-t THREADS] [-m gpt2|small|long] "
                      "[COUNT:BATCH:TA:TB:M:N:K ...]\n");
      return 2;
    }
  }
  Ctx x;
  RtError err;
  if (rt_pool_new(&x.pool, threads, &err) != 0) {
    fprintf(stderr, "gemm_libs: %s\n", err.msg);
    return 1;
  }
  dnnl_check(dnnl_engine_create(&x.engine, dnnl_cpu, 0), "engine");
  dnnl_check(dnnl_stream_create(&x.stream, x.engine, dnnl_stream_default_flags), "stream");
  libxsmm_init();
  versions();
  if (nshapes) {
    Model cli = {"command line", shapes, nshapes};
    bench_model(&x, &cli, &o);
  }
  for (size_t i = 0; !nshapes && i < sizeof MODELS / sizeof MODELS[0]; i++)
    if (!only || !strcmp(only, MODELS[i].name)) bench_model(&x, &MODELS[i], &o);
  libxsmm_finalize();
  dnnl_stream_destroy(x.stream);
  dnnl_engine_destroy(x.engine);
  rt_pool_free(x.pool);
  free(shapes);
  return 0;
}
