/* kernels: the AVX2 integer matmuls (gemm.h contract) — INT4 and INT8
 * TILES weights (tensor/mat.h) times int8 activations, one scale per row
 * (g->xq), on the driver of iq_driver.h.
 * INT4: a 64-byte line of a sub-block is two halves of 8 rows, taken
 * together; each half's nibbles are unpacked in registers and multiplied
 * by vpmaddubsw (no saturation: 15 * 128 * 2 < 2^15), whose pair sums add
 * up in 16 bits over a 32-wide sub-block before one vpmaddwd widens them;
 * the zero point enters as each group's integer sum starting at -8 * the
 * activations' sum over it.
 * INT8: vpmaddubsw would saturate on unsigned weights (255 * 127 * 2 >
 * 2^15), so both operands are sign-extended to 16 bits and multiplied by
 * vpmaddwd (two products a dword, exact), which issues at vpmaddubsw's
 * rate: the signed sum needs no zero point.
 * Both: the same integer sums and the same f32 operations as gemm_ref. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "kernels/gemm.h"
#include "kernels/x86/avx2_math.h"
#include "kernels/x86/iq_driver.h"

#define INLINE static inline __attribute__((always_inline))

/* activation rows a pass holds: two sums each (rows 0-7, 8-15 of the
 * panel) and their f32 accumulators, beside a line's four unpacked halves
 * and two broadcasts (more than 16 registers: some accumulators spill) */
#define MB_I4 4
#define PF_AHEAD 2048

/* the activations' 4 bytes at x, broadcast: the s8 operand of 16 u8 x s8
 * pair sums by vpmaddubsw (each within [-3840, 3810]) */
INLINE __m256i bcast4(const int8_t *x) {
  int32_t v;
  memcpy(&v, x, 4);
  return _mm256_set1_epi32(v);
}

/* Both halves of each 64-byte line at once: a row's broadcasts and the
 * group's set-up serve the panel's 16 rows, with the f32 accumulators
 * locals (at 4 rows GCC keeps about half of them on the stack). With the
 * halves one after the other: 1.46x slower in L1; accumulating through
 * out instead of locals: no faster than the two passes. */
INLINE void i4_pass(const uint8_t *wp, int ng, int nsub, const int8_t *xq, size_t ldq, const int32_t *zp, int zld,
                    int MB, float *out) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  __m256 acc[MB_I4][2];
#pragma GCC unroll 4
  for (int i = 0; i < MB; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const int8_t *x = xq;
  for (int q = 0; q < ng; q++, x += 32 * nsub) {
    const uint8_t *scales = wp + (size_t)nsub * 256;
    __m256i s[MB_I4][2];
#pragma GCC unroll 4
    for (int i = 0; i < MB; i++) s[i][0] = s[i][1] = _mm256_set1_epi32(zp[i * zld + q]);
    for (int b = 0; b < nsub; b++) {
      const uint8_t *p = wp + (size_t)b * 256;
      const int8_t *xb = x + 32 * b;
#pragma GCC unroll 4
      for (int l = 0; l < 4; l++) _mm_prefetch((const char *)p + PF_AHEAD + 64 * l, _MM_HINT_T1);
      /* a sub-block's 8 pair sums a lane add up in 16 bits (|sum| <=
       * 8 * 3840 < 2^15), widened to 32 once: one vpmaddwd per 8
       * vpmaddubsw */
      __m256i t[MB_I4][2];
#pragma GCC unroll 4
      for (int u = 0; u < 4; u++) {
        const __m256i v0 = _mm256_loadu_si256((const __m256i *)(p + 64 * u));
        const __m256i v1 = _mm256_loadu_si256((const __m256i *)(p + 64 * u + 32));
        const __m256i lo0 = _mm256_and_si256(v0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
        const __m256i lo1 = _mm256_and_si256(v1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
#pragma GCC unroll 4
        for (int i = 0; i < MB; i++) {
          const __m256i xl = bcast4(xb + i * ldq + 4 * u), xh = bcast4(xb + i * ldq + 16 + 4 * u);
          const __m256i d0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, xl), _mm256_maddubs_epi16(hi0, xh));
          const __m256i d1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo1, xl), _mm256_maddubs_epi16(hi1, xh));
          t[i][0] = u ? _mm256_add_epi16(t[i][0], d0) : d0;
          t[i][1] = u ? _mm256_add_epi16(t[i][1], d1) : d1;
          /* in a register, added now: GCC otherwise keeps the products
           * of all four lines alive to sum them at the end, and spills */
          __asm__("" : "+x"(t[i][0]), "+x"(t[i][1]));
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < MB; i++) {
        s[i][0] = _mm256_add_epi32(s[i][0], _mm256_madd_epi16(t[i][0], ones));
        s[i][1] = _mm256_add_epi32(s[i][1], _mm256_madd_epi16(t[i][1], ones));
      }
    }
    const __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)scales));
    const __m256 d1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + 16)));
#pragma GCC unroll 4
    for (int i = 0; i < MB; i++) {
      acc[i][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i][0]), d0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i][1]), d1, acc[i][1]);
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
  /* groups of 32 columns (--quant int4's) a case of their own: one
   * sub-block a group, no inner loop */
  switch (mb + 8 * (nsub == 1)) {
#define F(n) case n: i4_pass(wp, ng, nsub, xq, ldq, zp, zld, n, out); break;
#define F1(n) case n + 8: i4_pass(wp, ng, 1, xq, ldq, zp, zld, n, out); break;
    F(1) F(2) F(3) F(4) F1(1) F1(2) F1(3) F1(4)
#undef F
#undef F1
  default: DSI_ASSERT(0);
  }
}

/* INT8 activation rows a pass holds: a chain each, beside a half line's
 * two widened weight vectors and the broadcasts, within the 16 registers
 * (at 8 rows, two chains a row, both halves at once, would spill) */
#define MB_I8 8
/* up to this many rows a pass takes both halves of a line at once, two
 * chains a row: each line read once and each broadcast serving both (one
 * thread, 7168 columns from DRAM, on a Zen 3: 1.2-1.6x at one row, 1.1x at
 * two and three) */
#define MB_I8_BOTH 4

/* One panel times MB rows. A 64-byte line holds k = 4t, 4t+1 of the 16
 * rows (byte pairs), then k = 4t+2, 4t+3: sign-extended 16 bytes at a time
 * they are 8 rows' (k, k+1) word pairs, the operand of vpmaddwd against
 * the activations' pair broadcast. A scale block's activations are
 * widened to 16 bits once, on the stack; above MB_I8_BOTH rows its lines
 * are gone over twice, for rows 0-7 and then 8-15 (from L1). Per block, each row's exact sum
 * times the panel's scale for the block is added into out in f32 (the
 * first onto zero), as the oracle's. */
INLINE void i8_pass(const int8_t *wp, const float *sc, int kpad, int block, const void *x, size_t ldq, int MB,
                    int wide, float *out) {
  const int nt = kpad / 4, bt = block / 4; /* lines in the panel, in a block */
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) _mm256_storeu_ps(out + 16 * i, _mm256_setzero_ps()), _mm256_storeu_ps(out + 16 * i + 8, _mm256_setzero_ps());
  _Alignas(32) int16_t xw_[MB_I8][256]; /* a block's int8 activations, widened */
  const int8_t *xq = x;
  for (int q = 0, t0 = 0; t0 < nt; q++, t0 += bt) {
    const int t1 = DSI_MIN(nt, t0 + bt), c0 = 4 * t0, nc = 4 * (t1 - t0); /* nc: a multiple of 32 */
    /* row i's 16-bit activations of the block at xw[i]: int8 ones widened
     * on the stack; int16 ones read in place from 5 rows on, copied there
     * below (a matvec's one row, read in place, left L1 as the weights
     * streamed in: lm_head at one row of 1024 columns 0.75-0.85x) */
    const int16_t *xw[MB_I8];
#pragma GCC unroll 8
    for (int i = 0; i < MB; i++) {
      const int16_t *x16 = (const int16_t *)x + i * ldq + c0;
      if (wide && MB > MB_I8_BOTH) {
        xw[i] = x16;
        continue;
      }
      for (int c = 0; c < nc; c += 16)
        _mm256_store_si256((__m256i *)(xw_[i] + c),
                           wide ? _mm256_loadu_si256((const __m256i *)(x16 + c))
                                : _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xq + i * ldq + c0 + c))));
      xw[i] = xw_[i];
    }
    const __m256 d = _mm256_set1_ps(sc[q]);
    if (MB <= MB_I8_BOTH) {
      /* both halves of a line at once: two chains a row, a broadcast
       * serving both, each line read once */
      __m256i s[MB_I8_BOTH][2];
#pragma GCC unroll 8
      for (int i = 0; i < MB; i++) s[i][0] = s[i][1] = _mm256_setzero_si256();
      for (int t = t0; t < t1; t++) {
        const int8_t *l = wp + (size_t)t * 64;
        _mm_prefetch((const char *)l + PF_AHEAD, _MM_HINT_T0);
        __m256i wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) wv[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(l + 16 * j)));
#pragma GCC unroll 8
        for (int i = 0; i < MB; i++) {
          int32_t u, v;
          memcpy(&u, xw[i] + 4 * (t - t0), 4);
          memcpy(&v, xw[i] + 4 * (t - t0) + 2, 4);
          const __m256i bu = _mm256_set1_epi32(u), bv = _mm256_set1_epi32(v);
          s[i][0] = _mm256_add_epi32(s[i][0], _mm256_madd_epi16(wv[0], bu));
          s[i][1] = _mm256_add_epi32(s[i][1], _mm256_madd_epi16(wv[1], bu));
          s[i][0] = _mm256_add_epi32(s[i][0], _mm256_madd_epi16(wv[2], bv));
          s[i][1] = _mm256_add_epi32(s[i][1], _mm256_madd_epi16(wv[3], bv));
          __asm__("" : "+x"(s[i][0]), "+x"(s[i][1])); /* as below */
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < MB; i++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
          float *o = out + 16 * i + 8 * h;
          _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i][h]), d, _mm256_loadu_ps(o)));
        }
      continue;
    }
    for (int h = 0; h < 2; h++) {
      __m256i s[MB_I8];
#pragma GCC unroll 8
      for (int i = 0; i < MB; i++) s[i] = _mm256_setzero_si256();
      for (int t = t0; t < t1; t++) {
        const int8_t *l = wp + (size_t)t * 64 + 16 * h;
        if (!h) _mm_prefetch((const char *)l + PF_AHEAD, _MM_HINT_T1);
        const __m256i a = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)l));
        const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(l + 32)));
#pragma GCC unroll 8
        for (int i = 0; i < MB; i++) {
          int32_t u, v;
          memcpy(&u, xw[i] + 4 * (t - t0), 4);
          memcpy(&v, xw[i] + 4 * (t - t0) + 2, 4);
          s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(a, _mm256_set1_epi32(u)));
          s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(b, _mm256_set1_epi32(v)));
          __asm__("" : "+x"(s[i])); /* GCC 12 otherwise keeps one of 8 chains in memory */
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < MB; i++) {
        float *o = out + 16 * i + 8 * h;
        _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), d, _mm256_loadu_ps(o)));
      }
    }
  }
}

/* one panel times mb rows, int8 ones or (wide) int16 ones ldq elements
 * apart, which the driver passes as the int8 rows' pointer (its xsz: 2
 * bytes an element); the signed sums need no zero point: iq_gemm_run
 * computes none (zp unused) */
INLINE void pass_8_16(const dsi_mat *w, int panel, const int8_t *xq, size_t ldq, int mb, int wide, float *out) {
  const int8_t *wp = (const int8_t *)w->data + (size_t)panel * DSI_TILE_N * w->kpad;
  const float *sc = w->scale + (size_t)panel * w->scale_cols;
  switch (mb) {
#define F(n) case n: i8_pass(wp, sc, w->kpad, w->block, xq, ldq, n, wide, out); break;
    F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8)
#undef F
  default: DSI_ASSERT(0);
  }
}

static void pass_i8(const dsi_mat *w, int panel, const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb,
                    float *out) {
  (void)zp, (void)zld;
  pass_8_16(w, panel, xq, ldq, mb, 0, out);
}

static void pass_i16(const dsi_mat *w, int panel, const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb,
                     float *out) {
  (void)zp, (void)zld;
  pass_8_16(w, panel, xq, ldq, mb, 1, out);
}

/* ---- epilogues: the row's scale multiplied in (no fused multiply-add:
 * the oracle's operations), then stored / added ---- */
static void iq_epi_row(const dsi_gemm *g, int i, int r, int nj, const float *t) {
  const __m256 s = _mm256_set1_ps(g->xq_scale[i]);
  float v[DSI_TILE_N];
  _mm256_storeu_ps(v, _mm256_mul_ps(_mm256_loadu_ps(t), s));
  _mm256_storeu_ps(v + 8, _mm256_mul_ps(_mm256_loadu_ps(t + 8), s));
  if (g->epi == DSI_EPI_STORE) {
    float *y = g->y + (size_t)i * g->ldy + r;
    if (nj == DSI_TILE_N) { /* stored here: memcpy of a variable size was a libc call a row */
      _mm256_storeu_ps(y, _mm256_loadu_ps(v));
      _mm256_storeu_ps(y + 8, _mm256_loadu_ps(v + 8));
    } else {
      memcpy(y, v, (size_t)nj * sizeof(float));
    }
    return;
  }
  float *y = g->y + (size_t)g->y_rows[i] * g->ldy + r, ys = g->y_scale[i];
  /* the row's next 16 outputs, which the next panel adds to (as AVX-512's) */
  _mm_prefetch((const char *)(y + DSI_TILE_N), _MM_HINT_T0);
  int j = 0;
  /* a multiply, then an add: the oracle's rounding (the empty asm keeps
   * GCC from contracting the two into an fma, vectors as scalars) */
  for (const __m256 yv = _mm256_set1_ps(ys); j + 8 <= nj; j += 8) {
    __m256 p = _mm256_mul_ps(yv, _mm256_loadu_ps(v + j));
    __asm__("" : "+x"(p));
    _mm256_storeu_ps(y + j, _mm256_add_ps(_mm256_loadu_ps(y + j), p));
  }
  for (; j < nj; j++) {
    float p = ys * v[j];
    __asm__("" : "+x"(p));
    y[j] += p;
  }
}

static void iq_epi_silu(const dsi_gemm *g, int i, int r2, const float *ta, const float *tb) {
  const __m256 s = _mm256_set1_ps(g->xq_scale[i]);
  float *y = g->y + (size_t)i * g->ldy + r2;
  for (int h = 0; h < DSI_TILE_N; h += 8)
    _mm256_storeu_ps(y + h, silu_mul256(_mm256_mul_ps(_mm256_loadu_ps(ta + h), s), _mm256_mul_ps(_mm256_loadu_ps(tb + h), s)));
}

void dsi_gemm_avx2_i4(const dsi_gemm *g, int r0, int r1, void *scratch) {
  iq_gemm_run(g, r0, r1, scratch, pass_n, MB_I4, 1, 1, NULL);
}

void dsi_gemm_avx2_i8(const dsi_gemm *g, int r0, int r1, void *scratch) {
  /* a block's int32 sums stay exact with int16 activations too: 256 x
   * 127 x 32767 < 2^31 */
  DSI_ASSERT(g->w->block % 32 == 0 && g->w->block <= 256 && g->w->kpad % 32 == 0);
  if (!g->xw) {
    iq_gemm_run(g, r0, r1, scratch, pass_i8, MB_I8, 0, 1, NULL);
    return;
  }
  /* int16 rows through the driver's int8 fields: the epilogues read the
   * scales there */
  dsi_gemm g16 = *g;
  g16.xq = (const int8_t *)g->xw;
  g16.xq_scale = g->xw_scale;
  g16.xq_sum = NULL;
  iq_gemm_run(&g16, r0, r1, scratch, pass_i16, MB_I8, 0, 2, NULL);
}
