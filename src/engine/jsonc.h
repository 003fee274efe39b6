/* engine: a byte-level recognizer of one JSON object (RFC 8259), fed as a
 * model writes it: what response_format json constrains a completion to.
 * It says whether the bytes so far can still begin an object (and whether
 * one is complete), so a token that cannot continue it is never drawn. */
#ifndef DSI_JSONC_H
#define DSI_JSONC_H

#include <stddef.h>
#include <stdint.h>

#define DSI_JSONC_MAX_DEPTH 64 /* objects and arrays nested */
#define DSI_JSONC_MAX_WS 16    /* white-space bytes in a row outside strings */

typedef struct dsi_jsonc {
  uint8_t st;     /* where in the grammar (jsonc.c) */
  uint8_t aux;    /* a literal's next character, or \u digits left */
  uint8_t lit;    /* which literal: true, false, null */
  uint8_t ws;     /* white-space bytes in a row */
  uint8_t key;    /* the string being read is a member's name */
  uint8_t depth;
  uint64_t stack; /* bit d: 1 an object, 0 an array, at depth d */
} dsi_jsonc;

void dsi_jsonc_init(dsi_jsonc *j);
/* Feed s[0..n): 0 while what was fed can begin a JSON object (j advanced),
 * -1 when it cannot (j then undefined: feed a copy to test a token). Only
 * white space may precede the object, and nothing may follow it. */
int dsi_jsonc_feed(dsi_jsonc *j, const char *s, size_t n);
/* 1 when the object is complete */
int dsi_jsonc_done(const dsi_jsonc *j);

#endif
