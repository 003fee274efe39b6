/* kernels: what the AVX-512 integer matmuls (avx512_int4.c, avx512_int8.c)
 * share besides their driver (iq_driver.h): VNNI's dot product and the
 * epilogues of one activation row. Included only by files compiled with
 * the AVX-512 flags. */
#ifndef DSI_AVX512_IQ_H
#define DSI_AVX512_IQ_H

#include "base/base.h"
#include "kernels/gemm.h"
#include "kernels/x86/avx512_math.h"
#include "kernels/x86/iq_driver.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
/* bytes of W prefetched ahead into L2, as the other AVX-512 kernels (avx512.c) */
#define PF_AHEAD 4096

/* u8 x s8 dot products, VNNI's vpdpbusd as asm (the files are not compiled
 * for VNNI; only CPUs with it get here), the activations' 4 bytes
 * broadcast from memory inside the instruction */
ALWAYS_INLINE __m512i dot_vnni(__m512i acc, __m512i w, const int8_t *x) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)x));
  return acc;
}
/* the same with the activations' 4 bytes already broadcast in a register */
ALWAYS_INLINE __m512i dot_vnni_r(__m512i acc, __m512i w, __m512i xb) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(xb));
  return acc;
}

/* ---- passes over unpacked panels (iq_unpacked) ----
 * Two panels (32 outputs) times up to MB_UV activation rows (MB_U without
 * VNNI), the panels' lines already vpdpbusd's unsigned operand (line c of
 * a 32-column sub-block: its columns 4c..4c+3 of the 16 rows) and their
 * scales f32, 16 a block: each line load serves all the rows, each row's
 * 4 activation bytes both panels (with VNNI broadcast once into a
 * register: a line pair's two loads and MB broadcasts against 2 MB
 * vpdpbusd). One integer chain a row and panel, exact; at a block's end
 * its sum times the scale added in f32, in block order, onto what out
 * holds, or onto zero in the first chunk's pass (the driver calls once a
 * chunk of blocks): the operations of the direct passes, in their order.
 * Up to MB_U rows the f32 sums stay in registers; taller
 * passes (INT8's, whose 128-column blocks end a quarter as often as
 * INT4's 32-column groups) keep them in out, leaving the registers to
 * the integer chains. Measured on one core of an Emerald Rapids Xeon
 * (`bench kernels --threads 1`, expert_up 2048 x 7168, 48 and 256 rows):
 * INT8 445 GOP/s with the broadcast in each instruction and 6 rows, 455
 * broadcast once, 485-495 at 8 rows, 475-485 at 12; INT4 390-400, 435-455
 * broadcast once, 410-435 at 8 rows, 400-410 at 12. */
#define MB_U 6
#define MB_UV 8

ALWAYS_INLINE int32_t x4(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* u8 x s8 dot products without VNNI: vpmaddubsw + vpmaddwd */
ALWAYS_INLINE __m512i dot_bw(__m512i acc, __m512i w, const int8_t *x) {
  const __m512i xb = _mm512_set1_epi32(x4(x));
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, xb), _mm512_set1_epi16(1)));
}

/* NP panels (1 or 2) times MB rows: one integer chain a row and panel */
ALWAYS_INLINE void iq_upass(const uint8_t *u0, const float *sc0, const uint8_t *u1, const float *sc1, int ng,
                            int nsub, const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int MB, int NP,
                            int vnni, int first, float *out0, float *out1, iq_pf *pf) {
  const int regs = MB <= MB_U; /* the f32 sums in registers */
  __m512 acc[2][MB_UV];
#pragma GCC unroll 16
  for (int i = 0; i < MB && regs; i++) {
    acc[0][i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out0 + 16 * i);
    acc[1][i] = NP > 1 && !first ? _mm512_loadu_ps(out1 + 16 * i) : acc[0][i];
  }
  const int8_t *x = xq;
  for (int q = 0; q < ng; q++) {
    __m512i s[2][MB_UV];
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) s[0][i] = s[1][i] = _mm512_set1_epi32(zp[i * zld + q]);
    for (int b = 0; b < nsub; b++, u0 += 512, u1 += NP > 1 ? 512 : 0, x += 32) {
      iq_pf_issue(pf, pf->step);
#pragma GCC unroll 8
      for (int l = 0; l < 8; l++) {
        const __m512i v0 = _mm512_load_si512(u0 + 64 * l);
        const __m512i v1 = NP > 1 ? _mm512_load_si512(u1 + 64 * l) : v0;
#pragma GCC unroll 16
        for (int i = 0; i < MB; i++) {
          const int8_t *xi = x + i * ldq + 4 * l;
          if (vnni) {
            const __m512i xb = _mm512_set1_epi32(x4(xi));
            s[0][i] = dot_vnni_r(s[0][i], v0, xb);
            if (NP > 1) s[1][i] = dot_vnni_r(s[1][i], v1, xb);
          } else {
            s[0][i] = dot_bw(s[0][i], v0, xi);
            if (NP > 1) s[1][i] = dot_bw(s[1][i], v1, xi);
          }
        }
      }
    }
    const __m512 d0 = _mm512_loadu_ps(sc0 + 16 * q), d1 = NP > 1 ? _mm512_loadu_ps(sc1 + 16 * q) : d0;
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) {
      if (regs) {
        acc[0][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0][i]), d0, acc[0][i]);
        if (NP > 1) acc[1][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1][i]), d1, acc[1][i]);
        continue;
      }
      const int zero = first && q == 0; /* the first block: fma onto zero, as the oracle's */
      _mm512_storeu_ps(out0 + 16 * i, _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0][i]), d0,
                                                      zero ? _mm512_setzero_ps() : _mm512_loadu_ps(out0 + 16 * i)));
      if (NP > 1)
        _mm512_storeu_ps(out1 + 16 * i, _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1][i]), d1,
                                                        zero ? _mm512_setzero_ps() : _mm512_loadu_ps(out1 + 16 * i)));
    }
  }
  iq_pf_issue(pf, SIZE_MAX); /* what the rounding of step left */
#pragma GCC unroll 16
  for (int i = 0; i < MB && regs; i++) {
    _mm512_storeu_ps(out0 + 16 * i, acc[0][i]);
    if (NP > 1) _mm512_storeu_ps(out1 + 16 * i, acc[1][i]);
  }
}

/* the pass of mb rows and one or two panels, every height a constant */
#define UPASS_CASE(n, vnni)                                                                 \
  case 2 * n + 1: iq_upass(u0, sc0, u1, sc1, ng, nsub, xq, ldq, zp, zld, n, 2, vnni, first, out0, out1, pf); break; \
  case 2 * n: iq_upass(u0, sc0, u0, sc0, ng, nsub, xq, ldq, zp, zld, n, 1, vnni, first, out0, out1, pf); break;
#define UPASS_V(n) UPASS_CASE(n, 1)
#define UPASS_B(n) UPASS_CASE(n, 0)
#define CASES_MB_U(F) F(1) F(2) F(3) F(4) F(5) F(6)                             /* up to MB_U */
#define CASES_MB_UV(F) CASES_MB_U(F) F(7) F(8) /* up to MB_UV */

static inline void iq_upass_vnni(const uint8_t *u0, const float *sc0, const uint8_t *u1, const float *sc1, int ng, int nsub,
                       const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb, int first, float *out0,
                       float *out1, iq_pf *pf) {
  switch (mb * 2 + (u1 != NULL)) {
    CASES_MB_UV(UPASS_V)
  default: DSI_ASSERT(0);
  }
}

static inline void iq_upass_bw(const uint8_t *u0, const float *sc0, const uint8_t *u1, const float *sc1, int ng, int nsub,
                     const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb, int first, float *out0,
                       float *out1, iq_pf *pf) {
  switch (mb * 2 + (u1 != NULL)) {
    CASES_MB_U(UPASS_B)
  default: DSI_ASSERT(0);
  }
}

/* avx512_int4.c's pieces that the AMX INT4 matmul (amx_int4.c) shares: a
 * chunk of a panel's groups unpacked into vpdpbusd's operand lines (also
 * AMX's B tiles as they lie), where those bytes are, and the direct VNNI
 * pass of up to 4 rows (MB_I4) */
void dsi_i4_unpack_panel(const dsi_mat *w, int panel, int q0, int nq, uint8_t *lines, float *scales);
const uint8_t *dsi_i4_chunk_bytes(const dsi_mat *w, int panel, int q0, int nq, size_t *bytes);
void dsi_i4_pass_vnni(const dsi_mat *w, int panel, const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb,
                      float *out);
#define MB_I4 4

/* ---- epilogues: the row's scale multiplied in, then stored / added ---- */
static void iq_epi_row(const dsi_gemm *g, int i, int r, int nj, const float *t) {
  const __mmask16 k = (__mmask16)((1u << nj) - 1);
  const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(t), _mm512_set1_ps(g->xq_scale[i]));
  if (g->epi == DSI_EPI_STORE) {
    _mm512_mask_storeu_ps(g->y + (size_t)i * g->ldy + r, k, v);
    return;
  }
  float *y = g->y + (size_t)g->y_rows[i] * g->ldy + r;
  /* the row's next 16 outputs, which the next panel adds to: scattered
   * rows past the L2 (a prefill's routed outputs) would stall each add on
   * the L3 */
  _mm_prefetch((const char *)(y + DSI_TILE_N), _MM_HINT_T0);
  __m512 p = _mm512_mul_ps(_mm512_set1_ps(g->y_scale[i]), v);
  __asm__("" : "+v"(p)); /* not contracted into an fma: the oracle's rounding */
  _mm512_mask_storeu_ps(y, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, y), p));
}

static void iq_epi_silu(const dsi_gemm *g, int i, int r2, const float *ta, const float *tb) {
  const __m512 s = _mm512_set1_ps(g->xq_scale[i]);
  _mm512_storeu_ps(g->y + (size_t)i * g->ldy + r2,
                   silu_mul512(_mm512_mul_ps(_mm512_loadu_ps(ta), s), _mm512_mul_ps(_mm512_loadu_ps(tb), s)));
}

#endif
