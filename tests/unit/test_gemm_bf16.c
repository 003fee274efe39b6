/* tests: the matmuls that multiply bf16 activations — AMX (dsi_gemm_amx)
 * and AVX512-BF16 (dsi_gemm_avx512_bf16), each where this CPU runs it —
 * against the scalar oracle run on the row-major originals: BF16 and FP8,
 * every epilogue, ragged rows, columns and M, gathered activations,
 * scattered outputs, two row ranges at once; FP8 bitwise its BF16 twin. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/base.h"
#include "base/pool.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "graph/matmul.h"
#include "kernels/vec.h"

#if defined(DSI_HAVE_AVX512)

#ifdef DSI_TEST_AMX_EMU
void dsi_gemm_amx_emu(const dsi_gemm *g, int r0, int r1, void *scratch); /* unit/amx_emu.c */
#endif
static dsi_gemm_fn g_fn;      /* the kernel under test */
static const char *g_name;    /* its name */
static const dsi_kern *g_kern; /* the table that picks it */

/* bf16-representable values, so the oracle on x sees what the kernel sees in xb */
static float bf16_round(float v) { return dsi_bf16_to_f32(dsi_f32_to_bf16(v)); }

/* a row-major weight [rows, cols] of dtype dt with random values; FP8 with
 * random 128x128 block scales and some subnormal codes */
typedef struct {
  dsi_mat m;
  void *data;
  float *scale;
} weight;

static void weight_make(weight *w, dsi_dtype dt, int rows, int cols, dsi_rng *rng) {
  memset(w, 0, sizeof *w);
  w->m.dtype = dt;
  w->m.rows = rows;
  w->m.cols = cols;
  w->m.layout = DSI_LAYOUT_ROWS;
  size_t n = (size_t)rows * cols;
  w->data = malloc(n * dsi_dtype_size(dt));
  if (dt == DSI_DTYPE_BF16) {
    uint16_t *d = w->data;
    for (size_t i = 0; i < n; i++) d[i] = dsi_f32_to_bf16(dsi_rng_normal(rng) * 0.05f);
  } else {
    uint8_t *d = w->data;
    for (size_t i = 0; i < n; i++) {
      float v = dsi_rng_normal(rng) * (dsi_rng_uniform(rng) < 0.1f ? 0.01f : 100.0f);
      d[i] = dsi_f32_to_fp8(v);
    }
    w->m.block = 128;
    w->m.scale_cols = DSI_CEIL_DIV(cols, 128);
    int sr = DSI_CEIL_DIV(rows, 128);
    w->scale = malloc((size_t)sr * w->m.scale_cols * sizeof(float));
    for (int i = 0; i < sr * w->m.scale_cols; i++) w->scale[i] = 1e-4f + 1e-3f * dsi_rng_uniform(rng);
    w->m.scale = w->scale;
  }
  w->m.data = w->data;
}

static void weight_free(weight *w) {
  free(w->data);
  free(w->scale);
}

/* FP8 w as the BF16 weight the oracle multiplies: bf16(fp8 * scale), the
 * product rounded to f32 and then to bf16 as the kernel's widening does */
static void weight_bf16_twin(const weight *w, weight *t) {
  memset(t, 0, sizeof *t);
  t->m = w->m;
  t->m.dtype = DSI_DTYPE_BF16;
  t->m.block = 0;
  t->m.scale_cols = 0;
  t->m.scale = NULL;
  uint16_t *d = malloc((size_t)w->m.rows * w->m.cols * sizeof(uint16_t));
  const uint8_t *s = w->data;
  for (int r = 0; r < w->m.rows; r++)
    for (int c = 0; c < w->m.cols; c++) {
      size_t i = (size_t)r * w->m.cols + c;
      float v = dsi_fp8_to_f32(s[i]) * w->scale[(size_t)(r / 128) * w->m.scale_cols + c / 128];
      d[i] = dsi_f32_to_bf16(v);
    }
  t->data = d;
  t->m.data = d;
}

static void pack(const weight *w, const weight *up, dsi_mat *pk, void **mem) {
  if (up) {
    *mem = dsi_alloc_aligned(dsi_pack_gate_up_bytes(&w->m));
    dsi_pack_gate_up(&w->m, &up->m, pk, *mem);
  } else {
    *mem = dsi_alloc_aligned(dsi_pack_bytes(&w->m));
    dsi_pack_describe(&w->m, pk, *mem);
    dsi_pack_rows(&w->m, pk, 0, w->m.rows);
  }
}

/* ---- two threads, one row range each ---- */
typedef struct {
  const dsi_gemm *g;
  int split; /* thread 0 takes [0, split), thread 1 [split, rows) */
  void *scratch[2];
} job;

static void run_share(void *ctx, int ith, int nth) {
  job *j = ctx;
  (void)nth;
  int r0 = ith ? j->split : 0, r1 = ith ? j->g->w->rows : j->split;
  if (r0 < r1) g_fn(j->g, r0, r1, j->scratch[ith]);
}

static dsi_pool *g_pool;
static double g_worst[2]; /* worst normalized error seen, bf16 and fp8 */

/* normalized error of got vs want over [m, n] with row strides */
static double norm_err(const float *got, const float *want, const float *base, int m, int n, int ld) {
  double dmax = 0, rmax = 0;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      size_t k = (size_t)i * ld + j;
      double d = fabs((double)got[k] - want[k]), r = fabs((double)want[k] - (base ? base[k] : 0));
      if (!(d <= dmax)) dmax = d; /* NaN propagates */
      if (r > rmax) rmax = r;
    }
  return rmax > 0 ? dmax / rmax : dmax;
}

/* one case: dtype dt, epilogue epi, W [rows, cols] (SILU: gate and up each
 * [rows, cols]), m activation rows */
static void one_case(dsi_dtype dt, dsi_epilogue epi, int rows, int cols, int m, dsi_rng *rng) {
  const double tol = dt == DSI_DTYPE_BF16 ? 1e-3 : 1e-2;
  weight w, up;
  weight_make(&w, dt, rows, cols, rng);
  if (epi == DSI_EPI_SILU_PAIRS) weight_make(&up, dt, rows, cols, rng);

  /* pack */
  dsi_mat pk;
  void *mem;
  pack(&w, epi == DSI_EPI_SILU_PAIRS ? &up : NULL, &pk, &mem);
  int kpad = pk.kpad;

  /* activations: m rows gathered from nx, in bf16-representable f32 */
  int nx = m + 7, ldx = cols + 5;
  float *x = malloc((size_t)nx * ldx * sizeof(float));
  for (size_t i = 0; i < (size_t)nx * ldx; i++) x[i] = bf16_round(dsi_rng_normal(rng));
  int32_t *x_rows = malloc(m * sizeof(int32_t));
  for (int i = 0; i < m; i++) x_rows[i] = (int32_t)(dsi_rng_u64(rng) % nx);
  /* tile-ordered bf16 rows, filled in two ranges as two threads would; the
   * padding rows start as garbage, which the last range must zero */
  size_t xb_bytes = DSI_XB_ROWS(m) * kpad * 2;
  uint16_t *xb = dsi_alloc_aligned(xb_bytes);
  memset(xb, 0x7f, xb_bytes);
  dsi_rows_to_bf16_tiles(dsi_kern_best()->vec, x, ldx, x_rows, m / 2, cols, kpad, 0, m, xb);
  dsi_rows_to_bf16_tiles(dsi_kern_best()->vec, x, ldx, x_rows + m / 2, m - m / 2, cols, kpad, m / 2, m, xb);
  for (size_t r = m; r < DSI_XB_ROWS(m); r++)
    for (int s = 0; s < kpad / 32; s++)
      for (int c = 0; c < 32; c++) CHECK(xb[((r / 16) * (kpad / 32) + s) * 512 + (r % 16) * 32 + c] == 0);

  /* outputs: STORE/SILU [m, ldy]; SCATTER [ny, ldy] at distinct y_rows */
  int nout = epi == DSI_EPI_SILU_PAIRS ? pk.rows / 2 : rows;
  int ldy = nout + 3, ny = epi == DSI_EPI_SCATTER_ADD ? m + 9 : m;
  size_t ysz = (size_t)ny * ldy;
  float *y = malloc(ysz * sizeof(float)), *yref = malloc(ysz * sizeof(float)), *y0 = malloc(ysz * sizeof(float));
  for (size_t i = 0; i < ysz; i++) y0[i] = epi == DSI_EPI_SCATTER_ADD ? dsi_rng_normal(rng) : 12345.0f;
  int32_t *y_rows = malloc(ny * sizeof(int32_t));
  float *y_scale = malloc(m * sizeof(float));
  for (int i = 0; i < ny; i++) y_rows[i] = i;
  for (int i = ny - 1; i > 0; i--) { /* shuffle: distinct destinations */
    int j = (int)(dsi_rng_u64(rng) % (i + 1)), t = y_rows[i];
    y_rows[i] = y_rows[j];
    y_rows[j] = t;
  }
  for (int i = 0; i < m; i++) y_scale[i] = 0.5f + dsi_rng_uniform(rng);

  /* oracle on the row-major originals */
  float *scr = malloc((size_t)cols * 2 * sizeof(float));
  memcpy(yref, y0, ysz * sizeof(float));
  if (epi == DSI_EPI_SILU_PAIRS) {
    float *gy = malloc((size_t)m * rows * sizeof(float)), *uy = malloc((size_t)m * rows * sizeof(float));
    dsi_gemm r = {.w = &w.m, .x = x, .ldx = ldx, .x_rows = x_rows, .m = m, .y = gy, .ldy = rows, .epi = DSI_EPI_STORE};
    dsi_gemm_ref(&r, 0, rows, scr);
    r.w = &up.m;
    r.y = uy;
    dsi_gemm_ref(&r, 0, rows, scr);
    for (int i = 0; i < m; i++)
      for (int j = 0; j < nout; j++) {
        float gv = j < rows ? gy[(size_t)i * rows + j] : 0, uv = j < rows ? uy[(size_t)i * rows + j] : 0;
        yref[(size_t)i * ldy + j] = gv / (1.0f + expf(-gv)) * uv;
      }
    free(gy);
    free(uy);
  } else {
    dsi_gemm r = {.w = &w.m, .x = x, .ldx = ldx, .x_rows = x_rows, .m = m, .y = yref, .ldy = ldy, .epi = epi,
                  .y_rows = y_rows, .y_scale = y_scale};
    dsi_gemm_ref(&r, 0, rows, scr);
  }

  /* the kernel, two row ranges on two threads */
  memcpy(y, y0, ysz * sizeof(float));
  dsi_gemm g = {.w = &pk, .x = x, .ldx = ldx, .x_rows = x_rows, .xb = xb, .m = m, .y = y, .ldy = ldy, .epi = epi,
                .y_rows = y_rows, .y_scale = y_scale};
  int unit = epi == DSI_EPI_SILU_PAIRS ? 32 : 16, units = DSI_CEIL_DIV(pk.rows, unit);
  job j = {.g = &g, .split = DSI_MIN(pk.rows, (units / 2) * unit)};
  for (int t = 0; t < 2; t++) j.scratch[t] = dsi_alloc_aligned(DSI_GEMM_SCRATCH(cols));
  dsi_pool_run(g_pool, run_share, &j);

  double e = norm_err(y, yref, epi == DSI_EPI_SCATTER_ADD ? y0 : NULL, ny, ldy, ldy);
  int di = dt != DSI_DTYPE_BF16;
  if (!(e <= g_worst[di])) g_worst[di] = e;
  CHECKF(e <= tol, "%s %s epi %d rows %d cols %d m %d: normalized error %.3g > %.0e", g_name,
         dt == DSI_DTYPE_BF16 ? "bf16" : "fp8", (int)epi, rows, cols, m, e, tol);
  /* nothing written past the outputs (ragged rows) or into padding columns */
  int clean = 1;
  for (int i = 0; i < ny; i++)
    for (int c = nout; c < ldy; c++) clean &= y[(size_t)i * ldy + c] == y0[(size_t)i * ldy + c];
  CHECKF(clean, "epi %d rows %d cols %d m %d: wrote past the output columns", (int)epi, rows, cols, m);

  /* AVX512-BF16 on rows staged for the call (dsi_gemm_dp_stage, in two
   * ranges as two threads stage them, the later first): bitwise what it
   * gives staging them itself, whatever the groups and passes */
  if (g_fn == dsi_gemm_avx512_bf16) {
    size_t xd_bytes = DSI_XD_WORDS(m, cols) * sizeof(uint32_t);
    uint32_t *xd = dsi_alloc_aligned(xd_bytes + 64);
    memset(xd, 0x7f, xd_bytes + 64);
    dsi_gemm gd = g;
    float *yd = malloc(ysz * sizeof(float));
    memcpy(yd, y0, ysz * sizeof(float));
    gd.y = yd;
    dsi_gemm_dp_stage(&gd, m / 3, m, xd);
    dsi_gemm_dp_stage(&gd, 0, m / 3, xd);
    gd.xd = xd;
    job jd = j;
    jd.g = &gd;
    dsi_pool_run(g_pool, run_share, &jd);
    CHECKF(!memcmp(y, yd, ysz * sizeof(float)), "%s epi %d rows %d cols %d m %d: staged rows give other bits",
           dt == DSI_DTYPE_BF16 ? "bf16" : "fp8", (int)epi, rows, cols, m);
    const uint8_t *tail = (const uint8_t *)xd + xd_bytes;
    int intact = 1;
    for (int b = 0; b < 64; b++) intact &= tail[b] == 0x7f;
    CHECKF(intact, "m %d cols %d: staging wrote past DSI_XD_WORDS", m, cols);
    free(yd);
    dsi_free_aligned(xd);
  }

  /* FP8: bitwise the BF16 kernel on bf16(fp8 * scale), the weights the
   * oracle rounds to (the widening's table, every code and scale) */
  if (dt == DSI_DTYPE_F8_E4M3) {
    weight tw, tu;
    weight_bf16_twin(&w, &tw);
    if (epi == DSI_EPI_SILU_PAIRS) weight_bf16_twin(&up, &tu);
    dsi_mat tpk;
    void *tmem;
    pack(&tw, epi == DSI_EPI_SILU_PAIRS ? &tu : NULL, &tpk, &tmem);
    float *yt = malloc(ysz * sizeof(float));
    memcpy(yt, y0, ysz * sizeof(float));
    dsi_gemm gt = g;
    gt.w = &tpk;
    gt.y = yt;
    j.g = &gt;
    dsi_pool_run(g_pool, run_share, &j);
    CHECKF(!memcmp(y, yt, ysz * sizeof(float)), "fp8 epi %d rows %d cols %d m %d: differs from bf16(fp8 * scale) on the BF16 kernel",
           (int)epi, rows, cols, m);
    free(yt);
    dsi_free_aligned(tmem);
    weight_free(&tw);
    if (epi == DSI_EPI_SILU_PAIRS) weight_free(&tu);
  }

  for (int t = 0; t < 2; t++) dsi_free_aligned(j.scratch[t]);
  free(scr);
  free(y);
  free(yref);
  free(y0);
  free(y_rows);
  free(y_scale);
  dsi_free_aligned(xb);
  free(x_rows);
  free(x);
  dsi_free_aligned(mem);
  weight_free(&w);
  if (epi == DSI_EPI_SILU_PAIRS) weight_free(&up);
}

/* A batch of matmuls as the forward runs them (dsi_mm_run: kernels
 * picked per call, activations prepared into the driver's workspace,
 * call-major units over two workers): many calls of 8-16 rows, the ones
 * whose tile-ordered bf16 rows pad the most, beside AVX-512 calls of a
 * few rows and some of none; each call against the scalar oracle. */
static void batch_case(dsi_dtype dt, dsi_rng *rng) {
  enum { E = 48, ROWS = 64, COLS = 96 };
  const double tol = dt == DSI_DTYPE_BF16 ? 1e-3 : 1e-2;
  static const int ms[] = {8, 8, 9, 15, 16, 8, 1, 3, 0, 24, 8, 12};
  weight w[E];
  dsi_mat pk[E];
  void *mem[E];
  dsi_gemm gs[E];
  int start[E + 1];
  start[0] = 0;
  for (int e = 0; e < E; e++) start[e + 1] = start[e] + ms[e % DSI_ARRAY_LEN(ms)];
  const int total = start[E], nx = total + 5;
  float *x = malloc((size_t)nx * COLS * sizeof(float));
  for (int i = 0; i < nx * COLS; i++) x[i] = bf16_round(dsi_rng_normal(rng));
  int32_t *x_rows = malloc((size_t)(total + 1) * sizeof(int32_t));
  for (int i = 0; i < total; i++) x_rows[i] = (int32_t)(dsi_rng_u64(rng) % nx);
  float *y = malloc((size_t)(total + 1) * ROWS * sizeof(float)), *yref = malloc((size_t)(total + 1) * ROWS * sizeof(float));
  float *scr = malloc((size_t)COLS * 2 * sizeof(float));
  for (int e = 0; e < E; e++) {
    weight_make(&w[e], dt, ROWS, COLS, rng);
    mem[e] = dsi_alloc_aligned(dsi_pack_bytes(&w[e].m));
    dsi_pack_describe(&w[e].m, &pk[e], mem[e]);
    dsi_pack_rows(&w[e].m, &pk[e], 0, ROWS);
    int m = start[e + 1] - start[e];
    gs[e] = (dsi_gemm){.w = &pk[e], .x = x, .ldx = COLS, .x_rows = x_rows + start[e], .m = m,
                       .y = y + (size_t)start[e] * ROWS, .ldy = ROWS, .epi = DSI_EPI_STORE};
    dsi_gemm r = {.w = &w[e].m, .x = x, .ldx = COLS, .x_rows = x_rows + start[e], .m = m,
                  .y = yref + (size_t)start[e] * ROWS, .ldy = ROWS, .epi = DSI_EPI_STORE};
    if (m) dsi_gemm_ref(&r, 0, ROWS, scr);
  }
  dsi_mm mm = {.k = g_kern, .act_bf16 = 1, .nth = dsi_pool_size(g_pool)};
  size_t ws_bytes = dsi_mm_run_bytes(mm.nth, E, total, COLS, pk[0].kpad);
  void *ws = dsi_alloc_aligned(ws_bytes);
  dsi_gemm_fn fns[E];
  dsi_mm_run(g_pool, &mm, gs, E, ROWS, DSI_TILE_N, ws, ws_bytes, fns);
  int n_run = 0;
  for (int e = 0; e < E; e++) {
    int m = start[e + 1] - start[e];
    n_run += fns[e] == g_fn && m > 0;
    double err = norm_err(y + (size_t)start[e] * ROWS, yref + (size_t)start[e] * ROWS, NULL, m, ROWS, ROWS);
    CHECKF(err <= tol, "%s batch call %d (%d rows, %s): normalized error %.3g", dt == DSI_DTYPE_BF16 ? "bf16" : "fp8", e, m,
           dsi_gemm_kernel_name(fns[e]), err);
  }
  CHECKF(n_run >= E / 2, "only %d of %d calls ran on %s", n_run, E, dsi_gemm_kernel_name(g_fn));
  dsi_free_aligned(ws);
  for (int e = 0; e < E; e++) {
    dsi_free_aligned(mem[e]);
    weight_free(&w[e]);
  }
  free(x), free(x_rows), free(y), free(yref), free(scr);
}

/* AVX512-BF16 rounds x itself: on f32 rows it gives bitwise what it gives
 * on the same rows rounded to bf16 beforehand (to nearest even, as
 * dsi_f32_to_bf16), odd column counts included */
static void rounding_case(int cols, int m, dsi_rng *rng) {
  weight w;
  weight_make(&w, DSI_DTYPE_BF16, 48, cols, rng);
  dsi_mat pk;
  void *mem;
  pack(&w, NULL, &pk, &mem);
  float *x = malloc((size_t)m * cols * sizeof(float)), *xr = malloc((size_t)m * cols * sizeof(float));
  for (int i = 0; i < m * cols; i++) {
    x[i] = dsi_rng_normal(rng);
    xr[i] = bf16_round(x[i]);
  }
  float *y = malloc((size_t)m * 48 * sizeof(float)), *yr = malloc((size_t)m * 48 * sizeof(float));
  void *scr = dsi_alloc_aligned(DSI_GEMM_SCRATCH(cols));
  dsi_gemm g = {.w = &pk, .x = x, .ldx = cols, .m = m, .y = y, .ldy = 48, .epi = DSI_EPI_STORE};
  dsi_gemm_avx512_bf16(&g, 0, 48, scr);
  g.x = xr;
  g.y = yr;
  dsi_gemm_avx512_bf16(&g, 0, 48, scr);
  CHECKF(!memcmp(y, yr, (size_t)m * 48 * sizeof(float)), "cols %d m %d: f32 rows differ from their bf16 rounding", cols, m);
  dsi_free_aligned(scr);
  free(x), free(xr), free(y), free(yr);
  dsi_free_aligned(mem);
  weight_free(&w);
}

/* emulated: the kernel with its tile instructions in C, which the
 * driver does not pick (no batch through it) */
static void run_kernel(dsi_gemm_fn fn, const char *name, const dsi_kern *k, int emulated) {
  g_fn = fn;
  g_name = name;
  g_kern = k;
  g_worst[0] = g_worst[1] = 0;
  dsi_rng rng;
  dsi_rng_seed(&rng, 42);
  static const int rows_set[] = {16, 32, 48, 80, 200, 7, 1000};
  static const int cols_set[] = {32, 64, 96, 100, 1000};
  static const int m_set[] = {1, 15, 16, 17, 32, 33, 64, 100, 256};
  static const dsi_dtype dts[] = {DSI_DTYPE_BF16, DSI_DTYPE_F8_E4M3};
  for (int d = 0; d < 2; d++)
    for (int epi = 0; epi < 3; epi++)
      for (size_t ri = 0; ri < DSI_ARRAY_LEN(rows_set); ri++)
        for (size_t ci = 0; ci < DSI_ARRAY_LEN(cols_set); ci++)
          for (size_t mi = 0; mi < DSI_ARRAY_LEN(m_set); mi++) {
            int rows = rows_set[ri], cols = cols_set[ci], m = m_set[mi];
            /* the oracle is scalar (and the emulated tiles too): keep the
             * largest products to a few */
            if ((double)rows * cols * m > (emulated ? 3e6 : 3e7) && !(ri == 6 && ci == 4 && mi == 8)) continue;
#ifdef __SANITIZE_ADDRESS__
            if (emulated && (ri + ci + mi + epi) % 2) continue; /* half the emulated cases: the suite's time under ASan */
#endif
            one_case(dts[d], (dsi_epilogue)epi, rows, cols, m, &rng);
          }
  /* K long enough to be cut into chunks; M cut into chunks (600); several
   * groups of panel pairs with an odd panel last (300); chunks of K that
   * are not all of one length (1568: 49 steps) under M chunks whose last
   * ends in a block of at most 16 rows (556 = 512 + 32 + 12), where the
   * prefetches of the next A chunk cross into the next M chunk */
  for (int d = 0; d < 2; d++)
    for (int epi = 0; epi < 3; epi++) {
      if (emulated && epi != d) continue; /* one epilogue a dtype */
      one_case(dts[d], (dsi_epilogue)epi, 80, 2100, 600, &rng);
      one_case(dts[d], (dsi_epilogue)epi, 300, 2100, 40, &rng);
      one_case(dts[d], (dsi_epilogue)epi, 112, 1568, 556, &rng);
    }
  if (!emulated) {
    batch_case(DSI_DTYPE_BF16, &rng);
    batch_case(DSI_DTYPE_F8_E4M3, &rng);
  }
  printf("%s: worst normalized error: bf16 %.2e, fp8 %.2e\n", name, g_worst[0], g_worst[1]);
}

int main(void) {
  dsi_dtype_init();
  g_pool = dsi_pool_new(2);
  int ran = 0;
  /* the kernel wherever the CPU runs it, also where the engine prefers
   * the f32 route (vdpbf16ps slow: dsi_cpu.dpbf16_fast) */
  dsi_kern dot = *dsi_kern_get(DSI_ISA_AVX512BF16);
  if (dot.level == DSI_ISA_AVX512BF16) {
    dot.dot_bf16 = 1;
    run_kernel(dsi_gemm_avx512_bf16, "avx512-bf16", &dot, 0), ran++;
    dsi_rng rng;
    dsi_rng_seed(&rng, 7);
    for (int cols = 31; cols <= 100; cols += 23)
      for (int m = 1; m <= 20; m += 19) rounding_case(cols, m, &rng);
  }
  else printf("AVX512-BF16: skipped, not on this CPU\n");
#if defined(DSI_HAVE_AMX)
  if (dsi_kern_best()->amx) run_kernel(dsi_gemm_amx, "amx", dsi_kern_best(), 0), ran++;
  else printf("AMX: skipped, not on this CPU (or tile data not granted)\n");
#endif
#ifdef DSI_TEST_AMX_EMU
  /* without AMX, the AMX kernel with its tiles emulated (its FP8 tables
   * and epilogues need AVX512-BF16 and VBMI) */
  if (!dsi_kern_best()->amx && dot.level == DSI_ISA_AVX512BF16)
    run_kernel(dsi_gemm_amx_emu, "amx (tiles emulated)", &dot, 1), ran++;
#endif
  dsi_pool_free(g_pool);
  if (!ran) printf("skipped: no bf16 matmul runs on this CPU\n");
  return check_done();
}

#else
int main(void) {
  printf("skipped: built without the AVX-512 kernels\n");
  return 0;
}
#endif
