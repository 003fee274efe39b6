/* graph: the matmul team driver — a batch of n matmuls run by a team of
 * workers, as the forward's ops and `bench kernels` run them. Every thread
 * picks each call's kernel and lays out where its prepared activations go
 * (deterministically: all compute the same), the team prepares them once
 * (bf16 tiles, int8 rows or bf16-rounded f32 rows), then the calls' row
 * units are claimed from a shared counter — helpers from another team may
 * join — or split evenly. It allocates nothing: the prepared rows, each
 * thread's call list and its kernel scratch are the caller's (the graph's
 * planned workspace, or a benchmark's buffer). */
#ifndef DSI_MATMUL_H
#define DSI_MATMUL_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/pool.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"

/* one op's claim counters during a step, on a cache line of its own */
typedef struct dsi_opstate {
  atomic_int done;      /* team threads that finished the op */
  atomic_int ready;     /* its units may be claimed (inputs prepared) */
  atomic_long units;    /* units, set before ready */
  atomic_long next;     /* next unit / work item to claim */
  atomic_long finished; /* units finished */
  char pad[64 - 2 * sizeof(atomic_int) - 3 * sizeof(atomic_long)];
} dsi_opstate;

/* the workers running one op: ith of nth (thread tid of the pool); a
 * helper joins another team's op only to claim its leftover units */
typedef struct dsi_team {
  int ith, nth, tid;
  int helper;
  dsi_barrier *bar;
  dsi_opstate *st;
  atomic_int *open;     /* where to announce units open to helpers (NULL: no helpers) */
  int op;               /* the op's index, announced there */
} dsi_team;

/* the driver's constants */
typedef struct dsi_mm {
  const dsi_kern *k; /* the kernels */
  int act_bf16;      /* matmuls multiply bf16-rounded activations (DSI_ACT_BF16) */
  int act_i8;        /* INT8 weights multiply int8 activations (with act_bf16) */
  int act_i16;       /* INT8 weights multiply int16 activations (by default where
                        that integer kernel is the CPU's fastest: AVX2) */
  int nth;           /* threads of the pool: claim chunks are sized by it */
} dsi_mm;

/* the driver for kernels k at a DSI_ACT_* precision (auto: bf16
 * activations where a bf16 kernel runs on packed weights, and int8 ones
 * for INT8 weights with them; int16 ones for INT8 weights where the
 * integer kernel is the fastest the CPU has: AVX2) */
dsi_mm dsi_mm_make(const dsi_kern *k, int precision, int packed, int nth);
/* mm's reduced-precision permissions as dsi_gemm_pick's act */
static inline int dsi_mm_act(const dsi_mm *mm) {
  return (mm->act_bf16 ? DSI_ACT_RED_BF16 : 0) | (mm->act_i8 ? DSI_ACT_RED_I8 : 0) | (mm->act_i16 ? DSI_ACT_RED_I16 : 0);
}

/* the level whose matrix peak these matmuls on bf16 activations run at
 * (dsi_matrix_peak): the kernels' own, or "f32" where they take the f32
 * route (f32 activations, or BF16 and FP8 weights off vdpbf16ps at
 * avx512bf16) */
static inline const char *dsi_mm_matrix_isa(const dsi_mm *mm) {
  const dsi_kern *k = mm->k;
  return !mm->act_bf16 || (k->level == DSI_ISA_AVX512BF16 && !k->dot_bf16) ? "f32" : dsi_isa_str(k->level);
}

/* Work split into units, claimed in chunks from tm->st by the team and
 * by helpers; the team's threads return when every unit is finished.
 * streaming: memory-bound work, one contiguous chunk per thread of the
 * pool; else a few chunks each. */
typedef void (*dsi_units_fn)(void *ctx, long u0, long u1, void *scratch);
void dsi_team_claim(dsi_team *tm, int nth, long units, int streaming, dsi_units_fn run, void *ctx, void *scratch);

/* A thread's memory for batches of up to `calls` matmuls over weights of
 * up to kpad columns: its call list, the kernels picked, and the kernels'
 * scratch (DSI_GEMM_SCRATCH(kpad)). */
typedef struct dsi_mm_thread {
  dsi_gemm *gs;
  dsi_gemm_fn *fns;
  void *scratch;
} dsi_mm_thread;
size_t dsi_mm_thread_bytes(int calls, int kpad);
dsi_mm_thread dsi_mm_thread_at(void *mem, int calls);

/* bytes of prepared activations for m rows in all, over at most `calls`
 * matmuls of weights with cols / kpad */
size_t dsi_mm_prep_bytes(long m, int cols, int kpad, int calls);

/* Activations a caller prepared ahead, as one kind of kernel takes them
 * (kind DSI_PREP_BF16: bf16 tiles at x; DSI_PREP_DP: dsi_gemm_dp_stage's
 * pairs at x; DSI_PREP_I8: int8 rows at x, DSI_XQ_LD(kpad) bytes apart,
 * with their scales and 32-column sums, as dsi_rows_to_i8 writes them;
 * DSI_PREP_I16: int16 rows at x, DSI_XQ_LD(kpad) elements apart, and
 * their scales, as dsi_rows_to_i16 writes them; DSI_PREP_PAIRS:
 * dsi_gemm_pairs_stage's pairs at x, staged for weights of pass height
 * `height`: a call whose weight has another stages its own).
 * A call whose kernel wants that kind reads them; any other prepares its
 * own. */
typedef struct dsi_ready {
  int kind;
  const void *x;
  const float *scale;
  const int32_t *sum;
  int height;
} dsi_ready;

/* Run th.gs[0..n) (all with the same cols and kpad), `rows` output rows
 * each, in units of `unit` rows, on team tm: prepare the activations into
 * prep, then claim units from tm->st when claim (helpers may join), else
 * split them evenly. x_ready: activations are rounded already (act_bf16);
 * ready: the rows prepared ahead, or NULL. Calls whose int8 rows are
 * gathered (x_rows) from one x, the same source row in several calls
 * (the routed experts' tokens, each in top-k of them), quantize each
 * source row once and copy it to its calls. Fills th.fns and the calls'
 * prepared-row fields. */
void dsi_mm_team(dsi_team *tm, const dsi_mm *mm, dsi_mm_thread th, int n, int rows, int unit, void *prep,
                 size_t prep_bytes, int claim, int x_ready, const dsi_ready *ready);
/* One matmul, rows [r0, r1) of g->w, on the calling thread alone: picks
 * the kernel for g->m rows, prepares the activations into prep
 * (dsi_mm_prep_bytes(m, cols, kpad, 1) bytes) and sets g's prepared-row
 * fields to them; x_ready and ready as for dsi_mm_team. */
void dsi_mm_one(const dsi_mm *mm, dsi_gemm *g, int r0, int r1, void *prep, size_t prep_bytes, void *scratch,
                int x_ready, const dsi_ready *ready);

/* Outside a graph (benchmarks): gs[0..n) as one dispatch on all of pool's
 * threads. ws: dsi_mm_run_bytes(nth, n, m, cols, kpad) bytes, m the calls'
 * rows in all; the kernels picked go to fns_out when it is not NULL. */
size_t dsi_mm_run_bytes(int nth, int calls, long m, int cols, int kpad);
void dsi_mm_run(dsi_pool *pool, const dsi_mm *mm, const dsi_gemm *gs, int n, int rows, int unit, void *ws,
                size_t ws_bytes, dsi_gemm_fn *fns_out);

#endif
