/* kernels: the vector primitives for the baseline ISA, and the choice of
 * the best compiled variant for this CPU. */
#include "kernels/vec.h"
#include "kernels/cpu.h"

#define VEC_SUFFIX generic
#define VEC_NAME "generic"
#include "kernels/vec_impl.h"

#if defined(__x86_64__)
extern const dsi_vec_ops dsi_vec_ops_avx2, dsi_vec_ops_avx512;
#endif

const dsi_vec_ops *dsi_vec(void) {
#if defined(__x86_64__)
  dsi_isa l = dsi_cpu_get()->level;
  if (l >= DSI_ISA_AVX512) return &dsi_vec_ops_avx512;
  if (l >= DSI_ISA_AVX2) return &dsi_vec_ops_avx2;
#endif
  return &dsi_vec_ops_generic;
}
