/* tokenizer/chat_api.c: the public chat API of dsinfer.h — a checkpoint's
 * chat format (template.h behind a JSON-string interface, so cJSON stays out
 * of the public header) and the streaming output parser (chat.h). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/base.h"
#include "tokenizer/chat.h"
#include "tokenizer/template.h"

/* ---- the format: template + BOS/EOS ---- */

struct dsi_chat_fmt {
  dsi_tmpl *tmpl;
  char *bos, *eos; /* NULL when the config names none */
  int thinks;
};

#define DEEPSEEK_BOS "<｜begin▁of▁sentence｜>"
#define DEEPSEEK_EOS "<｜end▁of▁sentence｜>"

/* A template thinks when, asked to, its generation prompt opens <think>:
 * probing the rendering needs no list of known templates. 1 or 0 (a
 * template that cannot render the probe does not think), DSI_E_NOMEM. */
static int probe_thinks(const dsi_chat_fmt *f, dsi_err *err) {
  char *text = NULL;
  int thinks = dsi_chat_fmt_render(f, "[{\"role\":\"user\",\"content\":\"hi\"}]", 1,
                                   "{\"thinking\":true,\"enable_thinking\":true}", &text, err);
  if (thinks == DSI_OK) thinks = strstr(text, "<think>") != NULL;
  else if (thinks != DSI_E_NOMEM) thinks = 0;
  free(text);
  return thinks;
}

static int fmt_open(dsi_chat_fmt **out, const char *model_dir, const char *template_path, dsi_err *err) {
  *out = NULL;
  if (!model_dir) return dsi_errf(err, DSI_E_INVAL, "chat format: no model folder");
  char path[4096];
  dsi_path_join(path, sizeof path, model_dir, "tokenizer_config.json");
  cJSON *cfg = NULL;
  if (access(path, F_OK) == 0) {
    char *text;
    int st = dsi_read_file(path, &text, NULL, err);
    if (st) return st;
    dsi_json_oom_clear();
    cfg = cJSON_Parse(text);
    free(text);
    if (!cfg && dsi_json_oom()) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
    if (!cJSON_IsObject(cfg)) {
      cJSON_Delete(cfg);
      return dsi_errf(err, DSI_E_FORMAT, "%s: not a JSON object", path);
    }
  }
  dsi_chat_fmt *f = calloc(1, sizeof *f);
  if (!f) {
    cJSON_Delete(cfg);
    return dsi_errf(err, DSI_E_NOMEM, "chat format: out of memory");
  }
  int st;
  if (template_path) {
    char *src = NULL;
    st = dsi_read_file(template_path, &src, NULL, err);
    if (!st && (st = dsi_tmpl_open(&f->tmpl, src, err))) dsi_err_prefix(err, st, "%s", template_path);
    free(src);
  } else if ((st = dsi_tmpl_open_config(&f->tmpl, cfg, err))) {
    dsi_err_prefix(err, st, "%s", path);
  }
  if (!st && cfg) {
    const char *bos = dsi_tmpl_config_token(cfg, "bos_token"), *eos = dsi_tmpl_config_token(cfg, "eos_token");
    if ((bos && !(f->bos = strdup(bos))) || (eos && !(f->eos = strdup(eos))))
      st = dsi_errf(err, DSI_E_NOMEM, "chat format: out of memory");
  } else if (!st) {
    if (!(f->bos = strdup(DEEPSEEK_BOS)) || !(f->eos = strdup(DEEPSEEK_EOS)))
      st = dsi_errf(err, DSI_E_NOMEM, "chat format: out of memory");
  }
  cJSON_Delete(cfg);
  if (!st && (f->thinks = probe_thinks(f, err)) < 0) st = f->thinks;
  if (st) {
    dsi_chat_fmt_free(f);
    return st;
  }
  *out = f;
  return DSI_OK;
}

int dsi_chat_fmt_open(dsi_chat_fmt **out, const char *model_dir, dsi_err *err) {
  return fmt_open(out, model_dir, NULL, err);
}

int dsi_chat_fmt_open_file(dsi_chat_fmt **out, const char *model_dir, const char *template_path, dsi_err *err) {
  if (!template_path) return dsi_errf(err, DSI_E_INVAL, "chat format: no template file");
  return fmt_open(out, model_dir, template_path, err);
}

void dsi_chat_fmt_free(dsi_chat_fmt *f) {
  if (!f) return;
  dsi_tmpl_free(f->tmpl);
  free(f->bos);
  free(f->eos);
  free(f);
}

int dsi_chat_fmt_render(const dsi_chat_fmt *f, const char *messages_json, int add_generation_prompt,
                        const char *extra_json, char **text, dsi_err *err) {
  *text = NULL;
  if (!f || !messages_json) return dsi_errf(err, DSI_E_INVAL, "chat format: no format or no messages");
  dsi_json_oom_clear();
  cJSON *msgs = cJSON_Parse(messages_json);
  if (!cJSON_IsArray(msgs)) {
    cJSON_Delete(msgs);
    if (dsi_json_oom()) return dsi_errf(err, DSI_E_NOMEM, "chat template: out of memory");
    return dsi_errf(err, DSI_E_INVAL, "chat messages: not a JSON array");
  }
  /* extra's keys first, then ours replace any of the same name */
  cJSON *ctx = extra_json ? cJSON_Parse(extra_json) : cJSON_CreateObject();
  if (!cJSON_IsObject(ctx)) {
    cJSON_Delete(ctx);
    cJSON_Delete(msgs);
    if (!extra_json || dsi_json_oom()) return dsi_errf(err, DSI_E_NOMEM, "chat template: out of memory");
    return dsi_errf(err, DSI_E_INVAL, "chat template variables: not a JSON object");
  }
  cJSON_DeleteItemFromObjectCaseSensitive(ctx, "messages");
  if (!cJSON_AddItemToObject(ctx, "messages", msgs)) cJSON_Delete(msgs);
  cJSON_DeleteItemFromObjectCaseSensitive(ctx, "add_generation_prompt");
  cJSON_AddBoolToObject(ctx, "add_generation_prompt", add_generation_prompt != 0);
  if (f->bos && !cJSON_GetObjectItemCaseSensitive(ctx, "bos_token")) cJSON_AddStringToObject(ctx, "bos_token", f->bos);
  if (f->eos && !cJSON_GetObjectItemCaseSensitive(ctx, "eos_token")) cJSON_AddStringToObject(ctx, "eos_token", f->eos);
  if (dsi_json_oom()) { /* the context lost a part */
    cJSON_Delete(ctx);
    return dsi_errf(err, DSI_E_NOMEM, "chat template: out of memory");
  }
  int st = dsi_tmpl_render(f->tmpl, ctx, text, err);
  cJSON_Delete(ctx);
  return st;
}

int dsi_chat_fmt_thinks(const dsi_chat_fmt *f) { return f ? f->thinks : 0; }
const char *dsi_chat_fmt_bos(const dsi_chat_fmt *f) { return f ? f->bos : NULL; }
const char *dsi_chat_fmt_eos(const dsi_chat_fmt *f) { return f ? f->eos : NULL; }

/* ---- the output parser ---- */

struct dsi_chat_out {
  dsi_chat_stream *s;
};

static void to_public(const dsi_chat_delta *in, int n_calls, dsi_chat_out_delta *d) {
  if (!d) return;
  d->reasoning = in->reasoning;
  d->reasoning_len = in->reasoning_len;
  d->content = in->content;
  d->content_len = in->content_len;
  d->n_tool_calls = n_calls;
}

int dsi_chat_out_open(dsi_chat_out **out, int flags, dsi_err *err) {
  *out = NULL;
  dsi_chat_opts o = {.in_reasoning = (flags & DSI_CHAT_OUT_IN_REASONING) != 0,
                     .continues = (flags & DSI_CHAT_OUT_CONTINUES) != 0};
  dsi_chat_out *c = calloc(1, sizeof *c);
  if (!c) return dsi_errf(err, DSI_E_NOMEM, "chat output: out of memory");
  int st = dsi_chat_stream_open(&c->s, &o, err);
  if (st) {
    free(c);
    return st;
  }
  *out = c;
  return DSI_OK;
}

int dsi_chat_out_feed(dsi_chat_out *o, const char *piece, size_t len, dsi_chat_out_delta *d, dsi_err *err) {
  if (!o) return dsi_errf(err, DSI_E_INVAL, "chat output: no parser");
  dsi_chat_delta in;
  int st = dsi_chat_stream_feed(o->s, piece, len, &in, err);
  if (!st) to_public(&in, in.tool_calls_to, d);
  return st;
}

int dsi_chat_out_finish(dsi_chat_out *o, dsi_chat_out_delta *d, dsi_err *err) {
  if (!o) return dsi_errf(err, DSI_E_INVAL, "chat output: no parser");
  dsi_chat_delta in;
  int st = dsi_chat_stream_finish(o->s, &in, err);
  if (!st) to_public(&in, in.tool_calls_to, d);
  return st;
}

const char *dsi_chat_out_reasoning(dsi_chat_out *o) { return o ? dsi_chat_stream_msg(o->s)->reasoning_content : NULL; }
const char *dsi_chat_out_content(dsi_chat_out *o) { return o ? dsi_chat_stream_msg(o->s)->content : ""; }

int dsi_chat_out_tool_call(dsi_chat_out *o, int i, const char **name, const char **arguments) {
  const dsi_chat_msg *m = o ? dsi_chat_stream_msg(o->s) : NULL;
  if (!m || i < 0 || i >= m->n_tool_calls) return DSI_E_INVAL;
  if (name) *name = m->tool_calls[i].name ? m->tool_calls[i].name : "";
  if (arguments) *arguments = m->tool_calls[i].arguments ? m->tool_calls[i].arguments : "";
  return DSI_OK;
}

void dsi_chat_out_free(dsi_chat_out *o) {
  if (!o) return;
  dsi_chat_stream_free(o->s);
  free(o);
}
