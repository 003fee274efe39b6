/* engine: the sampler (see sampler.h) — in order: logprobs, bias and
 * penalties, greedy, then temperature, top_k, top_p, min_p and the draw;
 * and the public dsi_sampler, one completion's state around it. */
#define _GNU_SOURCE /* qsort_r */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dsi_sample_ws_init(dsi_sample_ws *w, int n_vocab) {
  memset(w, 0, sizeof *w);
  w->n_vocab = n_vocab;
  w->p = malloc((size_t)n_vocab * sizeof(float));
  w->raw = malloc((size_t)n_vocab * sizeof(float));
  w->idx = malloc((size_t)n_vocab * sizeof(int32_t));
  w->cnt = calloc((size_t)n_vocab, sizeof(int32_t));
  if (w->p && w->raw && w->idx && w->cnt) return DSI_OK;
  dsi_sample_ws_free(w);
  return DSI_E_NOMEM;
}

void dsi_sample_ws_free(dsi_sample_ws *w) {
  free(w->p);
  free(w->raw);
  free(w->idx);
  free(w->cnt);
  memset(w, 0, sizeof *w);
}

/* ---- logprobs of the raw logits ---- */
static float log_sum_exp(const float *x, int n) {
  float m = -INFINITY;
  for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
  if (m == -INFINITY) return m;
  double s = 0;
  for (int i = 0; i < n; i++) s += exp((double)x[i] - m);
  return m + (float)log(s);
}

/* the n largest of x (ties: the lower id first) minus lse, by insertion
 * into a sorted list of n */
static void top_logprobs(const float *x, int v, int n, float lse, dsi_token_logprob *top) {
  int k = 0;
  for (int i = 0; i < v; i++) {
    if (k == n && !(x[i] > top[n - 1].logprob)) continue;
    int at = k < n ? k++ : n - 1;
    while (at > 0 && top[at - 1].logprob < x[i]) top[at] = top[at - 1], at--;
    top[at] = (dsi_token_logprob){i, x[i]};
  }
  for (int i = 0; i < k; i++) top[i].logprob -= lse;
}

/* ---- bias and penalties ---- */
static void penalize(const dsi_sampling *sp, float *l, int v, const int32_t *hist, int n_hist, int n_prompt,
                     int32_t *cnt) {
  for (int i = 0; i < sp->n_bias; i++)
    if (sp->bias_ids[i] >= 0 && sp->bias_ids[i] < v) l[sp->bias_ids[i]] += sp->bias[i];
  float rp = sp->repetition_penalty;
  int rep = rp > 0 && rp != 1, freq = sp->frequency_penalty != 0 || sp->presence_penalty != 0;
  if (!rep && !freq) return;
  /* cnt: bit 30 marks a token seen anywhere (repetition), the low bits
   * count it in the output (frequency, presence); each token's entry is
   * applied once and cleared */
  const int32_t seen = 1 << 30;
  for (int i = 0; i < n_hist; i++) {
    int32_t t = hist[i];
    if (t < 0 || t >= v) continue;
    cnt[t] |= seen;
    if (i >= n_prompt) cnt[t]++;
  }
  for (int i = 0; i < n_hist; i++) {
    int32_t t = hist[i];
    if (t < 0 || t >= v || !cnt[t]) continue;
    int c = cnt[t] & (seen - 1);
    if (rep) l[t] = l[t] > 0 ? l[t] / rp : l[t] * rp;
    if (c) l[t] -= sp->frequency_penalty * (float)c + sp->presence_penalty;
    cnt[t] = 0;
  }
}

/* ---- partial selection: probability descending, then id ascending ---- */
static inline int before(const float *p, int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); }

static inline void swap32(int32_t *a, int32_t *b) {
  int32_t t = *a;
  *a = *b;
  *b = t;
}

/* reorder idx[0..n) so its first k are the k most likely, in any order */
static void select_top(const float *p, int32_t *idx, int n, int k) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2; /* median of three */
    if (before(p, idx[mid], idx[lo])) swap32(&idx[mid], &idx[lo]);
    if (before(p, idx[hi], idx[lo])) swap32(&idx[hi], &idx[lo]);
    if (before(p, idx[hi], idx[mid])) swap32(&idx[hi], &idx[mid]);
    int32_t pivot = idx[mid];
    int i = lo, j = hi;
    while (i <= j) {
      while (before(p, idx[i], pivot)) i++;
      while (before(p, pivot, idx[j])) j--;
      if (i <= j) swap32(&idx[i++], &idx[j--]);
    }
    if (k - 1 <= j) hi = j;
    else if (k - 1 >= i) lo = i;
    else break;
  }
}

static int by_p(const void *a, const void *b, void *p) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return before(p, x, y) ? -1 : before(p, y, x) ? 1 : 0;
}

/* ---- the draw ---- */
int32_t dsi_sample(const dsi_sampling *sp, dsi_rng *rng, float *l, int v, const int32_t *hist, int n_hist,
                   int n_prompt, dsi_sample_ws *ws, dsi_sample_out *out) {
  DSI_ASSERT(v > 0 && v <= ws->n_vocab);
  float lse = 0;
  int logprob = out && (out->want_logprob || out->n_top > 0);
  if (logprob) {
    lse = log_sum_exp(l, v);
    if (out->n_top > 0) top_logprobs(l, v, DSI_MIN(out->n_top, DSI_MAX_TOP_LOGPROBS), lse, out->top);
    if (out->want_logprob) memcpy(ws->raw, l, (size_t)v * sizeof(float));
  }
  penalize(sp, l, v, hist, n_hist, n_prompt, ws->cnt);
  int32_t tok = 0;
  if (!(sp->temperature > 0)) { /* greedy: the first largest */
    for (int i = 1; i < v; i++)
      if (l[i] > l[tok]) tok = i;
  } else {
    float *p = ws->p, mx = -INFINITY;
    int32_t *idx = ws->idx;
    for (int i = 0; i < v; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < v; i++) p[i] = expf((l[i] - mx) / sp->temperature);
    int n = 0; /* candidates idx[0..n) */
    for (int i = 0; i < v; i++)
      if (p[i] > 0) idx[n++] = i;
    if (n == 0) idx[n++] = 0;
    if (sp->top_k > 0 && sp->top_k < n) {
      select_top(p, idx, n, sp->top_k);
      n = sp->top_k;
    }
    if (sp->top_p > 0 && sp->top_p < 1) {
      double mass = 0;
      for (int i = 0; i < n; i++) mass += p[idx[i]];
      /* the fewest most likely reaching top_p of the mass: select the top
       * m for m = 64, 128, ... until their mass reaches it, then sort them */
      for (int m = DSI_MIN(64, n);; m = DSI_MIN(2 * m, n)) {
        if (m < n) select_top(p, idx, n, m);
        double top = 0;
        for (int i = 0; i < m; i++) top += p[idx[i]];
        if (top >= sp->top_p * mass || m == n) {
          qsort_r(idx, (size_t)m, sizeof *idx, by_p, p);
          double c = 0;
          int keep = m;
          for (int i = 0; i < m; i++)
            if ((c += p[idx[i]]) >= sp->top_p * mass) {
              keep = i + 1;
              break;
            }
          n = keep;
          break;
        }
      }
    }
    if (sp->min_p > 0) {
      float pmax = 0;
      for (int i = 0; i < n; i++) pmax = p[idx[i]] > pmax ? p[idx[i]] : pmax;
      int k = 0;
      for (int i = 0; i < n; i++)
        if (p[idx[i]] >= sp->min_p * pmax) idx[k++] = idx[i];
      n = k;
    }
    /* walk the candidates in the order the selections left them, which
     * depends on the logits alone: the draw depends on nothing but the
     * logits and the random stream */
    double mass = 0;
    for (int i = 0; i < n; i++) mass += p[idx[i]];
    double r = dsi_rng_uniform(rng) * mass, c = 0;
    tok = idx[n - 1];
    for (int i = 0; i < n; i++)
      if (r < (c += p[idx[i]])) {
        tok = idx[i];
        break;
      }
  }
  if (out && out->want_logprob) out->logprob = ws->raw[tok] - lse;
  return tok;
}

/* ---- dsi_sampler: one completion's sampling state ---- */
struct dsi_sampler {
  dsi_sampling s;
  int vocab;
  dsi_rng rng;
  dsi_sample_ws ws;
};

dsi_sampler *dsi_sampler_new(const dsi_sampling *s, int vocab) {
  dsi_sampler *p = dsi_xcalloc(1, sizeof *p);
  p->s = *s;
  p->vocab = vocab;
  dsi_rng_seed(&p->rng, s->seed);
  if (dsi_sample_ws_init(&p->ws, vocab)) {
    free(p);
    return NULL;
  }
  return p;
}

void dsi_sampler_free(dsi_sampler *p) {
  if (!p) return;
  dsi_sample_ws_free(&p->ws);
  free(p);
}

int dsi_sampler_sample(dsi_sampler *p, float *logits, int n_valid, const int32_t *hist, int n_hist, int n_prompt) {
  return dsi_sample(&p->s, &p->rng, logits, n_valid > 0 && n_valid < p->vocab ? n_valid : p->vocab, hist, n_hist,
                    n_prompt, &p->ws, NULL);
}
