/* tokenizer: the BPE merge loop. A word's symbols merge pair by pair, the
 * lowest-ranked pair first and the leftmost among equals, exactly as HF's
 * Word::merge_all: a rescan for short words, a heap over linked symbols
 * (O(n log n)) for long ones, and a per-call cache of recent words. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

#define NAIVE_MAX 64         /* words up to this many symbols rescan; longer use the heap */
#define CACHE_SLOTS 8192     /* power of two */
#define CACHE_KEY_MAX 48     /* longest word cached, bytes */
#define CACHE_BYTES (1 << 18)
#define CACHE_IDS (1 << 16)

struct tok_hsym {
  int32_t id, prev, next;
  int32_t dead;
};
struct tok_hent {
  uint32_t rank, pos;
  int32_t id;
};

/* ---- word cache ---- */

typedef struct cache_slot {
  uint64_t hash; /* 0: empty */
  uint32_t key_off, ids_off;
  uint16_t key_len, n_ids;
} cache_slot;

struct tok_cache {
  cache_slot slot[CACHE_SLOTS];
  uint8_t bytes[CACHE_BYTES];
  int32_t ids[CACHE_IDS];
  size_t n_slots, n_bytes, n_ids;
};

void dsi_tok_bpe_cache_enable(tok_enc *e) {
  if (!e->cache) e->cache = calloc(1, sizeof *e->cache); /* none: just slower */
}

static cache_slot *cache_find(tok_cache *c, const uint8_t *w, size_t n, uint64_t h) {
  for (size_t i = h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
    cache_slot *s = &c->slot[i];
    if (!s->hash || (s->hash == h && s->key_len == n && !memcmp(c->bytes + s->key_off, w, n))) return s;
  }
}

static void cache_put(tok_cache *c, const uint8_t *w, size_t n, uint64_t h, const int32_t *ids, size_t k) {
  if (k > UINT16_MAX) return;
  if (c->n_slots * 2 >= CACHE_SLOTS || c->n_bytes + n > CACHE_BYTES || c->n_ids + k > CACHE_IDS) {
    memset(c->slot, 0, sizeof c->slot); /* full: start over */
    c->n_slots = c->n_bytes = c->n_ids = 0;
  }
  cache_slot *s = cache_find(c, w, n, h);
  if (s->hash) return;
  s->hash = h;
  s->key_off = (uint32_t)c->n_bytes;
  s->key_len = (uint16_t)n;
  s->ids_off = (uint32_t)c->n_ids;
  s->n_ids = (uint16_t)k;
  memcpy(c->bytes + c->n_bytes, w, n);
  memcpy(c->ids + c->n_ids, ids, k * sizeof *ids);
  c->n_bytes += n;
  c->n_ids += k;
  c->n_slots++;
}

/* ---- output ---- */

int dsi_tok_enc_push(tok_enc *e, int32_t id) {
  if (e->n == e->cap) {
    size_t c = e->cap ? e->cap * 2 : 64;
    int32_t *p = realloc(e->ids, c * sizeof *p);
    if (!p) return dsi_errf(e->err, DSI_E_NOMEM, "encode: out of memory for %zu ids", c);
    e->ids = p;
    e->cap = c;
  }
  e->ids[e->n++] = id;
  return DSI_OK;
}

static int reserve_work(tok_enc *e, size_t n) {
  if (n <= e->work_cap) return 0;
  size_t c = e->work_cap ? e->work_cap : 256;
  while (c < n) c *= 2;
  int32_t *s = realloc(e->sym, c * sizeof *s);
  if (s) e->sym = s;
  uint32_t *r = realloc(e->rank, c * sizeof *r);
  if (r) e->rank = r;
  int32_t *m = realloc(e->mid, c * sizeof *m);
  if (m) e->mid = m;
  if (!s || !r || !m) return dsi_errf(e->err, DSI_E_NOMEM, "encode: out of memory for a word of %zu symbols", n);
  e->work_cap = c;
  return 0;
}

/* ---- merging ---- */

/* Short words: keep each adjacent pair's rank, merge the first minimum,
 * refresh its two neighbours. */
static size_t merge_naive(const tok_mergemap *mm, int32_t *sym, uint32_t *rank, int32_t *mid, size_t n) {
  for (size_t i = 0; i + 1 < n; i++) rank[i] = tok_merge_find(mm, sym[i], sym[i + 1], &mid[i]);
  while (n > 1) {
    size_t best = 0;
    uint32_t br = rank[0];
    for (size_t i = 1; i + 1 < n; i++)
      if (rank[i] < br) br = rank[i], best = i;
    if (br == UINT32_MAX) break;
    sym[best] = mid[best];
    memmove(sym + best + 1, sym + best + 2, (n - best - 2) * sizeof *sym);
    size_t tail = n >= best + 3 ? n - best - 3 : 0; /* pairs after the one that vanished */
    memmove(rank + best + 1, rank + best + 2, tail * sizeof *rank);
    memmove(mid + best + 1, mid + best + 2, tail * sizeof *mid);
    n--;
    if (best > 0) rank[best - 1] = tok_merge_find(mm, sym[best - 1], sym[best], &mid[best - 1]);
    if (best + 1 < n) rank[best] = tok_merge_find(mm, sym[best], sym[best + 1], &mid[best]);
  }
  return n;
}

static int hent_less(const tok_hent *a, const tok_hent *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(tok_hent *h, size_t *n, tok_hent v) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!hent_less(&v, &h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
}

static tok_hent heap_pop(tok_hent *h, size_t *n) {
  tok_hent top = h[0], last = h[--*n];
  size_t i = 0, m = *n;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= m) break;
    if (c + 1 < m && hent_less(&h[c + 1], &h[c])) c++;
    if (!hent_less(&h[c], &last)) break;
    h[i] = h[c];
    i = c;
  }
  if (m) h[i] = last;
  return top;
}

/* Long words: HF's own scheme. Every pair ever formed is pushed once; a
 * popped entry still holds if its left symbol lives, has a right neighbour
 * and that pair still merges into the same token. */
static int merge_heap(tok_enc *e, size_t n, size_t *out_n) {
  const tok_mergemap *mm = &e->tok->merges;
  if (n > e->hs_cap) {
    tok_hsym *p = realloc(e->hs, n * sizeof *p);
    if (!p) return dsi_errf(e->err, DSI_E_NOMEM, "encode: out of memory for a word of %zu symbols", n);
    e->hs = p;
    e->hs_cap = n;
  }
  /* at most n - 1 initial pairs plus two per merge */
  size_t hcap = 3 * n;
  if (hcap > e->heap_cap) {
    tok_hent *p = realloc(e->heap, hcap * sizeof *p);
    if (!p) return dsi_errf(e->err, DSI_E_NOMEM, "encode: out of memory for a word of %zu symbols", n);
    e->heap = p;
    e->heap_cap = hcap;
  }
  tok_hsym *hs = e->hs;
  tok_hent *heap = e->heap;
  size_t hn = 0;
  for (size_t i = 0; i < n; i++)
    hs[i] = (tok_hsym){e->sym[i], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, 0};
  for (size_t i = 0; i + 1 < n; i++) {
    int32_t id;
    uint32_t r = tok_merge_find(mm, hs[i].id, hs[i + 1].id, &id);
    if (r != UINT32_MAX) heap_push(heap, &hn, (tok_hent){r, (uint32_t)i, id});
  }
  while (hn) {
    tok_hent top = heap_pop(heap, &hn);
    tok_hsym *cur = &hs[top.pos];
    if (cur->dead || cur->next < 0) continue;
    tok_hsym *right = &hs[cur->next];
    int32_t id;
    if (tok_merge_find(mm, cur->id, right->id, &id) == UINT32_MAX || id != top.id) continue;
    cur->id = top.id;
    right->dead = 1;
    cur->next = right->next;
    if (cur->next >= 0) hs[cur->next].prev = (int32_t)top.pos;
    uint32_t r;
    if (cur->prev >= 0 && (r = tok_merge_find(mm, hs[cur->prev].id, cur->id, &id)) != UINT32_MAX)
      heap_push(heap, &hn, (tok_hent){r, (uint32_t)cur->prev, id});
    if (cur->next >= 0 && (r = tok_merge_find(mm, cur->id, hs[cur->next].id, &id)) != UINT32_MAX)
      heap_push(heap, &hn, (tok_hent){r, top.pos, id});
  }
  size_t k = 0;
  for (int32_t i = 0; i >= 0; i = hs[i].next) e->sym[k++] = hs[i].id;
  *out_n = k;
  return 0;
}

/* ---- initial symbols ---- */

/* A char (its bytes in the word's alphabet) with no token: HF's byte
 * fallback ("<0xXX>" per byte) or the unknown token, fused when fuse_unk;
 * dropped when the model has neither. */
static void add_unknown(const dsi_tok *t, int32_t *sym, size_t *ns, int32_t *unk_run, const uint8_t *c, size_t k) {
  if (t->byte_fallback) {
    size_t i = 0;
    while (i < k && t->fallback_id[c[i]] >= 0) i++;
    if (i == k) { /* HF adds these ahead of a pending unknown */
      for (i = 0; i < k; i++) sym[(*ns)++] = t->fallback_id[c[i]];
      return;
    }
  }
  if (t->unk_id < 0) return;
  if (*unk_run && !t->fuse_unk) sym[(*ns)++] = t->unk_id;
  *unk_run = 1;
}

int dsi_tok_bpe_word(tok_enc *e, const uint8_t *w, size_t n) {
  const dsi_tok *t = e->tok;
  if (!n) return 0;
  if (t->ignore_merges) {
    int32_t id = dsi_tok_map_find(t, &t->key_map, w, n);
    if (id >= 0) return dsi_tok_enc_push(e, id);
  }
  uint64_t h = 0;
  if (e->cache && n <= CACHE_KEY_MAX) {
    h = dsi_tok_hash(w, n) | 1;
    cache_slot *s = cache_find(e->cache, w, n, h);
    if (s->hash) {
      for (size_t i = 0; i < s->n_ids; i++) {
        int rc = dsi_tok_enc_push(e, e->cache->ids[s->ids_off + i]);
        if (rc) return rc;
      }
      return 0;
    }
  }
  if (n > (1u << 28)) /* symbol positions are 32-bit; HF would need ~50 bytes a symbol too */
    return dsi_errf(e->err, DSI_E_CAPACITY, "encode: a %zu-byte word with no break is too long (limit 256 MiB)", n);
  int rc = reserve_work(e, 4 * n + 4);
  if (rc) return rc;
  int32_t *sym = e->sym;
  size_t ns = 0;
  int32_t unk_run = 0; /* an unknown is pending (HF adds it before the next known char) */
  if (t->byte_level) {
    for (size_t i = 0; i < n; i++) {
      int32_t id = t->byte_id[w[i]];
      if (id >= 0) {
        if (unk_run) sym[ns++] = t->unk_id, unk_run = 0;
        sym[ns++] = id;
      } else {
        char c[4];
        size_t k = tok_utf8_encode(dsi_bytelevel_char(w[i]), c);
        add_unknown(t, sym, &ns, &unk_run, (const uint8_t *)c, k);
      }
    }
  } else {
    for (size_t i = 0; i < n;) {
      uint32_t cp;
      size_t k = tok_utf8_decode(w + i, n - i, &cp);
      int32_t id = dsi_tok_map_find(t, &t->key_map, w + i, k);
      if (id >= 0) {
        if (unk_run) sym[ns++] = t->unk_id, unk_run = 0;
        sym[ns++] = id;
      } else {
        add_unknown(t, sym, &ns, &unk_run, w + i, k);
      }
      i += k;
    }
  }
  if (unk_run) sym[ns++] = t->unk_id;
  if (ns <= NAIVE_MAX) {
    ns = merge_naive(&t->merges, sym, e->rank, e->mid, ns);
  } else {
    rc = merge_heap(e, ns, &ns);
    if (rc) return rc;
    sym = e->sym;
  }
  if (e->n + ns > e->cap) {
    size_t c = e->cap ? e->cap : 64;
    while (c < e->n + ns) c *= 2;
    int32_t *p = realloc(e->ids, c * sizeof *p);
    if (!p) return dsi_errf(e->err, DSI_E_NOMEM, "encode: out of memory for %zu ids", c);
    e->ids = p;
    e->cap = c;
  }
  memcpy(e->ids + e->n, sym, ns * sizeof *sym);
  e->n += ns;
  if (h) cache_put(e->cache, w, n, h, sym, ns);
  return 0;
}

void dsi_tok_bpe_release(tok_enc *e) {
  free(e->sym);
  free(e->rank);
  free(e->mid);
  free(e->hs);
  free(e->heap);
  free(e->cache);
  e->sym = e->mid = NULL;
  e->rank = NULL;
  e->hs = NULL;
  e->heap = NULL;
  e->cache = NULL;
}
