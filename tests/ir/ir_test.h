/* ir_test.h: helpers shared by the ir_ and passes_ CUnit tests.
 *
 * Assertions print the expression and both values when they fail; graphs are run on the
 * reference interpreter with inputs bound by name (shape taken from the graph).
 */
#ifndef AXLC_TESTS_IR_TEST_H
#define AXLC_TESTS_IR_TEST_H

#include <CUnit/Basic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

#define EXPECT_NEAR(a, b, tol)                                                                     \
  do {                                                                                             \
    double a_ = (a), b_ = (b);                                                                     \
    if (!(fabs(a_ - b_) <= (tol)))                                                                 \
      fprintf(stderr, "%s:%d: %s = %.17g, %s = %.17g\n", __FILE__, __LINE__, #a, a_, #b, b_);      \
    CU_ASSERT(fabs(a_ - b_) <= (tol));                                                             \
  } while (0)

#define EXPECT_INT(a, b)                                                                           \
  do {                                                                                             \
    long long a_ = (long long)(a), b_ = (long long)(b);                                            \
    if (a_ != b_)                                                                                  \
      fprintf(stderr, "%s:%d: %s = %lld, %s = %lld\n", __FILE__, __LINE__, #a, a_, #b, b_);        \
    CU_ASSERT(a_ == b_);                                                                           \
  } while (0)

#define EXPECT_STR_HAS(hay, needle)                                                                \
  do {                                                                                             \
    const char *h_ = (hay);                                                                        \
    if (!h_ || !strstr(h_, (needle)))                                                              \
      fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,               \
              h_ ? h_ : "(null)", (needle));                                                       \
    CU_ASSERT(h_ &&strstr(h_, (needle)));                                                          \
  } while (0)

#define EXPECT_ARRAY(got, want, n, tol)                                                            \
  do {                                                                                             \
    const double *g_ = (got), *w_ = (want);                                                        \
    CU_ASSERT_PTR_NOT_NULL_FATAL(g_);                                                              \
    for (int64_t i_ = 0; i_ < (int64_t)(n); i_++) {                                                \
      if (!(fabs(g_[i_] - w_[i_]) <= (tol)))                                                       \
        fprintf(stderr, "%s:%d: %s[%lld] = %.17g, %s[%lld] = %.17g\n", __FILE__, __LINE__, #got,   \
                (long long)i_, g_[i_], #want, (long long)i_, w_[i_]);                              \
      CU_ASSERT(fabs(g_[i_] - w_[i_]) <= (tol));                                                   \
    }                                                                                              \
  } while (0)

/* Binds name on every device with the value's own shape. */
static inline int test_bind(IrInterp *it, const IrGraph *g, const char *name, const double *data) {
  int32_t v = ir_graph_find(g, IR_PARAMETER, name);
  if (v == IR_NONE) v = ir_graph_find(g, IR_INPUT, name);
  if (v == IR_NONE) return IR_ERR;
  return ir_interp_set(it, -1, name, g->values[v].shape.rank, g->values[v].shape.dims, data);
}

/* Runs g on one device with inputs bound, returns a malloc'd copy of output `out` (NULL on
 * error, printed). */
static inline double *test_run(const IrGraph *g, int n, const char *const *names,
                               const double *const *data, const char *out) {
  IrInterp *it = ir_interp_new(g, NULL);
  double *res = NULL;
  for (int i = 0; i < n; i++)
    if (test_bind(it, g, names[i], data[i])) goto done;
  if (ir_interp_run(it)) goto done;
  IrShape s;
  const double *p = ir_interp_output(it, 0, out, &s);
  if (!p) goto done;
  res = malloc((size_t)(ir_shape_numel(&s) + 1) * sizeof *res);
  memcpy(res, p, (size_t)ir_shape_numel(&s) * sizeof *res);
done:
  if (!res) fprintf(stderr, "test_run: %s\n", ir_interp_error(it) ? ir_interp_error(it) : "?");
  ir_interp_free(it);
  return res;
}

static inline int test_main(CU_SuiteInfo *suites) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  if (CU_register_suites(suites) != CUE_SUCCESS) return 2;
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
  CU_cleanup_registry();
  return failed ? 1 : 0;
}

/* UNDER_ASAN: defined in an AddressSanitizer build (GCC or clang), whose allocator reports a
 * request larger than any machine has instead of returning NULL; the tests of huge requests
 * are skipped there. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#endif
