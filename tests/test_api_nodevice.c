/* test_api_nodevice.c: calls with valid arguments on a machine with no GPU: they reach
 * the device lookup and fail there (FI_ERR_NO_DEVICE, naming the driver), 0 tokens
 * launch nothing and load no driver, and misaligned data is refused before the lookup. */
#include <dlfcn.h>

#include "test_api_util.h"

FT_TEST(rmsnorm_valid_arguments_no_cuda_device) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);
  for (int rep = 0; rep < 2; rep++) {
    poison_error();
    fi_status st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
    CHECK_ST(st, FI_ERR_NO_DEVICE, "rep %d: %s", rep, fi_last_error());
    FT_CHECK_STR_HAS(fi_last_error(), "CUDA", "rep %d", rep);
    FT_CHECK_STR_HAS(fi_last_error(), "libcuda", "rep %d", rep);
  }
  /* Every dtype, in place, and strided rows reach the device layer too. */
  const int codes[3] = {kDLFloat, kDLBfloat, kDLFloat}, bits[3] = {16, 16, 32};
  for (int i = 0; i < 3; i++) {
    call_make(&d, kDLCUDA, (DLDataTypeCode)codes[i], bits[i], 7, 4099);
    d.out.t.data = d.in.t.data; /* in place */
    fi_status st = fi_rmsnorm(rt, &d.in.t, &d.w.t, 0.0, &d.out.t, (void *)0x1234);
    CHECK_ST(st, FI_ERR_NO_DEVICE, "dtype %d/%d in place: %s", codes[i], bits[i], fi_last_error());
  }
  call_copy(&d, &c);
  d.in.t.strides = d.in.strides;
  d.in.strides[0] = 3 * 4096, d.in.strides[1] = 1;
  fi_status st = fi_rmsnorm(rt, &d.in.t, &d.w.t, d.eps, &d.out.t, NULL);
  CHECK_ST(st, FI_ERR_NO_DEVICE, "strided rows: %s", fi_last_error());
  /* One row may have any row stride. */
  call_make(&d, kDLCUDA, kDLBfloat, 16, 1, 4096);
  d.in.t.strides = d.in.strides;
  d.in.strides[0] = 1, d.in.strides[1] = 1;
  st = fi_rmsnorm(rt, &d.in.t, &d.w.t, d.eps, &d.out.t, NULL);
  CHECK_ST(st, FI_ERR_NO_DEVICE, "1 row: %s", fi_last_error());

  /* The admin entry that shares the checks. */
  void *fn = NULL;
  unsigned grid[3], block[3], smem;
  st = fi_admin_rmsnorm_kernel(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, &fn, grid, block, &smem);
  CHECK_ST(st, FI_ERR_NO_DEVICE, "rmsnorm_kernel: %s", fi_last_error());
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_valid_arguments_no_rocm_device) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  call_make(&c, kDLROCM, kDLFloat, 16, 4, 4096);
  for (int rep = 0; rep < 2; rep++) {
    poison_error();
    fi_status st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
    CHECK_ST(st, FI_ERR_NO_DEVICE, "rep %d: %s", rep, fi_last_error());
    FT_CHECK(strstr(fi_last_error(), "hip") != NULL || strstr(fi_last_error(), "HIP") != NULL,
             "rep %d: %s", rep, fi_last_error());
  }
  /* Where libamdhip64 is installed (Debian's 5.2 here) it loads, and hipInit
   * is what fails: there is no AMD GPU. */
  void *hip = dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_NOLOAD);
  if (!hip) hip = dlopen("libamdhip64.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (hip) {
    FT_CHECK_STR_HAS(fi_last_error(), "hipInit", "libamdhip64 loaded");
    dlclose(hip);
  } else {
    fprintf(stderr, "  libamdhip64 not installed: %s\n", fi_last_error());
  }
  /* A failed HIP does not spoil CUDA, nor the other way round. */
  call d;
  call_make(&d, kDLCUDA, kDLFloat, 16, 4, 4096);
  fi_status st = fi_rmsnorm(rt, &d.in.t, &d.w.t, d.eps, &d.out.t, NULL);
  CHECK_ST(st, FI_ERR_NO_DEVICE, "%s", fi_last_error());
  FT_CHECK_STR_HAS(fi_last_error(), "CUDA");
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_zero_tokens_is_ok) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  const int types[2] = {kDLCUDA, kDLROCM};
  for (int i = 0; i < 2; i++) {
    call c;
    call_make(&c, types[i], kDLBfloat, 16, 0, 4096);
    fi_status st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
    CHECK_ST(st, FI_OK, "device type %d: %s", types[i], fi_last_error());
    /* 0 tokens still validates the rest. */
    c.w.shape[0] = 17;
    st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "0 tokens, bad weight");
    c.w.shape[0] = 4096;
    st = fi_rmsnorm(rt, &c.in.t, &c.w.t, -1.0, &c.out.t, NULL);
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "0 tokens, eps -1");
  }
  /* Nothing was launched, so no device layer was even loaded. */
  for (int i = 0; i < rt_device_count(); i++)
    FT_CHECK_EQ_INT(rt->dev[i].loaded, 0, "backend %s touched", rt_device_at(i)->name);
  fi_runtime_destroy(rt);
}

/* A device tensor at a fake address (never dereferenced: the calls below must be refused
 * before anything reads it). */
static DLTensor dev_tensor(uintptr_t addr, uint64_t byte_offset, int code, int bits, int ndim, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)addr;
  t.byte_offset = byte_offset;
  t.device.device_type = kDLCUDA;
  t.ndim = ndim;
  t.dtype.code = (uint8_t)code;
  t.dtype.bits = (uint8_t)bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

/* st is FI_ERR_INVALID_ARGUMENT, and the message names the tensor and the alignment. */
#define CHECK_MISALIGNED(st, name, ...)                                  \
  do {                                                                   \
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, __VA_ARGS__);                  \
    FT_CHECK_STR_HAS(fi_last_error(), name, __VA_ARGS__);                \
    FT_CHECK_STR_HAS(fi_last_error(), "multiple of", __VA_ARGS__);       \
  } while (0)

/* Misaligned data pointers (an odd address or byte_offset 1 for a 16-bit type, 2 for
 * float32) are refused as FI_ERR_INVALID_ARGUMENT naming the tensor, whether or not a
 * driver is there: the checks come before the device lookup, and no kernel is launched
 * on an address its loads cannot use. Each op is tried with the misaligned tensor in
 * every position, and the same call aligned reaches the device lookup. */
FT_TEST(misaligned_data_refused_before_the_device) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL, "%s", fi_last_error());
  static const struct {
    int code, bits;
    uint64_t off;   /* byte_offset that breaks an element */
    uintptr_t odd;  /* an address that does */
  } dts[] = {{kDLBfloat, 16, 1, 0x1000001}, {kDLFloat, 16, 1, 0x1000003}, {kDLFloat, 32, 2, 0x1000002}};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    const int code = dts[d].code, bits = dts[d].bits;
    for (int bad = 0; bad < 2; bad++) {     /* 0: byte_offset, 1: the address */
      for (int which = -1; which < 3; which++) { /* -1: none misaligned (the control) */
        const uintptr_t base[3] = {0x1000000, 0x2000000, 0x3000000};
        uintptr_t a[3];
        uint64_t off[3];
        for (int i = 0; i < 3; i++) {
          a[i] = which == i && bad ? dts[d].odd - 0x1000000 + base[i] : base[i];
          off[i] = which == i && !bad ? dts[d].off : 0;
        }
        /* fi_rmsnorm: input, weight, out */
        int64_t s2[2] = {4, 64}, s1[1] = {64};
        DLTensor in = dev_tensor(a[0], off[0], code, bits, 2, s2), w = dev_tensor(a[1], off[1], code, bits, 1, s1),
                 out = dev_tensor(a[2], off[2], code, bits, 2, s2);
        static const char *const norm_names[3] = {"input", "weight", "out"};
        fi_status st = fi_rmsnorm(rt, &in, &w, 1e-6, &out, NULL);
        if (which < 0)
          CHECK_ST(st, FI_ERR_NO_DEVICE, "rmsnorm aligned %s%d: %s", bits == 32 ? "f" : "x", bits, fi_last_error());
        else
          CHECK_MISALIGNED(st, norm_names[which], "rmsnorm %s misaligned (dtype %d/%d, %s)", norm_names[which],
                           code, bits, bad ? "address" : "byte_offset");
        /* fi_silu_and_mul: input [4, 128], out [4, 64] (no weight: which 1 tries nothing) */
        if (which < 1) {
          int64_t si[2] = {4, 128}, so[2] = {4, 64};
          DLTensor ain = dev_tensor(a[0], off[0], code, bits, 2, si), aout = dev_tensor(a[2], off[2], code, bits, 2, so);
          st = fi_silu_and_mul(rt, &ain, &aout, NULL);
          if (which < 0)
            CHECK_ST(st, FI_ERR_NO_DEVICE, "silu_and_mul aligned: %s", fi_last_error());
          else if (which == 0)
            CHECK_MISALIGNED(st, "input", "silu_and_mul input misaligned");
        }
        if (which == 2 || which < 0) {
          int64_t si[2] = {4, 128}, so[2] = {4, 64};
          DLTensor ain = dev_tensor(base[0], 0, code, bits, 2, si), aout = dev_tensor(a[2], off[2], code, bits, 2, so);
          st = fi_silu_and_mul(rt, &ain, &aout, NULL);
          if (which == 2)
            CHECK_MISALIGNED(st, "out", "silu_and_mul out misaligned");
        }
        /* fi_softmax (float32 only): logits, out */
        if (bits == 32 && which != 1) {
          int64_t sl[2] = {4, 1000};
          DLTensor lg = dev_tensor(a[0], off[0], code, bits, 2, sl), so = dev_tensor(a[2], off[2], code, bits, 2, sl);
          st = fi_softmax(rt, &lg, NULL, 1.0, &so, NULL);
          if (which < 0)
            CHECK_ST(st, FI_ERR_NO_DEVICE, "softmax aligned: %s", fi_last_error());
          else
            CHECK_MISALIGNED(st, which == 0 ? "logits" : "out", "softmax %d misaligned", which);
        }
        /* fi_apply_rope_pos_ids (16-bit): q, k, and q_out */
        if (bits == 16) {
          int64_t sq[3] = {4, 8, 128}, sk[3] = {4, 2, 128}, sp[1] = {4};
          DLTensor q = dev_tensor(a[0], off[0], code, bits, 3, sq), k = dev_tensor(a[1], off[1], code, bits, 3, sk);
          DLTensor qo = dev_tensor(a[2], off[2], code, bits, 3, sq), ko = dev_tensor(0x4000000, 0, code, bits, 3, sk);
          DLTensor pos = dev_tensor(0x5000000, 0, kDLInt, 32, 1, sp);
          static const char *const rope_names[3] = {"q", "k", "q_out"};
          st = fi_apply_rope_pos_ids(rt, &q, &k, &qo, &ko, &pos, 128, 0, 1.0, 1e4, NULL);
          if (which < 0)
            CHECK_ST(st, FI_ERR_NO_DEVICE, "rope aligned: %s", fi_last_error());
          else
            CHECK_MISALIGNED(st, rope_names[which], "rope %s misaligned", rope_names[which]);
        }
      }
    }
  }
  fi_runtime_destroy(rt);
}

/* fi_copy_to_host: bad arguments are refused by name before any device is looked up; a
 * valid one reaches the device lookup (no GPU here). */
FT_TEST(copy_to_host_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  tens s;
  int32_t host[16];
  tens_make(&s, IN_ADDR, kDLCUDA, kDLInt, 32, 1, 16, 0);
  CHECK_ST(fi_copy_to_host(NULL, &s.t, host, 64, NULL), FI_ERR_INVALID_ARGUMENT, "NULL rt");
  FT_CHECK_STR_HAS(fi_last_error(), "rt", "NULL rt");
  CHECK_ST(fi_copy_to_host(rt, NULL, host, 64, NULL), FI_ERR_INVALID_ARGUMENT, "NULL src");
  FT_CHECK_STR_HAS(fi_last_error(), "src", "NULL src");
  CHECK_ST(fi_copy_to_host(rt, &s.t, NULL, 64, NULL), FI_ERR_INVALID_ARGUMENT, "NULL dst");
  FT_CHECK_STR_HAS(fi_last_error(), "dst", "NULL dst");
  CHECK_ST(fi_copy_to_host(rt, &s.t, host, 65, NULL), FI_ERR_INVALID_ARGUMENT, "65 of 64 bytes");
  FT_CHECK_STR_HAS(fi_last_error(), "64 bytes", "65 of 64 bytes");
  tens c;
  tens_make(&c, host, kDLCPU, kDLInt, 32, 1, 16, 0);
  CHECK_ST(fi_copy_to_host(rt, &c.t, host, 64, NULL), FI_ERR_INVALID_ARGUMENT, "a CPU src");
  FT_CHECK_STR_HAS(fi_last_error(), "kDLCPU", "a CPU src");
  tens g;
  tens_make(&g, IN_ADDR, kDLCUDA, kDLInt, 32, 2, 4, 4);
  g.t.strides = g.strides;
  g.strides[0] = 8, g.strides[1] = 1;
  CHECK_ST(fi_copy_to_host(rt, &g.t, host, 16, NULL), FI_ERR_INVALID_ARGUMENT, "strided src");
  FT_CHECK_STR_HAS(fi_last_error(), "contiguous", "strided src");
  CHECK_ST(fi_copy_to_host(rt, &s.t, host, 0, NULL), FI_OK, "0 bytes: nothing to do");
  CHECK_ST(fi_copy_to_host(rt, &s.t, host, 64, NULL), FI_ERR_NO_DEVICE, "valid: %s", fi_last_error());
  fi_runtime_destroy(rt);
}
