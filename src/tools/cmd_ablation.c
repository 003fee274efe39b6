/* tools: `dsinfer bench --model DIR --ablation` — the tuning study's table
 * for this machine: the same workload with its steps turned on one by one
 * (eager; graph; + streams; + op-level), per stage the medians and spread
 * of prefill and decode tokens/s, ms per token, peak RSS, dispatch share,
 * compute and bandwidth utilization, and the gain over the stage before.
 * Under mpirun, with the heads and experts split over the ranks, the
 * study's two communication stages follow: the TP->EP restructure
 * (all-reduce + split -> reduce-scatter) and overlap (collectives on a
 * communication thread), then two micro-batches per step (with --batch 2
 * or more), with the time in collectives, the share of it beside compute
 * and the bytes sent per step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "dist/dist.h"
#include "dsinfer.h"
#include "tools/cli.h"
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

/* a stage's medians and spread over its repetitions */
typedef struct {
  double pre, pre_lo, pre_hi, dec, dec_lo, dec_hi;
} speeds;

typedef struct {
  speeds sp;
  double ms;
  size_t rss;
  double disp_dec, disp_pre, compute_util, bw_util;
  const char *peak_name; /* the matrix peak the last stage's matmuls run at (dsi_engine_matrix_peak) */
  double peak;
  dsi_plan_info plan_dec;
} stage_result;

static void spread(const double *v, int n, double *lo, double *hi) {
  *lo = *hi = v[0];
  for (int i = 1; i < n; i++) {
    if (v[i] < *lo) *lo = v[i];
    if (v[i] > *hi) *hi = v[i];
  }
}

static void take_speeds(double *pre, double *dec, int reps, speeds *x) { /* sorts them */
  spread(pre, reps, &x->pre_lo, &x->pre_hi);
  spread(dec, reps, &x->dec_lo, &x->dec_hi);
  x->pre = dsi_median(pre, reps);
  x->dec = dsi_median(dec, reps);
}

static dsi_engine *open_stage(const stage *s, dsi_model *m, const dsi_bench_ablation_opts *o) {
  dsi_err err = {0};
  dsi_engine *e;
  dsi_engine_opts eo = {.n_threads = o->threads, .max_tokens = 512, .max_context = o->P + o->G + 1,
                        .act_precision = o->act, .kv_blocks = (o->P + o->G + 64) / 64 * o->B + o->B, .profile = 1,
                        .exec = s->exec, .streams = s->streams};
  dsi_cli_env_opts(NULL, &eo);
  if (dsi_engine_open(&e, m, &eo, &err)) {
    fprintf(stderr, "dsinfer bench: %s: %s\n", s->name, err.msg);
    return NULL;
  }
  return e;
}

static int load(const char *dir, int op_opt, int threads, dsi_model **m, int *vocab) {
  dsi_err err = {0};
  dsi_load_opts lo = {.n_threads = threads, .op_opt_off = !op_opt};
  dsi_cli_env_opts(&lo, NULL);
  if (dsi_model_open(m, dir, &lo, &err)) {
    fprintf(stderr, "dsinfer bench: %s\n", err.msg);
    return 1;
  }
  dsi_model_info info;
  dsi_model_get_info(*m, &info);
  *vocab = info.vocab_size;
  return 0;
}

/* pass 1, one stage at a time: its peak RSS (its weights, one engine) */
static int measure_rss(const dsi_bench_ablation_opts *o, stage_result *res) {
  dsi_model *m = NULL;
  int loaded = -1, vocab = 0, rc = 0;
  for (int i = 0; i < N_STAGES && !rc; i++) {
    const stage *s = &k_stages[i];
    if (s->op_opt != loaded) {
      dsi_model_free(m);
      m = NULL;
      dsi_reset_peak_rss();
      if (load(o->model, s->op_opt, o->threads, &m, &vocab)) return 1;
      loaded = s->op_opt;
    }
    dsi_engine *e = open_stage(s, m, o);
    dsi_bench_result r;
    dsi_err berr = {0};
    if (e && dsi_bench_run(e, vocab, o->P, o->G < 2 ? o->G : 2, o->B, 99, &r, &berr))
      fprintf(stderr, "dsinfer bench: %s: %s\n", s->name, berr.msg);
    if (!e || berr.msg[0]) rc = 1;
    res[i].rss = dsi_peak_rss();
    dsi_engine_free(e);
  }
  dsi_model_free(m);
  return rc;
}

/* pass 2: every stage's engine open at once, repetitions taken in turn, so
 * a noisy moment of the machine falls on all stages alike */
static int measure_speed(const dsi_bench_ablation_opts *o, const dsi_peaks *pk, stage_result *res) {
  dsi_model *m[2] = {NULL, NULL};
  dsi_engine *e[N_STAGES] = {NULL};
  int vocab = 0, rc = 0;
  for (int i = 0; i < N_STAGES && !rc; i++) {
    int k = k_stages[i].op_opt;
    if (!m[k] && load(o->model, k, o->threads, &m[k], &vocab)) rc = 1;
    if (!rc && !(e[i] = open_stage(&k_stages[i], m[k], o))) rc = 1;
  }
  dsi_bench_result rr;
  dsi_err berr = {0};
  for (int i = 0; i < N_STAGES && !rc; i++) { /* warm-up: pages, caches, plans */
    if ((rc = dsi_bench_run(e[i], vocab, o->P, o->G < 2 ? o->G : 2, o->B, 99, &rr, &berr)))
      fprintf(stderr, "dsinfer bench: %s: %s\n", k_stages[i].name, berr.msg);
    dsi_engine_profile_reset(e[i]);
  }
  double pre[N_STAGES][MAX_REPS], dec[N_STAGES][MAX_REPS], ms[N_STAGES][MAX_REPS];
  for (int r = 0; r < o->reps && !rc; r++)
    for (int i = 0; i < N_STAGES && !rc; i++) {
      if ((rc = dsi_bench_run(e[i], vocab, o->P, o->G, o->B, (uint64_t)r + 1, &rr, &berr)))
        fprintf(stderr, "dsinfer bench: %s: %s\n", k_stages[i].name, berr.msg);
      pre[i][r] = rr.prefill_tps;
      dec[i][r] = rr.decode_tps;
      ms[i][r] = rr.ms_per_token;
    }
  for (int i = 0; i < N_STAGES && !rc; i++) {
    stage_result *x = &res[i];
    take_speeds(pre[i], dec[i], o->reps, &x->sp);
    x->ms = dsi_median(ms[i], o->reps);
    dsi_phase_stats ps, ds;
    dsi_engine_profile_stats(e[i], 1, &ps);
    dsi_engine_profile_stats(e[i], 0, &ds);
    x->disp_pre = ps.dispatch_share;
    x->disp_dec = ds.dispatch_share;
    const char *pname;
    /* every stage beside the peak the engine as it runs by default (the last stage) multiplies at */
    double mpeak = dsi_engine_matrix_peak(e[N_STAGES - 1], pk, &pname);
    x->peak_name = pname;
    x->peak = mpeak;
    x->compute_util = mpeak > 0 && ps.wall_s > 0 ? ps.flops / ps.wall_s / (mpeak * 1e9) : NAN;
    x->bw_util = ds.wall_s > 0 ? (ds.weight_bytes + ds.act_bytes) / ds.wall_s / (pk->read_gbs * 1e9) : NAN;
    memset(&x->plan_dec, 0, sizeof x->plan_dec);
    if (k_stages[i].exec == DSI_EXEC_GRAPH) dsi_engine_plan_info(e[i], o->B, &x->plan_dec);
  }
  for (int i = 0; i < N_STAGES; i++) dsi_engine_free(e[i]);
  dsi_model_free(m[0]);
  dsi_model_free(m[1]);
  return rc;
}

static void json_num(const char *key, double v, int last) {
  if (isnan(v)) printf("\"%s\":null%s", key, last ? "" : ",");
  else printf("\"%s\":%.5g%s", key, v, last ? "" : ",");
}

/* speeds as JSON fields, and as the table's two columns; prev: the stage before (NULL none) */
static void json_speeds(const speeds *x, const speeds *prev) {
  json_num("prefill_tokens_per_s", x->pre, 0);
  json_num("prefill_min", x->pre_lo, 0);
  json_num("prefill_max", x->pre_hi, 0);
  json_num("decode_tokens_per_s", x->dec, 0);
  json_num("decode_min", x->dec_lo, 0);
  json_num("decode_max", x->dec_hi, 0);
  json_num("prefill_gain", prev ? x->pre / prev->pre : NAN, 0);
  json_num("decode_gain", prev ? x->dec / prev->dec : NAN, 0);
}

static void text_speeds(const speeds *x, const speeds *prev, char a[32], char b[32], char g[32]) {
  snprintf(a, 32, "%.0f (%.0f..%.0f)", x->pre, x->pre_lo, x->pre_hi);
  snprintf(b, 32, "%.2f (%.2f..%.2f)", x->dec, x->dec_lo, x->dec_hi);
  if (prev) snprintf(g, 32, "%.2fx/%.2fx", x->pre / prev->pre, x->dec / prev->dec);
  else snprintf(g, 32, "-");
}

/* ---- under mpirun: the stages one after another, every rank in step ---- */
typedef struct {
  const char *name;
  int exec, streams, op_opt, tp_to_ep, overlap;
  int two_batch_min; /* steps of this many tokens or more (over two sequences or more) as two micro-batches */
} rank_stage;

static const rank_stage k_rank_stages[] = {
  {"eager", DSI_EXEC_EAGER, 1, 0, DSI_TP_TO_EP_ALLREDUCE, 0},
  {"graph", DSI_EXEC_GRAPH, 1, 0, DSI_TP_TO_EP_ALLREDUCE, 0},
  {"streams", DSI_EXEC_GRAPH, 2, 0, DSI_TP_TO_EP_ALLREDUCE, 0},
  {"op-opt", DSI_EXEC_GRAPH, 2, 1, DSI_TP_TO_EP_ALLREDUCE, 0},
  {"tp-to-ep", DSI_EXEC_GRAPH, 2, 1, DSI_TP_TO_EP_RS_AG, 0},
  {"overlap", DSI_EXEC_GRAPH, 2, 1, DSI_TP_TO_EP_RS_AG, 1},
  {"two-batch", DSI_EXEC_GRAPH, 2, 1, DSI_TP_TO_EP_RS_AG, 1, 2}, /* needs --batch 2 or more */
};
#define N_RANK_STAGES (int)(sizeof k_rank_stages / sizeof *k_rank_stages)

typedef struct {
  speeds sp;
  double comm_pre, comm_dec, hidden_dec, mb_dec; /* shares of the step in collectives; beside compute; MB sent */
} rank_result;

static int ablation_ranks(const dsi_bench_ablation_opts *o) {
  const dsi_cli_par *par = o->par;
  dsi_dist *d = dsi_cli_dist;
  int N = dsi_dist_size(d), rank = dsi_dist_rank(d), rc = 0, loaded = -1, vocab = 0;
  dsi_model *m = NULL;
  rank_result res[N_RANK_STAGES];
  memset(res, 0, sizeof res);
  for (int i = 0; i < N_RANK_STAGES && !rc; i++) {
    const rank_stage *s = &k_rank_stages[i];
    dsi_err err = {0};
    if (s->op_opt != loaded) { /* every rank its share of the heads and experts */
      dsi_model_free(m);
      m = NULL;
      dsi_load_opts lo = {.n_threads = o->threads, .op_opt_off = !s->op_opt, .tp_rank = rank, .tp_size = N,
                          .ep_rank = par->ep > 1 ? rank : 0, .ep_size = par->ep > 1 ? N : 1};
      dsi_cli_env_opts(&lo, NULL);
      if (dsi_model_open(&m, o->model, &lo, &err)) {
        fprintf(stderr, "dsinfer bench: rank %d: %s\n", rank, err.msg);
        dsi_dist_abort(d, 1);
      }
      dsi_model_info info;
      dsi_model_get_info(m, &info);
      vocab = info.vocab_size;
      loaded = s->op_opt;
    }
    dsi_engine *e;
    dsi_engine_opts eo = {.n_threads = o->threads, .max_tokens = 512, .max_context = o->P + o->G + 1,
                          .act_precision = o->act, .kv_blocks = (o->P + o->G + 64) / 64 * o->B + o->B,
                          .profile = rank == 0, .exec = s->exec, .streams = s->streams, .dist = d,
                          .tp_to_ep = s->tp_to_ep, .overlap = s->overlap,
                          .two_batch_min = s->two_batch_min};
    dsi_cli_env_opts(NULL, &eo);
    if (dsi_engine_open(&e, m, &eo, &err)) {
      fprintf(stderr, "dsinfer bench: rank %d: %s: %s\n", rank, s->name, err.msg);
      dsi_dist_abort(d, 1);
    }
    if (rank != 0) { /* rank 0's steps until it frees this stage's engine */
      if (dsi_engine_follow(e)) dsi_dist_abort(d, 1);
      dsi_engine_free(e);
      continue;
    }
    if (!o->json) fprintf(stderr, "%s ...\n", s->name);
    dsi_bench_result rr;
    dsi_err berr = {0};
    rc = dsi_bench_run(e, vocab, o->P, o->G < 2 ? o->G : 2, o->B, 99, &rr, &berr); /* warm-up */
    dsi_engine_profile_reset(e);
    memset(d->calls, 0, sizeof d->calls);
    memset(d->bytes, 0, sizeof d->bytes);
    double pre[MAX_REPS], dec[MAX_REPS];
    for (int r = 0; r < o->reps && !rc; r++) {
      if ((rc = dsi_bench_run(e, vocab, o->P, o->G, o->B, (uint64_t)r + 1, &rr, &berr)))
        fprintf(stderr, "dsinfer bench: %s: %s\n", s->name, berr.msg);
      pre[r] = rr.prefill_tps;
      dec[r] = rr.decode_tps;
    }
    if (rc && berr.msg[0]) fprintf(stderr, "dsinfer bench: %s: %s\n", s->name, berr.msg);
    if (!rc) {
      rank_result *x = &res[i];
      take_speeds(pre, dec, o->reps, &x->sp);
      dsi_phase_stats ps, ds;
      dsi_engine_profile_stats(e, 1, &ps);
      dsi_engine_profile_stats(e, 0, &ds);
      x->comm_pre = ps.wall_s > 0 ? ps.comm_s / ps.wall_s : 0;
      x->comm_dec = ds.wall_s > 0 ? ds.comm_s / ds.wall_s : 0;
      x->hidden_dec = ds.comm_s > 0 ? ds.comm_overlapped_s / ds.comm_s : 0;
      x->mb_dec = ds.steps ? ds.comm_bytes / ds.steps / 1e6 : 0;
    }
    dsi_engine_free(e); /* the others stop following */
  }
  dsi_model_free(m);
  if (rank != 0 || rc) return rc;
  if (o->json) {
    printf("[");
    for (int i = 0; i < N_RANK_STAGES; i++) {
      const rank_result *r = &res[i];
      const rank_stage *s = &k_rank_stages[i];
      printf("%s{\"stage\":\"%s\",\"ranks\":%d,\"tp\":%d,\"ep\":%d,\"exec\":\"%s\",\"streams\":%d,\"op_opt\":%s,"
             "\"tp_to_ep\":\"%s\",\"overlap\":%s,\"two_batch_min\":%d,", i ? "," : "", s->name, N, N, par->ep > 1 ? N : 1,
             s->exec == DSI_EXEC_EAGER ? "eager" : "graph", s->streams, s->op_opt ? "true" : "false",
             s->tp_to_ep == DSI_TP_TO_EP_ALLREDUCE ? "allreduce" : "rs-ag", s->overlap ? "true" : "false",
             s->two_batch_min);
      json_speeds(&r->sp, i ? &res[i - 1].sp : NULL);
      json_num("prefill_comm_share", r->comm_pre, 0);
      json_num("decode_comm_share", r->comm_dec, 0);
      json_num("decode_comm_overlapped", r->hidden_dec, 0);
      json_num("decode_comm_mb_per_step", r->mb_dec, 0);
      printf("\"prompt_len\":%d,\"gen_len\":%d,\"batch\":%d,\"reps\":%d,\"threads\":%d}", o->P, o->G, o->B, o->reps,
             o->threads);
    }
    printf("]\n");
    return 0;
  }
  printf("ablation on %d ranks (heads split, experts %s): %s, %d sequence(s) x %d prompt tokens, %d decode steps;\n"
         "median of %d runs (min..max), rank 0's view\n", N, par->ep > 1 ? "split" : "whole", o->model, o->B, o->P,
         o->G, o->reps);
  printf("%-9s %22s %22s %9s %9s %9s %9s %13s\n", "stage", "prefill tok/s", "decode tok/s", "comm pre", "comm dec",
         "beside", "MB/step", "gain pre/dec");
  for (int i = 0; i < N_RANK_STAGES; i++) {
    const rank_result *r = &res[i];
    char a[32], b[32], g[32];
    text_speeds(&r->sp, i ? &res[i - 1].sp : NULL, a, b, g);
    printf("%-9s %22s %22s %8.1f%% %8.1f%% %8.1f%% %9.3f %13s\n", k_rank_stages[i].name, a, b, 100 * r->comm_pre,
           100 * r->comm_dec, 100 * r->hidden_dec, r->mb_dec, g);
  }
  printf("comm: share of the step's wall time in collectives (prefill, decode); beside: the share of decode's\n"
         "collective time the caller computed beside it; MB/step: what rank 0 sent per decode step; two-batch:\n"
         "steps of two sequences or more as two micro-batches (with --batch 2 or more).\n");
  return 0;
}

int dsi_bench_ablation(const dsi_bench_ablation_opts *o) {
  if (dsi_dist_size(dsi_cli_dist) > 1) return ablation_ranks(o);
  dsi_peaks pk;
  dsi_measure_peaks(o->threads, &pk);
  stage_result res[N_STAGES];
  if (!o->json) fprintf(stderr, "peak RSS, stage by stage ...\n");
  if (measure_rss(o, res)) return 1;
  if (!o->json) fprintf(stderr, "speed, every stage in turn, %d repetitions ...\n", o->reps);
  if (measure_speed(o, &pk, res)) return 1;
  if (o->json) {
    printf("[");
    for (int i = 0; i < N_STAGES; i++) {
      const stage_result *r = &res[i];
      printf("%s{\"stage\":\"%s\",\"exec\":\"%s\",\"streams\":%d,\"op_opt\":%s,", i ? "," : "", k_stages[i].name,
             k_stages[i].exec == DSI_EXEC_EAGER ? "eager" : "graph", k_stages[i].streams,
             k_stages[i].op_opt ? "true" : "false");
      json_speeds(&r->sp, i ? &res[i - 1].sp : NULL);
      json_num("ms_per_token", r->ms, 0);
      printf("\"peak_rss_bytes\":%zu,", r->rss);
      json_num("dispatch_share", r->disp_dec, 0);
      json_num("prefill_dispatch_share", r->disp_pre, 0);
      json_num("compute_util", r->compute_util, 0);
      json_num("bandwidth_util", r->bw_util, 0);
      printf("\"prompt_len\":%d,\"gen_len\":%d,\"batch\":%d,\"reps\":%d,\"threads\":%d}", o->P, o->G, o->B, o->reps,
             pk.threads);
    }
    printf("]\n");
    return 0;
  }
  printf("ablation: %s, %d sequence(s) x %d prompt tokens, %d decode steps, %d threads; median of %d runs (min..max),\n"
         "the stages' runs taken in turn\n",
         o->model, o->B, o->P, o->G, pk.threads, o->reps);
  const stage_result *last = &res[N_STAGES - 1];
  printf("peaks: read %.1f GB/s, %s %.0f GFLOP/s (compute: the prefill's share of it)\n", pk.read_gbs,
         last->peak_name ? last->peak_name : "?", last->peak);
  printf("%-8s %22s %22s %9s %8s %9s %9s %8s %8s %13s\n", "stage", "prefill tok/s", "decode tok/s", "ms/token",
         "RSS MB", "dispatch", "(prefill)", "compute", "bw", "gain pre/dec");
  for (int i = 0; i < N_STAGES; i++) {
    const stage_result *r = &res[i];
    char a[32], b[32], g[32];
    text_speeds(&r->sp, i ? &res[i - 1].sp : NULL, a, b, g);
    printf("%-8s %22s %22s %9.2f %8.0f %8.1f%% %8.1f%% %7.1f%% %7.1f%% %13s\n", k_stages[i].name, a, b, r->ms,
           r->rss / 1e6, 100 * r->disp_dec, 100 * r->disp_pre, 100 * r->compute_util, 100 * r->bw_util, g);
  }
  printf("dispatch: share of decode step wall time outside any op (prefill in parentheses); compute: prefill\n"
         "FLOP/s / the %s peak; bw: decode bytes moved / read bandwidth; gain: over the stage before.\n",
         last->peak_name ? last->peak_name : "?");
  const dsi_plan_info *pl = &res[N_STAGES - 1].plan_dec;
  printf("graph plan at batch %d: bucket %d, %d ops (%d fused away), %d waits; activation arena %.2f MB "
         "planned vs %.2f MB for every intermediate on its own\n",
         o->B, pl->bucket, pl->n_ops, pl->n_fused, pl->n_waits, pl->arena_bytes / 1e6, pl->intermediates_bytes / 1e6);
  printf("streams: %d of %d forks split into two teams (a team needs >= 2 workers, or $DSINFER_STREAM_TEAM_MIN)\n",
         pl->n_split, pl->n_forks);
  return 0;
}
