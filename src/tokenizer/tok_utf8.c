/* tokenizer: UTF-8 checking and repair (maximal-subpart replacement with
 * U+FFFD, as Rust's from_utf8_lossy does), GPT-2's byte <-> char map that
 * the ByteLevel pre-tokenizer and decoder use, and growable byte buffers. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

/* ---- UTF-8 ---- */

int dsi_utf8_next(const uint8_t *s, size_t n, size_t *len) {
  uint8_t b = s[0];
  if (b < 0x80) {
    *len = 1;
    return DSI_UTF8_OK;
  }
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte (table 3-7) */
  if (b >= 0xC2 && b <= 0xDF) need = 1;
  else if (b == 0xE0) need = 2, lo = 0xA0;
  else if (b >= 0xE1 && b <= 0xEC) need = 2;
  else if (b == 0xED) need = 2, hi = 0x9F;
  else if (b >= 0xEE && b <= 0xEF) need = 2;
  else if (b == 0xF0) need = 3, lo = 0x90;
  else if (b >= 0xF1 && b <= 0xF3) need = 3;
  else if (b == 0xF4) need = 3, hi = 0x8F;
  else {
    *len = 1;
    return DSI_UTF8_INVALID;
  }
  for (size_t i = 1; i <= need; i++) {
    if (i >= n) {
      *len = n;
      return DSI_UTF8_TRUNCATED;
    }
    uint8_t c = s[i];
    if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) {
      *len = i;
      return DSI_UTF8_INVALID;
    }
  }
  *len = need + 1;
  return DSI_UTF8_OK;
}

size_t dsi_utf8_valid_prefix(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    /* ASCII runs eight bytes at a time */
    while (i + 8 <= n) {
      uint64_t w;
      memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    size_t len;
    if (dsi_utf8_next(s + i, n - i, &len) != DSI_UTF8_OK) return i;
    i += len;
  }
  return n;
}

int dsi_tok_buf_reserve(char **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  char *p = realloc(*buf, c);
  if (!p) return -1;
  *buf = p;
  *cap = c;
  return 0;
}

int dsi_tok_buf_append(char **buf, size_t *len, size_t *cap, const void *s, size_t n) {
  if (dsi_tok_buf_reserve(buf, cap, *len + n + 1)) return -1;
  if (n) memcpy(*buf + *len, s, n);
  *len += n;
  (*buf)[*len] = 0;
  return 0;
}

int dsi_utf8_lossy_append(char **buf, size_t *len, size_t *cap, const uint8_t *s, size_t n) {
  /* worst case: every byte becomes three (EF BF BD) */
  if (n > (SIZE_MAX - *len - 1) / 3 || dsi_tok_buf_reserve(buf, cap, *len + 3 * n + 1)) return -1;
  char *o = *buf + *len;
  size_t i = 0;
  while (i < n) {
    size_t ok = dsi_utf8_valid_prefix(s + i, n - i);
    memcpy(o, s + i, ok);
    o += ok;
    i += ok;
    if (i >= n) break;
    size_t bad;
    dsi_utf8_next(s + i, n - i, &bad); /* INVALID or TRUNCATED: one U+FFFD */
    memcpy(o, "\xEF\xBF\xBD", 3);
    o += 3;
    i += bad;
  }
  *len = (size_t)(o - *buf);
  (*buf)[*len] = 0;
  return 0;
}

/* ---- GPT-2's byte <-> char map ----
 * Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves;
 * the other 68 take U+0100.. in byte order. */

static int printable(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t dsi_bytelevel_char(uint8_t b) {
  if (printable(b)) return b;
  if (b <= 0x20) return 256 + b;               /* 0x00..0x20: U+0100..U+0120 */
  if (b >= 0x7F && b <= 0xA0) return 256 + 33 + (b - 0x7F); /* U+0121..U+0142 */
  return 256 + 67;                             /* 0xAD: U+0143 */
}

int dsi_bytelevel_byte(uint32_t cp) {
  if (cp < 256) return printable(cp) ? (int)cp : -1;
  if (cp < 256 + 33) return (int)(cp - 256);
  if (cp < 256 + 67) return (int)(0x7F + cp - 256 - 33);
  if (cp == 256 + 67) return 0xAD;
  return -1;
}
