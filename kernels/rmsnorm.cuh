// rmsnorm.cuh: RMSNorm over rows, one block per row. A row that fits in the
// block's registers (CHUNKS > 0) is read once; longer rows take two passes.
#pragma once
#include "fi_params.h"

namespace fi {

// T: element type; VEC: elements per 16-byte (or narrower) access;
// THREADS: block size; CHUNKS: vectors each thread keeps in registers
// (0: stream the row twice, any length).
template <typename T, int VEC, int THREADS, int CHUNKS>
FI_DEVICE void rmsnorm(const fi_rmsnorm_params &p) {
  __shared__ float scratch[THREADS / FI_WARP > 0 ? THREADS / FI_WARP : 1];
  const int64_t row = blockIdx.x;
  const T *in = static_cast<const T *>(p.input) + row * p.input_row_stride;
  T *out = static_cast<T *>(p.out) + row * p.out_row_stride;
  const T *w = static_cast<const T *>(p.weight);
  const int hidden = p.hidden;
  const int tid = threadIdx.x;

  if (CHUNKS > 0) {
    constexpr int C = CHUNKS > 0 ? CHUNKS : 1;
    fi_vec<T, VEC> x[C];
    float ss = 0.0f;
    // All loads are issued before any use so each thread has C requests in flight.
#pragma unroll
    for (int c = 0; c < C; c++) {
      const int i = (c * THREADS + tid) * VEC;
      if (i < hidden) x[c] = fi_load<T, VEC>(in + i);
    }
#pragma unroll
    for (int c = 0; c < C; c++) {
      const int i = (c * THREADS + tid) * VEC;
      if (i < hidden) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          const float f = fi_to_float(x[c].v[k]);
          ss += f * f;
        }
      }
    }
    ss = fi_block_sum<THREADS>(ss, scratch);
    const float r = rsqrtf(ss / (float)hidden + p.eps);
#pragma unroll
    for (int c = 0; c < C; c++) {
      const int i = (c * THREADS + tid) * VEC;
      if (i < hidden) {
        const fi_vec<T, VEC> wv = fi_load<T, VEC>(w + i);
        fi_vec<T, VEC> y;
#pragma unroll
        for (int k = 0; k < VEC; k++)
          y.v[k] = fi_from_float<T>(fi_to_float(x[c].v[k]) * r * fi_to_float(wv.v[k]));
        fi_store<T, VEC>(out + i, y);
      }
    }
  } else {
    float ss = 0.0f;
    for (int i = tid * VEC; i < hidden; i += THREADS * VEC) {
      const fi_vec<T, VEC> x = fi_load<T, VEC>(in + i);
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        const float f = fi_to_float(x.v[k]);
        ss += f * f;
      }
    }
    ss = fi_block_sum<THREADS>(ss, scratch);
    const float r = rsqrtf(ss / (float)hidden + p.eps);
    // Each element is read again by the thread that writes it, so out == in is safe.
    for (int i = tid * VEC; i < hidden; i += THREADS * VEC) {
      const fi_vec<T, VEC> x = fi_load<T, VEC>(in + i);
      const fi_vec<T, VEC> wv = fi_load<T, VEC>(w + i);
      fi_vec<T, VEC> y;
#pragma unroll
      for (int k = 0; k < VEC; k++)
        y.v[k] = fi_from_float<T>(fi_to_float(x.v[k]) * r * fi_to_float(wv.v[k]));
      fi_store<T, VEC>(out + i, y);
    }
  }
}

}  // namespace fi
