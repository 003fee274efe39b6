/* tests: FP8 NaN is NaN on every ISA. DeepSeek's E4M3FN has no infinity
 * and one NaN per sign (the bytes 0x7f and 0xff); the scalar table reads
 * them as NaN, and every optimized kernel (AVX2, AVX-512, AVX512-BF16, AMX,
 * whichever this CPU runs) must give NaN in exactly the rows the oracle
 * does, with f32 and bf16 activations, one row and many. */
#include "base/base.h"
#include "base/pool.h"
#include "check.h"
#include "graph/matmul.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "tensor/dtype.h"

#include <math.h>
#include <stdlib.h>

enum { ROWS = 64, COLS = 256 };

static void run(const dsi_kern *k, int act_bf16, int m, const dsi_mat *w, const dsi_mat *pk, dsi_pool *pool) {
  float *x = malloc((size_t)m * COLS * sizeof(float));
  float *y = malloc((size_t)m * ROWS * sizeof(float)), *yref = malloc((size_t)m * ROWS * sizeof(float));
  float *scr = malloc((size_t)COLS * 2 * sizeof(float));
  dsi_rng r;
  dsi_rng_seed(&r, 7);
  for (int i = 0; i < m * COLS; i++) x[i] = dsi_bf16_to_f32(dsi_f32_to_bf16(dsi_rng_normal(&r)));
  dsi_gemm ref = {.w = w, .x = x, .ldx = COLS, .m = m, .y = yref, .ldy = ROWS, .epi = DSI_EPI_STORE};
  dsi_gemm_ref(&ref, 0, ROWS, scr);
  dsi_gemm g = {.w = pk, .x = x, .ldx = COLS, .m = m, .y = y, .ldy = ROWS, .epi = DSI_EPI_STORE};
  dsi_mm mm = {.k = k, .act_bf16 = act_bf16, .nth = dsi_pool_size(pool)};
  size_t ws_bytes = dsi_mm_run_bytes(mm.nth, 1, m, COLS, pk->kpad);
  void *ws = dsi_alloc_aligned(ws_bytes);
  dsi_gemm_fn fn;
  dsi_mm_run(pool, &mm, &g, 1, ROWS, DSI_TILE_N, ws, ws_bytes, &fn);
  int same = 1;
  for (int i = 0; i < m * ROWS; i++) same &= !!isnan(y[i]) == !!isnan(yref[i]);
  CHECKF(same, "%s (kernel %s, %s activations, m %d): NaN rows differ from the scalar oracle's",
         dsi_isa_str(k->level), dsi_gemm_kernel_name(fn), act_bf16 ? "bf16" : "f32", m);
  /* the oracle itself: rows 5 and 40 are NaN, the rest finite */
  CHECK(isnan(yref[5]) && isnan(yref[40]) && !isnan(yref[6]) && !isnan(yref[0]));
  dsi_free_aligned(ws);
  free(x);
  free(y);
  free(yref);
  free(scr);
}

int main(void) {
  dsi_dtype_init();
  CHECK(isnan(dsi_fp8_table[0x7f]) && isnan(dsi_fp8_table[0xff]) && dsi_fp8_table[0x7e] == 448.0f);
  /* random FP8 weights, one NaN of each sign */
  uint8_t *q = malloc((size_t)ROWS * COLS);
  dsi_rng r;
  dsi_rng_seed(&r, 3);
  for (int i = 0; i < ROWS * COLS; i++) q[i] = dsi_f32_to_fp8(dsi_rng_normal(&r) * 4);
  q[5 * COLS + 130] = 0x7f;
  q[40 * COLS + 3] = 0xff;
  float scales[2] = {0.01f, 0.02f}; /* one 128-row block, two column blocks */
  dsi_mat w = {.dtype = DSI_DTYPE_F8_E4M3, .rows = ROWS, .cols = COLS, .data = q, .layout = DSI_LAYOUT_ROWS,
               .block = 128, .scale_cols = 2, .scale = scales};
  dsi_mat pk;
  void *mem = dsi_alloc_aligned(dsi_pack_bytes(&w));
  dsi_pack_describe(&w, &pk, mem);
  dsi_pack_rows(&w, &pk, 0, ROWS);
  dsi_pool *pool = dsi_pool_new(2);
  for (int isa = DSI_ISA_SCALAR; isa <= DSI_ISA_AMX; isa++) {
    const dsi_kern *k = dsi_kern_get((dsi_isa)isa);
    if ((int)k->level != isa) continue; /* above what this CPU runs */
    for (int act = 0; act < 2; act++) {
      run(k, act, 1, &w, &pk, pool);
      run(k, act, 3, &w, &pk, pool);
      run(k, act, 40, &w, &pk, pool); /* AMX from here */
    }
  }
  dsi_pool_free(pool);
  dsi_free_aligned(mem);
  free(q);
  return check_done();
}
