// rmsnorm.cuh: RMSNorm over rows. A persistent grid walks the rows; when a row
// fits in registers (CHUNKS > 0) it is read once, the weight stays in registers
// and the next row is loaded while the current one is reduced. Longer rows take two passes.
#pragma once
#include "fi_params.h"

namespace fi {

template <int HINT, typename T, int VEC>
FI_DEVICE fi_vec<T, VEC> rms_load(const T *p) {
  return HINT ? fi_load_stream<T, VEC>(p) : fi_load<T, VEC>(p);
}
template <int HINT, typename T, int VEC>
FI_DEVICE void rms_store(T *p, const fi_vec<T, VEC> &x) {
  if (HINT)
    fi_store_stream<T, VEC>(p, x);
  else
    fi_store<T, VEC>(p, x);
}

// T: element type; VEC: elements per access (16 bytes or narrower);
// THREADS: block size; CHUNKS: vectors per thread held in registers
// (0: two passes over the row, any length); WREG: keep the weight in
// registers (else re-read from L1 each row); HINT: streaming cache hints.
template <typename T, int VEC, int THREADS, int CHUNKS, int WREG, int HINT>
FI_DEVICE void rmsnorm(const fi_rmsnorm_params &p) {
  constexpr int NW = THREADS / FI_WARP > 0 ? THREADS / FI_WARP : 1;
  // Two scratch buffers, alternating by row: a warp that runs ahead to the
  // next row's reduction must not overwrite partial sums still being read.
  __shared__ float scratch[2][NW];
  const int hidden = p.hidden;
  const int tid = threadIdx.x;
  const T *w = static_cast<const T *>(p.weight);
  const float inv_h = 1.0f / (float)hidden;
  int parity = 0;

  if (CHUNKS > 0) {
    constexpr int C = CHUNKS > 0 ? CHUNKS : 1;
    fi_vec<T, VEC> wv[WREG ? C : 1], x[C], xn[C];
    if (WREG) {
#pragma unroll
      for (int c = 0; c < C; c++) {
        const int i = (c * THREADS + tid) * VEC;
        if (i < hidden) wv[WREG ? c : 0] = fi_load<T, VEC>(w + i);
      }
    }
    int64_t row = blockIdx.x;
    if (row < p.rows) {
      const T *in = static_cast<const T *>(p.input) + row * p.input_row_stride;
#pragma unroll
      for (int c = 0; c < C; c++) {
        const int i = (c * THREADS + tid) * VEC;
        if (i < hidden) x[c] = rms_load<HINT, T, VEC>(in + i);
      }
    }
    for (; row < p.rows; row += gridDim.x) {
      const int64_t next = row + gridDim.x;
      if (next < p.rows) {
        const T *in = static_cast<const T *>(p.input) + next * p.input_row_stride;
#pragma unroll
        for (int c = 0; c < C; c++) {
          const int i = (c * THREADS + tid) * VEC;
          if (i < hidden) xn[c] = rms_load<HINT, T, VEC>(in + i);
        }
      }
      float ss = 0.0f;
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
      ss = fi_block_sum<THREADS>(ss, scratch[parity]);
      parity ^= 1;
      const float r = rsqrtf(ss * inv_h + p.eps);
      T *out = static_cast<T *>(p.out) + row * p.out_row_stride;
#pragma unroll
      for (int c = 0; c < C; c++) {
        const int i = (c * THREADS + tid) * VEC;
        if (i < hidden) {
          const fi_vec<T, VEC> wc = WREG ? wv[WREG ? c : 0] : fi_load<T, VEC>(w + i);
          fi_vec<T, VEC> y;
#pragma unroll
          for (int k = 0; k < VEC; k++)
            y.v[k] = fi_from_float<T>(fi_to_float(x[c].v[k]) * r * fi_to_float(wc.v[k]));
          rms_store<HINT, T, VEC>(out + i, y);
        }
      }
#pragma unroll
      for (int c = 0; c < C; c++) x[c] = xn[c];
    }
  } else {
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
      const T *in = static_cast<const T *>(p.input) + row * p.input_row_stride;
      T *out = static_cast<T *>(p.out) + row * p.out_row_stride;
      float ss = 0.0f;
      for (int i = tid * VEC; i < hidden; i += THREADS * VEC) {
        const fi_vec<T, VEC> x = fi_load<T, VEC>(in + i);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          const float f = fi_to_float(x.v[k]);
          ss += f * f;
        }
      }
      ss = fi_block_sum<THREADS>(ss, scratch[parity]);
      parity ^= 1;
      const float r = rsqrtf(ss * inv_h + p.eps);
      // The thread that writes an element read it in the first pass, so
      // out == in is safe; the second read mostly hits L2.
      for (int i = tid * VEC; i < hidden; i += THREADS * VEC) {
        const fi_vec<T, VEC> x = fi_load<T, VEC>(in + i);
        const fi_vec<T, VEC> wx = fi_load<T, VEC>(w + i);
        fi_vec<T, VEC> y;
#pragma unroll
        for (int k = 0; k < VEC; k++)
          y.v[k] = fi_from_float<T>(fi_to_float(x.v[k]) * r * fi_to_float(wx.v[k]));
        fi_store<T, VEC>(out + i, y);
      }
    }
  }
}

}  // namespace fi
