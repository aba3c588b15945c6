/*
 * test_error.c: the status convention: a message that fits is kept whole; one too long for
 * RtError keeps its head (what failed) and its tail (why), never just the head.
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

int main(void) {
  static const RtTestCase cases[] = {
      {"a message that fits", test_fits},
      {"a long message keeps its reason", test_long_keeps_reason},
      {NULL, NULL},
  };
  return rt_test_main("runtime_error", cases);
}
