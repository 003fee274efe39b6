/* tests: reusing a sequence's cached prefix, as a chat's next turn does —
 * dsi_seq_truncate cuts the KV cache back (inside a block, at a block's
 * end, to nothing), the logits of what is fed after the kept prefix equal
 * a fresh sequence's, and the freed blocks go back to the pool. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"

enum { BLOCK = 4, N_BLOCKS = 8, MAX_T = 24 };

static dsi_engine *open_engine(dsi_model *m) {
  dsi_engine *e;
  dsi_err err = {0};
  dsi_engine_opts o = {.n_threads = 2, .kv_block_size = BLOCK, .kv_blocks = N_BLOCKS, .max_context = 32,
                       .act_precision = DSI_ACT_F32};
  DSI_ASSERT(dsi_engine_open(&e, m, &o, &err) == 0);
  return e;
}

/* feed toks[0..n) to seq; logits of every token into lg (may be NULL) */
static int feed(dsi_engine *e, int seq, const int32_t *toks, int n, float *lg) {
  int32_t seqv[MAX_T];
  for (int i = 0; i < n; i++) seqv[i] = seq;
  dsi_batch b = {.n_tokens = n, .tokens = toks, .seq = seqv};
  return dsi_engine_forward(e, &b, lg);
}

/* max |a - b| / max |b| over rows */
static double rel_diff(const float *a, const float *b, size_t n) {
  double d = 0, mx = 0;
  for (size_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)a[i] - b[i]));
    mx = fmax(mx, fabs((double)b[i]));
  }
  return d / (mx > 0 ? mx : 1);
}

/* A sequence holding first[0..n_first), cut back to keep tokens and then
 * fed second[keep..n_second), gives the logits a fresh sequence gives for
 * second[0..n_second) at those positions; with the same head, exactly. */
static void check_reuse(dsi_model *m, int V, const int32_t *first, int n_first, const int32_t *second, int n_second,
                        int keep) {
  dsi_engine *e = open_engine(m);
  float *lg_reused = malloc((size_t)MAX_T * V * sizeof(float));
  float *lg_fresh = malloc((size_t)MAX_T * V * sizeof(float));
  int a = dsi_seq_new(e);
  CHECK(feed(e, a, first, n_first, NULL) == 0);
  CHECK(dsi_seq_truncate(e, a, keep) == 0);
  CHECK(dsi_seq_len(e, a) == keep);
  CHECK(feed(e, a, second + keep, n_second - keep, lg_reused) == 0);
  CHECK(dsi_seq_len(e, a) == n_second);
  dsi_seq_free(e, a);

  int b = dsi_seq_new(e);
  CHECK(feed(e, b, second, n_second, lg_fresh) == 0);
  double d = rel_diff(lg_reused, lg_fresh + (size_t)keep * V, (size_t)(n_second - keep) * V);
  CHECKF(d <= 1e-5, "keep %d of %d: logits differ from a fresh run by %.3g", keep, n_first, d);
  free(lg_reused);
  free(lg_fresh);
  dsi_engine_free(e);
}

int main(void) {
  dsi_model *m;
  dsi_err err = {0};
  if (dsi_model_open(&m, "golden/tiny-f32/model", NULL, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  int V = info.vocab_size;
  int32_t first[MAX_T], second[MAX_T];
  dsi_rng r;
  dsi_rng_seed(&r, 11);
  for (int i = 0; i < MAX_T; i++) first[i] = (int32_t)(dsi_rng_u64(&r) % (uint64_t)V);
  /* the next turn: the first 7 tokens shared, then other ones */
  memcpy(second, first, sizeof second);
  for (int i = 7; i < MAX_T; i++) second[i] = (int32_t)(dsi_rng_u64(&r) % (uint64_t)V);

  check_reuse(m, V, first, 18, second, 15, 7); /* cut inside a block */
  check_reuse(m, V, first, 18, second, 15, 4); /* at a block's end */
  check_reuse(m, V, first, 18, second, 15, 0); /* to nothing */
  check_reuse(m, V, first, 9, first, 12, 9);   /* nothing cut: the whole cache extended */
  check_reuse(m, V, first, 9, first, 9, 8);    /* the last token fed again for its logits */

  /* blocks go back to the pool: 8 blocks of 4; a holds 20 tokens (5 blocks) */
  dsi_engine *e = open_engine(m);
  int a = dsi_seq_new(e), b = dsi_seq_new(e);
  CHECK(feed(e, a, first, 20, NULL) == 0);
  CHECK(feed(e, b, second, 16, NULL) == DSI_E_CAPACITY); /* 4 more blocks: only 3 free */
  CHECK(dsi_seq_len(e, b) == 0);
  CHECK(dsi_seq_truncate(e, a, 5) == 0); /* keeps 2 blocks: 6 free */
  CHECK(feed(e, b, second, 16, NULL) == 0);
  CHECK(feed(e, a, first + 5, 3, NULL) == 0); /* a's second block still has room */
  CHECK(dsi_seq_len(e, a) == 8);
  /* errors */
  CHECK(dsi_seq_truncate(e, a, 9) == DSI_E_INVAL && strstr(dsi_engine_error(e)->msg, "cannot cut"));
  CHECK(dsi_seq_truncate(e, a, -1) == DSI_E_INVAL);
  CHECK(dsi_seq_truncate(e, 99, 0) == DSI_E_INVAL && strstr(dsi_engine_error(e)->msg, "does not exist"));
  dsi_seq_free(e, a);
  CHECK(dsi_seq_truncate(e, a, 0) == DSI_E_INVAL);
  dsi_engine_free(e);
  dsi_model_free(m);
  return check_done();
}
