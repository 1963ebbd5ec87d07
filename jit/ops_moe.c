/* ops_moe.c: the mixture-of-experts op families: routing's and the sort's keys, entry
 * wrappers and registered configurations (every key their select functions can return). */
#include <stdio.h>
#include <string.h>

#include "jit_arch.h"
#include "jit_registry.h"
#include "moe_params.h"
#include "ops_moe.h"

static const int dtypes[2] = {JIT_DT_F32, JIT_DT_BF16};
#define NEPL 5 /* 1, 2, 4, 8, 16 experts a lane */

void jit_moe_routing_select(int dtype, int method, int experts, int warp, jit_key *out) {
  int epl = 1;
  while (epl * warp < experts && epl < MOE_ROUTE_MAX_EPL) epl *= 2;
  out->op = &jit_op_moe_routing;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[MOE_ROUTE_P_DTYPE] = dtype;
  out->v[MOE_ROUTE_P_METHOD] = method;
  out->v[MOE_ROUTE_P_EPL] = epl;
}

static int render(const jit_key *k, const char *entry, char *buf, size_t n) {
  const int threads = MOE_ROUTE_WARPS * 32;
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d * FI_WARP / 32)\n"
                   "%s(fi_moe_route_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::moe::routing<%s, %d, %d, %d>(p);\n"
                   "}\n",
                   threads, entry, jit_dtype_cxx((int)k->v[MOE_ROUTE_P_DTYPE]), (int)k->v[MOE_ROUTE_P_METHOD],
                   (int)k->v[MOE_ROUTE_P_EPL], MOE_ROUTE_WARPS);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

/* Every (dtype, method, experts a lane) once. */
static int count(void) { return 2 * FI_MOE_METHOD_COUNT * NEPL; }

static void config(int idx, jit_key *out) {
  const int epl = 1 << (idx % NEPL);
  jit_moe_routing_select(dtypes[idx / NEPL / FI_MOE_METHOD_COUNT], idx / NEPL % FI_MOE_METHOD_COUNT, epl * 32, 32,
                         out);
}

const jit_op jit_op_moe_routing = {
    .name = "moe_routing",
    .template_name = "moe_routing.cuh",
    .nparams = 3,
    .params = {{"dtype", JIT_P_DTYPE}, {"method", JIT_P_INT}, {"epl", JIT_P_INT}},
    .render_entry = render,
    .config_count = count,
    .config = config,
};

void jit_moe_sort_select(int phase, jit_key *out) {
  out->op = &jit_op_moe_sort;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[MOE_SORT_P_PHASE] = phase;
}

static int render_sort(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(1024)\n"
                   "%s(fi_moe_sort_params_k p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::moe::sort<%d>(p);\n"
                   "}\n",
                   entry, (int)k->v[MOE_SORT_P_PHASE]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

static int count_sort(void) { return 2; }
/* The place kernel first: the one every call launches (the one a test sampling one an op compiles). */
static void config_sort(int idx, jit_key *out) { jit_moe_sort_select(1 - idx, out); }

const jit_op jit_op_moe_sort = {
    .name = "moe_sort",
    .template_name = "moe_sort.cuh",
    .nparams = 1,
    .params = {{"phase", JIT_P_INT}},
    .render_entry = render_sort,
    .config_count = count_sort,
    .config = config_sort,
};

void jit_moe_combine_select(int kind, int dtype, int vec, jit_key *out) {
  out->op = &jit_op_moe_combine;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[MOE_COMBINE_P_KIND] = kind;
  out->v[MOE_COMBINE_P_DTYPE] = dtype;
  out->v[MOE_COMBINE_P_VEC] = vec;
}

static int render_combine(const jit_key *k, const char *entry, char *buf, size_t n) {
  const int kind = (int)k->v[MOE_COMBINE_P_KIND];
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(%s p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::moe::%s<%s, %d>(p);\n"
                   "}\n",
                   MOE_COMBINE_THREADS, entry, kind ? "fi_moe_finalize_params" : "fi_moe_permute_params",
                   kind ? "finalize" : "permute", jit_dtype_cxx((int)k->v[MOE_COMBINE_P_DTYPE]),
                   (int)k->v[MOE_COMBINE_P_VEC]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

/* (dtype, vec) pairs: 16, 8, 4 and 2-byte accesses, and single elements. */
static const struct {
  int dtype, vec;
} cdv[] = {{JIT_DT_F16, 8},  {JIT_DT_F16, 4},  {JIT_DT_F16, 2},  {JIT_DT_F16, 1}, {JIT_DT_BF16, 8}, {JIT_DT_BF16, 4},
           {JIT_DT_BF16, 2}, {JIT_DT_BF16, 1}, {JIT_DT_F32, 4},  {JIT_DT_F32, 2}, {JIT_DT_F32, 1}};
#define NCDV ((int)(sizeof cdv / sizeof cdv[0]))

static int count_combine(void) { return 2 * NCDV; }
static void config_combine(int idx, jit_key *out) {
  jit_moe_combine_select(idx / NCDV, cdv[idx % NCDV].dtype, cdv[idx % NCDV].vec, out);
}

const jit_op jit_op_moe_combine = {
    .name = "moe_combine",
    .template_name = "moe_combine.cuh",
    .nparams = 3,
    .params = {{"kind", JIT_P_INT}, {"dtype", JIT_P_DTYPE}, {"vec", JIT_P_INT}},
    .render_entry = render_combine,
    .config_count = count_combine,
    .config = config_combine,
};

/* ---- the experts' grouped GEMM (moe_gemm.cuh) ---- */

/* Bytes of a stage: the A tile and the weight tile(s), 64 k of 2-byte elements each. */
static unsigned gemm_stage_bytes(int bm, int bn, int gated) { return (unsigned)((bm + (gated ? 2 : 1) * bn) * 64 * 2); }

static unsigned gemm_smem(const jit_key *k) {
  return (unsigned)k->v[MOE_GEMM_P_STAGES] *
         gemm_stage_bytes((int)k->v[MOE_GEMM_P_BM], (int)k->v[MOE_GEMM_P_BN], (int)k->v[MOE_GEMM_P_GATED]);
}

int jit_moe_gemm_stages(int bm, int bn, int gated, int smem_kb) {
  const int s = bm == 16 ? 4 : 3;
  return s * gemm_stage_bytes(bm, bn, gated) <= (unsigned)smem_kb * 1024u ? s : 2;
}

void jit_moe_gemm_select(int dtype, int bm, int bn, int gated, int gather, int stages, jit_key *out) {
  out->op = &jit_op_moe_gemm;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[MOE_GEMM_P_DTYPE] = dtype;
  out->v[MOE_GEMM_P_BM] = bm;
  out->v[MOE_GEMM_P_BN] = bn;
  out->v[MOE_GEMM_P_GATED] = gated;
  out->v[MOE_GEMM_P_GATHER] = gather;
  out->v[MOE_GEMM_P_STAGES] = stages;
}

static int render_gemm(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_moe_gemm_params_k p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::moe::gemm<%s, %d, %d, %d, %d, %d>(p);\n"
                   "}\n",
                   MOE_GEMM_THREADS, entry, jit_dtype_cxx((int)k->v[MOE_GEMM_P_DTYPE]), (int)k->v[MOE_GEMM_P_BM],
                   (int)k->v[MOE_GEMM_P_BN], (int)k->v[MOE_GEMM_P_GATED], (int)k->v[MOE_GEMM_P_GATHER],
                   (int)k->v[MOE_GEMM_P_STAGES]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

/* The block shapes jit_moe_gemm_choose picks: (rows, columns, gated). */
static const struct {
  int bm, bn, gated;
} gemm_shapes[] = {{16, 64, 1},  {16, 64, 0},  {16, 128, 0}, {64, 64, 1},  {64, 64, 0},
                   {64, 128, 0}, {128, 64, 1}, {128, 64, 0}, {128, 128, 0}};
#define NGEMM_SHAPES ((int)(sizeof gemm_shapes / sizeof gemm_shapes[0]))

/* dtype x shape x gather x stages (the shape's count where shared memory is large, and 2:
 * the fewest any device takes). */
static int count_gemm(void) { return 2 * NGEMM_SHAPES * 2 * 2; }
static void config_gemm(int idx, jit_key *out) {
  const int s = idx % NGEMM_SHAPES, gather = idx / NGEMM_SHAPES % 2, small = idx / NGEMM_SHAPES / 2 % 2;
  const int dt = idx / NGEMM_SHAPES / 4 ? JIT_DT_BF16 : JIT_DT_F16;
  jit_moe_gemm_select(dt, gemm_shapes[s].bm, gemm_shapes[s].bn, gemm_shapes[s].gated, gather,
                      small ? 2 : jit_moe_gemm_stages(gemm_shapes[s].bm, gemm_shapes[s].bn, gemm_shapes[s].gated, 227),
                      out);
}

const jit_op jit_op_moe_gemm = {
    .name = "moe_gemm",
    .template_name = "moe_gemm.cuh",
    .nparams = 6,
    .params = {{"dtype", JIT_P_DTYPE},
               {"bm", JIT_P_INT},
               {"bn", JIT_P_INT},
               {"gated", JIT_P_INT},
               {"gather", JIT_P_INT},
               {"stages", JIT_P_INT}},
    .render_entry = render_gemm,
    .config_count = count_gemm,
    .config = config_gemm,
    .dyn_smem = gemm_smem,
};

void jit_moe_gemm_rule(int64_t routes, int local_experts, int tile_size, int gated, int64_t n, int smem_kb,
                       int wgmma, jit_moe_gemm_tactic *t) {
  const int bm = routes < 32 * (int64_t)local_experts ? 16 : tile_size < 128 ? tile_size : 128;
  t->wgmma = wgmma && bm == 128 && n % 128 == 0 && smem_kb >= 227;
  t->bm = bm;
  t->bn = t->wgmma ? (gated ? 64 : 128) : !gated && bm >= 64 && n % 128 == 0 ? 128 : 64;
  t->stages = t->wgmma ? MOE_GEMM_WG_STAGES : jit_moe_gemm_stages(bm, t->bn, gated, smem_kb);
}

int jit_moe_gemm_tactic_key(const jit_moe_gemm_tactic *t, int dtype, int tile_size, int gated, int gather,
                            int64_t n, int smem_kb, int wgmma, jit_key *out) {
  if (t->wgmma) {
    if (!wgmma || tile_size < 128 || n % 128 || smem_kb < 227 || t->stages != MOE_GEMM_WG_STAGES) return -1;
    jit_moe_gemm_wg_select(dtype, gated, gather, MOE_GEMM_WG_STAGES, out);
    return 0;
  }
  int shape = 0;
  for (int i = 0; i < NGEMM_SHAPES; i++)
    shape |= gemm_shapes[i].bm == t->bm && gemm_shapes[i].bn == t->bn && gemm_shapes[i].gated == gated;
  if (!shape || t->bm > tile_size || n % t->bn) return -1;
  /* The two registered stage counts (prewarm's), and what the device's shared memory takes. */
  const int full = jit_moe_gemm_stages(t->bm, t->bn, gated, 227);
  if ((t->stages != 2 && t->stages != full) ||
      (unsigned)t->stages * gemm_stage_bytes(t->bm, t->bn, gated) > (unsigned)smem_kb * 1024u)
    return -1;
  jit_moe_gemm_select(dtype, t->bm, t->bn, gated, gather, t->stages, out);
  return 0;
}

void jit_moe_gemm_choose(int dtype, int64_t routes, int local_experts, int tile_size, int block_m, int gated,
                         int gather, int64_t n, int smem_kb, int wgmma, jit_key *out) {
  jit_moe_gemm_tactic t;
  jit_moe_gemm_rule(routes, local_experts, tile_size, gated, n, smem_kb, wgmma, &t);
  if (block_m && block_m != t.bm) {
    /* The caller's rows: the rule's columns and stages for them. */
    t.bm = block_m;
    t.wgmma = wgmma && block_m == 128 && n % 128 == 0 && smem_kb >= 227;
    t.bn = t.wgmma ? (gated ? 64 : 128) : !gated && block_m >= 64 && n % 128 == 0 ? 128 : 64;
    t.stages = t.wgmma ? MOE_GEMM_WG_STAGES : jit_moe_gemm_stages(block_m, t.bn, gated, smem_kb);
  }
  if (t.wgmma)
    jit_moe_gemm_wg_select(dtype, gated, gather, MOE_GEMM_WG_STAGES, out);
  else
    jit_moe_gemm_select(dtype, t.bm, t.bn, gated, gather, t.stages, out);
}

int jit_moe_gemm_tactic_format(const jit_moe_gemm_tactic *t, char *buf, size_t n) {
  const int w = t->wgmma ? snprintf(buf, n, "kernel=wgmma")
                         : snprintf(buf, n, "kernel=mma;bm=%d;bn=%d;stages=%d", t->bm, t->bn, t->stages);
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

int jit_moe_gemm_tactic_parse(const char *s, jit_moe_gemm_tactic *t) {
  int bm, bn, st, used = 0;
  if (strcmp(s, "kernel=wgmma") == 0) {
    *t = (jit_moe_gemm_tactic){1, 128, 0, MOE_GEMM_WG_STAGES};
    return 0;
  }
  if (sscanf(s, "kernel=mma;bm=%d;bn=%d;stages=%d%n", &bm, &bn, &st, &used) != 3 || s[used] != 0) return -1;
  *t = (jit_moe_gemm_tactic){0, bm, bn, st};
  return 0;
}

int jit_moe_gemm_tactics(int64_t routes, int local_experts, int tile_size, int gated, int64_t n, int smem_kb,
                         int wgmma, jit_moe_gemm_tactic *out, int max) {
  int c = 0;
  jit_moe_gemm_tactic rule;
  jit_moe_gemm_rule(routes, local_experts, tile_size, gated, n, smem_kb, wgmma, &rule);
  jit_key k;
  if (c < max) out[c++] = rule;
  const jit_moe_gemm_tactic wg = {1, 128, gated ? 64 : 128, MOE_GEMM_WG_STAGES};
  if (!rule.wgmma && c < max && jit_moe_gemm_tactic_key(&wg, JIT_DT_BF16, tile_size, gated, 0, n, smem_kb, wgmma, &k) == 0)
    out[c++] = wg;
  for (int i = 0; i < NGEMM_SHAPES; i++)
    for (int two = 0; two < 2; two++) {
      const jit_moe_gemm_tactic t = {0, gemm_shapes[i].bm, gemm_shapes[i].bn,
                                     two ? 2 : jit_moe_gemm_stages(gemm_shapes[i].bm, gemm_shapes[i].bn, gated, 227)};
      if (gemm_shapes[i].gated != gated || (two && t.stages == 2) || c >= max) continue;
      if (!rule.wgmma && t.bm == rule.bm && t.bn == rule.bn && t.stages == rule.stages) continue;
      if (jit_moe_gemm_tactic_key(&t, JIT_DT_BF16, tile_size, gated, 0, n, smem_kb, wgmma, &k) == 0) out[c++] = t;
    }
  return c;
}

/* ---- the grouped GEMM on wgmma (moe_gemm_wgmma.cuh; sm_90a) ---- */

void jit_moe_gemm_wg_select(int dtype, int gated, int gather, int stages, jit_key *out) {
  out->op = &jit_op_moe_gemm_sm90;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[MOE_GEMM_WG_P_DTYPE] = dtype;
  out->v[MOE_GEMM_WG_P_GATED] = gated;
  out->v[MOE_GEMM_WG_P_GATHER] = gather;
  out->v[MOE_GEMM_WG_P_STAGES] = stages;
}

/* Stages of two [128][64] tiles, and the slack that aligns them to 1024 bytes. */
static unsigned wg_smem(const jit_key *k) { return (unsigned)k->v[MOE_GEMM_WG_P_STAGES] * 32768u + 1024u; }

static int render_wg(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_moe_gemm_params_k p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::moe::gemm_wg<%s, %d, %d, %d>(p);\n"
                   "}\n",
                   MOE_GEMM_WG_THREADS, entry, jit_dtype_cxx((int)k->v[MOE_GEMM_WG_P_DTYPE]),
                   (int)k->v[MOE_GEMM_WG_P_GATED], (int)k->v[MOE_GEMM_WG_P_GATHER], (int)k->v[MOE_GEMM_WG_P_STAGES]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

/* dtype x gated x gather, the one stage count. */
static int count_wg(void) { return 8; }
static void config_wg(int idx, jit_key *out) {
  jit_moe_gemm_wg_select(idx & 4 ? JIT_DT_BF16 : JIT_DT_F16, idx & 1, (idx >> 1) & 1, MOE_GEMM_WG_STAGES, out);
}


const jit_op jit_op_moe_gemm_sm90 = {
    .name = "moe_gemm_sm90",
    .template_name = "moe_gemm_wgmma.cuh",
    .nparams = 4,
    .params = {{"dtype", JIT_P_DTYPE}, {"gated", JIT_P_INT}, {"gather", JIT_P_INT}, {"stages", JIT_P_INT}},
    .render_entry = render_wg,
    .config_count = count_wg,
    .config = config_wg,
    .dyn_smem = wg_smem,
    .target_arch = jit_arch_sm90a,
};
