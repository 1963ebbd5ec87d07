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

#endif /* FI_PARAMS_H */
