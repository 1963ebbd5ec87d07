"""flashinfer.attention: fi_runtime has none of its wrappers (BatchAttention, the
attention-sink wrapper); only the JIT module generator that tests/test_helpers/jit_utils.py
names, a stub."""

from . import _missing
from .jit.attention import gen_batch_attention_module  # noqa: F401 (a stub)

__all__ = ["gen_batch_attention_module"] + _missing.names("attention")
_missing.install(__name__)
