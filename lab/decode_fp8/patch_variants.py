#!/usr/bin/env python3
"""patch_variants.py IN OUT: writes a copy of kernels/decode.cuh for lab/decode_fp8/fp8_bench.cu
(nvcc, not NVRTC), and beside it one of decode_step.cuh (IN's folder; the step's math, which
takes X too), whose kernel template takes one more parameter, X (bits): 1 request-major
block order (the heads of a request in consecutive blocks), 2 loads only (K and V xor-ed,
no math: the bound of the access pattern), 4 e4m3 "widened" by byte moves only (wrong
values: the conversion's cost), 8 e4m3 widened by the integer path (value / 256) instead
of the hardware cvt, 16 the next-but-one step's K loaded right after this step's S (PF = 1),
32 / 64 / 256 / 512 the K / V loads with an L2 hint or policy, or none (see below), 128 K
loaded in whole 128-byte lines (see below), 1024 a globaltimer trace into p.partial_o
(see below). Bit 2 applies to both register pipelines (PF 1 and PF 0). The copy also
takes blocks of 1 to 8 warps (the runtime registers 1, 2, 4 and 8).
X = 0 is the kernel as it is. Every anchor must match exactly once."""
import os
import sys
s=open(sys.argv[1]).read()
def rep(a,b,cnt=1):
    global s
    n=s.count(a)
    assert n==cnt,(a,n)
    s=s.replace(a,b)
rep("template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS, int HP>\nFI_DEVICE void decode_heads(",
    "template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS, int HP, int X>\nFI_DEVICE void decode_heads(")
rep("template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS>\nFI_DEVICE void decode(",
    "template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS, int X = 0>\nFI_DEVICE void decode(")
rep("      decode_heads<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, 2>(p);", "      decode_heads<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, 2, X>(p);")
rep("  decode_heads<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, 1>(p);", "  decode_heads<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, 1, X>(p);")
# conversion variants
rep("  if constexpr (same<KVT, fi_e4m3>::value) wide = KV::E4M3_WIDE;",
    "  if constexpr (same<KVT, fi_e4m3>::value) wide = (X & 8) ? 1.0f : KV::E4M3_WIDE;")
rep("  const int item = blockIdx.x, hkv = blockIdx.y * HP, G = p.group, GE = G * HP;",
    "  const int lin_ = blockIdx.x + blockIdx.y * gridDim.x;\n"
    "  const int item = (X & 1) ? lin_ / (int)gridDim.y : blockIdx.x, hkv = ((X & 1) ? lin_ % (int)gridDim.y : blockIdx.y) * HP, G = p.group, GE = G * HP;")
# The K / V loads (the kernel's ldkv): X & 32 with the L2::256B hint (on a miss the L2
# fetches the whole 256-byte block), 64 with L2::128B, 256 evict-first in L2 whatever the
# cache, 512 plain (no evict-first: the kernel before the eighth session), else as the
# kernel does (evict-first for 16-bit caches).
s=s.replace("ldg_kv<KV_HINT>(", "ldgx<X, KV_HINT>(")
# K in whole 128-byte lines (X & 128, 16-bit caches: the loads-only bound of that pattern;
# with the math the values are wrong): lane (g, c) loads chunk g + 8 (i & 1) of token
# 8 t + 4 (i >> 1) + c, so an instruction covers 4 rows x 128 bytes instead of 8 x 64.
rep("        const KVT *row = kb + shfl64(off, 16 * u + 8 * t + g);\n#pragma unroll\n        for (int i = 0; i < NQ; i++) ldgx<X, KV_HINT>(row + KC * (c + 4 * i), kr[u][t][i], kv_pol);",
    "        const KVT *row = kb + shfl64(off, 16 * u + 8 * t + g);\n"
    "        const KVT *rl0 = kb + shfl64(off, 16 * u + 8 * t + c), *rl1 = kb + shfl64(off, 16 * u + 8 * t + 4 + c);\n"
    "#pragma unroll\n        for (int i = 0; i < NQ; i++) {\n"
    "          if constexpr ((X & 128) != 0 && NQ == 4) ldgx<X, KV_HINT>((i >> 1 ? rl1 : rl0) + KC * (g + 8 * (i & 1)), kr[u][t][i], kv_pol);\n"
    "          else ldgx<X, KV_HINT>(row + KC * (c + 4 * i), kr[u][t][i], kv_pol);\n        }")
# helper
rep("// Page lookup of one token", '''template <int X, bool EF, int N>
FI_DEVICE void ldgx(const void *p, uint32_t (&r)[N], uint64_t pol) {
  if constexpr ((X & 32) != 0 && N == 4) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
  } else if constexpr ((X & 64) != 0 && N == 4) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
  } else if constexpr ((X & 256) != 0) {
    ldg_nc_ef<N>(p, r, l2_kv_policy(1));
  } else if constexpr ((X & 512) != 0) {
    ldg_nc<N>(p, r);
  } else {
    ldg_kv<EF, N>(p, r, pol);
  }
}
// Page lookup of one token''')
# loads-only variant
rep('''  auto compute = [&](int k, const uint32_t (&kr)[SUB][2][NQ][4], const uint32_t (&vr)[SUB][4][NV][VN]) {
    uint32_t pb[SUB][H8][2];''','''  uint32_t xacc = 0;
  auto xor_loads = [&](const uint32_t (&kr)[SUB][2][NQ][4], const uint32_t (&vr)[SUB][4][NV][VN]) {
#pragma unroll
      for (int u = 0; u < SUB; u++) {
#pragma unroll
        for (int t = 0; t < 2; t++)
#pragma unroll
          for (int i = 0; i < NQ; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) xacc ^= kr[u][t][i][j];
#pragma unroll
        for (int t = 0; t < 4; t++)
#pragma unroll
          for (int i = 0; i < NV; i++)
#pragma unroll
            for (int j = 0; j < VN; j++) xacc ^= vr[u][t][i][j];
      }
  };
  auto compute = [&](int k, const uint32_t (&kr)[SUB][2][NQ][4], const uint32_t (&vr)[SUB][4][NV][VN]) {
    if constexpr ((X & 2) != 0) {
      xor_loads(kr, vr);
      return;
    }
    uint32_t pb[SUB][H8][2];''')
rep('''  // ---- merge the warps: each adds its rescaled O^T in turn (no atomics) ----''','''  if ((X & 2) && xacc == 0x9e3779b9u) o[0][0][0] = 1.0f;
  // ---- merge the warps: each adds its rescaled O^T in turn (no atomics) ----''')
# X & 1024: a globaltimer trace into p.partial_o (unused without a split), 12 words a
# block: [0] start (after the PDL wait), [1 + w] warp w's loop end, [9] the output stored,
# [10] SM id.
rep("struct tok_loc {\n", '''FI_DEVICE unsigned long long gtim_(float after = 0.0f) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "f"(after));
  return t;
}
struct tok_loc {
''')
rep("  // ---- the work item ----\n", '''  unsigned long long *trc_ = (X & 1024) ? reinterpret_cast<unsigned long long *>(p.partial_o) + (int64_t)(blockIdx.x + blockIdx.y * gridDim.x) * 12 : nullptr;
  if ((X & 1024) && tid == 0) {
    trc_[0] = gtim_();
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    trc_[10] = sm;
  }
  // ---- the work item ----
''')
rep("  // ---- merge the warps: each adds its rescaled O^T in turn (no atomics) ----\n", '''  if ((X & 1024) && lane == 0) trc_[1 + warp] = gtim_(o[0][0][0]);
  // ---- merge the warps: each adds its rescaled O^T in turn (no atomics) ----
''')
rep("      *reinterpret_cast<fi_vec<QT, 8> *>(orow + d8) = y;\n    }\n    if (p.lse && tid < GE) {", '''      *reinterpret_cast<fi_vec<QT, 8> *>(orow + d8) = y;
    }
    if ((X & 1024) && tid == 0) trc_[9] = gtim_();
    if (p.lse && tid < GE) {''')
# blocks of 3, 5, 6 or 7 warps too (the kernel takes steps in turn and merges its warps
# through shared memory for any count; the runtime registers 1, 2, 4 and 8)
rep('static_assert(WARPS == 1 || WARPS == 2 || WARPS == 4 || WARPS == 8, "1, 2, 4 or 8 warps");',
    'static_assert(WARPS >= 1 && WARPS <= 8, "1 to 8 warps");')
# loads only in the one-buffer loop (PF == 0) as well
rep('''        uint32_t pb[SUB][H8][2];
        qk_softmax(k, kr, pb);
        // The next step's K once this step's K is used.''','''        if constexpr ((X & 2) != 0) {
          xor_loads(kr, vr);
          if (k + WARPS < nst) load_k(offn, kr);
          off = offn;
          continue;
        }
        uint32_t pb[SUB][H8][2];
        qk_softmax(k, kr, pb);
        // The next step's K once this step's K is used.''')
# early-K variant (X & 16), PF == 1 only
rep('''    if (PF) {
      uint32_t ka[SUB][2][NQ][4], va[SUB][4][NV][VN], kb2[SUB][2][NQ][4], vb2[SUB][4][NV][VN];''','''    if (PF && (X & 16)) {
      uint32_t ka[SUB][2][NQ][4], va[SUB][4][NV][VN], kb2[SUB][2][NQ][4], vb2[SUB][4][NV][VN];
      {
        const int64_t off = offset(loc0);
        load_k(off, ka);
        load_v(off, va);
      }
      if (k0 + WARPS < nst) {
        const int64_t off = offset(next);
        load_k(off, kb2);
        load_v(off, vb2);
      }
      next = locate(k0 + 2 * WARPS);
      for (int i = 3; i <= pfd + 1; i++) prefetch(k0 + i * WARPS);
      int k = k0;
      for (;;) {
        {
          uint32_t pb[SUB][H8][2];
          qk_softmax(k, ka, pb);
          const bool more = k + 2 * WARPS < nst;
          const int64_t off = offset(next);
          if (more) load_k(off, ka);
#pragma unroll
          for (int u = 0; u < SUB; u++) pv(va[u], pb[u]);
          if (more) {
            load_v(off, va);
            next = locate(k + 3 * WARPS);
            if (pfd > 0) prefetch(k + (2 + pfd) * WARPS);
          }
        }
        k += WARPS;
        if (k >= nst) break;
        {
          uint32_t pb[SUB][H8][2];
          qk_softmax(k, kb2, pb);
          const bool more = k + 2 * WARPS < nst;
          const int64_t off = offset(next);
          if (more) load_k(off, kb2);
#pragma unroll
          for (int u = 0; u < SUB; u++) pv(vb2[u], pb[u]);
          if (more) {
            load_v(off, vb2);
            next = locate(k + 3 * WARPS);
            if (pfd > 0) prefetch(k + (2 + pfd) * WARPS);
          }
        }
        k += WARPS;
        if (k >= nst) break;
      }
    } else if (PF) {
      uint32_t ka[SUB][2][NQ][4], va[SUB][4][NV][VN], kb2[SUB][2][NQ][4], vb2[SUB][4][NV][VN];''')
# The step's math (compute_qk, update_local_state) in decode_step.cuh: it takes X, and
# widens fp8 through cvt2x.
rep("compute_qk<S>(", "compute_qk<S, X>(")
rep("update_local_state<S>(", "update_local_state<S, X>(")
open(sys.argv[2],'w').write(s)
s=open(os.path.join(os.path.dirname(sys.argv[1]), "decode_step.cuh")).read()
rep("template <class S>\nFI_DEVICE void compute_qk(", "template <class S, int X>\nFI_DEVICE void compute_qk(")
rep("template <class S>\nFI_DEVICE void update_local_state(", "template <class S, int X>\nFI_DEVICE void update_local_state(")
rep("KV::cvt2(", "cvt2x<typename S::KVT, X>(", 6)
rep("namespace dec {\n", '''namespace dec {
template <typename KVT, int X>
FI_DEVICE void cvt2x(uint32_t w, uint32_t &lo, uint32_t &hi) {
  if constexpr ((X & 4) != 0) {
    kv<fi_e5m2>::cvt2(w, lo, hi);
  } else if constexpr ((X & 8) != 0) {
    lo = ((prmt(w, 0u, 0x1404u)) & 0x80008000u) | ((prmt(w, 0u, 0x1404u) >> 1) & 0x3f803f80u);
    hi = ((prmt(w, 0u, 0x3424u)) & 0x80008000u) | ((prmt(w, 0u, 0x3424u) >> 1) & 0x3f803f80u);
  } else {
    kv<KVT>::cvt2(w, lo, hi);
  }
}
''')
open(os.path.join(os.path.dirname(sys.argv[2]), "decode_step.cuh"),'w').write(s)
