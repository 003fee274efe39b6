/* kernels: the body of the vector primitives (vec.h), included by one file
 * per ISA with VEC_SUFFIX set; plain C the compiler vectorizes for the
 * flags of the including file. Fixed lane-wise orders, so a result never
 * depends on where in a batch a row sits. */
#include <math.h>

#define VEC_CAT2(a, b) a##b
#define VEC_CAT(a, b) VEC_CAT2(a, b)
#define VEC_FN(name) VEC_CAT(name, VEC_SUFFIX)

static float VEC_FN(vec_dot_)(const float *a, const float *b, int n) {
  float acc[16] = {0};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];
  for (; i < n; i++) acc[i & 15] += a[i] * b[i];
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}

static void VEC_FN(vec_axpy_)(float *restrict y, const float *restrict x, float a, int n) {
  for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static void VEC_FN(vec_add_)(float *restrict y, const float *restrict x, long n) {
  for (long i = 0; i < n; i++) y[i] += x[i];
}

static void VEC_FN(vec_rmsnorm_)(const float *x, const float *w, int n, float eps, float *out) {
  float ss = VEC_FN(vec_dot_)(x, x, n);
  float inv = 1.0f / sqrtf(ss / n + eps);
  for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

static void VEC_FN(vec_to_bf16_)(const float *restrict x, uint16_t *restrict out, int n) {
  const uint32_t *u = (const uint32_t *)x;
  for (int i = 0; i < n; i++) out[i] = (uint16_t)((u[i] + 0x7fffu + ((u[i] >> 16) & 1)) >> 16);
}

static void VEC_FN(vec_round_bf16_)(const float *restrict x, float *restrict out, int n) {
  const uint32_t *u = (const uint32_t *)x;
  uint32_t *o = (uint32_t *)out;
  for (int i = 0; i < n; i++) o[i] = (u[i] + 0x7fffu + ((u[i] >> 16) & 1)) & 0xffff0000u;
}

const dsi_vec_ops VEC_FN(dsi_vec_ops_) = {
  VEC_NAME, VEC_FN(vec_dot_), VEC_FN(vec_axpy_), VEC_FN(vec_add_), VEC_FN(vec_rmsnorm_),
  VEC_FN(vec_to_bf16_), VEC_FN(vec_round_bf16_),
};
