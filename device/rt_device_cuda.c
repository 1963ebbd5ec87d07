/* rt_device_cuda.c: the CUDA driver backend: libcuda.so.1 dlopen'ed at first use,
 * each device's primary context (the one PyTorch uses), modules, and the launch. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlpack/dlpack.h"
#include "jit_dl.h"
#include "rt_device.h"

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;

#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
#define CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED 115
#define CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE 38
#define CU_MEMPOOL_ATTR_RELEASE_THRESHOLD 4
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1

/* cuda.h's CUmemPoolProps (CUDA 11.2 and later; 88 bytes, the tail reserved and zero). */
typedef struct cu_pool_props {
  int alloc_type, handle_types;
  int location_type, location_id;
  void *win32_security;
  size_t max_size;
  unsigned short usage;
  unsigned char reserved[54];
} cu_pool_props;

/* cuda.h's launch configuration for cuLaunchKernelEx (CUDA 11.8 and later),
 * spelled out: the runtime builds without the toolkit's headers. */
typedef struct cu_launch_attr {
  int id;
  char pad[4];
  union {
    char bytes[64];
    long long align;
    int value;
  } v;
} cu_launch_attr;
typedef struct cu_launch_config {
  unsigned grid[3], block[3], shared_bytes;
  CUstream stream;
  cu_launch_attr *attrs;
  unsigned nattrs;
} cu_launch_config;
/* cuda.h's sizes and offsets on LP64 (CUlaunchAttribute 72 bytes, value at 8;
 * CUlaunchConfig 56, hStream at 32): a layout that drifted would hand the driver a
 * garbled configuration, not a compile error. */
#define CU_LP64 (sizeof(void *) == 8)
_Static_assert(!CU_LP64 || (sizeof(cu_launch_attr) == 72 && offsetof(cu_launch_attr, v) == 8),
               "CUlaunchAttribute");
_Static_assert(!CU_LP64 || (sizeof(cu_launch_config) == 56 && offsetof(cu_launch_config, stream) == 32 &&
                            offsetof(cu_launch_config, attrs) == 40 &&
                            offsetof(cu_launch_config, nattrs) == 48),
               "CUlaunchConfig");
_Static_assert(!CU_LP64 || (sizeof(cu_pool_props) == 88 && offsetof(cu_pool_props, win32_security) == 16 &&
                            offsetof(cu_pool_props, usage) == 32),
               "CUmemPoolProps");

/* Every driver entry point the runtime calls, resolved once per process
 * (the driver is process-wide); tests swap entries with rt_cuda_fault. */
static struct {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext *);
  CUresult (*cuCtxPushCurrent_v2)(CUcontext);
  CUresult (*cuCtxPopCurrent_v2)(CUcontext *);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
  CUresult (*cuLaunchKernelEx)(const cu_launch_config *, CUfunction, void **, void **);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  /* stream-ordered scratch (CUDA 11.2 and later; optional) */
  CUresult (*cuMemPoolCreate)(CUmemoryPool *, const cu_pool_props *);
  CUresult (*cuMemPoolDestroy)(CUmemoryPool);
  CUresult (*cuMemPoolSetAttribute)(CUmemoryPool, int, void *);
  CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*cuStreamIsCapturing)(CUstream, int *);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice); /* optional: stored tactics' key */
  /* optional, the autotuner's (rt_device_tune_i) */
  CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoD_v2)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventDestroy_v2)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuCtxSynchronize)(void);
} api;

#define SYM(n) {#n, (void **)&api.n, 0}
static const jit_dl_sym syms[] = {
    SYM(cuInit),           SYM(cuDriverGetVersion),  SYM(cuDeviceGetCount),
    SYM(cuDeviceGet),      SYM(cuDeviceGetAttribute), SYM(cuDevicePrimaryCtxRetain),
    SYM(cuDevicePrimaryCtxRelease_v2), SYM(cuCtxGetCurrent), SYM(cuCtxPushCurrent_v2),
    SYM(cuCtxPopCurrent_v2), SYM(cuModuleLoadData), SYM(cuModuleUnload),
    SYM(cuModuleGetFunction), SYM(cuFuncSetAttribute), SYM(cuLaunchKernel),
    SYM(cuOccupancyMaxActiveBlocksPerMultiprocessor),
    {"cuLaunchKernelEx", (void **)&api.cuLaunchKernelEx, 1},
    SYM(cuGetErrorName),   SYM(cuGetErrorString),
    {"cuMemPoolCreate", (void **)&api.cuMemPoolCreate, 1},
    {"cuMemPoolDestroy", (void **)&api.cuMemPoolDestroy, 1},
    {"cuMemPoolSetAttribute", (void **)&api.cuMemPoolSetAttribute, 1},
    {"cuMemAllocFromPoolAsync", (void **)&api.cuMemAllocFromPoolAsync, 1},
    {"cuMemFreeAsync", (void **)&api.cuMemFreeAsync, 1},
    {"cuStreamIsCapturing", (void **)&api.cuStreamIsCapturing, 1},
    {"cuDeviceGetName", (void **)&api.cuDeviceGetName, 1},
#define OPT(n) {#n, (void **)&api.n, 1}
    OPT(cuMemAlloc_v2),      OPT(cuMemFree_v2),        OPT(cuMemcpyHtoD_v2),
    OPT(cuMemcpyDtoH_v2),    OPT(cuMemcpyDtoD_v2),     OPT(cuMemsetD32Async),
    OPT(cuEventCreate),      OPT(cuEventDestroy_v2),   OPT(cuEventRecord),
    OPT(cuEventSynchronize), OPT(cuEventElapsedTime),  OPT(cuStreamSynchronize),
    OPT(cuCtxSynchronize),
#undef OPT
};
#define NSYMS ((int)(sizeof syms / sizeof syms[0]))

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static int lib_state; /* 0 untried, 1 loaded and initialized, -1 failed */
static char lib_err[512];
static int ndevices;

typedef struct cuda_state {
  pthread_mutex_t mu;
  CUcontext ctx[RT_MAX_DEVICES]; /* retained primary contexts */
  int cc[RT_MAX_DEVICES];        /* compute capability * 10, 0 = not retained yet */
  int sms[RT_MAX_DEVICES];
  int pdl; /* launch with programmatic stream serialization on sm_90 and later */
  char library[4096]; /* FI_CUDA_LIBRARY's value, "" for the default names */
  CUmemoryPool pool[RT_MAX_DEVICES]; /* scratch pools, made at first use */
  int pool_state[RT_MAX_DEVICES];    /* 0 untried, 1 made, -1 not supported */
} cuda_state;

/* The process that initialized the driver: a CUDA call in another one is
 * in a fork() child, where the driver refuses everything. */
static pid_t init_pid;

static void cu_msg(CUresult r, const char *what, char *err, size_t errlen) {
  const char *name = NULL, *str = NULL;
  if (api.cuGetErrorName) api.cuGetErrorName(r, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(r, &str);
  int n = snprintf(err, errlen, "%s: %s (%d): %s", what, name ? name : "CUDA_ERROR", r,
                   str ? str : "");
  pid_t me = getpid();
  if (init_pid && me != init_pid && n >= 0 && (size_t)n < errlen)
    snprintf(err + n, errlen - (size_t)n,
             "; this process (pid %d) is a fork() child of pid %d, which initialized CUDA, and "
             "CUDA cannot be used after fork(): create the runtime and use the GPU only in "
             "processes started fresh (spawn), or fork before the parent uses CUDA",
             (int)me, (int)init_pid);
}

static int load(void *state, char *err, size_t errlen) {
  const cuda_state *s = state;
  pthread_mutex_lock(&lib_lock);
  if (lib_state == 0) {
    static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    void *h = jit_dl_open("FI_CUDA_LIBRARY", s->library, names, NULL, lib_err, sizeof lib_err);
    lib_state = -1;
    if (!h) {
      char tmp[600];
      snprintf(tmp, sizeof tmp, "CUDA driver not found: %s", lib_err);
      snprintf(lib_err, sizeof lib_err, "%.500s", tmp);
    } else if (jit_dl_resolve(h, syms, NSYMS, "libcuda.so.1", lib_err, sizeof lib_err) == 0) {
      CUresult r = api.cuInit(0);
      if (r == 0) init_pid = getpid();
      if (r != 0)
        cu_msg(r, "cuInit", lib_err, sizeof lib_err);
      else if ((r = api.cuDeviceGetCount(&ndevices)) != 0)
        cu_msg(r, "cuDeviceGetCount", lib_err, sizeof lib_err);
      else if (ndevices <= 0)
        snprintf(lib_err, sizeof lib_err, "the CUDA driver reports no device");
      else
        lib_state = 1;
    }
  }
  int ok = lib_state == 1;
  if (!ok) snprintf(err, errlen, "%s", lib_err);
  pthread_mutex_unlock(&lib_lock);
  return ok ? 0 : -1;
}

/* Retains dev's primary context and reads its properties, once. */
static int ensure_device(cuda_state *s, int dev, char *err, size_t errlen) {
  if (dev < 0 || dev >= ndevices || dev >= RT_MAX_DEVICES) {
    snprintf(err, errlen, "device %d does not exist (%d CUDA devices)", dev, ndevices);
    return -1;
  }
  if (__atomic_load_n(&s->cc[dev], __ATOMIC_ACQUIRE)) return 0;
  pthread_mutex_lock(&s->mu);
  int rc = 0;
  if (!s->cc[dev]) {
    CUdevice d;
    int major = 0, minor = 0, sms = 0;
    CUresult r;
    if ((r = api.cuDeviceGet(&d, dev)) != 0) {
      cu_msg(r, "cuDeviceGet", err, errlen);
      rc = -1;
    } else if ((r = api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                             d)) != 0 ||
               (r = api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                             d)) != 0 ||
               (r = api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d)) !=
                   0) {
      cu_msg(r, "cuDeviceGetAttribute", err, errlen);
      rc = -1;
    } else if ((r = api.cuDevicePrimaryCtxRetain(&s->ctx[dev], d)) != 0) {
      cu_msg(r, "cuDevicePrimaryCtxRetain", err, errlen);
      rc = -1;
    } else {
      s->sms[dev] = sms;
      __atomic_store_n(&s->cc[dev], major * 10 + minor, __ATOMIC_RELEASE);
    }
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static int arch(void *state, int dev, char *buf, size_t buflen, char *err, size_t errlen) {
  cuda_state *s = state;
  if (ensure_device(s, dev, err, errlen) != 0) return -1;
  snprintf(buf, buflen, "sm_%d", s->cc[dev]);
  return 0;
}

static int sm_count(void *state, int dev, int *n) {
  cuda_state *s = state;
  char err[256];
  if (ensure_device(s, dev, err, sizeof err) != 0) return -1;
  *n = s->sms[dev];
  return 0;
}

/* Makes dev's primary context current if it is not; *pushed says whether
 * to pop afterwards. Engines like PyTorch already have it current. */
static int enter(cuda_state *s, int dev, int *pushed, char *err, size_t errlen) {
  CUcontext cur = NULL;
  *pushed = 0;
  CUresult r = api.cuCtxGetCurrent(&cur);
  if (r != 0) {
    cu_msg(r, "cuCtxGetCurrent", err, errlen);
    return -1;
  }
  if (cur == s->ctx[dev]) return 0;
  if ((r = api.cuCtxPushCurrent_v2(s->ctx[dev])) != 0) {
    cu_msg(r, "cuCtxPushCurrent", err, errlen);
    return -1;
  }
  *pushed = 1;
  return 0;
}

static void leave(int pushed) {
  CUcontext c;
  if (pushed) api.cuCtxPopCurrent_v2(&c);
}

static int module_load(void *state, int dev, const void *binary, size_t bytes, const char *entry,
                       unsigned max_dyn_smem, void **module, void **fn, char *err,
                       size_t errlen) {
  (void)bytes;
  cuda_state *s = state;
  if (ensure_device(s, dev, err, errlen) != 0) return -1;
  int pushed;
  if (enter(s, dev, &pushed, err, errlen) != 0) return -1;
  CUmodule m = NULL;
  CUfunction f = NULL;
  CUresult r = api.cuModuleLoadData(&m, binary);
  int rc = -1;
  if (r != 0) {
    cu_msg(r, "cuModuleLoadData", err, errlen);
  } else if ((r = api.cuModuleGetFunction(&f, m, entry)) != 0) {
    cu_msg(r, "cuModuleGetFunction", err, errlen);
    api.cuModuleUnload(m);
  } else if (max_dyn_smem &&
             (r = api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         (int)max_dyn_smem)) != 0) {
    cu_msg(r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", err, errlen);
    api.cuModuleUnload(m);
  } else {
    *module = m;
    *fn = f;
    rc = 0;
  }
  leave(pushed);
  return rc;
}

static void module_unload(void *state, int dev, void *module) {
  cuda_state *s = state;
  char err[256];
  int pushed;
  if (enter(s, dev, &pushed, err, sizeof err) != 0) return;
  api.cuModuleUnload(module);
  leave(pushed);
}

static int occupancy(void *state, int dev, void *fn, int threads, unsigned dyn_smem, int *bps,
                     char *err, size_t errlen) {
  cuda_state *s = state;
  int pushed;
  if (enter(s, dev, &pushed, err, errlen) != 0) return -1;
  CUresult r = api.cuOccupancyMaxActiveBlocksPerMultiprocessor(bps, fn, threads, dyn_smem);
  leave(pushed);
  if (r != 0) {
    cu_msg(r, "cuOccupancyMaxActiveBlocksPerMultiprocessor", err, errlen);
    return -1;
  }
  return 0;
}

/* On sm_90 and later a launch allows programmatic dependent launch: the
 * kernel's blocks may be scheduled while the previous kernel in the stream
 * drains its last wave (every kernel's entry waits for the previous grid with
 * griddepcontrol.wait before touching memory, fi_pdl_enter in fi_port.cuh, so
 * results are the same). Between two of our kernels that hides ~1 us of
 * launch gap; after a kernel that does not trigger early (griddepcontrol.
 * launch_dependents) it changes nothing. Ours trigger at entry, so a kernel
 * the caller launches after ours with the same attribute may start early too
 * and must wait (cudaGridDependencySynchronize) before reading our output.
 * FI_PDL=0 turns it off. */
static int launch(void *state, int dev, void *fn, const rt_launch *l, void *stream, void *params,
                  size_t bytes, char *err, size_t errlen) {
  (void)bytes;
  cuda_state *s = state;
  int pushed;
  if (enter(s, dev, &pushed, err, errlen) != 0) return -1;
  void *args[1] = {params};
  CUresult r = 0;
  int tried = 0; /* the attribute was asked for */
  const char *what = "cuLaunchKernel";
  if (__atomic_load_n(&s->pdl, __ATOMIC_RELAXED) && s->cc[dev] >= 90 && api.cuLaunchKernelEx) {
    cu_launch_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.v.value = 1;
    const cu_launch_config c = {{l->grid[0], l->grid[1], l->grid[2]},
                                {l->block[0], l->block[1], l->block[2]},
                                l->shared_bytes,
                                stream,
                                &attr,
                                1};
    tried = 1;
    r = api.cuLaunchKernelEx(&c, fn, args, NULL);
    if (r == 0) what = NULL;
  }
  if (what) {
    /* No attribute asked for, or a driver that refused it (one that cannot record it
     * in a graph capture, say): a plain launch. If that goes through where the
     * attribute's did not, the runtime stops asking for it. */
    r = api.cuLaunchKernel(fn, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
                           l->block[2], l->shared_bytes, stream, args, NULL);
    if (r == 0 && tried) __atomic_store_n(&s->pdl, 0, __ATOMIC_RELAXED);
  }
  leave(pushed);
  if (r != 0) {
    cu_msg(r, what, err, errlen);
    return -1;
  }
  return 0;
}

/* The runtime's own pool on dev (not the device's default pool, whose release threshold
 * is the application's): it keeps what is freed (release threshold: all), so that a
 * scratch allocation after a synchronization costs no new mapping. */
static int ensure_pool(cuda_state *s, int dev, char *err, size_t errlen) {
  int st = __atomic_load_n(&s->pool_state[dev], __ATOMIC_ACQUIRE);
  if (st) return st > 0 ? 0 : 1;
  pthread_mutex_lock(&s->mu);
  int rc = 0;
  if (!s->pool_state[dev]) {
    CUdevice d;
    int ok = 0;
    CUresult r;
    if (!api.cuMemPoolCreate || !api.cuMemPoolDestroy || !api.cuMemPoolSetAttribute ||
        !api.cuMemAllocFromPoolAsync || !api.cuMemFreeAsync ||
        api.cuDeviceGet(&d, dev) != 0 ||
        api.cuDeviceGetAttribute(&ok, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, d) != 0 || !ok) {
      rc = 1; /* an old driver or a device without pools: no scratch */
    } else {
      cu_pool_props pp;
      memset(&pp, 0, sizeof pp);
      pp.alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED;
      pp.location_type = CU_MEM_LOCATION_TYPE_DEVICE;
      pp.location_id = dev;
      unsigned long long keep = ~0ull;
      if ((r = api.cuMemPoolCreate(&s->pool[dev], &pp)) != 0) {
        cu_msg(r, "cuMemPoolCreate", err, errlen);
        s->pool[dev] = NULL;
        rc = -1;
      } else if ((r = api.cuMemPoolSetAttribute(s->pool[dev], CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep)) != 0) {
        cu_msg(r, "cuMemPoolSetAttribute(RELEASE_THRESHOLD)", err, errlen);
        api.cuMemPoolDestroy(s->pool[dev]);
        s->pool[dev] = NULL;
        rc = -1;
      }
    }
    /* A pool that cannot be made now is not tried again (one warning, not one a call):
     * the calls run unsplit. */
    __atomic_store_n(&s->pool_state[dev], rc == 0 ? 1 : -1, __ATOMIC_RELEASE);
  } else {
    rc = s->pool_state[dev] > 0 ? 0 : 1;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* Not on a stream being captured: a graph with allocation nodes may have one instantiation
 * at a time and cannot be cloned or nested as other graphs can, and the pool would be
 * made inside the capture. Captured calls run unsplit (1). */
static int scratch_alloc(void *state, int dev, size_t bytes, void *stream, void **ptr, char *err,
                         size_t errlen) {
  cuda_state *s = state;
  if (ensure_device(s, dev, err, errlen) != 0) return -1;
  int pushed;
  if (enter(s, dev, &pushed, err, errlen) != 0) return -1;
  int capturing = 1; /* unknown (no entry point, or an error such as an implicit capture) */
  if (api.cuStreamIsCapturing && api.cuStreamIsCapturing(stream, &capturing) != 0) capturing = 1;
  int rc = capturing ? 1 : ensure_pool(s, dev, err, errlen);
  CUresult r = 0;
  if (rc == 0) {
    CUdeviceptr p = 0;
    if ((r = api.cuMemAllocFromPoolAsync(&p, bytes, s->pool[dev], stream)) != 0) {
      cu_msg(r, "cuMemAllocFromPoolAsync", err, errlen);
      rc = -1;
    } else {
      *ptr = (void *)(uintptr_t)p;
    }
  }
  leave(pushed);
  return rc;
}

static int scratch_free(void *state, int dev, void *ptr, void *stream, char *err, size_t errlen) {
  cuda_state *s = state;
  int pushed;
  if (enter(s, dev, &pushed, err, errlen) != 0) return -1;
  CUresult r = api.cuMemFreeAsync((CUdeviceptr)(uintptr_t)ptr, stream);
  leave(pushed);
  if (r != 0) {
    cu_msg(r, "cuMemFreeAsync", err, errlen);
    return -1;
  }
  return 0;
}

/* The card's name and the driver's version ("cuda-12.4"): what a stored tactic was
 * measured on, besides the arch and SM count. */
static int identity(void *state, int dev, char *name, size_t namelen, char *driver,
                    size_t driverlen, char *err, size_t errlen) {
  cuda_state *s = state;
  if (ensure_device(s, dev, err, errlen) != 0) return -1;
  if (!api.cuDeviceGetName) {
    snprintf(err, errlen, "this CUDA driver has no cuDeviceGetName");
    return -1;
  }
  CUdevice d;
  int version = 0;
  char buf[256] = "";
  CUresult r = api.cuDeviceGet(&d, dev);
  if (r == 0) r = api.cuDeviceGetName(buf, (int)sizeof buf - 1, d);
  if (r == 0) r = api.cuDriverGetVersion(&version);
  if (r != 0) {
    cu_msg(r, "reading the device's name and driver version", err, errlen);
    return -1;
  }
  snprintf(name, namelen, "%s", buf);
  snprintf(driver, driverlen, "cuda-%d.%d", version / 1000, version % 1000 / 10);
  return 0;
}

/* ---- the autotuner's members (rt_device_tune_i): memory, copies, events, waits ---- */

/* The tuner's calls run in dev's context; a missing entry point is an error naming it. */
#define TUNE_CALL(dev, name, call)                                                        \
  do {                                                                                    \
    cuda_state *s_ = state;                                                               \
    int pushed_;                                                                          \
    if (!api.name) {                                                                      \
      snprintf(err, errlen, "this CUDA driver has no %s", #name);                         \
      return -1;                                                                          \
    }                                                                                     \
    if (ensure_device(s_, dev, err, errlen) != 0 || enter(s_, dev, &pushed_, err, errlen) != 0) \
      return -1;                                                                          \
    CUresult r_ = (call);                                                                 \
    leave(pushed_);                                                                       \
    if (r_ != 0) {                                                                        \
      cu_msg(r_, #name, err, errlen);                                                     \
      return -1;                                                                          \
    }                                                                                     \
    return 0;                                                                             \
  } while (0)

static int t_alloc(void *state, int dev, size_t bytes, void **ptr, char *err, size_t errlen) {
  CUdeviceptr p = 0;
  *ptr = NULL;
  if (!api.cuMemAlloc_v2) {
    snprintf(err, errlen, "this CUDA driver has no cuMemAlloc_v2");
    return -1;
  }
  cuda_state *s = state;
  int pushed;
  if (ensure_device(s, dev, err, errlen) != 0 || enter(s, dev, &pushed, err, errlen) != 0) return -1;
  CUresult r = api.cuMemAlloc_v2(&p, bytes ? bytes : 1);
  leave(pushed);
  if (r != 0) {
    char what[64];
    snprintf(what, sizeof what, "cuMemAlloc(%zu bytes)", bytes);
    cu_msg(r, what, err, errlen);
    return -1;
  }
  *ptr = (void *)(uintptr_t)p;
  return 0;
}

static void t_free(void *state, int dev, void *ptr) {
  cuda_state *s = state;
  char err[256];
  int pushed;
  if (!ptr || !api.cuMemFree_v2 || enter(s, dev, &pushed, err, sizeof err) != 0) return;
  api.cuMemFree_v2((CUdeviceptr)(uintptr_t)ptr);
  leave(pushed);
}

static int t_copy(void *state, int dev, void *dst, const void *src, size_t bytes, int kind, char *err,
                  size_t errlen) {
  const CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sd = (CUdeviceptr)(uintptr_t)src;
  if (kind == RT_COPY_H2D) TUNE_CALL(dev, cuMemcpyHtoD_v2, api.cuMemcpyHtoD_v2(d, src, bytes));
  if (kind == RT_COPY_D2H) TUNE_CALL(dev, cuMemcpyDtoH_v2, api.cuMemcpyDtoH_v2(dst, sd, bytes));
  TUNE_CALL(dev, cuMemcpyDtoD_v2, api.cuMemcpyDtoD_v2(d, sd, bytes));
}

static int t_fill32(void *state, int dev, void *dst, unsigned value, size_t words, void *stream,
                    char *err, size_t errlen) {
  TUNE_CALL(dev, cuMemsetD32Async, api.cuMemsetD32Async((CUdeviceptr)(uintptr_t)dst, value, words, stream));
}

static int t_event_new(void *state, int dev, void **ev, char *err, size_t errlen) {
  *ev = NULL;
  TUNE_CALL(dev, cuEventCreate, api.cuEventCreate((CUevent *)ev, 0));
}

static void t_event_free(void *state, int dev, void *ev) {
  cuda_state *s = state;
  char err[256];
  int pushed;
  if (!ev || !api.cuEventDestroy_v2 || enter(s, dev, &pushed, err, sizeof err) != 0) return;
  api.cuEventDestroy_v2(ev);
  leave(pushed);
}

static int t_event_record(void *state, int dev, void *ev, void *stream, char *err, size_t errlen) {
  TUNE_CALL(dev, cuEventRecord, api.cuEventRecord(ev, stream));
}

static int t_event_sync(void *state, int dev, void *end, char *err, size_t errlen) {
  TUNE_CALL(dev, cuEventSynchronize, api.cuEventSynchronize(end));
}

static int t_event_ms(void *state, int dev, void *start, void *end, float *ms, char *err, size_t errlen) {
  if (t_event_sync(state, dev, end, err, errlen) != 0) return -1;
  TUNE_CALL(dev, cuEventElapsedTime, api.cuEventElapsedTime(ms, start, end));
}

static int t_sync(void *state, int dev, void *stream, char *err, size_t errlen) {
  TUNE_CALL(dev, cuStreamSynchronize, api.cuStreamSynchronize(stream));
}

static int t_cache_bytes(void *state, int dev, size_t *bytes, char *err, size_t errlen) {
  int v = 0;
  CUdevice d;
  *bytes = 0;
  cuda_state *s = state;
  if (ensure_device(s, dev, err, errlen) != 0) return -1;
  CUresult r = api.cuDeviceGet(&d, dev);
  if (r == 0) r = api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d);
  if (r != 0) {
    cu_msg(r, "cuDeviceGetAttribute(L2_CACHE_SIZE)", err, errlen);
    return -1;
  }
  *bytes = v > 0 ? (size_t)v : 0;
  return 0;
}

/* cuStreamIsCapturing fails (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) on the legacy stream while
 * another stream captures in global mode: that counts as capturing too. */
static int t_capturing(void *state, int dev, void *stream, int *yes, char *err, size_t errlen) {
  int c = 1;
  *yes = 1;
  cuda_state *s = state;
  int pushed;
  if (!api.cuStreamIsCapturing) return 0;
  if (ensure_device(s, dev, err, errlen) != 0 || enter(s, dev, &pushed, err, errlen) != 0) return -1;
  if (api.cuStreamIsCapturing(stream, &c) != 0) c = 1;
  leave(pushed);
  *yes = c != 0;
  return 0;
}

static const rt_device_tune_i cuda_tune = {t_alloc,        t_free,     t_copy, t_fill32,      t_event_new, t_event_free,
                                           t_event_record, t_event_ms, t_sync, t_cache_bytes, t_capturing};

static void *create(const rt_device_config *cfg) {
  cuda_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  s->pdl = cfg->pdl;
  snprintf(s->library, sizeof s->library, "%s", cfg->library ? cfg->library : "");
  return s;
}

static void destroy(void *state) {
  cuda_state *s = state;
  for (int d = 0; d < RT_MAX_DEVICES; d++) {
    /* Scratch is freed in stream order before any call returns, so the pools are empty
     * of live allocations once the caller's streams are done. */
    if (s->pool[d]) api.cuMemPoolDestroy(s->pool[d]);
    if (s->cc[d]) api.cuDevicePrimaryCtxRelease_v2(d);
  }
  pthread_mutex_destroy(&s->mu);
  free(s);
}

int rt_cuda_fault(const char *name, void *fn, void **old) {
  return jit_dl_replace(syms, NSYMS, name, fn, old);
}

/* From compute capability 9.0 (Hopper): clusters and programmatic dependent launch; the
 * wgmma kernels are built for sm_90 alone (their instructions are sm_90a's). Shared memory
 * a block may opt into: 227 KiB on sm_90 and sm_100, 163 on sm_80 and sm_87, 99 on the
 * other sm_8x and sm_12x, 64 before (the CUDA programming guide's table). */
static void arch_caps(const char *arch, rt_device_caps *caps) {
  const int cc = strncmp(arch, "sm_", 3) == 0 ? atoi(arch + 3) : 0;
  caps->clusters = cc >= 90;
  caps->pdl = cc >= 90;
  caps->wgmma = strcmp(arch, "sm_90") == 0;
  caps->smem_block_kb = cc == 90 || cc == 100 ? 227 : cc == 80 || cc == 87 ? 163 : cc >= 86 ? 99 : 64;
}

const rt_device_i rt_device_cuda = {
    RT_DEVICE_IFACE_VERSION, "cuda", kDLCUDA, "FI_CUDA_LIBRARY", 32, arch_caps, load, arch, sm_count, module_load,
    module_unload, occupancy, launch, scratch_alloc, scratch_free, create, destroy, identity, &cuda_tune,
};
