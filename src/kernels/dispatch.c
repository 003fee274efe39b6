/* kernels: choose, per call, the matmul kernel for a weight and a batch
 * size from a kernel table (cpu.h) and which ISA files were built. */
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/peak.h"
#include "base/base.h"
#include "tensor/dtype.h"

#include <string.h>


dsi_gemm_fn dsi_gemm_pick(const dsi_kern *k, const dsi_mat *w, int m, int act, int *prep) {
  *prep = DSI_PREP_NONE;
  const int act_bf16 = (act & DSI_ACT_RED_BF16) != 0, act_i8 = (act & DSI_ACT_RED_I8) != 0;
  if (w->layout != DSI_LAYOUT_TILES) return dsi_gemm_ref;
  if (w->dtype == DSI_DTYPE_I4) {
    /* int8 activations in every precision mode */
    *prep = DSI_PREP_I8;
#if DSI_HAVE_AMX
    if (k->amx_int4) return dsi_gemm_amx_int4;
#endif
#if DSI_HAVE_AVX512
    if (k->vnni) return dsi_gemm_avx512_vnni_i4;
    if (k->level >= DSI_ISA_AVX512) return dsi_gemm_avx512_i4;
#endif
#if DSI_HAVE_AVX2
    if (k->level >= DSI_ISA_AVX2) return dsi_gemm_avx2_i4;
#endif
    return dsi_gemm_ref;
  }
  int kernel_dtype = w->dtype == DSI_DTYPE_F32 || w->dtype == DSI_DTYPE_BF16 || w->dtype == DSI_DTYPE_F8_E4M3;
  (void)kernel_dtype;
  (void)m;
  (void)k;
  (void)act_bf16;
  (void)act_i8;
#if DSI_HAVE_AMX
  /* int8 activations are a reduced-precision mode like bf16: only with it */
  if (act_i8 && k->amx_int8 && m >= DSI_AMX_MIN_ROWS && w->dtype == DSI_DTYPE_I8) {
    *prep = DSI_PREP_I8;
    return dsi_gemm_amx_int8;
  }
  if (act_bf16 && k->amx && m >= DSI_AMX_MIN_ROWS &&
      (w->dtype == DSI_DTYPE_BF16 || w->dtype == DSI_DTYPE_F8_E4M3)) {
    *prep = DSI_PREP_BF16;
    return dsi_gemm_amx;
  }
#endif
#if DSI_HAVE_AVX512
  /* below AMX INT8's batch sizes, or without it: vpdpbusd on int8
   * activations, under the same rule */
  if (act_i8 && k->vnni && w->dtype == DSI_DTYPE_I8) {
    *prep = DSI_PREP_I8;
    return dsi_gemm_avx512_vnni_i8;
  }
  if (act_bf16 && k->dot_bf16 && (w->dtype == DSI_DTYPE_BF16 || w->dtype == DSI_DTYPE_F8_E4M3)) {
    *prep = DSI_PREP_DP;
    return dsi_gemm_avx512_bf16;
  }
  if (k->level >= DSI_ISA_AVX512 && (kernel_dtype || w->dtype == DSI_DTYPE_I8)) {
    *prep = DSI_PREP_PAIRS;
    return dsi_gemm_avx512;
  }
#endif
#if DSI_HAVE_AVX2
  /* vpmaddwd on int16 or int8 activations: 1.6-2.3x the f32 widening
   * kernel at every batch size on a Zen 3 (bench kernels), int16 as fast
   * as int8; not measured beside the AVX-512 widening one, which keeps
   * that level */
  if ((act & DSI_ACT_RED_I16) && k->level == DSI_ISA_AVX2 && w->dtype == DSI_DTYPE_I8) {
    *prep = DSI_PREP_I16;
    return dsi_gemm_avx2_i8;
  }
  if (act_i8 && k->level == DSI_ISA_AVX2 && w->dtype == DSI_DTYPE_I8) {
    *prep = DSI_PREP_I8;
    return dsi_gemm_avx2_i8;
  }
  if (k->level >= DSI_ISA_AVX2 && (kernel_dtype || w->dtype == DSI_DTYPE_I8)) return dsi_gemm_avx2;
#endif
  return dsi_gemm_ref;
}

int dsi_gemm_amx_rows(const dsi_kern *k, int m, int act) {
  return (act & DSI_ACT_RED_BF16) && k->amx && m >= DSI_AMX_MIN_ROWS;
}

const char *dsi_gemm_kernel_name(dsi_gemm_fn fn) {
#if DSI_HAVE_AMX
  if (fn == dsi_gemm_amx) return "amx";
  if (fn == dsi_gemm_amx_int8) return "amx-int8";
  if (fn == dsi_gemm_amx_int4) return "amx-int4";
#endif
#if DSI_HAVE_AVX512
  if (fn == dsi_gemm_avx512) return "avx512";
  if (fn == dsi_gemm_avx512_bf16) return "avx512-bf16";
  if (fn == dsi_gemm_avx512_vnni_i8) return "avx512-vnni-int8";
  if (fn == dsi_gemm_avx512_vnni_i4) return "avx512-vnni-int4";
  if (fn == dsi_gemm_avx512_i4) return "avx512-int4";
#endif
#if DSI_HAVE_AVX2
  if (fn == dsi_gemm_avx2) return "avx2";
  if (fn == dsi_gemm_avx2_i4) return "avx2-int4";
  if (fn == dsi_gemm_avx2_i8) return "avx2-int8";
#endif
  return fn == dsi_gemm_ref ? "ref" : "?";
}

int dsi_gemm_i4_race(const struct dsi_vec_ops *v, dsi_gemm_fn base, dsi_gemm_fn cand, double *speedup) {
  enum { ROWS = 512, COLS = 2048, M = 64, GROUP = 32, REPS = 7 };
  *speedup = 0;
  const dsi_mat shape = {.dtype = DSI_DTYPE_F32, .rows = ROWS, .cols = COLS, .layout = DSI_LAYOUT_ROWS};
  dsi_mat q = shape, w;
  q.dtype = DSI_DTYPE_I4;
  q.block = GROUP;
  /* one allocation: the weight, x, its int8 rows, scales and sums, two
   * outputs, the kernels' scratch */
  const int ldq = DSI_XQ_LD(DSI_CEIL_DIV(COLS, GROUP) * GROUP);
  const size_t wb = (dsi_pack_bytes(&q) + 63) / 64 * 64, xb = (size_t)M * COLS * sizeof(float), qb = (size_t)M * ldq,
               sb = (size_t)M * (ldq / 32) * sizeof(int32_t), yb = (size_t)M * ROWS * sizeof(float);
  uint8_t *mem = dsi_alloc_aligned(wb + xb + qb + sb + M * sizeof(float) + 2 * yb + DSI_GEMM_SCRATCH(COLS));
  if (!mem) return 0;
  float *x = (float *)(mem + wb), *y[2] = {(float *)(mem + wb + xb + qb + sb), (float *)(mem + wb + xb + qb + sb + yb)};
  int8_t *xq = (int8_t *)(mem + wb + xb);
  int32_t *sums = (int32_t *)(mem + wb + xb + qb);
  float *xs = (float *)(mem + wb + xb + qb + sb + 2 * yb);
  void *scr = mem + wb + xb + qb + sb + 2 * yb + M * sizeof(float);
  dsi_pack_describe_i4(&shape, &w, mem, GROUP);
  DSI_ASSERT(DSI_XQ_LD(w.kpad) == ldq);
  dsi_rng rng;
  dsi_rng_seed(&rng, 19);
  for (size_t i = 0; i < wb; i++) mem[i] = (uint8_t)dsi_rng_u64(&rng); /* the levels */
  for (int p = 0; p < ROWS / DSI_TILE_N; p++) /* each group's 16 f16 scales, after its levels */
    for (int c = 0; c < w.kpad / GROUP; c++) {
      uint8_t *sc = mem + (size_t)p * dsi_i4_panel_bytes(&w) + (size_t)c * dsi_i4_group_bytes(GROUP) + GROUP * DSI_TILE_N / 2;
      for (int j = 0; j < DSI_TILE_N; j++) {
        const uint16_t h = dsi_f32_to_f16(0.001f + 0.01f * dsi_rng_uniform(&rng));
        memcpy(sc + 2 * j, &h, 2);
      }
    }
  for (size_t i = 0; i < (size_t)M * COLS; i++) x[i] = dsi_rng_normal(&rng);
  dsi_rows_to_i8(v, x, COLS, NULL, M, COLS, ldq, xq, xs, sums);
  const dsi_gemm_fn fn[2] = {base, cand};
  double best[2] = {1e30, 1e30};
  for (int r = -1; r < REPS; r++) /* r = -1: untimed */
    for (int k = 0; k < 2; k++) {
      const int f = (r & 1) ? 1 - k : k;
      dsi_gemm g = {.w = &w, .x = x, .ldx = COLS, .xq = xq, .xq_scale = xs, .xq_sum = sums, .m = M, .y = y[f], .ldy = ROWS,
                    .epi = DSI_EPI_STORE};
      const double t0 = dsi_now();
      fn[f](&g, 0, ROWS, scr);
      const double dt = dsi_now() - t0;
      if (r >= 0 && dt < best[f]) best[f] = dt;
    }
  const int same = !memcmp(y[0], y[1], yb);
  dsi_free_aligned(mem);
  *speedup = best[0] / best[1];
  return !same ? -1 : *speedup >= DSI_RACE_MARGIN;
}

#if !DSI_HAVE_AVX512 /* no x86/avx512_peak.c */
double dsi_vec_peak(dsi_vec_peak_kind kind, double seconds) { (void)kind, (void)seconds; return 0; }
#endif
#if !defined(__x86_64__) /* no x86/amx_peak.c */
double dsi_amx_peak_gflops(double seconds) { (void)seconds; return 0; }
double dsi_amx_walk_gflops(int stage, const uint8_t *far, size_t far_bytes, double seconds) {
  (void)stage, (void)far, (void)far_bytes, (void)seconds;
  return 0;
}
#endif
