/* Minimal test macros: each failed check prints both sides with file:line and counts a
 * failure; they stay on in every build type. A test program ends with `return TEST_END();`,
 * which prints "N passed, N failed" and returns 0 only when nothing failed.
 * TEST_SKIP(reason) exits 77 (CTest's SKIP_RETURN_CODE in this project). */
#ifndef TAGC_TESTS_TEST_H
#define TAGC_TESTS_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failed_ = 0;
static int test_passed_ = 0;

#define TEST_FAIL_(...)                                      \
  do {                                                       \
    fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__);  \
    fprintf(stderr, __VA_ARGS__);                            \
    fputc('\n', stderr);                                     \
    test_failed_++;                                          \
  } while (0)

#define CHECK(cond)                                  \
  do {                                               \
    if (cond)                                        \
      test_passed_++;                                \
    else                                             \
      TEST_FAIL_("%s", #cond);                       \
  } while (0)

#define CHECK_MSG(cond, ...)  \
  do {                        \
    if (cond)                 \
      test_passed_++;         \
    else                      \
      TEST_FAIL_(__VA_ARGS__); \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                                 \
  do {                                                                                     \
    long long a_ = (long long)(a), b_ = (long long)(b);                                    \
    if (a_ == b_)                                                                          \
      test_passed_++;                                                                      \
    else                                                                                   \
      TEST_FAIL_("%s == %s (%lld vs %lld)", #a, #b, a_, b_);                               \
  } while (0)

#define CHECK_EQ_STR(a, b)                                                                 \
  do {                                                                                     \
    const char *a_ = (a), *b_ = (b);                                                       \
    if (a_ && b_ && strcmp(a_, b_) == 0)                                                   \
      test_passed_++;                                                                      \
    else                                                                                   \
      TEST_FAIL_("%s == %s (\"%s\" vs \"%s\")", #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
  } while (0)

/* |a - b| <= tol */
#define CHECK_NEAR(a, b, tol)                                                              \
  do {                                                                                     \
    double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);                         \
    if (fabs(a_ - b_) <= t_)                                                               \
      test_passed_++;                                                                      \
    else                                                                                   \
      TEST_FAIL_("%s ~= %s (%.9g vs %.9g, diff %.3g > %.3g)", #a, #b, a_, b_, fabs(a_ - b_), t_); \
  } while (0)

/* Checks a tagc_status expression is TAGC_OK, printing the thread's error detail if not. */
#define CHECK_OK(expr)                                                                     \
  do {                                                                                     \
    int st_ = (int)(expr);                                                                 \
    if (st_ == 0)                                                                          \
      test_passed_++;                                                                      \
    else                                                                                   \
      TEST_FAIL_("%s returned %d (%s)", #expr, st_, tagc_last_error());                    \
  } while (0)

#define TEST_SKIP(reason)                        \
  do {                                           \
    fprintf(stderr, "SKIP: %s\n", reason);       \
    exit(77);                                    \
  } while (0)

#define TEST_END()                                                     \
  (printf("%d passed, %d failed\n", test_passed_, test_failed_),       \
   test_failed_ ? 1 : 0)

#endif
