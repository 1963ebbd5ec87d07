// decode.cuh: decode attention (one query token per request) over a paged or contiguous
// KV cache, on tensor cores (mma.sync m16n8k16), with split-KV partials merged by LSE
// by the last block of each (request, KV head), and the plan-table upload kernel.
//
// A block is WARPS warps over one work item (request, token range) and one KV
// head; its warps take 16-token steps in turn, each with its own online softmax, merged
// through shared memory at the end. Each warp loads K and V straight from global memory
// into registers in the layouts the mma fragments need, so nothing is staged in shared
// memory and every load is 16 bytes (8 for fp8):
//   S = Q K^T: A = Q [16 rows = the group's heads, padded][16 dims], B = K^T [16 dims][8 tokens].
//     Lane (g, c) = (lane / 4, lane % 4) loads 16-byte chunks c + 4i of tokens g and 8 + g;
//     a chunk's words are exactly the B fragment of two k-steps, and q's chunk the A
//     fragment (dims are summed over, so any order used alike for q and K works).
//   O^T += V^T P^T: A = V^T [16 dims][16 tokens], B = P^T [16 tokens][8 heads].
//     P^T's fragment is S's accumulator as it stands; lane (g, c) loads chunks g + 8s of
//     tokens 2c, 2c+1, 8+2c, 9+2c and pairs the tokens of a dim with one prmt each.
// Softmax is in fp32 and base 2; fp8 is widened in registers with integer ops (e4m3 as
// its value / 256, the 256 folded into the scales), so the path is the same on sm_80.
// On ROCm the mma is emulated with lane shuffles: correct, not fast.
#pragma once
#include "decode_params.h"
#include "decode_mma.cuh"

namespace fi {
namespace dec {

// Page lookup of one token: page id and slot (single decode: page 0, slot = token).
struct tok_loc {
  int32_t page, slot;
};

// QT: q/out dtype; KVT: cache dtype; D: head_dim; GM: rows of the group (8 or 16);
// PF: 1 loads the whole next step while this one computes (two register buffers),
// 0 loads the next step's K while this step's V is used (one buffer); ROPE: RoPE on
// q and k; SINGLE: one contiguous request, no plan tables; WARPS: warps per block.
template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS>
FI_DEVICE void decode(const fi_decode_params &p) {
  typedef typename mma_type<QT, KVT>::type MT;
  typedef w16<MT> W;
  typedef kv<KVT> KV;
  constexpr int THREADS = WARPS * 32;
  constexpr int NQ = D / 32;  // q/K chunks per lane and token
  constexpr int NV = D / 64;  // V chunks per lane and token
  constexpr int H8 = GM / 8;  // row halves: 1 (group <= 8) or 2
  constexpr int RW = KV::RW;
  // 16-token sub-steps a step loads at once: fp8 takes two, so a warp keeps as many
  // bytes in flight as with a 16-bit cache.
  constexpr int SUB = RW == 2 ? 2 : 1, STEP = 16 * SUB;
  static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");

  __shared__ float s_o[GM][D + 2];  // + 2: rows apart in the banks, dims kept in pairs
  __shared__ float s_m[WARPS][GM], s_d[WARPS][GM];
  __shared__ float s_fm[GM], s_fs[GM];
  __shared__ int s_last;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const int item = blockIdx.x, hkv = blockIdx.y, G = p.group;

  // ---- the work item ----
  int b = 0, lo, hi, chunk = 0, nchunks = 1, kv_len;
  int64_t page_base = 0;
  if (SINGLE) {
    lo = p.single_lo;
    hi = p.kv_len;
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

  // ---- q: the A fragments (rows g and g + 8 of the group), RoPE'd at kv_len - 1 ----
  uint32_t qf[H8][NQ][4];
#pragma unroll
  for (int h = 0; h < H8; h++) {
    const int r = 8 * h + g;
    if (r < G) {
      const QT *qr = static_cast<const QT *>(p.q) + (int64_t)b * p.q_stride[0] +
                     (int64_t)(hkv * G + r) * p.q_stride[1];
#pragma unroll
      for (int i = 0; i < NQ; i++) {
        const fi_vec<uint32_t, 4> x = *reinterpret_cast<const fi_vec<uint32_t, 4> *>(qr + 8 * (c + 4 * i));
#pragma unroll
        for (int w = 0; w < 4; w++) {
          if constexpr (same<QT, MT>::value) {
            qf[h][i][w] = x.v[w];
          } else {
            typedef w16<QT> WQ;
            qf[h][i][w] = W::pack(WQ::lo(x.v[w]), WQ::hi(x.v[w]));
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
        for (int w = 0; w < 4; w++) qf[h][i][w] = 0u;
    }
  }

  const KVT *kb = static_cast<const KVT *>(p.k) + (int64_t)hkv * p.kv_stride_head;
  const KVT *vb = static_cast<const KVT *>(p.v) + (int64_t)hkv * p.kv_stride_head;

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

  const int nst = hi > lo ? (hi - lo + STEP - 1) / STEP : 0;
  const int j16 = lane & (STEP - 1);

  // This lane's token of step k (token lo + 16k + lane % 16, clamped into the range:
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
  // Per sub-step u: K of tokens g and 8 + g, V of tokens 2c, 2c+1, 8+2c, 9+2c.
  auto load_k = [&](int64_t off, uint32_t (&kr)[SUB][2][NQ][RW]) {
#pragma unroll
    for (int u = 0; u < SUB; u++)
#pragma unroll
      for (int t = 0; t < 2; t++) {
        const KVT *row = kb + shfl64(off, 16 * u + 8 * t + g);
#pragma unroll
        for (int i = 0; i < NQ; i++) KV::load(row + 8 * (c + 4 * i), kr[u][t][i]);
      }
  };
  auto load_v = [&](int64_t off, uint32_t (&vr)[SUB][4][NV][RW]) {
#pragma unroll
    for (int u = 0; u < SUB; u++)
#pragma unroll
      for (int t = 0; t < 4; t++) {
        const KVT *row = vb + shfl64(off, 16 * u + 2 * c + (t & 1) + 8 * (t >> 1));
#pragma unroll
        for (int s = 0; s < NV; s++) KV::load(row + 8 * (g + 8 * s), vr[u][t][s]);
      }
  };

  // S = q K^T of sub-step u of step k, online softmax, P^T fragments in pb.
  auto qk_softmax = [&](int k, int u, const uint32_t (&kr)[2][NQ][RW], uint32_t (&pb)[H8][2]) {
    float sc[2][4];
#pragma unroll
    for (int t = 0; t < 2; t++) {
      uint32_t kw[NQ][4];
#pragma unroll
      for (int i = 0; i < NQ; i++) KV::widen(kr[t][i], kw[i]);
      if (ROPE) {
        const float pos = (float)(lo + STEP * k + 16 * u + 8 * t + g);
#pragma unroll
        for (int i = 0; i < NQ / 2; i++) rope_pair<MT>(kw[i], kw[i + NQ / 2], pos, p.rope_freq, c + 4 * i);
      }
#pragma unroll
      for (int e = 0; e < 4; e++) sc[t][e] = 0.0f;
#pragma unroll
      for (int i = 0; i < NQ; i++)
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++)
          mma<MT>(sc[t], qf[0][i][2 * h2], H8 > 1 ? qf[H8 - 1][i][2 * h2] : 0u, qf[0][i][2 * h2 + 1],
                  H8 > 1 ? qf[H8 - 1][i][2 * h2 + 1] : 0u, kw[i][2 * h2], kw[i][2 * h2 + 1]);
    }
    const int tok0 = lo + STEP * k + 16 * u + 2 * c;
    float alpha[H8];
#pragma unroll
    for (int h = 0; h < H8; h++) {
      float mx = neg_inf();
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float s = sc[t][2 * h + e];
          if (p.cap_log2 != 0.0f)
            s = p.cap_log2 * tanhf(s * p.cap_pre);
          else
            s *= p.scale_log2;
          if (tok0 + 8 * t + e >= hi) s = neg_inf();
          sc[t][2 * h + e] = s;
          mx = fmaxf(mx, s);
        }
      mx = fmaxf(mx, shfl_xor(mx, 1));
      mx = fmaxf(mx, shfl_xor(mx, 2));
      const float mn = fmaxf(m[h], mx);
      const float mu = mn == neg_inf() ? 0.0f : mn;
      alpha[h] = ex2(m[h] - mu);
      m[h] = mn;
      float ps = 0.0f;
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float pv = ex2(sc[t][2 * h + e] - mu);
          sc[t][2 * h + e] = pv;
          ps += pv;
        }
      dsum[h] = dsum[h] * alpha[h] + ps;
      pb[h][0] = W::pack(sc[0][2 * h], sc[0][2 * h + 1]);
      pb[h][1] = W::pack(sc[1][2 * h], sc[1][2 * h + 1]);
    }
    // O^T's columns are heads 2c and 2c + 1 (of each half): their rows' factors.
#pragma unroll
    for (int h = 0; h < H8; h++) {
      const float a0 = shfl(alpha[h], 8 * c), a1 = shfl(alpha[h], 8 * c + 4);
#pragma unroll
      for (int j = 0; j < D / 16; j++) {
        o[h][j][0] *= a0;
        o[h][j][1] *= a1;
        o[h][j][2] *= a0;
        o[h][j][3] *= a1;
      }
    }
  };
  auto pv = [&](const uint32_t (&vr)[4][NV][RW], const uint32_t (&pb)[H8][2]) {
#pragma unroll
    for (int s = 0; s < NV; s++) {
      uint32_t vw[4][4];
#pragma unroll
      for (int t = 0; t < 4; t++) KV::widen(vr[t][s], vw[t]);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const uint32_t a0 = prmt(vw[0][i], vw[1][i], 0x5410u), a1 = prmt(vw[0][i], vw[1][i], 0x7632u);
        const uint32_t a2 = prmt(vw[2][i], vw[3][i], 0x5410u), a3 = prmt(vw[2][i], vw[3][i], 0x7632u);
#pragma unroll
        for (int h = 0; h < H8; h++) mma<MT>(o[h][4 * s + i], a0, a1, a2, a3, pb[h][0], pb[h][1]);
      }
    }
  };

  // The K and V rows of step k into L2 ahead of their register loads, so that more
  // bytes are in flight than the registers hold: lanes 0-15 take K, 16-31 V (fp8
  // steps have a token per lane: each takes both).
  const int pfd = p.prefetch < 0 ? -p.prefetch : p.prefetch;  // < 0: line prefetches
  const bool pf_lines = p.prefetch < 0;
  auto prefetch = [&](int k) {
    if (k >= nst) return;
    const int64_t off = offset(locate(k));
    constexpr uint32_t ROW = D * sizeof(KVT);
    if (SUB == 1) {
      prefetch_l2((lane < 16 ? kb : vb) + off, ROW, pf_lines);
    } else {
      prefetch_l2(kb + off, ROW, pf_lines);
      prefetch_l2(vb + off, ROW, pf_lines);
    }
  };

  // Both halves of a step: S, softmax, then P V.
  auto compute = [&](int k, const uint32_t (&kr)[SUB][2][NQ][RW], const uint32_t (&vr)[SUB][4][NV][RW]) {
#pragma unroll
    for (int u = 0; u < SUB; u++) {
      uint32_t pb[H8][2];
      qk_softmax(k, u, kr[u], pb);
      pv(vr[u], pb);
    }
  };

  // ---- the main loop: this warp's steps warp, warp + WARPS, ... ----
  if (warp < nst) {
    const int k0 = warp;
    tok_loc next = locate(k0 + WARPS);
    if (PF) {
      uint32_t ka[SUB][2][NQ][RW], va[SUB][4][NV][RW], kb2[SUB][2][NQ][RW], vb2[SUB][4][NV][RW];
      {
        const int64_t off = offset(locate(k0));
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
      uint32_t kr[SUB][2][NQ][RW], vr[SUB][4][NV][RW];
      int64_t off = offset(locate(k0));
      load_k(off, kr);
      for (int i = 1; i < pfd; i++) prefetch(k0 + i * WARPS);
      for (int k = k0; k < nst; k += WARPS) {
        load_v(off, vr);
        const int64_t offn = offset(next);
        next = locate(k + 2 * WARPS);
        if (pfd > 0) prefetch(k + pfd * WARPS);
#pragma unroll
        for (int u = 0; u < SUB; u++) {
          uint32_t pb[H8][2];
          qk_softmax(k, u, kr[u], pb);
          // The next step's K once this step's last K is used.
          if (u == SUB - 1 && k + WARPS < nst) load_k(offn, kr);
          pv(vr[u], pb);
        }
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
        for (int s = 0; s < NV; s++)
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const int dim = 8 * (g + 8 * s) + 2 * i;
            const float *oj = o[h][4 * s + i];
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int r = 8 * h + 2 * c + e;
              if (r < G) {
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
    for (int u = tid; u < G * (D / 8); u += THREADS) {
      const int r = u / (D / 8), d8 = (u - r * (D / 8)) * 8;
      const float ds = s_fs[r], inv = ds > 0.0f ? p.v_scale / ds : 0.0f;
      fi_vec<QT, 8> y;
#pragma unroll
      for (int e = 0; e < 8; e++) y.v[e] = fi_from_float<QT>(s_o[r][d8 + e] * inv);
      QT *orow = static_cast<QT *>(p.out) + (int64_t)b * p.out_stride[0] + (int64_t)(head0 + r) * p.out_stride[1];
      *reinterpret_cast<fi_vec<QT, 8> *>(orow + d8) = y;
    }
    if (p.lse && tid < G) {
      const float ds = s_fs[tid];
      p.lse[(int64_t)b * p.lse_stride[0] + (int64_t)(head0 + tid) * p.lse_stride[1]] =
          ds > 0.0f ? (s_fm[tid] + log2f(ds)) * LN2 : neg_inf();
    }
    return;
  }

  // ---- a split request: this chunk's partial, then the last block of the (request,
  // KV head) merges all of them ----
  const int64_t hq = (int64_t)p.num_kv_heads * G;  // H_qo
  {
    float *po = p.partial_o + ((int64_t)item * hq + head0) * D;
    for (int u = tid; u < G * (D / 4); u += THREADS) {
      const int r = u / (D / 4), d4 = (u - r * (D / 4)) * 4;
      const float ds = s_fs[r], inv = ds > 0.0f ? p.v_scale / ds : 0.0f;
      fi_vec<float, 4> y;
#pragma unroll
      for (int e = 0; e < 4; e++) y.v[e] = s_o[r][d4 + e] * inv;
      *reinterpret_cast<fi_vec<float, 4> *>(po + (int64_t)r * D + d4) = y;
    }
    if (tid < G) {
      const float ds = s_fs[tid];
      p.partial_lse[(int64_t)item * hq + head0 + tid] = ds > 0.0f ? s_fm[tid] + log2f(ds) : neg_inf();
    }
  }
  __threadfence();
  __syncthreads();
  int32_t *counter = p.counters + (int64_t)b * p.num_kv_heads + hkv;
  if (tid == 0) s_last = atomicAdd(counter, 1) == nchunks - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  if (tid == 0) *counter = 0;  // ready for the next run
  const int first = item - chunk;
  // One pass over the chunks per (row, 8 dims) with a running maximum; when the block
  // has threads to spare, Q threads share a unit's chunks and combine through shared memory.
  const int U = G * (D / 8), Q = U < THREADS ? THREADS / U : 1;
  __shared__ float s_pm[THREADS], s_ps[THREADS], s_pa[THREADS][9];
  for (int u0 = 0; u0 < U; u0 += THREADS) {
    const int uq = u0 + (Q > 1 ? tid % U : tid), q = Q > 1 ? tid / U : 0;
    const bool active = uq < U && q < Q;
    const int r = uq / (D / 8), d8 = (uq - r * (D / 8)) * 8;
    float mx = neg_inf(), sw = 0.0f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    if (active) {
#pragma unroll 8
      for (int i = q; i < nchunks; i += Q) {
        const int64_t row = (int64_t)(first + i) * hq + head0 + r;
        const float l = ldcg(p.partial_lse + row);
        float x0[4], x1[4];
        ldcg4(p.partial_o + row * D + d8, x0);
        ldcg4(p.partial_o + row * D + d8 + 4, x1);
        const float mn = fmaxf(mx, l), mu = mn == neg_inf() ? 0.0f : mn;
        const float a = ex2(mx - mu), w = ex2(l - mu);
        sw = sw * a + w;
#pragma unroll
        for (int e = 0; e < 4; e++) {
          acc[e] = acc[e] * a + w * x0[e];
          acc[4 + e] = acc[4 + e] * a + w * x1[e];
        }
        mx = mn;
      }
    }
    if (Q > 1) {
      s_pm[tid] = mx;
      s_ps[tid] = sw;
#pragma unroll
      for (int e = 0; e < 8; e++) s_pa[tid][e] = acc[e];
      __syncthreads();
      if (tid < U) {
        float m2 = neg_inf();
        for (int j = 0; j < Q; j++) m2 = fmaxf(m2, s_pm[j * U + tid]);
        const float mu = m2 == neg_inf() ? 0.0f : m2;
        sw = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] = 0.0f;
        for (int j = 0; j < Q; j++) {
          const float a = ex2(s_pm[j * U + tid] - mu);
          sw += a * s_ps[j * U + tid];
#pragma unroll
          for (int e = 0; e < 8; e++) acc[e] += a * s_pa[j * U + tid][e];
        }
        mx = m2;
      }
    }
    if (uq < U && (Q == 1 || tid < U)) {
      const float inv = sw > 0.0f ? 1.0f / sw : 0.0f;
      fi_vec<QT, 8> y;
#pragma unroll
      for (int e = 0; e < 8; e++) y.v[e] = fi_from_float<QT>(acc[e] * inv);
      QT *orow = static_cast<QT *>(p.out) + (int64_t)b * p.out_stride[0] + (int64_t)(head0 + r) * p.out_stride[1];
      *reinterpret_cast<fi_vec<QT, 8> *>(orow + d8) = y;
      if (p.lse && d8 == 0)
        p.lse[(int64_t)b * p.lse_stride[0] + (int64_t)(head0 + r) * p.lse_stride[1]] =
            sw > 0.0f ? (mx + log2f(sw)) * LN2 : neg_inf();
    }
  }
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
    for (int u = 0; u < 4; u++) kv16<fi_half>::load(reinterpret_cast<const fi_half *>(v + i + u * step), r[u]);
#pragma unroll
    for (int u = 0; u < 4; u++) acc ^= r[u][0] ^ r[u][1] ^ r[u][2] ^ r[u][3];
  }
  for (; i < p.n; i += step) {
    uint32_t r[4];
    kv16<fi_half>::load(reinterpret_cast<const fi_half *>(v + i), r);
    acc ^= r[0] ^ r[1] ^ r[2] ^ r[3];
  }
  if (acc == p.never) p.sink[0] = acc;
}

}  // namespace dec
}  // namespace fi
