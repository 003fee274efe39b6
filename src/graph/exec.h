/* graph: what the op kernels and the executors share — the forward's
 * constant context, one step's run state, and the op table: for each op
 * kind what it computes, what it costs and the workspace it needs. */
#ifndef DSI_EXEC_H
#define DSI_EXEC_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/pool.h"
#include "graph/forward.h"
#include "graph/graph.h"
#include "graph/matmul.h"

/* constant for the forward's life: model, kernels, tables */
typedef struct dsi_fctx {
  const dsi_model *m;
  const dsi_config *c;
  dsi_mm mm;             /* kernels, activation precision, threads */
  dsi_mm mm_lat;         /* the same for the attention's latent side (W_UK, W_UV, either form):
                            never int8 activations, so that the absorbed form (queries and
                            outputs into latent space) and the non-absorbed one (latents
                            expanded) multiply what agrees to rounding */
  int max_tokens, max_context;
  int attn_chunk;        /* tokens per pass of the absorbed attention */
  size_t att_s_len;      /* floats of the prefill-segment score buffer */
  float softmax_scale;
  float *rope_cos, *rope_sin; /* [max_context, rope/2] */
  int kv_pairs;          /* the latent cache holds bf16 pair rows (tensor/paged.h) */
  int attn_bf16;         /* ... and the attention multiplies them as bf16 (AMX), q and P rounded;
                            else in f32, over their values exactly widened (kernels/attn.h) */
  dsi_mat *uk, *uv;      /* [layers * H] per-head panels of W_UK^T and W_UV */
  struct dsi_mla_prefill *mla; /* the non-absorbed prefill form (packed models), or NULL */
  int exp_lo, exp_hi;    /* the routed experts this rank runs (expert parallel; else all) */
  dsi_coll coll;         /* the collectives between ranks (size 1: none) */
  int tp, ep;            /* ranks the heads and the experts are split over (1: not split) */
  int tp_to_ep;          /* DSI_TP_TO_EP_* (tp > 1) */
  int attn_dp;           /* DP attention: this rank's sequences' tokens only, all of the graph */
  int vocab_split;       /* lm_head split by vocabulary over the ranks (1: whole on rank 0) */
  int lm_cols;           /* the logits this rank computes a row: its lm_head rows */
  int *exp_owner;        /* [n_routed_experts] the rank holding each expert (ep > 1) */
} dsi_fctx;

/* one step */
typedef struct dsi_xrun {
  const dsi_fctx *f;
  const dsi_graph *g;
  const dsi_fwd_batch *b;
  const dsi_fwd_cache *cache;
  int T;
  int sh_lo, sh_n;      /* tensor parallel: this rank's tokens [sh_lo, sh_lo + sh_n) (else 0, T) */
  int n_recv;           /* rows the expert dispatch brought this step (DSI_ROWS_RECV) */
  uint8_t **ptr;        /* [n_ts] each tensor's memory this step */
  dsi_opstate *st;      /* [n_ops] */
  const uint8_t *naive; /* [T] token of a segment taking the non-absorbed form */
  int n_naive;
  void *bars;           /* dsi_exec_bars_bytes(g->n_regions): the teams' barriers */
  int *pids;            /* [n_ops] the profile's op ids */
  atomic_int open_op;   /* the latest op whose units were opened to helpers, -1 none */
  struct dsi_xrun *mb;  /* two-batch plans: [2] the micro-batches' runs, which an op of
                           micro-batch k sees as its step (its batch, T, shard, rows) */
} dsi_xrun;

#define XT(r, id) ((void *)(r)->ptr[id])

/* the most rows a rank sends in the expert dispatch of a step of at most T
 * tokens (each of its tokens once to each rank holding one of its experts):
 * its share of them (1/N and one) to every rank, or under DP attention any
 * number of them */
static inline int dsi_moe_sent_max(const dsi_fctx *f, int T) {
  return f->attn_dp ? T * f->coll.size : T + f->coll.size;
}
/* the expert dispatch's plan: ints for a bucket of T tokens (rows sent to
 * and received from each rank, each sent row's token) */
static inline int dsi_moe_plan_len(const dsi_fctx *f, int T) { return 2 * f->coll.size + dsi_moe_sent_max(f, T); }

/* rank r's tokens of a step of T over n ranks: [lo, lo + n) */
static inline void dsi_shard_of(int T, int r, int n_ranks, int *lo, int *n) {
  *lo = (int)((int64_t)T * r / n_ranks);
  *n = (int)((int64_t)T * (r + 1) / n_ranks) - *lo;
}

/* op's workspace this step: its shared part, and thread tid's part */
static inline uint8_t *dsi_ws_shared(const dsi_xrun *r, const dsi_op *op) { return r->ptr[op->ws]; }
static inline uint8_t *dsi_ws_thread(const dsi_xrun *r, const dsi_op *op, int tid) {
  return r->ptr[op->ws] + op->ws_shared + (size_t)tid * op->ws_thread;
}

/* the executors; prof may be NULL. Graph: one dispatch for the whole step,
 * ops wait only for the ops they depend on (poison: op by op, the arena
 * filled with NaN and every tensor poisoned after its last use). Eager:
 * one dispatch per op, each op's outputs and workspace allocated as it is
 * issued. */
typedef struct dsi_prof dsi_prof;
size_t dsi_exec_bars_bytes(int n_regions);
/* The communication thread: under overlap it runs a plan's collectives
 * (DSI_TEAM_COMM) in order as their inputs are ready, while the workers go
 * on with the ops that do not wait for them. NULL when out of memory or
 * threads. */
typedef struct dsi_commer dsi_commer;
dsi_commer *dsi_commer_new(void);
void dsi_commer_free(dsi_commer *c);
/* comm: the communication thread, needed when the plan has DSI_TEAM_COMM ops */
void dsi_exec_graph(dsi_xrun *r, dsi_pool *pool, dsi_prof *prof, int poison, uint8_t *arena, dsi_commer *comm);
int dsi_exec_eager(dsi_xrun *r, dsi_pool *pool, dsi_prof *prof, dsi_err *err);

/* ---- the op table ---- */
/* an op's work this step, for the profile */
typedef struct dsi_op_cost {
  double flops, wbytes, abytes; /* arithmetic; bytes of weights and of activations moved */
} dsi_op_cost;
/* the workspace an op needs in a bucket of T tokens: bytes shared by its
 * team, and bytes for each thread of the pool (helpers from another team
 * take their own) */
typedef struct dsi_op_ws {
  size_t shared, thread;
} dsi_op_ws;
typedef struct dsi_op_def {
  void (*run)(dsi_xrun *r, const dsi_op *op, dsi_team *tm); /* every thread of the op's team */
  void (*cost)(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c);
  dsi_op_ws (*ws)(const dsi_fctx *f, const dsi_op *op, int T); /* NULL: none */
} dsi_op_def;
extern const dsi_op_def dsi_op_defs[DSI_OP_COUNT];

#endif
