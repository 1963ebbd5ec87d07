"""flashinfer.gemm: fi_runtime has no GEMM API; conftest's TORCH_COMPILE_FNS names two,
stubs."""

from . import _missing

__all__ = _missing.names("gemm")
_missing.install(__name__)
