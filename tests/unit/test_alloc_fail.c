/* tests: running out of memory is a reported error, never a crash. The
 * allocator (malloc, calloc, realloc, posix_memalign and anonymous mmap)
 * is wrapped at link time (tests/CMakeLists.txt); for N = 1, 2, ... a
 * child process makes the Nth call fail and does a small run — load the
 * tiny checkpoint, open an engine, prefill a prompt, decode two tokens,
 * sample them, free everything. Each child must end cleanly: either every
 * step worked (the failed call was one whose failure is handled by doing
 * without, such as a worker thread fewer) or a step returned an error
 * whose message is not empty. An abort, an assertion or a fault fails
 * the test. It stops at the first N past the run's last allocation.
 * FAIL_AT=N runs the one case in this process, saying how far each phase
 * got: for a debugger's backtrace of the call that did not cope. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"
#include "tools/internal.h"

static long g_calls, g_fail_at; /* this process's count; the call to fail (0: none) */

static int fail_now(void) { return ++g_calls == g_fail_at; }

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off);
void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return fail_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { return fail_now() ? ENOMEM : __real_posix_memalign(p, a, n); }
void *__wrap_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off) {
  if ((flags & MAP_ANONYMOUS) && fail_now()) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  return __real_mmap(a, n, prot, flags, fd, off);
}

/* The small run; 0 when it all worked, 1 after an error with a message
 * (printed), with everything freed either way. */
static int small_run(const char *dir) {
  dsi_err err = {0};
  dsi_model *m = NULL;
  dsi_engine *e = NULL;
  dsi_sampler *smp = NULL;
  float *logits = NULL;
  int rc = 1;
  dsi_load_opts lo = {.n_threads = 2};
  if (dsi_model_open(&m, dir, &lo, &err)) goto out;
  if (getenv("FAIL_AT")) fprintf(stdout, "after model_open %ld\n", g_calls);
  dsi_engine_opts eo = {.n_threads = 2, .max_context = 64, .max_tokens = 16, .kv_blocks = 4};
  if (dsi_engine_open(&e, m, &eo, &err)) goto out;
  if (getenv("FAIL_AT")) fprintf(stdout, "after engine_open %ld\n", g_calls);
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  logits = malloc((size_t)info.vocab_size * sizeof(float));
  dsi_sampling sp = {.temperature = 0.8f, .top_p = 0.9f, .top_k = 20, .seed = 1};
  smp = dsi_sampler_new(&sp, info.vocab_size);
  if (!logits || !smp) {
    snprintf(err.msg, sizeof err.msg, "out of memory for the logits or the sampler");
    goto out;
  }
  int seq = dsi_seq_new(e);
  if (seq < 0) {
    snprintf(err.msg, sizeof err.msg, "no sequence: %.900s", dsi_engine_error(e)->msg);
    goto out;
  }
  int32_t prompt[3] = {3, 1, 4}, seqv[3] = {seq, seq, seq};
  uint8_t want[3] = {0, 0, 1}; /* the last position's logits only */
  dsi_batch b = {.n_tokens = 3, .tokens = prompt, .seq = seqv, .want_logits = want};
  if (dsi_engine_forward(e, &b, logits)) {
    err = *dsi_engine_error(e);
    goto out;
  }
  if (getenv("FAIL_AT")) fprintf(stdout, "after prefill %ld\n", g_calls);
  for (int i = 0; i < 2; i++) {
    int32_t tok = dsi_sampler_sample(smp, logits, 0, NULL, 0, 0);
    dsi_batch d = {.n_tokens = 1, .tokens = &tok, .seq = &seq};
    if (dsi_engine_forward(e, &d, logits)) {
      err = *dsi_engine_error(e);
      goto out;
    }
  }
  rc = 0;
out:
  if (rc) fprintf(stderr, "%s\n", err.msg[0] ? err.msg : "(an error without a message)");
  if (rc && !err.msg[0]) rc = 3;
  dsi_sampler_free(smp);
  free(logits);
  dsi_engine_free(e);
  dsi_model_free(m);
  return rc;
}

int main(void) {
  char dir[] = "/tmp/test_alloc_fail_XXXXXX";
  DSI_ASSERT(mkdtemp(dir));
  dsi_err err = {0};
  dsi_mkmodel_opts mo = {.preset = "tiny", .dtype = "bf16", .seed = 3, .out_dir = dir, .tokenizer = "builtin"};
  DSI_ASSERT(dsi_mkmodel(&mo, &err) == 0);
  dsi_set_log_level(-1); /* the children's warnings are not the test's output */

  long n = 1, errors = 0;
  if (getenv("FAIL_AT")) { /* FAIL_AT=N: the Nth fails in this process (under a debugger), no child */
    g_calls = 0;
    g_fail_at = atol(getenv("FAIL_AT"));
    int rc = small_run(dir);
    printf("rc %d, %ld calls\n", rc, g_calls);
    return 0;
  }
  for (;; n++) {
    fflush(NULL);
    pid_t pid = fork();
    DSI_ASSERT(pid >= 0);
    if (pid == 0) {
      /* the messages go nowhere: that there is one is checked by the exit code */
      if (!freopen("/dev/null", "w", stderr)) _exit(4);
      g_calls = 0;
      g_fail_at = n;
      int rc = small_run(dir);
      _exit(rc == 0 && g_calls < n ? 2 : rc); /* 2: the run ended before the Nth call */
    }
    int st;
    DSI_ASSERT(waitpid(pid, &st, 0) == pid);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 2) break;
    CHECKF(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 1),
           "allocation %ld failing: %s %d (an error without a message is 3)", n,
           WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    errors += WIFEXITED(st) && WEXITSTATUS(st) == 1;
  }
  printf("test_alloc_fail: each of %ld allocations failed in turn, %ld of them reported as errors\n", n - 1, errors);
  CHECK(n > 50); /* the run does allocate: the wrappers are in place */
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_done();
}
