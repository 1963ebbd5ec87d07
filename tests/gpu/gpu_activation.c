/* gpu_activation.c: fi_silu_and_mul, fi_gelu_and_mul and fi_gelu_tanh_and_mul on the GPU against
 * a float64 reference: fresh random inputs, poisoned outputs, every element written, nothing else. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ft.h"
#include "gpu_util.h"

static cu_api cu;
static CUcontext ctx;
static fi_runtime *rt;
static uint64_t seed;

static int setup(void) {
  if (rt) return 0;
  if (g_setup(&cu, &ctx, &rt, &seed) != 0) return -1;
  return 0;
}

typedef fi_status (*act_fn)(fi_runtime *, const DLTensor *, DLTensor *, void *);
static const act_fn acts[3] = {fi_silu_and_mul, fi_gelu_and_mul, fi_gelu_tanh_and_mul};
static const char *const act_names[3] = {"silu", "gelu", "gelu_tanh"};

static double ref_act(int act, double x) {
  if (act == 0) return x / (1.0 + exp(-x));
  if (act == 1) return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* One case's geometry, in elements. With `fused`, input and out share one
 * buffer of rows of 3d: input is its first 2d columns, out the last d. */
typedef struct geom {
  int64_t rows, d, in_stride, out_stride, in_off, out_off;
  int fused;
} geom;

typedef struct result {
  double err;
  int64_t unwritten;   /* outputs still holding the poison */
  int64_t outside;     /* bytes outside out's elements that changed (gaps, guard, fused input) */
  int64_t input_changed;
  fi_status st;
} result;

/* Bytes [a, b) of buf must all be `want`; returns how many are not. */
static int64_t count_not(const unsigned char *buf, int64_t a, int64_t b, unsigned char want) {
  int64_t n = 0;
  for (int64_t i = a; i < b; i++) n += buf[i] != want;
  return n;
}

#define GUARD 64 /* elements of poison after the last output, must stay poisoned */

static result run_case(int act, int dt, geom g, CUstream stream) {
  const int es = g_esize(dt);
  result res = {0, 0, 0, 0, FI_OK};
  if (g.fused) {
    g.in_stride = g.out_stride = 3 * g.d;
    g.out_off = g.in_off + 2 * g.d;
  }
  const int64_t rows = g.rows, d = g.d;
  const int64_t in_elems = g.in_off + (rows ? (rows - 1) * g.in_stride + 2 * d : 0);
  const int64_t out_elems = g.out_off + (rows ? (rows - 1) * g.out_stride + d : 0) + GUARD;
  /* Input: random everywhere, the gaps between rows too (the kernel must
   * not care what they hold). The gate spans the activations' curved
   * parts and their tails. */
  unsigned char *hin = malloc((size_t)(in_elems * es) + 1);
  for (int64_t i = 0; i < in_elems; i++) g_put(hin, dt, i, (g_uniform(&seed) * 2.0 - 1.0) * 2.0);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < d; c++)
      g_put(hin, dt, g.in_off + r * g.in_stride + c, (g_uniform(&seed) * 2.0 - 1.0) * 7.0);
  /* init: the out buffer's bytes before the call. Every byte that is not
   * one of out's elements must still hold them after it. */
  CUdeviceptr din, dout;
  int64_t out_bytes = out_elems * es;
  if (g.fused && in_elems > out_elems) out_bytes = in_elems * es;
  unsigned char *hout = malloc((size_t)out_bytes), *init = malloc((size_t)out_bytes);
  memset(init, 0xff, (size_t)out_bytes); /* NaN in every dtype */
  if (g.fused) {
    memcpy(init, hin, (size_t)(in_elems * es));
    for (int64_t r = 0; r < rows; r++)
      memset(init + (g.out_off + r * g.out_stride) * es, 0xff, (size_t)(d * es));
    CU_CHECK(&cu, cuMemAlloc(&din, (size_t)out_bytes));
    CU_CHECK(&cu, cuMemcpyHtoD(din, init, (size_t)out_bytes));
    dout = din;
  } else {
    CU_CHECK(&cu, cuMemAlloc(&din, (size_t)(in_elems * es) + 16));
    CU_CHECK(&cu, cuMemAlloc(&dout, (size_t)out_bytes));
    CU_CHECK(&cu, cuMemcpyHtoD(din, hin, (size_t)(in_elems * es)));
    CU_CHECK(&cu, cuMemcpyHtoD(dout, init, (size_t)out_bytes));
  }
  int64_t sin[2] = {rows, 2 * d}, stin[2] = {g.in_stride, 1};
  int64_t sout[2] = {rows, d}, stout[2] = {g.out_stride, 1};
  DLTensor tin = g_tensor(din, g.in_off * es, dt, 2, sin, stin);
  DLTensor tout = g_tensor(dout, g.out_off * es, dt, 2, sout, stout);
  /* Pageable uploads (and memsets) go out on the legacy stream and may still be in
   * flight: a non-blocking stream does not wait for them. */
  CU_CHECK(&cu, cuCtxSynchronize());
  res.st = acts[act](rt, &tin, &tout, stream);
  if (res.st != FI_OK) {
    fprintf(stderr, "fi_%s_and_mul: %s: %s\n", act_names[act], fi_status_string(res.st),
            fi_last_error());
  } else {
    CU_CHECK(&cu, cuStreamSynchronize(stream));
    CU_CHECK(&cu, cuMemcpyDtoH(hout, dout, (size_t)out_bytes));
    double num = 0, den = 0;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < d; c++) {
        const int64_t i = g.in_off + r * g.in_stride + c;
        const double ref = ref_act(act, g_get(hin, dt, i)) * g_get(hin, dt, i + d);
        const double got = g_get(hout, dt, g.out_off + r * g.out_stride + c);
        if (got != got) {
          res.unwritten++;
          continue;
        }
        num += (got - ref) * (got - ref);
        den += ref * ref;
      }
    /* The reference's norm counts as at least 0.1 per element: only the
     * few-element cases fall under it, where one output in an activation's
     * far tail (1e-9, say) would otherwise be measured against itself: float16
     * cannot hold it (subnormal or zero) and 1 + erf(x) cancels to ~1e-7. */
    const double floor2 = 0.01 * (double)(rows * d);
    res.err = rows * d > 0 ? sqrt(num / (den > floor2 ? den : floor2)) : 0.0;
    /* Between, before and after out's rows nothing changed (in the fused
     * case that is the input itself). */
    int64_t prev = 0;
    for (int64_t r = 0; r < rows; r++) {
      const int64_t a = (g.out_off + r * g.out_stride) * es;
      for (int64_t i = prev; i < a; i++) res.outside += hout[i] != init[i];
      prev = a + d * es;
    }
    for (int64_t i = prev; i < out_bytes; i++) res.outside += hout[i] != init[i];
    if (!g.fused) { /* the input is read only */
      unsigned char *back = malloc((size_t)(in_elems * es) + 1);
      CU_CHECK(&cu, cuMemcpyDtoH(back, din, (size_t)(in_elems * es)));
      res.input_changed = memcmp(back, hin, (size_t)(in_elems * es)) != 0;
      free(back);
    }
  }
  CU_CHECK(&cu, cuMemFree(din));
  if (!g.fused) CU_CHECK(&cu, cuMemFree(dout));
  free(hin);
  free(hout);
  free(init);
  return res;
}

static double tol(int dt) { return dt == 0 ? 1e-3 : dt == 1 ? 1e-2 : 1e-5; }

static void check(int act, int dt, geom g, CUstream stream) {
  result r = run_case(act, dt, g, stream);
  fprintf(stderr,
          "  %-9s %-4s rows=%lld d=%lld strides=%lld/%lld off=%lld/%lld fused=%d: err %.3g\n",
          act_names[act], g_dtname(dt), (long long)g.rows, (long long)g.d, (long long)g.in_stride,
          (long long)g.out_stride, (long long)g.in_off, (long long)g.out_off, g.fused, r.err);
  FT_CHECK(r.st == FI_OK, "%s %s %lldx%lld: %s", act_names[act], g_dtname(dt), (long long)g.rows,
           (long long)g.d, fi_status_string(r.st));
  if (r.st != FI_OK) return;
  FT_CHECK(r.err < tol(dt), "%s %s %lldx%lld: relative error %.3g over %.1g", act_names[act],
           g_dtname(dt), (long long)g.rows, (long long)g.d, r.err, tol(dt));
  FT_CHECK(r.unwritten == 0, "%s %s %lldx%lld: %lld outputs never written", act_names[act],
           g_dtname(dt), (long long)g.rows, (long long)g.d, (long long)r.unwritten);
  FT_CHECK(r.outside == 0, "%s %s %lldx%lld: %lld bytes outside out overwritten", act_names[act],
           g_dtname(dt), (long long)g.rows, (long long)g.d, (long long)r.outside);
  FT_CHECK(r.input_changed == 0, "%s %s %lldx%lld: the input was modified", act_names[act],
           g_dtname(dt), (long long)g.rows, (long long)g.d);
}

static geom dense(int64_t rows, int64_t d) {
  geom g = {rows, d, 2 * d, d, 0, 0, 0};
  return g;
}

/* Every activation, dtype and d of the list, for one token and for 1000+
 * (one token takes the small-tile kernel, 1001 the large one when d is a
 * multiple of the 16-byte width; odd d takes 2- or 4-byte accesses). */
FT_TEST(act_dtypes_and_sizes) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  static const int64_t ds[] = {1, 3, 127, 128, 4096, 8191, 14336};
  for (int act = 0; act < 3; act++)
    for (int dt = 0; dt < 3; dt++)
      for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        check(act, dt, dense(1, ds[i]), NULL);
        check(act, dt, dense(1001, ds[i]), NULL);
      }
}

FT_TEST(act_strided_rows_and_misaligned) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  for (int act = 0; act < 3; act++)
    for (int dt = 0; dt < 3; dt++) {
      /* Padded rows that keep 16-byte alignment. */
      check(act, dt, (geom){1001, 4096, 2 * 4096 + 8, 4096 + 24, 0, 0, 0}, NULL);
      /* Odd strides: narrow accesses. */
      check(act, dt, (geom){37, 4096, 2 * 4096 + 3, 4096 + 5, 0, 0, 0}, NULL);
      /* Input as the first 2d columns of a wider tensor, out every other row's worth. */
      check(act, dt, (geom){64, 768, 3 * 768, 2 * 768, 0, 0, 0}, NULL);
      /* Starts one element past 16-byte alignment. */
      check(act, dt, (geom){9, 1024, 2048, 1024, 1, 1, 0}, NULL);
      check(act, dt, (geom){1003, 127, 2 * 127 + 1, 130, 0, 3, 0}, NULL);
      /* One buffer of rows [gate | up | out]: disjoint though the extents interleave. */
      check(act, dt, (geom){513, 1024, 0, 0, 0, 0, 1}, NULL);
      check(act, dt, (geom){3, 5, 0, 0, 1, 0, 1}, NULL);
    }
}

FT_TEST(act_many_tokens_and_stream) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUstream s;
  CU_CHECK(&cu, cuStreamCreate(&s, 1 /* non-blocking */));
  check(0, 1, dense(65537, 128), s); /* many grid steps over short rows */
  check(1, 0, dense(20000, 1000), s);
  check(2, 2, dense(3001, 3), s);
  check(0, 1, dense(4096, 14336), s);
  CU_CHECK(&cu, cuStreamDestroy(s));
}

FT_TEST(act_zero_tokens_launches_nothing) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUdeviceptr d;
  CU_CHECK(&cu, cuMemAlloc(&d, 8192));
  CU_CHECK(&cu, cuMemsetD8(d, 0xff, 8192));
  int64_t si[2] = {0, 128}, so[2] = {0, 64};
  DLTensor in = g_tensor(d, 0, 1, 2, si, NULL), out = g_tensor(d, 4096, 1, 2, so, NULL);
  for (int act = 0; act < 3; act++)
    FT_CHECK(acts[act](rt, &in, &out, NULL) == FI_OK, "%s: %s", act_names[act], fi_last_error());
  CU_CHECK(&cu, cuCtxSynchronize());
  unsigned char h[8192];
  CU_CHECK(&cu, cuMemcpyDtoH(h, d, sizeof h));
  FT_CHECK(count_not(h, 0, 8192, 0xff) == 0, "memory written with 0 tokens");
  CU_CHECK(&cu, cuMemFree(d));
}

/* Validation does not depend on the GPU, but here the pointers are real:
 * an overlap let through would show up as a wrong result, not only a status. */
FT_TEST(act_overlap_refused_on_device) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUdeviceptr d;
  CU_CHECK(&cu, cuMemAlloc(&d, 1 << 20));
  int64_t si[2] = {16, 512}, so[2] = {16, 256}, sto[2] = {512, 1};
  DLTensor in = g_tensor(d, 0, 1, 2, si, NULL);
  DLTensor same = g_tensor(d, 0, 1, 2, so, NULL);           /* out = input's first rows */
  DLTensor gate = g_tensor(d, 0, 1, 2, so, sto);            /* out = the gate columns */
  DLTensor up = g_tensor(d, 256 * 2, 1, 2, so, sto);        /* out = the up columns */
  DLTensor *bad[3] = {&same, &gate, &up};
  for (int i = 0; i < 3; i++) {
    fi_status st = fi_silu_and_mul(rt, &in, bad[i], NULL);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "case %d: %s", i, fi_status_string(st));
    FT_CHECK(strstr(fi_last_error(), "overlap") != NULL, "case %d: %s", i, fi_last_error());
  }
  CU_CHECK(&cu, cuMemFree(d));
}

FT_TEST(act_bad_device_id_is_an_error) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUdeviceptr d;
  CU_CHECK(&cu, cuMemAlloc(&d, 8192));
  int64_t si[2] = {4, 128}, so[2] = {4, 64};
  DLTensor in = g_tensor(d, 0, 1, 2, si, NULL), out = g_tensor(d, 4096, 1, 2, so, NULL);
  in.device.device_id = out.device.device_id = 63;
  fi_status st = fi_gelu_and_mul(rt, &in, &out, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "device 63: got %s", fi_status_string(st));
  FT_CHECK(strstr(fi_last_error(), "63") != NULL, "message: %s", fi_last_error());
  CU_CHECK(&cu, cuMemFree(d));
}
