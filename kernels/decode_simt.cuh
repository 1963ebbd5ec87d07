// decode_simt.cuh: batch decode on CUDA cores for groups of 1, 2 or 4 query heads a KV head,
// over a 16-bit cache: a lane loads 16 bytes of a K or V row, so each load instruction reads
// whole rows (all four sectors of a 128-byte line an L2 request, where decode.cuh's mma
// fragments take 64 bytes of 8 rows: 2.67), and the dot products reduce over a row's
// lanes with shuffles. At a group of 1 the tensor cores would compute 16 rows for one.
//
// A warp's step is U load instructions of NR rows each (NR = 32 / (head_dim / 8): 4, 2 or
// 1 tokens an instruction); lane (r, part) = (lane / LPR, lane % LPR) holds dims 8 part ..
// 8 part + 7 of token u NR + r of the step for every u. Each row group r keeps its own
// online softmax over its tokens (replicated over its lanes); the groups, then the warps,
// are merged at the end into decode.cuh's shared layout, and the block ends as decode.cuh's
// kernels do (whole request: out and lse; split: partial, counter, merge by the last block).
// Two register buffers: the next step's K and V load while this one computes, and the page
// lookups run a step further ahead.
#pragma once
#include "decode.cuh"

namespace fi {
namespace dec {

template <typename QT, typename KVT, int D, int GS, int WARPS>
FI_DEVICE void decode_simt(const fi_decode_params &p) {
  static_assert(!kv<KVT>::FP8 && same<QT, KVT>::value, "a 16-bit cache of q's dtype");
  static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
  static_assert(GS == 1 || GS == 2 || GS == 4, "groups of 1, 2 or 4");
  typedef w16<QT> W;
  constexpr int THREADS = WARPS * 32;
  constexpr int E = 8;                    // dims a lane holds: one 16-byte load
  constexpr int LPR = D / E, NR = 32 / LPR;  // lanes a row, rows a load instruction
  constexpr int U = GS <= 2 ? 4 : 2;      // load instructions (tokens a lane) a step
  constexpr int STEP = NR * U;            // tokens a warp step

  decode_enter<KVT, D, 0, WARPS, true>(p, blockIdx.y);

  __shared__ float s_o[GS][D + 2];
  __shared__ float s_m[WARPS][GS], s_d[WARPS][GS];
  __shared__ float s_fm[GS], s_fs[GS], s_fa[GS];
  __shared__ int s_last;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, r = lane / LPR, part = lane % LPR;
  const int item = blockIdx.x, hkv = blockIdx.y, G = p.group;
  const float scale_log2 = p.scale_log2, cap_pre = p.cap_pre, v_scale = p.v_scale;

  // ---- the work item (as decode.cuh) ----
  const int n = p.num_items >= 0 ? p.num_items : p.header[0];
  if (item >= n) return;  // CUDA-graph mode: a grid for the largest plan
  const int32_t *ip = p.items + FI_DECODE_ITEM_WORDS * item;
  const fi_vec<int32_t, 4> it = *reinterpret_cast<const fi_vec<int32_t, 4> *>(ip);
  const fi_vec<int32_t, 4> it2 = *reinterpret_cast<const fi_vec<int32_t, 4> *>(ip + 4);
  const int b = it.v[0], lo = it.v[1], hi = it.v[2], chunk = it.v[3] & 0xffff, nchunks = it.v[3] >> 16;
  const int64_t page_base = it2.v[0];
  const int nst = hi > lo ? (hi - lo + STEP - 1) / STEP : 0;

  // ---- q: this lane's 8 dims of each head of the group, in fp32 (zeros past the group) ----
  float q[GS][E];
#pragma unroll
  for (int g = 0; g < GS; g++) {
    if (g < G) {
      const QT *qr = static_cast<const QT *>(p.q) + (int64_t)b * p.q_stride[0] + (int64_t)(hkv * G + g) * p.q_stride[1];
      const fi_vec<uint32_t, 4> x = *reinterpret_cast<const fi_vec<uint32_t, 4> *>(qr + E * part);
#pragma unroll
      for (int w = 0; w < 4; w++) {
        q[g][2 * w] = W::lo(x.v[w]);
        q[g][2 * w + 1] = W::hi(x.v[w]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < E; e++) q[g][e] = 0.0f;
    }
  }

  const KVT *kb = static_cast<const KVT *>(p.k) + (int64_t)FI_DECODE_KV_HEAD(p, hkv) * p.kv_stride_head;
  const KVT *vb = static_cast<const KVT *>(p.v) + (int64_t)FI_DECODE_KV_HEAD(p, hkv) * p.kv_stride_head;
  // Step k's token lo + STEP k + lane % STEP (clamped into the item: the loads stay in
  // bounds, the softmax masks what is past hi) as an element offset into the cache: one
  // page lookup a lane a step, a step ahead; each lane then takes its U tokens' offsets
  // from the lanes that looked them up (as decode.cuh does).
  auto locate = [&](int k) -> int64_t {
    int tok = lo + STEP * k + (lane & (STEP - 1));
    if (tok > hi - 1) tok = hi - 1;
    const int pl = tok / p.page_size;
    const int page = k < nst ? p.indices[page_base + pl] : 0;
    return (int64_t)page * p.kv_stride_page + (int64_t)(tok - pl * p.page_size) * p.kv_stride_slot;
  };
  auto offsets = [&](int64_t mine, int64_t (&off)[U]) {
#pragma unroll
    for (int u = 0; u < U; u++) off[u] = shfl64(mine, NR * u + r) + E * part;
  };
  constexpr bool KV_HINT = WARPS != 2;  // as decode.cuh's 16-bit loads
  const uint64_t kv_pol = KV_HINT ? l2_kv_policy(p.kv_evict) : 0;

  float o[GS][E], m[GS], dsum[GS];
#pragma unroll
  for (int g = 0; g < GS; g++) {
    m[g] = neg_inf();
    dsum[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) o[g][e] = 0.0f;
  }

  auto load = [&](const int64_t (&off)[U], uint32_t (&kr)[U][4], uint32_t (&vr)[U][4]) {
#pragma unroll
    for (int u = 0; u < U; u++) ldg_kv<KV_HINT>(kb + off[u], kr[u], kv_pol);
#pragma unroll
    for (int u = 0; u < U; u++) ldg_kv<KV_HINT>(vb + off[u], vr[u], kv_pol);
  };
  auto step = [&](int k, const uint32_t (&kr)[U][4], const uint32_t (&vr)[U][4]) {
    float s[GS][U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      float kf[E];
#pragma unroll
      for (int w = 0; w < 4; w++) {
        kf[2 * w] = W::lo(kr[u][w]);
        kf[2 * w + 1] = W::hi(kr[u][w]);
      }
#pragma unroll
      for (int g = 0; g < GS; g++) {
        float a = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) a = fmaf(q[g][e], kf[e], a);
        s[g][u] = a;
      }
    }
    const int tok0 = lo + STEP * k + r;
    const bool tail = lo + STEP * (k + 1) > hi;
    if constexpr (GS == 1) {
      // One head: the U dot products reduce-scattered over the row's lanes (halves kept
      // by lane bit LPR/2, then LPR/4, ...: 2 log2(U)... shuffles, not U log2(LPR)), the
      // last full sums by a butterfly; lane part then holds token u = part / (LPR / U)'s
      // score, the softmax takes one exp a lane, and P's U values return by shuffles.
      constexpr int SH = LPR / U;  // lanes that end up holding one token's sum
      float c[U];
#pragma unroll
      for (int u = 0; u < U; u++) c[u] = s[0][u];
#pragma unroll
      for (int h = U / 2, x = LPR / 2; h >= 1; h /= 2, x /= 2) {
        const bool up = (part & x) != 0;
#pragma unroll
        for (int i = 0; i < h; i++) {
          const float keep = up ? c[h + i] : c[i], give = up ? c[i] : c[h + i];
          c[i] = keep + shfl_xor(give, x);
        }
      }
#pragma unroll
      for (int x = SH / 2; x >= 1; x /= 2) c[0] += shfl_xor(c[0], x);
      const int u_mine = part / SH;
      float x = c[0];
      if (p.cap_log2 != 0.0f)
        x = p.cap_log2 * tanhf(x * cap_pre);
      else
        x *= scale_log2;
      if (tail && tok0 + NR * u_mine >= hi) x = neg_inf();
      float mx = x;
#pragma unroll
      for (int y = SH; y < LPR; y <<= 1) mx = fmaxf(mx, shfl_xor(mx, y));
      const float mn = fmaxf(m[0], mx), mu = mn == neg_inf() ? 0.0f : mn, alpha = ex2(m[0] - mu);
      m[0] = mn;
      float pv = ex2(x - mu), ps = pv;
#pragma unroll
      for (int y = SH; y < LPR; y <<= 1) ps += shfl_xor(ps, y);
      dsum[0] = dsum[0] * alpha + ps;
#pragma unroll
      for (int e = 0; e < E; e++) o[0][e] *= alpha;
#pragma unroll
      for (int u = 0; u < U; u++) s[0][u] = shfl(pv, LPR * r + SH * u);
    } else {
      // The row's dot products: a butterfly over its LPR lanes leaves the sum in each.
#pragma unroll
      for (int x = 1; x < LPR; x <<= 1)
#pragma unroll
        for (int g = 0; g < GS; g++)
#pragma unroll
          for (int u = 0; u < U; u++) s[g][u] += shfl_xor(s[g][u], x);
#pragma unroll
      for (int g = 0; g < GS; g++) {
        float mx = neg_inf();
#pragma unroll
        for (int u = 0; u < U; u++) {
          float x = s[g][u];
          if (p.cap_log2 != 0.0f)
            x = p.cap_log2 * tanhf(x * cap_pre);
          else
            x *= scale_log2;
          if (tail && tok0 + NR * u >= hi) x = neg_inf();
          s[g][u] = x;
          mx = fmaxf(mx, x);
        }
        const float mn = fmaxf(m[g], mx), mu = mn == neg_inf() ? 0.0f : mn, alpha = ex2(m[g] - mu);
        m[g] = mn;
        float ps = 0.0f;
#pragma unroll
        for (int u = 0; u < U; u++) {
          s[g][u] = ex2(s[g][u] - mu);
          ps += s[g][u];
        }
        dsum[g] = dsum[g] * alpha + ps;
#pragma unroll
        for (int e = 0; e < E; e++) o[g][e] *= alpha;
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      float vf[E];
#pragma unroll
      for (int w = 0; w < 4; w++) {
        vf[2 * w] = W::lo(vr[u][w]);
        vf[2 * w + 1] = W::hi(vr[u][w]);
      }
#pragma unroll
      for (int g = 0; g < GS; g++)
#pragma unroll
        for (int e = 0; e < E; e++) o[g][e] = fmaf(s[g][u], vf[e], o[g][e]);
    }
  };

  // ---- the main loop: this warp's steps warp, warp + WARPS, ... ----
  if (warp < nst) {
    uint32_t ka[U][4], va[U][4], kc[U][4], vc[U][4];
    int64_t off[U];
    offsets(locate(warp), off);
    load(off, ka, va);
    int64_t next = locate(warp + WARPS);
    int k = warp;
    for (;;) {
      if (k + WARPS < nst) {
        offsets(next, off);
        load(off, kc, vc);
        next = locate(k + 2 * WARPS);
      }
      step(k, ka, va);
      k += WARPS;
      if (k >= nst) break;
      if (k + WARPS < nst) {
        offsets(next, off);
        load(off, ka, va);
        next = locate(k + 2 * WARPS);
      }
      step(k, kc, vc);
      k += WARPS;
      if (k >= nst) break;
    }
  }

  // ---- the warp's row groups into one state (lanes of a part alike), then the warps ----
#pragma unroll
  for (int x = LPR; x < 32; x <<= 1)
#pragma unroll
    for (int g = 0; g < GS; g++) {
      const float m2 = shfl_xor(m[g], x), mn = fmaxf(m[g], m2), mu = mn == neg_inf() ? 0.0f : mn;
      const float a1 = ex2(m[g] - mu), a2 = ex2(m2 - mu);
      dsum[g] = dsum[g] * a1 + shfl_xor(dsum[g], x) * a2;
#pragma unroll
      for (int e = 0; e < E; e++) o[g][e] = o[g][e] * a1 + shfl_xor(o[g][e], x) * a2;
      m[g] = mn;
    }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < GS; g++) {
      s_m[warp][g] = m[g];
      s_d[warp][g] = dsum[g];
    }
  }
  __syncthreads();
  if (tid < GS) {
    float mx = neg_inf();
    for (int w = 0; w < WARPS; w++) mx = fmaxf(mx, s_m[w][tid]);
    float ds = 0.0f;
    if (mx != neg_inf())
      for (int w = 0; w < WARPS; w++) ds += s_d[w][tid] * ex2(s_m[w][tid] - mx);
    s_fm[tid] = mx;
    s_fs[tid] = ds;
  }
  float wgt[GS];
#pragma unroll
  for (int g = 0; g < GS; g++) {
    float mx = neg_inf();
    for (int w = 0; w < WARPS; w++) mx = fmaxf(mx, s_m[w][g]);
    wgt[g] = mx == neg_inf() ? 0.0f : ex2(m[g] - mx);
  }
  for (int w = 0; w < WARPS; w++) {
    if (warp == w && r == 0) {
#pragma unroll
      for (int g = 0; g < GS; g++)
        if (g < G) {
#pragma unroll
          for (int e = 0; e < E; e++) {
            float *dst = &s_o[g][E * part + e];
            const float x = o[g][e] * wgt[g];
            *dst = w ? *dst + x : x;
          }
        }
    }
    __syncthreads();
  }

  const float LN2 = 0.6931471805599453f;
  const int head0 = hkv * G, GE = G;
  if (nchunks <= 1) {
    if (p.sinks) sinks_fold_rows(p.sinks + head0, GE, s_fm, s_fs, s_fa);
    for (int u = tid; u < GE * (D / 8); u += THREADS) {
      const int rr = u / (D / 8), d8 = (u - rr * (D / 8)) * 8;
      const float ds = s_fs[rr], inv = ds > 0.0f ? (p.sinks ? v_scale * s_fa[rr] : v_scale) / ds : 0.0f;
      fi_vec<QT, 8> y;
#pragma unroll
      for (int e = 0; e < 8; e++) y.v[e] = fi_from_float<QT>(s_o[rr][d8 + e] * inv);
      QT *orow = static_cast<QT *>(p.out) + (int64_t)b * p.out_stride[0] + (int64_t)(head0 + rr) * p.out_stride[1];
      *reinterpret_cast<fi_vec<QT, 8> *>(orow + d8) = y;
    }
    if (p.lse && tid < GE) {
      const float ds = s_fs[tid];
      p.lse[(int64_t)b * p.lse_stride[0] + (int64_t)(head0 + tid) * p.lse_stride[1]] =
          ds > 0.0f ? (s_fm[tid] + log2f(ds)) * (p.lse_log2 ? 1.0f : LN2) : neg_inf();
    }
    return;
  }

  // ---- a split request: the partial, then the merge by the last block (decode.cuh's
  // protocol and layout, and its split_merge) ----
  const int64_t hq = (int64_t)p.num_kv_heads * G;
  {
    QT *po = static_cast<QT *>(p.partial_o) + ((int64_t)item * hq + head0) * D;
    for (int u = tid; u < GE * (D / 8); u += THREADS) {
      const int rr = u / (D / 8), d8 = (u - rr * (D / 8)) * 8;
      const float ds = s_fs[rr], inv = ds > 0.0f ? v_scale / ds : 0.0f;
      fi_vec<QT, 8> y;
#pragma unroll
      for (int e = 0; e < 8; e++) y.v[e] = fi_from_float<QT>(s_o[rr][d8 + e] * inv);
      *reinterpret_cast<fi_vec<QT, 8> *>(po + (int64_t)rr * D + d8) = y;
    }
    if (tid < GE) {
      const float ds = s_fs[tid];
      p.partial_lse[(int64_t)item * hq + head0 + tid] = ds > 0.0f ? s_fm[tid] + log2f(ds) : neg_inf();
    }
  }
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

}  // namespace dec
}  // namespace fi
