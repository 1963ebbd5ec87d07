"""flashinfer.page over fi_runtime."""

from fi_runtime.flashinfer import (append_paged_kv_cache, append_paged_mla_kv_cache,
                                   get_batch_indices_positions)

from . import _missing


def get_seq_lens(kv_indptr, kv_last_page_len, page_size):
    """The tokens of each request of a paged KV cache: FlashInfer's pure-torch formula
    (listed in _missing.DEFINED_HERE)."""
    import torch

    return (torch.clamp(kv_indptr[1:] - kv_indptr[:-1] - 1, min=0) * page_size
            + kv_last_page_len)


__all__ = ["append_paged_kv_cache", "append_paged_mla_kv_cache", "get_batch_indices_positions",
           "get_seq_lens"] + _missing.names("page")
_missing.install(__name__)
