"""FlashInfer's batch attention wrappers over fi_runtime's plan / run:
BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper and
BatchPrefillWithRaggedKVCacheWrapper. plan copies the index arrays to the host (as
FlashInfer does) and plans into float_workspace_buffer, which must hold the plan's
workspace (ValueError says how many bytes); run only launches. CUDA-graph mode
(use_cuda_graph=True with the index buffers): the plan is made for the buffers' batch size
and run reads the buffers, which plan refills, so a captured run replays after re-plans."""

from . import ops
from ._util import (dtype_name, empty, host_i32, is_torch, kv_pair, layout, number,
                    pos_encoding, run, tensor, unsupported)

_DECODE_LEGACY = ("pos_encoding_mode", "window_left", "logits_soft_cap", "q_data_type",
                  "kv_data_type", "o_data_type", "data_type", "sm_scale", "rope_scale",
                  "rope_theta", "non_blocking", "block_tables", "seq_lens", "fixed_split_size",
                  "disable_split_kv", "q_len_per_req")


class _Wrapper:
    _kind = ""  # "decode" or "prefill": its plan handle's destroy function

    def __init__(self, fn, float_workspace_buffer, kv_layout, use_cuda_graph, backend,
                 graph_buffers):
        self._fn = fn
        self._workspace = tensor(fn, "float_workspace_buffer", float_workspace_buffer)
        self._kv_layout = kv_layout
        self._layout = layout(fn, kv_layout)
        if backend not in ("auto", "fa2", "fa3"):
            unsupported(fn, "backend", backend)
        self._use_cuda_graph = bool(use_cuda_graph)
        self._buffers = graph_buffers
        if self._use_cuda_graph and any(b is None for b in graph_buffers.values()):
            missing = [k for k, b in graph_buffers.items() if b is None]
            raise ValueError(f"{fn}: use_cuda_graph=True needs {', '.join(missing)}")
        self._plan = 0
        self._plan_args = None  # what the last plan call passed (for a re-plan in run)
        self._kv_memo = None  # (cache, its address, (k, v)): _kv's last

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer=None,
                               *args):
        self._destroy()
        self._workspace = tensor(self._fn, "float_workspace_buffer", float_workspace_buffer)

    def _destroy(self):
        if self._plan:
            getattr(ops, f"batch_{self._kind}_plan_destroy")(self._plan)
            self._plan = 0

    def __del__(self):
        try:
            self._destroy()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def _check_workspace(self, need):
        ws = self._workspace
        have = 1
        for d in ws.shape:
            have *= int(d)
        have *= ws.itemsize if hasattr(ws, "itemsize") else ws.element_size()
        if have < need:
            raise ValueError(f"{self._fn}.plan: float_workspace_buffer holds {have} bytes; this "
                             f"plan needs {need}")

    def _device(self):
        dev = self._workspace.__dlpack_device__()
        return int(dev[0]), int(dev[1])

    def _fill(self, name, x, n):
        """In CUDA-graph mode, x copied into its buffer (the run reads the buffer)."""
        buf = self._buffers[name]
        if not self._use_cuda_graph:
            return x
        if not is_torch(buf):
            raise ValueError(f"{self._fn}: CUDA-graph mode needs torch buffers")
        buf[:n].copy_(x[:n], non_blocking=True)
        return buf

    def _replan_if(self, fn, attn_changes):
        """Re-plans when run passes scales or a window that differ from the plan's (they
        are fixed at plan time in fi_runtime); attn_changes maps an attention parameter's
        index (FT_ATTN_SIG's order) to run's value, None for the plan's."""
        if not self._plan:
            raise RuntimeError(f"{fn}: call plan before run")
        args = list(self._plan_args[:-1])
        changed = False
        for k, v in attn_changes.items():
            if v is not None and args[self._attn_at + k] != v:
                args[self._attn_at + k] = v
                changed = True
        if changed:
            # (a prefill plan's packed custom mask goes with every re-plan: the same tensor)
            mask = (getattr(self, "_mask", None),) if self._kind == "prefill" else ()
            if getattr(self, "_dv", None) is not None:
                mask += (self._dv,)  # the ragged plan's head_dim_vo
            self._plan = getattr(ops, f"batch_{self._kind}_plan")(*args, self._plan, *mask)
            self._plan_args = tuple(args) + (self._plan,)

    def _kv(self, fn, paged_kv_cache):
        """kv_pair of the cache, the views kept while the same tensor comes back at the same
        address (a decode step's cache is the same object every layer and step: two torch
        slices a run are a third of its host time)."""
        c = self._kv_memo
        if c is not None and c[0] is paged_kv_cache and (not is_torch(paged_kv_cache)
                                                        or paged_kv_cache.data_ptr() == c[1]):
            return c[2]
        kv = kv_pair(fn, paged_kv_cache)
        if not isinstance(paged_kv_cache, (tuple, list)):
            self._kv_memo = (paged_kv_cache, paged_kv_cache.data_ptr() if is_torch(paged_kv_cache)
                             else None, kv)
        return kv

    def _outputs(self, q, out, lse, return_lse):
        out = empty(q, q.shape) if out is None else tensor(self._fn, "out", out)
        if return_lse and lse is None:
            lse = empty(q, (q.shape[0], q.shape[1]), "float32")
        return out, (lse if return_lse or lse is not None else None)


def _attn(fn, head_dim, pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale,
          rope_theta):
    return [(1.0 / head_dim ** 0.5) if sm_scale is None else number(fn, "sm_scale", sm_scale),
            0.0 if logits_soft_cap is None else number(fn, "logits_soft_cap", logits_soft_cap),
            number(fn, "window_left", window_left, int), pos_encoding(fn, pos_encoding_mode),
            1.0 if rope_scale is None else number(fn, "rope_scale", rope_scale),
            1e4 if rope_theta is None else number(fn, "rope_theta", rope_theta), 1.0, 1.0]


def _refuse(fn, **kwargs):
    """UnsupportedError for the first argument that is set (not None / False / 0)."""
    for k, v in kwargs.items():
        if v is not None and v is not False and not (isinstance(v, int) and v == 0):
            unsupported(fn, k, v if not hasattr(v, "__dlpack__") else "a tensor")


def _dtypes(fn, q_data_type, kv_data_type, o_data_type):
    q = dtype_name(fn, "q_data_type", q_data_type)
    kv = dtype_name(fn, "kv_data_type", kv_data_type) or q
    o = dtype_name(fn, "o_data_type", o_data_type)
    if o is not None and o != q:
        unsupported(fn, "o_data_type", o_data_type, "differs from q's dtype, which fi_runtime "
                    "writes")
    return q, kv


class BatchDecodeWithPagedKVCacheWrapper(_Wrapper):
    _kind = "decode"
    _attn_at = 10  # the attention parameters' first index in batch_decode_plan's arguments

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False,
                 use_tensor_cores=False, paged_kv_indptr_buffer=None,
                 paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None):
        fn = "BatchDecodeWithPagedKVCacheWrapper"
        _refuse(fn, jit_args=jit_args)
        super().__init__(fn, float_workspace_buffer, kv_layout, use_cuda_graph, backend,
                         {"paged_kv_indptr_buffer": paged_kv_indptr_buffer,
                          "paged_kv_indices_buffer": paged_kv_indices_buffer,
                          "paged_kv_last_page_len_buffer": paged_kv_last_page_len_buffer})

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, *deprecated_positional_args, **kwargs):
        fn = "BatchDecodeWithPagedKVCacheWrapper.plan"
        if len(deprecated_positional_args) > len(_DECODE_LEGACY):
            raise TypeError(f"{fn}: too many positional arguments")
        for name, value in zip(_DECODE_LEGACY, deprecated_positional_args):
            if name in kwargs:
                raise TypeError(f"{fn}: got {name} both by position and by keyword")
            kwargs[name] = value
        return self._plan_kw(indptr, indices, last_page_len, num_qo_heads, num_kv_heads,
                             head_dim, page_size, **kwargs)

    def _plan_kw(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
                 page_size, pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None,
                 q_data_type="float16", kv_data_type=None, o_data_type=None, data_type=None,
                 sm_scale=None, rope_scale=None, rope_theta=None, non_blocking=True,
                 block_tables=None, seq_lens=None, fixed_split_size=None,
                 disable_split_kv=False, q_len_per_req=None, window_right=None):
        fn = "BatchDecodeWithPagedKVCacheWrapper.plan"
        _refuse(fn, block_tables=block_tables, seq_lens=seq_lens,
                fixed_split_size=fixed_split_size, disable_split_kv=disable_split_kv,
                window_right=window_right)
        if q_len_per_req not in (None, 1):
            unsupported(fn, "q_len_per_req", q_len_per_req)
        if data_type is not None:
            q_data_type = kv_data_type = data_type
        qdt, kvdt = _dtypes(fn, q_data_type, kv_data_type, o_data_type)
        indptr_h = host_i32(fn, "indptr", indptr)
        last_h = host_i32(fn, "last_page_len", last_page_len)
        batch = int(indptr_h.shape[0]) - 1
        max_batch = 0
        if self._use_cuda_graph:
            max_batch = int(self._buffers["paged_kv_last_page_len_buffer"].shape[0])
        hq, hk, d = (number(fn, n, v, int) for n, v in (
            ("num_qo_heads", num_qo_heads), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)))
        self._check_workspace(ops.batch_decode_workspace_size(
            *self._device(), max_batch or max(batch, 1), hq, hk, d))
        self._indptr = self._fill("paged_kv_indptr_buffer", tensor(fn, "indptr", indptr), batch + 1)
        self._indices = self._fill("paged_kv_indices_buffer", tensor(fn, "indices", indices),
                                   int(indptr_h[-1]))
        self._last = self._fill("paged_kv_last_page_len_buffer",
                                tensor(fn, "last_page_len", last_page_len), batch)
        attn = _attn(fn, d, pos_encoding_mode, window_left, logits_soft_cap, sm_scale,
                     rope_scale, rope_theta)
        self._sm_scale = attn[0]
        args = (self._workspace, indptr_h, last_h, hq, hk, d, number(fn, "page_size", page_size, int),
                qdt, kvdt, max_batch, *attn)
        self._plan = ops.batch_decode_plan(*args, self._plan)
        self._plan_args = args + (self._plan,)

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None,
            lse=None, return_lse=False, enable_pdl=None, window_left=None, sinks=None,
            q_len_per_req=None, skip_softmax_threshold_scale_factor=None, kv_cache_sf=None):
        fn = "BatchDecodeWithPagedKVCacheWrapper.run"
        if args:
            unsupported(fn, "positional arguments after paged_kv_cache", args)
        if kv_cache_sf is not None or skip_softmax_threshold_scale_factor is not None:
            _refuse(fn, kv_cache_sf=kv_cache_sf,
                    skip_softmax_threshold_scale_factor=skip_softmax_threshold_scale_factor)
        if q_len_per_req not in (None, 1):
            unsupported(fn, "q_len_per_req", q_len_per_req)
        tensor(fn, "q", q)
        k, v = self._kv(fn, paged_kv_cache)
        if q_scale is None and window_left is None and k_scale is None and v_scale is None and \
                self._plan and self._plan_args[self._attn_at] == self._sm_scale:
            pass  # the common call: the plan's own scale, nothing to compare
        else:
            sm = None
            if self._plan:
                sm = self._sm_scale * (1.0 if q_scale is None else number(fn, "q_scale", q_scale))
            self._replan_if(fn, {0: sm, 2: window_left, 6: k_scale, 7: v_scale})
        if out is None or return_lse:
            out, lse = self._outputs(q, out, lse, return_lse)
        else:
            tensor(fn, "out", out)
        if sinks is not None:
            tensor(fn, "sinks", sinks)
        run("batch_decode_run", self._plan, q, k, v, self._indptr, self._indices, self._last,
            self._layout, out, lse, sinks, 1)  # lse in base 2, as FlashInfer's
        return (out, lse) if return_lse else out

    def run_return_lse(self, q, paged_kv_cache, *args, **kwargs):
        return self.run(q, paged_kv_cache, *args, return_lse=True, **kwargs)


def _pack_mask(fn, custom_mask, packed_custom_mask, qo_h, kv_lens):
    """An unpacked custom_mask (every request's [L_q][L_kv] booleans, flattened one after the
    other) packed as the plan takes it: segment_packbits, little-endian bits."""
    if custom_mask is None:
        return packed_custom_mask
    if packed_custom_mask is not None:
        raise ValueError(f"{fn}: give custom_mask or packed_custom_mask, not both")
    from .flashinfer import segment_packbits

    flat = tensor(fn, "custom_mask", custom_mask).reshape(-1)
    qk = [0]
    for b, lkv in enumerate(kv_lens):
        qk.append(qk[-1] + (int(qo_h[b + 1]) - int(qo_h[b])) * int(lkv))
    if int(flat.shape[0]) != qk[-1]:
        raise ValueError(f"{fn}: custom_mask has {int(flat.shape[0])} elements; the batch's [L_q][L_kv] "
                         f"masks need {qk[-1]}")
    import numpy

    return segment_packbits(flat, numpy.array(qk, numpy.int32), "little")[0]


class _Prefill(_Wrapper):
    _kind = "prefill"

    def _plan_common(self, fn, qo_indptr_h, batch, heads, head_dim_vo,
                     packed_custom_mask, causal, use_fp16_qk_reduction, attn, dtypes, extra,
                     dvo_ok=False):
        hq, hk, d = heads
        if head_dim_vo is not None and head_dim_vo != d and not dvo_ok:
            unsupported(fn, "head_dim_vo", head_dim_vo, "differs from head_dim_qk (the ragged "
                        "wrapper takes 192 with 128)")
        _refuse(fn, use_fp16_qk_reduction=use_fp16_qk_reduction, **extra)
        if packed_custom_mask is not None:
            tensor(fn, "packed_custom_mask", packed_custom_mask)
            # FlashInfer's mask replaces causal (MaskMode.CUSTOM); fi_runtime AND-s the two
            causal = False
        if self._plan and (packed_custom_mask is None) != (getattr(self, "_mask", None) is None):
            self._destroy()  # masked plans run another kernel: a new plan, not a re-plan
        total = int(qo_indptr_h[-1])
        max_batch = max_qo = 0
        if self._use_cuda_graph:
            max_batch = int(self._buffers["qo_indptr_buf"].shape[0]) - 1
            max_qo = getattr(self, "_max_qo", 0) or total  # fixed by the first plan
            self._max_qo = max_qo
        self._check_workspace(ops.batch_prefill_workspace_size(
            *self._device(), max_batch or max(batch, 1), max_qo or max(total, 1), hq, hk, d))
        return [hq, hk, d], list(dtypes) + [max_batch, max_qo] + attn + [int(bool(causal))]


_PREFILL_REFUSED = ("prefix_len_ptr", "token_pos_in_items_ptr", "token_pos_in_items_len",
                    "max_item_len_ptr", "seq_lens", "seq_lens_q", "block_tables",
                    "max_token_per_sequence", "max_sequence_kv", "fixed_split_size",
                    "disable_split_kv", "v_indptr", "o_indptr")


def _prefill_kwargs(fn, kw):
    """The FlashInfer plan arguments fi_runtime has, after refusing the rest."""
    _refuse(fn, **{k: kw.pop(k) for k in _PREFILL_REFUSED if k in kw})
    kw.pop("non_blocking", None)
    known = {"head_dim_vo", "custom_mask", "packed_custom_mask", "causal", "pos_encoding_mode",
             "use_fp16_qk_reduction", "sm_scale", "window_left", "logits_soft_cap",
             "rope_scale", "rope_theta", "q_data_type", "kv_data_type", "o_data_type"}
    for k in kw:
        if k not in known:
            raise TypeError(f"{fn}: unexpected keyword argument {k!r}")
    g = kw.get
    return g("head_dim_vo"), g("custom_mask"), g("packed_custom_mask"), g("causal", False), \
        g("use_fp16_qk_reduction", False), \
        (g("pos_encoding_mode", "NONE"), g("window_left", -1), g("logits_soft_cap"),
         g("sm_scale"), g("rope_scale"), g("rope_theta")), \
        (g("q_data_type", "float16"), g("kv_data_type"), g("o_data_type"))


class BatchPrefillWithPagedKVCacheWrapper(_Prefill):
    _attn_at = 12  # batch_prefill_paged_plan: workspace, 3 index arrays, 4 sizes, 2 dtypes, 2 maxima

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False,
                 qo_indptr_buf=None, paged_kv_indptr_buf=None, paged_kv_indices_buf=None,
                 paged_kv_last_page_len_buf=None, custom_mask_buf=None, mask_indptr_buf=None,
                 backend="auto", jit_args=None, jit_kwargs=None):
        fn = "BatchPrefillWithPagedKVCacheWrapper"
        _refuse(fn, custom_mask_buf=custom_mask_buf, mask_indptr_buf=mask_indptr_buf,
                jit_args=jit_args, jit_kwargs=jit_kwargs)
        super().__init__(fn, float_workspace_buffer, kv_layout, use_cuda_graph, backend,
                         {"qo_indptr_buf": qo_indptr_buf, "paged_kv_indptr_buf": paged_kv_indptr_buf,
                          "paged_kv_indices_buf": paged_kv_indices_buf,
                          "paged_kv_last_page_len_buf": paged_kv_last_page_len_buf})

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len,
             num_qo_heads, num_kv_heads, head_dim_qk, page_size, **kwargs):
        fn = "BatchPrefillWithPagedKVCacheWrapper.plan"
        dv, cm, pcm, causal, fp16, a, dts = _prefill_kwargs(fn, kwargs)
        qo_h = host_i32(fn, "qo_indptr", qo_indptr)
        kv_h = host_i32(fn, "paged_kv_indptr", paged_kv_indptr)
        last_h = host_i32(fn, "paged_kv_last_page_len", paged_kv_last_page_len)
        batch = int(qo_h.shape[0]) - 1
        ps = number(fn, "page_size", page_size, int)
        pcm = _pack_mask(fn, cm, pcm, qo_h, [
            (int(kv_h[b + 1]) - int(kv_h[b]) - 1) * ps + int(last_h[b]) if kv_h[b + 1] > kv_h[b] else 0
            for b in range(batch)])
        heads = [number(fn, n, v, int) for n, v in (("num_qo_heads", num_qo_heads),
                 ("num_kv_heads", num_kv_heads), ("head_dim_qk", head_dim_qk))]
        heads, rest = self._plan_common(fn, qo_h, batch, heads, dv, pcm, causal, fp16,
                                        _attn(fn, heads[2], *a), _dtypes(fn, *dts), {})
        self._indices = self._fill("paged_kv_indices_buf",
                                   tensor(fn, "paged_kv_indices", paged_kv_indices), int(kv_h[-1]))
        args = (self._workspace, qo_h, kv_h, last_h, *heads,
                number(fn, "page_size", page_size, int), *rest)
        self._plan = ops.batch_prefill_paged_plan(*args, self._plan, pcm)
        self._mask = pcm  # kept only once the plan took it (the plan reads it)
        self._plan_args = args + (self._plan,)

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None,
            lse=None, return_lse=False, enable_pdl=None, window_left=None, sinks=None,
            kv_cache_sf=None, skip_softmax_threshold_scale_factor=None, use_fp16_softmax=None,
            uses_spcompress=None):
        fn = "BatchPrefillWithPagedKVCacheWrapper.run"
        if args:
            unsupported(fn, "positional arguments after paged_kv_cache", args)
        _refuse(fn, kv_cache_sf=kv_cache_sf, use_fp16_softmax=use_fp16_softmax,
                uses_spcompress=uses_spcompress, q_scale=q_scale,
                skip_softmax_threshold_scale_factor=skip_softmax_threshold_scale_factor)
        tensor(fn, "q", q)
        k, v = self._kv(fn, paged_kv_cache)
        self._replan_if(fn, {2: window_left, 6: k_scale, 7: v_scale})
        out, lse = self._outputs(q, out, lse, return_lse)
        if sinks is not None:
            tensor(fn, "sinks", sinks)
        run("batch_prefill_paged_run", self._plan, q, k, v, self._indices, self._layout, out, lse,
            sinks, 1)  # lse in base 2, as FlashInfer's
        return (out, lse) if return_lse else out

    def run_return_lse(self, q, paged_kv_cache, *args, **kwargs):
        return self.run(q, paged_kv_cache, *args, return_lse=True, **kwargs)


class BatchPrefillWithRaggedKVCacheWrapper(_Prefill):
    _attn_at = 10  # batch_prefill_ragged_plan: workspace, 2 index arrays, 3 sizes, 2 dtypes, 2 maxima

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False,
                 qo_indptr_buf=None, kv_indptr_buf=None, custom_mask_buf=None,
                 mask_indptr_buf=None, backend="auto", jit_args=None, jit_kwargs=None):
        fn = "BatchPrefillWithRaggedKVCacheWrapper"
        _refuse(fn, custom_mask_buf=custom_mask_buf, mask_indptr_buf=mask_indptr_buf,
                jit_args=jit_args, jit_kwargs=jit_kwargs)
        super().__init__(fn, float_workspace_buffer, kv_layout, use_cuda_graph, backend,
                         {"qo_indptr_buf": qo_indptr_buf, "kv_indptr_buf": kv_indptr_buf})

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, **kwargs):
        fn = "BatchPrefillWithRaggedKVCacheWrapper.plan"
        dv, cm, pcm, causal, fp16, a, dts = _prefill_kwargs(fn, kwargs)
        qo_h = host_i32(fn, "qo_indptr", qo_indptr)
        kv_h = host_i32(fn, "kv_indptr", kv_indptr)
        batch = int(qo_h.shape[0]) - 1
        pcm = _pack_mask(fn, cm, pcm, qo_h, [int(kv_h[b + 1]) - int(kv_h[b]) for b in range(batch)])
        heads = [number(fn, n, v, int) for n, v in (("num_qo_heads", num_qo_heads),
                 ("num_kv_heads", num_kv_heads), ("head_dim_qk", head_dim_qk))]
        heads, rest = self._plan_common(fn, qo_h, batch, heads, dv, pcm, causal, fp16,
                                        _attn(fn, heads[2], *a), _dtypes(fn, *dts), {}, True)
        dvn = heads[2] if dv is None else number(fn, "head_dim_vo", dv, int)
        args = (self._workspace, qo_h, kv_h, *heads, *rest)
        # head_dim_vo after the mask (192 / 128: V's and out's head_dim apart); a re-plan
        # in run passes the same (_replan_if's mask tuple carries it)
        self._plan = ops.batch_prefill_ragged_plan(*args, self._plan, pcm, dvn)
        self._dv = dvn
        self._mask = pcm  # kept only once the plan took it (the plan reads it)
        self._plan_args = args + (self._plan,)

    begin_forward = plan

    def run(self, q, k, v, *args, q_scale=None, k_scale=None, v_scale=None, o_scale=None,
            out=None, lse=None, return_lse=False, enable_pdl=None, kv_cache_sf=None):
        fn = "BatchPrefillWithRaggedKVCacheWrapper.run"
        if args:
            unsupported(fn, "positional arguments after v", args)
        _refuse(fn, kv_cache_sf=kv_cache_sf, q_scale=q_scale, o_scale=o_scale)
        tensor(fn, "q", q), tensor(fn, "k", k), tensor(fn, "v", v)
        self._replan_if(fn, {6: k_scale, 7: v_scale})
        dv = getattr(self, "_dv", None)
        if out is None and dv is not None and dv != q.shape[-1]:  # out at V's head_dim
            out = empty(q, tuple(q.shape[:-1]) + (dv,))
        out, lse = self._outputs(q, out, lse, return_lse)
        run("batch_prefill_ragged_run", self._plan, q, k, v, self._layout, out, lse, None, 1)
        return (out, lse) if return_lse else out

    def run_return_lse(self, q, k, v, *args, **kwargs):
        return self.run(q, k, v, *args, return_lse=True, **kwargs)


class BatchMLAPagedAttentionWrapper(_Wrapper):
    """FlashInfer's MLA wrapper (the absorbed form): plan(qo_indptr, kv_indptr, kv_indices,
    kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe, page_size, causal, sm_scale,
    q_data_type, kv_data_type), then run(q_nope, q_pe, ckv_cache, kpe_cache)."""
    _kind = "mla"

    def __init__(self, float_workspace_buffer, use_cuda_graph=False, qo_indptr=None,
                 kv_indptr=None, kv_indices=None, kv_len_arr=None, backend="auto"):
        fn = "BatchMLAPagedAttentionWrapper"
        super().__init__(fn, float_workspace_buffer, "NHD", use_cuda_graph, backend,
                         {"qo_indptr": qo_indptr, "kv_indptr": kv_indptr, "kv_indices": kv_indices,
                          "kv_len_arr": kv_len_arr})

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv,
             head_dim_kpe, page_size, causal, sm_scale, q_data_type, kv_data_type,
             use_profiler=False):
        fn = "BatchMLAPagedAttentionWrapper.plan"
        _refuse(fn, use_profiler=use_profiler)
        qo_h = host_i32(fn, "qo_indptr", qo_indptr)
        kv_h = host_i32(fn, "kv_indptr", kv_indptr)
        len_h = host_i32(fn, "kv_len_arr", kv_len_arr)
        batch = int(qo_h.shape[0]) - 1
        q_dt = dtype_name(fn, "q_data_type", q_data_type)
        kv_dt = dtype_name(fn, "kv_data_type", kv_data_type) or q_dt
        heads = number(fn, "num_heads", num_heads, int)
        # CUDA-graph mode: a plan for the buffers' batch and every query token they can hold
        # (fixed by the first plan: a CUDA-graph re-plan must keep it)
        max_batch = int(self._buffers["qo_indptr"].shape[0]) - 1 if self._use_cuda_graph else 0
        max_q = 0
        if self._use_cuda_graph:
            max_q = getattr(self, "_max_qo", 0) or max(int(qo_h[-1]), max_batch)
            self._max_qo = max_q
        dev_t, dev_i = self._device()
        self._check_workspace(ops.batch_mla_workspace_size(dev_t, dev_i, max(batch, max_batch),
                                                           max(max_q, int(qo_h[-1]), 1), heads))
        self._indices = self._fill("kv_indices", tensor(fn, "kv_indices", kv_indices), int(kv_h[-1]))
        args = (self._workspace, qo_h, kv_h, len_h, heads,
                number(fn, "head_dim_ckv", head_dim_ckv, int),
                number(fn, "head_dim_kpe", head_dim_kpe, int),
                number(fn, "page_size", page_size, int), 1 if causal else 0,
                number(fn, "sm_scale", sm_scale), q_dt, kv_dt, max_batch, max_q)
        self._plan = ops.batch_mla_paged_plan(*args, self._plan)
        self._plan_args = args + (self._plan,)

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False,
            profiler_buffer=None, kv_len=None, page_table=None, return_lse_base_on_e=False):
        fn = "BatchMLAPagedAttentionWrapper.run"
        _refuse(fn, profiler_buffer=profiler_buffer, kv_len=kv_len, page_table=page_table)
        if not self._plan:
            raise RuntimeError(f"{fn}: call plan before run")
        tensor(fn, "q_nope", q_nope)
        out = empty(q_nope, (q_nope.shape[0], q_nope.shape[1], ckv_cache.shape[-1])) \
            if out is None else tensor(fn, "out", out)
        if return_lse and lse is None:
            lse = empty(q_nope, (q_nope.shape[0], q_nope.shape[1]), "float32")
        run("batch_mla_paged_run", self._plan, q_nope, tensor(fn, "q_pe", q_pe),
            tensor(fn, "ckv_cache", ckv_cache), tensor(fn, "kpe_cache", kpe_cache), self._indices,
            out, lse)
        if lse is not None and not return_lse_base_on_e:
            lse *= 1.4426950408889634  # FlashInfer's MLA lse is base 2 unless asked otherwise
        return (out, lse) if return_lse else out
