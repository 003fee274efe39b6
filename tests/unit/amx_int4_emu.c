/* tests: the AMX INT4 matmul (src/kernels/x86/amx_int4.c) built with its
 * tile instructions emulated in C (amx_tiles.h), as
 * dsi_gemm_amx_int4_emu, so test_gemm_int4 checks it against the oracle
 * on any CPU with VNNI. */
#define DSI_AMX_EMU 1
#include "kernels/x86/amx_int4.c"
