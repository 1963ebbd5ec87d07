/* rt_decode.h: the batch decode planner (pure host code, tested on the CPU) and the
 * workspace layout the plan and the kernels share. */
#ifndef RT_DECODE_H
#define RT_DECODE_H

#include <stddef.h>
#include <stdint.h>

/* Where the plan's tables sit in the workspace (bytes from its start). */
typedef struct rt_decode_layout {
  int64_t capacity;   /* work items the workspace holds (the grid of a CUDA-graph plan) */
  int64_t items_off, counters_off, partial_o_off, partial_lse_off, bytes;
} rt_decode_layout;

/* Blocks of the decode kernel that run at once on a device of sms SMs, at most. */
#define RT_DECODE_MAX_BLOCKS_PER_SM 4

/* Warps a batch-decode block over a 16-bit cache gets, from the blocks the requests
 * alone make (one per request and KV head) against resident_wide, how many 2-warp
 * blocks fit on the device at once: DECODE_WARPS_ONE (1) when they fill nearly a wave
 * of 1-warp blocks (2 x resident_wide; 15/16 of it), else DECODE_WARPS_WIDE (2) when
 * they fill a wave of 4-warp blocks (resident_wide / 2), else DECODE_WARPS_SPLIT (4),
 * and the planner splits the requests. An fp8 cache (kv_dtype JIT_DT_E4M3 or _E5M2) has
 * no 1-warp kernel: 2 or 4 by the same rule. */
int rt_decode_pick_warps(int kv_dtype, int64_t requests, int num_kv_heads, int64_t resident_wide);

/* The pipeline key value of a batch plan whose selected default is `pipeline`: the
 * two-buffer kernel (1) instead of DECODE_PIPE_CAPPED when a split would cut each of
 * the requests into more than 16 chunks, or when the blocks (requests x block_heads) fill
 * 80-100% of a wave of two-buffer blocks and the requests are near equal and short: the
 * longest (max_tokens) at most RT_DECODE_TWO_BUFFER_MAX_TOKENS and within 5/4 of the mean
 * (mean_tokens; 0: unknown, that window off); else unchanged. */
#define RT_DECODE_TWO_BUFFER_BLOCKS_PER_SM 2
#define RT_DECODE_TWO_BUFFER_MAX_TOKENS 2048
int rt_decode_pick_pipeline(int pipeline, int64_t requests, int sms, int block_heads, int64_t mean_tokens,
                            int64_t max_tokens);

/* The warps a block of a plan that rt_decode_pick_pipeline switched to two buffers:
 * DECODE_WARPS_WIDE (2) for groups of up to 4 query heads a KV head, when the requests are
 * too few to fill the capped kernel's wave (its first rule) but their blocks
 * (requests x block_heads) are enough that 2-warp blocks cut each request into at most
 * about 33 chunks (blocks x 33 >= 4 x sms); else DECODE_WARPS_SPLIT (4). */
int rt_decode_switched_warps(int64_t requests, int sms, int block_heads, int group);

/* Whether a capped plan's partition (items work items for requests requests, chunks of
 * chunk_tokens) runs better on the two-buffer kernel in 2-warp blocks, which has the same
 * blocks resident (so the partition stands): groups up to 4, split requests, chunks of
 * at most 256 tokens, or of at most 1024 where the blocks (items x block_heads) fill 90%
 * of a wave of 4 an SM. */
int rt_decode_short_chunks(int64_t items, int64_t requests, int64_t chunk_tokens, int block_heads, int sms,
                           int group);

/* Mean and longest of the KV tokens the batch's requests read (their pages and
 * last_page_len, within window_left as rt_decode_partition cuts them; the mean at least 1
 * when batch > 0, 0 for an empty batch). */
void rt_decode_token_stats(int batch, const int32_t *indptr, const int32_t *last_page_len, int page_size,
                           int window_left, int64_t *mean_tokens, int64_t *max_tokens);

/* KV heads a batch-decode block reads: 2 (a pair of adjacent heads, 256 bytes a token
 * instead of 128) for an fp8 cache at head_dim 128 with a group of at most 4, an even
 * num_kv_heads and no RoPE (kernels/decode.cuh), unless `on` is 0 (FI_DECODE_KV_PAIR=0,
 * rt_tuning.decode_kv_pair); else 1. The run still takes one head a block where the
 * heads' rows are not adjacent (kv_stride_head != head_dim). */
int rt_decode_kv_pair(int on, int kv_dtype, int head_dim, int num_qo_heads, int num_kv_heads, int rope);

/* Items the split planner aims at: one wave of `slots` blocks over num_kv_heads heads. */
int64_t rt_decode_target_items(int64_t slots, int num_kv_heads);

/* The workspace layout for plans of up to max_batch requests on sms SMs; bytes (and the
 * offsets past the overflow) -1 where it would pass 2^63 bytes. */
void rt_decode_layout_for(int64_t max_batch, int sms, int num_qo_heads, int num_kv_heads,
                          int head_dim, rt_decode_layout *l);

/* The work partition. Requests b < batch with pages indptr[b]..indptr[b+1] (host
 * copies) and last_page_len[b] tokens in the last page; window_left >= 0 limits each
 * request to its last window_left + 1 tokens. Splits the requests into chunks of
 * *chunk_pages pages when batch is below target (items <= target), else one item per
 * request. items gets FI_DECODE_ITEM_WORDS int32 a work item (decode_params.h); at most
 * max_items (else -1). Returns the number of items. */
int64_t rt_decode_partition(int batch, const int32_t *indptr, const int32_t *last_page_len,
                            int page_size, int window_left, int64_t target, int32_t *items,
                            int64_t max_items, int *chunk_pages);

/* Below this many attended tokens single decode runs unsplit: the split's fixed costs (the
 * scratch and the merge launch) would eat its gain. H100, 32/8 bf16, split against unsplit:
 * 512 tokens 10.8 us against 14.3-14.6, 2048 13.0 against 43.3, 8192 21.4 against 155
 * (docs/decode.md, 2026-12-06, thirty-third session); shorter lengths were not measured. */
#define RT_SINGLE_SPLIT_MIN_TOKENS 512

/* Single decode's split: from RT_SINGLE_SPLIT_MIN_TOKENS tokens attended (L, or the window), cut into at most one
 * wave of `resident` blocks over num_kv_heads heads, each chunk at least MIN_CHUNK_TOKENS
 * and a multiple of 32 tokens (a warp step), the last one the rest. Returns the chunk
 * count (1: no split; at most 0x7fff) and *chunk_tokens. */
int rt_single_decode_chunks(int64_t tokens, int num_kv_heads, int64_t resident, int *chunk_tokens);

/* Checks host indptr / last_page_len; 0 or -1 with a message naming the entry in err. */
int rt_decode_check_pages(int batch, const int32_t *indptr, const int32_t *last_page_len,
                          int page_size, char *err, size_t errlen);
/* The same, the names in err prefixed by pfx (batch prefill's "kv_": kv_indptr). */
int rt_decode_check_pages_named(int batch, const int32_t *indptr, const int32_t *last_page_len, int page_size,
                                const char *pfx, char *err, size_t errlen);

/* For the CPU tests: a plan made without a device (no kernel load, no upload), with
 * sms SMs and `resident` blocks at once, so fi_batch_decode_run's checks can be reached. */
struct fi_decode_plan;
struct fi_batch_decode_info;
struct fi_attention_params;
int rt_decode_plan_offline(const struct fi_batch_decode_info *info,
                           const struct fi_attention_params *p, void *workspace, int devtype,
                           int sms, int resident, struct fi_decode_plan **plan);
/* For the CPU tests: the kernel a plan runs. */
struct jit_key;
const struct jit_key *rt_decode_plan_key(const struct fi_decode_plan *plan);

#endif
