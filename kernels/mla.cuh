// mla.cuh: multi-head latent attention (DeepSeek-V2/V3 MLA, the absorbed form) over a
// paged compressed cache, on mma.sync m16n8k16: every query head attends one shared
// 576-wide key (ckv [512] then kpe [64]) whose first 512 columns are also the value.
//
// A block is RG x CG warps over one q tile of QT packed rows (row r: query token r / H,
// head r % H; mla_params.h) and the KV range of its work item (batch prefill's plan tables:
// split-KV partials are merged by mla_merge below). Warp (rg, cg)
// owns rows 16 rg .. 16 rg + 15 and
//   S: the 16 x SW scores of its rows against KV tokens SW cg .. SW cg + SW - 1 of the tile
//      (SW = 8 or 16; A = Q from the shared Q tile, B = K rows, ldmatrix x4, 36 k-steps);
//   the rows' tile maximum: each warp's partial maxima through shared memory, so all CG
//      warps of a row group rescale by the same factor (each keeps its own partial sum);
//   P: its 16 x SW probabilities packed as 16-bit pairs into shared memory, by n-tile of 8
//      tokens (two n-tiles make one A fragment of P V);
//   O += P V over the whole tile: the row group's CG P fragments, B = ckv columns
//      cg * 512 / CG .. of the tile (ldmatrix x4 .trans), fp32 accumulators.
// Q, K and V sit in shared memory as [rows][576] bf16/f16 with 16-byte chunks XOR-swizzled
// by row % 8 (sm80.cuh's swz), so cp.async writes and ldmatrix reads avoid bank conflicts.
// NS KV stages (FI_MLA_NS(QT) by default; the 16-row tile also with 2, two blocks an SM):
// tiles t + 1 .. t + NS - 1 load while tile t is computed (the
// first GPU run, with two stages of one 64-token tile, moved ~12 GB/s an SM: on average
// half a tile in flight over a ~3 us round trip); the page lookups of tile t + NS are made
// a tile ahead.
#pragma once
#include "mla_params.h"
#include "mma.cuh"
#include "sm80.cuh"
#include "prefill_item.cuh"

namespace fi {
namespace mla {

using dec::mma;
using dec::neg_inf;
using dec::ex2;
using dec::shfl_xor;
using pf::cp16;
using pf::cp_commit;
using pf::cp_wait;
using pf::ldsm4;
using pf::ldsm4t;
using pf::swz;

#ifndef FI_MLA_EMU_SMEM
extern __shared__ unsigned char fi_mla_smem[] __attribute__((aligned(128)));
#endif

// The block's item from the plan's table (prefill_item.cuh's layout); false: none.
FI_DEVICE bool load_item(const fi_mla_kparams &p, int item, pf::work_item &w) {
  const int n = p.num_items >= 0 ? p.num_items : p.header[0];
  if (item >= n) return false;
  const int32_t *ip = p.items + FI_PREFILL_ITEM_WORDS * item;
  w.r0 = ip[1];
  w.rows = ip[2];
  w.kv_lo = ip[3];
  w.kv_hi = ip[4];
  w.chunk = ip[5] & 0xffff;
  w.nchunks = ip[5] >> 16;
  w.q_start = ip[6];
  w.Lq = ip[7];
  w.kv_base = ip[8];
  w.Lkv = ip[9];
  w.slot = ip[10];
  w.mask_off = 0;
  return true;
}

// T: q, cache and out dtype (f16 or bf16); QT: the q tile, 16 or 64 packed rows; NS: KV
// stages (2 or more).
template <typename T, int QT, int NS>
FI_DEVICE void mla_paged(const fi_mla_kparams &p) {
  typedef dec::w16<T> W;
  constexpr int RG = FI_MLA_RG(QT), CG = FI_MLA_CG(QT), SW = FI_MLA_SW(QT), KT = FI_MLA_KT(QT);
  constexpr int THREADS = 32 * RG * CG, DQ = FI_MLA_DQK, CH = DQ / 8, CHN = FI_MLA_DCKV / 8;
  constexpr int OW = FI_MLA_DCKV / CG;  // latent columns a warp accumulates
  constexpr int NB = SW / 8;            // n-tiles of 8 tokens a warp's S has
  static_assert(QT == 16 || QT == 64, "q tile 16 or 64");
  static_assert(SW == 8 || SW == 16, "a warp's S: 8 or 16 tokens");
  static_assert(KT % 16 == 0 && NS >= 2, "k-steps of 16 tokens; two stages at least");
  static_assert(FI_MLA_SMEM_NS(QT, NS) <= 227 * 1024, "shared memory a block (sm_90's opt-in limit)");

  uint16_t *const sQ = reinterpret_cast<uint16_t *>(fi_mla_smem);
  uint16_t *const sKV = sQ + QT * DQ;                                        // [NS][KT][576]
  int64_t *const s_offc = reinterpret_cast<int64_t *>(sKV + NS * KT * DQ);  // [NS][KT] into ckv
  int64_t *const s_offp = s_offc + NS * KT;                                  // [NS][KT] into kpe
  uint32_t *const sP = reinterpret_cast<uint32_t *>(s_offp + NS * KT);      // [RG][KT / 8][32][2]
  float *const sMax = reinterpret_cast<float *>(sP + RG * (KT / 8) * 32 * 2);  // [RG][CG][16]
  float *const sSum = sMax + RG * CG * 16;                                   // [RG][CG][16]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const int rg = warp / CG, cg = warp % CG, H = p.num_heads;

  pf::work_item w;
  if (!load_item(p, blockIdx.x, w)) return;
  const int r0 = w.r0, rows = w.rows, kv_lo = w.kv_lo, kv_hi = w.kv_hi;
  const int off = w.Lkv - w.Lq, rlast = r0 + rows - 1;
  const int64_t q_start = w.q_start, kv_base = w.kv_base;
  const int ntiles = kv_hi > kv_lo ? (kv_hi - kv_lo + KT - 1) / KT : 0;

  // ---- Q: the tile's rows (past the last: the last again) ----
  const T *qn = static_cast<const T *>(p.q_nope), *qp = static_cast<const T *>(p.q_pe);
  for (int i = tid; i < QT * CH; i += THREADS) {
    const int row = i / CH, ch = i - row * CH;
    const int r = r0 + row < rlast ? r0 + row : rlast, tq = r / H, h = r - tq * H;
    const T *src = ch < CHN ? qn + (q_start + tq) * p.qn_stride_tok + (int64_t)h * p.qn_stride_head + 8 * ch
                            : qp + (q_start + tq) * p.qp_stride_tok + (int64_t)h * p.qp_stride_head + 8 * (ch - CHN);
    cp16(sQ + swz<DQ>(row, ch), src);
  }
  cp_commit();  // (waited for with the first KV tile)

  // Tile rows past kv_hi repeat its last token: finite values, masked out below. Tile j's
  // token offsets live in table j % NS, its data in stage j % NS.
  const T *ckv = static_cast<const T *>(p.ckv), *kpe = static_cast<const T *>(p.kpe);
  auto tok_clamp = [&](int j) { return j < kv_hi - 1 ? j : kv_hi - 1; };
  auto page_of = [&](int j) -> int32_t { return p.indices[kv_base + j / p.page_size]; };
  auto set_off = [&](int i, int j, int32_t page) {
    const int64_t slot = j % p.page_size;
    s_offc[i] = (int64_t)page * p.ckv_stride_page + slot * p.ckv_stride_slot;
    s_offp[i] = (int64_t)page * p.kpe_stride_page + slot * p.kpe_stride_slot;
  };
  // A tile's copy: TPR threads a row, thread (row, sub) its chunks sub, sub + TPR, .. (the
  // first 64 ckv's, the last 8 kpe's): the row's offsets are read once and each copy is
  // one address step (a loop over tid + THREADS i paid a division by 72 and two offset
  // loads a copy: ~20 instructions of 16 bytes, most of a 4-warp block's issue slots).
  constexpr int TPR = THREADS / KT;
  static_assert(THREADS % KT == 0 && CHN % TPR == 0 && (CH - CHN) % TPR == 0, "copy mapping");
  auto load_tile = [&](int buf) {
    const int row = tid / TPR, sub = tid - row * TPR;
    uint16_t *dst = sKV + buf * KT * DQ + row * DQ;
    const T *sc = ckv + s_offc[buf * KT + row] + 8 * sub, *sp = kpe + s_offp[buf * KT + row] + 8 * sub;
#pragma unroll
    for (int k = 0; k < CHN / TPR; k++) cp16(dst + (((sub + TPR * k) ^ (row & 7)) << 3), sc + 8 * TPR * k);
#pragma unroll
    for (int k = 0; k < (CH - CHN) / TPR; k++) cp16(dst + (((CHN + sub + TPR * k) ^ (row & 7)) << 3), sp + 8 * TPR * k);
  };
  constexpr int NOFF = (KT + THREADS - 1) / THREADS;

  float o[OW / 8][4];
  float m[2], dsum[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    m[h] = neg_inf();
    dsum[h] = 0.0f;
  }
#pragma unroll
  for (int j = 0; j < OW / 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) o[j][e] = 0.0f;

  // The rows this thread's accumulators hold (g and g + 8 of the warp's 16), their tokens'
  // causal limits.
  int lim[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int r = r0 + 16 * rg + g + 8 * h, tq = (r < rlast ? r : rlast) / H;
    lim[h] = p.causal && tq + off + 1 < kv_hi ? tq + off + 1 : kv_hi;
  }

  // Prologue: the offsets of tiles 0 .. NS-1, the loads of tiles 0 .. NS-2 (a commit group
  // each, empty past the last tile, so that group t is always tile t's).
  if (ntiles > 0) {
    for (int i = tid; i < NS * KT; i += THREADS) {
      const int j = tok_clamp(kv_lo + i);
      set_off(i, j, page_of(j));
    }
    __syncthreads();
#pragma unroll
    for (int b = 0; b < NS - 1; b++) {
      if (b < ntiles) load_tile(b);
      cp_commit();
    }
  }
  // ldmatrix offsets (elements) of this lane in a 64-dim group: Q rows 16 rg + lane % 16,
  // chunk 2 m + lane / 16 (m = 0..3); K rows of the warp's tokens, chunk 2 m + lane / 8 % 2
  // (SW = 16: rows SW cg + lane % 8 + 8 (lane / 16)) or chunk 4 m + lane / 8 (SW = 8, m =
  // 0..1: one x4 for two k-steps); V (.trans) rows lane % 8 + 8 (lane / 8 % 2) of a
  // k-step, chunk 2 m + lane / 16 of the warp's columns.
  int qo[4], ko[4], vo[4];
#pragma unroll
  for (int m = 0; m < 4; m++) {
    const int qr = 16 * rg + (lane & 15);
    qo[m] = qr * DQ + (((2 * m + (lane >> 4)) ^ (qr & 7)) << 3);
    const int kr = SW == 16 ? SW * cg + (lane & 7) + ((lane >> 4) << 3) : SW * cg + (lane & 7);
    const int kc = SW == 16 ? 2 * m + ((lane >> 3) & 1) : 4 * (m & 1) + (lane >> 3);
    ko[m] = kr * DQ + ((kc ^ (kr & 7)) << 3);
    const int vr = (lane & 7) + (((lane >> 3) & 1) << 3);
    vo[m] = vr * DQ + 8 * cg * (OW / 8) + (((2 * m + (lane >> 4)) ^ (vr & 7)) << 3);
  }

  for (int t = 0; t < ntiles; t++) {
    const int j0 = kv_lo + t * KT, buf = t % NS;
    const bool ahead = t + NS < ntiles;
    // The page ids of tile t + NS: read now, used after this tile's S.
    int32_t pg[NOFF];
#pragma unroll
    for (int u = 0; u < NOFF; u++) {
      const int i = tid + u * THREADS;
      pg[u] = ahead && i < KT ? page_of(tok_clamp(j0 + NS * KT + i)) : 0;
    }
    cp_wait<NS - 2>();  // this tile (and, first, the Q tile); the next NS - 2 may still fly
    __syncthreads();    // ... seen by all; every warp is done with tile t - 1
    if (t + NS - 1 < ntiles) load_tile((t + NS - 1) % NS);  // into tile t - 1's stage
    cp_commit();
    const uint16_t *cK = sKV + buf * KT * DQ;

    // S = Q K^T over the warp's SW tokens: even and odd k-steps into separate accumulators
    // (two independent mma chains instead of one 36 long), summed after. SW = 16: one
    // ldmatrix x4 of K a k-step (two n-tiles); SW = 8: one for two k-steps of one n-tile.
    float s[NB][4], s2[NB][4];
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[nb][e] = s2[nb][e] = 0.0f;
    // Groups of 64 dims (8 chunks, 4 k-steps): within one the swizzle (chunk ^ row % 8)
    // stays inside it, so the per-thread offsets of its chunks are fixed (qo, ko) and a
    // group adds 64 elements.
#pragma unroll 3
    for (int j = 0; j < DQ / 64; j++) {
#pragma unroll
      for (int kq = 0; kq < 4; kq += 2) {  // k-steps 4 j + kq (into s) and 4 j + kq + 1 (into s2)
        uint32_t qa[4], qa2[4];
        ldsm4(sQ, qo[kq] + 64 * j, qa);
        ldsm4(sQ, qo[kq + 1] + 64 * j, qa2);
        if (SW == 16) {
          uint32_t kb[4], kb2[4];
          ldsm4(cK, ko[kq] + 64 * j, kb);
          ldsm4(cK, ko[kq + 1] + 64 * j, kb2);
          mma<T>(s[0], qa[0], qa[1], qa[2], qa[3], kb[0], kb[1]);
          mma<T>(s[NB - 1], qa[0], qa[1], qa[2], qa[3], kb[2], kb[3]);
          mma<T>(s2[0], qa2[0], qa2[1], qa2[2], qa2[3], kb2[0], kb2[1]);
          mma<T>(s2[NB - 1], qa2[0], qa2[1], qa2[2], qa2[3], kb2[2], kb2[3]);
        } else {
          uint32_t kb[4];  // the warp's 8 tokens, dims of k-steps 4 j + kq and + 1
          ldsm4(cK, ko[kq / 2] + 64 * j, kb);
          mma<T>(s[0], qa[0], qa[1], qa[2], qa[3], kb[0], kb[1]);
          mma<T>(s2[0], qa2[0], qa2[1], qa2[2], qa2[3], kb[2], kb[3]);
        }
      }
    }
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[nb][e] += s2[nb][e];
    // Tile t + NS's offsets into table t % NS (its loads were issued NS - 1 tiles ago, so
    // done with it); the next tiles' barriers publish them.
    if (ahead) {
#pragma unroll
      for (int u = 0; u < NOFF; u++) {
        const int i = tid + u * THREADS;
        if (i < KT) set_off(buf * KT + i, tok_clamp(j0 + NS * KT + i), pg[u]);
      }
    }

    // scale, mask, the warp's row maxima -> shared
    const bool masked = j0 + KT > kv_hi || (p.causal && j0 + KT > r0 / H + off + 1);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float mx = neg_inf();
#pragma unroll
      for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float x = s[nb][2 * h + e] * p.scale_log2;
          if (masked && j0 + SW * cg + 8 * nb + 2 * c + e >= lim[h]) x = neg_inf();
          s[nb][2 * h + e] = x;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, shfl_xor(mx, 1));
      mx = fmaxf(mx, shfl_xor(mx, 2));
      if (c == 0) sMax[(rg * CG + cg) * 16 + g + 8 * h] = mx;
    }
    __syncthreads();
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float mx = neg_inf();
#pragma unroll
      for (int k = 0; k < CG; k++) mx = fmaxf(mx, sMax[(rg * CG + k) * 16 + g + 8 * h]);
      const float mn = fmaxf(m[h], mx), mu = mn == neg_inf() ? 0.0f : mn;
      alpha[h] = ex2(m[h] - mu);
      m[h] = mn;
      float ps = 0.0f;
#pragma unroll
      for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float pv = ex2(s[nb][2 * h + e] - mu);
          s[nb][2 * h + e] = pv;
          ps += pv;
        }
      dsum[h] = dsum[h] * alpha[h] + ps;
    }
    // P as 16-bit pairs by n-tile of the tile: (row g, row g + 8) words of tokens 2c, 2c + 1
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
      fi_vec<uint32_t, 2> pw;
      pw.v[0] = W::pack(s[nb][0], s[nb][1]);
      pw.v[1] = W::pack(s[nb][2], s[nb][3]);
      *reinterpret_cast<fi_vec<uint32_t, 2> *>(sP + ((rg * (KT / 8) + NB * cg + nb) * 32 + lane) * 2) = pw;
    }
#pragma unroll
    for (int j = 0; j < OW / 8; j++) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
    __syncthreads();

    // O += P V: k-steps of 16 tokens (A: n-tiles 2 kk and 2 kk + 1 of the row group's P),
    // V = ckv columns
#pragma unroll 1
    for (int kk = 0; kk < KT / 16; kk++) {
      const uint32_t *pr = sP + ((rg * (KT / 8) + 2 * kk) * 32 + lane) * 2;
      const fi_vec<uint32_t, 2> pa = *reinterpret_cast<const fi_vec<uint32_t, 2> *>(pr);
      const fi_vec<uint32_t, 2> pb = *reinterpret_cast<const fi_vec<uint32_t, 2> *>(pr + 64);
#pragma unroll
      for (int n2 = 0; n2 < OW / 16; n2++) {
        uint32_t vb[4];
        ldsm4t(cK, vo[n2 & 3] + 64 * (n2 >> 2) + 16 * DQ * kk, vb);
        mma<T>(o[2 * n2], pa.v[0], pa.v[1], pb.v[0], pb.v[1], vb[0], vb[1]);
        mma<T>(o[2 * n2 + 1], pa.v[0], pa.v[1], pb.v[0], pb.v[1], vb[2], vb[3]);
      }
    }
  }
  cp_wait<0>();

  // ---- the rows' sums over the CG warps, then out / lse or this chunk's partial ----
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float ds = dsum[h];
    ds += shfl_xor(ds, 1);
    ds += shfl_xor(ds, 2);
    if (c == 0) sSum[(rg * CG + cg) * 16 + g + 8 * h] = ds;
  }
  __syncthreads();
  const float LN2 = 0.6931471805599453f;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float ds = 0.0f;
#pragma unroll
    for (int k = 0; k < CG; k++) ds += sSum[(rg * CG + k) * 16 + g + 8 * h];
    const int rt = 16 * rg + g + 8 * h;  // row in the tile
    if (rt >= rows) continue;
    const int r = r0 + rt, tq = r / H, head = r - tq * H;
    const float inv = ds > 0.0f ? 1.0f / ds : 0.0f;
    if (w.nchunks <= 1) {
      T *orow = static_cast<T *>(p.out) + (q_start + tq) * p.out_stride_tok + (int64_t)head * p.out_stride_head + cg * OW;
#pragma unroll
      for (int j = 0; j < OW / 8; j++)
        *reinterpret_cast<uint32_t *>(orow + 8 * j + 2 * c) = W::pack(o[j][2 * h] * inv, o[j][2 * h + 1] * inv);
      if (p.lse && c == 0 && cg == 0)
        p.lse[(q_start + tq) * p.lse_stride_tok + (int64_t)head * p.lse_stride_head] =
            ds > 0.0f ? (m[h] + log2f(ds)) * LN2 : neg_inf();
    } else {
      const int64_t prow = (int64_t)(w.slot + w.chunk) * FI_MLA_SLOT_ROWS + rt;
      float *po = p.partial_o + prow * FI_MLA_DCKV + cg * OW;
#pragma unroll
      for (int j = 0; j < OW / 8; j++) {
        fi_vec<float, 2> y;
        y.v[0] = o[j][2 * h] * inv;
        y.v[1] = o[j][2 * h + 1] * inv;
        *reinterpret_cast<fi_vec<float, 2> *>(po + 8 * j + 2 * c) = y;
      }
      if (c == 0 && cg == 0) p.partial_lse[prow] = ds > 0.0f ? m[h] + log2f(ds) : neg_inf();
    }
  }
}

// The merge of split tiles (fi_prefill_merge_params, one KV head, group H): block (item,
// y) combines the 64 latent columns 64 y .. of its tile's rows, one thread a row's 8
// columns (rows past 16 loop), if the item is a split tile's chunk 0. Two passes over the
// chunks: the row's largest LSE first (loads only), then the weighted sum, whose loads do
// not wait on one another (prefill_merge's single pass carries a running maximum from
// chunk to chunk: 128 chunks of a long context at B=1 were 128 round trips to L2 a thread).
// (p.sinks is not read: MLA has none, and the host zeroes the struct.)
template <typename T>
FI_DEVICE void mla_merge(const fi_prefill_merge_params &p) {
  const int n = p.num_items >= 0 ? p.num_items : p.header[0];
  if ((int)blockIdx.x >= n) return;
  const int32_t *it = p.items + FI_PREFILL_ITEM_WORDS * blockIdx.x;
  const int chunk = it[5] & 0xffff, nch = it[5] >> 16;
  if (chunk != 0 || nch <= 1) return;
  const int r0 = it[1], rows = it[2], slot = it[10], G = p.group;
  const int64_t q_start = it[6];
  const float LN2 = 0.6931471805599453f;
  for (int u = threadIdx.x; u < rows * 8; u += blockDim.x) {
    const int rt = u >> 3, d8 = 64 * (int)blockIdx.y + 8 * (u & 7);
    const float *pl = p.partial_lse + (int64_t)slot * p.q_tile + rt;
    float mx = neg_inf();
#pragma unroll 8
    for (int i = 0; i < nch; i++) mx = fmaxf(mx, pl[(int64_t)i * p.q_tile]);
    const float mu = mx == neg_inf() ? 0.0f : mx;
    float sw = 0.0f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    const float *po = p.partial_o + ((int64_t)slot * p.q_tile + rt) * FI_MLA_DCKV + d8;
#pragma unroll 4
    for (int i = 0; i < nch; i++) {
      const float w = ex2(pl[(int64_t)i * p.q_tile] - mu);
      const fi_vec<float, 4> x0 = *reinterpret_cast<const fi_vec<float, 4> *>(po + (int64_t)i * p.q_tile * FI_MLA_DCKV);
      const fi_vec<float, 4> x1 = *reinterpret_cast<const fi_vec<float, 4> *>(po + (int64_t)i * p.q_tile * FI_MLA_DCKV + 4);
      sw += w;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        acc[e] += w * x0.v[e];
        acc[4 + e] += w * x1.v[e];
      }
    }
    const int r = r0 + rt, tq = r / G, head = r - tq * G;
    const float inv = sw > 0.0f ? 1.0f / sw : 0.0f;
    fi_vec<T, 8> y;
#pragma unroll
    for (int e = 0; e < 8; e++) y.v[e] = fi_from_float<T>(acc[e] * inv);
    T *orow = static_cast<T *>(p.out) + (q_start + tq) * p.out_stride_tok + (int64_t)head * p.out_stride_head;
    *reinterpret_cast<fi_vec<T, 8> *>(orow + d8) = y;
    if (p.lse && d8 == 0)
      p.lse[(q_start + tq) * p.lse_stride_tok + (int64_t)head * p.lse_stride_head] =
          sw > 0.0f ? (mu + log2f(sw)) * LN2 : neg_inf();
  }
}

}  // namespace mla
}  // namespace fi
