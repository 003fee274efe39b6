/* tokenizer/template.h: chat templates — render a conversation with a
 * checkpoint's Jinja `chat_template` exactly as transformers.js
 * (@huggingface/jinja) does, byte for byte. Parse once, render many times. */
#ifndef DSI_TEMPLATE_H
#define DSI_TEMPLATE_H

#include <cjson/cJSON.h>

#include "dsinfer.h"

typedef struct dsi_tmpl dsi_tmpl;

/* Parse a template. A syntax error fails with DSI_E_FORMAT and a message
 * that names line:column in source. */
int dsi_tmpl_open(dsi_tmpl **out, const char *source, dsi_err *err);

/* The template a tokenizer_config.json names: its "chat_template" string,
 * or the entry named "default" of a list of {name, template}; without one,
 * the built-in DeepSeek-V3 template. config may be NULL. */
int dsi_tmpl_open_config(dsi_tmpl **out, const cJSON *tokenizer_config, dsi_err *err);

/* Render. context is a JSON object whose keys become the template's
 * variables: messages [{role, content, tool_calls, reasoning_content, ...}],
 * add_generation_prompt, bos_token, eos_token, tools, thinking, ... *out is
 * malloc'd and NUL-terminated (free it). A template that fails at run time
 * (raise_exception, a type error) returns DSI_E_INVAL naming line:column. */
int dsi_tmpl_render(const dsi_tmpl *t, const cJSON *context, char **out, dsi_err *err);

/* Same, with the output's length in bytes (the output may contain NULs). */
int dsi_tmpl_render_len(const dsi_tmpl *t, const cJSON *context, char **out, size_t *len, dsi_err *err);

void dsi_tmpl_free(dsi_tmpl *t);

/* The built-in DeepSeek-V3 chat template (tokenizer_config.json of
 * deepseek-ai/DeepSeek-V3). */
const char *dsi_tmpl_deepseek_v3(void);

/* The special token a tokenizer_config.json gives for key ("bos_token",
 * "eos_token"): a string, or an object's "content"; NULL if absent. Borrowed. */
const char *dsi_tmpl_config_token(const cJSON *tokenizer_config, const char *key);

#endif
