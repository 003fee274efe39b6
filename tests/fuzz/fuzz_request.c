/* tests/fuzz: the server's request parsers (chat completions, responses,
 * Anthropic's messages and completions) on untrusted bytes. What is accepted must be a request the
 * scheduler can take (a prompt of known ids that fits the context with
 * its max_tokens, sane sampling); what is refused must be a 4xx with an
 * OpenAI error object. The corpus holds requests of every shape. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"
#include "tokenizer/tokenizer.h"
#include "../unit/test_tiny.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static dsi_server g_srv;

/* a small tokenizer and DeepSeek-V3's chat format, once */
static void setup(void) {
  static char dir[] = "/tmp/fuzz_request_XXXXXX";
  DSI_ASSERT(mkdtemp(dir));
  dsi_err err = {0};
  dsi_tok_made made;
  DSI_ASSERT(dsi_tok_write_checkpoint(dir, NULL, 0, 512, &made, &err) == 0);
  dsi_tok *tok;
  dsi_chat_fmt *fmt;
  tiny_tokenizer(dir, &tok, &fmt);
  g_srv.tok = tok;
  g_srv.fmt = fmt;
  g_srv.o.ctx = 256;
  g_srv.n_valid = dsi_tok_vocab_size(tok);
  g_srv.model_name = "tiny";
  g_srv.model_names = "tiny";
  g_srv.chat_eos = dsi_tok_eos_id(tok);
}

/* counted: a prompt count_tokens answers for, of any length, never submitted */
static void check_request(const params *p, int counted) {
  const dsi_request *r = &p->r;
  DSI_ASSERT(r->n_prompt > 0);
  if (!counted) DSI_ASSERT(r->max_tokens >= 1 && r->n_prompt + r->max_tokens <= g_srv.o.ctx);
  for (int i = 0; i < r->n_prompt; i++) DSI_ASSERT(r->prompt[i] >= 0 && r->prompt[i] < g_srv.n_valid);
  DSI_ASSERT(r->n >= 0 && r->n <= MAX_N && r->n_stop >= 0 && r->n_stop <= MAX_STOP);
  for (int i = 0; i < r->n_stop; i++) DSI_ASSERT(r->stop[i] && *r->stop[i]);
  for (int i = 0; i < r->n_stop_ids; i++) DSI_ASSERT(r->stop_ids[i] >= 0 && r->stop_ids[i] < g_srv.n_valid);
  const dsi_sampling *s = &r->sampling;
  DSI_ASSERT(s->temperature >= 0 && s->top_p > 0 && s->top_p <= 1 && s->top_k >= 0 && s->min_p >= 0 && s->min_p <= 1);
  for (int i = 0; i < s->n_bias; i++) DSI_ASSERT(s->bias_ids[i] >= 0 && s->bias_ids[i] < g_srv.n_valid);
  DSI_ASSERT(r->top_logprobs >= 0 && r->top_logprobs <= DSI_MAX_TOP_LOGPROBS);
  /* the prompt's logprobs only for completions' echo with logprobs; its
   * max_tokens 0 only with echo, as one token unsaid */
  DSI_ASSERT(r->prompt_logprobs == (p->echo && p->logprobs));
  /* JSON output with a forced call only for a named function's arguments, whose call's end follows them */
  DSI_ASSERT(r->json == 0 || (r->json == 1 && (!(p->forced && strstr(p->forced, "<｜tool")) || p->trailer)));
  DSI_ASSERT(!p->trailer || r->json);
  DSI_ASSERT(!p->prompt_only || (p->echo && p->max_tokens == 1));
}

static void check_refusal(reply *rp) {
  DSI_ASSERT(rp->resp && rp->status >= 400 && rp->status < 500 && rp->log && *rp->log);
  MHD_destroy_response(rp->resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_srv.tok) setup();
  reply rp = {0};
  chat_req cr;
  if (api_chat_parse(&g_srv, (const char *)data, size, &cr, &rp) == 0) {
    DSI_ASSERT(!rp.resp && cr.text && cr.ids == cr.p.r.prompt);
    /* a forced tool call's opening ends the prompt, and the parser reads it */
    if (cr.forced)
      DSI_ASSERT(cr.p.forced == cr.forced && strlen(cr.text) >= strlen(cr.forced) &&
                 !strcmp(cr.text + strlen(cr.text) - strlen(cr.forced), cr.forced));
    check_request(&cr.p, 0);
    chat_req_free(&cr);
  } else {
    check_refusal(&rp);
  }
  /* a Responses body: the chat request it becomes, held to the same */
  reply rr = {0};
  char *echo;
  if (api_responses_parse(&g_srv, (const char *)data, size, &cr, &echo, &rr) == 0) {
    DSI_ASSERT(!rr.resp && cr.text && cr.ids == cr.p.r.prompt && echo && cr.p.r.n <= 1);
    check_request(&cr.p, 0);
    chat_req_free(&cr);
    free(echo);
  } else {
    DSI_ASSERT(!echo);
    check_refusal(&rr);
  }
  /* an Anthropic Messages body, to answer and to count */
  for (int count = 0; count < 2; count++) {
    reply rm = {0};
    if (api_messages_parse(&g_srv, (const char *)data, size, count, &cr, &rm) == 0) {
      DSI_ASSERT(!rm.resp && cr.text && cr.ids == cr.p.r.prompt && cr.p.r.n <= 1);
      check_request(&cr.p, count);
      chat_req_free(&cr);
    } else {
      DSI_ASSERT(rm.anthropic == 0); /* the route sets the error shape; the parser leaves it */
      check_refusal(&rm);
    }
  }
  reply rc = {0};
  compl_req pr;
  if (api_completions_parse(&g_srv, (const char *)data, size, &pr, &rc) == 0) {
    DSI_ASSERT(!rc.resp && pr.ps.n >= 1 && pr.ps.n <= MAX_N);
    for (int i = 0; i < pr.ps.n; i++) {
      params pi = pr.p;
      pi.r.prompt = pr.ps.ids[i];
      pi.r.n_prompt = (int)pr.ps.len[i];
      pi.r.max_tokens = (int)(pi.max_tokens ? pi.max_tokens : g_srv.o.ctx - pi.r.n_prompt);
      check_request(&pi, 0);
    }
    compl_req_free(&pr);
  } else {
    check_refusal(&rc);
  }
  return 0;
}
