/* ops_decode.h: compile-time choices of the decode attention kernels (single_decode,
 * batch_decode) and the plan-table upload, shared by the runtime and the registry. */
#ifndef OPS_DECODE_H
#define OPS_DECODE_H

#include "jit_key.h"

/* Parameters of single_decode and batch_decode, in canonical order. */
enum {
  DECODE_P_DTYPE_Q,  /* q and out: f16 or bf16 */
  DECODE_P_DTYPE_KV, /* the cache: q's dtype, e4m3 or e5m2 */
  DECODE_P_HEAD_DIM, /* 64, 128, 256 */
  DECODE_P_ROWS,     /* query heads per KV head the block holds: 8 (group <= 8) or 16;
                        DECODE_PIPE_SIMT: 1, 2 or 4 */
  DECODE_P_WARPS,    /* warps per block */
  DECODE_P_PIPELINE, /* 1: the next step's K and V loaded during this one; 0: K only;
                        DECODE_PIPE_CAPPED: K only, registers capped for 16 warps an SM;
                        DECODE_PIPE_SIMT: the CUDA-core kernel */
  DECODE_P_ROPE      /* RoPE (Llama, non-interleaved halves) on q and k */
};

/* The key for a call: single (1) or batch (0) decode, with warps warps a block
 * (0: DECODE_WARPS_SPLIT). A batch plan over a 16-bit cache picks 1, 2 or 4
 * (rt_decode_pick_warps); over an fp8 cache, 2 or 4. */
void jit_decode_select(int single, int dtype_q, int dtype_kv, int head_dim, int group, int rope,
                       int warps, jit_key *out);
/* Whether the capped one-buffer kernel (DECODE_PIPE_CAPPED) can be built for this cache
 * dtype, head_dim and row count (16-bit, <= 128, 8); the default takes it at 128 only. */
int jit_decode_can_cap(int dtype_kv, int head_dim, int rows);
/* The key's pipelines (DECODE_P_PIPELINE): one buffer, the next step's K loading during
 * this one; two buffers, the next step's K and V; the capped one-buffer kernel; SIMT. */
#define DECODE_PIPE_K_ONLY 0
#define DECODE_PIPE_TWO_BUFFER 1
#define DECODE_PIPE_CAPPED 2
/* The CUDA-core kernel (kernels/decode_simt.cuh; batch decode): whole-row loads, dot
 * products reduced by shuffles, groups of 1, 2 or 4 (its key's rows), a 16-bit cache, no
 * RoPE; registers capped for 16 warps an SM. The default at group 1 in place of the capped
 * kernel (rt_dec_pick_simt); at groups 2 and 4 a tuning choice (FI_DECODE_PIPELINE=3). */
#define DECODE_PIPE_SIMT 3
/* Whether it can be built for this cache dtype, head_dim, group and RoPE switch. */
int jit_decode_can_simt(int dtype_kv, int head_dim, int group, int rope);
/* Its rows for a group it can take: 1, 2 or 4. */
int jit_decode_simt_rows(int group);
#define DECODE_WARPS_SPLIT 4
#define DECODE_WARPS_WIDE 2
#define DECODE_WARPS_ONE 1
/* The plan upload kernel's key, and its block size. */
void jit_decode_upload_select(jit_key *out);
#define DECODE_UPLOAD_THREADS 256
/* fi-bench's read-bandwidth probe. */
void jit_read_probe_select(jit_key *out);
#define READ_PROBE_THREADS 512

#endif
