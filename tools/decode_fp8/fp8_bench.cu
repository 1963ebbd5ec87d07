// fp8_bench.cu: batch decode at B = 64, L = 4096, 32/8 heads, D = 128, page 16 NHD in random
// page order (fi-bench decode's e4m3 "target 4.0" row and its bf16 twin) outside the
// runtime: kernel variants side by side in one process (patch_variants.py's X bits, block
// sizes, the L2 prefetch, KV head pairs), each the median of 7 batches of 10 launches
// rotating over 2 page sets, against a 16-byte streaming read of 1 GiB; then the relative
// error of some variants against a float64 CPU reference (3 requests). Built with nvcc
// from a patched copy of kernels/decode.cuh (make build/decode-fp8-bench); the runtime's
// kernels are untouched. Usage: decode-fp8-bench (on the GPU machine).
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

template <typename KVT, int W, int PF, int X>
__global__ void __launch_bounds__(W * 32) kdec(fi_decode_params p) {
  decode<fi_bf16, KVT, 128, 8, PF, 0, 0, W, X>(p);
}
__global__ void __launch_bounds__(256) kprobe(const uint4 *v, int64_t n, unsigned *sink) {
  uint32_t acc = 0;
  const int64_t step = (int64_t)blockDim.x * gridDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * step < n; i += 4 * step) {
    uint32_t r[4][4];
#pragma unroll
    for (int u = 0; u < 4; u++) ldg_nc<4>(v + i + u * step, r[u]);
#pragma unroll
    for (int u = 0; u < 4; u++) acc ^= r[u][0] ^ r[u][1] ^ r[u][2] ^ r[u][3];
  }
  for (; i < n; i += step) { uint32_t r[4]; ldg_nc<4>(v + i, r); acc ^= r[0] ^ r[1] ^ r[2] ^ r[3]; }
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

const int B = 64, L = 4096, HQ = 32, HKV = 8, D = 128, PS = 16, NP = L / PS, NEED = B * NP;
int SETS = 2;
void *dk, *dv; uint16_t *dq, *dout; int32_t *dix[8], *dixl2, *dws; unsigned *dsink;
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
  return p;
}
typedef void (*kfn)(fi_decode_params);
// mode 0: page sets rotated; 1: every request on the same 32 pages (L2-resident: the math's
// bound); 2: KV head pairs (p.kv_heads_per_block = 2, grid y halved). pf: p.prefetch.
struct V { const char *name; kfn f; int W, mode; int pf = 0; };
static double time_var(const V &v, int fp8, int batch) {
  fi_decode_params p = base_params(fp8);
  p.prefetch = v.pf;
  p.kv_heads_per_block = v.mode == 2 ? 2 : 1;
  dim3 grid(B, HKV / p.kv_heads_per_block), blk(v.W * 32);
  auto launch = [&](int i) {
    p.indices = v.mode == 1 ? dixl2 : dix[i % SETS];
    v.f<<<grid, blk>>>(p);
  };
  return median_launch_us(launch, 6, 7, batch);
}
// error vs CPU reference over requests 0, 37, 63 (all heads), set 0
static double check(int fp8, kfn f, int W, int pairs = 0) {
  fi_decode_params p = base_params(fp8); p.indices = dix[0];
  p.kv_heads_per_block = pairs ? 2 : 1;
  CK(cudaMemset(dout, 0xff, (size_t)B * HQ * D * 2));
  f<<<dim3(B, HKV / p.kv_heads_per_block), W * 32>>>(p); CK(cudaDeviceSynchronize()); CK(cudaGetLastError());
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
int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  CK(cudaSetDevice(0));
  int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0); printf("clock %d kHz\n", clk);
  CK(cudaMalloc(&dsink, 4));
  // roofline probe: 1 GiB
  double rd;
  {
    const int64_t n = (1ll << 30) / 16; uint4 *a; CK(cudaMalloc(&a, n * 16)); CK(cudaMemset(a, 1, n * 16));
    int nb; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kprobe, 256, 0));
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const double us = median_launch_us([&](int) { kprobe<<<sms * nb, 256>>>(a, n, dsink); }, 3, 15, 1);
    rd = (n * 16.0) / (us * 1e-6) / 1e12;
    printf("read roofline: %.3f TB/s\n", rd);
    CK(cudaFree(a));
  }
  CK(cudaMalloc(&dq, (size_t)B * HQ * D * 2)); CK(cudaMalloc(&dout, (size_t)B * HQ * D * 2));
  kfill16<<<64, 256>>>(dq, (int64_t)B * HQ * D, 3);
  CK(cudaMalloc(&dws, (FI_DECODE_HDR_WORDS + B * 8) * 4));
  {
    std::vector<int32_t> t(FI_DECODE_HDR_WORDS + B * 8, 0);
    for (int b = 0; b < B; b++) { int32_t *it = &t[FI_DECODE_HDR_WORDS + 8 * b]; it[0] = b; it[1] = 0; it[2] = L; it[3] = 0 | (1 << 16); it[4] = b * NP; it[5] = L; }
    t[0] = B; t[1] = B; t[2] = NP; t[3] = 0;
    CK(cudaMemcpy(dws, t.data(), t.size() * 4, cudaMemcpyHostToDevice));
  }
  for (int pass = 0; pass < 2; pass++) {
    const int fp8 = pass == 0;
    es = fp8 ? 1 : 2;
    const int64_t pool = (int64_t)NEED * SETS, page_bytes = (int64_t)PS * HKV * D * es;
    CK(cudaMalloc(&dk, pool * page_bytes)); CK(cudaMalloc(&dv, pool * page_bytes));
    if (fp8) { kfill8<<<2048, 256>>>((uint8_t *)dk, pool * page_bytes, 1); kfill8<<<2048, 256>>>((uint8_t *)dv, pool * page_bytes, 2); }
    else { kfill16<<<2048, 256>>>((uint16_t *)dk, pool * page_bytes / 2, 1); kfill16<<<2048, 256>>>((uint16_t *)dv, pool * page_bytes / 2, 2); }
    std::vector<int32_t> perm(pool); for (int64_t i = 0; i < pool; i++) perm[i] = (int32_t)i;
    uint64_t r = 0x2545F4914F6CDD1Dull;
    for (int64_t i = pool - 1; i > 0; i--) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; int64_t j = r % (i + 1); std::swap(perm[i], perm[j]); }
    for (int s = 0; s < SETS; s++) { CK(cudaMalloc(&dix[s], NEED * 4)); CK(cudaMemcpy(dix[s], &perm[(size_t)s * NEED], NEED * 4, cudaMemcpyHostToDevice)); }
    { std::vector<int32_t> l2(NEED); for (int i = 0; i < NEED; i++) l2[i] = perm[i % 32]; CK(cudaMalloc(&dixl2, NEED * 4)); CK(cudaMemcpy(dixl2, l2.data(), NEED * 4, cudaMemcpyHostToDevice)); }
    const double bytes = 2.0 * B * L * HKV * D * es + 2.0 * B * HQ * D * 2;
    printf("\n== %s cache, %.1f MB a run\n| variant | us | TB/s | of read |\n|---|---|---|---|\n", fp8 ? "e4m3" : "bf16", bytes / 1e6);
    std::vector<V> vars;
    if (fp8) {
      vars = {
        {"W4 default", kdec<fi_e4m3, 4, 1, 0>, 4, 0},
        {"W2", kdec<fi_e4m3, 2, 1, 0>, 2, 0},
        {"W8", kdec<fi_e4m3, 8, 1, 0>, 8, 0},
        {"W4 PF0", kdec<fi_e4m3, 4, 0, 0>, 4, 0},
        {"W4 loads only", kdec<fi_e4m3, 4, 1, 2>, 4, 0},
        {"W2 loads only", kdec<fi_e4m3, 2, 1, 2>, 2, 0},
        {"W4 L2-resident", kdec<fi_e4m3, 4, 1, 0>, 4, 1},
        {"W4 L2-resident int cvt", kdec<fi_e4m3, 4, 1, 8>, 4, 1},
        {"W4 L2-resident prmt-only cvt", kdec<fi_e4m3, 4, 1, 4>, 4, 1},
        {"W4 L2-resident loads only", kdec<fi_e4m3, 4, 1, 2>, 4, 1},
        {"W4 prmt-only cvt (wrong values)", kdec<fi_e4m3, 4, 1, 4>, 4, 0},
        {"W4 int cvt", kdec<fi_e4m3, 4, 1, 8>, 4, 0},
        {"W4 request-major", kdec<fi_e4m3, 4, 1, 1>, 4, 0},
        {"W4 early K", kdec<fi_e4m3, 4, 1, 16>, 4, 0},
        {"W2 early K", kdec<fi_e4m3, 2, 1, 16>, 2, 0},
        {"W4 early K + int cvt", kdec<fi_e4m3, 4, 1, 24>, 4, 0},
        {"W4 early K + request-major", kdec<fi_e4m3, 4, 1, 17>, 4, 0},
        {"W4 line prefetch 1", kdec<fi_e4m3, 4, 1, 0>, 4, 0, -1},
        {"W4 line prefetch 2", kdec<fi_e4m3, 4, 1, 0>, 4, 0, -2},
        {"W4 line prefetch 3", kdec<fi_e4m3, 4, 1, 0>, 4, 0, -3},
        {"W4 bulk prefetch 2", kdec<fi_e4m3, 4, 1, 0>, 4, 0, 2},
        {"W2 line prefetch 2", kdec<fi_e4m3, 2, 1, 0>, 2, 0, -2},
        {"W8 line prefetch 2", kdec<fi_e4m3, 8, 1, 0>, 8, 0, -2},
        {"W4 early K + line prefetch 2", kdec<fi_e4m3, 4, 1, 16>, 4, 0, -2},
        {"W4 int cvt + line prefetch 2", kdec<fi_e4m3, 4, 1, 8>, 4, 0, -2},
        {"W4 KV head pairs", kdec<fi_e4m3, 4, 1, 0>, 4, 2},
        {"W2 KV head pairs", kdec<fi_e4m3, 2, 1, 0>, 2, 2},
        {"W8 KV head pairs", kdec<fi_e4m3, 8, 1, 0>, 8, 2},
        {"W4 KV head pairs, line prefetch 1", kdec<fi_e4m3, 4, 1, 0>, 4, 2, -1},
        {"W4 KV head pairs, loads only", kdec<fi_e4m3, 4, 1, 2>, 4, 2},
        {"W4 KV head pairs, PF0", kdec<fi_e4m3, 4, 0, 0>, 4, 2},
        {"W4 default (again)", kdec<fi_e4m3, 4, 1, 0>, 4, 0},
        {"W2 (again)", kdec<fi_e4m3, 2, 1, 0>, 2, 0},
      };
    } else {
      vars = {
        {"W2 default", kdec<fi_bf16, 2, 1, 0>, 2, 0},
        {"W4", kdec<fi_bf16, 4, 1, 0>, 4, 0},
        {"W2 loads only", kdec<fi_bf16, 2, 1, 2>, 2, 0},
        {"W2 L2-resident", kdec<fi_bf16, 2, 1, 0>, 2, 1},
        {"W2 request-major", kdec<fi_bf16, 2, 1, 1>, 2, 0},
        {"W2 early K", kdec<fi_bf16, 2, 1, 16>, 2, 0},
        {"W2 line prefetch 2", kdec<fi_bf16, 2, 1, 0>, 2, 0, -2},
        {"W2 default (again)", kdec<fi_bf16, 2, 1, 0>, 2, 0},
      };
    }
    for (auto &v : vars) {
      double t = time_var(v, fp8, 10);
      printf("| %s | %.2f | %.3f | %.1f%% |\n", v.name, t, bytes / (t * 1e-6) / 1e12, 100.0 * bytes / (t * 1e-6) / 1e12 / rd);
    }
    if (fp8) {
      printf("err W4 default %.3g, int cvt %.3g, early K %.3g, request-major %.3g, early K+int %.3g, W2 early K %.3g\n",
             check(1, kdec<fi_e4m3, 4, 1, 0>, 4), check(1, kdec<fi_e4m3, 4, 1, 8>, 4), check(1, kdec<fi_e4m3, 4, 1, 16>, 4),
             check(1, kdec<fi_e4m3, 4, 1, 1>, 4), check(1, kdec<fi_e4m3, 4, 1, 24>, 4), check(1, kdec<fi_e4m3, 2, 1, 16>, 2));
      printf("err KV head pairs W4 %.3g, W2 %.3g, PF0 %.3g\n", check(1, kdec<fi_e4m3, 4, 1, 0>, 4, 1),
             check(1, kdec<fi_e4m3, 2, 1, 0>, 2, 1), check(1, kdec<fi_e4m3, 4, 0, 0>, 4, 1));
    } else {
      printf("err W2 default %.3g, early K %.3g, request-major %.3g\n", check(0, kdec<fi_bf16, 2, 1, 0>, 2),
             check(0, kdec<fi_bf16, 2, 1, 16>, 2), check(0, kdec<fi_bf16, 2, 1, 1>, 2));
    }
    CK(cudaFree(dk)); CK(cudaFree(dv)); for (int s = 0; s < SETS; s++) CK(cudaFree(dix[s])); CK(cudaFree(dixl2));
  }
  printf("done\n");
  return 0;
}
