// decode_step.cuh: a warp's step over its KV tokens in the decode kernel (decode.cuh), as
// FlashInfer's decode.cuh composes compute_qk / update_local_state: compute_qk, S = q K^T of
// the step's tokens and the online softmax (the rows' max and sum, O rescaled, P^T as mma
// fragments); update_local_state, O^T += V^T P^T. The values reach them as decode_heads'
// own variables, by reference, in the order its lambdas captured them (those lambdas call
// them now): that keeps the kernel's machine code (tools/cubin_diff.py); decode.cuh says
// why q's load, the warps' merge and the output stay inline.
#pragma once
#include "decode_params.h"
#include "mma.cuh"

namespace fi {
namespace dec {

// The kernel's template parameters (decode_heads, decode.cuh) and the fragment tiling that
// follows from them. K: 16-byte loads of KC dims (8, or 16 of fp8), NQ of them per lane and
// token, each KW mma words once widened. V: loads of VN words (16 bytes, or 8 for fp8 at
// head_dim 64 so that the 8 lane rows still cover the dims) of VC dims, NV per lane and
// token, each feeding VW mma tiles. DE: the dims of a token the block reads (HP heads side
// by side); NQH, NVH: the K and V loads of one head. SUB: 16-token sub-steps a step loads at
// once: fp8 takes two (one with head pairs), so a warp keeps as many bytes in flight as
// with a 16-bit cache. NA: q's A tuples a lane uses per 8 tokens (decode_heads' s_q).
// (Enumerators, not static members: those would each leave a global in the binary.)
template <typename QT_, typename KVT_, int D_, int GM_, int PF_, int ROPE_, int SINGLE_, int WARPS_, int HP_>
struct shape {
  typedef QT_ QT;
  typedef KVT_ KVT;
  typedef typename mma_type<QT_, KVT_>::type MT;
  typedef w16<MT> W;
  typedef kv<KVT_> KV;
  enum : int { D = D_, GM = GM_, PF = PF_, ROPE = ROPE_, SINGLE = SINGLE_, WARPS = WARPS_, HP = HP_ };
  enum : int { THREADS = WARPS * 32, FP8 = KV::FP8, H8 = GM / 8 };  // H8: row halves, 1 (group <= 8) or 2
  enum : int { DE = D * HP, KC = FP8 ? 16 : 8, KW = KC / 2, NQ = DE / (4 * KC) };
  enum : int { VN = FP8 && D == 64 ? 2 : 4, VC = FP8 ? 4 * VN : 2 * VN, VW = VC / 2, NV = DE / (8 * VC) };
  enum : int { NQH = NQ / HP, NVH = NV / HP, SUB = FP8 && HP == 1 ? 2 : 1, STEP = 16 * SUB, NA = NQ * KW / 2 };
  static_assert(NQ >= 1 && NV >= 1 && NV * VW == DE / 16, "fragment tiling");
  static_assert(HP == 1 || (FP8 && D == 128 && GM == 8 && !ROPE && NQH * HP == NQ && NVH * HP == NV),
                "KV head pairs: fp8, head_dim 128, group <= 4, no RoPE");
  static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
};

// S = q K^T of every sub-step of step k (tokens lo + STEP k ..; kr: their K; s_q: q's
// A tuples), one online-softmax update for all of them (the rows' m and dsum; O
// rescaled), P^T fragments in pb. g, c: lane / 4, lane % 4; hi: the end of the block's
// tokens (the last step's are masked past it); cap_pre, scale_log2: p's, times the fp8
// widening's factor.
template <class S>
FI_DEVICE void compute_qk(const fi_vec<uint32_t, 4> (&s_q)[S::NA][32], const int &lane, const int &lo, const int &g,
                          const fi_decode_params &p, const int &c, const int &hi, const float &cap_pre,
                          const float &scale_log2, float (&m)[S::H8], float (&dsum)[S::H8], float (&o)[S::H8][S::D / 16][4],
                          int k, const uint32_t (&kr)[S::SUB][2][S::NQ][4], uint32_t (&pb)[S::SUB][S::H8][2]) {
  typedef typename S::MT MT;
  typedef typename S::W W;
  typedef typename S::KV KV;
  constexpr int D = S::D, ROPE = S::ROPE, HP = S::HP, FP8 = S::FP8, H8 = S::H8, KW = S::KW, NQ = S::NQ;
  constexpr int SUB = S::SUB, STEP = S::STEP;
  float sc[SUB][2][4];
#pragma unroll
  for (int u = 0; u < SUB; u++)
#pragma unroll
    for (int t = 0; t < 2; t++) {
      if constexpr (HP > 1) {
        // Head pairs: each chunk widened just before its mmas (all at once would hold
        // twice the widened words of one head).
#pragma unroll
        for (int e = 0; e < 4; e++) sc[u][t][e] = 0.0f;
#pragma unroll
        for (int i = 0; i < NQ; i++) {
          uint32_t kw[KW];
#pragma unroll
          for (int j = 0; j < 4; j++) KV::cvt2(kr[u][t][i][j], kw[2 * j], kw[2 * j + 1]);
          // The tuple's two words from shared memory at each use: held in registers
          // across the loop (as the compiler does with one head's) they would spill.
#pragma unroll
          for (int h2 = 0; h2 < KW / 2; h2++) {
            uint32_t a0, a2;
            lds2_volatile(&s_q[i * (KW / 2) + h2][lane], a0, a2);
            mma<MT>(sc[u][t], a0, 0u, a2, 0u, kw[2 * h2], kw[2 * h2 + 1]);
          }
        }
        continue;
      }
      uint32_t kw[NQ][KW];
#pragma unroll
      for (int i = 0; i < NQ; i++) {
        if constexpr (FP8) {
#pragma unroll
          for (int j = 0; j < 4; j++) KV::cvt2(kr[u][t][i][j], kw[i][2 * j], kw[i][2 * j + 1]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; j++) kw[i][j] = kr[u][t][i][j];
        }
      }
      if (ROPE) {
        const float pos = (float)(lo + STEP * k + 16 * u + 8 * t + g);
#pragma unroll
        for (int i = 0; i < NQ / 2; i++) rope_pair<MT>(kw[i], kw[i + NQ / 2], pos, p.rope_freq, c + 4 * i);
      }
#pragma unroll
      for (int e = 0; e < 4; e++) sc[u][t][e] = 0.0f;
#pragma unroll
      for (int i = 0; i < NQ; i++)
#pragma unroll
        for (int h2 = 0; h2 < KW / 2; h2++) {
          const fi_vec<uint32_t, 4> a = s_q[i * (KW / 2) + h2][lane];
          mma<MT>(sc[u][t], a.v[0], a.v[1], a.v[2], a.v[3], kw[i][2 * h2], kw[i][2 * h2 + 1]);
        }
    }
  // Only a step that reaches past hi has tokens to mask.
  const int tok0 = lo + STEP * k + 2 * c;
  const bool tail = lo + STEP * (k + 1) > hi;
  float alpha[H8];
#pragma unroll
  for (int h = 0; h < H8; h++) {
    float mx = neg_inf();
#pragma unroll
    for (int u = 0; u < SUB; u++)
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float s = sc[u][t][2 * h + e];
          if (p.cap_log2 != 0.0f)
            s = p.cap_log2 * tanhf(s * cap_pre);
          else
            s *= scale_log2;
          if (tail && tok0 + 16 * u + 8 * t + e >= hi) s = neg_inf();
          sc[u][t][2 * h + e] = s;
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
    for (int u = 0; u < SUB; u++)
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float pv = ex2(sc[u][t][2 * h + e] - mu);
          sc[u][t][2 * h + e] = pv;
          ps += pv;
        }
    dsum[h] = dsum[h] * alpha[h] + ps;
#pragma unroll
    for (int u = 0; u < SUB; u++) {
      pb[u][h][0] = W::pack(sc[u][0][2 * h], sc[u][0][2 * h + 1]);
      pb[u][h][1] = W::pack(sc[u][1][2 * h], sc[u][1][2 * h + 1]);
    }
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
}

// O^T += V^T P^T of one sub-step. Tile VW s + i holds dims (rows) VC (g + 8 s) + 2 i
// and + 1. A 16-bit cache pairs the two tokens of a column with one prmt per word;
// fp8 pairs the raw bytes first (dims 4j, 4j+1 and 4j+2, 4j+3 of both tokens) and
// widens the pairs. Head pairs: V chunk s is head s / NVH's, into tile VW (s % NVH) + i,
// with P^T's columns (this lane's: row 8 h + g) of the other head's rows zeroed (rhead[h]:
// the head of row 8 h + g).
template <class S>
FI_DEVICE void update_local_state(const int (&rhead)[S::H8], float (&o)[S::H8][S::D / 16][4],
                                  const uint32_t (&vr)[4][S::NV][S::VN], const uint32_t (&pb_all)[S::H8][2]) {
  typedef typename S::MT MT;
  typedef typename S::KV KV;
  constexpr int HP = S::HP, FP8 = S::FP8, H8 = S::H8, VN = S::VN, VW = S::VW, NV = S::NV, NVH = S::NVH;
#pragma unroll
  for (int s = 0; s < NV; s++) {
    uint32_t pb[H8][2];
#pragma unroll
    for (int h = 0; h < H8; h++)
#pragma unroll
      for (int e = 0; e < 2; e++) pb[h][e] = HP == 1 || rhead[h] == s / NVH ? pb_all[h][e] : 0u;
    if constexpr (FP8) {
#pragma unroll
      for (int j = 0; j < VN; j++) {
        uint32_t a[2][4];  // tiles 2j and 2j + 1
        KV::cvt2(prmt(vr[0][s][j], vr[1][s][j], 0x5140u), a[0][0], a[0][1]);
        KV::cvt2(prmt(vr[0][s][j], vr[1][s][j], 0x7362u), a[1][0], a[1][1]);
        KV::cvt2(prmt(vr[2][s][j], vr[3][s][j], 0x5140u), a[0][2], a[0][3]);
        KV::cvt2(prmt(vr[2][s][j], vr[3][s][j], 0x7362u), a[1][2], a[1][3]);
#pragma unroll
        for (int x = 0; x < 2; x++)
#pragma unroll
          for (int h = 0; h < H8; h++)
            mma<MT>(o[h][VW * (s % NVH) + 2 * j + x], a[x][0], a[x][1], a[x][2], a[x][3], pb[h][0], pb[h][1]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < VN; i++) {
        const uint32_t a0 = prmt(vr[0][s][i], vr[1][s][i], 0x5410u), a1 = prmt(vr[0][s][i], vr[1][s][i], 0x7632u);
        const uint32_t a2 = prmt(vr[2][s][i], vr[3][s][i], 0x5410u), a3 = prmt(vr[2][s][i], vr[3][s][i], 0x7632u);
#pragma unroll
        for (int h = 0; h < H8; h++) mma<MT>(o[h][VW * (s % NVH) + i], a0, a1, a2, a3, pb[h][0], pb[h][1]);
      }
    }
  }
}

}  // namespace dec
}  // namespace fi
