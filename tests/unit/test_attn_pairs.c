/* tests: the pair-layout attention (kernels/attn.h). The scalar oracle and
 * the AMX version each against attention computed in double precision
 * from the same bf16 q and cache (a true softmax, no blocks), for head
 * counts around the 8- and 16-head tiles and groups, context lengths
 * around the 32-position chunks and the 128-position online-softmax
 * blocks, a paged cache with blocks out of order, and the V3 widths as
 * well as narrower ones; the output's row-stride gaps untouched; and each
 * head's bits the same alone as in any group, because a token's attention
 * must not depend on how its heads were grouped (that follows the batch
 * and the thread count). The latents packer from pair rows against the
 * same from f32 rows. Last, the KV layer's pair rows: zero when a block is
 * handed out, and past the length after a truncation, while what is kept
 * stays; and the pool's own writes logged for the other ranks. */
#include "kernels/attn.h"
#include "kernels/gemm.h"
#include "kv/kv.h"
#include "kernels/cpu.h"
#include "base/base.h"
#include "tensor/dtype.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef DSI_TEST_AMX_EMU
dsi_attn_pairs_fn dsi_attn_pairs_amx_emu; /* unit/amx_attn_emu.c */
#endif

#define BS 64
#define N_BLOCKS 12

typedef struct {
  dsi_attn_pairs a;
  uint16_t *cache;
  int32_t table[N_BLOCKS];
  float *q, *o, *o1;
  int ldq, ldo;
  void *ws;
} fixture;

static void setup(fixture *f, int nh, int n, int kvl, int rope, double spread, dsi_rng *rng) {
  memset(f, 0, sizeof *f);
  int row = kvl + rope;
  f->cache = dsi_alloc_aligned((size_t)N_BLOCKS * BS * row * sizeof(uint16_t));
  for (size_t i = 0; i < (size_t)N_BLOCKS * BS * row; i++) f->cache[i] = dsi_f32_to_bf16((float)dsi_rng_normal(rng));
  for (int b = 0; b < N_BLOCKS; b++) f->table[b] = (b * 5 + 3) % N_BLOCKS; /* out of order */
  f->a = (dsi_attn_pairs){.cache = f->cache, .table = f->table, .block_size = BS, .row = row, .kvl = kvl, .nh = nh, .n = n};
  f->ldq = row + 3;
  f->ldo = kvl + 5;
  f->q = dsi_xmalloc((size_t)nh * f->ldq * sizeof(float));
  for (size_t i = 0; i < (size_t)nh * f->ldq; i++) f->q[i] = (float)(dsi_rng_normal(rng) * spread);
  f->o = dsi_xmalloc((size_t)nh * f->ldo * sizeof(float));
  f->o1 = dsi_xmalloc((size_t)nh * f->ldo * sizeof(float));
  for (size_t i = 0; i < (size_t)nh * f->ldo; i++) f->o[i] = f->o1[i] = (float)i; /* the gaps must stay */
  f->ws = dsi_alloc_aligned(DSI_ATTN_PAIRS_WS(nh, row));
}

static void teardown(fixture *f) {
  dsi_free_aligned(f->cache), dsi_free_aligned(f->ws);
  free(f->q), free(f->o), free(f->o1);
}

static double kv(const fixture *f, int u, int j) {
  int32_t slot = f->table[u / BS] * BS + u % BS;
  return dsi_bf16_to_f32(f->cache[dsi_paged_pair_at(f->a.row, slot) + 2 * (size_t)j]);
}

/* worst error of o against double-precision attention, relative to the
 * largest |V| the head's weights average (P is rounded to bf16, so ~2^-9
 * of it and a little more from the scores' f32 sums) */
static double error(const fixture *f, float scale) {
  int n = f->a.n;
  double worst = 0, *s = dsi_xmalloc((size_t)n * sizeof(double));
  for (int h = 0; h < f->a.nh; h++) {
    double mx = -1e300, sum = 0;
    for (int u = 0; u < n; u++) {
      double d = 0;
      for (int j = 0; j < f->a.row; j++)
        d += (double)dsi_bf16_to_f32(dsi_f32_to_bf16(f->q[(size_t)h * f->ldq + j])) * kv(f, u, j);
      s[u] = d * scale;
      mx = fmax(mx, s[u]);
    }
    for (int u = 0; u < n; u++) sum += (s[u] = exp(s[u] - mx));
    for (int c = 0; c < f->a.kvl; c++) {
      double want = 0, vmax = 0;
      for (int u = 0; u < n; u++) want += s[u] / sum * kv(f, u, c), vmax = fmax(vmax, fabs(kv(f, u, c)));
      worst = fmax(worst, fabs(f->o[(size_t)h * f->ldo + c] - want) / vmax);
    }
  }
  free(s);
  return worst;
}

static void run(const char *name, dsi_attn_pairs_fn *fn, int nh, int n, int kvl, int rope, double spread,
                dsi_rng *rng) {
  fixture f;
  setup(&f, nh, n, kvl, rope, spread, rng);
  float scale = 0.0723f;
  fn(&f.a, f.q, f.ldq, scale, f.o, f.ldo, f.ws);
  double e = error(&f, scale);
  CHECKF(e < 4e-3, "%s heads %d n %d width %d spread %g: error %.3g of the largest value", name, nh, n, f.a.row,
         spread, e);
  int gaps = 1;
  for (int h = 0; h < nh; h++)
    for (int c = kvl; c < f.ldo; c++) gaps &= f.o[(size_t)h * f.ldo + c] == (float)((size_t)h * f.ldo + c);
  CHECKF(gaps, "%s heads %d n %d wrote past its %d columns", name, nh, n, kvl);
  /* each head alone gives the same bits */
  dsi_attn_pairs one = f.a;
  one.nh = 1;
  for (int h = 0; h < nh; h++) fn(&one, f.q + (size_t)h * f.ldq, f.ldq, scale, f.o1 + (size_t)h * f.ldo, f.ldo, f.ws);
  CHECKF(!memcmp(f.o, f.o1, (size_t)nh * f.ldo * sizeof(float)),
         "%s heads %d n %d width %d: a head alone differs from the same head in its group", name, nh, n, f.a.row);
  teardown(&f);
}

static int pair_rows_zero(const dsi_kv *kv, int32_t b, int s0, int s1) {
  int z = 1;
  for (int l = 0; l < kv->n_layers; l++)
    for (int s = s0; s < s1; s++)
      for (int j = 0; j < kv->row; j++) z &= kv->pair[l][dsi_paged_pair_at(kv->row, b * kv->block_size + s) + 2 * (size_t)j] == 0;
  return z;
}

static void kv_pairs(void) {
  dsi_kv kv;
  dsi_err err = {0};
  CHECK(dsi_kv_init(&kv, 2, 48, 32, 3, 1, 1, &err) == DSI_OK);
  for (int l = 0; l < 2; l++) memset(kv.pair[l], 0x3f, (size_t)3 * 32 * 48 * sizeof(uint16_t)); /* stale: 0.75 */
  dsi_kv_seq s = {0};
  CHECK(dsi_kv_reserve(&kv, &s, 40, &err) == DSI_OK && s.n_blocks == 2);
  CHECK(pair_rows_zero(&kv, s.blocks[0], 0, 32) && pair_rows_zero(&kv, s.blocks[1], 0, 32));
  for (int l = 0; l < 2; l++) memset(kv.pair[l], 0x3f, (size_t)3 * 32 * 48 * sizeof(uint16_t)); /* written */
  s.len = 40;
  dsi_kv_truncate(&kv, &s, 37); /* odd: slot 36 stays, its pair partner 37 goes */
  CHECK(s.n_blocks == 2 && pair_rows_zero(&kv, s.blocks[1], 5, 32) && !pair_rows_zero(&kv, s.blocks[1], 4, 5));
  CHECK(!pair_rows_zero(&kv, s.blocks[0], 31, 32));
  dsi_kv_release(&kv, &s, NULL);
  dsi_kv_free(&kv);
}

/* Between ranks: what rank 0's block pool does to the cache (a matched
 * prefix's partial block copied, blocks zeroed) is logged, and another
 * rank's cache, written by the same steps, ends up the same after applying
 * the log; a sequence of another group (DP attention) matches nothing; a
 * malformed record is refused. */
static void kv_mem_log(int pairs) {
  dsi_kv a, b;
  dsi_err err = {0};
  const int L = 2, row = 48, bs = 32, nb = 6;
  CHECK(dsi_kv_init(&a, L, row, bs, nb, pairs, 0, &err) == DSI_OK && dsi_kv_init(&b, L, row, bs, nb, pairs, 0, &err) == DSI_OK);
  a.log_mem = 1;
  size_t words = (size_t)nb * bs * row * (pairs ? 1 : 2); /* 16-bit words of a layer */
  int32_t toks[80];
  for (int i = 0; i < 80; i++) toks[i] = 100 + i;
  /* a sequence of 50 tokens, written alike on both ranks (as the steps would) */
  dsi_kv_seq s = {0};
  CHECK(dsi_kv_reserve(&a, &s, 50, &err) == DSI_OK);
  CHECK(dsi_kv_apply_mem_log(&b, a.mem_log, a.n_mem_log, &err) == DSI_OK);
  a.n_mem_log = 0;
  for (int l = 0; l < L; l++) {
    uint16_t *pa = pairs ? a.pair[l] : (uint16_t *)a.layer[l], *pb = pairs ? b.pair[l] : (uint16_t *)b.layer[l];
    for (int k = 0; k < 50; k++) {
      int slot = dsi_kv_slot(&a, &s, k);
      for (int j = 0; j < row; j++) {
        size_t at = pairs ? ((size_t)(slot / 2) * 2 * row + 2 * j + (slot & 1)) : ((size_t)slot * row + j) * 2;
        pa[at] = pb[at] = (uint16_t)(0x3f00 + k + j);
      }
    }
  }
  s.len = 50;
  dsi_kv_release(&a, &s, toks); /* block 0 whole, block 1's 18 tokens registered */
  /* the same first 45 tokens: block 0 shared, 13 tokens of block 1 copied */
  dsi_kv_seq t = {0};
  CHECK(dsi_kv_match(&a, &t, toks, 45) == 45);
  CHECKF(a.n_mem_log >= 1, "the copy was not logged (%d records)", a.n_mem_log);
  CHECK(dsi_kv_apply_mem_log(&b, a.mem_log, a.n_mem_log, &err) == DSI_OK);
  for (int l = 0; l < L; l++) {
    const void *pa = pairs ? (void *)a.pair[l] : (void *)a.layer[l], *pb = pairs ? (void *)b.pair[l] : (void *)b.layer[l];
    CHECKF(memcmp(pa, pb, words * 2) == 0, "layer %d differs between the ranks after the log (pairs %d)", l, pairs);
  }
  /* another group's sequence finds nothing */
  dsi_kv_seq u = {.group = 1};
  CHECK(dsi_kv_match(&a, &u, toks, 45) == 0);
  dsi_kv_release(&a, &u, NULL);
  dsi_kv_release(&a, &t, NULL);
  int32_t bad[4] = {DSI_KV_COPY, 0, nb, 3};
  CHECK(dsi_kv_apply_mem_log(&b, bad, 1, &err) == DSI_E_FORMAT && strstr(err.msg, "not valid"));
  dsi_kv_free(&a);
  dsi_kv_free(&b);
}

/* the latents packer (gemm.h) from pair rows — words moved as they are —
 * against the same values as f32 rows, element by element: the same bytes,
 * for odd and even context lengths, filled by three threads' shares */
static void pack_case(int ctx, int kvl, int rope, dsi_rng *rng) {
  int row = kvl + rope;
  uint16_t *pairs = dsi_alloc_aligned((size_t)N_BLOCKS * BS * row * sizeof(uint16_t));
  float *rows = dsi_alloc_aligned((size_t)N_BLOCKS * BS * row * sizeof(float));
  int32_t table[N_BLOCKS], *slots = dsi_xmalloc((size_t)ctx * sizeof(int32_t));
  for (int b = 0; b < N_BLOCKS; b++) table[b] = (b * 7 + 2) % N_BLOCKS;
  for (int s = 0; s < N_BLOCKS * BS; s++)
    for (int j = 0; j < row; j++) {
      uint16_t v = dsi_f32_to_bf16((float)dsi_rng_normal(rng));
      pairs[dsi_paged_pair_at(row, s) + 2 * (size_t)j] = v;
      rows[(size_t)s * row + j] = dsi_bf16_to_f32(v);
    }
  for (int u = 0; u < ctx; u++) slots[u] = table[u / BS] * BS + u % BS;
  for (int tr = 0; tr <= 1; tr++) {
    int cols = tr ? kvl : row;
    dsi_mat shape = {.dtype = DSI_DTYPE_BF16, .rows = tr ? cols : ctx, .cols = tr ? ctx : cols};
    size_t bytes = dsi_pack_bytes(&shape);
    uint8_t *a = dsi_alloc_aligned(bytes), *b = dsi_alloc_aligned(bytes);
    memset(a, 0xee, bytes), memset(b, 0x11, bytes);
    dsi_mat ma, mb;
    for (int t = 0; t < 3; t++) {
      dsi_pack_latents(DSI_DTYPE_BF16, NULL, pairs, row, slots, ctx, cols, tr, &ma, a, t, 3);
      dsi_pack_latents(DSI_DTYPE_BF16, rows, NULL, row, slots, ctx, cols, tr, &mb, b, t, 3);
    }
    CHECKF(ma.kpad == mb.kpad && !memcmp(a, b, bytes), "pack from pairs, context %d, %s differs", ctx,
           tr ? "V^T" : "K");
    dsi_free_aligned(a), dsi_free_aligned(b);
  }
  dsi_free_aligned(pairs), dsi_free_aligned(rows);
  free(slots);
}

int main(void) {
  kv_pairs();
  kv_mem_log(0);
  kv_mem_log(1);
  dsi_rng rng;
  dsi_rng_seed(&rng, 7);
  static const int ns[] = {1, 2, 31, 33, 127, 128, 129, 300, 700};
  for (size_t i = 0; i < DSI_ARRAY_LEN(ns); i++) pack_case(ns[i], 64, 32, &rng);
  pack_case(300, 512, 64, &rng);
  static const int heads[] = {1, 3, 8, 9, 16, 17, 40};
  int cases = 0;
  for (size_t i = 0; i < DSI_ARRAY_LEN(ns); i += 2) run("oracle", dsi_attn_pairs_ref, 3, ns[i], 64, 32, 1, &rng);
  run("oracle", dsi_attn_pairs_ref, 17, 300, 512, 64, 1, &rng);
  const char *name = "amx";
  dsi_attn_pairs_fn *fn = dsi_attn_pairs_amx;
  if (!dsi_kern_best()->amx) {
#ifdef DSI_TEST_AMX_EMU
    /* without AMX, the AMX version with its tiles emulated (its softmax
     * and conversions need AVX512-BF16) */
    name = "amx (tiles emulated)";
    fn = dsi_attn_pairs_amx_emu;
    if (dsi_kern_best()->level < DSI_ISA_AVX512BF16)
#endif
    {
      printf("AMX not available here: the oracle alone was checked\n");
      return check_done();
    }
  }
  for (size_t h = 0; h < DSI_ARRAY_LEN(heads); h++)
    for (size_t i = 0; i < DSI_ARRAY_LEN(ns); i++, cases++) run(name, fn, heads[h], ns[i], 512, 64, 1, &rng);
  static const int widths[][2] = {{64, 32}, {256, 32}, {16, 16}, {48, 16}};
  for (size_t w = 0; w < DSI_ARRAY_LEN(widths); w++)
    for (size_t i = 0; i < DSI_ARRAY_LEN(ns); i += 2, cases++) run(name, fn, 5, ns[i], widths[w][0], widths[w][1], 1, &rng);
  /* peaked scores: the running max moves between blocks */
  for (size_t i = 4; i < DSI_ARRAY_LEN(ns); i++, cases++) run(name, fn, 16, ns[i], 512, 64, 4, &rng);
  printf("%s: %d pair-attention cases within 4e-3 of double-precision attention, each head the same alone\n", name, cases);
  return check_done();
}
