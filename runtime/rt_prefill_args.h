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
void rt_prefill_fill_scalars(fi_prefill_kparams *k, const fi_prefill_params *p, int D, int dt);
/* q / out [rows, H_qo, D]: shapes, dtypes, row layout; lse [rows, H_qo]. */
fi_status rt_prefill_check_q_out(const char *fn, const DLTensor *q, const DLTensor *out, const DLTensor *lse, int dt);
/* Contiguous k and v (single prefill, the ragged run): rows of elem_bytes elements as
 * rt_check_rows, and equal strides. */
fi_status rt_prefill_check_kv_rows(const char *fn, const DLTensor *k, const DLTensor *v, int elem_bytes);
/* The loaded kernel for key on a gx x gy grid of `threads` (refused past the grid's limits). */
fi_status rt_prefill_launch(fi_runtime *rt, int devtype, int device, const jit_key *key, int64_t gx, int64_t gy,
                            unsigned threads, void *params, size_t bytes, void *stream);

/* The kernel of a call, into key; returns its q tile (rt_prefill_choose.c says the rule).
 * rt NULL: planned without a device (the tests), the mma.sync kernel under the default
 * tuning. */
int rt_prefill_pick_kernel(fi_runtime *rt, int devtype, int device, int single, int dt, int D, int64_t rows,
                           int64_t maxkv, int rope, int cap, jit_key *key);

#endif
