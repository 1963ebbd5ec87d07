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

/* ---- fused_add_rmsnorm, gemma_rmsnorm, gemma_fused_add_rmsnorm, layernorm ----
 * Their kernels take the block size at launch (a multiple of the warp, at
 * most JIT_NORM_MAX_THREADS), so a key names only what the code depends on
 * and one binary serves every row length its chunks cover. */
#define JIT_NORM_MAX_THREADS 512 /* FI_NORM_MAX_THREADS in kernels/rmsnorm.cuh */

enum { NORM_P_DTYPE, NORM_P_VEC, NORM_P_CHUNKS, NORM_P_WREG, NORM_P_HINT };
enum {
  LAYERNORM_P_DTYPE,
  LAYERNORM_P_WDTYPE, /* gamma and beta: the input's dtype or f32 */
  LAYERNORM_P_VEC,
  LAYERNORM_P_CHUNKS,
  LAYERNORM_P_WREG,
  LAYERNORM_P_HINT
};

/* The key of op (jit_op_fused_add_rmsnorm, jit_op_gemma_rmsnorm or
 * jit_op_gemma_fused_add_rmsnorm) for rows of `hidden` elements whose
 * tensors allow accesses of `vec` elements, and the block size to launch it
 * with on a device whose warp is `warp` threads. */
void jit_norm_select(const jit_op *op, int dtype, int vec, int hidden, int warp, jit_key *out,
                     int *threads);

/* The same for layernorm, gamma and beta of dtype wdtype. */
void jit_layernorm_select(int dtype, int wdtype, int vec, int hidden, int warp, jit_key *out,
                          int *threads);

#endif
