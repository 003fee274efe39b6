/* graph: the two executors (see exec.h). Graph: the whole step is one
 * dispatch of the pool; each worker walks the plan, runs the ops of its
 * team, and before each op waits only for the ops it depends on; a worker
 * with nothing to do helps the other team's open matmul. Eager: one
 * fork/join per op, outputs allocated as each op is issued and freed after
 * their last use — the study's baseline. */
#include "graph/exec.h"
#include "graph/prof.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  dsi_barrier b;
  char pad[64 - sizeof(dsi_barrier)];
} padded_barrier;

typedef struct {
  dsi_xrun *r;
  dsi_prof *prof;
  const int *pids;      /* [n_ops] the profile's op ids */
  padded_barrier *bars; /* [1 + 2 n_regions]: all, then each region's A and B */
  int op;               /* op by op: the one to run */
  int help;             /* streams: idle workers help the other team */
} exec_job;

static dsi_barrier *team_barrier(exec_job *j, const dsi_op *op) {
  if (op->team == DSI_TEAM_ALL) return &j->bars[0].b;
  return &j->bars[1 + 2 * op->region + (op->team == DSI_TEAM_B)].b;
}

static void run_op(exec_job *j, int i, int tid, int lo, int hi, int helper) {
  const dsi_op *op = &j->r->g->ops[i];
  dsi_team tm = {.ith = tid - lo, .nth = hi - lo, .tid = tid, .helper = helper, .bar = team_barrier(j, op),
                 .st = &j->r->st[i], .open = j->help ? &j->r->open_op : NULL, .op = i};
  dsi_xrun *r = op->mb ? &j->r->mb[op->mb - 1] : j->r; /* the step, or the op's micro-batch */
  double t0 = j->prof ? dsi_now() : 0;
  dsi_op_defs[op->kind].run(r, op, &tm);
  if (!j->prof) return;
  dsi_prof_span(j->prof, j->pids[i], tid, t0, dsi_now());
  if (tm.ith == 0 && !helper) { /* its inputs (the routing, say) live until it is complete */
    dsi_op_cost c = {0, 0, 0};
    dsi_op_defs[op->kind].cost(r, op, &c);
    dsi_prof_op_cost(j->prof, j->pids[i], c.flops, c.wbytes, c.abytes);
  }
}

/* claim units of the other team's open matmul; 1 if there were any */
static int help_open(exec_job *j, int tid) {
  dsi_xrun *r = j->r;
  int o = atomic_load_explicit(&r->open_op, memory_order_acquire);
  if (o < 0) return 0;
  dsi_opstate *st = &r->st[o];
  if (atomic_load_explicit(&st->next, memory_order_relaxed) >= atomic_load_explicit(&st->units, memory_order_relaxed))
    return 0;
  run_op(j, o, tid, 0, 1, 1);
  return 1;
}

/* Wait for op d. Across the communication thread (a worker waiting for a
 * collective, or that thread for a worker's op) the wait may be long and
 * the cores busy: past a short spin it naps instead of yielding, which on
 * a loaded machine can hand the core to another process for a whole
 * time slice. */
static void wait_op(exec_job *j, int d, int tid, int nth) {
  dsi_xrun *r = j->r;
  int lo, hi, across = tid == nth || r->g->ops[d].team == DSI_TEAM_COMM;
  dsi_graph_team_range(r->g, &r->g->ops[d], nth, &lo, &hi);
  for (int spins = 0; atomic_load_explicit(&r->st[d].done, memory_order_acquire) < hi - lo;) {
    if (j->help && tid < nth && help_open(j, tid)) { /* not the communication thread */
      spins = 0;
      continue;
    }
    if (across && spins > 2000) {
      struct timespec nap = {0, 20000};
      nanosleep(&nap, NULL);
      continue;
    }
    dsi_spin_pause(&spins);
  }
}

static void graph_task(void *ctx, int tid, int nth) {
  exec_job *j = ctx;
  const dsi_graph *g = j->r->g;
  for (int i = 0; i < g->n_ops; i++) {
    const dsi_op *op = &g->ops[i];
    if (op->dead) continue;
    int lo, hi;
    dsi_graph_team_range(g, op, nth, &lo, &hi);
    if (tid < lo || tid >= hi) continue;
    for (int d = 0; d < op->n_deps; d++) wait_op(j, op->deps[d], tid, nth);
    run_op(j, i, tid, lo, hi, 0);
    atomic_fetch_add_explicit(&j->r->st[i].done, 1, memory_order_release);
  }
}

/* one op as its own dispatch (eager, and the graph's poison mode) */
static void op_task(void *ctx, int tid, int nth) {
  exec_job *j = ctx;
  const dsi_op *op = &j->r->g->ops[j->op];
  int lo, hi;
  dsi_graph_team_range(j->r->g, op, nth, &lo, &hi);
  if (tid >= lo && tid < hi) run_op(j, j->op, tid, lo, hi, 0);
}

/* the profile's ops for this step, in plan order (costs once each has run) */
static int *prof_ops(const dsi_xrun *r, dsi_prof *prof) {
  if (!prof) return NULL;
  const dsi_graph *g = r->g;
  int *pids = r->pids;
  for (int i = 0; i < g->n_ops; i++) {
    const dsi_op *op = &g->ops[i];
    pids[i] = -1;
    if (op->dead) continue;
    char out[48];
    pids[i] = dsi_prof_op(prof, op->name, (dsi_prof_cat)op->cat, op->layer, op->team,
                          op->out[0] >= 0 ? dsi_tensor_desc(&g->ts[op->out[0]], out, sizeof out) : NULL);
  }
  return pids;
}

static void reset_states(dsi_xrun *r) {
  memset(r->st, 0, (size_t)r->g->n_ops * sizeof *r->st);
  atomic_store(&r->open_op, -1);
}

static void fill_nan(void *p, size_t bytes) {
  float *f = p;
  for (size_t i = 0; i < bytes / sizeof(float); i++) f[i] = NAN;
}

/* op's k-th operand: inputs, outputs, then its workspace (-1 none) */
#define N_OPERANDS (DSI_OP_IN + DSI_OP_OUT + 1)
static int operand(const dsi_op *op, int k) {
  return k < DSI_OP_IN ? op->in[k] : k < DSI_OP_IN + DSI_OP_OUT ? op->out[k - DSI_OP_IN] : op->ws;
}

/* the arena tensors op i touches last: fn(r, t) once each; only op i's
 * operands need a look (eager plans have one team, so a lifetime ends at
 * an op that touches the tensor) */
static void for_dying(const dsi_graph *g, int i, dsi_xrun *r, void (*fn)(dsi_xrun *r, int t)) {
  const dsi_op *op = &g->ops[i];
  int seen[N_OPERANDS], n = 0;
  for (int k = 0; k < N_OPERANDS; k++) {
    int t = operand(op, k), dup = 0;
    if (t < 0 || g->ts[t].kind != DSI_T_ARENA || g->ts[t].last != i) continue;
    for (int q = 0; q < n; q++) dup |= seen[q] == t;
    if (dup) continue;
    seen[n++] = t;
    fn(r, t);
  }
}

static void release(dsi_xrun *r, int t) {
  dsi_free_aligned(r->ptr[t]);
  r->ptr[t] = NULL;
}

size_t dsi_exec_bars_bytes(int n_regions) { return (1 + 2 * (size_t)n_regions) * sizeof(padded_barrier); }

/* ---- the communication thread ---- */
struct dsi_commer {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  exec_job *job;          /* this step's, set before gen */
  int nth;                /* the pool's workers: the thread's id is nth */
  atomic_ulong gen;       /* steps handed over */
  atomic_ulong done;      /* steps finished */
  int sleeping, quit;     /* under mu */
};

/* one step: the plan's collectives in order, each once its inputs are ready */
static void comm_step(exec_job *j, int nth) {
  const dsi_graph *g = j->r->g;
  for (int i = 0; i < g->n_ops; i++) {
    const dsi_op *op = &g->ops[i];
    if (op->dead || op->team != DSI_TEAM_COMM) continue;
    for (int d = 0; d < op->n_deps; d++) wait_op(j, op->deps[d], nth, nth);
    run_op(j, i, nth, nth, nth + 1, 0);
    atomic_fetch_add_explicit(&j->r->st[i].done, 1, memory_order_release);
  }
}

/* Between steps it polls for the next one a while (a wake-up from sleep
 * costs more than a decode step on a busy machine), then sleeps. */
static void *comm_main(void *arg) {
  dsi_commer *c = arg;
  unsigned long seen = 0;
  for (;;) {
    double idle0 = dsi_now();
    for (int spins = 0; atomic_load_explicit(&c->gen, memory_order_acquire) == seen;) {
      dsi_spin_pause(&spins);
      if ((spins & 1023) == 0 && dsi_now() - idle0 > 0.005) break;
    }
    pthread_mutex_lock(&c->mu);
    c->sleeping = 1;
    while (atomic_load(&c->gen) == seen && !c->quit) pthread_cond_wait(&c->cv, &c->mu);
    c->sleeping = 0;
    int quit = c->quit;
    pthread_mutex_unlock(&c->mu);
    if (quit) return NULL;
    seen = atomic_load_explicit(&c->gen, memory_order_acquire);
    comm_step(c->job, c->nth);
    atomic_store_explicit(&c->done, seen, memory_order_release);
  }
}

dsi_commer *dsi_commer_new(void) {
  dsi_commer *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (pthread_create(&c->th, NULL, comm_main, c)) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    return NULL;
  }
  return c;
}

void dsi_commer_free(dsi_commer *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->quit = 1;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->th, NULL);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

void dsi_exec_graph(dsi_xrun *r, dsi_pool *pool, dsi_prof *prof, int poison, uint8_t *arena, dsi_commer *comm) {
  const dsi_graph *g = r->g;
  int nth = dsi_pool_size(pool);
  padded_barrier *bars = r->bars; /* the caller's: nothing is allocated while running */
  dsi_barrier_init(&bars[0].b, nth);
  for (int k = 0; k < g->n_regions; k++) {
    int a = g->team_a[k];
    dsi_barrier_init(&bars[1 + 2 * k].b, a);
    dsi_barrier_init(&bars[2 + 2 * k].b, nth - a);
  }
  reset_states(r);
  exec_job j = {r, prof, prof_ops(r, prof), bars, 0, g->n_split > 0};
  if (!poison && g->n_comm) { /* the collectives on the communication thread, beside the workers */
    DSI_ASSERT(comm);
    comm->job = &j;
    comm->nth = nth;
    unsigned long gen = atomic_fetch_add_explicit(&comm->gen, 1, memory_order_release) + 1;
    pthread_mutex_lock(&comm->mu);
    if (comm->sleeping) pthread_cond_signal(&comm->cv);
    pthread_mutex_unlock(&comm->mu);
    dsi_pool_run(pool, graph_task, &j);
    for (int spins = 0; atomic_load_explicit(&comm->done, memory_order_acquire) != gen;) dsi_spin_pause(&spins);
  } else if (!poison) {
    dsi_pool_run(pool, graph_task, &j);
  } else {
    /* op by op: every read of a byte not written since its tensor's birth
     * sees NaN, and NaN reaches the logits */
    j.help = 0;
    fill_nan(arena, g->arena_bytes);
    for (int i = 0; i < g->n_ops; i++) {
      if (g->ops[i].dead) continue;
      j.op = i;
      if (g->ops[i].team == DSI_TEAM_COMM) run_op(&j, i, nth, nth, nth + 1, 0); /* on this thread */
      else dsi_pool_run(pool, op_task, &j);
      /* every tensor, not only op i's operands: in a split fork a lifetime
       * ends at the region's last op */
      for (int t = 0; t < g->n_ts; t++)
        if (g->ts[t].kind == DSI_T_ARENA && g->ts[t].last == i) fill_nan(r->ptr[t], g->ts[t].bytes);
    }
  }
}

int dsi_exec_eager(dsi_xrun *r, dsi_pool *pool, dsi_prof *prof, dsi_err *err) {
  const dsi_graph *g = r->g;
  padded_barrier bar;
  dsi_barrier_init(&bar.b, dsi_pool_size(pool));
  reset_states(r);
  exec_job j = {r, prof, prof_ops(r, prof), &bar, 0, 0};
  int rc = DSI_OK;
  for (int i = 0; i < g->n_ops && !rc; i++) {
    const dsi_op *op = &g->ops[i];
    if (op->dead) continue;
    for (int k = DSI_OP_IN; k < N_OPERANDS && !rc; k++) { /* outputs and workspace taken on the spot */
      int t = operand(op, k);
      if (t >= 0 && g->ts[t].kind == DSI_T_ARENA && g->ts[t].first == i &&
          !(r->ptr[t] = dsi_alloc_aligned(g->ts[t].bytes)))
        rc = dsi_errf(err, DSI_E_NOMEM, "out of memory for %s of layer %d (%zu bytes)", g->ts[t].name, g->ts[t].layer,
                      g->ts[t].bytes);
    }
    if (rc) break;
    j.op = i;
    dsi_pool_run(pool, op_task, &j);
    for_dying(g, i, r, release);
  }
  for (int t = 0; t < g->n_ts; t++) /* after a failure */
    if (g->ts[t].kind == DSI_T_ARENA && r->ptr[t]) {
      dsi_free_aligned(r->ptr[t]);
      r->ptr[t] = NULL;
    }
  return rc;
}
