/* kernels: the AVX2 INT4 matmul (gemm.h contract) — INT4 TILES weights
 * (tensor/mat.h) times int8 activations, one scale per row (g->xq). A
 * 64-byte line of a sub-block is two halves of 8 rows; each half's nibbles
 * are unpacked in registers and multiplied by vpmaddubsw + vpmaddwd (no
 * saturation: 15 * 127 * 2 < 2^15), the zero point entering as each
 * group's integer sum starting at -8 * the activations' sum over it: the
 * same integer sums and the same f32 operations as gemm_ref_i4. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "kernels/gemm.h"
#include "kernels/x86/iq_driver.h"

#define INLINE static inline __attribute__((always_inline))

/* activation rows a pass holds: two sums (rows 0-7, 8-15) and a chain each */
#define MB_I4 4
#define PF_AHEAD 2048

INLINE __m256i dot(__m256i acc, __m256i w, const int8_t *x) {
  int32_t v;
  memcpy(&v, x, 4);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_set1_epi32(v)), _mm256_set1_epi16(1)));
}

INLINE void i4_pass(const uint8_t *wp, int ng, int nsub, const int8_t *xq, size_t ldq, const int32_t *zp, int zld,
                    int MB, float *out) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256 acc[MB_I4][2];
#pragma GCC unroll 4
  for (int i = 0; i < MB; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const int8_t *x = xq;
  for (int q = 0; q < ng; q++, x += 32 * nsub) {
    const uint8_t *scales = wp + (size_t)nsub * 256;
    for (int h = 0; h < 2; h++) {
      __m256i s[MB_I4];
#pragma GCC unroll 4
      for (int i = 0; i < MB; i++) s[i] = _mm256_set1_epi32(zp[i * zld + q]);
      for (int b = 0; b < nsub; b++) {
        const uint8_t *p = wp + (size_t)b * 256 + 32 * h;
        const int8_t *xb = x + 32 * b;
        if (!h) {
          _mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T1);
          _mm_prefetch((const char *)p + PF_AHEAD + 128, _MM_HINT_T1);
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
          const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 64 * u));
          const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
          for (int i = 0; i < MB; i++) {
            s[i] = dot(s[i], lo, xb + i * ldq + 4 * u);
            s[i] = dot(s[i], hi, xb + i * ldq + 16 + 4 * u);
          }
        }
      }
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + 16 * h)));
#pragma GCC unroll 4
      for (int i = 0; i < MB; i++) acc[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), d, acc[i][h]);
    }
    wp = scales + 32;
  }
#pragma GCC unroll 4
  for (int i = 0; i < MB; i++) {
    _mm256_storeu_ps(out + 16 * i, acc[i][0]);
    _mm256_storeu_ps(out + 16 * i + 8, acc[i][1]);
  }
}

static void pass_n(const dsi_mat *w, int panel, const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb,
                   float *out) {
  const uint8_t *wp = (const uint8_t *)w->data + (size_t)panel * dsi_i4_panel_bytes(w);
  const int ng = w->kpad / w->block, nsub = w->block / 32;
  switch (mb) {
#define F(n) case n: i4_pass(wp, ng, nsub, xq, ldq, zp, zld, n, out); break;
    F(1) F(2) F(3) F(4)
#undef F
  default: DSI_ASSERT(0);
  }
}

/* ---- epilogues: the row's scale multiplied in (no fused multiply-add:
 * the oracle's operations), then stored / added ---- */
static void iq_epi_row(const dsi_gemm *g, int i, int r, int nj, const float *t) {
  const __m256 s = _mm256_set1_ps(g->xq_scale[i]);
  float v[DSI_TILE_N];
  _mm256_storeu_ps(v, _mm256_mul_ps(_mm256_loadu_ps(t), s));
  _mm256_storeu_ps(v + 8, _mm256_mul_ps(_mm256_loadu_ps(t + 8), s));
  if (g->epi == DSI_EPI_STORE) {
    memcpy(g->y + (size_t)i * g->ldy + r, v, (size_t)nj * sizeof(float));
    return;
  }
  float *y = g->y + (size_t)g->y_rows[i] * g->ldy + r, ys = g->y_scale[i];
  for (int j = 0; j < nj; j++) {
    float p = ys * v[j];
    __asm__("" : "+x"(p)); /* not contracted into an fma: the oracle's rounding */
    y[j] += p;
  }
}

static inline float silu(float v) { return v / (1.0f + expf(-v)); }

static void iq_epi_silu(const dsi_gemm *g, int i, int r2, const float *ta, const float *tb) {
  const float s = g->xq_scale[i];
  float *y = g->y + (size_t)i * g->ldy + r2;
  for (int j = 0; j < DSI_TILE_N; j++) y[j] = silu(ta[j] * s) * (tb[j] * s);
}

void dsi_gemm_avx2_i4(const dsi_gemm *g, int r0, int r1, void *scratch) {
  iq_gemm_run(g, r0, r1, scratch, pass_n, MB_I4);
}
