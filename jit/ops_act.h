/* ops_act.h: compile-time choices of the gated activation kernels (act_and_mul),
 * shared by the runtime (which picks one per call) and the registry (prewarm). */
#ifndef OPS_ACT_H
#define OPS_ACT_H

#include "jit_key.h"

/* The "act" parameter: which activation multiplies the up half. */
enum { JIT_ACT_SILU = 0, JIT_ACT_GELU = 1, JIT_ACT_GELU_TANH = 2, JIT_ACT_COUNT = 3 };

enum {
  ACT_P_ACT,     /* JIT_ACT_*: 0 silu, 1 gelu (erf), 2 gelu_tanh */
  ACT_P_DTYPE,
  ACT_P_VEC,     /* elements per access; divides d and both row strides */
  ACT_P_THREADS, /* block size */
  ACT_P_CHUNKS   /* output vectors per thread per step (2 loads each in flight) */
};

/* Is key a usable act_and_mul configuration? */
int jit_act_valid(const jit_key *k);

/* The key for activation act (JIT_ACT_*) on dtype moved vec elements at a time. */
void jit_act_select(int act, int dtype, int vec, jit_key *out);

#endif
