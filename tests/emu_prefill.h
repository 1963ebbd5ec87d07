// emu_prefill.h: what the kernel-emulator tests of attention share (test_prefill_emu.cc,
// test_decode_emu.cc): the kernels' portable source (prefill.cuh, decode.cuh,
// decode_simt.cuh) under tests/emu.h, the cases' data and float64 reference (check), the
// runners of single and batch prefill through the real planner, prefill against decode at
// L_q = 1, and batch decode through its planner. Each test's main picks its cases; the
// two binaries compile and run beside each other (make test's lanes).
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <type_traits>
#include <vector>

#include "emu.h"

#include "fi_port.cuh"
// The kernel's dynamic shared memory: one array for every block (blocks run one at a time).
#define FI_PF_EMU_SMEM 1
alignas(128) static unsigned char fi_pf_smem[1 << 17];
#include "prefill.cuh"
#include "decode.cuh"
#include "decode_simt.cuh"

extern "C" {
#include "rt_decode.h"
#include "rt_prefill.h"
}

// ---- host side ----
#include "emu_host.h"

struct prob {
  int bf, D, hq, hkv, causal, window, rope, ps, paged;
  double cap;
  std::vector<int> lq, lkv;
  int dv;  // V's and out's head_dim where it differs from D (0: D; contiguous KV only)
  int DV() const { return dv ? dv : D; }
};

struct data {
  std::vector<uint16_t> q, k, v, out;  // q/out [nq][hq][D]; k/v paged [pages][ps][hkv][D] or [nkv][hkv][D]
  std::vector<double> qd, kd, vd;      // logical, request-contiguous
  std::vector<int32_t> qo, kvp, kstart, last, indices;
  std::vector<float> lse;
  int64_t nq, nkv;
};

// Set: the kernels write lse in base 2 (lse_log2, FlashInfer's convention), and check()
// expects log2 of the denominator.
static int g_lse2;

static void rope_ref(double *x, int D, double pos) {
  for (int i = 0; i < D / 2; i++) {
    const float f = (float)(1.0 / pow(1e4, 2.0 * i / D));
    const double a = pos * (double)f, c = cos(a), s = sin(a), x1 = x[i], x2 = x[i + D / 2];
    x[i] = x1 * c - x2 * s;
    x[i + D / 2] = x2 * c + x1 * s;
  }
}

static int fails = 0;
// Attention sinks of the case being checked (one logit a query head; empty: none).
static std::vector<float> g_sinks;
// A custom mask of the case being checked (empty: none): packed bits, request b's
// [L_q][L_kv] segment from byte g_mask_off[b], little-endian within a byte.
static std::vector<uint8_t> g_mask;
static std::vector<int32_t> g_mask_off;
static bool mask_bit(int b, int64_t t, int64_t lkv, int64_t j) {
  if (g_mask.empty()) return true;
  const int64_t bit = 8 * (int64_t)g_mask_off[b] + t * lkv + j;
  return (g_mask[bit >> 3] >> (bit & 7)) & 1;
}

static void check(const prob &P, const data &d, const char *what) {
  const int D = P.D, DV = P.DV(), H = P.hkv, G = P.hq / P.hkv;
  const double sm = 1.0 / sqrt((double)D);
  double num = 0, den = 0, lmax = 0;
  long nan = 0, infbad = 0;
  for (size_t b = 0; b < P.lq.size(); b++) {
    const int lq = P.lq[b], lkv = P.lkv[b];
    std::vector<double> kr(d.kd.begin() + (int64_t)d.kstart[b] * H * D, d.kd.begin() + (int64_t)d.kstart[b + 1] * H * D);
    if (P.rope)
      for (int j = 0; j < lkv; j++)
        for (int h = 0; h < H; h++) rope_ref(&kr[((int64_t)j * H + h) * D], D, j);
    std::vector<double> s(lkv + 1), qr(D);
    for (int t = 0; t < lq; t++) {
      const int64_t pos = (int64_t)t + lkv - lq;
      int64_t hi = P.causal ? (pos + 1 < lkv ? pos + 1 : lkv) : lkv;
      const int64_t lo = P.window >= 0 && pos - P.window > 0 ? pos - P.window : 0;
      if (hi < lo) hi = lo;
      for (int hh = 0; hh < P.hq; hh++) {
        const int64_t row = ((int64_t)d.qo[b] + t) * P.hq + hh;
        for (int i = 0; i < D; i++) qr[i] = d.qd[row * D + i];
        if (P.rope) rope_ref(qr.data(), D, (double)pos);
        const int k = hh / G;
        double m = -INFINITY;
        for (int64_t j = lo; j < hi; j++) {
          double x = 0;
          for (int i = 0; i < D; i++) x += qr[i] * kr[(j * H + k) * D + i];
          x *= sm;
          if (P.cap > 0) x = P.cap * tanh(x / P.cap);
          if (!mask_bit((int)b, t, lkv, j)) x = -INFINITY;
          s[j] = x;
          if (x > m) m = x;
        }
        // A sink joins the denominator with no value (and the max, for the exponentials).
        const double sk = g_sinks.empty() ? -INFINITY : (double)g_sinks[hh];
        if (sk > m) m = sk;
        double dn = sk > -INFINITY ? exp(sk - m) : 0.0;
        const bool any = m > -INFINITY;  // (every key masked, no sink: out 0, lse -inf)
        for (int64_t j = lo; j < hi && any; j++) dn += exp(s[j] - m);
        for (int i = 0; i < DV; i++) {
          double a = 0;
          for (int64_t j = lo; j < hi && any; j++) a += exp(s[j] - m) * d.vd[(((int64_t)d.kstart[b] + j) * H + k) * DV + i];
          const double ref = dn > 0 ? a / dn : 0.0, got = from_bits(d.out[row * DV + i], P.bf);
          if (got != got) {
            nan++;
            continue;
          }
          num += (got - ref) * (got - ref);
          den += ref * ref;
        }
        const double rl = dn > 0 ? (m + log(dn)) / (g_lse2 ? M_LN2 : 1.0) : -INFINITY, gl = d.lse[row];
        if (isinf(rl) || isinf(gl) || gl != gl)
          infbad += !(isinf(rl) && isinf(gl) && rl < 0 && gl < 0);
        else if (fabs(gl - rl) > lmax)
          lmax = fabs(gl - rl);
      }
    }
  }
  const double err = den > 0 ? sqrt(num / den) : sqrt(num), tol = (P.bf ? 1.5e-2 : 2e-3) * (P.rope ? 2 : 1);
  const bool ok = err < tol && nan == 0 && infbad == 0 && lmax < 1e-2;
  fprintf(stderr, "%s %-16s %s D=%d %d/%d causal=%d win=%d rope=%d cap=%g ps=%d B=%zu: out err %.3g (tol %.1g) lse %.3g nan %ld inf %ld\n",
          ok ? "ok  " : "FAIL", what, P.bf ? "bf16" : "f16", D, P.hq, P.hkv, P.causal, P.window, P.rope, P.cap, P.ps,
          P.lq.size(), err, tol, lmax, nan, infbad);
  fails += !ok;
}

static void build(const prob &P, data &d) {
  const int B = (int)P.lq.size(), D = P.D, H = P.hkv, ps = P.paged ? P.ps : 1;
  d.qo.assign(B + 1, 0), d.kvp.assign(B + 1, 0), d.kstart.assign(B + 1, 0), d.last.assign(B + 1, 0);
  for (int b = 0; b < B; b++) {
    d.qo[b + 1] = d.qo[b] + P.lq[b];
    d.kstart[b + 1] = d.kstart[b] + P.lkv[b];
    const int np = (P.lkv[b] + ps - 1) / ps;
    d.kvp[b + 1] = P.paged ? d.kvp[b] + np : d.kstart[b + 1];
    d.last[b] = np ? P.lkv[b] - (np - 1) * ps : 0;
  }
  d.nq = d.qo[B], d.nkv = d.kstart[B];
  d.q.resize(d.nq * P.hq * D + 8), d.qd.resize(d.nq * P.hq * D + 8);
  for (int64_t i = 0; i < d.nq * P.hq * D; i++) {
    d.q[i] = to_bits((float)nrand(), P.bf);
    d.qd[i] = from_bits(d.q[i], P.bf);
  }
  const int DV = P.DV();
  d.kd.resize(d.nkv * H * D + 8), d.vd.resize(d.nkv * H * DV + 8);
  for (int64_t i = 0; i < d.nkv * H * D; i++) d.kd[i] = from_bits(to_bits((float)nrand(), P.bf), P.bf);
  for (int64_t i = 0; i < d.nkv * H * DV; i++) d.vd[i] = from_bits(to_bits((float)nrand(), P.bf), P.bf);
  if (!P.paged) {
    d.k.resize(d.nkv * H * D + 8), d.v.resize(d.nkv * H * DV + 8);
    for (int64_t i = 0; i < d.nkv * H * D; i++) d.k[i] = to_bits((float)d.kd[i], P.bf);
    for (int64_t i = 0; i < d.nkv * H * DV; i++) d.v[i] = to_bits((float)d.vd[i], P.bf);
  } else {
    const int64_t used = d.kvp[B], pages = used + 5;
    std::vector<int32_t> perm(pages);
    for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
    for (int64_t i = pages - 1; i > 0; i--) std::swap(perm[i], perm[(int64_t)(urand() * (i + 1)) % (i + 1)]);
    d.indices.assign(perm.begin(), perm.begin() + used);
    d.indices.push_back(0);
    const int64_t pe = (int64_t)ps * H * D;
    d.k.resize(pages * pe), d.v.resize(pages * pe);
    for (auto &x : d.k) x = to_bits((float)nrand(), P.bf);
    for (auto &x : d.v) x = to_bits((float)nrand(), P.bf);
    for (int b = 0; b < B; b++)
      for (int t = 0; t < P.lkv[b]; t++)
        for (int h = 0; h < H; h++)
          for (int i = 0; i < D; i++) {
            const int64_t li = (((int64_t)d.kstart[b] + t) * H + h) * D + i;
            const int64_t di = (int64_t)d.indices[d.kvp[b] + t / ps] * pe + ((int64_t)(t % ps) * H + h) * D + i;
            d.k[di] = to_bits((float)d.kd[li], P.bf);
            d.v[di] = to_bits((float)d.vd[li], P.bf);
          }
  }
  d.out.assign(d.nq * P.hq * DV + 8, 0xffff);  // poison: NaN
  d.lse.assign(d.nq * P.hq + 8, NAN);
}

static void fill_params(const prob &P, fi_prefill_kparams &k) {
  memset(&k, 0, sizeof k);
  k.lse_log2 = g_lse2;
  const double LOG2E = 1.4426950408889634, sm = 1.0 / sqrt((double)P.D);
  k.scale_log2 = (float)(sm * LOG2E);
  if (P.cap > 0) {
    k.cap_pre = (float)(sm / P.cap);
    k.cap_log2 = (float)(P.cap * LOG2E);
  }
  k.v_scale = 1.0f;
  for (int i = 0; i < P.D / 2; i++) k.rope_freq[i] = (float)(1.0 / pow(1e4, 2.0 * i / P.D));
  k.causal = P.causal;
  k.window_left = P.window;
  k.group = P.hq / P.hkv;
  k.num_kv_heads = P.hkv;
}

// Sinks for hq query heads into g_sinks: N(0, 2) logits, the first head's far above the
// keys' (the sink takes nearly all the weight), the last one's -inf (no sink).
static const float *make_sinks(int hq) {
  g_sinks.clear();
  for (int h = 0; h < hq; h++) g_sinks.push_back((float)(2.0 * nrand()));
  g_sinks[0] = 12.0f;
  if (hq > 1) g_sinks[hq - 1] = -INFINITY;
  return g_sinks.data();
}

// A random custom mask for P's requests into g_mask / g_mask_off (each request's segment
// padded to whole bytes, as FlashInfer's segment_packbits lays them out): about 70% of the
// pairs attended, and every 7th query token of a request with nothing attended.
static const uint8_t *make_mask(const prob &P) {
  g_mask.clear(), g_mask_off.clear();
  for (size_t b = 0; b < P.lq.size(); b++) {
    g_mask_off.push_back((int32_t)g_mask.size());
    const int64_t n = (int64_t)P.lq[b] * P.lkv[b];
    std::vector<uint8_t> seg((size_t)((n + 7) / 8), 0);
    for (int64_t i = 0; i < n; i++) {
      const int64_t t = P.lkv[b] ? i / P.lkv[b] : 0;
      if (t % 7 != 3 && urand() < 0.7) seg[(size_t)(i >> 3)] |= (uint8_t)(1u << (i & 7));
    }
    g_mask.insert(g_mask.end(), seg.begin(), seg.end());
  }
  g_mask.push_back(0);  // a non-empty vector even when every segment is
  return g_mask.data();
}

// fp8 codes: the nearest of the 256 (NaN and infinities left out), as a double.
static double fp8_decode(int e4m3, uint8_t c) {
  const int s = c >> 7;
  double v;
  if (e4m3) {
    const int e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
  } else {
    const int e = (c >> 2) & 31, m = c & 3;
    if (e == 31) return NAN;
    v = e ? ldexp(1.0 + m / 4.0, e - 15) : ldexp(m / 4.0, -14);
  }
  return s ? -v : v;
}
static uint8_t fp8_encode(int e4m3, double x) {
  int best = 0;
  double bd = INFINITY;
  for (int c = 0; c < 256; c++) {
    const double v = fp8_decode(e4m3, (uint8_t)c);
    if (v == v && fabs(v - x) < bd) bd = fabs(v - x), best = c;
  }
  return (uint8_t)best;
}
template <typename T>
struct fp8_of {
  static constexpr int is = 0, e4m3 = 0;
};
template <>
struct fp8_of<fi_e4m3> {
  static constexpr int is = 1, e4m3 = 1;
};
template <>
struct fp8_of<fi_e5m2> {
  static constexpr int is = 1, e4m3 = 0;
};

// An fp8 cache of the case (KVT e4m3 or e5m2; nothing for a 16-bit one): d's K and V as
// codes of value / scale (k_scale 0.5, v_scale 2) into k8 / v8, the reference's values
// the codes' times the scales, and the kernel's scales (e4m3 widened as value / 256 on the
// portable path: the 256 back in them, as the host does).
template <typename KVT>
static void to_fp8(const prob &P, data &d, fi_prefill_kparams &k, std::vector<uint8_t> &k8, std::vector<uint8_t> &v8) {
  constexpr int F8 = fp8_of<KVT>::is, E4 = fp8_of<KVT>::e4m3;
  if (!F8) return;
  const double ks = 0.5, vs = 2.0, wide = E4 ? 256.0 : 1.0;
  k8.resize(d.k.size()), v8.resize(d.v.size());
  for (size_t i = 0; i < d.k.size(); i++) k8[i] = fp8_encode(E4, from_bits(d.k[i], P.bf) / ks);
  for (size_t i = 0; i < d.v.size(); i++) v8[i] = fp8_encode(E4, from_bits(d.v[i], P.bf) / vs);
  for (auto &x : d.kd) x = fp8_decode(E4, fp8_encode(E4, x / ks)) * ks;
  for (auto &x : d.vd) x = fp8_decode(E4, fp8_encode(E4, x / vs)) * vs;
  k.k = k8.data(), k.v = v8.data();
  k.scale_log2 *= (float)(ks * wide), k.cap_pre *= (float)(ks * wide), k.v_scale = (float)(vs * wide);
}

template <typename T, int D, int QT, int ROPE, typename KVT = T, int DV = D>
static void run_single(const prob &P, int sinks = 0, int mask = 0) {
  data d;
  build(P, d);
  fi_prefill_kparams k;
  fill_params(P, k);
  if (sinks) k.sinks = make_sinks(P.hq);
  if (mask) k.custom_mask = make_mask(P);
  k.q = d.q.data(), k.out = d.out.data(), k.lse = d.lse.data(), k.k = d.k.data(), k.v = d.v.data();
  std::vector<uint8_t> k8, v8;
  to_fp8<KVT>(P, d, k, k8, v8);
  k.q_stride_tok = (int64_t)P.hq * D, k.q_stride_head = D;
  k.out_stride_tok = (int64_t)P.hq * DV, k.out_stride_head = DV;
  k.lse_stride_tok = P.hq, k.lse_stride_head = 1;
  k.kv_stride_slot = (int64_t)P.hkv * D, k.kv_stride_head = D;
  k.v_stride_slot = (int64_t)P.hkv * DV, k.v_stride_head = DV;
  k.q_len = P.lq[0], k.kv_len = P.lkv[0], k.page_size = 1;
  const int rows = P.lq[0] * k.group;
  emu::launch((rows + QT - 1) / QT, P.hkv, 32 * FI_PF_WARPS(D, QT), [&] { fi::pf::prefill<T, D, QT, ROPE, 1, KVT, DV>(k); });
  check(P, d, DV != D ? "single dv" : mask ? (sinks ? "single mask sinks" : "single mask") : sinks ? "single sinks" : fp8_of<KVT>::is ? (fp8_of<KVT>::e4m3 ? "single e4m3" : "single e5m2") : "single");
  g_sinks.clear(), g_mask.clear();
}

// Batch through the real planner (split forced by a large target when `split`).
template <typename T, int D, int QT, int ROPE, typename KVT = T, int DV = D>
static void run_batch(const prob &P, int split, int sinks = 0, int mask = 0) {
  data d;
  build(P, d);
  fi_prefill_kparams k;
  fill_params(P, k);
  if (sinks) k.sinks = make_sinks(P.hq);
  if (mask) k.custom_mask = make_mask(P);
  const int B = (int)P.lq.size(), G = P.hq / P.hkv;
  std::vector<int64_t> kvl(B + 1);
  for (int b = 0; b < B; b++) kvl[b] = P.lkv[b];
  const rt_prefill_batch bt = {B, d.qo.data(), kvl.data(), d.kvp.data(), G, P.hkv, QT, 64, P.causal,
                               P.window};
  std::vector<int32_t> items(FI_PREFILL_ITEM_WORDS * 4096);
  int64_t chunk = 0, slots = 0;
  const int64_t n = rt_prefill_partition(&bt, split ? 100000 : 1, items.data(), 4096, split ? 512 : 0, &chunk, &slots);
  if (n < 0) {
    fprintf(stderr, "FAIL planner\n");
    fails++;
    return;
  }
  // each item's mask segment (word 11), from its request (word 0)
  for (int64_t i = 0; mask && i < n; i++)
    items[FI_PREFILL_ITEM_WORDS * i + 11] = g_mask_off[items[FI_PREFILL_ITEM_WORDS * i]];
  std::vector<float> po((size_t)(slots + 1) * P.hkv * FI_PREFILL_SLOT_ROWS * DV), pl((size_t)(slots + 1) * P.hkv * FI_PREFILL_SLOT_ROWS);
  k.q = d.q.data(), k.out = d.out.data(), k.lse = d.lse.data(), k.k = d.k.data(), k.v = d.v.data();
  std::vector<uint8_t> k8, v8;
  to_fp8<KVT>(P, d, k, k8, v8);
  k.indices = P.paged ? d.indices.data() : nullptr;
  k.items = items.data();
  k.partial_o = po.data(), k.partial_lse = pl.data();
  k.q_stride_tok = (int64_t)P.hq * D, k.q_stride_head = D;
  k.out_stride_tok = (int64_t)P.hq * DV, k.out_stride_head = DV;
  k.lse_stride_tok = P.hq, k.lse_stride_head = 1;
  k.kv_stride_page = (int64_t)P.ps * P.hkv * D;
  k.kv_stride_slot = (int64_t)P.hkv * D, k.kv_stride_head = D;
  k.v_stride_slot = (int64_t)P.hkv * DV, k.v_stride_head = DV;
  k.page_size = P.paged ? P.ps : 1;
  k.num_items = (int32_t)n;
  emu::launch((unsigned)n, P.hkv, 32 * FI_PF_WARPS(D, QT), [&] { fi::pf::prefill<T, D, QT, ROPE, 0, KVT, DV>(k); });
  fi_prefill_merge_params m;
  memset(&m, 0, sizeof m);
  m.out = d.out.data(), m.lse = d.lse.data(), m.items = items.data(), m.partial_o = po.data(), m.partial_lse = pl.data();
  m.out_stride_tok = k.out_stride_tok, m.out_stride_head = DV, m.lse_stride_tok = P.hq, m.lse_stride_head = 1;
  m.num_items = (int32_t)n, m.num_kv_heads = P.hkv, m.group = G, m.q_tile = FI_PREFILL_SLOT_ROWS;
  m.sinks = k.sinks;
  m.lse_log2 = k.lse_log2;
  emu::launch((unsigned)n, P.hkv, 128, [&] { fi::pf::prefill_merge<T, DV>(m); });
  char what[64];
  snprintf(what, sizeof what, "%s%s%s n=%lld%s%s%s%s", P.paged ? "paged" : "ragged", DV != D ? " dv" : "", chunk ? " split" : "", (long long)n,
           sinks ? " sinks" : "", mask ? " mask" : "", fp8_of<KVT>::is ? (fp8_of<KVT>::e4m3 ? " e4m3" : " e5m2") : "",
           g_lse2 ? " lse base 2" : "");
  check(P, d, what);
  g_sinks.clear(), g_mask.clear();
  if (split && chunk == 0) {
    fprintf(stderr, "FAIL expected a split\n");
    fails++;
  }
}

// L_q = 1: the prefill kernel and the decode kernel (kernels/decode.cuh, its portable
// path) on the same request give the same output and LSE.
// split > 1: the decode kernel's single-request split (fi_single_decode's, chunks from
// rt_single_decode_chunks for `split` blocks a KV head), then its merge launch.
template <typename T, int D, int ROPE>
static void prefill_vs_decode(int bf, int hq, int hkv, int L, int window, double cap, int split = 1, int sinks = 0) {
  prob P{bf, D, hq, hkv, 1, window, ROPE, 1, 0, cap, {1}, {L}};
  data d;
  build(P, d);
  fi_prefill_kparams k;
  fill_params(P, k);
  k.q = d.q.data(), k.out = d.out.data(), k.lse = d.lse.data(), k.k = d.k.data(), k.v = d.v.data();
  k.q_stride_tok = (int64_t)hq * D, k.q_stride_head = D, k.out_stride_tok = (int64_t)hq * D, k.out_stride_head = D;
  k.lse_stride_tok = hq, k.lse_stride_head = 1, k.kv_stride_slot = (int64_t)hkv * D, k.kv_stride_head = D;
  k.q_len = 1, k.kv_len = L, k.page_size = 1;
  emu::launch(1, hkv, 32, [&] { fi::pf::prefill<T, D, 16, ROPE, 1>(k); });
  check(P, d, "L_q=1 prefill");
  std::vector<uint16_t> pout = d.out;
  std::vector<float> plse = d.lse;
  fi_decode_params dp;
  memset(&dp, 0, sizeof dp);
  dp.q = d.q.data(), dp.out = d.out.data(), dp.lse = d.lse.data(), dp.k = d.k.data(), dp.v = d.v.data();
  dp.q_stride[1] = D, dp.out_stride[1] = D, dp.lse_stride[1] = 1;
  dp.kv_stride_slot = (int64_t)hkv * D, dp.kv_stride_head = D;
  dp.num_items = 1, dp.num_kv_heads = hkv, dp.group = hq / hkv, dp.page_size = 1, dp.kv_len = L;
  dp.single_lo = window >= 0 && L - 1 - window > 0 ? L - 1 - window : 0;
  dp.scale_log2 = k.scale_log2, dp.cap_pre = k.cap_pre, dp.cap_log2 = k.cap_log2, dp.v_scale = 1.0f;
  for (int i = 0; i < FI_DECODE_MAX_FREQ; i++) dp.rope_freq[i] = k.rope_freq[i];
  std::fill(d.out.begin(), d.out.end(), 0xffff);
  std::fill(d.lse.begin(), d.lse.end(), NAN);
  int chunk = L, n = 1;
  if (split > 1) n = rt_single_decode_chunks(L - dp.single_lo, hkv, (int64_t)hkv * split, &chunk);
  std::vector<uint16_t> po((size_t)n * hq * D);
  std::vector<float> pl((size_t)n * hq);
  dp.num_items = n, dp.single_chunk = chunk;
  dp.partial_o = po.data(), dp.partial_lse = pl.data();  // no counters: a split must not need them
  constexpr int GM = 8;  // group <= 8
  if (sinks) dp.sinks = make_sinks(hq);  // (the prefill run above had none: the comparison below is left out)
  emu::launch((unsigned)n, hkv, 32 * 4, [&] { fi::dec::decode<T, T, D, GM, 1, ROPE, 1, 4>(dp); });
  if (n > 1) {
    // The chunks leave out untouched (still poisoned); fi_single_decode's second launch merges.
    if (!isnan(d.lse[0])) {
      fprintf(stderr, "FAIL single decode: a split chunk wrote lse before the merge launch\n");
      fails++;
    }
    dp.single_merge = 1;
    emu::launch(1, hkv, 32 * 4, [&] { fi::dec::decode<T, T, D, GM, 1, ROPE, 1, 4>(dp); });
  }
  check(P, d, n > 1 ? (sinks ? "L_q=1 decode, split, sinks" : "L_q=1 decode, split") : (sinks ? "L_q=1 decode, sinks" : "L_q=1 decode"));
  g_sinks.clear();
  if (split > 1 && n < 2) {
    fprintf(stderr, "FAIL single decode: expected a split of %d tokens\n", L - dp.single_lo);
    fails++;
  }
  if (sinks) return;
  double num = 0, den = 0, lmax = 0;
  for (int64_t i = 0; i < (int64_t)hq * D; i++) {
    const double a = from_bits(pout[i], bf), b = from_bits(d.out[i], bf);
    num += (a - b) * (a - b);
    den += b * b;
  }
  for (int h = 0; h < hq; h++) lmax = fmax(lmax, fabs((double)plse[h] - d.lse[h]));
  const double rel = sqrt(num / den);
  const bool ok = rel < (bf ? 1e-2 : 2e-3) && lmax < 1e-3;
  fprintf(stderr, "%s L_q=1 prefill vs decode %s D=%d %d/%d L=%d win=%d rope=%d cap=%g chunks=%d: out %.3g, lse %.3g\n",
          ok ? "ok  " : "FAIL", bf ? "bf16" : "f16", D, hq, hkv, L, window, ROPE, cap, n, rel, lmax);
  fails += !ok;
}

// ---- batch decode ----
// One batch (a query token per request, lengths lens, paged NHD cache of page ps in
// random page order) through rt_decode_partition (split when asked: a large target)
// and the kernel, against the float64 reference. head_pf: the kernel's head_prefetch
// (tokens an item prefetches at its start; a no-op here but its page lookups run).
// hp: KV heads a block (2: head pairs, the grid's y halved).
// SIMT: the CUDA-core kernel (kernels/decode_simt.cuh) with GM its rows (1, 2 or 4; PF
// and ROPE unused).
template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int WARPS, int SIMT = 0>
static void decode_batch(int hq, int hkv, int ps, std::vector<int> lens, int window, double cap, int split,
                         int head_pf = 0, int hp = 1, int nc = 1, int sinks = 0) {
  const int bf = sizeof(QT) == 2 && fp8_of<QT>::is == 0 && !std::is_same<QT, fi_half>::value;
  const int F8 = fp8_of<KVT>::is, E4 = fp8_of<KVT>::e4m3, B = (int)lens.size(), G = hq / hkv;
  prob P{bf, D, hq, hkv, 1, window, ROPE, ps, 1, cap, std::vector<int>(B, 1), lens};
  data d;
  build(P, d);
  // An fp8 cache: the 16-bit values rounded to fp8, the reference on the rounded values.
  std::vector<uint8_t> k8, v8;
  if (F8) {
    k8.resize(d.k.size()), v8.resize(d.v.size());
    for (size_t i = 0; i < d.k.size(); i++) k8[i] = fp8_encode(E4, from_bits(d.k[i], bf));
    for (size_t i = 0; i < d.v.size(); i++) v8[i] = fp8_encode(E4, from_bits(d.v[i], bf));
    for (auto &x : d.kd) x = fp8_decode(E4, fp8_encode(E4, x));
    for (auto &x : d.vd) x = fp8_decode(E4, fp8_encode(E4, x));
  }
  std::vector<int32_t> indptr(B + 1), last(B);
  for (int b = 0; b <= B; b++) indptr[b] = d.kvp[b];
  for (int b = 0; b < B; b++) last[b] = d.last[b];
  std::vector<int32_t> items(FI_DECODE_ITEM_WORDS * 4096);
  int chunk = 0;
  const int64_t n = rt_decode_partition(B, indptr.data(), last.data(), ps, window, split ? 1000 : 1,
                                        items.data(), 4096, &chunk);
  // nc > 1: each KV head's group of G query heads cut into nc grid heads of G / nc rows
  // (groups above 16), as the runtime plans them (rt_decode_group_chunks).
  const int gh = hkv * nc;
  std::vector<int32_t> counters((size_t)B * gh, 0);
  std::vector<float> po((size_t)(n + 1) * hq * D), pl((size_t)(n + 1) * hq);
  fi_decode_params dp;
  memset(&dp, 0, sizeof dp);
  const double LOG2E = 1.4426950408889634, sm = 1.0 / sqrt((double)D), wide = E4 ? 256.0 : 1.0;
  dp.scale_log2 = (float)(sm * wide * LOG2E);
  if (cap > 0) dp.cap_pre = (float)(sm * wide / cap), dp.cap_log2 = (float)(cap * LOG2E);
  dp.v_scale = (float)wide;
  for (int i = 0; i < D / 2; i++) dp.rope_freq[i] = (float)(1.0 / pow(1e4, 2.0 * i / D));
  dp.q = d.q.data(), dp.out = d.out.data(), dp.lse = d.lse.data();
  dp.k = F8 ? (const void *)k8.data() : (const void *)d.k.data();
  dp.v = F8 ? (const void *)v8.data() : (const void *)d.v.data();
  dp.q_stride[0] = dp.out_stride[0] = (int64_t)hq * D, dp.q_stride[1] = dp.out_stride[1] = D;
  dp.lse_stride[0] = hq, dp.lse_stride[1] = 1;
  dp.kv_stride_page = (int64_t)ps * hkv * D, dp.kv_stride_slot = (int64_t)hkv * D, dp.kv_stride_head = D;
  dp.indptr = indptr.data(), dp.indices = d.indices.data(), dp.last_page_len = last.data();
  dp.items = items.data(), dp.counters = counters.data(), dp.partial_o = po.data(), dp.partial_lse = pl.data();
  dp.num_items = (int32_t)n, dp.num_kv_heads = gh, dp.group = G / nc, dp.page_size = ps;
  dp.kv_head_div = nc;
  dp.head_prefetch = head_pf;
  dp.kv_heads_per_block = hp;
  dp.lse_log2 = g_lse2;
  // Sinks: random logits around the keys' (N(0, 2)), the first head's far above them (the
  // sink takes nearly all the weight), the last head's -inf (no sink).
  if (sinks) dp.sinks = make_sinks(hq);
  if constexpr (SIMT)
    emu::launch((unsigned)n, gh, 32 * WARPS, [&] { fi::dec::decode_simt<QT, KVT, D, GM, WARPS>(dp); });
  else
    emu::launch((unsigned)n, gh / hp, 32 * WARPS, [&] { fi::dec::decode<QT, KVT, D, GM, PF, ROPE, 0, WARPS>(dp); });
  char what[112];
  snprintf(what, sizeof what, "decode %s%s%s w%d n=%lld%s%s%s%s", SIMT ? "simt " : "", F8 ? (E4 ? "e4m3 " : "e5m2 ") : "",
           chunk && n > B ? "split" : "", WARPS, (long long)n, hp > 1 ? " head pairs" : "",
           nc > 1 ? " group chunks" : "", sinks ? " sinks" : "", g_lse2 ? " lse base 2" : "");
  check(P, d, what);
  g_sinks.clear();
  for (int x : counters)
    if (x != 0) {
      fprintf(stderr, "FAIL decode: a merge counter left at %d\n", x);
      fails++;
      break;
    }
  if (split && !(n > B)) {
    fprintf(stderr, "FAIL decode: expected a split\n");
    fails++;
  }
}

