/* kernels: one core's AMX tile rates, measured on the spot
 * (x86/amx_peak.c) — the compute roofs the benchmarks set kernels beside.
 * Both return 0 where the CPU has no AMX. */
#ifndef DSI_PEAK_H
#define DSI_PEAK_H

#include <stddef.h>
#include <stdint.h>

/* tdpbf16ps on resident tiles, GFLOP/s, for about `seconds` */
double dsi_amx_peak_gflops(double seconds);
/* the GEMM's 2x2 tile loop at one of four stages of operand movement
 * (0: A and B in L1; 1: A from L2; 2: and C through L2 every K chunk; 3:
 * and A from L3, B from DRAM, taken from far's far_bytes), GFLOP/s */
double dsi_amx_walk_gflops(int stage, const uint8_t *far, size_t far_bytes, double seconds);

#endif
