"""The ops of libfi_runtime.so under their C names without the fi_ prefix, with the C
argument order less rt and stream (fi_runtime.ops.rmsnorm(input, weight, eps, out)); see
fi_runtime._sigs.SIGNATURES or help() on each. Outputs are the caller's tensors, written in
place; nothing is allocated. Each name is bound to the backend's function at its first use
(a tvm_ffi Function: no Python wrapper on the call path); the library is loaded then."""

from . import _lib, _sigs

__all__ = sorted(_sigs.SIGNATURES)


def __getattr__(name):
    if name.startswith("__") or name not in _sigs.SIGNATURES:
        raise AttributeError(f"module 'fi_runtime.ops' has no attribute {name!r}")
    fn = _lib.backend().get(name)
    globals()[name] = fn  # later lookups skip this function
    return fn


def __dir__():
    return __all__
