/* tensor: the paged latent cache as a view. A layer's cache is rows of
 * fixed-size blocks; a sequence's block table maps its positions to slots
 * (block * block_size + offset). The kv/ layer owns the pool and the
 * tables; this is the arithmetic every reader of the cache shares — the
 * forward's ops and the attention kernels, which sit below kv/.
 *
 * Rows are f32 [n_slots, row], or (a packed model's default) bf16 in
 * position pairs: slots 2p and 2p+1 share one "pair row" of 2 * row
 * bf16, element j of slot s at pair[(s / 2) * 2 * row + 2 j + (s & 1)].
 * 16 pair rows hold 32 consecutive positions (block sizes are multiples
 * of 32, so they are one block's) and 16 columns of them are one 16x32
 * bf16 tile in VNNI order — what the decode attention reads with no
 * re-layout (kernels/attn.h). */
#ifndef DSI_PAGED_H
#define DSI_PAGED_H

#include <stddef.h>
#include <stdint.h>

/* the slot holding position pos of the sequence whose block table is table */
static inline int32_t dsi_paged_slot(const int32_t *table, int block_size, int pos) {
  return table[pos / block_size] * block_size + pos % block_size;
}

/* element 0 of slot's row in the pair layout; element j is 2 j further */
static inline size_t dsi_paged_pair_at(int row, int32_t slot) {
  return (size_t)(slot >> 1) * 2 * row + (size_t)(slot & 1);
}

#endif
