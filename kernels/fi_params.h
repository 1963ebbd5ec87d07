/* fi_params.h: the kernel ABI, one parameter struct per kernel family, passed by
 * value. Included by the host C code and, embedded, by the device templates. */
#ifndef FI_PARAMS_H
#define FI_PARAMS_H

#if defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__)
/* NVRTC and hiprtc compile with no system headers: fi_port.cuh defines the
 * fixed-width integer types before this header is included. */
#else
#include <stdint.h>
#endif

/* Bump when any struct below changes layout: it is part of every cache key,
 * so binaries built against an old layout are never loaded. */
#define FI_KERNEL_ABI_VERSION 1

/* RMSNorm over [rows, hidden]; strides in elements. */
typedef struct fi_rmsnorm_params {
  const void *input;
  const void *weight;
  void *out;
  int64_t input_row_stride;
  int64_t out_row_stride;
  int32_t rows;
  int32_t hidden;
  float eps;
  int32_t pad_;
} fi_rmsnorm_params;

/* Gated activation over [rows, d] outputs: out[r, c] = act(input[r, c]) *
 * input[r, d + c]; input rows hold 2d elements. Strides in elements. */
typedef struct fi_act_params {
  const void *input;
  void *out;
  int64_t input_row_stride;
  int64_t out_row_stride;
  int32_t rows;
  int32_t d;
} fi_act_params;

/* Cascade merge of two attention states over seq x heads rows of head_dim
 * elements: v [seq, heads, head_dim] (head_dim contiguous), LSEs float32
 * [seq, heads]. Strides in elements, [0] seq and [1] head. s_out and mask
 * (uint8 [seq], rows where it is 0 are left alone) may be NULL. */
typedef struct fi_merge_state_params {
  const void *v_a;
  const void *v_b;
  void *v_out;
  const float *s_a;
  const float *s_b;
  float *s_out;
  const uint8_t *mask;
  int64_t va_stride[2], vb_stride[2], vo_stride[2];
  int64_t sa_stride[2], sb_stride[2], so_stride[2];
  int64_t mask_stride;
  int32_t seq;
  int32_t heads;
  int32_t head_dim;
  int32_t pad_;
} fi_merge_state_params;

/* Cascade merge of N states: v [seq, N, heads, head_dim], s float32
 * [seq, N, heads] into v_out [seq, heads, head_dim], s_out [seq, heads]
 * (NULL: not written). Strides in elements: [0] seq, [1] state, [2] head
 * for v and s; [0] seq, [1] head for the outputs. */
typedef struct fi_merge_states_params {
  const void *v;
  const float *s;
  void *v_out;
  float *s_out;
  int64_t v_stride[3], s_stride[3];
  int64_t vo_stride[2], so_stride[2];
  int32_t seq;
  int32_t num_states;
  int32_t heads;
  int32_t head_dim;
} fi_merge_states_params;

/* The other norms over [rows, hidden] (fused_add_rmsnorm, the Gemma variants,
 * layernorm); strides in elements. residual is NULL unless a residual is added
 * (then it is updated in place and out is the input); bias is layernorm's beta. */
typedef struct fi_norm_params {
  const void *input;
  void *residual;
  const void *weight; /* rmsnorm weight, layernorm gamma */
  const void *bias;   /* layernorm beta */
  void *out;
  int64_t input_row_stride;
  int64_t residual_row_stride;
  int64_t out_row_stride;
  int32_t rows;
  int32_t hidden;
  float eps;
  int32_t pad_;
} fi_norm_params;

/* Paged KV cache append: append_k/v [nnz, heads, head_dim] into k_cache/v_cache
 * (4-D, head_dim contiguous); strides in elements: ak/av [0] token, [1] head;
 * caches [0] page, [1] and [2] the tensor's dimensions 1 and 2 (slot and head
 * for NHD, head and slot for HND: the kernel's LAYOUT says which). The int32
 * index tensors are 1-D with element strides. Inverse scales apply to fp8 only. */
typedef struct fi_append_paged_kv_params {
  const void *append_k;
  const void *append_v;
  void *k_cache;
  void *v_cache;
  const int32_t *batch_indices;
  const int32_t *positions;
  const int32_t *kv_indices;
  const int32_t *kv_indptr;
  int64_t ak_stride[2], av_stride[2];
  int64_t kc_stride[3], vc_stride[3];
  int64_t bi_stride, pos_stride, indices_stride, indptr_stride;
  int32_t nnz;
  int32_t heads;
  int32_t head_dim;
  int32_t page_size;
  float k_inv_scale;
  float v_inv_scale;
} fi_append_paged_kv_params;

/* batch_indices[i] and positions[i] of the nnz appended tokens of `batch`
 * requests (append_indptr [batch + 1], seq_lens [batch]); strides in elements. */
typedef struct fi_batch_indices_positions_params {
  const int32_t *append_indptr;
  const int32_t *seq_lens;
  int32_t *batch_indices;
  int32_t *positions;
  int64_t indptr_stride, seq_lens_stride, bi_stride, pos_stride;
  int32_t batch;
  int32_t nnz;
} fi_batch_indices_positions_params;

/* RoPE over q [nnz, heads_q, head_dim] and k [nnz, heads_k, head_dim]
 * (head_dim contiguous). Strides in elements, [0] token and [1] head; q_out
 * == q and k_out == k in place. inv_freq (float, rotary_dim / 2 entries,
 * rotary_dim <= 2 * FI_ROPE_MAX_PAIRS) is computed by the host in double
 * (plain or Llama 3.1) and rounded once; cos_sin_cache [max_pos, rotary_dim]
 * float32 replaces it when not NULL. lanes: work units per head row
 * (rot_lanes rotate, the rest copy the tail); head_groups: ceil((heads_q +
 * heads_k) / FI_ROPE_HEADS_PER_ITEM). */
#define FI_ROPE_MAX_PAIRS 256
#define FI_ROPE_HEADS_PER_ITEM 4
typedef struct fi_rope_params {
  const void *q;
  const void *k;
  void *q_out;
  void *k_out;
  const void *pos_ids;
  const float *cos_sin_cache;
  int64_t q_stride[2], k_stride[2], qo_stride[2], ko_stride[2];
  int32_t nnz;
  int32_t heads_q;
  int32_t heads_k;
  int32_t head_dim;
  int32_t rotary_dim;
  int32_t lanes;
  int32_t rot_lanes;
  int32_t head_groups;
  int32_t in_place;
  int32_t pad_;
  float inv_freq[FI_ROPE_MAX_PAIRS];
} fi_rope_params;

/* Bit packing (fi_packbits, fi_segment_packbits): bit k of output byte j is whether
 * x[8 j + k] != 0, k counted from the lowest bit (little) or the highest (big). Segmented:
 * segment s is x[indptr[s] .. indptr[s+1]), packed from byte indptr_new[s] = sum over
 * earlier segments of ceil(length / 8) (block s writes indptr_new[s + 1], block 0 also
 * indptr_new[0]); bytes at or past y_len are not written. Strides in elements. */
typedef struct fi_packbits_params {
  const uint8_t *x;
  uint8_t *y;
  const int32_t *indptr;  /* segmented only */
  int32_t *indptr_new;    /* segmented only */
  int64_t x_stride, indptr_stride, indptr_new_stride;
  int64_t n;              /* elements of x (unsegmented) */
  int64_t y_len;          /* bytes of y */
  int32_t segments;
  int32_t pad_;
} fi_packbits_params;

#endif /* FI_PARAMS_H */
