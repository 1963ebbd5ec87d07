/* rt_prefill.c: batch prefill's entry points (fi_batch_prefill_*): argument checks, the plan
 * and its upload, the launches. fi-bench's tensor-core probes: rt_prefill_probe.c. Single prefill:
 * rt_prefill_single.c; the shared checks: rt_prefill_args.c; the kernel choice:
 * rt_prefill_choose.c. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_admin.h"
#include "ops_prefill.h"
#include "prefill_params.h"
#include "rt_decode.h"
#include "rt_decode_args.h"
#include "rt_check.h"
#include "rt_internal.h"
#include "rt_prefill.h"
#include "rt_prefill_args.h"
#include "rt_tensor.h"
#include "rt_tune.h"
#include "rt_autotune.h"

struct fi_prefill_plan {
  const uint8_t *mask; /* the custom mask (device) the runs read; NULL: none */
  jit_key key, merge_key;
  int devtype, device, paged, graph;
  int batch, max_batch, max_qo_tokens;
  int num_qo_heads, num_kv_heads, head_dim, page_size, dt, kv_dt, q_tile;
  int head_dim_vo;  /* V's and out's (extras->head_dim_vo; head_dim unless dvo) */
  int64_t num_items, grid, chunk, slots_used;
  int64_t pgrid;    /* > 0: the kernel's persistent grid (pgrid x 1 blocks over grid x heads units) */
  int64_t qo_rows;  /* qo_indptr[B]: rows q and out need */
  int64_t kv_rows;  /* ragged: kv_indptr[B] (rows of k and v); paged: entries of kv_indices */
  fi_prefill_params params;
  char *ws;
  int64_t ws_bytes;
  rt_prefill_layout lay;
  fi_prefill_kparams scalars;
  int32_t *tab;     /* host copy of the header and items */
};

FI_API void fi_prefill_params_init(fi_prefill_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  fi_attention_params_init(&p->attn);
  p->causal = 1;
}

/* ---- batch prefill: workspace, plan, run ---- */

FI_API fi_status fi_batch_prefill_workspace_size(fi_runtime *rt, DLDevice device, int max_batch,
                                                 int max_qo_tokens, int num_qo_heads,
                                                 int num_kv_heads, int head_dim, size_t *bytes) {
  const char *fn = "fi_batch_prefill_workspace_size";
  if (!rt || !bytes) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt or bytes is NULL", fn);
  if (max_batch < 0 || max_qo_tokens < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: max_batch %d and max_qo_tokens %d must be >= 0", fn,
                   max_batch, max_qo_tokens);
  if (num_kv_heads < 1 || num_qo_heads < 1 || num_qo_heads % num_kv_heads)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: num_qo_heads %d and num_kv_heads %d: a positive multiple is needed", fn,
                   num_qo_heads, num_kv_heads);
  if (head_dim != 64 && head_dim != 128 && head_dim != 256 && head_dim != 192)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: head_dim is %d; 64, 128, 256 (or 192 with V's 128) is supported",
                   fn, head_dim);
  int sms;
  fi_status st = rt_dec_device_sms(rt, device.device_type, device.device_id, &sms);
  if (st != FI_OK) return st;
  rt_prefill_layout l;
  rt_prefill_layout_for(max_batch, max_qo_tokens, sms, num_qo_heads, num_kv_heads, head_dim, &l);
  *bytes = (size_t)l.bytes;
  return FI_OK;
}

FI_API void fi_batch_prefill_plan_destroy(fi_prefill_plan *plan) {
  if (!plan) return;
  free(plan->tab);
  free(plan);
}

/* The plan, for a device (rt != NULL: tables uploaded on stream) or offline (rt NULL). */
/* A plan's custom mask: its device address and length in bytes (NULL: none). */
typedef struct plan_mask {
  const uint8_t *ptr;
  int64_t len;
} plan_mask;

/* The byte offset of each request's mask segment (segment_packbits' layout: each request's
 * [L_q][L_kv] bits padded to a whole byte) into off[B]; returns the bytes of them all. */
static int64_t mask_offsets(int B, const int32_t *qo_indptr, const int64_t *kv_len, int64_t *off) {
  int64_t total = 0;
  for (int b = 0; b < B; b++) {
    off[b] = total;
    total += (((int64_t)qo_indptr[b + 1] - qo_indptr[b]) * kv_len[b] + 7) / 8;
  }
  return total;
}

static fi_status plan_impl(fi_runtime *rt, const char *fn, const fi_batch_prefill_info *info,
                           const fi_prefill_params *p, int paged, char *ws, int64_t ws_bytes,
                           int devtype, int device, int sms, void *stream, fi_prefill_plan **plan, int use_stored,
                           const rt_prefill_tactic *force, const plan_mask *mask, int dv) {
  fi_status st;
  char err[256];
  const int B = info->batch;
  if (B < 0) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->batch is %d; >= 0 is needed", fn, B);
  if (!info->qo_indptr || !info->kv_indptr || (paged && B > 0 && !info->kv_last_page_len))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->qo_indptr, kv_indptr%s is NULL", fn,
                   paged ? " or kv_last_page_len" : "");
  if (info->max_batch < 0 || (info->max_batch > 0 && B > info->max_batch))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: info->batch %d exceeds info->max_batch %d (CUDA-graph mode)", fn, B, info->max_batch);
  const int graph = info->max_batch > 0;
  if (graph && info->max_qo_tokens < 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: info->max_qo_tokens is %d; >= 1 is needed with max_batch (CUDA-graph mode)",
                   fn, info->max_qo_tokens);
  const int dt = rt_check_dtype(info->q_dtype), kvdt = rt_check_dtype(info->kv_dtype);
  /* V's head_dim (extras->head_dim_vo) may differ: 192 / 128 over a ragged KV (the head dims
   * are checked as V's then) */
  const int DV = dv > 0 ? dv : info->head_dim, dvo = DV != info->head_dim && info->head_dim == 192 && DV == 128;
  if (dv < 0) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: extras->head_dim_vo is %d; 0 or more is needed", fn, dv);
  if ((st = rt_prefill_check_dvo_pair(fn, info->head_dim, DV, "extras->head_dim_vo")) != FI_OK) return st;
  if ((st = rt_prefill_check_common(fn, info->num_qo_heads, info->num_kv_heads, dvo ? DV : info->head_dim, dt, kvdt,
                         info->q_dtype, info->kv_dtype, p)) != FI_OK)
    return st;
  if ((st = rt_prefill_check_dvo(fn, info->head_dim, DV, "extras->head_dim_vo", dt, kvdt, p, mask != NULL)) != FI_OK)
    return st;
  if (DV != info->head_dim && paged)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: extras->head_dim_vo %d apart from head_dim %d is taken by the ragged plan only", fn, DV,
                   info->head_dim);
  if (paged && info->page_size < 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->page_size is %d; >= 1 is needed", fn, info->page_size);
  const int G = info->num_qo_heads / info->num_kv_heads, D = info->head_dim;
  if (paged && rt_decode_check_pages_named(B, info->kv_indptr, info->kv_last_page_len, info->page_size, "kv_", err,
                                           sizeof err))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->%s", fn, err);
  if (!paged && info->kv_indptr[0] < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->kv_indptr[0] is %d; offsets start at 0 or more",
                   fn, info->kv_indptr[0]);
  int64_t *kv_len = malloc(((size_t)B + 1) * sizeof *kv_len);
  if (!kv_len) return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  int64_t maxrows = 0, maxkv = 0;
  for (int b = 0; b < B; b++) {
    const int64_t np = (int64_t)info->kv_indptr[b + 1] - info->kv_indptr[b];
    if (!paged && np < 0) {
      free(kv_len);
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: info->kv_indptr is not monotone: kv_indptr[%d] = %d > kv_indptr[%d] = %d",
                     fn, b, info->kv_indptr[b], b + 1, info->kv_indptr[b + 1]);
    }
    kv_len[b] = paged ? (np > 0 ? (np - 1) * info->page_size + info->kv_last_page_len[b] : 0) : np;
    if (kv_len[b] > maxkv) maxkv = kv_len[b];
    const int64_t rows = ((int64_t)info->qo_indptr[b + 1] - info->qo_indptr[b]) * G;
    if (rows > maxrows) maxrows = rows;
  }
  if (rt_prefill_check_batch(B, info->qo_indptr, kv_len, p->causal, graph ? info->max_qo_tokens : 0, err,
                             sizeof err)) {
    free(kv_len);
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->%s", fn, err);
  }
  if (maxrows > INT32_MAX) {
    free(kv_len);
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: a request has 2^31 or more query tokens x group", fn);
  }
  int64_t *moff = NULL;
  if (mask) {
    moff = malloc(((size_t)B + 1) * sizeof *moff);
    if (!moff) {
      free(kv_len);
      return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    const int64_t need = mask_offsets(B, info->qo_indptr, kv_len, moff);
    if (need > mask->len || need > INT32_MAX) {
      free(moff);
      free(kv_len);
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: extras->custom_mask has %lld bytes; the batch's segments need %lld (each request's "
                     "ceil(L_q * L_kv / 8), in order)%s",
                     fn, (long long)mask->len, (long long)need, need > INT32_MAX ? ", at most 2^31 - 1" : "");
    }
  }
  const int64_t qo_total = B > 0 ? (int64_t)info->qo_indptr[B] - info->qo_indptr[0] : 0;
  if (sms < 0 && (st = rt_dec_device_sms(rt, devtype, device, &sms)) != FI_OK) {
    free(kv_len);
    free(moff);
    return st;
  }
  rt_prefill_layout lay;
  rt_prefill_layout_for(graph ? info->max_batch : B, graph ? info->max_qo_tokens : qo_total, sms,
                        info->num_qo_heads, info->num_kv_heads, D, &lay);
  if (lay.bytes > ws_bytes) {
    free(kv_len);
    free(moff);
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: workspace has %lld bytes; %lld are needed (fi_batch_prefill_workspace_size)",
                   fn, (long long)ws_bytes, (long long)lay.bytes);
  }
  fi_prefill_plan *pl = *plan;
  const int fresh = pl == NULL;
  const int64_t kvsel = rt_prefill_kvsel(fresh ? NULL : &pl->key, graph, maxkv);
  /* A device plan reads the stored tactic of its shape and bucket (the longest request's
   * query tokens; max_qo_tokens in CUDA-graph mode, so that a re-plan's bucket is its
   * plan's; once a key per runtime: rt_tactic_plan); the rule chooses where there is none,
   * it does not parse or it names no kernel this call can run, and for RoPE (the tuner
   * measures without it). A re-plan chooses as a fresh plan does: where that changes the
   * kernel it is refused below, as the rule's re-plans are. */
  const int rope = p->attn.pos_encoding == FI_POS_ROPE_LLAMA, soft_cap = p->attn.logits_soft_cap != 0;
  rt_prefill_tactic tac;
  const rt_prefill_tactic *stored = force;
  if (rt && use_stored && !force && !rope && kvdt == dt && DV == D) { /* (no tactics over an fp8 cache, dvo) */
    int64_t fields[RT_PREFILL_TACTIC_FIELDS];
    const char *text;
    rt_prefill_tactic_fields(dt, info->num_qo_heads, info->num_kv_heads, D, p->causal, soft_cap, fields);
    const int64_t bucket = fi_tune_bucket(graph ? info->max_qo_tokens : maxrows / G);
    if (rt_tactic_plan(rt, "batch_prefill", fields, RT_PREFILL_TACTIC_FIELDS, bucket, devtype, device,
                       rt_prefill_tactic_shape, stream, &text) &&
        rt_prefill_tactic_parse(text, &tac) == 0)
      stored = &tac;
  }
  jit_key key;
  int qt;
  const int64_t krows = graph ? (int64_t)info->max_qo_tokens * G : maxrows;
  if (DV != D) { /* the dvo kernel (mma.sync), the rule's q tile */
    jit_prefill_dvo_select(0, dt, D, DV, jit_prefill_q_tile(D, krows), &key);
    qt = jit_prefill_key_q_tile(&key);
  } else {
    qt = rt_prefill_pick_kernel(rt, devtype, device, 0, dt, kvdt, D, krows, kvsel, rope, soft_cap, mask != NULL, stored,
                                &key);
  }
  if (!fresh &&
      (pl->paged != paged || pl->graph != graph || (graph && (pl->max_batch != info->max_batch ||
                                                              pl->max_qo_tokens != info->max_qo_tokens)) ||
       pl->num_qo_heads != info->num_qo_heads || pl->num_kv_heads != info->num_kv_heads ||
       pl->head_dim != D || pl->head_dim_vo != DV || (paged && pl->page_size != info->page_size) || pl->dt != dt ||
       pl->kv_dt != kvdt ||
       memcmp(&pl->params, p, sizeof *p) != 0 || pl->ws != ws || memcmp(pl->key.v, key.v, sizeof key.v) != 0 ||
       (graph && pl->mask != (mask ? mask->ptr : NULL)))) {
    free(kv_len);
    free(moff);
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: a re-plan must keep the plan's kind, heads, head_dim, page_size, dtypes, "
                   "parameters, sizes, kernel (q and kv tiles, chosen by the longest request), "
                   "workspace and (CUDA-graph mode) custom mask tensor; make a new plan instead",
                   fn);
  }
  int64_t target = (int64_t)sms * RT_PREFILL_BLOCKS_PER_SM;
  /* FI_PREFILL_SPLIT scales the split target (tuning; 0 turns the split off). */
  const rt_tuning def = rt_tuning_default(), *tune = rt ? &rt->env.tune : &def;
  if (tune->prefill_split != 1.0) target = (int64_t)(target * tune->prefill_split + 0.5);
  int32_t *tab = malloc((size_t)(FI_PREFILL_HDR_WORDS + lay.capacity * FI_PREFILL_ITEM_WORDS) * 4);
  int32_t *kv_base = malloc(((size_t)B + 1) * 4);
  if (!tab || !kv_base) {
    free(tab);
    free(kv_base);
    free(kv_len);
    free(moff);
    return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  for (int b = 0; b < B; b++) kv_base[b] = info->kv_indptr[b];
  memset(tab, 0, FI_PREFILL_HDR_WORDS * 4);
  const rt_prefill_batch bt = {B, info->qo_indptr, kv_len, kv_base, G, info->num_kv_heads, qt,
                               jit_prefill_kv_tile(D), p->causal, p->attn.window_left};
  int64_t chunk = 0, slots = 0;
  const int64_t n = rt_prefill_partition(&bt, target, tab + FI_PREFILL_HDR_WORDS, lay.capacity,
                                         lay.slots, &chunk, &slots);
  free(kv_base);
  free(kv_len);
  /* each item's mask segment (word 11), from its request (word 0) */
  for (int64_t i = 0; moff && i < n; i++)
    tab[FI_PREFILL_HDR_WORDS + FI_PREFILL_ITEM_WORDS * i + 11] =
        (int32_t)moff[tab[FI_PREFILL_HDR_WORDS + FI_PREFILL_ITEM_WORDS * i]];
  free(moff);
  if (n < 0) {
    free(tab);
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the batch does not fit the plan's %lld work items",
                   fn, (long long)lay.capacity);
  }
  tab[0] = (int32_t)n;
  tab[1] = B;
  tab[2] = qt;
  tab[3] = (int32_t)(chunk > INT32_MAX ? INT32_MAX : chunk);
  /* the persistent grid's units from the counter (tab[4], tab[5]: 0), below */
  tab[6] = tune->prefill_persist != RT_PERSIST_FIXED;
  if (rt && (st = rt_upload_words(rt, devtype, device, (int32_t *)ws, tab,
                         FI_PREFILL_HDR_WORDS + n * FI_PREFILL_ITEM_WORDS, stream)) != FI_OK) {
    free(tab);
    return st;
  }
  if (fresh) {
    pl = calloc(1, sizeof *pl);
    if (!pl) {
      free(tab);
      return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
  }
  free(pl->tab);
  pl->tab = tab;
  pl->mask = mask ? mask->ptr : NULL;
  pl->key = key;
  jit_prefill_merge_select(dt, DV, &pl->merge_key);
  pl->devtype = devtype;
  pl->device = device;
  pl->paged = paged;
  pl->graph = graph;
  pl->batch = B;
  pl->max_batch = info->max_batch;
  pl->max_qo_tokens = info->max_qo_tokens;
  pl->num_qo_heads = info->num_qo_heads;
  pl->num_kv_heads = info->num_kv_heads;
  pl->head_dim = D;
  pl->head_dim_vo = DV;
  pl->page_size = paged ? info->page_size : 1;
  pl->dt = dt;
  pl->kv_dt = kvdt;
  pl->q_tile = qt;
  pl->num_items = n;
  pl->grid = graph ? lay.capacity : n;
  /* A persistent grid (one wave of blocks looping over the (item, KV head) units) where the
   * kernel has a producer: it loads the next unit's Q and first tiles while the consumers
   * finish this one, where a fresh block would start cold (short items: 64 x 1024 has 4.5
   * kv tiles an item). The blocks take units from a counter in the header (dynamic: with
   * a block's units fixed instead, items of unequal length left blocks idle: 64 x 1024
   * 32/32 fell from 221 to 200 TFLOP/s). FI_PREFILL_PERSIST=0 turns it off (tuning),
   * =s fixes each block's units (unit b + k x grid), =<n> caps the grid at n blocks
   * (tests: many units a block). */
  const int64_t bps = tune->prefill_persist == RT_PERSIST_OFF ? 0 : jit_prefill_persistent_blocks(&key);
  const int64_t units = pl->grid * info->num_kv_heads,
                cap = tune->prefill_persist == RT_PERSIST_CAP ? tune->prefill_persist_cap : (int64_t)sms * bps;
  pl->pgrid = bps > 0 && units > 0 ? (units < cap ? units : cap) : 0;
  pl->chunk = chunk;
  pl->slots_used = slots;
  pl->qo_rows = B > 0 ? info->qo_indptr[B] : 0;
  pl->kv_rows = B > 0 ? info->kv_indptr[B] : 0;
  pl->params = *p;
  pl->ws = ws;
  pl->ws_bytes = ws_bytes;
  pl->lay = lay;
  memset(&pl->scalars, 0, sizeof pl->scalars);
  rt_prefill_fill_scalars(&pl->scalars, p, D, kvdt);
  *plan = pl;
  return FI_OK;
}

static fi_status plan_entry(fi_runtime *rt, const char *fn, const fi_batch_prefill_info *info,
                            const fi_prefill_params *p, int paged, DLTensor *workspace, void *stream,
                            fi_prefill_plan **plan, int use_stored, const rt_prefill_tactic *force,
                            const fi_attention_extras *x) {
  fi_status st;
  fi_prefill_params defaults;
  if (!p) {
    fi_prefill_params_init(&defaults);
    p = &defaults;
  }
  if (!rt || !info || !plan) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt, info or plan is NULL", fn);
  int64_t ws_bytes;
  if ((st = rt_check_workspace(fn, workspace, &ws_bytes)) != FI_OK) return st;
  /* A plan takes the extras' custom mask (sinks go to the run). */
  const float *sinks;
  plan_mask pm = {NULL, 0};
  if ((st = rt_check_extras(fn, x, workspace, "workspace", -1, 0, NULL, NULL, &sinks, &pm.ptr)) != FI_OK) return st;
  if (pm.ptr) pm.len = x->custom_mask->shape[0];
  /* The SM count is looked up once the arguments are checked (sms -1). */
  return plan_impl(rt, fn, info, p, paged, rt_data(workspace), ws_bytes, workspace->device.device_type,
                   workspace->device.device_id, -1, stream, plan, use_stored, force, pm.ptr ? &pm : NULL,
                   rt_extras_head_dim_vo(x));
}

FI_API fi_status fi_batch_prefill_ragged_plan(fi_runtime *rt, const fi_batch_prefill_info *info,
                                              const fi_prefill_params *p, DLTensor *workspace,
                                              void *stream, fi_prefill_plan **plan) {
  return plan_entry(rt, "fi_batch_prefill_ragged_plan", info, p, 0, workspace, stream, plan, 1, NULL, NULL);
}

FI_API fi_status fi_batch_prefill_paged_plan(fi_runtime *rt, const fi_batch_prefill_info *info,
                                             const fi_prefill_params *p, DLTensor *workspace,
                                             void *stream, fi_prefill_plan **plan) {
  return plan_entry(rt, "fi_batch_prefill_paged_plan", info, p, 1, workspace, stream, plan, 1, NULL, NULL);
}

FI_API fi_status fi_batch_prefill_ragged_plan_ex(fi_runtime *rt, const fi_batch_prefill_info *info,
                                                 const fi_prefill_params *p, const fi_attention_extras *x,
                                                 DLTensor *workspace, void *stream, fi_prefill_plan **plan) {
  return plan_entry(rt, "fi_batch_prefill_ragged_plan", info, p, 0, workspace, stream, plan, 1, NULL, x);
}

FI_API fi_status fi_batch_prefill_paged_plan_ex(fi_runtime *rt, const fi_batch_prefill_info *info,
                                                const fi_prefill_params *p, const fi_attention_extras *x,
                                                DLTensor *workspace, void *stream, fi_prefill_plan **plan) {
  return plan_entry(rt, "fi_batch_prefill_paged_plan", info, p, 1, workspace, stream, plan, 1, NULL, x);
}

fi_status rt_prefill_plan_tactic(fi_runtime *rt, const fi_batch_prefill_info *info, const fi_prefill_params *p,
                                 int paged, DLTensor *workspace, void *stream, fi_prefill_plan **plan, int use_stored,
                                 const rt_prefill_tactic *force) {
  return plan_entry(rt, paged ? "fi_batch_prefill_paged_plan" : "fi_batch_prefill_ragged_plan", info, p, paged,
                    workspace, stream, plan, use_stored, force, NULL);
}

const jit_key *rt_prefill_plan_key(const fi_prefill_plan *pl) { return &pl->key; }

/* The checks both runs share (q, out, lse against the plan), then the launches. */
static fi_status run_common(fi_runtime *rt, const char *fn, const fi_prefill_plan *pl, int paged,
                            const DLTensor *q, DLTensor *out, DLTensor *lse) {
  fi_status st;
  char b1[32];
  if (!rt || !pl) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt or plan is NULL", fn);
  if (pl->paged != paged)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the plan is a %s plan", fn, pl->paged ? "paged" : "ragged");
  if ((st = rt_check_tensor(fn, "q", q, 3)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "out", out, 3)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "out", out)) != FI_OK) return st;
  if ((int)q->device.device_type != pl->devtype || q->device.device_id != pl->device)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q is on another device than the plan's workspace", fn);
  if (rt_check_dtype(q->dtype) != pl->dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q has dtype %s; the plan's %s is needed", fn,
                   rt_check_dtype_string(q->dtype, b1, sizeof b1), jit_dtype_name(pl->dt));
  if (q->shape[0] < pl->qo_rows || q->shape[1] != pl->num_qo_heads || q->shape[2] != pl->head_dim)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: q has shape [%lld, %lld, %lld]; at least %lld rows (qo_indptr[B]), the plan's "
                   "heads %d and head_dim %d are needed",
                   fn, (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2],
                   (long long)pl->qo_rows, pl->num_qo_heads, pl->head_dim);
  return rt_prefill_check_q_out(fn, q, out, lse, pl->dt, pl->head_dim_vo);
}

static fi_status run_launch(fi_runtime *rt, const fi_prefill_plan *pl, fi_prefill_kparams *kp,
                            const DLTensor *q, DLTensor *out, DLTensor *lse, void *stream) {
  kp->q = rt_data(q);
  kp->out = rt_data(out);
  kp->lse = lse ? (float *)rt_data(lse) : NULL;
  kp->header = (const int32_t *)pl->ws;
  kp->items = (const int32_t *)(pl->ws + pl->lay.items_off);
  kp->partial_o = (float *)(pl->ws + pl->lay.partial_o_off);
  kp->partial_lse = (float *)(pl->ws + pl->lay.partial_lse_off);
  kp->q_stride_tok = rt_stride(q, 0);
  kp->q_stride_head = rt_stride(q, 1);
  kp->out_stride_tok = rt_stride(out, 0);
  kp->out_stride_head = rt_stride(out, 1);
  kp->lse_stride_tok = lse ? rt_stride(lse, 0) : 0;
  kp->lse_stride_head = lse ? rt_stride(lse, 1) : 0;
  kp->num_items = pl->graph ? -1 : (int32_t)pl->num_items;
  kp->num_kv_heads = pl->num_kv_heads;
  kp->group = pl->num_qo_heads / pl->num_kv_heads;
  kp->split = pl->slots_used > 0;
  kp->custom_mask = pl->mask;
  if (pl->grid == 0) return FI_OK;
  fi_status st = rt_prefill_launch(rt, pl->devtype, pl->device, &pl->key, pl->pgrid > 0 ? pl->pgrid : pl->grid,
                        pl->pgrid > 0 ? 1 : pl->num_kv_heads, jit_prefill_threads(&pl->key), kp, sizeof *kp, stream);
  if (st != FI_OK || (!pl->graph && pl->slots_used == 0)) return st;
  fi_prefill_merge_params mp;
  memset(&mp, 0, sizeof mp);
  mp.out = kp->out;
  mp.lse = kp->lse;
  mp.header = kp->header;
  mp.items = kp->items;
  mp.partial_o = kp->partial_o;
  mp.partial_lse = kp->partial_lse;
  mp.out_stride_tok = kp->out_stride_tok;
  mp.out_stride_head = kp->out_stride_head;
  mp.lse_stride_tok = kp->lse_stride_tok;
  mp.lse_stride_head = kp->lse_stride_head;
  mp.num_items = kp->num_items;
  mp.num_kv_heads = kp->num_kv_heads;
  mp.group = kp->group;
  mp.q_tile = RT_PREFILL_SLOT_ROWS;
  mp.sinks = kp->sinks;
  mp.lse_log2 = kp->lse_log2;
  return rt_prefill_launch(rt, pl->devtype, pl->device, &pl->merge_key, pl->grid, pl->num_kv_heads,
                PREFILL_MERGE_THREADS, &mp, sizeof mp, stream);
}

FI_API fi_status fi_batch_prefill_ragged_run(fi_runtime *rt, const fi_prefill_plan *pl,
                                             const DLTensor *q, const DLTensor *k,
                                             const DLTensor *v, fi_kv_layout layout,
                                             DLTensor *out, DLTensor *lse, void *stream) {
  return fi_batch_prefill_ragged_run_ex(rt, pl, q, k, v, layout, out, lse, NULL, stream);
}

FI_API fi_status fi_batch_prefill_ragged_run_ex(fi_runtime *rt, const fi_prefill_plan *pl,
                                                const DLTensor *q, const DLTensor *k,
                                                const DLTensor *v, fi_kv_layout layout,
                                                DLTensor *out, DLTensor *lse,
                                                const fi_attention_extras *x, void *stream) {
  const char *fn = "fi_batch_prefill_ragged_run";
  fi_status st;
  char b1[32], b2[32];
  if ((st = run_common(rt, fn, pl, 0, q, out, lse)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "k", k, 3)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "v", v, 3)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "k", k)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "v", v)) != FI_OK) return st;
  if (layout != FI_KV_LAYOUT_NHD && layout != FI_KV_LAYOUT_HND)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: layout is %d; FI_KV_LAYOUT_NHD (0) or FI_KV_LAYOUT_HND (1) is needed", fn,
                   (int)layout);
  if (rt_check_dtype(k->dtype) != pl->kv_dt || rt_check_dtype(v->dtype) != pl->kv_dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: k has dtype %s and v %s; the plan's %s is needed", fn,
                   rt_check_dtype_string(k->dtype, b1, sizeof b1), rt_check_dtype_string(v->dtype, b2, sizeof b2),
                   jit_dtype_name(pl->kv_dt));
  const int nhd = layout == FI_KV_LAYOUT_NHD;
  const int64_t rows = nhd ? k->shape[0] : k->shape[1], hkv = nhd ? k->shape[1] : k->shape[0];
  if (hkv != pl->num_kv_heads || k->shape[2] != pl->head_dim || rows < pl->kv_rows)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: k has shape [%lld, %lld, %lld]; %s with at least %lld tokens (kv_indptr[B]), "
                   "the plan's %d KV heads and head_dim %d are needed",
                   fn, (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2],
                   nhd ? "[tokens, H_kv, head_dim] (NHD)" : "[H_kv, tokens, head_dim] (HND)",
                   (long long)pl->kv_rows, pl->num_kv_heads, pl->head_dim);
  const int64_t vs[3] = {k->shape[0], k->shape[1], pl->head_dim_vo};
  if ((st = rt_check_shape(fn, "v", v, 3, vs, pl->head_dim_vo == pl->head_dim ? "k's shape" : "k's, head_dim_vo last")) !=
      FI_OK)
    return st;
  if ((st = rt_prefill_check_kv_rows(fn, k, v, jit_dtype_bytes(pl->kv_dt), pl->head_dim_vo != pl->head_dim)) != FI_OK)
    return st;
  const DLTensor *ins[3] = {q, k, v};
  static const char *const in_names[3] = {"q", "k", "v"};
  if ((st = rt_check_outputs_apart(fn, out, lse, ins, in_names, 3)) != FI_OK) return st;
  fi_prefill_kparams kp = pl->scalars;
  const uint8_t *run_mask; /* (refused: a batch's mask comes with its plan) */
  if ((st = rt_check_extras(fn, x, q, "q", pl->num_qo_heads, RT_MASK_AT_PLAN, out, lse, &kp.sinks, &run_mask)) !=
      FI_OK)
    return st;
  kp.k = rt_data(k);
  kp.v = rt_data(v);
  kp.indices = NULL;
  kp.kv_stride_slot = rt_stride(k, nhd ? 0 : 1);
  kp.kv_stride_head = rt_stride(k, nhd ? 1 : 0);
  kp.v_stride_slot = rt_stride(v, nhd ? 0 : 1);
  kp.v_stride_head = rt_stride(v, nhd ? 1 : 0);
  kp.page_size = 1;
  kp.lse_log2 = rt_extras_lse_base2(x);
  return run_launch(rt, pl, &kp, q, out, lse, stream);
}

FI_API fi_status fi_batch_prefill_paged_run(fi_runtime *rt, const fi_prefill_plan *pl,
                                            const DLTensor *q, const DLTensor *kc,
                                            const DLTensor *vc, const DLTensor *kv_indices,
                                            fi_kv_layout layout, DLTensor *out, DLTensor *lse,
                                            void *stream) {
  return fi_batch_prefill_paged_run_ex(rt, pl, q, kc, vc, kv_indices, layout, out, lse, NULL, stream);
}

FI_API fi_status fi_batch_prefill_paged_run_ex(fi_runtime *rt, const fi_prefill_plan *pl,
                                               const DLTensor *q, const DLTensor *kc,
                                               const DLTensor *vc, const DLTensor *kv_indices,
                                               fi_kv_layout layout, DLTensor *out, DLTensor *lse,
                                               const fi_attention_extras *x, void *stream) {
  const char *fn = "fi_batch_prefill_paged_run";
  fi_status st;
  char b1[32], b2[32];
  if ((st = run_common(rt, fn, pl, 1, q, out, lse)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "paged_k_cache", kc, 4)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "paged_v_cache", vc, 4)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "paged_k_cache", kc)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q", q, "paged_v_cache", vc)) != FI_OK) return st;
  if (layout != FI_KV_LAYOUT_NHD && layout != FI_KV_LAYOUT_HND)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: layout is %d; FI_KV_LAYOUT_NHD (0) or FI_KV_LAYOUT_HND (1) is needed", fn,
                   (int)layout);
  if (rt_check_dtype(kc->dtype) != pl->kv_dt || rt_check_dtype(vc->dtype) != pl->kv_dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: paged_k_cache has dtype %s and paged_v_cache %s; the plan's %s is needed", fn,
                   rt_check_dtype_string(kc->dtype, b1, sizeof b1), rt_check_dtype_string(vc->dtype, b2, sizeof b2),
                   jit_dtype_name(pl->kv_dt));
  const int nhd = layout == FI_KV_LAYOUT_NHD;
  const int64_t hkv = pl->num_kv_heads;
  if ((st = rt_check_paged_cache(fn, kc, vc, nhd, pl->page_size, hkv, pl->head_dim, jit_dtype_bytes(pl->kv_dt))) !=
      FI_OK)
    return st;
  if ((st = rt_check_index(fn, "kv_indices", kv_indices, q, pl->kv_rows, 0)) != FI_OK) return st;
  if (kc->shape[0] > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: paged_k_cache has 2^31 pages or more", fn);
  const DLTensor *ins[4] = {q, kc, vc, kv_indices};
  static const char *const in_names[4] = {"q", "paged_k_cache", "paged_v_cache", "kv_indices"};
  if ((st = rt_check_outputs_apart(fn, out, lse, ins, in_names, 4)) != FI_OK) return st;
  const float *sinks;
  const uint8_t *run_mask; /* (refused: a batch's mask comes with its plan) */
  if ((st = rt_check_extras(fn, x, q, "q", pl->num_qo_heads, RT_MASK_AT_PLAN, out, lse, &sinks, &run_mask)) != FI_OK)
    return st;
  return rt_prefill_paged_launch(rt, pl, q, kc, vc, kv_indices, layout, out, lse, sinks, rt_extras_lse_base2(x),
                                 stream);
}

fi_status rt_prefill_paged_launch(fi_runtime *rt, const fi_prefill_plan *pl, const DLTensor *q, const DLTensor *kc,
                                  const DLTensor *vc, const DLTensor *kv_indices, fi_kv_layout layout, DLTensor *out,
                                  DLTensor *lse, const float *sinks, int lse_base2, void *stream) {
  const int nhd = layout == FI_KV_LAYOUT_NHD;
  fi_prefill_kparams kp = pl->scalars;
  kp.sinks = sinks;
  kp.lse_log2 = lse_base2;
  kp.k = rt_data(kc);
  kp.v = rt_data(vc);
  kp.indices = (const int32_t *)rt_data(kv_indices);
  kp.kv_stride_page = rt_stride(kc, 0);
  kp.kv_stride_slot = rt_stride(kc, nhd ? 1 : 2);
  kp.kv_stride_head = rt_stride(kc, nhd ? 2 : 1);
  kp.page_size = pl->page_size;
  return run_launch(rt, pl, &kp, q, out, lse, stream);
}

int rt_prefill_plan_offline(const fi_batch_prefill_info *info, const fi_prefill_params *p, int paged,
                            void *workspace, int devtype, int sms, fi_prefill_plan **plan) {
  return rt_prefill_plan_offline_tactic(info, p, paged, workspace, devtype, sms, plan, NULL);
}

int rt_prefill_plan_offline_mask(const fi_batch_prefill_info *info, const fi_prefill_params *p, int paged,
                                 void *workspace, int devtype, int sms, int64_t mask_len, fi_prefill_plan **plan) {
  static const uint8_t bits[1]; /* a mask address no offline plan reads */
  const plan_mask pm = {bits, mask_len};
  return plan_impl(NULL, paged ? "fi_batch_prefill_paged_plan" : "fi_batch_prefill_ragged_plan", info, p, paged,
                   workspace, INT64_MAX, devtype, 0, sms, NULL, plan, 0, NULL, &pm, 0) == FI_OK
             ? 0
             : -1;
}

int rt_prefill_plan_offline_tactic(const fi_batch_prefill_info *info, const fi_prefill_params *p, int paged,
                                   void *workspace, int devtype, int sms, fi_prefill_plan **plan,
                                   const rt_prefill_tactic *force) {
  return plan_impl(NULL, paged ? "fi_batch_prefill_paged_plan" : "fi_batch_prefill_ragged_plan", info, p,
                   paged, workspace, INT64_MAX, devtype, 0, sms, NULL, plan, 0, force, NULL, 0) == FI_OK
             ? 0
             : -1;
}

int rt_prefill_plan_offline_dvo(const fi_batch_prefill_info *info, const fi_prefill_params *p, void *workspace,
                                int devtype, int sms, int head_dim_vo, fi_prefill_plan **plan) {
  return plan_impl(NULL, "fi_batch_prefill_ragged_plan", info, p, 0, workspace, INT64_MAX, devtype, 0, sms, NULL, plan,
                   0, NULL, NULL, head_dim_vo) == FI_OK
             ? 0
             : -1;
}

const int32_t *rt_prefill_plan_items(const fi_prefill_plan *pl, int64_t *n) {
  *n = pl->num_items;
  return pl->tab + FI_PREFILL_HDR_WORDS;
}
