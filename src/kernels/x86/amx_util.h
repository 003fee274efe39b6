/* kernels: what the AMX kernels (amx.c, amx_int8.c, amx_attn.c) and the
 * AMX peak share — loading the tile configuration, the fused epilogues of a
 * 32x32 block of results, and the BF16 tile loop over a 2x2 block of C
 * tiles. Included only by files compiled with the AMX flags. */
#ifndef DSI_AMX_UTIL_H
#define DSI_AMX_UTIL_H

#include "kernels/gemm.h"
#include "base/base.h"
#include "kernels/x86/amx_tiles.h"
#include "kernels/x86/avx512_math.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* Static helpers with short names: the kernels call them as their own. */

/* Tile registers: C for M-half i and panel j is tile 2i+j; A for M-half i
 * is 4+i; B for panel j is 6+j. Every tile is 16 rows of 64 bytes. The tile
 * intrinsics paste their number into asm, so these must be literals. */
#define T_C00 0
#define T_C01 1
#define T_C10 2
#define T_C11 3
#define T_A0 4
#define T_A1 5
#define T_B0 6
#define T_B1 7

/* Tiles of 64-byte rows (palette 1), tile t with rows[t] rows */
static inline void tiles_configure_rows(const uint8_t rows[8]) {
  _Alignas(64) uint8_t cfg[64];
  memset(cfg, 0, sizeof cfg);
  for (int t = 0; t < 8; t++) tile_cfg_set(cfg, t, rows[t], 64);
  tile_config(cfg);
}

/* Every tile 16 rows: the one shape the matmuls use (BF16 16x32, INT8
 * 16x64, f32 / int32 C 16x16). */
static inline void tiles_configure(void) {
  static const uint8_t all16[8] = {16, 16, 16, 16, 16, 16, 16, 16};
  tiles_configure_rows(all16);
}

/* The last, partial M block of activations (m % 32 rows of a, row stride
 * lda bytes) copied to *sp and zero-padded to 16 or 32 rows, so it loads as
 * whole tiles; *sp moves past it. NULL when m is a multiple of 32. */
static inline uint8_t *stage_m_tail(const void *a, size_t lda, int m, uint8_t **sp) {
  const int mtail = m % 32, rows = mtail > 16 ? 32 : 16;
  if (!mtail) return NULL;
  uint8_t *t = *sp;
  memcpy(t, (const uint8_t *)a + (size_t)(m - mtail) * lda, (size_t)mtail * lda);
  memset(t + (size_t)mtail * lda, 0, (size_t)(rows - mtail) * lda);
  *sp += (size_t)rows * lda;
  return t;
}

/* c: one block of results [32][32] f32 (row stride 32): rows i0 + [0,
 * nrows) of the product, times row_scale[i0 + r] when row_scale is not
 * NULL (INT8's activation scales); panel0 the first W panel, nn panels in
 * c. Applies g's epilogue. */
static inline void epilogue(const dsi_gemm *g, const float *c, const float *row_scale, int i0, int nrows,
                            int panel0, int nn) {
  const dsi_mat *w = g->w;
  if (g->epi == DSI_EPI_SILU_PAIRS) {
    float *y = g->y + (size_t)(panel0 / 2) * DSI_TILE_N;
    for (int r = 0; r < nrows; r++) {
      __m512 gt = _mm512_load_ps(c + r * 32), up = _mm512_load_ps(c + r * 32 + 16);
      if (row_scale) {
        __m512 xs = _mm512_set1_ps(row_scale[i0 + r]);
        gt = _mm512_mul_ps(gt, xs);
        up = _mm512_mul_ps(up, xs);
      }
      _mm512_storeu_ps(y + (size_t)(i0 + r) * g->ldy, silu_mul512(gt, up));
    }
    return;
  }
  for (int j = 0; j < nn; j++) {
    int col0 = (panel0 + j) * DSI_TILE_N, ncols = DSI_MIN(DSI_TILE_N, w->rows - col0);
    __mmask16 mask = (__mmask16)((1u << ncols) - 1);
    for (int r = 0; r < nrows; r++) {
      __m512 v = _mm512_load_ps(c + r * 32 + j * 16);
      int i = i0 + r;
      if (row_scale) v = _mm512_mul_ps(v, _mm512_set1_ps(row_scale[i]));
      if (g->epi == DSI_EPI_STORE) {
        _mm512_mask_storeu_ps(g->y + (size_t)i * g->ldy + col0, mask, v);
      } else {
        float *y = g->y + (size_t)g->y_rows[i] * g->ldy + col0;
        __m512 o = _mm512_maskz_loadu_ps(mask, y);
        _mm512_mask_storeu_ps(y, mask, _mm512_fmadd_ps(_mm512_set1_ps(g->y_scale[i]), v, o));
      }
    }
  }
}

/* ---- the BF16 tile loop: nm x nn C tiles over ks K steps (amx.c's
 * matmul, amx_attn.c's prefill attention) ---- */
#define TILE_BYTES 1024 /* one 16x32 bf16 tile: a K step of an A block or of a B panel */
/* What one M block prefetches into L2 while its tiles multiply: a share of
 * the next pair's B chunk (lines of two panels) and a share of the next A
 * chunk (lines of rows of xb), spread evenly over its K steps. */
typedef struct {
  const uint8_t *b0, *b1; /* next B: this block's first line in each panel */
  int nb;                 /* B lines per panel per step */
  const uint8_t *a;       /* next A chunk: its first 16-row block, at its first K step */
  size_t lda;             /* bytes from one 16-row block to the next */
  int aks;                /* K steps of the next A chunk */
  int l0, l1;             /* this block's lines of it: line l is in block l / (16 aks), at l % (16 aks) */
  int na;                 /* A lines per step */
} tile_prefetch;
/* nothing to prefetch (no lines per step) */
static const tile_prefetch k_no_prefetch __attribute__((unused));

/* a: the K steps of a 16-row block of activations' tiles, 1 KiB apart, and
 * lda bytes on those of the next 16 rows; b0/b1: the K steps of two
 * panels, 1 KiB apart. nm, nn are constants after inlining. */
static inline __attribute__((always_inline, unused)) void tiles_mac(const uint8_t *a, size_t lda, const uint8_t *b0,
                                                                    const uint8_t *b1, int ks, int nm, int nn,
                                                                    const tile_prefetch *pf) {
  const uint8_t *a1 = a + lda;
  int l = pf->l0;
  for (int s = 0; s < ks; s++) {
    tile_load(T_B0, b0 + (size_t)s * TILE_BYTES, 64);
    tile_load(T_A0, a + (size_t)s * TILE_BYTES, 64);
    tile_dpbf16ps(T_C00, T_A0, T_B0);
    if (nm == 2) {
      tile_load(T_A1, a1 + (size_t)s * TILE_BYTES, 64);
      tile_dpbf16ps(T_C10, T_A1, T_B0);
    }
    if (nn == 2) {
      tile_load(T_B1, b1 + (size_t)s * TILE_BYTES, 64);
      tile_dpbf16ps(T_C01, T_A0, T_B1);
      if (nm == 2) tile_dpbf16ps(T_C11, T_A1, T_B1);
    }
    for (int j = 0; j < pf->nb; j++) {
      _mm_prefetch((const char *)pf->b0 + (size_t)(s * pf->nb + j) * 64, _MM_HINT_T1);
      _mm_prefetch((const char *)pf->b1 + (size_t)(s * pf->nb + j) * 64, _MM_HINT_T1);
    }
    for (int j = 0; j < pf->na && l < pf->l1; j++, l++)
      _mm_prefetch((const char *)pf->a + (size_t)(l / (16 * pf->aks)) * pf->lda + (size_t)(l % (16 * pf->aks)) * 64,
                   _MM_HINT_T1);
  }
}

/* A C block in memory is [32][32] f32 with row stride ld floats: tile
 * (i, j) at c + 16 i ld + 16 j. C starts from zero (first K chunk) or from
 * acc and ends in acc, the staging block, or y itself. */
static inline __attribute__((always_inline, unused)) void tiles_begin(const float *acc, int nm, int nn) {
  if (!acc) {
    tile_zero(T_C00);
    if (nn == 2) tile_zero(T_C01);
    if (nm == 2) tile_zero(T_C10);
    if (nm == 2 && nn == 2) tile_zero(T_C11);
    return;
  }
  tile_load(T_C00, acc, 128);
  if (nn == 2) tile_load(T_C01, acc + 16, 128);
  if (nm == 2) tile_load(T_C10, acc + 512, 128);
  if (nm == 2 && nn == 2) tile_load(T_C11, acc + 528, 128);
}

static inline __attribute__((always_inline, unused)) void tiles_end(float *out, size_t ld, int nm, int nn) {
  tile_store(T_C00, out, ld * 4);
  if (nn == 2) tile_store(T_C01, out + 16, ld * 4);
  if (nm == 2) tile_store(T_C10, out + 16 * ld, ld * 4);
  if (nm == 2 && nn == 2) tile_store(T_C11, out + 16 * ld + 16, ld * 4);
}

/* one call per block: not inlined into the drivers (the matmul calls it in
 * three places), cloned per constant argument by the compiler */
static __attribute__((noinline, unused)) void block_mac(const uint8_t *a, size_t lda, const uint8_t *b0,
                                                        const uint8_t *b1, int ks, int nm, int nn,
                                                        const tile_prefetch *pf, const float *acc_in, float *out,
                                                        size_t ldo) {
  /* the four shapes as separate loops, so tile numbers stay constants */
  if (nm == 2 && nn == 2) {
    tiles_begin(acc_in, 2, 2);
    tiles_mac(a, lda, b0, b1, ks, 2, 2, pf);
    tiles_end(out, ldo, 2, 2);
  } else if (nm == 2) {
    tiles_begin(acc_in, 2, 1);
    tiles_mac(a, lda, b0, b1, ks, 2, 1, pf);
    tiles_end(out, ldo, 2, 1);
  } else if (nn == 2) {
    tiles_begin(acc_in, 1, 2);
    tiles_mac(a, lda, b0, b1, ks, 1, 2, pf);
    tiles_end(out, ldo, 1, 2);
  } else {
    tiles_begin(acc_in, 1, 1);
    tiles_mac(a, lda, b0, b1, ks, 1, 1, pf);
    tiles_end(out, ldo, 1, 1);
  }
}

/* nm x nn tiles of C (kept in the tile registers) += ks K steps */
static inline __attribute__((unused)) void tiles_mac_any(const uint8_t *a, size_t lda, const uint8_t *b0,
                                                         const uint8_t *b1, int ks, int nm, int nn,
                                                         const tile_prefetch *pf) {
  if (nm == 2 && nn == 2) tiles_mac(a, lda, b0, b1, ks, 2, 2, pf);
  else if (nm == 2) tiles_mac(a, lda, b0, b1, ks, 2, 1, pf);
  else if (nn == 2) tiles_mac(a, lda, b0, b1, ks, 1, 2, pf);
  else tiles_mac(a, lda, b0, b1, ks, 1, 1, pf);
}

#endif
