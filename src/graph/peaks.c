/* graph: this machine's peaks, measured on the spot with the kernels'
 * own loops — memory read bandwidth (the decode roof), a STREAM triad,
 * and the compute rates summed over the threads: AMX BF16 tiles, f32 FMA,
 * vdpbf16ps, vpdpbusd, vpmaddwd and vpmaddubsw (the prefill roofs) — which the profile and the
 * benchmarks set their rates beside. */
#define _GNU_SOURCE
#include "base/base.h"
#include "base/pool.h"
#include "dsinfer.h"
#include "kernels/cpu.h"
#include "kernels/peak.h"
#include "kernels/vec.h"

#include <string.h>

#ifndef DSI_INSTRUMENTED
#define DSI_INSTRUMENTED 0
#endif

typedef struct {
  uint64_t *a;
  float *x, *y, *z;
  size_t n;
  uint64_t sink[64];
} bw_job;

/* read with the widest loads this CPU has (the kernels' own dot product,
 * one stream): a scalar loop understates what the matvec kernels can get */
static void read_task(void *ctx, int ith, int nth) {
  bw_job *j = ctx;
  long a, e;
  const float *x = (const float *)j->a;
  dsi_split((long)j->n * 2, ith, nth, &a, &e);
  const dsi_vec_ops *v = dsi_kern_best()->vec;
  float s = 0;
  for (long i = a; i < e; i += 1 << 20) s += v->dot(x + i, x + i, (int)DSI_MIN(1l << 20, e - i));
  j->sink[ith % 64] = (uint64_t)s;
}

static void triad_task(void *ctx, int ith, int nth) {
  bw_job *j = ctx;
  long a, e;
  dsi_split((long)j->n, ith, nth, &a, &e);
  for (long i = a; i < e; i++) j->x[i] = j->y[i] + 3.0f * j->z[i];
}

/* one core's compute rates, each thread its own core's: the best of five
 * short trials, as a peak is what the core reaches when nothing else takes
 * it (on a shared VM a single long trial swung 2x between runs) */
static void compute_task(void *ctx, int ith, int nth) {
  dsi_peaks *out = (dsi_peaks *)ctx + ith;
  (void)nth;
  for (int t = 0; t < 5; t++) {
    if (dsi_cpu_get()->amx_bf16) out->amx_bf16_gflops = DSI_MAX(out->amx_bf16_gflops, dsi_amx_peak_gflops(0.06));
    out->fma_gflops = DSI_MAX(out->fma_gflops, dsi_vec_peak(DSI_PEAK_FMA, 0.04));
    out->dpbf16_gflops = DSI_MAX(out->dpbf16_gflops, dsi_vec_peak(DSI_PEAK_DPBF16, 0.04));
    out->vnni_gops = DSI_MAX(out->vnni_gops, dsi_vec_peak(DSI_PEAK_VNNI, 0.04));
    out->maddwd_gops = DSI_MAX(out->maddwd_gops, dsi_vec_peak(DSI_PEAK_MADDWD, 0.04));
    out->maddubs_gops = DSI_MAX(out->maddubs_gops, dsi_vec_peak(DSI_PEAK_MADDUBS, 0.04));
  }
}

double dsi_matrix_peak(const dsi_peaks *pk, const char *isa, const char **name) {
  if (!strcmp(isa, "amx") && pk->amx_bf16_gflops > 0) return *name = "AMX BF16", pk->amx_bf16_gflops;
  if ((!strcmp(isa, "amx") || !strcmp(isa, "avx512bf16")) && pk->dpbf16_gflops > 0)
    return *name = "vdpbf16ps", pk->dpbf16_gflops;
  return *name = "f32 FMA", pk->fma_gflops;
}

int dsi_measure_peaks(int n_threads, dsi_peaks *out) {
  memset(out, 0, sizeof *out);
  dsi_pool *pool = dsi_pool_new(n_threads > 0 ? n_threads : dsi_ncpu());
  if (!pool) return DSI_E_NOMEM;
  int nth = dsi_pool_size(pool);
  out->threads = nth;
  /* 1 GiB, far past the caches that are ours (the L3 is shared and large:
   * anything smaller than it can be served from it); 64 MiB in a
   * sanitizer's build, whose rates mean nothing (there the 1 GiB took ~10
   * s a command, most of an e2e test's time) */
  size_t bytes = (size_t)1 << (DSI_INSTRUMENTED ? 26 : 30);
  bw_job j = {0};
  j.a = dsi_alloc_big(bytes, 1);
  if (!j.a) { dsi_pool_free(pool); return DSI_E_NOMEM; }
  j.n = bytes / sizeof(uint64_t);
  float *xf = (float *)j.a; /* normal numbers: denormal operands slow the FMAs down */
  for (size_t i = 0; i < bytes / sizeof(float); i++) xf[i] = 1.0f;
  double t[7];
  for (int r = 0; r < 7; r++) {
    double t0 = dsi_now();
    dsi_pool_run(pool, read_task, &j);
    t[r] = bytes / (dsi_now() - t0) * 1e-9;
  }
  out->read_gbs = dsi_median(t, 7);
  dsi_free_big(j.a, bytes);
  size_t n = ((DSI_INSTRUMENTED ? 16u : 256u) << 20) / sizeof(float);
  j.x = dsi_alloc_big(n * 4, 1);
  j.y = dsi_alloc_big(n * 4, 1);
  j.z = dsi_alloc_big(n * 4, 1);
  j.n = n;
  if (j.x && j.y && j.z) {
    for (size_t i = 0; i < n; i++) j.x[i] = 0, j.y[i] = 1, j.z[i] = 2;
    for (int r = 0; r < 7; r++) {
      double t0 = dsi_now();
      dsi_pool_run(pool, triad_task, &j);
      t[r] = 3.0 * n * sizeof(float) / (dsi_now() - t0) * 1e-9;
    }
    out->triad_gbs = dsi_median(t, 7);
  }
  dsi_free_big(j.x, n * 4);
  dsi_free_big(j.y, n * 4);
  dsi_free_big(j.z, n * 4);
  dsi_peaks per[256];
  memset(per, 0, sizeof per);
  if (nth <= 256) {
    dsi_pool_run(pool, compute_task, per);
    for (int i = 0; i < nth; i++) {
      out->amx_bf16_gflops += per[i].amx_bf16_gflops;
      out->fma_gflops += per[i].fma_gflops;
      out->dpbf16_gflops += per[i].dpbf16_gflops;
      out->vnni_gops += per[i].vnni_gops;
      out->maddwd_gops += per[i].maddwd_gops;
      out->maddubs_gops += per[i].maddubs_gops;
    }
  }
  dsi_pool_free(pool);
  return DSI_OK;
}

