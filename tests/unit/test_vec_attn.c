/* tests: the attention's primitives (vec.h attn_qk, attn_pv, scores_t, softmax,
 * softmax_step, and the bf16 conversions into AMX layouts: to_bf16_tiles,
 * bf16_panel, bf16_panel_t) of
 * every ISA built for this CPU against a scalar model of their documented
 * order — each dot summed in 16 lanes with fused multiply-adds and folded
 * 8, 4, 2, 1; each output of P V summed over the rows in order — bitwise,
 * for 8-head groups (the written-out path) and other head counts, on
 * aligned and ragged widths. Bitwise, because a token's attention must not
 * depend on how its heads were grouped (that follows the batch and the
 * thread count). Last, the f32 attention built on them
 * (dsi_attn_rows_run) against double-precision attention, over f32 rows
 * and over the same values as bf16 pair rows (bitwise the same). */
#include "kernels/vec.h"
#include "kernels/attn.h"
#include "kernels/kernels.h"
#include "kernels/cpu.h"
#include "base/base.h"
#include "tensor/dtype.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the FMA builds (AVX2, AVX-512) fuse each multiply-add; the portable
 * build, compiled for x86-64's baseline, rounds the product first */
static const dsi_vec_ops *g_v; /* the ISA level under test */
static int g_fused;
static float madd(float a, float b, float c) { return g_fused ? fmaf(a, b, c) : (float)(a * b) + c; }

static float dot_model(const float *a, const float *b, int n) {
  float acc[16] = {0};
  for (int i = 0; i < n; i++) acc[i & 15] = madd(a[i], b[i], acc[i & 15]);
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}

static void run(const char *isa, int nh, int nu, int n, dsi_rng *rng) {
  const dsi_vec_ops *v = g_v;
  int ldq = n + 5, lds = nu + 3, ldo = n + 7;
  float *q = dsi_xmalloc((size_t)nh * ldq * sizeof(float)), *cache = dsi_xmalloc((size_t)nu * n * sizeof(float));
  const float **rows = dsi_xmalloc((size_t)nu * sizeof(float *));
  float *s = dsi_xcalloc((size_t)nh * lds, sizeof(float)), *sm = dsi_xcalloc((size_t)nh * lds, sizeof(float));
  float *o = dsi_xmalloc((size_t)nh * ldo * sizeof(float)), *om = dsi_xmalloc((size_t)nh * ldo * sizeof(float));
  for (size_t i = 0; i < (size_t)nh * ldq; i++) q[i] = dsi_rng_normal(rng);
  for (size_t i = 0; i < (size_t)nu * n; i++) cache[i] = dsi_rng_normal(rng);
  for (int u = 0; u < nu; u++) rows[u] = cache + (size_t)((u * 7) % nu) * n; /* out of order, as a paged cache */
  for (size_t i = 0; i < (size_t)nh * ldo; i++) o[i] = om[i] = dsi_rng_normal(rng);
  float scale = 0.0723f;
  v->attn_qk(s, lds, q, ldq, nh, rows, nu, n, scale);
  for (int h = 0; h < nh; h++)
    for (int u = 0; u < nu; u++) sm[(size_t)h * lds + u] = dot_model(q + (size_t)h * ldq, rows[u], n) * scale;
  CHECKF(!memcmp(s, sm, (size_t)nh * lds * sizeof(float)), "%s attn_qk heads %d rows %d width %d differs", isa, nh, nu, n);
  v->attn_pv(o, ldo, s, lds, nh, rows, nu, n);
  for (int h = 0; h < nh; h++)
    for (int c = 0; c < n; c++) {
      float a = om[(size_t)h * ldo + c];
      for (int u = 0; u < nu; u++) a = madd(sm[(size_t)h * lds + u], rows[u][c], a);
      om[(size_t)h * ldo + c] = a;
    }
  CHECKF(!memcmp(o, om, (size_t)nh * ldo * sizeof(float)), "%s attn_pv heads %d rows %d width %d differs", isa, nh, nu, n);
  if (v->attn_qk_pairs && v->attn_pv_pairs) {
    /* the same primitives over bf16 pair rows: row u element u & 1 of its
     * pair row, the other element NaN; bitwise the f32 rows of the same
     * values */
    uint16_t *pc = dsi_xmalloc((size_t)(nu + 1) * n * sizeof(uint16_t));
    const uint16_t **prow = dsi_xmalloc((size_t)nu * sizeof(uint16_t *));
    float *wide = dsi_xmalloc((size_t)nu * n * sizeof(float)), *s2 = dsi_xcalloc((size_t)nh * lds, sizeof(float));
    const float **wrows = dsi_xmalloc((size_t)nu * sizeof(float *));
    float *o2 = dsi_xmalloc((size_t)nh * ldo * sizeof(float)), *o3 = dsi_xmalloc((size_t)nh * ldo * sizeof(float));
    for (size_t i = 0; i < (size_t)(nu + 1) * n; i++) pc[i] = 0x7fc0;
    for (int u = 0; u < nu; u++) {
      prow[u] = pc + (size_t)(u / 2) * 2 * n; /* pair rows in order; a pair's rows from any place of the cache */
      wrows[u] = wide + (size_t)u * n;
      for (int c = 0; c < n; c++) {
        uint16_t b = dsi_f32_to_bf16(rows[u][c]);
        ((uint16_t *)prow[u])[2 * c + (u & 1)] = b;
        wide[(size_t)u * n + c] = dsi_bf16_to_f32(b);
      }
    }
    v->attn_qk(s, lds, q, ldq, nh, wrows, nu, n, scale);
    v->attn_qk_pairs(s2, lds, q, ldq, nh, prow, nu, n, scale);
    CHECKF(!memcmp(s, s2, (size_t)nh * lds * sizeof(float)), "%s attn_qk_pairs heads %d rows %d width %d differs", isa,
           nh, nu, n);
    for (size_t i = 0; i < (size_t)nh * ldo; i++) o2[i] = o3[i] = (float)i;
    v->attn_pv(o2, ldo, s, lds, nh, wrows, nu, n);
    v->attn_pv_pairs(o3, ldo, s, lds, nh, prow, nu, n);
    CHECKF(!memcmp(o2, o3, (size_t)nh * ldo * sizeof(float)), "%s attn_pv_pairs heads %d rows %d width %d differs", isa,
           nh, nu, n);
    free(pc), free(prow), free(wide), free(s2), free(wrows), free(o2), free(o3);
  }
  free(q), free(cache), free(rows), free(s), free(sm), free(o), free(om);
}

/* softmax against double precision: each probability within 1e-5
 * relative (f32 rounds x - max, the exp adds 1-2 ulp, the f32 sum of a few
 * thousand terms ~1e-6), and summing to 1 */
/* scores_t: every score the sum over d, in order, of one multiply-add a
 * step, against keys transposed into 8-key panels (what the non-absorbed
 * prefill's core reads), whatever the block of queries and keys it falls
 * in; whole panels written, nothing past them */
static void run_scores(const char *isa, int nq, int nu, int n, dsi_rng *rng) {
  const int ldq = n + 3, lds = (nu + 7) / 8 * 8 + 5, np = (nu + 7) / 8;
  float *q = dsi_xmalloc((size_t)nq * ldq * sizeof(float)), *kt = dsi_xmalloc((size_t)np * 8 * n * sizeof(float));
  float *s = dsi_xmalloc((size_t)nq * lds * sizeof(float));
  for (size_t i = 0; i < (size_t)nq * ldq; i++) q[i] = dsi_rng_normal(rng);
  for (size_t i = 0; i < (size_t)np * 8 * n; i++) kt[i] = dsi_rng_normal(rng);
  for (size_t i = 0; i < (size_t)nq * lds; i++) s[i] = 12345.0f;
  g_v->scores_t(s, lds, q, ldq, nq, kt, nu, n);
  int bad = 0;
  for (int i = 0; i < nq; i++)
    for (int u = 0; u < lds; u++) {
      float want = 12345.0f;
      if (u < np * 8) {
        want = 0;
        for (int d = 0; d < n; d++) want = madd(q[(size_t)i * ldq + d], kt[(size_t)(u / 8) * 8 * n + (size_t)d * 8 + u % 8], want);
      }
      bad += memcmp(&want, &s[(size_t)i * lds + u], sizeof want) != 0;
    }
  CHECKF(!bad, "%s scores_t queries %d keys %d width %d: %d scores differ", isa, nq, nu, n, bad);
  free(q), free(kt), free(s);
}

static void run_softmax(const char *isa, int n, double spread, dsi_rng *rng) {
  float *x = dsi_xmalloc((size_t)n * sizeof(float));
  double *ref = dsi_xmalloc((size_t)n * sizeof(double)), mx = -1e300, sum = 0;
  for (int i = 0; i < n; i++) x[i] = (float)(dsi_rng_normal(rng) * spread), mx = fmax(mx, x[i]);
  for (int i = 0; i < n; i++) sum += (ref[i] = exp((double)x[i] - mx));
  g_v->softmax(x, n);
  double worst = 0, tot = 0;
  for (int i = 0; i < n; i++) {
    worst = fmax(worst, fabs(x[i] - ref[i] / sum) / (ref[i] / sum + 1e-30));
    tot += x[i];
  }
  CHECKF(worst <= 1e-5 && fabs(tot - 1) <= 1e-5, "%s softmax n %d spread %g: relative error %.3g, sum %.9f", isa, n, spread,
         worst, tot);
  free(x), free(ref);
}

/* one online-softmax step against double precision: the running max
 * moves to max(m, scale max x) (exactly: the max of rounded products),
 * each weight e^(scale x - m') within 1e-5 relative, the sum of them too */
static void run_softmax_step(const char *isa, int n, float m0, dsi_rng *rng) {
  float *x = dsi_xmalloc((size_t)n * sizeof(float)), scale = 0.0883f, m = m0, mx = -INFINITY;
  double *ref = dsi_xmalloc((size_t)n * sizeof(double)), sum = 0;
  for (int i = 0; i < n; i++) x[i] = (float)(dsi_rng_normal(rng) * 20), mx = fmaxf(mx, x[i]);
  float want_m = fmaxf(m0, mx * scale);
  for (int i = 0; i < n; i++) sum += (ref[i] = exp((double)x[i] * scale - want_m));
  float got = g_v->softmax_step(x, n, scale, &m);
  double worst = 0;
  for (int i = 0; i < n; i++) worst = fmax(worst, fabs(x[i] - ref[i]) / (ref[i] + 1e-30));
  CHECKF(m == want_m && worst <= 1e-5 && fabs(got - sum) <= 1e-5 * sum,
         "%s softmax_step n %d m0 %g: max %g (want %g), relative error %.3g, sum %.9g vs %.9g", isa, n, m0, m, want_m,
         worst, got, sum);
  free(x), free(ref);
}

/* finite values of every kind the rounding meets: normal, subnormal,
 * signed zeros, halfway cases (kept bit odd and even), the largest float
 * (which rounds to infinity) */
static float conv_value(dsi_rng *rng, int i) {
  static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x3f808000u,
                                     0x3f818000u, 0xbf808000u, 0x7f7fffffu, 0x3f80ffffu, 0x00008000u};
  float v;
  if (i % 5 == 0) {
    uint32_t u = special[(i / 5) % DSI_ARRAY_LEN(special)];
    memcpy(&v, &u, sizeof v);
  } else {
    v = (float)ldexp(dsi_rng_normal(rng), (int)(dsi_rng_u64(rng) % 60) - 30);
  }
  return v;
}

/* the bf16 conversions against dsi_f32_to_bf16 at their documented places:
 * rows [n of kpad] into tile rows, a panel of nr rows x n columns, and its
 * transpose of nu rows x ni elements; every other word is zero */
static void run_conv(const char *isa, int n, int kpad, int nr, dsi_rng *rng) {
  const dsi_vec_ops *v = g_v;
  int ld = n + 3, words = DSI_MAX(kpad * 16, (n + 1) / 2 * 32) + 64;
  float *x = dsi_xmalloc((size_t)16 * ld * sizeof(float));
  uint16_t *out = dsi_xmalloc((size_t)words * 2), *want = dsi_xmalloc((size_t)words * 2);
  for (int i = 0; i < 16 * ld; i++) x[i] = conv_value(rng, i);
  /* one row into tiles: element c at (c / 32) * 512 + c % 32 */
  memset(out, 0xee, (size_t)words * 2);
  memset(want, 0xee, (size_t)words * 2);
  v->to_bf16_tiles(x, n, kpad, out);
  for (int c = 0; c < kpad; c++) want[(c / 32) * 512 + c % 32] = c < n ? dsi_f32_to_bf16(x[c]) : 0;
  CHECKF(!memcmp(out, want, (size_t)words * 2), "%s to_bf16_tiles n %d kpad %d differs", isa, n, kpad);
  /* a panel: (i, c) at (c / 2) * 32 + 2 i + (c & 1) */
  int ne = n & ~1;
  memset(out, 0xee, (size_t)words * 2);
  memset(want, 0xee, (size_t)words * 2);
  v->bf16_panel(x, ld, nr, ne, out);
  for (int c = 0; c < ne; c++)
    for (int i = 0; i < 16; i++) want[(c / 2) * 32 + 2 * i + (c & 1)] = i < nr ? dsi_f32_to_bf16(x[i * ld + c]) : 0;
  CHECKF(!memcmp(out, want, (size_t)words * 2), "%s bf16_panel rows %d cols %d differs", isa, nr, ne);
  /* transposed: x's rows u < nu are columns, their first ni elements rows */
  int nu = DSI_MIN(n, 16), ni = DSI_MIN(nr, 16);
  memset(out, 0xee, (size_t)words * 2);
  memset(want, 0xee, (size_t)words * 2);
  v->bf16_panel_t(x, ld, nu, ni, out);
  for (int u = 0; u < nu + (nu & 1); u++)
    for (int i = 0; i < 16; i++)
      want[(u / 2) * 32 + 2 * i + (u & 1)] = u < nu && i < ni ? dsi_f32_to_bf16(x[u * ld + i]) : 0;
  CHECKF(!memcmp(out, want, (size_t)words * 2), "%s bf16_panel_t rows %d elements %d differs", isa, nu, ni);
  free(x), free(out), free(want);
}

/* dsi_attn_rows_run on this level's primitives: a token's attention over
 * a paged cache of f32 rows (blocks out of order) against double-precision
 * softmax attention, around the online softmax's block edges; the columns
 * past kvl untouched; each head alone the same bits as in its group. The
 * values are bf16's, and the same cache as bf16 pair rows, widened as
 * they are read, gives the same bits; its slots past the positions hold
 * NaN, which must not be read. */
static void run_rows(const char *isa, int nh, int n, int kvl, int rope, double spread, dsi_rng *rng) {
  enum { BS = 32, NB = 12 };
  int row = kvl + rope, ldq = row + 3, ldo = kvl + 5;
  int32_t table[NB];
  for (int b = 0; b < NB; b++) table[b] = (b * 5 + 3) % NB;
  float *cache = dsi_xmalloc((size_t)NB * BS * row * sizeof(float)), *q = dsi_xmalloc((size_t)nh * ldq * sizeof(float));
  float *o = dsi_xmalloc((size_t)nh * ldo * sizeof(float)), *o1 = dsi_xmalloc((size_t)nh * ldo * sizeof(float));
  uint16_t *pairs = dsi_xmalloc((size_t)NB * BS * row * sizeof(uint16_t));
  void *ws = dsi_alloc_aligned(DSI_ATTN_ROWS_WS(nh, row));
  for (size_t i = 0; i < (size_t)NB * BS * row; i++) pairs[i] = 0x7fc0; /* NaN */
  for (size_t i = 0; i < (size_t)NB * BS * row; i++) cache[i] = dsi_bf16_to_f32(dsi_f32_to_bf16((float)dsi_rng_normal(rng)));
  for (int u = 0; u < n; u++) {
    int32_t slot = dsi_paged_slot(table, BS, u);
    for (int j = 0; j < row; j++) pairs[dsi_paged_pair_at(row, slot) + 2 * (size_t)j] = dsi_f32_to_bf16(cache[(size_t)slot * row + j]);
  }
  for (size_t i = 0; i < (size_t)nh * ldq; i++) q[i] = (float)(dsi_rng_normal(rng) * spread);
  for (size_t i = 0; i < (size_t)nh * ldo; i++) o[i] = o1[i] = (float)i;
  dsi_attn_rows a = {.cache = cache, .table = table, .block_size = BS, .row = row, .kvl = kvl, .nh = nh, .n = n};
  float scale = 0.0723f;
  dsi_attn_rows_run(g_v, &a, q, ldq, scale, o, ldo, ws);
  double worst = 0, *sc = dsi_xmalloc((size_t)n * sizeof(double));
  for (int h = 0; h < nh; h++) {
    double mx = -1e300, sum = 0;
    for (int u = 0; u < n; u++) {
      const float *k = cache + (size_t)dsi_paged_slot(table, BS, u) * row;
      double d = 0;
      for (int j = 0; j < row; j++) d += (double)q[(size_t)h * ldq + j] * k[j];
      mx = fmax(mx, sc[u] = d * scale);
    }
    for (int u = 0; u < n; u++) sum += (sc[u] = exp(sc[u] - mx));
    for (int c = 0; c < kvl; c++) {
      double want = 0, vmax = 0;
      for (int u = 0; u < n; u++) {
        double x = cache[(size_t)dsi_paged_slot(table, BS, u) * row + c];
        want += sc[u] / sum * x, vmax = fmax(vmax, fabs(x));
      }
      worst = fmax(worst, fabs(o[(size_t)h * ldo + c] - want) / vmax);
    }
  }
  free(sc);
  CHECKF(worst < 2e-5, "%s rows: heads %d n %d width %d spread %g: error %.3g of the largest value", isa, nh, n, row,
         spread, worst);
  int gaps = 1;
  for (int h = 0; h < nh; h++)
    for (int c = kvl; c < ldo; c++) gaps &= o[(size_t)h * ldo + c] == (float)((size_t)h * ldo + c);
  CHECKF(gaps, "%s rows: heads %d n %d wrote past its %d columns", isa, nh, n, kvl);
  dsi_attn_rows one = a;
  one.nh = 1;
  for (int h = 0; h < nh; h++) dsi_attn_rows_run(g_v, &one, q + (size_t)h * ldq, ldq, scale, o1 + (size_t)h * ldo, ldo, ws);
  CHECKF(!memcmp(o, o1, (size_t)nh * ldo * sizeof(float)), "%s rows: heads %d n %d: a head alone differs from its group",
         isa, nh, n);
  dsi_attn_rows pa = a;
  pa.cache = NULL;
  pa.pairs = pairs;
  for (size_t i = 0; i < (size_t)nh * ldo; i++) o1[i] = (float)i;
  dsi_attn_rows_run(g_v, &pa, q, ldq, scale, o1, ldo, ws);
  size_t differ = 0;
  for (size_t i = 0; i < (size_t)nh * ldo; i++) differ += memcmp(&o[i], &o1[i], sizeof(float)) != 0;
  CHECKF(differ == 0, "%s pair rows: heads %d n %d width %d: %zu values differ from the f32 rows'", isa, nh, n, row, differ);
  free(cache), free(q), free(o), free(o1), free(pairs);
  dsi_free_aligned(ws);
}

/* rmsnorm: the sum of squares in vec_dot's order (dot_model), then the
 * scalar oracle's operations, so bitwise the model; and within 1e-6 of
 * the oracle's sequential sum (dsi_k_rmsnorm) */
static void run_rmsnorm(const char *isa, int n, dsi_rng *rng) {
  float *x = dsi_xmalloc((size_t)n * sizeof(float)), *w = dsi_xmalloc((size_t)n * sizeof(float));
  float *out = dsi_xmalloc((size_t)n * sizeof(float)), *ref = dsi_xmalloc((size_t)n * sizeof(float));
  for (int i = 0; i < n; i++) x[i] = 3 * dsi_rng_normal(rng), w[i] = 0.5f + dsi_rng_uniform(rng);
  const float eps = 1e-6f;
  g_v->rmsnorm(x, w, n, eps, out);
  float inv = 1.0f / sqrtf(dot_model(x, x, n) / n + eps);
  int differ = 0;
  for (int i = 0; i < n; i++) {
    float want = x[i] * inv * w[i];
    differ += memcmp(&out[i], &want, sizeof want) != 0;
  }
  CHECKF(differ == 0, "%s rmsnorm width %d: %d values differ from the documented order", isa, n, differ);
  dsi_k_rmsnorm(x, w, n, eps, ref);
  double worst = 0;
  for (int i = 0; i < n; i++) worst = fmax(worst, fabs((double)out[i] - ref[i]) / (fabs(ref[i]) + 1e-30));
  CHECKF(worst <= 1e-6, "%s rmsnorm width %d: %g from the oracle", isa, n, worst);
  free(x), free(w), free(out), free(ref);
}

int main(void) {
  dsi_rng rng;
  dsi_rng_seed(&rng, 99);
  const dsi_cpu *cpu = dsi_cpu_get();
  static const int widths[] = {576, 512, 192, 64, 33, 7, 100};
  static const int heads[] = {8, 1, 3, 16};
  static const int nus[] = {1, 2, 3, 5, 6, 64, 131}; /* AVX2 takes keys 3 at a time */
  for (int l = DSI_ISA_SCALAR; l <= (int)cpu->best; l++) {
    g_v = dsi_kern_get((dsi_isa)l)->vec;
    g_fused = l >= DSI_ISA_AVX2;
    int n = 0;
    for (size_t a = 0; a < DSI_ARRAY_LEN(widths); a++)
      for (size_t b = 0; b < DSI_ARRAY_LEN(heads); b++)
        for (size_t c = 0; c < DSI_ARRAY_LEN(nus); c++, n++) run(g_v->name, heads[b], nus[c], widths[a], &rng);
    printf("%s: %d attention cases bitwise equal to the documented order\n", g_v->name, n);
    static const int snq[] = {1, 2, 3, 4, 5, 6, 7, 32}, snu[] = {1, 7, 8, 9, 24, 25, 131}, sw[] = {192, 1, 37};
    int ns = 0;
    for (size_t a = 0; a < DSI_ARRAY_LEN(snq); a++)
      for (size_t b = 0; b < DSI_ARRAY_LEN(snu); b++)
        for (size_t c = 0; c < DSI_ARRAY_LEN(sw); c++, ns++) run_scores(g_v->name, snq[a], snu[b], sw[c], &rng);
    printf("%s: %d scores_t cases bitwise equal to the documented order\n", g_v->name, ns);
    static const int sn[] = {1, 7, 16, 33, 544, 4099};
    for (size_t a = 0; a < DSI_ARRAY_LEN(sn); a++)
      for (double spread = 0.5; spread <= 20; spread *= 4) run_softmax(g_v->name, sn[a], spread, &rng);
    for (size_t a = 0; a < DSI_ARRAY_LEN(sn); a++) {
      run_softmax_step(g_v->name, sn[a], -INFINITY, &rng); /* a first block */
      run_softmax_step(g_v->name, sn[a], 3.0f, &rng);      /* the running max may stay */
    }
    static const int cn[] = {1, 2, 15, 16, 17, 31, 32, 33, 64, 100, 192, 513};
    static const int rows[] = {16, 1, 7, 15};
    int nc = 0;
    for (size_t a = 0; a < DSI_ARRAY_LEN(cn); a++)
      for (size_t b = 0; b < DSI_ARRAY_LEN(rows); b++, nc++)
        run_conv(g_v->name, cn[a], (cn[a] + 31) / 32 * 32 + (b & 1) * 32, rows[b], &rng);
    printf("%s: %d bf16 conversion cases bitwise equal to dsi_f32_to_bf16 at their places\n", g_v->name, nc);
    static const int rn[] = {1, 2, 63, 64, 65, 128, 200, 384};
    static const int rh[] = {1, 8, 13, 64};
    int nr = 0;
    for (size_t a = 0; a < DSI_ARRAY_LEN(rn); a++)
      for (size_t b = 0; b < DSI_ARRAY_LEN(rh); b++, nr++) run_rows(g_v->name, rh[b], rn[a], 64, 32, 1, &rng);
    run_rows(g_v->name, 16, 300, 512, 64, 1, &rng);
    run_rows(g_v->name, 8, 300, 64, 32, 6, &rng); /* peaked: the running max moves between blocks */
    printf("%s: %d + 2 f32 attention cases within 2e-5 of double precision, each head the same alone, the bf16 pair rows bitwise the f32 rows\n", g_v->name, nr);
    static const int nn[] = {1, 15, 16, 17, 512, 1536, 7168};
    for (size_t a = 0; a < DSI_ARRAY_LEN(nn); a++) run_rmsnorm(g_v->name, nn[a], &rng);
  }
  return check_done();
}
