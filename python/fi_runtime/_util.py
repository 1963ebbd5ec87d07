"""Helpers of fi_runtime.flashinfer: dispatch (torch custom op while torch.compile traces,
the backend's function otherwise), output allocation for torch or numpy tensors, host
copies of index arrays, argument checks that name the argument."""

from . import UnsupportedError, ops

try:
    import torch

    _is_compiling = torch.compiler.is_compiling
except (ImportError, AttributeError):
    torch = None
    _is_compiling = None


def run(name, *args):
    """Calls op `name`: torch.ops.fi_runtime.<name> while torch.compile traces (the op is
    opaque to it), else the backend's function (no dispatcher cost)."""
    if _is_compiling is not None and _is_compiling():
        return getattr(torch.ops.fi_runtime, name)(*args)
    return getattr(ops, name)(*args)


def is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


def tensor(fn, pname, x, optional=False):
    """x, checked to be a tensor (anything with __dlpack__ and a shape)."""
    if x is None and optional:
        return None
    if not hasattr(x, "__dlpack__") or not hasattr(x, "shape"):
        raise TypeError(f"{fn}: {pname} must be a tensor{' or None' if optional else ''}, got "
                        f"{type(x).__name__}")
    return x


def unsupported(fn, pname, value, why="is not supported by fi_runtime"):
    raise UnsupportedError(f"{fn}: {pname}={value!r} {why}")


def dtype_like(like, name):
    """The dtype called `name` ("float32", "int32", "bool", ...) in like's framework."""
    if is_torch(like):
        return getattr(torch, name)
    import numpy

    return numpy.dtype(name)


def empty(like, shape, dtype=None):
    """An uninitialized tensor on like's device, of like's framework, dtype like's unless
    given (a dtype object or a name)."""
    if isinstance(dtype, str):
        dtype = dtype_like(like, dtype)
    if is_torch(like):
        return torch.empty(tuple(shape), dtype=dtype or like.dtype, device=like.device)
    import numpy

    return numpy.empty(tuple(shape), dtype=dtype or like.dtype)


def host_i32(fn, pname, x):
    """A host int32 contiguous copy of an index array (a device tensor is copied: plan is
    a host-side step, as in FlashInfer)."""
    tensor(fn, pname, x)
    if is_torch(x):
        return x.to(device="cpu", dtype=torch.int32).contiguous()
    import numpy

    return numpy.ascontiguousarray(x, dtype=numpy.int32)


def layout(fn, kv_layout):
    if kv_layout not in ("NHD", "HND"):
        raise ValueError(f"{fn}: kv_layout must be 'NHD' or 'HND', got {kv_layout!r}")
    return 0 if kv_layout == "NHD" else 1


def pos_encoding(fn, mode):
    if mode == "NONE":
        return 0
    if mode == "ROPE_LLAMA":
        return 1
    if mode == "ALIBI":
        unsupported(fn, "pos_encoding_mode", mode)
    raise ValueError(f"{fn}: pos_encoding_mode must be 'NONE', 'ROPE_LLAMA' or 'ALIBI', got "
                     f"{mode!r}")


def number(fn, pname, x, kind=float):
    """A Python float or int argument (a tensor is refused, naming the argument)."""
    if isinstance(x, bool) or hasattr(x, "__dlpack__") or not hasattr(x, "__" + kind.__name__ + "__"):
        raise TypeError(f"{fn}: {pname} must be a{'n' if kind is int else ''} {kind.__name__}, "
                        f"got {type(x).__name__}")
    return kind(x)


def param(fn, pname, x, kind):
    """A per-row sampling parameter: (tensor, default scalar) or (None, scalar)."""
    if hasattr(x, "__dlpack__"):
        return x, kind(0)
    return None, number(fn, pname, x, kind)


def kv_pair(fn, paged_kv_cache):
    """(k, v) of a paged cache given as a [pages, 2, ...] tensor or a (k, v) tuple."""
    if isinstance(paged_kv_cache, (tuple, list)):
        if len(paged_kv_cache) != 2:
            raise ValueError(f"{fn}: paged_kv_cache as a tuple must be (k_cache, v_cache)")
        return (tensor(fn, "paged_kv_cache[0]", paged_kv_cache[0]),
                tensor(fn, "paged_kv_cache[1]", paged_kv_cache[1]))
    tensor(fn, "paged_kv_cache", paged_kv_cache)
    if len(paged_kv_cache.shape) != 5 or paged_kv_cache.shape[1] != 2:
        raise ValueError(f"{fn}: paged_kv_cache must be [pages, 2, ...] (5-D) or a (k, v) tuple, "
                         f"got shape {tuple(paged_kv_cache.shape)}")
    return paged_kv_cache[:, 0], paged_kv_cache[:, 1]


def dtype_name(fn, pname, d):
    """A DLPack dtype name for a torch / numpy dtype or a name ("float16")."""
    if d is None or isinstance(d, str):
        return d
    s = str(d).replace("torch.", "")
    if s == "float8_e4m3fn" or s == "float8_e5m2" or s in ("float16", "bfloat16", "float32"):
        return s
    raise ValueError(f"{fn}: {pname}={d!r} is not a dtype fi_runtime knows")
