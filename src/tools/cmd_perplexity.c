/* tools: `dsinfer perplexity` — the perplexity of a text file in windows,
 * as llama-perplexity computes it: the text is encoded once (BOS first when
 * the tokenizer adds it), cut into windows of --ctx tokens whose first
 * token becomes BOS, and each window scores its second half (or, with
 * --stride S, a window every S tokens scoring its last S tokens). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dsinfer.h"
#include "tools/cli.h"
#include "tools/commands.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the text's tokens ---- */

/* tokens of DIR's tokenizer for FILE's text into *ids; *bos = the BOS id
 * when the tokenizer put it first (then every window starts with it), else
 * -1. Returns 0 or 1 (printed). */
static int read_tokens(const char *model, const char *file, int32_t **ids, size_t *n, int32_t *bos) {
  char json[4200], cfg[4200];
  snprintf(json, sizeof json, "%s/tokenizer.json", model);
  snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", model);
  dsi_err err = {0};
  dsi_tok *tok = NULL;
  char *text = NULL;
  size_t len = 0;
  int rc = 1;
  FILE *f = fopen(file, "rb");
  if (!f) {
    fprintf(stderr, "dsinfer perplexity: %s: cannot open\n", file);
    return 1;
  }
  int oom = 0;
  for (size_t cap = 0;;) {
    if (len == cap) {
      char *grown = realloc(text, (cap = cap ? 2 * cap : 1 << 16) + 1);
      if (!grown) {
        oom = 1;
        break;
      }
      text = grown;
    }
    size_t k = fread(text + len, 1, cap - len, f);
    len += k;
    if (k == 0) break;
  }
  int read_err = ferror(f);
  fclose(f);
  if (oom) {
    fprintf(stderr, "dsinfer perplexity: %s: out of memory reading it (%zu bytes so far)\n", file, len);
  } else if (read_err) {
    fprintf(stderr, "dsinfer perplexity: %s: cannot read\n", file);
  } else if (access(json, R_OK) != 0) {
    fprintf(stderr, "dsinfer perplexity: %s: not found: the checkpoint has no tokenizer\n", json);
  } else if (dsi_tok_open(&tok, json, access(cfg, R_OK) == 0 ? cfg : NULL, dsi_cli_tok_flags(), &err) ||
             dsi_tok_encode(tok, text, len, DSI_TOK_ADD_SPECIAL | DSI_TOK_SPECIAL_AS_TEXT | DSI_TOK_REPLACE_INVALID, ids,
                            n, &err)) {
    fprintf(stderr, "dsinfer perplexity: %s\n", err.msg);
  } else {
    int32_t b = dsi_tok_bos_id(tok);
    *bos = *n && b >= 0 && (*ids)[0] == b ? b : -1;
    rc = 0;
  }
  dsi_tok_free(tok);
  free(text);
  return rc;
}

/* ---- windows ---- */

typedef struct window {
  size_t start; /* first token of the text in it */
  int first;    /* positions first .. ctx-2 predict the next token: they are scored */
} window;

/* Without a stride: consecutive windows, each scoring its second half;
 * with one: a window every stride tokens, each scoring its last stride
 * tokens. Only whole windows. */
static window *make_windows(size_t n_tokens, int ctx, int stride, int *n_windows) {
  size_t n = stride ? (n_tokens >= (size_t)ctx ? (n_tokens - ctx) / stride + 1 : 0) : n_tokens / ctx;
  window *w = malloc((n ? n : 1) * sizeof *w);
  for (size_t i = 0; w && i < n; i++) {
    w[i].start = i * (size_t)(stride ? stride : ctx);
    w[i].first = stride ? ctx - stride - 1 : ctx / 2;
  }
  *n_windows = (int)n;
  return w;
}

/* -log softmax(logits)[target], in double */
static double token_nll(const float *logits, int vocab, int32_t target) {
  float mx = logits[0];
  for (int v = 1; v < vocab; v++) mx = logits[v] > mx ? logits[v] : mx;
  double s = 0;
  for (int v = 0; v < vocab; v++) s += exp((double)logits[v] - mx);
  return log(s) + mx - logits[target];
}

/* ---- the command ---- */

int dsi_cmd_perplexity(int argc, char **argv) {
  const char *model = NULL, *file = NULL;
  int ctx = 0, stride = 0, batch = 4, json = 0, act;
  run_opts ro = {0};
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "checkpoint directory (with its tokenizer)"},
    {"--file", "-f", OPT_STR, &file, "the text (UTF-8)"},
    {"--ctx", "-c", OPT_INT, &ctx, "tokens per window (default min(512, max_position_embeddings))"},
    {"--stride", NULL, OPT_INT, &stride, "a window every S tokens, each scoring its last S (default: none, "
                                          "consecutive windows scoring their second half)"},
    {"--batch", "-b", OPT_INT, &batch, "windows in one forward pass (default 4)"},
    {"--json", NULL, OPT_FLAG, &json, "print one JSON object: perplexity, tokens, nll_mean, tokens_per_s, ..."},
    RUN_OPTS(ro),
    {0}};
  int rc = dsi_cli_parse("perplexity", "--model DIR --file TEXT [--ctx N] [--stride S] [--batch B] [--json] [model options]",
                         opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!model || !file) return dsi_cli_usage_error("perplexity", "--model and --file are required");
  if (ctx < 0 || (ctx && ctx < 4)) return dsi_cli_usage_error("perplexity", "--ctx must be at least 4");
  if (batch < 1) return dsi_cli_usage_error("perplexity", "--batch must be >= 1");
  if (stride < 0 || (stride && ctx && stride > ctx - 2))
    return dsi_cli_usage_error("perplexity", "--stride must be in 1..ctx-2");
  if ((rc = dsi_cli_check_run_opts("perplexity", &ro, &act))) return rc;

  int32_t *ids = NULL, bos;
  size_t n_ids = 0;
  if (read_tokens(model, file, &ids, &n_ids, &bos)) return 1;

  /* the model first: its max_position_embeddings bounds the windows, which size the engine */
  dsi_model *m = NULL;
  dsi_engine *e = NULL;
  if (dsi_cli_open_model("perplexity", model, &ro, &m)) {
    free(ids);
    return 1;
  }
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  if (!ctx) ctx = info.max_position_embeddings < 512 ? info.max_position_embeddings : 512;
  rc = 1;
  window *w = NULL;
  int n_windows = 0;
  if (ctx > info.max_position_embeddings) {
    fprintf(stderr, "dsinfer perplexity: --ctx %d is past the model's max_position_embeddings (%d)\n", ctx,
            info.max_position_embeddings);
    goto out;
  }
  if (stride > ctx - 2) {
    fprintf(stderr, "dsinfer perplexity: --stride %d must be at most ctx - 2 = %d\n", stride, ctx - 2);
    goto out;
  }
  if (!(w = make_windows(n_ids, ctx, stride, &n_windows))) {
    fprintf(stderr, "dsinfer perplexity: out of memory for the windows of %zu tokens\n", n_ids);
    goto out;
  }
  if (n_windows == 0) {
    fprintf(stderr, "dsinfer perplexity: %s has %zu tokens: too few for one window of %d\n", file, n_ids, ctx);
    goto out;
  }
  if (batch > n_windows) batch = n_windows;
  /* enough KV for every window of a batch (the engine's default holds 8 of max_context) */
  if (batch > 8) ro.kv_blocks = batch * ((ctx + 63) / 64);
  if (dsi_cli_engine_on("perplexity", m, &ro, act, batch * ctx, ctx, &e)) goto out;

  int V = info.vocab_size, per = ctx - 1 - w[0].first; /* scored positions per window */
  size_t rows = (size_t)batch * per;
  float *logits = malloc(rows * V * sizeof(float));
  int32_t *bt = malloc((size_t)batch * ctx * sizeof(int32_t)), *bs = malloc((size_t)batch * ctx * sizeof(int32_t));
  uint8_t *want = malloc((size_t)batch * ctx);
  int *seq = malloc(batch * sizeof(int));
  if (!logits || !bt || !bs || !want || !seq) {
    fprintf(stderr, "dsinfer perplexity: out of memory for %zu rows of logits\n", rows);
    goto free_bufs;
  }
  double nll = 0, nll2 = 0, t_fwd = 0;
  long scored = 0, run = 0;
  double t0 = now();
  for (int i0 = 0; i0 < n_windows; i0 += batch) {
    int nb = n_windows - i0 < batch ? n_windows - i0 : batch, nt = 0;
    for (int b = 0; b < nb; b++) {
      seq[b] = dsi_seq_new(e);
      const window *wi = &w[i0 + b];
      for (int j = 0; j < ctx; j++, nt++) {
        bt[nt] = j == 0 && bos >= 0 ? bos : ids[wi->start + j];
        bs[nt] = seq[b];
        want[nt] = j >= wi->first && j < ctx - 1;
      }
    }
    double t1 = now();
    dsi_batch db = {.n_tokens = nt, .tokens = bt, .seq = bs, .want_logits = want};
    int st = dsi_engine_forward(e, &db, logits);
    t_fwd += now() - t1;
    for (int b = 0; b < nb; b++) dsi_seq_free(e, seq[b]);
    if (st) {
      fprintf(stderr, "dsinfer perplexity: %s\n", dsi_engine_error(e)->msg);
      goto free_bufs;
    }
    run += nt;
    size_t r = 0;
    for (int b = 0; b < nb; b++) {
      const window *wi = &w[i0 + b];
      for (int j = wi->first; j < ctx - 1; j++, r++) {
        double x = token_nll(logits + r * V, V, ids[wi->start + j + 1]);
        nll += x;
        nll2 += x * x;
        scored++;
      }
    }
    fprintf(stderr, "perplexity: [%d/%d] %.4f (%.0f tokens/s)\n", i0 + nb, n_windows, exp(nll / scored),
            run / t_fwd);
  }
  double wall = now() - t0, mean = nll / scored;
  /* the standard error of the mean NLL, and the perplexity's through exp */
  double var = scored > 1 ? (nll2 / scored - mean * mean) * scored / (scored - 1) : 0;
  double se = sqrt(var > 0 ? var / scored : 0), ppl = exp(mean);
  if (json) {
    char stride_s[16] = "null";
    if (stride) snprintf(stride_s, sizeof stride_s, "%d", stride);
    printf("{\"perplexity\": %.9g, \"perplexity_stderr\": %.6g, \"tokens\": %ld, \"nll_mean\": %.12g, "
           "\"tokens_per_s\": %.1f, \"windows\": %d, \"ctx\": %d, \"stride\": %s, \"batch\": %d, "
           "\"text_tokens\": %zu, \"seconds\": %.3f}\n",
           ppl, ppl * se, scored, mean, run / t_fwd, n_windows, ctx, stride_s, batch, n_ids, wall);
  } else
    printf("perplexity: %.4f +/- %.4f over %ld tokens (%d windows of %d%s; %.0f tokens/s)\n", ppl, ppl * se, scored,
           n_windows, ctx, stride ? ", strided" : "", run / t_fwd);
  rc = 0;
free_bufs:
  free(logits); free(bt); free(bs); free(want); free(seq);
out:
  free(w);
  free(ids);
  dsi_engine_free(e);
  dsi_model_free(m);
  return rc;
}
