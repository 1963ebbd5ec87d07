/* ops_sampling.c: the sampling op family (softmax, sampling from probabilities or
 * logits, top-k / top-p / min-p, renorm, mask): its key, entry wrapper and registered
 * configurations (every key jit_sampling_select can return). */
#include "ops_sampling.h"

#include <stdio.h>

#include "jit_registry.h"
#include "sampling_params.h"

static const int dtypes[] = {JIT_DT_F32, JIT_DT_F16, JIT_DT_BF16};
static const int vecs[] = {4, 1};
static const int clusters[] = {1, 4, 8};
#define NDT 3
#define NVEC 2
#define NCL 3

int jit_sampling_has_select(int op) {
  return op == FI_SMP_TOPK || op == FI_SMP_TOPP || op == FI_SMP_TOPK_TOPP_LOGITS ||
         op == FI_SMP_TOPK_RENORM || op == FI_SMP_TOPP_RENORM || op == FI_SMP_TOPK_MASK ||
         op == FI_SMP_TOPK_TOPP_PROBS;
}

void jit_sampling_select(int op, int dtype, int vec, int cluster, int sel, jit_key *out) {
  out->op = &jit_op_sampling;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[SMP_P_OP] = op;
  out->v[SMP_P_DTYPE] = dtype;
  out->v[SMP_P_VEC] = vec;
  out->v[SMP_P_THREADS] = SMP_THREADS;
  out->v[SMP_P_CLUSTER] = cluster;
  /* The key-range search is built for float32 inputs only (the others use the radix one). */
  out->v[SMP_P_SEL] = jit_sampling_has_select(op) && sel == 1 && dtype == JIT_DT_F32 ? 1 : 0;
}

int jit_sampling_valid(const jit_key *k) {
  const int64_t *v = k->v;
  if (k->op != &jit_op_sampling || v[SMP_P_OP] < 0 || v[SMP_P_OP] >= FI_SMP_OP_COUNT) return 0;
  if (v[SMP_P_DTYPE] != JIT_DT_F32 && v[SMP_P_DTYPE] != JIT_DT_F16 && v[SMP_P_DTYPE] != JIT_DT_BF16)
    return 0;
  if (v[SMP_P_VEC] != 4 && v[SMP_P_VEC] != 1) return 0;
  if (v[SMP_P_THREADS] != SMP_THREADS) return 0;
  if (v[SMP_P_SEL] != 0 && !(v[SMP_P_SEL] == 1 && jit_sampling_has_select((int)v[SMP_P_OP]) &&
                             v[SMP_P_DTYPE] == JIT_DT_F32))
    return 0;
  return v[SMP_P_CLUSTER] == 1 || v[SMP_P_CLUSTER] == 4 || v[SMP_P_CLUSTER] == 8;
}

/* A cluster configuration is compiled for sm_90 and newer only; elsewhere (sm_80,
 * gfx90a) its entry traps, and the runtime never picks it there. */
static int render(const jit_key *k, const char *entry, char *buf, size_t n) {
  const int op = (int)k->v[SMP_P_OP], threads = (int)k->v[SMP_P_THREADS];
  const int vec = (int)k->v[SMP_P_VEC], cl = (int)k->v[SMP_P_CLUSTER];
  const int sel = (int)k->v[SMP_P_SEL];
  const char *t = jit_dtype_cxx((int)k->v[SMP_P_DTYPE]);
  int w;
  if (cl == 1)
    w = snprintf(buf, n,
                 "extern \"C\" __global__ void __launch_bounds__(%d, 4)\n"
                 "%s(fi_sampling_params p) {\n"
                 "  fi_pdl_enter();\n"
                 "  fi::smp::sampling_op<%d, %s, %d, %d, 1, %d>(p);\n"
                 "}\n",
                 threads, entry, op, t, vec, threads, sel);
  else
    w = snprintf(
        buf, n,
        "#if FI_SMP_CLUSTER\n"
        "extern \"C\" __global__ void __cluster_dims__(%d, 1, 1) __launch_bounds__(%d, 4)\n"
        "%s(fi_sampling_params p) {\n"
        "  fi_pdl_enter();\n"
        "  fi::smp::sampling_op<%d, %s, %d, %d, %d, %d>(p);\n"
        "}\n"
        "#else\n"
        "extern \"C\" __global__ void __launch_bounds__(%d, 4)\n"
        "%s(fi_sampling_params p) {\n"
        "  fi_pdl_enter();\n"
        "  fi::smp::no_clusters();\n"
        "}\n"
        "#endif\n",
        cl, threads, entry, op, t, vec, threads, cl, sel, threads, entry);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

/* Every (op, threshold search, dtype, access width, cluster size) once: the keys
 * jit_sampling_select can return (search 1 for the threshold ops on float32 only).
 * Writes configuration idx to out (when not NULL); returns how many there are. */
static int enumerate(int idx, jit_key *out) {
  int n = 0;
  for (int op = 0; op < FI_SMP_OP_COUNT; op++)
    for (int sel = 0; sel < 2; sel++)
      for (int d = 0; d < NDT; d++) {
        if (sel && !(jit_sampling_has_select(op) && dtypes[d] == JIT_DT_F32)) continue;
        for (int v = 0; v < NVEC; v++)
          for (int c = 0; c < NCL; c++, n++)
            if (out && n == idx) jit_sampling_select(op, dtypes[d], vecs[v], clusters[c], sel, out);
      }
  return n;
}

static int count(void) { return enumerate(-1, NULL); }

static void config(int idx, jit_key *out) { enumerate(idx, out); }

const jit_op jit_op_sampling = {
    .name = "sampling",
    .template_name = "sampling.cuh",
    .nparams = 6,
    .params = {{"kind", JIT_P_INT},
               {"dtype", JIT_P_DTYPE},
               {"vec", JIT_P_INT},
               {"threads", JIT_P_INT},
               {"cluster", JIT_P_INT},
               {"sel", JIT_P_INT}},
    .render_entry = render,
    .config_count = count,
    .config = config,
};

/* ---- chain speculative sampling (spec_sampling.cuh): one configuration ---- */

void jit_spec_sampling_select(jit_key *out) {
  out->op = &jit_op_spec_sampling;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[0] = FI_SPEC_THREADS;
}

static int render_spec(const jit_key *k, const char *entry, char *buf, size_t n) {
  const int w = snprintf(buf, n,
                         "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                         "%s(fi_spec_params p) {\n"
                         "  fi_pdl_enter();\n"
                         "  fi::spec::chain<%d>(p);\n"
                         "}\n",
                         (int)k->v[0], entry, (int)k->v[0]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int count_spec(void) { return 1; }
static void config_spec(int idx, jit_key *out) {
  (void)idx;
  jit_spec_sampling_select(out);
}

const jit_op jit_op_spec_sampling = {
    .name = "spec_sampling",
    .template_name = "spec_sampling.cuh",
    .nparams = 1,
    .params = {{"threads", JIT_P_INT}},
    .render_entry = render_spec,
    .config_count = count_spec,
    .config = config_spec,
};
