/* rt_tensor.c: validation of DLPack tensors at the API boundary, so a bad
 * argument is reported by name before anything reaches a driver or the cache. */
#include "rt_tensor.h"

#include <stdio.h>

#include "jit_key.h"
#include "rt_internal.h"

int rt_tensor_dtype(const DLTensor *t) {
  DLDataType d = t->dtype;
  if (d.lanes != 1) return JIT_DT_NONE;
  if (d.code == kDLFloat && d.bits == 16) return JIT_DT_F16;
  if (d.code == kDLBfloat && d.bits == 16) return JIT_DT_BF16;
  if (d.code == kDLFloat && d.bits == 32) return JIT_DT_F32;
  if (d.code == kDLInt && d.bits == 32) return JIT_DT_I32;
  if (d.code == kDLInt && d.bits == 64) return JIT_DT_I64;
  return JIT_DT_NONE;
}

const char *rt_dtype_string(DLDataType d, char *buf, size_t n) {
  static const char *const codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const char *c = d.code < sizeof codes / sizeof codes[0] ? codes[d.code] : "code?";
  if (d.lanes == 1)
    snprintf(buf, n, "%s%u", c, d.bits);
  else
    snprintf(buf, n, "%s%ux%u", c, d.bits, d.lanes);
  return buf;
}

fi_status rt_check_tensor(const char *fn, const char *name, const DLTensor *t, int ndim) {
  if (!t) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
  if (t->device.device_type != kDLCUDA && t->device.device_type != kDLROCM)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s is on device type %d (%s); a CUDA (kDLCUDA) or ROCm (kDLROCM) "
                   "device tensor is needed",
                   fn, name, (int)t->device.device_type,
                   t->device.device_type == kDLCPU         ? "kDLCPU"
                   : t->device.device_type == kDLCUDAHost  ? "kDLCUDAHost"
                   : t->device.device_type == kDLCUDAManaged ? "kDLCUDAManaged"
                                                             : "other");
  if (t->device.device_id < 0 || t->device.device_id >= RT_MAX_DEVICES)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has device_id %d", fn, name,
                   t->device.device_id);
  if (t->ndim != ndim)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has %d dimensions, expected %d", fn, name,
                   t->ndim, ndim);
  if (!t->shape) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s->shape is NULL", fn, name);
  for (int i = 0; i < ndim; i++)
    if (t->shape[i] < 0)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s->shape[%d] is negative (%lld)", fn, name, i,
                     (long long)t->shape[i]);
  if (!t->data) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s->data is NULL", fn, name);
  if (t->strides)
    for (int i = 0; i < ndim; i++)
      if (t->strides[i] < 0)
        return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s->strides[%d] is negative", fn, name, i);
  /* Every kernel loads whole elements at least (wider only where rt_pick_vec finds the
   * addresses allow it): an element that starts off its own size's alignment would be a
   * misaligned access on the device. Checked here, so every op refuses it before it looks
   * its device up. */
  const unsigned esize = t->dtype.bits % 8 == 0 ? (unsigned)t->dtype.bits / 8u * t->dtype.lanes : 1u;
  if (esize > 1 && esize <= 16 && (esize & (esize - 1)) == 0) return rt_check_aligned(fn, name, t, (int)esize);
  return FI_OK;
}

int64_t rt_stride(const DLTensor *t, int i) {
  if (t->strides) return t->strides[i];
  int64_t s = 1;
  for (int j = t->ndim - 1; j > i; j--)
    if (__builtin_mul_overflow(s, t->shape[j], &s)) return INT64_MAX;
  return s;
}

fi_status rt_check_same_device(const char *fn, const char *a_name, const DLTensor *a,
                               const char *b_name, const DLTensor *b) {
  if (a->device.device_type != b->device.device_type || a->device.device_id != b->device.device_id)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s is on device (%d, %d) but %s on (%d, %d)", fn,
                   b_name, (int)b->device.device_type, b->device.device_id, a_name,
                   (int)a->device.device_type, a->device.device_id);
  return FI_OK;
}

int64_t rt_extent_bytes(const DLTensor *t) {
  int64_t last = 0, span;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] == 0) return 0;
    if (__builtin_mul_overflow(t->shape[i] - 1, rt_stride(t, i), &span) ||
        __builtin_add_overflow(last, span, &last))
      return -1;
  }
  int64_t bytes;
  if (__builtin_add_overflow(last, 1, &last) ||
      __builtin_mul_overflow(last, (int64_t)((t->dtype.bits * t->dtype.lanes + 7) / 8), &bytes))
    return -1;
  return bytes;
}

int rt_pick_vec(int es, int64_t n, const void *const *ptrs, int nptrs, const int64_t *strides,
                int nstrides) {
  int vec = 16 / es;
  for (; vec > 1; vec /= 2) {
    int ok = n % vec == 0;
    for (int i = 0; ok && i < nptrs; i++) ok = (uintptr_t)ptrs[i] % (uintptr_t)(vec * es) == 0;
    for (int i = 0; ok && i < nstrides; i++) ok = strides[i] % vec == 0;
    if (ok) break;
  }
  return vec;
}

int rt_tensors_overlap(const DLTensor *a, const DLTensor *b) {
  const uintptr_t pa = (uintptr_t)rt_data(a), pb = (uintptr_t)rt_data(b);
  const int64_t ea = rt_extent_bytes(a), eb = rt_extent_bytes(b);
  if (ea <= 0 || eb <= 0) return 0;
  return pa < pb + (uint64_t)eb && pb < pa + (uint64_t)ea;
}

fi_status rt_check_aligned(const char *fn, const char *name, const DLTensor *t, int bytes) {
  if (bytes > 1 && (uintptr_t)rt_data(t) % (uintptr_t)bytes != 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s starts at %p (data + byte_offset %llu); a multiple of %d bytes is needed",
                   fn, name, (void *)rt_data(t), (unsigned long long)t->byte_offset, bytes);
  return FI_OK;
}
