// prefill.cuh: prefill / append attention (many query tokens per request) on tensor cores,
// the FlashAttention-2 recipe: mma.sync m16n8k16 with ldmatrix fragments from swizzled
// shared memory, K and V tiles brought in by cp.async in two stages (the next tile
// loads while this one is computed), online softmax in fp32 and base 2. Also the merge of split-KV partials and fi-bench's tensor-core probe.
//
// A block is WARPS warps over one q tile of QT packed rows (row r of a request: token
// r / group, query head hkv * group + r % group; prefill_params.h) and one KV head; warp w
// owns MT row tiles of 16 (rows 16 MT w ..), S = Q K^T and O in fp32 accumulators:
//   S: A = Q [16 rows][16 dims] (ldmatrix x4; held in registers when QREG, else reloaded
//   from the shared Q tile), B = K^T: ldmatrix x4 of K rows (tokens).
//   O += P V: A = P from S's accumulators as they stand (the FA2 register reuse), B = V:
//   ldmatrix x4 .trans of V rows.
// With two row tiles a warp issues one ldmatrix per four mma instead of per two: shared
// memory bandwidth, not the tensor cores, bounds the one-tile shape.
// Shared memory (dynamic, FI_PF_SMEM bytes) holds one K tile and one V tile of KT tokens
// ([KT][D], 16-byte chunks XOR-swizzled by row % 8 so ldmatrix and cp.async are free of
// bank conflicts) and the Q tile unless QREG.
// The copies, ldmatrix loads and swizzle are sm80.cuh's (ROCm: plain copies and emulated
// loads).
#pragma once
#include "mma.cuh"
#include "sm80.cuh"
#include "prefill_item.cuh"

namespace fi {
namespace pf {

using dec::mma;
using dec::neg_inf;
using dec::ex2;
using dec::shfl_xor;

// The block's dynamic shared memory (FI_PF_SMEM bytes); the host emulator supplies its own.
#ifndef FI_PF_EMU_SMEM
extern __shared__ unsigned char fi_pf_smem[] __attribute__((aligned(128)));
#endif

// An fp8 tile's widening (prefill below): stage buf's K and V bytes at sF8 + 2 buf KT D
// (row-major, D bytes a row) into the 16-bit K and V tiles at sK (swizzled), a thread a
// 16-byte chunk of 16 elements at a time. Nothing for a 16-bit cache.
template <typename KVT, int D, int KT, int THREADS, bool FP8 = dec::kv<KVT>::FP8 != 0>
struct widen {
  static FI_DEVICE void tile(const unsigned char *, uint16_t *, int, int) {}
};
template <typename KVT, int D, int KT, int THREADS>
struct widen<KVT, D, KT, THREADS, true> {
  static FI_DEVICE void tile(const unsigned char *sF8, uint16_t *sK, int buf, int tid) {
    for (int i = tid; i < 2 * KT * (D / 16); i += THREADS) {
      const int kvh = i / (KT * (D / 16)), rem = i - kvh * (KT * (D / 16)), row = rem / (D / 16), ch = rem % (D / 16);
      const fi_vec<uint32_t, 4> x =
          *reinterpret_cast<const fi_vec<uint32_t, 4> *>(sF8 + (2 * buf + kvh) * KT * D + row * D + 16 * ch);
      fi_vec<uint32_t, 4> a, b;
      dec::kv<KVT>::cvt2(x.v[0], a.v[0], a.v[1]);
      dec::kv<KVT>::cvt2(x.v[1], a.v[2], a.v[3]);
      dec::kv<KVT>::cvt2(x.v[2], b.v[0], b.v[1]);
      dec::kv<KVT>::cvt2(x.v[3], b.v[2], b.v[3]);
      uint16_t *dst = sK + kvh * KT * D;
      *reinterpret_cast<fi_vec<uint32_t, 4> *>(dst + swz<D>(row, 2 * ch)) = a;
      *reinterpret_cast<fi_vec<uint32_t, 4> *>(dst + swz<D>(row, 2 * ch + 1)) = b;
    }
  }
};

// T: q / out dtype (f16 or bf16), and K / V's unless KVT says otherwise; D: head_dim; QT:
// q tile (16, 64 or 128 packed rows; the CTA shape is FI_PF_* of prefill_params.h); ROPE:
// RoPE (Llama halves) on q and k; SINGLE: one contiguous request, no plan tables; KVT: an
// fp8 cache (e4m3, e5m2) holding value / scale (k_scale in scale_log2 and cap_pre, v_scale
// in v_scale, as decode's): each tile lands as bytes in the second stage's space (two
// stages of [K][V] bytes fill it exactly) and is widened to f16 into the first stage's
// K and V before its mmas, which then run on f16 (q converted from bf16 as it is staged);
// one barrier more a tile. No RoPE with fp8. DV: V's and the output's head_dim where it
// differs from q's and k's D (DeepSeek's MHA prefill: D 192, DV 128; no RoPE, no fp8):
// a stage is a [KT][D] K tile then a [KT][DV] V tile, O has DV columns.
template <typename T, int D, int QT, int ROPE, int SINGLE, typename KVT = T, int DV = D>
FI_DEVICE void prefill(const fi_prefill_kparams &p) {
  typedef typename dec::mma_type<T, KVT>::type MT_;  // the mma's 16-bit type
  typedef dec::w16<MT_> W;
  typedef dec::w16<T> WO;
  constexpr bool FP8 = dec::kv<KVT>::FP8 != 0, QCONV = FP8 && !dec::same<T, MT_>::value;
  static_assert(!(FP8 && ROPE), "no RoPE with an fp8 cache");
  constexpr int WARPS = FI_PF_WARPS(D, QT), MT = FI_PF_MT(D, QT), KT = FI_PF_KT_DV(D, DV, QT);
  constexpr bool QREG = FI_PF_QREG(D, QT);
  constexpr int THREADS = WARPS * 32, CH = D / 8, CHV = DV / 8, WR = 16 * MT;  // WR: rows of a warp
  constexpr int SST = KT * (D + DV);  // elements of a stage: K tile, then V tile
  static_assert(((D == 64 || D == 128 || D == 256) && DV == D) || (D == 192 && DV == 128),
                "head_dim 64, 128 or 256; or 192 with V's 128");
  static_assert(DV == D || (!FP8 && !ROPE), "no fp8 cache and no RoPE with DV != D");
  static_assert(QT == 16 * MT * WARPS && (MT == 1 || MT == 2), "q tile");
  static_assert(!QREG || QT <= 2 * KT, "a register-held Q tile is staged in the K and V buffers");
  static_assert(D == 192 || THREADS % CH == 0 || CH % THREADS == 0, "chunk mapping");

  // Two stages of [K tile][V tile]; stage b's K at sK + b SST, its V KT D further.
  uint16_t *const sK = reinterpret_cast<uint16_t *>(fi_pf_smem) + (QREG ? 0 : QT * D);
  uint16_t *const sV = sK + KT * D;
  uint16_t *const sQ = QREG ? sK : reinterpret_cast<uint16_t *>(fi_pf_smem);
  int64_t *const s_off = reinterpret_cast<int64_t *>(sK + 2 * SST);  // [2][KT] token offsets

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const int item = blockIdx.x, hkv = blockIdx.y, G = p.group;

  // ---- the work item ----
  pf::work_item w;
  if (!pf::load_item<SINGLE>(p, item, QT, w)) return;
  const int r0 = w.r0, rows = w.rows, kv_lo = w.kv_lo, kv_hi = w.kv_hi, Lq = w.Lq, Lkv = w.Lkv;
  const int chunk = w.chunk, nchunks = w.nchunks, slot = w.slot;
  const int64_t q_start = w.q_start, kv_base = w.kv_base;
  const int off = Lkv - Lq;  // query token t sits at position t + off
  const int rlast = r0 + rows - 1;
  const int ntiles = kv_hi > kv_lo ? (kv_hi - kv_lo + KT - 1) / KT : 0;

  // e4m3 widened as value / 256 or exactly (dec::kv): the host's scales assume the former.
  float wide = 1.0f;
  if constexpr (dec::same<KVT, fi_e4m3>::value) wide = dec::kv<fi_e4m3>::E4M3_WIDE;
  const float scale_log2 = p.scale_log2 * wide, cap_pre = p.cap_pre * wide, v_scale = p.v_scale * wide;

  // ---- Q: stage the tile (RoPE'd at t + off; as f16 for an fp8 cache) in shared memory ----
  const T *qb = static_cast<const T *>(p.q);
  if (QCONV) {
    for (int i = tid; i < QT * CH; i += THREADS) {
      const int row = i / CH, ch = i % CH;
      const int r = r0 + row < rlast ? r0 + row : rlast;
      const int tq = r / G, h = hkv * G + (r - tq * G);
      fi_vec<uint32_t, 4> x = *reinterpret_cast<const fi_vec<uint32_t, 4> *>(
          qb + (q_start + tq) * p.q_stride_tok + (int64_t)h * p.q_stride_head + 8 * ch);
#pragma unroll
      for (int e = 0; e < 4; e++) x.v[e] = W::pack(WO::lo(x.v[e]), WO::hi(x.v[e]));
      *reinterpret_cast<fi_vec<uint32_t, 4> *>(sQ + swz<D>(row, ch)) = x;
    }
    cp_commit();  // (an empty group: the waits below count as for a copied tile)
  } else if (!ROPE) {
    for (int i = tid; i < QT * CH; i += THREADS) {
      const int row = i / CH, ch = i % CH;
      const int r = r0 + row < rlast ? r0 + row : rlast;
      const int tq = r / G, h = hkv * G + (r - tq * G);
      cp16(sQ + swz<D>(row, ch), qb + (q_start + tq) * p.q_stride_tok + (int64_t)h * p.q_stride_head + 8 * ch);
    }
    cp_commit();  // a register-held tile is waited for below; a shared one with K's first tile
  } else {
    for (int i = tid; i < QT * (CH / 2); i += THREADS) {
      const int row = i / (CH / 2), ch = i % (CH / 2);
      const int r = r0 + row < rlast ? r0 + row : rlast;
      const int tq = r / G, h = hkv * G + (r - tq * G);
      const T *src = qb + (q_start + tq) * p.q_stride_tok + (int64_t)h * p.q_stride_head;
      fi_vec<uint32_t, 4> x = *reinterpret_cast<const fi_vec<uint32_t, 4> *>(src + 8 * ch);
      fi_vec<uint32_t, 4> y = *reinterpret_cast<const fi_vec<uint32_t, 4> *>(src + 8 * (ch + CH / 2));
      dec::rope_pair<T>(x.v, y.v, (float)(tq + off), p.rope_freq, ch);
      *reinterpret_cast<fi_vec<uint32_t, 4> *>(sQ + swz<D>(row, ch)) = x;
      *reinterpret_cast<fi_vec<uint32_t, 4> *>(sQ + swz<D>(row, ch + CH / 2)) = y;
    }
  }
  uint32_t qf[QREG ? D / 16 : 1][4];
  if (QREG) {
    cp_wait<0>();
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < (QREG ? D / 16 : 0); ks++)
      ldsm4(sQ, swz<D>(16 * warp + (lane & 15), 2 * ks + (lane >> 4)), qf[ks]);
    __syncthreads();  // the staging buffers become K and V
  }

  // The block's rows all attend [blk_lo, blk_hi): a tile inside needs no mask.
  const int tq0 = r0 / G, tq1 = rlast / G;
  const int blk_hi = p.causal && tq0 + off + 1 < kv_hi ? tq0 + off + 1 : kv_hi;
  const int blk_lo = p.window_left >= 0 && tq1 + off - p.window_left > kv_lo ? tq1 + off - p.window_left : kv_lo;

  // Token offsets: tile t's rows (tokens past kv_hi repeat the last one: finite values,
  // masked out) go into s_off[t % 2] two tiles ahead, so the loads of a tile never wait
  // on a page-table read. Contiguous KV takes the same path (no read).
  const T *kg = static_cast<const T *>(p.k) + (int64_t)hkv * p.kv_stride_head;
  const T *vg = static_cast<const T *>(p.v) + (int64_t)hkv * (DV == D ? p.kv_stride_head : p.v_stride_head);
  const bool paged = p.indices != nullptr;
  auto tok_clamp = [&](int j) { return j < kv_hi - 1 ? j : kv_hi - 1; };
  auto tok_off = [&](int j, int32_t page) -> int64_t {
    if (paged) return (int64_t)page * p.kv_stride_page + (int64_t)(j % p.page_size) * p.kv_stride_slot;
    return (kv_base + j) * p.kv_stride_slot;
  };
  auto page_of = [&](int j) -> int32_t { return paged ? p.indices[kv_base + j / p.page_size] : 0; };
  auto load_tile = [&](uint16_t *dst, const T *base, int buf) {
    const int64_t *to = s_off + buf * KT;
    for (int i = tid; i < KT * CH; i += THREADS) {
      const int row = i / CH, ch = i % CH;
      cp16(dst + swz<D>(row, ch), base + to[row] + 8 * ch);
    }
  };
  // V's tile of DV columns (DV != D: contiguous KV only, V's own strides) from token j0v
  auto load_vtile = [&](uint16_t *dst, const T *base, int buf, int j0v) {
    if constexpr (DV == D) {
      (void)j0v;
      load_tile(dst, base, buf);
    } else {
      (void)buf;
      for (int i = tid; i < KT * CHV; i += THREADS) {
        const int row = i / CHV, ch = i % CHV;
        cp16(dst + swz<DV>(row, ch), base + (kv_base + tok_clamp(j0v + row)) * p.v_stride_slot + 8 * ch);
      }
    }
  };
  // fp8: tile stage b's K bytes at sF8 + 2 b KT D, its V bytes KT D further (row-major,
  // unswizzled; widen above makes the 16-bit tiles of them).
  unsigned char *const sF8 = reinterpret_cast<unsigned char *>(sK + SST);
  const unsigned char *const kg8 = static_cast<const unsigned char *>(p.k) + (int64_t)hkv * p.kv_stride_head;
  const unsigned char *const vg8 = static_cast<const unsigned char *>(p.v) + (int64_t)hkv * p.kv_stride_head;
  auto load_tile8 = [&](unsigned char *dst, const unsigned char *base, int buf) {
    const int64_t *to = s_off + buf * KT;
    for (int i = tid; i < KT * (D / 16); i += THREADS) {
      const int row = i / (D / 16), ch = i % (D / 16);
      cp16(reinterpret_cast<uint16_t *>(dst + row * D + 16 * ch),
           base + to[row] + 16 * ch);
    }
  };
  auto widen_tile = [&](int buf) { widen<KVT, D, KT, THREADS>::tile(sF8, sK, buf, tid); };
  constexpr int NOFF = (KT + THREADS - 1) / THREADS;
  // ldmatrix addresses on CUDA: a lane's row in the tile (every fragment row here is
  // lane & 7 modulo 8) plus chunk 2q + bit, XOR-swizzled by those three bits, is the row
  // base + x[q % 4] + a compile-time part. Rebuilt at each tile from opaque copies: left
  // loop-invariant, the compiler kept one register per (row tile, chunk) address and
  // spilled.
  const uint32_t qrow0 = smem_addr(sQ) + 2u * D * (WR * warp + (lane & 15));
  const uint32_t krow0 = smem_addr(sK) + 2u * D * ((lane & 7) + ((lane >> 4) << 3));
  const uint32_t vrow0 = smem_addr(sV) + 2u * DV * ((lane & 7) + (((lane >> 3) & 1) << 3));

  float o[MT][DV / 8][4];
  float m[MT][2], dsum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      m[mt][h] = neg_inf();
      dsum[mt][h] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < DV / 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[mt][j][e] = 0.0f;
  }

  // Tile t's K and V land in stage t % 2 while tile t - 1 is computed: one barrier a
  // tile, and a whole tile of time for the loads.
  if (ntiles > 0) {
    for (int i = tid; i < 2 * KT; i += THREADS) {  // the offsets of tiles 0 and 1
      const int j = tok_clamp(kv_lo + i);
      s_off[i] = tok_off(j, page_of(j));
    }
    __syncthreads();
    if (FP8) {
      load_tile8(sF8, kg8, 0);
      load_tile8(sF8 + KT * D, vg8, 0);
    } else {
      load_tile(sK, kg, 0);
      load_vtile(sV, vg, 0, kv_lo);
    }
    cp_commit();
  }
  for (int t = 0; t < ntiles; t++) {
    const int j0 = kv_lo + t * KT, buf = t & 1;
    const bool more = t + 1 < ntiles, more2 = t + 2 < ntiles;
    uint16_t *const cK = FP8 ? sK : sK + buf * SST;
    // The page ids of tile t + 2: read now, used after this tile's S.
    int32_t pg[NOFF];
#pragma unroll
    for (int u = 0; u < NOFF; u++) {
      const int i = tid + u * THREADS;
      pg[u] = more2 && i < KT ? page_of(tok_clamp(j0 + 2 * KT + i)) : 0;
    }
    cp_wait<0>();     // this tile's K and V (and a shared Q tile)
    __syncthreads();  // ... seen by every warp, and every warp is done with tile t - 1
    if (more && FP8) {
      load_tile8(sF8 + (buf ^ 1) * 2 * KT * D, kg8, buf ^ 1);
      load_tile8(sF8 + (buf ^ 1) * 2 * KT * D + KT * D, vg8, buf ^ 1);
    } else if (more) {
      load_tile(sK + (buf ^ 1) * SST, kg, buf ^ 1);
      load_vtile(sV + (buf ^ 1) * SST, vg, buf ^ 1, j0 + KT);
    }
    cp_commit();
    if (FP8) {  // this tile's bytes into the 16-bit K and V (every warp is done with the last)
      widen_tile(buf);
      __syncthreads();
    }
    if (ROPE) {
      for (int i = tid; i < KT * (CH / 2); i += THREADS) {
        const int row = i / (CH / 2), ch = i % (CH / 2);
        fi_vec<uint32_t, 4> &x = *reinterpret_cast<fi_vec<uint32_t, 4> *>(cK + swz<D>(row, ch));
        fi_vec<uint32_t, 4> &y = *reinterpret_cast<fi_vec<uint32_t, 4> *>(cK + swz<D>(row, ch + CH / 2));
        uint32_t xs[4], ys[4];
#pragma unroll
        for (int w = 0; w < 4; w++) {
          xs[w] = x.v[w];
          ys[w] = y.v[w];
        }
        dec::rope_pair<T>(xs, ys, (float)(j0 + row), p.rope_freq, ch);
#pragma unroll
        for (int w = 0; w < 4; w++) {
          x.v[w] = xs[w];
          y.v[w] = ys[w];
        }
      }
      __syncthreads();
    }

    const uint32_t stage = FP8 ? 0u : (uint32_t)buf * (2u * SST);  // bytes
    uint32_t qrow = qrow0, krow = krow0 + stage, vrow = vrow0 + stage, xa[4], xb[4];
    opaque(qrow);
    opaque(krow);
    opaque(vrow);
#pragma unroll
    for (int q = 0; q < 4; q++) {
      xa[q] = (uint32_t)((2 * q + (lane >> 4)) ^ (lane & 7)) << 4;        // Q and V fragments
      xb[q] = (uint32_t)((2 * q + ((lane >> 3) & 1)) ^ (lane & 7)) << 4;  // K fragments
      opaque(xa[q]);
      opaque(xb[q]);
    }

    // S = Q K^T: each K fragment feeds the warp's MT row tiles
    float s[MT][KT / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int nb = 0; nb < KT / 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[mt][nb][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
      uint32_t qa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        if (QREG) {
#pragma unroll
          for (int e = 0; e < 4; e++) qa[mt][e] = qf[QREG ? ks : 0][e];
        } else {
#if FI_CUDA
          ldsm4_at(qrow + xa[ks & 3] + (uint32_t)(2 * D * 16 * mt + 128 * (ks >> 2)), qa[mt]);
#else
          ldsm4(sQ, swz<D>(WR * warp + 16 * mt + (lane & 15), 2 * ks + (lane >> 4)), qa[mt]);
#endif
        }
      }
#pragma unroll
      for (int n2 = 0; n2 < KT / 16; n2++) {
        uint32_t kb[4];
#if FI_CUDA
        ldsm4_at(krow + xb[ks & 3] + (uint32_t)(2 * D * 16 * n2 + 128 * (ks >> 2)), kb);
#else
        ldsm4(cK, swz<D>(16 * n2 + (lane & 7) + ((lane >> 4) << 3), 2 * ks + ((lane >> 3) & 1)), kb);
#endif
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          mma<MT_>(s[mt][2 * n2], qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3], kb[0], kb[1]);
          mma<MT_>(s[mt][2 * n2 + 1], qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3], kb[2], kb[3]);
        }
      }
    }

    // online softmax (base 2); P packed to 16 bits as the A fragments of P V
    const bool masked = j0 < blk_lo || j0 + KT > blk_hi || p.custom_mask;
    uint32_t pa[MT][KT / 16][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        // The attended range of this thread's row (g or g + 8 of the row tile), needed
        // only on the tiles that cut through it (worked out there: fewer live registers).
        int lim_lo = kv_lo, lim_hi = kv_hi;
        int64_t mbit = 0;  // the custom mask's bit of (this row's token, KV token 0)
        if (masked) {
          const int r = r0 + WR * warp + 16 * mt + g + 8 * h, tq = (r < rlast ? r : rlast) / G;
          lim_hi = p.causal && tq + off + 1 < kv_hi ? tq + off + 1 : kv_hi;
          lim_lo = p.window_left >= 0 && tq + off - p.window_left > kv_lo ? tq + off - p.window_left : kv_lo;
          mbit = 8 * (int64_t)w.mask_off + (int64_t)tq * Lkv;
        }
        float mx = neg_inf();
#pragma unroll
        for (int nb = 0; nb < KT / 8; nb++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            float x = s[mt][nb][2 * h + e];
            if (p.cap_log2 != 0.0f)
              x = p.cap_log2 * tanhf(x * cap_pre);
            else
              x *= scale_log2;
            if (masked) {
              const int j = j0 + 8 * nb + 2 * c + e;
              // (the mask's byte read only for a token in range: inside the segment)
              if (j < lim_lo || j >= lim_hi || (p.custom_mask && !((p.custom_mask[(mbit + j) >> 3] >> ((mbit + j) & 7)) & 1)))
                x = neg_inf();
            }
            s[mt][nb][2 * h + e] = x;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, shfl_xor(mx, 1));
        mx = fmaxf(mx, shfl_xor(mx, 2));
        const float mn = fmaxf(m[mt][h], mx), mu = mn == neg_inf() ? 0.0f : mn;
        const float alpha = ex2(m[mt][h] - mu);
        m[mt][h] = mn;
        float ps = 0.0f;
#pragma unroll
        for (int nb = 0; nb < KT / 8; nb++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const float pv = ex2(s[mt][nb][2 * h + e] - mu);
            s[mt][nb][2 * h + e] = pv;
            ps += pv;
          }
        dsum[mt][h] = dsum[mt][h] * alpha + ps;
#pragma unroll
        for (int j = 0; j < DV / 8; j++) {
          o[mt][j][2 * h] *= alpha;
          o[mt][j][2 * h + 1] *= alpha;
        }
      }
#pragma unroll
      for (int kk = 0; kk < KT / 16; kk++) {
        pa[mt][kk][0] = W::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][kk][1] = W::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][kk][2] = W::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][kk][3] = W::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
    }
    // Tile t + 2's offsets into the table this tile's loads used (read when they were
    // issued, before the barrier above); the next tile's barrier publishes them.
    if (more2) {
#pragma unroll
      for (int u = 0; u < NOFF; u++) {
        const int i = tid + u * THREADS;
        if (i < KT) s_off[buf * KT + i] = tok_off(tok_clamp(j0 + 2 * KT + i), pg[u]);
      }
    }

    // O += P V: each V fragment feeds the warp's MT row tiles
#pragma unroll
    for (int kk = 0; kk < KT / 16; kk++) {
#pragma unroll
      for (int n2 = 0; n2 < DV / 16; n2++) {
        uint32_t vb[4];
#if FI_CUDA
        ldsm4t_at(vrow + xa[n2 & 3] + (uint32_t)(2 * DV * 16 * kk + 128 * (n2 >> 2)), vb);
#else
        ldsm4t(cK + KT * D, swz<DV>(16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * n2 + (lane >> 4)), vb);
#endif
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          mma<MT_>(o[mt][2 * n2], pa[mt][kk][0], pa[mt][kk][1], pa[mt][kk][2], pa[mt][kk][3], vb[0], vb[1]);
          mma<MT_>(o[mt][2 * n2 + 1], pa[mt][kk][0], pa[mt][kk][1], pa[mt][kk][2], pa[mt][kk][3], vb[2], vb[3]);
        }
      }
    }
  }
  cp_wait<0>();

  // ---- out / lse, or this chunk's partial ----
  const float LN2 = 0.6931471805599453f;
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float ds = dsum[mt][h];
      ds += shfl_xor(ds, 1);
      ds += shfl_xor(ds, 2);
      const int rt = WR * warp + 16 * mt + g + 8 * h;  // row in the tile
      if (rt >= rows) continue;
      const int r = r0 + rt, tq = r / G, head = hkv * G + (r - tq * G);
      // A sink joins the row's final state (dec::sink_fold; a split's partial has none).
      float mr = m[mt][h], fa = 1.0f;
      if (p.sinks && nchunks <= 1) fa = dec::sink_fold(p.sinks[head] * dec::LOG2E_F, mr, ds);
      const float inv = ds > 0.0f ? v_scale * fa / ds : 0.0f;
      if (nchunks <= 1) {
        T *orow = static_cast<T *>(p.out) + (q_start + tq) * p.out_stride_tok + (int64_t)head * p.out_stride_head;
#pragma unroll
        for (int j = 0; j < DV / 8; j++)
          *reinterpret_cast<uint32_t *>(orow + 8 * j + 2 * c) =
              WO::pack(o[mt][j][2 * h] * inv, o[mt][j][2 * h + 1] * inv);
        if (p.lse && c == 0)
          p.lse[(q_start + tq) * p.lse_stride_tok + (int64_t)head * p.lse_stride_head] =
              ds > 0.0f ? (mr + log2f(ds)) * (p.lse_log2 ? 1.0f : LN2) : neg_inf();
      } else {
        const int64_t prow = ((int64_t)(slot + chunk) * p.num_kv_heads + hkv) * FI_PREFILL_SLOT_ROWS + rt;
        float *po = p.partial_o + prow * DV;
#pragma unroll
        for (int j = 0; j < DV / 8; j++) {
          fi_vec<float, 2> y;
          y.v[0] = o[mt][j][2 * h] * inv;
          y.v[1] = o[mt][j][2 * h + 1] * inv;
          *reinterpret_cast<fi_vec<float, 2> *>(po + 8 * j + 2 * c) = y;
        }
        if (c == 0) p.partial_lse[prow] = ds > 0.0f ? m[mt][h] + log2f(ds) : neg_inf();
      }
    }
}

// The merge of split tiles: the block of a tile's chunk-0 item combines the tile's
// partials into out and lse, one thread a row's 8 columns. Two passes over the chunks:
// the row's largest LSE (loads only), then the weighted sum, whose loads do not wait on
// one another (one pass with a running maximum made each chunk a round trip to L2: a
// long context split in 100 chunks or more at B=1 paid a hundred of them a thread).
template <typename T, int D>
FI_DEVICE void prefill_merge(const fi_prefill_merge_params &p) {
  const int item = blockIdx.x, hkv = blockIdx.y;
  const int n = p.num_items >= 0 ? p.num_items : p.header[0];
  if (item >= n) return;
  const int32_t *it = p.items + FI_PREFILL_ITEM_WORDS * item;
  const int chunk = it[5] & 0xffff, nch = it[5] >> 16;
  if (chunk != 0 || nch <= 1) return;
  const int r0 = it[1], rows = it[2], slot = it[10], G = p.group;
  const int64_t q_start = it[6];
  const float LN2 = 0.6931471805599453f;
  // Chunk i's row rt is partial row ((slot + i) * num_kv_heads + hkv) * q_tile + rt.
  const int64_t cstride = (int64_t)p.num_kv_heads * p.q_tile;
  for (int u = threadIdx.x; u < rows * (D / 8); u += blockDim.x) {
    const int rt = u / (D / 8), d8 = (u - rt * (D / 8)) * 8;
    const int64_t prow0 = ((int64_t)slot * p.num_kv_heads + hkv) * p.q_tile + rt;
    const float *pl = p.partial_lse + prow0;
    float mx = neg_inf();
#pragma unroll 8
    for (int i = 0; i < nch; i++) mx = fmaxf(mx, pl[i * cstride]);
    float mu = mx == neg_inf() ? 0.0f : mx;  // sink_fold moves it (and sw) to the sink's
    float sw = 0.0f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    const float *po = p.partial_o + prow0 * D + d8;
#pragma unroll 4
    for (int i = 0; i < nch; i++) {
      const float w = ex2(pl[i * cstride] - mu);
      const fi_vec<float, 4> x0 = *reinterpret_cast<const fi_vec<float, 4> *>(po + i * cstride * D);
      const fi_vec<float, 4> x1 = *reinterpret_cast<const fi_vec<float, 4> *>(po + i * cstride * D + 4);
      sw += w;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        acc[e] += w * x0.v[e];
        acc[4 + e] += w * x1.v[e];
      }
    }
    const int r = r0 + rt, tq = r / G, head = hkv * G + (r - tq * G);
    const float fa = p.sinks ? dec::sink_fold(p.sinks[head] * dec::LOG2E_F, mu, sw) : 1.0f;
    const float inv = sw > 0.0f ? fa / sw : 0.0f;
    fi_vec<T, 8> y;
#pragma unroll
    for (int e = 0; e < 8; e++) y.v[e] = fi_from_float<T>(acc[e] * inv);
    T *orow = static_cast<T *>(p.out) + (q_start + tq) * p.out_stride_tok + (int64_t)head * p.out_stride_head;
    *reinterpret_cast<fi_vec<T, 8> *>(orow + d8) = y;
    if (p.lse && d8 == 0)
      p.lse[(q_start + tq) * p.lse_stride_tok + (int64_t)head * p.lse_stride_head] =
          sw > 0.0f ? (mu + log2f(sw)) * (p.lse_log2 ? 1.0f : LN2) : neg_inf();
  }
}

// fi-bench's tensor-core probe: 8 independent accumulator chains of bf16 m16n8k16 per
// warp, operands in registers (no memory traffic in the loop).
FI_DEVICE void mma_probe(const fi_mma_probe_params &p) {
  const int lane = threadIdx.x & 31;
  typedef dec::w16<fi_bf16> W;
  const uint32_t a0 = W::pack(1e-3f * lane, 2e-3f), a1 = W::pack(-1e-3f, 1e-3f * (lane & 7));
  const uint32_t b0 = W::pack(1e-3f, -1e-3f * lane), b1 = W::pack(2e-3f * (lane & 3), 1e-3f);
  float d[8][4];
#pragma unroll
  for (int k = 0; k < 8; k++)
#pragma unroll
    for (int e = 0; e < 4; e++) d[k][e] = 0.0f;
  for (int i = 0; i < p.iters; i++) {
#pragma unroll
    for (int k = 0; k < 8; k++) mma<fi_bf16>(d[k], a0, a1, a0 ^ (uint32_t)k, a1, b0, b1);
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; k++)
#pragma unroll
    for (int e = 0; e < 4; e++) sum += d[k][e];
  if (sum == p.never) p.sink[0] = sum;
}

}  // namespace pf
}  // namespace fi
