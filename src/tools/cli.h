/* tools: a small table-driven option parser shared by every subcommand:
 * `--name value` or `--name=value`, --help, and a one-line usage error
 * (exit code 2) for anything it does not know. */
#ifndef DSI_CLI_H
#define DSI_CLI_H

#include <stdint.h>

typedef enum { OPT_STR, OPT_INT, OPT_FLOAT, OPT_U64, OPT_FLAG, OPT_LIST } dsi_opt_type;

typedef struct dsi_opt {
  const char *name;  /* "--model"; "-n" allowed too */
  const char *alias; /* second spelling or NULL */
  dsi_opt_type type;
  void *dst;         /* char**, int*, float*, uint64_t*, int* (flag), dsi_strlist* */
  const char *help;
  double lo, hi;     /* OPT_INT, OPT_FLOAT: the range accepted; both 0 (left out): from 0 to
                        INT_MAX, or to FLT_MAX; NaN and infinity never */
} dsi_opt;

typedef struct dsi_strlist {
  char **v;
  int n;
} dsi_strlist;

/* Returns 0 to go on, 1 when --help was printed (exit 0), 2 after a usage
 * error was printed (exit 2). */
int dsi_cli_parse(const char *cmd, const char *synopsis, const dsi_opt *opts, int argc, char **argv);
/* print "dsinfer CMD: MSG" and the --help hint; returns 2 */
int dsi_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Numbers, one parser per type: the whole text (blanks around it allowed),
 * in [lo, hi]; otherwise a usage error naming the flag and the range is
 * printed and 2 returned. */
int dsi_cli_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi, long long *out);
int dsi_cli_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
int dsi_cli_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);
/* "1,2,3" (blanks around each allowed) -> ids in [0, INT32_MAX]; returns
 * the count, or -1 after printing a usage error naming flag and the item */
int dsi_cli_parse_ids(const char *cmd, const char *flag, const char *s, int32_t **out);
/* Open an input file named by flag for reading: "-" is stdin, else a
 * regular file (or a link to one): never a FIFO, device or folder. NULL
 * after printing why. */
#include <stdio.h>
FILE *dsi_cli_open_input(const char *cmd, const char *path);
/* The most worker threads an option may ask for: 8 per core. */
int dsi_cli_max_threads(void);
/* Flush stdout and check that everything written reached it: 0, or 1
 * after printing what failed ("dsinfer CMD: writing the output: No space
 * left on device"). */
int dsi_cli_finish_output(const char *cmd);

/* Token counts an option may give (no model's context is longer): sums of
 * a few of them stay far inside an int. */
#define DSI_CLI_MAX_TOKENS (1 << 24)

/* The sampling options of run, chat and generate, into a dsi_sampling. */
#define SAMPLING_OPTS(sp)                                                                                      \
  {"--temperature", NULL, OPT_FLOAT, &(sp).temperature, "sampling temperature; 0 = greedy (default: generation_config.json's, else 0)", 0, 100}, \
  {"--top-p", NULL, OPT_FLOAT, &(sp).top_p, "nucleus sampling mass, in (0, 1] (default: generation_config.json's, else 1 = off)", 0, 1},        \
  {"--top-k", NULL, OPT_INT, &(sp).top_k, "sample among the K most likely (default: generation_config.json's, else 0 = off)", 0, DSI_CLI_MAX_TOKENS}, \
  {"--seed", NULL, OPT_U64, &(sp).seed, "random seed (default 0)", 0, 0}

/* The checkpoint's generation_config.json under what the command line left
 * out: sp's temperature, top_p, top_k < 0 and *n < 0 (not given) take its
 * values, else greedy, 1, 0 and n_default. 0, or 1 after printing why the
 * file is bad. */
typedef struct dsi_sampling dsi_sampling;
int dsi_cli_gen_defaults(const char *cmd, const char *model, dsi_sampling *sp, int *n, int n_default);
#define SAMPLING_UNSET {.temperature = -1, .top_p = -1, .top_k = -1, .seed = 0}

/* How the ranks under mpirun share the model: attention heads over tp
 * ranks, routed experts over ep (1: not split; either is 1 or all ranks),
 * and DSI_TP_TO_EP_* between attention and the FFN. */
typedef struct {
  int tp, ep, tp_to_ep;
  const char *tp_to_ep_s; /* the option's text */
  const char *overlap_s;  /* --overlap on|off */
  int overlap;
  const char *two_batch_s; /* --two-batch-min N */
  int two_batch_min;
  const char *attn_s;     /* --attn tp|dp */
  int attn_dp;
  int comm_timeout;       /* seconds a collective may wait for the other ranks (0: 300) */
  const char *lm_head_s;  /* --lm-head whole|split */
  int vocab_split;        /* lm_head split by vocabulary over the ranks */
} dsi_cli_par;

#define PAR_OPTS(p)                                                                                            \
  {"--tp", NULL, OPT_INT, &(p).tp, "tensor-parallel ranks for attention, under mpirun -np N: 1 (default) or N", 0, 4096}, \
  {"--ep", NULL, OPT_INT, &(p).ep, "expert-parallel ranks for the MoE, under mpirun -np N: 1 or N (default N)", 0, 4096}, \
  {"--tp-to-ep", NULL, OPT_STR, &(p).tp_to_ep_s, "with --tp N: rs-ag (reduce-scatter, FFN on 1/N of the tokens, all-gather; default) | allreduce (all-reduce, split, all-gather)"}, \
  {"--attn", NULL, OPT_STR, &(p).attn_s, "under mpirun: tp (default: heads as --tp says) | dp: each rank the whole attention of its own sequences, meeting at the experts"}, \
  {"--overlap", NULL, OPT_STR, &(p).overlap_s, "under mpirun: on runs the collectives on a communication thread beside the compute (the shared expert beside the expert dispatch); off (default)"}, \
  {"--two-batch-min", NULL, OPT_STR, &(p).two_batch_s, "with --overlap on: steps of at least N tokens over two or more sequences run as two micro-batches, one computing while the other's collectives are in flight (default 256; 0: never)"}, \
  {"--lm-head", NULL, OPT_STR, &(p).lm_head_s, "under mpirun: split (default, but under --attn dp): each rank 1/N of lm_head's vocabulary rows, the logits' columns gathered to rank 0 | whole: rank 0 holds lm_head and computes the logits"}, \
  {"--comm-timeout", NULL, OPT_INT, &(p).comm_timeout, "under mpirun: seconds a step's collective waits for a hung or dead rank before naming it and ending every rank (default 300)", 1, 86400}

/* check p against the ranks this run has; 0 or a usage error's exit code */
int dsi_cli_check_par(const char *cmd, dsi_cli_par *p);

/* Options every command that runs the model shares (cmd_model.c). */
typedef struct {
  int threads, mlock, op_opt_off, quant_mode, quant_head_mode, allow_nonfinite, kv_mode;
  const char *precision, *op_opt, *quant, *quant_head, *exec, *kv_dtype;
  int exec_mode, streams;
  int profile;   /* set by the command: open the engine with the profiler on */
  int kv_blocks; /* set by the command: KV blocks (0 = the engine's default; -1 = one full context
                    of the context the engine gets, with a block to spare) */
  dsi_cli_par par; /* under mpirun */
} run_opts;

#define QUANT_HEAD_HELP "with --quant: what lm_head becomes, int8 (default) | int4 (fewer bytes a decode token, for accuracy) | none (kept as stored)"

#define RUN_OPTS(r)                                                                                    \
  {"--threads", NULL, OPT_INT, &(r).threads, "worker threads (default: all cores)", 0, dsi_cli_max_threads()},                   \
  {"--mlock", NULL, OPT_FLAG, &(r).mlock, "lock the file mapping and compute from it (row-major)"},   \
  {"--op-opt", NULL, OPT_STR, &(r).op_opt, "on: pack weights into the kernels' layout (default); off: keep row-major"}, \
  {"--precision", NULL, OPT_STR, &(r).precision, "activations into matmuls: auto | f32 | bf16 (default auto: bf16 where AMX or AVX512-BF16 runs)"}, \
  {"--quant", NULL, OPT_STR, &(r).quant, "none | int8 | int4: quantize the packed weights while loading (default none)"}, \
  {"--quant-head", NULL, OPT_STR, &(r).quant_head, QUANT_HEAD_HELP}, \
  {"--kv-dtype", NULL, OPT_STR, &(r).kv_dtype, "auto | bf16 | f32: what the KV cache holds (default auto: bf16, as DeepSeek caches it, but under --precision f32 or row-major weights)"}, \
  {"--exec", NULL, OPT_STR, &(r).exec, "graph: replay a plan captured per shape bucket (default); eager: op by op"}, \
  {"--streams", NULL, OPT_INT, &(r).streams, "1, or 2: shared expert beside routed experts, q beside kv (default 1)", 0, 2}, \
  {"--allow-nonfinite", NULL, OPT_FLAG, &(r).allow_nonfinite, "load weights that hold NaN or infinity (a warning, not an error)", 0, 0}, \
  PAR_OPTS((r).par)

/* The environment variables a user may set, mapped onto the options (the
 * library reads no environment): DSINFER_ISA (a kernel level cap),
 * DSINFER_MLA (absorb | naive | auto), DSINFER_STREAM_TEAM_MIN (workers a
 * stream's team needs), DSINFER_NO_HUGEPAGE; a value it does not know is
 * a warning and left out. lo or eo may be NULL. */
typedef struct dsi_load_opts dsi_load_opts;
typedef struct dsi_engine_opts dsi_engine_opts;
void dsi_cli_env_opts(dsi_load_opts *lo, dsi_engine_opts *eo);
/* DSINFER_NO_JIT set: DSI_TOK_NO_JIT, for dsi_tok_open (PCRE2's interpreter instead of its JIT) */
int dsi_cli_tok_flags(void);

/* --quant's value as DSI_QUANT_* (NULL: none); -1 when it is not one */
int dsi_cli_quant_mode(const char *s);
/* check --quant and --quant-head into *quant, *head; 0 or a usage error's exit code */
int dsi_cli_check_quant(const char *cmd, const char *quant_s, const char *head_s, int *quant, int *head);
/* --kv-dtype's value as DSI_KV_* (NULL: auto); -1 when it is not one */
int dsi_cli_kv_dtype(const char *s);
/* --precision's value s (NULL: auto) into *act as DSI_ACT_*; returns 0, or
 * the usage error's exit code when it is not one */
int dsi_cli_precision(const char *cmd, const char *s, int *act);
/* the --precision value that names DSI_ACT_* act */
const char *dsi_cli_precision_name(int act);
/* check the shared options; *act gets DSI_ACT_*; returns 0 or a usage error's exit code */
int dsi_cli_check_run_opts(const char *cmd, run_opts *r, int *act);
/* The processes of this run (main.c: a world of one outside mpirun). */
typedef struct dsi_dist dsi_dist;
extern dsi_dist *dsi_cli_dist;

/* Load the model and open an engine for max_context tokens a sequence (0:
 * the engine's default). A context over the model's max_position_embeddings
 * is an error naming ctx_what ("--ctx") when given, else cut to the
 * model's. Prints the error and returns 1 on failure, with *m and *e NULL.
 * Under mpirun, ranks other than 0 load their share, follow rank 0's steps
 * and exit here. */
typedef struct dsi_model dsi_model;
typedef struct dsi_engine dsi_engine;
int dsi_cli_open_engine(const char *cmd, const char *dir, const run_opts *r, int act, int max_tokens,
                        int64_t max_context, const char *ctx_what, dsi_model **m, dsi_engine **e);
/* the same from load and engine options the command made itself, the
 * ranks sharing the model as par says (NULL: this process alone) */
int dsi_cli_open(const char *cmd, const char *dir, dsi_load_opts *lo, dsi_engine_opts *eo, const dsi_cli_par *par,
                 dsi_model **m, dsi_engine **e);
/* In two steps, for a command that sizes the engine from the model:
 * load (1 on failure, printed), then open an engine on it (1 on failure,
 * printed; the model stays the caller's). */
int dsi_cli_open_model(const char *cmd, const char *dir, const run_opts *r, dsi_model **m);
int dsi_cli_engine_on(const char *cmd, dsi_model *m, const run_opts *r, int act, int max_tokens, int max_context,
                      dsi_engine **e);

#endif
