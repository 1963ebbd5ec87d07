// sampling_select.cuh: the threshold search of the sampling kernels (Search): the largest
// key tau whose measure above it (a count of keys, or a 64-bit fixed-point mass) reaches a
// need, without sorting; exact and order-independent, each histogram merged over the
// cluster. The top-k and top-p filters ask it for their thresholds.
//
// SEL picks the search:
//   0 radix select over fixed bit fields of order-preserving uint32 keys (12 + 12 + 8
//     bits; 12 + 12 + 7 for probabilities, whose sign bit is 0): three histogram passes;
//   1 the same over the row's own key range: one more pass (the smallest and largest key),
//     then rounds of at most 4096 bins over what is left of the range, so a row whose
//     values span few octaves still spreads over many bins (fewer colliding shared-memory
//     atomics).
// Histograms are 32-bit shared-memory counters: a 64-bit shared atomic add is a
// compare-and-swap loop (a first version with 64-bit counters ran these ops much
// slower on the H200, before the warp aggregation and the finer first level were added
// too: docs/sampling.md, figures from comments);
// masses carry into a second 32-bit word. Every pass after the first re-reads the row, which the
// first pass left in L2 (64 rows of 128256 floats: 33 MB of the H200's 60 MB).
#pragma once
#include "sampling_row.cuh"

namespace fi {
namespace smp {

// The functions of the search, over a row of type R (Row).
template <typename R>
struct Search {
  static constexpr bool LOGITS = R::LOGITS;
  static constexpr int THREADS = R::Threads, C = R::Cluster, SEL = R::Sel;

  // The largest d in [0, n) with sum(arr[d..n)) >= need, and that sum less arr[d]
  // (the mass above d). need_of(total) gives need (0: no threshold). arr may be remote.
  template <typename G, typename N>
  static FI_DEVICE bool find_pivot(SelSmem<THREADS, C> &sm, G arr, int n, N need_of,
                                   uint32_t &digit, u64 &above, u64 &bin, u64 &total) {
    const int tid = (int)threadIdx.x, l = tid % FI_WARP, w = tid / FI_WARP;
    constexpr int W = THREADS / FI_WARP;
    const int seg = (n + THREADS - 1) / THREADS, lo = tid * seg;
    const int hi = lo + seg < n ? lo + seg : n;
    u64 s = 0;
    for (int b = lo; b < hi; b++) s += arr(b);
    u64 v = s;  // inclusive suffix sum over the warp's lanes
#pragma unroll
    for (int o = 1; o < FI_WARP; o <<= 1) {
      const u64 x = shfl_down(v, o);
      if (l + o < FI_WARP) v += x;
    }
    __syncthreads();
    if (l == 0) sm.scr[w] = v;
    __syncthreads();
    u64 later = 0, tot = 0;
#pragma unroll
    for (int i = 0; i < W; i++) {
      tot += sm.scr[i];
      if (i > w) later += sm.scr[i];
    }
    total = tot;
    const u64 need = need_of(tot);
    if (need == 0) return false;
    const u64 suf = v + later, excl = suf - s;
    if (s > 0 && excl < need && need <= suf) {
      u64 acc = excl;
      for (int b = hi - 1; b >= lo; b--) {
        const u64 a = arr(b);
        if (acc + a >= need) {
          sm.res_digit = (uint32_t)b;
          sm.res_above = acc;
          sm.res_bin = a;
          break;
        }
        acc += a;
      }
    }
    __syncthreads();
    digit = sm.res_digit;
    above = sm.res_above;
    bin = sm.res_bin;
    return true;
  }

  // Radix select: the largest key tau with (measure of keys >= tau, among keys >= lower)
  // >= need, need = need_of(measure of all keys >= lower); MASS: fixed-point weights,
  // else counts. Returns `lower` when need_of says there is no threshold. EXACT (counts):
  // stops early when a whole bin is needed (the same set, a lower tau).
  template <bool MASS, typename W, typename N>
  static FI_DEVICE uint32_t select(R &r, uint32_t lower, W wfun, N need_of) {
    SelSmem<THREADS, C> &sm = *r.sel;
    const int tid = (int)threadIdx.x;
    // Digits: 12 + 12 + 8 bits of a logit key; probability keys have no sign bit, so
    // 12 + 12 + 7 bits (the first level 1/16 of an octave: the tail spreads over more bins).
    constexpr int S0 = LOGITS ? 20 : 19, S1 = LOGITS ? 8 : 7;
    uint32_t prefix = 0;
    u64 need = 0;
    for (int round = 0; round < 3; round++) {
      const int shift = round == 0 ? S0 : round == 1 ? S1 : 0;
      const int nb = round == 2 ? (1 << S1) : 4096;
      const int pshift = round == 1 ? S0 : S1;
      for (int b = tid; b < nb; b += THREADS) sm.lo[b] = sm.hi[b] = 0u;
      __syncthreads();
      // The counted keys of this round are >= lower and start with prefix.
      const uint32_t pfloor = round == 0 ? 0u : prefix << pshift;
      r.for_groups_above(pfloor > lower ? pfloor : lower, [&](int, float(&v)[GROUP]) {
#pragma unroll
        for (int i = 0; i < GROUP; i++) {
          const uint32_t k = key_of<LOGITS>(v[i]);
          const bool act = k >= lower && (round == 0 || (k >> pshift) == prefix);
          const uint32_t b = (k >> shift) & (uint32_t)(nb - 1);
          if (MASS) {
            const u64 inc = act ? fx(wfun(v[i])) : 0ull;
            if (inc) {
              const uint32_t l = (uint32_t)inc, old = atomicAdd(&sm.lo[b], l);
              const uint32_t h = (uint32_t)(inc >> 32) + (old + l < old ? 1u : 0u);
              if (h) atomicAdd(&sm.hi[b], h);
            }
          } else {
#if FI_CUDA
            // One add per distinct bin of the warp: lanes in the same bin (a concentrated
            // distribution puts most of a warp in a few) would serialize on one address.
            // match.any is not cheap: skipped when no lane of the warp counts anything (most
            // warps of rounds 1 and 2).
            if (__ballot_sync(0xffffffffu, act)) {
              const uint32_t peers = match_any(act ? b : 0xffffffffu);
              if (act && (peers & ((1u << r.lane) - 1u)) == 0u) atomicAdd(&sm.lo[b], __popc(peers));
            }
#else
            if (act) atomicAdd(&sm.lo[b], 1u);
#endif
          }
        }
      });
      uint32_t digit;
      u64 above, bin, total;
      const u64 need_now = need;
      auto need_fn = [&](u64 tot) -> u64 { return round == 0 ? need_of(tot) : need_now; };
      if (C == 1) {
        __syncthreads();
        auto get = [&](int b) -> u64 { return ((u64)sm.hi[b] << 32) | sm.lo[b]; };
        if (!find_pivot(sm, get, nb, need_fn, digit, above, bin, total)) return lower;
        if (round == 0) need = need_of(total);
      } else {
        // Each CTA merges one slice of the bins over the cluster, then every CTA finds
        // the slice holding the pivot from the slice totals, and the bin in it.
        cluster_sync();
        const int S = nb / C, s0 = r.rank * S;
        u64 mine = 0;
        for (int b = tid; b < S; b += THREADS) {
          u64 x = 0;
          for (int c = 0; c < C; c++)
            x += ((u64)*remote(&sm.hi[s0 + b], (uint32_t)c) << 32) |
                 *remote(&sm.lo[s0 + b], (uint32_t)c);
          sm.merged[b] = x;
          mine += x;
        }
        auto add = [](u64 a, u64 b) { return a + b; };
        mine = block_reduce<THREADS>(mine, add, sm.scr);
        if (tid == 0) sm.slice_tot = mine;
        cluster_sync();
        if (tid == 0) {
          u64 tot[C], all = 0;
          for (int c = 0; c < C; c++) all += (tot[c] = *remote(&sm.slice_tot, (uint32_t)c));
          const u64 nd = round == 0 ? need_of(all) : need;
          uint32_t s = 0;
          u64 acc = 0;
          if (nd) {
            for (s = C - 1; s > 0; s--) {
              if (acc + tot[s] >= nd) break;
              acc += tot[s];
            }
          }
          sm.res_need = nd;
          sm.res_slice = s;
          sm.res_above = acc;
          sm.res_total = all;
        }
        __syncthreads();
        const u64 nd = sm.res_need, acc = sm.res_above;
        const uint32_t s = sm.res_slice;
        if (nd == 0) return lower;
        if (round == 0) need = nd;
        __syncthreads();
        const u64 rest = nd - acc;
        const u64 *m = remote(sm.merged, s);
        find_pivot(
            sm, [m](int b) { return m[b]; }, S, [&](u64) { return rest; }, digit, above, bin,
            total);
        digit += s * (uint32_t)S;
        above += acc;
      }
      prefix = round == 0 ? digit : round == 1 ? (prefix << 12) | digit : (prefix << S1) | digit;
      need -= above;  // still needed from the pivot bin
      __syncthreads();
      if (!MASS && round < 2 && bin == need) {
        // All of the pivot bin is in: its lower edge selects the same set.
        const uint32_t edge = prefix << shift;
        return edge > lower ? edge : lower;
      }
    }
    return prefix > lower ? prefix : lower;
  }

  // ---- SEL 1: selection over the row's key range ----

  // The key every "nothing" maps to: 0 for probabilities (zero, negative, NaN, padding),
  // the key of -inf for logits (also NaN and padding). No key is below it.
  static FI_DEVICE uint32_t floor_key() { return key_of<LOGITS>(LOGITS ? neg_inf() : 0.0f); }

  // Smallest and largest key above the floor over the row (both the floor if none).
  static FI_DEVICE void key_range(R &r, uint32_t &kmin, uint32_t &kmax) {
    const uint32_t fl = floor_key();
    uint32_t mn = 0xffffffffu, mx = 0u;
    r.for_groups([&](int, float(&v)[GROUP]) {
#pragma unroll
      for (int i = 0; i < GROUP; i++) {
        const uint32_t k = key_of<LOGITS>(v[i]);
        if (k > fl) {
          mn = k < mn ? k : mn;
          mx = k > mx ? k : mx;
        }
      }
    });
    auto umin = [](uint32_t a, uint32_t b) { return a < b ? a : b; };
    auto umax = [](uint32_t a, uint32_t b) { return a > b ? a : b; };
    mn = cluster_reduce<C>(block_reduce<THREADS>(mn, umin, r.rs.k), umin, r.rs.kslot);
    mx = cluster_reduce<C>(block_reduce<THREADS>(mx, umax, r.rs.k), umax, r.rs.kslot);
    if (mx == 0u) mn = mx = fl;
    kmin = mn;
    kmax = mx;
  }

  // The logit of a key (the inverse of key_of<true>).
  static FI_DEVICE float key_value(uint32_t k) {
    return bits_to_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
  }

  // As select(), over the keys in [max(kmin, lower), kmax] above the floor: each round
  // splits the remaining range of width 2^w into 2^min(w, 12) bins; at most 3 rounds.
  // Floor keys are never counted: a count need beyond the counted keys means the floor
  // itself is the threshold (every element is in).
  template <bool MASS, typename W, typename N>
  static FI_DEVICE uint32_t select_range(R &r, uint32_t lower, uint32_t kmin, uint32_t kmax, W wfun,
                                         N need_of) {
    SelSmem<THREADS, C> &sm = *r.sel;
    const int tid = (int)threadIdx.x;
    const uint32_t fl = floor_key();
    uint32_t base = kmin > lower ? kmin : lower;
    if (kmax == fl || kmax < base) {  // nothing counted: no threshold (need_of(0) for mass)
      return lower;
    }
    int w = 32 - __clz(kmax - base);  // kmax - base < 2^w
    u64 need = 0;
    for (int round = 0;; round++) {
      const int shift = w > 12 ? w - 12 : 0;
      const int nb = 1 << (w - shift);
      const u64 width = (u64)1 << w;
      for (int b = tid; b < nb; b += THREADS) sm.lo[b] = sm.hi[b] = 0u;
      __syncthreads();
      r.for_groups_above(base > lower ? base : lower, [&](int, float(&v)[GROUP]) {
#pragma unroll
        for (int i = 0; i < GROUP; i++) {
          const uint32_t k = key_of<LOGITS>(v[i]);
          const bool act = k > fl && k >= lower && k >= base && (u64)(k - base) < width;
          if (!act) continue;
          const uint32_t b = (k - base) >> shift;
          if (MASS) {
            const u64 inc = fx(wfun(v[i]));
            if (inc) {
              const uint32_t l = (uint32_t)inc, old = atomicAdd(&sm.lo[b], l);
              const uint32_t h = (uint32_t)(inc >> 32) + (old + l < old ? 1u : 0u);
              if (h) atomicAdd(&sm.hi[b], h);
            }
          } else {
            atomicAdd(&sm.lo[b], 1u);
          }
        }
      });
      uint32_t digit;
      u64 above, bin, total;
      const u64 need_now = need;
      // Round 0: the need from the total; past the counted keys (counts) there is none.
      auto first_need = [&](u64 tot) -> u64 {
        const u64 nd = need_of(tot);
        return nd > tot ? 0ull : nd;
      };
      if (C == 1) {
        __syncthreads();
        auto get = [&](int b) -> u64 { return ((u64)sm.hi[b] << 32) | sm.lo[b]; };
        auto need_fn = [&](u64 tot) -> u64 { return round == 0 ? first_need(tot) : need_now; };
        if (!find_pivot(sm, get, nb, need_fn, digit, above, bin, total)) return lower;
        if (round == 0) need = first_need(total);
      } else {
        // select()'s merge, over slices of ceil(nb / C) bins (nb need not be a multiple of
        // C). Not shared with it: each helper tried (returning the no-threshold exit to the
        // caller) changed the machine code of the cluster configurations.
        cluster_sync();
        const int S = (nb + C - 1) / C, s0 = r.rank * S;
        const int n_mine = nb - s0 < S ? (nb - s0 > 0 ? nb - s0 : 0) : S;
        u64 mine = 0;
        for (int b = tid; b < n_mine; b += THREADS) {
          u64 x = 0;
          for (int c = 0; c < C; c++)
            x += ((u64)*remote(&sm.hi[s0 + b], (uint32_t)c) << 32) |
                 *remote(&sm.lo[s0 + b], (uint32_t)c);
          sm.merged[b] = x;
          mine += x;
        }
        auto add = [](u64 a, u64 b) { return a + b; };
        mine = block_reduce<THREADS>(mine, add, sm.scr);
        if (tid == 0) sm.slice_tot = mine;
        cluster_sync();
        if (tid == 0) {
          u64 tot[C], all = 0;
          for (int c = 0; c < C; c++) all += (tot[c] = *remote(&sm.slice_tot, (uint32_t)c));
          const u64 nd = round == 0 ? first_need(all) : need;
          uint32_t s = 0;
          u64 acc = 0;
          if (nd) {
            for (s = C - 1; s > 0; s--) {
              if (acc + tot[s] >= nd) break;
              acc += tot[s];
            }
          }
          sm.res_need = nd;
          sm.res_slice = s;
          sm.res_above = acc;
          sm.res_total = all;
        }
        __syncthreads();
        const u64 nd = sm.res_need, acc = sm.res_above;
        const uint32_t s = sm.res_slice;
        if (nd == 0) return lower;
        if (round == 0) need = nd;
        __syncthreads();
        const u64 rest = nd - acc;
        const u64 *m = remote(sm.merged, s);
        const int n_s = nb - (int)s * S < S ? nb - (int)s * S : S;
        find_pivot(
            sm, [m](int b) { return m[b]; }, n_s, [&](u64) { return rest; }, digit, above, bin,
            total);
        digit += s * (uint32_t)S;
        above += acc;
      }
      base += digit << shift;
      w = shift;
      need -= above;
      __syncthreads();
      if (w == 0 || (!MASS && bin == need)) return base;  // exact key, or the whole bin is in
    }
  }

  // The key range of the row into r.kmin_ and r.kmax_ (SEL 1), by the first pass that needs it.
  static FI_DEVICE void need_range(R &r) {
    if (!r.have_range_) key_range(r, r.kmin_, r.kmax_);
    r.have_range_ = true;
  }

  // The largest tau with at least need_of(count) keys >= tau among the keys >= lower
  // (count: theirs), or with at least need_of(mass) of their fixed-point mass (weights
  // wfun); lower when need_of says there is no threshold.
  template <typename N>
  static FI_DEVICE uint32_t count_tau(R &r, uint32_t lower, N need_of) {
    auto nofn = [](float) { return 0.0f; };
    return tau<false>(r, lower, nofn, need_of);
  }
  template <typename W, typename N>
  static FI_DEVICE uint32_t mass_tau(R &r, uint32_t lower, W wfun, N need_of) {
    return tau<true>(r, lower, wfun, need_of);
  }
  template <bool MASS, typename W, typename N>
  static FI_DEVICE uint32_t tau(R &r, uint32_t lower, W wfun, N need_of) {
    if constexpr (SEL == 1) {
      need_range(r);
      return select_range<MASS>(r, lower, r.kmin_, r.kmax_, wfun, need_of);
    } else {
      return select<MASS>(r, lower, wfun, need_of);
    }
  }
};

}  // namespace smp
}  // namespace fi
