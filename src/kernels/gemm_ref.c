/* kernels: the scalar reference of the matmul contract (gemm.h), the
 * gate/up panel packing, and f32 -> bf16 / int8 activation rows. */
#include "kernels/gemm.h"
#include "kernels/attn.h"
#include "base/base.h"
#include "base/pool.h"
#include "kernels/vec.h"

#include <math.h>
#include <string.h>

static inline const float *x_row(const dsi_gemm *g, int i) {
  return g->x + (size_t)(g->x_rows ? g->x_rows[i] : i) * g->ldx;
}

static inline float silu(float v) { return v / (1.0f + expf(-v)); }

/* ---- INT4 / INT8 weights times int8 activations ----
 * acc(i, r) = xs_i * sum over blocks (INT4 groups, INT8 128-column scale
 * blocks), in order, of fma(isum, d_r,g, .), isum the exact integer sum
 * of the weights' integers (INT4: q - 8) times xq over the block: every
 * kernel computes these same operations (an int32 sum is exact in any
 * order, and under 2^24 for blocks of up to 256 columns), so all agree
 * bitwise before the epilogue and a row's result does not depend on its
 * batch. */
static float i4_acc(const dsi_mat *w, int r, const int8_t *xq, float xs) {
  const int B = w->block;
  const uint8_t *grp = (const uint8_t *)w->data + (size_t)(r / DSI_TILE_N) * dsi_i4_panel_bytes(w);
  const int j = r % DSI_TILE_N;
  float acc = 0;
  for (int c0 = 0; c0 < w->kpad; c0 += B, grp += dsi_i4_group_bytes(B)) {
    int32_t isum = 0;
    for (int c = 0; c < B; c++) {
      int hi;
      uint8_t b = grp[dsi_i4_byte(j, c, &hi)];
      isum += ((hi ? b >> 4 : b & 15) - 8) * xq[c0 + c];
    }
    uint16_t d;
    memcpy(&d, grp + (size_t)B * DSI_TILE_N / 2 + 2 * j, 2);
    acc = fmaf((float)isum, dsi_f16_to_f32(d), acc);
  }
  return acc * xs;
}

/* INT8 times int8 activations xq, or int16 ones xw where not NULL: the
 * same, a block's sum exact in int32 (|sum| <= 256 x 127 x 32767 <
 * 2^31) and rounded to f32 as the kernels' conversion rounds it */
static float i8_acc(const dsi_mat *w, int r, const int8_t *xq, const int16_t *xw, float xs) {
  const int8_t *d = w->data;
  const float *sc = w->scale + (size_t)(r / DSI_TILE_N) * w->scale_cols;
  float acc = 0;
  for (int c0 = 0, q = 0; c0 < w->kpad; c0 += w->block, q++) {
    int32_t isum = 0;
    for (int c = c0; c < DSI_MIN(c0 + w->block, w->kpad); c++) isum += d[dsi_tiles_index(w, r, c)] * (xw ? xw[c] : xq[c]);
    acc = fmaf((float)isum, sc[q], acc);
  }
  return acc * xs;
}

/* row i's accumulation for output row r, from int16 rows where given */
static float iq_acc(const dsi_gemm *g, int r, int i, const int8_t *xq, const float *xs, size_t ldq) {
  const dsi_mat *w = g->w;
  if (g->xw) return i8_acc(w, r, NULL, g->xw + (size_t)i * ldq, g->xw_scale[i]);
  return w->dtype == DSI_DTYPE_I4 ? i4_acc(w, r, xq + (size_t)i * ldq, xs[i]) : i8_acc(w, r, xq + (size_t)i * ldq, NULL, xs[i]);
}

/* INT4 (int8 activations prepared or not), INT8 TILES given xq or xw */
static void gemm_ref_iq(const dsi_gemm *g, int r0, int r1, void *scratch) {
  const dsi_mat *w = g->w;
  const size_t ldq = DSI_XQ_LD(w->kpad);
  const int8_t *xq = g->xq;
  const float *xs = g->xq_scale;
  DSI_ASSERT(!g->xw || w->dtype == DSI_DTYPE_I8);
  if (!xq && !g->xw) { /* not prepared: quantized here, as dsi_rows_to_i8 does */
    DSI_ASSERT((size_t)g->m * (ldq + sizeof(float)) <= DSI_GEMM_SCRATCH(w->cols));
    float *s = scratch;
    int8_t *q = (int8_t *)(s + g->m);
    dsi_rows_to_i8(&dsi_vec_ops_generic, g->x, g->ldx, g->x_rows, g->m, w->cols, (int)ldq, q, s, NULL);
    xq = q, xs = s;
  }
  if (g->epi == DSI_EPI_SILU_PAIRS) {
    DSI_ASSERT(r0 % 32 == 0);
    for (int r = r0; r < r1; r += 32)
      for (int j = 0; j < DSI_TILE_N; j++)
        for (int i = 0; i < g->m; i++)
          g->y[(size_t)i * g->ldy + r / 2 + j] = silu(iq_acc(g, r + j, i, xq, xs, ldq)) * iq_acc(g, r + 16 + j, i, xq, xs, ldq);
    return;
  }
  for (int r = r0; r < r1 && r < w->rows; r++)
    for (int i = 0; i < g->m; i++) {
      float acc = iq_acc(g, r, i, xq, xs, ldq);
      if (g->epi == DSI_EPI_STORE) g->y[(size_t)i * g->ldy + r] = acc;
      else g->y[(size_t)g->y_rows[i] * g->ldy + r] += g->y_scale[i] * acc;
    }
}

void dsi_gemm_ref(const dsi_gemm *g, int r0, int r1, void *scratch) {
  const dsi_mat *w = g->w;
  if (w->dtype == DSI_DTYPE_I4 || (w->dtype == DSI_DTYPE_I8 && w->layout == DSI_LAYOUT_TILES && (g->xq || g->xw))) {
    gemm_ref_iq(g, r0, r1, scratch);
    return;
  }
  int K = w->cols;
  float *row = scratch, *row2 = row + K;
  if (g->epi == DSI_EPI_SILU_PAIRS) {
    DSI_ASSERT(r0 % 32 == 0);
    for (int r = r0; r < r1; r += 32)
      for (int j = 0; j < DSI_TILE_N; j++) {
        dsi_k_row_f32(w, r + j, 0, K, row);
        dsi_k_row_f32(w, r + 16 + j, 0, K, row2);
        for (int i = 0; i < g->m; i++) {
          const float *x = x_row(g, i);
          g->y[(size_t)i * g->ldy + r / 2 + j] = silu(dsi_k_dot(row, x, K)) * dsi_k_dot(row2, x, K);
        }
      }
    return;
  }
  for (int r = r0; r < r1 && r < w->rows; r++) {
    dsi_k_row_f32(w, r, 0, K, row);
    for (int i = 0; i < g->m; i++) {
      float acc = dsi_k_dot(row, x_row(g, i), K);
      if (g->epi == DSI_EPI_STORE) g->y[(size_t)i * g->ldy + r] = acc;
      else g->y[(size_t)g->y_rows[i] * g->ldy + r] += g->y_scale[i] * acc;
    }
  }
}

/* ---- gate/up panel pairs ---- */
static dsi_mat gate_up_shape(const dsi_mat *gate) {
  dsi_mat s = *gate;
  s.rows = (int)DSI_CEIL_DIV(gate->rows, DSI_TILE_N) * DSI_TILE_N * 2;
  s.layout = DSI_LAYOUT_ROWS;
  return s;
}

size_t dsi_pack_gate_up_bytes(const dsi_mat *gate) {
  dsi_mat s = gate_up_shape(gate);
  return dsi_pack_bytes(&s);
}

void dsi_pack_gate_up(const dsi_mat *gate, const dsi_mat *up, dsi_mat *dst, void *mem) {
  DSI_ASSERT(gate->rows == up->rows && gate->cols == up->cols && gate->dtype == up->dtype);
  DSI_ASSERT(gate->layout == DSI_LAYOUT_ROWS && up->layout == DSI_LAYOUT_ROWS);
  dsi_mat shape = gate_up_shape(gate);
  shape.scale = NULL;
  /* describe without scales, then fill data and per-panel scales by hand */
  dsi_mat tmp = shape;
  tmp.dtype = DSI_DTYPE_BF16; /* any non-FP8 type: describe only sets layout and kpad */
  dsi_pack_describe(&tmp, dst, mem);
  dst->dtype = gate->dtype;
  size_t es = dsi_dtype_size(gate->dtype);
  int panels = shape.rows / DSI_TILE_N, kp2 = dst->kpad / 2;
  size_t data_bytes = ((size_t)shape.rows * dst->kpad * es + 63) & ~(size_t)63;
  float *sc = gate->dtype == DSI_DTYPE_F8_E4M3 ? (float *)((uint8_t *)mem + data_bytes) : NULL;
  for (int p = 0; p < panels; p++) {
    const dsi_mat *src = (p & 1) ? up : gate;
    int r_src0 = (p / 2) * DSI_TILE_N;
    uint8_t *panel = (uint8_t *)mem + (size_t)p * kp2 * DSI_TILE_N * 2 * es;
    for (int j = 0; j < DSI_TILE_N; j++) {
      int r = r_src0 + j;
      const uint8_t *row = r < src->rows ? (const uint8_t *)src->data + (size_t)r * src->cols * es : NULL;
      dsi_pack_panel_row(row, src->cols, dst->kpad, es, panel, j);
    }
    if (sc)
      memcpy(sc + (size_t)p * src->scale_cols, src->scale + (size_t)(r_src0 / src->block) * src->scale_cols,
             src->scale_cols * sizeof(float));
  }
  dst->scale = sc;
}

/* ---- activations to bf16 ---- */
void dsi_rows_to_bf16_tiles(const dsi_vec_ops *v, const float *x, int ldx, const int32_t *rows, int n, int cols, int kpad, int row0,
                            int m_total, uint16_t *out) {
  const size_t steps = (size_t)kpad / DSI_TILE_K;
  for (int i = 0; i < n; i++) {
    const float *r = x + (size_t)(rows ? rows[i] : i) * ldx;
    size_t row = (size_t)row0 + i;
    v->to_bf16_tiles(r, cols, kpad, out + (row / 16) * steps * 512 + (row % 16) * DSI_TILE_K);
  }
  if (row0 + n == m_total) /* the last block's rows past m_total */
    for (size_t row = (size_t)m_total; row < DSI_XB_ROWS(m_total); row++)
      for (size_t s = 0; s < steps; s++)
        memset(out + ((row / 16) * steps + s) * 512 + (row % 16) * DSI_TILE_K, 0, DSI_TILE_K * sizeof(uint16_t));
}

void dsi_rows_to_i8(const dsi_vec_ops *v, const float *x, int ldx, const int32_t *rows, int m, int cols, int ld,
                    int8_t *out, float *scale, int32_t *sums) {
  DSI_ASSERT(!sums || ld % 32 == 0);
  for (int i = 0; i < m; i++) {
    int8_t *o = out + (size_t)i * ld;
    int32_t *si = sums ? sums + (size_t)i * (ld / 32) : NULL;
    scale[i] = v->to_i8(x + (size_t)(rows ? rows[i] : i) * ldx, o, cols, si);
    memset(o + cols, 0, (size_t)(ld - cols));
    for (int c = DSI_CEIL_DIV(cols, 32); si && c < ld / 32; c++) si[c] = 0; /* the padding's */
  }
}

void dsi_rows_to_i16(const dsi_vec_ops *v, const float *x, int ldx, const int32_t *rows, int m, int cols, int ld,
                     int16_t *out, float *scale) {
  for (int i = 0; i < m; i++) {
    int16_t *o = out + (size_t)i * ld;
    scale[i] = v->to_i16(x + (size_t)(rows ? rows[i] : i) * ldx, o, cols);
    memset(o + cols, 0, (size_t)(ld - cols) * sizeof *o);
  }
}

void dsi_rows_round_i8(const dsi_vec_ops *v, const float *x, int ldx, const int32_t *rows, int m, int cols, float *out) {
  for (int i = 0; i < m; i++) {
    float *o = out + (size_t)i * cols;
    /* quantize into the front of the output row (int8 takes a quarter of
     * its bytes, read ahead of every write), then widen back from the end */
    int8_t *q = (int8_t *)o;
    float s = v->to_i8(x + (size_t)(rows ? rows[i] : i) * ldx, q, cols, NULL);
    for (int c = cols - 1; c >= 0; c--) o[c] = (float)q[c] * s;
  }
}

void dsi_rows_round_bf16(const dsi_vec_ops *v, const float *x, int ldx, const int32_t *rows, int m, int cols, float *out) {
  for (int i = 0; i < m; i++) v->round_bf16(x + (size_t)(rows ? rows[i] : i) * ldx, out + (size_t)i * cols, cols);
}

/* ---- activations packed as a weight (attention's K and V) ---- */
/* source element (r, c): f32 rows, or bf16 pair rows (tensor/paged.h) */
static inline float src_at(const float *src, const uint16_t *pairs, int ld, int32_t r, int c) {
  return pairs ? dsi_bf16_to_f32(pairs[dsi_paged_pair_at(ld, r) + 2 * (size_t)c]) : src[(size_t)r * ld + c];
}

/* one 16-row panel, element by element */
static void pack_panel_any(dsi_dtype dt, const float *src, const uint16_t *pairs, int ld, const int32_t *idx,
                           const dsi_mat *shape, int transpose, size_t kp2, int kpad, int panel, void *mem) {
  for (int r = panel * DSI_TILE_N; r < (panel + 1) * DSI_TILE_N; r++)
    for (int c = 0; c < kpad; c++) {
      float v = 0;
      if (r < shape->rows && c < shape->cols) {
        int sr = transpose ? c : r, sc = transpose ? r : c;
        v = src_at(src, pairs, ld, idx ? idx[sr] : sr, sc);
      }
      size_t at = (((size_t)panel * kp2 + c / 2) * DSI_TILE_N + r % DSI_TILE_N) * 2 + (c & 1);
      if (dt == DSI_DTYPE_BF16) ((uint16_t *)mem)[at] = dsi_f32_to_bf16(v);
      else ((float *)mem)[at] = v;
    }
}

/* bf16 pair rows to BF16 TILES, values moved as they are. K (rows are
 * positions): a word is a position's two adjacent columns, every other
 * element of its pair row. V^T (rows are columns, columns positions): a
 * word is two consecutive positions' value of one column — one word of a
 * pair row — and a panel's 16 words for a position pair are 64
 * consecutive bytes. Zero past the source's rows and columns. */
static void pack_panel_pairs(const uint16_t *pairs, int ld, const int32_t *idx, const dsi_mat *shape, int transpose,
                             size_t kp2, int kpad, int panel, uint32_t *out) {
  const int r0 = panel * DSI_TILE_N;
  uint32_t *o = out + (size_t)panel * kp2 * DSI_TILE_N;
  if (!transpose) {
    for (int i = 0; i < DSI_TILE_N; i++) {
      int r = r0 + i;
      const uint16_t *pr = r < shape->rows ? pairs + dsi_paged_pair_at(ld, idx ? idx[r] : r) : NULL;
      for (int cp = 0; cp < kpad / 2; cp++) {
        uint32_t lo = 0, hi = 0;
        if (pr && 2 * cp < shape->cols) lo = pr[4 * (size_t)cp];
        if (pr && 2 * cp + 1 < shape->cols) hi = pr[4 * (size_t)cp + 2];
        o[(size_t)cp * DSI_TILE_N + i] = lo | hi << 16;
      }
    }
    return;
  }
  for (int cp = 0; cp < kpad / 2; cp++) { /* positions 2cp, 2cp + 1 */
    int u = 2 * cp;
    uint32_t *d = o + (size_t)cp * DSI_TILE_N;
    int32_t s0 = u < shape->cols ? (idx ? idx[u] : u) : -1;
    int both = u + 1 < shape->cols && !(s0 & 1) && (idx ? idx[u + 1] : u + 1) == s0 + 1;
    if (both && r0 + DSI_TILE_N <= shape->rows) {
      memcpy(d, pairs + dsi_paged_pair_at(ld, s0) + 2 * (size_t)r0, DSI_TILE_N * sizeof(uint32_t));
      continue;
    }
    for (int i = 0; i < DSI_TILE_N; i++) {
      int r = r0 + i;
      uint32_t lo = 0, hi = 0;
      if (r < shape->rows && u < shape->cols) lo = pairs[dsi_paged_pair_at(ld, s0) + 2 * (size_t)r];
      if (r < shape->rows && u + 1 < shape->cols)
        hi = pairs[dsi_paged_pair_at(ld, idx ? idx[u + 1] : u + 1) + 2 * (size_t)r];
      d[i] = lo | hi << 16;
    }
  }
}

void dsi_pack_latents(dsi_dtype dt, const float *src, const uint16_t *pairs, int ld, const int32_t *idx, int rows,
                      int cols, int transpose, dsi_mat *dst, void *mem, int ith, int nth) {
  dsi_mat shape = {.dtype = dt, .rows = transpose ? cols : rows, .cols = transpose ? rows : cols};
  dsi_pack_describe(&shape, dst, mem);
  long a, e;
  dsi_split(DSI_CEIL_DIV(shape.rows, DSI_TILE_N), ith, nth, &a, &e);
  size_t kp2 = dst->kpad / 2;
  for (long panel = a; panel < e; panel++) {
    if (pairs && dt == DSI_DTYPE_BF16)
      pack_panel_pairs(pairs, ld, idx, &shape, transpose, kp2, dst->kpad, (int)panel, mem);
    else
      pack_panel_any(dt, src, pairs, ld, idx, &shape, transpose, kp2, dst->kpad, (int)panel, mem);
  }
}
