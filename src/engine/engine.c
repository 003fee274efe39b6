/* engine: sequences over the paged KV cache, the batched forward step
 * behind dsi_engine_forward, and the thread pool they share. */
#include "engine/engine_impl.h"
#include "engine/engine_testing.h"

#include "graph/prof.h"
#include "kernels/gemm.h"

#include <stdlib.h>
#include <string.h>

/* ---- the process (public helpers) ---- */
int dsi_default_threads(void) { return dsi_ncpu(); }
size_t dsi_peak_rss(void) { return dsi_peak_rss_bytes(); }
void dsi_reset_peak_rss(void) { dsi_rss_reset_peak(); }
const char *dsi_isa_name(void) { return dsi_fwd_isa_best(); }
void dsi_set_log_level(int level) { dsi_log_set_level(level); }

const dsi_err *dsi_engine_error(const dsi_engine *e) { return &e->err; }

const char *dsi_engine_isa(const dsi_engine *e) { return dsi_fwd_isa(e->fwd); }
const char *dsi_engine_kv_dtype(const dsi_engine *e) { return dsi_fwd_kv_pairs(e->fwd) ? "bf16" : "f32"; }

double dsi_engine_matrix_peak(const dsi_engine *e, const dsi_peaks *pk, const char **name) {
  /* INT8 and INT4 weights multiply int8 activations on vpdpbusd (AVX2:
   * INT8 on vpmaddwd, its default int16 activations too, INT4 on
   * vpmaddubsw) where no AMX runs them (the attention's bf16 matmuls, and
   * INT4's INT8 lm_head, then count against it too); INT4's in every
   * precision mode */
  int act = dsi_fwd_act(e->fwd);
  int i8 = e->m->quant == DSI_QUANT_INT4 || (e->m->quant && (act & (DSI_ACT_RED_I8 | DSI_ACT_RED_I16)));
  const char *isa = dsi_engine_isa(e); /* the level the kernels run at (a cap below the CPU's too) */
  if (!strcmp(isa, "avx2")) {
    if (e->m->quant == DSI_QUANT_INT4 && pk->maddubs_gops > 0) return *name = "vpmaddubsw", pk->maddubs_gops;
    if (i8 && pk->maddwd_gops > 0) return *name = "vpmaddwd", pk->maddwd_gops;
  } else if (i8 && strcmp(isa, "amx") && strcmp(isa, "scalar") && pk->vnni_gops > 0) {
    return *name = "vpdpbusd", pk->vnni_gops;
  }
  return dsi_matrix_peak(pk, dsi_fwd_matrix_isa(e->fwd), name);
}

void dsi_engine_kv_blocks(const dsi_engine *e, int *available, int *total, int *block_size) {
  if (available) *available = dsi_kv_available(&e->kv);
  if (total) *total = e->kv.n_blocks;
  if (block_size) *block_size = e->kv.block_size;
}

void dsi_engine_fail_token(dsi_engine *e, int32_t token) { e->fail_token = token; }

void dsi_engine_set_poison(dsi_engine *e, int on) {
  e->exec.poison = on;
  dsi_fwd_set_exec(e->fwd, &e->exec);
}

/* ---- ranks ---- */
/* The graph's collectives: a rank that cannot take part ends them all
 * (the others would wait for it forever). */
static int coll_done(dsi_dist *d, int rc, const char *what) {
  if (rc) {
    dsi_log(DSI_LOG_ERROR, "rank %d: the forward's %s failed; ending every rank", d->rank, what);
    dsi_dist_abort(d, 1);
  }
  return rc;
}
static int all_reduce(void *ctx, float *buf, size_t n) {
  return coll_done(ctx, dsi_dist_all_reduce_f32(ctx, buf, n), "all_reduce");
}
static int reduce_scatter(void *ctx, const float *in, float *out, const int *counts) {
  return coll_done(ctx, dsi_dist_reduce_scatter_f32(ctx, in, out, counts), "reduce_scatter");
}
static int all_gather(void *ctx, float *buf, const int *counts, const int *displs) {
  return coll_done(ctx, dsi_dist_all_gather_f32(ctx, buf, counts, displs), "all_gather");
}
static int gather(void *ctx, const float *send, int n, float *recv, const int *counts, const int *displs) {
  return coll_done(ctx, dsi_dist_gather_f32(ctx, send, n, recv, counts, displs, 0), "gather");
}
static int all_to_all_int(void *ctx, const int *send, int *recv) {
  return coll_done(ctx, dsi_dist_all_to_all_int(ctx, send, recv), "all_to_all");
}
static int all_to_all_v(void *ctx, const void *send, const int *sc, const int *sd, void *recv, const int *rc,
                        const int *rd) {
  return coll_done(ctx, dsi_dist_all_to_all_v(ctx, send, sc, sd, recv, rc, rd), "all_to_all_v");
}

enum { MSG_STOP = 0, MSG_STEP = 1, MSG_HEAD = 6 };

/* room for n words in the step message; NULL (e->err set) when out of memory */
static int32_t *msg_room(dsi_engine *e, size_t n) {
  if (n > e->msg_cap) {
    int32_t *m = realloc(e->msg, n * sizeof(int32_t));
    if (!m) {
      dsi_errf(&e->err, DSI_E_NOMEM, "out of memory for a step's message to the other ranks (%zu ids)", n);
      return NULL;
    }
    e->msg = m;
    e->msg_cap = n;
  }
  return e->msg;
}

/* rank 0: the step every rank runs — tokens, positions, sequences, cache
 * slots, the rows whose logits are wanted, the block tables of the
 * sequences in it and what the block pool did to the cache's memory since
 * the last step (a prefix copied into a new block, a block zeroed) — or
 * MSG_STOP */
static int send_step(dsi_engine *e, const dsi_fwd_batch *fb) {
  int32_t head[MSG_HEAD] = {fb ? MSG_STEP : MSG_STOP, 0, 0, 0, 0, 0};
  if (!fb) return dsi_dist_bcast(e->dist, head, sizeof head, 0);
  if (e->kv.mem_log_lost)
    return dsi_errf(&e->err, DSI_E_NOMEM, "out of memory recording the cache's block copies for the other ranks");
  int n = fb->n_tokens, bs = e->kv.block_size, n_seq = 0, n_blk = 0;
  for (int s = 0; s < e->n_seqs_cap; s++) e->seq_mark[s] = -1;
  for (int i = 0; i < n; i++) { /* the last position of each sequence in the step */
    int s = fb->seq[i];
    if (e->seq_mark[s] < 0) n_seq++;
    e->seq_mark[s] = DSI_MAX(e->seq_mark[s], fb->pos[i]);
  }
  for (int s = 0; s < e->n_seqs_cap; s++)
    if (e->seq_mark[s] >= 0) n_blk += e->seq_mark[s] / bs + 1;
  head[1] = n;
  head[2] = n_seq;
  head[3] = n_blk;
  head[4] = fb->n_logits;
  head[5] = e->kv.n_mem_log;
  size_t mem = (size_t)e->kv.n_mem_log * DSI_KV_MEM_WORDS;
  int32_t *m = msg_room(e, 4 * (size_t)n + fb->n_logits + 2 * (size_t)n_seq + n_blk + mem), *p = m;
  if (!m) return DSI_E_NOMEM; /* before the head: the others wait for the next step */
  memcpy(p, fb->tokens, n * sizeof(int32_t)), p += n;
  memcpy(p, fb->pos, n * sizeof(int32_t)), p += n;
  memcpy(p, fb->seq, n * sizeof(int32_t)), p += n;
  memcpy(p, fb->slot, n * sizeof(int32_t)), p += n;
  memcpy(p, fb->logit_rows, fb->n_logits * sizeof(int32_t)), p += fb->n_logits;
  int32_t *blocks = p + 2 * n_seq;
  for (int s = 0; s < e->n_seqs_cap; s++) {
    if (e->seq_mark[s] < 0) continue;
    int nb = e->seq_mark[s] / bs + 1;
    *p++ = s;
    *p++ = nb;
    memcpy(blocks, e->seqs[s].blocks, nb * sizeof(int32_t));
    blocks += nb;
  }
  if (mem) memcpy(blocks, e->kv.mem_log, mem * sizeof(int32_t));
  blocks += mem;
  int rc = dsi_dist_bcast(e->dist, head, sizeof head, 0);
  if (!rc) rc = dsi_dist_bcast(e->dist, m, (size_t)(blocks - m) * sizeof(int32_t), 0);
  if (!rc) e->kv.n_mem_log = 0; /* sent: done everywhere before the step */
  return rc ? dsi_errf(&e->err, rc, "sending the step to the other ranks failed") : DSI_OK;
}

int dsi_engine_follow(dsi_engine *e) {
  if (!e->dist || e->dist->rank == 0) return dsi_errf(&e->err, DSI_E_INVAL, "only ranks other than 0 follow");
  const int32_t **tables = NULL;
  int n_tables = 0, rc = DSI_OK;
  dsi_fwd_cache cache = {e->kv.layer, e->kv.pair, e->kv.block_size, e->kv.n_blocks * e->kv.block_size};
  for (;;) {
    int32_t head[MSG_HEAD];
    if ((rc = dsi_dist_bcast(e->dist, head, sizeof head, 0))) {
      rc = dsi_errf(&e->err, rc, "rank %d: receiving a step from rank 0 failed", e->dist->rank);
      break;
    }
    if (head[0] == MSG_STOP) break;
    int n = head[1], n_seq = head[2], n_blk = head[3], nl = head[4], n_mem = head[5];
    if (n < 1 || n > e->max_tokens || n_seq < 1 || n_seq > n || n_blk < n_seq || n_blk > e->kv.n_blocks * n_seq ||
        nl < 0 || nl > n || n_mem < 0 || n_mem > (1 << 24)) {
      rc = dsi_errf(&e->err, DSI_E_FORMAT, "rank %d: a malformed step from rank 0 (%d tokens, %d sequences, %d blocks)",
                    e->dist->rank, n, n_seq, n_blk);
      break;
    }
    size_t words = 4 * (size_t)n + nl + 2 * (size_t)n_seq + n_blk + (size_t)n_mem * DSI_KV_MEM_WORDS;
    int32_t *m = msg_room(e, words);
    if (!m) {
      rc = DSI_E_NOMEM;
      break;
    }
    if ((rc = dsi_dist_bcast(e->dist, m, words * sizeof(int32_t), 0))) {
      rc = dsi_errf(&e->err, rc, "rank %d: receiving a step from rank 0 failed", e->dist->rank);
      break;
    }
    const int32_t *st = m + 4 * (size_t)n + nl, *blocks = st + 2 * n_seq;
    for (int k = 0; k < n_seq; k++) {
      int s = st[2 * k];
      if (s >= n_tables) {
        const int32_t **t = realloc(tables, (s + 1) * sizeof *tables);
        if (!t) {
          rc = dsi_errf(&e->err, DSI_E_NOMEM, "rank %d: out of memory for the block tables", e->dist->rank);
          break;
        }
        tables = t;
        memset(tables + n_tables, 0, (s + 1 - n_tables) * sizeof *tables);
        n_tables = s + 1;
      }
      tables[s] = blocks;
      blocks += st[2 * k + 1];
    }
    if (rc) break;
    /* rank 0's prefix copies and zeroed blocks since the last step, then the step */
    if ((rc = dsi_kv_apply_mem_log(&e->kv, blocks, n_mem, &e->err))) break;
    /* the logit rows: under DP attention each rank computes its sequences' and sends them to rank 0 */
    dsi_fwd_batch fb = {.n_tokens = n, .tokens = m, .pos = m + n, .seq = m + 2 * n, .slot = m + 3 * n,
                        .block_tables = tables, .logit_rows = m + 4 * n, .n_logits = nl};
    if ((rc = dsi_fwd_run(e->fwd, &fb, &cache, NULL, &e->err))) break;
  }
  free(tables);
  return rc;
}

int dsi_engine_open(dsi_engine **out, dsi_model *m, const dsi_engine_opts *o, dsi_err *err) {
  dsi_engine_opts d = {0};
  if (!o) o = &d;
  *out = NULL;
  const dsi_config *c = &m->cfg;
  if (o->n_threads > dsi_max_threads())
    return dsi_errf(err, DSI_E_INVAL, "%d threads is over the limit of %d (%d per core, %d cores)", o->n_threads,
                    dsi_max_threads(), DSI_THREADS_PER_CORE_MAX, dsi_ncpu());
  dsi_engine *e = calloc(1, sizeof *e);
  if (!e) return dsi_errf(err, DSI_E_NOMEM, "out of memory for the engine");
  e->m = m;
  e->fail_token = -1;
  e->max_tokens = o->max_tokens > 0 ? o->max_tokens : 512;
  e->max_context = o->max_context > 0 ? o->max_context : DSI_MIN(c->max_position_embeddings, 4096);
  if (e->max_context > c->max_position_embeddings) e->max_context = c->max_position_embeddings;
  int bs = o->kv_block_size > 0 ? o->kv_block_size : 64;
  int nb = o->kv_blocks > 0 ? o->kv_blocks : DSI_CEIL_DIV(e->max_context, bs) * 8;
  int rc;
  e->pool = dsi_pool_new(o->n_threads > 0 ? o->n_threads : dsi_default_threads());
  if (!e->pool) {
    dsi_engine_free(e);
    return dsi_errf(err, DSI_E_NOMEM, "out of memory for the thread pool");
  }
  /* the forward decides its kernels, precision and cache layout */
  dsi_fwd_opts fo = {.max_tokens = e->max_tokens, .max_context = e->max_context, .isa = o->isa,
                     .precision = o->act_precision, .bf16_dot = o->bf16_dot, .kv_block_size = bs, .mla_form = o->mla_form, .kv_dtype = o->kv_dtype,
                     .hugepage = !o->no_hugepage};
  int row = c->kv_lora_rank + c->qk_rope_head_dim;
  if (o->dist && o->dist->size > 1) {
    int n = o->dist->size;
    if ((m->ep_size != 1 && m->ep_size != n) || (m->tp_size != 1 && m->tp_size != n)) {
      dsi_engine_free(e);
      return dsi_errf(err, DSI_E_INVAL, "the model's heads are split %d ways and its experts %d ways; the ranks are %d",
                      m->tp_size, m->ep_size, n);
    }
    e->dist = o->dist;
    /* the workers, and the communication thread under overlap */
    dsi_dist_set_threads(e->dist, dsi_pool_size(e->pool) + (o->overlap != 0));
    fo.coll = (dsi_coll){.size = n, .rank = o->dist->rank, .ctx = o->dist, .all_reduce_f32 = all_reduce,
                         .reduce_scatter_f32 = reduce_scatter, .all_gather_f32 = all_gather,
                         .all_to_all_int = all_to_all_int, .all_to_all_v = all_to_all_v, .gather_f32 = gather};
    fo.tp_to_ep = o->tp_to_ep;
    fo.attn_dp = o->attn_dp;
  }
  if ((rc = dsi_fwd_new(&e->fwd, m, e->pool, &fo, err)) ||
      (rc = dsi_kv_init(&e->kv, c->num_hidden_layers, row, bs, nb, dsi_fwd_kv_pairs(e->fwd), !o->no_hugepage, err))) {
    dsi_engine_free(e);
    return rc;
  }
  /* between ranks: the pool's own writes to the cache go with the next step;
   * under DP attention a cached prefix is shared only by sequences whose
   * rows live on the same rank */
  e->kv.log_mem = e->dist != NULL;
  e->dp_groups = e->dist && o->attn_dp ? e->dist->size : 1;
  e->exec = (dsi_fwd_exec_opts){.exec = o->exec, .streams = o->streams > 0 ? o->streams : 1, .fuse = 1,
                                .min_team = o->stream_team_min, .overlap = o->overlap,
                                .two_batch_min = o->two_batch_min};
  dsi_fwd_set_exec(e->fwd, &e->exec);
  if (o->profile) {
    /* and the communication thread, as thread n */
    if (!(e->prof = dsi_prof_new(dsi_pool_size(e->pool), 0))) {
      dsi_engine_free(e);
      return dsi_errf(err, DSI_E_NOMEM, "out of memory for the profiler's buffers");
    }
    dsi_fwd_set_prof(e->fwd, e->prof);
  }
  size_t T = (size_t)e->max_tokens;
  e->pos = malloc(T * sizeof(int32_t));
  e->slot = malloc(T * sizeof(int32_t));
  e->seq_idx = malloc(T * sizeof(int32_t));
  e->logit_rows = malloc(T * sizeof(int32_t));
  if (!e->pos || !e->slot || !e->seq_idx || !e->logit_rows) {
    dsi_engine_free(e);
    return dsi_errf(err, DSI_E_NOMEM, "out of memory for a step of %zu tokens", T);
  }
  *out = e;
  return DSI_OK;
}

void dsi_engine_free(dsi_engine *e) {
  if (!e) return;
  if (e->dist && e->dist->rank == 0 && e->fwd) send_step(e, NULL); /* the others stop following */
  free(e->msg);
  for (int i = 0; i < e->n_seqs_cap; i++)
    if (e->live[i]) dsi_kv_release(&e->kv, &e->seqs[i], NULL);
  dsi_fwd_free(e->fwd);
  dsi_prof_free(e->prof);
  dsi_kv_free(&e->kv);
  dsi_pool_free(e->pool);
  free(e->seqs);
  free(e->live);
  free(e->seq_count);
  free(e->seq_mark);
  free(e->tables);
  free(e->pos);
  free(e->slot);
  free(e->seq_idx);
  free(e->logit_rows);
  free(e);
}

/* ---- sequences ---- */
int dsi_seq_new(dsi_engine *e) {
  for (int i = 0; i < e->n_seqs_cap; i++)
    if (!e->live[i]) {
      e->live[i] = 1;
      memset(&e->seqs[i], 0, sizeof e->seqs[i]);
      e->seqs[i].group = e->dp_groups > 1 ? i % e->dp_groups : 0;
      return i;
    }
  int id = e->n_seqs_cap, cap = e->n_seqs_cap ? 2 * e->n_seqs_cap : 16;
  /* each grown apart: a failure leaves the others valid (and larger) */
  void *p;
  if (!(p = realloc(e->seqs, cap * sizeof *e->seqs))) goto oom;
  e->seqs = p;
  if (!(p = realloc(e->live, cap))) goto oom;
  e->live = p;
  if (!(p = realloc(e->seq_count, cap * sizeof(int32_t)))) goto oom;
  e->seq_count = p;
  if (!(p = realloc(e->seq_mark, cap * sizeof(int32_t)))) goto oom;
  e->seq_mark = p;
  if (!(p = realloc(e->tables, cap * sizeof(*e->tables)))) goto oom;
  e->tables = p;
  memset(e->live + id, 0, cap - id);
  memset(e->seqs + id, 0, (cap - id) * sizeof *e->seqs);
  e->n_seqs_cap = cap;
  e->live[id] = 1;
  e->seqs[id].group = e->dp_groups > 1 ? id % e->dp_groups : 0;
  return id;
oom:
  return dsi_errf(&e->err, DSI_E_NOMEM, "out of memory for %d sequences", cap);
}

void dsi_seq_free(dsi_engine *e, int seq) { dsi_engine_seq_release(e, seq, NULL); }

void dsi_engine_seq_release(dsi_engine *e, int seq, const int32_t *toks) {
  if (seq < 0 || seq >= e->n_seqs_cap || !e->live[seq]) return;
  dsi_kv_release(&e->kv, &e->seqs[seq], toks);
  e->live[seq] = 0;
}

int dsi_seq_len(const dsi_engine *e, int seq) {
  if (seq < 0 || seq >= e->n_seqs_cap || !e->live[seq]) return -1;
  return e->seqs[seq].len;
}

int dsi_seq_truncate(dsi_engine *e, int seq, int n) {
  if (seq < 0 || seq >= e->n_seqs_cap || !e->live[seq])
    return dsi_errf(&e->err, DSI_E_INVAL, "sequence %d does not exist", seq);
  if (n < 0 || n > e->seqs[seq].len)
    return dsi_errf(&e->err, DSI_E_INVAL, "sequence %d: cannot cut %d tokens back to %d", seq, e->seqs[seq].len, n);
  dsi_kv_truncate(&e->kv, &e->seqs[seq], n);
  return DSI_OK;
}

/* ---- the forward step ---- */
/* One window of at most max_tokens tokens: validate, reserve KV blocks,
 * assign positions and slots, run, then advance each sequence. */
static int forward_window(dsi_engine *e, const dsi_batch *b, int t0, int n, float *logits, int *n_out) {
  const dsi_config *c = &e->m->cfg;
  for (int i = 0; i < e->n_seqs_cap; i++) e->seq_count[i] = 0;
  for (int i = t0; i < t0 + n; i++) {
    int s = b->seq[i];
    if (s < 0 || s >= e->n_seqs_cap || !e->live[s])
      return dsi_errf(&e->err, DSI_E_INVAL, "batch token %d: sequence %d does not exist", i, s);
    if (b->tokens[i] < 0 || b->tokens[i] >= c->vocab_size)
      return dsi_errf(&e->err, DSI_E_INVAL, "batch token %d: id %d is outside the vocabulary [0, %d)", i,
                      b->tokens[i], c->vocab_size);
    if (b->tokens[i] == e->fail_token)
      return dsi_errf(&e->err, DSI_E_NOMEM, "injected fault: batch token %d is id %d", i, b->tokens[i]);
    e->seq_count[s]++;
  }
  e->step_prefill = 0;
  for (int s = 0; s < e->n_seqs_cap; s++) {
    if (!e->seq_count[s]) continue;
    if (e->seq_count[s] > 1) e->step_prefill = 1;
    int total = e->seqs[s].len + e->seq_count[s];
    if (total > e->max_context)
      return dsi_errf(&e->err, DSI_E_CAPACITY, "sequence %d would hold %d tokens, over the context limit of %d",
                      s, total, e->max_context);
    int rc = dsi_kv_reserve(&e->kv, &e->seqs[s], total, &e->err);
    if (rc) return rc;
    e->tables[s] = e->seqs[s].blocks;
    e->seq_count[s] = 0; /* reused as the running offset below */
  }
  int nl = 0;
  for (int i = 0; i < n; i++) {
    int s = b->seq[t0 + i];
    int p = e->seqs[s].len + e->seq_count[s]++;
    e->pos[i] = p;
    e->slot[i] = dsi_kv_slot(&e->kv, &e->seqs[s], p);
    if (!b->want_logits || b->want_logits[t0 + i]) e->logit_rows[nl++] = i;
  }
  dsi_fwd_batch fb = {
    .n_tokens = n, .tokens = b->tokens + t0, .pos = e->pos, .seq = b->seq + t0, .slot = e->slot,
    .block_tables = e->tables, .logit_rows = e->logit_rows, .n_logits = logits ? nl : 0,
  };
  dsi_fwd_cache cache = {e->kv.layer, e->kv.pair, e->kv.block_size, e->kv.n_blocks * e->kv.block_size};
  int rc = e->dist ? send_step(e, &fb) : DSI_OK;
  if (rc) return rc;
  rc = dsi_fwd_run(e->fwd, &fb, &cache, logits, &e->err);
  if (rc) return rc; /* nothing ran: the sequences stay as they were */
  for (int s = 0; s < e->n_seqs_cap; s++) e->seqs[s].len += e->seq_count[s];
  *n_out = nl;
  return DSI_OK;
}

int dsi_engine_forward(dsi_engine *e, const dsi_batch *b, float *logits) {
  if (!b || b->n_tokens <= 0 || !b->tokens || !b->seq)
    return dsi_errf(&e->err, DSI_E_INVAL, "empty batch");
  size_t vocab = e->m->cfg.vocab_size;
  for (int t0 = 0; t0 < b->n_tokens; t0 += e->max_tokens) {
    int n = DSI_MIN(e->max_tokens, b->n_tokens - t0), nl = 0;
    if (e->prof) dsi_prof_step_begin(e->prof);
    int rc = forward_window(e, b, t0, n, logits, &nl);
    if (e->prof) dsi_prof_step_end(e->prof, e->step_prefill, n, rc == DSI_OK);
    if (rc) return rc;
    if (logits) logits += nl * vocab;
  }
  return DSI_OK;
}

/* ---- profile ---- */
int dsi_engine_profile_write(dsi_engine *e, const char *path, dsi_err *err) {
  if (!e->prof) return dsi_errf(err, DSI_E_INVAL, "the engine was opened without profile = 1");
  return dsi_prof_write_trace(e->prof, path, err);
}

void dsi_engine_profile_reset(dsi_engine *e) {
  if (e->prof) dsi_prof_reset(e->prof);
}

void dsi_engine_profile_set_peaks(dsi_engine *e, const dsi_peaks *pk) {
  const char *name;
  double mpeak = dsi_engine_matrix_peak(e, pk, &name);
  if (e->prof) dsi_prof_set_peaks(e->prof, pk, mpeak, name);
}

int dsi_engine_profile_stats(dsi_engine *e, int prefill, dsi_phase_stats *out) {
  memset(out, 0, sizeof *out);
  if (!e->prof) return dsi_errf(&e->err, DSI_E_INVAL, "the engine was opened without profile = 1");
  dsi_prof_phase_stats(e->prof, prefill, out);
  return DSI_OK;
}

int dsi_engine_plan_info(dsi_engine *e, int n_tokens, dsi_plan_info *out) {
  memset(out, 0, sizeof *out);
  if (n_tokens < 1 || n_tokens > e->max_tokens)
    return dsi_errf(&e->err, DSI_E_INVAL, "a batch holds 1..%d tokens, not %d", e->max_tokens, n_tokens);
  dsi_fwd_stats s;
  int rc = dsi_fwd_plan_stats(e->fwd, n_tokens, &s, &e->err);
  if (rc) return rc;
  *out = (dsi_plan_info){s.bucket, s.arena_bytes, s.sum_bytes, s.n_ops, s.n_fused, s.n_waits, s.n_regions, s.n_split,
                         s.captures};
  return DSI_OK;
}

void dsi_engine_profile_summary(dsi_engine *e, FILE *out) {
  if (e->prof) dsi_prof_summary(e->prof, out);
  else fprintf(out, "no profile: the engine was opened without profile = 1\n");
}
