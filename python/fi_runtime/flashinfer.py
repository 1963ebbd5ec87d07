"""FlashInfer's Python names and signatures over fi_runtime (flashinfer-ai/flashinfer's
current API, for what fi_runtime implements): `from fi_runtime import flashinfer`, then code
written for `import flashinfer` runs unchanged. Outputs are allocated like FlashInfer's
(torch tensors for torch inputs; numpy arrays for numpy ones). An argument FlashInfer has
and fi_runtime lacks (custom masks, ALIBI, ...) raises UnsupportedError naming it;
arguments that only tune FlashInfer's kernels (enable_pdl, use_tensor_cores, non_blocking,
backend="auto") are accepted and ignored. The attention wrappers are in
fi_runtime._wrappers and re-exported here."""

from . import UnsupportedError  # noqa: F401
from ._util import (dtype_like, empty, host_i32, is_torch, kv_pair, layout, number, param,
                    pos_encoding, run, tensor, torch, unsupported)
from ._wrappers import (BatchDecodeWithPagedKVCacheWrapper,  # noqa: F401
                        BatchPrefillWithPagedKVCacheWrapper,
                        BatchPrefillWithRaggedKVCacheWrapper,
                        BatchMLAPagedAttentionWrapper)

# ---- norms ----


def _norm(name, input, weight, eps, out):
    tensor(name, "input", input)
    tensor(name, "weight", weight)
    out = empty(input, input.shape) if out is None else tensor(name, "out", out)
    run(name, input, weight, number(name, "eps", eps), out)
    return out


def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    return _norm("rmsnorm", input, weight, eps, out)


def gemma_rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    return _norm("gemma_rmsnorm", input, weight, eps, out)


def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    run("fused_add_rmsnorm", tensor("fused_add_rmsnorm", "input", input),
        tensor("fused_add_rmsnorm", "residual", residual),
        tensor("fused_add_rmsnorm", "weight", weight), number("fused_add_rmsnorm", "eps", eps))


def gemma_fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    fn = "gemma_fused_add_rmsnorm"
    run(fn, tensor(fn, "input", input), tensor(fn, "residual", residual),
        tensor(fn, "weight", weight), number(fn, "eps", eps))


def layernorm(input, gemma, beta, eps=1e-6):
    """FlashInfer names the scale `gemma`."""
    out = empty(tensor("layernorm", "input", input), input.shape)
    run("layernorm", input, tensor("layernorm", "gemma", gemma), tensor("layernorm", "beta", beta),
        number("layernorm", "eps", eps), out)
    return out


# ---- gated activations ----


def _act(name, input, out):
    tensor(name, "input", input)
    if len(input.shape) < 1 or input.shape[-1] % 2:
        raise ValueError(f"{name}: input's last dimension must be even (gate | up), got shape "
                         f"{tuple(input.shape)}")
    if out is None:
        out = empty(input, tuple(input.shape[:-1]) + (input.shape[-1] // 2,))
    shape2 = lambda t: t.reshape(-1, t.shape[-1]) if len(t.shape) != 2 else t  # noqa: E731
    run(name, shape2(input), shape2(tensor(name, "out", out)))
    return out


def silu_and_mul(input, out=None, enable_pdl=None):
    return _act("silu_and_mul", input, out)


def gelu_and_mul(input, out=None, enable_pdl=None):
    return _act("gelu_and_mul", input, out)


def gelu_tanh_and_mul(input, out=None, enable_pdl=None):
    return _act("gelu_tanh_and_mul", input, out)


# ---- RoPE ----


def _rope(fn, q, k, pos_ids, rotary_dim, interleave, inplace, extra=()):
    tensor(fn, "q", q), tensor(fn, "k", k), tensor(fn, "pos_ids", pos_ids)
    if rotary_dim is None:
        rotary_dim = q.shape[-1]
    q_out, k_out = (q, k) if inplace else (empty(q, q.shape), empty(k, k.shape))
    run(fn.replace("_inplace", ""), q, k, q_out, k_out, pos_ids,
        number(fn, "rotary_dim", rotary_dim, int), int(bool(interleave)), *extra)
    return None if inplace else (q_out, k_out)


def apply_rope_pos_ids(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1,
                       rope_theta=1e4):
    return _rope("apply_rope_pos_ids", q, k, pos_ids, rotary_dim, interleave, False,
                 (float(rope_scale), float(rope_theta)))


def apply_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1,
                               rope_theta=1e4):
    _rope("apply_rope_pos_ids_inplace", q, k, pos_ids, rotary_dim, interleave, True,
          (float(rope_scale), float(rope_theta)))


def apply_llama31_rope_pos_ids(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=8,
                               rope_theta=5e5, low_freq_factor=1, high_freq_factor=4,
                               old_context_len=8192):
    return _rope("apply_llama31_rope_pos_ids", q, k, pos_ids, rotary_dim, interleave, False,
                 (float(rope_scale), float(rope_theta), float(low_freq_factor),
                  float(high_freq_factor), float(old_context_len)))


def apply_llama31_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False,
                                       rope_scale=8, rope_theta=5e5, low_freq_factor=1,
                                       high_freq_factor=4, old_context_len=8192):
    _rope("apply_llama31_rope_pos_ids_inplace", q, k, pos_ids, rotary_dim, interleave, True,
          (float(rope_scale), float(rope_theta), float(low_freq_factor),
           float(high_freq_factor), float(old_context_len)))


def _cos_sin(fn, positions, query, key, head_size, cos_sin_cache, is_neox, inplace):
    tensor(fn, "positions", positions), tensor(fn, "query", query), tensor(fn, "key", key)
    tensor(fn, "cos_sin_cache", cos_sin_cache)
    head_size = number(fn, "head_size", head_size, int)
    if query.shape[-1] % head_size or key.shape[-1] % head_size:
        raise ValueError(f"{fn}: query and key's last dimension must be multiples of head_size "
                         f"{head_size}")
    q3 = query.reshape(query.shape[0], -1, head_size)
    k3 = key.reshape(key.shape[0], -1, head_size)
    q_out, k_out = (q3, k3) if inplace else (empty(q3, q3.shape), empty(k3, k3.shape))
    run("apply_rope_with_cos_sin_cache", q3, k3, q_out, k_out, cos_sin_cache, positions,
        0 if is_neox else 1)
    if not inplace:
        return q_out.reshape(query.shape), k_out.reshape(key.shape)


def apply_rope_with_cos_sin_cache(positions, query, key, head_size, cos_sin_cache,
                                  is_neox=True):
    """cos_sin_cache must be float32 [max_pos, rotary_dim] (cos half, then sin half)."""
    return _cos_sin("apply_rope_with_cos_sin_cache", positions, query, key, head_size,
                    cos_sin_cache, is_neox, False)


def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache,
                                          is_neox=True):
    _cos_sin("apply_rope_with_cos_sin_cache_inplace", positions, query, key, head_size,
             cos_sin_cache, is_neox, True)


# ---- cascade ----
# FlashInfer's lse is log2 of the softmax denominator (its attention writes it so, and so do
# this module's attention functions: fi_attention_extras.lse_base2); fi_merge_state takes
# natural logs: the states are converted on the way in and out.

_LN2, _LOG2E = 0.6931471805599453, 1.4426950408889634


def merge_state(v_a, s_a, v_b, s_b):
    fn = "merge_state"
    tensor(fn, "v_a", v_a), tensor(fn, "s_a", s_a), tensor(fn, "v_b", v_b), tensor(fn, "s_b", s_b)
    v, s = empty(v_a, v_a.shape), empty(s_a, s_a.shape, "float32")
    run(fn, v_a, s_a * _LN2, v_b, s_b * _LN2, v, s)
    s *= _LOG2E
    return v, s


def merge_state_in_place(v, s, v_other, s_other, mask=None):
    fn = "merge_state_in_place"
    tensor(fn, "s", s)
    s *= _LN2
    try:
        run(fn, tensor(fn, "v", v), s, tensor(fn, "v_other", v_other),
            tensor(fn, "s_other", s_other) * _LN2, tensor(fn, "mask", mask, optional=True))
    finally:
        s *= _LOG2E


def merge_states(v, s):
    fn = "merge_states"
    tensor(fn, "v", v), tensor(fn, "s", s)
    if len(v.shape) != 4:
        raise ValueError(f"{fn}: v must be [seq, num_states, heads, head_dim], got shape "
                         f"{tuple(v.shape)}")
    v_out = empty(v, (v.shape[0], v.shape[2], v.shape[3]))
    s_out = empty(s, (s.shape[0], s.shape[2]), "float32")
    run(fn, v, s * _LN2, v_out, s_out)
    s_out *= _LOG2E
    return v_out, s_out


# ---- paged KV cache ----


def get_batch_indices_positions(append_indptr, seq_lens, nnz, batch_indices=None,
                                positions=None):
    fn = "get_batch_indices_positions"
    tensor(fn, "append_indptr", append_indptr), tensor(fn, "seq_lens", seq_lens)
    nnz = number(fn, "nnz", nnz, int)
    if batch_indices is None:
        batch_indices = empty(append_indptr, (nnz,), "int32")
    if positions is None:
        positions = empty(append_indptr, (nnz,), "int32")
    run(fn, append_indptr, seq_lens, tensor(fn, "batch_indices", batch_indices),
        tensor(fn, "positions", positions))
    return batch_indices, positions


def append_paged_kv_cache(append_key, append_value, batch_indices, positions, paged_kv_cache,
                          kv_indices, kv_indptr, kv_last_page_len, kv_layout="NHD"):
    fn = "append_paged_kv_cache"
    k_cache, v_cache = kv_pair(fn, paged_kv_cache)
    run(fn, tensor(fn, "append_key", append_key), tensor(fn, "append_value", append_value),
        tensor(fn, "batch_indices", batch_indices), tensor(fn, "positions", positions),
        k_cache, v_cache, tensor(fn, "kv_indices", kv_indices),
        tensor(fn, "kv_indptr", kv_indptr), tensor(fn, "kv_last_page_len", kv_last_page_len),
        layout(fn, kv_layout), 1.0, 1.0)


def append_paged_mla_kv_cache(append_ckv, append_kpe, batch_indices, positions, ckv_cache,
                              kpe_cache, kv_indices, kv_indptr, kv_last_page_len):
    fn = "append_paged_mla_kv_cache"
    run(fn, tensor(fn, "append_ckv", append_ckv), tensor(fn, "append_kpe", append_kpe),
        tensor(fn, "batch_indices", batch_indices), tensor(fn, "positions", positions),
        tensor(fn, "ckv_cache", ckv_cache), tensor(fn, "kpe_cache", kpe_cache),
        tensor(fn, "kv_indices", kv_indices), tensor(fn, "kv_indptr", kv_indptr),
        tensor(fn, "kv_last_page_len", kv_last_page_len))


def _bitorder(fn, bitorder):
    if bitorder not in ("big", "little"):
        raise ValueError(f"{fn}: bitorder must be 'big' or 'little', got {bitorder!r}")
    return bitorder


def packbits(x, bitorder="big"):
    """FlashInfer's packbits: a 1-D bool / uint8 tensor into uint8 bytes of 8 elements."""
    fn = "packbits"
    tensor(fn, "x", x)
    y = empty(x, ((int(x.shape[0]) + 7) // 8,), "uint8")
    run(fn, x, _bitorder(fn, bitorder), y)
    return y


def segment_packbits(x, indptr, bitorder="big"):
    """FlashInfer's segment_packbits: each segment x[indptr[i]:indptr[i+1]] packed on its
    own (padded to whole bytes), and where each segment's bytes start."""
    fn = "segment_packbits"
    tensor(fn, "x", x)
    ih = host_i32(fn, "indptr", indptr)
    total = sum((int(ih[i + 1]) - int(ih[i]) + 7) // 8 for i in range(int(ih.shape[0]) - 1))
    y = empty(x, (total,), "uint8")
    indptr_new = empty(x, (int(ih.shape[0]),), "int32")
    ind = torch.as_tensor(ih, dtype=torch.int32).to(x.device) if is_torch(x) else ih  # on x's device
    run(fn, x, ind, _bitorder(fn, bitorder), y, indptr_new)
    return y, indptr_new


# ---- sampling ----

_counter = [0]


def _seed_offset(fn, generator, seed, offset):
    """(seed, offset) of a draw: the caller's ints, else the generator's (or torch's
    process) seed and a fresh offset each call."""
    for pname, x in (("seed", seed), ("offset", offset)):
        if hasattr(x, "__dlpack__"):
            unsupported(fn, pname, "a tensor", "is not supported: pass an int")
    if seed is not None or offset is not None:
        return int(seed or 0) & (2**64 - 1), int(offset or 0) & (2**64 - 1)
    if generator is not None:
        base = generator.initial_seed()
    else:
        base = torch.initial_seed() if torch is not None else 0
    _counter[0] += 1
    return base & (2**64 - 1), _counter[0]


def _sample_checks(fn, probs, indices, check_nan):
    tensor(fn, "probs" if "logits" not in fn else "logits", probs)
    if indices is not None:
        unsupported(fn, "indices", "a tensor")
    if check_nan and is_torch(probs) and bool(torch.isnan(probs).any()):
        raise ValueError(f"{fn}: input probs contains NaN")


def _draw(fn, probs, params, generator, seed, offset, return_valid):
    samples = empty(probs, (probs.shape[0],), "int32")
    s, o = _seed_offset(fn, generator, seed, offset)
    run(fn, probs, *params, samples, s, o)
    if return_valid:
        return samples, samples >= 0
    return samples


def softmax(logits, temperature=None, enable_pdl=None):
    tensor("softmax", "logits", logits)
    arr, t = param("softmax", "temperature", 1.0 if temperature is None else temperature, float)
    out = empty(logits, logits.shape, "float32")
    run("softmax", logits, arr, t if arr is None else 1.0, out)
    return out


def sampling_from_probs(probs, indices=None, deterministic=True, generator=None,
                        check_nan=False, seed=None, offset=None, return_valid=False):
    _sample_checks("sampling_from_probs", probs, indices, check_nan)
    return _draw("sampling_from_probs", probs, (), generator, seed, offset, return_valid)


def sampling_from_logits(logits, indices=None, deterministic=True, generator=None,
                         check_nan=False, seed=None, offset=None):
    _sample_checks("sampling_from_logits", logits, indices, check_nan)
    return _draw("sampling_from_logits", logits, (), generator, seed, offset, False)


def _filtered(fn, pname, kind, probs, value, indices, generator, check_nan, seed, offset,
              return_valid):
    _sample_checks(fn, probs, indices, check_nan)
    return _draw(fn, probs, param(fn, pname, value, kind), generator, seed, offset, return_valid)


def top_p_sampling_from_probs(probs, top_p, indices=None, deterministic=True, generator=None,
                              check_nan=False, seed=None, offset=None, return_valid=False):
    return _filtered("top_p_sampling_from_probs", "top_p", float, probs, top_p, indices,
                     generator, check_nan, seed, offset, return_valid)


def top_k_sampling_from_probs(probs, top_k, indices=None, deterministic=True, generator=None,
                              check_nan=False, seed=None, offset=None, return_valid=False):
    return _filtered("top_k_sampling_from_probs", "top_k", int, probs, top_k, indices,
                     generator, check_nan, seed, offset, return_valid)


def min_p_sampling_from_probs(probs, min_p, indices=None, deterministic=True, generator=None,
                              check_nan=False, seed=None, offset=None, return_valid=False):
    return _filtered("min_p_sampling_from_probs", "min_p", float, probs, min_p, indices,
                     generator, check_nan, seed, offset, return_valid)


def top_k_top_p_sampling_from_logits(logits, top_k, top_p, indices=None,
                                     filter_apply_order="top_k_first", deterministic=True,
                                     generator=None, check_nan=False, seed=None, offset=None):
    fn = "top_k_top_p_sampling_from_logits"
    if filter_apply_order != "top_k_first":
        unsupported(fn, "filter_apply_order", filter_apply_order)
    _sample_checks(fn, logits, indices, check_nan)
    return _draw(fn, logits, param(fn, "top_k", top_k, int) + param(fn, "top_p", top_p, float),
                 generator, seed, offset, False)


def top_k_top_p_sampling_from_probs(probs, top_k, top_p, indices=None,
                                    filter_apply_order="top_k_first", deterministic=True,
                                    generator=None, check_nan=False, seed=None, offset=None,
                                    return_valid=False):
    """top_k_first: the top-k set renormalized, then a top-p draw from it (FlashInfer's
    definition)."""
    fn = "top_k_top_p_sampling_from_probs"
    if filter_apply_order != "top_k_first":
        unsupported(fn, "filter_apply_order", filter_apply_order)
    _sample_checks(fn, probs, indices, check_nan)
    return _draw(fn, probs, param(fn, "top_k", top_k, int) + param(fn, "top_p", top_p, float),
                 generator, seed, offset, return_valid)


def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs,
                               maybe_output_accepted_token_num=None,
                               maybe_output_emitted_draft_token_num=None, deterministic=True,
                               generator=None, seed=None, offset=None):
    """FlashInfer's chain_speculative_sampling: the verified tokens [batch, S + 1] (-1 after
    the drawn one); the counters, when given, are added to in place."""
    fn = "chain_speculative_sampling"
    for name, x in (("draft_probs", draft_probs), ("draft_token_ids", draft_token_ids),
                    ("target_probs", target_probs)):
        tensor(fn, name, x)
    if len(draft_token_ids.shape) != 2:
        raise ValueError(f"{fn}: draft_token_ids has shape {tuple(draft_token_ids.shape)}; "
                         "[batch, S] is needed")
    b, n = draft_token_ids.shape[0], draft_token_ids.shape[1]
    out = empty(draft_probs, (b, n + 1), "int32")
    s, o = _seed_offset(fn, generator, seed, offset)
    run(fn, draft_probs, draft_token_ids, target_probs, out, maybe_output_accepted_token_num,
        maybe_output_emitted_draft_token_num, s, o)
    return out


def _filter(fn, pname, kind, x, value):
    tensor(fn, "logits" if "logits" in fn else "probs", x)
    out = empty(x, x.shape)
    run(fn, x, *param(fn, pname, value, kind), out)
    return out


def top_p_renorm_probs(probs, top_p, is_deterministic=False):
    return _filter("top_p_renorm_probs", "top_p", float, probs, top_p)


def top_k_renorm_probs(probs, top_k):
    return _filter("top_k_renorm_probs", "top_k", int, probs, top_k)


def top_k_mask_logits(logits, top_k):
    return _filter("top_k_mask_logits", "top_k", int, logits, top_k)


# ---- single-request attention ----


def _scales(fn, sm_scale, head_dim, q_scale, k_scale, v_scale):
    """(sm_scale, k_scale, v_scale): q_scale folds into sm_scale, as FlashInfer does."""
    s = (1.0 / head_dim ** 0.5) if sm_scale is None else number(fn, "sm_scale", sm_scale)
    if q_scale is not None:
        s *= number(fn, "q_scale", q_scale)
    return (s, 1.0 if k_scale is None else number(fn, "k_scale", k_scale),
            1.0 if v_scale is None else number(fn, "v_scale", v_scale))


def _attn_params(fn, head_dim, pos_encoding_mode, window_left, logits_soft_cap, sm_scale,
                 rope_scale, rope_theta, q_scale=None, k_scale=None, v_scale=None):
    """The 8 attention parameters of the exports (FT_ATTN_SIG's order)."""
    s, ks, vs = _scales(fn, sm_scale, head_dim, q_scale, k_scale, v_scale)
    return (s, 0.0 if logits_soft_cap is None else number(fn, "logits_soft_cap", logits_soft_cap),
            number(fn, "window_left", window_left, int), pos_encoding(fn, pos_encoding_mode),
            1.0 if rope_scale is None else number(fn, "rope_scale", rope_scale),
            1e4 if rope_theta is None else number(fn, "rope_theta", rope_theta), ks, vs)


def _lse(q, return_lse):
    """lse [tokens, heads] float32 when asked for."""
    return empty(q, (q.shape[0], q.shape[1]), "float32") if return_lse else None


def single_decode_with_kv_cache(q, k, v, kv_layout="NHD", pos_encoding_mode="NONE",
                                use_tensor_cores=False, q_scale=None, k_scale=None,
                                v_scale=None, window_left=-1, logits_soft_cap=None,
                                sm_scale=None, rope_scale=None, rope_theta=None,
                                return_lse=False):
    fn = "single_decode_with_kv_cache"
    tensor(fn, "q", q), tensor(fn, "k", k), tensor(fn, "v", v)
    out = empty(q, q.shape)
    lse = empty(q, (q.shape[0],), "float32") if return_lse else None
    run("single_decode", q, k, v, out, lse, layout(fn, kv_layout),
        *_attn_params(fn, q.shape[-1], pos_encoding_mode, window_left, logits_soft_cap,
                      sm_scale, rope_scale, rope_theta, q_scale, k_scale, v_scale), None, 1)
    return (out, lse) if return_lse else out


def single_prefill_with_kv_cache(q, k, v, scale_q=None, scale_k=None, scale_v=None, o_dtype=None,
                                 custom_mask=None, packed_custom_mask=None, causal=False,
                                 kv_layout="NHD", pos_encoding_mode="NONE",
                                 use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
                                 logits_soft_cap=None, rope_scale=None, rope_theta=None,
                                 backend="auto", return_lse=False, kv_cache_sf=None,
                                 k_scale=None, v_scale=None):
    fn = "single_prefill_with_kv_cache"
    for pname, val in (("scale_q", scale_q), ("scale_k", scale_k), ("scale_v", scale_v),
                       ("custom_mask", custom_mask), ("packed_custom_mask", packed_custom_mask),
                       ("kv_cache_sf", kv_cache_sf)):
        if val is not None:
            unsupported(fn, pname, type(val).__name__)
    if use_fp16_qk_reduction:
        unsupported(fn, "use_fp16_qk_reduction", True)
    tensor(fn, "q", q), tensor(fn, "k", k), tensor(fn, "v", v)
    if o_dtype is not None and o_dtype != q.dtype:
        unsupported(fn, "o_dtype", o_dtype, "differs from q's dtype, which fi_runtime writes")
    out = empty(q, tuple(q.shape[:-1]) + (v.shape[-1],))  # V's head_dim (192 / 128: apart)
    lse = _lse(q, return_lse)
    run("single_prefill", q, k, v, out, lse, layout(fn, kv_layout),
        *_attn_params(fn, q.shape[-1], pos_encoding_mode, window_left, logits_soft_cap,
                      sm_scale, rope_scale, rope_theta, None, k_scale, v_scale),
        int(bool(causal)), None, 1)
    return (out, lse) if return_lse else out


__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "dtype_like", "empty", "is_torch", "kv_pair", "layout", "number", "param", "pos_encoding",
    "run", "tensor", "torch", "unsupported")]
