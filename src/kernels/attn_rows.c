/* kernels: a token's absorbed attention in f32 over the latent cache (bf16
 * pair rows, read as they lie or widened block by block, or f32 rows), an
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
  float *s = ws, *m = s + (size_t)nh * B, *l = m + nh, *wide = l + nh; /* wide: [B][row] */
  const float **rows = (const float **)(wide + (size_t)B * a->row);
  /* the pair rows read as they are where the level can and one group of
   * heads reads them (each 8 columns a shift or a mask, 1.04-1.10x the
   * widened rows at 8 heads on a Zen 3); widened once into f32 rows for
   * more groups, each of which would repeat the shifts */
  const uint16_t **prow = (const uint16_t **)rows;
  const int direct = a->pairs && v->attn_qk_pairs && v->attn_pv_pairs && nh <= GROUP;
  for (int h = 0; h < nh; h++) {
    m[h] = -INFINITY;
    l[h] = 0;
    memset(o + (size_t)h * ldo, 0, (size_t)kvl * sizeof(float));
  }
  for (int u0 = 0; u0 < a->n; u0 += B) {
    int nu = DSI_MIN(B, a->n - u0);
    if (direct) { /* B and the block size even: position u0 + u is element u & 1 of its pair row */
      for (int u = 0; u < nu; u++)
        prow[u] = a->pairs + dsi_paged_pair_at(a->row, dsi_paged_slot(a->table, a->block_size, u0 + u)) - (u & 1);
    } else if (a->pairs) { /* the block's pairs are whole but maybe the last */
      for (int u = 0; u < nu; u += 2) {
        float *e = wide + (size_t)u * a->row;
        int32_t slot = dsi_paged_slot(a->table, a->block_size, u0 + u);
        v->pair_to_f32(a->pairs + dsi_paged_pair_at(a->row, slot), a->row, e, u + 1 < nu ? e + a->row : NULL);
        rows[u] = e;
        if (u + 1 < nu) rows[u + 1] = e + a->row;
      }
    } else {
      for (int u = 0; u < nu; u++) rows[u] = a->cache + (size_t)dsi_paged_slot(a->table, a->block_size, u0 + u) * a->row;
    }
    for (int h0 = 0; h0 < nh; h0 += GROUP)
      if (direct)
        v->attn_qk_pairs(s + (size_t)h0 * B, B, q + (size_t)h0 * ldq, ldq, DSI_MIN(GROUP, nh - h0), prow, nu, a->row,
                         scale);
      else
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
      if (direct)
        v->attn_pv_pairs(o + (size_t)h0 * ldo, ldo, s + (size_t)h0 * B, B, DSI_MIN(GROUP, nh - h0), prow, nu, kvl);
      else
        v->attn_pv(o + (size_t)h0 * ldo, ldo, s + (size_t)h0 * B, B, DSI_MIN(GROUP, nh - h0), rows, nu, kvl);
  }
  for (int h = 0; h < nh; h++) {
    float *oh = o + (size_t)h * ldo;
    for (int c = 0; c < kvl; c++) oh[c] /= l[h];
  }
}
