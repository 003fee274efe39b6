/* kernels: a token's absorbed attention over the bf16 latent cache, kept
 * in position pairs so that AMX reads it as tiles with no re-layout.
 *
 * The cache's pair rows (tensor/paged.h) are read as tiles as they lie:
 *   - P V: 16 pair rows x 16 latent columns are B with K = the 32
 *     positions and N = 16 columns, A the probabilities [heads][32 positions];
 *   - q K^T: the same tile is A with M = 16 pair rows and K = 16 latent
 *     columns x 2 positions; B is q (8 heads a tile) written twice per head,
 *     once against the even position of each pair and once against the odd
 *     one (zero against the other), so output column 2h + parity is head
 *     h's score of position 2p + parity. Half the products are zeros; the
 *     other layout (rows of one position) would make P V re-layout the
 *     cache every step.
 *
 * What is computed, per head h (an online softmax: one pass
 * over the cache, in blocks of DSI_ATTN_PAIR_BLOCK positions from 0):
 *   s[u] = scale * sum_j bf16(q[h][j]) * K[u][j]     (f32 sums)
 *   per block: m' = max(m, max s), a = e^(m - m'), e[u] = e^(s[u] - m'),
 *              l = a l + sum e, p[u] = bf16(e[u]), o = a o + sum_u p[u] V[u][c],
 *              m = m'
 *   o[h][c] = o / l   (the sum of the unrounded weights normalizes, as the
 *                      official code normalizes in f32 before its bf16 cast)
 * The oracle (attn_ref.c) adds in column / position order with libm's
 * expf; AMX sums in the tile unit's order, its softmax on the vector
 * primitives (softmax_step) — within bf16 rounding of P of each other, not
 * bitwise. Each head depends on its own inputs only and the blocks on the
 * position only, so grouping heads (which follows the batch and the thread
 * count) changes no bit.
 * Positions past a sequence's length must hold finite values (0 x Inf is
 * NaN): the KV layer zeroes blocks when it hands them out. */
#ifndef DSI_ATTN_H
#define DSI_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/paged.h"

#define DSI_ATTN_PAIR_CHUNK 32  /* positions per tile; block sizes are multiples of it */
#define DSI_ATTN_PAIR_BLOCK 128 /* positions per online-softmax step: 147 KB of V3's cache, in L2 for every head group */
#define DSI_ATTN_PAIR_GROUP 16  /* heads per pass of a block: two q tiles */

/* Heads per call for n tokens of H heads on nth threads: all H (one pass
 * over the cache serves them all), split in multiples of 8 only as far as
 * it takes to give each thread one call. */
static inline int dsi_attn_pair_heads(int H, int n, int nth) {
  int groups = (H + 7) / 8, share = nth / (n > 1 ? n : 1);
  int calls = share < groups ? share : groups; /* calls per token */
  if (calls < 1) calls = 1;
  return ((H + calls - 1) / calls + 7) / 8 * 8;
}

typedef struct dsi_attn_pairs {
  const uint16_t *cache;  /* one layer's pair rows */
  const int32_t *table;   /* the sequence's block table */
  int block_size;         /* a multiple of DSI_ATTN_PAIR_CHUNK */
  int row, kvl;           /* row = kvl + rope, both multiples of 16 */
  int nh;                 /* heads: every block of the cache is read once for all of them */
  int n;                  /* positions 0..n-1, n >= 1 */
} dsi_attn_pairs;

/* workspace bytes for nh heads of width row (64-aligned) */
#define DSI_ATTN_PAIRS_WS(nh, row)                                                                        \
  (((size_t)(nh) + DSI_ATTN_PAIR_GROUP - 1) / DSI_ATTN_PAIR_GROUP * 2 * ((size_t)(row) / 16 * 1024) + \
   (size_t)DSI_ATTN_PAIR_GROUP * DSI_ATTN_PAIR_BLOCK * 6 + ((size_t)(nh) * 8 + 63) / 64 * 64 + 1024)

/* o[h * ldo + c] for h < nh, c < kvl; q: [nh][row] f32 with row stride
 * ldq (q_lat | q_pe), rounded to bf16 here */
typedef void dsi_attn_pairs_fn(const dsi_attn_pairs *a, const float *q, int ldq, float scale, float *o, int ldo,
                               void *ws);
dsi_attn_pairs_fn dsi_attn_pairs_ref, dsi_attn_pairs_amx;
/* (the AMX version, and dsi_attn_qk_tiles / pv_tiles, run where a kernel
 * table's amx is set: cpu.h) */

/* The same attention in f32, on a level's vector primitives (vec.h), over
 * the bf16 pair rows where AMX does not run the bf16 forward (read as they
 * are by the level's attn_qk_pairs / attn_pv_pairs where a call's heads
 * are one group of 8 or fewer; else, or at a level without those, each
 * block's rows widened into the workspace first: half the cache bytes
 * from memory, exactly widened, the same bits as f32 rows holding the
 * same values) or over f32 rows (the row-major models'): per head h, over blocks of DSI_ATTN_ROW_BLOCK positions
 * from 0, an online softmax —
 *   s[u] = scale * dot(q[h], K[u])                      (attn_qk's sums)
 *   per block: m' = max(m, max s), e[u] = e^(s[u] - m') (softmax_step),
 *              a = e^(m - m') (libm), l = a l + sum e, o = a o + sum_u e[u] V[u][c]
 *   o[h][c] = o / l
 * so the cache is read once per call for all nh heads, one block (74 KB
 * at V3's widths) staying in L2 beside 64 heads' q and sums (278 KB) while
 * every head's scores and sums take it, instead of twice per 8 heads over
 * the whole context. 32 positions: on a Zen 3 (512 KB of L2) 1.5x the
 * rate of 64 at 512-16384 positions, and 16 as slow as 64 (the softmax's
 * share grows). Heads run in
 * groups of 8 within a block; each depends on its own inputs and the
 * blocks on the position only, so grouping changes no bit, and every
 * level gives the same bits (the primitives' contract). */
#define DSI_ATTN_ROW_BLOCK 32
typedef struct dsi_attn_rows {
  const float *cache;   /* one layer's f32 rows [slots][row], or NULL: */
  const uint16_t *pairs; /* its bf16 pair rows (tensor/paged.h; block_size even) */
  const int32_t *table; /* the sequence's block table */
  int block_size;
  int row, kvl;         /* row = kvl + rope */
  int nh;               /* heads */
  int n;                /* positions 0..n-1, n >= 1 */
} dsi_attn_rows;
/* workspace bytes for nh heads of width row (64-aligned) */
#define DSI_ATTN_ROWS_WS(nh, row)                                                                          \
  ((((size_t)(nh) * (DSI_ATTN_ROW_BLOCK + 2) + (size_t)DSI_ATTN_ROW_BLOCK * (row)) * sizeof(float) + \
    DSI_ATTN_ROW_BLOCK * sizeof(void *) + 63) / 64 * 64)
struct dsi_vec_ops;
/* o[h * ldo + c] for h < nh, c < kvl; q: [nh][row] f32 with row stride ldq */
void dsi_attn_rows_run(const struct dsi_vec_ops *v, const dsi_attn_rows *a, const float *q, int ldq, float scale,
                       float *o, int ldo, void *ws);

/* The non-absorbed prefill's core on AMX BF16 tiles (graph/mla_prefill.c):
 * one head's nq <= 32 queries over a block of keys and values packed as
 * BF16 TILES weights, K [keys, qk] and Vt [v, keys]:
 *   qk: s[i * lds + u] = sum_d bf16(q[i * ldq + d]) K[u][d], u < K->rows
 *       (written up to the keys' last 16-row panel; lds covers it)
 *   pv: o[i * ldo + c] = ((o[i * ldo + c] alpha[i] +)
 *                          sum_u bf16(p[i * lds + u]) Vt[c][u]) (inv[i]), u < Vt->cols
 *       (o rescaled and added to when alpha is not NULL, else written; then
 *       times inv when it is not NULL; each step rounded on its own)
 * each bitwise what dsi_gemm_amx gives for the same matmul (a plain store,
 * or a scatter-add by a weight of 1 after o *= alpha): the same tile
 * products in the same order, one call instead of the driver's set-up, C
 * staging and epilogue.
 * ws: DSI_ATTN_TILES_WS(kpad) bytes, 64-aligned, kpad the matrix's. */
struct dsi_mat;
#define DSI_ATTN_TILES_WS(kpad) ((size_t)32 * (size_t)(kpad) * 2 + 4096)
void dsi_attn_qk_tiles(const struct dsi_mat *K, const float *q, int ldq, int nq, float *s, int lds, void *ws);
void dsi_attn_pv_tiles(const struct dsi_mat *Vt, const float *p, int lds, int nq, float *o, int ldo,
                       const float *alpha, const float *inv, void *ws);

#endif
