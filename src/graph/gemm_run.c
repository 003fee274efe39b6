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
  const uint8_t *prep; /* [n] DSI_PREP_BF16: into xb; DSI_PREP_I8: into xq; NONE: rounded f32 into xr */
  uint16_t *xb;
  int8_t *xq;
  float *xq_scale;
} prep_job;

/* Prepare every call's activation rows, split over threads: bf16 or int8
 * for the kernels that read them, bf16-rounded f32 for the others, so
 * every kernel multiplies the same numbers and results do not depend on
 * which kernel a batch size picked (INT8 weights: every kernel sees the
 * activations on their row's int8 grid, which the AMX INT8 kernel needs). */
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
    int cols = g->w->cols, kpad = g->w->kpad, nr = (int)(s1 - s0);
    if (j->prep[i] == DSI_PREP_BF16)
      dsi_rows_to_bf16(x, g->ldx, rows, nr, cols, kpad, j->xb + r * kpad);
    else if (j->prep[i] == DSI_PREP_I8)
      dsi_rows_to_i8(x, g->ldx, rows, nr, cols, DSI_XQ_LD(kpad), j->xq + r * DSI_XQ_LD(kpad), j->xq_scale + r);
    else if (g->w->dtype == DSI_DTYPE_I8)
      dsi_rows_round_i8(x, g->ldx, rows, nr, cols, j->c->xr + r * cols);
    else
      dsi_rows_round_bf16(x, g->ldx, rows, nr, cols, j->c->xr + r * cols);
  }
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Run n matmuls of equal row count as one dispatch; picks each kernel and
 * prepares the activations it reads once, before. */
void dsi_gemm_batch(dsi_gemm_ctx *f, dsi_gemm *gs, int n, int rows, int unit) {
  size_t at[1024], slot[1024], total = 0, n_r = 0, n_b = 0, n_q = 0;
  uint8_t prep[1024];
  DSI_ASSERT(n <= 1024 && n <= f->max_calls);
  for (int i = 0; i < n; i++) {
    int wants = DSI_PREP_NONE;
    f->fns[i] = dsi_gemm_pick(gs[i].w, gs[i].m, f->act_bf16, &wants);
    gs[i].xb = NULL;
    gs[i].xq = NULL;
    gs[i].xq_scale = NULL;
    prep[i] = (uint8_t)wants;
    at[i] = total;
    if (wants == DSI_PREP_BF16) { slot[i] = n_b; n_b += gs[i].m; }
    else if (wants == DSI_PREP_I8) { slot[i] = n_q; n_q += gs[i].m; }
    else if (f->act_bf16) { slot[i] = n_r; n_r += gs[i].m; }
    else continue;
    total += gs[i].m;
  }
  if (total) {
    /* cols and kpad are the same for every call of a batch; rounded f32
     * rows first, then bf16 rows, int8 rows and their scales */
    size_t ldq = DSI_XQ_LD(gs[0].w->kpad);
    size_t r_bytes = align64(n_r * gs[0].w->cols * sizeof(float));
    size_t b_bytes = align64(n_b * gs[0].w->kpad * sizeof(uint16_t)), q_bytes = align64(n_q * ldq);
    DSI_ASSERT(r_bytes + b_bytes + q_bytes + n_q * sizeof(float) <= f->xr_len * sizeof(float));
    uint8_t *base = (uint8_t *)f->xr;
    uint16_t *xb = (uint16_t *)(base + r_bytes);
    int8_t *xq = (int8_t *)(base + r_bytes + b_bytes);
    float *xq_scale = (float *)(base + r_bytes + b_bytes + q_bytes);
    prep_job pj = {f, gs, n, (long)total, at, slot, prep, xb, xq, xq_scale};
    dsi_pool_run(f->pool, prep_task, &pj);
    for (int i = 0; i < n; i++) {
      if (prep[i] == DSI_PREP_BF16) {
        gs[i].xb = xb + slot[i] * gs[i].w->kpad;
      } else if (prep[i] == DSI_PREP_I8) {
        gs[i].xq = xq + slot[i] * ldq;
        gs[i].xq_scale = xq_scale + slot[i];
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
