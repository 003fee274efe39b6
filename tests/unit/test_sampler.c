/* tests: the sampler (engine/sampler.c). With a fixed logit vector, the
 * frequencies of 20,000 draws under temperature, top_k, top_p, min_p and
 * their combination match the distribution those rules define (computed
 * here in double precision with a full sort), by a chi-square test at
 * p = 0.001 — and the same statistic rejects a wrong distribution; top_p
 * over a 2,000-token vocabulary, where the partial selection must widen
 * several times; the penalties, the bias, greedy ties and padding ids
 * exactly; logprobs against a double-precision log-softmax; the same
 * seed, the same draws. Prints the cost per token at V3's 129,280 ids. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "check.h"
#include "engine/sampler.h"

#define DRAWS 20000

/* chi-square's 0.999 quantile, df = 1 .. 20 */
static const double k_chi999[] = {10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59,
                                  31.26, 32.91, 34.53, 36.12, 37.70, 39.25, 40.79, 42.31, 43.82, 45.31};

/* the distribution the rules define: p ~ exp(l / T), top_k, top_p of what
 * is kept, min_p of the most likely; want[i] its probability */
static void expected(const float *l, int v, const dsi_sampling *sp, double *want) {
  int idx[64];
  double p[64], mx = -INFINITY;
  for (int i = 0; i < v; i++) mx = fmax(mx, l[i]);
  for (int i = 0; i < v; i++) p[i] = exp((l[i] - mx) / sp->temperature), idx[i] = i;
  for (int i = 1; i < v; i++) /* full sort: descending, ties by id */
    for (int j = i; j > 0 && (p[idx[j]] > p[idx[j - 1]] || (p[idx[j]] == p[idx[j - 1]] && idx[j] < idx[j - 1])); j--) {
      int t = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = t;
    }
  int n = v;
  if (sp->top_k > 0 && sp->top_k < n) n = sp->top_k;
  if (sp->top_p > 0 && sp->top_p < 1) {
    double mass = 0, c = 0;
    for (int i = 0; i < n; i++) mass += p[idx[i]];
    for (int i = 0; i < n; i++)
      if ((c += p[idx[i]]) >= sp->top_p * mass) {
        n = i + 1;
        break;
      }
  }
  int keep[64] = {0};
  for (int i = 0; i < n; i++) keep[idx[i]] = 1;
  if (sp->min_p > 0)
    for (int i = 0; i < v; i++)
      if (p[i] < sp->min_p * p[idx[0]]) keep[i] = 0;
  double z = 0;
  for (int i = 0; i < v; i++) z += keep[i] ? p[i] : 0;
  for (int i = 0; i < v; i++) want[i] = keep[i] ? p[i] / z : 0;
}

/* chi-square of counts against want; draws outside the support count as failures */
static double chi2(const long *cnt, const double *want, int v, long draws, int *df, long *outside) {
  double x = 0;
  *df = -1;
  *outside = 0;
  for (int i = 0; i < v; i++) {
    if (want[i] == 0) {
      *outside += cnt[i];
      continue;
    }
    double e = want[i] * draws;
    x += (cnt[i] - e) * (cnt[i] - e) / e;
    (*df)++;
  }
  return x;
}

static void draw(const float *l, int v, const dsi_sampling *sp, uint64_t seed, dsi_sample_ws *ws, long *cnt) {
  dsi_rng rng;
  dsi_rng_seed(&rng, seed);
  float *x = malloc((size_t)v * sizeof(float));
  memset(cnt, 0, (size_t)v * sizeof(long));
  for (int k = 0; k < DRAWS; k++) {
    memcpy(x, l, (size_t)v * sizeof(float));
    cnt[dsi_sample(sp, &rng, x, v, NULL, 0, 0, ws, NULL)]++;
  }
  free(x);
}

static void test_distributions(dsi_sample_ws *ws) {
  static const float l[12] = {2.0f, 1.5f, 1.2f, 1.0f, 0.7f, 0.5f, 0.2f, 0.0f, -0.3f, -0.6f, -1.0f, -2.0f};
  static const struct {
    const char *name;
    dsi_sampling sp;
  } cases[] = {
    {"temperature 0.7", {.temperature = 0.7f}},
    {"top_k 5", {.temperature = 1.0f, .top_k = 5}},
    {"top_p 0.8", {.temperature = 1.0f, .top_p = 0.8f}},
    {"min_p 0.15", {.temperature = 1.0f, .min_p = 0.15f}},
    {"T 1.3, top_k 8, top_p 0.9, min_p 0.05", {.temperature = 1.3f, .top_k = 8, .top_p = 0.9f, .min_p = 0.05f}},
  };
  long cnt[12];
  double want[12];
  for (size_t c = 0; c < DSI_ARRAY_LEN(cases); c++) {
    draw(l, 12, &cases[c].sp, 1234 + c, ws, cnt);
    expected(l, 12, &cases[c].sp, want);
    int df;
    long outside;
    double x = chi2(cnt, want, 12, DRAWS, &df, &outside);
    CHECKF(outside == 0 && df >= 1 && x < k_chi999[df - 1], "%s: chi-square %.2f (df %d, limit %.2f), %ld draws outside",
           cases[c].name, x, df, df >= 1 ? k_chi999[df - 1] : 0, outside);
    printf("%-40s chi-square %6.2f, df %2d (p = 0.001 limit %.2f)\n", cases[c].name, x, df, k_chi999[df - 1]);
  }
  /* the statistic is not a rubber stamp: top_p's draws against the untruncated distribution */
  draw(l, 12, &cases[2].sp, 99, ws, cnt);
  dsi_sampling plain = {.temperature = 1.0f};
  expected(l, 12, &plain, want);
  int df;
  long outside;
  double x = chi2(cnt, want, 12, DRAWS, &df, &outside);
  CHECKF(x > k_chi999[df - 1], "top_p's draws pass as the untruncated distribution (chi-square %.2f)", x);
}

/* top_p over 2,000 tokens whose 0.9 mass needs ~460 of them: the partial
 * selection widens 64, 128, 256, 512; draws binned by rank */
static void test_wide_top_p(dsi_sample_ws *ws) {
  enum { V = 2000, BINS = 10 };
  float *l = malloc(V * sizeof(float));
  for (int i = 0; i < V; i++) l[(i * 7919) % V] = -(float)i / 200; /* rank i at a scattered id */
  dsi_sampling sp = {.temperature = 1.0f, .top_p = 0.9f};
  long *cnt = malloc(V * sizeof(long));
  draw(l, V, &sp, 5, ws, cnt);
  /* the kept ranks: the fewest whose mass reaches 0.9 */
  double z = 0, c = 0;
  for (int i = 0; i < V; i++) z += exp(-(double)i / 200);
  int keep = 0;
  while ((c += exp(-(double)keep / 200)) < 0.9 * z) keep++;
  keep++;
  long bins[BINS] = {0}, outside = 0;
  double want[BINS] = {0};
  for (int i = 0; i < V; i++) {
    long n = cnt[(i * 7919) % V];
    if (i >= keep) outside += n;
    else bins[i * BINS / keep] += n;
  }
  for (int i = 0; i < keep; i++) want[i * BINS / keep] += exp(-(double)i / 200) / c;
  double x = 0;
  for (int b = 0; b < BINS; b++) x += (bins[b] - want[b] * DRAWS) * (bins[b] - want[b] * DRAWS) / (want[b] * DRAWS);
  CHECKF(outside == 0 && x < k_chi999[BINS - 2], "top_p over 2000 ids: %ld draws past rank %d, chi-square %.2f",
         outside, keep, x);
  printf("top_p 0.9 over 2000 ids: %d kept, chi-square %.2f over %d rank bins\n", keep, x, BINS);
  free(l);
  free(cnt);
}

static int32_t greedy(const float *l0, int v, const dsi_sampling *sp, const int32_t *hist, int n_hist, int n_prompt,
                      dsi_sample_ws *ws) {
  float l[8];
  memcpy(l, l0, (size_t)v * sizeof(float));
  dsi_rng rng;
  dsi_rng_seed(&rng, 1);
  return dsi_sample(sp, &rng, l, v, hist, n_hist, n_prompt, ws, NULL);
}

static void test_penalties(dsi_sample_ws *ws) {
  const float a[3] = {1.0f, 0.9f, 0.8f}, b[3] = {0.9f, 1.0f, 0.8f};
  const int32_t h0[1] = {0}, h11[2] = {1, 1}, h1[1] = {1};
  dsi_sampling sp = {0};
  CHECK(greedy(a, 3, &sp, NULL, 0, 0, ws) == 0);
  sp.repetition_penalty = 2.0f; /* 1.0 -> 0.5 */
  CHECK(greedy(a, 3, &sp, h0, 1, 1, ws) == 1);
  sp = (dsi_sampling){.frequency_penalty = 0.06f}; /* 1.0 - 2 x 0.06 = 0.88 < 0.9 */
  CHECK(greedy(b, 3, &sp, h11, 2, 0, ws) == 0);
  sp.frequency_penalty = 0.04f; /* 0.92 > 0.9 */
  CHECK(greedy(b, 3, &sp, h11, 2, 0, ws) == 1);
  CHECK(greedy(b, 3, &(dsi_sampling){.frequency_penalty = 1.0f}, h11, 2, 2, ws) == 1); /* the prompt's do not count */
  CHECK(greedy(b, 3, &(dsi_sampling){.presence_penalty = 0.15f}, h1, 1, 0, ws) == 0); /* 0.85 < 0.9 */
  const int32_t bid[1] = {2};
  const float bias[1] = {0.3f};
  CHECK(greedy(a, 3, &(dsi_sampling){.bias_ids = bid, .bias = bias, .n_bias = 1}, NULL, 0, 0, ws) == 2);
  const float tie[3] = {0.5f, 0.7f, 0.7f};
  CHECK(greedy(tie, 3, &(dsi_sampling){0}, NULL, 0, 0, ws) == 1); /* ties: the lower id */
  /* a negative logit is multiplied by the repetition penalty */
  const float neg[2] = {-1.0f, -1.5f};
  CHECK(greedy(neg, 2, &(dsi_sampling){.repetition_penalty = 1.6f}, h0, 1, 1, ws) == 1); /* -1.6 < -1.5 */
  /* ids past n_valid (padding rows) are never drawn, however likely */
  float pad[8] = {0, 0.1f, 0.2f, 0, 0, 0, 50, 60};
  dsi_rng rng;
  dsi_rng_seed(&rng, 3);
  int bad = 0;
  for (int k = 0; k < 500; k++) {
    float x[8];
    memcpy(x, pad, sizeof x);
    bad += dsi_sample(&(dsi_sampling){.temperature = 2.0f}, &rng, x, 6, NULL, 0, 0, ws, NULL) >= 6;
  }
  CHECK(bad == 0);
  printf("penalties, bias, ties and padding ids: as defined\n");
}

static void test_logprobs_and_seeds(dsi_sample_ws *ws) {
  enum { V = 300 };
  float l[V];
  dsi_rng r0;
  dsi_rng_seed(&r0, 11);
  for (int i = 0; i < V; i++) l[i] = 3 * dsi_rng_normal(&r0);
  double m = -INFINITY, z = 0;
  for (int i = 0; i < V; i++) m = fmax(m, l[i]);
  for (int i = 0; i < V; i++) z += exp(l[i] - m);
  double lse = m + log(z);
  dsi_sample_out out = {.want_logprob = 1, .n_top = 5};
  float x[V];
  memcpy(x, l, sizeof x);
  dsi_rng rng;
  dsi_rng_seed(&rng, 2);
  int32_t t = dsi_sample(&(dsi_sampling){.temperature = 1.0f, .repetition_penalty = 1.3f}, &rng, x, V,
                         (int32_t[]){5, 6}, 2, 2, ws, &out);
  CHECKF(fabs(out.logprob - (l[t] - lse)) < 1e-4, "logprob %g, want %g", out.logprob, l[t] - lse);
  for (int i = 0; i < 5; i++) {
    int better = 0;
    for (int j = 0; j < V; j++) better += l[j] > l[out.top[i].id];
    CHECKF(better == i && fabs(out.top[i].logprob - (l[out.top[i].id] - lse)) < 1e-4, "top %d: id %d, rank %d", i,
           out.top[i].id, better);
  }
  /* the same seed, the same draws; another seed, others */
  int32_t s1[100], s2[100], s3[100];
  for (int pass = 0; pass < 3; pass++) {
    dsi_rng_seed(&rng, pass == 2 ? 8 : 7);
    for (int k = 0; k < 100; k++) {
      memcpy(x, l, sizeof x);
      (pass == 0 ? s1 : pass == 1 ? s2 : s3)[k] =
          dsi_sample(&(dsi_sampling){.temperature = 1.5f, .top_k = 50}, &rng, x, V, NULL, 0, 0, ws, NULL);
    }
  }
  CHECK(!memcmp(s1, s2, sizeof s1) && memcmp(s1, s3, sizeof s1));
  /* a prompt token's logprob (dsi_logprob_of) is the drawn one's */
  dsi_sample_out po = {.n_top = 5};
  dsi_logprob_of(l, V, t, &po);
  CHECKF(po.logprob == out.logprob && !memcmp(po.top, out.top, sizeof out.top), "logprob_of %g, drawn %g", po.logprob,
         out.logprob);
  /* over V3's 129,280 ids (the sum's 16 lanes and its tail, ids past the
   * last whole 16 included) against a double-precision log-softmax */
  enum { BIG = 129280 + 7 };
  float *lb = malloc(BIG * sizeof(float));
  DSI_ASSERT(lb);
  for (int i = 0; i < BIG; i++) lb[i] = 2 * dsi_rng_normal(&r0) + (i == BIG - 1 ? 20 : 0);
  m = -INFINITY, z = 0;
  for (int i = 0; i < BIG; i++) m = fmax(m, lb[i]);
  for (int i = 0; i < BIG; i++) z += exp(lb[i] - m);
  lse = m + log(z);
  double worst = 0;
  for (int32_t id = BIG - 3; id < BIG; id++) {
    dsi_logprob_of(lb, BIG, id, &po);
    worst = fmax(worst, fabs(po.logprob - (lb[id] - lse)));
  }
  CHECKF(worst < 1e-4 && po.top[0].id == BIG - 1, "logprobs over %d ids: %g from double precision's", BIG, worst);
  free(lb);
}

/* the cost per token at DeepSeek-V3's vocabulary (printed, not asserted) */
static void cost_v3(void) {
  enum { V = 129280, N = 200 };
  dsi_sample_ws ws;
  DSI_ASSERT(dsi_sample_ws_init(&ws, V) == 0);
  float *l = malloc(V * sizeof(float)), *x = malloc(V * sizeof(float));
  dsi_rng rng;
  dsi_rng_seed(&rng, 4);
  for (int i = 0; i < V; i++) l[i] = 2 * dsi_rng_normal(&rng);
  int32_t hist[512];
  for (int i = 0; i < 512; i++) hist[i] = (int32_t)(dsi_rng_u64(&rng) % V);
  static const struct {
    const char *name;
    dsi_sampling sp;
  } cases[] = {
    {"greedy", {.temperature = 0}},
    {"temperature 0.8, top_p 0.95", {.temperature = 0.8f, .top_p = 0.95f}},
    {"top_k 40, top_p 0.9, min_p 0.05", {.temperature = 1.0f, .top_k = 40, .top_p = 0.9f, .min_p = 0.05f}},
    {"+ penalties over 512 tokens", {.temperature = 0.8f, .top_p = 0.95f, .repetition_penalty = 1.1f,
                                     .frequency_penalty = 0.2f, .presence_penalty = 0.1f}},
  };
  for (size_t c = 0; c < DSI_ARRAY_LEN(cases); c++) {
    double t0 = dsi_now();
    for (int k = 0; k < N; k++) {
      memcpy(x, l, V * sizeof(float));
      dsi_sample(&cases[c].sp, &rng, x, V, hist, 512, 256, &ws, NULL);
    }
    double per = (dsi_now() - t0) / N;
    printf("V3's 129280 ids, %-32s %.3f ms a token (the copy of the logits included)\n", cases[c].name, per * 1e3);
  }
  dsi_sample_out po = {.n_top = 5};
  double t0 = dsi_now();
  for (int k = 0; k < N; k++) dsi_logprob_of(l, V, hist[k % 512], &po);
  printf("V3's 129280 ids, %-32s %.3f ms a token\n", "a prompt token's logprob, top 5", (dsi_now() - t0) / N * 1e3);
  free(l);
  free(x);
  dsi_sample_ws_free(&ws);
}

int main(void) {
  dsi_sample_ws ws;
  DSI_ASSERT(dsi_sample_ws_init(&ws, 4096) == 0);
  test_distributions(&ws);
  test_wide_top_p(&ws);
  test_penalties(&ws);
  test_logprobs_and_seeds(&ws);
  dsi_sample_ws_free(&ws);
  cost_v3();
  return check_done();
}
