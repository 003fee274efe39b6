/* engine: the sampler — from a position's logits to one token, for one
 * completion, deterministic for its seed, and the same alone or batched
 * (it reads only its own logits, token history and random stream).
 *
 * In order: logprobs of the raw logits (log-softmax) and the most likely
 * tokens, when asked; logit_bias added; repetition penalty over the
 * prompt's and the output's tokens (a positive logit divided by it, a
 * negative one multiplied), then frequency and presence penalties over the
 * output's (minus f * count + p); greedy (temperature 0) takes the first
 * largest logit; otherwise the logits over temperature, top_k keeps the k
 * most likely, top_p the fewest most likely whose mass reaches p of the
 * kept mass, min_p those at least min_p times as likely as the most
 * likely, and one uniform draw picks among what is left in proportion to
 * its probability. Ties are broken toward the lower id. Nothing is sorted:
 * top_k and top_p first bin the candidates by probability (a histogram of
 * their float exponents), then select exactly within the one bin the cut
 * falls in (a quickselect; top_p's follows the mass); the draw walks the
 * candidates in the order they leave, which depends on the logits alone. */
#ifndef DSI_SAMPLER_H
#define DSI_SAMPLER_H

#include "base/base.h"
#include "dsinfer.h"

/* a candidate token: its probability (unnormalized) and id */
typedef struct dsi_cand {
  float p;
  int32_t id;
} dsi_cand;

/* scratch for one sampling at a time over a vocabulary of n_vocab ids */
typedef struct dsi_sample_ws {
  int n_vocab;
  dsi_cand *cand; /* [n_vocab] */
  float *raw;     /* [n_vocab] the raw logits, when a logprob is wanted */
  float *raw2;    /* [n_vocab] probabilities */
  int32_t *cnt;   /* [n_vocab] zero between calls */
  double *bin_mass; /* [1024] the cuts' histogram */
  int32_t *bin_count;
} dsi_sample_ws;
int dsi_sample_ws_init(dsi_sample_ws *w, int n_vocab);
void dsi_sample_ws_free(dsi_sample_ws *w);

/* what to return beside the token */
typedef struct dsi_sample_out {
  int want_logprob;
  int n_top;                  /* most likely tokens wanted, <= DSI_MAX_TOP_LOGPROBS */
  float logprob;              /* of the token drawn, under the raw logits */
  dsi_token_logprob top[DSI_MAX_TOP_LOGPROBS];
} dsi_sample_out;

/* tok's logprob under the raw logits[0..n_valid) (log-softmax) and the
 * out->n_top most likely, as dsi_sample gives them for a drawn token;
 * logits are not changed */
void dsi_logprob_of(const float *logits, int n_valid, int32_t tok, dsi_sample_out *out);

/* One token from logits[0..n_valid) (ids past n_valid are never drawn),
 * changed in place. hist[0..n_hist) are the tokens before this position
 * (the prompt's first n_prompt of them, then the output's). */
int32_t dsi_sample(const dsi_sampling *sp, dsi_rng *rng, float *logits, int n_valid, const int32_t *hist, int n_hist,
                   int n_prompt, dsi_sample_ws *ws, dsi_sample_out *out);

#endif
