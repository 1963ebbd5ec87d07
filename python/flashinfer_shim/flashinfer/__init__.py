"""A `flashinfer` package over fi_runtime, so that code and tests written for
`import flashinfer` (FlashInfer v0.6.9's module layout) run on fi_runtime's kernels:

    PYTHONPATH=python/flashinfer_shim:python python3 -c "import flashinfer; print(flashinfer)"

Every function and wrapper here is fi_runtime's (fi_runtime.flashinfer, fi_runtime._wrappers),
re-exported under FlashInfer's modules. FlashInfer names that fi_runtime does not implement
but that FlashInfer's tests reference are stubs raising
NotImplementedError("fi_runtime: <name> is not implemented"); those, and the few helpers the
shim defines itself, are all listed in flashinfer._missing. Arguments fi_runtime does not
support raise fi_runtime.UnsupportedError (a NotImplementedError) naming them."""

from . import jit as jit
from . import _missing
from . import activation, attention, cascade, decode, gemm, mla, norm, page, prefill  # noqa: F401
from . import quantization, rope, sampling, utils  # noqa: F401
from .activation import gelu_and_mul, gelu_tanh_and_mul, silu_and_mul  # noqa: F401
from .cascade import (BatchDecodeWithSharedPrefixPagedKVCacheWrapper,  # noqa: F401
                      BatchPrefillWithSharedPrefixPagedKVCacheWrapper,
                      MultiLevelCascadeAttentionWrapper, merge_state, merge_state_in_place,
                      merge_states)
from .decode import (BatchDecodeWithPagedKVCacheWrapper,  # noqa: F401
                     CUDAGraphBatchDecodeWithPagedKVCacheWrapper, fast_decode_plan,
                     single_decode_with_kv_cache)
from .gemm import SegmentGEMMWrapper, bmm_fp8  # noqa: F401
from .mla import BatchMLAPagedAttentionWrapper  # noqa: F401
from .norm import (fused_add_rmsnorm, fused_add_rmsnorm_quant,  # noqa: F401
                   gemma_fused_add_rmsnorm, gemma_rmsnorm, layernorm, rmsnorm, rmsnorm_quant)
from .page import (append_paged_kv_cache, append_paged_mla_kv_cache,  # noqa: F401
                   get_batch_indices_positions, get_seq_lens)
from .prefill import (BatchPrefillWithPagedKVCacheWrapper,  # noqa: F401
                      BatchPrefillWithRaggedKVCacheWrapper, single_prefill_with_kv_cache,
                      single_prefill_with_kv_cache_return_lse)
from .quantization import packbits, segment_packbits  # noqa: F401
from .rope import (apply_llama31_rope, apply_llama31_rope_inplace,  # noqa: F401
                   apply_llama31_rope_pos_ids, apply_llama31_rope_pos_ids_inplace, apply_rope,
                   apply_rope_inplace, apply_rope_pos_ids, apply_rope_pos_ids_inplace,
                   apply_rope_with_cos_sin_cache, apply_rope_with_cos_sin_cache_inplace)
from .sampling import (chain_speculative_sampling, min_p_sampling_from_probs,  # noqa: F401
                       sampling_from_logits, sampling_from_probs, softmax, top_k_mask_logits,
                       top_k_renorm_probs, top_k_sampling_from_probs,
                       top_k_top_p_sampling_from_logits, top_k_top_p_sampling_from_probs,
                       top_p_renorm_probs, top_p_sampling_from_probs)

from fi_runtime import UnsupportedError  # noqa: F401

# the FlashInfer API this shim mirrors, marked as not FlashInfer's own build
__version__ = "0.6.9+fi.runtime"
