/* tests: the graph planner. Every plan the forward captures — each shape
 * bucket, both weight layouts, both activation precisions, one and two
 * streams, 2..4 threads — passes the checker (no two live tensors share
 * bytes; every pair of ops touching the same bytes is ordered by waits),
 * and its arena is smaller than the intermediates laid end to end. The
 * checker itself catches a missing wait and an overlapping placement. The
 * plan cache is bounded and buckets are powers of two. A rank's plans
 * under every layout across ranks, with and without overlap, pass too. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/pool.h"
#include "check.h"
#include "graph/forward.h"
#include "graph/graph.h"

static void check_model_plans(const char *dir, int op_opt_off) {
  dsi_model *m;
  dsi_err err = {0};
  dsi_load_opts lo = {.op_opt_off = op_opt_off};
  if (!CHECK(dsi_model_open(&m, dir, &lo, &err) == 0)) return;
  for (int nth = 2; nth <= 4; nth++) {
    dsi_pool *pool = dsi_pool_new(nth);
    for (int bf16 = 0; bf16 <= 1; bf16++) {
      dsi_fwd *f;
      dsi_fwd_opts fo = {.max_tokens = 64, .max_context = 128, .precision = bf16 ? DSI_ACT_BF16 : DSI_ACT_F32,
                         .kv_block_size = 64};
      if (!CHECK(dsi_fwd_new(&f, m, pool, &fo, &err) == 0)) break;
      for (int streams = 1; streams <= 3; streams++) { /* 3: two streams, teams of one worker */
        dsi_fwd_exec_opts x = {.exec = DSI_EXEC_GRAPH, .streams = streams > 1 ? 2 : 1, .fuse = 1,
                               .min_team = streams == 3 ? 1 : 0};
        dsi_fwd_set_exec(f, &x);
        for (int T = 1; T <= 64; T *= 2) {
          char why[256] = "";
          int rc = dsi_fwd_check_plan(f, T, why, sizeof why, &err);
          CHECKF(rc == 0, "%s %s, %d threads, bf16 %d, streams %d, T %d: %s", dir, op_opt_off ? "row-major" : "packed",
                 nth, bf16, streams, T, why);
          dsi_fwd_stats s;
          CHECK(dsi_fwd_plan_stats(f, T, &s, &err) == 0);
          CHECKF(s.arena_bytes < s.sum_bytes && s.arena_bytes > 0, "T %d: arena %zu, intermediates %zu", T,
                 s.arena_bytes, s.sum_bytes);
          /* fusion removes ops only where activations are bf16 (norm + quantize) or always (add + norm) */
          CHECK(s.n_fused > 0);
          /* forks split only into teams of at least min_team workers */
          int want_split = streams == 3 || (streams == 2 && nth >= 4);
          CHECKF((s.n_split > 0) == want_split && s.n_split <= s.n_regions, "%d threads, streams %d: %d of %d forks split",
                 nth, streams, s.n_split, s.n_regions);
          if (nth == 2 && T == 1 && !op_opt_off)
            printf("%s bf16 %d streams %d: %d ops, %d fused away, %d waits, arena %.1f KB vs %.1f KB\n", dir, bf16,
                   streams, s.n_ops, s.n_fused, s.n_waits, s.arena_bytes / 1e3, s.sum_bytes / 1e3);
        }
      }
      dsi_fwd_free(f);
    }
    dsi_pool_free(pool);
  }
  dsi_model_free(m);
}

/* The plans of a rank's share (never run here: no other ranks): experts
 * split, heads split both ways, experts whole, DP attention; collectives on a worker or
 * on the communication thread (overlap), one or two streams. The checker
 * must hold with the communication thread as thread n. */
static void check_dist_plans(const char *dir) {
  static const struct { int tp, ep, tp_to_ep, dp; } lays[] = {
    {1, 2, 0, 0}, {2, 2, DSI_TP_TO_EP_RS_AG, 0}, {2, 2, DSI_TP_TO_EP_ALLREDUCE, 0}, {2, 1, DSI_TP_TO_EP_RS_AG, 0},
    {1, 2, 0, 1}, {1, 1, 0, 1}};
  for (size_t l = 0; l < DSI_ARRAY_LEN(lays); l++) {
    dsi_model *m;
    dsi_err err = {0};
    dsi_load_opts lo = {.tp_size = lays[l].tp, .ep_size = lays[l].ep, .tp_rank = lays[l].tp > 1, .ep_rank = 0};
    if (!CHECK(dsi_model_open(&m, dir, &lo, &err) == 0)) return;
    dsi_pool *pool = dsi_pool_new(2);
    dsi_fwd *f;
    dsi_fwd_opts fo = {.max_tokens = 64, .max_context = 128, .precision = DSI_ACT_BF16, .kv_block_size = 64,
                       .coll = {.size = 2, .rank = lays[l].tp > 1}, .tp_to_ep = lays[l].tp_to_ep,
                       .attn_dp = lays[l].dp};
    if (CHECK(dsi_fwd_new(&f, m, pool, &fo, &err) == 0)) {
      for (int v = 0; v < 4; v++) {
        dsi_fwd_exec_opts x = {.exec = DSI_EXEC_GRAPH, .streams = v & 1 ? 2 : 1, .fuse = 1, .min_team = 1,
                               .overlap = v >= 2};
        dsi_fwd_set_exec(f, &x);
        for (int T = 1; T <= 64; T *= 4) {
          char why[256] = "";
          int rc = dsi_fwd_check_plan(f, T, why, sizeof why, &err);
          CHECKF(rc == 0, "%s tp %d ep %d tp_to_ep %d dp %d, streams %d, overlap %d, T %d: %s", dir, lays[l].tp,
                 lays[l].ep, lays[l].tp_to_ep, lays[l].dp, x.streams, x.overlap, T, why);
        }
      }
      dsi_fwd_free(f);
    }
    dsi_pool_free(pool);
    dsi_model_free(m);
  }
}

/* Two micro-batches (overlap on, steps of two_batch_min tokens or more):
 * each layer's ops of micro-batch 2 run up to its collective while
 * micro-batch 1's is in flight, and the reverse; the plan is sound. */
static void check_two_batch(const char *dir) {
  dsi_model *m;
  dsi_err err = {0};
  dsi_load_opts lo = {.tp_size = 2, .ep_size = 2, .tp_rank = 1, .ep_rank = 1};
  if (!CHECK(dsi_model_open(&m, dir, &lo, &err) == 0)) return;
  dsi_pool *pool = dsi_pool_new(2);
  dsi_fwd *f;
  dsi_fwd_opts fo = {.max_tokens = 64, .max_context = 128, .precision = DSI_ACT_BF16, .kv_block_size = 64,
                     .coll = {.size = 2, .rank = 1}};
  if (CHECK(dsi_fwd_new(&f, m, pool, &fo, &err) == 0)) {
    dsi_fwd_exec_opts x = {.exec = DSI_EXEC_GRAPH, .streams = 2, .fuse = 1, .min_team = 1, .overlap = 1,
                           .two_batch_min = 8};
    dsi_fwd_set_exec(f, &x);
    dsi_fwd_stats one, two;
    CHECK(dsi_fwd_plan_stats(f, 4, &one, &err) == 0 && dsi_fwd_plan_stats(f, 16, &two, &err) == 0);
    CHECKF(two.n_ops + two.n_fused > 2 * (one.n_ops + one.n_fused) - 8, "16 tokens: %d ops, 4 tokens: %d",
           two.n_ops + two.n_fused, one.n_ops + one.n_fused);
    for (int T = 8; T <= 64; T *= 2) {
      char why[256] = "";
      CHECKF(dsi_fwd_check_plan(f, T, why, sizeof why, &err) == 0, "%s two micro-batches, T %d: %s", dir, T, why);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    dsi_fwd_dump_plan(f, 16, out);
    fclose(out);
    /* layer 1 (MoE) in plan order: micro-batch 2's reduce-scatter comes
     * after micro-batch 1's and before micro-batch 1's expert dispatch */
    int at = 0, rs[3] = {0}, d[3] = {0}; /* each micro-batch's first reduce-scatter and dispatch in layer 1 */
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
      at++;
      int mb = strstr(line, " mb 1 ") ? 1 : strstr(line, " mb 2 ") ? 2 : 0;
      if (!strstr(line, " L1 ") || !mb) continue;
      if (strstr(line, " tp_reduce_scatter ") && !rs[mb]) rs[mb] = at;
      if (strstr(line, " moe_dispatch ") && !d[mb]) d[mb] = at;
    }
    CHECKF(rs[1] && rs[1] < rs[2] && rs[2] < d[1] && d[1] < d[2],
           "layer 1's collectives are not interleaved by micro-batch: reduce-scatter at %d, %d, dispatch at %d, %d",
           rs[1], rs[2], d[1], d[2]);
    free(text);
    dsi_fwd_free(f);
  }
  dsi_pool_free(pool);
  dsi_model_free(m);
}

/* buckets: powers of two, capped at max_tokens; at most 8 plans kept */
static void check_buckets(void) {
  dsi_model *m;
  dsi_err err = {0};
  if (!CHECK(dsi_model_open(&m, "golden/tiny-bf16/model", NULL, &err) == 0)) return;
  dsi_pool *pool = dsi_pool_new(2);
  dsi_fwd *f;
  dsi_fwd_opts fo = {.max_tokens = 600, .max_context = 64, .kv_block_size = 64};
  if (CHECK(dsi_fwd_new(&f, m, pool, &fo, &err) == 0)) {
    CHECK(dsi_fwd_bucket(f, 1) == 1 && dsi_fwd_bucket(f, 5) == 8 && dsi_fwd_bucket(f, 64) == 64);
    CHECK(dsi_fwd_bucket(f, 513) == 600 && dsi_fwd_bucket(f, 600) == 600);
    dsi_fwd_stats s;
    int sizes[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600}; /* 11 buckets */
    for (size_t i = 0; i < DSI_ARRAY_LEN(sizes); i++) CHECK(dsi_fwd_plan_stats(f, sizes[i], &s, &err) == 0);
    CHECK(s.captures == 11);
    CHECK(dsi_fwd_plan_stats(f, 600, &s, &err) == 0 && s.captures == 11); /* still cached */
    CHECK(dsi_fwd_plan_stats(f, 3, &s, &err) == 0 && s.captures == 12);   /* evicted, captured again */
    CHECK(s.bucket == 4);
    dsi_fwd_free(f);
  }
  dsi_pool_free(pool);
  dsi_model_free(m);
}

/* the plan's tensors carry a dtype and a shape, and every op's workspace
 * is a tensor of the plan (so the checker and the poisoned arena cover it) */
static void check_shapes(void) {
  dsi_model *m;
  dsi_err err = {0};
  if (!CHECK(dsi_model_open(&m, "golden/tiny-bf16/model", NULL, &err) == 0)) return;
  dsi_pool *pool = dsi_pool_new(2);
  dsi_fwd *f;
  dsi_fwd_opts fo = {.max_tokens = 64, .max_context = 128, .precision = DSI_ACT_F32, .kv_block_size = 64};
  if (CHECK(dsi_fwd_new(&f, m, pool, &fo, &err) == 0)) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    dsi_fwd_dump_plan(f, 16, out);
    fclose(out);
    /* tiny: hidden 128, 4 heads of 32 + 16 (the golden tests' shape) */
    CHECKF(strstr(text, " x ") && strstr(text, "f32[16,128]"), "the residual stream is not f32[16,128]");
    const char *q = strstr(text, " q_b_proj ");
    CHECKF(q && strstr(q, "f32[16,") && strchr(strchr(q, '[') + 1, ',') != strrchr(strchr(q, '['), ','),
           "q_b_proj is not [T, H, qk_head_dim]");
    CHECKF(strstr(text, " topk_ids ") && strstr(text, "i32[16,"), "the routing ids are not i32");
    int n_ws = 0;
    for (const char *p = text; (p = strstr(p, " ws ")); p++) n_ws += strstr(p, "u8[") != NULL;
    CHECKF(n_ws > 10, "only %d workspaces planned", n_ws);
    printf("plan of 16 tokens: %d op workspaces in the arena\n", n_ws);
    free(text);
    dsi_fwd_free(f);
  }
  dsi_pool_free(pool);
  dsi_model_free(m);
}

/* the checker is not a rubber stamp */
static void check_checker(void) {
  dsi_graph *g = dsi_graph_new(4);
  int64_t n = 256; /* 1 KiB of f32 */
  int a = dsi_graph_tensor(g, "a", DSI_T_ARENA, DSI_DTYPE_F32, 1, &n), b = dsi_graph_tensor(g, "b", DSI_T_ARENA, DSI_DTYPE_F32, 1, &n);
  int c = dsi_graph_tensor(g, "c", DSI_T_ARENA, DSI_DTYPE_F32, 1, &n);
  dsi_op *op = dsi_graph_op(g, DSI_OP_ADD, "make_a", 0);
  op->out[0] = a;
  op = dsi_graph_op(g, DSI_OP_ADD, "a_to_b", 0);
  op->in[0] = a;
  op->out[0] = b;
  op = dsi_graph_op(g, DSI_OP_ADD, "b_to_c", 0);
  op->in[0] = b;
  op->out[0] = c;
  dsi_plan_opts o = {.streams = 1, .n_threads = 2};
  dsi_graph_plan(g, &o);
  char why[256] = "";
  CHECKF(dsi_graph_check(g, 2, why, sizeof why) == 0, "%s", why);
  CHECK(g->ops[1].n_deps == 1 && g->ops[1].deps[0] == 0);
  CHECK(g->ts[a].off == g->ts[c].off); /* a is dead when c is born: same bytes */
  CHECK(g->arena_bytes == 2048 && g->sum_bytes == 3072);
  g->ops[2].n_deps = 0; /* b_to_c no longer waits for a_to_b */
  CHECK(dsi_graph_check(g, 2, why, sizeof why) < 0 && strstr(why, "b_to_c"));
  g->ops[2].n_deps = 1;
  g->ts[b].off = g->ts[a].off; /* a and b are alive together */
  CHECK(dsi_graph_check(g, 2, why, sizeof why) < 0 && strstr(why, "share bytes"));
  dsi_graph_free(g);
}

int main(void) {
  check_checker();
  check_buckets();
  check_shapes();
  check_dist_plans("golden/tiny-bf16/model");
  check_dist_plans("golden/tiny-fp8/model");
  check_two_batch("golden/tiny-bf16/model");
  check_two_batch("golden/tiny-fp8/model");
  const char *models[] = {"golden/tiny-bf16/model", "golden/tiny-fp8/model", "golden/tiny-noqlora-bf16/model"};
  for (size_t i = 0; i < DSI_ARRAY_LEN(models); i++) {
    check_model_plans(models[i], 0);
    check_model_plans(models[i], 1);
  }
  return check_done();
}
