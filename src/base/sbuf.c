/* base: the growable text buffer (see sbuf.h). */
#include "base/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* room for n more bytes and the NUL; 0, or -1 with the buffer failed */
static int reserve(sbuf *b, size_t n) {
  if (b->oom) return -1;
  if (b->n + n + 1 <= b->cap) return 0;
  size_t c = b->cap ? b->cap : 256;
  while (c < b->n + n + 1) c *= 2;
  char *p = realloc(b->p, c);
  if (!p) {
    b->oom = 1;
    return -1;
  }
  b->p = p;
  b->cap = c;
  return 0;
}

void sb_put(sbuf *b, const void *s, size_t n) {
  if (reserve(b, n)) return;
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

void sb_json(sbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') snprintf(esc, sizeof esc, "\\%c", c);
    else if (c == '\n') snprintf(esc, sizeof esc, "\\n");
    else if (c == '\r') snprintf(esc, sizeof esc, "\\r");
    else if (c == '\t') snprintf(esc, sizeof esc, "\\t");
    else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c);
    else snprintf(esc, sizeof esc, "%c", c);
    sb_put(b, esc, strlen(esc));
  }
  sb_put(b, "\"", 1);
}

void sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n > 0 && !reserve(b, (size_t)n)) {
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap2);
    b->n += (size_t)n;
  }
  va_end(ap2);
}
