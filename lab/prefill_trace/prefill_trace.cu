// prefill_trace.cu: fi-bench prefill's 64 x 1024 causal row (32/8 heads, D = 128, bf16, page
// 16 in random order) outside the runtime, on the 2x128 wgmma kernel with a producer
// (FI_TRACE_SHAPE: 2x64s4, 3x64, 3x128 and 3x128s3, head_dim 64's default; the head_dim-64
// shapes run at head_dim 64)
// (kernels/prefill_wgmma.cuh built by nvcc with FI_WG_TRACE): times it, then traces one
// launch (clock64 at each phase of every work unit, per consumer warpgroup and for the
// producer) and prints where a unit's time goes; 64 of its output rows are checked against
// a float64 reference. Usage: prefill-trace [B L H_qo H_kv causal] [trace.bin];
// FI_TRACE_CAP=0 runs the kernel without the soft cap's code (as the runtime does for a
// call without one), else with it. Work items as rt_prefill_plan.c lays them out (no
// split; each request's last q tile first; units taken from the header's counter). The
// trace file: int32 {blocks, units a block, slots, 0}, then u64 [block][unit][role 0-3]
// [slot] (prefill_wgmma.cuh's FI_WG_MARK calls; roles: consumer warpgroups, then the
// producer), then u64 [block][4] {globaltimer, clock, SM} at each block's start.
#include <cuda_runtime.h>
#include <stdint.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <array>

// -DFI_TRACE_NOMARK: the kernel without its phase marks (each an untaken branch when not
// tracing), so that the untraced time is the runtime's kernel's; the trace then is empty
#ifndef FI_TRACE_NOMARK
#define FI_WG_TRACE 1
#endif
#include "fi_port.cuh"
#define MAXU 256
#define SLOTS 64
__constant__ unsigned long long *g_trace;
// slots 55-58: values (tiles, unit, first and last turn); else the SM clock.
__device__ __forceinline__ void fi_wg_mark(int role, int seq, int slot, int val) {
  if ((threadIdx.x & 127) != 0 || g_trace == nullptr) return;
  const int s = seq < MAXU - 1 ? seq : MAXU - 1;
  unsigned long long v = slot >= 55 && slot <= 58 ? (unsigned long long)val : (unsigned long long)clock64();
  g_trace[((size_t)(blockIdx.x * MAXU + s) * 4 + role) * SLOTS + slot] = v;
}
#include "prefill_wgmma.cuh"
#include "cuda_bench.cuh"

// D: head_dim; KT: kv tile; NWG: consumer warpgroups (q tile 64 NWG rows); NS: stages.
// FI_TRACE_WS (build flag): the kernel's WS, 2 (producer and ping-pong) unless set.
#ifndef FI_TRACE_WS
#define FI_TRACE_WS 2
#endif
template <int D, int KT, int NWG, int NS, int CAP>
__global__ void __launch_bounds__(128 * (NWG + 1), 1) kpf(const fi_prefill_kparams p) {
  if (threadIdx.x == 0 && g_trace) {
    unsigned long long gt, ck = clock64();
    unsigned sm;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    unsigned long long *h = g_trace + (size_t)gridDim.x * MAXU * 4 * SLOTS + 4 * blockIdx.x;
    h[0] = gt;
    h[1] = ck;
    h[2] = sm;
  }
  fi::wg::prefill_wgmma<fi_bf16, D, KT, NWG, 0, 1, FI_TRACE_WS, NS, CAP>(p);
}

__global__ void kfill(uint16_t *a, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    float f = ((h & 0xffff) / 65536.0f - 0.5f) * 2.0f;
    uint32_t b;
    memcpy(&b, &f, 4);
    a[i] = (uint16_t)(b >> 16);
  }
}

int main(int argc, char **argv) {
  int B = 64, L = 1024, HQ = 32, HKV = 8, causal = 1;
  const char *out = nullptr;
  if (argc >= 6) {
    B = atoi(argv[1]); L = atoi(argv[2]); HQ = atoi(argv[3]); HKV = atoi(argv[4]); causal = atoi(argv[5]);
    if (argc >= 7) out = argv[6];
  } else if (argc == 2) out = argv[1];
  // FI_TRACE_SHAPE: 2x128 (head_dim 128, the default above 2048 rows), 2x64s4 (head_dim
  // 128, 64-token tiles, four stages), 3x64 (head_dim 64, three consumers, 64-token
  // tiles), 3x128 (head_dim 64, three consumers, 128-token tiles, P through shared
  // memory, two stages), 3x128s3 (the same on three stages: head_dim 64's default above
  // 2048 rows, with FI_TRACE_WS=2); FI_TRACE_CAP=0: without the soft cap's code.
  const char *she = getenv("FI_TRACE_SHAPE"), *ce = getenv("FI_TRACE_CAP");
  static const char *const names[5] = {"2x128", "2x64s4", "3x64", "3x128", "3x128s3"};
  int shape = 0;
  for (int i = 1; i < 5; i++)
    if (she && strcmp(she, names[i]) == 0) shape = i;
  const int cap = !(ce && atoi(ce) == 0);
  typedef void (*kfn)(const fi_prefill_kparams);
  static const kfn kerns[5][2] = {{kpf<128, 128, 2, 2, 0>, kpf<128, 128, 2, 2, 1>},
                                  {kpf<128, 64, 2, 4, 0>, kpf<128, 64, 2, 4, 1>},
                                  {kpf<64, 64, 3, 2, 0>, kpf<64, 64, 3, 2, 1>},
                                  {kpf<64, 128, 3, 2, 0>, kpf<64, 128, 3, 2, 1>},
                                  {kpf<64, 128, 3, 3, 0>, kpf<64, 128, 3, 3, 1>}};
  static const int smems[5] = {fi::wg::smem_size<128, 128, 2, 2, 2>::value, fi::wg::smem_size<128, 64, 2, 2, 4>::value,
                               fi::wg::smem_size<64, 64, 3, 2, 2>::value, fi::wg::smem_size<64, 128, 3, 2, 2>::value,
                               fi::wg::smem_size<64, 128, 3, 2, 3>::value};
  const int D = shape >= 2 ? 64 : 128, NWG = shape >= 2 ? 3 : 2, PS = 16, G = HQ / HKV, QT = 64 * NWG, GRID = 132;
  const int ppr = (L + PS - 1) / PS, pages = B * ppr;
  const int64_t nq = (int64_t)B * L * HQ * D, nkv = (int64_t)pages * PS * HKV * D;
  uint16_t *q, *k, *v, *o;
  CK(cudaMalloc(&q, nq * 2));
  CK(cudaMalloc(&o, nq * 2));
  CK(cudaMalloc(&k, nkv * 2));
  CK(cudaMalloc(&v, nkv * 2));
  kfill<<<1024, 256>>>(q, nq, 1);
  kfill<<<1024, 256>>>(k, nkv, 2);
  kfill<<<1024, 256>>>(v, nkv, 3);
  std::vector<int32_t> idx(pages);
  for (int i = 0; i < pages; i++) idx[i] = i;
  srand(7);
  for (int i = pages - 1; i > 0; i--) std::swap(idx[i], idx[rand() % (i + 1)]);
  std::vector<int32_t> items, hdr(16, 0);
  const int rows = L * G;
  for (int b = 0; b < B; b++)
    for (int r0 = (rows - 1) / QT * QT; r0 >= 0; r0 -= QT) {
      const int nr = rows - r0 < QT ? rows - r0 : QT, tq1 = (r0 + nr - 1) / G;
      const int hi = causal && tq1 + 1 < L ? tq1 + 1 : L;
      int32_t it[12] = {b, r0, nr, 0, hi, 1 << 16, b * L, L, b * ppr, L, 0, 0};
      items.insert(items.end(), it, it + 12);
    }
  const int n = (int)items.size() / 12;
  hdr[0] = n; hdr[1] = B; hdr[2] = QT; hdr[6] = 1;
  int32_t *d_idx, *d_hdr, *d_items;
  CK(cudaMalloc(&d_idx, pages * 4));
  CK(cudaMalloc(&d_hdr, 64));
  CK(cudaMalloc(&d_items, items.size() * 4));
  CK(cudaMemcpy(d_idx, idx.data(), pages * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_hdr, hdr.data(), 64, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_items, items.data(), items.size() * 4, cudaMemcpyHostToDevice));
  fi_prefill_kparams p;
  memset(&p, 0, sizeof p);
  p.q = q; p.out = o; p.k = k; p.v = v; p.indices = d_idx; p.header = d_hdr; p.items = d_items;
  p.q_stride_tok = (int64_t)HQ * D; p.q_stride_head = D;
  p.out_stride_tok = (int64_t)HQ * D; p.out_stride_head = D;
  p.kv_stride_page = (int64_t)PS * HKV * D; p.kv_stride_slot = (int64_t)HKV * D; p.kv_stride_head = D;
  p.num_items = n; p.num_kv_heads = HKV; p.group = G; p.page_size = PS; p.causal = causal;
  p.window_left = -1; p.scale_log2 = (float)(1.0 / sqrt((double)D) * 1.4426950408889634); p.v_scale = 1.0f;
  const int smem = smems[shape];
  const kfn kern = kerns[shape][cap];
  printf("kernel: %s, CAP=%d\n", names[shape], cap);
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const double flops = 4.0 * B * HQ * (double)L * L * D / (causal ? 2 : 1);
  auto launch = [&](int) { kern<<<GRID, 128 * (NWG + 1), smem>>>(p); };
  const double us = median_launch_us(launch, 3, 9, 5);
  printf("B=%d L=%d %d/%d causal=%d: %d units, %.1f us, %.1f TFLOP/s (untraced)\n", B, L, HQ, HKV, causal, n * HKV, us,
         flops / us * 1e-6);
  {  // one launch between two events, as fi-bench prefill times it (the line above: batches of 5)
    const double us1 = median_launch_us(launch, 1, 9, 1);
    printf("isolated launches: %.1f us, %.1f TFLOP/s\n", us1, flops / us1 * 1e-6);
  }
  {  // a few output rows against a float64 reference (the harness runs the real kernel)
    std::vector<uint16_t> hq(nq), hk(nkv), hv(nkv), ho(nq);
    CK(cudaMemcpy(hq.data(), q, nq * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hk.data(), k, nkv * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hv.data(), v, nkv * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ho.data(), o, nq * 2, cudaMemcpyDeviceToHost));
    auto f = [](uint16_t x) { uint32_t b = (uint32_t)x << 16; float r; memcpy(&r, &b, 4); return (double)r; };
    double num = 0, den = 0;
    std::vector<std::array<int, 3>> picks = {{0, 0, 0}, {B - 1, L - 1, HQ - 1}, {B / 2, L / 3, 5 % HQ}, {1 % B, L / 2 + 7, 17 % HQ}};
    for (int i = 0; i < 60; i++) picks.push_back({rand() % B, rand() % L, rand() % HQ});
    for (auto &pk : picks) {
      const int b = pk[0], tq = pk[1], h = pk[2], hk_ = h / G, hi = causal ? tq + 1 : L;
      const uint16_t *qr = &hq[((size_t)(b * L + tq) * HQ + h) * D];
      std::vector<double> sc(hi), acc(D, 0.0);
      double mx = -1e300, den2 = 0;
      for (int j = 0; j < hi; j++) {
        const size_t kr = (((size_t)idx[b * ppr + j / PS] * PS + j % PS) * HKV + hk_) * D;
        double d = 0;
        for (int c = 0; c < D; c++) d += f(qr[c]) * f(hk[kr + c]);
        sc[j] = d / sqrt((double)D);
        mx = std::max(mx, sc[j]);
      }
      for (int j = 0; j < hi; j++) {
        const size_t kr = (((size_t)idx[b * ppr + j / PS] * PS + j % PS) * HKV + hk_) * D;
        const double e = exp(sc[j] - mx);
        den2 += e;
        for (int c = 0; c < D; c++) acc[c] += e * f(hv[kr + c]);
      }
      for (int c = 0; c < D; c++) {
        const double r = acc[c] / den2, g = f(ho[((size_t)(b * L + tq) * HQ + h) * D + c]);
        num += (g - r) * (g - r);
        den += r * r;
      }
    }
    printf("64 rows against float64: relative error %.2e\n", sqrt(num / den));
  }
  // traced launch
  const size_t tn = (size_t)GRID * MAXU * 4 * SLOTS + 4 * GRID;
  unsigned long long *dt;
  CK(cudaMalloc(&dt, tn * 8));
  CK(cudaMemset(dt, 0, tn * 8));
  CK(cudaMemcpyToSymbol(g_trace, &dt, sizeof dt));
  const double ust = median_launch_us(launch, 1, 3, 1);
  CK(cudaMemset(dt, 0, tn * 8));
  launch(0);
  CK(cudaDeviceSynchronize());
  std::vector<unsigned long long> t(tn);
  CK(cudaMemcpy(t.data(), dt, tn * 8, cudaMemcpyDeviceToHost));
  printf("traced: %.1f us, %.1f TFLOP/s\n", ust, flops / ust * 1e-6);
  if (out) {
    FILE *f = fopen(out, "wb");
    int32_t h[4] = {GRID, MAXU, SLOTS, 0};
    fwrite(h, 4, 4, f);
    fwrite(t.data(), 8, tn, f);
    fclose(f);
  }
  // Summary: per consumer unit (both warpgroups), cycles of each phase, averaged over units
  // of each tile count; cycles -> us at the clock measured from block 0's span.
  auto T = [&](int blk, int s, int role, int slot) -> unsigned long long {
    return t[((size_t)(blk * MAXU + s) * 4 + role) * SLOTS + slot];
  };
  double sum[8][20] = {{0}};
  int cnt[20] = {0};
  long long tot_units = 0;
  for (int blk = 0; blk < GRID; blk++)
    for (int s = 1; s + 1 < MAXU; s++) {
      for (int role = 0; role < NWG; role++) {
        const unsigned long long u0 = T(blk, s, role, 0), un = T(blk, s + 1, role, 0);
        if (!u0 || !un) continue;
        const int nt = (int)T(blk, s, role, 55), ta = (int)T(blk, s, role, 57), tb = (int)T(blk, s, role, 58);
        if (nt < 1 || nt > 16 || tb > 16) continue;
        tot_units++;
        const double setup = (double)(T(blk, s, role, 2 + 3 * ta) - u0);  // start -> first turn ready
        double wait = 0, busy = 0, gap = 0;
        for (int x = ta; x <= tb; x++) {
          wait += (double)(T(blk, s, role, 3 + 3 * x) - T(blk, s, role, 2 + 3 * x));
          busy += (double)(T(blk, s, role, 4 + 3 * x) - T(blk, s, role, 3 + 3 * x));
          if (x < tb) gap += (double)(T(blk, s, role, 2 + 3 * (x + 1)) - T(blk, s, role, 4 + 3 * x));
        }
        const double epi = (double)(T(blk, s, role, 54) - T(blk, s, role, 4 + 3 * tb));
        const double next = (double)(un - T(blk, s, role, 54));
        const double total = (double)(un - u0);
        sum[0][nt] += setup; sum[1][nt] += wait; sum[2][nt] += busy; sum[3][nt] += gap;
        sum[4][nt] += epi; sum[5][nt] += next; sum[6][nt] += total;
        cnt[nt]++;
      }
    }
  printf("consumer warpgroup cycles a unit by its kv tiles (units %lld):\n", tot_units);
  printf("tiles units  setup(start->1st turn ready)  turn-wait  turn-busy  between-turns  epilogue  next-unit-wait  total  total/tile\n");
  for (int nt = 1; nt <= 16; nt++)
    if (cnt[nt])
      printf("%5d %5d  %8.0f %10.0f %10.0f %10.0f %9.0f %10.0f %9.0f %8.0f\n", nt, cnt[nt], sum[0][nt] / cnt[nt],
             sum[1][nt] / cnt[nt], sum[2][nt] / cnt[nt], sum[3][nt] / cnt[nt], sum[4][nt] / cnt[nt], sum[5][nt] / cnt[nt],
             sum[6][nt] / cnt[nt], sum[6][nt] / cnt[nt] / nt);
  // per-turn busy time by position (first, middle, last) for 8-tile units
  for (int nt = 4; nt <= 8; nt += 4) {
    double b[18] = {0}, w[18] = {0};
    int c = 0;
    for (int blk = 0; blk < GRID; blk++)
      for (int s = 1; s + 1 < MAXU; s++)
        for (int role = 0; role < NWG; role++) {
          if (!T(blk, s, role, 0) || (int)T(blk, s, role, 55) != nt || T(blk, s, role, 57) != 0) continue;
          c++;
          for (int x = 0; x <= nt; x++) {
            b[x] += (double)(T(blk, s, role, 4 + 3 * x) - T(blk, s, role, 3 + 3 * x));
            w[x] += (double)(T(blk, s, role, 3 + 3 * x) - T(blk, s, role, 2 + 3 * x));
          }
        }
    if (!c) continue;
    printf("%d-tile units (%d): turn busy / turn wait cycles by turn:", nt, c);
    for (int x = 0; x <= nt; x++) printf(" %.0f/%.0f", b[x] / c, w[x] / c);
    printf("\n");
  }
  // producer: take -> item -> Q issued -> tile 0 stage free, a unit
  double ps[4] = {0};
  int pc = 0;
  for (int blk = 0; blk < GRID; blk++)
    for (int s = 1; s + 1 < MAXU; s++) {
      if (!T(blk, s, NWG, 0) || !T(blk, s, NWG, 3)) continue;
      pc++;
      ps[0] += (double)(T(blk, s, NWG, 1) - T(blk, s, NWG, 0));
      ps[1] += (double)(T(blk, s, NWG, 2) - T(blk, s, NWG, 1));
      ps[2] += (double)(T(blk, s, NWG, 3) - T(blk, s, NWG, 2));
      ps[3] += (double)(T(blk, s, NWG, 0) - T(blk, s - 1, NWG, 50));
    }
  if (pc)
    printf("producer cycles a unit (%d): slot->item %.0f, item->Q issued %.0f, Q->tile-0 stage free %.0f, last tile issued->next slot %.0f\n",
           pc, ps[0] / pc, ps[1] / pc, ps[2] / pc, ps[3] / pc);
  // consumer vs producer: when was the unit's Q published relative to the consumer's wait
  // clock rate from block 0: globaltimer not per unit; report the kernel's clocks per us
  printf("(cycles at ~1.98 GHz: 1980 a microsecond)\n");
  return 0;
}
