/* jit_registry.c: the table of op families; adding an op family is adding its
 * jit/ops_*.c descriptor and one line here. */
#include "jit_registry.h"

#include <string.h>

static const jit_op *const ops[] = {
    &jit_op_rmsnorm,
    &jit_op_fused_add_rmsnorm,
    &jit_op_gemma_rmsnorm,
    &jit_op_gemma_fused_add_rmsnorm,
    &jit_op_layernorm,
    &jit_op_act_and_mul,
    &jit_op_merge_state,
    &jit_op_merge_states,
    &jit_op_rope,
    &jit_op_append_paged_kv,
    &jit_op_batch_indices_positions,
    &jit_op_sampling,
    &jit_op_spec_sampling,
    &jit_op_single_decode,
    &jit_op_batch_decode,
    &jit_op_decode_upload,
    &jit_op_read_probe,
    &jit_op_single_prefill,
    &jit_op_batch_prefill,
    &jit_op_single_prefill_fp8kv,
    &jit_op_batch_prefill_fp8kv,
    &jit_op_single_prefill_dvo,
    &jit_op_batch_prefill_dvo,
    &jit_op_single_prefill_sm90,
    &jit_op_batch_prefill_sm90,
    &jit_op_prefill_merge,
    &jit_op_mma_probe,
    &jit_op_wgmma_probe,
    &jit_op_moe_routing,
    &jit_op_moe_sort,
    &jit_op_moe_combine,
    &jit_op_moe_gemm,
    &jit_op_moe_gemm_sm90,
    &jit_op_batch_mla_paged,
    &jit_op_mla_merge,
    &jit_op_append_paged_mla,
    &jit_op_packbits,
};

int jit_registry_count(void) { return (int)(sizeof ops / sizeof ops[0]); }

const jit_op *jit_registry_get(int i) {
  return i >= 0 && i < jit_registry_count() ? ops[i] : NULL;
}

const jit_op *jit_registry_find(const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < jit_registry_count(); i++)
    if (strcmp(ops[i]->name, name) == 0) return ops[i];
  return NULL;
}
