/* rt_cascade.c: the cascade merge entry points (fi_merge_state, fi_merge_state_in_place,
 * fi_merge_states): argument checks, the kernel choice from shapes and alignments, the launch. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fi_params.h"
#include "ops_cascade.h"
#include "rt_internal.h"
#include "rt_tensor.h"

/* DLPack's bool type code (kDLBool), named only from DLPack 0.8 on. */
#define DL_BOOL_CODE 6

typedef struct cascade_call {
  jit_key key;
  fi_merge_state_params one;
  fi_merge_states_params many;
  rt_launch launch;
  int device;
  int64_t rows; /* seq x heads */
} cascade_call;

/* ---- checks shared by the three entry points ---- */

/* A float16/bfloat16/float32 v tensor of ndim dims; its jit dtype in *dt. */
static fi_status check_v(const char *fn, const char *name, const DLTensor *t, int ndim, int *dt) {
  fi_status st = rt_check_tensor(fn, name, t, ndim);
  if (st != FI_OK) return st;
  char b[32];
  *dt = rt_tensor_dtype(t);
  if (*dt != JIT_DT_F16 && *dt != JIT_DT_BF16 && *dt != JIT_DT_F32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has dtype %s; float16, bfloat16 or float32 is needed", fn, name,
                   rt_dtype_string(t->dtype, b, sizeof b));
  return FI_OK;
}

/* A float32 LSE tensor of ndim dims. */
static fi_status check_s(const char *fn, const char *name, const DLTensor *t, int ndim) {
  fi_status st = rt_check_tensor(fn, name, t, ndim);
  if (st != FI_OK) return st;
  char b[32];
  if (rt_tensor_dtype(t) != JIT_DT_F32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has dtype %s; LSEs are float32 (natural log)", fn, name,
                   rt_dtype_string(t->dtype, b, sizeof b));
  return FI_OK;
}

/* t's shape equals want (n dims); the message shows both. */
static fi_status check_shape(const char *fn, const char *name, const DLTensor *t,
                             const int64_t *want, int n, const char *like) {
  int same = 1;
  for (int i = 0; i < n; i++) same &= t->shape[i] == want[i];
  if (same) return FI_OK;
  char got[128] = "", exp[128] = "";
  size_t g = 0, e = 0;
  for (int i = 0; i < n; i++) {
    g += (size_t)snprintf(got + g, sizeof got - g, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    e += (size_t)snprintf(exp + e, sizeof exp - e, "%s%lld", i ? ", " : "", (long long)want[i]);
  }
  return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has shape [%s]; [%s] is needed (from %s)", fn,
                 name, got, exp, like);
}

/* v's last dimension (head_dim) is contiguous. */
static fi_status check_contiguous_d(const char *fn, const char *name, const DLTensor *t) {
  const int last = t->ndim - 1;
  if (t->shape[last] > 1 && rt_stride(t, last) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has head_dim stride %lld; head_dim must be contiguous (stride 1)", fn,
                   name, (long long)rt_stride(t, last));
  return FI_OK;
}

static fi_status check_extent(const char *fn, const char *name, const DLTensor *t) {
  if (t && rt_extent_bytes(t) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes (shape or stride)",
                   fn, name);
  return FI_OK;
}

/* The [seq, heads] grid of an output (rows of len elements; len 1 for an
 * LSE) must not map two rows onto the same memory, or blocks would race.
 * Sufficient test: the inner dimension's rows do not overlap, and the outer
 * stride clears the whole inner span. Inputs may overlap (even stride 0). */
static fi_status check_out_rows(const char *fn, const char *name, const DLTensor *t, int d0, int d1,
                                int64_t len) {
  int64_t e[2] = {t->shape[d0], t->shape[d1]}, s[2] = {rt_stride(t, d0), rt_stride(t, d1)};
  if (e[0] == 0 || e[1] == 0) return FI_OK; /* no rows (a compact [4, 0] has seq stride 0) */
  int n = 0;
  int64_t ee[2], ss[2];
  for (int i = 0; i < 2; i++)
    if (e[i] > 1) ee[n] = e[i], ss[n++] = s[i];
  if (n == 2 && ss[0] > ss[1]) {
    int64_t te = ee[0], ts = ss[0];
    ee[0] = ee[1], ss[0] = ss[1], ee[1] = te, ss[1] = ts;
  }
  int ok = 1;
  if (n >= 1) ok = ss[0] >= len;
  if (ok && n == 2) {
    int64_t span;
    ok = !__builtin_mul_overflow(ee[0] - 1, ss[0], &span) &&
         !__builtin_add_overflow(span, len, &span) && ss[1] >= span;
  }
  if (!ok)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has strides (%lld, %lld) for its [seq, heads] dimensions: rows of %lld "
                   "elements overlap",
                   fn, name, (long long)s[0], (long long)s[1], (long long)len);
  return FI_OK;
}

/* Same memory seen the same way (same start, dtype and strides for every
 * dimension of more than one element; shapes are already equal). */
static int same_view(const DLTensor *a, const DLTensor *b) {
  if (rt_data(a) != rt_data(b) || a->ndim != b->ndim || a->dtype.bits != b->dtype.bits ||
      a->dtype.code != b->dtype.code)
    return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] > 1 && rt_stride(a, i) != rt_stride(b, i)) return 0;
  return 1;
}

/* An output may be an input itself (each element is read, then written, by
 * one thread) but not a shifted or restrided view of it. */
static fi_status check_alias(const char *fn, const char *out_name, const DLTensor *out,
                             const char *in_name, const DLTensor *in, int may_alias) {
  if (!out || !in || out == in || !rt_tensors_overlap(out, in)) return FI_OK;
  if (may_alias && same_view(out, in)) return FI_OK;
  if (may_alias)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s partly overlaps %s; pass the same tensor to merge in place", fn,
                   out_name, in_name);
  return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s", fn, out_name, in_name);
}

/* Widest access (elements) that head_dim, every v start and every stride
 * of a dimension of more than one element allow. */
static int pick_vec(int dt, int64_t head_dim, const DLTensor *const *vs, int n) {
  const int es = jit_dtype_bytes(dt);
  int vec = 16 / es;
  for (; vec > 1; vec /= 2) {
    int ok = head_dim % vec == 0;
    for (int i = 0; ok && i < n; i++) {
      if (!vs[i]) continue;
      ok = (uintptr_t)rt_data(vs[i]) % (uintptr_t)(vec * es) == 0;
      for (int d = 0; ok && d < vs[i]->ndim - 1; d++)
        ok = vs[i]->shape[d] <= 1 || rt_stride(vs[i], d) % vec == 0;
    }
    if (ok) break;
  }
  return vec;
}

/* ---- two states: fi_merge_state and fi_merge_state_in_place ---- */

/* Argument names as the caller's function calls them. */
typedef struct names2 {
  const char *fn, *v_a, *s_a, *v_b, *s_b, *v_out, *s_out;
} names2;

static fi_status prepare2(fi_runtime *rt, const names2 *nm, const DLTensor *v_a,
                          const DLTensor *s_a, const DLTensor *v_b, const DLTensor *s_b,
                          const DLTensor *v_out, const DLTensor *s_out, const DLTensor *mask,
                          cascade_call *c) {
  const char *fn = nm->fn;
  fi_status st;
  int dt, dtb, dto;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = check_v(fn, nm->v_a, v_a, 3, &dt)) != FI_OK) return st;
  if ((st = check_s(fn, nm->s_a, s_a, 2)) != FI_OK) return st;
  if ((st = check_v(fn, nm->v_b, v_b, 3, &dtb)) != FI_OK) return st;
  if ((st = check_s(fn, nm->s_b, s_b, 2)) != FI_OK) return st;
  if ((st = check_v(fn, nm->v_out, v_out, 3, &dto)) != FI_OK) return st;
  if (s_out && (st = check_s(fn, nm->s_out, s_out, 2)) != FI_OK) return st;
  if (mask && (st = rt_check_tensor(fn, "mask", mask, 1)) != FI_OK) return st;
  const DLTensor *all[7] = {v_a, s_a, v_b, s_b, v_out, s_out, mask};
  const char *names[7] = {nm->v_a, nm->s_a, nm->v_b, nm->s_b, nm->v_out, nm->s_out, "mask"};
  for (int i = 1; i < 7; i++)
    if (all[i] && (st = rt_check_same_device(fn, names[0], all[0], names[i], all[i])) != FI_OK)
      return st;
  char b1[32], b2[32];
  if (dtb != dt || dto != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s but %s has %s", fn,
                   dtb != dt ? nm->v_b : nm->v_out,
                   rt_dtype_string((dtb != dt ? v_b : v_out)->dtype, b1, sizeof b1), nm->v_a,
                   rt_dtype_string(v_a->dtype, b2, sizeof b2));
  if (mask && !((mask->dtype.code == kDLUInt || mask->dtype.code == DL_BOOL_CODE) &&
                mask->dtype.bits == 8 && mask->dtype.lanes == 1))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: mask has dtype %s; uint8 or bool is needed", fn,
                   rt_dtype_string(mask->dtype, b1, sizeof b1));

  const int64_t seq = v_a->shape[0], heads = v_a->shape[1], hd = v_a->shape[2];
  const int64_t vshape[3] = {seq, heads, hd}, sshape[2] = {seq, heads};
  if ((st = check_shape(fn, nm->s_a, s_a, sshape, 2, nm->v_a)) != FI_OK) return st;
  if ((st = check_shape(fn, nm->v_b, v_b, vshape, 3, nm->v_a)) != FI_OK) return st;
  if ((st = check_shape(fn, nm->s_b, s_b, sshape, 2, nm->v_a)) != FI_OK) return st;
  if ((st = check_shape(fn, nm->v_out, v_out, vshape, 3, nm->v_a)) != FI_OK) return st;
  if (s_out && (st = check_shape(fn, nm->s_out, s_out, sshape, 2, nm->v_a)) != FI_OK) return st;
  if (mask && (st = check_shape(fn, "mask", mask, sshape, 1, nm->v_a)) != FI_OK) return st;
  if (hd == 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has head_dim 0 (shape[2])", fn, nm->v_a);
  int64_t rows;
  if (hd > INT32_MAX || seq > INT32_MAX || heads > INT32_MAX ||
      __builtin_mul_overflow(seq, heads, &rows) || rows > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has shape [%lld, %lld, %lld]; seq x heads and head_dim must be < 2^31",
                   fn, nm->v_a, (long long)seq, (long long)heads, (long long)hd);
  for (int i = 0; i < 7; i++)
    if ((st = check_extent(fn, names[i], all[i])) != FI_OK) return st;
  if ((st = check_contiguous_d(fn, nm->v_a, v_a)) != FI_OK ||
      (st = check_contiguous_d(fn, nm->v_b, v_b)) != FI_OK ||
      (st = check_contiguous_d(fn, nm->v_out, v_out)) != FI_OK)
    return st;
  if ((st = check_out_rows(fn, nm->v_out, v_out, 0, 1, hd)) != FI_OK) return st;
  if (s_out && (st = check_out_rows(fn, nm->s_out, s_out, 0, 1, 1)) != FI_OK) return st;
  /* Outputs against everything else: exact aliasing of an input of the
   * same kind is in place; any other overlap is refused. */
  if ((st = check_alias(fn, nm->v_out, v_out, nm->v_a, v_a, 1)) != FI_OK ||
      (st = check_alias(fn, nm->v_out, v_out, nm->v_b, v_b, 1)) != FI_OK ||
      (st = check_alias(fn, nm->v_out, v_out, nm->s_a, s_a, 0)) != FI_OK ||
      (st = check_alias(fn, nm->v_out, v_out, nm->s_b, s_b, 0)) != FI_OK ||
      (st = check_alias(fn, nm->v_out, v_out, nm->s_out, s_out, 0)) != FI_OK ||
      (st = check_alias(fn, nm->v_out, v_out, "mask", mask, 0)) != FI_OK ||
      (st = check_alias(fn, nm->s_out, s_out, nm->s_a, s_a, 1)) != FI_OK ||
      (st = check_alias(fn, nm->s_out, s_out, nm->s_b, s_b, 1)) != FI_OK ||
      (st = check_alias(fn, nm->s_out, s_out, nm->v_a, v_a, 0)) != FI_OK ||
      (st = check_alias(fn, nm->s_out, s_out, nm->v_b, v_b, 0)) != FI_OK ||
      (st = check_alias(fn, nm->s_out, s_out, "mask", mask, 0)) != FI_OK)
    return st;

  c->rows = rows;
  c->device = v_a->device.device_id;
  const DLTensor *vs[3] = {v_a, v_b, v_out};
  const int vec = pick_vec(dt, hd, vs, 3);
  jit_merge_state_select(dt, vec, (int)hd, &c->key);
  fi_merge_state_params *p = &c->one;
  memset(p, 0, sizeof *p);
  p->v_a = rt_data(v_a);
  p->v_b = rt_data(v_b);
  p->v_out = rt_data(v_out);
  p->s_a = (const float *)rt_data(s_a);
  p->s_b = (const float *)rt_data(s_b);
  p->s_out = s_out ? (float *)rt_data(s_out) : NULL;
  p->mask = mask ? (const uint8_t *)rt_data(mask) : NULL;
  for (int i = 0; i < 2; i++) {
    p->va_stride[i] = rt_stride(v_a, i);
    p->vb_stride[i] = rt_stride(v_b, i);
    p->vo_stride[i] = rt_stride(v_out, i);
    p->sa_stride[i] = rt_stride(s_a, i);
    p->sb_stride[i] = rt_stride(s_b, i);
    p->so_stride[i] = s_out ? rt_stride(s_out, i) : 0;
  }
  p->mask_stride = mask ? rt_stride(mask, 0) : 0;
  p->seq = (int32_t)seq;
  p->heads = (int32_t)heads;
  p->head_dim = (int32_t)hd;
  return FI_OK;
}

/* The device backend is loaded only once every argument has been checked.
 * A prefetching kernel runs on a persistent grid: as many blocks as are
 * resident at once (fewer when there are fewer rows), each walking rows with
 * the grid's stride. Otherwise each block takes its rows once. */
static fi_status run(fi_runtime *rt, int devtype, cascade_call *c, void *params, size_t bytes,
                     void *stream) {
  rt_kernel *k;
  fi_status st = rt_kernel_for(rt, devtype, c->device, &c->key, &k, NULL, NULL);
  if (st != FI_OK) return st;
  const int threads = (int)c->key.v[CASCADE_P_THREADS];
  const int64_t per_block = jit_cascade_rows_per_block(&c->key);
  int64_t blocks = (c->rows + per_block - 1) / per_block;
  if (c->key.v[CASCADE_P_PREFETCH]) {
    int resident;
    if ((st = rt_kernel_resident(rt, k, threads, &resident)) != FI_OK) return st;
    if (blocks > resident) blocks = resident;
  }
  c->launch = (rt_launch){{(unsigned)blocks, 1, 1}, {(unsigned)threads, 1, 1}, 0};
  return rt_launch_kernel(rt, k, &c->launch, stream, params, bytes);
}

FI_API fi_status fi_merge_state(fi_runtime *rt, const DLTensor *v_a, const DLTensor *s_a,
                                const DLTensor *v_b, const DLTensor *s_b, DLTensor *v_out,
                                DLTensor *s_out, void *stream) {
  static const names2 nm = {"fi_merge_state", "v_a", "s_a", "v_b", "s_b", "v_out", "s_out"};
  cascade_call c;
  fi_status st = prepare2(rt, &nm, v_a, s_a, v_b, s_b, v_out, s_out, NULL, &c);
  if (st != FI_OK || c.rows == 0) return st;
  return run(rt, v_a->device.device_type, &c, &c.one, sizeof c.one, stream);
}

FI_API fi_status fi_merge_state_in_place(fi_runtime *rt, DLTensor *v, DLTensor *s,
                                         const DLTensor *v_other, const DLTensor *s_other,
                                         const DLTensor *mask, void *stream) {
  static const names2 nm = {"fi_merge_state_in_place", "v", "s", "v_other", "s_other", "v", "s"};
  cascade_call c;
  /* s is both an input (checked as one: it may not be NULL) and the output. */
  fi_status st = prepare2(rt, &nm, v, s, v_other, s_other, v, s, mask, &c);
  if (st != FI_OK || c.rows == 0) return st;
  return run(rt, v->device.device_type, &c, &c.one, sizeof c.one, stream);
}

/* ---- N states: fi_merge_states ---- */

FI_API fi_status fi_merge_states(fi_runtime *rt, const DLTensor *v, const DLTensor *s,
                                 DLTensor *v_out, DLTensor *s_out, void *stream) {
  static const char *fn = "fi_merge_states";
  fi_status st;
  int dt, dto;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = check_v(fn, "v", v, 4, &dt)) != FI_OK) return st;
  if ((st = check_s(fn, "s", s, 3)) != FI_OK) return st;
  if ((st = check_v(fn, "v_out", v_out, 3, &dto)) != FI_OK) return st;
  if (s_out && (st = check_s(fn, "s_out", s_out, 2)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "v", v, "s", s)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "v", v, "v_out", v_out)) != FI_OK) return st;
  if (s_out && (st = rt_check_same_device(fn, "v", v, "s_out", s_out)) != FI_OK) return st;
  char b1[32], b2[32];
  if (dto != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: v_out has dtype %s but v has %s", fn,
                   rt_dtype_string(v_out->dtype, b1, sizeof b1),
                   rt_dtype_string(v->dtype, b2, sizeof b2));
  const int64_t seq = v->shape[0], n = v->shape[1], heads = v->shape[2], hd = v->shape[3];
  const int64_t sshape[3] = {seq, n, heads}, oshape[3] = {seq, heads, hd};
  if ((st = check_shape(fn, "s", s, sshape, 3, "v")) != FI_OK) return st;
  if ((st = check_shape(fn, "v_out", v_out, oshape, 3, "v")) != FI_OK) return st;
  if (s_out && (st = check_shape(fn, "s_out", s_out, oshape, 2, "v")) != FI_OK) return st;
  if (n == 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: v has 0 states (shape[1]); at least one state is needed", fn);
  if (hd == 0) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: v has head_dim 0 (shape[3])", fn);
  int64_t rows;
  if (hd > INT32_MAX || n > INT32_MAX || seq > INT32_MAX || heads > INT32_MAX ||
      __builtin_mul_overflow(seq, heads, &rows) || rows > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: v has shape [%lld, %lld, %lld, %lld]; seq x heads, N and head_dim must "
                   "be < 2^31",
                   fn, (long long)seq, (long long)n, (long long)heads, (long long)hd);
  if ((st = check_extent(fn, "v", v)) != FI_OK || (st = check_extent(fn, "s", s)) != FI_OK ||
      (st = check_extent(fn, "v_out", v_out)) != FI_OK ||
      (st = check_extent(fn, "s_out", s_out)) != FI_OK)
    return st;
  if ((st = check_contiguous_d(fn, "v", v)) != FI_OK ||
      (st = check_contiguous_d(fn, "v_out", v_out)) != FI_OK)
    return st;
  if ((st = check_out_rows(fn, "v_out", v_out, 0, 1, hd)) != FI_OK) return st;
  if (s_out && (st = check_out_rows(fn, "s_out", s_out, 0, 1, 1)) != FI_OK) return st;
  /* The outputs have other shapes than the inputs: no overlap at all. */
  if ((st = check_alias(fn, "v_out", v_out, "v", v, 0)) != FI_OK ||
      (st = check_alias(fn, "v_out", v_out, "s", s, 0)) != FI_OK ||
      (st = check_alias(fn, "v_out", v_out, "s_out", s_out, 0)) != FI_OK ||
      (st = check_alias(fn, "s_out", s_out, "v", v, 0)) != FI_OK ||
      (st = check_alias(fn, "s_out", s_out, "s", s, 0)) != FI_OK)
    return st;
  if (rows == 0) return FI_OK;

  cascade_call c;
  c.rows = rows;
  c.device = v->device.device_id;
  const DLTensor *vs[2] = {v, v_out};
  jit_merge_states_select(dt, pick_vec(dt, hd, vs, 2), (int)hd, &c.key);
  fi_merge_states_params *p = &c.many;
  memset(p, 0, sizeof *p);
  p->v = rt_data(v);
  p->s = (const float *)rt_data(s);
  p->v_out = rt_data(v_out);
  p->s_out = s_out ? (float *)rt_data(s_out) : NULL;
  for (int i = 0; i < 3; i++) {
    p->v_stride[i] = rt_stride(v, i);
    p->s_stride[i] = rt_stride(s, i);
  }
  for (int i = 0; i < 2; i++) {
    p->vo_stride[i] = rt_stride(v_out, i);
    p->so_stride[i] = s_out ? rt_stride(s_out, i) : 0;
  }
  p->seq = (int32_t)seq;
  p->num_states = (int32_t)n;
  p->heads = (int32_t)heads;
  p->head_dim = (int32_t)hd;
  return run(rt, v->device.device_type, &c, &c.many, sizeof c.many, stream);
}
