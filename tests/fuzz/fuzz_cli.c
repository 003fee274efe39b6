/* tests/fuzz: the command line's option parser (tools/cli.c) from argv
 * vectors: the input is NUL-separated arguments. Whatever it accepts must
 * be in the range the option table states (numbers finite, ints and
 * thread counts in bounds); whatever it refuses is exit code 2; --help is
 * 1. The ids parser and the number parsers get every argument too. */
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "dsinfer.h"
#include "tools/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int devnull = -1;
  if (devnull < 0 && (devnull = open("/dev/null", O_WRONLY)) < 0) abort();
  /* argv: the input split at NULs (a copy, NUL-terminated) */
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  char *argv[MAX_ARGS];
  int argc = 0;
  for (char *p = buf; argc < MAX_ARGS && p <= buf + size; p += strlen(p) + 1) argv[argc++] = p;

  const char *model = NULL, *prompt = NULL;
  int n = -1, ctx = 0, flag = 0, chunk = 0;
  float rate = 0;
  uint64_t seed = 0;
  dsi_strlist toks = {0};
  run_opts ro = {0};
  dsi_sampling sp = SAMPLING_UNSET;
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "a folder"},
    {"--prompt", "-p", OPT_STR, &prompt, "text, may be empty"},
    {"-n", "--n-predict", OPT_INT, &n, "default range"},
    {"--ctx", NULL, OPT_INT, &ctx, "a token count", 0, DSI_CLI_MAX_TOKENS},
    {"--chunk", NULL, OPT_INT, &chunk, "a range above 0", 1, 4096},
    {"--rate", NULL, OPT_FLOAT, &rate, "default range"},
    {"--seed2", NULL, OPT_U64, &seed, "u64"},
    {"--flag", NULL, OPT_FLAG, &flag, "a flag"},
    {"--tokens", NULL, OPT_LIST, &toks, "repeated"},
    SAMPLING_OPTS(sp),
    RUN_OPTS(ro),
    {0}};
  /* --help prints the table on stdout: not the fuzzer's output (usage
   * errors, one line each, stay on stderr beside any sanitizer report) */
  fflush(stdout);
  int saved = dup(1);
  dup2(devnull, 1);
  int rc = dsi_cli_parse("fuzz", "[options]", opts, argc, argv);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  DSI_ASSERT(rc == 0 || rc == 1 || rc == 2);
  if (rc == 0) {
    DSI_ASSERT(n == -1 || n >= 0);
    DSI_ASSERT(ctx >= 0 && ctx <= DSI_CLI_MAX_TOKENS && (chunk == 0 || (chunk >= 1 && chunk <= 4096)));
    DSI_ASSERT(isfinite(rate) && rate >= 0);
    DSI_ASSERT(sp.temperature == -1 || (sp.temperature >= 0 && sp.temperature <= 100));
    DSI_ASSERT(sp.top_p == -1 || (sp.top_p >= 0 && sp.top_p <= 1));
    DSI_ASSERT(sp.top_k == -1 || (sp.top_k >= 0 && sp.top_k <= DSI_CLI_MAX_TOKENS));
    DSI_ASSERT(ro.threads >= 0 && ro.threads <= dsi_cli_max_threads() && ro.streams >= 0 && ro.streams <= 2);
    DSI_ASSERT(!model || *model); /* a folder is never "" */
    DSI_ASSERT(toks.n >= 0 && toks.n <= argc);
  }
  free(toks.v);
  /* every argument through the ids parser and the number parsers */
  for (int i = 0; i < argc; i++) {
    int32_t *ids = NULL;
    int k = dsi_cli_parse_ids("fuzz", "--ids", argv[i], &ids);
    DSI_ASSERT(k == -1 || k >= 1);
    for (int j = 0; j < k; j++) DSI_ASSERT(ids[j] >= 0);
    free(ids);
    long long x;
    if (dsi_cli_int("fuzz", "--x", argv[i], -5, 5, &x) == 0) DSI_ASSERT(x >= -5 && x <= 5);
    double d;
    if (dsi_cli_float("fuzz", "--x", argv[i], 0, 1, &d) == 0) DSI_ASSERT(d >= 0 && d <= 1);
  }
  free(buf);
  return 0;
}
