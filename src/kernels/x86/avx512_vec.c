/* kernels: the vector primitives (vec_impl.h) compiled for AVX-512, with
 * the decode attention's two loops (attn_qk, attn_pv) written out: the
 * compiler's vectorization of vec_impl.h's versions kept the head sums in
 * memory. Results are bitwise those of vec_impl.h's order: every dot is
 * summed as vec_dot sums it (16 lanes over the columns, fused
 * multiply-adds, the lanes folded 8, 4, 2, 1), every output of attn_pv in
 * the order of the rows. */
#include "kernels/vec.h"

#include "kernels/x86/avx512_math.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#define PV_COLS 32
#define PV_HEADS 8

/* 8 heads' 16-lane sums -> the 8 dots, folded as vec_dot folds (lane j
 * plus lane j + 8, then + 4, + 2, + 1), 8 heads at once: after each step
 * a vector holds more heads' partial sums. Returns head h's dot in lane
 * 4 (h % 4) + h / 4. */
static inline __m512 fold8(const __m512 *a) {
  __m512 v[4], w[2];
  for (int k = 0; k < 4; k++) /* [a lanes j + (j+8) | b lanes j + (j+8)] */
    v[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int k = 0; k < 2; k++) /* quarter q: head (4k' + q) lanes j + (j+4) */
    w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  /* heads in w[0] quarters: 0, 1, 2, 3 (pairs (0,1),(2,3) -> q0=h0,q1=h1,q2=h2,q3=h3);
   * w[1]: 4, 5, 6, 7 */
  __m512 x = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(x, x, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(x, x, _MM_SHUFFLE(3, 1, 3, 1)));
}

static void vec_attn_qk_avx512(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                               const float *const *rows, int nu, int n, float scale);
static void vec_attn_pv_avx512(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                               const float *const *rows, int nu, int n);
static void vec_attn_qk_pairs_avx512(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                                     const uint16_t *const *rows, int nu, int n, float scale);
static void vec_attn_pv_pairs_avx512(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                                     const uint16_t *const *rows, int nu, int n);
static void vec_softmax_avx512(float *x, int n);
static float vec_softmax_step_avx512(float *x, int n, float scale, float *m);

/* The bf16 conversions into AMX layouts, written out: vec_impl.h's
 * rounding (x + 0x7fff + the kept bit's lsb, the high half) 16 lanes at a
 * time, the words then placed by one two-source permute. The loops the
 * compiler made of vec_impl.h's versions took 0.6 (rows to tiles) and 1.1
 * (panels, strided stores) cycles an element: 11% and 15% of the
 * non-absorbed prefill, which converts every query and probability row
 * and packs every head's keys and values. */

/* x's elements where m is set, rounded, the bf16 in the high words (zero
 * elsewhere) */
static inline __m512i bf16_hi(const float *x, __mmask16 m) {
  const __m512i a = _mm512_maskz_loadu_epi32(m, x);
  return _mm512_maskz_add_epi32(m, _mm512_add_epi32(a, _mm512_set1_epi32(0x7fff)),
                                _mm512_and_si512(_mm512_srli_epi32(a, 16), _mm512_set1_epi32(1)));
}

static inline __mmask16 lanes(int r) { return r >= 16 ? 0xffff : r > 0 ? (__mmask16)((1u << r) - 1) : 0; }

static void vec_to_bf16_tiles_avx512(const float *x, int n, int kpad, uint16_t *out) {
  const __m512i hi = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25,
                                      23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1); /* the high words of a, then b */
  for (int c = 0; c < kpad; c += 32, out += 512)
    _mm512_storeu_si512(out, _mm512_permutex2var_epi16(bf16_hi(x + c, lanes(n - c)), hi,
                                                       bf16_hi(x + c + 16, lanes(n - c - 16))));
}

/* r[k] = [r_0[k], r_1[k], ..., r_15[k]]: a 16 x 16 transpose of dwords */
static inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) { /* lane l of r[i + e]: rows i..i+3's element 4 l + e */
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int e = 0; e < 4; e++) {
    const __m512i a = _mm512_shuffle_i32x4(r[e], r[4 + e], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i b = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i c = _mm512_shuffle_i32x4(r[e], r[4 + e], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i d = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], _MM_SHUFFLE(3, 2, 3, 2));
    t[e] = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    t[4 + e] = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    t[8 + e] = _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0));
    t[12 + e] = _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1));
  }
  for (int k = 0; k < 16; k++) r[k] = t[k];
}

/* 32 columns at a time: each row's 16 column pairs as dwords, transposed
 * so that a vector holds one pair of all 16 rows */
static void vec_bf16_panel_avx512(const float *x, int ldx, int nr, int n, uint16_t *out) {
  const __m512i hi = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25,
                                      23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int c = 0; c < n; c += 32) {
    __m512i r[16];
    for (int i = 0; i < 16; i++)
      r[i] = i < nr ? _mm512_permutex2var_epi16(bf16_hi(x + (size_t)i * ldx + c, lanes(n - c)), hi,
                                                bf16_hi(x + (size_t)i * ldx + c + 16, lanes(n - c - 16)))
                    : _mm512_setzero_si512();
    transpose16(r);
    for (int k = 0; k < 16 && c + 2 * k < n; k++) _mm512_storeu_si512(out + (size_t)(c / 2 + k) * 32, r[k]);
  }
}

/* two rows a store: their words interleaved */
static void vec_bf16_panel_t_avx512(const float *x, int ldx, int nu, int ni, uint16_t *out) {
  const __m512i il = _mm512_set_epi16(63, 31, 61, 29, 59, 27, 57, 25, 55, 23, 53, 21, 51, 19, 49, 17, 47, 15, 45, 13,
                                      43, 11, 41, 9, 39, 7, 37, 5, 35, 3, 33, 1); /* a's high word i, then b's */
  const __mmask16 m = lanes(ni);
  for (int u = 0; u < nu; u += 2) {
    const __m512i a = bf16_hi(x + (size_t)u * ldx, m);
    const __m512i b = u + 1 < nu ? bf16_hi(x + (size_t)(u + 1) * ldx, m) : _mm512_setzero_si512();
    _mm512_storeu_si512(out + (size_t)(u / 2) * 32, _mm512_permutex2var_epi16(a, il, b));
  }
}

#include "kernels/x86/i4_group.h"
#include "kernels/x86/scores_t.h"
#define vec_to_i4_avx512 i4_group8
#define vec_scores_t_avx512 scores_t8
#define VEC_I4_OWN
#define VEC_SCORES_OWN
/* symmetric int8 (vec.h's to_i8), written out below */
static float vec_to_i8_avx512(const float *restrict x, int8_t *restrict out, int n, int32_t *restrict sums);
#define VEC_I8_OWN
#define VEC_SUFFIX avx512
#define VEC_NAME "avx512"
#define VEC_ATTN_OWN
#define VEC_ATTN_PAIRS_OWN
#define VEC_TILES_OWN
#include "kernels/vec_impl.h"

/* columns i.. i + 15 of a row (lanes in m; the others zero): f32, or a
 * bf16 pair row's element odd (tensor/paged.h), widened exactly in the
 * register — one shift or mask beside the load, where widening the block
 * into f32 rows first writes and reads each row again */
static inline __attribute__((always_inline)) __m512 row16(const void *row, int odd, int i, __mmask16 m, int pairs) {
  if (!pairs) return _mm512_maskz_loadu_ps(m, (const float *)row + i);
  const __m512i w = _mm512_maskz_loadu_epi32(m, (const uint16_t *)row + 2 * (size_t)i);
  return _mm512_castsi512_ps(odd ? _mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)) : _mm512_slli_epi32(w, 16));
}

/* two rows at a time, so each load of q serves two multiply-adds */
static inline __attribute__((always_inline)) void qk_at(float *restrict s, int lds, const float *restrict q, int ldq,
                                                        int nh, const void *const *rows, int nu, int n, float scale,
                                                        int pairs) {
  if (nh != PV_HEADS) {
    for (int u = 0; u < nu; u++)
      for (int h = 0; h < nh; h++)
        s[(size_t)h * lds + u] = (pairs ? vec_dot_pair_avx512(q + (size_t)h * ldq, rows[u], u & 1, n)
                                        : vec_dot_avx512(q + (size_t)h * ldq, rows[u], n)) *
                                 scale;
    return;
  }
  const int nb = n / 16 * 16;
  const __mmask16 tail = (__mmask16)((1u << (n - nb)) - 1);
  const __m512 sc = _mm512_set1_ps(scale);
  int u = 0;
  for (; u < nu; u += 2) {
    const int two = u + 1 < nu, u1 = two ? u + 1 : u;
    const void *x0 = rows[u], *x1 = rows[u1];
    __m512 a0[PV_HEADS], a1[PV_HEADS];
    for (int h = 0; h < PV_HEADS; h++) a0[h] = a1[h] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i += 16) {
      const __m512 v0 = row16(x0, u & 1, i, 0xffff, pairs), v1 = row16(x1, u1 & 1, i, 0xffff, pairs);
#pragma GCC unroll 8
      for (int h = 0; h < PV_HEADS; h++) {
        const __m512 qh = _mm512_loadu_ps(q + (size_t)h * ldq + i);
        a0[h] = _mm512_fmadd_ps(qh, v0, a0[h]);
        a1[h] = _mm512_fmadd_ps(qh, v1, a1[h]);
      }
    }
    if (tail) {
      const __m512 v0 = row16(x0, u & 1, nb, tail, pairs), v1 = row16(x1, u1 & 1, nb, tail, pairs);
      for (int h = 0; h < PV_HEADS; h++) {
        const __m512 qh = _mm512_maskz_loadu_ps(tail, q + (size_t)h * ldq + nb);
        a0[h] = _mm512_mask3_fmadd_ps(qh, v0, a0[h], tail);
        a1[h] = _mm512_mask3_fmadd_ps(qh, v1, a1[h], tail);
      }
    }
    float r[16];
    _mm512_storeu_ps(r, _mm512_mul_ps(fold8(a0), sc));
    for (int h = 0; h < PV_HEADS; h++) s[(size_t)h * lds + u] = r[4 * (h % 4) + h / 4];
    if (two) {
      _mm512_storeu_ps(r, _mm512_mul_ps(fold8(a1), sc));
      for (int h = 0; h < PV_HEADS; h++) s[(size_t)h * lds + u + 1] = r[4 * (h % 4) + h / 4];
    }
  }
}
static void vec_attn_qk_avx512(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                               const float *const *rows, int nu, int n, float scale) {
  qk_at(s, lds, q, ldq, nh, (const void *const *)rows, nu, n, scale, 0);
}
static void vec_attn_qk_pairs_avx512(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                                     const uint16_t *const *rows, int nu, int n, float scale) {
  qk_at(s, lds, q, ldq, nh, (const void *const *)rows, nu, n, scale, 1);
}

/* a block of 32 columns of 8 heads' sums in registers while the rows
 * stream past; the last columns (n % 32) and other head counts one head
 * at a time, 16 columns (masked at the end) per register */
static inline __attribute__((always_inline)) void pv_at(float *restrict o, int ldo, const float *restrict p, int ldp,
                                                        int nh, const void *const *rows, int nu, int n, int pairs) {
  int c0 = 0;
  if (nh == PV_HEADS)
    for (; c0 + PV_COLS <= n; c0 += PV_COLS) {
      __m512 lo[PV_HEADS], hi[PV_HEADS];
      for (int h = 0; h < PV_HEADS; h++) {
        lo[h] = _mm512_loadu_ps(o + (size_t)h * ldo + c0);
        hi[h] = _mm512_loadu_ps(o + (size_t)h * ldo + c0 + 16);
      }
      for (int u = 0; u < nu; u++) {
        const __m512 xl = row16(rows[u], u & 1, c0, 0xffff, pairs), xh = row16(rows[u], u & 1, c0 + 16, 0xffff, pairs);
#pragma GCC unroll 8
        for (int h = 0; h < PV_HEADS; h++) {
          const __m512 a = _mm512_set1_ps(p[(size_t)h * ldp + u]);
          lo[h] = _mm512_fmadd_ps(a, xl, lo[h]);
          hi[h] = _mm512_fmadd_ps(a, xh, hi[h]);
        }
      }
      for (int h = 0; h < PV_HEADS; h++) {
        _mm512_storeu_ps(o + (size_t)h * ldo + c0, lo[h]);
        _mm512_storeu_ps(o + (size_t)h * ldo + c0 + 16, hi[h]);
      }
    }
  for (int h = 0; h < nh; h++)
    for (int c = c0; c < n; c += 16) {
      const __mmask16 m = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1);
      float *oh = o + (size_t)h * ldo + c;
      __m512 acc = _mm512_maskz_loadu_ps(m, oh);
      for (int u = 0; u < nu; u++)
        acc = _mm512_fmadd_ps(_mm512_set1_ps(p[(size_t)h * ldp + u]), row16(rows[u], u & 1, c, m, pairs), acc);
      _mm512_mask_storeu_ps(oh, m, acc);
    }
}
static void vec_attn_pv_avx512(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                               const float *const *rows, int nu, int n) {
  pv_at(o, ldo, p, ldp, nh, (const void *const *)rows, nu, n, 0);
}
static void vec_attn_pv_pairs_avx512(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                                     const uint16_t *const *rows, int nu, int n) {
  pv_at(o, ldo, p, ldp, nh, (const void *const *)rows, nu, n, 1);
}

/* exp512 (1-2 ulp) 16 lanes at a time, the sum in 16 lanes folded at the
 * end (a scalar libm loop would be a fifth of a decode step's attention) */
static void vec_softmax_avx512(float *x, int n) {
  const int nb = n / 16 * 16;
  const __mmask16 tail = (__mmask16)((1u << (n - nb)) - 1);
  __m512 mv = _mm512_set1_ps(-INFINITY);
  for (int i = 0; i < nb; i += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(x + i));
  if (tail) mv = _mm512_mask_max_ps(mv, tail, mv, _mm512_maskz_loadu_ps(tail, x + nb));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
  __m512 s = _mm512_setzero_ps();
  for (int i = 0; i < nb; i += 16) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
    _mm512_storeu_ps(x + i, e);
    s = _mm512_add_ps(s, e);
  }
  if (tail) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + nb), m));
    _mm512_mask_storeu_ps(x + nb, tail, e);
    s = _mm512_mask_add_ps(s, tail, s, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(s));
  for (int i = 0; i < nb; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
  if (tail) _mm512_mask_storeu_ps(x + nb, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + nb), inv));
}

static float vec_softmax_step_avx512(float *x, int n, float scale, float *m) {
  const int nb = n / 16 * 16;
  const __mmask16 tail = (__mmask16)((1u << (n - nb)) - 1);
  __m512 mv = _mm512_set1_ps(-INFINITY);
  for (int i = 0; i < nb; i += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(x + i));
  if (tail) mv = _mm512_mask_max_ps(mv, tail, mv, _mm512_maskz_loadu_ps(tail, x + nb));
  const float mx = fmaxf(*m, _mm512_reduce_max_ps(mv) * scale);
  const __m512 mm = _mm512_set1_ps(-mx), sc = _mm512_set1_ps(scale);
  __m512 s = _mm512_setzero_ps();
  for (int i = 0; i < nb; i += 16) {
    const __m512 e = exp512(_mm512_fmadd_ps(_mm512_loadu_ps(x + i), sc, mm));
    _mm512_storeu_ps(x + i, e);
    s = _mm512_add_ps(s, e);
  }
  if (tail) {
    const __m512 e = exp512(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, x + nb), sc, mm));
    _mm512_mask_storeu_ps(x + nb, tail, e);
    s = _mm512_mask_add_ps(s, tail, s, e);
  }
  *m = mx;
  return _mm512_reduce_add_ps(s);
}

/* The compiler's vectorization of vec_impl.h's to_i8 (rintf, the clamps,
 * the narrowing) took ~15 uops a vector, and the 32-column sums the
 * integer kernels' zero point needs were added up byte by byte after it
 * (3.3% of an INT4 prefill's samples together). Here the same product is
 * rounded by vcvtps2dq (to nearest even, as rintf), clamped and narrowed
 * (vpmovdb), the sums taken from the same registers: bitwise vec_impl.h's
 * bytes and sums (test_gemm_int8). */
static float vec_to_i8_avx512(const float *restrict x, int8_t *restrict out, int n, int32_t *restrict sums) {
  const float amax = amax_avx512(x, n);
  if (amax == 0) return i8_zeros_avx512(out, n, sums);
  const __m512 inv = _mm512_set1_ps(127.0f / amax);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int c = 0; c < n; c += 32) {
    __m512i t = _mm512_setzero_si512();
    for (int h = c; h < c + 32 && h < n; h += 16) {
      const __mmask16 k = n - h >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - h)) - 1);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + h), inv);
      __m512i q = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q = _mm512_max_epi32(_mm512_min_epi32(q, hi), lo);
      _mm_mask_storeu_epi8(out + h, k, _mm512_cvtepi32_epi8(q));
      t = _mm512_add_epi32(t, q); /* the lanes past n are 0 */
    }
    if (sums) sums[c / 32] = _mm512_reduce_add_epi32(t);
  }
  return amax / 127.0f;
}
