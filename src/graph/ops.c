/* graph: the ops — what each recorded op computes when an executor runs it
 * on a team of workers, what it costs (for the profile) and the workspace
 * it needs — in data-flow order: embedding and norms, matmuls, MLA
 * attention, MoE; then the op table. Ops never allocate: their tensors and
 * workspaces are planned into the arena (or, eager, taken as each op is
 * issued). */
#include "graph/exec.h"
#include "graph/mla_prefill.h"
#include "kernels/attn.h"
#include "kernels/vec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }
static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* rows an op computes this step: every token, the logit rows, this rank's
 * tokens or the rows the expert dispatch brought (DSI_ROWS_*) */
static int op_rows(const dsi_xrun *r, const dsi_op *op) {
  if (op->flags & DSI_ROWS_LOGITS) return r->b->n_logits;
  return op->rows == DSI_ROWS_SHARD ? r->sh_n : op->rows == DSI_ROWS_RECV ? r->n_recv : r->T;
}

/* this thread's matmul memory in op's workspace: a list of `calls` calls
 * at the start of its part, then the kernels' scratch */
static dsi_mm_thread mm_thread(const dsi_xrun *r, const dsi_op *op, const dsi_team *tm, int calls) {
  return dsi_mm_thread_at(dsi_ws_thread(r, op, tm->tid), calls);
}

/* costs of a matmul of m rows */
static double mat_bytes(const dsi_mat *w) {
  if (w->dtype == DSI_DTYPE_I4) return (double)dsi_pack_bytes(w); /* 4 bits, and its scales */
  return (double)w->rows * w->cols * dsi_dtype_size(w->dtype);
}
static void mm_cost(const dsi_mat *w, double m, dsi_op_cost *c) {
  c->flops += 2.0 * m * w->rows * w->cols;
  c->wbytes += mat_bytes(w);
  c->abytes += 4.0 * m * (w->rows + w->cols);
}

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

static void cost_embed(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  int D = r->f->c->hidden_size;
  c->wbytes = (double)r->T * D * dsi_dtype_size(r->f->m->embed_tokens.dtype);
  c->abytes = 4.0 * r->T * D;
}

/* dst[i] = rmsnorm(src[rows[i]]); fused: src[row] += y[row] first, and the
 * result rounded to bf16 values with its bf16 rows written beside */
static void op_rmsnorm(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  int D = op->epi; /* row width */
  int n = op_rows(r, op);
  const int32_t *rows = (op->flags & DSI_ROWS_LOGITS) ? r->b->logit_rows : NULL;
  float *src = XT(r, op->in[0]), *dst = XT(r, op->out[0]);
  const float *y = (op->flags & DSI_FUSE_ADD) ? XT(r, op->in[1]) : NULL;
  int quant = op->flags & DSI_FUSE_QUANT;
  const dsi_mm *mm = &r->f->mm;
  int bf16_rows = quant && op->out[1] >= 0 && dsi_gemm_amx_rows(mm->k, n, dsi_mm_act(mm));
  const dsi_vec_ops *v = mm->k->vec;
  long a, e;
  dsi_split(n, tm->ith, tm->nth, &a, &e);
  for (long i = a; i < e; i++) {
    long row = rows ? rows[i] : i;
    if (y) v->add(src + row * D, y + row * D, D);
    v->rmsnorm(src + row * D, op->vec, D, r->f->c->rms_norm_eps, dst + i * D);
    if (quant) {
      dsi_rows_round_bf16(v, dst + i * D, D, NULL, 1, D, dst + i * D);
      if (bf16_rows)
        dsi_rows_to_bf16_tiles(v, dst + i * D, D, NULL, 1, D, op->w->kpad, (int)i, n, (uint16_t *)XT(r, op->out[1]));
    }
  }
}

static void cost_rmsnorm(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  int n = op_rows(r, op);
  c->flops = 4.0 * n * op->epi;
  c->abytes = (op->flags & DSI_FUSE_ADD ? 16.0 : 8.0) * n * op->epi;
}

static void op_add(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  long n = (long)op_rows(r, op) * op->epi, a, e;
  dsi_split(n / 16, tm->ith, tm->nth, &a, &e); /* whole 64-byte lines per thread */
  a *= 16;
  e = tm->ith == tm->nth - 1 ? n : e * 16;
  r->f->mm.k->vec->add((float *)XT(r, op->out[0]) + a, (const float *)XT(r, op->in[1]) + a, e - a);
}

static void cost_add(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  c->flops = (double)op_rows(r, op) * op->epi;
  c->abytes = 12.0 * op_rows(r, op) * op->epi;
}

/* ---- matmuls ---- */
typedef struct {
  const dsi_mat *w;
  const float *x;
  float *y;
  int ldy, m;
} rowmajor_units;

static void rowmajor_run(void *ctx, long u0, long u1, void *scratch) {
  rowmajor_units *u = ctx;
  int r0 = (int)(u0 * DSI_TILE_N), r1 = (int)DSI_MIN(u1 * DSI_TILE_N, (long)u->w->rows);
  dsi_k_matmul_rows(u->w, r0, r1, u->x, u->w->cols, u->y + r0, u->ldy, u->m, scratch);
}

static void op_matmul(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_mat *w = op->w;
  const dsi_mm *mm = &r->f->mm;
  int m = op_rows(r, op);
  if (m == 0) return; /* a rank with no tokens this step */
  const float *x = XT(r, op->in[0]);
  float *y = XT(r, op->out[0]);
  int ldy = op->epi == DSI_EPI_SILU_PAIRS ? w->rows / 2 : w->rows;
  if (w->layout != DSI_LAYOUT_TILES) { /* rows claimed 16 at a time, as the packed kernels' */
    rowmajor_units ru = {w, x, y, ldy, m};
    dsi_team_claim(tm, mm->nth, DSI_CEIL_DIV(w->rows, DSI_TILE_N), 1, rowmajor_run, &ru, dsi_ws_thread(r, op, tm->tid));
    return;
  }
  dsi_mm_thread th = mm_thread(r, op, tm, 1);
  th.gs[0] = (dsi_gemm){.w = w, .x = x, .ldx = w->cols, .m = m, .y = y, .ldy = ldy, .epi = op->epi};
  int prepared = (op->flags & DSI_X_PREPARED) != 0, rounded = prepared || (op->flags & DSI_X_ROUNDED);
  dsi_ready tiles = {.kind = DSI_PREP_BF16, .x = prepared ? XT(r, op->in[1]) : NULL};
  dsi_mm_team(tm, mm, th, 1, w->rows, op->epi == DSI_EPI_SILU_PAIRS ? 32 : 16, dsi_ws_shared(r, op), op->ws_shared, 1,
              rounded, prepared && dsi_gemm_amx_rows(mm->k, m, dsi_mm_act(mm)) ? &tiles : NULL);
}

static void cost_matmul(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) { mm_cost(op->w, op_rows(r, op), c); }

/* packed: the prepared rows and each thread's call and kernel scratch;
 * row-major: a widened weight row per thread */
static dsi_op_ws ws_matmul(const dsi_fctx *f, const dsi_op *op, int T) {
  const dsi_mat *w = op->w;
  if (w->layout != DSI_LAYOUT_TILES) return (dsi_op_ws){0, (size_t)w->cols * sizeof(float)};
  return (dsi_op_ws){dsi_mm_prep_bytes(T, w->cols, w->kpad, 1), dsi_mm_thread_bytes(1, w->kpad)};
}

static void op_silu_mul(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  long a, e;
  float *g = XT(r, op->out[0]);
  dsi_split((long)op_rows(r, op) * op->epi, tm->ith, tm->nth, &a, &e);
  dsi_k_silu_mul(g + a, (const float *)XT(r, op->in[1]) + a, g + a, (int)(e - a));
}

static void cost_silu_mul(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  c->flops = 5.0 * op_rows(r, op) * op->epi;
  c->abytes = 12.0 * op_rows(r, op) * op->epi;
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

static void cost_rope_q(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  const dsi_config *cf = r->f->c;
  c->flops = 3.0 * r->T * cf->num_attention_heads * cf->qk_rope_head_dim;
  c->abytes = 8.0 * r->T * cf->num_attention_heads * cf->qk_rope_head_dim;
}

/* normalize the latent, rotate k_pe, store both in each token's cache slot
 * (f32, or bf16 in the pair rows, through a row in the workspace) */
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
    float *dst = pairs ? (float *)dsi_ws_thread(r, op, tm->tid) : cache + (size_t)r->b->slot[t] * row;
    r->f->mm.k->vec->rmsnorm(kv, op->lw->kv_a_layernorm, kvl, c->rms_norm_eps, dst);
    memcpy(dst + kvl, kv + kvl, rope * sizeof(float));
    size_t p = (size_t)r->b->pos[t] * (rope / 2);
    dsi_k_rope(dst + kvl, rope, r->f->rope_cos + p, r->f->rope_sin + p);
    if (pairs) { /* every other element of the slot's pair row */
      uint16_t *pr = pairs + dsi_paged_pair_at(row, r->b->slot[t]);
      for (int j = 0; j < row; j++) pr[2 * j] = dsi_f32_to_bf16(dst[j]);
    }
  }
}

static void cost_kv_write(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  int row = r->f->c->kv_lora_rank + r->f->c->qk_rope_head_dim;
  c->flops = 4.0 * r->T * row;
  c->abytes = 8.0 * r->T * row;
}

static dsi_op_ws ws_kv_write(const dsi_fctx *f, const dsi_op *op, int T) {
  return (dsi_op_ws){0, f->kv_pairs ? (size_t)(f->c->kv_lora_rank + f->c->qk_rope_head_dim) * sizeof(float) : 0};
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
  dsi_mm_thread th = mm_thread(r, op, tm, H);
  for (int h = 0; h < H; h++)
    th.gs[h] = (dsi_gemm){.w = &uk[h], .x = q + ((size_t)lo * H + h) * qk, .ldx = H * qk, .m = n,
                          .y = q_lat + (size_t)h * row, .ldy = H * row, .epi = DSI_EPI_STORE};
  dsi_mm_team(tm, &r->f->mm_lat, th, H, kvl, DSI_TILE_N, dsi_ws_shared(r, op), op->ws_shared, 1, 0, NULL);
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
  dsi_mm_thread th = mm_thread(r, op, tm, H);
  for (int h = 0; h < H; h++)
    th.gs[h] = (dsi_gemm){.w = &uv[h], .x = o_lat + (size_t)h * kvl, .ldx = H * kvl, .m = n,
                          .y = attn + ((size_t)lo * H + h) * vd, .ldy = H * vd, .epi = DSI_EPI_STORE};
  dsi_mm_team(tm, &r->f->mm_lat, th, H, vd, DSI_TILE_N, dsi_ws_shared(r, op), op->ws_shared, 1, 0, NULL);
}

static void cost_attn_qlat_out(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  const dsi_mat *w = op->kind == DSI_OP_ATTN_QLAT ? &op->lw->w_uk_t : &op->lw->w_uv;
  int lo, hi, n = absorbed_range(r, op, &lo, &hi);
  if (n) mm_cost(w, n, c);
}

/* the chunk's heads as H matmuls of chunk rows: prepared rows, and H calls per thread */
static dsi_op_ws ws_attn_qlat_out(const dsi_fctx *f, const dsi_op *op, int T) {
  const dsi_config *c = f->c;
  int H = c->num_attention_heads, qlat = op->kind == DSI_OP_ATTN_QLAT;
  const dsi_mat *w = qlat ? &op->lw->w_uk_t : &op->lw->w_uv;
  long rows = (long)DSI_MIN(T, f->attn_chunk) * H;
  return (dsi_op_ws){dsi_mm_prep_bytes(rows, qlat ? c->qk_nope_head_dim : c->kv_lora_rank, w->kpad, H),
                     dsi_mm_thread_bytes(H, w->kpad)};
}

/* The attention core for one token and a group of heads in f32 (over the
 * bf16 pair rows' values, or f32 rows): the cache is read once per group
 * (dsi_attn_rows_run), so groups are as
 * large as the workers allow, up to this many heads (V3's 64: their
 * queries, sums and a block of the cache, 430 KB, stay in L2). */
#define ATTN_ROW_HEADS 64
/* A prefill segment — at least this many consecutive tokens of one
 * sequence — attends through two matmuls instead of token by token. */
#define ATTN_GEMM_MIN 16

/* the core op's workspace. Shared: the segment path's scores, K, V^T,
 * slots and prepared rows, and the tokens the segments took (skip flags).
 * Per thread: the token path's scores, widened block and row pointers (in
 * f32) or the AMX attention's workspace, then the segment path's matmul
 * memory. Segments need a bucket of ATTN_GEMM_MIN tokens or more. */
typedef struct {
  size_t scores, k, vt, slots, skip, prep, shared;   /* shared: offsets, then the total */
  size_t tokens, mm, thread;                         /* per thread */
  size_t prep_bytes;
  int seg, kmax;                                     /* segments planned; the widest weight they multiply */
} core_ws;

static core_ws core_layout(const dsi_fctx *f, int T) {
  const dsi_config *c = f->c;
  int H = c->num_attention_heads, kvl = c->kv_lora_rank, row = kvl + c->qk_rope_head_dim;
  int chunk = DSI_MIN(T, f->attn_chunk);
  core_ws w = {0};
  w.seg = T >= ATTN_GEMM_MIN;
  size_t ctx_pad = round_up((size_t)f->max_context, DSI_TILE_K), ctx_rows = round_up((size_t)f->max_context, DSI_TILE_N);
  size_t row_pad = round_up((size_t)row, DSI_TILE_K);
  if (w.seg) {
    w.prep_bytes = DSI_MAX(7 * f->att_s_len * sizeof(float) + (size_t)64 * H * sizeof(float) + 4096,
                           dsi_mm_prep_bytes((long)DSI_MIN(64, chunk) * H, row, (int)row_pad, 1));
    w.scores = 0;
    w.k = w.scores + align64(f->att_s_len * sizeof(float));
    w.vt = w.k + align64(ctx_rows * row_pad * sizeof(float));
    w.slots = w.vt + align64(round_up((size_t)kvl, DSI_TILE_N) * ctx_pad * sizeof(float));
    w.skip = w.slots + align64((size_t)f->max_context * sizeof(int32_t));
  }
  w.prep = w.skip + align64((size_t)chunk);
  w.shared = w.prep + (w.seg ? align64(w.prep_bytes) : 0);
  w.tokens = align64(f->attn_bf16 ? DSI_ATTN_PAIRS_WS(H, row) : DSI_ATTN_ROWS_WS(DSI_MIN(H, ATTN_ROW_HEADS), row));
  w.kmax = (int)DSI_MAX(row_pad, ctx_pad);
  w.mm = w.seg ? dsi_mm_thread_bytes(1, w.kmax) : 0;
  w.thread = w.tokens + w.mm;
  return w;
}

static dsi_op_ws ws_attn_core(const dsi_fctx *f, const dsi_op *op, int T) {
  core_ws w = core_layout(f, T);
  return (dsi_op_ws){w.shared, w.thread};
}

/* the core op's buffers this step */
typedef struct {
  float *q_lat, *o_lat, *att_s;
  void *att_k, *att_vt, *prep;
  size_t prep_bytes;
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

/* heads per (token, group) item of n tokens on nth workers: an item reads
 * the token's cache once for all its heads, so items take every head they
 * can (up to ATTN_ROW_HEADS in f32) and split only to give each worker one */
static int core_heads(const dsi_fctx *f, int bf16, int n) {
  int H = f->c->num_attention_heads, nth = f->mm.nth;
  if (bf16) return dsi_attn_pair_heads(H, n, nth);
  int per = DSI_CEIL_DIV(H, DSI_MAX(1, nth / DSI_MAX(n, 1)));
  return DSI_MIN(DSI_MIN(H, ATTN_ROW_HEADS), per);
}

static void core_tokens(dsi_xrun *r, const dsi_op *op, dsi_team *tm, const core_bufs *cb, int n) {
  const dsi_fctx *f = r->f;
  const dsi_config *c = f->c;
  int H = c->num_attention_heads, kvl = c->kv_lora_rank, row = kvl + c->qk_rope_head_dim;
  const uint16_t *pairs = core_pairs(r, op);
  int hg = core_heads(f, f->attn_bf16, n), bs = r->cache->block_size, G = DSI_CEIL_DIV(H, hg);
  void *ws = dsi_ws_thread(r, op, tm->tid); /* the attention kernel's workspace */
  /* items one at a time: their cost grows with the position */
  for (long it; (it = atomic_fetch_add(&tm->st->next, 1)) < (long)n * G;) {
    int tc = (int)(it / G), t = op->t0 + tc, h0 = (int)(it % G) * hg;
    if (cb->skip[tc]) continue; /* done by the segment path */
    int nh = DSI_MIN(hg, H - h0), pos = r->b->pos[t];
    const int32_t *table = r->b->block_tables[r->b->seq[t]];
    const float *ql = cb->q_lat + ((size_t)tc * H + h0) * row; /* [q_lat | q_pe] per head */
    float *ol = cb->o_lat + ((size_t)tc * H + h0) * kvl;
    if (f->attn_bf16) {
      dsi_attn_pairs a = {.cache = pairs, .table = table, .block_size = bs, .row = row, .kvl = kvl, .nh = nh,
                          .n = pos + 1};
      /* the oracle only where the kernels were capped below AMX after the cache was laid out */
      (f->mm.k->amx ? dsi_attn_pairs_amx : dsi_attn_pairs_ref)(&a, ql, row, f->softmax_scale, ol, kvl, ws);
      continue;
    }
    dsi_attn_rows a = {.cache = pairs ? NULL : cb->cache, .pairs = pairs, .table = table, .block_size = bs, .row = row, .kvl = kvl, .nh = nh,
                       .n = pos + 1};
    dsi_attn_rows_run(f->mm.k->vec, &a, ql, row, f->softmax_scale, ol, kvl, ws);
  }
}

/* The segment [ts, ts + L) of the chunk: the sequence's cache is packed
 * once as K [ctx, kv_lora + rope] and V^T [kv_lora, ctx]; scores = [q_lat |
 * q_pe] K^T for every (token, head) row, a causal softmax, then o_lat = P
 * V. Passes of at most 64 tokens only multiply the keys their last token
 * can see. It multiplies what the per-token path (core_tokens) multiplies,
 * so a token's result does not depend on whether its chunk made a
 * segment: bf16 latents, queries and probabilities where the attention
 * multiplies in bf16 (attn_bf16), else the cache's values (bf16 pairs'
 * or f32 rows') and f32 queries and probabilities, unrounded. */
static void core_segment(dsi_xrun *r, const dsi_op *op, dsi_team *tm, const core_bufs *cb, dsi_mm_thread th, int ts,
                         int L) {
  const dsi_fctx *f = r->f;
  const dsi_config *c = f->c;
  int H = c->num_attention_heads, kvl = c->kv_lora_rank, row = kvl + c->qk_rope_head_dim;
  int bs = r->cache->block_size, ctx = r->b->pos[ts + L - 1] + 1;
  const int32_t *table = r->b->block_tables[r->b->seq[ts]];
  const int bf16 = f->attn_bf16;
  dsi_dtype dt = bf16 ? DSI_DTYPE_BF16 : DSI_DTYPE_F32;
  dsi_mat K, Vt;
  if (tm->ith == 0)
    for (int u = 0; u < ctx; u++) cb->slots[u] = dsi_paged_slot(table, bs, u);
  dsi_barrier_wait(tm->bar); /* the slots */
  dsi_pack_latents(dt, cb->cache, cb->pairs, row, cb->slots, ctx, row, 0, &K, cb->att_k, tm->ith, tm->nth);
  dsi_pack_latents(dt, cb->cache, cb->pairs, row, cb->slots, ctx, kvl, 1, &Vt, cb->att_vt, tm->ith, tm->nth);
  dsi_barrier_wait(tm->bar);
  int ctx_pad = Vt.kpad;
  int per = (int)DSI_MAX(1, DSI_MIN(f->att_s_len / ((size_t)H * ctx_pad), (size_t)64));
  for (int l0 = 0; l0 < L; l0 += per) {
    int n = DSI_MIN(per, L - l0), tc = ts + l0 - op->t0, seen = r->b->pos[ts + l0 + n - 1] + 1;
    dsi_mat Kv = dsi_mat_panels(&K, 0, seen), Vv = Vt;
    Vv.cols = seen;
    th.gs[0] = (dsi_gemm){.w = &Kv, .x = cb->q_lat + (size_t)tc * H * row, .ldx = row, .m = n * H, .y = cb->att_s,
                          .ldy = ctx_pad, .epi = DSI_EPI_STORE};
    dsi_mm_team(tm, &f->mm, th, 1, Kv.rows, DSI_TILE_N, cb->prep, cb->prep_bytes, 0, !bf16, NULL);
    dsi_barrier_wait(tm->bar);
    long a, e;
    dsi_split((long)n * H, tm->ith, tm->nth, &a, &e);
    for (long q = a; q < e; q++) {
      float *s = cb->att_s + (size_t)q * ctx_pad;
      int cnt = r->b->pos[ts + l0 + q / H] + 1;
      for (int u = 0; u < cnt; u++) s[u] *= f->softmax_scale;
      f->mm.k->vec->softmax(s, cnt);
      memset(s + cnt, 0, (size_t)(ctx_pad - cnt) * sizeof(float));
    }
    dsi_barrier_wait(tm->bar);
    th.gs[0] = (dsi_gemm){.w = &Vv, .x = cb->att_s, .ldx = ctx_pad, .m = n * H, .y = cb->o_lat + (size_t)tc * H * kvl,
                          .ldy = kvl, .epi = DSI_EPI_STORE};
    dsi_mm_team(tm, &f->mm, th, 1, Vv.rows, DSI_TILE_N, cb->prep, cb->prep_bytes, 0, !bf16, NULL);
    dsi_barrier_wait(tm->bar); /* att_s and the prepared rows are reused */
  }
}

static void op_attn_core(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  int n = chunk_len(r, op);
  if (n == 0) return;
  core_ws w = core_layout(r->f, r->g->T);
  uint8_t *sh = dsi_ws_shared(r, op);
  core_bufs cb = {.q_lat = XT(r, op->in[0]), .o_lat = XT(r, op->out[0]), .att_s = (float *)(sh + w.scores),
                  .att_k = sh + w.k, .att_vt = sh + w.vt, .prep = sh + w.prep, .prep_bytes = w.prep_bytes,
                  .slots = (int32_t *)(sh + w.slots), .skip = sh + w.skip, .cache = XT(r, op->in[1]),
                  .pairs = core_pairs(r, op)};
  dsi_mm_thread th = w.seg ? dsi_mm_thread_at(dsi_ws_thread(r, op, tm->tid) + w.tokens, 1) : (dsi_mm_thread){0};
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
    if (seg) core_segment(r, op, tm, &cb, th, s, e - s);
    s = e;
  }
  dsi_barrier_wait(tm->bar); /* skip flags */
  core_tokens(r, op, tm, &cb, n);
}

/* attention over the chunk: per (token, head) the scores and weighted sum
 * over its context; the cache rows (elt bytes an element) are read once
 * per head group */
static void attn_cost(const dsi_xrun *r, int t0, int n, double head_flops, int passes, int elt, dsi_op_cost *c) {
  const dsi_config *cf = r->f->c;
  int H = cf->num_attention_heads, kvl = cf->kv_lora_rank, row = kvl + cf->qk_rope_head_dim;
  double ctx = 0, toks = 0;
  for (int t = t0; t < t0 + n; t++)
    if (!r->n_naive || !r->naive[t]) ctx += r->b->pos[t] + 1, toks++;
  c->flops += H * (2.0 * ctx * (row + kvl) + toks * head_flops);
  c->abytes += (double)elt * ctx * row * passes;
}

static void cost_attn_core(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  int H = r->f->c->num_attention_heads, n = chunk_len(r, op);
  attn_cost(r, op->t0, n, 0, DSI_CEIL_DIV(H, core_heads(r->f, r->f->attn_bf16, n)), core_pairs(r, op) ? 2 : 4, c);
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
  float *s = (float *)dsi_ws_thread(r, op, tm->tid);
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
      const float *kv = cache + (size_t)dsi_paged_slot(table, bs, u) * row;
      score[u] = (dsi_k_dot(q_lat, kv, kvl) + dsi_k_dot(q + nope, kv + kvl, rope)) * f->softmax_scale;
    }
    dsi_k_softmax(score, pos + 1);
    memset(o_lat, 0, kvl * sizeof(float));
    for (int u = 0; u <= pos; u++) {
      const float *kv = cache + (size_t)dsi_paged_slot(table, bs, u) * row;
      dsi_k_axpy(o_lat, kv, score[u], kvl);
    }
    dsi_k_matmul_rows(kv_b, kb + nope, kb + nope + vd, o_lat, kvl, attn + ((size_t)t * H + h) * vd, vd, 1, wrow);
  }
}

static void cost_attn_rowmajor(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  const dsi_config *cf = r->f->c;
  int H = cf->num_attention_heads;
  attn_cost(r, 0, r->T, 2.0 * cf->kv_lora_rank * (cf->qk_nope_head_dim + cf->v_head_dim), H, 4, c);
  c->wbytes = mat_bytes(&op->lw->kv_b_proj);
}

/* q_lat, o_lat, a widened kv_b_proj row and the scores, per thread */
static dsi_op_ws ws_attn_rowmajor(const dsi_fctx *f, const dsi_op *op, int T) {
  return (dsi_op_ws){0, ((size_t)3 * f->c->kv_lora_rank + f->max_context) * sizeof(float)};
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
      dsi_mla_prefill_naive(r->f->mla, tm, &r->f->mm_lat, op->lw, &seg, dsi_ws_shared(r, op),
                            dsi_ws_thread(r, op, tm->tid));
    }
    s = e;
  }
}

/* per segment: its whole context (up to its last token) expanded per
 * head, then scores and P V per (token, head, key) */
static void cost_attn_naive(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  const dsi_config *cf = r->f->c;
  const dsi_fwd_batch *b = r->b;
  int H = cf->num_attention_heads, kvl = cf->kv_lora_rank, nope = cf->qk_nope_head_dim, vd = cf->v_head_dim;
  int qk = nope + cf->qk_rope_head_dim;
  for (int t = 0; t < r->T && r->n_naive; t++) {
    if (!r->naive[t]) continue;
    int first = t == 0 || !r->naive[t - 1] || b->seq[t - 1] != b->seq[t] || b->pos[t - 1] + 1 != b->pos[t];
    if (first) { /* the segment's tokens as op_attn_naive cuts them */
      int e = t + 1;
      while (e < r->T && r->naive[e] && b->seq[e] == b->seq[t] && b->pos[e] == b->pos[e - 1] + 1) e++;
      c->flops += 2.0 * (b->pos[e - 1] + 1) * H * kvl * (nope + vd);
      c->wbytes += mat_bytes(&op->lw->w_uk) + mat_bytes(&op->lw->w_uv);
    }
    c->flops += 2.0 * H * (r->b->pos[t] + 1) * (qk + vd);
    c->abytes += 4.0 * H * (qk + vd);
  }
}

static dsi_op_ws ws_attn_naive(const dsi_fctx *f, const dsi_op *op, int T) {
  dsi_op_ws w = {0, 0};
  dsi_mla_prefill_ws(f->mla, &w.shared, &w.thread);
  return w;
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
  float *work = (float *)dsi_ws_thread(r, op, tm->tid);
  long a, e;
  dsi_split(op_rows(r, op), tm->ith, tm->nth, &a, &e);
  for (long t = a; t < e; t++)
    dsi_k_router(&p, logits + t * p.n_experts, op->lw->e_score_correction_bias, work, ids + t * p.top_k,
                 w + t * p.top_k);
}

static void cost_router_topk(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  c->abytes = 4.0 * op_rows(r, op) * r->f->c->n_routed_experts;
}

static dsi_op_ws ws_router_topk(const dsi_fctx *f, const dsi_op *op, int T) {
  return (dsi_op_ws){0, (size_t)2 * f->c->n_routed_experts * sizeof(float)};
}

/* group the (token, expert) pairs by expert, tokens ascending within; the
 * routed sum starts at zero */
static void op_moe_sort(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  int E = c->n_routed_experts, K = c->num_experts_per_tok, D = c->hidden_size, T = op_rows(r, op);
  float *moe_y = XT(r, op->out[3]);
  long a, e;
  dsi_split((long)T * D, tm->ith, tm->nth, &a, &e);
  memset(moe_y + a, 0, (e - a) * sizeof(float));
  if (tm->ith != 0) return;
  const int32_t *ids = XT(r, op->in[0]);
  const float *w = XT(r, op->in[1]);
  int32_t *start = XT(r, op->out[0]), *tok = XT(r, op->out[1]), *cursor = (int32_t *)dsi_ws_shared(r, op);
  float *pw = XT(r, op->out[2]);
  /* expert parallel: only this rank's experts get pairs */
  int lo = r->f->exp_lo, hi = r->f->exp_hi;
  memset(start, 0, (E + 1) * sizeof(int32_t));
  for (int i = 0; i < T * K; i++) start[ids[i] + 1] += ids[i] >= lo && ids[i] < hi;
  for (int x = 0; x < E; x++) start[x + 1] += start[x];
  memcpy(cursor, start, E * sizeof(int32_t));
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      int x = ids[t * K + k];
      if (x < lo || x >= hi) continue;
      int at = cursor[x]++;
      tok[at] = t;
      pw[at] = w[t * K + k];
    }
}

static void cost_moe_sort(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  int T = op_rows(r, op);
  c->abytes = 8.0 * T * r->f->c->num_experts_per_tok + 4.0 * T * r->f->c->hidden_size;
}

/* each expert's next free place while pairs are dealt out */
static dsi_op_ws ws_moe_sort(const dsi_fctx *f, const dsi_op *op, int T) {
  return (dsi_op_ws){(size_t)f->c->n_routed_experts * sizeof(int32_t), 0};
}

/* grouped expert matmul: every active expert in one call list, each
 * reading its tokens through [start, end) of the sorted pairs — no gather
 * copy, no per-expert launch; gate/up fused with SiLU-mul */
static void op_moe_gate_up(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  const dsi_layer_weights *lw = op->lw;
  int E = c->n_routed_experts, D = c->hidden_size, ih = lw->exp_gate_up[r->f->exp_lo].rows / 2, n = 0;
  const int32_t *start = XT(r, op->in[1]), *tok = XT(r, op->in[2]);
  const float *xn = XT(r, op->in[0]);
  float *h = XT(r, op->out[0]);
  dsi_mm_thread th = mm_thread(r, op, tm, E);
  for (int e = 0; e < E; e++) {
    int a = start[e], cnt = start[e + 1] - a;
    if (cnt == 0) continue;
    th.gs[n++] = (dsi_gemm){.w = &lw->exp_gate_up[e], .x = xn, .ldx = D, .x_rows = tok + a, .m = cnt,
                            .y = h + (size_t)a * ih, .ldy = ih, .epi = DSI_EPI_SILU_PAIRS};
  }
  dsi_mm_team(tm, &r->f->mm, th, n, lw->exp_gate_up[r->f->exp_lo].rows, 2 * DSI_TILE_N, dsi_ws_shared(r, op), op->ws_shared, 1,
              (op->flags & DSI_X_ROUNDED) != 0, NULL);
}

/* the down projections, the routing weight folded into the scatter-add;
 * each thread's rows of moe_y are summed in expert order whatever the batch */
static void op_moe_down(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  const dsi_layer_weights *lw = op->lw;
  int E = c->n_routed_experts, D = c->hidden_size, ih = lw->exp_gate_up[r->f->exp_lo].rows / 2, n = 0;
  const int32_t *start = XT(r, op->in[1]), *tok = XT(r, op->in[2]);
  const float *pw = XT(r, op->in[3]), *h = XT(r, op->in[0]);
  float *y = XT(r, op->out[0]);
  dsi_mm_thread th = mm_thread(r, op, tm, E);
  for (int e = 0; e < E; e++) {
    int a = start[e], cnt = start[e + 1] - a;
    if (cnt == 0) continue;
    th.gs[n++] = (dsi_gemm){.w = &lw->exp_down[e], .x = h + (size_t)a * ih, .ldx = ih, .m = cnt, .y = y, .ldy = D,
                            .epi = DSI_EPI_SCATTER_ADD, .y_rows = tok + a, .y_scale = pw + a};
  }
  dsi_mm_team(tm, &r->f->mm, th, n, D, DSI_TILE_N, dsi_ws_shared(r, op), op->ws_shared, 1, 0, NULL);
}

/* active experts read their weights once; every (token, expert) pair is a row */
static void cost_moe(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  const dsi_config *cf = r->f->c;
  int E = cf->n_routed_experts, pairs = op_rows(r, op) * cf->num_experts_per_tok, active = 0;
  const int32_t *start = XT(r, op->in[1]);
  for (int e = 0; e < E; e++) active += start[e + 1] > start[e];
  const dsi_layer_weights *lw = op->lw;
  int x = r->f->exp_lo; /* every expert has the first loaded one's shape */
  if (op->kind == DSI_OP_MOE_ROWMAJOR) {
    mm_cost(&lw->exp_gate[x], pairs, c);
    mm_cost(&lw->exp_up[x], pairs, c);
    mm_cost(&lw->exp_down[x], pairs, c);
    c->wbytes = active * (mat_bytes(&lw->exp_gate[x]) + mat_bytes(&lw->exp_up[x]) + mat_bytes(&lw->exp_down[x]));
  } else {
    const dsi_mat *w = op->kind == DSI_OP_MOE_GATE_UP ? &lw->exp_gate_up[x] : &lw->exp_down[x];
    mm_cost(w, pairs, c);
    c->wbytes = active * mat_bytes(w);
  }
}

/* every pair's prepared row, over up to E calls */
static dsi_op_ws ws_moe_grouped(const dsi_fctx *f, const dsi_op *op, int T) {
  const dsi_config *c = f->c;
  const dsi_mat *w = op->kind == DSI_OP_MOE_GATE_UP ? &op->lw->exp_gate_up[f->exp_lo] : &op->lw->exp_down[f->exp_lo];
  int E = c->n_routed_experts;
  return (dsi_op_ws){dsi_mm_prep_bytes((long)T * c->num_experts_per_tok, w->cols, w->kpad, E),
                     dsi_mm_thread_bytes(E, w->kpad)};
}

/* Row-major experts, one at a time: gather its tokens, gate and up, SiLU-mul,
 * down, scatter-add with the routing weight (the unoptimized form the
 * op-level stage replaces). */
typedef struct {
  size_t xg, yg, gate, up, shared; /* offsets in the shared workspace: [T, hidden] twice, [T, moe_inter] twice */
} rowmajor_ws;

static rowmajor_ws moe_rowmajor_layout(const dsi_config *c, int T) {
  size_t D = (size_t)T * c->hidden_size * sizeof(float), I = (size_t)T * c->moe_intermediate_size * sizeof(float);
  rowmajor_ws w = {0, align64(D), 2 * align64(D), 2 * align64(D) + align64(I), 0};
  w.shared = w.up + align64(I);
  return w;
}

static void op_moe_rowmajor(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  const dsi_config *c = r->f->c;
  const dsi_layer_weights *lw = op->lw;
  int E = c->n_routed_experts, D = c->hidden_size, I = c->moe_intermediate_size;
  const int32_t *start = XT(r, op->in[1]), *tok = XT(r, op->in[2]);
  const float *pw = XT(r, op->in[3]), *xn = XT(r, op->in[0]);
  float *y = XT(r, op->out[0]);
  rowmajor_ws lay = moe_rowmajor_layout(c, r->g->T);
  uint8_t *sh = dsi_ws_shared(r, op);
  float *xg = (float *)(sh + lay.xg), *yg = (float *)(sh + lay.yg), *hg = (float *)(sh + lay.gate);
  float *hu = (float *)(sh + lay.up);
  float *scratch = (float *)dsi_ws_thread(r, op, tm->tid);
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

/* the gathered rows and the expert's outputs; a widened weight row per thread */
static dsi_op_ws ws_moe_rowmajor(const dsi_fctx *f, const dsi_op *op, int T) {
  const dsi_config *c = f->c;
  return (dsi_op_ws){moe_rowmajor_layout(c, T).shared,
                     (size_t)DSI_MAX(c->hidden_size, c->moe_intermediate_size) * sizeof(float)};
}

/* ---- collectives ----
 * Each is run by one thread of its team (MPI is called from one thread at
 * a time); a failure ends every rank (the collective's owner reports it).
 * Costs count the bytes this rank sends to the others: ring algorithms for
 * all_reduce (2 (N-1)/N of the tensor), reduce_scatter and all_gather
 * ((N-1)/N each), the rows themselves for the dispatch and the combine. */
static int n_ranks(const dsi_xrun *r) { return r->f->coll.size; }

/* per rank: floats of a [T, width] tensor's token shard, and where it starts */
static void shard_counts(const dsi_xrun *r, int width, int *counts, int *displs) {
  for (int k = 0; k < n_ranks(r); k++) {
    int lo, n;
    dsi_shard_of(r->T, k, n_ranks(r), &lo, &n);
    counts[k] = n * width;
    if (displs) displs[k] = lo * width;
  }
}

static double ring_share(const dsi_xrun *r) { return (double)(n_ranks(r) - 1) / n_ranks(r); }
static int row_width(const dsi_xrun *r, int t) { return (int)r->g->ts[t].ne[1]; }

static void op_all_reduce(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  if (tm->ith != 0) return;
  const dsi_coll *cl = &r->f->coll;
  cl->all_reduce_f32(cl->ctx, XT(r, op->out[0]), (size_t)r->T * row_width(r, op->out[0]));
}

static void cost_all_reduce(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  c->abytes = 2.0 * ring_share(r) * 4 * r->T * row_width(r, op->out[0]);
}

/* the counts and displacements of the ranks (ints), at the workspace's start */
static dsi_op_ws ws_counts(const dsi_fctx *f, const dsi_op *op, int T) {
  return (dsi_op_ws){(size_t)4 * f->coll.size * sizeof(int), 0};
}

static void op_reduce_scatter(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  if (tm->ith != 0) return;
  const dsi_coll *cl = &r->f->coll;
  int *counts = (int *)dsi_ws_shared(r, op);
  shard_counts(r, row_width(r, op->in[0]), counts, NULL);
  cl->reduce_scatter_f32(cl->ctx, XT(r, op->in[0]), XT(r, op->out[0]), counts);
}

static void op_all_gather(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  if (tm->ith != 0) return;
  const dsi_coll *cl = &r->f->coll;
  int D = row_width(r, op->out[0]), *counts = (int *)dsi_ws_shared(r, op), *displs = counts + n_ranks(r);
  float *x = XT(r, op->out[0]);
  memcpy(x + (size_t)r->sh_lo * D, XT(r, op->in[0]), (size_t)r->sh_n * D * sizeof(float));
  shard_counts(r, D, counts, displs);
  cl->all_gather_f32(cl->ctx, x, counts, displs);
}

static void cost_scatter_gather(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  c->abytes = ring_share(r) * 4 * r->T * row_width(r, op->in[0]);
}

/* this rank's token rows of in0, compact */
static void op_shard(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  int D = row_width(r, op->out[0]);
  long a, e;
  dsi_split((long)r->sh_n * D, tm->ith, tm->nth, &a, &e);
  memcpy((float *)XT(r, op->out[0]) + a, (const float *)XT(r, op->in[0]) + (size_t)r->sh_lo * D + a,
         (size_t)(e - a) * sizeof(float));
}

static void cost_shard(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  c->abytes = 8.0 * r->sh_n * row_width(r, op->out[0]);
}

/* The expert dispatch's plan (an int tensor shared with the combine):
 * rows sent to each rank, rows received from each, then the local token
 * of every row sent, rank by rank. A token goes to a rank once, with the
 * ids of its experts there (the others -1) and their weights: a row of
 * D + 2K floats, the ids' bits among them. */
typedef struct {
  int *sent, *got, *src;
} moe_plan;

static moe_plan plan_at(const dsi_xrun *r, int t) {
  int *p = XT(r, t), N = n_ranks(r);
  return (moe_plan){p, p + N, p + 2 * N};
}

/* the workspace: counts and displacements in bytes (4 arrays of N), then
 * the rows to send (at most a shard + 1 per rank) and the rows received
 * (at most one per token of the step) */
static size_t disp_row_bytes(const dsi_fctx *f) {
  return (size_t)(f->c->hidden_size + 2 * f->c->num_experts_per_tok) * sizeof(float);
}
static dsi_op_ws ws_moe_dispatch(const dsi_fctx *f, const dsi_op *op, int T) {
  int N = f->coll.size;
  size_t rb = op->kind == DSI_OP_MOE_DISPATCH ? disp_row_bytes(f) : (size_t)f->c->hidden_size * sizeof(float);
  return (dsi_op_ws){align64((size_t)4 * N * sizeof(int)) + align64((size_t)dsi_moe_sent_max(f, T) * rb) + (size_t)T * rb,
                     0};
}

typedef struct {
  int *sc, *sd, *rc, *rd; /* bytes */
  uint8_t *send, *recv;
} a2a_bufs;

static a2a_bufs a2a_at(const dsi_xrun *r, const dsi_op *op, size_t rb) {
  int N = n_ranks(r);
  uint8_t *w = dsi_ws_shared(r, op);
  a2a_bufs b = {(int *)w, (int *)w + N, (int *)w + 2 * N, (int *)w + 3 * N, NULL, NULL};
  b.send = w + align64((size_t)4 * N * sizeof(int));
  b.recv = b.send + align64((size_t)dsi_moe_sent_max(r->f, r->g->T) * rb);
  return b;
}

/* rows in counts -> bytes with displacements */
static void a2a_bytes(int N, const int *rows, size_t rb, int *count, int *displ) {
  for (int k = 0, at = 0; k < N; k++) {
    count[k] = (int)(rows[k] * rb);
    displ[k] = at;
    at += count[k];
  }
}

static void op_moe_dispatch(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  if (tm->ith != 0) return;
  const dsi_fctx *f = r->f;
  const dsi_coll *cl = &f->coll;
  int N = n_ranks(r), K = f->c->num_experts_per_tok, D = f->c->hidden_size, n = r->sh_n;
  size_t rb = disp_row_bytes(f);
  const float *xn = XT(r, op->in[0]), *wt = XT(r, op->in[2]);
  const int32_t *ids = XT(r, op->in[1]);
  moe_plan p = plan_at(r, op->out[3]);
  a2a_bufs b = a2a_at(r, op, rb);
  int s = 0;
  for (int d = 0; d < N; d++) {
    p.sent[d] = 0;
    for (int t = 0; t < n; t++) {
      int any = 0;
      for (int k = 0; k < K; k++) any |= f->exp_owner[ids[t * K + k]] == d;
      if (!any) continue;
      float *row = (float *)(b.send + (size_t)s * rb);
      memcpy(row, xn + (size_t)t * D, D * sizeof(float));
      for (int k = 0; k < K; k++) {
        int32_t id = f->exp_owner[ids[t * K + k]] == d ? ids[t * K + k] : -1;
        memcpy(row + D + k, &id, sizeof id);
        row[D + K + k] = wt[t * K + k];
      }
      p.src[s++] = t;
      p.sent[d]++;
    }
  }
  cl->all_to_all_int(cl->ctx, p.sent, p.got);
  a2a_bytes(N, p.sent, rb, b.sc, b.sd);
  a2a_bytes(N, p.got, rb, b.rc, b.rd);
  cl->all_to_all_v(cl->ctx, b.send, b.sc, b.sd, b.recv, b.rc, b.rd);
  int R = 0;
  for (int k = 0; k < N; k++) R += p.got[k];
  float *xr = XT(r, op->out[0]), *wr = XT(r, op->out[2]);
  int32_t *idr = XT(r, op->out[1]);
  for (int i = 0; i < R; i++) {
    const float *row = (const float *)(b.recv + (size_t)i * rb);
    memcpy(xr + (size_t)i * D, row, D * sizeof(float));
    memcpy(idr + (size_t)i * K, row + D, K * sizeof(int32_t));
    memcpy(wr + (size_t)i * K, row + D + K, K * sizeof(float));
  }
  r->n_recv = R;
}

/* the expert sums back to the tokens' ranks, added in rank order */
static void op_moe_combine(dsi_xrun *r, const dsi_op *op, dsi_team *tm) {
  if (tm->ith != 0) return;
  const dsi_coll *cl = &r->f->coll;
  int N = n_ranks(r), D = r->f->c->hidden_size, n = r->sh_n;
  size_t rb = (size_t)D * sizeof(float);
  moe_plan p = plan_at(r, op->in[1]);
  a2a_bufs b = a2a_at(r, op, rb);
  a2a_bytes(N, p.got, rb, b.sc, b.sd);
  a2a_bytes(N, p.sent, rb, b.rc, b.rd);
  /* back come as many rows as went: into the larger send part */
  cl->all_to_all_v(cl->ctx, XT(r, op->in[0]), b.sc, b.sd, b.send, b.rc, b.rd);
  float *y = XT(r, op->out[0]);
  memset(y, 0, (size_t)n * D * sizeof(float));
  int S = 0;
  for (int k = 0; k < N; k++) S += p.sent[k];
  for (int i = 0; i < S; i++) r->f->mm.k->vec->add(y + (size_t)p.src[i] * D, (const float *)(b.send + (size_t)i * rb), D);
}

/* rows that leave for other ranks */
static void cost_moe_a2a(const dsi_xrun *r, const dsi_op *op, dsi_op_cost *c) {
  int dispatch = op->kind == DSI_OP_MOE_DISPATCH;
  moe_plan p = plan_at(r, dispatch ? op->out[3] : op->in[1]);
  const int *rows = dispatch ? p.sent : p.got;
  double rb = dispatch ? (double)disp_row_bytes(r->f) : 4.0 * r->f->c->hidden_size;
  for (int k = 0; k < n_ranks(r); k++)
    if (k != r->f->coll.rank) c->abytes += rows[k] * rb;
}

/* ---- the table ---- */
const dsi_op_def dsi_op_defs[DSI_OP_COUNT] = {
  [DSI_OP_EMBED] = {op_embed, cost_embed, NULL},
  [DSI_OP_RMSNORM] = {op_rmsnorm, cost_rmsnorm, NULL},
  [DSI_OP_ADD] = {op_add, cost_add, NULL},
  [DSI_OP_MATMUL] = {op_matmul, cost_matmul, ws_matmul},
  [DSI_OP_SILU_MUL] = {op_silu_mul, cost_silu_mul, NULL},
  [DSI_OP_ROPE_Q] = {op_rope_q, cost_rope_q, NULL},
  [DSI_OP_KV_WRITE] = {op_kv_write, cost_kv_write, ws_kv_write},
  [DSI_OP_ATTN_QLAT] = {op_attn_qlat, cost_attn_qlat_out, ws_attn_qlat_out},
  [DSI_OP_ATTN_CORE] = {op_attn_core, cost_attn_core, ws_attn_core},
  [DSI_OP_ATTN_OUT] = {op_attn_out, cost_attn_qlat_out, ws_attn_qlat_out},
  [DSI_OP_ATTN_ROWMAJOR] = {op_attn_rowmajor, cost_attn_rowmajor, ws_attn_rowmajor},
  [DSI_OP_ATTN_NAIVE] = {op_attn_naive, cost_attn_naive, ws_attn_naive},
  [DSI_OP_ROUTER_TOPK] = {op_router_topk, cost_router_topk, ws_router_topk},
  [DSI_OP_MOE_SORT] = {op_moe_sort, cost_moe_sort, ws_moe_sort},
  [DSI_OP_MOE_GATE_UP] = {op_moe_gate_up, cost_moe, ws_moe_grouped},
  [DSI_OP_MOE_DOWN] = {op_moe_down, cost_moe, ws_moe_grouped},
  [DSI_OP_MOE_ROWMAJOR] = {op_moe_rowmajor, cost_moe, ws_moe_rowmajor},
  [DSI_OP_ALL_REDUCE] = {op_all_reduce, cost_all_reduce, NULL},
  [DSI_OP_REDUCE_SCATTER] = {op_reduce_scatter, cost_scatter_gather, ws_counts},
  [DSI_OP_ALL_GATHER] = {op_all_gather, cost_scatter_gather, ws_counts},
  [DSI_OP_SHARD] = {op_shard, cost_shard, NULL},
  [DSI_OP_MOE_DISPATCH] = {op_moe_dispatch, cost_moe_a2a, ws_moe_dispatch},
  [DSI_OP_MOE_COMBINE] = {op_moe_combine, cost_moe_a2a, ws_moe_dispatch},
};
