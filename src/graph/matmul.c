/* graph: the matmul team driver (see matmul.h), in the order a batch runs:
 * how much memory it takes, claiming work, preparing activations, the
 * team's run, one matmul alone, and a dispatch outside a graph. */
#include "graph/matmul.h"
#include "dsinfer.h"

#include "base/base.h"
#include "kernels/vec.h"

#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* ---- memory ---- */
size_t dsi_mm_thread_bytes(int calls, int kpad) {
  return align64((size_t)calls * sizeof(dsi_gemm)) + align64((size_t)calls * sizeof(dsi_gemm_fn)) +
         align64(DSI_GEMM_SCRATCH(kpad));
}

dsi_mm_thread dsi_mm_thread_at(void *mem, int calls) {
  uint8_t *p = mem;
  dsi_mm_thread t = {(dsi_gemm *)p, NULL, NULL};
  p += align64((size_t)calls * sizeof(dsi_gemm));
  t.fns = (dsi_gemm_fn *)p;
  t.scratch = p + align64((size_t)calls * sizeof(dsi_gemm_fn));
  return t;
}

/* bytes a row takes in the region of rows prepared in f32 (rounded) or
 * as int16: a call's int16 rows, then their scales, fill m of them */
static size_t wide_row_bytes(int cols, int kpad) {
  return DSI_MAX(DSI_XF_FLOATS(1, cols) * sizeof(float), DSI_XQ_LD(kpad) * sizeof(int16_t) + sizeof(float));
}

size_t dsi_mm_prep_bytes(long m, int cols, int kpad, int calls) {
  /* bf16 rows: each call's rounded up to a 16-row block; AMX takes calls
   * of DSI_AMX_MIN_ROWS rows and more only, so at most m / DSI_AMX_MIN_ROWS
   * calls add up to 15 rows each */
  size_t xb_rows = (size_t)m + 15 * (size_t)DSI_MIN(calls, m / DSI_AMX_MIN_ROWS + 1);
  return align64((size_t)m * wide_row_bytes(cols, kpad)) + align64(xb_rows * kpad * sizeof(uint16_t)) +
         align64((size_t)m * DSI_XQ_LD(kpad)) + align64((size_t)m * sizeof(float)) +
         align64((size_t)m * DSI_XQ_SUMS(kpad) * sizeof(int32_t)) + 64;
}

/* ---- claiming ---- */
/* Units are claimed in chunks. Streaming work (matvecs, reading weights
 * from memory) takes one contiguous chunk per thread of the pool: each
 * chunk starts its streams afresh (the prefetch ramp, and per call the
 * kernel's set-up), and on the FP8 decode step, side by side, halves beat
 * eighths by 3% (the routed experts' row-major units, six matrices a
 * chunk, by 13%). Compute-bound work (AMX) takes a few chunks per thread,
 * which keeps the team balanced when one core runs slower. */
static long claim_chunk(long units, int nth, int streaming) { return DSI_MAX(1, units / ((streaming ? 1l : 4l) * nth)); }

void dsi_team_claim(dsi_team *tm, int nth, long units, int streaming, dsi_units_fn run, void *ctx, void *scratch) {
  dsi_opstate *st = tm->st;
  if (tm->helper && !atomic_load_explicit(&st->ready, memory_order_acquire)) return;
  if (!tm->helper && tm->ith == 0) {
    atomic_store_explicit(&st->units, units, memory_order_relaxed);
    atomic_store_explicit(&st->ready, 1, memory_order_release);
    if (tm->open) atomic_store_explicit(tm->open, tm->op, memory_order_release);
  }
  long chunk = claim_chunk(units, nth, streaming);
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

/* Units of a batch of n matmuls: row-major, unit u is rows [u unit, (u + 1)
 * unit) of every call (the routed experts' scatter-add, where calls add
 * into the same outputs and one thread must own an output row in every
 * call); or call-major (flat), unit u is a row range of call u / upc alone,
 * so a claimed range runs as a few long kernel calls instead of n short
 * ones (W_UK, W_UV: 16 heads of 128 KiB would otherwise be cut into 16 KiB
 * calls). */
typedef struct {
  const dsi_gemm *gs;
  const dsi_gemm_fn *fns;
  int n, rows, unit, flat;
} gemm_units;

static void gemm_units_run(void *ctx, long u0, long u1, void *scratch) {
  const gemm_units *g = ctx;
  if (g->flat) {
    const long upc = DSI_CEIL_DIV(g->rows, g->unit);
    for (long i = u0 / upc; i < g->n && i * upc < u1; i++) {
      long a = DSI_MAX(u0, i * upc) - i * upc, b = DSI_MIN(u1, (i + 1) * upc) - i * upc;
      if (g->gs[i].m > 0 && a < b)
        g->fns[i](&g->gs[i], (int)(a * g->unit), (int)DSI_MIN(b * g->unit, (long)g->rows), scratch);
    }
    return;
  }
  int r0 = (int)(u0 * g->unit), r1 = (int)DSI_MIN(u1 * g->unit, (long)g->rows);
  if (r0 >= r1) return;
  for (int i = 0; i < g->n; i++)
    if (g->gs[i].m > 0) g->fns[i](&g->gs[i], r0, r1, scratch);
}

dsi_mm dsi_mm_make(const dsi_kern *k, int precision, int packed, int nth) {
  int bf16 = precision == DSI_ACT_BF16 || (precision == DSI_ACT_AUTO && packed && k->level >= DSI_ISA_AVX512BF16);
  int i16 = precision == DSI_ACT_AUTO && packed && k->level == DSI_ISA_AVX2;
  return (dsi_mm){.k = k, .act_bf16 = bf16, .act_i8 = bf16, .act_i16 = i16, .nth = nth};
}

/* ---- preparing activations ---- */
/* How a call's activations are prepared for its kernel (P_PAIRS: staged
 * for the f32 route, P_PAIRS_ROUND: and rounded to bf16 on the way). */
enum { P_NONE, P_ROUND, P_BF16, P_I8, P_DP, P_ROUND_I8, P_I16, P_PAIRS, P_PAIRS_ROUND };

/* where a call's int16 rows' scales follow its rows in xr */
static float *i16_scales(const dsi_gemm *g, void *xr, size_t ldq) {
  return (float *)((int16_t *)xr + (size_t)g->m * ldq);
}

/* rows [s0, s1) of call g's activations prepared as `kind` says into the
 * call's own buffers: bf16 tiles at xb (or, P_DP, the AVX512-BF16
 * kernel's staged pairs there), int8 rows at xq (row stride ldq) with
 * their scales and 32-column sums (rows of ldq / 32), or at xr f32 rows
 * rounded to bf16 (P_ROUND) or to the row's int8 grid (P_ROUND_I8), or
 * int16 rows (stride ldq) and then their scales (P_I16) */
static void prep_rows(const dsi_vec_ops *v, const dsi_gemm *g, int kind, long s0, long s1, size_t ldq, void *xr,
                      uint16_t *xb, int8_t *xq, float *xq_scale, int32_t *xq_sum) {
  int cols = g->w->cols, kpad = g->w->kpad, nr = (int)(s1 - s0);
  const float *x = g->x_rows ? g->x : g->x + (size_t)s0 * g->ldx;
  const int32_t *rows = g->x_rows ? g->x_rows + s0 : NULL;
  if (kind == P_DP || kind == P_PAIRS || kind == P_PAIRS_ROUND) {
#if DSI_HAVE_AVX512
    if (kind == P_DP) dsi_gemm_dp_stage(g, (int)s0, (int)s1, (uint32_t *)xb);
    else dsi_gemm_pairs_stage(g, (int)s0, (int)s1, kind == P_PAIRS_ROUND, (float *)xr);
#else
    DSI_ASSERT(0); /* no AVX-512 kernel in this build */
#endif
  } else if (kind == P_BF16) dsi_rows_to_bf16_tiles(v, x, g->ldx, rows, nr, cols, kpad, (int)s0, g->m, xb);
  else if (kind == P_I8)
    dsi_rows_to_i8(v, x, g->ldx, rows, nr, cols, (int)ldq, xq + s0 * ldq, xq_scale + s0, xq_sum + s0 * (ldq / 32));
  else if (kind == P_I16)
    dsi_rows_to_i16(v, x, g->ldx, rows, nr, cols, (int)ldq, (int16_t *)xr + s0 * ldq, i16_scales(g, xr, ldq) + s0);
  else if (kind == P_ROUND_I8) dsi_rows_round_i8(v, x, g->ldx, rows, nr, cols, (float *)xr + s0 * cols);
  else dsi_rows_round_bf16(v, x, g->ldx, rows, nr, cols, (float *)xr + s0 * cols);
}

/* whether what is ready is what the call's kernel wants */
static int have_ready(const dsi_gemm *g, int wants, const dsi_ready *ready) {
  if (!ready || wants == DSI_PREP_NONE || ready->kind != wants) return 0;
#if DSI_HAVE_AVX512
  if (wants == DSI_PREP_PAIRS) return ready->height == dsi_gemm_pairs_height(g->w->dtype);
#endif
  (void)g;
  return 1;
}

/* the preparation a call's kernel wants, given what is ready: a kernel
 * that reads f32 multiplies, under bf16 precision, what the integer kernels
 * would for INT8 weights where mm lets them take int8 activations, else
 * bf16-rounded rows (see pairs_kind for the f32 route's staged pairs) */
static int prep_kind(const dsi_mm *mm, const dsi_gemm *g, int wants, int x_ready, const dsi_ready *ready) {
  if (have_ready(g, wants, ready)) return P_NONE;
  return wants == DSI_PREP_BF16 ? P_BF16
         : wants == DSI_PREP_DP ? P_DP
         : wants == DSI_PREP_I8 ? P_I8
         : wants == DSI_PREP_I16 ? P_I16
         : mm->act_bf16 && !x_ready ? (mm->act_i8 && g->w->dtype == DSI_DTYPE_I8 ? P_ROUND_I8 : P_ROUND)
                                   : P_NONE;
}

/* The f32 route's rows (kind wants DSI_PREP_PAIRS) of a call of several
 * rows staged by the caller, rounded on the way where kind rounds them:
 * for a team once (team), where each unit a thread takes would stage them
 * again; for one call only where they are rounded, which spares the pass
 * that rounds them apart. */
static int pairs_kind(const dsi_gemm *g, int wants, int kind, int team) {
  if (wants != DSI_PREP_PAIRS || g->m < 2 || g->xf) return kind;
  return kind == P_ROUND ? P_PAIRS_ROUND : kind == P_NONE && team ? P_PAIRS : kind;
}

/* the call's prepared-row fields set to what is ready */
static void set_ready(dsi_gemm *g, int wants, const dsi_ready *ready) {
  const int have = have_ready(g, wants, ready);
  g->xb = have && wants == DSI_PREP_BF16 ? ready->x : NULL;
  g->xd = have && wants == DSI_PREP_DP ? ready->x : NULL;
  g->xf = have && wants == DSI_PREP_PAIRS ? ready->x : NULL;
  g->xq = have && wants == DSI_PREP_I8 ? ready->x : NULL;
  g->xq_scale = g->xq ? ready->scale : NULL;
  g->xq_sum = g->xq ? ready->sum : NULL;
  g->xw = have && wants == DSI_PREP_I16 ? ready->x : NULL;
  g->xw_scale = g->xw ? ready->scale : NULL;
}

/* The gathered source rows of the int8 (or int16) calls gs[0..n), when
 * quantizing each once pays: every call takes rows of that one kind
 * gathered from the same x, more of them in all (n_rows) than the source
 * has (up to the largest index gathered), which has at least SOURCE_MIN
 * rows; int16 ones, at least twice as many (the source's rows, twice an
 * int8 one's bytes, then fit beside the calls'). 0 otherwise. */
#define SOURCE_MIN 16
static long gathered_source(const dsi_gemm *gs, const uint8_t *kind, int n, size_t n_rows) {
  long src = 0;
  for (int i = 0; i < n; i++) {
    if ((kind[i] != P_I8 && kind[i] != P_I16) || kind[i] != kind[0] || !gs[i].x_rows || gs[i].x != gs[0].x) return 0;
    for (int r = 0; r < gs[i].m; r++) src = DSI_MAX(src, (long)gs[i].x_rows[r] + 1);
  }
  return src >= SOURCE_MIN && (size_t)src * (kind[0] == P_I16 ? 2 : 1) <= n_rows ? src : 0;
}

/* ---- a team's batch ---- */
void dsi_mm_team(dsi_team *tm, const dsi_mm *mm, dsi_mm_thread th, int n, int rows, int unit, void *prep,
                 size_t prep_bytes, int claim, int x_ready, const dsi_ready *ready) {
  dsi_gemm *gs = th.gs;
  dsi_gemm_fn *fns = th.fns;
  /* every thread lays out the same plan: kernel, and where its prepared rows go */
  size_t n_r = 0, n_b = 0, n_q = 0;
  int any_prep = 0, streaming = 1;
  uint8_t kind[1024];
  size_t slot[1024];
  DSI_ASSERT(n <= 1024);
  for (int i = 0; i < n; i++) {
    int wants = DSI_PREP_NONE;
    fns[i] = dsi_gemm_pick(mm->k, gs[i].w, gs[i].m, dsi_mm_act(mm), &wants);
    set_ready(&gs[i], wants, ready);
    kind[i] = (uint8_t)pairs_kind(&gs[i], wants, prep_kind(mm, &gs[i], wants, x_ready, ready), 1);
    if (kind[i] == P_BF16) slot[i] = n_b, n_b += DSI_XB_ROWS(gs[i].m);
    else if (kind[i] == P_DP) slot[i] = n_b, n_b += gs[i].m; /* m rows of kpad bf16 hold the staged pairs */
    else if (kind[i] == P_I8) slot[i] = n_q, n_q += gs[i].m;
    else if (kind[i] == P_ROUND || kind[i] == P_ROUND_I8 || kind[i] == P_I16 || kind[i] == P_PAIRS ||
             kind[i] == P_PAIRS_ROUND)
      slot[i] = n_r, n_r += gs[i].m;
    any_prep |= kind[i] != P_NONE;
    /* not AMX, nor the integer kernels' */
    streaming &= wants != DSI_PREP_BF16 && wants != DSI_PREP_I8 && wants != DSI_PREP_I16;
  }
  if (any_prep) {
    /* cols and kpad are the same for every call of a batch */
    int cols = gs[0].w->cols, kpad = gs[0].w->kpad;
    size_t ldq = DSI_XQ_LD(kpad);
    const size_t lds = DSI_XQ_SUMS(kpad);
    long src = gathered_source(gs, kind, n, n_q + n_r);
    const int wide = src && kind[0] == P_I16; /* the source's rows are int16 */
    const size_t rb = wide_row_bytes(cols, kpad);
    size_t r_bytes = align64(n_r * rb), b_bytes = align64(n_b * kpad * sizeof(uint16_t));
    size_t q_bytes = align64(n_q * ldq), s_bytes = align64(n_q * sizeof(float)), m_bytes = align64(n_q * lds * sizeof(int32_t));
    /* the source's int8 rows, scales and sums (int16 rows and scales) ahead of the rest */
    size_t src_q = align64((size_t)src * ldq * (wide ? sizeof(int16_t) : 1)), src_s = align64((size_t)src * sizeof(float));
    size_t src_bytes = src ? src_q + src_s + (wide ? 0 : align64((size_t)src * lds * sizeof(int32_t))) : 0;
    DSI_ASSERT(src_bytes + r_bytes + b_bytes + q_bytes + s_bytes + m_bytes <= prep_bytes);
    uint8_t *base = (uint8_t *)prep + src_bytes;
    uint8_t *xr = base;
    uint16_t *xb = (uint16_t *)(base + r_bytes);
    int8_t *xq = (int8_t *)(base + r_bytes + b_bytes);
    float *xq_scale = (float *)(base + r_bytes + b_bytes + q_bytes);
    int32_t *xq_sum = (int32_t *)(base + r_bytes + b_bytes + q_bytes + s_bytes);
    int8_t *sq = prep;
    int16_t *sw = prep;
    float *ss = (float *)((uint8_t *)prep + src_q);
    int32_t *sm = (int32_t *)((uint8_t *)prep + src_q + src_s);
    if (!tm->helper) {
      long total = (long)(n_r + n_b + n_q), a, e, at = 0;
      if (src) { /* the source rows quantized once, split over the team */
        dsi_split(src, tm->ith, tm->nth, &a, &e);
        if (e > a && wide)
          dsi_rows_to_i16(mm->k->vec, gs[0].x + (size_t)a * gs[0].ldx, gs[0].ldx, NULL, (int)(e - a), cols, (int)ldq,
                          sw + (size_t)a * ldq, ss + a);
        else if (e > a)
          dsi_rows_to_i8(mm->k->vec, gs[0].x + (size_t)a * gs[0].ldx, gs[0].ldx, NULL, (int)(e - a), cols, (int)ldq,
                         sq + (size_t)a * ldq, ss + a, sm + (size_t)a * lds);
        dsi_barrier_wait(tm->bar);
      }
      /* prepare every call's rows (or copy them from the source), split over the team */
      dsi_split(total, tm->ith, tm->nth, &a, &e);
      for (int i = 0; i < n && a < e; i++) {
        if (kind[i] == P_NONE) continue;
        long lo = at, hi = at + gs[i].m;
        at = hi;
        if (hi <= a || lo >= e) continue;
        long s0 = DSI_MAX(a, lo) - lo, s1 = DSI_MIN(e, hi) - lo;
        if (wide) {
          int16_t *w = (int16_t *)(xr + slot[i] * rb);
          float *ws = i16_scales(&gs[i], w, ldq);
          for (long r = s0; r < s1; r++) {
            size_t from = (size_t)gs[i].x_rows[r];
            memcpy(w + (size_t)r * ldq, sw + from * ldq, ldq * sizeof(int16_t));
            ws[r] = ss[from];
          }
          continue;
        }
        if (src) {
          for (long r = s0; r < s1; r++) {
            size_t to = slot[i] + (size_t)r, from = (size_t)gs[i].x_rows[r];
            memcpy(xq + to * ldq, sq + from * ldq, ldq);
            xq_scale[to] = ss[from];
            memcpy(xq_sum + to * lds, sm + from * lds, lds * sizeof(int32_t));
          }
          continue;
        }
        prep_rows(mm->k->vec, &gs[i], kind[i], s0, s1, ldq, xr + slot[i] * rb, xb + slot[i] * kpad,
                  xq + slot[i] * ldq, xq_scale + slot[i], xq_sum + slot[i] * lds);
      }
    }
    for (int i = 0; i < n; i++) {
      if (kind[i] == P_BF16) {
        gs[i].xb = xb + slot[i] * kpad;
      } else if (kind[i] == P_DP) {
        gs[i].xd = (const uint32_t *)(xb + slot[i] * kpad);
      } else if (kind[i] == P_I8) {
        gs[i].xq = xq + slot[i] * ldq;
        gs[i].xq_scale = xq_scale + slot[i];
        gs[i].xq_sum = xq_sum + slot[i] * lds;
      } else if (kind[i] == P_I16) {
        gs[i].xw = (const int16_t *)(xr + slot[i] * rb);
        gs[i].xw_scale = i16_scales(&gs[i], xr + slot[i] * rb, ldq);
      } else if (kind[i] == P_PAIRS || kind[i] == P_PAIRS_ROUND) {
        gs[i].xf = (const float *)(xr + slot[i] * rb);
      } else if (kind[i] == P_ROUND || kind[i] == P_ROUND_I8) {
        gs[i].x = (const float *)(xr + slot[i] * rb);
        gs[i].ldx = cols;
        gs[i].x_rows = NULL;
      }
    }
    if (!tm->helper) dsi_barrier_wait(tm->bar);
  }
  int flat = n > 1;
  for (int i = 0; i < n; i++) flat &= gs[i].epi != DSI_EPI_SCATTER_ADD;
  long units = DSI_CEIL_DIV(rows, unit) * (flat ? n : 1);
  gemm_units gu = {gs, fns, n, rows, unit, flat};
  if (!claim) {
    long u0, u1;
    dsi_split(units, tm->ith, tm->nth, &u0, &u1);
    gemm_units_run(&gu, u0, u1, th.scratch);
    return;
  }
  dsi_team_claim(tm, mm->nth, units, streaming, gemm_units_run, &gu, th.scratch);
}

/* ---- one matmul alone ---- */
void dsi_mm_one(const dsi_mm *mm, dsi_gemm *g, int r0, int r1, void *prep, size_t prep_bytes, void *scratch,
                int x_ready, const dsi_ready *ready) {
  int wants = DSI_PREP_NONE;
  dsi_gemm_fn fn = dsi_gemm_pick(mm->k, g->w, g->m, dsi_mm_act(mm), &wants);
  set_ready(g, wants, ready);
  int kind = pairs_kind(g, wants, prep_kind(mm, g, wants, x_ready, ready), 0);
  size_t ldq = DSI_XQ_LD(g->w->kpad);
  if (kind != P_NONE) {
    DSI_ASSERT(dsi_mm_prep_bytes(g->m, g->w->cols, g->w->kpad, 1) <= prep_bytes);
    uint8_t *base = prep;
    float *xq_scale = (float *)(base + align64((size_t)g->m * ldq));
    int32_t *xq_sum = (int32_t *)((uint8_t *)xq_scale + align64((size_t)g->m * sizeof(float)));
    prep_rows(mm->k->vec, g, kind, 0, g->m, ldq, prep, prep, prep, xq_scale, xq_sum);
    if (kind == P_BF16) g->xb = prep;
    else if (kind == P_DP) g->xd = prep;
    else if (kind == P_PAIRS || kind == P_PAIRS_ROUND) g->xf = prep;
    else if (kind == P_I8) g->xq = prep, g->xq_scale = xq_scale, g->xq_sum = xq_sum;
    else if (kind == P_I16) g->xw = prep, g->xw_scale = i16_scales(g, prep, ldq);
    else g->x = prep, g->ldx = g->w->cols, g->x_rows = NULL;
  }
  fn(g, r0, r1, scratch);
}

/* ---- outside a graph ---- */
size_t dsi_mm_run_bytes(int nth, int calls, long m, int cols, int kpad) {
  return align64(dsi_mm_prep_bytes(m, cols, kpad, calls)) + (size_t)nth * dsi_mm_thread_bytes(calls, kpad);
}

typedef struct {
  const dsi_mm *mm;
  const dsi_gemm *gs;
  int n, rows, unit;
  uint8_t *ws;
  size_t prep_bytes, thread_bytes;
  dsi_gemm_fn *fns_out;
  dsi_barrier bar;
} run_job;

static void run_task(void *ctx, int ith, int nth) {
  run_job *j = ctx;
  dsi_mm_thread th = dsi_mm_thread_at(j->ws + j->prep_bytes + (size_t)ith * j->thread_bytes, j->n);
  memcpy(th.gs, j->gs, (size_t)j->n * sizeof *th.gs); /* dsi_mm_team fills in where each call's prepared rows are */
  dsi_team tm = {.ith = ith, .nth = nth, .tid = ith, .bar = &j->bar};
  dsi_mm_team(&tm, j->mm, th, j->n, j->rows, j->unit, j->ws, j->prep_bytes, 0, 0, NULL);
  if (ith == 0 && j->fns_out) memcpy(j->fns_out, th.fns, (size_t)j->n * sizeof *j->fns_out);
}

void dsi_mm_run(dsi_pool *pool, const dsi_mm *mm, const dsi_gemm *gs, int n, int rows, int unit, void *ws,
                size_t ws_bytes, dsi_gemm_fn *fns_out) {
  long m = 0;
  int kpad = gs[0].w->kpad;
  for (int i = 0; i < n; i++) m += gs[i].m;
  int nth = dsi_pool_size(pool);
  run_job j = {mm, gs, n, rows, unit, ws, align64(dsi_mm_prep_bytes(m, gs[0].w->cols, kpad, n)),
               dsi_mm_thread_bytes(n, kpad), fns_out, {0}};
  DSI_ASSERT(j.prep_bytes + (size_t)nth * j.thread_bytes <= ws_bytes);
  dsi_barrier_init(&j.bar, nth);
  dsi_pool_run(pool, run_task, &j);
}
