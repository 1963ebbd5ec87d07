// test_moe_emu.cc: the mixture-of-experts kernels' own source (kernels/moe_routing.cuh,
// kernels/moe_sort.cuh, their portable path: the one hiprtc compiles, 64-lane warps) run on
// the host by the emulator of tests/emu.h, against a float64 routing reference and a CPU
// stable sort: every method with random logits and exact ties, DeepSeek-V3's groups, the
// sort's tables bit for bit over random routings, one hot expert, EP offsets, the bound.
// Not the CUDA shuffles and __match_any_sync (tests/gpu/gpu_moe.c runs those on the GPU).
//
// Built and run by `make test`; alone: make build/tests/test_moe_emu && build/tests/test_moe_emu
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define EMU_WARP 64
#define EMU_MAX_WARPS 16
#define EMU_STACK (1 << 16)
#include "emu.h"

static inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
#define __expf expf
static inline float __fdividef(float a, float b) { return a / b; }
using std::min;

#include "fi_port.cuh"
#include "moe_routing.cuh"
#include "moe_sort.cuh"
#include "moe_combine.cuh"
#include "ops_moe.h"

static int fails;
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand() {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

// ---- routing ----
static void routing_case(const char *what, int method, int T, int E, int k, int ng, int tg, double scale, int ties) {
  std::vector<float> x((size_t)T * E), bias(E, 0.0f);
  // ties 1: -1, 0 and 1; 2: -2, -1 and 0 (the best ones zeros); half the zeros -0 (they tie with +0)
  for (auto &v : x) v = ties ? (float)((int)(urand() * 3) - ties) : (float)((urand() - 0.5) * 6.0);
  if (ties)
    for (auto &v : x)
      if (v == 0.0f && urand() < 0.5) v = -0.0f;
  if (method == FI_MOE_DEEPSEEK_V3 && !ties)
    for (auto &b : bias) b = (float)((urand() - 0.5) * 0.2);
  std::vector<int32_t> ids((size_t)T * k, -7);
  std::vector<float> w((size_t)T * k, NAN);
  fi_moe_route_params p;
  memset(&p, 0, sizeof p);
  p.logits = x.data(), p.bias = method == FI_MOE_DEEPSEEK_V3 ? bias.data() : nullptr;
  p.ids = ids.data(), p.weights = w.data();
  p.logits_stride = E, p.ids_stride = k, p.weights_stride = k;
  p.tokens = T, p.experts = E, p.top_k = k, p.n_group = ng ? ng : 1, p.topk_group = tg ? tg : 1, p.scale = (float)scale;
  const unsigned blocks = (unsigned)((T + 3) / 4);
  auto run = [&](auto tag) {
    constexpr int EPL = decltype(tag)::value;
    emu::launch(blocks, 1, 4 * EMU_WARP, [&] {
      switch (method) {
        case 0: fi::moe::routing<float, 0, EPL, 4>(p); break;
        case 1: fi::moe::routing<float, 1, EPL, 4>(p); break;
        case 2: fi::moe::routing<float, 2, EPL, 4>(p); break;
        case 3: fi::moe::routing<float, 3, EPL, 4>(p); break;
        default: fi::moe::routing<float, 4, EPL, 4>(p); break;
      }
    });
  };
  const int epl = E <= 64 ? 1 : E <= 128 ? 2 : E <= 256 ? 4 : 8;
  if (epl == 1) run(std::integral_constant<int, 1>());
  else if (epl == 2) run(std::integral_constant<int, 2>());
  else if (epl == 4) run(std::integral_constant<int, 4>());
  else run(std::integral_constant<int, 8>());
  int bad = 0;
  double maxerr = 0;
  for (int t = 0; t < T && bad < 5; t++) {
    std::vector<double> s(E);
    std::vector<int> elig(E, 1);
    for (int e = 0; e < E; e++) s[e] = method == 3 ? sigm(x[(size_t)t * E + e]) + bias[e] : x[(size_t)t * E + e];
    if (method == 3) {
      const int G = E / ng;
      std::vector<double> gs(ng);
      std::vector<int> kept(ng, 0);
      for (int g = 0; g < ng; g++) {
        double a1 = -INFINITY, a2 = -INFINITY;
        for (int e = g * G; e < (g + 1) * G; e++)
          if (s[e] > a1) a2 = a1, a1 = s[e];
          else if (s[e] > a2) a2 = s[e];
        gs[g] = G > 1 ? a1 + a2 : a1;
      }
      for (int r = 0; r < tg; r++) {
        int b = -1;
        for (int g = 0; g < ng; g++)
          if (!kept[g] && (b < 0 || gs[g] > gs[b])) b = g;
        kept[b] = 1;
      }
      for (int e = 0; e < E; e++) elig[e] = kept[e / G];
    }
    std::vector<int> order;
    for (int e = 0; e < E; e++)
      if (elig[e]) order.push_back(e);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[a] > s[b]; });
    double sel = 0, m = -INFINITY, all = 0, ref[32];
    for (int e = 0; e < E; e++) m = std::max(m, (double)x[(size_t)t * E + e]);
    for (int e = 0; e < E; e++) all += exp(x[(size_t)t * E + e] - m);
    for (int i = 0; i < k; i++) {
      const int e = ids[(size_t)t * k + i];
      // A swap only between scores that differ, by float32 rounding: equal ones go to the smaller index.
      if (e != order[i] &&
          !(e >= 0 && e < E && s[e] != s[order[i]] && fabs(s[e] - s[order[i]]) <= 1e-5 * std::max(1.0, fabs(s[e])))) {
        fprintf(stderr, "FAIL-CASE %s: token %d pick %d: expert %d, the reference's %d\n", what, t, i, e, order[i]);
        bad++;
        break;
      }
      const double l = x[(size_t)t * E + e];
      ref[i] = method == 0 ? exp(l - m) / all : (method == 1 || method == 2) ? exp(l - x[(size_t)t * E + ids[(size_t)t * k]]) : sigm(l);
      sel += ref[i];
    }
    if (bad) break;
    for (int i = 0; i < k; i++) {
      double r = ref[i];
      if (method == 1 || method == 2) r /= sel;
      if (method == 3) r /= sel + 1e-20;
      r *= scale;
      maxerr = std::max(maxerr, fabs(w[(size_t)t * k + i] - r));
    }
  }
  if (!(maxerr < 1e-5 * std::max(1.0, scale))) bad++;
  fprintf(stderr, "%s routing %-28s T=%d E=%d k=%d: max weight error %.2e\n", bad ? "FAIL" : "ok  ", what, T, E, k, maxerr);
  fails += bad != 0;
}

// ---- the sort ----
// pattern 0: random distinct experts a token; 1: one hot expert (k = 0 of every token, the
// rest spread); 2: the bound (ids off + x / (1 + TS)); 3: heavy skew (3 in 4 routes to
// expert off + L / 2, the rest random, duplicates allowed). chunk 0: the runtime's grid
// (jit_moe_sort_grid), else that many routes a block (more blocks than the runtime would take).
static void sort_case(const char *what, int T, int K, int E, int off, int L, int TS, int pattern, int chunk = 0) {
  const int R = T * K;
  std::vector<int32_t> ids(R > 0 ? R : 1);
  for (int x = 0; x < R; x++) {
    if (pattern == 0) {
      for (;;) {
        int e = (int)(urand() * E), dup = 0;
        for (int j = x - x % K; j < x; j++) dup |= ids[j] == e;
        if (!dup) { ids[x] = e; break; }
      }
    } else if (pattern == 1) {
      ids[x] = x % K == 0 ? off : off + (x % K) % L;
    } else if (pattern == 2) {
      ids[x] = off + x / (1 + TS);
    } else {
      ids[x] = urand() < 0.75 ? off + L / 2 : (int)(urand() * E);
    }
  }
  const int64_t MT = R <= L ? R : ((int64_t)R + (int64_t)(TS - 1) * L) / TS;
  int32_t blocks, ch;
  jit_moe_sort_grid(R, &blocks, &ch);
  if (chunk) ch = chunk, blocks = std::max(1, (R + chunk - 1) / chunk);
  std::vector<int32_t> counts((size_t)blocks * L, 0x5a5a5a5a), te(MT, 0x7b7b7b7b), mn(MT, 0x7b7b7b7b),
      e2p(R > 0 ? R : 1, 0x7b7b7b7b), p2e(MT * TS > 0 ? MT * TS : 1, 0x7b7b7b7b), n(2, 0x7b7b7b7b);
  fi_moe_sort_params_k p;
  memset(&p, 0, sizeof p);
  p.ids = ids.data(), p.counts = counts.data(), p.tile_expert = te.data(), p.tile_mn_limit = mn.data();
  p.e2p = e2p.data(), p.p2e = p2e.data(), p.num_tiles = &n[0], p.total_padded = &n[1];
  p.routes = R, p.blocks = blocks, p.chunk = ch, p.expert_offset = off, p.local_experts = L, p.tile_size = TS;
  p.max_tiles = (int32_t)MT;
  // As fi_moe_sort launches them: the count kernel only for several blocks.
  if (blocks > 1) emu::launch((unsigned)blocks, 1, 1024, [&] { fi::moe::sort<0>(p); });
  emu::launch((unsigned)blocks, 1, 1024, [&] { fi::moe::sort<1>(p); });
  // reference
  std::vector<int64_t> cnt(L, 0), start(L + 1, 0), fill(L, 0);
  for (int x = 0; x < R; x++)
    if (ids[x] >= off && ids[x] < off + L) cnt[ids[x] - off]++;
  for (int e = 0; e < L; e++) start[e + 1] = start[e] + (cnt[e] + TS - 1) / TS;
  std::vector<int32_t> rte(MT), rmn(MT), re2p(R > 0 ? R : 1), rp2e(MT * TS > 0 ? MT * TS : 1, -1);
  for (int64_t t = 0; t < MT; t++) rte[t] = -1, rmn[t] = (int32_t)(t * TS);
  for (int x = 0; x < R; x++) {
    const int e = ids[x] - off;
    if (e < 0 || e >= L) { re2p[x] = -1; continue; }
    const int64_t row = start[e] * TS + fill[e]++;
    re2p[x] = (int32_t)row, rp2e[row] = x;
  }
  for (int e = 0; e < L; e++)
    for (int64_t t = start[e]; t < start[e + 1]; t++)
      rte[t] = e, rmn[t] = (int32_t)std::min<int64_t>((t + 1) * TS, start[e] * TS + cnt[e]);
  int bad = 0;
  if (n[0] != start[L] || n[1] != start[L] * TS) bad++;
  if (memcmp(te.data(), rte.data(), MT * 4) || memcmp(mn.data(), rmn.data(), MT * 4)) bad++;
  if (R && memcmp(e2p.data(), re2p.data(), (size_t)R * 4)) bad++;
  if (MT * TS && memcmp(p2e.data(), rp2e.data(), (size_t)(MT * TS) * 4)) bad++;
  if (pattern == 2 && start[L] != MT) bad++;
  fprintf(stderr, "%s sort %-31s T=%d K=%d L=%d@%d tile %d, %d block%s of %d: %lld tiles of %lld at most\n",
          bad ? "FAIL" : "ok  ", what, T, K, L, off, TS, blocks, blocks > 1 ? "s" : "", ch, (long long)start[L],
          (long long)MT);
  fails += bad != 0;
}

// ---- permute and finalize, over a sort's tables ----
template <typename T>
static void combine_case(const char *what, int T_, int K, int E, int L, int TS, int H, int accumulate) {
  const int R = T_ * K;
  std::vector<int32_t> ids(R);
  for (int x = 0; x < R; x++)
    for (;;) {
      int e = (int)(urand() * E), dup = 0;
      for (int j = x - x % K; j < x; j++) dup |= ids[j] == e;
      if (!dup) { ids[x] = e; break; }
    }
  // the tables, by the CPU stable sort (the sort itself is checked above)
  const int64_t MT = R <= L ? R : ((int64_t)R + (int64_t)(TS - 1) * L) / TS;
  std::vector<int64_t> cnt(L, 0), start(L + 1, 0), fill(L, 0);
  for (int x = 0; x < R; x++)
    if (ids[x] < L) cnt[ids[x]]++;
  for (int e = 0; e < L; e++) start[e + 1] = start[e] + (cnt[e] + TS - 1) / TS;
  std::vector<int32_t> e2p(R), p2e(MT * TS, -1), nt(1, (int32_t)start[L]);
  for (int x = 0; x < R; x++) {
    if (ids[x] >= L) { e2p[x] = -1; continue; }
    const int64_t row = start[ids[x]] * TS + fill[ids[x]]++;
    e2p[x] = (int32_t)row, p2e[row] = x;
  }
  auto put = [](T &d, double v) { d = fi_from_float<T>((float)v); };
  auto get = [](const T &d) { return (double)fi_to_float(d); };
  std::vector<T> xs((size_t)T_ * H), perm((size_t)MT * TS * H), y((size_t)MT * TS * H), out((size_t)T_ * H);
  for (auto &v : xs) put(v, urand() * 2 - 1);
  T poison;
  put(poison, 12345.0);
  for (auto &v : perm) v = poison;
  fi_moe_permute_params pp = {xs.data(), perm.data(), p2e.data(), nt.data(), H, H, (int32_t)(MT * TS), TS, K, H};
  emu::launch((unsigned)(MT * TS), 1, fi::moe::COMBINE_THREADS, [&] { fi::moe::permute<T, 4>(pp); });
  int bad = 0;
  for (int64_t r = 0; r < MT * TS && !bad; r++)
    for (int c = 0; c < H; c++) {
      // a live row is its token's row exactly; a padding row keeps the poison
      const double want = p2e[r] >= 0 ? get(xs[(size_t)(p2e[r] / K) * H + c]) : get(poison);
      if (get(perm[(size_t)r * H + c]) != want) { bad++; break; }
    }
  const int permute_bad = bad;
  // finalize: y random on the live rows, weights random; the reference in float64
  std::vector<float> w(R);
  for (auto &v : w) v = (float)urand();
  for (auto &v : y) put(v, urand() * 2 - 1);
  std::vector<double> init(out.size());
  for (size_t i = 0; i < out.size(); i++) put(out[i], accumulate ? urand() : 777.0), init[i] = get(out[i]);
  fi_moe_finalize_params fp = {y.data(), out.data(), e2p.data(), w.data(), H, H, T_, K, H, accumulate};
  emu::launch((unsigned)T_, 1, fi::moe::COMBINE_THREADS, [&] { fi::moe::finalize<T, 4>(fp); });
  double num = 0, den = 0;
  for (int t = 0; t < T_; t++)
    for (int c = 0; c < H; c++) {
      double ref = accumulate ? init[(size_t)t * H + c] : 0.0;
      for (int k = 0; k < K; k++)
        if (e2p[t * K + k] >= 0) ref += (double)w[t * K + k] * get(y[(size_t)e2p[t * K + k] * H + c]);
      const double got = get(out[(size_t)t * H + c]);
      num += (got - ref) * (got - ref), den += ref * ref;
    }
  const double err = sqrt(num / (den > 0 ? den : 1));
  const double tol = sizeof(T) == 4 ? 1e-6 : 1e-2;
  if (!(err < tol)) bad++;
  fprintf(stderr, "%s combine %-29s T=%d K=%d L=%d of %d tile %d H=%d: permute %s, finalize err %.2e\n",
          bad ? "FAIL" : "ok  ", what, T_, K, L, E, TS, H, permute_bad ? "WRONG" : "exact", err);
  fails += bad != 0;
}

int main() {
  // The sort's grid: every route in a chunk, chunks whole 1024-thread rounds, at most 128
  // blocks, and blocks (so the workspace) never fewer for more routes.
  int32_t prev = 0;
  for (int64_t r = 0; r <= ((int64_t)1 << 30); r += r < 70000 ? 1 : r < 2000000 ? 997 : 1000003) {
    int32_t b, c;
    jit_moe_sort_grid(r, &b, &c);
    if (b < 1 || b > FI_MOE_SORT_MAX_BLOCKS || c % 1024 || (int64_t)b * c < r || b < prev ||
        (r <= FI_MOE_SORT_CHUNK) != (b == 1)) {
      fprintf(stderr, "FAIL sort grid: %lld routes: %d blocks of %d\n", (long long)r, b, c);
      fails++;
      break;
    }
    prev = b;
  }
  // The routing's e / G as (e * ceil(2^20 / G)) >> 20, for every e and G up to 512.
  for (uint32_t G = 1; G <= 512; G++) {
    const uint32_t inv = ((1u << 20) + G - 1) / G;
    for (uint32_t e = 0; e < 512; e++)
      if (((e * inv) >> 20) != e / G) {
        fprintf(stderr, "FAIL e / G: e %u G %u\n", e, G);
        fails++;
        G = 513;
        break;
      }
  }
  routing_case("mixtral renormalize", 1, 37, 8, 2, 0, 0, 1.0, 0);
  routing_case("qwen3 softmax-topk-renorm", 2, 21, 128, 8, 0, 0, 1.0, 0);
  routing_case("softmax-topk", 0, 19, 64, 6, 0, 0, 1.0, 0);
  routing_case("deepseek-v3", 3, 33, 256, 8, 8, 4, 2.5, 0);
  routing_case("deepseek-v3 64 experts", 3, 17, 64, 6, 8, 3, 1.0, 0);
  routing_case("llama4", 4, 23, 16, 1, 0, 0, 1.0, 0);
  routing_case("3 experts, k 3", 1, 9, 3, 3, 0, 0, 1.0, 0);
  routing_case("512 experts, k 32", 0, 5, 512, 32, 0, 0, 1.0, 0);
  routing_case("ties: qwen3", 2, 25, 128, 8, 0, 0, 1.0, 1);
  routing_case("ties: deepseek-v3", 3, 25, 256, 8, 8, 4, 2.5, 1);
  routing_case("ties: llama4, k 2", 4, 25, 16, 2, 0, 0, 1.0, 1);
  routing_case("ties at +-0: qwen3", 2, 25, 128, 8, 0, 0, 1.0, 2);
  routing_case("ties at +-0: mixtral", 1, 25, 8, 2, 0, 0, 1.0, 2);
  // DeepSeek-V3's groups: P lanes a group for every group count (64-lane warps: P = 8 for
  // 8 groups, 1 for 33..64), groups not a power of two, one group (nothing excluded), all
  // groups kept, every group kept but one.
  routing_case("deepseek-v3 3 groups of 32", 3, 13, 96, 8, 3, 2, 1.0, 0);
  routing_case("deepseek-v3 5 groups of 32", 3, 13, 160, 6, 5, 2, 1.0, 0);
  routing_case("deepseek-v3 9 groups of 8", 3, 13, 72, 4, 9, 1, 1.0, 0);
  routing_case("deepseek-v3 32 groups of 16", 3, 9, 512, 8, 32, 4, 1.0, 0);
  routing_case("deepseek-v3 1 group (kimi-k2)", 3, 11, 384, 8, 1, 1, 2.8, 0);
  routing_case("deepseek-v3 all 8 groups kept", 3, 11, 256, 8, 8, 8, 1.0, 0);
  routing_case("deepseek-v3 7 of 8 groups", 3, 11, 256, 8, 8, 7, 1.0, 0);
  routing_case("ties: deepseek-v3 16 groups", 3, 17, 128, 6, 16, 3, 1.0, 1);
  sort_case("random, 3 blocks", 1100, 8, 256, 0, 256, 128, 0);
  sort_case("random, tile 64", 300, 8, 128, 0, 128, 64, 0);
  sort_case("one hot expert", 5000, 1, 64, 0, 64, 256, 1);
  sort_case("ep rank 3 of 8", 800, 8, 256, 96, 32, 64, 0);
  sort_case("ep rank 7 of 8", 800, 8, 256, 224, 32, 256, 0);
  sort_case("T < L", 5, 2, 256, 0, 256, 128, 0);
  sort_case("the bound", 8 * 65, 1, 8, 0, 8, 64, 2);
  sort_case("no routes", 0, 8, 256, 0, 256, 128, 0);
  // One block (decode sizes) and several, tile sizes, EP offsets, skew.
  sort_case("decode 64 tokens, one block", 64, 8, 256, 0, 256, 128, 0);
  sort_case("one block, a full chunk", 512, 8, 256, 0, 256, 64, 0);
  sort_case("one block, skew, tile 256", 333, 8, 256, 0, 256, 256, 3);
  sort_case("one block, ep rank 5 of 8", 500, 8, 256, 160, 32, 128, 0);
  sort_case("one block, all to one", 1000, 4, 64, 0, 64, 64, 1);
  sort_case("two blocks, skew", 600, 8, 256, 0, 256, 128, 3);
  sort_case("2048 tokens, ep rank 2 of 8", 2048, 8, 256, 64, 32, 256, 0);
  sort_case("2048 tokens, skew, tile 64", 2048, 8, 256, 0, 256, 64, 3);
  // Forced small chunks: more blocks than threads an expert sums (4 at 256 experts) and
  // than warps a block (padding spread over blocks), a last block cut short.
  sort_case("37 blocks of 1024, skew", 4700, 8, 256, 0, 256, 128, 3, 1024);
  sort_case("37 blocks of 1024, ep rank 1", 4700, 8, 256, 32, 32, 64, 0, 1024);
  sort_case("20 blocks of 2048, one hot", 5000, 8, 128, 0, 128, 256, 1, 2048);
  sort_case("3 blocks of 1024, the bound", 32 * 65, 1, 32, 0, 32, 64, 2, 1024);
  // Chunks past 4096 (the runtime's past 128 blocks), not a power of two.
  sort_case("3 blocks of 5120, skew", 1600, 8, 256, 0, 256, 128, 3, 5120);
  combine_case<float>("f32, all experts local", 50, 4, 16, 16, 64, 64, 0);
  combine_case<fi_bf16>("bf16, ep: half the experts", 70, 8, 64, 32, 64, 128, 1);
  fprintf(stderr, "%d failures (%ld scheduler rounds)\n", fails, emu::rounds);
  if (fails)
    printf("FAIL moe_emulation: %d cases failed\n", fails);
  else
    printf("PASS moe_emulation\n");
  return fails ? 1 : 0;
}
