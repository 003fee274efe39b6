/* kernels: e^x on vectors, 1-2 ulp (Cephes' expf: x = n ln 2 + r with ln 2
 * in two parts, a degree-5 polynomial in r, times 2^n), clamped to
 * [-104, 89] first, so NaN and +inf give inf and -inf gives 0. One
 * definition for every width: DSI_EXP_DEFINE(name, vector type, intrinsic
 * prefix, round to nearest, times 2^n) — the last two are the ISA's. */
#ifndef DSI_EXP_IMPL_H
#define DSI_EXP_IMPL_H

#define DSI_EXP_DEFINE(NAME, V, P, ROUND, SCALE2)                                  \
  static inline V NAME(V x) {                                                      \
    x = P##_max_ps(P##_min_ps(x, P##_set1_ps(89.0f)), P##_set1_ps(-104.0f));       \
    const V n = ROUND(P##_mul_ps(x, P##_set1_ps(1.44269504088896341f)));           \
    V r = P##_fnmadd_ps(n, P##_set1_ps(0.693359375f), x);                          \
    r = P##_fnmadd_ps(n, P##_set1_ps(-2.12194440e-4f), r);                         \
    V p = P##_set1_ps(1.9875691500e-4f);                                           \
    p = P##_fmadd_ps(p, r, P##_set1_ps(1.3981999507e-3f));                         \
    p = P##_fmadd_ps(p, r, P##_set1_ps(8.3334519073e-3f));                         \
    p = P##_fmadd_ps(p, r, P##_set1_ps(4.1665795894e-2f));                         \
    p = P##_fmadd_ps(p, r, P##_set1_ps(1.6666665459e-1f));                         \
    p = P##_fmadd_ps(p, r, P##_set1_ps(5.0000001201e-1f));                         \
    p = P##_fmadd_ps(p, P##_mul_ps(r, r), P##_add_ps(r, P##_set1_ps(1.0f)));       \
    return SCALE2(p, n);                                                           \
  }

#endif
