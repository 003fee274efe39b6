/* kernels: the matmul of gemm.h for x86-64 CPUs with AVX2, FMA and F16C but
 * no AVX-512 — TILES weights in F32, BF16, FP8 e4m3 or INT8 (quantized at
 * load) widened to f32, f32 activations, every product accumulated in f32. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "kernels/gemm.h"
#include "kernels/x86/avx2_math.h"

/* The order of the sums, the same on every path whatever m is (so a row's
 * result does not depend on the batch it was computed in): per output row,
 * the even and the odd columns each sum in one f32 chain, line by line (a
 * line is one column pair of a 16-row panel) in column order, and the two
 * are added at the end — for FP8 at the end of each scale block, the sum
 * then scaled into a running total. F32 and BF16 lines, and FP8 and INT8
 * lines widened to f32, are held as four vectors of (row, even, row, odd)
 * lanes times (x[2l], x[2l+1]) broadcast; FP8 lines staged as f16 (one or
 * two rows) as even and odd halves of 8 rows times x[2l] and x[2l+1]: the
 * same chains in other lanes. */

/* the kernel bodies take the weight kind and row count as constants and
 * must be specialized for them */
#define INLINE static inline __attribute__((always_inline))

typedef enum {
  W_F32,      /* pair lanes, read in place */
  W_BF16,     /* pair lanes, widened in registers */
  W_FP8,      /* even/odd lanes, staged as f16 a few lines at a time */
  W_FP8_NN,   /* the same, of weights known to hold no NaN byte: staged
                 without the NaN check (8 of a line's 13 operations) */
  W_FP8_WIDE, /* pair lanes, widened to f32 a chunk at a time */
  W_I8,       /* pair lanes, widened to f32 a chunk at a time */
  W_I8_REG,   /* pair lanes, widened in registers line by line (few rows) */
} wkind;

/* activation rows one pass over a panel serves: 4 accumulators each, with
 * the line's 4 weight vectors and the broadcasts, fill the 16 registers */
#define MB_MAX 2
/* from this many activation rows on, FP8 and INT8 lines are widened to
 * f32 once for all passes rather than converted by every pass (FP8 staged
 * as f16, INT8 in registers) */
#define FP8_WIDEN_M 3
/* bytes ahead of the line being read that the next lines are prefetched */
#define PREFETCH_AHEAD 2048
/* FP8 lines staged as f16 at a time: short, so that staging the next
 * lines overlaps the FMAs of these */
#define STAGE_LINES 16
/* bytes of a panel (as read by the FMAs) every activation row goes over
 * before the next ones, when there are more rows than one pass takes:
 * they stay in L1 beside a half pass's activations (BF16: 16 KB of lines
 * and 6 rows' 12 KB; 1.04-1.1x 8 KB's on a Zen 3 at 16-256 rows) */
#define CHUNK_BYTES 16384
/* activation rows whose chains are kept at a time */
#define M_CHUNK 32
/* bytes of f32 activation rows the panels go over before the next rows:
 * within the L3 (1 MB and 4 MB measured on a Zen 3 at 256-1024 rows of
 * 7168 columns: 4 MB as fast as no blocking at 256, 1.3x at 1024) */
#define X_BLOCK_BYTES ((size_t)4 << 20)

/* ---- F32 and BF16: a line as (row, even, row, odd) pair lanes ---- */
/* vectors [q0, q0 + nq) of the line at p into w[0..nq): all four (rows
 * 0-15), or half a line (q0 = 2h, nq = 2: rows 8h..8h+7) */
INLINE void pair_line(wkind k, const uint8_t *p, int q0, int nq, __m256 w[4]) {
  if (k == W_I8_REG) {
    /* a line's bytes are (even, odd) pairs of rows 0-15 in order: 8 of
     * them sign-extended are 4 rows' pair lanes */
    #pragma GCC unroll 4
    for (int j = 0; j < nq; j++)
      w[j] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * (q0 + j)))));
  } else if (k == W_BF16) {
    /* bf16 to f32 is a 16-bit shift: interleave zeros below each value;
     * the unpacks work within 128-bit lanes, so w[0] holds rows 0,1,4,5 and
     * w[1] rows 2,3,6,7 (back in order after the final hadd) */
    const __m256i z = _mm256_setzero_si256();
    #pragma GCC unroll 2
    for (int j = 0; j < nq; j += 2) {
      __m256i a = _mm256_loadu_si256((const __m256i *)(p + 16 * (q0 + j)));
      w[j] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, a));
      w[j + 1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, a));
    }
  } else {
    #pragma GCC unroll 8
    for (int j = 0; j < nq; j++) w[j] = _mm256_loadu_ps((const float *)p + 8 * (q0 + j));
  }
  /* in registers, not loaded again by every row's FMA (as in split_line) */
  #pragma GCC unroll 8
  for (int j = 0; j < nq; j++) __asm__("" : "+x"(w[j]));
}

/* (x[0], x[1]) in every lane pair; x need not be 8-byte aligned */
static inline __m256 pair_bcast(const float *x) {
  double d;
  memcpy(&d, x, sizeof d);
  return _mm256_castpd_ps(_mm256_set1_pd(d));
}

/* lines [l0, l1) of a panel, line l0 at w, vectors [q0, q0 + nq) of each
 * into acc[i][0..nq); lines from `pairs` = cols / 2 on have only their
 * even column */
INLINE void run_pairs(wkind k, int mb, int q0, int nq, const uint8_t *w, int l0, int l1, int pairs,
                      const float *const *x, __m256 acc[][4]) {
  const size_t lb = k == W_I8_REG ? 32 : k == W_BF16 ? 64 : 128;
  const uint8_t *b = w - (size_t)l0 * lb;
  int full = DSI_MIN(l1, pairs);
  for (int l = l0; l < full; l++) {
    const uint8_t *p = b + l * lb;
    if (q0 == 0 && (lb >= 64 || !(l & 1))) /* the first pass over the lines, a cache line at a time */
      for (size_t o = 0; o < lb; o += 64) _mm_prefetch((const char *)p + PREFETCH_AHEAD + o, _MM_HINT_T0);
    __m256 v[4];
    pair_line(k, p, q0, nq, v);
    #pragma GCC unroll 8
    for (int i = 0; i < mb; i++) {
      __m256 xb = pair_bcast(x[i] + 2 * l);
      #pragma GCC unroll 8
      for (int q = 0; q < nq; q++) acc[i][q] = _mm256_fmadd_ps(v[q], xb, acc[i][q]);
    }
  }
  if (l1 > pairs) {
    /* odd cols: the last line's second column is padding, and x ends
     * before it — multiply that zero weight by 0, not by what follows x */
    __m256 v[4];
    pair_line(k, b + pairs * lb, q0, nq, v);
    #pragma GCC unroll 8
    for (int i = 0; i < mb; i++) {
      float t[2] = {x[i][2 * pairs], 0.0f};
      __m256 xb = pair_bcast(t);
      #pragma GCC unroll 8
      for (int q = 0; q < nq; q++) acc[i][q] = _mm256_fmadd_ps(v[q], xb, acc[i][q]);
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
/* E4M3FN's NaN (magnitude 0x7f) comes out of the shifts as 0x3f80 (480 x
 * 2^-8): made an f16 NaN (0x7f80), as the scalar table has it. */
static inline __m256i fp8_f16_nan(__m256i h) {
  __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x3f80));
  return _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7c00)));
}
/* nan: 0 when the weights are known to hold no NaN byte (dsi_mat.nan_free) */
INLINE void fp8_line_f16(const uint8_t *p, int nan, __m256i *even, __m256i *odd) {
  const __m256i mask = _mm256_set1_epi16((short)0xbf80);
  __m256i u = _mm256_loadu_si256((const __m256i *)p);
  *even = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(u, 8), 1), mask);
  *odd = _mm256_and_si256(_mm256_srai_epi16(u, 1), mask);
  if (nan) *even = fp8_f16_nan(*even), *odd = fp8_f16_nan(*odd);
}

/* lines [0, n) of FP8 at p as f16 at dst: per line 16 even, 16 odd */
INLINE void fp8_stage(const uint8_t *p, int nan, int n, uint16_t *dst) {
  for (int l = 0; l < n; l++) {
    _mm_prefetch((const char *)p + l * 32 + PREFETCH_AHEAD, _MM_HINT_T0);
    __m256i e, o;
    fp8_line_f16(p + l * 32, nan, &e, &o);
    _mm256_store_si256((__m256i *)(dst + l * 32), e);
    _mm256_store_si256((__m256i *)(dst + l * 32 + 16), o);
  }
}

/* one staged (f16) line: even rows 0-7, 8-15, odd 0-7, 8-15 */
INLINE void split_line(const void *p, __m256 w[4]) {
  #pragma GCC unroll 8
  for (int q = 0; q < 4; q++) {
    w[q] = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)p + q));
    /* in a register: GCC 12 otherwise folds the load into every row's
     * FMA, and the loads, twice the FMAs, bound the pass on a Zen 3 */
    __asm__("" : "+x"(w[q]));
  }
}

/* lines [l0, l1) of a panel, staged at buf from line l0 on */
INLINE void run_split(int mb, const void *buf, int l0, int l1, int pairs, const float *const *x, __m256 acc[][4]) {
  const size_t lb = 64;
  const uint8_t *b = (const uint8_t *)buf - (size_t)l0 * lb;
  int full = DSI_MIN(l1, pairs);
  for (int l = l0; l < full; l++) {
    __m256 v[4];
    split_line(b + l * lb, v);
    #pragma GCC unroll 8
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
    split_line(b + pairs * lb, v);
    #pragma GCC unroll 8
    for (int i = 0; i < mb; i++) {
      __m256 x0 = _mm256_broadcast_ss(x[i] + 2 * pairs), x1 = _mm256_setzero_ps();
      acc[i][0] = _mm256_fmadd_ps(v[0], x0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(v[1], x0, acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(v[2], x1, acc[i][2]);
      acc[i][3] = _mm256_fmadd_ps(v[3], x1, acc[i][3]);
    }
  }
}

/* ---- FP8 and INT8 widened a chunk at a time, for three or more rows ---- */
/* As F32 lines (pair lanes), which the F32 passes then run. (As BF16
 * lines, exact for both, for the BF16 half passes: 0.85-1.0x, the
 * narrowing's cost and the half passes' over one 64-line block.) */

/* lines [0, n) of FP8 at p widened (x 2^-8) to f32 at dst */
INLINE void fp8_widen_body(const uint8_t *p, int nan, int n, float *dst) {
  for (int l = 0; l < n; l++) {
    __m256i e, o;
    fp8_line_f16(p + l * 32, nan, &e, &o);
    /* (even, odd) back in pairs: rows 0-3 | 8-11 and 4-7 | 12-15 */
    __m256i lo = _mm256_unpacklo_epi16(e, o), hi = _mm256_unpackhi_epi16(e, o);
    float *d = dst + l * 32;
    _mm256_store_ps(d, _mm256_cvtph_ps(_mm256_castsi256_si128(lo)));
    _mm256_store_ps(d + 8, _mm256_cvtph_ps(_mm256_castsi256_si128(hi)));
    _mm256_store_ps(d + 16, _mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1)));
    _mm256_store_ps(d + 24, _mm256_cvtph_ps(_mm256_extracti128_si256(hi, 1)));
  }
}
static void fp8_widen(const uint8_t *p, int nan, int n, float *dst) {
  if (nan) fp8_widen_body(p, 1, n, dst);
  else fp8_widen_body(p, 0, n, dst);
}

/* lines [0, n) of INT8 at p widened (exactly) to f32 at dst. The sums then
 * run as FP8's do — even and odd chains per row, added at the end of each
 * 128-column block and scaled into the total — which is the AVX-512 INT8
 * kernel's order too, so the two agree to rounding. A chunk is one block,
 * widened once for every activation row. */
static void i8_widen(const uint8_t *p, int n, float *dst) {
  for (int l = 0; l < n; l++) {
    if (!(l & 1)) _mm_prefetch((const char *)p + l * 32 + PREFETCH_AHEAD, _MM_HINT_T0);
    __m256 v[4];
    pair_line(W_I8_REG, p + l * 32, 0, 4, v);
    #pragma GCC unroll 4
    for (int q = 0; q < 4; q++) _mm256_store_ps(dst + l * 32 + 8 * q, v[q]);
  }
}

/* ---- a pass: lines [l0, l1) of a panel times up to MB_MAX rows ---- */
/* The chains wait in `state` ([mb][4] vectors) between passes, so a panel
 * can be cut into chunks that stay in L1 while every activation row goes
 * over them; the sums are the same as in one pass. */
INLINE void pass_body(wkind k, int mb, const uint8_t *w, int l0, int l1, int pairs, const float *const *x,
                      __m256 *state) {
  __m256 acc[MB_MAX][4];
  /* moved in and out with load/store intrinsics (and the small loops
   * unrolled by pragma): copied as plain __m256 values, GCC 12 keeps acc
   * in memory and stores it on every line */
  #pragma GCC unroll 8
  for (int i = 0; i < mb; i++)
    #pragma GCC unroll 8
    for (int q = 0; q < 4; q++) acc[i][q] = _mm256_load_ps((const float *)&state[4 * i + q]);
  if (k == W_F32 || k == W_BF16) {
    run_pairs(k, mb, 0, 4, w, l0, l1, pairs, x, acc);
  } else if (k == W_I8_REG) {
    /* the INT8 itself, at few rows: each line widened in registers and
     * multiplied at once, without a chunk's trip through scratch (4 stores
     * and 4 loads a line that bound the pass at one row: 1.15-1.27x on
     * W_UV's one-row products, `--quant int8 --precision f32` decode
     * 1.08-1.40x on a Zen 3; the same values in the same chains) */
    run_pairs(W_I8_REG, mb, 0, 4, w, l0, l1, pairs, x, acc);
  } else {
    /* w is the FP8 itself: staged a few lines at a time, the chains kept
     * in registers meanwhile */
    _Alignas(32) uint16_t stage[STAGE_LINES * 32];
    for (int c0 = l0; c0 < l1; c0 += STAGE_LINES) {
      int c1 = DSI_MIN(c0 + STAGE_LINES, l1);
      fp8_stage(w + (size_t)(c0 - l0) * 32, k == W_FP8, c1 - c0, stage);
      run_split(mb, stage, c0, c1, pairs, x, acc);
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < mb; i++)
    #pragma GCC unroll 8
    for (int q = 0; q < 4; q++) _mm256_store_ps((float *)&state[4 * i + q], acc[i][q]);
}

/* one specialized copy per weight kind and number of activation rows */
typedef void (*pass_fn)(const uint8_t *w, int l0, int l1, int pairs, const float *const *x, __m256 *state);
#define PASS_FNS(K)                                                                            \
  static void pass_##K##_1(const uint8_t *w, int l0, int l1, int pairs, const float *const *x, \
                           __m256 *state) { pass_body(K, 1, w, l0, l1, pairs, x, state); }     \
  static void pass_##K##_2(const uint8_t *w, int l0, int l1, int pairs, const float *const *x, \
                           __m256 *state) { pass_body(K, 2, w, l0, l1, pairs, x, state); }
PASS_FNS(W_F32)
PASS_FNS(W_BF16)
PASS_FNS(W_FP8)
PASS_FNS(W_FP8_NN)
PASS_FNS(W_I8_REG)
static const pass_fn pass_fns[7][MB_MAX] = {
  [W_F32] = {pass_W_F32_1, pass_W_F32_2},
  [W_BF16] = {pass_W_BF16_1, pass_W_BF16_2},
  [W_FP8] = {pass_W_FP8_1, pass_W_FP8_2},
  [W_FP8_NN] = {pass_W_FP8_NN_1, pass_W_FP8_NN_2},
  /* W_FP8_WIDE and W_I8 run their widened lines as W_F32 */
  [W_I8_REG] = {pass_W_I8_REG_1, pass_W_I8_REG_2},
};

/* ---- a half pass: lines [l0, l1) of half a panel times up to MB_HALF rows ---- */
/* With more rows than one pass takes, F32 and BF16 chunks are gone over
 * half a panel (8 of its 16 rows, two vectors of a line) at a time: 12
 * chains (6 rows x 2 vectors) rather than 8, and a line's widening shared
 * by 6 rows. The same chains as a whole pass: only which pass runs them
 * changes. */
#define MB_HALF 6
/* from this many rows on (measured on a Zen 3: 3 rows leave 6 chains, too
 * few to fill the FMA pipes, and 4 rows ran 0.9x whole passes of 2) */
#define HALF_MIN_M 5
INLINE void half_body(wkind k, int mb, int h, const uint8_t *w, int l0, int l1, int pairs, const float *const *x,
                      __m256 *state) {
  __m256 acc[MB_HALF][4]; /* [2..4) unused */
  #pragma GCC unroll 8
  for (int i = 0; i < mb; i++)
    #pragma GCC unroll 2
    for (int q = 0; q < 2; q++) acc[i][q] = _mm256_load_ps((const float *)&state[4 * i + 2 * h + q]);
  run_pairs(k, mb, 2 * h, 2, w, l0, l1, pairs, x, acc);
  #pragma GCC unroll 8
  for (int i = 0; i < mb; i++)
    #pragma GCC unroll 2
    for (int q = 0; q < 2; q++) _mm256_store_ps((float *)&state[4 * i + 2 * h + q], acc[i][q]);
}

typedef void (*half_fn)(int h, const uint8_t *w, int l0, int l1, int pairs, const float *const *x, __m256 *state);
#define HALF_FN(K, M)                                                                                      \
  static void half_##K##_##M(int h, const uint8_t *w, int l0, int l1, int pairs, const float *const *x, \
                             __m256 *state) { half_body(K, M, h, w, l0, l1, pairs, x, state); }
#define HALF_FNS(K) HALF_FN(K, 1) HALF_FN(K, 2) HALF_FN(K, 3) HALF_FN(K, 4) HALF_FN(K, 5) HALF_FN(K, 6)
HALF_FNS(W_F32)
HALF_FNS(W_BF16)
static const half_fn half_fns[2][MB_HALF] = {
  {half_W_F32_1, half_W_F32_2, half_W_F32_3, half_W_F32_4, half_W_F32_5, half_W_F32_6},
  {half_W_BF16_1, half_W_BF16_2, half_W_BF16_3, half_W_BF16_4, half_W_BF16_5, half_W_BF16_6},
};

/* ---- one panel (16 rows) times up to M_CHUNK activation rows ---- */
/* rows 0-7 of pair lanes a[0] (rows 0-3) and a[1] (4-7), even + odd: hadd
 * works within 128-bit lanes, which leaves them as 0,1,4,5 | 2,3,6,7 */
static inline __m256 pair_sums(const __m256 *a) {
  __m256 r = _mm256_hadd_ps(a[0], a[1]);
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(r), 0xd8));
}

typedef struct {
  const uint8_t *w;    /* the panel's first line */
  const float *scale;  /* FP8, INT8: the panel's scale per block of columns */
  int pairs;           /* lines whose two columns are both real: cols / 2 */
  int lines;           /* lines holding any real column: ceil(cols / 2) */
  int block_lines;     /* FP8, INT8: lines per scale block */
} panel_src;

/* per-thread scratch: a chunk of widened FP8 lines, then the chains and
 * FP8 totals of M_CHUNK rows — within DSI_GEMM_SCRATCH(0) */
#define SCRATCH_CHUNK CHUNK_BYTES
#define SCRATCH_STATE (M_CHUNK * 4 * 32)
#define SCRATCH_TOT (M_CHUNK * 2 * 32)
_Static_assert(SCRATCH_CHUNK + SCRATCH_STATE + SCRATCH_TOT <= DSI_GEMM_SCRATCH(0), "scratch too small");

static void panel(wkind k, int nan, const panel_src *s, int mc, const float *const *x, uint8_t *scratch,
                  float (*out)[16]) {
  uint8_t *buf = scratch;
  __m256 *state = (__m256 *)(scratch + SCRATCH_CHUNK), *tot = (__m256 *)(scratch + SCRATCH_CHUNK + SCRATCH_STATE);
  int fp8 = k == W_FP8 || k == W_FP8_NN || k == W_FP8_WIDE || k == W_I8 || k == W_I8_REG; /* block-scaled */
  int split = k == W_FP8 || k == W_FP8_NN;                                            /* even/odd lanes */
  for (int i = 0; i < 4 * mc; i++) state[i] = _mm256_setzero_ps();
  for (int i = 0; i < 2 * mc; i++) tot[i] = _mm256_setzero_ps();
  /* F32 and BF16 are read in place: in one pass when that serves every
   * row, else in chunks that stay in L1 */
  int chunk = fp8 || mc > MB_MAX ? CHUNK_BYTES / (k == W_BF16 ? 64 : 128) : s->lines;
  for (int l0 = 0, l1; l0 < s->lines; l0 = l1) {
    l1 = DSI_MIN(l0 + chunk, s->lines);
    if (fp8) l1 = DSI_MIN(l1, (l0 / s->block_lines + 1) * s->block_lines); /* one scale per chunk */
    const uint8_t *w = s->w + (size_t)l0 * (k == W_F32 ? 128 : k == W_BF16 ? 64 : 32);
    wkind pk = k; /* the kind the passes read */
    if (k == W_FP8_WIDE || k == W_I8) {
      if (k == W_I8) i8_widen(w, l1 - l0, (float *)buf);
      else fp8_widen(w, nan, l1 - l0, (float *)buf);
      w = buf;
      pk = W_F32;
    }
    if ((k == W_F32 || k == W_BF16) && mc >= HALF_MIN_M) {
      /* the rows in groups as even as can be: 8 as 4 + 4, not 6 + 2 (the
       * widened FP8 and INT8 lines take whole passes: half passes over a
       * 64-line block ran 0.9-0.95x them on a Zen 3) */
      int groups = (mc + MB_HALF - 1) / MB_HALF;
      for (int h = 0; h < 2; h++)
        for (int g = 0, i = 0; g < groups; g++) {
          int n = (mc - i) / (groups - g);
          half_fns[pk == W_BF16][n - 1](h, w, l0, l1, s->pairs, x + i, state + 4 * i);
          i += n;
        }
    } else {
      for (int i = 0; i < mc; i += MB_MAX)
        pass_fns[pk][DSI_MIN(MB_MAX, mc - i) - 1](w, l0, l1, s->pairs, x + i, state + 4 * i);
    }
    if (fp8 && (l1 % s->block_lines == 0 || l1 == s->lines)) {
      /* end of a scale block: even + odd, scaled into the total */
      /* FP8's f16 route leaves its values x 2^-8; INT8's are exact */
      __m256 sc = _mm256_set1_ps(s->scale[l0 / s->block_lines] * (k == W_I8 || k == W_I8_REG ? 1.0f : 256.0f));
      for (int i = 0; i < mc; i++) {
        __m256 *a = state + 4 * i;
        for (int h = 0; h < 2; h++)
          tot[2 * i + h] = _mm256_fmadd_ps(split ? _mm256_add_ps(a[h], a[h + 2]) : pair_sums(a + 2 * h), sc,
                                           tot[2 * i + h]);
        for (int q = 0; q < 4; q++) a[q] = _mm256_setzero_ps();
      }
    }
  }
  for (int i = 0; i < mc; i++)
    for (int h = 0; h < 2; h++) {
      __m256 r;
      if (fp8) {
        r = tot[2 * i + h];
      } else if (k == W_F32) {
        r = pair_sums(state + 4 * i + 2 * h);
      } else {
        /* BF16's unpacks leave its rows as 0,1,4,5 | 2,3,6,7: hadd puts
         * them in order */
        r = _mm256_hadd_ps(state[4 * i + 2 * h], state[4 * i + 2 * h + 1]);
      }
      _mm256_storeu_ps(out[i] + 8 * h, r);
    }
}

void dsi_gemm_avx2(const dsi_gemm *g, int r0, int r1, void *scratch) {
  const dsi_mat *w = g->w;
  DSI_ASSERT(w->layout == DSI_LAYOUT_TILES && r0 % DSI_TILE_N == 0 && ((uintptr_t)scratch & 31) == 0);
  wkind k = w->dtype == DSI_DTYPE_F32 ? W_F32 : w->dtype == DSI_DTYPE_BF16 ? W_BF16 : w->dtype == DSI_DTYPE_I8 ? W_I8 : W_FP8;
  DSI_ASSERT(k != W_FP8 || (w->dtype == DSI_DTYPE_F8_E4M3 && w->block % 2 == 0));
  DSI_ASSERT(k != W_I8 || w->block % 2 == 0);
  /* NaN bytes made f16 NaNs unless the weights are known to hold none */
  const int nan = !w->nan_free;
  if (k == W_FP8 && g->m >= FP8_WIDEN_M) k = W_FP8_WIDE;
  else if (k == W_I8 && g->m < FP8_WIDEN_M) k = W_I8_REG;
  else if (k == W_FP8 && !nan) k = W_FP8_NN;
  int silu_pairs = g->epi == DSI_EPI_SILU_PAIRS;
  DSI_ASSERT(!silu_pairs || r0 % (2 * DSI_TILE_N) == 0);
  int end = silu_pairs ? r1 : DSI_MIN(r1, w->rows), step = silu_pairs ? 2 * DSI_TILE_N : DSI_TILE_N;
  size_t panel_bytes = (size_t)DSI_TILE_N * w->kpad * dsi_dtype_size(w->dtype);
  /* activation rows every panel of the range takes before the next ones:
   * X_BLOCK_BYTES of them stay in the caches while the panels stream by
   * (all the rows at once read the whole of x again for every panel: 29
   * MB of it at 1024 rows of 7168 columns, from DRAM) */
  const int mblk = DSI_MAX(M_CHUNK, (int)(X_BLOCK_BYTES / ((size_t)w->cols * sizeof(float))) / M_CHUNK * M_CHUNK);
  for (int ib = 0; ib < g->m; ib += mblk) {
    for (int r = r0; r < end; r += step) {
      panel_src src[2];
      for (int pp = 0; pp < step / DSI_TILE_N; pp++) {
        int p = r / DSI_TILE_N + pp;
        src[pp] = (panel_src){
          .w = (const uint8_t *)w->data + (size_t)p * panel_bytes,
          .scale = w->scale ? w->scale + (size_t)p * w->scale_cols : NULL,
          .pairs = w->cols / 2,
          .lines = (w->cols + 1) / 2,
          .block_lines = w->block / 2,
        };
      }
      for (int i0 = ib; i0 < DSI_MIN(g->m, ib + mblk); i0 += M_CHUNK) {
        int mc = DSI_MIN(M_CHUNK, g->m - i0);
        const float *xp[M_CHUNK];
        for (int i = 0; i < mc; i++)
          xp[i] = g->x + (size_t)(g->x_rows ? g->x_rows[i0 + i] : i0 + i) * g->ldx;
        float out[2][M_CHUNK][16];
        for (int pp = 0; pp < step / DSI_TILE_N; pp++) panel(k, nan, &src[pp], mc, xp, scratch, out[pp]);
        int n = DSI_MIN(DSI_TILE_N, end - r);
        for (int i = 0; i < mc; i++) {
          int gi = i0 + i;
          if (g->epi == DSI_EPI_STORE) {
            float *y = g->y + (size_t)gi * g->ldy + r;
            for (int j = 0; j < n; j++) y[j] = out[0][i][j];
          } else if (g->epi == DSI_EPI_SCATTER_ADD) {
            float *y = g->y + (size_t)g->y_rows[gi] * g->ldy + r, sc = g->y_scale[gi];
            for (int j = 0; j < n; j++) y[j] += sc * out[0][i][j];
          } else {
            float *y = g->y + (size_t)gi * g->ldy + r / 2;
            _mm256_storeu_ps(y, silu_mul256(_mm256_loadu_ps(out[0][i]), _mm256_loadu_ps(out[1][i])));
            _mm256_storeu_ps(y + 8, silu_mul256(_mm256_loadu_ps(out[0][i] + 8), _mm256_loadu_ps(out[1][i] + 8)));
          }
        }
      }
    }
  }
}
