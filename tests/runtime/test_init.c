/*
 * test_init.c: deterministic initialization: golden values of the generator, determinism,
 * independence from sharding, distribution moments and argument errors.
 */
#include <math.h>
#include <stdlib.h>

#include "rt_test.h"

#define N 200000

typedef struct Moments {
  double mean, std, min, max;
} Moments;

static Moments moments(const float *x, int64_t n) {
  Moments m = {0, 0, INFINITY, -INFINITY};
  for (int64_t i = 0; i < n; i++) {
    m.mean += x[i];
    m.min = fmin(m.min, x[i]);
    m.max = fmax(m.max, x[i]);
  }
  m.mean /= (double)n;
  for (int64_t i = 0; i < n; i++) m.std += (x[i] - m.mean) * (x[i] - m.mean);
  m.std = sqrt(m.std / (double)n);
  return m;
}

/* ===== generator ====================================================================== */

/* Pinned values: a change here changes every trainer's initial weights. */
static void test_golden_values(void) {
  CHECK_INT(rt_fnv1a64("") == 0xcbf29ce484222325ull, 1);
  CHECK_INT(rt_fnv1a64("a") == 0xaf63dc4c8601ec8cull, 1);
  CHECK_INT(rt_rng_u64(0, "w", 0, 0) == 0x6bdf9353ebb4522aull, 1);
  CHECK_INT(rt_rng_u64(42, "model/decoder/w", 12345, 1) == 0x86321eeff76c818full, 1);
  RtError err;
  RtInit normal = {.kind = RT_INIT_NORMAL, .std = 1};
  float v[3];
  CHECK_OK(rt_init_fill(v, 3, 0, "w", 0, &normal, &err));
  CHECK_NEAR(v[0], 0.956155598, 1e-6);
  CHECK_NEAR(v[1], -2.08567929, 1e-6);
  CHECK_NEAR(v[2], 0.173727483, 1e-6);
}

static void test_deterministic(void) {
  RtError err;
  RtInit init = {.kind = RT_INIT_NORMAL, .std = 0.02f};
  float *a = malloc(1000 * sizeof *a), *b = malloc(1000 * sizeof *b);
  CHECK_OK(rt_init_fill(a, 1000, 0, "model/decoder/w", 7, &init, &err));
  CHECK_OK(rt_init_fill(b, 1000, 0, "model/decoder/w", 7, &init, &err));
  CHECK_INT(memcmp(a, b, 1000 * sizeof *a), 0);
  CHECK_OK(rt_init_fill(b, 1000, 0, "model/decoder/w", 8, &init, &err));
  CHECK_INT(memcmp(a, b, 1000 * sizeof *a) != 0, 1);
  CHECK_OK(rt_init_fill(b, 1000, 0, "model/decoder/v", 7, &init, &err));
  CHECK_INT(memcmp(a, b, 1000 * sizeof *a) != 0, 1);
  free(a);
  free(b);
}

/* Filling [0, n) at once equals filling any split of it at the matching offsets. */
static void test_sharding_independent(void) {
  RtError err;
  const RtInit inits[] = {
      {.kind = RT_INIT_NORMAL, .mean = 1, .std = 0.5f},
      {.kind = RT_INIT_UNIFORM, .lo = -1, .hi = 1},
      {.kind = RT_INIT_TRUNC_NORMAL, .std = 1},
  };
  float whole[1001], parts[1001];
  for (int k = 0; k < 3; k++) {
    CHECK_OK(rt_init_fill(whole, 1001, 0, "p", 3, &inits[k], &err));
    CHECK_OK(rt_init_fill(parts, 500, 0, "p", 3, &inits[k], &err));
    CHECK_OK(rt_init_fill(parts + 500, 501, 500, "p", 3, &inits[k], &err));
    CHECK_INT(memcmp(whole, parts, sizeof whole), 0);
    for (int s = 0; s < 7; s++) /* 7 uneven shards */
      CHECK_OK(rt_init_fill(parts + s * 143, 143, s * 143, "p", 3, &inits[k], &err));
    CHECK_INT(memcmp(whole, parts, sizeof whole), 0);
  }
}

/* ===== distributions ================================================================== */

static void test_constants(void) {
  RtError err;
  float x[4];
  RtInit zeros = {.kind = RT_INIT_ZEROS}, ones = {.kind = RT_INIT_ONES},
         c = {.kind = RT_INIT_CONSTANT, .value = 2.5f};
  CHECK_OK(rt_init_fill(x, 4, 0, "b", 1, &ones, &err));
  CHECK_NEAR(x[3], 1.0, 0);
  CHECK_OK(rt_init_fill(x, 4, 0, "b", 1, &zeros, &err));
  CHECK_NEAR(x[0] + x[1] + x[2] + x[3], 0.0, 0);
  CHECK_OK(rt_init_fill(x, 4, 9, "b", 1, &c, &err));
  CHECK_NEAR(x[2], 2.5, 0);
}

static void test_normal_moments(void) {
  RtError err;
  float *x = malloc(N * sizeof *x);
  RtInit init = {.kind = RT_INIT_NORMAL, .mean = 0.5f, .std = 0.02f};
  CHECK_OK(rt_init_fill(x, N, 0, "model/emb", 1234, &init, &err));
  Moments m = moments(x, N);
  CHECK_NEAR(m.mean, 0.5, 0.02 * 5 / sqrt(N)); /* 5 standard errors */
  CHECK_NEAR(m.std, 0.02, 0.02 * 0.01);
  CHECK_INT(m.min < 0.5 - 0.02 * 3.5 && m.max > 0.5 + 0.02 * 3.5, 1); /* tails are there */
  free(x);
}

static void test_uniform_moments(void) {
  RtError err;
  float *x = malloc(N * sizeof *x);
  RtInit init = {.kind = RT_INIT_UNIFORM, .lo = -1, .hi = 3};
  CHECK_OK(rt_init_fill(x, N, 0, "u", 5, &init, &err));
  Moments m = moments(x, N);
  CHECK_NEAR(m.mean, 1.0, 4 / sqrt(12.0) * 5 / sqrt(N));
  CHECK_NEAR(m.std, 4 / sqrt(12.0), 0.01);
  CHECK_INT(m.min >= -1 && m.max <= 3, 1);
  CHECK_INT(m.min < -0.99 && m.max > 2.99, 1);
  free(x);
}

/* Standard normal cut at +-2: std 0.8796. */
static void test_trunc_normal(void) {
  RtError err;
  float *x = malloc(N * sizeof *x);
  RtInit init = {.kind = RT_INIT_TRUNC_NORMAL, .std = 2};
  CHECK_OK(rt_init_fill(x, N, 0, "t", 5, &init, &err));
  Moments m = moments(x, N);
  CHECK_NEAR(m.mean, 0.0, 0.02);
  CHECK_NEAR(m.std, 2 * 0.8796, 0.02);
  CHECK_INT(m.min >= -4 && m.max <= 4, 1);
  RtInit narrow = {.kind = RT_INIT_TRUNC_NORMAL, .std = 1, .lo = 0, .hi = 0.5f};
  CHECK_OK(rt_init_fill(x, 1000, 0, "t", 5, &narrow, &err));
  m = moments(x, 1000);
  CHECK_INT(m.min >= 0 && m.max <= 0.5, 1);
  free(x);
}

static void test_errors(void) {
  RtError err;
  float x[4];
  RtInit neg = {.kind = RT_INIT_NORMAL, .std = -1},
         flat = {.kind = RT_INIT_UNIFORM, .lo = 1, .hi = 1}, bad = {.kind = (RtInitKind)99},
         tn = {.kind = RT_INIT_TRUNC_NORMAL, .std = 1, .lo = 1, .hi = -1},
         ok = {.kind = RT_INIT_ZEROS};
  CHECK_FAIL(rt_init_fill(x, 4, 0, "model/w", 0, &neg, &err),
             "parameter 'model/w': normal init mean 0 std -1");
  CHECK_FAIL(rt_init_fill(x, 4, 0, "model/w", 0, &flat, &err), "uniform init [1, 1)");
  CHECK_FAIL(rt_init_fill(x, 4, 0, "model/w", 0, &bad, &err), "unknown initializer kind 99");
  CHECK_FAIL(rt_init_fill(x, 4, 0, "model/w", 0, &tn, &err), "truncated normal bounds");
  CHECK_FAIL(rt_init_fill(x, -1, 0, "model/w", 0, &ok, &err), "fill of -1 elements");
  CHECK_FAIL(rt_init_fill(x, 4, -2, "model/w", 0, &ok, &err), "at offset -2");
  CHECK_FAIL(rt_init_fill(NULL, 4, 0, "model/w", 0, &ok, &err), "fill of 4 elements");
  CHECK_OK(rt_init_fill(NULL, 0, 0, "model/w", 0, &ok, &err));
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"golden values", test_golden_values},
      {"deterministic", test_deterministic},
      {"sharding independent", test_sharding_independent},
      {"constants", test_constants},
      {"normal moments", test_normal_moments},
      {"uniform moments", test_uniform_moments},
      {"truncated normal", test_trunc_normal},
      {"errors", test_errors},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_init", cases);
}
