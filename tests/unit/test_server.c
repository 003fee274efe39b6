/* tests: the server's reasoning and tool calls through the official OpenAI
 * client, and the chat page showing the reasoning (headless Chromium). A model's output is text the server parses: here every
 * completion is a fixed script (dsi_sched_testing_script) of reasoning and
 * a DeepSeek tool call, served in-process on a free port, and
 * tests/server/tools.mjs checks what the client sees — reasoning_content
 * apart from the answer, tool_calls with JSON arguments, the streamed
 * deltas adding up to the whole answer, a tool result sent back; then
 * tool_choice required and a named function, the script a call without
 * the opening the server forces. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"
#include "engine/engine_testing.h"
#include "server/server.h"
#include "test_isa.h"
#include "tokenizer/template.h"
#include "tools/internal.h"
#include "test_tiny.h"

#define SCRIPT                                                                                                    \
  "<think>The user wants the weather; I should call the tool.</think>"                                            \
  "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>" \
  "function<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>get_weather\n```json\n{\"city\": \"Paris\", \"unit\": \"celsius\"}\n```" \
  "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"

#define CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (system("command -v node >/dev/null 2>&1")) {
    printf("skipped: node is not installed (scripts/deps.sh installs it)\n");
    return 0;
  }
  if ((access("server/node_modules/openai", F_OK) || access("server/node_modules/@anthropic-ai/sdk", F_OK)) &&
      system("cd server && (npm ci --no-audit --no-fund || npm install --no-audit --no-fund) >/dev/null 2>&1")) {
    CHECKF(0, "npm install in tests/server failed");
    return check_done();
  }
  char dir[] = "/tmp/test_server_XXXXXX";
  dsi_model *m;
  dsi_tok *tok;
  dsi_chat_fmt *fmt;
  tiny_checkpoint(dir, &m, &tok);
  dsi_err err = {0};
  /* DeepSeek-V3's template (which leaves the tools' definitions to the
   * system prompt) with the tools written first, through a template file
   * as `serve --chat-template` reads one */
  char tpath[300];
  snprintf(tpath, sizeof tpath, "%s/template.jinja", dir);
  FILE *tf = fopen(tpath, "w");
  DSI_ASSERT(tf);
  fprintf(tf, "{%%- if tools is defined and tools %%}TOOLS: {{ tools | tojson }}\n{%%- endif %%}%s", dsi_tmpl_deepseek_v3());
  fclose(tf);
  DSI_ASSERT(dsi_chat_fmt_open_file(&fmt, dir, tpath, &err) == 0);
  dsi_engine *e;
  dsi_engine_opts eo = {.n_threads = 2, .max_context = 512, .isa = test_isa()};
  DSI_ASSERT(dsi_engine_open(&e, m, &eo, &err) == 0);
  dsi_sched *s;
  DSI_ASSERT(dsi_sched_open(&s, e, tok, &(dsi_sched_opts){0}, &err) == 0);
  int32_t *ids;
  size_t n;
  DSI_ASSERT(dsi_tok_encode(tok, SCRIPT, strlen(SCRIPT), 0, &ids, &n, &err) == 0);
  DSI_ASSERT(dsi_sched_testing_script(s, ids, (int)n) == 0);
  free(ids);
  dsi_server *srv;
  dsi_server_opts so = {.port = 0, .model_name = "tiny", .ctx = 512, .api_key = "k", .quiet = 1};
  DSI_ASSERT(dsi_server_open(&srv, s, tok, fmt, &so, &err) == 0);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "node server/tools.mjs http://127.0.0.1:%d k", dsi_server_port(srv));
  int rc = system(cmd);
  CHECKF(rc == 0, "tests/server/tools.mjs failed (its lines above)");
  /* the chat page shows the reasoning apart */
  snprintf(cmd, sizeof cmd, "node server/page.mjs http://127.0.0.1:%d k reasoning", dsi_server_port(srv));
  rc = system(cmd);
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77 && !getenv("CI")) printf("page: skipped, no chromium\n");
  else CHECKF(rc == 0, "tests/server/page.mjs failed (its lines above)");
  /* tool_choice required, then naming get_weather: the script is the call
   * without the opening the server forces (without the name too). The
   * arguments are held to the function's parameters and end the completion
   * as their object closes, the server reading the call's end after them:
   * the script stops there. */
  static const char *const forced[2][2] = {
    {"required", "get_weather\n```json\n{\"city\": \"Paris\", \"unit\": \"celsius\"}"},
    {"named", "{\"city\": \"Paris\", \"unit\": \"celsius\"}"},
  };
  for (int k = 0; k < 2; k++) {
    DSI_ASSERT(dsi_tok_encode(tok, forced[k][1], strlen(forced[k][1]), 0, &ids, &n, &err) == 0);
    DSI_ASSERT(dsi_sched_testing_script(s, ids, (int)n) == 0);
    free(ids);
    snprintf(cmd, sizeof cmd, "node server/tools.mjs http://127.0.0.1:%d k %s", dsi_server_port(srv), forced[k][0]);
    rc = system(cmd);
    CHECKF(rc == 0, "tests/server/tools.mjs %s failed (its lines above)", forced[k][0]);
  }
  dsi_server_drain(srv, 5);
  dsi_server_free(srv);
  dsi_sched_free(s);
  dsi_engine_free(e);
  dsi_chat_fmt_free(fmt);
  dsi_tok_free(tok);
  dsi_model_free(m);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {}
  return check_done();
}
