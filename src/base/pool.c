/* base: the persistent thread pool (see pool.h). A job is published by
 * bumping a generation counter; workers spin on it for a short while, then
 * block on a condition variable, so idle pools cost nothing. */
#define _GNU_SOURCE
#include "base/pool.h"
#include "base/base.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* how long an idle worker stays awake (yielding) before it sleeps */
#define DSI_POOL_KEEPALIVE_S 2e-3

struct dsi_pool {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint gen;      /* bumped once per job */
  atomic_int pending;   /* workers still running the current job */
  atomic_int stop;
  dsi_pool_fn fn;
  void *ctx;
};

typedef struct { dsi_pool *p; int ith; } worker_arg;

static void *worker_main(void *arg) {
  worker_arg *wa = arg;
  dsi_pool *p = wa->p;
  int ith = wa->ith;
  free(wa);
  unsigned seen = 0;
  for (;;) {
    unsigned g;
    int spins = 0;
    double idle_since = 0;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
      if (++spins < 4000) { /* a few thousand pauses: the next job usually comes sooner */
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      /* then, for a while, offer the core to anyone else but stay awake:
       * between two forward steps (sampling, bookkeeping) a sleeping
       * worker costs tens of microseconds to wake */
      if (idle_since == 0) idle_since = dsi_now();
      if (dsi_now() - idle_since < DSI_POOL_KEEPALIVE_S) {
        sched_yield();
        continue;
      }
      pthread_mutex_lock(&p->mu);
      while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = g;
    p->fn(p->ctx, ith, p->n);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
  }
}

dsi_pool *dsi_pool_new(int n_threads) {
  if (n_threads < 1) n_threads = 1;
  dsi_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n_threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->threads = calloc(n_threads, sizeof *p->threads);
  if (!p->threads) {
    p->n = 1;
    dsi_pool_free(p);
    return NULL;
  }
  for (int i = 1; i < n_threads; i++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) {
      p->n = i; /* run with the threads we got */
      break;
    }
    wa->p = p;
    wa->ith = i;
    if (pthread_create(&p->threads[i], NULL, worker_main, wa)) {
      free(wa);
      p->n = i; /* run with the threads we got */
      break;
    }
  }
  return p;
}

void dsi_pool_free(dsi_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->threads);
  free(p);
}

int dsi_pool_size(const dsi_pool *p) { return p->n; }

void dsi_pool_run(dsi_pool *p, dsi_pool_fn fn, void *ctx) {
  if (p->n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  atomic_store_explicit(&p->pending, p->n - 1, memory_order_release);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  fn(ctx, 0, p->n);
  /* spin briefly, then yield: on a loaded machine a descheduled worker
   * must get the core back rather than watch us spin */
  for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0;) dsi_spin_pause(&spins);
}

void dsi_spin_pause(int *spins) {
  if (++*spins < 4000) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  } else {
    sched_yield();
  }
}

void dsi_barrier_init(dsi_barrier *b, int n) {
  atomic_store(&b->count, 0);
  atomic_store(&b->gen, 0);
  b->n = n;
}

void dsi_barrier_wait(dsi_barrier *b) {
  if (b->n <= 1) return;
  int g = atomic_load_explicit(&b->gen, memory_order_acquire);
  if (atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) == b->n - 1) {
    atomic_store_explicit(&b->count, 0, memory_order_relaxed);
    atomic_store_explicit(&b->gen, g + 1, memory_order_release);
    return;
  }
  for (int spins = 0; atomic_load_explicit(&b->gen, memory_order_acquire) == g;) dsi_spin_pause(&spins);
}

int dsi_ncpu(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}
