"""flashinfer.prefill over fi_runtime."""

import functools

from fi_runtime.flashinfer import (BatchPrefillWithPagedKVCacheWrapper,
                                   BatchPrefillWithRaggedKVCacheWrapper,
                                   single_prefill_with_kv_cache)

from . import _missing
from .jit.attention import gen_batch_prefill_module, gen_single_prefill_module  # noqa: F401 (stubs)

# as FlashInfer defines it (listed in _missing.DEFINED_HERE)
single_prefill_with_kv_cache_return_lse = functools.partial(single_prefill_with_kv_cache,
                                                            return_lse=True)

__all__ = ["BatchPrefillWithPagedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper",
           "single_prefill_with_kv_cache", "single_prefill_with_kv_cache_return_lse"] + \
    _missing.names("prefill")
_missing.install(__name__)
