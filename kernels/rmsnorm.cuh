// rmsnorm.cuh: RMSNorm over rows, with switches for a fused residual add and Gemma's
// (1 + weight). Blocks walk the rows by the grid's stride; a row that fits in registers
// (CHUNKS > 0) is read once, and with 2 vectors a thread the next row is loaded while
// this one is reduced (with 4 or more the launch gives each row its own block).
// Longer rows take two passes.
#pragma once
#include "fi_params.h"

// Largest block of the kernels whose block size is chosen at launch (THREADS 0).
#define FI_NORM_MAX_THREADS 512

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

// One row's share of this thread: C vectors, c-th at element (c * nthr + tid) * VEC.
template <int HINT, typename T, int VEC, int C>
FI_DEVICE void rms_load_row(fi_vec<T, VEC> (&x)[C], const T *row, int nthr, int tid, int hidden) {
#pragma unroll
  for (int c = 0; c < C; c++) {
    const int i = (c * nthr + tid) * VEC;
    if (i < hidden) x[c] = rms_load<HINT, T, VEC>(row + i);
  }
}

// VEC floats rounded to a vector of T. 16-bit types go two at a time where the
// target has the paired conversion (sm_80 and up: one cvt.rn.{bf16,f16}x2.f32
// where the scalar form takes a conversion and a byte permute each).
template <typename T>
FI_DEVICE uint32_t norm_round2(float lo, float hi);
template <>
FI_DEVICE uint32_t norm_round2<fi_bf16>(float lo, float hi) {
  uint32_t r;
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
  r = (uint32_t)fi_from_float<fi_bf16>(lo).bits | ((uint32_t)fi_from_float<fi_bf16>(hi).bits << 16);
#endif
  return r;
}
template <>
FI_DEVICE uint32_t norm_round2<fi_half>(float lo, float hi) {
  uint32_t r;
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
  r = (uint32_t)fi_from_float<fi_half>(lo).bits | ((uint32_t)fi_from_float<fi_half>(hi).bits << 16);
#endif
  return r;
}
template <typename T, int VEC>
FI_DEVICE fi_vec<T, VEC> norm_round(const float (&f)[VEC]) {
  fi_vec<T, VEC> y;
  if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
    uint32_t *w = reinterpret_cast<uint32_t *>(&y);
#pragma unroll
    for (int k = 0; k < VEC / 2; k++) w[k] = norm_round2<T>(f[2 * k], f[2 * k + 1]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) y.v[k] = fi_from_float<T>(f[k]);
  }
  return y;
}

// Sum over the block. THREADS > 0: the block size is known when compiling;
// 0: it is blockDim.x, a multiple of the warp, at most FI_NORM_MAX_THREADS.
template <int THREADS>
FI_DEVICE float norm_block_sum(float v, float *scratch) {
  if constexpr (THREADS > 0) {
    return fi_block_sum<THREADS>(v, scratch);
  } else {
    v = fi_warp_sum<FI_WARP>(v);
    const int warps = (int)blockDim.x / FI_WARP;
    if (warps == 1) return v;
    const int lane = threadIdx.x % FI_WARP, warp = threadIdx.x / FI_WARP;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return fi_warp_sum<FI_WARP>(lane < warps ? scratch[lane] : 0.0f);
  }
}

// A weight as the product uses it: w, or Gemma's 1 + w (in float, as FlashInfer).
template <int GEMMA, typename W>
FI_DEVICE float norm_weight(W w) {
  if constexpr (GEMMA)
    return 1.0f + fi_to_float(w);
  else
    return fi_to_float(w);
}

// T: element type; VEC: elements per access (16 bytes or narrower);
// THREADS: block size (0: chosen at launch); CHUNKS: vectors per thread held
// in registers (0: two passes over the row, any length); WREG: keep the weight
// in registers (else re-read from L1 each row); HINT: streaming cache hints;
// RESIDUAL: residual += input first, normalize that, write it back and write
// the result over the input (P is then fi_norm_params); GEMMA: scale by
// (1 + weight), the one added in float.
//
// With RESIDUAL, as in FlashInfer's FusedAddRMSNormKernel: x = input + residual
// is summed in float, residual stores x rounded to T, and the float x (not the
// rounded one) is what gets normalized.
template <typename T, int VEC, int THREADS, int CHUNKS, int WREG, int HINT, int RESIDUAL,
          int GEMMA, typename P>
FI_DEVICE void rmsnorm_impl(const P &p) {
  constexpr int MAXT = THREADS > 0 ? THREADS : FI_NORM_MAX_THREADS;
  constexpr int NW = MAXT / FI_WARP > 0 ? MAXT / FI_WARP : 1;
  // Two scratch buffers, alternating by row: a warp that runs ahead to the
  // next row's reduction must not overwrite partial sums still being read.
  __shared__ float scratch[2][NW];
  const int nthr = THREADS > 0 ? THREADS : (int)blockDim.x;
  const int hidden = p.hidden;
  const int tid = threadIdx.x;
  const T *w = static_cast<const T *>(p.weight);
  const float inv_h = 1.0f / (float)hidden;
  int parity = 0;

  if constexpr (CHUNKS > 0 && RESIDUAL) {
    constexpr int C = CHUNKS;
    // Up to 2 vectors a thread, the next row's input and residual are loaded
    // first thing in each iteration, into a second buffer: issued after the
    // residual's stores instead, they measured far slower at 8192 x 8192
    // bf16. From 4 vectors on, one row's loads (8 a thread) keep enough bytes
    // in flight, and the registers a second buffer would take are better left
    // to occupancy: no prefetch (faster at hidden 16384; docs/ops.md, figures
    // from comments).
    constexpr bool PREFETCH = C < 4;
    constexpr int CN = PREFETCH ? C : 1;
    fi_vec<T, VEC> wv[WREG ? C : 1], x[C], rs[C], xn[CN], rsn[CN];
    if constexpr (WREG) rms_load_row<0, T, VEC, C>(wv, w, nthr, tid, hidden);
    int64_t row = blockIdx.x;
    if (PREFETCH && row < p.rows) {
      rms_load_row<HINT, T, VEC, C>(x, static_cast<const T *>(p.input) + row * p.input_row_stride,
                                    nthr, tid, hidden);
      rms_load_row<HINT, T, VEC, C>(rs, static_cast<const T *>(p.residual) + row * p.residual_row_stride,
                                    nthr, tid, hidden);
    }
    for (; row < p.rows; row += gridDim.x) {
      if constexpr (PREFETCH) {
        const int64_t next = row + gridDim.x;
        if (next < p.rows) {
          rms_load_row<HINT, T, VEC, CN>(
              xn, static_cast<const T *>(p.input) + next * p.input_row_stride, nthr, tid, hidden);
          rms_load_row<HINT, T, VEC, CN>(
              rsn, static_cast<const T *>(p.residual) + next * p.residual_row_stride, nthr, tid, hidden);
        }
      } else {
        rms_load_row<HINT, T, VEC, C>(x, static_cast<const T *>(p.input) + row * p.input_row_stride,
                                      nthr, tid, hidden);
        rms_load_row<HINT, T, VEC, C>(
            rs, static_cast<const T *>(p.residual) + row * p.residual_row_stride, nthr, tid, hidden);
      }
      float xf[C][VEC];
      float ss = 0.0f;
      T *res = static_cast<T *>(p.residual) + row * p.residual_row_stride;
#pragma unroll
      for (int c = 0; c < C; c++) {
        const int i = (c * nthr + tid) * VEC;
        if (i < hidden) {
#pragma unroll
          for (int k = 0; k < VEC; k++) {
            xf[c][k] = fi_to_float(x[c].v[k]) + fi_to_float(rs[c].v[k]);
            ss += xf[c][k] * xf[c][k];
          }
          rms_store<HINT, T, VEC>(res + i, norm_round<T, VEC>(xf[c]));
        }
      }
      ss = norm_block_sum<THREADS>(ss, scratch[parity]);
      parity ^= 1;
      const float r = rsqrtf(ss * inv_h + p.eps);
      T *out = static_cast<T *>(p.out) + row * p.out_row_stride;
#pragma unroll
      for (int c = 0; c < C; c++) {
        const int i = (c * nthr + tid) * VEC;
        if (i < hidden) {
          const fi_vec<T, VEC> wc = WREG ? wv[WREG ? c : 0] : fi_load<T, VEC>(w + i);
          float y[VEC];
#pragma unroll
          for (int k = 0; k < VEC; k++) y[k] = xf[c][k] * r * norm_weight<GEMMA>(wc.v[k]);
          rms_store<HINT, T, VEC>(out + i, norm_round<T, VEC>(y));
        }
      }
      if constexpr (PREFETCH) {
#pragma unroll
        for (int c = 0; c < C; c++) {
          x[c] = xn[PREFETCH ? c : 0];
          rs[c] = rsn[PREFETCH ? c : 0];
        }
      }
    }
  } else if constexpr (CHUNKS > 0) {
    constexpr int C = CHUNKS;
    // fi_rmsnorm (THREADS > 0) and blocks of up to 2 vectors a thread load
    // the next row while reducing this one. The launch-sized kernels with 4
    // or more run one block per row (rt_norm_launch), so there is no next
    // row: a block per row without the second buffer measured faster than
    // 512 x 2 prefetching resident blocks at 8192 x 8192 bf16 (gemma) and at
    // hidden 16384 (docs/ops.md, sixth session, norms one block per row, and
    // figures from comments).
    constexpr bool PREFETCH = THREADS > 0 || C < 4;
    constexpr int CN = PREFETCH ? C : 1;
    fi_vec<T, VEC> wv[WREG ? C : 1], x[C], xn[CN];
    if (WREG) {
#pragma unroll
      for (int c = 0; c < C; c++) {
        const int i = (c * nthr + tid) * VEC;
        if (i < hidden) wv[WREG ? c : 0] = fi_load<T, VEC>(w + i);
      }
    }
    int64_t row = blockIdx.x;
    if (PREFETCH && row < p.rows)
      rms_load_row<HINT, T, VEC, C>(x, static_cast<const T *>(p.input) + row * p.input_row_stride,
                                    nthr, tid, hidden);
    for (; row < p.rows; row += gridDim.x) {
      if constexpr (PREFETCH) {
        const int64_t next = row + gridDim.x;
        if (next < p.rows)
          rms_load_row<HINT, T, VEC, CN>(
              xn, static_cast<const T *>(p.input) + next * p.input_row_stride, nthr, tid, hidden);
      } else {
        rms_load_row<HINT, T, VEC, C>(x, static_cast<const T *>(p.input) + row * p.input_row_stride,
                                      nthr, tid, hidden);
      }
      float ss = 0.0f;
#pragma unroll
      for (int c = 0; c < C; c++) {
        const int i = (c * nthr + tid) * VEC;
        if (i < hidden) {
#pragma unroll
          for (int k = 0; k < VEC; k++) {
            const float f = fi_to_float(x[c].v[k]);
            ss += f * f;
          }
        }
      }
      ss = norm_block_sum<THREADS>(ss, scratch[parity]);
      parity ^= 1;
      const float r = rsqrtf(ss * inv_h + p.eps);
      T *out = static_cast<T *>(p.out) + row * p.out_row_stride;
#pragma unroll
      for (int c = 0; c < C; c++) {
        const int i = (c * nthr + tid) * VEC;
        if (i < hidden) {
          const fi_vec<T, VEC> wc = WREG ? wv[WREG ? c : 0] : fi_load<T, VEC>(w + i);
          float y[VEC];
#pragma unroll
          for (int k = 0; k < VEC; k++) y[k] = fi_to_float(x[c].v[k]) * r * norm_weight<GEMMA>(wc.v[k]);
          rms_store<HINT, T, VEC>(out + i, norm_round<T, VEC>(y));
        }
      }
      if constexpr (PREFETCH) {
#pragma unroll
        for (int c = 0; c < C; c++) x[c] = xn[c];
      }
    }
  } else {
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
      const T *in = static_cast<const T *>(p.input) + row * p.input_row_stride;
      T *out = static_cast<T *>(p.out) + row * p.out_row_stride;
      T *res = nullptr;
      if constexpr (RESIDUAL) res = static_cast<T *>(p.residual) + row * p.residual_row_stride;
      float ss = 0.0f;
      for (int i = tid * VEC; i < hidden; i += nthr * VEC) {
        const fi_vec<T, VEC> x = fi_load<T, VEC>(in + i);
        fi_vec<T, VEC> rv;
        if constexpr (RESIDUAL) rv = fi_load<T, VEC>(res + i);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          float f = fi_to_float(x.v[k]);
          if constexpr (RESIDUAL) f += fi_to_float(rv.v[k]);
          ss += f * f;
        }
      }
      ss = norm_block_sum<THREADS>(ss, scratch[parity]);
      parity ^= 1;
      const float r = rsqrtf(ss * inv_h + p.eps);
      // The thread that writes an element read it in the first pass, so
      // out == in is safe; the second read mostly hits L2. With a residual,
      // the first pass writes nothing: the second re-reads input and residual
      // as they were and recomputes the float sum, as exact as one pass.
      for (int i = tid * VEC; i < hidden; i += nthr * VEC) {
        const fi_vec<T, VEC> x = fi_load<T, VEC>(in + i);
        const fi_vec<T, VEC> wx = fi_load<T, VEC>(w + i);
        fi_vec<T, VEC> y, rv;
        if constexpr (RESIDUAL) rv = fi_load<T, VEC>(res + i);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          float f = fi_to_float(x.v[k]);
          if constexpr (RESIDUAL) {
            f += fi_to_float(rv.v[k]);
            rv.v[k] = fi_from_float<T>(f);
          }
          y.v[k] = fi_from_float<T>(f * r * norm_weight<GEMMA>(wx.v[k]));
        }
        if constexpr (RESIDUAL) fi_store<T, VEC>(res + i, rv);
        fi_store<T, VEC>(out + i, y);
      }
    }
  }
}

// fi_rmsnorm: out = input / rms(input) * weight.
template <typename T, int VEC, int THREADS, int CHUNKS, int WREG, int HINT>
FI_DEVICE void rmsnorm(const fi_rmsnorm_params &p) {
  rmsnorm_impl<T, VEC, THREADS, CHUNKS, WREG, HINT, 0, 0>(p);
}

// fi_fused_add_rmsnorm, fi_gemma_rmsnorm, fi_gemma_fused_add_rmsnorm: the
// block size is chosen at launch (a multiple of the warp up to
// FI_NORM_MAX_THREADS), so one binary serves every row length its CHUNKS cover.
template <typename T, int VEC, int CHUNKS, int WREG, int HINT, int RESIDUAL, int GEMMA>
FI_DEVICE void rmsnorm_ext(const fi_norm_params &p) {
  rmsnorm_impl<T, VEC, 0, CHUNKS, WREG, HINT, RESIDUAL, GEMMA>(p);
}

}  // namespace fi
