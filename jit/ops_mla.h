/* ops_mla.h: compile-time choices of multi-head latent attention (batch_mla_paged) and its
 * split-KV merge (mla_merge), shared by the runtime and the registry. */
#ifndef OPS_MLA_H
#define OPS_MLA_H

#include "jit_key.h"

/* Parameters of batch_mla_paged, in canonical order. */
enum {
  MLA_P_DTYPE,  /* q_nope, q_pe, ckv, kpe and out: f16 or bf16 */
  MLA_P_Q_TILE, /* packed rows (query token x head) a block: 16 or 64 (mla_params.h) */
  MLA_P_STAGES  /* KV stages: FI_MLA_NS(q_tile), or 2 for the 16-row tile (two blocks an SM) */
};
enum { MLA_MERGE_P_DTYPE };
enum { MLA_APPEND_P_DTYPE, MLA_APPEND_P_THREADS };
#define MLA_MERGE_THREADS 128

/* The q tile for the most packed rows (query tokens x heads) a request of the batch has. */
int jit_mla_q_tile(int64_t max_rows);
/* stages 0: the tile's default (FI_MLA_NS). */
void jit_mla_select(int dtype, int q_tile, int stages, jit_key *out);
void jit_mla_merge_select(int dtype, jit_key *out);
void jit_mla_append_select(int dtype, jit_key *out);
unsigned jit_mla_threads(const jit_key *k);

extern const jit_op jit_op_batch_mla_paged;
extern const jit_op jit_op_mla_merge;
extern const jit_op jit_op_append_paged_mla;

#endif /* OPS_MLA_H */
