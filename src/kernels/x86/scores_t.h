/* kernels: the non-absorbed prefill's scores against keys transposed into
 * 8-key panels (vec.h scores_t) on 8-lane FMAs, for the AVX2 and AVX-512
 * levels' tables: every score the sum over d, in order, of one fused
 * multiply-add a step, wherever it falls in a block (the compiler's
 * vectorization of vec_impl.h's loop does not keep to that order at
 * AVX-512: test_vec_attn). */
#ifndef DSI_SCORES_T_H
#define DSI_SCORES_T_H

#include <immintrin.h>
#include <stddef.h>

/* MQ queries times NP panels of 8 keys: MQ x NP chains over d, each an
 * fma a step (a query's element broadcast, a panel's row of 8 keys
 * loaded), so every score is the same sequence of operations wherever it
 * sits in the block. Four queries and three panels: twelve chains, three
 * loads and four broadcasts for twelve multiply-adds. */
static inline __attribute__((always_inline)) void scores_block(float *restrict s, int lds, const float *restrict q,
                                                               int ldq, const float *restrict kt, int n, int MQ,
                                                               int NP) {
  const size_t ps = (size_t)8 * n;
  __m256 acc[4][3];
  for (int i = 0; i < MQ; i++)
    for (int j = 0; j < NP; j++) acc[i][j] = _mm256_setzero_ps();
  for (int d = 0; d < n; d++) {
    __m256 k[3];
    for (int j = 0; j < NP; j++) k[j] = _mm256_loadu_ps(kt + j * ps + (size_t)d * 8);
    for (int i = 0; i < MQ; i++) {
      const __m256 b = _mm256_broadcast_ss(q + (size_t)i * ldq + d);
      for (int j = 0; j < NP; j++) acc[i][j] = _mm256_fmadd_ps(b, k[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MQ; i++)
    for (int j = 0; j < NP; j++) _mm256_storeu_ps(s + (size_t)i * lds + 8 * j, acc[i][j]);
}

static void scores_t8(float *restrict s, int lds, const float *restrict q, int ldq, int nq, const float *restrict kt,
                      int nu, int n) {
  const int np = (nu + 7) / 8;
  for (int i = 0; i < nq; i += 4) {
    const int mq = nq - i < 4 ? nq - i : 4;
    for (int p = 0; p < np; p += 3) {
      const int pp = np - p < 3 ? np - p : 3;
      float *sb = s + (size_t)i * lds + 8 * p;
      const float *qb = q + (size_t)i * ldq, *kb = kt + (size_t)p * 8 * n;
      switch (mq * 4 + pp) {
#define B(m, np_)                                                                                               \
  case m * 4 + np_: scores_block(sb, lds, qb, ldq, kb, n, m, np_); break;
        B(4, 3) B(4, 2) B(4, 1) B(3, 3) B(3, 2) B(3, 1) B(2, 3) B(2, 2) B(2, 1) B(1, 3) B(1, 2) B(1, 1)
#undef B
      }
    }
  }
}

#endif
