/* base: one persistent thread pool. A job is fn(ctx, ith, nth) run once on
 * each of nth threads (the caller is thread 0); dsi_pool_run returns when
 * all have finished. Workers spin briefly between jobs, then sleep. */
#ifndef DSI_POOL_H
#define DSI_POOL_H

#include <stdatomic.h>

typedef struct dsi_pool dsi_pool;
typedef void (*dsi_pool_fn)(void *ctx, int ith, int nth);

dsi_pool *dsi_pool_new(int n_threads); /* n_threads >= 1; NULL on failure */
int dsi_ncpu(void); /* cores online (at least 1): the default thread count */
/* The most threads a pool may be asked for: 8 per core (more only thrash) */
#define DSI_THREADS_PER_CORE_MAX 8
static inline int dsi_max_threads(void) { return DSI_THREADS_PER_CORE_MAX * dsi_ncpu(); }
void dsi_pool_free(dsi_pool *p);
int dsi_pool_size(const dsi_pool *p);
void dsi_pool_run(dsi_pool *p, dsi_pool_fn fn, void *ctx);

/* A spin barrier for n threads inside one job: spins briefly, then
 * yields the core (on a loaded machine the thread we wait for may need it). */
typedef struct dsi_barrier {
  atomic_int count;
  atomic_int gen;
  int n;
} dsi_barrier;
void dsi_barrier_init(dsi_barrier *b, int n);
void dsi_barrier_wait(dsi_barrier *b);
/* spin-wait helper: a pause, or a yield once the spin has gone on long */
void dsi_spin_pause(int *spins);

/* [begin,end) of n items for thread ith of nth, in contiguous chunks */
static inline void dsi_split(long n, int ith, int nth, long *begin, long *end) {
  long q = n / nth, r = n % nth;
  *begin = ith * q + (ith < r ? ith : r);
  *end = *begin + q + (ith < r ? 1 : 0);
}

#endif
