/* ops_cascade.c: the cascade op families merge_state and merge_states: their keys, entry
 * wrappers and registered configurations (every key the select functions can return). */
#include <stdio.h>

#include "jit_registry.h"
#include "ops_cascade.h"

/* Block shape and grid, as measured on the H200 at 16384 x 32 x 128 bf16
 * (fi-bench cascade; figures: docs/ops.md, figures from comments), merge_state
 * and merge_states N=4, slowest first:
 *   a persistent grid, next row prefetched, 2 states a batch (512 threads, then 256);
 *   a grid of all rows, no prefetch, 256 threads, 4 states a batch;
 *   a grid of all rows, no prefetch, 128 threads, 2 states a batch.
 * The last (the default) needs the fewest registers (48 for merge_state),
 * so the most rows are in flight per SM, and small blocks refill the SMs
 * as they finish. Each macro can be set at build time (-D) for such a sweep. */
#ifndef CASCADE_THREADS
#define CASCADE_THREADS 128
#endif
/* merge_states: states loaded at once per row (N is a runtime value; more
 * states are folded in batch by batch). */
#ifndef CASCADE_STATES
#define CASCADE_STATES 2
#endif
/* Register rows: 1 loads the next row (or batch) while this one is merged,
 * on a persistent grid; 0 launches a grid of all rows instead. */
#ifndef CASCADE_PREFETCH
#define CASCADE_PREFETCH 0
#endif
/* Most vectors a lane holds of one row of one input; longer rows loop. */
#define MAX_CHUNKS 4

/* Row shapes (group, chunks) the selection can return for a 16-byte access:
 * 2 vectors per lane over 4..32 lanes, 4 vectors over 32 lanes, then the loop.
 * Narrower accesses (a head_dim or stride that forbids 16 bytes) always take
 * the loop over 32 lanes: correct for any shape, and rare. */
static const int shapes16[][2] = {{4, 2}, {8, 2}, {16, 2}, {32, 2}, {32, MAX_CHUNKS}, {32, 0}};
#define NSHAPES16 ((int)(sizeof shapes16 / sizeof shapes16[0]))

static const struct {
  int dtype, vec;
} dvs[] = {{JIT_DT_F16, 8},  {JIT_DT_BF16, 8}, {JIT_DT_F32, 4},  {JIT_DT_F16, 4},
           {JIT_DT_F16, 2},  {JIT_DT_F16, 1},  {JIT_DT_BF16, 4}, {JIT_DT_BF16, 2},
           {JIT_DT_BF16, 1}, {JIT_DT_F32, 2},  {JIT_DT_F32, 1}};
#define NDVS ((int)(sizeof dvs / sizeof dvs[0]))

static int wide(int dtype, int vec) { return vec * jit_dtype_bytes(dtype) == 16; }

static int pow2ceil(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

/* The (group, chunks) for a row of head_dim elements: about 2 vectors per
 * lane, as many lanes as that takes (4 to 32), then up to MAX_CHUNKS
 * vectors per lane over a full warp, beyond that the loop. */
static void row_shape(int dtype, int vec, int head_dim, int *group, int *chunks) {
  if (!wide(dtype, vec)) {
    *group = 32;
    *chunks = 0;
    return;
  }
  const int nv = (head_dim + vec - 1) / vec;
  int g = pow2ceil((nv + 1) / 2);
  if (g < 4) g = 4;
  if (g > 32) g = 32;
  const int c = (nv + g - 1) / g;
  *group = g;
  *chunks = c <= 2 ? 2 : c <= MAX_CHUNKS ? MAX_CHUNKS : 0;
}

static void fill(const jit_op *op, int dtype, int vec, int group, int chunks, jit_key *out) {
  out->op = op;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[CASCADE_P_DTYPE] = dtype;
  out->v[CASCADE_P_VEC] = vec;
  out->v[CASCADE_P_THREADS] = CASCADE_THREADS;
  out->v[CASCADE_P_GROUP] = group;
  out->v[CASCADE_P_CHUNKS] = chunks;
  out->v[CASCADE_P_PREFETCH] = chunks > 0 ? CASCADE_PREFETCH : 0; /* the loop has none */
  out->v[CASCADE_P_HINT] = 1;
  if (op == &jit_op_merge_states) out->v[CASCADE_P_STATES] = CASCADE_STATES;
}

void jit_merge_state_select(int dtype, int vec, int head_dim, jit_key *out) {
  int g, c;
  row_shape(dtype, vec, head_dim, &g, &c);
  fill(&jit_op_merge_state, dtype, vec, g, c, out);
}

void jit_merge_states_select(int dtype, int vec, int head_dim, jit_key *out) {
  int g, c;
  row_shape(dtype, vec, head_dim, &g, &c);
  fill(&jit_op_merge_states, dtype, vec, g, c, out);
}

int jit_cascade_rows_per_block(const jit_key *k) {
  return (int)(k->v[CASCADE_P_THREADS] / k->v[CASCADE_P_GROUP]);
}

static int count(void) {
  int n = 0;
  for (int d = 0; d < NDVS; d++) n += wide(dvs[d].dtype, dvs[d].vec) ? NSHAPES16 : 1;
  return n;
}

static void config(const jit_op *op, int idx, jit_key *out) {
  for (int d = 0; d < NDVS; d++) {
    const int n = wide(dvs[d].dtype, dvs[d].vec) ? NSHAPES16 : 1;
    if (idx >= n) {
      idx -= n;
      continue;
    }
    if (n == 1)
      fill(op, dvs[d].dtype, dvs[d].vec, 32, 0, out);
    else
      fill(op, dvs[d].dtype, dvs[d].vec, shapes16[idx][0], shapes16[idx][1], out);
    return;
  }
}
static void config_one(int idx, jit_key *out) { config(&jit_op_merge_state, idx, out); }
static void config_many(int idx, jit_key *out) { config(&jit_op_merge_states, idx, out); }

/* The wrappers; __launch_bounds__ lets the compiler budget registers for
 * the block size the runtime launches. */
static int render_one(const jit_key *k, const char *entry, char *buf, size_t n) {
  const int64_t *v = k->v;
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_merge_state_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::merge_state<%s, %d, %d, %d, %d, %d, %d>(p);\n"
                   "}\n",
                   (int)v[CASCADE_P_THREADS], entry, jit_dtype_cxx((int)v[CASCADE_P_DTYPE]),
                   (int)v[CASCADE_P_VEC], (int)v[CASCADE_P_THREADS], (int)v[CASCADE_P_GROUP],
                   (int)v[CASCADE_P_CHUNKS], (int)v[CASCADE_P_PREFETCH], (int)v[CASCADE_P_HINT]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

static int render_many(const jit_key *k, const char *entry, char *buf, size_t n) {
  const int64_t *v = k->v;
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_merge_states_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::merge_states<%s, %d, %d, %d, %d, %d, %d, %d>(p);\n"
                   "}\n",
                   (int)v[CASCADE_P_THREADS], entry, jit_dtype_cxx((int)v[CASCADE_P_DTYPE]),
                   (int)v[CASCADE_P_VEC], (int)v[CASCADE_P_THREADS], (int)v[CASCADE_P_GROUP],
                   (int)v[CASCADE_P_CHUNKS], (int)v[CASCADE_P_STATES], (int)v[CASCADE_P_PREFETCH],
                   (int)v[CASCADE_P_HINT]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

const jit_op jit_op_merge_state = {
    .name = "merge_state",
    .template_name = "cascade.cuh",
    .nparams = 7,
    .params = {{"dtype", JIT_P_DTYPE}, {"vec", JIT_P_INT}, {"threads", JIT_P_INT},
               {"group", JIT_P_INT}, {"chunks", JIT_P_INT}, {"prefetch", JIT_P_INT},
               {"hint", JIT_P_INT}},
    .render_entry = render_one,
    .config_count = count,
    .config = config_one,
};

const jit_op jit_op_merge_states = {
    .name = "merge_states",
    .template_name = "cascade.cuh",
    .nparams = 8,
    .params = {{"dtype", JIT_P_DTYPE}, {"vec", JIT_P_INT}, {"threads", JIT_P_INT},
               {"group", JIT_P_INT}, {"chunks", JIT_P_INT}, {"prefetch", JIT_P_INT},
               {"hint", JIT_P_INT}, {"states", JIT_P_INT}},
    .render_entry = render_many,
    .config_count = count,
    .config = config_many,
};
