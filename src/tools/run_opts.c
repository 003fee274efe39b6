/* tools: the options shared by the commands that run a model, and opening
 * the model and the engine with them (see run_opts.h). */
#include <stdio.h>
#include <string.h>

#include "tools/run_opts.h"

int dsi_run_opts_check(const char *cmd, dsi_run_opts *r) {
  if (r->threads < 0) return dsi_cli_usage_error(cmd, "--threads must be >= 0");
  if (r->op_opt && strcmp(r->op_opt, "on") && strcmp(r->op_opt, "off"))
    return dsi_cli_usage_error(cmd, "--op-opt must be on or off, got '%s'", r->op_opt);
  r->op_opt_off = r->op_opt && !strcmp(r->op_opt, "off");
  r->act = DSI_ACT_AUTO;
  if (r->precision) {
    if (!strcmp(r->precision, "f32")) r->act = DSI_ACT_F32;
    else if (!strcmp(r->precision, "bf16")) r->act = DSI_ACT_BF16;
    else if (strcmp(r->precision, "auto"))
      return dsi_cli_usage_error(cmd, "--precision must be auto, f32 or bf16, got '%s'", r->precision);
  }
  return 0;
}

int dsi_run_open_model(const char *cmd, const char *dir, const dsi_run_opts *r, dsi_model **m) {
  dsi_err err = {0};
  dsi_load_opts lo = {.mlock = r->mlock, .progress = 1, .n_threads = r->threads, .op_opt_off = r->op_opt_off};
  if (dsi_model_open(m, dir, &lo, &err)) {
    fprintf(stderr, "dsinfer %s: %s\n", cmd, err.msg);
    return 1;
  }
  return 0;
}

int dsi_run_open_engine(const char *cmd, dsi_model *m, const dsi_run_opts *r, dsi_engine_opts eo, dsi_engine **e) {
  dsi_err err = {0};
  eo.n_threads = r->threads;
  eo.act_precision = r->act;
  if (dsi_engine_open(e, m, &eo, &err)) {
    fprintf(stderr, "dsinfer %s: %s\n", cmd, err.msg);
    return 1;
  }
  return 0;
}
