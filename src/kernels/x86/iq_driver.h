/* kernels: the driver of the integer matmuls (gemm.h contract) — INT4 or
 * INT8 TILES weights times int8 activations (g->xq), shared by the AVX2
 * and AVX-512 files: row groups -> the groups' zero-point sums (added up
 * from g->xq_sum's 32-column pieces when the caller has them) -> panels ->
 * passes -> epilogue. Both weight types enter the dot products as
 * unsigned bytes with a zero point z (INT4's nibbles: 8; INT8 made
 * unsigned by xor 0x80: 128), so a block's integer sum starts at -z times
 * the activations' sum over the block. The including file defines the
 * passes (iq_pass_fn: one panel times mb rows of int8 activations) and the
 * epilogue of one activation row (iq_epi_row, iq_epi_silu), which must
 * multiply in the row's scale after the sum, as dsi_gemm_ref does. */
#ifndef DSI_IQ_DRIVER_H
#define DSI_IQ_DRIVER_H

#include "base/base.h"
#include "kernels/gemm.h"

#include <immintrin.h>
#include <string.h>

/* activation rows whose zero-point sums are kept at a time: where panels
 * are unpacked (iq_unpacked), twice as many, so that a prefill's dense
 * matmuls unpack each panel half as often (an Emerald Rapids Xeon: the
 * integer matmuls' samples 2.6% fewer in an INT4 prefill, 0.6% in INT8;
 * 256 rows no better); the direct passes (AVX2) measured no gain */
#define IQ_GROUP_ROWS 64
#define IQ_GROUP_ROWS_UNPACKED 128
/* columns of two panels unpacked at a time (iq_unpacked): 16 KB of
 * operand lines, which stay in L1 for all the passes */
#define IQ_CHUNK_COLS 512

/* out[i * 16 + j] = sum over the panel's blocks (INT4 groups, INT8 scale
 * blocks), in order, of fma(isum, d_j, .) for activation rows i < mb (xq:
 * row i at xq + i ldq; zp: row i's -z * sum of xq over block q at
 * zp[i * zld + q]) */
typedef void (*iq_pass_fn)(const dsi_mat *w, int panel, const int8_t *xq, size_t ldq, const int32_t *zp, int zld,
                           int mb, float *out);

/* the lines of the next chunk one pass prefetches (a slice of each of up
 * to two panels' chunks), issued `step` at a time between the pass's
 * sub-blocks: issued all at once before the pass, they filled the core's
 * line fill buffers and stalled it (the prefetch instructions took 2.7%
 * of an INT8 prefill's samples) */
typedef struct {
  const uint8_t *p[2];
  size_t n[2], step;
} iq_pf;

/* up to k more of f's lines */
static inline void iq_pf_issue(iq_pf *f, size_t k) {
  for (int r = 0; r < 2; r++)
    for (; f->n[r] && k; f->n[r]--, k--, f->p[r] += 64) _mm_prefetch((const char *)f->p[r], _MM_HINT_T1);
}

/* Where panels are worth unpacking once for all their passes (the
 * AVX-512 INT4 and INT8 kernels in prefill): unpack writes a panel's
 * weights as the passes' operand bytes into lines (a byte a weight, 16 a
 * column) and its scales as f32 into scales (16 a block); pass then multiplies two such panels (a
 * gate/up pair, or two consecutive panels; one where there is no second:
 * lines1 NULL) by mb activation rows, the sums as iq_pass_fn's into out0
 * and out1 (added to what they hold, or, first, written), issuing pf's
 * prefetches on the way. From min_rows activation rows in a group, in
 * passes of at most mb. */
typedef void (*iq_unpack_fn)(const dsi_mat *w, int panel, int q0, int nq, uint8_t *lines, float *scales);
/* the weight bytes unpack reads for those blocks: where they start, how many */
typedef const uint8_t *(*iq_chunk_fn)(const dsi_mat *w, int panel, int q0, int nq, size_t *bytes);
typedef void (*iq_upass_fn)(const uint8_t *lines0, const float *scales0, const uint8_t *lines1, const float *scales1,
                            int ng, int nsub, const int8_t *xq, size_t ldq, const int32_t *zp, int zld, int mb,
                            int first, float *out0, float *out1, iq_pf *pf);
typedef struct {
  iq_unpack_fn unpack;
  iq_chunk_fn chunk;
  iq_upass_fn pass;
  int mb, min_rows;
} iq_unpacked;

/* a chunk's weight bytes to prefetch into L2 in `parts` slices of `per`
 * lines (located once a chunk: a pass takes one slice, iq_pf) */
typedef struct {
  const uint8_t *p;
  size_t lines, per;
} iq_next;

static inline iq_next iq_next_chunk(const iq_unpacked *up, const dsi_mat *w, int panel, int q0, int nq, int parts) {
  size_t n;
  const uint8_t *p = up->chunk(w, panel, q0, nq, &n);
  const size_t lines = (n + 63) / 64;
  return (iq_next){p, lines, (lines + (size_t)parts - 1) / (size_t)parts};
}

/* f: pass `part`'s slices of the chunks nx[0..nn), `step` lines a
 * sub-block (filled in place: a copy of the struct, stored in halves and
 * loaded whole, stalled on the store forwarding) */
static inline void iq_pass_prefetch(iq_pf *f, const iq_next *nx, int nn, int part, size_t step) {
  f->step = step;
  for (int i = 0; i < 2; i++) {
    const size_t a = i < nn ? DSI_MIN(nx[i].per * (size_t)part, nx[i].lines) : 0;
    f->p[i] = i < nn ? nx[i].p + 64 * a : NULL;
    f->n[i] = i < nn ? DSI_MIN(a + nx[i].per, nx[i].lines) - a : 0;
  }
}

/* y row (16 outputs, nj valid) from a pass's sums t of one activation row */
static void iq_epi_row(const dsi_gemm *g, int i, int r, int nj, const float *t);
/* the SiLU-mul of a gate panel's and an up panel's sums, 16 outputs at r2 */
static void iq_epi_silu(const dsi_gemm *g, int i, int r2, const float *ta, const float *tb);

/* zero_point: the passes read the zero-point sums (0: they take the
 * weights signed, and zp is not computed); xsz: bytes an activation
 * element takes in g->xq (2: int16 rows there, which the passes read as
 * such; then no zero point) */
static void iq_gemm_run(const dsi_gemm *g, int r0, int r1, void *scratch, iq_pass_fn pass, int mbmax, int zero_point,
                        int xsz, const iq_unpacked *up) {
  const dsi_mat *w = g->w;
  const int i4 = w->dtype == DSI_DTYPE_I4;
  DSI_ASSERT((i4 || w->dtype == DSI_DTYPE_I8) && w->layout == DSI_LAYOUT_TILES && g->xq && g->xq_scale);
  DSI_ASSERT(r0 % DSI_TILE_N == 0 && w->block % 32 == 0 && w->block <= 256);
  const int silu = g->epi == DSI_EPI_SILU_PAIRS;
  if (silu) DSI_ASSERT(r0 % 32 == 0 && (r1 - r0) % 32 == 0);
  const int rows_out = silu ? r1 : DSI_MIN(r1, w->rows);
  if (g->m <= 0 || rows_out <= r0) return;
  const int ng = DSI_CEIL_DIV(w->kpad, w->block), zero = i4 ? 8 : 128;
  const size_t ldq = DSI_XQ_LD(w->kpad);
  DSI_ASSERT(xsz == 1 || !zero_point);
  /* scratch: two result tiles [group][16], the sums [group][ng] (ng <= kpad /
   * 32), and where up runs two unpacked panels and their scales */
  const int group = up ? IQ_GROUP_ROWS_UNPACKED : IQ_GROUP_ROWS;
  float *ta = scratch, *tb = ta + group * DSI_TILE_N;
  int32_t *zp = (int32_t *)(tb + group * DSI_TILE_N);
  const int kc = DSI_MAX(1, IQ_CHUNK_COLS / w->block); /* blocks a chunk */
  const size_t lb = up ? (size_t)DSI_TILE_N * kc * w->block : 0;
  uint8_t *ul[2] = {(uint8_t *)(zp + (size_t)group * ng), NULL};
  ul[0] += (64 - (uintptr_t)ul[0] % 64) % 64;
  ul[1] = ul[0] + lb;
  float *us[2] = {(float *)(ul[1] + lb), (float *)(ul[1] + lb) + (size_t)kc * DSI_TILE_N};
  DSI_ASSERT(!up || (size_t)((uint8_t *)(us[1] + (size_t)kc * DSI_TILE_N) - (uint8_t *)scratch) <=
                        DSI_GEMM_SCRATCH(w->cols));
  for (int ig = 0; ig < g->m; ig += group) {
    const int n = DSI_MIN(group, g->m - ig);
    const int8_t *xq = g->xq + (size_t)ig * ldq * xsz;
    const int32_t *xs = g->xq_sum ? g->xq_sum + (size_t)ig * (ldq / 32) : NULL;
    if (zero_point && xs && w->block == 32) { /* a group is one piece */
      for (int i = 0; i < n; i++)
        for (int q = 0; q < ng; q++) zp[i * ng + q] = -zero * xs[(size_t)i * (ldq / 32) + q];
    } else if (zero_point) {
      for (int i = 0; i < n; i++)
        for (int q = 0; q < ng; q++) {
          const int nc = DSI_MIN(w->block, w->kpad - q * w->block); /* INT8: the last block may be short */
          int32_t s = 0;
          if (xs) { /* nc is a multiple of 32: the block's pieces summed */
            const int32_t *p = xs + (size_t)i * (ldq / 32) + (size_t)q * w->block / 32;
            for (int c = 0; c < nc / 32; c++) s += p[c];
          } else {
            const int8_t *x = xq + (size_t)i * ldq + (size_t)q * w->block;
            for (int c = 0; c < nc; c++) s += x[c];
          }
          zp[i * ng + q] = -zero * s;
        }
    }
    /* passes of nearly equal height */
    const int unp = up && n >= up->min_rows;
    const int npass = DSI_CEIL_DIV(n, unp ? up->mb : mbmax);
    int at[IQ_GROUP_ROWS_UNPACKED + 1];
    for (int q = 0; q <= npass; q++) at[q] = (int)((int64_t)n * q / npass);
    if (unp) { /* two panels at a time, unpacked a chunk of blocks at a time */
      for (int r = r0; r < rows_out; r += 32) {
        const int p = r / DSI_TILE_N, two = silu || r + DSI_TILE_N < rows_out;
        for (int q0 = 0; q0 < ng; q0 += kc) {
          const int nq = DSI_MIN(kc, ng - q0);
          up->unpack(w, p, q0, nq, ul[0], us[0]);
          if (two) up->unpack(w, p + 1, q0, nq, ul[1], us[1]);
          /* the next chunk (the same panels' next blocks, or the next two
           * panels' first) on its way from memory while this one's passes
           * run, a slice during each pass (iq_pf): else its unpack waits on it */
          const int np = q0 + kc < ng ? p : p + 2, nq0 = q0 + kc < ng ? q0 + kc : 0;
          iq_next nx[2];
          int nn = 0;
          for (int i = 0; i < 2; i++)
            if ((np + i) * DSI_TILE_N < rows_out) nx[nn++] = iq_next_chunk(up, w, np + i, nq0, DSI_MIN(kc, ng - nq0), npass);
          size_t per = 0; /* a pass's lines, spread over its nq * block / 32 sub-blocks */
          for (int i = 0; i < nn; i++) per += nx[i].per;
          const size_t sub = (size_t)nq * (w->block / 32), step = (per + sub - 1) / sub;
          for (int q = 0; q < npass; q++) {
            iq_pf pf;
            iq_pass_prefetch(&pf, nx, nn, q, step);
            const int i0 = at[q];
            up->pass(ul[0], us[0], two ? ul[1] : NULL, us[1], nq, w->block / 32,
                     xq + (size_t)i0 * ldq + (size_t)q0 * w->block, ldq, zp + i0 * ng + q0, ng, at[q + 1] - i0,
                     q0 == 0, ta + i0 * DSI_TILE_N, tb + i0 * DSI_TILE_N, &pf);
          }
        }
        for (int i = 0; i < n; i++) {
          if (silu) {
            iq_epi_silu(g, ig + i, r / 2, ta + i * DSI_TILE_N, tb + i * DSI_TILE_N);
            continue;
          }
          iq_epi_row(g, ig + i, r, DSI_MIN(DSI_TILE_N, rows_out - r), ta + i * DSI_TILE_N);
          if (two) iq_epi_row(g, ig + i, r + DSI_TILE_N, DSI_MIN(DSI_TILE_N, rows_out - r - DSI_TILE_N), tb + i * DSI_TILE_N);
        }
      }
      continue;
    }
    for (int r = r0; r < rows_out; r += silu ? 32 : DSI_TILE_N) {
      const int p = r / DSI_TILE_N;
      for (int q = 0; q < npass; q++) {
        const int i0 = at[q], mb = at[q + 1] - i0;
        const int8_t *xi = xq + (size_t)i0 * ldq * xsz;
        pass(w, p, xi, ldq, zp + i0 * ng, ng, mb, ta + i0 * DSI_TILE_N);
        if (silu) pass(w, p + 1, xi, ldq, zp + i0 * ng, ng, mb, tb + i0 * DSI_TILE_N);
      }
      for (int i = 0; i < n; i++) {
        if (silu) iq_epi_silu(g, ig + i, r / 2, ta + i * DSI_TILE_N, tb + i * DSI_TILE_N);
        else iq_epi_row(g, ig + i, r, DSI_MIN(DSI_TILE_N, rows_out - r), ta + i * DSI_TILE_N);
      }
    }
  }
}

#endif
