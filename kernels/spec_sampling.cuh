// spec_sampling.cuh: chain speculative sampling (Leviathan et al. 2023; Chen et al. 2023),
// FlashInfer's chain_speculative_sampling: a request's S draft tokens t_i, drawn from the
// draft model's q_i, are checked in order against the target model's p_i: t_i is accepted
// with probability min(1, p_i(t_i) / q_i(t_i)). At the first rejection j the output's j-th
// token is drawn from the residual max(p_j - q_j, 0), renormalized, and the rest are -1;
// when all S are accepted, a bonus token is drawn from p_S. Every emitted token is then
// distributed as the target model alone would have drawn it. The counters: `accepted` adds
// the positions whose test passes, each on its own (also after a rejection: how well the
// two models agree), `emitted` the draft tokens emitted (j).
//
// One block a request. Randomness: Philox4x32-10 keyed by the seed, counter (i, request,
// offset): u_i for the test at position i, u_S for the final draw. The final draw is an
// inverse CDF over the vocabulary in order, tile by tile (a block-wide prefix sum a tile, in
// a fixed order: the same bits on every run), stopping at the tile where the running mass
// passes u_S times the row's total.
#pragma once
#include "philox.cuh"
#include "reduce.cuh"
#include "sampling_params.h"

namespace fi {
namespace spec {

FI_DEVICE float uniform(const fi_spec_params &p, int b, int i) {
  const rng::u4 r = rng::philox(rng::u4{(uint32_t)i, (uint32_t)b, (uint32_t)p.offset, (uint32_t)(p.offset >> 32)},
                                (uint32_t)p.seed, (uint32_t)(p.seed >> 32));
  return (float)(r.x >> 8) * (1.0f / 16777216.0f);  // [0, 1)
}

// The final draw's weight of token v: the residual max(p - q, 0) (q given) or p itself;
// negative and NaN values count as 0.
FI_DEVICE float weight(const float *pj, const float *qj, int v) {
  float x = pj[v];
  if (qj) x -= qj[v];
  return x > 0.0f ? x : 0.0f;
}

// Inclusive prefix sum of v over the block in thread order: within 32-lane warps, then the
// warps' totals added in warp order. *total: the block's sum, the same bits in every thread
// and equal to the last thread's prefix.
template <int THREADS>
FI_DEVICE float block_scan(float v, float *wsum, float *total) {
  constexpr int NW = THREADS / 32;
  const int lane = (int)threadIdx.x & 31, w = (int)threadIdx.x >> 5;
  float x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float y = bits_to_float(red::shfl_up32(float_to_bits(x), o));
    if (lane >= o) x += y;
  }
  __syncthreads();
  if (lane == 31) wsum[w] = x;
  __syncthreads();
  float before = 0.0f, all = 0.0f;
#pragma unroll
  for (int i = 0; i < NW; i++) {
    if (i == w) before = all;
    all += wsum[i];
  }
  *total = all;
  return before + x;
}

template <int THREADS>
FI_DEVICE void chain(const fi_spec_params &p) {
  __shared__ float wsum[THREADS / 32];
  __shared__ float red_f[THREADS / FI_WARP + 1];
  __shared__ uint32_t red_i[THREADS / FI_WARP + 1];
  __shared__ int s_first, s_acc;
  const int b = (int)blockIdx.x, S = p.num_draft, V = p.vocab, tid = (int)threadIdx.x;
  if (b >= p.batch) return;
  const int32_t *ids = p.draft_ids + (int64_t)b * S;
  const float *dq = p.draft_probs + (int64_t)b * S * V;
  const float *tp = p.target_probs + (int64_t)b * (S + 1) * V;
  int32_t *out = p.out + (int64_t)b * (S + 1);

  // The tests, in order (S is small: one thread).
  if (tid == 0) {
    int first = S, acc = 0;
    for (int i = 0; i < S; i++) {
      const int t = ids[i];
      bool ok = false;
      if (t >= 0 && t < V) {  // a draft id out of the vocabulary is rejected, never read with
        const float q = dq[(int64_t)i * V + t], pt = tp[(int64_t)i * V + t];
        ok = uniform(p, b, i) * q < pt;  // u < p / q: probability min(1, p / q)
      }
      acc += ok;
      if (!ok && first == S) first = i;
    }
    s_first = first;
    s_acc = acc;
  }
  __syncthreads();
  const int j = s_first;
  for (int i = tid; i <= S; i += THREADS) {
    if (i < j) out[i] = ids[i];
    else if (i > j) out[i] = -1;
  }

  // The draw at j: from the residual after a rejection, from p_S after S acceptances; a
  // residual with no mass (p_j <= q_j everywhere, which only rounding allows) draws from p_j.
  const float *pj = tp + (int64_t)j * V;
  const float *qj = j < S ? dq + (int64_t)j * V : nullptr;
  auto add = [](float a, float c) { return a + c; };
  float s = 0.0f;
  for (int v = tid; v < V; v += THREADS) s += weight(pj, qj, v);
  float total = red::block_reduce<THREADS>(s, add, red_f);
  if (qj && !(total > 0.0f)) {
    qj = nullptr;
    s = 0.0f;
    for (int v = tid; v < V; v += THREADS) s += weight(pj, qj, v);
    total = red::block_reduce<THREADS>(s, add, red_f);
  }
  const float u = uniform(p, b, S);
  // Reductions over unsigned token numbers: NONE is none for the minimum, and `mine` holds
  // this thread's last token of positive weight plus one (0: none) for the maximum.
  constexpr uint32_t NONE = 0xffffffffu;
  auto mn = [](uint32_t a, uint32_t c) { return a < c ? a : c; };
  auto mx = [](uint32_t a, uint32_t c) { return a > c ? a : c; };
  uint32_t pick = NONE, mine = 0;
  // The search: the target u x (the row's total) against the running sum of the tiles. The
  // total above is a tree sum and the running one sums tiles in order, so rounding may leave
  // the running sum short of the target: then once more with the target u x the running
  // sum's own total, which it reaches (u < 1).
  float target = u * total;
  for (int attempt = 0; attempt < 2 && pick == NONE; attempt++) {
    float base = 0.0f;
    bool crossed = false;
    for (int t0 = 0; t0 < V; t0 += THREADS) {
      const int v = t0 + tid;
      const float x = v < V ? weight(pj, qj, v) : 0.0f;
      if (x > 0.0f) mine = (uint32_t)v + 1u;
      float tile;
      const float incl = block_scan<THREADS>(x, wsum, &tile);
      if (base + tile > target) {  // the same in every thread: the whole block stops here
        pick = red::block_reduce<THREADS>(x > 0.0f && base + incl > target ? (uint32_t)v : NONE, mn, red_i);
        crossed = true;
        break;
      }
      base += tile;
    }
    if (crossed) break;
    target = u * base;
  }
  // No candidate: a row without mass (-1), or rounding inside the crossing tile (a lane's
  // prefix sum is not monotone in the last bits): the last token of positive weight seen.
  if (pick == NONE) pick = red::block_reduce<THREADS>(mine, mx, red_i) - 1u;
  if (tid == 0) {
    out[j] = (int32_t)pick;
    if (p.accepted) p.accepted[(int64_t)b * p.accepted_stride] += s_acc;
    if (p.emitted) p.emitted[(int64_t)b * p.emitted_stride] += j;
  }
}

}  // namespace spec
}  // namespace fi
