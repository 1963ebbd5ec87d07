/* mla_params.h: the kernel ABI of multi-head latent attention (DeepSeek's MLA, absorbed form)
 * over a paged compressed cache; included by the host and by mla.cuh. */
#ifndef FI_MLA_PARAMS_H
#define FI_MLA_PARAMS_H

#include "fi_params.h"
#include "prefill_params.h"

/* The latent (value) width and the rotary width of a cache row: a query row is q_nope [512]
 * and q_pe [64], a key is ckv [512] and kpe [64], the value is ckv. */
#define FI_MLA_DCKV 512
#define FI_MLA_DKPE 64
#define FI_MLA_DQK (FI_MLA_DCKV + FI_MLA_DKPE)

/* The CTA shape of a q tile QT (16 or 64 packed rows; row r of a request is query token
 * r / H, head r % H): RG row groups of 16 rows times CG column groups, one warp each. A
 * warp computes S for its 16 rows over SW of the tile's KV tokens (KT = SW CG) and O for
 * its 16 rows over 512 / CG latent columns; the rows' maxima and the P fragments go through
 * shared memory between the CG warps of a row group. NS stages of KV tiles: NS - 1 tiles'
 * loads in flight while one is computed (16-row tiles: 4 stages of 32 tokens, ~110 KB in
 * flight an SM; 64-row tiles: 2 of 32, which keeps them within sm_80's 163 KB). */
#define FI_MLA_RG(QT) ((QT) / 16)
#define FI_MLA_CG(QT) ((QT) == 16 ? 4 : 2)
#define FI_MLA_SW(QT) ((QT) == 16 ? 8 : 16)
#define FI_MLA_NS(QT) ((QT) == 16 ? 4 : 2)
#define FI_MLA_WARPS(QT) (FI_MLA_RG(QT) * FI_MLA_CG(QT))
#define FI_MLA_KT(QT) (FI_MLA_SW(QT) * FI_MLA_CG(QT))
/* Shared memory with NS stages: the Q tile [QT][576], NS stages of a KV tile [KT][576]
 * (ckv then kpe in each row), NS KT-entry tables of token offsets into ckv and into kpe,
 * the P fragments [RG][KT / 8 n-tiles][32 lanes][2 words], the row maxima and the row sums
 * [RG][CG][16]. FI_MLA_NS(QT) is the default; the 16-row tile also runs with 2 stages
 * (FI_MLA_STAGES=2: 93 KB, two blocks an SM instead of one). */
#define FI_MLA_SMEM_NS(QT, NS)                                                                \
  ((QT) * FI_MLA_DQK * 2 + (NS) * FI_MLA_KT(QT) * FI_MLA_DQK * 2 +                           \
   2 * (NS) * FI_MLA_KT(QT) * 8 + FI_MLA_RG(QT) * (FI_MLA_KT(QT) / 8) * 32 * 8 +              \
   2 * FI_MLA_WARPS(QT) * 16 * 4)
#define FI_MLA_SMEM(QT) FI_MLA_SMEM_NS(QT, FI_MLA_NS(QT))

/* Rows a partial slot holds (the largest q tile): partial row slot * FI_MLA_SLOT_ROWS + row
 * in the tile, 512 floats each. */
#define FI_MLA_SLOT_ROWS 64

/* out[t, h] = softmax(sm_scale * (q_nope[t, h] . ckv_j + q_pe[t, h] . kpe_j)) ckv over the
 * request's KV tokens j < L_kv (causal: j <= t + L_kv - L_q). Work items, partial slots
 * are batch prefill's (prefill_params.h) with one KV head and group H; the merge is
 * mla.cuh's mla_merge (fi_prefill_merge_params). Strides in elements; the last dimension contiguous. */
typedef struct fi_mla_kparams {
  const void *q_nope;
  const void *q_pe;
  void *out;
  float *lse;               /* natural log; NULL: not written */
  const void *ckv;
  const void *kpe;
  const int32_t *indices;   /* page ids */
  const int32_t *header;    /* plan tables */
  const int32_t *items;
  float *partial_o;
  float *partial_lse;
  int64_t qn_stride_tok, qn_stride_head;
  int64_t qp_stride_tok, qp_stride_head;
  int64_t out_stride_tok, out_stride_head;
  int64_t lse_stride_tok, lse_stride_head;
  int64_t ckv_stride_page, ckv_stride_slot;
  int64_t kpe_stride_page, kpe_stride_slot;
  int32_t num_items;        /* >= 0: grid items; -1: read header[0] (CUDA-graph mode) */
  int32_t num_heads;        /* H: the group of the packed rows */
  int32_t page_size;
  int32_t causal;
  float scale_log2;         /* sm_scale * log2(e) */
  int32_t pad_;
} fi_mla_kparams;

/* The MLA cache append: token i's latent append_ckv[i] [512] and rotary part append_kpe[i]
 * [64] into slot positions[i] % page_size of page kv_indices[kv_indptr[batch_indices[i]] +
 * positions[i] / page_size] of ckv_cache [pages, page_size, 512] and kpe_cache [pages,
 * page_size, 64]. A thread moves 4 vectors of 16 bytes of one row (a row: 64 of ckv, 8 of
 * kpe). Strides in elements, the last dimension contiguous. */
typedef struct fi_append_mla_params {
  const void *append_ckv;
  const void *append_kpe;
  void *ckv_cache;
  void *kpe_cache;
  const int32_t *batch_indices;
  const int32_t *positions;
  const int32_t *kv_indices;
  const int32_t *kv_indptr;
  int64_t ackv_stride, akpe_stride;           /* a token's row */
  int64_t ckv_stride_page, ckv_stride_slot;
  int64_t kpe_stride_page, kpe_stride_slot;
  int64_t bi_stride, pos_stride, indices_stride, indptr_stride;
  int32_t nnz;
  int32_t page_size;
} fi_append_mla_params;

#endif /* FI_MLA_PARAMS_H */
