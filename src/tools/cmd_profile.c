/* tools: `dsinfer profile` — one prefill and G decode steps with the
 * profiler on: prints where each phase's time went (per category, beside
 * the machine's peaks, and the dispatch share) and writes a Chrome trace. */
#include <stdio.h>
#include <stdlib.h>

#include "dsinfer.h"
#include "tools/cli.h"
#include "tools/commands.h"

int dsi_cmd_profile(int argc, char **argv) {
  const char *model = NULL, *out = "dsinfer-trace.json";
  int P = 64, G = 16, B = 1, no_peaks = 0, act;
  run_opts ro = {.profile = 1};
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "checkpoint directory"},
    {"--prompt-len", NULL, OPT_INT, &P, "prompt tokens per sequence (default 64)", 1, DSI_CLI_MAX_TOKENS},
    {"--gen-len", NULL, OPT_INT, &G, "decode steps (default 16)", 0, DSI_CLI_MAX_TOKENS},
    {"--batch", NULL, OPT_INT, &B, "sequences run together (default 1)", 1, 256},
    {"--out", NULL, OPT_STR, &out, "Chrome trace file (default dsinfer-trace.json)"},
    {"--no-peaks", NULL, OPT_FLAG, &no_peaks, "skip measuring the machine's peaks (no %bw, %amx columns)"},
    RUN_OPTS(ro),
    {0}};
  int rc = dsi_cli_parse("profile", "--model DIR [--prompt-len P] [--gen-len G] [--batch B] [--threads N] [--out FILE]",
                         opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!model) return dsi_cli_usage_error("profile", "--model is required");
  if (P < 1 || G < 0 || B < 1 || B > 256)
    return dsi_cli_usage_error("profile", "--prompt-len >= 1, --gen-len >= 0, --batch in 1..256");
  if ((rc = dsi_cli_check_run_opts("profile", &ro, &act))) return rc;
  dsi_peaks pk;
  if (!no_peaks) {
    dsi_measure_peaks(ro.threads, &pk);
    dsi_reset_peak_rss();
  }
  ro.kv_blocks = (P + G + 64) / 64 * B + B;
  dsi_model *m;
  dsi_engine *e;
  int max_tokens = (int64_t)P * B < 4096 ? P * B : 4096;
  if ((rc = dsi_cli_open_engine("profile", model, &ro, act, max_tokens, P + G + 1, "--prompt-len + --gen-len", &m, &e)))
    return rc;
  if (!no_peaks) dsi_engine_profile_set_peaks(e, &pk);
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  /* a warm-up first, at the profile's prompt length: page faults (the
   * activation arena grows to the prompt's bucket on its first step: 200 MB
   * of q_b's output for a 2048-token prompt of V3's 128 heads) and cold
   * caches are not the profile */
  dsi_bench_result r;
  dsi_err berr = {0};
  rc = dsi_bench_run(e, info.vocab_size, P, G < 2 ? G : 2, B, 99, &r, &berr);
  dsi_engine_profile_reset(e);
  if (!rc) rc = dsi_bench_run(e, info.vocab_size, P, G, B, 1, &r, &berr);
  if (rc) {
    fprintf(stderr, "dsinfer profile: %s\n", berr.msg);
  } else {
    printf("model %s (%s weights), isa %s; %d sequence(s) x %d prompt tokens, %d decode steps\n", model,
           info.weight_dtype, dsi_engine_isa(e), B, P, G);
    dsi_engine_profile_summary(e, stdout);
    dsi_plan_info pi;
    if (ro.exec_mode == DSI_EXEC_GRAPH && !dsi_engine_plan_info(e, B, &pi))
      printf("\ngraph plan for a decode step (bucket %d): %d ops (%d fused away), %d waits; activation arena "
             "%.2f MB planned vs %.2f MB for every intermediate on its own\n",
             pi.bucket, pi.n_ops, pi.n_fused, pi.n_waits, pi.arena_bytes / 1e6, pi.intermediates_bytes / 1e6);
    dsi_err err = {0};
    if (dsi_engine_profile_write(e, out, &err)) {
      fprintf(stderr, "dsinfer profile: %s\n", err.msg);
      rc = 1;
    } else {
      printf("\ntrace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", out);
    }
  }
  dsi_engine_free(e);
  dsi_model_free(m);
  return rc ? 1 : 0;
}
