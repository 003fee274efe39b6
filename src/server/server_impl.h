/* server: what the HTTP side (server.c), the OpenAI endpoints (openai.c)
 * and the metrics (metrics.c) share. */
#ifndef DSI_SERVER_IMPL_H
#define DSI_SERVER_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/sbuf.h"
#include "server/server.h"

/* ---- metrics (metrics.c) ---- */
typedef struct hist {
  const double *bounds; /* upper bounds, ascending */
  int nb;
  long counts[32]; /* per bucket, not cumulative; [nb] is +Inf */
  double sum;
  long n;
} hist;

typedef struct metrics {
  pthread_mutex_t mu;
  hist ttft, itl, e2e, queue, prefill, decode;
  long http[3]; /* responses by class: 2xx, 4xx, 5xx */
} metrics;

void metrics_init(metrics *m);
void metrics_destroy(metrics *m);
void metrics_observe(metrics *m, hist *h, double v);
/* the whole /metrics page: the scheduler's gauges and counters, then ours */
void metrics_render(metrics *m, const dsi_sched_stats *st, const char *model, sbuf *out);

/* ---- one scheduler request, shared by its HTTP thread and the loop ---- */
/* A completion's output as the loop thread delivers it; the HTTP thread
 * reads it under the request's lock, from where it read last. */
typedef struct scomp {
  sbuf text;              /* text made final */
  int32_t *tok;           /* [n_tok] tokens drawn */
  float *lp;              /* [n_tok] their logprobs (with logprobs) */
  dsi_token_logprob *top; /* [n_tok][n_top] */
  int n_tok, cap_tok;
  double t_last;          /* the last token's arrival */
  /* its end */
  dsi_finish finish;
  int32_t stop_token;
  int json_closed;        /* it stopped as its JSON value closed */
  char *stop, *error;
  int oom;                /* what it made could not be held: it was cancelled, and answers 503 */
  int context_full, prompt_tokens, cached_tokens, completion_tokens;
  double queue_s, prefill_s, decode_s;
} scomp;

typedef struct sreq {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct dsi_server *srv;
  uint64_t id;            /* the scheduler's */
  int refs;               /* the HTTP side, and the loop until the last completion ends */
  int n, n_done;          /* completions, ended */
  int n_top;              /* top logprobs a token carries */
  double t_submit;
  /* the prompt's logprobs (prompt_logprobs): [n_prompt] its tokens, and for
   * positions 1 .. n_plp - 1 their logprobs and [n_top] top */
  int32_t *ptok;
  float *plp;
  dsi_token_logprob *ptop;
  int n_prompt, n_plp;
  struct sreq *prev, *next; /* the server's requests in flight */
  scomp c[];
} sreq;

/* ---- the server ---- */
struct dsi_server {
  struct MHD_Daemon *d;
  dsi_sched *s;
  const dsi_tok *tok;
  const dsi_chat_fmt *fmt;
  dsi_server_opts o;
  char *model_name, *model_label, *api_key, *host; /* model_label: escaped for /metrics */
  char *model_names;        /* the served names, comma-separated (model_name the first) */
  int port, vocab, n_valid; /* vocab: the model's; n_valid: ids the tokenizer has */
  int32_t chat_eos;         /* the chat format's end token when not the model's EOS; -1 */
  long created;             /* start time, for /v1/models */
  pthread_mutex_t mu;       /* guards live and active */
  pthread_cond_t quiet;     /* active fell to 0 */
  sreq *live;
  int active;               /* HTTP requests being answered */
  atomic_int draining;
  atomic_ulong next_id;
  metrics m;
};

/* 1 when name is one of the served model's names */
int server_serves(const dsi_server *srv, const char *name);

/* a request to the scheduler with the server's callback; NULL and *err set
 * when the scheduler refuses it. The HTTP side holds one reference. */
sreq *sreq_submit(dsi_server *srv, dsi_request *r, int n_top, dsi_err *err);
/* the HTTP side is done with q: cancel what still runs, drop its reference */
void sreq_release(sreq *q);
/* wait for more of q than the caller has taken: a completion with tokens
 * past seen[i], or ended when ended[i] (or ended NULL) says its end was
 * not taken yet; every 50 ms checks that the client at fd is still there,
 * and with once returns after that first look. 0: something new (or, with
 * once, time up); -1: the client left. Called with q->mu held. */
int sreq_wait(sreq *q, const int *seen, const char *ended, int fd, int once);

/* ---- answering (openai.c) ---- */
/* What a handler answers: a status and a response (a buffer, or a stream
 * MHD pulls from). */
typedef struct reply {
  unsigned status;
  struct MHD_Response *resp;
  void *stream;    /* a streamed reply's state, which api_stream_read reads as MHD does */
  const char *log; /* what the request line says of it (static, or in logbuf) */
  int anthropic;   /* errors in Anthropic's shape (/v1/messages) */
  const char *const *names; /* a translated request's fields: (chat's, the request's) pairs, NULL-ended; errors
                               name the request's (reply_name) */
  char logbuf[200];
} reply;

/* the name the request gave the chat field `field` (itself, but in a
 * translated request: rp->names) */
const char *reply_name(const reply *rp, const char *field);

/* an OpenAI error object as the response */
void reply_error(reply *rp, unsigned status, const char *type, const char *param, const char *code, const char *fmt,
                 ...) __attribute__((format(printf, 6, 7)));
/* a JSON body (taken); NULL: out of memory, answered 503 with a static body */
void reply_json(reply *rp, unsigned status, char *json);
/* b's text as the JSON body (taken); out of memory as reply_json's NULL */
void reply_sb(reply *rp, unsigned status, sbuf *b);
/* 503 out_of_memory, "out of memory <what>" */
void reply_oom(reply *rp, const char *what);
/* the next bytes of a streamed reply's body (rp->stream), as MHD reads
 * them: a count, MHD_CONTENT_READER_END_OF_STREAM at its end */
ssize_t api_stream_read(void *stream, uint64_t pos, char *buf, size_t max);

/* what a request asks, read and checked: the scheduler request (its
 * prompt, sampling, stops) and the response's options */
#define MAX_STOP 16
#define MAX_BIAS 4096 /* a ban list of a vocabulary's partial-UTF-8 tokens fits */
#define MAX_N 16
typedef struct params {
  dsi_request r;
  dsi_sched *sched;     /* where the schema or pattern is checked (and kept compiled for the submit) */
  char *stop_buf[MAX_STOP];
  const char *stop[MAX_STOP];
  int32_t stop_ids[66];
  int32_t bias_ids[MAX_BIAS];
  float bias[MAX_BIAS];
  int stream, include_usage, logprobs, echo;
  int prompt_only;      /* completions with echo and max_tokens 0: the prompt alone (one token drawn, unsaid) */
  const char *forced;   /* chat: the answer's forced start (chat_req's), which the output parser reads first */
  char *schema;         /* response_format json_schema (or vLLM's guided_json), or a named tool's parameters:
                           the schema's text (r.json_schema) */
  char *regex;          /* vLLM's guided_regex, or guided_choice's strings as one (r.regex) */
  const char *trailer;  /* chat, a named tool: the call's end (chat_req's), read by the output parser after
                           the arguments once their JSON closed */
  long long max_tokens; /* 0: to the end of the context */
  int continues;        /* chat: the answer continues the last message (continue_final_message) */
} params;

typedef struct chat_req {
  params p;
  int32_t *ids;     /* the prompt (p.r.prompt) */
  char *text;       /* the rendered conversation */
  int in_reasoning; /* the prompt leaves the answer inside <think> */
  char *forced;     /* tool_choice required or named: the answer's forced start (the prompt ends with
                       it; the output parser reads it first), else NULL */
  char *trailer;    /* a named tool: what the template writes after a call's arguments, else NULL */
} chat_req;
/* body -> a chat request: 0, or -1 with the error reply set (nothing
 * submitted either way) */
int api_chat_parse(dsi_server *srv, const char *body, size_t len, chat_req *cr, reply *rp);
void chat_req_free(chat_req *cr);

/* the prompts: a string, an array of ids, or an array of either */
typedef struct prompts {
  int n;
  int32_t *ids[MAX_N];
  size_t len[MAX_N];
  char *text[MAX_N]; /* a prompt given as text, for echo; NULL for ids */
} prompts;
typedef struct compl_req {
  params p;
  prompts ps;
} compl_req;
int api_completions_parse(dsi_server *srv, const char *body, size_t len, compl_req *cr, reply *rp);
void compl_req_free(compl_req *cr);

/* ---- OpenAI's Responses API and Anthropic's Messages API (translate.c
 * reads their requests, openai.c answers) ---- */
typedef struct resp_err {
  const char *param; /* the field at fault (static) */
  char msg[256];
} resp_err;
struct cJSON;
/* a Responses request body -> *out, the chat request it asks for (the
 * caller's to delete): 0; 1 the request's fault, e says which field and
 * why; -1 out of memory */
int resp_to_chat(const struct cJSON *body, struct cJSON **out, resp_err *e);
/* an Anthropic Messages body the same way (count_only: for count_tokens,
 * max_tokens not needed) */
int msg_to_chat(const struct cJSON *body, int count_only, struct cJSON **out, resp_err *e);

/* a Responses body -> the chat request (as api_chat_parse) and *echo, the
 * response object's fields that echo the request (the caller's to free):
 * 0, or -1 with the error reply set */
int api_responses_parse(dsi_server *srv, const char *body, size_t len, chat_req *cr, char **echo, reply *rp);

/* an Anthropic Messages body the same way (count_only: for count_tokens) */
int api_messages_parse(dsi_server *srv, const char *body, size_t len, int count_only, chat_req *cr, reply *rp);

void api_chat(dsi_server *srv, const char *body, size_t len, int fd, reply *rp);
void api_responses(dsi_server *srv, const char *body, size_t len, int fd, reply *rp);
void api_messages(dsi_server *srv, const char *body, size_t len, int fd, reply *rp);
void api_count_tokens(dsi_server *srv, const char *body, size_t len, reply *rp);
void api_completions(dsi_server *srv, const char *body, size_t len, int fd, reply *rp);
void api_tokenize(dsi_server *srv, const char *body, size_t len, reply *rp);
void api_detokenize(dsi_server *srv, const char *body, size_t len, reply *rp);
void api_models(dsi_server *srv, const char *id, reply *rp);

/* the chat page (page.c, generated from webui/index.html) */
extern const char dsi_page_html[];
extern const size_t dsi_page_html_len;

#endif
