// decode_enter.cuh: the decode kernels' entry under programmatic dependent launch: the
// wait for the previous grid in the stream, and the L2 prefetch of the item's first tokens
// that warps 1.. make while warp 0 waits.
#pragma once
#include "decode_params.h"
#include "mma.cuh"

namespace fi {
namespace dec {

// Warps 1.. of a block before the PDL wait (decode_enter): up to `want` tokens of the item
// from lo, in at most two rounds of two tokens a thread, each only while the previous
// grid still runs (*go unset): with no early start (a previous kernel that does not
// trigger, or one already done) warp 0's wait returns at once and a round would only hold
// the block up at B <= 4 (H100) when round 0 was unconditional (docs/decode.md,
// twenty-eighth session). Unrolled and
// loop-free on purpose: a loop here, or any spin or sleep before it, made ptxas spill in
// the capped kernel's main loop.
template <typename KVT, int DE, int SINGLE, int WARPS>
FI_DEVICE void pre_wait_prefetch(const KVT *kh, const KVT *vh, const fi_decode_params &p, int want,
                                 volatile int *go) {
  int lo = p.single_lo, hi = p.kv_len;
  int64_t page_base = 0;
  if (SINGLE) {  // chunk blockIdx.x (decode_heads' work item)
    lo += (int)blockIdx.x * p.single_chunk;
    if ((int)blockIdx.x < p.num_items - 1) hi = lo + p.single_chunk;
  } else {
    const int item = blockIdx.x;
    if (p.num_items >= 0 ? item >= p.num_items : item >= ldcg_i32(p.header)) return;
    const int32_t *ip = p.items + FI_DECODE_ITEM_WORDS * item;
    lo = ldcg_i32(ip + 1);
    hi = ldcg_i32(ip + 2);
    page_base = ldcg_i32(ip + 4);
  }
  if (lo < 0) return;
  const int end = hi - lo > want ? lo + want : hi;
  constexpr uint32_t ROW = DE * sizeof(KVT);
  constexpr int U = 2, NT = (WARPS - 1) * 32;  // U: tokens a thread a round; NT: the threads
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int t = lo + (int)threadIdx.x - 32 + r * U * NT;
    if (t >= end || *go) break;
    int64_t off[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int tok = t + u * NT;
      off[u] = -1;
      if (tok >= end) continue;
      if (SINGLE) {
        off[u] = (int64_t)tok * p.kv_stride_slot;
      } else {
        const int pl = tok / p.page_size;
        const int64_t at = page_base + pl;
        if (at < 0 || at >= p.nnz) continue;
        const int32_t page = ldcg_i32(p.indices + at);
        if (page >= 0 && page < p.num_pages)
          off[u] = (int64_t)page * p.kv_stride_page + (int64_t)(tok - pl * p.page_size) * p.kv_stride_slot;
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++)
      if (off[u] >= 0) {
        prefetch_l2(kh + off[u], ROW, false);
        prefetch_l2(vh + off[u], ROW, false);
      }
  }
}

// The kernel's entry (in place of fi_pdl_enter). The runtime launches decode with
// programmatic dependent launch, so a block may start while the previous grid in the
// stream is still finishing; with p.pre_prefetch > 0 its warps 1.. spend that time moving
// the item's first tokens into L2 while warp 0 waits for the previous grid. What is read
// before the wait (item and page tables) only forms prefetch addresses: it is read at L2
// (.cg: no stale L1 line is left for the real reads), and every index is clamped into the
// tables and the cache (num_pages, nnz), so a table the previous grid is still writing
// costs at most a wasted prefetch. L2 is the point of coherence: a prefetched line that
// the previous grid writes afterwards is updated there. EN: the kernel takes it (not the
// 2-warp one-buffer kernel, where it made ptxas spill in the main loop).
template <typename KVT, int DE, int SINGLE, int WARPS, bool EN>
FI_DEVICE void decode_enter(const fi_decode_params &p, int hkv) {
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (EN && WARPS > 1) {
    __shared__ volatile int s_go;
    const bool pre = p.pre_prefetch > 0;
    if (pre) {
      if (threadIdx.x == 0) s_go = 0;
      __syncthreads();
      if (threadIdx.x >= 32 && !s_go)
        pre_wait_prefetch<KVT, DE, SINGLE, WARPS>(
            static_cast<const KVT *>(p.k) + (int64_t)FI_DECODE_KV_HEAD(p, hkv) * p.kv_stride_head,
            static_cast<const KVT *>(p.v) + (int64_t)FI_DECODE_KV_HEAD(p, hkv) * p.kv_stride_head, p, p.pre_prefetch,
            &s_go);
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (pre && threadIdx.x == 0) s_go = 1;
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    return;
  }
#endif
  (void)p;
  (void)hkv;
  fi_pdl_enter();
}

}  // namespace dec
}  // namespace fi
