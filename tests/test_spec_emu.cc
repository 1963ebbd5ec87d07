// test_spec_emu.cc: chain speculative sampling's kernel (kernels/spec_sampling.cuh, its
// portable path: 64-lane warps, as hiprtc compiles it) run on the host by the emulator of
// tests/emu.h. What speculative sampling promises, checked by statistics over many requests
// of the same distributions, each with its own draft tokens drawn from the draft model's q:
// the first output token is distributed as the target model's p_0, whatever q is (the
// theorem the method rests on); a bonus token after S acceptances as p_S; the acceptance
// count's mean is sum_i sum_v min(p_i(v), q_i(v)). And the layout of every output row (the
// accepted drafts, one drawn token, then -1), the counters added in place, the same draws
// for the same seed and offset, a draft id outside the vocabulary rejected, a row without
// mass giving -1. Not the CUDA shuffles (tests/gpu/gpu_sampling.c runs the kernel there).
//
// Built and run by `make test`; alone: make build/tests/test_spec_emu && build/tests/test_spec_emu
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#define EMU_WARP 64
#define EMU_MAX_WARPS 4
#define EMU_STACK (1 << 15)
#include "emu.h"

static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
// HIP's shuffles within segments of `width` lanes (the emulator's __shfl takes whole-warp lanes).
static inline int __shfl_up(int v, unsigned o, int width) {
  const int l = (int)(threadIdx.x % EMU_WARP), seg = l - l % width;
  return (int)emu::shfl_bits((uint32_t)v, l - (int)o >= seg ? l - (int)o : l);
}
static inline int __shfl_down(int v, unsigned o, int width) {
  const int l = (int)(threadIdx.x % EMU_WARP), seg = l - l % width;
  return (int)emu::shfl_bits((uint32_t)v, l + (int)o < seg + width ? l + (int)o : l);
}

#include "fi_port.cuh"
#include "spec_sampling.cuh"

static int fails;
static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand() {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static int draw(const std::vector<double> &w) {
  double s = 0;
  for (double x : w) s += x;
  double u = urand() * s;
  for (size_t i = 0; i < w.size(); i++)
    if ((u -= w[i]) < 0) return (int)i;
  return (int)w.size() - 1;
}
#define CHECK(c, ...)                  \
  do {                                 \
    if (!(c)) {                        \
      fprintf(stderr, "FAIL: ");       \
      fprintf(stderr, __VA_ARGS__);    \
      fprintf(stderr, "\n");           \
      fails++;                         \
    }                                  \
  } while (0)

constexpr int THREADS = FI_SPEC_THREADS;  // the registered configuration

struct run {
  std::vector<int32_t> out, acc, emit;
};

// B requests over the same p [S + 1][V] and q [S][V], draft ids given; counters start at 5.
static run launch(int B, int S, int V, const std::vector<float> &p, const std::vector<float> &q,
                  const std::vector<int32_t> &ids, uint64_t seed, uint64_t offset, bool counters = true) {
  std::vector<float> dq((size_t)B * S * V), tp((size_t)B * (S + 1) * V);
  for (int b = 0; b < B; b++) {
    memcpy(&dq[(size_t)b * S * V], q.data(), sizeof(float) * S * V);
    memcpy(&tp[(size_t)b * (S + 1) * V], p.data(), sizeof(float) * (S + 1) * V);
  }
  run r;
  r.out.assign((size_t)B * (S + 1), -7);
  r.acc.assign(B, 5);
  r.emit.assign(B, 5);
  fi_spec_params k;
  memset(&k, 0, sizeof k);
  k.draft_probs = dq.data(), k.draft_ids = ids.data(), k.target_probs = tp.data(), k.out = r.out.data();
  k.accepted = counters ? r.acc.data() : nullptr, k.emitted = counters ? r.emit.data() : nullptr;
  k.accepted_stride = k.emitted_stride = 1;
  k.seed = seed, k.offset = offset, k.batch = B, k.num_draft = S, k.vocab = V;
  emu::launch((unsigned)B, 1, THREADS, [&] { fi::spec::chain<THREADS>(k); });
  return r;
}

// Chi-square of the counts against probabilities w (normalized here), bins of expected
// count >= 20 merged in order; passes below df + 6 sqrt(2 df) + 10.
static bool chi2_ok(const std::vector<long> &cnt, std::vector<double> w, long n, const char *what) {
  double s = 0;
  for (double x : w) s += x;
  double chi = 0, e = 0, o = 0;
  int bins = 0;
  for (size_t i = 0; i < w.size(); i++) {
    if (w[i] <= 0) {
      CHECK(cnt[i] == 0, "%s: %ld draws of token %zu, which has no mass", what, cnt[i], i);
      continue;
    }
    e += w[i] / s * (double)n;
    o += (double)cnt[i];
    if (e >= 20 || i == w.size() - 1) {
      chi += (o - e) * (o - e) / e;
      bins++;
      e = o = 0;
    }
  }
  const double df = bins > 1 ? bins - 1 : 1, lim = df + 6 * sqrt(2 * df) + 10;
  fprintf(stderr, "  %-44s chi2 %6.1f over %2d bins (limit %.1f), %ld draws\n", what, chi, bins, lim, n);
  return chi < lim;
}

static std::vector<float> random_rows(int rows, int V, double zero_share) {
  std::vector<float> x((size_t)rows * V);
  for (int r = 0; r < rows; r++) {
    double s = 0;
    for (int v = 0; v < V; v++) s += x[(size_t)r * V + v] = urand() < zero_share ? 0.0f : (float)(urand() + 0.05);
    for (int v = 0; v < V; v++) x[(size_t)r * V + v] = (float)(x[(size_t)r * V + v] / s);
  }
  return x;
}

static void stats_case(const char *what, int B, int S, int V) {
  const std::vector<float> p = random_rows(S + 1, V, 0.2), q = random_rows(S, V, 0.2);
  std::vector<int32_t> ids((size_t)B * S);
  for (int b = 0; b < B; b++)
    for (int i = 0; i < S; i++) {
      std::vector<double> w(q.begin() + (size_t)i * V, q.begin() + (size_t)(i + 1) * V);
      ids[(size_t)b * S + i] = draw(w);
    }
  const run r = launch(B, S, V, p, q, ids, 0x1234, 77);
  std::vector<long> first(V, 0), bonus(V, 0);
  long nbonus = 0, acc_sum = 0, bad = 0;
  for (int b = 0; b < B; b++) {
    const int32_t *o = &r.out[(size_t)b * (S + 1)];
    const int j = r.emit[b] - 5, a = r.acc[b] - 5;
    bool ok = j >= 0 && j <= S && a >= j && a <= S;
    for (int i = 0; ok && i < j; i++) ok = o[i] == ids[(size_t)b * S + i];
    ok = ok && o[j] >= 0 && o[j] < V;
    for (int i = j + 1; ok && i <= S; i++) ok = o[i] == -1;
    if (!ok) {
      if (bad++ < 3)
        fprintf(stderr, "FAIL %s: request %d: emitted %d, accepted %d, out %d %d ...\n", what, b, j, a, o[0], o[1]);
      continue;
    }
    first[o[0]]++;
    if (j == S) bonus[o[S]]++, nbonus++;
    acc_sum += a;
  }
  CHECK(bad == 0, "%s: %ld requests with a wrong row or counters", what, bad);
  fails += !chi2_ok(first, std::vector<double>(p.begin(), p.begin() + V), B, what);
  if (nbonus > 200)
    fails += !chi2_ok(bonus, std::vector<double>(p.begin() + (size_t)S * V, p.end()), nbonus, "  bonus tokens");
  double mean = 0, var = 0;  // expected acceptances: each position on its own
  for (int i = 0; i < S; i++) {
    double m = 0;
    for (int v = 0; v < V; v++) m += fmin(p[(size_t)i * V + v], q[(size_t)i * V + v]);
    mean += m, var += m * (1 - m);
  }
  const double got = (double)acc_sum / B, sd = sqrt(var / B);
  fprintf(stderr, "  %-44s accepted %.4f a request, expected %.4f (sd %.4f)\n", "", got, mean, sd);
  CHECK(fabs(got - mean) < 5 * sd + 1e-3, "%s: mean acceptances %.4f, expected %.4f", what, got, mean);
}

int main() {
  // The promise, small and multi-tile vocabularies (tiles of 128 tokens), several depths.
  stats_case("V 16, S 3", 3000, 3, 16);
  stats_case("V 300 (3 tiles), S 2", 2000, 2, 300);
  stats_case("V 7, S 1", 3000, 1, 7);
  {  // S 0: only the bonus draw, from p_0
    const std::vector<float> p = random_rows(1, 12, 0.3), q;
    const std::vector<int32_t> ids;
    const run r = launch(2000, 0, 12, p, q, ids, 9, 9);
    std::vector<long> c(12, 0);
    long bad = 0;
    for (int b = 0; b < 2000; b++) {
      if (r.out[b] < 0 || r.out[b] >= 12) {
        bad++;
        continue;
      }
      c[r.out[b]]++;
    }
    CHECK(bad == 0, "S 0: %ld outputs outside the vocabulary", bad);
    fails += !chi2_ok(c, std::vector<double>(p.begin(), p.end()), 2000, "S 0 (the bonus alone)");
  }
  // The same seed and offset: the same rows; another offset: other draws; no counters.
  {
    const int B = 64, S = 4, V = 40;
    const std::vector<float> p = random_rows(S + 1, V, 0.0), q = random_rows(S, V, 0.0);
    std::vector<int32_t> ids((size_t)B * S);
    for (auto &x : ids) x = (int32_t)(urand() * V);
    const run a = launch(B, S, V, p, q, ids, 5, 6), b = launch(B, S, V, p, q, ids, 5, 6),
              c = launch(B, S, V, p, q, ids, 5, 7), d = launch(B, S, V, p, q, ids, 5, 6, false);
    CHECK(a.out == b.out && a.acc == b.acc && a.emit == b.emit, "the same seed and offset gave other draws");
    CHECK(a.out != c.out, "another offset gave the same draws");
    CHECK(a.out == d.out && d.acc[0] == 5 && d.emit[0] == 5, "without counters: other draws, or a counter written");
  }
  // A draft id outside the vocabulary is rejected there (the residual draws); a target row
  // without mass gives -1.
  {
    const int S = 2, V = 8;
    std::vector<float> p = random_rows(S + 1, V, 0.0), q = random_rows(S, V, 0.0);
    std::vector<int32_t> ids = {V + 3, 1};
    run r = launch(1, S, V, p, q, ids, 1, 1);
    CHECK(r.emit[0] == 5 && r.out[0] >= 0 && r.out[0] < V && r.out[1] == -1 && r.out[2] == -1,
          "out-of-vocabulary draft: emitted %d, out %d %d %d", r.emit[0] - 5, r.out[0], r.out[1], r.out[2]);
    ids = {-1, 1};
    for (int v = 0; v < V; v++) p[v] = 0.0f;  // p_0 has no mass (nor does its residual)
    r = launch(1, S, V, p, q, ids, 1, 1);
    CHECK(r.out[0] == -1 && r.out[1] == -1 && r.out[2] == -1 && r.emit[0] == 5 && r.acc[0] - 5 <= 1,
          "a row without mass: out %d %d %d, emitted %d, accepted %d (position 1's test on its own)", r.out[0],
          r.out[1], r.out[2], r.emit[0] - 5, r.acc[0] - 5);
  }
  fprintf(stderr, "%d failures (%ld scheduler rounds)\n", fails, emu::rounds);
  if (fails)
    printf("FAIL spec_sampling_emulation: %d checks failed\n", fails);
  else
    printf("PASS spec_sampling_emulation\n");
  return fails ? 1 : 0;
}
