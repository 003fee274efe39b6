/* tests: the pair-layout attention (kernels/attn.h). The scalar oracle
 * against double-precision sums (it computes attention), then the AMX
 * version against the same sums — scores and P V — for every head count,
 * context lengths around the 32-position chunks and the 4-chunk groups, a
 * paged cache with blocks out of order, and the V3 widths as well as
 * narrower ones; and each head's bits the same alone as in any group,
 * because a token's attention must not depend on how its heads were
 * grouped (that follows the batch and the thread count). Last, the KV
 * layer's pair rows: zero when a block is handed out, and past the length
 * after a truncation, while what is kept stays. */
#include "kernels/attn.h"
#include "kv/kv.h"
#include "kernels/cpu.h"
#include "base/base.h"
#include "tensor/dtype.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BS 64
#define N_BLOCKS 12

typedef struct {
  dsi_attn_pairs a;
  uint16_t *cache;
  int32_t table[N_BLOCKS];
  float *q, *s_ref, *s_amx, *o_ref, *o_amx;
  uint16_t *p;
  int ldq, lds, ldo;
  void *ws;
} fixture;

static void setup(fixture *f, int nh, int n, int kvl, int rope, dsi_rng *rng) {
  memset(f, 0, sizeof *f);
  int row = kvl + rope;
  f->cache = dsi_alloc_aligned((size_t)N_BLOCKS * BS * row * sizeof(uint16_t));
  for (size_t i = 0; i < (size_t)N_BLOCKS * BS * row; i++) f->cache[i] = dsi_f32_to_bf16((float)dsi_rng_normal(rng));
  for (int b = 0; b < N_BLOCKS; b++) f->table[b] = (b * 5 + 3) % N_BLOCKS; /* out of order */
  f->a = (dsi_attn_pairs){.cache = f->cache, .table = f->table, .block_size = BS, .row = row, .kvl = kvl, .nh = nh, .n = n};
  f->ldq = row + 3;
  f->lds = (n + 31) / 32 * 32 + 8;
  f->ldo = kvl + 5;
  f->q = dsi_xmalloc((size_t)nh * f->ldq * sizeof(float));
  for (size_t i = 0; i < (size_t)nh * f->ldq; i++) f->q[i] = (float)dsi_rng_normal(rng);
  f->s_ref = dsi_xcalloc((size_t)nh * f->lds, sizeof(float));
  f->s_amx = dsi_xcalloc((size_t)nh * f->lds, sizeof(float));
  f->o_ref = dsi_xcalloc((size_t)nh * f->ldo, sizeof(float));
  f->o_amx = dsi_xcalloc((size_t)nh * f->ldo, sizeof(float));
  f->p = dsi_xcalloc((size_t)nh * f->lds, sizeof(uint16_t));
  for (int h = 0; h < nh; h++) /* probabilities-like weights, zero past n */
    for (int u = 0; u < n; u++) f->p[(size_t)h * f->lds + u] = dsi_f32_to_bf16((float)(dsi_rng_uniform(rng) / n));
  f->ws = dsi_alloc_aligned(DSI_ATTN_PAIRS_WS(row));
}

static void teardown(fixture *f) {
  dsi_free_aligned(f->cache), dsi_free_aligned(f->ws);
  free(f->q), free(f->s_ref), free(f->s_amx), free(f->o_ref), free(f->o_amx), free(f->p);
}

static float kv(const fixture *f, int u, int j) {
  int32_t slot = f->table[u / BS] * BS + u % BS;
  return dsi_bf16_to_f32(f->cache[dsi_kv_pair_at(f->a.row, slot) + 2 * (size_t)j]);
}

/* worst error of s and o against double sums, relative to the sum of the
 * terms' magnitudes (f32 accumulation over a few hundred terms stays well
 * under 1e-5 of it, in any order) */
static void errors(const fixture *f, const float *s, const float *o, float scale, double *ws, double *wo) {
  int nh = f->a.nh, n = f->a.n, kvl = f->a.kvl;
  *ws = *wo = 0;
  for (int h = 0; h < nh; h++) {
    for (int u = 0; u < n; u++) {
      double sum = 0, mag = 0;
      for (int j = 0; j < f->a.row; j++) {
        double t = (double)dsi_bf16_to_f32(dsi_f32_to_bf16(f->q[(size_t)h * f->ldq + j])) * kv(f, u, j);
        sum += t, mag += fabs(t);
      }
      *ws = fmax(*ws, fabs(s[(size_t)h * f->lds + u] - sum * scale) / (mag * scale));
    }
    for (int c = 0; c < kvl; c++) {
      double sum = 0, mag = 0;
      for (int u = 0; u < n; u++) {
        double t = (double)dsi_bf16_to_f32(f->p[(size_t)h * f->lds + u]) * kv(f, u, c);
        sum += t, mag += fabs(t);
      }
      *wo = fmax(*wo, fabs(o[(size_t)h * f->ldo + c] - sum) / (mag + 1e-30));
    }
  }
}

/* run one version on a fresh fixture (o's row-stride gaps preset to a
 * known pattern) and check it against double sums; the fixture stays */
static void run_checked(fixture *f, const char *name, dsi_attn_qk_fn *qk, dsi_attn_pv_fn *pv, int nh, int n, int kvl,
                        int rope, dsi_rng *rng) {
  setup(f, nh, n, kvl, rope, rng);
  float scale = 0.0723f;
  double es, eo;
  qk(&f->a, f->q, f->ldq, scale, f->s_amx, f->lds, f->ws);
  for (size_t i = 0; i < (size_t)nh * f->ldo; i++) f->o_amx[i] = f->o_ref[i] = (float)i;
  pv(&f->a, f->p, f->lds, f->o_amx, f->ldo);
  errors(f, f->s_amx, f->o_amx, scale, &es, &eo);
  CHECKF(es < 1e-5 && eo < 1e-5, "%s heads %d n %d width %d: relative error q K^T %.3g, P V %.3g", name, nh, n,
         f->a.row, es, eo);
}

/* the oracle computes attention */
static void oracle_case(int nh, int n, int kvl, int rope, dsi_rng *rng) {
  fixture f;
  run_checked(&f, "oracle", dsi_attn_pairs_qk_ref, dsi_attn_pairs_pv_ref, nh, n, kvl, rope, rng);
  teardown(&f);
}

/* AMX: as accurate as the oracle (the tile unit's internal summation order
 * is its own, so not bitwise), leaves the gaps of the output's row stride
 * alone, and gives every head the same bits alone as in its group */
static void amx_case(int nh, int n, int kvl, int rope, dsi_rng *rng) {
  fixture f;
  float scale = 0.0723f;
  run_checked(&f, "amx", dsi_attn_pairs_qk_amx, dsi_attn_pairs_pv_amx, nh, n, kvl, rope, rng);
  int gaps = 1;
  for (int h = 0; h < nh; h++)
    for (int c = kvl; c < f.ldo; c++) gaps &= f.o_amx[(size_t)h * f.ldo + c] == f.o_ref[(size_t)h * f.ldo + c];
  CHECKF(gaps, "amx P V heads %d n %d wrote past its %d columns", nh, n, kvl);
  /* each head alone, and the heads in reverse order */
  dsi_attn_pairs one = f.a;
  one.nh = 1;
  for (int h = 0; h < nh; h++) {
    dsi_attn_pairs_qk_amx(&one, f.q + (size_t)h * f.ldq, f.ldq, scale, f.s_ref + (size_t)h * f.lds, f.lds, f.ws);
    dsi_attn_pairs_pv_amx(&one, f.p + (size_t)h * f.lds, f.lds, f.o_ref + (size_t)h * f.ldo, f.ldo);
  }
  int same = 1;
  for (int h = 0; h < nh; h++) {
    same &= !memcmp(f.s_ref + (size_t)h * f.lds, f.s_amx + (size_t)h * f.lds, (size_t)n * sizeof(float));
    same &= !memcmp(f.o_ref + (size_t)h * f.ldo, f.o_amx + (size_t)h * f.ldo, (size_t)kvl * sizeof(float));
  }
  CHECKF(same, "amx heads %d n %d width %d: a head alone differs from the same head in its group", nh, n, f.a.row);
  teardown(&f);
}

static int pair_rows_zero(const dsi_kv *kv, int32_t b, int s0, int s1) {
  int z = 1;
  for (int l = 0; l < kv->n_layers; l++)
    for (int s = s0; s < s1; s++)
      for (int j = 0; j < kv->row; j++) z &= kv->pair[l][dsi_kv_pair_at(kv->row, b * kv->block_size + s) + 2 * (size_t)j] == 0;
  return z;
}

static void kv_pairs(void) {
  dsi_kv kv;
  dsi_err err = {0};
  CHECK(dsi_kv_init(&kv, 2, 48, 32, 3, 1, &err) == DSI_OK);
  for (int l = 0; l < 2; l++) memset(kv.pair[l], 0x3f, (size_t)3 * 32 * 48 * sizeof(uint16_t)); /* stale: 0.75 */
  dsi_kv_seq s = {0};
  CHECK(dsi_kv_reserve(&kv, &s, 40, &err) == DSI_OK && s.n_blocks == 2);
  CHECK(pair_rows_zero(&kv, s.blocks[0], 0, 32) && pair_rows_zero(&kv, s.blocks[1], 0, 32));
  for (int l = 0; l < 2; l++) memset(kv.pair[l], 0x3f, (size_t)3 * 32 * 48 * sizeof(uint16_t)); /* written */
  s.len = 40;
  dsi_kv_truncate(&kv, &s, 37); /* odd: slot 36 stays, its pair partner 37 goes */
  CHECK(s.n_blocks == 2 && pair_rows_zero(&kv, s.blocks[1], 5, 32) && !pair_rows_zero(&kv, s.blocks[1], 4, 5));
  CHECK(!pair_rows_zero(&kv, s.blocks[0], 31, 32));
  dsi_kv_release(&kv, &s);
  dsi_kv_free(&kv);
}

int main(void) {
  kv_pairs();
  dsi_rng rng;
  dsi_rng_seed(&rng, 7);
  static const int ns[] = {1, 2, 31, 32, 33, 127, 128, 129, 300, 700};
  for (size_t i = 0; i < DSI_ARRAY_LEN(ns); i += 3) oracle_case(3, ns[i], 64, 32, &rng);
  oracle_case(8, 200, 512, 64, &rng);
  if (!dsi_attn_pairs_amx_ok()) {
    printf("AMX not available here: the oracle alone was checked\n");
    return check_done();
  }
  int cases = 0;
  for (int nh = 1; nh <= DSI_ATTN_PAIR_HEADS; nh++)
    for (size_t i = 0; i < DSI_ARRAY_LEN(ns); i++, cases++) amx_case(nh, ns[i], 512, 64, &rng);
  static const int widths[][2] = {{64, 32}, {256, 32}, {16, 16}, {48, 16}};
  for (size_t w = 0; w < DSI_ARRAY_LEN(widths); w++)
    for (size_t i = 0; i < DSI_ARRAY_LEN(ns); i += 2, cases++) amx_case(5, ns[i], widths[w][0], widths[w][1], &rng);
  printf("amx: %d pair-attention cases within 1e-5 of double sums, each head the same alone\n", cases);
  return check_done();
}
