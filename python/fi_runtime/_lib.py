"""Finding and loading the libraries: libfi_runtime.so, and the TVM-FFI exports
libfi_runtime_tvm.so loaded with tvm_ffi.load_module (ctypes over libfi_runtime.so only when
tvm_ffi or the TVM-FFI library is missing).

Where the libraries are looked for, first match wins:
1. FI_RUNTIME_LIBRARY: the path of libfi_runtime.so; libfi_runtime_tvm.so beside it, or
   FI_RUNTIME_TVM_LIBRARY;
2. this package's folder (copy both .so files next to __init__.py);
3. the dynamic loader's search path (`make install`, LD_LIBRARY_PATH).
FI_RUNTIME_BACKEND=ctypes forces the fallback."""

import ctypes
import os
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_backend = None


class LibraryNotFound(ImportError):
    """libfi_runtime.so (or its TVM-FFI exports) could not be found or loaded."""


def _candidates():
    env = os.environ.get("FI_RUNTIME_LIBRARY")
    if env:
        tvm = os.environ.get("FI_RUNTIME_TVM_LIBRARY") or os.path.join(
            os.path.dirname(os.path.abspath(env)), "libfi_runtime_tvm.so")
        return [(env, tvm)]
    here = os.path.join(_HERE, "libfi_runtime.so")
    out = []
    if os.path.exists(here):
        out.append((here, os.path.join(_HERE, "libfi_runtime_tvm.so")))
    out.append(("libfi_runtime.so", "libfi_runtime_tvm.so"))
    return out


def _load_core():
    """(path, CDLL) of libfi_runtime.so, loaded RTLD_GLOBAL so that the TVM-FFI library's
    NEEDED entry resolves to this very copy."""
    errors = []
    for core, tvm in _candidates():
        try:
            return core, tvm, ctypes.CDLL(core, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            errors.append(f"{core}: {e}")
    raise LibraryNotFound(
        "fi_runtime: libfi_runtime.so not found (set FI_RUNTIME_LIBRARY to its path, or copy "
        "it beside fi_runtime/__init__.py): " + "; ".join(errors))


class TvmBackend:
    """The ops as tvm_ffi Functions of libfi_runtime_tvm.so (the fast path: a torch tensor
    crosses as DLPack without a copy, and the current torch stream is the call's)."""

    name = "tvm_ffi"

    def __init__(self, core_path, tvm_path, core):
        import tvm_ffi

        self.core, self.core_path, self.path = core, core_path, tvm_path
        self.module = tvm_ffi.load_module(tvm_path)

    def get(self, name):
        return self.module.get_function(name)

    def names(self):
        return list(self.module.list_functions())


def backend():
    """The loaded backend (TvmBackend, or the ctypes fallback), loading it the first time."""
    global _backend
    if _backend is not None:
        return _backend
    with _lock:
        if _backend is None:
            core_path, tvm_path, core = _load_core()
            reason = None
            if os.environ.get("FI_RUNTIME_BACKEND", "") != "ctypes":
                try:
                    _backend = TvmBackend(core_path, tvm_path, core)
                except ImportError as e:
                    reason = f"tvm_ffi is not importable ({e})"
                except Exception as e:  # the TVM-FFI library is missing or unloadable
                    reason = f"{tvm_path} did not load ({e})"
            if _backend is None:
                from . import _ctypes

                _backend = _ctypes.CtypesBackend(core_path, core, reason)
    return _backend
