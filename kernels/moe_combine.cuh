// moe_combine.cuh: the row moves around the experts' GEMMs: permute gathers each token's
// hidden row into the rows the sort gave its routes; finalize sums each token's routes'
// expert outputs, weighted, in a fixed order (moe_params.h). A block a row, VEC elements
// a thread per step (VEC divides hidden and both row strides, so vectors stay aligned).
#pragma once
#include "moe_params.h"

namespace fi {
namespace moe {

constexpr int COMBINE_THREADS = 256;

template <typename T, int VEC>
FI_DEVICE void permute(const fi_moe_permute_params &p) {
  const int r = (int)blockIdx.x;
  if (r >= *p.num_tiles * p.tile_size) return;
  const int x = p.p2e[r];
  if (x < 0) return;
  const T *src = static_cast<const T *>(p.x) + (int64_t)(x / p.top_k) * p.x_stride;
  T *dst = static_cast<T *>(p.out) + (int64_t)r * p.out_stride;
  for (int c = (int)threadIdx.x * VEC; c < p.hidden; c += COMBINE_THREADS * VEC)
    fi_store<T, VEC>(dst + c, fi_load<T, VEC>(src + c));
}

template <typename T, int VEC>
FI_DEVICE void finalize(const fi_moe_finalize_params &p) {
  const int t = (int)blockIdx.x;
  T *dst = static_cast<T *>(p.out) + (int64_t)t * p.out_stride;
  for (int c = (int)threadIdx.x * VEC; c < p.hidden; c += COMBINE_THREADS * VEC) {
    float acc[VEC];
    if (p.accumulate) {
      const fi_vec<T, VEC> o = fi_load<T, VEC>(dst + c);
#pragma unroll
      for (int i = 0; i < VEC; i++) acc[i] = fi_to_float(o.v[i]);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; i++) acc[i] = 0.0f;
    }
    for (int k = 0; k < p.top_k; k++) {
      const int row = p.e2p[(int64_t)t * p.top_k + k];
      if (row < 0) continue;
      const float w = p.weights[(int64_t)t * p.top_k + k];
      const fi_vec<T, VEC> y = fi_load<T, VEC>(static_cast<const T *>(p.y) + (int64_t)row * p.y_stride + c);
#pragma unroll
      for (int i = 0; i < VEC; i++) acc[i] += w * fi_to_float(y.v[i]);
    }
    fi_vec<T, VEC> o;
#pragma unroll
    for (int i = 0; i < VEC; i++) o.v[i] = fi_from_float<T>(acc[i]);
    fi_store<T, VEC>(dst + c, o);
  }
}

}  // namespace moe
}  // namespace fi
