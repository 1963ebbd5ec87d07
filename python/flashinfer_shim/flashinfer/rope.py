"""flashinfer.rope over fi_runtime: the pos_ids and cos/sin-cache forms (the indptr /
offsets forms and the fp8 quantizing ones are stubs)."""

from fi_runtime.flashinfer import (apply_llama31_rope_pos_ids, apply_llama31_rope_pos_ids_inplace,
                                   apply_rope_pos_ids, apply_rope_pos_ids_inplace,
                                   apply_rope_with_cos_sin_cache,
                                   apply_rope_with_cos_sin_cache_inplace)

from . import _missing

__all__ = ["apply_rope_pos_ids", "apply_rope_pos_ids_inplace", "apply_llama31_rope_pos_ids",
           "apply_llama31_rope_pos_ids_inplace", "apply_rope_with_cos_sin_cache",
           "apply_rope_with_cos_sin_cache_inplace"] + _missing.names("rope")
_missing.install(__name__)
