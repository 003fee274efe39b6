/* tests: the AMX pair attention (src/kernels/x86/amx_attn.c) built with
 * its tile instructions emulated in C (amx_tiles.h), as
 * dsi_attn_pairs_amx_emu, so test_attn_pairs checks it on CPUs without
 * AMX. */
#define DSI_AMX_EMU 1
#include "kernels/x86/amx_attn.c"
