// sm80.cuh: the sm_80 shared-memory layer the mma.sync kernels (prefill.cuh, moe_gemm.cuh)
// build on: 16-byte cp.async copies global -> shared with their commit / wait groups,
// ldmatrix x4 (plain and .trans) and the XOR swizzle of 16-byte chunks that keeps both
// free of bank conflicts. On ROCm cp.async is a plain copy and ldmatrix is emulated with
// lane shuffles (32-lane groups): correct, not fast.
#pragma once
#include "mma.cuh"

namespace fi {
namespace pf {

FI_DEVICE uint32_t smem_addr(const void *ptr) {
#if FI_CUDA
  uint32_t r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(ptr));
  return r;
#else
  (void)ptr;
  return 0u;
#endif
}

// 16 bytes global -> shared, asynchronous on CUDA (sm_80+).
FI_DEVICE void cp16(uint16_t *dst, const void *src) {
#if FI_CUDA
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
#else
  *reinterpret_cast<fi_vec<uint32_t, 4> *>(dst) = *reinterpret_cast<const fi_vec<uint32_t, 4> *>(src);
#endif
}
FI_DEVICE void cp_commit() {
#if FI_CUDA
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
FI_DEVICE void cp_wait() {
#if FI_CUDA
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// ldmatrix x4: lane l supplies the address (element offset `off` into s) of row l % 8 of
// matrix l / 8; register m gets matrix m's fragment (row lane / 4, elements 2 (lane % 4)
// and + 1), or with .trans the transposed one (rows 2 (lane % 4) and + 1, column lane / 4).
FI_DEVICE void ldsm4(const uint16_t *s, int off, uint32_t (&r)[4]) {
#if FI_CUDA
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(s + off)));
#else
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < 4; m++) {
    const int ro = (int)dec::shfl((uint32_t)off, 8 * m + (lane >> 2));
    r[m] = *reinterpret_cast<const uint32_t *>(s + ro + 2 * (lane & 3));
  }
#endif
}
FI_DEVICE void ldsm4t(const uint16_t *s, int off, uint32_t (&r)[4]) {
#if FI_CUDA
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(s + off)));
#else
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < 4; m++) {
    const int r0 = (int)dec::shfl((uint32_t)off, 8 * m + 2 * (lane & 3));
    const int r1 = (int)dec::shfl((uint32_t)off, 8 * m + 2 * (lane & 3) + 1);
    r[m] = (uint32_t)s[r0 + (lane >> 2)] | ((uint32_t)s[r1 + (lane >> 2)] << 16);
  }
#endif
}

#if FI_CUDA
// The same two loads from a 32-bit shared address (only the CUDA path calls them).
FI_DEVICE void ldsm4_at(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
FI_DEVICE void ldsm4t_at(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
#endif
// Hides x's value from the optimizer: what is computed from it cannot be hoisted.
FI_DEVICE void opaque(uint32_t &x) {
#if FI_CUDA
  asm volatile("" : "+r"(x));
#endif
}

// Element offset of 16-byte chunk ch of row `row` in a [rows][D] swizzled tile.
template <int D>
FI_DEVICE int swz(int row, int ch) {
  return row * D + ((ch ^ (row & 7)) << 3);
}

}  // namespace pf
}  // namespace fi
