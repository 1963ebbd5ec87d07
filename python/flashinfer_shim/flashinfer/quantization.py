"""flashinfer.quantization over fi_runtime: packbits and segment_packbits (FlashInfer's
fp4 / fp8 quantization is not in fi_runtime)."""

from fi_runtime.flashinfer import packbits, segment_packbits

from . import _missing

__all__ = ["packbits", "segment_packbits"] + _missing.names("quantization")
_missing.install(__name__)
