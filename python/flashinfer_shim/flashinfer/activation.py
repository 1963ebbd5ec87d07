"""flashinfer.activation over fi_runtime."""

from fi_runtime.flashinfer import gelu_and_mul, gelu_tanh_and_mul, silu_and_mul

from . import _missing

__all__ = ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"] + _missing.names("activation")
_missing.install(__name__)
