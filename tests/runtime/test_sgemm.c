/*
 * test_sgemm.c: rt_sgemm and the runtime's own product (sgemm.c) against a double-precision
 * reference, over shapes that cover one element, edges that fill neither a 6-row sliver nor a
 * 16-column panel, K across several 256-slices, several row groups, blocks of rows and columns
 * beyond one block (m > 3072, n > 4096), every transpose, leading dimensions wider than the
 * matrix, and batches on both of rt_sgemm's paths and one-row products (sgemv); and the own
 * product's alpha and accumulation into C. C starts as NaN (when not accumulating), so an element
 * the product forgets to write (or reads before writing: beta is 0) fails. Each product is also run
 * on a NULL pool and on pools of 2 and 3 threads, and with the other kernels (AVX2 and AVX-512,
 * where the CPU has both), which must all give the same bits. And the tiles
 * the fused attention runs (rt_pack_panels, rt_gemm_panels), over the same shapes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_test.h"
#include "runtime/rt_impl.h"

extern void openblas_set_num_threads(int);

typedef struct {
  int64_t batch, m, n, k;
  int64_t pad; /* extra leading-dimension elements of A, B and C */
} Case;

/* The own product's alpha and add for the case being checked (rt_sgemm: 1 and 0). */
static float alpha = 1.0f;
static int add;

/* C's value before an accumulating product (add). */
static float c_init(int64_t x) { return (float)(x % 7) * 0.25f - 0.5f; }

static float value(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((*s >> 40) % 2001) / 1000.0f - 1.0f;
}

/* op(A)[i, kk] and op(B)[kk, j] of batch element b. */
static double a_at(const float *a, int ta, int64_t lda, int64_t i, int64_t kk) {
  return ta ? a[kk * lda + i] : a[i * lda + kk];
}
static double b_at(const float *b, int tb, int64_t ldb, int64_t kk, int64_t j) {
  return tb ? b[j * ldb + kk] : b[kk * ldb + j];
}

/* Largest |C - ref| / (sum over k of |op(A)| |op(B)| + tiny), over batch x m x n. */
static double worst(const Case *t, int ta, int tb, const float *a, int64_t lda, int64_t sa,
                    const float *b, int64_t ldb, int64_t sb, const float *c, int64_t ldc,
                    int64_t sc) {
  double w = 0;
  for (int64_t e = 0; e < t->batch; e++)
    for (int64_t i = 0; i < t->m; i++)
      for (int64_t j = 0; j < t->n; j++) {
        double ref = 0, mag = 1e-30;
        for (int64_t kk = 0; kk < t->k; kk++) {
          double x = alpha * a_at(a + e * sa, ta, lda, i, kk) * b_at(b + e * sb, tb, ldb, kk, j);
          ref += x;
          mag += fabs(x);
        }
        if (add) {
          ref += c_init(e * sc + i * ldc + j);
          mag += fabs(c_init(e * sc + i * ldc + j));
        }
        double got = c[e * sc + i * ldc + j];
        double r = isfinite(got) ? fabs(got - ref) / mag : INFINITY;
        if (r > w) w = r;
      }
  return w;
}

typedef void (*Product)(RtPool *pool, const Case *t, int ta, int tb, const float *a, int64_t lda,
                        int64_t sa, const float *b, int64_t ldb, int64_t sb, float *c, int64_t ldc,
                        int64_t sc);

static void via_rt_sgemm(RtPool *pool, const Case *t, int ta, int tb, const float *a, int64_t lda,
                         int64_t sa, const float *b, int64_t ldb, int64_t sb, float *c, int64_t ldc,
                         int64_t sc) {
  rt_sgemm(pool, t->batch, ta, tb, t->m, t->n, t->k, a, lda, sa, b, ldb, sb, c, ldc, sc);
}

static void via_own(RtPool *pool, const Case *t, int ta, int tb, const float *a, int64_t lda,
                    int64_t sa, const float *b, int64_t ldb, int64_t sb, float *c, int64_t ldc,
                    int64_t sc) {
  for (int64_t e = 0; e < t->batch; e++)
    CU_ASSERT_FATAL(rt_sgemm_own(pool, ta, tb, t->m, t->n, t->k, alpha, a + e * sa, lda, b + e * sb,
                                 ldb, add, c + e * sc, ldc));
}

/* rt_gemm_panels on op(B) packed by rt_pack_panels, one product at a time (the pool is not
 * used). B stored (n, k) is packed as it is; B stored (k, n) goes through a copy with 5 more
 * rows of NaN, packed with pk = k + 5, so a product that reads past its k rows fails. */
static void via_panels(RtPool *pool, const Case *t, int ta, int tb, const float *a, int64_t lda,
                       int64_t sa, const float *b, int64_t ldb, int64_t sb, float *c, int64_t ldc,
                       int64_t sc) {
  (void)pool;
  int64_t pk = tb ? t->k : t->k + 5;
  size_t bytes = ((size_t)rt_panels_floats(pk, t->n) * sizeof(float) + 64) / 64 * 64;
  float *panels = aligned_alloc(64, bytes), *bx = malloc((size_t)(pk * t->n + 1) * sizeof *bx);
  CU_ASSERT_FATAL(panels != NULL && bx != NULL);
  for (int64_t e = 0; e < t->batch; e++) {
    if (tb) {
      rt_pack_panels(1, t->k, t->n, alpha, b + e * sb, ldb, panels);
    } else {
      for (int64_t kk = 0; kk < pk; kk++)
        for (int64_t j = 0; j < t->n; j++)
          bx[kk * t->n + j] = kk < t->k ? b[e * sb + kk * ldb + j] : NAN;
      rt_pack_panels(0, pk, t->n, alpha, bx, t->n, panels);
    }
    rt_gemm_panels(ta, t->m, t->n, t->k, a + e * sa, lda, panels, pk, add, c + e * sc, ldc);
  }
  free(panels);
  free(bx);
}

/* One case, every transpose: the product on NULL, 2- and 3-thread pools, bit-identical and
 * within 2e-6 of the reference (relative to the sum of |terms|; K up to 1100 here). */
static void check(RtPool *pools[3], const Case *t, Product product, int check_ref) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int64_t lda = (ta ? t->m : t->k) + t->pad, ldb = (tb ? t->k : t->n) + t->pad;
      int64_t ldc = t->n + t->pad;
      int64_t sa = lda * (ta ? t->k : t->m), sb = ldb * (tb ? t->n : t->k), sc = ldc * t->m;
      size_t na = (size_t)(sa * t->batch), nb = (size_t)(sb * t->batch),
             nc = (size_t)(sc * t->batch);
      float *a = malloc((na + 1) * sizeof *a), *b = malloc((nb + 1) * sizeof *b);
      float *c[4];
      uint64_t seed = (uint64_t)(t->m * 131 + t->n * 17 + t->k + ta * 7 + tb * 3);
      for (size_t x = 0; x < na; x++) a[x] = value(&seed);
      for (size_t x = 0; x < nb; x++) b[x] = value(&seed);
      /* the fourth run: the other kernels (AVX2 where the AVX-512 ones run), on 2 threads */
      int wide = rt_sgemm_own_avx512(-1);
      for (int p = 0; p < 4; p++) {
        c[p] = malloc((nc + 1) * sizeof *c[p]);
        for (size_t x = 0; x < nc; x++) c[p][x] = add ? c_init((int64_t)x) : NAN;
        if (p == 3) rt_sgemm_own_avx512(!wide);
        product(pools[p % 3 ? p % 3 : 1], t, ta, tb, a, lda, sa, b, ldb, sb, c[p], ldc, sc);
        rt_sgemm_own_avx512(wide);
      }
      /* the padding between rows of C is not C's: it stays NaN in every run, so memcmp holds */
      CU_ASSERT(memcmp(c[0], c[1], nc * sizeof *c[0]) == 0);
      CU_ASSERT(memcmp(c[0], c[2], nc * sizeof *c[0]) == 0);
      CU_ASSERT(memcmp(c[0], c[3], nc * sizeof *c[0]) == 0);
      if (check_ref) {
        double w = worst(t, ta, tb, a, lda, sa, b, ldb, sb, c[0], ldc, sc);
        if (!(w <= 2e-6))
          fprintf(stderr, "\n  batch %lld m %lld n %lld k %lld ta %d tb %d: error %.3g\n",
                  (long long)t->batch, (long long)t->m, (long long)t->n, (long long)t->k, ta, tb,
                  w);
        CU_ASSERT(w <= 2e-6);
      }
      for (int p = 0; p < 4; p++) free(c[p]);
      free(a);
      free(b);
    }
}

static RtPool *pools[3];

static const Case SHAPES[] = {
    {1, 1, 1, 1, 0},
    {1, 6, 16, 256, 0},
    {1, 7, 17, 3, 2},
    {1, 13, 33, 257, 1},
    {1, 5, 200, 40, 0},
    {1, 300, 70, 513, 3},
    {1, 97, 50, 1000, 0},
    {1, 290, 8, 64, 0},
    {2, 37, 65, 300, 1},
    {3, 12, 100, 20, 0},
    {1, 64, 64, 0, 0},
    {1, 300, 40, 13, 0},
    {1, 30, 48, 20, 0},
    {1, 20, 40, 30, 0},
    /* one row (a decode step's products: sgemv in column blocks), several blocks, batches */
    {1, 1, 300, 70, 1},
    {3, 1, 257, 40, 2},
    {5, 1, 2100, 9, 0},
};

/* The own product runs on this CPU; if not, the case is skipped (test_skipped). */
static int own_or_skip(void) {
  if (rt_sgemm_own_available()) return 1;
  test_skipped("this CPU lacks AVX2 or FMA: the own product is not run");
  return 0;
}

static void test_own(void) {
  if (!own_or_skip()) return;
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
    check(pools, &SHAPES[i], via_own, 1);
}

/* C = alpha op(A) op(B) + C, as the fused attention's tiles use it (on a NULL pool there). */
static void test_own_alpha_add(void) {
  if (!own_or_skip()) return;
  alpha = -0.375f;
  add = 1;
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
    check(pools, &SHAPES[i], via_own, 1);
  add = 0;
  check(pools, &SHAPES[3], via_own, 1);
  alpha = 1.0f;
}

static void test_rt_sgemm(void) {
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
    check(pools, &SHAPES[i], via_rt_sgemm, 1);
  /* batch >= 4: an item per batch element on OpenBLAS */
  static const Case batched[] = {{4, 9, 11, 13, 1}, {6, 33, 20, 70, 0}};
  for (size_t i = 0; i < 2; i++) check(pools, &batched[i], via_rt_sgemm, 1);
}

/* The fused attention's tiles: rt_gemm_panels, with alpha and accumulation too. */
static void test_panels(void) {
  if (!own_or_skip()) return;
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
    check(pools, &SHAPES[i], via_panels, 1);
  alpha = -0.375f;
  add = 1;
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
    check(pools, &SHAPES[i], via_panels, 1);
  add = 0;
  alpha = 1.0f;
}

/* Blocks of rows (m > 3072) and of columns (n > 4096): short K keeps the reference cheap.
 * Then an op(A) of over CLAIM_A floats (13 x 161400), whose strips run in whole chunks. */
static void test_blocks(void) {
  if (!own_or_skip()) return;
  static const Case big[] = {
      {1, 3100, 20, 5, 0}, {1, 7, 4100, 9, 1}, {1, 3075, 4113, 2, 0}, {1, 13, 70, 161400, 0}};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) check(pools, &big[i], via_own, 1);
}

int main(int argc, char **argv) {
  openblas_set_num_threads(1); /* as rt_train_main: the pool, not OpenBLAS, runs the threads */
  RtError err;
  pools[0] = NULL;
  if (rt_pool_new(&pools[1], 2, &err) || rt_pool_new(&pools[2], 3, &err)) return 1;
  if (rt_sgemm_own_available() && !rt_sgemm_own_avx512(-1))
    fprintf(stderr, "(this CPU lacks AVX-512F: the own product's AVX2 kernels alone are run)\n");
  static const TestCase cases[] = {
      {"own product: reference, transposes, edges, 1-3 threads", test_own},
      {"own product: alpha, accumulating into C", test_own_alpha_add},
      {"rt_sgemm: both paths, batches", test_rt_sgemm},
      {"own product: blocks of rows and columns", test_blocks},
      {"tiles: packed panels, alpha, accumulating, 1-3 threads", test_panels},
      {NULL, NULL},
  };
  int rc = rt_test_main(argc, argv, "runtime_sgemm", cases);
  rt_pool_free(pools[1]);
  rt_pool_free(pools[2]);
  return rc;
}
