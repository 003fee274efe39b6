/* kernels: the driver of the INT4 matmuls (gemm.h contract), shared by the
 * AVX2 and AVX-512 files: row groups -> the group's zero-point sums ->
 * panels -> passes -> epilogue. The including file defines the passes
 * (i4_pass_fn: one panel times mb rows of int8 activations) and the
 * epilogue of one activation row (i4_epi_row, i4_epi_silu), which must
 * multiply in the row's scale after the sum, as gemm_ref_i4 does. */
#ifndef DSI_I4_DRIVER_H
#define DSI_I4_DRIVER_H

#include "base/base.h"
#include "kernels/gemm.h"

#include <string.h>

/* activation rows whose zero-point sums are kept at a time */
#define I4_GROUP_ROWS 64

/* out[i * 16 + j] = sum over the panel's groups, in order, of fma(isum, d_j, .)
 * for activation rows i < mb (xq: row i at xq + i ldq; zp: row i's
 * -8 * sum of xq over group g at zp[i * zld + g]) */
typedef void (*i4_pass_fn)(const uint8_t *wp, int ngroups, int nsub, const int8_t *xq, size_t ldq,
                           const int32_t *zp, int zld, int mb, float *out);

/* y row (16 outputs, nj valid) from a pass's sums t of one activation row */
static void i4_epi_row(const dsi_gemm *g, int i, int r, int nj, const float *t);
/* the SiLU-mul of a gate panel's and an up panel's sums, 16 outputs at r2 */
static void i4_epi_silu(const dsi_gemm *g, int i, int r2, const float *ta, const float *tb);

static void i4_gemm_run(const dsi_gemm *g, int r0, int r1, void *scratch, i4_pass_fn pass, int mbmax) {
  const dsi_mat *w = g->w;
  DSI_ASSERT(w->dtype == DSI_DTYPE_I4 && w->layout == DSI_LAYOUT_TILES && g->xq && g->xq_scale);
  DSI_ASSERT(r0 % DSI_TILE_N == 0 && w->block % 32 == 0 && w->block <= 256);
  const int silu = g->epi == DSI_EPI_SILU_PAIRS;
  if (silu) DSI_ASSERT(r0 % 32 == 0 && (r1 - r0) % 32 == 0);
  const int rows_out = silu ? r1 : DSI_MIN(r1, w->rows);
  if (g->m <= 0 || rows_out <= r0) return;
  const int ng = w->kpad / w->block, nsub = w->block / 32;
  const size_t ldq = DSI_XQ_LD(w->kpad), panel = dsi_i4_panel_bytes(w);
  /* scratch: two result tiles [64][16] and the sums [64][ng] (ng <= kpad / 32) */
  float *ta = scratch, *tb = ta + I4_GROUP_ROWS * DSI_TILE_N;
  int32_t *zp = (int32_t *)(tb + I4_GROUP_ROWS * DSI_TILE_N);
  for (int ig = 0; ig < g->m; ig += I4_GROUP_ROWS) {
    const int n = DSI_MIN(I4_GROUP_ROWS, g->m - ig);
    const int8_t *xq = g->xq + (size_t)ig * ldq;
    for (int i = 0; i < n; i++)
      for (int q = 0; q < ng; q++) {
        const int8_t *x = xq + (size_t)i * ldq + (size_t)q * w->block;
        int32_t s = 0;
        for (int c = 0; c < w->block; c++) s += x[c];
        zp[i * ng + q] = -8 * s;
      }
    /* passes of nearly equal height */
    const int npass = DSI_CEIL_DIV(n, mbmax);
    int at[I4_GROUP_ROWS + 1];
    for (int q = 0; q <= npass; q++) at[q] = (int)((int64_t)n * q / npass);
    for (int r = r0; r < rows_out; r += silu ? 32 : DSI_TILE_N) {
      const uint8_t *wp = (const uint8_t *)w->data + (size_t)(r / DSI_TILE_N) * panel;
      for (int q = 0; q < npass; q++) {
        const int i0 = at[q], mb = at[q + 1] - i0;
        pass(wp, ng, nsub, xq + (size_t)i0 * ldq, ldq, zp + i0 * ng, ng, mb, ta + i0 * DSI_TILE_N);
        if (silu) pass(wp + panel, ng, nsub, xq + (size_t)i0 * ldq, ldq, zp + i0 * ng, ng, mb, tb + i0 * DSI_TILE_N);
      }
      for (int i = 0; i < n; i++) {
        if (silu) i4_epi_silu(g, ig + i, r / 2, ta + i * DSI_TILE_N, tb + i * DSI_TILE_N);
        else i4_epi_row(g, ig + i, r, DSI_MIN(DSI_TILE_N, rows_out - r), ta + i * DSI_TILE_N);
      }
    }
  }
}

#endif
