/* fake_cuda.c: a stand-in libcuda.so for measuring the runtime's host-side cost on a machine
 * without a GPU (lab only, never a test): every call succeeds at once, one sm_90 device with
 * 132 SMs; modules and functions are heap tokens; launches are counted, not run. Load it with
 * FI_CUDA_LIBRARY=/path/to/libfakecuda.so. The cost it shows is the runtime's own instructions
 * (callgrind), not the driver's. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
typedef int CUresult;
typedef int CUdevice;
long fake_launches, fake_launches_ex, fake_ctx_calls, fake_capture_calls;
CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(CUdevice *d, int o) { *d = o; return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, CUdevice d) {
  (void)d;
  switch (a) {
  case 16: *v = 132; break;           /* SMs */
  case 75: *v = 9; break;             /* cc major */
  case 76: *v = 0; break;             /* cc minor */
  case 97: *v = 233472; break;        /* smem optin per block */
  case 81: *v = 233472; break;        /* smem per SM */
  default: *v = 1; break;
  }
  return 0;
}
static int ctxtok;
CUresult cuDevicePrimaryCtxRetain(void **c, CUdevice d) { (void)d; *c = &ctxtok; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return 0; }
static __thread void *cur;
CUresult cuCtxGetCurrent(void **c) { fake_ctx_calls++; *c = cur; return 0; }
CUresult cuCtxPushCurrent_v2(void *c) { fake_ctx_calls++; cur = c; return 0; }
CUresult cuCtxPopCurrent_v2(void **c) { fake_ctx_calls++; if (c) *c = cur; cur = NULL; return 0; }
CUresult cuCtxSetCurrent(void *c) { fake_ctx_calls++; cur = c; return 0; }
CUresult cuModuleLoadData(void **m, const void *img) { (void)img; *m = malloc(16); return 0; }
CUresult cuModuleUnload(void *m) { free(m); return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *n) { (void)m; (void)n; *f = malloc(16); return 0; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { (void)f; (void)a; (void)v; return 0; }
CUresult cuFuncGetAttribute(int *v, int a, void *f) { (void)a; (void)f; *v = 0; return 0; }
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int b, size_t s) {
  (void)f; (void)b; (void)s; *n = 2; return 0;
}
CUresult cuLaunchKernel(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e,
                        unsigned g, unsigned s, void *st, void **p, void **x) {
  (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)s; (void)st; (void)p; (void)x;
  fake_launches++; return 0;
}
typedef struct { int id; char pad[4]; union { char bytes[64]; long long align; int value; } v; } fake_attr;
typedef struct { unsigned grid[3], block[3], shared_bytes; void *stream; fake_attr *attrs; unsigned nattrs; } fake_config;
static fake_config last_cfg;
static fake_attr last_attrs[4];
CUresult cuLaunchKernelEx(const void *cfgv, void *f, void **p, void **x) {
  const fake_config *c = cfgv; /* kept, formatted at exit: the fake must cost next to nothing */
  (void)f; (void)p; (void)x; fake_launches_ex++;
  last_cfg = *c;
  for (unsigned i = 0; i < c->nattrs && i < 4; i++) last_attrs[i] = c->attrs[i];
  return 0;
}
CUresult cuGetErrorName(CUresult r, const char **s) { (void)r; *s = "FAKE"; return 0; }
CUresult cuGetErrorString(CUresult r, const char **s) { (void)r; *s = "fake driver"; return 0; }
CUresult cuStreamIsCapturing(void *s, int *c) { (void)s; fake_capture_calls++; *c = 0; return 0; }
CUresult cuDeviceGetName(char *b, int n, CUdevice d) { (void)d; strncpy(b, "Fake H100", (size_t)n); return 0; }
CUresult cuMemPoolCreate(void **p, const void *pr) { (void)pr; *p = malloc(16); return 0; }
CUresult cuMemPoolDestroy(void *p) { free(p); return 0; }
CUresult cuMemPoolSetAttribute(void *p, int a, void *v) { (void)p; (void)a; (void)v; return 0; }
CUresult cuMemAllocFromPoolAsync(unsigned long long *d, size_t n, void *p, void *s) {
  (void)p; (void)s; *d = (unsigned long long)(size_t)malloc(n ? n : 1); return 0;
}
CUresult cuMemFreeAsync(unsigned long long d, void *s) { (void)s; free((void *)(size_t)d); return 0; }
/* The autotuner's calls (rt_device_tune_i): host memory stands in for the device's, so
 * that fi_autotune's control flow runs (no kernel runs: every output keeps its poison). */
CUresult cuMemAlloc_v2(unsigned long long *d, size_t n) {
  void *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256); /* the driver aligns to 256 bytes at least */
  *d = (unsigned long long)(size_t)p;
  return p ? 0 : 2;
}
CUresult cuMemFree_v2(unsigned long long d) { free((void *)(size_t)d); return 0; }
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void *s, size_t n) { memcpy((void *)(size_t)d, s, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *d, unsigned long long s, size_t n) { memcpy(d, (void *)(size_t)s, n); return 0; }
CUresult cuMemcpyDtoD_v2(unsigned long long d, unsigned long long s, size_t n) { memmove((void *)(size_t)d, (void *)(size_t)s, n); return 0; }
CUresult cuMemsetD32Async(unsigned long long d, unsigned v, size_t n, void *st) {
  (void)st;
  unsigned *p = (unsigned *)(size_t)d;
  for (size_t i = 0; i < n; i++) p[i] = v;
  return 0;
}
static unsigned long fake_clock;
CUresult cuEventCreate(void **e, unsigned f) { (void)f; *e = calloc(1, sizeof(unsigned long)); return 0; }
CUresult cuEventDestroy_v2(void *e) { free(e); return 0; }
CUresult cuEventRecord(void *e, void *s) { (void)s; *(unsigned long *)e = fake_clock += 7 + (unsigned long)fake_launches_ex % 5; return 0; }
CUresult cuEventSynchronize(void *e) { (void)e; return 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { *ms = (float)(*(unsigned long *)b - *(unsigned long *)a) * 1e-3f; return 0; }
CUresult cuStreamSynchronize(void *s) { (void)s; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
/* and what the GPU tests' and fi-bench's own driver table asks for (tools/fi_cuda_min.h) */
CUresult cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, void *st) {
  (void)st;
  memmove((void *)(size_t)d, (void *)(size_t)s, n);
  return 0;
}
CUresult cuMemsetD8_v2(unsigned long long d, unsigned char v, size_t n) { memset((void *)(size_t)d, v, n); return 0; }
CUresult cuStreamCreate(void **s, unsigned f) { (void)f; *s = malloc(8); return 0; }
CUresult cuStreamDestroy_v2(void *s) { free(s); return 0; }

__attribute__((destructor)) static void fake_report(void) {
  if (!getenv("FAKE_CUDA_REPORT")) return;
  char buf[256];
  const fake_config *c = &last_cfg;
  int n = snprintf(buf, sizeof buf, "grid %u,%u,%u block %u,%u,%u smem %u attrs", c->grid[0],
                   c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2], c->shared_bytes);
  for (unsigned i = 0; i < c->nattrs && i < 4; i++)
    n += snprintf(buf + n, sizeof buf - (size_t)n, " %d=%d", last_attrs[i].id, last_attrs[i].v.value);
  fprintf(stderr, "fake_cuda: cuLaunchKernel %ld, cuLaunchKernelEx %ld, ctx calls %ld, cuStreamIsCapturing %ld; last launch: %s\n",
          fake_launches, fake_launches_ex, fake_ctx_calls, fake_capture_calls, buf);
}
