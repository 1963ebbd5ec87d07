// sampling_topp.cuh: the top-p filter (TopP): its threshold, through the search, for the
// renorm op; and top-p sampling, which draws first and searches only when it must.
//
// Sampling by rejection: draws from the row restricted to a set T containing the top-p set
// S are, when they fall in S, draws from S: so KDRAW independent draws from T are tested
// against S in order and the first inside wins. Each is inside with probability
// M(S) / M(T) >= top_p, so at top_p 0.9 all KDRAW miss once in 10^4 rows. A candidate c is
// in S iff the mass of the keys above it is below the need (the same fixed-point measure
// and need as tau()'s search), so no threshold is searched for: one pass to draw (the
// masses of the tiles, then an exact integer inverse CDF over tiles, lanes and elements),
// one pass for the masses above the candidates. Two passes instead of a three-round search
// and a sampling pass; the second sums the masses above the candidates in float with a
// rounding bound and falls back to exact sums only when the bound cannot decide
// (float_test). When all miss, the exact search runs over the keys above the largest miss
// and the row is sampled as before (fresh Philox counters).
#pragma once
#include "sampling_row.cuh"
#include "sampling_select.cuh"

namespace fi {
namespace smp {

// The functions of the filter, over a row of type R (Row).
template <typename R>
struct TopP {
  typedef typename R::Elem T;
  static constexpr bool LOGITS = R::LOGITS;
  static constexpr int VEC = R::Vec, THREADS = R::Threads, C = R::Cluster, LW = R::LW;

  // tau of top-p among keys >= lower with weights wfun (lower: no threshold).
  template <typename W>
  static FI_DEVICE uint32_t tau(R &r, uint32_t lower, W wfun) {
    const float tp = r.top_p();
    if (!(tp < 1.0f)) return lower;
    auto need = [tp](u64 tot) -> u64 {
      if (tot == 0) return 0;
      const double x = ceil((double)tp * (double)tot);
      return x < 1.0 ? 1ull : (x > (double)tot ? tot : (u64)x);
    };
    return Search<R>::mass_tau(r, lower, wfun, need);
  }

  // The weight of an element in the draw: its fixed-point mass (exact, order-independent,
  // so the draw does not depend on the cluster size).
  template <typename W>
  static FI_DEVICE u64 mass(float x, uint32_t lower, W wfun) {
    return key_of<LOGITS>(x) >= lower ? fx(wfun(x)) : 0ull;
  }

  // Candidate j of the draw at position t of this CTA's mass: the tile, then the lane, then
  // the element (lane j-th logical warp does it); written into every CTA of the cluster.
  template <typename W>
  static FI_DEVICE void locate(R &r, int j, u64 t, int nt, uint32_t lower, W wfun) {
    SelSmem<THREADS, C> &sm = *r.sel;
    int rel = -1;
    u64 acc = 0;
    for (int c0 = 0; c0 < nt; c0 += 32) {
      const int b = c0 + r.lane;
      const u64 x = b < nt ? ((u64)sm.hi[b] << 32) | sm.lo[b] : 0ull;
      const u64 incl = lw_scan(x, r.lane);
      const u64 ctot = shfl_idx64(incl, 31);
      if (acc + ctot > t) {
        const int f = lw_first(acc + incl > t, r.lane);
        const u64 excl = shfl_idx64(incl - x, f);
        rel = c0 + f;
        t -= acc + excl;
        break;
      }
      acc += ctot;
    }
    if (rel < 0) return;  // not reached: t is below this CTA's mass
    const int tile = r.t0 + rel;
    float v[GROUP];
    load_group<T, VEC, LOGITS>(r.in, r.p.vocab, tile, r.lane, v);
    u64 s = 0;
#pragma unroll
    for (int i = 0; i < GROUP; i++) s += mass(v[i], lower, wfun);
    const u64 incl = lw_scan(s, r.lane);
    const int f = lw_first(incl > t, r.lane);
    if (r.lane != f) return;
    u64 a = incl - s;
    int pick = -1;
#pragma unroll
    for (int i = 0; i < GROUP; i++) {
      a += mass(v[i], lower, wfun);
      if (pick < 0 && a > t) pick = i;
    }
    if (pick < 0) return;
    const int e = r.elem(tile, pick);
    float xv = v[0];
#pragma unroll
    for (int i = 1; i < GROUP; i++)
      if (i == pick) xv = v[i];
    const uint32_t key = key_of<LOGITS>(xv);
    for (int c = 0; c < C; c++) {
      *at_rank<C>(&r.rs.ckey[j], c) = key;
      *at_rank<C>(&r.rs.cidx[j], c) = e;
    }
  }

  // A[j]: this thread's sum of conv(weight) over its keys above candidate j (pass 2 of
  // top-p; only keys above the smallest candidate count).
  template <typename V, typename W, typename F>
  static FI_DEVICE void cand_above(R &r, const uint32_t (&ck)[KDRAW], uint32_t cmin, W wfun,
                                   F conv, V (&A)[KDRAW]) {
#pragma unroll
    for (int j = 0; j < KDRAW; j++) A[j] = 0;
    r.for_groups_above(cmin + 1u, [&](int, float(&v)[GROUP]) {
#pragma unroll
      for (int i = 0; i < GROUP; i++) {
        const uint32_t k = key_of<LOGITS>(v[i]);
        if (k > cmin) {
          const V f = conv(wfun(v[i]));
#pragma unroll
          for (int j = 0; j < KDRAW; j++) A[j] += k > ck[j] ? f : V(0);
        }
      }
    });
  }

  // The candidates' sums A (per thread) added over the row into res, in every CTA: the lane
  // tree, the warps in order, the CTAs in rank order (the same float sums in every CTA).
  template <typename V>
  static FI_DEVICE void cand_sum(R &r, V (&A)[KDRAW], V (&wv)[32][KDRAW], V (&slot)[KDRAW],
                                 V (&res)[KDRAW]) {
    const int tid = (int)threadIdx.x;
#pragma unroll
    for (int j = 0; j < KDRAW; j++)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) A[j] += shfl_xor(A[j], o);
    if (r.lane == 0)
#pragma unroll
      for (int j = 0; j < KDRAW; j++) wv[r.lw][j] = A[j];
    __syncthreads();
    if (tid < KDRAW) {
      V x = 0;
      for (int w = 0; w < LW; w++) x += wv[w][tid];
      slot[tid] = x;
    }
    if (C > 1)
      cluster_sync();
    else
      __syncthreads();
    if (tid < KDRAW) {
      V x = 0;
      for (int c = 0; c < C; c++) x += *at_rank<C>(&slot[tid], c);
      res[tid] = x;
    }
    __syncthreads();
  }

  // The membership test of the candidates with float sums: per element a compare and a
  // float add per candidate, where the exact test converts to 64-bit fixed point (a
  // quarter-rate conversion) and adds in two 32-bit halves. The float sum F of the weights
  // above a candidate bounds the exact fixed-point mass X: summing nonnegative terms through
  // at most d additions errs by at most g S (g = 2 d 2^-24 >= d u / (1 - d u)), and each
  // element's fixed point differs from w 2^36 by at most half a unit. A candidate is decided
  // only when the whole interval for X lies on one side of the need; otherwise (or when F
  // is not small and finite) the answer is -2 and the exact pass decides. Every CTA of the
  // cluster adds the same values in the same order, so all take the same branch.
  // Returns the token of the first candidate inside S, -1 when every drawn candidate is
  // outside (miss: the largest of them), -2 when undecided.
  template <typename W>
  static FI_DEVICE int float_test(R &r, const uint32_t (&ck)[KDRAW], uint32_t cmin, u64 need,
                                  W wfun, uint32_t &miss) {
    float A[KDRAW];
    cand_above(r, ck, cmin, wfun, [](float w) { return w; }, A);
    cand_sum(r, A, r.rs.af, r.rs.afslot, r.rs.afres);
    // d: the additions a term goes through (a lane's elements, the lane tree, the warps, the
    // cluster), counted from the largest CTA share of the row.
    const int ntiles = (r.p.vocab + TILE - 1) / TILE;
    const double d = 16.0 * (double)(((ntiles + C - 1) / C + LW - 1) / LW) + 5 + LW + C + 1;
    const double u = d * 5.9604644775390625e-8;
    if (u >= 0.25) return -2;
    const double g = 2.0 * u + 1e-12, slack = 0.5 * (double)r.p.vocab + 16.0;
    const double dn = (double)need, nlo = dn * (1.0 - 0x1p-50) - 1.0,
                 nhi = dn * (1.0 + 0x1p-50) + 1.0;
    uint32_t m = miss;
    for (int j = 0; j < KDRAW; j++) {
      if (r.rs.cidx[j] < 0) continue;
      const double F = (double)r.rs.afres[j];
      if (!(F <= 1048576.0)) return -2;  // inf, NaN or large: terms may pass fixed point's range
      const double xs = F * 68719476736.0;
      if (xs * (1.0 + 2.0 * g) + slack < nlo) return r.rs.cidx[j];  // X < need: in S
      if (!(xs * (1.0 - g) - slack >= nhi)) return -2;              // not surely X >= need
      m = ck[j] > m ? ck[j] : m;
    }
    miss = m;
    return -1;
  }

  // Samples from the top-p set among the keys >= lower (weights wfun), as
  // draw(r, key >= tau(lower, wfun)) does, drawing by rejection first.
  template <typename W>
  static FI_DEVICE void sample(R &r, uint32_t lower, W wfun) {
    auto ge = [lower](float x) { return key_of<LOGITS>(x) >= lower; };
    const float tp = r.top_p();
    const int nt = r.t1 - r.t0, tid = (int)threadIdx.x;
    if (!(tp < 1.0f)) return draw(r, ge, wfun, lower);
    if (nt > 4096) {  // the tile masses would not fit the histogram arrays: search first
      const uint32_t th = tau(r, lower, wfun);
      return draw(r, [th](float x) { return key_of<LOGITS>(x) >= th; }, wfun, th);
    }
    SelSmem<THREADS, C> &sm = *r.sel;
    // Pass 1: the mass of every tile (0 for the skipped ones) and of the CTA.
    for (int b = tid; b < nt; b += THREADS) sm.lo[b] = sm.hi[b] = 0u;
    if (tid < KDRAW) r.rs.cidx[tid] = -1;
    __syncthreads();
    u64 mine = 0;
    r.for_groups_above(lower, [&](int tile, float(&v)[GROUP]) {
      u64 s = 0;
#pragma unroll
      for (int i = 0; i < GROUP; i++) s += mass(v[i], lower, wfun);
      s = lw_sum(s);
      if (r.lane == 0) {
        sm.lo[tile - r.t0] = (uint32_t)s;
        sm.hi[tile - r.t0] = (uint32_t)(s >> 32);
        mine += s;
      }
    });
    auto add = [](u64 a, u64 b) { return a + b; };
    mine = block_reduce<THREADS>(mine, add, r.rs.u);
    u64 before = 0, total = mine;
    if (C > 1) {
      if (tid == 0) r.rs.pslot = mine;
      cluster_sync();
      if (tid == 0) {
        u64 b = 0, a = 0;
        for (int c = 0; c < C; c++) {
          const u64 x = *remote(&r.rs.pslot, (uint32_t)c);
          if (c < r.rank) b += x;
          a += x;
        }
        r.rs.pres[0] = b;
        r.rs.pres[1] = a;
      }
      __syncthreads();
      before = r.rs.pres[0];
      total = r.rs.pres[1];
    }
    // No mass in fixed point (weights all below 2^-37): no threshold, as tau().
    if (total == 0) return draw(r, ge, wfun, lower);
    const double xn = ceil((double)tp * (double)total);
    const u64 need = xn < 1.0 ? 1ull : (xn > (double)total ? total : (u64)xn);
    // The draws: uniform integers below the total, from Philox counters no group uses.
    if (r.lw < KDRAW) {
      const u4 x = philox(u4{0x80000000u | (uint32_t)(r.lw >> 1), (uint32_t)r.row,
                             (uint32_t)r.p.offset, (uint32_t)(r.p.offset >> 32)},
                          (uint32_t)r.p.seed, (uint32_t)(r.p.seed >> 32));
      const u64 r64 = (r.lw & 1) ? ((u64)x.z << 32) | x.w : ((u64)x.x << 32) | x.y;
      const u64 t = __umul64hi(r64, total);
      if (t >= before && t - before < mine) locate(r, r.lw, t - before, nt, lower, wfun);
    }
    if (C > 1)
      cluster_sync();
    else
      __syncthreads();
    uint32_t ck[KDRAW], cmin = 0xffffffffu;
    bool any = false;
#pragma unroll
    for (int j = 0; j < KDRAW; j++) {
      const bool ok = r.rs.cidx[j] >= 0;
      ck[j] = ok ? r.rs.ckey[j] : 0xffffffffu;
      cmin = ok && ck[j] < cmin ? ck[j] : cmin;
      any = any || ok;
    }
    uint32_t miss = lower;  // the largest candidate outside S
    // Pass 2 in float first: decides every candidate but those whose mass above lies within
    // its rounding bound of the need (about 1e-5 of them); then the exact pass.
    const int fv =
        any && r.p.topp_variant == FI_SMP_TOPP_FLOAT ? float_test(r, ck, cmin, need, wfun, miss) : -2;
    if (fv >= 0) {
      if (r.rank == 0 && tid == 0)
        static_cast<int32_t *>(r.p.out)[(int64_t)r.row * r.p.out_stride] = fv;
      return;
    }
    if (fv == -1) miss += 1u;  // every candidate decided outside S
    if (any && fv == -2) {
      // Pass 2, exact: the mass above each candidate (only keys above the smallest count).
      u64 A[KDRAW];
      cand_above(r, ck, cmin, wfun, [](float w) { return fx(w); }, A);
      cand_sum(r, A, r.rs.aw, r.rs.aslot, r.rs.ares);
      for (int j = 0; j < KDRAW; j++) {
        if (r.rs.cidx[j] < 0) continue;
        if (r.rs.ares[j] < need) {  // in S: the first such draw is the sample
          if (r.rank == 0 && tid == 0)
            static_cast<int32_t *>(r.p.out)[(int64_t)r.row * r.p.out_stride] = r.rs.cidx[j];
          return;
        }
        miss = ck[j] > miss ? ck[j] : miss;
      }
      miss += 1u;  // S lies above every miss (keys stay below 0xffffffff)
    }
    // Every draw missed: the exact threshold among the keys above the misses (S is there,
    // and the need stays that of the mass above lower), then the row is sampled above it.
    auto fixed = [need](u64) { return need; };
    const uint32_t th = Search<R>::mass_tau(r, miss, wfun, fixed);
    draw(r, [th](float x) { return key_of<LOGITS>(x) >= th; }, wfun, th);
  }
};

}  // namespace smp
}  // namespace fi
