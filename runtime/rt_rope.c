/* rt_rope.c: the RoPE entry points (fi_apply_rope_pos_ids, fi_apply_llama31_rope_pos_ids,
 * fi_apply_rope_with_cos_sin_cache): argument checks, frequencies, kernel choice, launch. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fi_params.h"
#include "ops_rope.h"
#include "rt_internal.h"
#include "rt_tensor.h"

/* What the three entry points add to the common call. */
typedef struct rope_freq {
  int llama31;
  double scale, theta, low, high, old_ctx;
} rope_freq;

/* t is the very tensor ref: the same memory, shape and strides. */
static int same_view(const DLTensor *t, const DLTensor *ref) {
  if (rt_data(t) != rt_data(ref)) return 0;
  for (int i = 0; i < 3; i++)
    if (t->shape[i] != ref->shape[i] || (t->shape[i] > 1 && rt_stride(t, i) != rt_stride(ref, i)))
      return 0;
  return 1;
}

/* An output's (token, head) rows must not share elements: a head stride of
 * at least D, and tokens at least a whole token's heads apart, or the
 * other way round (a head-major view). */
static int rows_distinct(const DLTensor *t) {
  const int64_t n = t->shape[0], h = t->shape[1], d = t->shape[2];
  const int64_t s0 = rt_stride(t, 0), s1 = rt_stride(t, 1);
  if (n <= 1 && h <= 1) return 1;
  if (n <= 1) return s1 >= d;
  if (h <= 1) return s0 >= d;
  return (s1 >= d && s0 >= h * s1) || (s0 >= d && s1 >= n * s0);
}

static fi_status check_qk(const char *fn, const char *name, const DLTensor *t, int dt,
                          const DLTensor *ref, const char *ref_name) {
  char b1[32], b2[32];
  fi_status st;
  if ((st = rt_check_tensor(fn, name, t, 3)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, name, t, ref_name, ref)) != FI_OK) return st;
  if (rt_tensor_dtype(t) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s but %s has %s", fn, name,
                   rt_dtype_string(t->dtype, b1, sizeof b1), ref_name,
                   rt_dtype_string(ref->dtype, b2, sizeof b2));
  if (t->shape[2] > 1 && rt_stride(t, 2) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has head_dim stride %lld; head_dim must be contiguous (stride 1)", fn,
                   name, (long long)rt_stride(t, 2));
  if (rt_extent_bytes(t) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes (shape or stride)",
                   fn, name);
  return FI_OK;
}

static fi_status check_out_shape(const char *fn, const char *name, const DLTensor *t,
                                 const char *in_name, const DLTensor *in) {
  for (int i = 0; i < 3; i++)
    if (t->shape[i] != in->shape[i])
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: %s has shape [%lld, %lld, %lld] but %s has [%lld, %lld, %lld]", fn, name,
                     (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2],
                     in_name, (long long)in->shape[0], (long long)in->shape[1],
                     (long long)in->shape[2]);
  if (!rows_distinct(t))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has strides [%lld, %lld]; its heads overlap (each needs head_dim "
                   "elements of its own)",
                   fn, name, (long long)rt_stride(t, 0), (long long)rt_stride(t, 1));
  return FI_OK;
}

static int pick_vec(int es, int64_t d, int rotary_dim, int interleave, const DLTensor *const *ts) {
  int vec = 16 / es;
  for (; vec > 1; vec /= 2) {
    int ok = d % vec == 0 && rotary_dim % vec == 0 && (interleave || (rotary_dim / 2) % vec == 0);
    for (int i = 0; ok && i < 4; i++) {
      ok = (uintptr_t)rt_data(ts[i]) % (uintptr_t)(vec * es) == 0;
      for (int j = 0; ok && j < 2; j++) ok = ts[i]->shape[j] <= 1 || rt_stride(ts[i], j) % vec == 0;
    }
    if (ok) break;
  }
  return vec;
}

static fi_status rope(fi_runtime *rt, const char *fn, const DLTensor *q, const DLTensor *k,
                      DLTensor *q_out, DLTensor *k_out, const DLTensor *cache,
                      const DLTensor *pos_ids, int rotary_dim, int interleave, const rope_freq *fr,
                      void *stream) {
  fi_status st;
  char b1[32];
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_tensor(fn, "q", q, 3)) != FI_OK) return st;
  const int dt = rt_tensor_dtype(q);
  if (dt != JIT_DT_F16 && dt != JIT_DT_BF16)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q has dtype %s; float16 or bfloat16 is needed",
                   fn, rt_dtype_string(q->dtype, b1, sizeof b1));
  if ((st = check_qk(fn, "q", q, dt, q, "q")) != FI_OK) return st;
  if ((st = check_qk(fn, "k", k, dt, q, "q")) != FI_OK) return st;
  if ((st = check_qk(fn, "q_out", q_out, dt, q, "q")) != FI_OK) return st;
  if ((st = check_qk(fn, "k_out", k_out, dt, q, "q")) != FI_OK) return st;
  const int64_t nnz = q->shape[0], hq = q->shape[1], hk = k->shape[1], d = q->shape[2];
  if (k->shape[0] != nnz)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: k has %lld tokens but q has %lld", fn,
                   (long long)k->shape[0], (long long)nnz);
  if (k->shape[2] != d)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: k has head_dim %lld but q has %lld", fn,
                   (long long)k->shape[2], (long long)d);
  if ((st = check_out_shape(fn, "q_out", q_out, "q", q)) != FI_OK) return st;
  if ((st = check_out_shape(fn, "k_out", k_out, "k", k)) != FI_OK) return st;

  if ((st = rt_check_tensor(fn, "pos_ids", pos_ids, 1)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "pos_ids", pos_ids, "q", q)) != FI_OK) return st;
  const int pdt = rt_tensor_dtype(pos_ids);
  if (pdt != JIT_DT_I32 && pdt != JIT_DT_I64)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: pos_ids has dtype %s; int32 or int64 is needed",
                   fn, rt_dtype_string(pos_ids->dtype, b1, sizeof b1));
  if (pos_ids->shape[0] != nnz)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: pos_ids has %lld entries but q has %lld tokens",
                   fn, (long long)pos_ids->shape[0], (long long)nnz);
  if (nnz > 1 && rt_stride(pos_ids, 0) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: pos_ids has stride %lld; it must be contiguous (stride 1)", fn,
                   (long long)rt_stride(pos_ids, 0));
  if (interleave != 0 && interleave != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: interleave is %d; 0 or 1 is needed", fn,
                   interleave);

  if (cache) {
    if ((st = rt_check_tensor(fn, "cos_sin_cache", cache, 2)) != FI_OK) return st;
    if ((st = rt_check_same_device(fn, "cos_sin_cache", cache, "q", q)) != FI_OK) return st;
    if (rt_tensor_dtype(cache) != JIT_DT_F32)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: cos_sin_cache has dtype %s; float32 is needed",
                     fn, rt_dtype_string(cache->dtype, b1, sizeof b1));
    if ((cache->shape[1] > 1 && rt_stride(cache, 1) != 1) ||
        (cache->shape[0] > 1 && rt_stride(cache, 0) != cache->shape[1]))
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: cos_sin_cache has strides [%lld, %lld]; it must be contiguous", fn,
                     (long long)rt_stride(cache, 0), (long long)rt_stride(cache, 1));
    if (cache->shape[0] < 1)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: cos_sin_cache has no rows (max_pos 0)", fn);
    if (cache->shape[1] > INT32_MAX)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: cos_sin_cache has %lld columns", fn,
                     (long long)cache->shape[1]);
    rotary_dim = (int)cache->shape[1];
  }
  const char *rd_name = cache ? "cos_sin_cache's rotary_dim (columns)" : "rotary_dim";
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > d)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s is %d; an even number in [2, head_dim = %lld] is needed", fn, rd_name,
                   rotary_dim, (long long)d);
  if (!cache && rotary_dim > 2 * FI_ROPE_MAX_PAIRS)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: rotary_dim is %d; at most %d is supported (use a cos_sin_cache)", fn,
                   rotary_dim, 2 * FI_ROPE_MAX_PAIRS);
  if (fr) {
    if (!(fr->theta > 0) || !isfinite(fr->theta))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rope_theta is %g; it must be > 0", fn,
                     fr->theta);
    if (!(fr->scale > 0) || !isfinite(fr->scale))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rope_scale is %g; it must be > 0", fn,
                     fr->scale);
    if (fr->llama31) {
      if (!(fr->low > 0) || !isfinite(fr->low))
        return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: low_freq_factor is %g; it must be > 0", fn,
                       fr->low);
      if (!(fr->high > fr->low) || !isfinite(fr->high))
        return rt_fail(FI_ERR_INVALID_ARGUMENT,
                       "%s: high_freq_factor is %g; it must be > low_freq_factor (%g)", fn,
                       fr->high, fr->low);
      if (!(fr->old_ctx > 0) || !isfinite(fr->old_ctx))
        return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: old_context_len is %g; it must be > 0", fn,
                       fr->old_ctx);
    }
  }

  /* In place: both outputs are their inputs; else no output shares memory
   * with an input or the other output (extents: conservative). */
  const int q_same = same_view(q_out, q), k_same = same_view(k_out, k);
  if (q_same != k_same)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s is its input but %s is not; both outputs in place or neither", fn,
                   q_same ? "q_out" : "k_out", q_same ? "k_out" : "q_out");
  const int in_place = q_same;
  if (!in_place) {
    const struct {
      const DLTensor *a, *b;
      const char *an, *bn;
    } pairs[] = {{q_out, q, "q_out", "q"}, {q_out, k, "q_out", "k"}, {k_out, q, "k_out", "q"},
                 {k_out, k, "k_out", "k"}, {q_out, k_out, "q_out", "k_out"}};
    for (int i = 0; i < 5; i++)
      if (rt_tensors_overlap(pairs[i].a, pairs[i].b))
        return rt_fail(FI_ERR_INVALID_ARGUMENT,
                       "%s: %s overlaps %s; out of place, outputs need their own memory (in "
                       "place: pass q_out = q and k_out = k)",
                       fn, pairs[i].an, pairs[i].bn);
  }
  if (nnz > INT32_MAX || d > INT32_MAX || hq + hk > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q/k shape exceeds 2^31-1", fn);

  const int es = jit_dtype_bytes(dt);
  const DLTensor *ts[4] = {q, k, q_out, k_out};
  const int vec = pick_vec(es, d, rotary_dim, interleave, ts);
  jit_key key;
  jit_rope_select(dt, pdt, cache ? JIT_ROPE_CACHE : JIT_ROPE_FREQ, interleave, vec, &key);
  const int kv = (int)key.v[ROPE_P_VEC]; /* the registered width, maybe narrower */
  const int nu = interleave && kv < 2 ? 2 : kv;
  const int64_t rot_lanes = interleave ? rotary_dim / nu : (rotary_dim / 2) / kv;
  const int64_t lanes = rot_lanes + (in_place ? 0 : (d - rotary_dim) / kv);
  const int64_t groups = (hq + hk + FI_ROPE_HEADS_PER_ITEM - 1) / FI_ROPE_HEADS_PER_ITEM;
  const int64_t total = nnz * groups * lanes;
  if (nnz > 0 && total / nnz / lanes != groups) /* cannot happen under the 2^31 bounds above */
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q/k too large", fn);
  if (total > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: q and k have %lld tokens x %lld heads; that exceeds the kernel's 2^31 "
                   "work items",
                   fn, (long long)nnz, (long long)(hq + hk));
  if (total == 0) return FI_OK;

  fi_rope_params p;
  memset(&p, 0, sizeof p);
  p.q = rt_data(q);
  p.k = rt_data(k);
  p.q_out = rt_data(q_out);
  p.k_out = rt_data(k_out);
  p.pos_ids = rt_data(pos_ids);
  p.cos_sin_cache = cache ? (const float *)rt_data(cache) : NULL;
  const DLTensor *const st4[4] = {q, k, q_out, k_out};
  int64_t *dst[4] = {p.q_stride, p.k_stride, p.qo_stride, p.ko_stride};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 2; j++) dst[i][j] = st4[i]->shape[j] > 1 ? rt_stride(st4[i], j) : 0;
  p.nnz = (int32_t)nnz;
  p.heads_q = (int32_t)hq;
  p.heads_k = (int32_t)hk;
  p.head_dim = (int32_t)d;
  p.rotary_dim = rotary_dim;
  p.lanes = (int32_t)lanes;
  p.rot_lanes = (int32_t)rot_lanes;
  p.head_groups = (int32_t)groups;
  p.in_place = in_place;
  if (fr) {
    /* In double, rounded once: the angle at position 1e5 moves by 1e5 times
     * the frequency's error, so float pow's few ulps would show. */
    for (int i = 0; i < rotary_dim / 2; i++) {
      double f = pow(fr->theta, -2.0 * i / rotary_dim);
      if (!fr->llama31) {
        f /= fr->scale;
      } else {
        const double wavelen = 2.0 * M_PI / f;
        const double low_wl = fr->old_ctx / fr->low, high_wl = fr->old_ctx / fr->high;
        if (wavelen > low_wl) {
          f /= fr->scale;
        } else if (wavelen >= high_wl) {
          const double smooth = (fr->old_ctx / wavelen - fr->low) / (fr->high - fr->low);
          f = (1.0 - smooth) * f / fr->scale + smooth * f;
        }
      }
      p.inv_freq[i] = (float)f;
    }
  }

  rt_kernel *kern;
  if ((st = rt_kernel_for(rt, q->device.device_type, q->device.device_id, &key, &kern, NULL, NULL)) != FI_OK)
    return st;
  const int threads = (int)key.v[ROPE_P_THREADS];
  /* A block per THREADS work items (the host keeps them < 2^31, so the grid
   * fits): capped at the resident blocks, each walking about 5 items
   * (16384 tokens x 40 heads), the kernel measured 87% of copy out of place
   * in bf16, against 90% this way. */
  const int64_t grid = (total + threads - 1) / threads;
  return rt_launch_1d(rt, kern, grid, (unsigned)threads, stream, &p, sizeof p);
}

FI_API fi_status fi_apply_rope_pos_ids(fi_runtime *rt, const DLTensor *q, const DLTensor *k,
                                       DLTensor *q_out, DLTensor *k_out, const DLTensor *pos_ids,
                                       int rotary_dim, int interleave, double rope_scale,
                                       double rope_theta, void *stream) {
  const rope_freq fr = {0, rope_scale, rope_theta, 0, 0, 0};
  return rope(rt, "fi_apply_rope_pos_ids", q, k, q_out, k_out, NULL, pos_ids, rotary_dim,
              interleave, &fr, stream);
}

FI_API fi_status fi_apply_llama31_rope_pos_ids(fi_runtime *rt, const DLTensor *q,
                                               const DLTensor *k, DLTensor *q_out,
                                               DLTensor *k_out, const DLTensor *pos_ids,
                                               int rotary_dim, int interleave, double rope_scale,
                                               double rope_theta, double low_freq_factor,
                                               double high_freq_factor, double old_context_len,
                                               void *stream) {
  const rope_freq fr = {1, rope_scale, rope_theta, low_freq_factor, high_freq_factor,
                        old_context_len};
  return rope(rt, "fi_apply_llama31_rope_pos_ids", q, k, q_out, k_out, NULL, pos_ids, rotary_dim,
              interleave, &fr, stream);
}

FI_API fi_status fi_apply_rope_with_cos_sin_cache(fi_runtime *rt, const DLTensor *q,
                                                  const DLTensor *k, DLTensor *q_out,
                                                  DLTensor *k_out, const DLTensor *cos_sin_cache,
                                                  const DLTensor *pos_ids, int interleave,
                                                  void *stream) {
  const char *fn = "fi_apply_rope_with_cos_sin_cache";
  if (rt && !cos_sin_cache)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: cos_sin_cache is NULL", fn);
  return rope(rt, fn, q, k, q_out, k_out, cos_sin_cache, pos_ids, 0, interleave, NULL, stream);
}
