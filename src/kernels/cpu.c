/* kernels: CPU feature detection (cpuid, xgetbv) and the AMX tile-data
 * permission request, once; and the kernel tables, one per ISA level. */
#define _GNU_SOURCE
#include "kernels/cpu.h"
#include "base/base.h"
#include "kernels/vec.h"
#include "kernels/gemm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
static uint64_t xgetbv0(void) {
  uint32_t a, d;
  __asm__ volatile("xgetbv" : "=a"(a), "=d"(d) : "c"(0));
  return ((uint64_t)d << 32) | a;
}
#endif

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static dsi_cpu g_cpu; /* written once, by detect; read-only after */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void detect(void) {
  dsi_cpu *c = &g_cpu;
  memset(c, 0, sizeof *c);
#if defined(__x86_64__)
  unsigned a, b, cx, d;
  if (!__get_cpuid(0, &a, &b, &cx, &d)) goto done;
  c->intel = b == 0x756e6547 && d == 0x49656e69 && cx == 0x6c65746e; /* "Genu" "ineI" "ntel" */
  if (!__get_cpuid(1, &a, &b, &cx, &d)) goto done;
  int osxsave = (cx >> 27) & 1;
  c->fma = (cx >> 12) & 1;
  c->f16c = (cx >> 29) & 1;
  uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  int os_avx = (xcr0 & 6) == 6, os_avx512 = (xcr0 & 0xe6) == 0xe6, os_amx = (xcr0 & 0x60000) == 0x60000;
  if (__get_cpuid_max(0, NULL) >= 7) {
    __cpuid_count(7, 0, a, b, cx, d);
    c->avx2 = os_avx && ((b >> 5) & 1) && c->fma && c->f16c;
    c->avx512f = os_avx512 && ((b >> 16) & 1);
    c->avx512bw = c->avx512f && ((b >> 30) & 1);
    c->avx512vl = c->avx512f && ((b >> 31) & 1);
    c->avx512vbmi = c->avx512f && ((cx >> 1) & 1);
    c->avx512vnni = c->avx512f && ((cx >> 11) & 1);
    int amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1, amx_int8 = (d >> 25) & 1;
    __cpuid_count(7, 1, a, b, cx, d);
    c->avx512bf16 = c->avx512f && ((a >> 5) & 1);
    if (os_amx && amx_tile) {
      /* Linux hands out tile data only on request */
      if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0) {
        c->amx_tile = 1;
        c->amx_bf16 = amx_bf16;
        c->amx_int8 = amx_int8;
      }
    }
  }
done:
#endif
  /* measured (bench kernels' peaks, 2 cores): Zen 4 vdpbf16ps 452 GFLOP/s
   * against f32 FMA 218; an Emerald Rapids Xeon 170 against 348 */
  c->dpbf16_fast = c->avx512bf16 && !c->intel;
  c->best = DSI_ISA_SCALAR;
  if (c->avx2) c->best = DSI_ISA_AVX2;
  if (c->best == DSI_ISA_AVX2 && c->avx512f && c->avx512bw && c->avx512vl) c->best = DSI_ISA_AVX512;
  if (c->best == DSI_ISA_AVX512 && c->avx512bf16 && c->avx512vbmi) c->best = DSI_ISA_AVX512BF16;
  /* the AMX kernels also use AVX512-BF16 and VBMI, which every AMX CPU has */
  if (c->best == DSI_ISA_AVX512BF16 && c->amx_tile && c->amx_bf16) c->best = DSI_ISA_AMX;
}

const dsi_cpu *dsi_cpu_get(void) {
  pthread_once(&g_once, detect);
  return &g_cpu;
}

static const char *k_isa_names[] = {"scalar", "avx2", "avx512", "avx512bf16", "amx"};
const char *dsi_isa_str(dsi_isa isa) { return (unsigned)isa <= DSI_ISA_AMX ? k_isa_names[isa] : "?"; }
int dsi_isa_parse(const char *s) {
  for (int i = 0; i <= DSI_ISA_AMX; i++)
    if (!strcmp(s, k_isa_names[i])) return i;
  return -1;
}

/* ---- kernel tables ---- */
/* per level, and per bf16_dot choice (DSI_KERN_DOT_*: this CPU's, on, off) */
static dsi_kern g_kern[DSI_ISA_AMX + 1][3];
static pthread_once_t g_kern_once = PTHREAD_ONCE_INIT;

static char g_amx_i4_why[160];

#if DSI_HAVE_AMX
/* Whether the INT4 matmul's tall passes run on AMX INT8 tiles: as
 * DSINFER_AMX_INT4 says (on, off), or by default as a race on this core
 * decides (dsi_gemm_i4_race: the AMX kernel where it gives the VNNI
 * kernel's bits and is faster by the margin; either way the results are
 * the same) */
static int amx_int4_choice(const dsi_cpu *c) {
  if (!(c->best >= DSI_ISA_AMX && c->amx_int8 && c->avx512vnni)) return 0;
  const char *e = getenv("DSINFER_AMX_INT4");
  if (e && (!strcmp(e, "on") || !strcmp(e, "off"))) {
    snprintf(g_amx_i4_why, sizeof g_amx_i4_why, "AMX INT4 %s (DSINFER_AMX_INT4)", e);
    return !strcmp(e, "on");
  }
  if (e && *e && strcmp(e, "auto"))
    dsi_log(DSI_LOG_WARN, "DSINFER_AMX_INT4=%s: not on, off or auto; auto (a race at start)", e);
  double sp = 0;
  const int r = dsi_gemm_i4_race(&dsi_vec_ops_avx512, dsi_gemm_avx512_vnni_i4, dsi_gemm_amx_int4, &sp);
  if (r < 0) dsi_log(DSI_LOG_WARN, "the AMX INT4 matmul's results differ from the VNNI kernel's on this CPU: not used");
  snprintf(g_amx_i4_why, sizeof g_amx_i4_why, "AMX INT4 %s (%.2fx the VNNI kernel at 64 rows, raced at start%s)", r > 0 ? "on" : "off",
           sp, r < 0 ? ", other results" : "");
  return r > 0;
}
#endif

const char *dsi_amx_int4_choice(void) {
  dsi_kern_best();
  return g_amx_i4_why;
}

static void make_tables(void) {
  const dsi_cpu *c = dsi_cpu_get();
#if DSI_HAVE_AMX
  const int amx_i4 = amx_int4_choice(c);
#endif
  for (int l = DSI_ISA_SCALAR; l <= DSI_ISA_AMX; l++)
    for (int dot = 0; dot < 3; dot++) {
      dsi_kern *k = &g_kern[l][dot];
      k->level = (dsi_isa)l < c->best ? (dsi_isa)l : c->best;
      k->vec = &dsi_vec_ops_generic;
#if defined(__x86_64__)
      if (k->level >= DSI_ISA_AVX512) k->vec = &dsi_vec_ops_avx512;
      else if (k->level >= DSI_ISA_AVX2) k->vec = &dsi_vec_ops_avx2;
#endif
#if DSI_HAVE_AVX512
      /* not beside AMX, nor where vdpbf16ps is slow (Intel's cores: one
       * every one or two cycles against two FMAs): there the f32 route
       * multiplies the same bf16-rounded activations faster
       * (docs/perf-notes.md) */
      k->dot_bf16 = k->level == DSI_ISA_AVX512BF16 &&
                    (dot == DSI_KERN_DOT_ON || (dot == DSI_KERN_DOT_AUTO && c->dpbf16_fast));
      /* every CPU with AVX512-BF16 has VNNI; capped to avx512, the INT4
       * matmul takes the vpmaddubsw route (tests run both here) */
      k->vnni = k->level >= DSI_ISA_AVX512BF16 && c->avx512vnni;
#endif
#if DSI_HAVE_AMX
      k->amx = k->level >= DSI_ISA_AMX;
      k->amx_int8 = k->amx && c->amx_int8;
      k->amx_int4 = k->amx_int8 && amx_i4;
#endif
    }
}

const dsi_kern *dsi_kern_get_dot(dsi_isa cap, int bf16_dot) {
  pthread_once(&g_kern_once, make_tables);
  return &g_kern[(unsigned)cap <= DSI_ISA_AMX ? cap : DSI_ISA_AMX][(unsigned)bf16_dot <= DSI_KERN_DOT_OFF ? bf16_dot : 0];
}

const dsi_kern *dsi_kern_get(dsi_isa cap) { return dsi_kern_get_dot(cap, DSI_KERN_DOT_AUTO); }

const dsi_kern *dsi_kern_best(void) { return dsi_kern_get(DSI_ISA_AMX); }
