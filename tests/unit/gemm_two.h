/* tests: run a matmul kernel as the forward's team does, in two row
 * ranges on two threads, each with its own scratch, and a batch of calls
 * through the driver against each call alone (the INT8 and INT4 kernel
 * tests). */
#ifndef DSI_TEST_GEMM_TWO_H
#define DSI_TEST_GEMM_TWO_H

#include "base/base.h"
#include "base/pool.h"
#include "kernels/gemm.h"
#include "graph/matmul.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  const dsi_gemm *g;
  dsi_gemm_fn fn;
  int split, end;
  void *scratch[2];
} gemm_two_job;

static void gemm_two_share(void *ctx, int ith, int nth) {
  gemm_two_job *j = ctx;
  (void)nth;
  int r0 = ith ? j->split : 0, r1 = ith ? j->end : j->split;
  if (r0 < r1) j->fn(j->g, r0, r1, j->scratch[ith]);
}

/* fn over all of g's rows, split at a unit boundary (32 rows for SiLU pairs) on pool's 2 threads */
static inline void gemm_two(dsi_pool *pool, dsi_gemm_fn fn, const dsi_gemm *g, int silu) {
  int unit = silu ? 32 : DSI_TILE_N, rows = g->w->rows;
  gemm_two_job j = {.g = g, .fn = fn, .split = rows / 2 / unit * unit, .end = DSI_CEIL_DIV(rows, unit) * unit};
  for (int t = 0; t < 2; t++) j.scratch[t] = dsi_alloc_aligned(DSI_GEMM_SCRATCH(g->w->cols));
  dsi_pool_run(pool, gemm_two_share, &j);
  for (int t = 0; t < 2; t++) dsi_free_aligned(j.scratch[t]);
}

/* The routed experts' batch as the driver runs it (dsi_mm_run over calls
 * gathering `per` rows each from x, [*, cols], SiLU pairs of pk), against
 * each call alone (dsi_mm_one, which prepares its own gathered rows): 1
 * where every output is bitwise the same. *kernel: what the batch ran. */
static inline int batch_vs_alone(dsi_pool *pool, const dsi_mm *mm, const dsi_mat *pk, const float *x, int cols,
                          const int32_t *x_rows, int calls, int per, const char **kernel) {
  const int total = calls * per, outs = pk->rows / 2;
  float *y = dsi_xcalloc((size_t)total * outs, sizeof(float)), *yone = dsi_xcalloc((size_t)total * outs, sizeof(float));
  dsi_gemm gs[8];
  DSI_ASSERT(calls <= 8);
  for (int c = 0; c < calls; c++)
    gs[c] = (dsi_gemm){.w = pk, .x = x, .ldx = cols, .x_rows = x_rows + c * per, .m = per,
                       .y = y + (size_t)c * per * outs, .ldy = outs, .epi = DSI_EPI_SILU_PAIRS};
  size_t ws_bytes = dsi_mm_run_bytes(mm->nth, calls, total, cols, pk->kpad);
  void *ws = dsi_alloc_aligned(ws_bytes);
  dsi_gemm_fn fns[8];
  dsi_mm_run(pool, mm, gs, calls, pk->rows, 2 * DSI_TILE_N, ws, ws_bytes, fns);
  size_t prep_bytes = dsi_mm_prep_bytes(per, cols, pk->kpad, 1);
  void *prep = dsi_alloc_aligned(prep_bytes), *scr = dsi_alloc_aligned(DSI_GEMM_SCRATCH(pk->kpad));
  for (int c = 0; c < calls; c++) {
    dsi_gemm g = gs[c];
    g.y = yone + (size_t)c * per * outs;
    dsi_mm_one(mm, &g, 0, pk->rows, prep, prep_bytes, scr, 0, NULL);
  }
  int same = !memcmp(y, yone, (size_t)total * outs * sizeof(float));
  *kernel = dsi_gemm_kernel_name(fns[0]);
  dsi_free_aligned(ws), dsi_free_aligned(prep), dsi_free_aligned(scr);
  free(y), free(yone);
  return same;
}

#if DSI_HAVE_AVX512
/* g's rows staged for the AVX-512 kernel's f32 route (dsi_gemm_pairs_stage)
 * in two ranges, the later first, as two threads stage them; *intact: the
 * 64 bytes past DSI_XF_FLOATS(m, cols) are as they were. Free with
 * dsi_free_aligned. */
static inline float *pairs_staged(const dsi_gemm *g, int *intact) {
  const size_t n = DSI_XF_FLOATS(g->m, g->w->cols);
  float *xf = dsi_alloc_aligned((n + 16) * sizeof(float));
  memset(xf, 0x7f, (n + 16) * sizeof(float));
  dsi_gemm_pairs_stage(g, g->m / 3, g->m, 0, xf);
  dsi_gemm_pairs_stage(g, 0, g->m / 3, 0, xf);
  const uint8_t *tail = (const uint8_t *)(xf + n);
  *intact = 1;
  for (int b = 0; b < 64; b++) *intact &= tail[b] == 0x7f;
  return xf;
}

/* g's rows staged rounded to bf16 on the way: bitwise the rows
 * dsi_rows_round_bf16 rounds, staged as they are */
static inline int pairs_round_same(const dsi_gemm *g, const struct dsi_vec_ops *v) {
  const int cols = g->w->cols;
  const size_t n = DSI_XF_FLOATS(g->m, cols);
  float *a = dsi_alloc_aligned(n * sizeof(float)), *b = dsi_alloc_aligned(n * sizeof(float));
  float *r = dsi_xmalloc((size_t)g->m * cols * sizeof(float));
  dsi_gemm_pairs_stage(g, 0, g->m, 1, a);
  dsi_rows_round_bf16(v, g->x, g->ldx, g->x_rows, g->m, cols, r);
  dsi_gemm gr = *g;
  gr.x = r, gr.ldx = cols, gr.x_rows = NULL;
  dsi_gemm_pairs_stage(&gr, 0, g->m, 0, b);
  int same = !memcmp(a, b, n * sizeof(float));
  dsi_free_aligned(a), dsi_free_aligned(b), free(r);
  return same;
}
#endif

#endif
