/* engine: a regular expression of ECMA-262's syntax (what JSON Schema's
 * pattern is) as a deterministic automaton over the UTF-8 bytes of a
 * string, so the recognizer (jsonc.c) can follow a string's pattern byte by
 * byte as a model writes it.
 *
 * The pattern is read as JavaScript reads `new RegExp(p, "u")`, tested with
 * test(): code points, not UTF-16 units; unanchored unless it begins with ^
 * and ends with $. What it supports: literals, '.', classes ([a-z], [^...],
 * \d \D \w \W \s \S, also inside classes), escapes (\t \n \v \f \r \0 \cX
 * \xHH \uHHHH, a surrogate pair of them, \u{H...}, and a character
 * escaped), groups ((...), (?:...), (?<name>...)), alternation, the
 * quantifiers * + ? {n} {n,} {n,m} and their lazy forms (the same
 * language), ^ at the start and $ at the end of the pattern or of one of
 * its top alternatives. Refused, with the reason: lookaround, back
 * references, \b \B, Unicode property escapes, anchors elsewhere, counts
 * above 1,000, and automata of more than DSI_RE_MAX_STATES states. */
#ifndef DSI_REGEX_H
#define DSI_REGEX_H

#include <stddef.h>
#include <stdint.h>

#define DSI_RE_DEAD 0xFFFF       /* no transition */
#define DSI_RE_MAX_STATES 4096   /* automaton states */
#define DSI_RE_MAX_COUNT 1000    /* a quantifier's bound */

typedef struct dsi_redfa {
  int n_states, n_cls; /* the start state is 0 */
  uint8_t cls[256];    /* a byte's class */
  uint8_t rep[256];    /* a class's first byte */
  uint16_t *next;      /* [state * n_cls + class]: the next state, DSI_RE_DEAD none */
  uint8_t *accept;     /* [state]: the bytes so far match */
} dsi_redfa;

/* Compile pattern p (n bytes of UTF-8). DSI_OK; DSI_E_INVAL with why (a
 * sentence, at most why_n bytes) when the pattern is malformed or asks for
 * what is not supported; DSI_E_NOMEM. */
int dsi_redfa_compile(dsi_redfa *d, const char *p, size_t n, char *why, size_t why_n);
/* the same, with whole set: a match of the whole string, as if the pattern
 * were anchored at both ends (vLLM's guided_regex) */
int dsi_redfa_compile_whole(dsi_redfa *d, const char *p, size_t n, int whole, char *why, size_t why_n);
void dsi_redfa_free(dsi_redfa *d);
/* 1 when the bytes s[0..n) match the pattern */
int dsi_redfa_match(const dsi_redfa *d, const char *s, size_t n);

#endif
