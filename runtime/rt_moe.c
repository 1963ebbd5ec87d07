/* rt_moe.c: the mixture-of-experts entry points: fi_moe_routing (argument checks, the kernel
 * for the logits' dtype, the method and the expert count, one launch of a warp a token). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jit_registry.h"
#include "moe_params.h"
#include "ops_moe.h"
#include "rt_internal.h"
#include "rt_tensor.h"
#include "rt_tune.h"
#include "rt_autotune.h"

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

/* ---- the sort ---- */

FI_API int64_t fi_moe_max_tiles(int64_t num_tokens, int top_k, int local_num_experts, int tile_size) {
  if (num_tokens < 0 || num_tokens > INT32_MAX || top_k < 1 || top_k > 32 || local_num_experts < 1 ||
      tile_size < 1)
    return -1;
  const int64_t R = num_tokens * top_k, L = local_num_experts;
  return R <= L ? R : (R + (int64_t)(tile_size - 1) * L) / tile_size;
}

static fi_status check_sort_params(const char *fn, const fi_moe_sort_params *p) {
  if (!p) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p is NULL", fn);
  if (p->tile_size != 64 && p->tile_size != 128 && p->tile_size != 256)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->tile_size is %d; 64, 128 or 256 is needed", fn, p->tile_size);
  if (p->local_num_experts < 1 || p->local_num_experts > FI_MOE_SORT_MAX_EXPERTS)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->local_num_experts is %d; 1 to %d is supported", fn,
                   p->local_num_experts, FI_MOE_SORT_MAX_EXPERTS);
  if (p->num_experts < 1 || p->local_expert_offset < 0 ||
      (int64_t)p->local_expert_offset + p->local_num_experts > p->num_experts)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: p->local_expert_offset %d + p->local_num_experts %d must lie within p->num_experts %d",
                   fn, p->local_expert_offset, p->local_num_experts, p->num_experts);
  return FI_OK;
}

FI_API fi_status fi_moe_sort_workspace_size(fi_runtime *rt, int64_t num_tokens, int top_k,
                                            const fi_moe_sort_params *p, size_t *bytes) {
  const char *fn = "fi_moe_sort_workspace_size";
  fi_status st;
  (void)rt;
  if ((st = check_sort_params(fn, p)) != FI_OK) return st;
  if (!bytes) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
  if (num_tokens < 0 || top_k < 1 || top_k > 32 || num_tokens * top_k > INT32_MAX / 2)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: num_tokens %lld x top_k %d is out of range", fn,
                   (long long)num_tokens, top_k);
  int32_t b, c;
  jit_moe_sort_grid(num_tokens * top_k, &b, &c);
  *bytes = (size_t)(((int64_t)b * p->local_num_experts * 4 + 255) / 256 * 256);
  return FI_OK;
}

/* A contiguous int32 device tensor of the given shape on dev (ref's device), whose data
 * goes into *ptr. */
static fi_status check_i32(const char *fn, const char *name, const DLTensor *t, int ndim, const int64_t *shape,
                           DLDevice dev, const char *ref, int32_t **ptr) {
  fi_status st = rt_check_tensor(fn, name, t, ndim);
  if (st != FI_OK) return st;
  char b[32];
  if (rt_tensor_dtype(t) != JIT_DT_I32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; int32 is needed", fn, name,
                   rt_dtype_string(t->dtype, b, sizeof b));
  for (int i = 0; i < ndim; i++)
    if (t->shape[i] != shape[i])
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has shape[%d] %lld; %lld is needed", fn, name, i,
                     (long long)t->shape[i], (long long)shape[i]);
  if (ndim == 2 && shape[0] > 1 && shape[1] > 0 && rt_stride(t, 0) != shape[1])
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s must be contiguous", fn, name);
  if (shape[ndim - 1] > 1 && rt_stride(t, ndim - 1) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s must be contiguous", fn, name);
  if (t->device.device_type != dev.device_type || t->device.device_id != dev.device_id)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s is on another device than %s", fn, name, ref);
  *ptr = (int32_t *)rt_data(t);
  return FI_OK;
}

FI_API fi_status fi_moe_sort(fi_runtime *rt, const DLTensor *expert_ids, const fi_moe_sort_params *p,
                             DLTensor *workspace, const fi_moe_sort_outputs *out, void *stream) {
  const char *fn = "fi_moe_sort";
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = check_sort_params(fn, p)) != FI_OK) return st;
  if (!out) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  if ((st = rt_check_tensor(fn, "expert_ids", expert_ids, 2)) != FI_OK) return st;
  const int64_t T = expert_ids->shape[0], K = expert_ids->shape[1];
  if (K < 1 || K > 32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: expert_ids has top_k %lld; 1 to 32 is needed", fn, (long long)K);
  if (T * K > INT32_MAX / 2)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: expert_ids has %lld routes; at most 2^30", fn, (long long)(T * K));
  const DLDevice dev = expert_ids->device;
  fi_moe_sort_params_k kp;
  memset(&kp, 0, sizeof kp);
  int32_t *ids;
  const int64_t max_tiles = fi_moe_max_tiles(T, (int)K, p->local_num_experts, p->tile_size);
  const int64_t s_ids[2] = {T, K}, s_tiles[1] = {max_tiles}, s_rows[1] = {max_tiles * p->tile_size}, s_one[1] = {1};
  if ((st = check_i32(fn, "expert_ids", expert_ids, 2, s_ids, dev, "expert_ids", &ids)) != FI_OK) return st;
  kp.ids = ids;
  if ((st = check_i32(fn, "out->tile_idx_to_expert_idx", out->tile_idx_to_expert_idx, 1, s_tiles, dev,
                      "expert_ids", &kp.tile_expert)) != FI_OK ||
      (st = check_i32(fn, "out->tile_idx_to_mn_limit", out->tile_idx_to_mn_limit, 1, s_tiles, dev,
                      "expert_ids", &kp.tile_mn_limit)) != FI_OK ||
      (st = check_i32(fn, "out->expanded_idx_to_permuted_idx", out->expanded_idx_to_permuted_idx, 2, s_ids, dev,
                      "expert_ids", &kp.e2p)) != FI_OK ||
      (st = check_i32(fn, "out->permuted_idx_to_expanded_idx", out->permuted_idx_to_expanded_idx, 1, s_rows, dev,
                      "expert_ids", &kp.p2e)) != FI_OK ||
      (st = check_i32(fn, "out->num_non_exiting_tiles", out->num_non_exiting_tiles, 1, s_one, dev,
                      "expert_ids", &kp.num_tiles)) != FI_OK ||
      (st = check_i32(fn, "out->total_num_padded_tokens", out->total_num_padded_tokens, 1, s_one, dev,
                      "expert_ids", &kp.total_padded)) != FI_OK)
    return st;
  size_t need;
  if ((st = fi_moe_sort_workspace_size(rt, T, (int)K, p, &need)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "workspace", workspace, 1)) != FI_OK) return st;
  const int64_t wsb = rt_extent_bytes(workspace);
  if (wsb < (int64_t)need)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace has %lld bytes; %zu are needed (fi_moe_sort_workspace_size)",
                   fn, (long long)wsb, need);
  if ((uintptr_t)rt_data(workspace) % 256)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace is not 256-byte aligned", fn);
  kp.counts = (int32_t *)rt_data(workspace);
  /* Every output apart from every other and from the ids and the workspace. */
  const DLTensor *all[8] = {expert_ids, workspace, out->tile_idx_to_expert_idx, out->tile_idx_to_mn_limit,
                            out->expanded_idx_to_permuted_idx, out->permuted_idx_to_expanded_idx,
                            out->num_non_exiting_tiles, out->total_num_padded_tokens};
  static const char *const names[8] = {"expert_ids", "workspace", "tile_idx_to_expert_idx", "tile_idx_to_mn_limit",
                                       "expanded_idx_to_permuted_idx", "permuted_idx_to_expanded_idx",
                                       "num_non_exiting_tiles", "total_num_padded_tokens"};
  for (int i = 0; i < 8; i++)
    for (int j = i + 1; j < 8; j++) {
      const uintptr_t a = (uintptr_t)rt_data(all[i]), b = (uintptr_t)rt_data(all[j]);
      const int64_t na = i == 1 ? (int64_t)need : rt_extent_bytes(all[i]), nb = j == 1 ? (int64_t)need : rt_extent_bytes(all[j]);
      if (na > 0 && nb > 0 && a < b + (uint64_t)nb && b < a + (uint64_t)na)
        return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s and %s overlap", fn, names[i], names[j]);
    }
  kp.routes = (int32_t)(T * K);
  jit_moe_sort_grid(T * K, &kp.blocks, &kp.chunk);
  kp.expert_offset = p->local_expert_offset;
  kp.local_experts = p->local_num_experts;
  kp.tile_size = p->tile_size;
  kp.max_tiles = (int32_t)max_tiles;

  const rt_device_i *be;
  void *state;
  if ((st = rt_backend(rt, dev.device_type, &be, &state)) != FI_OK) return st;
  /* One block: the place kernel alone; more: the count kernel first. */
  for (int phase = kp.blocks > 1 ? 0 : 1; phase < 2; phase++) {
    jit_key key;
    jit_moe_sort_select(phase, &key);
    rt_kernel *k;
    if ((st = rt_kernel_get(rt, &key, be, dev.device_id, &k)) != FI_OK) return st;
    const rt_launch l = {{(unsigned)kp.blocks, 1, 1}, {1024, 1, 1}, 0};
    if ((st = rt_launch_kernel(rt, k, &l, stream, &kp, sizeof kp)) != FI_OK) return st;
  }
  return FI_OK;
}

/* ---- permute and finalize ---- */

/* A [rows, hidden] tensor of dtype dt with unit column stride; its row stride into *rs. */
static fi_status check_rows2d(const char *fn, const char *name, const DLTensor *t, int dt, int64_t rows,
                              int64_t hidden, int64_t *rs) {
  fi_status st = rt_check_tensor(fn, name, t, 2);
  if (st != FI_OK) return st;
  char b1[32];
  if (rt_tensor_dtype(t) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; the rows' dtype is needed", fn, name,
                   rt_dtype_string(t->dtype, b1, sizeof b1));
  if (t->shape[0] != rows || t->shape[1] != hidden)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has shape [%lld, %lld]; [%lld, %lld] is needed", fn, name,
                   (long long)t->shape[0], (long long)t->shape[1], (long long)rows, (long long)hidden);
  if (hidden > 1 && rt_stride(t, 1) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has column stride %lld; 1 is needed", fn, name,
                   (long long)rt_stride(t, 1));
  *rs = rows > 1 ? rt_stride(t, 0) : hidden;
  if (rows > 1 && *rs < hidden)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s row stride %lld is less than hidden %lld (rows overlap)", fn,
                   name, (long long)*rs, (long long)hidden);
  return FI_OK;
}

static fi_status check_dtype_rows(const char *fn, const DLTensor *t, int *dt) {
  char b[32];
  *dt = rt_tensor_dtype(t);
  if (*dt != JIT_DT_F16 && *dt != JIT_DT_BF16 && *dt != JIT_DT_F32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the rows have dtype %s; float16, bfloat16 or float32 is needed", fn,
                   rt_dtype_string(t->dtype, b, sizeof b));
  return FI_OK;
}

static fi_status launch_combine(fi_runtime *rt, int kind, int dt, const DLTensor *a, const DLTensor *b,
                                int64_t as, int64_t bs, int64_t hidden, int64_t blocks, void *params, size_t bytes,
                                void *stream) {
  const void *ptrs[2] = {rt_data(a), rt_data(b)};
  const int64_t strides[2] = {as, bs};
  const int vec = rt_pick_vec(jit_dtype_bytes(dt), hidden, ptrs, 2, strides, 2);
  jit_key key;
  jit_moe_combine_select(kind, dt, vec, &key);
  rt_kernel *k;
  const rt_device_i *be;
  void *state;
  fi_status st = rt_kernel_for(rt, a->device.device_type, a->device.device_id, &key, &k, &be, &state);
  if (st != FI_OK) return st;
  return rt_launch_1d(rt, k, blocks, MOE_COMBINE_THREADS, stream, params, bytes);
}

FI_API fi_status fi_moe_permute(fi_runtime *rt, const DLTensor *x, const DLTensor *permuted_idx_to_expanded_idx,
                                const DLTensor *num_non_exiting_tiles, int top_k, int tile_size, DLTensor *out,
                                void *stream) {
  const char *fn = "fi_moe_permute";
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_tensor(fn, "x", x, 2)) != FI_OK) return st;
  int dt;
  if ((st = check_dtype_rows(fn, x, &dt)) != FI_OK) return st;
  if (top_k < 1 || top_k > 32) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: top_k is %d; 1 to 32 is needed", fn, top_k);
  if (tile_size != 64 && tile_size != 128 && tile_size != 256)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: tile_size is %d; 64, 128 or 256 is needed", fn, tile_size);
  const int64_t T = x->shape[0], H = x->shape[1];
  int32_t *p2e, *nt;
  if ((st = rt_check_tensor(fn, "permuted_idx_to_expanded_idx", permuted_idx_to_expanded_idx, 1)) != FI_OK) return st;
  const int64_t rows = permuted_idx_to_expanded_idx->shape[0];
  if (rows % tile_size || rows > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: permuted_idx_to_expanded_idx has %lld rows; whole tiles of %d", fn,
                   (long long)rows, tile_size);
  const int64_t s_rows[1] = {rows}, s_one[1] = {1};
  if ((st = check_i32(fn, "permuted_idx_to_expanded_idx", permuted_idx_to_expanded_idx, 1, s_rows, x->device, "x", &p2e)) !=
          FI_OK ||
      (st = check_i32(fn, "num_non_exiting_tiles", num_non_exiting_tiles, 1, s_one, x->device, "x", &nt)) != FI_OK)
    return st;
  int64_t xs, os;
  if ((st = check_rows2d(fn, "x", x, dt, T, H, &xs)) != FI_OK) return st;
  if ((st = check_rows2d(fn, "out", out, dt, rows, H, &os)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "x", x, "out", out)) != FI_OK) return st;
  if (rt_tensors_overlap(x, out)) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out overlaps x", fn);
  if (H > INT32_MAX || T * (int64_t)top_k > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: x's shape exceeds 2^31-1", fn);
  if (rows == 0 || H == 0) return FI_OK;
  fi_moe_permute_params kp = {rt_data(x), rt_data(out), p2e, nt, xs, os, (int32_t)rows, tile_size, top_k, (int32_t)H};
  return launch_combine(rt, 0, dt, x, out, xs, os, H, rows, &kp, sizeof kp, stream);
}

FI_API fi_status fi_moe_finalize(fi_runtime *rt, const DLTensor *y, const DLTensor *expanded_idx_to_permuted_idx,
                                 const DLTensor *weights, int accumulate, DLTensor *out, void *stream) {
  const char *fn = "fi_moe_finalize";
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_tensor(fn, "y", y, 2)) != FI_OK) return st;
  int dt;
  if ((st = check_dtype_rows(fn, y, &dt)) != FI_OK) return st;
  if (accumulate != 0 && accumulate != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: accumulate is %d; 0 or 1 is needed", fn, accumulate);
  if ((st = rt_check_tensor(fn, "expanded_idx_to_permuted_idx", expanded_idx_to_permuted_idx, 2)) != FI_OK) return st;
  const int64_t T = expanded_idx_to_permuted_idx->shape[0], K = expanded_idx_to_permuted_idx->shape[1];
  const int64_t rows = y->shape[0], H = y->shape[1];
  if (K < 1 || K > 32) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: expanded_idx_to_permuted_idx has top_k %lld; 1 to 32", fn, (long long)K);
  const int64_t s_ids[2] = {T, K};
  int32_t *e2p;
  if ((st = check_i32(fn, "expanded_idx_to_permuted_idx", expanded_idx_to_permuted_idx, 2, s_ids, y->device, "y", &e2p)) != FI_OK)
    return st;
  int64_t ws;
  if ((st = check_out(fn, "weights", weights, JIT_DT_F32, "float32", T, K, &ws)) != FI_OK) return st;
  if (T > 1 && ws != K) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: weights must be contiguous", fn);
  int64_t ys, os;
  if ((st = check_rows2d(fn, "y", y, dt, rows, H, &ys)) != FI_OK) return st;
  if ((st = check_rows2d(fn, "out", out, dt, T, H, &os)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "y", y, "out", out)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "y", y, "weights", weights)) != FI_OK) return st;
  if (rt_tensors_overlap(y, out)) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out overlaps y", fn);
  if (H > INT32_MAX || T > INT32_MAX || rows > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: a shape exceeds 2^31-1", fn);
  if (T == 0 || H == 0) return FI_OK;
  fi_moe_finalize_params kp = {rt_data(y), rt_data(out), e2p, (const float *)rt_data(weights), ys, os,
                               (int32_t)T, (int32_t)K, (int32_t)H, accumulate};
  return launch_combine(rt, 1, dt, y, out, ys, os, H, T, &kp, sizeof kp, stream);
}

/* ---- the experts' grouped GEMM ---- */

FI_API void fi_moe_gemm_params_init(fi_moe_gemm_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->tile_size = 128;
  p->activation = FI_MOE_GEMM_PLAIN;
}

/* A 2-byte-element tensor's row stride and alignment for the GEMM's 16-byte copies. */
static fi_status check_gemm_rows(const char *fn, const char *name, const DLTensor *t, int64_t rs, int ebytes) {
  if (rs % 8)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s row stride %lld is not a multiple of 8 elements", fn, name,
                   (long long)rs);
  return rt_check_aligned(fn, name, t, ebytes);
}

/* The stored tactics' shape of a grouped GEMM, from rt_moe_gemm_fields' numbers. */
enum { GF_DTYPE, GF_K, GF_N, GF_EXPERTS, GF_TOPK, GF_GATED, GF_GATHER, GF_TILE, GF_COUNT };
static void gemm_shape(const int64_t *f, char *buf, size_t n) {
  snprintf(buf, n, "dtype=%s;k=%lld;n=%lld;experts=%lld;top_k=%lld;gated=%lld;gather=%lld;tile=%lld",
           f[GF_DTYPE] == JIT_DT_BF16 ? "bf16" : "f16", (long long)f[GF_K], (long long)f[GF_N],
           (long long)f[GF_EXPERTS], (long long)f[GF_TOPK], (long long)f[GF_GATED], (long long)f[GF_GATHER],
           (long long)f[GF_TILE]);
}

void rt_moe_gemm_shape(int dtype, int64_t k, int64_t n, int64_t experts, int64_t top_k, int gated, int gather,
                       int tile, char *buf, size_t len) {
  const int64_t f[GF_COUNT] = {dtype, k, n, experts, top_k, gated, gather, tile};
  gemm_shape(f, buf, len);
}

fi_status rt_moe_gemm(fi_runtime *rt, const DLTensor *a, const DLTensor *weights, const fi_moe_sort_outputs *tables,
                      const fi_moe_gemm_params *p, DLTensor *out, void *stream, const jit_moe_gemm_tactic *force) {
  const char *fn = "fi_moe_grouped_gemm";
  fi_status st;
  char b[32];
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if (!p) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p is NULL", fn);
  if (!tables) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: tables is NULL", fn);
  const int ts = p->tile_size, gated = p->activation == FI_MOE_GEMM_SWIGLU;
  if (ts != 64 && ts != 128 && ts != 256)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->tile_size is %d; 64, 128 or 256 is needed", fn, ts);
  if (p->activation != FI_MOE_GEMM_PLAIN && !gated)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->activation is %d; FI_MOE_GEMM_PLAIN or FI_MOE_GEMM_SWIGLU", fn,
                   p->activation);
  if ((p->gate_first != 0 && p->gate_first != 1) || (p->gather != 0 && p->gather != 1))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->%s is %d; 0 or 1 is needed", fn,
                   p->gather != 0 && p->gather != 1 ? "gather" : "gate_first",
                   p->gather != 0 && p->gather != 1 ? p->gather : p->gate_first);
  if (p->block_m != 0 && p->block_m != 16 && p->block_m != 64 && p->block_m != 128)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->block_m is %d; 0 (the rule), 16, 64 or 128", fn, p->block_m);
  if (p->block_m > ts)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->block_m %d is more than tile_size %d", fn, p->block_m, ts);

  /* a and weights: one 16-bit dtype, k contiguous. */
  if ((st = rt_check_tensor(fn, "a", a, 2)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "weights", weights, 3)) != FI_OK) return st;
  const int dt = rt_tensor_dtype(a);
  if (dt != JIT_DT_F16 && dt != JIT_DT_BF16)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: a has dtype %s; float16 or bfloat16 is needed", fn,
                   rt_dtype_string(a->dtype, b, sizeof b));
  if (rt_tensor_dtype(weights) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: weights has dtype %s; a's is needed", fn,
                   rt_dtype_string(weights->dtype, b, sizeof b));
  const int64_t k = a->shape[1], E = weights->shape[0], wrows = weights->shape[1];
  if (k <= 0 || k % 64 || k > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: a has k = %lld columns; a positive multiple of 64 is needed", fn,
                   (long long)k);
  if (weights->shape[2] != k)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: weights has shape[2] %lld; a's k %lld is needed", fn,
                   (long long)weights->shape[2], (long long)k);
  if (E < 1 || E > FI_MOE_SORT_MAX_EXPERTS)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: weights has %lld experts; 1 to %d", fn, (long long)E,
                   FI_MOE_SORT_MAX_EXPERTS);
  const int64_t n = gated ? wrows / 2 : wrows;
  if (wrows <= 0 || (gated && wrows % 2) || n % 64 || n > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: weights has %lld rows an expert; %s of 64 is needed", fn,
                   (long long)wrows, gated ? "twice a multiple (SwiGLU: up and gate)" : "a multiple");
  if (rt_stride(weights, 2) != 1 || rt_stride(a, 1) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s is not contiguous in k", fn,
                   rt_stride(a, 1) != 1 ? "a" : "weights");
  const int64_t ws1 = rt_stride(weights, 1), ws0 = rt_stride(weights, 0);
  int64_t span;
  if (ws1 < k || ws1 > INT64_MAX / 2 / wrows || (E > 1 && (__builtin_mul_overflow(wrows, ws1, &span) || ws0 < span)))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: weights' strides overlap rows or experts", fn);
  if ((st = check_gemm_rows(fn, "weights", weights, ws1, 16)) != FI_OK ||
      (st = check_gemm_rows(fn, "weights (expert stride)", weights, E > 1 ? ws0 : 0, 16)) != FI_OK)
    return st;

  /* The tables: T and top_k from expanded_idx_to_permuted_idx's shape; rows from max_tiles. */
  const DLDevice dev = a->device;
  if ((st = rt_check_tensor(fn, "tables->expanded_idx_to_permuted_idx", tables->expanded_idx_to_permuted_idx, 2)) !=
          FI_OK ||
      (st = rt_check_tensor(fn, "tables->tile_idx_to_expert_idx", tables->tile_idx_to_expert_idx, 1)) != FI_OK)
    return st;
  const int64_t T = tables->expanded_idx_to_permuted_idx->shape[0], K = tables->expanded_idx_to_permuted_idx->shape[1];
  const int64_t max_tiles = tables->tile_idx_to_expert_idx->shape[0];
  if (K < 1 || K > 32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: tables->expanded_idx_to_permuted_idx has top_k %lld; 1 to 32", fn,
                   (long long)K);
  if (T < 0 || T * K > INT32_MAX / 2 || max_tiles < 0 || max_tiles > INT32_MAX / 256)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the tables hold %lld x %lld routes and %lld tiles; at most 2^30 routes",
                   fn, (long long)T, (long long)K, (long long)max_tiles);
  const int64_t rows = max_tiles * ts;
  if (max_tiles != fi_moe_max_tiles(T, (int)K, (int)E, ts))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: tables->tile_idx_to_expert_idx has %lld tiles; fi_moe_max_tiles(%lld, %lld, %lld, %d) = %lld "
                   "(the sort's tables for weights' experts and p->tile_size)",
                   fn, (long long)max_tiles, (long long)T, (long long)K, (long long)E, ts,
                   (long long)fi_moe_max_tiles(T, (int)K, (int)E, ts));
  fi_moe_gemm_params_k kp;
  memset(&kp, 0, sizeof kp);
  int32_t *e2p, *p2e = NULL, *nt;
  const int64_t s_ids[2] = {T, K}, s_tiles[1] = {max_tiles}, s_rows[1] = {rows}, s_one[1] = {1};
  if ((st = check_i32(fn, "tables->expanded_idx_to_permuted_idx", tables->expanded_idx_to_permuted_idx, 2, s_ids,
                      dev, "a", &e2p)) != FI_OK ||
      (st = check_i32(fn, "tables->tile_idx_to_expert_idx", tables->tile_idx_to_expert_idx, 1, s_tiles, dev, "a",
                      (int32_t **)&kp.tile_expert)) != FI_OK ||
      (st = check_i32(fn, "tables->tile_idx_to_mn_limit", tables->tile_idx_to_mn_limit, 1, s_tiles, dev, "a",
                      (int32_t **)&kp.tile_mn_limit)) != FI_OK ||
      (st = check_i32(fn, "tables->num_non_exiting_tiles", tables->num_non_exiting_tiles, 1, s_one, dev, "a", &nt)) !=
          FI_OK ||
      (p->gather && (st = check_i32(fn, "tables->permuted_idx_to_expanded_idx", tables->permuted_idx_to_expanded_idx,
                                    1, s_rows, dev, "a", &p2e)) != FI_OK))
    return st;
  (void)e2p;
  const int64_t a_rows = p->gather ? T : rows;
  if (a->shape[0] != a_rows)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: a has %lld rows; %lld (%s) is needed", fn, (long long)a->shape[0],
                   (long long)a_rows, p->gather ? "the tokens: p->gather is 1" : "max_tiles * tile_size");
  const int64_t as = a_rows > 1 ? rt_stride(a, 0) : k;
  if (a_rows > 1 && as < k)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: a row stride %lld is less than k %lld", fn, (long long)as,
                   (long long)k);
  if ((st = check_gemm_rows(fn, "a", a, as, 16)) != FI_OK) return st;
  int64_t os;
  if ((st = check_rows2d(fn, "out", out, dt, rows, n, &os)) != FI_OK) return st;
  if (os % 2) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out row stride %lld is odd; pairs are stored", fn, (long long)os);
  if ((st = rt_check_aligned(fn, "out", out, 4)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "a", a, "weights", weights)) != FI_OK ||
      (st = rt_check_same_device(fn, "a", a, "out", out)) != FI_OK)
    return st;
  const DLTensor *const ins[6] = {a, weights, tables->tile_idx_to_expert_idx, tables->tile_idx_to_mn_limit,
                                   tables->num_non_exiting_tiles, p->gather ? tables->permuted_idx_to_expanded_idx : a};
  static const char *const in_names[6] = {"a", "weights", "tables->tile_idx_to_expert_idx",
                                          "tables->tile_idx_to_mn_limit", "tables->num_non_exiting_tiles",
                                          "tables->permuted_idx_to_expanded_idx"};
  for (int i = 0; i < 6; i++)
    if (rt_tensors_overlap(ins[i], out))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out overlaps %s", fn, in_names[i]);
  if (T == 0 || rows == 0) return FI_OK;

  /* The kernel (jit_moe_gemm_choose: its block shape decides the grid). */
  const rt_device_i *be;
  void *state;
  if ((st = rt_backend(rt, dev.device_type, &be, &state)) != FI_OK) return st;
  rt_device_caps caps;
  char err[256];
  if (rt_device_caps_get(be, state, dev.device_id, &caps, err, sizeof err) != 0)
    return rt_fail(FI_ERR_DEVICE, "%s: %s", fn, err);
  /* The kernel: a tactic the caller forces (the tuner's), the stored tactic of this
   * shape's bucket when the caller leaves block_m to the rule, else the rule. */
  jit_key key;
  const int wg_ok = caps.wgmma && rt->env.tune.moe_wgmma;
  const char *stored;
  jit_moe_gemm_tactic t;
  if (force) {
    if (jit_moe_gemm_tactic_key(force, dt, ts, gated, p->gather, n, caps.smem_block_kb, wg_ok, &key) != 0)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the tactic does not apply to this call (n %lld, tile %d)", fn,
                     (long long)n, ts);
  } else if (p->block_m == 0 &&
             rt_tactic_cached(rt, "moe_gemm", (const int64_t[GF_COUNT]){dt, k, n, E, K, gated, p->gather, ts},
                              GF_COUNT, fi_tune_bucket(T), dev.device_type, dev.device_id, gemm_shape, &stored, NULL) &&
             jit_moe_gemm_tactic_parse(stored, &t) == 0 &&
             jit_moe_gemm_tactic_key(&t, dt, ts, gated, p->gather, n, caps.smem_block_kb, wg_ok, &key) == 0) {
    /* the stored tactic's kernel */
  } else {
    jit_moe_gemm_choose(dt, T * K, (int)E, ts, p->block_m, gated, p->gather, n, caps.smem_block_kb, wg_ok, &key);
  }
  const int wgk = key.op == &jit_op_moe_gemm_sm90;
  const int bm = wgk ? 128 : (int)key.v[MOE_GEMM_P_BM];
  const int bn = wgk ? (gated ? 64 : 128) : (int)key.v[MOE_GEMM_P_BN];
  const int64_t blocks = max_tiles * (ts / bm) * (n / bn);
  if (blocks > INT32_MAX) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the problem needs more than 2^31-1 blocks", fn);

  kp.a = rt_data(a), kp.w = rt_data(weights), kp.out = rt_data(out);
  kp.num_tiles = nt, kp.p2e = p2e;
  kp.a_stride = as, kp.w_expert_stride = E > 1 ? ws0 : wrows * ws1, kp.w_stride = ws1, kp.out_stride = os;
  kp.k = (int32_t)k, kp.n = (int32_t)n, kp.tile_size = ts, kp.max_tiles = (int32_t)max_tiles, kp.top_k = (int32_t)K;
  kp.up_row = gated && p->gate_first ? (int32_t)n : 0;
  kp.gate_row = gated && !p->gate_first ? (int32_t)n : 0;
  kp.experts = (int32_t)E, kp.a_rows = (int32_t)a_rows;

  rt_kernel *kern;
  if ((st = rt_kernel_get(rt, &key, be, dev.device_id, &kern)) != FI_OK) return st;
  return rt_launch_1d(rt, kern, blocks, wgk ? MOE_GEMM_WG_THREADS : MOE_GEMM_THREADS, stream, &kp, sizeof kp);
}

FI_API fi_status fi_moe_grouped_gemm(fi_runtime *rt, const DLTensor *a, const DLTensor *weights,
                                     const fi_moe_sort_outputs *tables, const fi_moe_gemm_params *p, DLTensor *out,
                                     void *stream) {
  return rt_moe_gemm(rt, a, weights, tables, p, out, stream, NULL);
}
