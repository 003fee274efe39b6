/* engine: the engine's insides, for the scheduler beside it (sched.c) —
 * the KV pool with its prefix cache and the sequences' block tables. */
#ifndef DSI_ENGINE_IMPL_H
#define DSI_ENGINE_IMPL_H

#include "base/pool.h"
#include "dist/dist.h"
#include "dsinfer.h"
#include "graph/forward.h"
#include "kv/kv.h"

struct dsi_engine {
  dsi_model *m;
  dsi_pool *pool;
  dsi_fwd *fwd;
  struct dsi_prof *prof; /* NULL unless opts.profile */
  int step_prefill;   /* the last window fed some sequence more than one token */
  dsi_kv kv;
  dsi_kv_seq *seqs;   /* by id */
  uint8_t *live;
  int n_seqs_cap;
  int max_tokens, max_context;
  /* per-step scratch, [max_tokens] each */
  int32_t *pos, *slot, *seq_idx, *logit_rows, *seq_count;
  const int32_t **tables;
  dsi_fwd_exec_opts exec;
  int32_t fail_token;  /* tests: a batch holding it fails (-1 none) */
  dsi_dist *dist;      /* NULL: this process alone; else rank 0 sends each step to the others */
  int32_t *msg;        /* a step as sent between ranks */
  int32_t *seq_mark;   /* [n_seqs_cap] scratch of send_step */
  size_t msg_cap;
  int dp_groups;       /* DP attention: sequence s's cache rows live on rank s % dp_groups (else 1) */
  dsi_err err;
};

/* free sequence seq; toks: the tokens its cache holds, to keep its blocks
 * in the prefix cache (NULL: dsi_seq_free) */
void dsi_engine_seq_release(dsi_engine *e, int seq, const int32_t *toks);

#endif
