/* tests: the non-absorbed MLA prefill (graph/mla_prefill.c) against a
 * double-precision reference of inference/model.py's "naive" attention —
 * keys and values expanded from the paged latent cache through kv_b_proj,
 * causal softmax, P v — on segments that start mid-sequence, cross
 * context blocks, query blocks and head groups, with nope != v; the AMX
 * attention kernels bitwise against the matmul kernels they stand for;
 * the result bitwise the same on one thread and on two (which thread
 * takes a head must not matter); and the pick between the two forms. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/pool.h"
#include "check.h"
#include "graph/mla_prefill.h"
#include "kernels/attn.h"

enum { H = 6, NOPE = 32, ROPE = 16, VD = 48, KVL = 64, QK = NOPE + ROPE, ROW = KVL + ROPE, BS = 8, N_BLOCKS = 40 };

static float kv_b[H * (NOPE + VD)][KVL]; /* kv_b_proj: per head [k_nope rows | v rows] */
static float cache[N_BLOCKS * BS][ROW];  /* [c_kv | k_pe] per slot */
static int32_t table[N_BLOCKS];

/* ref[t, h, v] for tokens at positions p0 .. p0+L-1 */
static void reference(const float *q, int p0, int L, float scale, double *ref) {
  int ctx = p0 + L;
  double *k = malloc((size_t)ctx * NOPE * sizeof(double)), *v = malloc((size_t)ctx * VD * sizeof(double));
  double *s = malloc((size_t)ctx * sizeof(double));
  for (int h = 0; h < H; h++) {
    for (int u = 0; u < ctx; u++) {
      const float *c = cache[table[u / BS] * BS + u % BS];
      for (int d = 0; d < NOPE + VD; d++) {
        double acc = 0;
        for (int i = 0; i < KVL; i++) acc += (double)kv_b[h * (NOPE + VD) + d][i] * c[i];
        if (d < NOPE) k[(size_t)u * NOPE + d] = acc;
        else v[(size_t)u * VD + d - NOPE] = acc;
      }
    }
    for (int t = 0; t < L; t++) {
      const float *qt = q + ((size_t)t * H + h) * QK;
      int n = p0 + t + 1;
      double mx = -INFINITY, sum = 0;
      for (int u = 0; u < n; u++) {
        const float *pe = cache[table[u / BS] * BS + u % BS] + KVL;
        double a = 0;
        for (int d = 0; d < NOPE; d++) a += qt[d] * k[(size_t)u * NOPE + d];
        for (int d = 0; d < ROPE; d++) a += (double)qt[NOPE + d] * pe[d];
        s[u] = a * scale;
        mx = fmax(mx, s[u]);
      }
      for (int u = 0; u < n; u++) sum += (s[u] = exp(s[u] - mx));
      for (int d = 0; d < VD; d++) {
        double o = 0;
        for (int u = 0; u < n; u++) o += s[u] * v[(size_t)u * VD + d];
        ref[((size_t)t * H + h) * VD + d] = o / sum;
      }
    }
  }
  free(k);
  free(v);
  free(s);
}

/* pack rows [r0, r0 + n) of kv_b of every head into a TILES matrix [H*n, KVL] */
static void pack_heads(int r0, int n, dsi_mat *dst) {
  float *rows = malloc((size_t)H * n * KVL * sizeof(float));
  for (int h = 0; h < H; h++) memcpy(rows + (size_t)h * n * KVL, kv_b[h * (NOPE + VD) + r0], (size_t)n * KVL * sizeof(float));
  dsi_mat src = {.dtype = DSI_DTYPE_F32, .rows = H * n, .cols = KVL, .data = rows, .layout = DSI_LAYOUT_ROWS};
  dsi_pack_describe(&src, dst, dsi_alloc_aligned(dsi_pack_bytes(&src)));
  dsi_pack_rows(&src, dst, 0, src.rows);
  free(rows);
}

/* a team of the pool's threads to run the naive form on, in a workspace
 * of the sizes it declares, filled with NaN first: it must write whatever
 * it reads there, as the graph's poisoned arena demands */
typedef struct {
  dsi_mla_prefill *p;
  dsi_mm *mm;
  const dsi_layer_weights *w;
  const dsi_mla_segment *seg;
  uint8_t *shared, *thread;
  size_t thread_bytes;
  dsi_barrier bar;
} team_job;

static void team_task(void *ctx, int ith, int nth) {
  team_job *j = ctx;
  dsi_team tm = {.ith = ith, .nth = nth, .tid = ith, .bar = &j->bar};
  dsi_mla_prefill_naive(j->p, &tm, j->mm, j->w, j->seg, j->shared, j->thread + (size_t)ith * j->thread_bytes);
}

static uint8_t *nan_buffer(size_t bytes) {
  uint8_t *b = dsi_alloc_aligned(bytes);
  memset(b, 0xff, bytes); /* every float a NaN */
  return b;
}

static dsi_pool *g_pool, *g_pool1;

enum { LDO = H * VD + 3 }; /* a row stride of its own: out is not assumed packed */

/* the segment's queries (from a seed of p0, L) and output [L, LDO] on pool */
static float *attend(dsi_mla_prefill *p, dsi_mm *mm, const dsi_layer_weights *w, dsi_pool *pool, int p0, int L,
                     float **q_out) {
  dsi_rng r;
  dsi_rng_seed(&r, 1000 + p0 + L);
  float *q = malloc((size_t)L * H * QK * sizeof(float)), *out = malloc((size_t)L * LDO * sizeof(float));
  for (size_t i = 0; i < (size_t)L * H * QK; i++) q[i] = dsi_rng_normal(&r);
  for (size_t i = 0; i < (size_t)L * LDO; i++) out[i] = NAN; /* every output is written */
  dsi_mla_segment seg = {.q = q, .ldq = H * QK, .cache = &cache[0][0], .table = table, .block_size = BS,
                         .p0 = p0, .L = L, .out = out, .ldo = LDO};
  size_t shared, thread;
  dsi_mla_prefill_ws(p, &shared, &thread);
  team_job j = {.p = p, .mm = mm, .w = w, .seg = &seg, .shared = nan_buffer(shared),
                .thread = nan_buffer(thread * dsi_pool_size(pool)), .thread_bytes = thread};
  dsi_barrier_init(&j.bar, dsi_pool_size(pool));
  dsi_pool_run(pool, team_task, &j);
  dsi_free_aligned(j.shared);
  dsi_free_aligned(j.thread);
  if (q_out) *q_out = q;
  else free(q);
  return out;
}

/* whether two outputs are the same, bit for bit in every written column */
static int same_bits(const float *a, const float *b, int L) {
  for (int t = 0; t < L; t++)
    if (memcmp(a + (size_t)t * LDO, b + (size_t)t * LDO, (size_t)H * VD * sizeof(float))) return 0;
  return 1;
}

/* the same segment on one thread and on two: bitwise equal */
static void run_threads(dsi_mla_prefill *p, dsi_mm *mm, const dsi_layer_weights *w, int p0, int L, const char *what) {
  float *a = attend(p, mm, w, g_pool, p0, L, NULL), *b = attend(p, mm, w, g_pool1, p0, L, NULL);
  CHECKF(same_bits(a, b, L), "%s: p0 %d L %d: one thread and two differ", what, p0, L);
  printf("  %-28s p0 %4d L %3d  one thread = two\n", what, p0, L);
  free(a);
  free(b);
}

/* the AMX attention kernels against the matmul kernels: bitwise where the
 * matmuls take AMX too (every query block of 8 rows or more) */
static void run_tiles(dsi_mla_prefill *p, dsi_mm *mm, const dsi_layer_weights *w, int p0, int L, const char *what) {
  dsi_mla_prefill_set_tiles(p, 0);
  float *a = attend(p, mm, w, g_pool, p0, L, NULL);
  dsi_mla_prefill_set_tiles(p, 1);
  float *b = attend(p, mm, w, g_pool, p0, L, NULL);
  CHECKF(same_bits(a, b, L), "%s: p0 %d L %d: the AMX attention kernels differ from the matmuls", what, p0, L);
  printf("  %-28s p0 %4d L %3d  AMX attention kernels = matmuls\n", what, p0, L);
  free(a);
  free(b);
}

static void run_case(dsi_mla_prefill *p, dsi_mm *mm, const dsi_layer_weights *w, int p0, int L, float scale,
                     double tol, const char *what) {
  float *q, *out = attend(p, mm, w, g_pool, p0, L, &q);
  double *ref = malloc((size_t)L * H * VD * sizeof(double));
  int ldo = LDO;
  reference(q, p0, L, scale, ref);
  double md = 0, mr = 0;
  for (int t = 0; t < L; t++)
    for (int i = 0; i < H * VD; i++) {
      double d = fabs(out[(size_t)t * ldo + i] - ref[(size_t)t * H * VD + i]);
      md = isnan(d) || d > md ? (isnan(d) ? INFINITY : d) : md;
      mr = fmax(mr, fabs(ref[(size_t)t * H * VD + i]));
    }
  CHECKF(md / mr <= tol, "%s: p0 %d L %d: relative error %.3g > %.1g", what, p0, L, md / mr, tol);
  printf("  %-28s p0 %4d L %3d  relative error %.2e\n", what, p0, L, md / mr);
  free(q);
  free(out);
  free(ref);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  dsi_rng r;
  dsi_rng_seed(&r, 42);
  for (int i = 0; i < H * (NOPE + VD); i++)
    for (int j = 0; j < KVL; j++) kv_b[i][j] = 0.15f * dsi_rng_normal(&r);
  for (int s = 0; s < N_BLOCKS * BS; s++)
    for (int j = 0; j < ROW; j++) cache[s][j] = dsi_rng_normal(&r);
  for (int b = 0; b < N_BLOCKS; b++) table[b] = (b * 17 + 5) % N_BLOCKS; /* blocks out of order */

  dsi_config c = {0};
  c.num_attention_heads = H;
  c.qk_nope_head_dim = NOPE;
  c.qk_rope_head_dim = ROPE;
  c.v_head_dim = VD;
  c.kv_lora_rank = KVL;
  float scale = dsi_config_softmax_scale(&c);
  dsi_layer_weights w = {0};
  pack_heads(0, NOPE, &w.w_uk);
  pack_heads(NOPE, VD, &w.w_uv);

  g_pool = dsi_pool_new(2);
  g_pool1 = dsi_pool_new(1);
  dsi_mm mm = {.k = dsi_kern_best(), .act_bf16 = 0, .nth = 2};
  dsi_mla_prefill *p = dsi_mla_prefill_new(&c, 128, N_BLOCKS * BS, DSI_MLA_AUTO);
  printf("f32 activations:\n");
  run_case(p, &mm, &w, 0, 37, scale, 1e-5, "planned blocks");
  run_case(p, &mm, &w, 150, 70, scale, 1e-5, "planned blocks");
  /* 64-position blocks, 16-query passes, groups of 4 heads: a segment
   * that starts mid-block and crosses every edge */
  dsi_mla_prefill_set_blocks(p, 64, 16, 4);
  run_case(p, &mm, &w, 0, 37, scale, 1e-5, "small blocks");
  run_case(p, &mm, &w, 150, 70, scale, 1e-5, "small blocks");
  run_case(p, &mm, &w, 277, 16, scale, 1e-5, "small blocks");
  run_threads(p, &mm, &w, 150, 70, "small blocks");
  printf("bf16 activations:\n");
  mm.act_bf16 = 1; /* keys, values, queries and probabilities rounded to bf16 */
  run_case(p, &mm, &w, 150, 70, scale, 2e-2, "small blocks");
  run_threads(p, &mm, &w, 150, 70, "small blocks");
  if (mm.k->amx) { /* 72 = 4 query blocks of 16 and one of 8 */
    run_tiles(p, &mm, &w, 150, 72, "small blocks");
    run_tiles(p, &mm, &w, 277, 16, "small blocks");
  }
  dsi_mla_prefill_free(p);
  p = dsi_mla_prefill_new(&c, 128, N_BLOCKS * BS, DSI_MLA_AUTO);
  run_case(p, &mm, &w, 0, 72, scale, 2e-2, "planned blocks");
  run_threads(p, &mm, &w, 0, 72, "planned blocks");
  if (mm.k->amx) { /* 72 = two query blocks of 32 and one of 8 */
    run_tiles(p, &mm, &w, 0, 72, "planned blocks");
    run_tiles(p, &mm, &w, 40, 104, "planned blocks");
  }
  dsi_mla_prefill_free(p);

  /* the pick: V3's attention dims */
  dsi_config v3 = c;
  v3.num_attention_heads = 128;
  v3.qk_nope_head_dim = 128;
  v3.qk_rope_head_dim = 64;
  v3.v_head_dim = 128;
  v3.kv_lora_rank = 512;
  p = dsi_mla_prefill_new(&v3, 1024, 8192, DSI_MLA_AUTO);
  double a, n;
  dsi_mla_prefill_cost(p, 512, 0, DSI_DTYPE_BF16, &a, &n);
  printf("V3 dims, 512-token prompt: cost absorbed %.3g, naive %.3g\n", a, n);
  CHECK(dsi_mla_prefill_pick(p, 512, 0, DSI_DTYPE_BF16) == DSI_MLA_NAIVE);   /* a fresh prompt: naive */
  CHECK(dsi_mla_prefill_pick(p, 16, 4000, DSI_DTYPE_BF16) == DSI_MLA_ABSORB); /* a short chunk on a long context */
  dsi_mla_prefill_set_form(p, DSI_MLA_ABSORB);
  CHECK(dsi_mla_prefill_pick(p, 512, 0, DSI_DTYPE_BF16) == DSI_MLA_ABSORB);
  dsi_mla_prefill_set_form(p, DSI_MLA_NAIVE);
  CHECK(dsi_mla_prefill_pick(p, 16, 4000, DSI_DTYPE_BF16) == DSI_MLA_NAIVE);
  dsi_mla_prefill_free(p);
  dsi_pool_free(g_pool);
  dsi_pool_free(g_pool1);
  dsi_free_aligned((void *)w.w_uk.data);
  dsi_free_aligned((void *)w.w_uv.data);
  return check_done();
}
