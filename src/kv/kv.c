/* kv: the block pool, block tables and the prefix cache (see kv.h), in the
 * order a block lives: zeroed and handed out, registered with its tokens,
 * shared by matching sequences, released into the LRU list, evicted. */
#include "kv/kv.h"

#include <stdlib.h>
#include <string.h>

static size_t pair_bytes(const dsi_kv *kv) { return (size_t)kv->n_blocks * kv->block_size * kv->row * sizeof(uint16_t); }
static size_t f32_bytes(const dsi_kv *kv) { return (size_t)kv->n_blocks * kv->block_size * kv->row * sizeof(float); }

/* a record of what the pool did to the cache's memory, for the other ranks */
static void log_mem(dsi_kv *kv, int kind, int32_t a, int32_t b, int32_t c) {
  if (!kv->log_mem) return;
  if (kv->n_mem_log == kv->cap_mem_log) {
    int cap = kv->cap_mem_log ? 2 * kv->cap_mem_log : 64;
    int32_t *p = realloc(kv->mem_log, (size_t)cap * DSI_KV_MEM_WORDS * sizeof(int32_t));
    if (!p) {
      kv->mem_log_lost = 1;
      return;
    }
    kv->mem_log = p;
    kv->cap_mem_log = cap;
  }
  int32_t *r = kv->mem_log + (size_t)kv->n_mem_log++ * DSI_KV_MEM_WORDS;
  r[0] = kind, r[1] = a, r[2] = b, r[3] = c;
}

/* zero the pair rows' entries of slots [s0, s1) of block b, every layer */
static void pair_zero(dsi_kv *kv, int32_t b, int s0, int s1) {
  if (!kv->pair || s1 <= s0) return;
  log_mem(kv, DSI_KV_ZERO, b, s0, s1);
  size_t first = (size_t)b * kv->block_size;
  for (int l = 0; l < kv->n_layers; l++) {
    uint16_t *p = kv->pair[l];
    int s = s0;
    if (s & 1) { /* the odd half of a pair whose even slot stays */
      uint16_t *r = p + (first + s - 1) * kv->row;
      for (int j = 0; j < kv->row; j++) r[2 * j + 1] = 0;
      s++;
    }
    if (s < s1) memset(p + (first + s) * kv->row, 0, (size_t)(s1 - s) * kv->row * sizeof(uint16_t));
  }
}

/* the first n slots of block src into block dst (zeroed), every layer */
static void copy_slots(dsi_kv *kv, int32_t dst, int32_t src, int n) {
  size_t bs = (size_t)kv->block_size;
  log_mem(kv, DSI_KV_COPY, dst, src, n);
  for (int l = 0; l < kv->n_layers; l++) {
    if (!kv->pair) {
      memcpy(kv->layer[l] + dst * bs * kv->row, kv->layer[l] + src * bs * kv->row, (size_t)n * kv->row * sizeof(float));
      continue;
    }
    uint16_t *d = kv->pair[l] + dst * bs * kv->row, *s = kv->pair[l] + src * bs * kv->row;
    memcpy(d, s, (size_t)(n / 2) * 2 * kv->row * sizeof(uint16_t)); /* whole pairs */
    if (n & 1) { /* the even half of the last pair; its odd half stays zero */
      uint16_t *dr = d + (size_t)(n / 2) * 2 * kv->row, *sr = s + (size_t)(n / 2) * 2 * kv->row;
      for (int j = 0; j < kv->row; j++) dr[2 * j] = sr[2 * j];
    }
  }
}

/* ---- hashing: a block's parent is the chain hash of every token before it ---- */
#define ROOT_HASH 0x9e3779b97f4a7c15ull

static uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

static uint64_t chain_hash(uint64_t parent, const int32_t *toks, int n) {
  uint64_t h = parent;
  for (int i = 0; i < n; i++) h = mix(h ^ ((uint64_t)(uint32_t)toks[i] + 0x100000001b3ull * (uint64_t)(i + 1)));
  return h;
}

static int32_t *bucket_of(dsi_kv *kv, uint64_t parent) { return &kv->bucket[mix(parent) & (uint64_t)(kv->n_buckets - 1)]; }

/* ---- the LRU list of registered blocks no sequence holds ---- */
static void lru_push(dsi_kv *kv, int32_t b) {
  kv->lru_prev[b] = kv->lru_tail;
  kv->lru_next[b] = -1;
  if (kv->lru_tail >= 0) kv->lru_next[kv->lru_tail] = b;
  else kv->lru_head = b;
  kv->lru_tail = b;
  kv->n_lru++;
}

static void lru_remove(dsi_kv *kv, int32_t b) {
  int32_t p = kv->lru_prev[b], n = kv->lru_next[b];
  if (p >= 0) kv->lru_next[p] = n;
  else kv->lru_head = n;
  if (n >= 0) kv->lru_prev[n] = p;
  else kv->lru_tail = p;
  kv->lru_prev[b] = kv->lru_next[b] = -1;
  kv->n_lru--;
}

/* ---- registration ---- */
static void do_register(dsi_kv *kv, int32_t b, uint64_t parent, const int32_t *toks, int n, int group) {
  DSI_ASSERT(n > 0 && n <= kv->block_size && kv->n_tok[b] == 0);
  kv->n_tok[b] = n;
  kv->group[b] = group;
  kv->parent[b] = parent;
  kv->chain[b] = n == kv->block_size ? chain_hash(parent, toks, n) : 0;
  memcpy(kv->toks + (size_t)b * kv->block_size, toks, (size_t)n * sizeof(int32_t));
  int32_t *head = bucket_of(kv, parent);
  kv->sib[b] = *head;
  *head = b;
}

static void unregister(dsi_kv *kv, int32_t b) {
  if (!kv->n_tok[b]) return;
  for (int32_t *at = bucket_of(kv, kv->parent[b]); *at >= 0; at = &kv->sib[*at])
    if (*at == b) {
      *at = kv->sib[b];
      break;
    }
  kv->n_tok[b] = 0;
  kv->sib[b] = -1;
}

/* ---- the pool ---- */
int dsi_kv_init(dsi_kv *kv, int n_layers, int row, int block_size, int n_blocks, int pairs, int huge, dsi_err *err) {
  memset(kv, 0, sizeof *kv);
  kv->n_layers = n_layers;
  kv->row = row;
  kv->block_size = block_size;
  kv->n_blocks = n_blocks;
  kv->layer = calloc(n_layers, sizeof(float *));
  if (!kv->layer) return dsi_errf(err, DSI_E_NOMEM, "out of memory for the KV cache's %d layers", n_layers);
  for (int l = 0; !pairs && l < n_layers; l++) {
    kv->layer[l] = dsi_alloc_big(f32_bytes(kv), huge);
    if (!kv->layer[l]) {
      dsi_kv_free(kv);
      return dsi_errf(err, DSI_E_NOMEM, "cannot allocate the KV cache: %d blocks of %d tokens (%zu MB per layer)",
                      n_blocks, block_size, f32_bytes(kv) >> 20);
    }
  }
  if (pairs) {
    DSI_ASSERT(block_size % 32 == 0);
    kv->pair = calloc(n_layers, sizeof(uint16_t *));
    for (int l = 0; l < n_layers; l++)
      if (!kv->pair || !(kv->pair[l] = dsi_alloc_big(pair_bytes(kv), huge))) {
        dsi_kv_free(kv);
        return dsi_errf(err, DSI_E_NOMEM, "cannot allocate the bf16 KV cache: %d blocks of %d tokens (%zu MB per layer)",
                        n_blocks, block_size, pair_bytes(kv) >> 20);
      }
  }
  size_t nb = (size_t)n_blocks;
  kv->free_list = malloc(nb * sizeof(int32_t));
  kv->ref = calloc(nb, sizeof(int32_t));
  kv->n_tok = calloc(nb, sizeof(int32_t));
  kv->toks = malloc(nb * block_size * sizeof(int32_t));
  kv->parent = calloc(nb, sizeof(uint64_t));
  kv->chain = calloc(nb, sizeof(uint64_t));
  kv->sib = malloc(nb * sizeof(int32_t));
  kv->lru_prev = malloc(nb * sizeof(int32_t));
  kv->lru_next = malloc(nb * sizeof(int32_t));
  kv->group = calloc(nb, sizeof(int32_t));
  for (kv->n_buckets = 16; kv->n_buckets < 2 * n_blocks;) kv->n_buckets *= 2;
  kv->bucket = malloc((size_t)kv->n_buckets * sizeof(int32_t));
  if (!kv->free_list || !kv->ref || !kv->n_tok || !kv->toks || !kv->parent || !kv->chain || !kv->sib ||
      !kv->lru_prev || !kv->lru_next || !kv->bucket || !kv->group) {
    dsi_kv_free(kv);
    return dsi_errf(err, DSI_E_NOMEM, "out of memory for the KV cache's table of %d blocks", n_blocks);
  }
  for (int i = 0; i < kv->n_buckets; i++) kv->bucket[i] = -1;
  for (int i = 0; i < n_blocks; i++) {
    kv->free_list[i] = n_blocks - 1 - i; /* pop 0 first */
    kv->sib[i] = kv->lru_prev[i] = kv->lru_next[i] = -1;
  }
  kv->n_free = n_blocks;
  kv->lru_head = kv->lru_tail = -1;
  return DSI_OK;
}

void dsi_kv_free(dsi_kv *kv) {
  for (int l = 0; kv->layer && l < kv->n_layers; l++) dsi_free_big(kv->layer[l], f32_bytes(kv));
  for (int l = 0; kv->pair && l < kv->n_layers; l++) dsi_free_big(kv->pair[l], pair_bytes(kv));
  free(kv->layer);
  free(kv->pair);
  free(kv->free_list);
  free(kv->ref);
  free(kv->n_tok);
  free(kv->toks);
  free(kv->parent);
  free(kv->chain);
  free(kv->sib);
  free(kv->lru_prev);
  free(kv->lru_next);
  free(kv->bucket);
  free(kv->group);
  free(kv->mem_log);
  memset(kv, 0, sizeof *kv);
}

int dsi_kv_available(const dsi_kv *kv) { return kv->n_free + kv->n_lru; }
int dsi_kv_used(const dsi_kv *kv) { return kv->n_blocks - kv->n_free - kv->n_lru; }

/* a zeroed block for one holder: a free one, else the least recently
 * released registered one (its registration dropped); -1 when none */
static int32_t take_block(dsi_kv *kv) {
  int32_t b;
  if (kv->n_free) {
    b = kv->free_list[--kv->n_free];
  } else if (kv->n_lru) {
    b = kv->lru_head;
    lru_remove(kv, b);
    unregister(kv, b);
  } else {
    return -1;
  }
  pair_zero(kv, b, 0, kv->block_size);
  kv->ref[b] = 1;
  return b;
}

/* one holder fewer: at none, a registered block waits in the LRU list, any
 * other goes back to the pool */
static void drop_block(dsi_kv *kv, int32_t b) {
  DSI_ASSERT(kv->ref[b] > 0);
  if (--kv->ref[b]) return;
  if (kv->n_tok[b]) lru_push(kv, b);
  else kv->free_list[kv->n_free++] = b;
}

/* room in s's block table for n more; 0, or -1 out of memory */
static int seq_room(dsi_kv_seq *s, int n) {
  if (s->n_blocks + n <= s->cap) return 0;
  int cap = DSI_MAX(DSI_MAX(8, 2 * s->cap), s->n_blocks + n);
  int32_t *b = realloc(s->blocks, (size_t)cap * sizeof(int32_t));
  if (!b) return -1;
  s->blocks = b;
  s->cap = cap;
  return 0;
}

static void append_block(dsi_kv_seq *s, int32_t b) {
  DSI_ASSERT(s->n_blocks < s->cap); /* seq_room first */
  s->blocks[s->n_blocks++] = b;
}

int dsi_kv_reserve(dsi_kv *kv, dsi_kv_seq *s, int n_tokens, dsi_err *err) {
  int need = DSI_CEIL_DIV(n_tokens, kv->block_size) - s->n_blocks;
  if (need <= 0) return DSI_OK;
  if (need > dsi_kv_available(kv))
    return dsi_errf(err, DSI_E_CAPACITY, "KV cache full: %d more blocks of %d tokens needed, %d free of %d",
                    need, kv->block_size, dsi_kv_available(kv), kv->n_blocks);
  if (seq_room(s, need)) return dsi_errf(err, DSI_E_NOMEM, "out of memory for a block table of %d blocks", s->n_blocks + need);
  for (int i = 0; i < need; i++) append_block(s, take_block(kv));
  return DSI_OK;
}

void dsi_kv_release(dsi_kv *kv, dsi_kv_seq *s, const int32_t *toks) {
  int bs = kv->block_size;
  if (toks && s->len > s->n_reg * bs) { /* the last block, partial (or full and not yet committed) */
    dsi_kv_commit(kv, s, toks);
    int i = s->n_reg, n = s->len - i * bs;
    if (i < s->n_blocks && n > 0 && n < bs && kv->ref[s->blocks[i]] == 1)
      do_register(kv, s->blocks[i], s->chain, toks + (size_t)i * bs, n, s->group);
  }
  /* last block first, so the deepest are evicted first */
  for (int i = s->n_blocks - 1; i >= 0; i--) drop_block(kv, s->blocks[i]);
  free(s->blocks);
  memset(s, 0, sizeof *s);
}

void dsi_kv_truncate(dsi_kv *kv, dsi_kv_seq *s, int n) {
  DSI_ASSERT(n >= 0 && n <= s->len);
  int keep = DSI_CEIL_DIV(n, kv->block_size);
  while (s->n_blocks > keep) drop_block(kv, s->blocks[--s->n_blocks]);
  if (n % kv->block_size) { /* what the kept tail held goes, as a fresh block's */
    int32_t b = s->blocks[keep - 1];
    DSI_ASSERT(kv->ref[b] == 1);
    unregister(kv, b);
    pair_zero(kv, b, n % kv->block_size, kv->block_size);
  }
  if (s->n_reg > n / kv->block_size) { /* the chain goes back to the last whole block kept */
    s->n_reg = n / kv->block_size;
    s->chain = s->n_reg ? kv->chain[s->blocks[s->n_reg - 1]] : ROOT_HASH;
  }
  s->len = n;
}

void dsi_kv_commit(dsi_kv *kv, dsi_kv_seq *s, const int32_t *toks) {
  int bs = kv->block_size;
  if (!s->n_reg) s->chain = ROOT_HASH;
  for (int i = s->n_reg; (i + 1) * bs <= s->len; i++) {
    int32_t b = s->blocks[i];
    if (!kv->n_tok[b]) do_register(kv, b, s->chain, toks + (size_t)i * bs, bs, s->group);
    s->chain = kv->chain[b];
    s->n_reg = i + 1;
  }
}

/* tokens at the start of a and b that are equal, at most n */
static int common(const int32_t *a, const int32_t *b, int n) {
  int i = 0;
  while (i < n && a[i] == b[i]) i++;
  return i;
}

int dsi_kv_match(dsi_kv *kv, dsi_kv_seq *s, const int32_t *toks, int n) {
  DSI_ASSERT(s->n_blocks == 0 && s->len == 0);
  int bs = kv->block_size;
  uint64_t chain = ROOT_HASH;
  kv->queries += n;
  if (seq_room(s, n / bs + 1)) return 0; /* out of memory: no hit, the prompt is computed */
  int i = 0;
  for (; (i + 1) * bs <= n; i++) { /* whole blocks: shared */
    int32_t hit = -1;
    for (int32_t b = *bucket_of(kv, chain); b >= 0 && hit < 0; b = kv->sib[b])
      if (kv->parent[b] == chain && kv->n_tok[b] == bs && kv->group[b] == s->group &&
          common(kv->toks + (size_t)b * bs, toks + (size_t)i * bs, bs) == bs)
        hit = b;
    if (hit < 0) break;
    if (kv->ref[hit]++ == 0) lru_remove(kv, hit);
    append_block(s, hit);
    chain = kv->chain[hit];
  }
  s->n_reg = i;
  s->chain = chain;
  s->len = i * bs;
  /* then the longest matching start of a registered block, copied */
  int rest = DSI_MIN(n - i * bs, bs), best = 0;
  int32_t src = -1;
  for (int32_t b = *bucket_of(kv, chain); b >= 0 && rest > 0; b = kv->sib[b]) {
    if (kv->parent[b] != chain || kv->group[b] != s->group) continue;
    int m = common(kv->toks + (size_t)b * bs, toks + (size_t)i * bs, DSI_MIN(rest, kv->n_tok[b]));
    if (m > best) best = m, src = b;
  }
  if (best > 0) {
    if (kv->ref[src]++ == 0) lru_remove(kv, src); /* held while a block is taken: not evicted for it */
    int32_t dst = take_block(kv);
    if (dst >= 0) {
      copy_slots(kv, dst, src, best);
      append_block(s, dst);
      s->len += best;
    }
    drop_block(kv, src);
  }
  kv->hits += s->len;
  return s->len;
}

int dsi_kv_apply_mem_log(dsi_kv *kv, const int32_t *log, int n, dsi_err *err) {
  for (int i = 0; i < n; i++) {
    const int32_t *r = log + (size_t)i * DSI_KV_MEM_WORDS;
    int nb = kv->n_blocks, bs = kv->block_size;
    int ok = r[1] >= 0 && r[1] < nb &&
             (r[0] == DSI_KV_ZERO ? r[2] >= 0 && r[2] <= r[3] && r[3] <= bs
              : r[0] == DSI_KV_COPY ? r[2] >= 0 && r[2] < nb && r[3] >= 0 && r[3] <= bs : 0);
    if (!ok)
      return dsi_errf(err, DSI_E_FORMAT, "cache record %d of %d is not valid: {%d, %d, %d, %d}", i, n, r[0], r[1], r[2],
                      r[3]);
  }
  int was = kv->log_mem;
  kv->log_mem = 0;
  for (int i = 0; i < n; i++) {
    const int32_t *r = log + (size_t)i * DSI_KV_MEM_WORDS;
    if (r[0] == DSI_KV_ZERO) pair_zero(kv, r[1], r[2], r[3]);
    else copy_slots(kv, r[1], r[2], r[3]);
  }
  kv->log_mem = was;
  return DSI_OK;
}

void dsi_kv_reset_cache(dsi_kv *kv) {
  while (kv->n_lru) {
    int32_t b = kv->lru_head;
    lru_remove(kv, b);
    unregister(kv, b);
    kv->free_list[kv->n_free++] = b;
  }
  for (int32_t b = 0; b < kv->n_blocks; b++) unregister(kv, b);
}
