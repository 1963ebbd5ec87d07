"""flashinfer.jit.attention: FlashInfer's attention JIT module generators, stubs (see
flashinfer._missing)."""

from .. import _missing

__all__ = _missing.names("jit.attention")
_missing.install(__name__)
