// cluster_probe.cu: where the hardware places the blocks of thread-block clusters, and how
// many clusters of each size fit at once (cudaOccupancyMaxActiveClusters), on this GPU.
// Each block spins 200k clocks and records %smid, %clusterid.x and %cluster_ctarank; a
// launch of 128 blocks (fewer when C does not divide it) per (dynamic shared memory,
// threads, cluster size C) prints the SMs used, the most blocks on one SM, the launch's
// time (one spin is about 100 us: twice that means a second wave) and cluster 0's SMs.
// Why: the twenty-second session's answer to "can split-KV merge in clusters use every
// SM?" (docs/decode.md). Built with nvcc (make build/cluster-probe), run on the GPU machine.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>

#define CK(x)                                                               \
  do {                                                                      \
    cudaError_t e_ = (x);                                                   \
    if (e_ != cudaSuccess) {                                                \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                  \
      return 1;                                                             \
    }                                                                       \
  } while (0)

__global__ void spin(int *out) {
  unsigned smid, rank, cid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));
  const long long t0 = clock64();
  while (clock64() - t0 < 200000) {
  }
  if (threadIdx.x == 0) {
    out[3 * blockIdx.x] = (int)smid;
    out[3 * blockIdx.x + 1] = (int)cid;
    out[3 * blockIdx.x + 2] = (int)rank;
  }
}

int main() {
  int *d;
  const int maxb = 128;
  CK(cudaMalloc(&d, maxb * 3 * sizeof(int)));
  CK(cudaFuncSetAttribute(spin, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const int smems[] = {0, 100 * 1024, 120 * 1024}, threads[] = {64, 128, 256, 512};
  const int sizes[] = {2, 4, 8, 12, 16};
  for (int sm : smems)
    for (int th : threads)
      for (int c : sizes) {
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = c;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.attrs = at;
        cfg.numAttrs = 1;
        cfg.blockDim = dim3(th);
        cfg.dynamicSmemBytes = sm;
        const int nb = maxb / c * c;
        cfg.gridDim = dim3(nb);
        int fit = 0;
        CK(cudaOccupancyMaxActiveClusters(&fit, spin, &cfg));
        CK(cudaMemset(d, 0xff, maxb * 3 * sizeof(int)));
        CK(cudaEventRecord(a));
        CK(cudaLaunchKernelEx(&cfg, spin, d));
        CK(cudaEventRecord(b));
        CK(cudaDeviceSynchronize());
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        std::vector<int> h(nb * 3);
        CK(cudaMemcpy(h.data(), d, nb * 3 * sizeof(int), cudaMemcpyDeviceToHost));
        std::vector<int> per(1024, 0);
        int used = 0, most = 0;
        for (int i = 0; i < nb; i++)
          if (h[3 * i] >= 0 && h[3 * i] < 1024) per[h[3 * i]]++;
        for (int n : per) {
          used += n > 0;
          most = std::max(most, n);
        }
        std::printf("smem %6d threads %3d C %2d: clusters fit %3d, %3d blocks on %3d SMs (%d at most on one), %.1f us; cluster 0 on SMs",
                    sm, th, c, fit, nb, used, most, ms * 1000.0f);
        for (int i = 0; i < nb; i++)
          if (h[3 * i + 1] == h[1]) std::printf(" %d", h[3 * i]);
        std::printf("\n");
      }
  return 0;
}
