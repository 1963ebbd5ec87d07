/* sampling_params.h: the kernel ABI of the sampling family (softmax, sampling from
 * probabilities or logits, top-k / top-p / min-p, renorm and mask), one struct passed
 * by value. Included by the host C code and, embedded, by kernels/sampling.cuh. */
#ifndef FI_SAMPLING_PARAMS_H
#define FI_SAMPLING_PARAMS_H

#include "fi_params.h"

/* The kernel's "op" (part of its key). */
enum {
  FI_SMP_SOFTMAX = 0,          /* logits -> float32 probabilities, with temperature */
  FI_SMP_SAMPLE = 1,           /* probs -> int32 sample */
  FI_SMP_TOPK = 2,             /* probs, top_k -> sample */
  FI_SMP_TOPP = 3,             /* probs, top_p -> sample */
  FI_SMP_MINP = 4,             /* probs, min_p -> sample */
  FI_SMP_TOPK_TOPP_LOGITS = 5, /* logits, top_k then top_p -> sample */
  FI_SMP_TOPK_RENORM = 6,      /* probs, top_k -> renormalized probs */
  FI_SMP_TOPP_RENORM = 7,      /* probs, top_p -> renormalized probs */
  FI_SMP_TOPK_MASK = 8,        /* logits, top_k -> logits with -inf outside the top k */
  FI_SMP_TOPK_TOPP_PROBS = 9,  /* probs, top_k then top_p -> sample */
  FI_SMP_OP_COUNT = 10
};

/* fi_sampling_params.topp_variant */
enum { FI_SMP_TOPP_FLOAT = 0, FI_SMP_TOPP_EXACT = 1 };

/* input [batch, vocab] (unit column stride, row stride in elements). out:
 * int32 samples [batch] (element stride out_stride) for the sampling ops, else a
 * [batch, vocab] tensor (row stride out_stride). The per-row parameter arrays are
 * NULL or [batch] with the given element strides; when NULL the scalar applies. */
typedef struct fi_sampling_params {
  const void *input;
  void *out;
  const int32_t *top_k_arr;
  const float *top_p_arr;
  const float *min_p_arr; /* also the temperature array of softmax */
  int64_t in_stride;
  int64_t out_stride;
  int64_t top_k_stride;
  int64_t top_p_stride;
  int64_t min_p_stride;
  uint64_t seed;
  uint64_t offset;
  int32_t batch;
  int32_t vocab;
  int32_t top_k; /* <= 0 or >= vocab: no top-k filter */
  float top_p;   /* >= 1 (or NaN): no top-p filter */
  float min_p;   /* also softmax's temperature */
  /* Top-p membership test (FI_SMP_TOPP_*): float sums with an exact fallback (0), the exact
   * 64-bit sums only (1); 2 and 3 stop after the first pass / the draws and write -1, to
   * time the phases (benchmarks only). */
  int32_t topp_variant;
} fi_sampling_params;

/* Chain speculative sampling (kernels/spec_sampling.cuh): one block a request. draft_probs
 * [batch, S, vocab] and target_probs [batch, S + 1, vocab] float32, draft_ids [batch, S] and
 * out [batch, S + 1] int32, all contiguous; accepted and emitted int32 [batch] (element
 * strides given) or NULL, added to in place. */
typedef struct fi_spec_params {
  const float *draft_probs;
  const int32_t *draft_ids;
  const float *target_probs;
  int32_t *out;
  int32_t *accepted;
  int32_t *emitted;
  int64_t accepted_stride;
  int64_t emitted_stride;
  uint64_t seed;
  uint64_t offset;
  int32_t batch;
  int32_t num_draft; /* S */
  int32_t vocab;
  int32_t pad_;
} fi_spec_params;
#define FI_SPEC_THREADS 256

#endif /* FI_SAMPLING_PARAMS_H */
