/*
 * cunit_check.h: the one assertion dialect of the CUnit tests, and their one main.
 *
 * Every CHECK records a CUnit failure whose message says what was found and what was expected
 * (STYLE.md, Tests); a failed check does not stop the case, a failed REQUIRE_MSG does.
 *   CHECK(cond)                     cond holds
 *   CHECK_MSG(cond, fmt, ...)       cond holds; the message is formatted
 *   CHECK_INT(got, want)            equal as integers
 *   CHECK_NEAR(got, want, tol)      |got - want| <= tol (NaN fails)
 *   CHECK_STR(got, want)            equal strings (or both NULL)
 *   CHECK_HAS(hay, needle, ...)     hay contains every needle
 *   CHECK_LACKS(hay, needle)        hay (or NULL) does not contain needle
 *   CHECK_ARRAY(got, want, n, tol)  n doubles, each within tol
 * A test program's main is test_main: its cases, { NULL, NULL } ended, run as one suite;
 * arguments name the cases to run (a case runs when its name begins with one of them). A case
 * that cannot run on this machine calls test_skipped(why); the program then exits 77, CTest's
 * skip (SKIP_RETURN_CODE 77), unless a check failed. Layers add their own fixtures around
 * these (tests/frontend/fe_test.h, tests/runtime/rt_test.h, tests/ir/ir_test.h,
 * tests/backends/backend_test.h), never their own checks.
 */
#ifndef AXLC_TESTS_CUNIT_CHECK_H
#define AXLC_TESTS_CUNIT_CHECK_H

#include <CUnit/Basic.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_MSG_MAX 4096

#define CHECK_AT_(fatal, cond, ...)                                                                \
  do {                                                                                             \
    char m_[CHECK_MSG_MAX];                                                                        \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                                          \
    CU_assertImplementation((cond) ? CU_TRUE : CU_FALSE, __LINE__, m_, __FILE__, "", fatal);       \
  } while (0)

#define CHECK_MSG(cond, ...)   CHECK_AT_(CU_FALSE, cond, __VA_ARGS__)
#define REQUIRE_MSG(cond, ...) CHECK_AT_(CU_TRUE, cond, __VA_ARGS__)
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    bool ok_ = (cond);                                                                             \
    CHECK_MSG(ok_, "expected %s", #cond);                                                          \
  } while (0)

#define CHECK_INT(got, want)                                                                       \
  do {                                                                                             \
    long long g_ = (long long)(got), w_ = (long long)(want);                                       \
    CHECK_MSG(g_ == w_, "%s == %s: got %lld, want %lld", #got, #want, g_, w_);                     \
  } while (0)

#define CHECK_NEAR(got, want, tol)                                                                 \
  do {                                                                                             \
    double g_ = (got), w_ = (want), t_ = (tol);                                                    \
    CHECK_MSG(fabs(g_ - w_) <= t_, "%s ~= %s: got %.17g, want %.17g (tolerance %g)", #got, #want,  \
              g_, w_, t_);                                                                         \
  } while (0)

#define CHECK_STR(got, want)                                                                       \
  do {                                                                                             \
    const char *g_ = (got), *w_ = (want);                                                          \
    CHECK_MSG(g_ &&w_ ? strcmp(g_, w_) == 0 : g_ == w_,                                            \
              "%s == %s\n    got:  %.900s\n    want: %.900s", #got, #want, g_ ? g_ : "(null)",     \
              w_ ? w_ : "(null)");                                                                 \
  } while (0)

#define CHECK_HAS(hay, ...)                                                                        \
  do {                                                                                             \
    const char *nd_[] = {__VA_ARGS__, NULL};                                                       \
    const char *h_ = (hay);                                                                        \
    for (int i_ = 0; nd_[i_]; i_++)                                                                \
      CHECK_MSG(h_ &&strstr(h_, nd_[i_]), "%s contains \"%.400s\"\n    got: %.2000s", #hay,        \
                nd_[i_], h_ ? h_ : "(null)");                                                      \
  } while (0)

#define CHECK_LACKS(hay, needle)                                                                   \
  do {                                                                                             \
    const char *h_ = (hay), *n_ = (needle);                                                        \
    CHECK_MSG(!h_ || !strstr(h_, n_), "%s does not contain \"%.400s\"\n    got: %.2000s", #hay,    \
              n_, h_ ? h_ : "(null)");                                                             \
  } while (0)

#define CHECK_ARRAY(got, want, n, tol)                                                             \
  do {                                                                                             \
    const double *ga_ = (got), *wa_ = (want);                                                      \
    REQUIRE_MSG(ga_ != NULL, "%s is not NULL", #got);                                              \
    for (int64_t i_ = 0; i_ < (int64_t)(n); i_++)                                                  \
      CHECK_MSG(fabs(ga_[i_] - wa_[i_]) <= (tol), "%s[%lld] = %.17g, %s[%lld] = %.17g", #got,      \
                (long long)i_, ga_[i_], #want, (long long)i_, wa_[i_]);                            \
  } while (0)

/* ---- the runner ----------------------------------------------------------------------------- */

typedef struct TestCase {
  const char *name;
  void (*fn)(void);
} TestCase;

/* Hooks of a layer's fixture: once before the cases, and around each case (any may be NULL). */
typedef struct TestHooks {
  int (*before_all)(void);
  void (*before_each)(void);
  void (*after_each)(void);
} TestHooks;

static inline int *test_skips_(void) {
  static int n;
  return &n;
}

/* The running case cannot run here (a CPU feature, a device is missing): says why on stderr;
 * the case should return. */
static inline void test_skipped(const char *why) {
  fprintf(stderr, "\n  SKIP: %s\n", why);
  ++*test_skips_();
}

static inline int test_noop_init_(void) { return 0; }

/* Runs `cases` (ended by {NULL, NULL}) as the suite `suite`, only those named in argv[1..] if
 * any; returns the exit status: 0 passed, 1 a check failed, 2 a setup error or an argument
 * that names no case, 77 skipped (some case called test_skipped, none failed). A rank of an MPI
 * job other than 0 runs silently. */
static inline int test_main_with(int argc, char **argv, const char *suite, const TestCase *cases,
                                 const TestHooks *hooks) {
  static const TestHooks none;
  if (!hooks) hooks = &none;
  if (hooks->before_all && hooks->before_all() != 0) return 2;
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite_with_setup_and_teardown(suite, test_noop_init_, test_noop_init_,
                                                     hooks->before_each, hooks->after_each);
  if (!s) return 2;
  for (int a = 1; a < argc; a++) {
    bool named = false;
    for (const TestCase *c = cases; c->name; c++)
      named |= strncmp(c->name, argv[a], strlen(argv[a])) == 0;
    if (!named) {
      fprintf(stderr, "%s: no case named \"%s\"\n", suite, argv[a]);
      CU_cleanup_registry();
      return 2;
    }
  }
  for (const TestCase *c = cases; c->name; c++) {
    bool want = argc <= 1;
    for (int a = 1; a < argc; a++) want |= strncmp(c->name, argv[a], strlen(argv[a])) == 0;
    if (want && !CU_add_test(s, c->name, c->fn)) {
      CU_cleanup_registry();
      return 2;
    }
  }
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  CU_basic_set_mode(rank && strcmp(rank, "0") != 0 ? CU_BRM_SILENT : CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures();
  CU_cleanup_registry();
  return failed ? 1 : *test_skips_() ? 77 : 0;
}

static inline int test_main(int argc, char **argv, const char *suite, const TestCase *cases) {
  return test_main_with(argc, argv, suite, cases, NULL);
}

#endif
