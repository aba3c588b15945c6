/*
 * test_attention.c: rt_attention and rt_attention_grad against a straight double-precision
 * reference of the formulas in axrt.h, over shapes that cover one row, rows that do not fill a
 * block, odd head sizes and several blocks, with and without the causal mask; and the same bits
 * from a NULL pool as from pools of 2 and 3 threads. The bf16 entry points against the f32
 * kernels on the widened inputs. Outputs start as NaN, so an element a
 * kernel forgets to write fails the comparison.
 */
#include <math.h>
#include <stdlib.h>

#include "rt_test.h"

extern void openblas_set_num_threads(int);

/* ===== the reference ================================================================== */

/* One problem's probabilities, (t, t) in double; masked entries 0. */
static void ref_probs(int64_t t, int64_t h, int causal, double scale, const float *q,
                      const float *k, double *p) {
  for (int64_t i = 0; i < t; i++) {
    int64_t n = causal ? i + 1 : t;
    double m = -INFINITY, l = 0;
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t c = 0; c < h; c++) s += (double)q[i * h + c] * (double)k[j * h + c];
      p[i * t + j] = scale * s;
      m = fmax(m, scale * s);
    }
    for (int64_t j = 0; j < n; j++) l += p[i * t + j] = exp(p[i * t + j] - m);
    for (int64_t j = 0; j < t; j++) p[i * t + j] = j < n ? p[i * t + j] / l : 0;
  }
}

static void ref_forward(int64_t t, int64_t h, const double *p, const float *v, double *o) {
  for (int64_t i = 0; i < t; i++)
    for (int64_t c = 0; c < h; c++) {
      double acc = 0;
      for (int64_t j = 0; j < t; j++) acc += p[i * t + j] * (double)v[j * h + c];
      o[i * h + c] = acc;
    }
}

/* dq, dk, dv of one problem (each (t, h)); ds is (t, t) scratch. */
static void ref_backward(int64_t t, int64_t h, double scale, const double *p, const float *q,
                         const float *k, const float *v, const float *dout, double *ds, double *dq,
                         double *dk, double *dv) {
  for (int64_t i = 0; i < t; i++) {
    double d = 0;
    for (int64_t j = 0; j < t; j++) {
      double dp = 0;
      for (int64_t c = 0; c < h; c++) dp += (double)dout[i * h + c] * (double)v[j * h + c];
      ds[i * t + j] = dp;
      d += p[i * t + j] * dp;
    }
    for (int64_t j = 0; j < t; j++) ds[i * t + j] = p[i * t + j] * (ds[i * t + j] - d);
  }
  for (int64_t x = 0; x < t * h; x++) dq[x] = dk[x] = dv[x] = 0;
  for (int64_t i = 0; i < t; i++)
    for (int64_t j = 0; j < t; j++)
      for (int64_t c = 0; c < h; c++) {
        dq[i * h + c] += scale * ds[i * t + j] * (double)k[j * h + c];
        dk[j * h + c] += scale * ds[i * t + j] * (double)q[i * h + c];
        dv[j * h + c] += p[i * t + j] * (double)dout[i * h + c];
      }
}

/* ===== inputs and comparisons ========================================================= */

/* N(0, 1) by Box-Muller from a 64-bit LCG with a fixed seed. */
static void fill_normal(float *x, int64_t n, uint64_t *state) {
  for (int64_t i = 0; i < n; i++) {
    double u[2];
    for (int r = 0; r < 2; r++) {
      *state = *state * 6364136223846793005ull + 1442695040888963407ull;
      u[r] = ((double)(*state >> 11) + 0.5) / 9007199254740992.0;
    }
    x[i] = (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]));
  }
}

static float *nan_buffer(int64_t n) {
  float *x = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = NAN;
  return x;
}

/* max |got - ref| <= tol * max |ref| over n elements; NaN fails. */
static void check_close(const char *what, const float *got, const double *ref, int64_t n,
                        double tol, int64_t bn, int64_t t, int64_t h, int causal) {
  double err = 0, big = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - ref[i]);
    err = e > err || isnan(e) ? e : err;
    big = fmax(big, fabs(ref[i]));
  }
  CHECK_MSG(err <= tol * big,
            "%s (bn %lld, t %lld, h %lld, causal %d): max error %.3g, max |ref| %.3g", what,
            (long long)bn, (long long)t, (long long)h, causal, err, big);
}

static void check_same_bits(const char *what, const float *a, const float *b, int64_t n,
                            int threads) {
  CHECK_MSG(memcmp(a, b, (size_t)n * sizeof(float)) == 0, "%s: %d threads give the bits of one",
            what, threads);
}

/* ===== cases ========================================================================== */

typedef struct Case {
  int64_t bn, t, h;
  double scale; /* 0: 1 / sqrt(h) */
} Case;

static const double TOL = 1e-5;

/* One shape and mask: both kernels against the reference, then on 2 and 3 threads. */
static void check_case(const Case *cs, int causal, uint64_t seed) {
  int64_t bn = cs->bn, t = cs->t, h = cs->h, n = bn * t * h;
  float scale = (float)(cs->scale != 0 ? cs->scale : 1 / sqrt((double)h));
  float *in = malloc((size_t)(4 * n) * sizeof(float)), *q = in, *k = in + n, *v = in + 2 * n,
        *dout = in + 3 * n;
  fill_normal(in, 4 * n, &seed);
  double *p = malloc((size_t)(t * t) * sizeof(double)),
         *ds = malloc((size_t)(t * t) * sizeof(double));
  double *ref = malloc((size_t)(4 * n) * sizeof(double)), *o = ref, *dq = ref + n,
         *dk = ref + 2 * n, *dv = ref + 3 * n;
  for (int64_t b = 0; b < bn; b++) {
    int64_t x = b * t * h;
    ref_probs(t, h, causal, scale, q + x, k + x, p);
    ref_forward(t, h, p, v + x, o + x);
    ref_backward(t, h, scale, p, q + x, k + x, v + x, dout + x, ds, dq + x, dk + x, dv + x);
  }

  float *got = nan_buffer(n), *grad = nan_buffer(3 * n);
  rt_attention(NULL, bn, 1, t, t, h, causal, scale, q, k, v, NULL, got);
  rt_attention_grad(NULL, bn, 1, t, t, h, causal, scale, q, k, v, dout, NULL, grad);
  check_close("o", got, o, n, TOL, bn, t, h, causal);
  check_close("dq", grad, dq, n, TOL, bn, t, h, causal);
  check_close("dk", grad + n, dk, n, TOL, bn, t, h, causal);
  check_close("dv", grad + 2 * n, dv, n, TOL, bn, t, h, causal);
  if (causal) /* query 0 sees key 0 alone: its output is v_0 exactly */
    CHECK_INT(memcmp(got, v, (size_t)h * sizeof(float)), 0);

  for (int threads = 2; threads <= 3; threads++) {
    RtError err;
    RtPool *pool;
    CHECK_OK(rt_pool_new(&pool, threads, &err));
    float *got2 = nan_buffer(n), *grad2 = nan_buffer(3 * n);
    rt_attention(pool, bn, 1, t, t, h, causal, scale, q, k, v, NULL, got2);
    rt_attention_grad(pool, bn, 1, t, t, h, causal, scale, q, k, v, dout, NULL, grad2);
    check_same_bits("rt_attention", got, got2, n, threads);
    check_same_bits("rt_attention_grad", grad, grad2, 3 * n, threads);
    free(got2);
    free(grad2);
    rt_pool_free(pool);
  }
  free(got);
  free(grad);
  free(ref);
  free(p);
  free(ds);
  free(in);
}

static void check_cases(const Case *cases, int ncases) {
  for (int c = 0; c < ncases; c++)
    for (int causal = 0; causal <= 1; causal++) check_case(&cases[c], causal, 1234 + (uint64_t)c);
}

/* One row, odd head sizes, a partial block, several blocks (the last partial), a long row. */
static void test_shapes(void) {
  static const Case cases[] = {
      {1, 1, 4, 0}, {2, 5, 3, 0}, {3, 37, 8, 0}, {2, 130, 16, 0}, {1, 300, 64, 0}, {2, 70, 5, 0},
  };
  check_cases(cases, sizeof cases / sizeof *cases);
}

/* Scores near 100, past where expf overflows (88): only subtracting the row maximum keeps them
 * finite; and a negative scale, where the largest score comes from the smallest q.k. */
static void test_sharp(void) {
  static const Case cases[] = {{2, 100, 16, 6.0}, {1, 65, 8, -9.0}};
  check_cases(cases, sizeof cases / sizeof *cases);
}

/* rt_attention_bf16 and rt_attention_grad_bf16: the f32 kernels' results on the widened
 * inputs, each rounded once (bit for bit), on a NULL pool and on 2 threads; 40 problems of
 * (256, 64) go through the bf16 versions in several groups (8 MiB of f32 copies each). */
static void test_bf16(void) {
  static const Case cases[] = {{3, 37, 8, 0}, {40, 256, 64, 0}};
  RtPool *pool;
  RtError err;
  CHECK_OK(rt_pool_new(&pool, 2, &err));
  for (int c = 0; c < 2; c++)
    for (int causal = 0; causal <= 1; causal++) {
      int64_t bn = cases[c].bn, t = cases[c].t, h = cases[c].h, n = bn * t * h;
      float scale = 1.0f / sqrtf((float)h);
      uint16_t *in = malloc(sizeof *in * (size_t)(4 * n)),
               *got = malloc(sizeof *got * (size_t)(4 * n));
      float *w = malloc(sizeof *w * (size_t)(7 * n));
      CU_ASSERT_FATAL(in != NULL && got != NULL && w != NULL);
      uint64_t seed = 99 + (uint64_t)c;
      for (int64_t x = 0; x < 4 * n; x++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        in[x] = rt_bf16_from_f32((float)((seed >> 40) % 2001) / 1000.0f - 1.0f);
        w[x] = rt_bf16_to_f32(in[x]);
      }
      rt_attention(pool, bn, 1, t, t, h, causal, scale, w, w + n, w + 2 * n, NULL, w + 4 * n);
      for (RtPool *p = NULL;; p = pool) {
        for (int64_t x = 0; x < 4 * n; x++) got[x] = 0x7fc0;
        rt_attention_bf16(p, bn, 1, t, t, h, causal, scale, in, in + n, in + 2 * n, NULL, got);
        int bad = 0;
        for (int64_t x = 0; x < n; x++) bad += got[x] != rt_bf16_from_f32(w[4 * n + x]);
        CHECK_INT(bad, 0);
        if (p) break;
      }
      rt_attention_grad(pool, bn, 1, t, t, h, causal, scale, w, w + n, w + 2 * n, w + 3 * n, NULL,
                        w + 4 * n);
      for (RtPool *p = NULL;; p = pool) {
        for (int64_t x = 0; x < 4 * n; x++) got[x] = 0x7fc0;
        rt_attention_grad_bf16(p, bn, 1, t, t, h, causal, scale, in, in + n, in + 2 * n, in + 3 * n,
                               NULL, got);
        int bad = 0;
        for (int64_t x = 0; x < 3 * n; x++) bad += got[x] != rt_bf16_from_f32(w[4 * n + x]);
        CHECK_INT(bad, 0);
        CHECK_INT(got[3 * n], 0x7fc0); /* nothing written past the three gradients */
        if (p) break;
      }
      free(in);
      free(got);
      free(w);
    }
  rt_pool_free(pool);
}

/* Grouped-query (group 3): problem p reads key problem p / 3. Against the ungrouped kernels
 * on keys and values broadcast to every problem: the forward and dq bit for bit, dk and dv the
 * group's sums (1e-5); in the grouped layout (per key problem 3 dq, dk, dv) with nothing
 * written past it. Then the bf16 versions: the grouped f32 results rounded once, bit for bit,
 * 48 problems of (256, 64) in several groups, which hold whole key problems. */
static void test_grouped(void) {
  enum { G = 3 };
  RtPool *pool;
  RtError err;
  CHECK_OK(rt_pool_new(&pool, 2, &err));
  for (int c = 0; c < 2; c++)
    for (int causal = 0; causal <= 1; causal++) {
      int64_t bn = c ? 48 : 6, t = c ? 256 : 37, h = c ? 64 : 5, per = t * h, n = bn * per,
              nk = n / G;
      float scale = 1.0f / sqrtf((float)h);
      float *q = malloc(sizeof(float) * (size_t)(2 * n)), *dout = q + n;
      float *kv = malloc(sizeof(float) * (size_t)(2 * nk)), *kk = kv, *vv = kv + nk;
      float *kb = malloc(sizeof(float) * (size_t)(2 * n)), *vb = kb + n;
      float *o1 = nan_buffer(n), *o2 = nan_buffer(n), *g1 = nan_buffer(3 * n);
      float *g2 = nan_buffer(n + 2 * nk + 1);
      uint64_t seed = 7 + (uint64_t)c;
      fill_normal(q, 2 * n, &seed);
      fill_normal(kv, 2 * nk, &seed);
      for (int64_t b = 0; b < bn; b++)
        for (int64_t x = 0; x < per; x++) {
          kb[b * per + x] = kk[b / G * per + x];
          vb[b * per + x] = vv[b / G * per + x];
        }
      rt_attention(pool, bn, 1, t, t, h, causal, scale, q, kb, vb, NULL, o1);
      rt_attention(pool, bn, G, t, t, h, causal, scale, q, kk, vv, NULL, o2);
      check_same_bits("grouped forward", o1, o2, n, 2);
      rt_attention_grad(pool, bn, 1, t, t, h, causal, scale, q, kb, vb, dout, NULL, g1);
      rt_attention_grad(pool, bn, G, t, t, h, causal, scale, q, kk, vv, dout, NULL, g2);
      int bad = 0;
      double *ref = calloc((size_t)(2 * per), sizeof(double));
      float *got = malloc(sizeof(float) * (size_t)(2 * per));
      for (int64_t kp = 0; kp < bn / G; kp++) {
        const float *at = g2 + kp * (G + 2) * per;
        bad += memcmp(at, g1 + kp * G * per, sizeof(float) * (size_t)(G * per)) != 0;
        for (int64_t x = 0; x < 2 * per; x++) ref[x] = 0;
        for (int64_t b = kp * G; b < (kp + 1) * G; b++)
          for (int64_t x = 0; x < per; x++) {
            ref[x] += g1[n + b * per + x];
            ref[per + x] += g1[2 * n + b * per + x];
          }
        memcpy(got, at + G * per, sizeof(float) * (size_t)(2 * per));
        check_close("grouped dk, dv", got, ref, 2 * per, TOL, bn, t, h, causal);
      }
      CHECK_INT(bad, 0);
      CU_ASSERT(isnan(g2[n + 2 * nk])); /* nothing past the gradients */
      uint16_t *in = malloc(sizeof(uint16_t) * (size_t)(2 * n + 2 * nk + n + 2 * nk + 1));
      uint16_t *bq = in, *bk = in + n, *bv = bk + nk, *bd = bv + nk, *bo = bd + n;
      float *w = malloc(sizeof(float) * (size_t)(2 * n + 2 * nk));
      for (int64_t x = 0; x < n; x++) {
        bq[x] = rt_bf16_from_f32(q[x]), bd[x] = rt_bf16_from_f32(dout[x]);
        w[x] = rt_bf16_to_f32(bq[x]), w[n + 2 * nk + x] = rt_bf16_to_f32(bd[x]);
      }
      for (int64_t x = 0; x < nk; x++) {
        bk[x] = rt_bf16_from_f32(kk[x]), bv[x] = rt_bf16_from_f32(vv[x]);
        w[n + x] = rt_bf16_to_f32(bk[x]), w[n + nk + x] = rt_bf16_to_f32(bv[x]);
      }
      rt_attention(pool, bn, G, t, t, h, causal, scale, w, w + n, w + n + nk, NULL, o2);
      rt_attention_bf16(pool, bn, G, t, t, h, causal, scale, bq, bk, bv, NULL, bo);
      bad = 0;
      for (int64_t x = 0; x < n; x++) bad += bo[x] != rt_bf16_from_f32(o2[x]);
      rt_attention_grad(pool, bn, G, t, t, h, causal, scale, w, w + n, w + n + nk, w + n + 2 * nk,
                        NULL, g2);
      bo[n + 2 * nk] = 0x7fc0;
      rt_attention_grad_bf16(pool, bn, G, t, t, h, causal, scale, bq, bk, bv, bd, NULL, bo);
      for (int64_t x = 0; x < n + 2 * nk; x++) bad += bo[x] != rt_bf16_from_f32(g2[x]);
      CHECK_INT(bad, 0);
      CHECK_INT(bo[n + 2 * nk], 0x7fc0);
      free(w);
      free(in);
      free(ref);
      free(got);
      free(q);
      free(kv);
      free(kb);
      free(o1);
      free(o2);
      free(g1);
      free(g2);
    }
  rt_pool_free(pool);
}

/* Where the gradient's problem `slot` of a query problem b (0 dq, 1 dk, 2 dv) starts, in
 * problems (ir_attention_grad_at). */
static int64_t grad_slot(int64_t bn, int64_t G, int64_t b, int which) {
  if (G == 1) return which * bn + b;
  return which == 0 ? b / G * (G + 2) + b % G : b / G * (G + 2) + G + which - 1;
}

/* Query positions: the sequence's rows cut in three chunks (23, 24 and 23 of 70), each chunk's
 * queries against all the keys with its rows' places as the positions, as a device of a split
 * sequence runs it. The chunks' outputs and dq are the whole sequence's rows (1e-5), their dk
 * and dv sum to the whole's, and dq's rows past the chunk are exactly zero; grouped (2 query
 * problems a key problem) and not, causal and not. The bf16 kernels with positions give the f32
 * results on the widened values rounded once, bit for bit. */
static void test_positions(void) {
  RtPool *pool;
  RtError err;
  CHECK_OK(rt_pool_new(&pool, 2, &err));
  const int64_t t = 70, h = 5, bn = 4, cut[4] = {0, 23, 47, 70};
  for (int64_t G = 1; G <= 2; G++)
    for (int causal = 0; causal <= 1; causal++) {
      int64_t per = t * h, n = bn * per, nk = n / G, ng = (G == 1 ? 3 * n : n + 2 * nk);
      float scale = 1.0f / sqrtf((float)h);
      float *q = malloc(sizeof(float) * (size_t)(2 * n + 2 * nk)), *dout = q + n, *k = q + 2 * n,
            *v = k + nk;
      uint64_t seed = 11 + (uint64_t)(G * 2 + causal);
      fill_normal(q, 2 * n + 2 * nk, &seed);
      float *o = nan_buffer(n), *g = nan_buffer(ng), *oc = nan_buffer(n), *gc = nan_buffer(ng);
      float *qc = malloc(sizeof(float) * (size_t)(2 * n)), *dc = qc + n;
      double *ref = calloc((size_t)(n + ng), sizeof(double)), *acc = ref + n;
      int32_t pos[70];
      rt_attention(pool, bn, G, t, t, h, causal, scale, q, k, v, NULL, o);
      rt_attention_grad(pool, bn, G, t, t, h, causal, scale, q, k, v, dout, NULL, g);
      int zeros = 0;
      for (int c = 0; c < 3; c++) {
        int64_t c0 = cut[c], tq = cut[c + 1] - c0;
        for (int64_t i = 0; i < tq; i++) pos[i] = (int32_t)(c0 + i);
        for (int64_t b = 0; b < bn; b++) {
          memcpy(qc + b * tq * h, q + b * per + c0 * h, sizeof(float) * (size_t)(tq * h));
          memcpy(dc + b * tq * h, dout + b * per + c0 * h, sizeof(float) * (size_t)(tq * h));
        }
        rt_attention(pool, bn, G, tq, t, h, causal, scale, qc, k, v, pos, oc);
        rt_attention_grad(pool, bn, G, tq, t, h, causal, scale, qc, k, v, dc, pos, gc);
        for (int64_t b = 0; b < bn; b++) {
          for (int64_t x = 0; x < tq * h; x++) ref[b * per + c0 * h + x] = oc[b * tq * h + x];
          const float *dq = gc + grad_slot(bn, G, b, 0) * per;
          for (int64_t x = 0; x < tq * h; x++)
            acc[grad_slot(bn, G, b, 0) * per + c0 * h + x] = dq[x];
          for (int64_t x = tq * h; x < per; x++) zeros += dq[x] != 0.0f;
          if (b % G) continue;
          for (int w = 1; w <= 2; w++)
            for (int64_t x = 0; x < per; x++)
              acc[grad_slot(bn, G, b, w) * per + x] += gc[grad_slot(bn, G, b, w) * per + x];
        }
      }
      check_close("positions: forward", o, ref, n, TOL, bn, t, h, causal);
      float *gf = malloc(sizeof(float) * (size_t)ng);
      memcpy(gf, g, sizeof(float) * (size_t)ng);
      check_close("positions: dq, dk, dv", gf, acc, ng, TOL, bn, t, h, causal);
      CHECK_INT(zeros, 0);
      /* bf16: the middle chunk */
      int64_t c0 = cut[1], tq = cut[2] - c0;
      for (int64_t i = 0; i < tq; i++) pos[i] = (int32_t)(c0 + i);
      int64_t nq = bn * tq * h;
      uint16_t *bin = malloc(sizeof(uint16_t) * (size_t)(2 * nq + 2 * nk + ng));
      uint16_t *bq = bin, *bd = bq + nq, *bk = bd + nq, *bv = bk + nk, *bo = bv + nk;
      float *w = malloc(sizeof(float) * (size_t)(2 * nq + 2 * nk));
      for (int64_t b = 0; b < bn; b++)
        for (int64_t x = 0; x < tq * h; x++) {
          bq[b * tq * h + x] = rt_bf16_from_f32(q[b * per + c0 * h + x]);
          bd[b * tq * h + x] = rt_bf16_from_f32(dout[b * per + c0 * h + x]);
        }
      for (int64_t x = 0; x < 2 * nk; x++) bk[x] = rt_bf16_from_f32(k[x]);
      for (int64_t x = 0; x < 2 * nq + 2 * nk; x++) w[x] = rt_bf16_to_f32(bin[x]);
      int bad = 0;
      rt_attention(pool, bn, G, tq, t, h, causal, scale, w, w + 2 * nq, w + 2 * nq + nk, pos, oc);
      rt_attention_bf16(pool, bn, G, tq, t, h, causal, scale, bq, bk, bv, pos, bo);
      for (int64_t x = 0; x < nq; x++) bad += bo[x] != rt_bf16_from_f32(oc[x]);
      rt_attention_grad(pool, bn, G, tq, t, h, causal, scale, w, w + 2 * nq, w + 2 * nq + nk,
                        w + nq, pos, gc);
      rt_attention_grad_bf16(pool, bn, G, tq, t, h, causal, scale, bq, bk, bv, bd, pos, bo);
      for (int64_t x = 0; x < ng; x++) bad += bo[x] != rt_bf16_from_f32(gc[x]);
      CHECK_INT(bad, 0);
      free(w);
      free(bin);
      free(gf);
      free(q);
      free(o);
      free(g);
      free(oc);
      free(gc);
      free(qc);
      free(ref);
    }
  rt_pool_free(pool);
}

int main(int argc, char **argv) {
  openblas_set_num_threads(1); /* as rt_train_main: the pool, not OpenBLAS, runs the threads */
  static const TestCase cases[] = {
      {"against the double reference, 1-3 threads", test_shapes},
      {"large scores, negative scale", test_sharp},
      {"bf16 tensors: the f32 results rounded once, in groups, 1-2 threads", test_bf16},
      {"grouped-query: key problem p / group, dk and dv summed over the group", test_grouped},
      {"query positions: a split sequence's chunks against all the keys", test_positions},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_attention", cases);
}
