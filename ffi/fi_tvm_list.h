/* fi_tvm_list.h: every export of libfi_runtime_tvm.so, X(name, signature), once.
 * An export is the C function fi_<name> of fi_runtime.h without rt and stream, its
 * arguments in the same order (structs flattened field by field in their declaration
 * order; "Tensor?" may be None); the stream is TVM-FFI's current one for the tensors'
 * device. Names here are what tvm_ffi.load_module(...)[name] finds. */
#ifndef FI_TVM_LIST_H
#define FI_TVM_LIST_H

/* fi_attention_params, field by field (fi_attention_params_init's defaults: 0, 0, -1,
 * "NONE", 1, 1e4, 1, 1). */
#define FT_ATTN_SIG                                                                           \
  "sm_scale: float, logits_soft_cap: float, window_left: int, pos_encoding: int|str, "       \
  "rope_scale: float, rope_theta: float, k_scale: float, v_scale: float"
/* fi_moe_routing_params. */
#define FT_ROUTING_SIG                                                                        \
  "method: int, top_k: int, n_group: int, topk_group: int, routed_scaling_factor: float"
/* fi_moe_sort_outputs. */
#define FT_SORT_OUT_SIG                                                                       \
  "tile_idx_to_expert_idx: Tensor, tile_idx_to_mn_limit: Tensor, "                           \
  "expanded_idx_to_permuted_idx: Tensor, permuted_idx_to_expanded_idx: Tensor, "             \
  "num_non_exiting_tiles: Tensor, total_num_padded_tokens: Tensor"
/* fi_fused_moe_params after its routing. */
#define FT_FUSED_SIG                                                                          \
  FT_ROUTING_SIG ", num_experts: int, local_expert_offset: int, local_num_experts: int, "    \
                 "tile_size: int, gate_first: int, accumulate: int, block_m: int"

#define FT_EXPORTS(X)                                                                         \
  /* the library */                                                                           \
  X(version, "")                                                                              \
  X(last_error, "")                                                                           \
  X(list_functions, "")                                                                       \
  X(init, "cache_path: str?, system_cache_path: str?, log_level: int")                        \
  /* norms */                                                                                 \
  X(rmsnorm, "input: Tensor, weight: Tensor, eps: float, out: Tensor")                        \
  X(fused_add_rmsnorm, "input: Tensor, residual: Tensor, weight: Tensor, eps: float")         \
  X(gemma_rmsnorm, "input: Tensor, weight: Tensor, eps: float, out: Tensor")                  \
  X(gemma_fused_add_rmsnorm, "input: Tensor, residual: Tensor, weight: Tensor, eps: float")   \
  X(layernorm, "input: Tensor, gamma: Tensor, beta: Tensor, eps: float, out: Tensor")         \
  /* gated activations */                                                                     \
  X(silu_and_mul, "input: Tensor, out: Tensor")                                               \
  X(gelu_and_mul, "input: Tensor, out: Tensor")                                               \
  X(gelu_tanh_and_mul, "input: Tensor, out: Tensor")                                          \
  /* cascade */                                                                               \
  X(merge_state, "v_a: Tensor, s_a: Tensor, v_b: Tensor, s_b: Tensor, v_out: Tensor, "       \
                 "s_out: Tensor?")                                                            \
  X(merge_state_in_place, "v: Tensor, s: Tensor, v_other: Tensor, s_other: Tensor, "         \
                          "mask: Tensor?")                                                    \
  X(merge_states, "v: Tensor, s: Tensor, v_out: Tensor, s_out: Tensor?")                      \
  /* RoPE */                                                                                  \
  X(apply_rope_pos_ids, "q: Tensor, k: Tensor, q_out: Tensor, k_out: Tensor, "               \
                        "pos_ids: Tensor, rotary_dim: int, interleave: int, rope_scale: float, " \
                        "rope_theta: float")                                                  \
  X(apply_llama31_rope_pos_ids,                                                               \
    "q: Tensor, k: Tensor, q_out: Tensor, k_out: Tensor, pos_ids: Tensor, rotary_dim: int, "  \
    "interleave: int, rope_scale: float, rope_theta: float, low_freq_factor: float, "         \
    "high_freq_factor: float, old_context_len: float")                                        \
  X(apply_rope_with_cos_sin_cache, "q: Tensor, k: Tensor, q_out: Tensor, k_out: Tensor, "    \
                                   "cos_sin_cache: Tensor, pos_ids: Tensor, interleave: int") \
  /* paged KV cache */                                                                        \
  X(append_paged_kv_cache,                                                                    \
    "append_k: Tensor, append_v: Tensor, batch_indices: Tensor, positions: Tensor, "          \
    "paged_k_cache: Tensor, paged_v_cache: Tensor, kv_indices: Tensor, kv_indptr: Tensor, "   \
    "kv_last_page_len: Tensor, layout: int|str, k_scale: float, v_scale: float")              \
  X(get_batch_indices_positions, "append_indptr: Tensor, seq_lens: Tensor, "                 \
                                 "batch_indices: Tensor, positions: Tensor")                  \
  /* bit packing (prefill's packed custom masks) */                                           \
  X(packbits, "x: Tensor, bitorder: int|str, y: Tensor")                                      \
  X(segment_packbits, "x: Tensor, indptr: Tensor, bitorder: int|str, y: Tensor, "             \
                      "indptr_new: Tensor")                                                   \
  /* sampling */                                                                              \
  X(softmax, "logits: Tensor, temperature_arr: Tensor?, temperature: float, out: Tensor")     \
  X(sampling_from_probs, "probs: Tensor, samples: Tensor, seed: int, offset: int")            \
  X(top_k_sampling_from_probs, "probs: Tensor, top_k_arr: Tensor?, top_k: int, "             \
                               "samples: Tensor, seed: int, offset: int")                     \
  X(top_p_sampling_from_probs, "probs: Tensor, top_p_arr: Tensor?, top_p: float, "           \
                               "samples: Tensor, seed: int, offset: int")                     \
  X(min_p_sampling_from_probs, "probs: Tensor, min_p_arr: Tensor?, min_p: float, "           \
                               "samples: Tensor, seed: int, offset: int")                     \
  X(top_k_top_p_sampling_from_logits,                                                         \
    "logits: Tensor, top_k_arr: Tensor?, top_k: int, top_p_arr: Tensor?, top_p: float, "      \
    "samples: Tensor, seed: int, offset: int")                                                \
  X(top_k_top_p_sampling_from_probs,                                                          \
    "probs: Tensor, top_k_arr: Tensor?, top_k: int, top_p_arr: Tensor?, top_p: float, "       \
    "samples: Tensor, seed: int, offset: int")                                                \
  X(sampling_from_logits, "logits: Tensor, samples: Tensor, seed: int, offset: int")          \
  X(chain_speculative_sampling,                                                               \
    "draft_probs: Tensor, draft_token_ids: Tensor, target_probs: Tensor, "                    \
    "output_token_ids: Tensor, accepted_num: Tensor?, emitted_num: Tensor?, seed: int, "      \
    "offset: int")                                                                            \
  X(top_k_renorm_probs, "probs: Tensor, top_k_arr: Tensor?, top_k: int, out: Tensor")         \
  X(top_p_renorm_probs, "probs: Tensor, top_p_arr: Tensor?, top_p: float, out: Tensor")       \
  X(top_k_mask_logits, "logits: Tensor, top_k_arr: Tensor?, top_k: int, out: Tensor")         \
  /* decode attention */                                                                      \
  X(single_decode, "q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor?, "            \
                   "layout: int|str, " FT_ATTN_SIG ", sinks: Tensor?, lse_base2: int?")                        \
  X(batch_decode_workspace_size, "device_type: int, device_id: int, max_batch: int, "        \
                                 "num_qo_heads: int, num_kv_heads: int, head_dim: int")       \
  X(batch_decode_plan,                                                                        \
    "workspace: Tensor, indptr: Tensor, last_page_len: Tensor, num_qo_heads: int, "           \
    "num_kv_heads: int, head_dim: int, page_size: int, q_dtype: dtype, kv_dtype: dtype, "     \
    "max_batch: int, " FT_ATTN_SIG ", plan: int")                                             \
  X(batch_decode_run, "plan: int, q: Tensor, paged_k_cache: Tensor, paged_v_cache: Tensor, " \
                      "indptr: Tensor, indices: Tensor, last_page_len: Tensor, "              \
                      "layout: int|str, out: Tensor, lse: Tensor?, sinks: Tensor?, lse_base2: int?")           \
  X(batch_decode_plan_destroy, "plan: int")                                                   \
  /* prefill attention */                                                                     \
  X(single_prefill, "q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor?, "           \
                    "layout: int|str, " FT_ATTN_SIG ", causal: int, sinks: Tensor?, lse_base2: int?")          \
  X(batch_prefill_workspace_size,                                                             \
    "device_type: int, device_id: int, max_batch: int, max_qo_tokens: int, "                  \
    "num_qo_heads: int, num_kv_heads: int, head_dim: int")                                    \
  X(batch_prefill_ragged_plan,                                                                \
    "workspace: Tensor, qo_indptr: Tensor, kv_indptr: Tensor, num_qo_heads: int, "            \
    "num_kv_heads: int, head_dim: int, q_dtype: dtype, kv_dtype: dtype, max_batch: int, "     \
    "max_qo_tokens: int, " FT_ATTN_SIG ", causal: int, plan: int, custom_mask: Tensor?, "     \
    "head_dim_vo: int?")                                                                      \
  X(batch_prefill_paged_plan,                                                                 \
    "workspace: Tensor, qo_indptr: Tensor, kv_indptr: Tensor, kv_last_page_len: Tensor, "     \
    "num_qo_heads: int, num_kv_heads: int, head_dim: int, page_size: int, q_dtype: dtype, "   \
    "kv_dtype: dtype, max_batch: int, max_qo_tokens: int, " FT_ATTN_SIG ", causal: int, "     \
    "plan: int, custom_mask: Tensor?")                                                        \
  X(batch_prefill_ragged_run, "plan: int, q: Tensor, k: Tensor, v: Tensor, layout: int|str, " \
                              "out: Tensor, lse: Tensor?, sinks: Tensor?, lse_base2: int?")                    \
  X(batch_prefill_paged_run,                                                                  \
    "plan: int, q: Tensor, paged_k_cache: Tensor, paged_v_cache: Tensor, kv_indices: Tensor, " \
    "layout: int|str, out: Tensor, lse: Tensor?, sinks: Tensor?, lse_base2: int?")                             \
  X(batch_prefill_plan_destroy, "plan: int")                                                  \
  /* multi-head latent attention */                                                           \
  X(batch_mla_workspace_size,                                                                 \
    "device_type: int, device_id: int, max_batch: int, max_qo_tokens: int, num_heads: int")   \
  X(batch_mla_paged_plan,                                                                     \
    "workspace: Tensor, qo_indptr: Tensor, kv_indptr: Tensor, kv_len: Tensor, num_heads: int, " \
    "head_dim_ckv: int, head_dim_kpe: int, page_size: int, causal: int, sm_scale: float, "    \
    "q_dtype: dtype, kv_dtype: dtype, max_batch: int, max_qo_tokens: int, plan: int")          \
  X(batch_mla_paged_run, "plan: int, q_nope: Tensor, q_pe: Tensor, ckv_cache: Tensor, "      \
                         "kpe_cache: Tensor, kv_indices: Tensor, out: Tensor, lse: Tensor?")  \
  X(batch_mla_plan_destroy, "plan: int")                                                      \
  X(append_paged_mla_kv_cache,                                                                \
    "append_ckv: Tensor, append_kpe: Tensor, batch_indices: Tensor, positions: Tensor, "      \
    "ckv_cache: Tensor, kpe_cache: Tensor, kv_indices: Tensor, kv_indptr: Tensor, "           \
    "kv_last_page_len: Tensor")                                                               \
  /* mixture of experts */                                                                    \
  X(moe_routing, "logits: Tensor, correction_bias: Tensor?, " FT_ROUTING_SIG                  \
                 ", expert_ids: Tensor, weights: Tensor")                                     \
  X(moe_max_tiles, "num_tokens: int, top_k: int, local_num_experts: int, tile_size: int")     \
  X(moe_sort_workspace_size, "num_tokens: int, top_k: int, num_experts: int, "               \
                             "local_expert_offset: int, local_num_experts: int, tile_size: int") \
  X(moe_sort, "expert_ids: Tensor, num_experts: int, local_expert_offset: int, "             \
              "local_num_experts: int, tile_size: int, workspace: Tensor, " FT_SORT_OUT_SIG)  \
  X(moe_permute, "x: Tensor, permuted_idx_to_expanded_idx: Tensor, "                         \
                 "num_non_exiting_tiles: Tensor, top_k: int, tile_size: int, out: Tensor")    \
  X(moe_finalize, "y: Tensor, expanded_idx_to_permuted_idx: Tensor, weights: Tensor, "       \
                  "accumulate: int, out: Tensor")                                             \
  X(moe_grouped_gemm, "a: Tensor, weights: Tensor, " FT_SORT_OUT_SIG                          \
                      ", tile_size: int, activation: int, gate_first: int, gather: int, "     \
                      "block_m: int, out: Tensor")                                            \
  X(fused_moe_workspace_size, "num_tokens: int, hidden: int, inter: int, " FT_FUSED_SIG)     \
  X(fused_moe, "x: Tensor, router_logits: Tensor?, correction_bias: Tensor?, "               \
               "expert_ids: Tensor?, expert_weights: Tensor?, w13: Tensor, w2: Tensor, "     \
               FT_FUSED_SIG ", workspace: Tensor, out: Tensor")

#endif /* FI_TVM_LIST_H */
