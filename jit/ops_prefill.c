/* ops_prefill.c: the prefill attention op families (single_prefill, batch_prefill on
 * mma.sync; single_prefill_sm90, batch_prefill_sm90 on wgmma), the split-KV merge
 * (prefill_merge) and the tensor-core probe (mma_probe): their keys, entry wrappers and
 * registered configurations (every key the selectors can return). */
#include "ops_prefill.h"

#include <stdio.h>
#include <string.h>

#include "jit_arch.h"
#include "jit_registry.h"
#include "prefill_params.h"

static const int dtypes[] = {JIT_DT_F16, JIT_DT_BF16};
static const int dims[] = {64, 128, 256};
static const int tiles[] = {16, 64, 128};

int jit_prefill_q_tile(int head_dim, int64_t max_rows) {
  if (max_rows <= 16) return 16;
  if (max_rows <= 64 || head_dim > 128) return 64;
  return 128;
}

int jit_prefill_kv_tile(int head_dim) {
  (void)head_dim;
  return 64;
}

int jit_prefill_is_wgmma(const jit_key *k) {
  return k->op == &jit_op_single_prefill_sm90 || k->op == &jit_op_batch_prefill_sm90;
}

int jit_prefill_key_q_tile(const jit_key *k) {
  return jit_prefill_is_wgmma(k) ? 64 * (int)k->v[PREFILL_WG_P_WARPGROUPS] : (int)k->v[PREFILL_P_Q_TILE];
}

static unsigned wg_smem(const jit_key *k);
int jit_prefill_persistent_blocks(const jit_key *k) {
  if (k->op != &jit_op_batch_prefill_sm90 || k->v[PREFILL_WG_P_PRODUCER] <= 0) return 0;
  /* render_wg's launch bounds, then what an SM's 228 KB of shared memory holds (1 KB a
   * block reserved): one consumer with 128-token tiles at head_dim 128 fits once. */
  int b = k->v[PREFILL_WG_P_WARPGROUPS] == 1 ? 2 : 1;
  while (b > 1 && (unsigned)b * (wg_smem(k) + 1024u) > 228u * 1024) b--;
  return b;
}

unsigned jit_prefill_threads(const jit_key *k) {
  if (jit_prefill_is_wgmma(k))
    return 128u * (unsigned)(k->v[PREFILL_WG_P_WARPGROUPS] + (k->v[PREFILL_WG_P_PRODUCER] > 0));
  return 32u * FI_PF_WARPS(k->v[PREFILL_P_HEAD_DIM], k->v[PREFILL_P_Q_TILE]);
}

int jit_prefill_is_dvo(const jit_key *k) {
  return k->op == &jit_op_single_prefill_dvo || k->op == &jit_op_batch_prefill_dvo;
}

static unsigned dyn_smem(const jit_key *k) {
  if (jit_prefill_is_dvo(k))
    return (unsigned)FI_PF_SMEM_DV(k->v[PREFILL_P_HEAD_DIM], k->v[PREFILL_P_HEAD_DIM_VO], k->v[PREFILL_P_Q_TILE]);
  return (unsigned)FI_PF_SMEM(k->v[PREFILL_P_HEAD_DIM], k->v[PREFILL_P_Q_TILE]);
}

void jit_prefill_select(int single, int dtype, int head_dim, int q_tile, int rope, jit_key *out) {
  out->op = single ? &jit_op_single_prefill : &jit_op_batch_prefill;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[PREFILL_P_DTYPE] = dtype;
  out->v[PREFILL_P_HEAD_DIM] = head_dim;
  out->v[PREFILL_P_Q_TILE] = q_tile;
  out->v[PREFILL_P_ROPE] = rope ? 1 : 0;
}

void jit_prefill_fp8_select(int single, int dtype, int kv_dtype, int head_dim, int q_tile, jit_key *out) {
  out->op = single ? &jit_op_single_prefill_fp8kv : &jit_op_batch_prefill_fp8kv;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[PREFILL_P_DTYPE] = dtype;
  out->v[PREFILL_P_HEAD_DIM] = head_dim;
  out->v[PREFILL_P_Q_TILE] = q_tile;
  out->v[PREFILL_P_KV_DTYPE] = kv_dtype;
}

void jit_prefill_dvo_select(int single, int dtype, int head_dim, int head_dim_vo, int q_tile, jit_key *out) {
  out->op = single ? &jit_op_single_prefill_dvo : &jit_op_batch_prefill_dvo;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[PREFILL_P_DTYPE] = dtype;
  out->v[PREFILL_P_HEAD_DIM] = head_dim;
  out->v[PREFILL_P_Q_TILE] = q_tile;
  out->v[PREFILL_P_HEAD_DIM_VO] = head_dim_vo;
}

static int fp8_op(const jit_key *k) {
  return k->op == &jit_op_single_prefill_fp8kv || k->op == &jit_op_batch_prefill_fp8kv;
}

static int render(const jit_key *k, const char *entry, char *buf, size_t n, int single) {
  const int64_t *v = k->v;
  const unsigned threads = jit_prefill_threads(k);
  const int f8 = fp8_op(k);
  /* Four-warp blocks: two per SM (up to 255 registers a thread), so one block's
   * barriers and loads overlap the other's mma. */
  if (jit_prefill_is_dvo(k)) {
    const char *t = jit_dtype_cxx((int)v[PREFILL_P_DTYPE]);
    const int w = snprintf(buf, n,
                           "extern \"C\" __global__ void __launch_bounds__(%u, %d)\n"
                           "%s(fi_prefill_kparams p) {\n"
                           "  fi_pdl_enter();\n"
                           "  fi::pf::prefill<%s, %d, %d, 0, %d, %s, %d>(p);\n"
                           "}\n",
                           threads, threads >= 128 ? 2 : 1, entry, t, (int)v[PREFILL_P_HEAD_DIM],
                           (int)v[PREFILL_P_Q_TILE], single, t, (int)v[PREFILL_P_HEAD_DIM_VO]);
    return w < 0 || (size_t)w >= n ? -1 : w;
  }
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%u, %d)\n"
                   "%s(fi_prefill_kparams p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::pf::prefill<%s, %d, %d, %d, %d%s%s>(p);\n"
                   "}\n",
                   threads, threads >= 128 ? 2 : 1, entry, jit_dtype_cxx((int)v[PREFILL_P_DTYPE]),
                   (int)v[PREFILL_P_HEAD_DIM], (int)v[PREFILL_P_Q_TILE], f8 ? 0 : (int)v[PREFILL_P_ROPE],
                   single, f8 ? ", " : "", f8 ? jit_dtype_cxx((int)v[PREFILL_P_KV_DTYPE]) : "");
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int render_single(const jit_key *k, const char *e, char *b, size_t n) { return render(k, e, b, n, 1); }
static int render_batch(const jit_key *k, const char *e, char *b, size_t n) { return render(k, e, b, n, 0); }

/* (dtype, head_dim, q tile, rope) with the q tile 128 only up to head_dim 128: the
 * tiles jit_prefill_q_tile returns. */
#define NCFG_PER_DT_ROPE 8
static int count(void) { return 2 * 2 * NCFG_PER_DT_ROPE; }
static void config(int single, int idx, jit_key *out) {
  const int rope = idx % 2, dt = dtypes[(idx / 2) % 2];
  int s = idx / 4, dim = 0, tile = 0;
  for (int d = 0; d < 3 && !dim; d++)
    for (int t = 0; t < 3; t++) {
      if (dims[d] > 128 && tiles[t] > 64) continue;
      if (s-- == 0) {
        dim = dims[d];
        tile = tiles[t];
        break;
      }
    }
  jit_prefill_select(single, dt, dim, tile, rope, out);
}
static void config_single(int idx, jit_key *out) { config(1, idx, out); }
static void config_batch(int idx, jit_key *out) { config(0, idx, out); }
/* The fp8 ops: the same (head_dim, q tile) list, rope's place taken by the cache's dtype. */
static void config_fp8(int single, int idx, jit_key *out) {
  config(single, idx, out);
  static const int kvs[] = {JIT_DT_E4M3, JIT_DT_E5M2};
  jit_prefill_fp8_select(single, (int)out->v[PREFILL_P_DTYPE], kvs[idx % 2], (int)out->v[PREFILL_P_HEAD_DIM],
                         (int)out->v[PREFILL_P_Q_TILE], out);
}
static void config_single_fp8(int idx, jit_key *out) { config_fp8(1, idx, out); }
static void config_batch_fp8(int idx, jit_key *out) { config_fp8(0, idx, out); }

#define PREFILL_PARAMS                                                                  \
  {{"dtype", JIT_P_DTYPE}, {"head_dim", JIT_P_INT}, {"q_tile", JIT_P_INT}, {"rope", JIT_P_INT}}

const jit_op jit_op_single_prefill = {
    .name = "single_prefill",
    .template_name = "prefill.cuh",
    .nparams = 4,
    .params = PREFILL_PARAMS,
    .render_entry = render_single,
    .config_count = count,
    .config = config_single,
    .dyn_smem = dyn_smem,
};

const jit_op jit_op_batch_prefill = {
    .name = "batch_prefill",
    .template_name = "prefill.cuh",
    .nparams = 4,
    .params = PREFILL_PARAMS,
    .render_entry = render_batch,
    .config_count = count,
    .config = config_batch,
    .dyn_smem = dyn_smem,
};

#define PREFILL_FP8_PARAMS                                                              \
  {{"dtype", JIT_P_DTYPE}, {"head_dim", JIT_P_INT}, {"q_tile", JIT_P_INT}, {"kv_dtype", JIT_P_DTYPE}}

const jit_op jit_op_single_prefill_fp8kv = {
    .name = "single_prefill_fp8kv",
    .template_name = "prefill.cuh",
    .nparams = 4,
    .params = PREFILL_FP8_PARAMS,
    .render_entry = render_single,
    .config_count = count,
    .config = config_single_fp8,
    .dyn_smem = dyn_smem,
};

const jit_op jit_op_batch_prefill_fp8kv = {
    .name = "batch_prefill_fp8kv",
    .template_name = "prefill.cuh",
    .nparams = 4,
    .params = PREFILL_FP8_PARAMS,
    .render_entry = render_batch,
    .config_count = count,
    .config = config_batch_fp8,
    .dyn_smem = dyn_smem,
};

/* The *_dvo ops: (dtype) x (q tile 16, 64) at head_dim 192 with V's 128. */
static int count_dvo(void) { return 2 * 2; }
static void config_dvo(int single, int idx, jit_key *out) {
  jit_prefill_dvo_select(single, dtypes[idx % 2], 192, 128, idx / 2 ? 64 : 16, out);
}
static void config_single_dvo(int idx, jit_key *out) { config_dvo(1, idx, out); }
static void config_batch_dvo(int idx, jit_key *out) { config_dvo(0, idx, out); }

#define PREFILL_DVO_PARAMS                                                              \
  {{"dtype", JIT_P_DTYPE}, {"head_dim", JIT_P_INT}, {"q_tile", JIT_P_INT}, {"head_dim_vo", JIT_P_INT}}

const jit_op jit_op_single_prefill_dvo = {
    .name = "single_prefill_dvo",
    .template_name = "prefill.cuh",
    .nparams = 4,
    .params = PREFILL_DVO_PARAMS,
    .render_entry = render_single,
    .config_count = count_dvo,
    .config = config_single_dvo,
    .dyn_smem = dyn_smem,
};

const jit_op jit_op_batch_prefill_dvo = {
    .name = "batch_prefill_dvo",
    .template_name = "prefill.cuh",
    .nparams = 4,
    .params = PREFILL_DVO_PARAMS,
    .render_entry = render_batch,
    .config_count = count_dvo,
    .config = config_batch_dvo,
    .dyn_smem = dyn_smem,
};

void jit_prefill_merge_select(int dtype, int head_dim, jit_key *out) {
  out->op = &jit_op_prefill_merge;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[PREFILL_MERGE_P_DTYPE] = dtype;
  out->v[PREFILL_MERGE_P_HEAD_DIM] = head_dim;
}
static int render_merge(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_prefill_merge_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::pf::prefill_merge<%s, %d>(p);\n"
                   "}\n",
                   PREFILL_MERGE_THREADS, entry, jit_dtype_cxx((int)k->v[PREFILL_MERGE_P_DTYPE]),
                   (int)k->v[PREFILL_MERGE_P_HEAD_DIM]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int count_merge(void) { return 2 * 3; }
static void config_merge(int idx, jit_key *out) {
  jit_prefill_merge_select(dtypes[idx % 2], dims[idx / 2], out);
}

const jit_op jit_op_prefill_merge = {
    .name = "prefill_merge",
    .template_name = "prefill.cuh",
    .nparams = 2,
    .params = {{"dtype", JIT_P_DTYPE}, {"head_dim", JIT_P_INT}},
    .render_entry = render_merge,
    .config_count = count_merge,
    .config = config_merge,
};

void jit_mma_probe_select(jit_key *out) {
  out->op = &jit_op_mma_probe;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[0] = MMA_PROBE_THREADS;
}
static int render_probe(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_mma_probe_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::pf::mma_probe(p);\n"
                   "}\n",
                   (int)k->v[0], entry);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int count_probe(void) { return 1; }
static void config_probe(int idx, jit_key *out) {
  (void)idx;
  jit_mma_probe_select(out);
}

/* fi-bench's tensor-core probe (register-only bf16 mma.sync), the roofline of prefill. */
const jit_op jit_op_mma_probe = {
    .name = "mma_probe",
    .template_name = "prefill.cuh",
    .nparams = 1,
    .params = {{"threads", JIT_P_INT}},
    .render_entry = render_probe,
    .config_count = count_probe,
    .config = config_probe,
};

/* ---- the wgmma kernels (sm_90a) ---- */

void jit_prefill_wgmma_select(int single, int dtype, int head_dim, int q_tile, int kv_tile, int producer,
                              jit_key *out) {
  out->op = single ? &jit_op_single_prefill_sm90 : &jit_op_batch_prefill_sm90;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[PREFILL_WG_P_DTYPE] = dtype;
  out->v[PREFILL_WG_P_HEAD_DIM] = head_dim;
  out->v[PREFILL_WG_P_WARPGROUPS] = q_tile > 64 ? 2 : 1;
  out->v[PREFILL_WG_P_KV_TILE] = kv_tile > 64 ? 128 : 64;
  out->v[PREFILL_WG_P_PRODUCER] = producer <= 0 ? 0 : producer == 1 || q_tile <= 64 ? 1 : 2;
  /* three consumers (q tile 192): head_dim 64 with a producer only (152 registers a
   * consumer); else two */
  if (q_tile > 128 && head_dim == 64 && producer > 0) out->v[PREFILL_WG_P_WARPGROUPS] = 3;
  out->v[PREFILL_WG_P_STAGES] = 2;
  if (head_dim == 256) { /* one shape: its O takes 128 registers a thread, no room for a producer */
    out->v[PREFILL_WG_P_WARPGROUPS] = 2;
    out->v[PREFILL_WG_P_KV_TILE] = 64;
    out->v[PREFILL_WG_P_PRODUCER] = 0;
  }
}

/* Four K / V stages (the producer up to three tiles ahead) where registered, each with
 * the ping-pong (producer 2): head_dim 64 with two consumers and 128-token tiles, or three
 * consumers and 64-token tiles; head_dim 128 with two consumers and 64-token tiles (each
 * 195 KiB or less). Else the key keeps two: also head_dim 64's three consumers with
 * 128-token tiles, whose P goes through shared memory, for which four stages leave no
 * room (three do: wg_three_ok). */
static int wg_four_ok(const int64_t *v) {
  const int64_t d = v[PREFILL_WG_P_HEAD_DIM], wg = v[PREFILL_WG_P_WARPGROUPS], kt = v[PREFILL_WG_P_KV_TILE];
  if (v[PREFILL_WG_P_PRODUCER] != 2) return 0;
  if (d == 64) return (wg == 2 && kt == 128) || (wg == 3 && kt == 64);
  return d == 128 && wg == 2 && kt == 64;
}
/* Three stages for head_dim 64's three consumers with 128-token tiles and the ping-pong
 * (198 KB with P's tiles), its default: on the H200 ahead of two stages
 * (docs/prefill.md, fourteenth session). */
static int wg_three_ok(const int64_t *v) {
  return v[PREFILL_WG_P_HEAD_DIM] == 64 && v[PREFILL_WG_P_WARPGROUPS] == 3 && v[PREFILL_WG_P_KV_TILE] == 128 &&
         v[PREFILL_WG_P_PRODUCER] == 2;
}
void jit_prefill_wgmma_stages(jit_key *k, int stages) {
  if (stages == 4 && wg_four_ok(k->v)) k->v[PREFILL_WG_P_STAGES] = 4;
  if (stages == 3 && wg_three_ok(k->v)) k->v[PREFILL_WG_P_STAGES] = 3;
}
void jit_prefill_wgmma_soft_cap(jit_key *k, int on) { k->v[PREFILL_WG_P_SOFT_CAP] = on ? 1 : 0; }


/* The Q tile (two with a producer: the next unit's loads while this one finishes), the
 * stages of K and V, P's tiles where they go through shared memory, three token-offset
 * tables, the mbarriers and unit slot (64 + 32 a stage bytes), and the slack for
 * 1024-byte alignment (the 128-byte swizzle is applied to absolute addresses):
 * prefill_wgmma_unit.cuh's smem_size. */
static unsigned wg_smem(const jit_key *k) {
  const int64_t *v = k->v;
  /* three consumers with 128-token tiles and two or three stages: P goes through shared
   * memory (p_smem in prefill_wgmma_unit.cuh), a [64][128] tile a consumer, and 2048 bytes of
   * ones (the row sums' columns of P V) */
  const int64_t p = v[PREFILL_WG_P_WARPGROUPS] == 3 && v[PREFILL_WG_P_KV_TILE] == 128 && v[PREFILL_WG_P_STAGES] <= 3
                        ? v[PREFILL_WG_P_WARPGROUPS] * 64 * v[PREFILL_WG_P_KV_TILE] * 2 + 2048
                        : 0;
  return (unsigned)(((v[PREFILL_WG_P_PRODUCER] > 0 ? 2 : 1) * v[PREFILL_WG_P_WARPGROUPS] * 64 * v[PREFILL_WG_P_HEAD_DIM] +
                     2 * v[PREFILL_WG_P_STAGES] * v[PREFILL_WG_P_KV_TILE] * v[PREFILL_WG_P_HEAD_DIM]) * 2 +
                    p + 3 * v[PREFILL_WG_P_KV_TILE] * 8 + 64 + 32 * v[PREFILL_WG_P_STAGES] + 1024);
}

static int render_wg(const jit_key *k, const char *entry, char *buf, size_t n, int single) {
  const int64_t *v = k->v;
  /* OV = 1: a tile's softmax runs while the previous tile's P V is on the tensor cores.
   * The blocks an SM are also what setmaxnreg needs: ptxas moves registers between the
   * producer and the consumers only from a known count at entry. One consumer warpgroup
   * and a producer: two blocks an SM (the kernel's setmaxnreg counts assume it). */
  const unsigned threads = jit_prefill_threads(k);
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%u, %d)\n"
                   "%s(fi_prefill_kparams p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::wg::prefill_wgmma<%s, %d, %d, %d, %d, 1, %d, %d, %d>(p);\n"
                   "}\n",
                   threads, threads == 256 && v[PREFILL_WG_P_PRODUCER] ? 2 : 1, entry,
                   jit_dtype_cxx((int)v[PREFILL_WG_P_DTYPE]),
                   (int)v[PREFILL_WG_P_HEAD_DIM], (int)v[PREFILL_WG_P_KV_TILE],
                   (int)v[PREFILL_WG_P_WARPGROUPS], single, (int)v[PREFILL_WG_P_PRODUCER],
                   (int)v[PREFILL_WG_P_STAGES], (int)v[PREFILL_WG_P_SOFT_CAP]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int render_wg_single(const jit_key *k, const char *e, char *b, size_t n) { return render_wg(k, e, b, n, 1); }
static int render_wg_batch(const jit_key *k, const char *e, char *b, size_t n) { return render_wg(k, e, b, n, 0); }

/* dtype x head_dim (64, 128) x kv tile (64, 128) x (q tile, producer): (64, 0), (64, 1),
 * (128, 0), (128, 1), (128, 2); then head_dim 256 (q tile 128, kv tile 64, no producer)
 * for each dtype. */
/* Then head_dim 64's three consumers (q tile 192): dtype x kv tile x producer (1, 2). */
/* Then four stages (FI_PREFILL_STAGES=4; (128, 128, 64, 2) is also batch prefill's default
 * at 512-2048 packed rows, rt_prefill.c): each dtype x (head_dim, q tile, kv tile,
 * producer) of wg_four_ok: (64, 192, 64, 2), (64, 128, 128, 2), (128, 128, 64, 2). */
/* Then three stages (wg_three_ok, head_dim 64's default): each dtype x (64, 192, 128, 2). */
/* Each of them without the soft cap's code (even index) and with it (odd): config_wg. */
static int count_wg(void) { return 2 * (2 * 2 * 2 * 5 + 2 + 8 + 6 + 2); }
static void config_wg_shape(int single, int idx, jit_key *out) {
  static const int qp[5][2] = {{64, 0}, {64, 1}, {128, 0}, {128, 1}, {128, 2}};
  if (idx >= 56) {
    jit_prefill_wgmma_select(single, dtypes[idx % 2], 64, 192, 128, 2, out);
    jit_prefill_wgmma_stages(out, 3);
    return;
  }
  if (idx >= 50) {
    static const int f[3][4] = {{64, 192, 64, 2}, {64, 128, 128, 2}, {128, 128, 64, 2}};
    idx -= 50;
    const int *c = f[idx / 2];
    jit_prefill_wgmma_select(single, dtypes[idx % 2], c[0], c[1], c[2], c[3], out);
    jit_prefill_wgmma_stages(out, 4);
    return;
  }
  if (idx >= 42) {
    idx -= 42;
    jit_prefill_wgmma_select(single, dtypes[idx % 2], 64, 192, (idx / 2) % 2 ? 128 : 64, 1 + idx / 4, out);
    return;
  }
  if (idx >= 40) {
    jit_prefill_wgmma_select(single, dtypes[idx % 2], 256, 128, 64, 0, out);
    return;
  }
  const int *m = qp[idx / 8];
  jit_prefill_wgmma_select(single, dtypes[idx % 2], (idx / 2) % 2 ? 128 : 64, m[0], (idx / 4) % 2 ? 128 : 64,
                           m[1], out);
}
static void config_wg(int single, int idx, jit_key *out) {
  config_wg_shape(single, idx / 2, out);
  jit_prefill_wgmma_soft_cap(out, idx % 2);
}
static void config_wg_single(int idx, jit_key *out) { config_wg(1, idx, out); }
static void config_wg_batch(int idx, jit_key *out) { config_wg(0, idx, out); }

#define PREFILL_WG_PARAMS                                                                \
  {{"dtype", JIT_P_DTYPE}, {"head_dim", JIT_P_INT}, {"warpgroups", JIT_P_INT}, {"kv_tile", JIT_P_INT}, \
   {"producer", JIT_P_INT}, {"stages", JIT_P_INT}, {"soft_cap", JIT_P_INT}}

const jit_op jit_op_single_prefill_sm90 = {
    .name = "single_prefill_sm90",
    .template_name = "prefill_wgmma.cuh",
    .nparams = 7,
    .params = PREFILL_WG_PARAMS,
    .render_entry = render_wg_single,
    .config_count = count_wg,
    .config = config_wg_single,
    .dyn_smem = wg_smem,
    .target_arch = jit_arch_sm90a,
};

const jit_op jit_op_batch_prefill_sm90 = {
    .name = "batch_prefill_sm90",
    .template_name = "prefill_wgmma.cuh",
    .nparams = 7,
    .params = PREFILL_WG_PARAMS,
    .render_entry = render_wg_batch,
    .config_count = count_wg,
    .config = config_wg_batch,
    .dyn_smem = wg_smem,
    .target_arch = jit_arch_sm90a,
};

/* fi-bench's wgmma probe (sm_90a). */
void jit_wgmma_probe_select(jit_key *out) {
  out->op = &jit_op_wgmma_probe;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[0] = WGMMA_PROBE_THREADS;
}
static int render_wg_probe(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d, 1)\n"
                   "%s(fi_mma_probe_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::wg::wgmma_probe(p);\n"
                   "}\n",
                   (int)k->v[0], entry);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int count_wg_probe(void) { return 1; }
static void config_wg_probe(int idx, jit_key *out) {
  (void)idx;
  jit_wgmma_probe_select(out);
}
static unsigned wg_probe_smem(const jit_key *k) {
  (void)k;
  return 3 * 8192 + 1024;
}

const jit_op jit_op_wgmma_probe = {
    .name = "wgmma_probe",
    .template_name = "prefill_wgmma.cuh",
    .nparams = 1,
    .params = {{"threads", JIT_P_INT}},
    .render_entry = render_wg_probe,
    .config_count = count_wg_probe,
    .config = config_wg_probe,
    .dyn_smem = wg_probe_smem,
    .target_arch = jit_arch_sm90a,
};
