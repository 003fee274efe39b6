/* kv: block pool and block tables of the paged latent cache (see kv.h). */
#include "kv/kv.h"

#include <stdlib.h>
#include <string.h>

int dsi_kv_init(dsi_kv *kv, int n_layers, int row, int block_size, int n_blocks, dsi_err *err) {
  memset(kv, 0, sizeof *kv);
  kv->n_layers = n_layers;
  kv->row = row;
  kv->block_size = block_size;
  kv->n_blocks = n_blocks;
  kv->layer = dsi_xcalloc(n_layers, sizeof(float *));
  size_t bytes = (size_t)n_blocks * block_size * row * sizeof(float);
  for (int l = 0; l < n_layers; l++) {
    kv->layer[l] = dsi_alloc_big(bytes);
    if (!kv->layer[l]) {
      dsi_kv_free(kv);
      return dsi_errf(err, DSI_E_NOMEM, "cannot allocate the KV cache: %d blocks of %d tokens (%zu MB per layer)",
                      n_blocks, block_size, bytes >> 20);
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
  free(kv->layer);
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
  for (int i = 0; i < need; i++) s->blocks[s->n_blocks++] = kv->free_list[--kv->n_free];
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
  s->len = n;
}
