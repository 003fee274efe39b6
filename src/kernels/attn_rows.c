/* kernels: a token's absorbed attention over the f32 latent rows, an
 * online softmax in blocks of positions on a level's vector primitives
 * (see attn.h). */
#include "kernels/attn.h"
#include "base/base.h"
#include "kernels/vec.h"

#include <math.h>
#include <string.h>

enum { GROUP = 8 }; /* heads a primitive call takes: their widest case */

void dsi_attn_rows_run(const dsi_vec_ops *v, const dsi_attn_rows *a, const float *q, int ldq, float scale, float *o,
                       int ldo, void *ws) {
  const int B = DSI_ATTN_ROW_BLOCK, nh = a->nh, kvl = a->kvl;
  float *s = ws, *m = s + (size_t)nh * B, *l = m + nh;
  const float **rows = (const float **)(l + nh);
  for (int h = 0; h < nh; h++) {
    m[h] = -INFINITY;
    l[h] = 0;
    memset(o + (size_t)h * ldo, 0, (size_t)kvl * sizeof(float));
  }
  for (int u0 = 0; u0 < a->n; u0 += B) {
    int nu = DSI_MIN(B, a->n - u0);
    for (int u = 0; u < nu; u++) rows[u] = a->cache + (size_t)dsi_paged_slot(a->table, a->block_size, u0 + u) * a->row;
    for (int h0 = 0; h0 < nh; h0 += GROUP)
      v->attn_qk(s + (size_t)h0 * B, B, q + (size_t)h0 * ldq, ldq, DSI_MIN(GROUP, nh - h0), rows, nu, a->row, scale);
    for (int h = 0; h < nh; h++) {
      float was = m[h], sum = v->softmax_step(s + (size_t)h * B, nu, 1.0f, &m[h]);
      if (was != m[h] && u0) { /* the block raised the max: what came before shrinks by e^(was - m) */
        float r = expf(was - m[h]), *oh = o + (size_t)h * ldo;
        l[h] *= r;
        for (int c = 0; c < kvl; c++) oh[c] *= r;
      }
      l[h] += sum;
    }
    for (int h0 = 0; h0 < nh; h0 += GROUP)
      v->attn_pv(o + (size_t)h0 * ldo, ldo, s + (size_t)h0 * B, B, DSI_MIN(GROUP, nh - h0), rows, nu, kvl);
  }
  for (int h = 0; h < nh; h++) {
    float *oh = o + (size_t)h * ldo;
    for (int c = 0; c < kvl; c++) oh[c] /= l[h];
  }
}
