/* rt_device_hip.c: the HIP backend behind the same table as CUDA: libamdhip64
 * dlopen'ed at first use, code objects loaded per device, launches on the caller's stream. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlpack/dlpack.h"
#include "jit_dl.h"
#include "rt_device.h"

typedef int hipError_t;
typedef struct ihipModule_t *hipModule_t;
typedef struct ihipModuleSymbol_t *hipFunction_t;
typedef struct ihipStream_t *hipStream_t;

#define hipDeviceAttributeMultiprocessorCount 63 /* HIP 5.x/6.x enum value */

static struct {
  hipError_t (*hipInit)(unsigned);
  hipError_t (*hipGetDeviceCount)(int *);
  hipError_t (*hipGetDevice)(int *);
  hipError_t (*hipSetDevice)(int);
  hipError_t (*hipGetDeviceProperties)(void *, int);
  hipError_t (*hipDeviceGetAttribute)(int *, int, int);
  hipError_t (*hipModuleLoadData)(hipModule_t *, const void *);
  hipError_t (*hipModuleUnload)(hipModule_t);
  hipError_t (*hipModuleGetFunction)(hipFunction_t *, hipModule_t, const char *);
  hipError_t (*hipModuleLaunchKernel)(hipFunction_t, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, unsigned, hipStream_t, void **,
                                      void **);
  const char *(*hipGetErrorString)(hipError_t);
  hipError_t (*hipModuleOccupancyMaxActiveBlocksPerMultiprocessor)(int *, hipFunction_t, int,
                                                                   size_t);
} api;

#define SYM(n) {#n, (void **)&api.n, 0}
static const jit_dl_sym syms[] = {
    SYM(hipInit),           SYM(hipGetDeviceCount),     SYM(hipGetDevice),
    SYM(hipSetDevice),      SYM(hipGetDeviceProperties), SYM(hipDeviceGetAttribute),
    SYM(hipModuleLoadData), SYM(hipModuleUnload),       SYM(hipModuleGetFunction),
    SYM(hipModuleLaunchKernel), SYM(hipGetErrorString),
    SYM(hipModuleOccupancyMaxActiveBlocksPerMultiprocessor),
};
#define NSYMS ((int)(sizeof syms / sizeof syms[0]))

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static int lib_state;
static char lib_err[512];
static int ndevices;

typedef struct hip_state {
  pthread_mutex_t mu;
  char library[4096]; /* FI_HIP_LIBRARY's value, "" for the default names */
  char arch[RT_MAX_DEVICES][32];
  int sms[RT_MAX_DEVICES];
} hip_state;

static void hip_msg(hipError_t r, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: error %d: %s", what, r,
           api.hipGetErrorString ? api.hipGetErrorString(r) : "");
}

static int load(void *state, char *err, size_t errlen) {
  const hip_state *s = state;
  pthread_mutex_lock(&lib_lock);
  if (lib_state == 0) {
    static const char *const names[] = {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so",
                                        NULL};
    void *h = jit_dl_open("FI_HIP_LIBRARY", s->library, names, NULL, lib_err, sizeof lib_err);
    lib_state = -1;
    if (!h) {
      char tmp[600];
      snprintf(tmp, sizeof tmp, "HIP runtime not found: %s", lib_err);
      snprintf(lib_err, sizeof lib_err, "%.500s", tmp);
    } else if (jit_dl_resolve(h, syms, NSYMS, "libamdhip64", lib_err, sizeof lib_err) == 0) {
      hipError_t r = api.hipInit(0);
      if (r != 0)
        hip_msg(r, "hipInit", lib_err, sizeof lib_err);
      else if ((r = api.hipGetDeviceCount(&ndevices)) != 0)
        hip_msg(r, "hipGetDeviceCount", lib_err, sizeof lib_err);
      else if (ndevices <= 0)
        snprintf(lib_err, sizeof lib_err, "the HIP runtime reports no device");
      else
        lib_state = 1;
    }
  }
  int ok = lib_state == 1;
  if (!ok) snprintf(err, errlen, "%s", lib_err);
  pthread_mutex_unlock(&lib_lock);
  return ok ? 0 : -1;
}

/* hipDeviceProp_t changes layout between ROCm releases; rather than depend
 * on one, look for the gcnArchName text ("gfx...") inside a large buffer. */
static int find_gfx(const char *buf, size_t n, char *out, size_t outlen) {
  for (size_t i = 0; i + 6 < n; i++) {
    if (buf[i] == 'g' && buf[i + 1] == 'f' && buf[i + 2] == 'x' && (i == 0 || buf[i - 1] == 0)) {
      size_t len = strnlen(buf + i, n - i);
      if (len < 6 || len >= outlen) continue;
      memcpy(out, buf + i, len + 1);
      char *colon = strchr(out, ':');
      if (colon) *colon = 0; /* drop ":sramecc+:xnack-" feature flags */
      return 0;
    }
  }
  return -1;
}

static int ensure_device(hip_state *s, int dev, char *err, size_t errlen) {
  if (dev < 0 || dev >= ndevices || dev >= RT_MAX_DEVICES) {
    snprintf(err, errlen, "device %d does not exist (%d HIP devices)", dev, ndevices);
    return -1;
  }
  pthread_mutex_lock(&s->mu);
  int rc = 0;
  if (!s->arch[dev][0]) {
    static char props[16384];
    memset(props, 0, sizeof props);
    hipError_t r = api.hipGetDeviceProperties(props, dev);
    int sms = 0;
    if (r != 0) {
      hip_msg(r, "hipGetDeviceProperties", err, errlen);
      rc = -1;
    } else if (find_gfx(props, sizeof props, s->arch[dev], sizeof s->arch[dev]) != 0) {
      snprintf(err, errlen, "device %d: no gcnArchName in its properties", dev);
      rc = -1;
    } else if ((r = api.hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, dev)) !=
               0) {
      hip_msg(r, "hipDeviceGetAttribute", err, errlen);
      s->arch[dev][0] = 0;
      rc = -1;
    } else {
      s->sms[dev] = sms;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static int arch(void *state, int dev, char *buf, size_t buflen, char *err, size_t errlen) {
  hip_state *s = state;
  if (ensure_device(s, dev, err, errlen) != 0) return -1;
  snprintf(buf, buflen, "%s", s->arch[dev]);
  return 0;
}

static int sm_count(void *state, int dev, int *n) {
  hip_state *s = state;
  char err[256];
  if (ensure_device(s, dev, err, sizeof err) != 0) return -1;
  *n = s->sms[dev];
  return 0;
}

/* HIP keeps a current device per thread; switch only when it differs. */
static int enter(int dev, int *prev, char *err, size_t errlen) {
  hipError_t r = api.hipGetDevice(prev);
  if (r != 0) {
    hip_msg(r, "hipGetDevice", err, errlen);
    return -1;
  }
  if (*prev != dev && (r = api.hipSetDevice(dev)) != 0) {
    hip_msg(r, "hipSetDevice", err, errlen);
    return -1;
  }
  return 0;
}

static void leave(int dev, int prev) {
  if (prev != dev) api.hipSetDevice(prev);
}

static int module_load(void *state, int dev, const void *binary, size_t bytes, const char *entry,
                       unsigned max_dyn_smem, void **module, void **fn, char *err,
                       size_t errlen) {
  (void)bytes;
  (void)max_dyn_smem; /* HIP needs no opt-in for large dynamic shared memory */
  hip_state *s = state;
  if (ensure_device(s, dev, err, errlen) != 0) return -1;
  int prev;
  if (enter(dev, &prev, err, errlen) != 0) return -1;
  hipModule_t m = NULL;
  hipFunction_t f = NULL;
  int rc = -1;
  hipError_t r = api.hipModuleLoadData(&m, binary);
  if (r != 0) {
    hip_msg(r, "hipModuleLoadData", err, errlen);
  } else if ((r = api.hipModuleGetFunction(&f, m, entry)) != 0) {
    hip_msg(r, "hipModuleGetFunction", err, errlen);
    api.hipModuleUnload(m);
  } else {
    *module = m;
    *fn = f;
    rc = 0;
  }
  leave(dev, prev);
  return rc;
}

static void module_unload(void *state, int dev, void *module) {
  (void)state;
  int prev;
  char err[128];
  if (enter(dev, &prev, err, sizeof err) != 0) return;
  api.hipModuleUnload(module);
  leave(dev, prev);
}

static int occupancy(void *state, int dev, void *fn, int threads, unsigned dyn_smem, int *bps,
                     char *err, size_t errlen) {
  (void)state;
  int prev;
  if (enter(dev, &prev, err, errlen) != 0) return -1;
  hipError_t r = api.hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(bps, fn, threads, dyn_smem);
  leave(dev, prev);
  if (r != 0) {
    hip_msg(r, "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor", err, errlen);
    return -1;
  }
  return 0;
}

static int launch(void *state, int dev, void *fn, const rt_launch *l, void *stream, void *params,
                  size_t bytes, char *err, size_t errlen) {
  (void)state;
  (void)bytes;
  int prev;
  if (enter(dev, &prev, err, errlen) != 0) return -1;
  void *args[1] = {params};
  hipError_t r = api.hipModuleLaunchKernel(fn, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                                           l->block[1], l->block[2], l->shared_bytes, stream, args,
                                           NULL);
  leave(dev, prev);
  if (r != 0) {
    hip_msg(r, "hipModuleLaunchKernel", err, errlen);
    return -1;
  }
  return 0;
}

static void *create(const rt_device_config *cfg) {
  hip_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  snprintf(s->library, sizeof s->library, "%s", cfg->library ? cfg->library : "");
  return s;
}

static void destroy(void *state) {
  hip_state *s = state;
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* No scratch on ROCm yet (hipMallocFromPoolAsync is not in every ROCm this loads): the
 * members stay NULL, and single decode runs unsplit there. No arch-dependent capability
 * either (no clusters, PDL or wgmma). */
const rt_device_i rt_device_hip = {
    RT_DEVICE_IFACE_VERSION, "hip", kDLROCM, "FI_HIP_LIBRARY", 64, NULL, load, arch, sm_count, module_load,
    module_unload, occupancy, launch, NULL, NULL, create, destroy,
    NULL, /* identity: not read from HIP yet, so no stored tactic is used on AMD GPUs */
    NULL, /* tune: fi_autotune does not measure on AMD GPUs yet */
};
