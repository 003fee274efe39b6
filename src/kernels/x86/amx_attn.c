/* kernels: the pair-layout attention (attn.h) on AMX BF16 tiles, one pass
 * over the cache in blocks of positions. Each block stays in L2 while every
 * group of up to 16 heads takes it: q K^T multiplies, per K step, two
 * 32-position chunks against the two q tiles of the group (or four chunks
 * against one, for up to 8 heads); the online softmax updates each head's
 * max, sum and output; P V holds four 16-column accumulators, loaded from
 * the output and stored back. Each call configures the tiles and releases
 * them. */
#ifdef DSI_AMX_EMU /* the tests' build with emulated tiles (amx_tiles.h): its own names */
#define dsi_attn_pairs_amx dsi_attn_pairs_amx_emu
#define dsi_attn_qk_tiles dsi_attn_qk_tiles_emu
#define dsi_attn_pv_tiles dsi_attn_pv_tiles_emu
#endif
#include "kernels/attn.h"
#include "kernels/vec.h"
#include "kernels/x86/amx_util.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define CHUNK DSI_ATTN_PAIR_CHUNK
#define BLOCK DSI_ATTN_PAIR_BLOCK

/* bytes of the pair row holding position u of the sequence (u even) */
static inline const uint8_t *pair_row(const dsi_attn_pairs *a, int u) {
  int32_t slot = dsi_paged_slot(a->table, a->block_size, u);
  return (const uint8_t *)(a->cache + dsi_paged_pair_at(a->row, slot));
}

/* q as B tiles, one per 16 latent columns: row k (column 16 ks + k) holds,
 * for head h < 8, bf16(q[h]) at word 4h (against the even position of a
 * pair) and at word 4h + 3 (the odd one), zeros elsewhere and for absent
 * heads */
static void pack_q(const float *q, int ldq, int nh, int row, uint16_t *qb) {
  __m512i z[4];
  const __m512i base = _mm512_set_epi16(48, 0, 0, 48, 32, 0, 0, 32, 16, 0, 0, 16, 0, 0, 0, 0, /* words 16..31 */
                                        48, 0, 0, 48, 32, 0, 0, 32, 16, 0, 0, 16, 0, 0, 0, 0);
  const __mmask32 lo = 0x00009999u, hi = 0x99990000u; /* words 4h and 4h + 3 */
  for (int ks = 0; ks < row / 16; ks++) {
    for (int i = 0; i < 4; i++) { /* heads 2i, 2i+1: 16 columns each */
      __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
      if (2 * i < nh) a = _mm512_loadu_ps(q + (size_t)(2 * i) * ldq + 16 * ks);
      if (2 * i + 1 < nh) b = _mm512_loadu_ps(q + (size_t)(2 * i + 1) * ldq + 16 * ks);
      z[i] = (__m512i)_mm512_cvtne2ps_pbh(b, a);
    }
    __m512i idx = base;
    for (int k = 0; k < 16; k++) {
      __m512i r = _mm512_or_si512(_mm512_maskz_permutex2var_epi16(lo, z[0], idx, z[1]),
                                  _mm512_maskz_permutex2var_epi16(hi, z[2], idx, z[3]));
      _mm512_store_si512(qb + (size_t)ks * 512 + k * 32, r);
      idx = _mm512_add_epi16(idx, _mm512_set1_epi16(1));
    }
  }
}

/* s[h][2p + par] = c[p][2h + par] for h < nh: the 64-bit column h of a
 * 16x16 f32 tile, 32 positions */
static void scatter_scores(const float *c, int nh, float *s) {
  const __m512i i0 = _mm512_set_epi64(56, 48, 40, 32, 24, 16, 8, 0), i1 = _mm512_add_epi64(i0, _mm512_set1_epi64(64));
  for (int h = 0; h < nh; h++) {
    const double *ch = (const double *)c + h;
    _mm512_storeu_pd((double *)(s + (size_t)h * BLOCK), _mm512_i64gather_pd(i0, ch, 8));
    _mm512_storeu_pd((double *)(s + (size_t)h * BLOCK + 16), _mm512_i64gather_pd(i1, ch, 8));
  }
}

/* the accumulators, tiles 0-3 */
static inline void zero_c(void) {
  tile_zero(0);
  tile_zero(1);
  tile_zero(2);
  tile_zero(3);
}

/* unscaled scores of chunks [ch0, ch1) for nh <= 16 heads (q tiles qb0,
 * qb1) into s[h][(ch - ch0) * 32 + i], row stride BLOCK; c: a 1 KiB
 * staging tile. Tiles: all 16 rows. */
static void qk_block(const dsi_attn_pairs *a, const uint16_t *qb0, const uint16_t *qb1, int nh, int ch0, int ch1,
                     float *s, float *c) {
  const int nk = a->row / 16;
  const size_t stride = (size_t)a->row * 4; /* one pair row */
  if (nh <= 8) { /* C 0-3 one per chunk, A 4, 5, 7, q 6 */
    for (int c0 = ch0; c0 < ch1; c0 += 4) {
      const int g = DSI_MIN(4, ch1 - c0);
      const uint8_t *b0 = pair_row(a, c0 * CHUNK), *b1 = b0, *b2 = b0, *b3 = b0;
      if (g > 1) b1 = pair_row(a, (c0 + 1) * CHUNK);
      if (g > 2) b2 = pair_row(a, (c0 + 2) * CHUNK);
      if (g > 3) b3 = pair_row(a, (c0 + 3) * CHUNK);
      zero_c();
      for (int ks = 0; ks < nk; ks++) {
        tile_load(6, qb0 + (size_t)ks * 512, 64);
        tile_load(4, b0 + (size_t)ks * 64, stride);
        tile_dpbf16ps(0, 4, 6);
        if (g > 1) {
          tile_load(5, b1 + (size_t)ks * 64, stride);
          tile_dpbf16ps(1, 5, 6);
        }
        if (g > 2) {
          tile_load(7, b2 + (size_t)ks * 64, stride);
          tile_dpbf16ps(2, 7, 6);
        }
        if (g > 3) {
          tile_load(4, b3 + (size_t)ks * 64, stride);
          tile_dpbf16ps(3, 4, 6);
        }
      }
      float *sc = s + (size_t)(c0 - ch0) * CHUNK;
      tile_store(0, c, 64);
      scatter_scores(c, nh, sc);
      if (g > 1) {
        tile_store(1, c, 64);
        scatter_scores(c, nh, sc + CHUNK);
      }
      if (g > 2) {
        tile_store(2, c, 64);
        scatter_scores(c, nh, sc + 2 * CHUNK);
      }
      if (g > 3) {
        tile_store(3, c, 64);
        scatter_scores(c, nh, sc + 3 * CHUNK);
      }
    }
    return;
  }
  /* C 2i + j for chunk i and heads 8j..; A 4, 5 per chunk; q 6, 7 per head set */
  for (int c0 = ch0; c0 < ch1; c0 += 2) {
    const int g = DSI_MIN(2, ch1 - c0);
    const uint8_t *b0 = pair_row(a, c0 * CHUNK), *b1 = g > 1 ? pair_row(a, (c0 + 1) * CHUNK) : b0;
    zero_c();
    for (int ks = 0; ks < nk; ks++) {
      tile_load(6, qb0 + (size_t)ks * 512, 64);
      tile_load(7, qb1 + (size_t)ks * 512, 64);
      tile_load(4, b0 + (size_t)ks * 64, stride);
      tile_dpbf16ps(0, 4, 6);
      tile_dpbf16ps(1, 4, 7);
      if (g > 1) {
        tile_load(5, b1 + (size_t)ks * 64, stride);
        tile_dpbf16ps(2, 5, 6);
        tile_dpbf16ps(3, 5, 7);
      }
    }
    float *sc = s + (size_t)(c0 - ch0) * CHUNK, *sc8 = sc + (size_t)8 * BLOCK;
    tile_store(0, c, 64);
    scatter_scores(c, 8, sc);
    tile_store(1, c, 64);
    scatter_scores(c, nh - 8, sc8);
    if (g > 1) {
      tile_store(2, c, 64);
      scatter_scores(c, 8, sc + CHUNK);
      tile_store(3, c, 64);
      scatter_scores(c, nh - 8, sc8 + CHUNK);
    }
  }
}

/* The online softmax step of head rows s[h] (nb valid of npad), on the
 * vector primitives: e = e^(scale s - m') and l = a l + sum e (softmax_step),
 * p = bf16(e) (zero past nb), o = a o when earlier blocks wrote it. */
static void softmax_block(float *s, uint16_t *p, int nh, int nb, int npad, float scale, float *m, float *l,
                          float *o, int ldo, int kvl, int first) {
  const dsi_vec_ops *v = &dsi_vec_ops_avx512; /* AMX implies AVX-512 */
  for (int h = 0; h < nh; h++) {
    float *sh = s + (size_t)h * BLOCK, m_old = m[h];
    float sum = v->softmax_step(sh, nb, scale, &m[h]), alpha = expf(m_old - m[h]);
    uint16_t *ph = p + (size_t)h * BLOCK;
    v->to_bf16(sh, ph, nb);
    memset(ph + nb, 0, (size_t)(npad - nb) * sizeof(uint16_t));
    l[h] = l[h] * alpha + sum;
    if (!first && alpha != 1.0f) {
      float *oh = o + (size_t)h * ldo;
      __m512 va = _mm512_set1_ps(alpha);
      for (int c = 0; c < kvl; c += 16) _mm512_storeu_ps(oh + c, _mm512_mul_ps(_mm512_loadu_ps(oh + c), va));
    }
  }
}

/* o[h][c] (+)= sum over chunks [ch0, ch1) of p[h][(ch - ch0) * 32 + i] V;
 * first: o starts at zero, else from what it holds. Tiles: C and P nh
 * rows. */
static void pv_block(const dsi_attn_pairs *a, const uint16_t *p, int ch0, int ch1, float *o, int ldo, int first) {
  const int nt = a->kvl / 16;
  const size_t stride = (size_t)a->row * 4, ldob = (size_t)ldo * 4;
  /* tiles: C 0-3 (16 columns each), P 4, V 5-7 */
  for (int t0 = 0; t0 < nt; t0 += 4) {
    const int g = DSI_MIN(4, nt - t0);
    float *ot = o + (size_t)t0 * 16;
    if (first) {
      zero_c();
    } else {
      tile_load(0, ot, ldob);
      if (g > 1) tile_load(1, ot + 16, ldob);
      if (g > 2) tile_load(2, ot + 32, ldob);
      if (g > 3) tile_load(3, ot + 48, ldob);
    }
    for (int ch = ch0; ch < ch1; ch++) {
      const uint8_t *v = pair_row(a, ch * CHUNK) + (size_t)t0 * 64;
      tile_load(4, p + (size_t)(ch - ch0) * CHUNK, BLOCK * 2);
      tile_load(5, v, stride);
      tile_dpbf16ps(0, 4, 5);
      if (g > 1) {
        tile_load(6, v + 64, stride);
        tile_dpbf16ps(1, 4, 6);
      }
      if (g > 2) {
        tile_load(7, v + 128, stride);
        tile_dpbf16ps(2, 4, 7);
      }
      if (g > 3) {
        tile_load(5, v + 192, stride);
        tile_dpbf16ps(3, 4, 5);
      }
    }
    tile_store(0, ot, ldob);
    if (g > 1) tile_store(1, ot + 16, ldob);
    if (g > 2) tile_store(2, ot + 32, ldob);
    if (g > 3) tile_store(3, ot + 48, ldob);
  }
}

void dsi_attn_pairs_amx(const dsi_attn_pairs *a, const float *q, int ldq, float scale, float *o, int ldo, void *ws) {
  const int nh = a->nh, ng = (nh + DSI_ATTN_PAIR_GROUP - 1) / DSI_ATTN_PAIR_GROUP;
  const size_t qset = (size_t)a->row / 16 * 1024;
  uint8_t *w = ws;
  uint16_t *qt = (uint16_t *)w; /* [group][2 sets] q tiles */
  float *s = (float *)(w + ng * 2 * qset);
  uint16_t *p = (uint16_t *)(s + DSI_ATTN_PAIR_GROUP * BLOCK);
  float *m = (float *)(p + DSI_ATTN_PAIR_GROUP * BLOCK), *l = m + nh;
  float *c = (float *)((uint8_t *)m + ((size_t)nh * 8 + 63) / 64 * 64);
  for (int g = 0; g < ng; g++) {
    const int gh = DSI_MIN(DSI_ATTN_PAIR_GROUP, nh - g * DSI_ATTN_PAIR_GROUP);
    uint16_t *qb = qt + (size_t)g * qset; /* two sets: qset bytes = qset / 2 words each */
    pack_q(q + (size_t)g * DSI_ATTN_PAIR_GROUP * ldq, ldq, DSI_MIN(gh, 8), a->row, qb);
    if (gh > 8) pack_q(q + ((size_t)g * DSI_ATTN_PAIR_GROUP + 8) * ldq, ldq, gh - 8, a->row, qb + qset / 2);
  }
  for (int h = 0; h < nh; h++) m[h] = -INFINITY, l[h] = 0;
  for (int u0 = 0; u0 < a->n; u0 += BLOCK) {
    const int nb = DSI_MIN(BLOCK, a->n - u0), ch0 = u0 / CHUNK, ch1 = (u0 + nb + CHUNK - 1) / CHUNK;
    for (int g = 0; g < ng; g++) {
      const int h0 = g * DSI_ATTN_PAIR_GROUP, gh = DSI_MIN(DSI_ATTN_PAIR_GROUP, nh - h0);
      const uint16_t *qb = qt + (size_t)g * qset;
      float *og = o + (size_t)h0 * ldo;
      tiles_configure();
      qk_block(a, qb, qb + qset / 2, gh, ch0, ch1, s, c);
      softmax_block(s, p, gh, nb, (ch1 - ch0) * CHUNK, scale, m + h0, l + h0, og, ldo, a->kvl, u0 == 0);
      const uint8_t r = (uint8_t)gh, rows[8] = {r, r, r, r, r, 16, 16, 16};
      tiles_configure_rows(rows);
      pv_block(a, p, ch0, ch1, og, ldo, u0 == 0);
    }
  }
  tile_release();
  for (int h = 0; h < nh; h++) {
    float *oh = o + (size_t)h * ldo;
    __m512 vl = _mm512_set1_ps(l[h]);
    for (int cc = 0; cc < a->kvl; cc += 16) _mm512_storeu_ps(oh + cc, _mm512_div_ps(_mm512_loadu_ps(oh + cc), vl));
  }
}

/* ---- the non-absorbed prefill's core (attn.h: dsi_attn_qk_tiles, dsi_attn_pv_tiles) ---- */

/* Both run the matmul's tile loop (amx_util.h block_mac: step by step, so
 * each C element sums its products as dsi_gemm_amx does), with nothing to
 * prefetch and C from zero. */
void dsi_attn_qk_tiles(const dsi_mat *K, const float *q, int ldq, int nq, float *s, int lds, void *ws) {
  DSI_ASSERT(K->layout == DSI_LAYOUT_TILES && K->dtype == DSI_DTYPE_BF16 && nq >= 1 && nq <= 32);
  const int ks = DSI_CEIL_DIV(K->cols, DSI_TILE_K), np = DSI_CEIL_DIV(K->rows, DSI_TILE_N), nm = nq > 16 ? 2 : 1;
  const size_t lda = (size_t)(K->kpad / DSI_TILE_K) * TILE_BYTES, pb = (size_t)DSI_TILE_N * K->kpad * 2;
  uint8_t *qa = ws;
  dsi_rows_to_bf16_tiles(&dsi_vec_ops_avx512, q, ldq, NULL, nq, K->cols, K->kpad, 0, nq, (uint16_t *)qa);
  tiles_configure();
  for (int p = 0; p < np; p += 2) {
    const int nn = DSI_MIN(2, np - p);
    const uint8_t *b0 = (const uint8_t *)K->data + (size_t)p * pb;
    block_mac(qa, lda, b0, b0 + pb, ks, nm, nn, &k_no_prefetch, NULL, s + (size_t)p * DSI_TILE_N, (size_t)lds);
  }
  tile_release();
}

void dsi_attn_pv_tiles(const dsi_mat *Vt, const float *p, int lds, int nq, float *o, int ldo, const float *alpha,
                       const float *inv, void *ws) {
  DSI_ASSERT(Vt->layout == DSI_LAYOUT_TILES && Vt->dtype == DSI_DTYPE_BF16 && nq >= 1 && nq <= 32);
  const int ks = DSI_CEIL_DIV(Vt->cols, DSI_TILE_K), np = DSI_CEIL_DIV(Vt->rows, DSI_TILE_N), nm = nq > 16 ? 2 : 1;
  /* P's tiles cover the keys in use (ks steps), not the whole block */
  const size_t lda = (size_t)ks * TILE_BYTES, pb = (size_t)DSI_TILE_N * Vt->kpad * 2;
  uint8_t *pa = ws;
  float *c = (float *)(pa + DSI_XB_ROWS(nq) * lda / DSI_TILE_N); /* [32][32] */
  dsi_rows_to_bf16_tiles(&dsi_vec_ops_avx512, p, lds, NULL, nq, Vt->cols, ks * DSI_TILE_K, 0, nq, (uint16_t *)pa);
  tiles_configure();
  for (int q = 0; q < np; q += 2) {
    const int nn = DSI_MIN(2, np - q);
    const uint8_t *b0 = (const uint8_t *)Vt->data + (size_t)q * pb;
    block_mac(pa, lda, b0, b0 + pb, ks, nm, nn, &k_no_prefetch, NULL, c, 32);
    /* o = acc, or o = o alpha + acc: the matmul's store, or the softmax's
     * rescaling and then its scatter-add by a weight of 1 — two roundings,
     * kept apart (the barrier stops the compiler fusing them); then times
     * inv, a third */
    for (int j = 0; j < nn; j++) {
      const int col0 = (q + j) * DSI_TILE_N, ncols = DSI_MIN(DSI_TILE_N, Vt->rows - col0);
      const __mmask16 mask = (__mmask16)((1u << ncols) - 1);
      for (int i = 0; i < nq; i++) {
        float *y = o + (size_t)i * ldo + col0;
        __m512 v = _mm512_load_ps(c + i * 32 + j * 16);
        if (alpha) {
          __m512 r = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, y), _mm512_set1_ps(alpha[i]));
          __asm__("" : "+v"(r));
          v = _mm512_add_ps(r, v);
        }
        if (inv) v = _mm512_mul_ps(v, _mm512_set1_ps(inv[i]));
        _mm512_mask_storeu_ps(y, mask, v);
      }
    }
  }
  tile_release();
}
