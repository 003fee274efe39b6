/* tests: the AMX BF16 matmul (src/kernels/x86/amx.c) built with its tile
 * instructions emulated in C (amx_tiles.h), as dsi_gemm_amx_emu, so
 * test_gemm_bf16 checks it on CPUs without AMX. */
#define DSI_AMX_EMU 1
#include "kernels/x86/amx.c"
