/* rt_moe.c: the mixture-of-experts entry points: fi_moe_routing (argument checks, the kernel
 * for the logits' dtype, the method and the expert count, one launch of a warp a token). */
#include <math.h>
#include <string.h>

#include "moe_params.h"
#include "ops_moe.h"
#include "rt_internal.h"
#include "rt_tensor.h"

FI_API void fi_moe_routing_params_init(fi_moe_routing_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->method = FI_MOE_ROUTING_SOFTMAX_TOPK;
  p->top_k = 2;
  p->routed_scaling_factor = 1.0;
}

/* A [rows, cols] output of dtype dt with unit column stride; its row stride into *rs. */
static fi_status check_out(const char *fn, const char *name, const DLTensor *t, int dt, const char *dname,
                           int64_t rows, int64_t cols, int64_t *rs) {
  fi_status st = rt_check_tensor(fn, name, t, 2);
  if (st != FI_OK) return st;
  char b[32];
  if (rt_tensor_dtype(t) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; %s is needed", fn, name,
                   rt_dtype_string(t->dtype, b, sizeof b), dname);
  if (t->shape[0] != rows || t->shape[1] != cols)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has shape [%lld, %lld]; [%lld, %lld] (tokens, top_k) is needed",
                   fn, name, (long long)t->shape[0], (long long)t->shape[1], (long long)rows, (long long)cols);
  if (cols > 1 && rt_stride(t, 1) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has column stride %lld; 1 is needed", fn, name,
                   (long long)rt_stride(t, 1));
  *rs = rows > 1 ? rt_stride(t, 0) : cols;
  if (rows > 1 && *rs < cols)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s row stride %lld is less than top_k %lld (rows overlap)", fn,
                   name, (long long)*rs, (long long)cols);
  if (((uintptr_t)rt_data(t)) % 4)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s is not 4-byte aligned", fn, name);
  return FI_OK;
}

FI_API fi_status fi_moe_routing(fi_runtime *rt, const DLTensor *logits, const DLTensor *correction_bias,
                                const fi_moe_routing_params *p, DLTensor *expert_ids, DLTensor *weights,
                                void *stream) {
  const char *fn = "fi_moe_routing";
  fi_status st;
  char b[32];
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if (!p) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p is NULL", fn);
  if ((st = rt_check_tensor(fn, "logits", logits, 2)) != FI_OK) return st;
  const int dt = rt_tensor_dtype(logits);
  if (dt != JIT_DT_F32 && dt != JIT_DT_BF16)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: logits has dtype %s; float32 or bfloat16 is needed", fn,
                   rt_dtype_string(logits->dtype, b, sizeof b));
  const int64_t T = logits->shape[0], E = logits->shape[1];
  if (E < 1 || E > 512)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: logits has %lld experts; 1 to 512 are supported", fn,
                   (long long)E);
  if (T > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: logits has %lld tokens; at most 2^31-1", fn, (long long)T);
  if (E > 1 && rt_stride(logits, 1) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: logits has column stride %lld; 1 is needed", fn,
                   (long long)rt_stride(logits, 1));
  const int64_t lrs = T > 1 ? rt_stride(logits, 0) : E;
  if (T > 1 && lrs < E)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: logits row stride %lld is less than its %lld experts", fn,
                   (long long)lrs, (long long)E);
  if ((uintptr_t)rt_data(logits) % (uintptr_t)jit_dtype_bytes(dt))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: logits is not aligned to its %d-byte elements", fn,
                   jit_dtype_bytes(dt));
  if (p->method < 0 || p->method >= FI_MOE_METHOD_COUNT)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->method is %d; a fi_moe_routing_method (0 to %d) is needed",
                   fn, p->method, FI_MOE_METHOD_COUNT - 1);
  const int64_t kmax = E < 32 ? E : 32;
  if (p->top_k < 1 || p->top_k > kmax)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->top_k is %d; 1 to %lld is needed for %lld experts", fn,
                   p->top_k, (long long)kmax, (long long)E);
  if (!isfinite(p->routed_scaling_factor))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->routed_scaling_factor is %g; a finite value is needed", fn,
                   p->routed_scaling_factor);
  int n_group = 1, topk_group = 1;
  if (p->method == FI_MOE_DEEPSEEK_V3) {
    n_group = p->n_group, topk_group = p->topk_group;
    if (n_group < 1 || n_group > 32 || E % n_group)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->n_group is %d; 1 to 32 groups dividing the %lld experts", fn,
                     n_group, (long long)E);
    if (topk_group < 1 || topk_group > n_group || (int64_t)topk_group * (E / n_group) < p->top_k)
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: p->topk_group is %d; 1 to n_group (%d) groups holding at least top_k (%d) experts", fn,
                     topk_group, n_group, p->top_k);
  }
  const float *bias = NULL;
  if (correction_bias) {
    if (p->method != FI_MOE_DEEPSEEK_V3)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: correction_bias is given, but only DeepSeek-V3 routing uses one",
                     fn);
    if ((st = rt_check_tensor(fn, "correction_bias", correction_bias, 1)) != FI_OK) return st;
    if (rt_tensor_dtype(correction_bias) != JIT_DT_F32 || correction_bias->shape[0] != E ||
        (E > 1 && rt_stride(correction_bias, 0) != 1))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: correction_bias must be float32 [%lld], contiguous", fn,
                     (long long)E);
    if ((uintptr_t)rt_data(correction_bias) % 4)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: correction_bias is not 4-byte aligned", fn);
    if ((st = rt_check_same_device(fn, "logits", logits, "correction_bias", correction_bias)) != FI_OK) return st;
    bias = (const float *)rt_data(correction_bias);
  }
  int64_t irs, wrs;
  if ((st = check_out(fn, "expert_ids", expert_ids, JIT_DT_I32, "int32", T, p->top_k, &irs)) != FI_OK) return st;
  if ((st = check_out(fn, "weights", weights, JIT_DT_F32, "float32", T, p->top_k, &wrs)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "logits", logits, "expert_ids", expert_ids)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "logits", logits, "weights", weights)) != FI_OK) return st;
  const int64_t ie = rt_extent_bytes(expert_ids), we = rt_extent_bytes(weights);
  const uintptr_t ib = (uintptr_t)rt_data(expert_ids), wb = (uintptr_t)rt_data(weights);
  if (ie > 0 && we > 0 && ib < wb + (uint64_t)we && wb < ib + (uint64_t)ie)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: expert_ids and weights overlap", fn);
  if (T == 0) return FI_OK;

  const rt_device_i *be;
  void *state;
  if ((st = rt_backend(rt, logits->device.device_type, &be, &state)) != FI_OK) return st;
  if (E > (int64_t)MOE_ROUTE_MAX_EPL * be->warp_size)
    return rt_fail(FI_ERR_UNSUPPORTED, "%s: %lld experts exceed %d on this device", fn, (long long)E,
                   MOE_ROUTE_MAX_EPL * be->warp_size);
  jit_key key;
  jit_moe_routing_select(dt, p->method, (int)E, be->warp_size, &key);
  rt_kernel *k;
  if ((st = rt_kernel_get(rt, &key, be, logits->device.device_id, &k)) != FI_OK) return st;
  fi_moe_route_params kp;
  memset(&kp, 0, sizeof kp);
  kp.logits = rt_data(logits);
  kp.bias = bias;
  kp.ids = (int32_t *)ib;
  kp.weights = (float *)wb;
  kp.logits_stride = lrs;
  kp.ids_stride = irs;
  kp.weights_stride = wrs;
  kp.tokens = (int32_t)T;
  kp.experts = (int32_t)E;
  kp.top_k = p->top_k;
  kp.n_group = n_group;
  kp.topk_group = topk_group;
  kp.scale = (float)p->routed_scaling_factor;
  const int64_t blocks = (T + MOE_ROUTE_WARPS - 1) / MOE_ROUTE_WARPS;
  const rt_launch l = {{(unsigned)blocks, 1, 1}, {(unsigned)(MOE_ROUTE_WARPS * be->warp_size), 1, 1}, 0};
  return rt_launch_kernel(rt, k, &l, stream, &kp, sizeof kp);
}
