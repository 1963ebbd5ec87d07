/* rt_copy.c: fi_copy_to_host, a blocking device-to-host copy for callers that hold only
 * DLPack tensors and the runtime (the TVM-FFI shim's decode plan reads the request
 * lengths a FlashInfer-ABI caller keeps on the device). Not for the hot path. */
#include <stdint.h>
#include <string.h>

#include "rt_internal.h"
#include "rt_tensor.h"

FI_API fi_status fi_copy_to_host(fi_runtime *rt, const DLTensor *src, void *dst, size_t bytes, void *stream) {
  const char *fn = "fi_copy_to_host";
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if (!src) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: src is NULL", fn);
  if ((st = rt_check_tensor(fn, "src", src, src->ndim)) != FI_OK) return st;
  if (bytes && !dst) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: dst is NULL", fn);
  /* contiguous: each dimension of more than one element strides over the ones after it */
  int64_t inner = 1;
  for (int i = src->ndim - 1; i >= 0; i--) {
    if (src->shape[i] > 1 && rt_stride(src, i) != inner)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: src is not contiguous (dimension %d)", fn, i);
    inner *= src->shape[i];
  }
  const int64_t have = rt_extent_bytes(src);
  if (have < 0 || (uint64_t)have < bytes)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: src holds %lld bytes; %zu are asked for", fn, (long long)have,
                   bytes);
  if (bytes == 0) return FI_OK;
  const rt_device_i *be = NULL;
  void *state = NULL;
  if ((st = rt_backend(rt, src->device.device_type, &be, &state)) != FI_OK) return st;
  if (!be->tune || !be->tune->copy || !be->tune->capturing || !be->tune->sync)
    return rt_fail(FI_ERR_NO_DEVICE, "%s: the %s backend cannot copy", fn, be->name);
  char err[256] = "";
  const int dev = src->device.device_id;
  int cap_s = 1, cap_l = 1;
  if (be->tune->capturing(state, dev, stream, &cap_s, err, sizeof err) != 0 ||
      be->tune->capturing(state, dev, NULL, &cap_l, err, sizeof err) != 0)
    return rt_fail(FI_ERR_DEVICE, "%s: %s", fn, err);
  if (cap_s || cap_l)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: a graph is being captured; a copy to the host would break it", fn);
  /* stream's work first (a non-blocking stream is not ordered with the copy's own) */
  if (be->tune->sync(state, dev, stream, err, sizeof err) != 0) return rt_fail(FI_ERR_DEVICE, "%s: %s", fn, err);
  if (be->tune->copy(state, dev, dst, rt_data(src), bytes, RT_COPY_D2H, err, sizeof err) != 0)
    return rt_fail(FI_ERR_DEVICE, "%s: %s", fn, err);
  return FI_OK;
}
