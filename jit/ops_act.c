/* ops_act.c: the act_and_mul op family (silu/gelu/gelu_tanh and mul): its key, entry
 * wrapper and registered configurations (every key jit_act_select can return). */
#include <stdio.h>

#include "jit_registry.h"
#include "ops_act.h"

/* The block shape, measured on the H200 (fi-bench act, and sweeps of block
 * shapes at 16384 x 2*8192, 1024 x 2*14336 and odd sizes; figures: docs/ops.md,
 * figures from comments):
 * - silu and gelu_tanh with 16-byte accesses: 256 threads x 1 vector; small
 *   tiles (4 KB of output) also spread 1024 tokens over every SM, ahead of
 *   512 x 2 there.
 * - gelu's erff is a long dependent chain: 1024 threads hide it (16 bytes:
 *   ahead of 256 threads, whether 1 or 2 vectors each).
 * - Narrower accesses (odd sizes or strides): 1024 threads, 8 bytes of
 *   output each per step; 512 threads, or 16 bytes a thread, lost. */
static int threads_for(int act, int access_bytes) {
  return access_bytes >= 16 && act != JIT_ACT_GELU ? 256 : 1024;
}
static int chunks_for(int access_bytes) { return access_bytes >= 8 ? 1 : 8 / access_bytes; }

static const struct {
  int dtype, vec;
} dvs[] = {{JIT_DT_F16, 8},  {JIT_DT_F16, 4},  {JIT_DT_F16, 2},  {JIT_DT_F16, 1},
           {JIT_DT_BF16, 8}, {JIT_DT_BF16, 4}, {JIT_DT_BF16, 2}, {JIT_DT_BF16, 1},
           {JIT_DT_F32, 4},  {JIT_DT_F32, 2},  {JIT_DT_F32, 1}};
#define NDVS ((int)(sizeof dvs / sizeof dvs[0]))

void jit_act_select(int act, int dtype, int vec, jit_key *out) {
  const int access = vec * jit_dtype_bytes(dtype);
  out->op = &jit_op_act_and_mul;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[ACT_P_ACT] = act;
  out->v[ACT_P_DTYPE] = dtype;
  out->v[ACT_P_VEC] = vec;
  out->v[ACT_P_THREADS] = threads_for(act, access);
  out->v[ACT_P_CHUNKS] = chunks_for(access);
}

int jit_act_valid(const jit_key *k) {
  const int64_t *v = k->v;
  if (k->op != &jit_op_act_and_mul || v[ACT_P_ACT] < 0 || v[ACT_P_ACT] >= JIT_ACT_COUNT) return 0;
  if (v[ACT_P_DTYPE] != JIT_DT_F16 && v[ACT_P_DTYPE] != JIT_DT_BF16 && v[ACT_P_DTYPE] != JIT_DT_F32)
    return 0;
  const int64_t es = jit_dtype_bytes((int)v[ACT_P_DTYPE]);
  if (v[ACT_P_VEC] < 1 || v[ACT_P_VEC] * es > 16 || (v[ACT_P_VEC] & (v[ACT_P_VEC] - 1))) return 0;
  if (v[ACT_P_THREADS] < 32 || v[ACT_P_THREADS] > 1024 ||
      (v[ACT_P_THREADS] & (v[ACT_P_THREADS] - 1)))
    return 0;
  return v[ACT_P_CHUNKS] >= 1 && v[ACT_P_CHUNKS] <= 16;
}

static int render(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_act_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::act_and_mul<%d, %s, %d, %d, %d>(p);\n"
                   "}\n",
                   (int)k->v[ACT_P_THREADS], entry, (int)k->v[ACT_P_ACT],
                   jit_dtype_cxx((int)k->v[ACT_P_DTYPE]), (int)k->v[ACT_P_VEC],
                   (int)k->v[ACT_P_THREADS], (int)k->v[ACT_P_CHUNKS]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

/* Every (activation, dtype, access width) once: jit_act_select's keys. */
static int count(void) { return JIT_ACT_COUNT * NDVS; }

static void config(int idx, jit_key *out) {
  jit_act_select(idx / NDVS, dvs[idx % NDVS].dtype, dvs[idx % NDVS].vec, out);
}

const jit_op jit_op_act_and_mul = {
    .name = "act_and_mul",
    .template_name = "activation.cuh",
    .nparams = 5,
    .params = {{"act", JIT_P_INT}, {"dtype", JIT_P_DTYPE}, {"vec", JIT_P_INT},
               {"threads", JIT_P_INT}, {"chunks", JIT_P_INT}},
    .render_entry = render,
    .config_count = count,
    .config = config,
};
