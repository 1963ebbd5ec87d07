"""flashinfer.utils: the helpers FlashInfer's tests import (device-capability queries,
GPUArchitectureError, integer helpers), defined here as FlashInfer defines them; listed in
_missing.DEFINED_HERE. torch is imported when a query runs, not at import."""

import functools

from fi_runtime import UnsupportedError  # noqa: F401 (fi_runtime's refusal of an argument)

from . import _missing


class GPUArchitectureError(Exception):
    """A GPU architecture the kernel does not support (FlashInfer's; fi_runtime does not
    raise it)."""


def get_compute_capability(device):
    import torch

    if device.type != "cuda":
        raise ValueError("device must be a cuda device")
    return torch.cuda.get_device_capability(device.index)


def _cuda_at_least(version):
    import torch

    if not torch.version.cuda:
        return False
    have = tuple(int(x) for x in torch.version.cuda.split(".")[:2])
    return have >= tuple(int(x) for x in version.split(".")[:2])


@functools.cache
def is_sm90a_supported(device):
    major, _ = get_compute_capability(device)
    return major == 9 and _cuda_at_least("12.3")


def is_sm100a_supported(device):
    major, _ = get_compute_capability(device)
    return major == 10 and _cuda_at_least("12.8")


def is_sm110a_supported(device):
    major, _ = get_compute_capability(device)
    return major == 11 and _cuda_at_least("13.0")


def device_support_pdl(device):
    if device.type != "cuda":
        return False
    major, _ = get_compute_capability(device)
    return major >= 9


def ceil_div(x, y):
    return (x + y - 1) // y


def round_up(x, y):
    return ceil_div(x, y) * y


def has_flashinfer_jit_cache():
    """True: fi_runtime compiles its kernels itself on first use (and caches them), so the
    tests' FlashInfer JIT warm-up fixtures (autouse=not has_flashinfer_jit_cache()) stay off;
    their generators are stubs."""
    return True


__all__ = ["GPUArchitectureError", "get_compute_capability", "is_sm90a_supported",
           "is_sm100a_supported", "is_sm110a_supported", "device_support_pdl", "ceil_div",
           "round_up", "has_flashinfer_jit_cache"] + _missing.names("utils")
_missing.install(__name__)
