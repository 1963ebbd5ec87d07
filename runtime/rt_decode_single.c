/* rt_decode_single.c: fi_single_decode: argument checks, and the launch, split over the
 * tokens into one wave of blocks with the partials in stream-ordered scratch memory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_params.h"
#include "ops_decode.h"
#include "rt_decode.h"
#include "rt_decode_args.h"
#include "rt_decode_choose.h"
#include "rt_internal.h"
#include "rt_tensor.h"

/* FI_DECODE_SINGLE_SPLIT=0 runs every single decode as one block a KV head (tuning and
 * A/B; read at fi_runtime_create). */
static int split_on(const fi_runtime *rt) { return rt->env.tune.decode_single_split; }

#define SINGLE_PRE_PREFETCH_MIN_TOKENS 2048

static int64_t up256(int64_t x) { return (x + 255) & ~(int64_t)255; }

/* The API has no workspace, and one block a KV head leaves most SMs idle at long
 * lengths. So the launch splits the tokens into chunks as a batch plan splits a request
 * (rt_single_decode_chunks: one wave of this kernel's blocks), and the chunks' partials
 * live in scratch allocated and freed on the caller's stream: calls on concurrent
 * streams never share it. A second launch of the same kernel (single_merge, one block a
 * KV head) merges them. Unlike batch decode's last-block merge, this needs no counters,
 * which fresh scratch would need cleared by a memset before every call; that memset also
 * kept the kernel from starting early behind the previous one (PDL). Where the backend
 * has no scratch (ROCm, a driver without memory pools, a stream being captured into a
 * graph) or the allocation fails, the call runs unsplit. */
static fi_status launch_split(fi_runtime *rt, int devtype, int device, const jit_key *key, fi_decode_params *kp,
                              int64_t tokens, int64_t hq, int64_t D, void *stream) {
  const rt_device_i *be;
  void *state;
  rt_kernel *k;
  fi_status st = rt_kernel_for(rt, devtype, device, key, &k, &be, &state);
  if (st != FI_OK) return st;
  const unsigned threads = 32u * (unsigned)key->v[DECODE_P_WARPS];
  const int hkv = kp->num_kv_heads;
  int n = 1, chunk = (int)tokens;
  if (split_on(rt) && tokens >= RT_SINGLE_SPLIT_MIN_TOKENS) { /* no occupancy query below */
    int resident = 0;
    if ((st = rt_kernel_resident(rt, k, (int)threads, &resident)) != FI_OK) return st;
    n = rt_single_decode_chunks(tokens, hkv, resident, &chunk);
  }
  kp->single_chunk = chunk; /* (one chunk: the kernel reads to kv_len) */
  /* With no memset before it, the grid can start early behind the stream's previous kernel
   * (PDL), as batch decode's: its warps 1.. then prefetch their tokens into L2 while warp 0
   * waits. Only from SINGLE_PRE_PREFETCH_MIN_TOKENS: H100, back-to-back calls at 32/8,
   * L=8192 4-6% faster with it, 32768 3%, 2048 level, 512 1 us (8%) slower. */
  kp->pre_prefetch = tokens >= SINGLE_PRE_PREFETCH_MIN_TOKENS ? rt_dec_pre_prefetch(&rt->env.tune) : 0;
  void *scratch = NULL;
  if (n > 1) {
    const int64_t o_bytes = up256((int64_t)n * hq * D * 2);
    const int64_t bytes = o_bytes + up256((int64_t)n * hq * 4);
    char err[512] = "";
    const int rc = rt_device_scratch_alloc(be, state, device, (size_t)bytes, stream, &scratch, err, sizeof err);
    if (rc == 0) {
      kp->num_items = n;
      kp->partial_o = scratch;
      kp->partial_lse = (float *)((char *)scratch + o_bytes);
    } else {
      if (rc < 0)
        rt_log(rt, RT_LOG_WARN, "fi_single_decode: no scratch for %d chunks (%lld bytes), running unsplit: %s",
               n, (long long)bytes, err);
      scratch = NULL;
    }
  }
  rt_launch l = {{(unsigned)kp->num_items, (unsigned)hkv, 1}, {threads, 1, 1}, 0};
  st = rt_launch_kernel(rt, k, &l, stream, kp, sizeof *kp);
  if (scratch) {
    if (st == FI_OK) {
      kp->single_merge = 1;
      kp->pre_prefetch = 0; /* it reads no KV */
      l.grid[0] = 1;
      st = rt_launch_kernel(rt, k, &l, stream, kp, sizeof *kp);
    }
    char err[512] = "";
    /* Freed in stream order after the launches (also after a failed one: nothing uses it). */
    if (rt_device_scratch_free(be, state, device, scratch, stream, err, sizeof err) != 0 && st == FI_OK)
      st = rt_fail(FI_ERR_DEVICE, "fi_single_decode: freeing the split scratch on %s device %d: %s", be->name,
                   device, err);
  }
  return st;
}

FI_API fi_status fi_single_decode(fi_runtime *rt, const DLTensor *q, const DLTensor *k,
                                  const DLTensor *v, DLTensor *out, DLTensor *lse,
                                  fi_kv_layout layout, const fi_attention_params *p,
                                  void *stream) {
  return fi_single_decode_ex(rt, q, k, v, out, lse, layout, p, NULL, stream);
}

FI_API fi_status fi_single_decode_ex(fi_runtime *rt, const DLTensor *q, const DLTensor *k,
                                     const DLTensor *v, DLTensor *out, DLTensor *lse,
                                     fi_kv_layout layout, const fi_attention_params *p,
                                     const fi_attention_extras *x, void *stream) {
  const char *fn = "fi_single_decode";
  fi_status st;
  char b1[32], b2[32];
  fi_attention_params defaults;
  if (!p) {
    fi_attention_params_init(&defaults);
    p = &defaults;
  }
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_qkvo(fn, q, k, v, out, 2, layout)) != FI_OK) return st;
  const int qdt = rt_check_dtype(q->dtype), kvdt = rt_check_dtype(k->dtype);
  if (qdt != JIT_DT_F16 && qdt != JIT_DT_BF16)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q has dtype %s; float16 or bfloat16 is needed",
                   fn, rt_check_dtype_string(q->dtype, b1, sizeof b1));
  if (rt_check_dtype(v->dtype) != kvdt || v->dtype.bits != k->dtype.bits)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: v has dtype %s but k has %s", fn,
                   rt_check_dtype_string(v->dtype, b1, sizeof b1), rt_check_dtype_string(k->dtype, b2, sizeof b2));
  if (rt_check_dtype(out->dtype) != qdt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out has dtype %s but q has %s", fn,
                   rt_check_dtype_string(out->dtype, b1, sizeof b1), rt_check_dtype_string(q->dtype, b2, sizeof b2));
  const int64_t hq = q->shape[0], D = q->shape[1];
  const int64_t L = layout == FI_KV_LAYOUT_NHD ? k->shape[0] : k->shape[1];
  const int64_t hkv = layout == FI_KV_LAYOUT_NHD ? k->shape[1] : k->shape[0];
  if (hq > INT32_MAX || hkv > INT32_MAX || L > INT32_MAX || D > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q or k has a dimension of 2^31 or more", fn);
  if ((st = rt_dec_check_common(fn, (int)hq, (int)hkv, (int)D, qdt, kvdt, q->dtype, k->dtype, p)) != FI_OK)
    return st;
  const char *lname = layout == FI_KV_LAYOUT_NHD ? "[L, H_kv, head_dim] (NHD)" : "[H_kv, L, head_dim] (HND)";
  if (k->shape[2] != D)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: k has head_dim %lld but q %lld", fn,
                   (long long)k->shape[2], (long long)D);
  if ((st = rt_check_shape(fn, "v", v, 3, k->shape, lname)) != FI_OK) return st;
  const int64_t oshape[2] = {hq, D};
  if ((st = rt_check_shape(fn, "out", out, 2, oshape, "q's shape")) != FI_OK) return st;
  if (lse && (st = rt_check_lse(fn, lse, q, 1, oshape)) != FI_OK) return st;
  const int kvb = jit_dtype_bytes(kvdt), qb = jit_dtype_bytes(qdt);
  if ((st = rt_check_rows(fn, "q", q, qb)) != FI_OK || (st = rt_check_rows(fn, "k", k, kvb)) != FI_OK ||
      (st = rt_check_rows(fn, "v", v, kvb)) != FI_OK || (st = rt_check_rows(fn, "out", out, qb)) != FI_OK)
    return st;
  if ((st = rt_dec_check_kv_strides(fn, k, v)) != FI_OK) return st;
  const DLTensor *ins[3] = {q, k, v};
  static const char *const in_names[3] = {"q", "k", "v"};
  if ((st = rt_check_outputs_apart(fn, out, lse, ins, in_names, 3)) != FI_OK) return st;
  const float *sinks;
  const uint8_t *mask;
  if ((st = rt_check_extras(fn, x, q, "q", hq, RT_MASK_NONE, out, lse, &sinks, &mask)) != FI_OK) return st;
  if (hq == 0) return FI_OK;

  fi_decode_params kp;
  memset(&kp, 0, sizeof kp);
  rt_dec_fill_scalars(&kp, p, (int)D, kvdt);
  kp.q = rt_data(q);
  kp.out = rt_data(out);
  kp.lse = lse ? (float *)rt_data(lse) : NULL;
  kp.lse_log2 = rt_extras_lse_base2(x);
  kp.sinks = sinks;
  kp.k = rt_data(k);
  kp.v = rt_data(v);
  kp.q_stride[1] = rt_stride(q, 0);
  kp.out_stride[1] = rt_stride(out, 0);
  kp.lse_stride[1] = lse ? rt_stride(lse, 0) : 0;
  const int sd = layout == FI_KV_LAYOUT_NHD ? 0 : 1, hd = 1 - sd;
  kp.kv_stride_slot = rt_stride(k, sd);
  kp.kv_stride_head = rt_stride(k, hd);
  kp.num_items = 1;
  /* Groups above 16: grid heads of group / chunks rows, each reading KV head y / chunks. */
  const int chunks = rt_decode_group_chunks((int)hq, (int)hkv);
  kp.num_kv_heads = (int32_t)(hkv * chunks);
  kp.group = (int32_t)(hq / hkv / chunks);
  kp.kv_head_div = chunks;
  kp.page_size = 1;
  kp.kv_len = (int32_t)L;
  kp.single_lo = p->window_left >= 0 && L - 1 - p->window_left > 0 ? (int32_t)(L - 1 - p->window_left) : 0;
  jit_key key;
  jit_decode_select(1, qdt, kvdt, (int)D, kp.group, p->pos_encoding == FI_POS_ROPE_LLAMA, 0, &key);
  return launch_split(rt, q->device.device_type, q->device.device_id, &key, &kp, L - kp.single_lo, hq, D,
                      stream);
}

