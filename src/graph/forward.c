/* graph: the DeepSeek-V3 forward (see forward.h). Sections in data-flow
 * order: rotary tables, parallel helpers, MLA attention, MLP and MoE, the
 * block and the whole model. Buffers are sized once for max_tokens; the
 * forward allocates nothing. */
#include "graph/forward.h"
#include "graph/gemm_run.h"
#include "graph/mla_prefill.h"
#include "graph/prof.h"
#include "kernels/vec.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct dsi_fwd {
  const dsi_model *m;
  const dsi_config *c;
  dsi_pool *pool;
  int nth, max_tokens, max_context;
  float softmax_scale;
  float *rope_cos, *rope_sin; /* [max_context, rope/2] */
  /* activations, [max_tokens, ...] each */
  float *x;      /* [T, hidden] residual stream */
  float *xn;     /* [T, hidden] normed input of a block */
  float *qa;     /* [T, q_lora] */
  float *q;      /* [T, H, nope + rope] */
  float *kva;    /* [T, kv_lora + rope] */
  float *attn;   /* [T, H * v] */
  float *out;    /* [T, hidden] block output */
  float *h_gate; /* [T, max inter] */
  float *h_up;   /* [T, max inter] */
  float *moe_y;  /* [T, hidden] routed experts' sum */
  float *xg, *yg;/* [T, hidden] one expert's gathered tokens / outputs */
  float *router_logits; /* [T, n_experts] */
  int32_t *topk_ids;    /* [T, top_k] */
  float *topk_w;        /* [T, top_k] */
  int32_t *exp_start;   /* [n_experts + 1]: expert e's pairs are [exp_start[e], exp_start[e+1]) */
  int32_t *exp_tok;     /* [T * top_k] token of each routed pair, grouped by expert */
  float *exp_w;         /* [T * top_k] its weight */
  float *final_x;       /* [T, hidden] normed rows for the lm_head */
  /* packed path */
  int attn_chunk;       /* tokens per pass of the absorbed attention */
  float *q_lat;         /* [attn_chunk, H, kv_lora + rope] queries in latent space, q_pe appended */
  /* prefill segments: attention as two matmuls over the sequence's cache */
  float *att_s;         /* [att_s_len] scores / probabilities, [rows of (token, head), ctx_pad] */
  size_t att_s_len;
  void *att_k, *att_vt; /* the cache packed as K [ctx, kv_lora + rope] and V^T [kv_lora, ctx] */
  int32_t *att_slots;   /* [max_context] cache slot of each position */
  uint8_t *att_skip;    /* [attn_chunk] tokens the segment path did */
  float *o_lat;         /* [attn_chunk, H, kv_lora] attention output in latent space */
  dsi_mla_prefill *mla_pf; /* prefill segments in the non-absorbed form, where cheaper */
  uint8_t *att_done;    /* [max_tokens] tokens it did */
  float *h_pairs;       /* [T * top_k, moe_inter'] routed experts' hidden rows, by pair */
  dsi_gemm_ctx gc;      /* matmuls on the pool: prepared activations, kernels */
  dsi_gemm *gemms;      /* [max(H, n_experts)] one batched call's matmuls */
  dsi_mat *views;       /* [2H] per-head panels of W_UK^T and W_UV */
  /* per-thread scratch */
  float **scratch;      /* [nth][scratch_len] */
  size_t scratch_len;
  dsi_prof *prof;       /* NULL: not profiling */
  int layer;            /* the layer being run, -1 outside them (profile labels) */
};

/* Profiling: name the op the next dispatches belong to; without a profiler
 * the cost arguments are never evaluated. Serial pieces on the calling
 * thread are timed from PROF_T0 to PROF_SERIAL. */
#define PROF_OP(f, name, cat, flops, wbytes, abytes)                                             \
  do {                                                                                           \
    if ((f)->prof) dsi_prof_op((f)->prof, name, cat, (f)->layer, flops, wbytes, abytes);         \
  } while (0)
#define PROF_T0(f) ((f)->prof ? dsi_now() : 0.0)
#define PROF_SERIAL(f, t0)                      \
  do {                                          \
    if ((f)->prof) dsi_prof_serial((f)->prof, t0); \
  } while (0)

static double mat_bytes(const dsi_mat *w) { return (double)w->rows * w->cols * dsi_dtype_size(w->dtype); }
/* one matmul's cost: y[m, rows] = x[m, cols] W^T */
#define MM_FLOPS(w, m) (2.0 * (m) * (w)->rows * (w)->cols)
#define MM_ACT(w, m) (4.0 * (m) * ((w)->rows + (w)->cols))

/* ---- rotary tables: interleaved pairs, YaRN frequencies at every position ---- */
void dsi_rope_tables(const dsi_config *c, int n_pos, float *cos_t, float *sin_t) {
  int d = c->qk_rope_head_dim, half = d / 2;
  float *freq = malloc(half * sizeof(float));
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
}

/* ---- parallel helpers ---- */
typedef struct {
  dsi_fwd *f;
  const dsi_mat *w;
  const float *x;
  int ldx, ldy, m;
  float *y;
} matmul_job;

static void matmul_task(void *ctx, int ith, int nth) {
  matmul_job *j = ctx;
  dsi_k_matmul(j->w, j->x, j->ldx, j->y, j->ldy, j->m, j->f->scratch[ith], ith, nth);
}

/* y[m, w->rows] = x[m, w->cols] W^T, over the pool */
static void matmul(dsi_fwd *f, const dsi_mat *w, const float *x, float *y, int m) {
  matmul_job j = {f, w, x, w->cols, w->rows, m, y};
  dsi_pool_run(f->pool, matmul_task, &j);
}

/* y[m, rows] = x[m, cols] W^T for one packed weight */
static void gemm1(dsi_fwd *f, const dsi_mat *w, const float *x, int ldx, float *y, int ldy, int m,
                  dsi_epilogue epi) {
  f->gemms[0] = (dsi_gemm){.w = w, .x = x, .ldx = ldx, .m = m, .y = y, .ldy = ldy, .epi = epi};
  dsi_gemm_batch(&f->gc, f->gemms, 1, w->rows, epi == DSI_EPI_SILU_PAIRS ? 32 : 16);
}

/* y = x W^T with whichever layout w is in; name and cat label it in a profile */
static void linear(dsi_fwd *f, const char *name, dsi_prof_cat cat, const dsi_mat *w, const float *x, float *y,
                   int m) {
  PROF_OP(f, name, cat, MM_FLOPS(w, m), mat_bytes(w), MM_ACT(w, m));
  if (w->layout == DSI_LAYOUT_TILES) gemm1(f, w, x, w->cols, y, w->rows, m, DSI_EPI_STORE);
  else matmul(f, w, x, y, m);
}

/* x += y on the calling thread (a serial op in a profile) */
static void add(dsi_fwd *f, const char *name, dsi_prof_cat cat, float *x, const float *y, size_t n) {
  PROF_OP(f, name, cat, (double)n, 0, 12.0 * n);
  double t0 = PROF_T0(f);
  dsi_vec()->add(x, y, (long)n);
  PROF_SERIAL(f, t0);
}

/* ---- MLA attention ---- */
typedef struct {
  dsi_fwd *f;
  const dsi_layer_weights *w;
  const dsi_fwd_batch *b;
  const dsi_fwd_cache *cache;
  int layer;
} attn_job;

/* profile label of the attention core over tokens [t0, t0 + n) not in
 * skip: per (token, head) the scores and weighted sum over its context plus
 * head_flops; each token's cache rows are read `passes` times */
static void prof_attn_core(dsi_fwd *f, const dsi_fwd_batch *b, int t0, int n, const uint8_t *skip,
                           double head_flops, double wbytes, int passes) {
  if (!f->prof) return;
  const dsi_config *c = f->c;
  int H = c->num_attention_heads, kvl = c->kv_lora_rank, row = kvl + c->qk_rope_head_dim;
  double ctx = 0, toks = 0;
  for (int t = t0; t < t0 + n; t++)
    if (!skip || !skip[t - t0]) {
      ctx += b->pos[t] + 1;
      toks++;
    }
  dsi_prof_op(f->prof, "attn_core", DSI_PROF_ATTN, f->layer, H * (2.0 * ctx * (row + kvl) + toks * head_flops),
              wbytes, 4.0 * ctx * row * passes);
}

/* Normalize the latent, rotate k_pe, store both in each token's cache slot. */
static void kv_write_task(void *ctx, int ith, int nth) {
  attn_job *j = ctx;
  dsi_fwd *f = j->f;
  const dsi_config *c = f->c;
  int kvl = c->kv_lora_rank, rope = c->qk_rope_head_dim, row = kvl + rope;
  long t0, t1;
  dsi_split(j->b->n_tokens, ith, nth, &t0, &t1);
  for (long t = t0; t < t1; t++) {
    const float *kv = f->kva + t * row;
    float *dst = j->cache->layer[j->layer] + (size_t)j->b->slot[t] * row;
    dsi_k_rmsnorm(kv, j->w->kv_a_layernorm, kvl, c->rms_norm_eps, dst);
    memcpy(dst + kvl, kv + kvl, rope * sizeof(float));
    size_t p = (size_t)j->b->pos[t] * (rope / 2);
    dsi_k_rope(dst + kvl, rope, f->rope_cos + p, f->rope_sin + p);
  }
}

/* Absorbed attention of one (token, head): the query moves into latent
 * space through W_UK, attends over the cached latents and rotated keys,
 * and the latent result leaves through W_UV. */
static void attn_task(void *ctx, int ith, int nth) {
  attn_job *j = ctx;
  dsi_fwd *f = j->f;
  const dsi_config *c = f->c;
  const dsi_mat *kv_b = &j->w->kv_b_proj;
  int H = c->num_attention_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
  int vd = c->v_head_dim, kvl = c->kv_lora_rank, qk = nope + rope, row = kvl + rope;
  int bs = j->cache->block_size;
  const float *cache = j->cache->layer[j->layer];
  float *s = f->scratch[ith];
  float *q_lat = s;               /* [kv_lora] */
  float *o_lat = q_lat + kvl;     /* [kv_lora] */
  float *wrow = o_lat + kvl;      /* [kv_lora] widened weight row */
  float *score = wrow + kvl;      /* [max_context] */
  long p0, p1;
  dsi_split((long)j->b->n_tokens * H, ith, nth, &p0, &p1);
  for (long p = p0; p < p1; p++) {
    int t = (int)(p / H), h = (int)(p % H);
    const float *q = f->q + ((size_t)t * H + h) * qk;
    int pos = j->b->pos[t];
    const int32_t *table = j->b->block_tables[j->b->seq[t]];
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
    float *o = f->attn + ((size_t)t * H + h) * vd;
    dsi_k_matmul_rows(kv_b, kb + nope, kb + nope + vd, o_lat, kvl, o, vd, 1, wrow);
  }
}

/* The packed path's attention core: for one token and a group of heads,
 * each cached latent row is read once and used by every head of the group
 * (scores, then the weighted sum), so the cache is streamed H/8 times per
 * token instead of H times. q_lat/o_lat rows are those of the chunk. */
#define ATTN_HEAD_GROUP 8

typedef struct {
  dsi_fwd *f;
  const dsi_fwd_batch *b;
  const dsi_fwd_cache *cache;
  int layer, t0, n;
  const uint8_t *skip; /* [n] tokens of the chunk the segment path handled, or NULL */
  atomic_long next; /* items are taken one at a time: their cost grows with the position */
} core_job;

static void attn_core_task(void *ctx, int ith, int nth) {
  core_job *j = ctx;
  dsi_fwd *f = j->f;
  const dsi_config *c = f->c;
  int H = c->num_attention_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
  int kvl = c->kv_lora_rank, row = kvl + rope, bs = j->cache->block_size;
  int G = DSI_CEIL_DIV(H, ATTN_HEAD_GROUP);
  (void)nope;
  const float *cache = j->cache->layer[j->layer];
  float *score = f->scratch[ith]; /* [ATTN_HEAD_GROUP][max_context] */
  const dsi_vec_ops *v = dsi_vec();
  (void)ith;
  (void)nth;
  for (long it; (it = atomic_fetch_add(&j->next, 1)) < (long)j->n * G;) {
    int tc = (int)(it / G), t = j->t0 + tc, h0 = (int)(it % G) * ATTN_HEAD_GROUP;
    if (j->skip && j->skip[tc]) continue; /* done by the segment path */
    int nh = DSI_MIN(ATTN_HEAD_GROUP, H - h0), pos = j->b->pos[t];
    const int32_t *table = j->b->block_tables[j->b->seq[t]];
    const float *ql = f->q_lat + ((size_t)tc * H + h0) * row; /* [q_lat | q_pe] per head */
    for (int u = 0; u <= pos; u++) {
      const float *kv = cache + ((size_t)table[u / bs] * bs + u % bs) * row;
      for (int h = 0; h < nh; h++)
        score[(size_t)h * f->max_context + u] = v->dot(ql + (size_t)h * row, kv, row) * f->softmax_scale;
    }
    float *ol = f->o_lat + ((size_t)tc * H + h0) * kvl;
    for (int h = 0; h < nh; h++) {
      dsi_k_softmax(score + (size_t)h * f->max_context, pos + 1);
      memset(ol + (size_t)h * kvl, 0, kvl * sizeof(float));
    }
    for (int u = 0; u <= pos; u++) {
      const float *kv = cache + ((size_t)table[u / bs] * bs + u % bs) * row;
      for (int h = 0; h < nh; h++) v->axpy(ol + (size_t)h * kvl, kv, score[(size_t)h * f->max_context + u], kvl);
    }
  }
}

/* A prefill segment — L >= ATTN_GEMM_MIN consecutive tokens of one
 * sequence — attends through two matmuls instead of token by token: the
 * sequence's cache is packed once as K [ctx, kv_lora + rope] and V^T
 * [kv_lora, ctx] (bf16 in bf16 mode, where AMX runs them), scores =
 * [q_lat | q_pe] K^T for every (token, head) row, a causal softmax, then
 * o_lat = P V. The masked upper triangle is computed and discarded: cheaper
 * than the scalar loop it replaces. */
#define ATTN_GEMM_MIN 16

typedef struct {
  dsi_fwd *f;
  const int32_t *pos; /* position of each token of the rows' block */
  int rows, H, ctx_pad;
} softmax_job;

static void causal_softmax_task(void *ctx, int ith, int nth) {
  softmax_job *j = ctx;
  long r0, r1;
  dsi_split(j->rows, ith, nth, &r0, &r1);
  for (long r = r0; r < r1; r++) {
    float *s = j->f->att_s + (size_t)r * j->ctx_pad;
    int n = j->pos[r / j->H] + 1;
    for (int u = 0; u < n; u++) s[u] *= j->f->softmax_scale;
    dsi_k_softmax(s, n);
    memset(s + n, 0, (size_t)(j->ctx_pad - n) * sizeof(float));
  }
}

static void attn_segment(dsi_fwd *f, const dsi_fwd_batch *b, const dsi_fwd_cache *cache, int layer, int t0,
                         int ts, int L) {
  const dsi_config *c = f->c;
  int H = c->num_attention_heads, kvl = c->kv_lora_rank, row = kvl + c->qk_rope_head_dim;
  int bs = cache->block_size, ctx = b->pos[ts + L - 1] + 1;
  const int32_t *table = b->block_tables[b->seq[ts]];
  PROF_OP(f, "attn_kv_pack", DSI_PROF_ATTN, 0, 0, 4.0 * ctx * (row + kvl) * 2);
  double tp = PROF_T0(f);
  for (int u = 0; u < ctx; u++) f->att_slots[u] = table[u / bs] * bs + u % bs;
  dsi_dtype dt = f->gc.act_bf16 ? DSI_DTYPE_BF16 : DSI_DTYPE_F32;
  dsi_mat K, Vt;
  dsi_pack_f32_rows(dt, cache->layer[layer], row, f->att_slots, ctx, row, &K, f->att_k);
  dsi_pack_f32_cols(dt, cache->layer[layer], row, f->att_slots, ctx, kvl, &Vt, f->att_vt);
  PROF_SERIAL(f, tp);
  int ctx_pad = Vt.kpad;
  /* tokens per pass: bounded by the score buffer, and small enough that
   * each pass only multiplies the keys its last token can see (the causal
   * triangle is mostly skipped) */
  int per = (int)DSI_MAX(1, DSI_MIN(f->att_s_len / ((size_t)H * ctx_pad), (size_t)64));
  for (int l0 = 0; l0 < L; l0 += per) {
    int n = DSI_MIN(per, L - l0), tc = ts + l0 - t0, seen = b->pos[ts + l0 + n - 1] + 1;
    dsi_mat Kv = dsi_mat_panels(&K, 0, seen), Vv = Vt;
    Vv.cols = seen;
    PROF_OP(f, "attn_scores", DSI_PROF_ATTN, MM_FLOPS(&Kv, n * H), 0, MM_ACT(&Kv, n * H));
    f->gemms[0] = (dsi_gemm){.w = &Kv, .x = f->q_lat + (size_t)tc * H * row, .ldx = row, .m = n * H,
                             .y = f->att_s, .ldy = ctx_pad, .epi = DSI_EPI_STORE};
    dsi_gemm_batch(&f->gc, f->gemms, 1, Kv.rows, DSI_TILE_N);
    PROF_OP(f, "attn_softmax", DSI_PROF_ATTN, 5.0 * n * H * seen, 0, 8.0 * n * H * seen);
    softmax_job sj = {f, b->pos + ts + l0, n * H, H, ctx_pad};
    dsi_pool_run(f->pool, causal_softmax_task, &sj);
    PROF_OP(f, "attn_pv", DSI_PROF_ATTN, MM_FLOPS(&Vv, n * H), 0, MM_ACT(&Vv, n * H));
    f->gemms[0] = (dsi_gemm){.w = &Vv, .x = f->att_s, .ldx = ctx_pad, .m = n * H,
                             .y = f->o_lat + (size_t)tc * H * kvl, .ldy = kvl, .epi = DSI_EPI_STORE};
    dsi_gemm_batch(&f->gc, f->gemms, 1, Vv.rows, DSI_TILE_N);
  }
}

typedef struct {
  dsi_fwd *f;
  int t0, n;
} qpe_job;

/* append each head's rotated q_pe to its latent query */
static void qpe_copy_task(void *ctx, int ith, int nth) {
  qpe_job *j = ctx;
  const dsi_config *c = j->f->c;
  int H = c->num_attention_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
  int kvl = c->kv_lora_rank, qk = nope + rope, row = kvl + rope;
  long a, e;
  dsi_split((long)j->n * H, ith, nth, &a, &e);
  for (long i = a; i < e; i++)
    memcpy(j->f->q_lat + (size_t)i * row + kvl, j->f->q + ((size_t)j->t0 * H + i) * qk + nope, rope * sizeof(float));
}

/* Absorbed attention with packed weights, in chunks of attn_chunk tokens:
 * q_lat = W_UK^T q_nope per head (one batched matmul), the core over the
 * cache (prefill segments as matmuls, the rest token by token), then
 * attn = W_UV o_lat per head. */
static void mla_absorbed_packed(dsi_fwd *f, const dsi_layer_weights *w, const dsi_fwd_batch *b,
                                const dsi_fwd_cache *cache, int layer) {
  const dsi_config *c = f->c;
  int H = c->num_attention_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
  int vd = c->v_head_dim, kvl = c->kv_lora_rank, qk = nope + rope, row = kvl + rope;
  dsi_mat *uk = f->views, *uv = f->views + H;
  for (int h = 0; h < H; h++) {
    uk[h] = dsi_mat_panels(&w->w_uk_t, h * kvl / DSI_TILE_N, kvl);
    uv[h] = dsi_mat_panels(&w->w_uv, h * vd / DSI_TILE_N, vd);
  }
  uint8_t *skip = f->att_skip, *done = f->att_done;
  /* prefill segments the cost model gives to the non-absorbed form, whole */
  if (dsi_mla_prefill_batch(f->mla_pf, &f->gc, w, b, cache, layer, f->q, f->attn, done, f->prof) == b->n_tokens)
    return;
  for (int t0 = 0; t0 < b->n_tokens; t0 += f->attn_chunk) {
    int n = DSI_MIN(f->attn_chunk, b->n_tokens - t0);
    for (int a = 0, e; a < n; a = e) { /* runs [a, e) of the chunk's tokens left to this form */
      for (e = a + 1; e < n && done[t0 + e] == done[t0 + a]; e++) {}
      if (done[t0 + a]) continue;
      PROF_OP(f, "w_uk", DSI_PROF_ATTN, H * MM_FLOPS(&uk[0], e - a), mat_bytes(&w->w_uk_t), H * MM_ACT(&uk[0], e - a));
      for (int h = 0; h < H; h++)
        f->gemms[h] = (dsi_gemm){.w = &uk[h], .x = f->q + ((size_t)(t0 + a) * H + h) * qk, .ldx = H * qk, .m = e - a,
                                 .y = f->q_lat + ((size_t)a * H + h) * row, .ldy = H * row, .epi = DSI_EPI_STORE};
      dsi_gemm_batch(&f->gc, f->gemms, H, kvl, DSI_TILE_N);
    }
    PROF_OP(f, "q_pe_copy", DSI_PROF_ATTN, 0, 0, 8.0 * n * H * rope);
    qpe_job qj = {f, t0, n};
    dsi_pool_run(f->pool, qpe_copy_task, &qj);
    /* segments: runs of consecutive positions of one sequence */
    memcpy(skip, done + t0, n);
    for (int s = t0; s < t0 + n;) {
      int e = s + 1;
      while (e < t0 + n && b->seq[e] == b->seq[s] && b->pos[e] == b->pos[e - 1] + 1) e++;
      if (e - s >= ATTN_GEMM_MIN && !done[s]) {
        attn_segment(f, b, cache, layer, t0, s, e - s);
        memset(skip + (s - t0), 1, e - s);
      }
      s = e;
    }
    prof_attn_core(f, b, t0, n, skip, 0, 0, DSI_CEIL_DIV(H, ATTN_HEAD_GROUP));
    core_job cj = {f, b, cache, layer, t0, n, skip, 0};
    dsi_pool_run(f->pool, attn_core_task, &cj);
    for (int a = 0, e; a < n; a = e) {
      for (e = a + 1; e < n && done[t0 + e] == done[t0 + a]; e++) {}
      if (done[t0 + a]) continue;
      PROF_OP(f, "w_uv", DSI_PROF_ATTN, H * MM_FLOPS(&uv[0], e - a), mat_bytes(&w->w_uv), H * MM_ACT(&uv[0], e - a));
      for (int h = 0; h < H; h++)
        f->gemms[h] = (dsi_gemm){.w = &uv[h], .x = f->o_lat + ((size_t)a * H + h) * kvl, .ldx = H * kvl, .m = e - a,
                                 .y = f->attn + ((size_t)(t0 + a) * H + h) * vd, .ldy = H * vd, .epi = DSI_EPI_STORE};
      dsi_gemm_batch(&f->gc, f->gemms, H, vd, DSI_TILE_N);
    }
  }
}

typedef struct {
  dsi_fwd *f;
  const dsi_fwd_batch *b;
  const float *weight;
  float *buf;
  int stride, n, rope_off, rope_stride, n_heads;
} rows_job;

/* per token: optional rmsnorm of buf[t, 0..n) and rope on each head's rope part */
static void q_post_task(void *ctx, int ith, int nth) {
  rows_job *j = ctx;
  const dsi_config *c = j->f->c;
  int rope = c->qk_rope_head_dim;
  long t0, t1;
  dsi_split(j->b->n_tokens, ith, nth, &t0, &t1);
  for (long t = t0; t < t1; t++) {
    float *r = j->buf + (size_t)t * j->stride;
    if (j->weight) dsi_k_rmsnorm(r, j->weight, j->n, c->rms_norm_eps, r);
    if (j->n_heads) {
      size_t p = (size_t)j->b->pos[t] * (rope / 2);
      for (int h = 0; h < j->n_heads; h++)
        dsi_k_rope(r + j->rope_off + h * j->rope_stride, rope, j->f->rope_cos + p, j->f->rope_sin + p);
    }
  }
}

static void mla(dsi_fwd *f, const dsi_layer_weights *w, const dsi_fwd_batch *b,
                const dsi_fwd_cache *cache, int layer) {
  const dsi_config *c = f->c;
  int T = b->n_tokens, H = c->num_attention_heads;
  int qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
  int rope = c->qk_rope_head_dim, kv_row = c->kv_lora_rank + rope;
  if (c->q_lora_rank > 0) {
    linear(f, "q_a_proj", DSI_PROF_ATTN, &w->q_a_proj, f->xn, f->qa, T);
    PROF_OP(f, "q_a_norm", DSI_PROF_ATTN, 4.0 * T * c->q_lora_rank, 0, 8.0 * T * c->q_lora_rank);
    rows_job nj = {f, b, w->q_a_layernorm, f->qa, c->q_lora_rank, c->q_lora_rank, 0, 0, 0};
    dsi_pool_run(f->pool, q_post_task, &nj);
    linear(f, "q_b_proj", DSI_PROF_ATTN, &w->q_b_proj, f->qa, f->q, T);
  } else {
    linear(f, "q_proj", DSI_PROF_ATTN, &w->q_proj, f->xn, f->q, T);
  }
  PROF_OP(f, "rope", DSI_PROF_ATTN, 3.0 * T * H * rope, 0, 8.0 * T * H * rope);
  rows_job rj = {f, b, NULL, f->q, H * qk, 0, c->qk_nope_head_dim, qk, H};
  dsi_pool_run(f->pool, q_post_task, &rj);
  linear(f, "kv_a_proj", DSI_PROF_ATTN, &w->kv_a_proj_with_mqa, f->xn, f->kva, T);
  PROF_OP(f, "kv_write", DSI_PROF_ATTN, 4.0 * T * kv_row, 0, 8.0 * T * kv_row);
  attn_job aj = {f, w, b, cache, layer};
  dsi_pool_run(f->pool, kv_write_task, &aj);
  if (w->w_uk_t.data) {
    mla_absorbed_packed(f, w, b, cache, layer);
  } else {
    prof_attn_core(f, b, 0, T, NULL, 2.0 * c->kv_lora_rank * (c->qk_nope_head_dim + c->v_head_dim),
                   mat_bytes(&w->kv_b_proj), H);
    dsi_pool_run(f->pool, attn_task, &aj);
  }
  linear(f, "o_proj", DSI_PROF_ATTN, &w->o_proj, f->attn, f->out, T);
}

/* ---- MLP: down(silu(gate x) * up x) ---- */
typedef struct {
  float *g;
  const float *u;
  long n;
} silu_job;

static void silu_task(void *ctx, int ith, int nth) {
  silu_job *j = ctx;
  long a, e;
  dsi_split(j->n, ith, nth, &a, &e);
  dsi_k_silu_mul(j->g + a, j->u + a, j->g + a, (int)(e - a));
}

/* which MLP it is, for the profile */
typedef struct {
  const char *gate_up, *down;
  dsi_prof_cat cat;
} mlp_kind;
static const mlp_kind k_dense = {"dense_gate_up", "dense_down", DSI_PROF_DENSE};
static const mlp_kind k_shared = {"shared_gate_up", "shared_down", DSI_PROF_MOE};
static const mlp_kind k_routed = {"moe_gate_up", "moe_down", DSI_PROF_MOE};

static void mlp(dsi_fwd *f, const mlp_kind *k, const dsi_mat *gate, const dsi_mat *up, const dsi_mat *down,
                const float *x, float *y, int m) {
  PROF_OP(f, k->gate_up, k->cat, MM_FLOPS(gate, m) + MM_FLOPS(up, m), mat_bytes(gate) + mat_bytes(up),
          MM_ACT(gate, m) + MM_ACT(up, m));
  matmul(f, gate, x, f->h_gate, m);
  matmul(f, up, x, f->h_up, m);
  silu_job sj = {f->h_gate, f->h_up, (long)m * gate->rows};
  dsi_pool_run(f->pool, silu_task, &sj);
  PROF_OP(f, k->down, k->cat, MM_FLOPS(down, m), mat_bytes(down), MM_ACT(down, m));
  matmul(f, down, f->h_gate, y, m);
}

/* the dense MLP / shared experts of a layer in whichever layout it has */
static void layer_mlp(dsi_fwd *f, const mlp_kind *k, const dsi_layer_weights *w, const float *x, float *y, int m) {
  if (w->gate_up.data) { /* packed: gate and up in one pass, SiLU-mul fused */
    int ih = w->gate_up.rows / 2;
    PROF_OP(f, k->gate_up, k->cat, MM_FLOPS(&w->gate_up, m), mat_bytes(&w->gate_up), MM_ACT(&w->gate_up, m));
    gemm1(f, &w->gate_up, x, f->c->hidden_size, f->h_gate, ih, m, DSI_EPI_SILU_PAIRS);
    PROF_OP(f, k->down, k->cat, MM_FLOPS(&w->down_proj, m), mat_bytes(&w->down_proj), MM_ACT(&w->down_proj, m));
    gemm1(f, &w->down_proj, f->h_gate, ih, y, f->c->hidden_size, m, DSI_EPI_STORE);
  } else {
    mlp(f, k, &w->gate_proj, &w->up_proj, &w->down_proj, x, y, m);
  }
}

/* ---- MoE: route, run each expert on its tokens, add the shared experts ---- */
typedef struct {
  dsi_fwd *f;
  const dsi_layer_weights *w;
  int T;
  int e0, n;      /* scatter: expert's first pair and count */
} moe_job;

static void route_task(void *ctx, int ith, int nth) {
  moe_job *j = ctx;
  dsi_fwd *f = j->f;
  const dsi_config *c = f->c;
  dsi_router_params p = {
    .n_experts = c->n_routed_experts, .top_k = c->num_experts_per_tok,
    .n_group = c->n_group, .topk_group = c->topk_group,
    .sigmoid = c->scoring_func == DSI_SCORING_SIGMOID,
    .group_limited = c->topk_method != DSI_TOPK_GREEDY,
    .group_by_top2 = c->topk_method == DSI_TOPK_NOAUX_TC,
    .normalize = c->scoring_func == DSI_SCORING_SIGMOID || c->norm_topk_prob,
    .scale = c->routed_scaling_factor,
  };
  long t0, t1;
  dsi_split(j->T, ith, nth, &t0, &t1);
  for (long t = t0; t < t1; t++)
    dsi_k_router(&p, f->router_logits + t * p.n_experts, j->w->e_score_correction_bias, f->scratch[ith],
                 f->topk_ids + t * p.top_k, f->topk_w + t * p.top_k);
}

/* moe_y[tok] += weight * yg[i] for the expert's pairs; split over columns so
 * each token row is summed in expert order whatever the batch holds */
static void scatter_task(void *ctx, int ith, int nth) {
  moe_job *j = ctx;
  dsi_fwd *f = j->f;
  int D = f->c->hidden_size;
  long c0, c1;
  dsi_split(D, ith, nth, &c0, &c1);
  for (int i = 0; i < j->n; i++) {
    int tok = f->exp_tok[j->e0 + i];
    dsi_k_axpy(f->moe_y + (size_t)tok * D + c0, f->yg + (size_t)i * D + c0, f->exp_w[j->e0 + i], (int)(c1 - c0));
  }
}

static void moe(dsi_fwd *f, const dsi_layer_weights *w, int T) {
  const dsi_config *c = f->c;
  int E = c->n_routed_experts, K = c->num_experts_per_tok, D = c->hidden_size;
  linear(f, "router", DSI_PROF_MOE, &w->gate, f->xn, f->router_logits, T);
  PROF_OP(f, "router_topk", DSI_PROF_MOE, 0, 0, 4.0 * T * E);
  moe_job rj = {f, w, T, 0, 0};
  dsi_pool_run(f->pool, route_task, &rj);

  /* group the (token, expert) pairs by expert, tokens ascending within */
  PROF_OP(f, "moe_sort", DSI_PROF_MOE, 0, 0, 8.0 * T * K);
  double ts = PROF_T0(f);
  memset(f->exp_start, 0, (E + 1) * sizeof(int32_t));
  for (int i = 0; i < T * K; i++) f->exp_start[f->topk_ids[i] + 1]++;
  for (int e = 0; e < E; e++) f->exp_start[e + 1] += f->exp_start[e];
  int32_t cursor[1024];
  memcpy(cursor, f->exp_start, E * sizeof(int32_t));
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      int e = f->topk_ids[t * K + k], at = cursor[e]++;
      f->exp_tok[at] = t;
      f->exp_w[at] = f->topk_w[t * K + k];
    }

  memset(f->moe_y, 0, (size_t)T * D * sizeof(float));
  PROF_SERIAL(f, ts);
  if (w->exp_gate_up && w->exp_gate_up[0].data) {
    /* grouped expert matmul: every active expert in one dispatch per
     * projection, each reading its tokens through [start, end) of the
     * sorted pairs — no gather copy, no per-expert launch; gate/up fused
     * with SiLU-mul, the routing weight folded into the down projection's
     * scatter-add */
    int ih = w->exp_gate_up[0].rows / 2, n = 0;
    for (int e = 0; e < E; e++) {
      int a = f->exp_start[e], cnt = f->exp_start[e + 1] - a;
      if (cnt == 0) continue;
      f->gemms[n++] = (dsi_gemm){.w = &w->exp_gate_up[e], .x = f->xn, .ldx = D, .x_rows = f->exp_tok + a,
                                 .m = cnt, .y = f->h_pairs + (size_t)a * ih, .ldy = ih, .epi = DSI_EPI_SILU_PAIRS};
    }
    PROF_OP(f, "moe_gate_up", DSI_PROF_MOE, MM_FLOPS(&w->exp_gate_up[0], T * K), n * mat_bytes(&w->exp_gate_up[0]),
            MM_ACT(&w->exp_gate_up[0], T * K));
    dsi_gemm_batch(&f->gc, f->gemms, n, w->exp_gate_up[0].rows, 2 * DSI_TILE_N);
    n = 0;
    for (int e = 0; e < E; e++) {
      int a = f->exp_start[e], cnt = f->exp_start[e + 1] - a;
      if (cnt == 0) continue;
      f->gemms[n++] = (dsi_gemm){.w = &w->exp_down[e], .x = f->h_pairs + (size_t)a * ih, .ldx = ih, .m = cnt,
                                 .y = f->moe_y, .ldy = D, .epi = DSI_EPI_SCATTER_ADD,
                                 .y_rows = f->exp_tok + a, .y_scale = f->exp_w + a};
    }
    PROF_OP(f, "moe_down", DSI_PROF_MOE, MM_FLOPS(&w->exp_down[0], T * K), n * mat_bytes(&w->exp_down[0]),
            MM_ACT(&w->exp_down[0], T * K));
    dsi_gemm_batch(&f->gc, f->gemms, n, D, DSI_TILE_N);
  } else {
    for (int e = 0; e < E; e++) {
      int a = f->exp_start[e], n = f->exp_start[e + 1] - a;
      if (n == 0) continue;
      for (int i = 0; i < n; i++)
        memcpy(f->xg + (size_t)i * D, f->xn + (size_t)f->exp_tok[a + i] * D, D * sizeof(float));
      mlp(f, &k_routed, &w->exp_gate[e], &w->exp_up[e], &w->exp_down[e], f->xg, f->yg, n);
      PROF_OP(f, "moe_scatter", DSI_PROF_MOE, 2.0 * n * D, 0, 12.0 * n * D);
      moe_job sj = {f, w, T, a, n};
      dsi_pool_run(f->pool, scatter_task, &sj);
    }
  }
  if (c->n_shared_experts > 0) {
    layer_mlp(f, &k_shared, w, f->xn, f->out, T);
    add(f, "moe_add", DSI_PROF_MOE, f->out, f->moe_y, (size_t)T * D);
  } else {
    memcpy(f->out, f->moe_y, (size_t)T * D * sizeof(float));
  }
}

/* ---- the block and the model ---- */
typedef struct {
  dsi_fwd *f;
  const float *weight;
  const float *src;
  float *dst;
  const int32_t *rows; /* NULL: rows 0..n */
  int n;
} norm_job;

/* dst[i] = rmsnorm(src[rows[i]]) */
static void norm_task(void *ctx, int ith, int nth) {
  norm_job *j = ctx;
  int D = j->f->c->hidden_size;
  long a, e;
  dsi_split(j->n, ith, nth, &a, &e);
  for (long i = a; i < e; i++) {
    long r = j->rows ? j->rows[i] : i;
    dsi_k_rmsnorm(j->src + r * D, j->weight, D, j->f->c->rms_norm_eps, j->dst + i * D);
  }
}

static void rmsnorm_rows(dsi_fwd *f, dsi_prof_cat cat, const float *weight, const float *src, float *dst,
                         const int32_t *rows, int n) {
  PROF_OP(f, "rmsnorm", cat, 4.0 * n * f->c->hidden_size, 4.0 * f->c->hidden_size, 8.0 * n * f->c->hidden_size);
  norm_job j = {f, weight, src, dst, rows, n};
  dsi_pool_run(f->pool, norm_task, &j);
}

void dsi_fwd_run(dsi_fwd *f, const dsi_fwd_batch *b, const dsi_fwd_cache *cache, float *logits) {
  const dsi_model *m = f->m;
  const dsi_config *c = f->c;
  int T = b->n_tokens, D = c->hidden_size;
  DSI_ASSERT(T > 0 && T <= f->max_tokens);
  f->layer = -1;
  PROF_OP(f, "embed", DSI_PROF_OTHER, 0, (double)T * D * dsi_dtype_size(m->embed_tokens.dtype), 4.0 * T * D);
  double te = PROF_T0(f);
  for (int t = 0; t < T; t++) {
    DSI_ASSERT(b->pos[t] >= 0 && b->pos[t] < f->max_context);
    dsi_k_row_f32(&m->embed_tokens, b->tokens[t], 0, D, f->x + (size_t)t * D);
  }
  PROF_SERIAL(f, te);
  for (int L = 0; L < c->num_hidden_layers; L++) {
    const dsi_layer_weights *w = &m->layers[L];
    f->layer = L;
    rmsnorm_rows(f, DSI_PROF_OTHER, w->input_layernorm, f->x, f->xn, NULL, T);
    mla(f, w, b, cache, L);
    add(f, "residual_add", DSI_PROF_OTHER, f->x, f->out, (size_t)T * D);
    rmsnorm_rows(f, DSI_PROF_OTHER, w->post_attention_layernorm, f->x, f->xn, NULL, T);
    if (w->is_moe) moe(f, w, T);
    else layer_mlp(f, &k_dense, w, f->xn, f->out, T);
    add(f, "residual_add", DSI_PROF_OTHER, f->x, f->out, (size_t)T * D);
  }
  f->layer = -1;
  if (b->n_logits > 0 && logits) {
    rmsnorm_rows(f, DSI_PROF_LM_HEAD, m->norm, f->x, f->final_x, b->logit_rows, b->n_logits);
    linear(f, "lm_head", DSI_PROF_LM_HEAD, &m->lm_head, f->final_x, logits, b->n_logits);
  }
}

/* ---- set-up ---- */
int dsi_fwd_new(dsi_fwd **out, const dsi_model *m, dsi_pool *pool, int max_tokens, int max_context,
                dsi_err *err) {
  const dsi_config *c = &m->cfg;
  dsi_fwd *f = dsi_xcalloc(1, sizeof *f);
  f->m = m;
  f->c = c;
  f->pool = pool;
  f->nth = dsi_pool_size(pool);
  f->max_tokens = max_tokens;
  f->max_context = max_context;
  f->softmax_scale = dsi_config_softmax_scale(c);
  int H = c->num_attention_heads, D = c->hidden_size, T = max_tokens;
  int qk = c->qk_nope_head_dim + c->qk_rope_head_dim, kvl = c->kv_lora_rank;
  int E = c->n_routed_experts, K = c->num_experts_per_tok;
  long inter = c->intermediate_size;
  if ((long)c->moe_intermediate_size * DSI_MAX(c->n_shared_experts, 1) > inter)
    inter = (long)c->moe_intermediate_size * DSI_MAX(c->n_shared_experts, 1);
  inter = DSI_CEIL_DIV(inter, DSI_TILE_N) * DSI_TILE_N; /* packed gate/up pairs write whole panels */
  long moe_inter = DSI_CEIL_DIV(c->moe_intermediate_size, DSI_TILE_N) * DSI_TILE_N;
  /* the absorbed attention's latent buffers hold a chunk of tokens: <= 32 MB each */
  f->attn_chunk = (int)DSI_MAX(1, DSI_MIN((long)T, (32l << 20) / ((long)H * kvl * 4)));
  long kpad_max = DSI_CEIL_DIV(DSI_MAX(DSI_MAX(D, inter), DSI_MAX(DSI_MAX(c->q_lora_rank, kvl), H * c->v_head_dim)),
                               DSI_TILE_K) * DSI_TILE_K;
  long xb_rows = DSI_MAX((long)T * DSI_MAX(K, 1), (long)f->attn_chunk * H);
  f->gc.xr_len = (size_t)xb_rows * kpad_max + 64; /* f32 rows, or bf16 rows, or both halves */
  size_t half = c->qk_rope_head_dim / 2;
  int ok = 1;
#define ALLOC(p, n) do { if (!((p) = dsi_alloc_aligned((size_t)(n) * sizeof(*(p))))) ok = 0; } while (0)
  ALLOC(f->rope_cos, (size_t)max_context * half);
  ALLOC(f->rope_sin, (size_t)max_context * half);
  ALLOC(f->x, (size_t)T * D);
  ALLOC(f->xn, (size_t)T * D);
  ALLOC(f->qa, (size_t)T * DSI_MAX(c->q_lora_rank, 1));
  ALLOC(f->q, (size_t)T * H * qk);
  ALLOC(f->kva, (size_t)T * (kvl + c->qk_rope_head_dim));
  ALLOC(f->attn, (size_t)T * H * c->v_head_dim);
  ALLOC(f->out, (size_t)T * D);
  ALLOC(f->h_gate, (size_t)T * inter);
  ALLOC(f->h_up, (size_t)T * inter);
  ALLOC(f->final_x, (size_t)T * D);
  if (E > 0) {
    ALLOC(f->moe_y, (size_t)T * D);
    ALLOC(f->xg, (size_t)T * D);
    ALLOC(f->yg, (size_t)T * D);
    ALLOC(f->router_logits, (size_t)T * E);
    ALLOC(f->topk_ids, (size_t)T * K);
    ALLOC(f->topk_w, (size_t)T * K);
    ALLOC(f->exp_start, (size_t)E + 1);
    ALLOC(f->exp_tok, (size_t)T * K);
    ALLOC(f->exp_w, (size_t)T * K);
    ALLOC(f->h_pairs, (size_t)T * K * moe_inter);
  }
  ALLOC(f->q_lat, (size_t)f->attn_chunk * H * (kvl + c->qk_rope_head_dim));
  {
    size_t ctx_pad = DSI_CEIL_DIV(max_context, DSI_TILE_K) * DSI_TILE_K;
    size_t ctx_rows = DSI_CEIL_DIV(max_context, DSI_TILE_N) * DSI_TILE_N;
    size_t row_pad = DSI_CEIL_DIV(kvl + c->qk_rope_head_dim, DSI_TILE_K) * DSI_TILE_K;
    f->att_s_len = DSI_MAX((size_t)H * ctx_pad, DSI_MIN((size_t)T * H * ctx_pad, (size_t)8 << 20));
    ALLOC(f->att_s, f->att_s_len);
    ALLOC(f->att_slots, max_context);
    ALLOC(f->att_skip, f->attn_chunk);
    ALLOC(f->att_done, T);
    if (m->layers[0].w_uk.data && !(f->mla_pf = dsi_mla_prefill_new(c, T, max_context, f->nth))) ok = 0;
    f->att_k = dsi_alloc_aligned(ctx_rows * row_pad * sizeof(float));
    f->att_vt = dsi_alloc_aligned((size_t)DSI_CEIL_DIV(kvl, DSI_TILE_N) * DSI_TILE_N * ctx_pad * sizeof(float));
    if (!f->att_k || !f->att_vt) ok = 0;
  }
  ALLOC(f->o_lat, (size_t)f->attn_chunk * H * kvl);
  f->gemms = dsi_xcalloc(DSI_MAX(H, E) + 1, sizeof(dsi_gemm));
  f->gc.max_calls = DSI_MAX(H, E) + 1;
  f->gc.fns = dsi_xcalloc(f->gc.max_calls, sizeof(dsi_gemm_fn));
  f->gc.pool = pool;
  f->views = dsi_xcalloc(2 * H, sizeof(dsi_mat));
  /* scratch: the widest weight row, or attention's 3 latent rows + scores */
  size_t widest = DSI_MAX(DSI_MAX(D, inter), DSI_MAX(H * c->v_head_dim, DSI_MAX(c->q_lora_rank, kvl)));
  f->scratch_len = DSI_MAX(widest, (size_t)3 * kvl + max_context);
  f->scratch_len = DSI_MAX(f->scratch_len, (size_t)2 * DSI_MAX(E, 1));
  f->scratch_len = DSI_MAX(f->scratch_len, (size_t)ATTN_HEAD_GROUP * max_context);
  f->scratch_len = DSI_MAX(f->scratch_len, DSI_GEMM_SCRATCH(DSI_MAX(kpad_max, (long)max_context + DSI_TILE_K)) / sizeof(float));
  /* the segment path's matmuls prepare up to att_s_len / attn_chunk*H*row activations */
  f->gc.xr_len = DSI_MAX(f->gc.xr_len, DSI_MAX(f->att_s_len, (size_t)f->attn_chunk * H * (kvl + c->qk_rope_head_dim)) + 64);
  ALLOC(f->gc.xr, f->gc.xr_len);
  f->scratch = dsi_xcalloc(f->nth, sizeof(float *));
  for (int i = 0; i < f->nth; i++) ALLOC(f->scratch[i], f->scratch_len);
  f->gc.scratch = f->scratch;
#undef ALLOC
  if (!ok) {
    dsi_fwd_free(f);
    return dsi_errf(err, DSI_E_NOMEM, "cannot allocate activation buffers for %d tokens", max_tokens);
  }
  dsi_rope_tables(c, max_context, f->rope_cos, f->rope_sin);
  *out = f;
  return DSI_OK;
}

void dsi_fwd_set_act_bf16(dsi_fwd *f, int on) { f->gc.act_bf16 = on; }
void dsi_fwd_set_prof(dsi_fwd *f, dsi_prof *p) { f->prof = p; }
int dsi_fwd_act_bf16(const dsi_fwd *f) { return f->gc.act_bf16; }

void dsi_fwd_free(dsi_fwd *f) {
  if (!f) return;
  float *bufs[] = {f->rope_cos, f->rope_sin, f->x, f->xn, f->qa, f->q, f->kva, f->attn, f->out,
                   f->h_gate, f->h_up, f->final_x, f->moe_y, f->xg, f->yg, f->router_logits,
                   f->topk_w, f->exp_w, f->q_lat, f->o_lat, f->h_pairs, f->att_s, f->att_k, f->att_vt};
  for (size_t i = 0; i < DSI_ARRAY_LEN(bufs); i++) dsi_free_aligned(bufs[i]);
  dsi_free_aligned(f->topk_ids);
  dsi_free_aligned(f->exp_start);
  dsi_free_aligned(f->exp_tok);
  dsi_free_aligned(f->att_slots);
  dsi_free_aligned(f->att_skip);
  dsi_free_aligned(f->att_done);
  dsi_mla_prefill_free(f->mla_pf);
  dsi_free_aligned(f->gc.xr);
  free(f->gemms);
  free(f->gc.fns);
  free(f->views);
  if (f->scratch)
    for (int i = 0; i < f->nth; i++) dsi_free_aligned(f->scratch[i]);
  free(f->scratch);
  free(f);
}
