/* test_math.c: accuracy of the backend's inline exp, log, tanh and logistic (math.c) against
 * libm in double, over 2^20 inputs each spread across the f32 range, and their special values.
 *
 * Each function is one elementwise kernel of a (N) graph, compiled at O3 so the vectorized loop
 * is what runs (the O0 scalar code is the same IR). Error is counted in units of the last place
 * of the correctly rounded result (subnormal results in units of 2^-149), printed per function,
 * and bounded: the design goal is about 2 ulp.
 */
#include "backend_test.h"

#include <stdint.h>

enum { N = 1 << 20 };
#define MAX_ULP 3.0

typedef struct MathCase {
  const char *name;
  IrOp op;
  double (*ref)(double);
} MathCase;

static double logistic_ref(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ulp of the f32 nearest to r; 2^-149 for subnormals and zero. */
static double ulp_f32(double r) {
  float f = fabsf((float)r);
  if (isinf(f)) f = 3.40282347e38f;
  double u = (double)nextafterf(f, INFINITY) - (double)f;
  return u > 0x1p-149 ? u : 0x1p-149;
}

static uint64_t next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 11;
}

/* Inputs for op: uniform over the interesting range, plus every binade near zero (log: every
 * positive float's exponent, subnormals included), plus special values at the front. */
static void fill(IrOp op, double *x, uint64_t seed) {
  static const double special[] = {0.0,    -0.0,     INFINITY,   -INFINITY,     NAN,       1.0,
                                   -1.0,   88.72283, 88.7228394, 89.0,          -87.33655, -103.972,
                                   -104.0, -110.0,   1e-30,      -1e-30,        0.625,     -0.625,
                                   9.0,    -9.0,     1e-45,      1.17549435e-38};
  int ns = (int)(sizeof special / sizeof special[0]);
  for (int i = 0; i < ns; i++) x[i] = (float)special[i]; /* what the f32 kernel sees */
  for (int64_t i = ns; i < N; i++) {
    double u = (double)next(&seed) / 9007199254740992.0;
    float f;
    if (op == IR_LOG) {
      uint32_t bits = (uint32_t)next(&seed) & 0x7f7fffffu; /* positive, finite */
      memcpy(&f, &bits, 4);
    } else if (i % 2) {
      f = (float)(op == IR_TANH ? 40 * u - 20 : 230 * u - 115);
    } else {
      f = (float)((u < 0.5 ? -1 : 1) * ldexp(1.0, -(int)(next(&seed) % 40)) * (1 + u));
    }
    x[i] = f;
  }
}

/* Max error in ulp of got against ref over n values; special values must match exactly in
 * kind (NaN, inf, sign of saturation). */
static double max_ulp(const MathCase *m, const double *x, const float *got, double *max_rel) {
  double worst = 0;
  int bad = 0;
  *max_rel = 0;
  for (int64_t i = 0; i < N; i++) {
    double r = m->ref(x[i]), g = got[i];
    if (isnan(r) || isinf((float)r)) {
      bool same = isnan(r) ? isnan(g) : g == (double)(float)r;
      if (!same) fprintf(stderr, "%s(%.9g): got %.9g, want %.9g\n", m->name, x[i], g, r);
      CU_ASSERT(same);
      continue;
    }
    double e = fabs(g - r) / ulp_f32(r);
    if (e > worst) worst = e;
    if (e > MAX_ULP && bad++ < 5)
      fprintf(stderr, "%s(%.9g): got %.9g, want %.9g (%.2f ulp)\n", m->name, x[i], g, r, e);
    if (r != 0 && fabs(r) >= 0x1p-126) *max_rel = fmax(*max_rel, fabs(g - r) / fabs(r));
  }
  return worst;
}

static void test_accuracy(void) {
  const MathCase cases[] = {{"exp", IR_EXP, exp},
                            {"log", IR_LOG, log},
                            {"tanh", IR_TANH, tanh},
                            {"logistic", IR_LOGISTIC, logistic_ref}};
  enum { NC = sizeof cases / sizeof cases[0] };
  IrGraph *g = ir_graph_new();
  const int64_t d[] = {N};
  char name[32];
  BtBind binds[NC];
  double *data[NC];
  for (int c = 0; c < NC; c++) {
    snprintf(name, sizeof name, "x_%s", cases[c].name);
    int32_t x = ir_param(g, name, DT_F32, 1, d);
    CU_ASSERT_EQUAL(ir_graph_add_output(g, cases[c].name, ir_unary(g, cases[c].op, x)), IR_OK);
    data[c] = malloc(N * sizeof(double));
    fill(cases[c].op, data[c], 1000 + (uint64_t)c);
    binds[c] = (BtBind){g->values[x].name, data[c]};
  }
  double **leaf = bt_leaf_data(g, binds, NC);
  MemPlan mp;
  bt_plan_simple(g, &mp);
  LlvmOptions o = llvm_options_default();
  char *slab = bt_run_backend(g, &mp, &o, leaf, NULL, "math O3");
  for (int c = 0; slab && c < NC; c++) {
    const float *got = (const float *)(slab + mp.offset[g->outputs[c].value]);
    double rel, u = max_ulp(&cases[c], data[c], got, &rel);
    printf("\n    %-8s max error %.2f ulp, max relative error %.3g (normal results)", cases[c].name,
           u, rel);
    CU_ASSERT(u <= MAX_ULP);
  }
  printf("\n");
  free(slab);
  free(mp.offset);
  free(mp.bytes);
  for (int32_t v = 0; v < g->nvalues; v++) free(leaf[v]);
  free(leaf);
  for (int c = 0; c < NC; c++) free(data[c]);
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"accuracy", test_accuracy},
      {NULL, NULL},
  };
  return test_main(argc, argv, "backend_math", cases);
}
