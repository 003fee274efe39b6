/* kernels: scalar reference implementations — simple loops, f32
 * accumulation, the oracle every optimized kernel is tested against. */
#include "kernels/kernels.h"
#include "base/base.h"
#include "base/pool.h"
#include "kernels/vec.h"

#define DSI_CEIL_DIV_SZ(a, b) (((size_t)(a) + (b) - 1) / (b))

#include <math.h>
#include <string.h>

/* ---- packing ---- */
static size_t pack_data_bytes(const dsi_mat *w) {
  if (w->dtype == DSI_DTYPE_I4) { /* its scales are in its panels */
    DSI_ASSERT(w->block > 0 && w->block % DSI_TILE_K == 0);
    size_t kpad = DSI_CEIL_DIV_SZ(w->cols, w->block) * w->block;
    return DSI_CEIL_DIV_SZ(w->rows, DSI_TILE_N) * (kpad / w->block) * dsi_i4_group_bytes(w->block);
  }
  size_t rows = DSI_CEIL_DIV_SZ(w->rows, DSI_TILE_N) * DSI_TILE_N;
  size_t kpad = DSI_CEIL_DIV_SZ(w->cols, DSI_TILE_K) * DSI_TILE_K;
  return (rows * kpad * dsi_dtype_size(w->dtype) + 63) & ~(size_t)63;
}

/* scales per panel: FP8 as the source has them; INT8 one per 128 columns
 * unless copied from a row-major INT8 source */
static int panel_scale_cols(const dsi_mat *w) {
  if (w->dtype == DSI_DTYPE_I8 && !w->scale) return (int)DSI_CEIL_DIV_SZ(w->cols, DSI_I8_BLOCK);
  return w->dtype == DSI_DTYPE_F8_E4M3 || w->dtype == DSI_DTYPE_I8 ? w->scale_cols : 0;
}

size_t dsi_pack_bytes(const dsi_mat *w) {
  size_t panels = DSI_CEIL_DIV_SZ(w->rows, DSI_TILE_N);
  return pack_data_bytes(w) + panels * panel_scale_cols(w) * sizeof(float);
}

void dsi_pack_describe(const dsi_mat *src, dsi_mat *dst, void *mem) {
  *dst = *src;
  dst->layout = DSI_LAYOUT_TILES;
  dst->kpad = (int)DSI_CEIL_DIV_SZ(src->cols, DSI_TILE_K) * DSI_TILE_K;
  dst->data = mem;
  if (src->dtype == DSI_DTYPE_I4) {
    dst->kpad = (int)DSI_CEIL_DIV_SZ(src->cols, src->block) * src->block;
    dst->scale = NULL;
    dst->scale_cols = dst->kpad / src->block;
    return;
  }
  if (src->dtype != DSI_DTYPE_F8_E4M3 && src->dtype != DSI_DTYPE_I8) return;
  float *sc = (float *)((uint8_t *)mem + pack_data_bytes(src));
  dst->scale = sc;
  if (!src->scale) { /* INT8 to be quantized: dsi_quant_panel_i8 fills the scales */
    dst->block = DSI_I8_BLOCK;
    dst->scale_cols = panel_scale_cols(src);
    return;
  }
  int panels = (int)DSI_CEIL_DIV_SZ(src->rows, DSI_TILE_N);
  for (int p = 0; p < panels; p++)
    memcpy(sc + (size_t)p * src->scale_cols, src->scale + (size_t)(p * DSI_TILE_N / src->block) * src->scale_cols,
           src->scale_cols * sizeof(float));
}

void dsi_pack_describe_i8(const dsi_mat *src, dsi_mat *dst, void *mem) {
  dsi_mat shape = *src;
  shape.dtype = DSI_DTYPE_I8;
  shape.scale = NULL;
  dsi_pack_describe(&shape, dst, mem);
}


/* ---- INT8 quantization ---- */
void dsi_quant_panel_i8(const dsi_mat *src, int r, const dsi_mat *dst, int p, float *work) {
  DSI_ASSERT(dst->dtype == DSI_DTYPE_I8 && dst->layout == DSI_LAYOUT_TILES && dst->block == DSI_I8_BLOCK);
  DSI_ASSERT(src->cols == dst->cols && r % DSI_TILE_N == 0);
  const int K = src->cols, n = DSI_MAX(0, DSI_MIN(DSI_TILE_N, src->rows - r));
  for (int j = 0; j < DSI_TILE_N; j++) {
    if (j < n) dsi_k_row_f32(src, r + j, 0, K, work + (size_t)j * K);
    else memset(work + (size_t)j * K, 0, (size_t)K * sizeof(float));
  }
  int8_t *panel = (int8_t *)dst->data + (size_t)p * DSI_TILE_N * dst->kpad;
  float *sc = (float *)dst->scale + (size_t)p * dst->scale_cols;
  /* written so the compiler vectorizes it: |w| compared as integers (the
   * order of non-negative floats), round half to even by adding and
   * taking away 1.5 * 2^23 (exact for |v| <= 127, default rounding mode) */
  const uint32_t *bits = (const uint32_t *)work;
  for (int b = 0; b < dst->scale_cols; b++) {
    int c0 = b * DSI_I8_BLOCK, c1 = DSI_MIN(c0 + DSI_I8_BLOCK, K);
    uint32_t mx = 0;
    for (int j = 0; j < DSI_TILE_N; j++)
      for (int c = c0; c < c1; c++) {
        uint32_t a = bits[(size_t)j * K + c] & 0x7fffffffu;
        mx = a > mx ? a : mx;
      }
    float amax;
    memcpy(&amax, &mx, sizeof amax);
    float scale = amax / 127.0f;
    sc[b] = scale;
    for (int j = 0; j < DSI_TILE_N; j++) {
      /* a row's block along its columns (the loop that vectorizes), then
       * its column pairs into the panel, 32 bytes apart */
      int8_t q[DSI_I8_BLOCK];
      const float *x = work + (size_t)j * K;
      for (int c = c0; c < c1; c++) {
        float v = scale > 0 ? x[c] / scale : 0.0f;
        v = (v + 12582912.0f) - 12582912.0f;
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
        q[c - c0] = (int8_t)(int)v;
      }
      int c = c0;
      for (; c + 1 < c1; c += 2) memcpy(panel + ((size_t)(c / 2) * DSI_TILE_N + j) * 2, q + (c - c0), 2);
      if (c < c1) panel[((size_t)(c / 2) * DSI_TILE_N + j) * 2] = q[c - c0]; /* an odd last column */
    }
  }
  for (int c = K; c < dst->kpad; c++) /* padding columns */
    for (int j = 0; j < DSI_TILE_N; j++) panel[((size_t)(c / 2) * DSI_TILE_N + j) * 2 + (c & 1)] = 0;
}

/* a column pair of es-byte elements: one fixed-size copy (es a constant
 * in each case, so it is a load and a store) */
#define PACK_PAIRS(ES)                                                                         \
  for (; t < pairs; t++) memcpy(o + (size_t)t * stride, s + (size_t)t * 2 * (ES), 2 * (ES))

void dsi_pack_panel_row(const void *row, int cols, int kpad, size_t es, void *panel, int j) {
  const uint8_t *s = row;
  uint8_t *o = (uint8_t *)panel + (size_t)j * 2 * es;
  const size_t stride = (size_t)DSI_TILE_N * 2 * es; /* one column pair to the next */
  int t = 0, pairs = s ? cols / 2 : 0;
  switch (es) {
  case 1: PACK_PAIRS(1); break;
  case 2: PACK_PAIRS(2); break;
  case 4: PACK_PAIRS(4); break;
  default: DSI_ASSERT(0);
  }
  static const uint8_t zero[4];
  for (int c = 2 * t; c < kpad; c++) /* an odd last column, then the zeros */
    memcpy(o + (size_t)(c / 2) * stride + (size_t)(c & 1) * es, s && c < cols ? s + (size_t)c * es : zero, es);
}

void dsi_pack_rows(const dsi_mat *src, const dsi_mat *dst, int r0, int r1) {
  DSI_ASSERT(src->layout == DSI_LAYOUT_ROWS && r0 % DSI_TILE_N == 0);
  const size_t es = dsi_dtype_size(src->dtype);
  const int pend = (int)DSI_CEIL_DIV_SZ(r1, DSI_TILE_N);
  for (int p = r0 / DSI_TILE_N; p < pend; p++) {
    uint8_t *panel = (uint8_t *)dst->data + (size_t)p * DSI_TILE_N * dst->kpad * es;
    for (int j = 0; j < DSI_TILE_N; j++) {
      int r = p * DSI_TILE_N + j;
      const uint8_t *row = r < src->rows ? (const uint8_t *)src->data + (size_t)r * src->cols * es : NULL;
      dsi_pack_panel_row(row, src->cols, dst->kpad, es, panel, j);
    }
  }
}

/* ---- widening ---- */
/* INT4: (q - 8) * scale */
static float i4_at(const dsi_mat *w, int r, int c) {
  const uint8_t *grp = (const uint8_t *)w->data + (size_t)(r / DSI_TILE_N) * dsi_i4_panel_bytes(w) +
                       (size_t)(c / w->block) * dsi_i4_group_bytes(w->block);
  int hi, j = r % DSI_TILE_N;
  uint8_t b = grp[dsi_i4_byte(j, c % w->block, &hi)];
  uint16_t sc;
  memcpy(&sc, grp + (size_t)w->block * DSI_TILE_N / 2 + 2 * j, 2);
  return (float)((hi ? b >> 4 : b & 15) - 8) * dsi_f16_to_f32(sc);
}

static void row_f32_tiles(const dsi_mat *w, int r, int c0, int c1, float *out) {
  if (w->dtype == DSI_DTYPE_I4) {
    for (int c = c0; c < c1; c++) out[c - c0] = i4_at(w, r, c);
    return;
  }
  for (int c = c0; c < c1; c++) {
    size_t i = dsi_tiles_index(w, r, c);
    float v;
    switch (w->dtype) {
    case DSI_DTYPE_F32: v = ((const float *)w->data)[i]; break;
    case DSI_DTYPE_BF16: v = dsi_bf16_to_f32(((const uint16_t *)w->data)[i]); break;
    case DSI_DTYPE_F16: v = dsi_f16_to_f32(((const uint16_t *)w->data)[i]); break;
    case DSI_DTYPE_F8_E4M3:
      v = dsi_fp8_table[((const uint8_t *)w->data)[i]] *
          w->scale[(size_t)(r / DSI_TILE_N) * w->scale_cols + c / w->block];
      break;
    case DSI_DTYPE_I8:
      v = (float)((const int8_t *)w->data)[i] * w->scale[(size_t)(r / DSI_TILE_N) * w->scale_cols + c / w->block];
      break;
    default: v = 0;
    }
    out[c - c0] = v;
  }
}

void dsi_k_row_f32(const dsi_mat *w, int r, int c0, int c1, float *out) {
  if (w->layout == DSI_LAYOUT_TILES) {
    row_f32_tiles(w, r, c0, c1, out);
    return;
  }
  size_t base = (size_t)r * w->cols;
  int n = c1 - c0;
  switch (w->dtype) {
  case DSI_DTYPE_F32:
    memcpy(out, (const float *)w->data + base + c0, n * sizeof(float));
    break;
  case DSI_DTYPE_BF16: {
    const uint16_t *s = (const uint16_t *)w->data + base + c0;
    for (int i = 0; i < n; i++) out[i] = dsi_bf16_to_f32(s[i]);
  } break;
  case DSI_DTYPE_F16: {
    const uint16_t *s = (const uint16_t *)w->data + base + c0;
    for (int i = 0; i < n; i++) out[i] = dsi_f16_to_f32(s[i]);
  } break;
  case DSI_DTYPE_F8_E4M3:
  case DSI_DTYPE_I8: {
    const uint8_t *s = (const uint8_t *)w->data + base + c0;
    const float *sc = w->scale + (size_t)(r / w->block) * w->scale_cols;
    int i8 = w->dtype == DSI_DTYPE_I8;
    for (int c = c0; c < c1;) {
      int bc = c / w->block, end = (bc + 1) * w->block;
      if (end > c1) end = c1;
      float f = sc[bc];
      for (; c < end; c++) out[c - c0] = (i8 ? (float)(int8_t)s[c - c0] : dsi_fp8_table[s[c - c0]]) * f;
    }
  } break;
  default:
    for (int i = 0; i < n; i++) out[i] = 0;
  }
}

/* ---- matmul ---- */
/* the baseline build of the vector primitives (vec_impl.h): 16 independent
 * partial sums in a fixed order, so results do not depend on the caller */
float dsi_k_dot(const float *a, const float *b, int n) { return dsi_vec_ops_generic.dot(a, b, n); }

void dsi_k_matmul_rows(const dsi_mat *w, int r0, int r1, const float *x, int ldx, float *y,
                       int ldy, int m, float *scratch) {
  for (int r = r0; r < r1; r++) {
    dsi_k_row_f32(w, r, 0, w->cols, scratch);
    for (int i = 0; i < m; i++)
      y[(size_t)i * ldy + (r - r0)] = dsi_k_dot(scratch, x + (size_t)i * ldx, w->cols);
  }
}

void dsi_k_matmul(const dsi_mat *w, const float *x, int ldx, float *y, int ldy, int m,
                  float *scratch, int ith, int nth) {
  long r0, r1;
  dsi_split(w->rows, ith, nth, &r0, &r1);
  dsi_k_matmul_rows(w, (int)r0, (int)r1, x, ldx, y + r0, ldy, m, scratch);
}

void dsi_k_matvec_t(const dsi_mat *w, int r0, int r1, const float *x, float *y, float *scratch) {
  memset(y, 0, w->cols * sizeof(float));
  for (int r = r0; r < r1; r++) {
    dsi_k_row_f32(w, r, 0, w->cols, scratch);
    dsi_k_axpy(y, scratch, x[r - r0], w->cols);
  }
}

/* ---- elementwise ---- */
void dsi_k_rmsnorm(const float *x, const float *weight, int n, float eps, float *out) {
  float ss = 0;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  float inv = 1.0f / sqrtf(ss / n + eps);
  for (int i = 0; i < n; i++) out[i] = x[i] * inv * weight[i];
}

void dsi_k_rope(float *x, int dim, const float *cos_t, const float *sin_t) {
  for (int i = 0; i < dim / 2; i++) {
    float a = x[2 * i], b = x[2 * i + 1], c = cos_t[i], s = sin_t[i];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
  }
}

void dsi_k_silu_mul(const float *g, const float *u, float *out, int n) {
  for (int i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void dsi_k_axpy(float *y, const float *x, float a, int n) {
  for (int i = 0; i < n; i++) y[i] += a * x[i];
}

void dsi_k_softmax(float *x, int n) {
  float mx = -INFINITY, s = 0;
  for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  for (int i = 0; i < n; i++) s += (x[i] = expf(x[i] - mx));
  float inv = 1.0f / s;
  for (int i = 0; i < n; i++) x[i] *= inv;
}

/* ---- router ---- */
/* index of the largest of x[0..n) not yet taken; ties go to the lower index
 * (torch.topk's order on CPU for distinct values; ties are measure-zero) */
static int argmax_free(const float *x, const uint8_t *taken, int n) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (!taken[i] && (best < 0 || x[i] > x[best])) best = i;
  return best;
}

void dsi_k_router(const dsi_router_params *p, const float *logits, const float *bias,
                  float *work, int32_t *experts, float *weights) {
  int E = p->n_experts;
  float *orig = work, *sel = work + E;
  if (p->sigmoid) {
    for (int e = 0; e < E; e++) orig[e] = 1.0f / (1.0f + expf(-logits[e]));
  } else {
    memcpy(orig, logits, E * sizeof(float));
    dsi_k_softmax(orig, E);
  }
  for (int e = 0; e < E; e++) sel[e] = orig[e] + (bias ? bias[e] : 0.0f);

  uint8_t taken[1024];
  if (p->group_limited && p->n_group > 1) {
    int G = p->n_group, per = E / G;
    float gscore[256];
    for (int g = 0; g < G; g++) {
      const float *s = sel + g * per;
      if (p->group_by_top2) {
        float a = -INFINITY, b = -INFINITY;
        for (int i = 0; i < per; i++) {
          if (s[i] > a) { b = a; a = s[i]; } else if (s[i] > b) b = s[i];
        }
        gscore[g] = per >= 2 ? a + b : a;
      } else {
        float a = -INFINITY;
        for (int i = 0; i < per; i++) a = s[i] > a ? s[i] : a;
        gscore[g] = a;
      }
    }
    uint8_t keep[256] = {0}, gt[256] = {0};
    for (int k = 0; k < p->topk_group; k++) {
      int g = argmax_free(gscore, gt, G);
      gt[g] = 1;
      keep[g] = 1;
    }
    for (int g = 0; g < G; g++)
      if (!keep[g])
        for (int i = 0; i < per; i++) sel[g * per + i] = -INFINITY;
  }
  memset(taken, 0, E);
  float sum = 0;
  for (int k = 0; k < p->top_k; k++) {
    int e = argmax_free(sel, taken, E);
    taken[e] = 1;
    experts[k] = e;
    weights[k] = orig[e];
    sum += orig[e];
  }
  if (p->normalize)
    for (int k = 0; k < p->top_k; k++) weights[k] /= sum;
  for (int k = 0; k < p->top_k; k++) weights[k] *= p->scale;
}
