// fp8_bench.cu: batch decode at B = 64, L = 4096 (and B = 128, L = 1024), 32/8 heads, D = 128,
// page 16 NHD in random page order (fi-bench decode's target rows, bf16 and e4m3) outside
// the runtime: kernel variants side by side in one process (patch_variants.py's X bits:
// loads only, L2 sector hints, ...; block sizes, KV head pairs, pages in order, HND), each
// launched as the runtime does (programmatic dependent launch), the median of 7 batches
// of 10 launches rotating over 2 page sets, against a 16-byte streaming read of 1 GiB
// (plain and with each L2 hint); then a globaltimer trace of one launch of some variants
// (blocks' starts and ends, warps' loop ends, blocks an SM) and the relative error of
// some against a float64 CPU reference (3 requests). Built with nvcc from a patched copy
// of kernels/decode.cuh (make build/decode-fp8-bench); the runtime's kernels are
// untouched. Its rankings of fp8 blocks have not matched NVRTC's builds (docs/decode.md,
// sixteenth session): check a change in fi-bench too.
// Usage: decode-fp8-bench [all] (on the GPU machine): e4m3 at B = 64 and the capped bf16
// kernel; with "all", the bf16 variants at B = 64 and 128 and B = 64 at L = 2048 and 8192.
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

// MINB > 1: that many blocks resident an SM at least (ptxas caps the registers).
template <typename KVT, int W, int PF, int X, int MINB = 1>
__global__ void __launch_bounds__(W * 32, MINB) kdec(fi_decode_params p) {
  fi_pdl_enter();
  decode<fi_bf16, KVT, 128, 8, PF, 0, 0, W, X>(p);
}
template <int X>
__global__ void __launch_bounds__(256) kprobe(const uint4 *v, int64_t n, unsigned *sink) {
  uint32_t acc = 0;
  const int64_t step = (int64_t)blockDim.x * gridDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * step < n; i += 4 * step) {
    uint32_t r[4][4];
#pragma unroll
    for (int u = 0; u < 4; u++) ldgx<X, false, 4>(v + i + u * step, r[u], 0);
#pragma unroll
    for (int u = 0; u < 4; u++) acc ^= r[u][0] ^ r[u][1] ^ r[u][2] ^ r[u][3];
  }
  for (; i < n; i += step) { uint32_t r[4]; ldg_nc<4>(v + i, r); acc ^= r[0] ^ r[1] ^ r[2] ^ r[3]; }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
// The same read in half lines: each warp instruction reads 64 bytes of each of 8 lines (lane
// (g, c): line g, chunk c, then chunk c + 4), as decode's K loads do, not 512 contiguous bytes.
__global__ void __launch_bounds__(256) kprobe_half(const uint4 *v, int64_t n, unsigned *sink) {
  uint32_t acc = 0;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int64_t warps = (int64_t)gridDim.x * 8, units = n / 64;  // a unit: 8 lines = 64 vectors
  for (int64_t w = blockIdx.x * 8 + (threadIdx.x >> 5); w < units; w += warps) {
    uint32_t r[2][4];
    ldg_nc<4>(v + 64 * w + 8 * g + c, r[0]);
    ldg_nc<4>(v + 64 * w + 8 * g + 4 + c, r[1]);
    acc ^= r[0][0] ^ r[0][1] ^ r[0][2] ^ r[0][3] ^ r[1][0] ^ r[1][1] ^ r[1][2] ^ r[1][3];
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
__global__ void kfill8(uint8_t *a, int64_t n, uint32_t seed) {  // e4m3 |x| < 2
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    a[i] = (uint8_t)((h & 0x3f) | ((h >> 8) & 0x80));
  }
}
__global__ void kfill16(uint16_t *a, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    float f = ((h & 0xffff) / 65536.0f - 0.5f) * 2.0f;
    uint32_t b; memcpy(&b, &f, 4); a[i] = (uint16_t)(b >> 16);
  }
}
static float bf(uint16_t x) { uint32_t b = (uint32_t)x << 16; float f; memcpy(&f, &b, 4); return f; }
static float e4(uint8_t b) { int s = b >> 7, e = (b >> 3) & 15, m = b & 7; float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf(m / 8.0f, -6); return s ? -v : v; }

// The shape: B = 64, L = 4096 (the target rows), or B = 128, L = 1024.
int B = 64, L = 4096, NP = 256, NEED = 64 * 256;
const int HQ = 32, HKV = 8, D = 128, PS = 16;
int SETS = 2;
void *dk, *dv; uint16_t *dq, *dout; int32_t *dix[8], *dixl2, *dixseq, *dws; unsigned *dsink;
int es = 1;  // element size of the current cache
static fi_decode_params base_params(int fp8) {
  fi_decode_params p; memset(&p, 0, sizeof p);
  const int64_t PAGE_EL = (int64_t)PS * HKV * D;
  p.q = dq; p.out = dout; p.k = dk; p.v = dv;
  p.q_stride[0] = HQ * D; p.q_stride[1] = D; p.out_stride[0] = HQ * D; p.out_stride[1] = D;
  p.kv_stride_page = PAGE_EL; p.kv_stride_slot = HKV * D; p.kv_stride_head = D;
  p.num_kv_heads = HKV; p.group = HQ / HKV; p.page_size = PS;
  p.scale_log2 = (float)(1.0 / sqrt(128.0) * 1.4426950408889634 * (fp8 ? 256.0 : 1.0)); p.v_scale = fp8 ? 256.0f : 1.0f;
  p.header = dws; p.items = dws + FI_DECODE_HDR_WORDS; p.num_items = B;
  p.kv_evict = 1;  // as the runtime's default
  return p;
}
typedef void (*kfn)(fi_decode_params);
typedef void (*kfn_probe)(const uint4 *, int64_t, unsigned *);
// mode 0: page sets rotated; 1: every request on the same 32 pages (L2-resident: the math's
// bound); 2: KV head pairs (p.kv_heads_per_block = 2, grid y halved); 3: pages in order
// (request b on pages b NP .. b NP + NP - 1); 4: HND pages (the same bytes read as
// [pages, H_kv, 16, D]); 5: KV head pairs, pages in order. pf: p.prefetch.
struct V { const char *name; kfn f; int W, mode; int pf = 0; };
static double time_var(const V &v, int fp8, int batch) {
  fi_decode_params p = base_params(fp8);
  p.prefetch = v.pf;
  p.kv_heads_per_block = v.mode == 2 || v.mode == 5 ? 2 : 1;
  if (v.mode == 4) {
    p.kv_stride_slot = D;
    p.kv_stride_head = (int64_t)PS * D;
  }
  dim3 grid(B, HKV / p.kv_heads_per_block), blk(v.W * 32);
  auto launch = [&](int i) {
    p.indices = v.mode == 1 ? dixl2 : v.mode == 3 || v.mode == 5 ? dixseq : dix[i % SETS];
    launch_pdl(v.f, grid, blk, p);
  };
  return median_launch_us(launch, 6, 7, batch);
}
// A globaltimer trace (X & 1024) of launch 5 of 6 back-to-back ones (two trace buffers in
// turn, so launch 4's is kept too): where a launch's time goes besides the read itself.
static void trace_var(const V &v, int fp8) {
  fi_decode_params p = base_params(fp8);
  p.kv_heads_per_block = v.mode == 2 || v.mode == 5 ? 2 : 1;
  const int gy = HKV / p.kv_heads_per_block, nb = B * gy;
  unsigned long long *tb[2];
  for (int i = 0; i < 2; i++) { CK(cudaMalloc(&tb[i], (size_t)nb * 12 * 8)); CK(cudaMemset(tb[i], 0, (size_t)nb * 12 * 8)); }
  for (int i = 0; i < 6; i++) {
    p.indices = v.mode == 3 || v.mode == 5 ? dixseq : dix[i % SETS];
    p.partial_o = reinterpret_cast<float *>(tb[i % 2]);
    launch_pdl(v.f, dim3(B, gy), dim3(v.W * 32), p);
  }
  CK(cudaDeviceSynchronize());
  std::vector<unsigned long long> a((size_t)nb * 12), c((size_t)nb * 12);
  CK(cudaMemcpy(a.data(), tb[0], a.size() * 8, cudaMemcpyDeviceToHost));  // launch 4
  CK(cudaMemcpy(c.data(), tb[1], c.size() * 8, cudaMemcpyDeviceToHost));  // launch 5
  for (int i = 0; i < 2; i++) CK(cudaFree(tb[i]));
  unsigned long long prev_end = 0, t0 = ~0ull;
  for (int b = 0; b < nb; b++) { prev_end = std::max(prev_end, a[b * 12 + 9]); t0 = std::min(t0, c[b * 12 + 0]); }
  std::vector<double> st, en, wsp, wlast;
  std::vector<int> per_sm(1024, 0);
  for (int b = 0; b < nb; b++) per_sm[c[b * 12 + 10] & 1023]++;
  double sum3 = 0, sum4 = 0; int n3 = 0, n4 = 0;
  for (int b = 0; b < nb; b++) {
    const unsigned long long *r = &c[b * 12];
    st.push_back((r[0] - t0) / 1e3);
    en.push_back((r[9] - t0) / 1e3);
    unsigned long long wmin = ~0ull, wmax = 0;
    for (int w = 0; w < v.W; w++) { wmin = std::min(wmin, r[1 + w]); wmax = std::max(wmax, r[1 + w]); }
    wsp.push_back((wmax - wmin) / 1e3);
    wlast.push_back((r[9] - wmax) / 1e3);
    const int k = per_sm[r[10] & 1023];
    if (k <= 3) { sum3 += (r[9] - t0) / 1e3; n3++; } else { sum4 += (r[9] - t0) / 1e3; n4++; }
  }
  auto q = [](std::vector<double> x, double f) { std::sort(x.begin(), x.end()); return x[(size_t)(f * (x.size() - 1))]; };
  int sms = 0, mx = 0; for (int k : per_sm) { if (k) sms++; mx = std::max(mx, k); }
  printf("trace %s: %d blocks on %d SMs (<= %d an SM); gap after the previous launch's last block %.2f us\n", v.name, nb, sms, mx, ((double)t0 - (double)prev_end) / 1e3);
  printf("  block start us: p50 %.2f p90 %.2f max %.2f | end: min %.1f p10 %.1f p50 %.1f p90 %.1f max %.1f\n",
         q(st, .5), q(st, .9), q(st, 1), q(en, 0), q(en, .1), q(en, .5), q(en, .9), q(en, 1));
  printf("  warps' loop ends apart in a block: p50 %.2f p90 %.2f max %.2f; last warp -> stored: p50 %.2f; mean end on SMs with <= 3 blocks %.1f (%d), more %.1f (%d)\n",
         q(wsp, .5), q(wsp, .9), q(wsp, 1), q(wlast, .5), n3 ? sum3 / n3 : 0.0, n3, n4 ? sum4 / n4 : 0.0, n4);
}
// error vs CPU reference over requests 0, 37, 63 (all heads), set 0
static double check(int fp8, kfn f, int W, int pairs = 0) {
  fi_decode_params p = base_params(fp8); p.indices = dix[0];
  p.kv_heads_per_block = pairs ? 2 : 1;
  CK(cudaMemset(dout, 0xff, (size_t)B * HQ * D * 2));
  launch_pdl(f, dim3(B, HKV / p.kv_heads_per_block), dim3(W * 32), p);
  CK(cudaDeviceSynchronize()); CK(cudaGetLastError());
  std::vector<uint16_t> o((size_t)B * HQ * D), q((size_t)B * HQ * D);
  std::vector<int32_t> ix(NEED);
  CK(cudaMemcpy(o.data(), dout, o.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(q.data(), dq, q.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ix.data(), dix[0], NEED * 4, cudaMemcpyDeviceToHost));
  const int64_t PAGE_EL = (int64_t)PS * HKV * D, pb = PAGE_EL * (fp8 ? 1 : 2);
  double num = 0, den = 0;
  const int reqs[3] = {0, 37, 63};
  std::vector<uint8_t> kp(NP * pb), vp(NP * pb);
  for (int ri = 0; ri < 3; ri++) {
    int b = reqs[ri];
    for (int i = 0; i < NP; i++) {
      CK(cudaMemcpy(&kp[(size_t)i * pb], (char *)dk + (int64_t)ix[b * NP + i] * pb, pb, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(&vp[(size_t)i * pb], (char *)dv + (int64_t)ix[b * NP + i] * pb, pb, cudaMemcpyDeviceToHost));
    }
    auto el = [&](std::vector<uint8_t> &c, int t, int h, int d) -> double {
      int64_t e = (int64_t)(t / PS) * PAGE_EL + (t % PS) * HKV * D + h * D + d;
      return fp8 ? e4(c[e]) : bf(((uint16_t *)c.data())[e]);
    };
    std::vector<double> s(L);
    for (int h = 0; h < HQ; h++) {
      int hk = h / (HQ / HKV); double mx = -1e300;
      for (int t = 0; t < L; t++) {
        double a = 0; for (int d = 0; d < D; d++) a += (double)bf(q[((size_t)b * HQ + h) * D + d]) * el(kp, t, hk, d);
        s[t] = a / sqrt(128.0); mx = std::max(mx, s[t]);
      }
      double den2 = 0; for (int t = 0; t < L; t++) { s[t] = exp(s[t] - mx); den2 += s[t]; }
      for (int d = 0; d < D; d++) {
        double acc = 0;
        for (int t = 0; t < L; t++) acc += s[t] * el(vp, t, hk, d);
        acc /= den2; double g = bf(o[((size_t)b * HQ + h) * D + d]);
        num += (g - acc) * (g - acc); den += acc * acc;
      }
    }
  }
  return sqrt(num / den);
}
static double probe(kfn_probe f, uint4 *a, int64_t n) {
  int nb, sms;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, f, 256, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double us = median_launch_us([&](int) { f<<<sms * nb, 256>>>(a, n, dsink); }, 3, 15, 1);
  return (n * 16.0) / (us * 1e-6) / 1e12;
}
// One pass: a cache dtype at a shape, its variants timed, then some checked.
static void pass(int fp8, int b, int l, double rd, bool few = false) {
  B = b; L = l; NP = L / PS; NEED = B * NP;
  es = fp8 ? 1 : 2;
  CK(cudaMalloc(&dws, (FI_DECODE_HDR_WORDS + B * 8) * 4));
  {
    std::vector<int32_t> t(FI_DECODE_HDR_WORDS + B * 8, 0);
    for (int i = 0; i < B; i++) { int32_t *it = &t[FI_DECODE_HDR_WORDS + 8 * i]; it[0] = i; it[1] = 0; it[2] = L; it[3] = 0 | (1 << 16); it[4] = i * NP; it[5] = L; }
    t[0] = B; t[1] = B; t[2] = NP; t[3] = 0;
    CK(cudaMemcpy(dws, t.data(), t.size() * 4, cudaMemcpyHostToDevice));
  }
  const int64_t pool = (int64_t)NEED * SETS, page_bytes = (int64_t)PS * HKV * D * es;
  CK(cudaMalloc(&dk, pool * page_bytes)); CK(cudaMalloc(&dv, pool * page_bytes));
  if (fp8) { kfill8<<<2048, 256>>>((uint8_t *)dk, pool * page_bytes, 1); kfill8<<<2048, 256>>>((uint8_t *)dv, pool * page_bytes, 2); }
  else { kfill16<<<2048, 256>>>((uint16_t *)dk, pool * page_bytes / 2, 1); kfill16<<<2048, 256>>>((uint16_t *)dv, pool * page_bytes / 2, 2); }
  std::vector<int32_t> perm(pool); for (int64_t i = 0; i < pool; i++) perm[i] = (int32_t)i;
  uint64_t r = 0x2545F4914F6CDD1Dull;
  for (int64_t i = pool - 1; i > 0; i--) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; int64_t j = r % (i + 1); std::swap(perm[i], perm[j]); }
  for (int s = 0; s < SETS; s++) { CK(cudaMalloc(&dix[s], NEED * 4)); CK(cudaMemcpy(dix[s], &perm[(size_t)s * NEED], NEED * 4, cudaMemcpyHostToDevice)); }
  {
    std::vector<int32_t> l2(NEED), sq(NEED);
    for (int i = 0; i < NEED; i++) { l2[i] = perm[i % 32]; sq[i] = i; }
    CK(cudaMalloc(&dixl2, NEED * 4)); CK(cudaMemcpy(dixl2, l2.data(), NEED * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dixseq, NEED * 4)); CK(cudaMemcpy(dixseq, sq.data(), NEED * 4, cudaMemcpyHostToDevice));
  }
  const double bytes = 2.0 * B * L * HKV * D * es + 2.0 * B * HQ * D * 2;
  printf("\n== %s cache, B=%d L=%d, %.1f MB a run\n| variant | us | TB/s | of read |\n|---|---|---|---|\n", fp8 ? "e4m3" : "bf16", B, L, bytes / 1e6);
  std::vector<V> vars;
  if (fp8) {
    vars = {
      {"W4 KV head pairs, two buffers (the plan's block)", kdec<fi_e4m3, 4, 1, 0>, 4, 2},
      {"W6 KV head pairs, one buffer, 2 blocks an SM (168 registers)", kdec<fi_e4m3, 6, 0, 0, 2>, 6, 2},
      {"W6 KV head pairs, one buffer, loads only", kdec<fi_e4m3, 6, 0, 2, 2>, 6, 2},
      {"W5 KV head pairs, one buffer, 2 blocks an SM", kdec<fi_e4m3, 5, 0, 0, 2>, 5, 2},
      {"W6 KV head pairs, one buffer, L2::256B", kdec<fi_e4m3, 6, 0, 32, 2>, 6, 2},
      {"W6 KV head pairs, one buffer, pages in order", kdec<fi_e4m3, 6, 0, 0, 2>, 6, 5},
      {"W4 KV head pairs, one buffer, 3 blocks an SM", kdec<fi_e4m3, 4, 0, 0, 3>, 4, 2},
      {"W4 KV head pairs, one buffer, 4 blocks an SM (spills)", kdec<fi_e4m3, 4, 0, 0, 4>, 4, 2},
      {"W4 KV head pairs, two buffers (again)", kdec<fi_e4m3, 4, 1, 0>, 4, 2},
      {"W6 KV head pairs, one buffer (again)", kdec<fi_e4m3, 6, 0, 0, 2>, 6, 2},
    };
  } else if (few) {
    vars = {
      {"W4 one buffer, 4 blocks an SM (capped)", kdec<fi_bf16, 4, 0, 0, 4>, 4, 0},
      {"W4 capped, loads only", kdec<fi_bf16, 4, 0, 2, 4>, 4, 0},
      {"W2 capped", kdec<fi_bf16, 2, 0, 0, 8>, 2, 0},
    };
  } else {
    vars = {
      {"W4 one buffer, 4 blocks an SM (capped: the plan's at B=64)", kdec<fi_bf16, 4, 0, 0, 4>, 4, 0},
      {"W4 capped, loads only", kdec<fi_bf16, 4, 0, 2, 4>, 4, 0},
      {"W4 capped, K in whole lines (wrong values)", kdec<fi_bf16, 4, 0, 128, 4>, 4, 0},
      {"W4 capped, loads only, K in whole lines", kdec<fi_bf16, 4, 0, 130, 4>, 4, 0},
      {"W4 capped, request-major block order", kdec<fi_bf16, 4, 0, 1, 4>, 4, 0},
      {"W4 capped, L2::256B", kdec<fi_bf16, 4, 0, 32, 4>, 4, 0},
      {"W4 capped, plain loads (no evict-first)", kdec<fi_bf16, 4, 0, 512, 4>, 4, 0},
      {"W4 capped, pages in order", kdec<fi_bf16, 4, 0, 0, 4>, 4, 3},
      {"W4 capped, HND", kdec<fi_bf16, 4, 0, 0, 4>, 4, 4},
      {"W2 one buffer, 8 blocks an SM (capped: the plan's at B=128)", kdec<fi_bf16, 2, 0, 0, 8>, 2, 0},
      {"W2 capped, loads only", kdec<fi_bf16, 2, 0, 2, 8>, 2, 0},
      {"W8 one buffer, 2 blocks an SM", kdec<fi_bf16, 8, 0, 0, 2>, 8, 0},
      {"W4 capped (again)", kdec<fi_bf16, 4, 0, 0, 4>, 4, 0},
    };
  }
  for (auto &v : vars) {
    double t = time_var(v, fp8, 10);
    printf("| %s | %.2f | %.3f | %.1f%% |\n", v.name, t, bytes / (t * 1e-6) / 1e12, 100.0 * bytes / (t * 1e-6) / 1e12 / rd);
  }
  if (fp8) {
    trace_var({"W4 KV head pairs, two buffers", kdec<fi_e4m3, 4, 1, 1024>, 4, 2}, 1);
    trace_var({"W6 KV head pairs, one buffer", kdec<fi_e4m3, 6, 0, 1024, 2>, 6, 2}, 1);
  } else {
    trace_var({"W4 capped", kdec<fi_bf16, 4, 0, 1024, 4>, 4, 0}, 0);
    trace_var({"W4 capped, loads only", kdec<fi_bf16, 4, 0, 1024 + 2, 4>, 4, 0}, 0);
    if (!few) {
      trace_var({"W4 capped, pages in order", kdec<fi_bf16, 4, 0, 1024, 4>, 4, 3}, 0);
      trace_var({"W2 capped", kdec<fi_bf16, 2, 0, 1024, 8>, 2, 0}, 0);
    }
  }
  if (few) {
  } else if (fp8)
    printf("err KV head pairs W4 two buffers %.3g, W6 one buffer %.3g; a head a block W6 one buffer %.3g\n",
           check(1, kdec<fi_e4m3, 4, 1, 0>, 4, 1), check(1, kdec<fi_e4m3, 6, 0, 0, 2>, 6, 1),
           check(1, kdec<fi_e4m3, 6, 0, 0, 2>, 6));
  else
    printf("err W4 capped %.3g, W2 capped %.3g\n", check(0, kdec<fi_bf16, 4, 0, 0, 4>, 4),
           check(0, kdec<fi_bf16, 2, 0, 0, 8>, 2));
  CK(cudaFree(dk)); CK(cudaFree(dv)); for (int s = 0; s < SETS; s++) CK(cudaFree(dix[s]));
  CK(cudaFree(dixl2)); CK(cudaFree(dixseq)); CK(cudaFree(dws));
}
int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  CK(cudaSetDevice(0));
  int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0); printf("clock %d kHz\n", clk);
  CK(cudaMalloc(&dsink, 4));
  CK(cudaMalloc(&dq, (size_t)128 * HQ * D * 2)); CK(cudaMalloc(&dout, (size_t)128 * HQ * D * 2));
  kfill16<<<64, 256>>>(dq, (int64_t)128 * HQ * D, 3);
  // The read roofline (1 GiB), plain and with each hint.
  const int64_t n = (1ll << 30) / 16; uint4 *a; CK(cudaMalloc(&a, n * 16)); CK(cudaMemset(a, 1, n * 16));
  const double rd = probe(kprobe<0>, a, n);
  printf("read roofline: %.3f TB/s; with L2::256B %.3f, L2::128B %.3f; in half lines %.3f; again %.3f\n", rd,
         probe(kprobe<32>, a, n), probe(kprobe<64>, a, n), probe(kprobe_half, a, n), probe(kprobe<0>, a, n));
  CK(cudaFree(a));
  pass(1, 64, 4096, rd);
  pass(0, 64, 4096, rd, true);
  // The tail and the ramp: the same kernels over shorter and longer requests.
  if (argc > 1 && !strcmp(argv[1], "all")) {
    pass(0, 128, 1024, rd);
    pass(0, 64, 4096, rd);
    pass(0, 64, 2048, rd, true);
    pass(0, 64, 8192, rd, true);
  }
  printf("done\n");
  return 0;
}
