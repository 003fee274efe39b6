/* kernels: choose, per call, the matmul kernel for a weight and a batch
 * size from what this CPU runs (cpu.h) and which ISA files were built. */
#include "kernels/cpu.h"
#include "kernels/gemm.h"


dsi_gemm_fn dsi_gemm_pick(const dsi_mat *w, int m, int act_bf16, int *prep) {
  const dsi_cpu *cpu = dsi_cpu_get();
  *prep = DSI_PREP_NONE;
  if (w->layout != DSI_LAYOUT_TILES) return dsi_gemm_ref;
  int kernel_dtype = w->dtype == DSI_DTYPE_F32 || w->dtype == DSI_DTYPE_BF16 || w->dtype == DSI_DTYPE_F8_E4M3;
  (void)kernel_dtype;
  (void)m;
  (void)cpu;
  (void)act_bf16;
#if DSI_HAVE_AMX
  /* int8 activations are a reduced-precision mode like bf16: only with it */
  if (act_bf16 && cpu->level >= DSI_ISA_AMX && cpu->amx_int8 && m >= DSI_AMX_MIN_ROWS && w->dtype == DSI_DTYPE_I8) {
    *prep = DSI_PREP_I8;
    return dsi_gemm_amx_int8;
  }
  if (act_bf16 && cpu->level >= DSI_ISA_AMX && m >= DSI_AMX_MIN_ROWS &&
      (w->dtype == DSI_DTYPE_BF16 || w->dtype == DSI_DTYPE_F8_E4M3)) {
    *prep = DSI_PREP_BF16;
    return dsi_gemm_amx;
  }
#endif
#if DSI_HAVE_AVX512
  if (cpu->level >= DSI_ISA_AVX512 && (kernel_dtype || w->dtype == DSI_DTYPE_I8)) return dsi_gemm_avx512;
#endif
#if DSI_HAVE_AVX2
  if (cpu->level >= DSI_ISA_AVX2 && (kernel_dtype || w->dtype == DSI_DTYPE_I8)) return dsi_gemm_avx2;
#endif
  return dsi_gemm_ref;
}

int dsi_gemm_amx_rows(int m, int act_bf16) {
#if DSI_HAVE_AMX
  return act_bf16 && dsi_cpu_get()->level >= DSI_ISA_AMX && m >= DSI_AMX_MIN_ROWS;
#else
  (void)m;
  (void)act_bf16;
  return 0;
#endif
}

const char *dsi_gemm_kernel_name(dsi_gemm_fn fn) {
#if DSI_HAVE_AMX
  if (fn == dsi_gemm_amx) return "amx";
  if (fn == dsi_gemm_amx_int8) return "amx-int8";
#endif
#if DSI_HAVE_AVX512
  if (fn == dsi_gemm_avx512) return "avx512";
#endif
#if DSI_HAVE_AVX2
  if (fn == dsi_gemm_avx2) return "avx2";
#endif
  return fn == dsi_gemm_ref ? "ref" : "?";
}
