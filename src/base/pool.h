/* base: one persistent thread pool. A job is fn(ctx, ith, nth) run once on
 * each of nth threads (the caller is thread 0); dsi_pool_run returns when
 * all have finished. Workers spin briefly between jobs, then sleep. */
#ifndef DSI_POOL_H
#define DSI_POOL_H

typedef struct dsi_pool dsi_pool;
typedef void (*dsi_pool_fn)(void *ctx, int ith, int nth);

dsi_pool *dsi_pool_new(int n_threads); /* n_threads >= 1; NULL on failure */
void dsi_pool_free(dsi_pool *p);
int dsi_pool_size(const dsi_pool *p);
void dsi_pool_run(dsi_pool *p, dsi_pool_fn fn, void *ctx);

/* With an observer set, every thread's share of every job is timed and
 * reported as cb(userdata, ith, t0, t1) (seconds, dsi_now's clock) from
 * that thread, before the job counts as done. NULL cb: no timing at all.
 * Set it only between jobs. */
typedef void (*dsi_pool_observer)(void *userdata, int ith, double t0, double t1);
void dsi_pool_set_observer(dsi_pool *p, dsi_pool_observer cb, void *userdata);

/* [begin,end) of n items for thread ith of nth, in contiguous chunks */
static inline void dsi_split(long n, int ith, int nth, long *begin, long *end) {
  long q = n / nth, r = n % nth;
  *begin = ith * q + (ith < r ? ith : r);
  *end = *begin + q + (ith < r ? 1 : 0);
}

#endif
