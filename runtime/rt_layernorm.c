/* rt_layernorm.c: the fi_layernorm entry point: argument checks (gamma and beta of the
 * input's dtype or float32), the access width from the alignments, and the launch. */
#include <stdint.h>
#include <string.h>

#include "jit_registry.h"
#include "rt_internal.h"
#include "rt_norm.h"
#include "rt_tensor.h"

FI_API fi_status fi_layernorm(fi_runtime *rt, const DLTensor *input, const DLTensor *gamma,
                              const DLTensor *beta, double eps, DLTensor *out, void *stream) {
  static const char *fn = "fi_layernorm";
  fi_status st;
  int dt;
  char b1[32], b2[32], b3[32];
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_tensor(fn, "input", input, 2)) != FI_OK ||
      (st = rt_check_tensor(fn, "gamma", gamma, 1)) != FI_OK ||
      (st = rt_check_tensor(fn, "beta", beta, 1)) != FI_OK ||
      (st = rt_check_tensor(fn, "out", out, 2)) != FI_OK ||
      (st = rt_check_same_device(fn, "input", input, "gamma", gamma)) != FI_OK ||
      (st = rt_check_same_device(fn, "input", input, "beta", beta)) != FI_OK ||
      (st = rt_check_same_device(fn, "input", input, "out", out)) != FI_OK ||
      (st = rt_norm_check_input(fn, input, &dt)) != FI_OK ||
      (st = rt_norm_check_dtype(fn, "out", out, dt, input)) != FI_OK)
    return st;
  /* gamma and beta: one dtype, the input's or float32 (part of the key). */
  const int wdt = rt_tensor_dtype(gamma);
  if (wdt != dt && wdt != JIT_DT_F32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: gamma has dtype %s; the input's (%s) or float32 is needed", fn,
                   rt_dtype_string(gamma->dtype, b1, sizeof b1),
                   rt_dtype_string(input->dtype, b2, sizeof b2));
  if (rt_tensor_dtype(beta) != wdt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: beta has dtype %s but gamma has %s (input %s)",
                   fn, rt_dtype_string(beta->dtype, b1, sizeof b1),
                   rt_dtype_string(gamma->dtype, b2, sizeof b2),
                   rt_dtype_string(input->dtype, b3, sizeof b3));
  const int64_t rows = input->shape[0], hidden = input->shape[1];
  int64_t ie, oe, ge, be;
  if ((st = rt_norm_check_rows(fn, "input", input, rows, hidden)) != FI_OK ||
      (st = rt_norm_check_rows(fn, "out", out, rows, hidden)) != FI_OK ||
      (st = rt_norm_check_vector(fn, "gamma", gamma, hidden)) != FI_OK ||
      (st = rt_norm_check_vector(fn, "beta", beta, hidden)) != FI_OK ||
      (st = rt_norm_check_eps(fn, eps)) != FI_OK ||
      (st = rt_norm_extent(fn, "input", input, &ie)) != FI_OK ||
      (st = rt_norm_extent(fn, "out", out, &oe)) != FI_OK ||
      (st = rt_norm_extent(fn, "gamma", gamma, &ge)) != FI_OK ||
      (st = rt_norm_extent(fn, "beta", beta, &be)) != FI_OK)
    return st;
  const char *ib = rt_data(input), *ob = rt_data(out), *gb = rt_data(gamma), *bb = rt_data(beta);
  const int64_t in_rs = rt_stride(input, 0), out_rs = rt_stride(out, 0);
  /* out may be input itself (each thread reads its elements before writing
   * them), but not a shifted view of it, nor gamma or beta. */
  if (ib != ob && rt_norm_overlap(ib, ie, ob, oe))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: out partly overlaps input; pass the same tensor for in place", fn);
  if (ib == ob && in_rs != out_rs && rows > 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out aliases input with a different row stride", fn);
  if (rt_norm_overlap(gb, ge, ob, oe) || rt_norm_overlap(bb, be, ob, oe))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: out overlaps %s", fn,
                   rt_norm_overlap(gb, ge, ob, oe) ? "gamma" : "beta");
  if (rows == 0) return FI_OK;
  const int es = jit_dtype_bytes(dt), wes = jit_dtype_bytes(wdt);
  const void *ptrs[2] = {ib, ob};
  const int64_t strides[2] = {in_rs, out_rs};
  int vec = rt_pick_vec(es, hidden, ptrs, 2, strides, rows > 1 ? 2 : 0);
  /* gamma and beta are read in pieces of at most 16 bytes (a float32 pair
   * beside 16-bit rows spans 32 a vector): each piece must be aligned. */
  const uintptr_t galign = (uintptr_t)(vec * wes < 16 ? vec * wes : 16);
  if ((uintptr_t)gb % galign || (uintptr_t)bb % galign) vec = 1;
  rt_norm_call c;
  memset(&c, 0, sizeof c);
  c.op = &jit_op_layernorm;
  c.dtype = dt;
  c.wdtype = wdt;
  c.vec = vec;
  c.device_type = input->device.device_type;
  c.device = input->device.device_id;
  c.p.input = ib;
  c.p.weight = gb;
  c.p.bias = bb;
  c.p.out = (void *)ob;
  c.p.input_row_stride = in_rs;
  c.p.out_row_stride = out_rs;
  c.p.rows = (int32_t)rows;
  c.p.hidden = (int32_t)hidden;
  c.p.eps = (float)eps;
  return rt_norm_launch(rt, &c, stream);
}
