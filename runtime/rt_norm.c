/* rt_norm.c: the RMSNorm entry points (fi_rmsnorm, fi_gemma_rmsnorm, fi_fused_add_rmsnorm,
 * fi_gemma_fused_add_rmsnorm): argument checks, the kernel choice from shapes and alignments, the launch. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fi_params.h"
#include "ops_norm.h"
#include "jit_registry.h"
#include "rt_internal.h"
#include "rt_norm.h"
#include "rt_tensor.h"

typedef struct rmsnorm_call {
  jit_key key;
  fi_rmsnorm_params p;
  rt_launch launch;
  const rt_device_i *be;
  int device;
} rmsnorm_call;

/* What the checks of a call out = f(input, weight) found. */
typedef struct unary_args {
  int dt, vec;
  int64_t rows, hidden, in_rs, out_rs;
  const char *ib, *ob, *wb;
} unary_args;

/* The checks of fi_rmsnorm and fi_gemma_rmsnorm, named after fn. */
static fi_status check_unary(const char *fn, fi_runtime *rt, const DLTensor *input,
                             const DLTensor *weight, double eps, const DLTensor *out,
                             unary_args *a) {
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_tensor(fn, "input", input, 2)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "weight", weight, 1)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "out", out, 2)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "input", input, "weight", weight)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "input", input, "out", out)) != FI_OK) return st;
  int dt = rt_tensor_dtype(input);
  char b1[32], b2[32];
  if (dt != JIT_DT_F16 && dt != JIT_DT_BF16 && dt != JIT_DT_F32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: input has dtype %s; float16, bfloat16 or float32 is needed", fn,
                   rt_dtype_string(input->dtype, b1, sizeof b1));
  if (rt_tensor_dtype(weight) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: weight has dtype %s but input has %s", fn,
                   rt_dtype_string(weight->dtype, b1, sizeof b1),
                   rt_dtype_string(input->dtype, b2, sizeof b2));
  if (rt_tensor_dtype(out) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out has dtype %s but input has %s", fn,
                   rt_dtype_string(out->dtype, b1, sizeof b1),
                   rt_dtype_string(input->dtype, b2, sizeof b2));
  const int64_t rows = input->shape[0], hidden = input->shape[1];
  if (hidden == 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: input has hidden size 0 (shape[1])", fn);
  if (hidden > INT32_MAX || rows > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: input shape [%lld, %lld] exceeds 2^31-1", fn,
                   (long long)rows, (long long)hidden);
  if (weight->shape[0] != hidden)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: weight has shape [%lld], input's hidden size is %lld",
                   fn, (long long)weight->shape[0], (long long)hidden);
  if (out->shape[0] != rows || out->shape[1] != hidden)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out has shape [%lld, %lld], input [%lld, %lld]",
                   fn, (long long)out->shape[0], (long long)out->shape[1], (long long)rows,
                   (long long)hidden);
  if (hidden > 1 && (rt_stride(input, 1) != 1 || rt_stride(out, 1) != 1))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has column stride %lld; rows must be contiguous (stride 1)", fn,
                   rt_stride(input, 1) != 1 ? "input" : "out",
                   (long long)(rt_stride(input, 1) != 1 ? rt_stride(input, 1) : rt_stride(out, 1)));
  if (rt_stride(weight, 0) != 1 && hidden > 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: weight has stride %lld; it must be contiguous",
                   fn, (long long)rt_stride(weight, 0));
  const int64_t in_rs = rt_stride(input, 0), out_rs = rt_stride(out, 0);
  if (rows > 1 && (in_rs < hidden || out_rs < hidden))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s row stride %lld is less than hidden %lld (rows overlap)",
                   fn, in_rs < hidden ? "input" : "out", (long long)(in_rs < hidden ? in_rs : out_rs),
                   (long long)hidden);
  if (!(eps >= 0.0) || !isfinite(eps))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: eps is %g; a finite value >= 0 is needed", fn, eps);
  /* out may be input itself, but not a shifted view of it: a block would
   * then overwrite another block's row before reading it. */
  const char *ib = rt_data(input), *ob = rt_data(out), *wb = rt_data(weight);
  const int64_t ie = rt_extent_bytes(input), oe = rt_extent_bytes(out),
                we = rt_extent_bytes(weight);
  if (ie < 0 || oe < 0 || we < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes (shape or stride)",
                   fn, ie < 0 ? "input" : oe < 0 ? "out" : "weight");
  if (ib != ob && ib < ob + oe && ob < ib + ie)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: out partly overlaps input; pass the same tensor for in place", fn);
  if (wb < ob + oe && ob < wb + we)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out overlaps weight", fn);
  if (ib == ob && in_rs != out_rs && rows > 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out aliases input with a different row stride", fn);

  const void *ptrs[3] = {ib, ob, rt_data(weight)};
  const int64_t strides[2] = {in_rs, out_rs};
  a->dt = dt;
  a->vec = rt_pick_vec(jit_dtype_bytes(dt), hidden, ptrs, 3, strides, rows > 1 ? 2 : 0);
  a->rows = rows;
  a->hidden = hidden;
  a->in_rs = in_rs;
  a->out_rs = out_rs;
  a->ib = ib;
  a->ob = ob;
  a->wb = wb;
  return FI_OK;
}

static fi_status prepare(fi_runtime *rt, const DLTensor *input, const DLTensor *weight,
                         double eps, DLTensor *out, rmsnorm_call *c, int *empty) {
  unary_args a;
  fi_status st = check_unary("fi_rmsnorm", rt, input, weight, eps, out, &a);
  if (st != FI_OK) return st;
  const int64_t rows = a.rows, hidden = a.hidden, in_rs = a.in_rs, out_rs = a.out_rs;
  const char *ib = a.ib, *ob = a.ob;
  *empty = rows == 0;
  c->device = input->device.device_id;
  jit_rmsnorm_select(a.dt, a.vec, (int)hidden, &c->key);
  memset(&c->p, 0, sizeof c->p);
  c->p.input = ib;
  c->p.weight = rt_data(weight);
  c->p.out = (void *)ob;
  c->p.input_row_stride = in_rs;
  c->p.out_row_stride = out_rs;
  c->p.rows = (int32_t)rows;
  c->p.hidden = (int32_t)hidden;
  c->p.eps = (float)eps;
  c->launch = (rt_launch){{(unsigned)rows, 1, 1}, {(unsigned)c->key.v[RMSNORM_P_THREADS], 1, 1}, 0};
  return FI_OK;
}

/* The device backend, loaded only once every argument has been checked. */
static fi_status load_backend(fi_runtime *rt, const DLTensor *input, rmsnorm_call *c) {
  void *state;
  return rt_backend(rt, input->device.device_type, &c->be, &state);
}

/* A persistent grid: as many blocks as are resident at once, each walking
 * rows with a stride of the grid, so the weight is loaded once per block. */
static fi_status size_grid(fi_runtime *rt, rt_kernel *k, rmsnorm_call *c) {
  int resident;
  fi_status st = rt_kernel_resident(rt, k, (int)c->launch.block[0], &resident);
  if (st != FI_OK) return st;
  if ((int64_t)c->launch.grid[0] > resident) c->launch.grid[0] = (unsigned)resident;
  return FI_OK;
}

FI_API fi_status fi_rmsnorm(fi_runtime *rt, const DLTensor *input, const DLTensor *weight,
                            double eps, DLTensor *out, void *stream) {
  rmsnorm_call c;
  int empty = 0;
  fi_status st = prepare(rt, input, weight, eps, out, &c, &empty);
  if (st != FI_OK || empty) return st;
  if ((st = load_backend(rt, input, &c)) != FI_OK) return st;
  rt_kernel *k;
  if ((st = rt_kernel_get(rt, &c.key, c.be, c.device, &k)) != FI_OK) return st;
  if ((st = size_grid(rt, k, &c)) != FI_OK) return st;
  return rt_launch_kernel(rt, k, &c.launch, stream, &c.p, sizeof c.p);
}

FI_API fi_status fi_admin_rmsnorm_with_key(fi_runtime *rt, const DLTensor *input,
                                           const DLTensor *weight, double eps, DLTensor *out,
                                           void *stream, const char *key) {
  rmsnorm_call c;
  int empty = 0;
  fi_status st = prepare(rt, input, weight, eps, out, &c, &empty);
  if (st != FI_OK) return st;
  jit_key k;
  if (!key || jit_key_parse(key, &k) != 0 || k.op != c.key.op)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "key: '%s' is not an rmsnorm key", key ? key : "(null)");
  if (k.v[RMSNORM_P_DTYPE] != c.key.v[RMSNORM_P_DTYPE])
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "key: dtype differs from the tensors'");
  if (k.v[RMSNORM_P_VEC] > c.key.v[RMSNORM_P_VEC])
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "key: vec=%lld, but the tensors allow at most %lld",
                   (long long)k.v[RMSNORM_P_VEC], (long long)c.key.v[RMSNORM_P_VEC]);
  if (!jit_rmsnorm_valid(&k, c.p.hidden))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "key: '%s' cannot normalize rows of %d", key, c.p.hidden);
  c.key = k;
  c.launch.block[0] = (unsigned)k.v[RMSNORM_P_THREADS];
  if (empty) return FI_OK;
  if ((st = load_backend(rt, input, &c)) != FI_OK) return st;
  rt_kernel *kr;
  if ((st = rt_kernel_get(rt, &c.key, c.be, c.device, &kr)) != FI_OK) return st;
  if ((st = size_grid(rt, kr, &c)) != FI_OK) return st;
  return rt_launch_kernel(rt, kr, &c.launch, stream, &c.p, sizeof c.p);
}

FI_API fi_status fi_admin_rmsnorm_kernel(fi_runtime *rt, const DLTensor *input,
                                         const DLTensor *weight, double eps, DLTensor *out,
                                         void **function, unsigned grid[3], unsigned block[3],
                                         unsigned *shared_bytes) {
  rmsnorm_call c;
  int empty = 0;
  fi_status st = prepare(rt, input, weight, eps, out, &c, &empty);
  if (st != FI_OK) return st;
  if (empty) return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_admin_rmsnorm_kernel: input has 0 rows");
  if ((st = load_backend(rt, input, &c)) != FI_OK) return st;
  rt_kernel *k;
  if ((st = rt_kernel_get(rt, &c.key, c.be, c.device, &k)) != FI_OK) return st;
  if ((st = size_grid(rt, k, &c)) != FI_OK) return st;
  *function = k->fn;
  memcpy(grid, c.launch.grid, sizeof c.launch.grid);
  memcpy(block, c.launch.block, sizeof c.launch.block);
  *shared_bytes = c.launch.shared_bytes;
  return FI_OK;
}

/* ---- Gemma's RMSNorm and the fused residual adds ---------------------------------- */

FI_API fi_status fi_gemma_rmsnorm(fi_runtime *rt, const DLTensor *input, const DLTensor *weight,
                                  double eps, DLTensor *out, void *stream) {
  unary_args a;
  fi_status st = check_unary("fi_gemma_rmsnorm", rt, input, weight, eps, out, &a);
  if (st != FI_OK || a.rows == 0) return st;
  rt_norm_call c;
  memset(&c, 0, sizeof c);
  c.op = &jit_op_gemma_rmsnorm;
  c.dtype = c.wdtype = a.dt;
  c.vec = a.vec;
  c.device_type = input->device.device_type;
  c.device = input->device.device_id;
  c.p.input = a.ib;
  c.p.weight = a.wb;
  c.p.out = (void *)a.ob;
  c.p.input_row_stride = a.in_rs;
  c.p.out_row_stride = a.out_rs;
  c.p.rows = (int32_t)a.rows;
  c.p.hidden = (int32_t)a.hidden;
  c.p.eps = (float)eps;
  return rt_norm_launch(rt, &c, stream);
}

/* residual += input; input = rmsnorm(residual) * weight (op: with or without
 * Gemma's 1 + weight). Both are written, so they may not overlap at all. */
static fi_status fused_add(const char *fn, const jit_op *op, fi_runtime *rt, DLTensor *input,
                           DLTensor *residual, const DLTensor *weight, double eps, void *stream) {
  fi_status st;
  int dt;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_tensor(fn, "input", input, 2)) != FI_OK ||
      (st = rt_check_tensor(fn, "residual", residual, 2)) != FI_OK ||
      (st = rt_check_tensor(fn, "weight", weight, 1)) != FI_OK ||
      (st = rt_check_same_device(fn, "input", input, "residual", residual)) != FI_OK ||
      (st = rt_check_same_device(fn, "input", input, "weight", weight)) != FI_OK ||
      (st = rt_norm_check_input(fn, input, &dt)) != FI_OK ||
      (st = rt_norm_check_dtype(fn, "residual", residual, dt, input)) != FI_OK ||
      (st = rt_norm_check_dtype(fn, "weight", weight, dt, input)) != FI_OK)
    return st;
  const int64_t rows = input->shape[0], hidden = input->shape[1];
  int64_t ie, re, we;
  if ((st = rt_norm_check_rows(fn, "input", input, rows, hidden)) != FI_OK ||
      (st = rt_norm_check_rows(fn, "residual", residual, rows, hidden)) != FI_OK ||
      (st = rt_norm_check_vector(fn, "weight", weight, hidden)) != FI_OK ||
      (st = rt_norm_check_eps(fn, eps)) != FI_OK ||
      (st = rt_norm_extent(fn, "input", input, &ie)) != FI_OK ||
      (st = rt_norm_extent(fn, "residual", residual, &re)) != FI_OK ||
      (st = rt_norm_extent(fn, "weight", weight, &we)) != FI_OK)
    return st;
  const char *ib = rt_data(input), *rb = rt_data(residual), *wb = rt_data(weight);
  if (rt_norm_overlap(ib, ie, rb, re))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: residual overlaps input; both are written, so they must be apart", fn);
  if (rt_norm_overlap(wb, we, ib, ie) || rt_norm_overlap(wb, we, rb, re))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: weight overlaps %s, which is written", fn,
                   rt_norm_overlap(wb, we, ib, ie) ? "input" : "residual");
  if (rows == 0) return FI_OK;
  const int64_t in_rs = rt_stride(input, 0), res_rs = rt_stride(residual, 0);
  const void *ptrs[3] = {ib, rb, wb};
  const int64_t strides[2] = {in_rs, res_rs};
  rt_norm_call c;
  memset(&c, 0, sizeof c);
  c.op = op;
  c.dtype = c.wdtype = dt;
  c.vec = rt_pick_vec(jit_dtype_bytes(dt), hidden, ptrs, 3, strides, rows > 1 ? 2 : 0);
  c.device_type = input->device.device_type;
  c.device = input->device.device_id;
  c.p.input = ib;
  c.p.residual = (void *)rb;
  c.p.weight = wb;
  c.p.out = (void *)ib;
  c.p.input_row_stride = c.p.out_row_stride = in_rs;
  c.p.residual_row_stride = res_rs;
  c.p.rows = (int32_t)rows;
  c.p.hidden = (int32_t)hidden;
  c.p.eps = (float)eps;
  return rt_norm_launch(rt, &c, stream);
}

FI_API fi_status fi_fused_add_rmsnorm(fi_runtime *rt, DLTensor *input, DLTensor *residual,
                                      const DLTensor *weight, double eps, void *stream) {
  return fused_add("fi_fused_add_rmsnorm", &jit_op_fused_add_rmsnorm, rt, input, residual, weight,
                   eps, stream);
}

FI_API fi_status fi_gemma_fused_add_rmsnorm(fi_runtime *rt, DLTensor *input, DLTensor *residual,
                                            const DLTensor *weight, double eps, void *stream) {
  return fused_add("fi_gemma_fused_add_rmsnorm", &jit_op_gemma_fused_add_rmsnorm, rt, input,
                   residual, weight, eps, stream);
}
