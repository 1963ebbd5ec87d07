// decode_loads.cu: how fast can a decode kernel's paged KV read go on this GPU? Loads only
// (no math: each loaded word is folded into an xor the compiler must keep), bf16, D = 128,
// page 16 NHD with pages in random order, the layouts of fi-bench decode's target rows,
// against a 16-byte streaming read of 1 GiB measured in the same process. Three ways to
// load: registers (a warp instruction reads two tokens' whole 256-byte rows, U instructions
// in flight a lane for K and V each), registers in the present decode kernel's order (64
// bytes of each of 8 rows an instruction), and a cp.async ring in shared memory
// (FlashInfer's way: NS stages of T tokens of K and V, a block's threads each copying
// 16-byte pieces of whole rows). Each block reads one KV head of one request, or a 1/S
// share of its tokens.
// Usage: decode-loads (on the GPU machine; make build/decode-loads). Not part of make all.
#include "cuda_bench.cuh"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

struct kv {
  const uint4 *k, *v;      // [pages][16][hkv][128] bf16, as 16-byte pieces
  const int32_t *idx;      // [B][np]: request b's pages
  int L, hkv, np, split;   // tokens a request, KV heads, pages a request, blocks a (request, head)
  unsigned *sink;
};

__device__ __forceinline__ uint4 ldg16(const uint4 *p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
// The 16-byte piece c (0-15) of token t's row of head h for request b.
__device__ __forceinline__ int64_t piece(const kv &p, int b, int h, int t, int c) {
  const int pg = __ldg(p.idx + (int64_t)b * p.np + (t >> 4));
  return (((int64_t)pg * 16 + (t & 15)) * p.hkv + h) * 16 + c;
}

// Registers: W warps; a warp instruction covers tokens 2i, 2i + 1 (lanes 0-15, 16-31), U of
// them issued before any is used.
template <int W, int U>
__global__ void __launch_bounds__(W * 32) kregs(const kv p) {
  const int b = blockIdx.x, h = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int per = p.L / p.split, t0 = blockIdx.z * per;
  uint32_t acc = 0;
  for (int base = t0 + 2 * U * w; base < t0 + per; base += 2 * U * W) {
    int64_t off[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int t = min(base + 2 * u + (lane >> 4), t0 + per - 1);
      off[u] = piece(p, b, h, t, lane & 15);
    }
    uint4 a[U], c[U];
#pragma unroll
    for (int u = 0; u < U; u++) a[u] = ldg16(p.k + off[u]), c[u] = ldg16(p.v + off[u]);
#pragma unroll
    for (int u = 0; u < U; u++) acc ^= a[u].x ^ a[u].w ^ c[u].y ^ c[u].z;
  }
  if (acc == 0x9e3779b9u) p.sink[0] = acc;
}

// Registers in the present decode kernel's order: a warp instruction reads 64 bytes of each
// of 8 rows (lane g, c: row g, piece c + 4 j), 4 instructions a row's 256 bytes, U groups
// of 8 rows in flight.
template <int W, int U>
__global__ void __launch_bounds__(W * 32) khalf(const kv p) {
  const int b = blockIdx.x, h = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int per = p.L / p.split, t0 = blockIdx.z * per;
  uint32_t acc = 0;
  for (int base = t0 + 8 * U * w; base < t0 + per; base += 8 * U * W) {
    int64_t off[U];
#pragma unroll
    for (int u = 0; u < U; u++) off[u] = piece(p, b, h, min(base + 8 * u + g, t0 + per - 1), c);
    uint4 a[U][4], d[U][4];
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int j = 0; j < 4; j++) a[u][j] = ldg16(p.k + off[u] + 4 * j), d[u][j] = ldg16(p.v + off[u] + 4 * j);
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int j = 0; j < 4; j++) acc ^= a[u][j].x ^ a[u][j].w ^ d[u][j].y ^ d[u][j].z;
  }
  if (acc == 0x9e3779b9u) p.sink[0] = acc;
}

// cp.async ring: NS stages of T tokens of K and V (T x 256 bytes of each), every thread
// copying (2 T 16) / (32 W) 16-byte pieces a stage (consecutive threads: consecutive pieces
// of a row); the block waits for the oldest stage, reads it back and frees it.
__device__ __forceinline__ void cp16(uint32_t dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
template <int W, int NS, int T>
__global__ void __launch_bounds__(W * 32) kring(const kv p) {
  extern __shared__ uint4 ring[];  // [NS][2][T][16]
  const int b = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int per = p.L / p.split, t0 = blockIdx.z * per, tiles = per / T;
  constexpr int PIECES = 2 * T * 16, PT = PIECES / (W * 32);
  static_assert(PIECES % (W * 32) == 0, "pieces a thread");
  const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(ring);
  auto issue = [&](int i) {
    if (i < tiles) {
      const int s = i % NS;
#pragma unroll
      for (int j = 0; j < PT; j++) {
        const int q = tid + j * W * 32, kvsel = q / (T * 16), r = q % (T * 16), t = t0 + i * T + r / 16;
        const int64_t o = piece(p, b, h, t, r & 15);
        cp16(sbase + (uint32_t)(((s * 2 + kvsel) * T * 16 + r) * 16), (kvsel ? p.v : p.k) + o);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  for (int i = 0; i < NS - 1; i++) issue(i);
  uint32_t acc = 0;
  for (int i = 0; i < tiles; i++) {
    asm volatile("cp.async.wait_group %0;" ::"n"(NS - 2) : "memory");
    __syncthreads();
    const int s = i % NS;
#pragma unroll
    for (int j = 0; j < PT; j++) {
      const uint4 x = ring[(s * 2) * T * 16 + ((tid + 7 * j) % PIECES)];
      acc ^= x.x ^ x.w;
    }
    __syncthreads();
    issue(i + NS - 1);
  }
  if (acc == 0x9e3779b9u) p.sink[0] = acc;
}

__global__ void __launch_bounds__(256) kprobe(const uint4 *v, int64_t n, unsigned *sink) {
  uint32_t acc = 0;
  const int64_t step = (int64_t)blockDim.x * gridDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    const uint4 x = ldg16(v + i);
    acc ^= x.x ^ x.y ^ x.z ^ x.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  unsigned *sink;
  CK(cudaMalloc(&sink, 4));
  const int64_t pn = (int64_t)1 << 26;  // 1 GiB of 16-byte pieces
  uint4 *pa;
  CK(cudaMalloc(&pa, pn * 16));
  CK(cudaMemset(pa, 1, pn * 16));
  auto probe = [&]() {
    return median_launch_us([&](int) { kprobe<<<sms * 8, 256>>>(pa, pn, sink); }, 3, 9, 5);
  };
  const double rd = pn * 16.0 / (probe() * 1e-6) / 1e12;
  printf("read roofline: %.3f TB/s (1 GiB, 16-byte loads)\n", rd);
  CK(cudaFree(pa));
  struct shape { int B, L, hkv, split; const char *what; };
  const shape shapes[] = {{64, 4096, 32, 1, "MHA 32/32 B=64 L=4096"}, {64, 4096, 8, 1, "GQA x/8 B=64 L=4096"},
                          {16, 16384, 8, 2, "GQA x/8 B=16 L=16384 (2 blocks a head)"},
                          {128, 1024, 8, 1, "GQA x/8 B=128 L=1024"}};
  for (const shape &s : shapes) {
    const int np = s.L / 16;
    const int64_t pages = (int64_t)s.B * np, words = pages * 16 * s.hkv * 16;
    uint4 *k, *v;
    CK(cudaMalloc(&k, words * 16));
    CK(cudaMalloc(&v, words * 16));
    CK(cudaMemset(k, 2, words * 16));
    CK(cudaMemset(v, 3, words * 16));
    std::vector<int32_t> perm(pages);
    for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
    uint64_t r = 88172645463325252ull;
    for (int64_t i = pages - 1; i > 0; i--) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      std::swap(perm[i], perm[r % (uint64_t)(i + 1)]);
    }
    int32_t *idx, *seq;
    CK(cudaMalloc(&idx, pages * 4));
    CK(cudaMalloc(&seq, pages * 4));
    CK(cudaMemcpy(idx, perm.data(), pages * 4, cudaMemcpyHostToDevice));
    for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
    CK(cudaMemcpy(seq, perm.data(), pages * 4, cudaMemcpyHostToDevice));
    const double bytes = 2.0 * words * 16;
    printf("\n== %s: %.0f MB of K and V, pages in random order\n| loads | us | TB/s | of read |\n|---|---|---|---|\n",
           s.what, bytes / 1e6);
    kv p = {k, v, idx, s.L, s.hkv, np, s.split, sink};
    const dim3 grid(s.B, s.hkv, s.split);
    // every variant launched as the runtime does (PDL)
    auto ringrow = [&](const char *name, auto kern, int threads, int smem) {
      if (smem > 48 * 1024) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      const double us =
          median_launch_us([&](int) { launch_pdl_smem(kern, grid, dim3(threads), (size_t)smem, p); }, 3, 9, 5);
      const double tbs = bytes / (us * 1e-6) / 1e12;
      printf("| %s | %.1f | %.3f | %.1f%% |\n", name, us, tbs, 100.0 * tbs / rd);
      fflush(stdout);
    };
    auto row = [&](const char *name, auto kern, int threads) { ringrow(name, kern, threads, 0); };
    row("regs, 2 warps, 4 in flight", kregs<2, 4>, 64);
    row("regs, 4 warps, 4 in flight", kregs<4, 4>, 128);
    row("regs, 4 warps, 8 in flight", kregs<4, 8>, 128);
    row("regs, 8 warps, 4 in flight", kregs<8, 4>, 256);
    row("regs in half lines (the kernel's order), 2 warps, 1 group of 8 rows", khalf<2, 1>, 64);
    row("regs in half lines, 4 warps, 1 group", khalf<4, 1>, 128);
    row("regs in half lines, 4 warps, 2 groups", khalf<4, 2>, 128);
    ringrow("cp.async ring, 4 warps, 4 stages of 16 tokens (32 KB)", kring<4, 4, 16>, 128, 4 * 2 * 16 * 256);
    ringrow("cp.async ring, 4 warps, 8 stages of 16 tokens (64 KB)", kring<4, 8, 16>, 128, 8 * 2 * 16 * 256);
    ringrow("cp.async ring, 4 warps, 4 stages of 32 tokens (64 KB)", kring<4, 4, 32>, 128, 4 * 2 * 32 * 256);
    ringrow("cp.async ring, 2 warps, 4 stages of 16 tokens (32 KB)", kring<2, 4, 16>, 64, 4 * 2 * 16 * 256);
    p.idx = seq;
    row("regs, 4 warps, 8 in flight, pages in order", kregs<4, 8>, 128);
    ringrow("cp.async ring, 4 warps, 4 x 16, pages in order", kring<4, 4, 16>, 128, 4 * 2 * 16 * 256);
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(idx));
    CK(cudaFree(seq));
  }
  printf("done\n");
  return 0;
}
