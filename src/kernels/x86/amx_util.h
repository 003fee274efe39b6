/* kernels: what the AMX kernels (amx.c, amx_int8.c) and the AMX peak share —
 * loading the tile configuration and the fused epilogues of a 32x32 block
 * of results. Included only by files compiled with the AMX flags. */
#ifndef DSI_AMX_UTIL_H
#define DSI_AMX_UTIL_H

#include "kernels/gemm.h"
#include "base/base.h"
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

/* Tiles of 64-byte rows (palette 1), tile t with rows[t] rows. GCC 12's
 * _tile_loadconfig claims to read 8 bytes, so -O3 may drop the stores that
 * fill the rest: load it with an asm whose operand is all 64. */
static inline void tiles_configure_rows(const uint8_t rows[8]) {
  _Alignas(64) uint8_t cfg[64];
  memset(cfg, 0, sizeof cfg);
  cfg[0] = 1; /* palette */
  for (int t = 0; t < 8; t++) {
    cfg[16 + 2 * t] = 64; /* bytes per row */
    cfg[48 + t] = rows[t];
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(*(const struct { uint8_t b[64]; } *)cfg));
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

#endif
