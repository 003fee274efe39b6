/* kernels: this core's AMX BF16 peak — a tdpbf16ps loop on resident tiles,
 * the compute roof that `dsinfer bench` sets kernels beside. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu.h"
#include "kernels/x86/amx_util.h"

double dsi_amx_peak_gflops(double seconds) {
  if (!dsi_cpu_get()->amx_bf16) return 0;
  tiles_configure();
  static __attribute__((aligned(64))) uint16_t a[16 * 32], b[16 * 32];
  static __attribute__((aligned(64))) float c[16 * 16];
  for (int i = 0; i < 16 * 32; i++) a[i] = b[i] = 0x3c00; /* small bf16 values */
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long iters = 0;
  double el = 0;
  do {
    for (int i = 0; i < 4096; i++) {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    iters += 4096;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    el = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
  } while (el < seconds);
  _tile_stored(0, c, 64);
  _tile_release();
  /* 4 tile products of 16x16x32 multiply-adds each */
  return (double)iters * 4 * 16 * 16 * 32 * 2 / el * 1e-9;
}
