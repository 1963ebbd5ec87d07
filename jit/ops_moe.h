/* ops_moe.h: compile-time choices of the mixture-of-experts kernels (routing), shared by
 * the runtime (which picks one per call) and the registry (prewarm). */
#ifndef OPS_MOE_H
#define OPS_MOE_H

#include "jit_key.h"

enum {
  MOE_ROUTE_P_DTYPE,  /* the logits' dtype: f32 or bf16 */
  MOE_ROUTE_P_METHOD, /* FI_MOE_* of kernels/moe_params.h */
  MOE_ROUTE_P_EPL     /* experts a lane holds: 1, 2, 4, 8 or 16 */
};

/* Tokens (warps) a routing block takes. */
#define MOE_ROUTE_WARPS 4
/* The most experts a lane holds: 512 experts on a 32-lane warp. */
#define MOE_ROUTE_MAX_EPL 16

/* The routing kernel for logits of dtype over `experts` experts on a warp of `warp` lanes;
 * experts must be at most MOE_ROUTE_MAX_EPL * warp. */
void jit_moe_routing_select(int dtype, int method, int experts, int warp, jit_key *out);

/* The sort's three kernels (moe_sort.cuh): 0 count, 1 scan, 2 scatter. */
enum { MOE_SORT_P_PHASE };
void jit_moe_sort_select(int phase, jit_key *out);

/* Permute (0) and finalize (1) (moe_combine.cuh): dtype of the rows, vec elements a
 * thread moves at once (dividing hidden and the row strides). */
enum { MOE_COMBINE_P_KIND, MOE_COMBINE_P_DTYPE, MOE_COMBINE_P_VEC };
#define MOE_COMBINE_THREADS 256
void jit_moe_combine_select(int kind, int dtype, int vec, jit_key *out);

#endif
