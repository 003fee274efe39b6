/* tools: the commands that run the model on token ids — logits (every
 * position's logits to a file) and generate (sample ids, report speed) —
 * and mkmodel (write a random-weight checkpoint). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsinfer.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/internal.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fail(const char *cmd, const dsi_err *err) {
  fprintf(stderr, "dsinfer %s: %s\n", cmd, err->msg);
  return 1;
}

int dsi_cli_check_run_opts(const char *cmd, run_opts *r, int *act) {
  if (r->threads < 0) return dsi_cli_usage_error(cmd, "--threads must be >= 0");
  if (r->op_opt && strcmp(r->op_opt, "on") && strcmp(r->op_opt, "off"))
    return dsi_cli_usage_error(cmd, "--op-opt must be on or off, got '%s'", r->op_opt);
  r->op_opt_off = r->op_opt && !strcmp(r->op_opt, "off");
  if (r->quant && strcmp(r->quant, "none") && strcmp(r->quant, "int8"))
    return dsi_cli_usage_error(cmd, "--quant must be none or int8, got '%s'", r->quant);
  r->quant_mode = r->quant && !strcmp(r->quant, "int8") ? DSI_QUANT_INT8 : DSI_QUANT_NONE;
  r->exec_mode = DSI_EXEC_GRAPH;
  if (r->exec && !strcmp(r->exec, "eager")) r->exec_mode = DSI_EXEC_EAGER;
  else if (r->exec && strcmp(r->exec, "graph")) return dsi_cli_usage_error(cmd, "--exec must be graph or eager, got '%s'", r->exec);
  if (r->streams != 0 && r->streams != 1 && r->streams != 2)
    return dsi_cli_usage_error(cmd, "--streams must be 1 or 2, got %d", r->streams);
  *act = DSI_ACT_AUTO;
  if (r->precision) {
    if (!strcmp(r->precision, "f32")) *act = DSI_ACT_F32;
    else if (!strcmp(r->precision, "bf16")) *act = DSI_ACT_BF16;
    else if (strcmp(r->precision, "auto")) return dsi_cli_usage_error(cmd, "--precision must be auto, f32 or bf16, got '%s'", r->precision);
  }
  return 0;
}

int dsi_cli_open_model(const char *cmd, const char *dir, const run_opts *r, dsi_model **m) {
  dsi_err err = {0};
  dsi_load_opts lo = {.mlock = r->mlock, .progress = 1, .n_threads = r->threads, .op_opt_off = r->op_opt_off,
                      .quant = r->quant_mode};
  dsi_cli_env_opts(&lo, NULL);
  return dsi_model_open(m, dir, &lo, &err) ? fail(cmd, &err) : 0;
}

int dsi_cli_engine_on(const char *cmd, dsi_model *m, const run_opts *r, int act, int max_tokens, int max_context,
                      dsi_engine **e) {
  dsi_err err = {0};
  dsi_engine_opts eo = {.n_threads = r->threads, .max_tokens = max_tokens, .max_context = max_context,
                        .act_precision = act, .profile = r->profile, .kv_blocks = r->kv_blocks,
                        .exec = r->exec_mode, .streams = r->streams};
  dsi_cli_env_opts(NULL, &eo);
  return dsi_engine_open(e, m, &eo, &err) ? fail(cmd, &err) : 0;
}

int dsi_cli_open_engine(const char *cmd, const char *dir, const run_opts *r, int act, int max_tokens,
                        int max_context, dsi_model **m, dsi_engine **e) {
  if (dsi_cli_open_model(cmd, dir, r, m)) return 1;
  if (dsi_cli_engine_on(cmd, *m, r, act, max_tokens, max_context, e)) {
    dsi_model_free(*m);
    return 1;
  }
  return 0;
}

/* ---- logits ---- */
int dsi_cmd_logits(int argc, char **argv) {
  const char *model = NULL, *out = NULL;
  dsi_strlist toks = {0};
  int decode = 0, chunk = 0, act;
  run_opts ro = {0};
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "checkpoint directory (config.json + safetensors)"},
    {"--tokens", NULL, OPT_LIST, &toks, "comma-separated ids of one sequence; repeat for more sequences"},
    {"--decode", NULL, OPT_FLAG, &decode, "feed one token per sequence per step through the KV cache"},
    {"--chunk", NULL, OPT_INT, &chunk, "prefill in chunks of N tokens per sequence per step"},
    {"--out", NULL, OPT_STR, &out, "output file: raw little-endian f32, [n_tokens, vocab] per sequence"},
    RUN_OPTS(ro),
    {0}};
  int rc = dsi_cli_parse("logits", "--model DIR --tokens IDS [--tokens IDS ...] [--decode | --chunk N] --out FILE",
                         opts, argc, argv);
  if (rc) { free(toks.v); return rc == 1 ? 0 : 2; }
  if (!model || !out || toks.n == 0) {
    free(toks.v);
    return dsi_cli_usage_error("logits", "--model, --tokens and --out are required");
  }
  if (chunk < 0 || (decode && chunk)) { free(toks.v); return dsi_cli_usage_error("logits", "--chunk must be positive and not combined with --decode"); }
  if ((rc = dsi_cli_check_run_opts("logits", &ro, &act))) { free(toks.v); return rc; }
  if (decode) chunk = 1;
  int ns = toks.n;
  int32_t **ids = calloc(ns, sizeof *ids);
  int *len = calloc(ns, sizeof *len), total = 0;
  for (int s = 0; s < ns; s++) {
    len[s] = dsi_cli_parse_ids(toks.v[s], &ids[s]);
    if (len[s] < 0) {
      rc = dsi_cli_usage_error("logits", "--tokens expects comma-separated non-negative ids, got '%s'", toks.v[s]);
      goto done;
    }
    total += len[s];
  }
  dsi_model *m = NULL;
  dsi_engine *e = NULL;
  int maxlen = 0;
  for (int s = 0; s < ns; s++) maxlen = len[s] > maxlen ? len[s] : maxlen;
  if ((rc = dsi_cli_open_engine("logits", model, &ro, act, total, maxlen, &m, &e))) goto done;
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  size_t V = info.vocab_size;
  float *all = calloc((size_t)total * V, sizeof(float)); /* sequence after sequence */
  float *step = malloc((size_t)total * V * sizeof(float));
  int32_t *bt = malloc(total * sizeof(int32_t)), *bs = malloc(total * sizeof(int32_t));
  int *seq_id = calloc(ns, sizeof(int)), *done_n = calloc(ns, sizeof(int)), *base = calloc(ns, sizeof(int));
  for (int s = 0; s < ns; s++) {
    seq_id[s] = dsi_seq_new(e);
    base[s] = s ? base[s - 1] + len[s - 1] : 0;
  }
  int per = chunk > 0 ? chunk : 1 << 30;
  for (;;) {
    int n = 0;
    for (int s = 0; s < ns; s++)
      for (int k = 0; k < per && done_n[s] + k < len[s]; k++) {
        bt[n] = ids[s][done_n[s] + k];
        bs[n++] = seq_id[s];
      }
    if (n == 0) break;
    dsi_batch b = {.n_tokens = n, .tokens = bt, .seq = bs};
    if (dsi_engine_forward(e, &b, step)) {
      rc = fail("logits", dsi_engine_error(e));
      break;
    }
    int r = 0;
    for (int s = 0; s < ns; s++)
      for (int k = 0; k < per && done_n[s] < len[s]; k++, r++)
        memcpy(all + (size_t)(base[s] + done_n[s]++) * V, step + (size_t)r * V, V * sizeof(float));
  }
  if (!rc) {
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(all, sizeof(float), (size_t)total * V, f) != (size_t)total * V) {
      fprintf(stderr, "dsinfer logits: cannot write %s\n", out);
      rc = 1;
    }
    if (f && fclose(f)) rc = 1;
  }
  free(all); free(step); free(bt); free(bs); free(seq_id); free(done_n); free(base);
  dsi_engine_free(e);
  dsi_model_free(m);
done:
  for (int s = 0; s < ns; s++) free(ids[s]);
  free(ids);
  free(len);
  free(toks.v);
  return rc;
}

/* ---- generate ---- */
int dsi_cmd_generate(int argc, char **argv) {
  const char *model = NULL, *tokens = NULL, *profile = NULL;
  int n_gen = 32, ignore_eos = 0, act;
  run_opts ro = {0};
  dsi_sampling sp = {.temperature = 0, .top_p = 1, .top_k = 0, .seed = 0};
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "checkpoint directory"},
    {"--tokens", NULL, OPT_STR, &tokens, "prompt as comma-separated token ids"},
    {"-n", "--n-predict", OPT_INT, &n_gen, "tokens to generate (default 32)"},
    {"--temperature", NULL, OPT_FLOAT, &sp.temperature, "sampling temperature; 0 = greedy (default 0)"},
    {"--top-p", NULL, OPT_FLOAT, &sp.top_p, "nucleus sampling mass (default 1 = off)"},
    {"--top-k", NULL, OPT_INT, &sp.top_k, "sample among the K most likely (default 0 = off)"},
    {"--seed", NULL, OPT_U64, &sp.seed, "random seed (default 0)"},
    {"--ignore-eos", NULL, OPT_FLAG, &ignore_eos, "keep going past the end-of-sequence token"},
    {"--profile", NULL, OPT_STR, &profile, "write a Chrome trace of the run to FILE (see dsinfer profile)"},
    RUN_OPTS(ro),
    {0}};
  int rc = dsi_cli_parse("generate", "--model DIR --tokens IDS [-n N] [sampling options]", opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!model || !tokens) return dsi_cli_usage_error("generate", "--model and --tokens are required");
  if (n_gen < 0 || sp.temperature < 0 || sp.top_p <= 0 || sp.top_p > 1 || sp.top_k < 0)
    return dsi_cli_usage_error("generate", "-n, --temperature, --top-k must be >= 0 and --top-p in (0, 1]");
  if ((rc = dsi_cli_check_run_opts("generate", &ro, &act))) return rc;
  ro.profile = profile != NULL;
  int32_t *prompt;
  int np = dsi_cli_parse_ids(tokens, &prompt);
  if (np < 0) return dsi_cli_usage_error("generate", "--tokens expects comma-separated non-negative ids");
  dsi_model *m = NULL;
  dsi_engine *e = NULL;
  if ((rc = dsi_cli_open_engine("generate", model, &ro, act, np, np + n_gen, &m, &e))) { free(prompt); return rc; }
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  float *logits = malloc((size_t)info.vocab_size * sizeof(float));
  dsi_sampler *smp = dsi_sampler_new(&sp, info.vocab_size);
  int seq = dsi_seq_new(e);
  uint8_t *want = calloc(np, 1);
  want[np - 1] = 1;
  int32_t *seqv = calloc(np, sizeof(int32_t));
  for (int i = 0; i < np; i++) seqv[i] = seq;
  double t0 = now();
  dsi_batch b = {.n_tokens = np, .tokens = prompt, .seq = seqv, .want_logits = want};
  if (!logits || !smp) {
    fprintf(stderr, "dsinfer generate: out of memory for the logits\n");
    rc = 1;
  } else if (dsi_engine_forward(e, &b, logits)) {
    rc = fail("generate", dsi_engine_error(e));
  }
  double t1 = now();
  int produced = 0;
  double t2 = t1;
  for (int i = 0; !rc && i < n_gen; i++) {
    int32_t tok = dsi_sampler_sample(smp, logits, 0, NULL, 0, 0);
    printf("%s%d", produced ? "," : "", tok);
    fflush(stdout);
    produced++;
    if (tok == info.eos_token_id && !ignore_eos) break;
    if (i + 1 == n_gen) break;
    dsi_batch d = {.n_tokens = 1, .tokens = &tok, .seq = &seq};
    if (dsi_engine_forward(e, &d, logits)) rc = fail("generate", dsi_engine_error(e));
  }
  t2 = now();
  printf("\n");
  if (!rc)
    fprintf(stderr, "prefill: %d tokens, %.1f tokens/s; decode: %d tokens, %.2f tokens/s\n", np,
            np / (t1 - t0), produced, produced > 1 ? (produced - 1) / (t2 - t1) : 0.0);
  dsi_err perr = {0};
  if (!rc && profile && dsi_engine_profile_write(e, profile, &perr)) rc = fail("generate", &perr);
  free(want); free(seqv); free(logits); free(prompt);
  dsi_sampler_free(smp);
  dsi_engine_free(e);
  dsi_model_free(m);
  return rc;
}

/* ---- mkmodel ---- */
int dsi_cmd_mkmodel(int argc, char **argv) {
  dsi_mkmodel_opts o = {.preset = "tiny", .dtype = "bf16", .seed = 0, .out_dir = NULL, .shard_mb = 0, .progress = 1};
  const dsi_opt opts[] = {
    {"--preset", NULL, OPT_STR, &o.preset, "tiny | small | bench | v3slice (default tiny)"},
    {"--dtype", NULL, OPT_STR, &o.dtype, "f32 | bf16 | fp8 (default bf16)"},
    {"--seed", NULL, OPT_U64, &o.seed, "random seed (default 0)"},
    {"--out", NULL, OPT_STR, &o.out_dir, "output directory"},
    {"--shard-mb", NULL, OPT_INT, &o.shard_mb, "split into shards of at most N MB with an index"},
    {"--tokenizer", NULL, OPT_STR, &o.tokenizer, "tokenizer.json or its folder to copy in; builtin: a small generated "
                                                  "one (default: DeepSeek-V3's when found and it fits, else builtin)"},
    {0}};
  int rc = dsi_cli_parse("mkmodel", "--preset P --dtype T [--seed S] --out DIR [--shard-mb N] [--tokenizer DIR|FILE|builtin]",
                         opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!o.out_dir) return dsi_cli_usage_error("mkmodel", "--out is required");
  if (o.shard_mb < 0) return dsi_cli_usage_error("mkmodel", "--shard-mb must be >= 0");
  dsi_err err = {0};
  if (dsi_mkmodel(&o, &err)) return fail("mkmodel", &err);
  return 0;
}
