/* tools: `dsinfer serve` — the OpenAI-compatible server: the checkpoint's
 * tokenizer and chat format, an engine and its scheduler, the HTTP server
 * over them; SIGINT / SIGTERM stop taking requests, let the ones in flight
 * finish for a while, cancel the rest, and exit 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsinfer.h"
#include "server/server.h"
#include "tools/cli.h"
#include "tools/commands.h"

static int fail(const dsi_err *err) {
  fprintf(stderr, "dsinfer serve: %s\n", err->msg);
  return 1;
}

int dsi_cmd_serve(int argc, char **argv) {
  const char *model = NULL, *host = "127.0.0.1", *key = NULL, *name = NULL, *tmpl = NULL;
  int port = 8000, max_seqs = 0, max_tokens = 0, ctx = 0, max_waiting = 0, quiet = 0, kv_blocks = 0, chunk = 0;
  float grace = 30.0f, keepalive = 15.0f;
  run_opts ro = {0};
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "checkpoint directory (config.json, safetensors, tokenizer.json)"},
    {"--host", NULL, OPT_STR, &host, "address to listen on (default 127.0.0.1; 0.0.0.0 or :: for every interface)"},
    {"--port", NULL, OPT_INT, &port, "TCP port (default 8000; 0: any free one, printed)", 0, 65535},
    {"--api-key", NULL, OPT_STR, &key, "clients must send Authorization: Bearer KEY or x-api-key: KEY "
                                       "(default: $DSINFER_API_KEY, else none)"},
    {"--served-model-name", NULL, OPT_STR, &name, "the model's name in the API (default: the checkpoint folder's name); "
                                                  "NAME,ALIAS,...: requests may name any, answers say the first"},
    {"--max-seqs", NULL, OPT_INT, &max_seqs, "completions running at once (default 64)", 0, 4096},
    {"--max-batched-tokens", NULL, OPT_INT, &max_tokens, "tokens in one step (default 512)", 0, DSI_CLI_MAX_TOKENS},
    {"--prefill-chunk", NULL, OPT_INT, &chunk, "prompt tokens in one step while requests decode in it (default: sized on the fly)",
     0, DSI_CLI_MAX_TOKENS},
    {"--ctx", NULL, OPT_INT, &ctx, "longest sequence, prompt and completion, up to max_position_embeddings "
                                   "(default: min(max_position_embeddings, 4096))", 0, DSI_CLI_MAX_TOKENS},
    {"--kv-blocks", NULL, OPT_INT, &kv_blocks, "KV blocks of 64 tokens (default: 8 full contexts)", 0, DSI_CLI_MAX_TOKENS},
    {"--chat-template", NULL, OPT_STR, &tmpl, "a Jinja chat template file instead of tokenizer_config.json's"},
    {"--max-waiting", NULL, OPT_INT, &max_waiting, "waiting completions past which new requests get 503 (default 256)"},
    {"--shutdown-timeout", NULL, OPT_FLOAT, &grace, "seconds requests in flight may finish after SIGINT/SIGTERM (default 30)", 0, 86400},
    {"--sse-keepalive", NULL, OPT_FLOAT, &keepalive, "seconds a stream may stay silent (queued, a long prefill) before "
                                                     "a keep-alive event (default 15; 0: never)", 0, 86400},
    {"--quiet", NULL, OPT_FLAG, &quiet, "no line per request on stderr"},
    RUN_OPTS(ro),
    {0}};
  int rc = dsi_cli_parse("serve", "--model DIR [--host H] [--port P] [--api-key KEY] [options]", opts, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  if (!model) return dsi_cli_usage_error("serve", "--model is required");
  if (port < 0 || port > 65535) return dsi_cli_usage_error("serve", "--port must be in [0, 65535]");
  if (name && (!*name || *name == ',' || strstr(name, ",,") || name[strlen(name) - 1] == ','))
    return dsi_cli_usage_error("serve", "--served-model-name: names separated by single commas, none empty");
  if (max_seqs < 0 || max_tokens < 0 || chunk < 0 || ctx < 0 || max_waiting < 0 || kv_blocks < 0 || grace < 0)
    return dsi_cli_usage_error("serve", "--max-seqs, --max-batched-tokens, --prefill-chunk, --ctx, --kv-blocks, --max-waiting and "
                                        "--shutdown-timeout must be >= 0");
  int act;
  if ((rc = dsi_cli_check_run_opts("serve", &ro, &act))) return rc;
  if (!key) key = getenv("DSINFER_API_KEY");

  /* the signals go to sigwait below, not to whichever thread runs */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  dsi_err err = {0};
  char json[4200], cfg[4200];
  snprintf(json, sizeof json, "%s/tokenizer.json", model);
  snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", model);
  dsi_tok *tok = NULL;
  dsi_chat_fmt *fmt = NULL;
  if (access(json, R_OK)) {
    fprintf(stderr, "dsinfer serve: %s: not found: the checkpoint has no tokenizer\n", json);
    return 1;
  }
  if (dsi_tok_open(&tok, json, access(cfg, R_OK) ? NULL : cfg, dsi_cli_tok_flags(), &err) ||
      (tmpl ? dsi_chat_fmt_open_file(&fmt, model, tmpl, &err) : dsi_chat_fmt_open(&fmt, model, &err))) {
    dsi_tok_free(tok);
    return fail(&err);
  }
  dsi_model *m = NULL;
  dsi_engine *e = NULL;
  ro.kv_blocks = kv_blocks;
  if (dsi_cli_open_engine("serve", model, &ro, act, max_tokens ? max_tokens : 512, ctx, ctx ? "--ctx" : NULL, &m, &e)) {
    dsi_chat_fmt_free(fmt);
    dsi_tok_free(tok);
    return 1;
  }
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  int max_context = ctx ? ctx : info.max_position_embeddings < 4096 ? info.max_position_embeddings : 4096;
  dsi_sched *s = NULL;
  dsi_server *srv = NULL;
  dsi_sched_opts so = {.max_seqs = max_seqs, .max_batched_tokens = max_tokens, .prefill_chunk = chunk};
  if (dsi_sched_open(&s, e, tok, &so, &err)) {
    rc = fail(&err);
    goto out;
  }
  /* the folder's last name, as vLLM names a model by its path */
  char dflt[256];
  const char *base = strrchr(model, '/');
  snprintf(dflt, sizeof dflt, "%s", base && base[1] ? base + 1 : model);
  size_t dl = strlen(dflt);
  while (dl > 1 && dflt[dl - 1] == '/') dflt[--dl] = 0;
  dsi_gen_config gen;
  if (dsi_gen_config_load(model, &gen, &err)) {
    rc = fail(&err);
    goto out;
  }
  dsi_server_opts sv = {.host = host, .port = port, .api_key = key, .model_name = name ? name : dflt,
                        .ctx = max_context, .max_waiting = max_waiting, .quiet = quiet, .gen = &gen,
                        .keepalive_s = keepalive > 0 ? keepalive : -1};
  if (dsi_server_open(&srv, s, tok, fmt, &sv, &err)) {
    rc = fail(&err);
    goto out;
  }
  fprintf(stderr, "dsinfer serve: %s (%s, isa %s) on http://%s%s%s:%d/ — the OpenAI API under /v1%s\n", sv.model_name,
          info.weight_dtype, dsi_engine_isa(e), strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
          dsi_server_port(srv), key && *key ? ", API key required" : "");
  int sig = 0;
  sigwait(&sigs, &sig);
  fprintf(stderr, "dsinfer serve: %s: finishing requests in flight (at most %.0f s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
          grace);
  dsi_server_drain(srv, grace);
  rc = 0;
out:
  dsi_server_free(srv);
  dsi_sched_free(s);
  dsi_engine_free(e);
  dsi_model_free(m);
  dsi_chat_fmt_free(fmt);
  dsi_tok_free(tok);
  if (!rc) fprintf(stderr, "dsinfer serve: stopped\n");
  return rc;
}
