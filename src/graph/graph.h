/* graph: the op IR — ops record, executors run. A graph is built for one
 * shape bucket (at most T tokens); its tensors have a dtype and a shape,
 * and every op's workspace is a tensor too. The planner fuses chains of
 * ops, assigns ops to worker teams (streams), gives every intermediate
 * tensor and workspace a static offset in one arena from its lifetime,
 * and derives, for each op, the earlier ops it must wait for: barriers
 * only where data flows. */
#ifndef DSI_GRAPH_H
#define DSI_GRAPH_H

#include <stddef.h>

#include "model/model.h"
#include "tensor/mat.h"

typedef enum {
  DSI_OP_EMBED,         /* out0[t] = embed_tokens[token t] */
  DSI_OP_RMSNORM,       /* out0 = rmsnorm(in0) * vec (rows: all, or the logit rows) */
  DSI_OP_ADD,           /* out0 (= in0) += in1 */
  DSI_OP_MATMUL,        /* out0 = in0 W^T (epilogue epi) */
  DSI_OP_SILU_MUL,      /* out0 (= in0) = silu(in0) * in1 */
  DSI_OP_ROPE_Q,        /* out0 (= in0): rotate each head's rope part */
  DSI_OP_KV_WRITE,      /* cache out0 <- [rmsnorm(kva latent) | rope(k_pe)] at each token's slot */
  DSI_OP_ATTN_QLAT,     /* chunk: out0 = per-head [W_UK^T q_nope | q_pe] */
  DSI_OP_ATTN_CORE,     /* chunk: out0 = attention of q_lat over the latent cache */
  DSI_OP_ATTN_OUT,      /* chunk: out0 = per-head W_UV o_lat */
  DSI_OP_ATTN_ROWMAJOR, /* out0 = absorbed attention with row-major kv_b_proj */
  DSI_OP_ATTN_NAIVE,    /* out0 rows of the prefill segments picked for the non-absorbed form */
  DSI_OP_ROUTER_TOPK,   /* out0 ids, out1 weights <- scores in0 */
  DSI_OP_MOE_SORT,      /* pairs grouped by expert: out0 exp_start, out1 exp_tok, out2 exp_w; zero out3 */
  DSI_OP_MOE_GATE_UP,   /* out0[pair] = silu-mul of each expert's gate/up on its tokens */
  DSI_OP_MOE_DOWN,      /* out0[tok] += weight * down(in0[pair]) */
  DSI_OP_MOE_ROWMAJOR,  /* out0[tok] += routed experts one by one (row-major weights) */
  DSI_OP_ALL_REDUCE,    /* out0 (= in0) summed over the ranks (f32) */
  DSI_OP_REDUCE_SCATTER,/* out0 (this rank's token rows) = in0's rows summed over the ranks */
  DSI_OP_ALL_GATHER,    /* out0 (all rows) <- in0 (this rank's token rows) of every rank */
  DSI_OP_SHARD,         /* out0 (this rank's token rows) = those rows of in0 */
  DSI_OP_MOE_DISPATCH,  /* in0 rows to their experts' owners: out0 rows, out1 ids, out2 weights, out3 the plan */
  DSI_OP_MOE_COMBINE,   /* out0 (this rank's token rows) = the expert sums in0 sent back, by the plan in1 */
  DSI_OP_COUNT
} dsi_op_kind;

extern const char *const dsi_op_kind_names[DSI_OP_COUNT];

/* where a tensor lives */
enum {
  DSI_T_ARENA,  /* an intermediate: planned into the arena */
  DSI_T_KV,     /* a layer's latent cache (the engine's) */
  DSI_T_LOGITS, /* the caller's logits */
};

#define DSI_MAX_DIMS 4

typedef struct dsi_tensor {
  const char *name;
  int layer;
  int kind;        /* DSI_T_* */
  dsi_dtype dtype;
  int ndim;        /* 0: memory of the engine's whose shape the graph does not fix (a cache) */
  int64_t ne[DSI_MAX_DIMS]; /* shape, outermost first: [T, H, qk_head_dim] */
  size_t bytes;    /* for the graph's bucket */
  int mb;          /* two-batch plans: the micro-batch (1 or 2) it was recorded for; 0 the step's */
  /* plan */
  int first, last; /* ops that first and last touch it (-1: never) */
  size_t off;      /* offset in the arena */
} dsi_tensor;

#define DSI_OP_IN 4
#define DSI_OP_OUT 4

enum {
  DSI_FUSE_ADD = 1,    /* rmsnorm: x += in1 first; x is out2 */
  DSI_FUSE_QUANT = 2,  /* rmsnorm: out0 rounded to bf16 values, bf16 rows into out1 */
  DSI_X_PREPARED = 4,  /* matmul: in0 is rounded already, in1 its bf16 rows */
  DSI_X_ROUNDED = 8,   /* grouped gate/up: in0 is rounded already */
  DSI_ROWS_LOGITS = 16,/* rmsnorm / matmul over the batch's logit rows only */
};

/* the rows an op computes: every token of the step, this rank's share of
 * them (tensor parallel: the tokens this rank runs the FFN for), or the
 * rows other ranks sent it for its experts (expert parallel dispatch) */
enum { DSI_ROWS_ALL, DSI_ROWS_SHARD, DSI_ROWS_RECV };

/* teams of workers: all of them, or the two halves of a fork; or, for
 * the collectives under overlap, the communication thread (thread n of a
 * pool of n workers) */
enum { DSI_TEAM_ALL, DSI_TEAM_A, DSI_TEAM_B, DSI_TEAM_COMM };

typedef struct dsi_op {
  dsi_op_kind kind;
  const char *name; /* "q_a_proj", ... */
  int layer;        /* -1 outside the blocks */
  int cat;          /* dsi_prof_cat */
  int stream;       /* 0 main, 1 the side branch of a fork */
  int region;       /* fork region, -1 none */
  int in[DSI_OP_IN], out[DSI_OP_OUT]; /* tensor ids, -1 none; in-place ops list x in both */
  int ws;           /* its workspace tensor, -1 none: ws_shared bytes, then ws_thread bytes
                       for each thread of the pool */
  size_t ws_shared, ws_thread;
  int flags;        /* DSI_FUSE_*, DSI_X_*, DSI_ROWS_LOGITS */
  int rows;         /* DSI_ROWS_* */
  /* parameters */
  const dsi_mat *w;
  const float *vec;              /* rmsnorm weight */
  const dsi_layer_weights *lw;   /* the layer's weights */
  int epi;                       /* dsi_epilogue of a matmul; row width of a norm, add, silu */
  int t0;                        /* attention chunk: first token */
  int mb;                        /* two-batch plans: the micro-batch it computes (1, 2); 0 the step */
  int stage;                     /* two-batch plans: collectives of its micro-batch in the layer before it */
  /* schedule */
  int dead;         /* fused into another op */
  int team;         /* DSI_TEAM_* */
  int deps[6], n_deps; /* ops whose completion this one waits for */
} dsi_op;

typedef struct dsi_graph {
  int T;            /* the bucket: at most T tokens */
  dsi_op *ops;
  int n_ops, cap_ops;
  dsi_tensor *ts;
  int n_ts, cap_ts;
  int n_regions;
  int two_batch;    /* the step as two micro-batches (see dsi_graph_interleave) */
  /* builder state */
  int cur_layer, cur_region, cur_stream, cur_rows, cur_mb, cur_stage;
  /* plan */
  int planned, fused, streams;
  int *team_a;      /* [n_regions] threads of team A in each region (all: not split) */
  int n_split;      /* regions split into two teams */
  int n_comm;       /* ops on the communication thread */
  size_t arena_bytes; /* planned peak */
  size_t sum_bytes;   /* every intermediate with its own memory */
  /* out of memory while recording: set once a tensor or op could not be
   * added (the builder goes on with a stand-in; the graph is to be freed) */
  int oom;
  dsi_op spare_op;
} dsi_graph;

/* ---- building: ops record, they do not compute ---- */
dsi_graph *dsi_graph_new(int T); /* NULL: out of memory */
void dsi_graph_free(dsi_graph *g);
/* a tensor of the current layer: shape ne[0..ndim) */
int dsi_graph_tensor(dsi_graph *g, const char *name, int kind, dsi_dtype dtype, int ndim, const int64_t *ne);
/* give op i a workspace of `shared` bytes and `thread` bytes for each of
 * nth threads (64-byte aligned parts); nothing when both are 0 */
void dsi_graph_workspace(dsi_graph *g, int i, size_t shared, size_t thread, int nth);
/* "f32[512,16,192]" */
char *dsi_tensor_desc(const dsi_tensor *t, char *buf, size_t len);
/* a new op of the current layer, stream and region, with no operands */
dsi_op *dsi_graph_op(dsi_graph *g, dsi_op_kind kind, const char *name, int cat);
/* ops recorded between fork and join may run concurrently, stream 0 on
 * one team of workers and stream 1 on the other; join is an event both wait for */
void dsi_graph_fork(dsi_graph *g);
void dsi_graph_stream(dsi_graph *g, int stream);
void dsi_graph_join(dsi_graph *g);
/* Two micro-batches (two_batch set; forks are then not recorded): ops of
 * micro-batch cur_mb (1 or 2), each recording its layer in turn, a stage
 * ending at each of its collectives (cur_stage++ after one). Interleaving
 * orders ops [from, n_ops) by (stage, micro-batch), keeping each
 * micro-batch's own order: micro-batch 2 computes up to its collective
 * while micro-batch 1's is in flight, and the reverse (SGLang's two-batch
 * overlap). The two touch disjoint tensors, so the order is theirs to pick. */
void dsi_graph_interleave(dsi_graph *g, int from);

/* ---- planning ---- */
typedef struct dsi_plan_opts {
  int fuse;      /* fuse chains (residual add + norm, norm + quantize) */
  int act_bf16;  /* matmuls multiply bf16-rounded activations (norm + quantize needs it) */
  int streams;   /* 1 or 2 */
  int n_threads; /* workers the plan runs on */
  int min_team;  /* streams: split a fork only if each team gets this many workers (0 = 2) */
  int overlap;   /* collectives on the communication thread (DSI_TEAM_COMM), beside the workers */
} dsi_plan_opts;

/* DSI_OK, or DSI_E_NOMEM (the graph recorded incompletely, or the plan
 * could not be made): then the graph is only fit to be freed */
int dsi_graph_plan(dsi_graph *g, const dsi_plan_opts *o);
/* for the eager executor: no fusion, one team, lifetimes only; as above */
int dsi_graph_plan_eager(dsi_graph *g);
/* threads [lo, hi) of n that run team on op's region (the communication
 * thread is thread n) */
void dsi_graph_team_range(const dsi_graph *g, const dsi_op *op, int n, int *lo, int *hi);
/* Check the plan: no two tensors alive at once share bytes, and every pair
 * of ops touching the same bytes (one writing) is ordered by the waits.
 * 0 if sound, else -1 with the first problem in why (DSI_E_NOMEM, with
 * why saying so, when it cannot be checked for want of memory). */
int dsi_graph_check(const dsi_graph *g, int n_threads, char *why, size_t why_len);
/* print the plan (ops, teams, waits, tensors, offsets) */
void dsi_graph_dump(const dsi_graph *g, void *file);

#endif
