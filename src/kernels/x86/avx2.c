/* kernels: the matmul of gemm.h for x86-64 CPUs with AVX2, FMA and F16C but
 * no AVX-512 — TILES weights in F32, BF16 or FP8 e4m3 widened to f32 in
 * registers, f32 activations, every product accumulated in f32. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "kernels/gemm.h"

/* One line of a 16-row panel (one column pair of all 16 rows) is held as
 * four vectors of (row, even column, row, odd column) lanes and multiplied
 * by (x[2l], x[2l+1]) broadcast, so each lane is one chain over the even
 * or the odd columns of a row, run line by line in column order; the two
 * are added once at the end (FP8: per scale block, then scaled into a
 * running total). Every path below keeps this order whatever m is, so a
 * row's result does not depend on the batch it was computed in. */

typedef enum {
  W_F32,
  W_BF16,
  W_FP8,
  W_FP8_WIDE, /* an FP8 panel already widened (x 2^-8) to f32 in scratch */
} wkind;

/* activation rows one pass over a panel serves: 4 accumulators each, with
 * the line's 4 weight vectors and a broadcast that fills the 16 registers */
#define MB_MAX 3
/* from this many activation rows on, an FP8 panel is widened once into
 * scratch rather than converted again on every pass */
#define FP8_WIDEN_M 4
/* bytes ahead of the line being read that the next lines are prefetched */
#define PREFETCH_AHEAD 1024

static inline int line_bytes(wkind k) { return k == W_BF16 ? 64 : k == W_FP8 ? 32 : 128; }

/* ---- one line of weights to four f32 vectors ---- */
static inline __attribute__((always_inline)) void line_load(wkind k, const uint8_t *p, __m256 w[4]) {
  if (k == W_BF16) {
    /* bf16 to f32 is a 16-bit shift: interleave zeros below each value;
     * the unpacks work within 128-bit lanes, so w[0] holds rows 0,1,4,5 and
     * w[1] rows 2,3,6,7 (put back in order when the sums are stored) */
    const __m256i z = _mm256_setzero_si256();
    __m256i a = _mm256_loadu_si256((const __m256i *)p), b = _mm256_loadu_si256((const __m256i *)(p + 32));
    w[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, a));
    w[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, a));
    w[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, b));
    w[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, b));
  } else if (k == W_FP8) {
    /* e4m3 byte b as f16 bits (b & 0x7f) << 7 | (b & 0x80) << 8 is exactly
     * its value times 2^-8, subnormals included (the 2^8 goes into the
     * block scale). Sign-extended to 16 bits and shifted by 7, the sign
     * lands in bits 15 and 14; the mask clears 14. */
    const __m256i mask = _mm256_set1_epi16((short)0xbf80);
    for (int h = 0; h < 2; h++) {
      __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
      v = _mm256_and_si256(_mm256_slli_epi16(v, 7), mask);
      w[2 * h] = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
      w[2 * h + 1] = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
    }
  } else {
    for (int q = 0; q < 4; q++) w[q] = _mm256_loadu_ps((const float *)p + 8 * q);
  }
}

/* (x[0], x[1]) in every lane pair; x need not be 8-byte aligned */
static inline __m256 pair_bcast(const float *x) {
  double d;
  memcpy(&d, x, sizeof d);
  return _mm256_castpd_ps(_mm256_set1_pd(d));
}

/* ---- lines [l0, l1) of a panel times mb activation rows ---- */
typedef struct {
  const uint8_t *w;    /* the panel's first line */
  const float *scale;  /* FP8: the panel's scale per block of columns */
  int pairs;           /* lines whose two columns are both real: cols / 2 */
  int lines;           /* lines holding any real column: ceil(cols / 2) */
  int block_lines;     /* FP8: lines per scale block */
} panel_src;

static inline __attribute__((always_inline)) void run_lines(wkind k, int mb, const panel_src *s, const float *const *x,
                                                            int l0, int l1, __m256 acc[][4]) {
  const int lb = line_bytes(k);
  int full = DSI_MIN(l1, s->pairs);
  for (int l = l0; l < full; l++) {
    const uint8_t *p = s->w + (size_t)l * lb;
    if (k != W_FP8_WIDE)
      for (int o = 0; o < lb; o += 64) _mm_prefetch((const char *)p + PREFETCH_AHEAD + o, _MM_HINT_T0);
    __m256 w[4];
    line_load(k, p, w);
    for (int i = 0; i < mb; i++) {
      __m256 xb = pair_bcast(x[i] + 2 * l);
      for (int q = 0; q < 4; q++) acc[i][q] = _mm256_fmadd_ps(w[q], xb, acc[i][q]);
    }
  }
  if (l1 > s->pairs) {
    /* odd cols: the last line's second column is padding, and x ends
     * before it — multiply that zero weight by 0, not by what follows x */
    int l = s->pairs;
    __m256 w[4];
    line_load(k, s->w + (size_t)l * lb, w);
    for (int i = 0; i < mb; i++) {
      float t[2] = {x[i][2 * l], 0.0f};
      __m256 xb = pair_bcast(t);
      for (int q = 0; q < 4; q++) acc[i][q] = _mm256_fmadd_ps(w[q], xb, acc[i][q]);
    }
  }
}

/* even + odd chains of each row, as 8 rows in order: lanes of a and b are
 * (row, even, row, odd) pairs; hadd within 128-bit lanes */
static inline __m256 join_pairs(wkind k, __m256 a, __m256 b) {
  __m256 s = _mm256_hadd_ps(a, b);
  /* BF16's unpack order comes out in row order already; the others hold
   * rows 0,1,4,5 | 2,3,6,7 */
  if (k == W_BF16) return s;
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), 0xd8));
}

/* ---- one panel (16 rows) times mb activation rows: out[i][0..16) ---- */
static inline __attribute__((always_inline)) void panel_body(wkind k, int mb, const panel_src *s,
                                                             const float *const *x, float (*out)[16]) {
  __m256 acc[MB_MAX][4];
  if (k == W_F32 || k == W_BF16) {
    for (int i = 0; i < mb; i++)
      for (int q = 0; q < 4; q++) acc[i][q] = _mm256_setzero_ps();
    run_lines(k, mb, s, x, 0, s->lines, acc);
    for (int i = 0; i < mb; i++) {
      _mm256_storeu_ps(out[i], join_pairs(k, acc[i][0], acc[i][1]));
      _mm256_storeu_ps(out[i] + 8, join_pairs(k, acc[i][2], acc[i][3]));
    }
    return;
  }
  /* FP8: a partial sum per scale block, scaled into the total (rows kept
   * in hadd order 0,1,4,5,2,3,6,7 until the end, the scale being one
   * number for the whole panel) */
  __m256 tot[MB_MAX][2];
  for (int i = 0; i < mb; i++) tot[i][0] = tot[i][1] = _mm256_setzero_ps();
  for (int l0 = 0, b = 0; l0 < s->lines; l0 += s->block_lines, b++) {
    for (int i = 0; i < mb; i++)
      for (int q = 0; q < 4; q++) acc[i][q] = _mm256_setzero_ps();
    run_lines(k, mb, s, x, l0, DSI_MIN(l0 + s->block_lines, s->lines), acc);
    __m256 sc = _mm256_set1_ps(s->scale[b] * 256.0f);
    for (int i = 0; i < mb; i++) {
      tot[i][0] = _mm256_fmadd_ps(_mm256_hadd_ps(acc[i][0], acc[i][1]), sc, tot[i][0]);
      tot[i][1] = _mm256_fmadd_ps(_mm256_hadd_ps(acc[i][2], acc[i][3]), sc, tot[i][1]);
    }
  }
  for (int i = 0; i < mb; i++)
    for (int h = 0; h < 2; h++)
      _mm256_storeu_ps(out[i] + 8 * h, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(tot[i][h]), 0xd8)));
}

/* one specialized copy per weight kind and activation-block height */
typedef void (*panel_fn)(const panel_src *s, const float *const *x, float (*out)[16]);
#define PANEL_FNS(K)                                                                                    \
  static void panel_##K##_1(const panel_src *s, const float *const *x, float (*o)[16]) { panel_body(K, 1, s, x, o); } \
  static void panel_##K##_2(const panel_src *s, const float *const *x, float (*o)[16]) { panel_body(K, 2, s, x, o); } \
  static void panel_##K##_3(const panel_src *s, const float *const *x, float (*o)[16]) { panel_body(K, 3, s, x, o); }
PANEL_FNS(W_F32)
PANEL_FNS(W_BF16)
PANEL_FNS(W_FP8)
PANEL_FNS(W_FP8_WIDE)
static const panel_fn panel_fns[4][MB_MAX] = {
  [W_F32] = {panel_W_F32_1, panel_W_F32_2, panel_W_F32_3},
  [W_BF16] = {panel_W_BF16_1, panel_W_BF16_2, panel_W_BF16_3},
  [W_FP8] = {panel_W_FP8_1, panel_W_FP8_2, panel_W_FP8_3},
  [W_FP8_WIDE] = {panel_W_FP8_WIDE_1, panel_W_FP8_WIDE_2, panel_W_FP8_WIDE_3},
};

/* the first `lines` lines of an FP8 panel as f32 (x 2^-8), F32 TILES order */
static void widen_fp8(const uint8_t *p, int lines, float *dst) {
  for (int l = 0; l < lines; l++) {
    __m256 w[4];
    line_load(W_FP8, p + (size_t)l * 32, w);
    for (int q = 0; q < 4; q++) _mm256_storeu_ps(dst + (size_t)l * 32 + 8 * q, w[q]);
  }
}

static inline float silu(float v) { return v / (1.0f + expf(-v)); }

void dsi_gemm_avx2(const dsi_gemm *g, int r0, int r1, void *scratch) {
  const dsi_mat *w = g->w;
  DSI_ASSERT(w->layout == DSI_LAYOUT_TILES && r0 % DSI_TILE_N == 0);
  wkind k = w->dtype == DSI_DTYPE_F32 ? W_F32 : w->dtype == DSI_DTYPE_BF16 ? W_BF16 : W_FP8;
  DSI_ASSERT(k != W_FP8 || (w->dtype == DSI_DTYPE_F8_E4M3 && w->block % 2 == 0));
  int silu_pairs = g->epi == DSI_EPI_SILU_PAIRS;
  DSI_ASSERT(!silu_pairs || r0 % (2 * DSI_TILE_N) == 0);
  int end = silu_pairs ? r1 : DSI_MIN(r1, w->rows), step = silu_pairs ? 2 * DSI_TILE_N : DSI_TILE_N;
  int n_panels = silu_pairs ? 2 : 1;
  size_t panel_bytes = (size_t)DSI_TILE_N * w->kpad * dsi_dtype_size(w->dtype);
  /* widened FP8 panels (two for gate/up): 64 * kpad bytes each */
  int wide = k == W_FP8 && g->m >= FP8_WIDEN_M;
  wkind kk = wide ? W_FP8_WIDE : k;
  for (int r = r0; r < end; r += step) {
    panel_src src[2];
    for (int pp = 0; pp < n_panels; pp++) {
      int p = r / DSI_TILE_N + pp;
      panel_src *s = &src[pp];
      s->w = (const uint8_t *)w->data + (size_t)p * panel_bytes;
      s->scale = k == W_FP8 ? w->scale + (size_t)p * w->scale_cols : NULL;
      s->pairs = w->cols / 2;
      s->lines = (w->cols + 1) / 2;
      s->block_lines = k == W_FP8 ? w->block / 2 : 0;
      if (wide) {
        float *dst = (float *)scratch + (size_t)pp * DSI_TILE_N * w->kpad;
        widen_fp8(s->w, s->lines, dst);
        s->w = (const uint8_t *)dst;
      }
    }
    for (int i0 = 0; i0 < g->m; i0 += MB_MAX) {
      int mb = DSI_MIN(MB_MAX, g->m - i0);
      const float *xp[MB_MAX];
      for (int i = 0; i < mb; i++)
        xp[i] = g->x + (size_t)(g->x_rows ? g->x_rows[i0 + i] : i0 + i) * g->ldx;
      float out[2][MB_MAX][16];
      for (int pp = 0; pp < n_panels; pp++) panel_fns[kk][mb - 1](&src[pp], xp, out[pp]);
      int n = DSI_MIN(DSI_TILE_N, end - r);
      for (int i = 0; i < mb; i++) {
        int gi = i0 + i;
        if (g->epi == DSI_EPI_STORE) {
          float *y = g->y + (size_t)gi * g->ldy + r;
          for (int j = 0; j < n; j++) y[j] = out[0][i][j];
        } else if (g->epi == DSI_EPI_SCATTER_ADD) {
          float *y = g->y + (size_t)g->y_rows[gi] * g->ldy + r, sc = g->y_scale[gi];
          for (int j = 0; j < n; j++) y[j] += sc * out[0][i][j];
        } else {
          float *y = g->y + (size_t)gi * g->ldy + r / 2;
          for (int j = 0; j < DSI_TILE_N; j++) y[j] = silu(out[0][i][j]) * out[1][i][j];
        }
      }
    }
  }
}
