#!/usr/bin/env python3
"""torch_peer.py: the peer of `fi-bench moe`: torch._grouped_mm (bf16) on the shapes and
routing sizes fi-bench moe measures, run beside it in one device call, so the two tables come
from the same card.

GEMM1 is timed twice: torch._grouped_mm alone on the permuted rows (less work than ours: no
gather, no SwiGLU), and as a user would compose the step (index the token rows, grouped_mm,
silu(gate) * up). GEMM2 is grouped_mm alone. FLOPs count routed rows: 2 x routes x n x k.
Routing: softmax over float32 normal logits (sd 2), top-k: the same distribution as
fi-bench's (not the same ids: the counts per expert agree in distribution only).
usage: python3 lab/moe/torch_peer.py [--quick] [--json FILE]"""
import json
import sys

import torch
import torch.nn.functional as F

SHAPES = [("mixtral-8x7b", 8, 2, 4096, 14336), ("qwen3-30b-a3b", 128, 8, 2048, 768),
          ("deepseek-v3", 256, 8, 7168, 2048)]


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(3):
            fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 3)
    out.sort()
    return out[len(out) // 2]


def main():
    quick = "--quick" in sys.argv
    jf = open(sys.argv[sys.argv.index("--json") + 1], "w") if "--json" in sys.argv else None
    reps = 3 if quick else 7
    dev = "cuda"
    torch.manual_seed(0)
    print("torch %s on %s: torch._grouped_mm (bf16)" % (torch.__version__, torch.cuda.get_device_name()))
    print("| model | T | EP | local routes | GEMM | ms | TFLOP/s |\n|---|---|---|---|---|---|---|")
    for model, E, k, H, I in SHAPES:
        for ep in (1, 8):
            for T in ((4096,) if quick else (4096, 16384)):
                L = E // ep
                logits = 2.0 * torch.randn(T, E, device=dev)
                ids = torch.topk(torch.softmax(logits, -1), k, dim=-1).indices.flatten()
                local = ids < L
                routes = torch.nonzero(local).flatten()
                order = torch.argsort(ids[routes], stable=True)
                rows = routes[order]                       # expanded indices, sorted by expert
                counts = torch.bincount(ids[rows], minlength=L)
                offs = torch.cumsum(counts, 0).to(torch.int32)
                R = rows.numel()
                x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
                w13 = torch.randn(L, 2 * I, H, device=dev, dtype=torch.bfloat16) / H ** 0.5
                w2 = torch.randn(L, H, I, device=dev, dtype=torch.bfloat16) / I ** 0.5
                xp = x[rows // k]
                h = torch.randn(R, I, device=dev, dtype=torch.bfloat16)
                w13t, w2t = w13.transpose(-2, -1), w2.transpose(-2, -1)

                def g1():
                    return torch._grouped_mm(xp, w13t, offs=offs)

                def g1_step():
                    u = torch._grouped_mm(x[rows // k], w13t, offs=offs)
                    return F.silu(u[:, I:]) * u[:, :I]

                def g2():
                    return torch._grouped_mm(h, w2t, offs=offs)

                for name, fn, n, kk in (("GEMM1 (grouped_mm alone)", g1, 2 * I, H),
                                        ("GEMM1 (gather + grouped_mm + silu*up)", g1_step, 2 * I, H),
                                        ("GEMM2", g2, H, I)):
                    ms = timed(fn, reps)
                    tf = 2.0 * R * n * kk / (ms * 1e-3) / 1e12
                    print("| %s | %d | %d | %d | %s | %.3f | %.1f |" % (model, T, ep, R, name, ms, tf))
                    if jf:
                        jf.write(json.dumps({"bench": "torch_grouped_mm", "model": model, "T": T, "ep": ep,
                                             "routes": R, "gemm": name, "ms": ms, "tflops": tf}) + "\n")
                del x, w13, w2, xp, h, w13t, w2t
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
