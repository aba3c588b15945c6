/*
 * rt_test.h: what the runtime's CUnit programs share: assertions that print both values or
 * the runtime's error message, and scratch files in a private temporary directory.
 */
#ifndef RT_TEST_H
#define RT_TEST_H

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "runtime/axrt.h"

#define RT_TEST_MSG 2048

/* a == b as integers; prints both. */
#define CHECK_INT(a, b)                                                                            \
  do {                                                                                             \
    long long a_ = (long long)(a), b_ = (long long)(b);                                            \
    char m_[RT_TEST_MSG];                                                                          \
    snprintf(m_, sizeof m_, "%s == %s (%lld vs %lld)", #a, #b, a_, b_);                            \
    CU_assertImplementation(a_ == b_, __LINE__, m_, __FILE__, "", CU_FALSE);                       \
  } while (0)

/* |a - b| <= tol; prints both. */
#define CHECK_NEAR(a, b, tol)                                                                      \
  do {                                                                                             \
    double a_ = (a), b_ = (b);                                                                     \
    char m_[RT_TEST_MSG];                                                                          \
    snprintf(m_, sizeof m_, "%s ~= %s (%.9g vs %.9g, tol %g)", #a, #b, a_, b_, (double)(tol));     \
    CU_assertImplementation(a_ - b_ <= (tol) && b_ - a_ <= (tol), __LINE__, m_, __FILE__, "",      \
                            CU_FALSE);                                                             \
  } while (0)

/* `expr` (which reports into the RtError `err` in scope) succeeds; prints its message if not. */
#define CHECK_OK(expr)                                                                             \
  do {                                                                                             \
    err.msg[0] = '\0';                                                                             \
    int rc_ = (expr);                                                                              \
    char m_[RT_TEST_MSG];                                                                          \
    snprintf(m_, sizeof m_, "%s -> %d: %.600s", #expr, rc_, err.msg);                              \
    CU_assertImplementation(rc_ == 0, __LINE__, m_, __FILE__, "", CU_FALSE);                       \
  } while (0)

/* `expr` fails with a message containing `part`; prints the message. */
#define CHECK_FAIL(expr, part)                                                                     \
  do {                                                                                             \
    err.msg[0] = '\0';                                                                             \
    int rc_ = (expr);                                                                              \
    char m_[RT_TEST_MSG];                                                                          \
    snprintf(m_, sizeof m_, "%s -> %d, message \"%.600s\" should contain \"%s\"", #expr, rc_,      \
             err.msg, part);                                                                       \
    CU_assertImplementation(rc_ == -1 && strstr(err.msg, part) != NULL, __LINE__, m_, __FILE__,    \
                            "", CU_FALSE);                                                         \
  } while (0)

typedef struct RtTestCase {
  const char *name;
  void (*fn)(void);
} RtTestCase;

/* Runs `cases` (ended by a {NULL, NULL} entry) as one suite; returns the exit status. */
int rt_test_main(const char *suite, const RtTestCase *cases);

/* A fresh directory under $TMPDIR (or /tmp), removed with everything in it at exit. */
const char *rt_test_dir(void);
/* rt_test_dir()/name, written into buf. */
const char *rt_test_path(char *buf, size_t cap, const char *name);
void rt_test_write(const char *path, const void *data, size_t n);
/* The whole file in a malloc'd buffer; *n receives its size. */
unsigned char *rt_test_read(const char *path, size_t *n);
int rt_test_exists(const char *path);

#endif /* RT_TEST_H */
