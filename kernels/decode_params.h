/* decode_params.h: the kernel ABI of decode attention (single and batch decode over a
 * paged KV cache) and of the plan-table upload; included by the host and by decode.cuh. */
#ifndef FI_DECODE_PARAMS_H
#define FI_DECODE_PARAMS_H

/* For the fixed-width integers (<stdint.h> on the host, fi_port.cuh's under NVRTC). */
#include "fi_params.h"

/* Bump when a struct below changes layout (the template hash changes too). */
#define FI_DECODE_ABI_VERSION 9

/* Most head_dim / 2 RoPE frequencies carried in the parameters. */
#define FI_DECODE_MAX_FREQ 128
/* The plan's tables in the workspace (int32 words from its start):
 *   header [FI_DECODE_HDR_WORDS]: [0] items, [1] batch, [2] kv_chunk_pages, [3] split (0/1)
 *   items  [capacity][8]: request b, first token, end token, chunk | chunks << 16,
 *          the request's first page (indptr[b]), its length, 0, 0
 *   counters [max_batch * num_kv_heads]: zero between runs (the merging block resets its own)
 * then float32 partial outputs [capacity][H_qo][head_dim] and partial LSEs (base 2)
 * [capacity][H_qo], each at a 256-byte boundary. */
#define FI_DECODE_HDR_WORDS 16
#define FI_DECODE_ITEM_WORDS 8

/* Decode: out[b, h] = softmax(scale * q[b, h] . K[b]^T) V[b] over the tokens of request b,
 * query head h reading KV head h / group. Strides in elements. K and V share strides
 * (page, slot, head); head_dim is contiguous everywhere. items == NULL: single decode
 * (one request, tokens [single_lo, kv_len), token t at t * kv_stride_slot; see single_chunk). */
typedef struct fi_decode_params {
  const void *q;
  void *out;
  float *lse;               /* natural log (base 2 with lse_log2); NULL: not written */
  const void *k;
  const void *v;
  const int32_t *indptr;    /* [batch + 1] */
  const int32_t *indices;   /* page ids */
  const int32_t *last_page_len;
  const int32_t *header;    /* plan tables (NULL for single decode) */
  const int32_t *items;
  int32_t *counters;
  void *partial_o;          /* split partials in the output dtype: [items, H_qo, D] */
  float *partial_lse;
  int64_t q_stride[2];      /* [0] request, [1] head */
  int64_t out_stride[2];
  int64_t lse_stride[2];
  int64_t kv_stride_page;
  int64_t kv_stride_slot;
  int64_t kv_stride_head;
  int32_t num_items;        /* >= 0: grid items; -1: read header[0] (CUDA-graph mode) */
  int32_t num_kv_heads;     /* the grid's heads: KV heads x kv_head_div */
  int32_t group;            /* query heads a grid head: num_qo_heads / num_kv_heads, 1..16 */
  int32_t page_size;
  int32_t kv_len;           /* single decode: L */
  int32_t single_lo;        /* single decode: first attended token (sliding window) */
  int32_t prefetch;         /* steps the L2 prefetch runs ahead of the register loads (0: off) */
  int32_t head_prefetch;    /* tokens of the item prefetched into L2 at the block's start
                               (0: off; < 0: the same with per-line prefetches) */
  int32_t kv_heads_per_block; /* 2: a block reads KV heads 2 y and 2 y + 1 (grid y = H_kv / 2;
                               fp8 batch decode, head_dim 128, group <= 4, no RoPE,
                               kv_stride_head = head_dim); else 1 */
  int32_t kv_evict;         /* 1: a 16-bit cache is read evict-first in L2; 0: evict-normal */
  int32_t pre_prefetch;     /* tokens of the item prefetched into L2 while the previous grid
                               in the stream finishes (PDL; 0: off; decode_enter) */
  int32_t num_pages;        /* pages in the cache and entries of indices: the bounds of */
  int32_t nnz;              /* the reads made before the PDL wait */
  float scale_log2;         /* logit scale to base 2 (no soft cap): sm_scale * k_scale * log2(e) */
  float cap_pre;            /* soft cap: t = qk * cap_pre; logit = cap_log2 * tanh(t) */
  float cap_log2;           /* 0: no soft cap */
  float v_scale;            /* output multiplier (fp8 V scale) */
  float rope_freq[FI_DECODE_MAX_FREQ]; /* RoPE inverse frequencies, head_dim / 2 used */
  /* Single decode split into num_items chunks (grid x): single_chunk tokens each from
   * single_lo, the last to kv_len; each chunk's block writes its partial to partial_o /
   * partial_lse (as a batch request's) and ends. A second launch of the same kernel with
   * single_merge = 1 (grid 1 x H_kv) merges them into out and lse; counters are unused.
   * Last, so that batch decode's fields keep their offsets. */
  int32_t single_chunk;
  int32_t single_merge;
  /* A KV head's group of more than 16 query heads (MQA, wide GQA) is cut into this many
   * grid heads of `group` rows each: grid head y reads KV head y / kv_head_div (0 or 1:
   * grid heads are KV heads). */
  int32_t kv_head_div;
  /* Attention sinks (fi_attention_extras.sinks): one logit a query head, natural-log units
   * of the scaled logits, in every row's softmax denominator; NULL: none. Folded in where a
   * row's state is final (the unsplit write, the merge), never into a split's partial. */
  const float *sinks;
  /* 1: lse in base 2 (log2 of the sum: FlashInfer's and TVM's convention); 0: natural log.
   * Partials are base 2 either way. */
  int32_t lse_log2;
} fi_decode_params;

/* The cache's KV head of grid head y. */
#define FI_DECODE_KV_HEAD(p, y) ((p).kv_head_div > 1 ? (y) / (p).kv_head_div : (y))

/* Plan upload: dst[i] = data[i] (i < n) or, with fill set, dst[i] = fill_value (i < n).
 * The plan's tables travel to the device in these launch parameters, in stream order. */
#define FI_DECODE_UPLOAD_WORDS 960
typedef struct fi_decode_upload_params {
  int32_t *dst;
  int32_t n;
  int32_t fill;
  int32_t fill_value;
  int32_t pad_;
  int32_t data[FI_DECODE_UPLOAD_WORDS];
} fi_decode_upload_params;

/* fi-bench's read-bandwidth probe: n 16-byte vectors at src. */
typedef struct fi_read_probe_params {
  const void *src;
  uint32_t *sink;
  int64_t n;
  uint32_t never;
  uint32_t pad_;
} fi_read_probe_params;

#endif /* FI_DECODE_PARAMS_H */
