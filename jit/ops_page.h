/* ops_page.h: compile-time choices of the paged KV cache kernels (append_paged_kv,
 * batch_indices_positions), shared by the runtime (which picks one per call) and the registry. */
#ifndef OPS_PAGE_H
#define OPS_PAGE_H

#include "jit_key.h"

enum {
  PAGE_P_IN_DTYPE,    /* append_k/v: f16 or bf16 */
  PAGE_P_CACHE_DTYPE, /* the input's dtype, e4m3 or e5m2 */
  PAGE_P_LAYOUT,      /* fi_kv_layout: 0 NHD, 1 HND */
  PAGE_P_VEC,         /* elements per access; divides head_dim and every stride */
  PAGE_P_THREADS      /* block size */
};

enum { BIP_P_THREADS };

/* Is key a usable append_paged_kv configuration? */
int jit_page_valid(const jit_key *k);

/* The append_paged_kv key for in_dtype into cache_dtype with layout
 * (FI_KV_LAYOUT_*), moving vec elements at a time. */
void jit_page_select(int in_dtype, int cache_dtype, int layout, int vec, jit_key *out);

/* The (only) batch_indices_positions key. */
void jit_bip_select(jit_key *out);

#endif
