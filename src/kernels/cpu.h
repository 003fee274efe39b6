/* kernels: what this CPU (and its OS) can run, detected once at start and
 * read-only after; and the kernel table an engine runs with — its level,
 * the best the CPU has or lower when capped (tests and comparisons run the
 * lower paths on one machine; a cap never raises the level). */
#ifndef DSI_CPU_H
#define DSI_CPU_H

/* levels in order; AVX512BF16 is AVX-512 with AVX512-BF16 and VBMI (the
 * bf16 dot-product matmul), which every AMX CPU also has */
typedef enum { DSI_ISA_SCALAR, DSI_ISA_AVX2, DSI_ISA_AVX512, DSI_ISA_AVX512BF16, DSI_ISA_AMX } dsi_isa;
#define DSI_ISA_NAMES "scalar, avx2, avx512, avx512bf16, amx"

typedef struct dsi_cpu {
  int avx2, fma, f16c;
  int avx512f, avx512bw, avx512vl, avx512bf16, avx512vbmi, avx512vnni;
  int amx_tile, amx_bf16, amx_int8; /* and the OS granted tile data */
  int intel;                        /* GenuineIntel */
  int dpbf16_fast; /* vdpbf16ps multiply-adds faster than the FMAs do: AMD's Zen 4 and
                      Zen 5, not Intel's cores (one every one or two cycles against two
                      FMAs: as fast, or half) */
  dsi_isa best;    /* what the hardware and OS support */
} dsi_cpu;

const dsi_cpu *dsi_cpu_get(void);
const char *dsi_isa_str(dsi_isa isa);
/* parse one of DSI_ISA_NAMES; -1 if unknown */
int dsi_isa_parse(const char *s);

/* The kernels one engine (or benchmark, or test) runs: chosen once, passed
 * down to every op. Tables are static, one per level. */
struct dsi_vec_ops;
typedef struct dsi_kern {
  dsi_isa level;                 /* the CPU's best, capped */
  const struct dsi_vec_ops *vec; /* the vector primitives of that level */
  int dot_bf16;                  /* the AVX512-BF16 matmul runs (bf16 activations; the
                                    AVX512BF16 level where vdpbf16ps is fast, dpbf16_fast,
                                    or as told, dsi_kern_get_dot; elsewhere the f32 route
                                    multiplies the same bf16-rounded activations) */
  int amx;                       /* the AMX BF16 tile kernels run (matmul, attention) */
  int amx_int8;                  /* and the AMX INT8 matmul */
  int amx_int4;                  /* and the INT4 matmul's tall passes on AMX INT8 tiles
                                    (the VNNI kernel's bits): where a race at start
                                    finds them faster, or DSINFER_AMX_INT4=on|off says */
  int vnni;                      /* AVX512-VNNI (vpdpbusd) at the AVX512BF16 level and
                                    above: the INT4 matmul uses it */
} dsi_kern;
/* the table for this CPU at min(cap, its best level) */
const dsi_kern *dsi_kern_get(dsi_isa cap);
/* the same with the AVX512-BF16 matmul as bf16_dot says: this CPU's
 * default, on, off (the values of dsinfer.h's DSI_BF16_DOT_*) */
enum { DSI_KERN_DOT_AUTO = 0, DSI_KERN_DOT_ON = 1, DSI_KERN_DOT_OFF = 2 };
const dsi_kern *dsi_kern_get_dot(dsi_isa cap, int bf16_dot);
/* the best this CPU runs: dsi_kern_get(DSI_ISA_AMX) */
const dsi_kern *dsi_kern_best(void);
/* how amx_int4 was chosen, for the logs ("" without AMX INT8) */
const char *dsi_amx_int4_choice(void);

#endif
