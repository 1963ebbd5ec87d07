// decode.cuh: decode attention (one query token per request) over a paged or contiguous
// KV cache, on tensor cores (mma.sync m16n8k16), with split-KV partials merged by LSE
// by the last block of each (request, KV head) (single decode: by a second launch), and
// the plan-table upload kernel.
//
// A block is WARPS warps over one work item (request, token range) and one KV
// head; its warps take 16-token steps (32 with an fp8 cache) in turn, each with its own
// online softmax, merged through shared memory at the end. Each warp loads K and V
// straight from global memory into registers in the layouts the mma fragments need, so
// nothing is staged in shared memory and every load is 16 bytes (8 for V of an fp8
// cache at head_dim 64):
//   S = Q K^T: A = Q [16 rows = the group's heads, padded][16 dims], B = K^T [16 dims][8 tokens].
//     Lane (g, c) = (lane / 4, lane % 4) loads 16-byte chunks c + 4i of tokens g and 8 + g;
//     a chunk's words (once widened, for fp8) are exactly the B fragments of two k-steps
//     (four for fp8), and q's chunk the A fragments (dims are summed over, so any order
//     used alike for q and K works).
//   O^T += V^T P^T: A = V^T [16 dims][16 tokens], B = P^T [16 tokens][8 heads].
//     P^T's fragment is S's accumulator as it stands; lane (g, c) loads chunks g + 8s of
//     tokens 2c, 2c+1, 8+2c, 9+2c and pairs the tokens of a dim with one prmt a word.
// Softmax is in fp32 and base 2. fp8 is widened to f16 in registers: e4m3 with the
// hardware conversion on sm_89 and later, elsewhere (sm_80, ROCm) with integer ops as
// its value / 256 (the 256 folded into the scales); e5m2 is an f16's top byte.
// KV head pairs (p.kv_heads_per_block = 2: fp8, head_dim 128, group <= 4, no RoPE, the
// heads adjacent: kv_stride_head = head_dim): a block takes two KV heads as one head of
// 256 dims whose q rows are block diagonal (rows 0..G-1 the first head's q in dims
// 0..127 and zeros, rows G..2G-1 zeros and the second head's q), so S needs nothing
// else; P V adds each head's V tiles, with P masked to that head's rows, into the same
// accumulators. A token's row is then 256 contiguous bytes, as with a 16-bit cache,
// not 128, at the same math per byte.
// On ROCm the mma is emulated with lane shuffles: correct, not fast.
// Beside it: decode_enter.cuh (the entry under PDL), decode_step.cuh (a warp's step:
// compute_qk, update_local_state), decode_merge.cuh (the split's merge). q's load, the
// warps' merge and the block's output stay sections of decode_heads: as functions (or
// lambdas) of their own, by value or by reference, each changed the machine code of some
// configurations (the compiler's choices there depend on decode_heads' callees; checked
// with tools/cubin_diff.py).
#pragma once
#include "decode_params.h"
#include "mma.cuh"
#include "decode_enter.cuh"
#include "decode_merge.cuh"
#include "decode_step.cuh"

namespace fi {
namespace dec {

// Page lookup of one token: page id and slot (single decode: page 0, slot = token).
struct tok_loc {
  int32_t page, slot;
};

// QT: q/out dtype; KVT: cache dtype; D: head_dim; GM: rows of the group (8 or 16);
// PF: 1 loads the whole next step while this one computes (two register buffers),
// 0 loads the next step's K while this step's V is used (one buffer); ROPE: RoPE on
// q and k; SINGLE: one contiguous request, no plan tables; WARPS: warps per block (1, 2,
// 4 or 8); HP: KV heads a block (1, or 2: see above).
template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS, int HP>
FI_DEVICE void decode_heads(const fi_decode_params &p) {
  typedef shape<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, HP> S;  // the tiling (the shape struct of the decode-step header)
  typedef typename S::MT MT;
  typedef w16<MT> W;
  typedef typename S::KV KV;
  constexpr int THREADS = S::THREADS, FP8 = S::FP8, H8 = S::H8, DE = S::DE, KC = S::KC, KW = S::KW, NQ = S::NQ;
  constexpr int VN = S::VN, VC = S::VC, VW = S::VW, NV = S::NV, NQH = S::NQH, NVH = S::NVH, SUB = S::SUB, STEP = S::STEP;
  static_assert(WARPS == 1 || WARPS == 2 || WARPS == 4 || WARPS == 8, "1, 2, 4 or 8 warps");

  decode_enter<KVT, DE, SINGLE, WARPS, (WARPS >= 4 || PF != 0)>(p, blockIdx.y * HP);

  __shared__ float s_o[GM][D + 2];  // + 2: rows apart in the banks, dims kept in pairs
  __shared__ float s_m[WARPS][GM], s_d[WARPS][GM];
  __shared__ float s_fm[GM], s_fs[GM], s_fa[GM];
  __shared__ int s_last;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  // hkv: the block's (first) grid head (its KV head: FI_DECODE_KV_HEAD); GE: its rows (q
  // heads hkv G .. hkv G + GE - 1).
  const int item = blockIdx.x, hkv = blockIdx.y * HP, G = p.group, GE = G * HP;
  // An e4m3 cache widened exactly (hardware conversion) instead of as value / 256.
  float wide = 1.0f;
  if constexpr (same<KVT, fi_e4m3>::value) wide = KV::E4M3_WIDE;
  const float scale_log2 = p.scale_log2 * wide, cap_pre = p.cap_pre * wide, v_scale = p.v_scale * wide;
  if (SINGLE && p.single_merge) {  // single decode's merge launch (grid 1 x H_kv), after the chunks'
    split_merge<QT, D, THREADS>(p, 0, hkv * G, GE, (int64_t)p.num_kv_heads * G, 0, p.num_items);
    return;
  }

  // ---- the work item ----
  int b = 0, lo, hi, chunk = 0, nchunks = 1, kv_len;
  int64_t page_base = 0;
  if (SINGLE) {
    // Chunk `item` of p.num_items: p.single_chunk tokens from single_lo each, the last
    // to kv_len (one chunk: the whole range); several merge as a batch request's do.
    nchunks = p.num_items;
    chunk = item;
    lo = p.single_lo + item * p.single_chunk;
    hi = item == nchunks - 1 ? p.kv_len : lo + p.single_chunk;
    kv_len = p.kv_len;
  } else {
    const int n = p.num_items >= 0 ? p.num_items : p.header[0];
    if (item >= n) return;  // CUDA-graph mode: a grid for the largest plan
    // The item carries all the request's facts: no dependent load of indptr.
    const int32_t *ip = p.items + FI_DECODE_ITEM_WORDS * item;
    const fi_vec<int32_t, 4> it = *reinterpret_cast<const fi_vec<int32_t, 4> *>(ip);
    const fi_vec<int32_t, 4> it2 = *reinterpret_cast<const fi_vec<int32_t, 4> *>(ip + 4);
    b = it.v[0];
    lo = it.v[1];
    hi = it.v[2];
    chunk = it.v[3] & 0xffff;
    nchunks = it.v[3] >> 16;
    page_base = it2.v[0];
    kv_len = it2.v[1];
  }

  const int nst = hi > lo ? (hi - lo + STEP - 1) / STEP : 0;
  const int j16 = lane & (STEP - 1);

  // This lane's token of step k (token lo + STEP k + lane % STEP, clamped into the range:
  // loads stay in bounds, the softmax masks what is past hi).
  auto locate = [&](int k) -> tok_loc {
    tok_loc t;
    int tok = lo + STEP * k + j16;
    if (tok > hi - 1) tok = hi - 1;
    if (SINGLE) {
      t.page = 0;
      t.slot = tok;
    } else {
      const int pl = tok / p.page_size;
      t.slot = tok - pl * p.page_size;
      t.page = k < nst ? p.indices[page_base + pl] : 0;
    }
    return t;
  };
  auto offset = [&](tok_loc t) -> int64_t {
    return (int64_t)t.page * p.kv_stride_page + (int64_t)t.slot * p.kv_stride_slot;
  };
  // ---- q: the A fragments (rows g and g + 8 of the group), RoPE'd at kv_len - 1;
  // chunk i of a lane is dims KC (c + 4i) .. + KC, as K's. Warp 0 builds them and leaves
  // each mma's four words side by side in shared memory (zeros in the rows past the
  // group), where one 16-byte load gives the register tuple the mma takes: in registers
  // they would be copied into place before every mma. ----
  __shared__ fi_vec<uint32_t, 4> s_q[S::NA][32];
  if (warp == 0) {
    uint32_t qf[H8][NQ][KW];
#pragma unroll
    for (int h = 0; h < H8; h++) {
      const int r = 8 * h + g;
      if (r < GE) {
        const QT *qr = static_cast<const QT *>(p.q) + (int64_t)b * p.q_stride[0] +
                       (int64_t)(hkv * G + r) * p.q_stride[1];
#pragma unroll
        for (int i = 0; i < NQ; i++)
#pragma unroll
          for (int x8 = 0; x8 < KW / 4; x8++) {
            fi_vec<uint32_t, 4> x;
            if (HP == 1 || i / NQH == r / G) {  // a head pair: zeros in the other head's dims
              x = *reinterpret_cast<const fi_vec<uint32_t, 4> *>(qr + KC * (c + 4 * (i % NQH)) + 8 * x8);
            } else {
#pragma unroll
              for (int w = 0; w < 4; w++) x.v[w] = 0u;
            }
#pragma unroll
            for (int w = 0; w < 4; w++) {
              if constexpr (same<QT, MT>::value) {
                qf[h][i][4 * x8 + w] = x.v[w];
              } else {
                typedef w16<QT> WQ;
                qf[h][i][4 * x8 + w] = W::pack(WQ::lo(x.v[w]), WQ::hi(x.v[w]));
              }
            }
          }
        if (ROPE) {
#pragma unroll
          for (int i = 0; i < NQ / 2; i++)
            rope_pair<MT>(qf[h][i], qf[h][i + NQ / 2], (float)(kv_len - 1), p.rope_freq, c + 4 * i);
        }
      } else {
#pragma unroll
        for (int i = 0; i < NQ; i++)
#pragma unroll
          for (int w = 0; w < KW; w++) qf[h][i][w] = 0u;
      }
    }
#pragma unroll
    for (int i = 0; i < NQ; i++)
#pragma unroll
      for (int h2 = 0; h2 < KW / 2; h2++) {
        fi_vec<uint32_t, 4> t;
        t.v[0] = qf[0][i][2 * h2];
        t.v[1] = H8 > 1 ? qf[H8 - 1][i][2 * h2] : 0u;
        t.v[2] = qf[0][i][2 * h2 + 1];
        t.v[3] = H8 > 1 ? qf[H8 - 1][i][2 * h2 + 1] : 0u;
        if (HP > 1) {  // one row half: its two words first (see qk_softmax)
          t.v[1] = t.v[2];
          t.v[2] = 0u;
        }
        s_q[i * (KW / 2) + h2][lane] = t;
      }
  }

  // This warp's first step's page lookup goes out before the barrier that publishes q
  // (warps 1.. at once, beside warp 0's q load), not after it.
  const int k0 = warp;
  const tok_loc loc0 = locate(k0);

  // The item's first |head_prefetch| tokens into L2 at the start (tuning; off by
  // default): the whole head of the item is requested from DRAM at once, where the
  // register loads alone keep two steps a warp in flight.
  auto head_pf = [&](int t0, int nt) {
    const int want = p.head_prefetch < 0 ? -p.head_prefetch : p.head_prefetch;
    const int end = hi - lo < want ? hi : lo + want;
    constexpr uint32_t ROW = DE * sizeof(KVT);
    constexpr int PU = 4;  // tokens a thread looks up before it prefetches any
    const KVT *kh = static_cast<const KVT *>(p.k) + (int64_t)FI_DECODE_KV_HEAD(p, hkv) * p.kv_stride_head;
    const KVT *vh = static_cast<const KVT *>(p.v) + (int64_t)FI_DECODE_KV_HEAD(p, hkv) * p.kv_stride_head;
    for (int t = lo + t0; t < end; t += PU * nt) {
      tok_loc l[PU];
#pragma unroll
      for (int u = 0; u < PU; u++) {
        const int tok = t + u * nt < end ? t + u * nt : end - 1;
        if (SINGLE) {
          l[u].page = 0;
          l[u].slot = tok;
        } else {
          const int pl = tok / p.page_size;
          l[u].slot = tok - pl * p.page_size;
          l[u].page = p.indices[page_base + pl];
        }
      }
#pragma unroll
      for (int u = 0; u < PU; u++)
        if (t + u * nt < end) {
          const int64_t off = offset(l[u]);
          prefetch_l2(kh + off, ROW, p.head_prefetch < 0);
          prefetch_l2(vh + off, ROW, p.head_prefetch < 0);
        }
    }
  };
  if (p.head_prefetch != 0 && (WARPS == 1 || warp > 0))  // warp 0 is late: it built q
    head_pf(WARPS > 1 ? tid - 32 : tid, WARPS > 1 ? THREADS - 32 : THREADS);


  const KVT *kb = static_cast<const KVT *>(p.k) + (int64_t)FI_DECODE_KV_HEAD(p, hkv) * p.kv_stride_head;
  const KVT *vb = static_cast<const KVT *>(p.v) + (int64_t)FI_DECODE_KV_HEAD(p, hkv) * p.kv_stride_head;

  float o[H8][D / 16][4];
  float m[H8], dsum[H8];
#pragma unroll
  for (int h = 0; h < H8; h++) {
    m[h] = neg_inf();
    dsum[h] = 0.0f;
#pragma unroll
    for (int j = 0; j < D / 16; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[h][j][e] = 0.0f;
  }

  // Per sub-step u: K of tokens g and 8 + g, V of tokens 2c, 2c+1, 8+2c, 9+2c. A 16-bit
  // cache is read with the hinted load under an L2 policy, evict-first unless p.kv_evict
  // is 0 (mma.cuh), except by 2-warp blocks: NVRTC's 2-warp kernel ran slower with the
  // hinted load at B=64 than with the plain one, either policy (its 1- and 4-warp kernels
  // faster; docs/decode.md, eighth session, the KV loads under an L2 evict-first policy),
  // so it and fp8 caches load plainly.
  constexpr bool KV_HINT = !FP8 && WARPS != 2;
  const uint64_t kv_pol = KV_HINT ? l2_kv_policy(p.kv_evict) : 0;
  auto load_k = [&](int64_t off, uint32_t (&kr)[SUB][2][NQ][4]) {
#pragma unroll
    for (int u = 0; u < SUB; u++)
#pragma unroll
      for (int t = 0; t < 2; t++) {
        const KVT *row = kb + shfl64(off, 16 * u + 8 * t + g);
#pragma unroll
        for (int i = 0; i < NQ; i++) ldg_kv<KV_HINT>(row + KC * (c + 4 * i), kr[u][t][i], kv_pol);
      }
  };
  auto load_v = [&](int64_t off, uint32_t (&vr)[SUB][4][NV][VN]) {
#pragma unroll
    for (int u = 0; u < SUB; u++)
#pragma unroll
      for (int t = 0; t < 4; t++) {
        const KVT *row = vb + shfl64(off, 16 * u + 2 * c + (t & 1) + 8 * (t >> 1));
#pragma unroll
        for (int s = 0; s < NV; s++) ldg_kv<KV_HINT>(row + VC * (g + 8 * s), vr[u][t][s], kv_pol);
      }
  };

  // The step's math (decode_step.cuh): S = q K^T of every sub-step of step k, one
  // online-softmax update for all of them, P^T fragments in pb; then, a sub-step at a
  // time, O^T += V^T P^T (pv; rhead[h]: the head of row 8 h + g, for head pairs).
  auto qk_softmax = [&](int k, const uint32_t (&kr)[SUB][2][NQ][4], uint32_t (&pb)[SUB][H8][2]) {
    compute_qk<S>(s_q, lane, lo, g, p, c, hi, cap_pre, scale_log2, m, dsum, o, k, kr, pb);
  };
  int rhead[H8];
#pragma unroll
  for (int h = 0; h < H8; h++) rhead[h] = HP > 1 ? (8 * h + g) / G : 0;
  auto pv = [&](const uint32_t (&vr)[4][NV][VN], const uint32_t (&pb_all)[H8][2]) {
    update_local_state<S>(rhead, o, vr, pb_all);
  };

  // The K and V rows of step k into L2 ahead of their register loads, so that more
  // bytes are in flight than the registers hold: lanes 0-15 take K, 16-31 V (fp8
  // steps have a token per lane: each takes both).
  const int pfd = p.prefetch < 0 ? -p.prefetch : p.prefetch;  // < 0: line prefetches
  const bool pf_lines = p.prefetch < 0;
  auto prefetch = [&](int k) {
    if (k >= nst) return;
    const int64_t off = offset(locate(k));
    constexpr uint32_t ROW = DE * sizeof(KVT);
    if (SUB == 1) {
      prefetch_l2((lane < 16 ? kb : vb) + off, ROW, pf_lines);
    } else {
      prefetch_l2(kb + off, ROW, pf_lines);
      prefetch_l2(vb + off, ROW, pf_lines);
    }
  };

  // A whole step: S and the softmax, then P V.
  auto compute = [&](int k, const uint32_t (&kr)[SUB][2][NQ][4], const uint32_t (&vr)[SUB][4][NV][VN]) {
    uint32_t pb[SUB][H8][2];
    qk_softmax(k, kr, pb);
#pragma unroll
    for (int u = 0; u < SUB; u++) pv(vr[u], pb[u]);
  };

  __syncthreads();  // s_q

  // ---- the main loop: this warp's steps warp, warp + WARPS, ... ----
  if (warp < nst) {
    tok_loc next = locate(k0 + WARPS);
    if (PF) {
      uint32_t ka[SUB][2][NQ][4], va[SUB][4][NV][VN], kb2[SUB][2][NQ][4], vb2[SUB][4][NV][VN];
      {
        const int64_t off = offset(loc0);
        load_k(off, ka);
        load_v(off, va);
      }
      for (int i = 2; i <= pfd; i++) prefetch(k0 + i * WARPS);
      const int ahead = (1 + pfd) * WARPS;
      int k = k0;
      for (;;) {
        if (k + WARPS < nst) {
          const int64_t off = offset(next);
          load_k(off, kb2);
          load_v(off, vb2);
          next = locate(k + 2 * WARPS);
          if (pfd > 0) prefetch(k + ahead);
        }
        compute(k, ka, va);
        k += WARPS;
        if (k >= nst) break;
        if (k + WARPS < nst) {
          const int64_t off = offset(next);
          load_k(off, ka);
          load_v(off, va);
          next = locate(k + 2 * WARPS);
          if (pfd > 0) prefetch(k + ahead);
        }
        compute(k, kb2, vb2);
        k += WARPS;
        if (k >= nst) break;
      }
    } else {
      uint32_t kr[SUB][2][NQ][4], vr[SUB][4][NV][VN];
      int64_t off = offset(loc0);
      load_k(off, kr);
      for (int i = 1; i < pfd; i++) prefetch(k0 + i * WARPS);
      for (int k = k0; k < nst; k += WARPS) {
        load_v(off, vr);
        const int64_t offn = offset(next);
        next = locate(k + 2 * WARPS);
        if (pfd > 0) prefetch(k + pfd * WARPS);
        uint32_t pb[SUB][H8][2];
        qk_softmax(k, kr, pb);
        // The next step's K once this step's K is used.
        if (k + WARPS < nst) load_k(offn, kr);
#pragma unroll
        for (int u = 0; u < SUB; u++) pv(vr[u], pb[u]);
        off = offn;
      }
    }
  }

  // ---- merge the warps: each adds its rescaled O^T in turn (no atomics) ----
#pragma unroll
  for (int h = 0; h < H8; h++) {
    dsum[h] += shfl_xor(dsum[h], 1);
    dsum[h] += shfl_xor(dsum[h], 2);
    if (c == 0) {
      s_m[warp][8 * h + g] = m[h];
      s_d[warp][8 * h + g] = dsum[h];
    }
  }
  __syncthreads();
  if (tid < GM) {
    float mx = neg_inf();
    for (int w = 0; w < WARPS; w++) mx = fmaxf(mx, s_m[w][tid]);
    float ds = 0.0f;
    if (mx != neg_inf())
      for (int w = 0; w < WARPS; w++) ds += s_d[w][tid] * ex2(s_m[w][tid] - mx);
    s_fm[tid] = mx;
    s_fs[tid] = ds;
  }
  float wgt[H8][2];
#pragma unroll
  for (int h = 0; h < H8; h++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int r = 8 * h + 2 * c + e;
      float mx = neg_inf();
      for (int w = 0; w < WARPS; w++) mx = fmaxf(mx, s_m[w][r]);
      wgt[h][e] = mx == neg_inf() ? 0.0f : ex2(s_m[warp][r] - mx);
    }
  for (int w = 0; w < WARPS; w++) {
    if (warp == w) {
#pragma unroll
      for (int h = 0; h < H8; h++)
#pragma unroll
        for (int s = 0; s < NVH; s++)
#pragma unroll
          for (int i = 0; i < VW; i++) {
            const int dim = VC * (g + 8 * s) + 2 * i;
            const float *oj = o[h][VW * s + i];
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int r = 8 * h + 2 * c + e;
              if (r < GE) {
                float *dst = &s_o[r][dim];
                const float x0 = oj[e] * wgt[h][e], x1 = oj[2 + e] * wgt[h][e];
                dst[0] = w ? dst[0] + x0 : x0;
                dst[1] = w ? dst[1] + x1 : x1;
              }
            }
          }
    }
    __syncthreads();
  }

  const float LN2 = 0.6931471805599453f;
  const int head0 = hkv * G;
  if (nchunks <= 1) {
    // The whole request: out and lse directly.
    if (p.sinks) sinks_fold_rows(p.sinks + head0, GE, s_fm, s_fs, s_fa);
    for (int u = tid; u < GE * (D / 8); u += THREADS) {
      const int r = u / (D / 8), d8 = (u - r * (D / 8)) * 8;
      const float ds = s_fs[r], inv = ds > 0.0f ? (p.sinks ? v_scale * s_fa[r] : v_scale) / ds : 0.0f;
      fi_vec<QT, 8> y;
#pragma unroll
      for (int e = 0; e < 8; e++) y.v[e] = fi_from_float<QT>(s_o[r][d8 + e] * inv);
      QT *orow = static_cast<QT *>(p.out) + (int64_t)b * p.out_stride[0] + (int64_t)(head0 + r) * p.out_stride[1];
      *reinterpret_cast<fi_vec<QT, 8> *>(orow + d8) = y;
    }
    if (p.lse && tid < GE) {
      const float ds = s_fs[tid];
      p.lse[(int64_t)b * p.lse_stride[0] + (int64_t)(head0 + tid) * p.lse_stride[1]] =
          ds > 0.0f ? (s_fm[tid] + log2f(ds)) * (p.lse_log2 ? 1.0f : LN2) : neg_inf();
    }
    return;
  }

  // ---- a split request: this chunk's partial, then the last block of the (request,
  // KV head) merges all of them. The partial output is rounded to the output's dtype
  // (as FlashInfer's tmp_v; its LSE stays fp32): the merging block reads every chunk's
  // partial through one SM, at B = 1 (32 chunks) its slowest step, and half the bytes
  // cut that step (H100, lab/decode_trace). ----
  const int64_t hq = (int64_t)p.num_kv_heads * G;  // H_qo
  {
    QT *po = static_cast<QT *>(p.partial_o) + ((int64_t)item * hq + head0) * D;
    for (int u = tid; u < GE * (D / 8); u += THREADS) {
      const int r = u / (D / 8), d8 = (u - r * (D / 8)) * 8;
      const float ds = s_fs[r], inv = ds > 0.0f ? v_scale / ds : 0.0f;
      fi_vec<QT, 8> y;
#pragma unroll
      for (int e = 0; e < 8; e++) y.v[e] = fi_from_float<QT>(s_o[r][d8 + e] * inv);
      *reinterpret_cast<fi_vec<QT, 8> *>(po + (int64_t)r * D + d8) = y;
    }
    if (tid < GE) {
      const float ds = s_fs[tid];
      p.partial_lse[(int64_t)item * hq + head0 + tid] = ds > 0.0f ? s_fm[tid] + log2f(ds) : neg_inf();
    }
  }
  // Single decode: a second launch merges (no counters, so nothing to clear before this one).
  if (SINGLE) return;
  split_publish();
  __syncthreads();
  int32_t *counter = p.counters + (int64_t)b * p.num_kv_heads + hkv;
  if (tid == 0) s_last = split_arrive(counter) == nchunks - 1;
  __syncthreads();
  if (!s_last) return;
  split_acquired();
  if (tid == 0) *counter = 0;  // ready for the next run
  split_merge<QT, D, THREADS>(p, b, head0, GE, hq, item - chunk, nchunks);
}

// The kernel: KV head pairs where the plan asks for them and the cache allows them.
template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS>
FI_DEVICE void decode(const fi_decode_params &p) {
  if constexpr (kv<KVT>::FP8 && D == 128 && GM == 8 && !ROPE && !SINGLE) {
    if (p.kv_heads_per_block == 2) {
      decode_heads<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, 2>(p);
      return;
    }
  }
  decode_heads<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, 1>(p);
}

// Plan upload: the tables ride in the launch parameters.
FI_DEVICE void decode_upload(const fi_decode_upload_params &p) {
  for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < p.n; i += blockDim.x * gridDim.x)
    p.dst[i] = p.fill ? p.fill_value : p.data[i];
}

// Read-bandwidth probe for fi-bench: streams n 16-byte vectors with the decode kernel's
// loads; the xor of everything read is written only if it equals `never`.
FI_DEVICE void read_probe(const fi_read_probe_params &p) {
  const fi_vec<uint32_t, 4> *v = static_cast<const fi_vec<uint32_t, 4> *>(p.src);
  uint32_t acc = 0;
  const int64_t step = (int64_t)blockDim.x * gridDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * step < p.n; i += 4 * step) {
    uint32_t r[4][4];
#pragma unroll
    for (int u = 0; u < 4; u++) ldg_nc<4>(v + i + u * step, r[u]);
#pragma unroll
    for (int u = 0; u < 4; u++) acc ^= r[u][0] ^ r[u][1] ^ r[u][2] ^ r[u][3];
  }
  for (; i < p.n; i += step) {
    uint32_t r[4];
    ldg_nc<4>(v + i, r);
    acc ^= r[0] ^ r[1] ^ r[2] ^ r[3];
  }
  if (acc == p.never) p.sink[0] = acc;
}

}  // namespace dec
}  // namespace fi
