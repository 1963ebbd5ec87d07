"""flashinfer.mla over fi_runtime: BatchMLAPagedAttentionWrapper (the absorbed form)."""

from fi_runtime.flashinfer import BatchMLAPagedAttentionWrapper

from . import _missing

__all__ = ["BatchMLAPagedAttentionWrapper"] + _missing.names("mla")
_missing.install(__name__)
