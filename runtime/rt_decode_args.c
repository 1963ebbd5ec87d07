/* rt_decode_args.c: what the decode entry points share: dtype codes (fp8 included),
 * the checks of heads, dtypes, parameters and tensors, the kernel's scalar fields, the
 * tuning values they take, the launch and the plan-table upload (the kernel choice:
 * rt_decode_choose.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_decode.h"
#include "rt_decode_args.h"
#include "rt_internal.h"
#include "rt_tensor.h"

/* Heads, head_dim, dtypes and parameters every decode call shares. */
fi_status rt_dec_check_common(const char *fn, int hq, int hkv, int D, int qdt, int kvdt,
                              DLDataType qd, DLDataType kvd, const fi_attention_params *p) {
  char b1[32], b2[32];
  if (hkv < 1 || hq < 1 || hq % hkv != 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: num_qo_heads %d and num_kv_heads %d: num_qo_heads must be a positive "
                   "multiple of num_kv_heads",
                   fn, hq, hkv);
  if (hq / hkv > RT_DECODE_MAX_GROUP)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: num_qo_heads / num_kv_heads is %d; a group of 1..%d query heads per KV "
                   "head is supported",
                   fn, hq / hkv, RT_DECODE_MAX_GROUP);
  if (D != 64 && D != 128 && D != 256)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: head_dim is %d; 64, 128 or 256 is supported",
                   fn, D);
  if (qdt != JIT_DT_F16 && qdt != JIT_DT_BF16)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q has dtype %s; float16 or bfloat16 is needed",
                   fn, rt_check_dtype_string(qd, b1, sizeof b1));
  if (kvdt != qdt && kvdt != JIT_DT_E4M3 && kvdt != JIT_DT_E5M2)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: the KV cache has dtype %s; q's (%s), float8_e4m3fn or float8_e5m2 is needed",
                   fn, rt_check_dtype_string(kvd, b1, sizeof b1), rt_check_dtype_string(qd, b2, sizeof b2));
  if (!p) return FI_OK;
  if (!isfinite(p->sm_scale) || p->sm_scale < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: params->sm_scale is %g; > 0 (or 0 for 1/sqrt(head_dim)) is needed", fn, p->sm_scale);
  if (!isfinite(p->logits_soft_cap) || p->logits_soft_cap < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: params->logits_soft_cap is %g; >= 0 is needed", fn,
                   p->logits_soft_cap);
  if (p->window_left < -1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: params->window_left is %d; -1 (off) or >= 0 is needed",
                   fn, p->window_left);
  if (p->pos_encoding != FI_POS_NONE && p->pos_encoding != FI_POS_ROPE_LLAMA)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: params->pos_encoding is %d; FI_POS_NONE (0) or FI_POS_ROPE_LLAMA (1)", fn,
                   (int)p->pos_encoding);
  if (p->pos_encoding == FI_POS_ROPE_LLAMA &&
      (!isfinite(p->rope_scale) || !(p->rope_scale > 0) || !isfinite(p->rope_theta) || !(p->rope_theta > 0)))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: params->rope_scale %g and rope_theta %g must be finite and > 0", fn,
                   p->rope_scale, p->rope_theta);
  if (!isfinite(p->k_scale) || !(p->k_scale > 0) || !isfinite(p->v_scale) || !(p->v_scale > 0))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: params->k_scale %g and v_scale %g must be finite and > 0", fn, p->k_scale,
                   p->v_scale);
  return FI_OK;
}

fi_status rt_dec_check_kv_strides(const char *fn, const DLTensor *k, const DLTensor *v) {
  for (int d = 0; d < 2; d++)
    if (k->shape[d] > 1 && rt_stride(k, d) != rt_stride(v, d))
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: v has stride %lld in dimension %d but k %lld; k and v need equal strides",
                     fn, (long long)rt_stride(v, d), d, (long long)rt_stride(k, d));
  return FI_OK;
}

/* The tuning values below come from the environment read at fi_runtime_create (rt_env.c
 * parses and clamps them; README, Environment); t is rt->env.tune, or rt_tuning_default()
 * for a plan made without a runtime. */

/* Steps the kernel's L2 prefetch runs ahead of its register loads: FI_DECODE_PREFETCH
 * (0 off, the default; negative: the same distance with per-line prefetches). */
int rt_dec_prefetch_steps(const rt_tuning *t) { return t->decode_prefetch; }

/* FI_DECODE_EVICT=0 reads a 16-bit KV cache with an evict-normal L2 policy instead of
 * evict-first (fi_decode_params.kv_evict; batch plans: single decode and the call-time
 * paths keep the default). */
int rt_dec_kv_evict(const rt_tuning *t) { return t->decode_evict; }

double rt_dec_split_scale(const rt_tuning *t) { return t->decode_split; }

int rt_dec_head_prefetch(const rt_tuning *t) { return t->decode_head_prefetch; }

/* Tokens of its item a block prefetches into L2 while the previous grid in the stream
 * finishes (decode_enter in kernels/decode_enter.cuh): FI_DECODE_PRE_PREFETCH (0 off, 256
 * by default). None with FI_PDL=0: with no early start there is nothing to overlap, and
 * the round only holds the block up. */
int rt_dec_pre_prefetch(const rt_tuning *t) { return t->pdl ? t->decode_pre_prefetch : 0; }

/* The kernel's scale, soft cap and RoPE fields. */
void rt_dec_fill_scalars(fi_decode_params *k, const fi_attention_params *p, int D, int kvdt) {
  const rt_tuning def = rt_tuning_default();
  k->prefetch = def.decode_prefetch;
  k->kv_evict = def.decode_evict;
  const double LOG2E = 1.4426950408889634;
  const double sm = p->sm_scale > 0 ? p->sm_scale : 1.0 / sqrt((double)D);
  /* e4m3 is widened to f16 as value / 256: the 256 comes back in the scales. */
  const double wide = kvdt == JIT_DT_E4M3 ? 256.0 : 1.0;
  const double ks = p->k_scale * wide, vs = p->v_scale * wide;
  k->scale_log2 = (float)(sm * ks * LOG2E);
  if (p->logits_soft_cap > 0) {
    k->cap_pre = (float)(sm * ks / p->logits_soft_cap);
    k->cap_log2 = (float)(p->logits_soft_cap * LOG2E);
  } else {
    k->cap_pre = 0.0f;
    k->cap_log2 = 0.0f;
  }
  k->v_scale = (float)vs;
  for (int i = 0; i < FI_DECODE_MAX_FREQ; i++)
    k->rope_freq[i] = i < D / 2 ? (float)(1.0 / (p->rope_scale * pow(p->rope_theta, 2.0 * i / D))) : 0.0f;
}

fi_status rt_dec_launch(fi_runtime *rt, int devtype, int device, const jit_key *key, unsigned gx,
                        unsigned gy, unsigned threads, void *params, size_t bytes, void *stream) {
  rt_kernel *k;
  fi_status st = rt_kernel_for(rt, devtype, device, key, &k, NULL, NULL);
  if (st != FI_OK) return st;
  rt_launch l = {{gx, gy, 1}, {threads, 1, 1}, 0};
  return rt_launch_kernel(rt, k, &l, stream, params, bytes);
}

fi_status rt_dec_device_sms(fi_runtime *rt, int devtype, int device, int *sms) {
  const rt_device_i *be;
  void *state;
  fi_status st = rt_backend(rt, devtype, &be, &state);
  if (st != FI_OK) return st;
  if (be->sm_count(state, device, sms) != 0 || *sms <= 0)
    return rt_fail(FI_ERR_DEVICE, "the SM count of %s device %d is unknown", be->name, device);
  return FI_OK;
}

/* One plan-table upload for decode and prefill (rt_decode_args.h): decode's upload kernel
 * takes the words inside its parameter struct, FI_DECODE_UPLOAD_WORDS a launch, so a
 * plan needs no host-to-device copy (and a CUDA-graph re-plan is a kernel on the stream). */
fi_status rt_upload_words(fi_runtime *rt, int devtype, int device, int32_t *dst, const int32_t *data, int64_t n,
                          void *stream) {
  jit_key key;
  jit_decode_upload_select(&key);
  fi_decode_upload_params up;
  for (int64_t at = 0; at < n;) {
    memset(&up, 0, sizeof up);
    up.dst = dst + at;
    int64_t m = n - at;
    if (data) {
      if (m > FI_DECODE_UPLOAD_WORDS) m = FI_DECODE_UPLOAD_WORDS;
      memcpy(up.data, data + at, (size_t)m * 4);
    } else {
      up.fill = 1;
      if (m > INT32_MAX) m = INT32_MAX;
    }
    up.n = (int32_t)m;
    int64_t blocks = (m + DECODE_UPLOAD_THREADS - 1) / DECODE_UPLOAD_THREADS;
    if (blocks > 1024) blocks = 1024; /* a fill loops with the grid's stride */
    fi_status st = rt_dec_launch(rt, devtype, device, &key, (unsigned)blocks, 1, DECODE_UPLOAD_THREADS, &up,
                                 sizeof up, stream);
    if (st != FI_OK) return st;
    at += m;
  }
  return FI_OK;
}

/* Shared by decode and prefill (fi_prefill_params_init): the defaults of every attention call. */
FI_API void fi_attention_params_init(fi_attention_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->sm_scale = 0.0;
  p->logits_soft_cap = 0.0;
  p->window_left = -1;
  p->pos_encoding = FI_POS_NONE;
  p->rope_scale = 1.0;
  p->rope_theta = 1e4;
  p->k_scale = 1.0;
  p->v_scale = 1.0;
}
