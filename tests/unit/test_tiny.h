/* tests: the tiny checkpoint (mkmodel's golden-test shape, random bf16
 * weights) with the built-in tokenizer, in a fresh temporary folder, for
 * the tests of what runs on top of a model: scheduler, server. */
#ifndef DSI_TEST_TINY_H
#define DSI_TEST_TINY_H

#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "dsinfer.h"

/* dir's tokenizer (and, when fmt is not NULL, its chat format) */
static inline void tiny_tokenizer(const char *dir, dsi_tok **tok, dsi_chat_fmt **fmt) {
  dsi_err err = {0};
  char json[300], cfg[300];
  snprintf(json, sizeof json, "%s/tokenizer.json", dir);
  snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
  DSI_ASSERT(dsi_tok_open(tok, json, cfg, 0, &err) == 0);
  if (fmt) DSI_ASSERT(dsi_chat_fmt_open(fmt, dir, &err) == 0);
}

#ifdef DSI_TOOLS_INTERNAL_H
/* dir: a mkdtemp template, filled in; the checkpoint written there */
static inline void tiny_checkpoint(char *dir, dsi_model **m, dsi_tok **tok) {
  DSI_ASSERT(mkdtemp(dir));
  dsi_err err = {0};
  dsi_mkmodel_opts mo = {.preset = "tiny", .dtype = "bf16", .seed = 3, .out_dir = dir, .tokenizer = "builtin"};
  DSI_ASSERT(dsi_mkmodel(&mo, &err) == 0);
  dsi_load_opts lo = {0};
  DSI_ASSERT(dsi_model_open(m, dir, &lo, &err) == 0);
  tiny_tokenizer(dir, tok, NULL);
}
#endif

#endif
