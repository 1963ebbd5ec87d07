/* bench_decode.c: fi-bench section decode: batch decode over a paged KV cache (pages in
 * random order) against the device's read bandwidth, measured in the same run with a
 * streaming read-only kernel of 16-byte loads. Bytes: KV read + q + out. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static uint64_t brng = 0x2545F4914F6CDD1Dull;
static uint64_t brand(void) {
  brng ^= brng << 13;
  brng ^= brng >> 7;
  brng ^= brng << 17;
  return brng;
}

/* Read-probe launches over windows of a buffer in turn (one window: the same launch). */
typedef struct probe_ctx {
  fi_runtime *rt;
  const DLTensor *w;
  int nw;
} probe_ctx;
static void probe_run(void *c, int call) {
  probe_ctx *p = c;
  fi_admin_read_probe(p->rt, &p->w[call % p->nw], 0, NULL);
}

int runs_for_bytes(double bytes) {
  const int n = (int)(2e8 / bytes);
  return n < 3 ? 3 : n > 50 ? 50 : n;
}

/* Read bandwidth: 1 GiB read once per launch, median of the repetitions. */
double bench_read(fi_runtime *rt) {
  const size_t bytes = (size_t)1 << 30;
  CUdeviceptr a;
  CU_CHECK(&cu, cuMemAlloc(&a, bytes));
  CU_CHECK(&cu, cuMemsetD8(a, 1, bytes));
  int64_t shape[1] = {(int64_t)bytes};
  DLTensor t = tensor(a, 0, 1, shape);
  t.dtype.code = kDLUInt;
  t.dtype.bits = 8;
  if (fi_admin_read_probe(rt, &t, 0, NULL) != FI_OK) {
    fprintf(stderr, "read probe: %s\n", fi_last_error());
    CU_CHECK(&cu, cuMemFree(a));
    return 0;
  }
  for (int i = 0; i < 3; i++) fi_admin_read_probe(rt, &t, 0, NULL);
  probe_ctx one = {rt, &t, 1};
  const double ms = time_runs(probe_run, &one, 1, quick ? 5 : 20), tbs = (double)bytes / (ms * 1e-3) / 1e12;
  printf("read: %.2f TB/s (1 GiB read once with 16-byte streaming loads, %.3f ms)\n", tbs, ms);
  if (json) fprintf(json, "{\"bench\":\"read\",\"bytes\":%zu,\"ms\":%.5f,\"tbs\":%.4f}\n", bytes, ms, tbs);
  /* FI_BENCH_READ_SERIES=1: the probe over 32 MiB .. 1 GiB, back-to-back launches over
   * rotating windows of the buffer (as decode's runs), so that a launch's fixed cost
   * (ramp and tail) can be fitted apart from the streaming rate and set beside decode's. */
  const char *ser = getenv("FI_BENCH_READ_SERIES");
  if (ser && *ser == '1') {
    printf("\n| read probe bytes | launches a batch | us | TB/s |\n|---|---|---|---|\n");
    enum { MAX_WIN = 32 }; /* 1 GiB / the smallest size, 32 MiB */
    for (size_t sz = bytes / MAX_WIN; sz <= bytes; sz *= 2) {
      const int nw = (int)(bytes / sz), batch = sz >= ((size_t)256 << 20) ? 5 : 20;
      DLTensor w[MAX_WIN];
      int64_t wshape[1] = {(int64_t)sz}; /* the tensors point at it */
      for (int k = 0; k < nw; k++) {
        w[k] = tensor(a + (CUdeviceptr)k * sz, 0, 1, wshape);
        w[k].dtype = t.dtype;
      }
      probe_ctx pc = {rt, w, nw};
      const double sm = time_runs(probe_run, &pc, batch, quick ? 3 : 9), stbs = (double)sz / (sm * 1e-3) / 1e12;
      printf("| %zu MiB | %d | %.1f | %.2f |\n", sz >> 20, batch, sm * 1e3, stbs);
      if (json) fprintf(json, "{\"bench\":\"read_series\",\"bytes\":%zu,\"us\":%.3f,\"tbs\":%.4f}\n", sz, sm * 1e3, stbs);
    }
  }
  CU_CHECK(&cu, cuMemFree(a));
  return tbs;
}

typedef struct dcfg {
  const char *label;
  int B, L, hq, hkv, hnd, fp8;
} dcfg;

/* Bytes of one K (or V) page: 16 slots of the KV heads at head_dim 128. */
static int64_t page_bytes_of(const dcfg *c) { return (int64_t)16 * c->hkv * 128 * (c->fp8 ? 1 : 2); }

/* Pages in a configuration's K and V pools: at least 1 GiB of K + V, whole page sets
 * (*need_out: the pages of one set). */
static int64_t pool_pages(const dcfg *c, int64_t *need_out) {
  const int64_t ppr = (c->L + 15) / 16, need = (int64_t)c->B * ppr;
  const int64_t page_bytes = page_bytes_of(c);
  int64_t pool = need;
  while (pool * page_bytes * 2 < ((int64_t)1 << 30)) pool += need;
  if (need_out) *need_out = need;
  return pool;
}
static int64_t pool_bytes(const dcfg *c) {
  return pool_pages(c, NULL) * page_bytes_of(c);
}

/* Every configuration's K and V pools are carved from two arenas allocated once for the
 * section, as a serving engine allocates its KV cache once. Allocating and freeing them a
 * configuration at a time (FI_BENCH_DECODE_ARENA=0, the bench until the eighth session)
 * made a configuration's figure depend on what ran before it: B = 128, L = 1024 measured
 * 3.97 TB/s alone and 3.57 right after the 2.15 GB pools of the MHA rows were freed. */
static CUdeviceptr arena_k, arena_v;
static int64_t arena_bytes;

/* Timed runs take the page sets in turn, across repetitions too. */
/* Set while bench_one runs its configuration with attention sinks (fi_attention_extras). */
static int with_sinks;

typedef struct run_ctx {
  const fi_attention_extras *x; /* NULL: the plain run */
  fi_runtime *rt;
  const fi_decode_plan *plan;
  const DLTensor *q, *k, *v, *ip, *ix, *lp;
  DLTensor *out;
  fi_kv_layout lay;
  int sets;
  CUdeviceptr gap; /* FI_BENCH_DECODE_GAP=1: a 256-byte copy before each run */
} run_ctx;
/* The gap stands for a serving engine's own kernel before decode: work in the stream that
 * does not trigger early, so decode's blocks cannot start during it (its time is in the
 * figure, the same for every variant). */
static void decode_run(void *c, int call) {
  const run_ctx *x = c;
  if (x->gap) CU_CHECK(&cu, cuMemcpyDtoDAsync(x->gap + 256, x->gap, 256, NULL));
  fi_batch_decode_run_ex(x->rt, x->plan, x->q, x->k, x->v, x->ip, &x->ix[call % x->sets], x->lp, x->lay, x->out,
                         NULL, x->x, NULL);
}

/* Tree verification (issue 45: B = 32 requests x 8 query tokens over L = 4096, a packed
 * tree mask, within 1.3x of the decode time of the same cache): the batch prefill over the
 * decode case's own pages (the same page sets in turn), T query tokens a request, causal,
 * once without a custom mask and once with a random tree's (query t sees the prefix and
 * its ancestors among the T draft tokens, itself included). 0 while no tree row runs. */
static int tree_q;

typedef struct tree_ctx {
  fi_runtime *rt;
  fi_prefill_plan *plan;
  const DLTensor *q, *k, *v, *ix;
  DLTensor *out;
  fi_kv_layout lay;
  int sets;
} tree_ctx;
static void tree_run(void *c, int call) {
  const tree_ctx *x = c;
  fi_batch_prefill_paged_run(x->rt, x->plan, x->q, x->k, x->v, &x->ix[call % x->sets], x->lay, x->out, NULL, NULL);
}

static void bench_tree(fi_runtime *rt, const dcfg *c, const DLTensor *tk, const DLTensor *tv, const DLTensor *tix,
                       int sets, const int32_t *indptr, const int32_t *last, fi_kv_layout lay, double dec_us,
                       double read_tbs) {
  const int D = 128, B = c->B, L = c->L, T = tree_q > 64 ? 64 : tree_q, es = c->fp8 ? 1 : 2; /* parent[64] */
  const int64_t nq = (int64_t)B * T;
  const size_t qbytes = (size_t)nq * c->hq * D * 2;
  const int64_t seg = ((int64_t)T * L + 7) / 8, mbytes = seg * B;
  CUdeviceptr q, out, ws, mk;
  CU_CHECK(&cu, cuMemAlloc(&q, qbytes));
  CU_CHECK(&cu, cuMemAlloc(&out, qbytes));
  CU_CHECK(&cu, cuMemsetD8(q, 0x3c, qbytes));
  CU_CHECK(&cu, cuMemAlloc(&mk, (size_t)mbytes));
  uint8_t *hm = calloc((size_t)mbytes, 1);
  int32_t *qo = malloc(sizeof(int32_t) * (size_t)(B + 1));
  if (!hm || !qo) {
    fprintf(stderr, "tree verify: out of host memory\n");
    free(hm), free(qo);
    CUdeviceptr fr[4] = {q, out, mk, 0};
    for (int i = 0; i < 3; i++) CU_CHECK(&cu, cuMemFree(fr[i]));
    return;
  }
  for (int b = 0; b <= B; b++) qo[b] = b * T;
  for (int b = 0; b < B; b++) { /* a random tree of T draft tokens over the prefix */
    int parent[64];
    for (int t = 0; t < T; t++) parent[t] = t == 0 ? -1 : (int)(brand() % (uint64_t)(t + 1)) - 1;
    uint8_t *m = hm + (int64_t)b * seg;
    for (int t = 0; t < T; t++) {
      const int64_t row = (int64_t)t * L;
      for (int64_t j = 0; j < L - T; j++) m[(row + j) >> 3] |= (uint8_t)(1u << ((row + j) & 7));
      for (int u = t; u >= 0; u = parent[u]) {
        const int64_t bit = row + L - T + u;
        m[bit >> 3] |= (uint8_t)(1u << (bit & 7));
      }
    }
  }
  CU_CHECK(&cu, cuMemcpyHtoD(mk, hm, (size_t)mbytes));
  free(hm);
  int64_t qs[3] = {nq, c->hq, D}, ms_[1] = {mbytes};
  DLTensor tq = tensor(q, 1, 3, qs), to = tensor(out, 1, 3, qs), tm = tensor(mk, 1, 1, ms_);
  tm.dtype = (DLDataType){kDLUInt, 8, 1};
  size_t wsb = 0;
  fi_status st = fi_batch_prefill_workspace_size(rt, tq.device, B, (int)nq, c->hq, c->hkv, D, &wsb);
  if (st != FI_OK) fprintf(stderr, "tree verify: %s\n", fi_last_error());
  int64_t wshape[1];
  DLTensor tw = bench_workspace(wsb, &ws, wshape);
  fi_batch_prefill_info in;
  memset(&in, 0, sizeof in);
  in.batch = B;
  in.qo_indptr = qo;
  in.kv_indptr = indptr;
  in.kv_last_page_len = last;
  in.num_qo_heads = c->hq;
  in.num_kv_heads = c->hkv;
  in.head_dim = D;
  in.page_size = (int)(c->hnd ? tk->shape[2] : tk->shape[1]); /* the decode case's pages */
  in.q_dtype = tq.dtype;
  in.kv_dtype = tk->dtype;
  fi_prefill_params p;
  fi_prefill_params_init(&p);
  p.causal = 1;
  for (int masked = 0; masked < 2 && st == FI_OK; masked++) {
    fi_attention_extras x;
    fi_attention_extras_init(&x);
    x.custom_mask = &tm;
    fi_prefill_plan *plan = NULL;
    st = fi_batch_prefill_paged_plan_ex(rt, &in, &p, masked ? &x : NULL, &tw, NULL, &plan);
    if (st == FI_OK) st = fi_batch_prefill_paged_run(rt, plan, &tq, tk, tv, &tix[0], lay, &to, NULL, NULL);
    if (st != FI_OK) {
      fprintf(stderr, "tree verify %s: %s\n", masked ? "mask" : "causal", fi_last_error());
      fi_batch_prefill_plan_destroy(plan);
      break;
    }
    CU_CHECK(&cu, cuCtxSynchronize());
    const double bytes = 2.0 * (double)B * L * c->hkv * D * es + 2.0 * (double)qbytes;
    tree_ctx tc = {rt, plan, &tq, tk, tv, tix, &to, lay, sets};
    const double ms = time_runs(tree_run, &tc, runs_for_bytes(bytes), quick ? 3 : 9);
    const double tbs = bytes / (ms * 1e-3) / 1e12;
    char label[40], heads[32];
    snprintf(label, sizeof label, "tree %d %s", T, masked ? "mask" : "causal");
    snprintf(heads, sizeof heads, "%d/%d", c->hq, c->hkv);
    printf("| %-12s | %4d | %6d | %6s | %s | %-4s | %8.1f | %5.2f | %5.1f%% | %.2fx decode |\n", label, B, L, heads,
           lay == FI_KV_LAYOUT_HND ? "HND" : "NHD", c->fp8 ? "e4m3" : "bf16", ms * 1e3, tbs,
           read_tbs > 0 ? 100.0 * tbs / read_tbs : 0.0, dec_us > 0 ? ms * 1e3 / dec_us : 0.0);
    if (json)
      fprintf(json,
              "{\"bench\":\"tree_verify\",\"batch\":%d,\"kv_len\":%d,\"qo_len\":%d,\"qo_heads\":%d,\"kv_heads\":%d,"
              "\"mask\":%d,\"us\":%.3f,\"tbs\":%.4f,\"decode_us\":%.3f,\"of_decode\":%.4f}\n",
              B, L, T, c->hq, c->hkv, masked, ms * 1e3, tbs, dec_us, dec_us > 0 ? ms * 1e3 / dec_us : 0.0);
    fflush(stdout);
    fi_batch_prefill_plan_destroy(plan);
    CU_CHECK(&cu, cuCtxSynchronize());
  }
  free(qo);
  CUdeviceptr fr[4] = {q, out, mk, ws};
  for (int i = 0; i < 4; i++) CU_CHECK(&cu, cuMemFree(fr[i]));
}

/* One configuration: bf16 q, D = 128, page 16, bf16 or e4m3 cache. Pages come from a pool
 * of at least 1 GiB in random order; successive runs take different page sets, so the L2
 * holds nothing a run needs. Returns TB/s. */
static double bench_one(fi_runtime *rt, const dcfg *c, double read_tbs) {
  const int D = 128, ps = 16, B = c->B, L = c->L, es = c->fp8 ? 1 : 2;
  const int64_t ppr = (L + ps - 1) / ps;
  const int64_t page_bytes = page_bytes_of(c);
  int64_t need;
  const int64_t pool = pool_pages(c, &need);
  const int sets = (int)(pool / need) > 8 ? 8 : (int)(pool / need);
  CUdeviceptr kc, vc, q, out, ip, lp, ix[8], ws;
  const int own = pool * page_bytes > arena_bytes;
  if (own) {
    CU_CHECK(&cu, cuMemAlloc(&kc, (size_t)(pool * page_bytes)));
    CU_CHECK(&cu, cuMemAlloc(&vc, (size_t)(pool * page_bytes)));
  } else {
    kc = arena_k;
    vc = arena_v;
  }
  CU_CHECK(&cu, cuMemsetD8(kc, 0x3c, (size_t)(pool * page_bytes)));
  CU_CHECK(&cu, cuMemsetD8(vc, 0x3c, (size_t)(pool * page_bytes)));
  const size_t qbytes = (size_t)B * c->hq * D * 2;
  CU_CHECK(&cu, cuMemAlloc(&q, qbytes));
  CU_CHECK(&cu, cuMemAlloc(&out, qbytes));
  CU_CHECK(&cu, cuMemsetD8(q, 0x3c, qbytes));
  int32_t *indptr = malloc(sizeof(int32_t) * (size_t)(B + 1)), *last = malloc(sizeof(int32_t) * (size_t)B);
  indptr[0] = 0;
  for (int b = 0; b < B; b++) {
    indptr[b + 1] = indptr[b] + (int32_t)ppr;
    last[b] = L - (int)(ppr - 1) * ps;
  }
  CU_CHECK(&cu, cuMemAlloc(&ip, sizeof(int32_t) * (size_t)(B + 1)));
  CU_CHECK(&cu, cuMemAlloc(&lp, sizeof(int32_t) * (size_t)B));
  CU_CHECK(&cu, cuMemcpyHtoD(ip, indptr, sizeof(int32_t) * (size_t)(B + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(lp, last, sizeof(int32_t) * (size_t)B));
  int32_t *perm = malloc(sizeof(int32_t) * (size_t)pool);
  for (int64_t i = 0; i < pool; i++) perm[i] = (int32_t)i;
  for (int64_t i = pool - 1; i > 0; i--) {
    const int64_t j = (int64_t)(brand() % (uint64_t)(i + 1));
    const int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int s = 0; s < sets; s++) {
    CU_CHECK(&cu, cuMemAlloc(&ix[s], sizeof(int32_t) * (size_t)need));
    CU_CHECK(&cu, cuMemcpyHtoD(ix[s], perm + (int64_t)s * need, sizeof(int32_t) * (size_t)need));
  }
  free(perm);
  int64_t qs[3] = {B, c->hq, D};
  int64_t ks[4] = {pool, c->hnd ? c->hkv : ps, c->hnd ? ps : c->hkv, D};
  int64_t is[1] = {B + 1}, ls[1] = {B}, xs[1] = {need};
  DLTensor tq = tensor(q, 1, 3, qs), to = tensor(out, 1, 3, qs);
  DLTensor tk = tensor(kc, 1, 4, ks), tv = tensor(vc, 1, 4, ks);
  if (c->fp8) {
    tk.dtype.code = tv.dtype.code = 10; /* kDLFloat8_e4m3fn */
    tk.dtype.bits = tv.dtype.bits = 8;
  }
  DLTensor tip = tensor(ip, 1, 1, is), tlp = tensor(lp, 1, 1, ls), tix[8];
  tip.dtype = tlp.dtype = (DLDataType){kDLInt, 32, 1};
  for (int s = 0; s < sets; s++) {
    tix[s] = tensor(ix[s], 1, 1, xs);
    tix[s].dtype = (DLDataType){kDLInt, 32, 1};
  }
  size_t wsb = 0;
  double tbs = 0;
  fi_status st = fi_batch_decode_workspace_size(rt, tq.device, B, c->hq, c->hkv, D, &wsb);
  int64_t wshape[1];
  DLTensor tw = bench_workspace(wsb, &ws, wshape);
  fi_batch_decode_info in;
  memset(&in, 0, sizeof in);
  in.batch = B;
  in.indptr = indptr;
  in.last_page_len = last;
  in.num_qo_heads = c->hq;
  in.num_kv_heads = c->hkv;
  in.head_dim = D;
  in.page_size = ps;
  in.q_dtype = tq.dtype;
  in.kv_dtype = tk.dtype;
  fi_decode_plan *plan = NULL;
  if (st == FI_OK) st = fi_batch_decode_plan(rt, &in, NULL, &tw, NULL, &plan);
  const fi_kv_layout lay = c->hnd ? FI_KV_LAYOUT_HND : FI_KV_LAYOUT_NHD;
  bench_sinks sk;
  if (with_sinks) bench_sinks_make(&sk, c->hq);
  if (st == FI_OK)
    st = fi_batch_decode_run_ex(rt, plan, &tq, &tk, &tv, &tip, &tix[0], &tlp, lay, &to, NULL, with_sinks ? &sk.x : NULL,
                                NULL);
  if (st != FI_OK) {
    fprintf(stderr, "decode %s: %s\n", c->label, fi_last_error());
  } else {
    CU_CHECK(&cu, cuCtxSynchronize());
    const double kvb = 2.0 * (double)B * L * c->hkv * D * es, bytes = kvb + 2.0 * (double)qbytes;
    const int batch = runs_for_bytes(bytes);
    run_ctx rc = {with_sinks ? &sk.x : NULL, rt, plan, &tq, &tk, &tv, &tip, tix, &tlp, &to, lay, sets, 0};
    const char *gap = getenv("FI_BENCH_DECODE_GAP");
    if (gap && gap[0] == '1') CU_CHECK(&cu, cuMemAlloc(&rc.gap, 512));
    const double ms = time_runs(decode_run, &rc, batch, quick ? 3 : 9);
    if (rc.gap) CU_CHECK(&cu, cuMemFree(rc.gap));
    rc.gap = 0; /* the host-cost runs below time the run call alone */
    tbs = bytes / (ms * 1e-3) / 1e12;
    /* Host cost of one run call (validation, memo, launch), for the small cases. */
    const double h0 = now_us();
    for (int i = 0; i < 20; i++) decode_run(&rc, i);
    const double host_us = (now_us() - h0) / 20;
    CU_CHECK(&cu, cuCtxSynchronize());
    char heads[32];
    snprintf(heads, sizeof heads, "%d/%d", c->hq, c->hkv);
    printf("| %-12s | %4d | %6d | %6s | %s | %-4s | %8.1f | %5.2f | %5.1f%% | %4.1f |\n", c->label, B, L, heads,
           c->hnd ? "HND" : "NHD", c->fp8 ? "e4m3" : "bf16", ms * 1e3, tbs, read_tbs > 0 ? 100.0 * tbs / read_tbs : 0.0,
           host_us);
    if (json)
      fprintf(json,
              "{\"bench\":\"decode\",\"label\":\"%s\",\"batch\":%d,\"kv_len\":%d,\"qo_heads\":%d,"
              "\"kv_heads\":%d,\"layout\":\"%s\",\"kv\":\"%s\",\"us\":%.3f,\"tbs\":%.4f,\"of_read\":%.4f}\n",
              c->label, B, L, c->hq, c->hkv, c->hnd ? "HND" : "NHD", c->fp8 ? "e4m3" : "bf16", ms * 1e3, tbs,
              read_tbs > 0 ? tbs / read_tbs : 0.0);
    if (tree_q > 0) bench_tree(rt, c, &tk, &tv, tix, sets, indptr, last, lay, ms * 1e3, read_tbs);
  }
  fi_batch_decode_plan_destroy(plan);
  if (with_sinks) bench_sinks_free(&sk);
  CUdeviceptr fr[7] = {q, out, ip, lp, ws, kc, vc};
  for (int i = 0; i < (own ? 7 : 5); i++) CU_CHECK(&cu, cuMemFree(fr[i]));
  for (int s = 0; s < sets; s++) CU_CHECK(&cu, cuMemFree(ix[s]));
  free(indptr);
  free(last);
  return tbs;
}

static const dcfg targets[] = {
    {"target 4.30", 64, 4096, 32, 8, 0, 0},  {"target 4.30", 64, 4096, 64, 8, 0, 0},
    {"target 4.30", 16, 16384, 32, 8, 0, 0}, {"target 4.30", 16, 16384, 64, 8, 0, 0},
    {"target 4.35", 64, 4096, 32, 32, 0, 0}, {"target 4.35", 16, 16384, 32, 32, 0, 0},
    {"target 4.0", 128, 1024, 32, 8, 0, 0},  {"target 2.0", 1, 8192, 32, 8, 0, 0},
    {"target 4.0", 64, 4096, 32, 8, 0, 1},
    /* MQA (issue 45: >= 85% of the read probe): a group of 64 runs as four blocks of 16 a
     * KV head, each reading it */
    {"MQA 0.85 read", 64, 4096, 64, 1, 0, 0},
};

/* The sweep: batch, length, group (1, 4, 8 over 8 KV heads), both layouts; at most 8 GiB
 * of cache a configuration. Case i: 1 and *c when it runs, 0 when skipped, -1 past the end. */
static int sweep_case(int i, dcfg *c) {
  static const int Bs[] = {1, 4, 16, 64, 256}, Ls[] = {512, 2048, 8192, 32768}, gs[] = {1, 4, 8};
  if (i >= 2 * 3 * 5 * 4) return -1;
  const int l = i % 4, b = i / 4 % 5, g = i / 20 % 3, lay = i / 60;
  if ((double)Bs[b] * Ls[l] * 8 * 128 * 4 > 8.6e9) return 0;
  if (quick && (b % 2 || l % 2)) return 0;
  const dcfg s = {"sweep", Bs[b], Ls[l], 8 * gs[g], 8, lay, 0};
  *c = s;
  return 1;
}
static int sweep_on(void) {
  const char *sw = getenv("FI_BENCH_DECODE_SWEEP"), *pick = getenv("FI_BENCH_DECODE_PICK");
  return !(sw && !strcmp(sw, "0")) && !(pick && *pick);
}

/* FI_BENCH_DECODE_EXTRA="B,L,H_qo,H_kv[,fp8[,hnd]];...": more cases for FI_BENCH_DECODE_PICK,
 * picked as the indices after the targets' (shapes the targets leave out: a batch of 8, a
 * group of 2). Writes at most max into out and returns how many; a malformed case is
 * named on stderr and left out. */
#define MAX_EXTRA 32
#define NFIXED_MAX 16
_Static_assert(sizeof targets / sizeof targets[0] <= NFIXED_MAX, "NFIXED_MAX holds the targets");
static int extra_cases(dcfg *out, int max, int warn) {
  const char *e = getenv("FI_BENCH_DECODE_EXTRA");
  int n = 0;
  for (int idx = 0; e && *e; idx++) {
    const char *end = strchr(e, ';');
    const size_t len = end ? (size_t)(end - e) : strlen(e);
    char one[128];
    if (len > 0 && len < sizeof one) {
      memcpy(one, e, len);
      one[len] = 0;
      long v[6] = {0, 0, 0, 0, 0, 0};
      int k = 0, ok = 1;
      for (char *p = one; ok && k < 6;) {
        char *q;
        v[k++] = strtol(p, &q, 10);
        ok = q != p && (*q == ',' || *q == 0);
        if (!ok || *q == 0) break;
        p = q + 1;
      }
      ok = ok && k >= 4 && v[0] >= 1 && v[1] >= 1 && v[2] >= 1 && v[3] >= 1 && v[2] % v[3] == 0 &&
           v[0] <= 4096 && v[1] <= (1 << 20) && v[2] <= 256;
      if (!ok) {
        if (warn)
          fprintf(stderr, "fi-bench: FI_BENCH_DECODE_EXTRA case %d \"%s\" left out: B,L,H_qo,H_kv[,fp8[,hnd]] "
                          "with H_kv dividing H_qo is needed\n", idx + 1, one);
      } else if (n == max) {
        if (warn) fprintf(stderr, "fi-bench: FI_BENCH_DECODE_EXTRA case %d left out: at most %d cases\n", idx + 1, max);
      } else {
        const dcfg x = {"extra", (int)v[0], (int)v[1], (int)v[2], (int)v[3], v[5] != 0, v[4] != 0};
        out[n++] = x;
      }
    } else if (len > 0 && warn) {
      fprintf(stderr, "fi-bench: FI_BENCH_DECODE_EXTRA case %d left out: too long\n", idx + 1);
    }
    e = end ? end + 1 : NULL;
  }
  return n;
}

static void bench_decode_cases(fi_runtime *rt) {
  const double rd = bench_read(rt);
  printf("\n| case | B | L | heads | layout | kv | us | TB/s | of read | host us/call |\n"
         "|---|---|---|---|---|---|---|---|---|---|\n");
  /* FI_BENCH_DECODE_PICK="6,7": only those cases (indices into targets, then the
   * FI_BENCH_DECODE_EXTRA ones), with
   * FI_BENCH_DECODE_VARIANTS="A=1;A=2,B=3" run in turn against the default ("" first) on
   * each, FI_BENCH_DECODE_REPEAT times (interleaved: an A/B within one process); no
   * tuning rows and no sweep. */
  const char *pick = getenv("FI_BENCH_DECODE_PICK");
  if (pick && *pick) {
    const int nfixed = (int)(sizeof targets / sizeof targets[0]);
    dcfg all[NFIXED_MAX + MAX_EXTRA];
    memcpy(all, targets, sizeof targets);
    const int ntargets = nfixed + extra_cases(all + nfixed, MAX_EXTRA, 1);
    const char *rv = getenv("FI_BENCH_DECODE_REPEAT"), *vs = getenv("FI_BENCH_DECODE_VARIANTS");
    const int repeat = rv && atoi(rv) > 0 ? atoi(rv) : 1;
    char vbuf[1024];
    snprintf(vbuf, sizeof vbuf, vs && *vs ? ";;%s" : ";", vs ? vs : "");
    for (int r = 0; r < repeat; r++)
      for (const char *pi = pick; *pi;) {
        const int ti = atoi(pi);
        while (*pi && *pi != ',') pi++;
        if (*pi == ',') pi++;
        if (ti < 0 || ti >= ntargets) continue;
        for (const char *v = vbuf; v;) {
          const char *end = strchr(v + 1, ';');
          char one[256];
          const size_t len = (size_t)((end ? end : v + strlen(v)) - (v + 1));
          if (len >= sizeof one) break;
          memcpy(one, v + 1, len);
          one[len] = 0;
          /* set the variant's VAR=VAL pairs (comma separated), run, unset them */
          char names[8][64];
          int nn = 0;
          for (char *tok = strtok(one, ","); tok && nn < 8; tok = strtok(NULL, ",")) {
            char *eq = strchr(tok, '=');
            if (!eq || eq - tok >= 64) continue;
            memcpy(names[nn], tok, (size_t)(eq - tok));
            names[nn][eq - tok] = 0;
            setenv(names[nn++], eq + 1, 1);
          }
          dcfg c = all[ti];
          char label[256];
          memcpy(one, v + 1, len);
          one[len] = 0;
          snprintf(label, sizeof label, "%s", len ? one : "default");
          c.label = label;
          fi_runtime *vrt = nn ? bench_env_runtime() : rt; /* the variant's variables, read at create */
          bench_one(vrt, &c, rd);
          if (vrt != rt) {
            CU_CHECK(&cu, cuCtxSynchronize());
            fi_runtime_destroy(vrt);
          }
          for (int k = 0; k < nn; k++) unsetenv(names[k]);
          v = end;
        }
      }
    return;
  }
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) bench_one(rt, &targets[i], rd);
  /* Attention sinks (issue 45: within 10% of the same shape without them): 64/8 at B = 64,
   * L = 4096, and 32/8 over e4m3 at the same size, each without then with. */
  static const dcfg sink_rows[] = {{"no sinks", 64, 4096, 64, 8, 0, 0}, {"sinks", 64, 4096, 64, 8, 0, 0},
                                   {"no sinks", 64, 4096, 32, 8, 0, 1}, {"sinks", 64, 4096, 32, 8, 0, 1}};
  for (size_t i = 0; i < sizeof sink_rows / sizeof sink_rows[0]; i++) {
    with_sinks = (int)(i % 2);
    bench_one(rt, &sink_rows[i], rd);
    with_sinks = 0;
  }
  /* Tree verification beside the decode of the same cache (bench_tree) */
  static const dcfg tree_row = {"tree base", 32, 4096, 32, 8, 0, 0};
  tree_q = 8;
  bench_one(rt, &tree_row, rd);
  tree_q = 0;
  /* Tuning comparisons, each through its environment override (read at fi_runtime_create:
   * a runtime made after setting it):
   * FI_DECODE_WARPS (warps a block instead of the plan's choice), FI_DECODE_SPLIT (the
   * split target scaled), FI_DECODE_PIPELINE (register double buffer), FI_DECODE_PREFETCH
   * (L2 prefetch steps ahead; negative: per-line prefetches), FI_DECODE_HEAD_PREFETCH
   * (tokens of each item prefetched into L2 at the block's start). Indices into targets. */
  static const struct {
    const char *var, *val;
    int pick[5];
  } tunes[] = {
      {"FI_DECODE_WARPS", "4", {0, 4, 6, 8, -1}},   {"FI_DECODE_WARPS", "1", {0, 4, 6, 8, -1}},
      {"FI_DECODE_WARPS", "2", {2, 7, -1}},         {"FI_DECODE_SPLIT", "2", {2, 7, -1}},
      {"FI_DECODE_SPLIT", "0.5", {7, -1}},          {"FI_DECODE_PIPELINE", "0", {6, 8, -1}},
      {"FI_DECODE_PREFETCH", "-2", {0, 6, 7, 8, -1}},   {"FI_DECODE_HEAD_PREFETCH", "256", {7, -1}},
  };
  for (size_t t = 0; t < sizeof tunes / sizeof tunes[0]; t++) {
    if (getenv(tunes[t].var)) continue;
    char label[32];
    snprintf(label, sizeof label, "%s=%s", tunes[t].var + 10, tunes[t].val);
    setenv(tunes[t].var, tunes[t].val, 1);
    fi_runtime *vrt = bench_env_runtime(); /* read at create */
    for (int i = 0; i < 5 && tunes[t].pick[i] >= 0; i++) {
      dcfg c = targets[tunes[t].pick[i]];
      c.label = label;
      bench_one(vrt, &c, rd);
    }
    CU_CHECK(&cu, cuCtxSynchronize());
    fi_runtime_destroy(vrt);
    unsetenv(tunes[t].var);
  }
  if (!sweep_on()) return;
  dcfg c;
  for (int i = 0; sweep_case(i, &c) >= 0; i++)
    if (sweep_case(i, &c) > 0) bench_one(rt, &c, rd);
}

static void bench_decode(fi_runtime *rt, double copy) {
  (void)copy;
  const char *ar = getenv("FI_BENCH_DECODE_ARENA");
  if (!(ar && *ar && atoi(ar) == 0)) {
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
      if (pool_bytes(&targets[i]) > arena_bytes) arena_bytes = pool_bytes(&targets[i]);
    const char *pick = getenv("FI_BENCH_DECODE_PICK");
    dcfg extra[MAX_EXTRA];
    const int nx = pick && *pick ? extra_cases(extra, MAX_EXTRA, 0) : 0;
    const char *ex = getenv("FI_BENCH_DECODE_EXTRA");
    if (ex && *ex && !(pick && *pick))
      fprintf(stderr, "fi-bench: FI_BENCH_DECODE_EXTRA is read only with FI_BENCH_DECODE_PICK\n");
    for (int i = 0; i < nx; i++)
      if (pool_bytes(&extra[i]) > arena_bytes) arena_bytes = pool_bytes(&extra[i]);
    dcfg c;
    for (int i = 0; sweep_on() && sweep_case(i, &c) >= 0; i++)
      if (sweep_case(i, &c) > 0 && pool_bytes(&c) > arena_bytes) arena_bytes = pool_bytes(&c);
    CU_CHECK(&cu, cuMemAlloc(&arena_k, (size_t)arena_bytes));
    CU_CHECK(&cu, cuMemAlloc(&arena_v, (size_t)arena_bytes));
    printf("KV arena: 2 x %.2f GB, allocated once\n", arena_bytes / 1e9);
  }
  bench_decode_cases(rt);
  if (arena_bytes) {
    CU_CHECK(&cu, cuMemFree(arena_k));
    CU_CHECK(&cu, cuMemFree(arena_v));
    arena_bytes = 0;
  }
}

const bench_section bench_decode_section = {
    "decode",
    "batch decode over a paged KV cache (page 16, random page order, bf16, D=128) against\n"
    "the read bandwidth of a streaming 16-byte-load kernel; the issue's targets, tuning\n"
    "overrides on some of them, tree verification (32 requests x 8 query tokens over 4096,\n"
    "a packed tree mask, on the batch prefill kernels) beside the decode of the same cache,\n"
    "then a sweep of batch, length, group and layout\n"
    "(FI_BENCH_DECODE_SWEEP=0 leaves the sweep out); KV pages from arenas allocated once\n"
    "(FI_BENCH_DECODE_ARENA=0: a pool allocated and freed a case at a time;\n"
    "FI_BENCH_READ_SERIES=1 adds the read probe over 32 MiB .. 1 GiB;\n"
    "FI_BENCH_DECODE_GAP=1: a small copy before each run, so decode starts no earlier)",
    1,
    bench_decode,
};
