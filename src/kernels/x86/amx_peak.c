/* kernels: this core's AMX BF16 peak — a tdpbf16ps loop on resident tiles,
 * the compute roof that `dsinfer bench` sets kernels beside — and the
 * ceilings of the GEMM's walk: its 2x2 tile loop with the operands where
 * the GEMM finds them (`bench kernels --ceilings`). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "kernels/cpu.h"
#include "kernels/peak.h"
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

/* The GEMM's inner loop (amx.c: 32-row blocks x panel pairs, 8-step K
 * chunks) over buffers laid out as its operands are, stage by stage:
 *   0: A and B in L1 (one block, one pair);
 *   1: A streamed from L2 (16 blocks, 512 rows, 256 KiB), B in L1;
 *   2: and C reloaded and stored through L2 every chunk (8 pairs' C blocks,
 *      512 KiB), as the GEMM keeps its partial sums between K chunks;
 *   3: and the operands moving as the GEMM's K chunks and pairs advance at
 *      M = 512: each chunk's A is a new 256 KiB of activations (those of
 *      512 tokens at V3's width, WALK_A_BYTES at the start of far, which
 *      stay in L3), prefetched into L2 during the chunk before, 4 lines a
 *      K step; each pair's B is a new 16 KiB of weights (far past them:
 *      DRAM), prefetched into L2 while the pair before multiplies, 2 lines
 *      a K step.
 * Returns GFLOP/s on this thread (0 without AMX or memory). */
enum { WALK_KS = 8, WALK_BLOCKS = 16, WALK_PAIRS = 8, WALK_CHUNK = WALK_KS * 1024, WALK_A_BYTES = 512 * 7168 * 2 };

typedef struct {
  int stage, nmb, npairs;
  const uint8_t *b, *far;
  float *c;
  size_t far_bytes, fb; /* stage 3: the pair's B at far + fb */
} walk;

/* one K chunk: every pair over every block of a, prefetching the next
 * chunk an (stage 3) */
static void walk_chunk(walk *w, const uint8_t *a, const char *an) {
  size_t fa = 0;
  for (int p = 0; p < w->npairs; p++) {
    const uint8_t *b0 = w->b + (size_t)p * 2 * WALK_CHUNK, *b1 = b0 + WALK_CHUNK;
    size_t fn = 0; /* the next pair's B, from its start */
    const size_t next = w->fb + 2 * WALK_CHUNK < w->far_bytes ? w->fb + 2 * WALK_CHUNK : WALK_A_BYTES;
    if (w->stage == 3) b0 = w->far + w->fb, b1 = b0 + WALK_CHUNK;
    for (int mb = 0; mb < w->nmb; mb++) {
      const uint8_t *a0 = a + (size_t)mb * 2 * WALK_CHUNK, *a1 = a0 + WALK_CHUNK;
      float *cb = w->c + ((size_t)p * w->nmb + mb) * 1024;
      if (w->stage >= 2) {
        _tile_loadd(T_C00, cb, 128);
        _tile_loadd(T_C01, cb + 16, 128);
        _tile_loadd(T_C10, cb + 512, 128);
        _tile_loadd(T_C11, cb + 528, 128);
      } else {
        _tile_zero(T_C00);
        _tile_zero(T_C01);
        _tile_zero(T_C10);
        _tile_zero(T_C11);
      }
      for (int s = 0; s < WALK_KS; s++) {
        _tile_loadd(T_B0, b0 + s * 1024, 64);
        _tile_loadd(T_A0, a0 + s * 1024, 64);
        _tile_dpbf16ps(T_C00, T_A0, T_B0);
        _tile_loadd(T_A1, a1 + s * 1024, 64);
        _tile_dpbf16ps(T_C10, T_A1, T_B0);
        _tile_loadd(T_B1, b1 + s * 1024, 64);
        _tile_dpbf16ps(T_C01, T_A0, T_B1);
        _tile_dpbf16ps(T_C11, T_A1, T_B1);
        if (w->stage == 3) {
          for (int l = 0; l < 2; l++, fn += 64) _mm_prefetch((const char *)w->far + next + fn, _MM_HINT_T1);
          for (int l = 0; l < 4; l++, fa += 64) _mm_prefetch(an + fa, _MM_HINT_T1);
        }
      }
      _tile_stored(T_C00, cb, 128);
      _tile_stored(T_C01, cb + 16, 128);
      _tile_stored(T_C10, cb + 512, 128);
      _tile_stored(T_C11, cb + 528, 128);
    }
    w->fb = next;
  }
}

double dsi_amx_walk_gflops(int stage, const uint8_t *far, size_t far_bytes, double seconds) {
  if (!dsi_cpu_get()->amx_bf16 || (stage == 3 && (!far || far_bytes < 2 * WALK_A_BYTES))) return 0;
  walk w = {.stage = stage, .nmb = stage == 0 ? 1 : WALK_BLOCKS, .npairs = stage >= 2 ? WALK_PAIRS : 1,
            .far = far, .far_bytes = far_bytes, .fb = WALK_A_BYTES};
  const size_t a_bytes = (size_t)w.nmb * 2 * WALK_CHUNK, b_bytes = (size_t)w.npairs * 2 * WALK_CHUNK;
  const int n_chunks = WALK_A_BYTES / (int)a_bytes; /* stage 3: A's chunks in far */
  uint16_t *a = dsi_alloc_aligned(a_bytes), *b = dsi_alloc_aligned(b_bytes);
  w.b = (const uint8_t *)b;
  w.c = dsi_alloc_aligned((size_t)w.npairs * w.nmb * 4096);
  if (a && b && w.c) {
    for (size_t i = 0; i < a_bytes / 2; i++) a[i] = 0x3c00;
    for (size_t i = 0; i < b_bytes / 2; i++) b[i] = 0x3c00;
  }
  long products = 0;
  double t0 = dsi_now(), el = 0;
  if (a && b && w.c) {
    tiles_configure();
    for (int chunk = 0; el < seconds;) {
      for (int rep = 0; rep < 256 / (w.npairs * w.nmb) + 1; rep++) { /* a few hundred blocks a clock reading */
        int next = (chunk + 1) % n_chunks;
        if (stage == 3) walk_chunk(&w, far + (size_t)chunk * a_bytes, (const char *)far + (size_t)next * a_bytes);
        else walk_chunk(&w, (const uint8_t *)a, NULL);
        products += (long)w.npairs * w.nmb * 4 * WALK_KS;
        chunk = next;
      }
      el = dsi_now() - t0;
    }
    _tile_release();
  }
  dsi_free_aligned(a), dsi_free_aligned(b), dsi_free_aligned(w.c);
  return el > 0 ? (double)products * 16 * 16 * 32 * 2 / el * 1e-9 : 0;
}
