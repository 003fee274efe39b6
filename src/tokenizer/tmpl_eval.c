/* tokenizer/tmpl_eval.c: the chat-template interpreter — scopes, statements,
 * operators, member access, filters, tests and the built-in functions and
 * methods, each behaving as @huggingface/jinja's runtime does (its
 * JavaScript semantics included: `==` is loose, lengths count UTF-16). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tmpl_int.h"

/* ---- state ---- */

typedef struct tscope {
  struct tscope *parent;
  tobj vars;
} tscope;

enum { CTL_NONE, CTL_BREAK, CTL_CONTINUE };

typedef struct trun {
  tmpl_fail fail;
  tmpl_arena ar;
  tbuf *out;
  tscope *global;
  long steps;
  int depth;
  int ctl; /* a pending break or continue */
  tstr *loop_keys[10]; /* loop.index ... loop.nextitem, then "loop" */
} trun;

/* built-in functions and methods */
enum {
  TF_NAMESPACE, TF_RAISE, TF_RANGE, TF_STRFTIME, TF_MACRO,
  TF_S_UPPER, TF_S_LOWER, TF_S_STRIP, TF_S_TITLE, TF_S_CAPITALIZE, TF_S_RSTRIP, TF_S_LSTRIP,
  TF_S_STARTSWITH, TF_S_ENDSWITH, TF_S_SPLIT, TF_S_REPLACE,
  TF_O_GET, TF_O_ITEMS, TF_O_KEYS, TF_O_VALUES, TF_O_DICTSORT,
};

static inline uint32_t at_pos(const tnode *n) { return n ? n->pos : TMPL_NOPOS; }
#define FAIL(R, at, ...) tmpl_failf(&(R)->fail, DSI_E_INVAL, at_pos(at), __VA_ARGS__)
#define TYPE(v) tv_type_name(v)

static tv ev(trun *R, const tnode *n, tscope *env);
static void ex_block(trun *R, const tlist *body, tscope *env);

/* ---- scopes ---- */

static tscope *scope_new(trun *R, tscope *parent) {
  tscope *s = ta_alloc(&R->ar, sizeof *s);
  s->parent = parent;
  return s;
}

static tv lookup(const tscope *s, const tstr *name) {
  for (; s; s = s->parent) {
    tv *v = tobj_get(&s->vars, name->s, name->len);
    if (v) return *v;
  }
  return tv_undef();
}

static void setvar(trun *R, tscope *s, tstr *name, tv v) { tobj_set(&R->ar, &s->vars, name, v); }
static void setvar_c(trun *R, tscope *s, const char *name, tv v) {
  setvar(R, s, ts_new(&R->ar, name, strlen(name)), v);
}

/* ---- small helpers ---- */

static tv str_buf(trun *R, const tbuf *b) { return tv_cstr(&R->ar, b->p ? b->p : "", b->n); }
static tv str_c(trun *R, const char *s) { return tv_cstr(&R->ar, s, strlen(s)); }

static int is_container(tv v) { return v.k == TV_OBJECT || v.k == TV_KWARGS || v.k == TV_NS; }
static int is_numlike(tv v) { return tv_is_num(v) || v.k == TV_BOOL; }
static double numval(tv v) { return v.k == TV_BOOL ? v.u.b : v.u.n; }

/* JavaScript's !!value on the raw value: any object is true */
static int raw_truthy(tv v) {
  switch (v.k) {
  case TV_UNDEF: case TV_NULL: return 0;
  case TV_BOOL: return v.u.b;
  case TV_INT: case TV_FLOAT: return v.u.n != 0 && !isnan(v.u.n);
  case TV_STR: return v.u.s->len > 0;
  default: return 1;
  }
}

static int ascii_word(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static char up(char c) { return c >= 'a' && c <= 'z' ? (char)(c - 32) : c; }
static char low(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }

/* toUpperCase/toLowerCase (ASCII letters only) */
static tv str_case(trun *R, const tstr *s, int upper) {
  tstr *t = ts_new(&R->ar, s->s, s->len);
  for (size_t i = 0; i < t->len; i++) t->s[i] = upper ? up(t->s[i]) : low(t->s[i]);
  return tv_str(t);
}

static size_t cp_count(const tstr *s) {
  size_t i = 0, n = 0;
  while (i < s->len) { u8_next(s->s, s->len, &i); n++; }
  return n;
}

static int str_eq(const tstr *s, const char *c) { return s->len == strlen(c) && !memcmp(s->s, c, s->len); }

/* parseInt(s, 10) and parseFloat(s); NaN when no number starts s */
static double js_parse_int(const tstr *s) {
  size_t i = js_trim_start(s->s, s->len);
  int neg = 0;
  if (i < s->len && (s->s[i] == '+' || s->s[i] == '-')) neg = s->s[i++] == '-';
  double v = 0;
  size_t d = 0;
  while (i < s->len && s->s[i] >= '0' && s->s[i] <= '9') { v = v * 10 + (s->s[i++] - '0'); d++; }
  return d ? (neg ? -v : v) : NAN;
}

static double js_parse_float(const tstr *s) {
  size_t b = js_trim_start(s->s, s->len), i = b;
  const char *p = s->s;
  if (i < s->len && (p[i] == '+' || p[i] == '-')) i++;
  if (s->len - i >= 8 && !memcmp(p + i, "Infinity", 8)) return p[b] == '-' ? -INFINITY : INFINITY;
  size_t d = 0;
  while (i < s->len && p[i] >= '0' && p[i] <= '9') { i++; d++; }
  if (i < s->len && p[i] == '.') {
    i++;
    while (i < s->len && p[i] >= '0' && p[i] <= '9') { i++; d++; }
  }
  if (!d) return NAN;
  if (i < s->len && (p[i] == 'e' || p[i] == 'E')) {
    size_t j = i + 1;
    if (j < s->len && (p[j] == '+' || p[j] == '-')) j++;
    if (j < s->len && p[j] >= '0' && p[j] <= '9') {
      while (j < s->len && p[j] >= '0' && p[j] <= '9') j++;
      i = j;
    }
  }
  char tmp[512];
  size_t n = i - b < sizeof tmp - 1 ? i - b : sizeof tmp - 1;
  memcpy(tmp, p + b, n);
  tmp[n] = 0;
  return strtod(tmp, NULL);
}

/* ---- comparison and sorting ---- */

static int cmp_values(trun *R, const tnode *at, tv a, tv b, int case_sensitive) {
  if (a.k == TV_NULL && b.k == TV_NULL) return 0;
  if (a.k == TV_NULL || b.k == TV_NULL) FAIL(R, at, "Cannot compare %s with %s", TYPE(a), TYPE(b));
  if (a.k == TV_UNDEF && b.k == TV_UNDEF) return 0;
  if (a.k == TV_UNDEF || b.k == TV_UNDEF) FAIL(R, at, "Cannot compare %s with %s", TYPE(a), TYPE(b));
  if (is_numlike(a) && is_numlike(b)) {
    double x = numval(a), y = numval(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.k != b.k) FAIL(R, at, "Cannot compare different types: %s and %s", TYPE(a), TYPE(b));
  if (a.k != TV_STR) FAIL(R, at, "Cannot compare type: %s", TYPE(a));
  size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
  for (size_t i = 0; i < n; i++) {
    unsigned char x = (unsigned char)a.u.s->s[i], y = (unsigned char)b.u.s->s[i];
    if (!case_sensitive) { x = (unsigned char)low((char)x); y = (unsigned char)low((char)y); }
    if (x != y) return x < y ? -1 : 1;
  }
  return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len ? 1 : 0;
}

typedef struct sort_key {
  trun *R;
  const tnode *at;
  int case_sensitive, reverse;
} sort_key;

/* stable merge sort of v[0..n) by k[0..n), as Array.prototype.sort */
static void merge_sort(const sort_key *sk, tv *v, tv *k, tv *tv_tmp, tv *tk_tmp, size_t n) {
  if (n < 2) return;
  size_t h = n / 2;
  merge_sort(sk, v, k, tv_tmp, tk_tmp, h);
  merge_sort(sk, v + h, k + h, tv_tmp, tk_tmp, n - h);
  size_t i = 0, j = h, o = 0;
  while (i < h && j < n) {
    int c = cmp_values(sk->R, sk->at, k[j], k[i], sk->case_sensitive);
    if (sk->reverse) c = -c;
    if (c < 0) { tv_tmp[o] = v[j]; tk_tmp[o++] = k[j++]; }
    else { tv_tmp[o] = v[i]; tk_tmp[o++] = k[i++]; }
  }
  while (i < h) { tv_tmp[o] = v[i]; tk_tmp[o++] = k[i++]; }
  while (j < n) { tv_tmp[o] = v[j]; tk_tmp[o++] = k[j++]; }
  memcpy(v, tv_tmp, n * sizeof *v);
  memcpy(k, tk_tmp, n * sizeof *k);
}

/* a sorted copy of items, ordered by keys */
static tv sorted(trun *R, const tnode *at, const tv *items, const tv *keys, size_t n, int cs, int reverse) {
  tv out = tv_arr(&R->ar, TV_ARRAY, n);
  tv *k = ta_alloc(&R->ar, (n ? n : 1) * sizeof *k);
  tv *t1 = ta_alloc(&R->ar, (n ? n : 1) * sizeof *t1), *t2 = ta_alloc(&R->ar, (n ? n : 1) * sizeof *t2);
  if (n) {
    memcpy(out.u.a->v, items, n * sizeof *items);
    memcpy(k, keys, n * sizeof *keys);
  }
  sort_key sk = {R, at, cs, reverse};
  merge_sort(&sk, out.u.a->v, k, t1, t2, n);
  return out;
}

/* ---- objects: items, keys, values, dictsort, attribute paths ---- */

static tv obj_items(trun *R, const tobj *o) {
  tv a = tv_arr(&R->ar, TV_ARRAY, o->n);
  for (size_t i = 0; i < o->n; i++) {
    tv pair = tv_arr(&R->ar, TV_ARRAY, 2);
    pair.u.a->v[0] = tv_str(o->key[i]);
    pair.u.a->v[1] = o->val[i];
    a.u.a->v[i] = pair;
  }
  return a;
}

static tv obj_keys(trun *R, const tobj *o) {
  tv a = tv_arr(&R->ar, TV_ARRAY, o->n);
  for (size_t i = 0; i < o->n; i++) a.u.a->v[i] = tv_str(o->key[i]);
  return a;
}

/* "a.b.0" through objects and arrays; undefined where it leads nowhere */
static tv attr_path(tv item, const tstr *path) {
  tv v = item;
  size_t i = 0;
  for (;;) {
    size_t j = i;
    while (j < path->len && path->s[j] != '.') j++;
    if (is_container(v)) {
      tv *p = tobj_get(v.u.o, path->s + i, j - i);
      v = p ? *p : tv_undef();
    } else if (tv_is_arr(v)) {
      double idx = NAN;
      size_t k = i, d = 0;
      while (k < j && (path->s[k] == ' ' || path->s[k] == '\t')) k++;
      int neg = k < j && path->s[k] == '-';
      if (k < j && (path->s[k] == '-' || path->s[k] == '+')) k++;
      double x = 0;
      while (k < j && path->s[k] >= '0' && path->s[k] <= '9') { x = x * 10 + (path->s[k++] - '0'); d++; }
      if (d) idx = neg ? -x : x;
      if (!isnan(idx) && idx >= 0 && idx < (double)v.u.a->n) v = v.u.a->v[(size_t)idx];
      else return tv_undef();
    } else {
      return tv_undef();
    }
    if (j >= path->len) return v;
    i = j + 1;
  }
}

/* ---- string methods ---- */

/* str.split(sep=None, maxsplit=-1), as the reference implements it */
static tv str_split(trun *R, const tnode *at, const tstr *s, const tv *args, size_t n) {
  tv sep = n > 0 ? args[0] : tv_null();
  tv maxv = n > 1 ? args[1] : tv_int(-1);
  if (sep.k != TV_STR && sep.k != TV_NULL) FAIL(R, at, "sep argument must be a string or null");
  if (maxv.k != TV_INT) FAIL(R, at, "maxsplit argument must be a number");
  double maxsplit = maxv.u.n;
  size_t cap = 8, cnt = 0;
  tv *parts = ta_alloc(&R->ar, cap * sizeof *parts);
#define PUSH(x)                                                                   \
  do {                                                                            \
    if (cnt == cap) {                                                             \
      parts = ta_grow(&R->ar, parts, cap * sizeof *parts, 2 * cap * sizeof *parts); \
      cap *= 2;                                                                   \
    }                                                                             \
    parts[cnt++] = (x);                                                           \
  } while (0)
  if (sep.k == TV_NULL) {
    size_t i = js_trim_start(s->s, s->len);
    while (i < s->len) {
      size_t st = i, j;
      for (;;) { /* a run of non-space */
        if (i >= s->len) break;
        j = i;
        if (js_space(u8_next(s->s, s->len, &j))) break;
        i = j;
      }
      if (maxsplit != -1 && (double)cnt >= maxsplit) {
        PUSH(tv_cstr(&R->ar, s->s + st, s->len - st));
        break;
      }
      PUSH(tv_cstr(&R->ar, s->s + st, i - st));
      while (i < s->len) { /* the space after it */
        j = i;
        if (!js_space(u8_next(s->s, s->len, &j))) break;
        i = j;
      }
    }
  } else {
    const tstr *d = sep.u.s;
    if (!d->len) FAIL(R, at, "empty separator");
    size_t st = 0;
    for (size_t i = 0; i + d->len <= s->len;) {
      if (!memcmp(s->s + i, d->s, d->len)) {
        PUSH(tv_cstr(&R->ar, s->s + st, i - st));
        i += d->len;
        st = i;
      } else {
        i++;
      }
    }
    PUSH(tv_cstr(&R->ar, s->s + st, s->len - st));
    if (maxsplit != -1 && (double)cnt > maxsplit) {
      /* result.push(result.splice(maxsplit).join(sep)) */
      double m = maxsplit < 0 ? fmax((double)cnt + maxsplit, 0) : maxsplit;
      size_t k = (size_t)m;
      tbuf b;
      tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
      for (size_t i = k; i < cnt; i++) {
        if (i > k) tb_put(&b, d->s, d->len);
        tb_put(&b, parts[i].u.s->s, parts[i].u.s->len);
      }
      cnt = k;
      PUSH(str_buf(R, &b));
    }
  }
#undef PUSH
  tv out = tv_arr(&R->ar, TV_ARRAY, cnt);
  if (cnt) memcpy(out.u.a->v, parts, cnt * sizeof *parts);
  return out;
}

/* str.replace(old, new, count): every match, or the first count */
static tv str_replace(trun *R, const tnode *at, const tstr *s, const tv *args, size_t n) {
  if (n < 2) FAIL(R, at, "replace() requires at least two arguments");
  if (args[0].k != TV_STR || args[1].k != TV_STR) FAIL(R, at, "replace() arguments must be strings");
  tv count = tv_null();
  if (n > 2) {
    if (args[2].k == TV_KWARGS) {
      tv *c = tobj_get(args[2].u.o, "count", 5);
      count = c ? *c : tv_null();
    } else {
      count = args[2];
    }
  }
  if (count.k != TV_INT && count.k != TV_NULL) FAIL(R, at, "replace() count argument must be a number or null");
  if (count.k == TV_INT && count.u.n == 0) return tv_str((tstr *)s);
  double remaining = count.k == TV_NULL || count.u.n < 0 ? INFINITY : count.u.n;
  const tstr *o = args[0].u.s, *w = args[1].u.s;
  tbuf b;
  tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
  if (!o->len) { /* an empty pattern matches before every character and at the end */
    size_t i = 0;
    for (;;) {
      if (remaining > 0) { tb_put(&b, w->s, w->len); remaining--; }
      if (i >= s->len) break;
      size_t j = i;
      u8_next(s->s, s->len, &j);
      tb_put(&b, s->s + i, j - i);
      i = j;
    }
  } else {
    size_t i = 0, st = 0;
    while (i + o->len <= s->len) {
      if (!memcmp(s->s + i, o->s, o->len)) {
        tb_put(&b, s->s + st, i - st);
        if (remaining > 0) { tb_put(&b, w->s, w->len); remaining--; }
        else tb_put(&b, o->s, o->len);
        i += o->len;
        st = i;
      } else {
        i++;
      }
    }
    tb_put(&b, s->s + st, s->len - st);
  }
  return str_buf(R, &b);
}

static int starts(const tstr *s, const tstr *p) { return p->len <= s->len && !memcmp(s->s, p->s, p->len); }
static int ends(const tstr *s, const tstr *p) {
  return p->len <= s->len && !memcmp(s->s + s->len - p->len, p->s, p->len);
}

static tv str_affix(trun *R, const tnode *at, const tstr *s, const tv *args, size_t n, int end) {
  const char *name = end ? "endswith" : "startswith";
  if (!n) FAIL(R, at, "%s() requires at least one argument", name);
  if (args[0].k == TV_STR) return tv_bool(end ? ends(s, args[0].u.s) : starts(s, args[0].u.s));
  if (tv_is_arr(args[0])) {
    for (size_t i = 0; i < args[0].u.a->n; i++) {
      tv it = args[0].u.a->v[i];
      if (it.k != TV_STR) FAIL(R, at, "%s() tuple elements must be strings", name);
      if (end ? ends(s, it.u.s) : starts(s, it.u.s)) return tv_bool(1);
    }
    return tv_bool(0);
  }
  FAIL(R, at, "%s() argument must be a string or tuple of strings", name);
}

/* title(): /\b\w/g upper-cased */
static tv str_title(trun *R, const tstr *s) {
  tstr *t = ts_new(&R->ar, s->s, s->len);
  for (size_t i = 0; i < t->len; i++)
    if (ascii_word((unsigned char)t->s[i]) && (i == 0 || !ascii_word((unsigned char)s->s[i - 1]))) t->s[i] = up(t->s[i]);
  return tv_str(t);
}

static tv str_method(trun *R, const tnode *at, int id, const tstr *s, const tv *args, size_t n) {
  switch (id) {
  case TF_S_UPPER: return str_case(R, s, 1);
  case TF_S_LOWER: return str_case(R, s, 0);
  case TF_S_STRIP: {
    size_t b = js_trim_start(s->s, s->len);
    return tv_cstr(&R->ar, s->s + b, js_trim_end(s->s + b, s->len - b));
  }
  case TF_S_RSTRIP: return tv_cstr(&R->ar, s->s, js_trim_end(s->s, s->len));
  case TF_S_LSTRIP: {
    size_t b = js_trim_start(s->s, s->len);
    return tv_cstr(&R->ar, s->s + b, s->len - b);
  }
  case TF_S_TITLE: return str_title(R, s);
  case TF_S_CAPITALIZE: {
    tstr *t = ts_new(&R->ar, s->s, s->len);
    if (t->len) t->s[0] = up(t->s[0]);
    return tv_str(t);
  }
  case TF_S_STARTSWITH: return str_affix(R, at, s, args, n, 0);
  case TF_S_ENDSWITH: return str_affix(R, at, s, args, n, 1);
  case TF_S_SPLIT: return str_split(R, at, s, args, n);
  case TF_S_REPLACE: return str_replace(R, at, s, args, n);
  }
  FAIL(R, at, "unknown string method");
}

static const struct { const char *name; int id; } STR_METHODS[] = {
    {"upper", TF_S_UPPER}, {"lower", TF_S_LOWER}, {"strip", TF_S_STRIP}, {"title", TF_S_TITLE},
    {"capitalize", TF_S_CAPITALIZE}, {"rstrip", TF_S_RSTRIP}, {"lstrip", TF_S_LSTRIP},
    {"startswith", TF_S_STARTSWITH}, {"endswith", TF_S_ENDSWITH}, {"split", TF_S_SPLIT},
    {"replace", TF_S_REPLACE},
};
static const struct { const char *name; int id; } OBJ_METHODS[] = {
    {"get", TF_O_GET}, {"items", TF_O_ITEMS}, {"keys", TF_O_KEYS}, {"values", TF_O_VALUES}, {"dictsort", TF_O_DICTSORT},
};

/* ---- object methods ---- */

static tv obj_dictsort(trun *R, const tnode *at, const tobj *o, const tv *args, size_t n) {
  const tobj *kw = NULL;
  tv pos[3];
  size_t np = 0;
  for (size_t i = 0; i < n; i++) {
    if (args[i].k == TV_KWARGS) kw = args[i].u.o;
    else if (np < 3) pos[np++] = args[i];
  }
  tv *k;
  tv cs = np > 0 ? pos[0] : (kw && (k = tobj_get(kw, "case_sensitive", 14))) ? *k : tv_bool(0);
  if (cs.k != TV_BOOL) FAIL(R, at, "case_sensitive must be a boolean");
  tv by = np > 1 ? pos[1] : (kw && (k = tobj_get(kw, "by", 2))) ? *k : tv_undef();
  int by_value = 0;
  if (by.k != TV_UNDEF) {
    if (by.k != TV_STR) FAIL(R, at, "by must be a string");
    if (str_eq(by.u.s, "value")) by_value = 1;
    else if (!str_eq(by.u.s, "key")) FAIL(R, at, "by must be either 'key' or 'value'");
  }
  tv rev = np > 2 ? pos[2] : (kw && (k = tobj_get(kw, "reverse", 7))) ? *k : tv_bool(0);
  if (rev.k != TV_BOOL) FAIL(R, at, "reverse must be a boolean");
  tv items = obj_items(R, o);
  tv *keys = ta_alloc(&R->ar, (o->n ? o->n : 1) * sizeof *keys);
  for (size_t i = 0; i < o->n; i++) keys[i] = by_value ? o->val[i] : tv_str(o->key[i]);
  return sorted(R, at, items.u.a->v, keys, o->n, cs.u.b, rev.u.b);
}

static tv obj_method(trun *R, const tnode *at, int id, const tobj *o, const tv *args, size_t n) {
  switch (id) {
  case TF_O_GET: {
    tv key = n > 0 ? args[0] : tv_undef();
    if (key.k != TV_STR) FAIL(R, at, "Object key must be a string: got %s", TYPE(key));
    tv *v = tobj_get(o, key.u.s->s, key.u.s->len);
    return v ? *v : n > 1 ? args[1] : tv_null();
  }
  case TF_O_ITEMS: return obj_items(R, o);
  case TF_O_KEYS: return obj_keys(R, o);
  case TF_O_VALUES: {
    tv a = tv_arr(&R->ar, TV_ARRAY, o->n);
    if (o->n) memcpy(a.u.a->v, o->val, o->n * sizeof *o->val);
    return a;
  }
  case TF_O_DICTSORT: return obj_dictsort(R, at, o, args, n);
  }
  FAIL(R, at, "unknown object method");
}

/* ---- global functions ---- */

/* namespace(mapping_or_pairs?, **kwargs) */
static tv fn_namespace(trun *R, const tnode *at, const tv *args, size_t n) {
  const tobj *kw = NULL;
  if (n && args[n - 1].k == TV_KWARGS) kw = args[--n].u.o;
  if (n > 1) FAIL(R, at, "namespace expected at most 1 argument, got %zu", n);
  tv ns = tv_obj(&R->ar, TV_NS);
  if (n == 1) {
    tv src = args[0];
    if (tv_is_obj(src)) {
      for (size_t i = 0; i < src.u.o->n; i++) tobj_set(&R->ar, ns.u.o, src.u.o->key[i], src.u.o->val[i]);
    } else if (tv_is_arr(src)) {
      for (size_t i = 0; i < src.u.a->n; i++) {
        tv pair = src.u.a->v[i], k, v;
        if (tv_is_arr(pair) && pair.u.a->n == 2) {
          k = pair.u.a->v[0];
          v = pair.u.a->v[1];
        } else if (pair.k == TV_STR && cp_count(pair.u.s) == 2) { /* "ab": key "a", value "b" */
          size_t j = 0;
          u8_next(pair.u.s->s, pair.u.s->len, &j);
          k = tv_cstr(&R->ar, pair.u.s->s, j);
          v = tv_cstr(&R->ar, pair.u.s->s + j, pair.u.s->len - j);
        } else {
          FAIL(R, at, "namespace expected an object or an iterable of [key, value] pairs");
        }
        if (k.k != TV_STR) FAIL(R, at, "namespace keys must be strings");
        tobj_set(&R->ar, ns.u.o, k.u.s, v);
      }
    } else {
      FAIL(R, at, "'%s' object is not iterable", TYPE(src));
    }
  }
  if (kw)
    for (size_t i = 0; i < kw->n; i++) tobj_set(&R->ar, ns.u.o, kw->key[i], kw->val[i]);
  return ns;
}

static tv fn_range(trun *R, const tnode *at, const tv *args, size_t n) {
  if (n && args[n - 1].k == TV_KWARGS) n--;
  if (n < 1 || n > 3) FAIL(R, at, "range() takes 1 to 3 arguments");
  for (size_t i = 0; i < n; i++)
    if (!tv_is_num(args[i])) FAIL(R, at, "range() arguments must be numbers, got %s", TYPE(args[i]));
  double start = 0, stop, step = 1;
  if (n == 1) stop = args[0].u.n;
  else { start = args[0].u.n; stop = args[1].u.n; }
  if (n == 3) step = args[2].u.n;
  if (step == 0) FAIL(R, at, "range() step must not be zero");
  double cnt = step > 0 ? ceil((stop - start) / step) : ceil((start - stop) / -step);
  if (!(cnt > 0)) cnt = 0;
  if (cnt > 1e7) FAIL(R, at, "range() of %.0f numbers is too long", cnt);
  tv a = tv_arr(&R->ar, TV_ARRAY, (size_t)cnt);
  double x = start;
  for (size_t i = 0; i < (size_t)cnt; i++, x += step) a.u.a->v[i] = x == floor(x) ? tv_int(x) : tv_float(x);
  return a;
}

static tv fn_strftime(trun *R, const tnode *at, const tv *args, size_t n) {
  if (n < 1 || args[0].k != TV_STR) FAIL(R, at, "strftime_now() expects a format string");
  static const char *months[] = {"January", "February", "March", "April", "May", "June", "July",
                                 "August", "September", "October", "November", "December"};
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  const tstr *f = args[0].u.s;
  tbuf b;
  tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
  char t[32];
  for (size_t i = 0; i < f->len; i++) {
    if (f->s[i] != '%' || i + 1 >= f->len || !strchr("YmdbBHM%", f->s[i + 1])) { tb_putc(&b, f->s[i]); continue; }
    char c = f->s[++i];
    switch (c) {
    case 'Y': snprintf(t, sizeof t, "%d", tm.tm_year + 1900); break;
    case 'm': snprintf(t, sizeof t, "%02d", tm.tm_mon + 1); break;
    case 'd': snprintf(t, sizeof t, "%02d", tm.tm_mday); break;
    case 'b': snprintf(t, sizeof t, "%.3s", months[tm.tm_mon]); break;
    case 'B': snprintf(t, sizeof t, "%s", months[tm.tm_mon]); break;
    case 'H': snprintf(t, sizeof t, "%02d", tm.tm_hour); break;
    case 'M': snprintf(t, sizeof t, "%02d", tm.tm_min); break;
    default: snprintf(t, sizeof t, "%%"); break;
    }
    tb_puts(&b, t);
  }
  return str_buf(R, &b);
}

/* raise_exception(msg): the render fails with msg */
static _Noreturn void fn_raise(trun *R, const tnode *at, const tv *args, size_t n) {
  tbuf b;
  tb_init(&b, &R->ar, 4096);
  for (size_t i = 0; i < n; i++) {
    if (i) tb_putc(&b, ',');
    tv_write_raw(&b, args[i], 1);
  }
  FAIL(R, at, "raise_exception: %s", b.p ? b.p : "");
}

/* a macro: its own scope under the caller's, parameters bound as Jinja does */
static tv call_macro(trun *R, const tnode *at, const tnode *m, const tv *args, size_t n, tscope *env) {
  tscope *sc = scope_new(R, env);
  const tobj *kw = NULL;
  if (n && args[n - 1].k == TV_KWARGS) kw = args[--n].u.o;
  char *used = ta_alloc(&R->ar, kw && kw->n ? kw->n : 1);
  int np = m->list2.n;
  int *pending = ta_alloc(&R->ar, (size_t)(np ? np : 1) * sizeof *pending), npend = 0;
  for (int i = 0; i < np; i++) {
    const tnode *prm = m->list2.v[i];
    tv val = tv_undef();
    int have = 0;
    if ((size_t)i < n) { val = args[i]; have = 1; }
    if (!have && kw)
      for (size_t k = 0; k < kw->n; k++)
        if (!used[k] && kw->key[k]->len == prm->s->len && !memcmp(kw->key[k]->s, prm->s->s, prm->s->len)) {
          val = kw->val[k];
          used[k] = 1;
          have = 1;
          break;
        }
    if (!have && prm->kind == N_KWARG) pending[npend++] = i;
    setvar(R, sc, prm->s, val);
  }
  tv rest = tv_obj(&R->ar, TV_OBJECT);
  if (kw)
    for (size_t k = 0; k < kw->n; k++)
      if (!used[k]) tobj_set(&R->ar, rest.u.o, kw->key[k], kw->val[k]);
  if (m->flag & 1) setvar_c(R, sc, "kwargs", rest);
  else if (rest.u.o->n) FAIL(R, at, "macro '%s' takes no keyword argument '%s'", m->s->s, rest.u.o->key[0]->s);
  if (m->flag & 2) {
    size_t extra = n > (size_t)np ? n - (size_t)np : 0;
    tv va = tv_arr(&R->ar, TV_ARRAY, extra);
    for (size_t i = 0; i < extra; i++) va.u.a->v[i] = args[(size_t)np + i];
    setvar_c(R, sc, "varargs", va);
  } else if (n > (size_t)np) {
    FAIL(R, at, "macro '%s' takes not more than %d argument(s)", m->s->s, np);
  }
  for (int i = 0; i < npend; i++) setvar(R, sc, m->list2.v[pending[i]]->s, ev(R, m->list2.v[pending[i]]->a, sc));
  tbuf b, *saved = R->out;
  tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
  R->out = &b;
  ex_block(R, &m->list, sc);
  R->out = saved;
  if (R->ctl) FAIL(R, at, "break or continue outside a loop (in macro '%s')", m->s->s);
  return str_buf(R, &b);
}

static tv call_fn(trun *R, const tnode *at, const tfn *f, const tv *args, size_t n, tscope *env) {
  switch (f->id) {
  case TF_NAMESPACE: return fn_namespace(R, at, args, n);
  case TF_RAISE: fn_raise(R, at, args, n);
  case TF_RANGE: return fn_range(R, at, args, n);
  case TF_STRFTIME: return fn_strftime(R, at, args, n);
  case TF_MACRO: return call_macro(R, at, f->macro, args, n, env);
  default:
    if (f->id >= TF_O_GET) return obj_method(R, at, f->id, f->self.u.o, args, n);
    return str_method(R, at, f->id, f->self.u.s, args, n);
  }
}

/* ---- arguments: positional values, then keyword ones ---- */

typedef struct targs {
  tv *v;
  size_t n;
  tobj *kw;
} targs;

static targs ev_args(trun *R, const tlist *args, tscope *env) {
  targs a;
  size_t cap = (size_t)args->n + 1;
  a.v = ta_alloc(&R->ar, cap * sizeof *a.v);
  a.n = 0;
  a.kw = tv_obj(&R->ar, TV_KWARGS).u.o;
  for (int i = 0; i < args->n; i++) {
    const tnode *x = args->v[i];
    if (x->kind == N_SPREAD) {
      tv s = ev(R, x->a, env);
      if (!tv_is_arr(s)) FAIL(R, x, "Cannot unpack non-iterable type: %s", TYPE(s));
      a.v = ta_grow(&R->ar, a.v, cap * sizeof *a.v, (cap + s.u.a->n) * sizeof *a.v);
      cap += s.u.a->n;
      for (size_t k = 0; k < s.u.a->n; k++) a.v[a.n++] = s.u.a->v[k];
    } else if (x->kind != N_KWARG && x->kind != N_KWSPREAD) {
      a.v[a.n++] = ev(R, x, env);
    }
  }
  for (int i = 0; i < args->n; i++) {
    const tnode *x = args->v[i];
    if (x->kind == N_KWARG) {
      if (tobj_get(a.kw, x->s->s, x->s->len)) FAIL(R, x, "Got multiple values for keyword argument '%s'", x->s->s);
      tobj_set(&R->ar, a.kw, x->s, ev(R, x->a, env));
    } else if (x->kind == N_KWSPREAD) {
      tv m = ev(R, x->a, env);
      if (!tv_is_obj(m)) FAIL(R, x, "Argument after ** must be a mapping, not %s", TYPE(m));
      for (size_t k = 0; k < m.u.o->n; k++) {
        if (tobj_get(a.kw, m.u.o->key[k]->s, m.u.o->key[k]->len))
          FAIL(R, x, "Got multiple values for keyword argument '%s'", m.u.o->key[k]->s);
        tobj_set(&R->ar, a.kw, m.u.o->key[k], m.u.o->val[k]);
      }
    }
  }
  return a;
}

/* positional arguments plus, when there are any, a trailing KeywordArgumentsValue */
static void args_with_kw(trun *R, targs *a) {
  if (!a->kw->n) return;
  tv k = {TV_KWARGS, {0}};
  k.u.o = a->kw;
  a->v = ta_grow(&R->ar, a->v, a->n * sizeof *a->v, (a->n + 1) * sizeof *a->v);
  a->v[a->n++] = k;
}

static tv kwarg(const targs *a, size_t i, const char *name, tv dflt) {
  if (i < a->n) return a->v[i];
  tv *k = tobj_get(a->kw, name, strlen(name));
  return k ? *k : dflt;
}

/* ---- member access and slices ---- */

/* JavaScript's slice(start, stop, step) over n items: the chosen indices */
static size_t slice_idx(tv start, tv stop, tv step, double n, double **out, tmpl_arena *ar) {
  double st = step.k == TV_UNDEF ? 1 : step.u.n, a, b;
  int dir = st > 0 ? 1 : st < 0 ? -1 : 0;
  if (dir >= 0) {
    a = start.k == TV_UNDEF ? 0 : start.u.n;
    a = a < 0 ? fmax(n + a, 0) : fmin(a, n);
    b = stop.k == TV_UNDEF ? n : stop.u.n;
    b = b < 0 ? fmax(n + b, 0) : fmin(b, n);
  } else {
    a = start.k == TV_UNDEF ? n - 1 : start.u.n;
    a = a < 0 ? fmax(n + a, -1) : fmin(a, n - 1);
    b = stop.k == TV_UNDEF ? -1 : stop.u.n;
    b = b < -1 ? fmax(n + b, -1) : fmin(b, n - 1);
  }
  size_t cnt = 0;
  if (dir != 0) {
    double c = dir > 0 ? ceil((b - a) / st) : ceil((a - b) / -st);
    cnt = c > 0 ? (size_t)c : 0;
  }
  *out = ta_alloc(ar, (cnt ? cnt : 1) * sizeof **out);
  double i = a;
  for (size_t k = 0; k < cnt; k++, i += st) (*out)[k] = i;
  return cnt;
}

static tv ev_slice(trun *R, const tnode *sl, tv obj, tscope *env) {
  if (!tv_is_arr(obj) && obj.k != TV_STR) FAIL(R, sl, "Slice object must be an array or string");
  tv start = sl->a ? ev(R, sl->a, env) : tv_undef();
  tv stop = sl->b ? ev(R, sl->b, env) : tv_undef();
  tv step = sl->c ? ev(R, sl->c, env) : tv_undef();
  if (start.k != TV_INT && start.k != TV_UNDEF) FAIL(R, sl, "Slice start must be numeric or undefined");
  if (stop.k != TV_INT && stop.k != TV_UNDEF) FAIL(R, sl, "Slice stop must be numeric or undefined");
  if (step.k != TV_INT && step.k != TV_UNDEF) FAIL(R, sl, "Slice step must be numeric or undefined");
  double *idx;
  if (tv_is_arr(obj)) {
    size_t cnt = slice_idx(start, stop, step, (double)obj.u.a->n, &idx, &R->ar);
    tv out = tv_arr(&R->ar, TV_ARRAY, cnt);
    for (size_t k = 0; k < cnt; k++) out.u.a->v[k] = obj.u.a->v[(size_t)idx[k]];
    return out;
  }
  /* strings slice by code points (Array.from) */
  const tstr *s = obj.u.s;
  size_t ncp = cp_count(s);
  size_t *off = ta_alloc(&R->ar, (ncp + 1) * sizeof *off);
  for (size_t i = 0, k = 0; k <= ncp; k++) {
    off[k] = i;
    if (i < s->len) u8_next(s->s, s->len, &i);
  }
  size_t cnt = slice_idx(start, stop, step, (double)ncp, &idx, &R->ar);
  tbuf b;
  tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
  for (size_t k = 0; k < cnt; k++) {
    size_t c = (size_t)idx[k];
    tb_put(&b, s->s + off[c], off[c + 1] - off[c]);
  }
  return str_buf(R, &b);
}

/* s.at(i) in UTF-16 units; a lone surrogate half reads as U+FFFD */
static tv str_at(trun *R, const tstr *s, double i) {
  double n = (double)js_utf16_len(s->s, s->len);
  if (i < 0) i += n;
  if (i < 0 || i >= n) return tv_undef();
  size_t p = 0, u = 0;
  while (p < s->len) {
    size_t q = p;
    uint32_t cp = u8_next(s->s, s->len, &q);
    size_t w = cp >= 0x10000 ? 2 : 1;
    if ((double)(u + w) > i) {
      if (w == 2) return str_c(R, "\xEF\xBF\xBD");
      return tv_cstr(&R->ar, s->s + p, q - p);
    }
    u += w;
    p = q;
  }
  return tv_undef();
}

static tv builtin_prop(trun *R, tv obj, const tstr *prop) {
  if (obj.k == TV_STR) {
    if (str_eq(prop, "length")) return tv_int((double)js_utf16_len(obj.u.s->s, obj.u.s->len));
    for (size_t i = 0; i < DSI_ARRAY_LEN(STR_METHODS); i++)
      if (str_eq(prop, STR_METHODS[i].name)) return tv_fn(&R->ar, STR_METHODS[i].id, obj, NULL);
  } else if (tv_is_arr(obj)) {
    if (str_eq(prop, "length")) return tv_int((double)obj.u.a->n);
  } else if (tv_is_obj(obj)) {
    for (size_t i = 0; i < DSI_ARRAY_LEN(OBJ_METHODS); i++)
      if (str_eq(prop, OBJ_METHODS[i].name)) return tv_fn(&R->ar, OBJ_METHODS[i].id, obj, NULL);
  }
  return tv_undef();
}

static tv ev_member(trun *R, const tnode *n, tscope *env) {
  tv obj = ev(R, n->a, env), prop;
  if (n->flag) {
    if (n->b->kind == N_SLICE) return ev_slice(R, n->b, obj, env);
    prop = ev(R, n->b, env);
  } else if (n->b->kind == N_INT) {
    prop = tv_int(n->b->num);
  } else {
    prop = tv_str(n->b->s);
  }
  if (is_container(obj)) {
    if (prop.k != TV_STR) FAIL(R, n, "Cannot access property with non-string: got %s", TYPE(prop));
    tv *v = tobj_get(obj.u.o, prop.u.s->s, prop.u.s->len);
    if (v) return *v;
    return obj.k == TV_NS ? tv_undef() : builtin_prop(R, obj, prop.u.s);
  }
  if (tv_is_arr(obj) || obj.k == TV_STR) {
    if (prop.k == TV_INT) {
      if (obj.k == TV_STR) return str_at(R, obj.u.s, prop.u.n);
      double i = prop.u.n < 0 ? prop.u.n + (double)obj.u.a->n : prop.u.n;
      return i >= 0 && i < (double)obj.u.a->n ? obj.u.a->v[(size_t)i] : tv_undef();
    }
    if (prop.k == TV_STR) return builtin_prop(R, obj, prop.u.s);
    FAIL(R, n, "Cannot access property with non-string/non-number: got %s", TYPE(prop));
  }
  if (prop.k != TV_STR) FAIL(R, n, "Cannot access property with non-string: got %s", TYPE(prop));
  return tv_undef();
}

/* ---- operators ---- */

static const char *op_name(int op) {
  static const char *names[] = {"+", "-", "~", "*", "/", "//", "%", "**", "==", "!=", "<", ">", "<=", ">=",
                                "and", "or", "in", "not in", "not", "-", "+"};
  return op >= 0 && op < (int)DSI_ARRAY_LEN(names) ? names[op] : "?";
}

static int str_contains(const tstr *hay, const tstr *needle) {
  if (!needle->len) return 1;
  for (size_t i = 0; i + needle->len <= hay->len; i++)
    if (!memcmp(hay->s + i, needle->s, needle->len)) return 1;
  return 0;
}

static tv concat_raw(trun *R, tv l, tv r) {
  tbuf b;
  tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
  tv_write_raw(&b, l, 0);
  tv_write_raw(&b, r, 0);
  return str_buf(R, &b);
}

static tv ev_binary(trun *R, const tnode *n, tscope *env) {
  int op = n->op;
  tv l = ev(R, n->a, env);
  if (op == OP_AND) return tv_truthy(l) ? ev(R, n->b, env) : l;
  if (op == OP_OR) return tv_truthy(l) ? l : ev(R, n->b, env);
  tv r = ev(R, n->b, env);
  if (op == OP_EQ) return tv_bool(tv_loose_eq(l, r));
  if (op == OP_NE) return tv_bool(!tv_loose_eq(l, r));
  if (l.k == TV_UNDEF || r.k == TV_UNDEF) {
    if (r.k == TV_UNDEF && (op == OP_IN || op == OP_NOTIN)) return tv_bool(op == OP_NOTIN);
    FAIL(R, n, "Cannot perform operation %s on undefined values", op_name(op));
  }
  if (l.k == TV_NULL || r.k == TV_NULL) FAIL(R, n, "Cannot perform operation on null values");
  if (op == OP_CAT) return concat_raw(R, l, r);
  if (op == OP_POW && is_numlike(l) && is_numlike(r)) {
    double a = numval(l), b = numval(r);
    if (a == 0 && b < 0) FAIL(R, n, "0.0 cannot be raised to a negative power");
    double x = pow(a, b);
    if (!isfinite(x)) FAIL(R, n, "Exponentiation result is not a finite real number");
    return l.k == TV_FLOAT || r.k == TV_FLOAT || b < 0 ? tv_float(x) : tv_int(x);
  }
  if (tv_is_num(l) && tv_is_num(r)) {
    double a = l.u.n, b = r.u.n;
    int fl = l.k == TV_FLOAT || r.k == TV_FLOAT;
    switch (op) {
    case OP_ADD: return fl ? tv_float(a + b) : tv_int(a + b);
    case OP_SUB: return fl ? tv_float(a - b) : tv_int(a - b);
    case OP_MUL: return fl ? tv_float(a * b) : tv_int(a * b);
    case OP_DIV: return tv_float(a / b);
    case OP_FLOORDIV: return fl ? tv_float(floor(a / b)) : tv_int(floor(a / b));
    case OP_MOD: return fl ? tv_float(fmod(a, b)) : tv_int(fmod(a, b));
    case OP_LT: return tv_bool(a < b);
    case OP_GT: return tv_bool(a > b);
    case OP_GE: return tv_bool(a >= b);
    case OP_LE: return tv_bool(a <= b);
    }
  } else if (tv_is_arr(l) && tv_is_arr(r)) {
    if (op == OP_ADD) {
      tv c = tv_arr(&R->ar, TV_ARRAY, l.u.a->n + r.u.a->n);
      if (l.u.a->n) memcpy(c.u.a->v, l.u.a->v, l.u.a->n * sizeof(tv));
      if (r.u.a->n) memcpy(c.u.a->v + l.u.a->n, r.u.a->v, r.u.a->n * sizeof(tv));
      return c;
    }
  } else if (tv_is_arr(r)) {
    if (op == OP_IN || op == OP_NOTIN) {
      int member = 0;
      for (size_t i = 0; i < r.u.a->n && !member; i++) member = tv_strict_eq(r.u.a->v[i], l);
      return tv_bool(op == OP_IN ? member : !member);
    }
  }
  if ((l.k == TV_STR || r.k == TV_STR) && op == OP_ADD) return concat_raw(R, l, r);
  if (l.k == TV_STR && r.k == TV_STR && (op == OP_IN || op == OP_NOTIN)) {
    int has = str_contains(r.u.s, l.u.s);
    return tv_bool(op == OP_IN ? has : !has);
  }
  if (l.k == TV_STR && tv_is_obj(r) && (op == OP_IN || op == OP_NOTIN)) {
    int has = tobj_get(r.u.o, l.u.s->s, l.u.s->len) != NULL;
    return tv_bool(op == OP_IN ? has : !has);
  }
  FAIL(R, n, "Unknown operator \"%s\" between %s and %s", op_name(op), TYPE(l), TYPE(r));
}

static tv ev_unary(trun *R, const tnode *n, tscope *env) {
  tv a = ev(R, n->a, env);
  if (n->op == OP_NOT) return tv_bool(!tv_truthy(a));
  if (!is_numlike(a)) FAIL(R, n, "Unknown operator \"%s\" for %s", op_name(n->op), TYPE(a));
  double x = (n->op == OP_NEG ? -1 : 1) * numval(a);
  return a.k == TV_FLOAT ? tv_float(x) : tv_int(x);
}

/* ---- tests: `x is name` ---- */

static int run_test(trun *R, const tnode *at, const tstr *name, tv v, tv arg) {
  const char *s = name->s;
  if (!strcmp(s, "boolean")) return v.k == TV_BOOL;
  if (!strcmp(s, "callable")) return v.k == TV_FUNC;
  if (!strcmp(s, "odd") || !strcmp(s, "even")) {
    if (v.k != TV_INT) FAIL(R, at, "cannot %s on %s", s, TYPE(v));
    int odd = fmod(v.u.n, 2) != 0;
    return s[0] == 'o' ? odd : !odd;
  }
  if (!strcmp(s, "false")) return v.k == TV_BOOL && !v.u.b;
  if (!strcmp(s, "true")) return v.k == TV_BOOL && v.u.b;
  if (!strcmp(s, "none")) return v.k == TV_NULL;
  if (!strcmp(s, "string")) return v.k == TV_STR;
  if (!strcmp(s, "number")) return tv_is_num(v);
  if (!strcmp(s, "integer")) return v.k == TV_INT;
  if (!strcmp(s, "iterable")) return v.k == TV_ARRAY || v.k == TV_STR;
  if (!strcmp(s, "mapping")) return tv_is_obj(v);
  if (!strcmp(s, "sequence")) return tv_is_arr(v) || tv_is_obj(v) || v.k == TV_STR;
  if (!strcmp(s, "lower") || !strcmp(s, "upper")) {
    if (v.k != TV_STR) return 0;
    for (size_t i = 0; i < v.u.s->len; i++) {
      char c = v.u.s->s[i];
      if (s[0] == 'l' ? low(c) != c : up(c) != c) return 0;
    }
    return 1;
  }
  if (!strcmp(s, "defined")) return v.k != TV_UNDEF;
  if (!strcmp(s, "undefined")) return v.k == TV_UNDEF;
  if (!strcmp(s, "equalto") || !strcmp(s, "eq")) return tv_strict_eq(v, arg);
  FAIL(R, at, "Unknown test: %s", s);
}

/* ---- filters ---- */

static tv tojson_str(trun *R, const tnode *at, tv v, const tjson_opts *o) {
  tbuf b;
  tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
  if (tv_tojson(&b, v, o, 0) < 0) FAIL(R, at, "Cannot convert to JSON: %s", TYPE(v));
  return str_buf(R, &b);
}

/* lines after the first (unless first) and non-empty ones (unless blank) get width spaces */
static tv indent_str(trun *R, const tstr *s, double width, int first, int blank) {
  tbuf b;
  tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
  size_t st = 0;
  for (size_t line = 0;; line++) {
    size_t e = st;
    while (e < s->len && s->s[e] != '\n') e++;
    if (!((!first && line == 0) || (!blank && e == st)))
      for (double k = 0; k < width; k++) tb_putc(&b, ' ');
    tb_put(&b, s->s + st, e - st);
    if (e >= s->len) break;
    tb_putc(&b, '\n');
    st = e + 1;
  }
  return str_buf(R, &b);
}

static tv join_values(trun *R, const tarr *a, const char *sep, size_t nsep) {
  tbuf b;
  tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
  for (size_t i = 0; i < a->n; i++) {
    if (i) tb_put(&b, sep, nsep);
    tv_write_raw(&b, a->v[i], 1);
  }
  return str_buf(R, &b);
}

static tv unique(trun *R, const tarr *a) {
  tv out = tv_arr(&R->ar, TV_ARRAY, a->n);
  size_t k = 0;
  for (size_t i = 0; i < a->n; i++) {
    int seen = 0;
    for (size_t j = 0; j < k && !seen; j++) {
      tv x = out.u.a->v[j], y = a->v[i];
      seen = tv_strict_eq(x, y) || (tv_is_num(x) && tv_is_num(y) && isnan(x.u.n) && isnan(y.u.n));
    }
    if (!seen) out.u.a->v[k++] = a->v[i];
  }
  out.u.a->n = k;
  return out;
}

/* `x | name` */
static tv filter_ident(trun *R, const tnode *at, tv v, const tstr *name) {
  const char *f = name->s;
  if (!strcmp(f, "safe")) return v;
  if (!strcmp(f, "tojson")) {
    tjson_opts o = {0};
    o.undef_null = 1;
    return tojson_str(R, at, v, &o);
  }
  if (tv_is_arr(v)) {
    const tarr *a = v.u.a;
    if (!strcmp(f, "list")) return v;
    if (!strcmp(f, "first")) return a->n ? a->v[0] : tv_undef();
    if (!strcmp(f, "last")) return a->n ? a->v[a->n - 1] : tv_undef();
    if (!strcmp(f, "length")) return tv_int((double)a->n);
    if (!strcmp(f, "reverse")) {
      tv r = tv_arr(&R->ar, TV_ARRAY, a->n);
      for (size_t i = 0; i < a->n; i++) r.u.a->v[i] = a->v[a->n - 1 - i];
      return r;
    }
    if (!strcmp(f, "sort")) return sorted(R, at, a->v, a->v, a->n, 0, 0);
    if (!strcmp(f, "join")) return join_values(R, a, "", 0);
    if (!strcmp(f, "string")) {
      tjson_opts o = {0};
      return tojson_str(R, at, v, &o);
    }
    if (!strcmp(f, "unique")) return unique(R, a);
    FAIL(R, at, "Unknown ArrayValue filter: %s", f);
  }
  if (v.k == TV_STR) {
    const tstr *s = v.u.s;
    if (!strcmp(f, "length")) return tv_int((double)js_utf16_len(s->s, s->len));
    if (!strcmp(f, "upper")) return str_case(R, s, 1);
    if (!strcmp(f, "lower")) return str_case(R, s, 0);
    if (!strcmp(f, "title")) return str_title(R, s);
    if (!strcmp(f, "capitalize")) return str_method(R, at, TF_S_CAPITALIZE, s, NULL, 0);
    if (!strcmp(f, "trim")) return str_method(R, at, TF_S_STRIP, s, NULL, 0);
    if (!strcmp(f, "indent")) return indent_str(R, s, 4, 0, 0);
    if (!strcmp(f, "join") || !strcmp(f, "string")) return v;
    if (!strcmp(f, "int")) {
      double x = js_parse_int(s);
      return tv_int(isnan(x) ? 0 : x);
    }
    if (!strcmp(f, "float")) {
      double x = js_parse_float(s);
      return tv_float(isnan(x) ? 0 : x);
    }
    FAIL(R, at, "Unknown StringValue filter: %s", f);
  }
  if (tv_is_num(v)) {
    if (!strcmp(f, "abs")) return v.k == TV_INT ? tv_int(fabs(v.u.n)) : tv_float(fabs(v.u.n));
    if (!strcmp(f, "int")) return tv_int(floor(v.u.n));
    if (!strcmp(f, "float")) return tv_float(v.u.n);
    if (!strcmp(f, "string")) {
      tbuf b;
      tb_init(&b, &R->ar, 512);
      tv_write(&b, v);
      return str_buf(R, &b);
    }
    FAIL(R, at, "Unknown NumericValue filter: %s", f);
  }
  if (tv_is_obj(v)) {
    if (!strcmp(f, "items")) return obj_items(R, v.u.o);
    if (!strcmp(f, "length")) return tv_int((double)v.u.o->n);
    for (size_t i = 0; i < DSI_ARRAY_LEN(OBJ_METHODS); i++)
      if (!strcmp(f, OBJ_METHODS[i].name)) return obj_method(R, at, OBJ_METHODS[i].id, v.u.o, NULL, 0);
    FAIL(R, at, "Unknown ObjectValue filter: %s", f);
  }
  if (v.k == TV_BOOL) {
    if (!strcmp(f, "bool")) return v;
    if (!strcmp(f, "int")) return tv_int(v.u.b);
    if (!strcmp(f, "float")) return tv_float(v.u.b);
    if (!strcmp(f, "string")) return str_c(R, v.u.b ? "true" : "false");
    FAIL(R, at, "Unknown BooleanValue filter: %s", f);
  }
  FAIL(R, at, "Cannot apply filter \"%s\" to type: %s", f, TYPE(v));
}

static tv filter_tojson(trun *R, const tnode *at, tv v, const targs *a) {
  tjson_opts o = {0};
  o.undef_null = 1;
  tv *k;
  tv indent = (k = tobj_get(a->kw, "indent", 6)) ? *k : tv_null();
  if (indent.k != TV_INT && indent.k != TV_NULL) FAIL(R, at, "If set, indent must be a number");
  if (indent.k == TV_INT) {
    if (indent.u.n < 0 || indent.u.n > 64) FAIL(R, at, "indent must be between 0 and 64");
    o.indent = (int)indent.u.n;
  }
  tv ascii = (k = tobj_get(a->kw, "ensure_ascii", 12)) ? *k : tv_bool(0);
  if (ascii.k != TV_BOOL) FAIL(R, at, "If set, ensure_ascii must be a boolean");
  tv sortk = (k = tobj_get(a->kw, "sort_keys", 9)) ? *k : tv_bool(0);
  if (sortk.k != TV_BOOL) FAIL(R, at, "If set, sort_keys must be a boolean");
  o.ensure_ascii = ascii.u.b;
  o.sort_keys = sortk.u.b;
  tv seps = (k = tobj_get(a->kw, "separators", 10)) ? *k : tv_null();
  if (tv_is_arr(seps)) {
    if (seps.u.a->n != 2 || seps.u.a->v[0].k != TV_STR || seps.u.a->v[1].k != TV_STR)
      FAIL(R, at, "separators must be a tuple of two strings");
    o.item_sep = seps.u.a->v[0].u.s->s;
    o.key_sep = seps.u.a->v[1].u.s->s;
  } else if (seps.k != TV_NULL) {
    FAIL(R, at, "If set, separators must be a tuple of two strings");
  }
  return tojson_str(R, at, v, &o);
}

/* selectattr/rejectattr(attr, test?, value?) over an array of objects */
static tv filter_select(trun *R, const tnode *at, tv v, const tnode *call, tscope *env, int select) {
  const char *fname = select ? "selectattr" : "rejectattr";
  for (size_t i = 0; i < v.u.a->n; i++)
    if (!is_container(v.u.a->v[i])) FAIL(R, at, "`%s` can only be applied to array of objects", fname);
  for (int i = 0; i < call->list.n; i++)
    if (call->list.v[i]->kind != N_STR) FAIL(R, at, "arguments of `%s` must be strings", fname);
  if (!call->list.n) FAIL(R, at, "`%s` needs an attribute name", fname);
  tv attr = ev(R, call->list.v[0], env);
  tv test = call->list.n > 1 ? ev(R, call->list.v[1], env) : tv_undef();
  tv arg = call->list.n > 2 ? ev(R, call->list.v[2], env) : tv_undef();
  tv out = tv_arr(&R->ar, TV_ARRAY, v.u.a->n);
  size_t k = 0;
  for (size_t i = 0; i < v.u.a->n; i++) {
    tv *x = tobj_get(v.u.a->v[i].u.o, attr.u.s->s, attr.u.s->len);
    int r = x ? (test.k == TV_STR ? run_test(R, at, test.u.s, *x, arg) : tv_truthy(*x)) : 0;
    if (select ? r : !r) out.u.a->v[k++] = v.u.a->v[i];
  }
  out.u.a->n = k;
  return out;
}

/* `x | name(args)` */
static tv filter_call(trun *R, const tnode *at, tv v, const tnode *call, tscope *env) {
  const char *f = call->a->s->s;
  if (!strcmp(f, "tojson")) {
    targs a = ev_args(R, &call->list, env);
    return filter_tojson(R, at, v, &a);
  }
  if (!strcmp(f, "join")) {
    if (v.k != TV_STR && !tv_is_arr(v)) FAIL(R, at, "Cannot apply filter \"%s\" to type: %s", f, TYPE(v));
    targs a = ev_args(R, &call->list, env);
    tv sep = kwarg(&a, 0, "separator", str_c(R, ""));
    if (sep.k != TV_STR) FAIL(R, at, "separator must be a string");
    if (tv_is_arr(v)) return join_values(R, v.u.a, sep.u.s->s, sep.u.s->len);
    tbuf b;
    tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
    for (size_t i = 0; i < v.u.s->len;) {
      size_t j = i;
      u8_next(v.u.s->s, v.u.s->len, &j);
      if (i) tb_put(&b, sep.u.s->s, sep.u.s->len);
      tb_put(&b, v.u.s->s + i, j - i);
      i = j;
    }
    return str_buf(R, &b);
  }
  if (!strcmp(f, "int") || !strcmp(f, "float")) {
    int is_int = f[0] == 'i';
    targs a = ev_args(R, &call->list, env);
    tv dflt = kwarg(&a, 0, "default", is_int ? tv_int(0) : tv_float(0));
    if (v.k == TV_STR) {
      double x = is_int ? js_parse_int(v.u.s) : js_parse_float(v.u.s);
      return isnan(x) ? dflt : is_int ? tv_int(x) : tv_float(x);
    }
    if (tv_is_num(v)) return v;
    if (v.k == TV_BOOL) return is_int ? tv_int(v.u.b) : tv_float(v.u.b);
    FAIL(R, at, "Cannot apply filter \"%s\" to type: %s", f, TYPE(v));
  }
  if (!strcmp(f, "default")) {
    targs a = ev_args(R, &call->list, env);
    tv dflt = a.n > 0 ? a.v[0] : str_c(R, "");
    tv *k = tobj_get(a.kw, "boolean", 7);
    tv boolean = a.n > 1 ? a.v[1] : k ? *k : tv_bool(0);
    if (boolean.k != TV_BOOL) FAIL(R, at, "`default` filter flag must be a boolean");
    return v.k == TV_UNDEF || (boolean.u.b && !tv_truthy(v)) ? dflt : v;
  }
  if (tv_is_arr(v)) {
    if (!strcmp(f, "sort")) {
      targs a = ev_args(R, &call->list, env);
      tv rev = kwarg(&a, 0, "reverse", tv_bool(0)), cs = kwarg(&a, 1, "case_sensitive", tv_bool(0));
      tv attr = kwarg(&a, 2, "attribute", tv_null());
      if (rev.k != TV_BOOL) FAIL(R, at, "reverse must be a boolean");
      if (cs.k != TV_BOOL) FAIL(R, at, "case_sensitive must be a boolean");
      if (attr.k != TV_STR && attr.k != TV_INT && attr.k != TV_NULL)
        FAIL(R, at, "attribute must be a string, integer, or null");
      tv *keys = ta_alloc(&R->ar, (v.u.a->n ? v.u.a->n : 1) * sizeof *keys);
      tstr *path = NULL;
      if (attr.k == TV_STR) path = attr.u.s;
      if (attr.k == TV_INT) {
        tbuf b;
        tb_init(&b, &R->ar, 64);
        js_num(&b, attr.u.n);
        path = str_buf(R, &b).u.s;
      }
      for (size_t i = 0; i < v.u.a->n; i++) keys[i] = path ? attr_path(v.u.a->v[i], path) : v.u.a->v[i];
      return sorted(R, at, v.u.a->v, keys, v.u.a->n, cs.u.b, rev.u.b);
    }
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) return filter_select(R, at, v, call, env, f[0] == 's');
    if (!strcmp(f, "map")) {
      targs a = ev_args(R, &call->list, env);
      tv *attr = tobj_get(a.kw, "attribute", 9);
      if (!attr) FAIL(R, at, "`map` expressions without `attribute` set are not currently supported.");
      if (attr->k != TV_STR) FAIL(R, at, "attribute must be a string");
      tv *dflt = tobj_get(a.kw, "default", 7);
      tv out = tv_arr(&R->ar, TV_ARRAY, v.u.a->n);
      for (size_t i = 0; i < v.u.a->n; i++) {
        if (!is_container(v.u.a->v[i])) FAIL(R, at, "items in map must be an object");
        tv x = attr_path(v.u.a->v[i], attr->u.s);
        out.u.a->v[i] = x.k == TV_UNDEF && dflt ? *dflt : x;
      }
      return out;
    }
    FAIL(R, at, "Unknown ArrayValue filter: %s", f);
  }
  if (v.k == TV_STR) {
    if (!strcmp(f, "indent")) {
      targs a = ev_args(R, &call->list, env);
      tv width = kwarg(&a, 0, "width", tv_int(4));
      if (width.k != TV_INT) FAIL(R, at, "width must be a number");
      if (width.u.n > 1024) FAIL(R, at, "indent width %.0f is too large", width.u.n);
      tv first = kwarg(&a, 1, "first", tv_bool(0)), blank = kwarg(&a, 2, "blank", tv_bool(0));
      return indent_str(R, v.u.s, width.u.n, raw_truthy(first), raw_truthy(blank));
    }
    if (!strcmp(f, "replace")) {
      targs a = ev_args(R, &call->list, env);
      tv kw = {TV_KWARGS, {0}};
      kw.u.o = a.kw;
      a.v = ta_grow(&R->ar, a.v, a.n * sizeof *a.v, (a.n + 1) * sizeof *a.v);
      a.v[a.n++] = kw;
      return str_replace(R, at, v.u.s, a.v, a.n);
    }
    FAIL(R, at, "Unknown StringValue filter: %s", f);
  }
  if (tv_is_obj(v)) {
    for (size_t i = 0; i < DSI_ARRAY_LEN(OBJ_METHODS); i++)
      if (!strcmp(f, OBJ_METHODS[i].name)) {
        targs a = ev_args(R, &call->list, env);
        args_with_kw(R, &a);
        return obj_method(R, at, OBJ_METHODS[i].id, v.u.o, a.v, a.n);
      }
    FAIL(R, at, "Unknown ObjectValue filter: %s", f);
  }
  FAIL(R, at, "Cannot apply filter \"%s\" to type: %s", f, TYPE(v));
}

static tv apply_filter(trun *R, const tnode *at, tv v, const tnode *filter, tscope *env) {
  if (filter->kind == N_IDENT) return filter_ident(R, at, v, filter->s);
  if (filter->kind == N_CALL && filter->a->kind == N_IDENT) return filter_call(R, at, v, filter, env);
  FAIL(R, at, "Unknown filter");
}

/* ---- expressions ---- */

static tv ev_call(trun *R, const tnode *n, tscope *env) {
  targs a = ev_args(R, &n->list, env);
  args_with_kw(R, &a);
  tv fn = ev(R, n->a, env);
  if (fn.k != TV_FUNC) FAIL(R, n, "Cannot call something that is not a function: got %s", TYPE(fn));
  return call_fn(R, n, fn.u.f, a.v, a.n, env);
}

static tv ev(trun *R, const tnode *n, tscope *env) {
  if (!n) return tv_undef();
  if (++R->steps > TMPL_MAX_STEPS) FAIL(R, n, "rendering takes more than %d steps", TMPL_MAX_STEPS);
  if (++R->depth > TMPL_MAX_DEPTH) FAIL(R, n, "recursion deeper than %d", TMPL_MAX_DEPTH);
  tv v;
  switch (n->kind) {
  case N_STR: v = tv_str(n->s); break;
  case N_INT: v = tv_int(n->num); break;
  case N_FLOAT: v = tv_float(n->num); break;
  case N_ARRAY: case N_TUPLE:
    v = tv_arr(&R->ar, n->kind == N_ARRAY ? TV_ARRAY : TV_TUPLE, (size_t)n->list.n);
    for (int i = 0; i < n->list.n; i++) v.u.a->v[i] = ev(R, n->list.v[i], env);
    break;
  case N_OBJECT:
    v = tv_obj(&R->ar, TV_OBJECT);
    for (int i = 0; i < n->list.n; i++) {
      tv k = ev(R, n->list.v[i], env);
      if (k.k != TV_STR) FAIL(R, n->list.v[i], "Object keys must be strings: got %s", TYPE(k));
      tobj_set(&R->ar, v.u.o, k.u.s, ev(R, n->list2.v[i], env));
    }
    break;
  case N_IDENT: v = lookup(env, n->s); break;
  case N_CALL: v = ev_call(R, n, env); break;
  case N_MEMBER: v = ev_member(R, n, env); break;
  case N_UNARY: v = ev_unary(R, n, env); break;
  case N_BINARY: v = ev_binary(R, n, env); break;
  case N_FILTER: v = apply_filter(R, n, ev(R, n->a, env), n->b, env); break;
  case N_TEST: {
    tv x = ev(R, n->a, env);
    int r = run_test(R, n, n->s, x, tv_undef());
    v = tv_bool(n->flag ? !r : r);
    break;
  }
  case N_SELECT: v = tv_truthy(ev(R, n->b, env)) ? ev(R, n->a, env) : tv_undef(); break;
  case N_TERNARY: v = tv_truthy(ev(R, n->a, env)) ? ev(R, n->b, env) : ev(R, n->c, env); break;
  default: FAIL(R, n, "this expression cannot stand here");
  }
  R->depth--;
  return v;
}

/* ---- statements ---- */

static tv capture(trun *R, const tlist *body, tscope *env) {
  tbuf b, *saved = R->out;
  tb_init(&b, &R->ar, TMPL_MAX_OUTPUT);
  R->out = &b;
  ex_block(R, body, env);
  R->out = saved;
  return str_buf(R, &b);
}

static void ex_set(trun *R, const tnode *n, tscope *env) {
  tv rhs = n->b ? ev(R, n->b, env) : capture(R, &n->list, env);
  if (R->ctl) return;
  const tnode *t = n->a;
  if (t->kind == N_IDENT) {
    setvar(R, env, t->s, rhs);
  } else if (t->kind == N_TUPLE) {
    if (!tv_is_arr(rhs)) FAIL(R, n, "Cannot unpack non-iterable type in set: %s", TYPE(rhs));
    if (rhs.u.a->n != (size_t)t->list.n)
      FAIL(R, n, "Too %s items to unpack in set", (size_t)t->list.n > rhs.u.a->n ? "few" : "many");
    for (int i = 0; i < t->list.n; i++) {
      if (t->list.v[i]->kind != N_IDENT) FAIL(R, t->list.v[i], "Cannot unpack to non-identifier in set");
      setvar(R, env, t->list.v[i]->s, rhs.u.a->v[i]);
    }
  } else if (t->kind == N_MEMBER) {
    tv obj = ev(R, t->a, env);
    if (obj.k != TV_NS) FAIL(R, t, "cannot assign attribute on non-namespace object (%s)", TYPE(obj));
    if (t->flag || t->b->kind != N_IDENT) FAIL(R, t, "Cannot assign to member with non-identifier property");
    tobj_set(&R->ar, obj.u.o, t->b->s, rhs);
  } else {
    FAIL(R, t, "Invalid left-hand side of an assignment");
  }
}

static void bind_loopvar(trun *R, const tnode *var, tscope *s, tv item) {
  if (var->kind == N_IDENT) {
    setvar(R, s, var->s, item);
    return;
  }
  if (item.k != TV_ARRAY) FAIL(R, var, "Cannot unpack non-iterable type: %s", TYPE(item));
  if (item.u.a->n != (size_t)var->list.n)
    FAIL(R, var, "Too %s items to unpack", (size_t)var->list.n > item.u.a->n ? "few" : "many");
  for (int j = 0; j < var->list.n; j++) {
    if (var->list.v[j]->kind != N_IDENT) FAIL(R, var->list.v[j], "Cannot unpack non-identifier type");
    setvar(R, s, var->list.v[j]->s, item.u.a->v[j]);
  }
}

static void ex_for(trun *R, const tnode *n, tscope *env) {
  tscope *scope = scope_new(R, env);
  const tnode *test = NULL;
  tv it;
  if (n->b->kind == N_SELECT) {
    it = ev(R, n->b->a, scope);
    test = n->b->b;
  } else {
    it = ev(R, n->b, scope);
  }
  if (!tv_is_arr(it) && !tv_is_obj(it)) FAIL(R, n->b, "Expected iterable or object type in for loop: got %s", TYPE(it));
  if (tv_is_obj(it)) it = obj_keys(R, it.u.o);
  const tarr *all = it.u.a;
  tv *items = all->v; /* arrays are immutable: no copy unless filtered */
  size_t cnt = all->n;
  if (test) {
    items = ta_alloc(&R->ar, (all->n ? all->n : 1) * sizeof *items);
    cnt = 0;
    for (size_t i = 0; i < all->n; i++) {
      tscope *ls = scope_new(R, scope);
      bind_loopvar(R, n->a, ls, all->v[i]);
      if (tv_truthy(ev(R, test, ls))) items[cnt++] = all->v[i];
    }
  }
  int none = 1;
  /* the loop object: a new one each iteration, as the reference makes, only
   * when the body could keep it; otherwise one, updated (no garbage per item) */
  tv loop = tv_undef();
  for (size_t i = 0; i < cnt; i++) {
    if (++R->steps > TMPL_MAX_STEPS) FAIL(R, n, "rendering takes more than %d steps", TMPL_MAX_STEPS);
    if (i == 0 || (n->flag & 1)) {
      loop = tv_obj(&R->ar, TV_OBJECT);
      tobj *o = loop.u.o;
      o->n = o->cap = 9;
      o->key = R->loop_keys;
      o->val = ta_alloc(&R->ar, 9 * sizeof *o->val);
    }
    tv *lv = loop.u.o->val;
    lv[0] = tv_int((double)i + 1);
    lv[1] = tv_int((double)i);
    lv[2] = tv_int((double)(cnt - i));
    lv[3] = tv_int((double)(cnt - i - 1));
    lv[4] = tv_bool(i == 0);
    lv[5] = tv_bool(i == cnt - 1);
    lv[6] = tv_int((double)cnt);
    lv[7] = i > 0 ? items[i - 1] : tv_undef();
    lv[8] = i + 1 < cnt ? items[i + 1] : tv_undef();
    setvar(R, scope, R->loop_keys[9], loop);
    bind_loopvar(R, n->a, scope, items[i]);
    size_t mark = R->out->n;
    ex_block(R, &n->list, scope);
    if (R->ctl) { /* the reference drops what the interrupted iteration wrote */
      int c = R->ctl;
      R->ctl = CTL_NONE;
      R->out->n = mark;
      if (R->out->p) R->out->p[mark] = 0;
      if (c == CTL_BREAK) break;
      continue;
    }
    none = 0;
  }
  if (none) ex_block(R, &n->list2, scope);
}

static void ex_stmt(trun *R, const tnode *n, tscope *env) {
  if (++R->steps > TMPL_MAX_STEPS) FAIL(R, n, "rendering takes more than %d steps", TMPL_MAX_STEPS);
  switch (n->kind) {
  case N_IF: ex_block(R, tv_truthy(ev(R, n->a, env)) ? &n->list : &n->list2, env); return;
  case N_FOR: ex_for(R, n, env); return;
  case N_SET: ex_set(R, n, env); return;
  case N_MACRO: setvar(R, env, n->s, tv_fn(&R->ar, TF_MACRO, tv_undef(), n)); return;
  case N_BREAK: R->ctl = CTL_BREAK; return;
  case N_CONTINUE: R->ctl = CTL_CONTINUE; return;
  case N_COMMENT: return;
  case N_FILTER_BLOCK: {
    tv body = capture(R, &n->list, env);
    if (R->ctl) return;
    tv v = apply_filter(R, n, body, n->b, env);
    if (v.k != TV_NULL && v.k != TV_UNDEF) tv_write(R->out, v);
    return;
  }
  default: {
    tv v = ev(R, n, env);
    if (v.k != TV_NULL && v.k != TV_UNDEF) tv_write(R->out, v);
  }
  }
}

static void ex_block(trun *R, const tlist *body, tscope *env) {
  if (++R->depth > TMPL_MAX_DEPTH) FAIL(R, NULL, "recursion deeper than %d", TMPL_MAX_DEPTH);
  for (int i = 0; i < body->n && !R->ctl; i++) ex_stmt(R, body->v[i], env);
  R->depth--;
}

/* ---- a render ---- */

int tmpl_run(const tmpl_prog *p, const cJSON *context, char **out, size_t *out_len, dsi_err *err) {
  *out = NULL;
  *out_len = 0;
  trun *R = calloc(1, sizeof *R);
  if (!R) return dsi_errf(err, DSI_E_NOMEM, "chat template: out of memory");
  R->fail.err = err;
  R->fail.src = p->src;
  R->fail.src_len = p->src_len;
  R->ar.cap = TMPL_MAX_MEMORY;
  R->ar.fail = &R->fail;
  int status = DSI_OK;
  if (setjmp(R->fail.jb)) {
    status = R->fail.status ? R->fail.status : DSI_E_INVAL;
  } else {
    tscope *g = R->global = scope_new(R, NULL);
    setvar_c(R, g, "false", tv_bool(0));
    setvar_c(R, g, "true", tv_bool(1));
    setvar_c(R, g, "none", tv_null());
    setvar_c(R, g, "raise_exception", tv_fn(&R->ar, TF_RAISE, tv_undef(), NULL));
    setvar_c(R, g, "range", tv_fn(&R->ar, TF_RANGE, tv_undef(), NULL));
    setvar_c(R, g, "strftime_now", tv_fn(&R->ar, TF_STRFTIME, tv_undef(), NULL));
    setvar_c(R, g, "True", tv_bool(1));
    setvar_c(R, g, "False", tv_bool(0));
    setvar_c(R, g, "None", tv_null());
    setvar_c(R, g, "namespace", tv_fn(&R->ar, TF_NAMESPACE, tv_undef(), NULL));
    size_t nglobal = g->vars.n;
    static const char *const keys[] = {"index", "index0", "revindex", "revindex0", "first",
                                       "last", "length", "previtem", "nextitem", "loop"};
    for (int j = 0; j < 10; j++) R->loop_keys[j] = ts_new(&R->ar, keys[j], strlen(keys[j]));
    for (const cJSON *c = context ? context->child : NULL; c; c = c->next) {
      if (!c->string) continue;
      tv *have = tobj_get(&g->vars, c->string, strlen(c->string));
      if (have && (size_t)(have - g->vars.val) < nglobal) FAIL(R, NULL, "Variable already declared: %s", c->string);
      setvar_c(R, g, c->string, tv_from_json(&R->ar, c, 0));
    }
    tbuf *o = ta_alloc(&R->ar, sizeof *o);
    tb_init(o, &R->ar, TMPL_MAX_OUTPUT);
    R->out = o;
    ex_block(R, &p->body, g);
    if (R->ctl) FAIL(R, NULL, "break or continue outside a loop");
    *out = malloc(o->n + 1);
    if (!*out) {
      status = dsi_errf(err, DSI_E_NOMEM, "chat template: out of memory (%zu bytes)", o->n);
    } else {
      if (o->n) memcpy(*out, o->p, o->n);
      (*out)[o->n] = 0;
      *out_len = o->n;
    }
  }
  ta_free(&R->ar);
  free(R);
  return status;
}
