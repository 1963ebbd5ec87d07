/* fi_cuda_min.h: the few CUDA driver calls fi-bench and the GPU tests make for
 * themselves (memory, events, streams), dlopen'ed so neither links libcuda. */
#ifndef FI_CUDA_MIN_H
#define FI_CUDA_MIN_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUfunc_st *CUfunction;

typedef struct cu_api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(int *, int);
  CUresult (*cuDeviceGetName)(char *, int, int);
  CUresult (*cuDeviceGetAttribute)(int *, int, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
} cu_api;

/* Loads libcuda and makes device 0's primary context current. 0 on success. */
static inline int cu_min_init(cu_api *cu, CUcontext *ctx, char *err, size_t errlen) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(err, errlen, "libcuda.so.1: %s", dlerror());
    return -1;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {
#define S(n, sym) {sym, (void **)&cu->n}
      S(cuInit, "cuInit"), S(cuDeviceGet, "cuDeviceGet"), S(cuDeviceGetName, "cuDeviceGetName"),
      S(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
      S(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
      S(cuCtxSetCurrent, "cuCtxSetCurrent"), S(cuCtxSynchronize, "cuCtxSynchronize"),
      S(cuMemAlloc, "cuMemAlloc_v2"), S(cuMemFree, "cuMemFree_v2"),
      S(cuMemcpyHtoD, "cuMemcpyHtoD_v2"), S(cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
      S(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"), S(cuMemsetD8, "cuMemsetD8_v2"),
      S(cuStreamCreate, "cuStreamCreate"), S(cuStreamDestroy, "cuStreamDestroy_v2"),
      S(cuStreamSynchronize, "cuStreamSynchronize"), S(cuEventCreate, "cuEventCreate"),
      S(cuEventDestroy, "cuEventDestroy_v2"),
      S(cuEventRecord, "cuEventRecord"), S(cuEventSynchronize, "cuEventSynchronize"),
      S(cuEventElapsedTime, "cuEventElapsedTime"), S(cuLaunchKernel, "cuLaunchKernel"),
      S(cuGetErrorString, "cuGetErrorString"),
#undef S
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(h, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(err, errlen, "libcuda.so.1 lacks %s", syms[i].name);
      return -1;
    }
  }
  int dev;
  CUresult r;
  if ((r = cu->cuInit(0)) || (r = cu->cuDeviceGet(&dev, 0)) ||
      (r = cu->cuDevicePrimaryCtxRetain(ctx, dev)) || (r = cu->cuCtxSetCurrent(*ctx))) {
    snprintf(err, errlen, "CUDA initialization failed: error %d", r);
    return -1;
  }
  return 0;
}

/* Aborts the tool (not the library) on a failed driver call: a benchmark
 * or test that cannot allocate has nothing left to measure. */
#define CU_CHECK(cu, call)                                                             \
  do {                                                                                 \
    CUresult r_ = (cu)->call;                                                          \
    if (r_ != 0) {                                                                     \
      const char *s_ = "";                                                             \
      (cu)->cuGetErrorString(r_, &s_);                                                 \
      fprintf(stderr, "%s:%d: %s failed: %d %s\n", __FILE__, __LINE__, #call, r_, s_); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

#endif
