/* rt_prefill_args.h: what the prefill entry points (rt_prefill.c: batch; rt_prefill_single.c)
 * share: the checks (rt_prefill_args.c), the kernel choice of a call (rt_prefill_choose.c)
 * and the launch. */
#ifndef RT_PREFILL_ARGS_H
#define RT_PREFILL_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "fi_runtime.h"
#include "jit_key.h"
#include "prefill_params.h"

/* Heads (any group), head_dim, dtypes (one 16-bit dtype) and the parameters. */
fi_status rt_prefill_check_common(const char *fn, int64_t hq, int64_t hkv, int64_t D, int qdt, int kvdt, DLDataType qd,
                                  DLDataType kvd, const fi_prefill_params *p);
/* The kernel's scale, soft cap, value scale, RoPE, causal and window fields. */
/* The kernel's scale fields (k_scale, v_scale and an e4m3 cache's widening: kvdt, the
 * cache's dtype), RoPE frequencies, causal and window. */
void rt_prefill_fill_scalars(fi_prefill_kparams *k, const fi_prefill_params *p, int D, int kvdt);
/* q [rows, H_qo, D], out [rows, H_qo, DV] (DV: q's D unless V's head_dim differs): shapes,
 * dtypes, row layout; lse [rows, H_qo]. */
fi_status rt_prefill_check_q_out(const char *fn, const DLTensor *q, const DLTensor *out, const DLTensor *lse, int dt,
                                 int64_t DV);
/* Contiguous k and v (single prefill, the ragged run): rows of elem_bytes elements as
 * rt_check_rows, and equal strides (own strides: V's head_dim differs, dvo). */
fi_status rt_prefill_check_kv_rows(const char *fn, const DLTensor *k, const DLTensor *v, int elem_bytes, int dvo);
/* V's head_dim DV apart from D (the *_dvo kernels): (D, DV) = (192, 128), no RoPE, no fp8
 * cache, no custom mask; what names the head dims in messages: vname ("v's head_dim",
 * "extras->head_dim_vo"). FI_OK also for DV == D. */
fi_status rt_prefill_check_dvo(const char *fn, int64_t D, int64_t DV, const char *vname, int qdt, int kvdt,
                               const fi_prefill_params *p, int mask);
/* Its first part: the pair (D, DV) alone. */
fi_status rt_prefill_check_dvo_pair(const char *fn, int64_t D, int64_t DV, const char *vname);
/* The loaded kernel for key on a gx x gy grid of `threads` (refused past the grid's limits). */
fi_status rt_prefill_launch(fi_runtime *rt, int devtype, int device, const jit_key *key, int64_t gx, int64_t gy,
                            unsigned threads, void *params, size_t bytes, void *stream);

/* A stored tactic for batch prefill (issue 43): the wgmma kernel's shape (q tile 64, 128 or
 * 192 rows, kv tile, producer, stages) or the mma.sync kernel's q tile. Text:
 * "kernel=wgmma;q_tile=128;kv_tile=128;producer=2;stages=2" or "kernel=mma;q_tile=64". */
typedef struct rt_prefill_tactic {
  int wgmma;
  int q_tile, kv_tile, producer, stages; /* kv_tile, producer, stages: wgmma only */
} rt_prefill_tactic;
/* 0, or -1 for text that is not a prefill tactic. */
int rt_prefill_tactic_parse(const char *s, rt_prefill_tactic *t);
int rt_prefill_tactic_format(const rt_prefill_tactic *t, char *buf, size_t n);
/* The tactic a batch prefill key is. */
void rt_prefill_tactic_of_key(const jit_key *k, rt_prefill_tactic *t);
/* The batch prefill key of tactic t for a call (dtype, head_dim, RoPE, soft cap): 0, or -1
 * where the tactic names no registered kernel for it (a wgmma tactic with RoPE, a shape
 * the selectors would change). */
int rt_prefill_tactic_key(const rt_prefill_tactic *t, int dt, int D, int rope, int cap, jit_key *key);
/* A batch prefill plan's stored-tactic key: its shape text ("q=bf16;heads=32/8;
 * head_dim=128;causal=1;cap=0") from RT_PREFILL_TACTIC_FIELDS numbers; the bucket is that
 * of the longest request's query tokens (max_qo_tokens in CUDA-graph mode). */
#define RT_PREFILL_TACTIC_FIELDS 6
void rt_prefill_tactic_fields(int dt, int hq, int hkv, int D, int causal, int cap, int64_t *f);
void rt_prefill_tactic_shape(const int64_t *f, char *buf, size_t n);

/* rt_prefill_plan_offline (rt_prefill.h) with the tactic force (NULL: the rule), for the
 * CPU tests. */
struct fi_prefill_plan;
/* rt_prefill_plan_offline with a custom mask of mask_len bytes (the tests: the item
 * table's segment offsets, the length check). */
int rt_prefill_plan_offline_mask(const fi_batch_prefill_info *info, const fi_prefill_params *p, int paged,
                                 void *workspace, int devtype, int sms, int64_t mask_len, struct fi_prefill_plan **plan);
int rt_prefill_plan_offline_tactic(const fi_batch_prefill_info *info, const fi_prefill_params *p, int paged,
                                   void *workspace, int devtype, int sms, struct fi_prefill_plan **plan,
                                   const rt_prefill_tactic *force);
/* A ragged plan with V's head_dim head_dim_vo (extras->head_dim_vo), offline (the tests). */
int rt_prefill_plan_offline_dvo(const fi_batch_prefill_info *info, const fi_prefill_params *p, void *workspace,
                                int devtype, int sms, int head_dim_vo, struct fi_prefill_plan **plan);

/* The kernel of a call, into key; returns its q tile (rt_prefill_choose.c says the rule).
 * rt NULL: planned without a device (the tests), the mma.sync kernel under the default
 * tuning. stored: a tactic in place of the rule's shape where no tuning variable sets the
 * kernel and it names a kernel the call can run (the wgmma one only on a device that has
 * wgmma, and without a custom mask: mask); NULL: the rule. */
/* kvdt: the cache's dtype; an fp8 one runs the mma.sync kernel of *_prefill_fp8kv, with
 * no tactic. */
int rt_prefill_pick_kernel(fi_runtime *rt, int devtype, int device, int single, int dt, int kvdt, int D, int64_t rows,
                           int64_t maxkv, int rope, int cap, int mask, const rt_prefill_tactic *stored,
                           jit_key *key);

#endif
