/* kernels: one INT4 group's quantization at load (vec.h to_i4) on 8-lane
 * AVX2 vectors, for the AVX2 and AVX-512 levels' tables: the reference's
 * (dsi_i4_group_ref, kernels/quant_i4.c) operations, bit for bit. Its
 * eight partial sums are already lanes (element c of the group goes to
 * sum c % 8), its clamps are min/max (`v < 7 ? v : 7` is vminps(v, 7),
 * NaN included), and every product is rounded before its add: the empty
 * asm keeps GCC from fusing the two (it contracts vector intrinsics as it
 * does scalars). The largest magnitude is taken as the reference takes
 * it: the first element of the largest |w|, NaN never. On one Zen 3 core,
 * groups of 32: 2.5 ns a weight against the reference's 13. */
#ifndef DSI_I4_GROUP_H
#define DSI_I4_GROUP_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

/* the product v rounded (not fused into the add), then to the nearest
 * level as the reference rounds it */
static inline __m256 i4_level8(__m256 v) {
  const __m256 magic = _mm256_set1_ps(12582912.0f); /* 1.5 x 2^23: rounds half to even */
  __asm__("" : "+x"(v));
  v = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
  return _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(7.0f)), _mm256_set1_ps(-8.0f));
}

/* acc + a b, the product rounded first */
static inline __m256 i4_mul_add(__m256 acc, __m256 a, __m256 b) {
  __m256 p = _mm256_mul_ps(a, b);
  __asm__("" : "+x"(p));
  return _mm256_add_ps(acc, p);
}

/* the reference's sum of its eight partial sums */
static inline float i4_fold8(__m256 v) {
  float s[8];
  _mm256_storeu_ps(s, v);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static float i4_group8(const float *w, int n, int8_t *l) {
  /* the largest |w| (as integers: the order of non-negative floats), NaN lanes left out */
  const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  __m256i big = _mm256_setzero_si256();
  for (int c = 0; c < n; c += 8) {
    __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(w + c)), absm);
    a = _mm256_andnot_si256(_mm256_cmpgt_epi32(a, inf), a);
    big = _mm256_max_epu32(big, a);
  }
  uint32_t lanes[8], top = 0;
  _mm256_storeu_si256((__m256i *)lanes, big);
  for (int j = 0; j < 8; j++) top = lanes[j] > top ? lanes[j] : top;
  float mx = 0;
  if (top) { /* the first element of that magnitude */
    const __m256i t = _mm256_set1_epi32((int)top);
    for (int c = 0; c < n; c += 8) {
      __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(w + c)), absm);
      int hit = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, t)));
      if (hit) {
        mx = w[c + __builtin_ctz((unsigned)hit)];
        break;
      }
    }
  }
  if (!(mx != 0) || !isfinite(mx)) {
    for (int c = 0; c < n; c++) l[c] = 0;
    return mx == 0 ? 0.0f : mx;
  }
  /* every candidate in one pass over the group: its own two sums per lane,
   * each over the elements in order as in the reference */
  enum { NC = 2 * DSI_I4_SEARCH + 1 };
  float inv[NC];
  __m256 s[NC], q[NC];
  for (int i = 0; i < NC; i++) {
    inv[i] = -(8.0f + DSI_I4_STEP * (float)(i - DSI_I4_SEARCH)) / mx;
    s[i] = q[i] = _mm256_setzero_ps();
  }
  for (int c = 0; c < n; c += 8) {
    const __m256 x = _mm256_loadu_ps(w + c);
#pragma GCC unroll 8
    for (int i = 0; i < NC; i++) {
      const __m256 v = i4_level8(_mm256_mul_ps(x, _mm256_broadcast_ss(inv + i)));
      s[i] = i4_mul_add(s[i], x, v);
      q[i] = i4_mul_add(q[i], v, v);
    }
  }
  float best = -1, d = 0, binv = -8.0f / mx;
  for (int i = 0; i < NC; i++) {
    const float sumlx = i4_fold8(s[i]), suml2 = i4_fold8(q[i]);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      best = sumlx * sumlx / suml2;
      d = sumlx / suml2;
      binv = inv[i];
    }
  }
  const __m256 vb = _mm256_set1_ps(binv);
  for (int c = 0; c < n; c += 8) {
    const __m256i k = _mm256_cvtps_epi32(i4_level8(_mm256_mul_ps(_mm256_loadu_ps(w + c), vb)));
    const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
    _mm_storel_epi64((__m128i *)(l + c), _mm_packs_epi16(h, h));
  }
  return d;
}

#endif
