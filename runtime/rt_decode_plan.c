/* rt_decode_plan.c: the batch decode planner: how the requests' KV tokens are cut into
 * work items (split-KV when the batch cannot fill the device) and where the tables go. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "decode_params.h"
#include "ops_decode.h"
#include "rt_decode.h"

/* Fewest tokens a split chunk gets: below this the fixed costs of a block (q, the
 * merge of its warps and of the chunks) outweigh what it reads. */
#define MIN_CHUNK_TOKENS 128

static int64_t align256(int64_t x) { return (x + 255) & ~(int64_t)255; }

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
  if (too_few_for_capped(requests, sms, block_heads)) return 1;
  const int64_t s = sms > 0 ? sms : 1;
  const int64_t blocks = requests * (block_heads > 0 ? block_heads : 1), wave = s * RT_DECODE_TWO_BUFFER_BLOCKS_PER_SM;
  if (mean_tokens > 0 && max_tokens <= RT_DECODE_TWO_BUFFER_MAX_TOKENS && max_tokens * 4 <= mean_tokens * 5 &&
      blocks <= wave && blocks * 5 >= wave * 4)
    return 1;
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
  return num_qo_heads / num_kv_heads <= 4 ? 2 : 1;
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

int64_t rt_decode_target_items(int64_t slots, int num_kv_heads) {
  int64_t t = slots / (num_kv_heads > 0 ? num_kv_heads : 1);
  return t > 0 ? t : 1;
}

int rt_single_decode_chunks(int64_t tokens, int num_kv_heads, int64_t resident, int *chunk_tokens) {
  const int64_t t = tokens > 0 ? tokens : 0;
  int64_t n = t < RT_SINGLE_SPLIT_MIN_TOKENS ? 1 : rt_decode_target_items(resident, num_kv_heads),
          most = t / MIN_CHUNK_TOKENS;
  if (n > most) n = most;
  if (n > 0x7fff) n = 0x7fff;
  if (n < 2) {
    *chunk_tokens = t > INT32_MAX ? INT32_MAX : (int)t;
    return 1;
  }
  int64_t c = (t + n - 1) / n;
  c = (c + 31) & ~(int64_t)31;
  *chunk_tokens = (int)c;
  return (int)((t + c - 1) / c); /* c >= t / n: no empty chunk at the end */
}

/* The 256-aligned end of a region of n x per bytes from at; -1 past 2^63 (or at -1). */
static int64_t region_end(int64_t at, int64_t n, int64_t per) {
  int64_t size, end;
  if (at < 0 || __builtin_mul_overflow(n, per, &size) || __builtin_add_overflow(at, size, &end) ||
      end > INT64_MAX - 255)
    return -1;
  return align256(end);
}

void rt_decode_layout_for(int64_t max_batch, int sms, int num_qo_heads, int num_kv_heads,
                          int head_dim, rt_decode_layout *l) {
  const int64_t target =
      rt_decode_target_items((int64_t)(sms > 0 ? sms : 1) * RT_DECODE_MAX_BLOCKS_PER_SM, num_kv_heads);
  const int64_t cap = max_batch > target ? max_batch : target;
  l->capacity = cap;
  l->items_off = FI_DECODE_HDR_WORDS * 4;
  /* Checked: a huge max_batch with millions of heads passes 2^63 bytes, and a wrapped
   * size would let the plan accept a workspace that is too small. */
  l->counters_off = region_end(l->items_off, cap, FI_DECODE_ITEM_WORDS * 4);
  l->partial_o_off = region_end(l->counters_off, cap, (int64_t)num_kv_heads * 4);
  /* partials in the output dtype (fp16 or bf16) */
  l->partial_lse_off = region_end(l->partial_o_off, cap, (int64_t)num_qo_heads * head_dim * 2);
  l->bytes = region_end(l->partial_lse_off, cap, (int64_t)num_qo_heads * 4);
}

int rt_decode_check_pages_named(int batch, const int32_t *indptr, const int32_t *last_page_len, int page_size,
                                const char *pfx, char *err, size_t errlen) {
  if (indptr[0] < 0) {
    snprintf(err, errlen, "%sindptr[0] is %d; page offsets start at 0 or more", pfx, indptr[0]);
    return -1;
  }
  for (int b = 0; b < batch; b++) {
    const int64_t np = (int64_t)indptr[b + 1] - indptr[b];
    if (np < 0) {
      snprintf(err, errlen, "%sindptr is not monotone: %sindptr[%d] = %d > %sindptr[%d] = %d", pfx,
               pfx, b, indptr[b], pfx, b + 1, indptr[b + 1]);
      return -1;
    }
    const int32_t last = last_page_len[b];
    if (np > 0 && (last < 1 || last > page_size)) {
      snprintf(err, errlen, "%slast_page_len[%d] is %d; 1..page_size (%d) is needed for a request with pages",
               pfx, b, last, page_size);
      return -1;
    }
    if (np == 0 && last != 0) {
      snprintf(err, errlen, "%slast_page_len[%d] is %d but request %d has no pages (0 is needed)", pfx,
               b, last, b);
      return -1;
    }
    if ((np - 1) * page_size + last > INT32_MAX) {
      snprintf(err, errlen, "%sindptr[%d..%d] and %slast_page_len[%d] give request %d more than 2^31-1 tokens",
               pfx, b, b + 1, pfx, b, b);
      return -1;
    }
  }
  return 0;
}

int rt_decode_check_pages(int batch, const int32_t *indptr, const int32_t *last_page_len, int page_size, char *err,
                          size_t errlen) {
  return rt_decode_check_pages_named(batch, indptr, last_page_len, page_size, "", err, errlen);
}

/* A request's attended tokens [start, len) and its pages [p0, p1). */
static void span(const int32_t *indptr, const int32_t *last, int b, int page_size,
                 int window_left, int64_t *start, int64_t *len, int64_t *p0, int64_t *p1) {
  const int64_t np = (int64_t)indptr[b + 1] - indptr[b];
  *len = np > 0 ? (np - 1) * page_size + last[b] : 0;
  *start = window_left >= 0 && *len - 1 - window_left > 0 ? *len - 1 - window_left : 0;
  *p0 = *start / page_size;
  *p1 = (*len + page_size - 1) / page_size;
}

void rt_decode_token_stats(int batch, const int32_t *indptr, const int32_t *last_page_len, int page_size,
                           int window_left, int64_t *mean_tokens, int64_t *max_tokens) {
  int64_t total = 0, mx = 0;
  for (int b = 0; b < batch; b++) {
    int64_t s, l, p0, p1;
    span(indptr, last_page_len, b, page_size, window_left, &s, &l, &p0, &p1);
    total += l - s;
    if (l - s > mx) mx = l - s;
  }
  *mean_tokens = batch <= 0 ? 0 : total / batch > 0 ? total / batch : 1;
  *max_tokens = mx;
}

int64_t rt_decode_partition(int batch, const int32_t *indptr, const int32_t *last_page_len,
                            int page_size, int window_left, int64_t target, int32_t *items,
                            int64_t max_items, int *chunk_pages) {
  int64_t maxp = 0;
  for (int b = 0; b < batch; b++) {
    int64_t s, l, p0, p1;
    span(indptr, last_page_len, b, page_size, window_left, &s, &l, &p0, &p1);
    if (p1 - p0 > maxp) maxp = p1 - p0;
  }
  /* chunk: pages per item; maxp (or more) means one item per request. */
  int64_t chunk = maxp > 0 ? maxp : 1;
  if (batch < target && maxp > 1) {
    int64_t lo = (MIN_CHUNK_TOKENS + (int64_t)page_size - 1) / page_size, hi = maxp; /* no int overflow */
    if (lo < 1) lo = 1;
    if (lo > hi) lo = hi;
    /* The smallest chunk whose item count fits the target (it falls as chunk grows). */
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      int64_t n = 0;
      for (int b = 0; b < batch && n <= target; b++) {
        int64_t s, l, p0, p1;
        span(indptr, last_page_len, b, page_size, window_left, &s, &l, &p0, &p1);
        n += p1 > p0 ? (p1 - p0 + mid - 1) / mid : 1;
      }
      if (n <= target)
        hi = mid;
      else
        lo = mid + 1;
    }
    chunk = lo;
  }
  if (chunk > INT32_MAX) chunk = INT32_MAX;
  *chunk_pages = (int)chunk;
  int64_t n = 0;
  for (int b = 0; b < batch; b++) {
    int64_t s, l, p0, p1;
    span(indptr, last_page_len, b, page_size, window_left, &s, &l, &p0, &p1);
    const int64_t nc = p1 > p0 ? (p1 - p0 + chunk - 1) / chunk : 1;
    if (nc > 0x7fff || n + nc > max_items) return -1;
    for (int64_t k = 0; k < nc; k++) {
      int64_t t0 = (p0 + k * chunk) * page_size, t1 = (p0 + (k + 1) * chunk) * page_size;
      if (t0 < s) t0 = s;
      if (t1 > l) t1 = l;
      if (l == 0) t0 = t1 = 0;
      int32_t *it = items + FI_DECODE_ITEM_WORDS * n++;
      it[0] = b;
      it[1] = (int32_t)t0;
      it[2] = (int32_t)t1;
      it[3] = (int32_t)(k | (nc << 16));
      it[4] = indptr[b];
      it[5] = (int32_t)l;
      it[6] = it[7] = 0;
    }
  }
  return n;
}
