/* tools: `dsinfer bench serve` — the scheduler offline, under a load of
 * synthetic requests (random token ids; with --shared-prefix every prompt
 * starts with the same tokens, and the first request fills the prefix
 * cache): at a fixed concurrency (closed loop: a request ends, the next is
 * submitted) or at a request rate (Poisson arrivals). Reports output
 * tokens/s, time to first token, inter-token latency and end-to-end
 * latency (p50, p99), the mean batch and the prefix cache's hit rate.
 * With --prompt-logprobs every prompt is scored too (each position's
 * logprob, as /v1/completions' echo with logprobs asks). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "dsinfer.h"
#include "tools/cli.h"
#include "tools/commands.h"

typedef struct {
  double submit, first, last, end;
  double *gaps; /* [gen] inter-token times */
  int n_tok, n_gaps;
} req_times;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;        /* requests ended */
  int first_token; /* the priming request's first token arrived */
  req_times *t;
} load;

typedef struct {
  load *ld;
  int i;
} req_ctx;

static void on_event(void *user, const dsi_request_event *ev) {
  req_ctx *rc = user;
  load *ld = rc->ld;
  req_times *t = &ld->t[rc->i];
  double now = dsi_now();
  if (ev->prompt_pos > 0) return; /* a prompt token's logprob: not an output token */
  if (ev->token >= 0) {
    if (!t->n_tok) t->first = now;
    else t->gaps[t->n_gaps++] = now - t->last;
    t->last = now;
    t->n_tok++;
  }
  pthread_mutex_lock(&ld->mu);
  if (rc->i == 0 && t->n_tok == 1) ld->first_token = 1;
  if (ev->finish) {
    t->end = now;
    ld->done++;
  }
  pthread_cond_broadcast(&ld->cv);
  pthread_mutex_unlock(&ld->mu);
}

/* the q-quantile of v[0..n) (sorted in place) */
static double pct(double *v, int n, double q) {
  if (n == 0) return 0;
  dsi_median(v, n); /* sorts */
  return v[(int)DSI_MIN((double)n - 1, floor(q * (n - 1) + 0.5))];
}

int dsi_cmd_bench_serve(int argc, char **argv) {
  const char *cmd = "bench serve", *model = NULL;
  int requests = 64, conc = 0, L = 512, G = 64, P = 0, json = 0, max_seqs = 0, budget = 0, chunk = 0, act;
  int plp = 0;
  float rate = 0;
  uint64_t seed = 1;
  run_opts ro = {0};
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "checkpoint directory"},
    {"--requests", NULL, OPT_INT, &requests, "requests in all (default 64)", 1, 100000},
    {"--concurrency", NULL, OPT_INT, &conc, "requests in flight: one is submitted when one ends (default 16)", 0, 4096},
    {"--rate", NULL, OPT_FLOAT, &rate, "instead: requests per second, Poisson arrivals", 0, 1e6},
    {"--prompt-len", NULL, OPT_INT, &L, "prompt tokens per request, the shared prefix included (default 512)", 1, DSI_CLI_MAX_TOKENS},
    {"--gen-len", NULL, OPT_INT, &G, "tokens generated per request (default 64)", 1, DSI_CLI_MAX_TOKENS},
    {"--shared-prefix", NULL, OPT_INT, &P, "the prompts' first P tokens are the same (default 0)", 0, DSI_CLI_MAX_TOKENS},
    {"--max-seqs", NULL, OPT_INT, &max_seqs, "sequences running at once (default 64)", 0, 4096},
    {"--max-batched-tokens", NULL, OPT_INT, &budget, "tokens in one step (default 512)", 0, DSI_CLI_MAX_TOKENS},
    {"--prefill-chunk", NULL, OPT_INT, &chunk, "prompt tokens in one step while requests decode in it (default: sized on the fly)", 0, DSI_CLI_MAX_TOKENS},
    {"--seed", NULL, OPT_U64, &seed, "the prompts' random ids (default 1)"},
    {"--prompt-logprobs", NULL, OPT_FLAG, &plp, "score every prompt too: each position's logprob (a logits row)"},
    {"--json", NULL, OPT_FLAG, &json, "print one JSON object"},
    RUN_OPTS(ro),
    {0}};
  int rc = dsi_cli_parse(cmd, "--model DIR [--requests N] [--concurrency C | --rate R] [--prompt-len L] [--gen-len G] "
                              "[--shared-prefix P] [--prompt-logprobs] [--threads T] [--json]", opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!model) return dsi_cli_usage_error(cmd, "--model is required");
  if (conc && rate > 0) return dsi_cli_usage_error(cmd, "--concurrency and --rate exclude each other");
  if (!conc && !(rate > 0)) conc = 16;
  if (requests < 1 || requests > 100000 || conc < 0 || conc > 4096 || L < 1 || G < 1 || P < 0 || P >= L ||
      max_seqs < 0 || budget < 0 || chunk < 0 || !(rate >= 0) || !isfinite(rate))
    return dsi_cli_usage_error(cmd, "--requests in 1..100000, --concurrency in 1..4096, --prompt-len >= 1, "
                                    "--gen-len >= 1, 0 <= --shared-prefix < --prompt-len");
  if ((rc = dsi_cli_check_run_opts(cmd, &ro, &act))) return rc;
  int seqs = max_seqs ? max_seqs : 64, tokens = budget ? budget : 512;
  int ctx = L + G + 1;
  /* blocks for every sequence that may run at once, and the shared prefix once more */
  int in_flight = conc ? DSI_MIN(conc, seqs) : seqs;
  ro.kv_blocks = in_flight * ((ctx + 63) / 64 + 1) + (P + 63) / 64 + 2;
  dsi_model *m;
  dsi_engine *e;
  if ((rc = dsi_cli_open_engine("bench serve", model, &ro, act, tokens, ctx, "--prompt-len + --gen-len", &m, &e))) return rc;
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  dsi_err err = {0};
  dsi_sched *s;
  dsi_sched_opts so = {.max_seqs = seqs, .max_batched_tokens = tokens, .prefill_chunk = chunk};
  if (dsi_sched_open(&s, e, NULL, &so, &err)) {
    fprintf(stderr, "dsinfer bench serve: %s\n", err.msg);
    dsi_engine_free(e);
    dsi_model_free(m);
    return 1;
  }
  /* the prompts: random ids past the first few (BOS, EOS), the shared prefix first */
  dsi_rng rng;
  dsi_rng_seed(&rng, seed);
  int32_t *prompts = malloc((size_t)requests * L * sizeof(int32_t));
  load ld = {.t = calloc((size_t)requests, sizeof(req_times))};
  req_ctx *ctxs = calloc((size_t)requests, sizeof *ctxs);
  uint64_t *ids = malloc((size_t)requests * sizeof *ids);
  double *ttft = malloc((size_t)requests * sizeof(double)), *e2e = malloc((size_t)requests * sizeof(double));
  double *itl = malloc((size_t)requests * DSI_MAX(G, 1) * sizeof(double));
  int ok = prompts && ld.t && ctxs && ids && ttft && e2e && itl;
  for (int i = 0; ok && i < requests; i++) ok = (ld.t[i].gaps = malloc((size_t)DSI_MAX(G, 1) * sizeof(double))) != NULL;
  if (!ok) {
    fprintf(stderr, "dsinfer bench serve: out of memory for %d requests\n", requests);
    for (int i = 0; ld.t && i < requests; i++) free(ld.t[i].gaps);
    free(ld.t), free(ctxs), free(ids), free(prompts), free(ttft), free(e2e), free(itl);
    dsi_sched_free(s);
    dsi_engine_free(e);
    dsi_model_free(m);
    return 1;
  }
  for (int i = 0; i < requests; i++)
    for (int k = 0; k < L; k++)
      prompts[(size_t)i * L + k] = k < P && i > 0 ? prompts[k] : 2 + (int32_t)(dsi_rng_u64(&rng) % (uint64_t)(info.vocab_size - 2));
  pthread_mutex_init(&ld.mu, NULL);
  pthread_cond_init(&ld.cv, NULL);
  for (int i = 0; i < requests; i++) ctxs[i] = (req_ctx){&ld, i};
  /* warm-up: the plans of a full batch and a prompt chunk captured, pages touched */
  {
    load wl = {0};
    req_times wt[64];
    double gaps[64 * 2];
    memset(wt, 0, sizeof wt);
    for (int i = 0; i < 64; i++) wt[i].gaps = gaps + 2 * i;
    wl.t = wt;
    pthread_mutex_init(&wl.mu, NULL);
    pthread_cond_init(&wl.cv, NULL);
    req_ctx wc[64];
    int nw = DSI_MIN(in_flight, 64);
    for (int i = 0; i < nw; i++) {
      wc[i] = (req_ctx){&wl, i};
      dsi_request r = {.prompt = prompts + (size_t)(i % requests) * L, .n_prompt = L, .max_tokens = 2, .ignore_eos = 1,
                       .on_event = on_event, .user = &wc[i]};
      dsi_sched_submit(s, &r, NULL, &err);
    }
    dsi_sched_wait_idle(s, -1);
    dsi_sched_reset_prefix_cache(s);
    pthread_cond_destroy(&wl.cv);
    pthread_mutex_destroy(&wl.mu);
  }
  dsi_sched_stats st0;
  dsi_sched_get_stats(s, &st0);
  double t0 = dsi_now();
  int submitted = 0;
  double next_at = t0;
  while (submitted < requests) {
    if (conc) { /* closed loop */
      pthread_mutex_lock(&ld.mu);
      /* the first request alone until its first token: it fills the prefix cache */
      while ((submitted - ld.done >= conc) || (P > 0 && submitted == 1 && !ld.first_token)) pthread_cond_wait(&ld.cv, &ld.mu);
      pthread_mutex_unlock(&ld.mu);
    } else { /* Poisson arrivals */
      double now = dsi_now();
      if (next_at > now) usleep((useconds_t)((next_at - now) * 1e6));
      next_at += -log(1 - dsi_rng_uniform(&rng)) / rate;
      if (P > 0 && submitted == 1) {
        pthread_mutex_lock(&ld.mu);
        while (!ld.first_token) pthread_cond_wait(&ld.cv, &ld.mu);
        pthread_mutex_unlock(&ld.mu);
      }
    }
    int i = submitted++;
    dsi_request r = {.prompt = prompts + (size_t)i * L, .n_prompt = L, .max_tokens = G, .ignore_eos = 1,
                     .prompt_logprobs = plp, .on_event = on_event, .user = &ctxs[i]};
    ld.t[i].submit = dsi_now();
    if (dsi_sched_submit(s, &r, &ids[i], &err)) {
      fprintf(stderr, "dsinfer bench serve: request %d: %s\n", i, err.msg);
      rc = 1;
      break;
    }
  }
  dsi_sched_wait_idle(s, -1);
  dsi_sched_stats st;
  dsi_sched_get_stats(s, &st);
  /* the figures */
  long out_tokens = 0, n_itl = 0;
  double last_end = t0;
  for (int i = 0; i < submitted; i++) {
    req_times *t = &ld.t[i];
    ttft[i] = t->first - t->submit;
    e2e[i] = t->end - t->submit;
    out_tokens += t->n_tok;
    memcpy(itl + n_itl, t->gaps, (size_t)t->n_gaps * sizeof(double));
    n_itl += t->n_gaps;
    last_end = DSI_MAX(last_end, t->end);
  }
  double wall = last_end - t0, tps = out_tokens / wall;
  long steps = st.steps - st0.steps;
  double mean_batch = steps ? (st.batch_seqs_mean * st.steps - st0.batch_seqs_mean * st0.steps) / steps : 0;
  long q = st.prefix_queries - st0.prefix_queries, h = st.prefix_hits - st0.prefix_hits;
  double hit = q ? (double)h / q : 0;
  double step_s = st.step_seconds - st0.step_seconds, fwd_s = st.forward_seconds - st0.forward_seconds;
  if (json) {
    printf("{\"model\":");
    dsi_json_put_str(stdout, model, strlen(model));
    printf(",\"requests\":%d,\"concurrency\":%d,\"rate\":%g,\"prompt_len\":%d,\"gen_len\":%d,"
           "\"shared_prefix\":%d,\"prompt_logprobs\":%d,\"threads\":%d,\"isa\":\"%s\",\"output_tokens_per_s\":%.3f,\"ttft_p50_s\":%.4f,"
           "\"ttft_p99_s\":%.4f,\"itl_p50_s\":%.5f,\"itl_p99_s\":%.5f,\"e2e_p50_s\":%.4f,\"e2e_p99_s\":%.4f,"
           "\"mean_batch\":%.2f,\"mean_batch_tokens\":%.1f,\"prefix_hit_rate\":%.4f,\"preemptions\":%ld,"
           "\"step_s\":%.3f,\"forward_s\":%.3f,\"wall_s\":%.3f}\n",
           submitted, conc, rate, L, G, P, plp, ro.threads ? ro.threads : dsi_default_threads(), dsi_engine_isa(e), tps,
           pct(ttft, submitted, 0.5), pct(ttft, submitted, 0.99), pct(itl, (int)n_itl, 0.5), pct(itl, (int)n_itl, 0.99),
           pct(e2e, submitted, 0.5), pct(e2e, submitted, 0.99), mean_batch, steps ? (double)(st.batch_tokens_mean * st.steps - st0.batch_tokens_mean * st0.steps) / steps : 0,
           hit, st.preemptions - st0.preemptions, step_s, fwd_s, wall);
  } else {
    printf("model %s, isa %s; %d requests, %s %g; prompts %d tokens (%d shared%s), %d generated each\n", model,
           dsi_engine_isa(e), submitted, conc ? "concurrency" : "rate", conc ? (double)conc : rate, L, P,
           plp ? ", scored" : "", G);
    printf("output: %.1f tokens/s over %.2f s; %ld steps, %.2f sequences a step\n", tps, wall, steps, mean_batch);
    printf("time to first token: p50 %.3f s, p99 %.3f s\n", pct(ttft, submitted, 0.5), pct(ttft, submitted, 0.99));
    printf("inter-token latency: p50 %.1f ms, p99 %.1f ms\n", pct(itl, (int)n_itl, 0.5) * 1e3,
           pct(itl, (int)n_itl, 0.99) * 1e3);
    printf("end to end: p50 %.3f s, p99 %.3f s; prefix cache: %.1f%% of prompt tokens; %ld preemptions\n",
           pct(e2e, submitted, 0.5), pct(e2e, submitted, 0.99), 100 * hit, st.preemptions - st0.preemptions);
    printf("engine loop: %.2f s in steps, %.2f s of it in forward passes\n", step_s, fwd_s);
  }
  for (int i = 0; i < requests; i++) free(ld.t[i].gaps);
  free(ld.t);
  free(ctxs);
  free(ids);
  free(prompts);
  free(ttft);
  free(e2e);
  free(itl);
  dsi_sched_free(s);
  dsi_engine_free(e);
  dsi_model_free(m);
  return rc;
}
