/* kernels: what this CPU (and its OS) can run, decided once at start. The
 * environment variable DSINFER_ISA=scalar|avx2|avx512|amx caps the level
 * (for tests and comparisons); it can never raise it. */
#ifndef DSI_CPU_H
#define DSI_CPU_H

typedef enum { DSI_ISA_SCALAR, DSI_ISA_AVX2, DSI_ISA_AVX512, DSI_ISA_AMX } dsi_isa;

typedef struct dsi_cpu {
  int avx2, fma, f16c;
  int avx512f, avx512bw, avx512vl, avx512bf16, avx512vbmi;
  int amx_tile, amx_bf16, amx_int8; /* and the OS granted tile data */
  dsi_isa best;    /* what the hardware and OS support */
  dsi_isa level;   /* what runs: best, capped by DSINFER_ISA or dsi_cpu_cap */
} dsi_cpu;

const dsi_cpu *dsi_cpu_get(void);
/* cap the level at run time (bench comparisons, tests); returns the level in force */
dsi_isa dsi_cpu_cap(dsi_isa cap);
const char *dsi_isa_str(dsi_isa isa);
/* parse "scalar" | "avx2" | "avx512" | "amx"; -1 if unknown */
int dsi_isa_parse(const char *s);

#endif
