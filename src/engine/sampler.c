/* engine: the sampler (see sampler.h) — in order: logprobs, bias and
 * penalties, greedy, then temperature, top_k, top_p, min_p and the draw;
 * and the public dsi_sampler, one completion's state around it. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_BINS 1024 /* the cuts' histogram: p in (0, 1], float bits >> 20 <= 0x3f8 */

int dsi_sample_ws_init(dsi_sample_ws *w, int n_vocab) {
  memset(w, 0, sizeof *w);
  w->n_vocab = n_vocab;
  w->cand = malloc((size_t)n_vocab * sizeof *w->cand);
  w->raw = malloc((size_t)n_vocab * sizeof(float));
  w->raw2 = malloc((size_t)n_vocab * sizeof(float));
  w->cnt = calloc((size_t)n_vocab, sizeof(int32_t));
  w->bin_mass = malloc(N_BINS * sizeof *w->bin_mass);
  w->bin_count = malloc(N_BINS * sizeof *w->bin_count);
  if (w->cand && w->raw && w->raw2 && w->cnt && w->bin_mass && w->bin_count) return DSI_OK;
  dsi_sample_ws_free(w);
  return DSI_E_NOMEM;
}

void dsi_sample_ws_free(dsi_sample_ws *w) {
  free(w->cand);
  free(w->raw);
  free(w->raw2);
  free(w->cnt);
  free(w->bin_mass);
  free(w->bin_count);
  memset(w, 0, sizeof *w);
}

/* 2^x for x <= 0, to float precision (a degree-6 polynomial on the
 * fraction, the exponent in the bits), in plain arithmetic the compiler
 * vectorizes: the same bits on every ISA */
static inline float exp2_neg(float x0) {
  float x = x0 < -126.0f ? -126.0f : x0; /* selects, not branches: the loop vectorizes */
  int xi = (int)x;
  xi -= x < (float)xi; /* floor */
  float f = x - (float)xi;
  float p = 1.5353362e-4f;
  p = p * f + 1.3398874e-3f;
  p = p * f + 9.6181291e-3f;
  p = p * f + 5.5504109e-2f;
  p = p * f + 2.4022651e-1f;
  p = p * f + 6.9314718e-1f;
  p = p * f + 1.0f;
  union {
    uint32_t u;
    float f;
  } s = {.u = (uint32_t)(xi + 127) << 23};
  return x0 < -126.0f ? 0.0f : p * s.f;
}

/* ---- logprobs of the raw logits ---- */
/* log sum e^x: the terms by exp2_neg into 16 float sums a lane each (the
 * loop vectorizes; the order is fixed, so the result is the same on every
 * ISA), added up in double */
static float log_sum_exp(const float *x, int n) {
  float m = -INFINITY;
  for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
  if (m == -INFINITY) return m;
  const float k = 1.4426950f; /* log2(e) */
  float part[16] = {0};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int u = 0; u < 16; u++) part[u] += exp2_neg((x[i + u] - m) * k);
  double s = 0;
  for (; i < n; i++) s += exp2_neg((x[i] - m) * k);
  for (int u = 0; u < 16; u++) s += part[u];
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

void dsi_logprob_of(const float *l, int v, int32_t tok, dsi_sample_out *out) {
  float lse = log_sum_exp(l, v);
  out->logprob = tok >= 0 && tok < v ? l[tok] - lse : -INFINITY;
  if (out->n_top > 0) top_logprobs(l, v, DSI_MIN(out->n_top, DSI_MAX_TOP_LOGPROBS), lse, out->top);
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

/* ---- partial selection over candidates (probability, id): probability
 * descending, then id ascending; the pairs sit together in memory ---- */
static inline int before(dsi_cand a, dsi_cand b) { return a.p > b.p || (a.p == b.p && a.id < b.id); }

static inline void swap_c(dsi_cand *a, dsi_cand *b) {
  dsi_cand t = *a;
  *a = *b;
  *b = t;
}

/* median of three of c[lo], c[mid], c[hi], moved to c[hi] */
static void pivot_to_end(dsi_cand *c, int lo, int hi) {
  int mid = lo + (hi - lo) / 2;
  if (before(c[mid], c[lo])) swap_c(&c[mid], &c[lo]);
  if (before(c[hi], c[lo])) swap_c(&c[hi], &c[lo]);
  if (before(c[mid], c[hi])) swap_c(&c[mid], &c[hi]);
}

/* c[lo..hi] split around the pivot at c[hi]: the more likely first; returns
 * the pivot's place, *left the mass before it */
static int partition(dsi_cand *c, int lo, int hi, double *left) {
  dsi_cand pivot = c[hi];
  int store = lo;
  double m = 0;
  for (int i = lo; i < hi; i++)
    if (before(c[i], pivot)) {
      m += c[i].p;
      swap_c(&c[i], &c[store++]);
    }
  swap_c(&c[store], &c[hi]);
  *left = m;
  return store;
}

/* reorder c[0..n) so its first k are the k most likely, in any order */
static void select_top(dsi_cand *c, int n, int k) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    pivot_to_end(c, lo, hi);
    double unused;
    int at = partition(c, lo, hi, &unused);
    if (at == k - 1 || at == k) return;
    if (at > k) hi = at - 1;
    else lo = at + 1;
  }
}

/* reorder c[0..n) so its first k are the fewest most likely whose mass
 * reaches target (k = n when none do); returns k. A quickselect that
 * follows the mass instead of a rank: expected O(n), no sort. */
static int select_mass(dsi_cand *c, int n, double target) {
  int lo = 0, hi = n - 1;
  double acc = 0; /* mass of c[0..lo), all more likely than c[lo..] */
  while (lo <= hi) {
    pivot_to_end(c, lo, hi);
    double left;
    int at = partition(c, lo, hi, &left);
    if (acc + left >= target) {
      hi = at - 1; /* the cut is among the more likely */
    } else if (acc + left + c[at].p >= target) {
      return at + 1; /* the pivot reaches it */
    } else {
      acc += left + c[at].p;
      lo = at + 1;
    }
  }
  return lo > 0 ? lo : 1;
}

/* ---- cutting by bins: a histogram of the candidates' probabilities by
 * their float bits (exponent and 3 mantissa bits: monotone in p), then the
 * exact selection only among the bin the cut falls in ---- */

static inline int bin_of(float p) {
  uint32_t u;
  memcpy(&u, &p, 4);
  return (int)(u >> 20);
}

/* keep the k most likely (k > 0), or with k = 0 the fewest most likely
 * whose mass reaches target: the kept first in c; returns how many */
static int cut(dsi_cand *c, int n, int k, double target, dsi_sample_ws *ws) {
  double *mass = ws->bin_mass;
  int32_t *count = ws->bin_count;
  memset(mass, 0, N_BINS * sizeof *mass);
  memset(count, 0, N_BINS * sizeof *count);
  for (int i = 0; i < n; i++) {
    int b = bin_of(c[i].p);
    mass[b] += c[i].p;
    count[b]++;
  }
  int B = N_BINS - 1, above = 0; /* the bin the cut falls in; candidates in the bins above it */
  double acc = 0;
  for (; B > 0; B--) {
    if (k ? above + count[B] >= k : acc + mass[B] >= target) break;
    above += count[B];
    acc += mass[B];
  }
  /* the bins above B first, then B's */
  int at = 0;
  for (int i = 0; i < n; i++)
    if (bin_of(c[i].p) > B) swap_c(&c[i], &c[at++]);
  int inb = at;
  for (int i = at; i < n; i++)
    if (bin_of(c[i].p) == B) swap_c(&c[i], &c[inb++]);
  int m = inb - at;
  if (k) {
    select_top(c + at, m, k - above);
    return k;
  }
  return at + select_mass(c + at, m, target - acc);
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
    dsi_cand *c = ws->cand;
    float mx = -INFINITY, scale = 1.4426950f / sp->temperature; /* log2(e) / T */
    for (int i = 0; i < v; i++) mx = l[i] > mx ? l[i] : mx;
    float *p = ws->raw2;
    for (int i = 0; i < v; i++) p[i] = exp2_neg((l[i] - mx) * scale);
    int n = 0; /* the candidates: every id of a probability above 0 */
    for (int i = 0; i < v; i++)
      if (p[i] > 0) c[n++] = (dsi_cand){p[i], i};
    if (n == 0) c[n++] = (dsi_cand){1, 0};
    if (sp->top_k > 0 && sp->top_k < n) n = cut(c, n, sp->top_k, 0, ws);
    if (sp->top_p > 0 && sp->top_p < 1) { /* the fewest most likely reaching top_p of the mass */
      double mass = 0;
      for (int i = 0; i < n; i++) mass += c[i].p;
      n = cut(c, n, 0, sp->top_p * mass, ws);
    }
    if (sp->min_p > 0) {
      float pmax = 0;
      for (int i = 0; i < n; i++) pmax = c[i].p > pmax ? c[i].p : pmax;
      int k = 0;
      for (int i = 0; i < n; i++)
        if (c[i].p >= sp->min_p * pmax) c[k++] = c[i];
      n = k;
    }
    /* walk the candidates in the order the selections left them, which
     * depends on the logits alone: the draw depends on nothing but the
     * logits and the random stream */
    double mass = 0;
    for (int i = 0; i < n; i++) mass += c[i].p;
    double r = dsi_rng_uniform(rng) * mass, acc = 0;
    tok = c[n - 1].id;
    for (int i = 0; i < n; i++)
      if (r < (acc += c[i].p)) {
        tok = c[i].id;
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
  dsi_sampler *p = calloc(1, sizeof *p);
  if (!p) return NULL;
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
