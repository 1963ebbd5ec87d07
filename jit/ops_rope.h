/* ops_rope.h: compile-time choices of the RoPE kernels, shared by the runtime
 * (which picks one per call) and the registry (prewarm). */
#ifndef OPS_ROPE_H
#define OPS_ROPE_H

#include "jit_key.h"

/* The "mode" parameter: where cos/sin come from. Plain and Llama 3.1 RoPE
 * differ only in their frequencies, which the host computes: one kernel. */
enum { JIT_ROPE_FREQ = 0, JIT_ROPE_CACHE = 1, JIT_ROPE_MODE_COUNT = 2 };

enum {
  ROPE_P_DTYPE,      /* q/k element type: f16 or bf16 */
  ROPE_P_POS,        /* pos_ids type: i32 or i64 */
  ROPE_P_MODE,       /* JIT_ROPE_* */
  ROPE_P_INTERLEAVE, /* 0: pairs (i, i + rotary_dim/2); 1: (2i, 2i+1) */
  ROPE_P_VEC,        /* elements per access: 8, 4 or 1 */
  ROPE_P_THREADS     /* block size */
};

/* Is key a usable rope configuration? */
int jit_rope_valid(const jit_key *k);

/* The key for one call; vec is the widest access the tensors allow (a power
 * of two, at most 8), narrowed to a registered width. */
void jit_rope_select(int dtype, int pos_dtype, int mode, int interleave, int vec, jit_key *out);

#endif
