/* tests: the check macros every unit test shares — a failed check prints
 * file:line and what failed, counts, and the test's main ends with
 * `return check_done();`, which prints "N passed, M failed". */
#ifndef DSI_TEST_CHECK_H
#define DSI_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "xalloc.h"

static int check_passed, check_failed;

static inline int check_one(int ok, const char *file, int line, const char *what) {
  if (ok) check_passed++;
  else {
    check_failed++;
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
  }
  return ok;
}
#define CHECK(c) check_one(!!(c), __FILE__, __LINE__, #c)

/* |a - b| <= tol * max(1, |b|) */
#define CHECK_NEAR(a, b, tol)                                                                    \
  do {                                                                                           \
    double a_ = (a), b_ = (b);                                                                   \
    if (!check_one(fabs(a_ - b_) <= (tol) * fmax(1.0, fabs(b_)), __FILE__, __LINE__, #a " ~ " #b)) \
      fprintf(stderr, "    %.9g vs %.9g\n", a_, b_);                                             \
  } while (0)

/* A call returned status `want` and its message contains `needle`. */
static inline int check_err_one(int got, int want, const char *msg, const char *needle, const char *file,
                                int line, const char *what) {
  int ok = got == want && (!needle || strstr(msg, needle));
  if (!check_one(ok, file, line, what))
    fprintf(stderr, "    status %d (want %d), message: %s\n    (want it to contain: %s)\n", got, want, msg,
            needle ? needle : "-");
  return ok;
}
#define CHECK_ERR(call, want, err, needle) \
  check_err_one((call), (want), (err).msg, (needle), __FILE__, __LINE__, #call)

/* CHECK with a printf-style explanation printed on failure */
#define CHECKF(c, ...) \
  do { if (!check_one(!!(c), __FILE__, __LINE__, #c)) { fprintf(stderr, "    "); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static inline int check_done(void) {
  printf("%d passed, %d failed\n", check_passed, check_failed);
  return check_failed ? 1 : 0;
}

#endif
