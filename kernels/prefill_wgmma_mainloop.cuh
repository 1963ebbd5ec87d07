// prefill_wgmma_mainloop.cuh: the steps of the wgmma prefill kernel's loop over a unit's KV
// tiles (prefill_wgmma.cuh, which orders them, in turn or overlapped): S = Q K^T by wgmma,
// the online softmax on S's accumulators, O's rescale and P into P V's A operand, O += P V
// by wgmma.
#pragma once
#include "prefill_wgmma_unit.cuh"

namespace fi {
namespace wg {

// does this warpgroup attend anything in tile t (warpgroup-uniform)
template <class S>
FI_DEVICE bool active(const unit<S> &un, int t) {
  const int j0 = un.kv_lo + t * S::KT;
  return un.wg_rows && j0 < un.wg_hi && j0 + S::KT > un.wg_lo;
}

// S = Q K^T of tile t (Q: this warpgroup's slice at qs): issued and committed (one group),
// not waited for.
template <class S>
FI_DEVICE void issue_s(const block<S> &b, const unit<S> &un, const uint32_t &qs, float (&s)[S::KT / 2], int t) {
  constexpr int KT = S::KT;
  const uint64_t da0 = kdesc(qs, 64 * 128, FI_WG_KDESC), db0 = kdesc(b.kv_stage(un.stg(t)), KT * 128, FI_WG_KDESC);
#pragma unroll
  for (int kk = 0; kk < S::D / 16; kk++) {
    const uint64_t da = da0 + (uint64_t)((kk >> 2) * (64 * 128 / 16) + (kk & 3) * 2);
    const uint64_t db = db0 + (uint64_t)((kk >> 2) * (KT * 128 / 16) + (kk & 3) * 2);
    mma<typename S::T, KT>::ss(s, da, db, kk > 0);  // scale-d 0 on the first step: S = 0 + ...
  }
  wg_commit();
}

// O += P V of tile t (P in pa, or PS: in this warpgroup's P tile at ps, [64][KT] K-major as
// Q's): issued and committed (one group), not waited for. NARROW (a literal): the tile's
// first KT / 2 tokens only (NAR, prefill_wgmma).
template <class S>
FI_DEVICE void issue_pv(const block<S> &b, const unit<S> &un, acc<S> &a, const uint32_t (&pa)[S::KT / 16][4],
                        const uint32_t &ps, int t, const bool NARROW) {
  constexpr int KT = S::KT;
  constexpr bool PS = S::PS;
  const uint32_t vs = b.kv_stage(un.stg(t)) + S::KV_BYTES;
  // PS: V's columns 64-71 are the ones, LBO bytes on (the next atom column), so each
  // step moves the start address on and LBO back by the same 2048 bytes
  const uint64_t dv0 = vdesc(vs, PS ? b.ones_base - vs : KT * 128, FI_WG_VDESC), dp0 = kdesc(ps, 64 * 128, FI_WG_KDESC);
#pragma unroll
  for (int kk = 0; kk < (NARROW ? KT / 32 : KT / 16); kk++) {
    const uint64_t dv = dv0 + (uint64_t)(kk * (2048 / 16)) - (PS ? (uint64_t)(kk * (2048 / 16)) << 16 : 0);
    if constexpr (PS)
      mma<typename S::T, S::ON>::template ss<1>(a.o, dp0 + (uint64_t)((kk >> 2) * (64 * 128 / 16) + (kk & 3) * 2), dv, 1);
    else
      mma<typename S::T, S::D>::rs_t(a.o, pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], dv, 1);
  }
  wg_commit();
}

// Online softmax (base 2) of tile t on s (in place: s becomes P, fp32); the rows' m and dsum
// updated, the factor O must be scaled by returned in alpha. O is not touched. kv_lo ..
// lim_hi: the unit's ranges (unit), passed as run_unit's own (prefill_wgmma.cuh, the machine
// code); c: lane % 4.
// MM: 0 no mask, 1 the mask on every column, 2 decided here (warpgroup-uniform); CAPOK:
// the soft cap may apply (checked here). With a wgmma in flight across it (the
// overlapped path) both must be literals deciding everything: ptxas serializes the
// in-flight wgmma on any branch. (Literals at every call, folded once the function is
// inlined.) Without the cap, S stays unscaled: the max is taken on raw scores
// (sm_scale > 0) and the scale folds into the exponent's FFMA. Two partial maxima and sums
// a row halve the dependent chains.
template <class S>
FI_DEVICE void softmax(const fi_prefill_kparams &p, acc<S> &a, float (&s)[S::KT / 2], const int &c, const int &kv_lo,
                       const int &in_lo, const int &in_hi, const int (&lim_lo)[2], const int (&lim_hi)[2], int t,
                       float (&alpha)[2], const int MM, const bool CAPOK) {
  using dec::neg_inf;
  using dec::ex2;
  using dec::shfl_xor;
  constexpr int KT = S::KT;
  // t made opaque: at the first turn (t == ta, invariant in the unit's loop) ptxas
  // otherwise hoists the whole mask (~650 instructions of bit-packed predicates) to
  // the unit's start, where every unit paid for it, masked or not (docs/prefill.md,
  // figures from comments).
  asm volatile("" : "+r"(t));
  const int j0 = kv_lo + t * KT;
  const bool masked = MM == 1 || (MM == 2 && (j0 < in_lo || j0 + KT > in_hi));
  const bool cap = S::CAP && CAPOK && p.cap_log2 != 0.0f;
  const float sc = cap ? 1.0f : p.scale_log2;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    // this row's attended columns of the tile, relative to the thread's column 2 c:
    // column 8 nb + e (an immediate) is in iff lo <= 8 nb + e < hi
    const int lo = lim_lo[h] - j0 - 2 * c, hi = lim_hi[h] - j0 - 2 * c;
    float mx2[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int nb = 0; nb < KT / 8; nb++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        float x = s[4 * nb + 2 * h + e];
        if (cap) x = p.cap_log2 * tanhf(x * p.cap_pre);
        if (masked) x = 8 * nb + e < lo || 8 * nb + e >= hi ? neg_inf() : x;
        s[4 * nb + 2 * h + e] = x;
        mx2[e] = fmaxf(mx2[e], x);
      }
    float mx = fmaxf(mx2[0], mx2[1]);
    mx = fmaxf(mx, shfl_xor(mx, 1));
    mx = fmaxf(mx, shfl_xor(mx, 2));
    const float mn = fmaxf(a.m[h], mx * sc), mu = mn == neg_inf() ? 0.0f : mn;
    alpha[h] = ex2(a.m[h] - mu);
    a.m[h] = mn;
    float ps[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < KT / 8; nb++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const float pv = ex2(fmaf(s[4 * nb + 2 * h + e], sc, -mu));
        s[4 * nb + 2 * h + e] = pv;
        if constexpr (!S::PS) ps[e] += pv;
      }
    if constexpr (!S::PS) a.dsum[h] = a.dsum[h] * alpha[h] + (ps[0] + ps[1]);
  }
}

// O *= alpha, and P (s) into P V's A operand: registers (pa), or PS this warpgroup's P tile
// at ps.
template <class S>
FI_DEVICE void rescale_pack(const block<S> &b, acc<S> &a, const float (&s)[S::KT / 2], uint32_t (&pa)[S::KT / 16][4],
                            const uint32_t &ps, const float (&alpha)[2]) {
  typedef typename S::W W;
  constexpr int KT = S::KT;
#pragma unroll
  for (int j = 0; j < S::ON / 8; j++) {
    a.o[4 * j + 0] *= alpha[0];
    a.o[4 * j + 1] *= alpha[0];
    a.o[4 * j + 2] *= alpha[1];
    a.o[4 * j + 3] *= alpha[1];
  }
  if constexpr (S::PS) {
    // P into the warpgroup's tile (P V of the tile before has completed: its wait is
    // behind us): per k16 block four 8 x 8 matrices by stmatrix, the A fragment's
    // order (rows 0-7 and 8-15 of chunk 2 kk, then of chunk 2 kk + 1); lane l gives
    // the row address of matrix l / 8, row l % 8.
    const int pr = 16 * b.wwarp + ((b.lane >> 3) & 1) * 8 + (b.lane & 7), hb = b.lane >> 4;
    const uint32_t prow = ps + (uint32_t)pr * 128;
#pragma unroll
    for (int kk = 0; kk < KT / 16; kk++) {
      const uint32_t ad = prow + (uint32_t)(kk >> 2) * (64 * 128) + (uint32_t)((((2 * (kk & 3)) | hb) ^ (pr & 7)) << 4);
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(ad),
                   "r"(W::pack(s[8 * kk + 0], s[8 * kk + 1])), "r"(W::pack(s[8 * kk + 2], s[8 * kk + 3])),
                   "r"(W::pack(s[8 * kk + 4], s[8 * kk + 5])), "r"(W::pack(s[8 * kk + 6], s[8 * kk + 7]))
                   : "memory");
    }
    // visible to the async proxy, and every warp's rows stored, before P V is issued
    fence_proxy_async();
    if (b.wgi == 0) asm volatile("bar.sync 5, 128;" ::: "memory");
    if (b.wgi == 1) asm volatile("bar.sync 6, 128;" ::: "memory");
    if (b.wgi == 2) asm volatile("bar.sync 7, 128;" ::: "memory");
  } else {
#pragma unroll
    for (int kk = 0; kk < KT / 16; kk++) {
      pa[kk][0] = W::pack(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = W::pack(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = W::pack(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = W::pack(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }
}

}  // namespace wg
}  // namespace fi
