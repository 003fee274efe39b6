/* tokenizer: decoding ids back to text — the decoder's bytes of each id
 * joined (ByteLevel) or the tokens joined by spaces (no decoder), invalid
 * UTF-8 replaced by U+FFFD as HF's from_utf8_lossy does — and the
 * incremental detokenizer, whose pieces concatenate to the full decode. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

/* 1: decode it, 0: skip it, < 0: error. */
static int use_id(const dsi_tok *t, int32_t id, int flags, size_t at, dsi_err *err) {
  if (id < 0 || id >= t->n_ids || t->bytes[id].off == TOK_NONE) {
    if (flags & DSI_TOK_SKIP_UNKNOWN) return 0;
    return dsi_errf(err, DSI_E_INVAL, "decode: id %d (position %zu) is not a token of this tokenizer (ids 0..%d)", id,
                    at, t->n_ids - 1);
  }
  if ((flags & DSI_TOK_SKIP_SPECIAL) && (t->flags[id] & TOK_F_SPECIAL)) return 0;
  return 1;
}

int dsi_tok_decode(const dsi_tok *t, const int32_t *ids, size_t n, int flags, char **text, size_t *len,
                   dsi_err *err) {
  *text = NULL;
  if (len) *len = 0;
  char *raw = NULL, *out = NULL;
  size_t rl = 0, rc_ = 0, ol = 0, oc = 0;
  int any = 0;
  for (size_t i = 0; i < n; i++) {
    int u = use_id(t, ids[i], flags, i, err);
    if (u < 0) {
      free(raw);
      return u;
    }
    if (!u) continue;
    tok_span b = t->bytes[ids[i]];
    if ((t->decoder == TOK_DEC_NONE && any++ && dsi_tok_buf_append(&raw, &rl, &rc_, " ", 1)) ||
        dsi_tok_buf_append(&raw, &rl, &rc_, t->pool + b.off, b.len))
      goto oom;
  }
  if (dsi_utf8_lossy_append(&out, &ol, &oc, (const uint8_t *)(raw ? raw : ""), rl)) goto oom;
  free(raw);
  *text = out;
  if (len) *len = ol;
  return DSI_OK;
oom:
  free(raw);
  free(out);
  return dsi_errf(err, DSI_E_NOMEM, "decode: out of memory (%zu ids)", n);
}

/* ---- incremental detokenizer ---- */

struct dsi_detok {
  const dsi_tok *tok;
  int flags;
  uint8_t pend[4]; /* the start of a UTF-8 sequence the next token may finish */
  size_t npend;
  int any;         /* a token was shown (no decoder: spaces go between) */
  char *buf;       /* pending bytes + this token's */
  size_t buf_len, buf_cap;
  char *out;       /* the piece handed out */
  size_t out_len, out_cap;
  size_t pushed;   /* ids pushed so far: the position an error names */
};

int dsi_detok_open(dsi_detok **out, const dsi_tok *tok, int flags, dsi_err *err) {
  *out = calloc(1, sizeof **out);
  if (!*out) return dsi_errf(err, DSI_E_NOMEM, "detokenizer: out of memory");
  (*out)->tok = tok;
  (*out)->flags = flags;
  return DSI_OK;
}

void dsi_detok_reset(dsi_detok *d) {
  d->npend = 0;
  d->any = 0;
  d->pushed = 0;
}

void dsi_detok_free(dsi_detok *d) {
  if (!d) return;
  free(d->buf);
  free(d->out);
  free(d);
}

int dsi_detok_push(dsi_detok *d, int32_t id, const char **piece, size_t *len, dsi_err *err) {
  const dsi_tok *t = d->tok;
  d->out_len = 0;
  *piece = "";
  *len = 0;
  int u = use_id(t, id, d->flags, d->pushed++, err);
  if (u <= 0) return u;
  tok_span b = t->bytes[id];
  if (t->decoder == TOK_DEC_NONE) { /* token strings are valid UTF-8 already */
    if ((d->any++ && dsi_tok_buf_append(&d->out, &d->out_len, &d->out_cap, " ", 1)) ||
        dsi_tok_buf_append(&d->out, &d->out_len, &d->out_cap, t->pool + b.off, b.len))
      goto oom;
  } else {
    d->buf_len = 0;
    if (dsi_tok_buf_append(&d->buf, &d->buf_len, &d->buf_cap, d->pend, d->npend) ||
        dsi_tok_buf_append(&d->buf, &d->buf_len, &d->buf_cap, t->pool + b.off, b.len))
      goto oom;
    const uint8_t *s = (const uint8_t *)d->buf;
    size_t n = d->buf_len, i = 0;
    d->npend = 0;
    while (i < n) {
      size_t ok = dsi_utf8_valid_prefix(s + i, n - i);
      if (dsi_tok_buf_append(&d->out, &d->out_len, &d->out_cap, s + i, ok)) goto oom;
      i += ok;
      if (i >= n) break;
      size_t k;
      if (dsi_utf8_next(s + i, n - i, &k) == DSI_UTF8_TRUNCATED) { /* wait for the rest */
        memcpy(d->pend, s + i, n - i);
        d->npend = n - i;
        break;
      }
      if (dsi_tok_buf_append(&d->out, &d->out_len, &d->out_cap, "\xEF\xBF\xBD", 3)) goto oom;
      i += k;
    }
  }
  if (d->out) *piece = d->out;
  *len = d->out_len;
  return DSI_OK;
oom:
  return dsi_errf(err, DSI_E_NOMEM, "detokenizer: out of memory");
}

int dsi_detok_flush(dsi_detok *d, const char **piece, size_t *len) {
  d->out_len = 0;
  *piece = "";
  *len = 0;
  if (!d->npend) return DSI_OK;
  d->npend = 0; /* an unfinished sequence is one maximal subpart: one U+FFFD */
  if (dsi_tok_buf_append(&d->out, &d->out_len, &d->out_cap, "\xEF\xBF\xBD", 3)) return DSI_E_NOMEM;
  *piece = d->out;
  *len = d->out_len;
  return DSI_OK;
}
