/* tools: one function per `dsinfer` subcommand; each returns the process
 * exit code (0 ok, 1 failure, 2 usage error). */
#ifndef DSI_COMMANDS_H
#define DSI_COMMANDS_H

#include <stdint.h>

int dsi_cmd_logits(int argc, char **argv);
int dsi_cmd_generate(int argc, char **argv);
int dsi_cmd_perplexity(int argc, char **argv); /* cmd_perplexity.c */
int dsi_cmd_mkmodel(int argc, char **argv);
int dsi_cmd_bench(int argc, char **argv);
int dsi_cmd_plan(int argc, char **argv); /* cmd_plan.c */
int dsi_cmd_profile(int argc, char **argv); /* cmd_profile.c */
/* cmd_bench.c: B sequences of P random tokens (from seed) prefilled in one
 * batch, then G greedy decode steps; 0, or 1 with err set (the engine's
 * error, or out of memory) */
typedef struct dsi_bench_result {
  double prefill_tps, decode_tps, ms_per_token;
} dsi_bench_result;
typedef struct dsi_engine dsi_engine;
int dsi_bench_run(dsi_engine *e, int vocab, int P, int G, int B, uint64_t seed, dsi_bench_result *r, dsi_err *err);
/* cmd_ablation.c: bench --ablation */
typedef struct dsi_bench_ablation_opts {
  const char *model;
  int P, G, B, reps, threads, act, json;
  const void *par; /* the ranks' layout (dsi_cli_par), under mpirun */
} dsi_bench_ablation_opts;
int dsi_bench_ablation(const dsi_bench_ablation_opts *o);
/* cmd_tokenize.c; argv holds the options only (after "tokenize", or after
 * "bench tokenizer" for the benchmark) */
int dsi_cmd_tokenize(int argc, char **argv);
int dsi_cmd_detokenize(int argc, char **argv);
int dsi_cmd_bench_tokenizer(int argc, char **argv);
/* cmd_bench_serve.c: the scheduler under a synthetic load */
int dsi_cmd_bench_serve(int argc, char **argv);
/* cmd_run.c: text in, text out */
int dsi_cmd_run(int argc, char **argv);
int dsi_cmd_chat(int argc, char **argv);
/* cmd_serve.c: the OpenAI-compatible server */
int dsi_cmd_serve(int argc, char **argv);

#endif
