/* kernels: the matmul of gemm.h for x86-64 CPUs with AVX2, FMA and F16C but
 * no AVX-512 — TILES weights in F32, BF16 or FP8 e4m3 widened to f32 in
 * registers, f32 activations, every product accumulated in f32. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "kernels/gemm.h"

/* The order of the sums, the same on every path whatever m is (so a row's
 * result does not depend on the batch it was computed in): per output row,
 * the even and the odd columns each sum in one f32 chain, line by line (a
 * line is one column pair of a 16-row panel) in column order, and the two
 * are added at the end — for FP8 at the end of each scale block, the sum
 * then scaled into a running total. F32 and BF16 lines are held as four
 * vectors of (row, even, row, odd) lanes times (x[2l], x[2l+1]) broadcast;
 * FP8 lines as even and odd halves of 8 rows times x[2l] and x[2l+1]: the
 * same chains in other lanes. */

typedef enum {
  W_F32,      /* pair lanes, read in place */
  W_BF16,     /* pair lanes, widened in registers */
  W_FP8,      /* even/odd lanes, staged as f16 a block at a time */
  W_FP8_WIDE, /* even/odd lanes, the panel widened to f32 in scratch */
} wkind;

/* activation rows one pass over a panel serves: 4 accumulators each, with
 * the line's 4 weight vectors and the broadcasts, fill the 16 registers */
#define MB_MAX 2
/* from this many activation rows on, an FP8 panel is widened once into
 * scratch rather than converted again on every pass */
#define FP8_WIDEN_M 3
/* bytes ahead of the line being read that the next lines are prefetched */
#define PREFETCH_AHEAD 1024
/* FP8 lines staged as f16 at a time (one 128-column scale block) */
#define STAGE_LINES 16

/* ---- F32 and BF16: a line as (row, even, row, odd) pair lanes ---- */
static inline __attribute__((always_inline)) void pair_line(wkind k, const uint8_t *p, __m256 w[4]) {
  if (k == W_BF16) {
    /* bf16 to f32 is a 16-bit shift: interleave zeros below each value;
     * the unpacks work within 128-bit lanes, so w[0] holds rows 0,1,4,5 and
     * w[1] rows 2,3,6,7 (back in order after the final hadd) */
    const __m256i z = _mm256_setzero_si256();
    __m256i a = _mm256_loadu_si256((const __m256i *)p), b = _mm256_loadu_si256((const __m256i *)(p + 32));
    w[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, a));
    w[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, a));
    w[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, b));
    w[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, b));
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

/* lines [0, lines) of a panel; pairs = cols / 2 lines have both columns */
static inline __attribute__((always_inline)) void run_pairs(wkind k, int mb, const uint8_t *w, int pairs, int lines,
                                                            const float *const *x, __m256 acc[][4]) {
  const size_t lb = k == W_BF16 ? 64 : 128;
  for (int l = 0; l < pairs; l++) {
    const uint8_t *p = w + l * lb;
    for (size_t o = 0; o < lb; o += 64) _mm_prefetch((const char *)p + PREFETCH_AHEAD + o, _MM_HINT_T0);
    __m256 v[4];
    pair_line(k, p, v);
    for (int i = 0; i < mb; i++) {
      __m256 xb = pair_bcast(x[i] + 2 * l);
      for (int q = 0; q < 4; q++) acc[i][q] = _mm256_fmadd_ps(v[q], xb, acc[i][q]);
    }
  }
  if (lines > pairs) {
    /* odd cols: the last line's second column is padding, and x ends
     * before it — multiply that zero weight by 0, not by what follows x */
    __m256 v[4];
    pair_line(k, w + pairs * lb, v);
    for (int i = 0; i < mb; i++) {
      float t[2] = {x[i][2 * pairs], 0.0f};
      __m256 xb = pair_bcast(t);
      for (int q = 0; q < 4; q++) acc[i][q] = _mm256_fmadd_ps(v[q], xb, acc[i][q]);
    }
  }
}

/* ---- FP8: a line as even and odd halves of 8 rows ---- */
/* An e4m3 byte b as f16 bits (b & 0x7f) << 7 | (b & 0x80) << 8 is exactly
 * its value times 2^-8, subnormals included (the 2^8 goes into the block
 * scale). A line's 32 bytes are 16 (even, odd) byte pairs, one per 16-bit
 * lane: shifted right arithmetically by 1 (the even byte first moved up),
 * the sign lands in bits 15 and 14 and the rest in 13..7; the mask keeps
 * 15 and 13..7. Integer shifts only: f16 -> f32 then reads from memory,
 * which on Intel keeps the conversion off the shuffle port. */
static inline void fp8_line_f16(const uint8_t *p, __m256i *even, __m256i *odd) {
  const __m256i mask = _mm256_set1_epi16((short)0xbf80);
  __m256i u = _mm256_loadu_si256((const __m256i *)p);
  *even = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(u, 8), 1), mask);
  *odd = _mm256_and_si256(_mm256_srai_epi16(u, 1), mask);
}

/* lines [0, n) of FP8 at p as f16 at dst: per line 16 even, 16 odd */
static void fp8_stage(const uint8_t *p, int n, uint16_t *dst) {
  for (int l = 0; l < n; l++) {
    _mm_prefetch((const char *)p + l * 32 + PREFETCH_AHEAD, _MM_HINT_T0);
    __m256i e, o;
    fp8_line_f16(p + l * 32, &e, &o);
    _mm256_store_si256((__m256i *)(dst + l * 32), e);
    _mm256_store_si256((__m256i *)(dst + l * 32 + 16), o);
  }
}

/* one staged (f16) or widened (f32) line: even rows 0-7, 8-15, odd 0-7, 8-15 */
static inline __attribute__((always_inline)) void split_line(wkind k, const void *p, __m256 w[4]) {
  for (int q = 0; q < 4; q++)
    w[q] = k == W_FP8 ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)p + q))
                      : _mm256_loadu_ps((const float *)p + 8 * q);
}

/* lines [l0, l1) of the panel, found at buf from line l0 on */
static inline __attribute__((always_inline)) void run_split(wkind k, int mb, const void *buf, int l0, int l1, int pairs,
                                                            const float *const *x, __m256 acc[][4]) {
  const size_t lb = k == W_FP8 ? 64 : 128;
  const uint8_t *b = (const uint8_t *)buf - (size_t)l0 * lb;
  int full = DSI_MIN(l1, pairs);
  for (int l = l0; l < full; l++) {
    __m256 v[4];
    split_line(k, b + l * lb, v);
    for (int i = 0; i < mb; i++) {
      __m256 x0 = _mm256_broadcast_ss(x[i] + 2 * l), x1 = _mm256_broadcast_ss(x[i] + 2 * l + 1);
      acc[i][0] = _mm256_fmadd_ps(v[0], x0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(v[1], x0, acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(v[2], x1, acc[i][2]);
      acc[i][3] = _mm256_fmadd_ps(v[3], x1, acc[i][3]);
    }
  }
  if (l1 > pairs) { /* odd cols, as in run_pairs */
    __m256 v[4];
    split_line(k, b + pairs * lb, v);
    for (int i = 0; i < mb; i++) {
      __m256 x0 = _mm256_broadcast_ss(x[i] + 2 * pairs), x1 = _mm256_setzero_ps();
      acc[i][0] = _mm256_fmadd_ps(v[0], x0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(v[1], x0, acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(v[2], x1, acc[i][2]);
      acc[i][3] = _mm256_fmadd_ps(v[3], x1, acc[i][3]);
    }
  }
}

/* the first n lines of an FP8 panel widened (x 2^-8) to f32, split lanes */
static void fp8_widen(const uint8_t *p, int n, float *dst) {
  for (int l = 0; l < n; l++) {
    __m256i e, o;
    fp8_line_f16(p + l * 32, &e, &o);
    float *d = dst + l * 32;
    _mm256_storeu_ps(d, _mm256_cvtph_ps(_mm256_castsi256_si128(e)));
    _mm256_storeu_ps(d + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(e, 1)));
    _mm256_storeu_ps(d + 16, _mm256_cvtph_ps(_mm256_castsi256_si128(o)));
    _mm256_storeu_ps(d + 24, _mm256_cvtph_ps(_mm256_extracti128_si256(o, 1)));
  }
}

/* ---- one panel (16 rows) times mb activation rows: out[i][0..16) ---- */
typedef struct {
  const uint8_t *w;    /* the panel's first line (FP8_WIDE: in scratch) */
  const float *scale;  /* FP8: the panel's scale per block of columns */
  int pairs;           /* lines whose two columns are both real: cols / 2 */
  int lines;           /* lines holding any real column: ceil(cols / 2) */
  int block_lines;     /* FP8: lines per scale block */
} panel_src;

static inline __attribute__((always_inline)) void panel_body(wkind k, int mb, const panel_src *s,
                                                             const float *const *x, float (*out)[16]) {
  __m256 acc[MB_MAX][4];
  for (int i = 0; i < mb; i++)
    for (int q = 0; q < 4; q++) acc[i][q] = _mm256_setzero_ps();
  if (k == W_F32 || k == W_BF16) {
    run_pairs(k, mb, s->w, s->pairs, s->lines, x, acc);
    for (int i = 0; i < mb; i++)
      for (int h = 0; h < 2; h++) {
        /* even + odd of each row; hadd works within 128-bit lanes, which
         * leaves F32's rows as 0,1,4,5 | 2,3,6,7 and BF16's in order */
        __m256 r = _mm256_hadd_ps(acc[i][2 * h], acc[i][2 * h + 1]);
        if (k == W_F32) r = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(r), 0xd8));
        _mm256_storeu_ps(out[i] + 8 * h, r);
      }
    return;
  }
  _Alignas(32) uint16_t stage[STAGE_LINES * 32];
  __m256 tot[MB_MAX][2];
  for (int i = 0; i < mb; i++) tot[i][0] = tot[i][1] = _mm256_setzero_ps();
  for (int l0 = 0, b = 0; l0 < s->lines; l0 += s->block_lines, b++) {
    int l1 = DSI_MIN(l0 + s->block_lines, s->lines);
    if (k == W_FP8_WIDE) {
      run_split(k, mb, s->w + (size_t)l0 * 128, l0, l1, s->pairs, x, acc);
    } else {
      for (int c0 = l0; c0 < l1; c0 += STAGE_LINES) {
        int c1 = DSI_MIN(c0 + STAGE_LINES, l1);
        fp8_stage(s->w + (size_t)c0 * 32, c1 - c0, stage);
        run_split(k, mb, stage, c0, c1, s->pairs, x, acc);
      }
    }
    __m256 sc = _mm256_set1_ps(s->scale[b] * 256.0f);
    for (int i = 0; i < mb; i++)
      for (int h = 0; h < 2; h++) {
        tot[i][h] = _mm256_fmadd_ps(_mm256_add_ps(acc[i][h], acc[i][h + 2]), sc, tot[i][h]);
        acc[i][h] = acc[i][h + 2] = _mm256_setzero_ps();
      }
  }
  for (int i = 0; i < mb; i++)
    for (int h = 0; h < 2; h++) _mm256_storeu_ps(out[i] + 8 * h, tot[i][h]);
}

/* one specialized copy per weight kind and activation-block height */
typedef void (*panel_fn)(const panel_src *s, const float *const *x, float (*out)[16]);
#define PANEL_FNS(K)                                                                                    \
  static void panel_##K##_1(const panel_src *s, const float *const *x, float (*o)[16]) { panel_body(K, 1, s, x, o); } \
  static void panel_##K##_2(const panel_src *s, const float *const *x, float (*o)[16]) { panel_body(K, 2, s, x, o); }
PANEL_FNS(W_F32)
PANEL_FNS(W_BF16)
PANEL_FNS(W_FP8)
PANEL_FNS(W_FP8_WIDE)
static const panel_fn panel_fns[4][MB_MAX] = {
  [W_F32] = {panel_W_F32_1, panel_W_F32_2},
  [W_BF16] = {panel_W_BF16_1, panel_W_BF16_2},
  [W_FP8] = {panel_W_FP8_1, panel_W_FP8_2},
  [W_FP8_WIDE] = {panel_W_FP8_WIDE_1, panel_W_FP8_WIDE_2},
};

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
        fp8_widen(s->w, s->lines, dst);
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
