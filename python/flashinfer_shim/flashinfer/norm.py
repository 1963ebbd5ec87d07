"""flashinfer.norm over fi_runtime."""

from fi_runtime.flashinfer import (fused_add_rmsnorm, gemma_fused_add_rmsnorm, gemma_rmsnorm,
                                   layernorm, rmsnorm)

from . import _missing

__all__ = ["rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm", "gemma_fused_add_rmsnorm",
           "layernorm"] + _missing.names("norm")
_missing.install(__name__)
