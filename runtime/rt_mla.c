/* rt_mla.c: multi-head latent attention (fi_batch_mla_*): the plan (batch prefill's work
 * partition over packed rows query token x head, one KV head), its argument checks and
 * the launches of the attention kernel and, for split tiles, the merge. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mla_params.h"
#include "ops_mla.h"
#include "rt_check.h"
#include "rt_decode_args.h"
#include "rt_internal.h"
#include "rt_mla.h"
#include "rt_prefill.h"
#include "rt_prefill_args.h"
#include "rt_tensor.h"

/* Blocks the split aims at per SM: the kernel's 150-170 KB of shared memory fit one. */
#define MLA_BLOCKS_PER_SM 1

struct fi_mla_plan {
  jit_key key, merge_key;
  int devtype, device, graph;
  int max_batch, max_qo_tokens;
  int num_heads, page_size, dt, causal, q_tile;
  float sm_scale;
  int64_t num_items, grid, slots_used;
  int64_t qo_rows, kv_rows;
  char *ws;
  rt_mla_layout lay;
  int32_t *tab; /* host copy of the header and items */
};

static int64_t align256(int64_t x) { return (x + 255) & ~(int64_t)255; }

void rt_mla_layout_for(int64_t max_batch, int64_t max_qo_tokens, int sms, int num_heads, rt_mla_layout *l) {
  const int64_t slots = (int64_t)(sms > 0 ? sms : 1) * MLA_BLOCKS_PER_SM;
  /* Tiles of at least 16 rows: at most rows / 16 + one partial tile per request. */
  const int64_t tiles = (max_qo_tokens * (int64_t)num_heads + 15) / 16 + max_batch;
  l->slots = slots;
  l->capacity = tiles + slots;
  l->items_off = FI_PREFILL_HDR_WORDS * 4;
  l->partial_o_off = align256(l->items_off + l->capacity * FI_PREFILL_ITEM_WORDS * 4);
  l->partial_lse_off = align256(l->partial_o_off + slots * FI_MLA_SLOT_ROWS * (int64_t)FI_MLA_DCKV * 4);
  l->bytes = align256(l->partial_lse_off + slots * FI_MLA_SLOT_ROWS * 4);
}

static fi_status check_heads(const char *fn, int num_heads) {
  if (num_heads < 1 || num_heads > 1024)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: num_heads is %d; 1 to 1024 is supported", fn, num_heads);
  return FI_OK;
}

FI_API fi_status fi_batch_mla_workspace_size(fi_runtime *rt, DLDevice device, int max_batch, int max_qo_tokens,
                                             int num_heads, size_t *bytes) {
  const char *fn = "fi_batch_mla_workspace_size";
  if (!rt || !bytes) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt or bytes is NULL", fn);
  if (max_batch < 0 || max_qo_tokens < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: max_batch %d and max_qo_tokens %d must be >= 0", fn, max_batch,
                   max_qo_tokens);
  fi_status st;
  if ((st = check_heads(fn, num_heads)) != FI_OK) return st;
  if (device.device_type != kDLCUDA && device.device_type != kDLROCM)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: device type %d is not a GPU", fn, (int)device.device_type);
  int sms;
  if ((st = rt_dec_device_sms(rt, device.device_type, device.device_id, &sms)) != FI_OK) return st;
  rt_mla_layout l;
  rt_mla_layout_for(max_batch, max_qo_tokens, sms, num_heads, &l);
  *bytes = (size_t)l.bytes;
  return FI_OK;
}

FI_API void fi_batch_mla_plan_destroy(fi_mla_plan *plan) {
  if (!plan) return;
  free(plan->tab);
  free(plan);
}

/* The plan for a device (rt != NULL: tables uploaded on stream) or offline (rt NULL, sms given). */
static fi_status plan_impl(fi_runtime *rt, const char *fn, const fi_batch_mla_info *info, char *ws,
                           int64_t ws_bytes, int devtype, int device, int sms, void *stream, fi_mla_plan **plan) {
  fi_status st;
  char err[256], b1[32], b2[32];
  const int B = info->batch;
  if (B < 0) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->batch is %d; >= 0 is needed", fn, B);
  if (B > 0 && (!info->qo_indptr || !info->kv_indptr || !info->kv_len))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->qo_indptr, kv_indptr or kv_len is NULL", fn);
  if (info->max_batch < 0 || (info->max_batch > 0 && B > info->max_batch))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->batch %d exceeds info->max_batch %d (CUDA-graph mode)", fn,
                   B, info->max_batch);
  const int graph = info->max_batch > 0;
  if (graph && info->max_qo_tokens < 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: info->max_qo_tokens is %d; >= 1 is needed with max_batch (CUDA-graph mode)", fn,
                   info->max_qo_tokens);
  if ((st = check_heads(fn, info->num_heads)) != FI_OK) return st;
  if (info->head_dim_ckv != FI_MLA_DCKV || info->head_dim_kpe != FI_MLA_DKPE)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: info->head_dim_ckv %d and head_dim_kpe %d; %d and %d (DeepSeek's) are supported", fn,
                   info->head_dim_ckv, info->head_dim_kpe, FI_MLA_DCKV, FI_MLA_DKPE);
  if (info->page_size < 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->page_size is %d; >= 1 is needed", fn, info->page_size);
  if (!(info->sm_scale > 0.0f) || info->sm_scale > 1e6f)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->sm_scale is %g; a finite value > 0 is needed", fn,
                   (double)info->sm_scale);
  if (info->causal != 0 && info->causal != 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->causal is %d; 0 or 1 is needed", fn, info->causal);
  const int dt = rt_check_dtype(info->q_dtype), kvdt = rt_check_dtype(info->kv_dtype);
  if (dt != JIT_DT_F16 && dt != JIT_DT_BF16)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->q_dtype is %s; float16 or bfloat16 is needed", fn,
                   rt_check_dtype_string(info->q_dtype, b1, sizeof b1));
  if (kvdt != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->kv_dtype is %s; q's (%s) is needed (no fp8 cache yet)", fn,
                   rt_check_dtype_string(info->kv_dtype, b1, sizeof b1),
                   rt_check_dtype_string(info->q_dtype, b2, sizeof b2));
  const int H = info->num_heads;
  int64_t *kv_len = malloc(((size_t)B + 1) * sizeof *kv_len);
  int32_t *kv_base = malloc(((size_t)B + 1) * sizeof *kv_base);
  if (!kv_len || !kv_base) {
    free(kv_len);
    free(kv_base);
    return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  st = FI_OK;
  int64_t maxrows = 0;
  if (B > 0 && info->kv_indptr[0] < 0)
    st = rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->kv_indptr[0] is %d; offsets start at 0 or more", fn,
                 info->kv_indptr[0]);
  for (int b = 0; st == FI_OK && b < B; b++) {
    const int64_t np = (int64_t)info->kv_indptr[b + 1] - info->kv_indptr[b];
    if (np < 0)
      st = rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: info->kv_indptr is not monotone: kv_indptr[%d] = %d > kv_indptr[%d] = %d", fn, b,
                   info->kv_indptr[b], b + 1, info->kv_indptr[b + 1]);
    else if (info->kv_len[b] < 0 || (int64_t)info->kv_len[b] > np * info->page_size)
      st = rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: info->kv_len[%d] is %d; request %d has %lld pages of %d tokens, so 0 to %lld is needed", fn,
                   b, info->kv_len[b], b, (long long)np, info->page_size, (long long)(np * info->page_size));
    kv_len[b] = info->kv_len[b];
    kv_base[b] = info->kv_indptr[b];
    const int64_t rows = ((int64_t)info->qo_indptr[b + 1] - info->qo_indptr[b]) * H;
    if (rows > maxrows) maxrows = rows;
  }
  if (st == FI_OK &&
      rt_prefill_check_batch(B, B > 0 ? info->qo_indptr : (const int32_t[]){0}, kv_len, info->causal,
                             graph ? info->max_qo_tokens : 0, err, sizeof err))
    st = rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: info->%s", fn, err);
  if (st == FI_OK && maxrows > INT32_MAX)
    st = rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: a request has 2^31 or more query tokens x heads", fn);
  if (st == FI_OK && sms < 0) st = rt_dec_device_sms(rt, devtype, device, &sms);
  rt_mla_layout lay;
  const int64_t qo_total = B > 0 ? (int64_t)info->qo_indptr[B] - info->qo_indptr[0] : 0;
  if (st == FI_OK) {
    rt_mla_layout_for(graph ? info->max_batch : B, graph ? info->max_qo_tokens : qo_total, sms, H, &lay);
    if (lay.bytes > ws_bytes)
      st = rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: workspace has %lld bytes; %lld are needed (fi_batch_mla_workspace_size)",
                   fn, (long long)ws_bytes, (long long)lay.bytes);
  }
  int qt = jit_mla_q_tile(graph ? (int64_t)info->max_qo_tokens * H : maxrows);
  /* KV stages: the tile's default, or FI_MLA_STAGES for the 16-row tile. */
  const rt_tuning *tune = rt ? &rt->env.tune : NULL;
  int ns = qt == 16 && tune && tune->mla_stages ? tune->mla_stages : FI_MLA_NS(qt);
  /* The 16-row tile's four 32-token stages need about 166 KB of shared memory a block
   * (FI_MLA_SMEM_NS): where the device has less the 64-row tile (two stages) serves small
   * requests too; with less than that there is no MLA kernel. Offline plans (rt NULL)
   * assume Hopper. */
  if (st == FI_OK && rt) {
    const rt_device_i *be;
    void *state;
    rt_device_caps caps;
    char err[256];
    if ((st = rt_backend(rt, devtype, &be, &state)) == FI_OK &&
        rt_device_caps_get(be, state, device, &caps, err, sizeof err) != 0)
      st = rt_fail(FI_ERR_DEVICE, "%s: %s", fn, err);
    const int64_t have = st == FI_OK ? (int64_t)caps.smem_block_kb * 1024 : 0;
    if (st == FI_OK && qt == 16 && have < FI_MLA_SMEM_NS(16, ns)) qt = 64;
    if (qt == 64) ns = FI_MLA_NS(64);
    if (st == FI_OK && have < FI_MLA_SMEM_NS(qt, ns))
      st = rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: the MLA kernel needs %d KB of shared memory a block; this device allows %lld KB "
                   "(sm_80 and sm_90 have enough)",
                   fn, (FI_MLA_SMEM_NS(qt, ns) + 1023) / 1024, (long long)(have / 1024));
  }
  jit_key key;
  jit_mla_select(dt, qt, ns, &key);
  fi_mla_plan *pl = *plan;
  const int fresh = pl == NULL;
  if (st == FI_OK && !fresh &&
      (pl->graph != graph || (graph && (pl->max_batch != info->max_batch || pl->max_qo_tokens != info->max_qo_tokens)) ||
       pl->num_heads != H || pl->page_size != info->page_size || pl->dt != dt || pl->causal != info->causal ||
       pl->sm_scale != info->sm_scale || pl->ws != ws || (graph && pl->q_tile != qt)))
    st = rt_fail(FI_ERR_INVALID_ARGUMENT,
                 "%s: a re-plan must keep the plan's heads, page_size, dtypes, causal, sm_scale, workspace and "
                 "(CUDA-graph mode) sizes and q tile; make a new plan instead",
                 fn);
  int32_t *tab = NULL;
  int64_t n = 0, chunk = 0, slots = 0;
  if (st == FI_OK) {
    tab = malloc((size_t)(FI_PREFILL_HDR_WORDS + lay.capacity * FI_PREFILL_ITEM_WORDS) * 4);
    if (!tab) st = rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  if (st == FI_OK) {
    memset(tab, 0, FI_PREFILL_HDR_WORDS * 4);
    const rt_prefill_batch bt = {B, info->qo_indptr, kv_len, kv_base, H, 1, qt, FI_MLA_KT(qt), info->causal, -1};
    n = rt_prefill_partition(&bt, (int64_t)sms * MLA_BLOCKS_PER_SM, tab + FI_PREFILL_HDR_WORDS, lay.capacity,
                             lay.slots, &chunk, &slots);
    if (n < 0)
      st = rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the batch does not fit the plan's %lld work items", fn,
                   (long long)lay.capacity);
  }
  free(kv_len);
  free(kv_base);
  if (st == FI_OK) {
    tab[0] = (int32_t)n;
    tab[1] = B;
    tab[2] = qt;
    tab[3] = (int32_t)(chunk > INT32_MAX ? INT32_MAX : chunk);
    if (rt) st = rt_upload_words(rt, devtype, device, (int32_t *)ws, tab, FI_PREFILL_HDR_WORDS + n * FI_PREFILL_ITEM_WORDS,
                                 stream);
  }
  if (st == FI_OK && fresh && !(pl = calloc(1, sizeof *pl))) st = rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  if (st != FI_OK) {
    free(tab);
    return st;
  }
  free(pl->tab);
  pl->tab = tab;
  pl->key = key;
  jit_mla_merge_select(dt, &pl->merge_key);
  pl->devtype = devtype;
  pl->device = device;
  pl->graph = graph;
  pl->max_batch = info->max_batch;
  pl->max_qo_tokens = info->max_qo_tokens;
  pl->num_heads = H;
  pl->page_size = info->page_size;
  pl->dt = dt;
  pl->causal = info->causal;
  pl->sm_scale = info->sm_scale;
  pl->q_tile = qt;
  pl->num_items = n;
  pl->grid = graph ? lay.capacity : n;
  pl->slots_used = slots;
  pl->qo_rows = B > 0 ? info->qo_indptr[B] : 0;
  pl->kv_rows = B > 0 ? info->kv_indptr[B] : 0;
  pl->ws = ws;
  pl->lay = lay;
  *plan = pl;
  return FI_OK;
}

FI_API fi_status fi_batch_mla_paged_plan(fi_runtime *rt, const fi_batch_mla_info *info, DLTensor *workspace,
                                         void *stream, fi_mla_plan **plan) {
  const char *fn = "fi_batch_mla_paged_plan";
  fi_status st;
  if (!rt || !info || !plan) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt, info or plan is NULL", fn);
  int64_t ws_bytes;
  if ((st = rt_check_workspace(fn, workspace, &ws_bytes)) != FI_OK) return st;
  return plan_impl(rt, fn, info, rt_data(workspace), ws_bytes, workspace->device.device_type,
                   workspace->device.device_id, -1, stream, plan);
}

int rt_mla_plan_offline(const fi_batch_mla_info *info, void *workspace, int sms, fi_mla_plan **plan) {
  return plan_impl(NULL, "fi_batch_mla_paged_plan", info, workspace, INT64_MAX, kDLCUDA, 0, sms, NULL, plan) == FI_OK
             ? 0
             : -1;
}

const int32_t *rt_mla_plan_table(const fi_mla_plan *pl, int64_t *items, const jit_key **key) {
  *items = pl->num_items;
  if (key) *key = &pl->key;
  return pl->tab;
}

/* A [rows, H, width] tensor of the plan's dtype, rows at least min_rows (exactly, when exact). */
static fi_status check_rows3(const char *fn, const char *name, const DLTensor *t, const DLTensor *q,
                             const fi_mla_plan *pl, int64_t min_rows, int exact, int64_t width) {
  fi_status st;
  char b1[32];
  if ((st = rt_check_tensor(fn, name, t, 3)) != FI_OK) return st;
  if (q && (st = rt_check_same_device(fn, "q_nope", q, name, t)) != FI_OK) return st;
  if (rt_check_dtype(t->dtype) != pl->dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; the plan's %s is needed", fn, name,
                   rt_check_dtype_string(t->dtype, b1, sizeof b1), jit_dtype_name(pl->dt));
  if ((exact ? t->shape[0] != min_rows : t->shape[0] < min_rows) || t->shape[1] != pl->num_heads ||
      t->shape[2] != width)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has shape [%lld, %lld, %lld]; %s %lld rows (qo_indptr[B]%s), the plan's %d heads and "
                   "%lld columns are needed",
                   fn, name, (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2],
                   exact ? "exactly" : "at least", (long long)min_rows, exact ? ": q_nope's" : "", pl->num_heads,
                   (long long)width);
  return rt_check_rows(fn, name, t, jit_dtype_bytes(pl->dt));
}

/* A [pages, page_size, width] cache of the plan's dtype on q's device. */
static fi_status check_cache(const char *fn, const char *name, const DLTensor *t, const DLTensor *q,
                             const fi_mla_plan *pl, int64_t width) {
  fi_status st;
  char b1[32];
  if ((st = rt_check_tensor(fn, name, t, 3)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "q_nope", q, name, t)) != FI_OK) return st;
  if (rt_check_dtype(t->dtype) != pl->dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; the plan's %s is needed", fn, name,
                   rt_check_dtype_string(t->dtype, b1, sizeof b1), jit_dtype_name(pl->dt));
  if (t->shape[1] != pl->page_size || t->shape[2] != width)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s has shape [%lld, %lld, %lld]; [pages, page_size %d, %lld] is needed", fn, name,
                   (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2], pl->page_size,
                   (long long)width);
  if (t->shape[0] > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has 2^31 pages or more", fn, name);
  return rt_check_rows(fn, name, t, jit_dtype_bytes(pl->dt));
}

FI_API fi_status fi_batch_mla_paged_run(fi_runtime *rt, const fi_mla_plan *pl, const DLTensor *q_nope,
                                        const DLTensor *q_pe, const DLTensor *ckv_cache, const DLTensor *kpe_cache,
                                        const DLTensor *kv_indices, DLTensor *out, DLTensor *lse, void *stream) {
  const char *fn = "fi_batch_mla_paged_run";
  fi_status st;
  if (!rt || !pl) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt or plan is NULL", fn);
  if ((st = check_rows3(fn, "q_nope", q_nope, NULL, pl, pl->qo_rows, 0, FI_MLA_DCKV)) != FI_OK) return st;
  if ((int)q_nope->device.device_type != pl->devtype || q_nope->device.device_id != pl->device)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: q_nope is on another device than the plan's workspace", fn);
  const int64_t N = q_nope->shape[0];
  if ((st = check_rows3(fn, "q_pe", q_pe, q_nope, pl, N, 1, FI_MLA_DKPE)) != FI_OK) return st;
  if ((st = check_rows3(fn, "out", out, q_nope, pl, N, 1, FI_MLA_DCKV)) != FI_OK) return st;
  if (lse) {
    const int64_t want[2] = {N, pl->num_heads};
    if ((st = rt_check_lse(fn, lse, q_nope, 2, want)) != FI_OK) return st;
  }
  if ((st = check_cache(fn, "ckv_cache", ckv_cache, q_nope, pl, FI_MLA_DCKV)) != FI_OK) return st;
  if ((st = check_cache(fn, "kpe_cache", kpe_cache, q_nope, pl, FI_MLA_DKPE)) != FI_OK) return st;
  if (kpe_cache->shape[0] != ckv_cache->shape[0])
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: kpe_cache has %lld pages but ckv_cache %lld", fn,
                   (long long)kpe_cache->shape[0], (long long)ckv_cache->shape[0]);
  if ((st = rt_check_index(fn, "kv_indices", kv_indices, q_nope, pl->kv_rows, 0)) != FI_OK) return st;
  const DLTensor *ins[5] = {q_nope, q_pe, ckv_cache, kpe_cache, kv_indices};
  static const char *const names[5] = {"q_nope", "q_pe", "ckv_cache", "kpe_cache", "kv_indices"};
  if ((st = rt_check_outputs_apart(fn, out, lse, ins, names, 5)) != FI_OK) return st;

  fi_mla_kparams kp;
  memset(&kp, 0, sizeof kp);
  kp.q_nope = rt_data(q_nope);
  kp.q_pe = rt_data(q_pe);
  kp.out = rt_data(out);
  kp.lse = lse ? (float *)rt_data(lse) : NULL;
  kp.ckv = rt_data(ckv_cache);
  kp.kpe = rt_data(kpe_cache);
  kp.indices = (const int32_t *)rt_data(kv_indices);
  kp.header = (const int32_t *)pl->ws;
  kp.items = (const int32_t *)(pl->ws + pl->lay.items_off);
  kp.partial_o = (float *)(pl->ws + pl->lay.partial_o_off);
  kp.partial_lse = (float *)(pl->ws + pl->lay.partial_lse_off);
  kp.qn_stride_tok = rt_stride(q_nope, 0);
  kp.qn_stride_head = rt_stride(q_nope, 1);
  kp.qp_stride_tok = rt_stride(q_pe, 0);
  kp.qp_stride_head = rt_stride(q_pe, 1);
  kp.out_stride_tok = rt_stride(out, 0);
  kp.out_stride_head = rt_stride(out, 1);
  kp.lse_stride_tok = lse ? rt_stride(lse, 0) : 0;
  kp.lse_stride_head = lse ? rt_stride(lse, 1) : 0;
  kp.ckv_stride_page = rt_stride(ckv_cache, 0);
  kp.ckv_stride_slot = rt_stride(ckv_cache, 1);
  kp.kpe_stride_page = rt_stride(kpe_cache, 0);
  kp.kpe_stride_slot = rt_stride(kpe_cache, 1);
  kp.num_items = pl->graph ? -1 : (int32_t)pl->num_items;
  kp.num_heads = pl->num_heads;
  kp.page_size = pl->page_size;
  kp.causal = pl->causal;
  kp.scale_log2 = pl->sm_scale * 1.4426950408889634f;
  if (pl->grid == 0) return FI_OK;
  if ((st = rt_prefill_launch(rt, pl->devtype, pl->device, &pl->key, pl->grid, 1, jit_mla_threads(&pl->key), &kp,
                              sizeof kp, stream)) != FI_OK ||
      (!pl->graph && pl->slots_used == 0))
    return st;
  fi_prefill_merge_params mp;
  memset(&mp, 0, sizeof mp);
  mp.out = kp.out;
  mp.lse = kp.lse;
  mp.header = kp.header;
  mp.items = kp.items;
  mp.partial_o = kp.partial_o;
  mp.partial_lse = kp.partial_lse;
  mp.out_stride_tok = kp.out_stride_tok;
  mp.out_stride_head = kp.out_stride_head;
  mp.lse_stride_tok = kp.lse_stride_tok;
  mp.lse_stride_head = kp.lse_stride_head;
  mp.num_items = kp.num_items;
  mp.num_kv_heads = 1;
  mp.group = pl->num_heads;
  mp.q_tile = FI_MLA_SLOT_ROWS;
  /* (8 blocks a tile: one a 64 of the 512 latent columns, kernels/mla.cuh's mla_merge) */
  return rt_prefill_launch(rt, pl->devtype, pl->device, &pl->merge_key, pl->grid, FI_MLA_DCKV / 64, MLA_MERGE_THREADS,
                           &mp, sizeof mp, stream);
}

/* ---- the cache append ---- */

/* A 2-D [nnz, width] input or 3-D [pages, page_size, width] cache of dtype dt, last dim
 * contiguous, rows 16-byte aligned. */
static fi_status check_mat(const char *fn, const char *name, const DLTensor *t, const DLTensor *ref, int ndim,
                           int64_t width, int dt) {
  fi_status st;
  char b1[32], b2[32];
  if ((st = rt_check_tensor(fn, name, t, ndim)) != FI_OK) return st;
  if (ref && (st = rt_check_same_device(fn, "append_ckv", ref, name, t)) != FI_OK) return st;
  const int tdt = rt_check_dtype(t->dtype);
  if (dt ? tdt != dt : (tdt != JIT_DT_F16 && tdt != JIT_DT_BF16))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; %s is needed", fn, name,
                   rt_check_dtype_string(t->dtype, b1, sizeof b1),
                   dt ? (snprintf(b2, sizeof b2, "append_ckv's (%s)", jit_dtype_name(dt)), b2) : "float16 or bfloat16");
  if (t->shape[ndim - 1] != width)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has %lld columns (last dimension); %lld are needed", fn, name,
                   (long long)t->shape[ndim - 1], (long long)width);
  return rt_check_rows(fn, name, t, 2);
}

/* Whether ckv and kpe are the column ranges [0, 512) and [512, 576) (or any two disjoint
 * ranges) of the rows of one buffer, as engines keep them ([pages, page_size, 576]): the
 * same page and slot strides, kpe's start inside the slot row of ckv's, past its columns. */
static int caches_interleave(const DLTensor *ckv, const DLTensor *kpe) {
  if (rt_stride(ckv, 0) != rt_stride(kpe, 0) || rt_stride(ckv, 1) != rt_stride(kpe, 1)) return 0;
  const intptr_t a = (intptr_t)rt_data(ckv), b = (intptr_t)rt_data(kpe), row = 2 * (intptr_t)rt_stride(ckv, 1);
  const intptr_t d = b - a; /* bytes from ckv's start to kpe's */
  if (row <= 0) return 0;
  if (d >= 2 * FI_MLA_DCKV && d + 2 * FI_MLA_DKPE <= row) return 1;
  if (-d >= 2 * FI_MLA_DKPE && -d + 2 * FI_MLA_DCKV <= row) return 1;
  return 0;
}

FI_API fi_status fi_append_paged_mla_kv_cache(fi_runtime *rt, const DLTensor *append_ckv, const DLTensor *append_kpe,
                                              const DLTensor *batch_indices, const DLTensor *positions,
                                              DLTensor *ckv_cache, DLTensor *kpe_cache, const DLTensor *kv_indices,
                                              const DLTensor *kv_indptr, const DLTensor *kv_last_page_len,
                                              void *stream) {
  const char *fn = "fi_append_paged_mla_kv_cache";
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = check_mat(fn, "append_ckv", append_ckv, NULL, 2, FI_MLA_DCKV, 0)) != FI_OK) return st;
  const int dt = rt_check_dtype(append_ckv->dtype);
  const int64_t nnz = append_ckv->shape[0];
  if ((st = check_mat(fn, "append_kpe", append_kpe, append_ckv, 2, FI_MLA_DKPE, dt)) != FI_OK) return st;
  if (append_kpe->shape[0] != nnz)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: append_kpe has %lld tokens but append_ckv %lld", fn,
                   (long long)append_kpe->shape[0], (long long)nnz);
  if ((st = check_mat(fn, "ckv_cache", ckv_cache, append_ckv, 3, FI_MLA_DCKV, dt)) != FI_OK) return st;
  if ((st = check_mat(fn, "kpe_cache", kpe_cache, append_ckv, 3, FI_MLA_DKPE, dt)) != FI_OK) return st;
  const int64_t pages = ckv_cache->shape[0], ps = ckv_cache->shape[1];
  if (kpe_cache->shape[0] != pages || kpe_cache->shape[1] != ps)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: kpe_cache has %lld pages of %lld slots but ckv_cache %lld of %lld; the same are needed", fn,
                   (long long)kpe_cache->shape[0], (long long)kpe_cache->shape[1], (long long)pages, (long long)ps);
  if (ps < 1 || ps > INT32_MAX || pages > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: ckv_cache has %lld pages of %lld slots; page_size 1 to 2^31-1 is needed",
                   fn, (long long)pages, (long long)ps);
  if (nnz > INT32_MAX / 72)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: append_ckv has %lld tokens; at most %d", fn, (long long)nnz,
                   INT32_MAX / 72);
  if (pages == 0 && nnz > 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: ckv_cache has no pages for %lld tokens", fn, (long long)nnz);
  if ((st = rt_check_ints(fn, "batch_indices", batch_indices, "append_ckv", append_ckv, nnz, "append_ckv's nnz")) != FI_OK) return st;
  if ((st = rt_check_ints(fn, "positions", positions, "append_ckv", append_ckv, nnz, "append_ckv's nnz")) != FI_OK) return st;
  if ((st = rt_check_ints(fn, "kv_indices", kv_indices, "append_ckv", append_ckv, -1, "")) != FI_OK) return st;
  if ((st = rt_check_ints(fn, "kv_indptr", kv_indptr, "append_ckv", append_ckv, -1, "")) != FI_OK) return st;
  const int64_t B1 = kv_indptr->shape[0];
  if (B1 < 1 || (nnz > 0 && B1 == 1))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: kv_indptr has %lld entries; batch + 1 (>= %d) are needed", fn,
                   (long long)B1, nnz > 0 ? 2 : 1);
  if ((st = rt_check_ints(fn, "kv_last_page_len", kv_last_page_len, "append_ckv", append_ckv, B1 - 1, "kv_indptr's batch")) != FI_OK)
    return st;
  if (nnz > 0 && kv_indices->shape[0] == 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: kv_indices is empty but %lld tokens are appended", fn, (long long)nnz);
  /* The caches are written while everything else is read; they must not meet each other. */
  const DLTensor *ins[8] = {append_ckv, append_kpe, batch_indices, positions, kv_indices, kv_indptr, kv_last_page_len,
                            kpe_cache};
  static const char *const names[8] = {"append_ckv", "append_kpe", "batch_indices", "positions",
                                       "kv_indices", "kv_indptr",  "kv_last_page_len", "kpe_cache"};
  for (int i = 0; i < 8; i++) {
    if (i == 7 && caches_interleave(ckv_cache, kpe_cache)) continue;
    if (rt_tensors_overlap(ckv_cache, ins[i]))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: ckv_cache overlaps %s; the caches need their own memory", fn, names[i]);
    if (i < 7 && rt_tensors_overlap(kpe_cache, ins[i]))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: kpe_cache overlaps %s; the caches need their own memory", fn, names[i]);
  }
  if (nnz == 0) return FI_OK;
  fi_append_mla_params p;
  memset(&p, 0, sizeof p);
  p.append_ckv = rt_data(append_ckv);
  p.append_kpe = rt_data(append_kpe);
  p.ckv_cache = rt_data(ckv_cache);
  p.kpe_cache = rt_data(kpe_cache);
  p.batch_indices = (const int32_t *)rt_data(batch_indices);
  p.positions = (const int32_t *)rt_data(positions);
  p.kv_indices = (const int32_t *)rt_data(kv_indices);
  p.kv_indptr = (const int32_t *)rt_data(kv_indptr);
  p.ackv_stride = rt_stride(append_ckv, 0);
  p.akpe_stride = rt_stride(append_kpe, 0);
  p.ckv_stride_page = rt_stride(ckv_cache, 0);
  p.ckv_stride_slot = rt_stride(ckv_cache, 1);
  p.kpe_stride_page = rt_stride(kpe_cache, 0);
  p.kpe_stride_slot = rt_stride(kpe_cache, 1);
  p.bi_stride = rt_stride(batch_indices, 0);
  p.pos_stride = rt_stride(positions, 0);
  p.indices_stride = rt_stride(kv_indices, 0);
  p.indptr_stride = rt_stride(kv_indptr, 0);
  p.nnz = (int32_t)nnz;
  p.page_size = (int32_t)ps;
  jit_key key;
  jit_mla_append_select(dt, &key);
  rt_kernel *k;
  if ((st = rt_kernel_for(rt, append_ckv->device.device_type, append_ckv->device.device_id, &key, &k, NULL, NULL)) !=
      FI_OK)
    return st;
  const unsigned threads = (unsigned)key.v[MLA_APPEND_P_THREADS];
  const int64_t work = nnz * (72 / 4); /* threads: 4 vectors of 16 bytes each (mla_append.cuh) */
  return rt_launch_1d(rt, k, (work + threads - 1) / threads, threads, stream, &p, sizeof p);
}
