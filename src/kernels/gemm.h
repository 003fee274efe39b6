/* kernels: the one matmul contract every ISA implements — y = x W^T over a
 * share of W's rows, with the epilogues the forward needs fused in (plain
 * store, SiLU-mul of gate/up panel pairs, routed scatter-accumulate), so no
 * extra pass over memory is made for them. */
#ifndef DSI_GEMM_H
#define DSI_GEMM_H

#include "kernels/kernels.h"

typedef enum {
  /* y[i*ldy + r] = acc(i, r) */
  DSI_EPI_STORE,
  /* W holds gate and up interleaved by panel (gate panel p at rows
   * 32p..32p+15, up panel p at 32p+16..32p+31; see dsi_pack_gate_up):
   * y[i*ldy + 16p + j] = silu(acc(i, 32p+j)) * acc(i, 32p+16+j) */
  DSI_EPI_SILU_PAIRS,
  /* y[y_rows[i]*ldy + r] += y_scale[i] * acc(i, r)  (MoE down projection:
   * the routing weight folded into the output accumulation) */
  DSI_EPI_SCATTER_ADD,
} dsi_epilogue;

typedef struct dsi_gemm {
  const dsi_mat *w;      /* any layout; optimized kernels take TILES. A TILES view
                            may have fewer cols than its kpad allows (kernels
                            read columns < cols only, with kpad the stride) */
  /* activations: row i of the product is x[x_rows ? x_rows[i] : i] */
  const float *x;        /* f32 [*, ldx] */
  int ldx;
  const int32_t *x_rows; /* gather (grouped experts) or NULL */
  /* the same rows in bf16, already gathered, in AMX tile order (see
   * dsi_rows_to_bf16_tiles), for kernels that want them (AMX); NULL when
   * not prepared */
  const uint16_t *xb;
  /* the same rows quantized to int8 (x ~ xq * xq_scale, one scale per row),
   * [m, DSI_XQ_LD(kpad)] zero-padded, for kernels that want them (AMX
   * INT8); NULL when not prepared */
  const int8_t *xq;
  const float *xq_scale;
  /* with xq, their sums over each 32 columns, [m, DSI_XQ_SUMS(kpad)]: what
   * the kernels that take int8 with a zero point (INT4, VNNI INT8) would
   * otherwise sum on every call (a batch's calls are cut into row ranges,
   * each a call); NULL: they sum xq themselves */
  const int32_t *xq_sum;
  /* the same rows quantized to int16 (x ~ xw * xw_scale, one scale per
   * row: 2^-15 of its largest magnitude, finer than bf16's rounding),
   * [m, DSI_XQ_LD(kpad)] zero-padded, for the AVX2 INT8 kernel, whose
   * vpmaddwd multiplies 16-bit operands at the rate it multiplies int8
   * ones widened; NULL when not prepared */
  const int16_t *xw;
  const float *xw_scale;
  /* the same rows staged as the AVX512-BF16 kernel's passes read them (see
   * dsi_gemm_dp_stage), for that kernel; NULL: it stages them itself */
  const uint32_t *xd;
  /* the same rows staged as the AVX-512 kernel's f32-route passes read
   * them for weights of w's pass height (see dsi_gemm_pairs_stage), for
   * that kernel; NULL: it stages them itself */
  const float *xf;
  int m;
  float *y;
  int ldy;
  dsi_epilogue epi;
  const int32_t *y_rows; /* DSI_EPI_SCATTER_ADD */
  const float *y_scale;  /* DSI_EPI_SCATTER_ADD */
} dsi_gemm;

/* Compute rows [r0, r1) of W (r0, r1 multiples of 16, or r1 = w->rows;
 * multiples of 32 for DSI_EPI_SILU_PAIRS) for all m activation rows.
 * scratch: DSI_GEMM_SCRATCH(w) bytes owned by the calling thread, 64-aligned.
 * Threads given disjoint row ranges never write the same bytes of y. */
typedef void (*dsi_gemm_fn)(const dsi_gemm *g, int r0, int r1, void *scratch);

/* scratch one thread needs for any kernel on w: the AVX-512 kernel's
 * per-column state, and 1 MiB more for the AMX kernel's C blocks between
 * K chunks, which are sized by the L2 and not by the width */
#define DSI_GEMM_SCRATCH(cols) ((size_t)(cols + 64) * 64 * 4 + ((size_t)1 << 20))

/* scalar reference (any layout, any dtype) — the oracle; INT8 TILES given
 * xq multiply those int8 activations as the VNNI kernel does, else x */
void dsi_gemm_ref(const dsi_gemm *g, int r0, int r1, void *scratch);
/* AVX-512 (any m; TILES layout, F32 / BF16 / FP8) — x86/avx512.c */
void dsi_gemm_avx512(const dsi_gemm *g, int r0, int r1, void *scratch);
/* AVX512-BF16 dot products (any m; TILES layout, BF16 / FP8): x rounded to
 * bf16 by the kernel itself, as the AMX kernels multiply it — x86/avx512.c */
void dsi_gemm_avx512_bf16(const dsi_gemm *g, int r0, int r1, void *scratch);
/* AMX BF16 tiles (m >= 8 worthwhile; TILES layout, BF16 / FP8; needs xb) — x86/amx.c */
void dsi_gemm_amx(const dsi_gemm *g, int r0, int r1, void *scratch);
/* AMX INT8 tiles (m >= 8 worthwhile; TILES layout, INT8; needs xq) — x86/amx_int8.c */
void dsi_gemm_amx_int8(const dsi_gemm *g, int r0, int r1, void *scratch);

/* AVX2 + FMA (any m; TILES layout, F32 / BF16 / FP8 / INT8) — x86/avx2.c */
void dsi_gemm_avx2(const dsi_gemm *g, int r0, int r1, void *scratch);

/* INT4 weights times int8 activations (any m; needs xq): AVX-512 with VNNI
 * (vpdpbusd), AVX-512 BW (vpmaddubsw), AVX2 — x86/avx512_int4.c,
 * x86/avx2_iq.c. They and dsi_gemm_ref agree bitwise before the SiLU. */
void dsi_gemm_avx512_vnni_i4(const dsi_gemm *g, int r0, int r1, void *scratch);
void dsi_gemm_avx512_i4(const dsi_gemm *g, int r0, int r1, void *scratch);
void dsi_gemm_avx2_i4(const dsi_gemm *g, int r0, int r1, void *scratch);
/* the VNNI one with its passes of 8 rows and more on AMX INT8 tiles, bitwise
 * its results (x86/amx_int4.c); runs where dsi_kern.amx_int4 says */
void dsi_gemm_amx_int4(const dsi_gemm *g, int r0, int r1, void *scratch);
/* INT8 weights times int8 activations (any m; needs xq) with AVX-512 VNNI,
 * for CPUs without AMX INT8 or below its batch sizes, and with AVX2
 * (vpmaddwd; int16 activations, xw, where given) — x86/avx512_int8.c,
 * x86/avx2_iq.c. They and dsi_gemm_ref given xq (xw) agree bitwise (the
 * AVX-512 one before the SiLU). */
void dsi_gemm_avx512_vnni_i8(const dsi_gemm *g, int r0, int r1, void *scratch);
void dsi_gemm_avx2_i8(const dsi_gemm *g, int r0, int r1, void *scratch);

/* What a kernel reads besides x, prepared once by the caller. */
enum {
  DSI_PREP_NONE, /* x as it is (with bf16 activations: rounded to bf16 values first) */
  DSI_PREP_BF16, /* g->xb */
  DSI_PREP_I8,   /* g->xq, g->xq_scale */
  DSI_PREP_DP,   /* g->xd (or x as it is: the kernel stages it itself) */
  DSI_PREP_I16,  /* g->xw, g->xw_scale */
  DSI_PREP_PAIRS, /* g->xf (or x as it is: the kernel stages it itself) */
};
/* Rows [s0, s1) of g's m activation rows rounded to bf16 and staged as the
 * AVX512-BF16 kernel's passes read them, into xd (DSI_XD_WORDS(m, cols)
 * words): staged once for a call, they serve every unit of its rows that
 * a team's threads take, where the kernel would stage them per unit. */
#define DSI_XD_WORDS(m, cols) ((size_t)(m) * (((size_t)(cols) + 1) / 2))
void dsi_gemm_dp_stage(const dsi_gemm *g, int s0, int s1, uint32_t *xd);
/* The same for the AVX-512 kernel's f32 route (dsi_gemm_avx512): rows
 * [s0, s1) of g's m rows, as they are or rounded to bf16 on the way
 * (round_bf16: bitwise as dsi_rows_round_bf16 rounds them), staged as its
 * passes read them for weights of g->w's dtype into xf (DSI_XF_FLOATS(m,
 * cols) floats). The layout follows the passes' height,
 * dsi_gemm_pairs_height(dtype): rows staged for one weight serve another
 * of the same cols and height. */
#define DSI_XF_FLOATS(m, cols) ((size_t)(m) * 2 * (((size_t)(cols) + 1) / 2))
void dsi_gemm_pairs_stage(const dsi_gemm *g, int s0, int s1, int round_bf16, float *xf);
int dsi_gemm_pairs_height(dsi_dtype dt);
/* row stride of int8 activations: the AMX INT8 kernel steps K 64 at a time */
#define DSI_XQ_LD(kpad) (((kpad) + 63) / 64 * 64)
/* sums of 32 columns in a row of them (g->xq_sum) */
#define DSI_XQ_SUMS(kpad) (DSI_XQ_LD(kpad) / 32)

/* AMX pays for its tile set-up, the bf16 conversion of activations and
 * (FP8) the widening of each B tile from about this many rows of
 * activations on. Measured on V3's shapes: below it the AVX-512 kernel
 * streams the weights at the memory bandwidth; from 8 rows on it turns
 * compute-bound (FP8 widening, f32 multiply-adds), while AMX, padding the
 * rows to a 16-row block, costs about what 16 rows cost: 1.5-2x faster at
 * 8-12 rows, and batch-8 decode 1.05-1.1x end to end. */
#define DSI_AMX_MIN_ROWS 8

/* What the matmuls may do to activations (dsi_gemm_pick's act): round
 * them to bf16 (the bf16 precision mode), quantize them to int8 for INT8
 * weights (with bf16 precision; never for the attention's latent-side
 * matmuls, W_UK and W_UV: dsi_fctx.mm_lat), or to int16 (by default on
 * AVX2, where INT8 weights multiply them at int8's rate; not on the latent
 * side either). */
enum { DSI_ACT_RED_BF16 = 1, DSI_ACT_RED_I8 = 2, DSI_ACT_RED_I16 = 4 };
/* The kernel of table k for w at batch size m; kernels that multiply
 * reduced-precision activations (AMX: bf16, or int8 for INT8 weights) only
 * when act allows it. *prep says what the kernel reads (DSI_PREP_*). */
struct dsi_kern;
struct dsi_vec_ops;
dsi_gemm_fn dsi_gemm_pick(const struct dsi_kern *k, const dsi_mat *w, int m, int act, int *prep);
/* whether dsi_gemm_pick gives BF16 / FP8 weights the AMX kernel at m
 * (then activations are wanted as bf16 rows) */
int dsi_gemm_amx_rows(const struct dsi_kern *k, int m, int act);
/* "ref", "avx2", "avx512", "avx512-bf16", "amx", "amx-int8", "avx512-vnni-int8",
 * "avx512-vnni-int4", "avx512-int4", "avx2-int4", "avx2-int8" */
const char *dsi_gemm_kernel_name(dsi_gemm_fn fn);

/* Two INT4 matmuls raced on this core (single-threaded): a 512 x 2048
 * weight in groups of 32 (made of random levels and scales, not
 * quantized), 64 rows of int8 activations, plain store. base is the
 * kernel in use, cand one that promises base's bits. 1: cand gives the
 * same bits and takes at most 1/DSI_RACE_MARGIN of base's time (fastest
 * of several runs each, alternating); 0: the same bits, not that much
 * faster; -1: other bits. *speedup: base's time over cand's. Calls no
 * dsi_kern_* (cpu.c races while it makes the kernel tables). */
#define DSI_RACE_MARGIN 1.1
int dsi_gemm_i4_race(const struct dsi_vec_ops *v, dsi_gemm_fn base, dsi_gemm_fn cand, double *speedup);

/* Pack gate [I, D] and up [I, D] (row-major, same dtype) into one TILES
 * matrix [2I', D] of alternating 16-row panels (I' = I rounded up to 16),
 * for DSI_EPI_SILU_PAIRS. dst->rows = 2I'. */
size_t dsi_pack_gate_up_bytes(const dsi_mat *gate);
void dsi_pack_gate_up(const dsi_mat *gate, const dsi_mat *up, dsi_mat *dst, void *mem);

/* Pack cached latents as a TILES weight of dtype dt (F32 or BF16): rows
 * r < rows are source rows idx[r] (or r), columns c < cols; the source is
 * f32 rows src[row * ld + c], or, where pairs is not NULL, bf16 pair rows
 * of width ld (tensor/paged.h). transpose packs [cols, rows] instead. For
 * attention: the cached latents become K (scores = Q K^T) and V^T (out =
 * P V). Every thread describes dst; thread ith of nth fills its share of
 * the 16-row panels. */
void dsi_pack_latents(dsi_dtype dt, const float *src, const uint16_t *pairs, int ld, const int32_t *idx, int rows,
                      int cols, int transpose, dsi_mat *dst, void *mem, int ith, int nth);

/* x f32 rows (gathered by rows when non-NULL) -> bf16 values kept in f32,
 * [m, cols] (what an AMX kernel multiplies, for kernels that read f32) */
/* the same for INT8 weights: x rounded to its row's int8 grid (what the AMX
 * INT8 kernel multiplies), kept in f32 */
void dsi_rows_round_i8(const struct dsi_vec_ops *v, const float *x, int ldx, const int32_t *rows, int m, int cols, float *out);
void dsi_rows_round_bf16(const struct dsi_vec_ops *v, const float *x, int ldx, const int32_t *rows, int m, int cols, float *out);
/* bf16 activations in AMX tile order: 16-row blocks, each block its K
 * steps' 16x32 tiles one after another ([ceil(m/16)][kpad/32][16][32]), so
 * every A tile is 1 KiB of contiguous memory (rows kpad * 2 bytes apart
 * would fall into two L1 sets). Columns past cols and the rows of the last
 * block past m are zero. DSI_XB_ROWS(m) rows are stored. */
#define DSI_XB_ROWS(m) (((size_t)(m) + 15) / 16 * 16)
/* rows [row0, row0 + n) of such a buffer of m_total rows at out, from x f32
 * rows (gathered by rows when non-NULL); the call whose rows end at m_total
 * also zeroes the last block's padding rows. Threads may fill disjoint row
 * ranges of one buffer. */
void dsi_rows_to_bf16_tiles(const struct dsi_vec_ops *v, const float *x, int ldx, const int32_t *rows, int n, int cols, int kpad, int row0,
                            int m_total, uint16_t *out);
/* x f32 rows (gathered by rows when non-NULL) -> int8 [m, ld], zero pad,
 * and scale[m]: symmetric per row, scale = amax / 127, q = round(x / scale);
 * with sums, each row's sums over its 32-column pieces, [m, ld / 32] */
void dsi_rows_to_i8(const struct dsi_vec_ops *v, const float *x, int ldx, const int32_t *rows, int m, int cols, int ld,
                    int8_t *out, float *scale, int32_t *sums);
/* the same to int16 (scale = amax / 32767), without sums */
void dsi_rows_to_i16(const struct dsi_vec_ops *v, const float *x, int ldx, const int32_t *rows, int m, int cols, int ld,
                     int16_t *out, float *scale);

#endif
