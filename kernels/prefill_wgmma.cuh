// prefill_wgmma.cuh: prefill attention for Hopper (sm_90a) on wgmma.mma_async, the
// FlashAttention-3 recipe without TMA (paged K/V rows are gathered by cp.async): a block
// is NWG consumer warpgroups over 64 * NWG packed q rows (row r of a request: token r /
// group, query head hkv * group + r % group; prefill_params.h) and one KV head.
//   S = Q K^T: wgmma m64n{KT}k16, A = Q and B = K from shared-memory descriptors, both
//     K-major (head_dim contiguous), 128-byte swizzle; one wgmma per 16 head dims.
//   online softmax in fp32 and base 2 on S's accumulators (warp w of a warpgroup holds
//     rows 16w .. 16w + 15: per n8 block rows lane / 4 and + 8, columns 2 (lane % 4), + 1).
//   O += P V: wgmma m64n{D}k16, A = P from registers (S's accumulators rounded to 16-bit
//     pairs: the mma.sync m16n8k16 A fragment; or, p_smem, from a shared-memory tile as
//     Q's), B = V [KT tokens][D] from a descriptor, MN-major for this product
//     (imm-trans-b = 1), 128-byte swizzle.
// WS 0: all threads load, Q once, then K and V tiles double-buffered through cp.async
// (the next tile loads while this one is computed), a block barrier a tile. WS 1 and 2 (the
// default, with the ping-pong): a producer warpgroup loads, into NS stages (two; three for
// head_dim 64's three consumers with 128-token tiles, four where registered), on mbarriers
// (the block's mbarriers, prefill_wgmma_unit.cuh). OV = 1 overlaps a tile's softmax with the
// previous tile's P V (FA3's intra-warpgroup pipelining: S(t) and P V(t - 1) issued
// together, wait_group 1, softmax, wait_group 0); OV = 0 runs the two products in order.
// (Seen in the SASS of ptxas 13.0: it places OV's WARPGROUP.DEPBAR 0 part-way into the
// softmax rather than after it, so the overlap is partial.) Shared memory is dynamic (above 48 KB:
// the launcher opts in): [Q: NWG x 64 x D][K0][V0][K1][V1] (NS stages: up to [K3][V3]), 16-bit elements, [P: NWG x 64 x KT][2048 bytes of ones] (p_smem), then three
// tables of KT token offsets (int64), at a 1024-byte boundary.
//
// The phases, each in its file: prefill_wgmma_unit.cuh (the shape, the block, a unit's
// ranges, the running state), prefill_wgmma_load.cuh (Q, K and V by cp.async: all threads,
// or the producer), prefill_wgmma_mainloop.cuh (S = Q K^T, the softmax, P, O += P V: one
// tile's steps), prefill_wgmma_epilogue.cuh (O and the LSE out); the PTX wrappers and the
// tile and descriptor layouts in sm90.cuh. This file: the block's roles and work units, a
// unit's ranges (run_unit) and the loop over its tiles.
// Each product forms its descriptors once and steps them by adding (bytes >> 4) to the
// 64-bit value, and with the warpgroup index warp-uniform (__shfl_sync) ptxas keeps the
// stepping on the uniform datapath. Rebuilt at every step, the 12 descriptors of a
// head_dim-64 tile cost ~130 integer instructions and 48 bytes of spills a consumer.
// The split kept the machine code (tools/cubin_diff.py, every registered configuration)
// only with the values reaching the phases as they reached the original lambdas: run_unit's
// ranges by reference to run_unit's own variables (or the unit copy of them), the kernel's
// pend_* state through the copy_out lambda; and with the order of captures, of acc's fields
// and of locals kept, since the compiler numbers registers in that order and ptxas
// allocates by it. Check a change of this structure with tools/cubin_diff.py.
#pragma once
#include "prefill_wgmma_epilogue.cuh"
#include "prefill_wgmma_load.cuh"
#include "prefill_wgmma_mainloop.cuh"

namespace fi {
namespace wg {

// T: f16 or bf16; D: head_dim (64, 128 or 256); KT: kv tokens a tile (64 or 128); NWG:
// consumer warpgroups (q tile 64 * NWG rows; 3 at head_dim 64 only, with a producer: more
// softmax in flight where the products are half as long as at 128, FA3's hdim-64 shape); SINGLE: one contiguous (or paged, p.indices) request,
// no plan tables; OV: overlap each tile's softmax with the previous tile's P V (FA3's
// intra-warpgroup pipelining) instead of running the two products in order; WS 1: one
// more warpgroup, the producer, does every load (FA3's warp specialization; needs OV), and
// the consumers wait on mbarriers instead of block-wide barriers; WS 2: also FA3's
// ping-pong of two consumer warpgroups (named barriers make them take turns issuing their
// wgmma, so one's softmax runs while the other's products are on the tensor cores).
// Launch: (NWG + (WS > 0)) * 128 threads, smem_size bytes of dynamic shared memory, grid
// (q tiles, H_kv) or, batch only, (any, 1): then block b takes the work units b, b +
// gridDim.x, ... of the (item, KV head) pairs, the head fastest (a persistent grid of a
// wave: with a producer, the next unit's Q and first K / V tiles load while the consumers
// finish this one, which short items need; two Q buffers for it). No RoPE (ROPE kernels
// stay on prefill.cuh).
// NS: K / V stages (2; more with a producer where shared memory allows: the producer runs
// up to NS - 1 tiles ahead).
template <typename T, int D, int KT, int NWG, int SINGLE, int OV, int WS, int NS = 2, int CAP = 1>
FI_DEVICE void prefill_wgmma(const fi_prefill_kparams &p) {
  typedef shape<T, D, KT, NWG, SINGLE, OV, WS, NS, CAP> S;
  constexpr bool PP = S::PP;
  typedef typename S::W W;
  constexpr int THREADS = S::THREADS, QT = S::QT, CH = S::CH;
  constexpr uint32_t QWG_BYTES = S::QWG_BYTES, Q_BYTES = S::Q_BYTES, KV_BYTES = S::KV_BYTES;
  constexpr uint32_t QREG = S::QREG, PREG = S::PREG;
  const block<S> bk(p);
  const uint32_t sbase = bk.sbase, ones_base = bk.ones_base, bars = bk.bars;
  const int tid = bk.tid, lane = bk.lane, wgi = bk.wgi, wwarp = bk.wwarp, g = bk.g, c = bk.c, lt = bk.lt, G = bk.G;
  auto empty_q = [&](int i) -> uint32_t { return bk.empty_q(i); };
  auto turn_wait = [&]() {
    if (PP && wgi == 0) asm volatile("bar.sync 2, 256;" ::: "memory");
    if (PP && wgi == 1) asm volatile("bar.sync 3, 256;" ::: "memory");
    if (PP && NWG == 3 && wgi == 2) asm volatile("bar.sync 4, 256;" ::: "memory");
  };
  auto turn_pass = [&]() {
    if (PP && wgi == 0) asm volatile("bar.arrive 3, 256;" ::: "memory");
    if (PP && NWG == 2 && wgi == 1) asm volatile("bar.arrive 2, 256;" ::: "memory");
    if (PP && NWG == 3 && wgi == 1) asm volatile("bar.arrive 4, 256;" ::: "memory");
    if (PP && NWG == 3 && wgi == 2) asm volatile("bar.arrive 2, 256;" ::: "memory");
  };
  if (WS) {
    if (tid == 0) {
      for (int b = 0; b < 2; b++) {
        mbar_init(bk.bar_q(b), 129);
        mbar_init(empty_q(b), 128 * NWG);  // every consumer thread (branch-free arrivals)
      }
      for (int b = 0; b < NS; b++) {
        mbar_init(bk.full_k(b), 128);
        mbar_init(bk.full_v(b), 128);
        mbar_init(bk.empty_k(b), 4 * NWG);
        mbar_init(bk.empty_v(b), 4 * NWG);
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if constexpr (S::PS) {
      if (tid < 128) {  // the ones: 2048 bytes of 1.0 (what V's rows 64-71 read, p_smem)
        const uint32_t one = (uint32_t)W::pack(1.0f, 1.0f);
        asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(ones_base + 16u * (uint32_t)tid), "r"(one) : "memory");
        fence_proxy_async();
      }
    }
    __syncthreads();
  }

  // The work units: one (blockIdx), or on a linear grid the (item, KV head) pairs, unit u
  // = item u % items of head u / items (the order a (items, heads) grid starts its
  // blocks in, which keeps one head's K / V shared in L2). A block's first unit is its
  // blockIdx.x; then, with a producer, the next unit is taken from the plan header's
  // counter (dynamic: the blocks that finish first take more, as the hardware's block
  // scheduler would) or is this one + gridDim.x (header[6] 0: static). The producer's
  // thread 0 takes it and publishes it in slot[i] with Q buffer i (bk.bar_q(i) counts its
  // extra arrival): the consumers read it there; a unit >= units ends the loop. The last
  // block to finish resets the counters for the next launch. Without a producer every
  // thread steps by gridDim.x. tbase: the tiles of the block's units before this one,
  // qn: its units so far (the Q buffers). run_unit(u, prod) does unit u as the producer
  // (prod) or as a consumer; false: no unit (CUDA-graph mode's spare blocks). prod is a
  // literal at each call, so each role's loop holds only its own code (setmaxnreg gives
  // the two different register budgets).
  const bool lin = !SINGLE && gridDim.y == 1;
  const int H = p.num_kv_heads > 0 ? p.num_kv_heads : 1;
  const int nit = lin ? (p.num_items >= 0 ? p.num_items : p.header[0]) : 1, units = lin ? nit * H : 1;
  const bool dyn = WS && lin && p.header[6] != 0;
  const int u0 = lin ? (int)blockIdx.x : 0, ustep = lin ? (int)gridDim.x : 1;
  int32_t *const slot_u = reinterpret_cast<int32_t *>(wg_smem + (bars - smem_addr(wg_smem)) + 32 + 32 * NS);
  int tbase = 0, qn = 0;
  // The staged output of the unit before (consumers, WS): this lane's first shared-memory
  // chunk, the Q buffer's empty barrier, its first row's global address, packed row and
  // head remainder, and the unit's last row (-1: nothing pending).
  uint32_t pend_sm = 0, pend_bar = 0;
  T *pend_ptr = nullptr;
  int pend_rem = 0, pend_r = 0, pend_rlast = -1;
  // Copies it out and releases its Q buffer (prefill_wgmma_epilogue.cuh).
  auto copy_out = [&]() { wg::copy_out<S>(p, lane, pend_sm, pend_bar, pend_rlast, pend_r, pend_rem, pend_ptr); };
  auto run_unit = [&](int u, const bool prod) -> bool {
    const int item = lin ? u % nit : SINGLE && p.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int hkv = lin ? u / nit : (int)blockIdx.y;
    const int qi = WS ? qn & 1 : 0;
    if (!WS && u != u0) __syncthreads();  // every warp is done with the last unit's tiles

    // ---- the work item ----
    pf::work_item w;
    if (!pf::load_item<SINGLE>(p, item, QT, w)) {
      if (prod) {  // the consumers wait for this unit's Q: an empty one
        mbar_arrive(bk.bar_q(qi));
        if (lt == 0) mbar_arrive(bk.bar_q(qi));
      }
      return false;
    }
    FI_WG_MARK(prod ? NWG : wgi, qn, 1, 0);
    const int r0 = w.r0, rows = w.rows, kv_lo = w.kv_lo, kv_hi = w.kv_hi, Lq = w.Lq, Lkv = w.Lkv;
    const int chunk = w.chunk, nchunks = w.nchunks, slot = w.slot;
    const int64_t q_start = w.q_start, kv_base = w.kv_base;
    const int off = Lkv - Lq;
    const int rlast = r0 + rows - 1;

    // ---- this warpgroup's rows and attended ranges ----
    const int wr0 = r0 + 64 * wgi;
    const bool wg_rows = wr0 <= rlast;  // warpgroup-uniform
    const int wrl = wr0 + 63 < rlast ? wr0 + 63 : rlast;
    const int wt0 = (wg_rows ? wr0 : rlast) / G, wt1 = wrl / G;
    // every row of the warpgroup attends inside [wg_lo, wg_hi); all of them attend [in_lo, in_hi)
    const int wg_hi = p.causal && wt1 + off + 1 < kv_hi ? wt1 + off + 1 : kv_hi;
    const int wg_lo = p.window_left >= 0 && wt0 + off - p.window_left > kv_lo ? wt0 + off - p.window_left : kv_lo;
    const int in_hi = p.causal && wt0 + off + 1 < kv_hi ? wt0 + off + 1 : kv_hi;
    const int in_lo = p.window_left >= 0 && wt1 + off - p.window_left > kv_lo ? wt1 + off - p.window_left : kv_lo;
    int lim_lo[2], lim_hi[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = wr0 + 16 * wwarp + g + 8 * h, tq = (r < rlast ? r : rlast) / G;
      lim_hi[h] = p.causal && tq + off + 1 < kv_hi ? tq + off + 1 : kv_hi;
      lim_lo[h] = p.window_left >= 0 && tq + off - p.window_left > kv_lo ? tq + off - p.window_left : kv_lo;
    }

    const int ntiles = kv_hi > kv_lo ? (kv_hi - kv_lo + KT - 1) / KT : 0;
    FI_WG_MARK(prod ? NWG : wgi, qn, 59, ntiles);
    const T *qb = static_cast<const T *>(p.q);
    const T *kg = static_cast<const T *>(p.k) + (int64_t)hkv * p.kv_stride_head;
    const T *vg = static_cast<const T *>(p.v) + (int64_t)hkv * p.kv_stride_head;
    // Token offsets of tile t's rows (tokens past kv_hi repeat the last one: finite values,
    // masked out) in s_off[t % 3], written two tiles ahead from page ids read before the
    // barrier, so no load of a tile waits on the page table (read per 16-byte chunk, with a
    // division, it held paged K/V far below contiguous: docs/prefill.md, figures from
    // comments). Three tables:
    // tile t's is read at iterations t - 1 and t (K, then V, when overlapped).
    int64_t *const s_off =
        reinterpret_cast<int64_t *>(wg_smem + (sbase - smem_addr(wg_smem)) + QREG + 2 * NS * KV_BYTES + PREG);
    const bool paged = p.indices != nullptr;
    // WS 0: tile t of K (or V) into stage b (its offsets in table t % 3), by every thread.
    auto load_kv = [&](int b, int t, bool do_k, bool do_v) {
      const uint32_t kd = sbase + QREG + (uint32_t)b * 2 * KV_BYTES, vd = kd + KV_BYTES;
      const int64_t *to = s_off + (t % 3) * KT;
      for (int i = lt; i < KT * CH; i += THREADS) {
        const int row = i / CH, ch = i % CH;
        const int64_t go = to[row] + 8 * ch;
        const uint32_t so = sw128(row, ch, KT);
        if (do_k) cp16(kd + so, kg + go);
        if (do_v) cp16(vd + so, vg + go);
      }
    };
    // WS: the stage of the unit's tile t continues the block's sequence (tbase); without a
    // producer every unit starts at stage 0.
    const int tb0 = WS ? tbase : 0;
    // The phases' copy of the unit (prefill_wgmma_unit.cuh).
    unit<S> un = {item, hkv, qi, r0, rows, kv_lo, kv_hi, Lq, Lkv, chunk, nchunks, slot, q_start, kv_base,
                  off, rlast, wr0, wg_rows, wrl, wt0, wt1, wg_hi, wg_lo, in_hi, in_lo, {lim_lo[0], lim_lo[1]},
                  {lim_hi[0], lim_hi[1]}, ntiles, qb, kg, vg, s_off, paged, 0, tb0};

    // ---- the producer's part ----
    if (prod) {
      produce<S>(p, bk, un, qn);
      tbase += ntiles;
      return true;
    }

    acc<S> ac;
    ac.clear();

    load_first<S>(p, bk, un, load_kv);
    // this warpgroup's Q slice; S (then P) of the tile in flight; P as P V's A fragments
    // (unused, dead, with PS), or PS: this warpgroup's P tile, after the K / V stages
    const uint32_t qs = sbase + (uint32_t)qi * Q_BYTES + (uint32_t)wgi * QWG_BYTES;
    float s[KT / 2];
    uint32_t pa[KT / 16][4];
    const uint32_t ps_base = sbase + QREG + 2 * NS * KV_BYTES + (uint32_t)wgi * (64 * KT * 2);

    if (!OV) {
      // In order: S(t), wait, softmax, O *= alpha, O += P V(t), wait. K and V of tile t + 1
      // load during tile t.
      for (int t = 0; t < ntiles; t++) {
        read_ahead<S>(p, bk, un, t);
        cp_wait<0>();  // tile t (and Q)
        fence_proxy_async();
        __syncthreads();   // ... visible to all; every warpgroup is done with tile t - 1
        if (t + 1 < ntiles) load_kv((t + 1) & 1, t + 1, true, true);
        cp_commit();
        note_ahead<S>(p, bk, un, t);
        if (!active<S>(un, t)) continue;
        fence_regs(ac.o);
        wg_fence();
        issue_s<S>(bk, un, qs, s, t);
        wg_wait<0>();
        fence_regs(s);
        float alpha[2];
        softmax<S>(p, ac, s, c, kv_lo, in_lo, in_hi, lim_lo, lim_hi, t, alpha, 2, true);
        rescale_pack<S>(bk, ac, s, pa, ps_base, alpha);
        fence_regs(ac.o);
        wg_fence();
        issue_pv<S>(bk, un, ac, pa, ps_base, t, false);
        wg_wait<0>();
        fence_regs(ac.o);
      }
    } else {
      // Overlapped (FA3's intra-warpgroup pipelining): iteration t issues S(t) and then
      // O += P V(t - 1), and runs tile t's softmax while P V(t - 1) is in flight; O is
      // rescaled once P V(t - 1) has landed. K of tile t + 1 and V of tile t load during
      // iteration t; iteration ntiles only finishes P V(ntiles - 1). The warpgroup's
      // active tiles are [ta, tb): ta runs S alone, tb P V alone.
      const int ta = wg_lo > kv_lo ? (wg_lo - kv_lo) / KT : 0;
      int tb = wg_rows ? (wg_hi - kv_lo + KT - 1) / KT : 0;
      if (tb > ntiles) tb = ntiles;
      const bool bl_ok = !CAP || p.cap_log2 == 0.0f;
      // NAR: the warpgroup attends only the first half of its last tile (causal, where the
      // diagonal ends early in the tile: half of 64 x 1024's last tiles at 32 / 8; or a
      // request's or chunk's short tail), so that tile's P V, which runs alone at the
      // unit's end, takes half the k16 steps (P is 0 past them: that tile is always
      // softmaxed with the mask). Warpgroup-uniform. (Narrowing S and the softmax as well
      // gained nothing more at head_dim 128 and made ptxas serialize head_dim 64's wgmma:
      // branch h15nar.)
      const bool NAR = KT == 128 && !CAP && ta < tb && wg_hi - (kv_lo + (tb - 1) * KT) <= KT / 2;
      FI_WG_MARK(wgi, qn, 55, ntiles);
      FI_WG_MARK(wgi, qn, 56, u);
      FI_WG_MARK(wgi, qn, 57, ta);
      FI_WG_MARK(wgi, qn, 58, tb);
      FI_WG_MARK(wgi, qn, 60, 0);
      // WS: K(t) and V(t - 1) are waited for at the top, and each stage is released once
      // the wgmma that read it has completed (at the top when this warpgroup skips it).
      for (int t = 0; t <= ntiles; t++) {
        if (!WS) {
          read_ahead<S>(p, bk, un, t);
          cp_wait<0>();  // K(t), V(t - 1) (and Q)
          fence_proxy_async();
          __syncthreads();  // ... visible to all; all of iteration t - 1's wgmma done
          if (t + 1 < ntiles) load_kv((t + 1) & 1, t + 1, true, false);
          if (t < ntiles) load_kv(t & 1, t, false, true);
          cp_commit();
          note_ahead<S>(p, bk, un, t);
        } else {
          const bool act = ta < tb, useK = act && ta <= t && t < tb, useV = act && ta < t && t <= tb;
          if (t < ntiles) mbar_wait(bk.full_k(un.stg(t)), un.par(t));
          if (t >= 1) mbar_wait(bk.full_v(un.stg(t - 1)), un.par(t - 1));
          fence_proxy_async();  // the producer's cp.async writes, before wgmma reads them
          if (t < ntiles && !useK) bk.release(bk.empty_k(un.stg(t)));
          if (t >= 1 && !useV) bk.release(bk.empty_v(un.stg(t - 1)));
        }
        if (t < ta || t > tb || ta >= tb) {  // warpgroup-uniform
          turn_wait();
          turn_pass();
          continue;
        }
        float alpha[2];
        const int mt = t < 16 ? t : 16;
        FI_WG_MARK(wgi, qn, 2 + 3 * mt, 0);
        turn_wait();
        FI_WG_MARK(wgi, qn, 3 + 3 * mt, 0);
        if (t == ta) {
          fence_regs(ac.o);
          wg_fence();
          issue_s<S>(bk, un, qs, s, t);
          turn_pass();
          if (WS) copy_out();  // the unit before's output, while S(ta) runs
          wg_wait<0>();
          if (WS) bk.release(bk.empty_k(un.stg(t)));
          fence_regs(s);
          softmax<S>(p, ac, s, c, kv_lo, in_lo, in_hi, lim_lo, lim_hi, t, alpha, 2, true);
          rescale_pack<S>(bk, ac, s, pa, ps_base, alpha);
        } else if (t < tb && bl_ok) {
          // S(t) and P V(t - 1) in flight, then tile t's softmax while P V(t - 1) runs. The
          // two copies differ in the mask, chosen here while no wgmma is in flight.
          auto overlapped = [&](const int MM) {
            fence_regs(ac.o);
            fence_regs(s);
            wg_fence();
            issue_s<S>(bk, un, qs, s, t);
            issue_pv<S>(bk, un, ac, pa, ps_base, t - 1, false);
            turn_pass();
            wg_wait<1>();  // S(t); P V(t - 1) may still run
            if (WS) bk.release(bk.empty_k(un.stg(t)));
            fence_regs(s);
            softmax<S>(p, ac, s, c, kv_lo, in_lo, in_hi, lim_lo, lim_hi, t, alpha, MM, false);
            wg_wait<0>();
            if (WS) bk.release(bk.empty_v(un.stg(t - 1)));
            fence_regs(ac.o);
          };
          const int j0 = kv_lo + t * KT;
          if (j0 < in_lo || j0 + KT > in_hi)
            overlapped(1);
          else
            overlapped(0);
          rescale_pack<S>(bk, ac, s, pa, ps_base, alpha);
        } else if (t < tb) {  // soft cap: in order
          fence_regs(ac.o);
          wg_fence();
          issue_pv<S>(bk, un, ac, pa, ps_base, t - 1, false);
          wg_wait<0>();
          if (WS) bk.release(bk.empty_v(un.stg(t - 1)));
          fence_regs(ac.o);
          fence_regs(s);
          wg_fence();
          issue_s<S>(bk, un, qs, s, t);
          wg_wait<0>();
          turn_pass();
          if (WS) bk.release(bk.empty_k(un.stg(t)));
          fence_regs(s);
          softmax<S>(p, ac, s, c, kv_lo, in_lo, in_hi, lim_lo, lim_hi, t, alpha, 2, true);
          rescale_pack<S>(bk, ac, s, pa, ps_base, alpha);
        } else {
          fence_regs(ac.o);
          wg_fence();
          if (NAR)
            issue_pv<S>(bk, un, ac, pa, ps_base, t - 1, true);
          else
            issue_pv<S>(bk, un, ac, pa, ps_base, t - 1, false);
          turn_pass();
          wg_wait<0>();
          if (WS) bk.release(bk.empty_v(un.stg(t - 1)));
          fence_regs(ac.o);
        }
        FI_WG_MARK(wgi, qn, 4 + 3 * mt, 0);
      }
    }
    cp_wait<0>();
    FI_WG_MARK(wgi, qn, 53, 0);

    // ---- out / lse, or this chunk's partial (prefill_wgmma_epilogue.cuh); staged: O went
    // to this warpgroup's slice of the Q buffer, for copy_out ----
    if (WS && pend_rlast >= 0) copy_out();  // this warpgroup had no turn in this unit
    const bool staged = WS && nchunks <= 1;
    const uint32_t qslice = sbase + (uint32_t)qi * Q_BYTES + (uint32_t)wgi * QWG_BYTES;
    epilogue<S>(p, bk, un, ac, qn);
    if (staged) {
      // Copied out by copy_out during this warpgroup's next unit's first product (or at the
      // end): this lane's rows lr0 + RS k (lr0 = 16 wwarp + lane / CH, RS = 32 / CH), chunk
      // lane % CH.
      __syncwarp();
      const int ch = lane % CH, lr0 = 16 * wwarp + lane / CH;
      const int r = r0 + 64 * wgi + lr0, tq = r / G, rem = r - tq * G;
      pend_sm = qslice + (uint32_t)((ch >> 3) * 64 * 128 + lr0 * 128);
      pend_bar = empty_q(qi);
      pend_ptr = static_cast<T *>(p.out) + (q_start + tq) * p.out_stride_tok + (int64_t)(hkv * G + rem) * p.out_stride_head +
                 8 * ch;
      pend_rem = rem;
      pend_r = r;
      pend_rlast = rlast;
    } else if (WS) {
      // every wgmma of the unit has completed: the Q buffer is free (every thread arrives)
      mbar_arrive(empty_q(qi));
    }
    FI_WG_MARK(wgi, qn, 54, 0);
    tbase += ntiles;
    return true;
  };  // run_unit

  if (WS && wgi == NWG) {
    // Registers to the consumers: 2 x 224 + 56 is the 3 x 168 of the launch bound; with
    // one consumer, two blocks an SM: 208 + 48 is 2 x 128; three consumers (head_dim 64):
    // 3 x 152 + 56 is 4 x 128. (At 40 the producer's loop over units spilled 12-36 bytes;
    // 224, 208 and 152 hold the consumers' loops without spills, ptxas -v, except three
    // consumers with 128-token tiles: 40-48 bytes, one reload a tile.)
    reg_dealloc<(NWG == 3 ? FI_WG3_PROD : NWG == 2 ? 56 : 48)>();
    int32_t *const ctr = const_cast<int32_t *>(p.header) + 4;  // [4] next unit, [5] blocks done
    for (int u = u0;; qn++) {
      const int qi = qn & 1;
      mbar_wait(empty_q(qi), ((qn >> 1) & 1) ^ 1);
      if (lt == 0) slot_u[qi] = u;
      FI_WG_MARK(NWG, qn, 0, 0);
      if (u >= units) {  // the end, for the consumers
        mbar_arrive(bk.bar_q(qi));
        if (lt == 0) mbar_arrive(bk.bar_q(qi));
        break;
      }
      if (!run_unit(u, true)) break;
      FI_WG_MARK(NWG, qn, 51, 0);
      if (!dyn) {
        u += ustep;
        continue;
      }
      // thread 0 takes the next unit; the producer warpgroup's named barrier 1 shares it
      if (lt == 0) slot_u[2] = ustep + atomicAdd(ctr, 1);
      asm volatile("bar.sync 1, 128;" ::: "memory");
      u = slot_u[2];
      asm volatile("bar.sync 1, 128;" ::: "memory");  // read by all before the next write
    }
    if (dyn && lt == 0 && atomicAdd(ctr + 1, 1) == ustep - 1) {  // every block is past its last take
      atomicExch(ctr, 0);
      atomicExch(ctr + 1, 0);
    }
    cp_wait<0>();
    return;
  }
  if (WS) {
    if (NWG == 3)
      reg_alloc<FI_WG3_CONS>();
    else if (NWG == 2)
      reg_alloc<224>();
    else
      reg_alloc<208>();
  }
  if (PP && wgi == NWG - 1) turn_pass();
  for (int u = u0;; qn++) {
    if (WS) {
      mbar_wait(bk.bar_q(qn & 1), (qn >> 1) & 1);
      u = *reinterpret_cast<volatile int32_t *>(slot_u + (qn & 1));
    }
    FI_WG_MARK(wgi, qn, 0, 0);
    if (u >= units || !run_unit(u, false)) break;
    if (!WS) u += ustep;
  }
  if (WS && pend_rlast >= 0) copy_out();  // the last unit's output
}


// fi-bench's wgmma probe: each warpgroup issues iters rounds of four bf16 m64n128k16
// wgmma (A [64][64] and B [128][64] in shared memory, zeros; two accumulators), at most
// two rounds in flight: the tensor cores' rate with nothing else in the loop. 256
// threads, WG_PROBE_SMEM bytes of dynamic shared memory.
#define WG_PROBE_SMEM (3 * 8192 + 1024)
FI_DEVICE void wgmma_probe(const fi_mma_probe_params &p) {
  const uint32_t base = smem_addr(wg_smem), sb = (base + 1023u) & ~1023u;
  fi_vec<uint32_t, 4> *z = reinterpret_cast<fi_vec<uint32_t, 4> *>(wg_smem + (sb - base));
  for (int i = threadIdx.x; i < 3 * 8192 / 16; i += blockDim.x) z[i].v[0] = z[i].v[1] = z[i].v[2] = z[i].v[3] = 0u;
  fence_proxy_async();
  __syncthreads();
  float d0[64], d1[64];
#pragma unroll
  for (int i = 0; i < 64; i++) d0[i] = d1[i] = 0.0f;
  const uint64_t da = kdesc(sb, 64 * 128, FI_WG_KDESC), db = kdesc(sb + 8192, 128 * 128, FI_WG_KDESC);
  fence_regs(d0);
  fence_regs(d1);
  wg_fence();
  for (int i = 0; i < p.iters; i++) {
    mma<fi_bf16, 128>::ss(d0, da, db, 1);
    mma<fi_bf16, 128>::ss(d1, da + 2, db + 2, 1);  // the next k16 step: 32 bytes on
    mma<fi_bf16, 128>::ss(d0, da + 4, db + 4, 1);
    mma<fi_bf16, 128>::ss(d1, da + 6, db + 6, 1);
    wg_commit();
    wg_wait<1>();
  }
  wg_wait<0>();
  fence_regs(d0);
  fence_regs(d1);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 64; i++) sum += d0[i] + d1[i];
  if (sum == p.never) p.sink[0] = sum;
}

}  // namespace wg
}  // namespace fi
