/* tools: `bench kernels` — the kernels alone, beside this machine's peaks
 * (memory bandwidth, AMX BF16 compute): every matmul kernel on
 * DeepSeek-V3's real shapes through the matmul driver the forward uses,
 * beside OpenBLAS when it is installed; the grouped experts; a decode
 * token's latent attention; and the ceilings of the kernels' designs. */
#define _GNU_SOURCE
#include "base/base.h"
#include "base/pool.h"
#include "graph/matmul.h"
#include "kernels/attn.h"
#include "kernels/cpu.h"
#include "kernels/peak.h"
#include "kernels/vec.h"
#include "tools/cli.h"
#include "tools/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if DSI_HAVE_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int);
#endif

/* ---- kernels on DeepSeek-V3's shapes ---- */
static const struct { const char *name; int rows, cols; } k_shapes[] = {
  {"q_a", 1536, 7168},   {"q_b", 24576, 1536},    {"kv_a", 576, 7168},       {"o", 7168, 16384},
  {"expert_up", 2048, 7168}, {"expert_down", 7168, 2048}, {"dense_up", 18432, 7168}, {"lm_head", 129280, 7168},
};

/* a random packed weight, made directly in the TILES layout */
static int random_packed(dsi_mat *w, dsi_dtype dt, int rows, int cols, void **mem, size_t *bytes, dsi_rng *r) {
  dsi_mat shape = {.dtype = dt, .rows = rows, .cols = cols, .block = 128, .scale_cols = DSI_CEIL_DIV(cols, 128)};
  *bytes = dsi_pack_bytes(&shape);
  if (dt == DSI_DTYPE_I8) { /* as quantized at load: values in [-127, 127], a scale per 16x128 tile */
    *mem = dsi_alloc_big(*bytes, 1);
    if (!*mem) return DSI_E_NOMEM;
    dsi_pack_describe_i8(&shape, w, *mem);
    size_t n = (size_t)DSI_CEIL_DIV(rows, DSI_TILE_N) * DSI_TILE_N * w->kpad;
    int8_t *d = *mem;
    for (size_t i = 0; i < n; i++) d[i] = (int8_t)((int)(dsi_rng_u64(r) % 255) - 127);
    float *sc = (float *)w->scale;
    for (size_t i = 0; i < (size_t)DSI_CEIL_DIV(rows, DSI_TILE_N) * w->scale_cols; i++) sc[i] = 1e-4f * (1 + dsi_rng_uniform(r));
    return DSI_OK;
  }
  if (dt == DSI_DTYPE_I4) { /* random nibbles, an f16 scale per row and 32 columns */
    shape.block = DSI_I4_GROUP;
    *bytes = dsi_pack_bytes(&shape);
    *mem = dsi_alloc_big(*bytes, 1);
    if (!*mem) return DSI_E_NOMEM;
    dsi_pack_describe(&shape, w, *mem);
    uint8_t *d = *mem;
    for (size_t i = 0; i < *bytes; i++) d[i] = (uint8_t)dsi_rng_u64(r);
    const size_t gb = dsi_i4_group_bytes(w->block), data = gb - 2 * DSI_TILE_N;
    for (size_t at = 0; at < *bytes; at += gb)
      for (int j = 0; j < DSI_TILE_N; j++) {
        uint16_t h = dsi_f32_to_f16(1e-3f * (1 + dsi_rng_uniform(r)));
        memcpy(d + at + data + 2 * j, &h, 2);
      }
    return DSI_OK;
  }
  *mem = dsi_alloc_big(*bytes, 1);
  if (!*mem) return DSI_E_NOMEM;
  float *scales = NULL;
  if (dt == DSI_DTYPE_F8_E4M3) {
    size_t ns = (size_t)DSI_CEIL_DIV(rows, 128) * shape.scale_cols;
    if (!(scales = malloc(ns * sizeof(float)))) {
      dsi_free_big(*mem, *bytes);
      *mem = NULL;
      return DSI_E_NOMEM;
    }
    for (size_t i = 0; i < ns; i++) scales[i] = 1e-3f * (1 + dsi_rng_uniform(r));
    shape.scale = scales;
  }
  dsi_pack_describe(&shape, w, *mem);
  free(scales);
  size_t n = (size_t)DSI_CEIL_DIV(rows, DSI_TILE_N) * DSI_TILE_N * w->kpad;
  if (dt == DSI_DTYPE_BF16) {
    uint16_t *d = *mem;
    for (size_t i = 0; i < n; i++) d[i] = dsi_f32_to_bf16((dsi_rng_uniform(r) - 0.5f) * 0.05f);
  } else {
    uint8_t *d = *mem;
    for (size_t i = 0; i < n; i++) d[i] = (uint8_t)(dsi_rng_u64(r) & 0xf7); /* never the NaN code */
    w->nan_free = 1; /* as the loader marks a checkpoint's weights */
  }
  return DSI_OK;
}

/* ---- grouped expert matmul vs one plain matmul of the same FLOPs ---- */
/* 256 tokens routed top-6 over 64 experts of DeepSeek-V3's dims (gate/up
 * 7168 -> 2x2048 with SiLU-mul, down 2048 -> 7168 scatter-added), run as
 * the forward runs them (one dispatch per projection over all experts), vs
 * the same two matrices of one expert applied to all 1536 (token, expert)
 * pairs as plain matmuls. Weights are random in the TILES layout. */
static void bench_grouped(FILE *out, const dsi_kern *k, const dsi_peaks *pk, int nth, int reps, int act, dsi_dtype dt) {
  enum { G_E = 64, G_T = 256, G_K = 6, G_D = 7168, G_I = 2048 };
  const int P = G_T * G_K;
  dsi_rng r;
  dsi_rng_seed(&r, 7);
  dsi_mat gu[G_E], dn[G_E];
  void *mem[2 * G_E];
  size_t bytes[2 * G_E];
  int ok = 1, made = 0;
  for (int e = 0; e < G_E && ok; e++, made++) {
    ok = !random_packed(&gu[e], dt, 2 * G_I, G_D, &mem[2 * e], &bytes[2 * e], &r);
    if (ok) ok = !random_packed(&dn[e], dt, G_D, G_I, &mem[2 * e + 1], &bytes[2 * e + 1], &r);
    else mem[2 * e + 1] = NULL, bytes[2 * e + 1] = 0;
  }
  /* routing: each token picks G_K distinct experts at random; pairs sorted by expert */
  int32_t *tok = malloc(P * sizeof(int32_t)), start[G_E + 1] = {0}, cnt[G_E] = {0}, *pick = malloc(P * sizeof(int32_t));
  float *wt = malloc(P * sizeof(float));
  ok &= tok && pick && wt;
  for (int t = 0; t < G_T && ok; t++)
    for (int k = 0; k < G_K; k++) {
      int e, dup;
      do {
        e = (int)(dsi_rng_u64(&r) % G_E);
        dup = 0;
        for (int j = 0; j < k; j++) dup |= pick[t * G_K + j] == e;
      } while (dup);
      pick[t * G_K + k] = e;
      cnt[e]++;
    }
  for (int e = 0; e < G_E; e++) start[e + 1] = start[e] + cnt[e];
  int cur[G_E];
  memcpy(cur, start, sizeof cur);
  for (int t = 0; t < G_T && ok; t++)
    for (int k = 0; k < G_K; k++) {
      int at = cur[pick[t * G_K + k]]++;
      tok[at] = t;
      wt[at] = 1.0f / G_K;
    }
  dsi_pool *pool = dsi_pool_new(nth);
  /* the forward's matmul driver: prepared rows and each thread's lists and scratch in ws */
  dsi_mm mm = dsi_mm_make(k, act, 1, nth);
  size_t ws_bytes = dsi_mm_run_bytes(nth, G_E, P, G_D, G_D);
  void *ws = dsi_alloc_aligned(ws_bytes);
  float *x = dsi_alloc_aligned((size_t)P * G_D * sizeof(float)), *h = dsi_alloc_aligned((size_t)P * G_I * sizeof(float));
  float *y = dsi_alloc_aligned((size_t)P * G_D * sizeof(float));
  dsi_gemm *gs = calloc(G_E, sizeof(dsi_gemm));
  if (!ok || !x || !h || !y || !ws || !gs || !pool) {
    fprintf(out, "grouped: not enough memory\n");
    goto done;
  }
  for (size_t i = 0; i < (size_t)P * G_D; i++) x[i] = dsi_rng_uniform(&r) - 0.5f;
  double wbytes = 0;
  for (int i = 0; i < 2 * G_E; i++) wbytes += (double)bytes[i];
  double flops = 2.0 * P * ((double)2 * G_I * G_D + (double)G_D * G_I), tg[16], tp[16];
  int n = 0;
  for (int rep = 0; rep <= reps && rep < 16; rep++) {
    double t0 = dsi_now();
    int ng = 0;
    for (int e = 0; e < G_E; e++)
      if (cnt[e])
        gs[ng++] = (dsi_gemm){.w = &gu[e], .x = x, .ldx = G_D, .x_rows = tok + start[e], .m = cnt[e],
                              .y = h + (size_t)start[e] * G_I, .ldy = G_I, .epi = DSI_EPI_SILU_PAIRS};
    dsi_mm_run(pool, &mm, gs, ng, 2 * G_I, 2 * DSI_TILE_N, ws, ws_bytes, NULL);
    memset(y, 0, (size_t)G_T * G_D * sizeof(float));
    ng = 0;
    for (int e = 0; e < G_E; e++)
      if (cnt[e])
        gs[ng++] = (dsi_gemm){.w = &dn[e], .x = h + (size_t)start[e] * G_I, .ldx = G_I, .m = cnt[e], .y = y, .ldy = G_D,
                              .epi = DSI_EPI_SCATTER_ADD, .y_rows = tok + start[e], .y_scale = wt + start[e]};
    dsi_mm_run(pool, &mm, gs, ng, G_D, DSI_TILE_N, ws, ws_bytes, NULL);
    double t1 = dsi_now();
    gs[0] = (dsi_gemm){.w = &gu[0], .x = x, .ldx = G_D, .m = P, .y = h, .ldy = G_I, .epi = DSI_EPI_SILU_PAIRS};
    dsi_mm_run(pool, &mm, gs, 1, 2 * G_I, 2 * DSI_TILE_N, ws, ws_bytes, NULL);
    gs[0] = (dsi_gemm){.w = &dn[0], .x = h, .ldx = G_I, .m = P, .y = y, .ldy = G_D, .epi = DSI_EPI_STORE};
    dsi_mm_run(pool, &mm, gs, 1, G_D, DSI_TILE_N, ws, ws_bytes, NULL);
    double t2 = dsi_now();
    if (rep > 0) tg[n] = t1 - t0, tp[n++] = t2 - t1;
  }
  {
    double g = flops / dsi_median(tg, n) * 1e-9, pl = flops / dsi_median(tp, n) * 1e-9;
    int lo = cnt[0], hi = cnt[0];
    for (int e = 1; e < G_E; e++) lo = DSI_MIN(lo, cnt[e]), hi = DSI_MAX(hi, cnt[e]);
    /* the grouped run must read every expert's weights once: at the
     * machine's read bandwidth that alone takes wbytes / read_gbs, which
     * bounds its GFLOP/s and so the grouped/plain ratio (the plain matmuls
     * reuse one expert's weights from cache and have no such bound) */
    double wgbs = wbytes / dsi_median(tg, n) * 1e-9;
    double g_max = pk->read_gbs > 0 ? flops / (wbytes / (pk->read_gbs * 1e9)) * 1e-9 : 0;
    /* the matrix peak of the level the matmuls run at, as the engine sets it (the FMA's unless
     * the driver rounds activations to bf16) */
    const char *pname;
    double mpeak = dsi_matrix_peak(pk, dsi_mm_matrix_isa(&mm), &pname);
    fprintf(out, "grouped experts (%s): %d tokens top-%d over %d experts (%d..%d tokens each) at V3 expert dims: "
                 "%.0f GFLOP/s (%.0f%% of the %s peak); plain matmuls of the same FLOPs: %.0f GFLOP/s; "
                 "grouped/plain %.0f%%\n",
            dt == DSI_DTYPE_BF16 ? "bf16" : "fp8", G_T, G_K, G_E, lo, hi, g, mpeak > 0 ? 100 * g / mpeak : 0, pname, pl,
            100 * g / pl);
    fprintf(out, "  weights: %.2f GB read at %.1f GB/s = %.0f%% of memory read %.1f GB/s; at the memory limit "
                 "grouped would reach %.0f GFLOP/s, grouped/plain %.0f%% (achieved %.0f%% of that bound)\n",
            wbytes * 1e-9, wgbs, pk->read_gbs > 0 ? 100 * wgbs / pk->read_gbs : 0, pk->read_gbs, g_max,
            pl > 0 ? 100 * g_max / pl : 0, g_max > 0 ? 100 * g / g_max : 0);
  }
done:
  for (int i = 0; i < 2 * made; i++) dsi_free_big(mem[i], bytes[i]);
  free(gs);
  free(tok);
  free(pick);
  free(wt);
  dsi_free_aligned(ws);
  dsi_free_aligned(x);
  dsi_free_aligned(h);
  dsi_free_aligned(y);
  dsi_pool_free(pool);
}

/* A decode token's absorbed attention at V3's widths (128 heads, then 16; latent
 * 512 + 64) over one sequence's paged cache, the heads dealt to the threads
 * as the forward deals them (a thread's heads in one pass over the cache,
 * kernels/attn.h): f32 rows and the bf16 pair rows through the vector
 * primitives' online softmax, and the pair rows through AMX. */
enum { A_F32, A_WIDE, A_AMX };
typedef struct {
  const dsi_kern *k;
  int ctx, path; /* A_* */
  int heads;
  const float *cache, *q;
  const uint16_t *pc;
  const int32_t *table;
  float **ws; /* per thread: scores, then row pointers; or the AMX workspace */
  float **out; /* per thread: [heads][A_KVL] */
} attn_job;

enum { A_H = 128, A_KVL = 512, A_ROW = 576, A_BS = 64 }; /* A_H: V3's heads, the most measured */

static void attn_task(void *ctx, int ith, int nth) {
  attn_job *j = ctx;
  const dsi_vec_ops *v = j->k->vec;
  float *s = j->ws[ith], *o = j->out[ith];
  if (j->path == A_AMX) {
    int hpi = dsi_attn_pair_heads(j->heads, 1, nth);
    for (int h0 = ith * hpi; h0 < j->heads; h0 += nth * hpi) {
      dsi_attn_pairs a = {.cache = j->pc, .table = j->table, .block_size = A_BS, .row = A_ROW, .kvl = A_KVL,
                          .nh = DSI_MIN(hpi, j->heads - h0), .n = j->ctx};
      dsi_attn_pairs_amx(&a, j->q + (size_t)h0 * A_ROW, A_ROW, 0.07f, o, A_KVL, s);
    }
    return;
  }
  int hpi = DSI_MIN(64, DSI_CEIL_DIV(j->heads, nth)); /* as the forward's core op deals them */
  for (int h0 = ith * hpi; h0 < j->heads; h0 += nth * hpi) {
    dsi_attn_rows a = {.cache = j->path == A_F32 ? j->cache : NULL, .pairs = j->path == A_WIDE ? j->pc : NULL,
                       .table = j->table, .block_size = A_BS, .row = A_ROW, .kvl = A_KVL,
                       .nh = DSI_MIN(hpi, j->heads - h0), .n = j->ctx};
    dsi_attn_rows_run(v, &a, j->q + (size_t)h0 * A_ROW, A_ROW, 0.07f, o, A_KVL, s);
  }
}

static void bench_attention(FILE *out, const dsi_kern *k, int nth, int reps, double fma_gflops, double amx_gflops) {
  static const int ctxs[] = {512, 4096, 16384};
  int amx = k->amx, max_ctx = ctxs[DSI_ARRAY_LEN(ctxs) - 1], nb = max_ctx / A_BS;
  dsi_rng r;
  dsi_rng_seed(&r, 3);
  float *cache = dsi_alloc_big((size_t)nb * A_BS * A_ROW * sizeof(float), 1);
  uint16_t *pc = dsi_alloc_big((size_t)nb * A_BS * A_ROW * sizeof(uint16_t), 1);
  float *q = dsi_alloc_aligned((size_t)A_H * A_ROW * sizeof(float));
  int32_t *table = malloc(nb * sizeof(int32_t));
  float **ws = calloc(nth, sizeof(float *)), **outs = calloc(nth, sizeof(float *));
  size_t ws_bytes = DSI_MAX(DSI_ATTN_ROWS_WS(A_H, A_ROW), DSI_ATTN_PAIRS_WS(A_H, A_ROW));
  int ok = cache && pc && q && table && ws && outs;
  for (int i = 0; ok && i < nth; i++) {
    ok &= (ws[i] = dsi_alloc_aligned(ws_bytes)) != NULL;
    ok &= (outs[i] = dsi_alloc_aligned((size_t)A_H * A_KVL * sizeof(float))) != NULL;
  }
  dsi_pool *pool = dsi_pool_new(nth);
  if (!ok || !pool) {
    fprintf(out, "attention: not enough memory\n");
    goto done;
  }
  for (int b = 0; b < nb; b++) table[b] = (b * 7 + 1) % nb; /* paged, out of order */
  for (size_t i = 0; i < (size_t)A_H * A_ROW; i++) q[i] = dsi_rng_normal(&r) * 0.1f;
  for (size_t sl = 0; sl < (size_t)nb * A_BS; sl++)
    for (int c = 0; c < A_ROW; c++) {
      float x = dsi_rng_normal(&r);
      cache[sl * A_ROW + c] = x;
      pc[dsi_paged_pair_at(A_ROW, (int32_t)sl) + 2 * (size_t)c] = dsi_f32_to_bf16(x);
    }
  /* V3's heads (compute-bound), and the bench preset's 16 (8 a thread on
   * 2: bound by the cache's bytes once it is out of the L3) */
  static const int head_counts[] = {A_H, 16};
  for (size_t hc = 0; hc < DSI_ARRAY_LEN(head_counts); hc++) {
  const int H = head_counts[hc];
  fprintf(out, "decode attention, one token over one sequence's paged latent cache: %d heads, latent %d + rope %d, "
               "%d threads; a thread's heads in one pass over the cache (in f32: up to 64 at a time); f32 rows, "
               "the bf16 pair rows (the cache where AMX does not run: read as they lie by a call of up to 8 heads, "
               "widened first for more), and the pair rows on AMX tiles\n",
          H, A_KVL, A_ROW - A_KVL, nth);
  fprintf(out, "%8s  %12s %8s %8s %6s  %13s %8s %6s  %14s %8s %6s  %7s\n", "context", "f32 rows(us)", "GB/s", "GFLOP/s",
          "%fma", "bf16 rows(us)", "GB/s", "%fma", "bf16 amx (us)", "GB/s", "%amx", "amx/vec");
  for (size_t c = 0; c < DSI_ARRAY_LEN(ctxs); c++) {
    double med[3] = {0, 0, 0};
    for (int path = A_F32; path <= (amx ? A_AMX : A_WIDE); path++) {
      attn_job j = {k, ctxs[c], path, H, cache, q, pc, table, ws, outs};
      double t[32];
      int n = 0;
      for (int rep = 0; rep <= reps && n < 32; rep++) {
        double t0 = dsi_now();
        dsi_pool_run(pool, attn_task, &j);
        if (rep > 0) t[n++] = dsi_now() - t0;
      }
      med[path] = dsi_median(t, n);
    }
    /* bytes of the cache each reads: one pass over the whole rows per
     * thread's heads; FLOPs: q K^T over the whole rows, P V the latent part */
    int calls = DSI_CEIL_DIV(H, DSI_MIN(64, DSI_CEIL_DIV(H, nth)));
    double f32b = (double)calls * ctxs[c] * A_ROW * 4, bfb = (double)DSI_MIN(nth, H / 8) * ctxs[c] * A_ROW * 2;
    double flops = 2.0 * H * ctxs[c] * (A_ROW + A_KVL), gf = flops / med[0] * 1e-9, gw = flops / med[1] * 1e-9;
    char am[32] = "-", ag[32] = "-", ap[32] = "-", ratio[32] = "-";
    if (amx) {
      snprintf(am, sizeof am, "%.1f", med[2] * 1e6);
      snprintf(ag, sizeof ag, "%.1f", bfb / med[2] * 1e-9);
      snprintf(ap, sizeof ap, "%.0f%%", amx_gflops > 0 ? 100 * flops / med[2] * 1e-9 / amx_gflops : 0);
      snprintf(ratio, sizeof ratio, "%.1fx", med[1] / med[2]);
    }
    fprintf(out, "%8d  %12.1f %8.1f %8.1f %5.0f%%  %13.1f %8.1f %5.0f%%  %14s %8s %6s  %7s\n", ctxs[c], med[0] * 1e6,
            f32b / med[0] * 1e-9, gf, fma_gflops > 0 ? 100 * gf / fma_gflops : 0, med[1] * 1e6,
            f32b / 2 / med[1] * 1e-9, fma_gflops > 0 ? 100 * gw / fma_gflops : 0, am, ag, ap, ratio);
    fflush(out);
  }
  }
  if (!amx) fprintf(out, "(no AMX here: the pair rows' AMX path does not run)\n");
done:
  for (int i = 0; ws && outs && i < nth; i++) dsi_free_aligned(ws[i]), dsi_free_aligned(outs[i]);
  free(ws);
  free(outs);
  dsi_free_big(cache, (size_t)nb * A_BS * A_ROW * sizeof(float));
  dsi_free_big(pc, (size_t)nb * A_BS * A_ROW * sizeof(uint16_t));
  dsi_free_aligned(q);
  free(table);
  dsi_pool_free(pool);
}

/* ---- ceilings: what bounds the kernels' designs, on one core ---- */
/* calls of a kernel on this thread, all of g's rows */
typedef struct {
  dsi_gemm_fn fn;
  const dsi_gemm *g;
  void *scratch;
  int calls;
} kernel_calls;

/* work / seconds of the calls, the median of reps timings after one that
 * warms the caches and pages */
static double median_rate(const kernel_calls *k, int reps, double work) {
  double t[64];
  int n = 0;
  for (int rep = 0; rep < DSI_MIN(reps, 63) + 1; rep++) {
    double t0 = dsi_now();
    for (int i = 0; i < k->calls; i++) k->fn(k->g, 0, k->g->w->rows, k->scratch);
    double el = dsi_now() - t0;
    if (rep > 0) t[n++] = work * k->calls / el;
  }
  return dsi_median(t, n);
}

/* one thread's matvec (M = 1) over 1 MiB of weights, which stay in L2 */
static double matvec_hot_gbs(const dsi_kern *k, dsi_dtype dt, int reps, dsi_rng *r, dsi_gemm_fn *fn) {
  const int rows = dt == DSI_DTYPE_BF16 ? 512 : 1024, cols = 1024;
  dsi_mat w;
  void *mem;
  size_t bytes;
  if (random_packed(&w, dt, rows, cols, &mem, &bytes, r)) return 0;
  int prep;
  *fn = dsi_gemm_pick(k, &w, 1, DSI_ACT_RED_BF16, &prep);
  float *x = dsi_alloc_aligned(cols * sizeof(float)), *y = dsi_alloc_aligned(rows * sizeof(float));
  void *scratch = dsi_alloc_aligned(DSI_GEMM_SCRATCH(cols));
  double med = 0;
  if (x && y && scratch) {
    for (int i = 0; i < cols; i++) x[i] = dsi_bf16_to_f32(dsi_f32_to_bf16(dsi_rng_uniform(r) - 0.5f));
    dsi_gemm g = {.w = &w, .x = x, .ldx = cols, .m = 1, .y = y, .ldy = rows, .epi = DSI_EPI_STORE};
    med = median_rate(&(kernel_calls){*fn, &g, scratch, 64}, reps, bytes * 1e-9);
  }
  dsi_free_aligned(x), dsi_free_aligned(y), dsi_free_aligned(scratch);
  dsi_free_big(mem, bytes);
  return med;
}

/* the AMX GEMM itself on this thread: expert_up (2048 x 7168, BF16) at M =
 * 512, the shape the walk's stages model */
static double gemm_one_thread_gflops(int reps, dsi_rng *r) {
  double med = 0;
#if DSI_HAVE_AMX
  const int rows = 2048, cols = 7168, m = 512;
  dsi_mat w;
  void *mem;
  size_t bytes;
  if (random_packed(&w, DSI_DTYPE_BF16, rows, cols, &mem, &bytes, r)) return 0;
  float *x = dsi_alloc_big((size_t)m * cols * sizeof(float), 1), *y = dsi_alloc_big((size_t)m * rows * sizeof(float), 1);
  uint16_t *xb = dsi_alloc_big(DSI_XB_ROWS(m) * w.kpad * sizeof(uint16_t), 1);
  void *scratch = dsi_alloc_aligned(DSI_GEMM_SCRATCH(cols));
  if (x && y && xb && scratch) {
    for (size_t i = 0; i < (size_t)m * cols; i++) x[i] = dsi_rng_uniform(r) - 0.5f;
    dsi_rows_to_bf16_tiles(&dsi_vec_ops_avx512, x, cols, NULL, m, cols, w.kpad, 0, m, xb);
    dsi_gemm g = {.w = &w, .x = x, .ldx = cols, .xb = xb, .m = m, .y = y, .ldy = rows, .epi = DSI_EPI_STORE};
    med = median_rate(&(kernel_calls){dsi_gemm_amx, &g, scratch, 1}, reps, 2.0 * m * rows * cols * 1e-9);
  }
  dsi_free_big(x, (size_t)m * cols * sizeof(float)), dsi_free_big(y, (size_t)m * rows * sizeof(float));
  dsi_free_big(xb, DSI_XB_ROWS(m) * w.kpad * sizeof(uint16_t));
  dsi_free_aligned(scratch);
  dsi_free_big(mem, bytes);
#else
  (void)reps, (void)r;
#endif
  return med;
}

static void bench_ceilings(FILE *out, const dsi_kern *k, const dsi_peaks *pk, int reps) {
  dsi_rng r;
  dsi_rng_seed(&r, 7);
  fprintf(out, "ceilings, one thread (medians of %d)\n", reps);
  if (k->amx) {
    /* a buffer past the caches, its pages touched (untouched ones all map one zero page) */
    const size_t far_bytes = (size_t)1 << 30;
    uint8_t *far = dsi_alloc_big(far_bytes, 1);
    if (far) memset(far, 1, far_bytes);
    double t[64], peak;
    for (int i = 0; i < reps; i++) t[i] = dsi_amx_peak_gflops(0.2);
    peak = dsi_median(t, reps);
    fprintf(out, "  %-62s %8.0f GFLOP/s\n", "AMX BF16 tile peak (tdpbf16ps on resident tiles)", peak);
    static const char *stage[] = {"the GEMM's 2x2 tile loop, A and B in L1", "  A streamed from L2 (512 rows), B in L1",
                                   "  and C through L2 every 8 K steps (its walk, all in L2)",
                                   "  and its operands moving (A from L3, B from DRAM), M = 512"};
    for (int st = 0; st < 4; st++) {
      if (st == 3 && !far) break;
      for (int i = 0; i < reps; i++) t[i] = dsi_amx_walk_gflops(st, far, far_bytes, 0.2);
      double g = dsi_median(t, reps);
      fprintf(out, "  %-62s %8.0f GFLOP/s  %5.1f%% of the peak\n", stage[st], g, 100 * g / peak);
    }
    dsi_free_big(far, far_bytes);
    double g = gemm_one_thread_gflops(reps, &r);
    fprintf(out, "  %-62s %8.0f GFLOP/s  %5.1f%% of the peak\n", "the GEMM itself: expert_up 2048x7168 bf16, M = 512", g,
            100 * g / peak);
  } else {
    fprintf(out, "  (AMX not in use here: no tile loop to measure)\n");
  }
  dsi_gemm_fn fb, f8;
  double bf = matvec_hot_gbs(k, DSI_DTYPE_BF16, reps, &r, &fb), f8g = matvec_hot_gbs(k, DSI_DTYPE_F8_E4M3, reps, &r, &f8);
  double share = pk->read_gbs / pk->threads;
  fprintf(out, "  matvec M=1 on 1 MiB of weights in L2: bf16 %.1f GB/s (%s), fp8 %.1f GB/s (%s)\n", bf,
          dsi_gemm_kernel_name(fb), f8g, dsi_gemm_kernel_name(f8));
  fprintf(out, "  one thread's share of the read bandwidth: %.1f GB/s (%.1f / %d threads); the matvec's compute\n"
               "  over that share: bf16 %.2fx, fp8 %.2fx (the headroom it has to catch up after a stall on memory)\n",
          share, pk->read_gbs, pk->threads, bf / share, f8g / share);
}

/* --shape and --dtypes name what exists, before anything is measured */
static int check_names(const dsi_bench_kernels_opts *o, dsi_err *err) {
  int found = !o->shape;
  for (size_t s = 0; s < DSI_ARRAY_LEN(k_shapes) && !found; s++) found = !strcmp(o->shape, k_shapes[s].name);
  if (!found)
    return dsi_errf(err, DSI_E_INVAL, "--shape '%s' is not one of q_a q_b kv_a o expert_up expert_down dense_up lm_head",
                    o->shape);
  const char *p = o->dtypes ? o->dtypes : "bf16";
  for (;;) {
    size_t n = strcspn(p, ",");
    if (!((n == 4 && !strncmp(p, "bf16", 4)) || (n == 3 && !strncmp(p, "fp8", 3)) || (n == 4 && !strncmp(p, "int8", 4)) ||
          (n == 4 && !strncmp(p, "int4", 4))))
      return dsi_errf(err, DSI_E_INVAL, "--dtypes: '%.*s' is not one of bf16, fp8, int8, int4", (int)n, p);
    if (!p[n]) break;
    p += n + 1;
  }
  return DSI_OK;
}

/* the peak a kernel's rate is judged by, and its name */
static double kernel_peak(dsi_gemm_fn fn, const dsi_peaks *pk, int int8, const char **name) {
  const char *k = dsi_gemm_kernel_name(fn);
  *name = "-";
  if (!strcmp(k, "amx") || !strcmp(k, "amx-int8")) return *name = "amx", pk->amx_bf16_gflops * (int8 ? 2 : 1);
  if (!strcmp(k, "amx-int4")) return *name = "amx int8", pk->amx_bf16_gflops * 2; /* INT8 tiles: twice BF16's rate */
  if (!strcmp(k, "avx512-bf16")) return *name = "vdpbf16ps", pk->dpbf16_gflops;
  if (!strcmp(k, "avx512-vnni-int4") || !strcmp(k, "avx512-vnni-int8")) return *name = "vpdpbusd", pk->vnni_gops;
  if (!strcmp(k, "avx2-int4")) return *name = "vpmaddubsw", pk->maddubs_gops;
  if (!strcmp(k, "avx2-int8")) return *name = "vpmaddwd", pk->maddwd_gops;
  if (!strcmp(k, "avx512") || !strcmp(k, "avx2")) return *name = "fma", pk->fma_gflops;
  return 0;
}

/* the CPU's model name (/proc/cpuinfo), or "" */
static void cpu_model(char *buf, size_t len) {
  buf[0] = 0;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
      const char *v = strchr(line, ':') + 1;
      v += strspn(v, " \t");
      snprintf(buf, len, "%.*s", (int)strcspn(v, "\n"), v);
      break;
    }
  fclose(f);
}

int dsi_bench_kernels(const dsi_bench_kernels_opts *o, FILE *out, dsi_err *err) {
  int rc = check_names(o, err);
  if (rc) return rc;
  int nth = o->n_threads > 0 ? o->n_threads : dsi_ncpu();
  int cap = o->isa ? dsi_isa_parse(o->isa) : DSI_ISA_AMX;
  if (cap < 0) return dsi_errf(err, DSI_E_INVAL, "isa '%s' is not one of " DSI_ISA_NAMES, o->isa);
  const dsi_kern *k = dsi_kern_get_dot((dsi_isa)cap, o->bf16_dot);
  int reps = o->reps > 0 ? o->reps : 5;
  static const int default_ms[] = {1, 4, 16, 64, 256, 1024};
  const int *ms = o->n_ms ? o->ms : default_ms;
  int n_ms = o->n_ms ? o->n_ms : 6, max_m = 0;
  for (int i = 0; i < n_ms; i++) max_m = DSI_MAX(max_m, ms[i]);
  dsi_peaks pk;
  rc = dsi_measure_peaks(nth, &pk);
  if (rc) return dsi_errf(err, rc, "cannot allocate the bandwidth test's buffers");
  char model[128];
  cpu_model(model, sizeof model);
  fprintf(out, "machine: %s, %d threads, isa %s; precision %s; memory read %.1f GB/s, triad %.1f GB/s; AMX BF16 peak %.0f GFLOP/s (%d cores)\n",
          model[0] ? model : "CPU model unknown", pk.threads, dsi_isa_str(k->level), dsi_cli_precision_name(o->precision), pk.read_gbs, pk.triad_gbs,
          pk.amx_bf16_gflops, pk.threads);
  fprintf(out, "vector peaks (12 chains a core, all threads): f32 FMA %.0f GFLOP/s, vdpbf16ps %.0f GFLOP/s, "
               "vpdpbusd %.0f GOP/s, ymm vpmaddwd %.0f GOP/s, ymm vpmaddubsw %.0f GOP/s (0: not on this CPU)\n",
          pk.fma_gflops, pk.dpbf16_gflops, pk.vnni_gops, pk.maddwd_gops, pk.maddubs_gops);
  if (dsi_amx_int4_choice()[0]) fprintf(out, "%s\n", dsi_amx_int4_choice());
#if DSI_HAVE_OPENBLAS
  fprintf(out, "baseline: OpenBLAS cblas_sgemm (f32 weights; this OpenBLAS has no cblas_sbgemm)\n");
  openblas_set_num_threads(nth);
#else
  fprintf(out, "baseline: OpenBLAS not built in (install libopenblas-dev and rebuild)\n");
#endif
  if (strstr(o->dtypes ? o->dtypes : "", "int"))
    fprintf(out, "int8, int4: GFLOP/s counts int8 multiply-adds as 2 ops; AMX INT8's peak is twice the BF16 one (tdpbssd's rate)\n");
  if (o->attention) {
    bench_attention(out, k, nth, reps, pk.fma_gflops, pk.amx_bf16_gflops);
    return DSI_OK;
  }
  if (o->ceilings) {
    bench_ceilings(out, k, &pk, DSI_MIN(reps, 64));
    return DSI_OK;
  }
  if (o->grouped) {
    if (strstr(o->dtypes ? o->dtypes : "bf16", "bf16")) bench_grouped(out, k, &pk, nth, reps, o->precision, DSI_DTYPE_BF16);
    if (strstr(o->dtypes ? o->dtypes : "fp8", "fp8")) bench_grouped(out, k, &pk, nth, reps, o->precision, DSI_DTYPE_F8_E4M3);
    return DSI_OK;
  }
  fprintf(out, "%-12s %6s %6s %-5s %5s %9s %8s %6s %9s %6s %10s %7s\n", "shape", "rows", "cols", "dtype", "M", "ms",
          "GB/s", "%bw", "GFLOP/s", "%peak", "blas GF/s", "x blas");
  dsi_pool *pool = dsi_pool_new(nth);
  size_t kmax = 16384 + 64;
  dsi_mm mm = dsi_mm_make(k, o->precision, 1, nth);
  size_t ws_bytes = dsi_mm_run_bytes(nth, 1, max_m, (int)kmax, (int)kmax);
  void *ws = dsi_alloc_aligned(ws_bytes);
  dsi_gemm_fn picked = NULL;
  float *x = dsi_alloc_aligned((size_t)max_m * kmax * sizeof(float));
  int ok = 1;
  if (!ws || !x || !pool) {
    ok = 0;
    goto done;
  }
  dsi_rng r;
  dsi_rng_seed(&r, 1);
  for (size_t i = 0; i < (size_t)max_m * kmax; i++) x[i] = dsi_rng_uniform(&r) - 0.5f;
  const char *dts = o->dtypes ? o->dtypes : "bf16,fp8";
  for (size_t s = 0; s < DSI_ARRAY_LEN(k_shapes); s++) {
    if (o->shape && strcmp(o->shape, k_shapes[s].name)) continue;
    int rows = k_shapes[s].rows, cols = k_shapes[s].cols;
    float *y = dsi_alloc_big((size_t)max_m * rows * sizeof(float), 1);
    float *wf = NULL;
#if DSI_HAVE_OPENBLAS
    wf = dsi_alloc_big((size_t)rows * cols * sizeof(float), 1);
    if (wf)
      for (size_t i = 0; i < (size_t)rows * cols; i++) wf[i] = dsi_rng_uniform(&r) - 0.5f;
#endif
    static const struct { const char *name; dsi_dtype dt; } k_dts[] = {
      {"bf16", DSI_DTYPE_BF16}, {"fp8", DSI_DTYPE_F8_E4M3}, {"int8", DSI_DTYPE_I8}, {"int4", DSI_DTYPE_I4}};
    for (int d = 0; d < (int)DSI_ARRAY_LEN(k_dts); d++) {
      dsi_dtype dt = k_dts[d].dt;
      if (!strstr(dts, k_dts[d].name)) continue;
      dsi_mat w;
      void *mem;
      size_t bytes;
      if (!y || random_packed(&w, dt, rows, cols, &mem, &bytes, &r)) {
        fprintf(out, "%-12s: not enough memory\n", k_shapes[s].name);
        continue;
      }
      /* INT4 where AMX INT8 runs: the AMX kernel and the VNNI one side by
       * side, whichever the race at start picked (dsi_gemm_i4_race) */
      dsi_kern k_alt = *k;
      k_alt.amx_int4 = !k->amx_int4;
      dsi_mm mm_alt = mm;
      mm_alt.k = &k_alt;
      const int n_var = 1 + (dt == DSI_DTYPE_I4 && k->amx_int8);
      for (int mv = 0; mv < n_ms * n_var; mv++) {
        const int m = ms[mv / n_var];
        dsi_mm *mmv = mv % n_var ? &mm_alt : &mm;
        double t[64];
        int n = 0;
        double spent = 0;
        dsi_gemm g;
        for (int rep = 0; rep < reps + 1 && n < 64; rep++) {
          g = (dsi_gemm){.w = &w, .x = x, .ldx = cols, .m = m, .y = y, .ldy = rows, .epi = DSI_EPI_STORE};
          double t0 = dsi_now();
          dsi_mm_run(pool, mmv, &g, 1, rows, DSI_TILE_N, ws, ws_bytes, &picked);
          double el = dsi_now() - t0;
          spent += el;
          if (rep > 0) t[n++] = el; /* the first run warms caches and pages */
          if (spent > 20 && n >= 1) break;
        }
        double med = dsi_median(t, n), gbs = bytes / med * 1e-9, gf = 2.0 * m * rows * cols / med * 1e-9;
        const char *peak_name;
        double peak = kernel_peak(picked, &pk, dt == DSI_DTYPE_I8, &peak_name);
        double blas = 0;
#if DSI_HAVE_OPENBLAS
        if (wf && d == 0) {
          double tb[16];
          int nb = 0;
          for (int rep = 0; rep < DSI_MIN(reps, 3) + 1; rep++) {
            double t0 = dsi_now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, rows, cols, 1.0f, x, cols, wf, cols, 0.0f, y, rows);
            double el = dsi_now() - t0;
            if (rep > 0) tb[nb++] = el;
            if (el > 10) break;
          }
          if (nb) blas = 2.0 * m * rows * cols / dsi_median(tb, nb) * 1e-9;
        }
#endif
        char bl[32] = "-", ratio[32] = "-";
        if (blas > 0) {
          snprintf(bl, sizeof bl, "%.1f", blas);
          snprintf(ratio, sizeof ratio, "%.1fx", gf / blas);
        }
        fprintf(out, "%-12s %6d %6d %-5s %5d %9.3f %8.1f %5.0f%% %9.1f %5.1f%% %10s %7s  (%s; peak %s)\n",
                k_shapes[s].name, rows, cols, k_dts[d].name, m, med * 1e3, gbs, 100 * gbs / pk.read_gbs, gf,
                peak > 0 ? 100 * gf / peak : 0, bl, ratio, dsi_gemm_kernel_name(picked), peak_name);
        fflush(out);
      }
      dsi_free_big(mem, bytes);
    }
    dsi_free_big(y, (size_t)max_m * rows * sizeof(float));
    dsi_free_big(wf, (size_t)rows * cols * sizeof(float));
  }
done:
  dsi_free_aligned(ws);
  dsi_free_aligned(x);
  dsi_pool_free(pool);
  return ok ? DSI_OK : dsi_errf(err, DSI_E_NOMEM, "bench kernels: not enough memory");
}
