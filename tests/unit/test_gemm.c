/* tests: the optimized matmul kernels (gemm.h) against the scalar oracle —
 * F32 / BF16 / FP8 weights packed into TILES, every epilogue, ragged shapes,
 * gathered activations, two row ranges as two threads would split them —
 * and a row's result the same bits whatever call it comes in (a tall
 * call's passes, FP8's panels widened once for them, against short calls'
 * direct and word-order passes). */
#include "kernels/gemm.h"
#include "kernels/cpu.h"
#include "base/base.h"
#include "check.h"
#include "test_isa.h"
#include "gemm_two.h"

#include <stdlib.h>
#include <string.h>

static const int k_rows[] = {16, 48, 80, 200, 7, 576, 1000};
static const int k_cols[] = {32, 64, 96, 100, 128, 1000, 33};
static const int k_ms[] = {1, 2, 3, 4, 7, 8, 9, 16, 17, 33, 70};
static const dsi_dtype k_dtypes[] = {DSI_DTYPE_F32, DSI_DTYPE_BF16, DSI_DTYPE_F8_E4M3};

/* ---- random row-major weights ---- */
typedef struct wmat {
  dsi_mat m;
  void *data;
  float *scale;
} wmat;

static void wmat_make(wmat *w, dsi_dtype t, int rows, int cols, dsi_rng *rng) {
  w->m = (dsi_mat){.dtype = t, .rows = rows, .cols = cols, .layout = DSI_LAYOUT_ROWS};
  size_t n = (size_t)rows * cols;
  w->data = dsi_xmalloc(n * dsi_dtype_size(t) + 1);
  w->scale = NULL;
  if (t == DSI_DTYPE_F8_E4M3) {
    /* the checkpoints' form: e4m3 values times one scale per 128x128 block */
    w->m.block = 128;
    w->m.scale_cols = DSI_CEIL_DIV(cols, 128);
    size_t ns = (size_t)DSI_CEIL_DIV(rows, 128) * w->m.scale_cols;
    w->scale = dsi_xmalloc(ns * sizeof(float));
    for (size_t i = 0; i < ns; i++) w->scale[i] = (0.5f + dsi_rng_uniform(rng)) / 448.0f;
    w->m.scale = w->scale;
  }
  for (size_t i = 0; i < n; i++) {
    float v = dsi_rng_normal(rng);
    switch (t) {
    case DSI_DTYPE_F32: ((float *)w->data)[i] = v; break;
    case DSI_DTYPE_BF16: ((uint16_t *)w->data)[i] = dsi_f32_to_bf16(v); break;
    default: /* magnitudes 2^-11 .. 2^9: subnormals, normals and saturation */
      ((uint8_t *)w->data)[i] = dsi_f32_to_fp8(v * exp2f(dsi_rng_uniform(rng) * 20.0f - 11.0f));
      break;
    }
  }
  w->m.data = w->data;
}

static void wmat_free(wmat *w) {
  free(w->data);
  free(w->scale);
}

/* ---- one case ---- */
typedef struct gcase {
  dsi_dtype t;
  dsi_epilogue epi;
  int rows, cols, m;
  int gather;    /* x_rows set */
  int r1_padded; /* last range ends at the padded row count, not w->rows */
  int nan_free;  /* FP8: the weights marked free of NaN bytes (as loaded checkpoints are; they are) */
} gcase;

static const char *epi_name(dsi_epilogue e) {
  return e == DSI_EPI_STORE ? "store" : e == DSI_EPI_SILU_PAIRS ? "silu" : "scatter";
}

/* max |a - b| / max |b| over n values */
static double norm_err(const float *a, const float *b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)a[i] - b[i]));
    r = fmax(r, fabs((double)b[i]));
  }
  return r > 0 ? d / r : d;
}

static void run_case(const gcase *c, dsi_rng *rng) {
  int silu = c->epi == DSI_EPI_SILU_PAIRS;
  wmat w, up;
  wmat_make(&w, c->t, c->rows, c->cols, rng);
  if (silu) wmat_make(&up, c->t, c->rows, c->cols, rng);

  /* packed: gate/up panel pairs for SILU_PAIRS, plain TILES otherwise */
  dsi_mat pk;
  void *pmem;
  if (silu) {
    pmem = dsi_alloc_aligned(dsi_pack_gate_up_bytes(&w.m));
    dsi_pack_gate_up(&w.m, &up.m, &pk, pmem);
  } else {
    pmem = dsi_alloc_aligned(dsi_pack_bytes(&w.m));
    dsi_pack_describe(&w.m, &pk, pmem);
    dsi_pack_rows(&w.m, &pk, 0, c->rows);
  }
  pk.nan_free = c->nan_free;

  /* x: more rows than m, gathered out of order, the last row of the buffer
   * among them and ending exactly at the end of its allocation */
  int nx = c->gather ? c->m + 3 : c->m, ldx = c->cols + 3;
  size_t xn = (size_t)(nx - 1) * ldx + c->cols;
  float *x = dsi_xmalloc(xn * sizeof(float));
  for (size_t i = 0; i < xn; i++) x[i] = dsi_rng_normal(rng);
  int32_t *x_rows = NULL;
  if (c->gather) {
    x_rows = dsi_xmalloc(c->m * sizeof(int32_t));
    for (int i = 0; i < c->m; i++) x_rows[i] = (int32_t)((i * 7 + 3) % nx);
    x_rows[c->m / 2] = nx - 1;
  }

  /* y: ldy past the outputs, so a write past w->rows shows; SCATTER_ADD
   * writes rows y_rows[i] of a larger buffer that starts random */
  int outs = silu ? pk.rows / 2 : c->rows, ldy = outs + 5;
  int ny = c->epi == DSI_EPI_SCATTER_ADD ? c->m + 2 : c->m;
  size_t yn = (size_t)ny * ldy;
  float *y = dsi_xmalloc(yn * sizeof(float)), *yref = dsi_xmalloc(yn * sizeof(float));
  for (size_t i = 0; i < yn; i++) yref[i] = y[i] = dsi_rng_normal(rng);
  float *y0 = dsi_xmalloc(yn * sizeof(float));
  memcpy(y0, y, yn * sizeof(float));
  int32_t *y_rows = dsi_xmalloc(c->m * sizeof(int32_t));
  float *y_scale = dsi_xmalloc(c->m * sizeof(float));
  for (int i = 0; i < c->m; i++) {
    y_rows[i] = (int32_t)((c->m - 1 - i + 2) % ny);
    y_scale[i] = dsi_rng_uniform(rng);
  }

  /* the oracle on the row-major weights; for SILU_PAIRS gate and up apart,
   * then silu(gate) * up (padding rows give silu(0) * 0 = 0) */
  void *scr = dsi_alloc_aligned(DSI_GEMM_SCRATCH(c->cols));
  dsi_gemm gr = {.w = &w.m, .x = x, .ldx = ldx, .x_rows = x_rows, .m = c->m, .y = yref, .ldy = ldy,
                 .epi = c->epi, .y_rows = y_rows, .y_scale = y_scale};
  if (silu) {
    float *gy = dsi_xcalloc((size_t)c->m * outs, sizeof(float)), *uy = dsi_xcalloc((size_t)c->m * outs, sizeof(float));
    gr.epi = DSI_EPI_STORE;
    gr.ldy = outs;
    gr.y = gy;
    dsi_gemm_ref(&gr, 0, c->rows, scr);
    gr.w = &up.m;
    gr.y = uy;
    dsi_gemm_ref(&gr, 0, c->rows, scr);
    for (int i = 0; i < c->m; i++)
      for (int j = 0; j < outs; j++) {
        float gv = gy[(size_t)i * outs + j];
        yref[(size_t)i * ldy + j] = gv / (1.0f + expf(-gv)) * uy[(size_t)i * outs + j];
      }
    free(gy);
    free(uy);
  } else {
    dsi_gemm_ref(&gr, 0, c->rows, scr);
  }

  /* the kernel on the packed weights, in two ranges as two threads */
  int align = silu ? 32 : DSI_TILE_N;
  int end = silu || c->r1_padded ? (int)DSI_CEIL_DIV(pk.rows, align) * align : pk.rows;
  int split = pk.rows / 2 / align * align;
  dsi_gemm g = {.w = &pk, .x = x, .ldx = ldx, .x_rows = x_rows, .m = c->m, .y = y, .ldy = ldy,
                .epi = c->epi, .y_rows = y_rows, .y_scale = y_scale};
  dsi_gemm_avx512(&g, split, end, scr);
  dsi_gemm_avx512(&g, 0, split, scr);

  double e = norm_err(y, yref, yn);
  CHECKF(e <= 1e-5, "%s %s rows %d cols %d m %d gather %d: normalized error %.3g", dsi_dtype_st_name(c->t),
         epi_name(c->epi), c->rows, c->cols, c->m, c->gather, e);

  /* on rows staged for the call (dsi_gemm_pairs_stage): the same bits */
  int intact;
  float *ys = dsi_xmalloc(yn * sizeof(float));
  memcpy(ys, y0, yn * sizeof(float));
  g.y = ys;
  g.xf = pairs_staged(&g, &intact);
  dsi_gemm_avx512(&g, split, end, scr);
  dsi_gemm_avx512(&g, 0, split, scr);
  CHECKF(intact && !memcmp(y, ys, yn * sizeof(float)), "%s %s rows %d cols %d m %d: staged rows give other bits (or staging wrote past DSI_XF_FLOATS: %d)",
         dsi_dtype_st_name(c->t), epi_name(c->epi), c->rows, c->cols, c->m, !intact);
  dsi_free_aligned((void *)g.xf);
  g.xf = NULL;
  CHECKF(pairs_round_same(&g, test_kern()->vec), "%s rows %d cols %d m %d: rows rounded as they are staged differ from rows rounded first",
         dsi_dtype_st_name(c->t), c->rows, c->cols, c->m);
  free(ys);
  free(y0);

  dsi_free_aligned(scr);
  free(x);
  free(x_rows);
  free(y);
  free(yref);
  free(y_rows);
  free(y_scale);
  dsi_free_aligned(pmem);
  wmat_free(&w);
  if (silu) wmat_free(&up);
}

#ifdef DSI_HAVE_AVX512
/* y = x W^T for rows [i0, i0 + m) of x, alone in a call */
static void rows_call(const dsi_mat *pk, const float *x, int ldx, int i0, int m, float *y, int ldy, void *scr) {
  dsi_gemm g = {.w = pk, .x = x + (size_t)i0 * ldx, .ldx = ldx, .m = m, .y = y + (size_t)i0 * ldy, .ldy = ldy,
                .epi = DSI_EPI_STORE};
  dsi_gemm_avx512(&g, 0, pk->rows, scr);
}

/* 70 rows in one call against the same rows cut into calls of 1 to 12 */
static void run_rows_invariance(dsi_dtype t, int rows, int cols, int nan_free, dsi_rng *rng) {
  static const int cuts[] = {1, 5, 12, 8, 3, 12, 9, 2, 7, 11};
  const int m = 70, ldx = cols + 1, ldy = rows + 3;
  wmat w;
  wmat_make(&w, t, rows, cols, rng);
  void *pmem = dsi_alloc_aligned(dsi_pack_bytes(&w.m));
  dsi_mat pk;
  dsi_pack_describe(&w.m, &pk, pmem);
  dsi_pack_rows(&w.m, &pk, 0, rows);
  pk.nan_free = nan_free;
  float *x = dsi_xmalloc((size_t)m * ldx * sizeof(float));
  for (size_t i = 0; i < (size_t)m * ldx; i++) x[i] = dsi_rng_normal(rng);
  float *tall = dsi_xcalloc((size_t)m * ldy, sizeof(float)), *cut = dsi_xcalloc((size_t)m * ldy, sizeof(float));
  void *scr = dsi_alloc_aligned(DSI_GEMM_SCRATCH(cols));
  rows_call(&pk, x, ldx, 0, m, tall, ldy, scr);
  for (int i0 = 0, c = 0; i0 < m; c++) {
    int n = DSI_MIN(cuts[c % DSI_ARRAY_LEN(cuts)], m - i0);
    rows_call(&pk, x, ldx, i0, n, cut, ldy, scr);
    i0 += n;
  }
  int bad = -1;
  for (int i = 0; i < m && bad < 0; i++)
    if (memcmp(tall + (size_t)i * ldy, cut + (size_t)i * ldy, (size_t)rows * sizeof(float))) bad = i;
  CHECKF(bad < 0, "%s rows %d cols %d: row %d of a %d-row call differs from the same row in a short call",
         dsi_dtype_st_name(t), rows, cols, bad, m);
  dsi_free_aligned(scr);
  free(x);
  free(tall);
  free(cut);
  dsi_free_aligned(pmem);
  wmat_free(&w);
}
#endif

int main(void) {
  dsi_dtype_init();
  const dsi_kern *k = test_kern();
#ifdef DSI_HAVE_AVX512
  if (k->level < DSI_ISA_AVX512) {
    printf("avx512 gemm: skipped (kernel level %s)\n", dsi_isa_str(k->level));
    return check_done();
  }
  dsi_rng rng;
  dsi_rng_seed(&rng, 20240611);
  int nm = (int)DSI_ARRAY_LEN(k_ms), n = 0;
  for (size_t ti = 0; ti < DSI_ARRAY_LEN(k_dtypes); ti++)
    for (int e = DSI_EPI_STORE; e <= DSI_EPI_SCATTER_ADD; e++)
      for (size_t ri = 0; ri < DSI_ARRAY_LEN(k_rows); ri++)
        for (size_t ci = 0; ci < DSI_ARRAY_LEN(k_cols); ci++) {
          /* every m on the small shapes; a rotating pair of them on the
           * large ones, so each m still meets every dtype and epilogue */
          int big = k_rows[ri] * k_cols[ci] > 64 * 1000;
          for (int mi = 0; mi < nm; mi++) {
            if (big && mi != (int)(ri + ci) % nm && mi != (int)(ri + ci + 5) % nm) continue;
            gcase c = {.t = k_dtypes[ti], .epi = (dsi_epilogue)e, .rows = k_rows[ri], .cols = k_cols[ci],
                       .m = k_ms[mi], .gather = (n & 1), .r1_padded = (n & 2) != 0, .nan_free = (n & 4) != 0};
            run_case(&c, &rng);
            n++;
          }
        }
  for (size_t ti = 0; ti < DSI_ARRAY_LEN(k_dtypes); ti++) {
    run_rows_invariance(k_dtypes[ti], 48, 1000, 0, &rng);
    run_rows_invariance(k_dtypes[ti], 200, 260, 1, &rng);
    run_rows_invariance(k_dtypes[ti], 32, 16500, 0, &rng); /* FP8: too wide to widen a panel in the scratch */
  }
  printf("avx512 gemm: %d cases, row invariance of %zu dtypes\n", n, DSI_ARRAY_LEN(k_dtypes));
#else
  (void)k;
  printf("avx512 gemm: skipped (not built for x86-64)\n");
#endif
  return check_done();
}
