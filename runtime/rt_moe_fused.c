/* rt_moe_fused.c: fi_fused_moe, a whole MoE layer in one call: routing (unless the caller
 * brings expert ids and weights), the sort, the first grouped GEMM (gather + SwiGLU), the
 * second, and the finalize, each the public op of rt_moe.c on views of one caller-allocated
 * workspace (fi_fused_moe_workspace_size), all on the caller's stream with no host
 * synchronization: a fixed token count can be captured in a CUDA graph. */
#include <string.h>

#include "jit_key.h"
#include "moe_params.h"
#include "rt_internal.h"
#include "rt_tensor.h"

FI_API void fi_fused_moe_params_init(fi_fused_moe_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  fi_moe_routing_params_init(&p->routing);
}

FI_API int fi_moe_default_tile(int64_t num_tokens, int top_k, int local_num_experts) {
  return num_tokens * top_k < 64 * (int64_t)local_num_experts ? 64 : 128;
}

/* The caller's tile, or the rule's (fi_moe_default_tile). */
static int tile_for(const fi_fused_moe_params *p, int64_t T) {
  if (p->tile_size) return p->tile_size;
  return fi_moe_default_tile(T, p->routing.top_k, p->local_num_experts);
}

/* The workspace's pieces, in order, each 256-byte aligned. */
enum { W_IDS, W_WTS, W_SORT, W_TE, W_MN, W_E2P, W_P2E, W_NT, W_H, W_Y, W_COUNT };

static fi_status layout(const char *fn, const fi_fused_moe_params *p, int64_t T, int64_t H, int64_t I, int esize,
                        size_t off[W_COUNT + 1], int *tile, int64_t *max_tiles) {
  if (!p) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p is NULL", fn);
  if (T < 0 || H < 64 || I < 64 || H % 64 || I % 64 || H > INT32_MAX || I > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: tokens %lld, hidden %lld, inter %lld: tokens >= 0 and hidden, inter positive multiples of 64 "
                   "are needed",
                   fn, (long long)T, (long long)H, (long long)I);
  const int K = p->routing.top_k;
  if (K < 1 || K > 32) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->routing.top_k is %d; 1 to 32", fn, K);
  if (p->tile_size != 0 && p->tile_size != 64 && p->tile_size != 128 && p->tile_size != 256)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->tile_size is %d; 0 (the rule), 64, 128 or 256", fn, p->tile_size);
  *tile = tile_for(p, T);
  const fi_moe_sort_params sp = {p->num_experts, p->local_expert_offset, p->local_num_experts, *tile};
  size_t sort_bytes;
  fi_status st = fi_moe_sort_workspace_size(NULL, T, K, &sp, &sort_bytes);
  if (st != FI_OK) return st;
  *max_tiles = fi_moe_max_tiles(T, K, p->local_num_experts, *tile);
  const int64_t R = T * K, rows = *max_tiles * *tile;
  if (rows > INT64_MAX / 16 / (H > I ? H : I))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the workspace would exceed 2^63 bytes", fn);
  const size_t sz[W_COUNT] = {(size_t)R * 4, (size_t)R * 4, sort_bytes, (size_t)*max_tiles * 4,
                              (size_t)*max_tiles * 4, (size_t)R * 4, (size_t)rows * 4, 8,
                              (size_t)(rows * I) * (size_t)esize, (size_t)(rows * H) * (size_t)esize};
  off[0] = 0;
  for (int i = 0; i < W_COUNT; i++) off[i + 1] = off[i] + (sz[i] + 255) / 256 * 256;
  return FI_OK;
}

FI_API fi_status fi_fused_moe_workspace_size(fi_runtime *rt, int64_t num_tokens, int64_t hidden, int64_t inter,
                                             const fi_fused_moe_params *p, size_t *bytes) {
  const char *fn = "fi_fused_moe_workspace_size";
  (void)rt;
  if (!bytes) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
  size_t off[W_COUNT + 1];
  int tile;
  int64_t mt;
  fi_status st = layout(fn, p, num_tokens, hidden, inter, 2, off, &tile, &mt);
  if (st != FI_OK) return st;
  *bytes = off[W_COUNT];
  return FI_OK;
}

/* A view of the workspace: a device tensor at byte offset o with the given shape. */
static DLTensor view(const DLTensor *ws, size_t o, DLDataType dt, int ndim, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = rt_data(ws) + o;
  t.device = ws->device;
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  t.strides = NULL;
  return t;
}

FI_API fi_status fi_fused_moe(fi_runtime *rt, const DLTensor *x, const DLTensor *router_logits,
                              const DLTensor *correction_bias, const DLTensor *expert_ids,
                              const DLTensor *expert_weights, const DLTensor *w13, const DLTensor *w2,
                              const fi_fused_moe_params *p, DLTensor *workspace, DLTensor *out, void *stream) {
  const char *fn = "fi_fused_moe";
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_tensor(fn, "x", x, 2)) != FI_OK || (st = rt_check_tensor(fn, "w13", w13, 3)) != FI_OK ||
      (st = rt_check_tensor(fn, "w2", w2, 3)) != FI_OK || (st = rt_check_tensor(fn, "out", out, 2)) != FI_OK ||
      (router_logits && (st = rt_check_tensor(fn, "router_logits", router_logits, 2)) != FI_OK) ||
      (correction_bias && (st = rt_check_tensor(fn, "correction_bias", correction_bias, 1)) != FI_OK) ||
      (expert_ids && (st = rt_check_tensor(fn, "expert_ids", expert_ids, 2)) != FI_OK) ||
      (expert_weights && (st = rt_check_tensor(fn, "expert_weights", expert_weights, 2)) != FI_OK))
    return st;
  const int64_t T = x->shape[0], H = x->shape[1], I = w2->shape[2];
  if (!router_logits == !expert_ids)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: give router_logits or expert_ids (with expert_weights), not %s", fn,
                   router_logits ? "both" : "neither");
  if (expert_ids && !expert_weights)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: expert_weights is NULL but expert_ids is given", fn);
  if (!expert_ids && expert_weights)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: expert_weights is given without expert_ids", fn);
  if (expert_ids && correction_bias)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: correction_bias is given with expert_ids (it is routing's)", fn);
  if (p && (p->accumulate != 0 && p->accumulate != 1))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: p->accumulate is %d; 0 or 1 is needed", fn, p->accumulate);
  /* The shapes of the layer, named here rather than by the steps' views. */
  const int dt = rt_tensor_dtype(x);
  char b[32];
  if (dt != JIT_DT_F16 && dt != JIT_DT_BF16)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: x has dtype %s; float16 or bfloat16 is needed", fn,
                   rt_dtype_string(x->dtype, b, sizeof b));
  if (rt_tensor_dtype(w13) != dt || rt_tensor_dtype(w2) != dt || rt_tensor_dtype(out) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has another dtype than x", fn,
                   rt_tensor_dtype(w13) != dt ? "w13" : rt_tensor_dtype(w2) != dt ? "w2" : "out");
  if (p && (w13->shape[0] != p->local_num_experts || w2->shape[0] != p->local_num_experts))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has %lld experts; p->local_num_experts is %d", fn,
                   w13->shape[0] != p->local_num_experts ? "w13" : "w2",
                   (long long)(w13->shape[0] != p->local_num_experts ? w13->shape[0] : w2->shape[0]),
                   p->local_num_experts);
  if (w13->shape[1] != 2 * I || w13->shape[2] != H || w2->shape[1] != H)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: w13 is [%lld, %lld, %lld] and w2 [%lld, %lld, %lld]; [E, 2 inter, hidden] and [E, hidden, "
                   "inter] with x's hidden %lld are needed",
                   fn, (long long)w13->shape[0], (long long)w13->shape[1], (long long)w13->shape[2],
                   (long long)w2->shape[0], (long long)w2->shape[1], (long long)w2->shape[2], (long long)H);
  if (out->shape[0] != T || out->shape[1] != H)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out has shape [%lld, %lld]; x's [%lld, %lld] is needed", fn,
                   (long long)out->shape[0], (long long)out->shape[1], (long long)T, (long long)H);
  if (router_logits && router_logits->shape[0] != T)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: router_logits has %lld tokens; x has %lld", fn,
                   (long long)router_logits->shape[0], (long long)T);
  size_t off[W_COUNT + 1];
  int tile;
  int64_t MT;
  if ((st = layout(fn, p, T, H, I, 2, off, &tile, &MT)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "workspace", workspace, 1)) != FI_OK) return st;
  if (off[W_COUNT] > (size_t)INT64_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the workspace would exceed 2^63 bytes", fn);
  const int64_t wsb = rt_extent_bytes(workspace);
  if (wsb < (int64_t)off[W_COUNT])
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace has %lld bytes; %zu are needed (fi_fused_moe_workspace_size)",
                   fn, (long long)wsb, off[W_COUNT]);
  if ((uintptr_t)rt_data(workspace) % 256)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace is not 256-byte aligned", fn);
  if ((st = rt_check_same_device(fn, "x", x, "workspace", workspace)) != FI_OK) return st;
  const DLTensor *const others[7] = {x, out, w13, w2, router_logits, expert_ids, expert_weights};
  static const char *const other_names[7] = {"x", "out", "w13", "w2", "router_logits", "expert_ids", "expert_weights"};
  for (int i = 0; i < 7; i++)
    if (others[i] && rt_tensors_overlap(workspace, others[i]))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace overlaps %s", fn, other_names[i]);
  const int K = p->routing.top_k;
  const DLDataType i32 = {kDLInt, 32, 1}, f32 = {kDLFloat, 32, 1};
  int64_t s_ids[2] = {T, K}, s_t[1] = {MT}, s_rows[1] = {MT * tile}, s_one[1] = {1};
  int64_t s_sort[1] = {(int64_t)(off[W_SORT + 1] - off[W_SORT])}, s_h[2] = {MT * tile, I}, s_y[2] = {MT * tile, H};
  DLTensor ids = view(workspace, off[W_IDS], i32, 2, s_ids), wts = view(workspace, off[W_WTS], f32, 2, s_ids);
  DLTensor sws = view(workspace, off[W_SORT], (DLDataType){kDLUInt, 8, 1}, 1, s_sort);
  DLTensor te = view(workspace, off[W_TE], i32, 1, s_t), mn = view(workspace, off[W_MN], i32, 1, s_t);
  DLTensor e2p = view(workspace, off[W_E2P], i32, 2, s_ids), p2e = view(workspace, off[W_P2E], i32, 1, s_rows);
  DLTensor nt = view(workspace, off[W_NT], i32, 1, s_one), tp = view(workspace, off[W_NT] + 4, i32, 1, s_one);
  DLTensor h = view(workspace, off[W_H], x->dtype, 2, s_h), y = view(workspace, off[W_Y], x->dtype, 2, s_y);
  if (expert_ids) {
    /* The caller's routing: the sort and the finalize read it where it is. */
    if (expert_ids->shape[0] != T || expert_ids->shape[1] != K)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: expert_ids has shape [%lld, %lld]; [%lld, %d] (tokens, top_k)", fn,
                     (long long)expert_ids->shape[0], (long long)expert_ids->shape[1], (long long)T, K);
  } else if ((st = fi_moe_routing(rt, router_logits, correction_bias, &p->routing, &ids, &wts, stream)) != FI_OK) {
    return st;
  }
  const DLTensor *rid = expert_ids ? expert_ids : &ids, *rw = expert_ids ? expert_weights : &wts;
  const fi_moe_sort_params sp = {p->num_experts, p->local_expert_offset, p->local_num_experts, tile};
  fi_moe_sort_outputs so = {&te, &mn, &e2p, &p2e, &nt, &tp};
  if ((st = fi_moe_sort(rt, rid, &sp, &sws, &so, stream)) != FI_OK) return st;
  fi_moe_gemm_params g;
  fi_moe_gemm_params_init(&g);
  g.tile_size = tile, g.activation = FI_MOE_GEMM_SWIGLU, g.gate_first = p->gate_first, g.gather = 1;
  g.block_m = p->block_m;
  if ((st = fi_moe_grouped_gemm(rt, x, w13, &so, &g, &h, stream)) != FI_OK) return st;
  g.activation = FI_MOE_GEMM_PLAIN, g.gather = 0;
  if ((st = fi_moe_grouped_gemm(rt, &h, w2, &so, &g, &y, stream)) != FI_OK) return st;
  return fi_moe_finalize(rt, &y, &e2p, rw, p->accumulate, out, stream);
}
