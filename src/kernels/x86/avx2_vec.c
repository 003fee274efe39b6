/* kernels: the vector primitives (vec_impl.h) compiled for AVX2 + FMA. */
#include "kernels/vec.h"

#define VEC_SUFFIX avx2
#define VEC_NAME "avx2"
#include "kernels/vec_impl.h"
