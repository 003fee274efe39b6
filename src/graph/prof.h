/* graph: the profiler — records every op of the forward (name, layer,
 * category, FLOPs, bytes), each thread's timed share of each dispatch and
 * each engine step into bounded buffers; writes a Chrome trace and a summary. */
#ifndef DSI_PROF_H
#define DSI_PROF_H

#include <stdio.h>

#include "base/base.h"
#include "dsinfer.h"

typedef enum {
  DSI_PROF_ATTN,
  DSI_PROF_MOE,
  DSI_PROF_DENSE,
  DSI_PROF_LM_HEAD,
  DSI_PROF_OTHER,
  DSI_PROF_COMM, /* collectives between ranks */
  DSI_PROF_N_CAT
} dsi_prof_cat;

typedef struct dsi_prof dsi_prof;

/* Room for max_spans timed thread shares (0 = 1M) of a pool of n_threads;
 * ops and steps get proportional room. The executors record into it.
 * NULL when out of memory. */
dsi_prof *dsi_prof_new(int n_threads, long max_spans);
void dsi_prof_free(dsi_prof *p);
void dsi_prof_reset(dsi_prof *p);  /* forget everything recorded (between steps) */

/* An op of the current step (team: DSI_TEAM_* of the graph, its stream;
 * out: its output tensor's dtype and planned shape, copied, or NULL);
 * returns its id for dsi_prof_span, -1 when the buffers are full. */
int dsi_prof_op(dsi_prof *p, const char *name, dsi_prof_cat cat, int layer, int team, const char *out);
/* op's FLOPs and bytes, once known (from any one thread) */
void dsi_prof_op_cost(dsi_prof *p, int op, double flops, double weight_bytes, double act_bytes);
/* thread ith worked on op [t0, t1) (dsi_now's clock); callable from any thread */
void dsi_prof_span(dsi_prof *p, int op, int ith, double t0, double t1);
/* an engine step: begin before it, end after it (prefill: some sequence was
 * fed more than one token); a failed step is dropped (ok = 0) */
void dsi_prof_step_begin(dsi_prof *p);
void dsi_prof_step_end(dsi_prof *p, int prefill, int n_tokens, int ok);
/* the step being recorded runs as two micro-batches */
void dsi_prof_step_two_batch(dsi_prof *p);

/* the machine's peaks, and the matrix peak the GFLOP/s are set beside
 * (GFLOP/s; name: its instruction, dsi_matrix_peak) */
void dsi_prof_set_peaks(dsi_prof *p, const dsi_peaks *pk, double matrix_peak, const char *name);
int dsi_prof_write_trace(const dsi_prof *p, const char *path, dsi_err *err);
void dsi_prof_summary(const dsi_prof *p, FILE *out);
void dsi_prof_phase_stats(const dsi_prof *p, int prefill, dsi_phase_stats *out);

#endif
