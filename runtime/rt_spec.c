/* rt_spec.c: fi_chain_speculative_sampling (kernels/spec_sampling.cuh): the checks, one
 * block a request. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fi_params.h"
#include "ops_sampling.h"
#include "rt_internal.h"
#include "rt_tensor.h"
#include "sampling_params.h"

/* A contiguous row-major tensor of ndim dims, dtype want, with the given shape (-1: any),
 * on ref's device (ref NULL: itself the reference). A tensor without elements (no draft
 * tokens) is checked for its shape, dtype and device only: frameworks give it any strides
 * and often no data. */
static fi_status check_dense(const char *fn, const char *name, const DLTensor *t, int ndim, int want,
                             const char *want_name, const int64_t *shape, const char *ref_name, const DLTensor *ref) {
  if (!t) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
  if (t->ndim != ndim || !t->shape)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has %d dimensions; %d are needed", fn, name, t->ndim, ndim);
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (t->shape[d] < 0 || (shape[d] >= 0 && t->shape[d] != shape[d]))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has %lld in dimension %d; %lld is needed", fn, name,
                     (long long)t->shape[d], d, (long long)shape[d]);
    if (__builtin_mul_overflow(n, t->shape[d], &n))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has more than 2^63 elements", fn, name);
  }
  char b[32];
  if (rt_tensor_dtype(t) != want)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; %s is needed", fn, name,
                   rt_dtype_string(t->dtype, b, sizeof b), want_name);
  fi_status st;
  if (n == 0) return ref ? rt_check_same_device(fn, ref_name, ref, name, t) : FI_OK;
  if ((st = rt_check_tensor(fn, name, t, ndim)) != FI_OK) return st;
  if (ref && (st = rt_check_same_device(fn, ref_name, ref, name, t)) != FI_OK) return st;
  int64_t expect = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    if (t->shape[d] > 1 && rt_stride(t, d) != expect)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s must be contiguous (row-major)", fn, name);
    expect *= t->shape[d];
  }
  if (rt_extent_bytes(t) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes", fn, name);
  return FI_OK;
}

FI_API fi_status fi_chain_speculative_sampling(fi_runtime *rt, const DLTensor *draft_probs,
                                               const DLTensor *draft_token_ids, const DLTensor *target_probs,
                                               DLTensor *output_token_ids, DLTensor *accepted_num,
                                               DLTensor *emitted_num, uint64_t seed, uint64_t offset, void *stream) {
  const char *fn = "fi_chain_speculative_sampling";
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  fi_status st;
  const int64_t any3[3] = {-1, -1, -1};
  if ((st = check_dense(fn, "draft_probs", draft_probs, 3, JIT_DT_F32, "float32", any3, NULL, NULL)) != FI_OK)
    return st;
  const int64_t B = draft_probs->shape[0], S = draft_probs->shape[1], V = draft_probs->shape[2];
  if (B > ((int64_t)1 << 24) || S > 1024 || V < 1 || V > ((int64_t)1 << 30))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: draft_probs has shape [%lld, %lld, %lld]; a batch up to 2^24, up to 1024 draft tokens and "
                   "a vocabulary of 1 to 2^30 are supported",
                   fn, (long long)B, (long long)S, (long long)V);
  const int64_t ids_shape[2] = {B, S}, tgt_shape[3] = {B, S + 1, V}, out_shape[2] = {B, S + 1}, cnt_shape[1] = {B};
  if ((st = check_dense(fn, "draft_token_ids", draft_token_ids, 2, JIT_DT_I32, "int32", ids_shape, "draft_probs",
                        draft_probs)) != FI_OK ||
      (st = check_dense(fn, "target_probs", target_probs, 3, JIT_DT_F32, "float32 [batch, S + 1, vocab]",
                        tgt_shape, "draft_probs", draft_probs)) != FI_OK ||
      (st = check_dense(fn, "output_token_ids", output_token_ids, 2, JIT_DT_I32, "int32 [batch, S + 1]", out_shape,
                        "draft_probs", draft_probs)) != FI_OK)
    return st;
  /* The counters contiguous too: a stride-0 view would have every block add to one element. */
  DLTensor *counters[2] = {accepted_num, emitted_num};
  static const char *const cnames[2] = {"accepted_num", "emitted_num"};
  for (int i = 0; i < 2; i++)
    if (counters[i] && (st = check_dense(fn, cnames[i], counters[i], 1, JIT_DT_I32, "int32 [batch]", cnt_shape,
                                         "draft_probs", draft_probs)) != FI_OK)
      return st;
  /* What the kernel writes shares no memory with what it reads, nor with each other. */
  const DLTensor *outs[3] = {output_token_ids, accepted_num, emitted_num};
  const DLTensor *ins[3] = {draft_probs, draft_token_ids, target_probs};
  static const char *const onames[3] = {"output_token_ids", "accepted_num", "emitted_num"};
  static const char *const inames[3] = {"draft_probs", "draft_token_ids", "target_probs"};
  for (int o = 0; o < 3; o++) {
    if (!outs[o]) continue;
    for (int i = 0; i < 3; i++)
      if (rt_tensors_overlap(outs[o], ins[i]))
        return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s", fn, onames[o], inames[i]);
    for (int q = 0; q < o; q++)
      if (outs[q] && rt_tensors_overlap(outs[o], outs[q]))
        return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s", fn, onames[o], onames[q]);
  }
  if (B == 0) return FI_OK;
  fi_spec_params p;
  memset(&p, 0, sizeof p);
  p.draft_probs = (const float *)rt_data(draft_probs);
  p.draft_ids = (const int32_t *)rt_data(draft_token_ids);
  p.target_probs = (const float *)rt_data(target_probs);
  p.out = (int32_t *)rt_data(output_token_ids);
  p.accepted = accepted_num ? (int32_t *)rt_data(accepted_num) : NULL;
  p.emitted = emitted_num ? (int32_t *)rt_data(emitted_num) : NULL;
  p.accepted_stride = accepted_num ? rt_stride(accepted_num, 0) : 0;
  p.emitted_stride = emitted_num ? rt_stride(emitted_num, 0) : 0;
  p.seed = seed;
  p.offset = offset;
  p.batch = (int32_t)B;
  p.num_draft = (int32_t)S;
  p.vocab = (int32_t)V;
  jit_key key;
  jit_spec_sampling_select(&key);
  rt_kernel *k;
  if ((st = rt_kernel_for(rt, draft_probs->device.device_type, draft_probs->device.device_id, &key, &k, NULL,
                          NULL)) != FI_OK)
    return st;
  return rt_launch_1d(rt, k, B, FI_SPEC_THREADS, stream, &p, sizeof p);
}
