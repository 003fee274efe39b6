/* kernels: what the AMX kernels (amx.c, amx_int8.c) and the AMX peak share —
 * loading the tile configuration, and a vector e^x for the fused SiLU.
 * Included only by files compiled with the AMX flags. */
#ifndef DSI_AMX_UTIL_H
#define DSI_AMX_UTIL_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* Static helpers with short names: the kernels call them as their own. */

/* Every tile 16 rows of 64 bytes (palette 1): the one shape all our tile
 * products use (BF16 16x32, INT8 16x64, f32 / int32 C 16x16). GCC 12's
 * _tile_loadconfig claims to read 8 bytes, so -O3 may drop the stores that
 * fill the rest: load it with an asm whose operand is all 64. */
static inline void tiles_configure(void) {
  _Alignas(64) uint8_t cfg[64];
  memset(cfg, 0, sizeof cfg);
  cfg[0] = 1; /* palette */
  for (int t = 0; t < 8; t++) {
    cfg[16 + 2 * t] = 64; /* bytes per row */
    cfg[48 + t] = 16;     /* rows */
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(*(const struct { uint8_t b[64]; } *)cfg));
}

/* e^x, 1-2 ulp (Cephes' expf polynomial), saturating to 0 / inf */
static inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-104.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

/* silu(g) * u, lane-wise */
static inline __m512 silu_mul512(__m512 g, __m512 u) {
  __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

#endif
