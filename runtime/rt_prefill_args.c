/* rt_prefill_args.c: what the prefill entry points share (rt_prefill_args.h): the checks
 * of heads, dtypes, parameters, q / out and k / v, the kernel's scalar fields and the
 * launch. */
#include "rt_prefill_args.h"

#include <stdint.h>
#include <string.h>

#include "decode_params.h"
#include "rt_decode_args.h"
#include "rt_internal.h"
#include "rt_tensor.h"

/* Heads (any group), head_dim, dtypes (one 16-bit dtype) and the parameters. */
fi_status rt_prefill_check_common(const char *fn, int64_t hq, int64_t hkv, int64_t D, int qdt, int kvdt, DLDataType qd,
                                  DLDataType kvd, const fi_prefill_params *p) {
  char b1[32], b2[32];
  if (hkv < 1 || hq < 1 || hq % hkv != 0 || hq > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: num_qo_heads %lld and num_kv_heads %lld: num_qo_heads must be a positive "
                   "multiple of num_kv_heads",
                   fn, (long long)hq, (long long)hkv);
  if (D != 64 && D != 128 && D != 256)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: head_dim is %lld; 64, 128 or 256 is supported",
                   fn, (long long)D);
  if (qdt != JIT_DT_F16 && qdt != JIT_DT_BF16)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q has dtype %s; float16 or bfloat16 is needed",
                   fn, rt_check_dtype_string(qd, b1, sizeof b1));
  const int fp8 = kvdt == JIT_DT_E4M3 || kvdt == JIT_DT_E5M2;
  if (kvdt != qdt && !fp8)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: the KV has dtype %s; q's (%s) or fp8 (e4m3, e5m2) is needed", fn,
                   rt_check_dtype_string(kvd, b1, sizeof b1), rt_check_dtype_string(qd, b2, sizeof b2));
  if (fp8 && p->attn.pos_encoding == FI_POS_ROPE_LLAMA)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: params->attn.pos_encoding is RoPE with an fp8 cache; prefill over fp8 takes no "
                   "RoPE (apply it with fi_apply_rope* before the append)",
                   fn);
  if (p->causal != 0 && p->causal != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: params->causal is %d; 0 or 1 is needed", fn, p->causal);
  /* The attention parameters as decode checks them (a group of 1 passes its head check). */
  return rt_dec_check_common(fn, (int)hkv, (int)hkv, (int)D, qdt, kvdt, qd, kvd, &p->attn);
}

void rt_prefill_fill_scalars(fi_prefill_kparams *k, const fi_prefill_params *p, int D, int kvdt) {
  fi_decode_params d;
  memset(&d, 0, sizeof d);
  rt_dec_fill_scalars(&d, &p->attn, D, kvdt);
  k->scale_log2 = d.scale_log2;
  k->cap_pre = d.cap_pre;
  k->cap_log2 = d.cap_log2;
  k->v_scale = d.v_scale;
  for (int i = 0; i < FI_PREFILL_MAX_FREQ; i++) k->rope_freq[i] = d.rope_freq[i];
  k->causal = p->causal;
  k->window_left = p->attn.window_left;
}

/* q [rows, H_qo, D], out [rows, H_qo, DV]: shapes, dtypes, row layout; lse [rows, H_qo]. */
fi_status rt_prefill_check_q_out(const char *fn, const DLTensor *q, const DLTensor *out, const DLTensor *lse, int dt,
                                 int64_t DV) {
  fi_status st;
  char b1[32], b2[32];
  if (rt_check_dtype(out->dtype) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out has dtype %s but q has %s", fn,
                   rt_check_dtype_string(out->dtype, b1, sizeof b1), rt_check_dtype_string(q->dtype, b2, sizeof b2));
  const int64_t os[3] = {q->shape[0], q->shape[1], DV};
  if ((st = rt_check_shape(fn, "out", out, 3, os, DV == q->shape[2] ? "q's shape" : "[rows, H_qo, head_dim_vo]")) !=
      FI_OK)
    return st;
  if (lse) {
    const int64_t ls[2] = {q->shape[0], q->shape[1]};
    if ((st = rt_check_lse(fn, lse, q, 2, ls)) != FI_OK) return st;
  }
  const int b = jit_dtype_bytes(dt);
  if ((st = rt_check_rows(fn, "q", q, b)) != FI_OK || (st = rt_check_rows(fn, "out", out, b)) != FI_OK)
    return st;
  return FI_OK;
}

fi_status rt_prefill_check_kv_rows(const char *fn, const DLTensor *k, const DLTensor *v, int elem_bytes, int dvo) {
  fi_status st;
  if ((st = rt_check_rows(fn, "k", k, elem_bytes)) != FI_OK || (st = rt_check_rows(fn, "v", v, elem_bytes)) != FI_OK)
    return st;
  return dvo ? FI_OK : rt_dec_check_kv_strides(fn, k, v);
}

fi_status rt_prefill_check_dvo_pair(const char *fn, int64_t D, int64_t DV, const char *vname) {
  if (DV == D || (D == 192 && DV == 128)) return FI_OK;
  return rt_fail(FI_ERR_INVALID_ARGUMENT,
                 "%s: head_dim %lld with %s %lld; V's head_dim may differ from q's and k's only as 192 with "
                 "128 (DeepSeek's MHA prefill)",
                 fn, (long long)D, vname, (long long)DV);
}

fi_status rt_prefill_check_dvo(const char *fn, int64_t D, int64_t DV, const char *vname, int qdt, int kvdt,
                               const fi_prefill_params *p, int mask) {
  fi_status st;
  if (DV == D) return FI_OK;
  if ((st = rt_prefill_check_dvo_pair(fn, D, DV, vname)) != FI_OK) return st;
  if (kvdt != qdt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s %lld with an fp8 cache: a 16-bit KV is needed", fn, vname,
                   (long long)DV);
  if (p->attn.pos_encoding == FI_POS_ROPE_LLAMA)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: params->attn.pos_encoding is RoPE with %s %lld; apply RoPE before (fi_apply_rope*)", fn,
                   vname, (long long)DV);
  if (mask)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: extras->custom_mask with %s %lld is not supported", fn, vname,
                   (long long)DV);
  return FI_OK;
}

fi_status rt_prefill_launch(fi_runtime *rt, int devtype, int device, const jit_key *key, int64_t gx, int64_t gy,
                            unsigned threads, void *params, size_t bytes, void *stream) {
  if (gx > INT32_MAX || gy > 65535)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "prefill: a grid of %lld x %lld blocks is too large",
                   (long long)gx, (long long)gy);
  return rt_dec_launch(rt, devtype, device, key, (unsigned)gx, (unsigned)gy, threads, params, bytes, stream);
}
