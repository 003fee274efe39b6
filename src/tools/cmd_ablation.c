/* tools: `dsinfer bench --model DIR --ablation` — the tuning study's table
 * for this machine: the same workload with its steps turned on one by one
 * (eager; graph; + streams; + op-level), per stage the medians and spread
 * of prefill and decode tokens/s, ms per token, peak RSS, dispatch share,
 * compute and bandwidth utilization, and the gain over the stage before. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsinfer.h"
#include "tools/commands.h"

typedef struct {
  const char *name;
  int exec, streams, op_opt;
} stage;

static const stage k_stages[] = {
  {"eager", DSI_EXEC_EAGER, 1, 0},
  {"graph", DSI_EXEC_GRAPH, 1, 0},
  {"streams", DSI_EXEC_GRAPH, 2, 0},
  {"op-opt", DSI_EXEC_GRAPH, 2, 1},
};
#define N_STAGES (int)(sizeof k_stages / sizeof *k_stages)
#define MAX_REPS 64

typedef struct {
  double pre, pre_lo, pre_hi, dec, dec_lo, dec_hi, ms;
  size_t rss;
  double disp_dec, disp_pre, compute_util, bw_util;
  dsi_plan_info plan_dec;
} stage_result;

static void spread(const double *v, int n, double *lo, double *hi) {
  *lo = *hi = v[0];
  for (int i = 1; i < n; i++) {
    if (v[i] < *lo) *lo = v[i];
    if (v[i] > *hi) *hi = v[i];
  }
}

static int run_stage(const stage *s, dsi_model *m, int vocab, const dsi_bench_ablation_opts *o, const dsi_peaks *pk,
                     stage_result *r) {
  dsi_err err = {0};
  dsi_engine *e;
  dsi_reset_peak_rss();
  dsi_engine_opts eo = {.n_threads = o->threads, .max_tokens = 512, .max_context = o->P + o->G + 1,
                        .act_precision = o->act, .kv_blocks = (o->P + o->G + 64) / 64 * o->B + o->B, .profile = 1,
                        .exec = s->exec, .streams = s->streams};
  if (dsi_engine_open(&e, m, &eo, &err)) {
    fprintf(stderr, "dsinfer bench: %s: %s\n", s->name, err.msg);
    return 1;
  }
  dsi_bench_result warm, rr;
  int rc = dsi_bench_run(e, vocab, o->P < 16 ? o->P : 16, o->G < 2 ? o->G : 2, o->B, 99, &warm);
  dsi_engine_profile_reset(e);
  double pre[MAX_REPS], dec[MAX_REPS], ms[MAX_REPS];
  for (int i = 0; i < o->reps && !rc; i++) {
    rc = dsi_bench_run(e, vocab, o->P, o->G, o->B, (uint64_t)i + 1, &rr);
    pre[i] = rr.prefill_tps;
    dec[i] = rr.decode_tps;
    ms[i] = rr.ms_per_token;
  }
  if (rc) {
    fprintf(stderr, "dsinfer bench: %s: %s\n", s->name, dsi_engine_error(e)->msg);
    dsi_engine_free(e);
    return 1;
  }
  spread(pre, o->reps, &r->pre_lo, &r->pre_hi);
  spread(dec, o->reps, &r->dec_lo, &r->dec_hi);
  r->pre = dsi_median(pre, o->reps);
  r->dec = dsi_median(dec, o->reps);
  r->ms = dsi_median(ms, o->reps);
  r->rss = dsi_peak_rss();
  dsi_phase_stats ps, ds;
  dsi_engine_profile_stats(e, 1, &ps);
  dsi_engine_profile_stats(e, 0, &ds);
  r->disp_pre = ps.dispatch_share;
  r->disp_dec = ds.dispatch_share;
  r->compute_util = pk->amx_bf16_gflops > 0 && ps.wall_s > 0 ? ps.flops / ps.wall_s / (pk->amx_bf16_gflops * 1e9) : NAN;
  r->bw_util = ds.wall_s > 0 ? (ds.weight_bytes + ds.act_bytes) / ds.wall_s / (pk->read_gbs * 1e9) : NAN;
  memset(&r->plan_dec, 0, sizeof r->plan_dec);
  if (s->exec == DSI_EXEC_GRAPH) dsi_engine_plan_info(e, o->B, &r->plan_dec);
  dsi_engine_free(e);
  return 0;
}

static void json_num(const char *key, double v, int last) {
  if (isnan(v)) printf("\"%s\":null%s", key, last ? "" : ",");
  else printf("\"%s\":%.5g%s", key, v, last ? "" : ",");
}

int dsi_bench_ablation(const dsi_bench_ablation_opts *o) {
  dsi_peaks pk;
  dsi_measure_peaks(o->threads, &pk);
  stage_result res[N_STAGES];
  dsi_model *m = NULL;
  int loaded_op_opt = -1, rc = 0, vocab = 0;
  for (int i = 0; i < N_STAGES && !rc; i++) {
    const stage *s = &k_stages[i];
    if (s->op_opt != loaded_op_opt) { /* the op-level stage packs the weights at load */
      dsi_model_free(m);
      m = NULL;
      dsi_err err = {0};
      dsi_load_opts lo = {.n_threads = o->threads, .op_opt_off = !s->op_opt};
      if (dsi_model_open(&m, o->model, &lo, &err)) {
        fprintf(stderr, "dsinfer bench: %s\n", err.msg);
        return 1;
      }
      dsi_model_info info;
      dsi_model_get_info(m, &info);
      vocab = info.vocab_size;
      loaded_op_opt = s->op_opt;
    }
    if (!o->json) fprintf(stderr, "stage %s ...\n", s->name);
    rc = run_stage(s, m, vocab, o, &pk, &res[i]);
  }
  dsi_model_free(m);
  if (rc) return 1;
  if (o->json) {
    printf("[");
    for (int i = 0; i < N_STAGES; i++) {
      const stage_result *r = &res[i];
      printf("%s{\"stage\":\"%s\",\"exec\":\"%s\",\"streams\":%d,\"op_opt\":%s,", i ? "," : "", k_stages[i].name,
             k_stages[i].exec == DSI_EXEC_EAGER ? "eager" : "graph", k_stages[i].streams,
             k_stages[i].op_opt ? "true" : "false");
      json_num("prefill_tokens_per_s", r->pre, 0);
      json_num("prefill_min", r->pre_lo, 0);
      json_num("prefill_max", r->pre_hi, 0);
      json_num("decode_tokens_per_s", r->dec, 0);
      json_num("decode_min", r->dec_lo, 0);
      json_num("decode_max", r->dec_hi, 0);
      json_num("ms_per_token", r->ms, 0);
      printf("\"peak_rss_bytes\":%zu,", r->rss);
      json_num("dispatch_share", r->disp_dec, 0);
      json_num("prefill_dispatch_share", r->disp_pre, 0);
      json_num("compute_util", r->compute_util, 0);
      json_num("bandwidth_util", r->bw_util, 0);
      json_num("prefill_gain", i ? r->pre / res[i - 1].pre : NAN, 0);
      json_num("decode_gain", i ? r->dec / res[i - 1].dec : NAN, 0);
      printf("\"prompt_len\":%d,\"gen_len\":%d,\"batch\":%d,\"reps\":%d,\"threads\":%d}", o->P, o->G, o->B, o->reps,
             pk.threads);
    }
    printf("]\n");
    return 0;
  }
  printf("ablation: %s, %d sequence(s) x %d prompt tokens, %d decode steps, %d threads; median of %d runs (min..max)\n",
         o->model, o->B, o->P, o->G, pk.threads, o->reps);
  printf("peaks: read %.1f GB/s, AMX BF16 %.0f GFLOP/s\n", pk.read_gbs, pk.amx_bf16_gflops);
  printf("%-8s %22s %22s %9s %8s %9s %9s %8s %8s %13s\n", "stage", "prefill tok/s", "decode tok/s", "ms/token",
         "RSS MB", "dispatch", "(prefill)", "compute", "bw", "gain pre/dec");
  for (int i = 0; i < N_STAGES; i++) {
    const stage_result *r = &res[i];
    char a[32], b[32], g[32] = "-";
    snprintf(a, sizeof a, "%.0f (%.0f..%.0f)", r->pre, r->pre_lo, r->pre_hi);
    snprintf(b, sizeof b, "%.2f (%.2f..%.2f)", r->dec, r->dec_lo, r->dec_hi);
    if (i) snprintf(g, sizeof g, "%.2fx/%.2fx", r->pre / res[i - 1].pre, r->dec / res[i - 1].dec);
    printf("%-8s %22s %22s %9.2f %8.0f %8.1f%% %8.1f%% %7.1f%% %7.1f%% %13s\n", k_stages[i].name, a, b, r->ms,
           r->rss / 1e6, 100 * r->disp_dec, 100 * r->disp_pre, 100 * r->compute_util, 100 * r->bw_util, g);
  }
  printf("dispatch: share of decode step wall time outside any op (prefill in parentheses); compute: prefill\n"
         "FLOP/s / AMX peak; bw: decode bytes moved / read bandwidth; gain: over the stage before.\n");
  const dsi_plan_info *pl = &res[N_STAGES - 1].plan_dec;
  printf("graph plan at batch %d: bucket %d, %d ops (%d fused away), %d waits; activation arena %.2f MB "
         "planned vs %.2f MB for every intermediate on its own\n",
         o->B, pl->bucket, pl->n_ops, pl->n_fused, pl->n_waits, pl->arena_bytes / 1e6, pl->intermediates_bytes / 1e6);
  return 0;
}
