/* tests: allocation that ends the test when memory runs out — the library
 * itself reports running out as an error (test_alloc_fail checks it); a
 * test has nothing better to do than stop. */
#ifndef DSI_TEST_XALLOC_H
#define DSI_TEST_XALLOC_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void *xalloc_check(void *p, size_t n) {
  if (!p) {
    fprintf(stderr, "test: out of memory allocating %zu bytes\n", n);
    abort();
  }
  return p;
}
static inline void *dsi_xmalloc(size_t n) { return xalloc_check(malloc(n ? n : 1), n); }
static inline void *dsi_xcalloc(size_t n, size_t size) { return xalloc_check(calloc(n ? n : 1, size ? size : 1), n * size); }
static inline void *dsi_xrealloc(void *p, size_t n) { return xalloc_check(realloc(p, n ? n : 1), n); }
static inline char *dsi_xstrdup(const char *s) { return xalloc_check(strdup(s), strlen(s) + 1); }

#endif
