/* tools: the options every command that runs a model shares (--threads,
 * --mlock, --op-opt, --precision), their checks, and opening the model
 * and an engine with them. */
#ifndef DSI_RUN_OPTS_H
#define DSI_RUN_OPTS_H

#include "dsinfer.h"
#include "tools/cli.h"

typedef struct dsi_run_opts {
  int threads, mlock, op_opt_off;
  const char *precision, *op_opt;
  int act; /* DSI_ACT_*, set by dsi_run_opts_check */
} dsi_run_opts;

#define DSI_RUN_OPTS(r)                                                                                \
  {"--threads", NULL, OPT_INT, &(r).threads, "worker threads (default: all cores)"},                   \
  {"--mlock", NULL, OPT_FLAG, &(r).mlock, "lock the file mapping and compute from it (row-major)"},   \
  {"--op-opt", NULL, OPT_STR, &(r).op_opt, "on: pack weights into the kernels' layout (default); off: keep row-major"}, \
  {"--precision", NULL, OPT_STR, &(r).precision, "activations into matmuls: auto | f32 | bf16 (default auto: bf16 where AMX runs)"}

/* Check the shared options; returns 0 or a usage error's exit code (2). */
int dsi_run_opts_check(const char *cmd, dsi_run_opts *r);
/* Load the model; prints "dsinfer CMD: <cause>" and returns 1 on failure. */
int dsi_run_open_model(const char *cmd, const char *dir, const dsi_run_opts *r, dsi_model **m);
/* Open an engine on m (threads and precision from r, the rest from eo);
 * prints the cause and returns 1 on failure. */
int dsi_run_open_engine(const char *cmd, dsi_model *m, const dsi_run_opts *r, dsi_engine_opts eo, dsi_engine **e);

#endif
