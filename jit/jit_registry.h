/* jit_registry.h: every op family the runtime can compile, for lookups by name
 * and for prewarm, which compiles each op's registered configurations. */
#ifndef JIT_REGISTRY_H
#define JIT_REGISTRY_H

#include "jit_key.h"

int jit_registry_count(void);
const jit_op *jit_registry_get(int i);
const jit_op *jit_registry_find(const char *name);

/* The op descriptors, one per jit/ops_*.c file. */
extern const jit_op jit_op_rmsnorm;
extern const jit_op jit_op_fused_add_rmsnorm;
extern const jit_op jit_op_gemma_rmsnorm;
extern const jit_op jit_op_gemma_fused_add_rmsnorm;
extern const jit_op jit_op_layernorm;
extern const jit_op jit_op_act_and_mul;
extern const jit_op jit_op_merge_state;
extern const jit_op jit_op_merge_states;
extern const jit_op jit_op_rope;
extern const jit_op jit_op_append_paged_kv;
extern const jit_op jit_op_batch_indices_positions;
extern const jit_op jit_op_sampling;
extern const jit_op jit_op_spec_sampling;
extern const jit_op jit_op_single_decode;
extern const jit_op jit_op_batch_decode;
extern const jit_op jit_op_decode_upload;
extern const jit_op jit_op_read_probe;
extern const jit_op jit_op_single_prefill;
extern const jit_op jit_op_batch_prefill;
extern const jit_op jit_op_single_prefill_fp8kv;
extern const jit_op jit_op_batch_prefill_fp8kv;
extern const jit_op jit_op_single_prefill_dvo;
extern const jit_op jit_op_batch_prefill_dvo;
extern const jit_op jit_op_single_prefill_sm90;
extern const jit_op jit_op_batch_prefill_sm90;
extern const jit_op jit_op_prefill_merge;
extern const jit_op jit_op_mma_probe;
extern const jit_op jit_op_wgmma_probe;
extern const jit_op jit_op_moe_routing;
extern const jit_op jit_op_moe_sort;
extern const jit_op jit_op_moe_combine;
extern const jit_op jit_op_moe_gemm;
extern const jit_op jit_op_batch_mla_paged;
extern const jit_op jit_op_mla_merge;
extern const jit_op jit_op_append_paged_mla;
extern const jit_op jit_op_packbits;
extern const jit_op jit_op_moe_gemm_sm90;

#endif
