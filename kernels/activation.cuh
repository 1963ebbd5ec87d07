// activation.cuh: gated activations, out[r, c] = act(in[r, c]) * in[r, d + c] for silu,
// gelu (erf) and gelu_tanh. A pure stream: a persistent grid walks the output as vectors.
#pragma once
#include "fi_params.h"

namespace fi {

// ACT: 0 silu, 1 gelu (erf), 2 gelu_tanh; the numbering is the key's "act" parameter.
template <int ACT>
FI_DEVICE float act_fn(float x) {
  if (ACT == 0) return __fdividef(x, 1.0f + __expf(-x));
  // erff, as PyTorch's and FlashInfer's gelu: erfcf(-x / sqrt 2) would keep
  // the relative accuracy of the far negative tail (1 + erff cancels there to
  // ~1e-7 absolute) but measured far slower on the H200 (docs/ops.md, figures
  // from comments).
  if (ACT == 1) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  // 0.5 x (1 + tanh(u)) is exactly x / (1 + exp(-2u)): one exp and a reciprocal
  // instead of tanhf. 2u = 2 sqrt(2/pi) (x + 0.044715 x^3).
  const float u2 = 1.5957691216057308f * x * (1.0f + 0.044715f * x * x);
  // __fdividef(x, inf) is 0, the limit for x -> -inf of both forms.
  return __fdividef(x, 1.0f + __expf(-u2));
}

// T: element type; VEC: elements per access (VEC divides d and both row
// strides, so a vector never crosses a row or the gate/up boundary);
// THREADS: block size; CHUNKS: output vectors per thread per step, all
// loaded before any is computed, so 2 * CHUNKS loads are in flight.
//
// The output is one sequence of rows * (d / VEC) vectors. A block takes
// tiles of THREADS * CHUNKS vectors, chunk c of a thread at tile + c *
// THREADS + tid (consecutive threads, consecutive addresses), and the grid
// strides by gridDim.x tiles. Each chunk keeps its (row, col) and adds the
// grid stride's (rows, cols) to it: one division per chunk at the start,
// none in the loop, and strided rows cost nothing extra.
template <int ACT, typename T, int VEC, int THREADS, int CHUNKS>
FI_DEVICE void act_and_mul(const fi_act_params &p) {
  const uint32_t nv = (uint32_t)p.d / VEC;  // vectors per output row
  const uint32_t rows = (uint32_t)p.rows;
  constexpr uint32_t TILE = (uint32_t)THREADS * CHUNKS;
  // The host keeps gridDim.x * TILE well inside 32 bits.
  const uint32_t step = gridDim.x * TILE;
  const uint32_t step_rows = step / nv, step_cols = step % nv;
  uint32_t row[CHUNKS], col[CHUNKS];
#pragma unroll
  for (int c = 0; c < CHUNKS; c++) {
    const uint32_t v = blockIdx.x * TILE + (uint32_t)(c * THREADS) + threadIdx.x;
    row[c] = v / nv;
    col[c] = v % nv;
  }
  const T *in = static_cast<const T *>(p.input);
  T *out = static_cast<T *>(p.out);
  const int d = p.d;
  // Chunk 0 has the smallest index of the thread's step: when it is past the
  // last row, so are the others. Rows fit 31 bits, so row + step_rows + 1 cannot wrap.
  while (row[0] < rows) {
    fi_vec<T, VEC> g[CHUNKS], u[CHUNKS];
#pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
      if (row[c] < rows) {
        const T *src = in + (int64_t)row[c] * p.input_row_stride + col[c] * VEC;
        g[c] = fi_load_stream<T, VEC>(src);
        u[c] = fi_load_stream<T, VEC>(src + d);
      }
    }
#pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
      if (row[c] < rows) {
        fi_vec<T, VEC> y;
#pragma unroll
        for (int k = 0; k < VEC; k++)
          y.v[k] = fi_from_float<T>(act_fn<ACT>(fi_to_float(g[c].v[k])) * fi_to_float(u[c].v[k]));
        fi_store_stream<T, VEC>(out + (int64_t)row[c] * p.out_row_stride + col[c] * VEC, y);
      }
    }
#pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
      col[c] += step_cols;
      row[c] += step_rows;
      if (col[c] >= nv) {
        col[c] -= nv;
        row[c]++;
      }
    }
  }
}

}  // namespace fi
