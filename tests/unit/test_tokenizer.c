/* tests: the tokenizer on small handwritten tokenizer.json files — BPE merge
 * order (short and long words), merges in both forms, the pre-tokenizer's
 * Split behaviors and empty matches, added tokens (lstrip, rstrip,
 * single_word, normalized, special as text), BOS, invalid UTF-8, decoding,
 * the streaming detokenizer on split UTF-8, load errors and huge inputs.
 * Expected ids are worked out by hand from Hugging Face `tokenizers`' rules;
 * the real DeepSeek-V3 file is checked against the reference encoder by
 * tests/e2e/tokenizer.sh. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "tokenizer/tokenizer.h"

#define TINY "data/tokenizer/tokenizer.json"
#define TINY_CFG "data/tokenizer/tokenizer_config.json"

/* ids of tests/data/tokenizer/tokenizer.json: bytes are 0..255 (id = byte) */
enum { AB = 256, BC, ABC, GA, AA, CD, GG, GGGG, BOS, EOS, TL, TR, WORD, TN, SGX, USER };

/* ---- helpers ---- */

static char *write_temp(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/dsinfer-tok-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
    perror("temp file");
    exit(1);
  }
  close(fd);
  return path;
}

/* Open a tokenizer.json given as text. */
static dsi_tok *open_text(const char *json, dsi_err *err, int *status) {
  char *path = write_temp(json);
  dsi_tok *t = NULL;
  *status = dsi_tok_open(&t, path, NULL, 0, err);
  unlink(path);
  return t;
}

static int ids_eq(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
  return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
  fprintf(stderr, "    %s:", what);
  for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
  fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* encode(text) == want */
#define ENC(tok, flags, text, ...)                                                       \
  do {                                                                                   \
    const int32_t want_[] = {__VA_ARGS__};                                               \
    check_enc(tok, flags, text, sizeof(text) - 1, want_, sizeof want_ / sizeof *want_, __LINE__); \
  } while (0)

static void check_enc(const dsi_tok *t, int flags, const char *text, size_t len, const int32_t *want, size_t nw,
                      int line) {
  int32_t *ids = NULL;
  size_t n = 0;
  dsi_err err = {0};
  int rc = dsi_tok_encode(t, text, len, flags, &ids, &n, &err);
  char what[160];
  snprintf(what, sizeof what, "line %d: encode \"%.60s\"", line, text);
  if (!check_one(rc == DSI_OK && ids_eq(ids, n, want, nw), __FILE__, line, what)) {
    if (rc) fprintf(stderr, "    %s\n", err.msg);
    print_ids("got ", ids, n);
    print_ids("want", want, nw);
  }
  free(ids);
}

static char *decode(const dsi_tok *t, const int32_t *ids, size_t n, int flags) {
  char *s = NULL;
  size_t len;
  dsi_err err = {0};
  if (dsi_tok_decode(t, ids, n, flags, &s, &len, &err)) {
    fprintf(stderr, "    decode: %s\n", err.msg);
    return NULL;
  }
  return s;
}

/* ---- UTF-8 and the byte map ---- */

static void test_utf8(void) {
  struct {
    const char *in, *out;
  } cases[] = {
      {"ok \xF0\x9F\x98\x80", "ok \xF0\x9F\x98\x80"},
      {"\xE0\x80x", "\xEF\xBF\xBD\xEF\xBF\xBDx"},             /* E0 needs A0..BF next: two subparts */
      {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* a surrogate: three */
      {"a\xF0\x9F\x98", "a\xEF\xBF\xBD"},                      /* truncated at the end: one */
      {"\xF0\x9F\x98z", "\xEF\xBF\xBDz"},                      /* broken by z: one */
      {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xFF", "\xEF\xBF\xBD"},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(cases); i++) {
    char *b = NULL;
    size_t len = 0, cap = 0;
    CHECK(dsi_utf8_lossy_append(&b, &len, &cap, (const uint8_t *)cases[i].in, strlen(cases[i].in)) == 0);
    CHECKF(b && !strcmp(b, cases[i].out), "case %zu", i);
    free(b);
  }
  CHECK(dsi_utf8_valid_prefix((const uint8_t *)"abcdefghij\xC3\xA9xyz\xFF", 16) == 15);
  int ok = 1;
  for (int b = 0; b < 256; b++) ok &= dsi_bytelevel_byte(dsi_bytelevel_char((uint8_t)b)) == b;
  CHECK(ok);
  CHECK(dsi_bytelevel_char(' ') == 0x120 && dsi_bytelevel_char('\n') == 0x10A && dsi_bytelevel_char(0xAD) == 0x143);
}

/* ---- BPE, pre-tokenizer, added tokens on the byte-level file ---- */

static void test_encode(const dsi_tok *t) {
  ENC(t, 0, "");
  ENC(t, 0, "abcd", ABC, 'd');     /* ab (rank 0) first, then abc (2) before cd (5) */
  ENC(t, 0, "bcd", BC, 'd');
  ENC(t, 0, "aaa", AA, 'a');       /* equal ranks: the leftmost pair */
  ENC(t, 0, "aaaa", AA, AA);
  ENC(t, 0, " abc", ' ', ABC);     /* Ġa (3) loses to ab (0) */
  ENC(t, 0, "ab 12345", AB, ' ', '1', '2', '3', '4', '5'); /* digits in groups of 3, then GPT-2's regex */
  ENC(t, 0, "    x", GG, ' ', ' ', 'x');                    /* \s+(?!\S) leaves one space for " x" */
  ENC(t, 0, "        ", GGGG, GGGG);
  ENC(t, 0, "\xC3\xA9", 0xC3, 0xA9);
  /* added tokens, matched on the raw text, leftmost then longest */
  ENC(t, 0, "x [L] y", 'x', TL, ' ', 'y');                  /* lstrip takes the space before */
  ENC(t, 0, "x [R] y", 'x', ' ', TR, 'y');                  /* rstrip the space after */
  ENC(t, 0, "x  [L][R]  y", 'x', TL, TR, 'y');
  ENC(t, 0, "a word b", 'a', ' ', WORD, ' ', 'b');
  ENC(t, 0, "awordb", 'a', 'w', 'o', 'r', 'd', 'b');        /* single_word: inside a word, no */
  ENC(t, 0, "word_", 'w', 'o', 'r', 'd', '_');              /* _ is a word char */
  ENC(t, 0, "<s>x", BOS, 'x');                              /* leftmost wins over "s>x" */
  ENC(t, 0, "a<s>s>x</s>", 'a', BOS, SGX, EOS);
  ENC(t, 0, "<\xEF\xBD\x9CUser\xEF\xBD\x9C>hi", USER, 'h', 'i');
  /* special tokens as text: the skipped match still ends the search there
   * (HF continues after it), so "s>x" inside "<s>x" is not found */
  ENC(t, DSI_TOK_SPECIAL_AS_TEXT, "<s>x", '<', 's', '>', 'x');
  ENC(t, DSI_TOK_SPECIAL_AS_TEXT, "a [L] y", 'a', TL, ' ', 'y'); /* not special: still matched */
  /* the normalizer (Q -> <N>) runs between raw and normalized added tokens */
  ENC(t, 0, "aQb", 'a', TN, 'b');
  ENC(t, 0, "<N>", TN);
  ENC(t, 0, "Q<s>Q", TN, BOS, TN);
  /* BOS: asked for, or from tokenizer_config.json's add_bos_token */
  ENC(t, DSI_TOK_ADD_BOS, "ab", BOS, AB);
  ENC(t, DSI_TOK_ADD_SPECIAL, "ab", BOS, AB);
  ENC(t, DSI_TOK_ADD_SPECIAL | DSI_TOK_ADD_BOS, "ab", BOS, AB);
  /* long words take the heap; it must agree with the short-word rescan */
  char buf[4096];
  int32_t want[2048];
  size_t nw = 0;
  for (int i = 0; i < 20; i++) memcpy(buf + 4 * i, "abcd", 4), want[nw++] = ABC, want[nw++] = 'd';
  check_enc(t, 0, buf, 80, want, nw, __LINE__);
  nw = 0;
  for (int i = 0; i < 1000; i++) buf[i] = 'a';
  for (int i = 0; i < 500; i++) want[nw++] = AA;
  check_enc(t, 0, buf, 1000, want, nw, __LINE__);
  nw = 0;
  for (int i = 0; i < 101; i++) buf[i] = 'a';
  for (int i = 0; i < 50; i++) want[nw++] = AA;
  want[nw++] = 'a';
  check_enc(t, 0, buf, 101, want, nw, __LINE__);
}

static void test_invalid_utf8(const dsi_tok *t) {
  int32_t *ids = NULL;
  size_t n;
  dsi_err err = {0};
  CHECK_ERR(dsi_tok_encode(t, "ab\xFF" "cd", 5, 0, &ids, &n, &err), DSI_E_INVAL, err, "byte offset 2");
  CHECK(ids == NULL);
  CHECK_ERR(dsi_tok_encode(t, "ab\xC3", 3, 0, &ids, &n, &err), DSI_E_INVAL, err, "byte offset 2");
  CHECK_ERR(dsi_tok_encode(t, NULL, 3, 0, &ids, &n, &err), DSI_E_INVAL, err, "NULL");
  ENC(t, DSI_TOK_REPLACE_INVALID, "ab\xFF" "cd", AB, 0xEF, 0xBF, 0xBD, CD);
  ENC(t, DSI_TOK_REPLACE_INVALID, "ab\xE0\x80", AB, 0xEF, 0xBF, 0xBD, 0xEF, 0xBF, 0xBD);
  CHECK_ERR(dsi_tok_encode(t, "x", 1, DSI_TOK_ADD_BOS, &ids, &n, &err), DSI_OK, err, NULL);
  free(ids);
}

static void test_decode(const dsi_tok *t) {
  const int32_t a[] = {ABC, 'd', ' ', BOS, USER, 0xC3, 0xA9};
  char *s = decode(t, a, 7, 0);
  CHECK(s && !strcmp(s, "abcd <s><\xEF\xBD\x9CUser\xEF\xBD\x9C>\xC3\xA9"));
  free(s);
  s = decode(t, a, 7, DSI_TOK_SKIP_SPECIAL); /* <s> is special, <｜User｜> is not */
  CHECK(s && !strcmp(s, "abcd <\xEF\xBD\x9CUser\xEF\xBD\x9C>\xC3\xA9"));
  free(s);
  const int32_t half[] = {'x', 0xC3};
  s = decode(t, half, 2, 0);
  CHECK(s && !strcmp(s, "x\xEF\xBF\xBD"));
  free(s);
  const int32_t bad[] = {'a', 5000, -1, 'b'};
  char *out = NULL;
  size_t len;
  dsi_err err = {0};
  CHECK_ERR(dsi_tok_decode(t, bad, 4, 0, &out, &len, &err), DSI_E_INVAL, err, "id 5000 (position 1)");
  s = decode(t, bad, 4, DSI_TOK_SKIP_UNKNOWN);
  CHECK(s && !strcmp(s, "ab"));
  free(s);
  s = decode(t, NULL, 0, 0);
  CHECK(s && !strcmp(s, ""));
  free(s);
  /* token table */
  CHECK(dsi_tok_vocab_size(t) == USER + 1);
  CHECK(dsi_tok_bos_id(t) == BOS && dsi_tok_eos_id(t) == EOS);
  CHECK(dsi_tok_token_to_id(t, "<s>") == BOS && dsi_tok_token_to_id(t, "\xC4\xA0\xC4\xA0") == GG);
  CHECK(dsi_tok_token_to_id(t, "nope") == -1);
  size_t tl;
  const char *txt = dsi_tok_id_to_token(t, GA, &tl);
  CHECK(txt && tl == 3 && !memcmp(txt, "\xC4\xA0" "a", 3));
  CHECK(dsi_tok_is_special(t, BOS) && !dsi_tok_is_special(t, USER) && dsi_tok_is_added(t, USER));
}

/* Pieces of the streaming detokenizer, concatenated. */
static char *stream(const dsi_tok *t, const int32_t *ids, size_t n, int flags, int *bad_piece) {
  dsi_detok *d;
  dsi_err err = {0};
  if (dsi_detok_open(&d, t, flags, &err)) return NULL;
  char *all = calloc(1, 16 * n + 16);
  size_t len = 0;
  const char *p;
  size_t k;
  for (size_t i = 0; i < n; i++) {
    if (dsi_detok_push(d, ids[i], &p, &k, &err)) break;
    if (dsi_utf8_valid_prefix((const uint8_t *)p, k) != k) *bad_piece = 1; /* never half a char */
    memcpy(all + len, p, k);
    len += k;
  }
  dsi_detok_flush(d, &p, &k);
  memcpy(all + len, p, k);
  dsi_detok_free(d);
  return all;
}

static void test_detok(const dsi_tok *t) {
  dsi_detok *d;
  dsi_err err = {0};
  const char *p;
  size_t k;
  CHECK(dsi_detok_open(&d, t, 0, &err) == DSI_OK);
  CHECK(dsi_detok_push(d, 0xC3, &p, &k, &err) == DSI_OK && k == 0); /* half of é: held */
  CHECK(dsi_detok_push(d, 0xA9, &p, &k, &err) == DSI_OK && k == 2 && !memcmp(p, "\xC3\xA9", 2));
  CHECK(dsi_detok_push(d, 0xF0, &p, &k, &err) == DSI_OK && k == 0);
  CHECK(dsi_detok_push(d, 0x9F, &p, &k, &err) == DSI_OK && k == 0);
  CHECK(dsi_detok_push(d, 'a', &p, &k, &err) == DSI_OK && k == 4 && !memcmp(p, "\xEF\xBF\xBD" "a", 4));
  CHECK(dsi_detok_push(d, 0xE4, &p, &k, &err) == DSI_OK && k == 0);
  CHECK(dsi_detok_flush(d, &p, &k) == DSI_OK && k == 3 && !memcmp(p, "\xEF\xBF\xBD", 3));
  CHECK(dsi_detok_flush(d, &p, &k) == DSI_OK && k == 0);
  CHECK_ERR(dsi_detok_push(d, 99999, &p, &k, &err), DSI_E_INVAL, err, "99999");
  dsi_detok_free(d);
  /* random id streams, heavy in bytes >= 0x80: pieces concatenate to decode */
  dsi_rng rng;
  dsi_rng_seed(&rng, 7);
  int32_t ids[64];
  int ok = 1, bad_piece = 0;
  for (int trial = 0; trial < 3000; trial++) {
    size_t n = 1 + dsi_rng_u64(&rng) % 64;
    for (size_t i = 0; i < n; i++) {
      uint64_t r = dsi_rng_u64(&rng);
      ids[i] = r % 4 == 0 ? (int32_t)((r >> 8) % (USER + 1)) : 0x80 + (int32_t)((r >> 8) % 0x80);
    }
    int flags = trial % 2 ? DSI_TOK_SKIP_SPECIAL : 0;
    char *whole = decode(t, ids, n, flags), *pieces = stream(t, ids, n, flags, &bad_piece);
    ok &= whole && pieces && !strcmp(whole, pieces);
    free(whole);
    free(pieces);
  }
  CHECK(ok);
  CHECK(!bad_piece);
}

/* ---- merges as "a b" strings give the same model ---- */

static void test_merge_forms(void) {
  char *text = NULL;
  dsi_err err = {0};
  if (!CHECK(dsi_read_file(TINY, &text, NULL, &err) == DSI_OK)) return;
  cJSON *root = cJSON_Parse(text);
  free(text);
  cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges"), *legacy = cJSON_CreateArray();
  const cJSON *m;
  cJSON_ArrayForEach(m, merges) {
    char s[64];
    snprintf(s, sizeof s, "%s %s", cJSON_GetArrayItem(m, 0)->valuestring, cJSON_GetArrayItem(m, 1)->valuestring);
    cJSON_AddItemToArray(legacy, cJSON_CreateString(s));
  }
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "model"), "merges", legacy);
  char *json = cJSON_PrintUnformatted(root);
  int st;
  dsi_tok *t = open_text(json, &err, &st);
  CHECKF(st == DSI_OK, "%s", err.msg);
  if (t) {
    ENC(t, 0, "abcd", ABC, 'd');
    ENC(t, 0, "        ", GGGG, GGGG);
    ENC(t, 0, " abc aaa", ' ', ABC, GA, AA);
  }
  dsi_tok_free(t);
  /* a merge whose tokens are not in the vocab, and a malformed one */
  cJSON_ReplaceItemInArray(legacy, 0, cJSON_CreateString("a zz"));
  free(json);
  json = cJSON_PrintUnformatted(root);
  t = open_text(json, &err, &st);
  CHECK(st == DSI_E_FORMAT && strstr(err.msg, "model.merges[0]") && strstr(err.msg, "zz"));
  cJSON_ReplaceItemInArray(legacy, 0, cJSON_CreateString("a b c"));
  free(json);
  json = cJSON_PrintUnformatted(root);
  t = open_text(json, &err, &st);
  CHECK(st == DSI_E_FORMAT && strstr(err.msg, "one space"));
  free(json);
  cJSON_Delete(root);
}

/* ---- variants of the tiny file: ByteLevel's prefix space, other normalizers ---- */

static dsi_tok *tiny_variant(const char *key, const char *json_value) {
  char *text = NULL;
  dsi_err err = {0};
  if (dsi_read_file(TINY, &text, NULL, &err) != DSI_OK) return NULL;
  cJSON *root = cJSON_Parse(text);
  free(text);
  cJSON *v = cJSON_Parse(json_value);
  if (!strcmp(key, "add_prefix_space")) {
    cJSON *bl = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "pre_tokenizer"), "pretokenizers"), 1);
    cJSON_ReplaceItemInObject(bl, "add_prefix_space", v);
  } else {
    cJSON_ReplaceItemInObject(root, key, v);
  }
  char *json = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  int st;
  dsi_tok *t = open_text(json, &err, &st);
  free(json);
  CHECKF(st == DSI_OK, "%s", err.msg);
  return t;
}

static void test_variants(void) {
  /* ByteLevel's add_prefix_space works on each piece the earlier steps and
   * the added tokens left, as HF's does */
  dsi_tok *t = tiny_variant("add_prefix_space", "true");
  if (t) {
    ENC(t, 0, "ab", ' ', AB);
    ENC(t, 0, " ab", ' ', AB);
    ENC(t, 0, "ab<s>ab", ' ', AB, BOS, ' ', AB);
    ENC(t, 0, "12ab", ' ', '1', '2', ' ', AB);
  }
  dsi_tok_free(t);
  /* Strip then Prepend; normalized added tokens are matched in their
   * normalized form ("<N>" -> "_<N>") */
  t = tiny_variant("normalizer", "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Strip\", "
                                 "\"strip_left\": true, \"strip_right\": true}, {\"type\": \"Prepend\", \"prepend\": \"_\"}]}");
  if (t) {
    ENC(t, 0, "  ab \u3000", '_', AB);
    ENC(t, 0, "   ");
    ENC(t, 0, "<N>", TN);
    ENC(t, 0, "<s> ab", BOS, '_', AB);
    char desc[512];
    dsi_tok_describe(t, desc, sizeof desc);
    CHECKF(strstr(desc, "merges=8") && strstr(desc, "added=8"), "%s", desc);
  }
  dsi_tok_free(t);
  /* no tokenizer_config.json: DSI_TOK_ADD_SPECIAL follows a TemplateProcessing post-processor */
  t = tiny_variant("post_processor",
                   "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, "
                   "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], "
                   "\"pair\": [], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [264], \"tokens\": [\"<s>\"]}, "
                   "\"</s>\": {\"id\": \"</s>\", \"ids\": [265], \"tokens\": [\"</s>\"]}}}");
  if (t) {
    ENC(t, DSI_TOK_ADD_SPECIAL, "ab", BOS, AB, EOS);
    ENC(t, 0, "ab", AB);
    int32_t *ids = NULL;
    size_t n;
    dsi_err err = {0};
    CHECK_ERR(dsi_tok_encode(t, "ab", 2, DSI_TOK_ADD_BOS, &ids, &n, &err), DSI_E_INVAL, err, "bos_token");
    CHECK(dsi_tok_bos_id(t) == -1);
  }
  dsi_tok_free(t);
}

/* ---- Split behaviors on a char-level model (no ByteLevel, no decoder) ---- */

static dsi_tok *char_model(const char *pattern, const char *behavior, int invert, const char *unk, int fuse) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"-\": 1, \"b\": 2, \"a-\": 3, \"-b\": 4, \"--\": 5, "
           "\"<unk>\": 6}, \"merges\": [[\"a\", \"-\"], [\"-\", \"b\"], [\"-\", \"-\"]], \"unk_token\": %s, "
           "\"fuse_unk\": %s}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": %s, \"behavior\": \"%s\", "
           "\"invert\": %s}, \"normalizer\": null, \"decoder\": null, \"added_tokens\": []}",
           unk, fuse ? "true" : "false", pattern, behavior, invert ? "true" : "false");
  dsi_err err = {0};
  int st;
  dsi_tok *t = open_text(json, &err, &st);
  CHECKF(st == DSI_OK, "%s", err.msg);
  return t;
}

static void test_split_behaviors(void) {
  const char *dash = "{\"String\": \"-\"}", *runs = "{\"Regex\": \"-+\"}", *maybe = "{\"Regex\": \"-*\"}";
  dsi_tok *t;
#define WITH(pat, beh, inv, unk, fuse, ...) \
  if ((t = char_model(pat, beh, inv, unk, fuse))) { __VA_ARGS__; } dsi_tok_free(t)
  WITH(dash, "Isolated", 0, "null", 0, ENC(t, 0, "a-b", 0, 1, 2); ENC(t, 0, "a--b", 0, 1, 1, 2));
  WITH(dash, "Removed", 0, "null", 0, ENC(t, 0, "a-b", 0, 2));
  WITH(dash, "MergedWithPrevious", 0, "null", 0, ENC(t, 0, "a-b", 3, 2); ENC(t, 0, "a--b", 3, 1, 2));
  WITH(dash, "MergedWithNext", 0, "null", 0, ENC(t, 0, "a-b", 0, 4); ENC(t, 0, "-a", 1, 0));
  WITH(dash, "Contiguous", 0, "null", 0, ENC(t, 0, "a--b", 0, 5, 2); ENC(t, 0, "a-b", 0, 1, 2));
  WITH(dash, "Removed", 1, "null", 0, ENC(t, 0, "a-b", 1));              /* invert: the letters go */
  WITH(dash, "MergedWithPrevious", 1, "null", 0, ENC(t, 0, "a-b", 0, 4)); /* invert: b joins - */
  WITH(runs, "Isolated", 0, "null", 0, ENC(t, 0, "a--b", 0, 5, 2));
  /* "-*" matches empty at 0 and at the end; the empty match right after
   * "--" is skipped (onig's find_iter) */
  WITH(maybe, "Isolated", 0, "null", 0, ENC(t, 0, "a--b", 0, 5, 2));
  WITH(maybe, "MergedWithPrevious", 0, "null", 0, ENC(t, 0, "a--b", 3, 1, 2));
  /* chars with no token: dropped without unk; unk, fused or not */
  WITH(dash, "Isolated", 0, "null", 0, ENC(t, 0, "a-x", 0, 1));
  WITH(dash, "Isolated", 0, "\"<unk>\"", 0, ENC(t, 0, "a-x", 0, 1, 6); ENC(t, 0, "xx", 6, 6));
  WITH(dash, "Isolated", 0, "\"<unk>\"", 1, ENC(t, 0, "xxa", 6, 0));
  /* no decoder: tokens joined by spaces */
  WITH(dash, "Isolated", 0, "null", 0, {
    const int32_t ids[] = {0, 1, 2};
    char *s = decode(t, ids, 3, 0);
    CHECK(s && !strcmp(s, "a - b"));
    free(s);
    int bad = 0;
    s = stream(t, ids, 3, 0, &bad);
    CHECK(s && !strcmp(s, "a - b"));
    free(s);
  });
#undef WITH
}

/* ---- load errors name their cause ---- */

static void test_load_errors(void) {
  dsi_err err = {0};
  dsi_tok *t = NULL;
  int st;
  CHECK_ERR(dsi_tok_open(&t, "data/tokenizer/missing.json", NULL, 0, &err), DSI_E_IO, err, "missing.json");
  t = open_text("{\"model\": ", &err, &st);
  CHECK(st == DSI_E_FORMAT && strstr(err.msg, "not valid JSON"));
  t = open_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                "\"normalizer\": {\"type\": \"NFC\"}}", &err, &st);
  CHECK(st == DSI_E_UNSUPPORTED && strstr(err.msg, "NFC"));
  t = open_text("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", &err, &st);
  CHECK(st == DSI_E_UNSUPPORTED && strstr(err.msg, "Unigram"));
  t = open_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
                &err, &st);
  CHECK(st == DSI_E_FORMAT && strstr(err.msg, "pre_tokenizer 0 (Split)") && strstr(err.msg, "compile"));
  t = open_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", &err, &st);
  CHECK(st == DSI_E_FORMAT && strstr(err.msg, "model.vocab[\"a\"]"));
  t = open_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                "\"pre_tokenizer\": {\"type\": \"Metaspace\"}}", &err, &st);
  CHECK(st == DSI_E_UNSUPPORTED && strstr(err.msg, "Metaspace"));
  CHECK(t == NULL);
}

/* ---- huge inputs finish (linear time; no wall-clock assertion) ---- */

static void test_huge(const dsi_tok *t) {
  size_t n = 1 << 20;
  char *s = malloc(n);
  int32_t *ids = NULL;
  size_t k = 0;
  dsi_err err = {0};
  memset(s, 'a', n); /* one 1 MiB word */
  CHECK(dsi_tok_encode(t, s, n, 0, &ids, &k, &err) == DSI_OK && k == n / 2 && ids[0] == AA && ids[k - 1] == AA);
  free(ids);
  memset(s, ' ', 100000); /* 100k spaces: one piece, merged to runs of four */
  CHECK(dsi_tok_encode(t, s, 100000, 0, &ids, &k, &err) == DSI_OK && k == 25000 && ids[0] == GGGG);
  free(ids);
  memset(s, '7', 100000); /* 100k digits: groups of three */
  CHECK(dsi_tok_encode(t, s, 100000, 0, &ids, &k, &err) == DSI_OK && k == 100000);
  free(ids);
  for (size_t i = 0; i < n; i++) s[i] = "ab cd\n\t1234 <s>[R]"[i % 18];
  CHECK(dsi_tok_encode(t, s, n, 0, &ids, &k, &err) == DSI_OK && k > n / 8);
  char *back = decode(t, ids, k, 0);
  CHECK(back && strlen(back) == n && !memcmp(back, s, n));
  free(back);
  free(ids);
  free(s);
}

int main(void) {
  test_utf8();
  dsi_tok *t = NULL;
  dsi_err err = {0};
  if (!CHECK(dsi_tok_open(&t, TINY, TINY_CFG, 0, &err) == DSI_OK)) {
    fprintf(stderr, "    %s\n", err.msg);
    return check_done();
  }
  test_encode(t);
  test_invalid_utf8(t);
  test_decode(t);
  test_detok(t);
  test_huge(t);
  dsi_tok_free(t);
  test_merge_forms();
  test_variants();
  test_split_behaviors();
  test_load_errors();
  return check_done();
}
