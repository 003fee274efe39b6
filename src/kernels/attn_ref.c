/* kernels: the scalar oracle of the pair-layout attention (attn.h), and
 * whether the AMX version runs here. Tile products read bf16 denormals as
 * zero and flush denormal results, so the oracle does too. */
#include "kernels/attn.h"
#include "kernels/cpu.h"
#include "tensor/dtype.h"

#include <float.h>
#include <math.h>

static float daz(uint16_t b) { return (b & 0x7f80) ? dsi_bf16_to_f32(b) : 0.0f; }
static float ftz(float x) { return fabsf(x) < FLT_MIN ? 0.0f : x; }

void dsi_attn_pairs_qk_ref(const dsi_attn_pairs *a, const float *q, int ldq, float scale, float *s, int lds,
                           void *ws) {
  (void)ws;
  int npad = (a->n + DSI_ATTN_PAIR_CHUNK - 1) / DSI_ATTN_PAIR_CHUNK * DSI_ATTN_PAIR_CHUNK;
  for (int u = 0; u < npad; u++) {
    int32_t slot = a->table[u / a->block_size] * a->block_size + u % a->block_size;
    const uint16_t *k = a->cache + dsi_kv_pair_at(a->row, slot);
    for (int h = 0; h < a->nh; h++) {
      float acc = 0;
      for (int j = 0; j < a->row; j++) acc = ftz(acc + daz(dsi_f32_to_bf16(q[(size_t)h * ldq + j])) * daz(k[2 * j]));
      s[(size_t)h * lds + u] = acc * scale;
    }
  }
}

void dsi_attn_pairs_pv_ref(const dsi_attn_pairs *a, const uint16_t *p, int ldp, float *o, int ldo) {
  int npad = (a->n + DSI_ATTN_PAIR_CHUNK - 1) / DSI_ATTN_PAIR_CHUNK * DSI_ATTN_PAIR_CHUNK;
  for (int h = 0; h < a->nh; h++)
    for (int c = 0; c < a->kvl; c++) {
      float acc = 0;
      for (int u = 0; u < npad; u++) {
        int32_t slot = a->table[u / a->block_size] * a->block_size + u % a->block_size;
        acc = ftz(acc + daz(p[(size_t)h * ldp + u]) * daz(a->cache[dsi_kv_pair_at(a->row, slot) + 2 * (size_t)c]));
      }
      o[(size_t)h * ldo + c] = acc;
    }
}

int dsi_attn_pairs_amx_ok(void) {
#if DSI_HAVE_AMX
  return dsi_cpu_get()->level >= DSI_ISA_AMX;
#else
  return 0;
#endif
}
