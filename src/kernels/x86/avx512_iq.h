/* kernels: what the AVX-512 integer matmuls (avx512_int4.c, avx512_int8.c)
 * share besides their driver (iq_driver.h): VNNI's dot product and the
 * epilogues of one activation row. Included only by files compiled with
 * the AVX-512 flags. */
#ifndef DSI_AVX512_IQ_H
#define DSI_AVX512_IQ_H

#include "base/base.h"
#include "kernels/gemm.h"
#include "kernels/x86/avx512_math.h"
#include "kernels/x86/iq_driver.h"

#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
/* bytes of W prefetched ahead into L2, as the other AVX-512 kernels (avx512.c) */
#define PF_AHEAD 4096

/* u8 x s8 dot products, VNNI's vpdpbusd as asm (the files are not compiled
 * for VNNI; only CPUs with it get here), the activations' 4 bytes
 * broadcast from memory inside the instruction */
ALWAYS_INLINE __m512i dot_vnni(__m512i acc, __m512i w, const int8_t *x) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)x));
  return acc;
}

/* ---- epilogues: the row's scale multiplied in, then stored / added ---- */
static void iq_epi_row(const dsi_gemm *g, int i, int r, int nj, const float *t) {
  const __mmask16 k = (__mmask16)((1u << nj) - 1);
  const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(t), _mm512_set1_ps(g->xq_scale[i]));
  if (g->epi == DSI_EPI_STORE) {
    _mm512_mask_storeu_ps(g->y + (size_t)i * g->ldy + r, k, v);
    return;
  }
  float *y = g->y + (size_t)g->y_rows[i] * g->ldy + r;
  /* the row's next 16 outputs, which the next panel adds to: scattered
   * rows past the L2 (a prefill's routed outputs) would stall each add on
   * the L3 */
  _mm_prefetch((const char *)(y + DSI_TILE_N), _MM_HINT_T0);
  __m512 p = _mm512_mul_ps(_mm512_set1_ps(g->y_scale[i]), v);
  __asm__("" : "+v"(p)); /* not contracted into an fma: the oracle's rounding */
  _mm512_mask_storeu_ps(y, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, y), p));
}

static void iq_epi_silu(const dsi_gemm *g, int i, int r2, const float *ta, const float *tb) {
  const __m512 s = _mm512_set1_ps(g->xq_scale[i]);
  _mm512_storeu_ps(g->y + (size_t)i * g->ldy + r2,
                   silu_mul512(_mm512_mul_ps(_mm512_loadu_ps(ta), s), _mm512_mul_ps(_mm512_loadu_ps(tb), s)));
}

#endif
