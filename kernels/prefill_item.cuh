// prefill_item.cuh: a prefill block's work item (its packed q rows, KV range, split chunk
// and output rows), from the plan's table or, for one request, from the block's q tile;
// shared by the mma.sync (prefill.cuh) and wgmma (prefill_wgmma.cuh) kernels.
#pragma once
#include "prefill_params.h"

namespace fi {
namespace pf {

struct work_item {
  int r0, rows;          // packed rows r0 .. r0 + rows - 1 of the request
  int kv_lo, kv_hi;      // the KV tokens the rows attend (the chunk's, when split)
  int Lq, Lkv;           // the request's query and KV lengths
  int chunk, nchunks;    // this chunk and the tile's count (1: not split)
  int slot;              // partial slot of chunk 0 (split tiles)
  int mask_off;          // the request's custom-mask segment (byte offset)
  int64_t q_start;       // the request's first query token
  int64_t kv_base;       // its first KV token (ragged) or page (paged)
};

// Block `item`'s work; false when the block has none (CUDA-graph mode: a grid for the
// largest plan). SINGLE: one request, item = q tile of QT rows, its causal / window range.
template <int SINGLE>
FI_DEVICE bool load_item(const fi_prefill_kparams &p, int item, int QT, work_item &w) {
  const int G = p.group;
  w.chunk = 0;
  w.nchunks = 1;
  w.slot = 0;
  w.mask_off = 0;
  w.q_start = 0;
  w.kv_base = 0;
  if (SINGLE) {
    w.Lq = p.q_len;
    w.Lkv = p.kv_len;
    w.r0 = item * QT;
    w.rows = w.Lq * G - w.r0 < QT ? w.Lq * G - w.r0 : QT;
    const int off = w.Lkv - w.Lq, tq0 = w.r0 / G, tq1 = (w.r0 + w.rows - 1) / G;
    w.kv_lo = p.window_left >= 0 && tq0 + off - p.window_left > 0 ? tq0 + off - p.window_left : 0;
    w.kv_hi = p.causal && tq1 + off + 1 < w.Lkv ? tq1 + off + 1 : w.Lkv;
    if (w.kv_hi < w.kv_lo) w.kv_hi = w.kv_lo;
    return true;
  }
  const int n = p.num_items >= 0 ? p.num_items : p.header[0];
  if (item >= n) return false;
  const int32_t *ip = p.items + FI_PREFILL_ITEM_WORDS * item;
  const fi_vec<int32_t, 4> a = *reinterpret_cast<const fi_vec<int32_t, 4> *>(ip);
  const fi_vec<int32_t, 4> b = *reinterpret_cast<const fi_vec<int32_t, 4> *>(ip + 4);
  const fi_vec<int32_t, 4> c = *reinterpret_cast<const fi_vec<int32_t, 4> *>(ip + 8);
  w.r0 = a.v[1];
  w.rows = a.v[2];
  w.kv_lo = a.v[3];
  w.kv_hi = b.v[0];
  w.chunk = b.v[1] & 0xffff;
  w.nchunks = b.v[1] >> 16;
  w.q_start = b.v[2];
  w.Lq = b.v[3];
  w.kv_base = c.v[0];
  w.Lkv = c.v[1];
  w.slot = c.v[2];
  w.mask_off = c.v[3];
  return true;
}

}  // namespace pf
}  // namespace fi
