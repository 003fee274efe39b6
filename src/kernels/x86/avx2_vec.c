/* kernels: the vector primitives (vec_impl.h) compiled for AVX2 + FMA, with
 * the decode attention's two loops (attn_qk, attn_pv) written out: the
 * compiler's vectorization of vec_impl.h's versions kept the head sums in
 * memory (27% of the FMA peak on a Zen 3). Results are bitwise those of
 * vec_impl.h's order: every dot summed as vec_dot sums it (16 lanes over
 * the columns, here two 8-lane halves, fused multiply-adds, the lanes
 * folded 8, 4, 2, 1), every output of attn_pv in the order of the rows. */
#include "kernels/vec.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#define PV_HEADS 8

static void vec_attn_qk_avx2(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                             const float *const *rows, int nu, int n, float scale);
static void vec_attn_pv_avx2(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                             const float *const *rows, int nu, int n);

#define VEC_SUFFIX avx2
#define VEC_NAME "avx2"
#define VEC_QKPV_OWN
#include "kernels/vec_impl.h"

/* a dot's 16 lanes (lo: 0-7, hi: 8-15) folded as vec_dot folds them:
 * lane j plus lane j + 8, then + 4, + 2, + 1 */
static inline float fold16(__m256 lo, __m256 hi) {
  const __m256 a = _mm256_add_ps(lo, hi);
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* Two rows and four heads at a time, one half of the 16 lanes: 8 chains,
 * each load of q serving two multiply-adds and each load of a row four.
 * The halves and head groups are separate passes over the rows (in L1). */
static void vec_attn_qk_avx2(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                             const float *const *rows, int nu, int n, float scale) {
  if (nh != PV_HEADS) {
    for (int u = 0; u < nu; u++)
      for (int h = 0; h < nh; h++) s[(size_t)h * lds + u] = vec_dot_avx2(q + (size_t)h * ldq, rows[u], n) * scale;
    return;
  }
  const int nb = n / 16 * 16;
  for (int u = 0; u < nu; u += 2) {
    const int two = u + 1 < nu;
    const float *x[2] = {rows[u], rows[two ? u + 1 : u]};
    __m256 acc[2][PV_HEADS][2]; /* [row][head][half] */
    for (int g = 0; g < PV_HEADS; g += 4)
      for (int half = 0; half < 2; half++) {
        __m256 a0[4], a1[4];
        for (int h = 0; h < 4; h++) a0[h] = a1[h] = _mm256_setzero_ps();
        for (int i = 8 * half; i < nb; i += 16) {
          const __m256 v0 = _mm256_loadu_ps(x[0] + i), v1 = _mm256_loadu_ps(x[1] + i);
#pragma GCC unroll 4
          for (int h = 0; h < 4; h++) {
            const __m256 qh = _mm256_loadu_ps(q + (size_t)(g + h) * ldq + i);
            a0[h] = _mm256_fmadd_ps(qh, v0, a0[h]);
            a1[h] = _mm256_fmadd_ps(qh, v1, a1[h]);
          }
        }
        for (int h = 0; h < 4; h++) acc[0][g + h][half] = a0[h], acc[1][g + h][half] = a1[h];
      }
    for (int r = 0; r < 1 + two; r++)
      for (int h = 0; h < PV_HEADS; h++) {
        float d;
        if (nb == n) {
          d = fold16(acc[r][h][0], acc[r][h][1]);
        } else { /* the last columns into lanes 0.., then the same fold */
          float t[16];
          _mm256_storeu_ps(t, acc[r][h][0]);
          _mm256_storeu_ps(t + 8, acc[r][h][1]);
          for (int i = nb; i < n; i++) t[i & 15] = fmaf(q[(size_t)h * ldq + i], x[r][i], t[i & 15]);
          d = fold16(_mm256_loadu_ps(t), _mm256_loadu_ps(t + 8));
        }
        s[(size_t)h * lds + u + r] = d * scale;
      }
  }
}

/* a block of 16 columns of 4 heads' sums in registers while the rows
 * stream past; the last columns (n % 16) and other head counts one head
 * and one row at a time, in the same row order */
static void vec_attn_pv_avx2(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                             const float *const *rows, int nu, int n) {
  int c0 = 0;
  if (nh == PV_HEADS)
    for (; c0 + 16 <= n; c0 += 16)
      for (int g = 0; g < PV_HEADS; g += 4) {
        __m256 lo[4], hi[4];
        for (int h = 0; h < 4; h++) {
          lo[h] = _mm256_loadu_ps(o + (size_t)(g + h) * ldo + c0);
          hi[h] = _mm256_loadu_ps(o + (size_t)(g + h) * ldo + c0 + 8);
        }
        for (int u = 0; u < nu; u++) {
          const __m256 xl = _mm256_loadu_ps(rows[u] + c0), xh = _mm256_loadu_ps(rows[u] + c0 + 8);
#pragma GCC unroll 4
          for (int h = 0; h < 4; h++) {
            const __m256 a = _mm256_broadcast_ss(p + (size_t)(g + h) * ldp + u);
            lo[h] = _mm256_fmadd_ps(a, xl, lo[h]);
            hi[h] = _mm256_fmadd_ps(a, xh, hi[h]);
          }
        }
        for (int h = 0; h < 4; h++) {
          _mm256_storeu_ps(o + (size_t)(g + h) * ldo + c0, lo[h]);
          _mm256_storeu_ps(o + (size_t)(g + h) * ldo + c0 + 8, hi[h]);
        }
      }
  for (int h = 0; h < nh; h++)
    for (int u = 0; u < nu; u++) {
      const float a = p[(size_t)h * ldp + u], *x = rows[u];
      float *oh = o + (size_t)h * ldo;
      for (int c = c0; c < n; c++) oh[c] = fmaf(a, x[c], oh[c]);
    }
}
