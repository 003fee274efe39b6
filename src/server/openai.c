/* server: the OpenAI endpoints (and Anthropic's Messages, the same
 * answers in its shapes) — a request's JSON checked field by field
 * (unknown fields ignored, wrong types and ranges a 400 naming the field),
 * a chat rendered by the checkpoint's template and tokenized, submitted to
 * the scheduler, and the answer: whole, or streamed as server-sent events.
 * Chat output is split into reasoning, answer and tool calls by the chat
 * format's parser (dsi_chat_out), the same whether streamed or not. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "server/server_impl.h"

/* ---- JSON out ---- */

/* s[0..n) as a JSON string; invalid UTF-8 (a token's piece of a
 * character) becomes U+FFFD */
static void jstr(sbuf *b, const char *s, size_t n) {
  SB_LIT(b, "\"");
  const unsigned char *p = (const unsigned char *)s, *e = p + n;
  while (p < e) {
    unsigned c = *p;
    if (c < 0x80) {
      char esc[8];
      if (c == '"' || c == '\\') snprintf(esc, sizeof esc, "\\%c", c);
      else if (c == '\n') snprintf(esc, sizeof esc, "\\n");
      else if (c == '\r') snprintf(esc, sizeof esc, "\\r");
      else if (c == '\t') snprintf(esc, sizeof esc, "\\t");
      else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\u%04x", c);
      else esc[0] = (char)c, esc[1] = 0;
      sb_put(b, esc, strlen(esc));
      p++;
      continue;
    }
    int len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    int ok = len && p + len <= e;
    for (int k = 1; ok && k < len; k++) ok = (p[k] & 0xc0) == 0x80;
    if (ok && len == 3) ok = !(c == 0xe0 && p[1] < 0xa0) && !(c == 0xed && p[1] >= 0xa0);
    if (ok && len == 4) ok = !(c == 0xf0 && p[1] < 0x90) && !(c == 0xf4 && p[1] >= 0x90);
    if (ok) {
      sb_put(b, p, (size_t)len);
      p += len;
    } else {
      SB_LIT(b, "\xef\xbf\xbd");
      p++;
    }
  }
  SB_LIT(b, "\"");
}

static void jcstr(sbuf *b, const char *s) { jstr(b, s, strlen(s)); }

/* a float as JSON (no NaN / Inf in JSON: a logprob of -Inf is -9999) */
static void jnum(sbuf *b, double v) {
  if (!isfinite(v)) v = v < 0 ? -9999.0 : 9999.0;
  sb_printf(b, "%.9g", v);
}

/* ---- JSON in: fields, checked ---- */

typedef struct in {
  const cJSON *o;
  reply *rp;
  int bad; /* an error reply is set */
} in;

static int bad(in *j, const char *param, const char *fmt, const char *detail) {
  if (!j->bad) reply_error(j->rp, 400, "invalid_request_error", param, NULL, fmt, reply_name(j->rp, param), detail);
  j->bad = 1;
  return -1;
}

/* out of memory reading the request: 503 */
static int oom(in *j, const char *what) {
  if (!j->bad) reply_oom(j->rp, what);
  j->bad = 1;
  return -1;
}

/* the library ran out of memory: 503 with its message */
static void reply_nomem(reply *rp, const dsi_err *err) {
  reply_error(rp, 503, "server_error", NULL, "out_of_memory", "%s", err->msg);
}

/* a library call on the request's text failed: out of memory is 503, the
 * rest the request's fault (400) */
static void reply_failed(reply *rp, const char *param, const dsi_err *err) {
  if (err->status == DSI_E_NOMEM) reply_nomem(rp, err);
  else reply_error(rp, 400, "invalid_request_error", param, NULL, "%s", err->msg);
}

static const cJSON *field(const in *j, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j->o, k);
  return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_num(in *j, const char *k, double lo, double hi, double *out) {
  const cJSON *v = field(j, k);
  if (!v) return 0;
  if (!cJSON_IsNumber(v)) return bad(j, k, "'%s' must be a number%s", "");
  if (!(v->valuedouble >= lo && v->valuedouble <= hi)) {
    char r[96];
    snprintf(r, sizeof r, " in [%g, %g], not %g", lo, hi, v->valuedouble);
    return bad(j, k, "'%s' must be a number%s", r);
  }
  *out = v->valuedouble;
  return 1;
}

static int get_float(in *j, const char *k, double lo, double hi, float *out) {
  double d;
  int r = get_num(j, k, lo, hi, &d);
  if (r == 1) *out = (float)d;
  return r;
}

static int get_int(in *j, const char *k, double lo, double hi, long long *out) {
  const cJSON *v = field(j, k);
  if (!v) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) return bad(j, k, "'%s' must be an integer%s", "");
  if (!(v->valuedouble >= lo && v->valuedouble <= hi)) {
    char r[96];
    snprintf(r, sizeof r, " in [%.0f, %.0f], not %.0f", lo, hi, v->valuedouble);
    return bad(j, k, "'%s' must be an integer%s", r);
  }
  *out = (long long)v->valuedouble;
  return 1;
}

static int get_bool(in *j, const char *k, int *out) {
  const cJSON *v = field(j, k);
  if (!v) return 0;
  if (!cJSON_IsBool(v)) return bad(j, k, "'%s' must be true or false%s", "");
  *out = cJSON_IsTrue(v);
  return 1;
}

/* ---- what chat and completions share ---- */


static void params_free(params *p) {
  for (int i = 0; i < MAX_STOP; i++) free(p->stop_buf[i]);
  free(p->schema), free(p->regex);
}

/* p->schema (its text, printed) checked: the output held to it, or err
 * says why not and p->schema is let go (the scheduler keeps what it
 * compiled for the submit; here a schema it cannot enforce becomes a 400
 * naming why) */
static int hold_to_schema(params *p, dsi_err *err) {
  if (dsi_sched_check_schema(p->sched, p->schema, strlen(p->schema), 0, err) == DSI_OK) {
    p->r.json = 1;
    p->r.json_schema = p->schema;
    return 0;
  }
  free(p->schema);
  p->schema = NULL;
  return -1;
}

/* a JSON Schema the output is held to (response_format, guided_json) */
static int take_schema(in *j, params *p, const char *param, const cJSON *schema) {
  if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
    return bad(j, param, "'%s' must hold a JSON Schema (an object)%s", "");
  if (!(p->schema = cJSON_PrintUnformatted(schema))) return oom(j, "for the schema");
  dsi_err err = {0};
  if (hold_to_schema(p, &err)) {
    if (err.status == DSI_E_NOMEM) return oom(j, "for the schema");
    if (!j->bad)
      reply_error(j->rp, 400, "invalid_request_error", param, NULL, "'%s': %s", reply_name(j->rp, param), err.msg);
    j->bad = 1;
    return -1;
  }
  return 0;
}

static uint64_t random_seed(dsi_server *srv) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  uint64_t x = (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 30) ^ (atomic_fetch_add(&srv->next_id, 1) * 0x9e3779b97f4a7c15ull);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}

/* sampling, limits and stops, as OpenAI names them (with vLLM's
 * extensions: top_k, min_p, repetition_penalty, ignore_eos, stop_token_ids) */
static int get_params(dsi_server *srv, in *j, params *p, int chat) {
  dsi_sampling *sp = &p->r.sampling;
  p->sched = srv->s;
  sp->temperature = sp->top_p = -1; /* left out: the checkpoint's defaults, else OpenAI's */
  sp->top_k = -1;
  long long v;
  get_float(j, "temperature", 0, 100, &sp->temperature);
  get_float(j, "top_p", 1e-9, 1, &sp->top_p);
  if (get_int(j, "top_k", -1, 1 << 30, &v) == 1) sp->top_k = v < 0 ? 0 : (int)v;
  const dsi_gen_config *g = srv->o.gen;
  if (sp->temperature < 0 && !(g && (g->temperature >= 0 || g->do_sample == 0))) sp->temperature = 1.0f;
  if (g) dsi_gen_config_apply(g, sp);
  if (sp->top_p < 0) sp->top_p = 1.0f;
  if (sp->top_k < 0) sp->top_k = 0;
  get_float(j, "min_p", 0, 1, &sp->min_p);
  get_float(j, "presence_penalty", -2, 2, &sp->presence_penalty);
  get_float(j, "frequency_penalty", -2, 2, &sp->frequency_penalty);
  get_float(j, "repetition_penalty", 1e-3, 100, &sp->repetition_penalty);
  if (get_int(j, "seed", -9.2e18, 9.2e18, &v) == 1) sp->seed = (uint64_t)v;
  else sp->seed = random_seed(srv);
  if (get_int(j, "n", 1, MAX_N, &v) == 1) p->r.n = (int)v;
  long long best_of;
  if (get_int(j, "best_of", 1, MAX_N, &best_of) == 1 && best_of != (p->r.n ? p->r.n : 1))
    bad(j, "best_of", "'%s' must equal n%s", " (the server returns every completion it makes)");
  if (chat && get_int(j, "max_completion_tokens", 1, 1 << 30, &p->max_tokens) == 0)
    get_int(j, "max_tokens", 1, 1 << 30, &p->max_tokens);
  if (!chat && get_int(j, "max_tokens", 0, 1 << 30, &p->max_tokens) == 1 && !p->max_tokens)
    p->prompt_only = 1, p->max_tokens = 1; /* with echo (checked there): the prompt alone */
  get_bool(j, "ignore_eos", &p->r.ignore_eos);
  get_bool(j, "stream", &p->stream);
  const cJSON *so = field(j, "stream_options");
  if (so) {
    if (!cJSON_IsObject(so)) return bad(j, "stream_options", "'%s' must be an object%s", "");
    in sub = {so, j->rp, 0};
    get_bool(&sub, "include_usage", &p->include_usage);
    if (sub.bad) j->bad = 1;
  }
  /* stop strings */
  const cJSON *st = field(j, "stop");
  if (st) {
    int n = 0;
    if (cJSON_IsString(st)) {
      if (*st->valuestring && !(p->stop_buf[n++] = strdup(st->valuestring))) return oom(j, "for the stop strings");
    } else if (cJSON_IsArray(st)) {
      const cJSON *e;
      cJSON_ArrayForEach(e, st) {
        if (!cJSON_IsString(e)) return bad(j, "stop", "'%s' must be a string or an array of strings%s", "");
        if (n == MAX_STOP) return bad(j, "stop", "'%s' holds at most 16 strings%s", "");
        if (*e->valuestring && !(p->stop_buf[n++] = strdup(e->valuestring))) return oom(j, "for the stop strings");
      }
    } else {
      return bad(j, "stop", "'%s' must be a string or an array of strings%s", "");
    }
    for (int i = 0; i < n; i++) p->stop[i] = p->stop_buf[i];
    p->r.stop = p->stop;
    p->r.n_stop = n;
  }
  /* stop token ids, and the chat format's end token */
  const cJSON *sti = field(j, "stop_token_ids");
  int ns = 0;
  if (sti) {
    if (!cJSON_IsArray(sti)) return bad(j, "stop_token_ids", "'%s' must be an array of token ids%s", "");
    const cJSON *e;
    cJSON_ArrayForEach(e, sti) {
      if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
          e->valuedouble >= srv->n_valid)
        return bad(j, "stop_token_ids", "'%s' must hold token ids of this model%s", "");
      if (ns == 64) return bad(j, "stop_token_ids", "'%s' holds at most 64 ids%s", "");
      p->stop_ids[ns++] = (int32_t)e->valuedouble;
    }
  }
  if (chat && srv->chat_eos >= 0 && !p->r.ignore_eos) p->stop_ids[ns++] = srv->chat_eos;
  p->r.stop_ids = p->stop_ids;
  p->r.n_stop_ids = ns;
  /* logit_bias: {"token id": bias} */
  const cJSON *lb = field(j, "logit_bias");
  if (lb) {
    if (!cJSON_IsObject(lb)) return bad(j, "logit_bias", "'%s' must be an object of token ids to biases%s", "");
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, lb) {
      char *end;
      long id = strtol(e->string, &end, 10);
      if (*end || end == e->string || id < 0 || id >= srv->n_valid)
        return bad(j, "logit_bias", "'%s' keys must be token ids of this model%s", "");
      if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100))
        return bad(j, "logit_bias", "'%s' values must be numbers in [-100, 100]%s", "");
      if (n == MAX_BIAS) return bad(j, "logit_bias", "'%s' holds at most 4096 tokens%s", "");
      p->bias_ids[n] = (int32_t)id;
      p->bias[n++] = (float)e->valuedouble;
    }
    sp->bias_ids = p->bias_ids;
    sp->bias = p->bias;
    sp->n_bias = n;
  }
  /* response_format: json_object makes each completion one JSON object,
   * json_schema one value of the schema; vLLM's guided_json the same */
  const cJSON *rf = field(j, "response_format"), *gj = field(j, "guided_json");
  if (rf) {
    const cJSON *ty = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    if (!cJSON_IsString(ty))
      return bad(j, "response_format", "'%s' must be an object with a type: text, json_object or json_schema%s", "");
    if (!strcmp(ty->valuestring, "json_object")) {
      p->r.json = 1;
    } else if (!strcmp(ty->valuestring, "json_schema")) {
      const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
      const cJSON *sch = cJSON_IsObject(js) ? cJSON_GetObjectItemCaseSensitive(js, "schema") : NULL;
      if (!sch) return bad(j, "response_format", "'%s' json_schema needs {\"json_schema\": {\"schema\": ...}}%s", "");
      if (take_schema(j, p, "response_format", sch)) return -1;
    } else if (strcmp(ty->valuestring, "text")) {
      return bad(j, "response_format", "'%s' must be an object with a type: text, json_object or json_schema%s", "");
    }
  }
  if (gj) {
    if (p->r.json) return bad(j, "guided_json", "'%s' cannot go with a JSON response_format%s", "");
    cJSON *parsed = cJSON_IsString(gj) ? cJSON_Parse(gj->valuestring) : NULL; /* a schema as text, too */
    if (cJSON_IsString(gj) && !parsed) return bad(j, "guided_json", "'%s' is a string that is not JSON%s", "");
    int rc = take_schema(j, p, "guided_json", parsed ? parsed : gj);
    cJSON_Delete(parsed);
    if (rc) return -1;
  }
  /* vLLM's guided_regex (the whole text matches it) and guided_choice (the
   * text is one of the strings: a regex of them, escaped) */
  const cJSON *gr = field(j, "guided_regex"), *gc = field(j, "guided_choice");
  if (gr || gc) {
    const char *param = gr ? "guided_regex" : "guided_choice";
    if (gr && gc) return bad(j, "guided_choice", "'%s' cannot go with guided_regex%s", "");
    if (p->r.json) return bad(j, param, "'%s' cannot go with JSON output (response_format, guided_json)%s", "");
    if (gr && !cJSON_IsString(gr)) return bad(j, param, "'%s' must be a string (a regular expression)%s", "");
    if (gc && (!cJSON_IsArray(gc) || !cJSON_GetArraySize(gc)))
      return bad(j, param, "'%s' must be a non-empty array of strings%s", "");
    size_t len = gr ? strlen(gr->valuestring) : 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, gc) {
      if (!cJSON_IsString(e)) return bad(j, param, "'%s' must be a non-empty array of strings%s", "");
      len += 2 * strlen(e->valuestring) + 1;
    }
    if (len > 4096) return bad(j, param, "'%s' is longer than 4,096 bytes as a regex%s", "");
    if (!(p->regex = malloc(len + 1))) return oom(j, "for the regex");
    size_t k = 0;
    if (gr) memcpy(p->regex, gr->valuestring, len), k = len;
    cJSON_ArrayForEach(e, gc) {
      if (k) p->regex[k++] = '|';
      for (const char *c = e->valuestring; *c; c++) {
        if (strchr("\\^$.|?*+()[]{}/", *c)) p->regex[k++] = '\\';
        p->regex[k++] = *c;
      }
    }
    p->regex[k] = 0;
    dsi_err err = {0};
    if (dsi_sched_check_schema(p->sched, p->regex, k, 1, &err)) {
      if (err.status == DSI_E_NOMEM) return oom(j, "for the regex");
      return bad(j, param, "'%s': %s", err.msg);
    }
    p->r.regex = p->regex;
  }
  /* logprobs: chat's a flag with top_logprobs beside; completions' a count */
  if (chat) {
    get_bool(j, "logprobs", &p->logprobs);
    if (get_int(j, "top_logprobs", 0, DSI_MAX_TOP_LOGPROBS, &v) == 1) {
      if (!p->logprobs && v > 0) return bad(j, "top_logprobs", "'%s' needs logprobs set to true%s", "");
      p->r.top_logprobs = (int)v;
    }
  } else if (get_int(j, "logprobs", 0, DSI_MAX_TOP_LOGPROBS, &v) == 1) {
    p->logprobs = 1;
    p->r.top_logprobs = (int)v;
  }
  p->r.logprobs = p->logprobs;
  return j->bad ? -1 : 0;
}

/* the model named, if any, is the one served (by one of its names) */
static int check_model(dsi_server *srv, in *j) {
  const cJSON *m = field(j, "model");
  if (!m) return 0;
  if (!cJSON_IsString(m)) return bad(j, "model", "'%s' must be a string%s", "");
  if (!server_serves(srv, m->valuestring)) {
    reply_error(j->rp, 404, "invalid_request_error", "model", "model_not_found", "the model '%s' does not exist",
                m->valuestring);
    j->bad = 1;
    return -1;
  }
  return 0;
}

/* prompt length and max_tokens against the context; 0 or an error reply */
static int check_length(dsi_server *srv, reply *rp, size_t n_prompt, params *p) {
  if (n_prompt == 0) {
    reply_error(rp, 400, "invalid_request_error", NULL, NULL, "the prompt is empty");
    return -1;
  }
  if ((long long)n_prompt + (p->max_tokens ? p->max_tokens : 1) > srv->o.ctx) {
    reply_error(rp, 400, "invalid_request_error", p->max_tokens ? "max_tokens" : "messages", "context_length_exceeded",
                "this model's maximum context length is %d tokens; the prompt has %zu tokens%s%s%s", srv->o.ctx,
                n_prompt, p->max_tokens ? " and " : "", p->max_tokens ? reply_name(rp, "max_tokens") : "",
                p->max_tokens ? " asks for more than the rest" : "");
    return -1;
  }
  p->r.max_tokens = (int)(p->max_tokens ? p->max_tokens : srv->o.ctx - (long long)n_prompt);
  return 0;
}

/* submit, or the reply that says why not */
static sreq *submit(dsi_server *srv, reply *rp, params *p) {
  dsi_sched_stats st;
  dsi_sched_get_stats(srv->s, &st);
  if (st.waiting >= srv->o.max_waiting) {
    reply_error(rp, 503, "server_error", NULL, "overloaded", "the server is overloaded: %d completions are waiting",
                st.waiting);
    return NULL;
  }
  dsi_err err = {0};
  sreq *q = sreq_submit(srv, &p->r, p->r.top_logprobs, &err);
  if (!q) {
    if (err.status == DSI_E_NOMEM) reply_nomem(rp, &err);
    else if (err.status == DSI_E_INVAL || err.status == DSI_E_CAPACITY)
      reply_error(rp, 400, "invalid_request_error", NULL, err.status == DSI_E_CAPACITY ? "context_length_exceeded" : NULL,
                  "%s", err.msg);
    else reply_error(rp, 500, "server_error", NULL, NULL, "%s", err.msg);
  }
  return q;
}

static const char *finish_str(dsi_finish f, int tool_calls) {
  return f == DSI_FINISH_LENGTH ? "length" : f == DSI_FINISH_STOP ? (tool_calls ? "tool_calls" : "stop") : "abort";
}

/* a token's text, for logprobs (out of memory: b failed) */
static void token_text(dsi_server *srv, int32_t id, sbuf *b) {
  char *t = NULL;
  size_t n = 0;
  dsi_err err = {0};
  int st = id >= 0 ? dsi_tok_decode(srv->tok, &id, 1, 0, &t, &n, &err) : DSI_OK;
  if (!st) sb_put(b, t, n);
  else if (st == DSI_E_NOMEM) b->oom = 1;
  free(t);
}

/* what went into the part sub also went into b */
static void sb_merge_oom(sbuf *b, const sbuf *sub) { b->oom |= sub->oom; }

/* "token":..,"logprob":..,"bytes":[..] of id */
static void token_fields(dsi_server *srv, sbuf *b, int32_t id, float lp) {
  sbuf t = {0};
  token_text(srv, id, &t);
  SB_LIT(b, "\"token\":");
  jstr(b, t.p ? t.p : "", t.n);
  SB_LIT(b, ",\"logprob\":");
  jnum(b, lp);
  SB_LIT(b, ",\"bytes\":[");
  for (size_t i = 0; i < t.n; i++) sb_printf(b, "%s%u", i ? "," : "", (unsigned char)t.p[i]);
  SB_LIT(b, "]");
  sb_merge_oom(b, &t);
  free(t.p);
}

/* chat logprobs entries of tokens [a, e) of c */
static void chat_logprobs(dsi_server *srv, const scomp *c, int n_top, int a, int e, sbuf *b) {
  SB_LIT(b, "{\"content\":[");
  for (int k = a; k < e; k++) {
    sb_put(b, k > a ? ",{" : "{", k > a ? 2 : 1);
    token_fields(srv, b, c->tok[k], c->lp[k]);
    SB_LIT(b, ",\"top_logprobs\":[");
    for (int t = 0; t < n_top && c->top[(size_t)k * n_top + t].id >= 0; t++) {
      const dsi_token_logprob *x = &c->top[(size_t)k * n_top + t];
      sb_put(b, t ? ",{" : "{", t ? 2 : 1);
      token_fields(srv, b, x->id, x->logprob);
      SB_LIT(b, "}");
    }
    SB_LIT(b, "]}");
  }
  SB_LIT(b, "]}");
}

/* completions' logprobs object, built column by column: the tokens, their
 * logprobs, the top ones as {text: logprob}, the text offsets */
typedef struct lp_cols {
  sbuf toks, lps, tops, offs;
  int n;
} lp_cols;

/* tokens [a, e) of tok (logprobs lp, top [n_top] each) from text offset
 * at (one before the text's start is said as 0); with null_first the first
 * has none (a prompt's first token); returns the offset past the last (out
 * of memory: b failed) */
static long long lp_add(dsi_server *srv, lp_cols *L, const int32_t *tok, const float *lp, const dsi_token_logprob *top,
                        int n_top, int a, int e, int null_first, long long at, sbuf *b) {
  for (int k = a; k < e; k++) {
    sbuf t = {0};
    token_text(srv, tok[k], &t);
    if (L->n++) SB_LIT(&L->toks, ","), SB_LIT(&L->lps, ","), SB_LIT(&L->tops, ","), SB_LIT(&L->offs, ",");
    jstr(&L->toks, t.p ? t.p : "", t.n);
    sb_printf(&L->offs, "%lld", at < 0 ? 0 : at);
    at += (long long)t.n;
    sb_merge_oom(b, &t);
    free(t.p);
    if (null_first && k == 0) {
      SB_LIT(&L->lps, "null");
      SB_LIT(&L->tops, "null");
      continue;
    }
    jnum(&L->lps, lp[k]);
    SB_LIT(&L->tops, "{");
    for (int x = 0; x < n_top && top[(size_t)k * n_top + x].id >= 0; x++) {
      const dsi_token_logprob *tl = &top[(size_t)k * n_top + x];
      sbuf tt = {0};
      token_text(srv, tl->id, &tt);
      if (x) SB_LIT(&L->tops, ",");
      jstr(&L->tops, tt.p ? tt.p : "", tt.n);
      SB_LIT(&L->tops, ":");
      jnum(&L->tops, tl->logprob);
      sb_merge_oom(b, &tt);
      free(tt.p);
    }
    SB_LIT(&L->tops, "}");
  }
  return at;
}

/* the object into b; L emptied */
static void lp_close(lp_cols *L, sbuf *b) {
  sb_printf(b, "{\"tokens\":[%s],\"token_logprobs\":[%s],\"top_logprobs\":[%s],\"text_offset\":[%s]}",
            L->toks.p ? L->toks.p : "", L->lps.p ? L->lps.p : "", L->tops.p ? L->tops.p : "",
            L->offs.p ? L->offs.p : "");
  b->oom |= L->toks.oom | L->lps.oom | L->tops.oom | L->offs.oom;
  free(L->toks.p), free(L->lps.p), free(L->tops.p), free(L->offs.p);
  memset(L, 0, sizeof *L);
}

/* the prompt's tokens with their logprobs (echo with logprobs), placed so
 * that the last ends where the echoed text does (a leading special token
 * the text lacks, as BOS, at 0) */
static void prompt_lp_add(dsi_server *srv, lp_cols *L, const sreq *q, const char *echo, sbuf *b) {
  if (!q->plp) return;
  long long total = 0, len = (long long)strlen(echo);
  for (int k = 0; k < q->n_plp; k++) {
    sbuf t = {0};
    token_text(srv, q->ptok[k], &t);
    total += (long long)t.n;
    sb_merge_oom(b, &t);
    free(t.p);
  }
  lp_add(srv, L, q->ptok, q->plp, q->ptop, q->n_top, 0, q->n_plp, 1, len - total, b);
}

/* completions' logprobs of tokens [a, e) of c from text offset at; returns
 * the offset past the last token */
static size_t text_logprobs(dsi_server *srv, const scomp *c, int n_top, int a, int e, size_t at, sbuf *b) {
  lp_cols L = {0};
  at = (size_t)lp_add(srv, &L, c->tok, c->lp, c->top, n_top, a, e, 0, (long long)at, b);
  lp_close(&L, b);
  return at;
}

static void usage_json(sbuf *b, int prompt, int cached, int completion, int reasoning, int chat) {
  sb_printf(b, "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
               "\"prompt_tokens_details\":{\"cached_tokens\":%d}",
            prompt, completion, prompt + completion, cached);
  if (chat) sb_printf(b, ",\"completion_tokens_details\":{\"reasoning_tokens\":%d}", reasoning);
  SB_LIT(b, "}");
}

/* ---- the output of one completion, as a chat message ---- */

/* tokens of c's output up to the end of its reasoning (the </think> token
 * included); all of them when it never ended */
static int reasoning_tokens(dsi_server *srv, const scomp *c, int in_reasoning) {
  int32_t end = dsi_tok_token_to_id(srv->tok, "</think>"), begin = dsi_tok_token_to_id(srv->tok, "<think>");
  if (!in_reasoning && !(c->n_tok && c->tok[0] == begin)) return 0;
  for (int k = 0; k < c->n_tok; k++)
    if (c->tok[k] == end) return k + 1;
  return c->n_tok;
}

/* tool call k of completion i of request id: its id, call_... */
static void call_id(char out[40], uint64_t id, int i, int k) {
  snprintf(out, 40, "call_%016llx%02x%02x", (unsigned long long)(id * 0x9e3779b97f4a7c15ull), i & 0xff, k & 0xff);
}

static void tool_call_json(sbuf *b, const char *name, const char *args, uint64_t id, int i, int k, int index) {
  char cid[40];
  call_id(cid, id, i, k);
  SB_LIT(b, "{");
  if (index >= 0) sb_printf(b, "\"index\":%d,", index);
  sb_printf(b, "\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":", cid);
  jcstr(b, name);
  SB_LIT(b, ",\"arguments\":");
  jcstr(b, args);
  SB_LIT(b, "}}");
}

/* ---- the output of one completion, as a response (/v1/responses) ---- */

enum { RI_NONE, RI_REASONING, RI_MESSAGE };

/* an output item's id: its kind's prefix (rs, msg, fc), the request, the item's index */
static void item_id(char out[48], const char *kind, uint64_t rid, int index) {
  snprintf(out, 48, "%s_%016llx%02x", kind, (unsigned long long)(rid * 0x9e3779b97f4a7c15ull), index & 0xff);
}

/* a reasoning or message item: in_progress as it opens (no content yet),
 * else completed or incomplete (cut at max_output_tokens) with its text */
static void text_item(sbuf *b, int kind, const char *id, const char *text, size_t n, const char *status) {
  const int done = strcmp(status, "in_progress") != 0;
  sb_printf(b, "{\"id\":\"%s\",\"type\":\"%s\",\"status\":\"%s\",", id, kind == RI_REASONING ? "reasoning" : "message",
            status);
  if (kind == RI_REASONING) SB_LIT(b, "\"summary\":[],\"content\":[");
  else SB_LIT(b, "\"role\":\"assistant\",\"content\":[");
  if (done) {
    sb_printf(b, "{\"type\":\"%s\",\"text\":", kind == RI_REASONING ? "reasoning_text" : "output_text");
    jstr(b, text, n);
    if (kind == RI_MESSAGE) SB_LIT(b, ",\"annotations\":[],\"logprobs\":[]");
    SB_LIT(b, "}");
  }
  SB_LIT(b, "]}");
}

/* a function_call item (arguments "" while in progress) */
static void call_item(sbuf *b, const char *id, const char *cid, const char *name, const char *args, int done) {
  sb_printf(b, "{\"id\":\"%s\",\"type\":\"function_call\",\"status\":\"%s\",\"call_id\":\"%s\",\"name\":", id,
            done ? "completed" : "in_progress", cid);
  jcstr(b, name);
  SB_LIT(b, ",\"arguments\":");
  jcstr(b, done ? args : "");
  SB_LIT(b, "}");
}

/* the response object: status in_progress (c NULL: no usage yet),
 * completed, incomplete (c ended at max tokens), failed (error) or
 * cancelled; items: its output items, comma-separated */
static void resp_object(sbuf *b, dsi_server *srv, const char *id, long created, const char *echo, const char *status,
                        const char *items, size_t n_items, const scomp *c, int reasoning, const char *error) {
  sb_printf(b, "{\"id\":\"%s\",\"object\":\"response\",\"created_at\":%ld,\"status\":\"%s\",\"background\":false,",
            id, created, status);
  SB_LIT(b, "\"error\":");
  if (error) {
    SB_LIT(b, "{\"code\":\"server_error\",\"message\":");
    jcstr(b, error);
    SB_LIT(b, "}");
  } else {
    SB_LIT(b, "null");
  }
  SB_LIT(b, ",\"incomplete_details\":");
  if (!strcmp(status, "incomplete")) SB_LIT(b, "{\"reason\":\"max_output_tokens\"}");
  else SB_LIT(b, "null");
  SB_LIT(b, ",\"model\":");
  jcstr(b, srv->model_name);
  if (echo && *echo) {
    SB_LIT(b, ",");
    sb_put(b, echo, strlen(echo));
  }
  SB_LIT(b, ",\"output\":[");
  sb_put(b, items, n_items);
  SB_LIT(b, "],\"usage\":");
  if (c) {
    sb_printf(b, "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},\"output_tokens\":%d,"
                 "\"output_tokens_details\":{\"reasoning_tokens\":%d},\"total_tokens\":%d}",
              c->prompt_tokens, c->cached_tokens, c->completion_tokens, reasoning, c->prompt_tokens + c->completion_tokens);
  } else {
    SB_LIT(b, "null");
  }
  SB_LIT(b, "}");
}

/* the fields of the response object that echo the request (as OpenAI's
 * do), as object members without the braces; NULL out of memory */
static char *resp_echo(const cJSON *body) {
  cJSON *o = cJSON_CreateObject();
  static const char *const keys[] = {"instructions", "max_output_tokens", "metadata", "parallel_tool_calls",
                                     "reasoning", "temperature", "text", "tool_choice", "tools", "top_p", "user"};
  static const char *const dflt[] = {"null", "null", "{}", "true", "{\"effort\":null,\"summary\":null}", "null",
                                     "{\"format\":{\"type\":\"text\"}}", "\"auto\"", "[]", "null", "null"};
  for (size_t k = 0; o && k < sizeof keys / sizeof *keys; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, keys[k]);
    cJSON_AddItemToObject(o, keys[k], v && !cJSON_IsNull(v) ? cJSON_Duplicate(v, 1) : cJSON_Parse(dflt[k]));
  }
  if (o) {
    cJSON_AddNullToObject(o, "previous_response_id");
    cJSON_AddFalseToObject(o, "store"); /* nothing is kept */
    cJSON_AddStringToObject(o, "truncation", "disabled");
  }
  char *t = o && !dsi_json_oom() ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!t) return NULL;
  size_t n = strlen(t); /* "{...}" -> "..." */
  memmove(t, t + 1, n - 2);
  t[n - 2] = 0;
  return t;
}

/* ---- the output of one completion, as an Anthropic message (/v1/messages) ---- */

static const char *msg_stop_reason(const scomp *c, int calls) {
  if (c->finish == DSI_FINISH_LENGTH) return "max_tokens";
  return calls ? "tool_use" : c->stop ? "stop_sequence" : "end_turn";
}

/* a tool call's input: its arguments when they are a JSON object (held
 * to the tool's input_schema, they are), else {"arguments": the text} */
static void msg_input(sbuf *b, const char *args) {
  cJSON *j = cJSON_Parse(args);
  if (cJSON_IsObject(j)) {
    sb_put(b, args, strlen(args));
  } else {
    SB_LIT(b, "{\"arguments\":");
    jcstr(b, args);
    SB_LIT(b, "}");
  }
  cJSON_Delete(j);
}

/* a tool_use block (its input empty as a stream starts it) */
static void tool_use_block(sbuf *b, const char *id, const char *name, const char *args) {
  sb_printf(b, "{\"type\":\"tool_use\",\"id\":\"%s\",\"name\":", id);
  jcstr(b, name);
  SB_LIT(b, ",\"input\":");
  if (args) msg_input(b, args);
  else SB_LIT(b, "{}");
  SB_LIT(b, "}");
}

/* a thinking or text block (empty as a stream starts it) */
static void text_block(sbuf *b, int kind, const char *text) {
  if (kind == RI_REASONING) {
    SB_LIT(b, "{\"type\":\"thinking\",\"thinking\":");
    jcstr(b, text);
    SB_LIT(b, ",\"signature\":\"\"}");
  } else {
    SB_LIT(b, "{\"type\":\"text\",\"text\":");
    jcstr(b, text);
    SB_LIT(b, "}");
  }
}

/* usage: prompt tokens read from the prefix cache apart, as Anthropic's cache reads */
static void msg_usage(sbuf *b, const scomp *c, int output) {
  sb_printf(b, "{\"input_tokens\":%d,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":%d,"
               "\"output_tokens\":%d}", c->prompt_tokens - c->cached_tokens, c->cached_tokens, output);
}

/* a tool_use block's id */
static void tool_use_id(char out[48], uint64_t rid, int k) {
  snprintf(out, 48, "toolu_%016llx%02x", (unsigned long long)(rid * 0x9e3779b97f4a7c15ull), k & 0xff);
}

/* the chat output parser's flags for an answer */
static int out_flags(int in_reasoning, const params *p) {
  return (in_reasoning ? DSI_CHAT_OUT_IN_REASONING : 0) | (p->continues ? DSI_CHAT_OUT_CONTINUES : 0);
}

/* ---- streaming ---- */

/* one choice of a stream: a completion of one of its requests */
typedef struct choice {
  sreq *q;
  int i;            /* completion of q */
  int index;        /* the choice's index in the response */
  int seen_tok;     /* tokens sent */
  size_t seen_text; /* bytes of text taken */
  size_t text_at;   /* completions' logprobs: text offset of the next token */
  dsi_chat_out *out;
  int n_calls;      /* tool calls sent */
  int started, ended;
} choice;

typedef struct stream {
  dsi_server *srv;
  int chat, fd;
  int n_req, n_choice;
  sreq **reqs;
  choice *ch;
  int include_usage, logprobs, n_top, prompt_only;
  char *forced;     /* chat: the answer's forced start, read by each choice's parser first */
  char *trailer;    /* chat, a named tool: the call's end, read after arguments whose JSON closed */
  char **echoes;    /* completions with echo: [n_req] prompt texts, sent first (with logprobs: once the
                       prompt's logprobs are in, which is before the first token) */
  char id[48];
  long created;
  sbuf out;
  size_t off;
  int done;
  int oom;          /* sending k_stream_oom, the stream's end */
  int in_reasoning;
  uint64_t rid;
  double t0;
  double t_out;     /* when the stream last had something to send (a keep-alive after keepalive_s without) */
  int n_prompt;     /* the first request's prompt tokens */
  /* /v1/responses and /v1/messages: events, not chunks (one choice) */
  int resp, msg;
  int seq;          /* the next event's sequence_number */
  int n_items;      /* output items opened */
  int item;         /* the open item: RI_NONE, RI_REASONING, RI_MESSAGE */
  char item_id[48];
  sbuf item_text;   /* the open item's text so far */
  sbuf items;       /* the closed items, comma-separated: the last event's output */
  char *echo;       /* the response object's fields that echo the request */
} stream;

static void chunk_head(stream *st, sbuf *b) {
  sb_printf(b, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%ld,\"model\":", st->id,
            st->chat ? "chat.completion.chunk" : "text_completion", st->created);
  jcstr(b, st->srv->model_name);
  SB_LIT(b, ",\"choices\":[");
}

/* one chunk of choice ch: delta (chat) or text, logprobs of tokens [a, e),
 * or (echo) the echoed prompt with its logprobs */
static void emit_lp(stream *st, choice *ch, const char *delta_or_text, size_t len, const char *finish, int a, int e,
                    const scomp *c, const char *echo) {
  sbuf *b = &st->out;
  chunk_head(st, b);
  sb_printf(b, "{\"index\":%d,", ch->index);
  if (st->chat) {
    SB_LIT(b, "\"delta\":");
    sb_put(b, delta_or_text, len);
  } else {
    SB_LIT(b, "\"text\":");
    jstr(b, delta_or_text, len);
  }
  SB_LIT(b, ",\"logprobs\":");
  if (st->logprobs && echo) {
    lp_cols L = {0};
    prompt_lp_add(st->srv, &L, ch->q, echo, b);
    lp_close(&L, b);
  } else if (st->logprobs && e > a) {
    if (st->chat) chat_logprobs(st->srv, c, st->n_top, a, e, b);
    else {
      ch->text_at = text_logprobs(st->srv, c, st->n_top, a, e, ch->text_at, b);
    }
  } else {
    SB_LIT(b, "null");
  }
  SB_LIT(b, ",\"finish_reason\":");
  if (finish) jcstr(b, finish);
  else SB_LIT(b, "null");
  SB_LIT(b, "}]}\n\n");
}

static void emit(stream *st, choice *ch, const char *delta_or_text, size_t len, const char *finish, int a, int e,
                 const scomp *c) {
  emit_lp(st, ch, delta_or_text, len, finish, a, e, c, NULL);
}

/* the chat deltas of a piece of text (and of the parser's end when fin) */
static void chat_deltas(stream *st, choice *ch, const dsi_chat_out_delta *d, int a, int e, const scomp *c) {
  sbuf delta = {0};
  int any = 0;
  if (d->reasoning_len) {
    SB_LIT(&delta, "{\"reasoning_content\":");
    jstr(&delta, d->reasoning, d->reasoning_len);
    SB_LIT(&delta, ",\"reasoning\":");
    jstr(&delta, d->reasoning, d->reasoning_len);
    any = 1;
  }
  if (d->content_len) {
    sb_put(&delta, any ? ",\"content\":" : "{\"content\":", any ? 11 : 11);
    jstr(&delta, d->content, d->content_len);
    any = 1;
  }
  if (d->n_tool_calls > ch->n_calls) {
    sb_put(&delta, any ? ",\"tool_calls\":[" : "{\"tool_calls\":[", 15);
    for (int k = ch->n_calls; k < d->n_tool_calls; k++) {
      const char *name, *args;
      dsi_chat_out_tool_call(ch->out, k, &name, &args);
      if (k > ch->n_calls) SB_LIT(&delta, ",");
      tool_call_json(&delta, name, args, st->rid, ch->index, k, k);
    }
    SB_LIT(&delta, "]");
    ch->n_calls = d->n_tool_calls;
    any = 1;
  }
  if (any) SB_LIT(&delta, "}");
  sb_merge_oom(&st->out, &delta);
  if (!delta.oom && (any || (st->logprobs && e > a))) emit(st, ch, any ? delta.p : "{}", any ? delta.n : 2, NULL, a, e, c);
  free(delta.p);
}

/* ---- a response's events (/v1/responses, streamed) ----
 * response.created and .in_progress; per output item .output_item.added,
 * then for reasoning and the answer .content_part.added, text deltas, the
 * text's .done, .content_part.done; for a function call its arguments'
 * delta and .done; then .output_item.done; last response.completed (or
 * .incomplete, .failed) with the whole response. */

/* an event's start: its type and sequence number; the caller adds its
 * fields and ev_end closes it */
static void ev_begin(stream *st, const char *type) {
  sb_printf(&st->out, "event: %s\ndata: {\"type\":\"%s\"", type, type);
  if (st->resp) sb_printf(&st->out, ",\"sequence_number\":%d", st->seq++);
}
static void ev_end(stream *st) { SB_LIT(&st->out, "}\n\n"); }

/* response.created, .in_progress, and the last event: the response */
static void ev_response(stream *st, const char *type, const char *status, const scomp *c, const char *error) {
  ev_begin(st, type);
  SB_LIT(&st->out, ",\"response\":");
  resp_object(&st->out, st->srv, st->id, st->created, st->echo, status, st->items.p ? st->items.p : "", st->items.n, c,
              c ? reasoning_tokens(st->srv, c, st->in_reasoning) : 0, error);
  ev_end(st);
}

/* the item's place: ,"item_id":..,"output_index":.. */
static void ev_at(stream *st, const char *id, int content) {
  sb_printf(&st->out, ",\"item_id\":\"%s\",\"output_index\":%d", id, st->n_items - 1);
  if (content) SB_LIT(&st->out, ",\"content_index\":0");
}

/* an item closed: its JSON onto the response's output */
static void item_done(stream *st, const sbuf *item) {
  if (st->items.n) SB_LIT(&st->items, ",");
  sb_put(&st->items, item->p, item->n);
  st->items.oom |= item->oom;
  ev_begin(st, "response.output_item.done");
  sb_printf(&st->out, ",\"output_index\":%d,\"item\":", st->n_items - 1);
  sb_put(&st->out, item->p, item->n);
  ev_end(st);
}

/* the open reasoning or message item ends (status: completed, or
 * incomplete when the response was cut inside it) */
static void close_item(stream *st, const char *status) {
  if (st->item == RI_NONE) return;
  const int r = st->item == RI_REASONING;
  const char *text = st->item_text.p ? st->item_text.p : "";
  ev_begin(st, r ? "response.reasoning_text.done" : "response.output_text.done");
  ev_at(st, st->item_id, 1);
  SB_LIT(&st->out, ",\"text\":");
  jstr(&st->out, text, st->item_text.n);
  if (!r) SB_LIT(&st->out, ",\"logprobs\":[]");
  ev_end(st);
  ev_begin(st, "response.content_part.done");
  ev_at(st, st->item_id, 1);
  sb_printf(&st->out, ",\"part\":{\"type\":\"%s\",\"text\":", r ? "reasoning_text" : "output_text");
  jstr(&st->out, text, st->item_text.n);
  if (!r) SB_LIT(&st->out, ",\"annotations\":[],\"logprobs\":[]");
  SB_LIT(&st->out, "}");
  ev_end(st);
  sbuf item = {0};
  text_item(&item, st->item, st->item_id, text, st->item_text.n, status);
  item_done(st, &item);
  free(item.p);
  st->out.oom |= st->item_text.oom;
  st->item_text.n = 0;
  st->item = RI_NONE;
}

/* text of a reasoning or message item: opened first when another is open */
static void item_text(stream *st, int kind, const char *text, size_t n) {
  if (st->item != kind) {
    close_item(st, "completed");
    st->item = kind;
    item_id(st->item_id, kind == RI_REASONING ? "rs" : "msg", st->rid, st->n_items++);
    ev_begin(st, "response.output_item.added");
    sb_printf(&st->out, ",\"output_index\":%d,\"item\":", st->n_items - 1);
    text_item(&st->out, kind, st->item_id, "", 0, "in_progress");
    ev_end(st);
    ev_begin(st, "response.content_part.added");
    ev_at(st, st->item_id, 1);
    if (kind == RI_REASONING) SB_LIT(&st->out, ",\"part\":{\"type\":\"reasoning_text\",\"text\":\"\"}");
    else SB_LIT(&st->out, ",\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],\"logprobs\":[]}");
    ev_end(st);
  }
  sb_put(&st->item_text, text, n);
  ev_begin(st, kind == RI_REASONING ? "response.reasoning_text.delta" : "response.output_text.delta");
  ev_at(st, st->item_id, 1);
  SB_LIT(&st->out, ",\"delta\":");
  jstr(&st->out, text, n);
  if (kind == RI_MESSAGE) SB_LIT(&st->out, ",\"logprobs\":[]");
  ev_end(st);
}

/* the events of a piece of the parser's output: reasoning, answer, tool
 * calls (each whole: one arguments delta) */
static void resp_deltas(stream *st, choice *ch, const dsi_chat_out_delta *d) {
  if (d->reasoning_len) item_text(st, RI_REASONING, d->reasoning, d->reasoning_len);
  if (d->content_len) item_text(st, RI_MESSAGE, d->content, d->content_len);
  for (int k = ch->n_calls; k < d->n_tool_calls; k++) {
    close_item(st, "completed");
    const char *name, *args;
    dsi_chat_out_tool_call(ch->out, k, &name, &args);
    char id[48], cid[40];
    item_id(id, "fc", st->rid, st->n_items++);
    call_id(cid, st->rid, 0, k);
    ev_begin(st, "response.output_item.added");
    sb_printf(&st->out, ",\"output_index\":%d,\"item\":", st->n_items - 1);
    call_item(&st->out, id, cid, name, args, 0);
    ev_end(st);
    ev_begin(st, "response.function_call_arguments.delta");
    ev_at(st, id, 0);
    SB_LIT(&st->out, ",\"delta\":");
    jcstr(&st->out, args);
    ev_end(st);
    ev_begin(st, "response.function_call_arguments.done");
    ev_at(st, id, 0);
    SB_LIT(&st->out, ",\"name\":");
    jcstr(&st->out, name);
    SB_LIT(&st->out, ",\"arguments\":");
    jcstr(&st->out, args);
    ev_end(st);
    sbuf item = {0};
    call_item(&item, id, cid, name, args, 1);
    item_done(st, &item);
    free(item.p);
  }
  if (d->n_tool_calls > ch->n_calls) ch->n_calls = d->n_tool_calls;
}

/* ---- a message's events (/v1/messages, streamed) ----
 * message_start; per content block content_block_start, its deltas
 * (thinking_delta, text_delta; a tool_use's input as one input_json_delta,
 * sent once the call's end tag is read), content_block_stop; then
 * message_delta with the stop reason and usage, and message_stop. */

static void block_stop_at(stream *st, int index) {
  ev_begin(st, "content_block_stop");
  sb_printf(&st->out, ",\"index\":%d", index);
  ev_end(st);
}

/* the open thinking or text block ends */
static void block_stop(stream *st) {
  if (st->item == RI_NONE) return;
  block_stop_at(st, st->n_items - 1);
  st->item = RI_NONE;
}

static void block_text(stream *st, int kind, const char *text, size_t n) {
  if (st->item != kind) {
    block_stop(st);
    st->item = kind;
    ev_begin(st, "content_block_start");
    sb_printf(&st->out, ",\"index\":%d,\"content_block\":", st->n_items++);
    text_block(&st->out, kind, "");
    ev_end(st);
  }
  ev_begin(st, "content_block_delta");
  sb_printf(&st->out, ",\"index\":%d,\"delta\":{\"type\":\"%s\",\"%s\":", st->n_items - 1,
            kind == RI_REASONING ? "thinking_delta" : "text_delta", kind == RI_REASONING ? "thinking" : "text");
  jstr(&st->out, text, n);
  SB_LIT(&st->out, "}");
  ev_end(st);
}

static void msg_deltas(stream *st, choice *ch, const dsi_chat_out_delta *d) {
  if (d->reasoning_len) block_text(st, RI_REASONING, d->reasoning, d->reasoning_len);
  if (d->content_len) block_text(st, RI_MESSAGE, d->content, d->content_len);
  for (int k = ch->n_calls; k < d->n_tool_calls; k++) {
    block_stop(st);
    const char *name, *args;
    dsi_chat_out_tool_call(ch->out, k, &name, &args);
    char id[48];
    tool_use_id(id, st->rid, k);
    ev_begin(st, "content_block_start");
    sb_printf(&st->out, ",\"index\":%d,\"content_block\":", st->n_items++);
    tool_use_block(&st->out, id, name, NULL);
    ev_end(st);
    ev_begin(st, "content_block_delta");
    sb_printf(&st->out, ",\"index\":%d,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":", st->n_items - 1);
    sbuf in = {0};
    msg_input(&in, args);
    jstr(&st->out, in.p ? in.p : "", in.n);
    st->out.oom |= in.oom;
    free(in.p);
    SB_LIT(&st->out, "}");
    ev_end(st);
    block_stop_at(st, st->n_items - 1);
  }
  if (d->n_tool_calls > ch->n_calls) ch->n_calls = d->n_tool_calls;
}

/* the last events: the open block closed (an empty text block when none
 * came), the stop reason and usage, message_stop; or an error event */
static void msg_end(stream *st) {
  choice *ch = &st->ch[0];
  const scomp *c = &ch->q->c[0];
  if (c->finish == DSI_FINISH_ERROR || c->finish == DSI_FINISH_CANCELLED) {
    ev_begin(st, "error");
    SB_LIT(&st->out, ",\"error\":{\"type\":\"api_error\",\"message\":");
    jcstr(&st->out, c->finish == DSI_FINISH_CANCELLED ? "the request was cancelled: the server is shutting down"
                                                     : c->error ? c->error : "the request failed");
    SB_LIT(&st->out, "}");
    ev_end(st);
    return;
  }
  if (!st->n_items) block_text(st, RI_MESSAGE, "", 0);
  block_stop(st);
  ev_begin(st, "message_delta");
  SB_LIT(&st->out, ",\"delta\":{\"stop_reason\":");
  jcstr(&st->out, msg_stop_reason(c, ch->n_calls));
  SB_LIT(&st->out, ",\"stop_sequence\":");
  if (c->stop && c->finish == DSI_FINISH_STOP && !ch->n_calls) jcstr(&st->out, c->stop);
  else SB_LIT(&st->out, "null");
  SB_LIT(&st->out, "},\"usage\":");
  msg_usage(&st->out, c, c->completion_tokens);
  ev_end(st);
  ev_begin(st, "message_stop");
  ev_end(st);
}

/* the deltas of the parser's output as the stream's kind sends them */
static void deltas(stream *st, choice *ch, const dsi_chat_out_delta *d, int a, int e, const scomp *c) {
  if (st->resp) resp_deltas(st, ch, d);
  else if (st->msg) msg_deltas(st, ch, d);
  else chat_deltas(st, ch, d, a, e, c);
}

/* take what choice ch's completion made since last time into chunks */
static void take(stream *st, choice *ch, const char *text, size_t len, int a, int e, const scomp *c, int ended) {
  if (!ch->started) {
    if (st->echoes && st->logprobs && !e && !ended) return; /* the prompt's logprobs are not all in */
    ch->started = 1;
    if (st->echoes) { /* completions with echo: the prompt first */
      const char *echo = st->echoes[ch->index / ch->q->n];
      emit_lp(st, ch, echo, strlen(echo), NULL, 0, 0, c, echo);
      ch->text_at = strlen(echo);
    }
    if (st->resp) {
      ev_response(st, "response.created", "in_progress", NULL, NULL);
      ev_response(st, "response.in_progress", "in_progress", NULL, NULL);
    } else if (st->msg) {
      ev_begin(st, "message_start");
      sb_printf(&st->out, ",\"message\":{\"id\":\"%s\",\"type\":\"message\",\"role\":\"assistant\",\"model\":", st->id);
      jcstr(&st->out, st->srv->model_name);
      /* the prompt's tokens (its cache reads are told with the end, in message_delta) */
      sb_printf(&st->out, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":%d,"
                          "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":0}}",
                st->n_prompt);
      ev_end(st);
    } else if (st->chat) {
      static const char role[] = "{\"role\":\"assistant\",\"content\":\"\"}";
      emit(st, ch, role, sizeof role - 1, NULL, 0, 0, c);
    }
    if (st->chat) {
      dsi_chat_out_delta d;
      if (st->forced && dsi_chat_out_feed(ch->out, st->forced, strlen(st->forced), &d, NULL)) st->out.oom = 1;
      else if (st->forced) deltas(st, ch, &d, 0, 0, c);
    }
  }
  if (st->chat) {
    dsi_chat_out_delta d;
    if (len || e > a) { /* the parser fails only for want of memory */
      if (dsi_chat_out_feed(ch->out, text, len, &d, NULL)) st->out.oom = 1;
      else deltas(st, ch, &d, a, e, c);
    }
    if (ended && c->json_closed && st->trailer) { /* a named tool's arguments closed: the call's end */
      if (dsi_chat_out_feed(ch->out, st->trailer, strlen(st->trailer), &d, NULL)) st->out.oom = 1;
      else deltas(st, ch, &d, e, e, c);
    }
    if (ended && c->finish != DSI_FINISH_ERROR) {
      if (dsi_chat_out_finish(ch->out, &d, NULL)) st->out.oom = 1;
      else deltas(st, ch, &d, e, e, c);
    }
  } else if (len || (st->logprobs && e > a)) {
    emit(st, ch, text, len, NULL, a, e, c);
  }
  if (!ended) return;
  ch->ended = 1;
  if (st->msg) return; /* the last events come with the stream's end (finish_stream) */
  if (st->resp) { /* the last event comes with the stream's end (finish_stream) */
    if (!st->n_items && c->finish != DSI_FINISH_ERROR) item_text(st, RI_MESSAGE, "", 0); /* an empty answer */
    close_item(st, c->finish == DSI_FINISH_LENGTH ? "incomplete" : "completed");
    return;
  }
  if (c->finish == DSI_FINISH_ERROR) {
    SB_LIT(&st->out, "data: {\"error\":{\"message\":");
    jcstr(&st->out, c->error ? c->error : "the request failed");
    SB_LIT(&st->out, ",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n");
    return;
  }
  const char *fin = st->prompt_only ? "length" : finish_str(c->finish, ch->n_calls > 0);
  if (st->chat) emit(st, ch, "{}", 2, fin, 0, 0, c);
  else emit(st, ch, "", 0, fin, 0, 0, c);
}

/* the usage chunk and [DONE]; a response's last event */
static void finish_stream(stream *st) {
  if (st->msg) {
    msg_end(st);
    st->done = 1;
    return;
  }
  if (st->resp) {
    const scomp *c = &st->ch[0].q->c[0];
    if (c->finish == DSI_FINISH_ERROR)
      ev_response(st, "response.failed", "failed", c, c->error ? c->error : "the request failed");
    else if (c->finish == DSI_FINISH_CANCELLED)
      ev_response(st, "response.failed", "cancelled", c, "the request was cancelled: the server is shutting down");
    else if (c->finish == DSI_FINISH_LENGTH) ev_response(st, "response.incomplete", "incomplete", c, NULL);
    else ev_response(st, "response.completed", "completed", c, NULL);
    st->out.oom |= st->items.oom;
    st->done = 1;
    return;
  }
  if (st->include_usage) {
    int prompt = 0, cached = 0, completion = 0, reasoning = 0;
    for (int r = 0; r < st->n_req; r++) {
      prompt += st->reqs[r]->c[0].prompt_tokens;
      cached += st->reqs[r]->c[0].cached_tokens;
    }
    for (int k = 0; k < st->n_choice; k++) {
      const scomp *c = &st->ch[k].q->c[st->ch[k].i];
      completion += st->prompt_only ? 0 : c->completion_tokens;
      if (st->chat) reasoning += reasoning_tokens(st->srv, c, st->in_reasoning);
    }
    chunk_head(st, &st->out);
    SB_LIT(&st->out, "],\"usage\":");
    usage_json(&st->out, prompt, cached, completion, reasoning, st->chat);
    SB_LIT(&st->out, "}\n\n");
  }
  SB_LIT(&st->out, "data: [DONE]\n\n");
  st->done = 1;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* after keepalive_s with nothing sent (the request waiting in the queue,
 * or a long prompt's prefill): an SSE comment, which clients pass over, or
 * Anthropic's ping event; so that a client's idle timeout (Node's fetch:
 * 300 s) does not end a stream whose first token is minutes away */
static void keepalive(stream *st) {
  double t = now_s(), every = st->srv->o.keepalive_s ? st->srv->o.keepalive_s : 15.0;
  if (every < 0 || t - st->t_out < every) return;
  if (st->msg) SB_LIT(&st->out, "event: ping\ndata: {\"type\":\"ping\"}\n\n");
  else SB_LIT(&st->out, ": keep-alive\n\n");
}

/* one round: wait for news (on the first request still running, 50 ms at
 * most), then turn what every choice has into chunks. -1: the client left */
static int stream_round(stream *st) {
  sreq *wait_on = NULL;
  for (int k = 0; k < st->n_choice && !wait_on; k++)
    if (!st->ch[k].ended) wait_on = st->ch[k].q;
  if (!wait_on) {
    finish_stream(st);
    return 0;
  }
  /* wait (50 ms at most, then look at every choice anyway) */
  int seen[MAX_N] = {0};
  char ended[MAX_N] = {0};
  for (int k = 0; k < st->n_choice; k++)
    if (st->ch[k].q == wait_on) {
      seen[st->ch[k].i] = st->ch[k].seen_tok;
      ended[st->ch[k].i] = (char)st->ch[k].ended;
    }
  pthread_mutex_lock(&wait_on->mu);
  int gone = sreq_wait(wait_on, seen, ended, st->fd, 1) < 0;
  pthread_mutex_unlock(&wait_on->mu);
  if (gone) return -1;
  keepalive(st);
  for (int k = 0; k < st->n_choice; k++) {
    choice *ch = &st->ch[k];
    if (ch->ended) continue;
    sreq *q = ch->q;
    pthread_mutex_lock(&q->mu);
    scomp *c = &q->c[ch->i];
    size_t len = c->text.n - ch->seen_text;
    char *text = len ? malloc(len) : NULL;
    if (c->oom || (len && !text)) { /* the stream ends with an out-of-memory event */
      pthread_mutex_unlock(&q->mu);
      free(text);
      st->out.oom = 1;
      return 0;
    }
    if (len) memcpy(text, c->text.p + ch->seen_text, len);
    int a = ch->seen_tok, e = c->n_tok, ended = c->finish != DSI_FINISH_NONE;
    ch->seen_text = c->text.n;
    ch->seen_tok = e;
    pthread_mutex_unlock(&q->mu);
    /* a choice opens with its first token (or its end): its prompt's
     * counts are in by then, and the scomp's tokens up to e and its end
     * fields are not written again once read (the loop only appends) */
    int news = e > a || len || ended;
    if (st->prompt_only) e = a, len = 0; /* the token drawn is not said */
    if (news || ch->started) take(st, ch, text, len, a, e, c, ended);
    free(text);
  }
  return 0;
}

/* the last event of a stream whose next chunk could not be made for want
 * of memory (its requests are cancelled when the stream is freed) */
static const char k_stream_oom[] = "data: {\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                   "\"param\":null,\"code\":\"out_of_memory\"}}\n\n";

ssize_t api_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  stream *st = cls;
  const char *from = st->out.p;
  size_t have = st->out.n;
  for (;;) {
    if (st->out.oom && !st->oom) { /* what the round made is dropped (none of it was sent) */
      st->oom = st->done = 1;
      st->off = 0;
    }
    if (st->oom) from = k_stream_oom, have = sizeof k_stream_oom - 1;
    else from = st->out.p, have = st->out.n;
    if (st->off < have) break;
    if (st->done) return MHD_CONTENT_READER_END_OF_STREAM;
    st->out.n = 0;
    st->off = 0;
    if (stream_round(st) < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (st->out.n) st->t_out = now_s();
  }
  size_t n = have - st->off;
  if (n > max) n = max;
  memcpy(buf, from + st->off, n);
  st->off += n;
  return (ssize_t)n;
}

static void stream_free(void *cls) {
  stream *st = cls;
  if (!st->srv->o.quiet) {
    const scomp *c = &st->reqs[0]->c[0];
    int out = 0;
    for (int k = 0; k < st->n_choice; k++) out += st->ch[k].seen_tok;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    fprintf(stderr, "serve: %s streamed: in %d (cached %d) out %d ttft %.3f s total %.3f s %s\n", st->id,
            c->prompt_tokens, c->cached_tokens, out, c->queue_s + c->prefill_s,
            (double)t.tv_sec + t.tv_nsec * 1e-9 - st->t0,
            st->done ? finish_str(c->finish, st->ch[0].n_calls > 0) : "client gone");
  }
  for (int k = 0; k < st->n_choice; k++) dsi_chat_out_free(st->ch[k].out);
  for (int r = 0; r < st->n_req; r++) sreq_release(st->reqs[r]);
  if (st->echoes)
    for (int r = 0; r < st->n_req; r++) free(st->echoes[r]);
  free(st->echoes);
  free(st->reqs);
  free(st->ch);
  free(st->out.p);
  free(st->forced), free(st->trailer);
  free(st->item_text.p), free(st->items.p), free(st->echo);
  free(st);
}

/* what a stream sends: completions' chunks, chat's, or a response's events */
enum { S_COMPLETIONS, S_CHAT, S_RESPONSES, S_MESSAGES };

/* the reply that streams reqs (taken, with echoes, and a response's echo
 * of its request) */
static void reply_stream(dsi_server *srv, reply *rp, int kind, sreq **reqs, int n_req, char **echoes, char *echo,
                         const params *p, int in_reasoning, int fd, const char *id) {
  stream *st = calloc(1, sizeof *st);
  if (st) st->ch = calloc((size_t)n_req * reqs[0]->n, sizeof *st->ch);
  if (!st || !st->ch) {
    for (int r = 0; r < n_req; r++) sreq_release(reqs[r]);
    if (echoes)
      for (int r = 0; r < n_req; r++) free(echoes[r]);
    free(echoes);
    free(echo);
    free(reqs);
    if (st) free(st->ch);
    free(st);
    reply_oom(rp, "for the stream");
    return;
  }
  int chat = kind != S_COMPLETIONS;
  st->srv = srv;
  st->chat = chat;
  st->resp = kind == S_RESPONSES;
  st->msg = kind == S_MESSAGES;
  st->echo = echo;
  st->fd = fd;
  st->reqs = reqs;
  st->n_req = n_req;
  st->echoes = echoes;
  st->include_usage = p->include_usage;
  st->logprobs = p->logprobs;
  st->n_top = p->r.top_logprobs;
  st->prompt_only = p->prompt_only;
  if (p->forced && !(st->forced = strdup(p->forced))) st->out.oom = 1; /* the first read says so */
  if (p->trailer && !(st->trailer = strdup(p->trailer))) st->out.oom = 1;
  st->in_reasoning = in_reasoning;
  st->created = (long)time(NULL);
  st->rid = reqs[0]->id;
  st->t0 = st->t_out = now_s();
  st->n_prompt = p->r.n_prompt;
  snprintf(st->id, sizeof st->id, "%s", id);
  int n = reqs[0]->n;
  st->n_choice = n_req * n;
  for (int r = 0; r < n_req; r++)
    for (int i = 0; i < n; i++) {
      choice *ch = &st->ch[r * n + i];
      ch->q = reqs[r];
      ch->i = i;
      ch->index = r * n + i;
      if (chat && dsi_chat_out_open(&ch->out, out_flags(in_reasoning, p), NULL)) st->out.oom = 1; /* the first read says so */
    }
  rp->status = 200;
  rp->resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, api_stream_read, st, stream_free);
  if (!rp->resp) { /* MHD out of memory: no answer, the connection is closed */
    stream_free(st);
    return;
  }
  rp->stream = st;
  MHD_add_response_header(rp->resp, "Content-Type", "text/event-stream");
  MHD_add_response_header(rp->resp, "Cache-Control", "no-cache");
  rp->log = "streaming";
}

/* the reply that streams one request's answer (q and echo taken) */
static void stream_one(dsi_server *srv, reply *rp, int kind, sreq *q, char *echo, const params *p, int in_reasoning,
                       int fd, const char *id) {
  sreq **reqs = malloc(sizeof *reqs);
  if (!reqs) {
    sreq_release(q);
    free(echo);
    reply_oom(rp, "for the stream");
    return;
  }
  reqs[0] = q;
  reply_stream(srv, rp, kind, reqs, 1, NULL, echo, p, in_reasoning, fd, id);
}

/* ---- waiting for whole answers ---- */

/* wait until every request has ended; -1 when the client left (the
 * requests are then released) */
static int wait_all(sreq **reqs, int n_req, int fd) {
  for (int r = 0; r < n_req; r++) {
    sreq *q = reqs[r];
    pthread_mutex_lock(&q->mu);
    int seen[MAX_N];
    char ended[MAX_N];
    int gone = 0;
    while (q->n_done < q->n && !gone) {
      for (int i = 0; i < q->n; i++) seen[i] = q->c[i].n_tok, ended[i] = q->c[i].finish != DSI_FINISH_NONE;
      gone = sreq_wait(q, seen, ended, fd, 0) < 0;
    }
    pthread_mutex_unlock(&q->mu);
    if (gone) {
      for (int k = 0; k < n_req; k++) sreq_release(reqs[k]);
      return -1;
    }
  }
  return 0;
}

/* an ended completion that failed (or was cancelled at shutdown) turns the
 * whole answer into an error reply */
static int failed(sreq **reqs, int n_req, reply *rp) {
  for (int r = 0; r < n_req; r++)
    for (int i = 0; i < reqs[r]->n; i++) {
      const scomp *c = &reqs[r]->c[i];
      if (c->oom) {
        reply_oom(rp, "for the answer");
        return 1;
      }
      if (c->finish == DSI_FINISH_ERROR) {
        reply_error(rp, 500, "server_error", NULL, NULL, "%s", c->error ? c->error : "the request failed");
        return 1;
      }
      if (c->finish == DSI_FINISH_CANCELLED) {
        reply_error(rp, 503, "server_error", NULL, "shutting_down", "the request was cancelled: the server is shutting down");
        return 1;
      }
    }
  return 0;
}

static void log_req(reply *rp, const char *id, const sreq *q, int completion) {
  const scomp *c = &q->c[0];
  snprintf(rp->logbuf, sizeof rp->logbuf, "%s in %d (cached %d) out %d ttft %.3f s %s", id, c->prompt_tokens,
           c->cached_tokens, completion, c->queue_s + c->prefill_s, finish_str(c->finish, 0));
  rp->log = rp->logbuf;
}

/* ---- chat ---- */

/* a message's content as text: a string, null, or an array of text parts */
static int content_text(in *j, const cJSON *content, sbuf *out) {
  if (!content || cJSON_IsNull(content)) return 0;
  if (cJSON_IsString(content)) {
    sb_put(out, content->valuestring, strlen(content->valuestring));
    return 0;
  }
  if (!cJSON_IsArray(content)) return bad(j, "messages", "'%s': content must be a string or an array of parts%s", "");
  const cJSON *part;
  cJSON_ArrayForEach(part, content) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
      return bad(j, "messages", "'%s': only text content parts ({\"type\": \"text\", \"text\": ...}) are supported%s",
                 "");
    sb_put(out, text->valuestring, strlen(text->valuestring));
  }
  return 0;
}

/* the messages as the template reads them: role, content as text,
 * reasoning_content, tool_calls (arguments as JSON text), tool_call_id,
 * name. NULL after an error reply. */
static cJSON *chat_messages(in *j) {
  const cJSON *msgs = field(j, "messages");
  if (!msgs) {
    bad(j, "messages", "'%s' is required%s", "");
    return NULL;
  }
  if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs)) {
    bad(j, "messages", "'%s' must be a non-empty array of messages%s", "");
    return NULL;
  }
  cJSON *out = cJSON_CreateArray();
  if (!out) {
    oom(j, "for the messages");
    return NULL;
  }
  const cJSON *m;
  cJSON_ArrayForEach(m, msgs) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
      bad(j, "messages", "'%s': each message must be an object with a role%s", "");
      break;
    }
    const char *r = role->valuestring;
    if (!strcmp(r, "developer")) r = "system";
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
      bad(j, "messages", "'%s': a role must be system, developer, user, assistant or tool%s", "");
      break;
    }
    sbuf text = {0};
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (content_text(j, content, &text) || (text.oom && oom(j, "for a message"))) {
      free(text.p);
      break;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "role", r);
    /* an assistant's tool calls come with no content: null, as DeepSeek's
     * templates test for it */
    if (!strcmp(r, "assistant") && (!content || cJSON_IsNull(content))) cJSON_AddNullToObject(o, "content");
    else cJSON_AddStringToObject(o, "content", text.p ? text.p : "");
    free(text.p);
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
    if (cJSON_IsString(rc)) cJSON_AddStringToObject(o, "reasoning_content", rc->valuestring);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
    if (cJSON_IsString(id)) cJSON_AddStringToObject(o, "tool_call_id", id->valuestring);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
    if (cJSON_IsString(name)) cJSON_AddStringToObject(o, "name", name->valuestring);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (calls && !cJSON_IsNull(calls)) {
      if (!cJSON_IsArray(calls)) {
        cJSON_Delete(o);
        bad(j, "messages", "'%s': tool_calls must be an array%s", "");
        break;
      }
      cJSON *cs = cJSON_AddArrayToObject(o, "tool_calls");
      const cJSON *call;
      int ok = 1;
      cJSON_ArrayForEach(call, calls) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        const cJSON *fname = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        const cJSON *args = fn ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
        if (!cJSON_IsString(fname)) {
          ok = 0;
          break;
        }
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "type", "function");
        const cJSON *cid = cJSON_GetObjectItemCaseSensitive(call, "id");
        if (cJSON_IsString(cid)) cJSON_AddStringToObject(c, "id", cid->valuestring);
        cJSON *f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(f, "name", fname->valuestring);
        if (cJSON_IsString(args)) {
          cJSON_AddStringToObject(f, "arguments", args->valuestring);
        } else {
          char *a = args ? cJSON_PrintUnformatted(args) : NULL;
          cJSON_AddStringToObject(f, "arguments", a ? a : "{}");
          free(a);
        }
        cJSON_AddItemToArray(cs, c);
      }
      if (!ok) {
        cJSON_Delete(o);
        bad(j, "messages", "'%s': each tool call needs function.name%s", "");
        break;
      }
    }
    cJSON_AddItemToArray(out, o);
  }
  if (j->bad) {
    cJSON_Delete(out);
    return NULL;
  }
  return out;
}

/* tool_choice "required" or {"type": "function", "function": {"name"}}:
 * the answer is made to start with a tool call, as the chat template writes
 * one (rendered from a call with marker name and arguments): its opening up
 * to the name (required), or through the name to the arguments (named).
 * With the prompt inside <think>, the reasoning is closed first. *between
 * (required): what the template writes from a name to the arguments;
 * *trailer: from the arguments through the calls' end (NULL when the
 * template writes no call end tag). NULL with the error reply when the
 * template writes no calls (or out of memory). */
#define MARK_NAME "DSI_TOOL_NAME_MARK"
#define MARK_ARGS "DSI_TOOL_ARGS_MARK"
static char *forced_call(dsi_server *srv, in *j, const char *name, int in_reasoning, char **between, char **trailer) {
  static const char msgs[] = "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null,"
                             "\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"" MARK_NAME
                             "\",\"arguments\":\"" MARK_ARGS "\"}}]}]";
  char *t = NULL;
  dsi_err err = {0};
  if (dsi_chat_fmt_render(srv->fmt, msgs, 0, "{}", &t, &err)) {
    if (err.status == DSI_E_NOMEM) return oom(j, "for the tool call's opening"), NULL;
    bad(j, "tool_choice", "'%s' other than auto or none needs a chat template that writes tool calls%s", "");
    return NULL;
  }
  const char *b = strstr(t, "<｜tool▁calls▁begin｜>"), *nm = b ? strstr(b, MARK_NAME) : NULL;
  const char *ar = nm ? strstr(nm, MARK_ARGS) : NULL;
  if (!ar) {
    free(t);
    bad(j, "tool_choice", "'%s' other than auto or none needs a chat template that writes tool calls%s", "");
    return NULL;
  }
  sbuf f = {0};
  if (in_reasoning) SB_LIT(&f, "</think>\n\n");
  sb_put(&f, b, (size_t)(nm - b));
  nm += strlen(MARK_NAME);
  if (name) {
    sb_put(&f, name, strlen(name));
    sb_put(&f, nm, (size_t)(ar - nm));
  } else if (!(*between = strndup(nm, (size_t)(ar - nm)))) {
    f.oom = 1;
  }
  /* after the arguments: through the call's end tag, then the calls' end
   * (which a template writes only once the calls are followed by more) */
  static const char call_end[] = "<｜tool▁call▁end｜>", calls_end[] = "<｜tool▁calls▁end｜>";
  const char *after = ar + strlen(MARK_ARGS), *e = strstr(after, call_end);
  sbuf tr = {0};
  if (e) {
    sb_put(&tr, after, (size_t)(e - after) + strlen(call_end));
    sb_put(&tr, calls_end, strlen(calls_end) + 1);
  }
  sb_put(&f, "", 1);
  free(t);
  if (f.oom || tr.oom) {
    free(f.p), free(tr.p), free(*between);
    *between = NULL;
    return oom(j, "for the tool call's opening"), NULL;
  }
  *trailer = tr.p;
  return f.p;
}

/* the function object of tools named name */
static const cJSON *tool_fn(const cJSON *tools, const char *name) {
  const cJSON *t;
  cJSON_ArrayForEach(t, tools) {
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(t, "function");
    const cJSON *tn = cJSON_IsObject(tf) ? cJSON_GetObjectItemCaseSensitive(tf, "name") : NULL;
    if (cJSON_IsString(tn) && !strcmp(tn->valuestring, name)) return tf;
  }
  return NULL;
}

/* the function tool_choice names ("" for required, NULL for auto or none),
 * checked against the tools offered */
static const char *tool_choice_name(in *j, const cJSON *tools, const cJSON *choice) {
  if (!choice || (cJSON_IsString(choice) && strcmp(choice->valuestring, "required"))) return NULL;
  int n_tools = tools && cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : 0;
  if (!n_tools) return bad(j, "tool_choice", "'%s' required or a named function needs tools%s", ""), NULL;
  if (cJSON_IsString(choice)) return "";
  const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function");
  const cJSON *nm = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
  if (!cJSON_IsString(nm) || !*nm->valuestring)
    return bad(j, "tool_choice", "'%s' must be none, auto, required or an object naming a function%s", ""), NULL;
  if (tool_fn(tools, nm->valuestring)) return nm->valuestring;
  bad(j, "tool_choice", "'%s' names a function that is not among the tools%s", "");
  return NULL;
}

/* a function's parameters as the schema of its arguments (a copy): an
 * object where they say nothing of the type, any object without them */
static cJSON *args_schema(const cJSON *fn) {
  const cJSON *par = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
  static const char *const says[] = {"type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const"};
  int said = cJSON_IsBool(par) || (par && !cJSON_IsObject(par));
  for (size_t k = 0; k < DSI_ARRAY_LEN(says) && !said && par; k++) said = cJSON_HasObjectItem(par, says[k]);
  cJSON *a = par ? cJSON_Duplicate(par, 1) : cJSON_CreateObject();
  if (a && !said && !cJSON_AddStringToObject(a, "type", "object")) cJSON_Delete(a), a = NULL;
  return a;
}

static int has_ref(const cJSON *v) {
  for (const cJSON *e = v ? v->child : NULL; e; e = e->next)
    if ((e->string && !strcmp(e->string, "$ref")) || has_ref(e)) return 1;
  return 0;
}

/* The arguments of a tool call held to the function's parameters: for
 * named (fn), its own; for tool_choice required (fn NULL), one of the
 * tools' names, between (what the template writes after a name), then
 * that function's arguments — an anyOf of the functions, each its name as
 * an x-dsinfer-prefix. Parameters the recognizer cannot hold them to
 * leave the arguments free, as with tool_choice auto, unless a function
 * is strict: then a 400. */
static int tool_args(in *j, params *p, const cJSON *tools, const cJSON *fn, const char *between) {
  int strict = 0, refs = 0;
  cJSON *sch = NULL, *alts = NULL;
  if (fn) {
    strict = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fn, "strict"));
    sch = args_schema(fn);
  } else if ((sch = cJSON_CreateObject()) && (alts = cJSON_AddArrayToObject(sch, "anyOf"))) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
      const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
      if (!cJSON_IsString(nm)) continue;
      strict |= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "strict"));
      cJSON *a = args_schema(f);
      sbuf pre = {0};
      sb_put(&pre, nm->valuestring, strlen(nm->valuestring));
      sb_put(&pre, between, strlen(between) + 1);
      int ok = a && !pre.oom && cJSON_AddStringToObject(a, "x-dsinfer-prefix", pre.p) && cJSON_AddItemToArray(alts, a);
      free(pre.p);
      if (!ok) {
        cJSON_Delete(a);
        cJSON_Delete(sch);
        return oom(j, "for the schema");
      }
      refs |= has_ref(a);
    }
  }
  if (!sch || (!fn && !alts)) return cJSON_Delete(sch), oom(j, "for the schema");
  p->schema = cJSON_PrintUnformatted(sch);
  cJSON_Delete(sch);
  if (!p->schema) return oom(j, "for the schema");
  dsi_err err = {0};
  if (refs) { /* a $ref points into its own function's parameters, not into the tools' union */
    dsi_errf(&err, DSI_E_INVAL, "a $ref in the parameters, with tool_choice required");
    free(p->schema);
    p->schema = NULL;
  } else if (!hold_to_schema(p, &err)) {
    return 0;
  }
  if (err.status == DSI_E_NOMEM) return oom(j, "for the schema");
  if (!strict) return 0;
  if (!j->bad)
    reply_error(j->rp, 400, "invalid_request_error", "tools", NULL,
                "'tools': a strict function's arguments cannot be held to its parameters: %s", err.msg);
  j->bad = 1;
  return -1;
}

/* the template's other variables: tools (unless tool_choice is "none")
 * and chat_template_kwargs */
static cJSON *chat_extra(in *j) {
  cJSON *x = cJSON_CreateObject();
  if (!x) {
    oom(j, "for the template's variables");
    return NULL;
  }
  const cJSON *tools = field(j, "tools"), *choice = field(j, "tool_choice"), *kw = field(j, "chat_template_kwargs");
  if (tools && !cJSON_IsArray(tools)) bad(j, "tools", "'%s' must be an array%s", "");
  if (choice && !cJSON_IsString(choice) && !cJSON_IsObject(choice))
    bad(j, "tool_choice", "'%s' must be none, auto, required or an object naming a function%s", "");
  if (choice && cJSON_IsString(choice) && strcmp(choice->valuestring, "none") && strcmp(choice->valuestring, "auto") &&
      strcmp(choice->valuestring, "required"))
    bad(j, "tool_choice", "'%s' must be none, auto, required or an object naming a function%s", "");
  if (kw && !cJSON_IsObject(kw)) bad(j, "chat_template_kwargs", "'%s' must be an object%s", "");
  if (j->bad) {
    cJSON_Delete(x);
    return NULL;
  }
  if (tools && cJSON_GetArraySize(tools) && !(choice && cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")))
    cJSON_AddItemToObject(x, "tools", cJSON_Duplicate(tools, 1));
  if (kw) {
    const cJSON *e;
    cJSON_ArrayForEach(e, kw) cJSON_AddItemToObject(x, e->string, cJSON_Duplicate(e, 1));
  }
  return x;
}

/* the body's JSON object; NULL with the error reply. The messages and the
 * template's variables are built from it next (on this thread): a cJSON
 * allocation that fails in either shows in dsi_json_oom() */
static cJSON *parse_body(const char *body, size_t len, reply *rp) {
  dsi_json_oom_clear();
  cJSON *root = cJSON_ParseWithLength(body, len);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    if (dsi_json_oom()) reply_oom(rp, "reading the body");
    else reply_error(rp, 400, "invalid_request_error", NULL, NULL, "the body is not a JSON object");
    return NULL;
  }
  return root;
}

/* continue_final_message (vLLM's; the Anthropic API's prefill): the
 * conversation is rendered with its last message, the assistant's, left
 * open after its text, so that the answer continues it. open_final puts a
 * marker in that message's place (its text to *final); close_final cuts
 * the rendered text at the marker and writes the text there. 0, or -1
 * with the error reply set. */
#define MARK_FINAL "DSI_FINAL_MESSAGE_MARK"
static int open_final(in *j, cJSON *msgs, char **final) {
  cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
  const cJSON *role = cJSON_GetObjectItemCaseSensitive(last, "role");
  cJSON *content = cJSON_GetObjectItemCaseSensitive(last, "content");
  if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant") || !cJSON_IsString(content) ||
      cJSON_GetObjectItemCaseSensitive(last, "tool_calls"))
    return bad(j, "continue_final_message",
               "'%s' needs the last message to be the assistant's, with text and no tool calls%s", "");
  if (!(*final = strdup(content->valuestring)) ||
      !cJSON_ReplaceItemInObjectCaseSensitive(last, "content", cJSON_CreateString(MARK_FINAL)))
    return oom(j, "for the messages");
  return 0;
}

static int close_final(in *j, char **text, const char *final) {
  char *at = NULL;
  for (char *p = strstr(*text, MARK_FINAL); p; p = strstr(p + 1, MARK_FINAL)) at = p;
  if (!at) return bad(j, "continue_final_message", "'%s': the chat template does not write the assistant's text%s", "");
  size_t head = (size_t)(at - *text), fl = strlen(final);
  char *t = realloc(*text, head + fl + 1);
  if (!t) return oom(j, "for the prompt");
  memcpy(t + head, final, fl + 1);
  *text = t;
  return 0;
}

/* a chat request's JSON object (root, taken) read into cr: 0, or -1 with
 * the error reply set */
static int chat_parse_root(dsi_server *srv, cJSON *root, int count_only, chat_req *cr, reply *rp) {
  in j = {root, rp, 0};
  cJSON *msgs = NULL, *extra = NULL;
  char *mj = NULL, *xj = NULL, *final = NULL;
  size_t n = 0;
  int rc = -1, cont = 0;
  if (check_model(srv, &j) || get_params(srv, &j, &cr->p, 1) || get_bool(&j, "continue_final_message", &cont) < 0 ||
      !(msgs = chat_messages(&j)) || !(extra = chat_extra(&j)) || (cont && open_final(&j, msgs, &final)))
    goto out;
  mj = cJSON_PrintUnformatted(msgs);
  xj = cJSON_PrintUnformatted(extra);
  if (!mj || !xj || dsi_json_oom()) {
    oom(&j, "for the messages");
    goto out;
  }
  dsi_err err = {0};
  if (dsi_chat_fmt_render(srv->fmt, mj, !cont, xj, &cr->text, &err)) {
    if (err.status == DSI_E_NOMEM) reply_nomem(rp, &err);
    else reply_error(rp, 400, "invalid_request_error", "messages", NULL, "the chat template failed: %s", err.msg);
    goto out;
  }
  if (cont && close_final(&j, &cr->text, final)) goto out;
  cr->p.continues = cont;
  cr->in_reasoning = dsi_chat_prompt_in_reasoning(cr->text);
  /* tool_choice required or named: the answer starts with the call */
  const char *fname = tool_choice_name(&j, field(&j, "tools"), field(&j, "tool_choice"));
  if (j.bad) goto out;
  if (cont && (fname || cr->p.r.json || cr->p.r.regex)) {
    bad(&j, "continue_final_message", "'%s' cannot go with held output or a tool_choice that requires a call%s", "");
    goto out;
  }
  if (fname && (cr->p.r.json || cr->p.r.regex)) {
    bad(&j, cr->p.r.json ? "response_format" : "guided_regex",
        "'%s' held output cannot go with a tool_choice that requires a call%s", "");
    goto out;
  }
  /* held output with the prompt inside <think>: the reasoning closed, the value next */
  if ((cr->p.r.json || cr->p.r.regex) && cr->in_reasoning && !(cr->forced = strdup("</think>\n\n"))) {
    oom(&j, "for the prompt");
    goto out;
  }
  if (fname || cr->forced) {
    char *between = NULL;
    if (fname && !(cr->forced = forced_call(srv, &j, *fname ? fname : NULL, cr->in_reasoning, &between, &cr->trailer)))
      goto out;
    /* the arguments held to the function's parameters (required: the name
     * one of the tools' first), the call's end read back once they close */
    const cJSON *tools = field(&j, "tools");
    int held = fname && cr->trailer && tool_args(&j, &cr->p, tools, *fname ? tool_fn(tools, fname) : NULL, between);
    free(between);
    if (held) goto out;
    cr->p.trailer = cr->p.r.json ? cr->trailer : NULL;
    size_t tl = strlen(cr->text), fl = strlen(cr->forced);
    char *t2 = realloc(cr->text, tl + fl + 1);
    if (!t2) {
      oom(&j, "for the prompt");
      goto out;
    }
    memcpy(t2 + tl, cr->forced, fl + 1);
    cr->text = t2;
  }
  if (dsi_tok_encode(srv->tok, cr->text, strlen(cr->text), DSI_TOK_REPLACE_INVALID, &cr->ids, &n, &err)) {
    reply_failed(rp, "messages", &err);
    goto out;
  }
  /* counting tokens tells a client how long its prompt is, whatever the context */
  if (!count_only && check_length(srv, rp, n, &cr->p)) goto out;
  cr->p.r.prompt = cr->ids;
  cr->p.r.n_prompt = (int)n;
  cr->p.forced = cr->forced;
  rc = 0;
out:
  cJSON_Delete(msgs);
  cJSON_Delete(extra);
  cJSON_Delete(root);
  free(mj), free(xj), free(final);
  if (rc) chat_req_free(cr);
  return rc;
}

int api_chat_parse(dsi_server *srv, const char *body, size_t len, chat_req *cr, reply *rp) {
  memset(cr, 0, sizeof *cr);
  cJSON *root = parse_body(body, len, rp);
  return root ? chat_parse_root(srv, root, 0, cr, rp) : -1;
}

void chat_req_free(chat_req *cr) {
  params_free(&cr->p);
  free(cr->ids), free(cr->text), free(cr->forced), free(cr->trailer);
  memset(cr, 0, sizeof *cr);
}

/* a whole answer through the chat format's parser: its forced start, its
 * text, a named tool's trailer, the end. -1: out of memory */
static int parse_answer(const params *p, const scomp *c, int in_reasoning, dsi_chat_out **o, dsi_chat_out_delta *d) {
  if (dsi_chat_out_open(o, out_flags(in_reasoning, p), NULL)) return -1; /* the parser fails only for want of memory */
  if ((p->forced && dsi_chat_out_feed(*o, p->forced, strlen(p->forced), d, NULL)) ||
      dsi_chat_out_feed(*o, c->text.p ? c->text.p : "", c->text.n, d, NULL) ||
      (p->trailer && c->json_closed && dsi_chat_out_feed(*o, p->trailer, strlen(p->trailer), d, NULL)) ||
      dsi_chat_out_finish(*o, d, NULL)) {
    dsi_chat_out_free(*o);
    return -1;
  }
  return 0;
}

void api_chat(dsi_server *srv, const char *body, size_t len, int fd, reply *rp) {
  chat_req cr;
  if (api_chat_parse(srv, body, len, &cr, rp)) return;
  params p = cr.p;
  int in_reasoning = cr.in_reasoning;
  sreq *q = submit(srv, rp, &cr.p);
  if (!q) goto out;
  char id[48];
  snprintf(id, sizeof id, "chatcmpl-%llx", (unsigned long long)(q->id * 0x9e3779b97f4a7c15ull));
  if (p.stream) {
    stream_one(srv, rp, S_CHAT, q, NULL, &p, in_reasoning, fd, id);
    goto out;
  }
  if (wait_all(&q, 1, fd)) goto out; /* the client left: no reply */
  if (failed(&q, 1, rp)) {
    sreq_release(q);
    goto out;
  }
  /* the message of each choice */
  sbuf b = {0};
  sb_printf(&b, "{\"id\":\"%s\",\"object\":\"chat.completion\",\"created\":%ld,\"model\":", id, (long)time(NULL));
  jcstr(&b, srv->model_name);
  SB_LIT(&b, ",\"choices\":[");
  int completion = 0, reasoning = 0;
  for (int i = 0; i < q->n; i++) {
    const scomp *c = &q->c[i];
    dsi_chat_out *o;
    dsi_chat_out_delta d;
    if (parse_answer(&p, c, in_reasoning, &o, &d)) {
      b.oom = 1;
      break;
    }
    const char *rs = dsi_chat_out_reasoning(o), *ct = dsi_chat_out_content(o);
    int nc = d.n_tool_calls;
    sb_printf(&b, "%s{\"index\":%d,\"message\":{\"role\":\"assistant\",\"content\":", i ? "," : "", i);
    if (nc && !(ct && *ct)) SB_LIT(&b, "null"); /* only tool calls, as OpenAI answers them */
    else jcstr(&b, ct ? ct : "");
    if (rs) {
      SB_LIT(&b, ",\"reasoning_content\":");
      jcstr(&b, rs);
      SB_LIT(&b, ",\"reasoning\":");
      jcstr(&b, rs);
    }
    if (nc) {
      SB_LIT(&b, ",\"tool_calls\":[");
      for (int k = 0; k < nc; k++) {
        const char *name, *args;
        dsi_chat_out_tool_call(o, k, &name, &args);
        if (k) SB_LIT(&b, ",");
        tool_call_json(&b, name, args, q->id, i, k, -1);
      }
      SB_LIT(&b, "]");
    }
    SB_LIT(&b, "},\"logprobs\":");
    if (p.logprobs) chat_logprobs(srv, c, q->n_top, 0, c->n_tok, &b);
    else SB_LIT(&b, "null");
    SB_LIT(&b, ",\"finish_reason\":");
    jcstr(&b, finish_str(c->finish, nc > 0));
    SB_LIT(&b, "}");
    completion += c->completion_tokens;
    reasoning += reasoning_tokens(srv, c, in_reasoning);
    dsi_chat_out_free(o);
  }
  SB_LIT(&b, "],\"usage\":");
  usage_json(&b, q->c[0].prompt_tokens, q->c[0].cached_tokens, completion, reasoning, 1);
  SB_LIT(&b, "}");
  log_req(rp, id, q, completion);
  reply_sb(rp, 200, &b); /* out of memory: a 503 whose log says so */
  sreq_release(q);
out:
  chat_req_free(&cr);
}

/* ---- responses and messages ---- */

/* submit a request of one completion; streamed, hand it to a stream of
 * kind (with *echo, taken); else wait for its whole answer. q with its
 * answer, or NULL when the reply is set (or the client left). id: the
 * prefix and the request's number */
static sreq *one_answer(dsi_server *srv, reply *rp, int kind, chat_req *cr, char **echo, int fd, const char *prefix,
                        char id[48]) {
  sreq *q = submit(srv, rp, &cr->p);
  if (!q) return NULL;
  snprintf(id, 48, "%s%016llx", prefix, (unsigned long long)(q->id * 0x9e3779b97f4a7c15ull));
  if (cr->p.stream) {
    stream_one(srv, rp, kind, q, echo ? *echo : NULL, &cr->p, cr->in_reasoning, fd, id);
    if (echo) *echo = NULL; /* the stream's */
    return NULL;
  }
  if (wait_all(&q, 1, fd)) return NULL; /* the client left: no reply */
  if (failed(&q, 1, rp)) {
    sreq_release(q);
    return NULL;
  }
  return q;
}

/* the chat fields a translated request calls otherwise, for its errors */
static const char *const k_resp_names[] = {"max_tokens", "max_output_tokens", "messages", "input",
                                           "response_format", "text.format", NULL};
static const char *const k_msg_names[] = {"stop", "stop_sequences", NULL};

int api_responses_parse(dsi_server *srv, const char *body, size_t len, chat_req *cr, char **echo, reply *rp) {
  memset(cr, 0, sizeof *cr);
  *echo = NULL;
  rp->names = k_resp_names;
  cJSON *root = parse_body(body, len, rp), *chat = NULL;
  if (!root) return -1;
  resp_err e;
  int rc = resp_to_chat(root, &chat, &e);
  if (!rc) *echo = resp_echo(root);
  cJSON_Delete(root);
  if (rc > 0) {
    reply_error(rp, 400, "invalid_request_error", e.param, NULL, "%s", e.msg);
    return -1;
  }
  if (rc < 0 || !*echo) {
    cJSON_Delete(chat);
    free(*echo), *echo = NULL;
    reply_oom(rp, "reading the request");
    return -1;
  }
  if (chat_parse_root(srv, chat, 0, cr, rp)) {
    free(*echo), *echo = NULL;
    return -1;
  }
  return 0;
}

void api_responses(dsi_server *srv, const char *body, size_t len, int fd, reply *rp) {
  chat_req cr;
  char *echo;
  if (api_responses_parse(srv, body, len, &cr, &echo, rp)) return;
  params p = cr.p;
  char id[48];
  sreq *q = one_answer(srv, rp, S_RESPONSES, &cr, &echo, fd, "resp_", id);
  if (!q) goto out;
  /* the output items: reasoning, the answer (or an empty one when there is
   * nothing else), the function calls, as the stream opens them */
  const scomp *c = &q->c[0];
  dsi_chat_out *o;
  dsi_chat_out_delta d;
  sbuf items = {0}, b = {0};
  if (parse_answer(&p, c, cr.in_reasoning, &o, &d)) {
    b.oom = 1;
  } else {
    const char *rs = dsi_chat_out_reasoning(o), *ct = dsi_chat_out_content(o);
    const int cut = c->finish == DSI_FINISH_LENGTH, msg = (ct && *ct) || (!(rs && *rs) && !d.n_tool_calls);
    int n = 0;
    char iid[48], cid[40];
    if (rs && *rs) {
      item_id(iid, "rs", q->id, n++);
      text_item(&items, RI_REASONING, iid, rs, strlen(rs), cut && !msg && !d.n_tool_calls ? "incomplete" : "completed");
    }
    if (msg) {
      if (n) SB_LIT(&items, ",");
      item_id(iid, "msg", q->id, n++);
      text_item(&items, RI_MESSAGE, iid, ct ? ct : "", ct ? strlen(ct) : 0,
                cut && !d.n_tool_calls ? "incomplete" : "completed");
    }
    for (int k = 0; k < d.n_tool_calls; k++) {
      const char *name, *args;
      dsi_chat_out_tool_call(o, k, &name, &args);
      if (n) SB_LIT(&items, ",");
      item_id(iid, "fc", q->id, n++);
      call_id(cid, q->id, 0, k);
      call_item(&items, iid, cid, name, args, 1);
    }
    dsi_chat_out_free(o);
    resp_object(&b, srv, id, (long)time(NULL), echo, c->finish == DSI_FINISH_LENGTH ? "incomplete" : "completed",
                items.p ? items.p : "", items.n, c, reasoning_tokens(srv, c, cr.in_reasoning), NULL);
    b.oom |= items.oom;
  }
  free(items.p);
  log_req(rp, id, q, c->completion_tokens);
  reply_sb(rp, 200, &b); /* out of memory: a 503 whose log says so */
  sreq_release(q);
out:
  free(echo);
  chat_req_free(&cr);
}


int api_messages_parse(dsi_server *srv, const char *body, size_t len, int count_only, chat_req *cr, reply *rp) {
  memset(cr, 0, sizeof *cr);
  rp->names = k_msg_names;
  cJSON *root = parse_body(body, len, rp), *chat = NULL;
  if (!root) return -1;
  resp_err e;
  int rc = msg_to_chat(root, count_only, &chat, &e);
  cJSON_Delete(root);
  if (rc > 0) {
    reply_error(rp, 400, "invalid_request_error", e.param, NULL, "%s", e.msg);
    return -1;
  }
  if (rc < 0) {
    reply_oom(rp, "reading the request");
    return -1;
  }
  return chat_parse_root(srv, chat, count_only, cr, rp);
}

void api_messages(dsi_server *srv, const char *body, size_t len, int fd, reply *rp) {
  chat_req cr;
  if (api_messages_parse(srv, body, len, 0, &cr, rp)) return;
  params p = cr.p;
  char id[48];
  sreq *q = one_answer(srv, rp, S_MESSAGES, &cr, NULL, fd, "msg_", id);
  if (!q) goto out;
  /* the content blocks: thinking, the answer (or an empty one when there
   * is nothing else), the tool calls, as the stream opens them */
  const scomp *c = &q->c[0];
  dsi_chat_out *o;
  dsi_chat_out_delta d;
  sbuf b = {0};
  if (parse_answer(&p, c, cr.in_reasoning, &o, &d)) {
    b.oom = 1;
  } else {
    const char *rs = dsi_chat_out_reasoning(o), *ct = dsi_chat_out_content(o);
    int n = 0;
    sb_printf(&b, "{\"id\":\"%s\",\"type\":\"message\",\"role\":\"assistant\",\"model\":", id);
    jcstr(&b, srv->model_name);
    SB_LIT(&b, ",\"content\":[");
    if (rs && *rs) text_block(&b, RI_REASONING, rs), n++;
    if ((ct && *ct) || (!n && !d.n_tool_calls)) {
      if (n++) SB_LIT(&b, ",");
      text_block(&b, RI_MESSAGE, ct ? ct : "");
    }
    for (int k = 0; k < d.n_tool_calls; k++) {
      const char *name, *args;
      char tid[48];
      dsi_chat_out_tool_call(o, k, &name, &args);
      tool_use_id(tid, q->id, k);
      if (n++) SB_LIT(&b, ",");
      tool_use_block(&b, tid, name, args);
    }
    SB_LIT(&b, "],\"stop_reason\":");
    jcstr(&b, msg_stop_reason(c, d.n_tool_calls));
    SB_LIT(&b, ",\"stop_sequence\":");
    if (c->stop && c->finish == DSI_FINISH_STOP && !d.n_tool_calls) jcstr(&b, c->stop);
    else SB_LIT(&b, "null");
    SB_LIT(&b, ",\"usage\":");
    msg_usage(&b, c, c->completion_tokens);
    SB_LIT(&b, "}");
    dsi_chat_out_free(o);
  }
  log_req(rp, id, q, c->completion_tokens);
  reply_sb(rp, 200, &b); /* out of memory: a 503 whose log says so */
  sreq_release(q);
out:
  chat_req_free(&cr);
}

void api_count_tokens(dsi_server *srv, const char *body, size_t len, reply *rp) {
  chat_req cr;
  if (api_messages_parse(srv, body, len, 1, &cr, rp)) return;
  sbuf b = {0};
  sb_printf(&b, "{\"input_tokens\":%d}", cr.p.r.n_prompt);
  reply_sb(rp, 200, &b);
  chat_req_free(&cr);
}

/* ---- completions ---- */


static void prompts_free(prompts *ps) {
  for (int i = 0; i < ps->n; i++) free(ps->ids[i]), free(ps->text[i]);
}

static int one_prompt(dsi_server *srv, in *j, const cJSON *v, prompts *ps) {
  if (ps->n == MAX_N) return bad(j, "prompt", "'%s' holds at most 16 prompts%s", "");
  dsi_err err = {0};
  if (cJSON_IsString(v)) {
    if (dsi_tok_encode(srv->tok, v->valuestring, strlen(v->valuestring), DSI_TOK_ADD_SPECIAL | DSI_TOK_REPLACE_INVALID,
                       &ps->ids[ps->n], &ps->len[ps->n], &err)) {
      if (!j->bad) reply_failed(j->rp, "prompt", &err);
      j->bad = 1;
      return -1;
    }
    if (!(ps->text[ps->n++] = strdup(v->valuestring))) return oom(j, "for the prompt");
    return 0;
  }
  int m = cJSON_GetArraySize(v);
  int32_t *ids = malloc((size_t)(m ? m : 1) * sizeof *ids);
  if (!ids) return oom(j, "for the prompt's ids");
  int k = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, v) {
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
        e->valuedouble >= srv->n_valid) {
      free(ids);
      return bad(j, "prompt", "'%s' must be text or token ids of this model%s", "");
    }
    ids[k++] = (int32_t)e->valuedouble;
  }
  ps->ids[ps->n] = ids;
  ps->len[ps->n++] = (size_t)k;
  return 0;
}

static int get_prompts(dsi_server *srv, in *j, prompts *ps) {
  const cJSON *p = field(j, "prompt");
  if (!p) return bad(j, "prompt", "'%s' is required%s", "");
  if (cJSON_IsString(p)) return one_prompt(srv, j, p, ps);
  if (!cJSON_IsArray(p) || !cJSON_GetArraySize(p))
    return bad(j, "prompt", "'%s' must be text, token ids, or a non-empty array of either%s", "");
  const cJSON *first = cJSON_GetArrayItem(p, 0);
  if (cJSON_IsNumber(first)) return one_prompt(srv, j, p, ps);
  const cJSON *e;
  cJSON_ArrayForEach(e, p) {
    if (!cJSON_IsString(e) && !cJSON_IsArray(e))
      return bad(j, "prompt", "'%s' must be text, token ids, or a non-empty array of either%s", "");
    if (one_prompt(srv, j, e, ps)) return -1;
  }
  return 0;
}

/* fill in the middle (suffix): each prompt becomes the checkpoint's FIM
 * layout, [BOS] <｜fim▁begin｜> prompt <｜fim▁hole｜> suffix <｜fim▁end｜>, whose
 * completion is the middle; a tokenizer without those tokens cannot */
#define FIM_BEGIN "<｜fim▁begin｜>"
#define FIM_HOLE "<｜fim▁hole｜>"
#define FIM_END "<｜fim▁end｜>"
static int fill_in_middle(dsi_server *srv, in *j, const cJSON *suffix, prompts *ps) {
  if (!cJSON_IsString(suffix)) return bad(j, "suffix", "'%s' must be a string%s", "");
  int32_t fim[3] = {dsi_tok_token_to_id(srv->tok, FIM_BEGIN), dsi_tok_token_to_id(srv->tok, FIM_HOLE),
                    dsi_tok_token_to_id(srv->tok, FIM_END)};
  if (fim[0] < 0 || fim[1] < 0 || fim[2] < 0 || fim[0] >= srv->n_valid || fim[1] >= srv->n_valid ||
      fim[2] >= srv->n_valid)
    return bad(j, "suffix", "'%s' is not supported by this model%s",
               " (its tokenizer has no " FIM_BEGIN ", " FIM_HOLE " and " FIM_END " tokens)");
  int32_t *sfx = NULL;
  size_t ns = 0;
  dsi_err err = {0};
  const char *t = suffix->valuestring;
  if (dsi_tok_encode(srv->tok, t, strlen(t), DSI_TOK_REPLACE_INVALID, &sfx, &ns, &err)) {
    if (!j->bad) reply_failed(j->rp, "suffix", &err);
    j->bad = 1;
    return -1;
  }
  int32_t bos = dsi_tok_bos_id(srv->tok);
  for (int i = 0; i < ps->n; i++) {
    size_t np = ps->len[i], b = np && bos >= 0 && ps->ids[i][0] == bos, k = 0;
    int32_t *ids = malloc((np + ns + 3) * sizeof *ids);
    if (!ids) {
      free(sfx);
      return oom(j, "for the fill-in-the-middle prompt");
    }
    if (b) ids[k++] = bos;
    ids[k++] = fim[0];
    if (np > b) memcpy(ids + k, ps->ids[i] + b, (np - b) * sizeof *ids);
    k += np - b;
    ids[k++] = fim[1];
    if (ns) memcpy(ids + k, sfx, ns * sizeof *ids); /* an empty suffix encodes to no ids (sfx may be NULL) */
    k += ns;
    ids[k++] = fim[2];
    free(ps->ids[i]);
    ps->ids[i] = ids;
    ps->len[i] = k;
  }
  free(sfx);
  return 0;
}

int api_completions_parse(dsi_server *srv, const char *body, size_t len, compl_req *cr, reply *rp) {
  memset(cr, 0, sizeof *cr);
  cJSON *root = parse_body(body, len, rp);
  if (!root) return -1;
  in j = {root, rp, 0};
  params *p = &cr->p;
  prompts *ps = &cr->ps;
  if (!check_model(srv, &j) && !get_params(srv, &j, p, 0) && !get_prompts(srv, &j, ps)) {
    get_bool(&j, "echo", &p->echo);
    const cJSON *suffix = field(&j, "suffix");
    if (suffix && p->echo) bad(&j, "suffix", "'%s' cannot go with echo%s", "");
    else if (suffix) fill_in_middle(srv, &j, suffix, ps);
    p->r.prompt_logprobs = p->echo && p->logprobs;
    if (p->prompt_only && !p->echo)
      bad(&j, "max_tokens", "'%s' must be at least 1%s", " (0 only with echo, for the prompt alone)");
    if (!j.bad && ps->n * (p->r.n ? p->r.n : 1) > MAX_N) bad(&j, "n", "'%s' times the prompts must be at most 16%s", "");
    for (int i = 0; i < ps->n && !j.bad; i++) {
      params pi = *p;
      if (check_length(srv, rp, ps->len[i], &pi)) j.bad = 1;
    }
  }
  cJSON_Delete(root);
  if (j.bad) {
    compl_req_free(cr);
    return -1;
  }
  return 0;
}

void compl_req_free(compl_req *cr) {
  prompts_free(&cr->ps);
  params_free(&cr->p);
  memset(cr, 0, sizeof *cr);
}

void api_completions(dsi_server *srv, const char *body, size_t len, int fd, reply *rp) {
  compl_req cr;
  if (api_completions_parse(srv, body, len, &cr, rp)) return;
  params p = cr.p;
  prompts ps = cr.ps;
  sreq *reqs[MAX_N] = {0};
  char *echoes[MAX_N] = {0};
  int n_req = 0;
  for (int i = 0; i < ps.n; i++) {
    params pi = p;
    pi.r.prompt = ps.ids[i];
    pi.r.n_prompt = (int)ps.len[i];
    if (check_length(srv, rp, ps.len[i], &pi)) goto out;
    if (!(reqs[i] = submit(srv, rp, &pi))) goto out;
    n_req++;
    if (p.echo) { /* the prompt as given: its text, or its ids' */
      char *t = NULL;
      size_t tl = 0;
      dsi_err err = {0};
      if (ps.text[i]) t = strdup(ps.text[i]);
      else if (dsi_tok_decode(srv->tok, ps.ids[i], ps.len[i], 0, &t, &tl, &err)) t = NULL;
      if (!t) { /* the ids are the model's: decoding them fails only for want of memory */
        reply_oom(rp, "for the echoed prompt");
        goto out;
      }
      echoes[i] = t;
    }
  }
  char id[48];
  snprintf(id, sizeof id, "cmpl-%llx", (unsigned long long)(reqs[0]->id * 0x9e3779b97f4a7c15ull));
  if (p.stream) {
    sreq **rs = malloc((size_t)n_req * sizeof *rs);
    char **es = p.echo ? malloc((size_t)n_req * sizeof *es) : NULL;
    if (!rs || (p.echo && !es)) {
      free(rs), free(es);
      reply_oom(rp, "for the stream");
      goto out;
    }
    memcpy(rs, reqs, (size_t)n_req * sizeof *rs);
    if (p.echo) {
      memcpy(es, echoes, (size_t)n_req * sizeof *es);
      memset(echoes, 0, sizeof echoes);
    }
    reply_stream(srv, rp, S_COMPLETIONS, rs, n_req, es, NULL, &p, 0, fd, id);
    n_req = 0;
    goto out;
  }
  if (wait_all(reqs, n_req, fd)) {
    n_req = 0; /* released */
    goto out;
  }
  if (failed(reqs, n_req, rp)) goto out;
  sbuf b = {0};
  sb_printf(&b, "{\"id\":\"%s\",\"object\":\"text_completion\",\"created\":%ld,\"model\":", id, (long)time(NULL));
  jcstr(&b, srv->model_name);
  SB_LIT(&b, ",\"choices\":[");
  int prompt = 0, cached = 0, completion = 0;
  for (int r = 0; r < n_req; r++) {
    sreq *q = reqs[r];
    prompt += q->c[0].prompt_tokens;
    cached += q->c[0].cached_tokens;
    for (int i = 0; i < q->n; i++) {
      const scomp *c = &q->c[i];
      sb_printf(&b, "%s{\"index\":%d,\"text\":", r || i ? "," : "", r * q->n + i);
      sbuf t = {0};
      if (echoes[r]) sb_put(&t, echoes[r], strlen(echoes[r]));
      if (c->text.n && !p.prompt_only) sb_put(&t, c->text.p, c->text.n);
      jstr(&b, t.p ? t.p : "", t.n);
      sb_merge_oom(&b, &t);
      free(t.p);
      SB_LIT(&b, ",\"logprobs\":");
      if (p.logprobs) { /* with echo: the prompt's tokens first */
        lp_cols L = {0};
        if (echoes[r]) prompt_lp_add(srv, &L, q, echoes[r], &b);
        lp_add(srv, &L, c->tok, c->lp, c->top, q->n_top, 0, p.prompt_only ? 0 : c->n_tok, 0,
               echoes[r] ? (long long)strlen(echoes[r]) : 0, &b);
        lp_close(&L, &b);
      } else {
        SB_LIT(&b, "null");
      }
      SB_LIT(&b, ",\"finish_reason\":");
      jcstr(&b, p.prompt_only ? "length" : finish_str(c->finish, 0));
      SB_LIT(&b, "}");
      completion += p.prompt_only ? 0 : c->completion_tokens;
    }
  }
  SB_LIT(&b, "],\"usage\":");
  usage_json(&b, prompt, cached, completion, 0, 0);
  SB_LIT(&b, "}");
  log_req(rp, id, reqs[0], completion);
  reply_sb(rp, 200, &b);
out:
  for (int r = 0; r < n_req; r++) sreq_release(reqs[r]);
  for (int r = 0; r < MAX_N; r++) free(echoes[r]);
  compl_req_free(&cr);
}

/* ---- tokenize, detokenize, models ---- */

void api_tokenize(dsi_server *srv, const char *body, size_t len, reply *rp) {
  cJSON *root = parse_body(body, len, rp);
  if (!root) return;
  in j = {root, rp, 0};
  int32_t *ids = NULL;
  size_t n = 0;
  char *text = NULL, *mj = NULL, *xj = NULL, *final = NULL;
  cJSON *msgs = NULL, *extra = NULL;
  dsi_err err = {0};
  if (check_model(srv, &j)) goto out;
  if (field(&j, "messages")) {
    int gen = 1, cont = 0;
    if (get_bool(&j, "add_generation_prompt", &gen) < 0 || get_bool(&j, "continue_final_message", &cont) < 0 ||
        !(msgs = chat_messages(&j)) || !(extra = chat_extra(&j)) || (cont && open_final(&j, msgs, &final)))
      goto out;
    mj = cJSON_PrintUnformatted(msgs);
    xj = cJSON_PrintUnformatted(extra);
    if (!mj || !xj || dsi_json_oom()) {
      oom(&j, "for the messages");
      goto out;
    }
    if (dsi_chat_fmt_render(srv->fmt, mj, gen && !cont, xj, &text, &err)) {
      reply_failed(rp, "messages", &err);
      goto out;
    }
    if (cont && close_final(&j, &text, final)) goto out;
    if (dsi_tok_encode(srv->tok, text, strlen(text), DSI_TOK_REPLACE_INVALID, &ids, &n, &err)) {
      reply_failed(rp, "messages", &err);
      goto out;
    }
  } else {
    const cJSON *pr = field(&j, "prompt");
    int special = 1;
    get_bool(&j, "add_special_tokens", &special);
    if (!cJSON_IsString(pr)) {
      bad(&j, "prompt", "'%s' (text) or messages is required%s", "");
      goto out;
    }
    if (dsi_tok_encode(srv->tok, pr->valuestring, strlen(pr->valuestring),
                       (special ? DSI_TOK_ADD_SPECIAL : 0) | DSI_TOK_REPLACE_INVALID, &ids, &n, &err)) {
      reply_failed(rp, "prompt", &err);
      goto out;
    }
  }
  if (j.bad) goto out;
  sbuf b = {0};
  sb_printf(&b, "{\"count\":%zu,\"max_model_len\":%d,\"tokens\":[", n, srv->o.ctx);
  for (size_t i = 0; i < n; i++) sb_printf(&b, "%s%d", i ? "," : "", ids[i]);
  SB_LIT(&b, "]}");
  reply_sb(rp, 200, &b);
out:
  cJSON_Delete(msgs);
  cJSON_Delete(extra);
  cJSON_Delete(root);
  free(ids), free(text), free(mj), free(xj), free(final);
}

void api_detokenize(dsi_server *srv, const char *body, size_t len, reply *rp) {
  cJSON *root = parse_body(body, len, rp);
  if (!root) return;
  in j = {root, rp, 0};
  const cJSON *t = field(&j, "tokens");
  if (check_model(srv, &j)) goto out;
  if (!cJSON_IsArray(t)) {
    bad(&j, "tokens", "'%s' must be an array of token ids%s", "");
    goto out;
  }
  int m = cJSON_GetArraySize(t), k = 0;
  int32_t *ids = malloc((size_t)(m ? m : 1) * sizeof *ids);
  if (!ids) {
    oom(&j, "for the ids");
    goto out;
  }
  const cJSON *e;
  cJSON_ArrayForEach(e, t) {
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
        e->valuedouble >= srv->n_valid) {
      bad(&j, "tokens", "'%s' must hold token ids of this model%s", "");
      break;
    }
    ids[k++] = (int32_t)e->valuedouble;
  }
  char *text = NULL;
  size_t n = 0;
  dsi_err err = {0};
  if (!j.bad && dsi_tok_decode(srv->tok, ids, (size_t)k, 0, &text, &n, &err))
    reply_failed(rp, "tokens", &err);
  else if (!j.bad) {
    sbuf b = {0};
    SB_LIT(&b, "{\"prompt\":");
    jstr(&b, text, n);
    SB_LIT(&b, "}");
    reply_sb(rp, 200, &b);
  }
  free(text);
  free(ids);
out:
  cJSON_Delete(root);
}

void api_models(dsi_server *srv, const char *id, reply *rp) {
  if (id && !server_serves(srv, id)) {
    reply_error(rp, 404, "invalid_request_error", "model", "model_not_found", "the model '%s' does not exist", id);
    return;
  }
  sbuf m = {0};
  SB_LIT(&m, "{\"id\":");
  jcstr(&m, srv->model_name);
  sb_printf(&m, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"dsinfer\",\"root\":", srv->created);
  jcstr(&m, srv->model_name);
  sb_printf(&m, ",\"max_model_len\":%d}", srv->o.ctx);
  if (id || m.oom) {
    reply_sb(rp, 200, &m);
    return;
  }
  sbuf b = {0};
  sb_printf(&b, "{\"object\":\"list\",\"data\":[%s]}", m.p);
  free(m.p);
  reply_sb(rp, 200, &b);
}
