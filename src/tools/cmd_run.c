/* tools: `dsinfer run` (a prompt in, the model's text streamed out) and
 * `dsinfer chat` (a multi-turn conversation in the terminal), both through
 * the checkpoint's own tokenizer and chat template, as requests on the
 * engine's scheduler (dsi_sched): reasoning shown apart from the answer,
 * and a chat's earlier turns found in the prefix cache. */
#define _GNU_SOURCE /* getline, sigaction */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dsinfer.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "base/sbuf.h"
#include "tokenizer/tokenizer.h"

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* ---- options ---- */

typedef struct run_args {
  const char *model, *prompt, *system, *json_schema_arg, *regex;
  int chat, think, no_think, n, ctx, raw, verbose, ignore_eos, replace_invalid, json;
  char *schema; /* --json-schema's text (read from its file) */
  dsi_sampling sp;
  run_opts ro;
  int act; /* DSI_ACT_* from --precision */
} run_args;

#define RUN_COMMON_OPTS(a)                                                                                          \
  {"--model", NULL, OPT_STR, &(a).model, "checkpoint directory (config.json, safetensors, tokenizer.json)"},        \
  {"--system", NULL, OPT_STR, &(a).system, "a system message"},                                                    \
  {"--think", NULL, OPT_FLAG, &(a).think, "ask a reasoning template (R1, V3.1) to think first"},                   \
  {"--no-think", NULL, OPT_FLAG, &(a).no_think, "ask a reasoning template to answer without thinking"},           \
  {"-n", "--n-predict", OPT_INT, &(a).n, "most tokens per answer (default: generation_config.json's max_new_tokens, else run 256, chat 1024)"},                  \
  SAMPLING_OPTS((a).sp),                                                                                            \
  {"--ignore-eos", NULL, OPT_FLAG, &(a).ignore_eos, "keep going past the end-of-sequence token"},              \
  {"--ctx", NULL, OPT_INT, &(a).ctx, "most tokens in the context, up to max_position_embeddings "                  \
                                     "(default: min(max_position_embeddings, 4096))", 0, DSI_CLI_MAX_TOKENS},          \
  {"--replace-invalid", NULL, OPT_FLAG, &(a).replace_invalid, "invalid UTF-8 in the text given becomes U+FFFD "    \
                                                              "(default: an error)"},                              \
  {"--raw", NULL, OPT_FLAG, &(a).raw, "print the generated text as it is: no reasoning/answer split"},            \
  {"--json", NULL, OPT_FLAG, &(a).json, "the answer is one JSON object: a token that cannot continue it is never "  \
                                        "drawn, and the answer ends as it closes"},                                \
  {"--json-schema", NULL, OPT_STR, &(a).json_schema_arg, "the answer is one value of this JSON Schema (its text, " \
                                                         "or a file holding it), held as --json holds an object"}, \
  {"--regex", NULL, OPT_STR, &(a).regex, "the answer is text that matches this regular expression as a whole "      \
                                         "(ECMA-262): a stop token only where it matches"},                        \
  {"--verbose", "-v", OPT_FLAG, &(a).verbose, "print each prompt's token ids on stderr"},                          \
  RUN_OPTS((a).ro)

/* checks shared by run and chat; 0 or a usage error's exit code */
static int check_args(const char *cmd, run_args *a, int n_default) {
  if (!a->model) return dsi_cli_usage_error(cmd, "--model is required");
  if (dsi_cli_gen_defaults(cmd, a->model, &a->sp, &a->n, n_default)) return 1;
  if (a->sp.top_p <= 0) return dsi_cli_usage_error(cmd, "--top-p must be in (0, 1]");
  if (a->think && a->no_think) return dsi_cli_usage_error(cmd, "--think and --no-think exclude each other");
  if (!a->chat && (a->system || a->think || a->no_think))
    return dsi_cli_usage_error(cmd, "--system, --think and --no-think need --chat");
  int rc = dsi_cli_check_run_opts(cmd, &a->ro, &a->act);
  if (rc) return rc;
  if (a->regex && (a->json || a->json_schema_arg))
    return dsi_cli_usage_error(cmd, "--regex excludes --json and --json-schema");
  if (a->regex) {
    dsi_err err = {0};
    if (dsi_regex_check(a->regex, strlen(a->regex), &err)) {
      fprintf(stderr, "dsinfer %s: --regex: %s\n", cmd, err.msg);
      return 2;
    }
  }
  if (a->json_schema_arg) { /* the schema's text, or its file's; checked here */
    const char *t = a->json_schema_arg;
    while (*t == ' ' || *t == '\t' || *t == '\n' || *t == '\r') t++;
    dsi_err err = {0};
    size_t n = 0;
    if (*t == '{' || !strcmp(t, "true")) {
      if (!(a->schema = strdup(a->json_schema_arg))) return dsi_cli_usage_error(cmd, "out of memory for --json-schema");
      n = strlen(a->schema);
    } else if (dsi_read_file(a->json_schema_arg, &a->schema, &n, &err)) {
      fprintf(stderr, "dsinfer %s: --json-schema: %s\n", cmd, err.msg);
      return 2;
    }
    if (dsi_json_schema_check(a->schema, n, &err)) {
      fprintf(stderr, "dsinfer %s: --json-schema: %s\n", cmd, err.msg);
      free(a->schema), a->schema = NULL;
      return 2;
    }
    a->json = 1;
  }
  return 0;
}

/* ---- what run and chat hold: tokenizer, template, model, a scheduler ---- */

typedef struct runner {
  const char *cmd;
  const run_args *a;
  dsi_tok *tok;
  dsi_chat_fmt *fmt; /* NULL without --chat */
  dsi_model *m;
  dsi_engine *e;
  dsi_sched *sched;
  dsi_model_info info;
  int ctx;
  int32_t stop_id;   /* the chat format's EOS, when it is not the model's; -1 */
  int color;         /* stdout is a terminal (and NO_COLOR unset) */
} runner;

static int fail_msg(const runner *s, const char *msg) {
  fprintf(stderr, "dsinfer %s: %s\n", s->cmd, msg);
  return 1;
}

static int file_readable(const char *p) { return access(p, R_OK) == 0; }

/* The rule for text a user gives (the prompt, --system, a chat line), as
 * tokenize's: invalid UTF-8 is an error naming where, unless
 * --replace-invalid makes it U+FFFD. 0, or 1 after printing the error. */
static int check_utf8(const runner *s, const char *what, const char *text) {
  size_t n = strlen(text), ok = dsi_utf8_valid_prefix((const uint8_t *)text, n);
  if (ok == n || s->a->replace_invalid) return 0;
  fprintf(stderr, "dsinfer %s: %s is not valid UTF-8 at byte offset %zu (byte 0x%02X); --replace-invalid makes it U+FFFD\n",
          s->cmd, what, ok, (uint8_t)text[ok]);
  return 1;
}

/* The checkpoint's tokenizer (and chat format): before the weights, so a
 * missing tokenizer fails in a moment. */
static int open_text(runner *s) {
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
      (s->a->chat && dsi_chat_fmt_open(&s->fmt, s->a->model, &err)))
    return fail_msg(s, err.msg);
  return 0;
}

/* Weights, engine and scheduler; ctx_want 0 = the model's default,
 * min(max_position_embeddings, 4096), as the engine's; --ctx over the
 * model's context is an error, ctx_want is cut to it. One completion at a
 * time, with a KV pool for one full context (which keeps a chat's turns
 * in the prefix cache). */
static int open_model(runner *s, int64_t ctx_want, int max_tokens) {
  int64_t ctx = s->a->ctx ? s->a->ctx : ctx_want;
  run_opts ro = s->a->ro;
  ro.kv_blocks = -1;
  if (dsi_cli_open_engine(s->cmd, s->a->model, &ro, s->a->act, max_tokens, ctx, s->a->ctx ? "--ctx" : NULL, &s->m,
                          &s->e))
    return 1;
  dsi_model_get_info(s->m, &s->info);
  if (!ctx) ctx = 4096;
  s->ctx = ctx < s->info.max_position_embeddings ? (int)ctx : s->info.max_position_embeddings;
  if (dsi_tok_vocab_size(s->tok) > s->info.vocab_size)
    fprintf(stderr, "dsinfer %s: warning: the tokenizer has %d ids, the model only %d\n", s->cmd,
            dsi_tok_vocab_size(s->tok), s->info.vocab_size);
  dsi_err err = {0};
  dsi_sched_opts so = {.max_seqs = 1};
  if (dsi_sched_open(&s->sched, s->e, s->tok, &so, &err)) return fail_msg(s, err.msg);
  s->stop_id = -1;
  if (s->fmt && dsi_chat_fmt_eos(s->fmt)) s->stop_id = dsi_tok_token_to_id(s->tok, dsi_chat_fmt_eos(s->fmt));
  const char *nc = getenv("NO_COLOR");
  s->color = isatty(STDOUT_FILENO) && !(nc && *nc);
  return 0;
}

static void runner_close(runner *s) {
  dsi_sched_free(s->sched);
  dsi_engine_free(s->e);
  dsi_model_free(s->m);
  dsi_chat_fmt_free(s->fmt);
  dsi_tok_free(s->tok);
}

/* ---- prompts ---- */

/* The conversation as the template renders it, then its tokens (the
 * template writes BOS itself; special tokens in it are recognized). */
static int chat_prompt(runner *s, const char *messages_json, char **text, int32_t **ids, size_t *n) {
  const char *extra = s->a->think ? "{\"thinking\":true,\"enable_thinking\":true}"
                      : s->a->no_think ? "{\"thinking\":false,\"enable_thinking\":false}" : NULL;
  dsi_err err = {0};
  if (dsi_chat_fmt_render(s->fmt, messages_json, 1, extra, text, &err)) return fail_msg(s, err.msg);
  if ((s->a->json || s->a->regex) && dsi_chat_prompt_in_reasoning(*text)) { /* held output: the reasoning closed first */
    static const char close[] = "</think>\n\n";
    size_t tl = strlen(*text);
    char *t = realloc(*text, tl + sizeof close);
    if (!t) return fail_msg(s, "out of memory for the prompt");
    memcpy(t + tl, close, sizeof close);
    *text = t;
  }
  if (dsi_tok_encode(s->tok, *text, strlen(*text), DSI_TOK_REPLACE_INVALID, ids, n, &err)) return fail_msg(s, err.msg);
  return 0;
}

static void print_ids(const runner *s, const int32_t *ids, size_t n) {
  fprintf(stderr, "dsinfer %s: prompt (%zu tokens):", s->cmd, n);
  for (size_t i = 0; i < n; i++) fprintf(stderr, "%s%d", i ? "," : " ", ids[i]);
  fputc('\n', stderr);
}

/* ---- showing the answer ---- */

/* Raw: the text as generated. Otherwise the reasoning apart from the
 * answer: on a terminal, dimmed under "thinking:"; else on stderr after
 * "thinking: ", the answer alone on stdout. */
typedef struct view {
  const runner *s;
  int raw;
  dsi_chat_out *out;
  int thinking;   /* reasoning being shown */
  int thought;    /* some reasoning was shown */
  int answered;   /* some answer was shown */
  int oom;        /* the output parser ran out of memory: nothing more is shown */
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
  if (!len || v->oom) return;
  dsi_chat_out_delta d;
  if (dsi_chat_out_feed(v->out, piece, len, &d, NULL)) { /* it fails only for want of memory */
    v->oom = 1;
    return;
  }
  if (v->raw) fwrite(piece, 1, len, stdout);
  else view_delta(v, &d);
  fflush(stdout);
}

static void view_finish(view *v) {
  dsi_chat_out_delta d;
  if (v->oom || dsi_chat_out_finish(v->out, &d, NULL)) {
    v->oom = 1;
    return;
  }
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

/* One answer as a request: its events shown as they come (on the
 * scheduler's thread), this thread waiting for the last one. */
typedef struct answer {
  view *v;
  gen_stats *st;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  char error[1100];
} answer;

static void on_event(void *user, const dsi_request_event *ev) {
  answer *a = user;
  if (ev->token >= 0) a->st->produced++;
  view_piece(a->v, ev->text, ev->text_len);
  if (!ev->finish) return;
  a->st->reused = ev->cached_tokens;
  a->st->t_prefill = ev->prefill_s;
  a->st->t_decode = ev->decode_s;
  a->st->stopped_by = ev->finish == DSI_FINISH_CANCELLED ? 1 : ev->finish == DSI_FINISH_LENGTH && ev->context_full ? 2 : 0;
  if (ev->finish == DSI_FINISH_ERROR) snprintf(a->error, sizeof a->error, "%s", ev->error ? ev->error : "error");
  pthread_mutex_lock(&a->mu);
  a->done = 1;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

/* The prompt's answer until a stop token, n tokens, a full context or
 * (with check_sigint) Ctrl-C; each piece of text shown as it becomes
 * final. Returns 0; 1 after printing the cause; 2 after printing why the
 * prompt was not taken (nothing was answered). */
static int generate(runner *s, view *v, const int32_t *ids, int n, int n_max, int check_sigint, gen_stats *st) {
  const run_args *ra = s->a;
  dsi_request r = {.prompt = ids, .n_prompt = n, .sampling = ra->sp, .max_tokens = n_max, .ignore_eos = ra->ignore_eos,
                   .stop_ids = &s->stop_id, .n_stop_ids = s->stop_id >= 0 && !ra->ignore_eos, .on_event = on_event,
                   .json = ra->json, .json_schema = ra->schema, .regex = ra->regex};
  answer a = {.v = v, .st = st};
  pthread_mutex_init(&a.mu, NULL);
  pthread_cond_init(&a.cv, NULL);
  r.user = &a;
  dsi_err err = {0};
  uint64_t id;
  int rc = 0;
  if (n_max == 0) { /* nothing to generate: the prompt alone */
    rc = 0;
  } else if (dsi_sched_submit(s->sched, &r, &id, &err)) {
    fail_msg(s, err.msg);
    rc = 2;
  } else {
    int cancelled = 0;
    pthread_mutex_lock(&a.mu);
    while (!a.done) {
      if (check_sigint && g_interrupted && !cancelled) {
        dsi_sched_cancel(s->sched, id);
        cancelled = 1;
      }
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += 50 * 1000000;
      if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
      pthread_cond_timedwait(&a.cv, &a.mu, &until);
    }
    pthread_mutex_unlock(&a.mu);
    if (a.error[0]) rc = fail_msg(s, a.error);
  }
  view_finish(v);
  if (v->oom && !rc) rc = fail_msg(s, "out of memory showing the answer");
  pthread_cond_destroy(&a.cv);
  pthread_mutex_destroy(&a.mu);
  return rc;
}

static void print_stats(const runner *s, const gen_stats *st, int chat) {
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
  run_args a = {.n = -1, .sp = SAMPLING_UNSET};
  const dsi_opt opts[] = {
      {"--prompt", "-p", OPT_STR, &a.prompt, "the prompt text"},
      {"--chat", NULL, OPT_FLAG, &a.chat, "wrap the prompt in the chat template as a user message"},
      RUN_COMMON_OPTS(a),
      {0}};
  int rc = dsi_cli_parse(cmd, "--model DIR --prompt TEXT [--chat [--system S] [--think | --no-think]] [-n N] [options]",
                         opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!a.prompt) return dsi_cli_usage_error(cmd, "--model and --prompt are required");
  if ((rc = check_args(cmd, &a, 256))) return rc;

  runner s = {.cmd = cmd, .a = &a};
  char *text = NULL;
  int32_t *ids = NULL;
  size_t n = 0;
  dsi_chat_out *out = NULL;
  dsi_err err = {0};
  if ((rc = check_utf8(&s, "--prompt", a.prompt)) || (a.system && (rc = check_utf8(&s, "--system", a.system))) ||
      (rc = open_text(&s)))
    goto done;
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
    rc = msgs.oom ? fail_msg(&s, "out of memory for the prompt") : chat_prompt(&s, msgs.p, &text, &ids, &n);
    free(msgs.p);
    if (rc) goto done;
  } else if (dsi_tok_encode(s.tok, a.prompt, strlen(a.prompt), DSI_TOK_ADD_SPECIAL | DSI_TOK_REPLACE_INVALID, &ids,
                            &n, &err)) {
    rc = fail_msg(&s, err.msg);
    goto done;
  }
  if (a.verbose) print_ids(&s, ids, n);
  if ((rc = open_model(&s, (int64_t)n + a.n + 1, n < 512 ? (int)n : 512))) goto done;
  if ((rc = dsi_chat_out_open(&out, text && dsi_chat_prompt_in_reasoning(text), &err))) {
    rc = fail_msg(&s, err.msg);
    goto done;
  }
  gen_stats st = {.prompt = (int)n};
  /* without --chat the text is a continuation: shown as generated */
  view v = {.s = &s, .raw = a.raw || !a.chat, .out = out};
  if ((rc = generate(&s, &v, ids, (int)n, a.n, 0, &st)) == 2) {
    rc = 1;
    goto done;
  }
  fputc('\n', stdout);
  if (dsi_cli_finish_output(cmd)) rc = 1;
  if (!rc) print_stats(&s, &st, 0);
done:
  dsi_chat_out_free(out);
  free(text);
  free(ids);
  runner_close(&s);
  free(a.schema);
  return rc;
}

/* ---- chat ---- */

typedef struct turn {
  char *role, *content;
} turn;

static void history_json(sbuf *b, const char *system, const turn *h, int n) {
  b->n = 0;
  b->oom = 0; /* a failed turn's: the buffer as it was is still whole */
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

/* 0, or 1 after saying that the conversation could not hold the message */
static int history_push(const runner *s, turn **h, int *n, const char *role, const char *content) {
  turn *t = realloc(*h, (size_t)(*n + 1) * sizeof **h);
  if (t) *h = t;
  char *r = t ? strdup(role) : NULL, *c = r ? strdup(content) : NULL;
  if (!c) {
    free(r);
    return fail_msg(s, "out of memory for the conversation");
  }
  t[*n].role = r;
  t[*n].content = c;
  (*n)++;
  return 0;
}

static void history_clear(turn *h, int *n) {
  for (int i = 0; i < *n; i++) free(h[i].role), free(h[i].content);
  *n = 0;
}

/* One turn: the whole conversation rendered again, only the tokens past
 * the cached prefix fed, the answer streamed and put back into history
 * (its answer only: reasoning is left out, as R1's and V3.1's templates
 * leave it out themselves). Returns 0, or 1 when the prompt could not be
 * fed (nothing was answered); *full is set when the context is full. */
static int chat_turn(runner *s, turn **hist, int *n_hist, sbuf *msgs, int *full) {
  history_json(msgs, s->a->system, *hist, *n_hist);
  char *text = NULL;
  int32_t *ids = NULL;
  size_t n = 0;
  if (msgs->oom) return fail_msg(s, "out of memory for the conversation");
  if (chat_prompt(s, msgs->p, &text, &ids, &n)) return 1;
  if (s->a->verbose) print_ids(s, ids, n);
  gen_stats st = {.prompt = (int)n};
  dsi_chat_out *out = NULL;
  dsi_err err = {0};
  int rc = dsi_chat_out_open(&out, dsi_chat_prompt_in_reasoning(text), &err) ? fail_msg(s, err.msg) : 0;
  view v = {.s = s, .raw = s->a->raw, .out = out};
  int grc = rc ? 2 : generate(s, &v, ids, (int)n, s->a->n, 1, &st);
  if (grc == 2) rc = 1; /* the prompt was not taken */
  *full = st.stopped_by == 2 || (grc == 2 && (int64_t)n + 1 > s->ctx);
  if (!rc) { /* from here the turn stands, even if generating failed part way */
    fputc('\n', stdout);
    fflush(stdout);
    if (history_push(s, hist, n_hist, "assistant", dsi_chat_out_content(out))) rc = 1;
    else if (!grc) print_stats(s, &st, 1);
  }
  dsi_chat_out_free(out);
  free(text);
  free(ids);
  return rc;
}

int dsi_cmd_chat(int argc, char **argv) {
  const char *cmd = "chat";
  run_args a = {.chat = 1, .n = -1, .sp = SAMPLING_UNSET};
  const dsi_opt opts[] = {RUN_COMMON_OPTS(a), {0}};
  int rc = dsi_cli_parse(cmd, "--model DIR [--system S] [--think | --no-think] [-n N] [options]\n\n"
                              "Type a message and Enter. /reset clears the conversation, /exit (or end of input) "
                              "ends it;\nCtrl-C stops an answer, and at the empty prompt ends the chat.",
                         opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if ((rc = check_args(cmd, &a, 1024))) return rc;
  runner s = {.cmd = cmd, .a = &a};
  if ((rc = open_text(&s)) || (rc = open_model(&s, 0, 512))) {
    runner_close(&s);
  free(a.schema);
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
  int n_hist = 0, failed = 0;
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
    if (memchr(line, 0, (size_t)got)) { /* it would be cut there: say so instead */
      fprintf(stderr, "dsinfer chat: the line holds a NUL byte; not sent\n");
      failed = 1;
      continue;
    }
    int cmd_word = line[0] == '/' && line[1] && strspn(line + 1, "abcdefghijklmnopqrstuvwxyz") == (size_t)got - 1;
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
    if (!strcmp(line, "/reset")) {
      history_clear(hist, &n_hist);
      dsi_sched_reset_prefix_cache(s.sched);
      fprintf(stderr, "[conversation cleared]\n");
      continue;
    }
    if (cmd_word) { /* a typo of a command is not a message for the model */
      fprintf(stderr, "dsinfer chat: unknown command '%s'; the commands are /reset, /exit (or /quit)\n", line);
      continue;
    }
    if (check_utf8(&s, "the line", line)) {
      failed = 1;
      continue;
    }
    if (history_push(&s, &hist, &n_hist, "user", line)) {
      failed = 1;
      continue;
    }
    int full = 0;
    if (chat_turn(&s, &hist, &n_hist, &msgs, &full)) {
      /* the message could not be answered (too long for the context): forget it */
      free(hist[n_hist - 1].role);
      free(hist[n_hist - 1].content);
      n_hist--;
      failed = 1;
    }
    if (full)
      fprintf(stderr, "[the conversation fills the context of %d tokens: /reset starts a new one%s]\n", s.ctx,
              a.ctx ? "" : ", --ctx makes it longer");
  }
  sigaction(SIGINT, &old, NULL);
  history_clear(hist, &n_hist);
  free(hist);
  free(msgs.p);
  free(line);
  runner_close(&s);
  free(a.schema);
  /* a turn that failed fails the chat too: a script feeding it can tell */
  return dsi_cli_finish_output(cmd) || failed ? 1 : 0;
}
