/* tokenizer: the layout of dsi_tok shared by the tokenizer's own files
 * (load, encode, BPE, decode) and the small hash maps they use. Nothing
 * outside src/tokenizer includes this. */
#ifndef DSI_TOK_IMPL_H
#define DSI_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tokenizer.h"

#define TOK_NONE UINT32_MAX

/* A string in tok->pool. off == TOK_NONE: no string. */
typedef struct tok_span {
  uint32_t off, len;
} tok_span;

/* String -> id, open addressing; the key of an id is keys[id] in the pool. */
typedef struct tok_slot {
  uint32_t hash;
  int32_t id; /* -1: empty */
} tok_slot;
typedef struct tok_strmap {
  tok_slot *slots;
  size_t mask;
  const tok_span *keys;
} tok_strmap;

/* (left id, right id) -> (rank, merged id), open addressing. */
typedef struct tok_merge {
  uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
  uint32_t rank;
  int32_t id;
} tok_merge;
typedef struct tok_mergemap {
  tok_merge *slots;
  size_t mask;
} tok_mergemap;

/* An entry of tokenizer.json's added_tokens. */
typedef struct tok_added {
  int32_t id;
  uint8_t special, single_word, lstrip, rstrip, normalized;
  tok_span content; /* as written */
  tok_span match;   /* what is matched: content, normalized when `normalized` */
} tok_added;

/* Byte trie over added tokens; leftmost-longest matching. */
typedef struct tok_trie_node {
  int32_t child, sibling; /* first child, next sibling; -1 none */
  int32_t added;          /* index in tok->added ending here, -1 none */
  uint8_t byte;
} tok_trie_node;
typedef struct tok_trie {
  tok_trie_node *node; /* node[0] is the root */
  size_t n, cap;
  uint8_t first[256];  /* bytes some entry starts with */
  int n_first;
  uint8_t only_first;  /* the first byte when n_first == 1 (memchr) */
} tok_trie;

enum { TOK_NORM_REPLACE, TOK_NORM_PREPEND, TOK_NORM_STRIP };
typedef struct tok_norm {
  int kind;
  tok_span a, b; /* Replace: pattern, content; Prepend: a */
  int left, right; /* Strip */
} tok_norm;

enum { TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL };
enum { TOK_SPLIT_REMOVED, TOK_SPLIT_ISOLATED, TOK_SPLIT_MERGED_PREV, TOK_SPLIT_MERGED_NEXT, TOK_SPLIT_CONTIGUOUS };
typedef struct tok_pre {
  int kind;
  pcre2_code *re; /* Split's pattern; ByteLevel's GPT-2 regex when use_regex */
  int jit;        /* re was JIT-compiled */
  int behavior, invert;
  int add_prefix_space; /* ByteLevel */
} tok_pre;

enum { TOK_DEC_NONE, TOK_DEC_BYTELEVEL };

enum { TOK_F_MODEL = 1, TOK_F_ADDED = 2, TOK_F_SPECIAL = 4 };

struct dsi_tok {
  int no_jit;       /* DSI_TOK_NO_JIT: patterns run on PCRE2's interpreter */
  char *pool;
  size_t pool_len, pool_cap;

  int32_t n_ids;    /* 1 + the largest id */
  int32_t ids_cap;  /* the id arrays' room (>= n_ids) */
  tok_span *text;   /* [n_ids] model.vocab's string for the id */
  tok_span *shown;  /* [n_ids] the token as HF's id_to_token gives it (added tokens first) */
  tok_span *bytes;  /* [n_ids] what the decoder yields for it */
  tok_span *key;    /* [n_ids] model tokens: the word bytes BPE builds them from */
  uint8_t *flags;   /* [n_ids] TOK_F_* */
  int32_t n_vocab;  /* entries of model.vocab (HF numbers added tokens from here) */

  /* ---- the BPE model ---- */
  tok_strmap key_map;  /* model-space bytes -> id */
  tok_strmap text_map; /* vocab string -> id */
  tok_mergemap merges;
  int32_t n_merges;
  int byte_level;       /* words reach BPE as raw bytes (ByteLevel pre-tokenizer) */
  int32_t byte_id[256]; /* byte-level: the id of each byte's char, -1 none */
  int ignore_merges, byte_fallback, fuse_unk;
  int32_t unk_id;       /* -1 none */
  int32_t fallback_id[256]; /* byte_fallback: "<0xXX>" ids, -1 none */

  /* ---- added tokens ---- */
  tok_added *added;
  size_t n_added;
  tok_trie trie_raw;  /* normalized == false: matched on the raw text */
  tok_trie trie_norm; /* normalized == true: matched after the normalizer */
  pcre2_code *re_word; /* single_word's \w, as Rust's regex crate defines it */

  /* ---- normalizer, pre-tokenizer, decoder, post-processor ---- */
  tok_norm *norm;
  size_t n_norm;
  tok_pre *pre;
  size_t n_pre;
  int decoder;
  int32_t prefix_ids[4], suffix_ids[4]; /* DSI_TOK_ADD_SPECIAL */
  int n_prefix, n_suffix;
  int32_t bos_id, eos_id;
  char desc[512];
};

/* ---- helpers shared by the tokenizer's files ---- */
uint64_t dsi_tok_hash(const void *p, size_t n);
int32_t dsi_tok_map_find(const dsi_tok *tok, const tok_strmap *m, const void *s, size_t n);
static inline const char *tok_str(const dsi_tok *tok, tok_span sp) {
  return sp.off == TOK_NONE ? NULL : tok->pool + sp.off;
}
static inline uint64_t tok_mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}
/* The merge of (a, b): its rank (UINT32_MAX: none) and the merged id. */
static inline uint32_t tok_merge_find(const tok_mergemap *m, int32_t a, int32_t b, int32_t *id) {
  if (!m->slots) return UINT32_MAX;
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  size_t i = (size_t)tok_mix64(key) & m->mask;
  for (;;) {
    const tok_merge *s = &m->slots[i];
    if (s->key == key) { *id = s->id; return s->rank; }
    if (s->key == UINT64_MAX) return UINT32_MAX;
    i = (i + 1) & m->mask;
  }
}
/* Is the code point Unicode White_Space (what Oniguruma's and Rust's \s mean)? */
static inline int tok_is_white_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}
/* Decode one code point of valid UTF-8 at s (n >= 1); returns its length. */
static inline size_t tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
  uint8_t b = s[0];
  if (b < 0x80 || n < 2) { *cp = b; return 1; }
  if (b < 0xE0) { *cp = (uint32_t)(b & 0x1F) << 6 | (s[1] & 0x3F); return 2; }
  if (b < 0xF0 || n < 4) {
    if (n < 3) { *cp = b; return 1; }
    *cp = (uint32_t)(b & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    return 3;
  }
  *cp = (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
  return 4;
}
static inline size_t tok_utf8_encode(uint32_t cp, char *out) {
  if (cp < 0x80) { out[0] = (char)cp; return 1; }
  if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* ---- one encode call's working state (tok_encode.c drives, tok_bpe.c merges) ---- */
typedef struct tok_cache tok_cache;
typedef struct tok_hsym tok_hsym;
typedef struct tok_hent tok_hent;
typedef struct tok_enc {
  const dsi_tok *tok;
  int flags;
  dsi_err *err;
  int32_t *ids; /* the output */
  size_t n, cap;
  pcre2_match_data *md;
  pcre2_match_context *mctx; /* with a bigger JIT stack, made on demand */
  pcre2_jit_stack *jstack;
  char *clean; /* the text with invalid UTF-8 replaced */
  size_t clean_len, clean_cap;
  char *norm;  /* a normalized piece */
  size_t norm_len, norm_cap;
  char *pfx;   /* a piece with ByteLevel's prefix space */
  size_t pfx_cap;
  int32_t *sym; /* BPE: symbols of the word */
  uint32_t *rank;
  int32_t *mid;
  size_t work_cap;
  tok_hsym *hs; /* BPE on long words: linked symbols and a heap of pairs */
  tok_hent *heap;
  size_t hs_cap, heap_cap;
  tok_cache *cache; /* word -> ids, for long inputs */
} tok_enc;

int dsi_tok_enc_push(tok_enc *e, int32_t id);
/* BPE one pre-tokenized word (model-space bytes: raw bytes when byte-level)
 * and append its ids. Returns 0 or a negative status. */
int dsi_tok_bpe_word(tok_enc *e, const uint8_t *w, size_t n);
void dsi_tok_bpe_cache_enable(tok_enc *e);
void dsi_tok_bpe_release(tok_enc *e);

/* Growable byte buffers (tok_utf8.c): reserve room for `need` bytes, or
 * append n bytes keeping a NUL after them. 0, or -1 out of memory. */
int dsi_tok_buf_reserve(char **buf, size_t *cap, size_t need);
int dsi_tok_buf_append(char **buf, size_t *len, size_t *cap, const void *s, size_t n);

/* Apply the normalizer to s into *out (grown with realloc). Returns 0 or -1 (no memory). */
int dsi_tok_normalize(const dsi_tok *tok, const char *s, size_t n, char **out, size_t *len, size_t *cap);

#endif
