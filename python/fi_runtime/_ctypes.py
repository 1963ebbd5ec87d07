"""The fallback backend: ctypes over libfi_runtime.so's C API, used only when tvm_ffi or
libfi_runtime_tvm.so is missing. It serves the ops whose C functions take tensors and
scalars only (norms, activations, cascade, RoPE, paged append, sampling) with the same
names, arguments and errors as the TVM-FFI exports; the ops that take parameter structs
or plans (attention, MoE) need the TVM-FFI library.

Tensors cross as DLPack: any object with __dlpack__ (torch, numpy, cupy) gives a
DLManagedTensor capsule whose DLTensor is passed as is (no copy), the capsule kept alive
for the call. Integer arguments are passed as 64-bit values: on x86-64 and AArch64 an
`int` parameter reads the low half of its register or stack slot, so this is exact."""

import ctypes

from . import _sigs

# The ops whose C function takes exactly the export's arguments (after rt, before stream).
FLAT = {"rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm", "gemma_fused_add_rmsnorm", "layernorm",
        "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "merge_state",
        "merge_state_in_place", "merge_states", "apply_rope_pos_ids",
        "apply_llama31_rope_pos_ids", "apply_rope_with_cos_sin_cache", "append_paged_kv_cache",
        "get_batch_indices_positions", "softmax", "sampling_from_probs",
        "top_k_sampling_from_probs", "top_p_sampling_from_probs", "min_p_sampling_from_probs",
        "top_k_top_p_sampling_from_logits", "top_k_top_p_sampling_from_probs",
        "sampling_from_logits", "chain_speculative_sampling", "top_k_renorm_probs", "top_p_renorm_probs",
        "top_k_mask_logits"}
_LAYOUTS = {"NHD": 0, "HND": 1}

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _stream_of(obj):
    """The current torch stream of a CUDA torch tensor, else None (the default stream)."""
    dev = getattr(obj, "device", None)
    if getattr(dev, "type", None) == "cuda":
        import torch

        return torch.cuda.current_stream(dev).cuda_stream
    return None


class CtypesBackend:
    name = "ctypes"

    def __init__(self, core_path, core, reason):
        self.core, self.core_path, self.path = core, core_path, core_path
        self.reason = reason  # why the TVM-FFI library is not used
        core.fi_last_error.restype = ctypes.c_char_p
        core.fi_status_string.restype = ctypes.c_char_p
        core.fi_version.restype = ctypes.c_char_p
        self._rt = None
        self._opts = None
        self._fns = {}

    def names(self):
        return list(_sigs.SIGNATURES)

    def runtime(self, fn):
        if self._rt is None:
            rt = ctypes.c_void_p()
            st = self.core.fi_runtime_create(self._opts, ctypes.byref(rt))
            self.check(fn, st)
            self._rt = rt
        return self._rt

    def check(self, fn, st):
        if st != 0:
            name = self.core.fi_status_string(st).decode()
            msg = f"{fn}: {name}: {self.core.fi_last_error().decode(errors='replace')}"
            raise (ValueError if st == -1 else RuntimeError)(msg)

    def get(self, name):
        fn = self._fns.get(name)
        if fn is None:
            fn = self._fns[name] = self._make(name)
        return fn

    def _make(self, name):
        if name == "version":
            return lambda: self.core.fi_version().decode()
        if name == "last_error":
            return lambda: self.core.fi_last_error().decode(errors="replace")
        if name == "list_functions":
            return self.names
        if name == "init":
            return self._init
        if name not in _sigs.SIGNATURES:
            raise AttributeError(f"fi_runtime has no op {name!r}")
        params = _sigs.parse(_sigs.SIGNATURES[name][0])
        if name not in FLAT:
            reason = self.reason or "FI_RUNTIME_BACKEND=ctypes"
            def unsupported(*args, **kwargs):
                raise NotImplementedError(
                    f"{name}: needs the TVM-FFI library libfi_runtime_tvm.so ({reason}); the "
                    "ctypes fallback serves only the ops without parameter structs or plans")
            return unsupported
        cfn = getattr(self.core, "fi_" + name)
        cfn.restype = ctypes.c_int
        sig = _sigs.SIGNATURES[name][0]

        def call(*args):
            if len(args) != len(params):
                raise TypeError(f"{name}: takes {len(params)} arguments ({sig}), got {len(args)}")
            keep, cargs, stream = [], [self.runtime(name)], None
            for i, ((pname, ptype), a) in enumerate(zip(params, args)):
                cargs.append(self._arg(name, i, pname, ptype, a, keep))
                if stream is None and ptype.startswith("Tensor") and a is not None:
                    stream = _stream_of(a)
            cargs.append(ctypes.c_void_p(stream))
            self.check(name, cfn(*cargs))

        call.__name__ = name
        call.__doc__ = f"{name}({sig})"
        return call

    @staticmethod
    def _arg(fn, i, pname, ptype, a, keep):
        def bad(what):
            return TypeError(f"{fn}: argument {i} '{pname}': must be {what}, got "
                             f"{type(a).__name__}")
        if ptype.startswith("Tensor"):
            if a is None and ptype == "Tensor?":
                return ctypes.c_void_p(None)
            if not hasattr(a, "__dlpack__"):
                raise bad("a tensor" + (" or None" if ptype == "Tensor?" else ""))
            cap = a.__dlpack__()
            keep.append(cap)  # its DLManagedTensor lives as long as the capsule
            return ctypes.c_void_p(_capsule_pointer(cap, b"dltensor"))
        if ptype == "float":
            if not hasattr(a, "__float__") or hasattr(a, "__dlpack__"):
                raise bad("a float")
            return ctypes.c_double(float(a))
        if ptype == "int|str" and isinstance(a, str):
            if a not in _LAYOUTS:
                raise ValueError(f"{fn}: argument {i} '{pname}': unknown kv layout {a!r} "
                                 "(\"NHD\" or \"HND\")")
            return ctypes.c_int64(_LAYOUTS[a])
        if not isinstance(a, int):
            raise bad("an int")
        return ctypes.c_uint64(a & 0xFFFFFFFFFFFFFFFF) if pname in ("seed", "offset") \
            else ctypes.c_int64(a)

    def _init(self, cache_path, system_cache_path, log_level):
        if self._rt is not None:
            raise RuntimeError("init: the runtime already exists: call init before any op")

        class Options(ctypes.Structure):
            _fields_ = [("struct_size", ctypes.c_size_t), ("cache_path", ctypes.c_char_p),
                        ("system_cache_path", ctypes.c_char_p), ("log_level", ctypes.c_int)]

        o = Options()
        self.core.fi_options_init(ctypes.byref(o))
        o.cache_path = cache_path.encode() if cache_path is not None else None
        o.system_cache_path = system_cache_path.encode() if system_cache_path is not None else None
        o.log_level = log_level
        self._opts_keep = o
        self._opts = ctypes.byref(o)
