/* kernels: the vector primitives for the baseline ISA (the kernel tables
 * of cpu.c pick a level's variant). */
#include "kernels/vec.h"

#define VEC_SUFFIX generic
#define VEC_NAME "generic"
#include "kernels/vec_impl.h"
