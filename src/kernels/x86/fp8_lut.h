/* kernels: e4m3 -> bf16(fp8 * scale) by table, for the kernels that widen
 * FP8 weights to bf16 (the AMX matmul's B tiles, the AVX512-BF16 matmul's
 * lines). Needs AVX512-BF16 and VBMI: included by files compiled with the
 * AMX flags, or by one that defines FP8_LUT_TARGET as a function attribute
 * naming them (GCC's and clang's target attribute). */
#ifndef DSI_FP8_LUT_H
#define DSI_FP8_LUT_H

#include <immintrin.h>
#include <stdint.h>

#ifndef FP8_LUT_TARGET
#define FP8_LUT_TARGET
#endif

/* e4m3 -> bf16(fp8 * scale) by table: one scale covers a block of columns, so
 * bf16(v * scale) for the 128 magnitudes v is the whole map, kept as its
 * low and high bytes (128 each, two registers each). A byte's 7 magnitude
 * bits index both (vpermi2b ignores the index's top bit), its sign bit is
 * or-ed into the high byte, and vpermt2b interleaves the bytes into words:
 * 6 uops per 64 weights, half the uops of widening through f16 / f32
 * arithmetic, and bitwise the same. The magnitudes
 * come from f16: v << 7 as f16 bits is v's e4m3 value x 2^-8, exactly for
 * normals and subnormals, so the entries are the products the oracle
 * rounds, bf16(fp8 * scale), with one rounding. */
typedef struct {
  __m512i lo0, lo1, hi0, hi1;
} fp8_lut;

FP8_LUT_TARGET static inline fp8_lut fp8_lut_make(float scale) {
  const __m512 f = _mm512_set1_ps(scale * 256.0f);
  const __m512i iota = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13,
                                        12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512i wd[4];
  for (int i = 0; i < 4; i++) {
    __m512i v = _mm512_slli_epi16(_mm512_add_epi16(iota, _mm512_set1_epi16((short)(32 * i))), 7);
    __m512 lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(v)), f);
    __m512 hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)), f);
    wd[i] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  }
  /* magnitude 127 is E4M3FN's NaN (the f16 trick reads 480): a bf16 NaN, as the scalar table */
  wd[3] = _mm512_mask_mov_epi16(wd[3], (__mmask32)1 << 31, _mm512_set1_epi16(0x7fc0));
  /* bytes 2j (low) and 2j + 1 (high) of two registers of words */
  const __m512i ev = _mm512_set_epi8(126, 124, 122, 120, 118, 116, 114, 112, 110, 108, 106, 104, 102, 100, 98, 96, 94,
                                     92, 90, 88, 86, 84, 82, 80, 78, 76, 74, 72, 70, 68, 66, 64, 62, 60, 58, 56, 54, 52,
                                     50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10,
                                     8, 6, 4, 2, 0);
  const __m512i od = _mm512_add_epi8(ev, _mm512_set1_epi8(1));
  return (fp8_lut){_mm512_permutex2var_epi8(wd[0], ev, wd[1]), _mm512_permutex2var_epi8(wd[2], ev, wd[3]),
                   _mm512_permutex2var_epi8(wd[0], od, wd[1]), _mm512_permutex2var_epi8(wd[2], od, wd[3])};
}

/* 64 e4m3 bytes -> 64 bf16 words, in order: words 0-31 in *w0, 32-63 in *w1 */
FP8_LUT_TARGET static inline void fp8_lut_64r(const fp8_lut *t, __m512i x, __m512i *w0, __m512i *w1) {
  /* output word i of a half: byte i of the low bytes, then byte i of the high */
  const __m512i ilo = _mm512_set_epi8(95, 31, 94, 30, 93, 29, 92, 28, 91, 27, 90, 26, 89, 25, 88, 24, 87, 23, 86, 22,
                                      85, 21, 84, 20, 83, 19, 82, 18, 81, 17, 80, 16, 79, 15, 78, 14, 77, 13, 76, 12,
                                      75, 11, 74, 10, 73, 9, 72, 8, 71, 7, 70, 6, 69, 5, 68, 4, 67, 3, 66, 2, 65, 1, 64,
                                      0);
  const __m512i ihi = _mm512_add_epi8(ilo, _mm512_set1_epi8(32));
  const __m512i l = _mm512_permutex2var_epi8(t->lo0, x, t->lo1);
  const __m512i h = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t->hi0, x, t->hi1), x,
                                              _mm512_set1_epi8((char)0x80), 0xf8); /* h | (x & 0x80) */
  *w0 = _mm512_permutex2var_epi8(l, ilo, h);
  *w1 = _mm512_permutex2var_epi8(l, ihi, h);
}

/* the same from in to out */
FP8_LUT_TARGET static inline void fp8_lut_64(const fp8_lut *t, const uint8_t *in, uint16_t *out) {
  __m512i w0, w1;
  fp8_lut_64r(t, _mm512_loadu_si512(in), &w0, &w1);
  _mm512_store_si512((__m512i *)out, w0);
  _mm512_store_si512((__m512i *)(out + 32), w1);
}

#endif
