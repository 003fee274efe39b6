/* kernels: the pair-layout attention (attn.h) on AMX BF16 tiles. q K^T
 * multiplies, per K step, up to four 32-position chunks against the q tile
 * of up to 8 heads, or two chunks against the two q tiles of up to 16
 * heads, so a cache tile loads once for all of them; P V holds four
 * 16-column accumulators of up to 16 heads and streams the chunks through
 * them. Each call configures the tiles and releases them. */
#include "kernels/attn.h"
#include "kernels/x86/amx_util.h"

#include <immintrin.h>
#include <string.h>

#define CHUNK DSI_ATTN_PAIR_CHUNK

/* bytes of the pair row holding position u of the sequence (u even) */
static inline const uint8_t *pair_row(const dsi_attn_pairs *a, int u) {
  int32_t slot = a->table[u / a->block_size] * a->block_size + u % a->block_size;
  return (const uint8_t *)(a->cache + dsi_kv_pair_at(a->row, slot));
}

/* q as B tiles, one per 16 latent columns: row k (column 16 ks + k) holds,
 * for head h, bf16(q[h]) at word 4h (against the even position of a pair)
 * and at word 4h + 3 (the odd one), zeros elsewhere and for absent heads */
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

/* s[h][u0 + 2p + par] = scale * c[p][2h + par]: the 64-bit column h of c */
static void scatter_scores(const float *c, int nh, float scale, float *s, int lds, int u0) {
  const __m512i i0 = _mm512_set_epi64(56, 48, 40, 32, 24, 16, 8, 0), i1 = _mm512_add_epi64(i0, _mm512_set1_epi64(64));
  const __m512 sc = _mm512_set1_ps(scale);
  for (int h = 0; h < nh; h++) {
    const double *ch = (const double *)c + h;
    __m512 x0 = (__m512)_mm512_i64gather_pd(i0, ch, 8), x1 = (__m512)_mm512_i64gather_pd(i1, ch, 8);
    _mm512_storeu_ps(s + (size_t)h * lds + u0, _mm512_mul_ps(x0, sc));
    _mm512_storeu_ps(s + (size_t)h * lds + u0 + 16, _mm512_mul_ps(x1, sc));
  }
}

/* the accumulators, tiles 0-3 */
static inline void zero_c(void) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

/* bytes of one q tile set (heads 8j .. 8j + 7) */
static size_t q_set_bytes(int row) { return (size_t)row / 16 * 1024; }

void dsi_attn_pairs_qk_amx(const dsi_attn_pairs *a, const float *q, int ldq, float scale, float *s, int lds,
                           void *ws) {
  const int nk = a->row / 16, nch = (a->n + CHUNK - 1) / CHUNK, two = a->nh > 8;
  const size_t stride = (size_t)a->row * 4; /* one pair row */
  uint16_t *qb0 = ws, *qb1 = (uint16_t *)((uint8_t *)ws + q_set_bytes(a->row));
  float *c = (float *)((uint8_t *)ws + 2 * q_set_bytes(a->row));
  pack_q(q, ldq, DSI_MIN(a->nh, 8), a->row, qb0);
  if (two) pack_q(q + (size_t)8 * ldq, ldq, a->nh - 8, a->row, qb1);
  tiles_configure();
  if (!two) { /* C 0-3 one per chunk, A 4, 5, 7, q 6 */
    for (int c0 = 0; c0 < nch; c0 += 4) {
      const int g = DSI_MIN(4, nch - c0);
      const uint8_t *b0 = pair_row(a, c0 * CHUNK), *b1 = b0, *b2 = b0, *b3 = b0;
      if (g > 1) b1 = pair_row(a, (c0 + 1) * CHUNK);
      if (g > 2) b2 = pair_row(a, (c0 + 2) * CHUNK);
      if (g > 3) b3 = pair_row(a, (c0 + 3) * CHUNK);
      zero_c();
      for (int ks = 0; ks < nk; ks++) {
        _tile_loadd(6, qb0 + (size_t)ks * 512, 64);
        _tile_loadd(4, b0 + (size_t)ks * 64, stride);
        _tile_dpbf16ps(0, 4, 6);
        if (g > 1) {
          _tile_loadd(5, b1 + (size_t)ks * 64, stride);
          _tile_dpbf16ps(1, 5, 6);
        }
        if (g > 2) {
          _tile_loadd(7, b2 + (size_t)ks * 64, stride);
          _tile_dpbf16ps(2, 7, 6);
        }
        if (g > 3) {
          _tile_loadd(4, b3 + (size_t)ks * 64, stride);
          _tile_dpbf16ps(3, 4, 6);
        }
      }
      _tile_stored(0, c, 64);
      scatter_scores(c, a->nh, scale, s, lds, c0 * CHUNK);
      if (g > 1) {
        _tile_stored(1, c, 64);
        scatter_scores(c, a->nh, scale, s, lds, (c0 + 1) * CHUNK);
      }
      if (g > 2) {
        _tile_stored(2, c, 64);
        scatter_scores(c, a->nh, scale, s, lds, (c0 + 2) * CHUNK);
      }
      if (g > 3) {
        _tile_stored(3, c, 64);
        scatter_scores(c, a->nh, scale, s, lds, (c0 + 3) * CHUNK);
      }
    }
  } else { /* C 2i + j for chunk i and heads 8j..; A 4, 5 per chunk; q 6, 7 per head set */
    float *s1 = s + (size_t)8 * lds;
    for (int c0 = 0; c0 < nch; c0 += 2) {
      const int g = DSI_MIN(2, nch - c0);
      const uint8_t *b0 = pair_row(a, c0 * CHUNK), *b1 = g > 1 ? pair_row(a, (c0 + 1) * CHUNK) : b0;
      zero_c();
      for (int ks = 0; ks < nk; ks++) {
        _tile_loadd(6, qb0 + (size_t)ks * 512, 64);
        _tile_loadd(7, qb1 + (size_t)ks * 512, 64);
        _tile_loadd(4, b0 + (size_t)ks * 64, stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (g > 1) {
          _tile_loadd(5, b1 + (size_t)ks * 64, stride);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, c, 64);
      scatter_scores(c, 8, scale, s, lds, c0 * CHUNK);
      _tile_stored(1, c, 64);
      scatter_scores(c, a->nh - 8, scale, s1, lds, c0 * CHUNK);
      if (g > 1) {
        _tile_stored(2, c, 64);
        scatter_scores(c, 8, scale, s, lds, (c0 + 1) * CHUNK);
        _tile_stored(3, c, 64);
        scatter_scores(c, a->nh - 8, scale, s1, lds, (c0 + 1) * CHUNK);
      }
    }
  }
  _tile_release();
}

void dsi_attn_pairs_pv_amx(const dsi_attn_pairs *a, const uint16_t *p, int ldp, float *o, int ldo) {
  const int nch = (a->n + CHUNK - 1) / CHUNK, nt = a->kvl / 16;
  const size_t stride = (size_t)a->row * 4, ldpb = (size_t)ldp * 2, ldob = (size_t)ldo * 4;
  const uint8_t nh = (uint8_t)a->nh, rows[8] = {nh, nh, nh, nh, nh, 16, 16, 16};
  tiles_configure_rows(rows);
  /* tiles: C 0-3 (16 columns each), P 4, V 5-7 */
  for (int t0 = 0; t0 < nt; t0 += 4) {
    const int g = DSI_MIN(4, nt - t0);
    zero_c();
    for (int ch = 0; ch < nch; ch++) {
      const uint8_t *v = pair_row(a, ch * CHUNK) + (size_t)t0 * 64;
      _tile_loadd(4, p + (size_t)ch * CHUNK, ldpb);
      _tile_loadd(5, v, stride);
      _tile_dpbf16ps(0, 4, 5);
      if (g > 1) {
        _tile_loadd(6, v + 64, stride);
        _tile_dpbf16ps(1, 4, 6);
      }
      if (g > 2) {
        _tile_loadd(7, v + 128, stride);
        _tile_dpbf16ps(2, 4, 7);
      }
      if (g > 3) {
        _tile_loadd(5, v + 192, stride);
        _tile_dpbf16ps(3, 4, 5);
      }
    }
    _tile_stored(0, o + (size_t)t0 * 16, ldob);
    if (g > 1) _tile_stored(1, o + (size_t)(t0 + 1) * 16, ldob);
    if (g > 2) _tile_stored(2, o + (size_t)(t0 + 2) * 16, ldob);
    if (g > 3) _tile_stored(3, o + (size_t)(t0 + 3) * 16, ldob);
  }
  _tile_release();
}
