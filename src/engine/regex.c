/* engine: an ECMA-262 pattern as a DFA over UTF-8 bytes (regex.h).
 *
 * The pattern is parsed into a tree whose leaves are sets of code points;
 * the tree becomes a Thompson NFA whose edges are byte ranges (a set of
 * code points is the few sequences of byte ranges its UTF-8 forms take,
 * surrogates left out), and the NFA a DFA by the subset construction over
 * classes of bytes that no edge tells apart. */
#include "engine/regex.h"

#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CP 0x10FFFF
#define MAX_NFA 200000 /* NFA states */
#define MAX_NEST 100   /* groups nested */
#define MAX_LEN 4096   /* a pattern's bytes */
#define MAX_WORK 10000000 /* edges followed making the DFA: bounds what a hostile pattern costs */

/* ---- sets of code points: sorted, disjoint, not adjacent ranges ---- */

typedef struct {
  uint32_t lo, hi;
} crange;

typedef struct {
  crange *r;
  int n, cap;
} cset;

enum { R_EMPTY, R_SET, R_CAT, R_ALT, R_REP };

typedef struct {
  uint8_t kind;
  int32_t a, b;     /* R_CAT / R_ALT: the two children; R_REP: a the child; R_SET: ranges sets.r[a .. a + b) */
  int32_t min, max; /* R_REP; max -1: no bound */
} rnode;

typedef struct {
  const uint8_t *p;
  size_t n, i;
  rnode *nodes;
  int n_nodes, cap_nodes;
  cset sets; /* every set's ranges, one after another */
  int oom, bad, depth, whole; /* whole: a match of the whole string, ^ and $ or not */
  char *why;
  size_t why_n;
} rparse;

static int bad(rparse *x, const char *fmt, ...) {
  if (!x->bad && !x->oom) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->why, x->why_n, fmt, ap);
    va_end(ap);
  }
  x->bad = 1;
  return -1;
}

static int cs_add(cset *s, uint32_t lo, uint32_t hi) {
  if (s->n == s->cap) {
    int c = s->cap ? 2 * s->cap : 8;
    crange *r = realloc(s->r, (size_t)c * sizeof *r);
    if (!r) return -1;
    s->r = r, s->cap = c;
  }
  s->r[s->n++] = (crange){lo, hi};
  return 0;
}

static int cr_cmp(const void *a, const void *b) {
  const crange *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void cs_norm(cset *s) {
  if (!s->n) return;
  qsort(s->r, (size_t)s->n, sizeof *s->r, cr_cmp);
  int k = 0;
  for (int i = 1; i < s->n; i++) {
    if (s->r[i].lo <= s->r[k].hi + 1) {
      if (s->r[i].hi > s->r[k].hi) s->r[k].hi = s->r[i].hi;
    } else {
      s->r[++k] = s->r[i];
    }
  }
  s->n = k + 1;
}

/* s (normalized) becomes its complement in [0, MAX_CP] */
static int cs_neg(cset *s) {
  cset t = {0};
  uint32_t at = 0;
  int rc = 0;
  for (int i = 0; i < s->n && !rc; i++) {
    if (s->r[i].lo > at) rc = cs_add(&t, at, s->r[i].lo - 1);
    at = s->r[i].hi + 1;
  }
  if (!rc && at <= MAX_CP) rc = cs_add(&t, at, MAX_CP);
  free(s->r);
  *s = t;
  return rc;
}

/* the class escapes \d \w \s into s (negated for upper case) */
static int cs_class(cset *s, uint8_t c) {
  static const uint32_t digit[] = {'0', '9'}, word[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
  static const uint32_t space[] = {0x09, 0x0D, 0x20, 0x20, 0xA0, 0xA0, 0x1680, 0x1680, 0x2000, 0x200A,
                                   0x2028, 0x2029, 0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
  const uint32_t *r = digit;
  int k = 1;
  uint8_t l = c | 0x20;
  if (l == 'w') r = word, k = 4;
  if (l == 's') r = space, k = 10;
  cset t = {0};
  for (int i = 0; i < k; i++)
    if (cs_add(&t, r[2 * i], r[2 * i + 1])) return free(t.r), -1;
  cs_norm(&t);
  if (c != l && cs_neg(&t)) return free(t.r), -1;
  for (int i = 0; i < t.n; i++)
    if (cs_add(s, t.r[i].lo, t.r[i].hi)) return free(t.r), -1;
  free(t.r);
  return 0;
}

/* ---- the parser ---- */

static int32_t mk(rparse *x, uint8_t kind, int32_t a, int32_t b) {
  if (a < 0 || b < 0 || x->bad) return -1; /* a failed child: x->bad says why */
  if (x->n_nodes == x->cap_nodes) {
    int c = x->cap_nodes ? 2 * x->cap_nodes : 64;
    rnode *nn = realloc(x->nodes, (size_t)c * sizeof *nn);
    if (!nn) return x->oom = x->bad = 1, -1;
    x->nodes = nn, x->cap_nodes = c;
  }
  x->nodes[x->n_nodes] = (rnode){.kind = kind, .a = a, .b = b};
  return x->n_nodes++;
}

/* a set node of s's ranges (s normalized and freed) */
static int32_t mk_set(rparse *x, cset *s) {
  int32_t at = x->sets.n;
  for (int i = 0; i < s->n; i++)
    if (cs_add(&x->sets, s->r[i].lo, s->r[i].hi)) {
      free(s->r);
      return x->oom = x->bad = 1, -1;
    }
  int k = s->n;
  free(s->r);
  *s = (cset){0};
  return mk(x, R_SET, at, k);
}

static int32_t mk_rep(rparse *x, int32_t a, int32_t min, int32_t max) {
  int32_t r = mk(x, R_REP, a, 0);
  if (r >= 0) x->nodes[r].min = min, x->nodes[r].max = max;
  return r;
}

static int32_t mk_char(rparse *x, uint32_t c) {
  cset s = {0};
  if (cs_add(&s, c, c)) return x->oom = x->bad = 1, -1;
  return mk_set(x, &s);
}

static int32_t mk_any(rparse *x, int dot) {
  cset s = {0};
  int rc = dot ? cs_add(&s, '\n', '\n') || cs_add(&s, '\r', '\r') || cs_add(&s, 0x2028, 0x2029) : 0;
  if (rc || cs_neg(&s)) return free(s.r), x->oom = x->bad = 1, -1;
  return mk_set(x, &s);
}

static int at_end(const rparse *x) { return x->i >= x->n; }
static int peek(const rparse *x) { return at_end(x) ? -1 : x->p[x->i]; }

/* a code point of the pattern's UTF-8 */
static int32_t utf8_cp(rparse *x) {
  uint8_t c = x->p[x->i++];
  if (c < 0x80) return c;
  int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
  if (k < 0 || c > 0xF4) return bad(x, "the pattern is not valid UTF-8");
  uint32_t v = c & (0x3F >> k);
  for (int i = 0; i < k; i++) {
    if (at_end(x) || (x->p[x->i] & 0xC0) != 0x80) return bad(x, "the pattern is not valid UTF-8");
    v = v << 6 | (x->p[x->i++] & 0x3F);
  }
  static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
  if (v < least[k] || v > MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) return bad(x, "the pattern is not valid UTF-8");
  return (int32_t)v;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  c |= 0x20;
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* k hex digits */
static int32_t hex_n(rparse *x, int k) {
  uint32_t v = 0;
  for (int i = 0; i < k; i++) {
    int d = hexval(peek(x));
    if (d < 0) return bad(x, "an escape \\x or \\u needs %d hex digits", k);
    v = v << 4 | (uint32_t)d;
    x->i++;
  }
  return (int32_t)v;
}

/* an escape after '\': a code point (>= 0), or -2 with the class escape's
 * set added to s (in_class: \b is a backspace) */
static int32_t escape(rparse *x, cset *s, int in_class) {
  if (at_end(x)) return bad(x, "the pattern ends with a lone '\\'");
  uint8_t c = x->p[x->i];
  switch (c) {
  case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
    x->i++;
    if (cs_class(s, c)) return x->oom = x->bad = 1, -1;
    return -2;
  case 't': x->i++; return '\t';
  case 'n': x->i++; return '\n';
  case 'v': x->i++; return '\v';
  case 'f': x->i++; return '\f';
  case 'r': x->i++; return '\r';
  case 'b':
    if (in_class) return x->i++, '\b';
    return bad(x, "\\b (a word boundary) is not supported");
  case 'B': return bad(x, "\\B (a word boundary) is not supported");
  case 'p': case 'P': return bad(x, "Unicode property escapes (\\p{...}) are not supported");
  case 'k': return bad(x, "back references (\\k<name>) are not supported");
  case '0':
    x->i++;
    if (peek(x) >= '0' && peek(x) <= '9') return bad(x, "octal escapes are not supported");
    return 0;
  case 'c': {
    x->i++;
    int l = peek(x) | 0x20;
    if (l < 'a' || l > 'z') return bad(x, "\\c must be followed by a letter");
    return x->i++, (int32_t)(x->p[x->i - 1] % 32);
  }
  case 'x': x->i++; return hex_n(x, 2);
  case 'u': {
    x->i++;
    if (peek(x) == '{') {
      x->i++;
      uint32_t v = 0;
      int k = 0;
      for (; hexval(peek(x)) >= 0 && v <= MAX_CP; k++, x->i++) v = v << 4 | (uint32_t)hexval(peek(x));
      if (!k || peek(x) != '}' || v > MAX_CP) return bad(x, "\\u{...} must hold a code point's hex digits");
      x->i++;
      if (v >= 0xD800 && v <= 0xDFFF) return bad(x, "a lone surrogate (\\u{%X}) matches no UTF-8 text", v);
      return (int32_t)v;
    }
    int32_t v = hex_n(x, 4);
    if (v < 0) return -1;
    if (v >= 0xD800 && v <= 0xDBFF && x->i + 6 <= x->n && x->p[x->i] == '\\' && x->p[x->i + 1] == 'u') {
      int32_t lo = 0; /* a low surrogate's escape after it: the pair is one code point */
      for (int i = 0; i < 4 && lo >= 0; i++) lo = hexval(x->p[x->i + 2 + i]) < 0 ? -1 : lo << 4 | hexval(x->p[x->i + 2 + i]);
      if (lo >= 0xDC00 && lo <= 0xDFFF) return x->i += 6, 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (v >= 0xD800 && v <= 0xDFFF) return bad(x, "a lone surrogate (\\u%04X) matches no UTF-8 text", v);
    return v;
  }
  default:
    if (c >= '1' && c <= '9') return bad(x, "back references (\\%c) are not supported", c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
      return bad(x, "unknown escape \\%c", c);
    return utf8_cp(x); /* a character escaped: itself */
  }
}

static int32_t parse_alt(rparse *x, int top);

static int32_t parse_class(rparse *x) {
  x->i++; /* '[' */
  int neg = peek(x) == '^';
  x->i += neg;
  cset s = {0};
  for (;;) {
    if (at_end(x)) return free(s.r), bad(x, "a class '[' is not closed");
    if (peek(x) == ']') {
      x->i++;
      break;
    }
    int32_t a = x->p[x->i] == '\\' ? (x->i++, escape(x, &s, 1)) : utf8_cp(x);
    if (a == -1) return free(s.r), -1;
    if (peek(x) == '-' && x->i + 1 < x->n && x->p[x->i + 1] != ']') {
      x->i++;
      int32_t b = x->p[x->i] == '\\' ? (x->i++, escape(x, &s, 1)) : utf8_cp(x);
      if (b == -1) return free(s.r), -1;
      if (a == -2 || b == -2) return free(s.r), bad(x, "a class escape (\\d, \\w, \\s) cannot bound a range");
      if (a > b) return free(s.r), bad(x, "a range out of order in a class");
      if (cs_add(&s, (uint32_t)a, (uint32_t)b)) return free(s.r), x->oom = x->bad = 1, -1;
    } else if (a >= 0 && cs_add(&s, (uint32_t)a, (uint32_t)a)) {
      return free(s.r), x->oom = x->bad = 1, -1;
    }
  }
  cs_norm(&s);
  if (neg && cs_neg(&s)) return free(s.r), x->oom = x->bad = 1, -1;
  return mk_set(x, &s);
}

/* {n}, {n,}, {n,m} at x->i: 1 read into min / max, 0 not a quantifier
 * (then a literal '{'), -1 bad */
static int braces(rparse *x, int32_t *min, int32_t *max) {
  size_t i = x->i + 1;
  long v[2] = {0, -1};
  int k = 0, digits = 0;
  for (; i < x->n; i++) {
    uint8_t c = x->p[i];
    if (c >= '0' && c <= '9') {
      if (v[k] < 0) v[k] = 0;
      if (v[k] <= 100000) v[k] = v[k] * 10 + (c - '0');
      digits++;
    } else if (c == ',' && k == 0 && digits) {
      k = 1;
    } else {
      break;
    }
  }
  if (i >= x->n || x->p[i] != '}' || !digits) return 0;
  if (k == 0) v[1] = v[0];
  if (v[0] > DSI_RE_MAX_COUNT || v[1] > DSI_RE_MAX_COUNT)
    return bad(x, "a count above %d in a quantifier is not supported", DSI_RE_MAX_COUNT);
  if (v[1] >= 0 && v[0] > v[1]) return bad(x, "a quantifier {n,m} with n above m");
  x->i = i + 1;
  *min = (int32_t)v[0], *max = (int32_t)v[1];
  return 1;
}

static int32_t parse_atom(rparse *x) {
  int c = peek(x);
  switch (c) {
  case '(': {
    x->i++;
    if (peek(x) == '?') {
      x->i++;
      int d = peek(x);
      if (d == ':') {
        x->i++;
      } else if (d == '<' && x->i + 1 < x->n && x->p[x->i + 1] != '=' && x->p[x->i + 1] != '!') {
        while (!at_end(x) && peek(x) != '>') x->i++;
        if (at_end(x)) return bad(x, "a group's name is not closed with '>'");
        x->i++;
      } else if (d == '=' || d == '!' || d == '<') {
        return bad(x, "lookaround ((?=, (?!, (?<=, (?<!) is not supported");
      } else {
        return bad(x, "unknown group (?%c", d < 0 ? ' ' : d);
      }
    }
    if (++x->depth > MAX_NEST) return bad(x, "groups nested more than %d deep", MAX_NEST);
    int32_t in = parse_alt(x, 0);
    x->depth--;
    if (in < 0) return -1;
    if (peek(x) != ')') return bad(x, "a group '(' is not closed");
    x->i++;
    return in;
  }
  case '[': return parse_class(x);
  case '.': x->i++; return mk_any(x, 1);
  case '\\': {
    x->i++;
    cset s = {0};
    int32_t v = escape(x, &s, 0);
    if (v == -2) return mk_set(x, &s);
    free(s.r);
    return v < 0 ? -1 : mk_char(x, (uint32_t)v);
  }
  case '*': case '+': case '?': return bad(x, "'%c' with nothing to repeat", c);
  case '{': {
    int32_t a, b;
    int q = braces(x, &a, &b);
    if (q) return q < 0 ? -1 : bad(x, "a quantifier {...} with nothing to repeat");
    x->i++;
    return mk_char(x, '{');
  }
  case ')': return bad(x, "an unmatched ')'");
  case '^': return bad(x, "'^' is supported only at the start of the pattern or of one of its top alternatives");
  case '$': return bad(x, "'$' is supported only at the end of the pattern or of one of its top alternatives");
  default: {
    int32_t v = utf8_cp(x);
    return v < 0 ? -1 : mk_char(x, (uint32_t)v);
  }
  }
}

/* a quantifier after an atom, if any */
static int32_t quantified(rparse *x, int32_t atom) {
  int32_t min, max;
  int c = peek(x);
  if (c == '*') min = 0, max = -1, x->i++;
  else if (c == '+') min = 1, max = -1, x->i++;
  else if (c == '?') min = 0, max = 1, x->i++;
  else if (c == '{') {
    int q = braces(x, &min, &max);
    if (q <= 0) return q < 0 ? -1 : atom;
  } else return atom;
  if (peek(x) == '?') x->i++; /* lazy: the same language */
  c = peek(x);
  int32_t a, b;
  if (c == '*' || c == '+' || c == '?' || (c == '{' && braces(x, &a, &b))) return bad(x, "a quantifier with nothing to repeat");
  return mk_rep(x, atom, min, max);
}

static int32_t parse_seq(rparse *x, int top) {
  int anch_s = 0, anch_e = 0;
  if (top && peek(x) == '^') anch_s = 1, x->i++;
  int32_t seq = mk(x, R_EMPTY, 0, 0);
  for (;;) {
    int c = peek(x);
    if (c < 0 || c == '|' || c == ')') break;
    if (c == '$' && top && (x->i + 1 == x->n || x->p[x->i + 1] == '|')) {
      anch_e = 1, x->i++;
      break;
    }
    int32_t a = quantified(x, parse_atom(x));
    if (a < 0) return -1;
    seq = mk(x, R_CAT, seq, a);
  }
  /* unanchored: any characters before, after */
  if (top && !anch_s && !x->whole) seq = mk(x, R_CAT, mk_rep(x, mk_any(x, 0), 0, -1), seq);
  if (top && !anch_e && !x->whole) seq = mk(x, R_CAT, seq, mk_rep(x, mk_any(x, 0), 0, -1));
  return seq;
}

static int32_t parse_alt(rparse *x, int top) {
  int32_t l = parse_seq(x, top);
  while (l >= 0 && peek(x) == '|') {
    x->i++;
    l = mk(x, R_ALT, l, parse_seq(x, top));
  }
  return l;
}

/* ---- the NFA: states and byte-range edges (lo -1: an empty edge) ---- */

typedef struct {
  int32_t from, to;
  int16_t lo, hi;
} nedge;

typedef struct {
  nedge *e;
  int n_e, cap_e;
  int32_t n_states;
  int oom, big;
  const rparse *x;
} nfa;

static int32_t nstate(nfa *m) {
  if (m->n_states >= MAX_NFA) {
    m->big = 1;
    return -1;
  }
  return m->n_states++;
}

static int nedge_add(nfa *m, int32_t from, int32_t to, int lo, int hi) {
  if (from < 0 || to < 0) return -1;
  if (m->n_e == m->cap_e) {
    int c = m->cap_e ? 2 * m->cap_e : 256;
    nedge *e = realloc(m->e, (size_t)c * sizeof *e);
    if (!e) return m->oom = 1, -1;
    m->e = e, m->cap_e = c;
  }
  m->e[m->n_e++] = (nedge){from, to, (int16_t)lo, (int16_t)hi};
  return 0;
}

static int utf8_enc(uint32_t c, uint8_t *b) {
  if (c < 0x80) return b[0] = (uint8_t)c, 1;
  if (c < 0x800) return b[0] = (uint8_t)(0xC0 | c >> 6), b[1] = (uint8_t)(0x80 | (c & 0x3F)), 2;
  if (c < 0x10000)
    return b[0] = (uint8_t)(0xE0 | c >> 12), b[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), b[2] = (uint8_t)(0x80 | (c & 0x3F)), 3;
  b[0] = (uint8_t)(0xF0 | c >> 18), b[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
  b[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), b[3] = (uint8_t)(0x80 | (c & 0x3F));
  return 4;
}

/* the code points [lo, hi] (no surrogates) as paths of byte ranges from s to e */
static int utf8_paths(nfa *m, uint32_t lo, uint32_t hi, int32_t s, int32_t e) {
  if (lo > hi) return 0;
  static const uint32_t len_end[3] = {0x7F, 0x7FF, 0xFFFF};
  for (int k = 0; k < 3; k++) /* one encoded length at a time */
    if (lo <= len_end[k] && hi > len_end[k])
      return utf8_paths(m, lo, len_end[k], s, e) || utf8_paths(m, len_end[k] + 1, hi, s, e) ? -1 : 0;
  int n = lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
  for (int i = 1; i < n; i++) { /* ranges whose lower bytes span all continuation values */
    uint32_t mask = (1u << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if (lo & mask) return utf8_paths(m, lo, lo | mask, s, e) || utf8_paths(m, (lo | mask) + 1, hi, s, e) ? -1 : 0;
      if ((hi & mask) != mask) return utf8_paths(m, lo, (hi & ~mask) - 1, s, e) || utf8_paths(m, hi & ~mask, hi, s, e) ? -1 : 0;
    }
  }
  uint8_t a[4], b[4];
  utf8_enc(lo, a), utf8_enc(hi, b);
  int32_t at = s;
  for (int i = 0; i < n; i++) {
    int32_t to = i + 1 == n ? e : nstate(m);
    if (nedge_add(m, at, to, a[i], b[i])) return -1;
    at = to;
  }
  return 0;
}

typedef struct {
  int32_t s, e;
} frag;

static frag build(nfa *m, int32_t id) {
  const rnode *r = &m->x->nodes[id];
  frag f = {nstate(m), -1}, bad_f = {-1, -1};
  if (f.s < 0) return bad_f;
  switch (r->kind) {
  case R_EMPTY: f.e = f.s; return f;
  case R_SET:
    if ((f.e = nstate(m)) < 0) return bad_f;
    for (int i = 0; i < r->b; i++) {
      crange c = m->x->sets.r[r->a + i];
      int rc = 0;
      if (c.lo < 0xD800 && c.hi >= 0xD800) /* surrogates are no characters */
        rc = utf8_paths(m, c.lo, 0xD7FF, f.s, f.e) || (c.hi > 0xDFFF && utf8_paths(m, 0xE000, c.hi, f.s, f.e));
      else if (c.lo >= 0xD800 && c.lo <= 0xDFFF)
        rc = c.hi > 0xDFFF && utf8_paths(m, 0xE000, c.hi, f.s, f.e);
      else
        rc = utf8_paths(m, c.lo, c.hi, f.s, f.e);
      if (rc) return bad_f;
    }
    return f;
  case R_CAT:
  case R_ALT: {
    frag a = build(m, r->a), b = a.s < 0 ? bad_f : build(m, r->b);
    if (b.s < 0) return bad_f;
    if (r->kind == R_CAT) {
      if (nedge_add(m, f.s, a.s, -1, -1) || nedge_add(m, a.e, b.s, -1, -1)) return bad_f;
      f.e = b.e;
      return f;
    }
    if ((f.e = nstate(m)) < 0 || nedge_add(m, f.s, a.s, -1, -1) || nedge_add(m, f.s, b.s, -1, -1) ||
        nedge_add(m, a.e, f.e, -1, -1) || nedge_add(m, b.e, f.e, -1, -1))
      return bad_f;
    return f;
  }
  default: { /* R_REP: min copies, then max - min optional ones (or a loop) */
    int32_t at = f.s;
    for (int k = 0; k < r->min; k++) {
      frag c = build(m, r->a);
      if (c.s < 0 || nedge_add(m, at, c.s, -1, -1)) return bad_f;
      at = c.e;
    }
    if (r->max < 0) {
      frag c = build(m, r->a);
      if (c.s < 0 || nedge_add(m, at, c.s, -1, -1) || nedge_add(m, c.e, at, -1, -1)) return bad_f;
      f.e = at;
      return f;
    }
    if ((f.e = nstate(m)) < 0 || nedge_add(m, at, f.e, -1, -1)) return bad_f;
    for (int k = r->min; k < r->max; k++) {
      frag c = build(m, r->a);
      if (c.s < 0 || nedge_add(m, at, c.s, -1, -1) || nedge_add(m, c.e, f.e, -1, -1)) return bad_f;
      at = c.e;
    }
    return f;
  }
  }
}

/* ---- the subset construction ---- */

typedef struct {
  int32_t *off_eps, *eps, *off_byte;
  nedge *byte;
  uint32_t *stamp, gen;
  int32_t *stack;
  long work;
} adj;

static int e_cmp_from(const void *a, const void *b) {
  const nedge *x = a, *y = b;
  return x->from < y->from ? -1 : x->from > y->from;
}

/* set[0..n) (marked with the current stamp) closed under empty edges (all
 * its states marked, in no order): its size */
static int closure(adj *g, int32_t *set, int n) {
  int sp = 0;
  for (int i = 0; i < n; i++) g->stack[sp++] = set[i];
  while (sp) {
    int32_t s = g->stack[--sp];
    g->work += g->off_eps[s + 1] - g->off_eps[s];
    for (int32_t k = g->off_eps[s]; k < g->off_eps[s + 1]; k++) {
      int32_t t = g->eps[k];
      if (g->stamp[t] != g->gen) g->stamp[t] = g->gen, set[n++] = t, g->stack[sp++] = t;
    }
  }
  g->work += n;
  return n;
}

/* a set's hash, whatever the order of its states */
static uint64_t set_hash(const int32_t *s, int n) {
  uint64_t h = (uint64_t)n * 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < n; i++) {
    uint64_t v = (uint64_t)(uint32_t)s[i] * 0xff51afd7ed558ccdull;
    h += v ^ v >> 31;
  }
  return h;
}

/* the stored set s[0..n) is the one just made: as many states, each marked */
static int same_set(const adj *g, const int32_t *s, int n, int k) {
  if (n != k) return 0;
  for (int i = 0; i < n; i++)
    if (g->stamp[s[i]] != g->gen) return 0;
  return 1;
}

/* Fewer states, the same language: states that cannot reach a match made
 * dead, then Moore's refinement (states are alike until a class's
 * successors tell them apart) while it stays within a budget; the start
 * state stays 0. 0, or -1 out of memory (d unchanged). */
#define MIN_WORK 20000000L

static uint64_t sig_hash(const int32_t *sig, int n) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < n; i++) h = (h ^ (uint32_t)sig[i]) * 0xff51afd7ed558ccdull, h ^= h >> 29;
  return h;
}

static int minimize(dsi_redfa *d) {
  int ns = d->n_states, nc = d->n_cls, rc = -1;
  size_t edges = (size_t)ns * (size_t)nc;
  int32_t *off = calloc((size_t)ns + 1, sizeof *off), *from = malloc(edges * sizeof *from);
  int32_t *part = malloc((size_t)ns * sizeof *part), *np = malloc((size_t)ns * sizeof *np);
  int32_t *sig = malloc((size_t)(nc + 1) * (size_t)ns * sizeof *sig), *slot = malloc((size_t)ns * 2 * sizeof *slot);
  int32_t *stack = malloc((size_t)ns * sizeof *stack);
  uint16_t *next = NULL;
  uint8_t *live = calloc((size_t)ns, 1), *acc = NULL;
  if (!off || !from || !part || !np || !sig || !slot || !stack || !live) goto out;
  /* live: a match can be reached (backwards from the matches) */
  for (size_t e = 0; e < edges; e++)
    if (d->next[e] != DSI_RE_DEAD) off[d->next[e] + 1]++;
  for (int t = 0; t < ns; t++) off[t + 1] += off[t];
  {
    int32_t *at = malloc((size_t)ns * sizeof *at);
    if (!at) goto out;
    memcpy(at, off, (size_t)ns * sizeof *at);
    for (size_t e = 0; e < edges; e++)
      if (d->next[e] != DSI_RE_DEAD) from[at[d->next[e]]++] = (int32_t)(e / (size_t)nc);
    free(at);
  }
  int sp = 0;
  for (int st = 0; st < ns; st++)
    if (d->accept[st]) live[st] = 1, stack[sp++] = st;
  while (sp) {
    int t = stack[--sp];
    for (int32_t k = off[t]; k < off[t + 1]; k++)
      if (!live[from[k]]) live[from[k]] = 1, stack[sp++] = from[k];
  }
  /* parts: dead states are -1; the rest split by accepting, then by their classes' successors */
  int n_parts = 0, cap = ns * 2;
  for (int st = 0; st < ns; st++) part[st] = live[st] ? d->accept[st] : -1;
  for (int st = 0; st < ns; st++) n_parts = DSI_MAX(n_parts, part[st] + 1);
  for (long work = 0;;) {
    memset(slot, 0xFF, (size_t)cap * sizeof *slot);
    int k = 0;
    for (int st = 0; st < ns; st++) {
      if (part[st] < 0) {
        np[st] = -1;
        continue;
      }
      int32_t *g = sig + (size_t)st * (size_t)(nc + 1);
      g[0] = part[st];
      for (int c = 0; c < nc; c++) {
        uint16_t t = d->next[(size_t)st * (size_t)nc + (size_t)c];
        g[c + 1] = t == DSI_RE_DEAD ? -1 : part[t];
      }
      uint32_t i = (uint32_t)sig_hash(g, nc + 1) % (uint32_t)cap;
      for (; slot[i] >= 0; i = (i + 1) % (uint32_t)cap)
        if (!memcmp(sig + (size_t)slot[i] * (size_t)(nc + 1), g, (size_t)(nc + 1) * sizeof *g)) break;
      if (slot[i] < 0) slot[i] = st, np[st] = k++;
      else np[st] = np[slot[i]];
    }
    memcpy(part, np, (size_t)ns * sizeof *part);
    if (k == n_parts) break; /* no part split: stable */
    n_parts = k;
    if ((work += (long)edges) > MIN_WORK) { /* stopped early: the parts so far are not yet alike; keep d */
      rc = 0;
      goto out;
    }
  }
  if (part[0] < 0) { /* nothing matches: one state, no transitions */
    n_parts = 1;
    for (int st = 0; st < ns; st++) part[st] = 0;
    for (size_t e = 0; e < edges; e++) d->next[e] = DSI_RE_DEAD;
  }
  /* renumbered with the start's part first */
  int32_t *ren = np;
  for (int i = 0; i < n_parts; i++) ren[i] = -1;
  int m = 0;
  ren[part[0]] = m++;
  for (int st = 0; st < ns; st++)
    if (part[st] >= 0 && ren[part[st]] < 0) ren[part[st]] = m++;
  next = malloc((size_t)n_parts * (size_t)nc * sizeof *next);
  acc = malloc((size_t)n_parts);
  if (!next || !acc) goto out;
  for (int st = 0; st < ns; st++) {
    if (part[st] < 0) continue;
    int to = ren[part[st]];
    acc[to] = d->accept[st];
    for (int c = 0; c < nc; c++) {
      uint16_t t = d->next[(size_t)st * (size_t)nc + (size_t)c];
      next[(size_t)to * (size_t)nc + (size_t)c] = t == DSI_RE_DEAD || part[t] < 0 ? DSI_RE_DEAD : (uint16_t)ren[part[t]];
    }
  }
  free(d->next), free(d->accept);
  d->next = next, d->accept = acc, d->n_states = n_parts;
  next = NULL, acc = NULL;
  rc = 0;
out:
  free(off), free(from), free(part), free(np), free(sig), free(slot), free(stack), free(live), free(next), free(acc);
  return rc;
}

int dsi_redfa_compile(dsi_redfa *d, const char *p, size_t n, char *why, size_t why_n) {
  return dsi_redfa_compile_whole(d, p, n, 0, why, why_n);
}

int dsi_redfa_compile_whole(dsi_redfa *d, const char *p, size_t n, int whole, char *why, size_t why_n) {
  *d = (dsi_redfa){0};
  char why_buf[8];
  if (!why || !why_n) why = why_buf, why_n = sizeof why_buf;
  *why = 0;
  rparse x = {.p = (const uint8_t *)p, .n = n, .why = why, .why_n = why_n, .whole = whole};
  int32_t root = n > MAX_LEN ? bad(&x, "a pattern longer than %d bytes is not supported", MAX_LEN) : parse_alt(&x, 1);
  if (root >= 0 && !at_end(&x)) root = bad(&x, "an unmatched ')'");
  int rc = DSI_OK;
  nfa m = {.x = &x};
  adj g = {0};
  int32_t *pool = NULL, *tmp = NULL, *slot = NULL;
  int64_t *set_at = NULL;
  int32_t *set_n = NULL;
  if (root < 0) {
    rc = x.oom ? DSI_E_NOMEM : DSI_E_INVAL;
    goto out;
  }
  frag f = build(&m, root);
  if (f.s < 0) {
    rc = m.oom ? DSI_E_NOMEM : (snprintf(why, why_n, "the pattern is too large (more than %d automaton states)", MAX_NFA), DSI_E_INVAL);
    goto out;
  }
  /* byte classes: bytes no edge tells apart; each control byte alone (some
   * are written in a JSON string only as escapes, some not at all) */
  uint8_t cut[257] = {0};
  for (int b = 0; b <= 0x21; b++) cut[b] = 1;
  for (int i = 0; i < m.n_e; i++)
    if (m.e[i].lo >= 0) cut[m.e[i].lo] = 1, cut[m.e[i].hi + 1] = 1;
  d->n_cls = 0;
  for (int b = 0; b < 256; b++) {
    if (cut[b] && b) d->n_cls++;
    d->cls[b] = (uint8_t)d->n_cls;
    if (b == 0 || cut[b]) d->rep[d->n_cls] = (uint8_t)b;
  }
  d->n_cls++;
  /* adjacency: empty edges and byte edges by source */
  int32_t ns = m.n_states;
  if (m.n_e) qsort(m.e, (size_t)m.n_e, sizeof *m.e, e_cmp_from);
  g.off_eps = calloc((size_t)ns + 1, sizeof(int32_t));
  g.off_byte = calloc((size_t)ns + 1, sizeof(int32_t));
  g.eps = malloc((size_t)(m.n_e ? m.n_e : 1) * sizeof(int32_t));
  g.byte = malloc((size_t)(m.n_e ? m.n_e : 1) * sizeof(nedge));
  g.stamp = calloc((size_t)ns, sizeof(uint32_t));
  g.stack = malloc((size_t)ns * sizeof(int32_t));
  tmp = malloc((size_t)ns * sizeof(int32_t));
  if (!g.off_eps || !g.off_byte || !g.eps || !g.byte || !g.stamp || !g.stack || !tmp) {
    rc = DSI_E_NOMEM;
    goto out;
  }
  int n_eps = 0, n_byte = 0;
  for (int i = 0; i < m.n_e; i++) {
    if (m.e[i].lo < 0) g.off_eps[m.e[i].from + 1]++, g.eps[n_eps++] = m.e[i].to;
    else g.off_byte[m.e[i].from + 1]++, g.byte[n_byte++] = m.e[i];
  }
  for (int32_t s = 0; s < ns; s++) g.off_eps[s + 1] += g.off_eps[s], g.off_byte[s + 1] += g.off_byte[s];
  /* DFA states: sets of NFA states in pool, found by a hash */
  size_t pool_n = 0, pool_cap = 1024;
  int cap_states = 64, cap_slot = 2 * DSI_RE_MAX_STATES;
  pool = malloc(pool_cap * sizeof(int32_t));
  set_at = malloc((size_t)cap_states * sizeof(int64_t));
  set_n = malloc((size_t)cap_states * sizeof(int32_t));
  slot = malloc((size_t)cap_slot * sizeof(int32_t));
  d->next = malloc((size_t)cap_states * (size_t)d->n_cls * sizeof(uint16_t));
  d->accept = malloc((size_t)cap_states);
  if (!pool || !set_at || !set_n || !slot || !d->next || !d->accept) {
    rc = DSI_E_NOMEM;
    goto out;
  }
  memset(slot, 0xFF, (size_t)cap_slot * sizeof(int32_t));
  g.gen++;
  tmp[0] = f.s, g.stamp[f.s] = g.gen;
  int k = closure(&g, tmp, 1);
  for (int cur = -1; cur < d->n_states; cur++) {
    for (int c = cur < 0 ? d->n_cls - 1 : 0; c < d->n_cls; c++) {
      if (cur >= 0) { /* the states one byte of class c leads to */
        g.gen++;
        k = 0;
        const int32_t *set = pool + set_at[cur];
        for (int i = 0; i < set_n[cur]; i++) {
          g.work += g.off_byte[set[i] + 1] - g.off_byte[set[i]];
          for (int32_t q = g.off_byte[set[i]]; q < g.off_byte[set[i] + 1]; q++) {
            const nedge *e = &g.byte[q];
            if (e->lo <= d->rep[c] && d->rep[c] <= e->hi && g.stamp[e->to] != g.gen) g.stamp[e->to] = g.gen, tmp[k++] = e->to;
          }
        }
        k = closure(&g, tmp, k);
        if (g.work > MAX_WORK) {
          snprintf(why, why_n, "the pattern is too complex to make an automaton of");
          rc = DSI_E_INVAL;
          goto out;
        }
      }
      int32_t to = DSI_RE_DEAD;
      if (k) {
        uint64_t h = set_hash(tmp, k);
        uint32_t i = (uint32_t)h & (uint32_t)(cap_slot - 1);
        for (; slot[i] >= 0; i = (i + 1) & (uint32_t)(cap_slot - 1))
          if (same_set(&g, pool + set_at[slot[i]], set_n[slot[i]], k)) break;
        if (slot[i] >= 0) {
          to = slot[i];
        } else { /* a new state */
          if (d->n_states >= DSI_RE_MAX_STATES) {
            snprintf(why, why_n, "the pattern's automaton has more than %d states (too complex)", DSI_RE_MAX_STATES);
            rc = DSI_E_INVAL;
            goto out;
          }
          if (d->n_states == cap_states) {
            cap_states *= 2;
            void *a = realloc(set_at, (size_t)cap_states * sizeof(int64_t)), *b = a ? (set_at = a, realloc(set_n, (size_t)cap_states * sizeof(int32_t))) : NULL;
            void *cc = b ? (set_n = b, realloc(d->next, (size_t)cap_states * (size_t)d->n_cls * sizeof(uint16_t))) : NULL;
            void *dd = cc ? (d->next = cc, realloc(d->accept, (size_t)cap_states)) : NULL;
            if (!dd) {
              rc = DSI_E_NOMEM;
              goto out;
            }
            d->accept = dd;
          }
          if (pool_n + (size_t)k > pool_cap) {
            while (pool_n + (size_t)k > pool_cap) pool_cap *= 2;
            int32_t *np = realloc(pool, pool_cap * sizeof(int32_t));
            if (!np) {
              rc = DSI_E_NOMEM;
              goto out;
            }
            pool = np;
          }
          to = d->n_states++;
          memcpy(pool + pool_n, tmp, (size_t)k * sizeof *tmp);
          set_at[to] = (int64_t)pool_n, set_n[to] = k;
          pool_n += (size_t)k;
          slot[i] = to;
          d->accept[to] = 0;
          for (int q = 0; q < k; q++)
            if (tmp[q] == f.e) d->accept[to] = 1;
        }
      }
      if (cur >= 0) d->next[(size_t)cur * (size_t)d->n_cls + (size_t)c] = (uint16_t)to;
    }
  }
  if (minimize(d)) rc = DSI_E_NOMEM;
out:
  free(x.nodes), free(x.sets.r), free(m.e);
  free(g.off_eps), free(g.off_byte), free(g.eps), free(g.byte), free(g.stamp), free(g.stack);
  free(tmp), free(pool), free(set_at), free(set_n), free(slot);
  if (rc) dsi_redfa_free(d);
  return rc;
}

void dsi_redfa_free(dsi_redfa *d) {
  free(d->next), free(d->accept);
  *d = (dsi_redfa){0};
}

int dsi_redfa_match(const dsi_redfa *d, const char *s, size_t n) {
  if (!d->n_states) return 0;
  uint32_t st = 0;
  for (size_t i = 0; i < n; i++) {
    st = d->next[(size_t)st * (size_t)d->n_cls + d->cls[(uint8_t)s[i]]];
    if (st == DSI_RE_DEAD) return 0;
  }
  return d->accept[st];
}
