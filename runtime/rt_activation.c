/* rt_activation.c: the gated activation entry points (fi_silu_and_mul, fi_gelu_and_mul,
 * fi_gelu_tanh_and_mul): argument checks, the kernel choice from shapes and alignment, the launch. */
#include <stdint.h>
#include <string.h>

#include "fi_params.h"
#include "ops_act.h"
#include "rt_internal.h"
#include "rt_tensor.h"

typedef struct act_call {
  jit_key key;
  fi_act_params p;
  rt_launch launch;
  const rt_device_i *be;
  int devtype, device;
  int64_t work; /* output vectors */
} act_call;

static const char *const fn_names[JIT_ACT_COUNT] = {"fi_silu_and_mul", "fi_gelu_and_mul",
                                                    "fi_gelu_tanh_and_mul"};

/* The up half starts d elements after the gate half, so d (checked by
 * rt_pick_vec as the row length) decides its alignment too. */
/* Whether any byte of out's rows is a byte of input's rows. Both have
 * `rows` rows of in_row / out_row bytes, in_pitch / out_pitch bytes apart.
 * Exact when the pitches are equal (input and out as two column ranges of
 * one wider tensor is fine), conservative (extents) otherwise. */
static int rows_overlap(uintptr_t ib, int64_t ie, int64_t in_row, int64_t in_pitch, uintptr_t ob,
                        int64_t oe, int64_t out_row, int64_t out_pitch, int64_t rows) {
  if (ie == 0 || oe == 0) return 0;
  if (!(ib < ob + (uint64_t)oe && ob < ib + (uint64_t)ie)) return 0;
  if (rows <= 1 || in_pitch != out_pitch) return 1;
  /* Every row repeats with period P and is at most P long: out's row
   * starts o bytes into some input period, and meets an input row if it
   * starts inside one or runs into the next. */
  const uint64_t P = (uint64_t)in_pitch;
  const uint64_t o = ob >= ib ? (ob - ib) % P : (P - (ib - ob) % P) % P;
  return o < (uint64_t)in_row || o + (uint64_t)out_row > P;
}

static fi_status prepare(fi_runtime *rt, int act, const DLTensor *input, DLTensor *out,
                         act_call *c, int *empty) {
  const char *fn = fn_names[act];
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_tensor(fn, "input", input, 2)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "out", out, 2)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "input", input, "out", out)) != FI_OK) return st;
  const int dt = rt_tensor_dtype(input);
  char b1[32], b2[32];
  if (dt != JIT_DT_F16 && dt != JIT_DT_BF16 && dt != JIT_DT_F32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: input has dtype %s; float16, bfloat16 or float32 is needed", fn,
                   rt_dtype_string(input->dtype, b1, sizeof b1));
  if (rt_tensor_dtype(out) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out has dtype %s but input has %s", fn,
                   rt_dtype_string(out->dtype, b1, sizeof b1),
                   rt_dtype_string(input->dtype, b2, sizeof b2));
  const int64_t rows = input->shape[0], two_d = input->shape[1], d = two_d / 2;
  if (two_d == 0 || two_d % 2 != 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: input's last dimension is %lld; it must be 2 * d with d >= 1 (gate, up)",
                   fn, (long long)two_d);
  if (two_d > INT32_MAX || rows > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: input shape [%lld, %lld] exceeds 2^31-1", fn,
                   (long long)rows, (long long)two_d);
  if (out->shape[0] != rows || out->shape[1] != d)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: out has shape [%lld, %lld]; input [%lld, %lld] needs [%lld, %lld]", fn,
                   (long long)out->shape[0], (long long)out->shape[1], (long long)rows,
                   (long long)two_d, (long long)rows, (long long)d);
  if (rt_stride(input, 1) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: input has column stride %lld; rows must be contiguous (stride 1)", fn,
                   (long long)rt_stride(input, 1));
  if (d > 1 && rt_stride(out, 1) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: out has column stride %lld; rows must be contiguous (stride 1)", fn,
                   (long long)rt_stride(out, 1));
  const int64_t in_rs = rt_stride(input, 0), out_rs = rt_stride(out, 0);
  if (rows > 1 && in_rs < two_d)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: input row stride %lld is less than its row length %lld (rows overlap)", fn,
                   (long long)in_rs, (long long)two_d);
  if (rows > 1 && out_rs < d)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: out row stride %lld is less than d = %lld (rows overlap)", fn,
                   (long long)out_rs, (long long)d);
  const int64_t ie = rt_extent_bytes(input), oe = rt_extent_bytes(out);
  if (ie < 0 || oe < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes (shape or stride)",
                   fn, ie < 0 ? "input" : "out");
  const int es = jit_dtype_bytes(dt);
  const char *ib = rt_data(input), *ob = rt_data(out);
  /* Not even in place: out's row r would be written while another block
   * still has input row r' that shares its bytes to read. */
  if (rows_overlap((uintptr_t)ib, ie, two_d * es, rows > 1 ? in_rs * es : 0, (uintptr_t)ob, oe,
                   d * es, rows > 1 ? out_rs * es : 0, rows))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: out overlaps input; the output needs its own memory", fn);

  *empty = rows == 0;
  c->devtype = input->device.device_type;
  c->device = input->device.device_id;
  const void *ptrs[2] = {ib, ob};
  const int64_t strides[2] = {in_rs, out_rs};
  const int vec = rt_pick_vec(jit_dtype_bytes(dt), d, ptrs, 2, strides, rows > 1 ? 2 : 0);
  jit_act_select(act, dt, vec, &c->key);
  memset(&c->p, 0, sizeof c->p);
  c->p.input = ib;
  c->p.out = (void *)ob;
  c->p.input_row_stride = rows > 1 ? in_rs : 0;
  c->p.out_row_stride = rows > 1 ? out_rs : 0;
  c->p.rows = (int32_t)rows;
  c->p.d = (int32_t)d;
  c->work = rows * (d / vec);
  return FI_OK;
}

/* A persistent grid: a block per tile of THREADS x CHUNKS output vectors,
 * but no more blocks than are resident at once; each then walks tiles with
 * the grid's stride, which the kernel needs far inside 32 bits. */
static fi_status launch(fi_runtime *rt, act_call *c, void *stream) {
  rt_kernel *k;
  fi_status st = rt_kernel_for(rt, c->devtype, c->device, &c->key, &k, &c->be, NULL);
  if (st != FI_OK) return st;
  const int threads = (int)c->key.v[ACT_P_THREADS];
  const int64_t tile = (int64_t)threads * c->key.v[ACT_P_CHUNKS];
  int resident;
  if ((st = rt_kernel_resident(rt, k, threads, &resident)) != FI_OK) return st;
  int64_t grid = (c->work + tile - 1) / tile;
  if (grid > resident) grid = resident;
  if (grid * tile > ((int64_t)1 << 30)) grid = ((int64_t)1 << 30) / tile;
  c->launch = (rt_launch){{(unsigned)grid, 1, 1}, {(unsigned)threads, 1, 1}, 0};
  return rt_launch_kernel(rt, k, &c->launch, stream, &c->p, sizeof c->p);
}

static fi_status act_and_mul(fi_runtime *rt, int act, const DLTensor *input, DLTensor *out,
                             void *stream) {
  act_call c;
  int empty = 0;
  fi_status st = prepare(rt, act, input, out, &c, &empty);
  if (st != FI_OK || empty) return st;
  return launch(rt, &c, stream);
}

FI_API fi_status fi_silu_and_mul(fi_runtime *rt, const DLTensor *input, DLTensor *out,
                                 void *stream) {
  return act_and_mul(rt, JIT_ACT_SILU, input, out, stream);
}

FI_API fi_status fi_gelu_and_mul(fi_runtime *rt, const DLTensor *input, DLTensor *out,
                                 void *stream) {
  return act_and_mul(rt, JIT_ACT_GELU, input, out, stream);
}

FI_API fi_status fi_gelu_tanh_and_mul(fi_runtime *rt, const DLTensor *input, DLTensor *out,
                                      void *stream) {
  return act_and_mul(rt, JIT_ACT_GELU_TANH, input, out, stream);
}
