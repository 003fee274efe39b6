/* graph: the op kernels — what each recorded op computes when an executor
 * runs it on a team of workers — in data-flow order: matmuls on a team,
 * embedding and norms, MLA attention, MLP and MoE; then the op table and
 * each op's cost for the profile. Ops never allocate: their tensors and
 * workspaces come from the executor. */
#include "graph/exec.h"
#include "graph/mla_prefill.h"
#include "graph/prof.h"
#include "kernels/attn.h"
#include "kernels/vec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- matmuls on a team ---- */
static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t dsi_prep_bytes(long m, int cols, int kpad, int calls) {
  /* bf16 rows: each call's rounded up to a 16-row block; AMX takes calls
   * of DSI_AMX_MIN_ROWS rows and more only, so at most m / DSI_AMX_MIN_ROWS
   * calls add up to 15 rows each */
  size_t xb_rows = (size_t)m + 15 * (size_t)DSI_MIN(calls, m / DSI_AMX_MIN_ROWS + 1);
  return align64((size_t)m * cols * sizeof(float)) + align64(xb_rows * kpad * sizeof(uint16_t)) +
         align64((size_t)m * DSI_XQ_LD(kpad)) + align64((size_t)m * sizeof(float)) + 64;
}

/* Units are claimed in chunks. Streaming work (matvecs, reading weights
 * from memory) takes one contiguous chunk per thread of the pool: each
 * chunk starts its streams afresh (the prefetch ramp, and per call the
 * kernel's set-up), and on the FP8 decode step, side by side, halves beat
 * eighths by 3% (the routed experts' row-major units, six matrices a
 * chunk, by 13%). Compute-bound work (AMX) takes a few chunks per thread,
 * which keeps the team balanced when one core runs slower. */
static long claim_chunk(long units, int nth, int streaming) { return DSI_MAX(1, units / ((streaming ? 1l : 4l) * nth)); }

/* Units of a batch of n matmuls: row-major, unit u is rows [u unit, (u + 1)
 * unit) of every call (the routed experts' scatter-add, where calls add
 * into the same outputs and one thread must own an output row in every
 * call); or call-major (flat), unit u is a row range of call u / upc alone,
 * so a claimed range runs as a few long kernel calls instead of n short
 * ones (W_UK, W_UV: 16 heads of 128 KiB, cut into 16 KiB calls before). */
static void run_units(const dsi_gemm *gs, const dsi_gemm_fn *fns, int n, int rows, int unit, int flat, long u0,
                      long u1, void *scratch) {
  if (flat) {
    const long upc = DSI_CEIL_DIV(rows, unit);
    for (long i = u0 / upc; i < n && i * upc < u1; i++) {
      long a = DSI_MAX(u0, i * upc) - i * upc, b = DSI_MIN(u1, (i + 1) * upc) - i * upc;
      if (gs[i].m > 0 && a < b) fns[i](&gs[i], (int)(a * unit), (int)DSI_MIN(b * unit, (long)rows), scratch);
    }
    return;
  }
  int r0 = (int)(u0 * unit), r1 = (int)DSI_MIN(u1 * unit, (long)rows);
  if (r0 >= r1) return;
  for (int i = 0; i < n; i++)
    if (gs[i].m > 0) fns[i](&gs[i], r0, r1, scratch);
}

/* Work of units claimed in chunks from the op's counter by the team and by
 * helpers; the team's threads return when every unit is finished. */
typedef void (*units_fn)(void *ctx, long u0, long u1, float *scratch);

static void claim_units(dsi_team *tm, const dsi_fctx *f, long units, int streaming, units_fn run, void *ctx) {
  dsi_opstate *st = tm->st;
  if (tm->helper && !atomic_load_explicit(&st->ready, memory_order_acquire)) return;
  if (!tm->helper && tm->ith == 0) {
    atomic_store_explicit(&st->units, units, memory_order_relaxed);
    atomic_store_explicit(&st->ready, 1, memory_order_release);
    if (tm->open) atomic_store_explicit(tm->open, tm->op, memory_order_release);
  }
  long chunk = claim_chunk(units, f->nth, streaming);
  float *scratch = f->scratch[tm->tid];
  for (;;) {
    long u0 = atomic_fetch_add_explicit(&st->next, chunk, memory_order_relaxed);
    if (u0 >= units) break;
    long u1 = DSI_MIN(units, u0 + chunk);
    run(ctx, u0, u1, scratch);
    atomic_fetch_add_explicit(&st->finished, u1 - u0, memory_order_release);
  }
  if (tm->helper) return;
  for (int spins = 0; atomic_load_explicit(&st->finished, memory_order_acquire) < units;) dsi_spin_pause(&spins);
}

typedef struct {
  const dsi_gemm *gs;
  const dsi_gemm_fn *fns;
  int n, rows, unit, flat;
} gemm_units;

static void gemm_units_run(void *ctx, long u0, long u1, float *scratch) {
  gemm_units *g = ctx;
  run_units(g->gs, g->fns, g->n, g->rows, g->unit, g->flat, u0, u1, scratch);
}

/* How a call's activations are prepared for its kernel. */
enum { P_NONE, P_ROUND, P_BF16, P_I8 };

/* rows [s0, s1) of call g's activations prepared as `kind` says into the
 * call's own buffers: bf16 tiles at xb, int8 rows at xq (row stride ldq)
 * with their scales, or rounded f32 rows at xr */
static void prep_rows(const dsi_gemm *g, int kind, long s0, long s1, size_t ldq, float *xr, uint16_t *xb, int8_t *xq,
                      float *xq_scale) {
  int cols = g->w->cols, kpad = g->w->kpad, nr = (int)(s1 - s0);
  const float *x = g->x_rows ? g->x : g->x + (size_t)s0 * g->ldx;
  const int32_t *rows = g->x_rows ? g->x_rows + s0 : NULL;
  if (kind == P_BF16) dsi_rows_to_bf16_tiles(x, g->ldx, rows, nr, cols, kpad, (int)s0, g->m, xb);
  else if (kind == P_I8) dsi_rows_to_i8(x, g->ldx, rows, nr, cols, (int)ldq, xq + s0 * ldq, xq_scale + s0);
  else if (g->w->dtype == DSI_DTYPE_I8) dsi_rows_round_i8(x, g->ldx, rows, nr, cols, xr + s0 * cols);
  else dsi_rows_round_bf16(x, g->ldx, rows, nr, cols, xr + s0 * cols);
}

void dsi_gemm_one(const dsi_fctx *f, dsi_gemm *g, int r0, int r1, void *ws, size_t ws_bytes, void *scratch,
                  int x_ready, const uint16_t *xb_ready) {
  int wants = DSI_PREP_NONE;
  dsi_gemm_fn fn = dsi_gemm_pick(g->w, g->m, f->act_bf16, &wants);
  int kind = wants == DSI_PREP_BF16 ? (xb_ready ? P_NONE : P_BF16)
             : wants == DSI_PREP_I8 ? P_I8
             : f->act_bf16 && !x_ready ? P_ROUND
                                      : P_NONE;
  size_t ldq = DSI_XQ_LD(g->w->kpad);
  g->xb = wants == DSI_PREP_BF16 ? xb_ready : NULL;
  g->xq = NULL;
  g->xq_scale = NULL;
  if (kind != P_NONE) {
    DSI_ASSERT(dsi_prep_bytes(g->m, g->w->cols, g->w->kpad, 1) <= ws_bytes);
    uint8_t *base = ws;
    float *xr = ws;
    uint16_t *xb = ws;
    int8_t *xq = ws;
    float *xq_scale = (float *)(base + align64((size_t)g->m * ldq));
    prep_rows(g, kind, 0, g->m, ldq, xr, xb, xq, xq_scale);
    if (kind == P_BF16) g->xb = xb;
    else if (kind == P_I8) g->xq = xq, g->xq_scale = xq_scale;
    else g->x = xr, g->ldx = g->w->cols, g->x_rows = NULL;
  }
  fn(g, r0, r1, scratch);
}

void dsi_gemm_team(dsi_team *tm, const dsi_fctx *f, dsi_gemm *gs, dsi_gemm_fn *fns, int n, int rows, int unit,
                   void *ws, size_t ws_bytes, int claim, int x_ready, const uint16_t *xb_ready) {
  /* every thread lays out the same plan: kernel, and where its prepared rows go */
  size_t n_r = 0, n_b = 0, n_q = 0;
  int any_prep = 0, streaming = 1;
  uint8_t prep[1024];
  size_t slot[1024];
  DSI_ASSERT(n <= 1024);
  for (int i = 0; i < n; i++) {
    int wants = DSI_PREP_NONE;
    fns[i] = dsi_gemm_pick(gs[i].w, gs[i].m, f->act_bf16, &wants);
    gs[i].xb = NULL;
    gs[i].xq = NULL;
    gs[i].xq_scale = NULL;
    if (wants == DSI_PREP_BF16 && xb_ready) {
      gs[i].xb = xb_ready;
      prep[i] = P_NONE;
    } else if (wants == DSI_PREP_BF16) {
      prep[i] = P_BF16, slot[i] = n_b, n_b += DSI_XB_ROWS(gs[i].m);
    } else if (wants == DSI_PREP_I8) {
      prep[i] = P_I8, slot[i] = n_q, n_q += gs[i].m;
    } else if (f->act_bf16 && !x_ready) {
      prep[i] = P_ROUND, slot[i] = n_r, n_r += gs[i].m;
    } else {
      prep[i] = P_NONE;
    }
    any_prep |= prep[i] != P_NONE;
    streaming &= wants != DSI_PREP_BF16 && wants != DSI_PREP_I8; /* not AMX */
  }
  if (any_prep) {
    /* cols and kpad are the same for every call of a batch */
    int cols = gs[0].w->cols, kpad = gs[0].w->kpad;
    size_t ldq = DSI_XQ_LD(kpad);
    size_t r_bytes = align64(n_r * cols * sizeof(float)), b_bytes = align64(n_b * kpad * sizeof(uint16_t));
    size_t q_bytes = align64(n_q * ldq);
    DSI_ASSERT(r_bytes + b_bytes + q_bytes + n_q * sizeof(float) <= ws_bytes);
    uint8_t *base = ws;
    float *xr = (float *)base;
    uint16_t *xb = (uint16_t *)(base + r_bytes);
    int8_t *xq = (int8_t *)(base + r_bytes + b_bytes);
    float *xq_scale = (float *)(base + r_bytes + b_bytes + q_bytes);
    if (!tm->helper) {
      /* prepare every call's rows, split over the team */
      long total = (long)(n_r + n_b + n_q), a, e, at = 0;
      dsi_split(total, tm->ith, tm->nth, &a, &e);
      for (int i = 0; i < n && a < e; i++) {
        if (prep[i] == P_NONE) continue;
        long lo = at, hi = at + gs[i].m;
        at = hi;
        if (hi <= a || lo >= e) continue;
        prep_rows(&gs[i], prep[i], DSI_MAX(a, lo) - lo, DSI_MIN(e, hi) - lo, ldq, xr + slot[i] * cols,
                  xb + slot[i] * kpad, xq + slot[i] * ldq, xq_scale + slot[i]);
      }
    }
    for (int i = 0; i < n; i++) {
      if (prep[i] == P_BF16) {
        gs[i].xb = xb + slot[i] * kpad;
      } else if (prep[i] == P_I8) {
        gs[i].xq = xq + slot[i] * ldq;
        gs[i].xq_scale = xq_scale + slot[i];
      } else if (prep[i] == P_ROUND) {
        gs[i].x = xr + slot[i] * cols;
        gs[i].ldx = cols;
        gs[i].x_rows = NULL;
      }
    }
    if (!tm->helper) dsi_barrier_wait(tm->bar);
  }
  int flat = n > 1;
  for (int i = 0; i < n; i++) flat &= gs[i].epi != DSI_EPI_SCATTER_ADD;
  long units = DSI_CEIL_DIV(rows, unit) * (flat ? n : 1);
  if (!claim) {
    long u0, u1;
    dsi_split(units, tm->ith, tm->nth, &u0, &u1);
    run_units(gs, fns, n, rows, unit, flat, u0, u1, f->scratch[tm->tid]);
    return;
  }
  gemm_units gu = {gs, fns, n, rows, unit, flat};
  claim_units(tm, f, units, streaming, gemm_units_run, &gu);
}
typedef struct {
  const dsi_fctx *f;
  const dsi_gemm *gs;
  int n, rows, unit;
  void *ws;
  size_t ws_bytes;
  dsi_gemm_fn *fns_out;
  dsi_barrier bar;
} gemm_run_job;

static void gemm_run_task(void *ctx, int ith, int nth) {
  gemm_run_job *j = ctx;
  dsi_gemm *gs = j->f->gl[ith]; /* dsi_gemm_team fills in where each call's prepared rows are */
  memcpy(gs, j->gs, (size_t)j->n * sizeof *gs);
  dsi_team tm = {.ith = ith, .nth = nth, .tid = ith, .bar = &j->bar};
  dsi_gemm_team(&tm, j->f, gs, j->f->gfn[ith], j->n, j->rows, j->unit, j->ws, j->ws_bytes, 0, 0, NULL);
  if (ith == 0 && j->fns_out) memcpy(j->fns_out, j->f->gfn[0], (size_t)j->n * sizeof *j->fns_out);
}

void dsi_gemm_run(dsi_pool *pool, const dsi_fctx *f, const dsi_gemm *gs, int n, int rows, int unit, void *ws,
                  size_t ws_bytes, dsi_gemm_fn *fns_out) {
  DSI_ASSERT(n <= f->max_calls && dsi_pool_size(pool) <= f->nth);
  gemm_run_job j = {f, gs, n, rows, unit, ws, ws_bytes, fns_out, {0}};
  dsi_barrier_init(&j.bar, dsi_pool_size(pool));
  dsi_pool_run(pool, gemm_run_task, &j);
}

int dsi_fctx_workers(dsi_fctx *f, int nth, int max_calls, size_t scratch_floats) {
  f->nth = nth;
  f->max_calls = max_calls;
  f->scratch = dsi_xcalloc(nth, sizeof(float *));
  f->gl = dsi_xcalloc(nth, sizeof(dsi_gemm *));
  f->gfn = dsi_xcalloc(nth, sizeof(dsi_gemm_fn *));
  int ok = 1;
  for (int i = 0; i < nth; i++) {
    f->scratch[i] = dsi_alloc_aligned(scratch_floats * sizeof(float));
    f->gl[i] = dsi_xcalloc(max_calls, sizeof(dsi_gemm));
    f->gfn[i] = dsi_xcalloc(max_calls, sizeof(dsi_gemm_fn));
    ok &= f->scratch[i] != NULL;
  }
  return ok ? DSI_OK : DSI_E_NOMEM;
}

void dsi_fctx_workers_free(dsi_fctx *f) {
  for (int i = 0; f->scratch && i < f->nth; i++) {
    dsi_free_aligned(f->scratch[i]);
    free(f->gl[i]);
    free(f->gfn[i]);
  }
  free(f->scratch);
  free(f->gl);
  free(f->gfn);
  f->scratch = NULL;
  f->gl = NULL;
  f->gfn = NULL;
}

/* this thread's matmul list */
#define GL(r, tm) ((r)->f->gl[(tm)->tid])
#define GFN(r, tm) ((r)->f->gfn[(tm)->tid])

/* ---- embedding, norms, adds ---- */
static void op_embed(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_model *m = r->f->m;
  int D = r->f->c->hidden_size;
  float *x = XT(r, op->out[0]);
  long a, e;
  dsi_split(r->T, tm->ith, tm->nth, &a, &e);
  for (long t = a; t < e; t++) {
    DSI_ASSERT(r->b->pos[t] >= 0 && r->b->pos[t] < r->f->max_context);
    dsi_k_row_f32(&m->embed_tokens, r->b->tokens[t], 0, D, x + t * D);
  }
}

/* dst[i] = rmsnorm(src[rows[i]]); fused: src[row] += y[row] first, and the
 * result rounded to bf16 values with its bf16 rows written beside */
static void op_rmsnorm(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  int D = op->epi; /* row width */
  int n = (op->flags & DSI_ROWS_LOGITS) ? r->b->n_logits : r->T;
  const int32_t *rows = (op->flags & DSI_ROWS_LOGITS) ? r->b->logit_rows : NULL;
  float *src = XT(r, op->in[0]), *dst = XT(r, op->out[0]);
  const float *y = (op->flags & DSI_FUSE_ADD) ? XT(r, op->in[1]) : NULL;
  int quant = op->flags & DSI_FUSE_QUANT;
  int bf16_rows = quant && op->out[1] >= 0 && dsi_gemm_amx_rows(n, r->f->act_bf16);
  const dsi_vec_ops *v = dsi_vec();
  long a, e;
  dsi_split(n, tm->ith, tm->nth, &a, &e);
  for (long i = a; i < e; i++) {
    long row = rows ? rows[i] : i;
    if (y) v->add(src + row * D, y + row * D, D);
    dsi_k_rmsnorm(src + row * D, op->vec, D, r->f->c->rms_norm_eps, dst + i * D);
    if (quant) {
      dsi_rows_round_bf16(dst + i * D, D, NULL, 1, D, dst + i * D);
      if (bf16_rows) dsi_rows_to_bf16_tiles(dst + i * D, D, NULL, 1, D, op->w->kpad, (int)i, n, (uint16_t *)XT(r, op->out[1]));
    }
  }
}

static void op_add(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  long n = (long)r->T * op->epi, a, e;
  dsi_split(n / 16, tm->ith, tm->nth, &a, &e); /* whole 64-byte lines per thread */
  a *= 16;
  e = tm->ith == tm->nth - 1 ? n : e * 16;
  dsi_vec()->add((float *)XT(r, op->out[0]) + a, (const float *)XT(r, op->in[1]) + a, e - a);
}

/* ---- matmuls ---- */
typedef struct {
  const dsi_mat *w;
  const float *x;
  float *y;
  int ldy, m;
} rowmajor_units;

static void rowmajor_run(void *ctx, long u0, long u1, float *scratch) {
  rowmajor_units *u = ctx;
  int r0 = (int)(u0 * DSI_TILE_N), r1 = (int)DSI_MIN(u1 * DSI_TILE_N, (long)u->w->rows);
  dsi_k_matmul_rows(u->w, r0, r1, u->x, u->w->cols, u->y + r0, u->ldy, u->m, scratch);
}

static void op_matmul(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_mat *w = op->w;
  int m = (op->flags & DSI_ROWS_LOGITS) ? r->b->n_logits : r->T;
  const float *x = XT(r, op->in[0]);
  float *y = XT(r, op->out[0]);
  int ldy = op->epi == DSI_EPI_SILU_PAIRS ? w->rows / 2 : w->rows;
  if (w->layout != DSI_LAYOUT_TILES) { /* rows claimed 16 at a time, as the packed kernels' */
    rowmajor_units ru = {w, x, y, ldy, m};
    claim_units(tm, r->f, DSI_CEIL_DIV(w->rows, DSI_TILE_N), 1, rowmajor_run, &ru);
    return;
  }
  dsi_gemm *gs = GL(r, tm);
  gs[0] = (dsi_gemm){.w = w, .x = x, .ldx = w->cols, .m = m, .y = y, .ldy = ldy, .epi = op->epi};
  int prepared = (op->flags & DSI_X_PREPARED) != 0, rounded = prepared || (op->flags & DSI_X_ROUNDED);
  dsi_gemm_team(tm, r->f, gs, GFN(r, tm), 1, w->rows, op->epi == DSI_EPI_SILU_PAIRS ? 32 : 16,
                op->out[1] >= 0 ? XT(r, op->out[1]) : NULL, op->out[1] >= 0 ? r->g->ts[op->out[1]].bytes : 0, 1,
                rounded, prepared && dsi_gemm_amx_rows(m, r->f->act_bf16) ? XT(r, op->in[1]) : NULL);
}

static void op_silu_mul(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  long a, e;
  float *g = XT(r, op->out[0]);
  dsi_split((long)r->T * op->epi, tm->ith, tm->nth, &a, &e);
  dsi_k_silu_mul(g + a, (const float *)XT(r, op->in[1]) + a, g + a, (int)(e - a));
}

/* ---- MLA attention ---- */
/* rotate each head's rope part of q */
static void op_rope_q(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  int H = c->num_attention_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim, qk = nope + rope;
  float *q = XT(r, op->out[0]);
  long a, e;
  dsi_split(r->T, tm->ith, tm->nth, &a, &e);
  for (long t = a; t < e; t++) {
    size_t p = (size_t)r->b->pos[t] * (rope / 2);
    for (int h = 0; h < H; h++)
      dsi_k_rope(q + ((size_t)t * H + h) * qk + nope, rope, r->f->rope_cos + p, r->f->rope_sin + p);
  }
}

/* normalize the latent, rotate k_pe, store both in each token's cache slot
 * (f32, or bf16 in the pair rows) */
static void op_kv_write(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  int kvl = c->kv_lora_rank, rope = c->qk_rope_head_dim, row = kvl + rope;
  const float *kva = XT(r, op->in[0]);
  uint16_t *pairs = r->cache->pair ? r->cache->pair[op->layer] : NULL;
  float *cache = pairs ? NULL : XT(r, op->out[0]);
  long a, e;
  dsi_split(r->T, tm->ith, tm->nth, &a, &e);
  for (long t = a; t < e; t++) {
    const float *kv = kva + t * row;
    float *dst = pairs ? r->f->scratch[tm->tid] : cache + (size_t)r->b->slot[t] * row;
    dsi_k_rmsnorm(kv, op->lw->kv_a_layernorm, kvl, c->rms_norm_eps, dst);
    memcpy(dst + kvl, kv + kvl, rope * sizeof(float));
    size_t p = (size_t)r->b->pos[t] * (rope / 2);
    dsi_k_rope(dst + kvl, rope, r->f->rope_cos + p, r->f->rope_sin + p);
    if (pairs) { /* every other element of the slot's pair row */
      uint16_t *pr = pairs + dsi_kv_pair_at(row, r->b->slot[t]);
      for (int j = 0; j < row; j++) pr[2 * j] = dsi_f32_to_bf16(dst[j]);
    }
  }
}

/* tokens of the chunk at op->t0 */
static int chunk_len(const dsi_xrun *r, const dsi_op *op) { return DSI_MAX(0, DSI_MIN(r->f->attn_chunk, r->T - op->t0)); }

/* the chunk's tokens [*lo, *hi) the absorbed form computes: all of them
 * but the non-absorbed segments at its ends (those inside are computed and
 * overwritten by the naive op, which runs after); 0 if none */
static int absorbed_range(const dsi_xrun *r, const dsi_op *op, int *lo, int *hi) {
  int a = op->t0, e = op->t0 + chunk_len(r, op);
  if (r->n_naive) {
    while (a < e && r->naive[a]) a++;
    while (e > a && r->naive[e - 1]) e--;
  }
  *lo = a;
  *hi = e;
  return e - a;
}

/* q_lat = W_UK^T q_nope per head (one batched matmul), each head's rotated
 * q_pe appended */
static void op_attn_qlat(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  int H = c->num_attention_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
  int kvl = c->kv_lora_rank, qk = nope + rope, row = kvl + rope, lo, hi;
  int n = absorbed_range(r, op, &lo, &hi), tc = lo - op->t0;
  if (n == 0) return;
  const float *q = XT(r, op->in[0]);
  float *q_lat = (float *)XT(r, op->out[0]) + (size_t)tc * H * row;
  if (!tm->helper) {
    long a, e;
    dsi_split((long)n * H, tm->ith, tm->nth, &a, &e);
    for (long i = a; i < e; i++)
      memcpy(q_lat + (size_t)i * row + kvl, q + ((size_t)lo * H + i) * qk + nope, rope * sizeof(float));
  }
  const dsi_mat *uk = r->f->uk + (size_t)op->layer * H;
  dsi_gemm *gs = GL(r, tm);
  for (int h = 0; h < H; h++)
    gs[h] = (dsi_gemm){.w = &uk[h], .x = q + ((size_t)lo * H + h) * qk, .ldx = H * qk, .m = n,
                       .y = q_lat + (size_t)h * row, .ldy = H * row, .epi = DSI_EPI_STORE};
  dsi_gemm_team(tm, r->f, gs, GFN(r, tm), H, kvl, DSI_TILE_N, XT(r, op->out[1]), r->g->ts[op->out[1]].bytes, 1, 0,
                NULL);
}

/* attn = W_UV o_lat per head */
static void op_attn_out(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  int H = c->num_attention_heads, vd = c->v_head_dim, kvl = c->kv_lora_rank, lo, hi;
  int n = absorbed_range(r, op, &lo, &hi);
  if (n == 0) return;
  const float *o_lat = (const float *)XT(r, op->in[0]) + (size_t)(lo - op->t0) * H * kvl;
  float *attn = XT(r, op->out[0]);
  const dsi_mat *uv = r->f->uv + (size_t)op->layer * H;
  dsi_gemm *gs = GL(r, tm);
  for (int h = 0; h < H; h++)
    gs[h] = (dsi_gemm){.w = &uv[h], .x = o_lat + (size_t)h * kvl, .ldx = H * kvl, .m = n,
                       .y = attn + ((size_t)lo * H + h) * vd, .ldy = H * vd, .epi = DSI_EPI_STORE};
  dsi_gemm_team(tm, r->f, gs, GFN(r, tm), H, vd, DSI_TILE_N, XT(r, op->out[1]), r->g->ts[op->out[1]].bytes, 1, 0,
                NULL);
}

/* The attention core for one token and a group of heads: each cached
 * latent row is read once and used by every head of the group, so the
 * cache is streamed H/8 times per token instead of H times. */
#define ATTN_HEAD_GROUP 8
/* A prefill segment — at least this many consecutive tokens of one
 * sequence — attends through two matmuls instead of token by token. */
#define ATTN_GEMM_MIN 16

/* the core op's tensors: out0 o_lat; workspaces out1 scores, out2 K, out3
 * V^T, out4 slots, out5 skip flags; in0 q_lat, in1 the cache */
typedef struct {
  float *q_lat, *o_lat, *att_s;
  void *att_k, *att_vt;
  int32_t *slots;
  uint8_t *skip;
  const float *cache;
  const uint16_t *pairs; /* instead of cache, where the KV layer keeps bf16 pair rows */
} core_bufs;

/* the layer's bf16 pair rows, where the cache keeps them (then it keeps
 * no f32 rows) */
static const uint16_t *core_pairs(const dsi_xrun *r, const dsi_op *op) {
  return r->cache->pair ? r->cache->pair[op->layer] : NULL;
}

static void core_tokens(dsi_xrun *r, const dsi_op *op, dsi_team *tm, const core_bufs *cb, int n) {
  const dsi_fctx *f = r->f;
  const dsi_config *c = f->c;
  int H = c->num_attention_heads, kvl = c->kv_lora_rank, row = kvl + c->qk_rope_head_dim;
  const uint16_t *pairs = core_pairs(r, op);
  /* heads per item: up to ATTN_HEAD_GROUP on the f32 rows, fewer when the
   * chunk has fewer (token, group) items than workers (decode); each item
   * reads the token's cache once, so no smaller than that. On the pair
   * rows an item takes every head it can (one pass over the cache serves
   * them all) and splits only to give each worker one. */
  int hg = pairs ? dsi_attn_pair_heads(H, n, f->nth) : (int)DSI_MAX(1, DSI_MIN(ATTN_HEAD_GROUP, (long)H * n / f->nth));
  int bs = r->cache->block_size, G = DSI_CEIL_DIV(H, hg);
  /* f32 rows: scores [ATTN_HEAD_GROUP][max_context], then each position's
   * cache row; pair rows: the AMX kernel's workspace */
  float *score = f->scratch[tm->tid];
  const float **rows = (const float **)(score + (size_t)ATTN_HEAD_GROUP * f->max_context);
  const dsi_vec_ops *v = dsi_vec();
  /* items one at a time: their cost grows with the position */
  for (long it; (it = atomic_fetch_add(&tm->st->next, 1)) < (long)n * G;) {
    int tc = (int)(it / G), t = op->t0 + tc, h0 = (int)(it % G) * hg;
    if (cb->skip[tc]) continue; /* done by the segment path */
    int nh = DSI_MIN(hg, H - h0), pos = r->b->pos[t];
    const int32_t *table = r->b->block_tables[r->b->seq[t]];
    const float *ql = cb->q_lat + ((size_t)tc * H + h0) * row; /* [q_lat | q_pe] per head */
    float *ol = cb->o_lat + ((size_t)tc * H + h0) * kvl;
    if (pairs) {
      dsi_attn_pairs a = {.cache = pairs, .table = table, .block_size = bs, .row = row, .kvl = kvl, .nh = nh,
                          .n = pos + 1};
      /* the oracle only where the ISA was capped below AMX after the cache was laid out */
      (dsi_attn_pairs_amx_ok() ? dsi_attn_pairs_amx : dsi_attn_pairs_ref)(&a, ql, row, f->softmax_scale, ol, kvl, score);
      continue;
    }
    for (int u = 0; u <= pos; u++) rows[u] = cb->cache + ((size_t)table[u / bs] * bs + u % bs) * row;
    v->attn_qk(score, f->max_context, ql, row, nh, rows, pos + 1, row, f->softmax_scale);
    for (int h = 0; h < nh; h++) {
      v->softmax(score + (size_t)h * f->max_context, pos + 1);
      memset(ol + (size_t)h * kvl, 0, kvl * sizeof(float));
    }
    v->attn_pv(ol, kvl, score, f->max_context, nh, rows, pos + 1, kvl);
  }
}

/* The segment [ts, ts + L) of the chunk: the sequence's cache is packed
 * once as K [ctx, kv_lora + rope] and V^T [kv_lora, ctx] (bf16 in bf16
 * mode, where AMX runs them); scores = [q_lat | q_pe] K^T for every
 * (token, head) row, a causal softmax, then o_lat = P V. Passes of at most
 * 64 tokens only multiply the keys their last token can see. */
static void core_segment(dsi_xrun *r, const dsi_op *op, dsi_team *tm, const core_bufs *cb, int ts, int L) {
  const dsi_fctx *f = r->f;
  const dsi_config *c = f->c;
  int H = c->num_attention_heads, kvl = c->kv_lora_rank, row = kvl + c->qk_rope_head_dim;
  int bs = r->cache->block_size, ctx = r->b->pos[ts + L - 1] + 1;
  const int32_t *table = r->b->block_tables[r->b->seq[ts]];
  dsi_dtype dt = f->act_bf16 ? DSI_DTYPE_BF16 : DSI_DTYPE_F32;
  dsi_mat K, Vt;
  if (tm->ith == 0)
    for (int u = 0; u < ctx; u++) cb->slots[u] = table[u / bs] * bs + u % bs;
  dsi_barrier_wait(tm->bar); /* the slots */
  dsi_pack_latents(dt, cb->cache, cb->pairs, row, cb->slots, ctx, row, 0, &K, cb->att_k, tm->ith, tm->nth);
  dsi_pack_latents(dt, cb->cache, cb->pairs, row, cb->slots, ctx, kvl, 1, &Vt, cb->att_vt, tm->ith, tm->nth);
  dsi_barrier_wait(tm->bar);
  int ctx_pad = Vt.kpad;
  int per = (int)DSI_MAX(1, DSI_MIN(f->att_s_len / ((size_t)H * ctx_pad), (size_t)64));
  uint8_t *prep = XT(r, op->out[6]);
  size_t prep_bytes = r->g->ts[op->out[6]].bytes;
  dsi_gemm *gs = GL(r, tm);
  dsi_gemm_fn *fns = GFN(r, tm);
  for (int l0 = 0; l0 < L; l0 += per) {
    int n = DSI_MIN(per, L - l0), tc = ts + l0 - op->t0, seen = r->b->pos[ts + l0 + n - 1] + 1;
    dsi_mat Kv = dsi_mat_panels(&K, 0, seen), Vv = Vt;
    Vv.cols = seen;
    gs[0] = (dsi_gemm){.w = &Kv, .x = cb->q_lat + (size_t)tc * H * row, .ldx = row, .m = n * H, .y = cb->att_s,
                       .ldy = ctx_pad, .epi = DSI_EPI_STORE};
    dsi_gemm_team(tm, f, gs, fns, 1, Kv.rows, DSI_TILE_N, prep, prep_bytes, 0, 0, NULL);
    dsi_barrier_wait(tm->bar);
    long a, e;
    dsi_split((long)n * H, tm->ith, tm->nth, &a, &e);
    for (long q = a; q < e; q++) {
      float *s = cb->att_s + (size_t)q * ctx_pad;
      int cnt = r->b->pos[ts + l0 + q / H] + 1;
      for (int u = 0; u < cnt; u++) s[u] *= f->softmax_scale;
      dsi_vec()->softmax(s, cnt);
      memset(s + cnt, 0, (size_t)(ctx_pad - cnt) * sizeof(float));
    }
    dsi_barrier_wait(tm->bar);
    gs[0] = (dsi_gemm){.w = &Vv, .x = cb->att_s, .ldx = ctx_pad, .m = n * H, .y = cb->o_lat + (size_t)tc * H * kvl,
                       .ldy = kvl, .epi = DSI_EPI_STORE};
    dsi_gemm_team(tm, f, gs, fns, 1, Vv.rows, DSI_TILE_N, prep, prep_bytes, 0, 0, NULL);
    dsi_barrier_wait(tm->bar); /* att_s and the prepared rows are reused */
  }
}

static void op_attn_core(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  int n = chunk_len(r, op);
  if (n == 0) return;
  core_bufs cb = {XT(r, op->in[0]), XT(r, op->out[0]), XT(r, op->out[1]), XT(r, op->out[2]), XT(r, op->out[3]),
                  XT(r, op->out[4]), XT(r, op->out[5]), XT(r, op->in[1]), core_pairs(r, op)};
  const dsi_fwd_batch *b = r->b;
  int t_end = op->t0 + n;
  /* segments: runs of consecutive positions of one sequence (not taken by
   * the non-absorbed form); every thread finds the same ones */
  for (int s = op->t0; s < t_end;) {
    int e = s + 1, naive = r->n_naive && r->naive[s];
    while (e < t_end && b->seq[e] == b->seq[s] && b->pos[e] == b->pos[e - 1] + 1 && (r->n_naive && r->naive[e]) == naive)
      e++;
    int seg = !naive && e - s >= ATTN_GEMM_MIN;
    if (tm->ith == 0) memset(cb.skip + (s - op->t0), seg || naive, e - s);
    if (seg) core_segment(r, op, tm, &cb, s, e - s);
    s = e;
  }
  dsi_barrier_wait(tm->bar); /* skip flags */
  core_tokens(r, op, tm, &cb, n);
}

/* Absorbed attention of one (token, head) with row-major kv_b_proj: the
 * query moves into latent space through W_UK, attends over the cached
 * latents and rotated keys, and leaves through W_UV. */
static void op_attn_rowmajor(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_fctx *f = r->f;
  const dsi_config *c = f->c;
  const dsi_mat *kv_b = &op->lw->kv_b_proj;
  int H = c->num_attention_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
  int vd = c->v_head_dim, kvl = c->kv_lora_rank, qk = nope + rope, row = kvl + rope;
  int bs = r->cache->block_size;
  DSI_ASSERT(!r->cache->pair); /* the engine keeps pair rows for packed models only */
  const float *qall = XT(r, op->in[0]), *cache = XT(r, op->in[1]);
  float *attn = XT(r, op->out[0]);
  float *s = f->scratch[tm->tid];
  float *q_lat = s, *o_lat = q_lat + kvl, *wrow = o_lat + kvl, *score = wrow + kvl;
  /* (token, head) items one at a time: their cost grows with the position */
  for (long p; (p = atomic_fetch_add(&tm->st->next, 1)) < (long)r->T * H;) {
    int t = (int)(p / H), h = (int)(p % H);
    const float *q = qall + ((size_t)t * H + h) * qk;
    int pos = r->b->pos[t];
    const int32_t *table = r->b->block_tables[r->b->seq[t]];
    int kb = h * (nope + vd); /* this head's rows in kv_b_proj: [k_nope | v] */
    dsi_k_matvec_t(kv_b, kb, kb + nope, q, q_lat, wrow);
    for (int u = 0; u <= pos; u++) {
      const float *kv = cache + ((size_t)table[u / bs] * bs + u % bs) * row;
      score[u] = (dsi_k_dot(q_lat, kv, kvl) + dsi_k_dot(q + nope, kv + kvl, rope)) * f->softmax_scale;
    }
    dsi_k_softmax(score, pos + 1);
    memset(o_lat, 0, kvl * sizeof(float));
    for (int u = 0; u <= pos; u++) {
      const float *kv = cache + ((size_t)table[u / bs] * bs + u % bs) * row;
      dsi_k_axpy(o_lat, kv, score[u], kvl);
    }
    dsi_k_matmul_rows(kv_b, kb + nope, kb + nope + vd, o_lat, kvl, attn + ((size_t)t * H + h) * vd, vd, 1, wrow);
  }
}

/* The prefill segments the cost model gave to the non-absorbed form (see
 * mla_prefill.h), one after another, each on the whole team. */
static void op_attn_naive(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  if (!r->n_naive) return;
  const dsi_config *c = r->f->c;
  const dsi_fwd_batch *b = r->b;
  int H = c->num_attention_heads, ldq = H * (c->qk_nope_head_dim + c->qk_rope_head_dim), ldo = H * c->v_head_dim;
  const float *q = XT(r, op->in[0]), *cache = XT(r, op->in[1]);
  float *attn = XT(r, op->out[0]);
  for (int s = 0; s < r->T;) {
    int e = s + 1;
    while (e < r->T && r->naive[s] && r->naive[e] && b->seq[e] == b->seq[s] && b->pos[e] == b->pos[e - 1] + 1) e++;
    if (r->naive[s]) {
      dsi_mla_segment seg = {.q = q + (size_t)s * ldq, .ldq = ldq, .cache = cache, .pairs = core_pairs(r, op),
                             .table = b->block_tables[b->seq[s]],
                             .block_size = r->cache->block_size, .p0 = b->pos[s], .L = e - s,
                             .out = attn + (size_t)s * ldo, .ldo = ldo};
      dsi_mla_prefill_naive(r->f->mla, tm, r->f, op->lw, &seg);
    }
    s = e;
  }
}

/* ---- MoE ---- */
static void op_router_topk(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  dsi_router_params p = {
    .n_experts = c->n_routed_experts, .top_k = c->num_experts_per_tok,
    .n_group = c->n_group, .topk_group = c->topk_group,
    .sigmoid = c->scoring_func == DSI_SCORING_SIGMOID,
    .group_limited = c->topk_method != DSI_TOPK_GREEDY,
    .group_by_top2 = c->topk_method == DSI_TOPK_NOAUX_TC,
    .normalize = c->scoring_func == DSI_SCORING_SIGMOID || c->norm_topk_prob,
    .scale = c->routed_scaling_factor,
  };
  const float *logits = XT(r, op->in[0]);
  int32_t *ids = XT(r, op->out[0]);
  float *w = XT(r, op->out[1]);
  long a, e;
  dsi_split(r->T, tm->ith, tm->nth, &a, &e);
  for (long t = a; t < e; t++)
    dsi_k_router(&p, logits + t * p.n_experts, op->lw->e_score_correction_bias, r->f->scratch[tm->tid],
                 ids + t * p.top_k, w + t * p.top_k);
}

/* group the (token, expert) pairs by expert, tokens ascending within; the
 * routed sum starts at zero */
static void op_moe_sort(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  int E = c->n_routed_experts, K = c->num_experts_per_tok, D = c->hidden_size, T = r->T;
  float *moe_y = XT(r, op->out[3]);
  long a, e;
  dsi_split((long)T * D, tm->ith, tm->nth, &a, &e);
  memset(moe_y + a, 0, (e - a) * sizeof(float));
  if (tm->ith != 0) return;
  const int32_t *ids = XT(r, op->in[0]);
  const float *w = XT(r, op->in[1]);
  int32_t *start = XT(r, op->out[0]), *tok = XT(r, op->out[1]);
  float *pw = XT(r, op->out[2]);
  memset(start, 0, (E + 1) * sizeof(int32_t));
  for (int i = 0; i < T * K; i++) start[ids[i] + 1]++;
  for (int x = 0; x < E; x++) start[x + 1] += start[x];
  int32_t cursor[1024];
  memcpy(cursor, start, E * sizeof(int32_t));
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      int x = ids[t * K + k], at = cursor[x]++;
      tok[at] = t;
      pw[at] = w[t * K + k];
    }
}

/* grouped expert matmul: every active expert in one call list, each
 * reading its tokens through [start, end) of the sorted pairs — no gather
 * copy, no per-expert launch; gate/up fused with SiLU-mul */
static void op_moe_gate_up(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  const dsi_layer_weights *lw = op->lw;
  int E = c->n_routed_experts, D = c->hidden_size, ih = lw->exp_gate_up[0].rows / 2, n = 0;
  const int32_t *start = XT(r, op->in[1]), *tok = XT(r, op->in[2]);
  const float *xn = XT(r, op->in[0]);
  float *h = XT(r, op->out[0]);
  dsi_gemm *gs = GL(r, tm);
  for (int e = 0; e < E; e++) {
    int a = start[e], cnt = start[e + 1] - a;
    if (cnt == 0) continue;
    gs[n++] = (dsi_gemm){.w = &lw->exp_gate_up[e], .x = xn, .ldx = D, .x_rows = tok + a, .m = cnt,
                         .y = h + (size_t)a * ih, .ldy = ih, .epi = DSI_EPI_SILU_PAIRS};
  }
  dsi_gemm_team(tm, r->f, gs, GFN(r, tm), n, lw->exp_gate_up[0].rows, 2 * DSI_TILE_N, XT(r, op->out[1]),
                r->g->ts[op->out[1]].bytes, 1, (op->flags & DSI_X_ROUNDED) != 0, NULL);
}

/* the down projections, the routing weight folded into the scatter-add;
 * each thread's rows of moe_y are summed in expert order whatever the batch */
static void op_moe_down(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  const dsi_layer_weights *lw = op->lw;
  int E = c->n_routed_experts, D = c->hidden_size, ih = lw->exp_gate_up[0].rows / 2, n = 0;
  const int32_t *start = XT(r, op->in[1]), *tok = XT(r, op->in[2]);
  const float *pw = XT(r, op->in[3]), *h = XT(r, op->in[0]);
  float *y = XT(r, op->out[0]);
  dsi_gemm *gs = GL(r, tm);
  for (int e = 0; e < E; e++) {
    int a = start[e], cnt = start[e + 1] - a;
    if (cnt == 0) continue;
    gs[n++] = (dsi_gemm){.w = &lw->exp_down[e], .x = h + (size_t)a * ih, .ldx = ih, .m = cnt, .y = y, .ldy = D,
                         .epi = DSI_EPI_SCATTER_ADD, .y_rows = tok + a, .y_scale = pw + a};
  }
  dsi_gemm_team(tm, r->f, gs, GFN(r, tm), n, D, DSI_TILE_N, XT(r, op->out[1]), r->g->ts[op->out[1]].bytes, 1, 0, NULL);
}

/* Row-major experts, one at a time: gather its tokens, gate and up, SiLU-mul,
 * down, scatter-add with the routing weight (the unoptimized form the
 * op-level stage replaces). Workspaces: out1 xg, out2 yg, out3 gate, out4 up. */
static void op_moe_rowmajor(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  const dsi_layer_weights *lw = op->lw;
  int E = c->n_routed_experts, D = c->hidden_size, I = c->moe_intermediate_size;
  const int32_t *start = XT(r, op->in[1]), *tok = XT(r, op->in[2]);
  const float *pw = XT(r, op->in[3]), *xn = XT(r, op->in[0]);
  float *y = XT(r, op->out[0]), *xg = XT(r, op->out[1]), *yg = XT(r, op->out[2]);
  float *hg = XT(r, op->out[3]), *hu = XT(r, op->out[4]);
  float *scratch = r->f->scratch[tm->tid];
  for (int e = 0; e < E; e++) {
    int a = start[e], n = start[e + 1] - a;
    if (n == 0) continue;
    long i0, i1;
    dsi_split(n, tm->ith, tm->nth, &i0, &i1);
    for (long i = i0; i < i1; i++) memcpy(xg + i * D, xn + (size_t)tok[a + i] * D, D * sizeof(float));
    dsi_barrier_wait(tm->bar);
    dsi_k_matmul(&lw->exp_gate[e], xg, D, hg, I, n, scratch, tm->ith, tm->nth);
    dsi_k_matmul(&lw->exp_up[e], xg, D, hu, I, n, scratch, tm->ith, tm->nth);
    dsi_barrier_wait(tm->bar);
    dsi_split((long)n * I, tm->ith, tm->nth, &i0, &i1);
    dsi_k_silu_mul(hg + i0, hu + i0, hg + i0, (int)(i1 - i0));
    dsi_barrier_wait(tm->bar);
    dsi_k_matmul(&lw->exp_down[e], hg, I, yg, D, n, scratch, tm->ith, tm->nth);
    dsi_barrier_wait(tm->bar);
    dsi_split(D, tm->ith, tm->nth, &i0, &i1); /* columns: each token row summed in expert order */
    for (int i = 0; i < n; i++) dsi_k_axpy(y + (size_t)tok[a + i] * D + i0, yg + (size_t)i * D + i0, pw[a + i], (int)(i1 - i0));
    dsi_barrier_wait(tm->bar);
  }
}

/* ---- the table ---- */
const dsi_op_fn dsi_op_fns[DSI_OP_COUNT] = {
  [DSI_OP_EMBED] = op_embed, [DSI_OP_RMSNORM] = op_rmsnorm, [DSI_OP_ADD] = op_add,
  [DSI_OP_MATMUL] = op_matmul, [DSI_OP_SILU_MUL] = op_silu_mul, [DSI_OP_ROPE_Q] = op_rope_q,
  [DSI_OP_KV_WRITE] = op_kv_write, [DSI_OP_ATTN_QLAT] = op_attn_qlat, [DSI_OP_ATTN_CORE] = op_attn_core,
  [DSI_OP_ATTN_OUT] = op_attn_out, [DSI_OP_ATTN_ROWMAJOR] = op_attn_rowmajor, [DSI_OP_ATTN_NAIVE] = op_attn_naive,
  [DSI_OP_ROUTER_TOPK] = op_router_topk, [DSI_OP_MOE_SORT] = op_moe_sort, [DSI_OP_MOE_GATE_UP] = op_moe_gate_up,
  [DSI_OP_MOE_DOWN] = op_moe_down, [DSI_OP_MOE_ROWMAJOR] = op_moe_rowmajor,
};

/* ---- costs, for the profile ---- */
static double mat_bytes(const dsi_mat *w) { return (double)w->rows * w->cols * dsi_dtype_size(w->dtype); }
#define MM_FLOPS(w, m) (2.0 * (m) * (w)->rows * (w)->cols)
#define MM_ACT(w, m) (4.0 * (m) * ((w)->rows + (w)->cols))

/* attention core over the chunk: per (token, head) the scores and weighted
 * sum over its context; the cache rows (elt bytes an element) are read
 * once per head group */
static void attn_cost(const dsi_xrun *r, int t0, int n, double head_flops, int passes, int elt, double *fl,
                      double *ab) {
  const dsi_config *c = r->f->c;
  int H = c->num_attention_heads, kvl = c->kv_lora_rank, row = kvl + c->qk_rope_head_dim;
  double ctx = 0, toks = 0;
  for (int t = t0; t < t0 + n; t++)
    if (!r->n_naive || !r->naive[t]) ctx += r->b->pos[t] + 1, toks++;
  *fl = H * (2.0 * ctx * (row + kvl) + toks * head_flops);
  *ab = (double)elt * ctx * row * passes;
}

void dsi_op_cost(const dsi_xrun *r, const dsi_op *op, double *flops, double *wbytes, double *abytes) {
  const dsi_config *c = r->f->c;
  int T = r->T, D = c->hidden_size, H = c->num_attention_heads, kvl = c->kv_lora_rank;
  int K = c->num_experts_per_tok, E = c->n_routed_experts;
  double fl = 0, wb = 0, ab = 0;
  switch (op->kind) {
  case DSI_OP_EMBED: wb = (double)T * D * dsi_dtype_size(r->f->m->embed_tokens.dtype); ab = 4.0 * T * D; break;
  case DSI_OP_RMSNORM: {
    int n = (op->flags & DSI_ROWS_LOGITS) ? r->b->n_logits : T;
    fl = 4.0 * n * op->epi;
    ab = (op->flags & DSI_FUSE_ADD ? 16.0 : 8.0) * n * op->epi;
    break;
  }
  case DSI_OP_ADD: fl = (double)T * op->epi; ab = 12.0 * T * op->epi; break;
  case DSI_OP_SILU_MUL: fl = 5.0 * T * op->epi; ab = 12.0 * T * op->epi; break;
  case DSI_OP_MATMUL: {
    int m = (op->flags & DSI_ROWS_LOGITS) ? r->b->n_logits : T;
    fl = MM_FLOPS(op->w, m);
    wb = mat_bytes(op->w);
    ab = MM_ACT(op->w, m);
    break;
  }
  case DSI_OP_ROPE_Q: fl = 3.0 * T * H * c->qk_rope_head_dim; ab = 8.0 * T * H * c->qk_rope_head_dim; break;
  case DSI_OP_KV_WRITE: fl = 4.0 * T * (kvl + c->qk_rope_head_dim); ab = 8.0 * T * (kvl + c->qk_rope_head_dim); break;
  case DSI_OP_ATTN_NAIVE: {
    /* per segment: the context expanded per head, then scores and P V per (token, head, key) */
    int nope = c->qk_nope_head_dim, vd = c->v_head_dim, qk = nope + c->qk_rope_head_dim;
    for (int t = 0; t < T && r->n_naive; t++) {
      if (!r->naive[t]) continue;
      int first = t == 0 || !r->naive[t - 1] || r->b->seq[t - 1] != r->b->seq[t];
      if (first) {
        fl += 2.0 * (r->b->pos[t] + 1) * H * kvl * (nope + vd); /* roughly: the context up to the segment */
        wb += mat_bytes(&op->lw->w_uk) + mat_bytes(&op->lw->w_uv);
      }
      fl += 2.0 * H * (r->b->pos[t] + 1) * (qk + vd);
      ab += 4.0 * H * (qk + vd);
    }
    break;
  }
  case DSI_OP_ATTN_QLAT:
  case DSI_OP_ATTN_OUT: {
    const dsi_mat *w = op->kind == DSI_OP_ATTN_QLAT ? &op->lw->w_uk_t : &op->lw->w_uv;
    int lo, hi, n = absorbed_range(r, op, &lo, &hi);
    fl = MM_FLOPS(w, n);
    wb = n ? mat_bytes(w) : 0;
    ab = MM_ACT(w, n);
    break;
  }
  case DSI_OP_ATTN_CORE:
    if (core_pairs(r, op))
      attn_cost(r, op->t0, chunk_len(r, op), 0, DSI_CEIL_DIV(H, dsi_attn_pair_heads(H, chunk_len(r, op), r->f->nth)), 2, &fl, &ab);
    else attn_cost(r, op->t0, chunk_len(r, op), 0, DSI_CEIL_DIV(H, ATTN_HEAD_GROUP), 4, &fl, &ab);
    break;
  case DSI_OP_ATTN_ROWMAJOR:
    attn_cost(r, 0, T, 2.0 * kvl * (c->qk_nope_head_dim + c->v_head_dim), H, 4, &fl, &ab);
    wb = mat_bytes(&op->lw->kv_b_proj);
    break;
  case DSI_OP_ROUTER_TOPK: ab = 4.0 * T * E; break;
  case DSI_OP_MOE_SORT: ab = 8.0 * T * K + 4.0 * T * D; break;
  case DSI_OP_MOE_GATE_UP:
  case DSI_OP_MOE_DOWN:
  case DSI_OP_MOE_ROWMAJOR: {
    const int32_t *start = XT(r, op->in[1]);
    int active = 0;
    for (int e = 0; e < E; e++) active += start[e + 1] > start[e];
    if (op->kind == DSI_OP_MOE_ROWMAJOR) {
      const dsi_mat *g = &op->lw->exp_gate[0], *d = &op->lw->exp_down[0];
      fl = 2 * MM_FLOPS(g, T * K) + MM_FLOPS(d, T * K);
      wb = active * (2 * mat_bytes(g) + mat_bytes(d));
      ab = 2 * MM_ACT(g, T * K) + MM_ACT(d, T * K);
    } else {
      const dsi_mat *w = op->kind == DSI_OP_MOE_GATE_UP ? &op->lw->exp_gate_up[0] : &op->lw->exp_down[0];
      fl = MM_FLOPS(w, T * K);
      wb = active * mat_bytes(w);
      ab = MM_ACT(w, T * K);
    }
    break;
  }
  case DSI_OP_COUNT: break;
  }
  *flops = fl;
  *wbytes = wb;
  *abytes = ab;
}
