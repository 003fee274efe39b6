/* kernels: the small vector primitives the attention core, norms and
 * residuals are built from, compiled once per ISA from one source
 * (vec_impl.h); an engine's kernel table (cpu.h) holds its level's. */
#ifndef DSI_VEC_H
#define DSI_VEC_H

#include <stdint.h>

typedef struct dsi_vec_ops {
  const char *name;
  float (*dot)(const float *a, const float *b, int n);
  void (*axpy)(float *y, const float *x, float a, int n);     /* y += a x */
  void (*add)(float *y, const float *x, long n);              /* y += x */
  void (*rmsnorm)(const float *x, const float *w, int n, float eps, float *out);
  /* round to nearest even bf16 (NaN payloads are not preserved) */
  void (*to_bf16)(const float *x, uint16_t *out, int n);
  void (*round_bf16)(const float *x, float *out, int n); /* the same values, kept in f32 */
  /* the same rounding into one row of AMX A tiles: element c at out[(c /
   * 32) * 512 + c % 32] for c < n, zeros for n <= c < kpad (kpad a
   * multiple of 32) */
  void (*to_bf16_tiles)(const float *x, int n, int kpad, uint16_t *out);
  /* the same rounding into a 16-row panel of a BF16 TILES weight (gemm.h):
   * rows i < nr are x's (row stride ldx), the rest zero; columns c < n (n
   * even): element (i, c) at out[(c / 2) * 32 + 2 i + (c & 1)] */
  void (*bf16_panel)(const float *x, int ldx, int nr, int n, uint16_t *out);
  /* transposed: x's rows u < nu (stride ldx) are the panel's columns, their
   * elements i < ni its rows (zero for ni <= i < 16): element (i, u) at
   * out[(u / 2) * 32 + 2 i + (u & 1)], an odd nu's last partner zero */
  void (*bf16_panel_t)(const float *x, int ldx, int nu, int ni, uint16_t *out);
  /* one bf16 pair row (tensor/paged.h: two positions' elements
   * interleaved) of n columns to f32 rows, exactly: even gets the first
   * position, odd the second (skipped where NULL) */
  void (*pair_to_f32)(const uint16_t *pr, int n, float *even, float *odd);
  /* symmetric int8: returns scale = amax|x| / 127 (0 for a zero row) and
   * out = round-to-nearest-even(x * (127 / amax)), the same on every ISA;
   * sums (NULL: not wanted) gets the sum of each 32 outputs, the last
   * (n % 32) of the outputs alone */
  float (*to_i8)(const float *x, int8_t *out, int n, int32_t *sums);
  /* symmetric int16, the same way: scale = amax|x| / 32767 */
  float (*to_i16)(const float *x, int16_t *out, int n);
  /* o[h*ldo + c] += sum_u p[h*ldp + u] * rows[u][c] for h < nh, c < n, u in order */
  void (*attn_pv)(float *o, int ldo, const float *p, int ldp, int nh, const float *const *rows, int nu, int n);
  /* s[h*lds + u] = scale * dot(q + h*ldq, rows[u], n), summed as dot sums */
  void (*attn_qk)(float *s, int lds, const float *q, int ldq, int nh, const float *const *rows, int nu, int n,
                  float scale);
  /* s[i*lds + u] = the sum over d < n, in order, of q[i*ldq + d] times
   * element d of key u, for i < nq and u < nu, the keys transposed in
   * panels of 8 (element d of key u at kt[(u / 8) * 8 n + 8 d + u % 8]);
   * whole panels are written, up to u = 8 ceil(nu / 8) - 1 (the
   * non-absorbed prefill's scores, a block of queries at a time) */
  void (*scores_t)(float *s, int lds, const float *q, int ldq, int nq, const float *kt, int nu, int n);
  /* x = softmax(x) in place, n >= 1 (the attention's; the router keeps
   * dsi_k_softmax's libm exp) */
  void (*softmax)(float *x, int n);
  /* one step of an online softmax over a block x[0..n), n >= 1, scale >
   * 0: *m (the running max of scaled scores) becomes m' = max(*m, scale
   * max x), x becomes e^(scale x - m'); returns sum x */
  float (*softmax_step)(float *x, int n, float scale, float *m);
  /* one INT4 group at load (kernels.h dsi_quant_panel_i4): w[0..n), n a
   * multiple of 8 up to 256, to levels l in [-8, 7] and the scale it
   * returns (w ~ l scale); the same bits on every ISA as
   * dsi_i4_group_ref, the scalar reference (kernels/quant_i4.c) */
  float (*to_i4)(const float *w, int n, int8_t *l);
  /* attn_pv and attn_qk over bf16 pair rows (tensor/paged.h): rows[u] is
   * the pair row holding position u, its element u & 1 (the block starts
   * at an even position); bitwise what attn_pv / attn_qk give over f32
   * rows holding the same values. NULL at a level without them
   * (dsi_attn_rows_run then widens the rows first) */
  void (*attn_pv_pairs)(float *o, int ldo, const float *p, int ldp, int nh, const uint16_t *const *rows, int nu,
                        int n);
  void (*attn_qk_pairs)(float *s, int lds, const float *q, int ldq, int nh, const uint16_t *const *rows, int nu,
                        int n, float scale);
} dsi_vec_ops;

float dsi_i4_group_ref(const float *w, int n, int8_t *l);

/* each ISA's table; an engine reaches its level's through its kernel table (cpu.h) */
extern const dsi_vec_ops dsi_vec_ops_generic;
#if defined(__x86_64__)
extern const dsi_vec_ops dsi_vec_ops_avx2, dsi_vec_ops_avx512;
#endif

#endif
