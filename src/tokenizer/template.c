/* tokenizer/template.c: the chat-template front end — the public API, the
 * built-in DeepSeek-V3 template, and turning Jinja source into an AST the
 * way @huggingface/jinja does (its preprocessing, lexer and parser). */
#include "tokenizer/template.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tmpl_int.h"

/* ---- the built-in template: deepseek-ai/DeepSeek-V3 tokenizer_config.json ---- */

static const char DEEPSEEK_V3_TEMPLATE[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}"
    "{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}"
    "{%- else %}{% set ns.system_prompt = ns.system_prompt + '\n"
    "\n"
    "' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}"
    "{%- for message in messages %}{%- if message['role'] == 'user' %}"
    "{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is none %}"
    "{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}"
    "{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n"
    "' + '```json' + '\n"
    "' + tool['function']['arguments'] + '\n"
    "' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'\n"
    "' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n"
    "' + '```json' + '\n"
    "' + tool['function']['arguments'] + '\n"
    "' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}"
    "{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}"
    "{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
    "{%- set ns.is_tool = false -%}"
    "{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}"
    "{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}"
    "{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}"
    "{%- set ns.is_output_first = false %}{%- else %}{{'\n"
    "<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}"
    "{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}";

const char *dsi_tmpl_deepseek_v3(void) { return DEEPSEEK_V3_TEMPLATE; }

/* ---- preprocessing: trailing newline, lstrip_blocks, trim_blocks, generation tags ---- */

/* The text the lexer reads, with each byte's offset in the original source
 * (org[len] is the original length) so messages can name line:column. */
typedef struct pp_text {
  char *s;
  uint32_t *org;
  size_t len;
} pp_text;

static pp_text pp_new(tmpl_arena *a, size_t cap) {
  pp_text t;
  t.s = ta_alloc(a, cap + 1);
  t.org = ta_alloc(a, (cap + 1) * sizeof *t.org);
  t.len = 0;
  return t;
}

static void pp_push(pp_text *t, const pp_text *from, size_t i) {
  t->s[t->len] = from->s[i];
  t->org[t->len++] = from->org[i];
}

static void pp_end(pp_text *t, const pp_text *from) {
  t->s[t->len] = 0;
  t->org[t->len] = from->org[from->len];
}

static int pp_line_start(const pp_text *t, size_t i) {
  if (i == 0) return 1;
  unsigned char c = (unsigned char)t->s[i - 1];
  if (c == '\n' || c == '\r') return 1;
  /* U+2028 and U+2029 end lines for JavaScript's ^ too */
  return i >= 3 && (unsigned char)t->s[i - 3] == 0xE2 && (unsigned char)t->s[i - 2] == 0x80 &&
         (c == 0xA8 || c == 0xA9);
}

/* the length of JavaScript white space (\s) starting at i */
static size_t pp_space_at(const pp_text *t, size_t i) {
  size_t j = i;
  if (i >= t->len || !js_space(u8_next(t->s, t->len, &j))) return 0;
  return j - i;
}

/* /^[ \t]*({[#%-])/gm -> "$1" */
static pp_text pp_lstrip_blocks(tmpl_arena *a, const pp_text *in) {
  pp_text t = pp_new(a, in->len);
  for (size_t i = 0; i < in->len;) {
    if (pp_line_start(in, i)) {
      size_t j = i;
      while (j < in->len && (in->s[j] == ' ' || in->s[j] == '\t')) j++;
      if (j + 1 < in->len && in->s[j] == '{' && (in->s[j + 1] == '#' || in->s[j + 1] == '%' || in->s[j + 1] == '-')) {
        pp_push(&t, in, j);
        pp_push(&t, in, j + 1);
        i = j + 2;
        continue;
      }
    }
    pp_push(&t, in, i++);
  }
  pp_end(&t, in);
  return t;
}

/* /([#%-]})\n/g -> "$1" */
static pp_text pp_trim_blocks(tmpl_arena *a, const pp_text *in) {
  pp_text t = pp_new(a, in->len);
  for (size_t i = 0; i < in->len;) {
    if (i + 2 < in->len && (in->s[i] == '#' || in->s[i] == '%' || in->s[i] == '-') && in->s[i + 1] == '}' &&
        in->s[i + 2] == '\n') {
      pp_push(&t, in, i);
      pp_push(&t, in, i + 1);
      i += 3;
      continue;
    }
    pp_push(&t, in, i++);
  }
  pp_end(&t, in);
  return t;
}

/* Is there a {% generation %} or {% endgeneration %} tag at i? Sets its end
 * and whether it strips white space before (lstrip) and after (rstrip). */
static int pp_generation_tag(const pp_text *t, size_t i, size_t *end, int *lstrip, int *rstrip) {
  if (i + 1 >= t->len || t->s[i] != '{' || t->s[i + 1] != '%') return 0;
  size_t j = i + 2, w;
  *lstrip = j < t->len && t->s[j] == '-';
  if (*lstrip) j++;
  while ((w = pp_space_at(t, j))) j += w;
  if (j + 3 <= t->len && !memcmp(t->s + j, "end", 3)) j += 3;
  if (j + 10 > t->len || memcmp(t->s + j, "generation", 10)) return 0;
  j += 10;
  while ((w = pp_space_at(t, j))) j += w;
  *rstrip = j < t->len && t->s[j] == '-';
  if (*rstrip) j++;
  if (j + 2 > t->len || t->s[j] != '%' || t->s[j + 1] != '}') return 0;
  *end = j + 2;
  return 1;
}

/* /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs: the tags go, and the
 * white space around them too where the tag has a dash on that side */
static pp_text pp_generation(tmpl_arena *a, const pp_text *in) {
  if (!strstr(in->s, "generation")) return *in;
  pp_text t = pp_new(a, in->len);
  size_t i = 0;
  while (i < in->len) {
    size_t ws = i, w;
    while ((w = pp_space_at(in, ws))) ws += w;
    size_t end;
    int ls, rs;
    if (pp_generation_tag(in, ws, &end, &ls, &rs)) {
      if (!ls)
        for (size_t k = i; k < ws; k++) pp_push(&t, in, k);
      size_t after = end;
      while ((w = pp_space_at(in, after))) after += w;
      if (!rs)
        for (size_t k = end; k < after; k++) pp_push(&t, in, k);
      i = after;
      continue;
    }
    if (ws > i) { /* white space not before a tag: keep it, go on after it */
      for (size_t k = i; k < ws; k++) pp_push(&t, in, k);
      i = ws;
      continue;
    }
    pp_push(&t, in, i++);
  }
  pp_end(&t, in);
  return t;
}

static pp_text preprocess(tmpl_arena *a, const char *src, size_t len) {
  pp_text t = pp_new(a, len);
  if (len && src[len - 1] == '\n') len--;
  memcpy(t.s, src, len);
  for (size_t i = 0; i <= len; i++) t.org[i] = (uint32_t)i;
  t.len = len;
  t.s[len] = 0;
  pp_text l = pp_lstrip_blocks(a, &t);
  pp_text r = pp_trim_blocks(a, &l);
  return pp_generation(a, &r);
}

/* ---- lexer ---- */

enum {
  T_TEXT, T_NUM, T_STR, T_IDENT, T_EQUALS, T_LPAREN, T_RPAREN, T_OPEN_STMT, T_CLOSE_STMT,
  T_OPEN_EXPR, T_CLOSE_EXPR, T_LBRACKET, T_RBRACKET, T_LBRACE, T_RBRACE, T_COMMA, T_DOT,
  T_COLON, T_PIPE, T_ADD, T_MUL, T_POW, T_CMP, T_UNARY, T_COMMENT, T_EOF,
};

typedef struct ttok {
  int type;
  uint32_t pos; /* original offset */
  tstr *val;
} ttok;

typedef struct tparser {
  tmpl_fail fail;
  tmpl_arena *ar;  /* the program's: the AST and its strings */
  tmpl_arena tmp;  /* preprocessing and tokens, freed after parsing */
  pp_text pp;
  ttok *tok;
  size_t ntok, cap, cur;
  int nest;
  /* open blocks, for messages about unclosed tags */
  const char *open_name[TMPL_MAX_NEST + 8];
  uint32_t open_pos[TMPL_MAX_NEST + 8];
  int nopen;
} tparser;

static void tok_push(tparser *p, int type, size_t at, const char *s, size_t n) {
  if (p->ntok == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 256;
    p->tok = ta_grow(&p->tmp, p->tok, p->cap * sizeof *p->tok, cap * sizeof *p->tok);
    p->cap = cap;
  }
  ttok *t = &p->tok[p->ntok++];
  t->type = type;
  t->pos = p->pp.org[at];
  t->val = ts_new(p->ar, s, n);
}

static _Noreturn void lex_fail(tparser *p, size_t at, const char *fmt, const char *arg) {
  tmpl_failf(&p->fail, DSI_E_FORMAT, p->pp.org[at < p->pp.len ? at : p->pp.len], fmt, arg);
}

/* `{%-` and `{{-` trim the text before them */
static void lex_strip_trailing(tparser *p) {
  if (!p->ntok || p->tok[p->ntok - 1].type != T_TEXT) return;
  tstr *v = p->tok[p->ntok - 1].val;
  v->len = js_trim_end(v->s, v->len);
  v->s[v->len] = 0;
  if (!v->len) p->ntok--;
}

static size_t lex_skip_space(const pp_text *t, size_t i) {
  size_t w;
  while ((w = pp_space_at(t, i))) i += w;
  return i;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_word(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int hexval(char c) {
  return is_digit(c) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* a quoted string literal starting at i (the quote); returns the index after it */
static size_t lex_string(tparser *p, size_t i) {
  const char *s = p->pp.s;
  size_t n = p->pp.len, start = i;
  char q = s[i++];
  tbuf b;
  tb_init(&b, &p->tmp, TMPL_MAX_SOURCE);
  uint32_t hi = 0; /* a pending high surrogate from \u */
  for (;;) {
    if (i >= n) lex_fail(p, start, "string literal is not closed%s", "");
    char c = s[i];
    if (c == q) break;
    if (c != '\\') {
      if (hi) { u8_put(&b, 0xFFFD); hi = 0; }
      tb_putc(&b, c);
      i++;
      continue;
    }
    if (++i >= n) lex_fail(p, start, "string literal is not closed%s", "");
    char e = s[i++];
    if (e == 'x' || e == 'u') {
      int len = e == 'x' ? 2 : 4;
      uint32_t cp = 0;
      for (int k = 0; k < len; k++) {
        int h = i + (size_t)k < n ? hexval(s[i + k]) : -1;
        if (h < 0) lex_fail(p, i - 2, "invalid hexadecimal escape sequence in string literal%s", "");
        cp = cp << 4 | (uint32_t)h;
      }
      i += (size_t)len;
      if (cp >= 0xDC00 && cp < 0xE000 && hi) {
        u8_put(&b, 0x10000 + ((hi - 0xD800) << 10) + (cp - 0xDC00));
        hi = 0;
        continue;
      }
      if (hi) { u8_put(&b, 0xFFFD); hi = 0; }
      if (cp >= 0xD800 && cp < 0xDC00) hi = cp;
      else u8_put(&b, cp >= 0xDC00 && cp < 0xE000 ? 0xFFFD : cp);
      continue;
    }
    if (hi) { u8_put(&b, 0xFFFD); hi = 0; }
    static const char from[] = "ntrbfv'\"\\", to[] = "\n\t\r\b\f\v'\"\\";
    const char *m = e ? strchr(from, e) : NULL;
    if (!m) {
      char what[2] = {e, 0};
      lex_fail(p, i - 2, "unexpected escaped character '\\%s' in string literal", what);
    }
    tb_putc(&b, to[m - from]);
  }
  if (hi) u8_put(&b, 0xFFFD);
  tok_push(p, T_STR, start, b.p ? b.p : "", b.n);
  return i + 1;
}

/* digits, then a fraction unless the number follows a dot (x.0.1) */
static size_t lex_number(tparser *p, size_t i, int type, size_t start, int frac_ok) {
  const char *s = p->pp.s;
  while (is_digit(s[i])) i++;
  if (frac_ok && s[i] == '.' && is_digit(s[i + 1])) {
    i++;
    while (is_digit(s[i])) i++;
  }
  tok_push(p, type, start, s + start, i - start);
  return i;
}

static void lex(tparser *p) {
  static const struct { const char *seq; int type; } table[] = {
      {"{%", T_OPEN_STMT}, {"%}", T_CLOSE_STMT}, {"{{", T_OPEN_EXPR}, {"}}", T_CLOSE_EXPR},
      {"(", T_LPAREN}, {")", T_RPAREN}, {"{", T_LBRACE}, {"}", T_RBRACE}, {"[", T_LBRACKET},
      {"]", T_RBRACKET}, {",", T_COMMA}, {".", T_DOT}, {":", T_COLON}, {"|", T_PIPE},
      {"<=", T_CMP}, {">=", T_CMP}, {"==", T_CMP}, {"!=", T_CMP}, {"<", T_CMP}, {">", T_CMP},
      {"+", T_ADD}, {"-", T_ADD}, {"~", T_ADD}, {"**", T_POW}, {"*", T_MUL}, {"//", T_MUL},
      {"/", T_MUL}, {"%", T_MUL}, {"=", T_EQUALS},
  };
  const char *s = p->pp.s;
  size_t n = p->pp.len, i = 0;
  int curly = 0;
  while (i < n) {
    int last = p->ntok ? p->tok[p->ntok - 1].type : -1;
    if (last < 0 || last == T_CLOSE_STMT || last == T_CLOSE_EXPR || last == T_COMMENT) {
      size_t st = i;
      while (i < n && !(s[i] == '{' && (s[i + 1] == '%' || s[i + 1] == '{' || s[i + 1] == '#'))) i++;
      if (i > st) {
        tok_push(p, T_TEXT, st, s + st, i - st);
        continue;
      }
    }
    if (s[i] == '{' && s[i + 1] == '#') {
      size_t st = i;
      i += 2;
      int strip_before = s[i] == '-';
      if (strip_before) i++;
      size_t cst = i;
      while (!(s[i] == '#' && s[i + 1] == '}')) {
        if (i + 2 >= n) lex_fail(p, st, "comment is not closed by '#}'%s", "");
        i++;
      }
      int strip_after = i > cst && s[i - 1] == '-';
      if (strip_before) lex_strip_trailing(p);
      tok_push(p, T_COMMENT, st, s + cst, i - cst - (size_t)strip_after);
      i += 2;
      if (strip_after) i = lex_skip_space(&p->pp, i);
      continue;
    }
    if ((s[i] == '{' && s[i + 1] == '%' && s[i + 2] == '-') || (s[i] == '{' && s[i + 1] == '{' && s[i + 2] == '-')) {
      lex_strip_trailing(p);
      int expr = s[i + 1] == '{';
      tok_push(p, expr ? T_OPEN_EXPR : T_OPEN_STMT, i, expr ? "{{" : "{%", 2);
      if (expr) curly = 0;
      i += 3;
      continue;
    }
    i = lex_skip_space(&p->pp, i);
    if (i >= n) break;
    if (s[i] == '-' && ((s[i + 1] == '%' && s[i + 2] == '}') || (s[i + 1] == '}' && s[i + 2] == '}'))) {
      int stmt = s[i + 1] == '%';
      tok_push(p, stmt ? T_CLOSE_STMT : T_CLOSE_EXPR, i, stmt ? "%}" : "}}", 2);
      i = lex_skip_space(&p->pp, i + 3);
      continue;
    }
    char c = s[i];
    if (c == '-' || c == '+') {
      int lt = p->ntok ? p->tok[p->ntok - 1].type : -1;
      if (lt < 0 || lt == T_TEXT) {
        char what[2] = {c, 0};
        lex_fail(p, i, "unexpected character '%s'", what);
      }
      if (lt != T_IDENT && lt != T_NUM && lt != T_STR && lt != T_RPAREN && lt != T_RBRACKET) {
        size_t st = i++;
        if (is_digit(s[i])) {
          i = lex_number(p, i, T_NUM, st, 1);
        } else {
          tok_push(p, T_UNARY, st, s + st, 1);
        }
        continue;
      }
    }
    int matched = 0;
    for (size_t k = 0; k < DSI_ARRAY_LEN(table); k++) {
      size_t m = strlen(table[k].seq);
      if (table[k].type == T_CLOSE_EXPR && curly > 0) continue;
      if (i + m <= n && !memcmp(s + i, table[k].seq, m)) {
        tok_push(p, table[k].type, i, s + i, m);
        if (table[k].type == T_OPEN_EXPR) curly = 0;
        else if (table[k].type == T_LBRACE) curly++;
        else if (table[k].type == T_RBRACE) curly--;
        i += m;
        matched = 1;
        break;
      }
    }
    if (matched) continue;
    if (c == '\'' || c == '"') {
      i = lex_string(p, i);
      continue;
    }
    if (is_digit(c)) {
      i = lex_number(p, i, T_NUM, i, !p->ntok || p->tok[p->ntok - 1].type != T_DOT);
      continue;
    }
    if (is_word(c)) {
      size_t st = i;
      while (is_word(s[i])) i++;
      tok_push(p, T_IDENT, st, s + st, i - st);
      continue;
    }
    size_t j = i;
    u8_next(s, n, &j);
    char what[8] = {0};
    memcpy(what, s + i, j - i < 7 ? j - i : 7);
    lex_fail(p, i, "unexpected character '%s'", what);
  }
  /* a sentinel: the parser never reads past the end */
  tok_push(p, T_EOF, n, "", 0);
}

/* ---- parser: recursive descent, the grammar of @huggingface/jinja ---- */

static const ttok *pk(const tparser *p, size_t ahead) {
  size_t i = p->cur + ahead;
  return &p->tok[i < p->ntok ? i : p->ntok - 1];
}

static const char *tok_desc(const ttok *t, char *buf, size_t cap) {
  switch (t->type) {
  case T_EOF: return "the end of the template";
  case T_TEXT: return "text";
  case T_STR: snprintf(buf, cap, "string '%.40s'", t->val->s); return buf;
  case T_IDENT: snprintf(buf, cap, "'%.40s'", t->val->s); return buf;
  case T_COMMENT: return "a comment";
  default: snprintf(buf, cap, "'%s'", t->val->s); return buf;
  }
}

static _Noreturn void p_fail(tparser *p, const ttok *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void p_fail(tparser *p, const ttok *at, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  tmpl_failf(&p->fail, DSI_E_FORMAT, at->pos, "%s", msg);
}

static _Noreturn void p_unexpected(tparser *p, const char *want) {
  char b[80];
  p_fail(p, pk(p, 0), "expected %s, got %s", want, tok_desc(pk(p, 0), b, sizeof b));
}

static int p_is(const tparser *p, int type) { return pk(p, 0)->type == type; }
static int p_is_ident(const tparser *p, size_t ahead, const char *name) {
  const ttok *t = pk(p, ahead);
  return t->type == T_IDENT && !strcmp(t->val->s, name);
}
static const ttok *p_expect(tparser *p, int type, const char *want) {
  if (!p_is(p, type)) p_unexpected(p, want);
  return &p->tok[p->cur++];
}

/* {% name %} with name one of the NULL-terminated names */
static int p_is_stmt(const tparser *p, const char *const *names) {
  if (!p_is(p, T_OPEN_STMT) || pk(p, 1)->type != T_IDENT) return 0;
  for (; *names; names++)
    if (!strcmp(pk(p, 1)->val->s, *names)) return 1;
  return 0;
}

static tnode *nn(tparser *p, int kind, uint32_t pos) {
  tnode *n = ta_alloc(p->ar, sizeof *n);
  n->kind = kind;
  n->pos = pos;
  return n;
}

static void l_push(tparser *p, tlist *l, tnode *n) {
  if ((l->n & (l->n - 1)) == 0) { /* grow at powers of two */
    size_t cap = l->n ? (size_t)l->n * 2 : 1;
    l->v = ta_grow(p->ar, l->v, (size_t)l->n * sizeof *l->v, cap * sizeof *l->v);
  }
  l->v[l->n++] = n;
}

static void p_enter(tparser *p) {
  if (++p->nest > TMPL_MAX_NEST) p_fail(p, pk(p, 0), "nested more than %d deep", TMPL_MAX_NEST);
}

static tnode *p_expr(tparser *p);
static tnode *p_primary(tparser *p);
static tnode *p_any(tparser *p);

/* a, b, c -> tuple; a -> a */
static tnode *p_expr_seq(tparser *p, int primary) {
  uint32_t pos = pk(p, 0)->pos;
  tnode *first = primary ? p_primary(p) : p_expr(p);
  if (!p_is(p, T_COMMA)) return first;
  tnode *t = nn(p, N_TUPLE, pos);
  l_push(p, &t->list, first);
  while (p_is(p, T_COMMA)) {
    p->cur++;
    l_push(p, &t->list, primary ? p_primary(p) : p_expr(p));
  }
  return t;
}

/* call arguments (mode 0) or macro parameters (mode 1), between parentheses */
static tlist p_args(tparser *p, int params) {
  tlist args = {0};
  p_expect(p, T_LPAREN, "'('");
  int saw_kw = 0, saw_spread = 0;
  while (!p_is(p, T_RPAREN)) {
    const ttok *t = pk(p, 0);
    if (t->type == T_EOF) p_unexpected(p, "')'");
    int kw_spread = t->type == T_POW, spread = t->type == T_MUL && !strcmp(t->val->s, "*");
    if (params && (kw_spread || spread)) p_fail(p, t, "argument unpacking is not allowed in parameters");
    if (kw_spread) {
      p->cur++;
      tnode *n = nn(p, N_KWSPREAD, t->pos);
      n->a = p_expr(p);
      l_push(p, &args, n);
      if (p_is(p, T_COMMA)) p->cur++;
      if (!p_is(p, T_RPAREN)) p_fail(p, pk(p, 0), "'**' must be applied to the last argument");
      break;
    }
    tnode *arg;
    if (spread) {
      if (saw_spread) p_fail(p, t, "only one '*' argument unpacking is allowed");
      saw_spread = 1;
      p->cur++;
      arg = nn(p, N_SPREAD, t->pos);
      arg->a = p_expr(p);
    } else {
      arg = p_expr(p);
      if (p_is(p, T_EQUALS)) {
        const ttok *eq = &p->tok[p->cur++];
        if (arg->kind != N_IDENT)
          p_fail(p, eq, params ? "expected an identifier for a parameter" : "expected an identifier for a keyword argument");
        tnode *kw = nn(p, N_KWARG, arg->pos);
        kw->s = arg->s;
        kw->a = p_expr(p);
        arg = kw;
      }
      if (params) {
        if (arg->kind != N_IDENT && arg->kind != N_KWARG) p_fail(p, t, "expected an identifier for a parameter");
        for (int i = 0; i < args.n; i++)
          if (!strcmp(args.v[i]->s->s, arg->s->s)) p_fail(p, t, "duplicate parameter '%s'", arg->s->s);
      }
      if (arg->kind == N_KWARG) saw_kw = 1;
      else if (saw_kw)
        p_fail(p, t, params ? "a parameter without a default follows one with a default"
                            : "positional arguments must come before keyword arguments");
      else if (saw_spread) p_fail(p, t, "positional arguments must not follow '*' unpacking");
    }
    l_push(p, &args, arg);
    if (p_is(p, T_COMMA)) p->cur++;
  }
  p->cur++;
  return args;
}

static tnode *p_call(tparser *p, tnode *callee);

/* .name, .0, [expr], [a:b:c] */
static tnode *p_member(tparser *p, tnode *obj) {
  while (p_is(p, T_DOT) || p_is(p, T_LBRACKET)) {
    const ttok *op = &p->tok[p->cur++];
    tnode *m = nn(p, N_MEMBER, op->pos);
    m->a = obj;
    if (op->type == T_LBRACKET) {
      m->flag = 1;
      tnode *parts[4] = {0};
      int n = 0, is_slice = 0;
      while (!p_is(p, T_RBRACKET)) {
        if (p_is(p, T_EOF)) p_unexpected(p, "']'");
        if (n >= 3) p_fail(p, op, "a slice takes at most 3 parts");
        if (p_is(p, T_COLON)) {
          parts[n++] = NULL;
          p->cur++;
          is_slice = 1;
        } else {
          parts[n++] = p_expr(p);
          if (p_is(p, T_COLON)) {
            p->cur++;
            is_slice = 1;
          }
        }
      }
      if (!n) p_fail(p, op, "expected a subscript between '[' and ']'");
      if (is_slice) {
        tnode *sl = nn(p, N_SLICE, op->pos);
        sl->a = parts[0];
        sl->b = parts[1];
        sl->c = parts[2];
        m->b = sl;
      } else {
        m->b = parts[0];
      }
      p_expect(p, T_RBRACKET, "']'");
    } else {
      m->b = p_primary(p);
      if (m->b->kind != N_IDENT && m->b->kind != N_INT) p_fail(p, op, "expected a name or an integer after '.'");
    }
    obj = m;
  }
  return obj;
}

static tnode *p_call(tparser *p, tnode *callee) {
  uint32_t pos = pk(p, 0)->pos;
  tnode *c = nn(p, N_CALL, pos);
  c->a = callee;
  c->list = p_args(p, 0);
  tnode *e = p_member(p, c);
  if (p_is(p, T_LPAREN)) e = p_call(p, e);
  return e;
}

static tnode *p_primary(tparser *p) {
  p_enter(p);
  const ttok *t = &p->tok[p->cur];
  tnode *n;
  char b[80];
  switch (t->type) {
  case T_NUM:
    p->cur++;
    n = nn(p, strchr(t->val->s, '.') ? N_FLOAT : N_INT, t->pos);
    n->num = strtod(t->val->s, NULL);
    break;
  case T_STR: {
    p->cur++;
    n = nn(p, N_STR, t->pos);
    n->s = t->val;
    while (p_is(p, T_STR)) { /* 'a' 'b' is 'ab' */
      const tstr *nx = p->tok[p->cur++].val;
      n->s = ts_cat(p->ar, n->s->s, n->s->len, nx->s, nx->len);
    }
    break;
  }
  case T_IDENT:
    p->cur++;
    n = nn(p, N_IDENT, t->pos);
    n->s = t->val;
    break;
  case T_LPAREN:
    p->cur++;
    n = p_expr_seq(p, 0);
    p_expect(p, T_RPAREN, "')'");
    break;
  case T_LBRACKET: case T_LBRACE: { /* [a, b] and {k: v} */
    int obj = t->type == T_LBRACE, close = obj ? T_RBRACE : T_RBRACKET;
    p->cur++;
    n = nn(p, obj ? N_OBJECT : N_ARRAY, t->pos);
    while (!p_is(p, close)) {
      if (p_is(p, T_EOF)) p_unexpected(p, obj ? "'}'" : "']'");
      l_push(p, &n->list, p_expr(p));
      if (obj) {
        p_expect(p, T_COLON, "':' between a key and its value");
        l_push(p, &n->list2, p_expr(p));
      }
      if (p_is(p, T_COMMA)) p->cur++;
    }
    p->cur++;
    break;
  }
  default:
    p_fail(p, t, "expected an expression, got %s", tok_desc(t, b, sizeof b));
  }
  p->nest--;
  return n;
}

static tnode *p_call_member(tparser *p) {
  tnode *m = p_member(p, p_primary(p));
  return p_is(p, T_LPAREN) ? p_call(p, m) : m;
}

static tnode *p_unary_sign(tparser *p) {
  const ttok *t = pk(p, 0);
  if ((t->type == T_UNARY || t->type == T_ADD) && (!strcmp(t->val->s, "-") || !strcmp(t->val->s, "+"))) {
    p_enter(p);
    p->cur++;
    tnode *u = nn(p, N_UNARY, t->pos);
    u->op = t->val->s[0] == '-' ? OP_NEG : OP_POS;
    u->a = p_unary_sign(p);
    p->nest--;
    return u;
  }
  return p_call_member(p);
}

static tnode *p_filter(tparser *p) {
  tnode *operand = p_unary_sign(p);
  while (p_is(p, T_PIPE)) {
    p->cur++;
    const ttok *t = pk(p, 0);
    tnode *f = p_primary(p);
    if (f->kind != N_IDENT) p_fail(p, t, "expected a filter name after '|'");
    if (p_is(p, T_LPAREN)) f = p_call(p, f);
    tnode *n = nn(p, N_FILTER, t->pos);
    n->a = operand;
    n->b = f;
    operand = n;
  }
  return operand;
}

static tnode *p_test(tparser *p) {
  tnode *operand = p_filter(p);
  while (p_is_ident(p, 0, "is")) {
    p->cur++;
    int negate = p_is_ident(p, 0, "not");
    if (negate) p->cur++;
    const ttok *t = pk(p, 0);
    tnode *name = p_primary(p);
    if (name->kind != N_IDENT) p_fail(p, t, "expected a test name after 'is'");
    tnode *n = nn(p, N_TEST, t->pos);
    n->a = operand;
    n->flag = negate;
    n->s = name->s;
    operand = n;
  }
  return operand;
}

static tnode *p_binary(tparser *p, tnode *l, const ttok *op, int code, tnode *r) {
  tnode *n = nn(p, N_BINARY, op->pos);
  n->op = code;
  n->a = l;
  n->b = r;
  return n;
}

static int op_code(const char *s) {
  static const char *ops[] = {"+", "-", "~", "*", "/", "//", "%", "**", "==", "!=", "<", ">", "<=", ">="};
  static const int codes[] = {OP_ADD, OP_SUB, OP_CAT, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD,
                              OP_POW, OP_EQ,  OP_NE,  OP_LT,  OP_GT,  OP_LE,       OP_GE};
  for (size_t i = 0; i < DSI_ARRAY_LEN(ops); i++)
    if (!strcmp(s, ops[i])) return codes[i];
  return -1;
}

/* the arithmetic levels, loosest first: + - ~, then * / // %, then ** */
static tnode *p_arith(tparser *p, int level) {
  static const int tokens[] = {T_ADD, T_MUL, T_POW};
  if (level == (int)DSI_ARRAY_LEN(tokens)) return p_test(p);
  tnode *l = p_arith(p, level + 1);
  while (p_is(p, tokens[level])) {
    const ttok *op = &p->tok[p->cur++];
    l = p_binary(p, l, op, op_code(op->val->s), p_arith(p, level + 1));
  }
  return l;
}

static tnode *p_cmp(tparser *p) {
  tnode *l = p_arith(p, 0);
  for (;;) {
    const ttok *op = pk(p, 0);
    int code;
    if (p_is_ident(p, 0, "not") && p_is_ident(p, 1, "in")) { code = OP_NOTIN; p->cur += 2; }
    else if (p_is_ident(p, 0, "in")) { code = OP_IN; p->cur++; }
    else if (p_is(p, T_CMP)) { code = op_code(op->val->s); p->cur++; }
    else break;
    l = p_binary(p, l, op, code, p_arith(p, 0));
  }
  return l;
}

static tnode *p_not(tparser *p) {
  tnode *right = NULL;
  while (p_is_ident(p, 0, "not")) {
    const ttok *op = &p->tok[p->cur++];
    p_enter(p);
    tnode *u = nn(p, N_UNARY, op->pos);
    u->op = OP_NOT;
    u->a = p_not(p);
    p->nest--;
    right = u;
  }
  return right ? right : p_cmp(p);
}

/* `or` (level 0) over `and` (level 1) over `not` */
static tnode *p_logic(tparser *p, int level) {
  if (level == 2) return p_not(p);
  const char *word = level ? "and" : "or";
  tnode *l = p_logic(p, level + 1);
  while (p_is_ident(p, 0, word)) {
    const ttok *op = &p->tok[p->cur++];
    l = p_binary(p, l, op, level ? OP_AND : OP_OR, p_logic(p, level + 1));
  }
  return l;
}

/* a if b else c; a if b (undefined when b is false) */
static tnode *p_expr(tparser *p) {
  p_enter(p);
  tnode *a = p_logic(p, 0);
  if (p_is_ident(p, 0, "if")) {
    const ttok *t = &p->tok[p->cur++];
    tnode *test = p_logic(p, 0);
    if (p_is_ident(p, 0, "else")) {
      p->cur++;
      tnode *n = nn(p, N_TERNARY, t->pos);
      n->a = test;
      n->b = a;
      n->c = p_expr(p);
      a = n;
    } else {
      tnode *n = nn(p, N_SELECT, t->pos);
      n->a = a;
      n->b = test;
      a = n;
    }
  }
  p->nest--;
  return a;
}

/* statements until one of the names; an unclosed block names where it opened */
static void p_body(tparser *p, tlist *body, const char *const *until) {
  while (!p_is_stmt(p, until)) {
    if (p_is(p, T_EOF)) {
      int k = p->nopen - 1;
      const char *const *end = until;
      while (end[1] && strncmp(*end, "end", 3)) end++;
      tmpl_failf(&p->fail, DSI_E_FORMAT, p->open_pos[k], "{%% %s %%} is not closed (expected {%% %s %%})",
                 p->open_name[k], *end);
    }
    tnode *n = p_any(p);
    if (n) l_push(p, body, n);
  }
}

static void p_open(tparser *p, const char *name, uint32_t pos) {
  p->open_name[p->nopen] = name;
  p->open_pos[p->nopen++] = pos;
}

/* {% endNAME %} */
static void p_end(tparser *p, const char *name) {
  p_expect(p, T_OPEN_STMT, "'{%'");
  if (!p_is_ident(p, 0, name)) {
    char want[40];
    snprintf(want, sizeof want, "'%s'", name);
    p_unexpected(p, want);
  }
  p->cur++;
  p_expect(p, T_CLOSE_STMT, "'%}'");
}

static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR_ELSE[] = {"endfor", NULL};
static const char *const END_IF_ELSE[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};

static tnode *p_if(tparser *p, uint32_t pos) {
  tnode *n = nn(p, N_IF, pos);
  n->a = p_expr(p);
  p_expect(p, T_CLOSE_STMT, "'%}'");
  p_body(p, &n->list, END_IF);
  if (p_is_stmt(p, (const char *const[]){"elif", NULL})) {
    uint32_t epos = pk(p, 0)->pos;
    p->cur += 2;
    p_enter(p);
    l_push(p, &n->list2, p_if(p, epos));
    p->nest--;
  } else if (p_is_stmt(p, (const char *const[]){"else", NULL})) {
    p->cur += 2;
    p_expect(p, T_CLOSE_STMT, "'%}'");
    p_body(p, &n->list2, END_IF_ELSE);
  }
  return n;
}

/* does a macro body use `kwargs` or `varargs`? (bit 1, bit 2) */
static int uses_special(const tnode *n) {
  if (!n) return 0;
  int f = 0;
  if (n->kind == N_IDENT) {
    if (!strcmp(n->s->s, "kwargs")) f |= 1;
    if (!strcmp(n->s->s, "varargs")) f |= 2;
  }
  if (n->kind == N_MACRO) return 0; /* a nested macro has its own */
  f |= uses_special(n->a) | uses_special(n->b) | uses_special(n->c);
  for (int i = 0; i < n->list.n; i++) f |= uses_special(n->list.v[i]);
  for (int i = 0; i < n->list2.n; i++) f |= uses_special(n->list2.v[i]);
  return f;
}

/* is `loop` used as a value (stored, passed, printed), not only as loop.x? */
static int loop_escapes(const tnode *n) {
  if (!n) return 0;
  if (n->kind == N_IDENT) return !strcmp(n->s->s, "loop");
  int f = 0;
  if (n->kind == N_MEMBER && n->a->kind == N_IDENT) f = 0; /* loop.x: fine */
  else f |= loop_escapes(n->a);
  f |= loop_escapes(n->b) | loop_escapes(n->c);
  for (int i = 0; i < n->list.n && !f; i++) f |= loop_escapes(n->list.v[i]);
  for (int i = 0; i < n->list2.n && !f; i++) f |= loop_escapes(n->list2.v[i]);
  return f;
}

static tnode *p_statement(tparser *p) {
  const ttok *open = p_expect(p, T_OPEN_STMT, "'{%'");
  const ttok *t = pk(p, 0);
  char b[80];
  if (t->type != T_IDENT) p_fail(p, t, "expected a statement name after '{%%', got %s", tok_desc(t, b, sizeof b));
  const char *name = t->val->s;
  uint32_t pos = open->pos;
  tnode *n = NULL;
  p_enter(p);
  p->cur++;
  if (!strcmp(name, "set")) {
    n = nn(p, N_SET, pos);
    n->a = p_expr_seq(p, 0);
    if (p_is(p, T_EQUALS)) {
      p->cur++;
      n->b = p_expr_seq(p, 0);
    } else {
      p_expect(p, T_CLOSE_STMT, "'=' or '%}'");
      p_open(p, "set", pos);
      p_body(p, &n->list, END_SET);
      p->nopen--;
      p_expect(p, T_OPEN_STMT, "'{%'");
      p->cur++; /* endset */
    }
    p_expect(p, T_CLOSE_STMT, "'%}'");
  } else if (!strcmp(name, "if")) {
    p_open(p, "if", pos);
    n = p_if(p, pos);
    p->nopen--;
    p_end(p, "endif");
  } else if (!strcmp(name, "for")) {
    /* (flag: the body uses `loop` other than as loop.x, so each iteration needs its own) */
    n = nn(p, N_FOR, pos);
    const ttok *vt = pk(p, 0);
    n->a = p_expr_seq(p, 1);
    if (n->a->kind != N_IDENT && n->a->kind != N_TUPLE) p_fail(p, vt, "expected a name or names after 'for'");
    if (!p_is_ident(p, 0, "in")) p_unexpected(p, "'in'");
    p->cur++;
    n->b = p_expr(p);
    p_expect(p, T_CLOSE_STMT, "'%}'");
    p_open(p, "for", pos);
    p_body(p, &n->list, END_FOR);
    if (p_is_stmt(p, (const char *const[]){"else", NULL})) {
      p->cur += 2;
      p_expect(p, T_CLOSE_STMT, "'%}'");
      p_body(p, &n->list2, END_FOR_ELSE);
    }
    p->nopen--;
    p_end(p, "endfor");
    for (int i = 0; i < n->list.n; i++) n->flag |= loop_escapes(n->list.v[i]);
  } else if (!strcmp(name, "macro")) {
    n = nn(p, N_MACRO, pos);
    const ttok *nt = pk(p, 0);
    tnode *id = p_primary(p);
    if (id->kind != N_IDENT) p_fail(p, nt, "expected a macro name");
    n->s = id->s;
    n->list2 = p_args(p, 1);
    p_expect(p, T_CLOSE_STMT, "'%}'");
    p_open(p, "macro", pos);
    p_body(p, &n->list, END_MACRO);
    p->nopen--;
    p_end(p, "endmacro");
    for (int i = 0; i < n->list.n; i++) n->flag |= uses_special(n->list.v[i]);
    for (int i = 0; i < n->list2.n; i++)
      if (n->list2.v[i]->kind == N_KWARG) n->flag |= uses_special(n->list2.v[i]->a);
  } else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
    n = nn(p, name[0] == 'b' ? N_BREAK : N_CONTINUE, pos);
    p_expect(p, T_CLOSE_STMT, "'%}'");
  } else if (!strcmp(name, "filter")) {
    n = nn(p, N_FILTER_BLOCK, pos);
    const ttok *ft = pk(p, 0);
    tnode *f = p_primary(p);
    if (f->kind != N_IDENT) p_fail(p, ft, "expected a filter name");
    if (p_is(p, T_LPAREN)) f = p_call(p, f);
    n->b = f;
    p_expect(p, T_CLOSE_STMT, "'%}'");
    p_open(p, "filter", pos);
    p_body(p, &n->list, END_FILTER);
    p->nopen--;
    p_end(p, "endfilter");
  } else {
    static const char *ends[] = {"endif", "endfor", "elif", "else", "endset", "endmacro", "endfilter", "endcall"};
    for (size_t i = 0; i < DSI_ARRAY_LEN(ends); i++)
      if (!strcmp(name, ends[i])) {
        if (p->nopen) {
          int line, col;
          tmpl_linecol(p->fail.src, p->fail.src_len, p->open_pos[p->nopen - 1], &line, &col);
          p_fail(p, open, "unexpected {%% %s %%} inside the {%% %s %%} of line %d:%d", name,
                 p->open_name[p->nopen - 1], line, col);
        }
        p_fail(p, open, "unexpected {%% %s %%}: no block is open", name);
      }
    p_fail(p, t, "unknown statement '%s'", name);
  }
  p->nest--;
  return n;
}

static tnode *p_any(tparser *p) {
  const ttok *t = pk(p, 0);
  char b[80];
  switch (t->type) {
  case T_COMMENT: p->cur++; return NULL;
  case T_TEXT: {
    p->cur++;
    tnode *n = nn(p, N_STR, t->pos);
    n->s = t->val;
    return n;
  }
  case T_OPEN_STMT: return p_statement(p);
  case T_OPEN_EXPR: {
    p->cur++;
    tnode *e = p_expr(p);
    p_expect(p, T_CLOSE_EXPR, "'}}'");
    return e;
  }
  default: p_fail(p, t, "unexpected %s", tok_desc(t, b, sizeof b));
  }
}

int tmpl_parse(tmpl_prog *prog, const char *src, size_t len, dsi_err *err) {
  memset(prog, 0, sizeof *prog);
  if (len > TMPL_MAX_SOURCE)
    return dsi_errf(err, DSI_E_CAPACITY, "chat template: %zu bytes, more than the %u allowed", len, TMPL_MAX_SOURCE);
  tparser *p = calloc(1, sizeof *p);
  if (!p) return dsi_errf(err, DSI_E_NOMEM, "chat template: out of memory");
  prog->src = malloc(len + 1);
  if (!prog->src) { free(p); return dsi_errf(err, DSI_E_NOMEM, "chat template: out of memory"); }
  memcpy(prog->src, src, len);
  prog->src[len] = 0;
  prog->src_len = len;
  p->fail.err = err;
  p->fail.src = prog->src;
  p->fail.src_len = len;
  prog->arena.cap = p->tmp.cap = 64u * TMPL_MAX_SOURCE;
  prog->arena.fail = p->tmp.fail = &p->fail;
  p->ar = &prog->arena;
  int status = DSI_OK;
  if (setjmp(p->fail.jb)) {
    status = p->fail.status ? p->fail.status : DSI_E_FORMAT;
  } else {
    p->pp = preprocess(&p->tmp, prog->src, len);
    lex(p);
    while (!p_is(p, T_EOF)) {
      tnode *n = p_any(p);
      if (n) l_push(p, &prog->body, n);
    }
  }
  ta_free(&p->tmp);
  free(p);
  if (status) {
    ta_free(&prog->arena);
    free(prog->src);
    prog->src = NULL;
  }
  return status;
}

/* ---- the API ---- */

struct dsi_tmpl {
  tmpl_prog prog;
};

int dsi_tmpl_open(dsi_tmpl **out, const char *source, dsi_err *err) {
  *out = NULL;
  if (!source) return dsi_errf(err, DSI_E_INVAL, "chat template: no source");
  dsi_tmpl *t = calloc(1, sizeof *t);
  if (!t) return dsi_errf(err, DSI_E_NOMEM, "chat template: out of memory");
  int st = tmpl_parse(&t->prog, source, strlen(source), err);
  if (st) {
    free(t);
    return st;
  }
  *out = t;
  return DSI_OK;
}

int dsi_tmpl_open_config(dsi_tmpl **out, const cJSON *cfg, dsi_err *err) {
  *out = NULL;
  const cJSON *ct = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
  if (!ct || cJSON_IsNull(ct)) return dsi_tmpl_open(out, DEEPSEEK_V3_TEMPLATE, err);
  if (cJSON_IsString(ct)) return dsi_tmpl_open(out, ct->valuestring, err);
  if (cJSON_IsArray(ct)) {
    const cJSON *e;
    cJSON_ArrayForEach(e, ct) {
      const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
      const cJSON *src = cJSON_GetObjectItemCaseSensitive(e, "template");
      if (cJSON_IsString(name) && !strcmp(name->valuestring, "default")) {
        if (!cJSON_IsString(src))
          return dsi_errf(err, DSI_E_CONFIG, "tokenizer_config.json: chat_template \"default\" has no \"template\" string");
        return dsi_tmpl_open(out, src->valuestring, err);
      }
    }
    return dsi_errf(err, DSI_E_CONFIG, "tokenizer_config.json: chat_template list has no entry named \"default\"");
  }
  return dsi_errf(err, DSI_E_CONFIG, "tokenizer_config.json: chat_template must be a string or a list of {name, template}");
}

int dsi_tmpl_render_len(const dsi_tmpl *t, const cJSON *context, char **out, size_t *len, dsi_err *err) {
  *out = NULL;
  if (len) *len = 0;
  if (!t) return dsi_errf(err, DSI_E_INVAL, "chat template: none");
  if (context && !cJSON_IsObject(context)) return dsi_errf(err, DSI_E_INVAL, "chat template: the context must be a JSON object");
  size_t n = 0;
  int st = tmpl_run(&t->prog, context, out, &n, err);
  if (len) *len = n;
  return st;
}

int dsi_tmpl_render(const dsi_tmpl *t, const cJSON *context, char **out, dsi_err *err) {
  return dsi_tmpl_render_len(t, context, out, NULL, err);
}

void dsi_tmpl_free(dsi_tmpl *t) {
  if (!t) return;
  ta_free(&t->prog.arena);
  free(t->prog.src);
  free(t);
}

const char *dsi_tmpl_config_token(const cJSON *cfg, const char *key) {
  const cJSON *v = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, key) : NULL;
  if (cJSON_IsString(v)) return v->valuestring;
  const cJSON *c = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "content") : NULL;
  return cJSON_IsString(c) ? c->valuestring : NULL;
}
