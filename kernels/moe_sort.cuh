// moe_sort.cuh: the routes of a mixture-of-experts layer (expanded index x = token * top_k + k)
// sorted by local expert into tiles of tile_size rows, as the grouped GEMM reads them; three
// launches over the workspace (moe_params.h):
//   count:   each block counts its chunk's routes per local expert;
//   scan:    one block turns the counts into each expert's first tile and row and each
//            block's first row per expert, writes the tile tables and marks the padding rows;
//   scatter: each block gives its routes their rows, in expanded-index order within an
//            expert (a stable sort: the tables are a pure function of the routing).
// Every entry of every output is written: a tile past the used ones has expert -1 and no
// live rows, a padding row holds -1, a route to no local expert gets row -1.
#pragma once
#include "moe_params.h"

namespace fi {
namespace moe {

constexpr int SORT_THREADS = 1024;
constexpr int SORT_WARPS = SORT_THREADS / FI_WARP;

// The local expert of route x, or -1.
FI_DEVICE int local_of(const fi_moe_sort_params_k &p, int x) {
  const int e = p.ids[x] - p.expert_offset;
  return e >= 0 && e < p.local_experts ? e : -1;
}

FI_DEVICE void sort_count(const fi_moe_sort_params_k &p) {
  __shared__ int cnt[FI_MOE_SORT_MAX_EXPERTS];
  for (int e = threadIdx.x; e < p.local_experts; e += SORT_THREADS) cnt[e] = 0;
  __syncthreads();
  const int base = blockIdx.x * FI_MOE_SORT_CHUNK;
  for (int i = threadIdx.x; i < FI_MOE_SORT_CHUNK && base + i < p.routes; i += SORT_THREADS) {
    const int e = local_of(p, base + i);
    if (e >= 0) atomicAdd(&cnt[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < p.local_experts; e += SORT_THREADS)
    p.counts[(int64_t)blockIdx.x * p.local_experts + e] = cnt[e];
}

FI_DEVICE void sort_scan(const fi_moe_sort_params_k &p) {
  __shared__ int total[FI_MOE_SORT_MAX_EXPERTS], tile_start[FI_MOE_SORT_MAX_EXPERTS + 1];
  const int L = p.local_experts, T = p.tile_size;
  // Each expert's routes, and each block's first row of it relative to the expert's start.
  for (int e = threadIdx.x; e < L; e += SORT_THREADS) {
    int run = 0;
    for (int b = 0; b < p.blocks; b++) {
      int32_t *c = p.counts + (int64_t)b * L + e;
      const int n = *c;
      *c = run;
      run += n;
    }
    total[e] = run;
  }
  __syncthreads();
  // The experts' first tiles (L <= 256: one thread walks them).
  if (threadIdx.x == 0) {
    int t = 0;
    for (int e = 0; e < L; e++) {
      tile_start[e] = t;
      t += (total[e] + T - 1) / T;
    }
    tile_start[L] = t;
    *p.num_tiles = t;
    *p.total_padded = t * T;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < L; e += SORT_THREADS) {
    const int row0 = tile_start[e] * T;
    for (int b = 0; b < p.blocks; b++) p.counts[(int64_t)b * L + e] += row0;
  }
  // The tile tables: a tile's expert by a binary search over the first tiles.
  const int used = tile_start[L];
  for (int t = threadIdx.x; t < p.max_tiles; t += SORT_THREADS) {
    if (t >= used) {
      p.tile_expert[t] = -1;
      p.tile_mn_limit[t] = t * T;
      continue;
    }
    int lo = 0, hi = L - 1;  // the last expert whose first tile is <= t
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (tile_start[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    const int end = tile_start[lo] * T + total[lo];
    p.tile_expert[t] = lo;
    p.tile_mn_limit[t] = min((t + 1) * T, end);
  }
  // Padding rows: past a tile's live rows, and every row of the unused tiles.
  const int64_t rows = (int64_t)p.max_tiles * T;
  for (int64_t r = threadIdx.x; r < rows; r += SORT_THREADS) {
    const int t = (int)(r / T);
    bool pad = t >= used;
    if (!pad) {
      int lo = 0, hi = L - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (tile_start[mid] <= t) lo = mid;
        else hi = mid - 1;
      }
      pad = r >= (int64_t)tile_start[lo] * T + total[lo];
    }
    if (pad) p.p2e[r] = -1;
  }
}

// The lanes of this warp whose value equals v (v uniform across the peers it returns).
FI_DEVICE unsigned long long peers_of(int v, int lane) {
#if FI_CUDA
  (void)lane;
  return __match_any_sync(0xffffffffu, v);
#else
  unsigned long long m = 0;
  for (int j = 0; j < FI_WARP; j++)
    if (__shfl(v, j, FI_WARP) == v) m |= 1ull << j;
  (void)lane;
  return m;
#endif
}

FI_DEVICE void sort_scatter(const fi_moe_sort_params_k &p) {
  __shared__ int warp_cnt[SORT_WARPS][FI_MOE_SORT_MAX_EXPERTS];  // this round's, then the warps' prefix
  __shared__ int run[FI_MOE_SORT_MAX_EXPERTS];                   // rows handed out in earlier rounds
  const int L = p.local_experts, lane = threadIdx.x % FI_WARP, w = threadIdx.x / FI_WARP;
  const int32_t *base = p.counts + (int64_t)blockIdx.x * L;
  for (int e = threadIdx.x; e < L; e += SORT_THREADS) run[e] = 0;
  for (int r = 0; r < FI_MOE_SORT_CHUNK / SORT_THREADS; r++) {
    for (int i = threadIdx.x; i < SORT_WARPS * L; i += SORT_THREADS) (&warp_cnt[0][0])[(i / L) * FI_MOE_SORT_MAX_EXPERTS + i % L] = 0;
    __syncthreads();
    const int x = blockIdx.x * FI_MOE_SORT_CHUNK + r * SORT_THREADS + threadIdx.x;
    const int e = x < p.routes ? local_of(p, x) : -1;
    // Rank among this warp's routes of the same expert; the lowest such lane counts them.
    const unsigned long long peers = peers_of(e, lane);
    const unsigned long long below = lane ? (peers & ((1ull << lane) - 1)) : 0ull;
    const int rank = __popcll(below);
    if (e >= 0 && rank == 0) warp_cnt[w][e] = __popcll(peers);
    __syncthreads();
    // Per expert: the warps' exclusive prefix, then the round's total onto run.
    for (int ee = threadIdx.x; ee < L; ee += SORT_THREADS) {
      int s = run[ee];
      for (int k = 0; k < SORT_WARPS; k++) {
        const int n = warp_cnt[k][ee];
        warp_cnt[k][ee] = s;
        s += n;
      }
      run[ee] = s;
    }
    __syncthreads();
    if (x < p.routes) {
      if (e < 0) {
        p.e2p[x] = -1;
      } else {
        const int row = base[e] + warp_cnt[w][e] + rank;
        p.e2p[x] = row;
        p.p2e[row] = x;
      }
    }
    __syncthreads();
  }
}

// PHASE: 0 count, 1 scan, 2 scatter.
template <int PHASE>
FI_DEVICE void sort(const fi_moe_sort_params_k &p) {
  if (PHASE == 0) sort_count(p);
  else if (PHASE == 1) sort_scan(p);
  else sort_scatter(p);
}

}  // namespace moe
}  // namespace fi
