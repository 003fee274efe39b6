/* graph: the profiler (see prof.h). Recording appends to preallocated
 * buffers (thread shares through one atomic counter); reporting — the
 * Chrome trace and the summary table — walks them afterwards. */
#include "graph/prof.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name; /* a string literal of the call site */
  int cat, layer, team;
  double flops, wbytes, abytes;
  char out[48];     /* its output tensor, "f32[512,16,192]" ("" none) */
} prof_op;

typedef struct {
  int op;  /* index into ops, -1: none named */
  int ith; /* pool thread */
  double t0, t1;
} prof_span;

typedef struct {
  double t0, t1;
  int prefill, n_tokens;
  int op0, op1;     /* its ops [op0, op1) */
  long span0, span1;/* its spans [span0, span1) */
  int two_batch;    /* run as two micro-batches */
} prof_step;

struct dsi_prof {
  int nth;
  double origin; /* trace time 0 */
  prof_op *ops;
  int n_ops, max_ops, cur;
  prof_span *spans;
  atomic_long n_spans;
  long max_spans;
  prof_step *steps;
  int n_steps, max_steps;
  double step_t0;
  int step_op0;
  long step_span0;
  int step_two_batch;
  atomic_int full; /* a buffer ran out: nothing more is recorded */
  dsi_peaks peaks;
  int have_peaks;
  double mpeak;           /* GFLOP/s: the matrix peak the engine's matmuls run at (dsi_matrix_peak) */
  const char *mpeak_name;
};

static const char *const k_cat_names[DSI_PROF_N_CAT] = {"attention", "moe", "dense", "lm_head", "other", "comm"};

/* ---- recording ---- */
void dsi_prof_span(dsi_prof *p, int op, int ith, double t0, double t1) {
  if (op < 0 || atomic_load_explicit(&p->full, memory_order_relaxed)) return;
  long i = atomic_fetch_add_explicit(&p->n_spans, 1, memory_order_relaxed);
  if (i >= p->max_spans) {
    atomic_store(&p->full, 1);
    return;
  }
  p->spans[i] = (prof_span){op, ith, t0, t1};
}

dsi_prof *dsi_prof_new(int n_threads, long max_spans) {
  dsi_prof *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->nth = n_threads;
  p->max_spans = max_spans > 0 ? max_spans : 1l << 20;
  p->max_ops = (int)DSI_MAX(1024, p->max_spans / 2);
  p->max_steps = (int)DSI_MAX(256, p->max_spans / 64);
  p->spans = malloc(p->max_spans * sizeof *p->spans);
  p->ops = malloc(p->max_ops * sizeof *p->ops);
  p->steps = malloc(p->max_steps * sizeof *p->steps);
  if (!p->spans || !p->ops || !p->steps) {
    dsi_prof_free(p);
    return NULL;
  }
  p->cur = -1;
  p->origin = dsi_now();
  return p;
}

void dsi_prof_free(dsi_prof *p) {
  if (!p) return;
  free(p->spans);
  free(p->ops);
  free(p->steps);
  free(p);
}

void dsi_prof_reset(dsi_prof *p) {
  p->n_ops = p->n_steps = 0;
  p->cur = -1;
  atomic_store(&p->n_spans, 0);
  atomic_store(&p->full, 0);
}

void dsi_prof_op_cost(dsi_prof *p, int op, double flops, double weight_bytes, double act_bytes) {
  if (op < 0) return;
  p->ops[op].flops = flops;
  p->ops[op].wbytes = weight_bytes;
  p->ops[op].abytes = act_bytes;
}

int dsi_prof_op(dsi_prof *p, const char *name, dsi_prof_cat cat, int layer, int team, const char *out) {
  if (p->n_ops == p->max_ops) {
    atomic_store(&p->full, 1);
    return -1;
  }
  p->ops[p->n_ops] = (prof_op){name, cat, layer, team, 0, 0, 0, ""};
  if (out) snprintf(p->ops[p->n_ops].out, sizeof p->ops[p->n_ops].out, "%s", out);
  return p->cur = p->n_ops++;
}

void dsi_prof_step_begin(dsi_prof *p) {
  p->cur = -1;
  p->step_op0 = p->n_ops;
  p->step_span0 = atomic_load(&p->n_spans);
  p->step_t0 = dsi_now();
  p->step_two_batch = 0;
}

void dsi_prof_step_two_batch(dsi_prof *p) { p->step_two_batch = 1; }

void dsi_prof_step_end(dsi_prof *p, int prefill, int n_tokens, int ok) {
  double t1 = dsi_now();
  p->cur = -1;
  if (!ok || atomic_load(&p->full)) return; /* a partial step would not add up */
  if (p->n_steps == p->max_steps) {
    atomic_store(&p->full, 1);
    return;
  }
  p->steps[p->n_steps++] = (prof_step){p->step_t0, t1, prefill, n_tokens, p->step_op0, p->n_ops,
                                       p->step_span0, atomic_load(&p->n_spans), p->step_two_batch};
}

void dsi_prof_set_peaks(dsi_prof *p, const dsi_peaks *pk, double matrix_peak, const char *name) {
  p->peaks = *pk;
  p->have_peaks = 1;
  p->mpeak = matrix_peak;
  p->mpeak_name = name;
}

static long spans_held(const dsi_prof *p) {
  return DSI_MIN(atomic_load((atomic_long *)&p->n_spans), p->max_spans);
}

/* ---- per step: time inside ops on the calling thread ---- */
static double step_ops_time(const dsi_prof *p, const prof_step *s) {
  double t = 0;
  for (long i = s->span0; i < s->span1; i++)
    if (p->spans[i].ith == 0) t += p->spans[i].t1 - p->spans[i].t0;
  return t;
}

/* ---- Chrome trace ---- */
static void thread_name(FILE *f, int tid, const char *name) {
  fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":", tid);
  dsi_json_put_str(f, name, strlen(name));
  fprintf(f, "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"sort_index\":%d}},\n",
          tid, tid);
}

int dsi_prof_write_trace(const dsi_prof *p, const char *path, dsi_err *err) {
  FILE *f = fopen(path, "w");
  if (!f) return dsi_errf(err, DSI_E_IO, "%s: cannot write the trace: %s", path, strerror(errno));
  long n_spans = spans_held(p);
  /* one track per worker, and per worker and stream where ops ran on a team */
  int step_tid = 3 * p->nth, teams = 0;
  for (int i = 0; i < p->n_ops; i++) teams |= p->ops[i].team != 0;
  fprintf(f, "{\"traceEvents\":[\n");
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"dsinfer\"}},\n");
  char buf[64];
  static const char *const streams[3] = {"", " stream A", " stream B"};
  for (int k = 0; k < (teams ? 3 : 1); k++)
    for (int t = 0; t < p->nth; t++) {
      snprintf(buf, sizeof buf, t ? "worker %d%s" : "thread %d (caller)%s", t, streams[k]);
      thread_name(f, k * p->nth + t, buf);
    }
  thread_name(f, step_tid, "steps");
  thread_name(f, step_tid + 1, "communication thread");
  int k = 0;
  for (long i = 0; i < n_spans; i++) {
    const prof_span *s = &p->spans[i];
    while (k < p->n_steps && p->steps[k].span1 <= i) k++;
    const char *phase = k < p->n_steps && i >= p->steps[k].span0 ? (p->steps[k].prefill ? "prefill" : "decode") : "none";
    const prof_op *op = s->op >= 0 ? &p->ops[s->op] : NULL;
    const char *name = op ? op->name : "(unnamed)";
    fprintf(f, "{\"name\":");
    dsi_json_put_str(f, name, strlen(name));
    fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"layer\":%d,"
               "\"flops\":%.0f,\"weight_bytes\":%.0f,\"act_bytes\":%.0f,\"bytes\":%.0f,\"phase\":\"%s\",\"op\":%d,"
               "\"worker\":%d,\"out\":\"%s\"}},\n",
            k_cat_names[op ? op->cat : DSI_PROF_OTHER], s->ith == p->nth ? step_tid + 1 : (op ? op->team : 0) * p->nth + s->ith,
            (s->t0 - p->origin) * 1e6,
            (s->t1 - s->t0) * 1e6,
            op ? op->layer : -1, op ? op->flops : 0, op ? op->wbytes : 0, op ? op->abytes : 0,
            op ? op->wbytes + op->abytes : 0, phase, s->op, s->ith, op ? op->out : "");
  }
  for (int i = 0; i < p->n_steps; i++) {
    const prof_step *s = &p->steps[i];
    double wall = s->t1 - s->t0, ops = step_ops_time(p, s);
    fprintf(f, "{\"name\":\"%s\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
               "\"args\":{\"step\":%d,\"phase\":\"%s\",\"n_tokens\":%d,\"ops_us\":%.3f,\"dispatch_us\":%.3f}}%s\n",
            s->prefill ? "prefill" : "decode", step_tid, (s->t0 - p->origin) * 1e6, wall * 1e6, i,
            s->prefill ? "prefill" : "decode", s->n_tokens, ops * 1e6, (wall - ops) * 1e6,
            i + 1 < p->n_steps ? "," : "");
  }
  if (p->n_steps == 0) fprintf(f, "{\"name\":\"no steps\",\"ph\":\"i\",\"pid\":1,\"tid\":%d,\"ts\":0,\"s\":\"g\"}\n", step_tid);
  fprintf(f, "],\"displayTimeUnit\":\"ms\",\"otherData\":{\"threads\":%d,\"truncated\":%s}}\n", p->nth,
          atomic_load((atomic_int *)&p->full) ? "true" : "false");
  int bad = ferror(f);
  if (fclose(f) || bad) return dsi_errf(err, DSI_E_IO, "%s: cannot write the trace: %s", path, strerror(errno));
  return DSI_OK;
}

/* ---- summary ---- */
typedef struct {
  double time, flops, bytes, wbytes;
  long calls;
  const char *name;
  int cat;
} prof_agg;

#define MAX_NAMES 128

typedef struct {
  int n_steps, two_batch_steps;
  long tokens;
  double wall, ops;
  double comm_overlap; /* time the communication thread ran a collective while the caller ran another op */
  prof_agg cat[DSI_PROF_N_CAT];
  prof_agg names[MAX_NAMES];
  int n_names;
} prof_phase;

static prof_agg *agg_of(prof_phase *ph, const char *name, int cat) {
  for (int i = 0; i < ph->n_names; i++)
    if (ph->names[i].cat == cat && !strcmp(ph->names[i].name, name)) return &ph->names[i];
  if (ph->n_names == MAX_NAMES) return NULL;
  ph->names[ph->n_names] = (prof_agg){.name = name, .cat = cat};
  return &ph->names[ph->n_names++];
}

static void gather(const dsi_prof *p, prof_phase ph[2]) {
  memset(ph, 0, 2 * sizeof *ph);
  for (int i = 0; i < p->n_steps; i++) {
    const prof_step *s = &p->steps[i];
    prof_phase *h = &ph[s->prefill ? 0 : 1];
    h->n_steps++;
    h->two_batch_steps += s->two_batch;
    h->tokens += s->n_tokens;
    h->wall += s->t1 - s->t0;
    for (int o = s->op0; o < s->op1; o++) {
      const prof_op *op = &p->ops[o];
      prof_agg *a = agg_of(h, op->name, op->cat);
      h->cat[op->cat].flops += op->flops;
      h->cat[op->cat].bytes += op->wbytes + op->abytes;
      h->cat[op->cat].wbytes += op->wbytes;
      h->cat[op->cat].calls++;
      if (a) {
        a->flops += op->flops;
        a->bytes += op->wbytes + op->abytes;
        a->calls++;
      }
    }
    for (long j = s->span0; j < s->span1; j++) {
      const prof_span *sp = &p->spans[j];
      if (sp->ith == p->nth) { /* the communication thread: its time, and the caller's work beside it */
        h->cat[DSI_PROF_COMM].time += sp->t1 - sp->t0;
        for (long q = s->span0; q < s->span1; q++) {
          const prof_span *w = &p->spans[q];
          if (w->ith != 0) continue;
          double a = DSI_MAX(w->t0, sp->t0), b = DSI_MIN(w->t1, sp->t1);
          if (b > a) h->comm_overlap += b - a;
        }
        continue;
      }
      if (sp->ith != 0) continue;
      double t = sp->t1 - sp->t0;
      const prof_op *op = sp->op >= 0 ? &p->ops[sp->op] : NULL;
      int cat = op ? op->cat : DSI_PROF_OTHER;
      h->ops += t;
      h->cat[cat].time += t;
      prof_agg *a = agg_of(h, op ? op->name : "(unnamed)", cat);
      if (a) a->time += t;
    }
  }
}

static int by_time_desc(const void *a, const void *b) {
  double x = ((const prof_agg *)a)->time, y = ((const prof_agg *)b)->time;
  return (x < y) - (x > y);
}

/* one row: time, share of the phase's wall, rates and their fractions of the peaks */
static void rate_row(const dsi_prof *p, FILE *out, const char *label, const prof_agg *a, double wall) {
  fprintf(out, "  %-16s %9.2f %6.1f%%", label, a->time * 1e3, wall > 0 ? 100 * a->time / wall : 0.0);
  if (a->time <= 0 || (a->flops == 0 && a->bytes == 0)) {
    fprintf(out, "\n");
    return;
  }
  double gf = a->flops / a->time * 1e-9, gb = a->bytes / a->time * 1e-9;
  fprintf(out, " %9.1f", gf);
  if (p->have_peaks && p->mpeak > 0) fprintf(out, " %5.1f%%", 100 * gf / p->mpeak);
  else fprintf(out, " %6s", "-");
  fprintf(out, " %8.2f", gb);
  if (p->have_peaks && p->peaks.read_gbs > 0) fprintf(out, " %5.1f%%", 100 * gb / p->peaks.read_gbs);
  else fprintf(out, " %6s", "-");
  fprintf(out, "\n");
}

void dsi_prof_summary(const dsi_prof *p, FILE *out) {
  prof_phase ph[2];
  gather(p, ph);
  fprintf(out, "profile: %d threads", p->nth);
  if (p->have_peaks)
    fprintf(out, "; peaks: read %.1f GB/s, %s %.0f GFLOP/s (%%peak)", p->peaks.read_gbs, p->mpeak_name, p->mpeak);
  fprintf(out, "\n");
  if (atomic_load((atomic_int *)&p->full))
    fprintf(out, "note: the profile's buffers filled up; later steps were not recorded\n");
  static const char *const phase_names[2] = {"prefill", "decode"};
  for (int k = 0; k < 2; k++) {
    prof_phase *h = &ph[k];
    if (!h->n_steps) continue;
    fprintf(out, "\n%s: %d step%s, %ld tokens, %.2f ms wall (%.1f tokens/s)\n", phase_names[k], h->n_steps,
            h->n_steps == 1 ? "" : "s", h->tokens, h->wall * 1e3, h->wall > 0 ? h->tokens / h->wall : 0.0);
    fprintf(out, "  %-16s %9s %7s %9s %6s %8s %6s\n", "category", "ms", "%wall", "GFLOP/s", "%peak", "GB/s", "%bw");
    prof_agg all = {.time = h->wall};
    for (int c = 0; c < DSI_PROF_N_CAT; c++) {
      if (h->cat[c].time > 0) rate_row(p, out, k_cat_names[c], &h->cat[c], h->wall);
      all.flops += h->cat[c].flops;
      all.bytes += h->cat[c].bytes;
    }
    prof_agg disp = {.time = h->wall - h->ops};
    rate_row(p, out, "dispatch", &disp, h->wall);
    rate_row(p, out, "whole step", &all, h->wall); /* every op's work over the wall time */
    qsort(h->names, h->n_names, sizeof *h->names, by_time_desc);
    fprintf(out, "  top ops:\n");
    for (int i = 0; i < DSI_MIN(h->n_names, 8); i++) {
      char label[64];
      snprintf(label, sizeof label, "%s x%ld", h->names[i].name, h->names[i].calls);
      rate_row(p, out, label, &h->names[i], h->wall);
    }
  }
  if (!ph[0].n_steps && !ph[1].n_steps) fprintf(out, "no steps recorded\n");
}

void dsi_prof_phase_stats(const dsi_prof *p, int prefill, dsi_phase_stats *out) {
  prof_phase ph[2];
  gather(p, ph);
  const prof_phase *h = &ph[prefill ? 0 : 1];
  memset(out, 0, sizeof *out);
  out->steps = h->n_steps;
  out->two_batch_steps = h->two_batch_steps;
  out->tokens = h->tokens;
  out->wall_s = h->wall;
  out->ops_s = h->ops;
  out->dispatch_share = h->wall > 0 ? (h->wall - h->ops) / h->wall : 0;
  out->comm_s = h->cat[DSI_PROF_COMM].time;
  out->comm_overlapped_s = h->comm_overlap;
  out->attention_s = h->cat[DSI_PROF_ATTN].time;
  out->moe_s = h->cat[DSI_PROF_MOE].time;
  out->dense_s = h->cat[DSI_PROF_DENSE].time;
  out->lm_head_s = h->cat[DSI_PROF_LM_HEAD].time;
  out->other_s = h->cat[DSI_PROF_OTHER].time;
  out->comm_bytes = h->cat[DSI_PROF_COMM].bytes;
  for (int c = 0; c < DSI_PROF_N_CAT; c++) {
    out->flops += h->cat[c].flops;
    out->weight_bytes += h->cat[c].wbytes;
    out->act_bytes += h->cat[c].bytes - h->cat[c].wbytes;
  }
}
