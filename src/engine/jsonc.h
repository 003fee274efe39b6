/* engine: a byte-level recognizer of JSON (RFC 8259) held to a JSON Schema,
 * fed as a model writes it: what response_format json_object and
 * json_schema constrain a completion to. It says whether the bytes so far
 * can still begin a value the schema accepts (and whether one is
 * complete), so a token that cannot continue it is never drawn.
 *
 * The schema is compiled once (dsi_jschema); a recognizer's state
 * (dsi_jsonc) follows each reading of the bytes alive at once (an anyOf's
 * alternatives that have not yet parted), each a stack of the values open. */
#ifndef DSI_JSONC_H
#define DSI_JSONC_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define DSI_JSONC_MAX_DEPTH 64 /* values nested */
#define DSI_JSONC_MAX_WS 16    /* white-space bytes in a row outside strings */
#define DSI_JSONC_MAX_READ 8   /* readings alive at once; an anyOf's later alternatives beyond are not followed */
#define DSI_JSONC_MAX_OPEN 128 /* values open in all readings together; the later readings beyond are not followed */
#define DSI_JSONC_MAX_PROPS 64 /* properties of one object schema, values of one enum */

typedef struct dsi_jschema dsi_jschema;

/* Compile a JSON Schema (its text, n bytes); NULL: any JSON object (what
 * json_object asks). The keywords enforced and those refused: jsonc.c's
 * header and the README. A schema whose value could be a bare number at
 * the root is refused (its end could not be told). */
int dsi_jschema_compile(dsi_jschema **out, const char *schema, size_t n, dsi_err *err);
void dsi_jschema_free(dsi_jschema *sc);
/* Not JSON: text whose bytes match an ECMA-262 pattern (engine/regex.h) as
 * a whole, as if anchored at both ends (a ^ or $ at its ends changes nothing).
 * The recognizer is then done when the text matches and no byte could go
 * on; dsi_jsonc_may_end says where the text may stop. */
int dsi_jschema_compile_regex(dsi_jschema **out, const char *pattern, size_t n, dsi_err *err);

/* one open value of a reading */
typedef struct dsi_jsonc_frame {
  uint16_t node;  /* its schema node */
  uint8_t st;     /* where in its grammar (jsonc.c) */
  uint8_t flags;  /* in a string or name: the range of the UTF-8 byte due */
  uint16_t cur;   /* an object: the member being read; a literal: which */
  uint16_t off;   /* bytes matched of a name or literal */
  uint32_t count; /* an array's items, an object's members, a string's characters */
  uint32_t aux;   /* hex digits left in a \u escape, or UTF-8 continuation bytes due */
  uint64_t seen;  /* an object: the properties given */
  uint64_t cand;  /* a name's or an enum's candidates still matching */
} dsi_jsonc_frame;

typedef struct dsi_jsonc_reading {
  uint8_t depth; /* 0 once the value is complete */
  uint8_t ws;    /* white-space bytes in a row */
  uint8_t pad[6];
  dsi_jsonc_frame f[DSI_JSONC_MAX_DEPTH];
} dsi_jsonc_reading;

typedef struct dsi_jsonc {
  const dsi_jschema *sc;
  int n; /* readings alive */
  dsi_jsonc_reading r[DSI_JSONC_MAX_READ];
} dsi_jsonc;

void dsi_jsonc_init(dsi_jsonc *j, const dsi_jschema *sc);
/* j's live part into dst (what a token's test copies) */
void dsi_jsonc_copy(dsi_jsonc *dst, const dsi_jsonc *j);
/* Feed s[0..n): 0 while what was fed can begin a value the schema accepts
 * (j advanced), -1 when it cannot (j then undefined: feed a copy to test a
 * token). Only white space may precede the value, and nothing may follow it. */
int dsi_jsonc_feed(dsi_jsonc *j, const char *s, size_t n);
/* 1 when the value is complete (nothing may follow) */
int dsi_jsonc_done(const dsi_jsonc *j);
/* 1 when the output may stop here: the value is complete, or (a regex)
 * the text so far matches */
int dsi_jsonc_may_end(const dsi_jsonc *j);

typedef struct dsi_tok dsi_tok;
/* a tokenizer's ids [0, n_ids) grouped by their first byte (added and
 * special tokens, which never continue JSON, left out) */
typedef struct dsi_jsonc_vocab {
  const dsi_tok *tok;
  int n_ids;
  int32_t *ids;
  int32_t start[257]; /* the ids starting with byte c: ids[start[c] .. start[c + 1]) */
} dsi_jsonc_vocab;
int dsi_jsonc_vocab_init(dsi_jsonc_vocab *v, const dsi_tok *tok, int n_ids);
void dsi_jsonc_vocab_free(dsi_jsonc_vocab *v);
/* ok[id] = 1 where the token can continue j, else 0 (ok: [v->n_ids]); t
 * is scratch. 1 when any can. */
int dsi_jsonc_allowed(const dsi_jsonc *j, const dsi_jsonc_vocab *v, uint8_t *ok, dsi_jsonc *t);

#endif
