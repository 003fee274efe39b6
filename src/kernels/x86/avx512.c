/* kernels: the AVX-512 matmuls of the gemm.h contract on TILES weights (F32,
 * BF16, FP8 e4m3 and INT8 with per-panel block scales; and, where
 * AVX512-BF16 runs, BF16 and FP8 by bf16 dot products), for decode and small batches:
 * each 16-row panel is streamed once per pass and widened in registers, so
 * the kernel runs at memory bandwidth, not at the FMA ports' rate. */
#include "kernels/gemm.h"
#include "base/base.h"
#include "kernels/x86/avx512_math.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Activation rows of one pass, most rows of x a pass holds in registers:
 * BF16 and FP8 two chains a row (side by side up to MB_SHORT rows, in
 * turns in a taller pass), F32 two (the pair layout below), INT8 a block
 * partial of two and a sum. Each kernel does the same operations
 * for a row whatever the pass height, so a row's result does not depend
 * on the batch it came in (test_gemm checks each row of a tall call
 * against short calls). */
#define MB_BF16 16
#define MB_F32 12
#define MB_FP8 16
#define MB_I8 14     /* up to MB_I8_REGS rows the totals in registers */
#define MB_I8_REGS 8
#define MB_SHORT 8 /* BF16, FP8: up to this many rows, both chains side by side */
#define MB_MAX 16
/* Rows of x staged at once; more make more passes over the weights. */
#define GROUP 64
/* Bytes of W prefetched ahead of the line being read: more than DRAM
 * latency times bandwidth, and a page ahead, which starts the L2 streamer
 * (it stops at 4 KiB pages) on the next page before the loads get there.
 * Into L2 (T1): a prefetch into L1 holds one of its few fill buffers for
 * the whole DRAM latency, and the loop stalls on them. Overridable at
 * build time to compare distances and hints (docs/perf-notes.md). */
#ifndef PF_AHEAD
#define PF_AHEAD 4096
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T1
#endif

/* ---- staging activations ----
 * A pass reads x as pairs: for line kk (columns 2kk, 2kk+1) the pairs of
 * its mb rows lie next to each other, xs[(kk * mb + i) * 2 + {0, 1}], so one
 * pointer serves every row and the broadcasts are plain loads. The copy
 * zero-pads an odd last column, so W's padding meets zeros and x is never
 * read past w->cols. */
static const float *x_row(const dsi_gemm *g, int i) {
  return g->x + (size_t)(g->x_rows ? g->x_rows[i] : i) * g->ldx;
}

/* rnd: the values rounded to bf16 on the way, bitwise as
 * dsi_rows_round_bf16 rounds them (the vector primitives' integer
 * rounding to nearest even, kept in f32) */
ALWAYS_INLINE __m512d round_pairs(__m512d v, int rnd) {
  if (!rnd) return v;
  const __m512i u = _mm512_castpd_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i up = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
  return _mm512_castsi512_pd(_mm512_and_si512(up, _mm512_set1_epi32((int)0xffff0000u)));
}

/* a pair (two floats) copied, rounded as round_pairs rounds */
static inline void stage_pair(float *d, const float *s, int rnd) {
  uint32_t u[2];
  memcpy(u, s, sizeof u);
  for (int t = 0; t < 2 && rnd; t++) u[t] = (u[t] + 0x7fffu + ((u[t] >> 16) & 1)) & 0xffff0000u;
  memcpy(d, u, sizeof u);
}

/* pairs kk0 .. kk0 + 7 of the 8 rows xr[0 .. 7] into those lines' slots
 * of the rows (line kk at xs + 2 mb kk): an 8 x 8 transpose of 64-bit
 * pairs, moved as they are (no arithmetic but rnd's rounding) */
ALWAYS_INLINE void stage_8x8(const float *const *xr, int kk0, int mb, int rnd, float *xs) {
  __m512d r[8], t[8], u[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) r[i] = _mm512_loadu_pd((const double *)(xr[i] + 2 * kk0));
  /* t[2h]: rows 2h, 2h+1 at pairs 0, 2, 4, 6; t[2h+1]: at 1, 3, 5, 7 */
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) t[i] = _mm512_unpacklo_pd(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_pd(r[i], r[i + 1]);
  /* u[c + 4h]: rows 4h .. 4h+3 at pair c, then at pair c + 4 */
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
#pragma GCC unroll 2
  for (int h = 0; h < 8; h += 4) {
    u[h] = _mm512_permutex2var_pd(t[h], lo, t[h + 2]);
    u[h + 1] = _mm512_permutex2var_pd(t[h + 1], lo, t[h + 3]);
    u[h + 2] = _mm512_permutex2var_pd(t[h], hi, t[h + 2]);
    u[h + 3] = _mm512_permutex2var_pd(t[h + 1], hi, t[h + 3]);
  }
  const __m512i a = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11), b = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    _mm512_storeu_pd(xs + (size_t)(kk0 + c) * 2 * mb, round_pairs(_mm512_permutex2var_pd(u[c], a, u[c + 4]), rnd));
    _mm512_storeu_pd(xs + (size_t)(kk0 + c + 4) * 2 * mb, round_pairs(_mm512_permutex2var_pd(u[c], b, u[c + 4]), rnd));
  }
}

/* rows [ia, ib) of the pass of mb rows from row i0 (x's rows i0 + ia ..),
 * rounded to bf16 when rnd */
static void stage_x(const dsi_gemm *g, int i0, int mb, int ia, int ib, int cols, int rnd, float *xs) {
  int nl = (cols + 1) / 2, full = cols / 2;
  const float *xr[MB_MAX];
  for (int i = ia; i < ib; i++) xr[i] = x_row(g, i0 + i);
  if (mb == 1 && !rnd) {
    memcpy(xs, xr[0], (size_t)full * 2 * sizeof(float));
  } else { /* 8 rows x 8 pairs at a time, then what is left a pair at a time */
    const int i8 = ia + (ib - ia) / 8 * 8, k8 = full / 8 * 8;
    for (int kk = 0; kk < k8; kk += 8) {
      for (int i = ia; i < i8; i += 8) stage_8x8(xr + i, kk, mb, rnd, xs + (size_t)i * 2);
      for (int c = kk; c < kk + 8; c++)
        for (int i = i8; i < ib; i++) stage_pair(xs + ((size_t)c * mb + i) * 2, xr[i] + 2 * c, rnd);
    }
    for (int kk = k8; kk < full; kk++)
      for (int i = ia; i < ib; i++) stage_pair(xs + ((size_t)kk * mb + i) * 2, xr[i] + 2 * kk, rnd);
  }
  if (full < nl)
    for (int i = ia; i < ib; i++) {
      const float last[2] = {xr[i][cols - 1], 0.0f};
      stage_pair(xs + ((size_t)full * mb + i) * 2, last, rnd);
    }
}

/* The passes of a group of n rows (at most GROUP), at most mbmax rows
 * each: nearly equal heights; their first rows in pass_i0[0 .. npass]. */
static int passes(int n, int mbmax, int *pass_i0) {
  int npass = DSI_CEIL_DIV(n, mbmax);
  for (int q = 0; q <= npass; q++) pass_i0[q] = (int)((int64_t)n * q / npass);
  return npass;
}

/* the f32 route's pass height for weights of dtype dt */
int dsi_gemm_pairs_height(dsi_dtype dt) {
  return dt == DSI_DTYPE_BF16 ? MB_BF16 : dt == DSI_DTYPE_F32 ? MB_F32 : dt == DSI_DTYPE_I8 ? MB_I8 : MB_FP8;
}

/* All of a call's rows staged as gemm_run's groups and passes read them
 * on the f32 route: group ig's rows at xf + 2 nl ig, within it pass q's at
 * + 2 nl pass_i0[q]. */
void dsi_gemm_pairs_stage(const dsi_gemm *g, int s0, int s1, int round_bf16, float *xf) {
  const int cols = g->w->cols, mbmax = dsi_gemm_pairs_height(g->w->dtype);
  const size_t nl = ((size_t)cols + 1) / 2;
  int pass_i0[GROUP + 1];
  for (int ig = s0 / GROUP * GROUP; ig < s1; ig += GROUP) {
    const int npass = passes(DSI_MIN(GROUP, g->m - ig), mbmax, pass_i0);
    for (int q = 0; q < npass; q++) {
      const int i0 = ig + pass_i0[q], mb = pass_i0[q + 1] - pass_i0[q];
      const int ia = DSI_MAX(s0, i0) - i0, ib = DSI_MIN(s1, i0 + mb) - i0;
      if (ia < ib) stage_x(g, i0, mb, ia, ib, cols, round_bf16, xf + (size_t)i0 * 2 * nl);
    }
  }
}

ALWAYS_INLINE __m512 bcast_pair(const float *p) {
  int64_t v;
  memcpy(&v, p, 8);
  return _mm512_castsi512_ps(_mm512_set1_epi64(v));
}

/* Pair layout (F32): lo = rows 0-7, hi = rows 8-15, each as
 * (row k0, row k1) pairs; the row sums are the even plus the odd lanes. */
ALWAYS_INLINE __m512 fold_pairs(__m512 lo, __m512 hi) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return _mm512_add_ps(_mm512_permutex2var_ps(lo, even, hi), _mm512_permutex2var_ps(lo, odd, hi));
}

/* ---- one pass over a panel: out[i * 16 + j] = sum_k x_i[k] W[16p + j, k] ---- */

/* BF16: a 64-byte line is 16 rows x (k even in the low half of each dword,
 * k odd in the high half); shifting / masking gives the two f32 vectors.
 * Each row's sum runs in two chains, which take the panel's lines in turns
 * of BF16_RUN (chain 0 lines 0-31, chain 1 lines 32-63, chain 0 64-95,
 * ...), added at the end. A pass of up to MB_SHORT rows runs both side by
 * side (two FMA latency chains a row; its two streams 2 KB apart move on
 * together, each prefetching PF_AHEAD on: its own next turn). A taller one
 * (16 rows would need 32 accumulators) sweeps the panel once, keeping the
 * chain whose turn it is in registers and the other's in out or a buffer.
 * The same operations in the same order for every row, whatever the pass
 * height. */
#define BF16_RUN 32
_Static_assert(PF_AHEAD == 2 * BF16_RUN * 64, "a chain's prefetch lands in its own next turn");

ALWAYS_INLINE void bf16_widen(const uint8_t *p, __m512 *we, __m512 *wo) {
  const __m512i v = _mm512_loadu_si512(p);
  *we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  *wo = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}

ALWAYS_INLINE void bf16_line(const uint8_t *wp, int kk, const float *xs, int MB, __m512 *acc) {
  const float *xk = xs + (size_t)kk * 2 * MB;
  __m512 we, wo;
  _mm_prefetch((const char *)wp + (size_t)kk * 64 + PF_AHEAD, PF_HINT);
  bf16_widen(wp + (size_t)kk * 64, &we, &wo);
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) {
    acc[i] = _mm512_fmadd_ps(we, _mm512_set1_ps(xk[2 * i]), acc[i]);
    acc[i] = _mm512_fmadd_ps(wo, _mm512_set1_ps(xk[2 * i + 1]), acc[i]);
  }
}

ALWAYS_INLINE void bf16_pass(const uint8_t *wp, int nl, const float *xs, int MB, float *out) {
  __m512 a[MB_BF16], b[MB_SHORT];
  if (MB > MB_SHORT) {
    float odd[MB_BF16 * 16] __attribute__((aligned(64))); /* chain 1 between its turns (chain 0: out) */
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) {
      _mm512_storeu_ps(out + 16 * i, _mm512_setzero_ps());
      _mm512_store_ps(odd + 16 * i, _mm512_setzero_ps());
    }
    for (int c0 = 0; c0 < nl; c0 += BF16_RUN) {
      float *sum = (c0 / BF16_RUN) & 1 ? odd : out;
#pragma GCC unroll 16
      for (int i = 0; i < MB; i++) a[i] = _mm512_loadu_ps(sum + 16 * i);
      for (int kk = c0; kk < DSI_MIN(c0 + BF16_RUN, nl); kk++) bf16_line(wp, kk, xs, MB, a);
#pragma GCC unroll 16
      for (int i = 0; i < MB; i++) _mm512_storeu_ps(sum + 16 * i, a[i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++)
      _mm512_storeu_ps(out + 16 * i, _mm512_add_ps(_mm512_loadu_ps(out + 16 * i), _mm512_load_ps(odd + 16 * i)));
    return;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) a[i] = b[i] = _mm512_setzero_ps();
  for (int c0 = 0; c0 < nl; c0 += 2 * BF16_RUN) {
    /* a turn of each chain: chain 1's is chain 0's length or shorter */
    const int na = DSI_MIN(BF16_RUN, nl - c0), nb = DSI_MAX(0, DSI_MIN(BF16_RUN, nl - c0 - BF16_RUN));
    int t = 0;
    for (; t < nb; t++) {
      const int ka = c0 + t, kb = ka + BF16_RUN;
      const float *xa = xs + (size_t)ka * 2 * MB, *xb = xs + (size_t)kb * 2 * MB;
      _mm_prefetch((const char *)wp + (size_t)ka * 64 + PF_AHEAD, PF_HINT);
      _mm_prefetch((const char *)wp + (size_t)kb * 64 + PF_AHEAD, PF_HINT);
      __m512 ea, oa, eb, ob;
      bf16_widen(wp + (size_t)ka * 64, &ea, &oa);
      bf16_widen(wp + (size_t)kb * 64, &eb, &ob);
#pragma GCC unroll 8
      for (int i = 0; i < MB; i++) {
        a[i] = _mm512_fmadd_ps(ea, _mm512_set1_ps(xa[2 * i]), a[i]);
        b[i] = _mm512_fmadd_ps(eb, _mm512_set1_ps(xb[2 * i]), b[i]);
        a[i] = _mm512_fmadd_ps(oa, _mm512_set1_ps(xa[2 * i + 1]), a[i]);
        b[i] = _mm512_fmadd_ps(ob, _mm512_set1_ps(xb[2 * i + 1]), b[i]);
      }
    }
    for (; t < na; t++) bf16_line(wp, c0 + t, xs, MB, a);
  }
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) _mm512_storeu_ps(out + 16 * i, _mm512_add_ps(a[i], b[i]));
}

/* F32: a line is 128 bytes, 16 rows x 2 columns in the pair layout; one
 * 64-bit broadcast of (x[k], x[k+1]) serves both halves. */
ALWAYS_INLINE void f32_pass(const float *wp, int nl, const float *xs, int MB, float *out) {
  __m512 lo[MB_F32], hi[MB_F32];
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) lo[i] = hi[i] = _mm512_setzero_ps();
  for (int kk = 0; kk < nl; kk++, wp += 32, xs += 2 * MB) {
    _mm_prefetch((const char *)wp + PF_AHEAD, PF_HINT);
    _mm_prefetch((const char *)wp + PF_AHEAD + 64, PF_HINT);
    __m512 wl = _mm512_loadu_ps(wp), wh = _mm512_loadu_ps(wp + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) {
      __m512 xp = bcast_pair(xs + 2 * i);
      lo[i] = _mm512_fmadd_ps(wl, xp, lo[i]);
      hi[i] = _mm512_fmadd_ps(wh, xp, hi[i]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) _mm512_storeu_ps(out + 16 * i, fold_pairs(lo[i], hi[i]));
}

/* FP8: a line is 32 bytes, 16 rows x 2 columns. Each block of lb lines (one
 * scale per panel and block) is summed apart, then added in times its scale
 * (x 2^8: the f16 words below are the values x 2^-8). */
/* E4M3FN's NaN (magnitude 0x7f) comes out of the shifts as 0x3f80 (480 x
 * 2^-8): made an f16 NaN (0x7f80), as the scalar table has it. */
ALWAYS_INLINE __m512i fp8_f16_nan(__m512i h) {
  __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(0x3f80));
  return _mm512_mask_mov_epi16(h, nan, _mm512_or_si512(h, _mm512_set1_epi16(0x7c00)));
}

/* FP8, word order: two 32-byte lines side by side are 32 words, each the
 * (even column, odd column) pair of one row. The odd byte becomes an f16
 * word by an arithmetic shift right (sign stays in bit 15, the 7 magnitude
 * bits land in f16's exponent/mantissa place, value x 2^-8 exactly for
 * normals and subnormals), the even byte by a shift left first; a mask
 * clears the sign copy in bit 14 and the other byte's bits. The two f16
 * vectors go to a small buffer and are widened from memory (vcvtph2ps
 * m256), which spares the lane-crossing extract of the upper halves: per
 * 64 bytes, 5 shift/mask uops and 4 conversions, where sign-extending
 * each line spends 2 sign extensions, 4 shift/mask, 2 extracts and 4
 * conversions — shuffle-port uops that on 2 cores were the limit, not
 * memory. The four f32 vectors are the two lines' even and odd columns,
 * rows 0-15 in order, so a row's sum needs no fold.
 * Each scale block's sum runs in two chains a row, its first half of
 * lines and the rest, then adds times the block's scale to the row's
 * total: a pass of up to MB_SHORT rows runs the two side by side (two
 * lines of each half per 64-byte word vector, 2 registers a row), a
 * taller one one after the other (over the panel widened once where the group takes
 * several passes, fp8_widen_panel): the same operations whatever the pass
 * height. */
/* nan: 0 when the weights hold no NaN byte (dsi_mat.nan_free, as the
 * loader finds a checkpoint's): the fix-up is 8 of a word vector's 21
 * uops on the FMA ports, which at one row bound the pass on this CPU */
ALWAYS_INLINE void fp8_f16_words(__m512i v, int nan, uint16_t *buf) {
  const __m512i mask = _mm512_set1_epi16((short)0xbf80);
  __m512i od = _mm512_and_si512(_mm512_srai_epi16(v, 1), mask);
  __m512i ev = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(v, 8), 1), mask);
  if (nan) od = fp8_f16_nan(od), ev = fp8_f16_nan(ev);
  _mm512_store_si512(buf, ev);
  _mm512_store_si512(buf + 32, od);
}

/* vcvtph2ps from memory; asm so the compiler cannot turn it back into a
 * register extract */
ALWAYS_INLINE __m512 cvtph_mem(const uint16_t *p) {
  __m512 r;
  __asm__("vcvtph2ps %1, %0" : "=v"(r) : "m"(*(const __m256i *)p));
  return r;
}

/* the 16 rows' columns of line pa (ea, oa: even, odd) and of line pb */
ALWAYS_INLINE void fp8_two(const uint8_t *pa, const uint8_t *pb, uint16_t *buf, __m512 *ea, __m512 *oa, __m512 *eb,
                           __m512 *ob) {
  const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)pa)),
                                       _mm256_loadu_si256((const __m256i *)pb), 1);
  fp8_f16_words(v, 1, buf);
  *ea = cvtph_mem(buf), *eb = cvtph_mem(buf + 16);
  *oa = cvtph_mem(buf + 32), *ob = cvtph_mem(buf + 48);
}

/* rows' chains acc over lines kk and kk + 1 (w: their 64 bytes), or line
 * kk alone (one: its 32 bytes and the next line's are read; a panel holds
 * a multiple of 16 lines, so after an odd count of lines comes padding) */
ALWAYS_INLINE void fp8_fma_lines(const uint8_t *w, int one, int nan, uint16_t *buf, const float *xk, int MB,
                                 __m512 *acc) {
  __m512 e0, o0, e1, o1;
  fp8_f16_words(_mm512_loadu_si512(w), nan, buf);
  e0 = cvtph_mem(buf), o0 = cvtph_mem(buf + 32);
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) {
    acc[i] = _mm512_fmadd_ps(e0, _mm512_set1_ps(xk[2 * i]), acc[i]);
    acc[i] = _mm512_fmadd_ps(o0, _mm512_set1_ps(xk[2 * i + 1]), acc[i]);
  }
  if (one) return;
  e1 = cvtph_mem(buf + 16), o1 = cvtph_mem(buf + 48);
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) {
    acc[i] = _mm512_fmadd_ps(e1, _mm512_set1_ps(xk[2 * MB + 2 * i]), acc[i]);
    acc[i] = _mm512_fmadd_ps(o1, _mm512_set1_ps(xk[2 * MB + 2 * i + 1]), acc[i]);
  }
}

/* up to MB_SHORT rows: a block's two chains side by side, two lines of
 * each at a time (one 64-byte word vector each), the totals in out */
ALWAYS_INLINE void fp8_pass_short(const uint8_t *wp, int nan, int nl, int lb, const float *sc, const float *xs, int MB,
                                  float *out) {
  uint16_t ba[64] __attribute__((aligned(64))), bb[64] __attribute__((aligned(64)));
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) _mm512_storeu_ps(out + 16 * i, _mm512_setzero_ps());
  for (int l0 = 0; l0 < nl; l0 += lb, sc++) {
    const int l1 = DSI_MIN(l0 + lb, nl), h = (l1 - l0) / 2, hb = l0 + h;
    __m512 a[MB_SHORT], b[MB_SHORT];
#pragma GCC unroll 8
    for (int i = 0; i < MB; i++) a[i] = b[i] = _mm512_setzero_ps();
    int j = 0;
    for (; j + 2 <= h; j += 2) {
      const uint8_t *pa = wp + (size_t)(l0 + j) * 32, *pb = wp + (size_t)(hb + j) * 32;
      _mm_prefetch((const char *)pa + PF_AHEAD, PF_HINT);
      _mm_prefetch((const char *)pb + PF_AHEAD, PF_HINT);
      fp8_fma_lines(pa, 0, nan, ba, xs + (size_t)(l0 + j) * 2 * MB, MB, a);
      fp8_fma_lines(pb, 0, nan, bb, xs + (size_t)(hb + j) * 2 * MB, MB, b);
    }
    /* the halves' last lines: one of the first (h odd), one or two of the second */
    if (j < h) fp8_fma_lines(wp + (size_t)(l0 + j) * 32, 1, nan, ba, xs + (size_t)(l0 + j) * 2 * MB, MB, a);
    for (int kk = hb + j; kk < l1; kk += 2)
      fp8_fma_lines(wp + (size_t)kk * 32, kk + 1 == l1, nan, bb, xs + (size_t)kk * 2 * MB, MB, b);
    const __m512 s = _mm512_set1_ps(*sc * 256.0f);
#pragma GCC unroll 8
    for (int i = 0; i < MB; i++)
      _mm512_storeu_ps(out + 16 * i, _mm512_fmadd_ps(_mm512_add_ps(a[i], b[i]), s, _mm512_loadu_ps(out + 16 * i)));
  }
}

/* one chain, lines [k0, k1), for each row of a tall pass: from the panel
 * widened (wide: line kk's even columns at wide + 32 kk, its odd ones 16
 * floats on) or, without it, from its bytes */
ALWAYS_INLINE void fp8_chain(const uint8_t *wp, const float *wide, int k0, int k1, const float *xs, int MB, __m512 *acc) {
  uint16_t buf[64] __attribute__((aligned(64)));
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) acc[i] = _mm512_setzero_ps();
  for (int kk = k0; kk < k1;) {
    const float *xk = xs + (size_t)kk * 2 * MB;
    __m512 e, o, e2, o2;
    int two = 0;
    if (wide) {
      e = _mm512_load_ps(wide + (size_t)kk * 32), o = _mm512_load_ps(wide + (size_t)kk * 32 + 16);
    } else { /* lines kk and kk + 1 widened together, the second used where it is the chain's */
      const uint8_t *p = wp + (size_t)kk * 32;
      if (!(kk & 1)) _mm_prefetch((const char *)p + PF_AHEAD, PF_HINT);
      fp8_two(p, p + 32, buf, &e, &o, &e2, &o2);
      two = kk + 1 < k1;
    }
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) {
      acc[i] = _mm512_fmadd_ps(e, _mm512_set1_ps(xk[2 * i]), acc[i]);
      acc[i] = _mm512_fmadd_ps(o, _mm512_set1_ps(xk[2 * i + 1]), acc[i]);
    }
    if (two)
#pragma GCC unroll 16
      for (int i = 0; i < MB; i++) {
        acc[i] = _mm512_fmadd_ps(e2, _mm512_set1_ps(xk[2 * MB + 2 * i]), acc[i]);
        acc[i] = _mm512_fmadd_ps(o2, _mm512_set1_ps(xk[2 * MB + 2 * i + 1]), acc[i]);
      }
    kk += 1 + two;
  }
}

/* more than MB_SHORT rows: per scale block the two chains one after the
 * other, then the block's sum times its scale onto the totals in out */
ALWAYS_INLINE void fp8_pass_tall(const uint8_t *wp, const float *wide, int nl, int lb, const float *sc, const float *xs,
                                 int MB, float *out) {
  __m512 acc[MB_FP8];
  float first[MB_FP8 * 16] __attribute__((aligned(64)));
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) _mm512_storeu_ps(out + 16 * i, _mm512_setzero_ps());
  for (int l0 = 0; l0 < nl; l0 += lb, sc++) {
    const int l1 = DSI_MIN(l0 + lb, nl), h = (l1 - l0) / 2;
    fp8_chain(wp, wide, l0, l0 + h, xs, MB, acc);
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) _mm512_store_ps(first + 16 * i, acc[i]);
    fp8_chain(wp, wide, l0 + h, l1, xs, MB, acc);
    const __m512 s = _mm512_set1_ps(*sc * 256.0f);
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++)
      _mm512_storeu_ps(out + 16 * i, _mm512_fmadd_ps(_mm512_add_ps(_mm512_load_ps(first + 16 * i), acc[i]), s,
                                                     _mm512_loadu_ps(out + 16 * i)));
  }
}

/* ---- INT8 (weights quantized at load) ----
 * A line is 32 bytes, 16 rows x 2 columns, as FP8: each half widens
 * exactly (vpmovsxbd, vcvtdq2ps) into the pair layout. A 128-column block
 * (lb lines) has one scale per panel, so its sum is kept apart in lo / hi
 * and added in times the scale; up to MB_I8_REGS rows the totals stay in
 * registers (three a row), taller passes keep them in out (loaded and
 * stored once a block), leaving two registers a row. Half of BF16's
 * bytes per weight. */

ALWAYS_INLINE void i8_widen(const uint8_t *p, __m512 *lo, __m512 *hi) {
  *lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
  *hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 16))));
}

ALWAYS_INLINE void i8_pass(const uint8_t *wp, int nl, int lb, const float *sc, const float *xs, int MB, float *out) {
  const int regs = MB <= MB_I8_REGS;
  __m512 acc[MB_I8_REGS];
#pragma GCC unroll 8
  for (int i = 0; i < MB && regs; i++) acc[i] = _mm512_setzero_ps();
  for (int l0 = 0; l0 < nl; l0 += lb) {
    const int l1 = DSI_MIN(l0 + lb, nl);
    __m512 lo[MB_I8], hi[MB_I8];
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) lo[i] = hi[i] = _mm512_setzero_ps();
    const uint8_t *p = wp + (size_t)l0 * 32;
    const float *xk = xs + (size_t)l0 * 2 * MB;
    for (int kk = l0; kk < l1; kk++, p += 32, xk += 2 * MB) {
      if (!(kk & 1)) _mm_prefetch((const char *)p + PF_AHEAD, PF_HINT);
      __m512 wl, wh;
      i8_widen(p, &wl, &wh);
#pragma GCC unroll 16
      for (int i = 0; i < MB; i++) {
        __m512 xp = bcast_pair(xk + 2 * i);
        lo[i] = _mm512_fmadd_ps(wl, xp, lo[i]);
        hi[i] = _mm512_fmadd_ps(wh, xp, hi[i]);
      }
    }
    const __m512 s = _mm512_set1_ps(sc[l0 / lb]);
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) {
      if (regs) {
        acc[i] = _mm512_fmadd_ps(fold_pairs(lo[i], hi[i]), s, acc[i]);
        continue;
      }
      /* the first block: fma onto zero, as the totals in registers */
      const __m512 t = l0 ? _mm512_loadu_ps(out + 16 * i) : _mm512_setzero_ps();
      _mm512_storeu_ps(out + 16 * i, _mm512_fmadd_ps(fold_pairs(lo[i], hi[i]), s, t));
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MB && regs; i++) _mm512_storeu_ps(out + 16 * i, acc[i]);
}

/* One function per pass height, so every accumulator is a register. */
#define CASES_8(F) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8)
#define CASES_12(F) CASES_8(F) F(9) F(10) F(11) F(12)
#define CASES_16(F) CASES_12(F) F(13) F(14) F(15) F(16)

static void bf16_pass_n(const uint8_t *wp, int nl, const float *xs, int mb, float *out) {
  switch (mb) {
#define F(n) case n: bf16_pass(wp, nl, xs, n, out); break;
    CASES_16(F)
#undef F
  default: DSI_ASSERT(0);
  }
}

static void f32_pass_n(const float *wp, int nl, const float *xs, int mb, float *out) {
  switch (mb) {
#define F(n) case n: f32_pass(wp, nl, xs, n, out); break;
    CASES_12(F)
#undef F
  default: DSI_ASSERT(0);
  }
}

/* FP8, wide: the panel widened (fp8_widen_panel) or NULL, for tall
 * passes; nan: the short passes' NaN fix-up (fp8_f16_words) */
static void fp8_pass_n(const uint8_t *wp, const float *wide, int nan, int nl, int lb, const float *sc, const float *xs,
                       int mb, float *out) {
  if (mb <= MB_SHORT && nan) switch (mb) {
#define F(n) case n: fp8_pass_short(wp, 1, nl, lb, sc, xs, n, out); return;
      CASES_8(F)
#undef F
    }
  else if (mb <= MB_SHORT) switch (mb) {
#define F(n) case n: fp8_pass_short(wp, 0, nl, lb, sc, xs, n, out); return;
      CASES_8(F)
#undef F
    }
  else if (wide) switch (mb) {
#define F(n) case n: fp8_pass_tall(wp, wide, nl, lb, sc, xs, n, out); return;
      F(9) F(10) F(11) F(12) F(13) F(14) F(15) F(16)
#undef F
    }
  else switch (mb) {
#define F(n) case n: fp8_pass_tall(wp, NULL, nl, lb, sc, xs, n, out); return;
      F(9) F(10) F(11) F(12) F(13) F(14) F(15) F(16)
#undef F
    }
  DSI_ASSERT(0);
}

/* ---- prefill: FP8 panels widened once ----
 * With more than one pass over a group, a panel's lines are widened once
 * into f32 lines in the scratch (line kk's even columns, then its odd
 * ones), and the tall passes load them: 2 loads a line where each pass
 * spent 5 shift/mask uops and 4 conversions a line pair widening it.
 * The same values and operations: bitwise the passes that widen. On an Emerald Rapids
 * Xeon without AMX (2 threads): expert_up 1.31x at 64 rows, 1.46x at 256;
 * FP8 prefill 1.16-1.35x. INT8's passes (then 8 rows, 16 FMAs a line)
 * measured slower reading f32 lines from L2 than widening their 32 bytes. */
static void fp8_widen_panel(const uint8_t *wp, int nl, float *wide) {
  uint16_t buf[64] __attribute__((aligned(64)));
  for (int kk = 0; kk < nl; kk += 2) {
    const uint8_t *p = wp + (size_t)kk * 32;
    __m512 e0, o0, e1, o1;
    _mm_prefetch((const char *)p + PF_AHEAD, PF_HINT);
    fp8_two(p, p + 32, buf, &e0, &o0, &e1, &o1);
    _mm512_store_ps(wide + (size_t)kk * 32, e0);
    _mm512_store_ps(wide + (size_t)kk * 32 + 16, o0);
    if (kk + 1 < nl) { /* an odd last line: the next 32 bytes are padding, not stored */
      _mm512_store_ps(wide + (size_t)kk * 32 + 32, e1);
      _mm512_store_ps(wide + (size_t)kk * 32 + 48, o1);
    }
  }
}

static void i8_pass_n(const uint8_t *wp, int nl, int lb, const float *sc, const float *xs, int mb, float *out) {
  switch (mb) {
#define F(n) case n: i8_pass(wp, nl, lb, sc, xs, n, out); break;
    CASES_12(F) F(13) F(14)
#undef F
  default: DSI_ASSERT(0);
  }
}

/* ---- bf16 activations: AVX512-BF16 dot products ----
 * A BF16 line is vdpbf16ps's operand as it stands: dword j is row j's
 * (column 2kk, column 2kk + 1). With x's pair for the line rounded to bf16
 * and broadcast, one instruction adds both products to row i's 16 sums in
 * f32: half the multiply-add instructions of the f32 route and no
 * widening, so the compute-bound shapes (prefill, batches) run about twice
 * as fast; decode stays at the memory bandwidth. FP8 lines widen to
 * bf16(fp8 * scale) by the AMX kernel's tables (fp8_lut.h), a table per
 * 128-column block, so an FP8 weight gives bitwise what its BF16 twin
 * gives and a row needs one accumulator. One accumulator a row and one
 * chain over K whatever the pass height: a row's result does not depend on
 * the batch it came in. The staged rows are bf16 pairs, one dword per line
 * and row, rows next to each other (xs[kk * mb + i]). */
#define MB_DP 16

/* these functions also use VBMI, which the AVX-512 level does not imply */
#define DP_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,avx512vbmi")))
#define FP8_LUT_TARGET DP_TARGET
#include "kernels/x86/fp8_lut.h"

/* one row x rounded to bf16 (to nearest even, as vcvtne2ps2bf16 rounds),
 * as pairs, pair kk at dst[kk * mb]; an odd last column pairs with zero */
DP_TARGET static void stage_row_dp(const float *x, int cols, int mb, uint32_t *dst) {
  uint32_t row[16];
  for (int c0 = 0; c0 < cols; c0 += 32, dst += (size_t)16 * mb) {
    int n = DSI_MIN(32, cols - c0), np = (n + 1) / 2;
    __mmask16 m0 = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
    __mmask16 m1 = (__mmask16)(n >= 32 ? 0xffff : n > 16 ? (1u << (n - 16)) - 1 : 0);
    __m512 lo = _mm512_maskz_loadu_ps(m0, x + c0), hi = _mm512_maskz_loadu_ps(m1, x + c0 + 16);
    __m512i b = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    if (mb == 1) {
      _mm512_mask_storeu_epi32(dst, (__mmask16)((1u << np) - 1), b);
      continue;
    }
    _mm512_storeu_si512(row, b);
    for (int t = 0; t < np; t++) dst[(size_t)t * mb] = row[t];
  }
}

/* rows i0 .. i0 + mb - 1 of x, one pass's, staged: xs[kk * mb + i] */
DP_TARGET static void stage_x_dp(const dsi_gemm *g, int i0, int mb, int cols, uint32_t *xs) {
  for (int i = 0; i < mb; i++) stage_row_dp(x_row(g, i0 + i), cols, mb, xs + i);
}

/* All of a call's rows staged as gemm_run's groups and passes read them:
 * group ig's rows at xd + ig nl, within it pass q's at + pass_i0[q] nl. */
DP_TARGET void dsi_gemm_dp_stage(const dsi_gemm *g, int s0, int s1, uint32_t *xd) {
  const size_t nl = ((size_t)g->w->cols + 1) / 2;
  int pass_i0[GROUP / MB_DP + 2];
  for (int r = s0; r < s1;) {
    const int ig = r / GROUP * GROUP, n = DSI_MIN(GROUP, g->m - ig), npass = passes(n, MB_DP, pass_i0);
    for (int q = 0; q < npass && r < s1; q++) {
      const int i0 = pass_i0[q], mb = pass_i0[q + 1] - i0;
      uint32_t *xs = xd + (size_t)(ig + i0) * nl;
      for (; r < s1 && r - ig < i0 + mb; r++)
        if (r - ig >= i0) stage_row_dp(x_row(g, r), g->w->cols, mb, xs + (r - ig - i0));
    }
  }
}

DP_TARGET ALWAYS_INLINE void dp_bf16_pass(const uint8_t *wp, int nl, const uint32_t *xs, int MB, float *out) {
  __m512 acc[MB_DP];
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) acc[i] = _mm512_setzero_ps();
  for (int kk = 0; kk < nl; kk++, wp += 64, xs += MB) {
    _mm_prefetch((const char *)wp + PF_AHEAD, PF_HINT);
    const __m512bh v = (__m512bh)_mm512_loadu_si512(wp);
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) acc[i] = _mm512_dpbf16_ps(acc[i], v, (__m512bh)_mm512_set1_epi32((int)xs[i]));
  }
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) _mm512_storeu_ps(out + 16 * i, acc[i]);
}

/* FP8: lines of 32 bytes, two at a time through the block's table */
DP_TARGET ALWAYS_INLINE void dp_fp8_pass(const uint8_t *wp, int nl, int lb, const float *sc, const uint32_t *xs, int MB,
                               float *out) {
  __m512 acc[MB_DP];
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) acc[i] = _mm512_setzero_ps();
  for (int l0 = 0; l0 < nl; l0 += lb, sc++) {
    const int l1 = DSI_MIN(l0 + lb, nl);
    const fp8_lut t = fp8_lut_make(*sc);
    int kk = l0;
    for (; kk < l1; kk += 2) {
      const uint8_t *p = wp + (size_t)kk * 32;
      const uint32_t *xk = xs + (size_t)kk * MB;
      _mm_prefetch((const char *)p + PF_AHEAD, PF_HINT);
      /* an odd last line: the next 32 bytes are not this panel's */
      const int two = kk + 1 < l1;
      __m512i w0, w1;
      fp8_lut_64r(&t, two ? _mm512_loadu_si512(p) : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                  &w0, &w1);
#pragma GCC unroll 16
      for (int i = 0; i < MB; i++) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)w0, (__m512bh)_mm512_set1_epi32((int)xk[i]));
      if (two)
#pragma GCC unroll 16
        for (int i = 0; i < MB; i++)
          acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)w1, (__m512bh)_mm512_set1_epi32((int)xk[MB + i]));
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) _mm512_storeu_ps(out + 16 * i, acc[i]);
}

/* An FP8 panel's nl lines widened once to bf16(fp8 * scale) lines, the
 * BF16 layout, into buf (nl * 64 bytes, 64-aligned): the passes of a tall
 * group then read bf16 (dp_bf16_pass) instead of each widening the panel
 * again. The same words the FP8 pass widens to, added in the same order:
 * bitwise what dp_fp8_pass gives. */
DP_TARGET static void dp_widen_panel(const uint8_t *wp, int nl, int lb, const float *sc, uint16_t *buf) {
  for (int l0 = 0; l0 < nl; l0 += lb, sc++) {
    const int l1 = DSI_MIN(l0 + lb, nl);
    const fp8_lut t = fp8_lut_make(*sc);
    for (int kk = l0; kk < l1; kk += 2) {
      const uint8_t *p = wp + (size_t)kk * 32;
      __m512i w0, w1;
      if (kk + 1 < l1) {
        fp8_lut_64r(&t, _mm512_loadu_si512(p), &w0, &w1);
        _mm512_store_si512((__m512i *)(buf + (size_t)(kk + 1) * 32), w1);
      } else { /* an odd last line: the next 32 bytes are not this block's */
        fp8_lut_64r(&t, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)), &w0, &w1);
      }
      _mm512_store_si512((__m512i *)(buf + (size_t)kk * 32), w0);
    }
  }
}

DP_TARGET static void dp_bf16_n(const uint8_t *wp, int nl, const uint32_t *xs, int mb, float *out) {
  switch (mb) {
#define F(n) case n: dp_bf16_pass(wp, nl, xs, n, out); return;
    CASES_16(F)
#undef F
  }
  DSI_ASSERT(0);
}

DP_TARGET static void dp_pass_n(const dsi_mat *w, const uint8_t *wp, int nl, const float *sc, const uint32_t *xs, int mb,
                      float *out) {
  if (w->dtype == DSI_DTYPE_BF16) switch (mb) {
#define F(n) case n: dp_bf16_pass(wp, nl, xs, n, out); return;
      CASES_16(F)
#undef F
    }
  else switch (mb) {
#define F(n) case n: dp_fp8_pass(wp, nl, w->block / 2, sc, xs, n, out); return;
      CASES_16(F)
#undef F
    }
  DSI_ASSERT(0);
}

/* ---- driver: row groups -> panels -> passes -> epilogue ---- */
typedef struct plan {
  const dsi_gemm *g;
  int dp;             /* bf16 activations, AVX512-BF16 passes */
  int nl;             /* lines of a panel that hold columns < cols */
  int mbmax;          /* rows of x per pass */
  int n, npass;       /* rows of x in this group, and passes over them */
  int pass_i0[GROUP + 1];
  const float *xs;    /* staged rows of the group, pass after pass (dp: bf16 pairs) */
  uint16_t *wide;     /* dp, FP8, more than one pass: a panel widened to bf16 (dp_widen_panel) */
  float *widef;       /* not dp, FP8, more than one pass: a panel widened to f32 (fp8_widen_panel) */
} plan;

/* acc(i, 16p + j) for the group's rows into t[i * 16 + j] */
static void panel_run(const plan *pl, int p, float *t) {
  const dsi_mat *w = pl->g->w;
  size_t panel_elems = (size_t)w->kpad * DSI_TILE_N;
  const uint8_t *wp = (const uint8_t *)w->data + panel_elems * dsi_dtype_size(w->dtype) * p;
  const float *sc = w->scale ? w->scale + (size_t)p * w->scale_cols : NULL; /* FP8, INT8 */
  if (pl->dp && pl->wide && w->dtype == DSI_DTYPE_F8_E4M3 && pl->npass > 1) {
    dp_widen_panel(wp, pl->nl, w->block / 2, sc, pl->wide);
    for (int q = 0; q < pl->npass; q++) {
      int i0 = pl->pass_i0[q];
      dp_bf16_n((const uint8_t *)pl->wide, pl->nl, (const uint32_t *)pl->xs + (size_t)i0 * pl->nl,
                pl->pass_i0[q + 1] - i0, t + (size_t)i0 * DSI_TILE_N);
    }
    return;
  }
  if (pl->widef && pl->npass > 1) {
    fp8_widen_panel(wp, pl->nl, pl->widef);
    for (int q = 0; q < pl->npass; q++) {
      const int i0 = pl->pass_i0[q];
      fp8_pass_n(wp, pl->widef, !w->nan_free, pl->nl, w->block / 2, sc, pl->xs + (size_t)i0 * 2 * pl->nl,
                 pl->pass_i0[q + 1] - i0, t + (size_t)i0 * DSI_TILE_N);
    }
    return;
  }
  for (int q = 0; q < pl->npass; q++) {
    int i0 = pl->pass_i0[q], mb = pl->pass_i0[q + 1] - i0;
    const float *xs = pl->xs + (size_t)i0 * 2 * pl->nl;
    float *out = t + (size_t)i0 * DSI_TILE_N;
    if (pl->dp) dp_pass_n(w, wp, pl->nl, sc, (const uint32_t *)pl->xs + (size_t)i0 * pl->nl, mb, out);
    else if (w->dtype == DSI_DTYPE_BF16) bf16_pass_n(wp, pl->nl, xs, mb, out);
    else if (w->dtype == DSI_DTYPE_F32) f32_pass_n((const float *)wp, pl->nl, xs, mb, out);
    else if (w->dtype == DSI_DTYPE_I8) i8_pass_n(wp, pl->nl, w->block / 2, sc, xs, mb, out);
    else fp8_pass_n(wp, NULL, !w->nan_free, pl->nl, w->block / 2, sc, xs, mb, out);
  }
}

static void gemm_run(const dsi_gemm *g, int r0, int r1, void *scratch, int dp) {
  const dsi_mat *w = g->w;
  DSI_ASSERT(w->layout == DSI_LAYOUT_TILES);
  DSI_ASSERT(w->dtype == DSI_DTYPE_F32 || w->dtype == DSI_DTYPE_BF16 || w->dtype == DSI_DTYPE_F8_E4M3 ||
             w->dtype == DSI_DTYPE_I8);
  DSI_ASSERT(!dp || w->dtype == DSI_DTYPE_BF16 || w->dtype == DSI_DTYPE_F8_E4M3);
  DSI_ASSERT(!w->scale || (w->block % 2 == 0 && w->block > 0));
  DSI_ASSERT(r0 % DSI_TILE_N == 0);
  int silu_pairs = g->epi == DSI_EPI_SILU_PAIRS;
  if (silu_pairs) DSI_ASSERT(r0 % 32 == 0 && (r1 - r0) % 32 == 0);
  int rows_out = silu_pairs ? r1 : DSI_MIN(r1, w->rows);
  if (g->m <= 0 || rows_out <= r0) return;

  plan pl = {.g = g, .dp = dp, .nl = (w->cols + 1) / 2, .mbmax = dp ? MB_DP : dsi_gemm_pairs_height(w->dtype)};

  /* scratch, DSI_GEMM_SCRATCH(cols) = (cols + 64) * 64 floats, holds GROUP
   * rows of x: two result tiles ([GROUP][16] each) and the staged rows
   * ([GROUP][2 nl], 2 nl <= cols + 1) */
  const int gmax = GROUP;
  float *ta = scratch, *tb = ta + (size_t)gmax * DSI_TILE_N;
  float *xs_own = tb + (size_t)gmax * DSI_TILE_N;
  /* the widened panel in the scratch's last MiB (the AMX kernel's C blocks; unused here) */
  if (dp && w->dtype == DSI_DTYPE_F8_E4M3 && (size_t)pl.nl * 64 <= ((size_t)1 << 20))
    pl.wide = (uint16_t *)((uint8_t *)scratch + (size_t)(w->cols + 64) * 64 * 4);
  /* or, not dp, FP8's f32 lines (64 bytes a column) */
  if (!dp && w->dtype == DSI_DTYPE_F8_E4M3 && (size_t)pl.nl * 128 <= ((size_t)1 << 20))
    pl.widef = (float *)((uint8_t *)scratch + (size_t)(w->cols + 64) * 64 * 4);
  /* for the call: dsi_gemm_dp_stage, dsi_gemm_pairs_stage */
  const int staged = dp ? g->xd != NULL : g->xf != NULL;

  for (int ig = 0; ig < g->m; ig += gmax) {
    /* the group's rows in passes of nearly equal height */
    pl.n = DSI_MIN(gmax, g->m - ig);
    pl.npass = passes(pl.n, pl.mbmax, pl.pass_i0);
    pl.xs = !staged ? xs_own : dp ? (const float *)(g->xd + (size_t)ig * pl.nl) : g->xf + (size_t)ig * 2 * pl.nl;
    for (int q = 0; q < pl.npass && !staged; q++) {
      const int i0 = pl.pass_i0[q], mb = pl.pass_i0[q + 1] - i0;
      if (dp) stage_x_dp(g, ig + i0, mb, w->cols, (uint32_t *)xs_own + (size_t)i0 * pl.nl);
      else stage_x(g, ig + i0, mb, 0, mb, w->cols, 0, xs_own + (size_t)i0 * 2 * pl.nl);
    }

    if (silu_pairs) {
      for (int r = r0; r < r1; r += 32) {
        panel_run(&pl, r / DSI_TILE_N, ta);
        panel_run(&pl, r / DSI_TILE_N + 1, tb);
        for (int i = 0; i < pl.n; i++)
          _mm512_storeu_ps(g->y + (size_t)(ig + i) * g->ldy + r / 2,
                           silu_mul512(_mm512_loadu_ps(ta + i * DSI_TILE_N), _mm512_loadu_ps(tb + i * DSI_TILE_N)));
      }
      continue;
    }
    for (int r = r0; r < rows_out; r += DSI_TILE_N) {
      panel_run(&pl, r / DSI_TILE_N, ta);
      int nj = DSI_MIN(DSI_TILE_N, rows_out - r);
      const __mmask16 mj = (__mmask16)((1u << nj) - 1); /* a vector store: memcpy of 64 bytes became rep movsq */
      for (int i = 0; i < pl.n; i++) {
        const __m512 t = _mm512_loadu_ps(ta + i * DSI_TILE_N);
        if (g->epi == DSI_EPI_STORE) {
          _mm512_mask_storeu_ps(g->y + (size_t)(ig + i) * g->ldy + r, mj, t);
        } else {
          float *y = g->y + (size_t)g->y_rows[ig + i] * g->ldy + r;
          const __m512 s = _mm512_set1_ps(g->y_scale[ig + i]);
          _mm_prefetch((const char *)(y + DSI_TILE_N), _MM_HINT_T0); /* the next panel's, as avx512_iq.h */
          _mm512_mask_storeu_ps(y, mj, _mm512_fmadd_ps(s, t, _mm512_maskz_loadu_ps(mj, y)));
        }
      }
    }
  }
}

void dsi_gemm_avx512(const dsi_gemm *g, int r0, int r1, void *scratch) { gemm_run(g, r0, r1, scratch, 0); }
void dsi_gemm_avx512_bf16(const dsi_gemm *g, int r0, int r1, void *scratch) { gemm_run(g, r0, r1, scratch, 1); }
