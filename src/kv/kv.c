/* kv: block pool and block tables of the paged latent cache (see kv.h). */
#include "kv/kv.h"

#include <stdlib.h>
#include <string.h>

static size_t pair_bytes(const dsi_kv *kv) { return (size_t)kv->n_blocks * kv->block_size * kv->row * sizeof(uint16_t); }

/* zero the pair rows' entries of slots [s0, s1) of block b, every layer */
static void pair_zero(dsi_kv *kv, int32_t b, int s0, int s1) {
  if (!kv->pair || s1 <= s0) return;
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

int dsi_kv_init(dsi_kv *kv, int n_layers, int row, int block_size, int n_blocks, int pairs, int huge, dsi_err *err) {
  memset(kv, 0, sizeof *kv);
  kv->n_layers = n_layers;
  kv->row = row;
  kv->block_size = block_size;
  kv->n_blocks = n_blocks;
  kv->layer = dsi_xcalloc(n_layers, sizeof(float *));
  size_t bytes = (size_t)n_blocks * block_size * row * sizeof(float);
  for (int l = 0; !pairs && l < n_layers; l++) {
    kv->layer[l] = dsi_alloc_big(bytes, huge);
    if (!kv->layer[l]) {
      dsi_kv_free(kv);
      return dsi_errf(err, DSI_E_NOMEM, "cannot allocate the KV cache: %d blocks of %d tokens (%zu MB per layer)",
                      n_blocks, block_size, bytes >> 20);
    }
  }
  if (pairs) {
    DSI_ASSERT(block_size % 32 == 0);
    kv->pair = dsi_xcalloc(n_layers, sizeof(uint16_t *));
    for (int l = 0; l < n_layers; l++)
      if (!(kv->pair[l] = dsi_alloc_big(pair_bytes(kv), huge))) {
        dsi_kv_free(kv);
        return dsi_errf(err, DSI_E_NOMEM, "cannot allocate the bf16 KV cache: %d blocks of %d tokens (%zu MB per layer)",
                        n_blocks, block_size, pair_bytes(kv) >> 20);
      }
  }
  kv->free_list = dsi_xmalloc(n_blocks * sizeof(int32_t));
  for (int i = 0; i < n_blocks; i++) kv->free_list[i] = n_blocks - 1 - i; /* pop 0 first */
  kv->n_free = n_blocks;
  return DSI_OK;
}

void dsi_kv_free(dsi_kv *kv) {
  if (kv->layer) {
    size_t bytes = (size_t)kv->n_blocks * kv->block_size * kv->row * sizeof(float);
    for (int l = 0; l < kv->n_layers; l++) dsi_free_big(kv->layer[l], bytes);
  }
  for (int l = 0; kv->pair && l < kv->n_layers; l++) dsi_free_big(kv->pair[l], pair_bytes(kv));
  free(kv->layer);
  free(kv->pair);
  free(kv->free_list);
  memset(kv, 0, sizeof *kv);
}

int dsi_kv_reserve(dsi_kv *kv, dsi_kv_seq *s, int n_tokens, dsi_err *err) {
  int need = DSI_CEIL_DIV(n_tokens, kv->block_size) - s->n_blocks;
  if (need <= 0) return DSI_OK;
  if (need > kv->n_free)
    return dsi_errf(err, DSI_E_CAPACITY, "KV cache full: %d more blocks of %d tokens needed, %d free of %d",
                    need, kv->block_size, kv->n_free, kv->n_blocks);
  if (s->n_blocks + need > s->cap) {
    s->cap = DSI_MAX(s->n_blocks + need, 2 * s->cap);
    s->blocks = dsi_xrealloc(s->blocks, s->cap * sizeof(int32_t));
  }
  for (int i = 0; i < need; i++) {
    int32_t b = kv->free_list[--kv->n_free];
    pair_zero(kv, b, 0, kv->block_size);
    s->blocks[s->n_blocks++] = b;
  }
  return DSI_OK;
}

void dsi_kv_release(dsi_kv *kv, dsi_kv_seq *s) {
  for (int i = s->n_blocks - 1; i >= 0; i--) kv->free_list[kv->n_free++] = s->blocks[i];
  free(s->blocks);
  memset(s, 0, sizeof *s);
}

void dsi_kv_truncate(dsi_kv *kv, dsi_kv_seq *s, int n) {
  DSI_ASSERT(n >= 0 && n <= s->len);
  int keep = DSI_CEIL_DIV(n, kv->block_size);
  while (s->n_blocks > keep) kv->free_list[kv->n_free++] = s->blocks[--s->n_blocks];
  if (n % kv->block_size) /* what the kept tail held goes, as a fresh block's */
    pair_zero(kv, s->blocks[keep - 1], n % kv->block_size, kv->block_size);
  s->len = n;
}
