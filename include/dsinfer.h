/* dsinfer.h — the one public header of the dsinfer engine.
 * Opaque handles and plain option structs only: the CLI and the server use
 * nothing else, so they never depend on tensor or kernel internals. */
#ifndef DSINFER_H
#define DSINFER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dsinfer_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSINFER_VERSION "0.1.0"

/* ---- model: config + weights, read-only once loaded ---- */
typedef struct dsi_model dsi_model;

/* ---- several processes: the ranks mpirun starts (MPI) ----
 * dsi_dist_init joins them (MPI_Init; call it first, with main's argc and
 * argv); outside mpirun, or in a build without MPI (DSINFER_MPI off), the
 * world is this one process. Rank 0 runs the front end (tokenizer,
 * scheduler, CLI or server) and steps its engine; every other rank opens
 * the same model and engine options and calls dsi_engine_follow, which
 * runs each step rank 0 runs until rank 0 frees its engine. */
typedef struct dsi_dist dsi_dist;
int dsi_dist_init(int *argc, char ***argv, dsi_dist **out, dsi_err *err);
int dsi_dist_rank(const dsi_dist *d);
int dsi_dist_size(const dsi_dist *d);
int dsi_dist_has_mpi(void); /* 1: this build can run under mpirun */
void dsi_dist_free(dsi_dist *d); /* MPI_Finalize */

typedef struct dsi_load_opts {
  int mlock;     /* 1: lock the file mapping and compute from it; 0: copy into anonymous memory */
  int progress;  /* 1: show loading progress on stderr (when it is a terminal) */
  int n_threads; /* threads used while loading; 0 = all cores */
  int op_opt_off; /* 1: keep weights row-major as in the file (the ablation's
                     baseline); 0: repack into the kernels' layout (default) */
  int quant;     /* DSI_QUANT_*: quantize the packed linear weights while loading */
  int quant_head; /* DSI_QUANT_HEAD_*: what quant makes of lm_head (0: INT8, the default) */
  int no_hugepage; /* 1: do not advise transparent huge pages for the weights (where the
                      kernel's synchronous compaction stalls loading) */
  int ep_rank, ep_size; /* expert parallel: load only the routed experts
                           [E*ep_rank/ep_size, E*(ep_rank+1)/ep_size) (ep_size 0 or 1: all) */
  int tp_rank, tp_size; /* tensor parallel: load only attention heads
                           [H*tp_rank/tp_size, H*(tp_rank+1)/tp_size): those rows of q_b_proj
                           (q_proj) and kv_b_proj, those columns of o_proj (tp_size 0 or 1: all;
                           H must divide; not with mlock) */
  int vocab_rank, vocab_size_split; /* lm_head split by vocabulary: load only its rows
                           [V*vocab_rank/vocab_size_split, V*(vocab_rank+1)/vocab_size_split)
                           (vocab_size_split 0 or 1: all; not with tied embeddings or mlock) */
  size_t mem_available; /* bytes this process may take for its weights; 0: the kernel's MemAvailable.
                           Loading fails before copying anything when they need more */
  int allow_nonfinite; /* 1: weights or scales holding NaN or infinity (FP8: the bytes 0x7f and
                          0xff, E4M3FN's NaN) load with a warning; 0: loading fails, naming the
                          tensor (default) */
} dsi_load_opts;

/* DSI_QUANT_INT8: every packed linear weight (not the embedding, the norms,
 * the MoE router or W_UK) becomes symmetric int8 with one f32 scale per 16
 * rows x 128 columns, whatever the checkpoint's dtype (F32, BF16, F16, FP8).
 * Needs packed weights (not with mlock or op_opt_off).
 * DSI_QUANT_INT4: the MLP weights (routed and shared experts, dense MLPs)
 * and the attention projections (q, kv_a, o) become 4-bit with one f16
 * scale per row and 32 columns, lm_head (as quant_head says) and W_UV
 * int8 as above; INT4 matmuls multiply int8 activations (one scale per
 * row) in every precision mode. Under either, W_UK (exact) and W_UV multiply f32 (bf16)
 * activations, never int8 ones, so that the two attention forms agree and
 * a prompt's result does not depend on how it was cut into chunks. */
enum { DSI_QUANT_NONE = 0, DSI_QUANT_INT8 = 1, DSI_QUANT_INT4 = 2 };
/* lm_head under DSI_QUANT_INT8 or INT4: INT8 (the default), INT4 (as
 * INT4's MLP weights: a decode token reads fewer bytes, for accuracy; the
 * README's INT4 section measures the three), or kept as stored (packed,
 * its checkpoint dtype). Needs quant. */
enum { DSI_QUANT_HEAD_INT8 = 0, DSI_QUANT_HEAD_INT4 = 1, DSI_QUANT_HEAD_KEEP = 2 };

/* Open a Hugging Face checkpoint directory (config.json + model.safetensors
 * or model.safetensors.index.json with shards). */
int dsi_model_open(dsi_model **out, const char *dir, const dsi_load_opts *opts, dsi_err *err);
void dsi_model_free(dsi_model *m);

typedef struct dsi_model_info {
  int vocab_size, hidden_size, num_hidden_layers, num_attention_heads;
  int n_routed_experts, num_experts_per_tok, max_position_embeddings;
  int bos_token_id, eos_token_id;
  size_t weight_bytes;   /* bytes of weights held for run time */
  size_t active_bytes_per_token; /* weight bytes one decode token reads: attention, dense and
                                    shared MLPs, router, top-k experts per MoE layer, lm_head */
  size_t file_bytes;     /* bytes of the checkpoint's tensors on disk */
  double load_seconds;
  const char *weight_dtype; /* "f32", "bf16", "fp8", "mixed"; "int8" when quantized at load */
} dsi_model_info;
void dsi_model_get_info(const dsi_model *m, dsi_model_info *info);

/* ---- engine: a thread pool, a paged latent KV cache, sequences ---- */
typedef struct dsi_engine dsi_engine;

typedef struct dsi_engine_opts {
  int n_threads;     /* 0 = all cores */
  int max_tokens;    /* most tokens in one forward batch (0 = 512) */
  int kv_block_size; /* tokens per KV block (0 = 64) */
  int kv_blocks;     /* blocks in the pool (0 = enough for max_context x 8 sequences) */
  int max_context;   /* longest sequence (0 = min(max_position_embeddings, 4096)) */
  int act_precision; /* activations entering matmuls: DSI_ACT_* */
  int profile;       /* 1: record where each step's time goes (dsi_engine_profile_*) */
  int exec;          /* DSI_EXEC_*: how the forward runs (0 = graph) */
  int streams;       /* 1, or 2: independent branches (shared expert beside the routed
                        experts, q beside kv projections) on two teams of workers, where
                        each team gets >= stream_team_min workers (0 = 1) */
  int stream_team_min; /* streams: workers each team needs for a fork to be split (0 = 2;
                        1 forces teams of one, for measuring) */
  const char *isa;   /* NULL: the best kernels this CPU runs; "scalar" | "avx2" | "avx512" |
                        "avx512bf16" | "amx": no higher than that (tests and comparisons;
                        never raises) */
  int mla_form;      /* DSI_MLA_*: the attention form of prefill segments (0 = the cost model's pick) */
  int bf16_dot;      /* DSI_BF16_DOT_* (0 = this CPU's default) */
  int kv_dtype;      /* DSI_KV_*: what the latent cache holds (0 = auto) */
  int no_hugepage;   /* 1: do not advise huge pages for the KV cache and the activation arena */
  dsi_dist *dist;    /* NULL or a world of one: this process alone. Else the ranks share each
                        step: rank 0 steps the engine, the others dsi_engine_follow; a model
                        loaded with ep_size = the world's size sums its experts' share across
                        the ranks (expert parallel MoE); one loaded with tp_size = the world's
                        size runs its heads' share of attention and the FFN on 1/N of the
                        tokens (tensor parallel attention; see tp_to_ep) */
  int attn_dp;       /* between ranks, heads not split: 1 runs the whole attention of sequence s
                        on rank s % N only (its cache rows written there), the tokens meeting at
                        the experts (SGLang's DP attention); the logits go to rank 0 */
  int overlap;       /* between ranks: 1 runs the collectives on a communication thread while the
                        workers compute what does not wait for them (the shared expert beside the
                        expert dispatch); 0 (default): on a worker, in turn */
  int two_batch_min; /* overlap on: a step of at least this many tokens over two or more sequences
                        runs as two micro-batches, interleaved at their collectives, so that one
                        computes while the other's dispatch or combine is in flight (SGLang's
                        two-batch overlap); 0 (default): never */
  int tp_to_ep;      /* tensor parallel: 0 (DSI_TP_TO_EP_RS_AG) reduce-scatter attention's partial
                        sums into each rank's 1/N of the tokens, the FFN, all-gather; 1
                        (DSI_TP_TO_EP_ALLREDUCE) all-reduce them, split, the FFN, all-gather */
} dsi_engine_opts;

/* How attention's output reaches the FFN under tensor parallelism (the
 * TP->EP restructure of DeepSeek-V3 on vLLM-Ascend). ALLREDUCE: every rank
 * sums all tokens' partial o_proj outputs, then keeps its 1/N of the tokens
 * (split). RS_AG: a reduce-scatter sums straight into each rank's 1/N,
 * sending half the bytes. Either way the FFN (its routed experts dispatched
 * to their owners) runs on those tokens and an all-gather brings every
 * token back for the next layer's attention. */
enum { DSI_TP_TO_EP_RS_AG = 0, DSI_TP_TO_EP_ALLREDUCE = 1 };

/* The forward is written once and run by one of two executors. GRAPH: a
 * plan per shape bucket (power-of-two token counts) captured once — fused
 * ops, a static memory plan, waits only where data flows — and replayed
 * as one dispatch per step. EAGER: each op runs as it is issued, one
 * fork/join of the workers per op, outputs allocated on the spot (the
 * baseline of the ablation). */
enum { DSI_EXEC_GRAPH = 0, DSI_EXEC_EAGER = 1 };

/* The attention form of a prefill segment (16+ consecutive tokens of a
 * sequence). AUTO: a cost model picks per segment; ABSORB: queries into
 * latent space, as decode; NAIVE: the cached latents expanded to per-head
 * keys and values (inference/model.py's "naive" form). */
typedef enum dsi_mla_form { DSI_MLA_AUTO = 0, DSI_MLA_ABSORB = 1, DSI_MLA_NAIVE = 2 } dsi_mla_form;

/* What the matmuls multiply. F32 is exact to float rounding (the golden
 * tests' mode); BF16 rounds activations as DeepSeek's own inference does,
 * so the AMX and AVX-512 kernels multiply the same numbers and a sequence's
 * results do not depend on the batch it ran in. AUTO: BF16 where a bf16
 * kernel runs (AMX, or AVX512-BF16's dot products), F32 elsewhere. */
enum { DSI_ACT_AUTO = 0, DSI_ACT_F32 = 1, DSI_ACT_BF16 = 2 };
/* whether BF16 and FP8 weights take the AVX512-BF16 matmul (vdpbf16ps) at
 * the avx512bf16 level: this CPU's default (on for AMD, off for Intel,
 * whose vdpbf16ps multiply-adds no faster than its FMAs), or as told; else
 * the f32 route multiplies the same bf16-rounded activations */
enum { DSI_BF16_DOT_AUTO = 0, DSI_BF16_DOT_ON = 1, DSI_BF16_DOT_OFF = 2 };

/* What the latent KV cache holds. BF16: bf16 values, as DeepSeek's own
 * inference caches them (half the memory of f32, and half the bytes a
 * decode token's attention reads), in position pairs (tensor/paged.h);
 * needs packed weights and a block size that is a multiple of 32. F32:
 * f32 rows (exact to float rounding). AUTO: BF16 where it can be, F32
 * under DSI_ACT_F32 or with row-major weights. */
enum { DSI_KV_AUTO = 0, DSI_KV_BF16 = 1, DSI_KV_F32 = 2 };
/* "bf16" or "f32": what the engine's cache holds */
const char *dsi_engine_kv_dtype(const dsi_engine *e);

int dsi_engine_open(dsi_engine **out, dsi_model *m, const dsi_engine_opts *opts, dsi_err *err);
void dsi_engine_free(dsi_engine *e);
/* the level of the kernels the engine runs: "scalar", "avx2", "avx512", "avx512bf16", "amx" */
const char *dsi_engine_isa(const dsi_engine *e);
/* the matrix peak (dsi_matrix_peak) this engine's matmuls run at: its
 * kernel level's, f32 FMA's when its activations are f32, vpdpbusd's for
 * INT8 / INT4 weights without AMX */
struct dsi_peaks;
double dsi_engine_matrix_peak(const dsi_engine *e, const struct dsi_peaks *pk, const char **name);
/* The last error of a call on this engine. */
const dsi_err *dsi_engine_error(const dsi_engine *e);

/* Sequences: a handle >= 0 owns KV blocks until freed. */
int dsi_seq_new(dsi_engine *e);               /* returns id, or negative status */
void dsi_seq_free(dsi_engine *e, int seq);    /* returns its blocks to the pool */
int dsi_seq_len(const dsi_engine *e, int seq);/* tokens in its cache */
/* Cut seq's cache back to its first n tokens (n <= its length): blocks up
 * to n tokens are kept, the rest go back to the pool; the next tokens fed
 * follow position n. Reuses a shared prefix, as a chat's next turn does. */
int dsi_seq_truncate(dsi_engine *e, int seq, int n);

/* One forward step over a batch: any mix of prefill chunks and decode
 * tokens of several sequences. Token i belongs to sequence seq[i] and sits
 * at the next position of that sequence (positions are implicit: a
 * sequence's tokens in the batch follow its cache, in order).
 * logits: [n_tokens, vocab] for every token when logits_all, else only the
 * rows where want_logits[i] != 0, packed in order (may be NULL for none). */
typedef struct dsi_batch {
  int n_tokens;
  const int32_t *tokens; /* [n_tokens] */
  const int32_t *seq;    /* [n_tokens] sequence ids from dsi_seq_new */
  const uint8_t *want_logits; /* [n_tokens] or NULL = all */
} dsi_batch;
int dsi_engine_forward(dsi_engine *e, const dsi_batch *b, float *logits);
/* Ranks other than 0: run every step rank 0's engine runs, until rank 0
 * frees it (returns DSI_OK) or a step fails here (its status). */
int dsi_engine_follow(dsi_engine *e);

/* How many tokens of the KV pool's blocks there are, and how many of them
 * a new sequence can still get (free, or cached prefixes no sequence holds). */
void dsi_engine_kv_blocks(const dsi_engine *e, int *available, int *total, int *block_size);

/* ---- sampling ---- */
/* From a position's logits to a token, in this order: logit_bias added;
 * repetition_penalty over the prompt's and the output's tokens (a positive
 * logit divided by it, a negative one multiplied); frequency_penalty x count
 * + presence_penalty subtracted for each token of the output; then greedy
 * (temperature 0: the first largest logit) or: logits / temperature, top_k
 * keeps the k most likely, top_p the fewest most likely whose mass reaches
 * top_p of what is kept, min_p those at least min_p times as likely as the
 * most likely, and one uniform draw from the seed's stream picks among
 * them. The same logits and history give the same token, alone or batched. */
typedef struct dsi_sampling {
  float temperature; /* 0 = greedy */
  float top_p;       /* 1 (or 0) = off */
  int top_k;         /* 0 = off */
  uint64_t seed;
  float min_p;       /* 0 = off */
  float repetition_penalty; /* 1 (or 0) = off */
  float presence_penalty;   /* 0 = off */
  float frequency_penalty;  /* 0 = off */
  const int32_t *bias_ids;  /* logit_bias: bias[i] added to token bias_ids[i]'s logit */
  const float *bias;
  int n_bias;
} dsi_sampling;
/* The sampling defaults a checkpoint ships in generation_config.json (what
 * Hugging Face's generate() starts from). */
typedef struct dsi_gen_config {
  int found;             /* the file exists */
  int do_sample;         /* -1 absent; 0: greedy whatever the temperature; 1: sample */
  float temperature;     /* < 0 absent */
  float top_p;           /* < 0 absent */
  int top_k;             /* < 0 absent */
  int max_new_tokens;    /* < 0 absent */
} dsi_gen_config;
/* Read DIR/generation_config.json: absent is no defaults (found 0, the rest
 * absent); bad JSON, or a key of the wrong type or out of range
 * (temperature in [0, 100], top_p in (0, 1], top_k >= 0, eos_token_id an
 * id or a list of them) fails naming the file and the key. */
int dsi_gen_config_load(const char *dir, dsi_gen_config *g, dsi_err *err);
/* s's temperature, top_p and top_k that are < 0 (not given) from g, else
 * the plain defaults (greedy, top_p 1, top_k 0); do_sample false makes it
 * greedy unless a temperature was given. */
void dsi_gen_config_apply(const dsi_gen_config *g, dsi_sampling *s);

typedef struct dsi_sampler dsi_sampler;
dsi_sampler *dsi_sampler_new(const dsi_sampling *s, int vocab); /* NULL: out of memory */
void dsi_sampler_free(dsi_sampler *s);
/* A token from logits[0..n_valid) (n_valid <= 0: the whole vocabulary; ids
 * past it, a checkpoint's padding rows, are never drawn), which it changes.
 * hist: the tokens before this position, the prompt's first n_prompt. */
int dsi_sampler_sample(dsi_sampler *s, float *logits, int n_valid, const int32_t *hist, int n_hist, int n_prompt);

/* ---- serving: requests on a continuous-batching scheduler ----
 * A scheduler owns an engine (nothing else may step it while the scheduler
 * is open) and one thread, the engine loop, that runs its steps. Every
 * function below may be called from any thread at any time; the request
 * callbacks run on the engine loop thread, one at a time, in token order,
 * and may call dsi_sched_cancel. A callback must not block for long: the
 * whole batch waits for it.
 *
 * Each step packs one decode token of every running completion and
 * prefill chunks of the ones still reading their prompt (oldest first) and
 * of waiting ones it admits (first come, first served) into one forward
 * pass, up to max_batched_tokens tokens and max_seqs completions. A request
 * is admitted when the KV pool has the blocks for its next chunk; when the
 * pool runs out mid-generation the newest running completion is preempted
 * (its blocks let go, its output kept) and recomputed later, with the same
 * result. A prompt that starts with a prefix some earlier request computed
 * takes that prefix's KV blocks instead of prefilling it. */
typedef struct dsi_sched dsi_sched;
typedef struct dsi_tok dsi_tok; /* the tokenizer, below */

typedef struct dsi_sched_opts {
  int max_seqs;           /* completions running at once (0 = 64) */
  int max_batched_tokens; /* tokens in one step (0 = the engine's max_tokens) */
  int prefill_chunk;      /* most prompt tokens in one step while completions decode in it
                             (0 = sized on the fly so a step costs at most about two decode steps) */
  int no_prefix_cache;    /* 1: every prompt prefilled in full */
  int prompt_logprob_rows; /* most prompt positions a step scores for prompt_logprobs, each a logits row
                              (0 = max_batched_tokens) */
} dsi_sched_opts;

#define DSI_MAX_TOP_LOGPROBS 20
typedef struct dsi_token_logprob {
  int32_t id;
  float logprob;
} dsi_token_logprob;

/* why a completion ended */
typedef enum dsi_finish {
  DSI_FINISH_NONE = 0,   /* not yet */
  DSI_FINISH_STOP,       /* a stop token (EOS, stop_ids) or a stop string */
  DSI_FINISH_LENGTH,     /* max_tokens, or the context is full */
  DSI_FINISH_CANCELLED,  /* dsi_sched_cancel, or the scheduler closed */
  DSI_FINISH_ERROR,      /* the step failed for this request: error says why */
} dsi_finish;
const char *dsi_finish_str(dsi_finish f); /* "stop", "length", "cancelled", "error" */

/* What a request's callback is told: a token with the text it made final,
 * or (finish set) the end of one completion. Pointers are borrowed for the
 * call. */
typedef struct dsi_request_event {
  uint64_t id;              /* the request's */
  int index;                /* its completion, 0..n-1 */
  int32_t token;            /* the token drawn; -1 on an event that only ends the completion */
  const char *text;         /* text that became final with it: never half a UTF-8 character, nor
                               the start of a stop string (with a tokenizer; else empty) */
  size_t text_len;
  float logprob;            /* the token's log-probability under the model (with logprobs) */
  const dsi_token_logprob *top; /* the most likely tokens at its position (top_logprobs of them) */
  int n_top;
  dsi_finish finish;        /* set on the completion's last event */
  const char *stop;         /* FINISH_STOP by a stop string: which; NULL otherwise */
  int32_t stop_token;       /* FINISH_STOP by a token: which; -1 otherwise */
  int json_closed;          /* FINISH_STOP because the JSON value closed (json), or no more text could
                               match (regex) */
  int context_full;         /* FINISH_LENGTH because the context is full */
  const char *error;        /* FINISH_ERROR: the cause */
  /* > 0: not a token drawn but the prompt's token at this position, with
   * its logprob and top (a request with prompt_logprobs): no text, nothing
   * ends; these come for positions 1 .. n_prompt - 1, in order, once per
   * request (index: the completion that computed them, 0 unless it
   * failed), before its first drawn token */
  int prompt_pos;
  /* on the last event of a completion */
  int prompt_tokens, cached_tokens, completion_tokens;
  double queue_s, prefill_s, decode_s; /* submit to first step, to the first token, first to last token */
} dsi_request_event;
typedef void (*dsi_request_cb)(void *user, const dsi_request_event *ev);

typedef struct dsi_request {
  const int32_t *prompt;    /* token ids (copied); the CLI or server renders and tokenizes */
  int n_prompt;
  dsi_sampling sampling;    /* completion i draws from seed + i; the bias arrays are copied */
  int max_tokens;           /* most tokens per completion (0 = until the context is full) */
  const int32_t *stop_ids;  /* more tokens that end a completion (copied) */
  int n_stop_ids;
  const char *const *stop;  /* stop strings, matched on the text across tokens, not emitted (copied) */
  int n_stop;
  int ignore_eos;           /* 1: the model's end-of-sentence token does not end it */
  int n;                    /* completions sharing the prompt (0 = 1) */
  int logprobs;             /* 1: each token's logprob */
  int top_logprobs;         /* 0..DSI_MAX_TOP_LOGPROBS most likely tokens per position */
  int json;                 /* 1: each completion is one JSON value (needs a tokenizer), an object unless
                               json_schema says otherwise: a token that cannot continue one is not drawn
                               (the draw repeats over those that can), and the completion ends (stop)
                               when the value closes */
  const char *json_schema;  /* with json: a JSON Schema the value is held to (its text, compiled at submit,
                               or found compiled: dsi_sched_check_schema; DSI_E_INVAL names a keyword not
                               enforced); NULL: any object */
  const char *regex;        /* instead of json: each completion is text matching this ECMA-262 pattern as a
                               whole (as if anchored at both ends; compiled at submit, needs a tokenizer): a
                               token that cannot continue a match is not drawn, a stop token only where the
                               text matches, and the completion ends (stop, json_closed) when nothing more
                               can match */
  int prompt_logprobs;      /* 1: the prompt's tokens' logprobs too (events with prompt_pos), each
                               under the raw logits of the positions before it, with top_logprobs;
                               those positions are computed even where the prefix cache holds them,
                               at most prompt_logprob_rows of them a step */
  dsi_request_cb on_event;
  void *user;
} dsi_request;

/* Open a scheduler on e (tok: for stop strings and text; may be NULL, then
 * events carry no text and stop strings are refused) and start its loop. */
int dsi_sched_open(dsi_sched **out, dsi_engine *e, const dsi_tok *tok, const dsi_sched_opts *o, dsi_err *err);
/* Stop: every request still in flight ends FINISH_CANCELLED (its callback
 * told), the loop joined. The engine is the caller's again. */
void dsi_sched_free(dsi_sched *s);
/* Check that a JSON Schema compiles for dsi_request.json_schema: DSI_E_INVAL
 * with the keyword and its place named when it does not (a keyword the
 * output could not be held to is refused, never ignored). */
int dsi_json_schema_check(const char *schema, size_t n, dsi_err *err);
/* Check that a pattern compiles for dsi_request.regex: DSI_E_INVAL saying
 * why not (a construct not supported, an automaton too large) */
int dsi_regex_check(const char *pattern, size_t n, dsi_err *err);
/* The same checks for a request to s (regex 1: a pattern, 0: a JSON
 * Schema), keeping what compiled for the requests that send the same
 * text: s keeps the last 32 compiled schemas and patterns (those held by
 * requests in flight, and then the most recently used), so a submit after
 * the check, or an agent's next turn with the same tools, does not compile
 * again (s NULL: the check alone). Thread-safe. */
int dsi_sched_check_schema(dsi_sched *s, const char *text, size_t n, int regex, dsi_err *err);

/* Queue a request; *id names it. DSI_E_INVAL for a bad request (empty or
 * over-long prompt, an id outside the vocabulary, bad parameters),
 * DSI_E_CAPACITY when the prompt could never fit the KV pool. */
int dsi_sched_submit(dsi_sched *s, const dsi_request *r, uint64_t *id, dsi_err *err);
/* End request id's completions with FINISH_CANCELLED at the next step
 * boundary (their blocks let go then); DSI_E_INVAL if it is not in flight. */
int dsi_sched_cancel(dsi_sched *s, uint64_t id);
/* Forget the prefix cache before the next step (a conversation reset,
 * new weights): later prompts are prefilled in full. */
void dsi_sched_reset_prefix_cache(dsi_sched *s);
/* Wait until nothing is in flight, at most timeout_s seconds (< 0: no
 * limit); 0 when idle, DSI_E_CAPACITY on the timeout. */
int dsi_sched_wait_idle(dsi_sched *s, double timeout_s);

typedef struct dsi_sched_stats {
  int running, waiting;            /* completions */
  int kv_blocks_used, kv_blocks_cached, kv_blocks_total; /* held by sequences; cached, held by none */
  long prefix_queries, prefix_hits; /* prompt tokens looked up in the prefix cache, found */
  long prompt_tokens, generation_tokens, preemptions, steps;
  long requests_finished[DSI_FINISH_ERROR + 1]; /* by reason */
  double batch_tokens_mean;        /* tokens per step */
  double batch_seqs_mean;          /* completions per step */
  double step_seconds;             /* the loop's time in steps: planning, forward, sampling, delivery */
  double forward_seconds;          /* of which in forward passes */
  long schema_compiles, schema_hits; /* json_schema and regex texts compiled, and found compiled */
  int schemas_cached;              /* compiled ones kept (dsi_sched_check_schema) */
} dsi_sched_stats;
void dsi_sched_get_stats(dsi_sched *s, dsi_sched_stats *st);

/* ---- benchmarks ---- */
typedef struct dsi_peaks {
  int threads;
  double read_gbs;        /* memory read bandwidth, all threads, 1 GiB buffer */
  double triad_gbs;       /* STREAM triad (3 arrays counted) */
  double amx_bf16_gflops; /* tdpbf16ps on resident tiles, summed over threads; 0 without AMX */
  /* one instruction on 12 independent zmm chains a core (ymm on a CPU with
   * AVX2 only), summed over the threads; 0 where the CPU lacks it */
  double fma_gflops;      /* f32 vfmadd */
  double dpbf16_gflops;   /* vdpbf16ps */
  double vnni_gops;       /* vpdpbusd, a u8 x s8 multiply-add counted as 2 */
  double maddwd_gops;     /* ymm vpmaddwd, an s16 x s16 multiply-add counted as 2:
                             the AVX2 INT8 matmul's roof */
  double maddubs_gops;    /* ymm vpmaddubsw, a u8 x s8 multiply-add counted as 2:
                             the AVX2 INT4 matmul's roof */
} dsi_peaks;
int dsi_measure_peaks(int n_threads, dsi_peaks *out);
/* The matrix peak that kernel level `isa` (dsi_engine_isa, dsi_isa_name)
 * multiplies bf16 activations at: AMX tiles, vdpbf16ps, else (and for
 * any other string, e.g. "f32") f32 FMA; *name says which. An engine's
 * own: dsi_engine_matrix_peak (the f32 FMA's where its BF16 and FP8
 * weights do not take vdpbf16ps, DSI_BF16_DOT_*). */
double dsi_matrix_peak(const dsi_peaks *pk, const char *isa, const char **name);

/* ---- the CPU this runs on ---- */
const char *dsi_isa_name(void); /* the best kernel level this CPU runs */
size_t dsi_peak_rss(void); /* VmHWM of this process, bytes */
void dsi_reset_peak_rss(void); /* start peak RSS afresh from the current RSS */
int dsi_default_threads(void);
void dsi_set_log_level(int level); /* 0 error .. 3 debug */

/* ---- tokenizer ---- */
/* A checkpoint's byte-level BPE tokenizer, as Hugging Face `tokenizers`
 * defines it in tokenizer.json. Read-only once open: one dsi_tok may be
 * used by several threads at once. */
typedef struct dsi_tok dsi_tok;

enum {
  DSI_TOK_ADD_BOS = 1 << 0,         /* encode: prepend the BOS token */
  DSI_TOK_ADD_SPECIAL = 1 << 1,     /* encode: add what tokenizer_config.json (add_bos_token,
                                       add_eos_token) or the post-processor adds */
  DSI_TOK_REPLACE_INVALID = 1 << 2, /* encode: invalid UTF-8 becomes U+FFFD (default: DSI_E_INVAL) */
  DSI_TOK_SPECIAL_AS_TEXT = 1 << 3, /* encode: special tokens' text is plain text (untrusted input) */
  DSI_TOK_SKIP_SPECIAL = 1 << 4,    /* decode: leave special tokens out */
  DSI_TOK_SKIP_UNKNOWN = 1 << 5,    /* decode: skip ids with no token (as HF) instead of DSI_E_INVAL */
  DSI_TOK_NO_JIT = 1 << 6,          /* open: PCRE2's interpreter instead of its JIT (to test it) */
};

/* Open tokenizer.json; tokenizer_config.json (BOS/EOS, add_bos_token) may
 * be NULL. flags: 0, or DSI_TOK_NO_JIT. */
int dsi_tok_open(dsi_tok **out, const char *tokenizer_json_path, const char *tokenizer_config_path, int flags,
                 dsi_err *err);
void dsi_tok_free(dsi_tok *tok);
/* text[0..len) (UTF-8) -> *ids (malloc'd, free() it), *n of them. */
int dsi_tok_encode(const dsi_tok *tok, const char *text, size_t len, int flags, int32_t **ids, size_t *n,
                   dsi_err *err);
/* ids -> *text (malloc'd, NUL-terminated, free() it) of *len bytes (len may be NULL). */
int dsi_tok_decode(const dsi_tok *tok, const int32_t *ids, size_t n, int flags, char **text, size_t *len,
                   dsi_err *err);
int32_t dsi_tok_token_to_id(const dsi_tok *tok, const char *token); /* -1 if none */
int dsi_tok_vocab_size(const dsi_tok *tok); /* 1 + the largest id */
int32_t dsi_tok_bos_id(const dsi_tok *tok); /* -1 if none */
int32_t dsi_tok_eos_id(const dsi_tok *tok); /* -1 if none */

/* Streaming decode: push ids one at a time; each call hands back the text
 * that became final (never half a UTF-8 character), borrowed until the next
 * call. The pieces, then flush's, concatenate to dsi_tok_decode's text. */
typedef struct dsi_detok dsi_detok;
int dsi_detok_open(dsi_detok **out, const dsi_tok *tok, int flags, dsi_err *err); /* flags: DSI_TOK_SKIP_* */
int dsi_detok_push(dsi_detok *d, int32_t id, const char **piece, size_t *len, dsi_err *err);
int dsi_detok_flush(dsi_detok *d, const char **piece, size_t *len); /* end of stream */
void dsi_detok_reset(dsi_detok *d); /* start a new stream */
void dsi_detok_free(dsi_detok *d);

/* ---- profiler: an engine opened with opts.profile = 1 ---- */
/* Every op of every step (name, layer, category, FLOPs, bytes) and every
 * thread's share of it as a Chrome trace JSON (Perfetto, chrome://tracing).
 * DSI_E_INVAL when the engine is not profiling. */
int dsi_engine_profile_write(dsi_engine *e, const char *path, dsi_err *err);
/* Forget what was recorded so far (e.g. a warm-up run). */
void dsi_engine_profile_reset(dsi_engine *e);
/* Peaks to judge achieved rates against in the summary (optional). */
void dsi_engine_profile_set_peaks(dsi_engine *e, const dsi_peaks *pk);
/* Per phase (prefill, decode) and category: time, share of wall time,
 * GFLOP/s and GB/s (and fractions of the peaks), dispatch share, top ops. */
void dsi_engine_profile_summary(dsi_engine *e, FILE *out);
/* One phase's totals over the recorded steps: wall time, time inside ops
 * on the calling thread, the rest as the dispatch share, and the ops'
 * FLOPs and bytes moved (weights, activations); of them, the collectives
 * between ranks: their time on the calling thread and the bytes this rank
 * sent (ring algorithms for reductions and gathers). */
typedef struct dsi_phase_stats {
  int steps;
  int two_batch_steps; /* of steps, those run as two micro-batches (overlap, two_batch_min) */
  long tokens;
  double wall_s, ops_s, dispatch_share;
  double flops, weight_bytes, act_bytes;
  double comm_s, comm_bytes;
  double comm_overlapped_s; /* of comm_s, the time the caller computed beside it (overlap on) */
  double attention_s, moe_s, dense_s, lm_head_s, other_s; /* the other categories' time */
} dsi_phase_stats;
int dsi_engine_profile_stats(dsi_engine *e, int prefill, dsi_phase_stats *out);

/* The graph executor's plan for a batch of n_tokens (captured if needed):
 * its bucket, the planned activation arena beside the sum of every
 * intermediate with memory of its own, and its ops. */
typedef struct dsi_plan_info {
  int bucket;
  size_t arena_bytes, intermediates_bytes;
  int n_ops, n_fused, n_waits;
  int n_forks, n_split; /* fork regions, and those split into two teams (streams) */
  long captures;
} dsi_plan_info;
int dsi_engine_plan_info(dsi_engine *e, int n_tokens, dsi_plan_info *out);

/* ---- chat ---- */
/* A checkpoint's chat format: the Jinja chat_template of its
 * tokenizer_config.json (the built-in DeepSeek-V3 template when it has
 * none) with its BOS/EOS tokens, rendered byte for byte as transformers.js
 * renders it. Read-only once open. */
typedef struct dsi_chat_fmt dsi_chat_fmt;

/* Read model_dir/tokenizer_config.json; without that file, the built-in
 * template with DeepSeek's BOS/EOS. */
int dsi_chat_fmt_open(dsi_chat_fmt **out, const char *model_dir, dsi_err *err);
/* The same with the Jinja template read from template_path instead (BOS and
 * EOS still from model_dir): a file that fails to read or parse is named. */
int dsi_chat_fmt_open_file(dsi_chat_fmt **out, const char *model_dir, const char *template_path, dsi_err *err);
void dsi_chat_fmt_free(dsi_chat_fmt *f);
/* Render a conversation: messages_json is a JSON array of {role, content,
 * reasoning_content, tool_calls, ...}; extra_json NULL or a JSON object of
 * more template variables ({"thinking":true}, {"tools":[...]}). *text is
 * malloc'd and NUL-terminated (free it). */
int dsi_chat_fmt_render(const dsi_chat_fmt *f, const char *messages_json, int add_generation_prompt,
                        const char *extra_json, char **text, dsi_err *err);
/* 1 when the template has a thinking mode (it writes <think>: R1, V3.1). */
int dsi_chat_fmt_thinks(const dsi_chat_fmt *f);
/* The BOS / EOS token's text, or NULL when tokenizer_config.json names none. Borrowed. */
const char *dsi_chat_fmt_bos(const dsi_chat_fmt *f);
const char *dsi_chat_fmt_eos(const dsi_chat_fmt *f);
/* 1 when a rendered prompt leaves the assistant's turn inside <think> (R1's
 * generation prompt, V3.1 with thinking): the output starts in the reasoning. */
int dsi_chat_prompt_in_reasoning(const char *prompt);

/* The model's output, streamed back into a message: reasoning (<think>…
 * </think>) apart from the answer, DeepSeek tool calls (V3/R1 and V3.1
 * forms) into name + arguments. Both fields are trimmed of white space at
 * their ends (but DSI_CHAT_OUT_CONTINUES); an <｜end▁of▁sentence｜> ends
 * the message. */
typedef struct dsi_chat_out dsi_chat_out;
/* What one piece made final; text borrowed until the next call. A delta
 * never holds part of a tag or of a UTF-8 character. */
typedef struct dsi_chat_out_delta {
  const char *reasoning;
  size_t reasoning_len;
  const char *content;
  size_t content_len;
  int n_tool_calls; /* tool calls parsed so far */
} dsi_chat_out_delta;
/* flags: DSI_CHAT_OUT_IN_REASONING (the prompt ended inside <think>:
 * dsi_chat_prompt_in_reasoning), DSI_CHAT_OUT_CONTINUES (the output
 * continues text that ends the prompt, a prefill: the field it starts in
 * keeps its leading white space) */
#define DSI_CHAT_OUT_IN_REASONING 1
#define DSI_CHAT_OUT_CONTINUES 2
int dsi_chat_out_open(dsi_chat_out **out, int flags, dsi_err *err);
int dsi_chat_out_feed(dsi_chat_out *o, const char *piece, size_t len, dsi_chat_out_delta *d, dsi_err *err);
/* The text is over: what was held back (a possible tag's start) is decided. */
int dsi_chat_out_finish(dsi_chat_out *o, dsi_chat_out_delta *d, dsi_err *err);
/* The whole reasoning so far (NULL when the output had none) and answer. Borrowed. */
const char *dsi_chat_out_reasoning(dsi_chat_out *o);
const char *dsi_chat_out_content(dsi_chat_out *o);
/* Tool call i (0 .. n_tool_calls-1): its name and its arguments' JSON text
 * (raw text when not valid JSON). Borrowed. Returns DSI_E_INVAL for a bad i. */
int dsi_chat_out_tool_call(dsi_chat_out *o, int i, const char **name, const char **arguments);
void dsi_chat_out_free(dsi_chat_out *o);

#ifdef __cplusplus
}
#endif
#endif
