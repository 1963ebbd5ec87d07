// test_moe_gemm_emu.cc: the experts' grouped GEMM (kernels/moe_gemm.cuh, its portable path:
// the one hiprtc compiles, with ldmatrix and mma.sync emulated by lane shuffles) run on the
// host by the emulator of tests/emu.h against a float64 reference per expert: every block
// shape (BM 16 / 64 / 128, BN 64 / 128), SwiGLU with both weight orders, the fused gather,
// f16 and bf16, tile sizes 64 / 128 / 256, uneven experts, an expert with no routes, a k
// several stages long; the output poisoned first, padding rows checked untouched.
// Not the CUDA inline assembly (cp.async, ldmatrix, mma.sync PTX): tests/gpu/gpu_moe.c.
//
// Built and run by `make test` (not by `make test-asan`: the emulated threads switch stacks);
// alone: make build/tests/test_moe_gemm_emu && build/tests/test_moe_gemm_emu
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#define EMU_WARP 32
#define EMU_MAX_WARPS 4
#define EMU_STACK (1 << 16)
#include "emu.h"

#define __expf expf
static inline float __fdividef(float a, float b) { return a / b; }
using std::min;

#include "fi_port.cuh"
#define FI_MOE_EMU_SMEM 1
alignas(128) static unsigned char fi_moe_smem[1 << 17];
#include "moe_gemm.cuh"

static int fails, cases;
static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand() {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

template <typename T>
static T rnd(double scale, double *back) {
  const T v = fi_from_float<T>((float)((urand() * 2.0 - 1.0) * scale));
  *back = fi_to_float(v);
  return v;
}

// The sort's tables for a routing of T tokens x K routes over E local experts (the
// invariants of fi_moe_sort; tests/test_moe_emu.cc checks the sort kernel itself).
struct tables {
  std::vector<int32_t> tile_expert, mn_limit, p2e;
  int32_t num_tiles = 0;
  int max_tiles = 0;
};
static tables make_tables(const std::vector<int> &ids, int K, int E, int TS) {
  tables t;
  const int R = (int)ids.size();
  t.max_tiles = R <= E ? R : (R + (TS - 1) * E) / TS;
  t.tile_expert.assign(t.max_tiles, -1);
  t.mn_limit.assign(t.max_tiles, 0);
  t.p2e.assign((size_t)t.max_tiles * TS, -1);
  int tile = 0;
  for (int e = 0; e < E; e++) {
    std::vector<int> rs;
    for (int x = 0; x < R; x++)
      if (ids[x] == e) rs.push_back(x);
    for (size_t i = 0; i < rs.size(); i += TS) {
      const int n = (int)std::min(rs.size() - i, (size_t)TS);
      t.tile_expert[tile] = e;
      t.mn_limit[tile] = tile * TS + n;
      for (int j = 0; j < n; j++) t.p2e[(size_t)tile * TS + j] = rs[i + j];
      tile++;
    }
  }
  t.num_tiles = tile;
  (void)K;
  return t;
}

template <typename T, int BM, int BN, int GATED, int GATHER, int STAGES>
static void gemm_case(int T_tokens, int K, int E, int TS, int k, int n, int gate_first, int skew) {
  cases++;
  const int R = T_tokens * K, wrows = GATED ? 2 * n : n;
  std::vector<int> ids(R);
  for (int t = 0; t < T_tokens; t++) {
    // K distinct experts a token; skew sends most routes to expert 0, and expert E - 1 gets none.
    std::vector<int> pool;
    for (int e = 0; e < E - 1; e++) pool.push_back(e);
    for (int j = 0; j < K; j++) {
      int pick = skew && j == 0 ? 0 : (int)(urand() * (double)pool.size());
      if (pick >= (int)pool.size()) pick = (int)pool.size() - 1;
      ids[t * K + j] = pool[pick];
      pool.erase(pool.begin() + pick);
    }
  }
  const tables tb = make_tables(ids, K, E, TS);
  const int rows = tb.max_tiles * TS;
  // x [T, k] (gather) or a [rows, k] already permuted; W [E][wrows][k].
  std::vector<T> x((size_t)T_tokens * k), a((size_t)rows * k), w((size_t)E * wrows * k);
  std::vector<double> xd(x.size()), wd(w.size());
  for (size_t i = 0; i < x.size(); i++) x[i] = rnd<T>(1.0, &xd[i]);
  for (size_t i = 0; i < w.size(); i++) w[i] = rnd<T>(0.25, &wd[i]);
  for (int r = 0; r < rows; r++) {
    const int src = tb.p2e[r];
    for (int c = 0; c < k; c++)
      a[(size_t)r * k + c] = src >= 0 ? x[(size_t)(src / K) * k + c] : fi_from_float<T>(NAN);  // padding: poison
  }
  const T poison = fi_from_float<T>(12345.0f);
  std::vector<T> out((size_t)rows * n, poison);
  fi_moe_gemm_params_k p;
  memset(&p, 0, sizeof p);
  p.a = GATHER ? (const void *)x.data() : (const void *)a.data();
  p.w = w.data();
  p.out = out.data();
  p.tile_expert = tb.tile_expert.data(), p.tile_mn_limit = tb.mn_limit.data(), p.num_tiles = &tb.num_tiles;
  p.p2e = tb.p2e.data();
  p.a_stride = k, p.w_expert_stride = (int64_t)wrows * k, p.w_stride = k, p.out_stride = n;
  p.k = k, p.n = n, p.tile_size = TS, p.max_tiles = tb.max_tiles, p.top_k = K;
  p.up_row = GATED && gate_first ? n : 0, p.gate_row = GATED && !gate_first ? n : 0;
  p.experts = E, p.a_rows = GATHER ? T_tokens : rows;
  const unsigned blocks = (unsigned)(tb.max_tiles * (TS / BM) * (n / BN));
  emu::launch(blocks, 1, fi::moe::GEMM_THREADS, [&] { fi::moe::gemm<T, BM, BN, GATED, GATHER, STAGES>(p); });

  double num = 0, den = 0;
  int bad = 0;
  for (int r = 0; r < rows; r++) {
    const int src = tb.p2e[r];
    const int e = src >= 0 ? tb.tile_expert[r / TS] : -1;
    for (int j = 0; j < n; j++) {
      const float got = fi_to_float(out[(size_t)r * n + j]);
      if (src < 0) {  // padding: never written
        if (out[(size_t)r * n + j].bits != poison.bits && bad++ < 5)
          fprintf(stderr, "  padding row %d col %d written (%g)\n", r, j, got);
        continue;
      }
      const double *xr = &xd[(size_t)(src / K) * k];
      auto dot = [&](int wr) {
        double s = 0;
        const double *wv = &wd[((size_t)e * wrows + wr) * k];
        for (int c = 0; c < k; c++) s += xr[c] * wv[c];
        return s;
      };
      double ref;
      if (GATED) {
        const double up = dot(gate_first ? n + j : j), gt = dot(gate_first ? j : n + j);
        ref = up * gt / (1.0 + exp(-gt));
      } else {
        ref = dot(j);
      }
      num += (got - ref) * (got - ref), den += ref * ref;
      if (!(fabs(got - ref) <= 0.02 + 0.02 * fabs(ref)) && bad++ < 5)
        fprintf(stderr, "  row %d (route %d, expert %d) col %d: got %g, reference %g\n", r, src, e, j, got, ref);
    }
  }
  const double rel = sqrt(num / (den > 0 ? den : 1));
  const bool ok = !bad && rel <= 1e-2;
  if (!ok) fails++;
  printf("%s gemm %s BM=%d BN=%d gated=%d%s gather=%d stages=%d T=%d K=%d E=%d tile=%d k=%d n=%d tiles=%d: rel %.2e%s\n",
         ok ? "PASS" : "FAIL", sizeof(T) == 2 && std::is_same<T, fi_bf16>::value ? "bf16" : "f16", BM, BN, GATED,
         GATED ? (gate_first ? " (gate first)" : " (up first)") : "", GATHER, STAGES, T_tokens, K, E, TS, k, n,
         tb.num_tiles, rel, bad ? " (mismatches)" : "");
}

int main() {
  // (type, BM, BN, gated, gather, stages)(tokens, top_k, experts, tile, k, n, gate_first, skew)
  gemm_case<fi_bf16, 64, 64, 1, 1, 3>(40, 2, 5, 64, 128, 64, 0, 1);
  gemm_case<fi_half, 64, 64, 1, 0, 3>(24, 2, 4, 64, 192, 64, 1, 0);
  gemm_case<fi_bf16, 16, 64, 0, 0, 2>(3, 4, 9, 64, 128, 64, 0, 0);    // decode: a row or two a tile
  gemm_case<fi_bf16, 16, 128, 0, 1, 4>(5, 2, 4, 128, 320, 128, 0, 1);  // k of 5 steps over 4 stages
  gemm_case<fi_half, 128, 64, 1, 1, 2>(70, 2, 3, 128, 64, 64, 0, 1);
  gemm_case<fi_bf16, 128, 128, 0, 0, 3>(72, 2, 3, 256, 128, 128, 0, 1);  // 2 row blocks a sort tile
  gemm_case<fi_half, 64, 128, 0, 1, 3>(33, 3, 4, 256, 64, 256, 0, 0);
  printf("%d passed, %d failed\n", cases - fails, fails);
  return fails ? 1 : 0;
}
