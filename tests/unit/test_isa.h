/* tests: the kernel table a test runs — this CPU's best, capped by
 * $DSINFER_ISA as the `dsinfer` command maps it (ctest runs some tests
 * again at each lower level), so one machine checks the lower paths. */
#ifndef DSI_TEST_ISA_H
#define DSI_TEST_ISA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsinfer.h"
#include "kernels/cpu.h"

/* $DSINFER_BF16_DOT (on | off) as dsi_engine_opts.bf16_dot, as the
 * command maps it (0: this CPU's default) */
static inline int test_bf16_dot(void) {
  const char *d = getenv("DSINFER_BF16_DOT");
  return !d ? DSI_BF16_DOT_AUTO : !strcmp(d, "on") ? DSI_BF16_DOT_ON : !strcmp(d, "off") ? DSI_BF16_DOT_OFF : DSI_BF16_DOT_AUTO;
}

static inline const dsi_kern *test_kern(void) {
  const char *e = getenv("DSINFER_ISA");
  int l = e && *e ? dsi_isa_parse(e) : -1;
  return dsi_kern_get_dot(l >= 0 ? (dsi_isa)l : DSI_ISA_AMX, test_bf16_dot());
}

/* the exit status ctest counts as skipped (tests/CMakeLists.txt) */
#define TEST_SKIPPED 77

/* $DSINFER_ISA caps at or above this CPU's best level: the run would be
 * the uncapped one again (a cap never raises the level), so the capped
 * copies of a test skip it; and with $DSINFER_BF16_DOT (on | off) the
 * level (capped) is not AVX512BF16, the only one where it picks the
 * matmul, or this CPU does that anyway. Prints why. */
static inline int test_isa_redundant(void) {
  const dsi_cpu *c = dsi_cpu_get();
  const char *e = getenv("DSINFER_ISA"), *d = getenv("DSINFER_BF16_DOT");
  int l = e && *e ? dsi_isa_parse(e) : -1;
  if (d && *d) {
    const int on = !strcmp(d, "on"), lv = l >= 0 && l < (int)c->best ? l : (int)c->best;
    if (lv != DSI_ISA_AVX512BF16 || on == !c->intel) {
      printf("skipped: DSINFER_BF16_DOT=%s changes nothing here (level %s, %s)\n", d, dsi_isa_str((dsi_isa)lv),
             c->intel ? "Intel: off by default" : "on by default");
      return 1;
    }
    return 0;
  }
  if (l < 0 || l < (int)c->best) return 0;
  printf("skipped: DSINFER_ISA=%s is at or above this CPU's best level (%s): the uncapped run covers it\n", e,
         dsi_isa_str(c->best));
  return 1;
}

/* the same cap as a string for dsi_engine_opts.isa (NULL: none) */
static inline const char *test_isa(void) {
  const char *e = getenv("DSINFER_ISA");
  return e && *e && dsi_isa_parse(e) >= 0 ? e : NULL;
}

/* $DSINFER_MLA (absorb | naive) as dsi_engine_opts.mla_form (0: the cost model's) */
static inline int test_mla_form(void) {
  const char *e = getenv("DSINFER_MLA");
  return !e ? 0 : !strcmp(e, "absorb") ? 1 : !strcmp(e, "naive") ? 2 : 0;
}

#endif
