/* ops_prefill.h: compile-time choices of the prefill attention kernels (single_prefill,
 * batch_prefill), their split-KV merge (prefill_merge) and fi-bench's tensor-core probe
 * (mma_probe), shared by the runtime and the registry. */
#ifndef OPS_PREFILL_H
#define OPS_PREFILL_H

#include <stdint.h>

#include "jit_key.h"

/* Parameters of single_prefill and batch_prefill, in canonical order. */
enum {
  PREFILL_P_DTYPE,    /* q, k, v and out: f16 or bf16 */
  PREFILL_P_HEAD_DIM, /* 64, 128, 256 */
  PREFILL_P_Q_TILE,   /* packed rows per block: 16, 64 or 128 (128 only to head_dim 128); the
                       * block's shape is FI_PF_* of prefill_params.h */
  PREFILL_P_ROPE      /* RoPE (Llama, non-interleaved halves) on q and k */
};
/* single_prefill_fp8kv and batch_prefill_fp8kv (the mma.sync kernel over an fp8 cache; no
 * RoPE): PREFILL_P_DTYPE, _HEAD_DIM and _Q_TILE as above, then the cache's dtype. */
enum { PREFILL_P_KV_DTYPE = PREFILL_P_ROPE };
/* single_prefill_dvo and batch_prefill_dvo (the mma.sync kernel with V's head_dim apart from
 * q's and k's: 192 / 128, DeepSeek's MHA prefill; contiguous KV, no RoPE, no fp8):
 * PREFILL_P_DTYPE, _HEAD_DIM (q's and k's) and _Q_TILE as above, then V's head_dim. */
enum { PREFILL_P_HEAD_DIM_VO = PREFILL_P_ROPE };
enum { PREFILL_MERGE_P_DTYPE, PREFILL_MERGE_P_HEAD_DIM };
/* Parameters of single_prefill_sm90 and batch_prefill_sm90 (kernels/prefill_wgmma.cuh,
 * compiled for sm_90a): no RoPE. */
enum {
  PREFILL_WG_P_DTYPE,      /* f16 or bf16 */
  PREFILL_WG_P_HEAD_DIM,   /* 64, 128, 256 */
  PREFILL_WG_P_WARPGROUPS, /* 1, 2 or 3: q tile 64, 128 or 192 packed rows (3: head_dim 64) */
  PREFILL_WG_P_KV_TILE,    /* kv tokens a tile: 64 or 128 */
  PREFILL_WG_P_PRODUCER,   /* 0: every thread loads; 1: a producer warpgroup does (warp
                            * specialization); 2: and the consumers ping-pong (q tile
                            * 128 or 192) */
  PREFILL_WG_P_STAGES,     /* K / V stages: 2, 3 or 4 (jit_prefill_wgmma_stages) */
  PREFILL_WG_P_SOFT_CAP    /* 1: the logits soft cap's code is compiled in (a call with a
                            * cap); 0: left out, and the first tile's softmax runs twice as
                            * fast (jit_prefill_wgmma_soft_cap) */
};

/* The q tile (rows: 16, 64 or 128) for a head_dim and the most packed rows (query tokens
 * x group) a request of the batch has. */
int jit_prefill_q_tile(int head_dim, int64_t max_rows);
/* The planner's kv granularity (tokens): split chunks are multiples of it, and of every
 * kernel kv tile (FI_PF_KT). */
int jit_prefill_kv_tile(int head_dim);

/* The key for a call: single (1) or batch (0) prefill with a q tile of q_tile rows. */
void jit_prefill_select(int single, int dtype, int head_dim, int q_tile, int rope, jit_key *out);
/* The same over an fp8 cache (kv_dtype JIT_DT_E4M3 or JIT_DT_E5M2). */
void jit_prefill_fp8_select(int single, int dtype, int kv_dtype, int head_dim, int q_tile, jit_key *out);
void jit_prefill_merge_select(int dtype, int head_dim, jit_key *out);
/* The *_dvo kernel of (dtype, head_dim_qk, head_dim_vo, q tile). */
void jit_prefill_dvo_select(int single, int dtype, int head_dim, int head_dim_vo, int q_tile, jit_key *out);
/* 1 for a *_dvo key. */
int jit_prefill_is_dvo(const jit_key *k);
/* Threads of a prefill key's block (either kernel). */
unsigned jit_prefill_threads(const jit_key *k);
/* The wgmma kernel's key (Hopper): single (1) or batch (0), q tile 64, 128 or 192 rows
 * (192: head_dim 64 with a producer), kv tile 64 or 128 tokens, producer 0, 1 or 2
 * (PREFILL_WG_P_PRODUCER; 2 is 1 at q tile 64), two K / V stages. head_dim 256 has one
 * shape: q tile 128, kv tile 64, no producer. */
void jit_prefill_wgmma_select(int single, int dtype, int head_dim, int q_tile, int kv_tile, int producer,
                              jit_key *out);
/* Four K / V stages on the key where registered (else it keeps two). */
void jit_prefill_wgmma_stages(jit_key *k, int stages);
/* The soft cap's code in the kernel (on: a call with logits_soft_cap != 0); select
 * leaves it out. Every shape is registered both ways. */
void jit_prefill_wgmma_soft_cap(jit_key *k, int on);
/* Whether a key is a wgmma one, and its q tile (rows) either way. */
int jit_prefill_is_wgmma(const jit_key *k);
int jit_prefill_key_q_tile(const jit_key *k);
/* Blocks an SM of a batch key that can run on a persistent grid (a wave of blocks, each
 * looping over work units: the wgmma kernel with a producer), 0 for the others. */
int jit_prefill_persistent_blocks(const jit_key *k);
#define PREFILL_MERGE_THREADS 128
/* fi-bench's tensor-core probe. */
void jit_mma_probe_select(jit_key *out);
#define MMA_PROBE_THREADS 256
/* fi-bench's wgmma probe (Hopper). */
void jit_wgmma_probe_select(jit_key *out);
#define WGMMA_PROBE_THREADS 256

#endif
