/* engine: the serving core (dsi_sched in dsinfer.h) — requests submitted
 * from any thread, one engine loop thread that runs the steps, and per
 * step: the inbox and cancellations, the batch (decode tokens, prefill
 * chunks, admission by free KV blocks, preemption of the newest), the
 * forward pass, then sampling, text, stop conditions and the callbacks.
 * Sections follow that order. Everything a step touches is allocated when
 * a request is submitted or the scheduler opened, never per step. */
#define _GNU_SOURCE
#include "engine/engine_impl.h"
#include "engine/engine_testing.h"
#include "engine/jsonc.h"
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_STOP_STRINGS 16
#define MAX_STOP_LEN 256
#define MAX_N 64 /* completions per request */

/* Compiled schemas and patterns kept for the next request that sends the
 * same text (agents send their tools' schemas with every turn, and the
 * server checks a request's before it submits it): up to SCHEMA_CACHE,
 * shared by the requests that hold them; a new one takes the place of the
 * least recently taken one that no request holds. */
#define SCHEMA_CACHE 32

typedef struct {
  char *text;           /* NULL: a free place */
  size_t n;
  int regex;            /* a pattern (dsi_request.regex), else a JSON Schema */
  uint64_t hash;
  dsi_jschema *sc;
  int refs;             /* requests holding it */
  uint64_t used;        /* when it was last taken (the cache's clock) */
} schema_entry;

typedef enum { C_WAITING, C_RUNNING, C_DONE } c_state;

typedef struct request request;

/* one completion of a request: a sequence of tokens and its KV */
typedef struct completion {
  request *req;
  int index;
  c_state state;
  uint64_t arrival;     /* first come, first served; the newest is preempted first */
  int seq;              /* the engine's sequence, -1 while holding no KV */
  int32_t *toks;        /* the prompt, then the output: [cap] */
  int n_tok, cap;
  int n_out;
  int computed;         /* toks[0..computed) are in the sequence's cache */
  int cached;           /* prompt tokens the prefix cache gave its first admission */
  int admitted;         /* admitted once */
  dsi_rng rng;
  dsi_jsonc *js;        /* json: the value so far (NULL without json) */
  dsi_detok *detok;
  char *pend;           /* text held back: it might start a stop string */
  size_t n_pend, cap_pend;
  double t_admit, t_first, t_last;
  struct completion *prev, *next; /* in the waiting list */
} completion;

struct request {
  uint64_t id;
  dsi_request r;        /* its arrays point at the copies below */
  int32_t *prompt, *stop_ids, *bias_ids;
  dsi_jschema *schema;  /* json: the compiled schema (json_schema, or any object), or regex's */
  int schema_at;        /* its place in the schema cache, -1: the request's own */
  float *bias;
  char **stop;
  size_t stop_max;      /* longest stop string */
  atomic_int cancel;
  int n_left;           /* completions not done */
  int lp_done;          /* prompt_logprobs: positions before this one have had their event (from 1) */
  double t_submit;
  completion *c;        /* [n] */
  request *next;        /* in flight, newest first */
};

/* a completion's share of one step */
typedef struct {
  completion *c;
  int t0, n;            /* its tokens' place in the batch */
  int logits;           /* row of its logits to sample, -1 when none is wanted */
  int p0, n_plp;        /* prompt_logprobs: its first n_plp tokens from position p0 give the next prompt
                           tokens' logprobs, from logits row plp_row */
  int plp_row;
} seg;

struct dsi_sched {
  dsi_engine *e;
  const dsi_tok *tok;
  dsi_sched_opts o;
  int vocab, n_valid;   /* the model's, and the ids that may be drawn */
  int32_t eos[2];
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t wake, idle;
  int stop;             /* under mu */
  request *inbox;       /* under mu: submitted, not yet seen by the loop */
  request *live;        /* under mu: in flight, for cancel and wait_idle */
  int n_live;
  int cancel_pending;   /* under mu */
  int reset_cache;      /* under mu: dsi_sched_reset_prefix_cache asked */
  uint64_t next_id, next_arrival;
  /* the loop's own */
  completion *wait_head, *wait_tail;
  completion **run;     /* [max_seqs] by arrival */
  int n_run;
  seg *segs;            /* [max_seqs] */
  int32_t *b_tok, *b_seq;
  uint8_t *b_want;      /* [max_batched_tokens] */
  float *logits;        /* [max_seqs + prompt_logprob_rows, vocab] a step's rows, by segment */
  /* a step's prompt logprobs: [prompt_logprob_rows] each, the row's
   * result, the token it is for and the row */
  dsi_sample_out *plp;
  int32_t *plp_tok;
  int *plp_at;
  /* sampling a step's rows on the engine's pool: a workspace per thread
   * (up to SAMPLE_WS), and per row its segment, token and extras */
  dsi_sample_ws *ws;
  int n_ws;
  float *json_saved;    /* [n_ws, vocab] a json row's logits before its draw (touched only by json) */
  dsi_jsonc *json_try;  /* [n_ws] a token's test of a json state */
  uint8_t *json_ok;     /* [n_ws, vocab] the tokens a json redraw may take (touched only by json) */
  dsi_jsonc_vocab json_vocab; /* the ids by first byte (with a tokenizer) */
  int *todo;
  int32_t *drawn;
  dsi_sample_out *outs;
  int32_t *script; /* tests: every completion's tokens (dsi_sched_testing_script) */
  int n_script;
  /* the step-cost model, t = a + b decode tokens + c prompt tokens, fitted
   * by exponentially weighted least squares over the steps: sums of w x x^T
   * and w x t for x = (1, decode tokens, prompt tokens) */
  double fit_xx[3][3], fit_xt[3];
  int fit_steps;
  pthread_mutex_t sc_mu; /* the schema cache: */
  schema_entry sc_cache[SCHEMA_CACHE];
  uint64_t sc_clock;
  long sc_compiles, sc_hits;
  dsi_sched_stats acc;  /* the loop's counters */
  dsi_sched_stats st;   /* under mu: what dsi_sched_get_stats reads, published after each step */
  long sum_tokens, sum_seqs;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *dsi_finish_str(dsi_finish f) {
  static const char *const k[] = {"none", "stop", "length", "cancelled", "error"};
  return (unsigned)f <= DSI_FINISH_ERROR ? k[f] : "?";
}

/* ---- the schema cache ---- */
static uint64_t text_hash(const char *t, size_t n, int regex) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)regex;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)t[i]) * 1099511628211ull;
  return h;
}

/* the cached entry for this text, taken (under sc_mu), or -1 */
static int schema_find(dsi_sched *s, const char *t, size_t n, int regex, uint64_t h) {
  for (int i = 0; i < SCHEMA_CACHE; i++) {
    schema_entry *e = &s->sc_cache[i];
    if (e->text && e->hash == h && e->n == n && e->regex == regex && !memcmp(e->text, t, n)) {
      e->refs++;
      e->used = ++s->sc_clock;
      return i;
    }
  }
  return -1;
}

/* The compiled schema (regex 0) or pattern (1) of text t, held until
 * schema_drop: from the cache, or compiled (outside the lock: compiling
 * may take tens of ms) and cached where a place is free or held by none;
 * *at its place, -1 when the caller alone holds it. */
static int schema_take(dsi_sched *s, const char *t, size_t n, int regex, dsi_jschema **sc, int *at, dsi_err *err) {
  uint64_t h = text_hash(t, n, regex);
  pthread_mutex_lock(&s->sc_mu);
  int i = schema_find(s, t, n, regex, h);
  if (i >= 0) s->sc_hits++, *sc = s->sc_cache[i].sc, *at = i;
  pthread_mutex_unlock(&s->sc_mu);
  if (i >= 0) return DSI_OK;
  dsi_jschema *mine;
  int rc = regex ? dsi_jschema_compile_regex(&mine, t, n, err) : dsi_jschema_compile(&mine, t, n, err);
  if (rc) return rc;
  char *copy = malloc(n + 1);
  pthread_mutex_lock(&s->sc_mu);
  s->sc_compiles++;
  if ((i = schema_find(s, t, n, regex, h)) >= 0) { /* another thread compiled it meanwhile */
    *sc = s->sc_cache[i].sc, *at = i;
    pthread_mutex_unlock(&s->sc_mu);
    free(copy);
    dsi_jschema_free(mine);
    return DSI_OK;
  }
  int victim = -1;
  for (int k = 0; copy && k < SCHEMA_CACHE; k++) {
    const schema_entry *e = &s->sc_cache[k];
    if (!e->text) {
      victim = k;
      break;
    }
    if (!e->refs && (victim < 0 || e->used < s->sc_cache[victim].used)) victim = k;
  }
  *sc = mine, *at = victim;
  if (victim >= 0) {
    schema_entry *e = &s->sc_cache[victim];
    dsi_jschema *old = e->sc;
    free(e->text);
    memcpy(copy, t, n);
    copy[n] = 0;
    *e = (schema_entry){.text = copy, .n = n, .regex = regex, .hash = h, .sc = mine, .refs = 1, .used = ++s->sc_clock};
    pthread_mutex_unlock(&s->sc_mu);
    dsi_jschema_free(old);
    return DSI_OK;
  }
  pthread_mutex_unlock(&s->sc_mu);
  free(copy); /* every place held (or no memory to keep the text): the caller's own */
  return DSI_OK;
}

static void schema_drop(dsi_sched *s, dsi_jschema *sc, int at) {
  if (at < 0) {
    dsi_jschema_free(sc);
    return;
  }
  pthread_mutex_lock(&s->sc_mu);
  s->sc_cache[at].refs--;
  pthread_mutex_unlock(&s->sc_mu);
}

int dsi_sched_check_schema(dsi_sched *s, const char *text, size_t n, int regex, dsi_err *err) {
  if (!s) return regex ? dsi_regex_check(text, n, err) : dsi_json_schema_check(text, n, err);
  dsi_jschema *sc;
  int at, rc = schema_take(s, text, n, regex, &sc, &at, err);
  if (!rc) schema_drop(s, sc, at);
  return rc;
}

/* ---- requests in and out ---- */
static void request_free(dsi_sched *s, request *q) {
  if (!q) return;
  for (int i = 0; q->c && i < q->r.n; i++) {
    free(q->c[i].toks);
    free(q->c[i].pend);
    dsi_detok_free(q->c[i].detok);
    free(q->c[i].js);
  }
  for (int i = 0; q->stop && i < q->r.n_stop; i++) free(q->stop[i]);
  free(q->stop);
  free(q->c);
  free(q->prompt);
  free(q->stop_ids);
  free(q->bias_ids);
  free(q->bias);
  if (q->schema) schema_drop(s, q->schema, q->schema_at);
  free(q);
}

static int finite_nonneg(float x) { return isfinite(x) && x >= 0; }

static int check_request(const dsi_sched *s, const dsi_request *r, dsi_err *err) {
  const dsi_engine *e = s->e;
  const dsi_sampling *p = &r->sampling;
  if (!r->prompt || r->n_prompt <= 0) return dsi_errf(err, DSI_E_INVAL, "the prompt is empty (it has no tokens)");
  if (r->n_prompt >= e->max_context)
    return dsi_errf(err, DSI_E_INVAL, "the prompt has %d tokens; the context holds %d", r->n_prompt, e->max_context);
  for (int i = 0; i < r->n_prompt; i++)
    if (r->prompt[i] < 0 || r->prompt[i] >= s->vocab)
      return dsi_errf(err, DSI_E_INVAL, "prompt token %d: id %d is outside the vocabulary [0, %d)", i, r->prompt[i],
                      s->vocab);
  int bs = e->kv.block_size;
  if (DSI_CEIL_DIV(r->n_prompt + 1, bs) > e->kv.n_blocks)
    return dsi_errf(err, DSI_E_CAPACITY, "the prompt needs %d KV blocks of %d tokens; the pool has %d",
                    DSI_CEIL_DIV(r->n_prompt + 1, bs), bs, e->kv.n_blocks);
  if (r->max_tokens < 0) return dsi_errf(err, DSI_E_INVAL, "max_tokens %d is negative", r->max_tokens);
  if (r->n < 0 || r->n > MAX_N) return dsi_errf(err, DSI_E_INVAL, "n = %d completions: 1 to %d", r->n, MAX_N);
  if (r->json != 0 && r->json != 1) return dsi_errf(err, DSI_E_INVAL, "json = %d: 0 or 1", r->json);
  if ((r->json || r->regex) && !s->tok)
    return dsi_errf(err, DSI_E_INVAL, "json or regex output needs the scheduler to have a tokenizer");
  if (r->regex && r->json_schema) return dsi_errf(err, DSI_E_INVAL, "regex and json_schema exclude each other");
  if (r->prompt_logprobs != 0 && r->prompt_logprobs != 1)
    return dsi_errf(err, DSI_E_INVAL, "prompt_logprobs = %d: 0 or 1", r->prompt_logprobs);
  if (r->top_logprobs < 0 || r->top_logprobs > DSI_MAX_TOP_LOGPROBS)
    return dsi_errf(err, DSI_E_INVAL, "top_logprobs = %d: 0 to %d", r->top_logprobs, DSI_MAX_TOP_LOGPROBS);
  if (!finite_nonneg(p->temperature) || !finite_nonneg(p->top_p) || p->top_p > 1 || p->top_k < 0 ||
      !finite_nonneg(p->min_p) || p->min_p > 1 || !finite_nonneg(p->repetition_penalty) ||
      !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
    return dsi_errf(err, DSI_E_INVAL, "sampling parameters out of range (temperature >= 0, top_p and min_p in [0, 1], "
                                      "top_k >= 0, repetition_penalty >= 0, finite penalties)");
  if (p->n_bias < 0 || (p->n_bias && (!p->bias_ids || !p->bias)))
    return dsi_errf(err, DSI_E_INVAL, "logit_bias: %d entries without their arrays", p->n_bias);
  for (int i = 0; i < p->n_bias; i++)
    if (p->bias_ids[i] < 0 || p->bias_ids[i] >= s->vocab || !isfinite(p->bias[i]))
      return dsi_errf(err, DSI_E_INVAL, "logit_bias: token %d (bias %g) is outside the vocabulary [0, %d) or not finite",
                      p->bias_ids[i], p->bias[i], s->vocab);
  for (int i = 0; i < r->n_stop_ids; i++)
    if (!r->stop_ids || r->stop_ids[i] < 0 || r->stop_ids[i] >= s->vocab)
      return dsi_errf(err, DSI_E_INVAL, "stop token %d is outside the vocabulary [0, %d)", r->stop_ids ? r->stop_ids[i] : -1,
                      s->vocab);
  if (r->n_stop < 0 || r->n_stop > MAX_STOP_STRINGS || (r->n_stop && !r->stop))
    return dsi_errf(err, DSI_E_INVAL, "%d stop strings: at most %d", r->n_stop, MAX_STOP_STRINGS);
  if (r->n_stop && !s->tok) return dsi_errf(err, DSI_E_INVAL, "stop strings need the scheduler to have a tokenizer");
  for (int i = 0; i < r->n_stop; i++) {
    size_t n = r->stop[i] ? strlen(r->stop[i]) : 0;
    if (n == 0 || n > MAX_STOP_LEN)
      return dsi_errf(err, DSI_E_INVAL, "stop string %d: 1 to %d bytes", i, MAX_STOP_LEN);
  }
  return DSI_OK;
}

/* the request with its arrays copied and its completions set up */
static request *request_new(dsi_sched *s, const dsi_request *r, dsi_err *err) {
  request *q = calloc(1, sizeof *q);
  int n = r->n > 0 ? r->n : 1, ok = q != NULL;
  if (!ok) return dsi_errf(err, DSI_E_NOMEM, "out of memory for a request"), NULL;
  q->r = *r;
  q->r.n = n;
  q->r.json_schema = NULL, q->r.regex = NULL; /* compiled, not kept */
  q->r.json = r->json || r->regex; /* held output: below, json covers both */
  const char *held = r->regex ? r->regex : r->json ? r->json_schema : NULL;
  if (r->json && !held) { /* any JSON object: no text to cache it by */
    q->schema_at = -1;
    if (dsi_jschema_compile(&q->schema, NULL, 0, err)) return free(q), NULL;
  } else if (held && schema_take(s, held, strlen(held), r->regex != NULL, &q->schema, &q->schema_at, err)) {
    free(q);
    return NULL;
  }
  q->prompt = malloc((size_t)r->n_prompt * sizeof(int32_t));
  q->c = calloc((size_t)n, sizeof *q->c);
  ok &= q->prompt && q->c;
  if (r->n_stop_ids) ok &= (q->stop_ids = malloc((size_t)r->n_stop_ids * sizeof(int32_t))) != NULL;
  if (r->sampling.n_bias) {
    ok &= (q->bias_ids = malloc((size_t)r->sampling.n_bias * sizeof(int32_t))) != NULL;
    ok &= (q->bias = malloc((size_t)r->sampling.n_bias * sizeof(float))) != NULL;
  }
  if (r->n_stop) ok &= (q->stop = calloc((size_t)r->n_stop, sizeof(char *))) != NULL;
  for (int i = 0; ok && i < r->n_stop; i++) {
    ok &= (q->stop[i] = strdup(r->stop[i])) != NULL;
    q->stop_max = DSI_MAX(q->stop_max, strlen(r->stop[i]));
  }
  int ctx = s->e->max_context, max_out = r->max_tokens > 0 ? DSI_MIN(r->max_tokens, ctx) : ctx;
  for (int i = 0; ok && i < n; i++) {
    completion *c = &q->c[i];
    c->req = q;
    c->index = i;
    c->seq = -1;
    c->cap = r->n_prompt + max_out + 1;
    ok &= (c->toks = malloc((size_t)c->cap * sizeof(int32_t))) != NULL;
    if (ok) memcpy(c->toks, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
    c->n_tok = r->n_prompt;
    dsi_rng_seed(&c->rng, r->sampling.seed + (uint64_t)i);
    if (q->r.json && (ok &= (c->js = malloc(sizeof *c->js)) != NULL)) dsi_jsonc_init(c->js, q->schema);
    if (s->tok) {
      dsi_err e2 = {0};
      ok &= dsi_detok_open(&c->detok, s->tok, DSI_TOK_SKIP_UNKNOWN, &e2) == DSI_OK;
      c->cap_pend = q->stop_max + 256;
      ok &= (c->pend = malloc(c->cap_pend)) != NULL;
    }
  }
  if (!ok) {
    request_free(s, q);
    return dsi_errf(err, DSI_E_NOMEM, "out of memory for a request"), NULL;
  }
  memcpy(q->prompt, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
  if (q->stop_ids) memcpy(q->stop_ids, r->stop_ids, (size_t)r->n_stop_ids * sizeof(int32_t));
  if (q->bias_ids) {
    memcpy(q->bias_ids, r->sampling.bias_ids, (size_t)r->sampling.n_bias * sizeof(int32_t));
    memcpy(q->bias, r->sampling.bias, (size_t)r->sampling.n_bias * sizeof(float));
  }
  q->r.prompt = q->prompt;
  q->r.stop_ids = q->stop_ids;
  q->r.stop = (const char *const *)q->stop;
  q->r.sampling.bias_ids = q->bias_ids;
  q->r.sampling.bias = q->bias;
  q->n_left = n;
  q->lp_done = r->prompt_logprobs ? 1 : r->n_prompt;
  return q;
}

int dsi_sched_submit(dsi_sched *s, const dsi_request *r, uint64_t *id, dsi_err *err) {
  int rc = check_request(s, r, err);
  if (rc) return rc;
  request *q = request_new(s, r, err);
  if (!q) return err ? err->status : DSI_E_NOMEM;
  q->t_submit = now();
  pthread_mutex_lock(&s->mu);
  if (s->stop) {
    pthread_mutex_unlock(&s->mu);
    request_free(s, q);
    return dsi_errf(err, DSI_E_INVAL, "the scheduler is closing");
  }
  q->id = ++s->next_id;
  if (id) *id = q->id;
  /* the inbox is newest first; the loop reverses it */
  q->next = s->inbox;
  s->inbox = q;
  s->n_live++;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->mu);
  return DSI_OK;
}

int dsi_sched_cancel(dsi_sched *s, uint64_t id) {
  int found = 0;
  pthread_mutex_lock(&s->mu);
  for (request *q = s->inbox; q && !found; q = q->next)
    if (q->id == id) atomic_store(&q->cancel, 1), found = 1;
  for (request *q = s->live; q && !found; q = q->next)
    if (q->id == id) atomic_store(&q->cancel, 1), found = 1;
  if (found) {
    s->cancel_pending = 1;
    pthread_cond_signal(&s->wake);
  }
  pthread_mutex_unlock(&s->mu);
  return found ? DSI_OK : DSI_E_INVAL;
}

void dsi_sched_reset_prefix_cache(dsi_sched *s) {
  pthread_mutex_lock(&s->mu);
  s->reset_cache = 1;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->mu);
}

int dsi_sched_wait_idle(dsi_sched *s, double timeout_s) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  double t = until.tv_sec + until.tv_nsec * 1e-9 + (timeout_s >= 0 ? timeout_s : 0);
  until.tv_sec = (time_t)t;
  until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
  int rc = DSI_OK;
  pthread_mutex_lock(&s->mu);
  while (s->n_live > 0 && rc == DSI_OK) {
    if (timeout_s < 0) pthread_cond_wait(&s->idle, &s->mu);
    else if (pthread_cond_timedwait(&s->idle, &s->mu, &until)) rc = s->n_live > 0 ? DSI_E_CAPACITY : DSI_OK;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

void dsi_sched_get_stats(dsi_sched *s, dsi_sched_stats *st) {
  pthread_mutex_lock(&s->mu);
  *st = s->st;
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_lock(&s->sc_mu);
  st->schema_compiles = s->sc_compiles;
  st->schema_hits = s->sc_hits;
  st->schemas_cached = 0;
  for (int i = 0; i < SCHEMA_CACHE; i++) st->schemas_cached += s->sc_cache[i].text != NULL;
  pthread_mutex_unlock(&s->sc_mu);
}

/* ---- the waiting list (by arrival) and the running set (by arrival) ---- */
static void wait_insert(dsi_sched *s, completion *c) {
  completion *at = s->wait_tail;
  while (at && at->arrival > c->arrival) at = at->prev;
  c->prev = at;
  c->next = at ? at->next : s->wait_head;
  if (c->next) c->next->prev = c;
  else s->wait_tail = c;
  if (at) at->next = c;
  else s->wait_head = c;
  c->state = C_WAITING;
}

static void wait_remove(dsi_sched *s, completion *c) {
  if (c->prev) c->prev->next = c->next;
  else s->wait_head = c->next;
  if (c->next) c->next->prev = c->prev;
  else s->wait_tail = c->prev;
  c->prev = c->next = NULL;
}

static void run_insert(dsi_sched *s, completion *c) {
  int i = s->n_run++;
  while (i > 0 && s->run[i - 1]->arrival > c->arrival) s->run[i] = s->run[i - 1], i--;
  s->run[i] = c;
  c->state = C_RUNNING;
}

static void run_remove(dsi_sched *s, completion *c) {
  int i = 0;
  while (i < s->n_run && s->run[i] != c) i++;
  DSI_ASSERT(i < s->n_run);
  memmove(&s->run[i], &s->run[i + 1], (size_t)(s->n_run - i - 1) * sizeof *s->run);
  s->n_run--;
}

/* ---- KV: sequences, the prefix cache, preemption ---- */
/* let go of c's KV; what it computed stays in the prefix cache */
static void release_kv(dsi_sched *s, completion *c, int keep) {
  if (c->seq < 0) return;
  dsi_engine_seq_release(s->e, c->seq, keep ? c->toks : NULL);
  c->seq = -1;
  c->computed = 0;
}

/* a sequence for c, with the longest cached prefix of its tokens but the
 * last (whose logits are wanted); out of memory: an error in the engine's */
static int open_seq(dsi_sched *s, completion *c) {
  dsi_engine *e = s->e;
  c->seq = dsi_seq_new(e);
  if (c->seq < 0) return c->seq;
  dsi_kv_seq *q = &e->seqs[c->seq];
  /* the block table holds a whole completion: no growth while running */
  int cap = DSI_CEIL_DIV(c->cap, e->kv.block_size) + 1;
  int32_t *blocks = realloc(q->blocks, (size_t)cap * sizeof(int32_t));
  if (!blocks) {
    dsi_seq_free(e, c->seq);
    c->seq = -1;
    return dsi_errf(&e->err, DSI_E_NOMEM, "out of memory for a block table of %d blocks", cap);
  }
  q->blocks = blocks;
  q->cap = cap;
  /* prompt logprobs still owed: their positions are computed, not taken from the cache */
  int upto = DSI_MIN(c->n_tok - 1, c->req->lp_done - 1);
  c->computed = s->o.no_prefix_cache ? 0 : dsi_kv_match(&e->kv, q, c->toks, upto);
  if (!c->admitted) c->cached = DSI_MIN(c->computed, c->req->r.n_prompt);
  return DSI_OK;
}

/* blocks c needs beyond those it holds to hold n tokens */
static int blocks_short(const dsi_sched *s, const completion *c, int n) {
  const dsi_kv_seq *q = &s->e->seqs[c->seq];
  return DSI_MAX(0, DSI_CEIL_DIV(n, s->e->kv.block_size) - q->n_blocks);
}

static void preempt(dsi_sched *s, completion *c) {
  release_kv(s, c, 1);
  run_remove(s, c);
  wait_insert(s, c);
  s->acc.preemptions++;
}

/* ---- text: the detokenizer, then stop strings held back ---- */
typedef struct {
  const char *text;
  size_t len;
  const char *stop; /* the stop string found, NULL none */
  int oom;          /* the piece could not be held: the completion ends with an error */
} text_out;

#define TEXT_OOM "out of memory for the completion's text"

/* append piece to c's pending text; emit what can no longer be the start
 * of a stop string, or everything before a stop string found */
static text_out take_text(completion *c, const char *piece, size_t len, int last) {
  request *q = c->req;
  if (c->n_pend + len > c->cap_pend) { /* a token longer than any so far (rare: sized for most at submit) */
    size_t cap = 2 * (c->n_pend + len);
    char *p = realloc(c->pend, cap);
    if (!p) return (text_out){c->pend, 0, NULL, 1};
    c->pend = p, c->cap_pend = cap;
  }
  if (len) memcpy(c->pend + c->n_pend, piece, len);
  c->n_pend += len;
  text_out t = {c->pend, 0, NULL, 0};
  size_t cut = c->n_pend; /* first byte of the earliest stop string */
  for (int i = 0; i < q->r.n_stop; i++) {
    const char *hit = memmem(c->pend, c->n_pend, q->stop[i], strlen(q->stop[i]));
    if (hit && (size_t)(hit - c->pend) < cut) cut = (size_t)(hit - c->pend), t.stop = q->stop[i];
  }
  if (t.stop) {
    t.len = cut;
    return t;
  }
  size_t hold = 0; /* the longest end of the text that starts a stop string */
  for (int i = 0; !last && i < q->r.n_stop; i++) {
    size_t sl = strlen(q->stop[i]);
    for (size_t k = DSI_MIN(sl - 1, c->n_pend); k > hold; k--)
      if (!memcmp(c->pend + c->n_pend - k, q->stop[i], k)) {
        hold = k;
        break;
      }
  }
  t.len = c->n_pend - hold;
  return t;
}

/* after an event's text is out: keep only what was held back */
static void drop_text(completion *c, size_t used) {
  memmove(c->pend, c->pend + used, c->n_pend - used);
  c->n_pend -= used;
}

/* ---- statistics ---- */
static void stats_lock(dsi_sched *s) { pthread_mutex_lock(&s->mu); }
static void stats_unlock(dsi_sched *s) { pthread_mutex_unlock(&s->mu); }

/* the loop's counters and state into the snapshot dsi_sched_get_stats
 * reads; the caller holds mu */
static void publish_locked(dsi_sched *s) {
  int waiting = 0;
  for (completion *c = s->wait_head; c; c = c->next) waiting++;
  const dsi_kv *kv = &s->e->kv;
  s->st = s->acc;
  s->st.running = s->n_run;
  s->st.waiting = waiting;
  s->st.kv_blocks_total = kv->n_blocks;
  s->st.kv_blocks_used = dsi_kv_used(kv);
  s->st.kv_blocks_cached = kv->n_lru;
  s->st.prefix_queries = kv->queries;
  s->st.prefix_hits = kv->hits;
  s->st.batch_tokens_mean = s->acc.steps ? (double)s->sum_tokens / s->acc.steps : 0;
  s->st.batch_seqs_mean = s->acc.steps ? (double)s->sum_seqs / s->acc.steps : 0;
}

static void publish_stats(dsi_sched *s) {
  stats_lock(s);
  publish_locked(s);
  stats_unlock(s);
}

/* ---- finishing ---- */

/* c's last event: any text still held, the reason, its counts; then its
 * KV let go (kept in the prefix cache) and, with the request's last
 * completion, the request freed */
static void finish(dsi_sched *s, completion *c, dsi_finish why, const dsi_request_event *with, const char *error) {
  request *q = c->req;
  dsi_request_event ev = with ? *with : (dsi_request_event){.token = -1, .stop_token = -1};
  ev.id = q->id;
  ev.index = c->index;
  ev.finish = why;
  ev.error = error;
  if (!with && c->detok && why != DSI_FINISH_ERROR) { /* the detokenizer's and the held text */
    const char *piece;
    size_t len;
    dsi_detok_flush(c->detok, &piece, &len);
    text_out t = take_text(c, piece, len, 1);
    ev.text = t.text;
    ev.text_len = t.len;
    if (t.oom) why = ev.finish = DSI_FINISH_ERROR, ev.error = TEXT_OOM;
  }
  double tn = now();
  ev.prompt_tokens = q->r.n_prompt;
  ev.cached_tokens = c->cached;
  ev.completion_tokens = c->n_out;
  ev.queue_s = c->admitted ? c->t_admit - q->t_submit : tn - q->t_submit;
  ev.prefill_s = c->t_first > 0 ? c->t_first - c->t_admit : 0;
  ev.decode_s = c->t_first > 0 ? c->t_last - c->t_first : 0;
  if (q->r.on_event) q->r.on_event(q->r.user, &ev);
  release_kv(s, c, why != DSI_FINISH_ERROR);
  if (c->state == C_RUNNING) run_remove(s, c);
  else if (c->state == C_WAITING) wait_remove(s, c);
  c->state = C_DONE;
  s->acc.requests_finished[why]++;
  if (--q->n_left) return;
  stats_lock(s);
  for (request **p = &s->live; *p; p = &(*p)->next)
    if (*p == q) {
      *p = q->next;
      break;
    }
  s->n_live--;
  if (!s->n_live) { /* nothing in flight: the stats a waiter reads next are final */
    publish_locked(s);
    pthread_cond_broadcast(&s->idle);
  }
  stats_unlock(s);
  request_free(s, q);
}

static void cancel_all_of(dsi_sched *s, request *q) {
  for (int i = 0; i < q->r.n; i++) /* the request is freed with its last */
    if (q->c[i].state != C_DONE) {
      int last = q->n_left == 1;
      finish(s, &q->c[i], DSI_FINISH_CANCELLED, NULL, NULL);
      if (last) return;
    }
}

/* ---- one step ---- */
/* the inbox into the waiting list (in submission order), cancellations */
static void take_inbox(dsi_sched *s, request *in) {
  request *rev = NULL;
  while (in) {
    request *n = in->next;
    in->next = rev;
    rev = in;
    in = n;
  }
  for (request *q = rev, *n; q; q = n) {
    n = q->next;
    stats_lock(s);
    q->next = s->live;
    s->live = q;
    stats_unlock(s);
    for (int i = 0; i < q->r.n; i++) {
      q->c[i].arrival = ++s->next_arrival;
      wait_insert(s, &q->c[i]);
    }
  }
}

static void take_cancels(dsi_sched *s) {
  request *cancel[64];
  for (;;) { /* finishing frees requests: collect under the lock, finish outside it */
    int n = 0;
    stats_lock(s);
    for (request *q = s->live; q && n < 64; q = q->next)
      if (atomic_load(&q->cancel)) cancel[n++] = q;
    stats_unlock(s);
    if (!n) return;
    for (int i = 0; i < n; i++) cancel_all_of(s, cancel[i]);
  }
}

/* ---- the step-cost model ---- */
static void fit_add(dsi_sched *s, int n_decode, int n_prefill, double t) {
  const double x[3] = {1, n_decode, n_prefill}, decay = 0.97;
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++) s->fit_xx[i][j] = decay * s->fit_xx[i][j] + x[i] * x[j];
    s->fit_xt[i] = decay * s->fit_xt[i] + x[i] * t;
  }
  s->fit_steps++;
}

static double det3(double m[3][3]) {
  return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
         m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
}

/* the fitted (a, b, c), by Cramer's rule; 0 while the steps seen do not
 * determine it (too few, or no variety in their mix) */
static int fit_solve(const dsi_sched *s, double abc[3]) {
  double m[3][3];
  memcpy(m, s->fit_xx, sizeof m);
  double d = det3(m);
  if (s->fit_steps < 8 || !(fabs(d) > 1e-6 * fabs(m[0][0] * m[1][1] * m[2][2]) + 1e-12)) return 0;
  for (int k = 0; k < 3; k++) {
    memcpy(m, s->fit_xx, sizeof m);
    for (int i = 0; i < 3; i++) m[i][k] = s->fit_xt[i];
    abc[k] = det3(m) / d;
  }
  return abc[2] > 0;
}

/* prompt tokens the step may take in all, with `decoding` completions
 * decoding in it: a mixed step at most about two decode steps long, so long
 * prompts do not stall the others' tokens. `decoding` counts those waiting
 * for a place too (up to max_seqs): held to the step of the few decoding
 * now, prompts would come in too slowly for the batch ever to fill (a
 * steady stream of requests would settle with some of them waiting) */
static int chunk_cap(const dsi_sched *s, int decoding, int budget) {
  if (s->o.prefill_chunk > 0) return DSI_MIN(s->o.prefill_chunk, budget);
  if (!decoding) return budget;
  double abc[3];
  if (!fit_solve(s, abc)) return DSI_MIN(64, budget); /* until the model knows better */
  /* b < 0 (the intercept taking the experts' reading, the few-token decode
   * steps read fewer: docs/perf-notes.md) would shrink the step of a fuller
   * batch below the present one's */
  double decode_step = abc[0] + DSI_MAX(abc[1], 0.0) * decoding;
  int cap = (int)(decode_step / abc[2]);
  return DSI_MAX(16, DSI_MIN(cap, budget));
}

/* the first position from which c's tokens would give prompt logprobs still
 * owed, and how many of its next take tokens do */
static int plp_span(const completion *c, int take, int *p0) {
  const request *q = c->req;
  *p0 = DSI_MAX(c->computed, q->lp_done - 1);
  return DSI_MAX(0, DSI_MIN(c->computed + take, q->r.n_prompt - 1) - *p0);
}

/* c's next tokens in a step with plp_left prompt logprob rows left: at
 * most want, cut where those rows run out */
static int plp_cut(const completion *c, int want, int plp_left) {
  int p0, n = plp_span(c, want, &p0);
  return n > plp_left ? p0 + plp_left - c->computed : want;
}

/* put c's next take tokens into the batch */
static void add_seg(dsi_sched *s, int *n_seg, int *T, completion *c, int take, int *plp_left) {
  seg *g = &s->segs[(*n_seg)++];
  g->c = c;
  g->t0 = *T;
  g->n = take;
  for (int i = 0; i < take; i++) {
    s->b_tok[*T + i] = c->toks[c->computed + i];
    s->b_seq[*T + i] = c->seq;
    s->b_want[*T + i] = 0;
  }
  g->n_plp = plp_span(c, take, &g->p0);
  for (int i = 0; i < g->n_plp; i++) s->b_want[*T + g->p0 - c->computed + i] = 1;
  *plp_left -= g->n_plp;
  g->logits = c->computed + take == c->n_tok ? 1 : -1;
  if (g->logits >= 0) s->b_want[*T + take - 1] = 1;
  *T += take;
}

/* the batch: running completions first (their decode tokens, then their
 * prompt chunks), then waiting ones admitted first come, first served
 * while the KV pool has their blocks; returns the segments */
static int plan_step(dsi_sched *s, int *n_tokens, int *n_decode) {
  int budget = s->o.max_batched_tokens, T = 0, n_seg = 0, decoding = 0;
  int planned = 0; /* blocks the step's segments will take when the engine reserves them */
  int plp_left = s->o.prompt_logprob_rows;
  const dsi_kv *kv = &s->e->kv;
  for (int i = 0; i < s->n_run; i++) decoding += s->run[i]->n_tok - s->run[i]->computed == 1;
  int full = s->n_run; /* the batch once those waiting have a place */
  for (const completion *c = s->wait_head; c && full < s->o.max_seqs; c = c->next) full++;
  int prefill = chunk_cap(s, decoding ? full : 0, budget); /* prompt tokens left to the step */
  *n_decode = 0;
  for (int i = 0; i < s->n_run && T < budget;) {
    completion *c = s->run[i];
    int need = c->n_tok - c->computed, take = need == 1 ? 1 : DSI_MIN(need, DSI_MIN(prefill, budget - T));
    take = plp_cut(c, take, plp_left);
    if (!take) { /* the step's prompt tokens (or prompt logprob rows) are spent */
      i++;
      continue;
    }
    /* the pool: preempt the newest running completions until c fits, or c itself */
    while (blocks_short(s, c, c->computed + take) > dsi_kv_available(kv) - planned) {
      completion *victim = s->run[s->n_run - 1];
      preempt(s, victim);
      if (victim == c) break;
    }
    if (c->state != C_RUNNING) continue; /* c was the newest: preempted; run[i] is the next */
    planned += blocks_short(s, c, c->computed + take);
    add_seg(s, &n_seg, &T, c, take, &plp_left);
    *n_decode += need == 1;
    if (need > 1) prefill -= take;
    i++;
  }
  for (completion *c = s->wait_head, *n; c && T < budget && prefill > 0 && s->n_run < s->o.max_seqs; c = n) {
    n = c->next;
    request *q = c->req;
    /* a request's later completions start once the first has read the prompt (its blocks are then cached) */
    if (c->index > 0 && !c->admitted && q->c[0].state != C_DONE && q->c[0].computed < q->r.n_prompt &&
        !s->o.no_prefix_cache)
      continue;
    if (c->seq < 0 && open_seq(s, c)) { /* out of memory: this completion ends, the others go on */
      char msg[sizeof s->e->err.msg];
      snprintf(msg, sizeof msg, "%s", s->e->err.msg);
      finish(s, c, DSI_FINISH_ERROR, NULL, msg);
      continue;
    }
    int need = c->n_tok - c->computed, take = need == 1 ? 1 : DSI_MIN(need, DSI_MIN(prefill, budget - T));
    take = plp_cut(c, take, plp_left);
    if (!take || blocks_short(s, c, c->computed + take) > dsi_kv_available(kv) - planned) {
      release_kv(s, c, 1);
      break; /* first come, first served: no one overtakes it */
    }
    planned += blocks_short(s, c, c->computed + take);
    wait_remove(s, c);
    run_insert(s, c);
    if (!c->admitted) {
      c->admitted = 1;
      c->t_admit = now();
      s->acc.prompt_tokens += c->req->r.n_prompt;
    }
    add_seg(s, &n_seg, &T, c, take, &plp_left);
    *n_decode += need == 1;
    if (need > 1) prefill -= take;
  }
  /* logits rows in batch order: a segment's prompt logprob rows, then the one it samples */
  int row = 0;
  for (int i = 0; i < n_seg; i++) {
    seg *g = &s->segs[i];
    g->plp_row = row;
    row += g->n_plp;
    if (g->logits >= 0) g->logits = row++;
  }
  *n_tokens = T;
  return n_seg;
}

/* tok ends c's completion (EOS unless ignored, or one of stop_ids) */
static int is_stop(const dsi_sched *s, const completion *c, int32_t tok) {
  const request *q = c->req;
  if (!q->r.ignore_eos && (tok == s->eos[0] || tok == s->eos[1])) return 1;
  for (int i = 0; i < q->r.n_stop_ids; i++)
    if (tok == q->stop_ids[i]) return 1;
  return 0;
}

/* c drew tok: append it, its text, and the stop conditions */
static void deliver(dsi_sched *s, completion *c, int32_t tok, const dsi_sample_out *so) {
  request *q = c->req;
  const dsi_request *r = &q->r;
  double tn = now();
  if (!c->t_first) c->t_first = tn;
  c->t_last = tn;
  if (is_stop(s, c, tok)) {
    dsi_request_event ev = {.token = -1, .stop_token = tok};
    const char *piece;
    size_t len;
    if (c->detok) {
      text_out t = {NULL, 0, NULL, dsi_detok_flush(c->detok, &piece, &len) != DSI_OK};
      if (!t.oom) t = take_text(c, piece, len, 1);
      if (t.oom) {
        finish(s, c, DSI_FINISH_ERROR, NULL, TEXT_OOM);
        return;
      }
      ev.text = t.text, ev.text_len = t.len;
    }
    finish(s, c, DSI_FINISH_STOP, &ev, NULL);
    return;
  }
  c->toks[c->n_tok++] = tok;
  c->n_out++;
  s->acc.generation_tokens++;
  dsi_request_event ev = {.token = tok, .stop_token = -1, .logprob = so->logprob, .top = so->top, .n_top = so->n_top};
  text_out t = {NULL, 0, NULL, 0};
  int json_done = 0;
  if (r->json) { /* drawn among the tokens that continue the object */
    size_t nb = 0;
    const char *b = dsi_tok_id_bytes(s->tok, tok, &nb);
    json_done = b && !dsi_jsonc_feed(c->js, b, nb) && dsi_jsonc_done(c->js);
  }
  int at_end = json_done || (r->max_tokens > 0 && c->n_out >= r->max_tokens) || c->n_tok > s->e->max_context;
  if (c->detok) {
    const char *piece = NULL;
    size_t len = 0;
    dsi_err err = {0};
    if (dsi_detok_push(c->detok, tok, &piece, &len, &err)) {
      finish(s, c, DSI_FINISH_ERROR, NULL, err.msg);
      return;
    }
    if (at_end) { /* the end: whatever the detokenizer holds is final too */
      const char *p2;
      size_t l2;
      t = take_text(c, piece, len, 0);
      if (!t.oom) t.oom = dsi_detok_flush(c->detok, &p2, &l2) != DSI_OK;
      if (!t.oom) t = take_text(c, p2, l2, 1);
    } else {
      t = take_text(c, piece, len, 0);
    }
    if (t.oom) {
      finish(s, c, DSI_FINISH_ERROR, NULL, TEXT_OOM);
      return;
    }
    ev.text = t.text, ev.text_len = t.len;
  }
  if (t.stop) {
    ev.stop = t.stop;
    finish(s, c, DSI_FINISH_STOP, &ev, NULL);
  } else if (json_done) {
    ev.json_closed = 1;
    finish(s, c, DSI_FINISH_STOP, &ev, NULL);
  } else if (at_end) {
    ev.context_full = !(r->max_tokens > 0 && c->n_out >= r->max_tokens);
    finish(s, c, DSI_FINISH_LENGTH, &ev, NULL);
  } else {
    ev.id = q->id;
    ev.index = c->index;
    if (r->on_event) r->on_event(r->user, &ev);
    if (c->detok) drop_text(c, t.len);
  }
}

/* the step's forward failed: nothing of it was kept. Each completion's
 * share again alone, its logits rows (prompt logprobs, then the one
 * sampled: they follow one another) into their places; one that fails
 * alone ends with the engine's error */
static void retry_alone(dsi_sched *s, int n_seg) {
  for (int i = 0; i < n_seg; i++) {
    seg *g = &s->segs[i];
    dsi_batch b = {.n_tokens = g->n, .tokens = s->b_tok + g->t0, .seq = s->b_seq + g->t0, .want_logits = s->b_want + g->t0};
    if (dsi_engine_forward(s->e, &b, s->logits + (size_t)g->plp_row * s->vocab)) {
      char msg[sizeof s->e->err.msg];
      snprintf(msg, sizeof msg, "%s", s->e->err.msg);
      finish(s, g->c, DSI_FINISH_ERROR, NULL, msg);
      g->c = NULL;
    }
  }
}

/* the rows of a step to sample (or to take prompt logprobs from), split
 * over the pool's first n_ws threads (each row reads its own completion's
 * history and random stream, so who samples it changes nothing) */
#define SAMPLE_WS 16
typedef struct {
  dsi_sched *s;
  int n;
} sample_job;

static void plp_rows(void *ctx, int ith, int nth) {
  (void)nth;
  const sample_job *j = ctx;
  dsi_sched *s = j->s;
  for (int k = ith; ith < s->n_ws && k < j->n; k += s->n_ws)
    dsi_logprob_of(s->logits + (size_t)s->plp_at[k] * s->vocab, s->n_valid, s->plp_tok[k], &s->plp[k]);
}

/* tok can continue c's held output: its bytes keep it a value (an added
 * or special token never does); a stop token where the output may end (a
 * regex's text that matches) */
static int json_allows(const dsi_sched *s, const completion *c, int32_t tok, dsi_jsonc *t) {
  const dsi_jsonc *js = c->js;
  if (is_stop(s, c, tok)) return dsi_jsonc_may_end(js);
  size_t n = 0;
  const char *b = dsi_tok_is_added(s->tok, tok) ? NULL : dsi_tok_id_bytes(s->tok, tok, &n);
  if (!b || !n) return 0;
  dsi_jsonc_copy(t, js);
  return !dsi_jsonc_feed(t, b, n);
}

/* a json row whose draw cannot continue the object: the draw again, from
 * the same stream, over the tokens that can (the logits restored from
 * saved, the others at -inf: the distribution renormalized over them),
 * logprobs still under the raw logits; -1 when no token can */
static int32_t json_redraw(dsi_sched *s, completion *c, const float *saved, float *lg, dsi_sample_ws *ws,
                           dsi_sample_out *out, dsi_jsonc *t, uint8_t *ok) {
  const request *q = c->req;
  int any = dsi_jsonc_allowed(c->js, &s->json_vocab, ok, t), end = dsi_jsonc_may_end(c->js);
  if (end) { /* the stop tokens, where the output may end */
    for (int i = -2; i < q->r.n_stop_ids; i++) {
      int32_t v = i < 0 ? (q->r.ignore_eos ? -1 : s->eos[i + 2]) : q->stop_ids[i];
      if (v >= 0 && v < s->n_valid) ok[v] = 1, any = 1;
    }
  }
  if (!any) return -1;
  for (int v = 0; v < s->n_valid; v++) lg[v] = ok[v] ? saved[v] : -INFINITY;
  int32_t tok = dsi_sample(&q->r.sampling, &c->rng, lg, s->n_valid, c->toks, c->n_tok, q->r.n_prompt, ws, NULL);
  if (out->want_logprob || out->n_top) dsi_logprob_of(saved, s->n_valid, tok, out);
  return tok;
}

static void sample_rows(void *ctx, int ith, int nth) {
  (void)nth;
  const sample_job *j = ctx;
  dsi_sched *s = j->s;
  for (int k = ith; ith < s->n_ws && k < j->n; k += s->n_ws) {
    const seg *g = &s->segs[s->todo[k]];
    completion *c = g->c;
    const request *q = c->req;
    s->outs[k] = (dsi_sample_out){.want_logprob = q->r.logprobs, .n_top = q->r.top_logprobs};
    float *lg = s->logits + (size_t)g->logits * s->vocab;
    float *saved = q->r.json ? s->json_saved + (size_t)ith * s->vocab : NULL;
    if (saved) memcpy(saved, lg, (size_t)s->n_valid * sizeof(float));
    s->drawn[k] = dsi_sample(&q->r.sampling, &c->rng, lg, s->n_valid, c->toks, c->n_tok, q->r.n_prompt, &s->ws[ith],
                             &s->outs[k]);
    if (saved && !json_allows(s, c, s->drawn[k], &s->json_try[ith]))
      s->drawn[k] = json_redraw(s, c, saved, lg, &s->ws[ith], &s->outs[k], &s->json_try[ith],
                                s->json_ok + (size_t)ith * s->vocab);
    if (s->script) s->drawn[k] = c->n_out < s->n_script ? s->script[c->n_out] : s->eos[0];
  }
}

/* the step's prompt logprob rows: each position's once, in order, as an
 * event of its request (a position another completion of the request gave
 * already, as when completions prefill side by side, is passed over) */
static void prompt_logprobs(dsi_sched *s, int n_seg) {
  sample_job j = {s, 0};
  for (int i = 0; i < n_seg; i++) {
    const seg *g = &s->segs[i];
    for (int k = 0; g->c && k < g->n_plp; k++) {
      s->plp[j.n] = (dsi_sample_out){.n_top = g->c->req->r.top_logprobs};
      s->plp_tok[j.n] = g->c->toks[g->p0 + k + 1];
      s->plp_at[j.n++] = g->plp_row + k;
    }
  }
  if (!j.n) return;
  if (j.n > 1 && s->n_ws > 1) dsi_pool_run(s->e->pool, plp_rows, &j);
  else plp_rows(&j, 0, 1);
  int k = 0;
  for (int i = 0; i < n_seg; i++) {
    const seg *g = &s->segs[i];
    for (int r = 0; g->c && r < g->n_plp; r++, k++) {
      request *q = g->c->req;
      int pos = g->p0 + r + 1;
      if (pos != q->lp_done) continue;
      q->lp_done++;
      dsi_request_event ev = {.id = q->id, .index = g->c->index, .token = s->plp_tok[k], .stop_token = -1,
                              .prompt_pos = pos, .logprob = s->plp[k].logprob, .top = s->plp[k].top,
                              .n_top = s->plp[k].n_top};
      if (q->r.on_event) q->r.on_event(q->r.user, &ev);
    }
  }
}

/* one step; 0 when there was nothing to run */
static int step(dsi_sched *s) {
  double t_plan = now();
  int T, n_decode, n_seg = plan_step(s, &T, &n_decode);
  if (!T) return 0;
  double t0 = now();
  dsi_batch b = {.n_tokens = T, .tokens = s->b_tok, .seq = s->b_seq, .want_logits = s->b_want};
  if (dsi_engine_forward(s->e, &b, s->logits)) retry_alone(s, n_seg);
  double dt = now() - t0;
  fit_add(s, n_decode, T - n_decode, dt);
  s->acc.forward_seconds += dt;
  s->acc.steps++;
  s->sum_tokens += T;
  s->sum_seqs += n_seg;
  sample_job j = {s, 0};
  for (int i = 0; i < n_seg; i++) {
    seg *g = &s->segs[i];
    completion *c = g->c;
    if (!c) continue; /* failed alone */
    c->computed += g->n;
    dsi_kv_commit(&s->e->kv, &s->e->seqs[c->seq], c->toks);
    if (g->logits >= 0) s->todo[j.n++] = i;
  }
  prompt_logprobs(s, n_seg);
  if (j.n > 1 && s->n_ws > 1) dsi_pool_run(s->e->pool, sample_rows, &j);
  else sample_rows(&j, 0, 1);
  for (int k = 0; k < j.n; k++) {
    completion *c = s->segs[s->todo[k]].c;
    if (s->drawn[k] >= 0) deliver(s, c, s->drawn[k], &s->outs[k]);
    else finish(s, c, DSI_FINISH_ERROR, NULL, "no token of the vocabulary can continue the JSON value (or the regex's text)");
  }
  s->acc.step_seconds += now() - t_plan;
  return 1;
}

/* ---- the loop ---- */
static void *loop(void *arg) {
  dsi_sched *s = arg;
  int busy = 0;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->stop && !s->inbox && !s->cancel_pending && !s->reset_cache && !busy) pthread_cond_wait(&s->wake, &s->mu);
    request *in = s->inbox;
    s->inbox = NULL;
    int stopping = s->stop, cancels = s->cancel_pending, reset = s->reset_cache;
    s->cancel_pending = s->reset_cache = 0;
    pthread_mutex_unlock(&s->mu);
    if (reset) dsi_kv_reset_cache(&s->e->kv);
    take_inbox(s, in);
    if (stopping) break;
    if (cancels || busy) take_cancels(s);
    busy = step(s);
    publish_stats(s);
  }
  /* closing: everything in flight ends cancelled */
  for (;;) {
    stats_lock(s);
    request *q = s->live;
    stats_unlock(s);
    if (!q) break;
    cancel_all_of(s, q);
  }
  publish_stats(s);
  return NULL;
}

int dsi_sched_testing_script(dsi_sched *s, const int32_t *ids, int n) {
  int32_t *c = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
  if (!c) return DSI_E_NOMEM;
  memcpy(c, ids, (size_t)n * sizeof *ids);
  /* under mu, which the loop takes between steps: a step before this one
   * read the old script, a step after reads the new */
  pthread_mutex_lock(&s->mu);
  free(s->script);
  s->script = c;
  s->n_script = n;
  pthread_mutex_unlock(&s->mu);
  return DSI_OK;
}

static void free_buffers(dsi_sched *s) {
  free(s->run), free(s->segs), free(s->b_tok), free(s->b_seq), free(s->b_want), free(s->logits);
  for (int i = 0; s->ws && i < s->n_ws; i++) dsi_sample_ws_free(&s->ws[i]);
  free(s->ws), free(s->todo), free(s->drawn), free(s->outs), free(s->script);
  free(s->plp), free(s->plp_tok), free(s->plp_at), free(s->json_saved), free(s->json_try), free(s->json_ok);
  dsi_jsonc_vocab_free(&s->json_vocab);
}

int dsi_sched_open(dsi_sched **out, dsi_engine *e, const dsi_tok *tok, const dsi_sched_opts *o, dsi_err *err) {
  *out = NULL;
  dsi_sched *s = calloc(1, sizeof *s);
  if (!s) return dsi_errf(err, DSI_E_NOMEM, "out of memory for the scheduler");
  s->e = e;
  s->tok = tok;
  if (o) s->o = *o;
  if (s->o.max_seqs <= 0) s->o.max_seqs = 64;
  if (s->o.max_batched_tokens <= 0 || s->o.max_batched_tokens > e->max_tokens) s->o.max_batched_tokens = e->max_tokens;
  s->o.max_seqs = DSI_MIN(s->o.max_seqs, s->o.max_batched_tokens);
  int bs = e->kv.block_size;
  if (e->kv.n_blocks < DSI_CEIL_DIV(e->max_context + 1, bs)) {
    free(s);
    return dsi_errf(err, DSI_E_CAPACITY, "the KV pool (%d blocks of %d tokens) cannot hold one full context of %d tokens",
                    e->kv.n_blocks, bs, e->max_context);
  }
  s->vocab = e->m->cfg.vocab_size;
  /* ids past the tokenizer's (a checkpoint's padding rows) are never drawn */
  s->n_valid = tok ? DSI_MIN(dsi_tok_vocab_size(tok), s->vocab) : s->vocab;
  s->eos[0] = e->m->cfg.eos_token_id;
  s->eos[1] = tok && dsi_tok_eos_id(tok) >= 0 ? dsi_tok_eos_id(tok) : s->eos[0];
  int ms = s->o.max_seqs, mt = s->o.max_batched_tokens;
  s->run = calloc((size_t)ms, sizeof *s->run);
  s->segs = calloc((size_t)ms, sizeof *s->segs);
  s->b_tok = malloc((size_t)mt * sizeof(int32_t));
  s->b_seq = malloc((size_t)mt * sizeof(int32_t));
  s->b_want = malloc((size_t)mt);
  if (s->o.prompt_logprob_rows <= 0 || s->o.prompt_logprob_rows > mt) s->o.prompt_logprob_rows = mt;
  int pr = s->o.prompt_logprob_rows;
  s->logits = malloc(((size_t)ms + pr) * s->vocab * sizeof(float)); /* touched only as far as used */
  s->plp = malloc((size_t)pr * sizeof *s->plp);
  s->plp_tok = malloc((size_t)pr * sizeof *s->plp_tok);
  s->plp_at = malloc((size_t)pr * sizeof *s->plp_at);
  s->n_ws = DSI_MAX(1, DSI_MIN(DSI_MIN(dsi_pool_size(e->pool), ms), SAMPLE_WS));
  s->ws = calloc((size_t)s->n_ws, sizeof *s->ws);
  s->json_saved = malloc((size_t)s->n_ws * s->vocab * sizeof(float)); /* touched only by json requests */
  s->json_try = calloc((size_t)s->n_ws, sizeof *s->json_try); /* (a test reads frames it did not copy: defined) */
  s->json_ok = malloc((size_t)s->n_ws * s->vocab);
  s->todo = malloc((size_t)ms * sizeof *s->todo);
  s->drawn = malloc((size_t)ms * sizeof *s->drawn);
  s->outs = malloc((size_t)ms * sizeof *s->outs);
  int ok = s->run && s->segs && s->b_tok && s->b_seq && s->b_want && s->logits && s->ws && s->todo && s->drawn &&
           s->outs && s->plp && s->plp_tok && s->plp_at && s->json_saved &&
           s->json_try && s->json_ok && (!s->tok || !dsi_jsonc_vocab_init(&s->json_vocab, s->tok, s->n_valid));
  for (int i = 0; ok && i < s->n_ws; i++) ok = !dsi_sample_ws_init(&s->ws[i], s->vocab);
  if (ok) {
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->sc_mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    ok = pthread_create(&s->thread, NULL, loop, s) == 0;
    if (!ok) {
      pthread_mutex_destroy(&s->mu);
      pthread_mutex_destroy(&s->sc_mu);
      pthread_cond_destroy(&s->wake);
      pthread_cond_destroy(&s->idle);
    }
  }
  if (!ok) {
    free_buffers(s);
    free(s);
    return dsi_errf(err, DSI_E_NOMEM, "cannot set up the scheduler for %d sequences (%d tokens a step)", ms, mt);
  }
  *out = s;
  return DSI_OK;
}

void dsi_sched_free(dsi_sched *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  for (int i = 0; i < SCHEMA_CACHE; i++) { /* every request is gone: none is held */
    free(s->sc_cache[i].text);
    dsi_jschema_free(s->sc_cache[i].sc);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->sc_mu);
  pthread_cond_destroy(&s->wake);
  pthread_cond_destroy(&s->idle);
  free_buffers(s);
  free(s);
}
