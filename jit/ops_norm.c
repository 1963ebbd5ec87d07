/* ops_norm.c: the rmsnorm op family's key, entry wrapper and registered
 * configurations (every key jit_rmsnorm_select can return; a test checks that). */
#include <stdio.h>

#include "jit_registry.h"
#include "ops_norm.h"

/* Registers a thread may spend on one row (and as much again on the next,
 * prefetched): 8 vectors of 16 bytes. Narrow accesses (an odd hidden size
 * forces 2- or 4-byte ones) then still keep the row in registers. */
#define ROW_BYTES_PER_THREAD 128

/* (threads, chunks) pairs the selection rule below can produce for a
 * dtype and access width: small blocks, then 512 threads with 2, 4, ...
 * chunks up to ROW_BYTES_PER_THREAD, then the two-pass kernel (chunks 0). */
static int shapes_for(int dtype, int vec, int out[16][2]) {
  static const int small[][2] = {{32, 1}, {32, 2}, {64, 2}, {128, 2}, {256, 2}};
  int n = 0;
  for (int i = 0; i < 5; i++) {
    out[n][0] = small[i][0];
    out[n++][1] = small[i][1];
  }
  for (int c = 2; c * vec * jit_dtype_bytes(dtype) <= ROW_BYTES_PER_THREAD; c *= 2) {
    out[n][0] = 512;
    out[n++][1] = c;
  }
  out[n][0] = 512;
  out[n++][1] = 0;
  return n;
}

static const struct {
  int dtype, vec;
} dvs[] = {{JIT_DT_F16, 8},  {JIT_DT_F16, 4},  {JIT_DT_F16, 2},  {JIT_DT_F16, 1},
           {JIT_DT_BF16, 8}, {JIT_DT_BF16, 4}, {JIT_DT_BF16, 2}, {JIT_DT_BF16, 1},
           {JIT_DT_F32, 4},  {JIT_DT_F32, 2},  {JIT_DT_F32, 1}};
#define NDVS ((int)(sizeof dvs / sizeof dvs[0]))

static int pow2ceil(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

void jit_rmsnorm_select(int dtype, int vec, int hidden, jit_key *out) {
  /* Two vectors per thread: measured on the H200 at 8192 x 8192 bf16, 512
   * threads x 2 ahead of 256 x 4 and 128 x 8 (docs/ops.md, 2026-11-29, runtime
   * core and fi_rmsnorm);
   * a lower register cap (more blocks per SM) spilled and lost. */
  int nv = (hidden + vec - 1) / vec;
  int threads = pow2ceil((nv + 1) / 2);
  if (threads < 32) threads = 32;
  /* 1024-thread blocks measured slower than 512 x 4 (f32 8192 x 8192;
   * docs/ops.md, 2026-11-29, runtime core and fi_rmsnorm): longer rows take
   * more vectors per thread instead. */
  if (threads > 512) threads = 512;
  int chunks = pow2ceil((nv + threads - 1) / threads);
  const int row_bytes = chunks * vec * jit_dtype_bytes(dtype);
  if (row_bytes > ROW_BYTES_PER_THREAD) chunks = 0; /* too long for registers: two passes */
  out->op = &jit_op_rmsnorm;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[RMSNORM_P_DTYPE] = dtype;
  out->v[RMSNORM_P_VEC] = vec;
  out->v[RMSNORM_P_THREADS] = threads;
  out->v[RMSNORM_P_CHUNKS] = chunks;
  out->v[RMSNORM_P_MINBLOCKS] = 0;
  /* Past 64 bytes a thread the weight does not fit in registers beside two
   * rows' worth (this one and the next), and is read from L1 instead. */
  out->v[RMSNORM_P_WREG] = chunks > 0 && row_bytes <= ROW_BYTES_PER_THREAD / 2;
  out->v[RMSNORM_P_HINT] = 1;
}

int jit_rmsnorm_valid(const jit_key *k, int hidden) {
  const int64_t *v = k->v;
  int es = jit_dtype_bytes((int)v[RMSNORM_P_DTYPE]);
  if (k->op != &jit_op_rmsnorm || (v[RMSNORM_P_DTYPE] != JIT_DT_F16 &&
                                   v[RMSNORM_P_DTYPE] != JIT_DT_BF16 &&
                                   v[RMSNORM_P_DTYPE] != JIT_DT_F32))
    return 0;
  if (v[RMSNORM_P_VEC] < 1 || v[RMSNORM_P_VEC] * es > 16 || (v[RMSNORM_P_VEC] & (v[RMSNORM_P_VEC] - 1)))
    return 0;
  if (v[RMSNORM_P_THREADS] < 32 || v[RMSNORM_P_THREADS] > 1024 ||
      (v[RMSNORM_P_THREADS] & (v[RMSNORM_P_THREADS] - 1)))
    return 0;
  if (v[RMSNORM_P_CHUNKS] < 0 || v[RMSNORM_P_CHUNKS] > 64) return 0;
  if (v[RMSNORM_P_CHUNKS] > 0 &&
      v[RMSNORM_P_THREADS] * v[RMSNORM_P_CHUNKS] * v[RMSNORM_P_VEC] < hidden)
    return 0;
  if (v[RMSNORM_P_MINBLOCKS] < 0 || v[RMSNORM_P_MINBLOCKS] * v[RMSNORM_P_THREADS] > 2048) return 0;
  return (v[RMSNORM_P_WREG] == 0 || v[RMSNORM_P_WREG] == 1) &&
         (v[RMSNORM_P_HINT] == 0 || v[RMSNORM_P_HINT] == 1);
}

static int render(const jit_key *k, const char *entry, char *buf, size_t n) {
  char bounds[64];
  if (k->v[RMSNORM_P_MINBLOCKS] > 0)
    snprintf(bounds, sizeof bounds, "%d, %d", (int)k->v[RMSNORM_P_THREADS],
             (int)k->v[RMSNORM_P_MINBLOCKS]);
  else
    snprintf(bounds, sizeof bounds, "%d", (int)k->v[RMSNORM_P_THREADS]);
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%s)\n"
                   "%s(fi_rmsnorm_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::rmsnorm<%s, %d, %d, %d, %d, %d>(p);\n"
                   "}\n",
                   bounds, entry, jit_dtype_cxx((int)k->v[RMSNORM_P_DTYPE]),
                   (int)k->v[RMSNORM_P_VEC], (int)k->v[RMSNORM_P_THREADS],
                   (int)k->v[RMSNORM_P_CHUNKS], (int)k->v[RMSNORM_P_WREG],
                   (int)k->v[RMSNORM_P_HINT]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

static int count(void) {
  int n = 0, sh[16][2];
  for (int d = 0; d < NDVS; d++) n += shapes_for(dvs[d].dtype, dvs[d].vec, sh);
  return n;
}

static void config(int idx, jit_key *out) {
  int sh[16][2];
  for (int d = 0; d < NDVS; d++) {
    int n = shapes_for(dvs[d].dtype, dvs[d].vec, sh);
    if (idx >= n) {
      idx -= n;
      continue;
    }
    const int es = jit_dtype_bytes(dvs[d].dtype);
    out->op = &jit_op_rmsnorm;
    for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
    out->v[RMSNORM_P_DTYPE] = dvs[d].dtype;
    out->v[RMSNORM_P_VEC] = dvs[d].vec;
    out->v[RMSNORM_P_THREADS] = sh[idx][0];
    out->v[RMSNORM_P_CHUNKS] = sh[idx][1];
    out->v[RMSNORM_P_MINBLOCKS] = 0;
    out->v[RMSNORM_P_WREG] = sh[idx][1] > 0 && sh[idx][1] * dvs[d].vec * es <= ROW_BYTES_PER_THREAD / 2;
    out->v[RMSNORM_P_HINT] = 1;
    return;
  }
}

const jit_op jit_op_rmsnorm = {
    .name = "rmsnorm",
    .template_name = "rmsnorm.cuh",
    .nparams = 7,
    .params = {{"dtype", JIT_P_DTYPE}, {"vec", JIT_P_INT}, {"threads", JIT_P_INT},
               {"chunks", JIT_P_INT}, {"minblocks", JIT_P_INT}, {"wreg", JIT_P_INT},
               {"hint", JIT_P_INT}},
    .render_entry = render,
    .config_count = count,
    .config = config,
};

/* ---- fused_add_rmsnorm, gemma_rmsnorm, gemma_fused_add_rmsnorm ---------------------- */

/* The registered configurations per dtype: 16-byte accesses with 2 or 4
 * vectors per thread in registers or two passes, and single elements in two
 * passes for rows whose size or alignment rules out 16 bytes. Since the block
 * size is set at launch, these 4 cover every row length: 12 per op. */
static const struct {
  int wide, chunks; /* wide: 16-byte accesses, else 1 element */
} norm_shapes[] = {{1, 2}, {1, 4}, {1, 0}, {0, 0}};
#define NSHAPES ((int)(sizeof norm_shapes / sizeof norm_shapes[0]))
static const int norm_dtypes[3] = {JIT_DT_F16, JIT_DT_BF16, JIT_DT_F32};

static int is_residual(const jit_op *op) {
  return op == &jit_op_fused_add_rmsnorm || op == &jit_op_gemma_fused_add_rmsnorm;
}
static int is_gemma(const jit_op *op) {
  return op == &jit_op_gemma_rmsnorm || op == &jit_op_gemma_fused_add_rmsnorm;
}

/* The weight stays in registers while a thread's share of one row (input,
 * and the residual beside it) is at most ROW_BYTES_PER_THREAD / 2, as in
 * rmsnorm: past that it would crowd out the prefetched next row. */
static int norm_wreg(const jit_op *op, int dtype, int vec, int chunks) {
  const int row_bytes = chunks * vec * jit_dtype_bytes(dtype) * (is_residual(op) ? 2 : 1);
  /* From 4 vectors on a block does one row (rt_norm_launch): nothing to keep
   * the weight for, and held as floats it cost bf16 gemma_rmsnorm at 8192 a
   * block an SM, and bandwidth against the kernel before the block-per-row change
   * (docs/ops.md, sixth session, norms one block per row). */
  return chunks > 0 && chunks < 4 && row_bytes <= ROW_BYTES_PER_THREAD / 2;
}

static void norm_key(const jit_op *op, int dtype, int vec, int chunks, jit_key *out) {
  out->op = op;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[NORM_P_DTYPE] = dtype;
  out->v[NORM_P_VEC] = vec;
  out->v[NORM_P_CHUNKS] = chunks;
  out->v[NORM_P_WREG] = norm_wreg(op, dtype, vec, chunks);
  out->v[NORM_P_HINT] = 1;
}

/* Four vectors per thread where that leaves a block of at least two warps:
 * rt_norm_launch then runs one block per row (no prefetch). That measured
 * faster than 2 prefetching vectors on resident blocks at every hidden size
 * from 2048 to 16384 (docs/ops.md, sixth session, norms one block per row,
 * and figures from comments). Shorter rows keep two vectors on resident
 * blocks (at hidden 128 a block of 32 threads per row ran far slower),
 * longer ones take two passes. The block is
 * trimmed to the row (a multiple of the warp), not rounded up to a power
 * of two: hidden 5120 runs 160 threads, all busy. */
static int norm_shape(int wide, int vec, int hidden, int warp, int *chunks) {
  const int nv = hidden / vec;
  int c = 0;
  if (wide && nv <= 4 * JIT_NORM_MAX_THREADS && (nv + 3) / 4 >= 2 * warp)
    c = 4;
  else if (wide && nv <= 2 * JIT_NORM_MAX_THREADS)
    c = 2;
  else if (wide && nv <= 4 * JIT_NORM_MAX_THREADS)
    c = 4;
  const int per = c ? (nv + c - 1) / c : nv;
  int threads = (per + warp - 1) / warp * warp;
  if (threads > JIT_NORM_MAX_THREADS) threads = JIT_NORM_MAX_THREADS;
  *chunks = c;
  return threads;
}

static int full_vec(int dtype) { return 16 / jit_dtype_bytes(dtype); }

void jit_norm_select(const jit_op *op, int dtype, int vec, int hidden, int warp, jit_key *out,
                     int *threads) {
  const int wide = vec >= full_vec(dtype);
  const int v = wide ? full_vec(dtype) : 1;
  int chunks;
  *threads = norm_shape(wide, v, hidden, warp, &chunks);
  norm_key(op, dtype, v, chunks, out);
}

static int norm_render(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_norm_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::rmsnorm_ext<%s, %d, %d, %d, %d, %d, %d>(p);\n"
                   "}\n",
                   JIT_NORM_MAX_THREADS, entry, jit_dtype_cxx((int)k->v[NORM_P_DTYPE]),
                   (int)k->v[NORM_P_VEC], (int)k->v[NORM_P_CHUNKS], (int)k->v[NORM_P_WREG],
                   (int)k->v[NORM_P_HINT], is_residual(k->op), is_gemma(k->op));
  return w < 0 || (size_t)w >= n ? -1 : w;
}

static int norm_count(void) { return 3 * NSHAPES; }

static void norm_config(const jit_op *op, int idx, jit_key *out) {
  const int dtype = norm_dtypes[idx / NSHAPES], s = idx % NSHAPES;
  norm_key(op, dtype, norm_shapes[s].wide ? full_vec(dtype) : 1, norm_shapes[s].chunks, out);
}

#define NORM_OP(NAME)                                                                        \
  static void NAME##_config(int idx, jit_key *out) { norm_config(&jit_op_##NAME, idx, out); } \
  const jit_op jit_op_##NAME = {                                                             \
      .name = #NAME,                                                                         \
      .template_name = "rmsnorm.cuh",                                                        \
      .nparams = 5,                                                                          \
      .params = {{"dtype", JIT_P_DTYPE}, {"vec", JIT_P_INT}, {"chunks", JIT_P_INT},          \
                 {"wreg", JIT_P_INT}, {"hint", JIT_P_INT}},                                  \
      .render_entry = norm_render,                                                           \
      .config_count = norm_count,                                                            \
      .config = NAME##_config,                                                               \
  };
NORM_OP(fused_add_rmsnorm)
NORM_OP(gemma_rmsnorm)
NORM_OP(gemma_fused_add_rmsnorm)
