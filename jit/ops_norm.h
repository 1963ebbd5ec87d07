/* ops_norm.h: compile-time choices of the norm kernels, shared by the runtime
 * (which picks one per call) and the registry (which prewarms all of them). */
#ifndef OPS_NORM_H
#define OPS_NORM_H

#include "jit_key.h"

enum {
  RMSNORM_P_DTYPE,
  RMSNORM_P_VEC,
  RMSNORM_P_THREADS,
  RMSNORM_P_CHUNKS,
  RMSNORM_P_MINBLOCKS, /* __launch_bounds__ minimum blocks per SM (0: none) */
  RMSNORM_P_WREG,      /* weight kept in registers across rows */
  RMSNORM_P_HINT       /* streaming cache hints on the row loads and stores */
};

/* Is key a usable rmsnorm configuration for rows of `hidden` elements? */
int jit_rmsnorm_valid(const jit_key *k, int hidden);

/* The key for a row of `hidden` elements of dtype moved `vec` at a time. */
void jit_rmsnorm_select(int dtype, int vec, int hidden, jit_key *out);

#endif
