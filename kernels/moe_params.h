/* moe_params.h: the kernel ABI of the mixture-of-experts family, one struct a kernel
 * passed by value. Included by the host C code and, embedded, by kernels/moe_*.cuh. */
#ifndef FI_MOE_PARAMS_H
#define FI_MOE_PARAMS_H

#include "fi_params.h"

/* Routing methods (the routing kernel's "method", and fi_moe_routing_params.method). */
enum {
  FI_MOE_SOFTMAX_TOPK = 0,        /* softmax over all experts, top-k; weights the softmax values */
  FI_MOE_RENORMALIZE = 1,         /* top-k of the logits, softmax over those k (Mixtral) */
  FI_MOE_SOFTMAX_TOPK_RENORM = 2, /* softmax, top-k, weights divided by their sum (Qwen3) */
  FI_MOE_DEEPSEEK_V3 = 3,         /* sigmoid + correction bias, grouped top-k (DeepSeek-V3/R1, Kimi-K2) */
  FI_MOE_LLAMA4 = 4,              /* top-k of the logits, weights sigmoid(logit) (Llama-4: k = 1) */
  FI_MOE_METHOD_COUNT = 5
};

/* Routing of tokens rows of experts logits: logits [tokens, experts] (row stride in
 * elements, unit column stride), bias [experts] float32 or NULL (DeepSeek-V3's correction
 * bias), ids [tokens, top_k] int32 and weights [tokens, top_k] float32 (row strides in
 * elements). DeepSeek-V3: experts in n_group groups of experts / n_group, topk_group kept. */
typedef struct fi_moe_route_params {
  const void *logits;
  const float *bias;
  int32_t *ids;
  float *weights;
  int64_t logits_stride;
  int64_t ids_stride;
  int64_t weights_stride;
  int32_t tokens;
  int32_t experts;
  int32_t top_k;
  int32_t n_group;
  int32_t topk_group;
  float scale; /* routed_scaling_factor: the weights are multiplied by it */
} fi_moe_route_params;

/* Sort of the routes (expanded index x = token * top_k + k) by local expert into tiles of
 * tile_size rows (moe_sort.cuh). ids [routes] (row stride 1: the [tokens, top_k] table as
 * one run); an id in [expert_offset, expert_offset + local_experts) is local. The routes
 * are cut into blocks chunks of chunk routes (a multiple of 1024), a block each. counts:
 * the workspace, [blocks, local_experts] int32, each block's count per expert (written by
 * the count kernel when blocks > 1, read by the place kernel; unused for one block). */
typedef struct fi_moe_sort_params_k {
  const int32_t *ids;
  int32_t *counts;
  int32_t *tile_expert;       /* [max_tiles] local expert of each tile, -1 past the used ones */
  int32_t *tile_mn_limit;     /* [max_tiles] exclusive end row of each tile's live rows */
  int32_t *e2p;               /* [routes] permuted row of each route, -1 when not local */
  int32_t *p2e;               /* [max_tiles * tile_size] route of each row, -1 for padding */
  int32_t *num_tiles;         /* [1] tiles used */
  int32_t *total_padded;      /* [1] tiles used * tile_size */
  int32_t routes;
  int32_t blocks;             /* of both kernels, at least 1 */
  int32_t chunk;              /* routes a block */
  int32_t expert_offset;
  int32_t local_experts;
  int32_t tile_size;
  int32_t max_tiles;
} fi_moe_sort_params_k;

/* Gather before the experts' first GEMM: out row p = x row p2e[p] / top_k for every live
 * row (p2e[p] >= 0) of the first num_tiles * tile_size rows; padding rows are left as they
 * are (the GEMM reads a tile's rows only up to its mn_limit). Row strides in elements. */
typedef struct fi_moe_permute_params {
  const void *x;          /* [tokens, hidden] */
  void *out;              /* [max_tiles * tile_size, hidden] */
  const int32_t *p2e;     /* [max_tiles * tile_size] */
  const int32_t *num_tiles;
  int64_t x_stride, out_stride;
  int32_t rows;           /* max_tiles * tile_size */
  int32_t tile_size;
  int32_t top_k;
  int32_t hidden;
} fi_moe_permute_params;

/* Combine after the experts' second GEMM: out[t] (+)= sum over k, in order, of
 * weights[t, k] * y[e2p[t, k]] for the routes with e2p >= 0, in float32, one block a token
 * (deterministic: no atomics). accumulate 0 writes the sum, 1 adds it to out. */
typedef struct fi_moe_finalize_params {
  const void *y;          /* [max_tiles * tile_size, hidden] */
  void *out;              /* [tokens, hidden] */
  const int32_t *e2p;     /* [tokens, top_k] */
  const float *weights;   /* [tokens, top_k] */
  int64_t y_stride, out_stride;
  int32_t tokens;
  int32_t top_k;
  int32_t hidden;
  int32_t accumulate;
} fi_moe_finalize_params;

/* The experts' grouped GEMM over the sort's tiles (moe_gemm.cuh): out [rows, n] = a . W[e]^T
 * for the live rows of every tile (expert e = tile_expert[tile]), SwiGLU over W rows
 * gate_row + j and up_row + j when gated. w [local experts][rows][k]; a [rows, k], or x
 * [tokens, k] read at row p2e[r] / top_k when gathering. Strides in elements. The tables
 * are device data the host cannot check: an expert id or a route out of range is skipped
 * (its rows left unwritten, or read as zeros), never followed out of bounds. */
typedef struct fi_moe_gemm_params_k {
  const void *a;
  const void *w;
  void *out;
  const int32_t *tile_expert;
  const int32_t *tile_mn_limit;
  const int32_t *num_tiles;
  const int32_t *p2e;        /* gather only */
  int64_t a_stride, w_expert_stride, w_stride, out_stride;
  int32_t k;                 /* a multiple of 64 */
  int32_t n;                 /* output columns, a multiple of the block's */
  int32_t tile_size;         /* the sort's rows a tile */
  int32_t max_tiles;
  int32_t top_k;
  int32_t up_row, gate_row;  /* first W row of each half (gated); up_row 0 otherwise */
  int32_t experts;           /* w's first dimension: a tile of another expert is skipped */
  int32_t a_rows;            /* a's rows: a gathered route outside them reads as zeros */
} fi_moe_gemm_params_k;

/* The sort's chunks (moe_sort.cuh; 1024-thread blocks): FI_MOE_SORT_CHUNK routes a block (one
 * block, one launch, for that many routes or fewer), at most FI_MOE_SORT_MAX_BLOCKS blocks (the
 * chunks grow past that: each block reads every block's counts), and the most local experts
 * the sort supports (its per-warp counts live in shared memory). */
#define FI_MOE_SORT_CHUNK 4096
#define FI_MOE_SORT_MAX_BLOCKS 128
#define FI_MOE_SORT_MAX_EXPERTS 256

#endif
