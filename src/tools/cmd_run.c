/* tools: `dsinfer run` (a prompt in, the model's text streamed out) and
 * `dsinfer chat` (a multi-turn conversation in the terminal), both through
 * the checkpoint's own tokenizer and chat template, reasoning shown apart
 * from the answer, and a chat's KV cache reused from turn to turn. */
#define _GNU_SOURCE /* getline, sigaction */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dsinfer.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/sbuf.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* ---- options ---- */

typedef struct run_args {
  const char *model, *prompt, *system;
  int chat, think, no_think, n, ctx, raw, verbose, ignore_eos;
  dsi_sampling sp;
  run_opts ro;
  int act; /* DSI_ACT_* from --precision */
} run_args;

#define RUN_COMMON_OPTS(a)                                                                                          \
  {"--model", NULL, OPT_STR, &(a).model, "checkpoint directory (config.json, safetensors, tokenizer.json)"},        \
  {"--system", NULL, OPT_STR, &(a).system, "a system message"},                                                    \
  {"--think", NULL, OPT_FLAG, &(a).think, "ask a reasoning template (R1, V3.1) to think first"},                   \
  {"--no-think", NULL, OPT_FLAG, &(a).no_think, "ask a reasoning template to answer without thinking"},           \
  {"-n", "--n-predict", OPT_INT, &(a).n, "most tokens per answer (default: run 256, chat 1024)"},                  \
  {"--temperature", NULL, OPT_FLOAT, &(a).sp.temperature, "sampling temperature; 0 = greedy (default 0)"},         \
  {"--top-p", NULL, OPT_FLOAT, &(a).sp.top_p, "nucleus sampling mass (default 1 = off)"},                          \
  {"--top-k", NULL, OPT_INT, &(a).sp.top_k, "sample among the K most likely (default 0 = off)"},                   \
  {"--seed", NULL, OPT_U64, &(a).sp.seed, "random seed (default 0)"},                                              \
  {"--ignore-eos", NULL, OPT_FLAG, &(a).ignore_eos, "keep going past the end-of-sequence token"},              \
  {"--ctx", NULL, OPT_INT, &(a).ctx, "most tokens in the context (default: min(max_position_embeddings, 4096))"}, \
  {"--raw", NULL, OPT_FLAG, &(a).raw, "print the generated text as it is: no reasoning/answer split"},            \
  {"--verbose", "-v", OPT_FLAG, &(a).verbose, "print each prompt's token ids on stderr"},                          \
  RUN_OPTS((a).ro)

/* checks shared by run and chat; 0 or a usage error's exit code */
static int check_args(const char *cmd, run_args *a) {
  if (!a->model) return dsi_cli_usage_error(cmd, "--model is required");
  if (a->n < 0 || a->ctx < 0 || a->sp.temperature < 0 || a->sp.top_p <= 0 || a->sp.top_p > 1 || a->sp.top_k < 0)
    return dsi_cli_usage_error(cmd, "-n, --ctx, --temperature, --top-k must be >= 0 and --top-p in (0, 1]");
  if (a->think && a->no_think) return dsi_cli_usage_error(cmd, "--think and --no-think exclude each other");
  if (!a->chat && (a->system || a->think || a->no_think))
    return dsi_cli_usage_error(cmd, "--system, --think and --no-think need --chat");
  return dsi_cli_check_run_opts(cmd, &a->ro, &a->act);
}

/* ---- the session: tokenizer, template, model, one sequence ---- */

typedef struct session {
  const char *cmd;
  const run_args *a;
  dsi_tok *tok;
  dsi_detok *detok;
  dsi_chat_fmt *fmt; /* NULL without --chat */
  dsi_model *m;
  dsi_engine *e;
  dsi_sampler *smp;
  dsi_model_info info;
  int seq, ctx;
  int32_t stop[3]; /* ids that end an answer: the model's and the tokenizer's EOS */
  int n_stop;
  int32_t *cached; /* the tokens in seq's KV cache, in order */
  int n_cached;
  float *logits;   /* [vocab]: after the last token fed */
  int color;       /* stdout is a terminal (and NO_COLOR unset) */
} session;

static int fail_msg(const session *s, const char *msg) {
  fprintf(stderr, "dsinfer %s: %s\n", s->cmd, msg);
  return 1;
}

static int file_readable(const char *p) { return access(p, R_OK) == 0; }

/* The checkpoint's tokenizer (and chat format): before the weights, so a
 * missing tokenizer fails in a moment. */
static int open_text(session *s) {
  char json[4200], cfg[4200];
  snprintf(json, sizeof json, "%s/tokenizer.json", s->a->model);
  snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", s->a->model);
  if (!file_readable(json)) {
    fprintf(stderr,
            "dsinfer %s: %s: not found: the checkpoint has no tokenizer (put the model's tokenizer.json and "
            "tokenizer_config.json there; mkmodel writes them)\n",
            s->cmd, json);
    return 1;
  }
  dsi_err err = {0};
  if (dsi_tok_open(&s->tok, json, file_readable(cfg) ? cfg : NULL, dsi_cli_tok_flags(), &err) ||
      dsi_detok_open(&s->detok, s->tok, DSI_TOK_SKIP_UNKNOWN, &err) ||
      (s->a->chat && dsi_chat_fmt_open(&s->fmt, s->a->model, &err)))
    return fail_msg(s, err.msg);
  return 0;
}

/* Weights, engine and sampler; ctx_want 0 = the model's default,
 * min(max_position_embeddings, 4096), as the engine's. */
static int open_model(session *s, int ctx_want, int max_tokens) {
  int ctx = s->a->ctx ? s->a->ctx : ctx_want ? ctx_want : 4096;
  run_opts ro = s->a->ro;
  ro.kv_blocks = (ctx + 63) / 64 + 1; /* one sequence: blocks for its context only */
  if (dsi_cli_open_engine(s->cmd, s->a->model, &ro, s->a->act, max_tokens, ctx, &s->m, &s->e)) return 1;
  dsi_model_get_info(s->m, &s->info);
  s->ctx = ctx < s->info.max_position_embeddings ? ctx : s->info.max_position_embeddings;
  if (dsi_tok_vocab_size(s->tok) > s->info.vocab_size)
    fprintf(stderr, "dsinfer %s: warning: the tokenizer has %d ids, the model only %d\n", s->cmd,
            dsi_tok_vocab_size(s->tok), s->info.vocab_size);
  s->smp = dsi_sampler_new(&s->a->sp, s->info.vocab_size);
  s->logits = malloc((size_t)s->info.vocab_size * sizeof(float));
  s->cached = malloc((size_t)s->ctx * sizeof(int32_t));
  if (!s->logits || !s->cached) return fail_msg(s, "out of memory for the logits");
  s->seq = dsi_seq_new(s->e);
  int32_t cand[3] = {s->info.eos_token_id, dsi_tok_eos_id(s->tok), -1};
  if (s->fmt && dsi_chat_fmt_eos(s->fmt)) cand[2] = dsi_tok_token_to_id(s->tok, dsi_chat_fmt_eos(s->fmt));
  for (int i = 0; i < 3 && !s->a->ignore_eos; i++) {
    int dup = cand[i] < 0;
    for (int k = 0; k < s->n_stop; k++) dup |= s->stop[k] == cand[i];
    if (!dup) s->stop[s->n_stop++] = cand[i];
  }
  const char *nc = getenv("NO_COLOR");
  s->color = isatty(STDOUT_FILENO) && !(nc && *nc);
  return 0;
}

static void session_close(session *s) {
  free(s->logits);
  free(s->cached);
  dsi_sampler_free(s->smp);
  dsi_engine_free(s->e);
  dsi_model_free(s->m);
  dsi_chat_fmt_free(s->fmt);
  dsi_detok_free(s->detok);
  dsi_tok_free(s->tok);
}

/* ---- prompts ---- */

/* The conversation as the template renders it, then its tokens (the
 * template writes BOS itself; special tokens in it are recognized). */
static int chat_prompt(session *s, const char *messages_json, char **text, int32_t **ids, size_t *n) {
  const char *extra = s->a->think ? "{\"thinking\":true,\"enable_thinking\":true}"
                      : s->a->no_think ? "{\"thinking\":false,\"enable_thinking\":false}" : NULL;
  dsi_err err = {0};
  if (dsi_chat_fmt_render(s->fmt, messages_json, 1, extra, text, &err) ||
      dsi_tok_encode(s->tok, *text, strlen(*text), DSI_TOK_REPLACE_INVALID, ids, n, &err))
    return fail_msg(s, err.msg);
  return 0;
}

static void print_ids(const session *s, const int32_t *ids, size_t n) {
  fprintf(stderr, "dsinfer %s: prompt (%zu tokens):", s->cmd, n);
  for (size_t i = 0; i < n; i++) fprintf(stderr, "%s%d", i ? "," : " ", ids[i]);
  fputc('\n', stderr);
}

/* Make seq hold ids and leave the logits after the last: the part already
 * cached is kept (*reused tokens), the cache cut back to where they part,
 * the rest fed. Returns 0, or 1 after printing the cause. */
static int feed_prompt(session *s, const int32_t *ids, int n, int *reused) {
  if (n <= 0) return fail_msg(s, "the prompt is empty (it has no tokens)");
  if (n >= s->ctx) {
    fprintf(stderr, "dsinfer %s: the prompt has %d tokens; the context holds %d (--ctx)\n", s->cmd, n, s->ctx);
    return 1;
  }
  int p = 0;
  while (p < n && p < s->n_cached && s->cached[p] == ids[p]) p++;
  if (p == n) p--; /* the last token is fed again: its logits are wanted */
  if (p < s->n_cached && dsi_seq_truncate(s->e, s->seq, p)) return fail_msg(s, dsi_engine_error(s->e)->msg);
  s->n_cached = p;
  *reused = p;
  int k = n - p;
  int32_t *seqv = malloc((size_t)k * sizeof(int32_t));
  uint8_t *want = calloc((size_t)k, 1);
  if (!seqv || !want) {
    free(seqv);
    free(want);
    return fail_msg(s, "out of memory for the prompt");
  }
  for (int i = 0; i < k; i++) seqv[i] = s->seq;
  want[k - 1] = 1;
  dsi_batch b = {.n_tokens = k, .tokens = ids + p, .seq = seqv, .want_logits = want};
  int rc = dsi_engine_forward(s->e, &b, s->logits);
  free(seqv);
  free(want);
  if (rc) {
    /* what the engine kept is unknown: start the next prompt afresh */
    dsi_seq_truncate(s->e, s->seq, 0);
    s->n_cached = 0;
    return fail_msg(s, dsi_engine_error(s->e)->msg);
  }
  memcpy(s->cached + p, ids + p, (size_t)k * sizeof(int32_t));
  s->n_cached = n;
  return 0;
}

/* ---- showing the answer ---- */

/* Raw: the text as generated. Otherwise the reasoning apart from the
 * answer: on a terminal, dimmed under "thinking:"; else on stderr after
 * "thinking: ", the answer alone on stdout. */
typedef struct view {
  const session *s;
  int raw;
  dsi_chat_out *out;
  int thinking;   /* reasoning being shown */
  int thought;    /* some reasoning was shown */
  int answered;   /* some answer was shown */
} view;

static void view_reasoning(view *v, const char *t, size_t n) {
  if (!n) return;
  if (!v->thinking) {
    v->thinking = v->thought = 1;
    if (v->s->color) fputs("\033[2mthinking:\n", stdout);
    else fputs("thinking: ", stderr);
  }
  fwrite(t, 1, n, v->s->color ? stdout : stderr);
  fflush(v->s->color ? stdout : stderr);
}

/* the reasoning is over; an answer follows when more */
static void view_end_reasoning(view *v, int more) {
  if (!v->thinking) return;
  v->thinking = 0;
  if (v->s->color) fputs(more ? "\033[0m\n\n" : "\033[0m", stdout);
  else fputc('\n', stderr);
  fflush(stdout);
}

static void view_delta(view *v, const dsi_chat_out_delta *d) {
  view_reasoning(v, d->reasoning, d->reasoning_len);
  if (d->content_len) {
    view_end_reasoning(v, 1);
    fwrite(d->content, 1, d->content_len, stdout);
    v->answered = 1;
  }
}

static void view_piece(view *v, const char *piece, size_t len) {
  if (!len) return;
  dsi_chat_out_delta d;
  dsi_chat_out_feed(v->out, piece, len, &d, NULL);
  if (v->raw) fwrite(piece, 1, len, stdout);
  else view_delta(v, &d);
  fflush(stdout);
}

static void view_finish(view *v) {
  dsi_chat_out_delta d;
  dsi_chat_out_finish(v->out, &d, NULL);
  if (v->raw) return;
  view_delta(v, &d);
  view_end_reasoning(v, d.n_tool_calls > 0);
  for (int i = 0; i < d.n_tool_calls; i++) {
    const char *name, *args;
    dsi_chat_out_tool_call(v->out, i, &name, &args);
    printf("%stool call: %s %s", v->answered || i ? "\n" : "", name, args);
  }
  fflush(stdout);
}

/* ---- generating ---- */

static volatile sig_atomic_t g_interrupted;
static void on_sigint(int sig) {
  (void)sig;
  g_interrupted = 1;
}

typedef struct gen_stats {
  int prompt, reused, produced, stopped_by; /* stopped_by: 0 end/limit, 1 interrupted, 2 context full */
  double t_prefill, t_decode;
} gen_stats;

/* Sample after the prompt until a stop token, n tokens, a full context or
 * (with check_sigint) Ctrl-C; each piece of text shown as it becomes final.
 * The sampled tokens that were fed stay in the cache (s->cached). */
static int generate(session *s, view *v, int n_max, int check_sigint, gen_stats *st) {
  dsi_err err = {0};
  dsi_detok_reset(s->detok);
  double t0 = now();
  int rc = 0;
  for (int i = 0; i < n_max; i++) {
    if (check_sigint && g_interrupted) {
      st->stopped_by = 1;
      break;
    }
    /* ids past the tokenizer's (a checkpoint's padding rows) are never drawn */
    for (int id = dsi_tok_vocab_size(s->tok); id < s->info.vocab_size; id++) s->logits[id] = -INFINITY;
    int32_t tok = dsi_sampler_sample(s->smp, s->logits);
    int stop = 0;
    for (int k = 0; k < s->n_stop; k++) stop |= tok == s->stop[k];
    if (stop) break;
    st->produced++;
    const char *piece;
    size_t len;
    if ((rc = dsi_detok_push(s->detok, tok, &piece, &len, &err))) break;
    view_piece(v, piece, len);
    if (i + 1 == n_max) break;
    if (s->n_cached + 1 > s->ctx) {
      st->stopped_by = 2;
      break;
    }
    dsi_batch d = {.n_tokens = 1, .tokens = &tok, .seq = &s->seq};
    if ((rc = dsi_engine_forward(s->e, &d, s->logits))) {
      err = *dsi_engine_error(s->e);
      break;
    }
    s->cached[s->n_cached++] = tok;
  }
  st->t_decode = now() - t0;
  const char *piece;
  size_t len;
  dsi_detok_flush(s->detok, &piece, &len);
  view_piece(v, piece, len);
  view_finish(v);
  if (rc) return fail_msg(s, err.msg);
  return 0;
}

static void print_stats(const session *s, const gen_stats *st, int chat) {
  int fed = st->prompt - st->reused;
  if (chat) fprintf(stderr, "%s", s->color && isatty(STDERR_FILENO) ? "\033[2m" : "");
  if (st->stopped_by == 1) fprintf(stderr, "[interrupted] ");
  if (st->stopped_by == 2) fprintf(stderr, "[context full: %d tokens] ", s->ctx);
  fprintf(stderr, "prefill: %d tokens", fed);
  if (chat) fprintf(stderr, " (%d cached)", st->reused);
  fprintf(stderr, ", %.1f tokens/s; decode: %d tokens, %.2f tokens/s%s\n", fed / (st->t_prefill > 0 ? st->t_prefill : 1e-9),
          st->produced, st->produced > 1 ? (st->produced - 1) / st->t_decode : 0.0,
          chat && s->color && isatty(STDERR_FILENO) ? "\033[0m" : "");
}

/* ---- run ---- */

int dsi_cmd_run(int argc, char **argv) {
  const char *cmd = "run";
  run_args a = {.n = 256, .sp = {.temperature = 0, .top_p = 1, .top_k = 0, .seed = 0}};
  const dsi_opt opts[] = {
      {"--prompt", "-p", OPT_STR, &a.prompt, "the prompt text"},
      {"--chat", NULL, OPT_FLAG, &a.chat, "wrap the prompt in the chat template as a user message"},
      RUN_COMMON_OPTS(a),
      {0}};
  int rc = dsi_cli_parse(cmd, "--model DIR --prompt TEXT [--chat [--system S] [--think | --no-think]] [-n N] [options]",
                         opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!a.prompt) return dsi_cli_usage_error(cmd, "--model and --prompt are required");
  if ((rc = check_args(cmd, &a))) return rc;

  session s = {.cmd = cmd, .a = &a};
  char *text = NULL;
  int32_t *ids = NULL;
  size_t n = 0;
  dsi_chat_out *out = NULL;
  dsi_err err = {0};
  if ((rc = open_text(&s))) goto done;
  if (a.chat) {
    sbuf msgs = {0};
    sb_str(&msgs, "[");
    if (a.system) {
      sb_str(&msgs, "{\"role\":\"system\",\"content\":");
      sb_json(&msgs, a.system);
      sb_str(&msgs, "},");
    }
    sb_str(&msgs, "{\"role\":\"user\",\"content\":");
    sb_json(&msgs, a.prompt);
    sb_str(&msgs, "}]");
    rc = chat_prompt(&s, msgs.p, &text, &ids, &n);
    free(msgs.p);
    if (rc) goto done;
  } else if (dsi_tok_encode(s.tok, a.prompt, strlen(a.prompt), DSI_TOK_ADD_SPECIAL | DSI_TOK_REPLACE_INVALID, &ids,
                            &n, &err)) {
    rc = fail_msg(&s, err.msg);
    goto done;
  }
  if (a.verbose) print_ids(&s, ids, n);
  if ((rc = open_model(&s, (int)n + a.n + 1, n < 512 ? (int)n : 512))) goto done;
  if ((rc = dsi_chat_out_open(&out, text && dsi_chat_prompt_in_reasoning(text), &err))) {
    rc = fail_msg(&s, err.msg);
    goto done;
  }
  gen_stats st = {.prompt = (int)n};
  double t0 = now();
  if ((rc = feed_prompt(&s, ids, (int)n, &st.reused))) goto done;
  st.t_prefill = now() - t0;
  /* without --chat the text is a continuation: shown as generated */
  view v = {.s = &s, .raw = a.raw || !a.chat, .out = out};
  rc = generate(&s, &v, a.n, 0, &st);
  fputc('\n', stdout);
  if (fflush(stdout)) rc = 1;
  if (!rc) print_stats(&s, &st, 0);
done:
  dsi_chat_out_free(out);
  free(text);
  free(ids);
  session_close(&s);
  return rc;
}

/* ---- chat ---- */

typedef struct turn {
  char *role, *content;
} turn;

static void history_json(sbuf *b, const char *system, const turn *h, int n) {
  b->n = 0;
  sb_str(b, "[");
  if (system) {
    sb_str(b, "{\"role\":\"system\",\"content\":");
    sb_json(b, system);
    sb_str(b, "}");
  }
  for (int i = 0; i < n; i++) {
    sb_str(b, system || i ? ",{\"role\":" : "{\"role\":");
    sb_json(b, h[i].role);
    sb_str(b, ",\"content\":");
    sb_json(b, h[i].content);
    sb_str(b, "}");
  }
  sb_str(b, "]");
}

static void history_push(turn **h, int *n, const char *role, const char *content) {
  turn *t = realloc(*h, (size_t)(*n + 1) * sizeof **h);
  if (!t) abort();
  *h = t;
  t[*n].role = strdup(role);
  t[*n].content = strdup(content);
  if (!t[*n].role || !t[*n].content) abort();
  (*n)++;
}

static void history_clear(turn *h, int *n) {
  for (int i = 0; i < *n; i++) free(h[i].role), free(h[i].content);
  *n = 0;
}

/* One turn: the whole conversation rendered again, only the tokens past
 * the cached prefix fed, the answer streamed and put back into history
 * (its answer only: reasoning is left out, as R1's and V3.1's templates
 * leave it out themselves). Returns 0, or 1 when the prompt could not be
 * fed (nothing was answered). */
static int chat_turn(session *s, turn **hist, int *n_hist, sbuf *msgs) {
  history_json(msgs, s->a->system, *hist, *n_hist);
  char *text = NULL;
  int32_t *ids = NULL;
  size_t n = 0;
  if (chat_prompt(s, msgs->p, &text, &ids, &n)) return 1;
  if (s->a->verbose) print_ids(s, ids, n);
  gen_stats st = {.prompt = (int)n};
  dsi_chat_out *out = NULL;
  dsi_err err = {0};
  int rc = dsi_chat_out_open(&out, dsi_chat_prompt_in_reasoning(text), &err) ? fail_msg(s, err.msg) : 0;
  double t0 = now();
  if (!rc) rc = feed_prompt(s, ids, (int)n, &st.reused);
  st.t_prefill = now() - t0;
  if (!rc) { /* from here the turn stands, even if generating fails part way */
    view v = {.s = s, .raw = s->a->raw, .out = out};
    int grc = generate(s, &v, s->a->n, 1, &st);
    fputc('\n', stdout);
    fflush(stdout);
    history_push(hist, n_hist, "assistant", dsi_chat_out_content(out));
    if (!grc) print_stats(s, &st, 1);
  }
  dsi_chat_out_free(out);
  free(text);
  free(ids);
  return rc;
}

int dsi_cmd_chat(int argc, char **argv) {
  const char *cmd = "chat";
  run_args a = {.chat = 1, .n = 1024, .sp = {.temperature = 0, .top_p = 1, .top_k = 0, .seed = 0}};
  const dsi_opt opts[] = {RUN_COMMON_OPTS(a), {0}};
  int rc = dsi_cli_parse(cmd, "--model DIR [--system S] [--think | --no-think] [-n N] [options]\n\n"
                              "Type a message and Enter. /reset clears the conversation, /exit (or end of input) "
                              "ends it;\nCtrl-C stops an answer, and at the empty prompt ends the chat.",
                         opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if ((rc = check_args(cmd, &a))) return rc;
  session s = {.cmd = cmd, .a = &a};
  if ((rc = open_text(&s)) || (rc = open_model(&s, 0, 512))) {
    session_close(&s);
    return rc;
  }
  struct sigaction sa = {0}, old;
  sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt ends the read */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);
  int tty_in = isatty(STDIN_FILENO);
  if (tty_in)
    fprintf(stderr, "dsinfer chat: %s — /reset clears the conversation, /exit ends it, Ctrl-C stops an answer\n",
            a.model);
  turn *hist = NULL;
  int n_hist = 0;
  sbuf msgs = {0};
  char *line = NULL;
  size_t cap = 0;
  for (;;) {
    fputs("> ", stdout);
    fflush(stdout);
    g_interrupted = 0;
    errno = 0;
    ssize_t got = getline(&line, &cap, stdin);
    if (got < 0) { /* end of input, or Ctrl-C at the prompt */
      if (tty_in || g_interrupted) fputc('\n', stdout);
      break;
    }
    while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
    if (!got) continue;
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
    if (!strcmp(line, "/reset")) {
      history_clear(hist, &n_hist);
      dsi_seq_truncate(s.e, s.seq, 0);
      s.n_cached = 0;
      fprintf(stderr, "[conversation cleared]\n");
      continue;
    }
    history_push(&hist, &n_hist, "user", line);
    if (chat_turn(&s, &hist, &n_hist, &msgs)) {
      /* the message could not be answered (too long for the context): forget it */
      free(hist[n_hist - 1].role);
      free(hist[n_hist - 1].content);
      n_hist--;
    }
  }
  sigaction(SIGINT, &old, NULL);
  history_clear(hist, &n_hist);
  free(hist);
  free(msgs.p);
  free(line);
  session_close(&s);
  return fflush(stdout) ? 1 : 0;
}
