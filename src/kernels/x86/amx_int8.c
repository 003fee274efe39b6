/* kernels: the AMX INT8 matmul (the gemm.h contract) for INT8 TILES weights
 * times int8 activations with one scale per row (g->xq) — prefill and large
 * batches. Owns the regrouping of B tiles into AMX's 4-k order, the
 * dequantization of int32 tiles per 128-column block and the blocking (the
 * epilogues are the BF16 kernel's, in amx_util.h). Compiled a second time
 * with DSI_AMX_EMU (tests/unit/amx_int8_emu.c), its tile instructions in
 * C (amx_tiles.h), so it is checked against the oracle without AMX. */
#ifdef DSI_AMX_EMU /* the tests' build with emulated tiles: its own name */
#define dsi_gemm_amx_int8 dsi_gemm_amx_int8_emu
#endif
#include "kernels/gemm.h"
#include "kernels/cpu.h"
#include "base/base.h"
#include "kernels/x86/amx_util.h"

#include <immintrin.h>
#include <string.h>

/* Tiles (amx_util.h): C int32 16x16, A int8 16x64 from xq, B int8 16x64 (4 k per dword). */
#define KSTEP 64         /* K of one tile product: 64 int8 per A row */
#define KSTEP_BYTES 1024 /* one B tile (16 rows x 64 int8): one K step of a panel */
#define BLOCK_STEPS 2    /* K steps per 128-column scale block */
/* Blocking, as the BF16 kernel's (amx.c): a pair's B chunk stays in L1
 * while every M block of an M chunk passes over it, the A chunk stays in
 * L2 while a group of pairs passes over it. */
#define KC_STEPS 4  /* K chunk of 256 columns: a pair's B chunk is 8 KiB (4-16 measured alike, 4 a little ahead) */
#define KC_WHOLE 32 /* up to this many K steps (K <= 2048), no K chunks */
#define MC_ROWS 256 /* M chunk */
#define MAX_GROUP 8 /* panel pairs sharing one pass over an A chunk */

/* ---- B: TILES pair order -> AMX INT8 order ----
 * A 64-byte row t of a panel's K step holds k = 4t, 4t+1 of rows 0..15 (16
 * words), then k = 4t+2, 4t+3 of the same rows; AMX wants the four k of
 * row n in dword n. So dword n = (word n, word 16 + n): one vpermw a row.
 * Rows past the panel's kpad (an odd last step) are zero. */
static void regroup_b(const int8_t *src, int rows, int rows_valid, int8_t *dst) {
  static const uint16_t order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                     8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_loadu_si512(order);
  int t = 0;
  for (; t < rows_valid; t++)
    _mm512_store_si512(dst + (size_t)t * 64, _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(src + (size_t)t * 64)));
  for (; t < rows; t++) _mm512_store_si512(dst + (size_t)t * 64, _mm512_setzero_si512());
}

/* ---- one M block over a K chunk ----
 * Per 128-column block: the int32 tiles start at zero, take the block's K
 * steps, go to cst ([32][32] int32) and are added into acc ([32][32] f32)
 * times the panel's scale for that block (init: acc is set, not added to).
 * a: 16 or 32 rows of int8 activations, row stride lda; b0/b1: the chunk's
 * regrouped B of two panels; sc0/sc1: the panels' scales from the chunk's
 * first block. nm, nn are constants after inlining. */
static inline __attribute__((always_inline)) void block_chunk(const int8_t *a, size_t lda, const int8_t *b0,
                                                              const int8_t *b1, int ks, const float *sc0,
                                                              const float *sc1, int init, int nm, int nn,
                                                              int32_t *cst, float *acc) {
  const int8_t *a1 = a + 16 * lda;
  for (int s0 = 0; s0 < ks; s0 += BLOCK_STEPS) {
    tile_zero(T_C00);
    if (nn == 2) tile_zero(T_C01);
    if (nm == 2) tile_zero(T_C10);
    if (nm == 2 && nn == 2) tile_zero(T_C11);
    for (int s = s0; s < DSI_MIN(s0 + BLOCK_STEPS, ks); s++) {
      tile_load(T_B0, b0 + (size_t)s * KSTEP_BYTES, 64);
      tile_load(T_A0, a + (size_t)s * KSTEP, lda);
      tile_dpbssd(T_C00, T_A0, T_B0);
      if (nm == 2) {
        tile_load(T_A1, a1 + (size_t)s * KSTEP, lda);
        tile_dpbssd(T_C10, T_A1, T_B0);
      }
      if (nn == 2) {
        tile_load(T_B1, b1 + (size_t)s * KSTEP_BYTES, 64);
        tile_dpbssd(T_C01, T_A0, T_B1);
        if (nm == 2) tile_dpbssd(T_C11, T_A1, T_B1);
      }
    }
    tile_store(T_C00, cst, 128);
    if (nn == 2) tile_store(T_C01, cst + 16, 128);
    if (nm == 2) tile_store(T_C10, cst + 512, 128);
    if (nm == 2 && nn == 2) tile_store(T_C11, cst + 528, 128);
    const int blk = s0 / BLOCK_STEPS;
    const __m512 f0 = _mm512_set1_ps(sc0[blk]), f1 = _mm512_set1_ps(nn == 2 ? sc1[blk] : 0.0f);
    for (int r = 0; r < 16 * nm; r++)
      for (int j = 0; j < nn; j++) {
        __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(cst + r * 32 + 16 * j));
        float *o = acc + r * 32 + 16 * j;
        __m512 f = j ? f1 : f0;
        _mm512_store_ps(o, init && s0 == 0 ? _mm512_mul_ps(c, f) : _mm512_fmadd_ps(c, f, _mm512_load_ps(o)));
      }
  }
}

static void block_run(const int8_t *a, size_t lda, const int8_t *b0, const int8_t *b1, int ks, const float *sc0,
                      const float *sc1, int init, int nm, int nn, int32_t *cst, float *acc) {
  /* the four shapes as separate loops, so tile numbers stay constants */
  if (nm == 2 && nn == 2) block_chunk(a, lda, b0, b1, ks, sc0, sc1, init, 2, 2, cst, acc);
  else if (nm == 2) block_chunk(a, lda, b0, b1, ks, sc0, sc1, init, 2, 1, cst, acc);
  else if (nn == 2) block_chunk(a, lda, b0, b1, ks, sc0, sc1, init, 1, 2, cst, acc);
  else block_chunk(a, lda, b0, b1, ks, sc0, sc1, init, 1, 1, cst, acc);
}

/* ---- the driver ---- */
/* Loops: M chunk > group of panel pairs > K chunk > pair > 32-row M block.
 * A pair's K chunk of B is regrouped into scratch once per M chunk and
 * read by every M block of it; the group's f32 blocks wait in scratch
 * between K chunks (K chunks are whole 128-column blocks; the f32 blocks
 * are read and written once per 128 columns anyway, so short chunks cost
 * nothing more). The f32 adding is issued in order: overlapping it with
 * the next block's products gained nothing (docs/perf-notes.md). */
void dsi_gemm_amx_int8(const dsi_gemm *g, int r0, int r1, void *scratch) {
  const dsi_mat *w = g->w;
  DSI_ASSERT(w->layout == DSI_LAYOUT_TILES && w->dtype == DSI_DTYPE_I8 && g->xq && g->xq_scale);
  DSI_ASSERT(w->block == BLOCK_STEPS * KSTEP);
#ifndef DSI_AMX_EMU
  DSI_ASSERT(dsi_cpu_get()->amx_int8);
#endif
  if (r1 > w->rows) r1 = w->rows;
  if (r1 <= r0 || g->m <= 0) return;
  const int kpad = w->kpad, m = g->m;
  const size_t lda = DSI_XQ_LD(kpad);
  const int ksteps = (int)(lda / KSTEP), brows = kpad / 4; /* 64-byte B rows a panel holds */
  const int p0 = r0 / DSI_TILE_N, p1 = DSI_CEIL_DIV(r1, DSI_TILE_N);
  const size_t panel_bytes = (size_t)DSI_TILE_N * kpad;
  if (g->epi == DSI_EPI_SILU_PAIRS) DSI_ASSERT(p0 % 2 == 0 && (p1 - p0) % 2 == 0);

  /* scratch: int32 staging, the zero-padded last M block, B, f32 blocks */
  const size_t budget = DSI_GEMM_SCRATCH(w->cols);
  uint8_t *sp = scratch;
  int32_t *cst = (int32_t *)sp;
  sp += 4096;
  const int mfull = m - m % 32;
  const int8_t *atail = (const int8_t *)stage_m_tail(g->xq, lda, m, &sp);
  const int mc = DSI_MIN(DSI_CEIL_DIV(m, 32) * 32, MC_ROWS), nmb_max = mc / 32;
  const int kc = ksteps <= KC_WHOLE ? ksteps : KC_STEPS;
  int8_t *bw = (int8_t *)sp;
  sp += (size_t)2 * kc * KSTEP_BYTES;
  float *acc = (float *)sp;
  int grp = 1;
  if (kc < ksteps) { /* f32 blocks of a whole group wait between K chunks */
    size_t per_pair = (size_t)nmb_max * 4096;
    grp = (int)DSI_MIN((size_t)MAX_GROUP, (budget - (size_t)(sp - (uint8_t *)scratch)) / per_pair);
    DSI_ASSERT(grp >= 1);
    sp += (size_t)grp * per_pair;
  } else {
    sp += 4096;
  }
  DSI_ASSERT((size_t)(sp - (uint8_t *)scratch) <= budget);

  tiles_configure();
  for (int i0 = 0; i0 < m; i0 += mc) {
    const int nmb = DSI_CEIL_DIV(DSI_MIN(mc, m - i0), 32);
    for (int q0 = p0; q0 < p1; q0 += 2 * grp) {
      const int q1 = DSI_MIN(p1, q0 + 2 * grp);
      for (int k0 = 0; k0 < ksteps; k0 += kc) {
        const int ks = DSI_MIN(kc, ksteps - k0), first = k0 == 0, last = k0 + ks >= ksteps;
        const int rows_valid = DSI_MAX(0, DSI_MIN(ks * 16, brows - k0 * 16));
        for (int q = q0; q < q1; q += 2) {
          const int nn = DSI_MIN(2, q1 - q);
          const int8_t *src = (const int8_t *)w->data + (size_t)q * panel_bytes + (size_t)k0 * KSTEP_BYTES;
          regroup_b(src, ks * 16, rows_valid, bw);
          if (nn == 2) regroup_b(src + panel_bytes, ks * 16, rows_valid, bw + (size_t)ks * KSTEP_BYTES);
          const float *sc0 = w->scale + (size_t)q * w->scale_cols + k0 / BLOCK_STEPS;
          const float *sc1 = sc0 + w->scale_cols;
          float *qacc = kc < ksteps ? acc + (size_t)((q - q0) / 2) * nmb_max * 1024 : acc;
          /* the next pair's chunk of B is fetched into L2 while this pair
           * computes, a share before each M block (its first use, the
           * regrouping, would otherwise wait on memory) */
          const int8_t *next = q + 2 < q1 ? src + 2 * panel_bytes : NULL;
          const int next_lines = 2 * rows_valid, per_mb = DSI_CEIL_DIV(next_lines, nmb);
          for (int mb = 0; mb < nmb; mb++) {
            for (int l = mb * per_mb; next && l < DSI_MIN(next_lines, (mb + 1) * per_mb); l++)
              _mm_prefetch((const char *)next + (size_t)(l < rows_valid ? l : l - rows_valid + brows) * 64, _MM_HINT_T1);
            const int ib = i0 + mb * 32, nrows = DSI_MIN(32, m - ib), nm = nrows > 16 ? 2 : 1;
            const int8_t *a = ib >= mfull ? atail : g->xq + (size_t)ib * lda;
            float *bacc = kc < ksteps ? qacc + (size_t)mb * 1024 : acc;
            block_run(a + (size_t)k0 * KSTEP, lda, bw, bw + (size_t)ks * KSTEP_BYTES, ks, sc0, sc1, first, nm, nn,
                      cst, bacc);
            if (last) epilogue(g, bacc, g->xq_scale, ib, nrows, q, nn);
          }
        }
      }
    }
  }
  tile_release();
}
