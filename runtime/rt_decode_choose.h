/* rt_decode_choose.h: batch decode's kernel choice as one pure function, rt_decode_choose:
 * the request (info, params, the workspace's size), the tuning read once at
 * fi_runtime_create (rt_tuning) and the device (its SMs and an occupancy callback) give the
 * kernel's key and the plan's work partition. fi_batch_decode_plan calls it with the
 * driver's occupancy; the CPU tests and the presets with rt_decode_device_model's. The rules
 * it composes are below (each pinned by tests/test_decode_args.c); the keys they can
 * return are jit/ops_decode.c's registered configurations. */
#ifndef RT_DECODE_CHOOSE_H
#define RT_DECODE_CHOOSE_H

#include <stddef.h>
#include <stdint.h>

#include "fi_runtime.h"
#include "jit_key.h"
#include "rt_decode.h"
#include "rt_env.h"

/* KV heads a block reads under head pairs (rt_decode_kv_pair); else 1. */
#define RT_DECODE_KV_PAIR 2

/* The device as the choice sees it. */
typedef struct rt_decode_device {
  int sms; /* its SMs (> 0) */
  /* How many blocks of key's kernel, `threads` threads each, fit on the whole device at
   * once (rt_kernel_resident on a device, which loads the kernel, compiling it if need be;
   * a model without one). FI_OK, or the error (reported with rt_fail). */
  fi_status (*resident)(void *ctx, const jit_key *key, int threads, int *blocks);
  void *ctx;
} rt_decode_device;

/* A device of sms SMs without a driver (the presets, the CPU tests): every decode kernel
 * has 8 warps an SM resident (blocks of 1, 2, 4 or 8 warps: 8, 4, 2 or 1 an SM), what the
 * planner assumed before it asked the driver. */
rt_decode_device rt_decode_device_model(int sms);

/* A stored tactic (issue 43): the block's warps, the pipeline and the split target's scale
 * measured best for a request's shape on a kind of device, used in place of the rule's as
 * FI_DECODE_WARPS, FI_DECODE_PIPELINE and FI_DECODE_SPLIT would set them (each only where
 * that variable is not set: an operator's override wins). Text: "warps=4;pipeline=2;split=1". */
typedef struct rt_decode_tactic {
  int warps;    /* 1, 2, 4 or 8 */
  int pipeline; /* DECODE_PIPE_* (jit/ops_decode.h) */
  double split; /* the split target's scale, 1/64 to 64 */
} rt_decode_tactic;
/* 0, or -1 for text that is not a decode tactic (or values out of range). */
int rt_decode_tactic_parse(const char *s, rt_decode_tactic *t);
int rt_decode_tactic_format(const rt_decode_tactic *t, char *buf, size_t n);
/* A plan's stored-tactic key: its shape text ("q=bf16;kv=bf16;heads=32/8;head_dim=128;
 * page=16;rope=0;len=4096", len the bucket of the requests' mean KV length, or "graph" in
 * CUDA-graph mode, where lengths never decide) and its token bucket (of the batch, or
 * max_batch). The numbers in fields (RT_DECODE_TACTIC_FIELDS of them), for rt_tactic_cached. */
#define RT_DECODE_TACTIC_FIELDS 8
void rt_decode_tactic_key(const fi_batch_decode_info *info, const fi_attention_params *p, int64_t *fields,
                          int64_t *bucket);
void rt_decode_tactic_shape(const int64_t *fields, char *buf, size_t n);

/* What rt_decode_choose gives. */
typedef struct rt_decode_choice {
  jit_key key;          /* the kernel */
  rt_decode_layout lay; /* where the tables sit in the workspace */
  int kv_pair;          /* KV heads a block: 1 or RT_DECODE_KV_PAIR */
  int chunk_pages;      /* pages a chunk of a split request */
  int64_t num_items;    /* work items */
  int32_t *tab;         /* FI_DECODE_HDR_WORDS header words, then the items: the table the plan
                           uploads (malloc'ed; the caller frees it) */
} rt_decode_choice;

/* The kernel and the partition of a batch decode plan: info and p checked (as
 * fi_batch_decode_plan does), a workspace of ws_bytes bytes, tuning t, device dev, stored
 * stored (NULL: the rule). In order: the workspace layout (refused past ws_bytes), KV head pairs, the rule's
 * kernel (the default key, then rt_decode_pick_pipeline / rt_decode_switched_warps, the
 * tuning overrides, rt_decode_pick_warps by the 2-warp kernel's residency, rt_dec_pick_simt),
 * the split target from the chosen kernel's residency, the partition, and last
 * rt_decode_short_chunks. Asks dev->resident the same kernels in the same order each call. A
 * CUDA-graph plan (info->max_batch > 0) decides by max_batch and never by the lengths, so
 * that re-plans keep the captured kernel. FI_OK, or an error reported with rt_fail (fn
 * names the entry point), out->tab then NULL. */
fi_status rt_decode_choose(const char *fn, const fi_batch_decode_info *info, const fi_attention_params *p,
                           int64_t ws_bytes, const rt_tuning *t, const rt_decode_device *dev,
                           const rt_decode_tactic *stored, rt_decode_choice *out);

/* The workspace layout for plans of up to max_batch requests on sms SMs under tuning t:
 * items for one wave of blocks or max_batch, and for FI_DECODE_SPLIT's scaled target above
 * 1 (so that the knob can cut requests into more chunks than a wave). */
void rt_decode_ws_layout(const rt_tuning *t, int64_t max_batch, int sms, int num_qo_heads, int num_kv_heads,
                         int head_dim, rt_decode_layout *l);

/* The plan fi_batch_decode_plan makes (rt_decode.c), on the host alone: the same checks
 * and the same choice (rt_decode_choose) on dev, a device model, under tuning t, nothing
 * uploaded; the workspace at `workspace` (never written) taken to be large enough. So that
 * the CPU tests reach fi_batch_decode_run's checks. FI_OK, or the plan's error. */
struct fi_decode_plan;
fi_status rt_decode_plan_host(const rt_decode_device *dev, const rt_tuning *t, const fi_batch_decode_info *info,
                              const fi_attention_params *p, void *workspace, int devtype,
                              struct fi_decode_plan **plan);

/* ---- the rules ---- */

/* Warps a batch-decode block over a 16-bit cache gets, from the blocks the requests
 * alone make (one per request and KV head) against resident_wide, how many 2-warp
 * blocks fit on the device at once: DECODE_WARPS_ONE (1) when they fill nearly a wave
 * of 1-warp blocks (2 x resident_wide; 15/16 of it), else DECODE_WARPS_WIDE (2) when
 * they fill a wave of 4-warp blocks (resident_wide / 2), else DECODE_WARPS_SPLIT (4),
 * and the planner splits the requests. An fp8 cache (kv_dtype JIT_DT_E4M3 or _E5M2) has
 * no 1-warp kernel: 2 or 4 by the same rule. */
int rt_decode_pick_warps(int kv_dtype, int64_t requests, int num_kv_heads, int64_t resident_wide);

/* The pipeline key value of a batch plan whose selected default is `pipeline`: the
 * two-buffer kernel (DECODE_PIPE_TWO_BUFFER) instead of DECODE_PIPE_CAPPED when a split
 * would cut each of the requests into more than 16 chunks, or when the blocks (requests x
 * block_heads) fill 80-100% of a wave of two-buffer blocks and the requests are near equal
 * and short: the longest (max_tokens) at most RT_DECODE_TWO_BUFFER_MAX_TOKENS and within
 * 5/4 of the mean (mean_tokens; 0: unknown, that window off); else unchanged. */
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

/* KV heads a batch-decode block reads: RT_DECODE_KV_PAIR (a pair of adjacent heads, 256
 * bytes a token instead of 128) for an fp8 cache at head_dim 128 with a group of at most 4,
 * an even num_kv_heads and no RoPE (kernels/decode.cuh), unless `on` is 0
 * (FI_DECODE_KV_PAIR=0, rt_tuning.decode_kv_pair); else 1. The run still takes one head a
 * block where the heads' rows are not adjacent (kv_stride_head != head_dim). */
int rt_decode_kv_pair(int on, int kv_dtype, int head_dim, int num_qo_heads, int num_kv_heads, int rope);

/* Groups above 16 query heads a KV head (MQA, wide GQA; up to RT_DECODE_MAX_GROUP): each KV
 * head's group is cut into this many grid heads of group / chunks rows (at most 16: the
 * fewest chunks that divide the group), each reading its KV head (the kernel's
 * kv_head_div); 1 for groups of 16 or fewer. The plan, its workspace and the run count
 * grid heads (num_kv_heads x chunks) where they counted KV heads. */
int rt_decode_group_chunks(int num_qo_heads, int num_kv_heads);

/* Tensor-core decode: a batch whose group is above 16 query heads a KV head runs on the
 * batch prefill kernels (one query token a request, the group's heads a q tile's rows),
 * which stage each KV tile in shared memory once for the whole group; the decode kernel
 * reads a KV head once for every 16 of its query heads (rt_decode_group_chunks). Measured
 * on an H100 (docs/decode.md): 64/1 B=64 L=4096 1.33x faster that way, 64/2 1.06x, 32/1
 * level, but B=16 and B=4 at L=32768 0.70x and 0.41x (the prefill split's chunks and merge
 * cost more than the re-reads): so only for requests x KV heads of RT_DECODE_TC_UNITS or
 * more (max_batch's in CUDA-graph mode, where the route then stays; otherwise a re-plan
 * may switch it). rt_decode_tc_possible: whether a plan of this group may (the workspace is
 * sized for both then); rt_decode_use_tc: whether it does, which also needs the prefill
 * kernels' dtypes (q and a 16-bit cache of one dtype, or an fp8 cache without RoPE: the
 * mma.sync kernel of *_prefill_fp8kv). FI_DECODE_TC (t->decode_tc) 0 never, 1 at every
 * group and batch. */
#define RT_DECODE_TC_UNITS 64
int rt_decode_tc_possible(const rt_tuning *t, int group);
int rt_decode_use_tc(const rt_tuning *t, int group, int64_t units, int q_dtype, int kv_dtype, int rope);

/* Whether a plan on `pipeline` (its kernel so far) runs the CUDA-core kernel
 * (DECODE_PIPE_SIMT) instead: the capped kernel at group 1 where that kernel exists. */
int rt_dec_pick_simt(int pipeline, int kv_dtype, int head_dim, int group, int rope);

/* Tuning overrides of the block shape, for fi-bench's comparisons: FI_DECODE_WARPS
 * (1, 2, 4 or 8 warps a block, instead of the plan's choice) and FI_DECODE_PIPELINE
 * (DECODE_PIPE_K_ONLY, DECODE_PIPE_TWO_BUFFER, DECODE_PIPE_CAPPED or DECODE_PIPE_SIMT)
 * for a plan of `group` query heads a KV head. Returns RT_DEC_TUNED_WARPS and
 * RT_DEC_TUNED_PIPELINE, or'ed, for the overrides applied. */
#define RT_DEC_TUNED_WARPS 1
#define RT_DEC_TUNED_PIPELINE 2
int rt_dec_tune_key(const rt_tuning *t, jit_key *key, int group);

#endif
