// prefill_wgmma_load.cuh: the loads of the wgmma prefill kernel (prefill_wgmma.cuh): Q and the
// K / V tiles by cp.async into the swizzled shared-memory tiles, and the token-offset tables,
// either by every thread behind block barriers (WS 0) or by the producer warpgroup on the
// stages' mbarriers (WS 1, 2).
#pragma once
#include "prefill_wgmma_unit.cuh"

namespace fi {
namespace wg {

// ---- WS 0: every thread loads ----

// Reads tile t + 2's page id of this thread's row (lt < KT) now; note_ahead() stores
// its offset after the barrier.
template <class S>
FI_DEVICE void read_ahead(const fi_prefill_kparams &p, const block<S> &b, unit<S> &un, int t) {
  if (b.lt < S::KT && t + 2 < un.ntiles) un.pg_ahead = un.page_of(p, un.clampj(un.kv_lo + (t + 2) * S::KT + b.lt));
}
template <class S>
FI_DEVICE void note_ahead(const fi_prefill_kparams &p, const block<S> &b, const unit<S> &un, int t) {
  if (b.lt < S::KT && t + 2 < un.ntiles) {
    const int j = un.clampj(un.kv_lo + (t + 2) * S::KT + b.lt);
    un.s_off[((t + 2) % 3) * S::KT + b.lt] = un.tok_off(p, j, un.pg_ahead);
  }
}
// The unit's Q into its buffer, by every thread.
template <class S>
FI_DEVICE void load_q(const fi_prefill_kparams &p, const block<S> &b, const unit<S> &un) {
  for (int i = b.lt; i < S::QT * S::CH; i += S::THREADS) {
    const int row = i / S::CH, ch = i % S::CH;
    const int r = un.r0 + row < un.rlast ? un.r0 + row : un.rlast;
    const int tq = r / b.G, h = un.hkv * b.G + (r - tq * b.G);
    cp16(b.sbase + (uint32_t)un.qi * S::Q_BYTES + (uint32_t)(row >> 6) * S::QWG_BYTES + sw128(row & 63, ch, 64),
         un.qb + (un.q_start + tq) * p.q_stride_tok + (int64_t)h * p.q_stride_head + 8 * ch);
  }
}
// The unit's first loads: the offsets of tiles 0 and 1, then Q and tile 0 (OV: K only, V
// tiles trail K tiles by one iteration), one group. load_kv(b, t, k, v): tile t of K and / or
// V into stage b (prefill_wgmma's run_unit).
template <class S, class F>
FI_DEVICE void load_first(const fi_prefill_kparams &p, const block<S> &b, const unit<S> &un, F &load_kv) {
  if (!S::WS && un.ntiles > 0) {
    for (int i = b.tid; i < 2 * S::KT; i += S::THREADS) {  // the offsets of tiles 0 and 1
      const int j = un.clampj(un.kv_lo + i);
      un.s_off[i] = un.tok_off(p, j, un.page_of(p, j));
    }
    __syncthreads();
    load_q(p, b, un);
    load_kv(0, 0, true, !S::OV);
    cp_commit();
  }
}

// ---- WS 1, 2: the producer warpgroup ----

// The producer's Q: thread lt copies chunk lt % CH of rows lt / CH + RS k (RS = 128 /
// CH rows a step), so the row's swizzle (row % 8) is fixed a thread and each
// destination an immediate offset; the source row (token r / G, head r % G) advances
// by RS packed rows a step without a division (once a unit: the unit boundary is on
// the consumers' path, and the per-chunk form was slow there: docs/prefill.md,
// figures from comments).
template <class S>
FI_DEVICE void load_q_prod(const fi_prefill_kparams &p, const block<S> &b, const unit<S> &un) {
  typedef typename S::T T;
  constexpr int CH = S::CH, RS = 128 / CH, NQ = S::QT / RS;
  static_assert(!S::WS || (128 % CH == 0 && RS % 8 == 0 && 64 % RS == 0), "Q rows a step");
  const int ch = b.lt % CH, rbase = b.lt / CH;
  const uint32_t dst = b.sbase + (uint32_t)un.qi * S::Q_BYTES + (uint32_t)((ch >> 3) * 64 * 128 + rbase * 128) +
                       (uint32_t)(((ch & 7) ^ (rbase & 7)) << 4);
  const int dq = RS / b.G, dr = RS - dq * b.G;
  int r = un.r0 + rbase, tq = r / b.G, rem = r - tq * b.G;
  const int tql = un.rlast / b.G, reml = un.rlast - tql * b.G;
#pragma unroll
  for (int k = 0; k < NQ; k++) {
    const bool in = r <= un.rlast;
    const T *src = un.qb + (un.q_start + (in ? tq : tql)) * p.q_stride_tok +
                   (int64_t)(un.hkv * b.G + (in ? rem : reml)) * p.q_stride_head + 8 * ch;
    const int row = RS * k;  // + rbase
    cp16(dst + (uint32_t)((row >> 6) * S::QWG_BYTES + (row & 63) * 128), src);
    r += RS;
    tq += dq;
    rem += dr;
    if (rem >= b.G) {
      rem -= b.G;
      tq++;
    }
  }
}

// The producer's part of a unit: Q (once the consumers have released its buffer, two
// units back), then K(t) and V(t) into their stage once the consumers have released it
// (two tiles back), each signalled by its cp.async landing. Thread lt copies
// rows lt / 2 (+ 64) of a tile, the 16-byte chunks 2 j + lt % 2 of each (a lane
// pair: one 32-byte sector), so a row's address is computed once a tile and each
// copy is an immediate offset from it; the swizzled column (row % 8 is the same for
// both rows) once a thread. The page ids of tile t + 1 are read while t loads, tile
// 0's before Q is issued (their latency then overlaps it). qn: the block's units so far
// (the trace's marks only).
template <class S>
FI_DEVICE void produce(const fi_prefill_kparams &p, const block<S> &b, const unit<S> &un, const int &qn) {
  typedef typename S::T T;
  constexpr int KT = S::KT, CH = S::CH;
  constexpr int RP = KT / 64;  // rows a thread a tile
  const int half = b.lt & 1, rb = b.lt >> 1;
  int32_t pg[RP];
  if (un.ntiles > 0) {
#pragma unroll
    for (int q = 0; q < RP; q++) pg[q] = un.page_of(p, un.clampj(un.kv_lo + rb + 64 * q));
    load_q_prod(p, b, un);
    mbar_arrive_cp(b.bar_q(un.qi));
  } else {
    mbar_arrive(b.bar_q(un.qi));
  }
  if (b.lt == 0) mbar_arrive(b.bar_q(un.qi));  // slot_u[qi], written before it
  FI_WG_MARK(S::NWG, qn, 2, un.ntiles);
  if (un.ntiles > 0) {
    // chunk 2 j + half of row rb + 64 q: byte (2j + half) / 8 * KT * 128 + row * 128 +
    // (((2j + half) % 8) ^ (rb % 8)) * 16 of the tile
    auto copy_rows = [&](uint32_t dst, const T *src, const int64_t (&ro)[RP]) {
#pragma unroll
      for (int q = 0; q < RP; q++) {
        const T *g = src + ro[q] + 8 * half;
        const uint32_t d = dst + (uint32_t)(rb + 64 * q) * 128;
#pragma unroll
        for (int j = 0; j < CH / 2; j++) {
          const int cc = 2 * j + half;
          cp16(d + (uint32_t)((cc >> 3) * KT * 128) + (uint32_t)(((cc & 7) ^ (rb & 7)) << 4), g + 16 * j);
        }
      }
    };
    for (int t = 0; t < un.ntiles; t++) {
      const int st = un.stg(t), ep = un.par(t) ^ 1;
      int64_t ro[RP];
#pragma unroll
      for (int q = 0; q < RP; q++) {
        ro[q] = un.tok_off(p, un.clampj(un.kv_lo + t * KT + rb + 64 * q), pg[q]);
        if (t + 1 < un.ntiles) pg[q] = un.page_of(p, un.clampj(un.kv_lo + (t + 1) * KT + rb + 64 * q));
      }
      const uint32_t kd = b.kv_stage(st);
      mbar_wait(b.empty_k(st), ep);
      FI_WG_MARK(S::NWG, qn, 3 + (t < 40 ? t : 40), 0);
      copy_rows(kd, un.kg, ro);
      mbar_arrive_cp(b.full_k(st));
      mbar_wait(b.empty_v(st), ep);
      copy_rows(kd + S::KV_BYTES, un.vg, ro);
      mbar_arrive_cp(b.full_v(st));
    }
  }
  FI_WG_MARK(S::NWG, qn, 50, 0);
}

}  // namespace wg
}  // namespace fi
