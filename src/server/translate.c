/* server: the other APIs' requests read as the chat request they ask for
 * (server_impl.h): OpenAI's Responses API (POST /v1/responses,
 * resp_to_chat) — `instructions` and the `input` items become messages,
 * function tools the chat tools, `text.format` a response_format,
 * `max_output_tokens` max_tokens — and Anthropic's Messages API (POST
 * /v1/messages, msg_to_chat) — `system` and the content blocks become
 * messages (tool_use blocks tool calls, tool_result blocks tool messages,
 * thinking blocks reasoning; a last assistant message a prefill the
 * answer continues), `input_schema` tools function tools, `stop_sequences`
 * stop, `thinking` the template's switch. The sampling
 * fields pass through. What this server cannot do (stored responses,
 * built-in and server tools, images and files) is refused by name. The
 * answers' shapes (items, blocks, the streams' events) are openai.c's. */
#include "base/base.h"
#include "base/sbuf.h"
#include "server/server_impl.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int refuse(resp_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(resp_err *e, const char *param, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  e->param = param;
  return 1;
}

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* present and not null */
static int given(const cJSON *v) { return v && !cJSON_IsNull(v); }

/* the text of one part of an array: its text, or NULL with e set */
typedef const char *(*part_text_fn)(const cJSON *part, const char *where, resp_err *e);

/* v as one text: a string as it is, or an array of parts whose texts
 * part_text gives, joined. NULL with e set (param: the field at fault;
 * where: the place, for the message), or with *oom. */
static char *join_parts(const cJSON *v, const char *param, const char *where, part_text_fn part_text, resp_err *e,
                        int *oom) {
  if (!cJSON_IsString(v) && !cJSON_IsArray(v)) {
    refuse(e, param, "%s must be a string or an array of parts", where);
    return NULL;
  }
  sbuf b = {0};
  if (cJSON_IsString(v)) {
    sb_put(&b, v->valuestring, strlen(v->valuestring));
  } else {
    const cJSON *p;
    cJSON_ArrayForEach(p, v) {
      const char *t = part_text(p, where, e);
      if (!t) {
        e->param = param;
        free(b.p);
        return NULL;
      }
      sb_put(&b, t, strlen(t));
    }
  }
  sb_put(&b, "", 1); /* the text, even empty, in memory */
  if (b.oom) {
    free(b.p);
    *oom = 1;
    return NULL;
  }
  return b.p;
}

/* a Responses content part: input_text, output_text (or text), refusal */
static const char *input_part(const cJSON *p, const char *where, resp_err *e) {
  const cJSON *type = get(p, "type");
  if (!cJSON_IsString(type)) return refuse(e, NULL, "%s: each part needs a type", where), NULL;
  const char *t = type->valuestring;
  if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") && strcmp(t, "refusal"))
    return refuse(e, NULL, "%s: '%.40s' parts are not supported (this model reads text only)", where, t), NULL;
  const cJSON *s = get(p, strcmp(t, "refusal") ? "text" : "refusal");
  if (!cJSON_IsString(s)) return refuse(e, NULL, "%s: a '%.40s' part needs its text as a string", where, t), NULL;
  return s->valuestring;
}

/* item i's content (or a function call's output) as text */
static char *content_string(const cJSON *c, int i, resp_err *e, int *oom) {
  char where[40];
  snprintf(where, sizeof where, "input[%d].content", i);
  return join_parts(c, "input", where, input_part, e, oom);
}

/* one chat message {role, content} (content taken; NULL: null) */
static cJSON *message(const char *role, char *content) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", role);
  if (content) cJSON_AddStringToObject(m, "content", content);
  else cJSON_AddNullToObject(m, "content");
  free(content);
  return m;
}

/* the input items as chat messages, appended to msgs: messages, a turn's
 * function calls (onto the assistant message before them, or a new one)
 * and their outputs (tool messages); reasoning items are passed over, as
 * DeepSeek's templates drop an earlier turn's reasoning */
static int input_messages(const cJSON *input, cJSON *msgs, resp_err *e) {
  if (cJSON_IsString(input)) {
    char *t = strdup(input->valuestring);
    if (!t) return -1;
    cJSON_AddItemToArray(msgs, message("user", t));
    return 0;
  }
  if (!cJSON_IsArray(input) || !cJSON_GetArraySize(input))
    return refuse(e, "input", "'input' must be a string or a non-empty array of items");
  const cJSON *it;
  int i = 0, oom = 0;
  cJSON *last = NULL; /* the assistant message a function call joins */
  cJSON_ArrayForEach(it, input) {
    if (!cJSON_IsObject(it)) return refuse(e, "input", "input[%d] must be an object", i);
    const cJSON *type = get(it, "type");
    if (given(type) && !cJSON_IsString(type)) return refuse(e, "input", "input[%d].type must be a string", i);
    const char *t = given(type) ? type->valuestring : "message";
    if (!strcmp(t, "message")) {
      const cJSON *role = get(it, "role"), *content = get(it, "content");
      if (!cJSON_IsString(role)) return refuse(e, "input", "input[%d]: a message needs a role", i);
      const char *r = role->valuestring;
      if (!strcmp(r, "developer")) r = "system";
      if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "assistant"))
        return refuse(e, "input", "input[%d]: a message's role must be user, system, developer or assistant", i);
      if (!content) return refuse(e, "input", "input[%d]: a message needs its content", i);
      char *text = content_string(content, i, e, &oom);
      if (!text) return oom ? -1 : 1;
      cJSON *m = message(r, text);
      cJSON_AddItemToArray(msgs, m);
      last = strcmp(r, "assistant") ? NULL : m;
    } else if (!strcmp(t, "function_call")) {
      const cJSON *id = get(it, "call_id"), *name = get(it, "name"), *args = get(it, "arguments");
      if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
        return refuse(e, "input", "input[%d]: a function_call needs call_id, name and arguments as strings", i);
      if (!last) {
        last = message("assistant", NULL);
        cJSON_AddItemToArray(msgs, last);
      }
      cJSON *calls = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
      if (!calls) calls = cJSON_AddArrayToObject(last, "tool_calls");
      cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
      cJSON_AddStringToObject(c, "id", id->valuestring);
      cJSON_AddStringToObject(c, "type", "function");
      cJSON_AddStringToObject(f, "name", name->valuestring);
      cJSON_AddStringToObject(f, "arguments", args->valuestring);
      cJSON_AddItemToObject(c, "function", f);
      cJSON_AddItemToArray(calls, c);
    } else if (!strcmp(t, "function_call_output")) {
      const cJSON *id = get(it, "call_id"), *out = get(it, "output");
      if (!cJSON_IsString(id) || !out)
        return refuse(e, "input", "input[%d]: a function_call_output needs call_id and output", i);
      char *text = content_string(out, i, e, &oom);
      if (!text) return oom ? -1 : 1;
      cJSON *m = message("tool", text);
      cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
      cJSON_AddItemToArray(msgs, m);
      last = NULL;
    } else if (!strcmp(t, "reasoning")) {
      /* passed over */
    } else if (!strcmp(t, "item_reference")) {
      return refuse(e, "input", "input[%d]: item references are not supported (this server stores no items: send "
                    "them whole)", i);
    } else {
      return refuse(e, "input", "input[%d]: '%.40s' items are not supported", i, t);
    }
    i++;
  }
  return 0;
}

/* function tools as chat tools */
static int tools_chat(const cJSON *tools, cJSON *chat, resp_err *e) {
  if (!cJSON_IsArray(tools)) return refuse(e, "tools", "'tools' must be an array");
  cJSON *out = cJSON_AddArrayToObject(chat, "tools");
  const cJSON *t;
  int i = 0;
  cJSON_ArrayForEach(t, tools) {
    const cJSON *type = get(t, "type"), *name = get(t, "name");
    if (!cJSON_IsString(type)) return refuse(e, "tools", "tools[%d] needs a type", i);
    if (strcmp(type->valuestring, "function"))
      return refuse(e, "tools", "tools[%d]: '%.40s' tools are not supported (only function tools)", i,
                    type->valuestring);
    if (!cJSON_IsString(name)) return refuse(e, "tools", "tools[%d]: a function tool needs its name", i);
    cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    const char *copy[] = {"description", "parameters", "strict"};
    for (size_t k = 0; k < sizeof copy / sizeof *copy; k++) {
      const cJSON *v = get(t, copy[k]);
      if (given(v)) cJSON_AddItemToObject(f, copy[k], cJSON_Duplicate(v, 1));
    }
    cJSON_AddItemToObject(c, "function", f);
    cJSON_AddItemToArray(out, c);
    i++;
  }
  return 0;
}

/* tool_choice: "none" | "auto" | "required" as they are, {"type":
 * "function", "name"} as chat's {"type": "function", "function": {"name"}} */
static int tool_choice_chat(const cJSON *tc, cJSON *chat, resp_err *e) {
  if (cJSON_IsString(tc)) {
    cJSON_AddStringToObject(chat, "tool_choice", tc->valuestring); /* the chat side checks the word */
    return 0;
  }
  const cJSON *type = cJSON_IsObject(tc) ? get(tc, "type") : NULL, *name = cJSON_IsObject(tc) ? get(tc, "name") : NULL;
  if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
    return refuse(e, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                  "\"name\": ...}");
  cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice"), *f = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "type", "function");
  cJSON_AddStringToObject(f, "name", name->valuestring);
  cJSON_AddItemToObject(c, "function", f);
  return 0;
}

/* text.format: text (nothing), json_object, json_schema {name, schema, strict} */
static int format_chat(const cJSON *text, cJSON *chat, resp_err *e) {
  if (!cJSON_IsObject(text)) return refuse(e, "text", "'text' must be an object");
  const cJSON *f = get(text, "format");
  if (!given(f)) return 0;
  const cJSON *type = cJSON_IsObject(f) ? get(f, "type") : NULL;
  if (!cJSON_IsString(type)) return refuse(e, "text.format", "'text.format' must be an object with a type");
  const char *t = type->valuestring;
  if (!strcmp(t, "text")) return 0;
  cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
  if (!strcmp(t, "json_object")) {
    cJSON_AddStringToObject(rf, "type", "json_object");
    return 0;
  }
  if (strcmp(t, "json_schema"))
    return refuse(e, "text.format", "'text.format.type' must be text, json_object or json_schema");
  const cJSON *schema = get(f, "schema");
  if (!cJSON_IsObject(schema)) return refuse(e, "text.format", "a json_schema format needs its schema as an object");
  cJSON_AddStringToObject(rf, "type", "json_schema");
  cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
  const char *copy[] = {"name", "schema", "strict"};
  for (size_t k = 0; k < sizeof copy / sizeof *copy; k++) {
    const cJSON *v = get(f, copy[k]);
    if (given(v)) cJSON_AddItemToObject(js, copy[k], cJSON_Duplicate(v, 1));
  }
  return 0;
}

/* the chat fields a Responses body must not bring in under their chat
 * names (its own are translated), and the Responses fields read here */
static const char *const k_drop[] = {
  "messages", "n", "max_tokens", "max_completion_tokens", "logprobs", "top_logprobs", "echo", "stream_options",
  "response_format", "input", "instructions", "max_output_tokens", "text", "tools", "tool_choice", "store",
  "previous_response_id", "conversation", "reasoning", "include", "truncation", "metadata", "parallel_tool_calls",
  "background", "prompt", "service_tier", "max_tool_calls",
};

int resp_to_chat(const cJSON *body, cJSON **out, resp_err *e) {
  *out = NULL;
  e->param = NULL;
  e->msg[0] = 0;
  const cJSON *v;
  static const char *const stored[] = {"previous_response_id", "conversation"};
  for (size_t k = 0; k < sizeof stored / sizeof *stored; k++)
    if (given(get(body, stored[k])))
      return refuse(e, stored[k], "'%s' is not supported: this server stores no responses (send the whole "
                    "conversation in 'input')", stored[k]);
  if (cJSON_IsTrue(get(body, "background")))
    return refuse(e, "background", "'background' responses are not supported");
  if (given(v = get(body, "prompt"))) return refuse(e, "prompt", "stored prompts ('prompt') are not supported");
  if (given(v = get(body, "top_logprobs")) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
    return refuse(e, "top_logprobs", "'top_logprobs' is not supported on /v1/responses (chat completions has "
                  "logprobs)");
  const cJSON *input = get(body, "input"), *ins = get(body, "instructions");
  if (!given(input)) return refuse(e, "input", "'input' is required");
  if (given(ins) && !cJSON_IsString(ins)) return refuse(e, "instructions", "'instructions' must be a string");
  const cJSON *mot = get(body, "max_output_tokens");
  if (given(mot) && !(cJSON_IsNumber(mot) && mot->valuedouble >= 1 && mot->valuedouble <= 1073741824.0 &&
                      mot->valuedouble == (double)(long long)mot->valuedouble))
    return refuse(e, "max_output_tokens", "'max_output_tokens' must be an integer in [1, 1073741824]");

  cJSON *chat = cJSON_Duplicate(body, 1);
  if (!chat) return -1;
  for (size_t k = 0; k < sizeof k_drop / sizeof *k_drop; k++) cJSON_DeleteItemFromObjectCaseSensitive(chat, k_drop[k]);
  cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
  int rc = msgs ? 0 : -1;
  if (!rc && given(ins)) {
    char *t = strdup(ins->valuestring);
    if (t) cJSON_AddItemToArray(msgs, message("system", t));
    else rc = -1;
  }
  if (!rc) rc = input_messages(input, msgs, e);
  if (!rc && given(v = get(body, "tools"))) rc = tools_chat(v, chat, e);
  if (!rc && given(v = get(body, "tool_choice"))) rc = tool_choice_chat(v, chat, e);
  if (!rc && given(v = get(body, "text"))) rc = format_chat(v, chat, e);
  if (!rc && given(mot)) cJSON_AddNumberToObject(chat, "max_tokens", mot->valuedouble);
  if (!rc && dsi_json_oom()) rc = -1; /* an allocation inside cJSON failed on the way */
  if (rc) {
    cJSON_Delete(chat);
    return rc;
  }
  *out = chat;
  return 0;
}

/* ---- Anthropic's Messages API ---- */

/* an Anthropic text block: {"type": "text", "text"}, the only one a
 * system prompt or a tool_result's content may hold here */
static const char *text_block_part(const cJSON *b, const char *where, resp_err *e) {
  const cJSON *type = get(b, "type"), *text = get(b, "text");
  if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
    return refuse(e, NULL, "%s: only text blocks ({\"type\": \"text\", \"text\": ...}) are supported here", where),
           NULL;
  return text->valuestring;
}

static char *blocks_text(const cJSON *v, const char *param, const char *where, resp_err *e, int *oom) {
  return join_parts(v, param, where, text_block_part, e, oom);
}

/* one message's content blocks as chat messages appended to msgs: a
 * user's tool_result blocks become tool messages (before its text, as
 * Anthropic orders them), an assistant's thinking its reasoning_content
 * and its tool_use blocks tool calls */
static int message_blocks(const cJSON *m, int i, cJSON *msgs, resp_err *e) {
  const cJSON *role = get(m, "role"), *content = get(m, "content");
  char where[48];
  snprintf(where, sizeof where, "messages[%d].content", i);
  if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
    return refuse(e, "messages", "messages[%d]: the role must be user or assistant", i);
  const int user = !strcmp(role->valuestring, "user");
  if (cJSON_IsString(content)) {
    char *t = strdup(content->valuestring);
    if (!t) return -1;
    cJSON_AddItemToArray(msgs, message(role->valuestring, t));
    return 0;
  }
  if (!cJSON_IsArray(content)) return refuse(e, "messages", "%s must be a string or an array of blocks", where);
  sbuf text = {0}, think = {0};
  cJSON *calls = NULL;
  const cJSON *b;
  int k = 0, rc = 0, oom = 0;
  cJSON_ArrayForEach(b, content) {
    const cJSON *type = get(b, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "text") && cJSON_IsString(get(b, "text"))) {
      sb_put(&text, get(b, "text")->valuestring, strlen(get(b, "text")->valuestring));
    } else if (user && !strcmp(t, "tool_result")) {
      const cJSON *id = get(b, "tool_use_id"), *c = get(b, "content");
      if (!cJSON_IsString(id)) {
        rc = refuse(e, "messages", "%s[%d]: a tool_result needs its tool_use_id", where, k);
        break;
      }
      char *r = given(c) ? blocks_text(c, "messages", where, e, &oom) : strdup("");
      if (!r) {
        rc = oom || !given(c) ? -1 : 1;
        break;
      }
      cJSON *tm = message("tool", r);
      cJSON_AddStringToObject(tm, "tool_call_id", id->valuestring);
      cJSON_AddItemToArray(msgs, tm);
    } else if (!user && !strcmp(t, "tool_use")) {
      const cJSON *id = get(b, "id"), *name = get(b, "name"), *input = get(b, "input");
      if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input)) {
        rc = refuse(e, "messages", "%s[%d]: a tool_use needs id, name and input (an object)", where, k);
        break;
      }
      char *args = cJSON_PrintUnformatted(input);
      if (!args) {
        rc = -1;
        break;
      }
      if (!calls) calls = cJSON_CreateArray();
      cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
      cJSON_AddStringToObject(c, "id", id->valuestring);
      cJSON_AddStringToObject(c, "type", "function");
      cJSON_AddStringToObject(f, "name", name->valuestring);
      cJSON_AddStringToObject(f, "arguments", args);
      free(args);
      cJSON_AddItemToObject(c, "function", f);
      cJSON_AddItemToArray(calls, c);
    } else if (!user && !strcmp(t, "thinking") && cJSON_IsString(get(b, "thinking"))) {
      sb_put(&think, get(b, "thinking")->valuestring, strlen(get(b, "thinking")->valuestring));
    } else if (!user && !strcmp(t, "redacted_thinking")) {
      /* nothing to read */
    } else {
      rc = refuse(e, "messages", "%s[%d]: '%.40s' blocks are not supported in a%s message%s", where, k,
                  *t ? t : "(untyped)", user ? " user" : "n assistant",
                  !strcmp(t, "image") || !strcmp(t, "document") ? " (this model reads text only)" : "");
      break;
    }
    k++;
  }
  if (!rc && (text.oom || think.oom)) rc = -1;
  if (!rc && (text.n || !user || !k)) { /* a user message of tool results alone adds none */
    char *t = text.n || user ? strndup(text.p ? text.p : "", text.n) : NULL;
    if ((text.n || user) && !t) {
      rc = -1;
    } else {
      cJSON *msg = message(role->valuestring, t);
      if (think.n) {
        char *r = strndup(think.p, think.n);
        if (r) cJSON_AddStringToObject(msg, "reasoning_content", r);
        else rc = -1;
        free(r);
      }
      if (calls) cJSON_AddItemToObject(msg, "tool_calls", calls), calls = NULL;
      cJSON_AddItemToArray(msgs, msg);
    }
  }
  cJSON_Delete(calls);
  free(text.p), free(think.p);
  return rc;
}

/* tools {name, description, input_schema} as chat's function tools */
static int msg_tools(const cJSON *tools, cJSON *chat, resp_err *e) {
  if (!cJSON_IsArray(tools)) return refuse(e, "tools", "'tools' must be an array");
  cJSON *out = cJSON_AddArrayToObject(chat, "tools");
  const cJSON *t;
  int i = 0;
  cJSON_ArrayForEach(t, tools) {
    const cJSON *type = get(t, "type"), *name = get(t, "name"), *schema = get(t, "input_schema");
    if (given(type) && (!cJSON_IsString(type) || strcmp(type->valuestring, "custom")))
      return refuse(e, "tools", "tools[%d]: '%.40s' tools are not supported (only client tools with an input_schema)",
                    i, cJSON_IsString(type) ? type->valuestring : "?");
    if (!cJSON_IsString(name) || !cJSON_IsObject(schema))
      return refuse(e, "tools", "tools[%d] needs a name and an input_schema (an object)", i);
    cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    if (given(get(t, "description"))) cJSON_AddItemToObject(f, "description", cJSON_Duplicate(get(t, "description"), 1));
    cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(schema, 1));
    cJSON_AddItemToObject(c, "function", f);
    cJSON_AddItemToArray(out, c);
    i++;
  }
  return 0;
}

/* tool_choice {"type": auto | any | tool (with name) | none} */
static int msg_tool_choice(const cJSON *tc, cJSON *chat, resp_err *e) {
  const cJSON *type = cJSON_IsObject(tc) ? get(tc, "type") : NULL, *name = cJSON_IsObject(tc) ? get(tc, "name") : NULL;
  const char *t = cJSON_IsString(type) ? type->valuestring : "";
  if (!strcmp(t, "auto") || !strcmp(t, "none")) {
    cJSON_AddStringToObject(chat, "tool_choice", t);
  } else if (!strcmp(t, "any")) {
    cJSON_AddStringToObject(chat, "tool_choice", "required");
  } else if (!strcmp(t, "tool") && cJSON_IsString(name)) {
    cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice"), *f = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    cJSON_AddItemToObject(c, "function", f);
  } else {
    return refuse(e, "tool_choice", "'tool_choice' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": "
                  "\"none\"} or {\"type\": \"tool\", \"name\": ...}");
  }
  return 0;
}

/* the Messages fields read here, and chat's that must not come in under
 * their own names */
static const char *const k_msg_drop[] = {
  "messages", "system", "stop_sequences", "tools", "tool_choice", "thinking", "metadata", "service_tier", "container",
  "mcp_servers", "n", "max_completion_tokens", "logprobs", "top_logprobs", "echo", "stream_options", "response_format",
  "stop", "context_management",
};

int msg_to_chat(const cJSON *body, int count_only, cJSON **out, resp_err *e) {
  *out = NULL;
  e->param = NULL;
  e->msg[0] = 0;
  const cJSON *msgs = get(body, "messages"), *sys = get(body, "system"), *mt = get(body, "max_tokens"), *v;
  if (!count_only && !given(mt)) return refuse(e, "max_tokens", "'max_tokens' is required");
  if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs))
    return refuse(e, "messages", "'messages' must be a non-empty array of messages");
  if (given(get(body, "mcp_servers"))) return refuse(e, "mcp_servers", "'mcp_servers' is not supported");
  if (given(get(body, "container"))) return refuse(e, "container", "'container' is not supported");
  cJSON *chat = cJSON_Duplicate(body, 1);
  if (!chat) return -1;
  for (size_t k = 0; k < sizeof k_msg_drop / sizeof *k_msg_drop; k++)
    cJSON_DeleteItemFromObjectCaseSensitive(chat, k_msg_drop[k]);
  if (count_only) cJSON_DeleteItemFromObjectCaseSensitive(chat, "max_tokens");
  cJSON *cm = cJSON_AddArrayToObject(chat, "messages");
  int rc = cm ? 0 : -1, oom = 0, i = 0;
  if (!rc && given(sys)) {
    char *t = blocks_text(sys, "system", "'system'", e, &oom);
    if (t) cJSON_AddItemToArray(cm, message("system", t));
    else rc = oom ? -1 : 1;
  }
  const cJSON *m;
  cJSON_ArrayForEach(m, msgs) {
    if (rc) break;
    rc = cJSON_IsObject(m) ? message_blocks(m, i, cm, e) : refuse(e, "messages", "messages[%d] must be an object", i);
    i++;
  }
  /* a last message of the assistant's is a prefill: the answer continues it */
  cJSON_DeleteItemFromObjectCaseSensitive(chat, "continue_final_message");
  const cJSON *last = cJSON_GetArrayItem(cm, cJSON_GetArraySize(cm) - 1);
  if (!rc && last && !strcmp(cJSON_GetObjectItemCaseSensitive(last, "role")->valuestring, "assistant") &&
      !cJSON_GetObjectItemCaseSensitive(last, "tool_calls"))
    cJSON_AddTrueToObject(chat, "continue_final_message");
  if (!rc && given(v = get(body, "stop_sequences"))) {
    if (!cJSON_IsArray(v)) rc = refuse(e, "stop_sequences", "'stop_sequences' must be an array of strings");
    else cJSON_AddItemToObject(chat, "stop", cJSON_Duplicate(v, 1)); /* the chat side checks the strings */
  }
  if (!rc && given(v = get(body, "tools"))) rc = msg_tools(v, chat, e);
  if (!rc && given(v = get(body, "tool_choice"))) rc = msg_tool_choice(v, chat, e);
  if (!rc && given(v = get(body, "thinking"))) { /* the template's switch (V3.1's {"thinking": true}) */
    const cJSON *type = cJSON_IsObject(v) ? get(v, "type") : NULL;
    if (!cJSON_IsString(type) || (strcmp(type->valuestring, "enabled") && strcmp(type->valuestring, "disabled")))
      rc = refuse(e, "thinking", "'thinking' must be {\"type\": \"enabled\"} or {\"type\": \"disabled\"}");
    else {
      cJSON *kw = cJSON_GetObjectItemCaseSensitive(chat, "chat_template_kwargs");
      if (!cJSON_IsObject(kw)) {
        cJSON_DeleteItemFromObjectCaseSensitive(chat, "chat_template_kwargs");
        kw = cJSON_AddObjectToObject(chat, "chat_template_kwargs");
      }
      cJSON_DeleteItemFromObjectCaseSensitive(kw, "thinking");
      cJSON_AddBoolToObject(kw, "thinking", !strcmp(type->valuestring, "enabled"));
    }
  }
  if (!rc && dsi_json_oom()) rc = -1;
  if (rc) {
    cJSON_Delete(chat);
    return rc;
  }
  *out = chat;
  return 0;
}
