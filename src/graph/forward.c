/* graph: the DeepSeek-V3 forward, written once as a builder that records
 * ops (it reads like inference/model.py: one function per block — MLA, MLP,
 * MoE), and dsi_fwd, which runs it: a plan per shape bucket captured once
 * and replayed by the graph executor, or the ops issued one by one by the
 * eager executor. Sections: rotary tables, the builder, plans and runs,
 * set-up. */
#include "graph/forward.h"
#include "graph/exec.h"
#include "graph/mla_prefill.h"
#include "graph/prof.h"
#include "kernels/attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- rotary tables: interleaved pairs, YaRN frequencies at every position ---- */
int dsi_rope_tables(const dsi_config *c, int n_pos, float *cos_t, float *sin_t) {
  int d = c->qk_rope_head_dim, half = d / 2;
  float *freq = malloc(half * sizeof(float));
  if (!freq) return DSI_E_NOMEM;
  for (int i = 0; i < half; i++)
    freq[i] = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)d);
  if (c->rope_yarn) {
    double base = c->rope_theta, orig = c->rope_original_max_position_embeddings;
    double lo = floor(d * log(orig / (c->rope_beta_fast * 2 * M_PI)) / (2 * log(base)));
    double hi = ceil(d * log(orig / (c->rope_beta_slow * 2 * M_PI)) / (2 * log(base)));
    if (lo < 0) lo = 0;
    if (hi > d - 1) hi = d - 1;
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < half; i++) {
      float ramp = (float)((i - lo) / (hi - lo));
      ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
      freq[i] = freq[i] / c->rope_factor * ramp + freq[i] * (1 - ramp);
    }
  }
  for (int p = 0; p < n_pos; p++)
    for (int i = 0; i < half; i++) {
      float a = (float)p * freq[i];
      cos_t[(size_t)p * half + i] = cosf(a);
      sin_t[(size_t)p * half + i] = sinf(a);
    }
  free(freq);
  return DSI_OK;
}

/* ---- the builder: ops record, they do not compute. Shapes are for the
 * graph's bucket of T tokens; a run may have fewer. ---- */
typedef struct {
  const dsi_fctx *f;
  dsi_graph *g;
  int T;
  int overlap; /* collectives overlap: work that can run beside them recorded after them */
} builder;

#define F32 DSI_DTYPE_F32

static int tensor_n(builder *bd, const char *name, dsi_dtype dt, int ndim, const int64_t *ne) {
  return dsi_graph_tensor(bd->g, name, DSI_T_ARENA, dt, ndim, ne);
}
/* an intermediate of dtype dt and shape [d0, d1, ...] */
#define TENSOR(bd, name, dt, ...) \
  tensor_n(bd, name, dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

/* view tensor t [T, a*b] as [T, a, b] */
static void split_rows(builder *bd, int t, int64_t a, int64_t b) {
  dsi_tensor *x = &bd->g->ts[t];
  DSI_ASSERT(x->ndim == 2 && x->ne[1] == a * b);
  x->ndim = 3;
  x->ne[1] = a;
  x->ne[2] = b;
}

/* y = x W^T: [T, w->rows] (SiLU pairs: [T, w->rows / 2]) */
static int linear(builder *bd, const char *name, int cat, const dsi_mat *w, int x, int epi) {
  int y = TENSOR(bd, name, F32, bd->T, epi == DSI_EPI_SILU_PAIRS ? w->rows / 2 : w->rows);
  dsi_op *op = dsi_graph_op(bd->g, DSI_OP_MATMUL, name, cat);
  op->w = w;
  op->epi = epi;
  op->in[0] = x;
  op->out[0] = y;
  return y;
}

/* rmsnorm(x) * weight over rows of width n, into a new tensor (or in place: out = x) */
static int rmsnorm(builder *bd, const char *name, int cat, const float *weight, int x, int n, int in_place) {
  int y = in_place ? x : TENSOR(bd, name, F32, bd->T, n);
  dsi_op *op = dsi_graph_op(bd->g, DSI_OP_RMSNORM, name, cat);
  op->vec = weight;
  op->epi = n;
  op->in[0] = x;
  op->out[0] = y;
  return y;
}

/* x += y, rows of width n */
static void add(builder *bd, const char *name, int cat, int x, int y, int n) {
  dsi_op *op = dsi_graph_op(bd->g, DSI_OP_ADD, name, cat);
  op->epi = n;
  op->in[0] = x;
  op->in[1] = y;
  op->out[0] = x;
}

/* a collective: with two micro-batches it ends its micro-batch's stage */
static dsi_op *collective(builder *bd, dsi_op_kind kind, const char *name) {
  dsi_op *op = dsi_graph_op(bd->g, kind, name, DSI_PROF_COMM);
  bd->g->cur_stage++;
  return op;
}

/* ---- MLA ---- */
static int mla(builder *bd, const dsi_layer_weights *w, int xn) {
  const dsi_fctx *f = bd->f;
  const dsi_config *c = f->c;
  dsi_graph *g = bd->g;
  int T = bd->T, H = c->num_attention_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
  int kvl = c->kv_lora_rank, row = kvl + rope, vd = c->v_head_dim;
  int kv_cache = dsi_graph_tensor(g, "kv_cache", DSI_T_KV, f->kv_pairs ? DSI_DTYPE_BF16 : F32, 0, NULL);
  /* the q and kv down-projections are independent: two streams */
  dsi_graph_fork(g);
  int q;
  if (c->q_lora_rank > 0) {
    int q_a = linear(bd, "q_a_proj", DSI_PROF_ATTN, &w->q_a_proj, xn, DSI_EPI_STORE); /* [T, q_lora] */
    rmsnorm(bd, "q_a_norm", DSI_PROF_ATTN, w->q_a_layernorm, q_a, c->q_lora_rank, 1);
    q = linear(bd, "q_b_proj", DSI_PROF_ATTN, &w->q_b_proj, q_a, DSI_EPI_STORE);
  } else {
    q = linear(bd, "q_proj", DSI_PROF_ATTN, &w->q_proj, xn, DSI_EPI_STORE);
  }
  split_rows(bd, q, H, nope + rope); /* [T, H, nope + rope] */
  dsi_op *op = dsi_graph_op(g, DSI_OP_ROPE_Q, "rope_q", DSI_PROF_ATTN);
  op->in[0] = op->out[0] = q;
  dsi_graph_stream(g, 1);
  int kv = linear(bd, "kv_a_proj", DSI_PROF_ATTN, &w->kv_a_proj_with_mqa, xn, DSI_EPI_STORE); /* [T, kv_lora + rope] */
  op = dsi_graph_op(g, DSI_OP_KV_WRITE, "kv_write", DSI_PROF_ATTN);
  op->lw = w;
  op->in[0] = kv;
  op->out[0] = kv_cache;
  dsi_graph_join(g);

  int attn = TENSOR(bd, "attn", F32, T, H, vd); /* [T, H, v_head_dim] */
  if (w->mla_fmt == DSI_MLA_KV_B) {
    op = dsi_graph_op(g, DSI_OP_ATTN_ROWMAJOR, "attn_core", DSI_PROF_ATTN);
    op->lw = w;
    op->in[0] = q;
    op->in[1] = kv_cache;
    op->out[0] = attn;
  } else {
    /* absorbed, in chunks of attn_chunk tokens: queries into latent space,
     * the core over the cache, back out through W_UV */
    int chunk = DSI_MIN(T, f->attn_chunk);
    for (int t0 = 0; t0 < T; t0 += chunk) {
      int q_lat = TENSOR(bd, "q_lat", F32, chunk, H, row); /* [chunk, H, kv_lora + rope] */
      op = dsi_graph_op(g, DSI_OP_ATTN_QLAT, "w_uk", DSI_PROF_ATTN);
      op->lw = w;
      op->t0 = t0;
      op->in[0] = q;
      op->out[0] = q_lat;
      int o_lat = TENSOR(bd, "o_lat", F32, chunk, H, kvl); /* [chunk, H, kv_lora] */
      op = dsi_graph_op(g, DSI_OP_ATTN_CORE, "attn_core", DSI_PROF_ATTN);
      op->lw = w;
      op->t0 = t0;
      op->in[0] = q_lat;
      op->in[1] = kv_cache;
      op->out[0] = o_lat;
      op = dsi_graph_op(g, DSI_OP_ATTN_OUT, "w_uv", DSI_PROF_ATTN);
      op->lw = w;
      op->t0 = t0;
      op->in[0] = o_lat;
      op->out[0] = attn;
    }
    if (f->mla && T >= DSI_MLA_SEGMENT_MIN) { /* prefill segments the cost model gives to the non-absorbed form */
      op = dsi_graph_op(g, DSI_OP_ATTN_NAIVE, "attn_naive", DSI_PROF_ATTN);
      op->lw = w;
      op->in[0] = q;
      op->in[1] = kv_cache;
      op->out[0] = attn;
    }
  }
  return linear(bd, "o_proj", DSI_PROF_ATTN, &w->o_proj, attn, DSI_EPI_STORE); /* [T, hidden] */
}

/* ---- MLP: down(silu(gate x) * up x) ---- */
typedef struct {
  const char *gate_up, *gate, *up, *down;
  int cat;
} mlp_names;
static const mlp_names k_dense = {"dense_gate_up", "dense_gate", "dense_up", "dense_down", DSI_PROF_DENSE};
static const mlp_names k_shared = {"shared_gate_up", "shared_gate", "shared_up", "shared_down", DSI_PROF_MOE};

static int mlp(builder *bd, const mlp_names *k, const dsi_layer_weights *w, int xn) {
  if (w->ffn_fmt == DSI_FFN_GATE_UP) { /* gate and up in one pass, SiLU-mul fused */
    int h = linear(bd, k->gate_up, k->cat, &w->gate_up, xn, DSI_EPI_SILU_PAIRS); /* [T, inter] */
    return linear(bd, k->down, k->cat, &w->down_proj, h, DSI_EPI_STORE);
  }
  int hg = linear(bd, k->gate, k->cat, &w->gate_proj, xn, DSI_EPI_STORE); /* [T, inter] */
  int hu = linear(bd, k->up, k->cat, &w->up_proj, xn, DSI_EPI_STORE);
  dsi_op *op = dsi_graph_op(bd->g, DSI_OP_SILU_MUL, "silu_mul", k->cat);
  op->epi = w->gate_proj.rows;
  op->in[0] = hg;
  op->in[1] = hu;
  op->out[0] = hg;
  return linear(bd, k->down, k->cat, &w->down_proj, hg, DSI_EPI_STORE);
}

/* ---- MoE: route, each expert on its tokens, plus the shared experts ---- */
/* the shared experts on the fork's second stream; -1 when the model has none */
static int shared_experts(builder *bd, const dsi_layer_weights *w, int xn) {
  if (bd->f->c->n_shared_experts <= 0) return -1;
  dsi_graph_stream(bd->g, 1);
  int y = mlp(bd, &k_shared, w, xn);
  dsi_graph_stream(bd->g, 0);
  return y;
}

static int moe(builder *bd, const dsi_layer_weights *w, int xn) {
  const dsi_config *c = bd->f->c;
  dsi_graph *g = bd->g;
  int T = bd->T, E = c->n_routed_experts, K = c->num_experts_per_tok, D = c->hidden_size;
  /* the shared experts do not wait for routing: a stream of their own;
   * under overlap, recorded after the dispatch, which they run beside */
  dsi_graph_fork(g);
  int shared = -1, dispatch = g->cur_rows == DSI_ROWS_SHARD && bd->f->ep > 1, late = dispatch && bd->overlap;
  if (!late) shared = shared_experts(bd, w, xn);
  int scores = linear(bd, "router", DSI_PROF_MOE, &w->gate, xn, DSI_EPI_STORE); /* [T, n_experts] */
  int ids = TENSOR(bd, "topk_ids", DSI_DTYPE_I32, T, K), weights = TENSOR(bd, "topk_w", F32, T, K);
  dsi_op *op = dsi_graph_op(g, DSI_OP_ROUTER_TOPK, "router_topk", DSI_PROF_MOE);
  op->lw = w;
  op->in[0] = scores;
  op->out[0] = ids;
  op->out[1] = weights;
  /* expert parallel over this rank's tokens: each token's row goes to the
   * ranks holding its experts, which run them on the rows they receive and
   * send the sums back (the combine) */
  int plan = -1, rows_in = xn;
  if (dispatch) {
    plan = TENSOR(bd, "moe_plan", DSI_DTYPE_I32, dsi_moe_plan_len(bd->f, T));
    rows_in = TENSOR(bd, "moe_rows", F32, T, D);
    int rids = TENSOR(bd, "moe_rows_ids", DSI_DTYPE_I32, T, K), rw = TENSOR(bd, "moe_rows_w", F32, T, K);
    op = collective(bd, DSI_OP_MOE_DISPATCH, "moe_dispatch");
    op->in[0] = xn;
    op->in[1] = ids;
    op->in[2] = weights;
    op->out[0] = rows_in;
    op->out[1] = rids;
    op->out[2] = rw;
    op->out[3] = plan;
    ids = rids;
    weights = rw;
    if (late) shared = shared_experts(bd, w, xn);
    g->cur_rows = DSI_ROWS_RECV;
  }
  int start = TENSOR(bd, "exp_start", DSI_DTYPE_I32, E + 1); /* expert e: pairs [start[e], start[e+1]) */
  int tok = TENSOR(bd, "exp_tok", DSI_DTYPE_I32, T * K);     /* token of each pair, by expert */
  int pw = TENSOR(bd, "exp_w", F32, T * K);                  /* its routing weight */
  int routed = TENSOR(bd, "moe_out", F32, T, D);             /* [T, hidden] routed experts' sum */
  op = dsi_graph_op(g, DSI_OP_MOE_SORT, "moe_sort", DSI_PROF_MOE);
  op->in[0] = ids;
  op->in[1] = weights;
  op->out[0] = start;
  op->out[1] = tok;
  op->out[2] = pw;
  op->out[3] = routed;
  if (w->ffn_fmt == DSI_FFN_GATE_UP) { /* the grouped expert matmul */
    int h = TENSOR(bd, "moe_hidden", F32, T * K, w->exp_gate_up[bd->f->exp_lo].rows / 2); /* [pairs, moe_inter] */
    op = dsi_graph_op(g, DSI_OP_MOE_GATE_UP, "moe_gate_up", DSI_PROF_MOE);
    op->lw = w;
    op->in[0] = rows_in;
    op->in[1] = start;
    op->in[2] = tok;
    op->out[0] = h;
    op = dsi_graph_op(g, DSI_OP_MOE_DOWN, "moe_down", DSI_PROF_MOE);
    op->lw = w;
    op->in[0] = h;
    op->in[1] = start;
    op->in[2] = tok;
    op->in[3] = pw;
    op->out[0] = routed;
  } else {
    op = dsi_graph_op(g, DSI_OP_MOE_ROWMAJOR, "moe_experts", DSI_PROF_MOE);
    op->lw = w;
    op->in[0] = rows_in;
    op->in[1] = start;
    op->in[2] = tok;
    op->in[3] = pw;
    op->out[0] = routed;
  }
  if (dispatch) {
    g->cur_rows = DSI_ROWS_SHARD;
    int back = TENSOR(bd, "moe_out", F32, T, D);
    op = collective(bd, DSI_OP_MOE_COMBINE, "moe_combine");
    op->in[0] = routed;
    op->in[1] = plan;
    op->out[0] = back;
    routed = back;
  } else if (g->cur_rows == DSI_ROWS_ALL && bd->f->ep > 1) {
    /* expert parallel over every token: each rank summed its own experts' share */
    op = collective(bd, DSI_OP_ALL_REDUCE, "ep_all_reduce");
    op->in[0] = routed;
    op->out[0] = routed;
  }
  dsi_graph_join(g);
  if (shared < 0) return routed;
  add(bd, "moe_add", DSI_PROF_MOE, shared, routed, D);
  return shared;
}

/* ---- tensor parallel: from attention's partial sums to the FFN and back ---- */
/* attn holds this rank's heads' share of o_proj for every token. Sum it
 * into this rank's 1/N of the tokens (reduce-scatter; or all-reduce, then
 * split), run the residual add, the norm and the FFN on those tokens only,
 * and all-gather the residual stream x for the next layer. */
static void ffn_sharded(builder *bd, const dsi_layer_weights *w, int x, int attn) {
  dsi_graph *g = bd->g;
  int T = bd->T, D = bd->f->c->hidden_size;
  int xs = TENSOR(bd, "x_shard", F32, T, D); /* [this rank's tokens, hidden] */
  dsi_op *op;
  if (bd->f->tp_to_ep == DSI_TP_TO_EP_ALLREDUCE) {
    op = collective(bd, DSI_OP_ALL_REDUCE, "tp_all_reduce");
    op->in[0] = op->out[0] = attn;
    add(bd, "residual_add", DSI_PROF_OTHER, x, attn, D);
    g->cur_rows = DSI_ROWS_SHARD;
    op = dsi_graph_op(g, DSI_OP_SHARD, "tp_split", DSI_PROF_OTHER);
    op->in[0] = x;
    op->out[0] = xs;
  } else {
    g->cur_rows = DSI_ROWS_SHARD;
    int part = TENSOR(bd, "attn_shard", F32, T, D);
    op = collective(bd, DSI_OP_REDUCE_SCATTER, "tp_reduce_scatter");
    op->in[0] = attn;
    op->out[0] = part;
    op = dsi_graph_op(g, DSI_OP_SHARD, "tp_split", DSI_PROF_OTHER);
    op->in[0] = x;
    op->out[0] = xs;
    add(bd, "residual_add", DSI_PROF_OTHER, xs, part, D);
  }
  int xn = rmsnorm(bd, "ffn_norm", DSI_PROF_OTHER, w->post_attention_layernorm, xs, D, 0);
  add(bd, "residual_add", DSI_PROF_OTHER, xs, w->is_moe ? moe(bd, w, xn) : mlp(bd, &k_dense, w, xn), D);
  g->cur_rows = DSI_ROWS_ALL;
  op = collective(bd, DSI_OP_ALL_GATHER, "tp_all_gather");
  op->in[0] = xs;
  op->out[0] = x;
}

/* ---- the model ---- */
/* one decoder layer over the residual stream x */
static void layer(builder *bd, const dsi_layer_weights *w, int x) {
  int D = bd->f->c->hidden_size;
  int xn = rmsnorm(bd, "attn_norm", DSI_PROF_OTHER, w->input_layernorm, x, D, 0);
  int attn = mla(bd, w, xn);
  if (bd->f->tp > 1) { /* heads split: partial sums, the FFN on this rank's tokens */
    ffn_sharded(bd, w, x, attn);
    return;
  }
  add(bd, "residual_add", DSI_PROF_OTHER, x, attn, D);
  xn = rmsnorm(bd, "ffn_norm", DSI_PROF_OTHER, w->post_attention_layernorm, x, D, 0);
  add(bd, "residual_add", DSI_PROF_OTHER, x, w->is_moe ? moe(bd, w, xn) : mlp(bd, &k_dense, w, xn), D);
}

/* The graph of T tokens, as one batch or as two micro-batches (each layer
 * recorded for each, then interleaved at their collectives); NULL when
 * memory ran out while recording it. */
static dsi_graph *build(const dsi_fctx *f, int T, int overlap, int two_batch) {
  const dsi_model *m = f->m;
  const dsi_config *c = f->c;
  int D = c->hidden_size, n_mb = two_batch ? 2 : 1;
  builder bd = {f, dsi_graph_new(T), T, overlap};
  dsi_graph *g = bd.g;
  if (!g) return NULL;
  g->two_batch = two_batch;
  /* DP attention: every op on this rank's tokens, the experts reached by dispatch */
  int rows = f->attn_dp ? DSI_ROWS_SHARD : DSI_ROWS_ALL;
  g->cur_rows = rows;
  int x[2];
  for (int k = 0; k < n_mb; k++) {
    g->cur_mb = two_batch ? k + 1 : 0;
    x[k] = TENSOR(&bd, "x", F32, T, D); /* [T, hidden] the residual stream */
    dsi_op *op = dsi_graph_op(g, DSI_OP_EMBED, "embed", DSI_PROF_OTHER);
    op->out[0] = x[k];
  }
  for (int L = 0; L < c->num_hidden_layers; L++) {
    g->cur_layer = L;
    int from = g->n_ops;
    for (int k = 0; k < n_mb; k++) {
      g->cur_mb = two_batch ? k + 1 : 0;
      g->cur_stage = 0;
      layer(&bd, &m->layers[L], x[k]);
      DSI_ASSERT(g->cur_rows == rows);
    }
    if (two_batch) dsi_graph_interleave(g, from);
  }
  g->cur_layer = -1;
  for (int k = 0; k < n_mb; k++) {
    g->cur_mb = two_batch ? k + 1 : 0;
    int xf = rmsnorm(&bd, "final_norm", DSI_PROF_LM_HEAD, m->norm, x[k], D, 0);
    g->ops[g->n_ops - 1].flags |= DSI_ROWS_LOGITS;
    /* micro-batch 2's rows follow micro-batch 1's */
    int logits = dsi_graph_tensor(g, "logits", DSI_T_LOGITS, F32, 2, (int64_t[]){T, f->lm_cols});
    dsi_op *op = dsi_graph_op(g, DSI_OP_MATMUL, "lm_head", DSI_PROF_LM_HEAD);
    op->w = &m->lm_head;
    op->epi = DSI_EPI_STORE;
    op->flags = DSI_ROWS_LOGITS;
    op->in[0] = xf;
    op->out[0] = logits;
  }
  /* every op's workspace, as its table entry sizes it */
  for (int i = 0; i < g->n_ops; i++) {
    const dsi_op_def *d = &dsi_op_defs[g->ops[i].kind];
    if (!d->ws) continue;
    dsi_op_ws ws = d->ws(f, &g->ops[i], T);
    dsi_graph_workspace(g, i, ws.shared, ws.thread, f->mm.nth);
  }
  if (g->oom) {
    dsi_graph_free(g);
    return NULL;
  }
  return g;
}

/* ---- plans and runs ---- */
/* Buckets are powers of two up to max_tokens: a batch of T tokens runs on
 * the plan for the next power of two, so at most log2(max_tokens) + 1
 * plans exist, each holding at most twice the activations its batches
 * need; ops read the real T at run time. The cache keeps the most recently
 * used DSI_FWD_PLANS of them. */
#define DSI_FWD_PLANS 8

typedef struct {
  dsi_graph *g;
  unsigned long used;
} plan_slot;

struct dsi_fwd {
  dsi_fctx f;
  dsi_pool *pool;
  dsi_prof *prof;
  dsi_fwd_exec_opts x;
  plan_slot plans[DSI_FWD_PLANS];
  unsigned long clock;
  long captures;
  uint8_t *arena;
  size_t arena_cap;
  uint8_t **ptr;
  int ptr_cap;
  dsi_opstate *st;
  int st_cap;
  void *bars;   /* the executor's barriers, for the largest plan yet */
  size_t bars_cap;
  int *pids;    /* [st_cap] */
  uint8_t *naive; /* [max_tokens] this step's tokens in non-absorbed segments */
  uint8_t *seen;  /* [max_tokens] two micro-batches: sequences of the first */
  int32_t *mb_rows; /* [max_tokens] the second micro-batch's logit rows */
  dsi_commer *comm; /* the communication thread (overlap between ranks), or NULL */
  int32_t *dp_idx;  /* DP attention: [6 max_tokens] this rank's batch, its logit rows, counts */
  float *dp_logits, *dp_gather; /* DP attention or lm_head split: this rank's logit rows, rank 0's gather */
  size_t dp_logits_cap, dp_gather_cap;
  int *vs_counts;   /* lm_head split: [2 ranks] the gather's counts and offsets */
  int hugepage;   /* advise huge pages for the arena */
};

int dsi_fwd_bucket(const dsi_fwd *fw, int T) {
  int b = 1;
  while (b < T) b *= 2;
  return DSI_MIN(b, fw->f.max_tokens);
}

static dsi_plan_opts plan_opts(const dsi_fwd *fw) {
  return (dsi_plan_opts){.fuse = fw->x.fuse, .act_bf16 = fw->f.mm.act_bf16, .streams = fw->x.streams,
                         .n_threads = fw->f.mm.nth, .min_team = fw->x.min_team,
                         .overlap = fw->x.overlap && fw->f.coll.size > 1};
}

/* steps of T tokens may run as two micro-batches: collectives overlapped
 * and the step large enough */
static int two_batch_size(const dsi_fwd *fw, int T) {
  return fw->x.overlap && fw->f.coll.size > 1 && fw->x.two_batch_min > 0 && T >= fw->x.two_batch_min;
}

/* the plan for T's bucket (as two micro-batches or one batch), captured on first use */
static dsi_graph *plan_for(dsi_fwd *fw, int T, int two_batch, dsi_err *err) {
  int bucket = dsi_fwd_bucket(fw, T);
  plan_slot *lru = &fw->plans[0];
  for (int i = 0; i < DSI_FWD_PLANS; i++) {
    plan_slot *s = &fw->plans[i];
    if (s->g && s->g->T == bucket && s->g->two_batch == two_batch) {
      s->used = ++fw->clock;
      return s->g;
    }
    if (!s->g || (lru->g && s->used < lru->used)) lru = s;
  }
  dsi_graph *g = build(&fw->f, bucket, fw->x.overlap && fw->f.coll.size > 1, two_batch);
  dsi_plan_opts po = plan_opts(fw);
  if (!g || dsi_graph_plan(g, &po)) {
    dsi_graph_free(g);
    return dsi_errf(err, DSI_E_NOMEM, "out of memory capturing the plan for %d tokens", bucket), NULL;
  }
  if (g->arena_bytes > fw->arena_cap) {
    dsi_free_aligned(fw->arena);
    fw->arena_cap = 0;
    if (!(fw->arena = dsi_alloc_aligned_huge(g->arena_bytes, fw->hugepage))) {
      dsi_errf(err, DSI_E_NOMEM, "cannot allocate the %.1f MB activation arena for %d tokens", g->arena_bytes / 1e6,
               bucket);
      dsi_graph_free(g);
      return NULL;
    }
    fw->arena_cap = g->arena_bytes;
  }
  dsi_graph_free(lru->g);
  lru->g = g;
  lru->used = ++fw->clock;
  fw->captures++;
  return g;
}

/* the executor's per-run state, grown to g's size; DSI_OK or DSI_E_NOMEM
 * (then a cap is 0 again, so the next run tries anew) */
static int grow_run_state(dsi_fwd *fw, const dsi_graph *g) {
  if (g->n_ts > fw->ptr_cap) {
    free(fw->ptr);
    fw->ptr_cap = (fw->ptr = calloc(g->n_ts, sizeof *fw->ptr)) ? g->n_ts : 0;
    if (!fw->ptr) return DSI_E_NOMEM;
  }
  if (g->n_ops > fw->st_cap) {
    dsi_free_aligned(fw->st);
    free(fw->pids);
    fw->st = dsi_alloc_aligned((size_t)g->n_ops * sizeof *fw->st);
    fw->pids = malloc((size_t)g->n_ops * sizeof(int));
    fw->st_cap = fw->st && fw->pids ? g->n_ops : 0;
    if (!fw->st_cap) return DSI_E_NOMEM;
  }
  if (dsi_exec_bars_bytes(g->n_regions) > fw->bars_cap) {
    dsi_free_aligned(fw->bars);
    fw->bars = dsi_alloc_aligned(dsi_exec_bars_bytes(g->n_regions));
    fw->bars_cap = fw->bars ? dsi_exec_bars_bytes(g->n_regions) : 0;
    if (!fw->bars) return DSI_E_NOMEM;
  }
  return DSI_OK;
}

/* ---- DP attention: each rank its own sequences' tokens ---- */
/* the rank a sequence's tokens (and its cache rows) live on */
static int dp_rank(const dsi_fctx *f, int seq) { return seq % f->coll.size; }

static int grow_f32(float **p, size_t *cap, size_t n) {
  if (n <= *cap) return DSI_OK;
  float *q = realloc(*p, n * sizeof(float));
  if (!q) return DSI_E_NOMEM;
  *p = q;
  *cap = n;
  return DSI_OK;
}

static int run_local(dsi_fwd *fw, const dsi_fwd_batch *b, int plan_T, int two_batch, const dsi_fwd_cache *cache,
                     float *logits, dsi_err *err);
static int split_point(dsi_fwd *fw, const dsi_fwd_batch *b);

/* This rank's tokens as a batch of their own (possibly none: the rank
 * still takes part in the expert dispatch), their logits to rank 0, which
 * puts every row back in the batch's order. */
static int run_dp(dsi_fwd *fw, const dsi_fwd_batch *b, const dsi_fwd_cache *cache, float *logits, dsi_err *err) {
  const dsi_fctx *f = &fw->f;
  int me = f->coll.rank, N = f->coll.size, V = f->c->vocab_size, n = 0, nl = 0;
  int32_t *tok = fw->dp_idx, *pos = tok + f->max_tokens, *seq = pos + f->max_tokens, *slot = seq + f->max_tokens;
  int32_t *rows = slot + f->max_tokens, *map = rows + f->max_tokens;
  int l = 0;
  for (int i = 0; i < b->n_tokens; i++) {
    int want = l < b->n_logits && b->logit_rows[l] == i;
    l += want;
    if (dp_rank(f, b->seq[i]) != me) continue;
    if (want) rows[nl++] = n;
    tok[n] = b->tokens[i], pos[n] = b->pos[i], seq[n] = b->seq[i], slot[n] = b->slot[i];
    n++;
  }
  if (grow_f32(&fw->dp_logits, &fw->dp_logits_cap, (size_t)DSI_MAX(nl, 1) * V))
    return dsi_errf(err, DSI_E_NOMEM, "out of memory for %d rows of logits", nl);
  dsi_fwd_batch lb = {.n_tokens = n, .tokens = tok, .pos = pos, .seq = seq, .slot = slot,
                      .block_tables = b->block_tables, .logit_rows = rows, .n_logits = nl};
  /* planned for the whole step: the dispatch may bring this rank rows of every token */
  int two = two_batch_size(fw, b->n_tokens) && split_point(fw, b) > 0; /* the same on every rank */
  int rc = run_local(fw, &lb, b->n_tokens, two, cache, fw->dp_logits, err);
  if (rc) return rc;
  /* rank r's rows, in the order of its tokens, then back into the batch's order */
  int *counts = (int *)map, *displs = counts + N;
  for (int r = 0; r < N; r++) counts[r] = 0;
  l = 0;
  for (int i = 0; i < b->n_tokens && l < b->n_logits; i++)
    if (b->logit_rows[l] == i) counts[dp_rank(f, b->seq[i])] += V, l++;
  for (int r = 0, at = 0; r < N; r++) displs[r] = at, at += counts[r];
  float *all = NULL;
  if (me == 0 && grow_f32(&fw->dp_gather, &fw->dp_gather_cap, (size_t)DSI_MAX(b->n_logits, 1) * V))
    return dsi_errf(err, DSI_E_NOMEM, "out of memory for %d rows of logits", b->n_logits);
  all = fw->dp_gather;
  f->coll.gather_f32(f->coll.ctx, fw->dp_logits, nl * V, all, counts, displs);
  if (me != 0 || !logits) return DSI_OK;
  int *next = displs; /* each rank's next row */
  l = 0;
  for (int i = 0; i < b->n_tokens && l < b->n_logits; i++)
    if (b->logit_rows[l] == i) {
      int r = dp_rank(f, b->seq[i]);
      memcpy(logits + (size_t)l * V, all + next[r], (size_t)V * sizeof(float));
      next[r] += V;
      l++;
    }
  return DSI_OK;
}

/* lm_head split by vocabulary: every rank computes its columns of the
 * step's logit rows (every rank holds every token's final hidden state),
 * rank 0 gathers them and lays each row's columns side by side. */
static int run_vocab_split(dsi_fwd *fw, const dsi_fwd_batch *b, int two, const dsi_fwd_cache *cache, float *logits,
                           dsi_err *err) {
  const dsi_fctx *f = &fw->f;
  int me = f->coll.rank, N = f->coll.size, V = f->c->vocab_size, nl = b->n_logits, vc = f->lm_cols;
  if (!nl) return run_local(fw, b, b->n_tokens, two, cache, NULL, err); /* the same on every rank */
  if (grow_f32(&fw->dp_logits, &fw->dp_logits_cap, (size_t)nl * vc) ||
      (me == 0 && grow_f32(&fw->dp_gather, &fw->dp_gather_cap, (size_t)nl * V)))
    return dsi_errf(err, DSI_E_NOMEM, "out of memory for %d rows of logits", nl);
  int rc = run_local(fw, b, b->n_tokens, two, cache, fw->dp_logits, err);
  if (rc) return rc;
  int *counts = fw->vs_counts, *displs = counts + N;
  for (int r = 0, at = 0; r < N; r++) {
    counts[r] = nl * (int)((int64_t)V * (r + 1) / N - (int64_t)V * r / N);
    displs[r] = at, at += counts[r];
  }
  f->coll.gather_f32(f->coll.ctx, fw->dp_logits, nl * vc, fw->dp_gather, counts, displs);
  if (me != 0 || !logits) return DSI_OK;
  for (int r = 0; r < N; r++) {
    int v0 = (int)((int64_t)V * r / N), w = counts[r] / nl;
    for (int l = 0; l < nl; l++)
      memcpy(logits + (size_t)l * V + v0, fw->dp_gather + displs[r] + (size_t)l * w, (size_t)w * sizeof(float));
  }
  return DSI_OK;
}

int dsi_fwd_run(dsi_fwd *fw, const dsi_fwd_batch *b, const dsi_fwd_cache *cache, float *logits, dsi_err *err) {
  DSI_ASSERT(b->n_tokens > 0 && b->n_tokens <= fw->f.max_tokens);
  if (fw->f.attn_dp) return run_dp(fw, b, cache, logits, err);
  int two = two_batch_size(fw, b->n_tokens) && split_point(fw, b) > 0;
  if (fw->f.vocab_split > 1) return run_vocab_split(fw, b, two, cache, logits, err);
  if (!logits && b->n_logits) { /* a follower: no logits here */
    dsi_fwd_batch nb = *b;
    nb.n_logits = 0;
    return run_local(fw, &nb, nb.n_tokens, two, cache, NULL, err);
  }
  return run_local(fw, b, b->n_tokens, two, cache, logits, err);
}

/* Where b splits into two micro-batches: the boundary between sequences
 * nearest its middle, where no sequence has tokens on both sides (the
 * second's attention would need the first's cache rows of the same
 * layer). 0 when there is none. */
static int split_point(dsi_fwd *fw, const dsi_fwd_batch *b) {
  int n = b->n_tokens, best = 0;
  for (int i = 1; i < n; i++)
    if (b->seq[i] != b->seq[i - 1] && abs(2 * i - n) < abs(2 * best - n)) best = i;
  if (!best) return 0;
  for (int i = 0; i < n; i++)
    if (b->seq[i] < 0 || b->seq[i] >= fw->f.max_tokens) return 0; /* not a step's index: no split */
  memset(fw->seen, 0, (size_t)fw->f.max_tokens);
  for (int i = 0; i < best; i++) fw->seen[b->seq[i]] = 1;
  for (int i = best; i < n; i++)
    if (fw->seen[b->seq[i]]) return 0;
  return best;
}

/* micro-batch k of the step r: its tokens [lo, lo + n) of b, its logit
 * rows (those of the first come first among the step's) */
static void micro_batch(dsi_fwd *fw, const dsi_xrun *r, int lo, int n, const int32_t *rows, int n_rows,
                        dsi_fwd_batch *mb, dsi_xrun *mr) {
  const dsi_fwd_batch *b = r->b;
  *mb = (dsi_fwd_batch){.n_tokens = n, .tokens = b->tokens + lo, .pos = b->pos + lo, .seq = b->seq + lo,
                        .slot = b->slot + lo, .block_tables = b->block_tables, .logit_rows = rows, .n_logits = n_rows};
  *mr = (dsi_xrun){.f = r->f, .g = r->g, .b = mb, .cache = r->cache, .T = n, .sh_n = n, .ptr = r->ptr, .st = r->st,
                   .naive = r->naive + lo, .bars = r->bars, .pids = r->pids};
  if (fw->f.tp > 1) dsi_shard_of(n, fw->f.coll.rank, fw->f.coll.size, &mr->sh_lo, &mr->sh_n);
  if (fw->f.mla) mr->n_naive = dsi_mla_prefill_plan(fw->f.mla, mb, fw->f.m->layers[0].w_uk_t.dtype, fw->naive + lo);
}

/* the batch b on the plan for plan_T tokens (>= b's), as two micro-batches
 * when two_batch (b split at its split_point; under DP attention either
 * may be empty) */
static int run_local(dsi_fwd *fw, const dsi_fwd_batch *b, int plan_T, int two_batch, const dsi_fwd_cache *cache,
                     float *logits, dsi_err *err) {
  int T = b->n_tokens;
  int eager = fw->x.exec == DSI_EXEC_EAGER;
  dsi_graph *g;
  if (eager) two_batch = 0;
  if (eager) { /* issued op by op: recorded afresh each step, no plan */
    g = build(&fw->f, plan_T, 0, 0);
    if (!g || dsi_graph_plan_eager(g)) {
      dsi_graph_free(g);
      return dsi_errf(err, DSI_E_NOMEM, "out of memory recording the step of %d tokens", T);
    }
  } else if (!(g = plan_for(fw, plan_T, two_batch, err))) {
    return err->status;
  }
  if (grow_run_state(fw, g)) {
    if (eager) dsi_graph_free(g);
    return dsi_errf(err, DSI_E_NOMEM, "out of memory for the executor's state (%d ops)", g->n_ops);
  }
  dsi_xrun r = {.f = &fw->f, .g = g, .b = b, .cache = cache, .T = T, .sh_n = T, .ptr = fw->ptr, .st = fw->st,
                .naive = fw->naive, .bars = fw->bars, .pids = fw->pids};
  dsi_fwd_batch mb[2];
  dsi_xrun mr[2];
  int nl1 = 0; /* logit rows of the first micro-batch */
  if (two_batch) {
    int s = split_point(fw, b);
    if (fw->f.attn_dp && !s) s = T; /* one sequence (or none) here: the second micro-batch is empty */
    DSI_ASSERT(s > 0 || fw->f.attn_dp);
    while (nl1 < b->n_logits && b->logit_rows[nl1] < s) nl1++;
    for (int l = nl1; l < b->n_logits; l++) fw->mb_rows[l - nl1] = b->logit_rows[l] - s;
    micro_batch(fw, &r, 0, s, b->logit_rows, nl1, &mb[0], &mr[0]);
    micro_batch(fw, &r, s, T - s, fw->mb_rows, b->n_logits - nl1, &mb[1], &mr[1]);
    r.mb = mr;
    if (fw->prof) dsi_prof_step_two_batch(fw->prof);
  }
  for (int t = 0; t < g->n_ts; t++) {
    const dsi_tensor *x = &g->ts[t];
    fw->ptr[t] = x->kind == DSI_T_KV ? (uint8_t *)cache->layer[x->layer]
                 : x->kind == DSI_T_LOGITS ? (uint8_t *)(logits && x->mb == 2 ? logits + (size_t)nl1 * fw->f.lm_cols
                                                                              : logits)
                 : eager ? NULL : fw->arena + x->off;
  }
  if (fw->f.tp > 1) dsi_shard_of(T, fw->f.coll.rank, fw->f.coll.size, &r.sh_lo, &r.sh_n);
  if (fw->f.mla && !two_batch) r.n_naive = dsi_mla_prefill_plan(fw->f.mla, b, fw->f.m->layers[0].w_uk_t.dtype, fw->naive);
  int rc = DSI_OK;
  if (eager) {
    rc = dsi_exec_eager(&r, fw->pool, fw->prof, err);
    dsi_graph_free(g);
  } else {
    dsi_exec_graph(&r, fw->pool, fw->prof, fw->x.poison, fw->arena, fw->comm);
  }
  return rc;
}

int dsi_fwd_plan_stats(dsi_fwd *fw, int T, dsi_fwd_stats *s, dsi_err *err) {
  memset(s, 0, sizeof *s);
  dsi_graph *g = plan_for(fw, T, two_batch_size(fw, T), err);
  if (!g) return err->status;
  s->bucket = g->T;
  s->arena_bytes = g->arena_bytes;
  s->sum_bytes = g->sum_bytes;
  for (int i = 0; i < g->n_ops; i++) {
    s->n_ops += !g->ops[i].dead;
    s->n_fused += g->ops[i].dead;
    s->n_waits += g->ops[i].dead ? 0 : g->ops[i].n_deps;
  }
  s->captures = fw->captures;
  s->n_regions = g->n_regions;
  s->n_split = g->n_split;
  return DSI_OK;
}

int dsi_fwd_check_plan(dsi_fwd *fw, int T, char *why, size_t why_len, dsi_err *err) {
  dsi_graph *g = plan_for(fw, T, two_batch_size(fw, T), err);
  if (!g) return err->status;
  int rc = dsi_graph_check(g, fw->f.mm.nth, why, why_len);
  return rc == DSI_E_NOMEM ? dsi_errf(err, rc, "%s", why) : rc;
}

void dsi_fwd_dump_plan(dsi_fwd *fw, int T, FILE *out) {
  dsi_err err = {0};
  dsi_graph *g = plan_for(fw, T, two_batch_size(fw, T), &err);
  if (g) dsi_graph_dump(g, out);
}

static void drop_plans(dsi_fwd *fw) {
  for (int i = 0; i < DSI_FWD_PLANS; i++) {
    dsi_graph_free(fw->plans[i].g);
    fw->plans[i].g = NULL;
  }
}

void dsi_fwd_set_exec(dsi_fwd *fw, const dsi_fwd_exec_opts *x) {
  fw->x = *x;
  if (fw->x.streams < 1) fw->x.streams = 1;
  /* the communication thread, once needed (without it the collectives run on a worker) */
  if (fw->x.overlap && fw->f.coll.size > 1 && !fw->comm && !(fw->comm = dsi_commer_new())) fw->x.overlap = 0;
  drop_plans(fw);
}

/* ---- set-up ---- */
int dsi_fwd_new(dsi_fwd **out, const dsi_model *m, dsi_pool *pool, const dsi_fwd_opts *o, dsi_err *err) {
  const dsi_config *c = &m->cfg;
  int max_tokens = o->max_tokens, max_context = o->max_context;
  int cap = o->isa ? dsi_isa_parse(o->isa) : DSI_ISA_AMX;
  if (cap < 0) return dsi_errf(err, DSI_E_INVAL, "isa '%s' is not one of " DSI_ISA_NAMES, o->isa);
  if (o->mla_form < DSI_MLA_AUTO || o->mla_form > DSI_MLA_NAIVE)
    return dsi_errf(err, DSI_E_INVAL, "MLA form %d is not one of auto, absorb, naive", o->mla_form);
  if (o->kv_dtype < DSI_KV_AUTO || o->kv_dtype > DSI_KV_F32)
    return dsi_errf(err, DSI_E_INVAL, "KV cache dtype %d is not one of auto, bf16, f32", o->kv_dtype);
  dsi_fwd *fw = calloc(1, sizeof *fw);
  if (!fw) return dsi_errf(err, DSI_E_NOMEM, "out of memory for the forward");
  dsi_fctx *f = &fw->f;
  fw->pool = pool;
  fw->hugepage = o->hugepage;
  fw->x = (dsi_fwd_exec_opts){.exec = DSI_EXEC_GRAPH, .streams = 1, .fuse = 1};
  f->m = m;
  f->c = c;
  /* the kernels, and what they multiply: bf16 activations where a bf16
   * kernel runs (packed weights), unless told; the cache in bf16 pair rows
   * for packed models unless told or in f32 precision (DeepSeek's own cache
   * dtype, half the bytes of f32 rows; the row-major attention reads f32
   * rows), multiplied as bf16 where AMX runs the bf16 forward and widened
   * to f32 elsewhere */
  _Static_assert((int)DSI_BF16_DOT_ON == (int)DSI_KERN_DOT_ON && (int)DSI_BF16_DOT_OFF == (int)DSI_KERN_DOT_OFF,
                 "the kernels' bf16_dot values are dsinfer.h's");
  const dsi_kern *k = dsi_kern_get_dot((dsi_isa)cap, o->bf16_dot);
  f->mm = dsi_mm_make(k, o->precision, m->packed, dsi_pool_size(pool));
  f->mm_lat = f->mm;
  f->mm_lat.act_i8 = 0;
  f->mm_lat.act_i16 = 0;
  int bf16 = f->mm.act_bf16;
  int H = c->num_attention_heads, kvl = c->kv_lora_rank, row = kvl + c->qk_rope_head_dim;
  int pairs_fit = m->packed && o->kv_block_size % DSI_ATTN_PAIR_CHUNK == 0 && kvl % 16 == 0 && row % 16 == 0;
  if (o->kv_dtype == DSI_KV_BF16 && !pairs_fit) {
    free(fw);
    return dsi_errf(err, DSI_E_INVAL, "a bf16 KV cache needs packed weights (not --mlock or --op-opt off), a block size "
                    "that is a multiple of %d (this one: %d) and latent widths that are multiples of 16 (%d + %d)",
                    DSI_ATTN_PAIR_CHUNK, o->kv_block_size, kvl, row - kvl);
  }
  f->kv_pairs = pairs_fit && (o->kv_dtype == DSI_KV_BF16 || (o->kv_dtype == DSI_KV_AUTO && o->precision != DSI_ACT_F32));
  f->attn_bf16 = f->kv_pairs && bf16 && k->amx;
  f->max_tokens = max_tokens;
  f->max_context = max_context;
  f->exp_lo = m->exp_lo;
  f->exp_hi = m->exp_hi;
  f->coll = o->coll;
  if (f->coll.size < 1) f->coll.size = 1;
  f->tp = m->tp_size > 1 ? m->tp_size : 1;
  f->ep = m->ep_size > 1 ? m->ep_size : 1;
  f->tp_to_ep = o->tp_to_ep;
  f->attn_dp = o->attn_dp && f->coll.size > 1;
  if (f->attn_dp && f->tp > 1) {
    free(fw);
    return dsi_errf(err, DSI_E_INVAL, "DP attention runs every head on each rank: the model's heads must not be split");
  }
  f->vocab_split = m->vocab_split > 1 ? m->vocab_split : 1;
  f->lm_cols = m->lm_head.rows;
  if (f->vocab_split > 1 && (f->vocab_split != f->coll.size || f->attn_dp)) {
    int vs = f->vocab_split, n = f->coll.size, dp = f->attn_dp;
    free(fw);
    return dp ? dsi_errf(err, DSI_E_INVAL, "lm_head split by vocabulary: not with DP attention, where each rank computes "
                                           "its own sequences' logits")
              : dsi_errf(err, DSI_E_INVAL, "lm_head is split over %d ranks but %d ranks run it", vs, n);
  }
  if ((f->tp > 1 && f->tp != f->coll.size) || (f->ep > 1 && f->ep != f->coll.size)) {
    int tp = f->tp, ep = f->ep, n = f->coll.size;
    free(fw);
    return dsi_errf(err, DSI_E_INVAL, "the model is split over %d ranks (heads) and %d (experts) but %d ranks run it",
                    tp, ep, n);
  }
  f->softmax_scale = dsi_config_softmax_scale(c);
  /* the absorbed attention's latent buffers hold a chunk of tokens: <= 32 MB each */
  f->attn_chunk = (int)DSI_MAX(1, DSI_MIN((long)max_tokens, (32l << 20) / ((long)H * kvl * 4)));
  size_t ctx_pad = DSI_CEIL_DIV(max_context, DSI_TILE_K) * DSI_TILE_K;
  f->att_s_len = DSI_MAX((size_t)H * ctx_pad, DSI_MIN((size_t)max_tokens * H * ctx_pad, (size_t)8 << 20));
  size_t half = c->qk_rope_head_dim / 2;
  f->rope_cos = dsi_alloc_aligned((size_t)max_context * half * sizeof(float));
  f->rope_sin = dsi_alloc_aligned((size_t)max_context * half * sizeof(float));
  if (!f->rope_cos || !f->rope_sin) {
    dsi_fwd_free(fw);
    return dsi_errf(err, DSI_E_NOMEM, "cannot allocate the forward's tables for %d positions", max_context);
  }
  fw->naive = calloc(max_tokens, 1);
  fw->seen = malloc(max_tokens);
  fw->mb_rows = malloc((size_t)max_tokens * sizeof(int32_t));
  if ((f->attn_dp && !(fw->dp_idx = malloc(((size_t)6 * max_tokens + 2 * (size_t)f->coll.size) * sizeof(int32_t)))) ||
      (f->vocab_split > 1 && !(fw->vs_counts = malloc(2 * (size_t)f->coll.size * sizeof(int))))) {
    dsi_fwd_free(fw);
    return dsi_errf(err, DSI_E_NOMEM, "out of memory for the forward's tables");
  }
  if (f->ep > 1) { /* the ranks' contiguous shares of the experts, as the loader cut them */
    int E = c->n_routed_experts;
    if ((f->exp_owner = malloc((size_t)E * sizeof(int))))
      for (int k = 0; k < f->ep; k++)
        for (int e = (int)((int64_t)E * k / f->ep); e < (int)((int64_t)E * (k + 1) / f->ep); e++) f->exp_owner[e] = k;
  }
  if (m->layers[0].mla_fmt == DSI_MLA_SPLIT) f->mla = dsi_mla_prefill_new(c, max_tokens, max_context, o->mla_form);
  /* per-head panels of the absorbed factors, once */
  int NL = c->num_hidden_layers;
  f->uk = calloc((size_t)NL * H, sizeof(dsi_mat));
  f->uv = calloc((size_t)NL * H, sizeof(dsi_mat));
  if (dsi_rope_tables(c, max_context, f->rope_cos, f->rope_sin) || !fw->naive || !fw->seen || !fw->mb_rows || !f->uk || !f->uv ||
      (f->ep > 1 && !f->exp_owner) ||
      (m->layers[0].mla_fmt == DSI_MLA_SPLIT && !f->mla)) {
    dsi_fwd_free(fw);
    return dsi_errf(err, DSI_E_NOMEM, "out of memory for the forward's tables");
  }
  for (int L = 0; L < NL; L++) {
    const dsi_layer_weights *w = &m->layers[L];
    if (w->mla_fmt != DSI_MLA_SPLIT) continue;
    for (int h = 0; h < H; h++) {
      f->uk[(size_t)L * H + h] = dsi_mat_panels(&w->w_uk_t, h * kvl / DSI_TILE_N, kvl);
      f->uv[(size_t)L * H + h] = dsi_mat_panels(&w->w_uv, h * c->v_head_dim / DSI_TILE_N, c->v_head_dim);
    }
  }
  *out = fw;
  return DSI_OK;
}

void dsi_fwd_set_prof(dsi_fwd *fw, dsi_prof *p) { fw->prof = p; }
int dsi_fwd_act(const dsi_fwd *fw) { return dsi_mm_act(&fw->f.mm); }
int dsi_fwd_kv_pairs(const dsi_fwd *fw) { return fw->f.kv_pairs; }
const char *dsi_fwd_isa(const dsi_fwd *fw) { return dsi_isa_str(fw->f.mm.k->level); }
const char *dsi_fwd_isa_best(void) { return dsi_isa_str(dsi_kern_best()->level); }
const char *dsi_fwd_matrix_isa(const dsi_fwd *fw) { return dsi_mm_matrix_isa(&fw->f.mm); }

void dsi_fwd_free(dsi_fwd *fw) {
  if (!fw) return;
  dsi_fctx *f = &fw->f;
  drop_plans(fw);
  dsi_free_aligned(f->rope_cos);
  dsi_free_aligned(f->rope_sin);
  free(f->uk);
  free(f->uv);
  free(f->exp_owner);
  dsi_mla_prefill_free(f->mla);
  dsi_commer_free(fw->comm);
  free(fw->dp_idx);
  free(fw->dp_logits);
  free(fw->dp_gather);
  free(fw->vs_counts);
  free(fw->naive);
  free(fw->seen);
  free(fw->mb_rows);
  dsi_free_aligned(fw->arena);
  free(fw->ptr);
  dsi_free_aligned(fw->st);
  dsi_free_aligned(fw->bars);
  free(fw->pids);
  free(fw);
}
