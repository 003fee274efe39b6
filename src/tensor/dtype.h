/* tensor: element types of checkpoints and kernels, and conversions between
 * them. FP8 is e4m3fn (no infinities, 0x7f/0xff are NaN, max 448). */
#ifndef DSI_DTYPE_H
#define DSI_DTYPE_H

#include <stdint.h>
#include <string.h>
#include <stddef.h>

typedef enum dsi_dtype {
  DSI_DTYPE_F32,
  DSI_DTYPE_BF16,
  DSI_DTYPE_F16,
  DSI_DTYPE_F8_E4M3,
  DSI_DTYPE_I32,
  DSI_DTYPE_I64,
  /* symmetric int8 with f32 scales per block (the kernels' quantized
   * weights; kernels.h says where the scales sit) */
  DSI_DTYPE_I8,
  DSI_DTYPE_U8, /* raw bytes (a workspace) */
  /* group-wise 4-bit weights quantized at load, packed with their f16
   * scales (tensor/mat.h says how); no checkpoint holds it, and its size
   * here (1) is not its bytes: dsi_pack_bytes gives those */
  DSI_DTYPE_I4,
  DSI_DTYPE_COUNT
} dsi_dtype;

/* bytes per element */
size_t dsi_dtype_size(dsi_dtype t);
/* safetensors' name ("F32", "BF16", "F16", "F8_E4M3", "I32", "I64", "I8", "U8") */
const char *dsi_dtype_st_name(dsi_dtype t);
/* parse a safetensors dtype name; -1 if unknown */
int dsi_dtype_from_st_name(const char *s);

static inline float dsi_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* round to nearest even, NaN kept quiet */
static inline uint16_t dsi_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
float dsi_f16_to_f32(uint16_t h);
uint16_t dsi_f32_to_f16(float f);

/* e4m3fn: 256-entry table, filled by dsi_dtype_init (called lazily). */
extern float dsi_fp8_table[256];
void dsi_dtype_init(void);
static inline float dsi_fp8_to_f32(uint8_t v) { return dsi_fp8_table[v]; }
/* round to nearest even, saturating to +-448 */
uint8_t dsi_f32_to_fp8(float f);

/* convert n elements of type t at src to f32 */
void dsi_to_f32(dsi_dtype t, const void *src, float *dst, size_t n);

#endif
