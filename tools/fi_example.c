/* fi_example.c: what a serving engine does: dlopen libfi_runtime.so, create a
 * runtime, and run fi_rmsnorm on the GPU (checked against the CPU), or say why it cannot. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_cuda_min.h"
#include "fi_runtime.h"

/* The entry points, looked up by name as an engine written in any language would. */
typedef struct fi_api {
  void (*options_init)(fi_options *);
  fi_status (*runtime_create)(const fi_options *, fi_runtime **);
  void (*runtime_destroy)(fi_runtime *);
  fi_status (*rmsnorm)(fi_runtime *, const DLTensor *, const DLTensor *, double, DLTensor *, void *);
  const char *(*last_error)(void);
  const char *(*status_string)(fi_status);
  const char *(*version)(void);
} fi_api;

static float bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

int main(int argc, char **argv) {
  const char *lib = argc > 1 ? argv[1] : "libfi_runtime.so";
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "fi-example: %s\n", dlerror());
    return 1;
  }
  fi_api fi;
  struct {
    const char *name;
    void **slot;
  } syms[] = {{"fi_options_init", (void **)&fi.options_init},
              {"fi_runtime_create", (void **)&fi.runtime_create},
              {"fi_runtime_destroy", (void **)&fi.runtime_destroy},
              {"fi_rmsnorm", (void **)&fi.rmsnorm},
              {"fi_last_error", (void **)&fi.last_error},
              {"fi_status_string", (void **)&fi.status_string},
              {"fi_version", (void **)&fi.version}};
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
    if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
      fprintf(stderr, "fi-example: %s lacks %s\n", lib, syms[i].name);
      return 1;
    }
  printf("fi_runtime %s\n", fi.version());

  fi_options o;
  fi.options_init(&o); /* default cache: $FI_CACHE_PATH or ~/.cache/fi_runtime/kernels.db */
  fi_runtime *rt;
  fi_status st = fi.runtime_create(&o, &rt);
  if (st != FI_OK) {
    fprintf(stderr, "fi-example: %s: %s\n", fi.status_string(st), fi.last_error());
    return 1;
  }

  cu_api cu;
  CUcontext ctx;
  char err[256];
  if (cu_min_init(&cu, &ctx, err, sizeof err) != 0) {
    printf("no CUDA GPU here (%s): the kernel run is skipped\n", err);
    fi.runtime_destroy(rt);
    return 0;
  }
  enum { ROWS = 4, HIDDEN = 4096 };
  static uint16_t x[ROWS * HIDDEN], w[HIDDEN], y[ROWS * HIDDEN];
  srand(7);
  for (int i = 0; i < ROWS * HIDDEN; i++) x[i] = f32_to_bf16((float)rand() / RAND_MAX - 0.5f);
  for (int i = 0; i < HIDDEN; i++) w[i] = f32_to_bf16(1.0f + (float)i / HIDDEN);
  CUdeviceptr dx, dw;
  CU_CHECK(&cu, cuMemAlloc(&dx, sizeof x));
  CU_CHECK(&cu, cuMemAlloc(&dw, sizeof w));
  CU_CHECK(&cu, cuMemcpyHtoD(dx, x, sizeof x));
  CU_CHECK(&cu, cuMemcpyHtoD(dw, w, sizeof w));

  int64_t xshape[2] = {ROWS, HIDDEN}, wshape[1] = {HIDDEN};
  DLDataType bf16 = {kDLBfloat, 16, 1};
  DLTensor tx = {(void *)(uintptr_t)dx, {kDLCUDA, 0}, 2, bf16, xshape, NULL, 0};
  DLTensor tw = {(void *)(uintptr_t)dw, {kDLCUDA, 0}, 1, bf16, wshape, NULL, 0};
  st = fi.rmsnorm(rt, &tx, &tw, 1e-6, &tx, NULL); /* in place, legacy default stream */
  if (st != FI_OK) {
    fprintf(stderr, "fi-example: fi_rmsnorm: %s: %s\n", fi.status_string(st), fi.last_error());
    return 1;
  }
  CU_CHECK(&cu, cuCtxSynchronize());
  CU_CHECK(&cu, cuMemcpyDtoH(y, dx, sizeof y));
  double num = 0, den = 0;
  for (int r = 0; r < ROWS; r++) {
    double ss = 0;
    for (int c = 0; c < HIDDEN; c++) ss += pow(bf16_to_f32(x[r * HIDDEN + c]), 2);
    double inv = 1.0 / sqrt(ss / HIDDEN + 1e-6);
    for (int c = 0; c < HIDDEN; c++) {
      double ref = bf16_to_f32(x[r * HIDDEN + c]) * inv * bf16_to_f32(w[c]);
      num += pow(bf16_to_f32(y[r * HIDDEN + c]) - ref, 2);
      den += ref * ref;
    }
  }
  double rel = sqrt(num / den);
  printf("fi_rmsnorm bf16 %d x %d on the GPU: relative error %.2e against float64 (%s)\n", ROWS,
         HIDDEN, rel, rel < 1e-2 ? "ok" : "WRONG");
  CU_CHECK(&cu, cuMemFree(dx));
  CU_CHECK(&cu, cuMemFree(dw));
  fi.runtime_destroy(rt);
  return rel < 1e-2 ? 0 : 1;
}
