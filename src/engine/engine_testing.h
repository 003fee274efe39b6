/* engine: entry points for tests, not for embedding programs (those use
 * include/dsinfer.h alone). */
#ifndef DSI_ENGINE_TESTING_H
#define DSI_ENGINE_TESTING_H

#include "dsinfer.h"

/* Graph executor only: run op by op, the arena filled with NaN before a
 * step and every tensor filled with NaN after its last use, so a memory
 * plan that lets a tensor be read after its bytes were handed on shows
 * up as NaN logits. Drops the captured plans. */
void dsi_engine_set_poison(dsi_engine *e, int on);

/* A forward step whose batch holds token id `token` fails (DSI_E_NOMEM,
 * "injected fault"), as a failed allocation would; -1 turns it off. */
void dsi_engine_fail_token(dsi_engine *e, int32_t token);

/* Every completion of s draws ids[0..n) in order (logprobs still from the
 * model's logits), then the end-of-sentence token: a fixed output, to test
 * what is built on the text (reasoning and tool-call parsing, streaming).
 * Set before the first request; ids copied (DSI_E_NOMEM when they cannot be). */
int dsi_sched_testing_script(dsi_sched *s, const int32_t *ids, int n);

#endif
