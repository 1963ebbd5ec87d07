/* rt_autotune_decode.c: batch decode as fi_autotune measures it. Shape text as its plans
 * key their stored tactics (rt_decode_tactic_shape): "q=bf16;kv=bf16;heads=32/8;
 * head_dim=128;page=16;rope=0;len=4096" (len: the requests' KV length, or "graph" for
 * CUDA-graph plans, measured at 2048 tokens a request); tokens are the batch. Inputs: a
 * paged NHD cache of random keys and values, every request len tokens long, random
 * queries. Tactics: the block's warps (1, 2, 4, 8) x the pipelines, each kept only where
 * the plan takes it (the planner ignores a pipeline the cache cannot use), and the rule's
 * kernel with half and twice its split target; the rule's plan first. Each tactic has its
 * own plan and workspace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_params.h"
#include "ops_decode.h"
#include "rt_autotune.h"

#define GRAPH_LEN 2048

typedef struct dec_case {
  int64_t f[RT_DECODE_TACTIC_FIELDS]; /* rt_decode_tactic_key's fields: the parsed shape */
  int64_t B, len, ppr, pages;
  int dev;
  void *q, *k, *v, *ip_d, *ix_d, *ll_d;
  int32_t *ip, *ll; /* host copies */
  size_t ws_bytes;
  int64_t s_q[3], s_kv[4], s_ip[1], s_ix[1], s_ll[1], s_ws[1];
  DLTensor q_t, k_t, v_t, ip_t, ix_t, ll_t;
  fi_batch_decode_info info;
  fi_attention_params p;
  int n;
  rt_decode_tactic tac[RT_TUNE_MAX_TACTICS];
  fi_decode_plan *plan[RT_TUNE_MAX_TACTICS];
  void *ws[RT_TUNE_MAX_TACTICS];
} dec_case;

static const char *const names[7] = {"q", "kv", "heads", "head_dim", "page", "rope", "len"};

static int value(int i, const char *v, void *cv) {
  int64_t *f = ((dec_case *)cv)->f;
  char *end = NULL;
  long long a = 0, b = 0;
  switch (i) {
    case 0:
    case 1:
      f[i] = strcmp(v, "bf16") == 0 ? JIT_DT_BF16 : JIT_DT_F16;
      return strcmp(v, "bf16") == 0 || strcmp(v, "f16") == 0 ? 0 : -1;
    case 2:
      f[2] = 0, f[3] = 0;
      if (sscanf(v, "%lld/%lld", &a, &b) != 2 || b < 1 || a < b || a % b || a > 256) return -1;
      f[2] = a, f[3] = b;
      return 0;
    case 6:
      if (strcmp(v, "graph") == 0) {
        f[7] = -1;
        return 0;
      }
      /* fall through */
    default:
      a = strtoll(v, &end, 10);
      if (end == v || *end) return -1;
      if (i == 3) f[4] = a;
      if (i == 4) f[5] = a;
      if (i == 5) f[6] = a;
      if (i == 6) f[7] = a;
      return (i == 3 && (a == 64 || a == 128 || a == 256)) || (i == 4 && a >= 1 && a <= 256) ||
                     (i == 5 && (a == 0 || a == 1)) || (i == 6 && a >= 1 && a <= (1 << 20))
                 ? 0
                 : -1;
  }
}

static fi_status parse(const char *shape, void *cv, char *canon, size_t n) {
  dec_case *c = cv;
  static const char *const want =
      "batch_decode takes q, kv (bf16 or f16, the same), heads=H/K, head_dim (64, 128, 256), page, rope (0 or 1) "
      "and len (tokens a request, or graph): \"q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0;len=4096\"";
  fi_status st = rt_tune_parse_shape(shape, names, 7, value, c, want);
  if (st != FI_OK) return st;
  if (c->f[0] != c->f[1])
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: o->shape q and kv differ; %s", want);
  rt_decode_tactic_shape(c->f, canon, n);
  return FI_OK;
}

static fi_status setup(rt_tune_dev *d, void *cv, int64_t tokens) {
  dec_case *c = cv;
  fi_runtime *rt = d->rt;
  const int64_t *f = c->f, H = f[2], K = f[3], D = f[4], page = f[5];
  const int bf = f[0] == JIT_DT_BF16, code = bf ? kDLBfloat : kDLFloat;
  fi_status st;
  c->dev = d->dev;
  c->B = tokens;
  c->len = f[7] < 0 ? GRAPH_LEN : f[7];
  c->ppr = (c->len + page - 1) / page;
  c->pages = c->B * c->ppr;
  if (c->B > (1 << 16) || c->pages > INT32_MAX / 2)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: %lld requests of %lld tokens are too many", (long long)c->B,
                   (long long)c->len);
  const size_t qb = (size_t)(c->B * H * D) * 2, kvb = (size_t)(c->pages * page * K * D) * 2;
  c->ip = malloc((size_t)(c->B + 1) * 4), c->ll = malloc((size_t)c->B * 4);
  int32_t *ix = malloc((size_t)c->pages * 4);
  if (!c->ip || !c->ll || !ix) {
    free(ix);
    return rt_fail(FI_ERR_OUT_OF_MEMORY, "fi_autotune: out of host memory");
  }
  for (int64_t b = 0; b <= c->B; b++) c->ip[b] = (int32_t)(b * c->ppr);
  for (int64_t b = 0; b < c->B; b++) c->ll[b] = (int32_t)(c->len - (c->ppr - 1) * page);
  for (int64_t i = 0; i < c->pages; i++) ix[i] = (int32_t)i;
  if ((st = rt_tune_alloc(d, qb, &c->q, "queries")) != FI_OK || (st = rt_tune_alloc(d, kvb, &c->k, "the key cache")) ||
      (st = rt_tune_alloc(d, kvb, &c->v, "the value cache")) ||
      (st = rt_tune_alloc(d, (size_t)(c->B + 1) * 4, &c->ip_d, "indptr")) ||
      (st = rt_tune_alloc(d, (size_t)c->pages * 4, &c->ix_d, "indices")) ||
      (st = rt_tune_alloc(d, (size_t)c->B * 4, &c->ll_d, "last_page_len"))) {
    free(ix);
    return st;
  }
  int rc = d->t->copy(d->state, d->dev, c->ip_d, c->ip, (size_t)(c->B + 1) * 4, RT_COPY_H2D, d->err, sizeof d->err) ||
           d->t->copy(d->state, d->dev, c->ix_d, ix, (size_t)c->pages * 4, RT_COPY_H2D, d->err, sizeof d->err) ||
           d->t->copy(d->state, d->dev, c->ll_d, c->ll, (size_t)c->B * 4, RT_COPY_H2D, d->err, sizeof d->err);
  free(ix);
  if (rc) return rt_tune_dev_fail(d, "copying the page tables");
  if ((st = rt_tune_fill(d, c->q, qb, bf, 1.0f, 11)) != FI_OK || (st = rt_tune_fill(d, c->k, kvb, bf, 1.0f, 12)) ||
      (st = rt_tune_fill(d, c->v, kvb, bf, 1.0f, 13)))
    return st;
  c->s_q[0] = c->B, c->s_q[1] = H, c->s_q[2] = D;
  c->s_kv[0] = c->pages, c->s_kv[1] = page, c->s_kv[2] = K, c->s_kv[3] = D;
  c->s_ip[0] = c->B + 1, c->s_ix[0] = c->pages, c->s_ll[0] = c->B;
  c->q_t = rt_tune_tensor(c->q, code, 16, 3, c->s_q, d->dev);
  c->k_t = rt_tune_tensor(c->k, code, 16, 4, c->s_kv, d->dev), c->v_t = rt_tune_tensor(c->v, code, 16, 4, c->s_kv, d->dev);
  c->ip_t = rt_tune_tensor(c->ip_d, kDLInt, 32, 1, c->s_ip, d->dev);
  c->ix_t = rt_tune_tensor(c->ix_d, kDLInt, 32, 1, c->s_ix, d->dev);
  c->ll_t = rt_tune_tensor(c->ll_d, kDLInt, 32, 1, c->s_ll, d->dev);
  memset(&c->info, 0, sizeof c->info);
  c->info.batch = (int)c->B;
  c->info.indptr = c->ip, c->info.last_page_len = c->ll;
  c->info.num_qo_heads = (int)H, c->info.num_kv_heads = (int)K, c->info.head_dim = (int)D;
  c->info.page_size = (int)page;
  c->info.q_dtype = c->info.kv_dtype = (DLDataType){(uint8_t)code, 16, 1};
  c->info.max_batch = f[7] < 0 ? (int)c->B : 0;
  fi_attention_params_init(&c->p);
  c->p.pos_encoding = f[6] ? FI_POS_ROPE_LLAMA : FI_POS_NONE;
  const DLDevice dv = {kDLCUDA, d->dev};
  return fi_batch_decode_workspace_size(rt, dv, (int)c->B, (int)H, (int)K, (int)D, &c->ws_bytes);
}

/* Tactic t (NULL: the rule alone) planned into slot i with its own workspace. */
static fi_status plan_slot(rt_tune_dev *d, dec_case *c, int i, const rt_decode_tactic *t) {
  fi_status st = rt_tune_alloc(d, c->ws_bytes, &c->ws[i], "a plan's workspace");
  if (st != FI_OK) return st;
  c->s_ws[0] = (int64_t)c->ws_bytes;
  DLTensor w = rt_tune_tensor(c->ws[i], kDLUInt, 8, 1, c->s_ws, d->dev);
  return rt_decode_plan_tactic(d->rt, &c->info, &c->p, &w, NULL, &c->plan[i], 0, t);
}

static void drop_slot(rt_tune_dev *d, dec_case *c, int i) {
  fi_batch_decode_plan_destroy(c->plan[i]);
  rt_tune_free(d, c->ws[i]);
  c->plan[i] = NULL, c->ws[i] = NULL;
}

static int tactics(rt_tune_dev *d, void *cv, char (*names)[RT_TUNE_NAME], int max) {
  dec_case *c = cv;
  if (plan_slot(d, c, 0, NULL) != FI_OK) return -1;
  const jit_key *rk = rt_decode_plan_key(c->plan[0]);
  c->tac[0] = (rt_decode_tactic){(int)rk->v[DECODE_P_WARPS], (int)rk->v[DECODE_P_PIPELINE], 1.0};
  c->n = 1;
  static const int warps[4] = {1, 2, 4, 8};
  for (int w = 0; w < 4; w++)
    for (int pl = DECODE_PIPE_K_ONLY; pl <= DECODE_PIPE_SIMT && c->n < max; pl++) {
      const rt_decode_tactic t = {warps[w], pl, 1.0};
      if (t.warps == c->tac[0].warps && t.pipeline == c->tac[0].pipeline) continue;
      const int i = c->n;
      /* A pipeline the cache cannot use leaves the rule's: that tactic does not apply. */
      if (plan_slot(d, c, i, &t) != FI_OK) {
        drop_slot(d, c, i);
        continue;
      }
      const jit_key *k = rt_decode_plan_key(c->plan[i]);
      if (k->v[DECODE_P_WARPS] != t.warps || k->v[DECODE_P_PIPELINE] != t.pipeline) {
        drop_slot(d, c, i);
        continue;
      }
      c->tac[c->n++] = t;
    }
  /* The rule's kernel with fewer and more chunks a request. */
  static const double splits[2] = {0.5, 2.0};
  for (int s = 0; s < 2 && c->n < max; s++) {
    const rt_decode_tactic t = {c->tac[0].warps, c->tac[0].pipeline, splits[s]};
    if (plan_slot(d, c, c->n, &t) != FI_OK) {
      drop_slot(d, c, c->n);
      continue;
    }
    c->tac[c->n++] = t;
  }
  for (int i = 0; i < c->n; i++) rt_decode_tactic_format(&c->tac[i], names[i], RT_TUNE_NAME);
  return c->n;
}

static size_t out_bytes(const void *cv) {
  const dec_case *c = cv;
  return (size_t)(c->B * c->f[2] * c->f[4]) * 2;
}

static int is_bf16(const void *cv) { return ((const dec_case *)cv)->f[0] == JIT_DT_BF16; }

static fi_status run(rt_tune_dev *d, void *cv, int i, void *out) {
  dec_case *c = cv;
  DLTensor o = rt_tune_tensor(out, is_bf16(c) ? kDLBfloat : kDLFloat, 16, 3, c->s_q, d->dev);
  return fi_batch_decode_run(d->rt, c->plan[i], &c->q_t, &c->k_t, &c->v_t, &c->ip_t, &c->ix_t, &c->ll_t,
                             FI_KV_LAYOUT_NHD, &o, NULL, NULL);
}

static void release(rt_tune_dev *d, void *cv) {
  dec_case *c = cv;
  for (int i = 0; i < RT_TUNE_MAX_TACTICS; i++)
    if (c->plan[i] || c->ws[i]) drop_slot(d, c, i);
  void *ps[6] = {c->q, c->k, c->v, c->ip_d, c->ix_d, c->ll_d};
  for (int i = 0; i < 6; i++) rt_tune_free(d, ps[i]);
  free(c->ip);
  free(c->ll);
}

const rt_tune_op rt_tune_batch_decode = {"batch_decode", sizeof(dec_case), parse, setup, tactics, out_bytes, is_bf16,
                                         run, release, 0};
