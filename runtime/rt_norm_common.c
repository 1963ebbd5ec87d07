/* rt_norm_common.c: checks and the launch shared by the norm entry points whose
 * kernels take their block size at launch (rmsnorm variants and layernorm). */
#include <math.h>
#include <stdint.h>

#include "jit_registry.h"
#include "ops_norm.h"
#include "rt_internal.h"
#include "rt_norm.h"
#include "rt_tensor.h"

fi_status rt_norm_check_input(const char *fn, const DLTensor *input, int *dtype) {
  char b[32];
  const int dt = rt_tensor_dtype(input);
  if (dt != JIT_DT_F16 && dt != JIT_DT_BF16 && dt != JIT_DT_F32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: input has dtype %s; float16, bfloat16 or float32 is needed", fn,
                   rt_dtype_string(input->dtype, b, sizeof b));
  const int64_t rows = input->shape[0], hidden = input->shape[1];
  if (hidden == 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: input has hidden size 0 (shape[1])", fn);
  if (hidden > INT32_MAX || rows > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: input shape [%lld, %lld] exceeds 2^31-1", fn,
                   (long long)rows, (long long)hidden);
  *dtype = dt;
  return FI_OK;
}

fi_status rt_norm_check_dtype(const char *fn, const char *name, const DLTensor *t, int dt,
                              const DLTensor *input) {
  char b1[32], b2[32];
  if (rt_tensor_dtype(t) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s but input has %s", fn, name,
                   rt_dtype_string(t->dtype, b1, sizeof b1),
                   rt_dtype_string(input->dtype, b2, sizeof b2));
  return FI_OK;
}

fi_status rt_norm_check_rows(const char *fn, const char *name, const DLTensor *t, int64_t rows,
                             int64_t hidden) {
  if (t->shape[0] != rows || t->shape[1] != hidden)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has shape [%lld, %lld], input [%lld, %lld]",
                   fn, name, (long long)t->shape[0], (long long)t->shape[1], (long long)rows,
                   (long long)hidden);
  if (hidden > 1 && rt_stride(t, 1) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has column stride %lld; rows must be contiguous (stride 1)", fn, name,
                   (long long)rt_stride(t, 1));
  if (rows > 1 && rt_stride(t, 0) < hidden)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s row stride %lld is less than hidden %lld (rows overlap)", fn, name,
                   (long long)rt_stride(t, 0), (long long)hidden);
  return FI_OK;
}

fi_status rt_norm_check_vector(const char *fn, const char *name, const DLTensor *t,
                               int64_t hidden) {
  if (t->shape[0] != hidden)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has shape [%lld], input's hidden size is %lld",
                   fn, name, (long long)t->shape[0], (long long)hidden);
  if (hidden > 1 && rt_stride(t, 0) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has stride %lld; it must be contiguous", fn,
                   name, (long long)rt_stride(t, 0));
  return FI_OK;
}

fi_status rt_norm_check_eps(const char *fn, double eps) {
  if (!(eps >= 0.0) || !isfinite(eps))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: eps is %g; a finite value >= 0 is needed", fn, eps);
  return FI_OK;
}

fi_status rt_norm_extent(const char *fn, const char *name, const DLTensor *t, int64_t *bytes) {
  *bytes = rt_extent_bytes(t);
  if (*bytes < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes (shape or stride)",
                   fn, name);
  return FI_OK;
}

fi_status rt_norm_launch(fi_runtime *rt, rt_norm_call *c, void *stream) {
  const rt_device_i *be;
  void *state;
  fi_status st = rt_backend(rt, c->device_type, &be, &state);
  if (st != FI_OK) return st;
  /* Blocks are whole warps: the kernels' reductions shuffle across full ones. */
  const int warp = be->warp_size;
  jit_key key;
  int threads;
  if (c->op == &jit_op_layernorm)
    jit_layernorm_select(c->dtype, c->wdtype, c->vec, c->p.hidden, warp, &key, &threads);
  else
    jit_norm_select(c->op, c->dtype, c->vec, c->p.hidden, warp, &key, &threads);
  rt_kernel *k;
  if ((st = rt_kernel_get(rt, &key, be, c->device, &k)) != FI_OK) return st;
  /* Kernels that hold a row in registers with 4 or more vectors a thread
   * (and no prefetch) run one block per row when the block has at least two
   * warps: the hardware starts a new block as each one ends, and the rows in
   * flight stay a compact window of memory. On the H200 (fi-bench norms,
   * same run) layernorm 8192 x 8192 bf16 went from 86.5% of copy to 92.5%,
   * 16384 x 4096 from 83.1% to 92.5%; gemma_rmsnorm 89.5% -> 93.1%,
   * fused_add_rmsnorm 93.6% -> 95.5%, at 8192 x 5120 83.7% -> 94.1%. */
  const int chunks = (int)key.v[c->op == &jit_op_layernorm ? LAYERNORM_P_CHUNKS : NORM_P_CHUNKS];
  if (chunks >= 4 && threads >= 2 * warp) {
    return rt_launch_1d(rt, k, c->p.rows, (unsigned)threads, stream, &c->p, sizeof c->p);
  }
  /* Otherwise a persistent grid: as many blocks as are resident at once. The block
   * size varies with the row, but rt_kernel_resident keeps one figure per
   * kernel: it is asked for blocks of 2 warps, which gives the warps an SM
   * holds (registers are allocated by the warp), then shared out in blocks
   * of this call's size. Too many blocks would run as a second wave after
   * the others (20% slower at hidden 5120), too few leave SMs part idle. */
  int resident, sms = 0;
  if ((st = rt_kernel_resident(rt, k, 2 * warp, &resident)) != FI_OK) return st;
  if (be->sm_count(state, c->device, &sms) != 0 || sms <= 0) sms = 1;
  int warps_per_sm = 2 * (resident / sms);
  /* Layernorm holds a row in registers through a barrier and has no
   * prefetch: more resident warps only queue more rows behind the barrier.
   * At most 1024 threads an SM (4 blocks of 256 at 8192 x 8192 bf16). */
  if (c->op == &jit_op_layernorm && warps_per_sm > 1024 / warp) warps_per_sm = 1024 / warp;
  const int per_block = threads / warp;
  int64_t blocks = (int64_t)sms * (warps_per_sm / per_block > 0 ? warps_per_sm / per_block : 1);
  if (blocks > c->p.rows) blocks = c->p.rows;
  if (blocks < 1) blocks = 1;
  return rt_launch_1d(rt, k, blocks, (unsigned)threads, stream, &c->p, sizeof c->p);
}
