/* rt_autotune_prefill.c: batch prefill as fi_autotune measures it. Shape text as its plans
 * key their stored tactics (rt_prefill_tactic_shape): "q=bf16;heads=32/8;head_dim=128;
 * causal=1;cap=0" (cap: a logits soft cap, measured at 30); tokens are the query tokens of
 * the longest request (the bucket's bound). Inputs: a ragged NHD batch of
 * clamp(16384 / tokens, 1, 64) requests, each `tokens` query tokens over as many KV tokens
 * (a prompt from scratch), random queries, keys and values. Tactics: every registered
 * wgmma kernel of the dtype, head_dim and soft cap (q tile, kv tile, producer, stages),
 * each kept only where the plan takes it (a device without wgmma, RoPE, 16 rows or fewer:
 * the plan falls back to the rule), and the mma.sync kernel's q tiles; the rule's plan
 * first. Each tactic has its own plan and workspace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit_registry.h"
#include "ops_prefill.h"
#include "rt_autotune.h"

#define BATCH_TOKENS 16384
#define MAX_BATCH 64
#define SOFT_CAP 30.0

typedef struct pf_case {
  int64_t f[RT_PREFILL_TACTIC_FIELDS]; /* rt_prefill_tactic_fields: the parsed shape */
  int64_t B, T;
  int dev;
  void *q, *k, *v;
  int32_t *ip; /* host qo_indptr = kv_indptr */
  size_t ws_bytes;
  int64_t s_q[3], s_kv[3], s_ws[1];
  DLTensor q_t, k_t, v_t;
  fi_batch_prefill_info info;
  fi_prefill_params p;
  int n;
  rt_prefill_tactic tac[RT_TUNE_MAX_TACTICS];
  fi_prefill_plan *plan[RT_TUNE_MAX_TACTICS];
  void *ws[RT_TUNE_MAX_TACTICS];
} pf_case;

#define NITEMS 5
static const char *const names[NITEMS] = {"q", "heads", "head_dim", "causal", "cap"};

static int value(int i, const char *v, void *cv) {
  int64_t *f = ((pf_case *)cv)->f;
  char *end = NULL;
  long long a = 0, b = 0;
  if (i == 0) {
    f[0] = strcmp(v, "bf16") == 0 ? JIT_DT_BF16 : JIT_DT_F16;
    return strcmp(v, "bf16") == 0 || strcmp(v, "f16") == 0 ? 0 : -1;
  }
  if (i == 1) {
    if (sscanf(v, "%lld/%lld", &a, &b) != 2 || b < 1 || a < b || a % b || a > 256) return -1;
    f[1] = a, f[2] = b;
    return 0;
  }
  a = strtoll(v, &end, 10);
  if (end == v || *end) return -1;
  f[i + 1] = a; /* head_dim, causal, cap: fields 3, 4, 5 */
  return (i == 2 && (a == 64 || a == 128 || a == 256)) || (i > 2 && (a == 0 || a == 1)) ? 0 : -1;
}

static fi_status parse(const char *shape, void *cv, char *canon, size_t n) {
  pf_case *c = cv;
  static const char *const want =
      "batch_prefill takes q (bf16 or f16), heads=H/K, head_dim (64, 128, 256), causal (0 or 1) and cap (0 or "
      "1: a logits soft cap): \"q=bf16;heads=32/8;head_dim=128;causal=1;cap=0\"";
  fi_status st = rt_tune_parse_shape(shape, names, NITEMS, value, c, want);
  if (st != FI_OK) return st;
  rt_prefill_tactic_shape(c->f, canon, n);
  return FI_OK;
}

static fi_status setup(rt_tune_dev *d, void *cv, int64_t tokens) {
  pf_case *c = cv;
  fi_runtime *rt = d->rt;
  const int64_t *f = c->f, H = f[1], K = f[2], D = f[3];
  const int bf = f[0] == JIT_DT_BF16, code = bf ? kDLBfloat : kDLFloat;
  fi_status st;
  c->dev = d->dev;
  c->T = tokens;
  c->B = BATCH_TOKENS / tokens;
  if (c->B < 1) c->B = 1;
  if (c->B > MAX_BATCH) c->B = MAX_BATCH;
  const int64_t rows = c->B * c->T;
  const size_t qb = (size_t)(rows * H * D) * 2, kvb = (size_t)(rows * K * D) * 2;
  if (!(c->ip = malloc((size_t)(c->B + 1) * 4))) return rt_fail(FI_ERR_OUT_OF_MEMORY, "fi_autotune: out of host memory");
  for (int64_t b = 0; b <= c->B; b++) c->ip[b] = (int32_t)(b * c->T);
  if ((st = rt_tune_alloc(d, qb, &c->q, "queries")) != FI_OK || (st = rt_tune_alloc(d, kvb, &c->k, "keys")) ||
      (st = rt_tune_alloc(d, kvb, &c->v, "values")))
    return st;
  if ((st = rt_tune_fill(d, c->q, qb, bf, 1.0f, 21)) != FI_OK || (st = rt_tune_fill(d, c->k, kvb, bf, 1.0f, 22)) ||
      (st = rt_tune_fill(d, c->v, kvb, bf, 1.0f, 23)))
    return st;
  c->s_q[0] = rows, c->s_q[1] = H, c->s_q[2] = D;
  c->s_kv[0] = rows, c->s_kv[1] = K, c->s_kv[2] = D;
  c->q_t = rt_tune_tensor(c->q, code, 16, 3, c->s_q, d->dev);
  c->k_t = rt_tune_tensor(c->k, code, 16, 3, c->s_kv, d->dev);
  c->v_t = rt_tune_tensor(c->v, code, 16, 3, c->s_kv, d->dev);
  memset(&c->info, 0, sizeof c->info);
  c->info.batch = (int)c->B;
  c->info.qo_indptr = c->ip, c->info.kv_indptr = c->ip;
  c->info.num_qo_heads = (int)H, c->info.num_kv_heads = (int)K, c->info.head_dim = (int)D;
  c->info.q_dtype = c->info.kv_dtype = (DLDataType){(uint8_t)code, 16, 1};
  fi_prefill_params_init(&c->p);
  c->p.causal = (int)f[4];
  if (f[5]) c->p.attn.logits_soft_cap = SOFT_CAP;
  const DLDevice dv = {kDLCUDA, d->dev};
  return fi_batch_prefill_workspace_size(rt, dv, (int)c->B, (int)rows, (int)H, (int)K, (int)D, &c->ws_bytes);
}

/* Tactic t (NULL: the rule alone) planned into slot i with its own workspace. */
static fi_status plan_slot(rt_tune_dev *d, pf_case *c, int i, const rt_prefill_tactic *t) {
  fi_status st = rt_tune_alloc(d, c->ws_bytes, &c->ws[i], "a plan's workspace");
  if (st != FI_OK) return st;
  c->s_ws[0] = (int64_t)c->ws_bytes;
  DLTensor w = rt_tune_tensor(c->ws[i], kDLUInt, 8, 1, c->s_ws, d->dev);
  return rt_prefill_plan_tactic(d->rt, &c->info, &c->p, 0, &w, NULL, &c->plan[i], 0, t);
}

static void drop_slot(rt_tune_dev *d, pf_case *c, int i) {
  fi_batch_prefill_plan_destroy(c->plan[i]);
  rt_tune_free(d, c->ws[i]);
  c->plan[i] = NULL, c->ws[i] = NULL;
}

/* Tactic t in the next slot, kept where the plan took it and it is not one already there. */
static void try_tactic(rt_tune_dev *d, pf_case *c, const rt_prefill_tactic *t, int max) {
  if (c->n >= max) return;
  for (int j = 0; j < c->n; j++)
    if (memcmp(&c->tac[j], t, sizeof *t) == 0) return;
  const int i = c->n;
  if (plan_slot(d, c, i, t) != FI_OK) {
    drop_slot(d, c, i);
    return;
  }
  rt_prefill_tactic got;
  rt_prefill_tactic_of_key(rt_prefill_plan_key(c->plan[i]), &got);
  if (memcmp(&got, t, sizeof got) != 0) { /* the rule's kernel instead: not this tactic */
    drop_slot(d, c, i);
    return;
  }
  c->tac[c->n++] = *t;
}

static int tactics(rt_tune_dev *d, void *cv, char (*names_out)[RT_TUNE_NAME], int max) {
  pf_case *c = cv;
  if (plan_slot(d, c, 0, NULL) != FI_OK) return -1;
  rt_prefill_tactic_of_key(rt_prefill_plan_key(c->plan[0]), &c->tac[0]);
  c->n = 1;
  const int dt = (int)c->f[0], D = (int)c->f[3], cap = (int)c->f[5];
  const jit_op *wg = jit_registry_find("batch_prefill_sm90");
  for (int i = 0, n = wg ? wg->config_count() : 0; i < n; i++) {
    jit_key k;
    wg->config(i, &k);
    if (k.v[PREFILL_WG_P_DTYPE] != dt || k.v[PREFILL_WG_P_HEAD_DIM] != D || k.v[PREFILL_WG_P_SOFT_CAP] != cap)
      continue;
    rt_prefill_tactic t;
    rt_prefill_tactic_of_key(&k, &t);
    try_tactic(d, c, &t, max);
  }
  static const int qt[3] = {16, 64, 128};
  for (int i = 0; i < 3; i++) {
    const rt_prefill_tactic t = {0, qt[i], 0, 0, 0};
    jit_key k;
    if (rt_prefill_tactic_key(&t, dt, D, 0, cap, &k) == 0) try_tactic(d, c, &t, max);
  }
  for (int i = 0; i < c->n; i++) rt_prefill_tactic_format(&c->tac[i], names_out[i], RT_TUNE_NAME);
  return c->n;
}

static size_t out_bytes(const void *cv) {
  const pf_case *c = cv;
  return (size_t)(c->B * c->T * c->f[1] * c->f[3]) * 2;
}

static int is_bf16(const void *cv) { return ((const pf_case *)cv)->f[0] == JIT_DT_BF16; }

static fi_status run(rt_tune_dev *d, void *cv, int i, void *out) {
  pf_case *c = cv;
  DLTensor o = rt_tune_tensor(out, is_bf16(c) ? kDLBfloat : kDLFloat, 16, 3, c->s_q, d->dev);
  return fi_batch_prefill_ragged_run(d->rt, c->plan[i], &c->q_t, &c->k_t, &c->v_t, FI_KV_LAYOUT_NHD, &o, NULL, NULL);
}

static void release(rt_tune_dev *d, void *cv) {
  pf_case *c = cv;
  for (int i = 0; i < RT_TUNE_MAX_TACTICS; i++)
    if (c->plan[i] || c->ws[i]) drop_slot(d, c, i);
  void *ps[3] = {c->q, c->k, c->v};
  for (int i = 0; i < 3; i++) rt_tune_free(d, ps[i]);
  free(c->ip);
}

const rt_tune_op rt_tune_batch_prefill = {"batch_prefill", sizeof(pf_case), parse,   setup,  tactics,
                                          out_bytes,       is_bf16,          run,     release, 0};
