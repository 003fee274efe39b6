/* kernels: choose, per call, the matmul kernel for a weight and a batch
 * size from a kernel table (cpu.h) and which ISA files were built. */
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/peak.h"


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
