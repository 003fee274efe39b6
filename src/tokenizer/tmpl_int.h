/* tokenizer/tmpl_int.h: internals shared by the chat-template renderer's
 * files — the arena, error jumps, runtime values (as @huggingface/jinja
 * models them), the AST and the interpreter's state. Not a public header. */
#ifndef DSI_TMPL_INT_H
#define DSI_TMPL_INT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/base.h"

/* ---- limits: a hostile template is an error, never a crash or a hang ---- */
#define TMPL_MAX_SOURCE (4u << 20)      /* bytes of template source */
#define TMPL_MAX_NEST 200               /* parser nesting (blocks + expressions) */
#define TMPL_MAX_DEPTH 400              /* evaluation recursion */
#define TMPL_MAX_OUTPUT (64u << 20)     /* bytes rendered */
#define TMPL_MAX_MEMORY (256u << 20)    /* bytes of values one render may hold */
#define TMPL_MAX_STEPS 20000000         /* nodes evaluated and loop iterations in one render */

/* ---- failure: parse and render errors jump back to the API entry ---- */
typedef struct tmpl_fail {
  jmp_buf jb;
  dsi_err *err;
  const char *src; /* original source, for line:column */
  size_t src_len;
  int status; /* set by tmpl_failf */
} tmpl_fail;

#define TMPL_NOPOS UINT32_MAX
/* "chat template line L:C: <message>"; pos is an offset into the original
 * source or TMPL_NOPOS. Jumps to f->jb. */
/* 1-based line and column (in characters) of offset pos */
void tmpl_linecol(const char *src, size_t len, uint32_t pos, int *line, int *col);
_Noreturn void tmpl_failf(tmpl_fail *f, int status, uint32_t pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- arena: everything a parse or a render allocates, freed as a whole ---- */
typedef struct tmpl_arena {
  struct tmpl_blk *head;
  size_t total, cap;
  tmpl_fail *fail;
} tmpl_arena;
void *ta_alloc(tmpl_arena *a, size_t n); /* zeroed, 16-aligned; fails over cap */
/* Grow the allocation p (old bytes) to n bytes, in place when it is the
 * arena's last one. */
void *ta_grow(tmpl_arena *a, void *p, size_t old, size_t n);
void ta_free(tmpl_arena *a);

/* growable byte buffer in an arena */
typedef struct tbuf {
  char *p;
  size_t n, cap, max;
  tmpl_arena *a;
} tbuf;
void tb_init(tbuf *b, tmpl_arena *a, size_t max);
void tb_put(tbuf *b, const char *s, size_t n);
void tb_puts(tbuf *b, const char *s);
void tb_putc(tbuf *b, char c);

/* ---- values: the runtime types of @huggingface/jinja ---- */
enum {
  TV_UNDEF, TV_NULL, TV_BOOL, TV_INT, TV_FLOAT, TV_STR,
  TV_ARRAY, TV_TUPLE, TV_OBJECT, TV_NS, TV_KWARGS, TV_FUNC,
};

typedef struct tstr {
  size_t len;
  char s[]; /* NUL-terminated; may hold NULs */
} tstr;

struct tarr;
struct tobj;
struct tfn;
typedef struct tv {
  int k;
  union {
    double n; /* TV_INT and TV_FLOAT: JavaScript numbers */
    int b;
    tstr *s;
    struct tarr *a;
    struct tobj *o; /* TV_OBJECT, TV_NS, TV_KWARGS */
    struct tfn *f;
  } u;
} tv;

typedef struct tarr {
  size_t n;
  tv *v;
} tarr;

/* insertion-ordered map; lookups are linear (chat objects are small) */
typedef struct tobj {
  size_t n, cap;
  tstr **key;
  tv *val;
} tobj;

struct tnode;
typedef struct tfn {
  int id;                   /* TF_* */
  tv self;                  /* the bound receiver of a method */
  const struct tnode *macro;
} tfn;

tstr *ts_new(tmpl_arena *a, const char *s, size_t n);
tstr *ts_cat(tmpl_arena *a, const char *x, size_t nx, const char *y, size_t ny);
static inline tv tv_undef(void) { tv v = {TV_UNDEF, {0}}; return v; }
static inline tv tv_null(void) { tv v = {TV_NULL, {0}}; return v; }
static inline tv tv_bool(int b) { tv v = {TV_BOOL, {0}}; v.u.b = !!b; return v; }
static inline tv tv_int(double n) { tv v = {TV_INT, {0}}; v.u.n = n; return v; }
static inline tv tv_float(double n) { tv v = {TV_FLOAT, {0}}; v.u.n = n; return v; }
static inline tv tv_str(tstr *s) { tv v = {TV_STR, {0}}; v.u.s = s; return v; }
tv tv_cstr(tmpl_arena *a, const char *s, size_t n);
tv tv_arr(tmpl_arena *a, int kind, size_t n); /* n undefined elements */
tv tv_obj(tmpl_arena *a, int kind);
tv tv_fn(tmpl_arena *a, int id, tv self, const struct tnode *macro);
static inline int tv_is_arr(tv v) { return v.k == TV_ARRAY || v.k == TV_TUPLE; }
static inline int tv_is_obj(tv v) { return v.k == TV_OBJECT || v.k == TV_KWARGS; }
static inline int tv_is_num(tv v) { return v.k == TV_INT || v.k == TV_FLOAT; }

tv *tobj_get(const tobj *o, const char *key, size_t n);
void tobj_set(tmpl_arena *a, tobj *o, tstr *key, tv val);

const char *tv_type_name(tv v); /* "StringValue", as the reference names it */
int tv_truthy(tv v);            /* __bool__ */
int tv_loose_eq(tv a, tv b);    /* `==`: JavaScript's == on the raw values */
int tv_strict_eq(tv a, tv b);   /* `in` on arrays: === on the raw values */

/* cJSON -> value (keys ordered as JavaScript's Object.entries orders them) */
tv tv_from_json(tmpl_arena *a, const cJSON *j, int depth);

/* RuntimeValue.toString(): what `{{ v }}` prints */
void tv_write(tbuf *b, tv v);
/* String(v.value): what `+`, `~` and `join` concatenate; join maps null
 * and undefined to "" */
void tv_write_raw(tbuf *b, tv v, int for_join);
/* a JavaScript number as Number.prototype.toString writes it */
void js_num(tbuf *b, double x);

typedef struct tjson_opts {
  int indent;
  int ensure_ascii, sort_keys;
  const char *item_sep, *key_sep; /* NULL: the defaults */
  int undef_null;                 /* undefined -> "null" (else "undefined") */
} tjson_opts;
/* toJSON(): Python json.dumps defaults, as the reference writes them.
 * Returns 0, or -1 for a value with no JSON form (a function). */
int tv_tojson(tbuf *b, tv v, const tjson_opts *o, int depth);

/* ---- UTF-8 and JavaScript string semantics ---- */
uint32_t u8_next(const char *s, size_t n, size_t *i); /* bad bytes: U+FFFD, one byte */
void u8_put(tbuf *b, uint32_t cp);
int js_space(uint32_t cp);      /* JavaScript's \s */
size_t js_trim_start(const char *s, size_t n); /* leading bytes of \s */
size_t js_trim_end(const char *s, size_t n);   /* length without trailing \s */
size_t js_utf16_len(const char *s, size_t n);

/* ---- AST ---- */
enum {
  /* statements */
  N_IF, N_FOR, N_SET, N_MACRO, N_BREAK, N_CONTINUE, N_FILTER_BLOCK, N_COMMENT,
  /* expressions */
  N_STR, N_INT, N_FLOAT, N_ARRAY, N_TUPLE, N_OBJECT, N_IDENT, N_MEMBER, N_SLICE,
  N_CALL, N_KWARG, N_SPREAD, N_KWSPREAD, N_BINARY, N_UNARY, N_FILTER, N_TEST,
  N_SELECT, N_TERNARY,
};

/* binary and unary operators */
enum {
  OP_ADD, OP_SUB, OP_CAT, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
  OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_AND, OP_OR, OP_IN, OP_NOTIN,
  OP_NOT, OP_NEG, OP_POS,
};

typedef struct tnode tnode;
typedef struct tlist {
  tnode **v;
  int n;
} tlist;

struct tnode {
  int kind, op;
  int flag;        /* N_TEST: negate; N_MEMBER: computed; N_FOR: 1 = the body keeps `loop`;
                      N_MACRO: 1 = uses kwargs, 2 = uses varargs */
  uint32_t pos;    /* offset in the original source */
  tnode *a, *b, *c; /* operands, in the order the kind names them */
  tlist list;      /* body, elements, arguments, object keys */
  tlist list2;     /* else/alternate body, object values */
  tstr *s;         /* string literal, identifier, filter/test name */
  double num;
};

/* a parsed template */
typedef struct tmpl_prog {
  tlist body;
  tmpl_arena arena;
  char *src; /* original source, NUL-terminated */
  size_t src_len;
} tmpl_prog;

/* parse src (len bytes) into p; status, err names line:column */
int tmpl_parse(tmpl_prog *p, const char *src, size_t len, dsi_err *err);
/* render p with context (a JSON object); *out is malloc'd */
int tmpl_run(const tmpl_prog *p, const cJSON *context, char **out, size_t *out_len, dsi_err *err);

#endif
