/* rt_autotune.h: the autotuner's view of the ops it measures (rt_autotune.c): each op's
 * entry point with a tactic forced, and its stored-tactic shape text. */
#ifndef RT_AUTOTUNE_H
#define RT_AUTOTUNE_H

#include <stddef.h>
#include <stdint.h>

#include "ops_moe.h"
#include "rt_internal.h"

/* fi_moe_grouped_gemm with the kernel of tactic force (NULL: the stored tactic or the
 * rule, as the public call chooses); a tactic that cannot run the call is
 * FI_ERR_INVALID_ARGUMENT. */
fi_status rt_moe_gemm(fi_runtime *rt, const DLTensor *a, const DLTensor *weights, const fi_moe_sort_outputs *tables,
                      const fi_moe_gemm_params *p, DLTensor *out, void *stream, const jit_moe_gemm_tactic *force);
/* The grouped GEMM's shape as its stored tactics name it ("dtype=bf16;k=7168;n=2048;
 * experts=256;top_k=8;gated=1;gather=1;tile=128"); its bucket is the token count's. */
void rt_moe_gemm_shape(int dtype, int64_t k, int64_t n, int64_t experts, int64_t top_k, int gated, int gather,
                       int tile, char *buf, size_t len);

#endif
