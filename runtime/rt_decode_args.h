/* rt_decode_args.h: the helpers the decode entry points share (rt_decode_args.c). */
#ifndef RT_DECODE_ARGS_H
#define RT_DECODE_ARGS_H

#include "decode_params.h"
#include "fi_runtime.h"
#include "jit_key.h"
#include "rt_check.h"
#include "rt_internal.h"

/* The largest group of query heads a KV head decode takes (above 16: rt_decode_group_chunks). */
#define RT_DECODE_MAX_GROUP 128

/* Heads (a group of 1..RT_DECODE_MAX_GROUP), head_dim, q and cache dtypes, and the parameters (p may be NULL). */
fi_status rt_dec_check_common(const char *fn, int hq, int hkv, int D, int qdt, int kvdt,
                              DLDataType qd, DLDataType kvd, const fi_attention_params *p);

/* k and v [L, H, D] or [H, L, D] with equal strides in their first two dimensions (where
 * of size > 1): one set of strides reads both (single decode, single prefill, the ragged
 * run). */
fi_status rt_dec_check_kv_strides(const char *fn, const DLTensor *k, const DLTensor *v);

/* Tuning values from the environment read at create (rt->env.tune; README): the L2
 * prefetch distance (the block shape's overrides: rt_dec_tune_key, rt_decode_choose.h). */
int rt_dec_prefetch_steps(const rt_tuning *t);
/* FI_DECODE_HEAD_PREFETCH: tokens of each work item prefetched into L2 at the block's
 * start (0, the default: off; negative: per-line prefetches). */
int rt_dec_head_prefetch(const rt_tuning *t);
int rt_dec_pre_prefetch(const rt_tuning *t);
/* FI_DECODE_SPLIT: the split target's scale (tuning; 1 when unset or not positive, at most 64). */
double rt_dec_split_scale(const rt_tuning *t);
int rt_dec_kv_evict(const rt_tuning *t);

/* The kernel's scale, soft cap, value scale and RoPE fields. */
void rt_dec_fill_scalars(fi_decode_params *k, const fi_attention_params *p, int D, int kvdt);

/* The loaded kernel for key, launched on a gx x gy grid of `threads`. */
fi_status rt_dec_launch(fi_runtime *rt, int devtype, int device, const jit_key *key, unsigned gx,
                        unsigned gy, unsigned threads, void *params, size_t bytes, void *stream);
/* Writes n words at dst on the stream (data, or zeros when data is NULL) with decode's
 * upload kernel: the plan tables of decode and prefill. */
fi_status rt_upload_words(fi_runtime *rt, int devtype, int device, int32_t *dst, const int32_t *data, int64_t n,
                          void *stream);
fi_status rt_dec_device_sms(fi_runtime *rt, int devtype, int device, int *sms);

#endif
