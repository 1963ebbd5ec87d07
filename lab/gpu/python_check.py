"""python_check.py: the GPU half of lab/gpu/python_check.sh. The FlashInfer-named ops of
fi_runtime.flashinfer against torch references, then host microseconds per call through
the binding (tvm_ffi: fi_runtime.ops, the compat function, a decode wrapper's run)."""

import time

import torch

import fi_runtime
from fi_runtime import flashinfer as fl

dev = torch.device("cuda")
torch.manual_seed(0)
print("backend", fi_runtime.backend().name, fi_runtime.backend().path)


def report(name, err, tol):
    print(f"{'PASS' if err <= tol else 'FAIL'} {name}: max relative error {err:.3g} (<= {tol})")


def rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item()


# rmsnorm, bf16 64 x 4096
x = torch.randn(64, 4096, dtype=torch.bfloat16, device=dev)
w = torch.randn(4096, dtype=torch.bfloat16, device=dev)
ref = (x.double() / (x.double().pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w.double())
report("rmsnorm bf16 64x4096", rel(fl.rmsnorm(x, w), ref), 1e-2)

# silu_and_mul
g = torch.randn(32, 2 * 11008, dtype=torch.float16, device=dev)
ref = torch.nn.functional.silu(g[:, :11008].double()) * g[:, 11008:].double()
report("silu_and_mul fp16 32x11008", rel(fl.silu_and_mul(g), ref), 2e-3)

# one decode step: B=8 requests of 1000..1700 tokens, page 16, 32/8 heads, D=128, NHD
B, P, HQ, HK, D = 8, 16, 32, 8, 128
lens = [1000 + 100 * i for i in range(B)]
pages = [(n + P - 1) // P for n in lens]
indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0)), dtype=torch.int32, device=dev)
indices = torch.randperm(int(indptr[-1]), device=dev).int()
last = torch.tensor([n - (p - 1) * P for n, p in zip(lens, pages)], dtype=torch.int32, device=dev)
cache = torch.randn(int(indptr[-1]), 2, P, HK, D, dtype=torch.bfloat16, device=dev)
q = torch.randn(B, HQ, D, dtype=torch.bfloat16, device=dev)
ws = torch.empty(128 << 20, dtype=torch.uint8, device=dev)
wrapper = fl.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
wrapper.plan(indptr, indices, last, HQ, HK, D, P, q_data_type=torch.bfloat16)
out, lse = wrapper.run(q, cache, return_lse=True)


def ref_decode(b, sinks=None):
    """Request b's output in float64; sinks: a logit a query head in the denominator."""
    ids = indices[indptr[b]:indptr[b + 1]].long()
    k = cache[ids, 0].reshape(-1, HK, D)[:lens[b]].double()
    v = cache[ids, 1].reshape(-1, HK, D)[:lens[b]].double()
    qq = q[b].double().view(HK, HQ // HK, D)
    s = torch.einsum("hgd,nhd->hgn", qq, k) / D ** 0.5
    if sinks is None:
        p = s.softmax(-1)
    else:
        p = torch.cat([s, sinks.double().view(HK, HQ // HK, 1)], -1).softmax(-1)[..., :-1]
    return torch.einsum("hgn,nhd->hgd", p, v).reshape(HQ, D)


report("decode wrapper bf16 B=8 L=1000..1700 32/8", max(rel(out[b], ref_decode(b)) for b in range(B)), 1e-2)
# the same with attention sinks (FlashInfer's run(sinks=...))
sinks = torch.randn(HQ, dtype=torch.float32, device=dev) * 2
out_s = wrapper.run(q, cache, sinks=sinks)
report("decode wrapper with sinks", max(rel(out_s[b], ref_decode(b, sinks)) for b in range(B)), 1e-2)
ref1 = fl.single_decode_with_kv_cache(q[0], cache[indices[:pages[0]].long(), 0].reshape(-1, HK, D)[:lens[0]],
                                      cache[indices[:pages[0]].long(), 1].reshape(-1, HK, D)[:lens[0]])
report("single decode == batch decode (request 0)", rel(ref1, out[0]), 1e-2)

# sampling: frequencies of 200000 draws from one row of 16 against the probabilities
probs = torch.rand(1, 16, device=dev).pow(3)
probs /= probs.sum()
rows = probs.expand(200000, 16).contiguous()
s = fl.sampling_from_probs(rows, seed=1, offset=0)
freq = torch.bincount(s.long(), minlength=16).double() / s.numel()
report("sampling_from_probs frequencies", (freq - probs[0].double()).abs().max().item(), 5e-3)
k = fl.top_k_sampling_from_probs(rows, 4, seed=2, offset=0)
top4 = set(probs[0].topk(4).indices.tolist())
report("top_k_sampling_from_probs stays in the top 4", float(not set(k.unique().tolist()) <= top4), 0)

# host time per call (memo hits; the GPU queue never drains, so the host is what is timed)


def per_call(f, n=2000):
    for _ in range(50):
        f()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
        torch.cuda.synchronize()
    return best


xo = torch.empty_like(x)
print(f"host: fi_runtime.ops.rmsnorm {per_call(lambda: fi_runtime.ops.rmsnorm(x, w, 1e-6, xo)):.2f} us per call")
print(f"host: flashinfer.rmsnorm(out=) {per_call(lambda: fl.rmsnorm(x, w, out=xo)):.2f} us per call")
print(f"host: flashinfer.rmsnorm (allocates) {per_call(lambda: fl.rmsnorm(x, w)):.2f} us per call")
print(f"host: torch.ops.fi_runtime.rmsnorm {per_call(lambda: torch.ops.fi_runtime.rmsnorm(x, w, 1e-6, xo)):.2f} us per call")
o2 = torch.empty_like(q)
print(f"host: decode wrapper run(out=) {per_call(lambda: wrapper.run(q, cache, out=o2)):.2f} us per call")
print("compare with fi-bench runtime's 'dispatch: fi_rmsnorm' (the C call alone, same shape)")
