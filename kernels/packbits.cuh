// packbits.cuh: bit packing of boolean masks (fi_packbits, fi_segment_packbits), the
// packed custom masks of prefill attention; fi_params.h has the layout.
#pragma once
#include "fi_params.h"

namespace fi {

// SEG: one block a segment (its first output byte the sum of the earlier segments' byte
// counts, reduced by the block), else a grid over the output bytes; LITTLE: bit order.
template <int SEG, int LITTLE, int THREADS>
FI_DEVICE void packbits(const fi_packbits_params &p) {
  int64_t start = 0, len = p.n, off = 0, step = (int64_t)gridDim.x * THREADS,
          first = (int64_t)blockIdx.x * THREADS + threadIdx.x;
  if (SEG) {
    __shared__ int64_t red[THREADS];
    const int s = blockIdx.x;
    start = p.indptr[(int64_t)s * p.indptr_stride];
    len = p.indptr[(int64_t)(s + 1) * p.indptr_stride] - start;
    if (len < 0) len = 0;
    int64_t acc = 0;
    for (int i = threadIdx.x; i < s; i += THREADS) {
      const int64_t l = (int64_t)p.indptr[(int64_t)(i + 1) * p.indptr_stride] - p.indptr[(int64_t)i * p.indptr_stride];
      acc += l > 0 ? (l + 7) >> 3 : 0;
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w >>= 1) {
      if ((int)threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
      __syncthreads();
    }
    off = red[0];
    if (threadIdx.x == 0) {
      p.indptr_new[(int64_t)(s + 1) * p.indptr_new_stride] = (int32_t)(off + ((len + 7) >> 3));
      if (s == 0) p.indptr_new[0] = 0;
    }
    step = THREADS;
    first = threadIdx.x;
  }
  const int64_t nbytes = (len + 7) >> 3;
  for (int64_t j = first; j < nbytes; j += step) {
    uint32_t b = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int64_t i = 8 * j + k;
      if (i < len && p.x[(start + i) * p.x_stride] != 0) b |= LITTLE ? (1u << k) : (0x80u >> k);
    }
    if (off + j < p.y_len) p.y[off + j] = (uint8_t)b;
  }
}

}  // namespace fi
