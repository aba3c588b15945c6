/*
 * cunit_check.h: CHECK_MSG(cond, fmt, ...), a CUnit assertion whose failure message is
 * formatted (what was found, what was expected), for the CUnit tests outside tests/runtime
 * (which has rt_test.h).
 */
#ifndef AXLC_TESTS_CUNIT_CHECK_H
#define AXLC_TESTS_CUNIT_CHECK_H

#include <CUnit/CUnit.h>
#include <stdio.h>

#define CHECK_MSG(cond, ...)                                                                       \
  do {                                                                                             \
    char m_[1024];                                                                                 \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                                          \
    CU_assertImplementation((cond), __LINE__, m_, __FILE__, "", CU_FALSE);                         \
  } while (0)

#endif
