/* rt_packbits.c: bit packing of boolean masks (fi_packbits, fi_segment_packbits), the
 * packed custom masks batch prefill plans take: argument checks and the launch. */
#include <stdint.h>
#include <string.h>

#include "fi_params.h"
#include "ops_packbits.h"
#include "rt_check.h"
#include "rt_internal.h"
#include "rt_tensor.h"

/* DLPack >= 0.8's kDLBool (this dlpack.h predates it). */
#define RT_DL_BOOL 6

/* A 1-D byte tensor: bool, int8 or uint8 (in) or uint8 (out). */
static fi_status check_bytes(const char *fn, const char *name, const DLTensor *t, const DLTensor *ref, int out) {
  fi_status st;
  char b1[32];
  if ((st = rt_check_tensor(fn, name, t, 1)) != FI_OK) return st;
  if (ref && (st = rt_check_same_device(fn, "x", ref, name, t)) != FI_OK) return st;
  const DLDataType d = t->dtype;
  const int ok = d.lanes == 1 && d.bits == 8 &&
                 (d.code == kDLUInt || (!out && (d.code == kDLInt || d.code == RT_DL_BOOL)));
  if (!ok)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; %s is needed", fn, name,
                   rt_dtype_string(d, b1, sizeof b1), out ? "uint8" : "bool, int8 or uint8");
  if (out && t->shape[0] > 1 && rt_stride(t, 0) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has stride %lld; contiguous (1) is needed", fn, name,
                   (long long)rt_stride(t, 0));
  if (rt_extent_bytes(t) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes", fn, name);
  return FI_OK;
}

static fi_status check_order(const char *fn, fi_bitorder bitorder) {
  if (bitorder != FI_BITORDER_BIG && bitorder != FI_BITORDER_LITTLE)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: bitorder is %d; FI_BITORDER_BIG (0) or FI_BITORDER_LITTLE (1) is needed", fn, (int)bitorder);
  return FI_OK;
}

static fi_status launch(fi_runtime *rt, const DLTensor *x, int segmented, fi_bitorder bitorder, int64_t blocks,
                        fi_packbits_params *p, void *stream) {
  jit_key key;
  jit_packbits_select(segmented, bitorder == FI_BITORDER_LITTLE, &key);
  rt_kernel *k;
  fi_status st = rt_kernel_for(rt, x->device.device_type, x->device.device_id, &key, &k, NULL, NULL);
  if (st != FI_OK) return st;
  return rt_launch_1d(rt, k, blocks, (unsigned)key.v[PACKBITS_P_THREADS], stream, p, sizeof *p);
}

FI_API fi_status fi_packbits(fi_runtime *rt, const DLTensor *x, fi_bitorder bitorder, DLTensor *y, void *stream) {
  const char *fn = "fi_packbits";
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = check_bytes(fn, "x", x, NULL, 0)) != FI_OK) return st;
  if ((st = check_bytes(fn, "y", y, x, 1)) != FI_OK) return st;
  if ((st = check_order(fn, bitorder)) != FI_OK) return st;
  const int64_t n = x->shape[0], nb = (n + 7) / 8;
  if (y->shape[0] != nb)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: y has %lld bytes; x's %lld elements need %lld", fn,
                   (long long)y->shape[0], (long long)n, (long long)nb);
  if (rt_tensors_overlap(x, y)) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: y overlaps x", fn);
  if (n == 0) return FI_OK;
  fi_packbits_params p;
  memset(&p, 0, sizeof p);
  p.x = (const uint8_t *)rt_data(x);
  p.y = (uint8_t *)rt_data(y);
  p.x_stride = rt_stride(x, 0);
  p.n = n;
  p.y_len = nb;
  int64_t blocks = (nb + 255) / 256;
  if (blocks > (1 << 20)) blocks = 1 << 20; /* the grid strides past that */
  return launch(rt, x, 0, bitorder, blocks, &p, stream);
}

FI_API fi_status fi_segment_packbits(fi_runtime *rt, const DLTensor *x, const DLTensor *indptr, fi_bitorder bitorder,
                                     DLTensor *y, DLTensor *indptr_new, void *stream) {
  const char *fn = "fi_segment_packbits";
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = check_bytes(fn, "x", x, NULL, 0)) != FI_OK) return st;
  if ((st = check_bytes(fn, "y", y, x, 1)) != FI_OK) return st;
  if ((st = check_order(fn, bitorder)) != FI_OK) return st;
  if ((st = rt_check_ints(fn, "indptr", indptr, "x", x, -1, "")) != FI_OK) return st;
  const int64_t S1 = indptr->shape[0];
  if (S1 < 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: indptr has 0 entries; segments + 1 (>= 1) are needed", fn);
  if ((st = rt_check_ints(fn, "indptr_new", indptr_new, "x", x, S1, "indptr's length")) != FI_OK) return st;
  const DLTensor *ins[2] = {x, indptr};
  static const char *const in_names[2] = {"x", "indptr"};
  for (int i = 0; i < 2; i++)
    if (rt_tensors_overlap(y, ins[i]) || rt_tensors_overlap(indptr_new, ins[i]))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s", fn,
                     rt_tensors_overlap(y, ins[i]) ? "y" : "indptr_new", in_names[i]);
  if (rt_tensors_overlap(y, indptr_new)) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: y overlaps indptr_new", fn);
  if (S1 == 1) return FI_OK; /* no segment; indptr_new[0] is the caller's 0 */
  fi_packbits_params p;
  memset(&p, 0, sizeof p);
  p.x = (const uint8_t *)rt_data(x);
  p.y = (uint8_t *)rt_data(y);
  p.indptr = (const int32_t *)rt_data(indptr);
  p.indptr_new = (int32_t *)rt_data(indptr_new);
  p.x_stride = rt_stride(x, 0);
  p.indptr_stride = rt_stride(indptr, 0);
  p.indptr_new_stride = rt_stride(indptr_new, 0);
  p.y_len = y->shape[0];
  p.segments = (int32_t)(S1 - 1);
  return launch(rt, x, 1, bitorder, S1 - 1, &p, stream);
}
