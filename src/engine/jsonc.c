/* engine: JSON held to a JSON Schema, byte by byte (jsonc.h).
 *
 * The schema compiles to nodes: a node is the types a value may take, or
 * an enum of literal values (each kept as its compact text), or an anyOf
 * of other nodes, with an object's properties / required / additional
 * members, an array's prefix items / items / minItems / maxItems, a
 * string's minLength / maxLength / pattern (or a format held as one, an
 * automaton of engine/regex.c), a number's bounds. $ref (local: "#",
 * "#/$defs/...", any JSON pointer into the schema) compiles to the node it
 * points at, so a recursive schema is a cycle of nodes. Annotations and
 * unknown keywords are passed over (the formats not held among them: an
 * annotation in JSON Schema 2020-12). Validation keywords the recognizer
 * cannot hold a value to (multipleOf, not, ...) are refused at
 * compile time, never ignored.
 *
 * A reading is a stack of frames, one per open value, each in a state of
 * that value's grammar. An anyOf is chosen when its value's first byte
 * comes: the reading forks into one per alternative (at most
 * DSI_JSONC_MAX_READ in all), and a reading the byte does not fit dies.
 * Every state a reading reaches can be completed (an object's ',' needs a
 * name still to give, '}' needs the required ones given, a string at its
 * maxLength takes only its closing quote, a pattern's string only bytes
 * after which a match of an allowed length is ahead, a bounded number only
 * digits after which some value inside the bounds is), so masking tokens
 * by it never leaves a completion with no token to draw. */
#include "engine/jsonc.h"

#include "engine/regex.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the compiled schema ---- */

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

typedef struct jnode {
  uint8_t types;
  int32_t n_alt, alt;         /* anyOf: node ids at ids[alt..] (the rest unused) */
  int32_t n_enum, en;         /* enum: literal ids at ids[en..] (types unused) */
  int32_t n_props, props;     /* object: props[props..] */
  uint64_t required;          /* bit i: props[props + i] must be given */
  int32_t addl;               /* members beyond the properties: their node, -1 none */
  int32_t min_props, max_props; /* members; max -1: no bound */
  int32_t n_prefix, prefix;   /* array: the first items' nodes at ids[prefix..] */
  int32_t items;              /* the later items' node, -1 none */
  int32_t min_items, max_items; /* max -1: no bound */
  int32_t min_len, max_len;   /* a string's characters; max -1: no bound */
  int32_t pat;                /* a string's pattern: pats[pat], -1 none */
  int32_t num;                /* a number's bounds: nums[num], -1 none */
  int32_t lead, then;         /* x-dsinfer-prefix: the literal lits[lead], then a value of node then (lead -1: none) */
  uint8_t tight;              /* no white space before it: a prefix, or an anyOf of them */
  uint8_t raw;                /* not JSON: text whose bytes match pats[pat] as a whole (dsi_jschema_compile_regex) */
  uint8_t unique;             /* an array's items (all of one enum) each a different value */
  uint8_t sat;                /* some value satisfies it (satisfy()) */
  uint64_t dead;              /* properties no value satisfies: never given */
} jnode;

typedef struct {
  char *s; /* a property's name as a JSON string's body, or a literal's compact text */
  uint32_t n;
} jbytes;

typedef struct {
  jbytes name;
  int32_t node;
} jprop;

/* a number's bounds, as the number times 10^18 (NUM_SCALE): lo <= x <= hi.
 * A bounded number is written without an exponent, with at most 18 digits
 * on each side of its point, so every value it can take is such an x. */
typedef __int128 i128;
typedef struct {
  i128 lo, hi;
} jnum;

/* a string's pattern as a DFA over its (unescaped) UTF-8 bytes, with the
 * string's lengths folded in. Counting a character at its first byte, and
 * only the characters a JSON string holds without a \u escape: dmin[state]
 * is the fewest more characters that lead from the state to a match,
 * fmin[state] the fewest that are at least minLength (k), and bit L of
 * exact[state] (L < k) says exactly L can. That is enough to tell whether
 * a match of an allowed length is still ahead (pat_ok). */
typedef struct {
  dsi_redfa dfa;
  int32_t *dmin, *fmin;
  uint64_t *exact;
  uint8_t *closed; /* a match from which no byte goes on */
  int words, k, min_len, max_len;
  int raw; /* raw text, not a JSON string: every byte can be written */
} jpat;

struct dsi_jschema {
  jnode *nodes;
  int n_nodes, cap_nodes;
  int32_t *ids;
  int n_ids, cap_ids;
  jprop *props;
  int n_props, cap_props;
  jbytes *lits;
  int n_lits, cap_lits;
  jpat *pats;
  int n_pats, cap_pats;
  jnum *nums;
  int n_nums, cap_nums;
  int32_t root;
};

enum { NODE_ANY = 0, NODE_NEVER = 1 };

static int grow(void **p, int *cap, int want, size_t each) {
  if (want <= *cap) return 0;
  int c = *cap ? *cap : 16;
  while (c < want) c *= 2;
  void *q = realloc(*p, (size_t)c * each);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

/* a node of these types and no other keyword: every "none" is -1 */
static jnode node_of(uint8_t types) {
  return (jnode){.types = types, .addl = -1, .max_props = -1, .items = -1, .max_items = -1, .max_len = -1, .pat = -1,
                 .num = -1, .lead = -1};
}

static int32_t new_node(dsi_jschema *sc, uint8_t types) {
  if (sc->n_nodes >= UINT16_MAX || grow((void **)&sc->nodes, &sc->cap_nodes, sc->n_nodes + 1, sizeof(jnode)))
    return -1;
  sc->nodes[sc->n_nodes] = node_of(types);
  return sc->n_nodes++;
}

/* k slots of ids, their index (-1 out of memory) */
static int32_t new_ids(dsi_jschema *sc, int k) {
  if (grow((void **)&sc->ids, &sc->cap_ids, sc->n_ids + k, sizeof(int32_t))) return -1;
  int32_t at = sc->n_ids;
  sc->n_ids += k;
  return at;
}

void dsi_jschema_free(dsi_jschema *sc) {
  if (!sc) return;
  for (int i = 0; i < sc->n_props; i++) free(sc->props[i].name.s);
  for (int i = 0; i < sc->n_lits; i++) free(sc->lits[i].s);
  for (int i = 0; i < sc->n_pats; i++)
    dsi_redfa_free(&sc->pats[i].dfa), free(sc->pats[i].dmin), free(sc->pats[i].fmin), free(sc->pats[i].exact),
      free(sc->pats[i].closed);
  free(sc->nodes), free(sc->ids), free(sc->props), free(sc->lits), free(sc->pats), free(sc->nums), free(sc);
}

typedef struct {
  dsi_jschema *sc;
  const cJSON *doc;
  struct memo {
    const cJSON *s;
    int32_t node;
  } *memo;
  int n_memo, cap_memo;
  int32_t *slot; /* a hash of memo by schema: index + 1, 0 empty */
  int cap_slot;
  dsi_err *err;
  char path[512];
  int depth;
} cctx;

static int fail(cctx *x, const char *fmt, const char *a) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, a);
  return dsi_errf(x->err, DSI_E_INVAL, "json_schema at %s: %s", *x->path ? x->path : "/", msg), -1;
}

static int oom(cctx *x) {
  if (x->sc->n_nodes >= UINT16_MAX) return fail(x, "a schema of more than 65,534 parts is not supported%s", "");
  return dsi_errf(x->err, DSI_E_NOMEM, "out of memory compiling a json_schema"), -1;
}

/* keywords that constrain a value in ways the recognizer does not hold */
static const char *const k_refused[] = {
  "patternProperties", "propertyNames", "multipleOf", "not", "if", "then", "else", "dependentRequired",
  "dependentSchemas", "dependencies", "contains", "minContains", "maxContains", "unevaluatedProperties",
  "unevaluatedItems", "$dynamicRef", "$recursiveRef",
};
/* keywords that constrain a value directly (beside a combinator: refused) */
static const char *const k_direct[] = {
  "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
  "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "minimum",
  "maximum", "exclusiveMinimum", "exclusiveMaximum", "minProperties", "maxProperties",
};

static int in_list(const char *k, const char *const *l, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(k, l[i])) return 1;
  return 0;
}

static int32_t compile(cctx *x, const cJSON *s);
static int32_t body(cctx *x, const cJSON *s, int me);

/* compile s as the child at path segment seg */
static int32_t child(cctx *x, const cJSON *s, const char *seg) {
  size_t n = strlen(x->path);
  snprintf(x->path + n, sizeof x->path - n, "/%s", seg);
  int32_t id = compile(x, s);
  x->path[n] = 0;
  return id;
}

/* a JSON pointer's token ("~1" '/', "~0" '~') into out */
static const cJSON *pointer(const cJSON *doc, const char *p) {
  if (*p++ != '#') return NULL;
  const cJSON *at = doc;
  while (*p == '/') {
    char tok[256];
    size_t k = 0;
    for (p++; *p && *p != '/'; p++) {
      char ch = *p;
      if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = *++p == '0' ? '~' : '/';
      if (k + 1 >= sizeof tok) return NULL;
      tok[k++] = ch;
    }
    tok[k] = 0;
    if (cJSON_IsObject(at)) at = cJSON_GetObjectItemCaseSensitive(at, tok);
    else if (cJSON_IsArray(at)) {
      char *end;
      long i = strtol(tok, &end, 10);
      at = *end || end == tok || i < 0 ? NULL : cJSON_GetArrayItem(at, (int)i);
    } else at = NULL;
    if (!at) return NULL;
  }
  return *p ? NULL : at;
}

static uint32_t slot_of(const cJSON *s, int cap) {
  uint64_t h = (uint64_t)(uintptr_t)s * 0x9e3779b97f4a7c15ull;
  return (uint32_t)(h >> 32) & (uint32_t)(cap - 1);
}

static int memo_find(const cctx *x, const cJSON *s) {
  for (uint32_t i = x->cap_slot ? slot_of(s, x->cap_slot) : 0; x->cap_slot && x->slot[i];
       i = (i + 1) & (uint32_t)(x->cap_slot - 1))
    if (x->memo[x->slot[i] - 1].s == s) return x->memo[x->slot[i] - 1].node;
  return -1;
}

/* s stands for a node to come: its memo entry, or -1 out of memory */
static int memo_add(cctx *x, const cJSON *s) {
  if (grow((void **)&x->memo, &x->cap_memo, x->n_memo + 1, sizeof *x->memo)) return -1;
  if (2 * (x->n_memo + 1) > x->cap_slot) { /* rehashed at half full */
    int cap = x->cap_slot ? 2 * x->cap_slot : 64;
    int32_t *slot = calloc((size_t)cap, sizeof *slot);
    if (!slot) return -1;
    free(x->slot);
    x->slot = slot, x->cap_slot = cap;
    for (int m = 0; m < x->n_memo; m++) {
      uint32_t i = slot_of(x->memo[m].s, cap);
      while (slot[i]) i = (i + 1) & (uint32_t)(cap - 1);
      slot[i] = m + 1;
    }
  }
  int me = x->n_memo++;
  x->memo[me] = (struct memo){s, -1};
  uint32_t i = slot_of(s, x->cap_slot);
  while (x->slot[i]) i = (i + 1) & (uint32_t)(x->cap_slot - 1);
  x->slot[i] = me + 1;
  return me;
}

static int get_count(cctx *x, const cJSON *s, const char *k, int32_t *v) {
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, k);
  if (!e) return 0;
  if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e9 || e->valuedouble != (double)(int64_t)e->valuedouble)
    return fail(x, "'%s' must be a non-negative integer", k);
  *v = (int32_t)e->valuedouble;
  return 1;
}

static uint8_t type_bit(const char *t) {
  static const char *const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
  for (int i = 0; i < 7; i++)
    if (!strcmp(t, names[i])) return (uint8_t)(1u << i);
  return 0;
}

static uint8_t type_of(const cJSON *v) {
  if (cJSON_IsNull(v)) return T_NULL;
  if (cJSON_IsBool(v)) return T_BOOL;
  if (cJSON_IsNumber(v)) return floor(v->valuedouble) == v->valuedouble ? T_INT | T_NUM : T_NUM;
  if (cJSON_IsString(v)) return T_STR;
  if (cJSON_IsArray(v)) return T_ARR;
  return T_OBJ;
}

/* the schemas of array l (at path segment key) into k ids: their index,
 * -1 on failure */
static int32_t schema_list(cctx *x, const cJSON *l, const char *key, int k) {
  int32_t at = new_ids(x->sc, k);
  if (at < 0) return oom(x);
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, l) {
    char seg[48];
    snprintf(seg, sizeof seg, "%s/%d", key, i);
    int32_t c = child(x, e, seg);
    if (c < 0) return -1;
    x->sc->ids[at + i++] = c;
  }
  return at;
}

/* the anyOf / oneOf / allOf / $ref of s: its node, -2 when s has none */
static int32_t combinator(cctx *x, const cJSON *s, int me) {
  const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf"), *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
  const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf"), *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
  int n = !!any + !!one + !!all + !!ref;
  if (!n) return -2;
  const char *which = any ? "anyOf" : one ? "oneOf" : all ? "allOf" : "$ref";
  if (n > 1) return fail(x, "'%s' beside another of anyOf, oneOf, allOf and $ref is not supported", which);
  const cJSON *e;
  cJSON_ArrayForEach(e, s) if (e->string && in_list(e->string, k_direct, DSI_ARRAY_LEN(k_direct)))
    return fail(x, "keywords beside a combinator are not supported (here '%s')", e->string);
  if (ref) {
    const cJSON *t = cJSON_IsString(ref) ? pointer(x->doc, ref->valuestring) : NULL;
    if (!t) return fail(x, "'$ref' %s: only pointers into this schema (\"#...\") are resolved", cJSON_IsString(ref) ? ref->valuestring : "");
    return child(x, t, "$ref");
  }
  const cJSON *l = any ? any : one ? one : all;
  int k = cJSON_GetArraySize(l);
  if (!cJSON_IsArray(l) || k == 0) return fail(x, "'%s' must be a non-empty array of schemas", which);
  if (all) {
    if (k != 1) return fail(x, "'%s' of more than one schema is not supported", which);
    return child(x, cJSON_GetArrayItem(l, 0), "allOf/0");
  }
  int32_t id = new_node(x->sc, 0);
  if (id < 0) return oom(x);
  if (me >= 0) x->memo[me].node = id;
  int32_t at = schema_list(x, l, which, k);
  if (at < 0) return -1;
  x->sc->nodes[id].n_alt = k;
  x->sc->nodes[id].alt = at;
  return id;
}

/* a literal's text (taken; NULL: out of memory) into lits: its id, or -1 */
static int32_t add_lit(cctx *x, char *t, const char *what) {
  if (!t || grow((void **)&x->sc->lits, &x->sc->cap_lits, x->sc->n_lits + 1, sizeof(jbytes))) {
    free(t);
    return oom(x);
  }
  size_t n = strlen(t);
  if (n >= UINT16_MAX) {
    free(t);
    return fail(x, "%s longer than 65,534 bytes", what);
  }
  x->sc->lits[x->sc->n_lits] = (jbytes){t, (uint32_t)n};
  return x->sc->n_lits++;
}

static int32_t compile_enum(cctx *x, const cJSON *s, jnode *base, int typed) {
  const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
  if (en && cn) return fail(x, "'%s' beside enum is not supported", "const");
  if (en && (!cJSON_IsArray(en) || !cJSON_GetArraySize(en))) return fail(x, "'%s' must be a non-empty array", "enum");
  int k = 0;
  int32_t vals[DSI_JSONC_MAX_PROPS];
  const cJSON *e;
  cJSON *one = NULL;
  if (cn) { /* one value: an array of it */
    if (!(one = cJSON_CreateArray()) || !cJSON_AddItemReferenceToArray(one, (cJSON *)cn)) return cJSON_Delete(one), oom(x);
    en = one;
  }
  int32_t rc = 0;
  cJSON_ArrayForEach(e, en) {
    if (typed && !(type_of(e) & base->types)) continue; /* the type refuses it */
    if (k == DSI_JSONC_MAX_PROPS) {
      rc = fail(x, "'%s' of more than 64 values is not supported", "enum");
      break;
    }
    if ((vals[k++] = add_lit(x, cJSON_PrintUnformatted(e), "an enum value")) < 0) {
      rc = -1;
      break;
    }
    for (int q = 0; q < k - 1; q++) /* a value given twice (1 and 1.0 print alike): once */
      if (!strcmp(x->sc->lits[vals[q]].s, x->sc->lits[vals[k - 1]].s)) {
        k--;
        break;
      }
  }
  cJSON_Delete(one);
  if (rc < 0) return -1;
  if (!k) return NODE_NEVER;
  int32_t id = new_node(x->sc, 0), at = id < 0 ? -1 : new_ids(x->sc, k);
  if (at < 0) return oom(x);
  memcpy(x->sc->ids + at, vals, (size_t)k * sizeof(int32_t));
  x->sc->nodes[id].n_enum = k;
  x->sc->nodes[id].en = at;
  return id;
}

/* the bytes a JSON string holds without a \u escape: any from 0x20 raw, and
 * the escapes \b \t \n \f \r */
static int writable(uint8_t b) { return b >= 0x20 || b == 8 || b == 9 || b == 10 || b == 12 || b == 13; }

/* bits [lo, hi] of r: any set */
static int any_bit(const uint64_t *r, long lo, long hi) {
  for (long w = lo >> 6; w <= hi >> 6; w++) {
    uint64_t m = r[w];
    if (w == lo >> 6) m &= ~0ull << (lo & 63);
    if (w == hi >> 6 && (hi & 63) != 63) m &= (2ull << (hi & 63)) - 1;
    if (m) return 1;
  }
  return 0;
}

#define PAT_INF (INT32_MAX / 2)

/* state st, count characters given: a match of an allowed length is ahead */
static int pat_ok(const jpat *p, uint32_t st, uint32_t count) {
  if (st == DSI_RE_DEAD) return 0;
  long lo = DSI_MAX(0, (long)p->min_len - (long)count), hi = p->max_len >= 0 ? (long)p->max_len - (long)count : PAT_INF - 1;
  if (hi < lo) return 0;
  if (!lo) return p->dmin[st] <= hi;
  /* 1 <= lo <= k: exactly lo .. k - 1 more, or k or more */
  if (lo < p->k && any_bit(p->exact + (size_t)st * (size_t)p->words, lo, DSI_MIN(hi, p->k - 1))) return 1;
  return p->fmin[st] <= hi;
}

static uint32_t pat_next(const jpat *p, uint32_t st, uint8_t b) {
  return p->dfa.next[(size_t)st * (size_t)p->dfa.n_cls + p->dfa.cls[b]];
}

#define PAT_MAX_MIN 1024    /* minLength beside a pattern */
#define PAT_WORK 30000000L  /* edges looked at folding the lengths in */

/* dmin, fmin and exact (jpat): -1 out of memory, -2 too costly */
static int pat_lengths(jpat *p) {
  const dsi_redfa *d = &p->dfa;
  int ns = d->n_states, nc = d->n_cls, k = p->k;
  if ((long)(k + 2) * ns * nc > PAT_WORK) return -2;
  /* the edges a string can take: to t, counting a character (w 1) or not */
  int32_t *to = malloc((size_t)ns * (size_t)nc * sizeof *to), *prev = malloc((size_t)ns * sizeof *prev);
  uint8_t *w = malloc((size_t)nc);
  uint64_t *e_prev = calloc((size_t)ns, sizeof *e_prev);
  int rc = -1;
  if (!to || !prev || !w || !e_prev) goto out;
  for (int c = 0; c < nc; c++) w[c] = (d->rep[c] & 0xC0) != 0x80;
  for (int st = 0; st < ns; st++)
    for (int c = 0; c < nc; c++) {
      uint16_t t = d->next[(size_t)st * (size_t)nc + (size_t)c];
      to[(size_t)st * (size_t)nc + (size_t)c] = t != DSI_RE_DEAD && (p->raw || writable(d->rep[c])) ? t : -1;
    }
  /* dmin: relaxed to a fixpoint (each pass settles at least one more level) */
  for (int st = 0; st < ns; st++) p->dmin[st] = d->accept[st] ? 0 : PAT_INF;
  for (int changed = 1; changed;) {
    changed = 0;
    for (int st = ns - 1; st >= 0; st--)
      for (int c = 0; c < nc; c++) {
        int32_t t = to[(size_t)st * (size_t)nc + (size_t)c];
        if (t >= 0 && p->dmin[t] + w[c] < p->dmin[st]) p->dmin[st] = p->dmin[t] + w[c], changed = 1;
      }
  }
  /* level j = 1 .. k: f_j (fewest at least j) from f_(j-1); exact bit j - 1 from level j - 1 */
  memcpy(p->fmin, p->dmin, (size_t)ns * sizeof *p->fmin);
  for (int st = 0; st < ns; st++) e_prev[st] = p->dmin[st] == 0; /* exactly 0 more */
  for (int j = 1; j <= k; j++) {
    memcpy(prev, p->fmin, (size_t)ns * sizeof *prev);
    for (int st = 0; st < ns; st++) {
      if (e_prev[st]) p->exact[(size_t)st * (size_t)p->words + (size_t)((j - 1) >> 6)] |= 1ull << ((j - 1) & 63);
      p->fmin[st] = PAT_INF;
    }
    memset(e_prev, 0, (size_t)ns * sizeof *e_prev);
    for (int changed = 1; changed;) { /* a character's bytes after its first count nothing: a few passes */
      changed = 0;
      for (int st = ns - 1; st >= 0; st--)
        for (int c = 0; c < nc; c++) {
          int32_t t = to[(size_t)st * (size_t)nc + (size_t)c];
          if (t < 0) continue;
          int32_t f = w[c] ? 1 + prev[t] : p->fmin[t];
          if (f < p->fmin[st]) p->fmin[st] = f, changed = 1;
          /* exactly j: one character to exactly j - 1, or a continuation to exactly j */
          int e = w[c] ? (j - 1 < k && (p->exact[(size_t)t * (size_t)p->words + (size_t)((j - 1) >> 6)] >> ((j - 1) & 63) & 1))
                       : (int)e_prev[t];
          if (e && !e_prev[st]) e_prev[st] = 1, changed = 1;
        }
    }
  }
  /* closed: a match no byte can go on from */
  for (int st = 0; st < ns; st++) {
    p->closed[st] = d->accept[st];
    for (int c = 0; c < nc && p->closed[st]; c++) {
      int32_t t = to[(size_t)st * (size_t)nc + (size_t)c];
      if (t >= 0 && p->dmin[t] < PAT_INF) p->closed[st] = 0;
    }
  }
  rc = 0;
out:
  free(to), free(prev), free(w), free(e_prev);
  return rc;
}

/* the formats held as patterns (RFC 3339's date-time, date, time and
 * duration, RFC 4122's uuid, dotted ipv4, a dot-atom email at a domain of
 * two labels or more, an RFC 1123 hostname); the others stay annotations */
static const char *format_re(const char *f) {
#define DATE_RE "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])"
#define TIME_RE "([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d+)?([Zz]|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
#define DUR_T_RE "T(\\d+H(\\d+M)?(\\d+S)?|\\d+M(\\d+S)?|\\d+S)"
#define ATOM_RE "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
#define LABEL_RE "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
  static const char *const k[][2] = {
    {"date-time", "^" DATE_RE "[Tt]" TIME_RE "$"},
    {"date", "^" DATE_RE "$"},
    {"time", "^" TIME_RE "$"},
    {"duration", "^P(\\d+W|\\d+Y(\\d+M)?(\\d+D)?(" DUR_T_RE ")?|\\d+M(\\d+D)?(" DUR_T_RE ")?|\\d+D(" DUR_T_RE ")?|" DUR_T_RE ")$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"ipv4", "^((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$"},
    {"email", "^" ATOM_RE "(\\." ATOM_RE ")*@" LABEL_RE "(\\." LABEL_RE ")+$"},
    {"hostname", "^" LABEL_RE "(\\." LABEL_RE ")*$"},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(k); i++)
    if (!strcmp(f, k[i][0])) return k[i][1];
  return NULL;
}

/* a string's pattern re (the schema's pattern, or a format's) with its
 * lengths into pats (raw: the bytes of raw text): its id, or -1 */
static int32_t compile_pattern(cctx *x, const char *re, int32_t min_len, int32_t max_len, int raw) {
  if (min_len > PAT_MAX_MIN) return fail(x, "minLength above 1,024 beside a pattern or format is not supported%s", "");
  dsi_jschema *sc = x->sc;
  if (grow((void **)&sc->pats, &sc->cap_pats, sc->n_pats + 1, sizeof(jpat))) return oom(x);
  jpat *p = &sc->pats[sc->n_pats];
  *p = (jpat){.k = min_len, .min_len = min_len, .max_len = max_len, .words = (min_len + 63) / 64, .raw = raw};
  char why[200];
  int rc = dsi_redfa_compile_whole(&p->dfa, re, strlen(re), raw, why, sizeof why);
  if (rc == DSI_E_NOMEM) return oom(x);
  if (rc) return raw ? dsi_errf(x->err, DSI_E_INVAL, "regex: %s", why), -1 : fail(x, "'pattern': %s", why);
  size_t ns = (size_t)p->dfa.n_states;
  p->dmin = malloc(ns * sizeof *p->dmin);
  p->fmin = malloc(ns * sizeof *p->fmin);
  p->exact = calloc(ns * (size_t)(p->words ? p->words : 1), sizeof *p->exact);
  p->closed = malloc(ns);
  sc->n_pats++; /* freed with the schema from here */
  if (!p->dmin || !p->fmin || !p->exact || !p->closed) return oom(x);
  rc = pat_lengths(p);
  if (rc == -1) return oom(x);
  if (rc) return fail(x, "'pattern' beside minLength: too costly to follow%s", "");
  return sc->n_pats - 1;
}

#define NUM_SCALE ((i128)1000000000000000000)
#define NUM_MAX (NUM_SCALE * NUM_SCALE - 1) /* the largest magnitude: 18 digits either side of the point */

static i128 floor_div(i128 a, i128 b) { return a / b - (a % b != 0 && a < 0); }

/* v times 10^18, rounded down (up: rounded up), clamped to +-(NUM_MAX + 1)
 * (past what a bounded number can be). v is read as the shortest decimal
 * that is the same double, so a bound written 0.1 is the decimal 0.1. */
static i128 scaled(double v, int up) {
  char t[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(t, sizeof t, "%.*e", prec - 1, v);
    if (strtod(t, NULL) == v) break;
  }
  const char *p = t + (t[0] == '-'); /* [-]d.ddde[+-]x */
  i128 m = 0;
  int frac = 0, dot = 0;
  for (; *p && *p != 'e'; p++) {
    if (*p == '.') dot = 1;
    else m = m * 10 + (*p - '0'), frac += dot;
  }
  if (t[0] == '-') m = -m;
  int e = atoi(p + 1) - frac + 18; /* v * 10^18 = m * 10^e */
  const i128 cap = NUM_MAX + 1;
  for (; e > 0 && m > -cap && m < cap; e--) m *= 10;
  if (m >= cap || m <= -cap) return m > 0 ? cap : -cap;
  if (e >= 0) return m;
  if (e < -36) return up ? (m > 0) : -(i128)(m < 0); /* below 10^-18 of the last digit */
  i128 d = 1;
  for (; e < 0; e++) d *= 10;
  i128 f = floor_div(m, d);
  return up && f * d != m ? f + 1 : f;
}

/* minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, or
 * draft 4's booleans beside minimum and maximum) into nums: its id, -1
 * when s has none, -2 on failure */
static int32_t compile_bounds(cctx *x, const cJSON *s, uint8_t types) {
  static const char *const k[4] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  const cJSON *v[4];
  int any = 0;
  for (int i = 0; i < 4; i++) {
    v[i] = cJSON_GetObjectItemCaseSensitive(s, k[i]);
    if (v[i] && !cJSON_IsNumber(v[i]) && !(i >= 2 && cJSON_IsBool(v[i])))
      return fail(x, "'%s' must be a number", k[i]), -2;
    if (v[i] && cJSON_IsNumber(v[i]) && !isfinite(v[i]->valuedouble)) return fail(x, "'%s' must be finite", k[i]), -2;
    any |= v[i] != NULL;
  }
  if (!any) return -1;
  jnum b = {-NUM_MAX, NUM_MAX};
  for (int i = 0; i < 4; i++) {
    if (!v[i] || cJSON_IsBool(v[i])) continue;
    int excl = i >= 2 || (v[i + 2] && cJSON_IsTrue(v[i + 2])), low = !(i & 1);
    /* x >= v: ceil(v S); x > v: floor(v S) + 1; x <= v: floor(v S); x < v: ceil(v S) - 1 */
    i128 t = scaled(v[i]->valuedouble, low != excl);
    if (excl) t += low ? 1 : -1;
    if (low && t > b.lo) b.lo = t;
    if (!low && t < b.hi) b.hi = t;
  }
  if (!(types & T_NUM)) { /* integers: multiples of the scale */
    b.lo = -floor_div(-b.lo, NUM_SCALE) * NUM_SCALE;
    b.hi = floor_div(b.hi, NUM_SCALE) * NUM_SCALE;
  }
  if (grow((void **)&x->sc->nums, &x->sc->cap_nums, x->sc->n_nums + 1, sizeof(jnum))) return oom(x), -2;
  x->sc->nums[x->sc->n_nums] = b;
  return x->sc->n_nums++;
}

static int32_t compile(cctx *x, const cJSON *s) {
  if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? NODE_ANY : NODE_NEVER;
  if (!cJSON_IsObject(s)) return fail(x, "a schema must be an object or a boolean%s", "");
  int32_t m = memo_find(x, s);
  if (m >= 0) return m;
  if (++x->depth > 64) return fail(x, "schemas nested (or $refs chained) more than 64 deep%s", "");
  const cJSON *e;
  cJSON_ArrayForEach(e, s) if (e->string && in_list(e->string, k_refused, DSI_ARRAY_LEN(k_refused)))
    return fail(x, "'%s' is not enforced, so it is refused", e->string);
  /* s stands for the node made for it, so that a $ref back to it closes a cycle */
  int me = memo_add(x, s);
  if (me < 0) return oom(x);
  /* dsinfer's extension: a literal text, then the value the rest of s describes */
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(s, "x-dsinfer-prefix");
  int32_t id;
  if (pre) {
    if (!cJSON_IsString(pre) || !*pre->valuestring) return fail(x, "'%s' must be a non-empty string", "x-dsinfer-prefix");
    int32_t lead = new_node(x->sc, 0), lit = lead < 0 ? oom(x) : add_lit(x, strdup(pre->valuestring), "a prefix");
    if (lit < 0) return -1;
    x->memo[me].node = lead;
    int32_t then = body(x, s, -1);
    if (then < 0) return -1;
    x->sc->nodes[lead].lead = lit, x->sc->nodes[lead].then = then, x->sc->nodes[lead].tight = 1;
    id = lead;
  } else {
    id = body(x, s, me);
  }
  if (id >= 0) x->memo[me].node = id;
  x->depth--;
  return id;
}

/* what s describes beside a prefix (me: s's memo entry, -1 none) */
static int32_t body(cctx *x, const cJSON *s, int me) {
  const cJSON *e;
  int32_t id = combinator(x, s, me);
  if (id == -2) {
    jnode b = {.types = T_ALL};
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (ty) {
      b.types = 0;
      if (cJSON_IsString(ty)) b.types = type_bit(ty->valuestring);
      else if (cJSON_IsArray(ty)) {
        cJSON_ArrayForEach(e, ty) {
          uint8_t t = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
          if (!t) {
            b.types = 0;
            break;
          }
          b.types |= t;
        }
      }
      if (!b.types) return fail(x, "'%s' must name JSON types (null, boolean, integer, number, string, array, object)", "type");
    } else {
      /* no type: the types its keywords are about, else any */
      static const char *const obj_k[] = {"properties", "required", "additionalProperties", "minProperties",
                                          "maxProperties"};
      static const char *const arr_k[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems",
                                          "uniqueItems"};
      static const char *const str_k[] = {"minLength", "maxLength", "pattern"};
      static const char *const num_k[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
      uint8_t t = 0;
      cJSON_ArrayForEach(e, s) if (e->string) {
        if (in_list(e->string, obj_k, 5)) t |= T_OBJ;
        if (in_list(e->string, arr_k, 6)) t |= T_ARR;
        if (in_list(e->string, str_k, 3)) t |= T_STR;
        if (in_list(e->string, num_k, 4)) t |= T_INT | T_NUM;
      }
      if (t) b.types = t;
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "enum") || cJSON_GetObjectItemCaseSensitive(s, "const")) {
      cJSON_ArrayForEach(e, s) if (e->string && in_list(e->string, k_direct, DSI_ARRAY_LEN(k_direct)) &&
                                   strcmp(e->string, "type") && strcmp(e->string, "enum") && strcmp(e->string, "const"))
        return fail(x, "'%s' beside enum or const is not supported", e->string);
      id = compile_enum(x, s, &b, ty != NULL);
    } else if ((id = new_node(x->sc, b.types)) < 0) {
      return oom(x);
    } else {
      if (me >= 0) x->memo[me].node = id;
      jnode n = x->sc->nodes[id];
      /* object */
      const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
      if (props) {
        if (!cJSON_IsObject(props)) return fail(x, "'%s' must be an object of schemas", "properties");
        int k = cJSON_GetArraySize(props);
        if (k > DSI_JSONC_MAX_PROPS) return fail(x, "'%s' of more than 64 names is not supported", "properties");
        if (grow((void **)&x->sc->props, &x->sc->cap_props, x->sc->n_props + k, sizeof(jprop))) return oom(x);
        n.n_props = k;
        n.props = x->sc->n_props;
        x->sc->n_props += k;
        for (int i = 0; i < k; i++) x->sc->props[n.props + i] = (jprop){{NULL, 0}, NODE_ANY};
        int i = 0;
        cJSON_ArrayForEach(e, props) {
          for (int q = 0; q < i; q++) /* cJSON keeps a name given twice twice */
            if (!strcmp(cJSON_GetArrayItem(props, q)->string, e->string))
              return fail(x, "property '%s' is named twice", e->string);
          cJSON *str = cJSON_CreateString(e->string);
          char *t = str ? cJSON_PrintUnformatted(str) : NULL;
          cJSON_Delete(str);
          if (!t) return oom(x);
          size_t len = strlen(t) - 2; /* the body, without its quotes */
          memmove(t, t + 1, len);
          t[len] = 0;
          x->sc->props[n.props + i].name = (jbytes){t, (uint32_t)len};
          if (len >= UINT16_MAX) return fail(x, "property names are at most 65,534 bytes%s", "");
          char seg[300];
          snprintf(seg, sizeof seg, "properties/%.256s", e->string);
          int32_t c = child(x, e, seg);
          if (c < 0) return -1;
          x->sc->props[n.props + i++].node = c;
        }
      }
      const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
      if (req) {
        if (!cJSON_IsArray(req)) return fail(x, "'%s' must be an array of property names", "required");
        if (cJSON_GetArraySize(req) > DSI_JSONC_MAX_PROPS)
          return fail(x, "'%s' of more than 64 names is not supported", "required");
        cJSON_ArrayForEach(e, req) {
          int found = -1;
          int i = 0;
          const cJSON *pp;
          cJSON_ArrayForEach(pp, props) {
            if (cJSON_IsString(e) && !strcmp(pp->string, e->valuestring)) found = i;
            i++;
          }
          if (found < 0)
            return fail(x, "required '%s' is not among the properties", cJSON_IsString(e) ? e->valuestring : "?");
          n.required |= 1ull << found;
        }
      }
      const cJSON *ad = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
      n.addl = props ? -1 : NODE_ANY; /* absent: none beside properties, any members without them */
      if (ad && (n.addl = child(x, ad, "additionalProperties")) < 0) return -1;
      if (n.addl == NODE_NEVER) n.addl = -1;
      /* array */
      const cJSON *pre = cJSON_GetObjectItemCaseSensitive(s, "prefixItems"),
                  *it = cJSON_GetObjectItemCaseSensitive(s, "items"),
                  *ai = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
      const char *pre_k = "prefixItems";
      if (cJSON_IsArray(it)) { /* the tuple form of drafts 4-2019 */
        if (pre) return fail(x, "'%s' beside an items array is not supported", "prefixItems");
        pre = it, pre_k = "items", it = ai;
      } else if (ai) {
        return fail(x, "'%s' goes with an items array", "additionalItems");
      }
      n.items = NODE_ANY;
      if (pre) {
        if (!cJSON_IsArray(pre)) return fail(x, "'%s' must be an array of schemas", pre_k);
        n.n_prefix = cJSON_GetArraySize(pre);
        if ((n.prefix = schema_list(x, pre, pre_k, n.n_prefix)) < 0) return -1;
      }
      if (it && (n.items = child(x, it, "items")) < 0) return -1;
      if (n.items == NODE_NEVER) n.items = -1;
      if (get_count(x, s, "minItems", &n.min_items) < 0 || get_count(x, s, "maxItems", &n.max_items) < 0 ||
          get_count(x, s, "minLength", &n.min_len) < 0 || get_count(x, s, "maxLength", &n.max_len) < 0 ||
          get_count(x, s, "minProperties", &n.min_props) < 0 || get_count(x, s, "maxProperties", &n.max_props) < 0)
        return -1;
      if (n.max_props >= 0 && n.min_props > n.max_props) return fail(x, "minProperties above maxProperties%s", "");
      if (n.max_items >= 0 && n.min_items > n.max_items) return fail(x, "minItems above maxItems%s", "");
      if (n.max_len >= 0 && n.min_len > n.max_len) return fail(x, "minLength above maxLength%s", "");
      if (n.items < 0 && n.min_items > n.n_prefix && (n.types & T_ARR))
        return fail(x, "minItems above the items the array may hold%s", "");
      const cJSON *uq = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
      if (uq && !cJSON_IsBool(uq)) return fail(x, "'%s' must be a boolean", "uniqueItems");
      if (cJSON_IsTrue(uq)) { /* held where each item is one of an enum's values: which are given is known */
        if (n.n_prefix || n.items < 0 || !x->sc->nodes[n.items].n_enum)
          return fail(x, "'uniqueItems' is held only over items that are all one enum (or const)%s", "");
        n.unique = 1;
      }
      const cJSON *pt = cJSON_GetObjectItemCaseSensitive(s, "pattern");
      const cJSON *fm = cJSON_GetObjectItemCaseSensitive(s, "format");
      const char *fre = !pt && cJSON_IsString(fm) ? format_re(fm->valuestring) : NULL;
      if (pt && !cJSON_IsString(pt)) return fail(x, "'%s' must be a string", "pattern");
      if (pt && (n.pat = compile_pattern(x, pt->valuestring, n.min_len, n.max_len, 0)) < 0) return -1;
      /* a format held as a pattern, beside no pattern and a minLength up to PAT_MAX_MIN (else an annotation) */
      if (fre && n.min_len <= PAT_MAX_MIN &&
          (n.pat = compile_pattern(x, fre, n.min_len, n.max_len, 0)) < 0)
        return -1;
      if (n.pat >= 0 && !pat_ok(&x->sc->pats[n.pat], 0, 0)) n.types &= (uint8_t)~T_STR; /* no string matches */
      if ((n.num = compile_bounds(x, s, n.types)) < -1) return -1;
      if (n.num >= 0 && x->sc->nums[n.num].lo > x->sc->nums[n.num].hi) n.types &= (uint8_t)~(T_INT | T_NUM); /* none in them */
      x->sc->nodes[id] = n;
    }
  }
  return id;
}

/* Which nodes some value satisfies, as the least fixpoint (so a schema
 * that asks for endless nesting is unsatisfiable), and then the parts no
 * value satisfies cut away: properties never given, alternatives never
 * chosen, items never added. The recognizer then never enters a state it
 * cannot complete. */
static int node_sat(const dsi_jschema *sc, const jnode *nd) {
  if (nd->lead >= 0) return sc->nodes[nd->then].sat;
  if (nd->n_enum) return 1;
  for (int i = 0; i < nd->n_alt; i++)
    if (sc->nodes[sc->ids[nd->alt + i]].sat) return 1;
  if (nd->n_alt) return 0;
  if (nd->types & (T_NULL | T_BOOL | T_INT | T_NUM | T_STR)) return 1;
  int ok = 0;
  if (nd->types & T_OBJ) {
    ok = 1;
    int avail = 0; /* the members that can be given: properties, and more if others may be */
    for (int i = 0; i < nd->n_props; i++) {
      int sat = sc->nodes[sc->props[nd->props + i].node].sat;
      avail += sat;
      if ((nd->required >> i & 1) && !sat) ok = 0;
    }
    if (nd->max_props >= 0 && __builtin_popcountll(nd->required) > nd->max_props) ok = 0;
    if (!(nd->addl >= 0 && sc->nodes[nd->addl].sat) && avail < nd->min_props) ok = 0;
  }
  if (!ok && (nd->types & T_ARR)) {
    ok = 1;
    for (int k = 0; k < nd->min_items && ok; k++) {
      int32_t it = k < nd->n_prefix ? sc->ids[nd->prefix + k] : nd->items;
      ok = it >= 0 && sc->nodes[it].sat;
      if (k >= nd->n_prefix) break; /* the rest are the same node */
    }
    if (nd->unique && nd->items >= 0 && nd->min_items > sc->nodes[nd->items].n_enum) ok = 0; /* too few values */
  }
  return ok;
}

static void satisfy(dsi_jschema *sc) {
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = sc->n_nodes - 1; i >= 0; i--) /* children are made after their parents: most in one pass */
      if (!sc->nodes[i].sat && node_sat(sc, &sc->nodes[i])) sc->nodes[i].sat = 1, changed = 1;
  }
  for (int i = 0; i < sc->n_nodes; i++) {
    jnode *nd = &sc->nodes[i];
    for (int k = 0; k < nd->n_props; k++)
      if (!sc->nodes[sc->props[nd->props + k].node].sat) nd->dead |= 1ull << k;
    int k_alt = 0; /* the alternatives some value satisfies, in order */
    for (int k = 0; k < nd->n_alt; k++)
      if (sc->nodes[sc->ids[nd->alt + k]].sat) sc->ids[nd->alt + k_alt++] = sc->ids[nd->alt + k];
    nd->n_alt = nd->n_alt ? k_alt : 0;
    if (nd->addl >= 0 && !sc->nodes[nd->addl].sat) nd->addl = -1;
    if (nd->items >= 0 && !sc->nodes[nd->items].sat) nd->items = -1;
    for (int k = 0; k < nd->n_prefix; k++) /* the items from an unsatisfiable one on are never given */
      if (!sc->nodes[sc->ids[nd->prefix + k]].sat) {
        nd->n_prefix = k, nd->items = -1;
        break;
      }
  }
  for (int changed = 1; changed;) { /* an anyOf of prefixes takes no white space before it either */
    changed = 0;
    for (int i = 0; i < sc->n_nodes; i++) {
      jnode *nd = &sc->nodes[i];
      int all = nd->n_alt > 0 && !nd->tight;
      for (int k = 0; all && k < nd->n_alt; k++) all = sc->nodes[sc->ids[nd->alt + k]].tight;
      if (all) nd->tight = 1, changed = 1;
    }
  }
}

/* the value at node may begin with a number */
static int starts_number(const dsi_jschema *sc, int32_t node, int depth) {
  const jnode *nd = &sc->nodes[node];
  if (depth > 64) return 0;
  if (nd->lead >= 0) return starts_number(sc, nd->then, depth + 1); /* a prefix, then a number: its end untold */
  for (int i = 0; i < nd->n_alt; i++)
    if (starts_number(sc, sc->ids[nd->alt + i], depth + 1)) return 1;
  for (int i = 0; i < nd->n_enum; i++) {
    char c = sc->lits[sc->ids[nd->en + i]].s[0];
    if (c == '-' || (c >= '0' && c <= '9')) return 1;
  }
  return !nd->n_alt && !nd->n_enum && (nd->types & (T_INT | T_NUM));
}

static int is_json(const char *s, size_t n);

int dsi_jschema_compile(dsi_jschema **out, const char *schema, size_t n, dsi_err *err) {
  *out = NULL;
  static const char any_object[] = "{\"type\":\"object\"}";
  if (!schema) schema = any_object, n = sizeof any_object - 1;
  cJSON *doc = cJSON_ParseWithLength(schema, n);
  if (!doc) return is_json(schema, n) ? dsi_errf(err, DSI_E_NOMEM, "out of memory reading a json_schema")
                                      : dsi_errf(err, DSI_E_INVAL, "json_schema is not valid JSON");
  dsi_jschema *sc = calloc(1, sizeof *sc);
  cctx x = {.sc = sc, .doc = doc, .err = err};
  int rc = DSI_OK;
  if (!sc || new_node(sc, T_ALL) != NODE_ANY || new_node(sc, 0) != NODE_NEVER) {
    rc = dsi_errf(err, DSI_E_NOMEM, "out of memory compiling a json_schema");
  } else {
    sc->nodes[NODE_ANY].addl = NODE_ANY, sc->nodes[NODE_ANY].items = NODE_ANY;
    sc->root = compile(&x, doc);
    if (sc->root >= 0) satisfy(sc);
    if (sc->root < 0) rc = err && err->status ? err->status : DSI_E_INVAL;
    else if (starts_number(sc, sc->root, 0))
      rc = dsi_errf(err, DSI_E_INVAL, "json_schema: the value may be a bare number at the top, whose end could not be told "
                                      "(give an object, an array or a string)");
    else if (!sc->nodes[sc->root].sat) rc = dsi_errf(err, DSI_E_INVAL, "json_schema: no value satisfies it");
  }
  free(x.memo), free(x.slot);
  cJSON_Delete(doc);
  if (rc) {
    dsi_jschema_free(sc);
    return rc;
  }
  *out = sc;
  return DSI_OK;
}

/* s is one JSON value (told apart from cJSON running out of memory), by the
 * recognizer over a schema of any value that needs no allocation */
static int is_json(const char *s, size_t n) {
  jnode any = node_of(T_ALL);
  any.addl = any.items = NODE_ANY, any.sat = 1;
  const dsi_jschema sc = {.nodes = &any, .n_nodes = 1, .root = NODE_ANY};
  dsi_jsonc j;
  dsi_jsonc_init(&j, &sc);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--; /* trailing white space */
  return !dsi_jsonc_feed(&j, s, n) && dsi_jsonc_done(&j);
}

int dsi_jschema_compile_regex(dsi_jschema **out, const char *pattern, size_t n, dsi_err *err) {
  *out = NULL;
  char *re = malloc(n + 1);
  dsi_jschema *sc = calloc(1, sizeof *sc);
  cctx x = {.sc = sc, .err = err};
  int rc = DSI_OK;
  if (!re || !sc || new_node(sc, T_ALL) != NODE_ANY || new_node(sc, 0) != NODE_NEVER || (sc->root = new_node(sc, 0)) < 0) {
    rc = dsi_errf(err, DSI_E_NOMEM, "out of memory compiling a regex");
  } else if (memchr(pattern, 0, n)) {
    rc = dsi_errf(err, DSI_E_INVAL, "regex: a NUL byte in the pattern");
  } else {
    memcpy(re, pattern, n), re[n] = 0;
    int32_t pat = compile_pattern(&x, re, 0, -1, 1);
    if (pat < 0) {
      rc = err && err->status ? err->status : DSI_E_INVAL;
    } else {
      jnode *nd = &sc->nodes[sc->root];
      nd->pat = pat, nd->raw = 1, nd->tight = 1, nd->sat = sc->pats[pat].dmin[0] < PAT_INF;
      if (!nd->sat) rc = dsi_errf(err, DSI_E_INVAL, "regex: no text matches it");
    }
  }
  free(re);
  if (rc) {
    dsi_jschema_free(sc);
    return rc;
  }
  *out = sc;
  return DSI_OK;
}

int dsi_regex_check(const char *pattern, size_t n, dsi_err *err) {
  dsi_jschema *sc;
  int rc = dsi_jschema_compile_regex(&sc, pattern, n, err);
  dsi_jschema_free(sc);
  return rc;
}

int dsi_json_schema_check(const char *schema, size_t n, dsi_err *err) {
  dsi_jschema *sc;
  int rc = dsi_jschema_compile(&sc, schema, n, err);
  dsi_jschema_free(sc);
  return rc;
}

/* ---- the recognizer ---- */

enum {
  S_VALUE,                    /* a value's first byte */
  O_FIRST,                    /* after '{': a name or '}' */
  O_NAME,                     /* after an object's ',': a name */
  O_COLON,                    /* after a name */
  O_AFTER,                    /* after a member's value: ',' or '}' */
  A_FIRST,                    /* after '[': an item or ']' */
  A_AFTER,                    /* after an item: ',' or ']' (white space may precede all the above) */
  O_KEY, O_KEY_ESC, O_KEY_HEX, /* in a name; after its '\'; in its \uXXXX */
  S_STR, S_ESC, S_HEX,         /* the same in a string value */
  S_LIT,                       /* in true / false / null */
  S_ENUM,                      /* in one of an enum's literals */
  S_LEAD,                      /* in a prefix (x-dsinfer-prefix) */
  S_RAW,                       /* in raw text held to a pattern (cand: its state) */
  N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP, /* a number, as RFC 8259's grammar */
};

enum { AGAIN = 1, NO_PROP = UINT16_MAX };

static const char *const k_lits[3] = {"true", "false", "null"};

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static int is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* \u escapes in a string or name: a high surrogate's must be followed by
 * a low one's (a lone surrogate is no character; cJSON and others refuse
 * it). The frame's aux holds the digits left and, above them, the value so
 * far; flags LOW_DUE says a low surrogate's escape must come next. */
#define LOW_DUE 0x80

static int esc_byte(dsi_jsonc_frame *f, uint8_t c, uint8_t str_st, uint8_t hex_st) {
  if (c == 'u') return f->st = hex_st, f->aux = 4, 0;
  if (f->flags & LOW_DUE) return -1;
  if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
    return f->st = str_st, 0;
  return -1;
}

static int hex_byte(dsi_jsonc_frame *f, uint8_t c, uint8_t str_st) {
  if (!is_hex(c)) return -1;
  uint32_t d = c <= '9' ? (uint32_t)(c - '0') : (uint32_t)((c | 0x20) - 'a' + 10);
  uint32_t v = (f->aux >> 8) << 4 | d, left = (f->aux & 0xFF) - 1;
  f->aux = left | v << 8;
  if (left) return 0;
  f->st = str_st, f->aux = 0;
  if (f->flags & LOW_DUE) {
    f->flags = 0;
    return v >= 0xDC00 && v <= 0xDFFF ? 0 : -1;
  }
  if (v >= 0xD800 && v <= 0xDBFF) f->flags = LOW_DUE;
  return v >= 0xDC00 && v <= 0xDFFF ? -1 : 0;
}

/* UTF-8 in a string or name (RFC 3629: no overlong forms, no surrogates,
 * nothing past U+10FFFF): a byte >= 0x80, with the frame's aux the
 * continuation bytes still due and flags the range the next one must be
 * in. 1: the byte begins a character, 0: it continues one, -1: invalid. */
static int utf8_byte(dsi_jsonc_frame *f, uint8_t c) {
  static const uint8_t lo[5] = {0x80, 0xA0, 0x80, 0x90, 0x80}, hi[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
  if (f->aux) {
    if (c < lo[f->flags] || c > hi[f->flags]) return -1;
    f->aux--, f->flags = 0;
    return 0;
  }
  if (c < 0xC2 || c > 0xF4) return -1;
  f->aux = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
  f->flags = c == 0xE0 ? 1 : c == 0xED ? 2 : c == 0xF0 ? 3 : c == 0xF4 ? 4 : 0;
  return 1;
}

void dsi_jsonc_init(dsi_jsonc *j, const dsi_jschema *sc) {
  j->sc = sc;
  j->n = 1;
  memset(&j->r[0], 0, offsetof(dsi_jsonc_reading, f) + sizeof(dsi_jsonc_frame));
  j->r[0].depth = 1;
  j->r[0].f[0].node = (uint16_t)sc->root;
}

static size_t live(const dsi_jsonc_reading *r) { return offsetof(dsi_jsonc_reading, f) + r->depth * sizeof(dsi_jsonc_frame); }

/* j into t, each reading's top keep frames (those below stay what t held) */
static void copy_frames(dsi_jsonc *t, const dsi_jsonc *j, int keep) {
  t->sc = j->sc;
  t->n = j->n;
  for (int i = 0; i < j->n; i++) {
    const dsi_jsonc_reading *r = &j->r[i];
    memcpy(&t->r[i], r, offsetof(dsi_jsonc_reading, f));
    for (int d = r->depth > keep ? r->depth - keep : 0; d < r->depth; d++) t->r[i].f[d] = r->f[d];
  }
}

void dsi_jsonc_copy(dsi_jsonc *dst, const dsi_jsonc *j) { copy_frames(dst, j, DSI_JSONC_MAX_DEPTH); }

int dsi_jsonc_done(const dsi_jsonc *j) {
  for (int i = 0; i < j->n; i++)
    if (!j->r[i].depth) return 1;
  return 0;
}

int dsi_jsonc_may_end(const dsi_jsonc *j) {
  if (dsi_jsonc_done(j)) return 1;
  const jnode *root = &j->sc->nodes[j->sc->root];
  if (!root->raw || j->n != 1 || j->r[0].depth != 1) return 0;
  const dsi_jsonc_frame *f = &j->r[0].f[0]; /* raw text: before its first byte cand is the start state, 0 */
  return j->sc->pats[root->pat].dfa.accept[f->cand];
}

static int push(dsi_jsonc_reading *r, int32_t node) {
  if (r->depth >= DSI_JSONC_MAX_DEPTH) return -1;
  r->f[r->depth++] = (dsi_jsonc_frame){.node = (uint16_t)node, .st = S_VALUE};
  return 0;
}

/* the properties not yet given */
static uint64_t unseen(const jnode *nd, const dsi_jsonc_frame *f) {
  uint64_t all = nd->n_props == 64 ? ~0ull : (1ull << nd->n_props) - 1;
  return all & ~f->seen & ~nd->dead;
}

/* the properties the next member may be, and (*other) whether it may be
 * one beyond them: with maxProperties, once the required ones not yet
 * given fill the room left, only they */
static uint64_t may_give(const jnode *nd, const dsi_jsonc_frame *f, int *other) {
  int tight = nd->max_props >= 0 &&
              (long)f->count + 1 + __builtin_popcountll(nd->required & ~f->seen) > (long)nd->max_props;
  *other = nd->addl >= 0 && !tight;
  return tight ? unseen(nd, f) & nd->required : unseen(nd, f);
}

static int more_members(const jnode *nd, const dsi_jsonc_frame *f) {
  int other;
  return may_give(nd, f, &other) || other;
}

/* item k of an array can be given: its node, or -1 */
static int32_t item(const dsi_jschema *sc, const jnode *nd, uint32_t k) {
  if (nd->max_items >= 0 && k >= (uint32_t)nd->max_items) return -1;
  return k < (uint32_t)nd->n_prefix ? sc->ids[nd->prefix + k] : nd->items; /* satisfiable (satisfy()) */
}

/* an enum's literals that are whole: the value ends with the last if it
 * closes itself (a number's end is told by the byte after it) */
/* an enum's value i is whole: the frame closed, and an array of unique
 * items told it is given */
static void enum_done(const dsi_jschema *sc, dsi_jsonc_reading *r, int i) {
  r->depth--;
  dsi_jsonc_frame *up = r->depth ? &r->f[r->depth - 1] : NULL;
  if (up && sc->nodes[up->node].unique) up->seen |= 1ull << i;
}

static int enum_whole(const dsi_jschema *sc, dsi_jsonc_reading *r, dsi_jsonc_frame *f, const jnode *nd) {
  for (int i = 0; i < nd->n_enum; i++) {
    const jbytes *l = &sc->lits[sc->ids[nd->en + i]];
    if ((f->cand >> i & 1) && l->n == f->off && l->s[0] != '-' && !is_digit((uint8_t)l->s[0])) {
      enum_done(sc, r, i);
      return 0;
    }
  }
  return 0;
}

/* A number held to bounds: the frame's flags 1 says it is negative, seen
 * and aux its integer digits' value and count, cand and count its
 * fraction's. At each byte some way to go on must lead into the bounds. */
static i128 pow10_i(int k) {
  i128 p = 1;
  while (k-- > 0) p *= 10;
  return p;
}

/* magnitudes [a, z] as signed values meet the bounds */
static int num_meets(const jnum *b, int neg, i128 a, i128 z) {
  return neg ? -z <= b->hi && -a >= b->lo : a <= b->hi && z >= b->lo;
}

static int num_ok(const jnum *b, const jnode *nd, const dsi_jsonc_frame *f) {
  int neg = f->flags & 1, frac = (nd->types & T_NUM) != 0;
  i128 iv = (i128)f->seen, s = NUM_SCALE;
  switch (f->st) {
  case N_MINUS: return num_meets(b, 1, 0, NUM_MAX);
  case N_DOT: return num_meets(b, neg, iv * s, (iv + 1) * s - 1);
  case N_FRAC: {
    i128 ulp = pow10_i(18 - (int)f->count), x = iv * s + (i128)f->cand * ulp;
    return num_meets(b, neg, x, x + ulp - 1);
  }
  default: /* N_ZERO, N_INT: the integer as it is, then with more digits (not after a 0) */
    for (int j = 0; j <= (iv ? 18 - (int)f->aux : 0); j++) {
      i128 p = pow10_i(j), a = iv * p * s, z = frac ? (iv + 1) * p * s - 1 : ((iv + 1) * p - 1) * s;
      if (num_meets(b, neg, a, z)) return 1;
    }
    return 0;
  }
}

static int num_first(const dsi_jschema *sc, dsi_jsonc_frame *f, const jnode *nd, uint8_t c) {
  if (c != '-' && !is_digit(c)) return -1;
  f->flags = c == '-', f->seen = c == '-' ? 0 : c - '0', f->aux = c != '-', f->cand = 0, f->count = 0;
  f->st = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
  return num_ok(&sc->nums[nd->num], nd, f) ? 0 : -1;
}

/* a bounded number's next byte (no exponent; 18 digits at most either
 * side of the point) */
static int num_step(const dsi_jschema *sc, dsi_jsonc_reading *r, dsi_jsonc_frame *f, const jnode *nd, uint8_t c) {
  const jnum *b = &sc->nums[nd->num];
  int d = is_digit(c);
  if (f->st == N_MINUS || f->st == N_DOT) {
    if (!d) return -1;
    if (f->st == N_MINUS) f->st = c == '0' ? N_ZERO : N_INT, f->seen = c - '0', f->aux = 1;
    else f->st = N_FRAC, f->cand = c - '0', f->count = 1;
    return num_ok(b, nd, f) ? 0 : -1;
  }
  if (d && f->st == N_INT) {
    if (f->aux >= 18) return -1;
    f->seen = f->seen * 10 + (c - '0'), f->aux++;
    return num_ok(b, nd, f) ? 0 : -1;
  }
  if (d && f->st == N_FRAC) {
    if (f->count >= 18) return -1;
    f->cand = f->cand * 10 + (c - '0'), f->count++;
    return num_ok(b, nd, f) ? 0 : -1;
  }
  if (c == '.' && f->st != N_FRAC && (nd->types & T_NUM)) {
    f->st = N_DOT;
    return num_ok(b, nd, f) ? 0 : -1;
  }
  /* the number ends: its value in the bounds */
  i128 x = (i128)f->seen * NUM_SCALE + (f->st == N_FRAC ? (i128)f->cand * pow10_i(18 - (int)f->count) : 0);
  if (f->flags & 1) x = -x;
  if (x < b->lo || x > b->hi) return -1;
  r->depth--; /* the byte is what follows it */
  return r->depth ? AGAIN : -1;
}

/* a value's first byte */
static int value(const dsi_jschema *sc, dsi_jsonc_reading *r, dsi_jsonc_frame *f, const jnode *nd, uint8_t c) {
  if (nd->raw) {
    f->st = S_RAW, f->cand = 0;
    return AGAIN;
  }
  if (nd->lead >= 0) {
    f->st = S_LEAD, f->off = 0;
    return AGAIN;
  }
  if (nd->n_enum) {
    uint64_t cand = 0; /* (seen: the values an array of unique items gave already) */
    for (int i = 0; i < nd->n_enum; i++)
      if ((uint8_t)sc->lits[sc->ids[nd->en + i]].s[0] == c && !(f->seen >> i & 1)) cand |= 1ull << i;
    if (!cand) return -1;
    f->st = S_ENUM, f->cand = cand, f->off = 1;
    return enum_whole(sc, r, f, nd);
  }
  if (nd->n_alt) return -1; /* chosen before (feed_byte) */
  switch (c) {
  case '{': return nd->types & T_OBJ ? (f->st = O_FIRST, 0) : -1;
  case '[': return nd->types & T_ARR ? (f->st = A_FIRST, 0) : -1;
  case '"': return nd->types & T_STR ? (f->st = S_STR, f->cand = 0, 0) : -1; /* cand: the pattern's state */
  case 't': case 'f': case 'n':
    if (!(nd->types & (c == 'n' ? T_NULL : T_BOOL))) return -1;
    f->st = S_LIT, f->cur = c == 't' ? 0 : c == 'f' ? 1 : 2, f->off = 1;
    return 0;
  default:
    if (!(nd->types & (T_INT | T_NUM))) return -1;
    if (nd->num >= 0) return num_first(sc, f, nd, c);
    if (c == '-') return f->st = N_MINUS, 0;
    if (c == '0') return f->st = N_ZERO, 0;
    return is_digit(c) ? (f->st = N_INT, 0) : -1;
  }
}

/* a byte of an object's member name (c not its closing quote) */
static int name_byte(const dsi_jschema *sc, dsi_jsonc_frame *f, const jnode *nd, uint8_t c) {
  switch (f->st) {
  case O_KEY:
    if (c < 0x20 || (f->aux && c < 0x80) || ((f->flags & LOW_DUE) && c != '\\')) return -1;
    if (c >= 0x80 && utf8_byte(f, c) < 0) return -1;
    if (c == '\\') f->st = O_KEY_ESC;
    break;
  case O_KEY_ESC:
    if (esc_byte(f, c, O_KEY, O_KEY_HEX)) return -1;
    break;
  default: /* O_KEY_HEX */
    if (hex_byte(f, c, O_KEY)) return -1;
  }
  uint64_t next = 0;
  for (int i = 0; i < nd->n_props; i++) {
    const jbytes *nm = &sc->props[nd->props + i].name;
    if ((f->cand >> i & 1) && f->off < nm->n && (uint8_t)nm->s[f->off] == c) next |= 1ull << i;
  }
  f->cand = next;
  int other;
  if (!(next & may_give(nd, f, &other)) && !other) return -1; /* no name it could still become */
  if (f->off < UINT16_MAX) f->off++;
  return 0;
}

/* an object's member name closed: which property it is */
static int name_end(const dsi_jschema *sc, dsi_jsonc_frame *f, const jnode *nd) {
  f->cur = NO_PROP;
  for (int i = 0; i < nd->n_props; i++)
    if ((f->cand >> i & 1) && sc->props[nd->props + i].name.n == f->off) f->cur = (uint16_t)i;
  int other;
  uint64_t may = may_give(nd, f, &other);
  if (f->cur != NO_PROP && !(may >> f->cur & 1)) return -1; /* given already, or no room for it */
  if (f->cur == NO_PROP && !other) return -1;
  f->st = O_COLON;
  return 0;
}

/* a string held to a pattern: the byte b of its value (f->count counting
 * it already) */
static int pat_byte(const jpat *p, dsi_jsonc_frame *f, uint8_t b) {
  uint32_t t = pat_next(p, (uint32_t)f->cand, b);
  if (!pat_ok(p, t, f->count)) return -1;
  f->cand = t;
  return 0;
}

/* the escape \c in a string held to a pattern, stepped (probe: whether
 * some escape can come, f unchanged). \u escapes are not taken there: the
 * characters themselves are written. */
static int pat_escape(const jpat *p, dsi_jsonc_frame *f, uint8_t c, int probe) {
  static const char esc[] = "\"\\/bfnrt", val[] = "\"\\/\b\f\n\r\t";
  for (int i = 0; i < 8; i++) {
    if (!probe && c != (uint8_t)esc[i]) continue;
    uint32_t t = pat_next(p, (uint32_t)f->cand, (uint8_t)val[i]);
    if (!pat_ok(p, t, f->count)) continue;
    if (!probe) f->cand = t;
    return 1;
  }
  return 0;
}

static int step(const dsi_jschema *sc, dsi_jsonc_reading *r, uint8_t c) {
  if (!r->depth) return -1; /* nothing follows the value */
  dsi_jsonc_frame *f = &r->f[r->depth - 1];
  const jnode *nd = &sc->nodes[f->node];
  /* white space between tokens, a few bytes in a row at most */
  if (f->st <= A_AFTER && !(f->st == S_VALUE && nd->tight)) {
    if (is_ws(c)) return ++r->ws > DSI_JSONC_MAX_WS ? -1 : 0;
    r->ws = 0;
  }
  switch (f->st) {
  case S_VALUE: return value(sc, r, f, nd, c);
  case O_FIRST:
  case O_AFTER:
    if (c == '}') {
      if ((nd->required & ~f->seen) || f->count < (uint32_t)nd->min_props) return -1;
      r->depth--;
      return 0;
    }
    if (f->st == O_AFTER) {
      if (c != ',' || !more_members(nd, f)) return -1;
      f->st = O_NAME;
      return 0;
    }
    /* fall through */
  case O_NAME:
    if (c != '"' || !more_members(nd, f)) return -1;
    f->st = O_KEY, f->off = 0;
    f->cand = (nd->n_props == 64 ? ~0ull : (1ull << nd->n_props) - 1) & ~nd->dead;
    return 0;
  case O_KEY:
    if (c == '"' && !f->aux && !(f->flags & LOW_DUE)) return name_end(sc, f, nd);
    /* fall through */
  case O_KEY_ESC:
  case O_KEY_HEX: return name_byte(sc, f, nd, c);
  case O_COLON: {
    if (c != ':') return -1;
    int32_t node = f->cur == NO_PROP ? nd->addl : sc->props[nd->props + f->cur].node;
    if (f->cur != NO_PROP) f->seen |= 1ull << f->cur;
    f->count++;
    f->st = O_AFTER;
    return push(r, node);
  }
  case A_FIRST:
  case A_AFTER: {
    if (c == ']') {
      if (f->count < (uint32_t)nd->min_items) return -1;
      r->depth--;
      return 0;
    }
    if (f->st == A_AFTER && c != ',') return -1;
    int32_t node = item(sc, nd, f->count);
    if (node < 0) return -1;
    if (nd->unique) { /* a value not given yet must be left */
      int ne = sc->nodes[node].n_enum;
      if (!((ne == 64 ? ~0ull : (1ull << ne) - 1) & ~f->seen)) return -1;
    }
    f->count++;
    int first = f->st == A_FIRST;
    f->st = A_AFTER;
    if (push(r, node)) return -1;
    if (nd->unique) r->f[r->depth - 1].seen = f->seen; /* the item's enum leaves those out */
    return first ? AGAIN : 0; /* after '[' the byte begins the item */
  }
  case S_STR: {
    if (c < 0x80 && f->aux) return -1; /* a character's continuation due */
    if ((f->flags & LOW_DUE) && c != '\\') return -1; /* a low surrogate's escape due */
    if (c == '"') {
      if (f->count < (uint32_t)nd->min_len || (nd->pat >= 0 && !sc->pats[nd->pat].dfa.accept[f->cand])) return -1;
      r->depth--;
      return 0;
    }
    if (c < 0x20) return -1;
    int begins = c < 0x80 ? !(f->flags & LOW_DUE) : utf8_byte(f, c); /* a surrogate pair is one character */
    if (begins < 0) return -1;
    if (begins) { /* a character begins (an escape is one) */
      if (nd->max_len >= 0 && f->count >= (uint32_t)nd->max_len) return -1;
      f->count++;
    }
    if (c == '\\') {
      f->st = S_ESC;
      return nd->pat >= 0 && !pat_escape(&sc->pats[nd->pat], f, 0, 1) ? -1 : 0;
    }
    if (nd->pat >= 0) return pat_byte(&sc->pats[nd->pat], f, c);
    return 0;
  }
  case S_ESC:
    if (nd->pat >= 0) return pat_escape(&sc->pats[nd->pat], f, c, 0) ? (f->st = S_STR, 0) : -1;
    return esc_byte(f, c, S_STR, S_HEX);
  case S_HEX: return hex_byte(f, c, S_STR);
  case S_RAW: {
    const jpat *p = &sc->pats[nd->pat];
    uint32_t t = pat_next(p, (uint32_t)f->cand, c);
    if (!pat_ok(p, t, 0)) return -1;
    f->cand = t;
    if (p->closed[t]) r->depth--; /* a match nothing can go on from: the text is whole */
    return 0;
  }
  case S_LEAD: {
    const jbytes *l = &sc->lits[nd->lead];
    if (c != (uint8_t)l->s[f->off]) return -1;
    if (++f->off == l->n) f->node = (uint16_t)nd->then, f->st = S_VALUE, f->off = 0; /* then the value */
    return 0;
  }
  case S_LIT:
    if (c != (uint8_t)k_lits[f->cur][f->off]) return -1;
    if (!k_lits[f->cur][++f->off]) r->depth--;
    return 0;
  case S_ENUM: {
    uint64_t next = 0;
    int whole = -1;
    for (int i = 0; i < nd->n_enum; i++) {
      const jbytes *l = &sc->lits[sc->ids[nd->en + i]];
      if (!(f->cand >> i & 1)) continue;
      if (f->off < l->n && (uint8_t)l->s[f->off] == c) next |= 1ull << i;
      else if (f->off == l->n) whole = i; /* a number, ended by this byte */
    }
    if (next) {
      f->cand = next, f->off++;
      return enum_whole(sc, r, f, nd);
    }
    if (whole < 0) return -1;
    enum_done(sc, r, whole);
    return AGAIN;
  }
  case N_MINUS:
    if (nd->num >= 0) return num_step(sc, r, f, nd, c);
    if (c == '0') return f->st = N_ZERO, 0;
    return is_digit(c) ? (f->st = N_INT, 0) : -1;
  case N_DOT:
    if (nd->num >= 0) return num_step(sc, r, f, nd, c);
    return is_digit(c) ? (f->st = N_FRAC, 0) : -1;
  case N_E:
    if (c == '+' || c == '-') return f->st = N_ESIGN, 0;
    /* fall through */
  case N_ESIGN: return is_digit(c) ? (f->st = N_EXP, 0) : -1;
  default: /* N_ZERO, N_INT, N_FRAC, N_EXP: a number that may end here */
    if (nd->num >= 0) return num_step(sc, r, f, nd, c);
    if (is_digit(c) && f->st != N_ZERO) return 0;
    if (nd->types & T_NUM) {
      if (c == '.' && f->st <= N_INT) return f->st = N_DOT, 0;
      if ((c == 'e' || c == 'E') && f->st != N_EXP) return f->st = N_E, 0;
    }
    r->depth--; /* the number ended: the byte is what follows it */
    return r->depth ? AGAIN : -1;
  }
}

/* a reading at an anyOf's first byte becomes one per alternative (the
 * later ones copies at the end of j, stepped after it) */
static int choose(dsi_jsonc *j, int i) {
  const dsi_jschema *sc = j->sc;
  for (int guard = 0;; guard++) {
    dsi_jsonc_reading *r = &j->r[i];
    dsi_jsonc_frame *f = &r->f[r->depth - 1];
    const jnode *nd = &sc->nodes[f->node];
    if (!nd->n_alt) return 0;
    if (guard == 64) return -1; /* anyOf chained in a cycle: the forks go on, this reading ends */
    for (int a = 1; a < nd->n_alt && j->n < DSI_JSONC_MAX_READ; a++) {
      dsi_jsonc_reading *d = &j->r[j->n++];
      memcpy(d, r, live(r));
      d->f[d->depth - 1].node = (uint16_t)sc->ids[nd->alt + a];
    }
    f->node = (uint16_t)sc->ids[nd->alt];
  }
}

static int feed_byte(dsi_jsonc *j, uint8_t c) {
  int alive = 0;
  for (int i = 0; i < j->n; i++) {
    dsi_jsonc_reading *r = &j->r[i];
    int rc, low = r->depth;
    do {
      rc = -1;
      if (r->depth && r->f[r->depth - 1].st == S_VALUE && !is_ws(c) && choose(j, i)) break;
      rc = step(j->sc, r, c);
      low = DSI_MIN(low, r->depth);
    } while (rc == AGAIN);
    if (rc) continue;
    /* kept, unless the same as one kept before: readings part at the value
     * an anyOf forked them at and can meet again only once it is closed,
     * so only a reading that closed a value this byte is compared */
    int dup = 0;
    for (int k = 0; low < r->depth + 1 && k < alive && !dup; k++)
      dup = j->r[k].depth == r->depth && j->r[k].ws == r->ws && !memcmp(j->r[k].f, r->f, r->depth * sizeof *r->f);
    if (dup) continue;
    if (alive != i) memcpy(&j->r[alive], r, live(r));
    alive++;
  }
  /* the first readings, up to DSI_JSONC_MAX_OPEN values open among them
   * (each one can be completed on its own: fewer only narrow the choice),
   * which bounds what a token's test costs however the schema forks */
  int open = 0, keep = 0;
  while (keep < alive && (!keep || open + j->r[keep].depth <= DSI_JSONC_MAX_OPEN)) open += j->r[keep++].depth;
  j->n = keep;
  return alive ? 0 : -1;
}

/* Plain characters of a string, s[0..n) up to the first quote, backslash,
 * control or non-ASCII byte, for every reading at once when each is in a
 * string between characters; its length (0: none to take), a reading past
 * its maxLength ended. -1 when none is left. */
static long str_run(dsi_jsonc *j, const uint8_t *s, size_t n) {
  for (int i = 0; i < j->n; i++) {
    const dsi_jsonc_reading *r = &j->r[i];
    const dsi_jsonc_frame *f = r->depth ? &r->f[r->depth - 1] : NULL;
    if (!f || f->st != S_STR || f->aux || (f->flags & LOW_DUE)) return 0;
  }
  size_t run = 0;
  while (run < n && s[run] != '"' && s[run] != '\\' && s[run] >= 0x20 && s[run] < 0x80) run++;
  if (!run) return 0;
  int alive = 0;
  for (int i = 0; i < j->n; i++) {
    dsi_jsonc_reading *r = &j->r[i];
    dsi_jsonc_frame *f = &r->f[r->depth - 1];
    const jnode *nd = &j->sc->nodes[f->node];
    if (nd->max_len >= 0 && f->count + run > (uint32_t)nd->max_len) continue;
    if (nd->pat >= 0) { /* the run through the pattern: if its end can still match, so could each byte before */
      const jpat *p = &j->sc->pats[nd->pat];
      uint32_t st = (uint32_t)f->cand;
      for (size_t k = 0; k < run && st != DSI_RE_DEAD; k++) st = pat_next(p, st, s[k]);
      if (!pat_ok(p, st, f->count + (uint32_t)run)) continue;
      f->cand = st;
    }
    f->count += (uint32_t)run;
    if (alive != i) memcpy(&j->r[alive], r, live(r));
    alive++;
  }
  j->n = alive;
  return alive ? (long)run : -1;
}

/* a lone reading's byte that goes straight to step(): not where an anyOf
 * forks it */
static int direct(const dsi_jsonc *j, uint8_t c) {
  if (j->n != 1) return 0;
  const dsi_jsonc_reading *r = &j->r[0];
  if (!r->depth) return 1; /* refused */
  const dsi_jsonc_frame *f = &r->f[r->depth - 1];
  return f->st != S_VALUE || !j->sc->nodes[f->node].n_alt || is_ws(c);
}

int dsi_jsonc_feed(dsi_jsonc *j, const char *s, size_t n) {
  const uint8_t *u = (const uint8_t *)s;
  for (size_t i = 0; i < n;) {
    long run = str_run(j, u + i, n - i);
    if (run < 0) return -1;
    if (run) {
      i += (size_t)run;
    } else if (direct(j, u[i])) {
      int rc = step(j->sc, &j->r[0], u[i]);
      if (rc < 0) return -1;
      i += rc == 0; /* AGAIN: the byte once more, to the value below */
    } else {
      if (feed_byte(j, u[i])) return -1;
      i++;
    }
  }
  return 0;
}

int dsi_jsonc_vocab_init(dsi_jsonc_vocab *v, const dsi_tok *tok, int n_ids) {
  *v = (dsi_jsonc_vocab){.tok = tok, .n_ids = n_ids};
  if (!(v->ids = malloc((size_t)(n_ids > 0 ? n_ids : 1) * sizeof(int32_t)))) return -1;
  /* counted by first byte, then placed: ids ascending within a byte */
  int32_t count[256] = {0};
  for (int32_t id = 0; id < n_ids; id++) {
    size_t n = 0;
    const char *b = dsi_tok_is_added(tok, id) ? NULL : dsi_tok_id_bytes(tok, id, &n);
    if (b && n) count[(uint8_t)b[0]]++;
  }
  for (int c = 0; c < 256; c++) v->start[c + 1] = v->start[c] + count[c];
  int32_t at[256];
  memcpy(at, v->start, sizeof at);
  for (int32_t id = 0; id < n_ids; id++) {
    size_t n = 0;
    const char *b = dsi_tok_is_added(tok, id) ? NULL : dsi_tok_id_bytes(tok, id, &n);
    if (b && n) v->ids[at[(uint8_t)b[0]]++] = id;
  }
  return 0;
}

void dsi_jsonc_vocab_free(dsi_jsonc_vocab *v) {
  free(v->ids);
  v->ids = NULL;
}

/* j into t for a test of n bytes: a byte closes at most two values (a
 * number ended by the ']' after it), so only each reading's top 2n + 1
 * frames are copied; those below stay what t held, are never reached,
 * and at worst keep feed_byte from merging two readings the bytes leave
 * alike (t is thrown away after the test). Deep readings are copied in
 * full only for long tokens. */
static void copy_top(dsi_jsonc *t, const dsi_jsonc *j, size_t n) {
  copy_frames(t, j, n < DSI_JSONC_MAX_DEPTH ? (int)(2 * n + 1) : DSI_JSONC_MAX_DEPTH);
}

int dsi_jsonc_allowed(const dsi_jsonc *j, const dsi_jsonc_vocab *v, uint8_t *ok, dsi_jsonc *t) {
  memset(ok, 0, (size_t)v->n_ids);
  int any = 0;
  for (int c = 0; c < 256; c++) {
    if (v->start[c] == v->start[c + 1]) continue;
    /* a byte refused first refuses every token that starts with it */
    char b0 = (char)c;
    copy_top(t, j, 1);
    if (dsi_jsonc_feed(t, &b0, 1)) continue;
    for (int32_t k = v->start[c]; k < v->start[c + 1]; k++) {
      int32_t id = v->ids[k];
      size_t n = 0;
      const char *b = dsi_tok_id_bytes(v->tok, id, &n);
      if (n > 1) {
        copy_top(t, j, n);
        if (dsi_jsonc_feed(t, b, n)) continue;
      }
      ok[id] = 1;
      any = 1;
    }
  }
  return any;
}
