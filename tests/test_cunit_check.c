/*
 * test_cunit_check.c: tests/cunit_check.h's runner on cases that pass, fail and skip; the exit
 * statuses and the failure message are checked by tests/CMakeLists.txt (check_runner_*).
 */
#include "tests/cunit_check.h"

static void test_passes(void) {
  CHECK_INT(2 + 2, 4);
  CHECK_NEAR(0.1 + 0.2, 0.3, 1e-12);
  CHECK_STR("axlc", "axlc");
  CHECK_HAS("a trainer for tiny-lm", "trainer", "tiny");
  CHECK_LACKS("a trainer", "compiler");
}

static void test_fails(void) {
  int two = 2;
  CHECK_INT(two + 1, 4);
}

static void test_skips(void) { test_skipped("this machine lacks what the case needs"); }

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"passes", test_passes}, {"fails", test_fails}, {"skips", test_skips}, {NULL, NULL}};
  return test_main(argc, argv, "cunit_check", cases);
}
