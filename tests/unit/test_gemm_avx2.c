/* tests: the AVX2 matmul (kernels/x86/avx2.c) against the scalar oracle run
 * on the row-major originals — F32, BF16 and FP8, every epilogue, ragged
 * shapes, gathered activations, scattered outputs, two row ranges, rows
 * wide enough to be taken in blocks — and
 * every e4m3 code widened exactly; INT8 (quantized as at load) against the
 * oracle on the same INT8 matrices, and against the AVX-512 INT8 kernel
 * (which sums in the same order) where this CPU has it. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "check.h"
#include "test_isa.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"

#if DSI_HAVE_AVX2

/* a random row-major matrix; FP8 with a random scale per 128x128 block */
static dsi_mat random_rows(dsi_dtype dt, int rows, int cols, dsi_rng *r) {
  dsi_mat m = {.dtype = dt, .rows = rows, .cols = cols, .layout = DSI_LAYOUT_ROWS};
  size_t n = (size_t)rows * cols;
  void *data = dsi_xmalloc(n * dsi_dtype_size(dt));
  for (size_t i = 0; i < n; i++) {
    float v = dsi_rng_normal(r);
    if (dt == DSI_DTYPE_F32) ((float *)data)[i] = v;
    else if (dt == DSI_DTYPE_BF16) ((uint16_t *)data)[i] = dsi_f32_to_bf16(v);
    else ((uint8_t *)data)[i] = dsi_f32_to_fp8(v * 100); /* some saturate, a few are subnormal */
  }
  m.data = data;
  if (dt == DSI_DTYPE_F8_E4M3) {
    m.block = 128;
    m.scale_cols = DSI_CEIL_DIV(cols, 128);
    size_t ns = (size_t)DSI_CEIL_DIV(rows, 128) * m.scale_cols;
    float *sc = dsi_xmalloc(ns * sizeof(float));
    for (size_t i = 0; i < ns; i++) sc[i] = 1e-3f * (0.25f + 4 * dsi_rng_uniform(r));
    m.scale = sc;
  }
  return m;
}

static void free_rows(dsi_mat *m) {
  free((void *)m->data);
  free((void *)m->scale);
}

static void *pack(const dsi_mat *src, dsi_mat *dst) {
  void *mem = dsi_alloc_aligned(dsi_pack_bytes(src));
  dsi_pack_describe(src, dst, mem);
  dsi_pack_rows(src, dst, 0, src->rows);
  return mem;
}

/* m distinct rows out of n, in random order */
static void pick_rows(int32_t *out, int m, int n, dsi_rng *r) {
  int32_t *all = dsi_xmalloc(n * sizeof(int32_t));
  for (int i = 0; i < n; i++) all[i] = i;
  for (int i = 0; i < m; i++) {
    int j = i + (int)(dsi_rng_u64(r) % (uint64_t)(n - i));
    int32_t t = all[i];
    all[i] = all[j];
    all[j] = t;
    out[i] = all[i];
  }
  free(all);
}

/* the kernel over [0, split) and [split, rows) */
static void run_avx2(dsi_gemm g, int unit, void *scratch) {
  int rows = g.w->rows, split = DSI_CEIL_DIV(rows, unit) / 2 * unit;
  dsi_gemm_avx2(&g, 0, split, scratch);
  dsi_gemm_avx2(&g, split, rows, scratch);
}

static float silu(float v) { return v / (1.0f + expf(-v)); }

/* Entries the oracle left as they were must be untouched; the others are
 * compared by max|diff| / max|oracle's change|. */
static void compare(const float *got, const float *want, const float *before, size_t n, const char *what) {
  size_t stray = 0;
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (memcmp(&want[i], &before[i], sizeof(float)) == 0) {
      stray += memcmp(&got[i], &before[i], sizeof(float)) != 0;
      continue;
    }
    double d = fabs((double)got[i] - want[i]);
    num = fmax(num, d == d ? d : INFINITY); /* fmax would drop a NaN */
    den = fmax(den, fabs((double)want[i] - before[i]));
  }
  CHECKF(stray == 0, "%s: %zu entries written that should not be", what, stray);
  CHECKF(num <= 1e-5 * den, "%s: max|diff| / max|ref| = %g", what, den > 0 ? num / den : num);
}

static const char *dt_name(dsi_dtype dt) {
  return dt == DSI_DTYPE_F32 ? "F32" : dt == DSI_DTYPE_BF16 ? "BF16" : dt == DSI_DTYPE_I8 ? "INT8" : "FP8";
}

/* INT8 as the loader makes it: an f32 matrix quantized into TILES, alone
 * or (gate, up) as panel pairs; panels quantize alike either way */
static void *quantize_i8(const dsi_mat *gate, const dsi_mat *up, dsi_mat *dst) {
  dsi_mat shape = *gate;
  shape.dtype = DSI_DTYPE_I8;
  if (up) shape.rows = (int)DSI_CEIL_DIV(gate->rows, DSI_TILE_N) * DSI_TILE_N * 2;
  void *mem = dsi_alloc_aligned(dsi_pack_bytes(&shape));
  dsi_pack_describe_i8(&shape, dst, mem);
  float *work = dsi_xmalloc((size_t)DSI_TILE_N * gate->cols * sizeof(float));
  for (int r = 0; r < gate->rows; r += DSI_TILE_N)
    if (up) {
      dsi_quant_panel_i8(gate, r, dst, 2 * (r / DSI_TILE_N), work);
      dsi_quant_panel_i8(up, r, dst, 2 * (r / DSI_TILE_N) + 1, work);
    } else {
      dsi_quant_panel_i8(gate, r, dst, r / DSI_TILE_N, work);
    }
  free(work);
  return mem;
}

/* INT8: max|AVX2 - AVX-512| / max|oracle's change| over all cases */
static double g_i8_vs_avx512 = -1;
/* FP8 weights marked as holding no NaN byte (dsi_mat.nan_free) */
static int g_nan_free;

/* One shape: every m, with and without gathered rows, every epilogue. */
static void check_shape(dsi_dtype dt, int rows, int cols, dsi_rng *r) {
  int i8 = dt == DSI_DTYPE_I8;
  dsi_mat gate = random_rows(i8 ? DSI_DTYPE_F32 : dt, rows, cols, r), up = random_rows(i8 ? DSI_DTYPE_F32 : dt, rows, cols, r);
  dsi_mat pw, pgu, qup;
  void *pw_mem, *pgu_mem, *qup_mem = NULL;
  /* the oracle's matrices: the originals, or for INT8 the quantized ones */
  const dsi_mat *og = &gate, *ou = &up;
  if (i8) {
    pw_mem = quantize_i8(&gate, NULL, &pw);
    pgu_mem = quantize_i8(&gate, &up, &pgu);
    qup_mem = quantize_i8(&up, NULL, &qup);
    og = &pw;
    ou = &qup;
  } else {
    pw_mem = pack(&gate, &pw);
    pgu_mem = dsi_alloc_aligned(dsi_pack_gate_up_bytes(&gate));
    dsi_pack_gate_up(&gate, &up, &pgu, pgu_mem);
    pw.nan_free = pgu.nan_free = g_nan_free; /* random_rows writes no NaN byte */
  }
#if DSI_HAVE_AVX512
  int vs512 = i8 && test_kern()->level >= DSI_ISA_AVX512;
#else
  int vs512 = 0;
#endif
  int inter = pgu.rows / 2; /* gate rows rounded up to 16 */
  void *scratch = dsi_alloc_aligned(DSI_GEMM_SCRATCH(cols));
  static const int ms[] = {1, 2, 3, 5, 8, 9, 17, 40}; /* 40: more than one chunk of rows */
  /* wide rows: 100 rows are two blocks of the rows every panel takes in turn */
  static const int ms_wide[] = {1, 100};
  const int wide = cols > 4096, nm = wide ? (int)DSI_ARRAY_LEN(ms_wide) : (int)DSI_ARRAY_LEN(ms);
  for (int mi = 0; mi < nm; mi++) {
    int m = wide ? ms_wide[mi] : ms[mi], nx = m + 5, ldx = cols + 3, ny = m + 4;
    /* x rows ldx apart, the last one ending at the buffer's end, NaN
     * between them: a kernel that reads past cols gets NaN (even times a
     * zero weight), and under ASan a read past the end */
    size_t x_len = (size_t)(nx - 1) * ldx + cols;
    float *x = dsi_xmalloc(x_len * sizeof(float));
    for (size_t i = 0; i < x_len; i++) x[i] = i % ldx < (size_t)cols ? dsi_rng_normal(r) : NAN;
    int32_t x_rows[128], y_rows[128];
    float y_scale[128];
    pick_rows(x_rows, m, nx, r);
    pick_rows(y_rows, m, ny, r);
    /* routing weights away from 0: a tiny one would leave the product below
     * the rounding of y's old values, and the comparison would measure that */
    for (int i = 0; i < m; i++) y_scale[i] = (dsi_rng_uniform(r) < 0.5f ? -1 : 1) * (0.5f + dsi_rng_uniform(r));
    int ldy = DSI_MAX(rows, inter) + 3;
    size_t y_len = (size_t)ny * ldy;
    float *y0 = dsi_xmalloc(y_len * sizeof(float)), *yk = dsi_xmalloc(y_len * sizeof(float));
    float *yr = dsi_xmalloc(y_len * sizeof(float)), *yu = dsi_xmalloc(y_len * sizeof(float));
    float *y5 = dsi_xmalloc(y_len * sizeof(float));
    for (size_t i = 0; i < y_len; i++) y0[i] = dsi_rng_normal(r);
    for (int gather = 0; gather < 2; gather++) {
      /* the plain case reads x's first m rows */
      dsi_gemm g = {.x = x, .ldx = ldx, .x_rows = gather ? x_rows : NULL, .m = m, .ldy = ldy,
                    .y_rows = y_rows, .y_scale = y_scale};
      char what[160];
      for (int epi = DSI_EPI_STORE; epi <= DSI_EPI_SCATTER_ADD; epi++) {
        snprintf(what, sizeof what, "%s %dx%d m=%d %s epi=%d", dt_name(dt), rows, cols, m,
                 gather ? "gathered" : "plain", epi);
        g.epi = (dsi_epilogue)epi;
        memcpy(yk, y0, y_len * sizeof(float));
        memcpy(yr, y0, y_len * sizeof(float));
        g.y = yk;
        if (epi == DSI_EPI_SILU_PAIRS) {
          g.w = &pgu;
          run_avx2(g, 2 * DSI_TILE_N, scratch);
          /* oracle: gate and up separately on the originals, joined here */
          memcpy(yu, y0, y_len * sizeof(float));
          dsi_gemm o = g;
          o.epi = DSI_EPI_STORE;
          o.w = og;
          o.y = yr;
          dsi_gemm_ref(&o, 0, rows, scratch);
          o.w = ou;
          o.y = yu;
          dsi_gemm_ref(&o, 0, rows, scratch);
          for (int i = 0; i < m; i++)
            for (int j = 0; j < inter; j++) {
              size_t at = (size_t)i * ldy + j;
              yr[at] = j < rows ? silu(yr[at]) * yu[at] : 0.0f;
            }
        } else {
          g.w = &pw;
          run_avx2(g, DSI_TILE_N, scratch);
          dsi_gemm o = g;
          o.w = og;
          o.y = yr;
          dsi_gemm_ref(&o, 0, rows, scratch);
        }
        compare(yk, yr, y0, y_len, what);
        if (epi == DSI_EPI_STORE && !gather && m > 1) {
          /* each row alone: bit for bit its row of the batch (the passes
           * a batch is cut into must not change a row's sums) */
          int differ = 0;
          for (int i = 0; i < m; i++) {
            memcpy(yu, y0, y_len * sizeof(float));
            dsi_gemm one = g;
            one.x = x + (size_t)i * ldx;
            one.m = 1;
            one.y = yu;
            run_avx2(one, DSI_TILE_N, scratch);
            differ += memcmp(yu, yk + (size_t)i * ldy, (size_t)rows * sizeof(float)) != 0;
          }
          CHECKF(differ == 0, "%s: %d of %d rows differ computed alone", what, differ, m);
        }
#if DSI_HAVE_AVX512
        if (vs512) { /* the same sums in the same order: equal to rounding */
          memcpy(y5, y0, y_len * sizeof(float));
          dsi_gemm a = g;
          a.y = y5;
          int unit = epi == DSI_EPI_SILU_PAIRS ? 2 * DSI_TILE_N : DSI_TILE_N;
          dsi_gemm_avx512(&a, 0, DSI_CEIL_DIV(a.w->rows, unit) * unit, scratch);
          double num = 0, den = 0;
          for (size_t i = 0; i < y_len; i++) {
            num = fmax(num, fabs((double)y5[i] - yk[i]));
            den = fmax(den, fabs((double)yr[i] - y0[i]));
          }
          double e = den > 0 ? num / den : num;
          g_i8_vs_avx512 = fmax(g_i8_vs_avx512, e);
          CHECKF(e <= 1e-6, "%s: AVX2 vs AVX-512 INT8 differ by %g", what, e);
        }
#endif
      }
    }
    free(x);
    free(y0);
    free(yk);
    free(yr);
    free(yu);
    free(y5);
  }
  dsi_free_aligned(scratch);
  dsi_free_aligned(pw_mem);
  dsi_free_aligned(pgu_mem);
  dsi_free_aligned(qup_mem);
  free_rows(&gate);
  free_rows(&up);
}

/* Every e4m3 code but NaN, at every row of a panel, in both scale blocks:
 * one-hot activations pick single weights, which must come out exactly
 * code x scale — both when the kernel widens in registers (m = 1) and
 * when it widens a panel into scratch (m = 256), with and without the
 * NaN check (nan_free). */
static void check_fp8_codes(int nan_free) {
  enum { R = 16, C = 256 };
  dsi_dtype_init();
  static uint8_t codes[R * C];
  for (int rr = 0; rr < R; rr++)
    for (int c = 0; c < C; c++) {
      int v = (c + 17 * rr) % 256;
      codes[rr * C + c] = (v & 0x7f) == 0x7f ? 0 : (uint8_t)v;
    }
  float scale[2] = {0.5f, 3.0f};
  dsi_mat src = {.dtype = DSI_DTYPE_F8_E4M3, .rows = R, .cols = C, .data = codes, .scale = scale,
                 .block = 128, .scale_cols = 2, .layout = DSI_LAYOUT_ROWS}, w;
  void *mem = pack(&src, &w);
  w.nan_free = nan_free;
  float *x = dsi_xmalloc((size_t)C * C * sizeof(float)), *y = dsi_xmalloc((size_t)C * R * sizeof(float));
  for (int i = 0; i < C * C; i++) x[i] = i % (C + 1) == 0;
  void *scratch = dsi_alloc_aligned(DSI_GEMM_SCRATCH(C));
  int32_t row[1];
  dsi_gemm g = {.w = &w, .x = x, .ldx = C, .m = C, .y = y, .ldy = R, .epi = DSI_EPI_STORE};
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0) {
      dsi_gemm_avx2(&g, 0, R, scratch);
    } else {
      dsi_gemm one = g;
      one.m = 1;
      one.x_rows = row;
      for (int c = 0; c < C; c++) {
        row[0] = c;
        one.y = y + (size_t)c * R;
        dsi_gemm_avx2(&one, 0, R, scratch);
      }
    }
    int bad = 0;
    for (int c = 0; c < C; c++)
      for (int rr = 0; rr < R; rr++) {
        float want = dsi_fp8_table[codes[rr * C + c]] * scale[c / 128];
        bad += memcmp(&y[(size_t)c * R + rr], &want, sizeof want) != 0 && y[(size_t)c * R + rr] != want;
      }
    CHECKF(bad == 0, "FP8 codes (%s, nan_free %d): %d of %d not exact", pass ? "m = 1" : "m = 256", nan_free, bad,
           R * C);
  }
  dsi_free_aligned(scratch);
  dsi_free_aligned(mem);
  free(x);
  free(y);
}

int main(void) {
  const dsi_cpu *cpu = dsi_cpu_get();
  if (!cpu->avx2 || !cpu->fma || !cpu->f16c) {
    printf("skipped: this CPU has no AVX2+FMA+F16C\n");
    return 0;
  }
  dsi_rng r;
  dsi_rng_seed(&r, 2024);
  check_fp8_codes(0);
  check_fp8_codes(1);
  static const dsi_dtype dts[] = {DSI_DTYPE_F32, DSI_DTYPE_BF16, DSI_DTYPE_F8_E4M3, DSI_DTYPE_I8};
  static const int rows[] = {16, 48, 80, 200, 7};
  /* the odd ones end in half a column pair */
  static const int cols[] = {32, 64, 100, 128, 1000, 33, 257};
  for (size_t d = 0; d < DSI_ARRAY_LEN(dts); d++)
    for (size_t i = 0; i < DSI_ARRAY_LEN(rows); i++)
      for (size_t j = 0; j < DSI_ARRAY_LEN(cols); j++) check_shape(dts[d], rows[i], cols[j], &r);
  for (size_t d = 0; d < DSI_ARRAY_LEN(dts); d++) check_shape(dts[d], 32, 16384, &r);
  /* FP8 known to hold no NaN byte: the kernel's path without the NaN check */
  g_nan_free = 1;
  for (size_t i = 0; i < DSI_ARRAY_LEN(rows); i++)
    for (size_t j = 0; j < DSI_ARRAY_LEN(cols); j++) check_shape(DSI_DTYPE_F8_E4M3, rows[i], cols[j], &r);
  if (g_i8_vs_avx512 >= 0) printf("int8: AVX2 vs AVX-512 worst normalized difference %.2e\n", g_i8_vs_avx512);
  else printf("int8: AVX-512 kernel not on this CPU or build; AVX2 checked against the oracle only\n");
  return check_done();
}

#else
int main(void) {
  printf("skipped: built without the AVX2 kernel\n");
  return 0;
}
#endif
