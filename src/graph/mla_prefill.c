/* graph: the non-absorbed MLA prefill and the pick between the two forms
 * (see mla_prefill.h). Sections in data-flow order: set-up, the cost
 * model, then one segment — gather a context block's latents, and per
 * head (a thread's own) expand them to keys and values, pack those, and
 * for each query block the scores, online softmax and P V — and the
 * batch's segments. The expansion runs on the packed matmuls; the core on
 * the AMX attention kernels (kernels/attn.h) with bf16 activations where
 * AMX runs, on the matmuls with bf16 activations elsewhere, and in f32 on
 * the decode attention's vector primitives (vec.h attn_qk, attn_pv), the
 * item's queries taking the place of its heads. Buffers live in the op's
 * planned workspace. */
#include "graph/mla_prefill.h"
#include "kernels/attn.h"
#include "kernels/vec.h"
#include "tensor/dtype.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Context positions expanded at a time: the online softmax merges blocks,
 * so memory does not grow with the context. Queries per work item: one
 * 32-row block of the AMX kernel, which then reuses each key tile twice,
 * and a small masked share of the causal triangle. */
#define MLA_CTX_BLOCK 512
#define MLA_Q_BLOCK 32
/* positions a head expands and packs at a time: its f32 keys and values
 * stay small beside the block's latents and packed keys and values, which
 * must all stay in the core's L2 while it attends */
#define MLA_EXPAND_ROWS 128

struct dsi_mla_prefill {
  dsi_mla_form form;
  int tiles;             /* may the core take the AMX attention kernels (dsi_attn_*_tiles) */
  float softmax_scale;   /* with YaRN's mscale (dsi_config_softmax_scale) */
  int H, nope, rope, vd, kvl, qk, row;
  int cb, qb, hg;        /* context block, query block, heads per group (all): the buffers' sizes */
  int cb_step, qb_step, hg_step; /* what the loops take: the same, or less in tests */
  int kpad_k;            /* packed key rows: nope + rope rounded to 32 */
  size_t kp_bytes, kv_stride; /* a head's packed keys' bytes; its keys and values' */
  size_t tws_len;        /* floats of a thread's item workspace */
  int kmax;              /* the widest (kpad) weight a thread's matmuls multiply */
  int max_tokens;
  /* the workspace (dsi_mla_prefill_ws): offsets in its shared and per-thread parts */
  size_t o_lat, o_latb, o_mx, o_sum, o_iota, o_ones, shared;
  size_t o_kx, o_vx, o_kv, o_rowp, o_tws, o_scratch, thread;
};

/* one segment's buffers, in the op's workspace */
typedef struct {
  atomic_long *next;     /* the work item claimed next */
  float *lat;            /* [cb, row] the block's latents, gathered from the cache (bf16 values
                            when the matmuls take bf16) */
  uint16_t *latb;        /* the same as bf16 AMX tiles (gemm.h), [cb, kvl], when the expansion runs on AMX;
                            or as the AVX512-BF16 kernel's staged pairs (dsi_gemm_dp_stage), a
                            MLA_EXPAND_ROWS chunk of positions after another, when it runs there;
                            or as the AVX-512 f32 route's (dsi_gemm_pairs_stage), then, where the
                            values' weight has another pass height, again for it (block_prep) */
  float *mx, *sum;       /* [max_tokens, hg] online softmax: running max and sum per (query, head) */
  int32_t *iota;         /* [qb] 0, 1, 2, ... (P V accumulates rows in place) */
  float *ones;           /* [qb] */
  /* the calling thread's, for the head it takes: */
  float *kx;             /* [MLA_EXPAND_ROWS, nope] its expanded keys (k_nope), some positions */
  float *vx;             /* [MLA_EXPAND_ROWS, v] its expanded values */
  uint8_t *kv;           /* its keys packed as a weight ([cb, nope + rope], k_pe appended),
                            then its values transposed ([v, cb]); or, for the core on f32
                            rows, its keys in 8-key panels (vec.h scores_t), then its values
                            as rows [cb][v] */
  const float **vrows;   /* [cb] those rows' addresses (the f32 rows' core) */
  float *tws;            /* an item's scores [qb, cb], then its prepared rows */
  void *scratch;         /* the matmul kernels' */
} seg_bufs;

/* ---- set-up ---- */
static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* where each buffer sits in the workspace, for the loops' present steps */
static void layout(dsi_mla_prefill *p) {
  size_t at = 64; /* the claim counter */
  p->o_lat = at, at += align64((size_t)p->cb * p->row * sizeof(float));
  p->o_latb = at, at += align64(DSI_MAX(DSI_XB_ROWS(p->cb) * round_up((size_t)p->kvl, DSI_TILE_K) * sizeof(uint16_t),
                                        2 * DSI_XF_FLOATS(p->cb, p->kvl) * sizeof(float)));
  p->o_mx = at, at += align64((size_t)p->max_tokens * p->hg * sizeof(float));
  p->o_sum = at, at += align64((size_t)p->max_tokens * p->hg * sizeof(float));
  p->o_iota = at, at += align64((size_t)p->qb * sizeof(int32_t));
  p->o_ones = at, at += align64((size_t)p->qb * sizeof(float));
  p->shared = at;
  at = 0;
  p->o_kx = at, at += align64((size_t)MLA_EXPAND_ROWS * p->nope * sizeof(float));
  p->o_vx = at, at += align64((size_t)MLA_EXPAND_ROWS * p->vd * sizeof(float));
  p->o_kv = at, at += align64(p->kv_stride);
  p->o_rowp = at, at += align64((size_t)p->cb * sizeof(float *));
  p->o_tws = at, at += align64(p->tws_len * sizeof(float));
  p->o_scratch = at, at += align64(DSI_GEMM_SCRATCH(p->kmax));
  p->thread = at;
}

dsi_mla_prefill *dsi_mla_prefill_new(const dsi_config *c, int max_tokens, int max_context, dsi_mla_form form) {
  dsi_mla_prefill *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->form = form;
  p->tiles = 1;
  p->softmax_scale = dsi_config_softmax_scale(c);
  p->H = c->num_attention_heads;
  p->nope = c->qk_nope_head_dim;
  p->rope = c->qk_rope_head_dim;
  p->vd = c->v_head_dim;
  p->kvl = c->kv_lora_rank;
  p->qk = p->nope + p->rope;
  p->row = p->kvl + p->rope;
  p->max_tokens = max_tokens;
  p->cb = (int)DSI_MIN((size_t)MLA_CTX_BLOCK, round_up((size_t)max_context, DSI_TILE_K));
  p->qb = MLA_Q_BLOCK;
  p->kpad_k = (int)round_up((size_t)p->qk, DSI_TILE_K);
  size_t vd16 = round_up((size_t)p->vd, DSI_TILE_N);
  p->kp_bytes = (size_t)p->cb * p->kpad_k * sizeof(float);
  p->kv_stride = p->kp_bytes + vd16 * p->cb * sizeof(float);
  p->hg = p->H;
  p->cb_step = p->cb;
  p->qb_step = p->qb;
  p->hg_step = p->hg;
  /* an item's scores, then its query or probability rows prepared; or a
   * head's expansion's latent rows, when its kernel takes them other than
   * as the block's bf16 tiles or staged pairs */
  int kp_max = (int)DSI_MAX((size_t)p->kpad_k, (size_t)p->cb), kvl_pad = (int)round_up((size_t)p->kvl, DSI_TILE_K);
  size_t prep = DSI_MAX(dsi_mm_prep_bytes(p->qb, kp_max, kp_max, 1), DSI_ATTN_TILES_WS(kp_max));
  prep = DSI_MAX(prep, dsi_mm_prep_bytes(p->cb, kvl_pad, kvl_pad, 1));
  prep = DSI_MAX(prep, (size_t)p->qb * (p->qk + p->vd) * sizeof(float)); /* the f32 rows' core: its q and out rows */
  p->tws_len = round_up((size_t)p->qb * p->cb + prep / sizeof(float), 16);
  p->kmax = DSI_MAX(kp_max, kvl_pad);
  layout(p);
  return p;
}

void dsi_mla_prefill_free(dsi_mla_prefill *p) { free(p); }

void dsi_mla_prefill_ws(const dsi_mla_prefill *p, size_t *shared, size_t *thread) {
  *shared = p->shared;
  *thread = p->thread;
}

void dsi_mla_prefill_set_form(dsi_mla_prefill *p, dsi_mla_form form) { p->form = form; }

void dsi_mla_prefill_set_tiles(dsi_mla_prefill *p, int on) { p->tiles = on; }

void dsi_mla_prefill_set_blocks(dsi_mla_prefill *p, int ctx_block, int q_block, int heads) {
  /* the buffers keep their planned strides (cb, qb and hg index them), so
   * only the loops' steps shrink: kept in *_step fields */
  if (ctx_block > 0 && ctx_block % DSI_TILE_K == 0 && ctx_block < p->cb) p->cb_step = ctx_block;
  if (q_block > 0 && q_block % DSI_TILE_N == 0 && q_block < p->qb) p->qb_step = q_block;
  if (heads > 0 && heads < p->hg) p->hg_step = heads;
}

/* ---- the cost model ----
 * (W_UK^T is kept exact: F32 when the checkpoint is FP8, which AMX does
 * not take — so in FP8 models q_lat runs on AVX-512 at a third of the
 * rate, measured on the v3slice preset; uk_f32 below.)
 * Time of each form's work for the segment, as the two code paths run it
 * (keys rounded to 16-row panels, the causal triangle cut at each pass's
 * last query, the context in blocks of cb for the naive form): FLOPs of
 * each matmul over the rate that matmul reaches, plus the elements each
 * packs and the scores each softmax takes, at their cost per element.
 *   absorbed: q_lat = W_UK^T q_nope and out = W_UV o_lat for every token
 *             (2 L H kvl nope, 2 L H kvl v), then per (token, head) and
 *             visible key 2 (kvl + rope) for the score and 2 kvl for P V;
 *             packs the context once, ctx (kvl + rope + kvl) elements.
 *   naive:    k_nope and v for every context position and head
 *             (2 ctx H kvl (nope + v)), then per (token, head) and key
 *             2 (nope + rope) + 2 v; packs H ctx (nope + rope + v).
 * A fresh prompt (ctx = L) has the same projection FLOPs either way and a
 * naive core (nope + rope + v) / (2 kvl + rope) ~ 0.29 of the absorbed one
 * at V3's dims; a short chunk over a long context makes the naive form
 * expand the whole context for a few queries.
 * The rates are GFLOP/s (= FLOP per ns) and ns per element, measured with
 * `dsinfer profile` on the bench preset (bf16, 512-token prompt, 2
 * Sapphire Rapids cores, AMX); only their ratios matter for the pick.
 * Each matmul's rate follows its shape: the absorbed projections have
 * short rows (K = nope) or few of them per head; the naive form's are a
 * head's expansion and its core on one thread (m = 32 queries, the AMX
 * attention kernels), measured by timing its phases at V3's 128 heads and
 * a 512-token prompt (at 16 heads its scores and P V ran 1.4x faster:
 * their query and output rows lie closer). Checked against both forms
 * forced, a chunk's whole step after a 2048-token context: the model's
 * crossover 128 new tokens at 16 heads (BF16), 80 at 128 (FP8); measured
 * ~100 and ~128. */
#define ABSORB_PASS 64 /* ops.c's core_segment: tokens per pass at most */
static const struct {
  double uk, uk_f32, uv, scores, pv; /* GFLOP/s */
  double pack;                       /* ns per packed element (the team of 2 packs from pair rows) */
} k_absorb = {540, 120, 660, 1720, 1030, 0.12};
static const struct {
  double expand, scores, pv; /* GFLOP/s */
  double pack;               /* ns per packed element */
} k_naive = {2600, 900, 560, 0.085};
#define SOFTMAX_NS 0.3 /* per score, either form (the AVX-512 exp; softmax_step over 512 scores in cache: 0.25) */
/* ops.c's core_segment holds a pass's scores for all heads, up to 8M
 * floats: with many heads (V3's 128) that is 32 MB streamed through memory
 * and its softmax ran 2.4x slower per score on v3slice; the naive form's
 * per-group scores stay in cache */
#define ABSORB_SCORES_CAP (8u << 20)
#define SOFTMAX_DRAM 2.4

/* sum over queries of the keys a pass multiplies: passes of `per` queries,
 * each over keys [block start, its last query], rounded to 16 rows, the
 * context cut in blocks of cb (0: one block) */
static double keys_multiplied(int L, int p0, int per, int cb) {
  double k = 0;
  for (int l0 = 0; l0 < L; l0 += per) {
    int n = DSI_MIN(per, L - l0), last = p0 + l0 + n - 1;
    if (!cb) {
      k += (double)n * round_up((size_t)last + 1, DSI_TILE_N);
      continue;
    }
    for (int c0 = 0; c0 <= last; c0 += cb) k += (double)n * round_up((size_t)DSI_MIN(cb, last + 1 - c0), DSI_TILE_N);
  }
  return k;
}

void dsi_mla_prefill_cost(const dsi_mla_prefill *p, int L, int p0, dsi_dtype uk_t, double *absorb, double *naive) {
  double H = p->H, kvl = p->kvl, ctx = p0 + L;
  double ctx_pad = (double)round_up((size_t)(p0 + L), DSI_TILE_K);
  int per = (int)DSI_MAX(1, DSI_MIN((double)ABSORB_PASS, ABSORB_SCORES_CAP / (H * ctx_pad)));
  double pass_bytes = 4.0 * DSI_MIN(per, L) * H * ctx_pad;
  double sm_absorb = SOFTMAX_NS * (pass_bytes > (16u << 20) ? SOFTMAX_DRAM : 1.0);
  double ka = H * keys_multiplied(L, p0, per, 0), kn = H * keys_multiplied(L, p0, p->qb_step, p->cb_step);
  *absorb = 2.0 * L * H * kvl * p->nope / (uk_t == DSI_DTYPE_F32 ? k_absorb.uk_f32 : k_absorb.uk) + 2.0 * L * H * kvl * p->vd / k_absorb.uv +
            2.0 * ka * p->row / k_absorb.scores + 2.0 * ka * kvl / k_absorb.pv +
            k_absorb.pack * ctx * (p->row + kvl) + sm_absorb * ka;
  *naive = 2.0 * ctx * H * kvl * (p->nope + p->vd) / k_naive.expand + 2.0 * kn * p->qk / k_naive.scores +
           2.0 * kn * p->vd / k_naive.pv + k_naive.pack * H * ctx * (p->qk + p->vd) + SOFTMAX_NS * kn;
}

dsi_mla_form dsi_mla_prefill_pick(const dsi_mla_prefill *p, int L, int p0, dsi_dtype uk_t) {
  if (p->form != DSI_MLA_AUTO) return p->form;
  double a, n;
  dsi_mla_prefill_cost(p, L, p0, uk_t, &a, &n);
  return n < a ? DSI_MLA_NAIVE : DSI_MLA_ABSORB;
}

/* ---- one segment ---- */
typedef struct {
  const dsi_mla_prefill *p;
  const dsi_mla_segment *seg;
  const dsi_mm *mm;
  const seg_bufs *b;
  dsi_dtype dt;
  int nb, c0;          /* positions in the block, its first position */
  int tiles;           /* the core on dsi_attn_*_tiles (AMX, bf16), */
  int rows;            /* or on f32 rows and the vector primitives, else on the matmul kernels */
  int h0;              /* the group's first head */
  int ng;              /* heads in the group */
} naive_job;

/* Pack a head's keys [nb, nope + rope] (k_nope expanded, k_pe from the
 * block's latents) and values transposed [v, nb] in the kernels' TILES
 * order: what the score and P V matmuls take as their weight. Padding rows
 * and columns are zero. In TILES order a 16-row panel's column pair cp is
 * 32 consecutive elements, (r, 2cp), (r, 2cp+1) for r = 0..15: so keys are
 * a 16 x kpad/2 transpose of element pairs and values an interleave of two
 * positions' rows. bf16 on the vector primitives (vec.h bf16_panel,
 * bf16_panel_t: the ISA's bf16 rounding). */
static void pack_head(const naive_job *j, const float *kx, const float *vx, int u0, int nu, const dsi_mat *K,
                      const dsi_mat *V) {
  const dsi_mla_prefill *p = j->p;
  const int nb = j->nb, nope = p->nope, rope = p->rope, qk = p->qk, vd = p->vd, kp = K->kpad, vkp = V->kpad;
  const int last = u0 + nu == nb; /* the last positions: the padding too */
  const int p0 = u0 / DSI_TILE_N, p1 = (int)DSI_CEIL_DIV(u0 + nu, DSI_TILE_N);
  const int vpanels = (int)DSI_CEIL_DIV(vd, DSI_TILE_N);
  const float *pe = j->b->lat + p->kvl;
  DSI_ASSERT(u0 % DSI_TILE_N == 0 && nope % 2 == 0 && qk % 2 == 0);
  DSI_ASSERT(j->dt == DSI_DTYPE_BF16); /* f32 keys and values stay rows (attend_rows) */
  const dsi_vec_ops *vo = j->mm->k->vec;
  for (int pp = p0; pp < p1; pp++) {
    const int r0 = pp * DSI_TILE_N - u0, nr = DSI_MIN(DSI_TILE_N, nu - r0); /* local rows */
    uint16_t *d = (uint16_t *)K->data + (size_t)pp * kp * DSI_TILE_N; /* column pair cp at d + 32 cp */
    vo->bf16_panel(kx + (size_t)r0 * nope, nope, nr, nope, d);
    vo->bf16_panel(pe + (size_t)(u0 + r0) * p->row, p->row, nr, rope, d + (size_t)nope * DSI_TILE_N);
    memset(d + (size_t)qk * DSI_TILE_N, 0, (size_t)(kp - qk) * DSI_TILE_N * sizeof(uint16_t));
  }
  const int done = u0 + nu + (nu & 1); /* position pairs written */
  for (int dp = 0; dp < vpanels; dp++) {
    uint16_t *d = (uint16_t *)V->data + (size_t)dp * vkp * DSI_TILE_N;
    vo->bf16_panel_t(vx + dp * DSI_TILE_N, vd, nu, DSI_MIN(DSI_TILE_N, vd - dp * DSI_TILE_N), d + (size_t)u0 * DSI_TILE_N);
    if (last) memset(d + (size_t)done * DSI_TILE_N, 0, (size_t)(vkp - done) * DSI_TILE_N * sizeof(uint16_t));
  }
}

/* Online softmax over one context block for query qi (of the segment) of
 * head hh (of the group), its scores s over the block's first `seen` keys:
 * scale them, mask the keys past the query's position, move the running
 * max, rescale the running sum and the output accumulated so far (or leave
 * the output's factor in *alpha, for P V to apply), and leave exp(s - max)
 * for P V to add on. */
static void softmax_row(const naive_job *j, int hh, int qi, float *s, int seen, float *alpha_out, float *o) {
  const dsi_mla_prefill *p = j->p;
  const seg_bufs *b = j->b;
  const dsi_mla_segment *g = j->seg;
  int valid = DSI_MIN(seen, g->p0 + qi + 1 - j->c0); /* keys this query sees */
  size_t st = (size_t)qi * p->hg + hh;
  if (valid <= 0) {
    memset(s, 0, (size_t)seen * sizeof(float));
    if (alpha_out) *alpha_out = 1.0f;
    return;
  }
  float m_old = b->mx[st], m = m_old;
  float sum = j->mm->k->vec->softmax_step(s, valid, p->softmax_scale, &m);
  memset(s + valid, 0, (size_t)(seen - valid) * sizeof(float));
  float alpha = expf(m_old - m); /* 0 on the first block (m_old = -inf), which writes the output */
  b->mx[st] = m;
  b->sum[st] = b->sum[st] * alpha + sum;
  if (alpha_out) {
    *alpha_out = alpha;
  } else if (j->c0 > 0 && alpha != 1.0f) {
    for (int d = 0; d < p->vd; d++) o[d] *= alpha;
  }
}

/* the item's output rows divided by their softmax sums (its last block) */
static void finish_rows(const naive_job *j, int hh, int q0, int nq, float *o) {
  for (int i = 0; i < nq; i++) {
    float r = 1.0f / j->b->sum[(size_t)(q0 + i) * j->p->hg + hh], *oi = o + (size_t)i * j->seg->ldo;
    for (int d = 0; d < j->p->vd; d++) oi[d] *= r;
  }
}

/* The chunk's keys [u0, u0 + nu) (u0 a multiple of 8) into the 8-key
 * panels scores_t reads: k_nope from the expansion's rows kx, k_pe from
 * the block's latents; a last panel's missing keys zero */
static void keys_t(const naive_job *j, const float *kx, int u0, int nu, float *kt) {
  const dsi_mla_prefill *p = j->p;
  const int qk = p->qk, nope = p->nope;
  DSI_ASSERT(u0 % 8 == 0);
  for (int u = u0; u < u0 + nu; u++) {
    float *d = kt + (size_t)(u / 8) * 8 * qk + u % 8;
    const float *k = kx + (size_t)(u - u0) * nope, *pe = j->b->lat + (size_t)u * p->row + p->kvl;
    for (int c = 0; c < nope; c++) d[(size_t)c * 8] = k[c];
    for (int c = 0; c < p->rope; c++) d[(size_t)(nope + c) * 8] = pe[c];
  }
  for (int u = u0 + nu; u % 8; u++)
    for (int c = 0; c < qk; c++) kt[(size_t)(u / 8) * 8 * qk + (size_t)c * 8 + u % 8] = 0;
}

/* An item's core on f32 rows: its scores over the head's keys up to
 * `seen` by scores_t on the keys' 8-key panels (unscaled: softmax_row
 * scales), then its queries, 8 at a time, take the place of the decode
 * attention's heads in attn_pv (added onto the output, zeroed on the
 * first block, in the rows' order). Each query's sums follow its own
 * inputs only, as with the matmuls. The values stay the expansion's rows;
 * the keys' panels are a transpose the expansion's rows are written into,
 * so each score is a chain of fused multiply-adds with no lanes to fold
 * (on a Zen 3 the scores ran 1.4x faster than through attn_qk's 16-lane
 * dots). */
static void attend_rows(const naive_job *j, int hh, int q0, int nq, int seen, int last) {
  const dsi_mla_prefill *p = j->p;
  const dsi_mla_segment *g = j->seg;
  const dsi_vec_ops *v = j->mm->k->vec;
  float *s = j->b->tws, *q = s + (size_t)p->qb * p->cb, *o = q + (size_t)p->qb * p->qk;
  const float *qs = g->q + (size_t)q0 * g->ldq + (size_t)(j->h0 + hh) * p->qk;
  float *os = g->out + (size_t)q0 * g->ldo + (size_t)(j->h0 + hh) * p->vd;
  /* the item's q and out rows side by side: in the batch's rows a head's
   * lie a multiple of 4 KB apart, in the same L1 sets */
  for (int i = 0; i < nq; i++) {
    memcpy(q + (size_t)i * p->qk, qs + (size_t)i * g->ldq, (size_t)p->qk * sizeof(float));
    if (j->c0) memcpy(o + (size_t)i * p->vd, os + (size_t)i * g->ldo, (size_t)p->vd * sizeof(float));
    else memset(o + (size_t)i * p->vd, 0, (size_t)p->vd * sizeof(float));
  }
  v->scores_t(s, p->cb, q, p->qk, nq, (const float *)j->b->kv, seen, p->qk);
  for (int i = 0; i < nq; i++) softmax_row(j, hh, q0 + i, s + (size_t)i * p->cb, seen, NULL, o + (size_t)i * p->vd);
  for (int i = 0; i < nq; i += 8)
    v->attn_pv(o + (size_t)i * p->vd, p->vd, s + (size_t)i * p->cb, p->cb, DSI_MIN(8, nq - i), j->b->vrows, seen, p->vd);
  for (int i = 0; i < nq; i++) memcpy(os + (size_t)i * g->ldo, o + (size_t)i * p->vd, (size_t)p->vd * sizeof(float));
  if (last) finish_rows(j, hh, q0, nq, os);
}

/* One work item: queries [q0, q0 + qb) of head hh over the block, on the
 * calling thread alone — scores = [q_nope | q_pe] [k_nope | k_pe]^T over
 * the keys up to the item's last query, the online softmax, out += P v —
 * with its own scores and prepared rows in ws. A row's result depends on
 * its own inputs only, so which thread takes an item changes no bit. */
static void attend_item(const naive_job *j, const dsi_mat *Kb, const dsi_mat *Vb, int hh, int q0) {
  const dsi_mla_prefill *p = j->p;
  const seg_bufs *b = j->b;
  float *ws = b->tws;
  const dsi_mla_segment *g = j->seg;
  int nq = DSI_MIN(p->qb_step, g->L - q0), seen = DSI_MIN(j->nb, g->p0 + q0 + nq - j->c0);
  if (seen <= 0) return; /* the whole block is in the item's future */
  float *s = ws;
  void *prep = ws + (size_t)p->qb * p->cb;
  size_t prep_bytes = (p->tws_len - (size_t)p->qb * p->cb) * sizeof(float);
  dsi_mat K = *Kb, Vt = *Vb; /* the keys the scores multiply, the same for P V */
  K.rows = seen;
  Vt.cols = seen;
  const float *q = g->q + (size_t)q0 * g->ldq + (size_t)(j->h0 + hh) * p->qk;
  float *o = g->out + (size_t)q0 * g->ldo + (size_t)(j->h0 + hh) * p->vd;
  /* the item's last block (its last query's): the output is divided by
   * its softmax sums here, as P V finishes */
  const int last = g->p0 + q0 + nq - 1 < j->c0 + j->nb;
  if (j->rows) {
    attend_rows(j, hh, q0, nq, seen, last);
    return;
  }
  float inv[32];
  DSI_ASSERT(nq <= 32);
#if DSI_HAVE_AMX
  if (j->tiles) {
    float alpha[32]; /* the output's rescaling, applied as P V adds on (one pass over it) */
    dsi_attn_qk_tiles(&K, q, g->ldq, nq, s, p->cb, prep);
    for (int i = 0; i < nq; i++) softmax_row(j, hh, q0 + i, s + (size_t)i * p->cb, seen, &alpha[i], NULL);
    if (last)
      for (int i = 0; i < nq; i++) inv[i] = 1.0f / b->sum[(size_t)(q0 + i) * p->hg + hh];
    dsi_attn_pv_tiles(&Vt, s, p->cb, nq, o, g->ldo, j->c0 > 0 ? alpha : NULL, last ? inv : NULL, prep);
    return;
  }
#endif
  dsi_gemm gq = {.w = &K, .x = q, .ldx = g->ldq, .m = nq, .y = s, .ldy = p->cb, .epi = DSI_EPI_STORE};
  dsi_mm_one(j->mm, &gq, 0, seen, prep, prep_bytes, b->scratch, 0, NULL);
  for (int i = 0; i < nq; i++) softmax_row(j, hh, q0 + i, s + (size_t)i * p->cb, seen, NULL, o + (size_t)i * g->ldo);
  dsi_gemm gv = {.w = &Vt, .x = s, .ldx = p->cb, .m = nq, .y = o, .ldy = g->ldo,
                 .epi = j->c0 > 0 ? DSI_EPI_SCATTER_ADD : DSI_EPI_STORE, .y_rows = b->iota, .y_scale = b->ones};
  dsi_mm_one(j->mm, &gv, 0, p->vd, prep, prep_bytes, b->scratch, 0, NULL);
  if (last) finish_rows(j, hh, q0, nq, o);
}

/* Start a head group: empty its softmax state (the first context block's
 * P V writes the output, the later ones add to it). */
static void group_init(const naive_job *j, int ith, int nth) {
  const dsi_mla_prefill *p = j->p;
  const dsi_mla_segment *g = j->seg;
  long a, e;
  dsi_split(g->L, ith, nth, &a, &e);
  for (long t = a; t < e; t++)
    for (int hh = 0; hh < j->ng; hh++) {
      j->b->mx[(size_t)t * p->hg + hh] = -INFINITY;
      j->b->sum[(size_t)t * p->hg + hh] = 0;
    }
}

/* A block's latents as the expansion's kernels take them, prepared once
 * for all heads (in latb): what the kernels picked for the block's first
 * chunk of rows want for W_UK (k) and W_UV (v) */
typedef struct {
  int kind_k, kind_v;    /* DSI_PREP_* */
  uint16_t *tiles;       /* bf16 AMX tiles (k: BF16; v reads them where it wants the same) */
  uint32_t *dp;          /* the AVX512-BF16 kernel's staged pairs (k: DP; the same for v) */
  float *pk, *pv;        /* the f32 route's staged pairs for W_UK's and W_UV's pass heights (PAIRS; one
                            buffer where the heights agree), or NULL */
  int hk, hv;            /* those heights */
} block_prep;

static block_prep block_prep_plan(const dsi_mla_prefill *p, const seg_bufs *b, const dsi_mm *mm,
                                  const dsi_layer_weights *w, int nb) {
  block_prep bp = {0};
  const int m0 = DSI_MIN(nb, MLA_EXPAND_ROWS);
  dsi_gemm_pick(mm->k, &w->w_uk, m0, dsi_mm_act(mm), &bp.kind_k);
  dsi_gemm_pick(mm->k, &w->w_uv, m0, dsi_mm_act(mm), &bp.kind_v);
  uint8_t *at = (uint8_t *)b->latb;
  if (bp.kind_k == DSI_PREP_BF16) bp.tiles = (uint16_t *)at;
  if (bp.kind_k == DSI_PREP_DP) bp.dp = (uint32_t *)at;
#if DSI_HAVE_AVX512
  if (bp.kind_k == DSI_PREP_PAIRS) bp.pk = (float *)at, bp.hk = dsi_gemm_pairs_height(w->w_uk.dtype);
  if (bp.kind_v == DSI_PREP_PAIRS) {
    bp.hv = dsi_gemm_pairs_height(w->w_uv.dtype);
    bp.pv = bp.pk && bp.hk == bp.hv ? bp.pk
                                     : (float *)(at + (bp.kind_k != DSI_PREP_NONE ? DSI_XF_FLOATS(p->cb, p->kvl) * sizeof(float) : 0));
  }
#else
  (void)p;
#endif
  return bp;
}

/* what chunk u0's call for W_UK (v = 0) or W_UV (v = 1) finds ready, or
 * NULL (its kernel stages its own rows) */
static const dsi_ready *block_ready(const dsi_mla_prefill *p, const block_prep *bp, int v, int u0, dsi_ready *r) {
  const int kind = v ? bp->kind_v : bp->kind_k;
  const size_t tile_words = DSI_TILE_N * round_up((size_t)p->kvl, DSI_TILE_K); /* 16 rows' */
  *r = (dsi_ready){.kind = kind};
  if (kind == DSI_PREP_PAIRS && (v ? bp->pv : bp->pk))
    r->x = (v ? bp->pv : bp->pk) + DSI_XF_FLOATS(u0, p->kvl), r->height = v ? bp->hv : bp->hk;
  else if (kind == bp->kind_k && bp->tiles) r->x = bp->tiles + (size_t)(u0 / DSI_TILE_N) * tile_words;
  else if (kind == bp->kind_k && bp->dp) r->x = bp->dp + DSI_XD_WORDS(u0, p->kvl);
  return r->x ? r : NULL;
}

#if DSI_HAVE_AVX512
/* rows [a, e) of the block staged for the expansion chunks' calls on w,
 * each chunk's rows as one call's (the same for every head): the
 * AVX512-BF16 kernel's pairs into dp, or the f32 route's into pf */
static void stage_chunks(const naive_job *j, long a, long e, const dsi_mat *w, uint32_t *dp, float *pf) {
  const dsi_mla_prefill *p = j->p;
  for (long u0 = a / MLA_EXPAND_ROWS * MLA_EXPAND_ROWS; u0 < e; u0 += MLA_EXPAND_ROWS) {
    dsi_gemm g = {.w = w, .x = j->b->lat + (size_t)u0 * p->row, .ldx = p->row, .m = (int)DSI_MIN(MLA_EXPAND_ROWS, j->nb - u0)};
    int s0 = (int)(DSI_MAX(a, u0) - u0), s1 = (int)(DSI_MIN(e, u0 + g.m) - u0);
    if (dp) dsi_gemm_dp_stage(&g, s0, s1, dp + DSI_XD_WORDS(u0, p->kvl));
    else dsi_gemm_pairs_stage(&g, s0, s1, 0, pf + DSI_XF_FLOATS(u0, p->kvl));
  }
}
#endif

/* this thread's share of the block's latents [c0, c0 + nb) as f32 rows,
 * rounded to bf16 when the matmuls take bf16 (the cache's pair rows are
 * bf16 already), then prepared as bp says */
static void gather_latents(const naive_job *j, int c0, int nb, const block_prep *bp, const dsi_layer_weights *w,
                           int ith, int nth) {
  const dsi_mla_prefill *p = j->p;
  const dsi_mla_segment *seg = j->seg;
  const dsi_vec_ops *v = j->mm->k->vec;
  long a, e;
  dsi_split(nb, ith, nth, &a, &e);
  int bs = seg->block_size;
  for (long u = a; u < e; u++) {
    int32_t slot = dsi_paged_slot(seg->table, bs, (int)(c0 + u));
    float *dst = j->b->lat + (size_t)u * p->row;
    if (seg->pairs && !(slot & 1) && u + 1 < e) { /* a whole pair (block sizes are even): both rows at once */
      v->pair_to_f32(seg->pairs + dsi_paged_pair_at(p->row, slot), p->row, dst, dst + p->row);
      u++;
    } else if (seg->pairs) {
      const uint16_t *src = seg->pairs + dsi_paged_pair_at(p->row, slot);
      for (int c = 0; c < p->row; c++) dst[c] = dsi_bf16_to_f32(src[2 * c]);
    } else if (j->mm->act_bf16) {
      v->round_bf16(seg->cache + (size_t)slot * p->row, dst, p->row);
    } else {
      memcpy(dst, seg->cache + (size_t)slot * p->row, (size_t)p->row * sizeof(float));
    }
  }
  if (bp->tiles && e > a)
    dsi_rows_to_bf16_tiles(v, j->b->lat + (size_t)a * p->row, p->row, NULL, (int)(e - a), p->kvl,
                           (int)round_up((size_t)p->kvl, DSI_TILE_K), (int)a, nb, bp->tiles);
#if DSI_HAVE_AVX512
  /* each expansion chunk's rows as one call's: the same for every head */
  if (bp->dp) stage_chunks(j, a, e, &w->w_uk, bp->dp, NULL);
  if (bp->pk) stage_chunks(j, a, e, &w->w_uk, NULL, bp->pk);
  if (bp->pv && bp->pv != bp->pk) stage_chunks(j, a, e, &w->w_uv, NULL, bp->pv);
#else
  DSI_ASSERT(!bp->dp && !bp->pk && !bp->pv);
  (void)w;
#endif
}

/* the segment's buffers in the op's workspace (dsi_mla_prefill_ws) */
static seg_bufs bufs_at(const dsi_mla_prefill *p, uint8_t *shared, uint8_t *thread) {
  return (seg_bufs){.next = (atomic_long *)shared, .lat = (float *)(shared + p->o_lat),
                    .latb = (uint16_t *)(shared + p->o_latb), .mx = (float *)(shared + p->o_mx),
                    .sum = (float *)(shared + p->o_sum), .iota = (int32_t *)(shared + p->o_iota),
                    .ones = (float *)(shared + p->o_ones), .kx = (float *)(thread + p->o_kx),
                    .vx = (float *)(thread + p->o_vx), .kv = thread + p->o_kv,
                    .vrows = (const float **)(thread + p->o_rowp), .tws = (float *)(thread + p->o_tws),
                    .scratch = thread + p->o_scratch};
}

/* The segment, a head group at a time (all heads but in tests): for each
 * context block up to its last position, the team gathers the block's
 * latents; then its threads claim the group's heads one at a time, and
 * for a head expand the latents to its keys and values (two matmuls,
 * k_nope = c_kv W_UK^T, v = c_kv W_UV^T), pack them into their own
 * buffers, which stay in the core's L2, and attend every query block
 * that sees the block, costliest (latest queries) first. Phases are
 * separated by the team's barrier. */
void dsi_mla_prefill_naive(const dsi_mla_prefill *p, dsi_team *tm, const dsi_mm *mm, const dsi_layer_weights *w,
                           const dsi_mla_segment *seg, void *ws_shared, void *ws_thread) {
  DSI_ASSERT(seg->L <= p->max_tokens && w->w_uk.data && w->w_uv.data);
  DSI_ASSERT(p->nope % DSI_TILE_N == 0 && p->vd % DSI_TILE_N == 0); /* a head's rows are whole panels */
  DSI_ASSERT(!mm->act_i8); /* the latent side's matmuls (dsi_fctx.mm_lat): what the absorbed form multiplies */
  int H = p->H, nope = p->nope, vd = p->vd, ctx = seg->p0 + seg->L;
  int ith = tm->ith, nth = tm->nth;
  seg_bufs bf = bufs_at(p, ws_shared, ws_thread);
  dsi_dtype dt = mm->act_bf16 ? DSI_DTYPE_BF16 : DSI_DTYPE_F32;
  int tiles = p->tiles && dt == DSI_DTYPE_BF16 && mm->k->amx, rows = dt == DSI_DTYPE_F32;
  float *kt = (float *)bf.kv, *vr = kt + (size_t)p->cb * p->qk; /* the f32 rows' core: this thread's keys, values */
  for (int u = 0; rows && u < p->cb; u++) bf.vrows[u] = vr + (size_t)u * vd;
  void *prep = bf.tws + (size_t)p->qb * p->cb;
  size_t prep_bytes = (p->tws_len - (size_t)p->qb * p->cb) * sizeof(float);
  int nqb = (int)DSI_CEIL_DIV(seg->L, p->qb_step);
  if (ith == 0) /* constants of P V's scatter-add (the matmul path), visible after the first barrier */
    for (int i = 0; i < p->qb; i++) {
      bf.iota[i] = i;
      bf.ones[i] = 1.0f;
    }
  for (int h0 = 0; h0 < H; h0 += p->hg_step) {
    naive_job j = {.p = p, .seg = seg, .mm = mm, .b = &bf, .dt = dt, .h0 = h0, .ng = DSI_MIN(p->hg_step, H - h0),
                   .tiles = tiles, .rows = rows};
    group_init(&j, ith, nth);
    for (int c0 = 0; c0 < ctx; c0 += p->cb_step) {
      int nb = DSI_MIN(p->cb_step, ctx - c0);
      j.nb = nb;
      j.c0 = c0;
      const block_prep bp = block_prep_plan(p, &bf, mm, w, nb);
      dsi_barrier_wait(tm->bar); /* the group's init; the last block's heads done with the latents */
      gather_latents(&j, c0, nb, &bp, w, ith, nth);
      if (ith == 0) atomic_store_explicit(bf.next, 0, memory_order_relaxed);
      dsi_barrier_wait(tm->bar); /* the latents */
      dsi_mat ks = {.dtype = dt, .rows = nb, .cols = p->qk}, vs = {.dtype = dt, .rows = vd, .cols = nb}, K, Vt;
      dsi_pack_describe(&ks, &K, bf.kv);
      dsi_pack_describe(&vs, &Vt, bf.kv + p->kp_bytes);
      for (;;) {
        long hh = atomic_fetch_add_explicit(bf.next, 1, memory_order_relaxed);
        if (hh >= j.ng) break;
        int h = h0 + (int)hh;
        dsi_mat wkh = dsi_mat_panels(&w->w_uk, h * nope / DSI_TILE_N, nope);
        dsi_mat wvh = dsi_mat_panels(&w->w_uv, h * vd / DSI_TILE_N, vd);
        for (int u0 = 0; u0 < nb; u0 += MLA_EXPAND_ROWS) {
          const int nu = DSI_MIN(MLA_EXPAND_ROWS, nb - u0);
          const float *x = bf.lat + (size_t)u0 * p->row;
          /* what the block prepared, for the chunk's kernels that take it (a short last chunk's may not) */
          dsi_ready rbk, rbv;
          const dsi_ready *rk = block_ready(p, &bp, 0, u0, &rbk), *rv = block_ready(p, &bp, 1, u0, &rbv);
          /* f32 rows: the values straight into the rows, the keys transposed into panels */
          dsi_gemm gk = {.w = &wkh, .x = x, .ldx = p->row, .m = nu, .y = bf.kx, .ldy = nope, .epi = DSI_EPI_STORE};
          dsi_gemm gv = {.w = &wvh, .x = x, .ldx = p->row, .m = nu, .y = rows ? vr + (size_t)u0 * vd : bf.vx,
                         .ldy = vd, .epi = DSI_EPI_STORE};
          dsi_mm_one(mm, &gk, 0, nope, prep, prep_bytes, bf.scratch, 1, rk);
          dsi_mm_one(mm, &gv, 0, vd, prep, prep_bytes, bf.scratch, 1, rv);
          if (rows) keys_t(&j, bf.kx, u0, nu, kt);
          else pack_head(&j, bf.kx, bf.vx, u0, nu, &K, &Vt);
        }
        for (int b = nqb - 1; b >= 0; b--) attend_item(&j, &K, &Vt, (int)hh, b * p->qb_step);
      }
    }
    dsi_barrier_wait(tm->bar); /* the group's last heads done: the next group's init reuses the softmax state */
  }
}

/* ---- the batch's segments ---- */
int dsi_mla_prefill_plan(const dsi_mla_prefill *p, const dsi_fwd_batch *b, dsi_dtype uk_t, uint8_t *naive) {
  int T = b->n_tokens, n = 0;
  memset(naive, 0, (size_t)T);
  if (p->form == DSI_MLA_ABSORB) return 0;
  for (int s = 0; s < T;) {
    int e = s + 1;
    while (e < T && b->seq[e] == b->seq[s] && b->pos[e] == b->pos[e - 1] + 1) e++;
    if (e - s >= DSI_MLA_SEGMENT_MIN && dsi_mla_prefill_pick(p, e - s, b->pos[s], uk_t) == DSI_MLA_NAIVE) {
      memset(naive + s, 1, (size_t)(e - s));
      n += e - s;
    }
    s = e;
  }
  return n;
}
