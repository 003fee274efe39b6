/* engine: the sampler — greedy, temperature, top-k and top-p (nucleus),
 * deterministic for a given seed. */
#define _GNU_SOURCE
#include "base/base.h"
#include "dsinfer.h"

#include <math.h>
#include <stdlib.h>

struct dsi_sampler {
  dsi_sampling s;
  int vocab;
  dsi_rng rng;
  float *prob;
  int32_t *idx;
};

dsi_sampler *dsi_sampler_new(const dsi_sampling *s, int vocab) {
  dsi_sampler *p = dsi_xcalloc(1, sizeof *p);
  p->s = *s;
  p->vocab = vocab;
  dsi_rng_seed(&p->rng, s->seed);
  p->prob = dsi_xmalloc(vocab * sizeof(float));
  p->idx = dsi_xmalloc(vocab * sizeof(int32_t));
  return p;
}

void dsi_sampler_free(dsi_sampler *p) {
  if (!p) return;
  free(p->prob);
  free(p->idx);
  free(p);
}

static int argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

static int by_prob_desc(const void *a, const void *b, void *key) {
  const float *prob = key;
  float pa = prob[*(const int32_t *)a], pb = prob[*(const int32_t *)b];
  return pa < pb ? 1 : pa > pb ? -1 : (*(const int32_t *)a - *(const int32_t *)b);
}

int dsi_sampler_sample(dsi_sampler *p, const float *logits) {
  int V = p->vocab;
  if (p->s.temperature <= 0) return argmax(logits, V);
  float mx = logits[argmax(logits, V)], sum = 0;
  for (int i = 0; i < V; i++) sum += (p->prob[i] = expf((logits[i] - mx) / p->s.temperature));
  for (int i = 0; i < V; i++) p->prob[i] /= sum;
  int n = V;
  int top_k = p->s.top_k > 0 && p->s.top_k < V ? p->s.top_k : 0;
  float top_p = p->s.top_p > 0 && p->s.top_p < 1 ? p->s.top_p : 1;
  if (top_k || top_p < 1) {
    for (int i = 0; i < V; i++) p->idx[i] = i;
    qsort_r(p->idx, V, sizeof(int32_t), by_prob_desc, p->prob);
    if (top_k) n = top_k;
    if (top_p < 1) {
      float c = 0;
      for (int i = 0; i < n; i++) {
        c += p->prob[p->idx[i]];
        if (c >= top_p) { n = i + 1; break; }
      }
    }
    float mass = 0;
    for (int i = 0; i < n; i++) mass += p->prob[p->idx[i]];
    float r = dsi_rng_uniform(&p->rng) * mass, c = 0;
    for (int i = 0; i < n; i++) {
      c += p->prob[p->idx[i]];
      if (r < c) return p->idx[i];
    }
    return p->idx[n - 1];
  }
  float r = dsi_rng_uniform(&p->rng), c = 0;
  for (int i = 0; i < V; i++) {
    c += p->prob[i];
    if (r < c) return i;
  }
  return argmax(logits, V);
}
