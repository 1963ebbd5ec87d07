"""flashinfer.jit.env: FlashInfer's JIT paths; reading one raises NotImplementedError (see
flashinfer._missing.STUB_VALUES)."""

from .. import _missing

__all__ = []
_missing.install(__name__)
