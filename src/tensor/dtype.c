/* tensor: dtype names, sizes and scalar conversions. */
#include "tensor/dtype.h"

#include <math.h>
#include <pthread.h>

static const struct { const char *name; size_t size; } k_dtypes[DSI_DTYPE_COUNT] = {
  [DSI_DTYPE_F32] = {"F32", 4},     [DSI_DTYPE_BF16] = {"BF16", 2},
  [DSI_DTYPE_F16] = {"F16", 2},     [DSI_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
  [DSI_DTYPE_I32] = {"I32", 4},     [DSI_DTYPE_I64] = {"I64", 8},
  [DSI_DTYPE_I8] = {"I8", 1},       [DSI_DTYPE_U8] = {"U8", 1},
  [DSI_DTYPE_I4] = {"I4", 1},
};

size_t dsi_dtype_size(dsi_dtype t) { return (unsigned)t < DSI_DTYPE_COUNT ? k_dtypes[t].size : 0; }
const char *dsi_dtype_st_name(dsi_dtype t) { return (unsigned)t < DSI_DTYPE_COUNT ? k_dtypes[t].name : "?"; }
int dsi_dtype_from_st_name(const char *s) {
  for (int i = 0; i < DSI_DTYPE_COUNT; i++)
    if (i != DSI_DTYPE_I4 && !strcmp(s, k_dtypes[i].name)) return i; /* I4 is the kernels' own */
  return -1;
}

float dsi_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    float f = ldexpf((float)man, -24);
    return sign ? -f : f;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t dsi_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  float a = fabsf(f);
  if (isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) /* subnormal: multiples of 2^-24 */
    return sign | (uint16_t)nearbyintf(a * 16777216.0f);
  int e;
  float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5,1) */
  uint32_t mant = (uint32_t)nearbyintf((m * 2.0f - 1.0f) * 1024.0f);
  uint32_t exp = (uint32_t)(e - 1 + 15);
  if (mant == 1024) { mant = 0; exp++; }
  if (exp >= 31) return sign | 0x7c00;
  return sign | (uint16_t)(exp << 10) | (uint16_t)mant;
}

float dsi_fp8_table[256];
static void fp8_table_fill(void) {
  for (int v = 0; v < 256; v++) {
    int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
    float f;
    if (exp == 0xf && man == 7) f = NAN;
    else if (exp == 0) f = ldexpf((float)man, -9);           /* subnormal: man/8 * 2^-6 */
    else f = ldexpf(1.0f + man / 8.0f, exp - 7);
    dsi_fp8_table[v] = sign ? -f : f;
  }
}
static pthread_once_t g_dtype_once = PTHREAD_ONCE_INIT;
void dsi_dtype_init(void) { pthread_once(&g_dtype_once, fp8_table_fill); }

uint8_t dsi_f32_to_fp8(float f) {
  dsi_dtype_init();
  if (isnan(f)) return 0x7f;
  uint8_t sign = f < 0 ? 0x80 : 0;
  float a = fabsf(f);
  if (a >= 448.0f) return sign | 0x7e;
  /* binary search over the 127 non-negative finite codes (monotone) */
  int lo = 0, hi = 0x7e;
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (dsi_fp8_table[mid] <= a) lo = mid; else hi = mid;
  }
  float dl = a - dsi_fp8_table[lo], dh = dsi_fp8_table[hi] - a;
  int code = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo); /* ties to even */
  return sign | (uint8_t)code;
}

void dsi_to_f32(dsi_dtype t, const void *src, float *dst, size_t n) {
  switch (t) {
  case DSI_DTYPE_F32: memcpy(dst, src, n * 4); break;
  case DSI_DTYPE_BF16: { const uint16_t *s = src; for (size_t i = 0; i < n; i++) dst[i] = dsi_bf16_to_f32(s[i]); } break;
  case DSI_DTYPE_F16: { const uint16_t *s = src; for (size_t i = 0; i < n; i++) dst[i] = dsi_f16_to_f32(s[i]); } break;
  case DSI_DTYPE_F8_E4M3: { dsi_dtype_init(); const uint8_t *s = src; for (size_t i = 0; i < n; i++) dst[i] = dsi_fp8_table[s[i]]; } break;
  case DSI_DTYPE_I32: { const int32_t *s = src; for (size_t i = 0; i < n; i++) dst[i] = (float)s[i]; } break;
  case DSI_DTYPE_I64: { const int64_t *s = src; for (size_t i = 0; i < n; i++) dst[i] = (float)s[i]; } break;
  case DSI_DTYPE_I8: { const int8_t *s = src; for (size_t i = 0; i < n; i++) dst[i] = (float)s[i]; } break;
  default: break;
  }
}
