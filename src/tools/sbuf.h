/* tools: a growable text buffer for the commands (always NUL-terminated);
 * out of memory is fatal here, as for any small allocation of a tool. */
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

#endif
