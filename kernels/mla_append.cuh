// mla_append.cuh: the MLA cache append (fi_append_paged_mla_kv_cache): new tokens' ckv and
// kpe rows copied into their page slots, 16 bytes a thread (mla_params.h).
#pragma once
#include "mla_params.h"

namespace fi {

// T: the 16-bit element type (input and cache alike); THREADS: block size.
template <typename T, int THREADS>
FI_DEVICE void append_paged_mla(const fi_append_mla_params &p) {
  constexpr int VC = FI_MLA_DCKV / 8, VT = (FI_MLA_DCKV + FI_MLA_DKPE) / 8;  // 16-byte vectors
  const int64_t v = (int64_t)blockIdx.x * THREADS + threadIdx.x;
  if (v >= (int64_t)p.nnz * VT) return;
  const int64_t t = v / VT;
  const int c = (int)(v - t * VT);
  const T *src = c < VC ? static_cast<const T *>(p.append_ckv) + t * p.ackv_stride + 8 * c
                        : static_cast<const T *>(p.append_kpe) + t * p.akpe_stride + 8 * (c - VC);
  const fi_vec<T, 8> x = fi_load_stream<T, 8>(src);
  const int32_t b = p.batch_indices[t * p.bi_stride];
  const uint32_t pos = (uint32_t)p.positions[t * p.pos_stride], ps = (uint32_t)p.page_size;
  const int64_t page = p.kv_indices[(int64_t)(p.kv_indptr[(int64_t)b * p.indptr_stride] + (int32_t)(pos / ps)) *
                                    p.indices_stride];
  const int64_t slot = pos % ps;
  T *dst = c < VC ? static_cast<T *>(p.ckv_cache) + page * p.ckv_stride_page + slot * p.ckv_stride_slot + 8 * c
                  : static_cast<T *>(p.kpe_cache) + page * p.kpe_stride_page + slot * p.kpe_stride_slot + 8 * (c - VC);
  *reinterpret_cast<fi_vec<T, 8> *>(dst) = x;
}

}  // namespace fi
