// moe_gemm.cuh: the experts' grouped GEMM over the sort's tile tables (moe_sort.cuh), on
// mma.sync m16n8k16 (sm_80+; on ROCm the portable path of mma.cuh / sm80.cuh).
//   out[r, :] = a[r, :] . W[e]^T          for every live row r of a tile of expert e;
//   GATED: out[r, j] = silu(a[r] . W[e][gate + j]) * (a[r] . W[e][up + j]), j < n (SwiGLU
//   fused in the epilogue; W[e] holds 2n rows, [up; gate] or [gate; up]).
// W is [local experts][rows][k] (the nn.Linear layout: a row per output feature). With
// GATHER the A rows are read straight from x at token p2e[r] / top_k (the permute fused
// into the load). Rows of a tile past its mn_limit are never read or written; sort tiles
// from num_tiles on exit at once.
//
// A block is 4 warps over BM rows (a sort tile holds tile_size / BM of them) and BN output
// columns; the k loop steps 64 elements through STAGES shared-memory stages filled by
// cp.async, the A tile [BM][64], the weight tile(s) [BN][64], 16-byte chunks swizzled by
// row (sm80.cuh). Warps split the block 2 x 2 (BM >= 32) or 1 x 4; a warp's fragments
// come by ldmatrix x4, A rows as the mma's row operand, weight rows (output features,
// contiguous in k) as its column operand. Blocks are numbered so that TILE_BAND
// consecutive row blocks run over the same weight columns together: tiles of one expert
// share the weight slice through L2, and a band's A rows stay there across its columns.
#pragma once
#include "moe_params.h"
#include "mma.cuh"
#include "sm80.cuh"

#ifndef FI_MOE_EMU_SMEM
extern __shared__ unsigned char fi_moe_smem[] __attribute__((aligned(128)));
#endif

namespace fi {
namespace moe {

// Dynamic shared memory: STAGES * (BM + (GATED ? 2 : 1) * BN) * GEMM_BK 2-byte elements
// (jit/ops_moe.c's gemm_smem).
constexpr int GEMM_THREADS = 128, GEMM_BK = 64, TILE_BAND = 8;

// The block's place: its sort tile and expert, its first row and live rows, its first
// output column.
struct gemm_place {
  int tile, expert, row0, rows, col0;
};

template <int BM, int BN>
FI_DEVICE bool gemm_locate(const fi_moe_gemm_params_k &p, gemm_place &at) {
  const int subs = p.tile_size / BM, nb = p.n / BN;
  const int ysubs = p.max_tiles * subs;
  const int b = (int)blockIdx.x, band = b / (TILE_BAND * nb);
  const int r = b - band * TILE_BAND * nb;
  const int bt = min(TILE_BAND, ysubs - band * TILE_BAND);
  const int y = band * TILE_BAND + r % bt;
  at.tile = y / subs;
  at.col0 = (r / bt) * BN;
  if (at.tile >= *p.num_tiles) return false;
  at.row0 = at.tile * p.tile_size + (y % subs) * BM;
  at.rows = p.tile_mn_limit[at.tile] - at.row0;
  at.expert = p.tile_expert[at.tile];
  // An expert outside the weights: not a table fi_moe_sort wrote for them; skipped.
  return at.rows > 0 && at.expert >= 0 && at.expert < p.experts;
}

// Row r of the block's A tile in global memory, or nullptr past the live rows or for a
// route outside a (the caller zeroes its shared rows instead).
template <typename T, int GATHER>
FI_DEVICE const T *gemm_a_row(const fi_moe_gemm_params_k &p, const gemm_place &at, int r) {
  const int64_t src = r >= at.rows ? -1 : GATHER ? p.p2e[at.row0 + r] / p.top_k : (int64_t)(at.row0 + r);
  return src >= 0 && src < p.a_rows ? static_cast<const T *>(p.a) + src * p.a_stride : nullptr;
}

// Issues the cp.async copies of k step kt into stage s: the A rows this thread owns (their
// global rows in arow, nullptr past the live rows) and the weight rows of each B operand.
template <typename T, int BM, int BN, int NB>
FI_DEVICE void gemm_load(uint16_t *stage, const T *const (&arow)[BM / 16], const T *const (&wrow)[NB][BN / 16],
                         int kt) {
  const int ch = (int)threadIdx.x & 7, r0 = (int)threadIdx.x >> 3;
  const int ko = kt * GEMM_BK + ch * 8;
#pragma unroll
  for (int i = 0; i < BM / 16; i++)
    if (arow[i]) pf::cp16(stage + pf::swz<GEMM_BK>(r0 + 16 * i, ch), arow[i] + ko);
#pragma unroll
  for (int b = 0; b < NB; b++)
#pragma unroll
    for (int i = 0; i < BN / 16; i++)
      pf::cp16(stage + (BM + b * BN) * GEMM_BK + pf::swz<GEMM_BK>(r0 + 16 * i, ch), wrow[b][i] + ko);
}

// One stage's 64 k: MI x NI m16n8 tiles of each B operand per warp.
template <typename T, int BM, int BN, int NB, int MI, int NI>
FI_DEVICE void gemm_step(const uint16_t *stage, int wm0, int wn0, float (&acc)[NB][MI][NI][4]) {
  const int lane = (int)threadIdx.x & 31;
#pragma unroll
  for (int kk = 0; kk < GEMM_BK / 16; kk++) {
    uint32_t a[MI][4];
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
      pf::ldsm4(stage, pf::swz<GEMM_BK>(wm0 + 16 * mi + (lane & 15), 2 * kk + (lane >> 4)), a[mi]);
#pragma unroll
    for (int b = 0; b < NB; b++) {
      const uint16_t *sb = stage + (BM + b * BN) * GEMM_BK;
#pragma unroll
      for (int nj = 0; nj < NI / 2; nj++) {
        uint32_t w[4];
        pf::ldsm4(sb, pf::swz<GEMM_BK>(wn0 + 16 * nj + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)),
                  w);
#pragma unroll
        for (int mi = 0; mi < MI; mi++) {
          dec::mma<T>(acc[b][mi][2 * nj], a[mi][0], a[mi][1], a[mi][2], a[mi][3], w[0], w[1]);
          dec::mma<T>(acc[b][mi][2 * nj + 1], a[mi][0], a[mi][1], a[mi][2], a[mi][3], w[2], w[3]);
        }
      }
    }
  }
}

// Writes the live rows of the accumulators: pairs of columns a lane, SwiGLU when gated.
template <typename T, int NB, int MI, int NI>
FI_DEVICE void gemm_epilogue(const fi_moe_gemm_params_k &p, const gemm_place &at, int wm0, int wn0,
                             const float (&acc)[NB][MI][NI][4]) {
  const int lane = (int)threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int mi = 0; mi < MI; mi++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = wm0 + 16 * mi + g + 8 * h;
      if (r >= at.rows) continue;
      T *dst = static_cast<T *>(p.out) + (int64_t)(at.row0 + r) * p.out_stride + at.col0 + wn0 + 2 * c;
#pragma unroll
      for (int ni = 0; ni < NI; ni++) {
        fi_vec<T, 2> o;
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float v = acc[0][mi][ni][2 * h + e];
          if (NB == 2) {
            const float gt = acc[NB - 1][mi][ni][2 * h + e];
            v *= __fdividef(gt, 1.0f + __expf(-gt));
          }
          o.v[e] = fi_from_float<T>(v);
        }
        fi_store<T, 2>(dst + 8 * ni, o);
      }
    }
}

// T: f16 or bf16 (A, W and out); BM: rows a block (16, 64 or 128; divides tile_size); BN:
// output columns a block (64 or 128; divides n); GATED: SwiGLU over two weight halves;
// GATHER: A rows from x by p2e; STAGES: shared-memory stages (2 to 4).
template <typename T, int BM, int BN, int GATED, int GATHER, int STAGES>
FI_DEVICE void gemm(const fi_moe_gemm_params_k &p) {
  constexpr int NB = GATED ? 2 : 1;
  constexpr int WARPS_M = BM >= 32 ? 2 : 1, WARPS_N = 4 / WARPS_M;
  constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MI = WM / 16, NI = WN / 8;
  constexpr int STAGE = (BM + NB * BN) * GEMM_BK;  // elements
  static_assert(BM == 16 || BM == 64 || BM == 128, "BM");
  static_assert((BN == 64 || BN == 128) && NI % 2 == 0 && MI >= 1, "BN");
  static_assert(STAGES >= 2 && STAGES <= 4, "stages");
  gemm_place at;
  if (!gemm_locate<BM, BN>(p, at)) return;
  uint16_t *const smem = reinterpret_cast<uint16_t *>(fi_moe_smem);
  const int warp = (int)threadIdx.x >> 5, wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;

  // This thread's rows: A rows r0 + 16 i (nullptr past the live rows or for a route outside
  // a: their shared rows are zeroed once for every stage) and the weight rows of each operand.
  const int r0 = (int)threadIdx.x >> 3, ch = (int)threadIdx.x & 7;
  const T *arow[BM / 16];
  const T *wrow[NB][BN / 16];
#pragma unroll
  for (int i = 0; i < BM / 16; i++) {
    const int r = r0 + 16 * i;
    arow[i] = gemm_a_row<T, GATHER>(p, at, r);
    if (!arow[i]) {
#pragma unroll
      for (int s = 0; s < STAGES; s++)
        fi_store<uint32_t, 4>(reinterpret_cast<uint32_t *>(smem + s * STAGE + pf::swz<GEMM_BK>(r, ch)),
                              fi_vec<uint32_t, 4>{{0u, 0u, 0u, 0u}});
    }
  }
  const T *const we = static_cast<const T *>(p.w) + (int64_t)at.expert * p.w_expert_stride;
#pragma unroll
  for (int b = 0; b < NB; b++)
#pragma unroll
    for (int i = 0; i < BN / 16; i++)
      wrow[b][i] = we + (int64_t)((b ? p.gate_row : p.up_row) + at.col0 + r0 + 16 * i) * p.w_stride;

  float acc[NB][MI][NI][4];
#pragma unroll
  for (int b = 0; b < NB; b++)
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
      for (int ni = 0; ni < NI; ni++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[b][mi][ni][e] = 0.0f;

  const int KT = p.k / GEMM_BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < KT) gemm_load<T, BM, BN, NB>(smem + s * STAGE, arow, wrow, s);
    pf::cp_commit();
  }
#pragma unroll 1
  for (int kt = 0; kt < KT; kt++) {
    pf::cp_wait<STAGES - 2>();
    __syncthreads();  // stage kt % STAGES is in; every warp is done with the one refilled next
    const int nk = kt + STAGES - 1;
    if (nk < KT) gemm_load<T, BM, BN, NB>(smem + (nk % STAGES) * STAGE, arow, wrow, nk);
    pf::cp_commit();
    gemm_step<T, BM, BN, NB, MI, NI>(smem + (kt % STAGES) * STAGE, wm0, wn0, acc);
  }
  gemm_epilogue<T, NB, MI, NI>(p, at, wm0, wn0, acc);
}

}  // namespace moe
}  // namespace fi
