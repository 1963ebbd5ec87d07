/* fi_tvm_moe.c: TVM-FFI exports of the mixture-of-experts ops (routing, sort, permute,
 * finalize, grouped GEMM, the fused layer), their parameter structs flattened. */
#include "fi_tvm.h"

/* fi_moe_routing_params from the 5 arguments from i on (FT_ROUTING_SIG). */
static void routing_params(ft_call *c, int i, fi_moe_routing_params *p) {
  fi_moe_routing_params_init(p);
  p->method = (int)ft_int(c, i);
  p->top_k = (int)ft_int(c, i + 1);
  p->n_group = (int)ft_int(c, i + 2);
  p->topk_group = (int)ft_int(c, i + 3);
  p->routed_scaling_factor = ft_float(c, i + 4);
}

/* fi_moe_sort_outputs from the 6 tensors from i on (FT_SORT_OUT_SIG). */
static void sort_outputs(ft_call *c, int i, fi_moe_sort_outputs *o) {
  o->tile_idx_to_expert_idx = ft_tensor(c, i);
  o->tile_idx_to_mn_limit = ft_tensor(c, i + 1);
  o->expanded_idx_to_permuted_idx = ft_tensor(c, i + 2);
  o->permuted_idx_to_expanded_idx = ft_tensor(c, i + 3);
  o->num_non_exiting_tiles = ft_tensor(c, i + 4);
  o->total_num_padded_tokens = ft_tensor(c, i + 5);
}

/* fi_fused_moe_params from the 12 arguments from i on (FT_FUSED_SIG). */
static void fused_params(ft_call *c, int i, fi_fused_moe_params *p) {
  fi_fused_moe_params_init(p);
  routing_params(c, i, &p->routing);
  p->num_experts = (int)ft_int(c, i + 5);
  p->local_expert_offset = (int)ft_int(c, i + 6);
  p->local_num_experts = (int)ft_int(c, i + 7);
  p->tile_size = (int)ft_int(c, i + 8);
  p->gate_first = (int)ft_int(c, i + 9);
  p->accumulate = (int)ft_int(c, i + 10);
  p->block_m = (int)ft_int(c, i + 11);
}

FT_EXPORT(moe_routing) {
  DLTensor *logits = ft_tensor(c, 0), *bias = ft_tensor_opt(c, 1), *ids = ft_tensor(c, 7),
           *w = ft_tensor(c, 8);
  fi_moe_routing_params p;
  routing_params(c, 2, &p);
#define FT_RUN_ARGS logits, bias, &p, ids, w
  FT_RUN(fi_moe_routing);
#undef FT_RUN_ARGS
}

FT_EXPORT(moe_max_tiles) {
  int64_t t = ft_int(c, 0);
  int k = (int)ft_int(c, 1), l = (int)ft_int(c, 2), tile = (int)ft_int(c, 3);
  if (c->failed) return -1;
  int64_t n = fi_moe_max_tiles(t, k, l, tile);
  if (n < 0) return ft_fail(c, -1, "ValueError", "arguments out of range");
  return ft_ret_int(c, n);
}

FT_EXPORT(moe_sort_workspace_size) {
  int64_t t = ft_int(c, 0);
  int k = (int)ft_int(c, 1);
  fi_moe_sort_params p = {(int)ft_int(c, 2), (int)ft_int(c, 3), (int)ft_int(c, 4),
                          (int)ft_int(c, 5)};
#define FT_RUN_ARGS t, k, &p
  FT_RUN_SIZE(fi_moe_sort_workspace_size);
#undef FT_RUN_ARGS
}

FT_EXPORT(moe_sort) {
  DLTensor *ids = ft_tensor(c, 0), *ws = ft_tensor(c, 5);
  fi_moe_sort_params p = {(int)ft_int(c, 1), (int)ft_int(c, 2), (int)ft_int(c, 3),
                          (int)ft_int(c, 4)};
  fi_moe_sort_outputs o;
  sort_outputs(c, 6, &o);
#define FT_RUN_ARGS ids, &p, ws, &o
  FT_RUN(fi_moe_sort);
#undef FT_RUN_ARGS
}

FT_EXPORT(moe_permute) {
  DLTensor *x = ft_tensor(c, 0), *p2e = ft_tensor(c, 1), *ntiles = ft_tensor(c, 2),
           *out = ft_tensor(c, 5);
  int top_k = (int)ft_int(c, 3), tile = (int)ft_int(c, 4);
#define FT_RUN_ARGS x, p2e, ntiles, top_k, tile, out
  FT_RUN(fi_moe_permute);
#undef FT_RUN_ARGS
}

FT_EXPORT(moe_finalize) {
  DLTensor *y = ft_tensor(c, 0), *e2p = ft_tensor(c, 1), *w = ft_tensor(c, 2),
           *out = ft_tensor(c, 4);
  int acc = (int)ft_int(c, 3);
#define FT_RUN_ARGS y, e2p, w, acc, out
  FT_RUN(fi_moe_finalize);
#undef FT_RUN_ARGS
}

FT_EXPORT(moe_grouped_gemm) {
  DLTensor *a = ft_tensor(c, 0), *w = ft_tensor(c, 1), *out = ft_tensor(c, 13);
  fi_moe_sort_outputs tables;
  sort_outputs(c, 2, &tables);
  fi_moe_gemm_params p;
  fi_moe_gemm_params_init(&p);
  p.tile_size = (int)ft_int(c, 8);
  p.activation = (int)ft_int(c, 9);
  p.gate_first = (int)ft_int(c, 10);
  p.gather = (int)ft_int(c, 11);
  p.block_m = (int)ft_int(c, 12);
#define FT_RUN_ARGS a, w, &tables, &p, out
  FT_RUN(fi_moe_grouped_gemm);
#undef FT_RUN_ARGS
}

FT_EXPORT(fused_moe_workspace_size) {
  int64_t t = ft_int(c, 0), hidden = ft_int(c, 1), inter = ft_int(c, 2);
  fi_fused_moe_params p;
  fused_params(c, 3, &p);
#define FT_RUN_ARGS t, hidden, inter, &p
  FT_RUN_SIZE(fi_fused_moe_workspace_size);
#undef FT_RUN_ARGS
}

FT_EXPORT(fused_moe) {
  DLTensor *x = ft_tensor(c, 0), *logits = ft_tensor_opt(c, 1), *bias = ft_tensor_opt(c, 2),
           *ids = ft_tensor_opt(c, 3), *ew = ft_tensor_opt(c, 4), *w13 = ft_tensor(c, 5),
           *w2 = ft_tensor(c, 6), *ws = ft_tensor(c, 19), *out = ft_tensor(c, 20);
  fi_fused_moe_params p;
  fused_params(c, 7, &p);
#define FT_RUN_ARGS x, logits, bias, ids, ew, w13, w2, &p, ws, out
  FT_RUN(fi_fused_moe);
#undef FT_RUN_ARGS
}
