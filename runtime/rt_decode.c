/* rt_decode.c: batch decode's entry points (fi_batch_decode_workspace_size, _plan, _run):
 * argument checks, kernel choice, the plan's upload and the launch (single decode: rt_decode_single.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_params.h"
#include "fi_admin.h"
#include "ops_decode.h"
#include "rt_decode.h"
#include "rt_decode_args.h"
#include "rt_internal.h"
#include "rt_tensor.h"

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
};

FI_API void fi_attention_params_init(fi_attention_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->sm_scale = 0.0;
  p->logits_soft_cap = 0.0;
  p->window_left = -1;
  p->pos_encoding = FI_POS_NONE;
  p->rope_scale = 1.0;
  p->rope_theta = 1e4;
  p->k_scale = 1.0;
  p->v_scale = 1.0;
}

/* ---- batch decode: workspace, plan, run ---- */

/* The workspace's layout for plans of up to max_batch requests: items for one wave of
 * blocks or max_batch, and for FI_DECODE_SPLIT's scaled target above 1 (tuning: so that
 * the knob can cut requests into more chunks than a wave). */
static void ws_layout(const rt_tuning *t, int64_t max_batch, int sms, int num_qo_heads, int num_kv_heads,
                      int head_dim, rt_decode_layout *l) {
  const double scale = rt_dec_split_scale(t);
  int64_t items = max_batch;
  if (scale > 1) {
    const int64_t want = (int64_t)(rt_decode_target_items((int64_t)sms * RT_DECODE_MAX_BLOCKS_PER_SM,
                                                          num_kv_heads) * scale + 0.5);
    if (want > items) items = want;
  }
  rt_decode_layout_for(items, sms, num_qo_heads, num_kv_heads, head_dim, l);
}

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
  if (num_qo_heads / num_kv_heads > 16) /* as the plan: no size for a layout it refuses */
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: num_qo_heads / num_kv_heads is %d; a group of 1..16 query heads per KV "
                   "head is supported",
                   fn, num_qo_heads / num_kv_heads);
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
  ws_layout(&rt->env.tune, max_batch, sms, num_qo_heads, num_kv_heads, head_dim, &l);
  if (l.bytes < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: max_batch %d with %d query heads of head_dim %d needs more than 2^63 bytes", fn,
                   max_batch, num_qo_heads, head_dim);
  *bytes = (size_t)l.bytes;
  return FI_OK;
}

FI_API void fi_batch_decode_plan_destroy(fi_decode_plan *plan) { free(plan); }

FI_API fi_status fi_batch_decode_plan(fi_runtime *rt, const fi_batch_decode_info *info,
                                      const fi_attention_params *p, DLTensor *workspace,
                                      void *stream, fi_decode_plan **plan) {
  const char *fn = PLAN;
  fi_status st;
  char err[256];
  fi_attention_params defaults;
  if (!p) {
    fi_attention_params_init(&defaults);
    p = &defaults;
  }
  if (!rt || !info || !plan)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt, info or plan is NULL", fn);
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
  if ((st = rt_check_tensor(fn, "workspace", workspace, 1)) != FI_OK) return st;
  /* Checked: a wrapped product would pass for a small workspace. */
  int64_t ws_bytes;
  if (__builtin_mul_overflow(workspace->shape[0], (int64_t)((workspace->dtype.bits * workspace->dtype.lanes + 7) / 8),
                             &ws_bytes))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace has %lld elements, more than 2^63 bytes", fn,
                   (long long)workspace->shape[0]);
  if ((uintptr_t)rt_data(workspace) % 256 != 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace starts at %p; 256-byte alignment is needed",
                   fn, (void *)rt_data(workspace));
  if (workspace->shape[0] > 1 && rt_stride(workspace, 0) != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace must be contiguous", fn);

  fi_decode_plan *pl = *plan;
  const int fresh = pl == NULL;
  const int graph = info->max_batch > 0;
  const int maxb = graph ? info->max_batch : B;
  int sms;
  if ((st = rt_dec_device_sms(rt, workspace->device.device_type, workspace->device.device_id, &sms)) != FI_OK)
    return st;
  rt_decode_layout lay;
  ws_layout(&rt->env.tune, maxb, sms, info->num_qo_heads, info->num_kv_heads, info->head_dim, &lay);
  if (lay.bytes < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: info->%s %d with %d query heads of head_dim %d needs more than 2^63 bytes of workspace",
                   fn, graph ? "max_batch" : "batch", maxb, info->num_qo_heads, info->head_dim);
  if (lay.bytes > ws_bytes)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: workspace has %lld bytes; %lld are needed (fi_batch_decode_workspace_size)",
                   fn, (long long)ws_bytes, (long long)lay.bytes);
  /* KV head pairs (rt_decode_kv_pair): a block per request and pair of KV heads. */
  const int pair = rt_decode_kv_pair(rt->env.tune.decode_kv_pair, kvdt, info->head_dim, info->num_qo_heads, info->num_kv_heads,
                                     p->pos_encoding == FI_POS_ROPE_LLAMA);
  const int block_heads = info->num_kv_heads / pair;
  /* The block size (rt_decode_pick_warps): the 2-warp kernel's residency decides it (a
   * CUDA-graph plan decides by max_batch, so re-plans keep the captured kernel). Then
   * the blocks resident at once: the split target. */
  jit_key key;
  jit_decode_select(0, qdt, kvdt, info->head_dim, info->num_qo_heads / info->num_kv_heads,
                    p->pos_encoding == FI_POS_ROPE_LLAMA, DECODE_WARPS_WIDE, &key);
  const int64_t sel = key.v[DECODE_P_PIPELINE];
  /* A CUDA-graph plan's kernel may not change with the lengths: no mean for it. */
  int64_t mean = 0, longest = 0;
  if (!graph) rt_decode_token_stats(B, info->indptr, info->last_page_len, info->page_size, p->window_left, &mean,
                                   &longest);
  key.v[DECODE_P_PIPELINE] = rt_decode_pick_pipeline((int)sel, maxb, sms, block_heads, mean, longest);
  /* Switched to two buffers: the block size measured for it (rt_decode_switched_warps),
   * registered (no compile at plan time). */
  int switched = key.v[DECODE_P_PIPELINE] != sel;
  if (switched) key.v[DECODE_P_WARPS] = rt_decode_switched_warps(maxb, sms, block_heads, info->num_qo_heads / info->num_kv_heads);
  const int forced = rt_dec_tune_key(&rt->env.tune, &key, info->num_qo_heads / info->num_kv_heads);
  /* FI_DECODE_PIPELINE back to the selected kernel: its own block size rule below. */
  if (switched && key.v[DECODE_P_PIPELINE] == sel) {
    switched = 0;
    if (!(forced & RT_DEC_TUNED_WARPS)) key.v[DECODE_P_WARPS] = DECODE_WARPS_WIDE;
  }
  const rt_device_i *be;
  void *state;
  if ((st = rt_backend(rt, workspace->device.device_type, &be, &state)) != FI_OK) return st;
  rt_kernel *k;
  if ((st = rt_kernel_get(rt, &key, be, workspace->device.device_id, &k)) != FI_OK) return st;
  int resident;
  if ((st = rt_kernel_resident(rt, k, 32 * (int)key.v[DECODE_P_WARPS], &resident)) != FI_OK) return st;
  const int warps = rt_decode_pick_warps(kvdt, maxb, block_heads, resident);
  if (!(forced & RT_DEC_TUNED_WARPS) && !switched && warps != key.v[DECODE_P_WARPS]) {
    key.v[DECODE_P_WARPS] = warps;
    if ((st = rt_kernel_get(rt, &key, be, workspace->device.device_id, &k)) != FI_OK) return st;
    if ((st = rt_kernel_resident(rt, k, 32 * (int)key.v[DECODE_P_WARPS], &resident)) != FI_OK) return st;
  }
  /* MHA on the capped kernel: the CUDA-core kernel instead (rt_dec_pick_simt), where it
   * has the same blocks resident, so the split target stands. */
  const int64_t mma_rows = key.v[DECODE_P_ROWS];
  if (!forced && !switched &&
      rt_dec_pick_simt((int)key.v[DECODE_P_PIPELINE], kvdt, info->head_dim,
                          info->num_qo_heads / info->num_kv_heads, p->pos_encoding == FI_POS_ROPE_LLAMA)) {
    jit_key k2 = key;
    k2.v[DECODE_P_PIPELINE] = DECODE_PIPE_SIMT;
    k2.v[DECODE_P_ROWS] = jit_decode_simt_rows(1);
    rt_kernel *ks;
    int r2;
    if ((st = rt_kernel_get(rt, &k2, be, workspace->device.device_id, &ks)) != FI_OK) return st;
    if ((st = rt_kernel_resident(rt, ks, 32 * (int)k2.v[DECODE_P_WARPS], &r2)) != FI_OK) return st;
    if (r2 == resident) {
      key = k2;
      k = ks;
    }
  }
  if (!fresh) {
    /* A re-plan keeps everything a captured graph baked in. */
    if (pl->graph != graph || (graph && pl->max_batch != info->max_batch) ||
        pl->num_qo_heads != info->num_qo_heads || pl->num_kv_heads != info->num_kv_heads ||
        pl->head_dim != info->head_dim || pl->page_size != info->page_size || pl->q_dt != qdt ||
        pl->kv_dt != kvdt || memcmp(&pl->params, p, sizeof *p) != 0 || pl->ws != rt_data(workspace) ||
        (graph && memcmp(pl->key.v, key.v, sizeof key.v) != 0) ||
        (graph && memcmp(&pl->lay, &lay, sizeof lay) != 0))
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: a re-plan must keep the plan's heads, head_dim, page_size, dtypes, "
                     "parameters, max_batch and workspace (and in CUDA-graph mode the tuning "
                     "overrides, FI_DECODE_SPLIT included); make a new plan instead",
                     fn);
  }
  if (resident > sms * RT_DECODE_MAX_BLOCKS_PER_SM) resident = sms * RT_DECODE_MAX_BLOCKS_PER_SM;
  int64_t target = rt_decode_target_items(resident, block_heads);
  /* FI_DECODE_SPLIT scales the split target (tuning; 1 by default): below 1 fewer,
   * longer chunks, above 1 more chunks than one wave of blocks. */
  target = (int64_t)(target * rt_dec_split_scale(&rt->env.tune) + 0.5);
  if (target < 1) target = 1;
  if (target > lay.capacity) target = lay.capacity;
  if (target > 0x7fff) target = 0x7fff; /* a request's chunk count fits the item's 16 bits */

  int32_t *tab = malloc((size_t)(FI_DECODE_HDR_WORDS + lay.capacity * FI_DECODE_ITEM_WORDS) * 4);
  if (!tab) return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  memset(tab, 0, FI_DECODE_HDR_WORDS * 4);
  int chunk = 0;
  const int64_t n = rt_decode_partition(B, info->indptr, info->last_page_len, info->page_size,
                                        p->window_left, target, tab + FI_DECODE_HDR_WORDS,
                                        lay.capacity, &chunk);
  if (n < 0) {
    free(tab);
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the batch does not fit the plan's %lld work items",
                   fn, (long long)lay.capacity);
  }
  /* A capped (or CUDA-core) plan over short chunks: two buffers in 2-warp blocks (rt_decode_short_chunks)
   * where that kernel has the same blocks resident, so the partition stands. Not in
   * CUDA-graph mode (the captured kernel may not change with the lengths), nor under a
   * tuning override of the block (FI_DECODE_WARPS, FI_DECODE_PIPELINE). */
  if (!graph && !forced &&
      (key.v[DECODE_P_PIPELINE] == DECODE_PIPE_CAPPED || key.v[DECODE_P_PIPELINE] == DECODE_PIPE_SIMT) &&
      rt_decode_short_chunks(n, B, (int64_t)chunk * info->page_size, block_heads, sms,
                             info->num_qo_heads / info->num_kv_heads)) {
    jit_key k2 = key;
    k2.v[DECODE_P_PIPELINE] = 1;
    k2.v[DECODE_P_ROWS] = mma_rows;
    k2.v[DECODE_P_WARPS] = DECODE_WARPS_WIDE;
    int r2;
    if ((st = rt_kernel_get(rt, &k2, be, workspace->device.device_id, &k)) != FI_OK ||
        (st = rt_kernel_resident(rt, k, 32 * DECODE_WARPS_WIDE, &r2)) != FI_OK) {
      free(tab);
      return st;
    }
    if (r2 > sms * RT_DECODE_MAX_BLOCKS_PER_SM) r2 = sms * RT_DECODE_MAX_BLOCKS_PER_SM;
    if (r2 == resident) key = k2;
  }
  if (fresh) {
    pl = calloc(1, sizeof *pl);
    if (!pl) {
      free(tab);
      return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
  }
  pl->key = key;
  pl->devtype = workspace->device.device_type;
  pl->device = workspace->device.device_id;
  pl->batch = B;
  pl->max_batch = info->max_batch;
  pl->graph = graph;
  pl->num_qo_heads = info->num_qo_heads;
  pl->num_kv_heads = info->num_kv_heads;
  pl->head_dim = info->head_dim;
  pl->page_size = info->page_size;
  pl->q_dt = qdt;
  pl->kv_dt = kvdt;
  pl->params = *p;
  pl->ws = rt_data(workspace);
  pl->ws_bytes = ws_bytes;
  pl->lay = lay;
  pl->num_items = n;
  pl->nnz = B > 0 ? info->indptr[B] : 0;
  pl->chunk_pages = chunk;
  pl->kv_pair = pair;
  pl->split = n > B;
  pl->grid = graph ? lay.capacity : n;
  memset(&pl->scalars, 0, sizeof pl->scalars);
  rt_dec_fill_scalars(&pl->scalars, p, info->head_dim, kvdt);
  pl->scalars.prefetch = rt_dec_prefetch_steps(&rt->env.tune);
  pl->scalars.head_prefetch = rt_dec_head_prefetch(&rt->env.tune);
  pl->scalars.pre_prefetch = rt_dec_pre_prefetch(&rt->env.tune);
  pl->scalars.kv_evict = rt_dec_kv_evict(&rt->env.tune);
  tab[0] = (int32_t)n;
  tab[1] = B;
  tab[2] = chunk;
  tab[3] = pl->split;
  /* The header and items, then zero counters (the merging blocks reset theirs). */
  st = rt_upload_words(rt, pl->devtype, pl->device, (int32_t *)pl->ws, tab, FI_DECODE_HDR_WORDS + n * FI_DECODE_ITEM_WORDS, stream);
  free(tab);
  if (st == FI_OK && pl->split)
    st = rt_upload_words(rt, pl->devtype, pl->device, (int32_t *)(pl->ws + lay.counters_off), NULL,
                (int64_t)B * info->num_kv_heads, stream);
  if (st != FI_OK) {
    if (fresh) free(pl);
    return st;
  }
  *plan = pl;
  return FI_OK;
}

FI_API fi_status fi_batch_decode_run(fi_runtime *rt, const fi_decode_plan *pl,
                                     const DLTensor *q, const DLTensor *kc, const DLTensor *vc,
                                     const DLTensor *indptr, const DLTensor *indices,
                                     const DLTensor *last_page_len, fi_kv_layout layout,
                                     DLTensor *out, DLTensor *lse, void *stream) {
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
  if (pl->grid == 0) return FI_OK;

  fi_decode_params kp = pl->scalars;
  kp.q = rt_data(q);
  kp.out = rt_data(out);
  kp.lse = lse ? (float *)rt_data(lse) : NULL;
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
  kp.num_kv_heads = (int32_t)hkv;
  kp.group = (int32_t)(hq / hkv);
  kp.page_size = pl->page_size;
  kp.num_pages = (int32_t)kc->shape[0];
  kp.nnz = indices->shape[0] > INT32_MAX ? INT32_MAX : (int32_t)indices->shape[0];
  /* Head pairs need the two heads' rows side by side (NHD; HND at page_size 1); else a
   * block a head, in the same plan. */
  kp.kv_heads_per_block = pl->kv_pair == 2 && kp.kv_stride_head == D ? 2 : 1;
  return rt_dec_launch(rt, pl->devtype, pl->device, &pl->key, (unsigned)pl->grid,
                       (unsigned)(hkv / kp.kv_heads_per_block), 32u * (unsigned)pl->key.v[DECODE_P_WARPS],
                       &kp, sizeof kp, stream);
}

const jit_key *rt_decode_plan_key(const fi_decode_plan *plan) { return &plan->key; }

int rt_decode_plan_offline(const fi_batch_decode_info *info, const fi_attention_params *p,
                           void *workspace, int devtype, int sms, int resident,
                           fi_decode_plan **plan) {
  fi_decode_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return -1;
  const int qdt = rt_check_dtype(info->q_dtype), kvdt = rt_check_dtype(info->kv_dtype);
  pl->graph = info->max_batch > 0;
  pl->batch = info->batch;
  pl->max_batch = info->max_batch;
  pl->nnz = info->batch > 0 ? info->indptr[info->batch] : 0;
  rt_decode_layout_for(pl->graph ? info->max_batch : info->batch, sms, info->num_qo_heads,
                       info->num_kv_heads, info->head_dim, &pl->lay);
  int32_t *items = pl->lay.bytes < 0 ? NULL : malloc((size_t)pl->lay.capacity * FI_DECODE_ITEM_WORDS * 4);
  if (!items) {
    free(pl);
    return -1;
  }
  pl->num_items = rt_decode_partition(info->batch, info->indptr, info->last_page_len,
                                      info->page_size, p->window_left,
                                      rt_decode_target_items(resident, info->num_kv_heads), items,
                                      pl->lay.capacity, &pl->chunk_pages);
  free(items);
  jit_decode_select(0, qdt, kvdt, info->head_dim, info->num_qo_heads / info->num_kv_heads,
                    p->pos_encoding == FI_POS_ROPE_LLAMA,
                    rt_decode_pick_warps(kvdt, pl->graph ? info->max_batch : info->batch,
                                         info->num_kv_heads, 2 * (int64_t)resident),
                    &pl->key);
  const int64_t sel = pl->key.v[DECODE_P_PIPELINE];
  int64_t mean = 0, longest = 0;
  if (!pl->graph) rt_decode_token_stats(info->batch, info->indptr, info->last_page_len, info->page_size, p->window_left,
                                        &mean, &longest);
  pl->key.v[DECODE_P_PIPELINE] = rt_decode_pick_pipeline(
      (int)sel, pl->graph ? info->max_batch : info->batch, sms, info->num_kv_heads, mean, longest);
  if (pl->key.v[DECODE_P_PIPELINE] != sel)
    pl->key.v[DECODE_P_WARPS] =
        rt_decode_switched_warps(pl->graph ? info->max_batch : info->batch, sms, info->num_kv_heads,
                                 info->num_qo_heads / info->num_kv_heads);
  else if (rt_dec_pick_simt((int)sel, kvdt, info->head_dim, info->num_qo_heads / info->num_kv_heads,
                               p->pos_encoding == FI_POS_ROPE_LLAMA)) {
    pl->key.v[DECODE_P_PIPELINE] = DECODE_PIPE_SIMT;
    pl->key.v[DECODE_P_ROWS] = jit_decode_simt_rows(1);
  }
  pl->devtype = devtype;
  pl->device = 0;
  pl->num_qo_heads = info->num_qo_heads;
  pl->num_kv_heads = info->num_kv_heads;
  pl->head_dim = info->head_dim;
  pl->page_size = info->page_size;
  pl->q_dt = qdt;
  pl->kv_dt = kvdt;
  pl->params = *p;
  pl->ws = workspace;
  pl->ws_bytes = pl->lay.bytes;
  pl->split = pl->num_items > info->batch;
  pl->grid = pl->graph ? pl->lay.capacity : pl->num_items;
  rt_dec_fill_scalars(&pl->scalars, p, info->head_dim, kvdt);
  *plan = pl;
  return 0;
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
