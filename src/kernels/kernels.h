/* kernels: pure compute over caller-owned memory — never allocate. Each op
 * has a scalar reference version here (the oracle for the optimized ones).
 * Ops that split work take (ith, nth) and handle their share only. */
#ifndef DSI_KERNELS_H
#define DSI_KERNELS_H

#include <stdint.h>
#include <stddef.h>

#include "tensor/dtype.h"

/* A weight matrix [rows = out, cols = in], row-major in its checkpoint
 * dtype. FP8 carries one f32 scale per block x block tile
 * (scale[(r/block) * scale_cols + c/block], partial tiles at the edges),
 * applied when widening: w = fp8 * scale. */
typedef struct dsi_mat {
  dsi_dtype dtype;
  int rows, cols;
  const void *data;
  const float *scale; /* FP8 only */
  int block;          /* FP8 block size (128) */
  int scale_cols;     /* ceil(cols / block) */
} dsi_mat;

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
