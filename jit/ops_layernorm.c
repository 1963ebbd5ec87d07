/* ops_layernorm.c: the layernorm op's key (dtype of rows, of gamma and beta), entry
 * wrapper and registered configurations (every key jit_layernorm_select can return). */
#include <stdio.h>

#include "jit_registry.h"
#include "ops_norm.h"

/* Input dtype with the gamma/beta dtypes it accepts: its own or float32. */
static const struct {
  int dtype, wdtype;
} pairs[] = {{JIT_DT_F16, JIT_DT_F16},  {JIT_DT_F16, JIT_DT_F32}, {JIT_DT_BF16, JIT_DT_BF16},
             {JIT_DT_BF16, JIT_DT_F32}, {JIT_DT_F32, JIT_DT_F32}};
#define NPAIRS ((int)(sizeof pairs / sizeof pairs[0]))

/* 16-byte accesses with 4 or 8 vectors per thread or two passes, and single
 * elements in two passes: 20 in all. 4 a thread, not rmsnorm's 2: see
 * layernorm.cuh. */
static const struct {
  int wide, chunks;
} shapes[] = {{1, 4}, {1, 8}, {1, 0}, {0, 0}};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* gamma and beta are read from L1 every row: kept in registers (as floats,
 * the way the compiler hoists their conversions) they cost a block an SM
 * and measured slower in every case (docs/ops.md, figures from comments);
 * the key keeps the choice for tuning. */
static int wreg(int wdtype, int vec, int chunks) {
  (void)wdtype, (void)vec, (void)chunks;
  return 0;
}

static void make_key(int dtype, int wdtype, int vec, int chunks, jit_key *out) {
  out->op = &jit_op_layernorm;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[LAYERNORM_P_DTYPE] = dtype;
  out->v[LAYERNORM_P_WDTYPE] = wdtype;
  out->v[LAYERNORM_P_VEC] = vec;
  out->v[LAYERNORM_P_CHUNKS] = chunks;
  out->v[LAYERNORM_P_WREG] = wreg(wdtype, vec, chunks);
  out->v[LAYERNORM_P_HINT] = 1;
}

void jit_layernorm_select(int dtype, int wdtype, int vec, int hidden, int warp, jit_key *out,
                          int *threads) {
  const int full = 16 / jit_dtype_bytes(dtype), wide = vec >= full, v = wide ? full : 1;
  const int nv = hidden / v;
  /* 4 vectors a thread up to blocks of 256, then 8: at hidden 16384 bf16,
   * one block per row, 256 x 8 measured faster than 512 x 4 (level at 8192;
   * docs/ops.md, figures from comments). */
  int c = 0;
  if (wide && nv <= 4 * (JIT_NORM_MAX_THREADS / 2))
    c = 4;
  else if (wide && nv <= 8 * JIT_NORM_MAX_THREADS)
    c = 8;
  const int per = c ? (nv + c - 1) / c : nv;
  int t = (per + warp - 1) / warp * warp;
  *threads = t > JIT_NORM_MAX_THREADS ? JIT_NORM_MAX_THREADS : t;
  make_key(dtype, wdtype, v, c, out);
}

static int render(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_norm_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::layernorm<%s, %s, %d, %d, %d, %d>(p);\n"
                   "}\n",
                   JIT_NORM_MAX_THREADS, entry, jit_dtype_cxx((int)k->v[LAYERNORM_P_DTYPE]),
                   jit_dtype_cxx((int)k->v[LAYERNORM_P_WDTYPE]), (int)k->v[LAYERNORM_P_VEC],
                   (int)k->v[LAYERNORM_P_CHUNKS], (int)k->v[LAYERNORM_P_WREG],
                   (int)k->v[LAYERNORM_P_HINT]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

static int count(void) { return NPAIRS * NSHAPES; }

static void config(int idx, jit_key *out) {
  const int p = idx / NSHAPES, s = idx % NSHAPES;
  const int full = 16 / jit_dtype_bytes(pairs[p].dtype);
  make_key(pairs[p].dtype, pairs[p].wdtype, shapes[s].wide ? full : 1, shapes[s].chunks, out);
}

const jit_op jit_op_layernorm = {
    .name = "layernorm",
    .template_name = "layernorm.cuh",
    .nparams = 6,
    .params = {{"dtype", JIT_P_DTYPE}, {"wdtype", JIT_P_DTYPE}, {"vec", JIT_P_INT},
               {"chunks", JIT_P_INT}, {"wreg", JIT_P_INT}, {"hint", JIT_P_INT}},
    .render_entry = render,
    .config_count = count,
    .config = config,
};
