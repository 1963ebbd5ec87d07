/* rt_decode_choose.c: batch decode's kernel choice (rt_decode_choose.h): the rules, the
 * one function that composes them (request + tuning + occupancy -> key and partition),
 * and the device model the presets and the CPU tests plan with. */
#include "rt_decode_choose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_params.h"
#include "ops_decode.h"
#include "rt_check.h"
#include "rt_decode_args.h"
#include "rt_internal.h"

static int is_fp8(int kv_dtype) { return kv_dtype == JIT_DT_E4M3 || kv_dtype == JIT_DT_E5M2; }

/* Smaller blocks make finer waves: measured on the H200 (bf16, D = 128, 32/8, page 16),
 * B = 64, L = 4096 (512 blocks) 3.96 TB/s with 4 warps, 4.07 with 2, 2.91 with 1 (half
 * the device idle); B = 128, L = 1024 (1024 blocks) 3.10, 3.42, 3.54. A split request's
 * partials and merge grow with its chunk count, so split plans keep the large blocks.
 * An fp8 cache has no 1-warp kernel: 2 warps once the blocks fill a wave of 4-warp ones
 * (e4m3, B = 64, L = 4096: 3.61 TB/s with 2 warps, 3.42 with 4: one wave of blocks
 * instead of two, each block's start paid once). */
int rt_decode_pick_warps(int kv_dtype, int64_t requests, int num_kv_heads, int64_t resident_wide) {
  const int64_t blocks = requests * (num_kv_heads > 0 ? num_kv_heads : 1);
  if (!is_fp8(kv_dtype) && blocks * 16 >= 2 * resident_wide * 15) return DECODE_WARPS_ONE;
  return blocks * 2 >= resident_wide ? DECODE_WARPS_WIDE : DECODE_WARPS_SPLIT;
}

/* The capped one-buffer kernel has twice the 4-warp blocks resident, so a split plan cuts
 * each request into twice the chunks; past 16 chunks a request (a few requests: B <= 4 at
 * 8 KV heads on 132 SMs) the merge outweighs what the kernel gains: B=1 L=8192 32/8 on the
 * H200 23.4 us capped (64 chunks) against 20.8 with two buffers (32 chunks).
 * Where the blocks fill 80-100% of a wave of two-buffer blocks, the capped plan splits each
 * request in two for the same fill, and for short requests that merge costs more than the
 * capped loop gains: bf16 32/8 on the H200, two buffers against capped, B=32 L=512 +10%,
 * L=1024 +4.6%, L=2048 +2.3%, L=4096 level, L=8192 -1.7%; B=28 L=1024 +4%; 64/4 heads
 * B=64 L=1024 +5%; B=24 (73% of the wave) L=1024 level, L=2048 -5% (docs/decode.md,
 * 2026-12-04, equal lengths). Only for lengths near equal (the longest within 5/4 of the
 * mean): whole requests on two buffers put the longest on one block, where the capped plan
 * cuts it to the chunk of the rest. mean_tokens <= 0 (a CUDA-graph plan, whose kernel may
 * not change with the lengths) leaves this window out. */
/* The first rule: so few requests that the capped kernel's split would pass 16 chunks each. */
static int too_few_for_capped(int64_t requests, int sms, int block_heads) {
  return requests * 16 < rt_decode_target_items((int64_t)(sms > 0 ? sms : 1) * RT_DECODE_MAX_BLOCKS_PER_SM, block_heads);
}

int rt_decode_pick_pipeline(int pipeline, int64_t requests, int sms, int block_heads, int64_t mean_tokens,
                            int64_t max_tokens) {
  if (pipeline != DECODE_PIPE_CAPPED) return pipeline;
  if (too_few_for_capped(requests, sms, block_heads)) return DECODE_PIPE_TWO_BUFFER;
  const int64_t s = sms > 0 ? sms : 1;
  const int64_t blocks = requests * (block_heads > 0 ? block_heads : 1), wave = s * RT_DECODE_TWO_BUFFER_BLOCKS_PER_SM;
  if (mean_tokens > 0 && max_tokens <= RT_DECODE_TWO_BUFFER_MAX_TOKENS && max_tokens * 4 <= mean_tokens * 5 &&
      blocks <= wave && blocks * 5 >= wave * 4)
    return DECODE_PIPE_TWO_BUFFER;
  return pipeline;
}

/* 2-warp blocks cut a few requests into twice the chunks of 4-warp ones. H200, bf16, L=8192
 * unless said, two buffers, 2 warps against 4 (TB/s): 32/8 B=2 2.30 / 2.24, B=3 2.74 /
 * 2.68, B=4 3.02 / 2.89, B=4 L=2048 1.80 / 1.64, L=4096 2.44 / 2.28, L=16384 3.56 / 3.46,
 * B=3 L=32768 3.70 / 3.66; 16/8 B=2 2.39 / 2.25; 8/8 B=4 3.06 / 2.97; 16/4 B=4 2.31 / 2.25,
 * B=8 3.03 / 2.90. Not so for one request at 8 KV heads (66 chunks) 1.49 / 1.59, 16/4 B=3
 * (44 chunks) level, and every group of 8, level or lost: 64/8 B=2 2.10 / 2.24, B=4 L=4096
 * 2.28 / 2.30, 32/4 B=2 1.20 / 1.50, B=4 2.09 / 2.24, B=8 level, 8/1 B=8 1.22 / 1.54
 * (docs/decode.md, 2026-12-04). */
int rt_decode_switched_warps(int64_t requests, int sms, int block_heads, int group) {
  const int64_t s = sms > 0 ? sms : 1, heads = block_heads > 0 ? block_heads : 1;
  const int wide = group <= 4 && too_few_for_capped(requests, sms, block_heads) &&
                   requests * heads * 33 >= s * RT_DECODE_MAX_BLOCKS_PER_SM;
  return wide ? DECODE_WARPS_WIDE : DECODE_WARPS_SPLIT;
}

/* KV head pairs are on by default (rt_tuning.decode_kv_pair; the figures in
 * BENCHMARKS.md); bf16 caches never pair. */
int rt_decode_kv_pair(int on, int kv_dtype, int head_dim, int num_qo_heads, int num_kv_heads, int rope) {
  if (!on) return 1;
  if (!is_fp8(kv_dtype) || head_dim != 128 || rope || num_kv_heads < 2 || num_kv_heads % 2) return 1;
  return num_qo_heads / num_kv_heads <= 4 ? RT_DECODE_KV_PAIR : 1;
}

/* A 4-warp capped block over a chunk of a few hundred tokens gives each warp a few steps,
 * and the one-buffer loop has no load ahead to cover them; a 2-warp block on two buffers
 * runs twice the steps a warp with the next in flight, at the same blocks an SM. H200,
 * bf16 32/8 unless said, capped against two buffers x 2 warps (TB/s): B=6 L=1024 1.29 /
 * 1.48, L=4096 2.65 / 2.77, L=8192 3.24 / 3.30; B=8 L=2048 2.23 / 2.40, L=8192 3.45 / 3.50;
 * B=12 L=512 1.32 / 1.52, L=4096 3.21 / 3.24; B=16 L=512 1.59 / 1.82, L=1024 2.25 / 2.41,
 * L=2048 2.89 / 3.01; B=24 L=512 1.97 / 2.13; 8/8 B=16 L=1024 2.39 / 2.47; 16/8 2.28 /
 * 2.42; 16/4 B=16 L=1024 1.60 / 1.85, B=32 L=2048 2.94 / 3.08; MHA 32/32 B=4 L=1024 2.40 /
 * 2.50, B=8 L=2048 3.55 / 3.61. Longer chunks lose: B=12 L=8192 (1648 tokens) 3.69 /
 * 3.63, B=16 L=8192 3.86 / 3.82; so do chunks above 256 tokens filling 73% of the wave:
 * B=24 L=2048 (1024 tokens) 3.16 / 3.04, L=1024 (512) level, MHA B=6 L=1024 (512) 2.76 /
 * 2.69. Groups of 8 are level: 64/8 B=16 L=1024 2.33 / 2.35, L=2048 2.97 / 2.95
 * (docs/decode.md, 2026-12-04). */
int rt_decode_short_chunks(int64_t items, int64_t requests, int64_t chunk_tokens, int block_heads, int sms,
                           int group) {
  const int64_t wave = (int64_t)(sms > 0 ? sms : 1) * RT_DECODE_MAX_BLOCKS_PER_SM;
  const int64_t blocks = items * (block_heads > 0 ? block_heads : 1);
  return group <= 4 && items > requests &&
         (chunk_tokens <= 256 || (chunk_tokens <= 1024 && blocks * 10 >= wave * 9));
}

/* MHA (group 1) over a 16-bit cache: the CUDA-core kernel reads whole K and V rows an
 * instruction, where the mma fragments read 8 rows' 64 bytes. H100 against the capped
 * kernel, fi-bench in one process: 32/32 B=64 L=4096 -1.0%, B=16 L=16384 -0.7%, 8/8 HND
 * -1.7%; as this default, in separate processes: -0.7%, -0.7%, -1.7%, the GQA rows level;
 * on a second H100, whose capped kernel reads 99.5% of the probe at B=64: -0.2%, 0, -1.2%.
 * Groups 2 and 4 were level or slower (+8.5% at 4): they keep the mma kernel (docs/decode.md,
 * 2026-12-05 and 2026-12-06). */
int rt_dec_pick_simt(int pipeline, int kv_dtype, int head_dim, int group, int rope) {
  return pipeline == DECODE_PIPE_CAPPED && group == 1 && jit_decode_can_simt(kv_dtype, head_dim, group, rope);
}

int rt_dec_tune_key(const rt_tuning *t, jit_key *key, int group) {
  int forced = 0;
  if (t->decode_warps) {
    key->v[DECODE_P_WARPS] = t->decode_warps;
    forced |= RT_DEC_TUNED_WARPS;
  }
  if (t->decode_pipeline >= 0) {
    /* one or two buffers anywhere; the capped and CUDA-core kernels wherever they can be built */
    const int64_t *v = key->v;
    const int n = t->decode_pipeline;
    if (n == DECODE_PIPE_K_ONLY || n == DECODE_PIPE_TWO_BUFFER ||
        (n == DECODE_PIPE_CAPPED &&
         jit_decode_can_cap((int)v[DECODE_P_DTYPE_KV], (int)v[DECODE_P_HEAD_DIM], (int)v[DECODE_P_ROWS]))) {
      key->v[DECODE_P_PIPELINE] = n;
      forced |= RT_DEC_TUNED_PIPELINE;
    } else if (n == DECODE_PIPE_SIMT &&
               jit_decode_can_simt((int)v[DECODE_P_DTYPE_KV], (int)v[DECODE_P_HEAD_DIM], group, (int)v[DECODE_P_ROPE])) {
      key->v[DECODE_P_PIPELINE] = n;
      key->v[DECODE_P_ROWS] = jit_decode_simt_rows(group);
      forced |= RT_DEC_TUNED_PIPELINE;
    }
  }
  return forced;
}

void rt_decode_ws_layout(const rt_tuning *t, int64_t max_batch, int sms, int num_qo_heads, int num_kv_heads,
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

/* ---- the device model ---- */

#define MODEL_WARPS_PER_SM 8

static fi_status model_resident(void *ctx, const jit_key *key, int threads, int *blocks) {
  (void)key;
  const int per_sm = threads > 0 && threads < 32 * MODEL_WARPS_PER_SM ? 32 * MODEL_WARPS_PER_SM / threads : 1;
  *blocks = (int)(intptr_t)ctx * per_sm;
  return FI_OK;
}

rt_decode_device rt_decode_device_model(int sms) {
  const rt_decode_device d = {sms, model_resident, (void *)(intptr_t)sms};
  return d;
}

/* ---- the choice ---- */

/* A request as the rules see it. */
typedef struct ask {
  const fi_batch_decode_info *info;
  const fi_attention_params *p;
  const rt_tuning *t;
  const rt_decode_device *dev;
  int graph;       /* CUDA-graph mode: decided by max_batch, never by the lengths */
  int maxb;        /* the requests the kernel is chosen for: max_batch in CUDA-graph mode */
  int kvdt, group, rope;
  int block_heads; /* KV heads over the blocks: num_kv_heads / kv_pair */
} ask;

/* What the rule picks before the partition. */
typedef struct rule {
  jit_key key;
  int resident;     /* blocks of it resident at once: the split target's base */
  int forced;       /* the tuning overrides applied (RT_DEC_TUNED_*) */
  int64_t mma_rows; /* the rows of the mma kernels' key (before rt_dec_pick_simt's) */
} rule;

static fi_status rule_kernel(const ask *a, rule *r) {
  const fi_batch_decode_info *info = a->info;
  const rt_decode_device *dev = a->dev;
  jit_key *key = &r->key;
  fi_status st;
  /* The block size (rt_decode_pick_warps): the 2-warp kernel's residency decides it (a
   * CUDA-graph plan decides by max_batch, so re-plans keep the captured kernel). */
  jit_decode_select(0, rt_check_dtype(info->q_dtype), a->kvdt, info->head_dim, a->group, a->rope,
                    DECODE_WARPS_WIDE, key);
  const int64_t sel = key->v[DECODE_P_PIPELINE];
  /* A CUDA-graph plan's kernel may not change with the lengths: no mean for it. */
  int64_t mean = 0, longest = 0;
  if (!a->graph)
    rt_decode_token_stats(info->batch, info->indptr, info->last_page_len, info->page_size, a->p->window_left,
                          &mean, &longest);
  key->v[DECODE_P_PIPELINE] = rt_decode_pick_pipeline((int)sel, a->maxb, dev->sms, a->block_heads, mean, longest);
  /* Switched to two buffers: the block size measured for it (rt_decode_switched_warps),
   * registered (no compile at plan time). */
  int switched = key->v[DECODE_P_PIPELINE] != sel;
  if (switched) key->v[DECODE_P_WARPS] = rt_decode_switched_warps(a->maxb, dev->sms, a->block_heads, a->group);
  r->forced = rt_dec_tune_key(a->t, key, a->group);
  /* FI_DECODE_PIPELINE back to the selected kernel: its own block size rule below. */
  if (switched && key->v[DECODE_P_PIPELINE] == sel) {
    switched = 0;
    if (!(r->forced & RT_DEC_TUNED_WARPS)) key->v[DECODE_P_WARPS] = DECODE_WARPS_WIDE;
  }
  if ((st = dev->resident(dev->ctx, key, 32 * (int)key->v[DECODE_P_WARPS], &r->resident)) != FI_OK) return st;
  const int warps = rt_decode_pick_warps(a->kvdt, a->maxb, a->block_heads, r->resident);
  if (!(r->forced & RT_DEC_TUNED_WARPS) && !switched && warps != key->v[DECODE_P_WARPS]) {
    key->v[DECODE_P_WARPS] = warps;
    if ((st = dev->resident(dev->ctx, key, 32 * warps, &r->resident)) != FI_OK) return st;
  }
  r->mma_rows = key->v[DECODE_P_ROWS];
  /* MHA on the capped kernel: the CUDA-core kernel instead (rt_dec_pick_simt), where it
   * has the same blocks resident, so the split target stands. */
  if (!r->forced && !switched &&
      rt_dec_pick_simt((int)key->v[DECODE_P_PIPELINE], a->kvdt, info->head_dim, a->group, a->rope)) {
    jit_key k2 = *key;
    k2.v[DECODE_P_PIPELINE] = DECODE_PIPE_SIMT;
    k2.v[DECODE_P_ROWS] = jit_decode_simt_rows(1);
    int r2;
    if ((st = dev->resident(dev->ctx, &k2, 32 * (int)k2.v[DECODE_P_WARPS], &r2)) != FI_OK) return st;
    if (r2 == r->resident) *key = k2;
  }
  return FI_OK;
}

/* A capped (or CUDA-core) plan over short chunks: two buffers in 2-warp blocks
 * (rt_decode_short_chunks) where that kernel has the same blocks resident, so the partition
 * stands. Not in CUDA-graph mode (the captured kernel may not change with the lengths), nor
 * under a tuning override of the block (FI_DECODE_WARPS, FI_DECODE_PIPELINE). mma_rows: the
 * rows of the rule's default key. */
static fi_status short_chunks(const ask *a, int64_t n, int chunk, int resident, int64_t mma_rows, jit_key *key) {
  const int sms = a->dev->sms;
  if (!((key->v[DECODE_P_PIPELINE] == DECODE_PIPE_CAPPED || key->v[DECODE_P_PIPELINE] == DECODE_PIPE_SIMT) &&
        rt_decode_short_chunks(n, a->info->batch, (int64_t)chunk * a->info->page_size, a->block_heads, sms,
                               a->group)))
    return FI_OK;
  jit_key k2 = *key;
  k2.v[DECODE_P_PIPELINE] = DECODE_PIPE_TWO_BUFFER;
  k2.v[DECODE_P_ROWS] = mma_rows;
  k2.v[DECODE_P_WARPS] = DECODE_WARPS_WIDE;
  int r2;
  fi_status st = a->dev->resident(a->dev->ctx, &k2, 32 * DECODE_WARPS_WIDE, &r2);
  if (st != FI_OK) return st;
  if (r2 > sms * RT_DECODE_MAX_BLOCKS_PER_SM) r2 = sms * RT_DECODE_MAX_BLOCKS_PER_SM;
  if (r2 == resident) *key = k2;
  return FI_OK;
}

int rt_decode_group_chunks(int num_qo_heads, int num_kv_heads) {
  const int g = num_kv_heads > 0 ? num_qo_heads / num_kv_heads : 1;
  int c = 1;
  while (g / c > 16 || g % c) c++;
  return c;
}

int rt_decode_tc_possible(const rt_tuning *t, int group) {
  return t->decode_tc == 1 || (t->decode_tc < 0 && group > 16);
}

int rt_decode_use_tc(const rt_tuning *t, int group, int64_t units, int q_dtype, int kv_dtype, int rope) {
  const int q16 = q_dtype == JIT_DT_F16 || q_dtype == JIT_DT_BF16;
  /* the prefill kernels take q's 16-bit cache, or an fp8 one without RoPE (*_prefill_fp8kv) */
  const int kv_ok = kv_dtype == q_dtype || ((kv_dtype == JIT_DT_E4M3 || kv_dtype == JIT_DT_E5M2) && !rope);
  return rt_decode_tc_possible(t, group) && (t->decode_tc == 1 || units >= RT_DECODE_TC_UNITS) && q16 && kv_ok;
}

fi_status rt_decode_choose(const char *fn, const fi_batch_decode_info *info_in, const fi_attention_params *p,
                           int64_t ws_bytes, const rt_tuning *t, const rt_decode_device *dev,
                           const rt_decode_tactic *stored, rt_decode_choice *out) {
  fi_status st;
  memset(out, 0, sizeof *out);
  /* Groups above 16: the grid's heads (rt_decode_group_chunks) stand for the KV heads from
   * here on; head pairs only where they are the cache's heads. */
  const int chunks = rt_decode_group_chunks(info_in->num_qo_heads, info_in->num_kv_heads);
  fi_batch_decode_info grid_info = *info_in;
  grid_info.num_kv_heads *= chunks;
  const fi_batch_decode_info *info = &grid_info;
  const int B = info->batch, graph = info->max_batch > 0;
  const int kvdt = rt_check_dtype(info->kv_dtype), rope = p->pos_encoding == FI_POS_ROPE_LLAMA;
  const int sms = dev->sms;
  rt_decode_layout *lay = &out->lay;
  rt_decode_ws_layout(t, graph ? info->max_batch : B, sms, info->num_qo_heads, info->num_kv_heads,
                      info->head_dim, lay);
  if (lay->bytes < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: info->%s %d with %d query heads of head_dim %d needs more than 2^63 bytes of workspace",
                   fn, graph ? "max_batch" : "batch", graph ? info->max_batch : B, info->num_qo_heads,
                   info->head_dim);
  if (lay->bytes > ws_bytes)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: workspace has %lld bytes; %lld are needed (fi_batch_decode_workspace_size)", fn,
                   (long long)ws_bytes, (long long)lay->bytes);
  /* KV head pairs (rt_decode_kv_pair): a block per request and pair of KV heads. */
  out->kv_pair = rt_decode_kv_pair(t->decode_kv_pair && chunks == 1, kvdt, info->head_dim, info->num_qo_heads,
                                   info->num_kv_heads, rope);
  /* A stored tactic: the tuning it names in place of the rule's, where no variable set it
   * (the workspace layout above stays the variables': it is what the caller sized). */
  rt_tuning tt = *t;
  if (stored) {
    if (!tt.decode_warps) tt.decode_warps = stored->warps;
    if (tt.decode_pipeline < 0) tt.decode_pipeline = stored->pipeline;
    if (tt.decode_split == 1.0) tt.decode_split = stored->split;
    t = &tt;
  }
  const ask a = {info, p, t, dev, graph, graph ? info->max_batch : B, kvdt, info->num_qo_heads / info->num_kv_heads,
                 rope, info->num_kv_heads / out->kv_pair};
  rule r;
  if ((st = rule_kernel(&a, &r)) != FI_OK) return st;
  int resident = r.resident;

  /* The split target: the blocks resident at once, over the blocks' KV heads. */
  if (resident > sms * RT_DECODE_MAX_BLOCKS_PER_SM) resident = sms * RT_DECODE_MAX_BLOCKS_PER_SM;
  int64_t target = rt_decode_target_items(resident, a.block_heads);
  /* FI_DECODE_SPLIT scales the split target (tuning; 1 by default): below 1 fewer,
   * longer chunks, above 1 more chunks than one wave of blocks. */
  target = (int64_t)(target * rt_dec_split_scale(t) + 0.5);
  if (target < 1) target = 1;
  if (target > lay->capacity) target = lay->capacity;
  if (target > 0x7fff) target = 0x7fff; /* a request's chunk count fits the item's 16 bits */
  int32_t *tab = malloc((size_t)(FI_DECODE_HDR_WORDS + lay->capacity * FI_DECODE_ITEM_WORDS) * 4);
  if (!tab) return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  memset(tab, 0, FI_DECODE_HDR_WORDS * 4);
  int chunk = 0;
  const int64_t n = rt_decode_partition(B, info->indptr, info->last_page_len, info->page_size, p->window_left,
                                        target, tab + FI_DECODE_HDR_WORDS, lay->capacity, &chunk);
  if (n < 0) {
    free(tab);
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: the batch does not fit the plan's %lld work items", fn,
                   (long long)lay->capacity);
  }
  if (!graph && !r.forced && (st = short_chunks(&a, n, chunk, resident, r.mma_rows, &r.key)) != FI_OK) {
    free(tab);
    return st;
  }
  tab[0] = (int32_t)n;
  tab[1] = B;
  tab[2] = chunk;
  tab[3] = n > B; /* split */
  out->key = r.key;
  out->chunk_pages = chunk;
  out->num_items = n;
  out->tab = tab;
  return FI_OK;
}

/* ---- stored tactics ---- */

int rt_decode_tactic_parse(const char *s, rt_decode_tactic *t) {
  int w, pl, used = 0;
  double sp;
  if (!s || sscanf(s, "warps=%d;pipeline=%d;split=%lf%n", &w, &pl, &sp, &used) != 3 || s[used]) return -1;
  if ((w != 1 && w != 2 && w != 4 && w != 8) || pl < 0 || pl > DECODE_PIPE_SIMT || !(sp >= 1.0 / 64 && sp <= 64))
    return -1;
  *t = (rt_decode_tactic){w, pl, sp};
  return 0;
}

int rt_decode_tactic_format(const rt_decode_tactic *t, char *buf, size_t n) {
  const int w = snprintf(buf, n, "warps=%d;pipeline=%d;split=%g", t->warps, t->pipeline, t->split);
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

void rt_decode_tactic_key(const fi_batch_decode_info *info, const fi_attention_params *p, int64_t *f,
                          int64_t *bucket) {
  const int graph = info->max_batch > 0;
  int64_t mean = 0, longest = 0;
  if (!graph)
    rt_decode_token_stats(info->batch, info->indptr, info->last_page_len, info->page_size, p->window_left, &mean,
                          &longest);
  f[0] = rt_check_dtype(info->q_dtype), f[1] = rt_check_dtype(info->kv_dtype);
  f[2] = info->num_qo_heads, f[3] = info->num_kv_heads, f[4] = info->head_dim, f[5] = info->page_size;
  f[6] = p->pos_encoding == FI_POS_ROPE_LLAMA;
  f[7] = graph ? -1 : fi_tune_bucket(mean > 0 ? mean : 1);
  *bucket = fi_tune_bucket(graph ? info->max_batch : info->batch);
}

void rt_decode_tactic_shape(const int64_t *f, char *buf, size_t n) {
  char len[24];
  if (f[7] < 0)
    snprintf(len, sizeof len, "graph");
  else
    snprintf(len, sizeof len, "%lld", (long long)f[7]);
  const char *q = jit_dtype_name((int)f[0]), *kv = jit_dtype_name((int)f[1]);
  snprintf(buf, n, "q=%s;kv=%s;heads=%lld/%lld;head_dim=%lld;page=%lld;rope=%lld;len=%s", q ? q : "?", kv ? kv : "?", (long long)f[2], (long long)f[3], (long long)f[4], (long long)f[5],
           (long long)f[6], len);
}
