// moe_routing.cuh: mixture-of-experts routing, logits [tokens, experts] -> the top-k experts
// of each token and their weights, one warp a token (methods: moe_params.h).
//
// Lane l holds experts l, l + W, l + 2W, ... (EPL of them; W the warp), so a load of one
// expert per lane is one coalesced row segment. Each candidate is one 64-bit key, higher
// better: the score's bits made orderable, then the complement of the expert index, so that
// one integer maximum over the warp (CUDA sm_80+: two redux instructions) is the best
// expert, ties going to the smaller index. A lane keeps the best of its own keys; after a
// pick only the lane that held it finds its next best. DeepSeek-V3's group scores take P
// lanes a group (each the top two of every P-th expert, then merged), and each group's rank
// among the groups is counted, ties to the smaller group index. The choice is a pure
// function of the inputs. NaN scores order below -inf: a NaN expert is picked only when
// nothing else is left.
#pragma once
#include "moe_params.h"
#include "moe_warp.cuh"

namespace fi {
namespace moe {

FI_DEVICE float neg_inf() { return bits_to_float(0xff800000u); }
FI_DEVICE float warp_max(float v) {
#pragma unroll
  for (int o = FI_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, shfl_xor(v, o));
  return v;
}

// A score's bits, ordered as unsigned integers like the floats (-0 as +0); NaN is 0, below
// every number (-inf is 0x007fffff).
FI_DEVICE uint32_t order_bits(float s) {
  uint32_t u = float_to_bits(s);
  if (s != s) return 0u;
  if (u == 0x80000000u) u = 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// Expert e's key: its score's order, then the smaller index; 0 for no candidate.
FI_DEVICE uint64_t key_of(float s, int e) { return ((uint64_t)order_bits(s) << 32) | (uint32_t)~(uint32_t)e; }
FI_DEVICE int key_expert(uint64_t k) { return (int)~(uint32_t)k; }

// The largest key of the warp, on every lane.
FI_DEVICE uint64_t warp_max_key(uint64_t k) {
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t hi = (uint32_t)(k >> 32);
  uint32_t mh, ml;
  asm volatile("redux.sync.max.u32 %0, %1, 0xffffffff;" : "=r"(mh) : "r"(hi));
  const uint32_t lo = hi == mh ? (uint32_t)k : 0u;
  asm volatile("redux.sync.max.u32 %0, %1, 0xffffffff;" : "=r"(ml) : "r"(lo));
  return ((uint64_t)mh << 32) | ml;
#else
#pragma unroll
  for (int o = FI_WARP / 2; o > 0; o >>= 1) {
    const uint32_t hi = (uint32_t)shfl_xor((int)(uint32_t)(k >> 32), o);
    const uint32_t lo = (uint32_t)shfl_xor((int)(uint32_t)k, o);
    const uint64_t d = ((uint64_t)hi << 32) | lo;
    if (d > k) k = d;
  }
  return k;
#endif
}

FI_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }
// DeepSeek-V3's choice score of expert e (the same arithmetic wherever it is computed).
FI_DEVICE float ds_score(float x, const float *bias, int e) { return sigmoid(x) + (bias ? bias[e] : 0.0f); }

// DeepSeek-V3: the groups kept (bit g for group g), the topk_group best by the sum of their
// two best scores (a group of one expert: its score), ties to the smaller group index.
// P lanes a group: P the largest power of two with n_group * P <= W; lane sub of group g
// takes experts g * G + sub, + P, ... (G = E / n_group), recomputing their scores from the
// row (cached: the warp has just read it), then the P lanes merge their top two.
template <typename T>
FI_DEVICE unsigned kept_groups(const fi_moe_route_params &p, const T *row, int lane) {
  const int ng = p.n_group, G = p.experts / ng;
  int P = 1;
  while (ng * P * 2 <= FI_WARP) P *= 2;
  const int g = lane / P, sub = lane % P;
  float a1 = neg_inf(), a2 = neg_inf();
  if (g < ng)
    for (int i = sub; i < G; i += P) {
      const int e = g * G + i;
      const float v = ds_score(fi_to_float(row[e]), p.bias, e);
      if (v > a1) a2 = a1, a1 = v;
      else if (v > a2) a2 = v;
    }
  for (int o = P / 2; o > 0; o >>= 1) {
    const float b1 = shfl_xor(a1, o), b2 = shfl_xor(a2, o);
    const float t1 = fmaxf(a1, b1), t2 = fmaxf(fminf(a1, b1), fmaxf(a2, b2));
    a1 = t1, a2 = t2;
  }
  const float gs = a2 == neg_inf() ? a1 : a1 + a2;
  // Lane g < n_group counts the groups ahead of group g.
  const uint32_t gk = order_bits(gs);
  const uint32_t mine = (uint32_t)shfl((int)gk, (lane < ng ? lane : 0) * P);
  int ahead = 0;
  for (int h = 0; h < ng; h++) {
    const uint32_t kh = (uint32_t)shfl((int)gk, h * P);
    ahead += kh > mine || (kh == mine && h < lane);
  }
  return (unsigned)warp_ballot(lane < ng && ahead < p.topk_group);
}

// T: the logits' type; METHOD: FI_MOE_*; EPL: experts a lane holds (experts <= EPL * W).
template <typename T, int METHOD, int EPL>
FI_DEVICE void route(const fi_moe_route_params &p, int token, int lane) {
  const T *row = static_cast<const T *>(p.logits) + (int64_t)token * p.logits_stride;
  const int E = p.experts;
  float x[EPL];
  uint64_t key[EPL];
#pragma unroll
  for (int j = 0; j < EPL; j++) {
    const int e = lane + j * FI_WARP;
    x[j] = e < E ? fi_to_float(row[e]) : neg_inf();
    const float v = METHOD == FI_MOE_DEEPSEEK_V3 ? ds_score(x[j], p.bias, e < E ? e : 0) : x[j];
    key[j] = e < E ? key_of(v, e) : 0ull;
  }
  if (METHOD == FI_MOE_DEEPSEEK_V3 && p.topk_group < p.n_group) {
    // Every expert of a group not kept leaves the candidates. e / G as a multiply: exact
    // for e, G <= 512 (the error, e / 2^20, stays under 1 / G).
    const unsigned kept = kept_groups<T>(p, row, lane);
    const int G = E / p.n_group;
    const uint32_t inv = ((1u << 20) + (uint32_t)G - 1u) / (uint32_t)G;
#pragma unroll
    for (int j = 0; j < EPL; j++) {
      const uint32_t e = (uint32_t)(lane + j * FI_WARP);
      if (e < (uint32_t)E && !((kept >> ((e * inv) >> 20)) & 1u)) key[j] = 0ull;
    }
  }
  // The top k, one warp maximum each: lane t keeps the t-th pick.
  uint64_t best = 0ull;
#pragma unroll
  for (int j = 0; j < EPL; j++) best = key[j] > best ? key[j] : best;
  int my_e = -1;
  for (int t = 0; t < p.top_k; t++) {
    const uint64_t w = warp_max_key(best);
    if (lane == t && w) my_e = key_expert(w);
    if (best == w && w) {
      uint64_t next = 0ull;
#pragma unroll
      for (int j = 0; j < EPL; j++) {
        if (key[j] == w) key[j] = 0ull;
        next = key[j] > next ? key[j] : next;
      }
      best = next;
    }
  }
  // Weights, from the picks' raw logits (read again: cached). Softmax over all experts:
  // its maximum and denominator from every lane.
  const bool mine = lane < p.top_k;
  const float my_x = my_e >= 0 ? fi_to_float(row[my_e]) : 0.0f;
  float w = 0.0f;
  if (METHOD == FI_MOE_SOFTMAX_TOPK || METHOD == FI_MOE_SOFTMAX_TOPK_RENORM) {
    float m = neg_inf();
#pragma unroll
    for (int j = 0; j < EPL; j++)
      if (lane + j * FI_WARP < E && x[j] == x[j]) m = fmaxf(m, x[j]);
    m = warp_max(m);
    float den = 0.0f;
#pragma unroll
    for (int j = 0; j < EPL; j++)
      if (lane + j * FI_WARP < E && x[j] == x[j]) den += __expf(x[j] - m);
    den = fi_warp_sum(den);
    w = mine ? __expf(my_x - m) / den : 0.0f;
    if (METHOD == FI_MOE_SOFTMAX_TOPK_RENORM) w = w / fi_warp_sum(w);
  } else if (METHOD == FI_MOE_RENORMALIZE) {
    // The first pick is the largest logit (lane 0's).
    const float m = shfl(my_x, 0);
    w = mine ? __expf(my_x - m) : 0.0f;
    w = w / fi_warp_sum(w);
  } else if (METHOD == FI_MOE_DEEPSEEK_V3) {
    w = mine ? sigmoid(my_x) : 0.0f;
    w = w / (fi_warp_sum(w) + 1e-20f);
  } else {
    w = mine ? sigmoid(my_x) : 0.0f;
  }
  if (mine) {
    p.ids[(int64_t)token * p.ids_stride + lane] = my_e;
    p.weights[(int64_t)token * p.weights_stride + lane] = w * p.scale;
  }
}

// WARPS tokens a block, a warp each.
template <typename T, int METHOD, int EPL, int WARPS>
FI_DEVICE void routing(const fi_moe_route_params &p) {
  const int lane = (int)threadIdx.x % FI_WARP;
  const int token = (int)blockIdx.x * WARPS + (int)threadIdx.x / FI_WARP;
  if (token < p.tokens) route<T, METHOD, EPL>(p, token, lane);
}

}  // namespace moe
}  // namespace fi
