/* graph: the DeepSeek-V3 forward over a batch — any mix of prefill chunks
 * and decode tokens of several sequences — reading and writing the paged
 * latent KV cache through plain slot numbers and block tables. It reads
 * like inference/model.py: one function per block (MLA, MoE, dense MLP). */
#ifndef DSI_FORWARD_H
#define DSI_FORWARD_H

#include <stdio.h>

#include "base/pool.h"
#include "model/model.h"

/* A batch as the forward sees it. Token i of the batch belongs to sequence
 * seq[i] (an index into block_tables) and sits at position pos[i] of it;
 * its latent KV goes to cache row slot[i]; it attends to positions
 * 0..pos[i] of its sequence, found through that sequence's block table. */
typedef struct dsi_fwd_batch {
  int n_tokens;
  const int32_t *tokens;       /* [n_tokens] */
  const int32_t *pos;          /* [n_tokens] */
  const int32_t *seq;          /* [n_tokens] */
  const int32_t *slot;         /* [n_tokens] */
  const int32_t *const *block_tables; /* [n_seqs][...] block ids */
  const int32_t *logit_rows;   /* batch rows whose logits are wanted, ascending */
  int n_logits;
} dsi_fwd_batch;

/* The latent cache of one layer: row s holds [c_kv (kv_lora_rank) | k_pe
 * (qk_rope_head_dim)] of the token in slot s, in f32; or, where pair is
 * not NULL (AMX, bf16 forward, packed model), in bf16 position pairs
 * (tensor/paged.h) instead, and layer's entries are NULL. */
typedef struct dsi_fwd_cache {
  float **layer;   /* [num_hidden_layers] -> [n_slots, kv_lora + rope], or NULL entries */
  uint16_t **pair; /* NULL or [num_hidden_layers] -> [n_slots / 2, 2 (kv_lora + rope)] bf16 */
  int block_size;
  int n_slots;
} dsi_fwd_cache;

typedef struct dsi_fwd dsi_fwd;

/* The collectives the graph's ops call, given by the layer that owns the
 * processes (dist/, through the engine): the graph does not know MPI.
 * Counts are per rank, in floats (bytes for all_to_all_v). Each returns
 * DSI_OK or ends every rank itself: a step cannot go on without them. */
typedef struct dsi_coll {
  int size, rank; /* ranks (size 1: no collectives), and this one */
  void *ctx;
  int (*all_reduce_f32)(void *ctx, float *buf, size_t n); /* sum over the ranks, in place */
  /* rank r gets counts[r] floats: its part of in summed over the ranks */
  int (*reduce_scatter_f32)(void *ctx, const float *in, float *out, const int *counts);
  /* rank r's counts[r] floats at displs[r] of buf, to every rank (in place) */
  int (*all_gather_f32)(void *ctx, float *buf, const int *counts, const int *displs);
  /* rank r's counts[r] floats (send, n of them here) at displs[r] of recv on rank 0 */
  int (*gather_f32)(void *ctx, const float *send, int n, float *recv, const int *counts, const int *displs);
  /* one int to each rank, one from each */
  int (*all_to_all_int)(void *ctx, const int *send, int *recv);
  /* bytes: send[sdispls[r] ..+ scounts[r]) to rank r, recv likewise */
  int (*all_to_all_v)(void *ctx, const void *send, const int *scounts, const int *sdispls, void *recv,
                      const int *rcounts, const int *rdispls);
} dsi_coll;

typedef struct dsi_fwd_opts {
  int max_tokens;    /* most tokens in one batch */
  int max_context;   /* longest sequence */
  const char *isa;   /* the kernels' level: NULL for the best this CPU runs, or a cap
                        (one of DSI_ISA_NAMES, kernels/cpu.h) */
  int precision;     /* DSI_ACT_* (dsinfer.h) */
  int bf16_dot;      /* DSI_BF16_DOT_* (dsinfer.h) */
  int kv_block_size; /* the cache's block size: pair rows need a multiple of 32 */
  int kv_dtype;      /* DSI_KV_* (dsinfer.h) */
  int mla_form;      /* DSI_MLA_* (dsinfer.h): the prefill attention's form */
  int hugepage;      /* advise huge pages for the activation arena */
  dsi_coll coll;     /* between ranks; .size 0 or 1: one process */
  int tp_to_ep;      /* DSI_TP_TO_EP_*: when the model's heads are split across the ranks */
  int attn_dp;       /* between ranks: each rank runs the whole attention for its own sequences
                        (sequence s on rank s % N), their tokens meet only at the experts */
} dsi_fwd_opts;

/* how the forward runs (see DSI_EXEC_* in dsinfer.h) */
typedef struct dsi_fwd_exec_opts {
  int exec;    /* DSI_EXEC_GRAPH or DSI_EXEC_EAGER */
  int streams; /* 1, or 2: independent branches on two teams of workers */
  int fuse;    /* graph: fuse chains of ops (1 by default) */
  int poison;  /* graph: run op by op, freed tensors filled with NaN (a test of the memory plan) */
  int min_team;/* streams: workers each team needs for a fork to be split (0 = 2) */
  int overlap; /* graph, between ranks: collectives on a communication thread while the
                  workers compute what does not wait for them (the shared expert recorded
                  after the expert dispatch) */
  int two_batch_min; /* overlap: steps of at least this many tokens over two or more sequences
                  run as two micro-batches whose collectives and compute interleave (0: never) */
} dsi_fwd_exec_opts;

/* The forward of m on pool's threads: its kernels, precision and cache
 * layout decided here from o. DSI_E_INVAL for an unknown isa or a bf16
 * cache it cannot keep; DSI_E_NOMEM. */
int dsi_fwd_new(dsi_fwd **out, const dsi_model *m, dsi_pool *pool, const dsi_fwd_opts *o, dsi_err *err);
void dsi_fwd_free(dsi_fwd *f);
/* what the matmuls may do to activations: DSI_ACT_RED_* (kernels/gemm.h) */
int dsi_fwd_act(const dsi_fwd *f);
/* the latent cache it reads: bf16 pair rows (1) or f32 rows (0) */
int dsi_fwd_kv_pairs(const dsi_fwd *f);
/* the level of the kernels it runs ("amx", "avx512", ...) */
const char *dsi_fwd_isa(const dsi_fwd *f);
/* the level whose matrix peak its matmuls on bf16 activations run at
 * (dsi_matrix_peak): its own, or "f32" where they take the f32 route
 * (f32 activations, or BF16 and FP8 weights off vdpbf16ps at avx512bf16) */
const char *dsi_fwd_matrix_isa(const dsi_fwd *f);
/* the best level this CPU runs */
const char *dsi_fwd_isa_best(void);
/* label every op in p (NULL: stop); p observes the pool the forward runs on */
typedef struct dsi_prof dsi_prof;
void dsi_fwd_set_prof(dsi_fwd *f, dsi_prof *p);
void dsi_fwd_set_exec(dsi_fwd *f, const dsi_fwd_exec_opts *x); /* drops captured plans */
/* Run the batch; logits: [n_logits, vocab]. The caller guarantees slots
 * and block tables are valid (the engine's KV layer owns them). Fails only
 * for memory (capturing a plan, or eager's allocations). */
int dsi_fwd_run(dsi_fwd *f, const dsi_fwd_batch *b, const dsi_fwd_cache *cache, float *logits, dsi_err *err);

/* the shape bucket T tokens run in */
int dsi_fwd_bucket(const dsi_fwd *f, int T);
/* the plan of T's bucket (captured if needed): its memory and ops */
typedef struct dsi_fwd_stats {
  int bucket;
  size_t arena_bytes; /* planned peak of the intermediates */
  size_t sum_bytes;   /* all intermediates, each with its own memory */
  int n_ops, n_fused, n_waits;
  int n_regions, n_split; /* forks, and those split into two teams */
  long captures;      /* plans captured so far */
} dsi_fwd_stats;
int dsi_fwd_plan_stats(dsi_fwd *f, int T, dsi_fwd_stats *s, dsi_err *err);
/* dsi_graph_check on the plan of T's bucket: 0 sound, -1 with why, or an error */
int dsi_fwd_check_plan(dsi_fwd *f, int T, char *why, size_t why_len, dsi_err *err);
void dsi_fwd_dump_plan(dsi_fwd *f, int T, FILE *out);

/* YaRN-aware rotary tables: cos/sin[pos * (rope/2) + i]. Public for tests. */
int dsi_rope_tables(const dsi_config *c, int n_pos, float *cos_t, float *sin_t); /* DSI_OK or DSI_E_NOMEM */

#endif
