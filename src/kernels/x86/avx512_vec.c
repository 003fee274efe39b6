/* kernels: the vector primitives (vec_impl.h) compiled for AVX-512. */
#include "kernels/vec.h"

#define VEC_SUFFIX avx512
#define VEC_NAME "avx512"
#include "kernels/vec_impl.h"
