/* tests: compare two raw little-endian f32 files row by row.
 * usage: f32cmp OURS REF ROWLEN [TOL] [REF_ROW_OFFSET]
 *        f32cmp OURS REF ROWLEN --top1 MIN_AGREEMENT
 *        f32cmp OURS REF ROWLEN --kl
 * Row r of OURS is compared with row r + REF_ROW_OFFSET of REF; the error
 * of a row is max|a-b| / max|b|. Exits 1 if any row's error exceeds TOL
 * (default 1e-5) or the sizes do not fit. With --top1, the measure is the
 * share of rows whose argmax agrees (for reduced-precision paths, where
 * one flipped expert moves logits by O(1) and elementwise bounds mislead).
 * With --kl, rows are logits: it prints the top-1 agreement and the mean
 * and largest KL(softmax(REF) || softmax(OURS)) in nats, and exits 0 (a
 * measure of quantized weights, README --quant). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *slurp(const char *p, long *n) {
  FILE *f = fopen(p, "rb");
  if (!f) { perror(p); exit(2); }
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *v = malloc(sz ? sz : 1);
  if (fread(v, 1, sz, f) != (size_t)sz) { perror(p); exit(2); }
  fclose(f);
  *n = sz / 4;
  return v;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: f32cmp OURS REF ROWLEN [TOL] [REF_ROW_OFFSET]\n"); return 2; }
  int top1 = argc > 4 && !strcmp(argv[4], "--top1"), kl = argc > 4 && !strcmp(argv[4], "--kl");
  long na, nb, V = atol(argv[3]), off = !top1 && argc > 5 ? atol(argv[5]) : 0;
  double tol = top1 ? (argc > 5 ? atof(argv[5]) : 0.9) : argc > 4 ? atof(argv[4]) : 1e-5;
  float *a = slurp(argv[1], &na), *b = slurp(argv[2], &nb);
  if (V <= 0 || na % V || na + off * V > nb) {
    fprintf(stderr, "f32cmp: sizes do not fit: %ld vs %ld floats, rows of %ld, offset %ld\n", na, nb, V, off);
    return 1;
  }
  if (kl) {
    long rows = na / V, agree = 0;
    double sum = 0, worst = 0;
    for (long r = 0; r < rows; r++) {
      const float *p = b + r * V, *q = a + r * V;
      long ip = 0, iq = 0;
      for (long i = 1; i < V; i++) {
        if (p[i] > p[ip]) ip = i;
        if (q[i] > q[iq]) iq = i;
      }
      agree += ip == iq;
      double zp = 0, zq = 0, d = 0;
      for (long i = 0; i < V; i++) zp += exp((double)p[i] - p[ip]), zq += exp((double)q[i] - q[iq]);
      /* sum p_i (log p_i - log q_i), both as log-softmax */
      for (long i = 0; i < V; i++) {
        double lp = p[i] - p[ip] - log(zp), lq = q[i] - q[iq] - log(zq);
        d += exp(lp) * (lp - lq);
      }
      sum += d;
      worst = d > worst ? d : worst;
    }
    printf("f32cmp: %ld rows, top-1 agreement %.4f, KL mean %.3g max %.3g nats\n", rows, rows ? (double)agree / rows : 1,
           rows ? sum / rows : 0, worst);
    free(a);
    free(b);
    return 0;
  }
  if (top1) {
    long agree = 0, rows = na / V;
    for (long r = 0; r < rows; r++) {
      long ia = 0, ib = 0;
      for (long i = 1; i < V; i++) {
        if (a[r * V + i] > a[r * V + ia]) ia = i;
        if (b[r * V + i] > b[r * V + ib]) ib = i;
      }
      agree += ia == ib;
    }
    double share = rows ? (double)agree / rows : 1;
    printf("f32cmp: %ld rows, top-1 agreement %.3f (min %.2f)\n", rows, share, tol);
    free(a);
    free(b);
    return share >= tol ? 0 : 1;
  }
  double worst = 0;
  for (long r = 0; r < na / V; r++) {
    double md = 0, mr = 0;
    for (long i = 0; i < V; i++) {
      double x = a[r * V + i], y = b[(r + off) * V + i], d = fabs(x - y);
      if (!(d <= md)) md = d;
      if (fabs(y) > mr) mr = fabs(y);
    }
    double e = md / (mr > 0 ? mr : 1);
    if (!(e <= worst)) worst = e;
  }
  printf("f32cmp: %ld rows, worst relative error %.3g (tol %.1g)\n", na / V, worst, tol);
  free(a);
  free(b);
  return worst <= tol ? 0 : 1;
}
