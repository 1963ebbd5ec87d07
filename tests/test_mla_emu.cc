// test_mla_emu.cc: runs the MLA kernel's own source (kernels/mla.cuh, its portable path:
// ldmatrix and mma.sync emulated by lane shuffles, cp.async a plain copy) on the host, one
// block at a time with every thread a cooperative context (emu.h), against a float64
// reference of the absorbed form: both q tiles (16 rows on 4 warps, 64 rows on 8), the
// swizzled 576-wide tiles, the P fragments and row maxima shared between a row group's
// warps, causal masks across token boundaries of the packed rows, paged caches with
// shuffled pages (page sizes 1, 16, 64), empty requests, and split-KV partials through the
// real planner (rt_prefill_partition with MLA's tiles) and MLA's merge kernel (8 column blocks a tile).
// Outputs are poisoned (NaN) first. Not the CUDA inline-assembly paths: those run only on
// the GPU (tests/gpu/gpu_mla.c).
//
// Built and run by `make test` (not by `make test-asan`: the emulated threads switch
// stacks with ucontext); alone: make build/tests/test_mla_emu && build/tests/test_mla_emu
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <vector>

#include "emu.h"

#include "fi_port.cuh"
// The kernel's dynamic shared memory: one array for every block (blocks run one at a time),
// exactly the larger tile's FI_MLA_SMEM (a layout past it would write beyond the array).
#define FI_MLA_EMU_SMEM 1
#include "mla_params.h"
alignas(128) static unsigned char fi_mla_smem[FI_MLA_SMEM(16) > FI_MLA_SMEM(64) ? FI_MLA_SMEM(16) : FI_MLA_SMEM(64)];
#include "mla.cuh"

extern "C" {
#include "rt_prefill.h"
}

#include "emu_host.h"

static int fails = 0;
enum { DC = FI_MLA_DCKV, DP = FI_MLA_DKPE };

struct prob {
  int bf, H, ps, causal, split, graph;  // graph: CUDA-graph mode (the item count from the header, a larger grid)
  std::vector<int> lq, lkv;
};

template <typename T, int QT, int NS = FI_MLA_NS(QT)>
static void run(const prob &P) {
  const int B = (int)P.lq.size(), H = P.H, ps = P.ps;
  std::vector<int32_t> qo(B + 1, 0), kvp(B + 1, 0);
  for (int b = 0; b < B; b++) {
    qo[b + 1] = qo[b] + P.lq[b];
    kvp[b + 1] = kvp[b] + (P.lkv[b] + ps - 1) / ps + (b & 1);  // odd requests: a spare page
  }
  const int64_t N = qo[B], used = kvp[B], pages = used + 3;
  std::vector<uint16_t> qn(N * H * DC + 8), qp(N * H * DP + 8), ckv(pages * ps * DC), kpe(pages * ps * DP);
  for (auto &x : qn) x = to_bits((float)nrand(), P.bf);
  for (auto &x : qp) x = to_bits((float)nrand(), P.bf);
  for (auto &x : ckv) x = to_bits((float)(0.5 * nrand()), P.bf);
  for (auto &x : kpe) x = to_bits((float)nrand(), P.bf);
  std::vector<int32_t> perm(pages);
  for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
  for (int64_t i = pages - 1; i > 0; i--) std::swap(perm[i], perm[(int64_t)(urand() * (i + 1)) % (i + 1)]);
  std::vector<int32_t> indices(perm.begin(), perm.begin() + used);
  std::vector<uint16_t> out(N * H * DC, 0x7fff);  // NaN in both formats
  std::vector<float> lse(N * H, NAN);

  std::vector<int64_t> kvl(B + 1);
  for (int b = 0; b < B; b++) kvl[b] = P.lkv[b];
  const rt_prefill_batch bt = {B, qo.data(), kvl.data(), kvp.data(), H, 1, QT, FI_MLA_KT(QT), P.causal, -1};
  std::vector<int32_t> items(FI_PREFILL_ITEM_WORDS * 4096);
  int64_t chunk = 0, slots = 0;
  const int64_t n = rt_prefill_partition(&bt, P.split ? 100000 : 1, items.data(), 4096, P.split ? 512 : 0, &chunk, &slots);
  if (n < 0 || (P.split && chunk == 0)) {
    printf("FAIL mla_emulation planner: n %lld chunk %lld\n", (long long)n, (long long)chunk);
    fails++;
    return;
  }
  std::vector<float> po((size_t)(slots + 1) * FI_MLA_SLOT_ROWS * DC), pl((size_t)(slots + 1) * FI_MLA_SLOT_ROWS);
  fi_mla_kparams k;
  memset(&k, 0, sizeof k);
  k.q_nope = qn.data(), k.q_pe = qp.data(), k.out = out.data(), k.lse = lse.data();
  k.ckv = ckv.data(), k.kpe = kpe.data(), k.indices = indices.data(), k.items = items.data();
  k.partial_o = po.data(), k.partial_lse = pl.data();
  k.qn_stride_tok = (int64_t)H * DC, k.qn_stride_head = DC, k.qp_stride_tok = (int64_t)H * DP, k.qp_stride_head = DP;
  k.out_stride_tok = (int64_t)H * DC, k.out_stride_head = DC, k.lse_stride_tok = H, k.lse_stride_head = 1;
  k.ckv_stride_page = (int64_t)ps * DC, k.ckv_stride_slot = DC, k.kpe_stride_page = (int64_t)ps * DP, k.kpe_stride_slot = DP;
  k.num_items = (int32_t)n, k.num_heads = H, k.page_size = ps, k.causal = P.causal;
  int32_t header[FI_PREFILL_HDR_WORDS] = {(int32_t)n};
  const unsigned grid = (unsigned)n + (P.graph ? 5 : 0);
  if (P.graph) k.num_items = -1, k.header = header;
  const double sm = 1.0 / sqrt(192.0);
  k.scale_log2 = (float)(sm * 1.4426950408889634);
  emu::launch(grid, 1, 32 * FI_MLA_WARPS(QT), [&] { fi::mla::mla_paged<T, QT, NS>(k); });
  if (slots > 0 || P.graph) {
    fi_prefill_merge_params m;
    memset(&m, 0, sizeof m);
    m.out = out.data(), m.lse = lse.data(), m.items = items.data(), m.partial_o = po.data(), m.partial_lse = pl.data();
    m.out_stride_tok = k.out_stride_tok, m.out_stride_head = DC, m.lse_stride_tok = H, m.lse_stride_head = 1;
    m.num_items = k.num_items, m.header = header, m.num_kv_heads = 1, m.group = H, m.q_tile = FI_MLA_SLOT_ROWS;
    emu::launch(grid, DC / 64, 128, [&] { fi::mla::mla_merge<T>(m); });
  }

  // float64 reference of the absorbed form
  double num = 0, den = 0, lmax = 0;
  long nan = 0, infbad = 0;
  std::vector<double> s;
  for (int b = 0; b < B; b++) {
    const int lq = P.lq[b], lkv = P.lkv[b];
    auto kv_at = [&](int j, int col) -> double {  // key column col (< 576) of token j
      const int64_t page = indices[kvp[b] + j / ps], slot = j % ps;
      return col < DC ? from_bits(ckv[(page * ps + slot) * DC + col], P.bf)
                      : from_bits(kpe[(page * ps + slot) * DP + col - DC], P.bf);
    };
    for (int t = 0; t < lq; t++) {
      const int hi = P.causal ? t + lkv - lq + 1 : lkv;
      for (int h = 0; h < H; h++) {
        const int64_t row = ((int64_t)qo[b] + t) * H + h;
        s.assign(hi > 0 ? hi : 1, 0.0);
        double m = -INFINITY;
        for (int j = 0; j < hi; j++) {
          double x = 0;
          for (int i = 0; i < DC; i++) x += from_bits(qn[row * DC + i], P.bf) * kv_at(j, i);
          for (int i = 0; i < DP; i++) x += from_bits(qp[row * DP + i], P.bf) * kv_at(j, DC + i);
          s[j] = x * sm;
          if (s[j] > m) m = s[j];
        }
        double dn = 0;
        for (int j = 0; j < hi; j++) dn += exp(s[j] - m);
        for (int i = 0; i < DC; i++) {
          double a = 0;
          for (int j = 0; j < hi; j++) a += exp(s[j] - m) * kv_at(j, i);
          const double ref = dn > 0 ? a / dn : 0.0, got = from_bits(out[row * DC + i], P.bf);
          if (got != got) {
            nan++;
            continue;
          }
          num += (got - ref) * (got - ref);
          den += ref * ref;
        }
        const double rl = dn > 0 ? m + log(dn) : -INFINITY, gl = lse[row];
        if (isinf(rl) || isinf(gl) || gl != gl)
          infbad += !(isinf(rl) && isinf(gl) && rl < 0 && gl < 0);
        else if (fabs(gl - rl) > lmax)
          lmax = fabs(gl - rl);
      }
    }
  }
  const double err = den > 0 ? sqrt(num / den) : sqrt(num), tol = P.bf ? 1.5e-2 : 2e-3;
  const bool ok = err < tol && nan == 0 && infbad == 0 && lmax < 1e-2;
  // one PASS / FAIL line a case for tests/run_tests.sh
  printf("%s mla_emulation %s q_tile=%d stages=%d H=%d page=%d causal=%d B=%d items=%lld%s%s: out err %.3g (tol %.1g) lse %.3g nan %ld inf %ld\n",
         ok ? "PASS" : "FAIL", P.bf ? "bf16" : "f16", QT, NS, H, ps, P.causal, B, (long long)n, chunk ? " split" : "", P.graph ? " graph" : "", err,
          tol, lmax, nan, infbad);
  fails += !ok;
}

int main() {
  // Decode (one query token, H = 16 rows: the 16-row tile on 4 warps), pages of 16 and 1,
  // long enough for several 64-token tiles and a ragged last one; split or not.
  run<fi_half, 16>({0, 16, 16, 1, 0, 0, {1, 1}, {37, 150}});
  run<fi_bf16, 16>({1, 16, 1, 1, 1, 0, {1, 1, 1}, {300, 9, 64}});
  // MTP / chunked prefill: 2-3 query tokens x 16 heads (the 64-row tile on 8 warps), a
  // causal diagonal inside a tile; page 64; an empty request and a request without KV.
  run<fi_bf16, 64>({1, 16, 64, 1, 0, 0, {2, 3, 0}, {70, 5, 0}});
  run<fi_half, 64>({0, 16, 16, 1, 1, 0, {3, 2}, {300, 130}});
  // Fewer heads (rows of several tokens a tile), non-causal, and a tile cut mid-token.
  run<fi_bf16, 64>({1, 6, 16, 0, 0, 0, {13, 1}, {40, 33}});
  run<fi_half, 16>({0, 3, 16, 1, 1, 0, {7}, {290}});
  // CUDA-graph mode (items from the header, blocks past them idle; split and merge), and a
  // request with query rows but no KV (non-causal: out 0, lse -inf).
  run<fi_bf16, 64>({1, 16, 16, 1, 1, 1, {2, 1}, {300, 260}});
  run<fi_half, 16>({0, 8, 16, 0, 0, 1, {2, 1}, {0, 45}});
  // A long context split into 9 chunks (the merge's two passes over many partials).
  run<fi_bf16, 16>({1, 16, 64, 1, 1, 0, {1}, {2100}});
  // The 16-row tile's two-stage shape (FI_MLA_STAGES=2): split and not, page 1.
  run<fi_half, 16, 2>({0, 16, 16, 1, 0, 0, {1, 1}, {37, 150}});
  run<fi_bf16, 16, 2>({1, 16, 1, 1, 1, 0, {1, 1, 1}, {300, 9, 64}});
  fprintf(stderr, "%s\n", fails ? "test_mla_emu: FAILED" : "test_mla_emu: all passed");
  return fails != 0;
}
