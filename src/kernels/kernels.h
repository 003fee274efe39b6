/* kernels: pure compute over caller-owned memory — never allocate. Each op
 * has a scalar reference version here (the oracle for the optimized ones).
 * Ops that split work take (ith, nth) and handle their share only. */
#ifndef DSI_KERNELS_H
#define DSI_KERNELS_H

#include <stdint.h>
#include <stddef.h>

#include "tensor/mat.h"

/* ---- packing (at load) ---- */
/* bytes of w in TILES layout: the data, then (FP8, INT8) the per-panel scales */
size_t dsi_pack_bytes(const dsi_mat *w);
/* Describe the packed form of src at mem (and, for FP8, fill its scales);
 * then dsi_pack_rows writes rows [r0, r1) (r0 a multiple of 16) of
 * row-major src. Threads can pack disjoint row ranges. */
void dsi_pack_describe(const dsi_mat *src, dsi_mat *dst, void *mem);
void dsi_pack_rows(const dsi_mat *src, const dsi_mat *dst, int r0, int r1);
/* row j of one 16-row TILES panel (element c at ((c / 2) * 16 + j) * 2 + c %
 * 2, es bytes each: 1, 2 or 4) from a row-major row of cols elements, or
 * zeros where row is NULL; zeros from cols to kpad (dsi_pack_rows's and
 * dsi_pack_gate_up's step) */
void dsi_pack_panel_row(const void *row, int cols, int kpad, size_t es, void *panel, int j);
/* ---- INT8 quantization (at load) ---- */
/* columns per INT8 scale: finer than FP8's 128x128 tiles in rows (16), so
 * its error stays under FP8's */
#define DSI_I8_BLOCK 128
/* Describe an INT8 TILES matrix of src's shape at mem (dsi_pack_bytes of
 * that shape with dtype I8); its data and scales are written panel by
 * panel by dsi_quant_panel_i8. */
void dsi_pack_describe_i8(const dsi_mat *src, dsi_mat *dst, void *mem);
/* Quantize rows [r, r + 16) of row-major src (any float dtype; rows past
 * src->rows are zero) into panel p of INT8 TILES dst: per 128-column block
 * scale = amax|w| / 127, q = round-to-nearest-even(w / scale) in [-127,
 * 127]. work: 16 * src->cols floats. Threads can fill disjoint panels. */
void dsi_quant_panel_i8(const dsi_mat *src, int r, const dsi_mat *dst, int p, float *work);

/* ---- INT4 quantization (at load) ---- */
/* columns per INT4 scale (the group): measured against 64 and 128 on the
 * models' held-out text (README, --quant int4) */
#define DSI_I4_GROUP 32
/* candidate scales: m / -(8 + DSI_I4_STEP s) for |s| <= DSI_I4_SEARCH,
 * within 6% of Q4_0's. Measured on models/brown's held-out text (mean KL
 * against f32 over 2,048 positions): Q4_0's scale alone 0.0046; this
 * search 0.0039; 19 candidates within 11% 0.0041, at 3x the loading time. */
#define DSI_I4_SEARCH 2
#define DSI_I4_STEP 0.25f
/* Describe an INT4 TILES matrix of src's shape at mem (groups of `group`
 * columns, a multiple of 32); dsi_quant_panel_i4 fills it panel by panel. */
void dsi_pack_describe_i4(const dsi_mat *src, dsi_mat *dst, void *mem, int group);
/* Quantize rows [r, r + 16) of row-major src (any float dtype; rows past
 * src->rows are zero) into panel p of INT4 TILES dst, per row and group:
 * levels l in [-8, 7] and a scale d (stored as f16; w ~ l d), the levels
 * of the least squared error among the roundings of w / d' for d' within
 * 12% of llama.cpp's Q4_0 scale (m / -8, m the group's value of largest
 * magnitude), d the least-squares scale of those levels; nibble q = l + 8.
 * work: 16 * src->cols floats. Threads can fill disjoint panels. */
void dsi_quant_panel_i4(const dsi_mat *src, int r, const dsi_mat *dst, int p, float *work);

/* ---- widening ---- */
/* out[0..c1-c0) = W[r, c0..c1) in f32 */
void dsi_k_row_f32(const dsi_mat *w, int r, int c0, int c1, float *out);

/* ---- matmul: y[i, r] = sum_k x[i, k] * W[r, k] ---- */
/* x: [m, w->cols] (row stride ldx), y: [m, ...] (row stride ldy). This
 * thread computes rows r of its share of [0, w->rows). scratch: w->cols
 * floats owned by this thread. */
void dsi_k_matmul(const dsi_mat *w, const float *x, int ldx, float *y, int ldy, int m,
                  float *scratch, int ith, int nth);
/* the same over rows [r0, r1) only, single thread; y column j = row r0+j */
void dsi_k_matmul_rows(const dsi_mat *w, int r0, int r1, const float *x, int ldx, float *y,
                       int ldy, int m, float *scratch);
/* transposed, single vector: y[c] = sum_{r in [r0,r1)} x[r - r0] * W[r, c], all cols */
void dsi_k_matvec_t(const dsi_mat *w, int r0, int r1, const float *x, float *y, float *scratch);

/* ---- elementwise ---- */
/* out = x * rsqrt(mean(x^2) + eps) * weight */
void dsi_k_rmsnorm(const float *x, const float *weight, int n, float eps, float *out);
/* in-place interleaved-pair rotation of x[0..dim): (x[2i], x[2i+1]) by
 * angle pos * freq[i] (DeepSeek's apply_rotary_emb) */
void dsi_k_rope(float *x, int dim, const float *cos_t, const float *sin_t);
/* out[i] = silu(g[i]) * u[i] */
void dsi_k_silu_mul(const float *g, const float *u, float *out, int n);
/* y += a * x */
void dsi_k_axpy(float *y, const float *x, float a, int n);
float dsi_k_dot(const float *a, const float *b, int n);
/* softmax in place over n, returns nothing; max-subtracted */
void dsi_k_softmax(float *x, int n);

/* ---- router: select top_k experts of one token ---- */
typedef struct dsi_router_params {
  int n_experts, top_k, n_group, topk_group;
  int sigmoid;        /* 1: sigmoid scores, 0: softmax */
  int group_limited;  /* use groups (noaux_tc, group_limited_greedy) */
  int group_by_top2;  /* group score = sum of top-2 (bias present) vs max */
  int normalize;      /* renormalize chosen weights to sum 1 */
  float scale;        /* routed_scaling_factor */
} dsi_router_params;
/* logits: [n_experts]; bias: [n_experts] or NULL; work: 2*n_experts floats.
 * Writes expert ids (top-k order, highest biased score first) and weights. */
void dsi_k_router(const dsi_router_params *p, const float *logits, const float *bias,
                  float *work, int32_t *experts, float *weights);

#endif
