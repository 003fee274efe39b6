/* kernels: the AMX BF16 matmul (the gemm.h contract) for TILES weights in
 * BF16 or FP8 — prefill and large batches. Owns the cache blocking and FP8
 * -> BF16 tile widening (the tile configuration and the fused epilogues
 * are in amx_util.h, shared with the INT8 kernel, and the BF16 tile loop,
 * shared with the prefill attention's kernels). Each call configures the
 * tiles and releases them when done, so no tile state outlives a call and
 * pool threads need no set-up of their own. */
#ifdef DSI_AMX_EMU /* the tests' build with emulated tiles (amx_tiles.h): its own name */
#define dsi_gemm_amx dsi_gemm_amx_emu
#endif
#include "kernels/gemm.h"
#include "kernels/cpu.h"
#include "base/base.h"
#include "kernels/x86/amx_util.h"
#include "kernels/x86/fp8_lut.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* Tiles (amx_util.h): C f32 16x16, A bf16 16x32 from xb (tile order: each
 * A tile 1 KiB contiguous, gemm.h), B bf16 VNNI 16x32 from one panel. */
/* Blocking, sized for a Sapphire Rapids core (L1 48 KiB, L2 2 MiB); see
 * the driver's comment and docs/perf-notes.md for the sizes compared */
#define KC_STEPS 8  /* K chunk: a pair's B chunk (16 KiB) and an M block's A (16 KiB) share L1 */
#define KC_STEPS_1 32 /* K chunk when the rows are one 32-row M block */
#define MC_ROWS 512 /* M chunk: B reuse against the L2 footprint */
#define MAX_GROUP 8 /* panel pairs sharing one pass over an A chunk */

/* ---- FP8 -> BF16 B tiles (the tables: fp8_lut.h) ---- */
/* The tables of a pair's two panels and the scales they map, kept across
 * calls of widen_panels: a table is built only when its panel's scale
 * changes (a scale block is 4 K steps, and the driver widens a chunk in
 * shares of a step or less, one per M block), and the second panel takes
 * the first's when their scales are equal (two panels of one weight in one
 * 128-row block; not a gate / up pair). */
typedef struct {
  fp8_lut t[2];
  float s[2];
} fp8_luts;

static void fp8_luts_init(fp8_luts *c) { c->s[0] = c->s[1] = NAN; }

/* K steps [step0, step0 + ks) of panels q, q + nn - 1 (FP8, 512 bytes a
 * step) to bf16 (1 KiB a step), bf16(fp8 * scale) with each step's scale:
 * panel j's steps at dst + (j * stride + s) * 512. The tables in use are
 * locals, so the compiler keeps them in registers past the stores (which
 * may alias *luts). */
static void widen_panels(const dsi_mat *w, int q, int nn, int step0, int ks, size_t panel_bytes, int spb, uint16_t *dst,
                         int stride, fp8_luts *luts) {
  const uint8_t *src = (const uint8_t *)w->data + (size_t)q * panel_bytes;
  const float *sc = w->scale + (size_t)q * w->scale_cols;
  fp8_lut t[2];
  for (int s = 0; s < ks; s++) {
    const int st = step0 + s;
    if (s == 0 || st % spb == 0)
      for (int j = 0; j < nn; j++) {
        const float v = sc[(size_t)j * w->scale_cols + st / spb];
        if (luts->s[j] != v) {
          luts->t[j] = j == 1 && luts->s[0] == v ? luts->t[0] : fp8_lut_make(v);
          luts->s[j] = v;
        }
        t[j] = luts->t[j];
      }
    for (int j = 0; j < nn; j++) {
      const uint8_t *in = src + (size_t)j * panel_bytes + (size_t)st * 512;
      uint16_t *out = dst + (size_t)(j * stride + s) * 512;
      for (int l = 0; l < 8; l++) fp8_lut_64(&t[j], in + l * 64, out + l * 64);
    }
  }
}

/* ---- the driver ---- */

/* One work item: a pair of panels (nn of them) over one K chunk. */
typedef struct {
  int q, k0, ks, nn;
} item;

/* Steps [s0, s1) of an item's K chunk, of each of its panels, widened into
 * dst: the chunk of panel j at dst + j * ks steps */
static void widen_item(const dsi_mat *w, item c, size_t panel_bytes, int spb, int s0, int s1, uint16_t *dst,
                       fp8_luts *luts) {
  widen_panels(w, c.q, c.nn, c.k0 + s0, s1 - s0, panel_bytes, spb, dst + (size_t)s0 * 512, c.ks, luts);
}

/* FP8 weights and one 32-row M block of activations (the grouped experts'
 * few tokens, the decode batches AMX takes): each B tile meets one or two
 * A tiles, so the widening, not the tile products, is the work. A pair's
 * C tiles stay in their registers for the whole of K (no C blocks through
 * memory between K chunks), and its FP8 is widened FEW_STEPS K steps at a
 * time into one of two 8 KiB buffers that stay in L1, the next chunk (or
 * the next pair's first) after this one's products are issued. Bitwise the
 * driver below (the same products in the same order). No software
 * prefetch: the FP8 bytes are two sequential panel streams, which the
 * hardware prefetchers follow. The widening and the tile products hardly
 * overlap, so the loop's time is the two added; docs/perf-notes.md has
 * the chunk sizes and the panel-at-a-time loop it was compared with. */
#define FEW_STEPS 4

/* chunk c (FEW_STEPS K steps) of pair q's panels (one or two) into dst, panel j's at dst + j * FEW_STEPS steps */
static void widen_few(const dsi_mat *w, int q, int nn, int c, int ksteps, size_t panel_bytes, int spb, uint16_t *dst,
                      fp8_luts *luts) {
  const int s0 = c * FEW_STEPS;
  widen_panels(w, q, nn, s0, DSI_MIN(FEW_STEPS, ksteps - s0), panel_bytes, spb, dst, FEW_STEPS, luts);
}

static void gemm_fp8_few_rows(const dsi_gemm *g, int p0, int p1, int ksteps, size_t lda, size_t panel_bytes, int spb,
                              fp8_luts *luts, void *scratch) {
  const dsi_mat *w = g->w;
  const int nm = g->m > 16 ? 2 : 1, nchunks = DSI_CEIL_DIV(ksteps, FEW_STEPS);
  float *cst = scratch;
  uint16_t *buf[2] = {(uint16_t *)((uint8_t *)scratch + 4096),
                      (uint16_t *)((uint8_t *)scratch + 4096 + 2 * FEW_STEPS * TILE_BYTES)};
  int nb = 0;
  widen_few(w, p0, DSI_MIN(2, p1 - p0), 0, ksteps, panel_bytes, spb, buf[0], luts);
  for (int q = p0; q < p1; q += 2) {
    const int nn = DSI_MIN(2, p1 - q);
    tiles_begin(NULL, nm, nn);
    for (int c = 0; c < nchunks; c++, nb ^= 1) {
      const int s0 = c * FEW_STEPS;
      const uint8_t *b0 = (const uint8_t *)buf[nb];
      tiles_mac_any((const uint8_t *)g->xb + (size_t)s0 * TILE_BYTES, lda, b0, b0 + FEW_STEPS * TILE_BYTES,
                    DSI_MIN(FEW_STEPS, ksteps - s0), nm, nn, &k_no_prefetch);
      if (c + 1 < nchunks) widen_few(w, q, nn, c + 1, ksteps, panel_bytes, spb, buf[nb ^ 1], luts);
      else if (q + 2 < p1) widen_few(w, q + 2, DSI_MIN(2, p1 - q - 2), 0, ksteps, panel_bytes, spb, buf[nb ^ 1], luts);
    }
    if (g->epi == DSI_EPI_STORE && g->m == 32 && nn == 2 && (q + 2) * DSI_TILE_N <= w->rows) {
      tiles_end(g->y + (size_t)q * DSI_TILE_N, (size_t)g->ldy, nm, nn);
    } else {
      tiles_end(cst, 32, nm, nn);
      epilogue(g, cst, NULL, 0, g->m, q, nn);
    }
  }
}

/* Loops: M chunk > group of panel pairs > K chunk > pair > 32-row M block.
 * A pair's chunk of B stays in L1 while every M block of the M chunk
 * passes over it; the A chunk (mc rows x kc steps) stays in L2 while the
 * group's pairs pass over it, so A is read from beyond L2 once per group
 * and B once per M chunk. Neither is waited for: while its tiles multiply,
 * each M block prefetches into L2 a share of the next pair's B chunk and
 * a share of the next A chunk (for FP8 B, it widens a share of the next
 * chunk into the other of two buffers instead): tile loads from beyond L2
 * have few misses in flight and would stall every pass. The
 * group's C blocks wait in scratch between K chunks (a tile store and load
 * per block and chunk). K is always cut into chunks: a whole panel pair of
 * V3's shortest K (1536) is 96 KiB, past L1. The activations come in tile
 * order (gemm.h), prepared so by whoever rounds them to bf16, so an A tile
 * is 1 KiB of contiguous lines: with rows kpad * 2 bytes apart (14 KiB for
 * V3's hidden size) a tile's 16 lines would fall into two L1 sets. With
 * 8-step K chunks and 512-row M chunks a pair's B chunk and an M block's
 * A chunk fit L1 together (the sizes compared: docs/perf-notes.md). */
void dsi_gemm_amx(const dsi_gemm *g, int r0, int r1, void *scratch) {
  const dsi_mat *w = g->w;
  DSI_ASSERT(w->layout == DSI_LAYOUT_TILES && g->xb);
  DSI_ASSERT(w->dtype == DSI_DTYPE_BF16 || w->dtype == DSI_DTYPE_F8_E4M3);
#ifndef DSI_AMX_EMU
  DSI_ASSERT(dsi_cpu_get()->amx_bf16);
#endif
  if (r1 > w->rows) r1 = w->rows;
  if (r1 <= r0 || g->m <= 0) return;
  const int fp8 = w->dtype == DSI_DTYPE_F8_E4M3;
  /* K steps cover the columns in use: a view may use fewer columns than
   * the layout's kpad (attention's V^T over a shorter context) */
  const int kpad = w->kpad, ksteps = DSI_CEIL_DIV(w->cols, DSI_TILE_K), m = g->m;
  const int p0 = r0 / DSI_TILE_N, p1 = DSI_CEIL_DIV(r1, DSI_TILE_N);
  const size_t lda = (size_t)(kpad / DSI_TILE_K) * TILE_BYTES, es = fp8 ? 1 : 2; /* A: 16-row blocks */
  const size_t panel_bytes = (size_t)DSI_TILE_N * kpad * es;
  const uint8_t *xb = (const uint8_t *)g->xb;
  int spb = 0; /* K steps per FP8 scale block */
  if (fp8) {
    DSI_ASSERT(w->block % DSI_TILE_K == 0);
    spb = w->block / DSI_TILE_K;
  }
  if (g->epi == DSI_EPI_SILU_PAIRS) DSI_ASSERT(p0 % 2 == 0 && (p1 - p0) % 2 == 0);

  /* equal K chunks of about KC_STEPS; KC_STEPS_1 when the rows are one
   * 32-row M block (BF16 grouped experts' few tokens; FP8 ones take
   * gemm_fp8_few_rows below): no B chunk is reused across M blocks, so it
   * need not stay in L1, and longer chunks spill C less often (grouped
   * experts 1.1-1.15x) */
  const int kcx = m <= 32 ? KC_STEPS_1 : KC_STEPS;
  const int nk = DSI_CEIL_DIV(ksteps, kcx), kc = DSI_CEIL_DIV(ksteps, nk);
  /* scratch: C staging, FP8 B (two buffers), C between K chunks */
  const size_t budget = DSI_GEMM_SCRATCH(w->cols);
  uint8_t *sp = scratch;
  float *cst = (float *)sp;
  sp += 4096;
  uint16_t *bw[2] = {NULL, NULL};
  if (fp8) {
    bw[0] = (uint16_t *)sp;
    bw[1] = (uint16_t *)(sp + (size_t)2 * kc * TILE_BYTES);
    sp += (size_t)4 * kc * TILE_BYTES;
  }
  size_t used = (size_t)(sp - (uint8_t *)scratch);
  DSI_ASSERT(used <= budget);
  int mc = DSI_MIN(DSI_CEIL_DIV(m, 32) * 32, MC_ROWS), grp = MAX_GROUP;
  float *acc = NULL;
  if (nk > 1) {
    size_t room = (budget - used) / 4096; /* C blocks of 4 KiB */
    while ((size_t)grp * (mc / 32) > room && grp > 1) grp /= 2;
    while ((size_t)grp * (mc / 32) > room) mc -= 32;
    DSI_ASSERT(mc >= 32);
    acc = (float *)sp;
  }

  const int direct = g->epi == DSI_EPI_STORE;
  fp8_luts luts;
  fp8_luts_init(&luts);
  tiles_configure();
  if (fp8 && m <= 32) {
    gemm_fp8_few_rows(g, p0, p1, ksteps, lda, panel_bytes, spb, &luts, scratch);
    tile_release();
    return;
  }
  for (int i0 = 0; i0 < m; i0 += mc) {
    const int mcn = DSI_MIN(mc, m - i0), nmb = DSI_CEIL_DIV(mcn, 32);
    for (int q0 = p0; q0 < p1; q0 += 2 * grp) {
      const int q1 = DSI_MIN(p1, q0 + 2 * grp), npairs = DSI_CEIL_DIV(q1 - q0, 2), nitems = nk * npairs;
      /* item it: K chunk it / npairs, pair it % npairs */
#define ITEM(it)                                                                                  \
  ((item){q0 + 2 * ((it) % npairs), (it) / npairs * kc, DSI_MIN(kc, ksteps - (it) / npairs * kc), \
          DSI_MIN(2, q1 - (q0 + 2 * ((it) % npairs)))})
      if (fp8) /* the group's first chunk: nothing to overlap with */
        widen_item(w, ITEM(0), panel_bytes, spb, 0, ITEM(0).ks, bw[0], &luts);
      for (int it = 0; it < nitems; it++) {
        const item c = ITEM(it);
        const int first = c.k0 == 0, last = c.k0 + c.ks >= ksteps, kci = it / npairs, j = it % npairs;
        const uint8_t *b0, *b1;
        if (fp8) {
          b0 = (const uint8_t *)bw[it & 1];
          b1 = b0 + (size_t)c.ks * TILE_BYTES;
        } else {
          b0 = (const uint8_t *)w->data + (size_t)c.q * panel_bytes + (size_t)c.k0 * TILE_BYTES;
          b1 = b0 + panel_bytes;
        }
        /* the next item, whose B this item's blocks prefetch or widen */
        const int has_next = it + 1 < nitems;
        const item n = has_next ? ITEM(it + 1) : c;
        /* the next A chunk (rows [ia, ia + na), steps [ka, ka + aks)): the
         * next K chunk, else the next group's first, else the next M chunk's */
        int ia = i0, na = mcn, ka = 0, aks = DSI_MIN(kc, ksteps);
        if (kci + 1 < nk) {
          ka = (kci + 1) * kc;
          aks = DSI_MIN(kc, ksteps - ka);
        } else if (q1 >= p1) {
          ia = i0 + mc;
          na = DSI_MAX(0, DSI_MIN(mc, m - ia));
        }
        const int la = (int)DSI_XB_ROWS(na) * aks, nu = npairs * nmb;
        float *qacc = acc ? acc + (size_t)j * nmb * 1024 : NULL;
        for (int mb = 0; mb < nmb; mb++) {
          const int ib = i0 + mb * 32, nrows = DSI_MIN(32, m - ib), nm = nrows > 16 ? 2 : 1;
          const uint8_t *a = xb + (size_t)(ib / 16) * lda + (size_t)c.k0 * TILE_BYTES;
          float *bacc = qacc ? qacc + (size_t)mb * 1024 : NULL;
          /* this block's shares: B steps [s0, s1) of each panel, A lines [l0, l1) */
          const int s0 = has_next ? n.ks * mb / nmb : 0, s1 = has_next ? n.ks * (mb + 1) / nmb : 0;
          const int u = j * nmb + mb;
          tile_prefetch pf = {.b0 = (const uint8_t *)cst, .b1 = (const uint8_t *)cst, .a = xb, .lda = lda, .aks = 1};
          if (!fp8 && s1 > s0) {
            pf.b0 = (const uint8_t *)w->data + (size_t)n.q * panel_bytes + (size_t)(n.k0 + s0) * TILE_BYTES;
            pf.b1 = n.nn == 2 ? pf.b0 + panel_bytes : pf.b0;
            pf.nb = DSI_CEIL_DIV((s1 - s0) * 16, c.ks);
          } else if (fp8 && it + 2 < nitems) {
            /* FP8: the next item is widened, not prefetched; this block
             * prefetches its share of the FP8 bytes of the one after, which
             * its widening will read (a chunk's 4 KiB runs, a panel
             * apart, start no hardware stream) */
            const item f = ITEM(it + 2);
            const int t0 = f.ks * mb / nmb, t1 = f.ks * (mb + 1) / nmb;
            if (t1 > t0) {
              pf.b0 = (const uint8_t *)w->data + (size_t)f.q * panel_bytes + (size_t)(f.k0 + t0) * 512;
              pf.b1 = f.nn == 2 ? pf.b0 + panel_bytes : pf.b0;
              pf.nb = DSI_CEIL_DIV((t1 - t0) * 8, c.ks);
            }
          }
          if (la > 0) {
            pf.a = xb + (size_t)(ia / 16) * lda + (size_t)ka * TILE_BYTES;
            pf.aks = aks;
            pf.l0 = (int)((long)la * u / nu);
            pf.l1 = (int)((long)la * (u + 1) / nu);
            pf.na = DSI_CEIL_DIV(pf.l1 - pf.l0, c.ks);
          }
          if (!last) {
            block_mac(a, lda, b0, b1, c.ks, nm, c.nn, &pf, first ? NULL : bacc, bacc, 32);
          } else if (direct && nrows == 32 && c.nn == 2 && (c.q + 2) * DSI_TILE_N <= w->rows) {
            /* a whole block of a plain store: tiles straight into y */
            float *y = g->y + (size_t)ib * g->ldy + (size_t)c.q * DSI_TILE_N;
            block_mac(a, lda, b0, b1, c.ks, nm, c.nn, &pf, first ? NULL : bacc, y, (size_t)g->ldy);
          } else {
            block_mac(a, lda, b0, b1, c.ks, nm, c.nn, &pf, first ? NULL : bacc, cst, 32);
            epilogue(g, cst, NULL, ib, nrows, c.q, c.nn);
          }
          if (fp8 && s1 > s0) widen_item(w, n, panel_bytes, spb, s0, s1, bw[(it + 1) & 1], &luts);
        }
      }
#undef ITEM
    }
  }
  tile_release();
}
