/* ops_mla.c: the multi-head latent attention op families (batch_mla_paged, mla_merge): their
 * keys, entry wrappers and registered configurations (every key the selection can return). */
#include "ops_mla.h"

#include <stdio.h>

#include "jit_registry.h"
#include "mla_params.h"

static const int dtypes[] = {JIT_DT_F16, JIT_DT_BF16};
/* (q tile, stages): the defaults, and the 16-row tile's two-stage shape (FI_MLA_STAGES=2). */
static const int shapes[][2] = {{16, FI_MLA_NS(16)}, {64, FI_MLA_NS(64)}, {16, 2}};

int jit_mla_q_tile(int64_t max_rows) { return max_rows <= 16 ? 16 : 64; }

void jit_mla_select(int dtype, int q_tile, int stages, jit_key *out) {
  out->op = &jit_op_batch_mla_paged;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[MLA_P_DTYPE] = dtype;
  out->v[MLA_P_Q_TILE] = q_tile;
  out->v[MLA_P_STAGES] = stages > 0 ? stages : FI_MLA_NS(q_tile);
}

void jit_mla_merge_select(int dtype, jit_key *out) {
  out->op = &jit_op_mla_merge;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[MLA_MERGE_P_DTYPE] = dtype;
}

unsigned jit_mla_threads(const jit_key *k) {
  return k->op == &jit_op_batch_mla_paged ? 32u * FI_MLA_WARPS((unsigned)k->v[MLA_P_Q_TILE]) : MLA_MERGE_THREADS;
}

static int render(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%u)\n"
                   "%s(fi_mla_kparams p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::mla::mla_paged<%s, %d, %d>(p);\n"
                   "}\n",
                   jit_mla_threads(k), entry, jit_dtype_cxx((int)k->v[MLA_P_DTYPE]), (int)k->v[MLA_P_Q_TILE],
                   (int)k->v[MLA_P_STAGES]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int count(void) { return 2 * 3; }
static void config(int idx, jit_key *out) {
  jit_mla_select(dtypes[idx % 2], shapes[idx / 2][0], shapes[idx / 2][1], out);
}
static unsigned dyn_smem(const jit_key *k) {
  return (unsigned)FI_MLA_SMEM_NS((int)k->v[MLA_P_Q_TILE], (int)k->v[MLA_P_STAGES]);
}

const jit_op jit_op_batch_mla_paged = {
    .name = "batch_mla_paged",
    .template_name = "mla.cuh",
    .nparams = 3,
    .params = {{"dtype", JIT_P_DTYPE}, {"q_tile", JIT_P_INT}, {"stages", JIT_P_INT}},
    .render_entry = render,
    .config_count = count,
    .config = config,
    .dyn_smem = dyn_smem,
};

static int render_merge(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_prefill_merge_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::mla::mla_merge<%s>(p);\n"
                   "}\n",
                   MLA_MERGE_THREADS, entry, jit_dtype_cxx((int)k->v[MLA_MERGE_P_DTYPE]));
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int count_merge(void) { return 2; }
static void config_merge(int idx, jit_key *out) { jit_mla_merge_select(dtypes[idx], out); }

const jit_op jit_op_mla_merge = {
    .name = "mla_merge",
    .template_name = "mla.cuh",
    .nparams = 1,
    .params = {{"dtype", JIT_P_DTYPE}},
    .render_entry = render_merge,
    .config_count = count_merge,
    .config = config_merge,
};

/* 256 threads of four 16-byte vectors each (one row's; mla_append.cuh): a pure copy. */
#define MLA_APPEND_THREADS 256
void jit_mla_append_select(int dtype, jit_key *out) {
  out->op = &jit_op_append_paged_mla;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[MLA_APPEND_P_DTYPE] = dtype;
  out->v[MLA_APPEND_P_THREADS] = MLA_APPEND_THREADS;
}
static int render_append(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_append_mla_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::append_paged_mla<%s, %d>(p);\n"
                   "}\n",
                   (int)k->v[MLA_APPEND_P_THREADS], entry, jit_dtype_cxx((int)k->v[MLA_APPEND_P_DTYPE]),
                   (int)k->v[MLA_APPEND_P_THREADS]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static void config_append(int idx, jit_key *out) { jit_mla_append_select(dtypes[idx], out); }

const jit_op jit_op_append_paged_mla = {
    .name = "append_paged_mla",
    .template_name = "mla_append.cuh",
    .nparams = 2,
    .params = {{"dtype", JIT_P_DTYPE}, {"threads", JIT_P_INT}},
    .render_entry = render_append,
    .config_count = count_merge,
    .config = config_append,
};
