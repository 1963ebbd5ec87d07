// prefill_wgmma_epilogue.cuh: the end of a consumer warpgroup's unit in the wgmma prefill
// kernel (prefill_wgmma.cuh): O normalized by the row sums into out and lse, or into this
// chunk's partial slot when the item is split (as prefill.cuh); with a producer and no
// split, O staged in the unit's Q buffer instead, and copied out during the next unit.
#pragma once
#include "prefill_wgmma_unit.cuh"

namespace fi {
namespace wg {

// Copies out the output a unit staged (epilogue) and releases its Q buffer: sm, this lane's
// first shared-memory chunk; bar, the Q buffer's empty barrier; rlast, the unit's last row
// (-1: nothing staged; set to -1 here); r_, rem_, ptr_: the lane's first row, its head
// remainder and global address (prefill_wgmma's pend_* state, passed as itself: the machine
// code). Branch-free (predicated), so that it can run while a wgmma is in flight (a branch
// there makes ptxas serialize the wgmma): lane copies chunk lane % CH of rows lane / CH + RS
// k of the warp's 16; all loads first, then the release (an mbarrier arrive: release
// semantics, so it waits for the loads, not for these stores), then the stores.
template <class S>
FI_DEVICE void copy_out(const fi_prefill_kparams &p, const int &lane, const uint32_t &sm, const uint32_t &bar, int &rlast,
                        const int &r_, const int &rem_, typename S::T *const &ptr_) {
  typedef typename S::T T;
  constexpr int D = S::D, RS = 32 / (D / 8), NK = 16 / RS;
  static_assert(!S::WS || (RS >= 1 && 16 % RS == 0), "output rows a step");
  const int G_ = p.group;
  const int dq = RS / G_, dr = RS - dq * G_;
  const int64_t st = p.out_stride_tok, sh = p.out_stride_head;
  const int64_t step = (int64_t)dq * st + (int64_t)dr * sh, wrap = st - (int64_t)G_ * sh;
  const int ch = lane % (D / 8), xb = lane / (D / 8);  // row lr0 = 16 wwarp + xb: lr0 % 8 = xb
  uint32_t x[NK][4];
#pragma unroll
  for (int k = 0; k < NK; k++)
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(x[k][0]), "=r"(x[k][1]), "=r"(x[k][2]), "=r"(x[k][3])
                 : "r"(sm + (uint32_t)(RS * k * 128) + (uint32_t)(((ch & 7) ^ ((xb + RS * k) & 7)) << 4)));
  asm volatile("{ .reg .pred p; .reg .b64 st; setp.ge.s32 p, %1, 0; @p mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(bar),
               "r"(rlast)
               : "memory");
  int r = r_, rem = rem_;
  T *ptr = ptr_;
#pragma unroll
  for (int k = 0; k < NK; k++) {
    asm volatile("{ .reg .pred p; setp.le.s32 p, %5, %6; @p st.global.v4.b32 [%0], {%1, %2, %3, %4}; }" ::"l"(ptr),
                 "r"(x[k][0]), "r"(x[k][1]), "r"(x[k][2]), "r"(x[k][3]), "r"(r), "r"(rlast)
                 : "memory");
    r += RS;
    rem += dr;
    const bool cy = rem >= G_;
    rem = cy ? rem - G_ : rem;
    ptr += cy ? step + wrap : step;
  }
  rlast = -1;
}

// ---- out / lse, or this chunk's partial (as prefill.cuh) ----
// With a producer and no split (staged), O goes through this warpgroup's slice of the
// unit's Q buffer (free: every wgmma of the unit has completed), so that each warp stores
// its 16 rows with 16-byte stores, a row's bytes by consecutive lanes (copy_out), instead of
// 4-byte pieces of 8 rows an instruction (which held a unit's epilogue long:
// docs/prefill.md, ninth session, and figures from comments); the buffer goes back to the
// producer (the unit after next) once copied out. qn: the block's units so far (the trace's
// marks only).
template <class S>
FI_DEVICE void epilogue(const fi_prefill_kparams &p, const block<S> &b, const unit<S> &un, acc<S> &a, const int &qn) {
  typedef typename S::T T;
  typedef typename S::W W;
  constexpr int D = S::D;
  const bool staged = S::WS && un.nchunks <= 1;
  const uint32_t qslice = b.q_slice(un.qi);
  const float LN2 = 0.6931471805599453f;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    if constexpr (S::PS) {
      a.dsum[h] = a.o[D / 2 + 2 * h];  // the row's sum, from the ones' columns
    } else {
      a.dsum[h] += dec::shfl_xor(a.dsum[h], 1);
      a.dsum[h] += dec::shfl_xor(a.dsum[h], 2);
    }
    const int rt = 64 * b.wgi + 16 * b.wwarp + b.g + 8 * h;  // row in the tile
    if (rt >= un.rows) continue;
    const int r = un.r0 + rt, tq = r / b.G, head = un.hkv * b.G + (r - tq * b.G);
    // (the fast division: ds >= 1 whenever a column is attended, and an IEEE one costs
    // a slow-path branch in this once-a-unit code)
    // A sink joins the row's final state (dec::sink_fold; a split's partial has none).
    float ds = a.dsum[h], mr = a.m[h], fa = 1.0f;
    if (p.sinks && un.nchunks <= 1) fa = dec::sink_fold(p.sinks[head] * dec::LOG2E_F, mr, ds);
    const float inv = ds > 0.0f ? __fdividef(p.v_scale * fa, ds) : 0.0f;
    if (staged) {
      // row lr of the slice, 16-byte chunk j: the Q tile's swizzled layout (conflict-free:
      // the 8 rows of an instruction land in 8 different 16-byte columns)
      const int lr = 16 * b.wwarp + b.g + 8 * h;
#pragma unroll
      for (int j = 0; j < D / 8; j++)
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(qslice + sw128(lr, j, 64) + 4 * b.c),
                     "r"(W::pack(a.o[4 * j + 2 * h] * inv, a.o[4 * j + 2 * h + 1] * inv))
                     : "memory");
    } else if (un.nchunks <= 1) {
      T *orow = static_cast<T *>(p.out) + (un.q_start + tq) * p.out_stride_tok + (int64_t)head * p.out_stride_head;
#pragma unroll
      for (int j = 0; j < D / 8; j++)
        *reinterpret_cast<uint32_t *>(orow + 8 * j + 2 * b.c) =
            W::pack(a.o[4 * j + 2 * h] * inv, a.o[4 * j + 2 * h + 1] * inv);
    }
    if (un.nchunks <= 1) {
      if (p.lse && b.c == 0)
        p.lse[(un.q_start + tq) * p.lse_stride_tok + (int64_t)head * p.lse_stride_head] =
            ds > 0.0f ? (mr + log2f(ds)) * (p.lse_log2 ? 1.0f : LN2) : dec::neg_inf();
    } else {
      const int64_t prow = ((int64_t)(un.slot + un.chunk) * p.num_kv_heads + un.hkv) * FI_PREFILL_SLOT_ROWS + rt;
      float *po = p.partial_o + prow * D;
#pragma unroll
      for (int j = 0; j < D / 8; j++) {
        fi_vec<float, 2> y;
        y.v[0] = a.o[4 * j + 2 * h] * inv;
        y.v[1] = a.o[4 * j + 2 * h + 1] * inv;
        *reinterpret_cast<fi_vec<float, 2> *>(po + 8 * j + 2 * b.c) = y;
      }
      if (b.c == 0) p.partial_lse[prow] = ds > 0.0f ? a.m[h] + log2f(ds) : dec::neg_inf();
    }
    if (h == 0) FI_WG_MARK(b.wgi, qn, 62, 0);
  }
}

}  // namespace wg
}  // namespace fi
