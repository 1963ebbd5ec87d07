/* ops_decode.c: the decode attention op families (single_decode, batch_decode) and the
 * plan upload (decode_upload): their keys, entry wrappers and registered configurations
 * (every key jit_decode_select can return). */
#include "ops_decode.h"

#include <stdio.h>

#include "decode_params.h"
#include "jit_registry.h"

/* (q, cache) dtype pairs: a 16-bit cache has q's dtype. */
static const struct {
  int q, kv;
} pairs[] = {{JIT_DT_F16, JIT_DT_F16},  {JIT_DT_BF16, JIT_DT_BF16}, {JIT_DT_F16, JIT_DT_E4M3},
             {JIT_DT_BF16, JIT_DT_E4M3}, {JIT_DT_F16, JIT_DT_E5M2}, {JIT_DT_BF16, JIT_DT_E5M2}};
#define NPAIRS ((int)(sizeof pairs / sizeof pairs[0]))
static const int dims[] = {64, 128, 256};
#define NDIMS 3

int jit_decode_can_cap(int dtype_kv, int head_dim, int rows) {
  return (dtype_kv == JIT_DT_F16 || dtype_kv == JIT_DT_BF16) && head_dim <= 128 && rows == 8;
}

int jit_decode_can_simt(int dtype_kv, int head_dim, int group, int rope) {
  return (dtype_kv == JIT_DT_F16 || dtype_kv == JIT_DT_BF16) &&
         (head_dim == 64 || head_dim == 128 || head_dim == 256) && group >= 1 && group <= 4 && !rope;
}

int jit_decode_simt_rows(int group) { return group <= 1 ? 1 : group <= 2 ? 2 : 4; }

void jit_decode_select(int single, int dtype_q, int dtype_kv, int head_dim, int group, int rope,
                       int warps, jit_key *out) {
  out->op = single ? &jit_op_single_decode : &jit_op_batch_decode;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  const int rows = group <= 8 ? 8 : 16;
  out->v[DECODE_P_DTYPE_Q] = dtype_q;
  out->v[DECODE_P_DTYPE_KV] = dtype_kv;
  out->v[DECODE_P_HEAD_DIM] = head_dim;
  out->v[DECODE_P_ROWS] = rows;
  out->v[DECODE_P_WARPS] = warps > 0 ? warps : DECODE_WARPS_SPLIT;
  /* Up to head_dim 128 with 8 rows, two register buffers of K and V fit beside the
   * accumulators (the whole next step loads during this one; 248 registers, 8 warps an
   * SM); beyond, one buffer (the next K loads while this V is used). At head_dim 128 a
   * 16-bit cache without RoPE takes one buffer with the registers capped at 128
   * (DECODE_PIPE_CAPPED: 16 warps an SM, twice the loads in flight): on the H200 (bf16
   * 32/8, nvcc build of the same kernel) capped blocks beat two buffers at B=64 L=4096 and
   * B=128 L=1024 (docs/decode.md, figures from comments). (Head_dim 64 capped spills 192
   * bytes.) Single decode keeps two buffers: split, it is batch decode of one request,
   * where few blocks want loads in flight a warp, not warps an SM (capped was slower).
   * Batch decode with 16 rows and no RoPE takes two buffers too, though ptxas spills 16-80
   * bytes there (255 registers): the one-buffer kernel has the same 8 warps an SM and half
   * the loads in flight. On the H200 two buffers beat the old default at every batched
   * shape tried (128/8, 64/4, 48/4, HND, e4m3) and lost at B=1 L=8192 (docs/decode.md,
   * 2026-12-04, and figures from comments). RoPE (more registers) and single decode were
   * not measured: one buffer. */
  out->v[DECODE_P_PIPELINE] = !single && head_dim == 128 && !rope && jit_decode_can_cap(dtype_kv, head_dim, rows)
                                  ? DECODE_PIPE_CAPPED
                              : head_dim <= 128 && (rows == 8 || (!single && !rope)) ? DECODE_PIPE_TWO_BUFFER
                                                                                     : DECODE_PIPE_K_ONLY;
  out->v[DECODE_P_ROPE] = rope ? 1 : 0;
}

void jit_decode_upload_select(jit_key *out) {
  out->op = &jit_op_decode_upload;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[0] = DECODE_UPLOAD_THREADS;
}

static int render(const jit_key *k, const char *entry, char *buf, size_t n, int single) {
  const int64_t *v = k->v;
  const int threads = (int)v[DECODE_P_WARPS] * 32;
  /* DECODE_PIPE_CAPPED: the one-buffer kernel (PF 0) with 512 threads' worth of blocks
   * resident an SM. */
  if (v[DECODE_P_PIPELINE] == DECODE_PIPE_SIMT) {
    /* 512 threads' worth of blocks an SM (128 registers a thread), as the capped kernel */
    const int w = snprintf(buf, n,
                           "#include \"decode_simt.cuh\"\n"
                           "extern \"C\" __global__ void FI_LAUNCH_BOUNDS(%d, %d)\n"
                           "%s(fi_decode_params p) {\n"
                           "  fi::dec::decode_simt<%s, %s, %d, %d, %d>(p);\n"
                           "}\n",
                           threads, threads < 512 ? 512 / threads : 1, entry, jit_dtype_cxx((int)v[DECODE_P_DTYPE_Q]),
                           jit_dtype_cxx((int)v[DECODE_P_DTYPE_KV]), (int)v[DECODE_P_HEAD_DIM], (int)v[DECODE_P_ROWS],
                           (int)v[DECODE_P_WARPS]);
    return w < 0 || (size_t)w >= n || single ? -1 : w;
  }
  const int capped = v[DECODE_P_PIPELINE] == DECODE_PIPE_CAPPED;
  const int pf = capped ? 0 : (int)v[DECODE_P_PIPELINE], min_blocks = capped ? 512 / threads : 1;  /* 2..16 */
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void FI_LAUNCH_BOUNDS(%d, %d)\n"
                   "%s(fi_decode_params p) {\n"
                   "  fi::dec::decode<%s, %s, %d, %d, %d, %d, %d, %d>(p);\n"
                   "}\n",
                   threads, min_blocks, entry, jit_dtype_cxx((int)v[DECODE_P_DTYPE_Q]),
                   jit_dtype_cxx((int)v[DECODE_P_DTYPE_KV]), (int)v[DECODE_P_HEAD_DIM],
                   (int)v[DECODE_P_ROWS], pf, (int)v[DECODE_P_ROPE], single, (int)v[DECODE_P_WARPS]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int render_single(const jit_key *k, const char *e, char *b, size_t n) { return render(k, e, b, n, 1); }
static int render_batch(const jit_key *k, const char *e, char *b, size_t n) { return render(k, e, b, n, 0); }

/* Every (q, KV) dtype pair, head_dim, row count (group <= 8 or <= 16) and RoPE switch;
 * batch decode with every block size a plan picks: 1, 2 and 4 warps over a 16-bit cache
 * (the first two pairs), 2 and 4 over fp8. KV head pairs are no key: the fp8 kernels at
 * head_dim 128 take them by p.kv_heads_per_block. */
#define PER_PAIR (NDIMS * 2 * 2)
static int count_single(void) { return NPAIRS * PER_PAIR; }
/* ... and, last, the two-buffer kernel where batch decode's default is the capped one
 * (16-bit pairs, head_dim 128, 8 rows, no RoPE; 4 warps, then 2): what a plan of a few
 * requests takes instead (rt_decode_pick_pipeline, rt_decode_switched_warps). */
static int count_batch_mma(void) { return count_single() + (2 * 2 + NPAIRS - 2) * PER_PAIR + 4; }
/* ... then the CUDA-core kernel (DECODE_PIPE_SIMT): the 16-bit pairs, every head_dim,
 * groups of 1, 2 and 4, 4 warps; last, batch decode's default at group 1 (head_dim 128,
 * rt_decode_pick_simt) with the other block sizes a plan picks, 1 and 2 warps. */
#define SIMT_CONFIGS (2 * NDIMS * 3)
static int count_batch(void) { return count_batch_mma() + SIMT_CONFIGS + 4; }
static void config(int single, int idx, jit_key *out) {
  if (!single && idx >= count_batch_mma() + SIMT_CONFIGS) {
    const int s = idx - count_batch_mma() - SIMT_CONFIGS;
    jit_decode_select(0, pairs[s % 2].q, pairs[s % 2].kv, 128, 1, 0, s < 2 ? DECODE_WARPS_ONE : DECODE_WARPS_WIDE, out);
    out->v[DECODE_P_PIPELINE] = DECODE_PIPE_SIMT;
    out->v[DECODE_P_ROWS] = jit_decode_simt_rows(1);
    return;
  }
  if (!single && idx >= count_batch_mma()) {
    const int s = idx - count_batch_mma(), group = 1 << (s % 3);
    jit_decode_select(0, pairs[s / 3 % 2].q, pairs[s / 3 % 2].kv, dims[s / 6], group, 0, DECODE_WARPS_SPLIT, out);
    out->v[DECODE_P_PIPELINE] = DECODE_PIPE_SIMT;
    out->v[DECODE_P_ROWS] = jit_decode_simt_rows(group);
    return;
  }
  const int extra = idx - (count_batch_mma() - 4);
  if (!single && extra >= 0) {
    jit_decode_select(0, pairs[extra % 2].q, pairs[extra % 2].kv, 128, 8, 0,
                      extra < 2 ? DECODE_WARPS_SPLIT : DECODE_WARPS_WIDE, out);
    out->v[DECODE_P_PIPELINE] = DECODE_PIPE_TWO_BUFFER;
    return;
  }
  const int rope = idx % 2, group = (idx / 2) % 2 ? 16 : 8, dim = dims[(idx / 4) % NDIMS];
  int pair = idx / PER_PAIR, warps = DECODE_WARPS_SPLIT;
  if (pair >= NPAIRS) { /* the 16-bit dtype pairs again with 2 warps, then with 1; the fp8 ones with 2 */
    const int e = pair - NPAIRS;
    warps = e < 2 || e >= 4 ? DECODE_WARPS_WIDE : DECODE_WARPS_ONE;
    pair = e < 4 ? e % 2 : e - 2;
  }
  jit_decode_select(single, pairs[pair].q, pairs[pair].kv, dim, group, rope, warps, out);
}
static void config_single(int idx, jit_key *out) { config(1, idx, out); }
static void config_batch(int idx, jit_key *out) { config(0, idx, out); }

#define DECODE_PARAMS                                                                   \
  {{"dtype_q", JIT_P_DTYPE}, {"dtype_kv", JIT_P_DTYPE}, {"head_dim", JIT_P_INT},        \
   {"rows", JIT_P_INT},      {"warps", JIT_P_INT},      {"pipeline", JIT_P_INT},        \
   {"rope", JIT_P_INT}}

const jit_op jit_op_single_decode = {
    .name = "single_decode",
    .template_name = "decode.cuh",
    .nparams = 7,
    .params = DECODE_PARAMS,
    .render_entry = render_single,
    .config_count = count_single,
    .config = config_single,
};

const jit_op jit_op_batch_decode = {
    .name = "batch_decode",
    .template_name = "decode.cuh",
    .nparams = 7,
    .params = DECODE_PARAMS,
    .render_entry = render_batch,
    .config_count = count_batch,
    .config = config_batch,
};

static int render_upload(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_decode_upload_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::dec::decode_upload(p);\n"
                   "}\n",
                   (int)k->v[0], entry);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int count_upload(void) { return 1; }
static void config_upload(int idx, jit_key *out) {
  (void)idx;
  jit_decode_upload_select(out);
}

const jit_op jit_op_decode_upload = {
    .name = "decode_upload",
    .template_name = "decode.cuh",
    .nparams = 1,
    .params = {{"threads", JIT_P_INT}},
    .render_entry = render_upload,
    .config_count = count_upload,
    .config = config_upload,
};

void jit_read_probe_select(jit_key *out) {
  out->op = &jit_op_read_probe;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[0] = READ_PROBE_THREADS;
}
static int render_probe(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_read_probe_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::dec::read_probe(p);\n"
                   "}\n",
                   (int)k->v[0], entry);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static void config_probe(int idx, jit_key *out) {
  (void)idx;
  jit_read_probe_select(out);
}

/* fi-bench's read-bandwidth probe (16-byte streaming loads), the roofline of decode. */
const jit_op jit_op_read_probe = {
    .name = "read_probe",
    .template_name = "decode.cuh",
    .nparams = 1,
    .params = {{"threads", JIT_P_INT}},
    .render_entry = render_probe,
    .config_count = count_upload,
    .config = config_probe,
};
