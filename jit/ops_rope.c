/* ops_rope.c: the rope op family (fi_apply_rope_pos_ids, the Llama 3.1 variant and
 * the cos_sin_cache one): its key, entry wrapper and registered configurations. */
#include <stdio.h>

#include "jit_registry.h"
#include "ops_rope.h"

/* 256 threads: a work item holds up to 8 vectors of 16 bytes, so 2 such
 * blocks per 2048-thread SM already keep 16 KB per warp scheduler in flight.
 * Not yet measured on the H200 (fi-bench rope). */
#define ROPE_THREADS 256

/* Registered access widths: 16 bytes, 8, and one element. An alignment
 * that allows 2 elements but not 4 is rare (odd offsets of pairs) and
 * takes the 1-element kernel: 48 configurations instead of 64. */
static int narrow_vec(int vec) { return vec >= 8 ? 8 : vec >= 4 ? 4 : 1; }

void jit_rope_select(int dtype, int pos_dtype, int mode, int interleave, int vec, jit_key *out) {
  out->op = &jit_op_rope;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[ROPE_P_DTYPE] = dtype;
  out->v[ROPE_P_POS] = pos_dtype;
  out->v[ROPE_P_MODE] = mode;
  out->v[ROPE_P_INTERLEAVE] = interleave ? 1 : 0;
  out->v[ROPE_P_VEC] = narrow_vec(vec);
  out->v[ROPE_P_THREADS] = ROPE_THREADS;
}

int jit_rope_valid(const jit_key *k) {
  const int64_t *v = k->v;
  if (k->op != &jit_op_rope) return 0;
  if (v[ROPE_P_DTYPE] != JIT_DT_F16 && v[ROPE_P_DTYPE] != JIT_DT_BF16) return 0;
  if (v[ROPE_P_POS] != JIT_DT_I32 && v[ROPE_P_POS] != JIT_DT_I64) return 0;
  if (v[ROPE_P_MODE] < 0 || v[ROPE_P_MODE] >= JIT_ROPE_MODE_COUNT) return 0;
  if (v[ROPE_P_INTERLEAVE] != 0 && v[ROPE_P_INTERLEAVE] != 1) return 0;
  if (v[ROPE_P_VEC] != 1 && v[ROPE_P_VEC] != 4 && v[ROPE_P_VEC] != 8) return 0;
  const int64_t t = v[ROPE_P_THREADS];
  return t >= 32 && t <= 1024 && (t & (t - 1)) == 0;
}

static int render(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_rope_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::rope<%s, %s, %d, %d, %d, %d>(p);\n"
                   "}\n",
                   (int)k->v[ROPE_P_THREADS], entry, jit_dtype_cxx((int)k->v[ROPE_P_DTYPE]),
                   k->v[ROPE_P_POS] == JIT_DT_I64 ? "int64_t" : "int32_t",
                   (int)k->v[ROPE_P_MODE], (int)k->v[ROPE_P_INTERLEAVE], (int)k->v[ROPE_P_VEC],
                   (int)k->v[ROPE_P_THREADS]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

/* Every (dtype, pos dtype, mode, interleave, width): jit_rope_select's keys. */
static const int vecs[] = {8, 4, 1};
#define NVECS 3
static int count(void) { return 2 * 2 * JIT_ROPE_MODE_COUNT * 2 * NVECS; }

static void config(int idx, jit_key *out) {
  const int vec = vecs[idx % NVECS];
  idx /= NVECS;
  const int interleave = idx % 2;
  idx /= 2;
  const int mode = idx % JIT_ROPE_MODE_COUNT;
  idx /= JIT_ROPE_MODE_COUNT;
  const int pos = idx % 2 ? JIT_DT_I64 : JIT_DT_I32;
  const int dtype = idx / 2 ? JIT_DT_BF16 : JIT_DT_F16;
  jit_rope_select(dtype, pos, mode, interleave, vec, out);
}

const jit_op jit_op_rope = {
    .name = "rope",
    .template_name = "rope.cuh",
    .nparams = 6,
    .params = {{"dtype", JIT_P_DTYPE}, {"pos", JIT_P_DTYPE}, {"mode", JIT_P_INT},
               {"interleave", JIT_P_BOOL}, {"vec", JIT_P_INT}, {"threads", JIT_P_INT}},
    .render_entry = render,
    .config_count = count,
    .config = config,
};
