/* kv: the paged latent KV cache of MLA. Per token per layer it holds only
 * the normed c_kv (kv_lora_rank) and the rotated k_pe (qk_rope_head_dim).
 * Fixed-size blocks come from one pool; each sequence has a block table;
 * a sequence's blocks go back to the pool when it ends.
 *
 * Where AMX runs the bf16 forward, each layer keeps its rows in bf16
 * instead, in position pairs (tensor/paged.h) — DeepSeek's own cache dtype,
 * half the memory, and what the decode attention reads as tiles. Blocks
 * are zeroed when handed out (and past the length after a truncation), so
 * a pair's second position holds a finite value before it is written. */
#ifndef DSI_KV_H
#define DSI_KV_H

#include "base/base.h"
#include "tensor/paged.h"

typedef struct dsi_kv {
  int n_layers, row;      /* row = kv_lora_rank + qk_rope_head_dim floats */
  int block_size, n_blocks;
  float **layer;          /* [n_layers] -> [n_blocks * block_size, row]; entries NULL with pair */
  uint16_t **pair;        /* NULL, or [n_layers] -> [n_blocks * block_size / 2, 2 * row] bf16 */
  int32_t *free_list;     /* stack of free block ids */
  int n_free;
} dsi_kv;

typedef struct dsi_kv_seq {
  int32_t *blocks;        /* block table */
  int n_blocks, cap;
  int len;                /* tokens stored */
} dsi_kv_seq;

/* pairs: keep bf16 pair rows instead of f32 rows (block_size a multiple of
 * 32); huge: advise huge pages for the layers' blocks */
int dsi_kv_init(dsi_kv *kv, int n_layers, int row, int block_size, int n_blocks, int pairs, int huge, dsi_err *err);
void dsi_kv_free(dsi_kv *kv);
/* Make room for seq to hold n_tokens in total; DSI_E_CAPACITY when the pool
 * is out of blocks (nothing is taken then). */
int dsi_kv_reserve(dsi_kv *kv, dsi_kv_seq *s, int n_tokens, dsi_err *err);
/* Return all of seq's blocks to the pool. */
void dsi_kv_release(dsi_kv *kv, dsi_kv_seq *s);
/* Keep seq's first n tokens (n <= s->len) and the blocks they use; the
 * other blocks go back to the pool. */
void dsi_kv_truncate(dsi_kv *kv, dsi_kv_seq *s, int n);
/* cache row of position pos of seq (must be reserved) */
static inline int32_t dsi_kv_slot(const dsi_kv *kv, const dsi_kv_seq *s, int pos) {
  return dsi_paged_slot(s->blocks, kv->block_size, pos);
}

#endif
