/* kernels: the AMX tile instructions every AMX kernel uses, as
 * tile_config / tile_load / tile_store / tile_zero / tile_dpbf16ps /
 * tile_dpbssd / tile_dpbsud / tile_release. Built with DSI_AMX_EMU (the
 * tests' unit/amx_*_emu.c), they run as C on a per-thread tile file with
 * AMX's semantics — a load zeroes past the configured rows and columns, a
 * dot product asserts the operand shapes AMX requires (else #UD); BF16
 * products exact in f32, added one at a time rounding to nearest, bf16
 * subnormal inputs read as zero and subnormal sums flushed, as Intel's
 * pseudocode has it — so the kernels are checked against the oracle on
 * CPUs without AMX. Tile numbers are literals (the intrinsics paste them
 * into asm). */
#ifndef DSI_AMX_TILES_H
#define DSI_AMX_TILES_H

#include "base/base.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* palette 1 in a 64-byte configuration: tile t's bytes a row (16 bits) at
 * 16 + 2t, its rows at 48 + t */
static inline void tile_cfg_set(uint8_t cfg[64], int t, int rows, int colsb) {
  cfg[0] = 1;
  cfg[16 + 2 * t] = (uint8_t)colsb;
  cfg[17 + 2 * t] = (uint8_t)(colsb >> 8);
  cfg[48 + t] = (uint8_t)rows;
}

#ifdef DSI_AMX_EMU
static _Thread_local struct {
  uint8_t t[8][16][64];
  int rows[8], colsb[8];
} g_tiles;

static inline void tile_config(const uint8_t cfg[64]) {
  memset(&g_tiles, 0, sizeof g_tiles);
  DSI_ASSERT(cfg[0] == 1);
  for (int t = 0; t < 8; t++) {
    g_tiles.rows[t] = cfg[48 + t];
    g_tiles.colsb[t] = cfg[16 + 2 * t] | cfg[17 + 2 * t] << 8;
    DSI_ASSERT(g_tiles.rows[t] <= 16 && g_tiles.colsb[t] <= 64);
  }
}
static inline void tile_load_(int t, const void *p, size_t stride) {
  DSI_ASSERT(g_tiles.rows[t] > 0); /* a configured tile */
  memset(g_tiles.t[t], 0, sizeof g_tiles.t[t]);
  for (int r = 0; r < g_tiles.rows[t]; r++) memcpy(g_tiles.t[t][r], (const uint8_t *)p + r * stride, g_tiles.colsb[t]);
}
static inline void tile_store_(int t, void *p, size_t stride) {
  for (int r = 0; r < g_tiles.rows[t]; r++) memcpy((uint8_t *)p + r * stride, g_tiles.t[t][r], g_tiles.colsb[t]);
}
/* c[m][n] += sum over k, i of a[m][4k + i] b[k][4n + i], each byte signed
 * or not (the int32 sums wrap, as AMX's do) */
static inline void tile_dp_(int c, int a, int b, int a_signed, int b_signed) {
  DSI_ASSERT(g_tiles.rows[c] == g_tiles.rows[a] && g_tiles.rows[b] == g_tiles.colsb[a] / 4 &&
             g_tiles.colsb[b] == g_tiles.colsb[c]);
  for (int m = 0; m < g_tiles.rows[c]; m++)
    for (int n = 0; n < g_tiles.colsb[c] / 4; n++) {
      uint32_t s;
      memcpy(&s, g_tiles.t[c][m] + 4 * n, 4);
      for (int k = 0; k < g_tiles.colsb[a] / 4; k++)
        for (int i = 0; i < 4; i++) {
          const uint8_t x = g_tiles.t[a][m][4 * k + i], w = g_tiles.t[b][k][4 * n + i];
          s += (uint32_t)((a_signed ? (int32_t)(int8_t)x : (int32_t)x) * (b_signed ? (int32_t)(int8_t)w : (int32_t)w));
        }
      memcpy(g_tiles.t[c][m] + 4 * n, &s, 4);
    }
}
static inline void tile_zero_(int t) { memset(g_tiles.t[t], 0, sizeof g_tiles.t[t]); }
static inline float bf16_daz(uint16_t h) {
  const uint32_t u = (h & 0x7f80) ? (uint32_t)h << 16 : (uint32_t)(h & 0x8000) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline float f32_ftz(float x) { return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x; }
/* c[m][n] += sum over k of a[m][2k] b[k][2n] + a[m][2k + 1] b[k][2n + 1] (bf16 pairs) */
static inline void tile_dpbf16ps_(int c, int a, int b) {
  DSI_ASSERT(g_tiles.rows[c] == g_tiles.rows[a] && g_tiles.rows[b] == g_tiles.colsb[a] / 4 &&
             g_tiles.colsb[b] == g_tiles.colsb[c]);
  for (int m = 0; m < g_tiles.rows[c]; m++)
    for (int n = 0; n < g_tiles.colsb[c] / 4; n++) {
      float s;
      memcpy(&s, g_tiles.t[c][m] + 4 * n, 4);
      for (int k = 0; k < g_tiles.colsb[a] / 4; k++)
        for (int i = 0; i < 2; i++) {
          uint16_t x, w;
          memcpy(&x, g_tiles.t[a][m] + 4 * k + 2 * i, 2);
          memcpy(&w, g_tiles.t[b][k] + 4 * n + 2 * i, 2);
          s = f32_ftz(s + bf16_daz(x) * bf16_daz(w));
        }
      memcpy(g_tiles.t[c][m] + 4 * n, &s, 4);
    }
}
#define tile_load(tile, p, stride) tile_load_(tile, p, stride)
#define tile_store(tile, p, stride) tile_store_(tile, p, stride)
#define tile_zero(tile) tile_zero_(tile)
#define tile_dpbf16ps(c, a, b) tile_dpbf16ps_(c, a, b)
#define tile_dpbssd(c, a, b) tile_dp_(c, a, b, 1, 1)
#define tile_dpbsud(c, a, b) tile_dp_(c, a, b, 1, 0)
#define tile_release() memset(&g_tiles, 0, sizeof g_tiles)
#else
/* Loaded with an asm whose operand is the whole 64 bytes: GCC 12's
 * _tile_loadconfig claims to read 8, so -O3 may drop the stores that fill
 * the rest */
static inline void tile_config(const uint8_t cfg[64]) {
  __asm__ volatile("ldtilecfg %0" ::"m"(*(const struct { uint8_t b[64]; } *)cfg));
}
#define tile_load(t, p, stride) _tile_loadd(t, p, stride)
#define tile_store(t, p, stride) _tile_stored(t, p, stride)
#define tile_zero(t) _tile_zero(t)
#define tile_dpbf16ps(c, a, b) _tile_dpbf16ps(c, a, b)
#define tile_dpbssd(c, a, b) _tile_dpbssd(c, a, b)
#define tile_dpbsud(c, a, b) _tile_dpbsud(c, a, b)
#define tile_release() _tile_release()
#endif

#endif
