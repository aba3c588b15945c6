/*
 * test_sample.c: rt_sample_pick, the sampler's choice of the next token (sample.c). Greedy takes
 * the largest logit (the first of equal ones); top-k 1 is greedy at any temperature; draws under
 * top-k and top-p land only on the tokens they allow, reach every one of them, and keep their
 * renormalized frequencies; the set each allows is computed here independently (sorted by
 * probability in double). A non-finite logit is refused.
 */
#include <math.h>
#include <stdlib.h>

#include "rt_test.h"
#include "runtime/rt_impl.h"

enum { V = 40, DRAWS = 20000 };

static void logits_fill(float *l, uint64_t seed) {
  for (int i = 0; i < V; i++)
    l[i] = (float)((double)(rt_rng_u64(seed, "test.logits", i, 0) >> 11) * 0x1p-53 * 6.0 - 3.0);
}

/* allowed[i] per top-k and top-p, from the probabilities at temperature t sorted descending
 * (a selection sort: V is small). Returns how many. */
static int allowed_set(const float *l, double t, int64_t top_k, double top_p, int *allowed) {
  int order[V], n = top_k > 0 && top_k < V ? (int)top_k : V;
  for (int i = 0; i < V; i++) order[i] = i, allowed[i] = 0;
  for (int i = 0; i < V; i++)
    for (int j = i + 1; j < V; j++)
      if (l[order[j]] > l[order[i]] || (l[order[j]] == l[order[i]] && order[j] < order[i])) {
        int x = order[i];
        order[i] = order[j], order[j] = x;
      }
  double sum = 0, acc = 0;
  for (int i = 0; i < n; i++) sum += exp(l[order[i]] / t);
  int keep = n;
  for (int i = 0; i < n && top_p < 1; i++) {
    acc += exp(l[order[i]] / t);
    if (acc >= top_p * sum) {
      keep = i + 1;
      break;
    }
  }
  for (int i = 0; i < keep; i++) allowed[order[i]] = 1;
  return keep;
}

/* DRAWS draws at temperature t: every pick allowed, every allowed token picked, each token's
 * share within 6 standard deviations of its renormalized probability. */
static void check_draws(double t, int64_t top_k, double top_p, uint64_t seed) {
  float l[V];
  int32_t order[V];
  int allowed[V], count[V] = {0};
  logits_fill(l, seed);
  int n = allowed_set(l, t, top_k, top_p, allowed);
  double sum = 0;
  for (int i = 0; i < V; i++) sum += allowed[i] ? exp(l[i] / t) : 0;
  for (int64_t k = 0; k < DRAWS; k++) {
    int64_t tok = rt_sample_pick(l, V, t, top_k, top_p, seed, k, order);
    CU_ASSERT_TRUE_FATAL(tok >= 0 && tok < V);
    if (!allowed[tok]) {
      char m[128];
      snprintf(m, sizeof m, "top-k %lld top-p %g: token %lld is not allowed", (long long)top_k,
               top_p, (long long)tok);
      CU_FAIL(m);
      return;
    }
    count[tok]++;
  }
  int seen = 0;
  for (int i = 0; i < V; i++) {
    seen += count[i] > 0;
    double p = allowed[i] ? exp(l[i] / t) / sum : 0, sd = sqrt(DRAWS * p * (1 - p)) + 1;
    CHECK_NEAR((double)count[i], DRAWS * p, 6 * sd);
  }
  CHECK_INT(seen, n);
}

static void test_greedy(void) {
  float l[V];
  int32_t order[V];
  logits_fill(l, 1);
  int64_t best = 0;
  for (int i = 1; i < V; i++)
    if (l[i] > l[best]) best = i;
  for (int64_t k = 0; k < 50; k++) {
    CHECK_INT(rt_sample_pick(l, V, 0, 0, 1, 9, k, order), best);
    /* top-k 1: the most likely at any temperature */
    CHECK_INT(rt_sample_pick(l, V, 1, 1, 1, 9, k, order), best);
    CHECK_INT(rt_sample_pick(l, V, 5, 1, 1, 9, k, order), best);
  }
  l[7] = l[30] = 10; /* equal largest: the first */
  CHECK_INT(rt_sample_pick(l, V, 0, 0, 1, 9, 0, order), 7);
  CHECK_INT(rt_sample_pick(l, V, 2, 1, 1, 9, 3, order), 7);
  l[3] = NAN;
  CHECK_INT(rt_sample_pick(l, V, 0, 0, 1, 9, 0, order), -1);
  l[3] = INFINITY;
  CHECK_INT(rt_sample_pick(l, V, 1, 3, 0.5, 9, 0, order), -1);
}

static void test_top_k(void) {
  check_draws(1.0, 5, 1, 2);
  check_draws(0.7, 12, 1, 3);
  check_draws(1.0, V, 1, 4); /* all: the plain draw */
}

static void test_top_p(void) {
  check_draws(1.0, 0, 0.5, 5);
  check_draws(1.5, 0, 0.9, 6);
  check_draws(0.5, 0, 0.01, 7); /* the most likely alone */
}

static void test_both(void) {
  check_draws(1.0, 8, 0.6, 8);
  check_draws(2.0, 20, 0.95, 9);
}

/* Equal logits at the top-k cut: the lower ids are the ones kept. */
static void test_ties(void) {
  float l[V];
  int32_t order[V];
  for (int i = 0; i < V; i++) l[i] = i < 10 ? 1.0f : 0.0f;
  for (int64_t k = 0; k < 2000; k++) {
    int64_t tok = rt_sample_pick(l, V, 1, 4, 1, 11, k, order);
    CU_ASSERT_TRUE(tok >= 0 && tok < 4);
  }
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"greedy and top-k 1", test_greedy}, {"top-k draws", test_top_k},
      {"top-p draws", test_top_p},         {"top-k and top-p draws", test_both},
      {"top-k ties", test_ties},           {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_sample", cases);
}
