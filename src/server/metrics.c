/* server: /metrics in Prometheus' text format, named as vLLM's with the
 * prefix dsinfer: so dashboards made for it adapt — the scheduler's gauges
 * and counters (dsi_sched_get_stats) and the server's latency histograms,
 * observed as tokens and requests end. */
#include "server/server_impl.h"

#include <string.h>

/* vLLM's buckets */
static const double k_ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double k_itl[] = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                               0.75, 1.0,   2.5,  5.0,   7.5,  10.0, 20.0, 40.0, 80.0};
static const double k_req[] = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                               30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

static void hist_init(hist *h, const double *b, int nb) {
  memset(h, 0, sizeof *h);
  h->bounds = b;
  h->nb = nb;
}

void metrics_init(metrics *m) {
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->mu, NULL);
  hist_init(&m->ttft, k_ttft, (int)(sizeof k_ttft / sizeof *k_ttft));
  hist_init(&m->itl, k_itl, (int)(sizeof k_itl / sizeof *k_itl));
  hist_init(&m->e2e, k_req, (int)(sizeof k_req / sizeof *k_req));
  hist_init(&m->queue, k_req, (int)(sizeof k_req / sizeof *k_req));
  hist_init(&m->prefill, k_req, (int)(sizeof k_req / sizeof *k_req));
  hist_init(&m->decode, k_req, (int)(sizeof k_req / sizeof *k_req));
}

void metrics_destroy(metrics *m) { pthread_mutex_destroy(&m->mu); }

void metrics_observe(metrics *m, hist *h, double v) {
  int b = 0;
  while (b < h->nb && v > h->bounds[b]) b++;
  pthread_mutex_lock(&m->mu);
  h->counts[b]++;
  h->sum += v;
  h->n++;
  pthread_mutex_unlock(&m->mu);
}

static void head(sbuf *o, const char *name, const char *type, const char *help) {
  sb_printf(o, "# HELP dsinfer:%s %s\n# TYPE dsinfer:%s %s\n", name, help, name, type);
}

static void gauge(sbuf *o, const char *name, const char *model, const char *help, double v) {
  head(o, name, "gauge", help);
  sb_printf(o, "dsinfer:%s{model_name=\"%s\"} %.17g\n", name, model, v);
}

static void counter(sbuf *o, const char *name, const char *model, const char *help, double v) {
  head(o, name, "counter", help);
  sb_printf(o, "dsinfer:%s{model_name=\"%s\"} %.17g\n", name, model, v);
}

static void histogram(sbuf *o, const char *name, const char *model, const char *help, const hist *h) {
  head(o, name, "histogram", help);
  long cum = 0;
  for (int b = 0; b < h->nb; b++) {
    cum += h->counts[b];
    sb_printf(o, "dsinfer:%s_bucket{le=\"%g\",model_name=\"%s\"} %ld\n", name, h->bounds[b], model, cum);
  }
  cum += h->counts[h->nb];
  sb_printf(o, "dsinfer:%s_bucket{le=\"+Inf\",model_name=\"%s\"} %ld\n", name, model, cum);
  sb_printf(o, "dsinfer:%s_sum{model_name=\"%s\"} %.17g\n", name, model, h->sum);
  sb_printf(o, "dsinfer:%s_count{model_name=\"%s\"} %ld\n", name, model, h->n);
}

void metrics_render(metrics *m, const dsi_sched_stats *st, const char *model, sbuf *o) {
  gauge(o, "num_requests_running", model, "Completions running (decoding or reading their prompt).", st->running);
  gauge(o, "num_requests_waiting", model, "Completions waiting for KV blocks or a place in a step.", st->waiting);
  gauge(o, "kv_cache_usage_perc", model, "Fraction of the KV cache's blocks held by sequences (1 = full).",
        st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0);
  counter(o, "prefix_cache_queries", model, "Prompt tokens looked up in the prefix cache.", (double)st->prefix_queries);
  counter(o, "prefix_cache_hits", model, "Prompt tokens found in the prefix cache.", (double)st->prefix_hits);
  counter(o, "prompt_tokens_total", model, "Prompt tokens admitted.", (double)st->prompt_tokens);
  counter(o, "generation_tokens_total", model, "Tokens generated.", (double)st->generation_tokens);
  counter(o, "num_preemptions_total", model, "Completions preempted (KV blocks let go, recomputed later).",
          (double)st->preemptions);
  counter(o, "engine_steps_total", model, "Steps the engine loop ran (one forward pass each).", (double)st->steps);
  counter(o, "engine_step_seconds_total", model,
          "The engine loop's time in steps: planning, forward pass, sampling, delivery.", st->step_seconds);
  counter(o, "engine_forward_seconds_total", model, "Of the steps' time, the forward passes'.", st->forward_seconds);
  head(o, "request_success_total", "counter", "Completions ended, by reason.");
  static const char *reasons[] = {"stop", "length", "abort", "error"};
  static const dsi_finish fin[] = {DSI_FINISH_STOP, DSI_FINISH_LENGTH, DSI_FINISH_CANCELLED, DSI_FINISH_ERROR};
  for (int i = 0; i < 4; i++)
    sb_printf(o, "dsinfer:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %ld\n", reasons[i], model,
              st->requests_finished[fin[i]]);
  pthread_mutex_lock(&m->mu);
  histogram(o, "time_to_first_token_seconds", model, "Time from a request's arrival to its first token.", &m->ttft);
  histogram(o, "inter_token_latency_seconds", model, "Time between a completion's consecutive tokens.", &m->itl);
  histogram(o, "e2e_request_latency_seconds", model, "Time from a request's arrival to its end.", &m->e2e);
  histogram(o, "request_queue_time_seconds", model, "Time a request waited before its first step.", &m->queue);
  histogram(o, "request_prefill_time_seconds", model, "Time from a request's first step to its first token.",
            &m->prefill);
  histogram(o, "request_decode_time_seconds", model, "Time from a request's first token to its last.", &m->decode);
  head(o, "http_responses_total", "counter", "HTTP responses, by status class.");
  static const char *cls[] = {"2xx", "4xx", "5xx"};
  for (int i = 0; i < 3; i++)
    sb_printf(o, "dsinfer:http_responses_total{status=\"%s\",model_name=\"%s\"} %ld\n", cls[i], model, m->http[i]);
  pthread_mutex_unlock(&m->mu);
}
