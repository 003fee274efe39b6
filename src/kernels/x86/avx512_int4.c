/* kernels: the AVX-512 INT4 matmuls (gemm.h contract) — INT4 TILES weights
 * (tensor/mat.h) times int8 activations, one scale per row (g->xq), for
 * decode and prefill alike. Nibbles are unpacked in registers into the
 * unsigned operand of a u8 x s8 dot product: vpdpbusd where there is VNNI,
 * else vpmaddubsw + vpmaddwd (no saturation: 15 * 127 * 2 < 2^15). The
 * nibbles' zero point (8) enters as each group's integer sum starting at
 * -8 * the activations' sum over the group. */
#include "kernels/x86/avx512_iq.h"

#include <string.h>

/* MB_I4 (avx512_iq.h), the activation rows a pass holds: per row a sum
 * and 4 integer chains (5 registers). Measured per core on a Zen 4
 * (expert_up 2048 x 7168, thread CPU time): 4 rows 310-360 GOP/s from 4 to
 * 256 rows; passes of 8 rows (one chain each) 170-200 */

/* One panel times MB rows. Each row's integer sum runs in 4 chains (line
 * u's low nibbles in chain u, its high ones in chain u + 2 mod 4: a
 * vpdpbusd chain is latency-bound), added at the group's end (exact).
 * VNNI is a constant after inlining. */
ALWAYS_INLINE void i4_pass(const uint8_t *wp, int ng, int nsub, const int8_t *xq, size_t ldq, const int32_t *zp,
                           int zld, int MB, int vnni, float *out) {
  enum { NCH = 4 };
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512 acc[MB_I4];
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) acc[i] = _mm512_setzero_ps();
  const int8_t *x = xq;
  for (int q = 0; q < ng; q++) {
    __m512i s[MB_I4][4];
#pragma GCC unroll 8
    for (int i = 0; i < MB; i++) {
      s[i][0] = _mm512_set1_epi32(zp[i * zld + q]);
      for (int c = 1; c < NCH; c++) s[i][c] = _mm512_setzero_si512();
    }
    for (int b = 0; b < nsub; b++, wp += 256, x += 32) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; u++) {
        _mm_prefetch((const char *)wp + 64 * u + PF_AHEAD, _MM_HINT_T1);
        const __m512i v = _mm512_loadu_si512(wp + 64 * u);
        const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        const int cl = u % NCH, ch = (u + NCH / 2) % NCH;
#pragma GCC unroll 8
        for (int i = 0; i < MB; i++) {
          const int8_t *xl = x + i * ldq + 4 * u, *xh = xl + 16;
          if (vnni) {
            s[i][cl] = dot_vnni(s[i][cl], lo, xl);
            s[i][ch] = dot_vnni(s[i][ch], hi, xh);
          } else {
            s[i][cl] = dot_bw(s[i][cl], lo, xl);
            s[i][ch] = dot_bw(s[i][ch], hi, xh);
          }
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)wp));
    wp += 32;
#pragma GCC unroll 8
    for (int i = 0; i < MB; i++) {
      __m512i t = s[i][0];
      for (int c = 1; c < NCH; c++) t = _mm512_add_epi32(t, s[i][c]);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), d, acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) _mm512_storeu_ps(out + 16 * i, acc[i]);
}

#define CASES_MB(F) F(1) F(2) F(3) F(4) /* up to MB_I4 */

ALWAYS_INLINE void pass_any(const uint8_t *wp, int ng, int nsub, const int8_t *xq, size_t ldq, const int32_t *zp,
                            int zld, int mb, int vnni, float *out) {
  switch (mb) {
#define F(n)                                                        \
  case n:                                                           \
    if (vnni) i4_pass(wp, ng, nsub, xq, ldq, zp, zld, n, 1, out);   \
    else i4_pass(wp, ng, nsub, xq, ldq, zp, zld, n, 0, out);        \
    break;
    CASES_MB(F)
#undef F
  default: DSI_ASSERT(0);
  }
}

/* ---- prefill: panels unpacked once for all their passes ----
 * A chunk of a panel's groups (IQ_CHUNK_COLS columns) has its nibbles
 * written out as vpdpbusd's unsigned operand lines and its f16 scales as
 * f32; the passes of avx512_iq.h (two panels, up to MB_U rows) then read
 * those from L1, where the direct pass unpacks every line again in every
 * pass of 4 rows (3 vector uops a line beside 8 dot products, and a
 * group's end for 4 rows). The same operations in the same order: bitwise
 * the direct pass's results. On an Emerald Rapids Xeon without AMX (bench
 * kernels, expert_up 2048 x 7168, 2 threads, medians of 5 alternating
 * runs): 1.07x the direct passes at 8 rows, 1.37x at 16, 1.5x at 64 and
 * 256; unpacking whole panels (112 KB here, past L1) gained nothing at
 * this K (1.37x at K = 1536), chunks of 512 columns the most. */
/* where groups q0..q0+nq of a panel lie (iq_unpacked's chunk) */
const uint8_t *dsi_i4_chunk_bytes(const dsi_mat *w, int panel, int q0, int nq, size_t *bytes) {
  *bytes = (size_t)nq * dsi_i4_group_bytes(w->block);
  return (const uint8_t *)w->data + (size_t)panel * dsi_i4_panel_bytes(w) + (size_t)q0 * dsi_i4_group_bytes(w->block);
}

void dsi_i4_unpack_panel(const dsi_mat *w, int panel, int q0, int nq, uint8_t *lines, float *scales) {
  size_t bytes;
  const uint8_t *wp = dsi_i4_chunk_bytes(w, panel, q0, nq, &bytes);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const int nsub = w->block / 32;
  for (int q = 0; q < nq; q++) {
    for (int b = 0; b < nsub; b++, wp += 256, lines += 512)
      for (int u = 0; u < 4; u++) {
        const __m512i v = _mm512_loadu_si512(wp + 64 * u);
        _mm512_store_si512(lines + 64 * u, _mm512_and_si512(v, m4));
        _mm512_store_si512(lines + 64 * (u + 4), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
      }
    _mm512_storeu_ps(scales + 16 * q, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)wp)));
    wp += 32;
  }
}

static const iq_unpacked k_unp_vnni = {dsi_i4_unpack_panel, dsi_i4_chunk_bytes, iq_upass_vnni, MB_U, 8};
static const iq_unpacked k_unp_bw = {dsi_i4_unpack_panel, dsi_i4_chunk_bytes, iq_upass_bw, MB_U, 8};

static void pass_bw(const dsi_mat *w, int panel, const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb,
                    float *out) {
  const uint8_t *wp = (const uint8_t *)w->data + (size_t)panel * dsi_i4_panel_bytes(w);
  pass_any(wp, w->kpad / w->block, w->block / 32, xq, ldq, zp, zld, mb, 0, out);
}

void dsi_i4_pass_vnni(const dsi_mat *w, int panel, const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb,
                      float *out) {
  const uint8_t *wp = (const uint8_t *)w->data + (size_t)panel * dsi_i4_panel_bytes(w);
  pass_any(wp, w->kpad / w->block, w->block / 32, xq, ldq, zp, zld, mb, 1, out);
}

void dsi_gemm_avx512_i4(const dsi_gemm *g, int r0, int r1, void *scratch) {
  iq_gemm_run(g, r0, r1, scratch, pass_bw, MB_I4, 1, 1, &k_unp_bw);
}

void dsi_gemm_avx512_vnni_i4(const dsi_gemm *g, int r0, int r1, void *scratch) {
  iq_gemm_run(g, r0, r1, scratch, dsi_i4_pass_vnni, MB_I4, 1, 1, &k_unp_vnni);
}
