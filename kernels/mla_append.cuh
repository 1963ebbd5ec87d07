// mla_append.cuh: the MLA cache append (fi_append_paged_mla_kv_cache): new tokens' ckv and
// kpe rows copied into their page slots (mla_params.h). A token row is 72 vectors of 16
// bytes (64 of ckv, 8 of kpe); a thread moves VPT consecutive ones of one row: their loads
// first, then the row's page lookup once (batch index, indptr, page id: three dependent
// reads a thread instead of a vector), then the stores.
#pragma once
#include "mla_params.h"

namespace fi {

// T: the 16-bit element type (input and cache alike); THREADS: block size.
template <typename T, int THREADS>
FI_DEVICE void append_paged_mla(const fi_append_mla_params &p) {
  constexpr int VC = FI_MLA_DCKV / 8, VT = (FI_MLA_DCKV + FI_MLA_DKPE) / 8, VPT = 4, TPR = VT / VPT;
  static_assert(VT % VPT == 0 && VC % VPT == 0, "a thread's vectors lie in one of ckv and kpe");
  const int64_t u = (int64_t)blockIdx.x * THREADS + threadIdx.x;
  if (u >= (int64_t)p.nnz * TPR) return;
  const int64_t t = u / TPR;
  const int c0 = (int)(u - t * TPR) * VPT;  // the thread's first vector in the row
  const bool lat = c0 < VC;
  const T *src = lat ? static_cast<const T *>(p.append_ckv) + t * p.ackv_stride + 8 * c0
                     : static_cast<const T *>(p.append_kpe) + t * p.akpe_stride + 8 * (c0 - VC);
  fi_vec<T, 8> x[VPT];
#pragma unroll
  for (int v = 0; v < VPT; v++) x[v] = fi_load_stream<T, 8>(src + 8 * v);
  const int32_t b = p.batch_indices[t * p.bi_stride];
  const uint32_t pos = (uint32_t)p.positions[t * p.pos_stride], ps = (uint32_t)p.page_size;
  const int64_t page = p.kv_indices[(int64_t)(p.kv_indptr[(int64_t)b * p.indptr_stride] + (int32_t)(pos / ps)) *
                                    p.indices_stride];
  const int64_t slot = pos % ps;
  T *dst = lat ? static_cast<T *>(p.ckv_cache) + page * p.ckv_stride_page + slot * p.ckv_stride_slot + 8 * c0
               : static_cast<T *>(p.kpe_cache) + page * p.kpe_stride_page + slot * p.kpe_stride_slot + 8 * (c0 - VC);
#pragma unroll
  for (int v = 0; v < VPT; v++) *reinterpret_cast<fi_vec<T, 8> *>(dst + 8 * v) = x[v];
}

}  // namespace fi
