/* graph: running matmul batches on the thread pool (see gemm_run.h). */
#include "graph/gemm_run.h"
#include "base/base.h"

/* Every matmul in the batch has `rows` rows; each thread computes the same
 * share [r0, r1) of every one, so outputs never overlap (also for the
 * routed scatter, whose rows of y are shared between experts). */
typedef struct {
  dsi_gemm_ctx *c;
  const dsi_gemm *gs;
  dsi_gemm_fn *fns;
  int n, rows, unit;
} gemm_job;

static void gemm_task(void *ctx, int ith, int nth) {
  gemm_job *j = ctx;
  long u0, u1, units = DSI_CEIL_DIV(j->rows, j->unit);
  dsi_split(units, ith, nth, &u0, &u1);
  int r0 = (int)(u0 * j->unit), r1 = (int)DSI_MIN(u1 * j->unit, (long)j->rows);
  if (r0 >= r1) return;
  for (int i = 0; i < j->n; i++)
    if (j->gs[i].m > 0) j->fns[i](&j->gs[i], r0, r1, j->c->scratch[ith]);
}

typedef struct {
  dsi_gemm_ctx *c;
  dsi_gemm *gs;
  int n;
  long total;          /* rows of activations over all calls */
  const size_t *at;    /* [n] first prepared row of call i, counting all calls */
  const size_t *slot;  /* [n] first row of call i in its own buffer */
  const uint8_t *to_bf16; /* [n] 1: bf16 into xb; 0: rounded f32 into xr */
  uint16_t *xb;
} prep_job;

/* Prepare every call's activation rows, split over threads: bf16 for the
 * kernels that read it, bf16-rounded f32 for the others, so every kernel
 * multiplies the same numbers and results do not depend on which kernel a
 * batch size picked. */
static void prep_task(void *ctx, int ith, int nth) {
  prep_job *j = ctx;
  long a, e;
  dsi_split(j->total, ith, nth, &a, &e);
  for (int i = 0; i < j->n && a < e; i++) {
    dsi_gemm *g = &j->gs[i];
    long lo = (long)j->at[i], hi = lo + g->m;
    if (hi <= a || lo >= e) continue;
    long s0 = DSI_MAX(a, lo), s1 = DSI_MIN(e, hi);
    const float *x = g->x_rows ? g->x : g->x + (size_t)(s0 - lo) * g->ldx;
    const int32_t *rows = g->x_rows ? g->x_rows + (s0 - lo) : NULL;
    size_t r = j->slot[i] + (size_t)(s0 - lo);
    if (j->to_bf16[i])
      dsi_rows_to_bf16(x, g->ldx, rows, (int)(s1 - s0), g->w->cols, g->w->kpad, j->xb + r * g->w->kpad);
    else
      dsi_rows_round_bf16(x, g->ldx, rows, (int)(s1 - s0), g->w->cols, j->c->xr + r * g->w->cols);
  }
}

/* Run n matmuls of equal row count as one dispatch; picks each kernel and
 * prepares the activations it reads once, before. */
void dsi_gemm_batch(dsi_gemm_ctx *f, dsi_gemm *gs, int n, int rows, int unit) {
  size_t at[1024], slot[1024], total = 0, n_r = 0, n_b = 0;
  uint8_t to_bf16[1024];
  DSI_ASSERT(n <= 1024 && n <= f->max_calls);
  for (int i = 0; i < n; i++) {
    int wants = 0;
    f->fns[i] = dsi_gemm_pick(gs[i].w, gs[i].m, f->act_bf16, &wants);
    gs[i].xb = NULL;
    to_bf16[i] = (uint8_t)wants;
    at[i] = total;
    if (wants) { slot[i] = n_b; n_b += gs[i].m; }
    else if (f->act_bf16) { slot[i] = n_r; n_r += gs[i].m; }
    else continue;
    total += gs[i].m;
  }
  if (total) {
    /* cols and kpad are the same for every call of a batch; rounded f32
     * rows first, bf16 rows after them */
    size_t r_bytes = (n_r * gs[0].w->cols * sizeof(float) + 63) & ~(size_t)63;
    DSI_ASSERT(r_bytes + n_b * gs[0].w->kpad * sizeof(uint16_t) <= f->xr_len * sizeof(float));
    uint16_t *xb = (uint16_t *)((uint8_t *)f->xr + r_bytes);
    prep_job pj = {f, gs, n, (long)total, at, slot, to_bf16, xb};
    dsi_pool_run(f->pool, prep_task, &pj);
    for (int i = 0; i < n; i++) {
      if (to_bf16[i]) {
        gs[i].xb = xb + slot[i] * gs[i].w->kpad;
      } else if (f->act_bf16) {
        gs[i].x = f->xr + slot[i] * gs[i].w->cols;
        gs[i].ldx = gs[i].w->cols;
        gs[i].x_rows = NULL;
      }
    }
  }
  gemm_job j = {f, gs, f->fns, n, rows, unit};
  dsi_pool_run(f->pool, gemm_task, &j);
}

