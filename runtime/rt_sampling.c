/* rt_sampling.c: the sampling entry points (fi_softmax, fi_sampling_from_probs, the top-k /
 * top-p / min-p samplers, the renorm and mask ops): argument checks, the kernel choice
 * (access width, CTAs per row) and the launch: a grid of batch x cluster CTAs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_params.h"
#include "ops_sampling.h"
#include "fi_admin.h"
#include "rt_internal.h"
#include "rt_sampling.h"
#include "rt_tensor.h"
#include "rt_tune.h"
#include "sampling_params.h"

typedef struct smp_call {
  jit_key key;
  fi_sampling_params p;
  int devtype, device;
  int64_t batch;
  const DLTensor *in;
} smp_call;

/* The per-row parameter arrays of a call, for the overlap checks. */
typedef struct smp_arrays {
  const DLTensor *t[3];
  const char *name[3];
} smp_arrays;

/* input: [batch, vocab] float16/bfloat16/float32 with unit column stride. */
static fi_status check_input(const char *fn, const char *name, const DLTensor *t) {
  fi_status st = rt_check_tensor(fn, name, t, 2);
  if (st != FI_OK) return st;
  char b[32];
  const int dt = rt_tensor_dtype(t);
  if (dt != JIT_DT_F16 && dt != JIT_DT_BF16 && dt != JIT_DT_F32)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has dtype %s; float16, bfloat16 or float32 is needed", fn, name,
                   rt_dtype_string(t->dtype, b, sizeof b));
  const int64_t batch = t->shape[0], vocab = t->shape[1];
  if (vocab < 1 || vocab > ((int64_t)1 << 30))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has vocab size (shape[1]) %lld; 1 to 2^30 is supported", fn, name,
                   (long long)vocab);
  if (batch > ((int64_t)1 << 28))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has batch (shape[0]) %lld; at most 2^28", fn,
                   name, (long long)batch);
  if (vocab > 1 && rt_stride(t, 1) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has column stride %lld; rows must be contiguous (stride 1)", fn, name,
                   (long long)rt_stride(t, 1));
  if (batch > 1 && rt_stride(t, 0) < vocab)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has row stride %lld, less than its vocab size %lld", fn, name,
                   (long long)rt_stride(t, 0), (long long)vocab);
  if (rt_extent_bytes(t) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes", fn, name);
  return FI_OK;
}

/* A 1-D [batch] tensor of dtype want on in's device (a per-row parameter or the samples). */
static fi_status check_rows(const char *fn, const char *name, const DLTensor *t, int want,
                            const char *want_name, const DLTensor *in) {
  fi_status st = rt_check_tensor(fn, name, t, 1);
  if (st != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "the input", in, name, t)) != FI_OK) return st;
  char b[32];
  if (rt_tensor_dtype(t) != want)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; %s is needed", fn, name,
                   rt_dtype_string(t->dtype, b, sizeof b), want_name);
  if (t->shape[0] != in->shape[0])
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has shape [%lld]; [%lld] is needed (the input's batch)", fn, name,
                   (long long)t->shape[0], (long long)in->shape[0]);
  if (rt_extent_bytes(t) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes", fn, name);
  return FI_OK;
}

/* A written tensor must not share memory with any per-row parameter array. */
static fi_status check_no_overlap(const char *fn, const char *name, const DLTensor *t,
                                  const smp_arrays *a) {
  for (int i = 0; i < 3; i++)
    if (a->t[i] && rt_tensors_overlap(t, a->t[i]))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s", fn, name, a->name[i]);
  return FI_OK;
}

/* out: [batch, vocab] of dtype want (unit column stride); it may be the input itself
 * (same memory, same strides: in place) but not a shifted view of it. */
static fi_status check_out2d(const char *fn, const char *name, const DLTensor *t, int want,
                             const char *in_name, const DLTensor *in, const smp_arrays *a) {
  fi_status st = rt_check_tensor(fn, name, t, 2);
  if (st != FI_OK) return st;
  if ((st = rt_check_same_device(fn, in_name, in, name, t)) != FI_OK) return st;
  char b1[32], b2[32];
  if (rt_tensor_dtype(t) != want)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; %s is needed", fn, name,
                   rt_dtype_string(t->dtype, b1, sizeof b1),
                   want == JIT_DT_F32 ? "float32" : rt_dtype_string(in->dtype, b2, sizeof b2));
  if (t->shape[0] != in->shape[0] || t->shape[1] != in->shape[1])
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has shape [%lld, %lld]; %s has [%lld, %lld]",
                   fn, name, (long long)t->shape[0], (long long)t->shape[1], in_name,
                   (long long)in->shape[0], (long long)in->shape[1]);
  const int64_t batch = t->shape[0], vocab = t->shape[1];
  if (vocab > 1 && rt_stride(t, 1) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has column stride %lld; rows must be contiguous (stride 1)", fn, name,
                   (long long)rt_stride(t, 1));
  if (batch > 1 && rt_stride(t, 0) < vocab)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has row stride %lld, less than its vocab size %lld (rows overlap)", fn,
                   name, (long long)rt_stride(t, 0), (long long)vocab);
  if (rt_extent_bytes(t) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes", fn, name);
  if (rt_tensors_overlap(t, in)) {
    const int same = rt_data(t) == rt_data(in) && t->dtype.bits == in->dtype.bits &&
                     (batch <= 1 || rt_stride(t, 0) == rt_stride(in, 0));
    if (!same)
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: %s partly overlaps %s; pass the same tensor to work in place", fn, name,
                     in_name);
  }
  return check_no_overlap(fn, name, t, a);
}

/* Fills the parts of the call every op shares. */
static void call_init(smp_call *c, const DLTensor *in, void *out, int64_t out_stride) {
  memset(c, 0, sizeof *c);
  c->in = in;
  c->devtype = in->device.device_type;
  c->device = in->device.device_id;
  c->batch = in->shape[0];
  c->p.input = rt_data(in);
  c->p.out = out;
  c->p.in_stride = in->shape[0] > 1 ? rt_stride(in, 0) : 0;
  c->p.out_stride = out_stride;
  c->p.batch = (int32_t)in->shape[0];
  c->p.vocab = (int32_t)in->shape[1];
  c->p.top_p = 1.0f;
}

/* What every entry point does first: rt and the input checked, the call set up from it. */
static fi_status begin(const char *fn, fi_runtime *rt, const char *in_name, const DLTensor *in,
                       smp_call *c) {
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  fi_status st = check_input(fn, in_name, in);
  if (st != FI_OK) return st;
  call_init(c, in, NULL, 0);
  return FI_OK;
}

/* The [batch, vocab] output of softmax, renorm and mask: checked, then set in the call. */
static fi_status out_arg(const char *fn, const DLTensor *out, int want, const char *in_name,
                         const DLTensor *in, smp_call *c, const smp_arrays *a) {
  fi_status st = check_out2d(fn, "out", out, want, in_name, in, a);
  if (st != FI_OK) return st;
  c->p.out = rt_data(out);
  c->p.out_stride = out->shape[0] > 1 ? rt_stride(out, 0) : 0;
  return FI_OK;
}

/* CTAs per row: a cluster of 8 or 4 on a device with clusters (sm_90 and newer) while the
 * grid still fits on the device at once (4 CTAs of 256 threads per SM), else one. */
static int pick_cluster(const rt_device_i *be, void *state, int device, int64_t batch) {
  rt_device_caps caps;
  char err[256];
  int sms = 0;
  if (rt_device_caps_get(be, state, device, &caps, err, sizeof err) != 0 || !caps.clusters) return 1;
  if (be->sm_count(state, device, &sms) != 0 || sms <= 0) return 1;
  const int64_t slots = (int64_t)sms * 4;
  if (batch * 8 <= slots) return 8;
  if (batch * 4 <= slots) return 4;
  return 1;
}

/* The threshold search of the top-k / top-p kernels (SEL of kernels/sampling_select.cuh): by
 * default the key-range one (1) for the ops with a top-k filter and the radix one (0) for
 * top-p alone: at 64 x 128256 float32 (H200) top-k 50 sampling took 50 us against 117,
 * top-k + top-p 61 against 88, the top-k mask 57 against 68, while top-p 0.9 renorm took
 * 109 against 90. Top-p sampling searches only when its draws all miss the set (rarely at
 * p 0.9), so both searches time it alike (32 us). FI_SAMPLING_SELECT=range or radix forces
 * one; read at fi_runtime_create, so a benchmark or test compares both with a runtime each. */
static int select_variant(const rt_tuning *t, int op) {
  if (t->sampling_select >= 0) return t->sampling_select; /* 1 range, 0 radix */
  return op == FI_SMP_TOPK || op == FI_SMP_TOPK_TOPP_LOGITS || op == FI_SMP_TOPK_RENORM ||
         op == FI_SMP_TOPK_MASK || op == FI_SMP_TOPK_TOPP_PROBS;
}

/* The membership test of top-p sampling (fi_sampling_params.topp_variant): float sums with
 * an exact fallback by default; FI_SAMPLING_TOPP=exact forces the exact 64-bit sums (make
 * gpu-test runs gpu_sampling both ways). Read at fi_runtime_create, as select_variant. */
static int topp_variant(const rt_tuning *t) {
  return t->sampling_topp_exact ? FI_SMP_TOPP_EXACT : FI_SMP_TOPP_FLOAT;
}

/* ---- stored tactics (issue 43): CTAs per row and the threshold search ---- */

int rt_sampling_tactic_parse(const char *s, rt_sampling_tactic *t) {
  int cl = 0, sel = 0, used = 0;
  if (!s || sscanf(s, "cluster=%d;select=%d%n", &cl, &sel, &used) != 2 || s[used]) return -1;
  if ((cl != 1 && cl != 4 && cl != 8) || (sel != 0 && sel != 1)) return -1;
  *t = (rt_sampling_tactic){cl, sel};
  return 0;
}

int rt_sampling_tactic_format(const rt_sampling_tactic *t, char *buf, size_t n) {
  const int w = snprintf(buf, n, "cluster=%d;select=%d", t->cluster, t->select);
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

static const char *const smp_names[FI_SMP_OP_COUNT] = {
    "softmax", "sample", "top_k", "top_p", "min_p", "top_k_top_p_logits", "top_k_renorm", "top_p_renorm",
    "top_k_mask", "top_k_top_p_probs"};

const char *rt_sampling_op_name(int op) { return op >= 0 && op < FI_SMP_OP_COUNT ? smp_names[op] : NULL; }

int rt_sampling_op_of(const char *name) {
  for (int i = 0; name && i < FI_SMP_OP_COUNT; i++)
    if (strcmp(name, smp_names[i]) == 0) return i;
  return -1;
}

void rt_sampling_tactic_shape(const int64_t *f, char *buf, size_t n) {
  const char *op = rt_sampling_op_name((int)f[0]), *dt = jit_dtype_name((int)f[1]);
  snprintf(buf, n, "op=%s;dtype=%s;vocab=%lld", op ? op : "?", dt ? dt : "?", (long long)f[2]);
}

int rt_sampling_tuned(int op) {
  return op == FI_SMP_SAMPLE || op == FI_SMP_TOPK || op == FI_SMP_TOPP || op == FI_SMP_MINP ||
         op == FI_SMP_TOPK_TOPP_LOGITS || op == FI_SMP_TOPK_TOPP_PROBS;
}

static _Thread_local const rt_sampling_tactic *forced;

void rt_sampling_force(const rt_sampling_tactic *t) { forced = t; }

/* The tactic of a call: the forced one (the tuner), else the stored one for (op, dtype,
 * vocab) and the batch's bucket where the cluster it names can run here (memoized: no
 * lock, no allocation after a key's first call), else the rule's; FI_SAMPLING_SELECT
 * wins over a stored search. */
/* The rule's tactic: the cluster the grid allows, the search the op (or FI_SAMPLING_SELECT) takes. */
static rt_sampling_tactic rule(fi_runtime *rt, const rt_device_i *be, void *state, int device, int op,
                               int64_t batch) {
  return (rt_sampling_tactic){pick_cluster(be, state, device, batch), select_variant(&rt->env.tune, op)};
}

static rt_sampling_tactic choose(fi_runtime *rt, const rt_device_i *be, void *state, const smp_call *c, int op,
                                 int dt) {
  if (forced) return *forced;
  rt_sampling_tactic t = rule(rt, be, state, c->device, op, c->batch);
  if (!rt_sampling_tuned(op)) return t;
  const char *text;
  rt_sampling_tactic s;
  if (rt_tactic_cached(rt, "sampling", (const int64_t[RT_SAMPLING_TACTIC_FIELDS]){op, dt, c->in->shape[1]},
                       RT_SAMPLING_TACTIC_FIELDS, fi_tune_bucket(c->batch), c->devtype, c->device,
                       rt_sampling_tactic_shape, &text, NULL) &&
      rt_sampling_tactic_parse(text, &s) == 0) {
    rt_device_caps caps;
    char err[128];
    if (s.cluster == 1 || (rt_device_caps_get(be, state, c->device, &caps, err, sizeof err) == 0 && caps.clusters))
      t.cluster = s.cluster;
    if (rt->env.tune.sampling_select < 0) t.select = s.select;
  }
  return t;
}

int rt_sampling_rule(fi_runtime *rt, int devtype, int device, int op, int64_t batch, rt_sampling_tactic *t) {
  const rt_device_i *be;
  void *state;
  if (rt_backend(rt, devtype, &be, &state) != FI_OK) return -1;
  *t = rule(rt, be, state, device, op, batch);
  return 0;
}

/* Chooses the kernel (vec from in's and out2d's alignment) and launches it. */
static fi_status launch(fi_runtime *rt, smp_call *c, int op, const DLTensor *out2d, void *stream) {
  if (c->batch == 0) return FI_OK;
  const DLTensor *in = c->in;
  const int dt = rt_tensor_dtype(in);
  const int64_t vocab = in->shape[1];
  const void *pi[1] = {rt_data(in)};
  const int64_t si[1] = {c->p.in_stride};
  int vec = rt_pick_vec(jit_dtype_bytes(dt), vocab, pi, 1, si, c->batch > 1 ? 1 : 0) >= 4 ? 4 : 1;
  if (out2d && vec == 4) {
    const void *po[1] = {rt_data(out2d)};
    const int64_t so[1] = {c->p.out_stride};
    vec = rt_pick_vec(jit_dtype_bytes(rt_tensor_dtype(out2d)), vocab, po, 1, so,
                      c->batch > 1 ? 1 : 0) >= 4
              ? 4
              : 1;
  }
  const rt_device_i *be;
  void *state;
  fi_status st = rt_backend(rt, c->devtype, &be, &state);
  if (st != FI_OK) return st;
  const rt_sampling_tactic t = choose(rt, be, state, c, op, dt);
  const int cl = t.cluster;
  jit_sampling_select(op, dt, vec, cl, t.select, &c->key);
  if (op == FI_SMP_TOPP || op == FI_SMP_TOPK_TOPP_LOGITS || op == FI_SMP_TOPK_TOPP_PROBS)
    c->p.topp_variant = topp_variant(&rt->env.tune);
  rt_kernel *k;
  if ((st = rt_kernel_get(rt, &c->key, be, c->device, &k)) != FI_OK) return st;
  return rt_launch_1d(rt, k, c->batch * cl, SMP_THREADS, stream, &c->p, sizeof c->p);
}

/* ---- per-row parameters: the array (checked) or the scalar (checked when no array) ---- */

static fi_status top_k_arg(const char *fn, const DLTensor *arr, int top_k, const DLTensor *in,
                           smp_call *c, smp_arrays *a, int slot) {
  if (arr) {
    fi_status st = check_rows(fn, "top_k_arr", arr, JIT_DT_I32, "int32", in);
    if (st != FI_OK) return st;
    c->p.top_k_arr = (const int32_t *)rt_data(arr);
    c->p.top_k_stride = rt_stride(arr, 0);
    a->t[slot] = arr;
    a->name[slot] = "top_k_arr";
  } else if (top_k < 0) {
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: top_k is %d; 0 (no limit) or a positive count is needed", fn, top_k);
  }
  c->p.top_k = top_k;
  return FI_OK;
}

static fi_status top_p_arg(const char *fn, const DLTensor *arr, double top_p, const DLTensor *in,
                           smp_call *c, smp_arrays *a, int slot) {
  if (arr) {
    fi_status st = check_rows(fn, "top_p_arr", arr, JIT_DT_F32, "float32", in);
    if (st != FI_OK) return st;
    c->p.top_p_arr = (const float *)rt_data(arr);
    c->p.top_p_stride = rt_stride(arr, 0);
    a->t[slot] = arr;
    a->name[slot] = "top_p_arr";
    c->p.top_p = 1.0f;
  } else {
    if (!(top_p > 0.0 && top_p <= 1.0))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: top_p is %g; a value in (0, 1] is needed", fn,
                     top_p);
    c->p.top_p = (float)top_p;
  }
  return FI_OK;
}

/* min_p (sampling) or the temperature (softmax): the same slot of the parameters. */
static fi_status min_p_arg(const char *fn, const char *arr_name, const char *name,
                           const DLTensor *arr, double v, const DLTensor *in, smp_call *c,
                           smp_arrays *a, int slot, int temperature) {
  if (arr) {
    fi_status st = check_rows(fn, arr_name, arr, JIT_DT_F32, "float32", in);
    if (st != FI_OK) return st;
    c->p.min_p_arr = (const float *)rt_data(arr);
    c->p.min_p_stride = rt_stride(arr, 0);
    a->t[slot] = arr;
    a->name[slot] = arr_name;
    c->p.min_p = 0.0f;
  } else {
    if (temperature ? !(v > 0.0 && isfinite(v) && (float)v > 0.0f) : !(v >= 0.0 && v <= 1.0))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s is %g; %s is needed", fn, name, v,
                     temperature ? "a positive finite value" : "a value in [0, 1]");
    c->p.min_p = (float)v;
  }
  return FI_OK;
}

/* samples: int32 [batch], not overlapping the input or a parameter array. */
static fi_status samples_arg(const char *fn, const char *in_name, DLTensor *samples,
                             const DLTensor *in, smp_call *c, const smp_arrays *a) {
  fi_status st = check_rows(fn, "samples", samples, JIT_DT_I32, "int32", in);
  if (st != FI_OK) return st;
  if (rt_tensors_overlap(samples, in))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: samples overlaps %s", fn, in_name);
  if ((st = check_no_overlap(fn, "samples", samples, a)) != FI_OK) return st;
  c->p.out = rt_data(samples);
  c->p.out_stride = rt_stride(samples, 0);
  return FI_OK;
}

/* ---- entry points ---- */

FI_API fi_status fi_softmax(fi_runtime *rt, const DLTensor *logits, const DLTensor *temperature_arr,
                            double temperature, DLTensor *out, void *stream) {
  static const char *fn = "fi_softmax";
  smp_call c;
  smp_arrays a = {{NULL}, {NULL}};
  fi_status st = begin(fn, rt, "logits", logits, &c);
  if (st != FI_OK) return st;
  if ((st = min_p_arg(fn, "temperature_arr", "temperature", temperature_arr, temperature, logits,
                      &c, &a, 0, 1)) != FI_OK)
    return st;
  if ((st = out_arg(fn, out, JIT_DT_F32, "logits", logits, &c, &a)) != FI_OK) return st;
  return launch(rt, &c, FI_SMP_SOFTMAX, out, stream);
}

FI_API fi_status fi_sampling_from_probs(fi_runtime *rt, const DLTensor *probs, DLTensor *samples,
                                        uint64_t seed, uint64_t offset, void *stream) {
  static const char *fn = "fi_sampling_from_probs";
  smp_call c;
  smp_arrays a = {{NULL}, {NULL}};
  fi_status st = begin(fn, rt, "probs", probs, &c);
  if (st != FI_OK) return st;
  if ((st = samples_arg(fn, "probs", samples, probs, &c, &a)) != FI_OK) return st;
  c.p.seed = seed;
  c.p.offset = offset;
  return launch(rt, &c, FI_SMP_SAMPLE, NULL, stream);
}

/* The samplers with one filter and the filters of a distribution: one entry point each,
 * written once below (libuv's UV_HANDLE_TYPE_MAP style). A filter is its array or its
 * scalar (NAME_arr, NAME), checked by NAME_arg; a sampler then takes samples, seed and
 * offset, a filter out. */
static fi_status min_p_only_arg(const char *fn, const DLTensor *arr, double v, const DLTensor *in, smp_call *c,
                                smp_arrays *a, int slot) {
  return min_p_arg(fn, "min_p_arr", "min_p", arr, v, in, c, a, slot, 0);
}
#define top_k_only_arg top_k_arg
#define top_p_only_arg top_p_arg

/* X(entry point, op, filter, its scalar's type) */
#define SMP_ONE_FILTER_SAMPLERS(X)                                  \
  X(fi_top_k_sampling_from_probs, FI_SMP_TOPK, top_k, int)          \
  X(fi_top_p_sampling_from_probs, FI_SMP_TOPP, top_p, double)       \
  X(fi_min_p_sampling_from_probs, FI_SMP_MINP, min_p, double)

#define SMP_DEFINE_SAMPLER(NAME, OP, FILTER, TYPE)                                                          \
  FI_API fi_status NAME(fi_runtime *rt, const DLTensor *probs, const DLTensor *FILTER##_arr, TYPE FILTER,    \
                        DLTensor *samples, uint64_t seed, uint64_t offset, void *stream) {                  \
    static const char *fn = #NAME;                                                                          \
    smp_call c;                                                                                             \
    smp_arrays a = {{NULL}, {NULL}};                                                                        \
    fi_status st = begin(fn, rt, "probs", probs, &c);                                                       \
    if (st != FI_OK) return st;                                                                             \
    if ((st = FILTER##_only_arg(fn, FILTER##_arr, FILTER, probs, &c, &a, 0)) != FI_OK) return st;           \
    if ((st = samples_arg(fn, "probs", samples, probs, &c, &a)) != FI_OK) return st;                        \
    c.p.seed = seed;                                                                                        \
    c.p.offset = offset;                                                                                    \
    return launch(rt, &c, OP, NULL, stream);                                                                \
  }
SMP_ONE_FILTER_SAMPLERS(SMP_DEFINE_SAMPLER)

/* Top-k then top-p, from logits or probabilities (op), in_name the input's. */
static fi_status top_k_top_p(const char *fn, int op, const char *in_name, fi_runtime *rt, const DLTensor *in,
                             const DLTensor *top_k_arr, int top_k, const DLTensor *top_p_arr, double top_p,
                             DLTensor *samples, uint64_t seed, uint64_t offset, void *stream) {
  smp_call c;
  smp_arrays a = {{NULL}, {NULL}};
  fi_status st = begin(fn, rt, in_name, in, &c);
  if (st != FI_OK) return st;
  if ((st = top_k_arg(fn, top_k_arr, top_k, in, &c, &a, 0)) != FI_OK) return st;
  if ((st = top_p_arg(fn, top_p_arr, top_p, in, &c, &a, 1)) != FI_OK) return st;
  if ((st = samples_arg(fn, in_name, samples, in, &c, &a)) != FI_OK) return st;
  c.p.seed = seed;
  c.p.offset = offset;
  return launch(rt, &c, op, NULL, stream);
}

FI_API fi_status fi_top_k_top_p_sampling_from_logits(fi_runtime *rt, const DLTensor *logits,
                                                     const DLTensor *top_k_arr, int top_k,
                                                     const DLTensor *top_p_arr, double top_p,
                                                     DLTensor *samples, uint64_t seed,
                                                     uint64_t offset, void *stream) {
  return top_k_top_p("fi_top_k_top_p_sampling_from_logits", FI_SMP_TOPK_TOPP_LOGITS, "logits", rt, logits,
                     top_k_arr, top_k, top_p_arr, top_p, samples, seed, offset, stream);
}

FI_API fi_status fi_top_k_top_p_sampling_from_probs(fi_runtime *rt, const DLTensor *probs,
                                                    const DLTensor *top_k_arr, int top_k,
                                                    const DLTensor *top_p_arr, double top_p,
                                                    DLTensor *samples, uint64_t seed,
                                                    uint64_t offset, void *stream) {
  return top_k_top_p("fi_top_k_top_p_sampling_from_probs", FI_SMP_TOPK_TOPP_PROBS, "probs", rt, probs,
                     top_k_arr, top_k, top_p_arr, top_p, samples, seed, offset, stream);
}

/* Softmax of the logits, then one draw: the top-k + top-p kernel with both filters off (one
 * pass for the maximum, the draws weighted by exp(logit - max)). */
FI_API fi_status fi_sampling_from_logits(fi_runtime *rt, const DLTensor *logits, DLTensor *samples,
                                         uint64_t seed, uint64_t offset, void *stream) {
  return top_k_top_p("fi_sampling_from_logits", FI_SMP_TOPK_TOPP_LOGITS, "logits", rt, logits, NULL, 0, NULL,
                     1.0, samples, seed, offset, stream);
}

/* X(entry point, op, input's name, filter, its scalar's type): out has the input's dtype. */
#define SMP_FILTERS(X)                                                \
  X(fi_top_k_renorm_probs, FI_SMP_TOPK_RENORM, probs, top_k, int)     \
  X(fi_top_p_renorm_probs, FI_SMP_TOPP_RENORM, probs, top_p, double)  \
  X(fi_top_k_mask_logits, FI_SMP_TOPK_MASK, logits, top_k, int)

#define SMP_DEFINE_FILTER(NAME, OP, IN, FILTER, TYPE)                                                  \
  FI_API fi_status NAME(fi_runtime *rt, const DLTensor *IN, const DLTensor *FILTER##_arr, TYPE FILTER,  \
                        DLTensor *out, void *stream) {                                                 \
    static const char *fn = #NAME;                                                                     \
    smp_call c;                                                                                        \
    smp_arrays a = {{NULL}, {NULL}};                                                                   \
    fi_status st = begin(fn, rt, #IN, IN, &c);                                                         \
    if (st != FI_OK) return st;                                                                        \
    if ((st = FILTER##_only_arg(fn, FILTER##_arr, FILTER, IN, &c, &a, 0)) != FI_OK) return st;         \
    if ((st = out_arg(fn, out, rt_tensor_dtype(IN), #IN, IN, &c, &a)) != FI_OK) return st;             \
    return launch(rt, &c, OP, out, stream);                                                            \
  }
SMP_FILTERS(SMP_DEFINE_FILTER)
