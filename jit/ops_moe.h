/* ops_moe.h: compile-time choices of the mixture-of-experts kernels (routing), shared by
 * the runtime (which picks one per call) and the registry (prewarm). */
#ifndef OPS_MOE_H
#define OPS_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "jit_key.h"
#include "moe_params.h"

enum {
  MOE_ROUTE_P_DTYPE,  /* the logits' dtype: f32 or bf16 */
  MOE_ROUTE_P_METHOD, /* FI_MOE_* of kernels/moe_params.h */
  MOE_ROUTE_P_EPL     /* experts a lane holds: 1, 2, 4, 8 or 16 */
};

/* Tokens (warps) a routing block takes. */
#define MOE_ROUTE_WARPS 4
/* The most experts a lane holds: 512 experts on a 32-lane warp. */
#define MOE_ROUTE_MAX_EPL 16

/* The routing kernel for logits of dtype over `experts` experts on a warp of `warp` lanes;
 * experts must be at most MOE_ROUTE_MAX_EPL * warp. */
void jit_moe_routing_select(int dtype, int method, int experts, int warp, jit_key *out);

/* The sort's grid for `routes` routes (moe_sort.cuh): FI_MOE_SORT_CHUNK routes a block, at
 * most FI_MOE_SORT_MAX_BLOCKS blocks (larger chunks past that), chunks a multiple of the
 * 1024-thread block, at least one block (a lone block also writes the tables for no
 * routes). Header-only: the emulator test (tests/test_moe_emu.cc) runs the same grid. */
static inline void jit_moe_sort_grid(int64_t routes, int32_t *blocks, int32_t *chunk) {
  int64_t b = (routes + FI_MOE_SORT_CHUNK - 1) / FI_MOE_SORT_CHUNK;
  if (b < 1) b = 1;
  if (b > FI_MOE_SORT_MAX_BLOCKS) b = FI_MOE_SORT_MAX_BLOCKS;
  int64_t c = ((routes + b - 1) / b + 1023) / 1024 * 1024;
  if (c < 1024) c = 1024;
  *blocks = (int32_t)b; /* grows with routes (a workspace serves every smaller call); the last chunk may be empty */
  *chunk = (int32_t)c;
}

/* The sort's two kernels (moe_sort.cuh): 0 count (only when the routes take several blocks),
 * 1 place (the scan, the tables and the rows). */
enum { MOE_SORT_P_PHASE };
void jit_moe_sort_select(int phase, jit_key *out);

/* Permute (0) and finalize (1) (moe_combine.cuh): dtype of the rows, vec elements a
 * thread moves at once (dividing hidden and the row strides). */
enum { MOE_COMBINE_P_KIND, MOE_COMBINE_P_DTYPE, MOE_COMBINE_P_VEC };
#define MOE_COMBINE_THREADS 256
void jit_moe_combine_select(int kind, int dtype, int vec, jit_key *out);

/* The experts' grouped GEMM (moe_gemm.cuh): dtype f16/bf16, rows and columns a block, SwiGLU
 * fused (1) or not, A rows gathered from x by the sort's table (1), shared-memory stages. */
enum { MOE_GEMM_P_DTYPE, MOE_GEMM_P_BM, MOE_GEMM_P_BN, MOE_GEMM_P_GATED, MOE_GEMM_P_GATHER, MOE_GEMM_P_STAGES };
#define MOE_GEMM_THREADS 128
void jit_moe_gemm_select(int dtype, int bm, int bn, int gated, int gather, int stages, jit_key *out);
/* The stage count of a block shape on a device whose blocks may use smem_kb KiB of shared
 * memory: 4 for 16 rows, else 3; 2 where
 * those do not fit (the two counts registered for prewarm). */
int jit_moe_gemm_stages(int bm, int bn, int gated, int smem_kb);
/* The grouped GEMM's kernel for a call: block_m rows a block (0: 16 when the routes
 * average fewer than 32 a local expert, as in decode, else the tile's rows up to 128),
 * 128 columns for the plain GEMM's big blocks where n allows, else 64; the stage count
 * the device's shared memory (smem_kb a block) takes. */
void jit_moe_gemm_choose(int dtype, int64_t routes, int local_experts, int tile_size, int block_m, int gated,
                         int gather, int64_t n, int smem_kb, int wgmma, jit_key *out);

/* A tactic of the grouped GEMM, the autotuner's unit (issue 43): the wgmma kernel, or
 * mma.sync with bm rows and bn columns a block and `stages` shared-memory stages. Written
 * "kernel=wgmma" or "kernel=mma;bm=64;bn=128;stages=3" in the tactics table. */
typedef struct jit_moe_gemm_tactic {
  int wgmma, bm, bn, stages;
} jit_moe_gemm_tactic;

/* The rule's tactic for a call (jit_moe_gemm_choose's choice with block_m 0). */
void jit_moe_gemm_rule(int64_t routes, int local_experts, int tile_size, int gated, int64_t n, int smem_kb,
                       int wgmma, jit_moe_gemm_tactic *t);
/* t's kernel for a call: 0 with *out, or -1 when t cannot run it (rows over the tile or
 * not a registered block shape, n not a multiple of its columns, stages that do not fit
 * smem_kb or are not registered, wgmma where the device or the shape cannot take it). */
int jit_moe_gemm_tactic_key(const jit_moe_gemm_tactic *t, int dtype, int tile_size, int gated, int gather,
                            int64_t n, int smem_kb, int wgmma, jit_key *out);
/* The text form; parse returns 0, or -1 for text that is not a tactic. */
int jit_moe_gemm_tactic_format(const jit_moe_gemm_tactic *t, char *buf, size_t n);
int jit_moe_gemm_tactic_parse(const char *s, jit_moe_gemm_tactic *t);
/* Every tactic that can run a call (at most max), the rule's first: the registered
 * mma.sync block shapes with their stage counts, and wgmma where it applies. */
int jit_moe_gemm_tactics(int64_t routes, int local_experts, int tile_size, int gated, int64_t n, int smem_kb,
                         int wgmma, jit_moe_gemm_tactic *out, int max);

/* The wgmma kernel (moe_gemm_wgmma.cuh, sm_90a): blocks of 128 rows and 128 weight rows
 * (128 output columns, or 64 with SwiGLU), 256 threads. jit_moe_gemm_choose takes it when
 * wgmma is set (the device has it and FI_MOE_WGMMA is not 0) for 128-row blocks, n a
 * multiple of 128 and 227 KiB of shared memory. */
enum { MOE_GEMM_WG_P_DTYPE, MOE_GEMM_WG_P_GATED, MOE_GEMM_WG_P_GATHER, MOE_GEMM_WG_P_STAGES };
#define MOE_GEMM_WG_THREADS 256
#define MOE_GEMM_WG_STAGES 4
void jit_moe_gemm_wg_select(int dtype, int gated, int gather, int stages, jit_key *out);

#endif
