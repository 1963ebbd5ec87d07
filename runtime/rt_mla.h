/* rt_mla.h: the MLA planner's workspace layout and its CPU-test entry points. */
#ifndef RT_MLA_H
#define RT_MLA_H

#include <stdint.h>

#include "fi_runtime.h"
#include "jit_key.h"

typedef struct rt_mla_layout {
  int64_t capacity; /* work items the workspace holds (the grid of a CUDA-graph plan) */
  int64_t slots;    /* partial slots (split chunks) */
  int64_t items_off, partial_o_off, partial_lse_off, bytes;
} rt_mla_layout;

void rt_mla_layout_for(int64_t max_batch, int64_t max_qo_tokens, int sms, int num_heads, rt_mla_layout *l);

/* For the CPU tests: fi_batch_mla_paged_plan without a device (no upload) on sms SMs; 0 or -1. */
int rt_mla_plan_offline(const fi_batch_mla_info *info, void *workspace, int sms, fi_mla_plan **plan);
/* The plan's host table (header, then *items items) and kernel key. */
const int32_t *rt_mla_plan_table(const fi_mla_plan *plan, int64_t *items, const jit_key **key);

#endif
