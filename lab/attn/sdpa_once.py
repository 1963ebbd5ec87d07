#!/usr/bin/env python3
"""sdpa_once.py: one torch SDPA forward on fi-bench prefill's shape, for Nsight Compute
(lab/gpu/ncu_prefill.sh): bf16 q [B, H_qo, L, D], k and v [B, H_kv, L, D], causal unless
--full, the backend forced (cudnn or flash), two warm-up calls then the profiled ones.
usage: python3 lab/attn/sdpa_once.py [--backend cudnn|flash] [--B 4] [--L 8192] [--hq 32]
       [--hkv 8] [--D 128] [--full] [--calls 1]"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ap = argparse.ArgumentParser()
ap.add_argument("--backend", default="cudnn", choices=["cudnn", "flash"])
ap.add_argument("--B", type=int, default=4)
ap.add_argument("--L", type=int, default=8192)
ap.add_argument("--hq", type=int, default=32)
ap.add_argument("--hkv", type=int, default=8)
ap.add_argument("--D", type=int, default=128)
ap.add_argument("--full", action="store_true")
ap.add_argument("--calls", type=int, default=1)
a = ap.parse_args()
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.rand(a.B, a.hq, a.L, a.D, device="cuda", dtype=torch.bfloat16, generator=g) - 0.5
k = torch.rand(a.B, a.hkv, a.L, a.D, device="cuda", dtype=torch.bfloat16, generator=g) - 0.5
v = torch.rand(a.B, a.hkv, a.L, a.D, device="cuda", dtype=torch.bfloat16, generator=g) - 0.5
be = SDPBackend.CUDNN_ATTENTION if a.backend == "cudnn" else SDPBackend.FLASH_ATTENTION
with sdpa_kernel([be]):
    for _ in range(2 + a.calls):
        F.scaled_dot_product_attention(q, k, v, is_causal=not a.full, enable_gqa=a.hq != a.hkv)
torch.cuda.synchronize()
print("sdpa_once: %s B=%d L=%d %d/%d D=%d %s, %d calls" % (a.backend, a.B, a.L, a.hq, a.hkv, a.D,
                                                         "full" if a.full else "causal", 2 + a.calls))
