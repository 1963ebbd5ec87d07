/* fi_tvm_ops.c: TVM-FFI exports of the elementwise and row ops: norms, gated activations,
 * cascade merges, RoPE, the paged KV append, sampling. Each reads its arguments (the
 * first bad one raises, named), then makes the one C call on the call's stream. */
#include "fi_tvm.h"

/* ---- norms ---- */

/* Three tensors (a, b, t) and eps at the given argument indices. */
#define FT_NORM(name, ia, ib, it, ie)                                                         \
  FT_EXPORT(name) {                                                                           \
    DLTensor *a = ft_tensor(c, ia), *b = ft_tensor(c, ib), *t = ft_tensor(c, it);             \
    double eps = ft_float(c, ie);                                                             \
    FT_RUN(fi_##name);                                                                        \
  }
#define FT_RUN_ARGS a, b, eps, t /* input, weight, eps, out */
FT_NORM(rmsnorm, 0, 1, 3, 2)
FT_NORM(gemma_rmsnorm, 0, 1, 3, 2)
#undef FT_RUN_ARGS
#define FT_RUN_ARGS a, b, t, eps /* input, residual, weight, eps: both updated in place */
FT_NORM(fused_add_rmsnorm, 0, 1, 2, 3)
FT_NORM(gemma_fused_add_rmsnorm, 0, 1, 2, 3)
#undef FT_RUN_ARGS

FT_EXPORT(layernorm) {
  DLTensor *x = ft_tensor(c, 0), *g = ft_tensor(c, 1), *b = ft_tensor(c, 2), *out = ft_tensor(c, 4);
  double eps = ft_float(c, 3);
#define FT_RUN_ARGS x, g, b, eps, out
  FT_RUN(fi_layernorm);
#undef FT_RUN_ARGS
}

/* ---- gated activations ---- */

#define FT_ACT(name)                                                                          \
  FT_EXPORT(name) {                                                                           \
    DLTensor *x = ft_tensor(c, 0), *out = ft_tensor(c, 1);                                    \
    FT_RUN(fi_##name);                                                                        \
  }
#define FT_RUN_ARGS x, out
FT_ACT(silu_and_mul)
FT_ACT(gelu_and_mul)
FT_ACT(gelu_tanh_and_mul)
#undef FT_RUN_ARGS

/* ---- cascade ---- */

FT_EXPORT(merge_state) {
  DLTensor *va = ft_tensor(c, 0), *sa = ft_tensor(c, 1), *vb = ft_tensor(c, 2),
           *sb = ft_tensor(c, 3), *vo = ft_tensor(c, 4), *so = ft_tensor_opt(c, 5);
#define FT_RUN_ARGS va, sa, vb, sb, vo, so
  FT_RUN(fi_merge_state);
#undef FT_RUN_ARGS
}

FT_EXPORT(merge_state_in_place) {
  DLTensor *v = ft_tensor(c, 0), *s = ft_tensor(c, 1), *vo = ft_tensor(c, 2),
           *so = ft_tensor(c, 3), *mask = ft_tensor_opt(c, 4);
#define FT_RUN_ARGS v, s, vo, so, mask
  FT_RUN(fi_merge_state_in_place);
#undef FT_RUN_ARGS
}

FT_EXPORT(merge_states) {
  DLTensor *v = ft_tensor(c, 0), *s = ft_tensor(c, 1), *vo = ft_tensor(c, 2),
           *so = ft_tensor_opt(c, 3);
#define FT_RUN_ARGS v, s, vo, so
  FT_RUN(fi_merge_states);
#undef FT_RUN_ARGS
}

/* ---- RoPE ---- */

FT_EXPORT(apply_rope_pos_ids) {
  DLTensor *q = ft_tensor(c, 0), *k = ft_tensor(c, 1), *qo = ft_tensor(c, 2),
           *ko = ft_tensor(c, 3), *pos = ft_tensor(c, 4);
  int rotary_dim = (int)ft_int(c, 5), interleave = (int)ft_int(c, 6);
  double scale = ft_float(c, 7), theta = ft_float(c, 8);
#define FT_RUN_ARGS q, k, qo, ko, pos, rotary_dim, interleave, scale, theta
  FT_RUN(fi_apply_rope_pos_ids);
#undef FT_RUN_ARGS
}

FT_EXPORT(apply_llama31_rope_pos_ids) {
  DLTensor *q = ft_tensor(c, 0), *k = ft_tensor(c, 1), *qo = ft_tensor(c, 2),
           *ko = ft_tensor(c, 3), *pos = ft_tensor(c, 4);
  int rotary_dim = (int)ft_int(c, 5), interleave = (int)ft_int(c, 6);
  double scale = ft_float(c, 7), theta = ft_float(c, 8), lo = ft_float(c, 9),
         hi = ft_float(c, 10), old = ft_float(c, 11);
#define FT_RUN_ARGS q, k, qo, ko, pos, rotary_dim, interleave, scale, theta, lo, hi, old
  FT_RUN(fi_apply_llama31_rope_pos_ids);
#undef FT_RUN_ARGS
}

FT_EXPORT(apply_rope_with_cos_sin_cache) {
  DLTensor *q = ft_tensor(c, 0), *k = ft_tensor(c, 1), *qo = ft_tensor(c, 2),
           *ko = ft_tensor(c, 3), *cache = ft_tensor(c, 4), *pos = ft_tensor(c, 5);
  int interleave = (int)ft_int(c, 6);
#define FT_RUN_ARGS q, k, qo, ko, cache, pos, interleave
  FT_RUN(fi_apply_rope_with_cos_sin_cache);
#undef FT_RUN_ARGS
}

/* ---- paged KV cache ---- */

FT_EXPORT(append_paged_kv_cache) {
  DLTensor *ak = ft_tensor(c, 0), *av = ft_tensor(c, 1), *bi = ft_tensor(c, 2),
           *pos = ft_tensor(c, 3), *kc = ft_tensor(c, 4), *vc = ft_tensor(c, 5),
           *idx = ft_tensor(c, 6), *indptr = ft_tensor(c, 7), *last = ft_tensor(c, 8);
  fi_kv_layout layout = ft_layout(c, 9);
  double ks = ft_float(c, 10), vs = ft_float(c, 11);
#define FT_RUN_ARGS ak, av, bi, pos, kc, vc, idx, indptr, last, layout, ks, vs
  FT_RUN(fi_append_paged_kv_cache);
#undef FT_RUN_ARGS
}

FT_EXPORT(get_batch_indices_positions) {
  DLTensor *indptr = ft_tensor(c, 0), *lens = ft_tensor(c, 1), *bi = ft_tensor(c, 2),
           *pos = ft_tensor(c, 3);
#define FT_RUN_ARGS indptr, lens, bi, pos
  FT_RUN(fi_get_batch_indices_positions);
#undef FT_RUN_ARGS
}

/* ---- bit packing ---- */

FT_EXPORT(packbits) {
  DLTensor *x = ft_tensor(c, 0), *y = ft_tensor(c, 2);
  const fi_bitorder order = (fi_bitorder)ft_bitorder(c, 1);
#define FT_RUN_ARGS x, order, y
  FT_RUN(fi_packbits);
#undef FT_RUN_ARGS
}

FT_EXPORT(segment_packbits) {
  DLTensor *x = ft_tensor(c, 0), *indptr = ft_tensor(c, 1), *y = ft_tensor(c, 3), *out_indptr = ft_tensor(c, 4);
  const fi_bitorder order = (fi_bitorder)ft_bitorder(c, 2);
#define FT_RUN_ARGS x, indptr, order, y, out_indptr
  FT_RUN(fi_segment_packbits);
#undef FT_RUN_ARGS
}

/* ---- sampling ---- */

FT_EXPORT(softmax) {
  DLTensor *logits = ft_tensor(c, 0), *temp_arr = ft_tensor_opt(c, 1), *out = ft_tensor(c, 3);
  double temp = ft_float(c, 2);
#define FT_RUN_ARGS logits, temp_arr, temp, out
  FT_RUN(fi_softmax);
#undef FT_RUN_ARGS
}

FT_EXPORT(sampling_from_probs) {
  DLTensor *probs = ft_tensor(c, 0), *samples = ft_tensor(c, 1);
  uint64_t seed = (uint64_t)ft_int(c, 2), offset = (uint64_t)ft_int(c, 3);
#define FT_RUN_ARGS probs, samples, seed, offset
  FT_RUN(fi_sampling_from_probs);
#undef FT_RUN_ARGS
}

/* probs, a per-row parameter (array or scalar), samples, seed, offset. */
#define FT_FILTERED_SAMPLING(name, scalar_reader, ctype)                                     \
  FT_EXPORT(name) {                                                                           \
    DLTensor *probs = ft_tensor(c, 0), *arr = ft_tensor_opt(c, 1), *samples = ft_tensor(c, 3); \
    ctype param = (ctype)scalar_reader(c, 2);                                                 \
    uint64_t seed = (uint64_t)ft_int(c, 4), offset = (uint64_t)ft_int(c, 5);                  \
    FT_RUN(fi_##name);                                                                        \
  }
#define FT_RUN_ARGS probs, arr, param, samples, seed, offset
FT_FILTERED_SAMPLING(top_k_sampling_from_probs, ft_int, int)
FT_FILTERED_SAMPLING(top_p_sampling_from_probs, ft_float, double)
FT_FILTERED_SAMPLING(min_p_sampling_from_probs, ft_float, double)
#undef FT_RUN_ARGS

/* input, top-k (array or scalar), top-p (array or scalar), samples, seed, offset. */
#define FT_TOP_K_TOP_P(name)                                                                  \
  FT_EXPORT(name) {                                                                           \
    DLTensor *in = ft_tensor(c, 0), *k_arr = ft_tensor_opt(c, 1), *p_arr = ft_tensor_opt(c, 3), \
             *samples = ft_tensor(c, 5);                                                      \
    int top_k = (int)ft_int(c, 2);                                                            \
    double top_p = ft_float(c, 4);                                                            \
    uint64_t seed = (uint64_t)ft_int(c, 6), offset = (uint64_t)ft_int(c, 7);                  \
    FT_RUN(fi_##name);                                                                        \
  }
#define FT_RUN_ARGS in, k_arr, top_k, p_arr, top_p, samples, seed, offset
FT_TOP_K_TOP_P(top_k_top_p_sampling_from_logits)
FT_TOP_K_TOP_P(top_k_top_p_sampling_from_probs)
#undef FT_RUN_ARGS

FT_EXPORT(sampling_from_logits) {
  DLTensor *logits = ft_tensor(c, 0), *samples = ft_tensor(c, 1);
  uint64_t seed = (uint64_t)ft_int(c, 2), offset = (uint64_t)ft_int(c, 3);
#define FT_RUN_ARGS logits, samples, seed, offset
  FT_RUN(fi_sampling_from_logits);
#undef FT_RUN_ARGS
}

FT_EXPORT(chain_speculative_sampling) {
  DLTensor *dp = ft_tensor(c, 0), *ids = ft_tensor(c, 1), *tp = ft_tensor(c, 2), *out = ft_tensor(c, 3),
           *acc = ft_tensor_opt(c, 4), *emit = ft_tensor_opt(c, 5);
  uint64_t seed = (uint64_t)ft_int(c, 6), offset = (uint64_t)ft_int(c, 7);
#define FT_RUN_ARGS dp, ids, tp, out, acc, emit, seed, offset
  FT_RUN(fi_chain_speculative_sampling);
#undef FT_RUN_ARGS
}

/* input, a per-row parameter (array or scalar), out. */
#define FT_FILTER(name, scalar_reader, ctype)                                                 \
  FT_EXPORT(name) {                                                                           \
    DLTensor *in = ft_tensor(c, 0), *arr = ft_tensor_opt(c, 1), *out = ft_tensor(c, 3);       \
    ctype param = (ctype)scalar_reader(c, 2);                                                 \
    FT_RUN(fi_##name);                                                                        \
  }
#define FT_RUN_ARGS in, arr, param, out
FT_FILTER(top_k_renorm_probs, ft_int, int)
FT_FILTER(top_p_renorm_probs, ft_float, double)
FT_FILTER(top_k_mask_logits, ft_int, int)
#undef FT_RUN_ARGS
