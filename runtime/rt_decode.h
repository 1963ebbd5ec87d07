/* rt_decode.h: the batch decode planner (pure host code, tested on the CPU) and the
 * workspace layout the plan and the kernels share (the kernel choice: rt_decode_choose.h). */
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

/* Mean and longest of the KV tokens the batch's requests read (their pages and
 * last_page_len, within window_left as rt_decode_partition cuts them; the mean at least 1
 * when batch > 0, 0 for an empty batch). */
void rt_decode_token_stats(int batch, const int32_t *indptr, const int32_t *last_page_len, int page_size,
                           int window_left, int64_t *mean_tokens, int64_t *max_tokens);

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

#endif
