/* tokenizer/tmpl_value.c: the chat-template renderer's memory and values —
 * arena, buffers, error jumps, runtime values converted from cJSON, and how
 * @huggingface/jinja prints them (JavaScript numbers, toString, tojson). */
#include "tokenizer/tmpl_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---- */

void tmpl_linecol(const char *src, size_t len, uint32_t pos, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < pos && i < len;) {
    if (src[i] == '\n') { ++*line; *col = 1; i++; continue; }
    u8_next(src, len, &i);
    ++*col;
  }
}

void tmpl_failf(tmpl_fail *f, int status, uint32_t pos, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  f->status = status;
  if (pos != TMPL_NOPOS && f->src && pos <= f->src_len) {
    int line, col;
    tmpl_linecol(f->src, f->src_len, pos, &line, &col);
    dsi_errf(f->err, status, "chat template line %d:%d: %s", line, col, msg);
  } else {
    dsi_errf(f->err, status, "chat template: %s", msg);
  }
  longjmp(f->jb, 1);
}

/* ---- arena ---- */

typedef struct tmpl_blk {
  struct tmpl_blk *next;
  size_t cap, used;
  _Alignas(16) char data[];
} tmpl_blk;

#define TA_ALIGN(n) (((n) + 15) & ~(size_t)15)
#define TA_BLOCK (64u << 10)

static tmpl_blk *ta_block(tmpl_arena *a, size_t n) {
  size_t cap = n > TA_BLOCK ? n : TA_BLOCK;
  if (a->total + cap > a->cap)
    tmpl_failf(a->fail, DSI_E_CAPACITY, TMPL_NOPOS, "rendering needs more than %zu MiB", a->cap >> 20);
  tmpl_blk *b = calloc(1, sizeof *b + cap);
  if (!b) tmpl_failf(a->fail, DSI_E_NOMEM, TMPL_NOPOS, "out of memory (%zu bytes)", cap);
  b->cap = cap;
  a->total += cap;
  return b;
}

void *ta_alloc(tmpl_arena *a, size_t n) {
  n = TA_ALIGN(n ? n : 1);
  tmpl_blk *h = a->head;
  if (!h || h->cap - h->used < n) {
    tmpl_blk *b = ta_block(a, n);
    if (h && n > TA_BLOCK / 4) { /* a big one: keep the current block for small ones */
      b->next = h->next;
      h->next = b;
      b->used = n;
      return b->data;
    }
    b->next = h;
    a->head = h = b;
  }
  void *p = h->data + h->used;
  h->used += n;
  return p;
}

void *ta_grow(tmpl_arena *a, void *p, size_t old, size_t n) {
  tmpl_blk *h = a->head;
  size_t o = TA_ALIGN(old ? old : 1), m = TA_ALIGN(n);
  if (p && h && (char *)p + o == h->data + h->used && h->used - o + m <= h->cap) {
    memset(h->data + h->used, 0, m > o ? m - o : 0);
    h->used = h->used - o + m;
    return p;
  }
  void *q = ta_alloc(a, n);
  if (p && old) memcpy(q, p, old < n ? old : n);
  return q;
}

void ta_free(tmpl_arena *a) {
  for (tmpl_blk *b = a->head, *nx; b; b = nx) {
    nx = b->next;
    free(b);
  }
  a->head = NULL;
  a->total = 0;
}

/* ---- buffers ---- */

void tb_init(tbuf *b, tmpl_arena *a, size_t max) {
  memset(b, 0, sizeof *b);
  b->a = a;
  b->max = max;
}

void tb_put(tbuf *b, const char *s, size_t n) {
  if (!n) return;
  if (b->n + n + 1 > b->cap) {
    if (b->n + n > b->max)
      tmpl_failf(b->a->fail, DSI_E_CAPACITY, TMPL_NOPOS, "output longer than %zu bytes", b->max);
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    b->p = ta_grow(b->a, b->p, b->cap, cap);
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

void tb_puts(tbuf *b, const char *s) { tb_put(b, s, strlen(s)); }
void tb_putc(tbuf *b, char c) { tb_put(b, &c, 1); }

/* ---- UTF-8 and JavaScript's notion of white space ---- */

uint32_t u8_next(const char *s, size_t n, size_t *i) {
  const unsigned char *u = (const unsigned char *)s;
  size_t k = *i;
  uint32_t c = u[k];
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 1) { *i = k + 1; return c; }
  if (!len || k + len > n) { *i = k + 1; return 0xFFFD; }
  uint32_t cp = c & (0x7F >> len);
  for (int j = 1; j < len; j++) {
    if ((u[k + j] & 0xC0) != 0x80) { *i = k + 1; return 0xFFFD; }
    cp = cp << 6 | (u[k + j] & 0x3F);
  }
  static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) { *i = k + 1; return 0xFFFD; }
  *i = k + len;
  return cp;
}

void u8_put(tbuf *b, uint32_t cp) {
  char t[4];
  int n;
  if (cp < 0x80) { t[0] = (char)cp; n = 1; }
  else if (cp < 0x800) { t[0] = (char)(0xC0 | cp >> 6); t[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
  else if (cp < 0x10000) {
    t[0] = (char)(0xE0 | cp >> 12); t[1] = (char)(0x80 | (cp >> 6 & 0x3F)); t[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
  } else {
    t[0] = (char)(0xF0 | cp >> 18); t[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    t[2] = (char)(0x80 | (cp >> 6 & 0x3F)); t[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
  }
  tb_put(b, t, (size_t)n);
}

int js_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

size_t js_trim_start(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    if (!js_space(u8_next(s, n, &j))) break;
    i = j;
  }
  return i;
}

size_t js_trim_end(const char *s, size_t n) {
  size_t i = 0, end = 0;
  while (i < n) {
    uint32_t c = u8_next(s, n, &i);
    if (!js_space(c)) end = i;
  }
  return end;
}

size_t js_utf16_len(const char *s, size_t n) {
  size_t i = 0, len = 0;
  while (i < n) len += u8_next(s, n, &i) >= 0x10000 ? 2 : 1;
  return len;
}

/* ---- values ---- */

tstr *ts_new(tmpl_arena *a, const char *s, size_t n) {
  tstr *t = ta_alloc(a, sizeof *t + n + 1);
  t->len = n;
  if (n) memcpy(t->s, s, n);
  t->s[n] = 0;
  return t;
}

tstr *ts_cat(tmpl_arena *a, const char *x, size_t nx, const char *y, size_t ny) {
  tstr *t = ta_alloc(a, sizeof *t + nx + ny + 1);
  t->len = nx + ny;
  if (nx) memcpy(t->s, x, nx);
  if (ny) memcpy(t->s + nx, y, ny);
  t->s[nx + ny] = 0;
  return t;
}

tv tv_cstr(tmpl_arena *a, const char *s, size_t n) { return tv_str(ts_new(a, s, n)); }

tv tv_arr(tmpl_arena *a, int kind, size_t n) {
  tv v = {kind, {0}};
  v.u.a = ta_alloc(a, sizeof *v.u.a);
  v.u.a->n = n;
  v.u.a->v = ta_alloc(a, (n ? n : 1) * sizeof(tv)); /* zeroed: TV_UNDEF */
  return v;
}

tv tv_obj(tmpl_arena *a, int kind) {
  tv v = {kind, {0}};
  v.u.o = ta_alloc(a, sizeof *v.u.o);
  return v;
}

tv tv_fn(tmpl_arena *a, int id, tv self, const tnode *macro) {
  tv v = {TV_FUNC, {0}};
  v.u.f = ta_alloc(a, sizeof *v.u.f);
  v.u.f->id = id;
  v.u.f->self = self;
  v.u.f->macro = macro;
  return v;
}

tv *tobj_get(const tobj *o, const char *key, size_t n) {
  for (size_t i = 0; i < o->n; i++)
    if (o->key[i]->len == n && memcmp(o->key[i]->s, key, n) == 0) return &o->val[i];
  return NULL;
}

void tobj_set(tmpl_arena *a, tobj *o, tstr *key, tv val) {
  tv *have = tobj_get(o, key->s, key->len);
  if (have) { *have = val; return; }
  if (o->n == o->cap) {
    size_t cap = o->cap ? o->cap * 2 : 8;
    o->key = ta_grow(a, o->key, o->cap * sizeof *o->key, cap * sizeof *o->key);
    o->val = ta_grow(a, o->val, o->cap * sizeof *o->val, cap * sizeof *o->val);
    o->cap = cap;
  }
  o->key[o->n] = key;
  o->val[o->n] = val;
  o->n++;
}

const char *tv_type_name(tv v) {
  static const char *names[] = {"UndefinedValue", "NullValue", "BooleanValue", "IntegerValue",
                                "FloatValue", "StringValue", "ArrayValue", "TupleValue",
                                "ObjectValue", "NamespaceValue", "KeywordArgumentsValue", "FunctionValue"};
  return v.k >= 0 && v.k < (int)DSI_ARRAY_LEN(names) ? names[v.k] : "?";
}

int tv_truthy(tv v) {
  switch (v.k) {
  case TV_BOOL: return v.u.b;
  case TV_INT: case TV_FLOAT: return v.u.n != 0 && !isnan(v.u.n);
  case TV_STR: return v.u.s->len > 0;
  case TV_ARRAY: case TV_TUPLE: return v.u.a->n > 0;
  case TV_OBJECT: case TV_KWARGS: return v.u.o->n > 0;
  case TV_NS: case TV_FUNC: return 1;
  default: return 0;
  }
}

/* StringToNumber for a decimal literal; NaN when it is not one */
static double js_str_num(const tstr *s) {
  size_t b = js_trim_start(s->s, s->len), e = js_trim_end(s->s, s->len);
  if (e <= b) return 0;
  const char *p = s->s + b;
  size_t n = e - b, i = 0;
  if (p[i] == '+' || p[i] == '-') i++;
  if (n - i == 8 && memcmp(p + i, "Infinity", 8) == 0) return p[0] == '-' ? -INFINITY : INFINITY;
  size_t digits = 0;
  while (i < n && p[i] >= '0' && p[i] <= '9') { i++; digits++; }
  if (i < n && p[i] == '.') { i++; while (i < n && p[i] >= '0' && p[i] <= '9') { i++; digits++; } }
  if (!digits) return NAN;
  if (i < n && (p[i] == 'e' || p[i] == 'E')) {
    i++;
    if (i < n && (p[i] == '+' || p[i] == '-')) i++;
    size_t ed = 0;
    while (i < n && p[i] >= '0' && p[i] <= '9') { i++; ed++; }
    if (!ed) return NAN;
  }
  if (i != n) return NAN;
  char tmp[400];
  if (n >= sizeof tmp) return NAN;
  memcpy(tmp, p, n);
  tmp[n] = 0;
  return strtod(tmp, NULL);
}

static int tv_same_ref(tv a, tv b) {
  switch (a.k) {
  case TV_ARRAY: case TV_TUPLE: return a.u.a == b.u.a;
  case TV_OBJECT: case TV_NS: case TV_KWARGS: return a.u.o == b.u.o;
  case TV_FUNC: return a.u.f == b.u.f;
  default: return 0;
  }
}

static int tv_prim(tv v) { return v.k == TV_BOOL || tv_is_num(v) || v.k == TV_STR; }

int tv_loose_eq(tv a, tv b) {
  int an = a.k == TV_UNDEF || a.k == TV_NULL, bn = b.k == TV_UNDEF || b.k == TV_NULL;
  if (an || bn) return an && bn;
  if (a.k == TV_BOOL && b.k == TV_BOOL) return a.u.b == b.u.b;
  if (a.k == TV_STR && b.k == TV_STR) return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
  if (a.k == TV_BOOL) return tv_loose_eq(tv_int(a.u.b), b);
  if (b.k == TV_BOOL) return tv_loose_eq(a, tv_int(b.u.b));
  if (tv_is_num(a) && tv_is_num(b)) return a.u.n == b.u.n;
  if (tv_is_num(a) && b.k == TV_STR) return a.u.n == js_str_num(b.u.s);
  if (a.k == TV_STR && tv_is_num(b)) return js_str_num(a.u.s) == b.u.n;
  if (tv_prim(a) || tv_prim(b)) return 0; /* object vs primitive: not modelled */
  return a.k == b.k && tv_same_ref(a, b);
}

int tv_strict_eq(tv a, tv b) {
  if (tv_is_num(a) && tv_is_num(b)) return a.u.n == b.u.n;
  if (a.k != b.k) {
    /* the reference compares raw values: Array/Tuple share JS arrays, objects share Maps */
    if (tv_is_arr(a) && tv_is_arr(b)) return a.u.a == b.u.a;
    if ((a.k == TV_OBJECT || a.k == TV_NS || a.k == TV_KWARGS) && (b.k == TV_OBJECT || b.k == TV_NS || b.k == TV_KWARGS))
      return a.u.o == b.u.o;
    return 0;
  }
  switch (a.k) {
  case TV_UNDEF: case TV_NULL: return 1;
  case TV_BOOL: return a.u.b == b.u.b;
  case TV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
  default: return tv_same_ref(a, b);
  }
}

/* ---- cJSON -> values ---- */

/* JavaScript lists an object's integer-like keys first, ascending */
static int js_index_key(const char *k, double *out) {
  size_t n = strlen(k);
  if (!n || n > 10 || (n > 1 && k[0] == '0')) return 0;
  double v = 0;
  for (size_t i = 0; i < n; i++) {
    if (k[i] < '0' || k[i] > '9') return 0;
    v = v * 10 + (k[i] - '0');
  }
  if (v > 4294967294.0) return 0;
  *out = v;
  return 1;
}

typedef struct jkey {
  const cJSON *item; /* the last one of this key: its value wins */
  size_t pos;        /* the first one's place: it keeps its position */
  double index;      /* an integer-like key's value, else -1 */
} jkey;

static int jkey_by_name(const void *x, const void *y) {
  const jkey *a = x, *b = y;
  int c = strcmp(a->item->string, b->item->string);
  return c ? c : (a->pos > b->pos) - (a->pos < b->pos);
}

/* integer-like keys ascending, then the others in their first place */
static int jkey_by_order(const void *x, const void *y) {
  const jkey *a = x, *b = y;
  if ((a->index >= 0) != (b->index >= 0)) return a->index >= 0 ? -1 : 1;
  if (a->index >= 0 && a->index != b->index) return a->index < b->index ? -1 : 1;
  return (a->pos > b->pos) - (a->pos < b->pos);
}

/* JSON.parse then Object.entries: a repeated key keeps its first place and
 * its last value; O(n log n) so a huge object in a request costs little */
static tv obj_from_json(tmpl_arena *a, const cJSON *j, int depth) {
  size_t n = 0;
  for (const cJSON *c = j->child; c; c = c->next) n += c->string != NULL;
  jkey *k = ta_alloc(a, (n ? n : 1) * sizeof *k);
  n = 0;
  for (const cJSON *c = j->child; c; c = c->next)
    if (c->string) {
      k[n].item = c;
      k[n].pos = n;
      if (!js_index_key(c->string, &k[n].index)) k[n].index = -1;
      n++;
    }
  qsort(k, n, sizeof *k, jkey_by_name);
  size_t m = 0;
  for (size_t i = 0; i < n;) {
    size_t e = i + 1;
    while (e < n && !strcmp(k[e].item->string, k[i].item->string)) e++;
    k[m] = k[i];             /* first place */
    k[m++].item = k[e - 1].item; /* last value */
    i = e;
  }
  qsort(k, m, sizeof *k, jkey_by_order);
  tv v = tv_obj(a, TV_OBJECT);
  tobj *o = v.u.o;
  o->n = o->cap = m;
  o->key = ta_alloc(a, (m ? m : 1) * sizeof *o->key);
  o->val = ta_alloc(a, (m ? m : 1) * sizeof *o->val);
  for (size_t i = 0; i < m; i++) {
    o->key[i] = ts_new(a, k[i].item->string, strlen(k[i].item->string));
    o->val[i] = tv_from_json(a, k[i].item, depth + 1);
  }
  return v;
}

tv tv_from_json(tmpl_arena *a, const cJSON *j, int depth) {
  if (depth > 1000) tmpl_failf(a->fail, DSI_E_INVAL, TMPL_NOPOS, "context nested too deeply");
  if (!j) return tv_undef();
  if (cJSON_IsBool(j)) return tv_bool(cJSON_IsTrue(j));
  if (cJSON_IsNull(j)) return tv_null();
  if (cJSON_IsNumber(j)) {
    double x = j->valuedouble;
    return isfinite(x) && x == floor(x) ? tv_int(x) : tv_float(x);
  }
  if (cJSON_IsString(j) || cJSON_IsRaw(j)) return tv_cstr(a, j->valuestring, strlen(j->valuestring));
  if (cJSON_IsArray(j)) {
    tv v = tv_arr(a, TV_ARRAY, (size_t)cJSON_GetArraySize(j));
    size_t i = 0;
    for (const cJSON *c = j->child; c; c = c->next) v.u.a->v[i++] = tv_from_json(a, c, depth + 1);
    return v;
  }
  if (cJSON_IsObject(j)) return obj_from_json(a, j, depth);
  return tv_undef();
}

/* ---- printing ---- */

void js_num(tbuf *b, double x) {
  if (isnan(x)) { tb_puts(b, "NaN"); return; }
  if (isinf(x)) { tb_puts(b, x < 0 ? "-Infinity" : "Infinity"); return; }
  if (x == 0) { tb_puts(b, "0"); return; }
  if (x < 0) { tb_putc(b, '-'); x = -x; }
  /* the shortest digits that read back as x */
  char e[40];
  for (int p = 1; p <= 17; p++) {
    snprintf(e, sizeof e, "%.*e", p - 1, x);
    if (strtod(e, NULL) == x) break;
  }
  char dig[24];
  int k = 0, i = 0;
  for (; e[i] && e[i] != 'e'; i++)
    if (e[i] != '.') dig[k++] = e[i];
  while (k > 1 && dig[k - 1] == '0') k--;
  dig[k] = 0;
  int n = atoi(e + i + 1) + 1; /* x = 0.dig * 10^n */
  char out[64];
  int o = 0;
  if (k <= n && n <= 21) {
    o = snprintf(out, sizeof out, "%s", dig);
    for (int z = 0; z < n - k; z++) out[o++] = '0';
  } else if (0 < n && n <= 21) {
    o = snprintf(out, sizeof out, "%.*s.%s", n, dig, dig + n);
  } else if (-6 < n && n <= 0) {
    out[o++] = '0';
    out[o++] = '.';
    for (int z = 0; z < -n; z++) out[o++] = '0';
    o += snprintf(out + o, sizeof out - (size_t)o, "%s", dig);
  } else {
    o = snprintf(out, sizeof out, "%c%s%s%se%c%d", dig[0], k > 1 ? "." : "", dig + 1, "", n - 1 >= 0 ? '+' : '-',
                 abs(n - 1));
  }
  tb_put(b, out, (size_t)o);
}

/* FloatValue.toString(): whole numbers keep one decimal ("3.0") */
static void js_float(tbuf *b, double x) {
  if (x == 0 && signbit(x)) { tb_puts(b, "-0.0"); return; }
  if (isfinite(x) && x == floor(x)) {
    if (fabs(x) >= 1e21) { js_num(b, x); return; }
    char t[400];
    int n = snprintf(t, sizeof t, "%.1f", x);
    tb_put(b, t, (size_t)n);
    return;
  }
  js_num(b, x);
}

void tv_write(tbuf *b, tv v) {
  switch (v.k) {
  case TV_UNDEF: tb_puts(b, "undefined"); break;
  case TV_NULL: tb_puts(b, "null"); break;
  case TV_BOOL: tb_puts(b, v.u.b ? "true" : "false"); break;
  case TV_INT: js_num(b, v.u.n); break;
  case TV_FLOAT: js_float(b, v.u.n); break;
  case TV_STR: tb_put(b, v.u.s->s, v.u.s->len); break;
  case TV_FUNC: tb_puts(b, "[function]"); break;
  default: {
    tjson_opts o = {0};
    if (tv_tojson(b, v, &o, 0) < 0)
      tmpl_failf(b->a->fail, DSI_E_INVAL, TMPL_NOPOS, "Cannot convert to JSON: %s", tv_type_name(v));
  }
  }
}

void tv_write_raw(tbuf *b, tv v, int for_join) {
  switch (v.k) {
  case TV_UNDEF: if (!for_join) tb_puts(b, "undefined"); break;
  case TV_NULL: if (!for_join) tb_puts(b, "null"); break;
  case TV_FLOAT: js_num(b, v.u.n); break;
  case TV_ARRAY: case TV_TUPLE:
    for (size_t i = 0; i < v.u.a->n; i++) {
      if (i) tb_putc(b, ',');
      tv_write(b, v.u.a->v[i]);
    }
    break;
  case TV_OBJECT: case TV_NS: case TV_KWARGS: tb_puts(b, "[object Map]"); break;
  default: tv_write(b, v);
  }
}

/* JSON.stringify of a string, then makeAsciiSafe when asked */
static void json_str(tbuf *b, const char *s, size_t n, int ascii) {
  tb_putc(b, '"');
  size_t i = 0, run = 0;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char u[16];
    size_t adv = 1;
    if (c == '"') esc = "\\\"";
    else if (c == '\\') esc = "\\\\";
    else if (c == '\b') esc = "\\b";
    else if (c == '\f') esc = "\\f";
    else if (c == '\n') esc = "\\n";
    else if (c == '\r') esc = "\\r";
    else if (c == '\t') esc = "\\t";
    else if (c < 0x20) { snprintf(u, sizeof u, "\\u%04x", c); esc = u; }
    else if (ascii && c >= 0x7F) {
      size_t j = i;
      uint32_t cp = u8_next(s, n, &j);
      adv = j - i;
      if (cp < 0x10000) snprintf(u, sizeof u, "\\u%04x", cp);
      else snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF));
      esc = u;
    }
    if (esc) {
      tb_put(b, s + i - run, run);
      run = 0;
      tb_puts(b, esc);
      i += adv;
    } else {
      run++;
      i++;
    }
  }
  tb_put(b, s + n - run, run);
  tb_putc(b, '"');
}

/* localeCompare, approximated: case-insensitive, then lower before upper */
static int key_cmp(const tstr *x, const tstr *y) {
  size_t n = x->len < y->len ? x->len : y->len;
  for (size_t i = 0; i < n; i++) {
    int a = (unsigned char)x->s[i], b = (unsigned char)y->s[i];
    int la = a >= 'A' && a <= 'Z' ? a + 32 : a, lb = b >= 'A' && b <= 'Z' ? b + 32 : b;
    if (la != lb) return la < lb ? -1 : 1;
  }
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  for (size_t i = 0; i < n; i++)
    if (x->s[i] != y->s[i]) return (unsigned char)x->s[i] > (unsigned char)y->s[i] ? -1 : 1;
  return 0;
}

static void pad(tbuf *b, int indent, int depth) {
  tb_putc(b, '\n');
  for (int i = 0; i < indent * depth; i++) tb_putc(b, ' ');
}

int tv_tojson(tbuf *b, tv v, const tjson_opts *o, int depth) {
  if (depth > 1000) tmpl_failf(b->a->fail, DSI_E_INVAL, TMPL_NOPOS, "tojson: value nested too deeply");
  const char *isep = o->item_sep ? o->item_sep : o->indent ? "," : ", ";
  const char *ksep = o->key_sep ? o->key_sep : ": ";
  switch (v.k) {
  case TV_NULL: tb_puts(b, "null"); return 0;
  case TV_UNDEF: tb_puts(b, o->undef_null ? "null" : "undefined"); return 0;
  case TV_BOOL: tb_puts(b, v.u.b ? "true" : "false"); return 0;
  case TV_INT: case TV_FLOAT:
    if (isfinite(v.u.n)) js_num(b, v.u.n);
    else tb_puts(b, "null");
    return 0;
  case TV_STR: json_str(b, v.u.s->s, v.u.s->len, o->ensure_ascii); return 0;
  case TV_ARRAY: {
    tarr *a = v.u.a;
    tb_putc(b, '[');
    for (size_t i = 0; i < a->n; i++) {
      if (i) tb_puts(b, isep);
      if (o->indent) pad(b, o->indent, depth + 1);
      if (tv_tojson(b, a->v[i], o, depth + 1) < 0) return -1;
    }
    if (o->indent && a->n) pad(b, o->indent, depth);
    tb_putc(b, ']');
    return 0;
  }
  case TV_OBJECT: case TV_NS: {
    tobj *ob = v.u.o;
    size_t *ord = ta_alloc(b->a, (ob->n ? ob->n : 1) * sizeof *ord);
    for (size_t i = 0; i < ob->n; i++) ord[i] = i;
    if (o->sort_keys) /* insertion sort: stable, objects are small */
      for (size_t i = 1; i < ob->n; i++)
        for (size_t j = i; j > 0 && key_cmp(ob->key[ord[j - 1]], ob->key[ord[j]]) > 0; j--) {
          size_t t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t;
        }
    tb_putc(b, '{');
    for (size_t i = 0; i < ob->n; i++) {
      if (i) tb_puts(b, isep);
      if (o->indent) pad(b, o->indent, depth + 1);
      json_str(b, ob->key[ord[i]]->s, ob->key[ord[i]]->len, o->ensure_ascii);
      tb_puts(b, ksep);
      if (tv_tojson(b, ob->val[ord[i]], o, depth + 1) < 0) return -1;
    }
    if (o->indent && ob->n) pad(b, o->indent, depth);
    tb_putc(b, '}');
    return 0;
  }
  default: return -1; /* TupleValue, KeywordArgumentsValue, FunctionValue */
  }
}
