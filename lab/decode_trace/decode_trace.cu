// decode_trace.cu: batch decode at B = 1, L = 8192, 32/8 heads, D = 128, bf16, page 16 in
// random order (fi-bench decode's "target 2.0" row) outside the runtime: times kernel and
// plan variants side by side (back-to-back launches over 8 page sets, 20 and 5 a batch,
// median of 9) and traces the phases of consecutive launches per block and warp. Built with nvcc from a
// copy of kernels/decode.cuh that patch_trace.py instruments (make build/decode-trace);
// the runtime's kernels are untouched. Usage: decode-trace [trace.bin]. The trace file:
// per traced launch, int32 {items, kv_heads, warps} then u64 [items * kv_heads][warps][16]
// (slots: 0 start globaltimer, 1 start clock, 2 item read, 3 first page id (warp 0: q
// built too), 4 q barrier, 5 first step computed, 6 loop end, 7 warps merged, 8 partial
// stored + fence, 9 counter, 10 merge end (last block), 11 globaltimer after the
// counter, 12 SM id, 13 sink, 14 globaltimer at the merge's end, 15 globaltimer at the
// block's entry, before the PDL wait; last block: 16 counter reset, 17 first merge batch
// loaded, 18 merge combined).
#include "fi_port.cuh"
#include "decode.cuh"
#include "cuda_bench.cuh"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cuda_runtime.h>
#include <unistd.h>
using namespace fi::dec;

template <int W, int PF, int TRC>
__global__ void __launch_bounds__(W * 32) kdec(fi_decode_params p) {
  decode<fi_bf16, fi_bf16, 128, 8, PF, 0, 0, W, TRC>(p);
}
__global__ void kempty(fi_decode_params p) {}
// Reads every K and V row of the items' tokens (same blocks/heads as the decode), 16 B a lane.
__global__ void __launch_bounds__(256) kread(fi_decode_params p, unsigned *sink) {
  const int item = blockIdx.x, hkv = blockIdx.y;
  const int32_t *ip = p.items + FI_DECODE_ITEM_WORDS * item;
  const int lo = ip[1], hi = ip[2];
  const int64_t pb = ip[4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned acc = 0;
  // rows: 2*(hi-lo) (K then V), 2 rows per warp instruction, 8 warps
  const int rows = 2 * (hi - lo);
  for (int r0 = warp * 2; r0 < rows; r0 += 16 * 8) {
    uint32_t x[8][4];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      int r = r0 + u * 16 + (lane >> 4);
      if (r >= rows) r = rows - 1;
      const int tok = lo + (r >> 1);
      const int page = p.indices[pb + tok / p.page_size], slot = tok % p.page_size;
      const fi_bf16 *base = static_cast<const fi_bf16 *>((r & 1) ? p.v : p.k);
      ldg_nc<4>(base + (int64_t)page * p.kv_stride_page + (int64_t)slot * p.kv_stride_slot + hkv * p.kv_stride_head + 8 * (lane & 15), x[u]);
    }
#pragma unroll
    for (int u = 0; u < 8; u++) acc ^= x[u][0] ^ x[u][1] ^ x[u][2] ^ x[u][3];
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}
__global__ void kfill(uint16_t *a, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    float f = ((h & 0xffff) / 65536.0f - 0.5f) * 2.0f;
    uint32_t b; memcpy(&b, &f, 4); a[i] = (uint16_t)(b >> 16);
  }
}
static float bf(uint16_t x) { uint32_t b = (uint32_t)x << 16; float f; memcpy(&f, &b, 4); return f; }

const int L = 8192, HQ = 32, HKV = 8, D = 128, PS = 16, NP = L / PS;
const int64_t POOL = 16384, PAGE_EL = (int64_t)PS * HKV * D;
uint16_t *dk, *dv, *dq, *dout; int32_t *dix[8], *dws; float *dpo, *dpl; int32_t *dcnt;  // dix: 8 random page sets
unsigned *dsink; unsigned long long *dtr;
int nsets = 8;
static fi_decode_params base_params() {
  fi_decode_params p; memset(&p, 0, sizeof p);
  p.q = dq; p.out = dout; p.k = dk; p.v = dv;
  p.q_stride[0] = HQ * D; p.q_stride[1] = D; p.out_stride[0] = HQ * D; p.out_stride[1] = D;
  p.kv_stride_page = PAGE_EL; p.kv_stride_slot = HKV * D; p.kv_stride_head = D;
  p.num_kv_heads = HKV; p.group = HQ / HKV; p.page_size = PS;
  p.scale_log2 = (float)(1.0 / sqrt(128.0) * 1.4426950408889634); p.v_scale = 1.0f;
  p.header = dws; p.items = dws + FI_DECODE_HDR_WORDS; p.counters = dcnt; p.partial_o = dpo; p.partial_lse = dpl;
  return p;
}
static int make_items(int chunk_pages) {  // uploads header+items, returns n
  std::vector<int32_t> t(FI_DECODE_HDR_WORDS + 1024 * 8, 0);
  int nc = (NP + chunk_pages - 1) / chunk_pages;
  for (int k = 0; k < nc; k++) {
    int32_t *it = &t[FI_DECODE_HDR_WORDS + 8 * k];
    it[0] = 0; it[1] = k * chunk_pages * PS; it[2] = std::min(L, (k + 1) * chunk_pages * PS);
    it[3] = k | (nc << 16); it[4] = 0; it[5] = L;
  }
  t[0] = nc; t[1] = 1; t[2] = chunk_pages; t[3] = nc > 1;
  CK(cudaMemcpy(dws, t.data(), t.size() * 4, cudaMemcpyHostToDevice));
  return nc;
}
typedef void (*kfn)(fi_decode_params);
// mode 0 plain launches, 3 read kernel, 4 empty kernel, 5 programmatic dependent launch
// (as the runtime launches on sm_90), all over the rotating page sets;
// pre: fi_decode_params.pre_prefetch
struct V { const char *name; kfn f; int W, chunk, mode, pre; };
static double time_var(const V &v, int batch, int *nitems) {
  int n = make_items(v.chunk); *nitems = n;
  fi_decode_params p = base_params(); p.num_items = n; p.pre_prefetch = v.pre;
  dim3 grid(n, HKV), blk(v.W * 32);
  auto launch = [&](int i) {
    p.indices = dix[i % nsets];
    if (v.mode == 3) kread<<<grid, 256>>>(p, dsink);
    else if (v.mode == 4) kempty<<<grid, blk>>>(p);
    else if (v.mode == 5) launch_pdl(v.f, grid, blk, p);
    else v.f<<<grid, blk>>>(p);
    CK(cudaGetLastError());
  };
  return median_launch_us(launch, 10, 9, batch);
}
static double check(int) {  // output vs CPU reference for set 0 (after a run of a variant)
  std::vector<uint16_t> o(HQ * D), q(HQ * D);
  std::vector<int32_t> ix(NP);
  CK(cudaMemcpy(o.data(), dout, o.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(q.data(), dq, q.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ix.data(), dix[0], NP * 4, cudaMemcpyDeviceToHost));
  static bool got = false;
  // gather only needed pages
  static std::vector<uint16_t> kp, vp;
  if (!got) {
    kp.resize((size_t)NP * PAGE_EL); vp.resize((size_t)NP * PAGE_EL);
    for (int i = 0; i < NP; i++) {
      CK(cudaMemcpy(&kp[(size_t)i * PAGE_EL], dk + (int64_t)ix[i] * PAGE_EL, PAGE_EL * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(&vp[(size_t)i * PAGE_EL], dv + (int64_t)ix[i] * PAGE_EL, PAGE_EL * 2, cudaMemcpyDeviceToHost));
    }
    got = true;
  }
  double num = 0, den = 0;
  std::vector<double> s(L);
  for (int h = 0; h < HQ; h++) {
    int hk = h / (HQ / HKV); double mx = -1e300;
    for (int t = 0; t < L; t++) {
      const uint16_t *kr = &kp[(size_t)(t / PS) * PAGE_EL + (t % PS) * HKV * D + hk * D];
      double a = 0; for (int d = 0; d < D; d++) a += (double)bf(q[h * D + d]) * bf(kr[d]);
      s[t] = a / sqrt(128.0); mx = std::max(mx, s[t]);
    }
    double den2 = 0; for (int t = 0; t < L; t++) { s[t] = exp(s[t] - mx); den2 += s[t]; }
    for (int d = 0; d < D; d++) {
      double acc = 0;
      for (int t = 0; t < L; t++) acc += s[t] * bf(vp[(size_t)(t / PS) * PAGE_EL + (t % PS) * HKV * D + hk * D + d]);
      acc /= den2; double g = bf(o[h * D + d]);
      num += (g - acc) * (g - acc); den += acc * acc;
    }
  }
  return sqrt(num / den);
}
int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);  // what ran is printed even if a later step fails
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&dk, POOL * PAGE_EL * 2)); CK(cudaMalloc(&dv, POOL * PAGE_EL * 2));
  CK(cudaMalloc(&dq, HQ * D * 2)); CK(cudaMalloc(&dout, HQ * D * 2));
  kfill<<<1024, 256>>>(dk, POOL * PAGE_EL, 1); kfill<<<1024, 256>>>(dv, POOL * PAGE_EL, 2); kfill<<<1, 256>>>(dq, HQ * D, 3);
  std::vector<int32_t> perm(POOL); for (int i = 0; i < POOL; i++) perm[i] = i;
  uint64_t r = 0x2545F4914F6CDD1Dull;
  for (int i = POOL - 1; i > 0; i--) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; int j = r % (i + 1); std::swap(perm[i], perm[j]); }
  for (int s = 0; s < 8; s++) {
    CK(cudaMalloc(&dix[s], NP * 4));
    CK(cudaMemcpy(dix[s], &perm[s * NP], NP * 4, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&dws, (FI_DECODE_HDR_WORDS + 1024 * 8) * 4));
  CK(cudaMalloc(&dcnt, 64 * 4)); CK(cudaMemset(dcnt, 0, 64 * 4));
  CK(cudaMalloc(&dpo, 1024 * HQ * D * 4)); CK(cudaMalloc(&dpl, 1024 * HQ * 4));
  CK(cudaMalloc(&dsink, 4));
  const size_t trn = (size_t)10 * 1024 * HKV * 8 * NSL;  // 10 launch slots
  CK(cudaMalloc(&dtr, trn * 8)); CK(cudaMemset(dtr, 0, trn * 8));
  CK(cudaMemcpyToSymbol(g_tr, &dtr, sizeof dtr));
  {
    int nb; 
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kdec<4, 1, 0>, 128, 0)); printf("occupancy W4: %d blocks/SM\n", nb);
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kdec<2, 1, 0>, 64, 0)); printf("occupancy W2: %d blocks/SM\n", nb);
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kdec<1, 1, 0>, 32, 0)); printf("occupancy W1: %d blocks/SM\n", nb);
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kdec<8, 1, 0>, 256, 0)); printf("occupancy W8: %d blocks/SM\n", nb);
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kdec<4, 0, 0>, 128, 0)); printf("occupancy W4 PF0: %d blocks/SM\n", nb);
  }
  const double bytes = 2.0 * L * HKV * D * 2 + 2.0 * HQ * D * 2;
  V vars[] = {
    {"W4 c16 plain launch", kdec<4, 1, 0>, 4, 16, 0, 0}, {"W4 c16 PDL", kdec<4, 1, 0>, 4, 16, 5, 0},
    {"W4 c16 PDL + pre 256 (runtime default)", kdec<4, 1, 0>, 4, 16, 5, 256},
    {"W4 c16 PDL + pre 256, fenced counter (before)", kdec<4, 1, 8>, 4, 16, 5, 256},
    {"W4 c16 PDL + pre 256, no merge (bound)", kdec<4, 1, 4>, 4, 16, 5, 256},
    {"W4 c16 PDL + pre 256, trace build", kdec<4, 1, 1>, 4, 16, 5, 256},
    {"W4 c8 PDL + pre 256", kdec<4, 1, 0>, 4, 8, 5, 256}, {"W4 c12 PDL + pre 256", kdec<4, 1, 0>, 4, 12, 5, 256},
    {"W4 c20 PDL + pre 384", kdec<4, 1, 0>, 4, 20, 5, 384}, {"W4 c24 PDL + pre 384", kdec<4, 1, 0>, 4, 24, 5, 384},
    {"W4 c32 PDL + pre 384", kdec<4, 1, 0>, 4, 32, 5, 384},
    {"W2 c8 PDL + pre 256", kdec<2, 1, 0>, 2, 8, 5, 256}, {"W2 c8 PDL + pre 256, no merge (bound)", kdec<2, 1, 4>, 2, 8, 5, 256},
    {"W8 c32 PDL + pre 512", kdec<8, 1, 0>, 8, 32, 5, 512},
    {"read-only kernel c16", nullptr, 8, 16, 3}, {"empty kernel 256 blocks", nullptr, 4, 16, 4},
  };

  printf("| variant | items | us (batch 20) | us (batch 5) | TB/s (b20) |\n|---|---|---|---|---|\n");
  for (auto &v : vars) {
    int n;
    double t20 = time_var(v, 20, &n), t5 = time_var(v, 5, &n);
    printf("| %s | %d | %.2f | %.2f | %.2f |\n", v.name, n, t20, t5, bytes / (t20 * 1e-6) / 1e12);
    fflush(stdout);
  }
  // correctness of the default
  { int n = make_items(16); fi_decode_params p = base_params(); p.num_items = n; p.indices = dix[0];
    kdec<4, 1, 0><<<dim3(n, HKV), 128>>>(p); CK(cudaDeviceSynchronize()); printf("W4 c16 rel err %.3g\n", check(4));
    n = make_items(8); p.num_items = n; kdec<2, 1, 0><<<dim3(n, HKV), 64>>>(p); CK(cudaDeviceSynchronize()); printf("W2 c8 rel err %.3g\n", check(2)); }
  // trace: W4 c16 and W2 c8 as the runtime launches them (programmatic dependent launch,
  // pre-wait prefetch 256), and W4 c16 with plain launches, every launch of a back-to-back run of 10 traced into its own
  // slot; launch 5's phases, and launches 4-6 side by side on launch 4's clock.
  const int tw[3] = {4, 4, 2}, tc[3] = {16, 16, 8}, tpdl[3] = {1, 0, 1}, tpre[3] = {256, 0, 256};
  FILE *f = fopen(argc > 1 ? argv[1] : "trace.bin", "wb");
  for (int ti = 0; ti < 3; ti++) {
    int n = make_items(tc[ti]); fi_decode_params p = base_params(); p.num_items = n; p.pre_prefetch = tpre[ti];
    const int W = tw[ti], nb = n * HKV;
    const int64_t per = (int64_t)nb * W * NSL;
    dim3 grid(n, HKV), blk(W * 32);
    CK(cudaDeviceSynchronize()); CK(cudaMemset(dtr, 0, trn * 8));
    for (int i = 0; i < 10; i++) {
      p.indices = dix[i % 8];
      p.lse_stride[0] = i * per;
      if (!tpdl[ti]) { if (W == 4) kdec<4, 1, 1><<<grid, blk>>>(p); else kdec<2, 1, 1><<<grid, blk>>>(p); }
      else if (W == 4) launch_pdl(kdec<4, 1, 1>, grid, blk, p); else launch_pdl(kdec<2, 1, 1>, grid, blk, p);
    }
    CK(cudaDeviceSynchronize());
    std::vector<unsigned long long> all((size_t)10 * per);
    CK(cudaMemcpy(all.data(), dtr, all.size() * 8, cudaMemcpyDeviceToHost));
    const unsigned long long *T = all.data() + 5 * per;
    { int hdr[3] = {n, HKV, W}; fwrite(hdr, 4, 3, f); fwrite(T, 8, per, f); }
    {
        // summary
                unsigned long long g0 = ~0ull, gend = 0;
        std::vector<double> rate;
        for (int b = 0; b < nb; b++) { auto *w0 = &T[(size_t)b * W * NSL]; g0 = std::min(g0, w0[0]); gend = std::max(gend, std::max(w0[11], w0[14]));
          if (w0[11] > w0[0] + 2000) rate.push_back((double)(w0[9] - w0[1]) / (w0[11] - w0[0])); }
        std::sort(rate.begin(), rate.end()); double cpn = rate.size() ? rate[rate.size() / 2] : 1.98;
        printf("\ntrace W%d c%d %s, pre-wait prefetch %d: %d blocks, span (globaltimer) %.2f us, clock %.3f GHz\n", W, tc[ti],
               tpdl[ti] ? "PDL" : "plain launches", tpre[ti], nb, (gend - g0) / 1e3, cpn);
        std::vector<double> st, en; for (int b = 0; b < nb; b++) { auto *w0 = &T[(size_t)b * W * NSL]; st.push_back((w0[0] - g0) / 1e3); en.push_back((w0[11] - g0) / 1e3); }
        std::sort(st.begin(), st.end()); std::sort(en.begin(), en.end());
        printf("block start us: min %.2f med %.2f p90 %.2f max %.2f | chunk end (after atomic) us: min %.2f med %.2f p90 %.2f max %.2f\n",
          st[0], st[nb/2], st[nb*9/10], st[nb-1], en[0], en[nb/2], en[nb*9/10], en[nb-1]);
        const char *ph[] = {"", "", "item", "loc0/q(w0)", "barrier", "first step", "loop rest", "warp merge", "partial+fence", "atomic", "merge"};
        printf("phase (warp 0, us): median p90 max\n");
        for (int s = 2; s <= 10; s++) {
          std::vector<double> d;
          for (int b = 0; b < nb; b++) { auto *w0 = &T[(size_t)b * W * NSL]; if (w0[s] && w0[s-1]) d.push_back((double)(w0[s] - w0[s - 1]) / cpn / 1e3);
            else if (s == 10 && w0[10]) d.push_back((double)(w0[10] - w0[9]) / cpn / 1e3); }
          if (s == 6) { d.clear(); for (int b = 0; b < nb; b++) { auto *w0 = &T[(size_t)b * W * NSL]; if (w0[5]) d.push_back((double)(w0[6]-w0[5])/cpn/1e3); } }
          if (d.empty()) continue;
          std::sort(d.begin(), d.end());
          printf("  %-14s %.3f %.3f %.3f (n=%zu)\n", ph[s], d[d.size()/2], d[d.size()*9/10], d.back(), d.size());
        }
        // loop end spread across warps (latest warp's loop end minus warp 0's barrier)
        std::vector<double> d;
        for (int b = 0; b < nb; b++) { auto *w0 = &T[(size_t)b * W * NSL]; unsigned long long mx = 0; for (int w = 0; w < W; w++) mx = std::max(mx, w0[w * NSL + 6]); d.push_back((double)(mx - w0[4]) / cpn / 1e3); }
        std::sort(d.begin(), d.end()); printf("  barrier->last warp loop end: %.3f %.3f %.3f\n", d[nb/2], d[nb*9/10], d[nb-1]);
        d.clear(); for (int b = 0; b < nb; b++) { auto *w0 = &T[(size_t)b * W * NSL]; d.push_back((double)(w0[9] - w0[1]) / cpn / 1e3); }
        std::sort(d.begin(), d.end()); printf("  block start->after atomic: %.3f %.3f %.3f\n", d[nb/2], d[nb*9/10], d[nb-1]);
        // merge blocks: their end in globaltimer
        for (int b = 0; b < nb; b++) { auto *w0 = &T[(size_t)b * W * NSL]; if (w0[14]) {
            unsigned long long l17 = 0; for (int w = 0; w < W; w++) l17 = std::max(l17, w0[w * NSL + 17]);
            printf("  merge block %d (sm %llu): start %.2f, atomic %.2f, merge end %.2f us; acquire+reset %.3f, first batch loads %.3f (slowest warp %.3f), combine %.3f, stores %.3f us\n",
                   b, w0[12], (w0[0]-g0)/1e3, (w0[11]-g0)/1e3, (w0[14]-g0)/1e3, (double)(w0[16] - w0[9]) / cpn / 1e3,
                   (double)(w0[17] - w0[16]) / cpn / 1e3, (double)(l17 - w0[16]) / cpn / 1e3, (double)(w0[18] - w0[17]) / cpn / 1e3,
                   (double)(w0[10] - w0[18]) / cpn / 1e3); } }
    }
    // Launches 4, 5 and 6 on one clock (globaltimer, us from launch 4's first post-wait start):
    // block entry (before the wait), post-wait start, chunk end (after the counter), last merge end.
    unsigned long long z = ~0ull;
    for (int b = 0; b < nb; b++) z = std::min(z, all[(size_t)4 * per + (size_t)b * W * NSL + 0]);
    printf("launches 4-6 (us from launch 4's first post-wait start): entry | post-wait start | chunk end | merge end\n");
    for (int l = 4; l <= 6; l++) {
      std::vector<double> en, st, ce; double me = 0;
      for (int b = 0; b < nb; b++) {
        const unsigned long long *w0 = &all[(size_t)l * per + (size_t)b * W * NSL];
        en.push_back(((double)w0[15] - (double)z) / 1e3); st.push_back(((double)w0[0] - (double)z) / 1e3);
        ce.push_back(((double)w0[11] - (double)z) / 1e3);
        if (w0[14]) me = std::max(me, ((double)w0[14] - (double)z) / 1e3);
      }
      std::sort(en.begin(), en.end()); std::sort(st.begin(), st.end()); std::sort(ce.begin(), ce.end());
      printf("  launch %d: entry %.2f / %.2f / %.2f | start %.2f / %.2f / %.2f | chunk end %.2f / %.2f / %.2f | merge end %.2f\n", l,
             en[0], en[nb / 2], en[nb - 1], st[0], st[nb / 2], st[nb - 1], ce[0], ce[nb / 2], ce[nb - 1], me);
    }
  }
  fclose(f);
  CK(cudaDeviceSynchronize());
  printf("done\n");
  return 0;
}
