// moe_sort.cuh: the routes of a mixture-of-experts layer (expanded index x = token * top_k + k)
// sorted by local expert into tiles of tile_size rows, as the grouped GEMM reads them. The
// routes are cut into p.blocks chunks of p.chunk routes (moe_params.h), a block a chunk:
//   count (only when p.blocks > 1): each block counts its chunk's routes per local expert
//          into the workspace;
//   place: each block sums the earlier blocks' counts and all blocks' counts per expert
//          (read from the workspace; a lone block counts its own), scans the experts' tile
//          counts, writes its share of the tile tables and padding rows, and gives its
//          routes their rows in expanded-index order within an expert (a stable sort: the
//          tables are a pure function of the routing). Each warp takes a contiguous part of
//          the chunk: its count per expert, the warps' prefix, then a second walk that ranks
//          the warp's lanes of one expert (match) after the warp's earlier ones.
// So one launch when the routes fit one chunk (decode), two otherwise; no global atomics, no
// flag the caller must clear, nothing in the workspace read before this call writes it.
// Every entry of every output is written: a tile past the used ones has expert -1 and no
// live rows, a padding row holds -1, a route to no local expert gets row -1.
#pragma once
#include "moe_params.h"
#include "moe_warp.cuh"

namespace fi {
namespace moe {

constexpr int SORT_THREADS = 1024;
constexpr int SORT_WARPS = SORT_THREADS / FI_WARP;

// The local expert of route x, or -1.
FI_DEVICE int local_of(const fi_moe_sort_params_k &p, int64_t x) {
  const int e = p.ids[x] - p.expert_offset;
  return e >= 0 && e < p.local_experts ? e : -1;
}

// Adds route expert e (-1: none) of this lane to cnt, every lane of the warp calling. On CUDA
// one shared add per distinct expert of the warp (a hot expert would serialize 32 adds).
FI_DEVICE void count_route(int *cnt, int e, int lane) {
#if FI_CUDA
  const unsigned long long peers = peers_of(e);
  if (e >= 0 && (peers & ((1ull << lane) - 1ull)) == 0ull) atomicAdd(&cnt[e], __popcll(peers));
#else
  (void)lane;
  if (e >= 0) atomicAdd(&cnt[e], 1);
#endif
}

// This block's routes: [*first, *end).
FI_DEVICE void sort_chunk(const fi_moe_sort_params_k &p, int64_t *first, int64_t *end) {
  *first = (int64_t)blockIdx.x * p.chunk;
  const int64_t e = *first + p.chunk;
  *end = e < p.routes ? e : (int64_t)p.routes;
}

FI_DEVICE void sort_count(const fi_moe_sort_params_k &p) {
  __shared__ int cnt[FI_MOE_SORT_MAX_EXPERTS];
  const int L = p.local_experts, lane = threadIdx.x % FI_WARP, w = threadIdx.x / FI_WARP;
  for (int e = threadIdx.x; e < L; e += SORT_THREADS) cnt[e] = 0;
  __syncthreads();
  int64_t first, end;
  sort_chunk(p, &first, &end);
  for (int64_t x0 = first + (int64_t)w * FI_WARP; x0 < end; x0 += SORT_THREADS) {
    const int64_t x = x0 + lane;
    count_route(cnt, x < end ? local_of(p, x) : -1, lane);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < L; e += SORT_THREADS) p.counts[(int64_t)blockIdx.x * L + e] = cnt[e];
}

FI_DEVICE void sort_place(const fi_moe_sort_params_k &p) {
  __shared__ int wrow[SORT_WARPS][FI_MOE_SORT_MAX_EXPERTS];  // each warp's count, then its next row past the block's first
  __shared__ int first_row[FI_MOE_SORT_MAX_EXPERTS];         // earlier blocks' routes, then the block's first row, per expert
  __shared__ int total[FI_MOE_SORT_MAX_EXPERTS];             // the expert's routes
  __shared__ int tile_start[FI_MOE_SORT_MAX_EXPERTS + 1];    // the expert's first tile; [L] the tiles used
  const int L = p.local_experts, T = p.tile_size, nb = p.blocks, b = blockIdx.x;
  const int tid = threadIdx.x, lane = tid % FI_WARP, w = tid / FI_WARP;
  for (int i = tid; i < SORT_WARPS * L; i += SORT_THREADS) wrow[i / L][i % L] = 0;
  for (int e = tid; e < L; e += SORT_THREADS) first_row[e] = 0, total[e] = 0;
  __syncthreads();

  // The count kernel's counts: Q threads an expert sum every Q-th block's, then add them up
  // (integer sums: the order does not matter).
  if (nb > 1) {
    const int Q = SORT_THREADS / L, e = tid % L, q = tid / L;
    if (q < Q) {
      int all = 0, before = 0;
      for (int bb = q; bb < nb; bb += Q) {
        const int n = p.counts[(int64_t)bb * L + e];
        all += n;
        before += bb < b ? n : 0;
      }
      atomicAdd(&total[e], all);
      atomicAdd(&first_row[e], before);
    }
  }

  // Each warp's part of the chunk: its count per expert.
  int64_t first, end;
  sort_chunk(p, &first, &end);
  const int seg = p.chunk / SORT_WARPS;  // a multiple of the warp (p.chunk: of SORT_THREADS)
  const int64_t s0 = first + (int64_t)w * seg, s1e = s0 + seg, s1 = s1e < end ? s1e : end;
  for (int64_t x0 = s0; x0 < s1; x0 += FI_WARP) {
    const int64_t x = x0 + lane;
    count_route(wrow[w], x < s1 ? local_of(p, x) : -1, lane);
  }
  __syncthreads();

  // Per expert, the warps' exclusive prefix; a lone block's total is its own count.
  for (int e = tid; e < L; e += SORT_THREADS) {
    int s = 0;
    for (int k = 0; k < SORT_WARPS; k++) {
      const int n = wrow[k][e];
      wrow[k][e] = s;
      s += n;
    }
    if (nb == 1) total[e] = s;
  }
  __syncthreads();

  // The experts' first tiles: warp 0 scans the tile counts, a run of experts a lane.
  if (w == 0) {
    const int per = (L + FI_WARP - 1) / FI_WARP, e0 = lane * per;
    int mine = 0;
    for (int e = e0; e < e0 + per && e < L; e++) mine += (total[e] + T - 1) / T;
    int inc = mine;
#pragma unroll
    for (int o = 1; o < FI_WARP; o <<= 1) {
      const int y = shfl(inc, lane >= o ? lane - o : lane);
      if (lane >= o) inc += y;
    }
    int t = inc - mine;
    for (int e = e0; e < e0 + per && e < L; e++) {
      tile_start[e] = t;
      t += (total[e] + T - 1) / T;
    }
    if (lane == FI_WARP - 1) tile_start[L] = inc;
  }
  __syncthreads();
  for (int e = tid; e < L; e += SORT_THREADS) first_row[e] += tile_start[e] * T;
  const int used = tile_start[L];
  if (b == 0 && tid == 0) {
    *p.num_tiles = used;
    *p.total_padded = used * T;
  }

  // The tile tables, spread over the blocks: a tile's expert by a binary search over the
  // first tiles (the last expert whose first tile is <= t).
  for (int64_t t = (int64_t)b * SORT_THREADS + tid; t < p.max_tiles; t += (int64_t)nb * SORT_THREADS) {
    if (t >= used) {
      p.tile_expert[t] = -1;
      p.tile_mn_limit[t] = (int)(t * T);
      continue;
    }
    int lo = 0, hi = L - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (tile_start[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    const int64_t end_row = (int64_t)tile_start[lo] * T + total[lo];
    p.tile_expert[t] = lo;
    p.tile_mn_limit[t] = (int)((t + 1) * T < end_row ? (t + 1) * T : end_row);
  }
  // Padding rows: an expert's past its live rows (fewer than a tile: a warp an expert,
  // spread over the blocks), then every row of the unused tiles.
  for (int e = b * SORT_WARPS + w; e < L; e += nb * SORT_WARPS) {
    const int64_t r1 = (int64_t)tile_start[e + 1] * T;
    for (int64_t r = (int64_t)tile_start[e] * T + total[e] + lane; r < r1; r += FI_WARP) p.p2e[r] = -1;
  }
  const int64_t rows = (int64_t)p.max_tiles * T;
  for (int64_t r = (int64_t)used * T + (int64_t)b * SORT_THREADS + tid; r < rows; r += (int64_t)nb * SORT_THREADS)
    p.p2e[r] = -1;
  __syncthreads();  // first_row complete

  // The warp's routes again, in order: a route's row is its expert's first row in this
  // block, plus the earlier warps' routes of it, the warp's earlier steps' and the lower
  // lanes' of this step (the step's lowest lane of the expert reads and advances the count).
  for (int64_t x0 = s0; x0 < s1; x0 += FI_WARP) {
    const int64_t x = x0 + lane;
    const int e = x < s1 ? local_of(p, x) : -1;
    const unsigned long long peers = peers_of(e);
    const int rank = __popcll(peers & ((1ull << lane) - 1ull));
    const int lowest = __popcll((peers & (0ull - peers)) - 1ull);
    const bool lead = e >= 0 && rank == 0;
    const int before = shfl(lead ? wrow[w][e] : 0, lowest);
    if (x < s1) {
      if (e < 0) {
        p.e2p[x] = -1;
      } else {
        const int row = first_row[e] + before + rank;
        p.e2p[x] = row;
        p.p2e[row] = (int)x;
      }
    }
    if (lead) wrow[w][e] = before + __popcll(peers);
    warp_sync();
  }
}

// PHASE: 0 count, 1 place.
template <int PHASE>
FI_DEVICE void sort(const fi_moe_sort_params_k &p) {
  if (PHASE == 0) sort_count(p);
  else sort_place(p);
}

}  // namespace moe
}  // namespace fi
