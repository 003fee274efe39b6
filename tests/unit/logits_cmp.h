/* tests: one position's logits against a reference's — whether their
 * top-1 tokens agree, and their cosine (the quantized-weight tests). */
#ifndef DSI_TEST_LOGITS_CMP_H
#define DSI_TEST_LOGITS_CMP_H

#include <math.h>

static double logits_cos(const float *a, const float *r, int V, int *same_top1) {
  int ia = 0, ir = 0;
  double ab = 0, aa = 0, bb = 0;
  for (int v = 0; v < V; v++) {
    if (a[v] > a[ia]) ia = v;
    if (r[v] > r[ir]) ir = v;
    ab += (double)a[v] * r[v], aa += (double)a[v] * a[v], bb += (double)r[v] * r[v];
  }
  *same_top1 = ia == ir;
  return ab / sqrt(aa * bb);
}

#endif
