/* rt_decode.c: batch decode's entry points (fi_batch_decode_workspace_size, _plan, _run):
 * argument checks, the plan (its kernel and partition: rt_decode_choose.c) and its upload, the launch
 * (single decode: rt_decode_single.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decode_params.h"
#include "fi_admin.h"
#include "ops_decode.h"
#include "rt_decode.h"
#include "rt_decode_args.h"
#include "rt_decode_choose.h"
#include "rt_tune.h"
#include "rt_autotune.h"
#include "rt_check.h"
#include "rt_internal.h"
#include "rt_tensor.h"
#include "rt_prefill.h"
#include "rt_prefill_args.h"

static const char *const PLAN = "fi_batch_decode_plan";
static const char *const RUN = "fi_batch_decode_run";

struct fi_decode_plan {
  jit_key key;
  int devtype, device;
  int batch, max_batch, graph;
  int num_qo_heads, num_kv_heads, head_dim, page_size, q_dt, kv_dt;
  int64_t num_items, grid;
  int64_t nnz; /* indptr[batch]: the entries of indices the items read (the run's bound) */
  int split, chunk_pages;
  int kv_pair; /* 2: blocks of two adjacent KV heads when the cache's heads are adjacent */
  fi_attention_params params;
  char *ws;          /* workspace start (device address) */
  int64_t ws_bytes;
  rt_decode_layout lay;
  fi_decode_params scalars; /* the kernel's scale and RoPE fields */
  fi_prefill_plan *tc;      /* tensor-core decode (rt_decode_use_tc): the batch prefill plan
                               that runs it; NULL: the decode kernel's plan */
};

/* ---- batch decode: workspace, plan, run ---- */

FI_API fi_status fi_batch_decode_workspace_size(fi_runtime *rt, DLDevice device, int max_batch,
                                                int num_qo_heads, int num_kv_heads, int head_dim,
                                                size_t *bytes) {
  const char *fn = "fi_batch_decode_workspace_size";
  if (!rt || !bytes) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt or bytes is NULL", fn);
  if (max_batch < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: max_batch is %d; >= 0 is needed", fn, max_batch);
  if (num_kv_heads < 1 || num_qo_heads < 1 || num_qo_heads % num_kv_heads)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: num_qo_heads %d and num_kv_heads %d: a positive multiple is needed", fn,
                   num_qo_heads, num_kv_heads);
  if (num_qo_heads / num_kv_heads > RT_DECODE_MAX_GROUP) /* as the plan: no size for a layout it refuses */
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: num_qo_heads / num_kv_heads is %d; a group of 1..%d query heads per KV "
                   "head is supported",
                   fn, num_qo_heads / num_kv_heads, RT_DECODE_MAX_GROUP);
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: head_dim is %d; 64, 128 or 256 is supported", fn,
                   head_dim);
  /* A device no backend takes (the CPU, host or managed memory) is a bad argument, not a
   * missing driver: checked before any driver is asked. */
  if (rt_device_slot_for(device.device_type) < 0 || device.device_id < 0 || device.device_id >= RT_MAX_DEVICES)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: device is of type %d, ordinal %d; a CUDA (kDLCUDA) or ROCm (kDLROCM) device "
                   "is needed",
                   fn, (int)device.device_type, device.device_id);
  int sms;
  fi_status st = rt_dec_device_sms(rt, device.device_type, device.device_id, &sms);
  if (st != FI_OK) return st;
  rt_decode_layout l;
  rt_decode_ws_layout(&rt->env.tune, max_batch, sms, num_qo_heads,
                      num_kv_heads * rt_decode_group_chunks(num_qo_heads, num_kv_heads), head_dim, &l);
  if (l.bytes < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: max_batch %d with %d query heads of head_dim %d needs more than 2^63 bytes", fn,
                   max_batch, num_qo_heads, head_dim);
  int64_t need = l.bytes;
  if (rt_decode_tc_possible(&rt->env.tune, num_qo_heads / num_kv_heads)) {
    rt_prefill_layout pl;
    rt_prefill_layout_for(max_batch, max_batch, sms, num_qo_heads, num_kv_heads, head_dim, &pl);
    if (pl.bytes > need) need = pl.bytes;
  }
  *bytes = (size_t)need;
  return FI_OK;
}

FI_API void fi_batch_decode_plan_destroy(fi_decode_plan *plan) {
  if (!plan) return;
  fi_batch_prefill_plan_destroy(plan->tc);
  free(plan);
}

/* The checks of a plan's request that need no device: info (its host page tables
 * included) and the parameters. */
static fi_status check_info(const char *fn, const fi_batch_decode_info *info, const fi_attention_params *p) {
  fi_status st;
  char err[256];
  const int B = info->batch;
  if (B < 0) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->batch is %d; >= 0 is needed", fn, B);
  if (!info->indptr || (B > 0 && !info->last_page_len))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->indptr or info->last_page_len is NULL", fn);
  if (info->max_batch < 0 || (info->max_batch > 0 && B > info->max_batch))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: info->batch %d exceeds info->max_batch %d (CUDA-graph mode)", fn, B,
                   info->max_batch);
  const int qdt = rt_check_dtype(info->q_dtype), kvdt = rt_check_dtype(info->kv_dtype);
  if ((st = rt_dec_check_common(fn, info->num_qo_heads, info->num_kv_heads, info->head_dim, qdt, kvdt,
                         info->q_dtype, info->kv_dtype, p)) != FI_OK)
    return st;
  if (info->page_size < 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->page_size is %d; >= 1 is needed", fn,
                   info->page_size);
  if (rt_decode_check_pages(B, info->indptr, info->last_page_len, info->page_size, err, sizeof err))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->%s", fn, err);
  return FI_OK;
}

static fi_status refuse_replan(const char *fn) {
  return rt_fail(FI_ERR_INVALID_ARGUMENT,
                 "%s: a re-plan must keep the plan's heads, head_dim, page_size, dtypes, "
                 "parameters, max_batch and workspace (and in CUDA-graph mode the tuning "
                 "overrides, FI_DECODE_SPLIT included); make a new plan instead",
                 fn);
}

/* Whether a re-plan of pl asks for what its first plan fixed: heads, head_dim, page size,
 * dtypes, parameters, CUDA-graph mode and max_batch, workspace. */
static int replan_changes(const fi_decode_plan *pl, const fi_batch_decode_info *info, const fi_attention_params *p,
                          int qdt, int kvdt, const char *ws) {
  const int graph = info->max_batch > 0;
  return pl->graph != graph || (graph && pl->max_batch != info->max_batch) ||
         pl->num_qo_heads != info->num_qo_heads || pl->num_kv_heads != info->num_kv_heads ||
         pl->head_dim != info->head_dim || pl->page_size != info->page_size || pl->q_dt != qdt ||
         pl->kv_dt != kvdt || memcmp(&pl->params, p, sizeof *p) != 0 || pl->ws != ws;
}

/* The fields every plan (decode kernel or tensor-core route) takes from its request. */
static void fill_request(fi_decode_plan *pl, const fi_batch_decode_info *info, const fi_attention_params *p,
                         int qdt, int kvdt, char *ws, int64_t ws_bytes, int devtype, int device) {
  const int B = info->batch;
  pl->devtype = devtype;
  pl->device = device;
  pl->batch = B;
  pl->max_batch = info->max_batch;
  pl->graph = info->max_batch > 0;
  pl->num_qo_heads = info->num_qo_heads;
  pl->num_kv_heads = info->num_kv_heads;
  pl->head_dim = info->head_dim;
  pl->page_size = info->page_size;
  pl->q_dt = qdt;
  pl->kv_dt = kvdt;
  pl->params = *p;
  pl->ws = ws;
  pl->ws_bytes = ws_bytes;
  pl->nnz = B > 0 ? info->indptr[B] : 0;
}

/* The plan, for a device (rt != NULL: its tables uploaded on stream) or on the host alone
 * (rt NULL): the kernel and the partition from rt_decode_choose on dev under tuning t. */
static fi_status plan_impl(fi_runtime *rt, const char *fn, const fi_batch_decode_info *info,
                           const fi_attention_params *p, char *ws, int64_t ws_bytes, int devtype, int device,
                           const rt_tuning *t, const rt_decode_device *dev, void *stream, fi_decode_plan **plan,
                           int use_stored, const rt_decode_tactic *force) {
  fi_status st;
  const int B = info->batch, graph = info->max_batch > 0;
  const int qdt = rt_check_dtype(info->q_dtype), kvdt = rt_check_dtype(info->kv_dtype);
  fi_decode_plan *pl = *plan;
  const int fresh = pl == NULL;
  /* A re-plan keeps everything a captured graph baked in: what the request fixes first,
   * the kernel and the layout (CUDA-graph mode) once chosen. */
  if (!fresh && (pl->tc || replan_changes(pl, info, p, qdt, kvdt, ws))) return refuse_replan(fn);
  /* A device plan reads the stored tactic of its shape and bucket (once a key per runtime:
   * rt_tactic_cached); the rule chooses where there is none or it does not parse. */
  rt_decode_tactic tac;
  const rt_decode_tactic *stored = force;
  if (rt && use_stored && !force) {
    int64_t fields[RT_DECODE_TACTIC_FIELDS], bucket;
    const char *text;
    rt_decode_tactic_key(info, p, fields, &bucket);
    if (rt_tactic_plan(rt, "batch_decode", fields, RT_DECODE_TACTIC_FIELDS, bucket, devtype, device,
                       rt_decode_tactic_shape, stream, &text) &&
        rt_decode_tactic_parse(text, &tac) == 0)
      stored = &tac;
  }
  rt_decode_choice c;
  if ((st = rt_decode_choose(fn, info, p, ws_bytes, t, dev, stored, &c)) != FI_OK) return st;
  if (!fresh && graph &&
      (memcmp(pl->key.v, c.key.v, sizeof c.key.v) != 0 || memcmp(&pl->lay, &c.lay, sizeof c.lay) != 0)) {
    free(c.tab);
    return refuse_replan(fn);
  }
  if (fresh) {
    pl = calloc(1, sizeof *pl);
    if (!pl) {
      free(c.tab);
      return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
  }
  const int64_t n = c.num_items;
  pl->key = c.key;
  fill_request(pl, info, p, qdt, kvdt, ws, ws_bytes, devtype, device);
  pl->lay = c.lay;
  pl->num_items = n;
  pl->chunk_pages = c.chunk_pages;
  pl->kv_pair = c.kv_pair;
  pl->split = n > B;
  pl->grid = graph ? c.lay.capacity : n;
  memset(&pl->scalars, 0, sizeof pl->scalars);
  rt_dec_fill_scalars(&pl->scalars, p, info->head_dim, kvdt);
  pl->scalars.prefetch = rt_dec_prefetch_steps(t);
  pl->scalars.head_prefetch = rt_dec_head_prefetch(t);
  pl->scalars.pre_prefetch = rt_dec_pre_prefetch(t);
  pl->scalars.kv_evict = rt_dec_kv_evict(t);
  /* The header and items, then zero counters (the merging blocks reset theirs). */
  st = rt ? rt_upload_words(rt, devtype, device, (int32_t *)ws, c.tab, FI_DECODE_HDR_WORDS + n * FI_DECODE_ITEM_WORDS,
                            stream)
          : FI_OK;
  free(c.tab);
  if (rt && st == FI_OK && pl->split)
    st = rt_upload_words(rt, devtype, device, (int32_t *)(ws + c.lay.counters_off), NULL,
                         (int64_t)B * info->num_kv_heads * rt_decode_group_chunks(info->num_qo_heads, info->num_kv_heads),
                         stream);
  if (st != FI_OK) {
    if (fresh) free(pl);
    return st;
  }
  *plan = pl;
  return FI_OK;
}

/* The device's occupancy for rt_decode_choose: the kernel loaded (compiled if need be),
 * its residency asked of the driver. */
typedef struct device_ctx {
  fi_runtime *rt;
  const rt_device_i *be;
  int device;
} device_ctx;

static fi_status device_resident(void *ctx, const jit_key *key, int threads, int *blocks) {
  const device_ctx *d = ctx;
  rt_kernel *k;
  fi_status st = rt_kernel_get(d->rt, key, d->be, d->device, &k);
  return st != FI_OK ? st : rt_kernel_resident(d->rt, k, threads, blocks);
}

/* The tensor-core decode plan (rt_decode_use_tc): a paged batch prefill plan of one query
 * token a request (qo_indptr 0, 1, .., B; not causal: the token is the last of its
 * request), in CUDA-graph mode for max_batch tokens. The public call only: the tuner
 * measures the decode kernel's tactics (use_stored 0 or a forced tactic). */
static fi_status plan_tc(fi_runtime *rt, const fi_batch_decode_info *info, const fi_attention_params *p,
                         DLTensor *workspace, int64_t ws_bytes, void *stream, fi_decode_plan **plan) {
  const int B = info->batch;
  const int qdt = rt_check_dtype(info->q_dtype), kvdt = rt_check_dtype(info->kv_dtype);
  fi_decode_plan *pl = *plan;
  const int fresh = pl == NULL;
  if (!fresh && (!pl->tc || replan_changes(pl, info, p, qdt, kvdt, rt_data(workspace)))) return refuse_replan(PLAN);
  int32_t *qo = malloc(((size_t)B + 1) * sizeof *qo);
  if (!qo) return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", PLAN);
  for (int b = 0; b <= B; b++) qo[b] = b;
  fi_batch_prefill_info pi;
  memset(&pi, 0, sizeof pi);
  pi.batch = B;
  pi.qo_indptr = qo;
  pi.kv_indptr = info->indptr;
  pi.kv_last_page_len = info->last_page_len;
  pi.num_qo_heads = info->num_qo_heads;
  pi.num_kv_heads = info->num_kv_heads;
  pi.head_dim = info->head_dim;
  pi.page_size = info->page_size;
  pi.q_dtype = info->q_dtype;
  pi.kv_dtype = info->kv_dtype;
  pi.max_batch = info->max_batch;
  pi.max_qo_tokens = info->max_batch;
  fi_prefill_params pp;
  fi_prefill_params_init(&pp);
  pp.attn = *p;
  pp.causal = 0;
  fi_prefill_plan *tc = fresh ? NULL : pl->tc;
  /* Every request is one token: the group's rows. In CUDA-graph mode the prefill rule would
   * size the kernel for max_batch tokens' rows (a q tile of 128 rows for a group of 64):
   * the rule's kernel for one request's rows instead, as the plan's forced tactic. */
  rt_prefill_tactic one;
  const rt_prefill_tactic *force = NULL;
  if (pi.max_batch > 0) {
    jit_key k;
    rt_prefill_pick_kernel(rt, workspace->device.device_type, workspace->device.device_id, 0, qdt, kvdt,
                           info->head_dim, info->num_qo_heads / info->num_kv_heads, rt_prefill_kvsel(NULL, 1, 0),
                           p->pos_encoding == FI_POS_ROPE_LLAMA, p->logits_soft_cap != 0, 0, NULL, &k);
    rt_prefill_tactic_of_key(&k, &one);
    force = &one;
  }
  fi_status st = rt_prefill_plan_tactic(rt, &pi, &pp, 1, workspace, stream, &tc, force == NULL, force);
  free(qo);
  if (st != FI_OK) return st;
  if (fresh) {
    pl = calloc(1, sizeof *pl);
    if (!pl) {
      fi_batch_prefill_plan_destroy(tc);
      return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", PLAN);
    }
  }
  pl->tc = tc;
  fill_request(pl, info, p, qdt, kvdt, rt_data(workspace), ws_bytes, workspace->device.device_type,
               workspace->device.device_id);
  pl->key = *rt_prefill_plan_key(tc);
  *plan = pl;
  return FI_OK;
}

FI_API fi_status fi_batch_decode_plan(fi_runtime *rt, const fi_batch_decode_info *info,
                                      const fi_attention_params *p, DLTensor *workspace,
                                      void *stream, fi_decode_plan **plan) {
  return rt_decode_plan_tactic(rt, info, p, workspace, stream, plan, 1, NULL);
}

const jit_key *rt_decode_plan_key(const fi_decode_plan *pl) { return &pl->key; }

fi_status rt_decode_plan_tactic(fi_runtime *rt, const fi_batch_decode_info *info, const fi_attention_params *p,
                                DLTensor *workspace, void *stream, fi_decode_plan **plan, int use_stored,
                                const rt_decode_tactic *force) {
  const char *fn = PLAN;
  fi_status st;
  fi_attention_params defaults;
  if (!p) {
    fi_attention_params_init(&defaults);
    p = &defaults;
  }
  if (!rt || !info || !plan)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt, info or plan is NULL", fn);
  if ((st = check_info(fn, info, p)) != FI_OK) return st;
  int64_t ws_bytes;
  if ((st = rt_check_workspace(fn, workspace, &ws_bytes)) != FI_OK) return st;
  const int devtype = workspace->device.device_type, device = workspace->device.device_id;
  int sms;
  if ((st = rt_dec_device_sms(rt, devtype, device, &sms)) != FI_OK) return st;
  const int qdt = rt_check_dtype(info->q_dtype), kvdt = rt_check_dtype(info->kv_dtype);
  const int64_t units = (int64_t)(info->max_batch > 0 ? info->max_batch : info->batch) * info->num_kv_heads;
  const int tc = use_stored && !force &&
                 rt_decode_use_tc(&rt->env.tune, info->num_qo_heads / info->num_kv_heads, units, qdt, kvdt,
                                  p->pos_encoding == FI_POS_ROPE_LLAMA);
  /* A re-plan that changes the route (outside CUDA-graph mode: the batch crossed
   * RT_DECODE_TC_UNITS) builds a new plan of the other route and takes it over once made,
   * so that a failure leaves the plan as it was. */
  fi_decode_plan *cur = *plan, *np = NULL;
  const int swap = cur && ((cur->tc != NULL) != tc);
  if (swap && (cur->graph || replan_changes(cur, info, p, qdt, kvdt, rt_data(workspace)))) return refuse_replan(fn);
  fi_decode_plan **target = swap ? &np : plan;
  if (tc) {
    st = plan_tc(rt, info, p, workspace, ws_bytes, stream, target);
  } else {
    device_ctx ctx = {rt, NULL, device};
    void *state;
    if ((st = rt_backend(rt, devtype, &ctx.be, &state)) != FI_OK) return st;
    const rt_decode_device dev = {sms, device_resident, &ctx};
    st = plan_impl(rt, fn, info, p, rt_data(workspace), ws_bytes, devtype, device, &rt->env.tune, &dev, stream,
                   target, use_stored, force);
  }
  if (st == FI_OK && swap) {
    fi_batch_prefill_plan_destroy(cur->tc);
    *cur = *np;
    free(np);
  }
  return st;
}

fi_status rt_decode_plan_host(const rt_decode_device *dev, const rt_tuning *t, const fi_batch_decode_info *info,
                              const fi_attention_params *p, void *workspace, int devtype, fi_decode_plan **plan) {
  fi_status st = check_info(PLAN, info, p);
  return st != FI_OK ? st : plan_impl(NULL, PLAN, info, p, workspace, INT64_MAX, devtype, 0, t, dev, NULL, plan, 0, NULL);
}

FI_API fi_status fi_batch_decode_run(fi_runtime *rt, const fi_decode_plan *pl,
                                     const DLTensor *q, const DLTensor *kc, const DLTensor *vc,
                                     const DLTensor *indptr, const DLTensor *indices,
                                     const DLTensor *last_page_len, fi_kv_layout layout,
                                     DLTensor *out, DLTensor *lse, void *stream) {
  return fi_batch_decode_run_ex(rt, pl, q, kc, vc, indptr, indices, last_page_len, layout, out, lse, NULL, stream);
}

FI_API fi_status fi_batch_decode_run_ex(fi_runtime *rt, const fi_decode_plan *pl,
                                        const DLTensor *q, const DLTensor *kc, const DLTensor *vc,
                                        const DLTensor *indptr, const DLTensor *indices,
                                        const DLTensor *last_page_len, fi_kv_layout layout,
                                        DLTensor *out, DLTensor *lse, const fi_attention_extras *x,
                                        void *stream) {
  const char *fn = RUN;
  fi_status st;
  char b1[32], b2[32];
  if (!rt || !pl) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt or plan is NULL", fn);
  if ((st = rt_check_tensor(fn, "q", q, 3)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "paged_k_cache", kc, 4)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "paged_v_cache", vc, 4)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "out", out, 3)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "paged_k_cache", kc)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "paged_v_cache", vc)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "out", out)) != FI_OK) return st;
  if ((int)q->device.device_type != pl->devtype || q->device.device_id != pl->device)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q is on another device than the plan's workspace", fn);
  if (layout != FI_KV_LAYOUT_NHD && layout != FI_KV_LAYOUT_HND)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: layout is %d; FI_KV_LAYOUT_NHD (0) or FI_KV_LAYOUT_HND (1) is needed", fn,
                   (int)layout);
  if (rt_check_dtype(q->dtype) != pl->q_dt || rt_check_dtype(out->dtype) != pl->q_dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q has dtype %s and out %s; the plan's %s is needed",
                   fn, rt_check_dtype_string(q->dtype, b1, sizeof b1),
                   rt_check_dtype_string(out->dtype, b2, sizeof b2), jit_dtype_name(pl->q_dt));
  if (rt_check_dtype(kc->dtype) != pl->kv_dt || rt_check_dtype(vc->dtype) != pl->kv_dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: paged_k_cache has dtype %s and paged_v_cache %s; the plan's %s is needed",
                   fn, rt_check_dtype_string(kc->dtype, b1, sizeof b1),
                   rt_check_dtype_string(vc->dtype, b2, sizeof b2), jit_dtype_name(pl->kv_dt));
  const int64_t B = pl->batch, rows = pl->graph ? pl->max_batch : B;
  const int64_t hq = pl->num_qo_heads, hkv = pl->num_kv_heads, D = pl->head_dim;
  if (pl->graph ? q->shape[0] < rows : q->shape[0] != rows)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q has %lld rows; the plan needs %s%lld", fn,
                   (long long)q->shape[0], pl->graph ? "at least " : "", (long long)rows);
  if (q->shape[1] != hq || q->shape[2] != D)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: q has shape [%lld, %lld, %lld]; the plan's heads %lld and head_dim %lld are needed",
                   fn, (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2],
                   (long long)hq, (long long)D);
  if ((st = rt_check_shape(fn, "out", out, 3, q->shape, "q's shape")) != FI_OK) return st;
  if (lse) {
    const int64_t ls[2] = {q->shape[0], hq};
    if ((st = rt_check_lse(fn, lse, q, 2, ls)) != FI_OK) return st;
  }
  const int kvb = jit_dtype_bytes(pl->kv_dt), qb = jit_dtype_bytes(pl->q_dt);
  if ((st = rt_check_paged_cache(fn, kc, vc, layout == FI_KV_LAYOUT_NHD, pl->page_size, hkv, D, kvb)) != FI_OK)
    return st;
  if ((st = rt_check_rows(fn, "q", q, qb)) != FI_OK || (st = rt_check_rows(fn, "out", out, qb)) != FI_OK)
    return st;
  /* In CUDA-graph mode a replay after a re-plan reads the entries of its own batch, up to
   * max_batch, through the pointers checked here: so max_batch's sizes, as for q. */
  if ((st = rt_check_index(fn, "indptr", indptr, q, rows + 1, !pl->graph)) != FI_OK) return st;
  if ((st = rt_check_index(fn, "last_page_len", last_page_len, q, rows, !pl->graph)) != FI_OK) return st;
  /* The kernel reads indices up to indptr[B] - 1 unbounded (kernels/decode.cuh): the
   * plan's host indptr[B] is the length to check, as prefill's paged run checks its own. */
  if ((st = rt_check_index(fn, "indices", indices, q, pl->nnz, 0)) != FI_OK) return st;
  if (kc->shape[0] > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: paged_k_cache has 2^31 pages or more", fn);
  const DLTensor *ins[6] = {q, kc, vc, indptr, indices, last_page_len};
  static const char *const in_names[6] = {"q", "paged_k_cache", "paged_v_cache", "indptr", "indices", "last_page_len"};
  if ((st = rt_check_outputs_apart(fn, out, lse, ins, in_names, 6)) != FI_OK) return st;
  const float *sinks;
  const uint8_t *mask;
  if ((st = rt_check_extras(fn, x, q, "q", hq, RT_MASK_NONE, out, lse, &sinks, &mask)) != FI_OK) return st;
  /* The tensor-core route: the checks above cover the prefill run's (q, out and lse of the
   * plan's rows, the caches, indices to the plan's nnz, outputs apart, the extras). */
  if (pl->tc)
    return rt_prefill_paged_launch(rt, pl->tc, q, kc, vc, indices, layout, out, lse, sinks, rt_extras_lse_base2(x),
                                   stream);
  if (pl->grid == 0) return FI_OK;

  fi_decode_params kp = pl->scalars;
  kp.q = rt_data(q);
  kp.out = rt_data(out);
  kp.lse = lse ? (float *)rt_data(lse) : NULL;
  kp.lse_log2 = rt_extras_lse_base2(x);
  kp.sinks = sinks;
  kp.k = rt_data(kc);
  kp.v = rt_data(vc);
  kp.indptr = (const int32_t *)rt_data(indptr);
  kp.indices = (const int32_t *)rt_data(indices);
  kp.last_page_len = (const int32_t *)rt_data(last_page_len);
  kp.header = (const int32_t *)pl->ws;
  kp.items = (const int32_t *)(pl->ws + pl->lay.items_off);
  kp.counters = (int32_t *)(pl->ws + pl->lay.counters_off);
  kp.partial_o = pl->ws + pl->lay.partial_o_off;
  kp.partial_lse = (float *)(pl->ws + pl->lay.partial_lse_off);
  for (int d = 0; d < 2; d++) {
    kp.q_stride[d] = rt_stride(q, d);
    kp.out_stride[d] = rt_stride(out, d);
    kp.lse_stride[d] = lse ? rt_stride(lse, d) : 0;
  }
  kp.kv_stride_page = rt_stride(kc, 0);
  kp.kv_stride_slot = rt_stride(kc, layout == FI_KV_LAYOUT_NHD ? 1 : 2);
  kp.kv_stride_head = rt_stride(kc, layout == FI_KV_LAYOUT_NHD ? 2 : 1);
  kp.num_items = pl->graph ? -1 : (int32_t)pl->num_items;
  /* Groups above 16: grid heads of group / chunks rows, each reading KV head y / chunks. */
  const int chunks = rt_decode_group_chunks((int)hq, (int)hkv);
  kp.num_kv_heads = (int32_t)(hkv * chunks);
  kp.group = (int32_t)(hq / hkv / chunks);
  kp.kv_head_div = chunks;
  kp.page_size = pl->page_size;
  kp.num_pages = (int32_t)kc->shape[0];
  kp.nnz = indices->shape[0] > INT32_MAX ? INT32_MAX : (int32_t)indices->shape[0];
  /* Head pairs need the two heads' rows side by side (NHD; HND at page_size 1); else a
   * block a head, in the same plan. */
  kp.kv_heads_per_block = pl->kv_pair == RT_DECODE_KV_PAIR && kp.kv_stride_head == D ? RT_DECODE_KV_PAIR : 1;
  return rt_dec_launch(rt, pl->devtype, pl->device, &pl->key, (unsigned)pl->grid,
                       (unsigned)(kp.num_kv_heads / kp.kv_heads_per_block), 32u * (unsigned)pl->key.v[DECODE_P_WARPS],
                       &kp, sizeof kp, stream);
}

FI_API fi_status fi_admin_read_probe(fi_runtime *rt, const DLTensor *buf, int grid, void *stream) {
  const char *fn = "fi_admin_read_probe";
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_tensor(fn, "buf", buf, 1)) != FI_OK) return st;
  /* Checked: a wrapped product would pass for a small buffer and the probe read past it. */
  int64_t bytes;
  if (__builtin_mul_overflow(buf->shape[0], (int64_t)((buf->dtype.bits * buf->dtype.lanes + 7) / 8), &bytes))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: buf has %lld elements, more than 2^63 bytes", fn,
                   (long long)buf->shape[0]);
  if ((uintptr_t)rt_data(buf) % 16 || bytes % 16 || (buf->shape[0] > 1 && rt_stride(buf, 0) != 1))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: buf must be contiguous, 16-byte aligned and sized", fn);
  fi_read_probe_params p;
  memset(&p, 0, sizeof p);
  p.src = rt_data(buf);
  p.sink = (uint32_t *)rt_data(buf);
  p.n = bytes / 16;
  p.never = 0x9e3779b9u; /* written only if the xor of 1 GiB is exactly this */
  jit_key key;
  jit_read_probe_select(&key);
  const rt_device_i *be;
  void *state;
  if ((st = rt_backend(rt, buf->device.device_type, &be, &state)) != FI_OK) return st;
  rt_kernel *k;
  if ((st = rt_kernel_get(rt, &key, be, buf->device.device_id, &k)) != FI_OK) return st;
  if (grid <= 0 && (st = rt_kernel_resident(rt, k, READ_PROBE_THREADS, &grid)) != FI_OK) return st;
  rt_launch l = {{(unsigned)grid, 1, 1}, {READ_PROBE_THREADS, 1, 1}, 0};
  return rt_launch_kernel(rt, k, &l, stream, &p, sizeof p);
}
