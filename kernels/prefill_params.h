/* prefill_params.h: the kernel ABI of prefill / append attention (single prefill, batch
 * prefill over a ragged or paged KV) and of its split-KV merge; included by the host
 * and by prefill.cuh. */
#ifndef FI_PREFILL_PARAMS_H
#define FI_PREFILL_PARAMS_H

#include "fi_params.h"

/* Bump when a struct below changes layout (the template hash changes too). */
#define FI_PREFILL_ABI_VERSION 3

/* Most head_dim / 2 RoPE frequencies carried in the parameters. */
#define FI_PREFILL_MAX_FREQ 128

/* Rows of the q tile are "packed rows": row r of a request is query token r / group of
 * query head hkv * group + r % group, so a KV head's group shares every K/V tile. */

/* The plan's tables in the workspace (int32 words from its start):
 *   header [FI_PREFILL_HDR_WORDS]: [0] items, [1] batch, [2] q tile rows, [3] kv chunk tokens,
 *     [4] the persistent grid's next work unit and [5] its blocks done (0 between
 *     launches: the kernel's last block resets them), [6] 1: units taken from [4]
 *   items  [capacity][FI_PREFILL_ITEM_WORDS]:
 *     [0] request b, [1] first packed row r0, [2] rows (<= q tile), [3] kv_lo, [4] kv_hi,
 *     [5] chunk | chunks << 16, [6] q_start (qo_indptr[b]), [7] L_q,
 *     [8] kv_base (ragged: kv_indptr[b], the first token; paged: kv_indptr[b], the
 *         first page), [9] L_kv, [10] partial slot of chunk 0 (split tiles), [11] the
 *         request's custom-mask segment's first byte (0 without a mask)
 * then float32 partial outputs [slots][H_kv][q tile][head_dim] and partial LSEs (base 2)
 * [slots][H_kv][q tile], each at a 256-byte boundary. */
#define FI_PREFILL_HDR_WORDS 16
#define FI_PREFILL_ITEM_WORDS 12
/* The CTA shape of a (head_dim D, q tile QT) configuration, one table for the host (grid,
 * dynamic shared memory) and the kernel: WARPS warps of MT m16 row tiles each
 * (QT = 16 MT WARPS), kv tiles of KT tokens; QREG: the warp keeps its Q fragments in
 * registers (else it reloads them from a shared Q tile at every kv tile, which two row
 * tiles per warp make cheap: each K/V fragment then feeds two mma instead of one). Shared
 * memory: the Q tile unless QREG, two stages of a K and a V tile (the next tile loads
 * while this one is computed), and two KT-entry tables of the tiles' token offsets (the
 * page-table lookups, made two tiles ahead). At most 96 KB: two blocks fit on an SM. */
#define FI_PF_WARPS(D, QT) ((QT) == 16 ? 1 : 4)
#define FI_PF_MT(D, QT) ((QT) / (16 * FI_PF_WARPS(D, QT)))
#define FI_PF_KT(D, QT) ((D) <= 128 ? 64 : 32)
#define FI_PF_QREG(D, QT) (FI_PF_MT(D, QT) == 1 && (D) <= 128)
/* With V's head_dim DV != D (192 / 128): the K tile [KT][D] and the V tile [KT][DV]. */
#define FI_PF_KT_DV(D, DV, QT) FI_PF_KT(D, QT)
#define FI_PF_SMEM_DV(D, DV, QT)                                                            \
  ((FI_PF_QREG(D, QT) ? 0 : (QT) * (D) * 2) + 2 * FI_PF_KT(D, QT) * ((D) + (DV)) * 2 +      \
   2 * FI_PF_KT(D, QT) * 8)
#define FI_PF_SMEM(D, QT) FI_PF_SMEM_DV(D, D, QT)

/* Rows a partial slot holds (the largest q tile): partial row ((slot * H_kv + hkv) *
 * FI_PREFILL_SLOT_ROWS + row in the tile). */
#define FI_PREFILL_SLOT_ROWS 192

/* out[t, h] = softmax(scale * q[t, h] . K^T + mask) V for query token t of a request,
 * query head h reading KV head h / group. The mask: kv token j is attended iff
 * j < L_kv, causal ? j <= t + L_kv - L_q : 1, window_left >= 0 ? j >= t + L_kv - L_q -
 * window_left : 1. Strides in elements; head_dim contiguous everywhere. items == NULL:
 * single prefill (one request, blockIdx.x = q tile, every block its whole KV range). */
typedef struct fi_prefill_kparams {
  const void *q;
  void *out;
  float *lse;               /* natural log (base 2 with lse_log2); NULL: not written */
  const void *k;
  const void *v;
  const int32_t *indices;   /* page ids; NULL: contiguous (ragged or single) KV */
  const int32_t *header;    /* plan tables (NULL for single prefill) */
  const int32_t *items;
  float *partial_o;
  float *partial_lse;
  int64_t q_stride_tok, q_stride_head;
  int64_t out_stride_tok, out_stride_head;
  int64_t lse_stride_tok, lse_stride_head;
  int64_t kv_stride_page;   /* paged only */
  int64_t kv_stride_slot;   /* token within a page, or token of a contiguous KV */
  int64_t kv_stride_head;
  int32_t num_items;        /* >= 0: grid items; -1: read header[0] (CUDA-graph mode) */
  int32_t num_kv_heads;
  int32_t group;            /* num_qo_heads / num_kv_heads */
  int32_t page_size;        /* paged only */
  int32_t q_len;            /* single prefill: L_q */
  int32_t kv_len;           /* single prefill: L_kv */
  int32_t causal;
  int32_t window_left;      /* -1: off */
  int32_t split;            /* the plan has split tiles: partials, then the merge kernel */
  int32_t pad_;
  float scale_log2;         /* sm_scale * k_scale * log2(e) (no soft cap) */
  float cap_pre;            /* soft cap: t = qk * cap_pre; logit = cap_log2 * tanh(t) */
  float cap_log2;           /* 0: no soft cap */
  float v_scale;
  float rope_freq[FI_PREFILL_MAX_FREQ];
  /* Attention sinks (fi_attention_extras.sinks): one logit a query head in every row's
   * softmax denominator; NULL: none. Folded in by the unsplit write and by the merge. */
  const float *sinks;
  /* Custom mask (fi_attention_extras.custom_mask; the mma.sync kernel only): bit t * L_kv
   * + j of the request's segment (little-endian bit order within a byte) says whether query
   * token t attends KV token j, AND-ed with causal and window; the segment starts at byte
   * items[11] (batch) or 0 (single). NULL: none. */
  const uint8_t *custom_mask;
  int32_t lse_log2; /* 1: lse in base 2 (FlashInfer's convention); 0: natural log */
  int32_t pad2_;
  /* V's strides where its head_dim differs from K's (the *_dvo kernels: contiguous KV,
   * token and head strides in elements); unused otherwise (V shares K's). */
  int64_t v_stride_slot, v_stride_head;
} fi_prefill_kparams;

/* The merge of split tiles: one block per item of chunk 0 (and KV head), combining its
 * tile's partials by LSE into out / lse. */
typedef struct fi_prefill_merge_params {
  void *out;
  float *lse;
  const int32_t *header;
  const int32_t *items;
  const float *partial_o;
  const float *partial_lse;
  int64_t out_stride_tok, out_stride_head;
  int64_t lse_stride_tok, lse_stride_head;
  int32_t num_items;        /* as above */
  int32_t num_kv_heads;
  int32_t group;
  int32_t q_tile;           /* rows a partial slot holds: FI_PREFILL_SLOT_ROWS */
  const float *sinks;       /* as fi_prefill_kparams' */
  int32_t lse_log2;         /* as fi_prefill_kparams' */
} fi_prefill_merge_params;

/* fi-bench's tensor-core probe: each warp runs `iters` rounds of independent bf16
 * mma.sync m16n8k16 on registers; the result is written only if it equals `never`. */
typedef struct fi_mma_probe_params {
  float *sink;
  int32_t iters;
  float never;
} fi_mma_probe_params;

#endif /* FI_PREFILL_PARAMS_H */
