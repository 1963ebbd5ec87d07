"""flashinfer.jit.core: MissingJITCacheError (so that tests/conftest.py's isinstance check
works; fi_runtime never raises it) and stubs of the JIT spec API (see flashinfer._missing)."""

from .. import _missing


class MissingJITCacheError(RuntimeError):
    """FlashInfer's error for a module missing from its JIT cache (listed in
    _missing.DEFINED_HERE; fi_runtime never raises it)."""

    def __init__(self, message, spec=None):
        self.spec = spec
        super().__init__(message)


__all__ = ["MissingJITCacheError"] + _missing.names("jit.core")
_missing.install(__name__)
