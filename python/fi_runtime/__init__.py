"""fi_runtime: FlashInfer-class GPU kernels, compiled just in time by libfi_runtime.so.

    import fi_runtime
    fi_runtime.ops.rmsnorm(x, w, 1e-6, out)      # the C API's ops, outputs given
    from fi_runtime import flashinfer            # FlashInfer's names and signatures
    y = flashinfer.rmsnorm(x, w)

Tensors are anything with __dlpack__ (torch, numpy, cupy), passed without a copy; calls
run on the current torch stream of the tensors' device. Importing needs no GPU and loads
no library: the first op loads libfi_runtime.so (see fi_runtime._lib for where it is looked
for) and its TVM-FFI exports libfi_runtime_tvm.so through tvm_ffi.load_module. Bad
arguments raise TypeError or ValueError naming the argument; an error of the library
carries its fi_last_error() text; a FlashInfer argument fi_runtime does not implement
raises UnsupportedError naming it."""

from . import ops
from ._lib import LibraryNotFound

__all__ = ["ops", "backend", "version", "init", "list_functions", "UnsupportedError",
           "LibraryNotFound"]
__version__ = "0.1.0"


class UnsupportedError(NotImplementedError):
    """A valid argument (usually a FlashInfer feature) that fi_runtime does not implement."""


def backend():
    """The loaded backend: .name is "tvm_ffi" (libfi_runtime_tvm.so) or "ctypes" (the
    fallback over libfi_runtime.so; .reason says why), .path the library it calls."""
    from . import _lib

    return _lib.backend()


def version():
    """libfi_runtime.so's version, "MAJOR.MINOR.PATCH"."""
    return str(ops.version())


def list_functions():
    """The names of the library's exports."""
    return [str(n) for n in ops.list_functions()]


def init(cache_path=None, system_cache_path=None, log_level=-1):
    """Options of the process's runtime (fi_options), before its first op: the cache file
    (None: $FI_CACHE_PATH or the default; ":memory:" for none), the read-only system cache,
    the log level (-1: $FI_LOG_LEVEL)."""
    ops.init(cache_path, system_cache_path, int(log_level))


try:  # torch.library custom ops (fi_runtime::<op>), when torch is installed
    from . import _torch  # noqa: F401
except ImportError:
    pass
