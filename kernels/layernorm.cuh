// layernorm.cuh: LayerNorm over rows, (x - mean) / sqrt(var + eps) * gamma + beta, built
// like rmsnorm.cuh (rows in registers, block size chosen at launch, a block per row);
// mean and variance come from one pass over the registers and one block reduction.
#pragma once
#include "rmsnorm.cuh"

namespace fi {

// Sums a and b over the block, both with one barrier; every thread gets the
// totals. scratch holds 2 * FI_NORM_MAX_THREADS / FI_WARP floats.
FI_DEVICE void norm_block_sum2(float &a, float &b, float *scratch) {
  constexpr int NW = FI_NORM_MAX_THREADS / FI_WARP;
  a = fi_warp_sum<FI_WARP>(a);
  b = fi_warp_sum<FI_WARP>(b);
  const int warps = (int)blockDim.x / FI_WARP;
  if (warps == 1) return;
  const int lane = threadIdx.x % FI_WARP, warp = threadIdx.x / FI_WARP;
  if (lane == 0) {
    scratch[warp] = a;
    scratch[NW + warp] = b;
  }
  __syncthreads();
  a = fi_warp_sum<FI_WARP>(lane < warps ? scratch[lane] : 0.0f);
  b = fi_warp_sum<FI_WARP>(lane < warps ? scratch[NW + lane] : 0.0f);
}

// VEC elements of gamma or beta, in accesses of at most 16 bytes: a float32
// gamma beside 16-bit rows spans 32 bytes per vector.
template <typename G, int VEC>
FI_DEVICE fi_vec<G, VEC> norm_load_affine(const G *p) {
  constexpr int PIECE = 16 / (int)sizeof(G) < VEC ? 16 / (int)sizeof(G) : VEC;
  fi_vec<G, VEC> r;
#pragma unroll
  for (int j = 0; j < VEC; j += PIECE) {
    const fi_vec<G, PIECE> q = fi_load<G, PIECE>(p + j);
#pragma unroll
    for (int k = 0; k < PIECE; k++) r.v[j + k] = q.v[k];
  }
  return r;
}

// The row's moments: sums of d = x - k and of d^2, k being the row's first
// element (read by every thread), so that the sums hold deviations of the
// size of the spread, not of the mean, and s2/n - (s1/n)^2 does not cancel
// the way a plain sum of squares minus a squared sum would for rows far
// from zero mean. Gives the mean and 1/sqrt(var + eps).
FI_DEVICE void norm_moments(float s1, float s2, float k, float inv_h, float eps, float *scratch,
                            float &mean, float &rstd) {
  norm_block_sum2(s1, s2, scratch);
  const float md = s1 * inv_h;
  const float var = fmaxf(s2 * inv_h - md * md, 0.0f);
  mean = k + md;
  rstd = rsqrtf(var + eps);
}

// T: element type; G: gamma and beta (T or float); VEC: elements per access;
// CHUNKS: vectors per thread in registers (0: two passes, any length); WREG:
// gamma and beta kept in registers; HINT: streaming hints on rows.
template <typename T, typename G, int VEC, int CHUNKS, int WREG, int HINT>
FI_DEVICE void layernorm(const fi_norm_params &p) {
  constexpr int NW = FI_NORM_MAX_THREADS / FI_WARP;
  // Alternating by row, as in rmsnorm: a warp running ahead must not
  // overwrite entries another warp is still reading.
  __shared__ float scratch[2][2 * NW];
  const int nthr = (int)blockDim.x;
  const int hidden = p.hidden;
  const int tid = threadIdx.x;
  const T *in0 = static_cast<const T *>(p.input);
  const G *gamma = static_cast<const G *>(p.weight);
  const G *beta = static_cast<const G *>(p.bias);
  const float inv_h = 1.0f / (float)hidden;
  int parity = 0;

  if constexpr (CHUNKS > 0) {
    // No prefetch of the next row: rt_norm_launch runs one block per row
    // (4 or 8 vectors a thread), which measured faster at 8192 x 8192 bf16
    // than resident blocks looping over rows, and those had measured faster
    // than 512 x 2 prefetching ones (docs/ops.md, sixth session, norms one
    // block per row, and figures from comments).
    constexpr int C = CHUNKS;
    fi_vec<G, VEC> gv[WREG ? C : 1], bv[WREG ? C : 1];
    fi_vec<T, VEC> x[C];
    if constexpr (WREG) {
#pragma unroll
      for (int c = 0; c < C; c++) {
        const int i = (c * nthr + tid) * VEC;
        if (i < hidden) {
          gv[c] = norm_load_affine<G, VEC>(gamma + i);
          bv[c] = norm_load_affine<G, VEC>(beta + i);
        }
      }
    }
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
      const T *in = in0 + row * p.input_row_stride;
      rms_load_row<HINT, T, VEC, C>(x, in, nthr, tid, hidden);
      const float k = fi_to_float(in[0]);
      float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
      for (int c = 0; c < C; c++)
        if ((c * nthr + tid) * VEC < hidden) {
#pragma unroll
          for (int j = 0; j < VEC; j++) {
            const float d = fi_to_float(x[c].v[j]) - k;
            s1 += d;
            s2 += d * d;
          }
        }
      float mean, rstd;
      norm_moments(s1, s2, k, inv_h, p.eps, scratch[parity], mean, rstd);
      parity ^= 1;
      T *out = static_cast<T *>(p.out) + row * p.out_row_stride;
#pragma unroll
      for (int c = 0; c < C; c++) {
        const int i = (c * nthr + tid) * VEC;
        if (i < hidden) {
          fi_vec<G, VEC> g, b;
          if constexpr (WREG) {
            g = gv[c];
            b = bv[c];
          } else {
            g = norm_load_affine<G, VEC>(gamma + i);
            b = norm_load_affine<G, VEC>(beta + i);
          }
          float y[VEC];
#pragma unroll
          for (int j = 0; j < VEC; j++)
            y[j] = (fi_to_float(x[c].v[j]) - mean) * (rstd * fi_to_float(g.v[j])) +
                   fi_to_float(b.v[j]);
          rms_store<HINT, T, VEC>(out + i, norm_round<T, VEC>(y));
        }
      }
    }
  } else {
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
      const T *in = in0 + row * p.input_row_stride;
      T *out = static_cast<T *>(p.out) + row * p.out_row_stride;
      const float k = fi_to_float(in[0]);
      float s1 = 0.0f, s2 = 0.0f;
      for (int i = tid * VEC; i < hidden; i += nthr * VEC) {
        const fi_vec<T, VEC> x = fi_load<T, VEC>(in + i);
#pragma unroll
        for (int j = 0; j < VEC; j++) {
          const float d = fi_to_float(x.v[j]) - k;
          s1 += d;
          s2 += d * d;
        }
      }
      float mean, rstd;
      norm_moments(s1, s2, k, inv_h, p.eps, scratch[parity], mean, rstd);
      parity ^= 1;
      // The thread that writes an element read it above, so out == in is
      // safe (in[0] included: every thread read it before the barrier).
      for (int i = tid * VEC; i < hidden; i += nthr * VEC) {
        const fi_vec<T, VEC> x = fi_load<T, VEC>(in + i);
        const fi_vec<G, VEC> g = norm_load_affine<G, VEC>(gamma + i);
        const fi_vec<G, VEC> b = norm_load_affine<G, VEC>(beta + i);
        float y[VEC];
#pragma unroll
        for (int j = 0; j < VEC; j++)
          y[j] = (fi_to_float(x.v[j]) - mean) * (rstd * fi_to_float(g.v[j])) + fi_to_float(b.v[j]);
        fi_store<T, VEC>(out + i, norm_round<T, VEC>(y));
      }
    }
  }
}

}  // namespace fi
