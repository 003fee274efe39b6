/* kernels: AVX-512 math shared by the files compiled with AVX-512 flags
 * (the matmul kernels' SiLU epilogue, the attention softmax). */
#ifndef DSI_AVX512_MATH_H
#define DSI_AVX512_MATH_H

#include <immintrin.h>

#include "kernels/x86/exp_impl.h"

static inline __m512 round512(__m512 x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* e^x (exp_impl.h); 2^n by scalef */
DSI_EXP_DEFINE(exp512, __m512, _mm512, round512, _mm512_scalef_ps)

/* silu(g) * u, lane by lane: g / (1 + e^-g) * u (the matmuls' SiLU-mul
 * epilogue, the same in the AVX-512 and AMX kernels) */
static inline __m512 silu_mul512(__m512 g, __m512 u) {
  __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
  return _mm512_mul_ps(s, u);
}

#endif
