#!/usr/bin/env python3
"""tvm_abi_check.py: issue 44 item 5 without a CUDA-enabled TVM on the GPU machine: drives
libfi_runtime_tvm_flashinfer.so through tvm_ffi with the call sequence apache/tvm's
src/runtime/vm/attn_backend.h makes on FlashInfer's modules, checked against torch in
float64:

1. BeginForward of a prefill step (FlashInferRaggedPrefillFunc then
   FlashInferPagedPrefillFunc at depth 0): batch_prefill_plan twice (page_size 1 for the
   ragged one, the cache's page size for the paged one; host qo_indptr, kv_indptr and
   kv_len_arr; their own int workspaces; one shared float workspace), then for each of
   3 layers: batch_prefill_ragged_run over the step's new tokens (causal, NHD, as TVM's
   MHASelfAttn), batch_prefill_paged_run over the cached prefix (not causal: the prefix is
   older than every new token; K and V as the strided views TVM's PagedKVCacheView makes
   of one [pages, 2, H, page, D] buffer, HND), and TVM's merge of the two states (lse in
   base 2, merged here in torch as TVM's TIR merge does). Checked: the merged output
   against attention over prefix + new tokens, and each lse against log2-sum-exp.
2. Decode steps: batch_decode_plan (indptr only, empty q / kv tensors for the dtypes), then
   batch_decode_run per layer, over the same paged buffer; a second step with other
   lengths (a new plan generation; the stale plan_info is refused).
3. CUDA-graph prefill: batch_prefill_plan(enable_cuda_graph=True), a warm-up paged run, a
   run captured in a torch CUDA graph, then a re-plan with other lengths (same batch and
   token count) and a replay: the replay's output is the new plan's attention.
Prints one line a check and "N passed, M failed" last; exit 1 on a failure.
usage: FI_RUNTIME_LIBRARY=... python3 lab/gpu/tvm_abi_check.py BUILD_DIR"""
import math
import os
import sys

import torch
import tvm_ffi

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
M = tvm_ffi.load_module(os.path.join(BUILD, "libfi_runtime_tvm_flashinfer.so"))
dev = "cuda"
LOG2E = 1.0 / math.log(2.0)
results = []


def check(name, ok, detail):
    results.append(ok)
    print("%s %-58s %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)


def ref_attn(q, k, v, causal, sm):
    """q [n_q, H, D], k/v [n_kv, Hkv, D] (float64); causal aligned to the end. -> out, lse2."""
    H, Hkv = q.shape[1], k.shape[1]
    g = H // Hkv
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) * sm
    nq, nk = q.shape[0], k.shape[0]
    if causal:
        qi = torch.arange(nq, device=q.device)[:, None] + (nk - nq)
        ki = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(ki > qi, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [H, nq]
    p = torch.softmax(s, dim=-1)
    out = torch.einsum("hqk,khd->qhd", p, v)
    return out, (lse * LOG2E).transpose(0, 1)


def merge(o1, s1, o2, s2):
    """TVM's merge of two attention states, lse in base 2."""
    m = torch.maximum(s1, s2)
    w1, w2 = torch.exp2(s1 - m), torch.exp2(s2 - m)
    o = (o1 * w1[..., None] + o2 * w2[..., None]) / (w1 + w2)[..., None]
    return o, m + torch.log2(w1 + w2)


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def main():
    torch.manual_seed(0)
    dt = torch.float16
    H, Hkv, D, P = 32, 8, 128, 16
    sm = 1.0 / math.sqrt(D)
    fws = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)
    iws = [torch.zeros(8 << 20, dtype=torch.uint8, device=dev) for _ in range(3)]
    pl = torch.zeros(8 << 20, dtype=torch.uint8).pin_memory()
    n_layers = 3

    # ---- a prefill step: prefix in the cache, new tokens ragged ----
    prefix = [37, 0, 130, 64]
    new = [20, 9, 1, 50]
    B = len(prefix)
    pages_of = [(n + P - 1) // P for n in prefix]
    npages = 64  # room for the prefix and for every decode step's pages (27 at most below)
    perm = torch.randperm(npages).to(torch.int32)
    kv_indptr = [0]
    for n in pages_of:
        kv_indptr.append(kv_indptr[-1] + n)
    page_indices = perm[:kv_indptr[-1]].to(dev)
    last = [n - (pg - 1) * P if pg else 0 for n, pg in zip(prefix, pages_of)]
    qo_indptr = [0]
    for n in new:
        qo_indptr.append(qo_indptr[-1] + n)
    T = qo_indptr[-1]
    h32 = lambda x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    d32 = lambda x: torch.tensor(x, dtype=torch.int32, device=dev)  # noqa: E731

    # one [pages, 2, Hkv, P, D] buffer per layer; prefix tokens written through index math
    layers = []
    for layer in range(n_layers):
        pages = torch.zeros(npages, 2, Hkv, P, D, dtype=dt, device=dev)
        kpre = [torch.randn(n, Hkv, D, dtype=dt, device=dev) for n in prefix]
        vpre = [torch.randn(n, Hkv, D, dtype=dt, device=dev) for n in prefix]
        for b in range(B):
            for t in range(prefix[b]):
                pg = int(page_indices[kv_indptr[b] + t // P])
                pages[pg, 0, :, t % P] = kpre[b][t]
                pages[pg, 1, :, t % P] = vpre[b][t]
        q = torch.randn(T, H, D, dtype=dt, device=dev)
        knew = torch.randn(T, Hkv, D, dtype=dt, device=dev)
        vnew = torch.randn(T, Hkv, D, dtype=dt, device=dev)
        layers.append((pages, kpre, vpre, q, knew, vnew))

    # BeginForward: the ragged plan (page_size 1) and the paged plan (depth 0)
    rinfo = M.batch_prefill_plan(fws, iws[0], pl, h32(qo_indptr), h32(qo_indptr), h32(new), T, B, H, Hkv, 1,
                                 False, D, D, True, -1, -1, False, 0)
    pinfo = M.batch_prefill_plan(fws, iws[1], pl, h32(qo_indptr), h32(kv_indptr), h32(prefix), T, B, H, Hkv, P,
                                 False, D, D, False, -1, -1, False, 0)
    for layer, (pages, kpre, vpre, q, knew, vnew) in enumerate(layers):
        o_self = torch.full((T, H, D), float("nan"), dtype=dt, device=dev)
        s_self = torch.full((T, H), float("nan"), dtype=torch.float32, device=dev)
        M.batch_prefill_ragged_run(fws, iws[0], rinfo, q, knew, vnew, d32(qo_indptr), d32(qo_indptr), o_self,
                                   s_self, 1, 0, -1, False, sm, 1.0, 1e-4)
        o_x = torch.full((T, H, D), float("nan"), dtype=dt, device=dev)
        s_x = torch.full((T, H), float("nan"), dtype=torch.float32, device=dev)
        kview, vview = pages[:, 0], pages[:, 1]  # PagedKVCacheView(pages, 0 / 1): strided
        M.batch_prefill_paged_run(fws, iws[1], pinfo, q, kview, vview, d32(qo_indptr), d32(kv_indptr),
                                  page_indices, d32(last), o_x, s_x, 0, 1, -1, False, sm, 1.0, 1e-4)
        torch.cuda.synchronize()
        # references per request
        worst_o = worst_s = worst_x = 0.0
        for b in range(B):
            a, e = qo_indptr[b], qo_indptr[b + 1]
            qb = q[a:e].double()
            ro_self, rs_self = ref_attn(qb, knew[a:e].double(), vnew[a:e].double(), True, sm)
            worst_s = max(worst_s, (s_self[a:e].double() - rs_self).abs().max().item())
            if prefix[b]:
                ro_x, rs_x = ref_attn(qb, kpre[b].double(), vpre[b].double(), False, sm)
                worst_x = max(worst_x, (s_x[a:e].double() - rs_x).abs().max().item())
                o, s = merge(o_self[a:e].double(), s_self[a:e].double(), o_x[a:e].double(), s_x[a:e].double())
            else:  # no prefix: the paged run leaves out = 0, lse = -inf; the merge keeps self's
                o = o_self[a:e].double()
            kall = torch.cat([kpre[b], knew[a:e]]).double()
            vall = torch.cat([vpre[b], vnew[a:e]]).double()
            ro, _ = ref_attn(qb, kall, vall, True, sm)
            worst_o = max(worst_o, rel(o, ro))
        check("prefill layer %d: ragged + paged merged vs attention" % layer, worst_o < 2e-3,
              "rel err %.2e; lse2 err self %.1e, prefix %.1e" % (worst_o, worst_s, worst_x))
        check("prefill layer %d: lse in base 2" % layer, worst_s < 1e-3 and worst_x < 1e-3,
              "max |lse - log2sumexp| %.1e / %.1e" % (worst_s, worst_x))

    # ---- decode: plan with indptr only; the first run reads the lengths ----
    for step, lens in enumerate(([37, 1, 130, 64], [38, 17, 131, 200])):
        dpages = [(n + P - 1) // P for n in lens]
        dind = [0]
        for n in dpages:
            dind.append(dind[-1] + n)
        dlast = [n - (pg - 1) * P for n, pg in zip(lens, dpages)]
        didx = torch.randperm(npages)[:dind[-1]].to(torch.int32).to(dev)
        info = M.batch_decode_plan(fws, iws[2], pl, h32(dind), B, H, Hkv, P, False, -1, 0.0, D, D,
                                   torch.empty(0, dtype=dt, device=dev), torch.empty(0, dtype=dt, device=dev))
        for layer, (pages, *_rest) in enumerate(layers):
            q = torch.randn(B, H, D, dtype=dt, device=dev)
            o = torch.full((B, H, D), float("nan"), dtype=dt, device=dev)
            s = torch.full((B, H), float("nan"), dtype=torch.float32, device=dev)
            M.batch_decode_run(fws, iws[2], info, q, pages[:, 0], pages[:, 1], d32(dind), didx, d32(dlast), o, s, 1,
                               -1, False, sm, 1.0, 1e-4)
            torch.cuda.synchronize()
            worst, wl = 0.0, 0.0
            for b in range(B):
                ks = torch.stack([pages[int(didx[dind[b] + t // P]), 0, :, t % P] for t in range(lens[b])]).double()
                vs = torch.stack([pages[int(didx[dind[b] + t // P]), 1, :, t % P] for t in range(lens[b])]).double()
                ro, rs = ref_attn(q[b:b + 1].double(), ks, vs, False, sm)
                worst = max(worst, rel(o[b:b + 1], ro))
                wl = max(wl, (s[b:b + 1].double() - rs).abs().max().item())
            check("decode step %d layer %d vs attention" % (step, layer), worst < 2e-3 and wl < 1e-3,
                  "rel err %.2e, lse2 err %.1e" % (worst, wl))
        if step == 0:
            stale = info
    try:
        M.batch_decode_run(fws, iws[2], stale, q, pages[:, 0], pages[:, 1], d32(dind), didx, d32(dlast), o, s, 1, -1,
                           False, sm, 1.0, 1e-4)
        check("decode: a stale plan_info is refused", False, "it ran")
    except ValueError as e:
        check("decode: a stale plan_info is refused", "stale" in str(e), str(e)[:80])

    # ---- CUDA-graph prefill: plan, warm-up, capture, re-plan, replay ----
    pages, kpre, vpre, q, knew, vnew = layers[0]
    gi = M.batch_prefill_plan(fws, iws[1], pl, h32(qo_indptr), h32(kv_indptr), h32(prefix), T, B, H, Hkv, P, True,
                              D, D, False, -1, -1, False, 0)
    o_g = torch.zeros(T, H, D, dtype=dt, device=dev)
    s_g = torch.zeros(T, H, dtype=torch.float32, device=dev)
    qo_d, kv_d, last_d = d32(qo_indptr), d32(kv_indptr), d32(last)
    idx_d = page_indices.clone()
    args = lambda inf: (fws, iws[1], inf, q, pages[:, 0], pages[:, 1], qo_d, kv_d, idx_d, last_d, o_g, s_g, 0, 1,  # noqa
                        -1, False, sm, 1.0, 1e-4)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        M.batch_prefill_paged_run(*args(gi))  # warm-up: makes the graph-mode plan
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            M.batch_prefill_paged_run(*args(gi))
    torch.cuda.synchronize()
    # new lengths (same batch and tokens): other prefixes and another page order
    prefix2 = [100, 3, 16, 0]
    pages2 = [(n + P - 1) // P for n in prefix2]
    kv2 = [0]
    for n in pages2:
        kv2.append(kv2[-1] + n)
    last2 = [n - (pg - 1) * P if pg else 0 for n, pg in zip(prefix2, pages2)]
    idx2 = torch.randperm(npages)[:kv2[-1]].to(torch.int32)
    with torch.cuda.stream(side):
        M.batch_prefill_plan(fws, iws[1], pl, h32(qo_indptr), h32(kv2), h32(prefix2), T, B, H, Hkv, P, True, D, D,
                             False, -1, -1, False, 0)
        kv_d[:len(kv2)].copy_(d32(kv2))
        last_d.copy_(d32(last2))
        idx_d.zero_()
        idx_d[:kv2[-1]].copy_(idx2.to(dev))
        o_g.fill_(float("nan"))
        g.replay()
    torch.cuda.synchronize()
    worst = 0.0
    for b in range(B):
        a, e = qo_indptr[b], qo_indptr[b + 1]
        if not prefix2[b]:
            ok = bool((o_g[a:e] == 0).all())
            worst = max(worst, 0.0 if ok else 1.0)
            continue
        ks = torch.stack([pages[int(idx2[kv2[b] + t // P]), 0, :, t % P] for t in range(prefix2[b])]).double()
        vs = torch.stack([pages[int(idx2[kv2[b] + t // P]), 1, :, t % P] for t in range(prefix2[b])]).double()
        ro, _ = ref_attn(q[a:e].double(), ks, vs, False, sm)
        worst = max(worst, rel(o_g[a:e], ro))
    check("CUDA graph: replay after a re-plan is the new plan's attention", worst < 2e-3, "rel err %.2e" % worst)

    npass, nfail = sum(results), len(results) - sum(results)
    print("%d passed, %d failed" % (npass, nfail))
    sys.exit(1 if nfail else 0)


if __name__ == "__main__":
    main()
