"""The exports of libfi_runtime_tvm.so: name -> (signature, mutated arguments).

The signatures are ffi/fi_tvm_list.h's (the library reports them too, through
get_function_doc; tests/test_python.sh checks the two agree). The ctypes fallback and the
torch.library registrations read them from here; "mutated" names the arguments an op
writes (its outputs), which torch needs to know."""

SIGNATURES = {
    'version': ('', ()),
    'last_error': ('', ()),
    'list_functions': ('', ()),
    'init': ('cache_path: str?, system_cache_path: str?, log_level: int', ()),
    'rmsnorm': ('input: Tensor, weight: Tensor, eps: float, out: Tensor', ('out',)),
    'fused_add_rmsnorm': (
        'input: Tensor, residual: Tensor, weight: Tensor, eps: float',
        ('input', 'residual'),
    ),
    'gemma_rmsnorm': ('input: Tensor, weight: Tensor, eps: float, out: Tensor', ('out',)),
    'gemma_fused_add_rmsnorm': (
        'input: Tensor, residual: Tensor, weight: Tensor, eps: float',
        ('input', 'residual'),
    ),
    'layernorm': ('input: Tensor, gamma: Tensor, beta: Tensor, eps: float, out: Tensor', ('out',)),
    'silu_and_mul': ('input: Tensor, out: Tensor', ('out',)),
    'gelu_and_mul': ('input: Tensor, out: Tensor', ('out',)),
    'gelu_tanh_and_mul': ('input: Tensor, out: Tensor', ('out',)),
    'merge_state': (
        'v_a: Tensor, s_a: Tensor, v_b: Tensor, s_b: Tensor, v_out: Tensor, s_out: Tensor?',
        ('v_out', 's_out'),
    ),
    'merge_state_in_place': (
        'v: Tensor, s: Tensor, v_other: Tensor, s_other: Tensor, mask: Tensor?',
        ('v', 's'),
    ),
    'merge_states': ('v: Tensor, s: Tensor, v_out: Tensor, s_out: Tensor?', ('v_out', 's_out')),
    'apply_rope_pos_ids': (
        'q: Tensor, k: Tensor, q_out: Tensor, k_out: Tensor, pos_ids: Tensor, rotary_dim: int, interleave: int, rope_scale: float, rope_theta: float',
        ('q_out', 'k_out'),
    ),
    'apply_llama31_rope_pos_ids': (
        'q: Tensor, k: Tensor, q_out: Tensor, k_out: Tensor, pos_ids: Tensor, rotary_dim: int, interleave: int, rope_scale: float, rope_theta: float, low_freq_factor: float, high_freq_factor: float, old_context_len: float',
        ('q_out', 'k_out'),
    ),
    'apply_rope_with_cos_sin_cache': (
        'q: Tensor, k: Tensor, q_out: Tensor, k_out: Tensor, cos_sin_cache: Tensor, pos_ids: Tensor, interleave: int',
        ('q_out', 'k_out'),
    ),
    'append_paged_kv_cache': (
        'append_k: Tensor, append_v: Tensor, batch_indices: Tensor, positions: Tensor, paged_k_cache: Tensor, paged_v_cache: Tensor, kv_indices: Tensor, kv_indptr: Tensor, kv_last_page_len: Tensor, layout: int|str, k_scale: float, v_scale: float',
        ('paged_k_cache', 'paged_v_cache'),
    ),
    'get_batch_indices_positions': (
        'append_indptr: Tensor, seq_lens: Tensor, batch_indices: Tensor, positions: Tensor',
        ('batch_indices', 'positions'),
    ),
    'packbits': ('x: Tensor, bitorder: int|str, y: Tensor', ('y',)),
    'segment_packbits': (
        'x: Tensor, indptr: Tensor, bitorder: int|str, y: Tensor, indptr_new: Tensor',
        ('y', 'indptr_new'),
    ),
    'softmax': (
        'logits: Tensor, temperature_arr: Tensor?, temperature: float, out: Tensor',
        ('out',),
    ),
    'sampling_from_probs': (
        'probs: Tensor, samples: Tensor, seed: int, offset: int',
        ('samples',),
    ),
    'top_k_sampling_from_probs': (
        'probs: Tensor, top_k_arr: Tensor?, top_k: int, samples: Tensor, seed: int, offset: int',
        ('samples',),
    ),
    'top_p_sampling_from_probs': (
        'probs: Tensor, top_p_arr: Tensor?, top_p: float, samples: Tensor, seed: int, offset: int',
        ('samples',),
    ),
    'min_p_sampling_from_probs': (
        'probs: Tensor, min_p_arr: Tensor?, min_p: float, samples: Tensor, seed: int, offset: int',
        ('samples',),
    ),
    'top_k_top_p_sampling_from_logits': (
        'logits: Tensor, top_k_arr: Tensor?, top_k: int, top_p_arr: Tensor?, top_p: float, samples: Tensor, seed: int, offset: int',
        ('samples',),
    ),
    'top_k_top_p_sampling_from_probs': (
        'probs: Tensor, top_k_arr: Tensor?, top_k: int, top_p_arr: Tensor?, top_p: float, samples: Tensor, seed: int, offset: int',
        ('samples',),
    ),
    'sampling_from_logits': ('logits: Tensor, samples: Tensor, seed: int, offset: int', ('samples',)),
    'chain_speculative_sampling': (
        'draft_probs: Tensor, draft_token_ids: Tensor, target_probs: Tensor, output_token_ids: Tensor, accepted_num: Tensor?, emitted_num: Tensor?, seed: int, offset: int',
        ('output_token_ids', 'accepted_num', 'emitted_num'),
    ),
    'top_k_renorm_probs': ('probs: Tensor, top_k_arr: Tensor?, top_k: int, out: Tensor', ('out',)),
    'top_p_renorm_probs': (
        'probs: Tensor, top_p_arr: Tensor?, top_p: float, out: Tensor',
        ('out',),
    ),
    'top_k_mask_logits': ('logits: Tensor, top_k_arr: Tensor?, top_k: int, out: Tensor', ('out',)),
    'single_decode': (
        'q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor?, layout: int|str, sm_scale: float, logits_soft_cap: float, window_left: int, pos_encoding: int|str, rope_scale: float, rope_theta: float, k_scale: float, v_scale: float, sinks: Tensor?, lse_base2: int?',
        ('out', 'lse'),
    ),
    'batch_decode_workspace_size': (
        'device_type: int, device_id: int, max_batch: int, num_qo_heads: int, num_kv_heads: int, head_dim: int',
        (),
    ),
    'batch_decode_plan': (
        'workspace: Tensor, indptr: Tensor, last_page_len: Tensor, num_qo_heads: int, num_kv_heads: int, head_dim: int, page_size: int, q_dtype: dtype, kv_dtype: dtype, max_batch: int, sm_scale: float, logits_soft_cap: float, window_left: int, pos_encoding: int|str, rope_scale: float, rope_theta: float, k_scale: float, v_scale: float, plan: int',
        ('workspace',),
    ),
    'batch_decode_run': (
        'plan: int, q: Tensor, paged_k_cache: Tensor, paged_v_cache: Tensor, indptr: Tensor, indices: Tensor, last_page_len: Tensor, layout: int|str, out: Tensor, lse: Tensor?, sinks: Tensor?, lse_base2: int?',
        ('out', 'lse'),
    ),
    'batch_decode_plan_destroy': ('plan: int', ()),
    'single_prefill': (
        'q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor?, layout: int|str, sm_scale: float, logits_soft_cap: float, window_left: int, pos_encoding: int|str, rope_scale: float, rope_theta: float, k_scale: float, v_scale: float, causal: int, sinks: Tensor?, lse_base2: int?',
        ('out', 'lse'),
    ),
    'batch_prefill_workspace_size': (
        'device_type: int, device_id: int, max_batch: int, max_qo_tokens: int, num_qo_heads: int, num_kv_heads: int, head_dim: int',
        (),
    ),
    'batch_prefill_ragged_plan': (
        'workspace: Tensor, qo_indptr: Tensor, kv_indptr: Tensor, num_qo_heads: int, num_kv_heads: int, head_dim: int, q_dtype: dtype, kv_dtype: dtype, max_batch: int, max_qo_tokens: int, sm_scale: float, logits_soft_cap: float, window_left: int, pos_encoding: int|str, rope_scale: float, rope_theta: float, k_scale: float, v_scale: float, causal: int, plan: int, custom_mask: Tensor?, head_dim_vo: int?',
        ('workspace',),
    ),
    'batch_prefill_paged_plan': (
        'workspace: Tensor, qo_indptr: Tensor, kv_indptr: Tensor, kv_last_page_len: Tensor, num_qo_heads: int, num_kv_heads: int, head_dim: int, page_size: int, q_dtype: dtype, kv_dtype: dtype, max_batch: int, max_qo_tokens: int, sm_scale: float, logits_soft_cap: float, window_left: int, pos_encoding: int|str, rope_scale: float, rope_theta: float, k_scale: float, v_scale: float, causal: int, plan: int, custom_mask: Tensor?',
        ('workspace',),
    ),
    'batch_prefill_ragged_run': (
        'plan: int, q: Tensor, k: Tensor, v: Tensor, layout: int|str, out: Tensor, lse: Tensor?, sinks: Tensor?, lse_base2: int?',
        ('out', 'lse'),
    ),
    'batch_prefill_paged_run': (
        'plan: int, q: Tensor, paged_k_cache: Tensor, paged_v_cache: Tensor, kv_indices: Tensor, layout: int|str, out: Tensor, lse: Tensor?, sinks: Tensor?, lse_base2: int?',
        ('out', 'lse'),
    ),
    'batch_prefill_plan_destroy': ('plan: int', ()),
    'batch_mla_workspace_size': (
        'device_type: int, device_id: int, max_batch: int, max_qo_tokens: int, num_heads: int',
        (),
    ),
    'batch_mla_paged_plan': (
        'workspace: Tensor, qo_indptr: Tensor, kv_indptr: Tensor, kv_len: Tensor, num_heads: int, head_dim_ckv: int, head_dim_kpe: int, page_size: int, causal: int, sm_scale: float, q_dtype: dtype, kv_dtype: dtype, max_batch: int, max_qo_tokens: int, plan: int',
        ('workspace',),
    ),
    'batch_mla_paged_run': (
        'plan: int, q_nope: Tensor, q_pe: Tensor, ckv_cache: Tensor, kpe_cache: Tensor, kv_indices: Tensor, out: Tensor, lse: Tensor?',
        ('out', 'lse'),
    ),
    'batch_mla_plan_destroy': ('plan: int', ()),
    'append_paged_mla_kv_cache': (
        'append_ckv: Tensor, append_kpe: Tensor, batch_indices: Tensor, positions: Tensor, ckv_cache: Tensor, kpe_cache: Tensor, kv_indices: Tensor, kv_indptr: Tensor, kv_last_page_len: Tensor',
        ('ckv_cache', 'kpe_cache'),
    ),
    'moe_routing': (
        'logits: Tensor, correction_bias: Tensor?, method: int, top_k: int, n_group: int, topk_group: int, routed_scaling_factor: float, expert_ids: Tensor, weights: Tensor',
        ('expert_ids', 'weights'),
    ),
    'moe_max_tiles': ('num_tokens: int, top_k: int, local_num_experts: int, tile_size: int', ()),
    'moe_sort_workspace_size': (
        'num_tokens: int, top_k: int, num_experts: int, local_expert_offset: int, local_num_experts: int, tile_size: int',
        (),
    ),
    'moe_sort': (
        'expert_ids: Tensor, num_experts: int, local_expert_offset: int, local_num_experts: int, tile_size: int, workspace: Tensor, tile_idx_to_expert_idx: Tensor, tile_idx_to_mn_limit: Tensor, expanded_idx_to_permuted_idx: Tensor, permuted_idx_to_expanded_idx: Tensor, num_non_exiting_tiles: Tensor, total_num_padded_tokens: Tensor',
        ('workspace', 'tile_idx_to_expert_idx', 'tile_idx_to_mn_limit', 'expanded_idx_to_permuted_idx', 'permuted_idx_to_expanded_idx', 'num_non_exiting_tiles', 'total_num_padded_tokens'),
    ),
    'moe_permute': (
        'x: Tensor, permuted_idx_to_expanded_idx: Tensor, num_non_exiting_tiles: Tensor, top_k: int, tile_size: int, out: Tensor',
        ('out',),
    ),
    'moe_finalize': (
        'y: Tensor, expanded_idx_to_permuted_idx: Tensor, weights: Tensor, accumulate: int, out: Tensor',
        ('out',),
    ),
    'moe_grouped_gemm': (
        'a: Tensor, weights: Tensor, tile_idx_to_expert_idx: Tensor, tile_idx_to_mn_limit: Tensor, expanded_idx_to_permuted_idx: Tensor, permuted_idx_to_expanded_idx: Tensor, num_non_exiting_tiles: Tensor, total_num_padded_tokens: Tensor, tile_size: int, activation: int, gate_first: int, gather: int, block_m: int, out: Tensor',
        ('out',),
    ),
    'fused_moe_workspace_size': (
        'num_tokens: int, hidden: int, inter: int, method: int, top_k: int, n_group: int, topk_group: int, routed_scaling_factor: float, num_experts: int, local_expert_offset: int, local_num_experts: int, tile_size: int, gate_first: int, accumulate: int, block_m: int',
        (),
    ),
    'fused_moe': (
        'x: Tensor, router_logits: Tensor?, correction_bias: Tensor?, expert_ids: Tensor?, expert_weights: Tensor?, w13: Tensor, w2: Tensor, method: int, top_k: int, n_group: int, topk_group: int, routed_scaling_factor: float, num_experts: int, local_expert_offset: int, local_num_experts: int, tile_size: int, gate_first: int, accumulate: int, block_m: int, workspace: Tensor, out: Tensor',
        ('workspace', 'out'),
    ),
}


def parse(sig):
    """[(name, type)] of a signature "a: Tensor, b: float"."""
    if not sig:
        return []
    return [tuple(p.strip() for p in part.split(":", 1)) for part in sig.split(",")]
