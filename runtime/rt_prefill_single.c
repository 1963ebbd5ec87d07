/* rt_prefill_single.c: fi_single_prefill: one request's prefill attention over contiguous
 * K and V (its checks, its kernel from rt_prefill_pick_kernel, one launch); batch prefill:
 * rt_prefill.c. */
#include <stdint.h>
#include <string.h>

#include "fi_runtime.h"
#include "ops_prefill.h"
#include "prefill_params.h"
#include "rt_check.h"
#include "rt_internal.h"
#include "rt_prefill_args.h"
#include "rt_tensor.h"

FI_API fi_status fi_single_prefill(fi_runtime *rt, const DLTensor *q, const DLTensor *k,
                                   const DLTensor *v, DLTensor *out, DLTensor *lse,
                                   fi_kv_layout layout, const fi_prefill_params *p, void *stream) {
  return fi_single_prefill_ex(rt, q, k, v, out, lse, layout, p, NULL, stream);
}

FI_API fi_status fi_single_prefill_ex(fi_runtime *rt, const DLTensor *q, const DLTensor *k,
                                      const DLTensor *v, DLTensor *out, DLTensor *lse,
                                      fi_kv_layout layout, const fi_prefill_params *p,
                                      const fi_attention_extras *x, void *stream) {
  const char *fn = "fi_single_prefill";
  fi_status st;
  char b1[32], b2[32];
  fi_prefill_params defaults;
  if (!p) {
    fi_prefill_params_init(&defaults);
    p = &defaults;
  }
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_qkvo(fn, q, k, v, out, 3, layout)) != FI_OK) return st;
  const int qdt = rt_check_dtype(q->dtype), kvdt = rt_check_dtype(k->dtype);
  if (rt_check_dtype(v->dtype) != kvdt || v->dtype.bits != k->dtype.bits)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: v has dtype %s but k has %s", fn,
                   rt_check_dtype_string(v->dtype, b1, sizeof b1), rt_check_dtype_string(k->dtype, b2, sizeof b2));
  const int nhd = layout == FI_KV_LAYOUT_NHD;
  const int64_t Lq = q->shape[0], hq = q->shape[1], D = q->shape[2];
  const int64_t Lkv = nhd ? k->shape[0] : k->shape[1], hkv = nhd ? k->shape[1] : k->shape[0];
  /* V's head_dim may differ (192 / 128): the checks of the head dims are V's then */
  const int64_t DV = v->shape[2], dvo = DV != D && D == 192 && DV == 128;
  if ((st = rt_prefill_check_dvo_pair(fn, D, DV, "v's head_dim")) != FI_OK) return st;
  if ((st = rt_prefill_check_common(fn, hq, hkv, dvo ? DV : D, qdt, kvdt, q->dtype, k->dtype, p)) != FI_OK) return st;
  if (k->shape[2] != D)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: k has head_dim %lld but q %lld", fn,
                   (long long)k->shape[2], (long long)D);
  const char *lname = nhd ? "[L_kv, H_kv, head_dim] (NHD)" : "[H_kv, L_kv, head_dim] (HND)";
  const int64_t vs[3] = {k->shape[0], k->shape[1], DV};
  if ((st = rt_check_shape(fn, "v", v, 3, vs, lname)) != FI_OK) return st;
  if ((st = rt_prefill_check_q_out(fn, q, out, lse, qdt, DV)) != FI_OK) return st;
  if ((st = rt_prefill_check_kv_rows(fn, k, v, jit_dtype_bytes(kvdt), DV != D)) != FI_OK) return st;
  const int64_t group = hq / hkv;
  if (Lq * group > INT32_MAX || Lkv > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: L_q x group (%lld) and L_kv (%lld) must be below 2^31", fn,
                   (long long)(Lq * group), (long long)Lkv);
  if (p->causal && Lq > Lkv)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: q has L_q = %lld query tokens but k has L_kv = %lld; a causal prefill "
                   "needs L_q <= L_kv (the query tokens are the last of the KV)",
                   fn, (long long)Lq, (long long)Lkv);
  const DLTensor *ins[3] = {q, k, v};
  static const char *const in_names[3] = {"q", "k", "v"};
  if ((st = rt_check_outputs_apart(fn, out, lse, ins, in_names, 3)) != FI_OK) return st;
  const float *sinks;
  const uint8_t *mask;
  if ((st = rt_check_extras(fn, x, q, "q", hq, (Lq * Lkv + 7) / 8, out, lse, &sinks, &mask)) != FI_OK) return st;
  if ((st = rt_prefill_check_dvo(fn, D, DV, "v's head_dim", qdt, kvdt, p, mask != NULL)) != FI_OK) return st;
  if (Lq == 0) return FI_OK;

  fi_prefill_kparams kp;
  memset(&kp, 0, sizeof kp);
  rt_prefill_fill_scalars(&kp, p, (int)D, kvdt);
  kp.q = rt_data(q);
  kp.out = rt_data(out);
  kp.lse = lse ? (float *)rt_data(lse) : NULL;
  kp.lse_log2 = rt_extras_lse_base2(x);
  kp.sinks = sinks;
  kp.custom_mask = mask;
  kp.k = rt_data(k);
  kp.v = rt_data(v);
  kp.q_stride_tok = rt_stride(q, 0);
  kp.q_stride_head = rt_stride(q, 1);
  kp.out_stride_tok = rt_stride(out, 0);
  kp.out_stride_head = rt_stride(out, 1);
  kp.lse_stride_tok = lse ? rt_stride(lse, 0) : 0;
  kp.lse_stride_head = lse ? rt_stride(lse, 1) : 0;
  kp.kv_stride_slot = rt_stride(k, nhd ? 0 : 1);
  kp.kv_stride_head = rt_stride(k, nhd ? 1 : 0);
  kp.v_stride_slot = rt_stride(v, nhd ? 0 : 1);
  kp.v_stride_head = rt_stride(v, nhd ? 1 : 0);
  kp.num_items = 0;
  kp.num_kv_heads = (int32_t)hkv;
  kp.group = (int32_t)group;
  kp.page_size = 1;
  kp.q_len = (int32_t)Lq;
  kp.kv_len = (int32_t)Lkv;
  jit_key key;
  int qt;
  if (DV != D) { /* the dvo kernel (mma.sync), the rule's q tile */
    jit_prefill_dvo_select(1, qdt, (int)D, (int)DV, jit_prefill_q_tile((int)D, Lq * group), &key);
    qt = jit_prefill_key_q_tile(&key);
  } else {
    qt = rt_prefill_pick_kernel(rt, q->device.device_type, q->device.device_id, 1, qdt, kvdt, (int)D, Lq * group, Lkv,
                                p->attn.pos_encoding == FI_POS_ROPE_LLAMA, p->attn.logits_soft_cap != 0, mask != NULL,
                                NULL, &key);
  }
  return rt_prefill_launch(rt, q->device.device_type, q->device.device_id, &key, (Lq * group + qt - 1) / qt, hkv,
                jit_prefill_threads(&key), &kp, sizeof kp, stream);
}
