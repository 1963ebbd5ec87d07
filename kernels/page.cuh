// page.cuh: the paged KV cache append (new tokens' K and V copied, or quantized to fp8,
// into their page slots) and the batch_indices/positions of appended tokens.
#pragma once
#include "fi_params.h"

namespace fi {

// One element of the cache from one of the input. A 16-bit cache has the
// input's dtype and scale 1 (the host refuses anything else): a bit copy.
// An fp8 cache stores x / scale, as x * (1 / scale) with the reciprocal
// rounded to float once on the host, so a host reference can reproduce it.
template <typename TC, typename TI>
struct page_cvt {
  static FI_DEVICE TC run(TI x, float inv) { return fi_from_float<TC>(fi_to_float(x) * inv); }
};
template <typename T>
struct page_cvt<T, T> {
  static FI_DEVICE T run(T x, float) { return x; }
};

// TI: input dtype; TC: cache dtype; LAYOUT: 0 NHD (the cache tensor's
// dimension 1 is the slot, 2 the head), 1 HND (1 the head, 2 the slot); VEC:
// elements per access (divides head_dim and every stride); THREADS: block size.
//
// The work is nnz * heads rows of head_dim elements, walked as vectors like
// act_and_mul: a block takes tiles of THREADS * CHUNKS vectors (consecutive
// threads, consecutive addresses of one row or the next), the grid strides
// by gridDim.x tiles (the host launches a block per tile for 16-bit caches,
// so most threads take one step), and every chunk keeps its (row, col) and
// adds the stride to it. A thread issues the K and V loads of all its
// chunks, then reads each token's batch index, position and page: every
// thread of the row reads the same words, one transaction a warp (L1
// broadcast) rather than a shuffle, so rows need not align with warps.
// 2 * CHUNKS data loads in flight; 16-byte accesses take 1 chunk into a 16-bit
// cache and 2 into an fp8 one (resident blocks), narrower ones more, to keep ~32
// bytes of input a thread in flight.
template <typename TI, typename TC, int LAYOUT, int VEC, int THREADS>
FI_DEVICE void append_paged_kv(const fi_append_paged_kv_params &p) {
  constexpr int ACCESS = VEC * (int)sizeof(TI);
  // 16-byte accesses into a 16-bit cache: one vector of K and V a thread on a
  // block per tile (ahead of two in lab/membench: docs/ops.md, figures from comments).
  constexpr int CHUNKS = ACCESS >= 16 ? (sizeof(TC) == sizeof(TI) ? 1 : 2)
                                      : 32 / ACCESS > 16 ? 16 : 32 / ACCESS;
  constexpr uint32_t TILE = (uint32_t)THREADS * CHUNKS;
  const uint32_t nv = (uint32_t)p.head_dim / VEC;
  const uint32_t rows = (uint32_t)p.nnz * (uint32_t)p.heads;
  const uint32_t heads = (uint32_t)p.heads;
  const uint32_t page_size = (uint32_t)p.page_size;
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
  const TI *ak = static_cast<const TI *>(p.append_k);
  const TI *av = static_cast<const TI *>(p.append_v);
  TC *kc = static_cast<TC *>(p.k_cache);
  TC *vc = static_cast<TC *>(p.v_cache);
  const int64_t slot_s_k = LAYOUT == 0 ? p.kc_stride[1] : p.kc_stride[2];
  const int64_t head_s_k = LAYOUT == 0 ? p.kc_stride[2] : p.kc_stride[1];
  const int64_t slot_s_v = LAYOUT == 0 ? p.vc_stride[1] : p.vc_stride[2];
  const int64_t head_s_v = LAYOUT == 0 ? p.vc_stride[2] : p.vc_stride[1];
  // Rows fit 31 bits, so row + step_rows + 1 cannot wrap.
  while (row[0] < rows) {
    fi_vec<TI, VEC> k[CHUNKS], v[CHUNKS];
    uint32_t tok[CHUNKS], head[CHUNKS];
    // Every chunk's data loads first, then each chunk's page lookup and
    // stores (the lookups no longer sit between one chunk's loads and the
    // next's).
#pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
      tok[c] = row[c] / heads;
      head[c] = row[c] % heads;
      if (row[c] < rows) {
        const int64_t e = (int64_t)col[c] * VEC;
        k[c] = fi_load_stream<TI, VEC>(ak + (int64_t)tok[c] * p.ak_stride[0] +
                                       (int64_t)head[c] * p.ak_stride[1] + e);
        v[c] = fi_load_stream<TI, VEC>(av + (int64_t)tok[c] * p.av_stride[0] +
                                       (int64_t)head[c] * p.av_stride[1] + e);
      }
    }
#pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
      if (row[c] < rows) {
        const uint32_t t = tok[c], h = head[c];
        const int64_t e = (int64_t)col[c] * VEC;
        const int32_t b = p.batch_indices[(int64_t)t * p.bi_stride];
        const uint32_t pos = (uint32_t)p.positions[(int64_t)t * p.pos_stride];
        const int32_t page = p.kv_indices[(int64_t)(p.kv_indptr[(int64_t)b * p.indptr_stride] +
                                                    (int32_t)(pos / page_size)) *
                                          p.indices_stride];
        const uint32_t slot = pos % page_size;
        const int64_t kdst =
            (int64_t)page * p.kc_stride[0] + (int64_t)slot * slot_s_k + (int64_t)h * head_s_k + e;
        const int64_t vdst =
            (int64_t)page * p.vc_stride[0] + (int64_t)slot * slot_s_v + (int64_t)h * head_s_v + e;
        fi_vec<TC, VEC> ko, vo;
#pragma unroll
        for (int i = 0; i < VEC; i++) {
          ko.v[i] = page_cvt<TC, TI>::run(k[c].v[i], p.k_inv_scale);
          vo.v[i] = page_cvt<TC, TI>::run(v[c].v[i], p.v_inv_scale);
        }
        // Evict-first: plain stores (kept in L2 for a decode step that
        // reads the cache right after) measured slower at 8192 tokens
        // (docs/ops.md, 2026-11-30, issue 5's memory-bound ops again);
        // evict-first lines still sit in L2 until
        // something needs the room, so a small decode append keeps them.
        fi_store_stream<TC, VEC>(kc + kdst, ko);
        fi_store_stream<TC, VEC>(vc + vdst, vo);
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

// One thread per appended token, grid-strided: the request is the last b
// with append_indptr[b] <= i (a binary search over B + 1 entries, so empty
// requests, whose indptr repeats, are skipped), the position counts from
// the request's length before the append.
template <int THREADS>
FI_DEVICE void batch_indices_positions(const fi_batch_indices_positions_params &p) {
  const int32_t *ip = p.append_indptr;
  const int64_t is = p.indptr_stride;
  for (uint32_t i = blockIdx.x * (uint32_t)THREADS + threadIdx.x; i < (uint32_t)p.nnz;
       i += gridDim.x * (uint32_t)THREADS) {
    int32_t lo = 0, hi = p.batch;  // answer in [lo, hi): ip[lo] <= i < ip[hi]
    while (hi - lo > 1) {
      const int32_t mid = lo + (hi - lo) / 2;
      if ((uint32_t)ip[(int64_t)mid * is] <= i)
        lo = mid;
      else
        hi = mid;
    }
    const int32_t start = ip[(int64_t)lo * is], end = ip[(int64_t)(lo + 1) * is];
    p.batch_indices[(int64_t)i * p.bi_stride] = lo;
    p.positions[(int64_t)i * p.pos_stride] =
        p.seq_lens[(int64_t)lo * p.seq_lens_stride] - (end - start) + ((int32_t)i - start);
  }
}

}  // namespace fi
