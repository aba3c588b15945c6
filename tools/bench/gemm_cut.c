/*
 * gemm_cut.c: the matrix products a training step runs, timed under several rules for how
 * rt_sgemm (runtime/blas.c) cuts a product into work items, to choose the rule.
 *
 * rt_sgemm gives each batch element an item when batch >= 4, else cuts the larger side into
 * parts(n) blocks (rounded up to 16), each item one single-threaded OpenBLAS call on the
 * runtime's pool. Every block packs the shared operand again; fewer, larger blocks pack less
 * but leave a thread idle sooner when the blocks do not come out even. A rule here is a
 * parts() function: n / FLOOR blocks, at least LO (2 where n >= 256, so both threads of a
 * pair get work) and at most CAP. Only parts() changes between rules; the batch rule and the
 * choice of side stay the runtime's.
 *
 * Each round times every shape once under every rule, in an order that rotates with the round
 * and the shape, so a burst of other work on the machine costs all rules alike. A time is the
 * mean over enough calls to take about 30 ms. A round's step total weighs each shape by how
 * often one training step runs it; the table gives each rule's best and median round total.
 * Ratios are to the first rule timed ("n/128", the runtime's unless -R says otherwise). The
 * runtime's rule is checked to give rt_sgemm's bits, and every rule's result is compared with
 * rt_sgemm's (max |C - ref| / max |ref| <= 1e-5).
 *   usage: gemm_cut [-r ROUNDS] [-t THREADS] [-m gpt2|small|long] [-R RULE,...] [SHAPE...]
 * with SHAPE as COUNT:BATCH:TA:TB:M:N:K; without one, the shapes of the three models below.
 * -R times only the rules named (the first is the ratios' base): fewer rules, more rounds.
 * Needs only OpenBLAS and the runtime.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/axrt.h"
#include "tools/bench/gemm_bench.h"

/* parts(n) = n / floor, clamped to [lo, cap], lo = 2 where min2 and n >= 256, else 1. */
typedef struct {
  const char *name;
  int64_t floor, cap;
  int min2, runtime; /* runtime: runtime/blas.c's parts(), checked to give rt_sgemm's bits */
} Rule;

static const Rule ALL_RULES[] = {
    {"n/128", 128, 16, 0, 1}, /* runtime/blas.c's parts() */
    {"n/256", 256, 16, 1, 0}, {"n/512", 512, 16, 1, 0}, {"n/1024", 1024, 16, 1, 0},
    {"cap8", 128, 8, 0, 0},   {"cap4", 128, 4, 0, 0},   {"cap2", 128, 2, 0, 0},
};
enum { NALL = sizeof ALL_RULES / sizeof ALL_RULES[0], MAXROUNDS = 200 };

/* The rules timed: all, or those -R names. A tool's one-run state, set once in main. */
static Rule RULES[NALL];
static int nrules;

static void pick_rules(const char *names) {
  nrules = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", names);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    int r = 0;
    while (r < NALL && strcmp(ALL_RULES[r].name, tok)) r++;
    if (r == NALL || nrules == NALL) {
      fprintf(stderr, "gemm_cut: no rule %s\n", tok);
      exit(2);
    }
    RULES[nrules++] = ALL_RULES[r];
  }
}

static int64_t rule_parts(const Rule *r, int64_t n) {
  int64_t p = n / r->floor, lo = r->min2 && n >= 256 ? 2 : 1;
  return p < lo ? lo : p > r->cap ? r->cap : p;
}

/* One product's operands: batch x (A, B, C), row-major with natural leading dimensions. */
/* ===== the cut: a copy of rt_sgemm with parts() taken from a rule ===== */

typedef struct {
  const Prod *p;
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
    cblas_sgemm(CblasRowMajor, p->s.ta ? CblasTrans : CblasNoTrans,
                p->s.tb ? CblasTrans : CblasNoTrans, (int)mlen, (int)nlen, p->s.k, 1.0f, a, p->lda,
                bb, p->ldb, 0.0f, c, p->ldc);
  }
}

static Cut cut_of(const Rule *r, const Prod *p) {
  Cut g = {p, 1, 1};
  if (p->s.batch < 4) {
    if (p->s.m >= p->s.n)
      g.split_m = rule_parts(r, p->s.m);
    else
      g.split_n = rule_parts(r, p->s.n);
  }
  return g;
}

static void cut_run(RtPool *pool, const Rule *r, const Prod *p) {
  Cut g = cut_of(r, p);
  rt_parallel_for(pool, p->s.batch * g.split_m * g.split_n, cut_items, &g);
}

/* ===== operands and checks ===== */

/* ===== timing ===== */

/* Seconds per call, the mean over `reps` calls. */
static double time_rule(RtPool *pool, const Rule *r, const Prod *p, int reps) {
  double t0 = gemm_now();
  for (int i = 0; i < reps; i++) cut_run(pool, r, p);
  return (gemm_now() - t0) / reps;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static double median(const double *x, int n) {
  double s[MAXROUNDS];
  memcpy(s, x, (size_t)n * sizeof *x);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static double best(const double *x, int n) {
  double b = x[0];
  for (int i = 1; i < n; i++) b = fmin(b, x[i]);
  return b;
}

/* ===== one model ===== */

/* Checks every rule against rt_sgemm, then times `rounds` rounds; fills t[shape][rule][round]. */
static void measure(RtPool *pool, const Model *mo, int rounds, double (*t)[NALL][MAXROUNDS],
                    int *reps) {
  Prod *ps = calloc((size_t)mo->n, sizeof *ps);
  for (int s = 0; s < mo->n; s++) {
    ps[s] = gemm_prod_new(mo->shapes[s], pool);
    for (int r = 0; r < nrules; r++) {
      cut_run(pool, &RULES[r], &ps[s]);
      double e = gemm_rel_err(&ps[s]);
      if ((RULES[r].runtime && e != 0) || e > 1e-5) {
        fprintf(stderr, "gemm_cut: %s: rule %s differs from rt_sgemm (%.1e)\n", mo->name,
                RULES[r].name, e);
        exit(1);
      }
    }
    double one = time_rule(pool, &RULES[0], &ps[s], 1);
    reps[s] = one >= 0.03 ? 1 : (int)(0.03 / one) + 1;
  }
  for (int k = 0; k < rounds; k++)
    for (int s = 0; s < mo->n; s++)
      for (int j = 0; j < nrules; j++) {
        int r = (j + k + s) % nrules;
        t[s][r][k] = time_rule(pool, &RULES[r], &ps[s], reps[s]);
      }
  for (int s = 0; s < mo->n; s++) gemm_prod_free(&ps[s]);
  free(ps);
}

static void print_parts(const Shape *sh) {
  for (int r = 0; r < nrules; r++) {
    Prod p = {.s = *sh};
    Cut g = cut_of(&RULES[r], &p);
    printf(" %lld", (long long)(sh->batch * g.split_m * g.split_n));
  }
}

static void report(const Model *mo, int rounds, double (*t)[NALL][MAXROUNDS], const int *reps) {
  printf("\n%s, %d rounds; per shape: items under each rule, then median ms per call\n", mo->name,
         rounds);
  printf("| count | batch ta tb M N K | reps | items |");
  for (int r = 0; r < nrules; r++) printf(" %s |", RULES[r].name);
  printf("\n");
  double total[NALL][MAXROUNDS] = {{0}};
  for (int s = 0; s < mo->n; s++) {
    const Shape *sh = &mo->shapes[s];
    printf("| %d | %d %d %d %d %d %d | %d |", sh->count, sh->batch, sh->ta, sh->tb, sh->m, sh->n,
           sh->k, reps[s]);
    print_parts(sh);
    printf(" |");
    for (int r = 0; r < nrules; r++) {
      printf(" %.3f |", 1e3 * median(t[s][r], rounds));
      for (int k = 0; k < rounds; k++) total[r][k] += 1e3 * sh->count * t[s][r][k];
    }
    printf("\n");
  }
  double ref_best = best(total[0], rounds), ref_med = median(total[0], rounds);
  printf("\n%s step total, ms: rule | best | median | best/base | median/base | paired\n"
         "(base: the first rule; paired: the median over rounds of the round's ratio to it)\n",
         mo->name);
  for (int r = 0; r < nrules; r++) {
    double b = best(total[r], rounds), m = median(total[r], rounds), ratio[MAXROUNDS];
    for (int k = 0; k < rounds; k++) ratio[k] = total[r][k] / total[0][k];
    printf("| %s | %s | %.1f | %.1f | %.3f | %.3f | %.3f |\n", mo->name, RULES[r].name, b, m,
           b / ref_best, m / ref_med, median(ratio, rounds));
  }
  fflush(stdout);
}

/* ===== driver ===== */

static void usage(void) {
  fprintf(stderr, "usage: gemm_cut [-r ROUNDS] [-t THREADS] [-m gpt2|small|long] [SHAPE...]\n"
                  "  SHAPE: COUNT:BATCH:TA:TB:M:N:K\n");
  exit(2);
}

int main(int argc, char **argv) {
  /* this tool studies OpenBLAS's items: rt_sgemm must not take its own product (sgemm_own
   * measures that one), so that the copies of its cut here give rt_sgemm's bits */
  setenv("AXLC_SGEMM", "openblas", 1);
  int rounds = 11, threads = 2, nshapes = 0;
  memcpy(RULES, ALL_RULES, sizeof RULES);
  nrules = NALL;
  const char *only = NULL;
  static Shape shapes[64];
  for (int i = 1; i < argc; i++) {
    if (gemm_common_option(argc, argv, &i, &rounds, &threads, &only)) continue;
    if (!strcmp(argv[i], "-R") && i + 1 < argc)
      pick_rules(argv[++i]);
    else if (nshapes < 64 && gemm_parse_shape(argv[i], &shapes[nshapes]))
      nshapes++;
    else
      usage();
  }
  if (rounds < 1 || rounds > MAXROUNDS || threads < 1 || nrules < 1) usage();
  openblas_set_num_threads(1); /* as rt_train_main: one thread per item */
  RtPool *pool;
  RtError err;
  if (rt_pool_new(&pool, threads, &err) != 0) {
    fprintf(stderr, "gemm_cut: no thread pool\n");
    return 1;
  }
  Model given = {"shapes", shapes, nshapes};
  const Model *list = nshapes ? &given : MODELS;
  int nmodels = nshapes ? 1 : (int)(sizeof MODELS / sizeof MODELS[0]);
  printf("gemm_cut: %d threads, %d rounds; rules:", threads, rounds);
  for (int r = 0; r < nrules; r++)
    printf(" %s (n/%lld in [%s, %lld])", RULES[r].name, (long long)RULES[r].floor,
           RULES[r].min2 ? "2" : "1", (long long)RULES[r].cap);
  printf("\n");
  for (int i = 0; i < nmodels; i++) {
    if (only && strcmp(only, list[i].name)) continue;
    double(*t)[NALL][MAXROUNDS] = calloc((size_t)list[i].n, sizeof *t);
    int *reps = calloc((size_t)list[i].n, sizeof *reps);
    measure(pool, &list[i], rounds, t, reps);
    report(&list[i], rounds, t, reps);
    free(t), free(reps);
  }
  rt_pool_free(pool);
  return 0;
}
