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
/* "1,2,3" -> ints; returns count, or -1 on a malformed list */
int dsi_cli_parse_ids(const char *s, int32_t **out);

/* Options every command that runs the model shares (cmd_model.c). */
typedef struct {
  int threads, mlock, op_opt_off, quant_mode;
  const char *precision, *op_opt, *quant, *exec;
  int exec_mode, streams;
  int profile;   /* set by the command: open the engine with the profiler on */
  int kv_blocks; /* set by the command: KV blocks (0 = the engine's default) */
} run_opts;

#define RUN_OPTS(r)                                                                                    \
  {"--threads", NULL, OPT_INT, &(r).threads, "worker threads (default: all cores)"},                   \
  {"--mlock", NULL, OPT_FLAG, &(r).mlock, "lock the file mapping and compute from it (row-major)"},   \
  {"--op-opt", NULL, OPT_STR, &(r).op_opt, "on: pack weights into the kernels' layout (default); off: keep row-major"}, \
  {"--precision", NULL, OPT_STR, &(r).precision, "activations into matmuls: auto | f32 | bf16 (default auto: bf16 where AMX or AVX512-BF16 runs)"}, \
  {"--quant", NULL, OPT_STR, &(r).quant, "none | int8: quantize the packed weights while loading (default none)"}, \
  {"--exec", NULL, OPT_STR, &(r).exec, "graph: replay a plan captured per shape bucket (default); eager: op by op"}, \
  {"--streams", NULL, OPT_INT, &(r).streams, "1, or 2: shared expert beside routed experts, q beside kv (default 1)"}

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

/* check the shared options; *act gets DSI_ACT_*; returns 0 or a usage error's exit code */
int dsi_cli_check_run_opts(const char *cmd, run_opts *r, int *act);
/* Load the model and open an engine; prints the error and returns 1 on failure. */
typedef struct dsi_model dsi_model;
typedef struct dsi_engine dsi_engine;
int dsi_cli_open_engine(const char *cmd, const char *dir, const run_opts *r, int act, int max_tokens,
                        int max_context, dsi_model **m, dsi_engine **e);
/* The same in two steps, for a command that sizes the engine from the model:
 * load (1 on failure, printed), then open an engine on it (1 on failure,
 * printed; the model stays the caller's). */
int dsi_cli_open_model(const char *cmd, const char *dir, const run_opts *r, dsi_model **m);
int dsi_cli_engine_on(const char *cmd, dsi_model *m, const run_opts *r, int act, int max_tokens, int max_context,
                      dsi_engine **e);

#endif
