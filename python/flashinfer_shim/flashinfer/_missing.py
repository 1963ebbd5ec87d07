"""Every name of the shim that is not fi_runtime's own implementation, in one place.

STUBS: FlashInfer names fi_runtime does not implement that FlashInfer v0.6.9's
tests/conftest.py, tests/test_helpers and the op test files that lab/gpu/flashinfer_tests.sh
runs reference (at import, at collection, or in a test body). Each is a function, or a
class whose constructor and listed methods (the ones the tests touch on the class itself,
e.g. conftest's TORCH_COMPILE_FNS list) raise
NotImplementedError("fi_runtime: flashinfer.<module>.<name> is not implemented"), so that a
test file imports and collects and only the tests that call them fail. (NotImplementedError is a
RuntimeError; conftest's pytest_runtest_call hook re-raises it: a failure, not a skip.)
A module's non-callable names (jit.env's paths) raise the same error when read.

DEFINED_HERE: names the shim defines itself, without a kernel of its own: aliases and
argument forwarding over fi_runtime's implementations, FlashInfer's pure-torch helpers
(the same formula), device-capability queries, and two declarations the test harness needs
(see each entry's note).

Count them: python3 -c "import flashinfer._missing as m; print(len(m.STUBS), len(m.DEFINED_HERE))"
"""

import sys

# (module under flashinfer, name, methods of a class stub; None for a function stub)
STUBS = [
    # cascade: shared-prefix / multi-level wrappers (conftest's TORCH_COMPILE_FNS;
    # tests/attention/test_shared_prefix_kernels.py)
    ("cascade", "MultiLevelCascadeAttentionWrapper", ("plan", "run", "begin_forward", "forward")),
    ("cascade", "BatchDecodeWithSharedPrefixPagedKVCacheWrapper",
     ("begin_forward", "forward", "end_forward")),
    ("cascade", "BatchPrefillWithSharedPrefixPagedKVCacheWrapper",
     ("begin_forward", "forward", "end_forward")),
    # decode (test_batch_decode_kernels.py, test_tensor_cores_decode.py: FlashInfer's fast
    # plan, which writes into its wrapper's internals)
    ("decode", "fast_decode_plan", None),
    # gemm (conftest's TORCH_COMPILE_FNS)
    ("gemm", "bmm_fp8", None),
    ("gemm", "SegmentGEMMWrapper", ("run", "forward")),
    # norm (tests/utils/test_norm.py)
    ("norm", "rmsnorm_quant", None),
    ("norm", "fused_add_rmsnorm_quant", None),
    # activation (tests/utils/test_activation.py's warm-up)
    ("activation", "gen_act_and_mul_module", None),
    # page, quantization (jit_utils.py)
    ("page", "gen_page_module", None),
    ("quantization", "gen_quantization_module", None),
    # rope: FlashInfer's indptr / offsets forms and the fp8 quantizing ones (conftest;
    # tests/attention/test_rope.py)
    ("rope", "apply_rope", None),
    ("rope", "apply_rope_inplace", None),
    ("rope", "apply_llama31_rope", None),
    ("rope", "apply_llama31_rope_inplace", None),
    ("rope", "rope_quantize_fp8", None),
    ("rope", "mla_rope_quantize_fp8", None),
    ("rope", "rope_quantize_fp8_append_paged_kv_cache", None),
    # utils (jit_utils.py imports it; only its JIT warm-up calls it)
    ("utils", "is_fa3_backend_supported", None),
    # jit: FlashInfer's JIT compiler (jit_utils.py, the warm-up fixtures, test_norm.py,
    # test_deepseek_mla.py); fi_runtime compiles its own kernels on first use. flashinfer.jit
    # re-exports jit.core's and jit.attention's names, flashinfer.decode / .prefill /
    # .attention the module generators, as FlashInfer does (the same objects).
    ("jit.core", "JitSpec", ()),
    ("jit.core", "build_jit_specs", None),
    ("jit.core", "gen_jit_spec", None),
    ("jit.attention", "gen_single_decode_module", None),
    ("jit.attention", "gen_batch_decode_module", None),
    ("jit.attention", "gen_single_prefill_module", None),
    ("jit.attention", "gen_batch_prefill_module", None),
    ("jit.attention", "gen_batch_mla_module", None),
    ("jit.attention", "gen_batch_attention_module", None),
]

# module-level values (not callables) that raise when read: (module, name)
STUB_VALUES = [
    ("jit.env", "FLASHINFER_CSRC_DIR"),  # test_norm.py's JIT-spec test
]

# (module, name, note)
DEFINED_HERE = [
    ("prefill", "single_prefill_with_kv_cache_return_lse",
     "functools.partial(single_prefill_with_kv_cache, return_lse=True), as FlashInfer defines it"),
    ("decode", "CUDAGraphBatchDecodeWithPagedKVCacheWrapper",
     "BatchDecodeWithPagedKVCacheWrapper with use_cuda_graph=True and the three buffers, "
     "as FlashInfer's subclass does"),
    ("page", "get_seq_lens", "FlashInfer's pure-torch formula"),
    ("utils", "GPUArchitectureError", "an Exception class, as FlashInfer's"),
    ("utils", "get_compute_capability", "torch.cuda.get_device_capability"),
    ("utils", "is_sm90a_supported", "capability 9.x and CUDA >= 12.3, as FlashInfer's"),
    ("utils", "is_sm100a_supported", "capability 10.x and CUDA >= 12.8, as FlashInfer's"),
    ("utils", "is_sm110a_supported", "capability 11.x and CUDA >= 13.0, as FlashInfer's"),
    ("utils", "device_support_pdl", "capability >= 9, as FlashInfer's"),
    ("utils", "ceil_div", "integer arithmetic"),
    ("utils", "round_up", "integer arithmetic"),
    ("utils", "has_flashinfer_jit_cache",
     "returns True: fi_runtime's kernels need no FlashInfer JIT warm-up, so the tests' "
     "warmup_jit fixtures (autouse=not has_flashinfer_jit_cache()) stay off"),
    ("jit.core", "MissingJITCacheError",
     "a RuntimeError subclass with .spec, so conftest's isinstance check works; fi_runtime "
     "never raises it"),
]


def message(qualname):
    return f"fi_runtime: {qualname} is not implemented"


def _function(module, qualname):
    full = f"{module}.{qualname}"

    def stub(*args, **kwargs):
        raise NotImplementedError(message(full))

    stub.__name__ = qualname.rsplit(".", 1)[-1]
    stub.__qualname__ = qualname
    stub.__module__ = module
    stub.__doc__ = message(full) + " (a stub of the flashinfer shim)."
    stub.fi_runtime_stub = True
    return stub


def _class(module, name, methods):
    ns = {"__module__": module,
          "__doc__": message(f"{module}.{name}") + " (a stub of the flashinfer shim).",
          "fi_runtime_stub": True, "__init__": _function(module, f"{name}")}
    ns["__init__"].__name__ = "__init__"
    for m in methods:
        ns[m] = _function(module, f"{name}.{m}")
    return type(name, (), ns)


def install(module_name):
    """Defines the STUBS of flashinfer.<module> in that module (called at its end)."""
    mod = sys.modules[module_name]
    short = module_name.split(".", 1)[1] if "." in module_name else ""
    for where, name, methods in STUBS:
        if where != short:
            continue
        setattr(mod, name, _function(module_name, name) if methods is None
                else _class(module_name, name, methods))
    values = {name for where, name in STUB_VALUES if where == short}
    if values:
        def __getattr__(name):
            if name in values:
                raise NotImplementedError(message(f"{module_name}.{name}"))
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

        mod.__getattr__ = __getattr__


def names(module):
    """The stub names of flashinfer.<module> (for its __all__)."""
    return [name for where, name, _ in STUBS if where == module]
