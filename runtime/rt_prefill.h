/* rt_prefill.h: the batch prefill planner (pure host code, tested on the CPU) and the
 * workspace layout the plan and the kernels share. */
#ifndef RT_PREFILL_H
#define RT_PREFILL_H

#include <stddef.h>
#include <stdint.h>

#include "prefill_params.h"

/* Blocks of the prefill kernel the split planner aims at per SM, and the most. */
#define RT_PREFILL_BLOCKS_PER_SM 2
/* Fewest KV tokens a split chunk gets. */
#define RT_PREFILL_MIN_CHUNK 256
/* Rows a partial slot holds: the largest q tile. */
#define RT_PREFILL_SLOT_ROWS FI_PREFILL_SLOT_ROWS

/* Where the plan's tables sit in the workspace (bytes from its start). */
typedef struct rt_prefill_layout {
  int64_t capacity;   /* work items the workspace holds (the grid of a CUDA-graph plan) */
  int64_t slots;      /* partial slots (split chunks) it holds */
  int64_t items_off, partial_o_off, partial_lse_off, bytes;
} rt_prefill_layout;

/* The layout for plans of up to max_batch requests and max_qo_tokens query tokens on sms SMs. */
void rt_prefill_layout_for(int64_t max_batch, int64_t max_qo_tokens, int sms, int num_qo_heads,
                           int num_kv_heads, int head_dim, rt_prefill_layout *l);

/* The KV range [lo, hi) rows r0 .. r0 + rows - 1 (packed, group g) of a request with
 * L_q query and L_kv KV tokens attend (the kernel's single-prefill formula). */
void rt_prefill_tile_range(int64_t r0, int64_t rows, int group, int64_t lq, int64_t lkv,
                           int causal, int window_left, int64_t *lo, int64_t *hi);

/* A batch as the planner sees it: request b's query tokens qo_indptr[b] .. qo_indptr[b+1],
 * kv_len[b] KV tokens whose first token (ragged) or page (paged) is kv_base[b]. */
typedef struct rt_prefill_batch {
  int batch;
  const int32_t *qo_indptr;
  const int64_t *kv_len;
  const int32_t *kv_base;
  int group, num_kv_heads, q_tile, kv_tile, causal, window_left;
} rt_prefill_batch;

/* The work partition: one item per q tile (FI_PREFILL_ITEM_WORDS int32 each, layout in
 * prefill_params.h; requests in order, each one's tiles from the last to the first), tiles cut into KV chunks of *chunk tokens (a multiple of kv_tile)
 * when the tiles times num_kv_heads are fewer than target blocks, using at most
 * max_slots partial slots. At most max_items items (else -1). Returns the number of
 * items; *slots_used gets the partial slots used. */
int64_t rt_prefill_partition(const rt_prefill_batch *bt, int64_t target, int32_t *items,
                             int64_t max_items, int64_t max_slots, int64_t *chunk,
                             int64_t *slots_used);

/* Checks host qo_indptr and kv lengths: monotone, in range, L_q <= L_kv when causal, the
 * total query tokens within max_qo_tokens (> 0). 0, or -1 with a message in err. */
int rt_prefill_check_batch(int batch, const int32_t *qo_indptr, const int64_t *kv_len,
                           int causal, int64_t max_qo_tokens, char *err, size_t errlen);

/* For the CPU tests: fi_batch_prefill_*_plan without a device (no kernel load, no
 * upload) on sms SMs; paged selects the paged variant. */
struct fi_prefill_plan;
struct fi_batch_prefill_info;
struct fi_prefill_params;
int rt_prefill_plan_offline(const struct fi_batch_prefill_info *info,
                            const struct fi_prefill_params *p, int paged, void *workspace,
                            int devtype, int sms, struct fi_prefill_plan **plan);
/* The wgmma kernel's key on a Hopper device for a call of rows packed query rows, no
 * request attending more than maxkv KV tokens (-1: not known), the soft cap on or not:
 * the shape rule (rt_prefill_choose.c) and its tuning variables (FI_PREFILL_WG, _WS, _STAGES: t,
 * the runtime's rt_tuning, or rt_tuning_default()).
 * Pure, so that the CPU tests can hold it to what a re-plan needs. */
struct jit_key;
struct rt_tuning;
void rt_prefill_wgmma_key(const struct rt_tuning *t, int single, int dt, int head_dim, int64_t rows, int64_t maxkv, int cap,
                          struct jit_key *key);
/* The maxkv that rule gets in a batch plan: a fresh plan's longest request, a re-plan's
 * choice read from its plan's key (plan_key; NULL for a fresh plan), -1 in CUDA-graph
 * mode. */
int64_t rt_prefill_kvsel(const struct jit_key *plan_key, int graph, int64_t maxkv);
/* The plan's items (host copy) and count, for the CPU tests. */
const int32_t *rt_prefill_plan_items(const struct fi_prefill_plan *plan, int64_t *n);

#endif
