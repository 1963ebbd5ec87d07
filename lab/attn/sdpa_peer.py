#!/usr/bin/env python3
"""sdpa_peer.py: the peer of `fi-bench prefill` and `fi-bench decode` (issue 49): torch's
scaled_dot_product_attention with the cuDNN and the flash (FlashAttention-2) backends, timed
on exactly the shapes fi-bench measured in the same device call, with the same FLOP and
byte counting, and the ratios fi_runtime / peer printed beside fi-bench's own figures.

fi-bench writes its rows with --json; this script reads them and times the peer on each:
  build/fi-bench --json /tmp/fi.json prefill decode
  python3 lab/attn/sdpa_peer.py --fi-json /tmp/fi.json [--json peer.json] [--quick]
or lets this script run fi-bench itself:
  python3 lab/attn/sdpa_peer.py --fi-bench build/fi-bench [--sections prefill,decode]

Prefill: q [B, H_qo, L, D], k and v [B, H_kv, L, D] bf16 (SDPA's layout; torch has no paged
or ragged prefill), causal or full, GQA by enable_gqa=True. FLOPs 4 B H_qo L^2 D, half of
it causal: fi-bench's count. Two rates as fi-bench gives them: isolated (one run between two
events after the GPU idled 50 ms; fi-bench's headline "TFLOP/s") and sustained (n runs back
to back after ~1 s of warm-up; fi-bench's "sustained TFLOP/s"); each ratio pairs like with
like.
Decode: one query token a request, q [B, H_qo, 1, D], K and V contiguous [B, H_kv, L, D]
bf16 (torch has no paged decode: this is the ceiling a paged kernel should reach, not a
paged competitor); bytes K + V + q in + out, fi-bench decode's count; the copies rotate
over at least 1 GiB of K + V, as fi-bench's page sets do, so L2 holds none of a run's
input. Only fi-bench's bf16 rows (the peer has no fp8 KV).
A backend that refuses a shape (cuDNN's limits, flash without GQA support in this torch)
prints "-" with the reason in the JSON record; nothing is silently replaced by another
backend (SDPA's backend is forced with torch.nn.attention.sdpa_kernel)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]


def ev_ms(fn, n):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for i in range(n):
        fn(i)
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def time_isolated(fn, reps):
    """One run between two events, the GPU idle 50 ms before it (fi-bench's isolated rate)."""
    out = []
    for r in range(reps):
        torch.cuda.synchronize()
        time.sleep(0.05)
        out.append(ev_ms(fn, 1))
    return median(out)


def time_sustained(fn, ms_one, reps, warm_ms):
    """n runs back to back (n filling 5 ms, 5..64) after warm_ms of runs (fi-bench's)."""
    n = max(5, min(64, int(5.0 / ms_one) + 1)) if ms_one > 0 else 64
    warm = int(warm_ms / ms_one) + 1 if ms_one > 0 else 10
    for i in range(min(warm, 100000)):
        fn(i)
    return median([ev_ms(fn, n) for _ in range(reps)]), n


def sdpa_call(q, k, v, causal, gqa):
    if gqa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def prefill_peer(row, reps, warm_ms):
    B, L, hq, hkv, D, causal = (row[x] for x in ("batch", "len", "qo_heads", "kv_heads", "head_dim", "causal"))
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.rand(B, hq, L, D, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    k = torch.rand(B, hkv, L, D, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    v = torch.rand(B, hkv, L, D, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    flops = 4.0 * B * hq * L * L * D / (2.0 if causal else 1.0)
    res = {}
    for name, be in BACKENDS:
        try:
            with sdpa_kernel([be]):
                fn = lambda i: sdpa_call(q, k, v, bool(causal), hq != hkv)
                fn(0)
                torch.cuda.synchronize()
                ms1 = time_isolated(fn, reps)
                mss, n = time_sustained(fn, ms1, reps, warm_ms)
            res[name] = {"ms": ms1, "tflops": flops / (ms1 * 1e-3) / 1e12, "ms_sustained": mss,
                         "tflops_sustained": flops / (mss * 1e-3) / 1e12, "n": n}
        except Exception as e:  # the backend refused the shape: say so, do not substitute
            res[name] = {"error": str(e).splitlines()[0][:200] if str(e) else type(e).__name__}
        torch.cuda.synchronize()
    del q, k, v
    torch.cuda.empty_cache()
    return flops, res


def decode_peer(row, reps):
    B, L, hq, hkv = (row[x] for x in ("batch", "kv_len", "qo_heads", "kv_heads"))
    D = 128  # fi-bench decode's head_dim
    kvb = 2.0 * B * L * hkv * D * 2
    qbytes = B * hq * D * 2
    nbytes = kvb + 2.0 * qbytes
    sets = max(1, int((1 << 30) // kvb) + (1 if (1 << 30) % kvb else 0))
    g = torch.Generator(device="cuda").manual_seed(2)
    ks = [torch.rand(B, hkv, L, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(sets)]
    vs = [torch.rand(B, hkv, L, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(sets)]
    q = torch.rand(B, hq, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
    res = {}
    for name, be in BACKENDS:
        try:
            with sdpa_kernel([be]):
                fn = lambda i: sdpa_call(q, ks[i % sets], vs[i % sets], False, hq != hkv)
                fn(0)
                torch.cuda.synchronize()
                n = max(2 * sets, 20)
                for _ in range(n):
                    fn(_)
                ms = median([ev_ms(fn, n) for _ in range(reps)])
            res[name] = {"us": ms * 1e3, "tbs": nbytes / (ms * 1e-3) / 1e12}
        except Exception as e:
            res[name] = {"error": str(e).splitlines()[0][:200] if str(e) else type(e).__name__}
        torch.cuda.synchronize()
    del ks, vs, q
    torch.cuda.empty_cache()
    return nbytes, res


def fmt(x, spec):
    return "-" if x is None else spec % x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fi-json", help="fi-bench's --json output to pair with (prefill and decode rows)")
    ap.add_argument("--fi-bench", help="run this fi-bench binary first (with --json to a temporary file)")
    ap.add_argument("--sections", default="prefill,decode", help="fi-bench sections to run (--fi-bench)")
    ap.add_argument("--json", help="write the peer's records (one JSON object a line)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    a = ap.parse_args()
    if not a.fi_json and not a.fi_bench:
        ap.error("give --fi-json FILE or --fi-bench PATH")
    if not torch.cuda.is_available():
        sys.exit("sdpa_peer.py: torch sees no CUDA device")
    path = a.fi_json
    if a.fi_bench:
        path = os.path.join(tempfile.mkdtemp(), "fi.json")
        cmd = [a.fi_bench, "--json", path] + (["--quick"] if a.quick else []) + a.sections.split(",")
        print("running:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    rows = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    reps = 3 if a.quick else 7
    warm_ms = 200.0 if a.quick else 1000.0
    jf = open(a.json, "w") if a.json else None
    print("torch %s, cuDNN %s, on %s" % (torch.__version__, torch.backends.cudnn.version(), torch.cuda.get_device_name()))
    read = [r for r in rows if r.get("bench") == "read"]
    if read:
        print("fi-bench read probe, same call: %.2f TB/s" % read[0]["tbs"])
    wg = [r for r in rows if r.get("bench") == "wgmma_probe"]
    if wg:
        print("fi-bench wgmma probe, same call: %.1f TFLOP/s" % wg[0]["tflops"])

    seen = set()
    pre = []
    for r in rows:
        if r.get("bench") != "prefill" or r.get("variant", "-") != "-" or r.get("kv_dtype", "bf16") != "bf16":
            continue
        key = (r["batch"], r["len"], r["qo_heads"], r["kv_heads"], r["head_dim"], r["causal"])
        if key in seen:
            continue
        seen.add(key)
        pre.append(r)
    if pre:
        print("\nprefill (bf16; TFLOP/s isolated / sustained; ratio = fi_runtime / peer, like with like)")
        print("| B | L | heads | D | mask | fi | cuDNN | flash | fi/cuDNN | fi/flash | fi sust | cuDNN sust | flash sust | fi/cuDNN sust | fi/flash sust |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in pre:
        flops, res = prefill_peer(r, reps, warm_ms)
        c, f = res["cudnn"], res["flash"]
        fi, fis = r["tflops"], r.get("tflops_sustained") or None
        ct, ft = c.get("tflops"), f.get("tflops")
        cs, fs = c.get("tflops_sustained"), f.get("tflops_sustained")
        print("| %d | %d | %d/%d | %d | %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["batch"], r["len"], r["qo_heads"], r["kv_heads"], r["head_dim"], "causal" if r["causal"] else "full",
            fi, fmt(ct, "%.1f"), fmt(ft, "%.1f"), fmt(ct and fi / ct, "%.2f"), fmt(ft and fi / ft, "%.2f"),
            fmt(fis, "%.1f"), fmt(cs, "%.1f"), fmt(fs, "%.1f"), fmt(cs and fis and fis / cs, "%.2f"),
            fmt(fs and fis and fis / fs, "%.2f")), flush=True)
        if jf:
            jf.write(json.dumps({"bench": "prefill_peer", "fi": r, "flops": flops, "peer": res}) + "\n")
        for name in ("cudnn", "flash"):
            if "error" in res[name]:
                print("  %s: %s" % (name, res[name]["error"]))

    seen = set()
    dec = []
    for r in rows:
        if r.get("bench") != "decode" or r.get("kv") != "bf16":
            continue
        key = (r["batch"], r["kv_len"], r["qo_heads"], r["kv_heads"])
        if key in seen:
            continue
        seen.add(key)
        dec.append(r)
    if dec:
        print("\ndecode (bf16 KV, D=128; TB/s of K + V + q + out; the peer on contiguous K/V)")
        print("| B | L | heads | layout | fi us | fi TB/s | cuDNN TB/s | flash TB/s | fi/cuDNN | fi/flash |")
        print("|---|---|---|---|---|---|---|---|---|---|")
    for r in dec:
        nbytes, res = decode_peer(r, reps)
        c, f = res["cudnn"].get("tbs"), res["flash"].get("tbs")
        print("| %d | %d | %d/%d | %s | %.1f | %.2f | %s | %s | %s | %s |" % (
            r["batch"], r["kv_len"], r["qo_heads"], r["kv_heads"], r.get("layout", "?"), r["us"], r["tbs"],
            fmt(c, "%.2f"), fmt(f, "%.2f"), fmt(c and r["tbs"] / c, "%.2f"), fmt(f and r["tbs"] / f, "%.2f")), flush=True)
        if jf:
            jf.write(json.dumps({"bench": "decode_peer", "fi": r, "bytes": nbytes, "peer": res}) + "\n")
        for name in ("cudnn", "flash"):
            if "error" in res[name]:
                print("  %s: %s" % (name, res[name]["error"]))
    if not pre and not dec:
        sys.exit("sdpa_peer.py: no prefill or decode rows in %s" % path)


if __name__ == "__main__":
    main()
