/* rt_check.h: the argument checks every op shares (attention, norms, activations,
 * RoPE, sampling, cascade, paging): dtypes (fp8 included), shapes, rows, index arrays,
 * lse, outputs apart from inputs, alignment and the paged KV cache. Each failure is
 * FI_ERR_INVALID_ARGUMENT with a message naming fn and the argument; none needs a driver,
 * so an op checks everything before it looks its device up. */
#ifndef RT_CHECK_H
#define RT_CHECK_H

#include <stdint.h>

#include "fi_runtime.h"

/* DLPack >= 1.0 fp8 type codes (kDLFloat8_e4m3fn, kDLFloat8_e5m2). */
#define RT_DL_E4M3FN 10
#define RT_DL_E5M2 12

/* A dtype's jit code (JIT_DT_*, fp8 included; JIT_DT_NONE for others), and its name for
 * messages. */
int rt_check_dtype(DLDataType d);
const char *rt_check_dtype_string(DLDataType d, char *buf, size_t n);

/* q and out of qo_ndim dimensions, k and v of 3, all present, valid and on q's device,
 * and a known layout: what single decode and single prefill check first. */
fi_status rt_check_qkvo(const char *fn, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                        const DLTensor *out, int qo_ndim, fi_kv_layout layout);
/* Rows the attention kernels move 16 bytes at a time: the last dimension contiguous, the
 * start and the other strides (of dimensions of size > 1) multiples of 16 bytes. */
fi_status rt_check_rows(const char *fn, const char *name, const DLTensor *t, int elem_bytes);
/* The first n sizes of t are want's (what: where they come from, for the message). */
fi_status rt_check_shape(const char *fn, const char *name, const DLTensor *t, int n,
                         const int64_t *want, const char *what);
/* lse: n dims of sizes want, float32, on q's device. */
fi_status rt_check_lse(const char *fn, const DLTensor *lse, const DLTensor *q, int n,
                       const int64_t *want);
/* The extras of an attention call (x may be NULL), into their device addresses (NULL:
 * none). sinks: a contiguous float32 [hq] on q's device (qname: q's name for messages),
 * apart from out and lse (either may be NULL); hq < 0: the call takes none (a plan).
 * custom_mask: a contiguous uint8 tensor of at least mask_bytes on q's device, apart from
 * out and lse; mask_bytes RT_MASK_NONE: the op takes none, RT_MASK_AT_PLAN: a batch
 * prefill run (its plan has it). */
#define RT_MASK_NONE (-1)
#define RT_MASK_AT_PLAN (-2)
fi_status rt_check_extras(const char *fn, const fi_attention_extras *x, const DLTensor *q, const char *qname,
                          int64_t hq, int64_t mask_bytes, const DLTensor *out, const DLTensor *lse,
                          const float **sinks, const uint8_t **mask);
/* extras->lse_base2 where the caller's struct has it (the third version's member), else 0. */
int rt_extras_lse_base2(const fi_attention_extras *x);
/* extras->head_dim_vo where the caller's struct has it (the fourth version's member), else 0. */
int rt_extras_head_dim_vo(const fi_attention_extras *x);
/* out and lse (may be NULL) overlap none of the n inputs (NULL entries skipped), nor
 * each other. */
fi_status rt_check_outputs_apart(const char *fn, const DLTensor *out, const DLTensor *lse,
                                 const DLTensor *const *ins, const char *const *names, int n);
/* An int32 index array on q's device, contiguous, with min_len entries (exactly, when
 * exact) or more. */
fi_status rt_check_index(const char *fn, const char *name, const DLTensor *t, const DLTensor *q,
                         int64_t min_len, int exact);
/* An int32 1-D device tensor (any strides) on ref's device (ref_name: its name for
 * messages) with exactly len entries (len < 0: any; len_what: where len comes from), at
 * most 2^31 - 1 of them: the append ops' token and page index arrays. */
fi_status rt_check_ints(const char *fn, const char *name, const DLTensor *t, const char *ref_name,
                        const DLTensor *ref, int64_t len, const char *len_what);
/* A plan's workspace: a 1-D device tensor, 256-byte aligned and contiguous; *bytes gets
 * its size (refused when it overflows 63 bits). */
fi_status rt_check_workspace(const char *fn, const DLTensor *ws, int64_t *bytes);
/* A paged KV cache pair: both [pages, page_size, H_kv, head_dim] (NHD) or [pages, H_kv,
 * page_size, head_dim] (HND) with k's page count, equal strides, rows of elem_bytes
 * elements as rt_check_rows. layout must be valid (the caller checked it). */
fi_status rt_check_paged_cache(const char *fn, const DLTensor *kc, const DLTensor *vc, int nhd,
                               int64_t page_size, int64_t num_kv_heads, int64_t head_dim,
                               int elem_bytes);

#endif
