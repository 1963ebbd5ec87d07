// membench.cu: a standalone nvcc microbenchmark of how the H200's memory takes the access
// patterns of fi_runtime's bandwidth-bound kernels (make build/membench; not part of all).
// Sections (all by default, or name them): copy, norms, append. Each row is the median of 9
// batches of 20 back-to-back launches rotating over input sets, against cudaMemcpy of 1 GiB.
#include "fi_port.cuh"
#include "layernorm.cuh"
#include "page.cuh"
#include "cuda_bench.cuh"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>


// ---- copies: a grid-stride loop on a given grid, or one 16-byte vector a thread ----
FI_DEVICE uint4 ld_stream(const uint4 *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
FI_DEVICE void st_stream(uint4 *p, uint4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__global__ void __launch_bounds__(256) copy_loop(const uint4 *a, uint4 *b, size_t n) {
  for (size_t i = blockIdx.x * 256 + threadIdx.x; i < n; i += (size_t)gridDim.x * 256)
    st_stream(b + i, ld_stream(a + i));
}
// Two sources into two destinations, one vector of each a thread (K and V of an append).
__global__ void __launch_bounds__(256) copy_two(const uint4 *a, uint4 *b, const uint4 *c, uint4 *d,
                                                size_t n) {
  const size_t i = (size_t)blockIdx.x * 256 + threadIdx.x;
  if (i >= n) return;
  const uint4 x = ld_stream(a + i), y = ld_stream(c + i);
  st_stream(b + i, x);
  st_stream(d + i, y);
}

// The same with the runtime's kernel entry (launched with programmatic dependent launch).
__global__ void __launch_bounds__(256) copy_two_pdl(const uint4 *a, uint4 *b, const uint4 *c,
                                                    uint4 *d, size_t n) {
  fi_pdl_enter();
  const size_t i = (size_t)blockIdx.x * 256 + threadIdx.x;
  if (i >= n) return;
  const uint4 x = ld_stream(a + i), y = ld_stream(c + i);
  st_stream(b + i, x);
  st_stream(d + i, y);
}

// ---- the norms' kernels as the runtime renders them ----
__global__ void __launch_bounds__(512) ln_c4(fi_norm_params p) { fi::layernorm<fi_bf16, fi_bf16, 8, 4, 0, 1>(p); }
__global__ void __launch_bounds__(512) ln_c8(fi_norm_params p) { fi::layernorm<fi_bf16, fi_bf16, 8, 8, 0, 1>(p); }
__global__ void __launch_bounds__(512) gemma_c2(fi_norm_params p) { fi::rmsnorm_ext<fi_bf16, 8, 2, 1, 1, 0, 1>(p); }
__global__ void __launch_bounds__(512) gemma_c4(fi_norm_params p) { fi::rmsnorm_ext<fi_bf16, 8, 4, 0, 1, 0, 1>(p); }
__global__ void __launch_bounds__(512) fadd_c2(fi_norm_params p) { fi::rmsnorm_ext<fi_bf16, 8, 2, 1, 1, 1, 0>(p); }
__global__ void __launch_bounds__(512) fadd_c4(fi_norm_params p) { fi::rmsnorm_ext<fi_bf16, 8, 4, 0, 1, 1, 0>(p); }

// ---- append variants (bf16 into a bf16 NHD cache, dense [nnz, heads, D] input) ----
__global__ void __launch_bounds__(256) app_kernel(fi_append_paged_kv_params p) {
  fi_pdl_enter();
  fi::append_paged_kv<fi_bf16, fi_bf16, 0, 8, 256>(p);
}
// MODE 0: the page lookup a thread; 1: one precomputed offset a token (offs).
template <int MODE>
__global__ void __launch_bounds__(256) app_flat(fi_append_paged_kv_params p, const int64_t *offs) {
  const int nvt = p.heads * p.head_dim / 8;
  const int64_t vv = (int64_t)blockIdx.x * 256 + threadIdx.x;
  if (vv >= (int64_t)p.nnz * nvt) return;
  const int t = (int)(vv / nvt), e = (int)(vv % nvt);
  const auto k = fi_load_stream<fi_bf16, 8>(static_cast<const fi_bf16 *>(p.append_k) + (int64_t)t * p.ak_stride[0] + e * 8);
  const auto v = fi_load_stream<fi_bf16, 8>(static_cast<const fi_bf16 *>(p.append_v) + (int64_t)t * p.av_stride[0] + e * 8);
  int64_t off;
  if (MODE == 1) {
    off = offs[t];
  } else {
    const int32_t b = p.batch_indices[t];
    const uint32_t pos = (uint32_t)p.positions[t];
    const int32_t page = p.kv_indices[p.kv_indptr[b] + (int32_t)(pos / p.page_size)];
    off = (int64_t)page * p.kc_stride[0] + (int64_t)(pos % p.page_size) * p.kc_stride[1];
  }
  fi_store_stream<fi_bf16, 8>(static_cast<fi_bf16 *>(p.k_cache) + off + e * 8, k);
  fi_store_stream<fi_bf16, 8>(static_cast<fi_bf16 *>(p.v_cache) + off + e * 8, v);
}

// T tokens a block through the bulk-copy engine: their K and V rows (dense, contiguous
// in the input) loaded into shared memory by two bulk copies, then one bulk store a row
// into its page slot (NHD: a token's heads are contiguous in the slot).
template <int T>
__global__ void __launch_bounds__(64) app_bulk(fi_append_paged_kv_params p) {
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ __align__(8) uint64_t bar;
  const int row = p.heads * p.head_dim * 2;  // bytes of a token's K (or V) row
  const int t0 = blockIdx.x * T, nt = min(T, p.nnz - t0);
  const uint32_t b = (uint32_t)__cvta_generic_to_shared(&bar), sk = (uint32_t)__cvta_generic_to_shared(sm);
  const uint32_t sv = sk + T * row;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(2 * nt * row) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(sk), "l"(static_cast<const char *>(p.append_k) + (int64_t)t0 * row), "r"(nt * row), "r"(b) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(sv), "l"(static_cast<const char *>(p.append_v) + (int64_t)t0 * row), "r"(nt * row), "r"(b) : "memory");
  }
  int64_t off = 0;
  const int t = t0 + (int)threadIdx.x;
  if ((int)threadIdx.x < nt) {
    const int32_t bi = p.batch_indices[t];
    const uint32_t pos = (uint32_t)p.positions[t];
    const int32_t page = p.kv_indices[p.kv_indptr[bi] + (int32_t)(pos / p.page_size)];
    off = ((int64_t)page * p.kc_stride[0] + (int64_t)(pos % p.page_size) * p.kc_stride[1]) * 2;
  }
  __syncthreads();  // the barrier's init is seen before anyone waits on it
  uint32_t ok = 0;
  while (!ok)
    asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], 0; selp.u32 %0, 1, 0, q; }"
                 : "=r"(ok) : "r"(b) : "memory");
  if ((int)threadIdx.x < nt) {
    const uint32_t i = threadIdx.x * row;
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(static_cast<char *>(p.k_cache) + off), "r"(sk + i), "r"(row) : "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(static_cast<char *>(p.v_cache) + off), "r"(sv + i), "r"(row) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

// ---- harness ----
static double copy_tbs;
// The median of 9 batches of 20 launches rotating over `sets` input sets.
template <typename F>
static double time_us(F launch, int sets) {
  return median_launch_us([&](int i) { launch(i % sets); }, 3, 9, 20);
}
static void row(const char *name, double us, double bytes) {
  const double tbs = bytes / us / 1e6;
  printf("| %-52s | %8.1f | %6.3f | %5.1f%% |\n", name, us, tbs, 100.0 * tbs / copy_tbs);
  fflush(stdout);
}

static void sec_copy(char *a, char *b, int sms) {
  printf("\n| copy (bytes read + written) | us | TB/s | of memcpy |\n|---|---|---|---|\n");
  for (size_t mb : {32, 128, 512}) {
    const size_t n = mb << 20;
    char nm[96];
    snprintf(nm, sizeof nm, "cudaMemcpy %zu MB", mb);
    row(nm, time_us([&](int i) { CK(cudaMemcpyAsync(b + i * n, a + i * n, n, cudaMemcpyDeviceToDevice)); }, 2), 2.0 * n);
    for (int per : {4, 8, 16}) {
      const int grid = sms * per;
      snprintf(nm, sizeof nm, "%zu MB, grid-stride loop, %d blocks of 256", mb, grid);
      row(nm, time_us([&](int i) { copy_loop<<<grid, 256>>>((const uint4 *)(a + i * n), (uint4 *)(b + i * n), n / 16); }, 2), 2.0 * n);
    }
    const int grid = (int)(n / 16 / 256);
    snprintf(nm, sizeof nm, "%zu MB, one vector a thread (%d blocks)", mb, grid);
    row(nm, time_us([&](int i) { copy_loop<<<grid, 256>>>((const uint4 *)(a + i * n), (uint4 *)(b + i * n), n / 16); }, 2), 2.0 * n);
  }
}

static void sec_norms(char *a, char *b, char *c, int sms) {
  void *w;
  CK(cudaMalloc(&w, 65536 * 4));
  CK(cudaMemset(w, 0x3c, 65536 * 4));
  printf("\n| norms, bf16 (resident: as many blocks as fit, looping over rows) | us | TB/s | of memcpy |\n|---|---|---|---|\n");
  const int shapes[][2] = {{8192, 8192}, {16384, 4096}, {8192, 5120}, {4096, 16384}};
  for (auto &sh : shapes) {
    const int R = sh[0], H = sh[1];
    const size_t tb = (size_t)R * H * 2;
    auto P = [&](int i) {
      fi_norm_params p = {};
      p.input = a + i * tb; p.out = b + i * tb; p.residual = c + i * tb; p.weight = w; p.bias = w;
      p.input_row_stride = p.out_row_stride = p.residual_row_stride = H;
      p.rows = R; p.hidden = H; p.eps = 1e-5f;
      return p;
    };
    struct K { const char *name; void (*k)(fi_norm_params); int chunks; double bytes; } ks[] = {
        {"layernorm, 4 a thread", ln_c4, 4, 2.0 * tb + 4.0 * H},
        {"layernorm, 8 a thread", ln_c8, 8, 2.0 * tb + 4.0 * H},
        {"gemma_rmsnorm, 2 a thread + next-row prefetch", gemma_c2, 2, 2.0 * tb + 2.0 * H},
        {"gemma_rmsnorm, 4 a thread", gemma_c4, 4, 2.0 * tb + 2.0 * H},
        {"fused_add_rmsnorm, 2 a thread + prefetch", fadd_c2, 2, 4.0 * tb + 2.0 * H},
        {"fused_add_rmsnorm, 4 a thread", fadd_c4, 4, 4.0 * tb + 2.0 * H}};
    for (auto &k : ks) {
      const int thr = ((H / 8 + k.chunks - 1) / k.chunks + 31) / 32 * 32;
      if (thr > 512) continue;
      int occ;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k.k, thr, 0));
      char nm[96];
      snprintf(nm, sizeof nm, "%dx%d %s, %d resident", R, H, k.name, sms * occ);
      row(nm, time_us([&](int i) { k.k<<<sms * occ, thr>>>(P(i)); }, 2), k.bytes);
      snprintf(nm, sizeof nm, "%dx%d %s, a block a row", R, H, k.name);
      row(nm, time_us([&](int i) { k.k<<<R, thr>>>(P(i)); }, 2), k.bytes);
    }
  }
  CK(cudaFree(w));
}

static void sec_append(int sms) {
  // fi-bench page's shape: 64 requests x 128 new tokens after 1000, 8 heads x 128, page 16.
  const int reqs = 64, newt = 128, pre = 1000, heads = 8, hd = 128, ps = 16, SETS = 4;
  const int nnz = reqs * newt, ppr = (pre + newt + ps - 1) / ps, pages_set = reqs * ppr;
  const size_t ib = (size_t)nnz * heads * hd * 2, cb = (size_t)SETS * pages_set * ps * heads * hd * 2;
  std::vector<char *> ak(SETS), av(SETS);
  char *kc, *vc;
  for (int s = 0; s < SETS; s++) {  // separate allocations, as fi-bench makes them
    CK(cudaMalloc(&ak[s], ib)); CK(cudaMalloc(&av[s], ib));
    CK(cudaMemset(ak[s], 0x3c, ib)); CK(cudaMemset(av[s], 0x3c, ib));
  }
  CK(cudaMalloc(&kc, cb)); CK(cudaMalloc(&vc, cb));
  std::vector<int32_t> hbi(nnz), hpos(nnz), hidx(SETS * pages_set), hip(reqs + 1);
  for (int r = 0; r <= reqs; r++) hip[r] = r * ppr;
  for (int t = 0; t < nnz; t++) hbi[t] = t / newt, hpos[t] = pre + t % newt;
  uint64_t lcg = 12345;
  for (int s = 0; s < SETS; s++) {  // each set's pages shuffled
    int32_t *h = &hidx[s * pages_set];
    for (int i = 0; i < pages_set; i++) h[i] = s * pages_set + i;
    for (int i = pages_set - 1; i > 0; i--) {
      lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(h[i], h[(lcg >> 33) % (uint64_t)(i + 1)]);
    }
  }
  std::vector<int64_t> hoff((size_t)SETS * nnz);
  for (int s = 0; s < SETS; s++)
    for (int t = 0; t < nnz; t++)
      hoff[(size_t)s * nnz + t] = ((int64_t)hidx[s * pages_set + hip[hbi[t]] + hpos[t] / ps] * ps + hpos[t] % ps) * heads * hd;
  int32_t *bi, *pos, *idx, *ip;
  int64_t *offs;
  CK(cudaMalloc(&bi, nnz * 4)); CK(cudaMalloc(&pos, nnz * 4)); CK(cudaMalloc(&idx, hidx.size() * 4));
  CK(cudaMalloc(&ip, hip.size() * 4)); CK(cudaMalloc(&offs, hoff.size() * 8));
  CK(cudaMemcpy(bi, hbi.data(), nnz * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(pos, hpos.data(), nnz * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(idx, hidx.data(), hidx.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(ip, hip.data(), hip.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(offs, hoff.data(), hoff.size() * 8, cudaMemcpyHostToDevice));
  auto P = [&](int s) {
    fi_append_paged_kv_params p = {};
    p.append_k = ak[s]; p.append_v = av[s]; p.k_cache = kc; p.v_cache = vc;
    p.batch_indices = bi; p.positions = pos; p.kv_indices = idx + s * pages_set; p.kv_indptr = ip;
    p.ak_stride[0] = p.av_stride[0] = heads * hd; p.ak_stride[1] = p.av_stride[1] = hd;
    p.kc_stride[0] = p.vc_stride[0] = (int64_t)ps * heads * hd;
    p.kc_stride[1] = p.vc_stride[1] = heads * hd; p.kc_stride[2] = p.vc_stride[2] = hd;
    p.bi_stride = p.pos_stride = p.indices_stride = p.indptr_stride = 1;
    p.nnz = nnz; p.heads = heads; p.head_dim = hd; p.page_size = ps;
    p.k_inv_scale = p.v_inv_scale = 1.0f;
    return p;
  };
  const int touched = reqs * ((pre + newt - 1) / ps - pre / ps + 1);
  const double bytes = 4.0 * ib + 8.0 * nnz + 4.0 * touched;  // as fi-bench page counts
  const int work = nnz * heads * hd / 8;
  int occ;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, app_kernel, 256, 0));
  printf("\n| append_paged_kv bf16 NHD, 64 x 128 new, 8 x 128, page 16 | us | TB/s | of memcpy |\n|---|---|---|---|\n");
  row("page.cuh's kernel, resident blocks looping", time_us([&](int s) { app_kernel<<<sms * occ, 256>>>(P(s)); }, SETS), bytes);
  // page.cuh takes one vector of K and V a thread into a 16-bit cache (a tile of 256).
  row("page.cuh's kernel, a block per tile", time_us([&](int s) { app_kernel<<<(work + 255) / 256, 256>>>(P(s)); }, SETS), bytes);
  row("page.cuh's kernel, a block per tile, PDL launch", time_us([&](int s) { launch_pdl(app_kernel, (work + 255) / 256, 256, P(s)); }, SETS), bytes);
  row("page.cuh's kernel, half those blocks (two steps a thread)", time_us([&](int s) { app_kernel<<<(work + 511) / 512, 256>>>(P(s)); }, SETS), bytes);
  row("one vector of K and V a thread, page lookup", time_us([&](int s) { app_flat<0><<<work / 256, 256>>>(P(s), nullptr); }, SETS), bytes);
  row("one vector of K and V a thread, offset table", time_us([&](int s) { app_flat<1><<<work / 256, 256>>>(P(s), offs + (size_t)s * nnz); }, SETS), bytes);
  row("K and V copied contiguously (two streams, one kernel)", time_us([&](int s) {
        copy_two<<<(int)(ib / 16 / 256), 256>>>((const uint4 *)ak[s], (uint4 *)(kc + s * ib), (const uint4 *)av[s], (uint4 *)(vc + s * ib), ib / 16); }, SETS), 4.0 * ib);
  row("K and V copied contiguously, PDL launch", time_us([&](int s) {
        launch_pdl(copy_two_pdl, (int)(ib / 16 / 256), 256, (const uint4 *)ak[s], (uint4 *)(kc + s * ib), (const uint4 *)av[s], (uint4 *)(vc + s * ib), ib / 16); }, SETS), 4.0 * ib);
  for (int T : {4, 8, 16}) {
    auto k = T == 4 ? app_bulk<4> : T == 8 ? app_bulk<8> : app_bulk<16>;
    const int smem = 2 * T * heads * hd * 2;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    char nm[96];
    snprintf(nm, sizeof nm, "bulk copies through shared memory, %d tokens a block", T);
    row(nm, time_us([&](int s) { k<<<nnz / T, 64, smem>>>(P(s)); }, SETS), bytes);
  }
  // The variants write the same slots as the kernel: compare once.
  std::vector<uint16_t> h(ib / 2), r1(cb / 2), r2(cb / 2);
  for (auto &x : h) x = (uint16_t)rand();
  CK(cudaMemcpy(ak[0], h.data(), ib, cudaMemcpyHostToDevice));
  CK(cudaMemset(kc, 0, cb)); app_kernel<<<(work + 255) / 256, 256>>>(P(0)); CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(r1.data(), kc, cb, cudaMemcpyDeviceToHost));
  CK(cudaMemset(kc, 0, cb)); app_flat<1><<<work / 256, 256>>>(P(0), offs); CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(r2.data(), kc, cb, cudaMemcpyDeviceToHost));
  size_t diff = 0;
  for (size_t i = 0; i < r1.size(); i++) diff += r1[i] != r2[i];
  printf("offset-table variant against the kernel: %zu of %zu cache elements differ\n", diff, r1.size());
  CK(cudaMemset(kc, 0, cb)); app_bulk<8><<<nnz / 8, 64, 2 * 8 * heads * hd * 2>>>(P(0)); CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(r2.data(), kc, cb, cudaMemcpyDeviceToHost));
  diff = 0;
  for (size_t i = 0; i < r1.size(); i++) diff += r1[i] != r2[i];
  printf("bulk-copy variant against the kernel: %zu of %zu cache elements differ\n", diff, r1.size());
}

int main(int argc, char **argv) {
  int want[3] = {argc == 1, argc == 1, argc == 1};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "copy")) want[0] = 1;
    else if (!strcmp(argv[i], "norms")) want[1] = 1;
    else if (!strcmp(argv[i], "append")) want[2] = 1;
    else {
      printf("usage: membench [copy] [norms] [append]\n");
      return 2;
    }
  }
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t G = (size_t)1 << 30;
  char *a, *b, *c;
  CK(cudaMalloc(&a, G)); CK(cudaMalloc(&b, G)); CK(cudaMalloc(&c, G));
  CK(cudaMemset(a, 0x3c, G)); CK(cudaMemset(b, 0x3c, G)); CK(cudaMemset(c, 0x3c, G));
  const double us = time_us([&](int i) { CK(cudaMemcpyAsync(i ? a : b, i ? b : a, G, cudaMemcpyDeviceToDevice)); }, 2);
  copy_tbs = 2.0 * G / us / 1e6;
  printf("cudaMemcpy 1 GiB: %.1f us, %.3f TB/s (bytes read + written): the 100%% below\n", us, copy_tbs);
  if (want[0]) sec_copy(a, b, sms);
  if (want[1]) sec_norms(a, b, c, sms);
  CK(cudaFree(a)); CK(cudaFree(b)); CK(cudaFree(c));
  if (want[2]) sec_append(sms);
  return 0;
}
