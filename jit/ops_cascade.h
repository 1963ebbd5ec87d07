/* ops_cascade.h: compile-time choices of the cascade merge kernels (merge_state,
 * merge_states), shared by the runtime (which picks one per call) and the registry. */
#ifndef OPS_CASCADE_H
#define OPS_CASCADE_H

#include "jit_key.h"

/* Parameters of both ops, in canonical order; merge_state has no STATES. */
enum {
  CASCADE_P_DTYPE,
  CASCADE_P_VEC,
  CASCADE_P_THREADS, /* block size */
  CASCADE_P_GROUP,   /* lanes per (seq, head) row: 4, 8, 16 or 32 */
  CASCADE_P_CHUNKS,  /* vectors per lane held in registers; 0: a loop over any head_dim */
  CASCADE_P_PREFETCH, /* 1: the next row loaded during this one, on a persistent grid;
                         0: a grid of all rows */
  CASCADE_P_HINT,    /* streaming cache hints on v */
  CASCADE_P_STATES   /* merge_states only: states loaded at once (N is a runtime value) */
};

/* The key for rows of head_dim elements of dtype moved vec at a time
 * (head_dim % vec == 0). */
void jit_merge_state_select(int dtype, int vec, int head_dim, jit_key *out);
void jit_merge_states_select(int dtype, int vec, int head_dim, jit_key *out);

/* Rows a block of key's configuration works on at once (threads / group). */
int jit_cascade_rows_per_block(const jit_key *k);

#endif
