/* rt_check.c: the argument checks the ops share (rt_check.h). */
#include "rt_check.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "jit_key.h"
#include "rt_internal.h"
#include "rt_tensor.h"

/* A dtype's jit code, fp8 included. */
int rt_check_dtype(DLDataType d) {
  if (d.lanes == 1 && d.bits == 8) {
    if (d.code == RT_DL_E4M3FN) return JIT_DT_E4M3;
    if (d.code == RT_DL_E5M2) return JIT_DT_E5M2;
  }
  if (d.lanes != 1) return JIT_DT_NONE;
  if (d.code == kDLFloat && d.bits == 16) return JIT_DT_F16;
  if (d.code == kDLBfloat && d.bits == 16) return JIT_DT_BF16;
  if (d.code == kDLFloat && d.bits == 32) return JIT_DT_F32;
  if (d.code == kDLInt && d.bits == 32) return JIT_DT_I32;
  return JIT_DT_NONE;
}
const char *rt_check_dtype_string(DLDataType d, char *buf, size_t n) {
  if (d.lanes == 1 && d.bits == 8 && d.code == RT_DL_E4M3FN) return "float8_e4m3fn";
  if (d.lanes == 1 && d.bits == 8 && d.code == RT_DL_E5M2) return "float8_e5m2";
  return rt_dtype_string(d, buf, n);
}


fi_status rt_check_qkvo(const char *fn, const DLTensor *q, const DLTensor *k,
                            const DLTensor *v, const DLTensor *out, int qo_ndim,
                            fi_kv_layout layout) {
  fi_status st;
  if ((st = rt_check_tensor(fn, "q", q, qo_ndim)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "k", k, 3)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "v", v, 3)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "out", out, qo_ndim)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "k", k)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "v", v)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "out", out)) != FI_OK) return st;
  if (layout != FI_KV_LAYOUT_NHD && layout != FI_KV_LAYOUT_HND)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: layout is %d; FI_KV_LAYOUT_NHD (0) or FI_KV_LAYOUT_HND (1) is needed", fn,
                   (int)layout);
  return FI_OK;
}

/* head_dim contiguous, start and strides (dims < last, of size > 1) in units of 16 bytes. */
fi_status rt_check_rows(const char *fn, const char *name, const DLTensor *t, int elem_bytes) {
  const int last = t->ndim - 1;
  if (t->shape[last] > 1 && rt_stride(t, last) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has head_dim stride %lld; 1 is needed", fn,
                   name, (long long)rt_stride(t, last));
  /* elements a 16-byte load or store moves: 8 of a 16-bit type, 16 of fp8 (the kernel
   * loads an fp8 cache 16 bytes at a time too, so 8 elements would be misaligned) */
  const int vec = 16 / elem_bytes;
  if ((uintptr_t)rt_data(t) % (uintptr_t)(vec * elem_bytes) != 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s starts at %p; a multiple of %d bytes is needed",
                   fn, name, (void *)rt_data(t), vec * elem_bytes);
  for (int d = 0; d < last; d++)
    if (t->shape[d] > 1 && rt_stride(t, d) % vec != 0)
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: %s has stride %lld in dimension %d; a multiple of %d elements is needed",
                     fn, name, (long long)rt_stride(t, d), d, vec);
  if (rt_extent_bytes(t) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes", fn, name);
  return FI_OK;
}

fi_status rt_check_shape(const char *fn, const char *name, const DLTensor *t, int n,
                             const int64_t *want, const char *what) {
  for (int i = 0; i < n; i++)
    if (t->shape[i] != want[i]) {
      char got[96] = "", exp[96] = "";
      size_t g = 0, e = 0;
      for (int j = 0; j < n; j++) {
        g += (size_t)snprintf(got + g, sizeof got - g, "%s%lld", j ? ", " : "", (long long)t->shape[j]);
        e += (size_t)snprintf(exp + e, sizeof exp - e, "%s%lld", j ? ", " : "", (long long)want[j]);
      }
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has shape [%s]; [%s] is needed (%s)", fn,
                     name, got, exp, what);
    }
  return FI_OK;
}

fi_status rt_check_lse(const char *fn, const DLTensor *lse, const DLTensor *q, int n,
                           const int64_t *want) {
  fi_status st;
  char b1[32];
  if ((st = rt_check_tensor(fn, "lse", lse, n)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "lse", lse)) != FI_OK) return st;
  if (rt_check_dtype(lse->dtype) != JIT_DT_F32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: lse has dtype %s; float32 is needed", fn,
                   rt_dtype_string(lse->dtype, b1, sizeof b1));
  if ((st = rt_check_shape(fn, "lse", lse, n, want, "q's rows and heads")) != FI_OK) return st;
  if (rt_extent_bytes(lse) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: lse spans more than 2^63 bytes", fn);
  return FI_OK;
}

fi_status rt_check_outputs_apart(const char *fn, const DLTensor *out, const DLTensor *lse,
                                     const DLTensor *const *ins, const char *const *names, int n) {
  for (int i = 0; i < n; i++) {
    if (!ins[i]) continue;
    if (rt_tensors_overlap(out, ins[i]))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out overlaps %s", fn, names[i]);
    if (lse && rt_tensors_overlap(lse, ins[i]))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: lse overlaps %s", fn, names[i]);
  }
  if (lse && rt_tensors_overlap(lse, out))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: lse overlaps out", fn);
  return FI_OK;
}


FI_API void fi_attention_extras_init_sized(fi_attention_extras *x, size_t size) {
  if (!x || size < sizeof x->struct_size) return;
  memset(x, 0, size < sizeof *x ? size : sizeof *x);
  x->struct_size = size;
}

/* A side input of an attention call (sinks, custom_mask): 1-D, on q's device, contiguous,
 * apart from out and lse (either may be NULL). */
static fi_status check_side(const char *fn, const char *name, const DLTensor *t, const DLTensor *q,
                            const char *qname, const DLTensor *out, const DLTensor *lse) {
  fi_status st;
  if ((st = rt_check_tensor(fn, name, t, 1)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, qname, q, name, t)) != FI_OK) return st;
  if (t->shape[0] > 1 && rt_stride(t, 0) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has stride %lld; contiguous (1) is needed", fn, name,
                   (long long)rt_stride(t, 0));
  if (out && rt_tensors_overlap(out, t)) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out overlaps %s", fn, name);
  if (lse && rt_tensors_overlap(lse, t)) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: lse overlaps %s", fn, name);
  return FI_OK;
}

fi_status rt_check_extras(const char *fn, const fi_attention_extras *x, const DLTensor *q, const char *qname,
                          int64_t hq, int64_t mask_bytes, const DLTensor *out, const DLTensor *lse,
                          const float **sinks, const uint8_t **mask) {
  fi_status st;
  char b1[32];
  *sinks = NULL;
  *mask = NULL;
  if (!x) return FI_OK;
  /* The first version's size (struct_size and sinks): a caller built against it stays
   * valid when members are added; those are read only where struct_size covers them. */
  const size_t v1 = offsetof(fi_attention_extras, sinks) + sizeof x->sinks;
  if (x->struct_size < v1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: extras->struct_size is %zu; at least %zu (fi_attention_extras_init sets it)", fn,
                   x->struct_size, v1);
  const DLTensor *t = x->sinks;
  if (t) {
    if (hq < 0)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: extras->sinks is given to the plan; sinks go to the run", fn);
    if ((st = check_side(fn, "sinks", t, q, qname, out, lse)) != FI_OK) return st;
    if (rt_check_dtype(t->dtype) != JIT_DT_F32)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: sinks has dtype %s; float32 is needed", fn,
                     rt_dtype_string(t->dtype, b1, sizeof b1));
    if (t->shape[0] != hq)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: sinks has %lld entries; one a query head (%lld) is needed", fn,
                     (long long)t->shape[0], (long long)hq);
    *sinks = (const float *)rt_data(t);
  }
  /* custom_mask, the second version's member: read where the caller's struct has it. */
  if (x->struct_size < offsetof(fi_attention_extras, custom_mask) + sizeof x->custom_mask) return FI_OK;
  if (!(t = x->custom_mask)) return FI_OK;
  if (mask_bytes == RT_MASK_AT_PLAN)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: extras->custom_mask is given to the run; a batch prefill takes its mask at plan time "
                   "(fi_batch_prefill_*_plan_ex)", fn);
  if (mask_bytes < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: extras->custom_mask is given; custom masks are taken by prefill only "
                   "(fi_single_prefill_ex, fi_batch_prefill_*_plan_ex)", fn);
  if ((st = check_side(fn, "custom_mask", t, q, qname, out, lse)) != FI_OK) return st;
  if (t->dtype.code != kDLUInt || t->dtype.bits != 8 || t->dtype.lanes != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: custom_mask has dtype %s; uint8 (packed bits) is needed", fn,
                   rt_dtype_string(t->dtype, b1, sizeof b1));
  if (t->shape[0] < mask_bytes)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: custom_mask has %lld bytes; ceil(L_q * L_kv / 8) = %lld are needed (packed bits)", fn,
                   (long long)t->shape[0], (long long)mask_bytes);
  *mask = (const uint8_t *)rt_data(t);
  return FI_OK;
}

int rt_extras_lse_base2(const fi_attention_extras *x) {
  if (!x || x->struct_size < offsetof(fi_attention_extras, lse_base2) + sizeof x->lse_base2) return 0;
  return x->lse_base2 != 0;
}

int rt_extras_head_dim_vo(const fi_attention_extras *x) {
  if (!x || x->struct_size < offsetof(fi_attention_extras, head_dim_vo) + sizeof x->head_dim_vo) return 0;
  return x->head_dim_vo;
}

fi_status rt_check_index(const char *fn, const char *name, const DLTensor *t, const DLTensor *q,
                             int64_t min_len, int exact) {
  fi_status st;
  char b1[32];
  if ((st = rt_check_tensor(fn, name, t, 1)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, name, t)) != FI_OK) return st;
  if (rt_check_dtype(t->dtype) != JIT_DT_I32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; int32 is needed", fn, name,
                   rt_dtype_string(t->dtype, b1, sizeof b1));
  if (t->shape[0] > 1 && rt_stride(t, 0) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has stride %lld; contiguous (1) is needed", fn,
                   name, (long long)rt_stride(t, 0));
  if (exact ? t->shape[0] != min_len : t->shape[0] < min_len)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has %lld entries; %s%lld are needed (the plan's)",
                   fn, name, (long long)t->shape[0], exact ? "" : "at least ", (long long)min_len);
  return FI_OK;
}

fi_status rt_check_ints(const char *fn, const char *name, const DLTensor *t, const char *ref_name,
                        const DLTensor *ref, int64_t len, const char *len_what) {
  fi_status st;
  char b1[32];
  if ((st = rt_check_tensor(fn, name, t, 1)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, ref_name, ref, name, t)) != FI_OK) return st;
  if (rt_tensor_dtype(t) != JIT_DT_I32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; int32 is needed", fn, name,
                   rt_dtype_string(t->dtype, b1, sizeof b1));
  if (len >= 0 && t->shape[0] != len)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has %lld entries; %s needs %lld", fn, name,
                   (long long)t->shape[0], len_what, (long long)len);
  if (t->shape[0] > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has %lld entries, more than 2^31-1", fn, name,
                   (long long)t->shape[0]);
  if (rt_extent_bytes(t) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes", fn, name);
  return FI_OK;
}

fi_status rt_check_workspace(const char *fn, const DLTensor *ws, int64_t *bytes) {
  fi_status st;
  if ((st = rt_check_tensor(fn, "workspace", ws, 1)) != FI_OK) return st;
  /* Checked: a wrapped product would pass for a small workspace. */
  if (__builtin_mul_overflow(ws->shape[0], (int64_t)((ws->dtype.bits * ws->dtype.lanes + 7) / 8), bytes))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace has %lld elements, more than 2^63 bytes", fn,
                   (long long)ws->shape[0]);
  if ((uintptr_t)rt_data(ws) % 256 != 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace starts at %p; 256-byte alignment is needed", fn,
                   (void *)rt_data(ws));
  if (ws->shape[0] > 1 && rt_stride(ws, 0) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace must be contiguous", fn);
  return FI_OK;
}

fi_status rt_check_paged_cache(const char *fn, const DLTensor *kc, const DLTensor *vc, int nhd,
                               int64_t page_size, int64_t num_kv_heads, int64_t head_dim,
                               int elem_bytes) {
  fi_status st;
  const int64_t want[4] = {kc->shape[0], nhd ? page_size : num_kv_heads, nhd ? num_kv_heads : page_size,
                           head_dim};
  const char *lname = nhd ? "[pages, page_size, H_kv, head_dim] (NHD), the plan's"
                          : "[pages, H_kv, page_size, head_dim] (HND), the plan's";
  if ((st = rt_check_shape(fn, "paged_k_cache", kc, 4, want, lname)) != FI_OK) return st;
  if ((st = rt_check_shape(fn, "paged_v_cache", vc, 4, want, lname)) != FI_OK) return st;
  for (int d = 0; d < 3; d++)
    if (kc->shape[d] > 1 && rt_stride(kc, d) != rt_stride(vc, d))
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: paged_v_cache has stride %lld in dimension %d but paged_k_cache %lld; "
                     "equal strides are needed",
                     fn, (long long)rt_stride(vc, d), d, (long long)rt_stride(kc, d));
  if ((st = rt_check_rows(fn, "paged_k_cache", kc, elem_bytes)) != FI_OK) return st;
  return rt_check_rows(fn, "paged_v_cache", vc, elem_bytes);
}

