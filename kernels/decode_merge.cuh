// decode_merge.cuh: split-KV decode's chunks combined: each chunk's arrival at its
// (request, KV head) counter, and the merge of the chunks' partial states by LSE.
#pragma once
#include "decode_params.h"
#include "mma.cuh"

namespace fi {
namespace dec {

// A split request's counter (decode's chunk merge): every thread calls split_publish
// after storing its share of the block's partial, then a barrier, then thread 0
// split_arrive (the count before it), then a barrier, and in the last block every thread
// split_acquired before reading the other blocks' partials. On CUDA the arrival is one
// acq_rel atomic at device scope: its release publishes what the barrier ordered before
// it, its acquire what the next barrier orders after it (the arrive/wait pattern of
// CUTLASS's generic barrier), in place of a fence in every thread on each side of a
// relaxed atomic: faster at B = 1 (H100, lab/decode_trace; docs/decode.md, twenty-ninth
// session §2). HIP keeps the
// fences, untested on the new pattern.
FI_DEVICE void split_publish() {
#if !FI_CUDA
  __threadfence();
#endif
}
FI_DEVICE int32_t split_arrive(int32_t *counter) {
#if FI_CUDA
  int32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
  return old;
#else
  return atomicAdd(counter, 1);
#endif
}
FI_DEVICE void split_acquired() {
#if !FI_CUDA
  __threadfence();
#endif
}

// The sinks of a block's rows (query heads head0 .. head0 + rows - 1, sinks pointing at
// head0's) folded into their final states in shared memory (m base 2, s the sum), each
// row's values' factor (sink_fold) into a. Block-wide: every thread calls it, a barrier after.
FI_DEVICE void sinks_fold_rows(const float *sinks, int rows, float *m, float *s, float *a) {
  if ((int)threadIdx.x < rows) a[threadIdx.x] = sink_fold(sinks[threadIdx.x] * LOG2E_F, m[threadIdx.x], s[threadIdx.x]);
  __syncthreads();
}

// The merge of a split (request, KV head): its nchunks partials from item `first` into
// out and lse, by one block of THREADS threads (the last chunk's block in batch decode,
// the merge launch in single decode).
template <typename QT, int D, int THREADS>
FI_DEVICE void split_merge(const fi_decode_params &p, int b, int head0, int GE, int64_t hq, int first,
                           int nchunks) {
  const int tid = threadIdx.x;
  const float LN2 = 0.6931471805599453f;
  // Per (row, 8 dims) unit, the chunks in batches of MB: a batch's loads all go out
  // before any is used (one L2 round trip a batch, not one a chunk; 16: B = 1's 32
  // chunks in one round trip on the two threads a unit of 4-warp blocks). When the block
  // has threads to spare, Q threads share a unit's chunks and combine through shared memory.
  constexpr int MB = 16;
  const int U = GE * (D / 8), Q = U < THREADS ? THREADS / U : 1;
  __shared__ float s_pm[THREADS], s_ps[THREADS], s_pa[THREADS][9];
  for (int u0 = 0; u0 < U; u0 += THREADS) {
    const int uq = u0 + (Q > 1 ? tid % U : tid), q = Q > 1 ? tid / U : 0;
    const bool active = uq < U && q < Q;
    const int r = uq / (D / 8), d8 = (uq - r * (D / 8)) * 8;
    float mx = neg_inf(), sw = 0.0f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    if (active) {
      for (int i0 = q; i0 < nchunks; i0 += MB * Q) {
        float l[MB];
        uint32_t x[MB][4];  // 8 dims of the output dtype, widened as they are used
#pragma unroll
        for (int j = 0; j < MB; j++) {
          const int i = i0 + j * Q;
          if (i < nchunks) {
            const int64_t row = (int64_t)(first + i) * hq + head0 + r;
            l[j] = ldcg(p.partial_lse + row);
            ldcg16(static_cast<const QT *>(p.partial_o) + row * D + d8, x[j]);
          } else {
            l[j] = neg_inf();
#pragma unroll
            for (int e = 0; e < 4; e++) x[j][e] = 0u;
          }
        }
        float mn = mx;
#pragma unroll
        for (int j = 0; j < MB; j++) mn = fmaxf(mn, l[j]);
        const float mu = mn == neg_inf() ? 0.0f : mn, a = ex2(mx - mu);
        sw *= a;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] *= a;
#pragma unroll
        for (int j = 0; j < MB; j++) {
          const float w = ex2(l[j] - mu);
          sw += w;
#pragma unroll
          for (int e = 0; e < 4; e++) {
            acc[2 * e] = fmaf(w, w16<QT>::lo(x[j][e]), acc[2 * e]);
            acc[2 * e + 1] = fmaf(w, w16<QT>::hi(x[j][e]), acc[2 * e + 1]);
          }
        }
        mx = mn;
      }
    }
    if (Q > 1) {
      s_pm[tid] = mx;
      s_ps[tid] = sw;
#pragma unroll
      for (int e = 0; e < 8; e++) s_pa[tid][e] = acc[e];
      __syncthreads();
      if (tid < U) {
        float m2 = neg_inf();
        for (int j = 0; j < Q; j++) m2 = fmaxf(m2, s_pm[j * U + tid]);
        const float mu = m2 == neg_inf() ? 0.0f : m2;
        sw = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] = 0.0f;
        for (int j = 0; j < Q; j++) {
          const float a = ex2(s_pm[j * U + tid] - mu);
          sw += a * s_ps[j * U + tid];
#pragma unroll
          for (int e = 0; e < 8; e++) acc[e] += a * s_pa[j * U + tid][e];
        }
        mx = m2;
      }
    }
    if (uq < U && (Q == 1 || tid < U)) {
      const float a = p.sinks ? sink_fold(p.sinks[head0 + r] * LOG2E_F, mx, sw) : 1.0f;
      const float inv = sw > 0.0f ? a / sw : 0.0f;
      fi_vec<QT, 8> y;
#pragma unroll
      for (int e = 0; e < 8; e++) y.v[e] = fi_from_float<QT>(acc[e] * inv);
      QT *orow = static_cast<QT *>(p.out) + (int64_t)b * p.out_stride[0] + (int64_t)(head0 + r) * p.out_stride[1];
      *reinterpret_cast<fi_vec<QT, 8> *>(orow + d8) = y;
      if (p.lse && d8 == 0)
        p.lse[(int64_t)b * p.lse_stride[0] + (int64_t)(head0 + r) * p.lse_stride[1]] =
            sw > 0.0f ? (mx + log2f(sw)) * (p.lse_log2 ? 1.0f : LN2) : neg_inf();
    }
  }
}

}  // namespace dec
}  // namespace fi
