"""torch.library custom ops fi_runtime::<op> for the ops that take tensors (imported by
fi_runtime when torch is installed), so torch.compile traces them as opaque calls and CUDA
graphs capture them: each writes only its outputs (declared mutated in the schema), whose
fake implementation therefore does nothing. fi_runtime.flashinfer calls these while
torch.compile traces, and the backend's functions directly otherwise (no dispatcher on the
eager path)."""

import torch

from . import _sigs, ops

_TYPES = {"Tensor": "Tensor", "Tensor?": "Tensor?", "float": "float", "int": "int", "int?": "int?",
          "int|str": "int"}
_LIB = torch.library.Library("fi_runtime", "DEF")
REGISTERED = []


def schema(name):
    """The torch schema of an op, or None for those that are not tensor ops (plans, sizes,
    version: host-side calls that torch.compile need not see)."""
    sig, mutated = _sigs.SIGNATURES[name]
    params = _sigs.parse(sig)
    if not any(t.startswith("Tensor") for _, t in params) or \
            any(t not in _TYPES for _, t in params):
        return None
    alias = iter("abcdefghijklmnopqrstuvwxyz")
    parts = []
    for pname, ptype in params:
        t = _TYPES[ptype]
        if pname in mutated:
            t = f"Tensor({next(alias)}!)" + ("?" if t.endswith("?") else "")
        parts.append(f"{t} {pname}")
    return f"{name}({', '.join(parts)}) -> ()"


def _register(name, s):
    _LIB.define(s)

    def impl(*args):
        getattr(ops, name)(*args)

    def fake(*args):
        return None

    _LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"fi_runtime::{name}", fake, lib=_LIB)


for _name in _sigs.SIGNATURES:
    _s = schema(_name)
    if _s is not None:
        _register(_name, _s)
        REGISTERED.append(_name)
