/* tests: the AMX INT8 matmul (src/kernels/x86/amx_int8.c) built with its
 * tile instructions emulated in C (amx_tiles.h), as
 * dsi_gemm_amx_int8_emu, so test_gemm_int8 checks it against the oracle
 * on any CPU with AVX-512. */
#define DSI_AMX_EMU 1
#include "kernels/x86/amx_int8.c"
