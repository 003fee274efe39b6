/* kernels: the AVX-512 VNNI INT8 matmul (gemm.h contract) — INT8 TILES
 * weights (tensor/mat.h) times int8 activations, one scale per row
 * (g->xq), for decode and prefill alike on CPUs without AMX INT8 (or
 * below its batch sizes). A 64-byte line of a panel holds k = 4t, 4t+1 of
 * its 16 rows (16 words), then k = 4t+2, 4t+3; one vpermw puts row j's
 * four k in dword j (as amx_int8.c regroups its B tiles) and xor 0x80
 * makes them unsigned (w + 128), the operand of vpdpbusd against the
 * activations' 4 bytes broadcast. The zero point enters as each 128-column
 * block's integer sum starting at -128 * the activations' sum over the
 * block (iq_driver.h); the exact block sum times the panel's scale for
 * the block is added in f32, then the row's scale multiplied in: the
 * operations of dsi_gemm_ref given int8 activations. */
#include "kernels/x86/avx512_iq.h"

/* activation rows a pass holds, and integer chains per row (a vpdpbusd
 * chain is latency-bound). Measured per core on a Zen 4 (expert_up 2048 x
 * 7168, thread CPU time, GOP/s at 16 / 64 / 256 rows; the core's
 * vpdpbusd peak is about 435): 8 rows of 2 chains 380-400; 8 rows of one
 * chain 355-380; 12 rows of one chain 355-390; 6 rows of 2 chains
 * 290-380; 4 rows of 2 or 4 chains 230-345. Below 4 rows (decode) 4
 * chains, then 2. */
#define MB_I8 8
#define NCH_OF(mb) ((mb) >= 4 ? 2 : 4)

/* One panel times MB rows: per scale block the NCH chains of each row
 * start at its zero-point sum (chain 0) and zero, take the block's lines
 * in turn and are added at the block's end (exact); the block's sum times
 * its scale is added into out in f32 (the first block: fma onto zero, as
 * the oracle's). MB, NCH are constants after inlining. */
/* a panel's 64-byte line as vpdpbusd's unsigned operand: row j's four k
 * in dword j (vpermw), made unsigned (xor 0x80) */
static const uint16_t k_order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                     8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
ALWAYS_INLINE __m512i i8_operand(const int8_t *l, __m512i idx) {
  return _mm512_xor_si512(_mm512_permutexvar_epi16(idx, _mm512_loadu_si512(l)), _mm512_set1_epi8((char)0x80));
}

ALWAYS_INLINE void i8_pass(const int8_t *wp, const float *sc, int kpad, int block, const int8_t *xq, size_t ldq,
                           const int32_t *zp, int zld, int MB, int NCH, float *out) {
  const __m512i idx = _mm512_loadu_si512(k_order);
  const int nt = kpad / 4, bt = block / 4; /* lines in the panel, in a block (multiples of 8) */
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) _mm512_storeu_ps(out + 16 * i, _mm512_setzero_ps());
  for (int q = 0, t0 = 0; t0 < nt; q++, t0 += bt) {
    const int t1 = DSI_MIN(nt, t0 + bt);
    __m512i s[MB_I8][4];
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) {
      s[i][0] = _mm512_set1_epi32(zp[i * zld + q]);
      for (int c = 1; c < NCH; c++) s[i][c] = _mm512_setzero_si512();
    }
    for (int t = t0; t < t1; t += 4) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; u++) {
        const int8_t *l = wp + (size_t)(t + u) * 64;
        _mm_prefetch((const char *)l + PF_AHEAD, _MM_HINT_T1);
        const __m512i v = i8_operand(l, idx);
        const int c = u % NCH;
#pragma GCC unroll 16
        for (int i = 0; i < MB; i++) s[i][c] = dot_vnni(s[i][c], v, xq + i * ldq + 4 * (t + u));
      }
    }
    const __m512 d = _mm512_set1_ps(sc[q]);
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) {
      __m512i a = s[i][0];
      for (int c = 1; c < NCH; c++) a = _mm512_add_epi32(a, s[i][c]);
      _mm512_storeu_ps(out + 16 * i, _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), d, _mm512_loadu_ps(out + 16 * i)));
    }
  }
}

#define CASES_MB(F) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) /* up to MB_I8 */

static void pass_vnni(const dsi_mat *w, int panel, const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb,
                      float *out) {
  const int8_t *wp = (const int8_t *)w->data + (size_t)panel * DSI_TILE_N * w->kpad;
  const float *sc = w->scale + (size_t)panel * w->scale_cols;
  switch (mb) {
#define F(n)                                                                \
  case n: i8_pass(wp, sc, w->kpad, w->block, xq, ldq, zp, zld, n, NCH_OF(n), out); break;
    CASES_MB(F)
#undef F
  default: DSI_ASSERT(0);
  }
}

/* prefill: where blocks q0..q0+nq of a panel lie (iq_unpacked's chunk) */
static const uint8_t *chunk_bytes(const dsi_mat *w, int panel, int q0, int nq, size_t *bytes) {
  *bytes = (size_t)nq * w->block * DSI_TILE_N;
  return (const uint8_t *)w->data + (size_t)panel * DSI_TILE_N * w->kpad + (size_t)q0 * w->block * DSI_TILE_N;
}

/* those blocks as vpdpbusd's operand lines, each block's scale repeated
 * 16 times (iq_unpacked; the passes avx512_iq.h's) */
static void unpack_panel(const dsi_mat *w, int panel, int q0, int nq, uint8_t *lines, float *scales) {
  const __m512i idx = _mm512_loadu_si512(k_order);
  size_t bytes;
  const int8_t *wp = (const int8_t *)chunk_bytes(w, panel, q0, nq, &bytes);
  const float *sc = w->scale + (size_t)panel * w->scale_cols + q0;
  for (size_t t = 0; t < bytes / 64; t++)
    _mm512_store_si512(lines + 64 * t, i8_operand(wp + 64 * t, idx));
  for (int q = 0; q < nq; q++) _mm512_storeu_ps(scales + 16 * q, _mm512_set1_ps(sc[q]));
}

/* from 16 rows: on an Emerald Rapids Xeon without AMX (bench kernels,
 * expert_up 2048 x 7168, 2 threads, medians of 5 alternating runs) 1.25x
 * the direct passes at 16 rows, 1.7x at 64 and 256, 0.76x at 8 */
static const iq_unpacked k_unp = {unpack_panel, chunk_bytes, iq_upass_vnni, MB_UV, 16};

void dsi_gemm_avx512_vnni_i8(const dsi_gemm *g, int r0, int r1, void *scratch) {
  DSI_ASSERT(g->w->block % 32 == 0 && g->w->kpad % 32 == 0);
  /* whole blocks only: the unpacked passes take block / 32 sub-blocks a block */
  iq_gemm_run(g, r0, r1, scratch, pass_vnni, MB_I8, 1, 1,
              g->w->kpad % g->w->block ? NULL : &k_unp);
}
