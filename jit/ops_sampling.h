/* ops_sampling.h: compile-time choices of the sampling kernels (softmax, sampling,
 * top-k / top-p / min-p, renorm, mask), shared by the runtime and the registry. */
#ifndef OPS_SAMPLING_H
#define OPS_SAMPLING_H

#include "jit_key.h"

enum {
  SMP_P_OP,      /* "kind": FI_SMP_* of kernels/sampling_params.h */
  SMP_P_DTYPE,   /* the input's element type */
  SMP_P_VEC,     /* 4: rows read (and written) 4 elements at a time; 1: one at a time */
  SMP_P_THREADS, /* block size */
  SMP_P_CLUSTER, /* CTAs per row: 1, or 4 / 8 as one thread-block cluster (sm_90) */
  SMP_P_SEL      /* threshold search of the top-k / top-p ops: 0 radix over fixed bit fields,
                    1 over the row's key range (kernels/sampling_select.cuh); 0 for the others */
};

extern const jit_op jit_op_sampling;

/* The block size of every sampling kernel. */
#define SMP_THREADS 256

/* The key for op on dtype with vec-wide accesses, `cluster` CTAs per row and threshold
 * search sel (ignored, 0, for the ops without one). */
void jit_sampling_select(int op, int dtype, int vec, int cluster, int sel, jit_key *out);

/* Does op search a threshold (top-k, top-p: the ops with a SEL choice)? */
int jit_sampling_has_select(int op);

/* Is key a usable sampling configuration? */
int jit_sampling_valid(const jit_key *k);

/* Chain speculative sampling's kernel (one configuration: FI_SPEC_THREADS threads). */
extern const jit_op jit_op_spec_sampling;
void jit_spec_sampling_select(jit_key *out);

#endif
