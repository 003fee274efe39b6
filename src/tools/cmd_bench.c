/* tools: `dsinfer bench` — the model end to end (prefill and decode
 * tokens/s, medians over repetitions, beside the bandwidth roofline) and
 * `bench kernels` (every matmul kernel on DeepSeek-V3's shapes). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "dist/dist.h"
#include "model/config.h"
#include "dsinfer.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/internal.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- bench kernels ---- */
static int bench_kernels(int argc, char **argv) {
  dsi_bench_kernels_opts o = {0};
  const char *ms = NULL, *precision = NULL;
  const dsi_opt opts[] = {
    {"--threads", NULL, OPT_INT, &o.n_threads, "threads (default: all cores)", 0, dsi_cli_max_threads()},
    {"--reps", NULL, OPT_INT, &o.reps, "repetitions per measurement, median reported (default 5)", 0, 1000},
    {"--dtypes", NULL, OPT_STR, &o.dtypes, "any of bf16,fp8,int8,int4 (default bf16,fp8)"},
    {"--shape", NULL, OPT_STR, &o.shape, "only this shape: q_a q_b kv_a o expert_up expert_down dense_up lm_head"},
    {"--m", NULL, OPT_STR, &ms, "batch sizes, comma-separated (default 1,4,16,64,256,1024)"},
    {"--precision", NULL, OPT_STR, &precision, "activations into the matmuls: auto | f32 | bf16, as the model commands take them (default auto)"},
    {"--grouped", NULL, OPT_FLAG, &o.grouped, "the grouped expert matmul (256 tokens, top-6 of 64 V3 experts) vs plain matmuls"},
    {"--attention", NULL, OPT_FLAG, &o.attention, "a decode token's latent attention (V3 widths): f32 rows and bf16 pair rows on the vector primitives, the pairs on AMX"},
    {"--ceilings", NULL, OPT_FLAG, &o.ceilings, "one core's ceilings: the GEMM's tile loop with operands in L1 / L2 / DRAM, the matvec on weights in L2"},
    {0}};
  int rc = dsi_cli_parse("bench kernels", "[--threads N] [--reps R] [--dtypes L] [--shape S] [--m LIST] [--precision P] [--grouped | --attention | --ceilings]", opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if ((rc = dsi_cli_precision("bench kernels", precision, &o.precision))) return rc;
  int32_t *mv = NULL;
  if (ms) {
    o.n_ms = dsi_cli_parse_ids("bench kernels", "--m", ms, &mv);
    if (o.n_ms < 0) return 2;
    for (int i = 0; i < o.n_ms; i++)
      if (mv[i] <= 0 || mv[i] > 4096) { free(mv); return dsi_cli_usage_error("bench kernels", "--m sizes must be in 1..4096"); }
    o.ms = (const int *)mv;
  }
  dsi_engine_opts eo = {0};
  dsi_cli_env_opts(NULL, &eo);
  o.isa = eo.isa;
  o.bf16_dot = eo.bf16_dot;
  dsi_err err = {0};
  rc = dsi_bench_kernels(&o, stdout, &err);
  free(mv);
  if (rc == DSI_E_INVAL) return dsi_cli_usage_error("bench kernels", "%s", err.msg);
  if (rc) {
    fprintf(stderr, "dsinfer bench kernels: %s\n", err.msg);
    return 1;
  }
  return dsi_cli_finish_output("bench kernels");
}

/* ---- bench --model under mpirun: what the ranks exchange ---- */
static void comm_report(const dsi_config *c, const dsi_cli_par *par, dsi_engine *e, int json) {
  int N = dsi_dist_size(dsi_cli_dist);
  dsi_comm_model cm = dsi_comm_per_token(c, par->tp, par->ep, par->tp_to_ep, par->attn_dp, N);
  double per_tok = cm.reduce + cm.gather + cm.a2a;
  const char *mode = par->attn_dp ? "dp attention"
                     : par->tp < 2 ? "experts split, all_reduce"
                     : par->tp_to_ep == DSI_TP_TO_EP_ALLREDUCE ? "allreduce" : "rs-ag";
  if (json)
    printf(",\"ranks\":%d,\"tp\":%d,\"ep\":%d,\"tp_to_ep\":\"%s\",\"overlap\":%s,\"two_batch_min\":%d,\"lm_head\":\"%s\"", N,
           par->tp, par->ep, mode, par->overlap ? "true" : "false", par->overlap ? par->two_batch_min : 0,
           par->vocab_split > 1 ? "split" : "whole");
  else
    printf("ranks: %d (--tp %d --ep %d, %s, overlap %s, two micro-batches from %d tokens, lm_head %s); rank 0's view\n", N,
           par->tp, par->ep, mode, par->overlap ? "on" : "off", par->overlap ? par->two_batch_min : 0,
           par->vocab_split > 1 ? "split" : "whole");
  for (int ph = 0; ph < 2; ph++) {
    dsi_phase_stats st;
    if (dsi_engine_profile_stats(e, ph == 0, &st) || st.steps == 0) continue;
    double ms = st.comm_s * 1e3 / st.steps, share = st.wall_s > 0 ? st.comm_s / st.wall_s : 0;
    double sent = st.comm_bytes / st.steps, model = per_tok * st.tokens / st.steps;
    double hidden = st.comm_s > 0 ? st.comm_overlapped_s / st.comm_s : 0;
    const char *name = ph == 0 ? "prefill" : "decode";
    if (json) {
      printf(",\"%s_comm_ms_per_step\":%.3f,\"%s_comm_share\":%.4f,\"%s_comm_overlapped\":%.4f,"
             "\"%s_comm_bytes_per_step\":%.0f,\"%s_comm_bytes_analytic\":%.0f,\"%s_two_batch_steps\":%d,\"%s_steps\":%d",
             name, ms, name, share, name, hidden, name, sent, name, model, name, st.two_batch_steps, name, st.steps);
      continue;
    }
    printf("%-8s %8.2f ms a step in collectives (%.0f%% of the step, %.0f%% of it beside compute); %.3f MB sent a step, "
           "analytic %.3f MB (reduce %.3f, all-gather %.3f, dispatch + combine %.3f at uniform routing)\n", name, ms,
           100 * share, 100 * hidden,
           sent / 1e6, model / 1e6, cm.reduce * st.tokens / st.steps / 1e6, cm.gather * st.tokens / st.steps / 1e6,
           cm.a2a * st.tokens / st.steps / 1e6);
    if (par->overlap) printf("%-8s %d of %d steps as two micro-batches\n", name, st.two_batch_steps, st.steps);
  }
  const dsi_dist *d = dsi_cli_dist;
  if (json) printf(",\"collectives\":{");
  else printf("collectives over the measured runs:");
  for (int k = 0; k < DSI_COLL_N; k++) {
    if (json) printf("%s\"%s\":{\"calls\":%lu,\"bytes_sent\":%.0f}", k ? "," : "", dsi_coll_names[k], d->calls[k], d->bytes[k]);
    else printf(" %s %lu calls %.2f MB%s", dsi_coll_names[k], d->calls[k], d->bytes[k] / 1e6, k + 1 < DSI_COLL_N ? ";" : "\n");
  }
  if (json) printf("}");
}

/* ---- bench --model ---- */
int dsi_bench_run(dsi_engine *e, int vocab, int P, int G, int B, uint64_t seed, dsi_bench_result *r, dsi_err *err) {
  int n = P * B, rc = 0;
  int32_t *tok = malloc(n * sizeof(int32_t)), *seq = malloc(n * sizeof(int32_t)), ids[256];
  uint8_t *want = calloc(n, 1);
  float *logits = malloc((size_t)B * vocab * sizeof(float));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  int made = 0;
  if (!tok || !seq || !want || !logits) {
    rc = dsi_errf(err, DSI_E_NOMEM, "out of memory for a batch of %d tokens", n);
    goto out;
  }
  for (; made < B; made++)
    if ((ids[made] = dsi_seq_new(e)) < 0) {
      *err = *dsi_engine_error(e);
      rc = 1;
      goto out;
    }
  for (int b = 0; b < B; b++)
    for (int p = 0; p < P; p++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      tok[b * P + p] = (int32_t)((x >> 33) % (uint64_t)vocab);
      seq[b * P + p] = ids[b];
      want[b * P + p] = p == P - 1;
    }
  double t0 = now();
  dsi_batch pb = {.n_tokens = n, .tokens = tok, .seq = seq, .want_logits = want};
  if (dsi_engine_forward(e, &pb, logits)) rc = 1;
  double t1 = now();
  for (int g = 0; g < G && !rc; g++) {
    for (int b = 0; b < B; b++) {
      /* greedy */
      const float *l = logits + (size_t)b * vocab;
      int best = 0;
      for (int i = 1; i < vocab; i++)
        if (l[i] > l[best]) best = i;
      tok[b] = best;
      seq[b] = ids[b];
    }
    dsi_batch db = {.n_tokens = B, .tokens = tok, .seq = seq};
    if (dsi_engine_forward(e, &db, logits)) rc = 1;
  }
  double t2 = now();
  if (rc) *err = *dsi_engine_error(e);
  r->prefill_tps = n / (t1 - t0);
  r->decode_tps = G > 0 ? (double)G * B / (t2 - t1) : 0;
  r->ms_per_token = G > 0 ? (t2 - t1) * 1e3 / G : 0;
out:
  for (int b = 0; b < made; b++) dsi_seq_free(e, ids[b]);
  free(tok);
  free(seq);
  free(want);
  free(logits);
  return rc;
}

static int bench_model(int argc, char **argv) {
  const char *model = NULL, *precision = NULL, *op_opt = NULL, *quant = NULL, *quant_head = NULL, *profile = NULL,
             *exec = NULL, *kv = NULL;
  int P = 512, G = 64, B = 1, reps = 3, threads = 0, json = 0, streams = 1, ablation = 0, qmode, qhead;
  dsi_cli_par par = {0};
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "checkpoint directory"},
    {"--prompt-len", NULL, OPT_INT, &P, "prompt tokens per sequence (default 512)", 1, DSI_CLI_MAX_TOKENS},
    {"--gen-len", NULL, OPT_INT, &G, "decode steps (default 64)", 0, DSI_CLI_MAX_TOKENS},
    {"--batch", NULL, OPT_INT, &B, "sequences run together (default 1)", 1, 256},
    {"--reps", NULL, OPT_INT, &reps, "repetitions; medians reported (default 3)", 1, 1000},
    {"--threads", NULL, OPT_INT, &threads, "threads (default: all cores)", 0, dsi_cli_max_threads()},
    {"--precision", NULL, OPT_STR, &precision, "auto | f32 | bf16 (see generate --help)"},
    {"--op-opt", NULL, OPT_STR, &op_opt, "on (packed weights, default) | off (row-major)"},
    {"--quant", NULL, OPT_STR, &quant, "none (default) | int8 | int4: quantize the packed weights while loading"},
    {"--quant-head", NULL, OPT_STR, &quant_head, QUANT_HEAD_HELP},
    {"--kv-dtype", NULL, OPT_STR, &kv, "auto (default) | bf16 | f32: what the KV cache holds (see generate --help)"},
    {"--exec", NULL, OPT_STR, &exec, "graph (default) | eager"},
    {"--streams", NULL, OPT_INT, &streams, "1 (default) | 2", 1, 2},
    {"--ablation", NULL, OPT_FLAG, &ablation, "run the study's stages one by one: eager, graph, streams, op-opt"},
    {"--json", NULL, OPT_FLAG, &json, "print one JSON object (--ablation: an array, one per stage)"},
    {"--profile", NULL, OPT_STR, &profile, "write a Chrome trace of the measured runs to FILE"},
    PAR_OPTS(par),
    {0}};
  int rc = dsi_cli_parse("bench", "--model DIR [--prompt-len P] [--gen-len G] [--batch B] [--reps R] [--threads N] [--ablation] [--json]\n"
                                  "       dsinfer bench kernels [options]   (dsinfer bench kernels --help)\n"
                                  "       dsinfer bench serve [options]     (dsinfer bench serve --help)\n"
                                  "       dsinfer bench tokenizer [options] (dsinfer bench tokenizer --help)",
                         opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!model) return dsi_cli_usage_error("bench", "--model is required (or use 'dsinfer bench kernels')");
  if (P < 1 || G < 0 || B < 1 || B > 256 || reps < 1 || threads < 0)
    return dsi_cli_usage_error("bench", "--prompt-len >= 1, --gen-len >= 0, --batch in 1..256, --reps >= 1");
  int act, urc = dsi_cli_precision("bench", precision, &act);
  if (urc) return urc;
  if (op_opt && strcmp(op_opt, "on") && strcmp(op_opt, "off")) return dsi_cli_usage_error("bench", "--op-opt must be on or off");
  if ((rc = dsi_cli_check_quant("bench", quant, quant_head, &qmode, &qhead))) return rc;
  if (dsi_cli_kv_dtype(kv) < 0) return dsi_cli_usage_error("bench", "--kv-dtype must be auto, bf16 or f32");
  if (exec && strcmp(exec, "graph") && strcmp(exec, "eager")) return dsi_cli_usage_error("bench", "--exec must be graph or eager");
  if (streams != 1 && streams != 2) return dsi_cli_usage_error("bench", "--streams must be 1 or 2");
  if ((rc = dsi_cli_check_par("bench", &par))) return rc;
  if (ablation && (reps > 64 || op_opt || exec || quant || profile || par.tp_to_ep_s || par.overlap_s ||
                   par.two_batch_s))
    return dsi_cli_usage_error("bench", "--ablation sets --exec, --streams, --op-opt, --tp-to-ep, --overlap and --two-batch-min itself; "
                               "--reps <= 64");
  /* before anything is measured or made: a sequence must fit the model's context */
  dsi_config cfg;
  dsi_err cerr = {0};
  if (dsi_config_load(&cfg, model, &cerr)) {
    fprintf(stderr, "dsinfer bench: %s\n", cerr.msg);
    return 1;
  }
  if ((int64_t)P + G + 1 > cfg.max_position_embeddings) {
    fprintf(stderr, "dsinfer bench: --prompt-len %d + --gen-len %d do not fit the model's context of %d tokens "
                    "(max_position_embeddings)\n", P, G, cfg.max_position_embeddings);
    return 1;
  }
  if (ablation) {
    dsi_bench_ablation_opts ao = {model, P, G, B, reps, threads, act, json, &par};
    return dsi_bench_ablation(&ao);
  }
  dsi_peaks pk;
  dsi_measure_peaks(threads, &pk);
  dsi_reset_peak_rss(); /* the bandwidth test's buffers are not the engine's */
  dsi_err err = {0};
  dsi_model *m;
  dsi_load_opts lo = {.progress = !json, .n_threads = threads, .op_opt_off = op_opt && !strcmp(op_opt, "off"),
                      .quant = qmode, .quant_head = qhead};
  dsi_engine_opts eo = {.n_threads = threads, .max_tokens = 512, .max_context = P + G + 1,
                        .kv_blocks = (P + G + 64) / 64 * B + B, .act_precision = act, .profile = profile != NULL,
                        .kv_dtype = dsi_cli_kv_dtype(kv),
                        .exec = exec && !strcmp(exec, "eager") ? DSI_EXEC_EAGER : DSI_EXEC_GRAPH, .streams = streams};
  dsi_cli_env_opts(&lo, &eo);
  dsi_engine *e;
  /* under mpirun: the ranks share the model as --tp / --ep say, rank 0
   * measuring, its profiler timing the collectives */
  int ranks = dsi_dist_size(dsi_cli_dist);
  eo.profile = 1; /* the prefill's FLOPs (each op's cost), the collectives' time under mpirun; ~10 us a step */
  const double t_load = dsi_now();
  if (dsi_cli_open("bench", model, &lo, &eo, &par, &m, &e)) return 1;
  const double load_s = dsi_now() - t_load; /* the checkpoint read, packed or quantized; the engine set up */
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  double pre[64], dec[64], mpt[64];
  reps = reps > 64 ? 64 : reps;
  dsi_bench_result warm;
  dsi_err berr = {0};
  rc = dsi_bench_run(e, info.vocab_size, DSI_MIN(P, 16), DSI_MIN(G, 2), B, 99, &warm, &berr); /* pages, caches */
  dsi_engine_profile_reset(e);
  if (ranks > 1) { /* count the measured runs' collectives only */
    memset(dsi_cli_dist->calls, 0, sizeof dsi_cli_dist->calls);
    memset(dsi_cli_dist->bytes, 0, sizeof dsi_cli_dist->bytes);
  }
  double pre_flops = 0; /* of one prefill of the B prompts, by the ops' cost model */
  for (int r = 0; r < reps && !rc; r++) {
    dsi_bench_result rr;
    rc = dsi_bench_run(e, info.vocab_size, P, G, B, (uint64_t)r + 1, &rr, &berr);
    pre[r] = rr.prefill_tps;
    dec[r] = rr.decode_tps;
    mpt[r] = rr.ms_per_token;
    dsi_phase_stats ps;
    if (r == 0 && !rc && !dsi_engine_profile_stats(e, 1, &ps)) pre_flops = ps.flops;
  }
  if (rc) {
    fprintf(stderr, "dsinfer bench: %s\n", berr.msg);
  } else {
    double spread_lo = pre[0], spread_hi = pre[0], dlo = dec[0], dhi = dec[0];
    for (int r = 1; r < reps; r++) {
      spread_lo = DSI_MIN(spread_lo, pre[r]); spread_hi = DSI_MAX(spread_hi, pre[r]);
      dlo = DSI_MIN(dlo, dec[r]); dhi = DSI_MAX(dhi, dec[r]);
    }
    double p = dsi_median(pre, reps), d = dsi_median(dec, reps), ms = dsi_median(mpt, reps);
    double roof = pk.read_gbs * 1e9 / (double)info.active_bytes_per_token;
    /* the prefill's FLOP rate beside the matrix peak of the kernels it runs on */
    const char *mname;
    double mpeak = dsi_engine_matrix_peak(e, &pk, &mname);
    double pre_gf = pre_flops * p / ((double)P * B) * 1e-9;
    if (json) {
      printf("{\"model\":");
      dsi_json_put_str(stdout, model, strlen(model));
      printf(",\"weight_dtype\":\"%s\",\"prompt_len\":%d,\"gen_len\":%d,\"batch\":%d,\"reps\":%d,"
             "\"prefill_tokens_per_s\":%.2f,\"decode_tokens_per_s\":%.3f,\"ms_per_token\":%.3f,"
             "\"peak_rss_bytes\":%zu,\"threads\":%d,\"isa\":\"%s\",\"kv_dtype\":\"%s\",\"active_bytes_per_token\":%zu,"
             "\"read_bandwidth_gbs\":%.2f,\"roofline_decode_tokens_per_s\":%.3f,\"decode_roofline_fraction\":%.3f,"
             "\"prefill_gflops\":%.1f,\"matrix_peak\":\"%s\",\"matrix_peak_gflops\":%.1f,\"prefill_peak_fraction\":%.3f,"
             "\"load_s\":%.3f",
             info.weight_dtype, P, G, B, reps, p, d, ms, dsi_peak_rss(), pk.threads, dsi_engine_isa(e),
             dsi_engine_kv_dtype(e), info.active_bytes_per_token, pk.read_gbs, roof, d / B / roof, pre_gf, mname, mpeak,
             mpeak > 0 ? pre_gf / mpeak : 0, load_s);
      if (ranks > 1) comm_report(&cfg, &par, e, 1);
      printf("}\n");
    } else {
      printf("model %s (%s weights, %.0f MB), %d threads, isa %s, %s KV cache\n", model, info.weight_dtype,
             info.weight_bytes / 1e6, pk.threads, dsi_engine_isa(e), dsi_engine_kv_dtype(e));
      printf("workload: %d sequence(s) x %d prompt tokens, %d decode steps; median of %d runs (min..max)\n", B, P, G, reps);
      printf("prefill: %10.1f tokens/s   (%.1f .. %.1f), %.0f GFLOP/s = %.0f%% of the %s peak (%.0f GFLOP/s)\n", p,
             spread_lo, spread_hi, pre_gf, mpeak > 0 ? 100 * pre_gf / mpeak : 0.0, mname, mpeak);
      printf("decode:  %10.2f tokens/s   (%.2f .. %.2f), %.2f ms per step\n", d, dlo, dhi, ms);
      printf("roofline (batch 1 decode): %.1f MB of weights per token / %.1f GB/s read = %.2f tokens/s; "
             "decode reaches %.0f%% of it\n", info.active_bytes_per_token / 1e6, pk.read_gbs, roof, 100 * d / B / roof);
      printf("peak RSS: %.0f MB; loaded in %.2f s\n", dsi_peak_rss() / 1e6, load_s);
      if (ranks > 1) comm_report(&cfg, &par, e, 0);
    }
  }
  if (!rc && profile && dsi_engine_profile_write(e, profile, &err)) {
    fprintf(stderr, "dsinfer bench: %s\n", err.msg);
    rc = 1;
  }
  dsi_engine_free(e);
  dsi_model_free(m);
  return rc ? 1 : dsi_cli_finish_output("bench");
}

int dsi_cmd_bench(int argc, char **argv) {
  if (argc >= 1 && !strcmp(argv[0], "kernels")) return bench_kernels(argc - 1, argv + 1);
  if (argc >= 1 && !strcmp(argv[0], "tokenizer")) return dsi_cmd_bench_tokenizer(argc - 1, argv + 1);
  if (argc >= 1 && !strcmp(argv[0], "serve")) return dsi_cmd_bench_serve(argc - 1, argv + 1);
  return bench_model(argc, argv);
}
