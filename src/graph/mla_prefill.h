/* graph: MLA attention of prefill segments in the non-absorbed ("naive")
 * form of inference/model.py — the segment's context latents expanded to
 * per-head keys and values through W_UK and W_UV, then per head
 * softmax(q k^T) v with an online softmax over context blocks — and the
 * cost model that picks, per segment, this form or the absorbed one. */
#ifndef DSI_MLA_PREFILL_H
#define DSI_MLA_PREFILL_H

#include "graph/exec.h"

/* (Which form a prefill segment's attention takes: dsi_mla_form, DSI_MLA_*
 * of dsinfer.h.) */

/* Segments shorter than this always go the absorbed way (token by token
 * or, from ATTN_GEMM_MIN, as the absorbed matmuls): the same bound as the
 * core op's (ops.c), so the two agree on what a segment is. */
#define DSI_MLA_SEGMENT_MIN 16

typedef struct dsi_mla_prefill dsi_mla_prefill;

/* The form's plan for segments of up to max_tokens tokens over up to
 * max_context positions: its blocks, the cost model, the form to take
 * (DSI_MLA_AUTO: the cost model's pick). */
dsi_mla_prefill *dsi_mla_prefill_new(const dsi_config *c, int max_tokens, int max_context, dsi_mla_form form); /* NULL: out of memory */
void dsi_mla_prefill_free(dsi_mla_prefill *p);
/* The workspace a segment runs in: *shared bytes for the team, *thread
 * bytes for each thread (the graph plans them as the op's workspace). */
void dsi_mla_prefill_ws(const dsi_mla_prefill *p, size_t *shared, size_t *thread);
/* force a form (tests, measurements); DSI_MLA_AUTO restores the cost model */
void dsi_mla_prefill_set_form(dsi_mla_prefill *p, dsi_mla_form form);
/* tests, measurements: whether the core (scores, P V) may run on the AMX
 * attention kernels (dsi_attn_qk_tiles / pv_tiles; on by default, taken
 * where AMX runs with bf16 activations) or always on the matmul kernels */
void dsi_mla_prefill_set_tiles(dsi_mla_prefill *p, int on);
/* tests: smaller context blocks (a multiple of 32), query blocks (a
 * multiple of 16) and head groups than planned, so small shapes cross
 * their edges; values <= 0 or larger than planned keep the plan (the
 * workspace keeps the planned size) */
void dsi_mla_prefill_set_blocks(dsi_mla_prefill *p, int ctx_block, int q_block, int heads);

/* The form a segment of L tokens at positions p0 .. p0+L-1 takes: the
 * forced one, or the cheaper by the cost model (never DSI_MLA_AUTO).
 * uk_t: the dtype W_UK^T is held in (w_uk_t.dtype; F32 for FP8 models),
 * which sets the absorbed form's q_lat rate. */
dsi_mla_form dsi_mla_prefill_pick(const dsi_mla_prefill *p, int L, int p0, dsi_dtype uk_t);

/* Both forms' estimated time for such a segment, in ns on the machine
 * the rates were measured on (the pick compares them; tools print them). */
void dsi_mla_prefill_cost(const dsi_mla_prefill *p, int L, int p0, dsi_dtype uk_t, double *absorb, double *naive);

/* One segment in the non-absorbed form: tokens at positions p0 .. p0+L-1
 * of one sequence whose latents (and those of positions < p0) are in the
 * cache. q: [L rows of ldq] each [H, nope + rope] with q_pe rotated; out:
 * [L rows of ldo] each [H, v] (written, not accumulated). w must hold
 * w_uk and w_uv (packed model). Run by every thread of a team, with the
 * matmul driver's kernels and precision mm, in a workspace of
 * dsi_mla_prefill_ws's sizes: ws_shared the same for the whole team,
 * ws_thread each thread's own. */
typedef struct dsi_mla_segment {
  const float *q;
  int ldq;
  const float *cache;    /* [n_slots, kv_lora + rope]: this layer's latent cache, or */
  const uint16_t *pairs; /* when not NULL: the same in bf16 position pairs (tensor/paged.h) */
  const int32_t *table;  /* the sequence's block table */
  int block_size;
  int p0, L;
  float *out;
  int ldo;
} dsi_mla_segment;
void dsi_mla_prefill_naive(const dsi_mla_prefill *p, dsi_team *tm, const dsi_mm *mm, const dsi_layer_weights *w,
                           const dsi_mla_segment *seg, void *ws_shared, void *ws_thread);

/* naive[t] = 1 for the tokens of every segment of the batch
 * (DSI_MLA_SEGMENT_MIN or more consecutive positions of one sequence)
 * that the pick gives to the non-absorbed form; returns how many. */
int dsi_mla_prefill_plan(const dsi_mla_prefill *p, const dsi_fwd_batch *b, dsi_dtype uk_t, uint8_t *naive);

#endif
