/* tokenizer/chat.h: a model's generated text back into a chat message —
 * reasoning (<think>…</think>) apart from the answer, DeepSeek tool-call
 * blocks (the V3/R1 and the V3.1 forms) into name + JSON arguments; whole,
 * or streamed piece by piece with deltas that are final when given. */
#ifndef DSI_CHAT_H
#define DSI_CHAT_H

#include <stddef.h>

#include "dsinfer.h"

typedef struct dsi_chat_tool_call {
  char *type;          /* "function" (V3/R1 name it; V3.1 does not) */
  char *name;
  char *arguments;     /* the arguments' JSON text, trimmed; raw text when not valid JSON */
  int arguments_valid; /* 1 when arguments is one valid JSON value */
  int complete;        /* 0 when the text ended inside this call */
} dsi_chat_tool_call;

typedef struct dsi_chat_msg {
  char *reasoning_content; /* NULL when the output had no reasoning */
  char *content;           /* the answer; "" when there is none */
  dsi_chat_tool_call *tool_calls;
  int n_tool_calls;
} dsi_chat_msg;

typedef struct dsi_chat_opts {
  /* 1 when the prompt ended inside <think> (R1's generation prompt, V3.1
   * with thinking): the output starts in the reasoning. */
  int in_reasoning;
  /* 1 when the output continues text that ends the prompt (a prefill):
   * the field it starts in keeps its leading white space. */
  int continues;
} dsi_chat_opts;

/* dsi_chat_prompt_in_reasoning (dsinfer.h): 1 when after the prompt's last
 * <｜Assistant｜> there is a <think> with no </think> after it. */

/* Split generated text. Reasoning and content are trimmed of white space at
 * both ends; an <｜end▁of▁sentence｜> ends the message. out is zeroed first;
 * free it with dsi_chat_msg_free. opts may be NULL. */
int dsi_chat_parse(const char *text, size_t len, const dsi_chat_opts *opts, dsi_chat_msg *out, dsi_err *err);
void dsi_chat_msg_free(dsi_chat_msg *m);

/* ---- streaming: the same split, fed in pieces ---- */
typedef struct dsi_chat_stream dsi_chat_stream;

/* What one piece made certain. Text is borrowed until the next call; tool
 * calls [tool_calls_from, tool_calls_to) of dsi_chat_stream_msg are new. A
 * delta never holds part of a tag or of a UTF-8 character, and the deltas
 * add up to exactly what dsi_chat_parse gives for the whole text. */
typedef struct dsi_chat_delta {
  const char *reasoning;
  size_t reasoning_len;
  const char *content;
  size_t content_len;
  int tool_calls_from, tool_calls_to;
} dsi_chat_delta;

int dsi_chat_stream_open(dsi_chat_stream **out, const dsi_chat_opts *opts, dsi_err *err);
int dsi_chat_stream_feed(dsi_chat_stream *s, const char *piece, size_t len, dsi_chat_delta *d, dsi_err *err);
/* The text is over: what was held back (a possible tag's start) is decided. */
int dsi_chat_stream_finish(dsi_chat_stream *s, dsi_chat_delta *d, dsi_err *err);
/* The message so far (all of it after finish). Borrowed. */
const dsi_chat_msg *dsi_chat_stream_msg(dsi_chat_stream *s);
void dsi_chat_stream_free(dsi_chat_stream *s);

#endif
