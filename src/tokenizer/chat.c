/* tokenizer/chat.c: parsing a model's output back into a chat message. One
 * state machine (start → reasoning → content → tool calls → done) serves
 * both the whole-text parse and the stream, so the two always agree. */
#include "tokenizer/chat.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/base.h"

/* ---- the markers ---- */

#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"
#define CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define CALLS_END "<｜tool▁calls▁end｜>"
#define CALL_BEGIN "<｜tool▁call▁begin｜>"
#define CALL_END "<｜tool▁call▁end｜>"
#define CALL_SEP "<｜tool▁sep｜>"
#define EOS "<｜end▁of▁sentence｜>"
#define ASSISTANT "<｜Assistant｜>"

/* one copy of each marker, so a found marker can be told by its address */
static const char M_EOS[] = EOS, M_CALL_BEGIN[] = CALL_BEGIN;
static const char *const CONTENT_MARKS[] = {CALLS_BEGIN, M_CALL_BEGIN, M_EOS, NULL};
static const char *const TOOL_MARKS[] = {CALL_BEGIN, CALLS_END, EOS, NULL};
static const char *const THINK_MARKS[] = {THINK_CLOSE, M_EOS, NULL};
static const char *const OPEN_MARKS[] = {THINK_OPEN, NULL};

/* ---- growable text ---- */

/* out of memory sticks (oom): nothing more is appended, and the stream's
 * feed or finish that sees it fails */
typedef struct cbuf {
  char *p;
  size_t n, cap;
  int oom;
} cbuf;

static void cb_put(cbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void cb_drop(cbuf *b, size_t n) { /* the first n bytes */
  if (!b->p) return; /* nothing held yet */
  memmove(b->p, b->p + n, b->n - n);
  b->n -= n;
  if (b->p) b->p[b->n] = 0;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* s[0..n) without white space around it, malloc'd; NULL out of memory */
static char *dup_trim(const char *s, size_t n) {
  while (n && is_ws(*s)) { s++; n--; }
  while (n && is_ws(s[n - 1])) n--;
  char *d = malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

static const char *find(const char *s, size_t n, const char *needle) {
  size_t m = strlen(needle);
  for (size_t i = 0; i + m <= n; i++)
    if (s[i] == needle[0] && !memcmp(s + i, needle, m)) return s + i;
  return NULL;
}

/* bytes at the end of s[0..n) that may be the start of a marker, or of a
 * UTF-8 character still to come: they wait for the next piece */
static size_t held_tail(const char *s, size_t n, const char *const *marks) {
  size_t hold = 0;
  for (const char *const *m = marks; *m; m++) {
    size_t ml = strlen(*m);
    for (size_t k = DSI_MIN(n, ml - 1); k > hold; k--)
      if (!memcmp(s + n - k, *m, k)) { hold = k; break; }
  }
  /* an incomplete UTF-8 sequence */
  for (size_t k = 1; k <= 3 && k <= n; k++) {
    unsigned char c = (unsigned char)s[n - k];
    if ((c & 0xC0) == 0x80) continue;
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > k) hold = DSI_MAX(hold, k);
    break;
  }
  return hold;
}

/* ---- one field (reasoning or content), trimmed as it streams ---- */

typedef struct field {
  cbuf all;   /* everything emitted */
  cbuf delta; /* emitted by the current piece */
  cbuf ws;    /* trailing white space held back: it is kept only if text follows */
  int started;
} field;

static void field_put(field *f, const char *p, size_t n) {
  if (!f->started) {
    while (n && is_ws(*p)) { p++; n--; }
    if (!n) return;
    f->started = 1;
  }
  size_t e = n;
  while (e && is_ws(p[e - 1])) e--;
  if (!e) {
    cb_put(&f->ws, p, n);
    return;
  }
  cb_put(&f->all, f->ws.p, f->ws.n);
  cb_put(&f->delta, f->ws.p, f->ws.n);
  f->ws.n = 0;
  cb_put(&f->all, p, e);
  cb_put(&f->delta, p, e);
  cb_put(&f->ws, p + e, n - e);
}

static int field_oom(const field *f) { return f->all.oom || f->delta.oom || f->ws.oom; }

static void field_free(field *f) {
  free(f->all.p);
  free(f->delta.p);
  free(f->ws.p);
}

/* ---- tool calls ---- */

/* The text between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>:
 *   V3/R1: TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n```
 *   V3.1:  NAME<｜tool▁sep｜>ARGS
 * -1 when out of memory (c then holds what could be copied, to be freed). */
static int parse_call(dsi_chat_tool_call *c, const char *s, size_t n, int complete) {
  memset(c, 0, sizeof *c);
  c->complete = complete;
  const char *sep = find(s, n, CALL_SEP);
  const char *args = s + n;
  size_t nargs = 0;
  if (!sep) {
    c->type = dup_trim("function", 8);
    c->name = dup_trim(s, n);
  } else {
    const char *after = sep + strlen(CALL_SEP);
    size_t na = (size_t)(s + n - after);
    const char *nl = memchr(after, '\n', na);
    if (nl && (size_t)(s + n - nl) >= 4 && !memcmp(nl + 1, "```", 3)) { /* V3/R1 */
      c->type = dup_trim(s, (size_t)(sep - s));
      c->name = dup_trim(after, (size_t)(nl - after));
      const char *body = nl + 4, *end = s + n;
      const char *eol = memchr(body, '\n', (size_t)(end - body)); /* past ```json */
      body = eol ? eol + 1 : end;
      while (end > body && is_ws(end[-1])) end--;
      if (end - body >= 3 && !memcmp(end - 3, "```", 3)) end -= 3;
      args = body;
      nargs = (size_t)(end - body);
    } else { /* V3.1 */
      c->type = dup_trim("function", 8);
      c->name = dup_trim(s, (size_t)(sep - s));
      args = after;
      nargs = na;
    }
  }
  c->arguments = dup_trim(args, nargs);
  if (!c->type || !c->name || !c->arguments) return -1;
  const char *end = NULL;
  dsi_json_oom_clear();
  cJSON *j = cJSON_ParseWithOpts(c->arguments, &end, 1);
  c->arguments_valid = j != NULL && c->arguments[0];
  cJSON_Delete(j);
  return !j && dsi_json_oom() ? -1 : 0;
}

static void call_free(dsi_chat_tool_call *c) {
  free(c->type);
  free(c->name);
  free(c->arguments);
}

/* ---- the state machine ---- */

enum { ST_START, ST_THINK_START, ST_THINK, ST_CONTENT, ST_TOOLS, ST_DONE };

struct dsi_chat_stream {
  int state;
  int saw_reasoning;
  cbuf pend;       /* input not yet decided */
  size_t searched; /* in a tool call: bytes of pend already searched for its end */
  field reasoning, content;
  dsi_chat_tool_call *calls;
  int n_calls, cap_calls;
  int oom;          /* a tool call could not be held (the buffers have their own) */
  dsi_chat_msg msg; /* views for dsi_chat_stream_msg */
};

static int starts(const cbuf *b, const char *m) {
  size_t ml = strlen(m);
  return b->n >= ml && !memcmp(b->p, m, ml);
}

/* is pend a proper prefix of one of marks (more input could complete it)? */
static int maybe(const cbuf *b, const char *const *marks) {
  for (; *marks; marks++)
    if (b->n < strlen(*marks) && !memcmp(*marks, b->p, b->n)) return 1;
  return 0;
}

static void add_call(dsi_chat_stream *s, const char *body, size_t n, int complete) {
  if (s->oom) return;
  if (s->n_calls == s->cap_calls) {
    int cap = s->cap_calls ? s->cap_calls * 2 : 4;
    dsi_chat_tool_call *c = realloc(s->calls, (size_t)cap * sizeof *s->calls);
    if (!c) {
      s->oom = 1;
      return;
    }
    s->calls = c;
    s->cap_calls = cap;
  }
  if (parse_call(&s->calls[s->n_calls++], body, n, complete)) s->oom = 1;
}

static void skip_ws(cbuf *b) {
  size_t i = 0;
  while (i < b->n && is_ws(b->p[i])) i++;
  cb_drop(b, i);
}

/* text up to the first of marks goes to f; returns the marker found, or
 * NULL having emitted all that is certain */
static const char *run_text(dsi_chat_stream *s, field *f, const char *const *marks, int final, size_t *at) {
  const char *first = NULL;
  size_t pos = s->pend.n;
  for (const char *const *m = marks; *m; m++) {
    const char *hit = find(s->pend.p, s->pend.n, *m);
    if (hit && (size_t)(hit - s->pend.p) < pos) {
      pos = (size_t)(hit - s->pend.p);
      first = *m;
    }
  }
  if (first) {
    field_put(f, s->pend.p, pos);
    cb_drop(&s->pend, pos + strlen(first));
    *at = pos;
    return first;
  }
  size_t keep = final ? 0 : held_tail(s->pend.p, s->pend.n, marks);
  field_put(f, s->pend.p, s->pend.n - keep);
  cb_drop(&s->pend, s->pend.n - keep);
  return NULL;
}

static void step(dsi_chat_stream *s, int final) {
  for (;;) {
    size_t at;
    switch (s->state) {
    case ST_START: case ST_THINK_START:
      skip_ws(&s->pend);
      if (starts(&s->pend, THINK_OPEN)) {
        cb_drop(&s->pend, strlen(THINK_OPEN));
        s->saw_reasoning = 1;
        s->state = ST_THINK;
        continue;
      }
      if (!final && (s->pend.n == 0 || maybe(&s->pend, OPEN_MARKS))) return;
      s->state = s->state == ST_START ? ST_CONTENT : ST_THINK;
      continue;
    case ST_THINK:
      {
        const char *m = run_text(s, &s->reasoning, THINK_MARKS, final, &at);
        if (!m) return;
        s->state = m == M_EOS ? ST_DONE : ST_CONTENT;
        continue;
      }
    case ST_CONTENT: {
      const char *m = run_text(s, &s->content, CONTENT_MARKS, final, &at);
      if (!m) return;
      if (m == M_EOS) s->state = ST_DONE;
      else {
        if (m == M_CALL_BEGIN) { /* no <｜tool▁calls▁begin｜>: put the call's own tag back */
          cbuf t = {0};
          cb_put(&t, CALL_BEGIN, strlen(CALL_BEGIN));
          cb_put(&t, s->pend.p, s->pend.n);
          t.oom |= s->pend.oom;
          free(s->pend.p);
          s->pend = t;
        }
        s->state = ST_TOOLS;
      }
      continue;
    }
    case ST_TOOLS:
      skip_ws(&s->pend);
      if (starts(&s->pend, CALL_BEGIN)) {
        /* a long call arrives in many pieces: search each byte once */
        size_t b = strlen(CALL_BEGIN), from = DSI_MAX(b, s->searched);
        const char *end = find(s->pend.p + from, s->pend.n - from, CALL_END);
        if (end) {
          add_call(s, s->pend.p + b, (size_t)(end - s->pend.p) - b, 1);
          cb_drop(&s->pend, (size_t)(end - s->pend.p) + strlen(CALL_END));
          s->searched = 0;
          continue;
        }
        s->searched = s->pend.n >= strlen(CALL_END) ? s->pend.n - strlen(CALL_END) + 1 : 0;
        if (!final) return;
        s->searched = 0;
        add_call(s, s->pend.p + b, s->pend.n - b, 0);
        s->pend.n = 0;
        s->state = ST_DONE;
        continue;
      }
      if (starts(&s->pend, CALLS_END)) {
        cb_drop(&s->pend, strlen(CALLS_END));
        s->state = ST_CONTENT; /* text after the calls is content again */
        continue;
      }
      if (starts(&s->pend, EOS)) {
        s->state = ST_DONE;
        continue;
      }
      if (!final && (s->pend.n == 0 || maybe(&s->pend, TOOL_MARKS))) return;
      s->state = ST_CONTENT; /* stray text between calls: keep it as content */
      continue;
    case ST_DONE:
      s->pend.n = 0;
      return;
    }
  }
}

/* ---- the API ---- */

int dsi_chat_stream_open(dsi_chat_stream **out, const dsi_chat_opts *opts, dsi_err *err) {
  dsi_chat_stream *s = *out = calloc(1, sizeof *s);
  if (!s) return dsi_errf(err, DSI_E_NOMEM, "chat output: out of memory");
  if (opts && opts->in_reasoning) {
    s->state = ST_THINK_START;
    s->saw_reasoning = 1;
  }
  if (opts && opts->continues) { /* no <think> to look for at the start, no white space to drop */
    s->state = opts->in_reasoning ? ST_THINK : ST_CONTENT;
    (opts->in_reasoning ? &s->reasoning : &s->content)->started = 1;
  }
  *out = s;
  return DSI_OK;
}

/* the delta of a feed or a finish; out of memory anywhere in the stream
 * fails it (and every later one) */
static int fill_delta(dsi_chat_stream *s, dsi_chat_delta *d, int calls_before, dsi_err *err) {
  if (s->oom || s->pend.oom || field_oom(&s->reasoning) || field_oom(&s->content)) {
    if (d) memset(d, 0, sizeof *d);
    return dsi_errf(err, DSI_E_NOMEM, "chat output: out of memory");
  }
  if (!d) return DSI_OK;
  d->reasoning = s->reasoning.delta.p ? s->reasoning.delta.p : "";
  d->reasoning_len = s->reasoning.delta.n;
  d->content = s->content.delta.p ? s->content.delta.p : "";
  d->content_len = s->content.delta.n;
  d->tool_calls_from = calls_before;
  d->tool_calls_to = s->n_calls;
  return DSI_OK;
}

int dsi_chat_stream_feed(dsi_chat_stream *s, const char *piece, size_t len, dsi_chat_delta *d, dsi_err *err) {
  if (!s) return dsi_errf(err, DSI_E_INVAL, "chat output: no stream");
  s->reasoning.delta.n = s->content.delta.n = 0;
  int before = s->n_calls;
  if (s->state != ST_DONE) {
    cb_put(&s->pend, piece ? piece : "", piece ? len : 0);
    step(s, 0);
  }
  return fill_delta(s, d, before, err);
}

int dsi_chat_stream_finish(dsi_chat_stream *s, dsi_chat_delta *d, dsi_err *err) {
  if (!s) return dsi_errf(err, DSI_E_INVAL, "chat output: no stream");
  s->reasoning.delta.n = s->content.delta.n = 0;
  int before = s->n_calls;
  step(s, 1);
  s->reasoning.ws.n = s->content.ws.n = 0; /* trailing white space goes */
  return fill_delta(s, d, before, err);
}

const dsi_chat_msg *dsi_chat_stream_msg(dsi_chat_stream *s) {
  s->msg.reasoning_content = s->saw_reasoning ? (s->reasoning.all.p ? s->reasoning.all.p : "") : NULL;
  s->msg.content = s->content.all.p ? s->content.all.p : "";
  s->msg.tool_calls = s->calls;
  s->msg.n_tool_calls = s->n_calls;
  return &s->msg;
}

void dsi_chat_stream_free(dsi_chat_stream *s) {
  if (!s) return;
  free(s->pend.p);
  field_free(&s->reasoning);
  field_free(&s->content);
  for (int i = 0; i < s->n_calls; i++) call_free(&s->calls[i]);
  free(s->calls);
  free(s);
}

int dsi_chat_parse(const char *text, size_t len, const dsi_chat_opts *opts, dsi_chat_msg *out, dsi_err *err) {
  memset(out, 0, sizeof *out);
  dsi_chat_stream *s;
  int st = dsi_chat_stream_open(&s, opts, err);
  if (st) return st;
  if ((st = dsi_chat_stream_feed(s, text, len, NULL, err)) || (st = dsi_chat_stream_finish(s, NULL, err))) {
    dsi_chat_stream_free(s);
    return st;
  }
  /* hand the stream's buffers over */
  const dsi_chat_msg *m = dsi_chat_stream_msg(s);
  out->reasoning_content = m->reasoning_content ? strdup(m->reasoning_content) : NULL;
  out->content = strdup(m->content);
  if (!out->content || (m->reasoning_content && !out->reasoning_content)) {
    dsi_chat_stream_free(s);
    dsi_chat_msg_free(out);
    return dsi_errf(err, DSI_E_NOMEM, "chat output: out of memory");
  }
  out->tool_calls = s->calls;
  out->n_tool_calls = s->n_calls;
  s->calls = NULL;
  s->n_calls = 0;
  dsi_chat_stream_free(s);
  return DSI_OK;
}

void dsi_chat_msg_free(dsi_chat_msg *m) {
  if (!m) return;
  free(m->reasoning_content);
  free(m->content);
  for (int i = 0; i < m->n_tool_calls; i++) call_free(&m->tool_calls[i]);
  free(m->tool_calls);
  memset(m, 0, sizeof *m);
}

int dsi_chat_prompt_in_reasoning(const char *prompt) {
  if (!prompt) return 0;
  const char *last = NULL, *p = prompt;
  while ((p = strstr(p, ASSISTANT))) last = p++;
  if (!last) return 0;
  const char *open = NULL;
  for (p = last; (p = strstr(p, THINK_OPEN)); p++) open = p;
  return open && !strstr(open, THINK_CLOSE);
}
