/* kernels: the AMX INT4 matmul (gemm.h contract) — INT4 TILES weights
 * times int8 activations, one scale per row (g->xq). It is the AVX-512
 * VNNI kernel (avx512_int4.c: its driver, unpacking and direct passes of
 * up to 4 rows) with the passes over unpacked panels on AMX INT8 tiles:
 * a 32-column sub-block's unpacked lines are an 8 x 64-byte B tile as they
 * lie (line c: columns 4c..4c+3 of the panel's 16 rows, one dword a row),
 * the activations' 32 columns of up to 16 rows an A tile, and tdpbsud
 * (signed activations x unsigned nibbles) gives each group's exact integer
 * sums, to which the zero point (-8 x the activations' sum) is added;
 * then one f32 multiply-add of the sum times the group's scale, in group
 * order: the VNNI passes' operations, so bitwise their results.
 *
 * Compiled a second time with DSI_AMX_EMU (tests/unit/amx_int4_emu.c),
 * its tile instructions in C (amx_tiles.h), so it is checked against the
 * oracle on any CPU with VNNI. */
#ifdef DSI_AMX_EMU /* the tests' build with emulated tiles: its own name */
#define dsi_gemm_amx_int4 dsi_gemm_amx_int4_emu
#endif
#include "kernels/x86/amx_tiles.h"
#include "kernels/x86/avx512_iq.h"

#include <stdint.h>

#define AMX_I4_ROWS 16 /* activation rows a pass: an A tile's 16 */
/* tile registers (literals: the intrinsics paste them into asm) */
#define TC0 0 /* C: int32 sums, rows x 16 outputs, of panel 0 and 1 */
#define TC1 1
#define TA 4  /* A: int8 activations, rows x 32 columns */
#define TB0 6 /* B: a sub-block's 8 unpacked lines of panel 0 and 1 */
#define TB1 7

/* palette 1: C and A tiles of mb rows (64 and 32 bytes), B of 8 rows of 64 */
static void tiles_for(int mb) {
  _Alignas(64) uint8_t cfg[64];
  memset(cfg, 0, sizeof cfg);
  tile_cfg_set(cfg, TC0, mb, 64);
  tile_cfg_set(cfg, TC1, mb, 64);
  tile_cfg_set(cfg, TA, mb, 32);
  tile_cfg_set(cfg, TB0, 8, 64);
  tile_cfg_set(cfg, TB1, 8, 64);
  tile_config(cfg);
}

/* two panels (u1 NULL: one) times mb <= 16 rows over ng groups of nsub
 * 32-column sub-blocks, as iq_upass_fn says (avx512_iq.h's passes): the
 * sums go on from out (or from zero in the first chunk's pass, first),
 * kept there between groups */
static void upass_amx(const uint8_t *u0, const float *sc0, const uint8_t *u1, const float *sc1, int ng, int nsub,
                      const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb, int first, float *out0,
                      float *out1, iq_pf *pf) {
  _Alignas(64) int32_t c[2][AMX_I4_ROWS * 16];
  DSI_ASSERT(mb >= 1 && mb <= AMX_I4_ROWS);
  const int two = u1 != NULL;
  tiles_for(mb); /* every call: the other AMX kernels load their own shapes */
  const int8_t *x = xq;
  for (int q = 0; q < ng; q++) {
    tile_zero(TC0);
    if (two) tile_zero(TC1);
    for (int b = 0; b < nsub; b++, u0 += 512, u1 += two ? 512 : 0, x += 32) {
      iq_pf_issue(pf, pf->step);
      tile_load(TA, x, ldq);
      tile_load(TB0, u0, 64);
      tile_dpbsud(TC0, TA, TB0);
      if (two) {
        tile_load(TB1, u1, 64);
        tile_dpbsud(TC1, TA, TB1);
      }
    }
    tile_store(TC0, c[0], 64);
    if (two) tile_store(TC1, c[1], 64);
    const __m512 d0 = _mm512_loadu_ps(sc0 + 16 * q), d1 = two ? _mm512_loadu_ps(sc1 + 16 * q) : d0;
    const int zero = first && q == 0; /* the first group: fma onto zero, as the oracle's */
    for (int i = 0; i < mb; i++) {
      const __m512i z = _mm512_set1_epi32(zp[i * zld + q]);
      const __m512 s0 = _mm512_cvtepi32_ps(_mm512_add_epi32(z, _mm512_load_si512(c[0] + 16 * i)));
      _mm512_storeu_ps(out0 + 16 * i,
                       _mm512_fmadd_ps(s0, d0, zero ? _mm512_setzero_ps() : _mm512_loadu_ps(out0 + 16 * i)));
      if (!two) continue;
      const __m512 s1 = _mm512_cvtepi32_ps(_mm512_add_epi32(z, _mm512_load_si512(c[1] + 16 * i)));
      _mm512_storeu_ps(out1 + 16 * i,
                       _mm512_fmadd_ps(s1, d1, zero ? _mm512_setzero_ps() : _mm512_loadu_ps(out1 + 16 * i)));
    }
  }
  iq_pf_issue(pf, SIZE_MAX); /* what the rounding of step left */
}

/* from 8 rows the passes of up to 16 on tiles; below, the VNNI direct passes */
static const iq_unpacked k_unp_amx = {dsi_i4_unpack_panel, dsi_i4_chunk_bytes, upass_amx, AMX_I4_ROWS, 8};

void dsi_gemm_amx_int4(const dsi_gemm *g, int r0, int r1, void *scratch) {
  iq_gemm_run(g, r0, r1, scratch, dsi_i4_pass_vnni, MB_I4, 1, 1, &k_unp_amx);
  tile_release(); /* as the other AMX kernels leave it: nothing for the OS to save on a switch */
}
