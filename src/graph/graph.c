/* graph: the op IR (see graph.h) — recording, then the planner's passes in
 * order: fusion, teams, lifetimes, the memory plan, the waits; and the
 * checker that proves a plan sound. */
#define _GNU_SOURCE
#include "graph/graph.h"
#include "base/base.h"
#include "graph/prof.h"
#include "kernels/gemm.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const dsi_op_kind_names[DSI_OP_COUNT] = {
  "embed", "rmsnorm", "add", "matmul", "silu_mul", "rope_q", "kv_write", "attn_qlat", "attn_core",
  "attn_out", "attn_rowmajor", "attn_naive", "router_topk", "moe_sort", "moe_gate_up", "moe_down", "moe_rowmajor",
  "all_reduce", "reduce_scatter", "all_gather", "shard", "moe_dispatch", "moe_combine",
};
static_assert(sizeof dsi_op_kind_names / sizeof *dsi_op_kind_names == DSI_OP_COUNT, "a name per op kind");

/* ---- recording ---- */
dsi_graph *dsi_graph_new(int T) {
  dsi_graph *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  /* room from the start: after a failed growth the builder's stand-ins
   * (tensor 0, spare_op) and its look at the last op stay in bounds */
  g->cap_ts = g->cap_ops = 64;
  g->ts = malloc(g->cap_ts * sizeof *g->ts);
  g->ops = malloc(g->cap_ops * sizeof *g->ops);
  if (!g->ts || !g->ops) {
    dsi_graph_free(g);
    return NULL;
  }
  g->T = T;
  g->cur_layer = -1;
  g->cur_region = -1;
  return g;
}

void dsi_graph_free(dsi_graph *g) {
  if (!g) return;
  free(g->ops);
  free(g->ts);
  free(g->team_a);
  free(g);
}

int dsi_graph_tensor(dsi_graph *g, const char *name, int kind, dsi_dtype dtype, int ndim, const int64_t *ne) {
  DSI_ASSERT(ndim >= 0 && ndim <= DSI_MAX_DIMS);
  if (g->n_ts == g->cap_ts) {
    dsi_tensor *ts = realloc(g->ts, 2 * (size_t)g->cap_ts * sizeof *g->ts);
    if (!ts) {
      g->oom = 1;
      return 0;
    }
    g->ts = ts;
    g->cap_ts *= 2;
  }
  dsi_tensor *t = &g->ts[g->n_ts];
  *t = (dsi_tensor){.name = name, .layer = g->cur_layer, .kind = kind, .dtype = dtype, .ndim = ndim, .first = -1,
                    .last = -1, .mb = g->cur_mb};
  size_t n = ndim > 0;
  for (int d = 0; d < ndim; d++) {
    DSI_ASSERT(ne[d] >= 0);
    t->ne[d] = ne[d];
    if (dsi_size_mul(n, (size_t)ne[d], &n)) g->oom = 1; /* no memory holds it */
  }
  if (dsi_size_mul(n, dsi_dtype_size(dtype), &t->bytes)) g->oom = 1;
  return g->n_ts++;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

void dsi_graph_workspace(dsi_graph *g, int i, size_t shared, size_t thread, int nth) {
  dsi_op *op = &g->ops[i];
  op->ws_shared = align64(shared);
  op->ws_thread = align64(thread);
  if (!shared && !thread) return;
  int save = g->cur_layer;
  g->cur_layer = op->layer;
  int64_t bytes = (int64_t)(op->ws_shared + (size_t)nth * op->ws_thread);
  op->ws = dsi_graph_tensor(g, "ws", DSI_T_ARENA, DSI_DTYPE_U8, 1, &bytes);
  g->cur_layer = save;
}

char *dsi_tensor_desc(const dsi_tensor *t, char *buf, size_t len) {
  static const char *const names[DSI_DTYPE_COUNT] = {
    [DSI_DTYPE_F32] = "f32", [DSI_DTYPE_BF16] = "bf16", [DSI_DTYPE_F16] = "f16", [DSI_DTYPE_F8_E4M3] = "fp8",
    [DSI_DTYPE_I32] = "i32", [DSI_DTYPE_I64] = "i64", [DSI_DTYPE_I8] = "i8", [DSI_DTYPE_U8] = "u8", [DSI_DTYPE_I4] = "i4"};
  size_t at = (size_t)snprintf(buf, len, "%s[", (unsigned)t->dtype < DSI_DTYPE_COUNT ? names[t->dtype] : "?");
  for (int d = 0; d < t->ndim && at < len; d++) at += (size_t)snprintf(buf + at, len - at, "%s%lld", d ? "," : "", (long long)t->ne[d]);
  if (at < len) snprintf(buf + at, len - at, t->ndim ? "]" : "...]");
  return buf;
}

dsi_op *dsi_graph_op(dsi_graph *g, dsi_op_kind kind, const char *name, int cat) {
  dsi_op *op = &g->spare_op;
  if (g->n_ops == g->cap_ops) {
    dsi_op *ops = realloc(g->ops, 2 * (size_t)g->cap_ops * sizeof *g->ops);
    if (ops) {
      g->ops = ops;
      g->cap_ops *= 2;
    } else {
      g->oom = 1;
    }
  }
  if (g->n_ops < g->cap_ops) op = &g->ops[g->n_ops++];
  memset(op, 0, sizeof *op);
  op->kind = kind;
  op->name = name;
  op->cat = cat;
  op->layer = g->cur_layer;
  op->region = g->cur_region;
  op->stream = g->cur_region >= 0 ? g->cur_stream : 0;
  op->rows = g->cur_rows;
  op->mb = g->cur_mb;
  op->stage = g->cur_stage;
  for (int i = 0; i < DSI_OP_IN; i++) op->in[i] = -1;
  for (int i = 0; i < DSI_OP_OUT; i++) op->out[i] = -1;
  op->ws = -1;
  return op;
}

void dsi_graph_fork(dsi_graph *g) {
  DSI_ASSERT(g->cur_region < 0);
  if (g->two_batch) return; /* a fork's ops stay together; the micro-batches' interleave */
  g->cur_region = g->n_regions++;
  g->cur_stream = 0;
}
void dsi_graph_stream(dsi_graph *g, int stream) { g->cur_stream = stream; }
void dsi_graph_join(dsi_graph *g) {
  g->cur_region = -1;
  g->cur_stream = 0;
}

void dsi_graph_interleave(dsi_graph *g, int from) {
  /* insertion: stable, in place (a layer's few dozen ops) */
  for (int i = from + 1; i < g->n_ops; i++) {
    dsi_op op = g->ops[i];
    int j = i;
    for (; j > from && (g->ops[j - 1].stage > op.stage || (g->ops[j - 1].stage == op.stage && g->ops[j - 1].mb > op.mb));
         j--)
      g->ops[j] = g->ops[j - 1];
    g->ops[j] = op;
  }
}

/* ---- access sets ---- */
typedef struct {
  int t, write;
} access;

static int accesses(const dsi_op *op, access *a) {
  int n = 0;
  for (int i = 0; i < DSI_OP_IN; i++)
    if (op->in[i] >= 0) a[n++] = (access){op->in[i], 0};
  for (int i = 0; i < DSI_OP_OUT; i++)
    if (op->out[i] >= 0) a[n++] = (access){op->out[i], 1};
  if (op->ws >= 0) a[n++] = (access){op->ws, 1};
  return n;
}

static int tensors_overlap(const dsi_graph *g, int a, int b) {
  if (a == b) return 1;
  const dsi_tensor *x = &g->ts[a], *y = &g->ts[b];
  if (x->kind != DSI_T_ARENA || y->kind != DSI_T_ARENA) return 0;
  return x->off < y->off + y->bytes && y->off < x->off + x->bytes;
}

/* ops i and j touch the same bytes and one of them writes them */
static int ops_conflict(const dsi_graph *g, const dsi_op *i, const dsi_op *j) {
  access ai[DSI_OP_IN + DSI_OP_OUT + 1], aj[DSI_OP_IN + DSI_OP_OUT + 1];
  int ni = accesses(i, ai), nj = accesses(j, aj);
  for (int x = 0; x < ni; x++)
    for (int y = 0; y < nj; y++)
      if ((ai[x].write || aj[y].write) && tensors_overlap(g, ai[x].t, aj[y].t)) return 1;
  return 0;
}

static int reads(const dsi_op *op, int t) {
  for (int i = 0; i < DSI_OP_IN; i++)
    if (op->in[i] == t) return 1;
  return 0;
}

/* ---- pass 1: fusion ---- */
static int next_live(const dsi_graph *g, int i) {
  for (i++; i < g->n_ops && g->ops[i].dead; i++) {}
  return i;
}

/* every op reading t (after i) is a packed matmul on it, or the grouped gate/up */
static int only_packed_consumers(const dsi_graph *g, int i, int t) {
  int any = 0;
  for (int k = i + 1; k < g->n_ops; k++) {
    const dsi_op *op = &g->ops[k];
    if (op->dead || !reads(op, t)) continue;
    if (op->kind == DSI_OP_MATMUL && op->in[0] == t && op->w->layout == DSI_LAYOUT_TILES && op->w->dtype != DSI_DTYPE_I8 &&
        op->w->dtype != DSI_DTYPE_I4)
      any = 1;
    else if (op->kind == DSI_OP_MOE_GATE_UP && op->in[0] == t)
      any = 1;
    else
      return 0;
  }
  return any;
}

static void fuse(dsi_graph *g, const dsi_plan_opts *o) {
  for (int i = 0; i < g->n_ops; i++) {
    dsi_op *add = &g->ops[i];
    if (add->dead || add->kind != DSI_OP_ADD) continue;
    int j = next_live(g, i);
    if (j >= g->n_ops) continue;
    dsi_op *norm = &g->ops[j];
    /* residual add + norm: one pass over x */
    if (norm->kind == DSI_OP_RMSNORM && norm->in[0] == add->out[0] && norm->out[0] != add->out[0] &&
        !(norm->flags & DSI_FUSE_ADD) && add->region == norm->region && add->rows == norm->rows) {
      norm->flags |= DSI_FUSE_ADD;
      norm->in[1] = add->in[1];
      norm->out[2] = add->out[0];
      add->dead = 1;
    }
  }
  if (!o->act_bf16) return;
  for (int i = 0; i < g->n_ops; i++) {
    dsi_op *norm = &g->ops[i];
    if (norm->dead || norm->kind != DSI_OP_RMSNORM || norm->out[0] == norm->in[0] || (norm->flags & DSI_ROWS_LOGITS))
      continue;
    int xn = norm->out[0];
    if (!only_packed_consumers(g, i, xn)) continue;
    /* norm + quantize: the norm writes what the matmuls multiply, rounded
     * f32 rows and (where AMX runs) their bf16 rows */
    const dsi_mat *w = NULL;
    for (int k = i + 1; k < g->n_ops && !w; k++)
      if (!g->ops[k].dead && g->ops[k].kind == DSI_OP_MATMUL && g->ops[k].in[0] == xn) w = g->ops[k].w;
    norm->flags |= DSI_FUSE_QUANT;
    if (w) {
      int save = g->cur_layer;
      g->cur_layer = norm->layer;
      int64_t shape[2] = {(int64_t)DSI_XB_ROWS(g->T), w->kpad}; /* bf16 rows in AMX tile order */
      norm->out[1] = dsi_graph_tensor(g, "xn_bf16", DSI_T_ARENA, DSI_DTYPE_BF16, 2, shape);
      g->cur_layer = save;
      norm->w = w;
    }
    for (int k = i + 1; k < g->n_ops; k++) {
      dsi_op *op = &g->ops[k];
      if (op->dead || !reads(op, xn)) continue;
      if (op->kind == DSI_OP_MATMUL && w && op->w->kpad == w->kpad) {
        op->flags |= DSI_X_PREPARED;
        op->in[1] = norm->out[1];
      } else {
        op->flags |= DSI_X_ROUNDED;
      }
    }
  }
}

/* ---- pass 2: teams ---- */
/* A fork is split only when each branch's team would have at least
 * min_team workers: a team of one runs every phase of its ops that is not
 * a matmul unit (preparing activations, norms, routing) on one worker,
 * which on 2 cores cost more than the overlap gained (see README). */
static int assign_teams(dsi_graph *g, const dsi_plan_opts *o) {
  free(g->team_a);
  g->team_a = calloc(DSI_MAX(g->n_regions, 1), sizeof(int));
  int min_team = o->min_team > 0 ? o->min_team : 2, n = o->n_threads;
  int *has = calloc(2 * (size_t)DSI_MAX(g->n_regions, 1), sizeof(int));
  if (!g->team_a || !has) {
    free(has);
    return DSI_E_NOMEM;
  }
  for (int i = 0; i < g->n_ops; i++)
    if (g->ops[i].region >= 0 && !g->ops[i].dead) has[2 * g->ops[i].region + g->ops[i].stream] = 1;
  g->n_split = 0;
  for (int r = 0; r < g->n_regions; r++) {
    g->team_a[r] = n;
    /* a region with one branch only (no shared experts, say) is not split */
    if (o->streams < 2 || !has[2 * r] || !has[2 * r + 1] || n < 2 * min_team) continue;
    /* threads in proportion to the branches' weight bytes */
    double cost[2] = {0, 0};
    for (int i = 0; i < g->n_ops; i++)
      if (g->ops[i].region == r && !g->ops[i].dead && g->ops[i].w && g->ops[i].kind != DSI_OP_RMSNORM)
        cost[g->ops[i].stream] += (double)g->ops[i].w->rows * g->ops[i].w->cols;
    int nb = cost[0] + cost[1] > 0 ? (int)(n * cost[1] / (cost[0] + cost[1]) + 0.5) : 1;
    nb = DSI_MAX(min_team, DSI_MIN(nb, n - min_team));
    g->team_a[r] = n - nb;
    g->n_split++;
  }
  g->n_comm = 0;
  for (int i = 0; i < g->n_ops; i++) {
    dsi_op *op = &g->ops[i];
    int split = op->region >= 0 && g->team_a[op->region] < n;
    op->team = split ? (op->stream ? DSI_TEAM_B : DSI_TEAM_A) : DSI_TEAM_ALL;
    if (o->overlap && !op->dead && op->cat == DSI_PROF_COMM) {
      op->team = DSI_TEAM_COMM;
      g->n_comm++;
    }
  }
  free(has);
  return DSI_OK;
}

void dsi_graph_team_range(const dsi_graph *g, const dsi_op *op, int n, int *lo, int *hi) {
  *lo = 0;
  *hi = n;
  if (op->team == DSI_TEAM_A) *hi = g->team_a[op->region];
  else if (op->team == DSI_TEAM_B) *lo = g->team_a[op->region];
  else if (op->team == DSI_TEAM_COMM) *lo = n, *hi = n + 1;
}

/* ---- pass 3: lifetimes; ops of a fork region count as one span of time,
 * since its two streams run in any interleaving ---- */
static int lifetimes(dsi_graph *g) {
  int *r0 = malloc(DSI_MAX(g->n_regions, 1) * sizeof(int)), *r1 = malloc(DSI_MAX(g->n_regions, 1) * sizeof(int));
  if (!r0 || !r1) {
    free(r0);
    free(r1);
    return DSI_E_NOMEM;
  }
  for (int r = 0; r < g->n_regions; r++) r0[r] = g->n_ops, r1[r] = -1;
  for (int i = 0; i < g->n_ops; i++)
    if (!g->ops[i].dead && g->ops[i].team != DSI_TEAM_ALL && g->ops[i].region >= 0) {
      int r = g->ops[i].region;
      r0[r] = DSI_MIN(r0[r], i);
      r1[r] = DSI_MAX(r1[r], i);
    }
  for (int t = 0; t < g->n_ts; t++) g->ts[t].first = g->ts[t].last = -1;
  for (int i = 0; i < g->n_ops; i++) {
    const dsi_op *op = &g->ops[i];
    if (op->dead) continue;
    int a = i, b = i;
    if (op->team != DSI_TEAM_ALL && op->region >= 0) a = r0[op->region], b = r1[op->region];
    access acc[DSI_OP_IN + DSI_OP_OUT + 1];
    int n = accesses(op, acc);
    for (int k = 0; k < n; k++) {
      dsi_tensor *t = &g->ts[acc[k].t];
      if (t->first < 0 || a < t->first) t->first = a;
      if (b > t->last) t->last = b;
    }
  }
  free(r0);
  free(r1);
  return DSI_OK;
}

/* ---- pass 4: the memory plan — greedy by size: biggest first, each at the
 * lowest offset free of every tensor alive at the same time ---- */
static int by_bytes_desc(const void *a, const void *b, void *ts) {
  const dsi_tensor *x = &((const dsi_tensor *)ts)[*(const int *)a], *y = &((const dsi_tensor *)ts)[*(const int *)b];
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return *(const int *)a - *(const int *)b;
}

static int by_off(const void *a, const void *b, void *ts) {
  const dsi_tensor *x = &((const dsi_tensor *)ts)[*(const int *)a], *y = &((const dsi_tensor *)ts)[*(const int *)b];
  return (x->off > y->off) - (x->off < y->off);
}

static int plan_memory(dsi_graph *g) {
  int *order = malloc(g->n_ts * sizeof(int)), *placed = malloc(g->n_ts * sizeof(int)), *live = malloc(g->n_ts * sizeof(int));
  if (!order || !placed || !live) {
    free(order);
    free(placed);
    free(live);
    return DSI_E_NOMEM;
  }
  int n = 0, n_placed = 0;
  g->sum_bytes = g->arena_bytes = 0;
  for (int t = 0; t < g->n_ts; t++)
    if (g->ts[t].kind == DSI_T_ARENA && g->ts[t].first >= 0) {
      order[n++] = t;
      g->sum_bytes += align64(g->ts[t].bytes);
    }
  qsort_r(order, n, sizeof(int), by_bytes_desc, g->ts);
  for (int k = 0; k < n; k++) {
    dsi_tensor *t = &g->ts[order[k]];
    int nl = 0;
    for (int p = 0; p < n_placed; p++) {
      const dsi_tensor *u = &g->ts[placed[p]];
      if (u->first <= t->last && t->first <= u->last) live[nl++] = placed[p];
    }
    qsort_r(live, nl, sizeof(int), by_off, g->ts);
    size_t off = 0, need = align64(t->bytes);
    for (int p = 0; p < nl; p++) {
      const dsi_tensor *u = &g->ts[live[p]];
      if (u->off >= off + need) break;
      off = DSI_MAX(off, align64(u->off + u->bytes));
    }
    t->off = off;
    g->arena_bytes = DSI_MAX(g->arena_bytes, off + need);
    placed[n_placed++] = order[k];
  }
  free(order);
  free(placed);
  free(live);
  return DSI_OK;
}

/* ---- pass 5: waits. Op i waits for the latest earlier ops that touch its
 * bytes; waiting for op k covers every earlier op whose threads all belong
 * to k's team (they ran it before k). ---- */
static int covers(const dsi_graph *g, const dsi_op *k, const dsi_op *j, int n) {
  int kl, kh, jl, jh;
  dsi_graph_team_range(g, k, n, &kl, &kh);
  dsi_graph_team_range(g, j, n, &jl, &jh);
  return kl <= jl && jh <= kh;
}

static void plan_waits(dsi_graph *g, int n) {
  for (int i = 0; i < g->n_ops; i++) {
    dsi_op *op = &g->ops[i];
    op->n_deps = 0;
    if (op->dead) continue;
    for (int j = i - 1; j >= 0; j--) {
      const dsi_op *pj = &g->ops[j];
      if (pj->dead || !ops_conflict(g, op, pj)) continue;
      int covered = 0;
      for (int d = 0; d < op->n_deps && !covered; d++) covered = covers(g, &g->ops[op->deps[d]], pj, n);
      if (covered) continue;
      DSI_ASSERT(op->n_deps < (int)DSI_ARRAY_LEN(op->deps));
      op->deps[op->n_deps++] = j;
      /* covers everything before it, but the communication thread's ops */
      if (pj->team == DSI_TEAM_ALL && !g->n_comm) break;
    }
  }
}

int dsi_graph_plan(dsi_graph *g, const dsi_plan_opts *o) {
  if (g->oom) return DSI_E_NOMEM;
  if (o->fuse) fuse(g, o);
  if (assign_teams(g, o) || lifetimes(g) || plan_memory(g)) return (g->oom = 1), DSI_E_NOMEM;
  plan_waits(g, o->n_threads);
  g->planned = 1;
  g->fused = o->fuse;
  g->streams = o->streams;
  return DSI_OK;
}

int dsi_graph_plan_eager(dsi_graph *g) {
  dsi_plan_opts o = {.streams = 1, .n_threads = 1};
  if (g->oom || assign_teams(g, &o) || lifetimes(g)) return (g->oom = 1), DSI_E_NOMEM;
  return DSI_OK;
}

/* ---- the checker ---- */
int dsi_graph_check(const dsi_graph *g, int n, char *why, size_t why_len) {
  for (int a = 0; a < g->n_ts; a++)
    for (int b = a + 1; b < g->n_ts; b++) {
      const dsi_tensor *x = &g->ts[a], *y = &g->ts[b];
      if (x->kind != DSI_T_ARENA || y->kind != DSI_T_ARENA || x->first < 0 || y->first < 0) continue;
      if (x->first <= y->last && y->first <= x->last && tensors_overlap(g, a, b)) {
        snprintf(why, why_len, "tensors %s (layer %d) and %s (layer %d) are alive together and share bytes",
                 x->name, x->layer, y->name, y->layer);
        return -1;
      }
    }
  /* hb[i]: ops certainly complete when op i starts */
  size_t words = (size_t)(g->n_ops + 63) / 64;
  uint64_t *hb = calloc(DSI_MAX((size_t)g->n_ops * words, 1), sizeof(uint64_t));
  if (!hb) {
    snprintf(why, why_len, "out of memory for the check's table of %d ops", g->n_ops);
    return DSI_E_NOMEM;
  }
#define HB(i) (hb + (size_t)(i) * words)
  int rc = 0;
  for (int i = 0; i < g->n_ops && !rc; i++) {
    const dsi_op *op = &g->ops[i];
    if (op->dead) continue;
    for (int d = 0; d < op->n_deps; d++) {
      int k = op->deps[d];
      for (int e = 0; e <= k; e++) {
        if (g->ops[e].dead || (e < k && !covers(g, &g->ops[k], &g->ops[e], n))) continue;
        HB(i)[e / 64] |= 1ull << (e % 64);
        for (size_t w = 0; w < words; w++) HB(i)[w] |= HB(e)[w];
      }
    }
    for (int j = 0; j < i; j++)
      if (!g->ops[j].dead && ops_conflict(g, op, &g->ops[j]) && !(HB(i)[j / 64] >> (j % 64) & 1)) {
        snprintf(why, why_len, "op %d %s (layer %d) may run while op %d %s (layer %d) still touches its bytes", i,
                 op->name, op->layer, j, g->ops[j].name, g->ops[j].layer);
        rc = -1;
        break;
      }
  }
#undef HB
  free(hb);
  return rc;
}

void dsi_graph_dump(const dsi_graph *g, void *file) {
  FILE *f = file;
  static const char *const teams[] = {"all", "A", "B", "comm"};
  fprintf(f, "graph: bucket %d tokens, %d ops, %d tensors, arena %.2f MB (intermediates sum %.2f MB)\n", g->T,
          g->n_ops, g->n_ts, g->arena_bytes / 1e6, g->sum_bytes / 1e6);
  for (int i = 0; i < g->n_ops; i++) {
    const dsi_op *op = &g->ops[i];
    if (op->dead) continue;
    fprintf(f, "  %4d %-14s %-16s L%-3d team %-3s mb %d flags %2d waits", i, dsi_op_kind_names[op->kind], op->name,
            op->layer, teams[op->team], op->mb, op->flags);
    for (int d = 0; d < op->n_deps; d++) fprintf(f, " %d", op->deps[d]);
    fprintf(f, "\n");
  }
  char desc[96];
  for (int t = 0; t < g->n_ts; t++) {
    const dsi_tensor *x = &g->ts[t];
    if (x->kind == DSI_T_ARENA && x->first >= 0)
      fprintf(f, "  t%-4d %-12s L%-3d %-26s %10zu B at %10zu, ops %d..%d\n", t, x->name, x->layer,
              dsi_tensor_desc(x, desc, sizeof desc), x->bytes, x->off, x->first, x->last);
  }
}
