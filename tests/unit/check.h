/* tests: a minimal check harness — CHECK records a failure with file:line
 * and goes on; CHECK_DONE() prints "N passed, M failed" and is main's
 * return value. */
#ifndef DSI_TEST_CHECK_H
#define DSI_TEST_CHECK_H

#include <stdio.h>

static int g_checks_passed, g_checks_failed;

#define CHECK(cond) \
  do { \
    if (cond) g_checks_passed++; \
    else { g_checks_failed++; fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } \
  } while (0)

#define CHECKF(cond, ...) \
  do { \
    if (cond) g_checks_passed++; \
    else { g_checks_failed++; fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
           fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
  } while (0)

#define CHECK_DONE() \
  (printf("%d passed, %d failed\n", g_checks_passed, g_checks_failed), g_checks_failed ? 1 : 0)

#endif
