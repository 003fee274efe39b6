/* graph: running matmuls on the thread pool — a batch of calls with the
 * same number of rows goes out as one dispatch; activations are prepared
 * once (bf16 or int8 for kernels that read them, bf16-rounded f32
 * otherwise). */
#ifndef DSI_GEMM_RUN_H
#define DSI_GEMM_RUN_H

#include "base/pool.h"
#include "kernels/gemm.h"

typedef struct dsi_gemm_ctx {
  dsi_pool *pool;
  float **scratch;   /* [threads] each >= DSI_GEMM_SCRATCH(widest cols) bytes */
  float *xr;         /* prepared activations: bf16-rounded f32 rows, bf16 rows, int8 rows + scales */
  size_t xr_len;     /* floats */
  dsi_gemm_fn *fns;  /* [max_calls] */
  int max_calls;
  int act_bf16;      /* matmuls see activations rounded to bf16 (int8 for INT8 weights on AMX) */
} dsi_gemm_ctx;

/* Run n matmuls with `rows` rows each as one dispatch. Each thread computes
 * the same share of rows (in units of `unit`, 16 or 32) of every call, so
 * outputs never overlap, also for the routed scatter whose rows of y are
 * shared between experts. Picks each call's kernel by its size. */
void dsi_gemm_batch(dsi_gemm_ctx *c, dsi_gemm *gs, int n, int rows, int unit);

#endif
