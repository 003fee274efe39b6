/* kernels: INT4 quantization at load (the format is tensor/mat.h's):
 * per row and group of columns, the 4-bit levels and f16 scale of least
 * squared error among a few candidate scales. The group's search here is
 * the reference (vec.h to_i4); the panels run the CPU's best level's,
 * which gives the same bits (x86/i4_group.h). */
#include "kernels/kernels.h"
#include "base/base.h"
#include "kernels/cpu.h"
#include "kernels/vec.h"

#include <math.h>
#include <string.h>

void dsi_pack_describe_i4(const dsi_mat *src, dsi_mat *dst, void *mem, int group) {
  dsi_mat shape = *src;
  shape.dtype = DSI_DTYPE_I4;
  shape.scale = NULL;
  shape.block = group;
  dsi_pack_describe(&shape, dst, mem);
}

/* v rounded half to even (adding and taking away 1.5 * 2^23) into [-8, 7] */
static inline float i4_level(float v) {
  v = (v + 12582912.0f) - 12582912.0f;
  v = v < 7.0f ? v : 7.0f;
  return v > -8.0f ? v : -8.0f;
}

/* One row's group w[0..n) (n a multiple of 8; zeros past the weights cost
 * nothing): levels l in [-8, 7] and the scale d (w ~ l d) of least squared
 * error among the roundings of w / d' for the candidate scales d' around
 * m / -8 (m the value of largest magnitude; llama.cpp's make_qx_quants
 * searches the same way); d is the least-squares scale of those levels,
 * and the error at it is sum w^2 - sumlx^2 / suml2. */
float dsi_i4_group_ref(const float *w, int n, int8_t *l) {
  float mx = 0;
  for (int c = 0; c < n; c++) mx = fabsf(w[c]) > fabsf(mx) ? w[c] : mx;
  if (!(mx != 0) || !isfinite(mx)) { /* zero; or not finite: NaN out, as from the scale */
    for (int c = 0; c < n; c++) l[c] = 0;
    return mx == 0 ? 0.0f : mx;
  }
  float best = -1, d = 0, binv = -8.0f / mx;
  for (int is = -DSI_I4_SEARCH; is <= DSI_I4_SEARCH; is++) {
    const float inv = -(8.0f + DSI_I4_STEP * (float)is) / mx;
    float s[8] = {0}, q[8] = {0}; /* eight partial sums, in a fixed order */
    for (int c0 = 0; c0 < n; c0 += 8)
      for (int c = 0; c < 8; c++) {
        const float v = i4_level(w[c0 + c] * inv);
        s[c] += w[c0 + c] * v;
        q[c] += v * v;
      }
    const float sumlx = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    const float suml2 = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      best = sumlx * sumlx / suml2;
      d = sumlx / suml2;
      binv = inv;
    }
  }
  for (int c = 0; c < n; c++) l[c] = (int8_t)i4_level(w[c] * binv);
  return d;
}

void dsi_quant_panel_i4(const dsi_mat *src, int r, const dsi_mat *dst, int p, float *work) {
  DSI_ASSERT(dst->dtype == DSI_DTYPE_I4 && dst->layout == DSI_LAYOUT_TILES && dst->block <= 256);
  DSI_ASSERT(src->cols == dst->cols && r % DSI_TILE_N == 0);
  const int K = src->cols, B = dst->block, n = DSI_MAX(0, DSI_MIN(DSI_TILE_N, src->rows - r));
  for (int j = 0; j < DSI_TILE_N; j++) {
    if (j < n) dsi_k_row_f32(src, r + j, 0, K, work + (size_t)j * K);
    else memset(work + (size_t)j * K, 0, (size_t)K * sizeof(float));
  }
  uint8_t *grp = (uint8_t *)dst->data + (size_t)p * dsi_i4_panel_bytes(dst);
  float (*group)(const float *, int, int8_t *) = dsi_kern_best()->vec->to_i4;
  for (int c0 = 0; c0 < dst->kpad; c0 += B, grp += dsi_i4_group_bytes(B)) {
    uint16_t *sc = (uint16_t *)(grp + (size_t)B * DSI_TILE_N / 2);
    const int nc = DSI_MAX(0, DSI_MIN(B, K - c0));
    for (int j = 0; j < DSI_TILE_N; j++) {
      float pad[256]; /* a last group, zero past the columns */
      int8_t l[256];
      const float *w = work + (size_t)j * K + c0;
      if (nc < B) {
        memcpy(pad, w, (size_t)nc * sizeof(float));
        memset(pad + nc, 0, (size_t)(B - nc) * sizeof(float));
        w = pad;
      }
      sc[j] = dsi_f32_to_f16(group(w, B, l));
      /* column c of a sub-block and column c + 16 share a byte (dsi_i4_byte):
       * a sub-block's 16 bytes of row j, 4 at a time, 64 bytes apart */
      for (int s = 0; s < B; s += 32) {
        uint8_t b[16];
        for (int c = 0; c < 16; c++) b[c] = (uint8_t)((l[s + c] + 8) | (l[s + 16 + c] + 8) << 4);
        for (int c = 0; c < 16; c += 4) memcpy(grp + (size_t)s * 8 + (size_t)c * 16 + 4 * j, b + c, 4);
      }
    }
  }
}
