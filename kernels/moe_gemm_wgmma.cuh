// moe_gemm_wgmma.cuh: the experts' grouped GEMM (moe_gemm.cuh's contract: the sort's tiles,
// the gather and SwiGLU fused) on Hopper's warpgroup MMA (sm_90a; sm90.cuh's PTX layer).
// A block is two warpgroups over 128 rows of a tile (64 each) and 128 weight rows: 128
// output columns, or with SwiGLU 64 up rows and the 64 gate rows of the same columns, so
// that one m64n128k16 wgmma yields both halves and a thread holds each column's up and
// gate values together (accumulator j and j + 32). The k loop steps 64 elements: every
// thread copies its 16-byte chunks of the A and weight tiles into the stage STAGES - 1
// ahead by cp.async (128-byte swizzled K-major tiles, both wgmma operands from shared
// memory), then the warpgroups run the stage's four k16 steps.
#pragma once
#include "moe_gemm.cuh"
#include "sm90.cuh"

namespace fi {
namespace moe {

constexpr int WG_THREADS = 256;
constexpr uint32_t WG_TILE_BYTES = 128 * 128;  // [128 rows][64 k] 16-bit elements

template <typename T, int GATED, int GATHER, int STAGES>
FI_DEVICE void gemm_wg(const fi_moe_gemm_params_k &p) {
  constexpr int BM = 128, BN = GATED ? 64 : 128;
  constexpr uint32_t STAGE = 2 * WG_TILE_BYTES;
  static_assert(STAGES >= 2 && STAGES <= 6, "stages");
  gemm_place at;
  if (!gemm_locate<BM, BN>(p, at)) return;
  const uint32_t base = wg::smem_addr(fi_moe_smem), sb = (base + 1023u) & ~1023u;
  const int tid = (int)threadIdx.x, wgi = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;

  // This thread's chunk ch of rows r0 + 32 i of both tiles; A rows past the live ones are
  // zeroed once in every stage (the wgmma reads them; the epilogue drops their results).
  const int r0 = tid >> 3, ch = tid & 7;
  const T *arow[4], *wrow[4];
  const T *const we = static_cast<const T *>(p.w) + (int64_t)at.expert * p.w_expert_stride;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = r0 + 32 * i;
    arow[i] = gemm_a_row<T, GATHER>(p, at, r);
    if (!arow[i]) {
#pragma unroll
      for (int s = 0; s < STAGES; s++)
        asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(sb + s * STAGE + wg::sw128(r, ch, 128)), "r"(0u)
                     : "memory");
    }
    const int wr = GATED ? (r < 64 ? p.up_row + at.col0 + r : p.gate_row + at.col0 + r - 64) : at.col0 + r;
    wrow[i] = we + (int64_t)wr * p.w_stride;
  }
  auto load = [&](int kt) {
    const uint32_t st = sb + (uint32_t)(kt % STAGES) * STAGE;
    const int ko = kt * GEMM_BK + ch * 8;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint32_t o = wg::sw128(r0 + 32 * i, ch, 128);
      if (arow[i]) wg::cp16(st + o, arow[i] + ko);
      wg::cp16(st + WG_TILE_BYTES + o, wrow[i] + ko);
    }
  };

  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; i++) acc[i] = 0.0f;
  const int KT = p.k / GEMM_BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < KT) load(s);
    wg::cp_commit();
  }
#pragma unroll 1
  for (int kt = 0; kt < KT; kt++) {
    wg::cp_wait<STAGES - 2>();
    wg::fence_proxy_async();  // this thread's copies (and zeroes), before the wgmma reads them
    __syncthreads();          // every thread's; and every warpgroup is done with the stage refilled next
    if (kt + STAGES - 1 < KT) load(kt + STAGES - 1);
    wg::cp_commit();
    const uint32_t st = sb + (uint32_t)(kt % STAGES) * STAGE;
    const uint64_t da = wg::kdesc(st + (uint32_t)wgi * 64 * 128, WG_TILE_BYTES, 0);
    const uint64_t db = wg::kdesc(st + WG_TILE_BYTES, WG_TILE_BYTES, 0);
    wg::fence_regs(acc);
    wg::wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wg::mma<T, 128>::ss(acc, da + 2 * kk, db + 2 * kk, 1);  // 32 bytes a k16 step
    wg::wg_commit();
    wg::wg_wait<0>();
    wg::fence_regs(acc);
  }

  // Row 64 wgi + 16 warp + g (+ 8), columns 8 j + 2 c (+ 1): accumulators 4 j + 2 h (+ 1).
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int r = 64 * wgi + 16 * warp + g + 8 * h;
    if (r >= at.rows) continue;
    T *dst = static_cast<T *>(p.out) + (int64_t)(at.row0 + r) * p.out_stride + at.col0 + 2 * c;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
      fi_vec<T, 2> o;
#pragma unroll
      for (int e = 0; e < 2; e++) {
        float v = acc[4 * j + 2 * h + e];
        if (GATED) {
          const float gt = acc[4 * (j + 8) + 2 * h + e];
          v *= __fdividef(gt, 1.0f + __expf(-gt));
        }
        o.v[e] = fi_from_float<T>(v);
      }
      fi_store<T, 2>(dst + 8 * j, o);
    }
  }
}

}  // namespace moe
}  // namespace fi
