/* kernels: the vector primitives (vec_impl.h) compiled for AVX2 + FMA, with
 * the attention's primitives written out: the decode attention's two loops
 * (attn_qk, attn_pv), whose vectorization by the compiler kept the head
 * sums in memory (27% of the FMA peak on a Zen 3), and the softmax, which
 * vec_impl.h leaves to libm's scalar expf. attn_qk and attn_pv are bitwise
 * vec_impl.h's order: every dot summed as vec_dot sums it (16 lanes over
 * the columns, here two 8-lane halves, fused multiply-adds, the lanes
 * folded 8, 4, 2, 1), every output of attn_pv in the order of the rows.
 * Both also read bf16 pair rows (tensor/paged.h), each 8 columns of a
 * position one 32-byte load of its pair row and a shift or a mask: the
 * same values, the same operations after. The softmax's e^x is the
 * AVX-512 level's (exp_impl.h, avx2_math.h), 8 lanes. */
#include "kernels/vec.h"

#include "kernels/x86/avx2_math.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#define PV_HEADS 8

static void vec_attn_qk_avx2(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                             const float *const *rows, int nu, int n, float scale);
static void vec_attn_pv_avx2(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                             const float *const *rows, int nu, int n);
static void vec_attn_qk_pairs_avx2(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                                   const uint16_t *const *rows, int nu, int n, float scale);
static void vec_attn_pv_pairs_avx2(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                                   const uint16_t *const *rows, int nu, int n);
static void vec_softmax_avx2(float *x, int n);
static float vec_softmax_step_avx2(float *x, int n, float scale, float *m);

/* activations to int8 (vec.h's to_i8), written out below */
static float vec_to_i8_avx2(const float *restrict x, int8_t *restrict out, int n, int32_t *restrict sums);

#include "kernels/x86/i4_group.h"
#include "kernels/x86/scores_t.h"
#define vec_to_i4_avx2 i4_group8
#define vec_scores_t_avx2 scores_t8
#define VEC_I4_OWN
#define VEC_SUFFIX avx2
#define VEC_NAME "avx2"
#define VEC_ATTN_OWN
#define VEC_ATTN_PAIRS_OWN
#define VEC_SCORES_OWN
#define VEC_I8_OWN
#include "kernels/vec_impl.h"

/* The compiler's vectorization of vec_impl.h's to_i8 (rintf, the float
 * clamps, the narrowing a lane at a time, the 32-column sums added byte by
 * byte after) took 2.4% of an INT4 prefill's samples on a Zen 3, 0.9%
 * written out (its to_i16 vectorizes well: 0.7% of an INT8 prefill's).
 * Here the same product x * (127 / amax) is rounded by vcvtps2dq (to
 * nearest even, as rintf: |x * inv| <= 127 + an ulp, so the conversion
 * never overflows), clamped as integers and narrowed by saturating packs
 * (the lanes put back in order by one permute), the sums taken from the
 * int32 lanes: bitwise vec_impl.h's bytes and sums (test_gemm_int8). A
 * row's last columns under 32 take the generic operations. */
static inline __attribute__((always_inline)) __m256i quant8(const float *x, __m256 inv) {
  const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv));
  return _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
}

static float vec_to_i8_avx2(const float *restrict x, int8_t *restrict out, int n, int32_t *restrict sums) {
  const float amax = amax_avx2(x, n);
  if (amax == 0) return i8_zeros_avx2(out, n, sums);
  const float invs = 127.0f / amax;
  const __m256 inv = _mm256_set1_ps(invs);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int c = 0;
  for (; c + 32 <= n; c += 32) {
    const __m256i a = quant8(x + c, inv), b = quant8(x + c + 8, inv);
    const __m256i d = quant8(x + c + 16, inv), e = quant8(x + c + 24, inv);
    /* packs work within 128-bit lanes: dwords 0-3 of a, b, d, e, then
     * 4-7 of each, which the permute puts back in order */
    const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(d, e));
    _mm256_storeu_si256((__m256i *)(out + c), _mm256_permutevar8x32_epi32(w, order));
    if (sums) {
      const __m256i t = _mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(d, e));
      const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
      const __m128i g = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
      sums[c / 32] = _mm_cvtsi128_si32(_mm_add_epi32(g, _mm_shuffle_epi32(g, 0xb1)));
    }
  }
  if (c < n) {
    int32_t t = 0;
    for (int i = c; i < n; i++) t += out[i] = (int8_t)(int32_t)quant_one_avx2(x[i], invs, 127.0f);
    if (sums) sums[c / 32] = t;
  }
  return amax / 127.0f;
}

/* a dot's 16 lanes (lo: 0-7, hi: 8-15) folded as vec_dot folds them:
 * lane j plus lane j + 8, then + 4, + 2, + 1 */
static inline float fold16(__m256 lo, __m256 hi) {
  const __m256 a = _mm256_add_ps(lo, hi);
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* columns i.. i + 7 of a row: f32, or a bf16 pair row's element odd
 * (tensor/paged.h), widened exactly */
static inline __attribute__((always_inline)) __m256 row8(const void *row, int odd, int i, int pairs) {
  if (!pairs) return _mm256_loadu_ps((const float *)row + i);
  const __m256i w = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + 2 * (size_t)i));
  return _mm256_castsi256_ps(odd ? _mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)) : _mm256_slli_epi32(w, 16));
}

/* Three rows and four heads at a time, one half of the 16 lanes: 12
 * chains, each load of q serving three multiply-adds and each load of a
 * row four (two rows and 8 chains: 0.84x the rate on a Zen 3). The halves
 * and head groups are separate passes over the rows (in L1); a last pass
 * short of rows repeats its first row in the others and keeps its own. */
#define QK_ROWS 3
static inline __attribute__((always_inline)) void qk_at(float *restrict s, int lds, const float *restrict q, int ldq,
                                                        int nh, const void *const *rows, int nu, int n, float scale,
                                                        int pairs) {
  if (nh != PV_HEADS) {
    for (int u = 0; u < nu; u++)
      for (int h = 0; h < nh; h++)
        s[(size_t)h * lds + u] = (pairs ? vec_dot_pair_avx2(q + (size_t)h * ldq, rows[u], u & 1, n)
                                        : vec_dot_avx2(q + (size_t)h * ldq, rows[u], n)) *
                                 scale;
    return;
  }
  const int nb = n / 16 * 16;
  for (int u = 0; u < nu; u += QK_ROWS) {
    const int nr = nu - u < QK_ROWS ? nu - u : QK_ROWS;
    const void *x[QK_ROWS];
    int odd[QK_ROWS];
    for (int r = 0; r < QK_ROWS; r++) {
      const int k = u + (r < nr ? r : 0);
      x[r] = rows[k];
      odd[r] = k & 1;
    }
    __m256 acc[QK_ROWS][PV_HEADS][2]; /* [row][head][half] */
    for (int g = 0; g < PV_HEADS; g += 4)
      for (int half = 0; half < 2; half++) {
        __m256 a[QK_ROWS][4];
        for (int r = 0; r < QK_ROWS; r++)
          for (int h = 0; h < 4; h++) a[r][h] = _mm256_setzero_ps();
        for (int i = 8 * half; i < nb; i += 16) {
          __m256 v[QK_ROWS];
          for (int r = 0; r < QK_ROWS; r++) v[r] = row8(x[r], odd[r], i, pairs);
#pragma GCC unroll 4
          for (int h = 0; h < 4; h++) {
            const __m256 qh = _mm256_loadu_ps(q + (size_t)(g + h) * ldq + i);
            for (int r = 0; r < QK_ROWS; r++) a[r][h] = _mm256_fmadd_ps(qh, v[r], a[r][h]);
          }
        }
        for (int r = 0; r < QK_ROWS; r++)
          for (int h = 0; h < 4; h++) acc[r][g + h][half] = a[r][h];
      }
    for (int r = 0; r < nr; r++)
      for (int h = 0; h < PV_HEADS; h++) {
        float d;
        if (nb == n) {
          d = fold16(acc[r][h][0], acc[r][h][1]);
        } else { /* the last columns into lanes 0.., then the same fold */
          float t[16];
          _mm256_storeu_ps(t, acc[r][h][0]);
          _mm256_storeu_ps(t + 8, acc[r][h][1]);
          for (int i = nb; i < n; i++) t[i & 15] = fmaf(q[(size_t)h * ldq + i], row_at_avx2(x[r], odd[r], i, pairs), t[i & 15]);
          d = fold16(_mm256_loadu_ps(t), _mm256_loadu_ps(t + 8));
        }
        s[(size_t)h * lds + u + r] = d * scale;
      }
  }
}
static void vec_attn_qk_avx2(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                             const float *const *rows, int nu, int n, float scale) {
  qk_at(s, lds, q, ldq, nh, (const void *const *)rows, nu, n, scale, 0);
}
static void vec_attn_qk_pairs_avx2(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                                   const uint16_t *const *rows, int nu, int n, float scale) {
  qk_at(s, lds, q, ldq, nh, (const void *const *)rows, nu, n, scale, 1);
}

/* a block of 24 columns of 4 heads' sums in registers while the rows
 * stream past (12 chains: with 16 columns, 8 chains of 4-cycle FMAs at 2 a
 * cycle left no slack), then 8 columns of all 8 heads; the last columns
 * (n % 8) and other head counts one head and one row at a time, in the
 * same row order */
#define PV_COLS 24
static inline __attribute__((always_inline)) void pv_at(float *restrict o, int ldo, const float *restrict p, int ldp,
                                                        int nh, const void *const *rows, int nu, int n, int pairs) {
  int c0 = 0;
  if (nh == PV_HEADS) {
    for (; c0 + PV_COLS <= n; c0 += PV_COLS)
      for (int g = 0; g < PV_HEADS; g += 4) {
        __m256 a0[4], a1[4], a2[4];
        for (int h = 0; h < 4; h++) {
          a0[h] = _mm256_loadu_ps(o + (size_t)(g + h) * ldo + c0);
          a1[h] = _mm256_loadu_ps(o + (size_t)(g + h) * ldo + c0 + 8);
          a2[h] = _mm256_loadu_ps(o + (size_t)(g + h) * ldo + c0 + 16);
        }
        for (int u = 0; u < nu; u++) {
          const __m256 x0 = row8(rows[u], u & 1, c0, pairs), x1 = row8(rows[u], u & 1, c0 + 8, pairs),
                       x2 = row8(rows[u], u & 1, c0 + 16, pairs);
#pragma GCC unroll 4
          for (int h = 0; h < 4; h++) {
            const __m256 a = _mm256_broadcast_ss(p + (size_t)(g + h) * ldp + u);
            a0[h] = _mm256_fmadd_ps(a, x0, a0[h]);
            a1[h] = _mm256_fmadd_ps(a, x1, a1[h]);
            a2[h] = _mm256_fmadd_ps(a, x2, a2[h]);
          }
        }
        for (int h = 0; h < 4; h++) {
          _mm256_storeu_ps(o + (size_t)(g + h) * ldo + c0, a0[h]);
          _mm256_storeu_ps(o + (size_t)(g + h) * ldo + c0 + 8, a1[h]);
          _mm256_storeu_ps(o + (size_t)(g + h) * ldo + c0 + 16, a2[h]);
        }
      }
    for (; c0 + 8 <= n; c0 += 8) {
      __m256 a[PV_HEADS];
      for (int h = 0; h < PV_HEADS; h++) a[h] = _mm256_loadu_ps(o + (size_t)h * ldo + c0);
      for (int u = 0; u < nu; u++) {
        const __m256 x = row8(rows[u], u & 1, c0, pairs);
#pragma GCC unroll 8
        for (int h = 0; h < PV_HEADS; h++) a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + (size_t)h * ldp + u), x, a[h]);
      }
      for (int h = 0; h < PV_HEADS; h++) _mm256_storeu_ps(o + (size_t)h * ldo + c0, a[h]);
    }
  }
  for (int h = 0; h < nh; h++)
    for (int u = 0; u < nu; u++) {
      const float a = p[(size_t)h * ldp + u];
      float *oh = o + (size_t)h * ldo;
      for (int c = c0; c < n; c++) oh[c] = fmaf(a, row_at_avx2(rows[u], u & 1, c, pairs), oh[c]);
    }
}
static void vec_attn_pv_avx2(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                             const float *const *rows, int nu, int n) {
  pv_at(o, ldo, p, ldp, nh, (const void *const *)rows, nu, n, 0);
}
static void vec_attn_pv_pairs_avx2(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                                   const uint16_t *const *rows, int nu, int n) {
  pv_at(o, ldo, p, ldp, nh, (const void *const *)rows, nu, n, 1);
}

/* lanes i < k set (k in 0..8): the tail's load and store mask */
static inline __m256i tail_mask(int k) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hmax8(__m256 v) {
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_max_ss(a, _mm_movehdup_ps(a)));
}

static inline float hsum8(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

/* max of x[0..n) (n >= 1) */
static float max_of(const float *x, int n) {
  const int nb = n / 8 * 8;
  __m256 mv = _mm256_set1_ps(-INFINITY);
  for (int i = 0; i < nb; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  float mx = hmax8(mv);
  for (int i = nb; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  return mx;
}

/* x[i] = e^(x[i] scale - mx) in place, returning their sum (8 lanes, folded) */
static float exp_in_place(float *x, int n, float scale, float mx) {
  const int nb = n / 8 * 8;
  const __m256 sc = _mm256_set1_ps(scale), mm = _mm256_set1_ps(-mx);
  __m256 s = _mm256_setzero_ps();
  for (int i = 0; i < nb; i += 8) {
    const __m256 e = exp256(_mm256_fmadd_ps(_mm256_loadu_ps(x + i), sc, mm));
    _mm256_storeu_ps(x + i, e);
    s = _mm256_add_ps(s, e);
  }
  if (nb < n) {
    const __m256i k = tail_mask(n - nb);
    const __m256 e = _mm256_and_ps(exp256(_mm256_fmadd_ps(_mm256_maskload_ps(x + nb, k), sc, mm)), _mm256_castsi256_ps(k));
    _mm256_maskstore_ps(x + nb, k, e);
    s = _mm256_add_ps(s, e);
  }
  return hsum8(s);
}

static void vec_softmax_avx2(float *x, int n) {
  const float inv = 1.0f / exp_in_place(x, n, 1.0f, max_of(x, n));
  const __m256 iv = _mm256_set1_ps(inv);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), iv));
  for (; i < n; i++) x[i] *= inv;
}

static float vec_softmax_step_avx2(float *x, int n, float scale, float *m) {
  const float mx = fmaxf(*m, max_of(x, n) * scale);
  *m = mx;
  return exp_in_place(x, n, scale, mx);
}
