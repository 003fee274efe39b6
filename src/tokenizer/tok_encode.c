/* tokenizer: encoding, in HF's order — UTF-8 check, added tokens matched on
 * the raw text, the normalizer, normalized added tokens, the pre-tokenizer
 * (Split patterns run by PCRE2, ByteLevel), then BPE per word. Pieces flow
 * depth-first, so no stage builds a list of the whole text. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

#define CACHE_FROM_BYTES 4096 /* inputs this long get a BPE word cache */

static size_t utf8_len(uint8_t b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

/* ---- normalizer ---- */

static size_t ws_prefix(const char *s, size_t n) { /* leading White_Space, bytes */
  size_t i = 0;
  while (i < n) {
    uint32_t cp;
    size_t k = tok_utf8_decode((const uint8_t *)s + i, n - i, &cp);
    if (!tok_is_white_space(cp)) break;
    i += k;
  }
  return i;
}

static size_t ws_suffix_start(const char *s, size_t n) { /* where trailing White_Space begins */
  size_t end = n;
  while (end > 0) {
    size_t k = end - 1;
    while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    tok_utf8_decode((const uint8_t *)s + k, end - k, &cp);
    if (!tok_is_white_space(cp)) break;
    end = k;
  }
  return end;
}

int dsi_tok_normalize(const dsi_tok *t, const char *s, size_t n, char **out, size_t *len, size_t *cap) {
  char *tmp = NULL;
  size_t tcap = 0, tl;
  if (dsi_tok_buf_reserve(out, cap, n + 1)) return -1;
  memmove(*out, s, n);
  *len = n;
  for (size_t k = 0; k < t->n_norm; k++) {
    const tok_norm *nm = &t->norm[k];
    const char *cur = *out;
    size_t cl = *len;
    if (nm->kind == TOK_NORM_STRIP) {
      size_t a = nm->left ? ws_prefix(cur, cl) : 0;
      size_t b = nm->right ? ws_suffix_start(cur, cl) : cl;
      if (b < a) b = a;
      memmove(*out, cur + a, b - a);
      *len = b - a;
      continue;
    }
    if (nm->kind == TOK_NORM_PREPEND) {
      if (!cl) continue; /* HF prepends to non-empty strings only */
      if (dsi_tok_buf_reserve(out, cap, cl + nm->a.len + 1)) goto oom;
      memmove(*out + nm->a.len, *out, cl);
      memcpy(*out, tok_str(t, nm->a), nm->a.len);
      *len = cl + nm->a.len;
      continue;
    }
    /* Replace: every non-overlapping occurrence, left to right */
    const char *pat = tok_str(t, nm->a), *rep = tok_str(t, nm->b);
    size_t pl = nm->a.len, rl = nm->b.len;
    tl = 0;
    for (size_t i = 0; i < cl;) {
      const char *hit = pl <= cl - i ? memmem(cur + i, cl - i, pat, pl) : NULL;
      size_t upto = hit ? (size_t)(hit - cur) : cl;
      if (dsi_tok_buf_reserve(&tmp, &tcap, tl + (upto - i) + rl + 1)) goto oom;
      memcpy(tmp + tl, cur + i, upto - i);
      tl += upto - i;
      if (!hit) break;
      memcpy(tmp + tl, rep, rl);
      tl += rl;
      i = upto + pl;
    }
    if (dsi_tok_buf_reserve(out, cap, tl + 1)) goto oom;
    memcpy(*out, tmp, tl);
    *len = tl;
  }
  free(tmp);
  return 0;
oom:
  free(tmp);
  return -1;
}

/* ---- pre-tokenizer ---- */

static int run_pre(tok_enc *e, size_t step, const char *s, size_t n);

/* Next match of p at or after `from`: 0 found, 1 none, < 0 error. */
static int re_next(tok_enc *e, const tok_pre *p, const char *s, size_t n, size_t from, size_t *ms, size_t *me) {
  int rc = p->jit ? pcre2_jit_match(p->re, (PCRE2_SPTR)s, n, from, 0, e->md, e->mctx)
                  : pcre2_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !e->jstack) { /* a huge run: give JIT a bigger stack */
    e->mctx = pcre2_match_context_create(NULL);
    e->jstack = pcre2_jit_stack_create(64 << 10, 64 << 20, NULL);
    if (e->mctx && e->jstack) {
      pcre2_jit_stack_assign(e->mctx, NULL, e->jstack);
      rc = pcre2_jit_match(p->re, (PCRE2_SPTR)s, n, from, 0, e->md, e->mctx);
    }
  }
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* still too deep: the interpreter keeps its frames on the heap */
    rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, e->mctx);
  if (rc == PCRE2_ERROR_NOMATCH) return 1;
  if (rc < 0) {
    char msg[160];
    pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg);
    return dsi_errf(e->err, DSI_E_CAPACITY, "encode: pre-tokenizer pattern failed at byte %zu of a %zu-byte piece: %s",
                    from, n, msg);
  }
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
  *ms = ov[0];
  *me = ov[1];
  if (*ms > *me || *me > n) /* \K in a lookaround */
    return dsi_errf(e->err, DSI_E_UNSUPPORTED, "encode: pre-tokenizer pattern gave a backwards match");
  return 0;
}

/* Folding HF's (offsets, is_match) segments by the Split behavior. */
typedef struct fold {
  size_t a, b;    /* the held piece */
  int have, prev; /* a piece is held; the previous segment was a match */
} fold;

static int emit(tok_enc *e, size_t step, const char *s, size_t a, size_t b) {
  return b > a ? run_pre(e, step + 1, s + a, b - a) : 0;
}

static int fold_seg(tok_enc *e, size_t step, int beh, const char *s, fold *f, size_t a, size_t b, int m) {
  int rc = 0;
  switch (beh) {
  case TOK_SPLIT_ISOLATED: return emit(e, step, s, a, b);
  case TOK_SPLIT_REMOVED: return m ? 0 : emit(e, step, s, a, b);
  case TOK_SPLIT_CONTIGUOUS: /* runs of equal flags join */
  case TOK_SPLIT_MERGED_PREV: /* a match joins the non-match before it */
    if (f->have && (beh == TOK_SPLIT_CONTIGUOUS ? m == f->prev : (m && !f->prev))) {
      f->b = b;
    } else {
      if (f->have) rc = emit(e, step, s, f->a, f->b);
      f->a = a, f->b = b, f->have = 1;
    }
    f->prev = m;
    return rc;
  case TOK_SPLIT_MERGED_NEXT: /* a match joins the non-match after it */
    if (f->have) {
      f->have = 0;
      if (!m) return emit(e, step, s, f->a, b);
      rc = emit(e, step, s, f->a, f->b);
      if (rc) return rc;
    }
    if (m) {
      f->a = a, f->b = b, f->have = 1;
      return 0;
    }
    return emit(e, step, s, a, b);
  }
  return 0;
}

/* HF's Split: find_iter over the piece (an empty match right after the
 * previous match is skipped, the search then moves one char on), the gaps
 * and matches folded by the behavior, empty pieces dropped. */
static int split_step(tok_enc *e, size_t step, const tok_pre *p, const char *s, size_t n) {
  fold f = {0};
  size_t prev = 0, last_end = 0, last_match = 0;
  int have_last = 0, rc;
  while (last_end <= n) {
    size_t ms = 0, me = 0;
    rc = re_next(e, p, s, n, last_end, &ms, &me);
    if (rc == 1) break;
    if (rc) return rc;
    if (ms == me) {
      last_end = me < n ? me + utf8_len((uint8_t)s[me]) : n + 1;
      if (have_last && me == last_match) continue;
    } else {
      last_end = me;
    }
    have_last = 1;
    last_match = me;
    if (prev != ms && (rc = fold_seg(e, step, p->behavior, s, &f, prev, ms, p->invert))) return rc;
    if ((rc = fold_seg(e, step, p->behavior, s, &f, ms, me, !p->invert))) return rc;
    prev = me;
  }
  if (prev != n && (rc = fold_seg(e, step, p->behavior, s, &f, prev, n, p->invert))) return rc;
  return f.have ? emit(e, step, s, f.a, f.b) : 0;
}

static int run_pre(tok_enc *e, size_t step, const char *s, size_t n) {
  const dsi_tok *t = e->tok;
  if (!n) return 0;
  if (step == t->n_pre) return dsi_tok_bpe_word(e, (const uint8_t *)s, n);
  const tok_pre *p = &t->pre[step];
  if (p->kind == TOK_PRE_BYTELEVEL) {
    if (p->add_prefix_space && s[0] != ' ') {
      if (dsi_tok_buf_reserve(&e->pfx, &e->pfx_cap, n + 1))
        return dsi_errf(e->err, DSI_E_NOMEM, "encode: out of memory (%zu-byte piece)", n);
      e->pfx[0] = ' ';
      memcpy(e->pfx + 1, s, n);
      s = e->pfx, n++;
    }
    if (!p->re) return run_pre(e, step + 1, s, n);
  }
  return split_step(e, step, p, s, n);
}

/* ---- added tokens ---- */

/* The longest added token starting at s: its index in tok->added, or -1. */
static int32_t trie_longest(const tok_trie *tr, const uint8_t *s, size_t n, size_t *len) {
  int32_t cur = 0, best = -1;
  for (size_t i = 0; i < n; i++) {
    int32_t c = tr->node[cur].child;
    while (c >= 0 && tr->node[c].byte != s[i]) c = tr->node[c].sibling;
    if (c < 0) break;
    cur = c;
    if (tr->node[cur].added >= 0) best = tr->node[cur].added, *len = i + 1;
  }
  return best;
}

static int word_char(tok_enc *e, const char *s, size_t n) {
  return pcre2_match(e->tok->re_word, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, e->md, NULL) >= 0;
}

/* HF's AddedVocabulary::find_matches: leftmost-longest matches, the next
 * search after the match (not after its stripped whitespace), single_word
 * and special-as-text matches skipped, lstrip/rstrip widening the token. */
static int split_added(tok_enc *e, const tok_trie *tr, const char *s, size_t n,
                       int (*gap)(tok_enc *, const char *, size_t)) {
  const dsi_tok *t = e->tok;
  if (tr->n <= 1) return n ? gap(e, s, n) : 0;
  size_t start_offset = 0, pos = 0;
  int rc;
  while (pos < n) {
    size_t i = pos, mlen = 0;
    int32_t a = -1;
    for (; i < n; i++) {
      if (tr->n_first == 1) {
        const char *q = memchr(s + i, tr->only_first, n - i);
        if (!q) { i = n; break; }
        i = (size_t)(q - s);
      } else if (!tr->first[(uint8_t)s[i]]) {
        continue;
      }
      if ((a = trie_longest(tr, (const uint8_t *)s + i, n - i, &mlen)) >= 0) break;
    }
    if (a < 0) break;
    size_t start = i, stop = i + mlen;
    pos = stop;
    const tok_added *at = &t->added[a];
    if (at->special && (e->flags & DSI_TOK_SPECIAL_AS_TEXT)) continue;
    if (at->single_word) {
      int word_before = 0;
      if (start > 0) {
        size_t c = start - 1; /* the char that ends at start */
        while (c > 0 && ((uint8_t)s[c] & 0xC0) == 0x80) c--;
        word_before = word_char(e, s + c, start - c);
      }
      int word_after = stop < n && word_char(e, s + stop, utf8_len((uint8_t)s[stop]));
      if (word_before || word_after) continue;
    }
    if (at->lstrip) {
      size_t ns = ws_suffix_start(s, start);
      start = ns > start_offset ? ns : start_offset;
    }
    if (at->rstrip) stop += ws_prefix(s + stop, n - stop);
    if (start_offset < start && (rc = gap(e, s + start_offset, start - start_offset))) return rc;
    if ((rc = dsi_tok_enc_push(e, at->id))) return rc;
    start_offset = stop;
  }
  return start_offset < n ? gap(e, s + start_offset, n - start_offset) : 0;
}

static int pre_gap(tok_enc *e, const char *s, size_t n) { return run_pre(e, 0, s, n); }

/* A piece between raw-matched added tokens: normalize, then match the
 * normalized added tokens, then pre-tokenize what lies between. */
static int norm_gap(tok_enc *e, const char *s, size_t n) {
  const dsi_tok *t = e->tok;
  if (t->n_norm) {
    if (dsi_tok_normalize(t, s, n, &e->norm, &e->norm_len, &e->norm_cap))
      return dsi_errf(e->err, DSI_E_NOMEM, "encode: out of memory normalizing %zu bytes", n);
    s = e->norm, n = e->norm_len;
  }
  return split_added(e, &t->trie_norm, s, n, pre_gap);
}

/* ---- the call ---- */

static int push_fixes(tok_enc *e, const int32_t *ids, int n) {
  for (int i = 0; i < n; i++) {
    int rc = dsi_tok_enc_push(e, ids[i]);
    if (rc) return rc;
  }
  return 0;
}

int dsi_tok_encode(const dsi_tok *t, const char *text, size_t len, int flags, int32_t **ids, size_t *n,
                   dsi_err *err) {
  *ids = NULL;
  *n = 0;
  if (!text && len) return dsi_errf(err, DSI_E_INVAL, "encode: text is NULL");
  if (!text) text = "";
  tok_enc e = {.tok = t, .flags = flags, .err = err};
  int rc = DSI_OK;
  size_t ok = dsi_utf8_valid_prefix((const uint8_t *)text, len);
  if (ok < len) {
    if (!(flags & DSI_TOK_REPLACE_INVALID))
      return dsi_errf(err, DSI_E_INVAL, "encode: text is not valid UTF-8 at byte offset %zu (byte 0x%02X)", ok,
                      (uint8_t)text[ok]);
    if (dsi_utf8_lossy_append(&e.clean, &e.clean_len, &e.clean_cap, (const uint8_t *)text, len))
      return dsi_errf(err, DSI_E_NOMEM, "encode: out of memory (%zu bytes)", len);
    text = e.clean, len = e.clean_len;
  }
  e.md = pcre2_match_data_create(16, NULL);
  if (!e.md) {
    rc = dsi_errf(err, DSI_E_NOMEM, "encode: out of memory");
    goto out;
  }
  if (len >= CACHE_FROM_BYTES) dsi_tok_bpe_cache_enable(&e);
  if (flags & DSI_TOK_ADD_BOS) {
    if (t->bos_id < 0) {
      rc = dsi_errf(err, DSI_E_INVAL, "encode: BOS asked for, but the tokenizer has no bos_token "
                    "(it comes from tokenizer_config.json)");
      goto out;
    }
    int special_has_it = (flags & DSI_TOK_ADD_SPECIAL) && t->n_prefix && t->prefix_ids[0] == t->bos_id;
    if (!special_has_it && (rc = dsi_tok_enc_push(&e, t->bos_id))) goto out;
  }
  if ((flags & DSI_TOK_ADD_SPECIAL) && (rc = push_fixes(&e, t->prefix_ids, t->n_prefix))) goto out;
  if ((rc = split_added(&e, &t->trie_raw, text, len, norm_gap))) goto out;
  if ((flags & DSI_TOK_ADD_SPECIAL) && (rc = push_fixes(&e, t->suffix_ids, t->n_suffix))) goto out;
out:
  dsi_tok_bpe_release(&e);
  pcre2_match_data_free(e.md);
  if (e.jstack) pcre2_jit_stack_free(e.jstack);
  if (e.mctx) pcre2_match_context_free(e.mctx);
  free(e.clean);
  free(e.norm);
  free(e.pfx);
  if (rc) {
    free(e.ids);
    return rc;
  }
  *ids = e.ids;
  *n = e.n;
  return DSI_OK;
}
