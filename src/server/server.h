/* server: `dsinfer serve`'s HTTP side — the OpenAI API (chat completions,
 * completions, models), tokenize / detokenize, health, Prometheus metrics
 * and the chat page, on libmicrohttpd, over a scheduler it does not own.
 * Built on include/dsinfer.h alone. */
#ifndef DSI_SERVER_H
#define DSI_SERVER_H

#include <stddef.h>

#include "dsinfer.h"

typedef struct dsi_server dsi_server;

typedef struct dsi_server_opts {
  const char *host;       /* address to bind (NULL = "127.0.0.1") */
  int port;               /* 0 = any free port (dsi_server_port says which) */
  const char *api_key;    /* NULL or "": none asked */
  const char *model_name; /* what /v1/models lists and requests may name; "NAME,ALIAS,...": requests may
                             name any of them, answers and /v1/models say the first */
  int ctx;                /* the longest sequence: prompt + completion */
  size_t max_body;        /* request body bytes (0 = 16 MiB) */
  int max_waiting;        /* requests waiting beyond which new ones get 503 (0 = 256) */
  int quiet;              /* 1: no line per request on stderr */
  double keepalive_s;     /* a stream silent this long (waiting in the queue, a long prefill) gets a keep-alive
                             event, so that clients' idle timeouts do not end it (0 = 15 s; < 0: never) */
  const dsi_gen_config *gen; /* the checkpoint's generation_config.json: temperature, top_p and
                                top_k a request leaves out (NULL: OpenAI's 1, 1, off) */
} dsi_server_opts;

/* Start serving (threads of its own) the scheduler s with tok and fmt
 * (borrowed, outliving the server). DSI_E_IO when the address cannot be
 * bound. */
int dsi_server_open(dsi_server **out, dsi_sched *s, const dsi_tok *tok, const dsi_chat_fmt *fmt,
                    const dsi_server_opts *o, dsi_err *err);
int dsi_server_port(const dsi_server *srv);
/* Stop accepting connections; let requests in flight finish for up to
 * grace_s seconds, then cancel the rest and wait for their responses to
 * end. */
void dsi_server_drain(dsi_server *srv, double grace_s);
void dsi_server_free(dsi_server *srv);

#endif
