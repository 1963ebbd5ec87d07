"""flashinfer.jit: FlashInfer's JIT compiler is not in fi_runtime (fi_runtime compiles its
own kernels on first use). The names FlashInfer's tests import from here are stubs (see
flashinfer._missing), re-exported from jit.core and jit.attention as FlashInfer does, and
MissingJITCacheError, which fi_runtime never raises."""

from . import attention as attention  # noqa: F401
from . import core as core  # noqa: F401
from . import env as env  # noqa: F401
from .attention import (gen_batch_attention_module, gen_batch_decode_module,  # noqa: F401
                        gen_batch_mla_module, gen_batch_prefill_module, gen_single_decode_module,
                        gen_single_prefill_module)
from .core import JitSpec, MissingJITCacheError, build_jit_specs, gen_jit_spec  # noqa: F401

__all__ = ["attention", "core", "env", "JitSpec", "MissingJITCacheError", "build_jit_specs",
           "gen_jit_spec", "gen_batch_attention_module", "gen_batch_decode_module",
           "gen_batch_mla_module", "gen_batch_prefill_module", "gen_single_decode_module",
           "gen_single_prefill_module"]
