/* ops_page.c: the paged KV cache op families (append_paged_kv, batch_indices_positions):
 * their keys, entry wrappers and registered configurations (every key the selection can return). */
#include "ops_page.h"

#include <stdio.h>

#include "jit_registry.h"

/* 256 threads: a pure copy, like act_and_mul's 16-byte kernels (256 x 1-2
 * vectors measured best there); the kernel itself keeps ~32 bytes of input
 * a thread in flight whatever the access width. Not yet measured for this op. */
#define PAGE_THREADS 256
#define BIP_THREADS 256

/* (input, cache) pairs: a 16-bit cache has the input's dtype. */
static const struct {
  int in, cache;
} pairs[] = {{JIT_DT_F16, JIT_DT_F16},   {JIT_DT_F16, JIT_DT_E4M3},  {JIT_DT_F16, JIT_DT_E5M2},
             {JIT_DT_BF16, JIT_DT_BF16}, {JIT_DT_BF16, JIT_DT_E4M3}, {JIT_DT_BF16, JIT_DT_E5M2}};
#define NPAIRS ((int)(sizeof pairs / sizeof pairs[0]))
static const int vecs[] = {8, 4, 2, 1}; /* 16 bytes of f16/bf16 down to one element */
#define NVECS ((int)(sizeof vecs / sizeof vecs[0]))

void jit_page_select(int in_dtype, int cache_dtype, int layout, int vec, jit_key *out) {
  out->op = &jit_op_append_paged_kv;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[PAGE_P_IN_DTYPE] = in_dtype;
  out->v[PAGE_P_CACHE_DTYPE] = cache_dtype;
  out->v[PAGE_P_LAYOUT] = layout;
  out->v[PAGE_P_VEC] = vec;
  out->v[PAGE_P_THREADS] = PAGE_THREADS;
}

void jit_bip_select(jit_key *out) {
  out->op = &jit_op_batch_indices_positions;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[BIP_P_THREADS] = BIP_THREADS;
}

int jit_page_valid(const jit_key *k) {
  const int64_t *v = k->v;
  if (k->op != &jit_op_append_paged_kv) return 0;
  const int64_t in = v[PAGE_P_IN_DTYPE], c = v[PAGE_P_CACHE_DTYPE];
  if (in != JIT_DT_F16 && in != JIT_DT_BF16) return 0;
  if (c != in && c != JIT_DT_E4M3 && c != JIT_DT_E5M2) return 0;
  if (v[PAGE_P_LAYOUT] != 0 && v[PAGE_P_LAYOUT] != 1) return 0;
  const int64_t vec = v[PAGE_P_VEC];
  if (vec < 1 || vec * jit_dtype_bytes((int)in) > 16 || (vec & (vec - 1))) return 0;
  const int64_t t = v[PAGE_P_THREADS];
  return t >= 32 && t <= 1024 && !(t & (t - 1));
}

static int render_append(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_append_paged_kv_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::append_paged_kv<%s, %s, %d, %d, %d>(p);\n"
                   "}\n",
                   (int)k->v[PAGE_P_THREADS], entry, jit_dtype_cxx((int)k->v[PAGE_P_IN_DTYPE]),
                   jit_dtype_cxx((int)k->v[PAGE_P_CACHE_DTYPE]), (int)k->v[PAGE_P_LAYOUT],
                   (int)k->v[PAGE_P_VEC], (int)k->v[PAGE_P_THREADS]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

/* Every (input, cache) pair, layout and access width: jit_page_select's keys. */
static int count_append(void) { return NPAIRS * 2 * NVECS; }

static void config_append(int idx, jit_key *out) {
  const int pair = idx / (2 * NVECS), layout = idx / NVECS % 2, vec = vecs[idx % NVECS];
  jit_page_select(pairs[pair].in, pairs[pair].cache, layout, vec, out);
}

const jit_op jit_op_append_paged_kv = {
    .name = "append_paged_kv",
    .template_name = "page.cuh",
    .nparams = 5,
    .params = {{"in_dtype", JIT_P_DTYPE},
               {"cache_dtype", JIT_P_DTYPE},
               {"layout", JIT_P_INT},
               {"vec", JIT_P_INT},
               {"threads", JIT_P_INT}},
    .render_entry = render_append,
    .config_count = count_append,
    .config = config_append,
};

static int render_bip(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_batch_indices_positions_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::batch_indices_positions<%d>(p);\n"
                   "}\n",
                   (int)k->v[BIP_P_THREADS], entry, (int)k->v[BIP_P_THREADS]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

static int count_bip(void) { return 1; }
static void config_bip(int idx, jit_key *out) {
  (void)idx;
  jit_bip_select(out);
}

const jit_op jit_op_batch_indices_positions = {
    .name = "batch_indices_positions",
    .template_name = "page.cuh",
    .nparams = 1,
    .params = {{"threads", JIT_P_INT}},
    .render_entry = render_bip,
    .config_count = count_bip,
    .config = config_bip,
};
