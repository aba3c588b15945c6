/*
 * rt_test.h: what the runtime's CUnit programs share beyond tests/cunit_check.h: checks of
 * calls that report into an RtError (printing its message), and scratch files in a private
 * temporary directory.
 */
#ifndef RT_TEST_H
#define RT_TEST_H

#include <stdio.h>
#include <string.h>

#include "runtime/axrt.h"
#include "tests/cunit_check.h"

/* `expr` (which reports into the RtError `err` in scope) succeeds; prints its message if not. */
#define CHECK_OK(expr)                                                                             \
  do {                                                                                             \
    err.msg[0] = '\0';                                                                             \
    int rc_ = (expr);                                                                              \
    CHECK_MSG(rc_ == 0, "%s -> %d: %.600s", #expr, rc_, err.msg);                                  \
  } while (0)

/* `expr` fails with a message containing `part`; prints the message. */
#define CHECK_FAIL(expr, part)                                                                     \
  do {                                                                                             \
    err.msg[0] = '\0';                                                                             \
    int rc_ = (expr);                                                                              \
    CHECK_MSG(rc_ == -1 && strstr(err.msg, part) != NULL,                                          \
              "%s -> %d, message \"%.600s\" should contain \"%s\"", #expr, rc_, err.msg, part);    \
  } while (0)

/* Makes the scratch directory (rt_test_dir); 0 or -1. */
int rt_test_scratch(void);

/* Runs `cases` (ended by {NULL, NULL}) as one suite with a scratch directory: test_main. */
static inline int rt_test_main(int argc, char **argv, const char *suite, const TestCase *cases) {
  static const TestHooks hooks = {.before_all = rt_test_scratch};
  return test_main_with(argc, argv, suite, cases, &hooks);
}

/* A fresh directory under $TMPDIR (or /tmp), removed with everything in it at exit. */
const char *rt_test_dir(void);
/* rt_test_dir()/name, written into buf. */
const char *rt_test_path(char *buf, size_t cap, const char *name);
void rt_test_write(const char *path, const void *data, size_t n);
/* The whole file in a malloc'd buffer; *n receives its size. */
unsigned char *rt_test_read(const char *path, size_t *n);
int rt_test_exists(const char *path);

#endif /* RT_TEST_H */
