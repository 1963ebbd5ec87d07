// moe_routing.cuh: mixture-of-experts routing, logits [tokens, experts] -> the top-k experts
// of each token and their weights, one warp a token (methods: moe_params.h).
//
// Lane l holds experts l, l + W, l + 2W, ... (EPL of them; W the warp), so a load of one
// expert per lane is one coalesced row segment. The top k are found one at a time, each by a
// warp-wide argmax; ties go to the smaller expert index (and, for DeepSeek-V3's groups, to
// the smaller group index), so the choice is a pure function of the inputs. NaN scores
// order below -inf: a NaN expert is picked only when nothing else is left.
#pragma once
#include "moe_params.h"

namespace fi {
namespace moe {

FI_DEVICE float shfl_xor_f(float v, int o) {
#if FI_CUDA
  return __shfl_xor_sync(0xffffffffu, v, o);
#else
  return __shfl_xor(v, o, FI_WARP);
#endif
}
FI_DEVICE int shfl_xor_i(int v, int o) {
#if FI_CUDA
  return __shfl_xor_sync(0xffffffffu, v, o);
#else
  return __shfl_xor(v, o, FI_WARP);
#endif
}
FI_DEVICE float shfl_f(float v, int src) {
#if FI_CUDA
  return __shfl_sync(0xffffffffu, v, src);
#else
  return __shfl(v, src, FI_WARP);
#endif
}

FI_DEVICE float neg_inf() { return bits_to_float(0xff800000u); }
FI_DEVICE float warp_max(float v) {
#pragma unroll
  for (int o = FI_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, shfl_xor_f(v, o));
  return v;
}

// A candidate: its score and index, and a rank below the score for what must lose to any
// score (0 a plain candidate, 1 a NaN score, 2 taken, excluded or past the end).
struct cand {
  float s;
  int i;
  int rank;
};
FI_DEVICE bool better(const cand &a, const cand &b) {
  if (a.rank != b.rank) return a.rank < b.rank;
  if (a.rank == 0 && a.s != b.s) return a.s > b.s;
  return a.i < b.i;
}
FI_DEVICE cand warp_best(cand c) {
#pragma unroll
  for (int o = FI_WARP / 2; o > 0; o >>= 1) {
    cand d{shfl_xor_f(c.s, o), shfl_xor_i(c.i, o), shfl_xor_i(c.rank, o)};
    if (better(d, c)) c = d;
  }
  return c;
}

FI_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

// The sum of the two largest of the group's scores, on every lane (for a group of one
// expert, its score). Scores of excluded lanes are -inf.
FI_DEVICE float group_top2(float a1, float a2) {
#pragma unroll
  for (int o = FI_WARP / 2; o > 0; o >>= 1) {
    const float b1 = shfl_xor_f(a1, o), b2 = shfl_xor_f(a2, o);
    const float t1 = fmaxf(a1, b1), t2 = fmaxf(fminf(a1, b1), fmaxf(a2, b2));
    a1 = t1, a2 = t2;
  }
  return a2 == neg_inf() ? a1 : a1 + a2;
}

// T: the logits' type; METHOD: FI_MOE_*; EPL: experts a lane holds (experts <= EPL * W).
template <typename T, int METHOD, int EPL>
FI_DEVICE void route(const fi_moe_route_params &p, int token, int lane) {
  const T *row = static_cast<const T *>(p.logits) + (int64_t)token * p.logits_stride;
  const int E = p.experts;
  float x[EPL], s[EPL];
  int rank[EPL];
#pragma unroll
  for (int j = 0; j < EPL; j++) {
    const int e = lane + j * FI_WARP;
    x[j] = e < E ? fi_to_float(row[e]) : neg_inf();
    float v = x[j];
    if (METHOD == FI_MOE_DEEPSEEK_V3 && e < E) v = sigmoid(v) + (p.bias ? p.bias[e] : 0.0f);
    s[j] = v;
    rank[j] = e >= E ? 2 : v != v ? 1 : 0;
  }
  if (METHOD == FI_MOE_DEEPSEEK_V3) {
    // Group scores: lane g keeps group g's; then the topk_group best groups are kept
    // (a bit each in `kept`) and every expert of another group is excluded.
    const int G = E / p.n_group;
    float gscore = neg_inf();
    for (int g = 0; g < p.n_group; g++) {
      float a1 = neg_inf(), a2 = neg_inf();
#pragma unroll
      for (int j = 0; j < EPL; j++) {
        const int e = lane + j * FI_WARP;
        if (rank[j] == 0 && e / G == g) {
          if (s[j] > a1) a2 = a1, a1 = s[j];
          else if (s[j] > a2) a2 = s[j];
        }
      }
      const float v = group_top2(a1, a2);
      if (lane == g) gscore = v;
    }
    unsigned kept = 0;
    cand gc{gscore, lane, lane < p.n_group ? (gscore != gscore ? 1 : 0) : 2};
    for (int t = 0; t < p.topk_group; t++) {
      const cand w = warp_best(gc);
      kept |= 1u << w.i;
      if (lane == w.i) gc.rank = 2;
    }
#pragma unroll
    for (int j = 0; j < EPL; j++) {
      const int e = lane + j * FI_WARP;
      if (e < E && !((kept >> (e / G)) & 1u)) rank[j] = 2;
    }
  }
  // The top k, one argmax each: lane t keeps the t-th pick's index and raw logit.
  int my_e = -1;
  float my_x = 0.0f;
  for (int t = 0; t < p.top_k; t++) {
    cand c{0.0f, 0x7fffffff, 2};
#pragma unroll
    for (int j = 0; j < EPL; j++) {
      const cand d{s[j], lane + j * FI_WARP, rank[j]};
      if (better(d, c)) c = d;
    }
    const cand w = warp_best(c);
    const int owner = w.i % FI_WARP, jj = w.i / FI_WARP;
    float xo = 0.0f;
#pragma unroll
    for (int j = 0; j < EPL; j++)
      if (j == jj) xo = x[j];
    xo = shfl_f(xo, owner);
    if (lane == owner) {
#pragma unroll
      for (int j = 0; j < EPL; j++)
        if (j == jj) rank[j] = 2;
    }
    if (lane == t) my_e = w.i, my_x = xo;
  }
  // Weights. Softmax over all experts: its maximum and denominator from every lane.
  const bool mine = lane < p.top_k;
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
    const float m = shfl_f(my_x, 0);
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
