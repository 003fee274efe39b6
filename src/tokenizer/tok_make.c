/* tokenizer: tokenizers for generated checkpoints (dsi_mkmodel). Copies a
 * real tokenizer.json + tokenizer_config.json into the checkpoint, or writes
 * a small byte-level BPE one whose merges are trained here on a page of
 * English, with DeepSeek's special tokens and the V3 chat template. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/template.h"
#include "tokenizer/tok_impl.h"

/* ---- the generated tokenizer's layout ---- */

#define BOS_TEXT "<｜begin▁of▁sentence｜>"
#define EOS_TEXT "<｜end▁of▁sentence｜>"
#define PAD_TEXT "<｜▁pad▁｜>"
enum {
  MK_N_LOW = 3,           /* ids 0..2: BOS, EOS, pad, as DeepSeek-V3's */
  MK_FIRST_BYTE = 3,      /* ids 3..258: the 256 bytes in GPT-2's char order */
  MK_FIRST_MERGE = 259,
  MK_MAX_MERGES = 1000,
};
/* added after the merges, at the top ids (vocab_size - 1 last when the
 * merges fill the vocabulary, as for the tiny preset); special as in V3 */
static const struct { const char *text; int special; } k_top[] = {
  {"<｜User｜>", 0}, {"<｜Assistant｜>", 0}, {"<think>", 0}, {"</think>", 0},
};
enum { MK_N_TOP = sizeof k_top / sizeof k_top[0] };

/* The text the merges are learned from: plain, common English. */
static const char k_corpus[] =
    "The model reads the text one token at a time and writes the next token. When you ask it a question, it "
    "answers with the words that are most likely to come next, given everything that came before. This is how a "
    "language model works: it has learned from a very large amount of text, and it uses what it has learned to "
    "continue the conversation.\n"
    "In the beginning there was only the data. People wrote books, letters, stories and programs, and all of it "
    "was stored on computers around the world. Researchers collected these texts and trained models on them. The "
    "first models were small and could only write a few words that made sense. Later models were much larger, and "
    "they could write whole pages, translate between languages, solve problems in mathematics and explain their "
    "own reasoning.\n"
    "A good answer is short and clear. It should say what is true, and it should not say what is not known. If the "
    "question is about a number, the answer should give the number. If the question is about a place, a person or "
    "a time, the answer should name them. When there is more than one way to read a question, it is better to ask "
    "than to guess.\n"
    "Here is a simple example. What is the capital of France? The capital of France is Paris. How many days are "
    "there in a week? There are seven days in a week. Which planet is the largest in our solar system? Jupiter is "
    "the largest planet. Thank you for your help! You are welcome, and please let me know if there is anything "
    "else I can do for you.\n"
    "Every morning she would walk along the river to the old bridge, where the water was still and the birds were "
    "singing in the trees. She liked to think about the day ahead: the work she had to finish, the friends she "
    "wanted to see, and the small things that made her happy. Sometimes she stopped to watch the light on the "
    "water, and for a moment the world seemed quiet and simple.\n"
    "The system has three parts. The first part loads the weights of the network from the files on disk. The "
    "second part builds the graph of operations for each layer, and the third part runs the graph on the "
    "processor, using all of its cores. Each part can be tested on its own, and each test compares the result "
    "with an independent reference.\n"
    "Time is the most important resource we have, and the way we spend it shapes who we become. Learning "
    "something new takes practice and patience. Start with small steps, repeat them every day, and after some "
    "weeks you will see how much you have improved. Do not be afraid of making mistakes; they are part of the "
    "process of learning.\n";

/* ---- training: byte-level BPE merges, most frequent pair first ---- */

typedef struct mk_vocab {
  char **text; /* by id - MK_FIRST_BYTE: byte-level chars, UTF-8 */
  int n;
} mk_vocab;

typedef struct mk_word {
  int32_t *sym; /* ids - MK_FIRST_BYTE */
  int n, freq;
} mk_word;

/* text's id, text taken (freed when already there); -1 when out of memory
 * (text is NULL or cannot be held) */
static int vocab_add(mk_vocab *v, char *text) {
  if (!text) return -1;
  for (int i = 0; i < v->n; i++)
    if (!strcmp(v->text[i], text)) {
      free(text);
      return i;
    }
  char **t = realloc(v->text, (size_t)(v->n + 1) * sizeof *v->text);
  if (!t) {
    free(text);
    return -1;
  }
  v->text = t;
  v->text[v->n] = text;
  return v->n++;
}

/* One pre-token of the corpus: an optional space, then letters, 1-3
 * digits, or punctuation; or a run of white space. Roughly the splits of
 * DeepSeek's pre-tokenizer on ASCII text. */
static int is_letter(char c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_space(char c) { return c == ' ' || c == '\n'; }

static size_t next_word(const char *s) {
  size_t i = s[0] == ' ' && s[1] && !is_space(s[1]) ? 1 : 0;
  if (is_space(s[i])) {
    while (is_space(s[i])) i++;
  } else if (is_digit(s[i])) {
    for (size_t k = 0; k < 3 && is_digit(s[i]); k++) i++;
  } else if (is_letter(s[i])) {
    while (is_letter(s[i])) i++;
  } else {
    while (s[i] && !is_space(s[i]) && !is_letter(s[i]) && !is_digit(s[i])) i++;
  }
  return i;
}

static int byte_rank(uint8_t b) { /* a byte's place among the 256 byte tokens */
  uint32_t cp = dsi_bytelevel_char(b);
  int r = 0;
  for (uint32_t c = 0; c < cp; c++) r += dsi_bytelevel_byte(c) >= 0;
  return r;
}

static void words_free(mk_word *w, int n) {
  for (int i = 0; i < n; i++) free(w[i].sym);
  free(w);
}

/* the corpus's distinct pre-tokens with their counts; NULL when out of memory */
static mk_word *corpus_words(int *n_words) {
  mk_word *w = NULL;
  int n = 0;
  for (const char *s = k_corpus; *s;) {
    size_t len = next_word(s);
    int found = -1;
    for (int i = 0; i < n && found < 0; i++) {
      if ((size_t)w[i].n != len) continue;
      int same = 1;
      for (size_t k = 0; k < len && same; k++) same = w[i].sym[k] == byte_rank((uint8_t)s[k]);
      if (same) found = i;
    }
    if (found >= 0) {
      w[found].freq++;
    } else {
      mk_word *grown = realloc(w, (size_t)(n + 1) * sizeof *w);
      if (!grown || !(grown[n].sym = malloc(len * sizeof(int32_t)))) {
        words_free(grown ? grown : w, n);
        return NULL;
      }
      w = grown;
      for (size_t k = 0; k < len; k++) w[n].sym[k] = byte_rank((uint8_t)s[k]);
      w[n].n = (int)len;
      w[n].freq = 1;
      n++;
    }
    s += len;
  }
  *n_words = n;
  return w;
}

typedef struct mk_pair {
  int32_t a, b;
  int count;
} mk_pair;

static int pair_order(const void *x, const void *y) {
  const mk_pair *p = x, *q = y;
  return p->a != q->a ? (p->a > q->a) - (p->a < q->a) : (p->b > q->b) - (p->b < q->b);
}

/* Learn merges (each pair seen at least twice) until v has max_new more
 * tokens; merges[i] = {left, right} ids - MK_FIRST_BYTE. Returns how many
 * merges (two may make the same token: a merge then adds none), -1 when
 * out of memory. */
static int train(mk_vocab *v, int max_new, int32_t (*merges)[2]) {
  int max = 4 * max_new, first = v->n;
  int n_words, n_merges = 0;
  mk_word *w = corpus_words(&n_words);
  if (!w) return -1;
  size_t cap = 0;
  for (int i = 0; i < n_words; i++) cap += (size_t)w[i].n;
  mk_pair *pairs = malloc((cap + 1) * sizeof *pairs);
  if (!pairs) n_merges = -1;
  while (pairs && n_merges < max && v->n - first < max_new) {
    size_t np = 0;
    for (int i = 0; i < n_words; i++)
      for (int k = 0; k + 1 < w[i].n; k++) pairs[np++] = (mk_pair){w[i].sym[k], w[i].sym[k + 1], w[i].freq};
    if (!np) break;
    qsort(pairs, np, sizeof *pairs, pair_order);
    mk_pair best = {-1, -1, 0};
    for (size_t i = 0; i < np;) {
      mk_pair p = pairs[i++];
      while (i < np && pairs[i].a == p.a && pairs[i].b == p.b) p.count += pairs[i++].count;
      int cmp = 0;
      if (best.count == p.count) { /* ties: the pair whose text sorts first */
        cmp = strcmp(v->text[p.a], v->text[best.a]);
        if (!cmp) cmp = strcmp(v->text[p.b], v->text[best.b]);
      }
      if (p.count > best.count || cmp < 0) best = p;
    }
    if (best.count < 2) break;
    size_t la = strlen(v->text[best.a]), lb = strlen(v->text[best.b]);
    char *joined = malloc(la + lb + 1);
    if (joined) {
      memcpy(joined, v->text[best.a], la);
      memcpy(joined + la, v->text[best.b], lb + 1);
    }
    int32_t id = vocab_add(v, joined);
    if (id < 0) {
      n_merges = -1;
      break;
    }
    merges[n_merges][0] = best.a;
    merges[n_merges][1] = best.b;
    n_merges++;
    for (int i = 0; i < n_words; i++) {
      int o = 0;
      for (int k = 0; k < w[i].n; k++) {
        if (k + 1 < w[i].n && w[i].sym[k] == best.a && w[i].sym[k + 1] == best.b) w[i].sym[o++] = id, k++;
        else w[i].sym[o++] = w[i].sym[k];
      }
      w[i].n = o;
    }
  }
  words_free(w, n_words);
  free(pairs);
  return n_merges;
}

/* ---- the files ---- */

static cJSON *added_token(int id, const char *text, int special) {
  cJSON *a = cJSON_CreateObject();
  cJSON_AddNumberToObject(a, "id", id);
  cJSON_AddStringToObject(a, "content", text);
  cJSON_AddBoolToObject(a, "single_word", 0);
  cJSON_AddBoolToObject(a, "lstrip", 0);
  cJSON_AddBoolToObject(a, "rstrip", 0);
  cJSON_AddBoolToObject(a, "normalized", !special);
  cJSON_AddBoolToObject(a, "special", special);
  return a;
}

static cJSON *split(const char *regex) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "type", "Split");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(s, "pattern"), "Regex", regex);
  cJSON_AddStringToObject(s, "behavior", "Isolated");
  cJSON_AddBoolToObject(s, "invert", 0);
  return s;
}

static cJSON *byte_level(int add_prefix_space, int trim_offsets, int use_regex) {
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "type", "ByteLevel");
  cJSON_AddBoolToObject(b, "add_prefix_space", add_prefix_space);
  cJSON_AddBoolToObject(b, "trim_offsets", trim_offsets);
  cJSON_AddBoolToObject(b, "use_regex", use_regex);
  return b;
}

static void vocab_free(mk_vocab *v) {
  for (int i = 0; i < v->n; i++) free(v->text[i]);
  free(v->text);
}

/* tokenizer.json: DeepSeek-V3's normalizer, pre-tokenizer, decoder and
 * post-processor around the small vocabulary; NULL when out of memory. */
static char *small_tokenizer_json(int vocab_size, int *n_merges_out) {
  mk_vocab v = {0};
  dsi_json_oom_clear();
  for (uint32_t cp = 0; v.n < 256; cp++) { /* the bytes, in GPT-2's char order */
    if (dsi_bytelevel_byte(cp) < 0) continue;
    char *c = malloc(5);
    if (c) c[tok_utf8_encode(cp, c)] = 0;
    if (vocab_add(&v, c) < 0) {
      vocab_free(&v);
      return NULL;
    }
  }
  int max = DSI_MIN(MK_MAX_MERGES, vocab_size - MK_FIRST_MERGE - MK_N_TOP);
  int32_t(*merges)[2] = malloc((size_t)DSI_MAX(4 * max, 1) * sizeof *merges);
  int n_merges = !merges ? -1 : max > 0 ? train(&v, max, merges) : 0;
  if (n_merges < 0) {
    vocab_free(&v);
    free(merges);
    return NULL;
  }
  *n_merges_out = n_merges;
  /* the added tokens follow the vocabulary without a gap: Hugging Face
   * numbers added tokens missing from the vocab in order after it */
  int top = MK_FIRST_BYTE + v.n;

  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON_AddNullToObject(root, "truncation");
  cJSON_AddNullToObject(root, "padding");
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
  cJSON_AddItemToArray(added, added_token(0, BOS_TEXT, 1));
  cJSON_AddItemToArray(added, added_token(1, EOS_TEXT, 1));
  cJSON_AddItemToArray(added, added_token(2, PAD_TEXT, 1));
  for (int i = 0; i < MK_N_TOP; i++)
    cJSON_AddItemToArray(added, added_token(top + i, k_top[i].text, k_top[i].special));
  cJSON *norm = cJSON_AddObjectToObject(root, "normalizer");
  cJSON_AddStringToObject(norm, "type", "Sequence");
  cJSON_AddArrayToObject(norm, "normalizers");
  cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
  cJSON_AddStringToObject(pre, "type", "Sequence");
  cJSON *pres = cJSON_AddArrayToObject(pre, "pretokenizers");
  cJSON_AddItemToArray(pres, split("\\p{N}{1,3}"));
  cJSON_AddItemToArray(pres, split("[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"));
  cJSON_AddItemToArray(pres, split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
                                   "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|"
                                   "\\s*[\r\n]+|\\s+(?!\\S)|\\s+"));
  cJSON_AddItemToArray(pres, byte_level(0, 1, 0));
  cJSON_AddItemToObject(root, "post_processor", byte_level(1, 0, 1));
  cJSON_AddItemToObject(root, "decoder", byte_level(1, 1, 1));
  cJSON *model = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddNullToObject(model, "dropout");
  cJSON_AddNullToObject(model, "unk_token");
  cJSON_AddNullToObject(model, "continuing_subword_prefix");
  cJSON_AddNullToObject(model, "end_of_word_suffix");
  cJSON_AddBoolToObject(model, "fuse_unk", 0);
  cJSON_AddBoolToObject(model, "byte_fallback", 0);
  cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
  cJSON_AddNumberToObject(vocab, BOS_TEXT, 0);
  cJSON_AddNumberToObject(vocab, EOS_TEXT, 1);
  cJSON_AddNumberToObject(vocab, PAD_TEXT, 2);
  for (int i = 0; i < v.n; i++) cJSON_AddNumberToObject(vocab, v.text[i], MK_FIRST_BYTE + i);
  cJSON *ml = cJSON_AddArrayToObject(model, "merges");
  int ml_done = !n_merges;
  for (int i = 0; i < n_merges; i++) {
    const char *a = v.text[merges[i][0]], *b = v.text[merges[i][1]];
    char *m = malloc(strlen(a) + strlen(b) + 2);
    if (!m) break; /* the merges are cut short: the file is not written */
    sprintf(m, "%s %s", a, b);
    cJSON_AddItemToArray(ml, cJSON_CreateString(m));
    free(m);
    if (i == n_merges - 1) ml_done = 1;
  }
  char *text = ml_done && !dsi_json_oom() ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  vocab_free(&v);
  free(merges);
  return text;
}

static cJSON *config_token(const char *text) {
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "__type", "AddedToken");
  cJSON_AddStringToObject(t, "content", text);
  cJSON_AddBoolToObject(t, "lstrip", 0);
  cJSON_AddBoolToObject(t, "normalized", 1);
  cJSON_AddBoolToObject(t, "rstrip", 0);
  cJSON_AddBoolToObject(t, "single_word", 0);
  return t;
}

/* tokenizer_config.json as DeepSeek-V3 ships it: BOS added, the V3 template. */
static char *small_config_json(void) {
  dsi_json_oom_clear();
  cJSON *c = cJSON_CreateObject();
  cJSON_AddBoolToObject(c, "add_bos_token", 1);
  cJSON_AddBoolToObject(c, "add_eos_token", 0);
  cJSON_AddItemToObject(c, "bos_token", config_token(BOS_TEXT));
  cJSON_AddBoolToObject(c, "clean_up_tokenization_spaces", 0);
  cJSON_AddItemToObject(c, "eos_token", config_token(EOS_TEXT));
  cJSON_AddBoolToObject(c, "legacy", 1);
  cJSON_AddNumberToObject(c, "model_max_length", 131072);
  cJSON_AddItemToObject(c, "pad_token", config_token(EOS_TEXT));
  cJSON_AddNullToObject(c, "unk_token");
  cJSON_AddStringToObject(c, "tokenizer_class", "LlamaTokenizerFast");
  cJSON_AddStringToObject(c, "chat_template", dsi_tmpl_deepseek_v3());
  char *text = dsi_json_oom() ? NULL : cJSON_Print(c);
  cJSON_Delete(c);
  return text;
}

static int write_text(const char *dir, const char *name, char *text, dsi_err *err) {
  char path[4096];
  dsi_path_join(path, sizeof path, dir, name);
  if (!text) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
  int st = dsi_write_file(path, text, strlen(text), err);
  cJSON_free(text);
  return st;
}

/* ---- finding and copying a real one ---- */

/* tokenizer.json and its tokenizer_config.json (or "") for a folder or a file. */
static void source_paths(const char *src, char *json, char *cfg, size_t cap) {
  size_t n = strlen(src);
  if (n >= 5 && !strcmp(src + n - 5, ".json")) {
    snprintf(json, cap, "%s", src);
    const char *slash = strrchr(src, '/');
    int k = slash ? (int)(slash - src) : 0;
    snprintf(cfg, cap, "%.*s%stokenizer_config.json", k, src, slash ? "/" : "");
  } else {
    dsi_path_join(json, cap, src, "tokenizer.json");
    dsi_path_join(cfg, cap, src, "tokenizer_config.json");
  }
  if (access(cfg, R_OK) != 0) cfg[0] = 0;
}

static int copy_file(const char *from, const char *dir, const char *name, dsi_err *err) {
  char *data, path[4096];
  size_t len;
  int st = dsi_read_file(from, &data, &len, err);
  if (st) return st;
  st = dsi_write_file(dsi_path_join(path, sizeof path, dir, name), data, len, err);
  free(data);
  return st;
}

/* Copy src's tokenizer into dir when it fits vocab_size: 1 copied, 0 it
 * does not fit (nothing written; err says why), or a negative status. */
static int copy_tokenizer(const char *src, const char *dir, int vocab_size, dsi_tok_made *out, dsi_err *err) {
  char json[4096], cfg[4096];
  source_paths(src, json, cfg, sizeof json);
  if (access(json, R_OK) != 0) return dsi_errf(err, DSI_E_IO, "%s: no tokenizer there", json);
  dsi_tok *tok;
  int st = dsi_tok_open(&tok, json, cfg[0] ? cfg : NULL, 0, err);
  if (st) return st;
  int n = dsi_tok_vocab_size(tok);
  dsi_tok_free(tok);
  if (n > vocab_size) {
    dsi_errf(err, DSI_E_INVAL, "%s: %d token ids do not fit the model's vocab_size of %d", json, n, vocab_size);
    return 0;
  }
  if ((st = copy_file(json, dir, "tokenizer.json", err))) return st;
  if (cfg[0] && (st = copy_file(cfg, dir, "tokenizer_config.json", err))) return st;
  snprintf(out->from, sizeof out->from, "%s", json);
  return 1;
}

int dsi_tok_write_checkpoint(const char *dir, const char *src, int must_fit, int vocab_size, dsi_tok_made *out,
                             dsi_err *err) {
  memset(out, 0, sizeof *out);
  out->bos_id = out->eos_id = -1;
  int st = 0;
  if (src) {
    st = copy_tokenizer(src, dir, vocab_size, out, err);
    if (st == 0 && must_fit) return DSI_E_INVAL; /* else too big for the model: make one */
  }
  if (st < 0) return st;
  if (st == 0) { /* generate */
    if (vocab_size < MK_FIRST_MERGE + MK_N_TOP)
      return dsi_errf(err, DSI_E_INVAL, "vocab_size %d is too small for a byte-level tokenizer (at least %d)", vocab_size,
                      MK_FIRST_MERGE + MK_N_TOP);
    int n_merges = 0;
    if ((st = write_text(dir, "tokenizer.json", small_tokenizer_json(vocab_size, &n_merges), err)) ||
        (st = write_text(dir, "tokenizer_config.json", small_config_json(), err)))
      return st;
    out->n_merges = n_merges;
  }
  /* read back what was written: it loads, and its BOS/EOS go into config.json */
  char json[4096], cfg[4096];
  source_paths(dir, json, cfg, sizeof json);
  dsi_tok *tok;
  if ((st = dsi_tok_open(&tok, json, cfg[0] ? cfg : NULL, 0, err))) return st;
  out->bos_id = dsi_tok_bos_id(tok);
  out->eos_id = dsi_tok_eos_id(tok);
  out->vocab_size = dsi_tok_vocab_size(tok);
  dsi_tok_free(tok);
  return DSI_OK;
}
