/* kernels: one core's vector compute peaks, measured on the spot with
 * 12 independent accumulators (latency hidden) on registers — f32 FMA
 * (zmm, or ymm on a CPU with AVX2 only), AVX512-BF16 vdpbf16ps, VNNI
 * vpdpbusd and AVX2's ymm vpmaddwd and vpmaddubsw — the roofs `bench kernels` sets each
 * vector kernel beside. */
#include <immintrin.h>
#include <time.h>

#include "kernels/cpu.h"
#include "kernels/peak.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* 12 chains of one instruction on registers; asm, so that neither the
 * compiler's flags (this file has no VNNI) nor its optimizer change it */
#define LOOP12W(INSN, R)                                                                                          \
  __asm__ volatile(INSN " %%" R "12, %%" R "13, %%" R "0\n\t" INSN " %%" R "12, %%" R "13, %%" R "1\n\t"           \
                   INSN " %%" R "12, %%" R "13, %%" R "2\n\t" INSN " %%" R "12, %%" R "13, %%" R "3\n\t"           \
                   INSN " %%" R "12, %%" R "13, %%" R "4\n\t" INSN " %%" R "12, %%" R "13, %%" R "5\n\t"           \
                   INSN " %%" R "12, %%" R "13, %%" R "6\n\t" INSN " %%" R "12, %%" R "13, %%" R "7\n\t"           \
                   INSN " %%" R "12, %%" R "13, %%" R "8\n\t" INSN " %%" R "12, %%" R "13, %%" R "9\n\t"           \
                   INSN " %%" R "12, %%" R "13, %%" R "10\n\t" INSN " %%" R "12, %%" R "13, %%" R "11\n\t" ::     \
                       : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",     \
                         "xmm10", "xmm11")
#define LOOP12(INSN) LOOP12W(INSN, "zmm")

/* ymm loops: AVX2's 8-wide FMA on a CPU without AVX-512 (the zmm loop
 * would fault there), vpmaddwd (16 s16 products a ymm) and vpmaddubsw (32
 * u8 x s8 products a ymm) anywhere */
static double ymm_peak(dsi_vec_peak_kind kind, double seconds) {
  __asm__ volatile("vpxor %%ymm12, %%ymm12, %%ymm12\n\tvpxor %%ymm13, %%ymm13, %%ymm13" ::: "xmm12", "xmm13");
  long iters = 0;
  double t0 = now(), el;
  do {
    for (int i = 0; i < 1024; i++) {
      if (kind == DSI_PEAK_FMA) LOOP12W("vfmadd231ps", "ymm");
      else if (kind == DSI_PEAK_MADDWD) LOOP12W("vpmaddwd", "ymm");
      else LOOP12W("vpmaddubsw", "ymm");
    }
    iters += 1024;
    el = now() - t0;
  } while (el < seconds);
  const double per = kind == DSI_PEAK_FMA ? 16 : kind == DSI_PEAK_MADDWD ? 32 : 64; /* ops an instruction */
  return (double)iters * 12 * per / el * 1e-9;
}

double dsi_vec_peak(dsi_vec_peak_kind kind, double seconds) {
  const dsi_cpu *c = dsi_cpu_get();
  if (kind == DSI_PEAK_MADDWD || kind == DSI_PEAK_MADDUBS) return c->avx2 ? ymm_peak(kind, seconds) : 0;
  if (!c->avx512f && c->avx2 && kind == DSI_PEAK_FMA) return ymm_peak(kind, seconds);
  if (!c->avx512f || (kind == DSI_PEAK_DPBF16 && !c->avx512bf16) || (kind == DSI_PEAK_VNNI && !c->avx512vnni))
    return 0;
  /* small operands: no denormals, no overflow in the time measured */
  __asm__ volatile("vpxord %%zmm12, %%zmm12, %%zmm12\n\tvpxord %%zmm13, %%zmm13, %%zmm13" ::: "xmm12", "xmm13");
  long iters = 0;
  double t0 = now(), el;
  do {
    for (int i = 0; i < 1024; i++) {
      if (kind == DSI_PEAK_FMA) LOOP12("vfmadd231ps");
      else if (kind == DSI_PEAK_DPBF16) LOOP12("vdpbf16ps");
      else LOOP12("vpdpbusd");
    }
    iters += 1024;
    el = now() - t0;
  } while (el < seconds);
  /* per instruction: FMA 16 x 2 flops; vdpbf16ps 32 x 2; vpdpbusd 64 x 2 ops */
  const double per = kind == DSI_PEAK_FMA ? 32 : kind == DSI_PEAK_DPBF16 ? 64 : 128;
  return (double)iters * 12 * per / el * 1e-9;
}
