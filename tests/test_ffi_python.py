"""test_ffi_python.py BUILD: the CPU tests of libfi_runtime_tvm.so and the Python package
(python/fi_runtime), run by tests/test_python.sh with the test venv's python. Prints one
PASS / FAIL / SKIP line a case (tests/run_tests.sh counts them). No GPU: every call that
reaches the C library must come back as a Python exception with the C message."""

import os
import subprocess
import sys
import tempfile
import traceback

BUILD = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = os.path.join(BUILD, "libfi_runtime.so")
TVM = os.path.join(BUILD, "libfi_runtime_tvm.so")
os.environ["FI_RUNTIME_LIBRARY"] = CORE
os.environ.setdefault("FI_CACHE_PATH", ":memory:")
sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # noqa: E402

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def raises(exc, needles, f, *args, **kwargs):
    """Calls f; it must raise exc with every needle in its message. Returns the message."""
    try:
        f(*args, **kwargs)
    except exc as e:
        msg = str(e)
        missing = [n for n in needles if n not in msg]
        assert not missing, f"message {msg!r} lacks {missing}"
        return msg
    except Exception as e:  # the wrong kind
        raise AssertionError(f"raised {type(e).__name__}: {e}, not {exc.__name__}")
    raise AssertionError(f"{getattr(f, '__name__', f)} did not raise {exc.__name__}")


def py(code, **env):
    """Runs code in a fresh python (this one) with env added; (rc, stdout + stderr)."""
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), **env)
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout + r.stderr


def module():
    import tvm_ffi

    return tvm_ffi.load_module(TVM)


CPU = "kDLCPU"  # in every "must be on a GPU" message of the library
x16 = np.zeros((4, 64), np.float16)
w16 = np.ones(64, np.float16)


@case
def imports_without_gpu_or_library():
    rc, out = py("import fi_runtime, fi_runtime.flashinfer as f; print(f.rmsnorm.__name__)",
                 FI_RUNTIME_LIBRARY="/nonexistent/libfi_runtime.so")
    assert rc == 0 and "rmsnorm" in out, out


@case
def missing_library_is_a_clean_error():
    rc, out = py("import fi_runtime\n"
                 "try:\n fi_runtime.ops.rmsnorm\n"
                 "except fi_runtime.LibraryNotFound as e: print('LNF', e)",
                 FI_RUNTIME_LIBRARY="/nonexistent/libfi_runtime.so")
    assert rc == 0 and "LNF" in out and "/nonexistent/libfi_runtime.so" in out, out


@case
def load_module_lists_every_function():
    from fi_runtime import _sigs

    m = module()
    names = [str(n) for n in m.list_functions()]
    assert sorted(names) == sorted(_sigs.SIGNATURES), set(names) ^ set(_sigs.SIGNATURES)
    for n in names:
        m.get_function(n)  # raises if a listed export is missing


@case
def python_signatures_match_the_library():
    from fi_runtime import _sigs

    m = module()
    for name, (sig, mutated) in _sigs.SIGNATURES.items():
        doc = m.get_function_doc(name)
        assert doc == f"{name}({sig})", (name, doc)
        pnames = [p for p, _ in _sigs.parse(sig)]
        assert all(x in pnames for x in mutated), (name, mutated)


@case
def exports_only_tvm_ffi_symbols():
    out = subprocess.run(["nm", "-D", "--defined-only", TVM], capture_output=True, text=True).stdout
    syms = [line.split()[-1] for line in out.splitlines() if line.strip()]
    bad = [s for s in syms if not s.startswith("__tvm_ffi_")]
    assert syms and not bad, bad


@case
def tvm_call_on_cpu_raises_the_c_error():
    m = module()
    msg = raises(ValueError, ["rmsnorm: FI_ERR_INVALID_ARGUMENT", "fi_rmsnorm", CPU],
                 m.rmsnorm, x16, w16, 1e-6, x16)
    assert m.last_error() in msg, (m.last_error(), msg)
    raises(ValueError, ["FI_ERR_INVALID_ARGUMENT", "fi_single_decode"], m.single_decode,
           np.zeros((8, 128), np.float16), x16, x16, x16, None, "NHD", 0.0, 0.0, -1, "NONE",
           1.0, 1e4, 1.0, 1.0, None)
    raises(ValueError, ["fi_top_k_top_p_sampling_from_logits"], m.top_k_top_p_sampling_from_logits,
           np.ones((2, 10), np.float32), None, 5, None, 0.9, np.zeros(2, np.int32), 1, 2)


@case
def tvm_bad_arguments_are_named():
    m = module()
    raises(TypeError, ["rmsnorm", "takes 4 arguments", "got 3"], m.rmsnorm, x16, w16, 1e-6)
    raises(TypeError, ["argument 1 'weight'", "tensor", "None"], m.rmsnorm, x16, None, 1e-6, x16)
    raises(TypeError, ["argument 2 'eps'", "float", "str"], m.rmsnorm, x16, w16, "a", x16)
    raises(TypeError, ["argument 14 'sinks'", "tensor"], m.single_decode, x16, x16, x16, x16,
           None, "NHD", 0.0, 0.0, -1, "NONE", 1.0, 1e4, 1.0, 1.0, 1.5)
    # the trailing optional sinks may be left out (callers from before it existed); one
    # argument fewer still is refused by count
    raises(ValueError, ["fi_single_decode"], m.single_decode, x16, x16, x16, x16, None, "NHD",
           0.0, 0.0, -1, "NONE", 1.0, 1e4, 1.0, 1.0)
    raises(TypeError, ["takes 14 to 16 arguments", "got 13"], m.single_decode, x16, x16, x16,
           x16, None, "NHD", 0.0, 0.0, -1, "NONE", 1.0, 1e4, 1.0)
    raises(ValueError, ["argument 9 'layout'", "'XYZ'"], m.append_paged_kv_cache, x16, x16, x16,
           x16, x16, x16, x16, x16, x16, "XYZ", 1.0, 1.0)
    raises(ValueError, ["argument 0 'plan'", "not a live batch decode plan"],
           m.batch_decode_run, 1234, x16, x16, x16, x16, x16, x16, "NHD", x16, None, None)
    raises(ValueError, ["argument 0 'plan'"], m.batch_prefill_plan_destroy, 99)
    raises(ValueError, ["argument 7 'q_dtype'", "unknown dtype 'nope'"], m.batch_decode_plan,
           np.zeros(256, np.uint8), np.zeros(2, np.int32), np.ones(1, np.int32), 8, 8, 128, 16,
           "nope", "float16", 0, 0.0, 0.0, -1, "NONE", 1.0, 1e4, 1.0, 1.0, 0)
    raises(ValueError, ["argument 1 'indptr'", "int32"], m.batch_decode_plan,
           np.zeros(256, np.uint8), np.zeros(2, np.int64), np.ones(1, np.int32), 8, 8, 128, 16,
           "float16", "float16", 0, 0.0, 0.0, -1, "NONE", 1.0, 1e4, 1.0, 1.0, 0)


FA = os.path.join(BUILD, "libfi_runtime_tvm_flashinfer.so")


@case
def flashinfer_abi_module_plans_and_checks():
    """libfi_runtime_tvm_flashinfer.so: TVM's FlashInfer-backend calls (names and argument
    orders of attn_backend.h). A plan records host arrays and returns [magic, record,
    generation]; a run on CPU tensors reaches fi_runtime and comes back with its error;
    stale and foreign plan_infos, wrong counts and unsupported options are named."""
    import tvm_ffi

    m = tvm_ffi.load_module(FA)
    out = subprocess.run(["nm", "-D", "--defined-only", FA], capture_output=True, text=True).stdout
    syms = {line.split()[-1] for line in out.splitlines() if line.strip()}
    for name in ("batch_prefill_plan", "batch_prefill_paged_run", "batch_prefill_ragged_run",
                 "batch_decode_plan", "batch_decode_run", "configure"):
        assert "__tvm_ffi_" + name in syms, name
    assert all(s.startswith("__tvm_ffi_") for s in syms), syms
    fws, iws, iws2 = np.zeros(1 << 20, np.uint8), np.zeros(4096, np.uint8), np.zeros(4096, np.uint8)
    pl = np.zeros(4096, np.uint8)
    qo, kv = np.array([0, 3, 8], np.int32), np.array([0, 1, 3], np.int32)
    kvlen = np.array([10, 20], np.int32)
    plan = lambda ws, causal=True, dqk=64, dvo=64, graph=False: m.batch_prefill_plan(  # noqa: E731
        fws, ws, pl, qo, kv, kvlen, 8, 2, 8, 2, 16, graph, dqk, dvo, causal, -1, -1, False, 0)
    info = plan(iws)
    assert len(info) == 3 and info[2] == 1, list(info)
    info2 = plan(iws)  # the same int workspace planned again: the record's next generation
    assert info2[1] == info[1] and info2[2] == 2, (list(info), list(info2))
    other = plan(iws2)
    assert other[1] != info[1], (list(info), list(other))
    q = np.zeros((8, 8, 64), np.float16)
    cache = np.zeros((4, 2, 16, 64), np.float16)
    idx, last = np.zeros(3, np.int32), np.array([10, 4], np.int32)
    lse = np.zeros((8, 8), np.float32)
    prun = lambda inf: m.batch_prefill_paged_run(  # noqa: E731
        fws, iws, inf, q, cache, cache, qo, kv, idx, last, q, lse, 1, 1, -1, False, 0.125, 1.0,
        1e-4)
    raises(ValueError, ["argument 2 'plan_info'", "stale", "generation 1"], prun, info)
    raises(ValueError, ["argument 0 'float_workspace_buffer'", "device tensor"], prun, info2)
    raises(ValueError, ["argument 2 'plan_info'", "not a prefill plan_info"], prun,
           tvm_ffi.convert([0x66694641, 15, 1]))
    raises(ValueError, ["argument 2 'plan_info'", "not a prefill plan_info"], prun,
           tvm_ffi.convert([7, 0, 1]))
    raises(TypeError, ["argument 2 'plan_info'", "plan_info array"], prun, 5)
    raises(ValueError, ["argument 12 'mask_mode_code'", "custom masks"], m.batch_prefill_paged_run,
           fws, iws, info2, q, cache, cache, qo, kv, idx, last, q, lse, 2, 1, -1, False, 0.125,
           1.0, 1e-4)
    raises(ValueError, ["batch_prefill_ragged_run", "page_size 1"], m.batch_prefill_ragged_run, fws,
           iws, info2, q, q, q, qo, kv, q, lse, 1, 0, -1, False, 0.125, 1.0, 1e-4)
    iws3 = np.zeros(4096, np.uint8)
    rinfo = m.batch_prefill_plan(fws, iws3, pl, qo, qo, np.array([3, 5], np.int32), 8, 2, 8, 2, 1, False,
                                 192, 128, True, -1, -1, False, 0)  # DeepSeek's MHA prefill (ragged)
    raises(ValueError, ["batch_prefill_ragged_run", "float_workspace_buffer"], m.batch_prefill_ragged_run, fws,
           iws3, rinfo, q, q, q, qo, qo, q, lse, 1, 0, -1, False, 0.125, 1.0, 1e-4)
    raises(ValueError, ["argument 13 'head_dim_vo'", "equal"], plan, iws, True, 192, 64)
    raises(ValueError, ["argument 13 'head_dim_vo'", "page_size 1"], plan, iws, True, 192, 128)
    raises(ValueError, ["argument 15 'window_left'"], m.batch_prefill_plan, fws, iws, pl, qo, kv, kvlen, 8, 2,
           8, 2, 16, False, 64, 64, True, 1 << 40, -1, False, 0)
    # more int workspaces than records: the least recently planned is taken over, its
    # plan_infos then stale (a KV cache made again after a reload)
    old = plan(iws)
    keep = [np.zeros(256, np.uint8) for _ in range(20)]  # 20 live (distinct) workspaces
    for w in keep:
        plan(w)
    raises(ValueError, ["argument 2 'plan_info'"], prun, old)
    raises(TypeError, ["batch_prefill_plan", "takes 19 arguments", "got 3"], m.batch_prefill_plan,
           fws, iws, pl)
    raises(ValueError, ["argument 3 'qo_indptr'", "int32"], m.batch_prefill_plan, fws, iws, pl,
           qo.astype(np.int64), kv, kvlen, 8, 2, 8, 2, 16, False, 64, 64, True, -1, -1, False, 0)
    # decode: a plan gets no lengths (the first run reads them from the device); CUDA-graph
    # decode is refused; the run's dtypes must be the plan's
    e16, e8 = np.zeros(0, np.float16), np.zeros(0, np.float16)
    dinfo = m.batch_decode_plan(fws, iws, pl, kv, 2, 8, 2, 16, False, -1, 0.0, 64, 64, e16, e8)
    assert len(dinfo) == 3, list(dinfo)
    raises(ValueError, ["argument 8 'enable_cuda_graph'", "not supported"], m.batch_decode_plan,
           fws, iws, pl, kv, 2, 8, 2, 16, True, -1, 0.0, 64, 64, e16, e8)
    qd = np.zeros((2, 8, 64), np.float16)
    drun = lambda inf, qq=qd: m.batch_decode_run(  # noqa: E731
        fws, iws, inf, qq, cache, cache, kv, idx, last, qq, None, 1, -1, False, 0.125, 1.0, 1e-4)
    raises(ValueError, ["argument 2 'plan_info'", "not a decode plan_info"], drun, info2)
    raises(ValueError, ["fi_copy_to_host", CPU], drun, dinfo)  # the lengths' copy, then refused
    raises(ValueError, ["argument 3 'q'", "dtype"], drun, dinfo, qd.astype(np.float32))
    m.configure(True)
    m.configure(False)
    raises(TypeError, ["configure", "takes 1 arguments"], m.configure)


@case
def init_after_first_op_is_refused():
    import fi_runtime

    fi_runtime.version()  # any call made so far may have created the runtime
    try:
        fi_runtime.ops.rmsnorm(x16, w16, 1e-6, x16)
    except ValueError:
        pass
    raises(RuntimeError, ["init", "before any op"], fi_runtime.init, ":memory:")


@case
def package_uses_tvm_ffi_backend():
    import fi_runtime

    b = fi_runtime.backend()
    assert b.name == "tvm_ffi" and b.path == TVM, (b.name, b.path)
    assert fi_runtime.version().count(".") == 2
    raises(ValueError, ["FI_ERR_INVALID_ARGUMENT", CPU], fi_runtime.ops.silu_and_mul, x16, x16[:, :32])


@case
def flashinfer_ops_reach_the_library():
    from fi_runtime import flashinfer as fl

    probs = np.ones((2, 16), np.float32)
    for f, args in [(fl.rmsnorm, (x16, w16)), (fl.fused_add_rmsnorm, (x16, x16, w16)),
                    (fl.gemma_rmsnorm, (x16, w16)), (fl.layernorm, (x16, w16, w16)),
                    (fl.silu_and_mul, (x16,)), (fl.gelu_tanh_and_mul, (x16,)),
                    (fl.merge_state, (np.zeros((4, 2, 64), np.float16), np.zeros((4, 2), np.float32),
                                      np.zeros((4, 2, 64), np.float16), np.zeros((4, 2), np.float32))),
                    (fl.softmax, (probs, 0.7)), (fl.sampling_from_probs, (probs,)),
                    (fl.top_p_sampling_from_probs, (probs, 0.9)),
                    (fl.top_k_renorm_probs, (probs, 4)), (fl.top_k_mask_logits, (probs, 4)),
                    (fl.top_k_top_p_sampling_from_probs, (probs, 4, 0.9)),
                    (fl.apply_rope_pos_ids, (np.zeros((4, 2, 64), np.float16),
                                             np.zeros((4, 1, 64), np.float16), np.arange(4))),
                    (fl.get_batch_indices_positions, (np.array([0, 4], np.int32),
                                                      np.array([4], np.int32), 4)),
                    (fl.single_prefill_with_kv_cache, (np.zeros((4, 8, 128), np.float16),
                                                       np.zeros((4, 2, 128), np.float16),
                                                       np.zeros((4, 2, 128), np.float16)))]:
        raises(ValueError, ["FI_ERR_INVALID_ARGUMENT", CPU], f, *args)


@case
def flashinfer_argument_checks_name_the_argument():
    import fi_runtime
    from fi_runtime import flashinfer as fl

    U = fi_runtime.UnsupportedError
    raises(TypeError, ["rmsnorm", "weight", "tensor"], fl.rmsnorm, x16, [1.0])
    raises(TypeError, ["rmsnorm", "eps", "float"], fl.rmsnorm, x16, w16, eps="big")
    raises(ValueError, ["silu_and_mul", "even"], fl.silu_and_mul, np.zeros((2, 7), np.float16))
    raises(U, ["indices"], fl.sampling_from_probs, x16, indices=x16)
    raises(U, ["filter_apply_order", "joint"], fl.top_k_top_p_sampling_from_logits, x16, 3, 0.9,
           filter_apply_order="joint")
    raises(U, ["pos_encoding_mode", "ALIBI"], fl.single_decode_with_kv_cache, x16, x16, x16,
           pos_encoding_mode="ALIBI")
    raises(U, ["custom_mask"], fl.single_prefill_with_kv_cache, x16, x16, x16, custom_mask=x16)
    raises(ValueError, ["kv_layout", "XYZ"], fl.append_paged_kv_cache, x16, x16, x16, x16,
           (x16, x16), x16, x16, x16, kv_layout="XYZ")
    raises(ValueError, ["paged_kv_cache", "5-D"], fl.append_paged_kv_cache, x16, x16, x16, x16,
           x16, x16, x16, x16)


@case
def flashinfer_wrappers_check_and_reach_the_library():
    import fi_runtime
    from fi_runtime import flashinfer as fl

    ws = np.zeros(1 << 16, np.uint8)
    raises(ValueError, ["kv_layout"], fl.BatchDecodeWithPagedKVCacheWrapper, ws, "XYZ")
    raises(ValueError, ["use_cuda_graph=True needs", "paged_kv_indptr_buffer"],
           fl.BatchDecodeWithPagedKVCacheWrapper, ws, use_cuda_graph=True)
    d = fl.BatchDecodeWithPagedKVCacheWrapper(ws, "HND", use_tensor_cores=True)
    raises(RuntimeError, ["call plan before run"], d.run, x16, (x16, x16))
    indptr, idx, last = np.array([0, 1, 3], np.int32), np.arange(3, dtype=np.int32), np.array([5, 7], np.int32)
    raises(fi_runtime.UnsupportedError, ["block_tables"], d.plan, indptr, idx, last, 32, 8, 128,
           16, block_tables=x16)
    raises(TypeError, ["too many positional"], d.plan, indptr, idx, last, 32, 8, 128, 16,
           *range(17))
    raises(ValueError, ["batch_decode_workspace_size", "FI_ERR_INVALID_ARGUMENT"], d.plan,
           indptr, idx, last, 32, 8, 128, 16, "NONE", -1, None, "bfloat16")
    p = fl.BatchPrefillWithPagedKVCacheWrapper(ws)
    raises(TypeError, ["unexpected keyword argument 'bogus'"], p.plan, indptr, indptr, idx, last,
           32, 8, 128, 16, bogus=1)
    raises(fi_runtime.UnsupportedError, ["o_data_type"], p.plan, indptr, indptr, idx, last,
           32, 8, 128, 16, q_data_type="float16", o_data_type="float32")
    raises(RuntimeError, ["batch_prefill_workspace_size"], p.plan, indptr, indptr, idx, last,
           32, 8, 128, 16, causal=True)
    r = fl.BatchPrefillWithRaggedKVCacheWrapper(ws)
    raises(RuntimeError, ["call plan before run"], r.run, x16, x16, x16)


@case
def mla_exports_and_wrapper_check_and_reach_the_library():
    import fi_runtime
    from fi_runtime import flashinfer as fl

    m = module()
    ws = np.zeros(1 << 16, np.uint8)
    qo, kvp, kvl = np.array([0, 1, 2], np.int32), np.array([0, 2, 3], np.int32), np.array([20, 5], np.int32)
    raises(ValueError, ["fi_batch_mla_paged_plan", "workspace", CPU], m.batch_mla_paged_plan, ws, qo,
           kvp, kvl, 16, 512, 64, 16, 1, 0.07, "bfloat16", "bfloat16", 0, 0, 0)
    raises(ValueError, ["argument 3 'kv_len'", "int32"], m.batch_mla_paged_plan, ws, qo, kvp,
           kvl.astype(np.int64), 16, 512, 64, 16, 1, 0.07, "bfloat16", "bfloat16", 0, 0, 0)
    raises(ValueError, ["argument 0 'plan'", "not a live batch MLA plan"], m.batch_mla_paged_run, 77,
           x16, x16, x16, x16, x16, x16, None)
    raises(ValueError, ["fi_batch_mla_workspace_size", "GPU"], m.batch_mla_workspace_size, 1, 0, 2, 2, 16)
    raises(ValueError, ["fi_append_paged_mla_kv_cache", "append_ckv"], m.append_paged_mla_kv_cache,
           x16, x16, x16, x16, x16, x16, x16, x16, x16)
    w = fl.BatchMLAPagedAttentionWrapper(ws)
    raises(RuntimeError, ["call plan before run"], w.run, x16, x16, x16, x16)
    raises(fi_runtime.UnsupportedError, ["use_profiler"], w.plan, qo, kvp, np.arange(3, dtype=np.int32),
           kvl, 16, 512, 64, 16, True, 0.07, "bfloat16", "bfloat16", use_profiler=True)
    raises(ValueError, ["batch_mla_workspace_size", "GPU"], w.plan, qo, kvp, np.arange(3, dtype=np.int32),
           kvl, 16, 512, 64, 16, True, 0.07, "bfloat16", "bfloat16")
    raises(ValueError, ["fi_append_paged_mla_kv_cache"], fl.append_paged_mla_kv_cache, x16, x16, x16,
           x16, x16, x16, x16, x16, x16)


@case
def packbits_exports_and_wrappers_reach_the_library():
    from fi_runtime import flashinfer as fl

    m = module()
    x8 = np.zeros(20, np.uint8)
    raises(ValueError, ["fi_packbits", "x", CPU], m.packbits, x8, "little", np.zeros(3, np.uint8))
    raises(ValueError, ["argument 1 'bitorder'", "'middle'"], m.packbits, x8, "middle", np.zeros(3, np.uint8))
    raises(ValueError, ["fi_segment_packbits"], m.segment_packbits, x8, np.array([0, 20], np.int32), 1,
           np.zeros(3, np.uint8), np.zeros(2, np.int32))
    raises(ValueError, ["fi_packbits"], fl.packbits, x8, "little")
    raises(ValueError, ["bitorder must be"], fl.packbits, x8, "middle")
    raises(ValueError, ["fi_segment_packbits"], fl.segment_packbits, x8, np.array([0, 9, 20], np.int32), "little")
    # the prefill wrappers pack an unpacked custom_mask themselves (2 requests: 1 x 5 and 2 x 7 here)
    ws = np.zeros(1 << 16, np.uint8)
    r = fl.BatchPrefillWithRaggedKVCacheWrapper(ws)
    qo, kv = np.array([0, 1, 3], np.int32), np.array([0, 5, 12], np.int32)
    raises(ValueError, ["custom_mask has 18 elements", "need 19"], r.plan, qo, kv, 8, 8, 128,
           custom_mask=np.ones(18, np.uint8))
    raises(ValueError, ["not both"], r.plan, qo, kv, 8, 8, 128, custom_mask=np.ones(19, np.uint8),
           packed_custom_mask=np.ones(3, np.uint8))
    raises(ValueError, ["fi_segment_packbits"], r.plan, qo, kv, 8, 8, 128, custom_mask=np.ones(19, np.uint8))


@case
def ctypes_fallback_serves_flat_ops():
    code = ("import numpy as np, fi_runtime\n"
            "from fi_runtime import flashinfer as fl\n"
            "b = fi_runtime.backend(); print('BACKEND', b.name)\n"
            "x = np.zeros((4, 64), np.float16)\n"
            "try: fl.rmsnorm(x, np.ones(64, np.float16))\n"
            "except ValueError as e: print('VE', e)\n"
            "try: fl.single_decode_with_kv_cache(x, x, x)\n"
            "except NotImplementedError as e: print('NIE', e)\n"
            "try: fi_runtime.ops.rmsnorm(x, None, 1e-6, x)\n"
            "except TypeError as e: print('TE', e)\n")
    rc, out = py(code, FI_RUNTIME_BACKEND="ctypes")
    assert rc == 0, out
    for needle in ["BACKEND ctypes", "VE rmsnorm: FI_ERR_INVALID_ARGUMENT: fi_rmsnorm", CPU,
                   "NIE single_decode: needs the TVM-FFI library", "TE rmsnorm: argument 1 'weight'"]:
        assert needle in out, (needle, out)


@case
def pip_install_builds_nothing():
    with tempfile.TemporaryDirectory() as t:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                            "--no-build-isolation", "--no-index", "--disable-pip-version-check",
                            "--target", t, os.path.join(ROOT, "python")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        built = [f for _, _, fs in os.walk(t) for f in fs if f.endswith((".so", ".o", ".c"))]
        assert not built, built
        assert os.path.exists(os.path.join(t, "fi_runtime", "flashinfer.py"))


def torch_case(fn):
    """A case that needs torch (not installed by make test: PyPI's x86-64 torch is the CUDA
    build, several GB); SKIP without it."""
    def run():
        try:
            import torch  # noqa: F401
        except ImportError:
            return "SKIP"
        return fn()
    run.__name__ = fn.__name__
    return case(run)


@torch_case
def torch_custom_ops_registered_with_fake_impls():
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    import fi_runtime  # noqa: F401
    from fi_runtime import _torch

    assert "rmsnorm" in _torch.REGISTERED and "batch_decode_run" in _torch.REGISTERED
    assert "batch_decode_plan" not in _torch.REGISTERED  # host side, not traced
    with FakeTensorMode():
        x = torch.empty(4, 64, dtype=torch.float16, device="cuda" if torch.cuda.is_available() else "cpu")
        torch.ops.fi_runtime.rmsnorm(x, x[0], 1e-6, x)  # the fake: no library call


@torch_case
def torch_tensors_reach_the_library():
    import torch

    from fi_runtime import flashinfer as fl

    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    raises(ValueError, ["FI_ERR_INVALID_ARGUMENT", CPU], fl.rmsnorm, x, x[0])
    raises(ValueError, ["FI_ERR_INVALID_ARGUMENT", CPU], torch.ops.fi_runtime.silu_and_mul, x,
           x[:, :32])


for c in CASES:
    try:
        r = c()
        print(f"SKIP {c.__name__}: torch is not installed" if r == "SKIP" else f"PASS {c.__name__}")
    except Exception:
        print(f"FAIL {c.__name__}")
        traceback.print_exc(file=sys.stdout)
sys.stdout.flush()
