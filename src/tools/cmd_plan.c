/* tools: `dsinfer plan` — a cost model of the model across ranks. It
 * measures this engine on a checkpoint here (one process: prefill and
 * decode, the profiler's time per category of op), turns that into rates
 * (bytes per second where decode streams weights, FLOP/s where prefill
 * computes), and predicts prefill and decode tokens/s, per-node memory
 * and the share spent communicating for a model (the checkpoint's, or
 * DeepSeek-V3 671B's) on K nodes, for each layout of heads and experts;
 * it picks the one with the fastest decode that fits. The work each rank
 * does under each layout and the bytes it sends are the engine's own
 * (forward.c's layouts, the collectives' counts); see the README for the
 * model's terms and its validation against measured runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/config.h"
#include "dsinfer.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/internal.h"

/* ---- what ranks send: bytes per token of a step (f32 activations) ---- */
dsi_comm_model dsi_comm_per_token(const dsi_config *c, int tp, int ep, int tp_to_ep, int attn_dp, int N) {
  dsi_comm_model m = {0};
  if (N < 2) return m;
  double r = (double)(N - 1) / N, row = 4.0 * c->hidden_size;
  int L = c->num_hidden_layers, Lm = 0, E = c->n_routed_experts, K = c->num_experts_per_tok;
  for (int l = 0; l < L; l++) Lm += dsi_config_is_moe_layer(c, l);
  if (attn_dp) tp = N, tp_to_ep = -1; /* tokens stay on their rank: the dispatch alone */
  if (tp < 2) { /* experts split alone: each MoE layer's all-reduce */
    m.reduce = Lm * 2 * r * row;
    m.collectives = Lm;
    return m;
  }
  if (tp_to_ep >= 0) {
    m.reduce = L * (tp_to_ep == DSI_TP_TO_EP_ALLREDUCE ? 2 : 1) * r * row;
    m.gather = L * r * row;
    m.collectives = 2 * L;
  }
  if (ep > 1) {
    double none = 1; /* a given other rank holds none of the token's K experts */
    for (int i = 0; i < K; i++) none *= (double)(E - E / N - i) / (E - i);
    m.a2a = Lm * r * (1 - none) * (4.0 * (c->hidden_size + 2 * K) + row);
    m.collectives += 3 * Lm;
  }
  return m;
}

/* ---- the work of a step, by category, on the busiest rank ---- */
typedef struct {
  double attn, moe, dense, lm, other;
} cats;

typedef struct {
  const dsi_config *c;
  double wb;          /* bytes a weight */
  double lm_wb;       /* bytes a weight of lm_head (BF16 in FP8 checkpoints, as V3 ships it) */
  double attn_rep;    /* params: q_a, kv_a (replicated under tensor parallelism) */
  double attn_split;  /* params: q_b (q_proj), kv_b, o_proj (split by heads) */
  double expert;      /* params of one routed expert */
  double shared, dense, lm; /* params: every layer's shared experts, dense MLPs; lm_head */
  double router;      /* params of the routers */
  int L, Lm;
} shape;

static double weight_bytes_of(const char *dtype) {
  if (!strcmp(dtype, "fp8") || !strcmp(dtype, "int8")) return 1.0 + 4.0 / (128 * 128);
  if (!strcmp(dtype, "f32")) return 4;
  return 2;
}

static shape shape_of(const dsi_config *c, const char *dtype) {
  shape s = {.c = c, .wb = weight_bytes_of(dtype), .L = c->num_hidden_layers};
  s.lm_wb = strcmp(dtype, "fp8") ? s.wb : 2;
  double D = c->hidden_size, H = c->num_attention_heads, qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
  double I = c->moe_intermediate_size, kv = (double)c->kv_lora_rank + c->qk_rope_head_dim;
  for (int l = 0; l < s.L; l++) {
    int moe = dsi_config_is_moe_layer(c, l);
    s.Lm += moe;
    if (c->q_lora_rank > 0) {
      s.attn_rep += D * c->q_lora_rank;
      s.attn_split += c->q_lora_rank * H * qk;
    } else {
      s.attn_split += D * H * qk;
    }
    s.attn_rep += D * kv;
    s.attn_split += H * (c->qk_nope_head_dim + c->v_head_dim) * c->kv_lora_rank + H * c->v_head_dim * D;
    if (moe) {
      s.shared += 3 * D * I * c->n_shared_experts;
      s.router += D * c->n_routed_experts;
    } else {
      s.dense += 3 * D * c->intermediate_size;
    }
  }
  s.expert = 3 * D * I;
  s.lm = (double)c->vocab_size * D;
  return s;
}

/* The most distinct experts one rank of N runs in a decode step of B
 * tokens, each routed to K of E at random (the mean of the maximum over
 * ranks, from fixed random draws). */
static double busiest_experts(int E, int K, int B, int N) {
  uint64_t x = 88172645463325252ull;
  double sum = 0;
  const int draws = 400;
  uint8_t *hit = calloc(E, 1);
  int *per = calloc(N, sizeof(int));
  if (!hit || !per) {
    free(hit);
    free(per);
    return (double)K * B / N + 1;
  }
  for (int d = 0; d < draws; d++) {
    memset(hit, 0, E);
    memset(per, 0, N * sizeof(int));
    for (int b = 0; b < B; b++)
      for (int k = 0; k < K;) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int e = (int)(x % (uint64_t)E);
        if (hit[e] & 2) continue; /* this token's experts are distinct */
        hit[e] |= 2;
        k++;
        if (!(hit[e] & 1)) per[(int)((int64_t)e * N / E)]++;
        hit[e] |= 1;
      }
    int most = 0;
    for (int r = 0; r < N; r++) most = per[r] > most ? per[r] : most;
    sum += most;
    for (int e = 0; e < E; e++) hit[e] &= 1;
  }
  free(hit);
  free(per);
  return sum / draws;
}

/* A layout: heads over tp ranks (1: not split), experts over ep, or DP
 * attention (each rank its own sequences, whole attention) */
typedef struct {
  int tp, ep, dp, N;
  int vs; /* lm_head split by vocabulary over the N ranks (not under DP attention) */
} lay;

/* the distinct experts B tokens of K each reach, of E (at random) */
static double experts_hit(int E, int K, int B) { return E * (1 - pow(1 - (double)K / E, B)); }

/* decode: weight (and cache) bytes a step of B tokens at context ctx makes
 * the busiest rank read (*mx) and all ranks together (*sum) */
static void decode_bytes(const shape *s, lay l, int B, double ctx, cats *mx, cats *sum) {
  const dsi_config *c = s->c;
  int N = l.N, E = c->n_routed_experts, K = c->num_experts_per_tok;
  double row = (double)c->kv_lora_rank + c->qk_rope_head_dim, cache = (double)B * ctx * row * 2 * s->L;
  /* ranks holding any of the step's tokens: they read all of the shared
   * and dense weights (and, under DP attention, the attention's) */
  double busy = l.tp > 1 || l.dp ? DSI_MIN(B, N) : N;
  double B_dp = l.dp ? ceil((double)B / N) : B; /* the busiest rank's sequences */
  double attn = (s->attn_rep + s->attn_split / l.tp) * s->wb;
  mx->attn = attn + (l.dp ? cache * B_dp / B : cache);
  sum->attn = (l.dp ? busy : N) * attn + (l.dp ? cache : N * cache);
  double most = busiest_experts(E, K, B, l.ep > 1 ? N : 1), per = s->expert * s->wb * s->Lm;
  double shared = s->shared * s->wb + s->router * 4;
  mx->moe = most * per + shared;
  sum->moe = (l.ep > 1 ? experts_hit(E, K, B) : busy * experts_hit(E, K, (int)ceil((double)B / busy))) * per + busy * shared;
  mx->dense = s->dense * s->wb;
  sum->dense = busy * mx->dense;
  mx->lm = s->lm * s->lm_wb; /* rank 0's, or under DP attention each rank's with sequences */
  sum->lm = (l.dp ? busy : 1) * mx->lm;
  if (l.vs) mx->lm /= N; /* each rank its 1/N of the vocabulary */
  mx->other = l.dp ? B_dp : B;
  sum->other = l.dp ? B : N * (double)B;
}

/* prefill of one prompt of P tokens: FLOPs (lm_head: the last position's
 * weight bytes) of the busiest rank (*mx) and of all ranks (*sum) */
static void prefill_flops(const shape *s, lay l, int P, cats *mx, cats *sum) {
  const dsi_config *c = s->c;
  int N = l.N;
  double H = c->num_attention_heads, T = P, split = l.tp > 1 ? N : 1, K = c->num_experts_per_tok;
  double core = 2.0 * T * (T / 2) * H * (2.0 * c->kv_lora_rank + c->qk_rope_head_dim) * s->L;
  double rep = 2 * T * s->attn_rep, spl = 2 * T * s->attn_split;
  /* a prompt is one sequence: under DP attention all of it on one rank */
  mx->attn = rep + (spl + core) / l.tp;
  sum->attn = l.dp ? mx->attn : (l.tp > 1 ? N * rep + spl + core : N * (rep + spl + core));
  double routed = 2 * T * K * s->expert * s->Lm, shared = 2 * T * (s->shared + s->router);
  mx->moe = routed / (l.ep > 1 ? N : split) + shared / split;
  sum->moe = routed + (l.tp > 1 || l.dp ? 1 : N) * shared;
  mx->dense = 2 * T / split * s->dense;
  sum->dense = (l.tp > 1 || l.dp ? 1 : N) * 2 * T * s->dense;
  mx->lm = sum->lm = s->lm * s->lm_wb;
  if (l.vs) mx->lm /= N;
  mx->other = l.tp > 1 ? T * (1 + 1.0 / N) / 2 : T; /* norms and adds: the FFN's half on this rank's tokens */
  sum->other = l.tp > 1 ? T * (N + 1) / 2.0 : l.dp ? T : N * T;
}

/* ---- calibration: this engine on a checkpoint here ---- */
typedef struct {
  cats t_dec, t_pre; /* seconds a step by category */
  double disp_dec, disp_pre;
  double pre_tps, dec_tps;
  cats rate_dec, rate_pre; /* work per second */
  int threads, P, G;
  double read_gbs;
  char dtype[16], isa[16];
} calib;

static cats cats_of(const dsi_phase_stats *st) {
  double n = st->steps ? st->steps : 1;
  return (cats){st->attention_s / n, st->moe_s / n, st->dense_s / n, st->lm_head_s / n, st->other_s / n};
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static int calibrate(const char *dir, int threads, int P, int G, const dsi_config *c, const dsi_peaks *pk, calib *k) {
  dsi_model *m;
  dsi_engine *e;
  dsi_load_opts lo = {.n_threads = threads};
  dsi_engine_opts eo = {.n_threads = threads, .max_tokens = 512, .max_context = P + G + 1,
                        .kv_blocks = (P + G + 64) / 64 + 1, .profile = 1};
  dsi_cli_env_opts(&lo, &eo);
  if (dsi_cli_open("plan", dir, &lo, &eo, NULL, &m, &e)) return 1;
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  dsi_bench_result r;
  dsi_err berr = {0};
  int rc = dsi_bench_run(e, info.vocab_size, DSI_MIN(P, 16), 2, 1, 99, &r, &berr); /* warm-up */
  dsi_engine_profile_reset(e);
  for (int i = 0; i < 2 && !rc; i++) rc = dsi_bench_run(e, info.vocab_size, P, G, 1, (uint64_t)i + 1, &r, &berr);
  dsi_phase_stats pre, dec;
  if (!rc && !dsi_engine_profile_stats(e, 1, &pre) && !dsi_engine_profile_stats(e, 0, &dec) && pre.steps && dec.steps) {
    k->t_pre = cats_of(&pre);
    k->t_dec = cats_of(&dec);
    k->disp_pre = (pre.wall_s - pre.ops_s) / pre.steps;
    k->disp_dec = (dec.wall_s - dec.ops_s) / dec.steps;
    k->pre_tps = pre.tokens / pre.wall_s;
    k->dec_tps = dec.tokens / dec.wall_s;
  } else {
    fprintf(stderr, "dsinfer plan: the calibration run failed: %s\n", rc ? berr.msg : "no steps recorded");
    rc = 1;
  }
  k->threads = threads > 0 ? threads : dsi_default_threads();
  k->P = P;
  k->G = G;
  k->read_gbs = pk->read_gbs;
  snprintf(k->dtype, sizeof k->dtype, "%s", info.weight_dtype);
  snprintf(k->isa, sizeof k->isa, "%s", dsi_engine_isa(e));
  dsi_engine_free(e);
  dsi_model_free(m);
  if (rc) return 1;
  shape s = shape_of(c, k->dtype);
  cats wd, wp, unused;
  decode_bytes(&s, (lay){1, 1, 0, 1}, 1, P + G / 2.0, &wd, &unused);
  prefill_flops(&s, (lay){1, 1, 0, 1}, P, &wp, &unused);
  k->rate_dec = (cats){ratio(wd.attn, k->t_dec.attn), ratio(wd.moe, k->t_dec.moe), ratio(wd.dense, k->t_dec.dense),
                       ratio(wd.lm, k->t_dec.lm), ratio(wd.other, k->t_dec.other)};
  k->rate_pre = (cats){ratio(wp.attn, k->t_pre.attn), ratio(wp.moe, k->t_pre.moe), ratio(wp.dense, k->t_pre.dense),
                       ratio(wp.lm, k->t_pre.lm), ratio(wp.other, k->t_pre.other)};
  return 0;
}

/* ---- prediction ---- */
typedef struct {
  int K;              /* nodes (ranks) */
  double mem_bw, link_bw, link_lat; /* GB/s per node, GB/s, seconds */
  int colocated;      /* the K ranks share this machine */
  double share;       /* colocated: the part of the calibration's threads one rank runs */
  double share_bw;    /* colocated: the part of the machine's read bandwidth those threads
                         reach alone (measured: one core of two reads nearly all of it) */
  double occ;         /* colocated: the part of the time a rank's threads hold a core
                         (below 1 where the ranks' threads outnumber the cores) */
  int P, B, ctx;
  int vocab_split;    /* --lm-head split */
} target;

typedef struct {
  const char *name;
  int tp, ep, dp, tp_to_ep;
  double pre_tps, dec_tps, pre_comm, dec_comm; /* comm: share of the step */
  double weights, kv;                           /* bytes a node */
} layout_pred;

/* Seconds for a step's work by category at the calibrated rates. On nodes
 * of their own the busiest rank sets the pace, at rates scaled by the
 * node's bandwidth (decode, and lm_head's weights) or compute against the
 * calibration's; ranks sharing this machine also share its cores and
 * bandwidth: each runs at most its threads' part of the rates (of the
 * compute for FLOPs, of the read bandwidth they reach alone for bytes:
 * decode's weights and cache, lm_head's one row in a prefill; the per-token
 * rest is compute) for the part of the time they hold a core, and all of
 * them together at most the machine's. */
static double spend(const cats *mx, const cats *sum, const cats *rate, const target *tg, double bw, int decode) {
  double t = 0;
  const double *m = &mx->attn, *a = &sum->attn, *r = &rate->attn;
  for (int i = 0; i < 5; i++) {
    if (r[i] <= 0) continue;
    int bytes = i == 3 || (decode && i != 4);
    if (tg->colocated) t += DSI_MAX(m[i] / (r[i] * tg->occ * (bytes ? tg->share_bw : tg->share)), a[i] / r[i]);
    else t += m[i] / (r[i] * (decode || i == 3 ? bw : 1));
  }
  return t;
}

static void predict(const calib *k, const shape *s, const target *tg, layout_pred *lp) {
  const dsi_config *c = s->c;
  int N = tg->K, tp = lp->tp, ep = lp->ep;
  lay l = {tp, ep, lp->dp, N, tg->vocab_split && !lp->dp && N > 1};
  double bw = tg->mem_bw / k->read_gbs;
  dsi_comm_model cm = dsi_comm_per_token(c, tp, ep, lp->tp_to_ep, lp->dp, N);
  double lat = tg->link_lat * (N - 1) * (1 + (tp < 2 && !lp->dp)); /* ring steps; an all-reduce has twice */
  double per_tok = cm.reduce + cm.gather + cm.a2a, coll = cm.collectives + 1;
  /* lm_head split: each logit row's columns gathered to rank 0 (a prompt has one) */
  double lm_row = l.vs ? 4.0 * c->vocab_size * (N - 1) / N : 0;
  coll += l.vs;
  double disp = tg->colocated ? 1 / (tg->share * tg->occ) : 1; /* the per-step overhead on a rank's threads */
  cats mx, sum;
  decode_bytes(s, l, tg->B, tg->P + 64, &mx, &sum);
  double comm_d = N > 1 ? (per_tok + lm_row) * tg->B / (tg->link_bw * 1e9) + coll * lat : 0;
  double td = spend(&mx, &sum, &k->rate_dec, tg, bw, 1) + k->disp_dec * disp + comm_d;
  prefill_flops(s, l, tg->P, &mx, &sum);
  double comm_p = N > 1 ? (per_tok * tg->P + lm_row) / (tg->link_bw * 1e9) + coll * lat : 0;
  double tpf = spend(&mx, &sum, &k->rate_pre, tg, bw, 0) + k->disp_pre * disp + comm_p;
  lp->dec_tps = tg->B / td;
  lp->pre_tps = tg->P / tpf;
  lp->dec_comm = comm_d / td;
  lp->pre_comm = comm_p / tpf;
  /* a node's memory: its weights and the latent cache of B sequences of ctx */
  double E = c->n_routed_experts, row = (double)c->kv_lora_rank + c->qk_rope_head_dim;
  lp->weights = (s->attn_rep + s->attn_split / tp + s->expert * s->Lm * E / ep + s->shared + s->dense) * s->wb +
                s->lm / (l.vs ? N : 1) * s->lm_wb +
                (double)c->vocab_size * c->hidden_size * s->lm_wb + s->router * 4; /* the embedding as lm_head */
  lp->kv = (double)tg->B * tg->ctx * row * 2 * s->L;
}

int dsi_cmd_plan(int argc, char **argv) {
  const char *model = NULL, *preset = NULL;
  int K = 1, threads = 0, P = 256, B = 1, ctx = 4096, json = 0, colocated = 0, rank_threads = 0;
  float mem_bw = 0, link_bw = 0, lat_us = -1, node_mem = 0;
  const char *lm_head = NULL;
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "checkpoint to measure this engine on (and to plan for, without --preset)"},
    {"--preset", NULL, OPT_STR, &preset, "plan for a preset's shape instead: v3 (DeepSeek-V3 671B), v3slice, bench, small, tiny"},
    {"--nodes", NULL, OPT_INT, &K, "nodes (ranks), default 1", 1, 4096},
    {"--mem-bw", NULL, OPT_FLOAT, &mem_bw, "a node's memory read bandwidth, GB/s (default: measured here)", 0, 1e5},
    {"--link-bw", NULL, OPT_FLOAT, &link_bw, "bandwidth between nodes, GB/s (default 12.5, 100 Gb/s; --colocated: this machine's copy rate)", 0, 1e5},
    {"--link-latency", NULL, OPT_FLOAT, &lat_us, "latency of one message between nodes, us (default 5; --colocated 20)", 0, 1e6},
    {"--node-mem", NULL, OPT_FLOAT, &node_mem, "a node's memory, GB (default: this machine's)", 0, 1e6},
    {"--threads", NULL, OPT_INT, &threads, "threads the calibration runs, and a node's (default: all cores)", 0, dsi_cli_max_threads()},
    {"--colocated", NULL, OPT_FLAG, &colocated, "the ranks share this machine (mpirun on one box): its cores and bandwidth"},
    {"--rank-threads", NULL, OPT_INT, &rank_threads, "--colocated: threads each rank runs (default: --threads / K, at least 1)", 0, 4096},
    {"--prompt-len", NULL, OPT_INT, &P, "prompt tokens for prefill (default 256)", 16, 512},
    {"--batch", NULL, OPT_INT, &B, "sequences decoded together (default 1)", 1, 256},
    {"--ctx", NULL, OPT_INT, &ctx, "context a sequence's KV cache holds, for the memory (default 4096)", 1, 1 << 24},
    {"--lm-head", NULL, OPT_STR, &lm_head, "split (default, as the engine's): each rank 1/N of lm_head's vocabulary, the logits gathered (not under DP attention) | whole: on rank 0"},
    {"--json", NULL, OPT_FLAG, &json, "one JSON object"},
    {0}};
  int rc = dsi_cli_parse("plan", "--model DIR [--preset v3] --nodes K [--mem-bw GB/s] [--link-bw GB/s] [--link-latency us] [--colocated] [--json]",
                         opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!model)
    return dsi_cli_usage_error("plan", "--model is required: the plan measures this engine on a checkpoint here "
                               "(e.g. one from `dsinfer mkmodel --preset bench`)");
  if (dsi_dist_size(dsi_cli_dist) > 1) return dsi_cli_usage_error("plan", "plan runs in one process (not under mpirun)");
  dsi_config cal_cfg, cfg;
  dsi_err err = {0};
  if (dsi_config_load(&cal_cfg, model, &err)) {
    fprintf(stderr, "dsinfer plan: %s\n", err.msg);
    return 1;
  }
  cfg = cal_cfg;
  if (preset && !dsi_mkmodel_preset(&cfg, preset))
    return dsi_cli_usage_error("plan", "--preset '%s' is not one of v3, v3slice, bench, small, tiny", preset);
  if ((int64_t)P + 64 + 1 > cal_cfg.max_position_embeddings)
    return dsi_cli_usage_error("plan", "--prompt-len %d does not fit the checkpoint's context", P);
  if (lm_head && strcmp(lm_head, "whole") && strcmp(lm_head, "split"))
    return dsi_cli_usage_error("plan", "--lm-head must be whole or split, got '%s'", lm_head);
  calib k = {0};
  dsi_peaks pk;
  dsi_measure_peaks(threads, &pk);
  if (calibrate(model, threads, P, 64, &cal_cfg, &pk, &k)) return 1;
  target tg = {.K = K, .P = P, .B = B, .ctx = ctx, .colocated = colocated, .vocab_split = !lm_head || !strcmp(lm_head, "split")};
  tg.mem_bw = mem_bw > 0 ? mem_bw : k.read_gbs;
  /* K ranks on this machine: each runs rank_threads of the calibration's threads */
  if (colocated) {
    int rt = rank_threads > 0 ? rank_threads : DSI_MAX(1, k.threads / K);
    tg.share = DSI_MIN(1.0, (double)rt / k.threads);
    tg.share_bw = tg.share;
    tg.occ = DSI_MIN(1.0, (double)dsi_default_threads() / ((double)K * rt)); /* the cores */
    dsi_peaks pr;
    if (rt < k.threads && !dsi_measure_peaks(rt, &pr) && pk.read_gbs > 0)
      tg.share_bw = DSI_MIN(1.0, DSI_MAX(tg.share, pr.read_gbs / pk.read_gbs));
  }
  tg.link_bw = link_bw > 0 ? link_bw : colocated ? pk.triad_gbs / 3 : 12.5;
  tg.link_lat = (lat_us >= 0 ? lat_us : colocated ? 20 : 5) * 1e-6;
  double mem = node_mem > 0 ? node_mem * 1e9 : (double)dsi_mem_total();
  /* the planned model's dtype: the checkpoint's, or a preset's FP8 (V3 ships FP8) */
  shape s = shape_of(&cfg, preset ? "fp8" : k.dtype);
  layout_pred lp[5];
  int n = 0;
  lp[n++] = (layout_pred){.name = K > 1 ? "ep" : "one", .tp = 1, .ep = K};
  if (K > 1 && cfg.num_attention_heads % K == 0) {
    lp[n++] = (layout_pred){.name = "tp rs-ag", .tp = K, .ep = K, .tp_to_ep = DSI_TP_TO_EP_RS_AG};
    lp[n++] = (layout_pred){.name = "tp allreduce", .tp = K, .ep = K, .tp_to_ep = DSI_TP_TO_EP_ALLREDUCE};
    lp[n++] = (layout_pred){.name = "tp whole-experts", .tp = K, .ep = 1, .tp_to_ep = DSI_TP_TO_EP_RS_AG};
  }
  if (K > 1) lp[n++] = (layout_pred){.name = "dp attention", .tp = 1, .ep = K, .dp = 1};
  int pick = -1;
  for (int i = 0; i < n; i++) {
    predict(&k, &s, &tg, &lp[i]);
    int fits = lp[i].weights + lp[i].kv <= 0.9 * mem;
    if (fits && (pick < 0 || lp[i].dec_tps > lp[pick].dec_tps * 1.02 ||
                 (lp[i].dec_tps >= lp[pick].dec_tps * 0.98 && lp[i].pre_tps > lp[pick].pre_tps)))
      pick = i;
  }
  const char *target_name = preset ? preset : model;
  if (json) {
    printf("{\"calibration\":{\"model\":");
    dsi_json_put_str(stdout, model, strlen(model));
    printf(",\"dtype\":\"%s\",\"threads\":%d,\"isa\":\"%s\",\"read_gbs\":%.2f,"
           "\"prefill_tokens_per_s\":%.2f,\"decode_tokens_per_s\":%.3f},\"target\":",
           k.dtype, k.threads, k.isa, k.read_gbs, k.pre_tps, k.dec_tps);
    dsi_json_put_str(stdout, target_name, strlen(target_name));
    printf(",\"nodes\":%d,\"mem_bw_gbs\":%.2f,"
           "\"link_bw_gbs\":%.2f,\"link_latency_us\":%.1f,\"colocated\":%s,\"rank_share\":%.3f,\"rank_share_bw\":%.3f,\"rank_occupancy\":%.3f,\"prompt_len\":%d,\"batch\":%d,\"lm_head\":\"%s\",\"layouts\":[",
           K, tg.mem_bw, tg.link_bw,
           tg.link_lat * 1e6, colocated ? "true" : "false", tg.share, tg.share_bw, tg.occ, P, B,
           tg.vocab_split ? "split" : "whole");
    for (int i = 0; i < n; i++)
      printf("%s{\"layout\":\"%s\",\"tp\":%d,\"ep\":%d,\"prefill_tokens_per_s\":%.2f,\"decode_tokens_per_s\":%.3f,"
             "\"prefill_comm_share\":%.3f,\"decode_comm_share\":%.3f,\"weights_bytes_per_node\":%.0f,\"kv_bytes_per_node\":%.0f}",
             i ? "," : "", lp[i].name, lp[i].tp, lp[i].ep, lp[i].pre_tps, lp[i].dec_tps, lp[i].pre_comm, lp[i].dec_comm,
             lp[i].weights, lp[i].kv);
    printf("],\"pick\":\"%s\"}\n", pick >= 0 ? lp[pick].name : "none fits");
    return dsi_cli_finish_output("plan");
  }
  printf("measured here: %s (%s, %d threads, isa %s, %.1f GB/s read): prefill %.1f tokens/s (%d tokens), decode %.2f tokens/s\n",
         model, k.dtype, k.threads, k.isa, k.read_gbs, k.pre_tps, P, k.dec_tps);
  printf("  decode GB/s by category: attention %.1f, moe %.1f, dense %.1f, lm_head %.1f; prefill GFLOP/s: attention %.1f, "
         "moe %.1f, dense %.1f\n", k.rate_dec.attn / 1e9, k.rate_dec.moe / 1e9, k.rate_dec.dense / 1e9, k.rate_dec.lm / 1e9,
         k.rate_pre.attn / 1e9, k.rate_pre.moe / 1e9, k.rate_pre.dense / 1e9);
  if (colocated)
    printf("plan: %s (%s weights) on %d rank%s sharing this machine, each on %.0f%% of the calibration's threads "
           "(%.0f%% of its read bandwidth) %.0f%% of the time; links %.2f GB/s and %.0f us; prompt %d, batch %d, context %d\n", target_name,
           preset ? "fp8" : k.dtype, K, K > 1 ? "s" : "", 100 * tg.share, 100 * tg.share_bw, 100 * tg.occ, tg.link_bw,
           tg.link_lat * 1e6, P, B, ctx);
  else
    printf("plan: %s (%s weights) on %d node%s: %.1f GB/s memory each, links %.2f GB/s and %.0f us; prompt %d, batch %d, "
           "context %d\n", target_name, preset ? "fp8" : k.dtype, K, K > 1 ? "s" : "", tg.mem_bw, tg.link_bw,
           tg.link_lat * 1e6, P, B, ctx);
  printf("  %-18s %6s %6s %12s %12s %10s %10s %12s %10s\n", "layout", "--tp", "--ep", "prefill t/s", "decode t/s",
         "comm pre", "comm dec", "weights/node", "KV/node");
  for (int i = 0; i < n; i++)
    printf("  %-18s %6d %6d %12.1f %12.2f %9.0f%% %9.0f%% %9.1f GB %7.2f GB%s\n", lp[i].name, lp[i].tp, lp[i].ep,
           lp[i].pre_tps, lp[i].dec_tps, 100 * lp[i].pre_comm, 100 * lp[i].dec_comm, lp[i].weights / 1e9, lp[i].kv / 1e9,
           lp[i].weights + lp[i].kv > 0.9 * mem ? "  (does not fit)" : "");
  if (pick >= 0)
    printf("pick: %s (--tp %d --ep %d%s%s): the fastest decode that fits %.0f GB a node\n", lp[pick].name, lp[pick].tp,
           lp[pick].ep, lp[pick].dp ? " --attn dp"
                        : lp[pick].tp > 1 ? lp[pick].tp_to_ep == DSI_TP_TO_EP_ALLREDUCE ? " --tp-to-ep allreduce" : " --tp-to-ep rs-ag"
                        : "", tg.vocab_split && !lp[pick].dp && K > 1 ? " --lm-head split" : "", mem / 1e9);
  else
    printf("pick: none: no layout fits %.0f GB a node; more nodes are needed\n", mem / 1e9);
  if (pick >= 0 && !lp[pick].dp && K > 1) { /* the other lm_head, on the same calibration */
    target t2 = tg;
    t2.vocab_split = !tg.vocab_split;
    layout_pred o = lp[pick];
    predict(&k, &s, &t2, &o);
    printf("  with --lm-head %s instead: prefill %.1f tokens/s, decode %.2f tokens/s, %.1f GB of weights a node\n",
           t2.vocab_split ? "split" : "whole", o.pre_tps, o.dec_tps, o.weights / 1e9);
  }
  return dsi_cli_finish_output("plan");
}
