/* bench_mla.c: fi-bench section mla: multi-head latent attention (DeepSeek's absorbed
 * form: a 576-wide shared key, ckv [512] + kpe [64], the value its first 512 columns) over
 * a paged cache (page 64, pages in random order, bf16), against the read probe (memory-
 * bound: 16 heads, the cache read once) and the tensor-core probes (compute-bound: 128
 * heads), all measured in the same run. Bytes: the cache rows read (L x 1152 a request);
 * FLOPs: 2 x rows x L x (576 + 512) (causal MTP: the attended keys only). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct mcfg {
  const char *label;
  int B, L, H, qlen;
} mcfg;

/* The cache pool holds at least this many bytes, the inputs rotate over index sets of
 * disjoint pages: small cases do not sit in L2. */
#define MLA_POOL_MIN ((int64_t)512 << 20)
#define MLA_SETS_MAX 16

typedef struct mctx {
  fi_runtime *rt;
  fi_mla_plan *plan;
  DLTensor qn, qp, ckv, kpe, out;
  DLTensor ix[MLA_SETS_MAX];
  int sets;
} mctx;
static void mla_run(void *ctx, int call) {
  mctx *c = ctx;
  fi_batch_mla_paged_run(c->rt, c->plan, &c->qn, &c->qp, &c->ckv, &c->kpe, &c->ix[call % c->sets], &c->out, NULL,
                         NULL);
}

static uint64_t mrng = 0x2545F4914F6CDD1Dull;
static uint64_t mrand(void) {
  mrng ^= mrng << 13;
  mrng ^= mrng >> 7;
  mrng ^= mrng << 17;
  return mrng;
}

static void bench_case(fi_runtime *rt, const mcfg *c, double read_tbs, double mma_tf, double wg_tf) {
  const int ps = 64, B = c->B, L = c->L, H = c->H, nq = c->qlen;
  const int64_t ppr = (L + ps - 1) / ps, per_set = (int64_t)B * ppr;
  const int64_t set_bytes = per_set * ps * 1152;
  int sets = (int)((MLA_POOL_MIN + set_bytes - 1) / set_bytes);
  if (sets < 1) sets = 1;
  if (sets > MLA_SETS_MAX) sets = MLA_SETS_MAX;
  const int64_t pages = per_set * sets, N = (int64_t)B * nq;
  CUdeviceptr ckv, kpe, qn, qp, out, ix, ws;
  CU_CHECK(&cu, cuMemAlloc(&ckv, (size_t)(pages * ps * 512 * 2)));
  CU_CHECK(&cu, cuMemAlloc(&kpe, (size_t)(pages * ps * 64 * 2)));
  CU_CHECK(&cu, cuMemAlloc(&qn, (size_t)(N * H * 512 * 2)));
  CU_CHECK(&cu, cuMemAlloc(&qp, (size_t)(N * H * 64 * 2)));
  CU_CHECK(&cu, cuMemAlloc(&out, (size_t)(N * H * 512 * 2)));
  CU_CHECK(&cu, cuMemAlloc(&ix, (size_t)(pages * 4)));
  fill_random(ckv, (size_t)(pages * ps * 512 * 2));
  fill_random(kpe, (size_t)(pages * ps * 64 * 2));
  fill_random(qn, (size_t)(N * H * 512 * 2));
  fill_random(qp, (size_t)(N * H * 64 * 2));
  int32_t *perm = malloc((size_t)pages * 4), *qo = malloc((size_t)(B + 1) * 4), *kvp = malloc((size_t)(B + 1) * 4),
          *kvl = malloc((size_t)B * 4);
  if (!perm || !qo || !kvp || !kvl) exit(1);
  for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
  for (int64_t i = pages - 1; i > 0; i--) {
    const int64_t j = (int64_t)(mrand() % (uint64_t)(i + 1));
    const int32_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  CU_CHECK(&cu, cuMemcpyHtoD(ix, perm, (size_t)(pages * 4)));
  for (int b = 0; b <= B; b++) qo[b] = b * nq, kvp[b] = (int32_t)(b * ppr);
  for (int b = 0; b < B; b++) kvl[b] = L;
  fi_batch_mla_info in;
  memset(&in, 0, sizeof in);
  in.batch = B;
  in.qo_indptr = qo;
  in.kv_indptr = kvp;
  in.kv_len = kvl;
  in.num_heads = H;
  in.head_dim_ckv = 512;
  in.head_dim_kpe = 64;
  in.page_size = ps;
  in.causal = 1;
  in.sm_scale = 0.0722f;
  in.q_dtype = in.kv_dtype = (DLDataType){kDLBfloat, 16, 1};
  size_t wsb = 0;
  DLDevice dev = {kDLCUDA, 0};
  if (fi_batch_mla_workspace_size(rt, dev, B, (int)N, H, &wsb) != FI_OK) {
    printf("| %s | %d | %d | %d | %d | failed: %s |\n", c->label, B, L, H, nq, fi_last_error());
    return;
  }
  CU_CHECK(&cu, cuMemAlloc(&ws, wsb));
  int64_t s3[3][3] = {{N, H, 512}, {N, H, 64}, {N, H, 512}}, sc[2][3] = {{pages, ps, 512}, {pages, ps, 64}},
          si[MLA_SETS_MAX][1];
  int64_t sw[1] = {(int64_t)wsb};
  mctx m;
  memset(&m, 0, sizeof m);
  m.rt = rt;
  m.sets = sets;
  m.qn = tensor(qn, 1, 3, s3[0]);
  m.qp = tensor(qp, 1, 3, s3[1]);
  m.out = tensor(out, 1, 3, s3[2]);
  m.ckv = tensor(ckv, 1, 3, sc[0]);
  m.kpe = tensor(kpe, 1, 3, sc[1]);
  for (int s = 0; s < sets; s++) {
    si[s][0] = per_set;
    m.ix[s] = tensor(ix + (CUdeviceptr)(s * per_set * 4), 1, 1, si[s]);
    m.ix[s].dtype = (DLDataType){kDLInt, 32, 1};
  }
  DLTensor tw = tensor(ws, 1, 1, sw);
  tw.dtype = (DLDataType){kDLUInt, 8, 1};
  if (fi_batch_mla_paged_plan(rt, &in, &tw, NULL, &m.plan) != FI_OK) {
    printf("| %s | %d | %d | %d | %d | plan failed: %s |\n", c->label, B, L, H, nq, fi_last_error());
  } else {
    mla_run(&m, 0);
    if (cu.cuCtxSynchronize() != 0 || fi_batch_mla_paged_run(rt, m.plan, &m.qn, &m.qp, &m.ckv, &m.kpe, &m.ix[0], &m.out,
                                                               NULL, NULL) != FI_OK) {
      printf("| %s | %d | %d | %d | %d | run failed: %s |\n", c->label, B, L, H, nq, fi_last_error());
    } else {
      const double bytes = (double)B * L * 1152.0;
      /* attended keys: causal MTP query token t sees L - nq + 1 + t */
      const double keys = (double)B * H * ((double)nq * L - (double)nq * (nq - 1) / 2);
      const double flops = 2.0 * keys * (576 + 512);
      const double ms = time_runs(mla_run, &m, runs_for_bytes(bytes), quick ? 3 : 9);
      const double tbs = bytes / (ms * 1e-3) / 1e12, tf = flops / (ms * 1e-3) / 1e12;
      printf("| %s | %d | %d | %d | %d | %.1f | %.2f | %.0f%% | %.0f | %.0f%% | %.0f%% |\n", c->label, B, L, H, nq, ms * 1e3,
             tbs, read_tbs > 0 ? 100 * tbs / read_tbs : 0, tf, mma_tf > 0 ? 100 * tf / mma_tf : 0,
             wg_tf > 0 ? 100 * tf / wg_tf : 0);
      if (json)
        fprintf(json,
                "{\"bench\":\"mla\",\"B\":%d,\"L\":%d,\"heads\":%d,\"qlen\":%d,\"us\":%.3f,\"tbs\":%.4f,\"of_read\":%.4f,"
                "\"tflops\":%.2f,\"of_mma\":%.4f,\"of_wgmma\":%.4f}\n",
                B, L, H, nq, ms * 1e3, tbs, read_tbs > 0 ? tbs / read_tbs : 0, tf, mma_tf > 0 ? tf / mma_tf : 0,
                wg_tf > 0 ? tf / wg_tf : 0);
    }
    fi_batch_mla_plan_destroy(m.plan);
  }
  CUdeviceptr fr[7] = {ckv, kpe, qn, qp, out, ix, ws};
  for (int i = 0; i < 7; i++) CU_CHECK(&cu, cuMemFree(fr[i]));
  free(perm), free(qo), free(kvp), free(kvl);
}

typedef struct actx {
  fi_runtime *rt;
  DLTensor ack, akp, bi, pos, ckv, kpe, ix, kvp, last;
} actx;
static void append_run(void *ctx, int call) {
  (void)call;
  actx *a = ctx;
  fi_append_paged_mla_kv_cache(a->rt, &a->ack, &a->akp, &a->bi, &a->pos, &a->ckv, &a->kpe, &a->ix, &a->kvp, &a->last,
                               NULL);
}

/* The append of nnz tokens (one request's chunk, page 64, pages in random order): bytes
 * read + written against the copy bandwidth measured at start (read + written too). */
static void bench_append(fi_runtime *rt, int nnz, double copy) {
  const int ps = 64, np = (nnz + ps - 1) / ps;
  CUdeviceptr ack, akp, bi, pos, ckv, kpe, ix, kvp, last;
  CU_CHECK(&cu, cuMemAlloc(&ack, (size_t)nnz * 1024));
  CU_CHECK(&cu, cuMemAlloc(&akp, (size_t)nnz * 128));
  CU_CHECK(&cu, cuMemAlloc(&bi, (size_t)nnz * 4));
  CU_CHECK(&cu, cuMemAlloc(&pos, (size_t)nnz * 4));
  CU_CHECK(&cu, cuMemAlloc(&ckv, (size_t)np * ps * 1024));
  CU_CHECK(&cu, cuMemAlloc(&kpe, (size_t)np * ps * 128));
  CU_CHECK(&cu, cuMemAlloc(&ix, (size_t)np * 4));
  CU_CHECK(&cu, cuMemAlloc(&kvp, 8));
  CU_CHECK(&cu, cuMemAlloc(&last, 4));
  fill_random(ack, (size_t)nnz * 1024);
  fill_random(akp, (size_t)nnz * 128);
  int32_t *h = malloc((size_t)(nnz > np ? nnz : np) * 4);
  if (!h) exit(1);
  for (int i = 0; i < nnz; i++) h[i] = 0;
  CU_CHECK(&cu, cuMemcpyHtoD(bi, h, (size_t)nnz * 4));
  for (int i = 0; i < nnz; i++) h[i] = i;
  CU_CHECK(&cu, cuMemcpyHtoD(pos, h, (size_t)nnz * 4));
  for (int i = 0; i < np; i++) h[i] = i;
  for (int i = np - 1; i > 0; i--) {
    const int j = (int)(mrand() % (uint64_t)(i + 1)), t = h[i];
    h[i] = h[j], h[j] = t;
  }
  CU_CHECK(&cu, cuMemcpyHtoD(ix, h, (size_t)np * 4));
  const int32_t kh[3] = {0, np, nnz - (np - 1) * ps};
  CU_CHECK(&cu, cuMemcpyHtoD(kvp, kh, 8));
  CU_CHECK(&cu, cuMemcpyHtoD(last, kh + 2, 4));
  free(h);
  int64_t sa[2] = {nnz, 512}, sp[2] = {nnz, 64}, sn[1] = {nnz}, sc[3] = {np, ps, 512}, sk[3] = {np, ps, 64},
          si[1] = {np}, s2[1] = {2}, s1[1] = {1};
  actx a;
  a.rt = rt;
  a.ack = tensor(ack, 1, 2, sa);
  a.akp = tensor(akp, 1, 2, sp);
  a.ckv = tensor(ckv, 1, 3, sc);
  a.kpe = tensor(kpe, 1, 3, sk);
  DLTensor *ints[5] = {&a.bi, &a.pos, &a.ix, &a.kvp, &a.last};
  CUdeviceptr ip[5] = {bi, pos, ix, kvp, last};
  int64_t *is[5] = {sn, sn, si, s2, s1};
  for (int i = 0; i < 5; i++) {
    *ints[i] = tensor(ip[i], 1, 1, is[i]);
    ints[i]->dtype = (DLDataType){kDLInt, 32, 1};
  }
  if (fi_append_paged_mla_kv_cache(rt, &a.ack, &a.akp, &a.bi, &a.pos, &a.ckv, &a.kpe, &a.ix, &a.kvp, &a.last, NULL) !=
          FI_OK ||
      cu.cuCtxSynchronize() != 0) {
    printf("append %d tokens: failed: %s\n", nnz, fi_last_error());
  } else {
    const double bytes = 2.0 * nnz * 1152;
    const double ms = time_runs(append_run, &a, runs_for_bytes(bytes), quick ? 3 : 9);
    const double tbs = bytes / (ms * 1e-3) / 1e12;
    printf("append_paged_mla_kv_cache, %d tokens (page 64, bf16): %.2f us, %.2f TB/s read + written, %.0f%% of copy\n",
           nnz, ms * 1e3, tbs, copy > 0 ? 100 * tbs / copy : 0);
    if (json)
      fprintf(json, "{\"bench\":\"mla_append\",\"tokens\":%d,\"us\":%.3f,\"tbs\":%.4f,\"of_copy\":%.4f}\n", nnz,
              ms * 1e3, tbs, copy > 0 ? tbs / copy : 0);
  }
  CUdeviceptr fr[9] = {ack, akp, bi, pos, ckv, kpe, ix, kvp, last};
  for (int i = 0; i < 9; i++) CU_CHECK(&cu, cuMemFree(fr[i]));
}

static void bench_mla(fi_runtime *rt, double copy) {
  const double rd = bench_read(rt);
  const double tf = bench_probe(rt, fi_admin_mma_probe, 1 << 14, "mma.sync bf16 m16n8k16 (registers only)", "mma_probe");
  const double wg = bench_probe(rt, fi_admin_wgmma_probe, 1 << 13, "wgmma bf16 m64n128k16 (shared-memory operands)", "wgmma_probe");
  static const mcfg cases[] = {
      {"memory-bound", 1, 4096, 16, 1},    {"memory-bound", 16, 4096, 16, 1},  {"memory-bound", 64, 4096, 16, 1},
      {"memory-bound", 1, 32768, 16, 1},   {"memory-bound", 16, 32768, 16, 1}, {"memory-bound", 64, 32768, 16, 1},
      {"compute-bound", 64, 4096, 128, 1}, {"compute-bound", 128, 4096, 128, 1}, {"MTP 2", 64, 4096, 128, 2},
      {"MTP 2, 16 heads", 64, 4096, 16, 2},
  };
  printf("\nread probe %.2f TB/s\n\n| case | B | L | heads | q tokens | us | TB/s (cache) | of read probe | TFLOP/s | of mma.sync | of wgmma |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|\n",
         rd);
  fflush(stdout);
  /* FI_BENCH_MLA_CASES="2,6": only those rows (0-based; a profiler run or a short call) */
  const char *only = getenv("FI_BENCH_MLA_CASES");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (only && *only) {
      char buf[128], *save = NULL;
      int hit = 0;
      snprintf(buf, sizeof buf, "%s", only);
      for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) hit |= atoi(t) == (int)i;
      if (!hit) continue;
    }
    bench_case(rt, &cases[i], rd, tf, wg);
    fflush(stdout);
    if (json) fflush(json);
  }
  printf("\ncopy %.2f TB/s (read + written)\n", copy);
  bench_append(rt, 65536, copy);
  bench_append(rt, 4096, copy);
}

const bench_section bench_mla_section = {
    "mla",
    "multi-head latent attention (DeepSeek, absorbed: ckv 512 + kpe 64, page 64, bf16):\n"
    "16 heads, B 1/16/64, L 4096 and 32768 against the read probe (cache bytes); 128\n"
    "heads B 64 and 128 and MTP (2 query tokens) against the mma.sync and wgmma probes;\n"
    "the cache append (65536 and 4096 tokens) against copy",
    1,
    bench_mla,
};
