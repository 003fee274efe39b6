/* tokenizer: loading. Reads a Hugging Face tokenizer.json (BPE model,
 * added tokens, normalizer, pre-tokenizer, decoder, post-processor) and
 * tokenizer_config.json into a dsi_tok: one string pool, the vocab and merge
 * hash maps, the added-token tries and the compiled PCRE2 patterns. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

/* ---- string pool and hash maps ---- */

static int pool_add(dsi_tok *t, const void *s, size_t n, tok_span *out) {
  if (n >= UINT32_MAX / 2 || t->pool_len + n + 1 >= UINT32_MAX) return -1;
  if (t->pool_len + n + 1 > t->pool_cap) {
    size_t c = t->pool_cap ? t->pool_cap : 1 << 20;
    while (c < t->pool_len + n + 1) c *= 2;
    char *p = realloc(t->pool, c);
    if (!p) return -1;
    t->pool = p;
    t->pool_cap = c;
  }
  if (n) memcpy(t->pool + t->pool_len, s, n);
  t->pool[t->pool_len + n] = 0; /* every pooled string is also NUL-terminated */
  out->off = (uint32_t)t->pool_len;
  out->len = (uint32_t)n;
  t->pool_len += n + 1;
  return 0;
}

uint64_t dsi_tok_hash(const void *p, size_t n) {
  const uint8_t *s = p;
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)n * 0x100000001B3ULL);
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    h ^= h >> 29;
    s += 8;
    n -= 8;
  }
  uint64_t w = 0;
  if (n) memcpy(&w, s, n);
  return tok_mix64((h ^ w) * 0xc4ceb9fe1a85ec53ULL);
}

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
}

static int map_init(tok_strmap *m, size_t count, const tok_span *keys) {
  size_t cap = pow2_at_least(count * 2 + 1);
  m->slots = malloc(cap * sizeof *m->slots);
  if (!m->slots) return -1;
  for (size_t i = 0; i < cap; i++) m->slots[i].id = -1;
  m->mask = cap - 1;
  m->keys = keys;
  return 0;
}

int32_t dsi_tok_map_find(const dsi_tok *tok, const tok_strmap *m, const void *s, size_t n) {
  if (!m->slots) return -1;
  uint64_t h64 = dsi_tok_hash(s, n);
  uint32_t h = (uint32_t)(h64 >> 32);
  for (size_t i = (size_t)h64 & m->mask;; i = (i + 1) & m->mask) {
    const tok_slot *sl = &m->slots[i];
    if (sl->id < 0) return -1;
    if (sl->hash == h) {
      tok_span k = m->keys[sl->id];
      if (k.len == n && !memcmp(tok->pool + k.off, s, n)) return sl->id;
    }
  }
}

/* Insert id under keys[id]; an equal key already there is replaced (the
 * later entry wins, as in HF's maps). The map never fills: sized at init. */
static void map_put(const dsi_tok *tok, tok_strmap *m, int32_t id) {
  tok_span k = m->keys[id];
  const char *s = tok->pool + k.off;
  uint64_t h64 = dsi_tok_hash(s, k.len);
  uint32_t h = (uint32_t)(h64 >> 32);
  for (size_t i = (size_t)h64 & m->mask;; i = (i + 1) & m->mask) {
    tok_slot *sl = &m->slots[i];
    if (sl->id < 0) {
      sl->id = id;
      sl->hash = h;
      return;
    }
    if (sl->hash == h) {
      tok_span o = m->keys[sl->id];
      if (o.len == k.len && !memcmp(tok->pool + o.off, s, k.len)) {
        sl->id = id;
        return;
      }
    }
  }
}

static void merge_put(tok_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  for (size_t i = (size_t)tok_mix64(key) & m->mask;; i = (i + 1) & m->mask) {
    tok_merge *s = &m->slots[i];
    if (s->key == UINT64_MAX || s->key == key) { /* a repeated pair keeps its last rank, as HF */
      s->key = key;
      s->rank = rank;
      s->id = id;
      return;
    }
  }
}

/* ---- added-token trie ---- */

static int trie_node(tok_trie *tr, uint8_t byte) {
  if (tr->n == tr->cap) {
    size_t c = tr->cap ? tr->cap * 2 : 256;
    tok_trie_node *p = realloc(tr->node, c * sizeof *p);
    if (!p) return -1;
    tr->node = p;
    tr->cap = c;
  }
  tr->node[tr->n] = (tok_trie_node){.child = -1, .sibling = -1, .added = -1, .byte = byte};
  return (int)tr->n++;
}

static int trie_add(tok_trie *tr, const uint8_t *s, size_t n, int32_t added) {
  if (!tr->n && trie_node(tr, 0) < 0) return -1;
  int32_t cur = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t c = tr->node[cur].child;
    while (c >= 0 && tr->node[c].byte != s[i]) c = tr->node[c].sibling;
    if (c < 0) {
      c = trie_node(tr, s[i]);
      if (c < 0) return -1;
      tr->node[c].sibling = tr->node[cur].child;
      tr->node[cur].child = c;
    }
    cur = c;
  }
  tr->node[cur].added = added;
  if (!tr->first[s[0]]) {
    tr->first[s[0]] = 1;
    tr->n_first++;
    tr->only_first = s[0];
  }
  return 0;
}

/* ---- regexes: Oniguruma (what HF runs) -> PCRE2 ----
 * Both take \p{..}, possessive and atomic groups alike; they differ on a
 * few escapes, rewritten here: \s, \S are Unicode White_Space in Oniguruma
 * (PCRE2's UCP \s also takes U+180E); \h is a hex digit there; \w is
 * letters, marks, decimal digits and connectors. */

static char *onig_to_pcre2(const char *src, size_t n, size_t *out_len) {
  char *b = NULL;
  size_t len = 0, cap = 0;
  int in_class = 0, rc = 0;
#define ADD(s) (rc |= dsi_tok_buf_append(&b, &len, &cap, (s), strlen(s)))
  for (size_t i = 0; i < n && !rc; i++) {
    char c = src[i];
    if (c == '\\' && i + 1 < n) {
      char e = src[++i];
      const char *w = "\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";
      switch (e) {
      case 's': ADD("\\p{White_Space}"); break;
      case 'S': ADD("\\P{White_Space}"); break;
      case 'h': ADD(in_class ? "0-9a-fA-F" : "[0-9a-fA-F]"); break;
      case 'H':
        if (in_class) ADD("\\H"); /* no in-class spelling; rare */
        else ADD("[^0-9a-fA-F]");
        break;
      case 'w':
        if (!in_class) ADD("[");
        ADD(w);
        if (!in_class) ADD("]");
        break;
      case 'W':
        if (in_class) ADD("\\W");
        else { ADD("[^"); ADD(w); ADD("]"); }
        break;
      default: {
        char two[2] = {'\\', e};
        rc |= dsi_tok_buf_append(&b, &len, &cap, two, 2);
      }
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = 1;
      rc |= dsi_tok_buf_append(&b, &len, &cap, &c, 1);
      if (i + 1 < n && src[i + 1] == '^') rc |= dsi_tok_buf_append(&b, &len, &cap, &src[++i], 1);
      if (i + 1 < n && src[i + 1] == ']') rc |= dsi_tok_buf_append(&b, &len, &cap, &src[++i], 1); /* literal ] */
      continue;
    }
    if (in_class && c == '[' && i + 1 < n && src[i + 1] == ':') { /* [:alpha:] */
      const char *end = strstr(src + i, ":]");
      size_t k = end && (size_t)(end - src) < n ? (size_t)(end - (src + i)) + 2 : 1;
      rc |= dsi_tok_buf_append(&b, &len, &cap, src + i, k);
      i += k - 1;
      continue;
    }
    if (in_class && c == ']') in_class = 0;
    rc |= dsi_tok_buf_append(&b, &len, &cap, &c, 1);
  }
#undef ADD
  if (rc || !b) rc |= dsi_tok_buf_append(&b, &len, &cap, "", 0);
  if (rc) {
    free(b);
    return NULL;
  }
  *out_len = len;
  return b;
}

static int compile_re(pcre2_code **re, int *jit, int no_jit, const char *pat, size_t n, int literal, const char *what,
                      dsi_err *err) {
  size_t plen = n;
  char *p = literal ? NULL : onig_to_pcre2(pat, n, &plen);
  if (!literal && !p) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", what);
  int ec;
  PCRE2_SIZE eo;
  uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP); /* LITERAL refuses UCP */
  *re = pcre2_compile((PCRE2_SPTR)(literal ? pat : p), plen, opts, &ec, &eo, NULL);
  free(p);
  if (!*re) {
    char msg[256];
    pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg);
    return dsi_errf(err, DSI_E_FORMAT, "%s: pattern does not compile at offset %zu: %s", what, (size_t)eo, msg);
  }
  /* JIT when it compiles, else the interpreter; DSI_TOK_NO_JIT forces the
   * interpreter (tests run the fallback that way) */
  *jit = !no_jit && pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE) == 0;
  return DSI_OK;
}

/* ---- JSON helpers ---- */

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
static int jbool(const cJSON *o, const char *k, int dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}
static int jid(const cJSON *v, int32_t *out) {
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (1 << 24) ||
      v->valuedouble != (double)(int32_t)v->valuedouble)
    return -1;
  *out = (int32_t)v->valuedouble;
  return 0;
}
static const char *jtype(const cJSON *o) {
  const char *s = jstr(o, "type");
  return s ? s : "(no type)";
}

/* ---- normalizer ---- */

static int parse_normalizer(dsi_tok *t, const cJSON *j, dsi_err *err) {
  if (!j || cJSON_IsNull(j)) return DSI_OK;
  const char *ty = jtype(j);
  tok_norm nm = {0};
  if (!strcmp(ty, "Sequence")) {
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "normalizers")) {
      int rc = parse_normalizer(t, it, err);
      if (rc) return rc;
    }
    return DSI_OK;
  } else if (!strcmp(ty, "Replace")) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
    const char *s = jstr(pat, "String"), *content = jstr(j, "content");
    if (!s || !content)
      return dsi_errf(err, DSI_E_UNSUPPORTED, "normalizer Replace: only a {\"String\": ...} pattern with a content is supported");
    if (!*s) return dsi_errf(err, DSI_E_UNSUPPORTED, "normalizer Replace: empty pattern");
    nm.kind = TOK_NORM_REPLACE;
    if (pool_add(t, s, strlen(s), &nm.a) || pool_add(t, content, strlen(content), &nm.b)) goto oom;
  } else if (!strcmp(ty, "Prepend")) {
    const char *s = jstr(j, "prepend");
    if (!s) return dsi_errf(err, DSI_E_FORMAT, "normalizer Prepend: no \"prepend\" string");
    nm.kind = TOK_NORM_PREPEND;
    if (pool_add(t, s, strlen(s), &nm.a)) goto oom;
  } else if (!strcmp(ty, "Strip")) {
    nm.kind = TOK_NORM_STRIP;
    nm.left = jbool(j, "strip_left", 1);
    nm.right = jbool(j, "strip_right", 1);
  } else {
    return dsi_errf(err, DSI_E_UNSUPPORTED,
                    "normalizer '%s' is not supported (supported: null, Sequence, Replace with a String "
                    "pattern, Prepend, Strip)", ty);
  }
  tok_norm *p = realloc(t->norm, (t->n_norm + 1) * sizeof *p);
  if (!p) goto oom;
  t->norm = p;
  t->norm[t->n_norm++] = nm;
  return DSI_OK;
oom:
  return dsi_errf(err, DSI_E_NOMEM, "normalizer: out of memory");
}

/* ---- pre-tokenizer ---- */

static const char k_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_pre(dsi_tok *t, tok_pre *p, dsi_err *err) {
  tok_pre *n = realloc(t->pre, (t->n_pre + 1) * sizeof *n);
  if (!n) {
    if (p->re) pcre2_code_free(p->re);
    return dsi_errf(err, DSI_E_NOMEM, "pre_tokenizer: out of memory");
  }
  t->pre = n;
  t->pre[t->n_pre++] = *p;
  return DSI_OK;
}

static int parse_pre(dsi_tok *t, const cJSON *j, dsi_err *err) {
  if (!j || cJSON_IsNull(j)) return DSI_OK;
  const char *ty = jtype(j);
  char what[64];
  snprintf(what, sizeof what, "pre_tokenizer %zu (%s)", t->n_pre, ty);
  if (!strcmp(ty, "Sequence")) {
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "pretokenizers")) {
      int rc = parse_pre(t, it, err);
      if (rc) return rc;
    }
    return DSI_OK;
  }
  tok_pre p = {0};
  if (!strcmp(ty, "Split")) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
    const char *rx = jstr(pat, "Regex"), *lit = jstr(pat, "String");
    const char *beh = jstr(j, "behavior");
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    p.kind = TOK_PRE_SPLIT;
    p.behavior = -1;
    for (int i = 0; beh && i < 5; i++)
      if (!strcmp(beh, names[i])) p.behavior = i;
    if (p.behavior < 0)
      return dsi_errf(err, DSI_E_FORMAT, "%s: behavior '%s' is not one of Removed, Isolated, MergedWithPrevious, "
                      "MergedWithNext, Contiguous", what, beh ? beh : "(none)");
    if (!rx && !lit) return dsi_errf(err, DSI_E_FORMAT, "%s: pattern is neither {\"Regex\": ..} nor {\"String\": ..}", what);
    p.invert = jbool(j, "invert", 0);
    const char *s = rx ? rx : lit;
    int rc = compile_re(&p.re, &p.jit, t->no_jit, s, strlen(s), !rx, what, err);
    if (rc) return rc;
  } else if (!strcmp(ty, "ByteLevel")) {
    p.kind = TOK_PRE_BYTELEVEL;
    p.add_prefix_space = jbool(j, "add_prefix_space", 1);
    p.behavior = TOK_SPLIT_ISOLATED;
    if (jbool(j, "use_regex", 1)) {
      int rc = compile_re(&p.re, &p.jit, t->no_jit, k_gpt2_pattern, strlen(k_gpt2_pattern), 0, what, err);
      if (rc) return rc;
    }
  } else {
    return dsi_errf(err, DSI_E_UNSUPPORTED,
                    "pre_tokenizer '%s' is not supported (supported: null, Sequence, Split, ByteLevel)", ty);
  }
  return add_pre(t, &p, err);
}

/* ---- decoder and post-processor ---- */

static int parse_decoder(dsi_tok *t, const cJSON *j, dsi_err *err) {
  if (!j || cJSON_IsNull(j)) {
    t->decoder = TOK_DEC_NONE;
    return DSI_OK;
  }
  const char *ty = jtype(j);
  if (!strcmp(ty, "ByteLevel")) {
    t->decoder = TOK_DEC_BYTELEVEL;
    return DSI_OK;
  }
  return dsi_errf(err, DSI_E_UNSUPPORTED, "decoder '%s' is not supported (supported: null, ByteLevel)", ty);
}

static int32_t token_to_id(const dsi_tok *t, const tok_strmap *added_map, const char *s, size_t n);

static void add_fix(int32_t *ids, int *n, int32_t id) {
  if (*n < 4 && id >= 0) ids[(*n)++] = id;
}

static void parse_post(dsi_tok *t, const tok_strmap *added_map, const cJSON *j) {
  if (!j || cJSON_IsNull(j)) return;
  const char *ty = jtype(j);
  if (!strcmp(ty, "Sequence")) {
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "processors")) parse_post(t, added_map, it);
  } else if (!strcmp(ty, "TemplateProcessing")) {
    const cJSON *it, *special = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    int seen_seq = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "single")) {
      const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
      if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) {
        seen_seq = 1;
        continue;
      }
      const char *name = jstr(st, "id");
      if (!name) continue;
      const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(special, name), "ids"), *v;
      cJSON_ArrayForEach(v, ids) {
        int32_t id;
        if (!jid(v, &id)) {
          if (seen_seq) add_fix(t->suffix_ids, &t->n_suffix, id);
          else add_fix(t->prefix_ids, &t->n_prefix, id);
        }
      }
    }
  } else if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
    int32_t id;
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(j, "cls"), *sep = cJSON_GetObjectItemCaseSensitive(j, "sep");
    if (!jid(cJSON_GetArrayItem(cls, 1), &id)) add_fix(t->prefix_ids, &t->n_prefix, id);
    if (!jid(cJSON_GetArrayItem(sep, 1), &id)) add_fix(t->suffix_ids, &t->n_suffix, id);
  } else if (strcmp(ty, "ByteLevel")) {
    dsi_log(DSI_LOG_WARN, "tokenizer: post_processor '%s' ignored (DSI_TOK_ADD_SPECIAL adds nothing for it)", ty);
  }
}

/* ---- the BPE model ---- */

/* ids up to n - 1, the new ones empty; the room grows by half again at
 * least (added tokens come one id at a time: by one element each, the
 * arrays were copied ~800 times, seconds under ASan) */
static int grow_ids(dsi_tok *t, int32_t n) {
  if (n <= t->n_ids) return 0;
  if (n > t->ids_cap) {
    int32_t cap = t->ids_cap > INT32_MAX / 3 * 2 ? INT32_MAX : DSI_MAX(n, t->ids_cap + t->ids_cap / 2);
    tok_span **arrs[] = {&t->text, &t->shown, &t->bytes, &t->key};
    for (size_t k = 0; k < DSI_ARRAY_LEN(arrs); k++) {
      tok_span *a = realloc(*arrs[k], (size_t)cap * sizeof *a);
      if (!a) return -1;
      *arrs[k] = a;
    }
    uint8_t *f = realloc(t->flags, (size_t)cap);
    if (!f) return -1;
    t->flags = f;
    t->ids_cap = cap;
  }
  tok_span *arrs[] = {t->text, t->shown, t->bytes, t->key};
  for (size_t k = 0; k < DSI_ARRAY_LEN(arrs); k++)
    for (int32_t i = t->n_ids; i < n; i++) arrs[k][i] = (tok_span){TOK_NONE, 0};
  memset(t->flags + t->n_ids, 0, (size_t)(n - t->n_ids));
  t->n_ids = n;
  t->text_map.keys = t->text; /* the maps key into these arrays */
  t->key_map.keys = t->key;
  return 0;
}

/* The bytes a ByteLevel-mapped string stands for; -1 if a char is outside
 * the map. out must hold n bytes. */
static long bytelevel_decode(const char *s, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    i += tok_utf8_decode((const uint8_t *)s + i, n - i, &cp);
    int b = dsi_bytelevel_byte(cp);
    if (b < 0) return -1;
    out[k++] = (char)b;
  }
  return (long)k;
}

static int parse_vocab(dsi_tok *t, const cJSON *vocab, dsi_err *err) {
  if (!cJSON_IsObject(vocab)) return dsi_errf(err, DSI_E_FORMAT, "model.vocab: not an object");
  int32_t max_id = -1, count = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, vocab) {
    int32_t id;
    if (jid(it, &id)) return dsi_errf(err, DSI_E_FORMAT, "model.vocab[\"%s\"]: id is not an integer in [0, 2^24]", it->string);
    if (id > max_id) max_id = id;
    count++;
  }
  if (grow_ids(t, max_id + 1)) goto oom;
  t->n_vocab = count;
  cJSON_ArrayForEach(it, vocab) {
    int32_t id = (int32_t)it->valuedouble;
    if (pool_add(t, it->string, strlen(it->string), &t->text[id])) goto oom;
    t->flags[id] |= TOK_F_MODEL;
  }
  return DSI_OK;
oom:
  return dsi_errf(err, DSI_E_NOMEM, "model.vocab: out of memory");
}

static int parse_merges(dsi_tok *t, const cJSON *merges, dsi_err *err) {
  if (!cJSON_IsArray(merges)) return dsi_errf(err, DSI_E_FORMAT, "model.merges: not an array");
  int n = cJSON_GetArraySize(merges);
  size_t cap = pow2_at_least((size_t)n * 2 + 1);
  t->merges.slots = malloc(cap * sizeof *t->merges.slots);
  if (!t->merges.slots) return dsi_errf(err, DSI_E_NOMEM, "model.merges: out of memory");
  for (size_t i = 0; i < cap; i++) t->merges.slots[i].key = UINT64_MAX;
  t->merges.mask = cap - 1;
  char *buf = NULL;
  size_t bcap = 0;
  uint32_t rank = 0;
  int idx = 0, rc = DSI_OK;
  const cJSON *it;
  cJSON_ArrayForEach(it, merges) {
    const char *a, *b;
    size_t la, lb;
    if (cJSON_IsString(it)) { /* "a b" (tokenizers < 0.20) */
      const char *s = it->valuestring;
      if (!strncmp(s, "#version", 8)) { idx++; continue; }
      const char *sp = strchr(s, ' ');
      if (!sp || strchr(sp + 1, ' ')) {
        rc = dsi_errf(err, DSI_E_FORMAT, "model.merges[%d] \"%s\": expected two tokens separated by one space", idx, s);
        break;
      }
      a = s, la = (size_t)(sp - s), b = sp + 1, lb = strlen(sp + 1);
    } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(it, 1))) { /* ["a", "b"] */
      a = cJSON_GetArrayItem(it, 0)->valuestring, la = strlen(a);
      b = cJSON_GetArrayItem(it, 1)->valuestring, lb = strlen(b);
    } else {
      rc = dsi_errf(err, DSI_E_FORMAT, "model.merges[%d]: neither \"a b\" nor [\"a\", \"b\"]", idx);
      break;
    }
    int32_t ia = dsi_tok_map_find(t, &t->text_map, a, la), ib = dsi_tok_map_find(t, &t->text_map, b, lb);
    if (ia < 0 || ib < 0) {
      rc = dsi_errf(err, DSI_E_FORMAT, "model.merges[%d]: token \"%.*s\" is not in model.vocab", idx,
                    (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
      break;
    }
    if (la + lb > bcap) {
      bcap = (la + lb) * 2;
      char *nb = realloc(buf, bcap);
      if (!nb) { rc = dsi_errf(err, DSI_E_NOMEM, "model.merges: out of memory"); break; }
      buf = nb;
    }
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    int32_t im = dsi_tok_map_find(t, &t->text_map, buf, la + lb);
    if (im < 0) {
      rc = dsi_errf(err, DSI_E_FORMAT, "model.merges[%d]: merged token \"%.*s\" is not in model.vocab", idx,
                    (int)(la + lb), buf);
      break;
    }
    merge_put(&t->merges, ia, ib, rank++, im);
    idx++;
  }
  free(buf);
  t->n_merges = (int32_t)rank;
  return rc;
}

static int parse_model(dsi_tok *t, const cJSON *m, dsi_err *err) {
  if (!cJSON_IsObject(m)) return dsi_errf(err, DSI_E_FORMAT, "no \"model\" object");
  const char *ty = jstr(m, "type");
  if (ty && strcmp(ty, "BPE"))
    return dsi_errf(err, DSI_E_UNSUPPORTED, "model type '%s' is not supported (only BPE)", ty);
  const char *pre = jstr(m, "continuing_subword_prefix"), *suf = jstr(m, "end_of_word_suffix");
  if ((pre && *pre) || (suf && *suf))
    return dsi_errf(err, DSI_E_UNSUPPORTED, "model: continuing_subword_prefix / end_of_word_suffix are not supported");
  const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
  if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
    dsi_log(DSI_LOG_WARN, "tokenizer: BPE dropout %g ignored (encoding is deterministic)", dropout->valuedouble);
  t->ignore_merges = jbool(m, "ignore_merges", 0);
  t->byte_fallback = jbool(m, "byte_fallback", 0);
  t->fuse_unk = jbool(m, "fuse_unk", 0);
  int rc = parse_vocab(t, cJSON_GetObjectItemCaseSensitive(m, "vocab"), err);
  if (rc) return rc;
  if (map_init(&t->text_map, (size_t)t->n_vocab, t->text)) return dsi_errf(err, DSI_E_NOMEM, "model.vocab: out of memory");
  for (int32_t id = 0; id < t->n_ids; id++)
    if (t->flags[id] & TOK_F_MODEL) map_put(t, &t->text_map, id);
  rc = parse_merges(t, cJSON_GetObjectItemCaseSensitive(m, "merges"), err);
  if (rc) return rc;
  const char *unk = jstr(m, "unk_token");
  t->unk_id = unk ? dsi_tok_map_find(t, &t->text_map, unk, strlen(unk)) : -1;
  if (unk && t->unk_id < 0) dsi_log(DSI_LOG_WARN, "tokenizer: unk_token \"%s\" is not in the vocab", unk);
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    t->fallback_id[b] = t->byte_fallback ? dsi_tok_map_find(t, &t->text_map, name, 6) : -1;
    char ch[4];
    size_t k = tok_utf8_encode(dsi_bytelevel_char((uint8_t)b), ch);
    t->byte_id[b] = t->byte_level ? dsi_tok_map_find(t, &t->text_map, ch, k) : -1;
  }
  return DSI_OK;
}

/* ---- added tokens ---- */

static int32_t token_to_id(const dsi_tok *t, const tok_strmap *added_map, const char *s, size_t n) {
  int32_t a = dsi_tok_map_find(t, added_map, s, n);
  if (a >= 0) return t->added[a].id;
  return dsi_tok_map_find(t, &t->text_map, s, n);
}

/* HF numbers added tokens itself: an entry whose content is already a
 * token keeps that id, any other takes the next free one after the vocab
 * (the "id" field is only checked). Entries with equal content share one. */
static int parse_added(dsi_tok *t, const cJSON *arr, tok_strmap *added_map, dsi_err *err) {
  int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
  t->added = calloc(n ? (size_t)n : 1, sizeof *t->added);
  tok_span *contents = calloc(n ? (size_t)n : 1, sizeof *contents);
  if (!t->added || !contents || map_init(added_map, (size_t)n, contents)) {
    free(contents);
    return dsi_errf(err, DSI_E_NOMEM, "added_tokens: out of memory");
  }
  int32_t next_id = t->n_vocab;
  const cJSON *it;
  int idx = -1;
  cJSON_ArrayForEach(it, arr) {
    idx++;
    const char *content = jstr(it, "content");
    if (!content) return dsi_errf(err, DSI_E_FORMAT, "added_tokens[%d]: no \"content\" string", idx);
    size_t len = strlen(content);
    if (!len) continue;
    tok_added a = {0};
    a.special = (uint8_t)jbool(it, "special", 0);
    a.single_word = (uint8_t)jbool(it, "single_word", 0);
    a.lstrip = (uint8_t)jbool(it, "lstrip", 0);
    a.rstrip = (uint8_t)jbool(it, "rstrip", 0);
    a.normalized = (uint8_t)jbool(it, "normalized", !a.special);
    int32_t prev = dsi_tok_map_find(t, added_map, content, len);
    int32_t id = prev >= 0 ? t->added[prev].id : dsi_tok_map_find(t, &t->text_map, content, len);
    if (id < 0) id = next_id++;
    int32_t json_id;
    if (!jid(cJSON_GetObjectItemCaseSensitive(it, "id"), &json_id) && json_id != id)
      dsi_log(DSI_LOG_WARN, "tokenizer: added token \"%s\" has id %d in the file but %d as Hugging Face numbers it",
              content, json_id, id);
    if (pool_add(t, content, len, &a.content)) goto oom;
    a.match = a.content;
    if (a.normalized && t->n_norm) { /* matched in its normalized form */
      char *nb = NULL;
      size_t nl = 0, nc = 0;
      if (dsi_tok_normalize(t, content, len, &nb, &nl, &nc) || pool_add(t, nb, nl, &a.match)) {
        free(nb);
        goto oom;
      }
      free(nb);
    }
    a.id = id;
    size_t slot = prev >= 0 ? (size_t)prev : t->n_added++;
    t->added[slot] = a;
    contents[slot] = a.content;
    if (prev < 0) map_put(t, added_map, (int32_t)slot);
    if (grow_ids(t, id + 1)) goto oom;
  }
  /* keep contents alive as the map's keys */
  added_map->keys = contents;
  return DSI_OK;
oom:
  return dsi_errf(err, DSI_E_NOMEM, "added_tokens: out of memory");
}

/* ---- tokenizer_config.json ---- */

static const char *config_token(const cJSON *cfg, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (cJSON_IsString(v)) return v->valuestring;
  return jstr(v, "content"); /* {"__type": "AddedToken", "content": ...} */
}

static int parse_config(dsi_tok *t, const tok_strmap *added_map, const char *path, dsi_err *err) {
  char *buf;
  size_t len;
  int rc = dsi_read_file(path, &buf, &len, err);
  if (rc) return rc;
  dsi_json_oom_clear();
  cJSON *cfg = cJSON_ParseWithLength(buf, len);
  free(buf);
  if (!cfg && dsi_json_oom()) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
  if (!cfg) return dsi_errf(err, DSI_E_FORMAT, "%s: not valid JSON", path);
  if (!cJSON_IsObject(cfg)) {
    cJSON_Delete(cfg);
    return dsi_errf(err, DSI_E_FORMAT, "%s: not a JSON object", path);
  }
  const char *bos = config_token(cfg, "bos_token"), *eos = config_token(cfg, "eos_token");
  if (bos) {
    t->bos_id = token_to_id(t, added_map, bos, strlen(bos));
    if (t->bos_id < 0) dsi_log(DSI_LOG_WARN, "%s: bos_token \"%s\" is not a token", path, bos);
  }
  if (eos) {
    t->eos_id = token_to_id(t, added_map, eos, strlen(eos));
    if (t->eos_id < 0) dsi_log(DSI_LOG_WARN, "%s: eos_token \"%s\" is not a token", path, eos);
  }
  /* transformers rebuilds the post-processor from these (LlamaTokenizerFast) */
  const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
  const cJSON *ae = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
  if (cJSON_IsBool(ab) || cJSON_IsBool(ae)) {
    t->n_prefix = t->n_suffix = 0;
    if (cJSON_IsTrue(ab)) add_fix(t->prefix_ids, &t->n_prefix, t->bos_id);
    if (cJSON_IsTrue(ae)) add_fix(t->suffix_ids, &t->n_suffix, t->eos_id);
  }
  cJSON_Delete(cfg);
  return DSI_OK;
}

/* ---- open / free ---- */

/* Pool the bytes the ByteLevel-mapped string src stands for into *out:
 * 0 done, 1 a char is outside the map (*out untouched), -1 out of memory. */
static int pool_add_bytelevel(dsi_tok *t, tok_span src, char **tmp, size_t *tcap, tok_span *out) {
  if (src.len > *tcap) {
    char *p = realloc(*tmp, src.len * 2);
    if (!p) return -1;
    *tmp = p;
    *tcap = src.len * 2;
  }
  memcpy(*tmp, t->pool + src.off, src.len); /* the pool may move in pool_add */
  long k = bytelevel_decode(*tmp, src.len, *tmp);
  if (k < 0) return 1;
  return pool_add(t, *tmp, (size_t)k, out) ? -1 : 0;
}

static int build_tables(dsi_tok *t, dsi_err *err) {
  /* BPE keys of model tokens (from the vocab string); decoder bytes of every
   * id (from the shown string: an added token's, when it is one) */
  char *tmp = NULL;
  size_t tcap = 0;
  for (int32_t id = 0; id < t->n_ids; id++) {
    tok_span src = t->shown[id];
    if (src.off == TOK_NONE) continue;
    if (t->flags[id] & TOK_F_MODEL) {
      if (!t->byte_level) t->key[id] = t->text[id];
      else if (pool_add_bytelevel(t, t->text[id], &tmp, &tcap, &t->key[id]) < 0) goto oom;
    }
    t->bytes[id] = src; /* no map, or a char outside it: the text's own bytes, as HF */
    if (t->decoder != TOK_DEC_BYTELEVEL) continue;
    if (t->byte_level && t->key[id].off != TOK_NONE && src.off == t->text[id].off) t->bytes[id] = t->key[id];
    else if (pool_add_bytelevel(t, src, &tmp, &tcap, &t->bytes[id]) < 0) goto oom;
  }
  free(tmp);
  tmp = NULL;
  if (map_init(&t->key_map, (size_t)t->n_vocab, t->key)) goto oom;
  for (int32_t id = 0; id < t->n_ids; id++)
    if (t->key[id].off != TOK_NONE) map_put(t, &t->key_map, id);
  return DSI_OK;
oom:
  free(tmp);
  return dsi_errf(err, DSI_E_NOMEM, "tokenizer: out of memory building tables");
}

static int build_added(dsi_tok *t, dsi_err *err) {
  int32_t n_special = 0;
  for (size_t i = 0; i < t->n_added; i++) {
    tok_added *a = &t->added[i];
    n_special += a->special;
    tok_trie *tr = a->normalized ? &t->trie_norm : &t->trie_raw;
    if (trie_add(tr, (const uint8_t *)t->pool + a->match.off, a->match.len, (int32_t)i))
      return dsi_errf(err, DSI_E_NOMEM, "added_tokens: out of memory");
  }
  int ec;
  PCRE2_SIZE eo;
  const char *w = "[\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";
  t->re_word = pcre2_compile((PCRE2_SPTR)w, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
  if (!t->re_word) return dsi_errf(err, DSI_E_UNSUPPORTED, "this PCRE2 lacks Unicode properties");
  return n_special;
}

static void describe(dsi_tok *t, int n_special) {
  char pre[160] = "";
  size_t k = 0;
  for (size_t i = 0; i < t->n_pre && k < sizeof pre - 16; i++)
    k += (size_t)snprintf(pre + k, sizeof pre - k, "%s%s", i ? "," : "",
                          t->pre[i].kind == TOK_PRE_SPLIT ? "Split" : "ByteLevel");
  snprintf(t->desc, sizeof t->desc,
           "BPE vocab=%d merges=%d added=%zu (special %d) ids=%d normalizer=%s pre_tokenizer=[%s] decoder=%s "
           "bos=%d eos=%d add_special=+%d/+%d",
           t->n_vocab, t->n_merges, t->n_added, n_special, t->n_ids, t->n_norm ? "yes" : "none", pre,
           t->decoder == TOK_DEC_BYTELEVEL ? "ByteLevel" : "none", t->bos_id, t->eos_id, t->n_prefix, t->n_suffix);
}

static int open_json(dsi_tok *t, cJSON *root, const char *path, const char *cfg_path, dsi_err *err) {
  tok_strmap added_map = {0};
  int rc = parse_pre(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), err);
  for (size_t i = 0; !rc && i < t->n_pre; i++)
    if (t->pre[i].kind == TOK_PRE_BYTELEVEL && i + 1 != t->n_pre)
      rc = dsi_errf(err, DSI_E_UNSUPPORTED, "pre_tokenizer: ByteLevel must come last in the Sequence");
  if (rc) goto out;
  t->byte_level = t->n_pre && t->pre[t->n_pre - 1].kind == TOK_PRE_BYTELEVEL;
  if ((rc = parse_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err))) goto out;
  if ((rc = parse_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), err))) goto out;
  if ((rc = parse_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), err))) goto out;
  if ((rc = parse_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &added_map, err))) goto out;
  for (int32_t id = 0; id < t->n_ids; id++) t->shown[id] = t->text[id];
  for (size_t i = 0; i < t->n_added; i++) { /* id_to_token prefers the added vocabulary, normalized */
    t->shown[t->added[i].id] = t->added[i].match;
    t->flags[t->added[i].id] |= TOK_F_ADDED | (t->added[i].special ? TOK_F_SPECIAL : 0);
  }
  if ((rc = build_tables(t, err))) goto out;
  int n_special = build_added(t, err);
  if (n_special < 0) {
    rc = n_special;
    goto out;
  }
  parse_post(t, &added_map, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
  if (cfg_path && (rc = parse_config(t, &added_map, cfg_path, err))) goto done;
  describe(t, n_special);
  goto done;
out:
  dsi_err_prefix(err, rc, "%s", path);
done:
  free((void *)added_map.keys);
  free(added_map.slots);
  return rc;
}

int dsi_tok_open(dsi_tok **out, const char *path, const char *cfg_path, int flags, dsi_err *err) {
  *out = NULL;
  char *buf;
  size_t len;
  int rc = dsi_read_file(path, &buf, &len, err);
  if (rc) return rc;
  dsi_json_oom_clear();
  cJSON *root = cJSON_ParseWithLength(buf, len);
  if (!root && dsi_json_oom()) {
    free(buf);
    return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
  }
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    size_t off = at && at >= buf && at <= buf + len ? (size_t)(at - buf) : 0;
    free(buf);
    return dsi_errf(err, DSI_E_FORMAT, "%s: not valid JSON (near byte %zu)", path, off);
  }
  free(buf);
  dsi_tok *t = calloc(1, sizeof *t);
  if (!t) {
    cJSON_Delete(root);
    return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
  }
  t->bos_id = t->eos_id = t->unk_id = -1;
  t->no_jit = (flags & DSI_TOK_NO_JIT) != 0;
  rc = open_json(t, root, path, cfg_path, err);
  cJSON_Delete(root);
  if (rc) {
    dsi_tok_free(t);
    return rc;
  }
  *out = t;
  return DSI_OK;
}

void dsi_tok_free(dsi_tok *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n_pre; i++)
    if (t->pre[i].re) pcre2_code_free(t->pre[i].re);
  if (t->re_word) pcre2_code_free(t->re_word);
  free(t->pre);
  free(t->norm);
  free(t->added);
  free(t->trie_raw.node);
  free(t->trie_norm.node);
  free(t->merges.slots);
  free(t->key_map.slots);
  free(t->text_map.slots);
  free(t->text);
  free(t->shown);
  free(t->bytes);
  free(t->key);
  free(t->flags);
  free(t->pool);
  free(t);
}

/* ---- queries ---- */

int dsi_tok_vocab_size(const dsi_tok *t) { return t->n_ids; }
int32_t dsi_tok_bos_id(const dsi_tok *t) { return t->bos_id; }
int32_t dsi_tok_eos_id(const dsi_tok *t) { return t->eos_id; }

int32_t dsi_tok_token_to_id(const dsi_tok *t, const char *token) {
  size_t n = strlen(token);
  for (size_t i = 0; i < t->n_added; i++) /* added vocabulary first, as HF */
    if (t->added[i].content.len == n && !memcmp(t->pool + t->added[i].content.off, token, n)) return t->added[i].id;
  return dsi_tok_map_find(t, &t->text_map, token, n);
}

const char *dsi_tok_id_to_token(const dsi_tok *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_ids || t->shown[id].off == TOK_NONE) return NULL;
  if (len) *len = t->shown[id].len;
  return t->pool + t->shown[id].off;
}

const char *dsi_tok_id_bytes(const dsi_tok *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_ids || t->bytes[id].off == TOK_NONE) return NULL;
  if (len) *len = t->bytes[id].len;
  return t->pool + t->bytes[id].off;
}

int dsi_tok_is_special(const dsi_tok *t, int32_t id) {
  return id >= 0 && id < t->n_ids && (t->flags[id] & TOK_F_SPECIAL);
}
int dsi_tok_is_added(const dsi_tok *t, int32_t id) {
  return id >= 0 && id < t->n_ids && (t->flags[id] & TOK_F_ADDED);
}

void dsi_tok_describe(const dsi_tok *t, char *buf, size_t cap) { snprintf(buf, cap, "%s", t->desc); }
