/* tests: the serving core (dsi_sched). Greedy outputs of 32 requests with
 * mixed prompt lengths, shared prefixes and arrivals spread over the run,
 * on a KV pool small enough to force preemptions, equal each request run
 * alone through the engine (token for token); a prompt seen before comes
 * from the prefix cache with the same output; cancelling frees every block
 * and silences the callback; requests submitted and cancelled from several
 * threads at once (run under TSan too) all end once; stop strings that
 * span two tokens and stop tokens; n = 4 completions equal four requests
 * seeded seed + i; a failing forward ends the failing request with its
 * error while the others finish; a long request among a flood of short
 * ones is not starved; logprobs. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"
#include "engine/engine_testing.h"
#include "engine/jsonc.h"
#include "engine/regex.h"
#include "test_isa.h"
#include "tokenizer/tokenizer.h"
#include "tools/internal.h"

#define MAX_OUT 48
#define BS 8 /* KV block size: small, so prompts cross blocks and pools run out */

static dsi_model *g_m;
static dsi_tok *g_tok;
static int g_vocab;
static char g_dir[256];

/* ---- what a completion's callback saw ---- */
typedef struct {
  int32_t out[MAX_OUT];
  int n_out;
  char text[4096];
  size_t n_text;
  int finish, stop_token, context_full, cached, prompt_tokens, completion_tokens;
  char stop[64], error[256];
  int after_finish; /* events after the last: must stay 0 */
  float logprob[MAX_OUT];
  dsi_token_logprob top[MAX_OUT][5];
  int n_top;
} result;

#define MAX_PLP 64
typedef struct {
  result r[4];          /* per completion */
  atomic_int finished;  /* completions ended */
  int n;
  /* prompt logprobs: positions 1.. in order, and events out of order or
   * after the first drawn token */
  int32_t plp_tok[MAX_PLP];
  float plp[MAX_PLP];
  dsi_token_logprob plp_top[MAX_PLP][3];
  int n_plp, plp_bad;
} record;

static atomic_long g_events;

static void on_event(void *user, const dsi_request_event *ev) {
  record *rec = user;
  result *r = &rec->r[ev->index];
  atomic_fetch_add(&g_events, 1);
  if (ev->prompt_pos > 0) {
    int k = rec->n_plp + 1;
    if (ev->prompt_pos != k || k >= MAX_PLP || r->n_out || r->finish || ev->text_len || ev->finish) {
      rec->plp_bad++;
      return;
    }
    rec->plp_tok[k] = ev->token;
    rec->plp[k] = ev->logprob;
    for (int i = 0; i < ev->n_top && i < 3; i++) rec->plp_top[k][i] = ev->top[i];
    rec->n_plp = k;
    return;
  }
  if (r->finish) {
    r->after_finish++;
    return;
  }
  if (ev->token >= 0 && r->n_out < MAX_OUT) {
    r->logprob[r->n_out] = ev->logprob;
    for (int i = 0; i < ev->n_top && i < 5; i++) r->top[r->n_out][i] = ev->top[i];
    r->n_top = ev->n_top;
    r->out[r->n_out++] = ev->token;
  }
  if (ev->text_len && r->n_text + ev->text_len < sizeof r->text) {
    memcpy(r->text + r->n_text, ev->text, ev->text_len);
    r->n_text += ev->text_len;
  }
  if (!ev->finish) return;
  r->stop_token = ev->stop_token;
  r->context_full = ev->context_full;
  r->cached = ev->cached_tokens;
  r->prompt_tokens = ev->prompt_tokens;
  r->completion_tokens = ev->completion_tokens;
  if (ev->stop) snprintf(r->stop, sizeof r->stop, "%s", ev->stop);
  if (ev->error) snprintf(r->error, sizeof r->error, "%s", ev->error);
  r->finish = ev->finish;
  atomic_fetch_add(&rec->finished, 1);
}

/* ---- engines and the oracle ----
 * f32 activations: what is checked is the scheduler's bookkeeping (chunks,
 * preemption and recompute, shared prefixes), token for token against a
 * request alone. Where the scheduler cuts a prompt differently, its tokens
 * take the per-token or the segment attention, whose f32 sums differ in
 * order (~1e-6); bf16 activations would round that to bf16 steps and flip
 * the near ties of a random model's logits. */
static dsi_engine *open_engine(int kv_blocks, int max_context, int threads) {
  dsi_engine *e;
  dsi_err err = {0};
  dsi_engine_opts o = {.n_threads = threads, .kv_block_size = BS, .kv_blocks = kv_blocks, .max_context = max_context,
                       .max_tokens = 64, .isa = test_isa(), .mla_form = test_mla_form(), .act_precision = DSI_ACT_F32};
  if (dsi_engine_open(&e, g_m, &o, &err)) {
    fprintf(stderr, "engine: %s\n", err.msg);
    abort();
  }
  return e;
}

static dsi_sched *open_sched_rows(dsi_engine *e, int max_seqs, int budget, int chunk, int plp_rows) {
  dsi_sched *s;
  dsi_err err = {0};
  dsi_sched_opts o = {.max_seqs = max_seqs, .max_batched_tokens = budget, .prefill_chunk = chunk,
                      .prompt_logprob_rows = plp_rows};
  if (dsi_sched_open(&s, e, g_tok, &o, &err)) {
    fprintf(stderr, "sched: %s\n", err.msg);
    abort();
  }
  return s;
}

static dsi_sched *open_sched(dsi_engine *e, int max_seqs, int budget, int chunk) {
  return open_sched_rows(e, max_seqs, budget, chunk, 0);
}

static int argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

/* the oracle: n greedy tokens of prompt alone, through the engine's batch API */
static void alone(const int32_t *prompt, int np, int n, int32_t *out) {
  dsi_engine *e = open_engine(64, 128, 2);
  float *lg = malloc((size_t)g_vocab * sizeof(float));
  int s = dsi_seq_new(e);
  int32_t seqv[128];
  uint8_t want[128] = {0};
  for (int i = 0; i < np; i++) seqv[i] = s;
  want[np - 1] = 1;
  dsi_batch b = {.n_tokens = np, .tokens = prompt, .seq = seqv, .want_logits = want};
  DSI_ASSERT(dsi_engine_forward(e, &b, lg) == 0);
  for (int i = 0; i < n; i++) {
    int32_t t = argmax(lg, dsi_tok_vocab_size(g_tok) < g_vocab ? dsi_tok_vocab_size(g_tok) : g_vocab);
    out[i] = t;
    dsi_batch d = {.n_tokens = 1, .tokens = &t, .seq = &s};
    DSI_ASSERT(dsi_engine_forward(e, &d, lg) == 0);
  }
  free(lg);
  dsi_engine_free(e);
}

static uint64_t submit(dsi_sched *s, const int32_t *p, int np, int max_tokens, record *rec, dsi_request *tmpl) {
  dsi_request r = tmpl ? *tmpl : (dsi_request){0};
  r.prompt = p;
  r.n_prompt = np;
  r.max_tokens = max_tokens;
  if (!r.on_event) r.on_event = on_event;
  r.user = rec;
  if (!tmpl) r.ignore_eos = 1;
  uint64_t id = 0;
  dsi_err err = {0};
  int rc = dsi_sched_submit(s, &r, &id, &err);
  CHECKF(rc == 0, "submit: %s", err.msg);
  return id;
}

static void wait_events(long n) {
  for (int i = 0; i < 20000 && atomic_load(&g_events) < n; i++) usleep(100);
}

/* ---- 32 requests against each alone ---- */
#define N_REQ 32
static void test_many(void) {
  static int32_t prompts[N_REQ][48];
  int np[N_REQ];
  dsi_rng rng;
  dsi_rng_seed(&rng, 5);
  int32_t shared[24];
  for (int i = 0; i < 24; i++) shared[i] = 2 + (int)(dsi_rng_u64(&rng) % (unsigned)(g_vocab - 2));
  for (int q = 0; q < N_REQ; q++) {
    np[q] = 3 + (int)(dsi_rng_u64(&rng) % 38);
    for (int i = 0; i < np[q]; i++) prompts[q][i] = 2 + (int)(dsi_rng_u64(&rng) % (unsigned)(g_vocab - 2));
    if (q % 4 == 1) { /* a quarter start with the same 24 tokens: prefix hits */
      np[q] = 24 + np[q] % 16;
      memcpy(prompts[q], shared, sizeof shared);
    }
  }
  /* 30 blocks of 8 tokens for up to 8 sequences of ~20-55 tokens: preemptions */
  dsi_engine *e = open_engine(30, 64, 2);
  dsi_sched *s = open_sched(e, 8, 32, 16);
  static record rec[N_REQ];
  memset(rec, 0, sizeof rec);
  atomic_store(&g_events, 0);
  for (int q = 0; q < N_REQ; q++) { /* arrivals spread over the run */
    if (q >= 8 && q % 4 == 0) wait_events(3 * q);
    submit(s, prompts[q], np[q], 12, &rec[q], NULL);
  }
  CHECK(dsi_sched_wait_idle(s, 120) == 0);
  dsi_sched_stats st;
  dsi_sched_get_stats(s, &st);
  int same = 0;
  for (int q = 0; q < N_REQ; q++) {
    int32_t want[12];
    alone(prompts[q], np[q], 12, want);
    const result *r = &rec[q].r[0];
    int eq = r->finish == DSI_FINISH_LENGTH && r->n_out == 12 && !memcmp(r->out, want, sizeof want);
    CHECKF(eq, "request %d (%d prompt tokens): %d tokens, finish %d, differ from alone", q, np[q], r->n_out, r->finish);
    same += eq;
    CHECK(r->after_finish == 0 && r->prompt_tokens == np[q] && r->completion_tokens == 12);
  }
  printf("32 requests: %d equal alone; %ld steps, %.1f tokens and %.1f sequences a step, %ld preemptions, "
         "prefix cache %ld of %ld tokens\n",
         same, st.steps, st.batch_tokens_mean, st.batch_seqs_mean, st.preemptions, st.prefix_hits, st.prefix_queries);
  CHECKF(st.preemptions > 0, "no preemption with a pool of 30 blocks");
  CHECKF(st.prefix_hits > 0, "no prefix cache hit");
  CHECK(st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0);
  CHECK(st.requests_finished[DSI_FINISH_LENGTH] == N_REQ);

  /* a prompt seen just before: all of it but its last token from the
   * cache (token-granular), and the same output */
  record first = {0}, again = {0};
  submit(s, prompts[1], np[1], 12, &first, NULL);
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  submit(s, prompts[1], np[1], 12, &again, NULL);
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  CHECKF(again.r[0].cached == np[1] - 1, "cached %d of %d prompt tokens", again.r[0].cached, np[1]);
  CHECK(again.r[0].n_out == 12 && !memcmp(again.r[0].out, rec[1].r[0].out, 12 * sizeof(int32_t)));
  dsi_sched_free(s);
  dsi_engine_free(e);
}

/* ---- cancelling ---- */
static void test_cancel(void) {
  dsi_engine *e = open_engine(64, 128, 2);
  dsi_sched *s = open_sched(e, 8, 64, 0);
  int32_t p[16];
  for (int i = 0; i < 16; i++) p[i] = 3 + i;
  record rec[6] = {0};
  uint64_t id[6];
  atomic_store(&g_events, 0);
  for (int q = 0; q < 6; q++) id[q] = submit(s, p, 8 + q, 0, &rec[q], NULL); /* until the context is full */
  wait_events(12);
  for (int q = 0; q < 6; q += 2) CHECK(dsi_sched_cancel(s, id[q]) == 0);
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  for (int q = 0; q < 6; q++) {
    const result *r = &rec[q].r[0];
    CHECKF(r->finish == (q % 2 ? DSI_FINISH_LENGTH : DSI_FINISH_CANCELLED), "request %d ended %d", q, r->finish);
    CHECK(r->after_finish == 0);
    if (q % 2)
      CHECKF(r->context_full && r->completion_tokens == 128 - (8 + q) + 1, "request %d: %d tokens, context_full %d", q,
             r->completion_tokens, r->context_full);
  }
  CHECK(dsi_sched_cancel(s, id[0]) == DSI_E_INVAL); /* no longer in flight */
  dsi_sched_stats st;
  dsi_sched_get_stats(s, &st);
  int avail, total;
  dsi_engine_kv_blocks(e, &avail, &total, NULL);
  CHECKF(st.kv_blocks_used == 0 && avail == total, "after cancelling: %d blocks used, %d of %d available",
         st.kv_blocks_used, avail, total);
  /* cancelled while waiting, before any step took it */
  record late = {0};
  uint64_t lid = submit(s, p, 16, 20, &late, NULL);
  dsi_sched_cancel(s, lid);
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  CHECK(late.r[0].finish == DSI_FINISH_CANCELLED || late.r[0].finish == DSI_FINISH_LENGTH);
  /* closing with requests in flight: each told it was cancelled */
  record open[3] = {0};
  for (int q = 0; q < 3; q++) submit(s, p, 10, 0, &open[q], NULL);
  dsi_sched_free(s);
  for (int q = 0; q < 3; q++) CHECK(open[q].r[0].finish == DSI_FINISH_CANCELLED && open[q].r[0].after_finish == 0);
  dsi_engine_free(e);
  printf("cancel: blocks back to the pool, callbacks silent after the end\n");
}

/* ---- many threads submitting and cancelling at once ---- */
#define N_THREADS 4
#define PER_THREAD 8
typedef struct {
  dsi_sched *s;
  int t;
  record rec[PER_THREAD];
} thread_job;

static void *hammer(void *arg) {
  thread_job *j = arg;
  dsi_rng rng;
  dsi_rng_seed(&rng, 100 + j->t);
  int32_t p[24];
  for (int i = 0; i < 24; i++) p[i] = 2 + (int)(dsi_rng_u64(&rng) % 300);
  uint64_t ids[PER_THREAD];
  for (int q = 0; q < PER_THREAD; q++) {
    /* every fourth held to one schema, or to its thread's: the schema
     * cache taken and let go from every thread */
    char own[96];
    snprintf(own, sizeof own, "{\"type\":\"object\",\"properties\":{\"t%d\":{\"type\":\"boolean\"}}}", j->t);
    dsi_request r = {.prompt = p, .n_prompt = 4 + q, .max_tokens = 6 + q, .ignore_eos = 1, .on_event = on_event,
                     .user = &j->rec[q], .n = 1 + q % 2, .sampling = {.temperature = 0.7f, .seed = (uint64_t)q},
                     .json = q % 4 == 3};
    if (r.json) r.json_schema = q % 8 == 3 ? "{\"type\":\"object\"}" : own;
    j->rec[q].n = r.n;
    dsi_err err = {0};
    if (dsi_sched_submit(j->s, &r, &ids[q], &err)) ids[q] = 0;
    if (q % 3 == 1) dsi_sched_cancel(j->s, ids[q]);
    if (q % 3 == 2) usleep((useconds_t)(dsi_rng_u64(&rng) % 3000));
  }
  dsi_sched_stats st;
  dsi_sched_get_stats(j->s, &st);
  if (j->t == 0) dsi_sched_cancel(j->s, ids[PER_THREAD - 1]);
  return NULL;
}

static void test_threads(void) {
  dsi_engine *e = open_engine(48, 64, 2);
  dsi_sched *s = open_sched(e, 6, 32, 0);
  static thread_job jobs[N_THREADS];
  pthread_t th[N_THREADS];
  for (int t = 0; t < N_THREADS; t++) {
    memset(&jobs[t], 0, sizeof jobs[t]);
    jobs[t].s = s;
    jobs[t].t = t;
    pthread_create(&th[t], NULL, hammer, &jobs[t]);
  }
  for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
  CHECK(dsi_sched_wait_idle(s, 120) == 0);
  int ended = 0, bad = 0;
  for (int t = 0; t < N_THREADS; t++)
    for (int q = 0; q < PER_THREAD; q++)
      for (int i = 0; i < jobs[t].rec[q].n; i++) {
        const result *r = &jobs[t].rec[q].r[i];
        ended += r->finish != DSI_FINISH_NONE;
        /* a JSON value may close before max_tokens (stop) */
        bad += r->after_finish != 0 || (r->finish != DSI_FINISH_LENGTH && r->finish != DSI_FINISH_CANCELLED &&
                                        !(q % 4 == 3 && r->finish == DSI_FINISH_STOP));
      }
  int want = 0;
  for (int q = 0; q < PER_THREAD; q++) want += N_THREADS * (1 + q % 2);
  CHECKF(ended == want && bad == 0, "%d of %d completions ended, %d badly", ended, want, bad);
  dsi_sched_stats st;
  dsi_sched_get_stats(s, &st);
  CHECK(st.kv_blocks_used == 0 && st.running == 0 && st.waiting == 0);
  printf("threads: %d submitters, %d completions, each ended once\n", N_THREADS, ended);
  dsi_sched_free(s);
  dsi_engine_free(e);
}

/* ---- stop strings and stop tokens ---- */
static void test_stops(void) {
  dsi_engine *e = open_engine(64, 128, 2);
  dsi_sched *s = open_sched(e, 4, 64, 0);
  const char *prompt = "The capital of France is";
  int32_t *ids;
  size_t np;
  dsi_err err = {0};
  DSI_ASSERT(dsi_tok_encode(g_tok, prompt, strlen(prompt), DSI_TOK_ADD_SPECIAL, &ids, &np, &err) == 0);
  record full = {0};
  submit(s, ids, (int)np, 40, &full, NULL);
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  const result *f = &full.r[0];
  /* the text each token added, to find a boundary with text on both sides */
  size_t ends[MAX_OUT];
  for (int k = 0; k < f->n_out; k++) {
    char *t;
    size_t n;
    DSI_ASSERT(dsi_tok_decode(g_tok, f->out, (size_t)k + 1, DSI_TOK_SKIP_UNKNOWN, &t, &n, &err) == 0);
    ends[k] = n;
    free(t);
  }
  int tested = 0;
  for (int k = 1; k + 1 < f->n_out && !tested; k++) {
    size_t a = ends[k - 1], b = ends[k]; /* token k's text is [a, b) */
    if (b - a < 1 || ends[k + 1] - b < 1 || a < 1) continue;
    char stop[8];
    size_t sl = 0;
    stop[sl++] = f->text[b - 1]; /* the last byte of token k, the first of token k + 1 */
    stop[sl++] = f->text[b];
    stop[sl] = 0;
    if ((stop[0] & 0xc0) == 0x80 || (stop[1] & 0x80)) continue; /* plain ASCII, whole characters */
    const char *first = memmem(f->text, f->n_text, stop, sl);
    record cut = {0};
    const char *stops[1] = {stop};
    dsi_request r = {.ignore_eos = 1, .stop = stops, .n_stop = 1};
    submit(s, ids, (int)np, 40, &cut, &r);
    CHECK(dsi_sched_wait_idle(s, 60) == 0);
    const result *c = &cut.r[0];
    size_t want = (size_t)(first - f->text);
    CHECKF(c->finish == DSI_FINISH_STOP && !strcmp(c->stop, stop), "stop string '%s': finish %d", stop, c->finish);
    CHECKF(c->n_text == want && !memcmp(c->text, f->text, want), "stop string '%s': %zu bytes of text, want %zu", stop,
           c->n_text, want);
    tested = 1;
    printf("stop string '%s' across tokens %d and %d: text cut at byte %zu of %zu\n", stop, k, k + 1, want, f->n_text);
  }
  CHECKF(tested, "no token boundary with text on both sides in '%.*s'", (int)f->n_text, f->text);
  /* a stop token: the completion ends before it, the token not delivered */
  record st = {0};
  int32_t stop_id = f->out[5];
  int first_at = 0;
  while (f->out[first_at] != stop_id) first_at++;
  dsi_request r = {.ignore_eos = 1, .stop_ids = &stop_id, .n_stop_ids = 1};
  submit(s, ids, (int)np, 40, &st, &r);
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  CHECKF(st.r[0].finish == DSI_FINISH_STOP && st.r[0].stop_token == stop_id && st.r[0].n_out == first_at &&
             !memcmp(st.r[0].out, f->out, (size_t)first_at * sizeof(int32_t)),
         "stop token %d: finish %d after %d tokens, want %d", stop_id, st.r[0].finish, st.r[0].n_out, first_at);
  free(ids);
  dsi_sched_free(s);
  dsi_engine_free(e);
}

/* ---- n completions, seeded ---- */
static void test_n(void) {
  dsi_engine *e = open_engine(96, 64, 2);
  dsi_sched *s = open_sched(e, 8, 64, 0);
  int32_t p[20];
  for (int i = 0; i < 20; i++) p[i] = 10 + 7 * i;
  dsi_request t = {.n = 4, .ignore_eos = 1, .sampling = {.temperature = 1.0f, .top_p = 0.95f, .seed = 77}};
  record four = {.n = 4};
  submit(s, p, 20, 16, &four, &t);
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  int distinct = 0;
  for (int i = 0; i < 4; i++) {
    record one = {0};
    dsi_request u = t;
    u.n = 1;
    u.sampling.seed = 77 + (uint64_t)i;
    submit(s, p, 20, 16, &one, &u);
    CHECK(dsi_sched_wait_idle(s, 60) == 0);
    CHECKF(four.r[i].n_out == 16 && !memcmp(four.r[i].out, one.r[0].out, 16 * sizeof(int32_t)),
           "completion %d of 4 differs from a request seeded %d", i, 77 + i);
    if (i && memcmp(four.r[i].out, four.r[0].out, 16 * sizeof(int32_t))) distinct++;
  }
  CHECKF(distinct > 0, "four completions drew the same tokens");
  CHECK(four.r[1].cached > 0); /* the later completions take the first's prompt from the cache */
  printf("n = 4: each equals a request seeded seed + i; %d differ from the first\n", distinct);
  dsi_sched_free(s);
  dsi_engine_free(e);
}

/* ---- a failing forward ---- */
static void test_fault(void) {
  dsi_engine *e = open_engine(64, 64, 2);
  dsi_sched *s = open_sched(e, 4, 64, 0);
  int32_t a[6] = {5, 6, 7, 8, 9, 10}, b[6] = {5, 6, 7, 400, 9, 10}, c[6] = {11, 12, 13, 14, 15, 16};
  dsi_engine_fail_token(e, 400);
  record ra = {0}, rb = {0}, rc = {0};
  submit(s, a, 6, 8, &ra, NULL);
  submit(s, b, 6, 8, &rb, NULL);
  submit(s, c, 6, 8, &rc, NULL);
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  int32_t wa[8], wc[8];
  alone(a, 6, 8, wa);
  alone(c, 6, 8, wc);
  CHECKF(rb.r[0].finish == DSI_FINISH_ERROR && strstr(rb.r[0].error, "injected"), "the failing request: finish %d, '%s'",
         rb.r[0].finish, rb.r[0].error);
  CHECK(ra.r[0].finish == DSI_FINISH_LENGTH && !memcmp(ra.r[0].out, wa, sizeof wa));
  CHECK(rc.r[0].finish == DSI_FINISH_LENGTH && !memcmp(rc.r[0].out, wc, sizeof wc));
  dsi_sched_stats st;
  dsi_sched_get_stats(s, &st);
  CHECK(st.kv_blocks_used == 0);
  printf("fault: the failing request ended with '%s', the others finished\n", rb.r[0].error);
  dsi_engine_fail_token(e, -1);
  dsi_sched_free(s);
  dsi_engine_free(e);
}

/* ---- no starvation: one long request in a flood of short ones ---- */
static record *g_long; /* when it ends: how many short ones had ended */
static atomic_int g_shorts_done, g_shorts_at_long;

static void on_flood(void *user, const dsi_request_event *ev) {
  on_event(user, ev);
  if (!ev->finish) return;
  if (user == g_long) atomic_store(&g_shorts_at_long, atomic_load(&g_shorts_done));
  else atomic_fetch_add(&g_shorts_done, 1);
}

static void test_fair(void) {
  dsi_engine *e = open_engine(24, 96, 2);
  dsi_sched *s = open_sched(e, 4, 24, 8);
  int32_t longp[60], shortp[4] = {20, 21, 22, 23};
  for (int i = 0; i < 60; i++) longp[i] = 30 + i;
  static record shorts[200];
  memset(shorts, 0, sizeof shorts);
  record lr = {0};
  g_long = &lr;
  atomic_store(&g_events, 0);
  atomic_store(&g_shorts_done, 0);
  atomic_store(&g_shorts_at_long, -1);
  dsi_request flood = {.ignore_eos = 1, .on_event = on_flood};
  for (int q = 0; q < 4; q++) submit(s, shortp, 4, 4, &shorts[q], &flood);
  submit(s, longp, 60, 30, &lr, &flood);
  for (int q = 4; q < 200; q++) { /* the flood goes on while the long one runs */
    submit(s, shortp, 4, 4, &shorts[q], &flood);
    if (q % 4 == 3) wait_events(atomic_load(&g_events) + 4);
  }
  CHECK(dsi_sched_wait_idle(s, 120) == 0);
  CHECKF(lr.r[0].finish == DSI_FINISH_LENGTH && lr.r[0].n_out == 30, "the long request: finish %d, %d tokens",
         lr.r[0].finish, lr.r[0].n_out);
  /* its ~40 steps let the 3 other slots finish a few dozen short ones, not the flood */
  int at = atomic_load(&g_shorts_at_long);
  CHECKF(at >= 0 && at < 100, "the long request ended after %d of 200 short ones", at);
  printf("fair: the long request ended when %d of 200 short ones had\n", at);
  dsi_sched_free(s);
  dsi_engine_free(e);
}

/* ---- logprobs ---- */
static void test_logprobs(void) {
  dsi_engine *e = open_engine(64, 64, 2);
  dsi_sched *s = open_sched(e, 4, 64, 0);
  int32_t p[8] = {3, 4, 5, 6, 7, 8, 9, 10};
  record r = {0};
  dsi_request t = {.ignore_eos = 1, .logprobs = 1, .top_logprobs = 5};
  submit(s, p, 8, 6, &r, &t);
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  const result *x = &r.r[0];
  CHECK(x->n_out == 6 && x->n_top == 5);
  for (int k = 0; k < x->n_out; k++) {
    CHECKF(x->logprob[k] <= 0 && x->top[k][0].id == x->out[k] && fabsf(x->top[k][0].logprob - x->logprob[k]) < 1e-6f,
           "token %d: logprob %g, top %d %g", k, x->logprob[k], x->top[k][0].id, x->top[k][0].logprob);
    for (int i = 1; i < 5; i++) CHECK(x->top[k][i].logprob <= x->top[k][i - 1].logprob);
  }
  dsi_sched_free(s);
  dsi_engine_free(e);
}

/* ---- prompt logprobs ----
 * Against one forward pass over the whole prompt with every position's
 * logits: 16 rows a step, from the prefix cache's
 * blocks (which a prompt_logprobs request does not take), beside others on
 * a pool small enough to preempt, with n = 2 (one event per position). */
#define PLP_N 45
static void check_plp(const record *rec, const int32_t *p, const float *lg, const char *what) {
  int nv = dsi_tok_vocab_size(g_tok) < g_vocab ? dsi_tok_vocab_size(g_tok) : g_vocab;
  CHECKF(rec->n_plp == PLP_N - 1 && rec->plp_bad == 0, "%s: %d prompt logprobs (want %d), %d out of order", what,
         rec->n_plp, PLP_N - 1, rec->plp_bad);
  double worst = 0;
  int top_ok = 1;
  for (int k = 1; k <= rec->n_plp && k < PLP_N; k++) {
    const float *x = lg + (size_t)(k - 1) * g_vocab;
    double m = -1e30, sum = 0;
    for (int i = 0; i < nv; i++) m = x[i] > m ? x[i] : m;
    for (int i = 0; i < nv; i++) sum += exp((double)x[i] - m);
    double lse = m + log(sum), want = x[p[k]] - lse;
    worst = fmax(worst, fabs(rec->plp[k] - want));
    top_ok &= rec->plp_tok[k] == p[k] && rec->plp_top[k][0].id == argmax(x, nv) &&
              fabs(rec->plp_top[k][0].logprob - (m - lse)) < 1e-3 && rec->plp_top[k][1].logprob <= rec->plp_top[k][0].logprob;
  }
  CHECKF(worst < 1e-3 && top_ok, "%s: prompt logprobs within %g of the whole prompt's (top ok %d)", what, worst, top_ok);
}

static void test_prompt_logprobs(void) {
  int32_t p[3][PLP_N];
  dsi_rng rng;
  dsi_rng_seed(&rng, 77);
  for (int r = 0; r < 3; r++)
    for (int i = 0; i < PLP_N; i++) p[r][i] = 2 + (int32_t)(dsi_rng_u64(&rng) % 200);
  /* the oracle: one pass, every position's logits */
  float *lg[3];
  for (int r = 0; r < 3; r++) {
    dsi_engine *e = open_engine(64, 128, 2);
    lg[r] = malloc((size_t)PLP_N * g_vocab * sizeof(float));
    int sq = dsi_seq_new(e);
    int32_t seqv[PLP_N];
    for (int i = 0; i < PLP_N; i++) seqv[i] = sq;
    dsi_batch b = {.n_tokens = PLP_N, .tokens = p[r], .seq = seqv};
    DSI_ASSERT(dsi_engine_forward(e, &b, lg[r]) == 0);
    dsi_engine_free(e);
  }
  dsi_request t = {.ignore_eos = 1, .prompt_logprobs = 1, .logprobs = 1, .top_logprobs = 3};
  {
    dsi_engine *e = open_engine(64, 128, 2);
    dsi_sched *s = open_sched_rows(e, 4, 64, 0, 16);
    record a = {0}, b = {0}, c = {0};
    t.n = 2;
    submit(s, p[0], PLP_N, 3, &a, &t);
    CHECK(dsi_sched_wait_idle(s, 60) == 0);
    check_plp(&a, p[0], lg[0], "n = 2");
    CHECK(a.r[0].n_out == 3 && a.r[1].n_out == 3);
    /* the prompt's blocks are cached now: a plain request takes them, one
     * with prompt_logprobs computes them again */
    dsi_request plain = {.ignore_eos = 1};
    submit(s, p[0], PLP_N, 2, &b, &plain);
    CHECK(dsi_sched_wait_idle(s, 60) == 0);
    CHECKF(b.r[0].cached > 0 && b.n_plp == 0, "a plain request after it: %d tokens cached", b.r[0].cached);
    t.n = 1;
    submit(s, p[0], PLP_N, 2, &c, &t);
    CHECK(dsi_sched_wait_idle(s, 60) == 0);
    check_plp(&c, p[0], lg[0], "a cached prompt");
    CHECKF(c.r[0].cached == 0, "prompt_logprobs: %d tokens taken from the cache", c.r[0].cached);
    dsi_sched_free(s);
    int avail, total, bs;
    dsi_engine_kv_blocks(e, &avail, &total, &bs);
    CHECK(avail == total);
    dsi_engine_free(e);
  }
  {
    /* three at once on 20 blocks of 8 (each needs 8 at the end): preemptions */
    dsi_engine *e = open_engine(20, 128, 2);
    dsi_sched *s = open_sched(e, 4, 64, 16);
    record r[3] = {0};
    for (int i = 0; i < 3; i++) submit(s, p[i], PLP_N, 16, &r[i], &t);
    CHECK(dsi_sched_wait_idle(s, 60) == 0);
    for (int i = 0; i < 3; i++) {
      check_plp(&r[i], p[i], lg[i], "three on a small pool");
      CHECK(r[i].r[0].n_out == 16);
    }
    dsi_sched_stats st;
    dsi_sched_get_stats(s, &st);
    printf("prompt logprobs on a small pool: %ld preemptions\n", st.preemptions);
    dsi_sched_free(s);
    dsi_engine_free(e);
  }
  for (int r = 0; r < 3; r++) free(lg[r]);
}

/* ---- json: every completion a JSON value, or the start of one ----
 * Eight sampled requests at once on the tiny random model: each output's
 * bytes are a prefix of a value the schema allows, one that ended by
 * stopping is a whole value cJSON parses and shaped as the schema says,
 * and every third equals the request run alone. */
#define N_JSON 8
static int json_bytes(const result *x, char *buf, size_t cap) {
  size_t k = 0;
  for (int i = 0; i < x->n_out; i++) {
    size_t n = 0;
    const char *b = dsi_tok_id_bytes(g_tok, x->out[i], &n);
    if (!b || k + n >= cap) return -1;
    memcpy(buf + k, b, n);
    k += n;
  }
  buf[k] = 0;
  return (int)k;
}

/* the shape test_json's schema asks: {"n": an integer, and optionally
 * "name": a string of at most 4 characters, "tags": up to 2 of "a" / "b"} */
static const char k_shape[] =
  "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":4},"
  "\"n\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},"
  "\"maxItems\":2}},\"required\":[\"n\"]}";

static int shaped(const cJSON *o) {
  const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name"), *n = cJSON_GetObjectItemCaseSensitive(o, "n");
  const cJSON *tags = cJSON_GetObjectItemCaseSensitive(o, "tags"), *e;
  int members = cJSON_GetArraySize(o), ok = (!nm || cJSON_IsString(nm)) && cJSON_IsNumber(n);
  ok &= n && floor(n->valuedouble) == n->valuedouble;
  ok &= members == 1 + (nm != NULL) + (tags != NULL) && (!tags || (cJSON_IsArray(tags) && cJSON_GetArraySize(tags) <= 2));
  if (cJSON_IsString(nm)) { /* characters, not bytes */
    int chars = 0;
    for (const char *c = nm->valuestring; *c; c++) chars += (*c & 0xC0) != 0x80;
    ok &= chars <= 4;
  }
  cJSON_ArrayForEach(e, tags) ok &= cJSON_IsString(e) && (!strcmp(e->valuestring, "a") || !strcmp(e->valuestring, "b"));
  return ok;
}

static void test_json(const char *schema) {
  int32_t p[6] = {3, 4, 5, 6, 7, 8};
  dsi_request t = {.ignore_eos = 1, .json = 1, .json_schema = schema, .sampling = {.temperature = 1.0f}};
  /* with a schema, white space biased away: the random model draws it so
   * often that few values would close within MAX_OUT tokens */
  static int32_t ws_ids[4096];
  static float ws_bias[4096];
  int n_ws = 0;
  for (int32_t id = 0; schema && id < g_vocab && n_ws < 4096; id++) {
    size_t n = 0;
    const char *b = dsi_tok_id_bytes(g_tok, id, &n);
    int blank = b && n;
    for (size_t k = 0; blank && k < n; k++) blank = b[k] == ' ' || b[k] == '\t' || b[k] == '\n' || b[k] == '\r';
    if (blank) ws_ids[n_ws] = id, ws_bias[n_ws++] = -100.0f;
  }
  t.sampling.bias_ids = ws_ids, t.sampling.bias = ws_bias, t.sampling.n_bias = n_ws;
  dsi_jschema *sc;
  dsi_err err = {0};
  DSI_ASSERT(dsi_jschema_compile(&sc, schema, schema ? strlen(schema) : 0, &err) == 0);
  record all[N_JSON] = {0};
  dsi_engine *e = open_engine(64, 128, 2);
  dsi_sched *s = open_sched(e, N_JSON, 64, 0);
  for (int i = 0; i < N_JSON; i++) {
    t.sampling.seed = 100 + (uint64_t)i;
    submit(s, p, 6, MAX_OUT, &all[i], &t);
  }
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  dsi_sched_free(s);
  int whole = 0, prefixes = 0, same = 0;
  for (int i = 0; i < N_JSON; i++) {
    const result *x = &all[i].r[0];
    char buf[4096];
    dsi_jsonc js;
    dsi_jsonc_init(&js, sc);
    int n = json_bytes(x, buf, sizeof buf);
    int ok = n >= 0 && !dsi_jsonc_feed(&js, buf, (size_t)n);
    prefixes += ok;
    if (getenv("DSI_TEST_VERBOSE")) printf("  %s\n", buf);
    if (x->finish == DSI_FINISH_STOP) {
      cJSON *o = cJSON_Parse(buf);
      whole += ok && dsi_jsonc_done(&js) && cJSON_IsObject(o) && (!schema || shaped(o));
      cJSON_Delete(o);
    } else {
      whole += ok && x->finish == DSI_FINISH_LENGTH && x->n_out == MAX_OUT && !dsi_jsonc_done(&js);
    }
    /* alone: every third */
    if (i % 3) continue;
    record one = {0};
    s = open_sched(e, N_JSON, 64, 0);
    t.sampling.seed = 100 + (uint64_t)i;
    submit(s, p, 6, MAX_OUT, &one, &t);
    CHECK(dsi_sched_wait_idle(s, 60) == 0);
    dsi_sched_free(s);
    same += one.r[0].n_out == x->n_out && !memcmp(one.r[0].out, x->out, (size_t)x->n_out * sizeof(int32_t));
  }
  int stopped = 0;
  for (int i = 0; i < N_JSON; i++) stopped += all[i].r[0].finish == DSI_FINISH_STOP;
  const char *what = schema ? "json_schema" : "json";
  CHECKF(prefixes == N_JSON && whole == N_JSON && stopped > 0,
         "%s: %d of %d outputs JSON, %d closed their value (stop), the rest cut at max_tokens", what, prefixes, N_JSON,
         stopped);
  CHECKF(same == (N_JSON + 2) / 3, "%s: %d of %d equal the request alone", what, same, (N_JSON + 2) / 3);
  printf("%s: %d of %d values closed within %d tokens, every output one or its start\n", what, stopped, N_JSON,
         MAX_OUT);
  /* a schema with a keyword not enforced: the submit says which */
  s = open_sched(e, N_JSON, 64, 0);
  dsi_request bad = t;
  bad.prompt = p, bad.n_prompt = 6;
  bad.json_schema = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\",\"multipleOf\":3}}}";
  uint64_t id;
  dsi_err e2 = {0};
  CHECK(dsi_sched_submit(s, &bad, &id, &e2) == DSI_E_INVAL && strstr(e2.msg, "multipleOf") &&
        strstr(e2.msg, "/properties/x"));
  dsi_sched_free(s);
  dsi_jschema_free(sc);
  dsi_engine_free(e);
}

/* ---- regex: every completion text that matches the pattern, or its start ----
 * A stop token pushed up by a bias is drawn as soon as the text matches
 * (after one token here) and never before; a pattern no text can go on
 * from ends the completion (stop) as it matches; sampled freely, a
 * completion that stopped matches whole and one cut at max_tokens is the
 * start of a match. The oracle: the pattern's automaton (engine/regex.h). */
static void test_regex(void) {
  static const char words[] = "[a-z]{1,6}( [a-z]{1,6}){0,3}\\.?", choice[] = "yes|no|maybe";
  int32_t p[6] = {3, 4, 5, 6, 7, 8}, stop = 7;
  float up = 100.0f;
  dsi_redfa dw, dc;
  static const char w_re[] = "^(?:[a-z]{1,6}( [a-z]{1,6}){0,3}\\.?)$", c_re[] = "^(?:yes|no|maybe)$";
  DSI_ASSERT(!dsi_redfa_compile(&dw, w_re, strlen(w_re), NULL, 0));
  DSI_ASSERT(!dsi_redfa_compile(&dc, c_re, strlen(c_re), NULL, 0));
  dsi_engine *e = open_engine(64, 128, 2);
  dsi_sched *s = open_sched(e, 16, 64, 0);
  static record biased[2][4], free_[8];
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 4; i++) {
      dsi_request t = {.ignore_eos = 1, .regex = k ? choice : words, .stop_ids = &stop, .n_stop_ids = 1,
                       .sampling = {.temperature = 1.0f, .seed = 10 + (uint64_t)i, .bias_ids = &stop, .bias = &up, .n_bias = 1}};
      submit(s, p, 6, MAX_OUT, &biased[k][i], &t);
    }
  for (int i = 0; i < 8; i++) {
    dsi_request t = {.ignore_eos = 1, .regex = words, .sampling = {.temperature = 1.0f, .seed = 50 + (uint64_t)i}};
    submit(s, p, 6, i < 4 ? 2 : 12, &free_[i], &t); /* the first four cut short */
  }
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  dsi_sched_free(s);
  dsi_engine_free(e);
  char buf[4096];
  int early = 0, closed = 0, whole = 0, starts = 0, stopped = 0;
  for (int i = 0; i < 4; i++) {
    const result *a = &biased[0][i].r[0], *b = &biased[1][i].r[0];
    int na = json_bytes(a, buf, sizeof buf);
    early += a->finish == DSI_FINISH_STOP && a->stop_token == stop && a->n_out == 1 && dsi_redfa_match(&dw, buf, (size_t)na);
    int nb = json_bytes(b, buf, sizeof buf);
    closed += b->finish == DSI_FINISH_STOP && b->stop_token == -1 && dsi_redfa_match(&dc, buf, (size_t)nb);
  }
  dsi_jschema *sc;
  dsi_err err = {0};
  DSI_ASSERT(!dsi_jschema_compile_regex(&sc, words, strlen(words), &err));
  for (int i = 0; i < 8; i++) {
    const result *x = &free_[i].r[0];
    int n = json_bytes(x, buf, sizeof buf);
    dsi_jsonc j;
    dsi_jsonc_init(&j, sc);
    if (x->finish == DSI_FINISH_STOP) stopped++, whole += n >= 0 && dsi_redfa_match(&dw, buf, (size_t)n);
    else starts += x->finish == DSI_FINISH_LENGTH && n >= 0 && !dsi_jsonc_feed(&j, buf, (size_t)n);
  }
  dsi_jschema_free(sc);
  CHECKF(early == 4, "regex: %d of 4 completions took the biased stop token as soon as the text matched", early);
  CHECKF(closed == 4, "regex: %d of 4 completions of yes|no|maybe ended as the word closed", closed);
  CHECKF(whole == stopped && whole + starts == 8, "regex: of 8 sampled, %d stopped matching (%d stopped), %d cut a match's start",
         whole, stopped, starts);
  printf("regex: the stop token drawn at the first match 4 times, yes|no|maybe closed 4 times; sampled: %d whole, %d cut\n",
         whole, starts);
  /* refused at submit, naming why */
  e = open_engine(64, 128, 2);
  s = open_sched(e, 4, 64, 0);
  dsi_request bad = {.prompt = p, .n_prompt = 6, .regex = "a(?=b)"};
  uint64_t id;
  dsi_err e2 = {0};
  CHECK(dsi_sched_submit(s, &bad, &id, &e2) == DSI_E_INVAL && strstr(e2.msg, "regex") && strstr(e2.msg, "lookaround"));
  dsi_sched_free(s);
  dsi_engine_free(e);
  dsi_redfa_free(&dw), dsi_redfa_free(&dc);
}

/* ---- the schema cache ----
 * A schema checked (the server's path) and then submitted compiles once;
 * its later requests find it compiled; a bad one is refused and not kept;
 * a pattern is kept apart from a schema; past 32 texts the least recently
 * taken one not held goes (compiled again when it comes back), one held by
 * a request in flight stays. */
static void schema_text(char *b, size_t n, int k) {
  snprintf(b, n, "{\"type\":\"object\",\"properties\":{\"k%d\":{\"type\":\"integer\"}}}", k);
}

static void test_schema_cache(void) {
  int32_t p[6] = {3, 4, 5, 6, 7, 8};
  dsi_engine *e = open_engine(64, 128, 2);
  dsi_sched *s = open_sched(e, 8, 64, 0);
  dsi_sched_stats st;
  dsi_err err = {0};
  char held[128], t[128];
  schema_text(held, sizeof held, 1000);
  CHECK(dsi_sched_check_schema(s, held, strlen(held), 0, &err) == DSI_OK);
  static record rec[4];
  dsi_request r = {.ignore_eos = 1, .json = 1, .json_schema = held, .sampling = {.temperature = 1.0f}};
  submit(s, p, 6, 4, &rec[0], &r);
  submit(s, p, 6, 4, &rec[1], &r);
  dsi_sched_get_stats(s, &st);
  CHECKF(st.schema_compiles == 1 && st.schema_hits == 2 && st.schemas_cached == 1,
         "check then two submits: %ld compiles, %ld found, %d kept", st.schema_compiles, st.schema_hits, st.schemas_cached);
  static const char bad[] = "{\"type\":\"object\",\"multipleOf\":2}";
  CHECK(dsi_sched_check_schema(s, bad, strlen(bad), 0, &err) == DSI_E_INVAL && strstr(err.msg, "multipleOf"));
  CHECK(dsi_sched_check_schema(s, "a(?=b)", 6, 1, &err) == DSI_E_INVAL && strstr(err.msg, "lookaround"));
  CHECK(dsi_sched_check_schema(s, "yes|no", 6, 1, &err) == DSI_OK && dsi_sched_check_schema(s, "yes|no", 6, 1, &err) == DSI_OK);
  dsi_sched_get_stats(s, &st);
  CHECKF(st.schema_compiles == 2 && st.schema_hits == 3 && st.schemas_cached == 2,
         "bad texts not kept, a pattern kept: %ld compiles, %ld found, %d kept", st.schema_compiles, st.schema_hits,
         st.schemas_cached);
  /* held: a request in flight keeps its schema through 40 others */
  dsi_request longr = r;
  longr.max_tokens = 100000;
  uint64_t id = submit(s, p, 6, 100000, &rec[2], &longr);
  for (int k = 0; k < 40; k++) {
    schema_text(t, sizeof t, k);
    CHECK(dsi_sched_check_schema(s, t, strlen(t), 0, &err) == DSI_OK);
  }
  dsi_sched_get_stats(s, &st);
  long c0 = st.schema_compiles, h0 = st.schema_hits;
  CHECKF(c0 == 42 && st.schemas_cached == 32, "40 more: %ld compiles, %d kept", c0, st.schemas_cached);
  submit(s, p, 6, 4, &rec[3], &r); /* the held one: found */
  schema_text(t, sizeof t, 39);    /* the newest: found */
  CHECK(dsi_sched_check_schema(s, t, strlen(t), 0, &err) == DSI_OK);
  schema_text(t, sizeof t, 0);     /* the oldest not held: gone, compiled again */
  CHECK(dsi_sched_check_schema(s, t, strlen(t), 0, &err) == DSI_OK);
  CHECK(dsi_sched_check_schema(s, "yes|no", 6, 1, &err) == DSI_OK); /* pushed out by the 40 */
  dsi_sched_get_stats(s, &st);
  CHECKF(st.schema_hits == h0 + 2 && st.schema_compiles == c0 + 2 && st.schemas_cached == 32,
         "held one kept, newest found, oldest compiled again: %ld found, %ld compiles (from %ld, %ld)", st.schema_hits,
         st.schema_compiles, h0, c0);
  dsi_sched_cancel(s, id);
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  int json_ok = 1;
  for (int i = 0; i < 4; i++) json_ok &= rec[i].r[0].finish != DSI_FINISH_NONE && rec[i].r[0].finish != DSI_FINISH_ERROR;
  CHECK(json_ok);
  printf("schema cache: a checked schema compiled once for its submits, 32 kept, the held one through 40 others\n");
  dsi_sched_free(s);
  dsi_engine_free(e);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  snprintf(g_dir, sizeof g_dir, "/tmp/test_sched_XXXXXX");
  DSI_ASSERT(mkdtemp(g_dir));
  dsi_err err = {0};
  dsi_mkmodel_opts mo = {.preset = "tiny", .dtype = "bf16", .seed = 3, .out_dir = g_dir, .tokenizer = "builtin"};
  DSI_ASSERT(dsi_mkmodel(&mo, &err) == 0);
  dsi_load_opts lo = {0};
  DSI_ASSERT(dsi_model_open(&g_m, g_dir, &lo, &err) == 0);
  char json[300], cfg[300];
  snprintf(json, sizeof json, "%s/tokenizer.json", g_dir);
  snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", g_dir);
  DSI_ASSERT(dsi_tok_open(&g_tok, json, cfg, 0, &err) == 0);
  dsi_model_info info;
  dsi_model_get_info(g_m, &info);
  g_vocab = info.vocab_size;
  test_many();
  test_cancel();
  test_threads();
  test_stops();
  test_n();
  test_fault();
  test_fair();
  test_logprobs();
  test_prompt_logprobs();
  test_json(NULL);
  test_json(k_shape);
  test_regex();
  test_schema_cache();
  dsi_tok_free(g_tok);
  dsi_model_free(g_m);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd)) {}
  return check_done();
}
