/* base: a growable text buffer (always NUL-terminated), for the commands
 * and the server; out of memory is fatal, as for any small allocation. */
#ifndef DSI_SBUF_H
#define DSI_SBUF_H

#include <stddef.h>

typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf;

/* append s[0..n) */
void sb_put(sbuf *b, const void *s, size_t n);
/* append s as a JSON string literal (quotes, escapes) */
void sb_json(sbuf *b, const char *s);
/* append printf's output */
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
