/* tests: running out of memory is a reported error, never a crash. The
 * allocator (malloc, calloc, realloc, posix_memalign, strdup and anonymous
 * mmap) is wrapped at link time (tests/CMakeLists.txt); a child process
 * makes one call fail during a small run and must end cleanly: every step
 * worked (the failed call was one whose failure is handled by doing
 * without, such as a worker thread fewer) or a step reported an error with
 * a message (a request ended with finish reason error and its cause, the
 * server answered 500 or 503 with an error object). An abort, an
 * assertion, a fault, a hang, an error without a message or a 4xx for a
 * valid request fails the test.
 *
 * Three runs, each first done once without a failure, recording the stack
 * of each of its calls (cJSON's allocations come through the library's
 * hooks, so they are calls too):
 *   model:   load the tiny checkpoint, open a profiling engine, prefill,
 *            decode and sample.
 *   serving: on a model and engine opened by the parent (the children are
 *            forked from it): the tokenizer, the chat template, encoding
 *            and decoding, the output parser, a scheduler with two
 *            requests (one of two completions with logprobs and a stop
 *            string), the server's endpoints called directly (chat and
 *            completions whole and streamed — the stream read as MHD reads
 *            it — with logprobs and echo (the prompt's logprobs, and the
 *            prompt alone), tool_choice required and named, json_object, json_schema, tokenize,
 *            detokenize, models, metrics) and the profiler's trace.
 *   mkmodel: writing a sharded FP8 checkpoint with a trained tokenizer.
 *   commands: a chat of three turns and a /reset, and detokenize
 *            --stream, as the dsinfer command runs them: a failure must
 *            print `dsinfer CMD: ...` and exit 1 (or 2).
 * Then, a child per case, every distinct call stack (see stack_of) fails
 * once, at its first call, unless an earlier run failed it already; and
 * every stride-th call fails too: loops are covered once, not a thousand
 * times, and a few of their later turns as well.
 *
 * RUN=name runs one of them; RUN=name FAIL_AT=N makes its Nth call fail
 * in this process, without a child, printing where that call is made and
 * how far each step got: for a debugger's backtrace of the call that did
 * not cope. ALLOC_FAIL_VERBOSE=1 keeps the children's messages. */
#define _GNU_SOURCE
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"
#include "server/server_impl.h"
#include "tools/commands.h"
#include "tools/internal.h"

/* ---- the wrapped allocator ---- */

#define MAX_RECORD (1l << 20)
static atomic_int g_armed;           /* calls count (and may fail) only while armed */
static atomic_long g_calls;          /* armed calls so far */
static long g_fail_at;               /* the call that fails (0: none) */
static uint64_t g_fail_stack;        /* or the first call from this stack (0: none) */
static atomic_int g_failed;          /* a call was made to fail */
static uint64_t *g_record;           /* the counting run: each call's stack, shared with the parent */
static _Thread_local int g_inside;   /* backtrace's own allocations are not the run's */
static int g_show;                   /* say where the failing call is made */

typedef struct run run;
static int enter(const run *r, const char *dir, void *ctx);

extern char __executable_start, etext; /* this program's code (the library is linked in) */

/* the call's stack: the four innermost frames in this program's code, up
 * to the run's entry (where the run is called from is not the call's). A
 * library's frames (cJSON's, calling the library's hooks) are left out,
 * and so is the call into the library: the cJSON calls of one function
 * (a tree built node by node) are one stack, checked once. */
static uint64_t stack_of(void) {
  void *f[48];
  g_inside = 1;
  int n = backtrace(f, 48), used = 0, in_lib = 0;
  g_inside = 0;
  uint64_t h = 1469598103934665603ull;
  for (int i = 1; i < n && used < 4; i++) {
    uintptr_t a = (uintptr_t)f[i];
    if (a >= (uintptr_t)enter && a < (uintptr_t)enter + 256) break;
    if (a < (uintptr_t)&__executable_start || a >= (uintptr_t)&etext) {
      in_lib = 1;
      continue;
    }
    if (in_lib) { /* the call into the library */
      in_lib = 0;
      continue;
    }
    h = (h ^ (a - (uintptr_t)&__executable_start)) * 1099511628211ull; /* the same in another process */
    used++;
  }
  return h | 1;
}

static int fail_now(void) {
  if (!atomic_load_explicit(&g_armed, memory_order_relaxed) || g_inside) return 0;
  long n = atomic_fetch_add(&g_calls, 1) + 1;
  if (g_record || g_fail_stack) {
    uint64_t s = stack_of();
    if (g_record && n <= MAX_RECORD) g_record[n - 1] = s;
    if (s != g_fail_stack || atomic_exchange(&g_failed, 1)) return 0;
  } else if (n != g_fail_at || atomic_exchange(&g_failed, 1)) {
    return 0;
  }
  if (g_show) { /* FAIL_AT or FAIL_STACK: where the call that fails is made */
    void *f[12];
    g_inside = 1;
    int k = backtrace(f, 12);
    fprintf(stderr, "call %ld fails, made from:\n", n);
    backtrace_symbols_fd(f, k, 2);
    g_inside = 0;
  }
  return 1;
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
char *__real_strdup(const char *s);
void *__real_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off);
void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return fail_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { return fail_now() ? ENOMEM : __real_posix_memalign(p, a, n); }
char *__wrap_strdup(const char *s) { return fail_now() ? NULL : __real_strdup(s); }
void *__wrap_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off) {
  if ((flags & MAP_ANONYMOUS) && fail_now()) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  return __real_mmap(a, n, prot, flags, fd, off);
}

/* ---- what a run reports ---- */

/* A run's end: 0 everything worked, 1 an error was reported (with its
 * message), 3 an error without a message (or a wrong answer), 4 a hang. */
enum { END_OK = 0, END_ERROR = 1, END_SILENT = 3, END_HANG = 4, END_MISSED = 16 /* the call to fail never came */ };
static int worst(int a, int b) { return a > b ? a : b; }

static void say(const char *what) {
  if (getenv("FAIL_AT")) printf("after %s: %ld calls\n", what, atomic_load(&g_calls));
}

/* an error from the library: reported when it has a message */
static int reported(const dsi_err *err) {
  fprintf(stderr, "%s\n", err->msg[0] ? err->msg : "(an error without a message)");
  return err->msg[0] ? END_ERROR : END_SILENT;
}

/* ---- run 1: loading and stepping a model ---- */

static int run_model(const char *dir, void *ctx) {
  (void)ctx;
  dsi_err err = {0};
  dsi_model *m = NULL;
  dsi_engine *e = NULL;
  dsi_sampler *smp = NULL;
  float *logits = NULL;
  int rc = END_ERROR;
  dsi_load_opts lo = {.n_threads = 2};
  if (dsi_model_open(&m, dir, &lo, &err)) goto out;
  say("model_open");
  dsi_engine_opts eo = {.n_threads = 2, .max_context = 64, .max_tokens = 16, .kv_blocks = 4, .profile = 1};
  if (dsi_engine_open(&e, m, &eo, &err)) goto out;
  say("engine_open");
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  logits = malloc((size_t)info.vocab_size * sizeof(float));
  dsi_sampling sp = {.temperature = 0.8f, .top_p = 0.9f, .top_k = 20, .seed = 1};
  smp = dsi_sampler_new(&sp, info.vocab_size);
  if (!logits || !smp) {
    snprintf(err.msg, sizeof err.msg, "out of memory for the logits or the sampler");
    goto out;
  }
  int seq = dsi_seq_new(e);
  if (seq < 0) {
    snprintf(err.msg, sizeof err.msg, "no sequence: %.900s", dsi_engine_error(e)->msg);
    goto out;
  }
  int32_t prompt[3] = {3, 1, 4}, seqv[3] = {seq, seq, seq};
  uint8_t want[3] = {0, 0, 1}; /* the last position's logits only */
  dsi_batch b = {.n_tokens = 3, .tokens = prompt, .seq = seqv, .want_logits = want};
  if (dsi_engine_forward(e, &b, logits)) {
    err = *dsi_engine_error(e);
    goto out;
  }
  say("prefill");
  for (int i = 0; i < 2; i++) {
    int32_t tok = dsi_sampler_sample(smp, logits, 0, NULL, 0, 0);
    dsi_batch d = {.n_tokens = 1, .tokens = &tok, .seq = &seq};
    if (dsi_engine_forward(e, &d, logits)) {
      err = *dsi_engine_error(e);
      goto out;
    }
  }
  rc = END_OK;
out:
  if (rc) rc = reported(&err);
  dsi_sampler_free(smp);
  free(logits);
  dsi_engine_free(e);
  dsi_model_free(m);
  return rc;
}

/* ---- run 2: serving on an engine the parent opened ---- */

typedef struct served {
  int ended, errors, silent;
} served;

/* the loop thread: each completion's end (read after dsi_sched_wait_idle) */
static void on_event(void *user, const dsi_request_event *ev) {
  served *s = user;
  if (!ev->finish) return;
  s->ended++;
  if (ev->finish == DSI_FINISH_ERROR) {
    s->errors++;
    s->silent += !ev->error || !*ev->error;
    fprintf(stderr, "a completion ended: %s\n", ev->error ? ev->error : "(no cause)");
  }
}

/* a reply of the server: 200, or 500/503 with an error object; a 4xx or
 * no response at all for these valid requests is wrong */
static int check_reply(reply *rp, const char *what) {
  int rc = !rp->resp ? END_SILENT
         : rp->status == 200 ? END_OK
         : (rp->status == 500 || rp->status == 503) && rp->log && *rp->log ? END_ERROR : END_SILENT;
  if (rc) fprintf(stderr, "%s: %u %s\n", what, rp->status, rp->log ? rp->log : "(no log)");
  if (rp->resp) MHD_destroy_response(rp->resp);
  *rp = (reply){0};
  return rc;
}

#define CHAT_BODY                                                                                              \
  "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"What is the " \
  "capital of France?\"}],\"max_tokens\":4,\"n\":2,\"logprobs\":true,\"top_logprobs\":2,\"stop\":[\"xyz\"],"    \
  "\"temperature\":0.7,\"seed\":1}"
#define STREAM_BODY                                                                                      \
  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,\"stream\":true,\"seed\":2," \
  "\"logprobs\":true,\"top_logprobs\":1,\"stream_options\":{\"include_usage\":true}}"
#define ECHO_STREAM_BODY \
  "{\"prompt\":[\"Time is\",[5,6]],\"max_tokens\":2,\"echo\":true,\"logprobs\":1,\"stream\":true,\"temperature\":0}"
#define ECHO_BODY \
  "{\"prompt\":[\"The model reads\",[5,6,7]],\"max_tokens\":3,\"echo\":true,\"logprobs\":2,\"temperature\":0}"
#define PROMPT_ONLY_BODY "{\"prompt\":\"The model reads\",\"max_tokens\":0,\"echo\":true,\"logprobs\":1}"
#define LOGPROBS_BODY "{\"prompt\":\"Time is\",\"max_tokens\":3,\"logprobs\":2,\"stop\":\"zz\"}"
#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]"
#define NAMED_TOOL_BODY                                                                                       \
  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS ",\"tool_choice\":{\"type\":\"function\"," \
  "\"function\":{\"name\":\"f\"}},\"max_tokens\":2}"
#define REQUIRED_TOOL_STREAM_BODY \
  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS ",\"tool_choice\":\"required\",\"max_tokens\":2,\"stream\":true}"
#define JSON_BODY \
  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"response_format\":{\"type\":\"json_object\"},\"max_tokens\":3}"
#define JSON_SCHEMA_BODY                                                                                     \
  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"response_format\":{\"type\":\"json_schema\"," \
  "\"json_schema\":{\"name\":\"t\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":" \
  "\"string\",\"pattern\":\"^[a-z]+\\\\d?$\",\"maxLength\":9},{\"$ref\":\"#/$defs/n\"}]},\"b\":{\"type\":"   \
  "\"number\",\"minimum\":0.5},\"c\":{\"format\":\"date\"}},\"$defs\":{\"n\":{\"enum\":[null,[1]]}}}}},"      \
  "\"max_tokens\":3}"
#define REGEX_BODY \
  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"guided_regex\":\"(yes|no)[.!]?\",\"max_tokens\":3}"
#define TOKENIZE_BODY "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
#define DETOKENIZE_BODY "{\"tokens\":[5,6,7,300]}"

/* a streamed reply read to its end as MHD reads it: [DONE] last, or an
 * error event (a completion that failed, out of memory) */
static int read_stream(reply *rp, const char *what) {
  if (!rp->resp || rp->status != 200) return END_OK; /* check_reply judges it */
  static char body[1 << 16];
  size_t n = 0;
  for (;;) {
    ssize_t k = api_stream_read(rp->stream, n, body + n, sizeof body - 1 - n);
    if (k == MHD_CONTENT_READER_END_OF_STREAM) break;
    if (k < 0 || n + (size_t)k >= sizeof body - 1) {
      fprintf(stderr, "%s: the stream broke off or ran past %zu bytes\n", what, sizeof body);
      return END_SILENT;
    }
    n += (size_t)k;
  }
  body[n] = 0;
  static const char done[] = "data: [DONE]\n\n";
  const char *e = strstr(body, "data: {\"error\":{\"message\":\"");
  if (e && e[sizeof "data: {\"error\":{\"message\":\"" - 1] != '"') { /* a message that is not empty */
    fprintf(stderr, "%s: %.200s\n", what, e);
    return END_ERROR;
  }
  if (!e && n >= sizeof done - 1 && !strcmp(body + n - (sizeof done - 1), done)) return END_OK;
  fprintf(stderr, "%s: the stream ended without [DONE] or an error: ...%s\n", what, body + (n > 200 ? n - 200 : 0));
  return END_SILENT;
}

/* the server's endpoints on scheduler s, called directly */
static int serve_some(dsi_sched *s, const dsi_tok *tok, const dsi_chat_fmt *fmt, int ctx) {
  dsi_server srv = {.s = s, .tok = tok, .fmt = fmt, .o = {.ctx = ctx, .max_waiting = 16, .quiet = 1},
                    .model_name = "tiny", .model_names = "tiny", .model_label = "tiny", .n_valid = dsi_tok_vocab_size(tok),
                    .chat_eos = dsi_tok_eos_id(tok)};
  pthread_mutex_init(&srv.mu, NULL);
  pthread_cond_init(&srv.quiet, NULL);
  metrics_init(&srv.m);
  reply rp = {0};
  int rc = END_OK;
  api_chat(&srv, CHAT_BODY, strlen(CHAT_BODY), -1, &rp);
  rc = worst(rc, check_reply(&rp, "chat"));
  api_chat(&srv, STREAM_BODY, strlen(STREAM_BODY), -1, &rp);
  rc = worst(rc, read_stream(&rp, "chat stream"));
  rc = worst(rc, check_reply(&rp, "chat stream"));
  api_chat(&srv, JSON_BODY, strlen(JSON_BODY), -1, &rp);
  rc = worst(rc, check_reply(&rp, "chat, json_object"));
  api_chat(&srv, JSON_SCHEMA_BODY, strlen(JSON_SCHEMA_BODY), -1, &rp);
  rc = worst(rc, check_reply(&rp, "chat, json_schema"));
  api_chat(&srv, REGEX_BODY, strlen(REGEX_BODY), -1, &rp);
  rc = worst(rc, check_reply(&rp, "chat, guided_regex"));
  api_chat(&srv, NAMED_TOOL_BODY, strlen(NAMED_TOOL_BODY), -1, &rp);
  rc = worst(rc, check_reply(&rp, "chat, a named tool"));
  api_chat(&srv, REQUIRED_TOOL_STREAM_BODY, strlen(REQUIRED_TOOL_STREAM_BODY), -1, &rp);
  rc = worst(rc, read_stream(&rp, "chat stream, a tool required"));
  rc = worst(rc, check_reply(&rp, "chat stream, a tool required"));
  api_completions(&srv, ECHO_STREAM_BODY, strlen(ECHO_STREAM_BODY), -1, &rp);
  rc = worst(rc, read_stream(&rp, "completions stream"));
  rc = worst(rc, check_reply(&rp, "completions stream"));
  api_completions(&srv, ECHO_BODY, strlen(ECHO_BODY), -1, &rp);
  rc = worst(rc, check_reply(&rp, "completions with echo"));
  api_completions(&srv, PROMPT_ONLY_BODY, strlen(PROMPT_ONLY_BODY), -1, &rp);
  rc = worst(rc, check_reply(&rp, "completions, the prompt alone"));
  api_completions(&srv, LOGPROBS_BODY, strlen(LOGPROBS_BODY), -1, &rp);
  rc = worst(rc, check_reply(&rp, "completions with logprobs"));
  api_tokenize(&srv, TOKENIZE_BODY, strlen(TOKENIZE_BODY), &rp);
  rc = worst(rc, check_reply(&rp, "tokenize"));
  api_detokenize(&srv, DETOKENIZE_BODY, strlen(DETOKENIZE_BODY), &rp);
  rc = worst(rc, check_reply(&rp, "detokenize"));
  api_models(&srv, NULL, &rp);
  rc = worst(rc, check_reply(&rp, "models"));
  if (dsi_sched_wait_idle(s, 30)) rc = END_HANG;
  dsi_sched_stats st;
  dsi_sched_get_stats(s, &st);
  sbuf b = {0};
  metrics_render(&srv.m, &st, srv.model_label, &b);
  if (b.oom) rc = worst(rc, END_ERROR);
  free(b.p);
  metrics_destroy(&srv.m);
  pthread_cond_destroy(&srv.quiet);
  pthread_mutex_destroy(&srv.mu);
  return rc;
}

/* the chat output parser on reasoning, an answer and a tool call */
static int parse_output(dsi_err *err) {
  static const char out[] = "<think>Paris is in France.</think>The capital is Paris.<｜tool▁calls▁begin｜>"
                            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>lookup\n```json\n{\"city\": \"Paris\"}\n```"
                            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  dsi_chat_out *o;
  dsi_chat_out_delta d;
  int st = dsi_chat_out_open(&o, 0, err);
  for (size_t i = 0; !st && i < sizeof out - 1; i += 7)
    st = dsi_chat_out_feed(o, out + i, DSI_MIN(7, sizeof out - 1 - i), &d, err);
  if (!st) st = dsi_chat_out_finish(o, &d, err);
  const char *name, *args;
  if (!st && (d.n_tool_calls != 1 || dsi_chat_out_tool_call(o, 0, &name, &args) || strcmp(name, "lookup")))
    st = dsi_errf(err, DSI_E_INVAL, "the output parser lost the tool call");
  dsi_chat_out_free(o);
  return st;
}

static int run_serving(const char *dir, void *ctx) {
  dsi_engine *e = ctx;
  dsi_err err = {0};
  dsi_tok *tok = NULL;
  dsi_chat_fmt *fmt = NULL;
  dsi_sched *s = NULL;
  char *text = NULL, *back = NULL, json[300], cfg[300], trace[300];
  int32_t *ids = NULL;
  size_t n = 0, n_back = 0;
  int rc = END_ERROR;
  snprintf(json, sizeof json, "%s/tokenizer.json", dir);
  snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
  if (dsi_tok_open(&tok, json, cfg, 0, &err)) goto out;
  say("tokenizer");
  if (dsi_chat_fmt_open(&fmt, dir, &err)) goto out;
  if (dsi_chat_fmt_render(fmt, "[{\"role\":\"user\",\"content\":\"What is the capital of France?\"}]", 1,
                          "{\"thinking\":true}", &text, &err))
    goto out;
  if (dsi_tok_encode(tok, text, strlen(text), DSI_TOK_REPLACE_INVALID, &ids, &n, &err)) goto out;
  if (dsi_tok_decode(tok, ids, n, 0, &back, &n_back, &err)) goto out;
  if (parse_output(&err)) goto out;
  say("text");
  if (dsi_sched_open(&s, e, tok, &(dsi_sched_opts){0}, &err)) goto out;
  served sv = {0};
  static const char *const stop[] = {"Paris"};
  dsi_request r1 = {.prompt = ids, .n_prompt = (int)n, .sampling = {.temperature = 0.8f, .top_p = 1, .seed = 1},
                    .max_tokens = 4, .stop = stop, .n_stop = 1, .n = 2, .logprobs = 1, .top_logprobs = 2,
                    .on_event = on_event, .user = &sv};
  dsi_request r2 = {.prompt = ids + 1, .n_prompt = (int)n - 1, .max_tokens = 3, .on_event = on_event, .user = &sv};
  int submitted = 0;
  if (dsi_sched_submit(s, &r1, NULL, &err)) goto out;
  submitted += 2;
  if (dsi_sched_submit(s, &r2, NULL, &err)) goto out;
  submitted += 1;
  if (dsi_sched_wait_idle(s, 30)) {
    fprintf(stderr, "the requests did not end\n");
    rc = END_HANG;
    goto out;
  }
  rc = sv.silent || sv.ended != submitted ? END_SILENT : sv.errors ? END_ERROR : END_OK;
  say("requests");
  rc = worst(rc, serve_some(s, tok, fmt, 128));
  say("server");
  snprintf(trace, sizeof trace, "%s/trace-%d.json", dir, (int)getpid());
  if (dsi_engine_profile_write(e, trace, &err)) rc = worst(rc, reported(&err));
  unlink(trace);
  goto done;
out:
  if (rc == END_ERROR) rc = reported(&err);
done:
  dsi_sched_free(s);
  dsi_chat_fmt_free(fmt);
  dsi_tok_free(tok);
  free(text), free(back), free(ids);
  return rc;
}

/* ---- run 3: writing a checkpoint ---- */

static int run_mkmodel(const char *dir, void *ctx) {
  (void)ctx;
  char out[300];
  snprintf(out, sizeof out, "%s/mk-%d", dir, (int)getpid());
  dsi_err err = {0};
  dsi_mkmodel_opts mo = {.preset = "tiny", .dtype = "fp8", .seed = 5, .out_dir = out, .tokenizer = "builtin",
                         .shard_mb = 1};
  int rc = dsi_mkmodel(&mo, &err) ? reported(&err) : END_OK;
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", out);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", out);
  return rc;
}

/* ---- run 4: the commands ---- */

/* dsinfer NAME ARGS... in this process, its stdout dropped and its stderr
 * kept: 0 when it worked; exit 1 or 2 must come with a line naming the
 * command */
static int command(const char *dir, const char *name, int (*fn)(int, char **), char **argv) {
  int argc = 0;
  while (argv[argc]) argc++;
  char path[300], said[4096] = "";
  snprintf(path, sizeof path, "%s/stderr-%d", dir, (int)getpid());
  fflush(NULL);
  int out = dup(1), err = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600), null = open("/dev/null", O_WRONLY);
  DSI_ASSERT(out >= 0 && err >= 0 && fd >= 0 && null >= 0);
  dup2(null, 1), dup2(fd, 2);
  int rc = fn(argc, argv);
  fflush(NULL);
  dup2(out, 1), dup2(err, 2);
  ssize_t n = pread(fd, said, sizeof said - 1, 0);
  said[n > 0 ? n : 0] = 0;
  close(out), close(err), close(fd), close(null);
  unlink(path);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "dsinfer %s: ", name);
  if (!rc) return END_OK;
  const char *line = strstr(said, prefix);
  fprintf(stderr, "%s: exit %d: %.300s\n", name, rc, line ? line : said);
  return (rc == 1 || rc == 2) && line && line[strlen(prefix)] != '\n' ? END_ERROR : END_SILENT;
}

static int run_commands(const char *dir, void *ctx) {
  (void)ctx;
  char input[300];
  snprintf(input, sizeof input, "%s/chat-input.txt", dir);
  if (!freopen(input, "r", stdin)) return END_SILENT;
  char *chat[] = {"--model", (char *)dir, "-n", "2", "--system", "Be brief.", "--threads", "1", NULL};
  char *detokenize[] = {"--model", (char *)dir, "--ids", "5,6,7,300", "--stream", NULL};
  int rc = command(dir, "chat", dsi_cmd_chat, chat);
  return worst(rc, command(dir, "detokenize", dsi_cmd_detokenize, detokenize));
}

/* ---- the runs, each call of them failing in turn ---- */

struct run {
  const char *name;
  int (*fn)(const char *dir, void *ctx);
  int stride; /* besides each stack's first call, each stride-th call fails */
};

/* r's run, in a frame of its own that stack_of stops at */
static __attribute__((noinline)) int enter(const run *r, const char *dir, void *ctx) {
  int rc = r->fn(dir, ctx);
  __asm__ volatile("" ::: "memory"); /* no tail call: this frame stays */
  return rc;
}

/* the run once in a child, failing call fail_at (or the first call from
 * stack fail_stack); its end (END_*), or -1 - signal */
/* a child that runs r, call fail_at (or the first call from stack
 * fail_stack) failing; child_end says how it ended */
static pid_t child_start(const run *r, const char *dir, void *ctx, long fail_at, uint64_t fail_stack) {
  fflush(NULL);
  pid_t pid = fork();
  DSI_ASSERT(pid >= 0);
  if (pid == 0) {
    /* the messages go nowhere: that there is one is checked by the end */
    if (!getenv("ALLOC_FAIL_VERBOSE") && !freopen("/dev/null", "w", stderr)) _exit(5);
    alarm(120); /* a hang ends as a signal */
    g_fail_at = fail_at;
    g_fail_stack = fail_stack;
    atomic_store(&g_armed, 1);
    int rc = enter(r, dir, ctx);
    atomic_store(&g_armed, 0);
    _exit(rc | (fail_at || fail_stack) * !atomic_load(&g_failed) * END_MISSED);
  }
  return pid;
}

/* a child's end from its wait status: END_*, or -1 - signal */
static int child_end(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : -1 - WTERMSIG(st); }

typedef struct call_at {
  uint64_t stack;
  long call;
} call_at;

static int by_stack_then_call(const void *a, const void *b) {
  const call_at *x = a, *y = b;
  if (x->stack != y->stack) return x->stack < y->stack ? -1 : 1;
  return (x->call > y->call) - (x->call < y->call);
}

/* the stacks failed so far, by all runs: a stack a run shares with an
 * earlier one (loading the tokenizer, say) is not failed again */
static uint64_t *g_done;
static long g_n_done;

static int stack_done(uint64_t s) {
  for (long i = 0; i < g_n_done; i++)
    if (g_done[i] == s) return 1;
  return 0;
}

static void run_all(const run *r, const char *dir, void *ctx) {
  double t0 = dsi_now();
  /* the counting run, each call's stack recorded */
  g_record = mmap(NULL, MAX_RECORD * sizeof *g_record, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  DSI_ASSERT(g_record != MAP_FAILED);
  atomic_store(&g_calls, 0);
  int st;
  pid_t pid = child_start(r, dir, ctx, 0, 0);
  DSI_ASSERT(waitpid(pid, &st, 0) == pid);
  int first = child_end(st);
  CHECKF(first == END_OK, "%s: the run without a failure ended %d", r->name, first);
  long calls = 0;
  while (calls < MAX_RECORD && g_record[calls]) calls++;
  uint64_t *stacks = malloc((size_t)(calls ? calls : 1) * sizeof *stacks);
  DSI_ASSERT(stacks);
  memcpy(stacks, g_record, (size_t)calls * sizeof *stacks);
  munmap(g_record, MAX_RECORD * sizeof *g_record);
  g_record = NULL;

  /* first[i]: call i is the first from its stack (by sorting (stack, call) pairs) */
  char *first_call = calloc((size_t)(calls ? calls : 1), 1);
  call_at *order = malloc((size_t)(calls ? calls : 1) * sizeof *order);
  DSI_ASSERT(first_call && order);
  for (long i = 0; i < calls; i++) order[i] = (call_at){stacks[i], i};
  qsort(order, (size_t)calls, sizeof *order, by_stack_then_call);
  long distinct = 0, known = 0;
  uint64_t *done = realloc(g_done, (size_t)(g_n_done + calls + 1) * sizeof *g_done);
  DSI_ASSERT(done);
  g_done = done;
  long n_before = g_n_done;
  for (long i = 0; i < calls; i++) {
    if (i && order[i].stack == order[i - 1].stack) continue;
    distinct++;
    if (n_before && stack_done(order[i].stack)) {
      known++;
      continue;
    }
    first_call[order[i].call] = 1;
    g_done[g_n_done++] = order[i].stack;
  }
  free(order);

  /* the cases, a few children at a time (each waits on its threads a lot) */
  enum { MAX_PAR = 4 };
  struct { pid_t pid; long call; } running[MAX_PAR];
  int par = (int)DSI_MIN(DSI_MAX(sysconf(_SC_NPROCESSORS_ONLN), 1), MAX_PAR), busy = 0;
  long cases = 0, errors = 0, missed = 0, next = 0;
  for (;;) {
    for (; next < calls && busy < par; next++) {
      int by_stack = first_call[next];
      if (!by_stack && (next + 1) % r->stride) continue;
      running[busy].pid = by_stack ? child_start(r, dir, ctx, 0, stacks[next]) : child_start(r, dir, ctx, next + 1, 0);
      running[busy++].call = next;
    }
    if (!busy) break;
    pid = waitpid(-1, &st, 0);
    DSI_ASSERT(pid > 0);
    int k = 0;
    while (k < busy && running[k].pid != pid) k++;
    DSI_ASSERT(k < busy);
    long i = running[k].call;
    running[k] = running[--busy];
    int end = child_end(st);
    cases++;
    if (end >= END_MISSED) { /* another thread's calls came first; the run did not reach it */
      missed++;
      end -= END_MISSED;
    }
    CHECKF(end == END_OK || end == END_ERROR,
           "%s: call %ld failing (its stack %016llx; RUN=%s FAIL_AT=%ld, or FAIL_STACK=%016llx, to see it): %s %d "
           "(1 reported, 3 silent, 4 hang)",
           r->name, i + 1, (unsigned long long)stacks[i], r->name, i + 1, (unsigned long long)stacks[i],
           end < 0 ? "signal" : "end",
           end < 0 ? -1 - end : end);
    errors += end == END_ERROR;
  }
  printf("test_alloc_fail: %s: %ld calls from %ld stacks (%ld failed in an earlier run)", r->name, calls, distinct,
         known);
  printf("; %ld failed in turn, %ld of them reported as errors, %ld not reached (%.1f s)\n", cases, errors, missed,
         dsi_now() - t0);
  CHECKF(calls > 20, "%s: the run does allocate: the wrappers are in place", r->name);
  free(first_call);
  free(stacks);
}

int main(void) {
  char dir[] = "/tmp/test_alloc_fail_XXXXXX";
  DSI_ASSERT(mkdtemp(dir));
  dsi_err err = {0};
  dsi_mkmodel_opts mo = {.preset = "tiny", .dtype = "bf16", .seed = 3, .out_dir = dir, .tokenizer = "builtin"};
  DSI_ASSERT(dsi_mkmodel(&mo, &err) == 0);
  dsi_set_log_level(-1); /* the children's warnings are not the test's output */
  char input[300];
  snprintf(input, sizeof input, "%s/chat-input.txt", dir);
  FILE *in = fopen(input, "w");
  DSI_ASSERT(in && fputs("Hello!\n/reset\nWhat is the capital of France?\nAnd of Italy?\n", in) >= 0 && !fclose(in));
  void *warm[2];
  backtrace(warm, 2); /* its first call loads what it needs */
  dsi_json_oom_clear(); /* cJSON's allocations go through the library's malloc: the wrappers */

  static const run runs[] = {
      {"model", run_model, 16},
      {"serving", run_serving, 64},
      {"mkmodel", run_mkmodel, 256},
      {"commands", run_commands, 256},
  };
  const char *only = getenv("RUN"), *fail_at = getenv("FAIL_AT"), *fail_stack = getenv("FAIL_STACK");
  for (size_t i = 0; i < DSI_ARRAY_LEN(runs); i++) {
    const run *r = &runs[i];
    if (only && strcmp(only, r->name)) continue;
    /* serving: the model and a one-thread engine (no threads to lose in a fork) come from here */
    dsi_model *m = NULL;
    dsi_engine *e = NULL;
    if (r->fn == run_serving) {
      dsi_load_opts lo = {.n_threads = 1};
      dsi_engine_opts eo = {.n_threads = 1, .max_context = 128, .max_tokens = 32, .profile = 1};
      DSI_ASSERT(dsi_model_open(&m, dir, &lo, &err) == 0);
      DSI_ASSERT(dsi_engine_open(&e, m, &eo, &err) == 0);
    }
    if (fail_at || fail_stack) { /* one case, here */
      g_fail_at = fail_at ? atol(fail_at) : 0;
      g_fail_stack = fail_stack ? strtoull(fail_stack, NULL, 16) : 0;
      g_show = 1;
      atomic_store(&g_armed, 1);
      int rc = enter(r, dir, e); /* as in a child: the same stacks */
      atomic_store(&g_armed, 0);
      printf("%s: end %d, %ld calls\n", r->name, rc, atomic_load(&g_calls));
    } else {
      run_all(r, dir, e);
    }
    dsi_engine_free(e);
    dsi_model_free(m);
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  free(g_done);
  return check_done();
}
