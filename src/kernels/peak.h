/* kernels: one core's AMX tile rates (x86/amx_peak.c) and AVX-512 vector
 * rates (x86/avx512_peak.c), measured on the spot — the compute roofs the
 * benchmarks set kernels beside. Each returns 0 where the CPU lacks the
 * instruction. */
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

/* 12 independent zmm chains of one instruction on this thread (ymm for
 * FMA on a CPU with AVX2 only, and for vpmaddwd and vpmaddubsw): GFLOP/s
 * (FMA, vdpbf16ps: 2 per multiply-add) or GOP/s (vpdpbusd and vpmaddubsw:
 * 2 per u8 x s8 multiply-add; vpmaddwd: 2 per s16 x s16 one), for about
 * `seconds` */
typedef enum { DSI_PEAK_FMA, DSI_PEAK_DPBF16, DSI_PEAK_VNNI, DSI_PEAK_MADDWD, DSI_PEAK_MADDUBS } dsi_vec_peak_kind;
double dsi_vec_peak(dsi_vec_peak_kind kind, double seconds);

#endif
