/* kernels: AVX2 math shared by the files compiled with AVX2 flags (the
 * matmul kernels' SiLU epilogue, the attention softmax). */
#ifndef DSI_AVX2_MATH_H
#define DSI_AVX2_MATH_H

#include <immintrin.h>

#include "kernels/x86/exp_impl.h"

static inline __m256 round256(__m256 x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* p 2^n, n in [-150, 129], as two halves' exponent fields (each a normal
 * float), which also rounds a subnormal result once (AVX-512's scalef) */
static inline __m256 scale2_256(__m256 p, __m256 n) {
  const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23)));
  return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23)));
}
/* e^x (exp_impl.h), 8 lanes */
DSI_EXP_DEFINE(exp256, __m256, _mm256, round256, scale2_256)

/* silu(g) * u, lane by lane: g / (1 + e^-g) * u, the AVX-512 kernels'
 * operations (avx512_math.h) on 8 lanes: the AVX2 matmuls' SiLU-mul
 * epilogue */
static inline __m256 silu_mul256(__m256 g, __m256 u) {
  __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp256(_mm256_sub_ps(_mm256_setzero_ps(), g))));
  return _mm256_mul_ps(s, u);
}

#endif
