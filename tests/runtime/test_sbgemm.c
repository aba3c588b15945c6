/*
 * test_sbgemm.c: rt_sbgemm (bf16 operands, f32 accumulation, C f32 or bf16) on each of its
 * paths (the widening reference, the f32 kernels on operands widened as they are packed, and
 * the vdpbf16ps kernel where the CPU has AVX512_BF16) against a double-precision reference,
 * over every transpose, edges that fill neither a sliver nor a panel, k odd and 1 and 0, K
 * across slices, several row groups, blocks of rows and columns, batches on both sides of 4
 * with strides, and leading dimensions wider than the rows (the padding holds NaN, which a
 * product that read it would spread, and C's padding must stay untouched). Each product runs
 * on a NULL pool and on pools of 2 and 3 threads, which must give the same bits; the widening
 * path must give rt_sgemm_own's bits on the widened values. And the bf16 conversions of
 * axrt.h: ties to even, NaN, infinities, denormals, signed zero.
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

static RtPool *pools[3];

static uint16_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* A bf16 value in [-1, 1] with 8 significant bits. */
static uint16_t value(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return rt_bf16_from_f32((float)((*s >> 40) % 2001) / 1000.0f - 1.0f);
}

static double a_at(const uint16_t *a, int ta, int64_t lda, int64_t i, int64_t kk) {
  return rt_bf16_to_f32(ta ? a[kk * lda + i] : a[i * lda + kk]);
}
static double b_at(const uint16_t *b, int tb, int64_t ldb, int64_t kk, int64_t j) {
  return rt_bf16_to_f32(tb ? b[j * ldb + kk] : b[kk * ldb + j]);
}

/* Largest |C - ref| / (sum of |terms| + tiny), less a bf16 C's own rounding (half an ulp of
 * the reference, 2^-9 |ref|), over batch x m x n; infinite where C's padding was written. */
static double worst(const Case *t, int ta, int tb, const uint16_t *a, int64_t lda, int64_t sa,
                    const uint16_t *b, int64_t ldb, int64_t sb, const void *c, int c_bf16,
                    int64_t ldc, int64_t sc) {
  double w = 0;
  for (int64_t e = 0; e < t->batch; e++)
    for (int64_t i = 0; i < t->m; i++)
      for (int64_t j = 0; j < ldc; j++) {
        int64_t o = e * sc + i * ldc + j;
        double got = c_bf16 ? rt_bf16_to_f32(((const uint16_t *)c)[o]) : ((const float *)c)[o];
        if (j >= t->n) { /* padding: still the NaN it started as */
          if (!isnan(got)) w = INFINITY;
          continue;
        }
        double ref = 0, mag = 1e-30;
        for (int64_t kk = 0; kk < t->k; kk++) {
          double x = a_at(a + e * sa, ta, lda, i, kk) * b_at(b + e * sb, tb, ldb, kk, j);
          ref += x;
          mag += fabs(x);
        }
        double err = fabs(got - ref) - (c_bf16 ? ldexp(fabs(ref), -8) : 0);
        double r = isfinite(got) ? (err > 0 ? err : 0) / mag : INFINITY;
        if (r > w) w = r;
      }
  return w;
}

/* The operands of one case and transpose pair: random bf16 values, NaN in the padding. */
typedef struct {
  int64_t lda, ldb, ldc, sa, sb, sc;
  size_t na, nb, nc;
  uint16_t *a, *b;
} Operands;

static Operands operands_new(const Case *t, int ta, int tb) {
  Operands o;
  o.lda = (ta ? t->m : t->k) + t->pad, o.ldb = (tb ? t->k : t->n) + t->pad;
  o.ldc = t->n + t->pad;
  o.sa = o.lda * (ta ? t->k : t->m), o.sb = o.ldb * (tb ? t->n : t->k), o.sc = o.ldc * t->m;
  o.na = (size_t)(o.sa * t->batch), o.nb = (size_t)(o.sb * t->batch);
  o.nc = (size_t)(o.sc * t->batch);
  o.a = malloc((o.na + 1) * sizeof *o.a), o.b = malloc((o.nb + 1) * sizeof *o.b);
  CU_ASSERT_FATAL(o.a != NULL && o.b != NULL);
  uint64_t seed = (uint64_t)(t->m * 131 + t->n * 17 + t->k + ta * 7 + tb * 3);
  for (size_t x = 0; x < o.na; x++)
    o.a[x] = (int64_t)x % o.lda >= o.lda - t->pad ? 0x7fc0 : value(&seed);
  for (size_t x = 0; x < o.nb; x++)
    o.b[x] = (int64_t)x % o.ldb >= o.ldb - t->pad ? 0xffc0 : value(&seed);
  return o;
}

/* C for one run: NaN everywhere (an element the product forgets stays NaN). */
static void *c_new(const Operands *o, int c_bf16) {
  size_t n = o->nc + 1;
  void *c = malloc(n * (c_bf16 ? 2 : 4));
  CU_ASSERT_FATAL(c != NULL);
  for (size_t x = 0; x < n; x++)
    if (c_bf16)
      ((uint16_t *)c)[x] = 0x7fc0;
    else
      ((float *)c)[x] = NAN;
  return c;
}

static void run(RtPool *pool, const Case *t, int ta, int tb, const Operands *o, void *c,
                int c_bf16) {
  rt_sbgemm(pool, t->batch, ta, tb, t->m, t->n, t->k, o->a, o->lda, o->sa, o->b, o->ldb, o->sb, c,
            c_bf16, o->ldc, o->sc);
}

/* One case on the current path, every transpose and both C dtypes: NULL, 2- and 3-thread
 * pools give the same bits, within tolerance of the reference (relative to the sum of |terms|:
 * f32 accumulation over K up to 1100). */
static void check(const Case *t) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int c_bf16 = 0; c_bf16 < 2; c_bf16++) {
        Operands o = operands_new(t, ta, tb);
        void *c[3];
        for (int p = 0; p < 3; p++) {
          c[p] = c_new(&o, c_bf16);
          run(pools[p], t, ta, tb, &o, c[p], c_bf16);
        }
        size_t bytes = o.nc * (c_bf16 ? 2 : 4);
        CU_ASSERT(memcmp(c[0], c[1], bytes) == 0);
        CU_ASSERT(memcmp(c[0], c[2], bytes) == 0);
        double w = worst(t, ta, tb, o.a, o.lda, o.sa, o.b, o.ldb, o.sb, c[0], c_bf16, o.ldc, o.sc);
        if (!(w <= 2e-6))
          fprintf(stderr,
                  "\n  path %d batch %lld m %lld n %lld k %lld ta %d tb %d c_bf16 %d: error %.3g\n",
                  rt_sbgemm_path(-1), (long long)t->batch, (long long)t->m, (long long)t->n,
                  (long long)t->k, ta, tb, c_bf16, w);
        CU_ASSERT(w <= 2e-6);
        for (int p = 0; p < 3; p++) free(c[p]);
        free(o.a);
        free(o.b);
      }
}

static const Case SHAPES[] = {
    {1, 1, 1, 1, 0},
    {1, 6, 16, 256, 0},
    {1, 7, 17, 3, 2},
    {1, 13, 33, 1, 1},
    {1, 13, 33, 513, 1},
    {1, 5, 200, 40, 0},
    {1, 300, 70, 1025, 3},
    {1, 97, 50, 1000, 0},
    {2, 37, 65, 301, 1},
    {3, 12, 100, 21, 0},
    {1, 64, 64, 0, 0},
    {1, 30, 48, 20, 0},
    {4, 9, 11, 13, 1},
    {6, 33, 20, 71, 0},
    {5, 12, 32, 2, 2},
    /* one row (a decode step's products): column blocks without packing, batches */
    {1, 1, 300, 70, 1},
    {3, 1, 257, 40, 2},
    {2, 1, 2100, 9, 0},
};
enum { NSHAPES = sizeof SHAPES / sizeof SHAPES[0] };

static void check_path(int path, const char *name) {
  if (rt_sbgemm_path(path) != path) {
    char why[200];
    snprintf(why, sizeof why, "this CPU lacks %s: that path is not run", name);
    test_skipped(why);
    rt_sbgemm_path(RT_SBGEMM_WIDEN);
    return;
  }
  for (size_t i = 0; i < NSHAPES; i++) check(&SHAPES[i]);
}

static void test_ref(void) { check_path(RT_SBGEMM_REF, "nothing"); }
static void test_widen(void) { check_path(RT_SBGEMM_WIDEN, "AVX2 or FMA"); }
static void test_dot(void) { check_path(RT_SBGEMM_DOT, "AVX512_BF16 (the vdpbf16ps kernel)"); }

/* Blocks of rows (m > 3072) and of columns (n > 4096), on the kernels: short K keeps the
 * reference cheap. */
static void test_blocks(void) {
  static const Case big[] = {{1, 3100, 20, 5, 0}, {1, 7, 4100, 9, 1}};
  if (!rt_sgemm_own_available()) {
    test_skipped("this CPU lacks AVX2 or FMA: no kernels");
    return;
  }
  for (int path = RT_SBGEMM_WIDEN; path <= RT_SBGEMM_DOT; path++) {
    if (rt_sbgemm_path(path) != path) continue;
    for (size_t i = 0; i < 2; i++) check(&big[i]);
  }
  rt_sbgemm_path(RT_SBGEMM_WIDEN);
}

/* The widening path's f32 C is rt_sgemm_own's on the widened operands, bit for bit. (The
 * vdpbf16ps kernel's agrees with the others to f32 accumulation only: test_dot checks it
 * against the double reference with the same tolerance as the other paths.) */
static void test_paths_agree(void) {
  if (rt_sbgemm_path(RT_SBGEMM_WIDEN) != RT_SBGEMM_WIDEN) {
    test_skipped("this CPU lacks AVX2 or FMA: no widening path to compare");
    return;
  }
  for (size_t i = 0; i < NSHAPES; i++) {
    const Case *t = &SHAPES[i];
    if (t->batch != 1) continue;
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        Operands o = operands_new(t, ta, tb);
        float *wa = malloc((o.na + 1) * sizeof *wa), *wb = malloc((o.nb + 1) * sizeof *wb);
        CU_ASSERT_FATAL(wa != NULL && wb != NULL);
        for (size_t x = 0; x < o.na; x++) wa[x] = rt_bf16_to_f32(o.a[x]);
        for (size_t x = 0; x < o.nb; x++) wb[x] = rt_bf16_to_f32(o.b[x]);
        float *c = c_new(&o, 0), *ref = c_new(&o, 0);
        run(pools[1], t, ta, tb, &o, c, 0);
        CU_ASSERT_FATAL(rt_sgemm_own(pools[1], ta, tb, t->m, t->n, t->k, 1.0f, wa, o.lda, wb, o.ldb,
                                     0, ref, o.ldc));
        CU_ASSERT(memcmp(c, ref, o.nc * sizeof *c) == 0);
        free(wa);
        free(wb);
        free(c);
        free(ref);
        free(o.a);
        free(o.b);
      }
  }
}

/* axrt.h's conversions, on the bit patterns. */
static void test_conversions(void) {
  /* to f32 is exact: the pattern is the upper half */
  CHECK_INT(bits_of(rt_bf16_to_f32(0x3f80)), 0x3f80);
  CU_ASSERT(rt_bf16_to_f32(0x3f80) == 1.0f);
  CU_ASSERT(rt_bf16_to_f32(0x0001) == ldexpf(1.0f, -133)); /* the smallest denormal */
  CU_ASSERT(rt_bf16_to_f32(0x8000) == 0.0f && signbit(rt_bf16_to_f32(0x8000)));
  CU_ASSERT(isinf(rt_bf16_to_f32(0xff80)) && rt_bf16_to_f32(0xff80) < 0);
  CU_ASSERT(isnan(rt_bf16_to_f32(0x7fc0)));
  /* from f32: nearest, ties to even */
  CHECK_INT(rt_bf16_from_f32(float_of(0x3f808000u)), 0x3f80); /* tie, even below */
  CHECK_INT(rt_bf16_from_f32(float_of(0x3f818000u)), 0x3f82); /* tie, even above */
  CHECK_INT(rt_bf16_from_f32(float_of(0x3f808001u)), 0x3f81); /* past the tie */
  CHECK_INT(rt_bf16_from_f32(float_of(0x3f807fffu)), 0x3f80); /* short of it */
  CHECK_INT(rt_bf16_from_f32(float_of(0xbf818000u)), 0xbf82); /* negative: the same */
  CHECK_INT(rt_bf16_from_f32(float_of(0x3fffffffu)), 0x4000); /* the carry into the exponent */
  /* infinities stay; the largest finite values round up to them, as IEEE rounding does */
  CHECK_INT(rt_bf16_from_f32(INFINITY), 0x7f80);
  CHECK_INT(rt_bf16_from_f32(-INFINITY), 0xff80);
  CHECK_INT(rt_bf16_from_f32(float_of(0x7f7fffffu)), 0x7f80);
  CHECK_INT(rt_bf16_from_f32(float_of(0x7f7f7fffu)), 0x7f7f);
  /* NaN stays a (quiet) NaN with its sign, even one whose payload is in the low half */
  uint16_t n1 = rt_bf16_from_f32(float_of(0x7f800001u)),
           n2 = rt_bf16_from_f32(float_of(0xff800001u));
  CU_ASSERT((n1 & 0x7fff) > 0x7f80 && !(n1 & 0x8000) && (n1 & 0x40));
  CU_ASSERT((n2 & 0x7fff) > 0x7f80 && (n2 & 0x8000));
  CU_ASSERT(isnan(rt_bf16_to_f32(rt_bf16_from_f32(NAN))));
  CHECK_INT(rt_bf16_from_f32(float_of(0x7fffffffu)), 0x7fff);
  /* denormals round like the rest (no flush to zero), and zeros keep their sign */
  CHECK_INT(rt_bf16_from_f32(float_of(0x00008000u)), 0x0000); /* tie, even: zero */
  CHECK_INT(rt_bf16_from_f32(float_of(0x00018000u)), 0x0002); /* tie, even above */
  CHECK_INT(rt_bf16_from_f32(float_of(0x00017fffu)), 0x0001);
  CHECK_INT(rt_bf16_from_f32(float_of(0x007fffffu)), 0x0080); /* the largest: up to normal */
  CHECK_INT(rt_bf16_from_f32(float_of(0x80008001u)), 0x8001);
  CHECK_INT(rt_bf16_from_f32(-0.0f), 0x8000);
  CHECK_INT(rt_bf16_from_f32(0.0f), 0x0000);
  /* every bf16 pattern but NaN comes back to itself */
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++)
    if (!isnan(rt_bf16_to_f32((uint16_t)h)) && rt_bf16_from_f32(rt_bf16_to_f32((uint16_t)h)) != h)
      bad++;
  CHECK_INT(bad, 0);
}

int main(int argc, char **argv) {
  openblas_set_num_threads(1); /* as rt_train_main: the pool, not OpenBLAS, runs the threads */
  RtError err;
  pools[0] = NULL;
  if (rt_pool_new(&pools[1], 2, &err) || rt_pool_new(&pools[2], 3, &err)) return 1;
  fprintf(stderr, "(bf16 product paths on this CPU: widening f32 kernels %s, vdpbf16ps %s)\n",
          rt_sgemm_own_available() ? "yes" : "no (AVX2 or FMA missing)",
          rt_sbgemm_dot_available() ? "yes" : "no (AVX512_BF16 missing: skipped)");
  static const TestCase cases[] = {
      {"conversions: ties to even, NaN, inf, denormals", test_conversions},
      {"reference path: transposes, edges, batches, 1-3 threads", test_ref},
      {"widening path: transposes, edges, batches, 1-3 threads", test_widen},
      {"vdpbf16ps path: transposes, edges, batches, 1-3 threads", test_dot},
      {"kernels: blocks of rows and columns", test_blocks},
      {"widening path: rt_sgemm_own's bits on the widened operands", test_paths_agree},
      {NULL, NULL},
  };
  int rc = rt_test_main(argc, argv, "runtime_sbgemm", cases);
  rt_pool_free(pools[1]);
  rt_pool_free(pools[2]);
  return rc;
}
