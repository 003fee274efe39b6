/* tensor: the view of a matrix every layer passes around — its dtype,
 * shape, data, FP8/INT8 block scales and layout (row-major as in the
 * checkpoint, or the kernels' TILES panels) — and the index arithmetic of
 * the TILES layout. Views borrow their memory. */
#ifndef DSI_MAT_H
#define DSI_MAT_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"

/* Layouts a weight can be held in.
 * ROWS:  row-major [rows][cols], as in the checkpoint.
 * TILES: the kernels' own layout (the CPU analogue of Ascend's FRACTAL_NZ):
 *        rows in panels of 16, columns in pairs, [rows/16][kpad/2][16][2];
 *        rows padded to 16 and columns to kpad (a multiple of 32) with
 *        zeros. One 64-byte line of BF16 is 16 outputs x 2 inputs: the
 *        operand of vdpbf16ps and a row of an AMX BF16 B tile (a 16x32 tile
 *        is 1 KiB of contiguous memory); the AVX-512 matvec reads the same
 *        lines, so one copy serves decode and prefill. F32 and FP8 use the
 *        same element order. FP8 scales are held per 16-row panel:
 *        scale[(r / 16) * scale_cols + c / block], so every 16x32 tile
 *        has one scale. INT8 (weights quantized at load) keeps the same
 *        element order too, with the same scale indexing and block = 128:
 *        one scale per 16x128 tile, w = q * scale. The AMX INT8 kernel
 *        wants 4 consecutive k per dword instead of 2 and regroups each
 *        16x64 B tile in scratch as it goes (once per tile and M chunk, a
 *        few percent of the tile products), so one copy and one order
 *        serve every dtype, the widening, the packers and the AVX-512
 *        kernel. */
/* INT4 (weights quantized at load, DSI_DTYPE_I4) keeps the 16-row panels
 * but not the pair order: a panel is kpad / block groups of `block`
 * columns (kpad a multiple of block, block a multiple of 32), each group
 * block / 32 sub-blocks of 256 bytes followed by the group's 16 f16
 * scales, one per row (32 bytes), so a panel is one forward stream. In
 * sub-block s of group g (columns c0 = g block + 32 s ..), byte 64 u +
 * 4 j + t holds row j's column c0 + 4 u + t in its low nibble and column
 * c0 + 16 + 4 u + t in its high nibble (u, t < 4): after a mask or a
 * shift, a 64-byte line is the unsigned operand of vpdpbusd for 16 rows
 * and 4 columns. A nibble q means (q - 8) * scale; padding is q = 8. */
typedef enum { DSI_LAYOUT_ROWS, DSI_LAYOUT_TILES } dsi_layout;

/* A weight matrix [rows = out, cols = in] in its checkpoint dtype. FP8
 * carries one f32 scale per block x block tile
 * (scale[(r/block) * scale_cols + c/block], partial tiles at the edges),
 * applied when widening: w = fp8 * scale. INT8 is read the same way
 * (w = q * scale); packed, its scales are per 16-row panel as above. */
typedef struct dsi_mat {
  dsi_dtype dtype;
  int rows, cols;
  const void *data;
  const float *scale; /* FP8 and INT8 only (INT4's are in its panels) */
  int block;          /* FP8 / INT8 block size (128); INT4 group size */
  int scale_cols;     /* ceil(cols / block) */
  dsi_layout layout;
  int kpad;           /* TILES: padded columns (multiple of 32) */
  int nan_free;       /* FP8: 1 when no byte is a NaN (the loader checks every
                         weight): kernels may skip turning them into NaNs.
                         0: not known */
} dsi_mat;

#define DSI_TILE_N 16
#define DSI_TILE_K 32

/* INT4: where row j's column c of a group lies: its byte (from the group's
 * start) and *hi, whether in the high nibble */
static inline size_t dsi_i4_byte(int j, int c, int *hi) {
  *hi = (c & 31) >= 16;
  return (size_t)(c / 32) * 256 + (size_t)(c & 15) / 4 * 64 + 4 * j + (c & 3);
}
/* INT4: bytes of one group of a panel, and of a panel */
static inline size_t dsi_i4_group_bytes(int block) { return (size_t)block * DSI_TILE_N / 2 + DSI_TILE_N * 2; }
static inline size_t dsi_i4_panel_bytes(const dsi_mat *w) { return (size_t)(w->kpad / w->block) * dsi_i4_group_bytes(w->block); }

/* panels [p0, p0 + ceil(rows/16)) of a TILES matrix, as a matrix of its own */
static inline dsi_mat dsi_mat_panels(const dsi_mat *w, int p0, int rows) {
  dsi_mat v = *w;
  v.data = (const uint8_t *)w->data + (w->dtype == DSI_DTYPE_I4 ? (size_t)p0 * dsi_i4_panel_bytes(w)
                                                                  : (size_t)p0 * DSI_TILE_N * w->kpad * dsi_dtype_size(w->dtype));
  if (w->scale) v.scale = w->scale + (size_t)p0 * w->scale_cols;
  v.rows = rows;
  return v;
}

/* element offset of (r, c) in a TILES matrix */
static inline size_t dsi_tiles_index(const dsi_mat *w, int r, int c) {
  return (((size_t)(r / DSI_TILE_N) * (w->kpad / 2) + c / 2) * DSI_TILE_N + r % DSI_TILE_N) * 2 + (c & 1);
}

#endif
