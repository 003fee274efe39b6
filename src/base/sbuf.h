/* base: a growable text buffer (always NUL-terminated once anything is in
 * it), for the commands, the server and the safetensors writer. Running out
 * of memory sticks: the buffer is marked failed (oom), later appends do
 * nothing, and whoever finishes the text checks oom before using it. */
#ifndef DSI_SBUF_H
#define DSI_SBUF_H

#include <stddef.h>

typedef struct sbuf {
  char *p;
  size_t n, cap;
  int oom; /* an append did not fit in memory: the text is incomplete */
} sbuf;

/* append s[0..n) */
void sb_put(sbuf *b, const void *s, size_t n);
/* append a string literal */
#define SB_LIT(b, lit) sb_put((b), (lit), sizeof(lit) - 1)
/* append s as a JSON string literal (quotes, escapes) */
void sb_json(sbuf *b, const char *s);
/* append printf's output */
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
