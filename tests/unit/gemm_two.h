/* tests: run a matmul kernel as the forward's team does, in two row
 * ranges on two threads, each with its own scratch (the INT8 and INT4
 * kernel tests). */
#ifndef DSI_TEST_GEMM_TWO_H
#define DSI_TEST_GEMM_TWO_H

#include "base/base.h"
#include "base/pool.h"
#include "kernels/gemm.h"

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
static void gemm_two(dsi_pool *pool, dsi_gemm_fn fn, const dsi_gemm *g, int silu) {
  int unit = silu ? 32 : DSI_TILE_N, rows = g->w->rows;
  gemm_two_job j = {.g = g, .fn = fn, .split = rows / 2 / unit * unit, .end = DSI_CEIL_DIV(rows, unit) * unit};
  for (int t = 0; t < 2; t++) j.scratch[t] = dsi_alloc_aligned(DSI_GEMM_SCRATCH(g->w->cols));
  dsi_pool_run(pool, gemm_two_share, &j);
  for (int t = 0; t < 2; t++) dsi_free_aligned(j.scratch[t]);
}

#endif
