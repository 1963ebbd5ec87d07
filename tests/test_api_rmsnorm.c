/* test_api_rmsnorm.c: fi_rmsnorm's argument checks on a machine with no GPU: each bad
 * argument (NULL, device, ndim, dtype, shape, stride, eps, overlap, a size past int64_t)
 * is FI_ERR_INVALID_ARGUMENT naming it, found before any driver is asked. */
#include "test_api_util.h"

FT_TEST(rmsnorm_null_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);

  poison_error();
  fi_status st = fi_rmsnorm(NULL, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
  CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "rt NULL");
  FT_CHECK_STR_HAS(fi_last_error(), "rt", "rt NULL");

  poison_error();
  st = fi_rmsnorm(rt, NULL, &c.w.t, c.eps, &c.out.t, NULL);
  CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "input NULL: %s", fi_last_error());
  FT_CHECK_STR_HAS(fi_last_error(), "input", "input NULL");
  poison_error();
  st = fi_rmsnorm(rt, &c.in.t, NULL, c.eps, &c.out.t, NULL);
  CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "weight NULL: %s", fi_last_error());
  FT_CHECK_STR_HAS(fi_last_error(), "weight", "weight NULL");
  poison_error();
  st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, NULL, NULL);
  CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "out NULL: %s", fi_last_error());
  FT_CHECK_STR_HAS(fi_last_error(), "out", "out NULL");

  call d;
  call_copy(&d, &c);
  d.in.t.data = NULL;
  EXPECT_INVALID(rt, &d, "input data NULL", NAMES("input", "data"));
  call_copy(&d, &c);
  d.w.t.data = NULL;
  EXPECT_INVALID(rt, &d, "weight data NULL", NAMES("weight", "data"));
  call_copy(&d, &c);
  d.out.t.data = NULL;
  EXPECT_INVALID(rt, &d, "out data NULL", NAMES("out", "data"));
  call_copy(&d, &c);
  d.in.t.shape = NULL;
  EXPECT_INVALID(rt, &d, "input shape NULL", NAMES("input", "shape"));
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_device_type_and_id) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);

  call_copy(&d, &c);
  d.in.t.device.device_type = kDLCPU;
  EXPECT_INVALID(rt, &d, "input on CPU", NAMES("input", "kDLCPU"));
  call_copy(&d, &c);
  d.in.t.device.device_type = kDLCUDAHost;
  EXPECT_INVALID(rt, &d, "input kDLCUDAHost", NAMES("input", "kDLCUDAHost"));
  call_copy(&d, &c);
  d.w.t.device.device_type = kDLCPU;
  EXPECT_INVALID(rt, &d, "weight on CPU", NAMES("weight", "kDLCPU"));
  call_copy(&d, &c);
  d.out.t.device.device_type = kDLCUDAHost;
  EXPECT_INVALID(rt, &d, "out kDLCUDAHost", NAMES("out", "kDLCUDAHost"));
  /* All three on the CPU: the first argument is named. */
  call_make(&d, kDLCPU, kDLBfloat, 16, 4, 4096);
  EXPECT_INVALID(rt, &d, "all on CPU", NAMES("input"));

  call_copy(&d, &c);
  d.w.t.device.device_id = 1;
  EXPECT_INVALID(rt, &d, "weight on device 1", NAMES("weight", "input"));
  call_copy(&d, &c);
  d.out.t.device.device_id = 1;
  EXPECT_INVALID(rt, &d, "out on device 1", NAMES("out", "input"));
  call_copy(&d, &c);
  d.w.t.device.device_type = kDLROCM;
  EXPECT_INVALID(rt, &d, "weight on ROCm, input on CUDA", NAMES("weight"));
  call_copy(&d, &c);
  d.in.t.device.device_id = -1;
  EXPECT_INVALID(rt, &d, "input device_id -1", NAMES("input", "device_id"));
  call_copy(&d, &c);
  d.in.t.device.device_id = d.w.t.device.device_id = d.out.t.device.device_id = 1 << 20;
  EXPECT_INVALID(rt, &d, "device_id 2^20", NAMES("input", "device_id"));
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_ndim_and_dtype) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLFloat, 16, 4, 4096);

  call_copy(&d, &c);
  d.in.t.ndim = 3;
  EXPECT_INVALID(rt, &d, "input 3-D", NAMES("input", "dimensions"));
  call_copy(&d, &c);
  d.in.t.ndim = 1;
  EXPECT_INVALID(rt, &d, "input 1-D", NAMES("input", "dimensions"));
  call_copy(&d, &c);
  d.w.t.ndim = 2;
  EXPECT_INVALID(rt, &d, "weight 2-D", NAMES("weight", "dimensions"));
  call_copy(&d, &c);
  d.out.t.ndim = 3;
  EXPECT_INVALID(rt, &d, "out 3-D", NAMES("out", "dimensions"));

  call_make(&d, kDLCUDA, kDLFloat, 64, 4, 4096);
  EXPECT_INVALID(rt, &d, "float64", NAMES("input", "dtype", "float64"));
  call_make(&d, kDLCUDA, kDLInt, 32, 4, 4096);
  EXPECT_INVALID(rt, &d, "int32", NAMES("input", "dtype", "int32"));
  call_make(&d, kDLCUDA, kDLFloat, 16, 4, 4096);
  d.in.t.dtype.lanes = d.w.t.dtype.lanes = d.out.t.dtype.lanes = 2;
  EXPECT_INVALID(rt, &d, "float16 x2 lanes", NAMES("input", "dtype", "float16x2"));
  call_copy(&d, &c);
  d.w.t.dtype.code = kDLBfloat;
  EXPECT_INVALID(rt, &d, "weight bf16, input f16", NAMES("weight", "bfloat16", "float16"));
  call_copy(&d, &c);
  d.out.t.dtype.bits = 32;
  EXPECT_INVALID(rt, &d, "out f32, input f16", NAMES("out", "float32", "float16"));
  call_copy(&d, &c);
  d.out.t.dtype.lanes = 4;
  EXPECT_INVALID(rt, &d, "out f16 x4", NAMES("out"));
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_shapes_and_strides) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);

  call_copy(&d, &c);
  d.w.shape[0] = 4095;
  EXPECT_INVALID(rt, &d, "weight length", NAMES("weight", "4095"));
  call_copy(&d, &c);
  d.out.shape[0] = 3;
  EXPECT_INVALID(rt, &d, "out rows", NAMES("out"));
  call_copy(&d, &c);
  d.out.shape[1] = 4095;
  EXPECT_INVALID(rt, &d, "out cols", NAMES("out"));
  call_make(&d, kDLCUDA, kDLBfloat, 16, 4, 0);
  EXPECT_INVALID(rt, &d, "hidden 0", NAMES("input", "hidden"));
  call_copy(&d, &c);
  d.in.shape[0] = -1;
  EXPECT_INVALID(rt, &d, "negative rows", NAMES("input", "negative"));
  call_copy(&d, &c);
  d.w.shape[0] = -4096;
  EXPECT_INVALID(rt, &d, "negative weight length", NAMES("weight", "negative"));
  call_copy(&d, &c);
  d.in.shape[1] = (int64_t)1 << 32;
  d.w.shape[0] = d.out.shape[1] = d.in.shape[1];
  EXPECT_INVALID(rt, &d, "hidden 2^32", NAMES("input"));

  /* Column stride 2 (every other element of a wider tensor). */
  call_copy(&d, &c);
  d.in.t.strides = d.in.strides;
  d.in.strides[0] = 8192, d.in.strides[1] = 2;
  EXPECT_INVALID(rt, &d, "input column stride 2", NAMES("input", "stride"));
  call_copy(&d, &c);
  d.out.t.strides = d.out.strides;
  d.out.strides[0] = 8192, d.out.strides[1] = 2;
  EXPECT_INVALID(rt, &d, "out column stride 2", NAMES("out", "stride"));
  call_copy(&d, &c);
  d.w.t.strides = d.w.strides;
  d.w.strides[0] = 2;
  EXPECT_INVALID(rt, &d, "weight stride 2", NAMES("weight", "stride"));
  /* Rows that overlap. */
  call_copy(&d, &c);
  d.in.t.strides = d.in.strides;
  d.in.strides[0] = 2048, d.in.strides[1] = 1;
  EXPECT_INVALID(rt, &d, "input row stride < hidden", NAMES("input", "row stride"));
  call_copy(&d, &c);
  d.out.t.strides = d.out.strides;
  d.out.strides[0] = 0, d.out.strides[1] = 1;
  EXPECT_INVALID(rt, &d, "out row stride 0", NAMES("out", "row stride"));
  call_copy(&d, &c);
  d.in.t.strides = d.in.strides;
  d.in.strides[0] = -4096, d.in.strides[1] = 1;
  EXPECT_INVALID(rt, &d, "negative row stride", NAMES("input", "stride"));
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_eps_and_overlap) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);
  const double bad_eps[] = {__builtin_nan(""), -1.0, __builtin_inf(), -__builtin_inf(), -1e-30};
  for (int i = 0; i < 5; i++) {
    call_copy(&d, &c);
    d.eps = bad_eps[i];
    char what[64];
    snprintf(what, sizeof what, "eps %g", bad_eps[i]);
    EXPECT_INVALID(rt, &d, what, NAMES("eps"));
  }

  /* out is input shifted by one row: a block would overwrite a row another
   * block has not read yet. */
  call_copy(&d, &c);
  d.out.t.data = d.in.t.data;
  d.out.t.byte_offset = 4096 * 2;
  EXPECT_INVALID(rt, &d, "out = input + 1 row", NAMES("out", "input", "overlap"));
  /* ... and the other way round. */
  call_copy(&d, &c);
  d.in.t.data = d.out.t.data;
  d.in.t.byte_offset = 4096 * 2;
  EXPECT_INVALID(rt, &d, "input = out + 1 row", NAMES("out", "input", "overlap"));
  /* Same start, different row stride. */
  call_copy(&d, &c);
  d.out.t.data = d.in.t.data;
  d.out.t.strides = d.out.strides;
  d.out.strides[0] = 8192, d.out.strides[1] = 1;
  EXPECT_INVALID(rt, &d, "aliased, different row stride", NAMES("out", "input"));
  fi_runtime_destroy(rt);
}

/* Strides and shapes that no memory could hold are invalid arguments, and
 * checking them must not overflow: rt_extent_bytes computes
 * (shape - 1) * stride in int64_t, which UBSan (the test-asan build) stops
 * on, and which in a plain build wraps and lets the call through. In a
 * separate process, since UBSan ends the one it finds it in. */
FT_TEST(rmsnorm_huge_stride_rejected_without_overflow) {
  const char *strides[] = {"0x4000000000000000", "0x2000000000000000", "0x7fffffffffffffff"};
  for (int i = 0; i < 3; i++) {
    fi_status st;
    char msg[2048], how[64];
    int status = run_helper("stride", strides[i], &st, msg, sizeof msg);
    FT_CHECK(status == 0, "row stride %s: helper %s (%s)", strides[i],
             how_it_ended(status, how, sizeof how), msg);
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "row stride %s: %s", strides[i], msg);
    FT_CHECK_STR_HAS(msg, "input", "row stride %s", strides[i]);
  }
  /* [2^31-1, 2^31-1] float32: 16 EiB, past int64_t in bytes. */
  fi_status st;
  char msg[2048], how[64];
  int status = run_helper("shape", "0x7fffffff", &st, msg, sizeof msg);
  FT_CHECK(status == 0, "shape 2^31-1: helper %s (%s)", how_it_ended(status, how, sizeof how), msg);
  CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "shape 2^31-1: %s", msg);
  FT_CHECK(!strstr(msg, "overlap"), "shape 2^31-1: %s (separate buffers reported as overlapping)",
           msg);
}

/* out overwriting the weight is the same hazard as out partly overlapping
 * input: a block writes its row while other blocks still read the weight. */
FT_TEST(rmsnorm_out_overlapping_weight) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);
  /* Control: the weight inside input (both only read) is fine. */
  call_copy(&d, &c);
  d.w.t.data = d.in.t.data;
  d.w.t.byte_offset = 4096 * 2;
  fi_status st = fi_rmsnorm(rt, &d.in.t, &d.w.t, d.eps, &d.out.t, NULL);
  CHECK_ST(st, FI_ERR_NO_DEVICE, "weight inside input: %s", fi_last_error());
  /* The weight is row 1 of out. */
  call_copy(&d, &c);
  d.w.t.data = d.out.t.data;
  d.w.t.byte_offset = 4096 * 2;
  EXPECT_INVALID(rt, &d, "weight inside out", NAMES("weight", "out"));
  /* In place, and the weight is row 3 of the tensor being normalized. */
  call_copy(&d, &c);
  d.out.t.data = d.in.t.data;
  d.w.t.data = d.in.t.data;
  d.w.t.byte_offset = 3 * 4096 * 2;
  EXPECT_INVALID(rt, &d, "weight inside in-place out", NAMES("weight", "out"));
  fi_runtime_destroy(rt);
}
