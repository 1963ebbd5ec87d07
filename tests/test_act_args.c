/* test_act_args.c: fi_silu_and_mul, fi_gelu_and_mul and fi_gelu_tanh_and_mul on a machine with no
 * GPU: bad arguments refused by name before any driver call, and the act_and_mul keys and registry. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_runtime.h"
#include "ft.h"
#include "test_args_util.h"
#include "jit_registry.h"
#include "jit_render.h"
#include "ops_act.h"
#include "rt_internal.h"

/* Fake device addresses, never dereferenced: every call here either fails
 * validation or stops at the device layer (no driver here; device 63 on a
 * GPU machine). 16 MiB apart, more than any tensor here spans. */
#define IN_ADDR ((void *)0x1000000)
#define OUT_ADDR ((void *)0x3000000)
#define NO_SUCH_DEVICE 63

typedef struct tens {
  DLTensor t;
  int64_t shape[3];
  int64_t strides[3];
} tens;

static void tens_make(tens *x, void *data, DLDataTypeCode code, int bits, int64_t s0, int64_t s1) {
  memset(x, 0, sizeof *x);
  x->shape[0] = s0;
  x->shape[1] = s1;
  x->shape[2] = 2;
  x->t.data = data;
  x->t.device.device_type = kDLCUDA;
  x->t.ndim = 2;
  x->t.dtype.code = (uint8_t)code;
  x->t.dtype.bits = (uint8_t)bits;
  x->t.dtype.lanes = 1;
  x->t.shape = x->shape;
}

static void tens_strides(tens *x, int64_t s0, int64_t s1) {
  x->t.strides = x->strides;
  x->strides[0] = s0;
  x->strides[1] = s1;
}

/* A valid call: input [rows, 2d] and out [rows, d] of one dtype, apart. */
typedef struct call {
  tens in, out;
} call;

static void call_make(call *c, DLDataTypeCode code, int bits, int64_t rows, int64_t d) {
  tens_make(&c->in, IN_ADDR, code, bits, rows, 2 * d);
  tens_make(&c->out, OUT_ADDR, code, bits, rows, d);
}

/* The tensors point into the struct: a copy must re-point them. */
static void call_copy(call *dst, const call *src) {
  *dst = *src;
  dst->in.t.shape = dst->in.shape;
  dst->out.t.shape = dst->out.shape;
  if (src->in.t.strides) dst->in.t.strides = dst->in.strides;
  if (src->out.t.strides) dst->out.t.strides = dst->out.strides;
}

typedef fi_status (*act_fn)(fi_runtime *, const DLTensor *, DLTensor *, void *);
static const act_fn fns[3] = {fi_silu_and_mul, fi_gelu_and_mul, fi_gelu_tanh_and_mul};
static const char *const fn_names[3] = {"fi_silu_and_mul", "fi_gelu_and_mul",
                                        "fi_gelu_tanh_and_mul"};

/* So that a check reads the message of the call under test, not an older one. */
/* Every one of the three functions must refuse c with INVALID_ARGUMENT,
 * and its message must name itself and every one of names. */
#define EXPECT_INVALID(rt, c, what, names)                                                       \
  do {                                                                                           \
    for (int f_ = 0; f_ < 3; f_++) {                                                             \
      poison_error();                                                                            \
      fi_status st_ = fns[f_]((rt), &(c)->in.t, &(c)->out.t, NULL);                              \
      FT_CHECK(st_ == FI_ERR_INVALID_ARGUMENT, "%s: %s: got %s (%s)", fn_names[f_], what,        \
               fi_status_string(st_), fi_last_error());                                          \
      FT_CHECK(names_all(fi_last_error(), names) && strstr(fi_last_error(), fn_names[f_]),       \
               "%s: %s: message does not name the argument: %s", fn_names[f_], what,             \
               fi_last_error());                                                                 \
    }                                                                                            \
  } while (0)

/* Valid arguments: every function gets past validation to the device
 * layer, which has no such device (or no driver at all). */
#define EXPECT_VALID(rt, c, what)                                                                \
  do {                                                                                           \
    (c)->in.t.device.device_id = (c)->out.t.device.device_id = NO_SUCH_DEVICE;                   \
    for (int f_ = 0; f_ < 3; f_++) {                                                             \
      fi_status st_ = fns[f_]((rt), &(c)->in.t, &(c)->out.t, NULL);                              \
      FT_CHECK(st_ == FI_ERR_NO_DEVICE, "%s: %s: got %s (%s)", fn_names[f_], what,               \
               fi_status_string(st_), fi_last_error());                                          \
    }                                                                                            \
  } while (0)

FT_TEST(act_null_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLBfloat, 16, 4, 4096);
  for (int f = 0; f < 3; f++) {
    poison_error();
    fi_status st = fns[f](NULL, &c.in.t, &c.out.t, NULL);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "rt is NULL"), "%s rt: %s %s",
             fn_names[f], fi_status_string(st), fi_last_error());
    poison_error();
    st = fns[f](rt, NULL, &c.out.t, NULL);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "input is NULL"),
             "%s input: %s %s", fn_names[f], fi_status_string(st), fi_last_error());
    poison_error();
    st = fns[f](rt, &c.in.t, NULL, NULL);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "out is NULL"),
             "%s out: %s %s", fn_names[f], fi_status_string(st), fi_last_error());
  }
  call_copy(&d, &c);
  d.in.t.data = NULL;
  EXPECT_INVALID(rt, &d, "input data NULL", NAMES("input", "data"));
  call_copy(&d, &c);
  d.out.t.data = NULL;
  EXPECT_INVALID(rt, &d, "out data NULL", NAMES("out", "data"));
  call_copy(&d, &c);
  d.in.t.shape = NULL;
  EXPECT_INVALID(rt, &d, "input shape NULL", NAMES("input", "shape"));
  call_copy(&d, &c);
  d.out.t.shape = NULL;
  EXPECT_INVALID(rt, &d, "out shape NULL", NAMES("out", "shape"));
  fi_runtime_destroy(rt);
}

FT_TEST(act_cpu_tensors_and_devices) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLFloat, 16, 4, 4096);
  call_copy(&d, &c);
  d.in.t.device.device_type = kDLCPU;
  EXPECT_INVALID(rt, &d, "input on CPU", NAMES("input", "kDLCPU"));
  call_copy(&d, &c);
  d.out.t.device.device_type = kDLCPU;
  EXPECT_INVALID(rt, &d, "out on CPU", NAMES("out", "kDLCPU"));
  call_copy(&d, &c);
  d.out.t.device.device_type = kDLCUDAHost;
  EXPECT_INVALID(rt, &d, "out pinned host", NAMES("out", "kDLCUDAHost"));
  call_copy(&d, &c);
  d.in.t.device.device_type = d.out.t.device.device_type = kDLCPU;
  EXPECT_INVALID(rt, &d, "both on CPU", NAMES("input", "kDLCPU"));
  call_copy(&d, &c);
  d.out.t.device.device_id = 1;
  EXPECT_INVALID(rt, &d, "out on another device", NAMES("out", "input"));
  call_copy(&d, &c);
  d.out.t.device.device_type = kDLROCM;
  EXPECT_INVALID(rt, &d, "out on ROCm, input on CUDA", NAMES("out", "input"));
  call_copy(&d, &c);
  d.in.t.device.device_id = -1;
  EXPECT_INVALID(rt, &d, "device_id -1", NAMES("input", "device_id"));
  fi_runtime_destroy(rt);
}

FT_TEST(act_dtypes) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLFloat, 16, 4, 4096);
  call_make(&d, kDLFloat, 64, 4, 4096);
  EXPECT_INVALID(rt, &d, "float64", NAMES("input", "dtype", "float64"));
  call_make(&d, kDLInt, 32, 4, 4096);
  EXPECT_INVALID(rt, &d, "int32", NAMES("input", "dtype", "int32"));
  call_make(&d, kDLFloat, 8, 4, 4096);
  EXPECT_INVALID(rt, &d, "float8", NAMES("input", "dtype"));
  call_copy(&d, &c);
  d.in.t.dtype.lanes = d.out.t.dtype.lanes = 2;
  EXPECT_INVALID(rt, &d, "float16 x2 lanes", NAMES("input", "float16x2"));
  call_copy(&d, &c);
  d.out.t.dtype.code = kDLBfloat;
  EXPECT_INVALID(rt, &d, "out bf16, input f16", NAMES("out", "bfloat16", "float16"));
  call_copy(&d, &c);
  d.out.t.dtype.bits = 32;
  EXPECT_INVALID(rt, &d, "out f32, input f16", NAMES("out", "float32", "float16"));
  fi_runtime_destroy(rt);
}

FT_TEST(act_shapes) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLBfloat, 16, 4, 4096);
  /* The last dimension holds gate and up: it must be even and not 0. */
  const int64_t odd[] = {1, 3, 8191, 4097};
  for (int i = 0; i < 4; i++) {
    call_copy(&d, &c);
    d.in.shape[1] = odd[i];
    d.out.shape[1] = odd[i] / 2;
    char what[64], num[32];
    snprintf(what, sizeof what, "input last dimension %lld", (long long)odd[i]);
    snprintf(num, sizeof num, "%lld", (long long)odd[i]);
    EXPECT_INVALID(rt, &d, what, NAMES("input", "last dimension", num));
  }
  call_copy(&d, &c);
  d.in.shape[1] = d.out.shape[1] = 0;
  EXPECT_INVALID(rt, &d, "input last dimension 0", NAMES("input", "last dimension"));
  /* out must be [tokens, d]. */
  const int64_t bad_out[][2] = {{4, 4097}, {4, 4095}, {4, 8192}, {3, 4096}, {5, 4096}, {0, 4096}};
  for (int i = 0; i < 6; i++) {
    call_copy(&d, &c);
    d.out.shape[0] = bad_out[i][0];
    d.out.shape[1] = bad_out[i][1];
    char what[64];
    snprintf(what, sizeof what, "out [%lld, %lld]", (long long)bad_out[i][0],
             (long long)bad_out[i][1]);
    EXPECT_INVALID(rt, &d, what, NAMES("out", "shape", "[4, 4096]"));
  }
  call_copy(&d, &c);
  d.in.t.ndim = 3;
  EXPECT_INVALID(rt, &d, "input 3-D", NAMES("input", "dimensions"));
  call_copy(&d, &c);
  d.out.t.ndim = 1;
  EXPECT_INVALID(rt, &d, "out 1-D", NAMES("out", "dimensions"));
  call_copy(&d, &c);
  d.in.shape[0] = d.out.shape[0] = -2;
  EXPECT_INVALID(rt, &d, "negative tokens", NAMES("input", "negative"));
  call_copy(&d, &c);
  d.in.shape[0] = d.out.shape[0] = (int64_t)1 << 31;
  EXPECT_INVALID(rt, &d, "2^31 tokens", NAMES("input", "2^31"));
  call_copy(&d, &c);
  d.in.shape[1] = (int64_t)1 << 31;
  d.out.shape[1] = (int64_t)1 << 30;
  EXPECT_INVALID(rt, &d, "2d = 2^31", NAMES("input", "2^31"));
  fi_runtime_destroy(rt);
}

FT_TEST(act_strides) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLBfloat, 16, 4, 4096);
  call_copy(&d, &c);
  tens_strides(&d.in, 2 * 8192, 2);
  EXPECT_INVALID(rt, &d, "input column stride 2", NAMES("input", "column stride"));
  call_copy(&d, &c);
  tens_strides(&d.out, 8192, 2);
  EXPECT_INVALID(rt, &d, "out column stride 2", NAMES("out", "column stride"));
  call_copy(&d, &c);
  tens_strides(&d.in, 8191, 1);
  EXPECT_INVALID(rt, &d, "input row stride < 2d", NAMES("input", "row stride", "8191"));
  call_copy(&d, &c);
  tens_strides(&d.out, 4095, 1);
  EXPECT_INVALID(rt, &d, "out row stride < d", NAMES("out", "row stride", "4095"));
  call_copy(&d, &c);
  tens_strides(&d.out, 0, 1);
  EXPECT_INVALID(rt, &d, "out row stride 0", NAMES("out", "row stride"));
  call_copy(&d, &c);
  tens_strides(&d.in, -8192, 1);
  EXPECT_INVALID(rt, &d, "negative row stride", NAMES("input", "stride"));
  call_copy(&d, &c);
  tens_strides(&d.in, INT64_MAX / 2, 1);
  EXPECT_INVALID(rt, &d, "input spanning 2^63 bytes", NAMES("input", "2^63"));
  /* Valid: padded rows; and with one token the strides do not matter;
   * and d = 1, where out's column stride does not matter either. */
  call_copy(&d, &c);
  tens_strides(&d.in, 8192 + 8, 1);
  tens_strides(&d.out, 4096 + 3, 1);
  EXPECT_VALID(rt, &d, "padded rows");
  call_make(&d, kDLBfloat, 16, 1, 4096);
  tens_strides(&d.in, INT64_MAX, 1);
  tens_strides(&d.out, 7, 1);
  EXPECT_VALID(rt, &d, "one token, odd strides");
  call_make(&d, kDLFloat, 32, 4, 1);
  tens_strides(&d.out, 1, 5);
  EXPECT_VALID(rt, &d, "d = 1, out column stride 5");
  fi_runtime_destroy(rt);
}

FT_TEST(act_overlap) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLBfloat, 16, 4, 4096);
  /* In place is refused too: out is not the shape of input anyway, and a
   * block would overwrite rows another block has still to read. */
  call_copy(&d, &c);
  d.out.t.data = d.in.t.data;
  EXPECT_INVALID(rt, &d, "out = input's start", NAMES("out", "overlaps", "input"));
  call_copy(&d, &c);
  d.out.t.data = d.in.t.data;
  d.out.t.byte_offset = 4096 * 2; /* the up half of row 0 and on */
  tens_strides(&d.out, 8192, 1);
  EXPECT_INVALID(rt, &d, "out = input's up columns", NAMES("out", "overlaps"));
  call_copy(&d, &c);
  d.out.t.data = d.in.t.data;
  d.out.t.byte_offset = 3 * 8192 * 2 + 2; /* inside input's last row */
  EXPECT_INVALID(rt, &d, "out starts in input's last row", NAMES("out", "overlaps"));
  call_copy(&d, &c);
  d.in.t.data = d.out.t.data;
  d.in.t.byte_offset = 4096 * 2 - 2; /* input starts on out's last element of row 0 */
  EXPECT_INVALID(rt, &d, "input starts inside out", NAMES("out", "overlaps"));
  /* Same pitch, out starting one element after input's row: its last
   * element falls on the next input row's first. */
  call_copy(&d, &c);
  tens_strides(&d.in, 12288, 1);
  tens_strides(&d.out, 12288, 1);
  d.out.t.data = d.in.t.data;
  d.out.t.byte_offset = (8192 + 1) * 2; /* out's row r runs into input row r + 1 */
  EXPECT_INVALID(rt, &d, "out row crosses into the next input row", NAMES("out", "overlaps"));

  /* Valid: one buffer of rows [gate | up | out]: the extents interleave
   * but no byte is shared. */
  call_copy(&d, &c);
  tens_strides(&d.in, 12288, 1);
  tens_strides(&d.out, 12288, 1);
  d.out.t.data = d.in.t.data;
  d.out.t.byte_offset = 8192 * 2;
  EXPECT_VALID(rt, &d, "rows of [gate | up | out]");
  /* ... and [out | gate | up]. */
  call_copy(&d, &c);
  tens_strides(&d.in, 12288, 1);
  tens_strides(&d.out, 12288, 1);
  d.in.t.data = d.out.t.data;
  d.in.t.byte_offset = 4096 * 2;
  EXPECT_VALID(rt, &d, "rows of [out | gate | up]");
  /* Right after input's last element. */
  call_copy(&d, &c);
  d.out.t.data = d.in.t.data;
  d.out.t.byte_offset = 4 * 8192 * 2;
  EXPECT_VALID(rt, &d, "out right after input");
  fi_runtime_destroy(rt);
}

/* With no tokens nothing is launched and no driver is needed: FI_OK here,
 * on a machine with none; bad arguments are still refused. */
FT_TEST(act_zero_tokens) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  call_make(&c, kDLFloat, 32, 0, 4096);
  for (int f = 0; f < 3; f++)
    FT_CHECK(fns[f](rt, &c.in.t, &c.out.t, NULL) == FI_OK, "%s: %s", fn_names[f], fi_last_error());
  c.in.shape[1] = 4095;
  EXPECT_INVALID(rt, &c, "0 tokens, odd input", NAMES("input"));
  fi_runtime_destroy(rt);
}

/* ---- the op's keys ---- */

/* Every key the runtime can choose is registered (prewarm compiles it) and
 * valid; the registry stays small enough to compile in CI. */
FT_TEST(act_selection_is_registered) {
  FT_CHECK(jit_registry_find("act_and_mul") == &jit_op_act_and_mul);
  const int n = jit_op_act_and_mul.config_count();
  FT_CHECK(n > 0 && n <= 60, "%d configurations", n);
  const int dts[3] = {JIT_DT_F16, JIT_DT_BF16, JIT_DT_F32};
  int seen_wide = 0;
  for (int act = 0; act < JIT_ACT_COUNT; act++)
    for (int d = 0; d < 3; d++)
      for (int vec = 1; vec * jit_dtype_bytes(dts[d]) <= 16; vec *= 2) {
        jit_key k;
        jit_act_select(act, dts[d], vec, &k);
        FT_CHECK(op_registers(&jit_op_act_and_mul, &k), "act %d dtype %d vec %d not registered", act, dts[d], vec);
        FT_CHECK(jit_act_valid(&k), "act %d dtype %d vec %d: invalid key", act, dts[d], vec);
        FT_CHECK(k.v[ACT_P_ACT] == act && k.v[ACT_P_DTYPE] == dts[d] && k.v[ACT_P_VEC] == vec,
                 "act %d dtype %d vec %d: key says %lld %lld %lld", act, dts[d], vec,
                 (long long)k.v[ACT_P_ACT], (long long)k.v[ACT_P_DTYPE], (long long)k.v[ACT_P_VEC]);
        seen_wide += vec * jit_dtype_bytes(dts[d]) == 16;
      }
  FT_CHECK(seen_wide == 9, "%d 16-byte selections", seen_wide);
  for (int i = 0; i < n; i++) {
    jit_key k;
    jit_op_act_and_mul.config(i, &k);
    FT_CHECK(jit_act_valid(&k), "configuration %d invalid", i);
    for (int j = 0; j < i; j++) {
      jit_key r;
      jit_op_act_and_mul.config(j, &r);
      FT_CHECK(memcmp(r.v, k.v, sizeof r.v) != 0, "configurations %d and %d are the same", j, i);
    }
  }
}

FT_TEST(act_key_canonical_and_render) {
  jit_key k;
  jit_act_select(JIT_ACT_SILU, JIT_DT_BF16, 8, &k);
  char canon[256];
  FT_REQUIRE(jit_key_canonical(&k, canon, sizeof canon) > 0);
  FT_CHECK(strcmp(canon, "op=act_and_mul;act=0;dtype=bf16;vec=8;threads=256;chunks=1") == 0, "%s",
           canon);
  jit_key back;
  FT_REQUIRE(jit_key_parse(canon, &back) == 0, "%s does not parse", canon);
  FT_CHECK(back.op == k.op && memcmp(back.v, k.v, sizeof k.v) == 0, "round trip of %s", canon);
  char *src = NULL, err[256];
  FT_REQUIRE(jit_render(&k, "fi_act_and_mul_0011223344556677", &src, err, sizeof err) == 0, "%s", err);
  FT_CHECK(strstr(src, "#include \"activation.cuh\"") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi_act_and_mul_0011223344556677(fi_act_params p)") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi::act_and_mul<0, fi_bf16, 8, 256, 1>(p);") != NULL, "%s", src);
  free(src);
  /* Out-of-range keys are not valid configurations. */
  jit_key bad = k;
  bad.v[ACT_P_ACT] = JIT_ACT_COUNT;
  FT_CHECK(!jit_act_valid(&bad), "act %d accepted", JIT_ACT_COUNT);
  bad = k;
  bad.v[ACT_P_VEC] = 16; /* 32 bytes of bf16 */
  FT_CHECK(!jit_act_valid(&bad), "vec 16 bf16 accepted");
  bad = k;
  bad.v[ACT_P_DTYPE] = JIT_DT_I32;
  FT_CHECK(!jit_act_valid(&bad), "int32 accepted");
  bad = k;
  bad.v[ACT_P_THREADS] = 96;
  FT_CHECK(!jit_act_valid(&bad), "96 threads accepted");
  bad = k;
  bad.v[ACT_P_CHUNKS] = 0;
  FT_CHECK(!jit_act_valid(&bad), "0 chunks accepted");
}
