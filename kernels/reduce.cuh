// reduce.cuh: cross-lane and cross-CTA primitives for any kernel (after fi_port.cuh):
// shuffles of 32- and 64-bit values; sum, maximum, prefix sum and first set flag over a
// logical warp; block and cluster reductions in a fixed order (deterministic results); the
// sm_90 cluster barrier and the address of a shared variable in another CTA of the cluster.
//
// Two widths. The shfl_xor / shfl_down family and block_reduce run over the hardware warp
// (FI_WARP lanes: 64 on ROCm). shfl_idx32 / shfl_up32 / shfl_idx64 and the lw_ family run
// over a logical warp of 32 lanes (half a wavefront on ROCm), the unit a kernel that lays
// out its data by 32 lanes reasons in. fi_port.cuh's fi_warp_sum / fi_block_sum are the
// float sums of the simple kernels (the warps' totals summed as a tree); block_reduce here
// takes any associative op and combines the warps' values in warp order, so every thread
// of every CTA that reduces the same values gets the same bits.
#pragma once

// Clusters and distributed shared memory: CUDA sm_90 and newer. Elsewhere the cluster
// helpers fall back to the CTA (a barrier, this CTA's own address).
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FI_CLUSTER 1
#else
#define FI_CLUSTER 0
#endif

namespace fi {
namespace red {

typedef unsigned long long u64;

// ---- cross-lane ----
// 32-bit shuffles. xor and down: over the hardware warp. idx (lane src's v) and up (the v of
// the lane o below; lanes below o get their own back): within a logical warp of 32 lanes.
#if FI_CUDA
FI_DEVICE uint32_t shfl_xor32(uint32_t v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
FI_DEVICE uint32_t shfl_down32(uint32_t v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
FI_DEVICE uint32_t shfl_idx32(uint32_t v, int src) { return __shfl_sync(0xffffffffu, v, src, 32); }
FI_DEVICE uint32_t shfl_up32(uint32_t v, int o) { return __shfl_up_sync(0xffffffffu, v, o, 32); }
#else
FI_DEVICE uint32_t shfl_xor32(uint32_t v, int o) { return __shfl_xor((int)v, o, FI_WARP); }
FI_DEVICE uint32_t shfl_down32(uint32_t v, int o) { return __shfl_down((int)v, o, FI_WARP); }
FI_DEVICE uint32_t shfl_idx32(uint32_t v, int src) { return __shfl((int)v, src, 32); }
FI_DEVICE uint32_t shfl_up32(uint32_t v, int o) { return __shfl_up((int)v, o, 32); }
#endif

// 64-bit values as two 32-bit halves, and floats by their bits.
FI_DEVICE u64 shfl_xor(u64 v, int o) {
  return (u64)shfl_xor32((uint32_t)v, o) | ((u64)shfl_xor32((uint32_t)(v >> 32), o) << 32);
}
FI_DEVICE u64 shfl_down(u64 v, int o) {
  return (u64)shfl_down32((uint32_t)v, o) | ((u64)shfl_down32((uint32_t)(v >> 32), o) << 32);
}
FI_DEVICE u64 shfl_idx64(u64 v, int src) {
  return (u64)shfl_idx32((uint32_t)v, src) | ((u64)shfl_idx32((uint32_t)(v >> 32), src) << 32);
}
FI_DEVICE float shfl_xor(float v, int o) { return bits_to_float(shfl_xor32(float_to_bits(v), o)); }
FI_DEVICE uint32_t shfl_xor(uint32_t v, int o) { return shfl_xor32(v, o); }

// Sum over the 32 lanes (every lane gets it), and the inclusive prefix sum in lane order.
FI_DEVICE u64 lw_sum(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += shfl_xor(v, o);
  return v;
}
FI_DEVICE u64 lw_scan(u64 v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 x = (u64)shfl_up32((uint32_t)v, o) | ((u64)shfl_up32((uint32_t)(v >> 32), o) << 32);
    if (lane >= o) v += x;
  }
  return v;
}
FI_DEVICE uint32_t lw_max(uint32_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t x = shfl_xor32(v, o);
    v = x > v ? x : v;
  }
  return v;
}
// The lowest lane of the 32 whose flag is set (32: none).
FI_DEVICE int lw_first(bool f, int lane) {
  uint32_t m = f ? (uint32_t)lane : 32u;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t x = shfl_xor32(m, o);
    m = x < m ? x : m;
  }
  return (int)m;
}

// Lanes of the warp holding the same v (sm_70 and newer; every lane must call it).
FI_DEVICE uint32_t match_any(uint32_t v) {
#if FI_CUDA
  uint32_t m;
  asm volatile("match.any.sync.b32 %0, %1, 0xffffffff;" : "=r"(m) : "r"(v));
  return m;
#else
  (void)v;
  return 0u;
#endif
}

// ---- clusters (sm_90): barrier and the address of a shared variable in CTA `rank` ----
FI_DEVICE void cluster_sync() {
#if FI_CLUSTER
  asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#else
  __syncthreads();
#endif
}
template <typename V>
FI_DEVICE V *remote(V *p, uint32_t rank) {
#if FI_CLUSTER
  u64 r;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(p), "r"(rank));
  return reinterpret_cast<V *>(r);
#else
  (void)rank;
  return p;
#endif
}

// A shared variable of CTA `rank` of a C-CTA cluster (this CTA's own when C is 1: no
// cluster instruction runs in a launch without clusters).
template <int C, typename V>
FI_DEVICE V *at_rank(V *p, int rank) {
  return C == 1 ? p : remote(p, (uint32_t)rank);
}

// ---- block reductions: every thread gets the result; deterministic order ----
template <int THREADS, typename V, typename F>
FI_DEVICE V block_reduce(V v, F op, V *scratch) {
#pragma unroll
  for (int o = FI_WARP / 2; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
  constexpr int W = THREADS / FI_WARP;
  if (W <= 1) return v;
  __syncthreads();
  if (threadIdx.x % FI_WARP == 0) scratch[threadIdx.x / FI_WARP] = v;
  __syncthreads();
  V r = scratch[0];
#pragma unroll
  for (int i = 1; i < W; i++) r = op(r, scratch[i]);
  return r;
}

// One value per CTA combined over the cluster in rank order (the same result in every CTA).
template <int C, typename V, typename F>
FI_DEVICE V cluster_reduce(V v, F op, V *slot) {
  if (C == 1) return v;
  __syncthreads();
  if (threadIdx.x == 0) *slot = v;
  cluster_sync();
  if (threadIdx.x == 0) {
    V r = *remote(slot, 0);
    for (int c = 1; c < C; c++) r = op(r, *remote(slot, (uint32_t)c));
    slot[1] = r;
  }
  cluster_sync();  // every CTA has read every slot before any slot is written again
  return slot[1];
}

}  // namespace red
}  // namespace fi
