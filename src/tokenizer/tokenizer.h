/* tokenizer: internal API of the byte-level BPE tokenizer loaded from a
 * Hugging Face tokenizer.json. The public subset (open, encode, decode, the
 * incremental detokenizer) is declared in dsinfer.h; this adds what the
 * engine, the tools and the tests use beyond it. */
#ifndef DSI_TOKENIZER_H
#define DSI_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "dsinfer.h"

/* ---- token table ---- */
/* The token's text as tokenizer.json spells it (byte-level chars such as
 * "Ġthe", or an added token's content); NULL if id names no token. */
const char *dsi_tok_id_to_token(const dsi_tok *tok, int32_t id, size_t *len);
/* The bytes the decoder yields for id (before UTF-8 repair); NULL if none. */
const char *dsi_tok_id_bytes(const dsi_tok *tok, int32_t id, size_t *len);
/* 1 if id is an added token marked "special" (skipped by DSI_TOK_SKIP_SPECIAL). */
int dsi_tok_is_special(const dsi_tok *tok, int32_t id);
/* 1 if id is any added token (matched in text before BPE). */
int dsi_tok_is_added(const dsi_tok *tok, int32_t id);
/* How the loaded file is put together, one line, for --verbose and tests. */
void dsi_tok_describe(const dsi_tok *tok, char *buf, size_t cap);

/* ---- a tokenizer for a generated checkpoint (tools' mkmodel) ---- */
typedef struct dsi_tok_made {
  int32_t bos_id, eos_id; /* of the tokenizer written; -1 when it has none */
  int vocab_size;         /* 1 + its largest id */
  int n_merges;           /* of the generated one; 0 when copied */
  char from[4096];        /* the tokenizer.json copied; "" when generated */
} dsi_tok_made;
/* Write dir/tokenizer.json and tokenizer_config.json for a model of
 * vocab_size ids. src names a tokenizer.json or its folder to copy: when
 * its ids do not fit, an error if must_fit, else a generated one instead.
 * NULL generates a small byte-level BPE one (DeepSeek's special tokens, V3
 * chat template; at most ~536 ids, all of vocab_size when it is smaller,
 * ids dense from 0). The written files are read back. */
int dsi_tok_write_checkpoint(const char *dir, const char *src, int must_fit, int vocab_size, dsi_tok_made *out,
                             dsi_err *err);

/* ---- UTF-8 (Unicode 15 table 3-7; invalid data is replaced by maximal
 * subparts, as Rust's from_utf8_lossy and WHATWG's decoder do) ---- */
enum { DSI_UTF8_OK = 0, DSI_UTF8_INVALID = 1, DSI_UTF8_TRUNCATED = 2 };
/* Classify the sequence at s[0..n): OK (*len = its length), INVALID (*len =
 * the maximal subpart to replace, >= 1) or TRUNCATED (a valid prefix that
 * runs into the end of the buffer; *len = n). n must be >= 1. */
int dsi_utf8_next(const uint8_t *s, size_t n, size_t *len);
/* Length of the longest valid UTF-8 prefix of s (n if all valid). */
size_t dsi_utf8_valid_prefix(const uint8_t *s, size_t n);
/* Append s with each invalid subpart replaced by U+FFFD to *buf (grown with
 * realloc); a TRUNCATED tail is replaced too. Returns 0, or -1 out of memory. */
int dsi_utf8_lossy_append(char **buf, size_t *len, size_t *cap, const uint8_t *s, size_t n);

/* GPT-2's byte <-> char map used by ByteLevel: the code point standing for
 * byte b, and the byte a code point stands for (-1 if none). */
uint32_t dsi_bytelevel_char(uint8_t b);
int dsi_bytelevel_byte(uint32_t cp);

#endif
