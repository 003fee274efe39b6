/* kernels: the scalar oracle of the pair-layout attention (attn.h), and
 * whether the AMX version runs here. Tile products read bf16 denormals as
 * zero and flush denormal results, so the oracle does too. */
#include "kernels/attn.h"
#include "kernels/cpu.h"
#include "tensor/dtype.h"
#include "base/base.h"

#include <float.h>
#include <math.h>

static float daz(uint16_t b) { return (b & 0x7f80) ? dsi_bf16_to_f32(b) : 0.0f; }
static float ftz(float x) { return fabsf(x) < FLT_MIN ? 0.0f : x; }

static const uint16_t *slot_row(const dsi_attn_pairs *a, int u) {
  int32_t slot = dsi_paged_slot(a->table, a->block_size, u);
  return a->cache + dsi_paged_pair_at(a->row, slot);
}

void dsi_attn_pairs_ref(const dsi_attn_pairs *a, const float *q, int ldq, float scale, float *o, int ldo, void *ws) {
  (void)ws;
  float s[DSI_ATTN_PAIR_BLOCK];
  uint16_t p[DSI_ATTN_PAIR_BLOCK];
  for (int h = 0; h < a->nh; h++) {
    const float *qh = q + (size_t)h * ldq;
    float *oh = o + (size_t)h * ldo, m = -INFINITY, l = 0;
    for (int u0 = 0; u0 < a->n; u0 += DSI_ATTN_PAIR_BLOCK) {
      int nb = DSI_MIN(DSI_ATTN_PAIR_BLOCK, a->n - u0);
      float mx = -INFINITY;
      for (int i = 0; i < nb; i++) {
        const uint16_t *k = slot_row(a, u0 + i);
        float acc = 0;
        for (int j = 0; j < a->row; j++) acc = ftz(acc + daz(dsi_f32_to_bf16(qh[j])) * daz(k[2 * j]));
        s[i] = acc * scale;
        mx = fmaxf(mx, s[i]);
      }
      float m2 = fmaxf(m, mx), alpha = expf(m - m2), ps = 0;
      for (int i = 0; i < nb; i++) {
        float e = expf(s[i] - m2);
        p[i] = dsi_f32_to_bf16(e);
        ps += e;
      }
      l = l * alpha + ps;
      for (int c = 0; c < a->kvl; c++) {
        float acc = u0 == 0 ? 0 : oh[c] * alpha;
        for (int i = 0; i < nb; i++) acc = ftz(acc + daz(p[i]) * daz(slot_row(a, u0 + i)[2 * c]));
        oh[c] = acc;
      }
      m = m2;
    }
    for (int c = 0; c < a->kvl; c++) oh[c] /= l;
  }
}
