/* kernels: the AMX BF16 matmul (the gemm.h contract) for TILES weights in
 * BF16 or FP8 — prefill and large batches. Owns the tile configuration, the
 * cache blocking, FP8 -> BF16 tile widening and the fused epilogues. Each
 * call configures the tiles and releases them when done, so no tile state
 * outlives a call and pool threads need no set-up of their own. */
#include "kernels/gemm.h"
#include "kernels/cpu.h"
#include "base/base.h"

#include <immintrin.h>
#include <string.h>

/* Tile registers: C (f32 16x16) for M-half i and panel j is tile 2i+j; A
 * (bf16 16x32 from xb) for M-half i is 4+i; B (bf16 VNNI 16x32 from one
 * panel) for panel j is 6+j. Every tile is 16 rows of 64 bytes. The tile
 * intrinsics paste their number into asm, so these must be literals. */
#define T_C00 0
#define T_C01 1
#define T_C10 2
#define T_C11 3
#define T_A0 4
#define T_A1 5
#define T_B0 6
#define T_B1 7

#define KSTEP_BYTES 1024 /* one 16x32 bf16 B tile: one K step of a panel */
/* Blocking, chosen by measurement on this project's 2-core Sapphire Rapids
 * machines (L1 48 KiB, L2 2 MiB per core); see the driver's comment */
#define KC_STEPS 16 /* K chunk: a pair's B chunk is 32 KiB and stays in L1 */
#define KC_WHOLE 64 /* up to this many K steps (K <= 2048), no K chunks */
#define MC_ROWS 256 /* M chunk: B reuse against the L2 footprint */
#define MAX_GROUP 8 /* panel pairs sharing one pass over an A chunk */

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

/* GCC 12's _tile_loadconfig claims to read 8 bytes, so -O3 may drop the
 * stores that fill the rest: load it with an asm whose operand is all 64. */
static void tiles_configure(void) {
  _Alignas(64) tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(*(const struct { char b[64]; } *)&cfg));
}

/* ---- inner kernel: nm x nn C tiles over ks K steps ---- */
/* a: 16 or 32 rows of bf16 activations, row stride lda bytes; b0/b1: the K
 * steps of two panels, 1 KiB apart. nm, nn are constants after inlining. */
static inline __attribute__((always_inline)) void tiles_mac(const uint8_t *a, size_t lda, const uint8_t *b0,
                                                            const uint8_t *b1, int ks, int nm, int nn) {
  const uint8_t *a1 = a + 16 * lda;
  for (int s = 0; s < ks; s++) {
    _tile_loadd(T_B0, b0 + (size_t)s * KSTEP_BYTES, 64);
    _tile_loadd(T_A0, a + (size_t)s * 64, lda);
    _tile_dpbf16ps(T_C00, T_A0, T_B0);
    if (nm == 2) {
      _tile_loadd(T_A1, a1 + (size_t)s * 64, lda);
      _tile_dpbf16ps(T_C10, T_A1, T_B0);
    }
    if (nn == 2) {
      _tile_loadd(T_B1, b1 + (size_t)s * KSTEP_BYTES, 64);
      _tile_dpbf16ps(T_C01, T_A0, T_B1);
      if (nm == 2) _tile_dpbf16ps(T_C11, T_A1, T_B1);
    }
  }
}

/* A C block in memory is [32][32] f32 with row stride ld floats: tile
 * (i, j) at c + 16 i ld + 16 j. C starts from zero (first K chunk) or from
 * acc and ends in acc, the staging block, or y itself. */
static inline __attribute__((always_inline)) void tiles_begin(const float *acc, int nm, int nn) {
  if (!acc) {
    _tile_zero(T_C00);
    if (nn == 2) _tile_zero(T_C01);
    if (nm == 2) _tile_zero(T_C10);
    if (nm == 2 && nn == 2) _tile_zero(T_C11);
    return;
  }
  _tile_loadd(T_C00, acc, 128);
  if (nn == 2) _tile_loadd(T_C01, acc + 16, 128);
  if (nm == 2) _tile_loadd(T_C10, acc + 512, 128);
  if (nm == 2 && nn == 2) _tile_loadd(T_C11, acc + 528, 128);
}

static inline __attribute__((always_inline)) void tiles_end(float *out, size_t ld, int nm, int nn) {
  _tile_stored(T_C00, out, ld * 4);
  if (nn == 2) _tile_stored(T_C01, out + 16, ld * 4);
  if (nm == 2) _tile_stored(T_C10, out + 16 * ld, ld * 4);
  if (nm == 2 && nn == 2) _tile_stored(T_C11, out + 16 * ld + 16, ld * 4);
}

static void block_mac(const uint8_t *a, size_t lda, const uint8_t *b0, const uint8_t *b1, int ks, int nm, int nn,
                      const float *acc_in, float *out, size_t ldo) {
  /* the four shapes as separate loops, so tile numbers stay constants */
  if (nm == 2 && nn == 2) {
    tiles_begin(acc_in, 2, 2);
    tiles_mac(a, lda, b0, b1, ks, 2, 2);
    tiles_end(out, ldo, 2, 2);
  } else if (nm == 2) {
    tiles_begin(acc_in, 2, 1);
    tiles_mac(a, lda, b0, b1, ks, 2, 1);
    tiles_end(out, ldo, 2, 1);
  } else if (nn == 2) {
    tiles_begin(acc_in, 1, 2);
    tiles_mac(a, lda, b0, b1, ks, 1, 2);
    tiles_end(out, ldo, 1, 2);
  } else {
    tiles_begin(acc_in, 1, 1);
    tiles_mac(a, lda, b0, b1, ks, 1, 1);
    tiles_end(out, ldo, 1, 1);
  }
}

/* ---- FP8 -> BF16 B tiles ---- */
/* ks K steps of one FP8 panel (512 bytes each) to bf16 (1 KiB each), the
 * tile's scale folded in: bf16(fp8 * scale). e4m3 -> f16 is a bit move,
 * ((b & 0x7f) << 7) | sign << 15, exact for normals and subnormals, and
 * worth fp8 * 2^-8; vcvtph2ps then widens exactly, and the one rounding
 * is of fp8 * scale to bf16 (relative 2^-9). */
static void fp8_steps_to_bf16(const uint8_t *src, const float *scale, int step0, int spb, int ks, uint16_t *dst) {
  const __m512i keep = _mm512_set1_epi16((short)0xbfff);
  for (int s = 0; s < ks; s++) {
    int st = step0 + s;
    __m512 f = _mm512_set1_ps(scale[st / spb] * 256.0f);
    const uint8_t *in = src + (size_t)st * 512;
    uint16_t *out = dst + (size_t)s * 512;
    for (int j = 0; j < 16; j++) {
      /* sign-extending puts 1s above the sign; << 7 leaves one at bit 14 */
      __m512i h = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(in + j * 32)));
      h = _mm512_and_si512(_mm512_slli_epi16(h, 7), keep);
      __m512 lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), f);
      __m512 hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), f);
      _mm512_store_si512((__m512i *)(out + j * 32), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

/* ---- epilogues ---- */
/* e^x, 1-2 ulp (Cephes' expf polynomial), saturating to 0 / inf */
static inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-104.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

/* c: one C block [32][32] (row stride 32); rows i0 + [0, nrows) of the
 * product; panel0 the first W panel, nn panels in c */
static void epilogue(const dsi_gemm *g, const float *c, int i0, int nrows, int panel0, int nn) {
  const dsi_mat *w = g->w;
  if (g->epi == DSI_EPI_SILU_PAIRS) {
    float *y = g->y + (size_t)(panel0 / 2) * DSI_TILE_N;
    for (int r = 0; r < nrows; r++) {
      __m512 gt = _mm512_load_ps(c + r * 32), up = _mm512_load_ps(c + r * 32 + 16);
      __m512 s = _mm512_div_ps(gt, _mm512_add_ps(_mm512_set1_ps(1.0f), exp512(_mm512_sub_ps(_mm512_setzero_ps(), gt))));
      _mm512_storeu_ps(y + (size_t)(i0 + r) * g->ldy, _mm512_mul_ps(s, up));
    }
    return;
  }
  for (int j = 0; j < nn; j++) {
    int col0 = (panel0 + j) * DSI_TILE_N, ncols = DSI_MIN(DSI_TILE_N, w->rows - col0);
    __mmask16 mask = (__mmask16)((1u << ncols) - 1);
    for (int r = 0; r < nrows; r++) {
      __m512 v = _mm512_load_ps(c + r * 32 + j * 16);
      int i = i0 + r;
      if (g->epi == DSI_EPI_STORE) {
        _mm512_mask_storeu_ps(g->y + (size_t)i * g->ldy + col0, mask, v);
      } else {
        float *y = g->y + (size_t)g->y_rows[i] * g->ldy + col0;
        __m512 o = _mm512_maskz_loadu_ps(mask, y);
        _mm512_mask_storeu_ps(y, mask, _mm512_fmadd_ps(_mm512_set1_ps(g->y_scale[i]), v, o));
      }
    }
  }
}

/* ---- the driver ---- */

/* Loops: M chunk > group of panel pairs > K chunk > pair > 32-row M block.
 * A pair's chunk of B (for FP8, widened into scratch once per M chunk) stays
 * in L1 while every M block of the M chunk passes over it; the A chunk (mc
 * rows x kc steps, 256 KiB) stays in L2 while the group's pairs pass over
 * it, so A is read from beyond L2 once per group and B once per M chunk.
 * The group's C blocks wait in scratch between K chunks (a tile store and
 * load per block and chunk: why chunks are not shorter). Measured on this
 * machine: software prefetch of the next B chunk or A chunk, staging B
 * through scratch, and longer K chunks with B from L2 were all slower. */
void dsi_gemm_amx(const dsi_gemm *g, int r0, int r1, void *scratch) {
  const dsi_mat *w = g->w;
  DSI_ASSERT(w->layout == DSI_LAYOUT_TILES && g->xb);
  DSI_ASSERT(w->dtype == DSI_DTYPE_BF16 || w->dtype == DSI_DTYPE_F8_E4M3);
  DSI_ASSERT(dsi_cpu_get()->amx_bf16);
  if (r1 > w->rows) r1 = w->rows;
  if (r1 <= r0 || g->m <= 0) return;
  const int fp8 = w->dtype == DSI_DTYPE_F8_E4M3;
  /* K steps cover the columns in use: a view may use fewer columns than
   * the layout's kpad (attention's V^T over a shorter context) */
  const int kpad = w->kpad, ksteps = DSI_CEIL_DIV(w->cols, DSI_TILE_K), m = g->m;
  const int p0 = r0 / DSI_TILE_N, p1 = DSI_CEIL_DIV(r1, DSI_TILE_N);
  const size_t lda = (size_t)kpad * 2, es = fp8 ? 1 : 2;
  const size_t panel_bytes = (size_t)DSI_TILE_N * kpad * es;
  int spb = 0; /* K steps per FP8 scale block */
  if (fp8) {
    DSI_ASSERT(w->block % DSI_TILE_K == 0);
    spb = w->block / DSI_TILE_K;
  }
  if (g->epi == DSI_EPI_SILU_PAIRS) DSI_ASSERT(p0 % 2 == 0 && (p1 - p0) % 2 == 0);

  /* scratch: C staging, the zero-padded last M block, FP8 B, C between K chunks */
  const size_t budget = DSI_GEMM_SCRATCH(w->cols);
  uint8_t *sp = scratch;
  float *cst = (float *)sp;
  sp += 4096;
  const int mtail = m % 32, mfull = m - mtail;
  uint8_t *atail = NULL;
  if (mtail) {
    atail = sp;
    int rows = mtail > 16 ? 32 : 16;
    memcpy(atail, g->xb + (size_t)mfull * kpad, (size_t)mtail * lda);
    memset(atail + (size_t)mtail * lda, 0, (size_t)(rows - mtail) * lda);
    sp += (size_t)rows * lda;
  }

  int kc = ksteps;
  if (ksteps > KC_WHOLE) { /* equal chunks of about KC_STEPS */
    int nk = DSI_CEIL_DIV(ksteps, KC_STEPS);
    kc = DSI_CEIL_DIV(ksteps, nk);
  }
  uint16_t *bw = NULL;
  if (fp8) {
    bw = (uint16_t *)sp;
    sp += (size_t)2 * kc * KSTEP_BYTES;
  }
  size_t used = (size_t)(sp - (uint8_t *)scratch);
  DSI_ASSERT(used <= budget);
  int mc = DSI_MIN(DSI_CEIL_DIV(m, 32) * 32, MC_ROWS), grp = MAX_GROUP;
  float *acc = NULL;
  if (kc < ksteps) {
    size_t room = (budget - used) / 4096; /* C blocks of 4 KiB */
    while ((size_t)grp * (mc / 32) > room && grp > 1) grp /= 2;
    while ((size_t)grp * (mc / 32) > room) mc -= 32;
    DSI_ASSERT(mc >= 32);
    acc = (float *)sp;
  } else {
    grp = 1;
  }

  const int direct = g->epi == DSI_EPI_STORE;
  tiles_configure();
  for (int i0 = 0; i0 < m; i0 += mc) {
    const int mcn = DSI_MIN(mc, m - i0), nmb = DSI_CEIL_DIV(mcn, 32);
    for (int q0 = p0; q0 < p1; q0 += 2 * grp) {
      const int q1 = DSI_MIN(p1, q0 + 2 * grp);
      for (int k0 = 0; k0 < ksteps; k0 += kc) {
        const int ks = DSI_MIN(kc, ksteps - k0), first = k0 == 0, last = k0 + ks >= ksteps;
        for (int q = q0; q < q1; q += 2) {
          const int nn = DSI_MIN(2, q1 - q);
          const uint8_t *b0, *b1;
          if (fp8) {
            const uint8_t *src = (const uint8_t *)w->data + (size_t)q * panel_bytes;
            const float *sc = w->scale + (size_t)q * w->scale_cols;
            fp8_steps_to_bf16(src, sc, k0, spb, ks, bw);
            if (nn == 2) fp8_steps_to_bf16(src + panel_bytes, sc + w->scale_cols, k0, spb, ks, bw + (size_t)ks * 512);
            b0 = (const uint8_t *)bw;
            b1 = b0 + (size_t)ks * KSTEP_BYTES;
          } else {
            b0 = (const uint8_t *)w->data + (size_t)q * panel_bytes + (size_t)k0 * KSTEP_BYTES;
            b1 = b0 + panel_bytes;
          }
          float *qacc = acc ? acc + (size_t)((q - q0) / 2) * nmb * 1024 : NULL;
          for (int mb = 0; mb < nmb; mb++) {
            const int ib = i0 + mb * 32, nrows = DSI_MIN(32, m - ib), nm = nrows > 16 ? 2 : 1;
            const uint8_t *a = ib >= mfull ? atail : (const uint8_t *)(g->xb + (size_t)ib * kpad);
            a += (size_t)k0 * 64;
            float *bacc = qacc ? qacc + (size_t)mb * 1024 : NULL;
            if (!last) {
              block_mac(a, lda, b0, b1, ks, nm, nn, first ? NULL : bacc, bacc, 32);
            } else if (direct && nrows == 32 && nn == 2 && (q + 2) * DSI_TILE_N <= w->rows) {
              /* a whole block of a plain store: tiles straight into y */
              float *y = g->y + (size_t)ib * g->ldy + (size_t)q * DSI_TILE_N;
              block_mac(a, lda, b0, b1, ks, nm, nn, first ? NULL : bacc, y, (size_t)g->ldy);
            } else {
              block_mac(a, lda, b0, b1, ks, nm, nn, first ? NULL : bacc, cst, 32);
              epilogue(g, cst, ib, nrows, q, nn);
            }
          }
        }
      }
    }
  }
  _tile_release();
}
