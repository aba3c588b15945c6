/*
 * test_error.c: the status convention: a message that fits is kept whole; one too long for
 * RtError keeps its head (what failed) and its tail (why), never just the head. And the
 * environment variables a trainer reads: the default when unset or empty, the value when it
 * is one, an error naming the variable otherwise.
 */
#include <stdlib.h>

#include "rt_test.h"

static void test_fits(void) {
  RtError err;
  CHECK_INT(rt_error_set(&err, "%s: %d", "file.bin", 42), -1);
  CHECK_INT(strcmp(err.msg, "file.bin: 42"), 0);
  CHECK_INT(rt_error_set(NULL, "ignored %d", 1), -1);
}

static void test_long_keeps_reason(void) {
  RtError err;
  size_t n = 3 * RT_ERROR_MAX;
  char *path = malloc(n + 1);
  for (size_t i = 0; i < n; i++) path[i] = i % 2 ? 'a' : '/';
  path[n] = '\0';
  rt_error_set(&err, "--data: %s/train.bin: cannot open: No such file or directory", path);
  size_t len = strlen(err.msg);
  CHECK_INT(len < RT_ERROR_MAX, 1);
  CHECK_INT(len > RT_ERROR_MAX - 16, 1);
  CHECK_INT(strncmp(err.msg, "--data: /a/a", 12), 0);
  CHECK_INT(strstr(err.msg, " ... ") != NULL, 1);
  const char *tail = "/train.bin: cannot open: No such file or directory";
  CHECK_INT(strcmp(err.msg + len - strlen(tail), tail), 0);
  free(path);
}

static void test_env_int(void) {
  RtError err;
  int64_t v = -7;
  unsetenv("AXLC_TEST_N");
  CHECK_OK(rt_env_int("AXLC_TEST_N", 100, 0, 1000, &v, &err));
  CHECK_INT(v, 100);
  setenv("AXLC_TEST_N", "", 1);
  CHECK_OK(rt_env_int("AXLC_TEST_N", 100, 0, 1000, &v, &err));
  CHECK_INT(v, 100);
  setenv("AXLC_TEST_N", "1000", 1);
  CHECK_OK(rt_env_int("AXLC_TEST_N", 100, 0, 1000, &v, &err));
  CHECK_INT(v, 1000);
  static const char *const bad[] = {"abc", "12x", "1001", "-1", " ", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("AXLC_TEST_N", bad[i], 1);
    char want[200];
    snprintf(want, sizeof want,
             "AXLC_TEST_N=%s: expected a whole number from 0 to 1000 (unset: 100)", bad[i]);
    CHECK_FAIL(rt_env_int("AXLC_TEST_N", 100, 0, 1000, &v, &err), want);
    CHECK_INT(strcmp(err.msg, want), 0);
    CHECK_INT(v, 100);
  }
  unsetenv("AXLC_TEST_N");
}

static void test_env_seconds(void) {
  RtError err;
  double v = 0;
  unsetenv("AXLC_TEST_S");
  CHECK_OK(rt_env_seconds("AXLC_TEST_S", 20, &v, &err));
  CHECK_INT(v == 20, 1);
  setenv("AXLC_TEST_S", "0.5", 1);
  CHECK_OK(rt_env_seconds("AXLC_TEST_S", 20, &v, &err));
  CHECK_INT(v == 0.5, 1);
  static const char *const bad[] = {"0", "-3", "abc", "inf", "nan", "5s"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("AXLC_TEST_S", bad[i], 1);
    char want[200];
    snprintf(want, sizeof want, "AXLC_TEST_S=%s: expected a number of seconds above 0 (unset: 20)",
             bad[i]);
    CHECK_FAIL(rt_env_seconds("AXLC_TEST_S", 20, &v, &err), want);
    CHECK_INT(strcmp(err.msg, want), 0);
  }
  unsetenv("AXLC_TEST_S");
}

/* rt_env_check: each variable a trainer reads, checked with its own range. */
static void test_env_check(void) {
  static const struct {
    const char *name, *value, *msg; /* msg NULL: accepted */
  } cases[] = {
      {"AXLC_SGEMM", "openblas", NULL},
      {"AXLC_SGEMM", "own", NULL},
      {"AXLC_SGEMM", "openbals", "AXLC_SGEMM=openbals: expected openblas or own"},
      {"AXLC_SBGEMM", "dot", NULL},
      {"AXLC_SBGEMM", "ref", NULL},
      {"AXLC_SBGEMM", "fast", "AXLC_SBGEMM=fast: expected widen, dot or ref (unset: widen)"},
      {"AXLC_HUGEPAGES", "0", NULL},
      {"AXLC_HUGEPAGES", "1", NULL},
      {"AXLC_HUGEPAGES", "yes",
       "AXLC_HUGEPAGES=yes: expected a whole number from 0 to 1 (unset: 1)"},
      {"AXLC_COMM_TIMEOUT", "2.5", NULL},
      {"AXLC_COMM_TIMEOUT", "0",
       "AXLC_COMM_TIMEOUT=0: expected a number of seconds above 0 (unset: 20)"},
      {"AXLC_COMM_SPIN", "0", NULL},
      {"AXLC_COMM_SPIN", "lots",
       "AXLC_COMM_SPIN=lots: expected a whole number from 0 to 1000000000"},
      {"AXLC_COMM_NAP", "999999999", NULL},
      {"AXLC_COMM_NAP", "1000000000",
       "AXLC_COMM_NAP=1000000000: expected a whole number from 0 to 999999999"},
  };
  RtError err;
  CHECK_OK(rt_env_check(&err)); /* the test runs without them */
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    setenv(cases[i].name, cases[i].value, 1);
    if (cases[i].msg) {
      CHECK_FAIL(rt_env_check(&err), cases[i].msg);
      CHECK_INT(strncmp(err.msg, cases[i].msg, strlen(cases[i].msg)), 0);
    } else {
      CHECK_OK(rt_env_check(&err));
    }
    unsetenv(cases[i].name);
  }
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"a message that fits", test_fits},
      {"a long message keeps its reason", test_long_keeps_reason},
      {"rt_env_int", test_env_int},
      {"rt_env_seconds", test_env_seconds},
      {"rt_env_check", test_env_check},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_error", cases);
}
