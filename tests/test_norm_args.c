/* test_norm_args.c: argument validation of fi_fused_add_rmsnorm, fi_gemma_rmsnorm,
 * fi_gemma_fused_add_rmsnorm and fi_layernorm on a machine with no GPU: every bad
 * argument is FI_ERR_INVALID_ARGUMENT naming it, before any driver is asked. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fi_runtime.h"
#include "ft.h"
#include "test_args_util.h"
#include "rt_internal.h"

/* Fake device addresses, 16 MiB apart (more than any tensor here spans):
 * validation must refuse bad arguments before anything dereferences them. */
#define IN_ADDR ((void *)0x1000000)
#define AUX_ADDR ((void *)0x2000000)
#define W_ADDR ((void *)0x3000000)
#define B_ADDR ((void *)0x4000000)

enum { FN_FUSED, FN_GEMMA_FUSED, FN_GEMMA, FN_LAYERNORM, FN_COUNT };
static const char *const fn_names[FN_COUNT] = {"fi_fused_add_rmsnorm", "fi_gemma_fused_add_rmsnorm",
                                               "fi_gemma_rmsnorm", "fi_layernorm"};
static int fused(int fn) { return fn == FN_FUSED || fn == FN_GEMMA_FUSED; }
/* The name of the second row tensor: the residual, or out. */
static const char *aux_name(int fn) { return fused(fn) ? "residual" : "out"; }
/* The name of the weight: layernorm's is gamma. */
static const char *w_name(int fn) { return fn == FN_LAYERNORM ? "gamma" : "weight"; }

typedef struct tens {
  DLTensor t;
  int64_t shape[2], strides[2];
} tens;

/* One call: input and aux [rows, hidden], w (and layernorm's beta) [hidden]. */
typedef struct ncall {
  int fn;
  tens in, aux, w, b;
  double eps;
  void *stream;
} ncall;

static void tens_make(tens *x, void *data, int devtype, int code, int bits, int ndim, int64_t s0,
                      int64_t s1) {
  memset(x, 0, sizeof *x);
  x->shape[0] = s0;
  x->shape[1] = s1;
  x->t.data = data;
  x->t.device.device_type = (DLDeviceType)devtype;
  x->t.ndim = ndim;
  x->t.dtype.code = (uint8_t)code;
  x->t.dtype.bits = (uint8_t)bits;
  x->t.dtype.lanes = 1;
  x->t.shape = x->shape;
}

static void ncall_make(ncall *c, int fn, int devtype, int code, int bits, int64_t rows,
                       int64_t hidden) {
  memset(c, 0, sizeof *c);
  c->fn = fn;
  tens_make(&c->in, IN_ADDR, devtype, code, bits, 2, rows, hidden);
  tens_make(&c->aux, AUX_ADDR, devtype, code, bits, 2, rows, hidden);
  tens_make(&c->w, W_ADDR, devtype, code, bits, 1, hidden, 0);
  tens_make(&c->b, B_ADDR, devtype, code, bits, 1, hidden, 0);
  c->eps = 1e-6;
}

/* The tensors point into the struct: a copy re-points them. */
static void ncall_copy(ncall *d, const ncall *s) {
  *d = *s;
  tens *dt[4] = {&d->in, &d->aux, &d->w, &d->b};
  const tens *st[4] = {&s->in, &s->aux, &s->w, &s->b};
  for (int i = 0; i < 4; i++) {
    dt[i]->t.shape = dt[i]->shape;
    if (st[i]->t.strides) dt[i]->t.strides = dt[i]->strides;
  }
}

/* Sets row and column strides of a 2-D tensor. */
static void strided(tens *x, int64_t row, int64_t col) {
  x->t.strides = x->strides;
  x->strides[0] = row;
  x->strides[1] = col;
}

/* null: 0 none, 1 input, 2 aux, 3 weight/gamma, 4 beta passed as NULL. */
static fi_status invoke(fi_runtime *rt, ncall *c, int null) {
  DLTensor *in = null == 1 ? NULL : &c->in.t, *aux = null == 2 ? NULL : &c->aux.t;
  DLTensor *w = null == 3 ? NULL : &c->w.t, *b = null == 4 ? NULL : &c->b.t;
  switch (c->fn) {
    case FN_FUSED: return fi_fused_add_rmsnorm(rt, in, aux, w, c->eps, c->stream);
    case FN_GEMMA_FUSED: return fi_gemma_fused_add_rmsnorm(rt, in, aux, w, c->eps, c->stream);
    case FN_GEMMA: return fi_gemma_rmsnorm(rt, in, w, c->eps, aux, c->stream);
    default: return fi_layernorm(rt, in, w, b, c->eps, aux, c->stream);
  }
}

/* The call must fail with INVALID_ARGUMENT, its message naming the function
 * and every one of names. */
#define EXPECT_INVALID(rt, c, null, what, names)                                                \
  do {                                                                                          \
    poison_error();                                                                             \
    fi_status st_ = invoke((rt), (c), (null));                                                  \
    FT_CHECK(st_ == FI_ERR_INVALID_ARGUMENT, "%s: %s: got %s (%s)", fn_names[(c)->fn], what,    \
             fi_status_string(st_), fi_last_error());                                           \
    FT_CHECK(names_all(fi_last_error(), names) && strstr(fi_last_error(), fn_names[(c)->fn]),   \
             "%s: %s: message does not name it: %s", fn_names[(c)->fn], what, fi_last_error()); \
  } while (0)

FT_TEST(norms_null_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  for (int fn = 0; fn < FN_COUNT; fn++) {
    ncall c, d;
    ncall_make(&c, fn, kDLCUDA, kDLBfloat, 16, 4, 4096);
    poison_error();
    fi_status st = invoke(NULL, &c, 0);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "rt"), "%s rt NULL: %s %s",
             fn_names[fn], fi_status_string(st), fi_last_error());
    EXPECT_INVALID(rt, &c, 1, "input NULL", NAMES("input"));
    EXPECT_INVALID(rt, &c, 2, "aux NULL", NAMES(aux_name(fn)));
    EXPECT_INVALID(rt, &c, 3, "weight NULL", NAMES(w_name(fn)));
    if (fn == FN_LAYERNORM) EXPECT_INVALID(rt, &c, 4, "beta NULL", NAMES("beta"));
    ncall_copy(&d, &c);
    d.in.t.data = NULL;
    EXPECT_INVALID(rt, &d, 0, "input data NULL", NAMES("input", "data"));
    ncall_copy(&d, &c);
    d.aux.t.data = NULL;
    EXPECT_INVALID(rt, &d, 0, "aux data NULL", NAMES(aux_name(fn), "data"));
    ncall_copy(&d, &c);
    d.w.t.shape = NULL;
    EXPECT_INVALID(rt, &d, 0, "weight shape NULL", NAMES(w_name(fn), "shape"));
    if (fn == FN_LAYERNORM) {
      ncall_copy(&d, &c);
      d.b.t.data = NULL;
      EXPECT_INVALID(rt, &d, 0, "beta data NULL", NAMES("beta", "data"));
    }
  }
  fi_runtime_destroy(rt);
}

FT_TEST(norms_devices) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  for (int fn = 0; fn < FN_COUNT; fn++) {
    ncall c, d;
    ncall_make(&c, fn, kDLCUDA, kDLFloat, 16, 4, 4096);
    ncall_copy(&d, &c);
    d.aux.t.device.device_type = kDLCPU;
    EXPECT_INVALID(rt, &d, 0, "aux on the CPU", NAMES(aux_name(fn), "kDLCPU"));
    ncall_copy(&d, &c);
    d.w.t.device.device_id = 1;
    EXPECT_INVALID(rt, &d, 0, "weight on device 1", NAMES(w_name(fn), "input"));
    ncall_copy(&d, &c);
    d.aux.t.device.device_type = kDLROCM;
    EXPECT_INVALID(rt, &d, 0, "aux on ROCm", NAMES(aux_name(fn)));
    ncall_copy(&d, &c);
    d.in.t.device.device_id = -1;
    EXPECT_INVALID(rt, &d, 0, "input device_id -1", NAMES("input", "device_id"));
    if (fn == FN_LAYERNORM) {
      ncall_copy(&d, &c);
      d.b.t.device.device_type = kDLCUDAHost;
      EXPECT_INVALID(rt, &d, 0, "beta in host memory", NAMES("beta", "kDLCUDAHost"));
      ncall_copy(&d, &c);
      d.b.t.device.device_id = 2;
      EXPECT_INVALID(rt, &d, 0, "beta on device 2", NAMES("beta"));
    }
  }
  fi_runtime_destroy(rt);
}

FT_TEST(norms_dtypes) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  for (int fn = 0; fn < FN_COUNT; fn++) {
    ncall c, d;
    ncall_make(&c, fn, kDLCUDA, kDLBfloat, 16, 4, 4096);
    ncall_make(&d, fn, kDLCUDA, kDLFloat, 64, 4, 4096);
    EXPECT_INVALID(rt, &d, 0, "float64", NAMES("input", "float64"));
    ncall_make(&d, fn, kDLCUDA, kDLInt, 32, 4, 4096);
    EXPECT_INVALID(rt, &d, 0, "int32", NAMES("input", "int32"));
    ncall_make(&d, fn, kDLCUDA, kDLFloat, 16, 4, 4096);
    d.in.t.dtype.lanes = d.aux.t.dtype.lanes = d.w.t.dtype.lanes = d.b.t.dtype.lanes = 2;
    EXPECT_INVALID(rt, &d, 0, "float16 x2", NAMES("input", "float16x2"));
    /* The residual (fused) and out must be the input's dtype. */
    ncall_copy(&d, &c);
    d.aux.t.dtype.code = kDLFloat;
    EXPECT_INVALID(rt, &d, 0, "aux f16, input bf16", NAMES(aux_name(fn), "float16", "bfloat16"));
    ncall_copy(&d, &c);
    d.aux.t.dtype.bits = 32, d.aux.t.dtype.code = kDLFloat;
    EXPECT_INVALID(rt, &d, 0, "aux f32, input bf16", NAMES(aux_name(fn), "float32"));
    ncall_copy(&d, &c);
    d.w.t.dtype.code = kDLFloat;
    EXPECT_INVALID(rt, &d, 0, "weight f16, input bf16", NAMES(w_name(fn), "float16"));
    if (fn != FN_LAYERNORM) {
      /* rmsnorm weights: the input's dtype only. */
      ncall_copy(&d, &c);
      d.w.t.dtype.code = kDLFloat, d.w.t.dtype.bits = 32;
      EXPECT_INVALID(rt, &d, 0, "weight f32, input bf16", NAMES("weight", "float32"));
    } else {
      ncall_copy(&d, &c);
      d.w.t.dtype.code = kDLFloat, d.w.t.dtype.bits = 64;
      d.b.t.dtype = d.w.t.dtype;
      EXPECT_INVALID(rt, &d, 0, "gamma/beta float64", NAMES("gamma", "float64"));
      /* gamma float32 with beta bfloat16: one dtype for both. */
      ncall_copy(&d, &c);
      d.w.t.dtype.code = kDLFloat, d.w.t.dtype.bits = 32;
      EXPECT_INVALID(rt, &d, 0, "gamma f32, beta bf16", NAMES("beta", "bfloat16", "float32"));
      ncall_copy(&d, &c);
      d.b.t.dtype.code = kDLFloat, d.b.t.dtype.bits = 32;
      EXPECT_INVALID(rt, &d, 0, "gamma bf16, beta f32", NAMES("beta", "float32"));
      ncall_copy(&d, &c);
      d.b.t.dtype.lanes = 4;
      EXPECT_INVALID(rt, &d, 0, "beta bf16 x4", NAMES("beta"));
    }
  }
  fi_runtime_destroy(rt);
}

FT_TEST(norms_shapes_and_strides) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  for (int fn = 0; fn < FN_COUNT; fn++) {
    ncall c, d;
    ncall_make(&c, fn, kDLCUDA, kDLBfloat, 16, 4, 4096);
    const char *aux = aux_name(fn), *w = w_name(fn);
    ncall_copy(&d, &c);
    d.aux.shape[0] = 3;
    EXPECT_INVALID(rt, &d, 0, "aux rows", NAMES(aux, "[3, 4096]"));
    ncall_copy(&d, &c);
    d.aux.shape[1] = 4095;
    EXPECT_INVALID(rt, &d, 0, "aux columns", NAMES(aux, "4095"));
    ncall_copy(&d, &c);
    d.w.shape[0] = 4095;
    EXPECT_INVALID(rt, &d, 0, "weight length", NAMES(w, "4095"));
    if (fn == FN_LAYERNORM) {
      ncall_copy(&d, &c);
      d.b.shape[0] = 4097;
      EXPECT_INVALID(rt, &d, 0, "beta length", NAMES("beta", "4097"));
      ncall_copy(&d, &c);
      d.b.t.strides = d.b.strides;
      d.b.strides[0] = 2;
      EXPECT_INVALID(rt, &d, 0, "beta stride 2", NAMES("beta", "stride"));
    }
    ncall_make(&d, fn, kDLCUDA, kDLBfloat, 16, 4, 0);
    EXPECT_INVALID(rt, &d, 0, "hidden 0", NAMES("input", "hidden"));
    ncall_copy(&d, &c);
    d.aux.t.ndim = 3;
    EXPECT_INVALID(rt, &d, 0, "aux 3-D", NAMES(aux, "dimensions"));
    ncall_copy(&d, &c);
    d.w.t.ndim = 2;
    EXPECT_INVALID(rt, &d, 0, "weight 2-D", NAMES(w, "dimensions"));
    ncall_copy(&d, &c);
    d.in.shape[0] = -1;
    d.aux.shape[0] = -1;
    EXPECT_INVALID(rt, &d, 0, "negative rows", NAMES("input", "negative"));
    ncall_copy(&d, &c);
    d.in.shape[1] = d.aux.shape[1] = d.w.shape[0] = d.b.shape[0] = (int64_t)1 << 32;
    EXPECT_INVALID(rt, &d, 0, "hidden 2^32", NAMES("input", "2^31"));
    /* Column strides other than 1, rows that overlap. */
    ncall_copy(&d, &c);
    strided(&d.in, 8192, 2);
    EXPECT_INVALID(rt, &d, 0, "input column stride 2", NAMES("input", "column stride"));
    ncall_copy(&d, &c);
    strided(&d.aux, 8192, 2);
    EXPECT_INVALID(rt, &d, 0, "aux column stride 2", NAMES(aux, "column stride"));
    ncall_copy(&d, &c);
    d.w.t.strides = d.w.strides;
    d.w.strides[0] = 2;
    EXPECT_INVALID(rt, &d, 0, "weight stride 2", NAMES(w, "stride"));
    ncall_copy(&d, &c);
    strided(&d.in, 2048, 1);
    EXPECT_INVALID(rt, &d, 0, "input row stride < hidden", NAMES("input", "row stride"));
    ncall_copy(&d, &c);
    strided(&d.aux, 0, 1);
    EXPECT_INVALID(rt, &d, 0, "aux row stride 0", NAMES(aux, "row stride"));
    ncall_copy(&d, &c);
    strided(&d.aux, -4096, 1);
    EXPECT_INVALID(rt, &d, 0, "aux negative row stride", NAMES(aux, "stride"));
    /* A stride no memory could hold: refused, and checking it must not
     * overflow (the test-asan build's UBSan would stop the process). */
    ncall_copy(&d, &c);
    strided(&d.aux, (int64_t)0x4000000000000000, 1);
    EXPECT_INVALID(rt, &d, 0, "aux row stride 2^62", NAMES(aux, "2^63"));
  }
  fi_runtime_destroy(rt);
}

FT_TEST(norms_eps) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  const double bad[] = {__builtin_nan(""), -1.0, __builtin_inf(), -__builtin_inf(), -1e-30};
  for (int fn = 0; fn < FN_COUNT; fn++)
    for (int i = 0; i < 5; i++) {
      ncall c;
      ncall_make(&c, fn, kDLCUDA, kDLFloat, 32, 4, 4096);
      c.eps = bad[i];
      char what[64];
      snprintf(what, sizeof what, "eps %g", bad[i]);
      EXPECT_INVALID(rt, &c, 0, what, NAMES("eps"));
    }
  fi_runtime_destroy(rt);
}

/* Tensors written by the kernel may not overlap anything else it reads or
 * writes (in place is the exception where the op allows it). */
FT_TEST(norms_overlaps) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  const int64_t row = 4096 * 2; /* bytes */
  for (int fn = 0; fn < FN_COUNT; fn++) {
    ncall c, d;
    ncall_make(&c, fn, kDLCUDA, kDLBfloat, 16, 4, 4096);
    const char *w = w_name(fn);
    if (fused(fn)) {
      /* The residual is written too: not the input, not a shifted view. */
      ncall_copy(&d, &c);
      d.aux.t.data = d.in.t.data;
      EXPECT_INVALID(rt, &d, 0, "residual is input", NAMES("residual", "input", "overlap"));
      ncall_copy(&d, &c);
      d.aux.t.data = d.in.t.data;
      d.aux.t.byte_offset = row;
      EXPECT_INVALID(rt, &d, 0, "residual = input + 1 row", NAMES("residual", "input", "overlap"));
      /* Interleaved rows of one buffer overlap in extent: refused too. */
      ncall_copy(&d, &c);
      strided(&d.in, 8192, 1);
      strided(&d.aux, 8192, 1);
      d.aux.t.data = d.in.t.data;
      d.aux.t.byte_offset = row;
      EXPECT_INVALID(rt, &d, 0, "residual interleaved with input", NAMES("residual", "input"));
      ncall_copy(&d, &c);
      d.w.t.data = d.aux.t.data;
      d.w.t.byte_offset = 2 * row;
      EXPECT_INVALID(rt, &d, 0, "weight inside residual", NAMES("weight", "residual"));
      ncall_copy(&d, &c);
      d.w.t.data = d.in.t.data;
      d.w.t.byte_offset = row;
      EXPECT_INVALID(rt, &d, 0, "weight inside input", NAMES("weight", "input"));
    } else {
      ncall_copy(&d, &c);
      d.aux.t.data = d.in.t.data;
      d.aux.t.byte_offset = row;
      EXPECT_INVALID(rt, &d, 0, "out = input + 1 row", NAMES("out", "input", "overlap"));
      ncall_copy(&d, &c);
      d.in.t.data = d.aux.t.data;
      d.in.t.byte_offset = row;
      EXPECT_INVALID(rt, &d, 0, "input = out + 1 row", NAMES("out", "input", "overlap"));
      ncall_copy(&d, &c);
      d.aux.t.data = d.in.t.data;
      strided(&d.aux, 8192, 1);
      EXPECT_INVALID(rt, &d, 0, "aliased, other row stride", NAMES("out", "input", "row stride"));
      ncall_copy(&d, &c);
      d.w.t.data = d.aux.t.data;
      d.w.t.byte_offset = 3 * row;
      EXPECT_INVALID(rt, &d, 0, "weight inside out", NAMES("out", w));
      if (fn == FN_LAYERNORM) {
        ncall_copy(&d, &c);
        d.b.t.data = d.aux.t.data;
        EXPECT_INVALID(rt, &d, 0, "beta inside out", NAMES("out", "beta"));
      }
    }
  }
  fi_runtime_destroy(rt);
}

/* ---- valid arguments on a machine with no GPU: they pass every check and
 * reach the device layer, which says there is no CUDA (or HIP). ---- */

static void expect_no_device(fi_runtime *rt, ncall *c, const char *what, const char *driver) {
  poison_error();
  fi_status st = invoke(rt, c, 0);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "%s: %s: %s: %s", fn_names[c->fn], what, fi_status_string(st),
           fi_last_error());
  FT_CHECK(strstr(fi_last_error(), driver) != NULL, "%s: %s: %s", fn_names[c->fn], what,
           fi_last_error());
}

FT_TEST(norms_valid_arguments_reach_the_device_layer) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  const int codes[3] = {kDLFloat, kDLBfloat, kDLFloat}, bits[3] = {16, 16, 32};
  for (int fn = 0; fn < FN_COUNT; fn++) {
    for (int i = 0; i < 3; i++) {
      ncall c;
      ncall_make(&c, fn, kDLCUDA, codes[i], bits[i], 7, 4099); /* odd: 1-element accesses */
      expect_no_device(rt, &c, "dtype", "CUDA");
      if (fn == FN_LAYERNORM) {
        /* gamma and beta in float32 beside any input dtype. */
        c.w.t.dtype.code = c.b.t.dtype.code = kDLFloat;
        c.w.t.dtype.bits = c.b.t.dtype.bits = 32;
        expect_no_device(rt, &c, "float32 gamma and beta", "CUDA");
      }
    }
    ncall c;
    ncall_make(&c, fn, kDLCUDA, kDLBfloat, 16, 4, 4096);
    strided(&c.in, 3 * 4096, 1);
    strided(&c.aux, 4096 + 8, 1);
    c.stream = (void *)0x1234;
    expect_no_device(rt, &c, "strided rows", "CUDA");
    if (!fused(fn)) {
      /* In place: out is input. */
      ncall_make(&c, fn, kDLCUDA, kDLBfloat, 16, 4, 4096);
      c.aux.t.data = c.in.t.data;
      expect_no_device(rt, &c, "in place", "CUDA");
    } else {
      /* The weight may sit anywhere that is not written. */
      ncall_make(&c, fn, kDLCUDA, kDLBfloat, 16, 4, 4096);
      c.w.t.data = c.in.t.data;
      c.w.t.byte_offset = 4 * 4096 * 2;
      expect_no_device(rt, &c, "weight right after input", "CUDA");
    }
    /* One row may have any row stride. */
    ncall_make(&c, fn, kDLCUDA, kDLBfloat, 16, 1, 4096);
    strided(&c.in, 1, 1);
    strided(&c.aux, 0, 1);
    expect_no_device(rt, &c, "one row, stride 0 and 1", "CUDA");
    ncall_make(&c, fn, kDLROCM, kDLFloat, 16, 4, 4096);
    poison_error();
    fi_status st = invoke(rt, &c, 0);
    FT_CHECK(st == FI_ERR_NO_DEVICE && (strstr(fi_last_error(), "hip") || strstr(fi_last_error(), "HIP")),
             "%s on ROCm: %s: %s", fn_names[fn], fi_status_string(st), fi_last_error());
  }
  fi_runtime_destroy(rt);
}

FT_TEST(norms_zero_rows_are_ok_but_still_checked) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  for (int fn = 0; fn < FN_COUNT; fn++) {
    ncall c, d;
    ncall_make(&c, fn, kDLCUDA, kDLBfloat, 16, 0, 4096);
    fi_status st = invoke(rt, &c, 0);
    FT_CHECK(st == FI_OK, "%s, 0 rows: %s: %s", fn_names[fn], fi_status_string(st), fi_last_error());
    ncall_copy(&d, &c);
    d.eps = -1;
    EXPECT_INVALID(rt, &d, 0, "0 rows, eps -1", NAMES("eps"));
    ncall_copy(&d, &c);
    d.w.shape[0] = 4095;
    EXPECT_INVALID(rt, &d, 0, "0 rows, weight length", NAMES(w_name(fn)));
  }
  fi_runtime_destroy(rt);
}
