/* gpu_util.h: what the GPU tests share: host fp16/bf16 conversions, random
 * inputs, DLTensor set-up and the relative norm error against a float64 reference. */
#ifndef GPU_UTIL_H
#define GPU_UTIL_H

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fi_cuda_min.h"
#include "fi_runtime.h"

static inline float g_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t g_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float g_bf16_to_f32(uint16_t b) { return g_bits_f32((uint32_t)b << 16); }
static inline uint16_t g_f32_to_bf16(float f) {
  uint32_t u = g_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float g_f16_to_f32(uint16_t h) {
  uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, m = h & 1023u;
  if (e == 0) {
    float v = ldexpf((float)m, -24);
    return s ? -v : v;
  }
  if (e == 31) return g_bits_f32(s | 0x7f800000u | (m << 13));
  return g_bits_f32(s | ((e + 112u) << 23) | (m << 13));
}
static inline uint16_t g_f32_to_f16(float f) {
  /* Round to nearest even through double arithmetic; enough for test data. */
  uint32_t u = g_f32_bits(f), s = (u >> 16) & 0x8000u;
  float a = fabsf(f);
  if (a != a) return (uint16_t)(s | 0x7e00u);
  if (a >= 65520.0f) return (uint16_t)(s | 0x7c00u);
  if (a < 6.103515625e-05f) return (uint16_t)(s | (uint32_t)lrintf(a * 16777216.0f));
  int e;
  float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  uint32_t mant = (uint32_t)lrintf((m * 2.0f - 1.0f) * 1024.0f);
  int ex = e - 1 + 15;
  if (mant == 1024) {
    mant = 0;
    ex++;
  }
  return (uint16_t)(s | ((uint32_t)ex << 10) | mant);
}

/* Once per test binary: the driver and a context, a runtime on FI_TEST_CACHE (in
 * memory by default), and a seed from the clock, printed so that a failure can be
 * replayed. 0, or -1 with the reason on stderr. */
static inline int g_setup(cu_api *cu, CUcontext *ctx, fi_runtime **rt, uint64_t *seed) {
  char err[256];
  if (cu_min_init(cu, ctx, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  fi_options o;
  fi_options_init(&o);
  o.cache_path = getenv("FI_TEST_CACHE") ? getenv("FI_TEST_CACHE") : ":memory:";
  if (fi_runtime_create(&o, rt) != FI_OK) {
    fprintf(stderr, "fi_runtime_create: %s\n", fi_last_error());
    return -1;
  }
  *seed = (uint64_t)time(NULL) * 2654435761u + (uint64_t)clock();
  if (!*seed) *seed = 1;
  fprintf(stderr, "seed %llu\n", (unsigned long long)*seed);
  return 0;
}

/* A runtime like g_setup's, made now. The library reads every FI_* variable once, at
 * fi_runtime_create: a test that sets one (a tuning override) makes a runtime after
 * setting it. NULL, with the reason on stderr, if it cannot be made. */
static inline fi_runtime *g_runtime(void) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = getenv("FI_TEST_CACHE") ? getenv("FI_TEST_CACHE") : ":memory:";
  fi_runtime *rt = NULL;
  if (fi_runtime_create(&o, &rt) != FI_OK) {
    fprintf(stderr, "fi_runtime_create: %s\n", fi_last_error());
    return NULL;
  }
  return rt;
}

/* The driver's stream-capture and graph calls, which fi_cuda_min.h does not load. */
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct g_graph_api {
  CUresult (*begin)(CUstream, int);
  CUresult (*end)(CUstream, CUgraph *);
  CUresult (*inst)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*launch)(CUgraphExec, CUstream);
  CUresult (*exec_destroy)(CUgraphExec);
  CUresult (*destroy)(CUgraph);
} g_graph_api;

/* 0, or -1 with the missing name on stderr. */
static inline int g_load_graph_api(g_graph_api *gr) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "libcuda.so.1: %s\n", dlerror());
    return -1;
  }
  static const char *const names[6] = {"cuStreamBeginCapture_v2", "cuStreamEndCapture",
                                        "cuGraphInstantiateWithFlags", "cuGraphLaunch",
                                        "cuGraphExecDestroy", "cuGraphDestroy"};
  void *f[6];
  for (int i = 0; i < 6; i++)
    if (!(f[i] = dlsym(h, names[i]))) {
      fprintf(stderr, "libcuda.so.1 has no %s\n", names[i]);
      return -1;
    }
  gr->begin = (CUresult(*)(CUstream, int))f[0];
  gr->end = (CUresult(*)(CUstream, CUgraph *))f[1];
  gr->inst = (CUresult(*)(CUgraphExec *, CUgraph, unsigned long long))f[2];
  gr->launch = (CUresult(*)(CUgraphExec, CUstream))f[3];
  gr->exec_destroy = (CUresult(*)(CUgraphExec))f[4];
  gr->destroy = (CUresult(*)(CUgraph))f[5];
  return 0;
}

/* xorshift, seeded per test from the clock so every run sees fresh inputs. */
static inline uint64_t g_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
static inline double g_uniform(uint64_t *s) { return (double)(g_rand(s) >> 11) / 9007199254740992.0; }
static inline double g_normal(uint64_t *s) {
  double u = g_uniform(s) + 1e-300, v = g_uniform(s);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Attention sinks for a test case (decode's and prefill's): hq logits N(0, 2), head 0's
 * far above the keys' (the sink takes nearly all the weight) and the last -inf (no sink),
 * copied to the device, and the fi_attention_extras that pass them. */
typedef struct g_sinks {
  float host[512];
  CUdeviceptr dev;
  int64_t shape[1];
  DLTensor t;
  fi_attention_extras x;
} g_sinks;
static inline int g_sinks_make(cu_api *cu, g_sinks *s, int hq, uint64_t *seed) {
  if (hq < 1 || hq > 512) return -1;
  for (int h = 0; h < hq; h++) s->host[h] = (float)(2.0 * g_normal(seed));
  s->host[0] = 12.0f;
  if (hq > 1) s->host[hq - 1] = -INFINITY;
  CU_CHECK(cu, cuMemAlloc(&s->dev, (size_t)hq * 4));
  CU_CHECK(cu, cuMemcpyHtoD(s->dev, s->host, (size_t)hq * 4));
  s->shape[0] = hq;
  memset(&s->t, 0, sizeof s->t);
  s->t.data = (void *)(uintptr_t)s->dev;
  s->t.device.device_type = kDLCUDA;
  s->t.ndim = 1;
  s->t.dtype.code = kDLFloat, s->t.dtype.bits = 32, s->t.dtype.lanes = 1;
  s->t.shape = s->shape;
  fi_attention_extras_init(&s->x);
  s->x.sinks = &s->t;
  return 0;
}
static inline void g_sinks_free(cu_api *cu, g_sinks *s) { CU_CHECK(cu, cuMemFree(s->dev)); }

/* dtype codes used by the tests: 0 f16, 1 bf16, 2 f32. */
static inline int g_esize(int dt) { return dt == 2 ? 4 : 2; }
static inline const char *g_dtname(int dt) { return dt == 0 ? "f16" : dt == 1 ? "bf16" : "f32"; }
static inline DLDataType g_dl(int dt) {
  DLDataType d;
  d.code = dt == 1 ? kDLBfloat : kDLFloat;
  d.bits = dt == 2 ? 32 : 16;
  d.lanes = 1;
  return d;
}
/* Stores x (rounded to dt) at element i of buf; returns the value stored. */
static inline double g_put(void *buf, int dt, int64_t i, double x) {
  if (dt == 0) {
    uint16_t h = g_f32_to_f16((float)x);
    ((uint16_t *)buf)[i] = h;
    return g_f16_to_f32(h);
  }
  if (dt == 1) {
    uint16_t b = g_f32_to_bf16((float)x);
    ((uint16_t *)buf)[i] = b;
    return g_bf16_to_f32(b);
  }
  ((float *)buf)[i] = (float)x;
  return (float)x;
}
/* fp8 codes (DLPack's type codes: 10 e4m3, 12 e5m2): a code's value, and a random finite
 * code of moderate size (|value| about 2^-4 .. 2^3). */
static inline double g_fp8_value(int t, uint8_t b) {
  if (t == 12) return g_f16_to_f32((uint16_t)(b << 8));
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? m * ldexp(1.0, -9) : ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}
static inline uint8_t g_fp8_random(int t, uint64_t *seed) {
  const int s = (int)(g_rand(seed) & 1);
  if (t == 10) {
    const int e = 3 + (int)(g_rand(seed) % 7), m = (int)(g_rand(seed) % 8);
    return (uint8_t)((s << 7) | (e << 3) | m);
  }
  const int e = 12 + (int)(g_rand(seed) % 6), m = (int)(g_rand(seed) % 4);
  return (uint8_t)((s << 7) | (e << 2) | m);
}
static inline double g_get(const void *buf, int dt, int64_t i) {
  if (dt == 0) return g_f16_to_f32(((const uint16_t *)buf)[i]);
  if (dt == 1) return g_bf16_to_f32(((const uint16_t *)buf)[i]);
  return ((const float *)buf)[i];
}

static inline DLTensor g_tensor(CUdeviceptr p, int64_t byte_offset, int dt, int ndim,
                                int64_t *shape, int64_t *strides) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)(uintptr_t)p;
  t.byte_offset = (uint64_t)byte_offset;
  t.device.device_type = kDLCUDA;
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype = g_dl(dt);
  t.shape = shape;
  t.strides = strides;
  return t;
}

#endif
