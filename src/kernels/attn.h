/* kernels: a token's absorbed attention over the bf16 latent cache, kept
 * in position pairs so that AMX reads it as tiles with no re-layout.
 *
 * The pair layout. Cache slots 2p and 2p+1 share one "pair row" of
 * 2 * row bf16: element j of slot s is at pair[(s / 2) * 2 * row + 2 j +
 * (s & 1)]. 16 pair rows hold 32 consecutive positions (block sizes are
 * multiples of 32, so they are one block's) and 16 columns of them are one
 * 16x32 bf16 tile in VNNI order:
 *   - P V: the tile is B with K = the 32 positions and N = 16 latent
 *     columns, A the probabilities [heads][32 positions];
 *   - q K^T: the tile is A with M = 16 pair rows and K = 16 latent columns
 *     x 2 positions; B is q (8 heads a tile) written twice per head, once against the even
 *     position of each pair and once against the odd one (zero against the
 *     other), so output column 2h + parity is head h's score of position
 *     2p + parity. Half the products are zeros; the other layout (rows of
 *     one position) would make P V re-layout the cache every step.
 *
 * What is computed:
 *   s[h][u] = scale * sum_j bf16(q[h][j]) * K[u][j] over the row,
 *   o[h][c] = sum_u p[h][u] * V[u][c], u up to n rounded up to 32 (p is
 *             zero past n),
 * with f32 sums: the oracle (ref.c) adds in column / position order; the
 * tile unit sums in an order of its own (within f32 rounding of the same,
 * not bitwise). Each score and output depends on its own head's inputs
 * only, so grouping heads (which follows the batch and the thread count)
 * changes no bit.
 * Positions past a sequence's length must hold finite values (0 x Inf is
 * NaN): the KV layer zeroes blocks when it hands them out. */
#ifndef DSI_ATTN_H
#define DSI_ATTN_H

#include <stddef.h>
#include <stdint.h>

#define DSI_ATTN_PAIR_HEADS 16 /* heads per call at most (two q tiles of 8) */
#define DSI_ATTN_PAIR_CHUNK 32 /* positions per tile; block sizes are multiples of it */

/* element 0 of slot's row in the pair layout; element j is 2 j further */
static inline size_t dsi_kv_pair_at(int row, int32_t slot) {
  return (size_t)(slot >> 1) * 2 * row + (size_t)(slot & 1);
}

typedef struct dsi_attn_pairs {
  const uint16_t *cache;  /* one layer's pair rows */
  const int32_t *table;   /* the sequence's block table */
  int block_size;         /* a multiple of DSI_ATTN_PAIR_CHUNK */
  int row, kvl;           /* row = kvl + rope, both multiples of 16 */
  int nh;                 /* heads, 1..DSI_ATTN_PAIR_HEADS (more read the cache once for more heads) */
  int n;                  /* positions 0..n-1 */
} dsi_attn_pairs;

/* scores s[h * lds + u] for u < n rounded up to 32 (lds at least that);
 * q: [nh][row] f32 with row stride ldq, rounded to bf16 here. ws: at least
 * DSI_ATTN_PAIRS_WS(row) bytes, 64-aligned. */
#define DSI_ATTN_PAIRS_WS(row) ((size_t)(row) / 16 * 2048 + 1024)
typedef void dsi_attn_qk_fn(const dsi_attn_pairs *a, const float *q, int ldq, float scale, float *s, int lds,
                            void *ws);
/* o[h * ldo + c] = sum_u p[h * ldp + u] V[u][c] for c < kvl, over n rounded
 * up to 32 positions (p zero past n) */
typedef void dsi_attn_pv_fn(const dsi_attn_pairs *a, const uint16_t *p, int ldp, float *o, int ldo);

dsi_attn_qk_fn dsi_attn_pairs_qk_ref, dsi_attn_pairs_qk_amx;
dsi_attn_pv_fn dsi_attn_pairs_pv_ref, dsi_attn_pairs_pv_amx;
/* the AMX pair is built and this CPU runs it (at the current ISA level) */
int dsi_attn_pairs_amx_ok(void);

#endif
