/* bench_ops.c: fi-bench sections act, cascade, page and rope: the memory-bound
 * ops around attention, each against the copy bandwidth measured in the same run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "fi_params.h"

/* ----------------------------------------------------------------- act */
typedef fi_status (*act_fn)(fi_runtime *, const DLTensor *, DLTensor *, void *);

typedef struct act_ctx {
  fi_runtime *rt;
  act_fn fn;
  DLTensor *in, *out;
  int sets;
} act_ctx;
static void act_run(void *c, int call) {
  act_ctx *x = c;
  const int s = call % x->sets;
  x->fn(x->rt, &x->in[s], &x->out[s], NULL);
}

static void bench_act_one(fi_runtime *rt, int act, int dt, int64_t rows, int64_t d, double copy) {
  static const act_fn fns[3] = {fi_silu_and_mul, fi_gelu_and_mul, fi_gelu_tanh_and_mul};
  static const char *const names[3] = {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"};
  const size_t es = dt == 2 ? 4 : 2, ibytes = (size_t)(rows * 2 * d) * es,
               obytes = (size_t)(rows * d) * es;
  /* Input/output pairs rotated so that one round exceeds the 60 MB L2 several times. */
  int sets = (int)((256u << 20) / (ibytes + obytes)) + 1;
  if (sets > 16) sets = 16;
  CUdeviceptr in[16], out[16];
  int64_t ishape[2] = {rows, 2 * d}, oshape[2] = {rows, d};
  DLTensor ti[16], to[16];
  for (int s = 0; s < sets; s++) {
    CU_CHECK(&cu, cuMemAlloc(&in[s], ibytes));
    CU_CHECK(&cu, cuMemAlloc(&out[s], obytes));
    CU_CHECK(&cu, cuMemsetD8(in[s], 0x3c, ibytes)); /* 1.0-ish in f16/bf16; finite in f32 */
    ti[s] = tensor(in[s], dt, 2, ishape);
    to[s] = tensor(out[s], dt, 2, oshape);
  }
  fi_status st = fns[act](rt, &ti[0], &to[0], NULL);
  if (st != FI_OK) {
    fprintf(stderr, "fi_%s: %s\n", names[act], fi_last_error());
  } else {
    CU_CHECK(&cu, cuCtxSynchronize());
    act_ctx ac = {rt, fns[act], ti, to, sets};
    double ms = time_runs(act_run, &ac, 20, quick ? 3 : 9);
    double tbs = (double)(ibytes + obytes) / (ms * 1e-3) / 1e12;
    printf("| %s | %-4s | %6lld x 2*%-6lld | %8.1f | %5.2f | %5.1f%% |\n", names[act], dtname(dt),
           (long long)rows, (long long)d, ms * 1e3, tbs, 100.0 * tbs / copy);
    if (json)
      fprintf(json,
              "{\"bench\":\"%s\",\"dtype\":\"%s\",\"rows\":%lld,\"d\":%lld,\"us\":%.3f,"
              "\"tbs\":%.4f,\"of_copy\":%.4f}\n",
              names[act], dtname(dt), (long long)rows, (long long)d, ms * 1e3, tbs, tbs / copy);
  }
  for (int s = 0; s < sets; s++) {
    CU_CHECK(&cu, cuMemFree(in[s]));
    CU_CHECK(&cu, cuMemFree(out[s]));
  }
}

/* The case first (silu_and_mul, 16384 x 2*8192 bf16), then the
 * other activations, dtypes and model sizes; 8191 forces 2-byte accesses,
 * 128 tokens is decode-sized and launch-bound. */
static void bench_act(fi_runtime *rt, double copy) {
  static const struct {
    int act, dt;
    int64_t rows, d;
  } cases[] = {
      {0, 1, 16384, 8192}, {1, 1, 16384, 8192}, {2, 1, 16384, 8192}, {0, 0, 16384, 8192},
      {0, 2, 8192, 8192},  {1, 0, 16384, 8192}, {0, 1, 4096, 14336}, {0, 1, 8192, 11008},
      {2, 1, 32768, 2048}, {0, 1, 16384, 8191}, {0, 1, 128, 14336},
  };
  printf("\n| op | dtype | tokens x input cols | us | TB/s | of copy |\n|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    bench_act_one(rt, cases[i].act, cases[i].dt, cases[i].rows, cases[i].d, copy);
}

/* ------------------------------------------------------------- cascade */
/* One input/output set of a cascade merge; the DLTensors point at shape
 * arrays owned by bench_cascade_one. */
typedef struct cas_set {
  CUdeviceptr va, vb, sa, sb, vo, so;
  DLTensor tva, tvb, tsa, tsb, tvo, tso;
} cas_set;

enum { CAS_MERGE_STATE, CAS_IN_PLACE, CAS_MERGE_STATES };

static fi_status cas_call(fi_runtime *rt, int op, cas_set *s) {
  if (op == CAS_MERGE_STATE)
    return fi_merge_state(rt, &s->tva, &s->tsa, &s->tvb, &s->tsb, &s->tvo, &s->tso, NULL);
  if (op == CAS_IN_PLACE)
    return fi_merge_state_in_place(rt, &s->tva, &s->tsa, &s->tvb, &s->tsb, NULL, NULL);
  return fi_merge_states(rt, &s->tva, &s->tsa, &s->tvo, &s->tso, NULL);
}

typedef struct cas_ctx {
  fi_runtime *rt;
  int op, sets;
  cas_set *set;
} cas_ctx;
static void cas_run(void *c, int call) {
  cas_ctx *x = c;
  cas_call(x->rt, x->op, &x->set[call % x->sets]);
}

/* seq x heads x head_dim rows; n states for merge_states (else 2). Bytes:
 * every v and LSE read once and every output written once, LSEs included
 * (merge_state: 3 v + 3 s; merge_states: n + 1 of each). */
static void bench_cascade_one(fi_runtime *rt, int op, int dt, int64_t seq, int64_t heads,
                              int64_t hd, int64_t n, double copy) {
  static const char *const names[3] = {"merge_state", "merge_state_in_place", "merge_states"};
  const size_t es = dt == 2 ? 4 : 2, vb = (size_t)(seq * heads * hd) * es,
               sb = (size_t)(seq * heads) * 4;
  const int many = op == CAS_MERGE_STATES;
  const size_t in_v = many ? (size_t)n * vb : vb, in_s = many ? (size_t)n * sb : sb;
  const double bytes = many ? (double)(in_v + in_s + vb + sb) : 3.0 * (double)(vb + sb);
  int sets = (int)((256u << 20) / bytes) + 1;
  if (sets > 8) sets = 8;
  int64_t v3[3] = {seq, heads, hd}, s2[2] = {seq, heads};
  int64_t v4[4] = {seq, n, heads, hd}, s3[3] = {seq, n, heads};
  cas_set set[8];
  memset(set, 0, sizeof set);
  for (int s = 0; s < sets; s++) {
    cas_set *x = &set[s];
    /* 0x3c bytes: about 0.01 in every dtype, finite LSEs of equal size. */
    CU_CHECK(&cu, cuMemAlloc(&x->va, in_v));
    CU_CHECK(&cu, cuMemAlloc(&x->sa, in_s));
    CU_CHECK(&cu, cuMemsetD8(x->va, 0x3c, in_v));
    CU_CHECK(&cu, cuMemsetD8(x->sa, 0x3c, in_s));
    if (!many) {
      CU_CHECK(&cu, cuMemAlloc(&x->vb, vb));
      CU_CHECK(&cu, cuMemAlloc(&x->sb, sb));
      CU_CHECK(&cu, cuMemsetD8(x->vb, 0x3c, vb));
      CU_CHECK(&cu, cuMemsetD8(x->sb, 0x3c, sb));
      x->tvb = tensor(x->vb, dt, 3, v3);
      x->tsb = tensor(x->sb, 2, 2, s2);
    }
    if (op != CAS_IN_PLACE) {
      CU_CHECK(&cu, cuMemAlloc(&x->vo, vb));
      CU_CHECK(&cu, cuMemAlloc(&x->so, sb));
      x->tvo = tensor(x->vo, dt, 3, v3);
      x->tso = tensor(x->so, 2, 2, s2);
    }
    x->tva = many ? tensor(x->va, dt, 4, v4) : tensor(x->va, dt, 3, v3);
    x->tsa = many ? tensor(x->sa, 2, 3, s3) : tensor(x->sa, 2, 2, s2);
  }
  char shape[64];
  snprintf(shape, sizeof shape, "%lld x %lld x %lld", (long long)seq, (long long)heads,
           (long long)hd);
  char label[64];
  snprintf(label, sizeof label, many ? "%s N=%lld" : "%s", names[op], (long long)n);
  fi_status st = cas_call(rt, op, &set[0]);
  if (st != FI_OK) {
    fprintf(stderr, "fi_%s: %s\n", names[op], fi_last_error());
  } else {
    CU_CHECK(&cu, cuCtxSynchronize());
    cas_ctx cc = {rt, op, sets, set};
    double ms = time_runs(cas_run, &cc, 20, quick ? 3 : 9);
    double tbs = bytes / (ms * 1e-3) / 1e12;
    printf("| %s | %-4s | %s | %8.1f | %5.2f | %5.1f%% |\n", label, dtname(dt), shape, ms * 1e3,
           tbs, 100.0 * tbs / copy);
    if (json)
      fprintf(json,
              "{\"bench\":\"%s\",\"dtype\":\"%s\",\"seq\":%lld,\"heads\":%lld,\"head_dim\":%lld,"
              "\"states\":%lld,\"us\":%.3f,\"tbs\":%.4f,\"of_copy\":%.4f}\n",
              names[op], dtname(dt), (long long)seq, (long long)heads, (long long)hd,
              (long long)(many ? n : 2), ms * 1e3, tbs, tbs / copy);
  }
  for (int s = 0; s < sets; s++) {
    CUdeviceptr *p[6] = {&set[s].va, &set[s].vb, &set[s].sa, &set[s].sb, &set[s].vo, &set[s].so};
    for (int i = 0; i < 6; i++)
      if (*p[i]) CU_CHECK(&cu, cuMemFree(*p[i]));
  }
}

/* The two cases first (merge_state and merge_states with 4 states,
 * 16384 x 32 x 128 bf16), then other dtypes, head dims and state counts;
 * 128 x 32 x 128 is decode-sized and launch-bound. */
static void bench_cascade(fi_runtime *rt, double copy) {
  static const struct {
    int op, dt;
    int64_t seq, heads, hd, n;
  } cases[] = {
      {CAS_MERGE_STATE, 1, 16384, 32, 128, 2},  {CAS_MERGE_STATES, 1, 16384, 32, 128, 4},
      {CAS_MERGE_STATE, 0, 16384, 32, 128, 2},  {CAS_MERGE_STATE, 2, 16384, 32, 128, 2},
      {CAS_MERGE_STATE, 1, 16384, 32, 64, 2},   {CAS_MERGE_STATE, 1, 16384, 32, 256, 2},
      {CAS_IN_PLACE, 1, 16384, 32, 128, 2},     {CAS_MERGE_STATES, 1, 16384, 32, 128, 2},
      {CAS_MERGE_STATES, 1, 16384, 32, 128, 7}, {CAS_MERGE_STATES, 2, 8192, 32, 128, 4},
      {CAS_MERGE_STATES, 1, 16384, 8, 256, 4},  {CAS_MERGE_STATE, 1, 128, 32, 128, 2},
  };
  printf("\n| op | dtype | seq x heads x head_dim | us | TB/s | of copy |\n|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    bench_cascade_one(rt, cases[i].op, cases[i].dt, cases[i].seq, cases[i].heads, cases[i].hd,
                      cases[i].n, copy);
}

/* ---------------------------------------------------------------- page */
typedef struct page_ctx {
  fi_runtime *rt;
  DLTensor *ak, *av, *idx; /* a set each */
  DLTensor *bi, *pos, *kc, *vc, *iptr, *last;
  int layout, sets;
} page_ctx;
static fi_status page_call(const page_ctx *p, int s) {
  return fi_append_paged_kv_cache(p->rt, &p->ak[s], &p->av[s], p->bi, p->pos, p->kc, p->vc, &p->idx[s], p->iptr,
                                  p->last, (fi_kv_layout)p->layout, 1.0, 1.0, NULL);
}
static void page_run(void *c, int call) {
  const page_ctx *p = c;
  page_call(p, call % p->sets);
}

typedef struct bip_ctx {
  fi_runtime *rt;
  const DLTensor *aip, *sl;
  DLTensor *bi, *pos;
} bip_ctx;
static void bip_run(void *c, int call) {
  (void)call; /* the same inputs every call */
  const bip_ctx *x = c;
  fi_get_batch_indices_positions(x->rt, x->aip, x->sl, x->bi, x->pos, NULL);
}

/* fi_append_paged_kv_cache: `reqs` requests of `newt` new tokens each after
 * `pre` cached ones, heads x head_dim, pages of `ps` in a shuffled order, K
 * and V caches separate. cache_fp8: 0 the input's dtype, 1 e4m3 (scale 1).
 * Bytes: append_k + append_v read, the same elements written into the
 * caches (at the cache's width), batch_indices + positions + the pages'
 * kv_indices read once. Sets rotate over their own inputs and own pages. */
static void bench_page_one(fi_runtime *rt, int dt, int cache_fp8, int layout, int64_t reqs,
                           int64_t newt, int64_t pre, int64_t heads, int64_t hd, int64_t ps,
                           double copy) {
  enum { SETS = 4 };
  const int64_t nnz = reqs * newt, seq = pre + newt, ppr = (seq + ps - 1) / ps;
  const int64_t pages_set = reqs * ppr, pages = SETS * pages_set;
  const size_t es = 2, ces = cache_fp8 ? 1 : 2, ibytes = (size_t)(nnz * heads * hd) * es;
  const size_t cbytes = (size_t)(pages * ps * heads * hd) * ces;
  CUdeviceptr kc, vc, ak[SETS], av[SETS], bi, pos, idx[SETS], iptr, last;
  CU_CHECK(&cu, cuMemAlloc(&kc, cbytes));
  CU_CHECK(&cu, cuMemAlloc(&vc, cbytes));
  int32_t *hbi = malloc(sizeof(int32_t) * (size_t)nnz), *hpos = malloc(sizeof(int32_t) * (size_t)nnz);
  int32_t *hidx = malloc(sizeof(int32_t) * (size_t)pages_set);
  int32_t *hiptr = malloc(sizeof(int32_t) * (size_t)(reqs + 1)), *hlast = malloc(sizeof(int32_t) * (size_t)reqs);
  for (int64_t b = 0; b < reqs; b++) {
    hiptr[b] = (int32_t)(b * ppr);
    hlast[b] = (int32_t)(seq - (ppr - 1) * ps);
    for (int64_t i = 0; i < newt; i++) {
      hbi[b * newt + i] = (int32_t)b;
      hpos[b * newt + i] = (int32_t)(pre + i);
    }
  }
  hiptr[reqs] = (int32_t)(reqs * ppr);
  CU_CHECK(&cu, cuMemAlloc(&bi, sizeof(int32_t) * (size_t)nnz));
  CU_CHECK(&cu, cuMemAlloc(&pos, sizeof(int32_t) * (size_t)nnz));
  CU_CHECK(&cu, cuMemAlloc(&iptr, sizeof(int32_t) * (size_t)(reqs + 1)));
  CU_CHECK(&cu, cuMemAlloc(&last, sizeof(int32_t) * (size_t)reqs));
  CU_CHECK(&cu, cuMemcpyHtoD(bi, hbi, sizeof(int32_t) * (size_t)nnz));
  CU_CHECK(&cu, cuMemcpyHtoD(pos, hpos, sizeof(int32_t) * (size_t)nnz));
  CU_CHECK(&cu, cuMemcpyHtoD(iptr, hiptr, sizeof(int32_t) * (size_t)(reqs + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(last, hlast, sizeof(int32_t) * (size_t)reqs));
  uint64_t lcg = 12345;
  int64_t sa[3] = {nnz, heads, hd}, sn[1] = {nnz}, sp[1] = {pages_set}, sb1[1] = {reqs + 1},
          sb[1] = {reqs};
  int64_t sc[4] = {pages, layout ? heads : ps, layout ? ps : heads, hd};
  DLTensor tak[SETS], tav[SETS], tidx[SETS];
  for (int s = 0; s < SETS; s++) {
    CU_CHECK(&cu, cuMemAlloc(&ak[s], ibytes));
    CU_CHECK(&cu, cuMemAlloc(&av[s], ibytes));
    CU_CHECK(&cu, cuMemsetD8(ak[s], 0x3c, ibytes));
    CU_CHECK(&cu, cuMemsetD8(av[s], 0x3c, ibytes));
    /* This set's pages, shuffled (a fragmented cache). */
    for (int64_t i = 0; i < pages_set; i++) hidx[i] = (int32_t)(s * pages_set + i);
    for (int64_t i = pages_set - 1; i > 0; i--) {
      lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
      const int64_t j = (int64_t)((lcg >> 33) % (uint64_t)(i + 1));
      const int32_t t = hidx[i];
      hidx[i] = hidx[j];
      hidx[j] = t;
    }
    CU_CHECK(&cu, cuMemAlloc(&idx[s], sizeof(int32_t) * (size_t)pages_set));
    CU_CHECK(&cu, cuMemcpyHtoD(idx[s], hidx, sizeof(int32_t) * (size_t)pages_set));
    tak[s] = tensor(ak[s], dt, 3, sa);
    tav[s] = tensor(av[s], dt, 3, sa);
    tidx[s] = tensor(idx[s], 2, 1, sp);
    tidx[s].dtype.code = kDLInt;
  }
  DLTensor tkc = tensor(kc, dt, 4, sc), tvc = tensor(vc, dt, 4, sc);
  if (cache_fp8) {
    tkc.dtype.code = tvc.dtype.code = 10; /* DLPack >= 1.0 kDLFloat8_e4m3fn */
    tkc.dtype.bits = tvc.dtype.bits = 8;
  }
  DLTensor tbi = tensor(bi, 2, 1, sn), tpos = tensor(pos, 2, 1, sn);
  DLTensor tiptr = tensor(iptr, 2, 1, sb1), tlast = tensor(last, 2, 1, sb);
  tbi.dtype.code = tpos.dtype.code = tiptr.dtype.code = tlast.dtype.code = kDLInt;
  page_ctx pc = {rt, tak, tav, tidx, &tbi, &tpos, &tkc, &tvc, &tiptr, &tlast, layout, SETS};
  const char *cname = cache_fp8 ? "e4m3" : dtname(dt);
  fi_status st = page_call(&pc, 0);
  if (st != FI_OK) {
    fprintf(stderr, "fi_append_paged_kv_cache: %s\n", fi_last_error());
  } else {
    CU_CHECK(&cu, cuCtxSynchronize());
    const double ms = time_runs(page_run, &pc, 20, quick ? 3 : 9);
    const int64_t touched = reqs * ((pre + newt - 1) / ps - pre / ps + 1);
    const double bytes = 2.0 * (double)ibytes + 2.0 * (double)(nnz * heads * hd) * (double)ces +
                         8.0 * (double)nnz + 4.0 * (double)touched;
    const double tbs = bytes / (ms * 1e-3) / 1e12;
    printf("| append_paged_kv | %-4s->%-4s | %s | %lld x %lld new, %lld heads x %lld, page %lld | "
           "%8.1f | %5.2f | %5.1f%% |\n",
           dtname(dt), cname, layout ? "HND" : "NHD", (long long)reqs, (long long)newt,
           (long long)heads, (long long)hd, (long long)ps, ms * 1e3, tbs, 100.0 * tbs / copy);
    if (json)
      fprintf(json,
              "{\"bench\":\"append_paged_kv\",\"dtype\":\"%s\",\"cache\":\"%s\",\"layout\":\"%s\","
              "\"reqs\":%lld,\"new\":%lld,\"heads\":%lld,\"head_dim\":%lld,\"page\":%lld,"
              "\"us\":%.3f,\"tbs\":%.4f,\"of_copy\":%.4f}\n",
              dtname(dt), cname, layout ? "HND" : "NHD", (long long)reqs, (long long)newt,
              (long long)heads, (long long)hd, (long long)ps, ms * 1e3, tbs, tbs / copy);
  }
  /* fi_get_batch_indices_positions for the same batch: a few KB, launch-bound (us only). */
  if (layout == 0 && !cache_fp8) {
    CUdeviceptr aip, sl;
    int32_t *h = malloc(sizeof(int32_t) * (size_t)(reqs + 1));
    CU_CHECK(&cu, cuMemAlloc(&aip, sizeof(int32_t) * (size_t)(reqs + 1)));
    CU_CHECK(&cu, cuMemAlloc(&sl, sizeof(int32_t) * (size_t)reqs));
    for (int64_t b = 0; b <= reqs; b++) h[b] = (int32_t)(b * newt);
    CU_CHECK(&cu, cuMemcpyHtoD(aip, h, sizeof(int32_t) * (size_t)(reqs + 1)));
    for (int64_t b = 0; b < reqs; b++) h[b] = (int32_t)seq;
    CU_CHECK(&cu, cuMemcpyHtoD(sl, h, sizeof(int32_t) * (size_t)reqs));
    DLTensor taip = tensor(aip, 2, 1, sb1), tsl = tensor(sl, 2, 1, sb);
    taip.dtype.code = tsl.dtype.code = kDLInt;
    if (fi_get_batch_indices_positions(rt, &taip, &tsl, &tbi, &tpos, NULL) != FI_OK) {
      fprintf(stderr, "fi_get_batch_indices_positions: %s\n", fi_last_error());
    } else {
      CU_CHECK(&cu, cuCtxSynchronize());
      bip_ctx bc = {rt, &taip, &tsl, &tbi, &tpos};
      const double ms = time_runs(bip_run, &bc, 50, quick ? 3 : 9);
      printf("| batch_indices_positions | i32 | - | %lld x %lld new | %8.1f | - | - |\n",
             (long long)reqs, (long long)newt, ms * 1e3);
      if (json)
        fprintf(json, "{\"bench\":\"batch_indices_positions\",\"reqs\":%lld,\"new\":%lld,\"us\":%.3f}\n",
                (long long)reqs, (long long)newt, ms * 1e3);
    }
    CU_CHECK(&cu, cuMemFree(aip));
    CU_CHECK(&cu, cuMemFree(sl));
    free(h);
  }
  for (int s = 0; s < SETS; s++) {
    CU_CHECK(&cu, cuMemFree(ak[s]));
    CU_CHECK(&cu, cuMemFree(av[s]));
    CU_CHECK(&cu, cuMemFree(idx[s]));
  }
  CU_CHECK(&cu, cuMemFree(kc));
  CU_CHECK(&cu, cuMemFree(vc));
  CU_CHECK(&cu, cuMemFree(bi));
  CU_CHECK(&cu, cuMemFree(pos));
  CU_CHECK(&cu, cuMemFree(iptr));
  CU_CHECK(&cu, cuMemFree(last));
  free(hbi);
  free(hpos);
  free(hidx);
  free(hiptr);
  free(hlast);
}

/* The shape first: 8192 tokens = 64 requests x 128 new, 8 KV heads
 * x 128, page 16, bf16, NHD and HND (after 1000 cached tokens, so the
 * appends start mid-page); then fp8 caches, decode (1 new token) and page 1. */
static void bench_page(fi_runtime *rt, double copy) {
  static const struct {
    int dt, fp8, layout;
    int64_t reqs, newt, pre, heads, hd, ps;
  } cases[] = {
      {1, 0, 0, 64, 128, 1000, 8, 128, 16}, {1, 0, 1, 64, 128, 1000, 8, 128, 16},
      {1, 1, 0, 64, 128, 1000, 8, 128, 16}, {1, 1, 1, 64, 128, 1000, 8, 128, 16},
      {0, 0, 0, 64, 128, 1000, 8, 128, 16}, {1, 0, 0, 256, 1, 1000, 8, 128, 16},
      {1, 0, 1, 64, 128, 1000, 8, 128, 1},
  };
  printf("\n| op | dtype | layout | shape | us | TB/s | of copy |\n|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    bench_page_one(rt, cases[i].dt, cases[i].fp8, cases[i].layout, cases[i].reqs, cases[i].newt,
                   cases[i].pre, cases[i].heads, cases[i].hd, cases[i].ps, copy);
}

/* ---------------------------------------------------------------- rope */
/* mode as bench_rope_one's. */
typedef struct rope_ctx {
  fi_runtime *rt;
  int mode, interleave, d, sets;
  DLTensor *q, *k, *qo, *ko; /* a set each */
  const DLTensor *pos, *cache;
} rope_ctx;
static fi_status rope_call(const rope_ctx *x, int s) {
  return x->mode == 0 ? fi_apply_rope_pos_ids(x->rt, &x->q[s], &x->k[s], &x->qo[s], &x->ko[s], x->pos, x->d,
                                              x->interleave, 1.0, 1e4, NULL)
         : x->mode == 1
             ? fi_apply_llama31_rope_pos_ids(x->rt, &x->q[s], &x->k[s], &x->qo[s], &x->ko[s], x->pos, x->d,
                                             x->interleave, 8.0, 5e5, 1.0, 4.0, 8192.0, NULL)
             : fi_apply_rope_with_cos_sin_cache(x->rt, &x->q[s], &x->k[s], &x->qo[s], &x->ko[s], x->cache, x->pos,
                                                x->interleave, NULL);
}
static void rope_run(void *c, int call) {
  const rope_ctx *x = c;
  rope_call(x, call % x->sets);
}

/* mode: 0 fi_apply_rope_pos_ids, 1 llama31, 2 cos_sin_cache. Bytes: q and k
 * read, q_out and k_out written (in place: the same), pos_ids read, and for
 * the cache one row of it per token. */
static void bench_rope_one(fi_runtime *rt, int mode, int dt, int in_place, int interleave,
                           int64_t nnz, int64_t hq, int64_t hk, int64_t d, double copy) {
  static const char *const names[3] = {"rope_pos_ids", "llama31_rope", "rope_cos_sin_cache"};
  const size_t qb = (size_t)(nnz * hq * d) * 2, kb = (size_t)(nnz * hk * d) * 2;
  const size_t pb = (size_t)nnz * 4, cb = (size_t)nnz * (size_t)d * 4;
  /* Sets rotated so that one round exceeds the 60 MB L2 several times. */
  int sets = (int)((256u << 20) / (2 * (qb + kb))) + 1;
  if (sets > 16) sets = 16;
  CUdeviceptr q[16], k[16], qo[16], ko[16], pos, cache;
  int64_t sq[3] = {nnz, hq, d}, sk[3] = {nnz, hk, d}, sp[1] = {nnz}, sc[2] = {nnz, d};
  DLTensor tq[16], tk[16], tqo[16], tko[16];
  for (int s = 0; s < sets; s++) {
    CU_CHECK(&cu, cuMemAlloc(&q[s], qb));
    CU_CHECK(&cu, cuMemAlloc(&k[s], kb));
    CU_CHECK(&cu, cuMemsetD8(q[s], 0x3c, qb));
    CU_CHECK(&cu, cuMemsetD8(k[s], 0x3c, kb));
    if (in_place) {
      qo[s] = q[s];
      ko[s] = k[s];
    } else {
      CU_CHECK(&cu, cuMemAlloc(&qo[s], qb));
      CU_CHECK(&cu, cuMemAlloc(&ko[s], kb));
    }
    tq[s] = tensor(q[s], dt, 3, sq);
    tk[s] = tensor(k[s], dt, 3, sk);
    tqo[s] = tensor(qo[s], dt, 3, sq);
    tko[s] = tensor(ko[s], dt, 3, sk);
  }
  /* Prefill positions 0..nnz-1, int32; the cache has a row per position. */
  int32_t *hp = malloc(pb);
  for (int64_t i = 0; i < nnz; i++) hp[i] = (int32_t)i;
  CU_CHECK(&cu, cuMemAlloc(&pos, pb));
  CU_CHECK(&cu, cuMemcpyHtoD(pos, hp, pb));
  free(hp);
  CU_CHECK(&cu, cuMemAlloc(&cache, cb));
  CU_CHECK(&cu, cuMemsetD8(cache, 0, cb));
  DLTensor tp = tensor(pos, 2, 1, sp), tc = tensor(cache, 2, 2, sc);
  tp.dtype.code = kDLInt;
  rope_ctx rc = {rt, mode, interleave, (int)d, sets, tq, tk, tqo, tko, &tp, &tc};
  fi_status st = rope_call(&rc, 0);
  if (st != FI_OK) {
    fprintf(stderr, "%s: %s\n", names[mode], fi_last_error());
  } else {
    CU_CHECK(&cu, cuCtxSynchronize());
    double ms = time_runs(rope_run, &rc, 20, quick ? 3 : 9);
    const size_t bytes = 2 * (qb + kb) + pb + (mode == 2 ? cb : 0);
    double tbs = (double)bytes / (ms * 1e-3) / 1e12;
    printf("| %s | %-4s | %s%s | %lld x %lld/%lld x %lld | %8.1f | %5.2f | %5.1f%% |\n",
           names[mode], dtname(dt), in_place ? "in place" : "out of place",
           interleave ? ", interleaved" : "", (long long)nnz, (long long)hq, (long long)hk,
           (long long)d, ms * 1e3, tbs, 100.0 * tbs / copy);
    if (json)
      fprintf(json,
              "{\"bench\":\"%s\",\"dtype\":\"%s\",\"in_place\":%d,\"interleave\":%d,\"nnz\":%lld,"
              "\"heads_q\":%lld,\"heads_k\":%lld,\"head_dim\":%lld,\"us\":%.3f,\"tbs\":%.4f,"
              "\"of_copy\":%.4f}\n",
              names[mode], dtname(dt), in_place, interleave, (long long)nnz, (long long)hq,
              (long long)hk, (long long)d, ms * 1e3, tbs, tbs / copy);
  }
  for (int s = 0; s < sets; s++) {
    CU_CHECK(&cu, cuMemFree(q[s]));
    CU_CHECK(&cu, cuMemFree(k[s]));
    if (!in_place) {
      CU_CHECK(&cu, cuMemFree(qo[s]));
      CU_CHECK(&cu, cuMemFree(ko[s]));
    }
  }
  CU_CHECK(&cu, cuMemFree(pos));
  CU_CHECK(&cu, cuMemFree(cache));
}

/* The case first (16384 tokens, 32 q / 8 kv heads x 128, bf16, out
 * of place), then in place, Llama 3.1, the cos_sin_cache, interleaved,
 * fp16, head_dim 256, and a decode-sized batch. */
static void bench_rope(fi_runtime *rt, double copy) {
  static const struct {
    int mode, dt, in_place, interleave;
    int64_t nnz, hq, hk, d;
  } cases[] = {
      {0, 1, 0, 0, 16384, 32, 8, 128}, {0, 1, 1, 0, 16384, 32, 8, 128},
      {1, 1, 0, 0, 16384, 32, 8, 128}, {1, 1, 1, 0, 16384, 32, 8, 128},
      {2, 1, 0, 0, 16384, 32, 8, 128}, {2, 1, 1, 0, 16384, 32, 8, 128},
      {0, 1, 0, 1, 16384, 32, 8, 128}, {0, 0, 0, 0, 16384, 32, 8, 128},
      {0, 1, 0, 0, 8192, 16, 4, 256},  {0, 1, 0, 0, 128, 32, 8, 128},
  };
  printf("\n| op | dtype | mode | tokens x heads q/k x head_dim | us | TB/s | of copy |\n"
         "|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    bench_rope_one(rt, cases[i].mode, cases[i].dt, cases[i].in_place, cases[i].interleave,
                   cases[i].nnz, cases[i].hq, cases[i].hk, cases[i].d, copy);
}

const bench_section bench_act_section = {"act", "fi_silu_and_mul, fi_gelu_and_mul, fi_gelu_tanh_and_mul bandwidth, input [tokens, 2d]\n"
    "read + out [tokens, d] written, as a fraction of copy", 1, bench_act};

const bench_section bench_cascade_section = {"cascade", "fi_merge_state, fi_merge_state_in_place, fi_merge_states bandwidth (v and LSEs\n"
    "read once, outputs written once) at 16384 x 32 x 128 and around it", 1, bench_cascade};

const bench_section bench_page_section = {"page", "fi_append_paged_kv_cache bandwidth (append_k/v read, the same written into the\n"
    "caches, indices read) at 64 requests x 128 new tokens, 8 x 128, page 16, NHD and HND", 1, bench_page};

const bench_section bench_rope_section = {"rope", "fi_apply_rope_pos_ids, the Llama 3.1 and cos_sin_cache variants bandwidth (q, k\n"
    "read, q_out, k_out written, pos_ids read) at 16384 x 32/8 heads x 128, bf16", 1, bench_rope};
