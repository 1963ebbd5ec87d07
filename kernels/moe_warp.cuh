// moe_warp.cuh: the warp primitives of the mixture-of-experts routing and sort kernels, over
// the hardware warp (FI_WARP lanes: 64 on ROCm, whose wavefronts run in step).
#pragma once

namespace fi {
namespace moe {

// Lane src's v, and the v of lane ^ o (V: int or float).
template <typename V>
FI_DEVICE V shfl(V v, int src) {
#if FI_CUDA
  return __shfl_sync(0xffffffffu, v, src);
#else
  return __shfl(v, src, FI_WARP);
#endif
}
template <typename V>
FI_DEVICE V shfl_xor(V v, int o) {
#if FI_CUDA
  return __shfl_xor_sync(0xffffffffu, v, o);
#else
  return __shfl_xor(v, o, FI_WARP);
#endif
}

// Bit l set for each lane l whose pred holds.
FI_DEVICE unsigned long long warp_ballot(bool pred) {
#if FI_CUDA
  return __ballot_sync(0xffffffffu, pred);
#else
  return __ballot(pred);
#endif
}

// The lanes of this warp whose value equals v (v uniform across the peers it returns).
FI_DEVICE unsigned long long peers_of(int v) {
#if FI_CUDA
  return __match_any_sync(0xffffffffu, v);
#else
  unsigned long long m = 0;
  for (int j = 0; j < FI_WARP; j++)
    if (__shfl(v, j, FI_WARP) == v) m |= 1ull << j;
  return m;
#endif
}

// Orders this warp's shared-memory writes before its lanes' later reads (CUDA lanes need not
// run in step; AMD wavefronts do).
FI_DEVICE void warp_sync() {
#if FI_CUDA
  __syncwarp();
#endif
}

}  // namespace moe
}  // namespace fi
