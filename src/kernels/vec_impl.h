/* kernels: the body of the vector primitives (vec.h), included by one file
 * per ISA with VEC_SUFFIX set; plain C the compiler vectorizes for the
 * flags of the including file. Fixed lane-wise orders, so a result never
 * depends on where in a batch a row sits. */
#include <math.h>
#include <string.h>

#define VEC_CAT2(a, b) a##b
#define VEC_CAT(a, b) VEC_CAT2(a, b)
#define VEC_FN(name) VEC_CAT(name, VEC_SUFFIX)

/* element c of an attention row: f32, or a bf16 pair row's element
 * `odd` (tensor/paged.h), exactly widened */
static inline float VEC_FN(row_at_)(const void *row, int odd, int c, int pairs) {
  if (!pairs) return ((const float *)row)[c];
  uint32_t u = (uint32_t)((const uint16_t *)row)[2 * c + odd] << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* 16 lanes of multiply-adds over the columns, folded 8, 4, 2, 1 */
static inline __attribute__((always_inline)) float VEC_FN(dot_at_)(const float *a, const void *b, int odd, int n,
                                                                    int pairs) {
  float acc[16] = {0};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; j++) acc[j] += a[i + j] * VEC_FN(row_at_)(b, odd, i + j, pairs);
  for (; i < n; i++) acc[i & 15] += a[i] * VEC_FN(row_at_)(b, odd, i, pairs);
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}

static float VEC_FN(vec_dot_)(const float *a, const float *b, int n) { return VEC_FN(dot_at_)(a, b, 0, n, 0); }
/* a dot with a pair row's element odd, summed as vec_dot sums it */
static inline float VEC_FN(vec_dot_pair_)(const float *a, const uint16_t *b, int odd, int n) {
  return VEC_FN(dot_at_)(a, b, odd, n, 1);
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

/* the rounding to nearest even bf16 of f32 bits u: its high half */
static inline uint32_t VEC_FN(bf16_up_)(uint32_t u) { return u + 0x7fffu + ((u >> 16) & 1); }

static void VEC_FN(vec_to_bf16_)(const float *restrict x, uint16_t *restrict out, int n) {
  const uint32_t *u = (const uint32_t *)x;
  for (int i = 0; i < n; i++) out[i] = (uint16_t)(VEC_FN(bf16_up_)(u[i]) >> 16);
}

#ifndef VEC_TILES_OWN /* the including file has its own */
static inline uint16_t VEC_FN(bf16_at_)(const float *x) {
  uint32_t u;
  memcpy(&u, x, sizeof u);
  return (uint16_t)(VEC_FN(bf16_up_)(u) >> 16);
}

static void VEC_FN(vec_bf16_panel_)(const float *x, int ldx, int nr, int n, uint16_t *out) {
  for (int c = 0; c < n; c++)
    for (int i = 0; i < 16; i++)
      out[(c / 2) * 32 + 2 * i + (c & 1)] = i < nr ? VEC_FN(bf16_at_)(x + (size_t)i * ldx + c) : 0;
}

static void VEC_FN(vec_bf16_panel_t_)(const float *x, int ldx, int nu, int ni, uint16_t *out) {
  for (int u = 0; u < nu + (nu & 1); u++)
    for (int i = 0; i < 16; i++)
      out[(u / 2) * 32 + 2 * i + (u & 1)] = u < nu && i < ni ? VEC_FN(bf16_at_)(x + (size_t)u * ldx + i) : 0;
}

static void VEC_FN(vec_to_bf16_tiles_)(const float *restrict x, int n, int kpad, uint16_t *restrict out) {
  for (int c = 0; c < kpad; c += 32, out += 512) {
    const int nc = n - c < 0 ? 0 : n - c > 32 ? 32 : n - c;
    VEC_FN(vec_to_bf16_)(x + c, out, nc);
    memset(out + nc, 0, (size_t)(32 - nc) * sizeof(uint16_t));
  }
}
#endif

static void VEC_FN(vec_round_bf16_)(const float *restrict x, float *restrict out, int n) {
  const uint32_t *u = (const uint32_t *)x;
  uint32_t *o = (uint32_t *)out;
  for (int i = 0; i < n; i++) o[i] = VEC_FN(bf16_up_)(u[i]) & 0xffff0000u;
}

static void VEC_FN(vec_pair_to_f32_)(const uint16_t *restrict pr, int n, float *restrict even, float *restrict odd) {
  const uint32_t *w = (const uint32_t *)pr; /* a word: a column's two positions */
  uint32_t *e = (uint32_t *)even, *o = (uint32_t *)odd;
  if (!odd) {
    for (int c = 0; c < n; c++) e[c] = w[c] << 16;
    return;
  }
  for (int c = 0; c < n; c++) {
    e[c] = w[c] << 16;
    o[c] = w[c] & 0xffff0000u;
  }
}

/* |x| compared as integers (the order of non-negative floats) and the
 * rounding as rintf of a product, so no ISA can fuse or reorder it. The
 * largest magnitude, or 0 where there is nothing to scale by: a zero row,
 * inf / NaN, or a largest magnitude under 2^-100, where q / amax could
 * overflow to inf (from 9.6e-35 for int16's q, 3.7e-37 for int8's) and
 * turn the row into NaNs cast to integers */
static inline float VEC_FN(amax_)(const float *restrict x, int n) {
  const uint32_t *u = (const uint32_t *)x;
  uint32_t mx = 0;
  for (int i = 0; i < n; i++) {
    uint32_t a = u[i] & 0x7fffffffu;
    mx = a > mx ? a : mx;
  }
  float amax;
  memcpy(&amax, &mx, sizeof amax);
  return amax >= 0x1p-100f && amax <= 3.4e38f ? amax : 0;
}

/* x * (q / amax) rounded to nearest even and clamped to [-q, q] */
static inline float VEC_FN(quant_one_)(float x, float inv, float q) {
  float v = rintf(x * inv);
  v = v > q ? q : v;
  return v < -q ? -q : v;
}

/* to_i8 of a row with nothing to scale by (amax_ gave 0): zeros, their
 * sums zero */
static inline float VEC_FN(i8_zeros_)(int8_t *restrict out, int n, int32_t *restrict sums) {
  if (n > 0) memset(out, 0, (size_t)n);
  for (int c = 0; sums && c < n; c += 32) sums[c / 32] = 0;
  return 0;
}

#ifndef VEC_I8_OWN /* the including file has its own */
static float VEC_FN(vec_to_i8_)(const float *restrict x, int8_t *restrict out, int n, int32_t *restrict sums) {
  float amax = VEC_FN(amax_)(x, n);
  if (amax == 0) return VEC_FN(i8_zeros_)(out, n, sums);
  float inv = 127.0f / amax;
  for (int i = 0; i < n; i++) out[i] = (int8_t)(int32_t)VEC_FN(quant_one_)(x[i], inv, 127.0f);
  for (int c = 0; sums && c < n; c += 32) {
    int32_t t = 0;
    for (int k = c; k < n && k < c + 32; k++) t += out[k];
    sums[c / 32] = t;
  }
  return amax / 127.0f;
}
#endif

/* the same at 16 bits: scale = amax / 32767 */
static float VEC_FN(vec_to_i16_)(const float *restrict x, int16_t *restrict out, int n) {
  float amax = VEC_FN(amax_)(x, n);
  if (amax == 0) {
    memset(out, 0, (size_t)n * sizeof *out);
    return 0;
  }
  float inv = 32767.0f / amax;
  for (int i = 0; i < n; i++) out[i] = (int16_t)(int32_t)VEC_FN(quant_one_)(x[i], inv, 32767.0f);
  return amax / 32767.0f;
}

#ifndef VEC_ATTN_OWN /* the including file has its own attention primitives */
static float VEC_FN(vec_softmax_step_)(float *x, int n, float scale, float *m) {
  float mx = x[0], s = 0;
  for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  mx = fmaxf(*m, mx * scale);
  for (int i = 0; i < n; i++) s += (x[i] = expf(x[i] * scale - mx));
  *m = mx;
  return s;
}

static void VEC_FN(vec_softmax_)(float *x, int n) {
  float mx = x[0], s = 0;
  for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  for (int i = 0; i < n; i++) s += (x[i] = expf(x[i] - mx));
  float inv = 1.0f / s;
  for (int i = 0; i < n; i++) x[i] *= inv;
}


#define PV_HEADS 8 /* heads a call's written-out path takes */
/* o[h][c] += sum over u, in order, of p[h][u] * rows[u][c]: each row is
 * read once for every head, and a 32-column block of all heads' sums stays
 * in registers while the rows stream past (the attention's P V) */
#define PV_COLS 32
/* over f32 rows, or bf16 pair rows (row u's element u & 1) */
static inline __attribute__((always_inline)) void VEC_FN(attn_pv_at_)(float *restrict o, int ldo,
                                                                       const float *restrict p, int ldp, int nh,
                                                                       const void *const *rows, int nu, int n,
                                                                       int pairs) {
  int c0 = 0;
  if (nh == PV_HEADS)
    for (; c0 + PV_COLS <= n; c0 += PV_COLS) {
      float acc[PV_HEADS][PV_COLS];
      for (int h = 0; h < PV_HEADS; h++)
        for (int j = 0; j < PV_COLS; j++) acc[h][j] = o[(size_t)h * ldo + c0 + j];
      for (int u = 0; u < nu; u++) {
        float x[PV_COLS];
        for (int j = 0; j < PV_COLS; j++) x[j] = VEC_FN(row_at_)(rows[u], u & 1, c0 + j, pairs);
        for (int h = 0; h < PV_HEADS; h++) {
          float a = p[(size_t)h * ldp + u];
          for (int j = 0; j < PV_COLS; j++) acc[h][j] += a * x[j];
        }
      }
      for (int h = 0; h < PV_HEADS; h++)
        for (int j = 0; j < PV_COLS; j++) o[(size_t)h * ldo + c0 + j] = acc[h][j];
    }
  for (int h = 0; h < nh; h++) /* the rest: fewer heads, or the last columns */
    for (int u = 0; u < nu; u++) {
      float a = p[(size_t)h * ldp + u];
      for (int c = c0; c < n; c++) o[(size_t)h * ldo + c] += a * VEC_FN(row_at_)(rows[u], u & 1, c, pairs);
    }
}
static void VEC_FN(vec_attn_pv_)(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                                 const float *const *rows, int nu, int n) {
  VEC_FN(attn_pv_at_)(o, ldo, p, ldp, nh, (const void *const *)rows, nu, n, 0);
}
static void VEC_FN(vec_attn_pv_pairs_)(float *restrict o, int ldo, const float *restrict p, int ldp, int nh,
                                       const uint16_t *const *rows, int nu, int n) {
  VEC_FN(attn_pv_at_)(o, ldo, p, ldp, nh, (const void *const *)rows, nu, n, 1);
}

/* s[h*lds + u] = scale * dot(q + h*ldq, rows[u], n) for h < nh, u < nu:
 * each row is read once for all heads; every dot is summed exactly as
 * vec_dot sums it */
static inline __attribute__((always_inline)) void VEC_FN(attn_qk_at_)(float *restrict s, int lds,
                                                                       const float *restrict q, int ldq, int nh,
                                                                       const void *const *rows, int nu, int n,
                                                                       float scale, int pairs) {
  if (nh != PV_HEADS) {
    for (int u = 0; u < nu; u++)
      for (int h = 0; h < nh; h++)
        s[(size_t)h * lds + u] = VEC_FN(dot_at_)(q + (size_t)h * ldq, rows[u], u & 1, n, pairs) * scale;
    return;
  }
  int nb = n / 16 * 16;
  for (int u = 0; u < nu; u++) {
    const void *x = rows[u];
    float acc[PV_HEADS][16] = {{0}};
    for (int i = 0; i < nb; i += 16) {
      float xv[16];
      for (int j = 0; j < 16; j++) xv[j] = VEC_FN(row_at_)(x, u & 1, i + j, pairs);
      for (int h = 0; h < PV_HEADS; h++)
        for (int j = 0; j < 16; j++) acc[h][j] += q[(size_t)h * ldq + i + j] * xv[j];
    }
    for (int h = 0; h < PV_HEADS; h++) {
      for (int i = nb; i < n; i++) acc[h][i & 15] += q[(size_t)h * ldq + i] * VEC_FN(row_at_)(x, u & 1, i, pairs);
      for (int w = 8; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[h][j] += acc[h][j + w];
      s[(size_t)h * lds + u] = acc[h][0] * scale;
    }
  }
}
static void VEC_FN(vec_attn_qk_)(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                                 const float *const *rows, int nu, int n, float scale) {
  VEC_FN(attn_qk_at_)(s, lds, q, ldq, nh, (const void *const *)rows, nu, n, scale, 0);
}
static void VEC_FN(vec_attn_qk_pairs_)(float *restrict s, int lds, const float *restrict q, int ldq, int nh,
                                       const uint16_t *const *rows, int nu, int n, float scale) {
  VEC_FN(attn_qk_at_)(s, lds, q, ldq, nh, (const void *const *)rows, nu, n, scale, 1);
}

#endif

#ifndef VEC_SCORES_OWN
static void VEC_FN(vec_scores_t_)(float *restrict s, int lds, const float *restrict q, int ldq, int nq,
                                  const float *restrict kt, int nu, int n) {
  for (int p = 0; p < (nu + 7) / 8; p++) {
    const float *k = kt + (size_t)p * 8 * n;
    for (int i = 0; i < nq; i++) {
      float acc[8] = {0};
      for (int d = 0; d < n; d++)
        for (int j = 0; j < 8; j++) acc[j] += q[(size_t)i * ldq + d] * k[(size_t)d * 8 + j];
      for (int j = 0; j < 8; j++) s[(size_t)i * lds + 8 * p + j] = acc[j];
    }
  }
}
#endif

const dsi_vec_ops VEC_FN(dsi_vec_ops_) = {
  VEC_NAME, VEC_FN(vec_dot_), VEC_FN(vec_axpy_), VEC_FN(vec_add_), VEC_FN(vec_rmsnorm_),
  VEC_FN(vec_to_bf16_), VEC_FN(vec_round_bf16_), VEC_FN(vec_to_bf16_tiles_), VEC_FN(vec_bf16_panel_),
  VEC_FN(vec_bf16_panel_t_), VEC_FN(vec_pair_to_f32_), VEC_FN(vec_to_i8_), VEC_FN(vec_to_i16_), VEC_FN(vec_attn_pv_), VEC_FN(vec_attn_qk_),
  VEC_FN(vec_scores_t_), VEC_FN(vec_softmax_), VEC_FN(vec_softmax_step_),
#ifdef VEC_I4_OWN /* the including file has its own INT4 group quantizer */
  VEC_FN(vec_to_i4_),
#else
  dsi_i4_group_ref,
#endif
#if !defined(VEC_ATTN_OWN) || defined(VEC_ATTN_PAIRS_OWN)
  VEC_FN(vec_attn_pv_pairs_), VEC_FN(vec_attn_qk_pairs_),
#else
  NULL, NULL, /* its own f32 primitives and none over pair rows: the rows are widened first */
#endif
};
