/* server: the HTTP side — libmicrohttpd with a thread per connection (a
 * handler may wait for its tokens), request bodies up to a limit, the API
 * key, routing to the endpoints, a line per request on stderr; the
 * requests in flight on the scheduler (their callback, waits and
 * cancellation); and draining at shutdown. */
#define _GNU_SOURCE
#include "server/server_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- requests on the scheduler ---- */

static void sreq_free(sreq *q) {
  for (int i = 0; i < q->n; i++) {
    scomp *c = &q->c[i];
    free(c->text.p), free(c->tok), free(c->lp), free(c->top), free(c->stop), free(c->error);
  }
  free(q->ptok), free(q->plp), free(q->ptop);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->cv);
  free(q);
}

/* drop one reference (q->mu held, released here) */
static void sreq_unref_locked(sreq *q) {
  int last = --q->refs == 0;
  pthread_mutex_unlock(&q->mu);
  if (!last) return;
  dsi_server *srv = q->srv;
  pthread_mutex_lock(&srv->mu);
  if (q->prev) q->prev->next = q->next;
  else srv->live = q->next;
  if (q->next) q->next->prev = q->prev;
  pthread_mutex_unlock(&srv->mu);
  sreq_free(q);
}

/* room for c's next token; -1 out of memory */
static int tok_room(sreq *q, scomp *c) {
  if (c->n_tok < c->cap_tok) return 0;
  int cap = c->cap_tok ? 2 * c->cap_tok : 64;
  void *p;
  if (!(p = realloc(c->tok, (size_t)cap * sizeof *c->tok))) return -1;
  c->tok = p;
  if (!(p = realloc(c->lp, (size_t)cap * sizeof *c->lp))) return -1;
  c->lp = p;
  if (q->n_top) {
    if (!(p = realloc(c->top, (size_t)cap * q->n_top * sizeof *c->top))) return -1;
    c->top = p;
  }
  c->cap_tok = cap;
  return 0;
}

/* the loop thread: keep what the event carries; wake the HTTP thread. What
 * cannot be kept for want of memory ends the request (cancelled; its HTTP
 * side answers 503) */
static void on_event(void *user, const dsi_request_event *ev) {
  sreq *q = user;
  dsi_server *srv = q->srv;
  double t = now_s();
  pthread_mutex_lock(&q->mu);
  if (ev->prompt_pos > 0) { /* a prompt token's logprob: positions come in order, once */
    if (q->plp && ev->prompt_pos == q->n_plp && ev->prompt_pos < q->n_prompt) {
      q->plp[ev->prompt_pos] = ev->logprob;
      for (int k = 0; k < q->n_top; k++)
        q->ptop[(size_t)ev->prompt_pos * q->n_top + k] = k < ev->n_top ? ev->top[k] : (dsi_token_logprob){-1, 0};
      q->n_plp++;
    }
    pthread_mutex_unlock(&q->mu);
    return;
  }
  scomp *c = &q->c[ev->index];
  if (ev->text_len) sb_put(&c->text, ev->text, ev->text_len);
  if (ev->token >= 0 && !c->oom && tok_room(q, c)) c->oom = 1;
  if (c->text.oom && !c->oom) c->oom = 1;
  if (c->oom && !ev->finish) dsi_sched_cancel(srv->s, q->id); /* the lock order of sreq_release: q, then the scheduler's */
  if (ev->token >= 0 && !c->oom) {
    c->tok[c->n_tok] = ev->token;
    c->lp[c->n_tok] = ev->logprob;
    for (int k = 0; k < q->n_top; k++)
      c->top[(size_t)c->n_tok * q->n_top + k] = k < ev->n_top ? ev->top[k] : (dsi_token_logprob){-1, 0};
    if (c->n_tok) metrics_observe(&srv->m, &srv->m.itl, t - c->t_last);
    else metrics_observe(&srv->m, &srv->m.ttft, t - q->t_submit);
    c->n_tok++;
    c->t_last = t;
  }
  int drop = 0;
  if (ev->finish) {
    c->finish = ev->finish;
    c->stop_token = ev->stop_token;
    c->json_closed = ev->json_closed;
    if ((ev->stop && !(c->stop = strdup(ev->stop))) || (ev->error && !(c->error = strdup(ev->error)))) c->oom = 1;
    c->context_full = ev->context_full;
    c->prompt_tokens = ev->prompt_tokens;
    c->cached_tokens = ev->cached_tokens;
    c->completion_tokens = ev->completion_tokens;
    c->queue_s = ev->queue_s, c->prefill_s = ev->prefill_s, c->decode_s = ev->decode_s;
    metrics_observe(&srv->m, &srv->m.e2e, t - q->t_submit);
    metrics_observe(&srv->m, &srv->m.queue, ev->queue_s);
    metrics_observe(&srv->m, &srv->m.prefill, ev->prefill_s);
    metrics_observe(&srv->m, &srv->m.decode, ev->decode_s);
    drop = ++q->n_done == q->n;
  }
  pthread_cond_broadcast(&q->cv);
  if (drop) sreq_unref_locked(q); /* the loop's reference: no more events */
  else pthread_mutex_unlock(&q->mu);
}

sreq *sreq_submit(dsi_server *srv, dsi_request *r, int n_top, dsi_err *err) {
  int n = r->n > 0 ? r->n : 1;
  sreq *q = calloc(1, sizeof *q + (size_t)n * sizeof(scomp));
  if (!q) return dsi_errf(err, DSI_E_NOMEM, "out of memory for a request of %d completions", n), NULL;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  q->srv = srv;
  q->n = n;
  q->n_top = n_top;
  q->refs = 2; /* the HTTP side, the loop */
  q->t_submit = now_s();
  if (r->prompt_logprobs) { /* the prompt's first token has no logprob */
    q->n_prompt = r->n_prompt;
    q->n_plp = 1;
    q->ptok = malloc((size_t)r->n_prompt * sizeof *q->ptok);
    q->plp = malloc((size_t)r->n_prompt * sizeof *q->plp);
    q->ptop = n_top ? malloc((size_t)r->n_prompt * n_top * sizeof *q->ptop) : NULL;
    if (!q->ptok || !q->plp || (n_top && !q->ptop)) { /* not in the live list yet */
      sreq_free(q);
      return dsi_errf(err, DSI_E_NOMEM, "out of memory for the prompt's %d logprobs", r->n_prompt), NULL;
    }
    memcpy(q->ptok, r->prompt, (size_t)r->n_prompt * sizeof *q->ptok);
  }
  r->on_event = on_event;
  r->user = q;
  /* in the live list before the first event can come */
  pthread_mutex_lock(&srv->mu);
  q->next = srv->live;
  if (srv->live) srv->live->prev = q;
  srv->live = q;
  pthread_mutex_unlock(&srv->mu);
  pthread_mutex_lock(&q->mu); /* the id is set before the callback reads anything */
  int st = dsi_sched_submit(srv->s, r, &q->id, err);
  if (st) {
    q->refs = 1; /* no events will come */
    sreq_unref_locked(q);
    return NULL;
  }
  pthread_mutex_unlock(&q->mu);
  return q;
}

void sreq_release(sreq *q) {
  pthread_mutex_lock(&q->mu);
  if (q->n_done < q->n) dsi_sched_cancel(q->srv->s, q->id);
  sreq_unref_locked(q);
}

/* the client at fd closed its end (or the socket failed) */
static int client_gone(int fd) {
  if (fd < 0) return 0;
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

int sreq_wait(sreq *q, const int *seen, const char *ended, int fd, int once) {
  for (;;) {
    int open = 0;
    for (int i = 0; i < q->n; i++) {
      int end_taken = ended && ended[i];
      if (q->c[i].n_tok > seen[i] || (q->c[i].finish && !end_taken)) return 0;
      open |= !end_taken;
    }
    if (!open) return 0;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += 50 * 1000000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&q->cv, &q->mu, &t);
    if (client_gone(fd)) return -1;
    if (once) return 0;
  }
}

/* ---- replies ---- */

/* the answer when there is no memory to write one */
static char k_oom_body[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                           "\"code\":\"out_of_memory\"}}";

/* rp's response, or none (MHD out of memory: the connection is closed) */
static void reply_buffer(reply *rp, unsigned status, const char *type, char *body, size_t len,
                         enum MHD_ResponseMemoryMode mode) {
  rp->status = status;
  rp->resp = MHD_create_response_from_buffer(len, body, mode);
  if (!rp->resp) {
    if (mode == MHD_RESPMEM_MUST_FREE) free(body);
    return;
  }
  MHD_add_response_header(rp->resp, "Content-Type", type);
}

void reply_json(reply *rp, unsigned status, char *json) {
  if (!json) {
    reply_buffer(rp, 503, "application/json", k_oom_body, sizeof k_oom_body - 1, MHD_RESPMEM_PERSISTENT);
    rp->log = "out of memory";
    return;
  }
  reply_buffer(rp, status, "application/json", json, strlen(json), MHD_RESPMEM_MUST_FREE);
}

void reply_sb(reply *rp, unsigned status, sbuf *b) {
  if (b->oom) {
    free(b->p);
    b->p = NULL;
  }
  reply_json(rp, status, b->p);
  *b = (sbuf){0};
}

void reply_oom(reply *rp, const char *what) {
  reply_error(rp, 503, "server_error", NULL, "out_of_memory", "out of memory %s", what);
}

const char *reply_name(const reply *rp, const char *field) {
  for (const char *const *n = rp->names; field && n && n[0]; n += 2)
    if (!strcmp(n[0], field)) return n[1];
  return field;
}

void reply_error(reply *rp, unsigned status, const char *type, const char *param, const char *code, const char *fmt,
                 ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sbuf b = {0};
  if (rp->anthropic) { /* {"type": "error", "error": {"type", "message"}}, its types named by status */
    const char *t = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                    : status == 413 ? "request_too_large" : status == 429 ? "rate_limit_error"
                    : status == 503 ? "overloaded_error" : status >= 500 ? "api_error" : "invalid_request_error";
    SB_LIT(&b, "{\"type\":\"error\",\"error\":{\"type\":");
    sb_json(&b, t);
    SB_LIT(&b, ",\"message\":");
    sb_json(&b, msg);
    SB_LIT(&b, "}}");
  } else {
    SB_LIT(&b, "{\"error\":{\"message\":");
    sb_json(&b, msg);
    SB_LIT(&b, ",\"type\":");
    sb_json(&b, type);
    SB_LIT(&b, ",\"param\":");
    if (param) sb_json(&b, reply_name(rp, param));
    else SB_LIT(&b, "null");
    SB_LIT(&b, ",\"code\":");
    if (code) sb_json(&b, code);
    else SB_LIT(&b, "null");
    SB_LIT(&b, "}}");
  }
  reply_sb(rp, status, &b);
  snprintf(rp->logbuf, sizeof rp->logbuf, "%.190s", msg);
  rp->log = rp->logbuf;
}


int server_serves(const dsi_server *srv, const char *name) {
  size_t n = strlen(name);
  for (const char *p = srv->model_names; *p;) {
    size_t k = strcspn(p, ",");
    if (k == n && !memcmp(p, name, n)) return 1;
    p += k + (p[k] == ',');
  }
  return 0;
}

/* ---- one HTTP request ---- */

enum {
  R_NONE, R_PAGE, R_HEALTH, R_METRICS, R_MODELS, R_MODEL, R_CHAT, R_COMPLETIONS, R_RESPONSES, R_MESSAGES, R_COUNT_TOKENS,
  R_TOKENIZE, R_DETOKENIZE
};

typedef struct conn {
  int route;
  int post;        /* the route takes a POST body */
  sbuf body;
  int too_big;
  reply early;     /* decided at the headers, sent once the body is read */
  double t0;
} conn;

static int route_of(const char *url, int *post, int *needs_key) {
  static const struct {
    const char *path;
    int route, post, key;
  } k[] = {
      {"/", R_PAGE, 0, 0},
      {"/health", R_HEALTH, 0, 0},
      {"/metrics", R_METRICS, 0, 0},
      {"/v1/models", R_MODELS, 0, 1},
      {"/v1/chat/completions", R_CHAT, 1, 1},
      {"/v1/completions", R_COMPLETIONS, 1, 1},
      {"/v1/responses", R_RESPONSES, 1, 1},
      {"/v1/messages", R_MESSAGES, 1, 1},
      {"/v1/messages/count_tokens", R_COUNT_TOKENS, 1, 1},
      {"/tokenize", R_TOKENIZE, 1, 1},
      {"/detokenize", R_DETOKENIZE, 1, 1},
  };
  for (size_t i = 0; i < sizeof k / sizeof *k; i++)
    if (!strcmp(url, k[i].path)) {
      *post = k[i].post;
      *needs_key = k[i].key;
      return k[i].route;
    }
  if (!strncmp(url, "/v1/models/", 11)) {
    *post = 0;
    *needs_key = 1;
    return R_MODEL;
  }
  return R_NONE;
}

/* h against the key, in time independent of where they differ */
static int key_is(const dsi_server *srv, const char *h) {
  size_t a = strlen(h), b = strlen(srv->api_key);
  unsigned diff = (unsigned)(a ^ b);
  for (size_t i = 0; i < b; i++) diff |= (unsigned char)(i < a ? h[i] : 0) ^ (unsigned char)srv->api_key[i];
  return diff == 0;
}

/* the key in `Authorization: Bearer KEY` (OpenAI's clients) or in
 * `x-api-key: KEY` (Anthropic's) */
static int key_ok(const dsi_server *srv, struct MHD_Connection *c) {
  if (!srv->api_key) return 1;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
  return (h && !strncmp(h, "Bearer ", 7) && key_is(srv, h + 7)) || (x && key_is(srv, x));
}

static int client_fd(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  return ci ? ci->connect_fd : -1;
}

static void answer(dsi_server *srv, struct MHD_Connection *c, conn *cx, const char *url, reply *rp) {
  const char *body = cx->body.p ? cx->body.p : "";
  size_t len = cx->body.n;
  switch (cx->route) {
  case R_PAGE:
    reply_buffer(rp, 200, "text/html; charset=utf-8", (char *)dsi_page_html, dsi_page_html_len, MHD_RESPMEM_PERSISTENT);
    break;
  case R_HEALTH: reply_json(rp, 200, strdup("{\"status\":\"ok\"}")); break;
  case R_METRICS: {
    dsi_sched_stats st;
    dsi_sched_get_stats(srv->s, &st);
    sbuf b = {0};
    metrics_render(&srv->m, &st, srv->model_label, &b);
    if (b.oom) reply_sb(rp, 200, &b);
    else reply_buffer(rp, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.n, MHD_RESPMEM_MUST_FREE);
    break;
  }
  case R_MODELS: api_models(srv, NULL, rp); break;
  case R_MODEL: api_models(srv, url + 11, rp); break;
  case R_CHAT: api_chat(srv, body, len, client_fd(c), rp); break;
  case R_COMPLETIONS: api_completions(srv, body, len, client_fd(c), rp); break;
  case R_RESPONSES: api_responses(srv, body, len, client_fd(c), rp); break;
  case R_MESSAGES: api_messages(srv, body, len, client_fd(c), rp); break;
  case R_COUNT_TOKENS: api_count_tokens(srv, body, len, rp); break;
  case R_TOKENIZE: api_tokenize(srv, body, len, rp); break;
  case R_DETOKENIZE: api_detokenize(srv, body, len, rp); break;
  default: reply_error(rp, 404, "invalid_request_error", NULL, "not_found", "no route %s", url);
  }
}

static void count_status(dsi_server *srv, unsigned status) {
  int k = status >= 500 ? 2 : status >= 400 ? 1 : 0;
  pthread_mutex_lock(&srv->m.mu);
  srv->m.http[k]++;
  pthread_mutex_unlock(&srv->m.mu);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
  (void)version;
  dsi_server *srv = cls;
  conn *cx = *con_cls;
  if (!cx) { /* the headers: route, method, key, the body's announced size */
    if (!(cx = calloc(1, sizeof *cx))) { /* answered at once: no state to wait for the body with */
      reply rp = {0};
      reply_json(&rp, 503, NULL);
      if (!rp.resp) return MHD_NO;
      enum MHD_Result r = MHD_queue_response(c, rp.status, rp.resp);
      MHD_destroy_response(rp.resp);
      count_status(srv, rp.status);
      return r;
    }
    cx->t0 = now_s();
    *con_cls = cx;
    pthread_mutex_lock(&srv->mu);
    srv->active++;
    pthread_mutex_unlock(&srv->mu);
    int needs_key = 0;
    cx->route = route_of(url, &cx->post, &needs_key);
    reply *e = &cx->early;
    e->anthropic = cx->route == R_MESSAGES || cx->route == R_COUNT_TOKENS;
    int is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cx->route == R_NONE)
      reply_error(e, 404, "invalid_request_error", NULL, "not_found", "no route %s %s", method, url);
    else if (cx->post ? !is_post : !is_get)
      reply_error(e, 405, "invalid_request_error", NULL, "method_not_allowed", "%s takes %s, not %s", url,
                  cx->post ? "POST" : "GET", method);
    else if (needs_key && !key_ok(srv, c))
      reply_error(e, 401, "authentication_error", NULL, "invalid_api_key",
                  "a valid API key is needed: Authorization: Bearer KEY (or x-api-key: KEY)");
    else if (atomic_load(&srv->draining))
      reply_error(e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    else if (cl && strtoull(cl, NULL, 10) > srv->o.max_body)
      reply_error(e, 413, "invalid_request_error", NULL, "body_too_large", "the body is %s bytes, over the limit of %zu",
                  cl, srv->o.max_body);
    return MHD_YES; /* the answer waits for the body (a client that is still sending would not read it) */
  }
  if (*upload_size) { /* more of the body: kept, or let go when the answer is known or it is too big */
    if (cx->early.resp) {
      *upload_size = 0;
      return MHD_YES;
    }
    if (!cx->too_big && cx->body.n + *upload_size > srv->o.max_body) {
      cx->too_big = 1;
      free(cx->body.p);
      cx->body = (sbuf){0};
    }
    if (!cx->too_big) sb_put(&cx->body, upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  reply rp = cx->early;
  cx->early.resp = NULL;
  if (rp.resp) {
    cx->route = R_NONE;
  } else if (cx->too_big)
    reply_error(&rp, 413, "invalid_request_error", NULL, "body_too_large", "the body is over the limit of %zu bytes",
                srv->o.max_body);
  else if (cx->body.oom) reply_oom(&rp, "for the request's body");
  else answer(srv, c, cx, url, &rp);
  int cx_route = cx->route;
  cx->route = R_NONE;
  if (!rp.resp) return MHD_NO; /* the client left */
  enum MHD_Result r = MHD_queue_response(c, rp.status, rp.resp);
  MHD_destroy_response(rp.resp);
  count_status(srv, rp.status);
  if (!srv->o.quiet && cx_route != R_HEALTH && cx_route != R_METRICS)
    fprintf(stderr, "serve: %s %s %u %s (%.3f s)\n", method, url, rp.status, rp.log ? rp.log : "", now_s() - cx->t0);
  return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
  (void)c, (void)why;
  dsi_server *srv = cls;
  conn *cx = *con_cls;
  if (!cx) return;
  if (cx->early.resp) MHD_destroy_response(cx->early.resp); /* the client left before it was sent */
  free(cx->body.p);
  free(cx);
  *con_cls = NULL;
  pthread_mutex_lock(&srv->mu);
  if (--srv->active == 0) pthread_cond_broadcast(&srv->quiet);
  pthread_mutex_unlock(&srv->mu);
}

/* ---- the server ---- */

/* NULL when out of memory */
static char *label_escape(const char *s) {
  sbuf b = {0};
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') sb_put(&b, "\\", 1);
    if (*s == '\n') sb_put(&b, "\\n", 2);
    else sb_put(&b, s, 1);
  }
  sb_put(&b, "", 0);
  if (b.oom) free(b.p);
  return b.oom ? NULL : b.p;
}

int dsi_server_open(dsi_server **out, dsi_sched *s, const dsi_tok *tok, const dsi_chat_fmt *fmt,
                    const dsi_server_opts *o, dsi_err *err) {
  *out = NULL;
  dsi_server *srv = calloc(1, sizeof *srv);
  if (!srv) return dsi_errf(err, DSI_E_NOMEM, "out of memory for the server");
  srv->s = s;
  srv->tok = tok;
  srv->fmt = fmt;
  srv->o = *o;
  if (!srv->o.max_body) srv->o.max_body = (size_t)16 << 20;
  if (srv->o.max_waiting <= 0) srv->o.max_waiting = 256;
  srv->host = strdup(o->host ? o->host : "127.0.0.1");
  srv->model_names = strdup(o->model_name && *o->model_name ? o->model_name : "dsinfer");
  if ((srv->model_name = srv->model_names ? strdup(srv->model_names) : NULL)) /* the first name */
    srv->model_name[strcspn(srv->model_name, ",")] = 0;
  srv->api_key = o->api_key && *o->api_key ? strdup(o->api_key) : NULL;
  srv->created = (long)time(NULL);
  srv->n_valid = dsi_tok_vocab_size(tok);
  srv->chat_eos = -1;
  if (fmt && dsi_chat_fmt_eos(fmt)) srv->chat_eos = dsi_tok_token_to_id(tok, dsi_chat_fmt_eos(fmt));
  pthread_mutex_init(&srv->mu, NULL);
  pthread_cond_init(&srv->quiet, NULL);
  metrics_init(&srv->m);
  srv->model_label = srv->model_name ? label_escape(srv->model_name) : NULL;
  if (!srv->host || !srv->model_name || !srv->model_label || (o->api_key && *o->api_key && !srv->api_key)) {
    dsi_server_free(srv);
    return dsi_errf(err, DSI_E_NOMEM, "out of memory setting up the server");
  }

  char port[16];
  snprintf(port, sizeof port, "%d", o->port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  int gai = getaddrinfo(srv->host, port, &hints, &ai);
  if (gai) {
    dsi_server_free(srv);
    return dsi_errf(err, DSI_E_INVAL, "--host %s: %s", o->host ? o->host : "127.0.0.1", gai_strerror(gai));
  }
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  srv->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_CONNECTION_LIMIT, 1024u,
                            MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!srv->d) {
    int e = errno;
    dsi_server_free(srv);
    return dsi_errf(err, DSI_E_IO, "cannot listen on %s port %d: %s", o->host ? o->host : "127.0.0.1", o->port,
                    e ? strerror(e) : "libmicrohttpd failed to start");
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
  srv->port = di ? di->port : o->port;
  *out = srv;
  return DSI_OK;
}

int dsi_server_port(const dsi_server *srv) { return srv->port; }

void dsi_server_drain(dsi_server *srv, double grace_s) {
  if (!srv || !srv->d) return;
  atomic_store(&srv->draining, 1);
  MHD_quiesce_daemon(srv->d); /* no new connections */
  double until = now_s() + grace_s;
  pthread_mutex_lock(&srv->mu);
  while (srv->live && now_s() < until) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += 100 * 1000000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&srv->quiet, &srv->mu, &t);
  }
  for (sreq *q = srv->live; q; q = q->next) dsi_sched_cancel(srv->s, q->id); /* their responses end */
  pthread_mutex_unlock(&srv->mu);
}

void dsi_server_free(dsi_server *srv) {
  if (!srv) return;
  if (srv->d) MHD_stop_daemon(srv->d); /* joins the connection threads */
  metrics_destroy(&srv->m);
  pthread_mutex_destroy(&srv->mu);
  pthread_cond_destroy(&srv->quiet);
  free(srv->host);
  free(srv->model_name);
  free(srv->model_names);
  free(srv->model_label);
  free(srv->api_key);
  free(srv);
}
