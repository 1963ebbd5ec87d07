// sampling.cuh: softmax, sampling from probabilities or logits with top-k / top-p / min-p,
// and the renorm / mask ops. One kernel per op; a row is worked on by a cluster of C CTAs
// (C > 1 only on sm_90, through distributed shared memory) or by one CTA.
//
// Each op is a composition of named pieces over one Row (sampling_row.cuh: the layout, the
// walk over the CTA's tiles, the row's maximum and sum, the sampling pass draw() and the
// output pass write()): the filters TopK and MinP below, TopP (sampling_topp.cuh), and the
// threshold search they use (Search, sampling_select.cuh). The shuffles, reductions and
// cluster helpers are reduce.cuh's, the generator philox.cuh's.
// A piece is a struct of static functions that take the row by reference, and the row holds
// all the state the passes share; run() composes them, each op's body in place. Both keep
// the machine code of the single-struct version it was split from: pieces kept as objects
// holding a reference to the row changed top-p sampling's code on sm_90 (the compiler no
// longer knew the tile-key flags between passes), and an op body moved into a function of
// its own changed softmax's and the renorms' code on gfx90a.
//
// Sampling without a CDF over the row: each group draws its own candidate by inverse CDF
// over its GROUP elements (held in registers) and an exponential E; the candidate with the
// smallest E / S_group (S: the group's mass) wins. min E_g / S_g over independent groups
// picks group g with probability S_g / sum(S) (the exponential race), so the draw is i
// with probability w_i / sum(w). Randomness: Philox4x32-10 keyed by the seed, counter
// (group, row, offset): the draw depends on the seed, offset, row and the row's values
// only, not on the batch, the cluster size or the block size. One Philox call per group
// of 16 elements with any weight.
//
// Thresholds without sorting (top-k: counts, top-p: 64-bit fixed-point masses), exact and
// order-independent (sampling_select.cuh). Top-p sampling draws first and searches only
// when it must (rejection sampling: sampling_topp.cuh).
#pragma once
#include "sampling_row.cuh"
#include "sampling_select.cuh"
#include "sampling_topp.cuh"

// The rendered entries of the cluster configurations test it (ops_sampling.c).
#define FI_SMP_CLUSTER FI_CLUSTER

namespace fi {
namespace smp {

// top-k: the threshold key of the k largest keys (0: every key).
template <typename R>
struct TopK {
  static FI_DEVICE uint32_t tau(R &r) {
    const int k = r.top_k();
    if (k <= 0 || k >= r.p.vocab) return 0u;
    auto need = [k](u64) -> u64 { return (u64)k; };
    return Search<R>::count_tau(r, 0u, need);
  }
};

// min-p: the probabilities at least min_p times the row's largest (min_p clamped to [0, 1]).
template <typename R>
struct MinP {
  static FI_DEVICE float threshold(R &r) {
    float mp = r.min_p();
    mp = mp > 0.0f ? (mp < 1.0f ? mp : 1.0f) : 0.0f;  // NaN: 0
    return mp * r.row_max();
  }
};

// The op of the row type: the filters, then the sampling or output pass.
template <typename R>
FI_DEVICE void run(R &r) {
  constexpr int OP = R::Op;
  if constexpr (OP == FI_SMP_SOFTMAX) {  // at temperature min_p, into float32 probabilities
    constexpr int THREADS = R::Threads, C = R::Cluster;
    const float inv_t = 1.0f / r.min_p();
    float m = neg_inf(), s = 0.0f;
    r.for_groups([&](int, float(&v)[GROUP]) {
      float gm = neg_inf();
#pragma unroll
      for (int i = 0; i < GROUP; i++) gm = fmaxf(gm, v[i] * inv_t);
      if (gm > neg_inf()) {
        float gs = 0.0f;
#pragma unroll
        for (int i = 0; i < GROUP; i++) gs += __expf(v[i] * inv_t - gm);
        if (gm > m) {
          s = s * __expf(m - gm) + gs;
          m = gm;
        } else {
          s += gs * __expf(gm - m);
        }
      }
    });
    // (m, s) pairs: the maximum first, then the sums rescaled to it.
    auto mx = [](float a, float b) { return fmaxf(a, b); };
    auto add = [](float a, float b) { return a + b; };
    const float bm = cluster_reduce<C>(block_reduce<THREADS>(m, mx, r.rs.f), mx, r.rs.mslot);
    float sc = m > neg_inf() ? s * __expf(m - bm) : 0.0f;
    sc = block_reduce<THREADS>(sc, add, r.rs.f2);
    const float bs = cluster_reduce<C>(sc, add, r.rs.sslot);
    const float inv_s = bm > neg_inf() && bs > 0.0f ? 1.0f / bs : 0.0f;
    write<float>(r,
                 [&](float x) { return bm > neg_inf() ? __expf(x * inv_t - bm) * inv_s : 0.0f; });
  } else if constexpr (OP == FI_SMP_SAMPLE) {
    draw(r, [](float) { return true; }, [](float x) { return prob_w(x); });
  } else if constexpr (OP == FI_SMP_TOPK) {
    const uint32_t tau = TopK<R>::tau(r);
    draw(r, [tau](float x) { return key_of<false>(x) >= tau; }, [](float x) { return prob_w(x); },
         tau);
  } else if constexpr (OP == FI_SMP_TOPP) {
    TopP<R>::sample(r, 0u, [](float x) { return prob_w(x); });
  } else if constexpr (OP == FI_SMP_MINP) {
    const float thr = MinP<R>::threshold(r);
    // thr > 0: the eligible values are positive, so their keys are >= thr's bits.
    draw(r, [thr](float x) { return prob_w(x) >= thr; }, [](float x) { return prob_w(x); },
         thr > 0.0f ? float_to_bits(thr) : 0u);
  } else if constexpr (OP == FI_SMP_TOPK_TOPP_LOGITS) {
    float m;
    if constexpr (R::Sel == 1) {  // the key range gives the largest logit too
      Search<R>::need_range(r);
      m = r.kmax_ == Search<R>::floor_key() ? neg_inf() : Search<R>::key_value(r.kmax_);
    } else {
      m = r.row_max();
    }
    const float ninf = neg_inf();
    auto wl = [m, ninf](float x) { return x > ninf ? __expf(x - m) : 0.0f; };
    TopP<R>::sample(r, TopK<R>::tau(r), wl);
  } else if constexpr (OP == FI_SMP_TOPK_TOPP_PROBS) {  // the same over probabilities
    TopP<R>::sample(r, TopK<R>::tau(r), [](float x) { return prob_w(x); });
  } else if constexpr (OP == FI_SMP_TOPK_RENORM || OP == FI_SMP_TOPP_RENORM) {
    uint32_t tau;
    if constexpr (OP == FI_SMP_TOPK_RENORM)
      tau = TopK<R>::tau(r);
    else
      tau = TopP<R>::tau(r, 0u, [](float x) { return prob_w(x); });
    auto el = [tau](float x) { return key_of<false>(x) >= tau; };
    const float s = r.row_sum(el, [](float x) { return prob_w(x); }, tau);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    write<typename R::Elem>(r, [&](float x) { return el(x) ? prob_w(x) * inv : 0.0f; });
  } else if constexpr (OP == FI_SMP_TOPK_MASK) {
    const uint32_t tau = TopK<R>::tau(r);
    const float ninf = neg_inf();
    write<typename R::Elem>(r, [tau, ninf](float x) { return key_of<true>(x) >= tau ? x : ninf; });
  }
  // No CTA leaves while another may still read its shared memory.
  if (R::Cluster > 1) cluster_sync();
}

template <int OP, typename T, int VEC, int THREADS, int C, int SEL>
FI_DEVICE void sampling_op(const fi_sampling_params &p) {
  __shared__ RedSmem rs;
  if constexpr (OP == FI_SMP_SOFTMAX || OP == FI_SMP_SAMPLE) {
    Row<OP, T, VEC, THREADS, C, SEL> r(p, rs, nullptr, nullptr);
    run(r);
  } else if constexpr (OP == FI_SMP_MINP) {
    __shared__ uint32_t tkey[TCAP];
    Row<OP, T, VEC, THREADS, C, SEL> r(p, rs, nullptr, tkey);
    run(r);
  } else {
    __shared__ SelSmem<THREADS, C> sel;
    __shared__ uint32_t tkey[TCAP];
    Row<OP, T, VEC, THREADS, C, SEL> r(p, rs, &sel, tkey);
    run(r);
  }
}

// A cluster configuration compiled for a target without clusters: never launched there.
FI_DEVICE void no_clusters() {
#if FI_CUDA
  asm volatile("trap;");
#else
  __builtin_trap();
#endif
}

}  // namespace smp
}  // namespace fi
