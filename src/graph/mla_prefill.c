/* graph: the non-absorbed MLA prefill and the pick between the two forms
 * (see mla_prefill.h). Sections in data-flow order: set-up, the cost
 * model, then one segment — expand a context block's latents to keys and
 * values, pack them per head, scores, online softmax, P V — and the
 * batch's segments. Everything runs on the packed matmuls (AMX with bf16
 * activations, AVX-512 otherwise); buffers are sized once. */
#include "graph/mla_prefill.h"
#include "kernels/attn.h"
#include "kernels/vec.h"
#include "tensor/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Context positions expanded at a time: the online softmax merges blocks,
 * so memory does not grow with the context. Queries per pass: a multiple
 * of AMX's 16 rows large enough to reuse each key tile, small enough that
 * the masked part of the causal triangle stays a small share. */
#define MLA_CTX_BLOCK 512
#define MLA_Q_BLOCK 64
/* bytes of expanded keys/values, packed copies and scores per pass: heads
 * are taken in groups that fit */
#define MLA_GROUP_BYTES (24u << 20)

struct dsi_mla_prefill {
  dsi_mla_form form;
  float softmax_scale;   /* with YaRN's mscale (dsi_config_softmax_scale) */
  int H, nope, rope, vd, kvl, qk, row;
  int cb, qb, hg;        /* context block, query block, heads per group: the buffers' sizes */
  int cb_step, qb_step, hg_step; /* what the loops take: the same, or less in tests */
  int kpad_k;            /* packed key rows: nope + rope rounded to 32 */
  float *lat;            /* [cb, row] the block's latents, gathered from the cache */
  float *kx;             /* [cb, hg * nope] expanded keys of the group (k_nope) */
  float *vx;             /* [cb, hg * v] expanded values of the group */
  void *kp;              /* [hg] keys packed as a weight: [cb, nope + rope] each, k_pe appended */
  void *vp;              /* [hg] values packed transposed: [v, cb] each */
  size_t kp_stride, vp_stride; /* bytes per head */
  float *s;              /* [hg, qb, cb] scores, then unnormalized probabilities */
  float *mx, *sum;       /* [max_tokens, hg] online softmax: running max and sum per (query, head) */
  int32_t *iota;         /* [qb] 0, 1, 2, ... (P V accumulates rows in place) */
  float *ones;           /* [qb] */
  dsi_mat *K, *Vt;       /* [hg] the packed matrices of the current block */
  float *xr;             /* prepared activations of its matmuls */
  size_t xr_len;         /* floats */
  int max_tokens;
};

/* ---- set-up ---- */
static dsi_mla_form form_from_env(void) {
  const char *e = getenv("DSINFER_MLA");
  if (!e || !*e || !strcmp(e, "auto")) return DSI_MLA_AUTO;
  if (!strcmp(e, "absorb")) return DSI_MLA_ABSORB;
  if (!strcmp(e, "naive")) return DSI_MLA_NAIVE;
  fprintf(stderr, "DSINFER_MLA=%s: not absorb, naive or auto; using auto\n", e);
  return DSI_MLA_AUTO;
}

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

dsi_mla_prefill *dsi_mla_prefill_new(const dsi_config *c, int max_tokens, int max_context) {
  dsi_mla_prefill *p = dsi_xcalloc(1, sizeof *p);
  p->form = form_from_env();
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
  p->kp_stride = (size_t)p->cb * p->kpad_k * sizeof(float);
  p->vp_stride = vd16 * p->cb * sizeof(float);
  size_t per_head = (size_t)p->cb * (p->nope + p->vd) * sizeof(float) + p->kp_stride + p->vp_stride +
                    (size_t)p->qb * p->cb * sizeof(float);
  p->hg = (int)DSI_MAX(1, DSI_MIN((size_t)p->H, MLA_GROUP_BYTES / per_head));
  p->cb_step = p->cb;
  p->qb_step = p->qb;
  p->hg_step = p->hg;
  int ok = 1;
#define ALLOC(ptr, n) do { if (!((ptr) = dsi_alloc_aligned((size_t)(n) * sizeof(*(ptr))))) ok = 0; } while (0)
  ALLOC(p->lat, (size_t)p->cb * p->row);
  ALLOC(p->kx, (size_t)p->cb * p->hg * p->nope);
  ALLOC(p->vx, (size_t)p->cb * p->hg * p->vd);
  ALLOC(p->s, (size_t)p->hg * p->qb * p->cb);
  ALLOC(p->mx, (size_t)max_tokens * p->hg);
  ALLOC(p->sum, (size_t)max_tokens * p->hg);
  ALLOC(p->iota, p->qb);
  ALLOC(p->ones, p->qb);
  p->kp = dsi_alloc_aligned(p->kp_stride * p->hg);
  p->vp = dsi_alloc_aligned(p->vp_stride * p->hg);
  if (!p->kp || !p->vp) ok = 0;
  /* prepared activations: the expansion's two calls over a block of
   * latent rows, or a group's query / probability rows */
  size_t kvl_pad = round_up((size_t)p->kvl, DSI_TILE_K);
  /* rows of f32, bf16 and int8 for every call (dsi_prep_bytes), in floats */
  size_t rows = DSI_MAX(2 * (size_t)p->cb, (size_t)p->hg * p->qb);
  size_t kp_max = DSI_MAX(DSI_MAX(kvl_pad, (size_t)p->kpad_k), (size_t)p->cb);
  p->xr_len = dsi_prep_bytes((long)rows, (int)kp_max, (int)kp_max, DSI_MAX(2, p->hg)) / sizeof(float) + 256;
  ALLOC(p->xr, p->xr_len);
  p->K = dsi_xcalloc(p->hg, sizeof(dsi_mat));
  p->Vt = dsi_xcalloc(p->hg, sizeof(dsi_mat));
#undef ALLOC
  if (!ok) {
    dsi_mla_prefill_free(p);
    return NULL;
  }
  for (int i = 0; i < p->qb; i++) {
    p->iota[i] = i;
    p->ones[i] = 1.0f;
  }
  return p;
}

void dsi_mla_prefill_free(dsi_mla_prefill *p) {
  if (!p) return;
  dsi_free_aligned(p->lat);
  dsi_free_aligned(p->kx);
  dsi_free_aligned(p->vx);
  dsi_free_aligned(p->s);
  dsi_free_aligned(p->mx);
  dsi_free_aligned(p->sum);
  dsi_free_aligned(p->iota);
  dsi_free_aligned(p->ones);
  dsi_free_aligned(p->kp);
  dsi_free_aligned(p->vp);
  dsi_free_aligned(p->xr);
  free(p->K);
  free(p->Vt);
  free(p);
}

void dsi_mla_prefill_set_form(dsi_mla_prefill *p, dsi_mla_form form) { p->form = form; }

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
 * short rows (K = nope) or few of them per head, the expansion is one
 * long matmul, the per-head naive core has m = one pass of queries. */
#define ABSORB_PASS 64 /* forward.c's attn_segment: tokens per pass at most */
static const struct {
  double uk, uk_f32, uv, scores, pv; /* GFLOP/s */
  double pack;                       /* ns per packed element (the team of 2 packs from pair rows) */
} k_absorb = {540, 120, 660, 1720, 1030, 0.12};
static const struct {
  double expand, scores, pv; /* GFLOP/s */
  double pack;               /* ns per packed element */
} k_naive = {1590, 1290, 900, 0.68};
#define SOFTMAX_NS 0.3 /* per score, either form (the AVX-512 exp; softmax_step over 512 scores in cache: 0.25) */
/* forward.c's attn_segment holds a pass's scores for all heads, up to 8M
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
  dsi_mla_prefill *p;
  const dsi_mla_segment *seg;
  dsi_dtype dt;
  int nb;              /* positions in the block */
  int q0, nq, c0, seen; /* softmax: the pass's queries, the block's first position, keys multiplied */
  int h0;              /* the group's first head */
  int ng;              /* heads in the group */
} naive_job;

/* Pack each head's keys [nb, nope + rope] (k_pe from the cache, shared by
 * the heads) and values transposed [v, nb] in the kernels' TILES order, a
 * 16-position panel per item: what the score and P V matmuls take as
 * their weight. Padding rows and columns are zero. In TILES order a
 * panel's column pair cp is 32 consecutive elements, (r, 2cp), (r, 2cp+1)
 * for r = 0..15: so keys are a 16 x kpad/2 transpose of element pairs and
 * values an interleave of two positions' rows. Rows are converted to the
 * packed dtype first (the ISA's bf16 rounding), then moved as pairs. */
#define MLA_MAX_KPAD 512
static void pack_task(void *ctx, int ith, int nth) {
  naive_job *j = ctx;
  dsi_mla_prefill *p = j->p;
  const dsi_vec_ops *vo = dsi_vec();
  int panels = (int)DSI_CEIL_DIV(j->nb, DSI_TILE_N), nope = p->nope, vd = p->vd, qk = p->qk;
  int vd16 = (int)round_up((size_t)vd, DSI_TILE_N), bf = j->dt == DSI_DTYPE_BF16;
  float rows[2 * DSI_TILE_N][MLA_MAX_KPAD]; /* values: the last panel runs on to kpad, up to 32 columns */
  uint16_t rb[2 * DSI_TILE_N][MLA_MAX_KPAD];
  long a, e;
  dsi_split((long)j->ng * panels, ith, nth, &a, &e);
  for (long it = a; it < e; it++) {
    int hh = (int)(it / panels), pp = (int)(it % panels), r0 = pp * DSI_TILE_N;
    int nr = DSI_MIN(DSI_TILE_N, j->nb - r0); /* real positions in the panel */
    const dsi_mat *K = &p->K[hh], *V = &p->Vt[hh];
    int kp = K->kpad;
    DSI_ASSERT(kp <= MLA_MAX_KPAD && vd16 <= MLA_MAX_KPAD);
    /* keys: row r = [k_nope | k_pe | 0] */
    for (int i = 0; i < DSI_TILE_N; i++) {
      float *row = rows[i];
      if (i < nr) {
        int r = r0 + i;
        memcpy(row, p->kx + (size_t)r * p->hg * nope + (size_t)hh * nope, (size_t)nope * sizeof(float));
        memcpy(row + nope, p->lat + (size_t)r * p->row + p->kvl, (size_t)(qk - nope) * sizeof(float));
        memset(row + qk, 0, (size_t)(kp - qk) * sizeof(float));
      } else {
        memset(row, 0, (size_t)kp * sizeof(float));
      }
      if (bf) vo->to_bf16(row, rb[i], kp);
    }
    if (bf) {
      uint32_t *d = (uint32_t *)K->data + (size_t)pp * (kp / 2) * DSI_TILE_N;
      for (int cp = 0; cp < kp / 2; cp++)
        for (int i = 0; i < DSI_TILE_N; i++) memcpy(d + (size_t)cp * DSI_TILE_N + i, &rb[i][2 * cp], 4);
    } else {
      uint64_t *d = (uint64_t *)K->data + (size_t)pp * (kp / 2) * DSI_TILE_N;
      for (int cp = 0; cp < kp / 2; cp++)
        for (int i = 0; i < DSI_TILE_N; i++) memcpy(d + (size_t)cp * DSI_TILE_N + i, &rows[i][2 * cp], 8);
    }
    /* values: positions r0..r0+15 are columns of V^T; the last panel also
     * writes the zero columns up to kpad */
    int c_end = pp == panels - 1 ? V->kpad : r0 + DSI_TILE_N;
    for (int i = 0; i < c_end - r0; i++) {
      float *row = rows[i];
      if (i < nr) memcpy(row, p->vx + (size_t)(r0 + i) * p->hg * vd + (size_t)hh * vd, (size_t)vd * sizeof(float));
      else memset(row, 0, (size_t)vd * sizeof(float));
      memset(row + vd, 0, (size_t)(vd16 - vd) * sizeof(float));
      if (bf) vo->to_bf16(row, rb[i], vd16);
    }
    size_t vp2 = V->kpad / 2;
    for (int dp = 0; dp < vd16 / DSI_TILE_N; dp++)
      for (int cp = r0 / 2; cp < c_end / 2; cp++) {
        int i0 = 2 * cp - r0;
        size_t at = ((size_t)dp * vp2 + cp) * 2 * DSI_TILE_N;
        if (bf) {
          uint16_t *d = (uint16_t *)V->data + at;
          const uint16_t *x0 = rb[i0] + dp * DSI_TILE_N, *x1 = rb[i0 + 1] + dp * DSI_TILE_N;
          for (int i = 0; i < DSI_TILE_N; i++) {
            d[2 * i] = x0[i];
            d[2 * i + 1] = x1[i];
          }
        } else {
          float *d = (float *)V->data + at;
          const float *x0 = rows[i0] + dp * DSI_TILE_N, *x1 = rows[i0 + 1] + dp * DSI_TILE_N;
          for (int i = 0; i < DSI_TILE_N; i++) {
            d[2 * i] = x0[i];
            d[2 * i + 1] = x1[i];
          }
        }
      }
  }
}

/* Online softmax over one context block for each (query, head) row of the
 * pass: scale the scores, mask the keys past the query's position, move
 * the running max, rescale the running sum and the output accumulated so
 * far, and leave exp(s - max) for P V to add on. */
static void softmax_task(void *ctx, int ith, int nth) {
  naive_job *j = ctx;
  dsi_mla_prefill *p = j->p;
  const dsi_mla_segment *g = j->seg;
  long a, e;
  dsi_split((long)j->ng * j->nq, ith, nth, &a, &e);
  for (long r = a; r < e; r++) {
    int hh = (int)(r / j->nq), i = (int)(r % j->nq), qi = j->q0 + i;
    float *s = p->s + ((size_t)hh * p->qb + i) * p->cb;
    int valid = DSI_MIN(j->seen, g->p0 + qi + 1 - j->c0); /* keys this query sees */
    size_t st = (size_t)qi * p->hg + hh;
    if (valid <= 0) {
      memset(s, 0, (size_t)j->seen * sizeof(float));
      continue;
    }
    float m_old = p->mx[st], m = m_old;
    float sum = dsi_vec()->softmax_step(s, valid, p->softmax_scale, &m);
    memset(s + valid, 0, (size_t)(j->seen - valid) * sizeof(float));
    float alpha = expf(m_old - m); /* 0 on the first block (m_old = -inf) */
    p->mx[st] = m;
    p->sum[st] = p->sum[st] * alpha + sum;
    if (alpha != 1.0f) {
      float *o = g->out + (size_t)qi * g->ldo + (size_t)(j->h0 + hh) * p->vd;
      for (int d = 0; d < p->vd; d++) o[d] *= alpha;
    }
  }
}

/* Start a head group: zero its output columns, empty its softmax state. */
static void group_init_task(void *ctx, int ith, int nth) {
  naive_job *j = ctx;
  dsi_mla_prefill *p = j->p;
  const dsi_mla_segment *g = j->seg;
  long a, e;
  dsi_split(g->L, ith, nth, &a, &e);
  for (long t = a; t < e; t++) {
    memset(g->out + (size_t)t * g->ldo + (size_t)j->h0 * p->vd, 0, (size_t)j->ng * p->vd * sizeof(float));
    for (int hh = 0; hh < j->ng; hh++) {
      p->mx[(size_t)t * p->hg + hh] = -INFINITY;
      p->sum[(size_t)t * p->hg + hh] = 0;
    }
  }
}

/* End a head group: divide each output row by its softmax sum. */
static void group_done_task(void *ctx, int ith, int nth) {
  naive_job *j = ctx;
  dsi_mla_prefill *p = j->p;
  const dsi_mla_segment *g = j->seg;
  long a, e;
  dsi_split(g->L, ith, nth, &a, &e);
  for (long t = a; t < e; t++)
    for (int hh = 0; hh < j->ng; hh++) {
      float inv = 1.0f / p->sum[(size_t)t * p->hg + hh], *o = g->out + (size_t)t * g->ldo + (size_t)(j->h0 + hh) * p->vd;
      for (int d = 0; d < p->vd; d++) o[d] *= inv;
    }
}

/* The segment, a head group at a time: for each context block up to its
 * last position, expand the block's latents to the group's keys and
 * values (two matmuls straight from the cache rows), pack them per head,
 * then for each pass of queries that sees the block: scores = [q_nope |
 * q_pe] [k_nope | k_pe]^T, the online softmax, out += P v. Every thread of
 * the team runs it; phases are separated by the team's barrier. */
static void team_gemm(dsi_mla_prefill *p, dsi_team *tm, const dsi_fctx *f, dsi_gemm *gs, int n, int rows) {
  dsi_gemm_team(tm, f, gs, f->gfn[tm->tid], n, rows, DSI_TILE_N, p->xr, p->xr_len * sizeof(float), 0, 0, NULL);
  dsi_barrier_wait(tm->bar);
}

/* this thread's share of the block's latents [c0, c0 + nb) as f32 rows */
static void gather_latents(dsi_mla_prefill *p, const dsi_mla_segment *seg, int c0, int nb, int ith, int nth) {
  long a, e;
  dsi_split(nb, ith, nth, &a, &e);
  int bs = seg->block_size;
  for (long u = a; u < e; u++) {
    int32_t slot = seg->table[(c0 + u) / bs] * bs + (c0 + u) % bs;
    float *dst = p->lat + (size_t)u * p->row;
    if (seg->pairs) {
      const uint16_t *src = seg->pairs + dsi_kv_pair_at(p->row, slot);
      for (int j = 0; j < p->row; j++) dst[j] = dsi_bf16_to_f32(src[2 * j]);
    } else {
      memcpy(dst, seg->cache + (size_t)slot * p->row, (size_t)p->row * sizeof(float));
    }
  }
}

void dsi_mla_prefill_naive(dsi_mla_prefill *p, dsi_team *tm, const dsi_fctx *f, const dsi_layer_weights *w,
                           const dsi_mla_segment *seg) {
  DSI_ASSERT(seg->L <= p->max_tokens && w->w_uk.data && w->w_uv.data);
  int H = p->H, nope = p->nope, vd = p->vd, ctx = seg->p0 + seg->L;
  int ith = tm->ith, nth = tm->nth;
  dsi_dtype dt = f->act_bf16 ? DSI_DTYPE_BF16 : DSI_DTYPE_F32;
  dsi_gemm *gs = f->gl[tm->tid];
  DSI_ASSERT(p->hg + 2 <= f->max_calls);
  for (int h0 = 0; h0 < H; h0 += p->hg_step) {
    naive_job j = {.p = p, .seg = seg, .dt = dt, .h0 = h0, .ng = DSI_MIN(p->hg_step, H - h0)};
    group_init_task(&j, ith, nth);
    dsi_mat wk = dsi_mat_panels(&w->w_uk, h0 * nope / DSI_TILE_N, j.ng * nope);
    dsi_mat wv = dsi_mat_panels(&w->w_uv, h0 * vd / DSI_TILE_N, j.ng * vd);
    for (int c0 = 0; c0 < ctx; c0 += p->cb_step) {
      int nb = DSI_MIN(p->cb_step, ctx - c0);
      j.nb = nb;
      j.c0 = c0;
      dsi_barrier_wait(tm->bar); /* the group's init; the last block's packs done with the latents */
      gather_latents(p, seg, c0, nb, ith, nth);
      dsi_barrier_wait(tm->bar); /* the latents */
      /* k_nope = c_kv W_UK^T and v = c_kv W_UV^T for the block's positions */
      gs[0] = (dsi_gemm){.w = &wk, .x = p->lat, .ldx = p->row, .m = nb, .y = p->kx, .ldy = p->hg * nope,
                         .epi = DSI_EPI_STORE};
      gs[1] = (dsi_gemm){.w = &wv, .x = p->lat, .ldx = p->row, .m = nb, .y = p->vx, .ldy = p->hg * vd,
                         .epi = DSI_EPI_STORE};
      if (wk.rows == wv.rows) {
        team_gemm(p, tm, f, gs, 2, wk.rows);
      } else {
        team_gemm(p, tm, f, gs, 1, wk.rows);
        gs[0] = gs[1];
        team_gemm(p, tm, f, gs, 1, wv.rows);
      }
      if (ith == 0)
        for (int hh = 0; hh < j.ng; hh++) {
          dsi_mat ks = {.dtype = dt, .rows = nb, .cols = p->qk}, vs = {.dtype = dt, .rows = vd, .cols = nb};
          dsi_pack_describe(&ks, &p->K[hh], (uint8_t *)p->kp + hh * p->kp_stride);
          dsi_pack_describe(&vs, &p->Vt[hh], (uint8_t *)p->vp + hh * p->vp_stride);
        }
      dsi_barrier_wait(tm->bar);
      pack_task(&j, ith, nth);
      dsi_barrier_wait(tm->bar);
      for (int q0 = 0; q0 < seg->L; q0 += p->qb_step) {
        int nq = DSI_MIN(p->qb_step, seg->L - q0), last = seg->p0 + q0 + nq - 1;
        if (last < c0) continue; /* the whole block is in this pass's future */
        int seen = DSI_MIN(nb, last + 1 - c0);
        j.q0 = q0;
        j.nq = nq;
        j.seen = seen;
        /* this pass's views: the keys the scores multiply, the same for P V */
        dsi_mat Kv[j.ng], Vv[j.ng];
        for (int hh = 0; hh < j.ng; hh++) {
          Kv[hh] = p->K[hh];
          Kv[hh].rows = seen;
          Vv[hh] = p->Vt[hh];
          Vv[hh].cols = seen;
          gs[hh] = (dsi_gemm){.w = &Kv[hh], .x = seg->q + (size_t)q0 * seg->ldq + (size_t)(h0 + hh) * p->qk,
                              .ldx = seg->ldq, .m = nq, .y = p->s + (size_t)hh * p->qb * p->cb, .ldy = p->cb,
                              .epi = DSI_EPI_STORE};
        }
        team_gemm(p, tm, f, gs, j.ng, seen);
        softmax_task(&j, ith, nth);
        dsi_barrier_wait(tm->bar);
        for (int hh = 0; hh < j.ng; hh++)
          gs[hh] = (dsi_gemm){.w = &Vv[hh], .x = p->s + (size_t)hh * p->qb * p->cb, .ldx = p->cb, .m = nq,
                              .y = seg->out + (size_t)q0 * seg->ldo + (size_t)(h0 + hh) * vd, .ldy = seg->ldo,
                              .epi = DSI_EPI_SCATTER_ADD, .y_rows = p->iota, .y_scale = p->ones};
        team_gemm(p, tm, f, gs, j.ng, vd);
      }
    }
    dsi_barrier_wait(tm->bar);
    group_done_task(&j, ith, nth);
    dsi_barrier_wait(tm->bar); /* the next group's init may share rows with it: no, but its slots do */
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
