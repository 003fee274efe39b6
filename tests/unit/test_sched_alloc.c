/* tests: the serving loop allocates nothing per step. malloc, calloc,
 * realloc and posix_memalign are wrapped at link time (tests/CMakeLists.txt)
 * and counted; once the engine has captured the plan of the batch's shape,
 * twenty steps of four requests decoding — forward, sampling with
 * penalties, top-p and logprobs, stop strings, detokenized text — make no
 * call to any of them. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"
#include "test_isa.h"
#include "tools/internal.h"
#include "test_tiny.h"

static atomic_long g_allocs;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_malloc(size_t n) {
  atomic_fetch_add_explicit(&g_allocs, 1, memory_order_relaxed);
  return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m) {
  atomic_fetch_add_explicit(&g_allocs, 1, memory_order_relaxed);
  return __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n) {
  atomic_fetch_add_explicit(&g_allocs, 1, memory_order_relaxed);
  return __real_realloc(p, n);
}
int __wrap_posix_memalign(void **p, size_t a, size_t n) {
  atomic_fetch_add_explicit(&g_allocs, 1, memory_order_relaxed);
  return __real_posix_memalign(p, a, n);
}

#define FROM 12 /* first token of the window: the batch's plan is captured by then */
#define TO 32
static long g_at[2];
static atomic_int g_done;

static void on_event(void *user, const dsi_request_event *ev) {
  (void)user;
  /* the four requests decode in step: the steps from the one that makes
   * the FROM-th token of each to the TO-th are the window */
  if (ev->token >= 0) {
    static int n; /* the callbacks run on the loop thread, one at a time */
    n++;
    if (n == 4 * FROM) g_at[0] = atomic_load(&g_allocs);
    if (n == 4 * TO) g_at[1] = atomic_load(&g_allocs);
  }
  if (ev->finish) atomic_fetch_add(&g_done, 1);
}

int main(void) {
  char dir[] = "/tmp/test_sched_alloc_XXXXXX";
  dsi_model *m;
  dsi_tok *tok;
  tiny_checkpoint(dir, &m, &tok);
  dsi_err err = {0};
  dsi_engine *e;
  dsi_engine_opts eo = {.n_threads = 2, .kv_block_size = 8, .max_context = 128, .max_tokens = 64, .isa = test_isa()};
  DSI_ASSERT(dsi_engine_open(&e, m, &eo, &err) == 0);
  dsi_sched *s;
  dsi_sched_opts so = {.max_seqs = 4};
  DSI_ASSERT(dsi_sched_open(&s, e, tok, &so, &err) == 0);

  /* four requests at once: after their prompts every step is 4 decode tokens */
  static const char *stops[] = {"never appears \x01"};
  for (int q = 0; q < 4; q++) {
    int32_t p[6] = {3 + q, 4, 5, 6, 7, 8};
    dsi_request r = {.prompt = p, .n_prompt = 6, .max_tokens = 40, .ignore_eos = 1, .on_event = on_event,
                     .logprobs = 1, .top_logprobs = 5, .stop = stops, .n_stop = 1};
    r.sampling.temperature = 0.8f;
    r.sampling.top_p = 0.9f;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.frequency_penalty = 0.2f;
    r.sampling.seed = (uint64_t)q + 1;
    uint64_t id;
    DSI_ASSERT(dsi_sched_submit(s, &r, &id, &err) == 0);
  }
  CHECK(dsi_sched_wait_idle(s, 60) == 0);
  CHECK(atomic_load(&g_done) == 4);
  long n = g_at[1] - g_at[0];
  CHECKF(g_at[0] > 0 && n == 0, "%ld allocations in the %d steps of tokens %d..%d", n, TO - FROM, FROM, TO);
  printf("%ld allocations in %d decode steps of 4 requests\n", n, TO - FROM);
  dsi_sched_free(s);
  dsi_engine_free(e);
  dsi_tok_free(tok);
  dsi_model_free(m);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {}
  return check_done();
}
