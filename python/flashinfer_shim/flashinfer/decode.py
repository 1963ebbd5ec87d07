"""flashinfer.decode over fi_runtime."""

from fi_runtime.flashinfer import BatchDecodeWithPagedKVCacheWrapper, single_decode_with_kv_cache

from . import _missing
from .jit.attention import gen_batch_decode_module, gen_single_decode_module  # noqa: F401 (stubs)


class CUDAGraphBatchDecodeWithPagedKVCacheWrapper(BatchDecodeWithPagedKVCacheWrapper):
    """FlashInfer's CUDA-graph decode wrapper: BatchDecodeWithPagedKVCacheWrapper with
    use_cuda_graph=True over the three index buffers (listed in _missing.DEFINED_HERE)."""

    def __init__(self, workspace_buffer, indptr_buffer, indices_buffer, last_page_len_buffer,
                 kv_layout="NHD", use_tensor_cores=False):
        super().__init__(workspace_buffer, kv_layout, use_cuda_graph=True,
                         use_tensor_cores=use_tensor_cores, paged_kv_indptr_buffer=indptr_buffer,
                         paged_kv_indices_buffer=indices_buffer,
                         paged_kv_last_page_len_buffer=last_page_len_buffer)


__all__ = ["BatchDecodeWithPagedKVCacheWrapper", "CUDAGraphBatchDecodeWithPagedKVCacheWrapper",
           "single_decode_with_kv_cache"] + _missing.names("decode")
_missing.install(__name__)
