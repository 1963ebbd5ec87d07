/* rt_autotune_moe.c: the MoE grouped GEMM as fi_autotune measures it: shape text
 * "dtype=bf16;k=7168;n=2048;experts=256;top_k=8;gated=1;gather=1;tile=128", routes of
 * top_k distinct experts a token drawn uniformly and sorted by fi_moe_sort, random
 * activations and weights, the tactics of jit_moe_gemm_tactics (the rule's first). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_autotune.h"


typedef struct moe_case {
  int dt, gated, gather, tile;
  int64_t k, n, E, K, T, max_tiles, rows, wrows;
  void *ids, *sws, *te, *mn, *e2p, *p2e, *nt, *tp, *a, *w;
  int64_t s_ids[2], s_t[1], s_rows[1], s_one[1], s_sort[1], s_a[2], s_w[3], s_out[2];
  DLTensor ids_t, sws_t, te_t, mn_t, e2p_t, p2e_t, nt_t, tp_t, a_t, w_t;
  fi_moe_sort_outputs tables;
  fi_moe_gemm_params p;
  jit_moe_gemm_tactic tactic[RT_TUNE_MAX_TACTICS];
} moe_case;

/* "key=value;..." into the case; every key needed once. */
static fi_status moe_parse_case(const char *shape, moe_case *c) {
  static const char *const names[8] = {"dtype", "k", "n", "experts", "top_k", "gated", "gather", "tile"};
  int64_t v[8];
  int seen[8] = {0};
  char buf[512];
  if (strlen(shape) >= sizeof buf)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: o->shape is longer than %zu bytes", sizeof buf - 1);
  snprintf(buf, sizeof buf, "%s", shape);
  for (char *save = NULL, *item = strtok_r(buf, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
    char *eq = strchr(item, '=');
    int i = 0;
    if (eq) *eq = 0;
    while (i < 8 && strcmp(item, names[i]) != 0) i++;
    if (!eq || i == 8 || seen[i])
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "fi_autotune: o->shape item '%s' is %s; moe_gemm takes dtype, k, n, experts, top_k, gated, "
                     "gather and tile, each once (\"dtype=bf16;k=7168;n=2048;experts=256;top_k=8;gated=1;"
                     "gather=1;tile=128\")",
                     item, !eq ? "not key=value" : i == 8 ? "unknown" : "given twice");
    seen[i] = 1;
    if (i == 0) {
      if (strcmp(eq + 1, "bf16") && strcmp(eq + 1, "f16"))
        return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: o->shape dtype=%s; bf16 or f16", eq + 1);
      v[0] = strcmp(eq + 1, "bf16") == 0 ? JIT_DT_BF16 : JIT_DT_F16;
      continue;
    }
    char *end;
    v[i] = strtoll(eq + 1, &end, 10);
    if (end == eq + 1 || *end)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: o->shape %s=%s is not an integer", item, eq + 1);
  }
  for (int i = 0; i < 8; i++)
    if (!seen[i]) return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: o->shape has no %s", names[i]);
  c->dt = (int)v[0], c->k = v[1], c->n = v[2], c->E = v[3], c->K = v[4];
  c->gated = (int)v[5], c->gather = (int)v[6], c->tile = (int)v[7];
  const char *bad = c->k <= 0 || c->k % 64 || c->k > 65536       ? "k (a multiple of 64 up to 65536)"
                    : c->n <= 0 || c->n % 64 || c->n > 65536     ? "n (a multiple of 64 up to 65536)"
                    : c->E < 1 || c->E > 256                     ? "experts (1 to 256)"
                    : c->K < 1 || c->K > 32 || c->K > c->E       ? "top_k (1 to 32, at most experts)"
                    : (c->gated | 1) != 1 || (c->gather | 1) != 1 ? "gated and gather (0 or 1)"
                    : c->tile != 64 && c->tile != 128 && c->tile != 256 ? "tile (64, 128 or 256)"
                                                                         : NULL;
  if (bad) return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: o->shape \"%s\": check %s", shape, bad);
  return FI_OK;
}

static void moe_free(rt_tune_dev *d, moe_case *c) {
  void *ps[10] = {c->ids, c->sws, c->te, c->mn, c->e2p, c->p2e, c->nt, c->tp, c->a, c->w};
  for (int i = 0; i < 10; i++) rt_tune_free(d, ps[i]);
}

/* The inputs at c->T tokens: routes of top_k distinct experts a token drawn uniformly,
 * sorted by fi_moe_sort into the tables; a and the weights random. */
static fi_status moe_setup_case(rt_tune_dev *d, moe_case *c) {
  fi_runtime *rt = d->rt;
  const int dv = d->dev;
  fi_status st;
  c->max_tiles = fi_moe_max_tiles(c->T, (int)c->K, (int)c->E, c->tile);
  c->rows = c->max_tiles * c->tile;
  c->wrows = c->gated ? 2 * c->n : c->n;
  const fi_moe_sort_params sp = {(int)c->E, 0, (int)c->E, c->tile};
  size_t sort_bytes;
  if ((st = fi_moe_sort_workspace_size(rt, c->T, (int)c->K, &sp, &sort_bytes)) != FI_OK) return st;
  const int64_t a_rows = c->gather ? c->T : c->rows;
  const size_t R = (size_t)(c->T * c->K);
  if ((st = rt_tune_alloc(d, R * 4, &c->ids, "expert ids")) != FI_OK || (st = rt_tune_alloc(d, sort_bytes, &c->sws, "sort")) ||
      (st = rt_tune_alloc(d, (size_t)c->max_tiles * 4, &c->te, "tables")) ||
      (st = rt_tune_alloc(d, (size_t)c->max_tiles * 4, &c->mn, "tables")) || (st = rt_tune_alloc(d, R * 4, &c->e2p, "tables")) ||
      (st = rt_tune_alloc(d, (size_t)c->rows * 4, &c->p2e, "tables")) || (st = rt_tune_alloc(d, 4, &c->nt, "tables")) ||
      (st = rt_tune_alloc(d, 4, &c->tp, "tables")) ||
      (st = rt_tune_alloc(d, (size_t)a_rows * (size_t)c->k * 2, &c->a, "the GEMM's input")) ||
      (st = rt_tune_alloc(d, (size_t)c->E * (size_t)c->wrows * (size_t)c->k * 2, &c->w, "the experts' weights")))
    return st;
  int32_t *ids = malloc(R * 4);
  if (!ids) return rt_fail(FI_ERR_OUT_OF_MEMORY, "fi_autotune: out of host memory");
  uint64_t s = 0x9e3779b97f4a7c15ull;
  int32_t perm[256];
  for (int64_t t = 0; t < c->T; t++) {
    for (int e = 0; e < c->E; e++) perm[e] = e;
    for (int64_t j = 0; j < c->K; j++) {
      const int64_t r = j + (int64_t)(rt_tune_rand(&s) % (uint64_t)(c->E - j));
      const int32_t x = perm[r];
      perm[r] = perm[j], perm[j] = x;
      ids[t * c->K + j] = x;
    }
  }
  int rc = d->t->copy(d->state, dv, c->ids, ids, R * 4, RT_COPY_H2D, d->err, sizeof d->err);
  free(ids);
  if (rc != 0) return rt_tune_dev_fail(d, "copying expert ids");
  const int bf = c->dt == JIT_DT_BF16;
  if ((st = rt_tune_fill(d, c->a, (size_t)a_rows * (size_t)c->k * 2, bf, 1.0f, 1)) != FI_OK ||
      (st = rt_tune_fill(d, c->w, (size_t)c->E * (size_t)c->wrows * (size_t)c->k * 2, bf,
                        1.0f / sqrtf((float)c->k), 2)) != FI_OK)
    return st;
  c->s_ids[0] = c->T, c->s_ids[1] = c->K, c->s_t[0] = c->max_tiles, c->s_rows[0] = c->rows, c->s_one[0] = 1;
  c->s_sort[0] = (int64_t)sort_bytes;
  c->s_a[0] = a_rows, c->s_a[1] = c->k;
  c->s_w[0] = c->E, c->s_w[1] = c->wrows, c->s_w[2] = c->k;
  c->s_out[0] = c->rows, c->s_out[1] = c->n;
  c->ids_t = rt_tune_tensor(c->ids, kDLInt, 32, 2, c->s_ids, dv);
  c->sws_t = rt_tune_tensor(c->sws, kDLUInt, 8, 1, c->s_sort, dv);
  c->te_t = rt_tune_tensor(c->te, kDLInt, 32, 1, c->s_t, dv), c->mn_t = rt_tune_tensor(c->mn, kDLInt, 32, 1, c->s_t, dv);
  c->e2p_t = rt_tune_tensor(c->e2p, kDLInt, 32, 2, c->s_ids, dv), c->p2e_t = rt_tune_tensor(c->p2e, kDLInt, 32, 1, c->s_rows, dv);
  c->nt_t = rt_tune_tensor(c->nt, kDLInt, 32, 1, c->s_one, dv), c->tp_t = rt_tune_tensor(c->tp, kDLInt, 32, 1, c->s_one, dv);
  const int code = bf ? kDLBfloat : kDLFloat;
  c->a_t = rt_tune_tensor(c->a, code, 16, 2, c->s_a, dv), c->w_t = rt_tune_tensor(c->w, code, 16, 3, c->s_w, dv);
  c->tables = (fi_moe_sort_outputs){&c->te_t, &c->mn_t, &c->e2p_t, &c->p2e_t, &c->nt_t, &c->tp_t};
  if ((st = fi_moe_sort(rt, &c->ids_t, &sp, &c->sws_t, &c->tables, NULL)) != FI_OK) return st;
  fi_moe_gemm_params_init(&c->p);
  c->p.tile_size = c->tile;
  c->p.activation = c->gated ? FI_MOE_GEMM_SWIGLU : FI_MOE_GEMM_PLAIN;
  c->p.gather = c->gather;
  return FI_OK;
}

/* ---- rt_tune_op ---- */

static fi_status parse(const char *shape, void *cv, char *canon, size_t n) {
  moe_case *c = cv;
  fi_status st = moe_parse_case(shape, c);
  if (st == FI_OK) rt_moe_gemm_shape(c->dt, c->k, c->n, c->E, c->K, c->gated, c->gather, c->tile, canon, n);
  return st;
}

static fi_status setup(rt_tune_dev *d, void *cv, int64_t tokens) {
  moe_case *c = cv;
  c->T = tokens;
  if (c->T * c->K > INT32_MAX / 2)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: %lld tokens of top_k %lld are too many routes",
                   (long long)c->T, (long long)c->K);
  return moe_setup_case(d, c);
}

static int tactics(rt_tune_dev *d, void *cv, char (*names)[RT_TUNE_NAME], int max) {
  moe_case *c = cv;
  const int n = jit_moe_gemm_tactics(c->T * c->K, (int)c->E, c->tile, c->gated, c->n, d->caps.smem_block_kb,
                                     d->caps.wgmma && d->rt->env.tune.moe_wgmma, c->tactic, max);
  for (int i = 0; i < n; i++) jit_moe_gemm_tactic_format(&c->tactic[i], names[i], RT_TUNE_NAME);
  return n;
}

static size_t out_bytes(const void *cv) {
  const moe_case *c = cv;
  return (size_t)(c->rows * c->n) * 2;
}

static int is_bf16(const void *cv) { return ((const moe_case *)cv)->dt == JIT_DT_BF16; }

static fi_status run(rt_tune_dev *d, void *cv, int i, void *out) {
  moe_case *c = cv;
  DLTensor o = rt_tune_tensor(out, c->dt == JIT_DT_BF16 ? kDLBfloat : kDLFloat, 16, 2, c->s_out, d->dev);
  return rt_moe_gemm(d->rt, &c->a_t, &c->w_t, &c->tables, &c->p, &o, NULL, &c->tactic[i]);
}

static void release(rt_tune_dev *d, void *cv) { moe_free(d, cv); }

const rt_tune_op rt_tune_moe_gemm = {"moe_gemm", sizeof(moe_case), parse, setup, tactics, out_bytes, is_bf16, run,
                                     release, 0};

