// cuda_bench.cuh: what the standalone nvcc tools (membench, decode-trace, decode-fp8-bench)
// share: a checked CUDA call, the median time of back-to-back launches, a PDL launch.
#pragma once
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

// A failed call prints itself and ends the process at once (_exit: no destructors or
// atexit work touching a context that may be broken).
#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      printf("CUDA %s at line %d: %s\n", #x, __LINE__, cudaGetErrorString(e_));           \
      fflush(stdout);                                                                     \
      _exit(1);                                                                           \
    }                                                                                     \
  } while (0)

// Microseconds a launch: `warm` untimed launch(i) calls, then `reps` batches of `batch`
// back-to-back ones between two events (launch gets the running index, to rotate input
// sets); the median batch, divided by batch.
template <typename F>
static double median_launch_us(F launch, int warm, int reps, int batch) {
  static cudaEvent_t e0, e1;
  if (!e0) {
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  for (int i = 0; i < warm; i++) launch(i);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int r = 0; r < reps; r++) {
    CK(cudaEventRecord(e0));
    for (int i = 0; i < batch; i++) launch(r * batch + i);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1e3 / batch);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

// A launch with programmatic dependent launch allowed, as the runtime makes on sm_90, with
// smem bytes of dynamic shared memory.
template <typename... KA, typename... A>
static void launch_pdl_smem(void (*k)(KA...), dim3 grid, dim3 block, size_t smem, A &&...args) {
  cudaLaunchConfig_t c = {};
  c.gridDim = grid;
  c.blockDim = block;
  c.dynamicSmemBytes = smem;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  c.attrs = at;
  c.numAttrs = 1;
  CK(cudaLaunchKernelEx(&c, k, static_cast<A &&>(args)...));
}
template <typename... KA, typename... A>
static void launch_pdl(void (*k)(KA...), dim3 grid, dim3 block, A &&...args) {
  launch_pdl_smem(k, grid, block, 0, static_cast<A &&>(args)...);
}
