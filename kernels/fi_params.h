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

#endif /* FI_PARAMS_H */
