/* wgmma_host.h: what lab/gpu/wgmma_attn.c needs: NVRTC (dlopen'ed,
 * as jit/jit_nvrtc.c does) compiling a kernel source for sm_90a with -I<repo>/kernels,
 * and the driver calls fi_cuda_min.h does not load (modules, function attributes). */
#ifndef WGMMA_HOST_H
#define WGMMA_HOST_H

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fi_cuda_min.h"

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
typedef struct wh_nvrtc {
  nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                        const char *const *);
  nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*log_size)(nvrtcProgram, size_t *);
  nvrtcResult (*log)(nvrtcProgram, char *);
  nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
  nvrtcResult (*cubin)(nvrtcProgram, char *);
  nvrtcResult (*destroy)(nvrtcProgram *);
  const char *(*err)(nvrtcResult);
} wh_nvrtc;

static int wh_nvrtc_load(wh_nvrtc *n) {
  static const char *const libs[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                     "/usr/local/cuda/lib64/libnvrtc.so.13"};
  void *h = NULL;
  for (size_t i = 0; i < sizeof libs / sizeof libs[0] && !h; i++) h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "cannot load libnvrtc: %s\n", dlerror());
    return -1;
  }
  static const char *const names[8] = {"nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetProgramLogSize",
                                       "nvrtcGetProgramLog", "nvrtcGetCUBINSize", "nvrtcGetCUBIN",
                                       "nvrtcDestroyProgram", "nvrtcGetErrorString"};
  void **slots[8] = {(void **)&n->create, (void **)&n->compile, (void **)&n->log_size, (void **)&n->log,
                     (void **)&n->cubin_size, (void **)&n->cubin, (void **)&n->destroy, (void **)&n->err};
  for (int i = 0; i < 8; i++)
    if (!(*slots[i] = dlsym(h, names[i]))) {
      fprintf(stderr, "libnvrtc lacks %s\n", names[i]);
      return -1;
    }
  return 0;
}

/* Compiles src for sm_90a with the repo's kernels/ on the include path (FI_KERNELS, or
 * ./kernels from the current directory) plus `extra` options (NULL-terminated); returns
 * a malloc'ed cubin (size in *size) or NULL with the log on stderr. `verbose`: print the
 * ptxas log (registers, spills) of a successful compile; it is also returned in *logp if
 * logp is not NULL (malloc'ed). */
static char *wh_compile(wh_nvrtc *n, const char *src, const char *name, const char *const *extra, int verbose,
                        size_t *size, char **logp) {
  const char *kd = getenv("FI_KERNELS") ? getenv("FI_KERNELS") : "kernels";
  char kabs[PATH_MAX], inc[PATH_MAX + 4];
  if (!realpath(kd, kabs)) {
    fprintf(stderr, "no kernels directory at %s (run from the repository root or set FI_KERNELS)\n", kd);
    return NULL;
  }
  snprintf(inc, sizeof inc, "-I%s", kabs);
  const char *opts[32] = {"--gpu-architecture=sm_90a", "-std=c++17", "-default-device", inc, "-Xptxas", "-v"};
  int no = 6;
  for (int i = 0; extra && extra[i] && no < 31; i++) opts[no++] = extra[i];
  nvrtcProgram prog;
  nvrtcResult r = n->create(&prog, src, name, 0, NULL, NULL);
  if (r) {
    fprintf(stderr, "nvrtcCreateProgram: %s\n", n->err(r));
    return NULL;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  r = n->compile(prog, no, opts);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  size_t ls = 0;
  char *log = NULL;
  if (n->log_size(prog, &ls) == 0 && ls > 1) {
    log = (char *)calloc(ls + 1, 1);
    if (n->log(prog, log)) log[0] = 0;
  }
  if (r) {
    fprintf(stderr, "%s: compile failed: %s\n%s\n", name, n->err(r), log ? log : "");
    free(log);
    n->destroy(&prog);
    return NULL;
  }
  if (verbose)
    fprintf(stderr, "%s: compiled in %.2f s\n%s", name,
            (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec), log ? log : "");
  char *bin = NULL;
  if (n->cubin_size(prog, size) == 0 && *size > 0) {
    bin = (char *)malloc(*size);
    if (n->cubin(prog, bin)) {
      free(bin);
      bin = NULL;
    }
  }
  if (!bin) fprintf(stderr, "%s: no cubin\n", name);
  n->destroy(&prog);
  if (logp)
    *logp = log;
  else
    free(log);
  return bin;
}

/* Driver calls beyond fi_cuda_min.h. */
typedef struct CUmod_st *CUmodule;
typedef struct wh_mod {
  CUresult (*load)(CUmodule *, const void *);
  CUresult (*get)(CUfunction *, CUmodule, const char *);
  CUresult (*set_attr)(CUfunction, int, int);
  CUresult (*get_attr)(int *, int, CUfunction);
  CUresult (*memset16)(CUdeviceptr, unsigned short, size_t);
  CUresult (*cuGetErrorString)(CUresult, const char **); /* for CU_CHECK */
} wh_mod;
#define WH_ATTR_MAX_DYNAMIC_SHARED 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
#define WH_ATTR_NUM_REGS 4           /* CU_FUNC_ATTRIBUTE_NUM_REGS */
#define WH_ATTR_LOCAL_BYTES 3        /* CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES */

static int wh_mod_load(wh_mod *m) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  m->load = (CUresult(*)(CUmodule *, const void *))dlsym(h, "cuModuleLoadData");
  m->get = (CUresult(*)(CUfunction *, CUmodule, const char *))dlsym(h, "cuModuleGetFunction");
  m->set_attr = (CUresult(*)(CUfunction, int, int))dlsym(h, "cuFuncSetAttribute");
  m->get_attr = (CUresult(*)(int *, int, CUfunction))dlsym(h, "cuFuncGetAttribute");
  m->memset16 = (CUresult(*)(CUdeviceptr, unsigned short, size_t))dlsym(h, "cuMemsetD16_v2");
  m->cuGetErrorString = (CUresult(*)(CUresult, const char **))dlsym(h, "cuGetErrorString");
  if (!m->cuGetErrorString || !m->load || !m->get || !m->set_attr || !m->get_attr || !m->memset16) {
    fprintf(stderr, "libcuda.so.1 lacks a module call\n");
    return -1;
  }
  return 0;
}

/* Host 16-bit conversions (as gpu_util.h). */
static inline float wh_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t wh_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float wh_bf16_to_f32(uint16_t b) { return wh_bits_f32((uint32_t)b << 16); }
static inline float wh_f16_to_f32(uint16_t h) {
  uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, m = h & 1023u;
  if (e == 0) {
    float v = ldexpf((float)m, -24);
    return s ? -v : v;
  }
  if (e == 31) return wh_bits_f32(s | 0x7f800000u | (m << 13));
  return wh_bits_f32(s | ((e + 112u) << 23) | (m << 13));
}
static inline uint16_t wh_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t s = (u >> 16) & 0x8000u;
  float a = fabsf(f);
  if (a != a) return (uint16_t)(s | 0x7e00u);
  if (a >= 65520.0f) return (uint16_t)(s | 0x7c00u);
  if (a < 6.103515625e-05f) return (uint16_t)(s | (uint32_t)lrintf(a * 16777216.0f));
  int e;
  float mm = frexpf(a, &e);
  uint32_t mant = (uint32_t)lrintf((mm * 2.0f - 1.0f) * 1024.0f);
  int ex = e - 1 + 15;
  if (mant == 1024) {
    mant = 0;
    ex++;
  }
  return (uint16_t)(s | ((uint32_t)ex << 10) | mant);
}
/* dt: 0 f16, 1 bf16. Rounds x, stores it, returns the stored value. */
static inline double wh_put(uint16_t *buf, int dt, size_t i, double x) {
  buf[i] = dt ? wh_f32_to_bf16((float)x) : wh_f32_to_f16((float)x);
  return dt ? wh_bf16_to_f32(buf[i]) : wh_f16_to_f32(buf[i]);
}
static inline double wh_get(const uint16_t *buf, int dt, size_t i) {
  return dt ? wh_bf16_to_f32(buf[i]) : wh_f16_to_f32(buf[i]);
}
static inline uint64_t wh_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
static inline double wh_uniform(uint64_t *s) { return (double)(wh_rand(s) >> 11) / 9007199254740992.0; }
static inline double wh_normal(uint64_t *s) {
  double u = wh_uniform(s) + 1e-300, v = wh_uniform(s);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
