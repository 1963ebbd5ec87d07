/* fi_tvm_attn.c: TVM-FFI exports of decode, prefill and MLA attention: single-request calls,
 * and batch plan / run / destroy with plans as int handles (ft_plan_add). Host index
 * arrays come as CPU int32 tensors, read by the plan only. */
#include "fi_tvm.h"

/* fi_attention_params from the 8 arguments from i on (FT_ATTN_SIG). */
static void attn_params(ft_call *c, int i, fi_attention_params *p) {
  fi_attention_params_init(p);
  p->sm_scale = ft_float(c, i);
  p->logits_soft_cap = ft_float(c, i + 1);
  p->window_left = (int)ft_int(c, i + 2);
  p->pos_encoding = (fi_pos_encoding)ft_pos_encoding(c, i + 3);
  p->rope_scale = ft_float(c, i + 4);
  p->rope_theta = ft_float(c, i + 5);
  p->k_scale = ft_float(c, i + 6);
  p->v_scale = ft_float(c, i + 7);
}

/* fi_attention_extras from the optional sinks tensor at argument i and the optional
 * lse_base2 after it (NULL when both are absent: the call passes no extras). */
static const fi_attention_extras *extras_of(ft_call *c, int i, fi_attention_extras *x) {
  fi_attention_extras_init(x);
  x->sinks = ft_tensor_opt(c, i);
  x->lse_base2 = ft_int_opt(c, i + 1, 0) != 0;
  return x->sinks || x->lse_base2 ? x : NULL;
}

/* The number of requests a host indptr argument describes (its length - 1). */
static int batch_of(ft_call *c, int i) {
  DLTensor *t = ft_tensor(c, i);
  if (!t) return 0;
  if (t->ndim != 1 || t->shape[0] < 1 || t->shape[0] > (1 << 30))
    return ft_fail(c, i, "ValueError", "must be 1-D with batch + 1 entries"), 0;
  return (int)(t->shape[0] - 1);
}

static DLDevice device_of(ft_call *c, int i) {
  DLDevice d = {(DLDeviceType)ft_int(c, i), (int32_t)ft_int(c, i + 1)};
  return d;
}

/* Returns a plan handle: the existing one after a re-plan, a new one otherwise. */
static int ret_plan(ft_call *c, fi_status st, void *plan, int64_t old, int kind,
                    void (*destroy)(void *)) {
  if (ft_status(c, st) != 0) return -1;
  if (old) return ft_ret_int(c, old);
  int64_t h = ft_plan_add(plan, kind);
  if (!h) {
    destroy(plan);
    return ft_fail(c, -1, "MemoryError", "out of memory recording the plan");
  }
  return ft_ret_int(c, h);
}

static void decode_destroy(void *p) { fi_batch_decode_plan_destroy(p); }
static void prefill_destroy(void *p) { fi_batch_prefill_plan_destroy(p); }

/* The plan_destroy exports: argument 0, a live plan of kind, forgotten and destroyed. */
static int destroy_plan(ft_call *c, int kind, void (*destroy)(void *)) {
  void *plan = ft_plan_take(c, 0, kind);
  if (c->failed) return -1;
  destroy(plan);
  return 0;
}

/* ---- decode ---- */

FT_EXPORT(single_decode) {
  DLTensor *q = ft_tensor(c, 0), *k = ft_tensor(c, 1), *v = ft_tensor(c, 2),
           *out = ft_tensor(c, 3), *lse = ft_tensor_opt(c, 4);
  fi_kv_layout layout = ft_layout(c, 5);
  fi_attention_params p;
  attn_params(c, 6, &p);
  fi_attention_extras xs;
  const fi_attention_extras *x = extras_of(c, 14, &xs);
#define FT_RUN_ARGS q, k, v, out, lse, layout, &p, x
  FT_RUN(fi_single_decode_ex);
#undef FT_RUN_ARGS
}

FT_EXPORT(batch_decode_workspace_size) {
  DLDevice dev = device_of(c, 0);
  int mb = (int)ft_int(c, 2), hq = (int)ft_int(c, 3), hk = (int)ft_int(c, 4),
      d = (int)ft_int(c, 5);
#define FT_RUN_ARGS dev, mb, hq, hk, d
  FT_RUN_SIZE(fi_batch_decode_workspace_size);
#undef FT_RUN_ARGS
}

FT_EXPORT(batch_decode_plan) {
  fi_batch_decode_info in = {0};
  DLTensor *ws = ft_tensor(c, 0);
  in.batch = batch_of(c, 1);
  in.indptr = ft_host_i32(c, 1, (int64_t)in.batch + 1);
  in.last_page_len = ft_host_i32(c, 2, in.batch);
  in.num_qo_heads = (int)ft_int(c, 3);
  in.num_kv_heads = (int)ft_int(c, 4);
  in.head_dim = (int)ft_int(c, 5);
  in.page_size = (int)ft_int(c, 6);
  in.q_dtype = ft_dtype(c, 7);
  in.kv_dtype = ft_dtype(c, 8);
  in.max_batch = (int)ft_int(c, 9);
  fi_attention_params p;
  attn_params(c, 10, &p);
  int64_t old = ft_int(c, 18);
  fi_decode_plan *plan = old ? ft_plan_get(c, 18, FT_PLAN_DECODE) : NULL;
  if (c->failed) return -1;
  fi_runtime *rt = ft_rt(c);
  if (!rt) return -1;
  fi_status st = fi_batch_decode_plan(rt, &in, &p, ws, ft_stream(c), &plan);
  return ret_plan(c, st, plan, old, FT_PLAN_DECODE, decode_destroy);
}

FT_EXPORT(batch_decode_run) {
  const fi_decode_plan *plan = ft_plan_get(c, 0, FT_PLAN_DECODE);
  DLTensor *q = ft_tensor(c, 1), *kc = ft_tensor(c, 2), *vc = ft_tensor(c, 3),
           *indptr = ft_tensor(c, 4), *idx = ft_tensor(c, 5), *last = ft_tensor(c, 6),
           *out = ft_tensor(c, 8), *lse = ft_tensor_opt(c, 9);
  fi_kv_layout layout = ft_layout(c, 7);
  fi_attention_extras xs;
  const fi_attention_extras *x = extras_of(c, 10, &xs);
#define FT_RUN_ARGS plan, q, kc, vc, indptr, idx, last, layout, out, lse, x
  FT_RUN(fi_batch_decode_run_ex);
#undef FT_RUN_ARGS
}

FT_EXPORT(batch_decode_plan_destroy) { return destroy_plan(c, FT_PLAN_DECODE, decode_destroy); }

/* ---- prefill ---- */

FT_EXPORT(single_prefill) {
  DLTensor *q = ft_tensor(c, 0), *k = ft_tensor(c, 1), *v = ft_tensor(c, 2),
           *out = ft_tensor(c, 3), *lse = ft_tensor_opt(c, 4);
  fi_kv_layout layout = ft_layout(c, 5);
  fi_prefill_params p;
  fi_prefill_params_init(&p);
  attn_params(c, 6, &p.attn);
  p.causal = (int)ft_int(c, 14);
  fi_attention_extras xs;
  const fi_attention_extras *x = extras_of(c, 15, &xs);
#define FT_RUN_ARGS q, k, v, out, lse, layout, &p, x
  FT_RUN(fi_single_prefill_ex);
#undef FT_RUN_ARGS
}

FT_EXPORT(batch_prefill_workspace_size) {
  DLDevice dev = device_of(c, 0);
  int mb = (int)ft_int(c, 2), mq = (int)ft_int(c, 3), hq = (int)ft_int(c, 4),
      hk = (int)ft_int(c, 5), d = (int)ft_int(c, 6);
#define FT_RUN_ARGS dev, mb, mq, hq, hk, d
  FT_RUN_SIZE(fi_batch_prefill_workspace_size);
#undef FT_RUN_ARGS
}

/* The shared tail of both prefill plans: heads..plan from argument i on (the paged plan
 * has page_size after head_dim: paged = 1). */
static int prefill_plan(ft_call *c, DLTensor *ws, fi_batch_prefill_info *in, int i, int paged) {
  in->num_qo_heads = (int)ft_int(c, i);
  in->num_kv_heads = (int)ft_int(c, i + 1);
  in->head_dim = (int)ft_int(c, i + 2);
  i += 3;
  if (paged) in->page_size = (int)ft_int(c, i++);
  in->q_dtype = ft_dtype(c, i);
  in->kv_dtype = ft_dtype(c, i + 1);
  in->max_batch = (int)ft_int(c, i + 2);
  in->max_qo_tokens = (int)ft_int(c, i + 3);
  fi_prefill_params p;
  fi_prefill_params_init(&p);
  attn_params(c, i + 4, &p.attn);
  p.causal = (int)ft_int(c, i + 12);
  int64_t old = ft_int(c, i + 13);
  fi_prefill_plan *plan = old ? ft_plan_get(c, i + 13, FT_PLAN_PREFILL) : NULL;
  /* the optional packed custom mask after plan (fi_attention_extras.custom_mask) */
  fi_attention_extras x;
  fi_attention_extras_init(&x);
  x.custom_mask = ft_tensor_opt(c, i + 14);
  /* the ragged plan's optional head_dim_vo after the mask (0 or None: head_dim) */
  if (!paged) x.head_dim_vo = (int)ft_int_opt(c, i + 15, 0);
  if (c->failed) return -1;
  fi_runtime *rt = ft_rt(c);
  if (!rt) return -1;
  fi_status st = paged ? fi_batch_prefill_paged_plan_ex(rt, in, &p, &x, ws, ft_stream(c), &plan)
                       : fi_batch_prefill_ragged_plan_ex(rt, in, &p, &x, ws, ft_stream(c), &plan);
  return ret_plan(c, st, plan, old, FT_PLAN_PREFILL, prefill_destroy);
}

FT_EXPORT(batch_prefill_ragged_plan) {
  fi_batch_prefill_info in = {0};
  DLTensor *ws = ft_tensor(c, 0);
  in.batch = batch_of(c, 1);
  in.qo_indptr = ft_host_i32(c, 1, (int64_t)in.batch + 1);
  in.kv_indptr = ft_host_i32(c, 2, (int64_t)in.batch + 1);
  return prefill_plan(c, ws, &in, 3, 0);
}

FT_EXPORT(batch_prefill_paged_plan) {
  fi_batch_prefill_info in = {0};
  DLTensor *ws = ft_tensor(c, 0);
  in.batch = batch_of(c, 1);
  in.qo_indptr = ft_host_i32(c, 1, (int64_t)in.batch + 1);
  in.kv_indptr = ft_host_i32(c, 2, (int64_t)in.batch + 1);
  in.kv_last_page_len = ft_host_i32(c, 3, in.batch);
  return prefill_plan(c, ws, &in, 4, 1);
}

FT_EXPORT(batch_prefill_ragged_run) {
  const fi_prefill_plan *plan = ft_plan_get(c, 0, FT_PLAN_PREFILL);
  DLTensor *q = ft_tensor(c, 1), *k = ft_tensor(c, 2), *v = ft_tensor(c, 3),
           *out = ft_tensor(c, 5), *lse = ft_tensor_opt(c, 6);
  fi_kv_layout layout = ft_layout(c, 4);
  fi_attention_extras xs;
  const fi_attention_extras *x = extras_of(c, 7, &xs);
#define FT_RUN_ARGS plan, q, k, v, layout, out, lse, x
  FT_RUN(fi_batch_prefill_ragged_run_ex);
#undef FT_RUN_ARGS
}

FT_EXPORT(batch_prefill_paged_run) {
  const fi_prefill_plan *plan = ft_plan_get(c, 0, FT_PLAN_PREFILL);
  DLTensor *q = ft_tensor(c, 1), *kc = ft_tensor(c, 2), *vc = ft_tensor(c, 3),
           *idx = ft_tensor(c, 4), *out = ft_tensor(c, 6), *lse = ft_tensor_opt(c, 7);
  fi_kv_layout layout = ft_layout(c, 5);
  fi_attention_extras xs;
  const fi_attention_extras *x = extras_of(c, 8, &xs);
#define FT_RUN_ARGS plan, q, kc, vc, idx, layout, out, lse, x
  FT_RUN(fi_batch_prefill_paged_run_ex);
#undef FT_RUN_ARGS
}

FT_EXPORT(batch_prefill_plan_destroy) { return destroy_plan(c, FT_PLAN_PREFILL, prefill_destroy); }

/* ---- multi-head latent attention ---- */

static void mla_destroy(void *p) { fi_batch_mla_plan_destroy(p); }

FT_EXPORT(batch_mla_workspace_size) {
  DLDevice dev = device_of(c, 0);
  int mb = (int)ft_int(c, 2), mq = (int)ft_int(c, 3), h = (int)ft_int(c, 4);
#define FT_RUN_ARGS dev, mb, mq, h
  FT_RUN_SIZE(fi_batch_mla_workspace_size);
#undef FT_RUN_ARGS
}

FT_EXPORT(batch_mla_paged_plan) {
  fi_batch_mla_info in = {0};
  DLTensor *ws = ft_tensor(c, 0);
  in.batch = batch_of(c, 1);
  in.qo_indptr = ft_host_i32(c, 1, (int64_t)in.batch + 1);
  in.kv_indptr = ft_host_i32(c, 2, (int64_t)in.batch + 1);
  in.kv_len = ft_host_i32(c, 3, in.batch);
  in.num_heads = (int)ft_int(c, 4);
  in.head_dim_ckv = (int)ft_int(c, 5);
  in.head_dim_kpe = (int)ft_int(c, 6);
  in.page_size = (int)ft_int(c, 7);
  in.causal = (int)ft_int(c, 8);
  in.sm_scale = (float)ft_float(c, 9);
  in.q_dtype = ft_dtype(c, 10);
  in.kv_dtype = ft_dtype(c, 11);
  in.max_batch = (int)ft_int(c, 12);
  in.max_qo_tokens = (int)ft_int(c, 13);
  const int64_t old = ft_int(c, 14);
  fi_mla_plan *plan = old ? ft_plan_get(c, 14, FT_PLAN_MLA) : NULL;
  if (c->failed) return -1;
  fi_runtime *rt = ft_rt(c);
  if (!rt) return -1;
  const fi_status st = fi_batch_mla_paged_plan(rt, &in, ws, ft_stream(c), &plan);
  return ret_plan(c, st, plan, old, FT_PLAN_MLA, mla_destroy);
}

FT_EXPORT(batch_mla_paged_run) {
  const fi_mla_plan *plan = ft_plan_get(c, 0, FT_PLAN_MLA);
  DLTensor *qn = ft_tensor(c, 1), *qp = ft_tensor(c, 2), *ckv = ft_tensor(c, 3), *kpe = ft_tensor(c, 4),
           *idx = ft_tensor(c, 5), *out = ft_tensor(c, 6), *lse = ft_tensor_opt(c, 7);
#define FT_RUN_ARGS plan, qn, qp, ckv, kpe, idx, out, lse
  FT_RUN(fi_batch_mla_paged_run);
#undef FT_RUN_ARGS
}

FT_EXPORT(batch_mla_plan_destroy) { return destroy_plan(c, FT_PLAN_MLA, mla_destroy); }

FT_EXPORT(append_paged_mla_kv_cache) {
  DLTensor *ack = ft_tensor(c, 0), *akp = ft_tensor(c, 1), *bi = ft_tensor(c, 2), *pos = ft_tensor(c, 3),
           *ckv = ft_tensor(c, 4), *kpe = ft_tensor(c, 5), *idx = ft_tensor(c, 6), *indptr = ft_tensor(c, 7),
           *last = ft_tensor(c, 8);
#define FT_RUN_ARGS ack, akp, bi, pos, ckv, kpe, idx, indptr, last
  FT_RUN(fi_append_paged_mla_kv_cache);
#undef FT_RUN_ARGS
}
