/* graph: what the op kernels and the executors share — the forward's
 * constant context, one step's run state, a team of workers running one
 * op, and the op table (kernel, cost, whether other teams may help). */
#ifndef DSI_EXEC_H
#define DSI_EXEC_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/pool.h"
#include "graph/forward.h"
#include "graph/graph.h"
#include "kernels/gemm.h"

/* constant for the forward's life: model, tables, per-thread scratch */
typedef struct dsi_fctx {
  const dsi_model *m;
  const dsi_config *c;
  int nth, max_tokens, max_context;
  int attn_chunk;        /* tokens per pass of the absorbed attention */
  size_t att_s_len;      /* floats of the prefill-segment score buffer */
  float softmax_scale;
  float *rope_cos, *rope_sin; /* [max_context, rope/2] */
  int act_bf16;          /* matmuls multiply bf16-rounded activations */
  float **scratch;       /* [nth][scratch_len] */
  size_t scratch_len;
  dsi_mat *uk, *uv;      /* [layers * H] per-head panels of W_UK^T and W_UV */
  struct dsi_mla_prefill *mla; /* the non-absorbed prefill form (packed models), or NULL */
  int max_calls;         /* most matmuls in one batched call */
  dsi_gemm **gl;         /* [nth][max_calls] each thread's matmul list */
  dsi_gemm_fn **gfn;     /* [nth][max_calls] */
} dsi_fctx;

/* one op's shared state during a step, on its own cache line */
typedef struct dsi_opstate {
  atomic_int done;      /* team threads that finished it */
  atomic_int ready;     /* its matmul units may be claimed (inputs prepared) */
  atomic_long units;    /* matmul units, set before ready */
  atomic_long next;     /* next unit / work item to claim */
  atomic_long finished; /* units finished */
  char pad[64 - 2 * sizeof(atomic_int) - 3 * sizeof(atomic_long)];
} dsi_opstate;

/* one step */
typedef struct dsi_xrun {
  const dsi_fctx *f;
  const dsi_graph *g;
  const dsi_fwd_batch *b;
  const dsi_fwd_cache *cache;
  int T;
  uint8_t **ptr;        /* [n_ts] each tensor's memory this step */
  dsi_opstate *st;      /* [n_ops] */
  const uint8_t *naive; /* [T] token of a segment taking the non-absorbed form */
  int n_naive;
  void *bars;           /* dsi_exec_bars_bytes(g->n_regions): the teams' barriers */
  int *pids;            /* [n_ops] the profile's op ids */
  atomic_int open_op;   /* the latest op whose units were opened to helpers, -1 none */
} dsi_xrun;

/* the workers running one op: ith of nth; a helper joins another team's
 * op only to claim its leftover matmul units */
typedef struct dsi_team {
  int ith, nth, tid;
  int helper;
  dsi_barrier *bar;
  dsi_opstate *st;
  atomic_int *open;     /* where to announce units open to helpers (NULL: no helpers) */
  int op;               /* the op's index */
} dsi_team;

/* the executors; prof may be NULL. Graph: one dispatch for the whole step,
 * ops wait only for the ops they depend on (poison: op by op, the arena
 * filled with NaN and every tensor poisoned after its last use). Eager:
 * one dispatch per op, each op's outputs allocated as it is issued. */
typedef struct dsi_prof dsi_prof;
size_t dsi_exec_bars_bytes(int n_regions);
void dsi_exec_graph(dsi_xrun *r, dsi_pool *pool, dsi_prof *prof, int poison, uint8_t *arena);
int dsi_exec_eager(dsi_xrun *r, dsi_pool *pool, dsi_prof *prof, dsi_err *err);

#define XT(r, id) ((void *)(r)->ptr[id])

/* f's per-worker state for nth workers: matmul lists of max_calls and
 * scratch of scratch_floats; DSI_OK, or DSI_E_NOMEM (free what was made
 * with dsi_fctx_workers_free) */
int dsi_fctx_workers(dsi_fctx *f, int nth, int max_calls, size_t scratch_floats);
void dsi_fctx_workers_free(dsi_fctx *f);

typedef void (*dsi_op_fn)(dsi_xrun *r, const dsi_op *op, dsi_team *tm);
extern const dsi_op_fn dsi_op_fns[DSI_OP_COUNT];
/* an op's FLOPs and bytes this step (for the profile) */
void dsi_op_cost(const dsi_xrun *r, const dsi_op *op, double *flops, double *wbytes, double *abytes);
/* bytes of prepared activations for m rows in all, over at most `calls`
 * matmuls of weights with cols / kpad */
size_t dsi_prep_bytes(long m, int cols, int kpad, int calls);

/* Run n matmuls of `rows` rows each on a team: each thread picks the
 * kernels and lays out the prepared activations (deterministically: every
 * thread computes the same), the team prepares the rows into ws, then row
 * units are claimed — from st's counters when claim (helpers may join),
 * else split evenly. x_ready: activations are rounded already (act_bf16)
 * and xb_ready their bf16 rows (or NULL). */
void dsi_gemm_team(dsi_team *tm, const dsi_fctx *f, dsi_gemm *gs, dsi_gemm_fn *fns, int n, int rows, int unit,
                   void *ws, size_t ws_bytes, int claim, int x_ready, const uint16_t *xb_ready);
/* One matmul, rows [r0, r1) of g->w, on the calling thread alone: picks the
 * kernel for g->m rows, prepares the activations into ws (dsi_prep_bytes(m,
 * cols, kpad, 1) bytes) and sets g's prepared-row fields to them;
 * x_ready and xb_ready as for dsi_gemm_team. */
void dsi_gemm_one(const dsi_fctx *f, dsi_gemm *g, int r0, int r1, void *ws, size_t ws_bytes, void *scratch,
                  int x_ready, const uint16_t *xb_ready);
/* The same outside a graph (benchmarks): the n matmuls as one dispatch on
 * all of pool's threads (f's workers), ws holding the prepared rows; the
 * kernels picked go to fns_out when it is not NULL. */
void dsi_gemm_run(dsi_pool *pool, const dsi_fctx *f, const dsi_gemm *gs, int n, int rows, int unit, void *ws,
                  size_t ws_bytes, dsi_gemm_fn *fns_out);

#endif
