// layernorm.cuh: LayerNorm over rows, (x - mean) / sqrt(var + eps) * gamma + beta, built
// like rmsnorm.cuh (persistent grid, rows in registers, block size chosen at launch);
// mean and variance come from one pass over the registers and one block reduction.
#pragma once
#include "rmsnorm.cuh"

namespace fi {

// Sums each of v[0..N) over the block, all with one barrier; every thread
// gets the totals. scratch holds N * FI_NORM_MAX_THREADS / FI_WARP floats.
template <int N>
FI_DEVICE void norm_block_sumn(float (&v)[N], float *scratch) {
  constexpr int NW = FI_NORM_MAX_THREADS / FI_WARP;
#pragma unroll
  for (int n = 0; n < N; n++) v[n] = fi_warp_sum<FI_WARP>(v[n]);
  const int warps = (int)blockDim.x / FI_WARP;
  if (warps == 1) return;
  const int lane = threadIdx.x % FI_WARP, warp = threadIdx.x / FI_WARP;
  if (lane == 0) {
#pragma unroll
    for (int n = 0; n < N; n++) scratch[n * NW + warp] = v[n];
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < N; n++) v[n] = fi_warp_sum<FI_WARP>(lane < warps ? scratch[n * NW + lane] : 0.0f);
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

// The rows' moments: sums of d = x - k and of d^2, k being the row's first
// element (read by every thread), so that the sums hold deviations of the
// size of the spread, not of the mean, and s2/n - (s1/n)^2 does not cancel
// the way a plain sum of squares minus a squared sum would for rows far
// from zero mean. Gives each row's mean and 1/sqrt(var + eps); R rows share
// one block reduction (one barrier).
template <int R>
FI_DEVICE void norm_moments(const float (&s1)[R], const float (&s2)[R], const float (&k)[R],
                            float inv_h, float eps, float *scratch, float (&mean)[R],
                            float (&rstd)[R]) {
  float v[2 * R];
#pragma unroll
  for (int r = 0; r < R; r++) v[2 * r] = s1[r], v[2 * r + 1] = s2[r];
  norm_block_sumn<2 * R>(v, scratch);
#pragma unroll
  for (int r = 0; r < R; r++) {
    const float md = v[2 * r] * inv_h;
    const float var = fmaxf(v[2 * r + 1] * inv_h - md * md, 0.0f);
    mean[r] = k[r] + md;
    rstd[r] = rsqrtf(var + eps);
  }
}

// T: element type; G: gamma and beta (T or float); VEC: elements per access;
// CHUNKS: vectors per thread in registers (0: two passes, any length); WREG:
// gamma and beta kept in registers; HINT: streaming hints on rows; ROWS: rows
// per block iteration with CHUNKS (1 or 2; two passes take 1).
template <typename T, typename G, int VEC, int CHUNKS, int WREG, int HINT, int ROWS = 1>
FI_DEVICE void layernorm(const fi_norm_params &p) {
  constexpr int NW = FI_NORM_MAX_THREADS / FI_WARP;
  static_assert(ROWS == 1 || (ROWS == 2 && CHUNKS > 0), "ROWS: 1, or 2 with CHUNKS");
  // Alternating by iteration, as in rmsnorm: a warp running ahead must not
  // overwrite entries another warp is still reading.
  __shared__ float scratch[2][2 * ROWS * NW];
  const int nthr = (int)blockDim.x;
  const int hidden = p.hidden;
  const int tid = threadIdx.x;
  const T *in0 = static_cast<const T *>(p.input);
  const G *gamma = static_cast<const G *>(p.weight);
  const G *beta = static_cast<const G *>(p.bias);
  const float inv_h = 1.0f / (float)hidden;
  int parity = 0;

  if constexpr (CHUNKS > 0) {
    // Unlike rmsnorm, no prefetch of the next row: a layernorm row takes
    // about twice the arithmetic, and at 8192 x 8192 bf16 more, smaller
    // blocks without it (4 vectors a thread, 256 threads, 5 blocks an SM)
    // measured 87% of copy against 72% for 512 x 2 prefetching ones.
    // ROWS 2 instead loads rows r and r + gridDim.x together before any
    // arithmetic (twice the bytes in flight, no longer a latency chain) and
    // reduces both with one barrier: more bytes per block reduction, as in
    // fused_add_rmsnorm (93.5% of copy).
    constexpr int C = CHUNKS, R = ROWS;
    fi_vec<G, VEC> gv[WREG ? C : 1], bv[WREG ? C : 1];
    fi_vec<T, VEC> x[R][C];
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
    for (int64_t row0 = blockIdx.x; row0 < p.rows; row0 += (int64_t)R * gridDim.x) {
      // Row r of the pair: row0 + r * gridDim.x; the second may be past the
      // end (then its sums are zeros and nothing is stored).
      bool live[R];
      float k[R], s1[R], s2[R];
#pragma unroll
      for (int r = 0; r < R; r++) {
        const int64_t row = row0 + (int64_t)r * gridDim.x;
        live[r] = r == 0 || row < p.rows;
        if (live[r]) rms_load_row<HINT, T, VEC, C>(x[r], in0 + row * p.input_row_stride, nthr, tid, hidden);
      }
#pragma unroll
      for (int r = 0; r < R; r++) {
        const int64_t row = row0 + (int64_t)r * gridDim.x;
        k[r] = live[r] ? fi_to_float(in0[row * p.input_row_stride]) : 0.0f;
        s1[r] = 0.0f;
        s2[r] = 0.0f;
        if (live[r]) {
#pragma unroll
          for (int c = 0; c < C; c++)
            if ((c * nthr + tid) * VEC < hidden) {
#pragma unroll
              for (int j = 0; j < VEC; j++) {
                const float d = fi_to_float(x[r][c].v[j]) - k[r];
                s1[r] += d;
                s2[r] += d * d;
              }
            }
        }
      }
      float mean[R], rstd[R];
      norm_moments<R>(s1, s2, k, inv_h, p.eps, scratch[parity], mean, rstd);
      parity ^= 1;
      // By vector, then row: each gamma and beta vector read once for both.
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
#pragma unroll
          for (int r = 0; r < R; r++) {
            if (!live[r]) continue;
            T *out = static_cast<T *>(p.out) + (row0 + (int64_t)r * gridDim.x) * p.out_row_stride;
            float y[VEC];
#pragma unroll
            for (int j = 0; j < VEC; j++)
              y[j] = (fi_to_float(x[r][c].v[j]) - mean[r]) * (rstd[r] * fi_to_float(g.v[j])) +
                     fi_to_float(b.v[j]);
            rms_store<HINT, T, VEC>(out + i, norm_round<T, VEC>(y));
          }
        }
      }
    }
  } else {
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
      const T *in = in0 + row * p.input_row_stride;
      T *out = static_cast<T *>(p.out) + row * p.out_row_stride;
      const float k[1] = {fi_to_float(in[0])};
      float s1[1] = {0.0f}, s2[1] = {0.0f};
      for (int i = tid * VEC; i < hidden; i += nthr * VEC) {
        const fi_vec<T, VEC> x = fi_load<T, VEC>(in + i);
#pragma unroll
        for (int j = 0; j < VEC; j++) {
          const float d = fi_to_float(x.v[j]) - k[0];
          s1[0] += d;
          s2[0] += d * d;
        }
      }
      float mean[1], rstd[1];
      norm_moments<1>(s1, s2, k, inv_h, p.eps, scratch[parity], mean, rstd);
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
          y[j] = (fi_to_float(x.v[j]) - mean[0]) * (rstd[0] * fi_to_float(g.v[j])) +
                 fi_to_float(b.v[j]);
        fi_store<T, VEC>(out + i, norm_round<T, VEC>(y));
      }
    }
  }
}

}  // namespace fi
