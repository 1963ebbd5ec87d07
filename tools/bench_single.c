/* bench_single.c: fi-bench's single decode section: one request over contiguous K and V
 * (NHD, head_dim 128), split over the SMs (the default) and unsplit, against the read bandwidth. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct scfg {
  int L, hq, hkv, fp8;
} scfg;

/* Long and short (where the split starts to pay), GQA and MHA, an fp8 cache. */
static const scfg cases[] = {{8192, 32, 8, 0},  {32768, 32, 8, 0}, {2048, 32, 8, 0},
                             {512, 32, 8, 0},   {8192, 32, 32, 0}, {8192, 32, 8, 1}};

typedef struct sctx {
  fi_runtime *rt;
  const DLTensor *q, *k, *v; /* k[i], v[i]: set i */
  DLTensor *out;
  int sets;
} sctx;

/* Successive runs take successive copies of K and V, so the L2 holds nothing a run reads. */
static void single_run(void *c, int call) {
  const sctx *x = c;
  fi_single_decode(x->rt, x->q, &x->k[call % x->sets], &x->v[call % x->sets], x->out, NULL, FI_KV_LAYOUT_NHD, NULL,
                   NULL);
}

/* us a call with the environment as it is; 0 on an error (printed). */
static double time_case(sctx *x, double bytes) {
  if (fi_single_decode(x->rt, x->q, &x->k[0], &x->v[0], x->out, NULL, FI_KV_LAYOUT_NHD, NULL, NULL) != FI_OK) {
    fprintf(stderr, "single decode: %s\n", fi_last_error());
    return 0;
  }
  CU_CHECK(&cu, cuCtxSynchronize());
  return time_runs(single_run, x, runs_for_bytes(bytes), quick ? 3 : 9) * 1e3;
}

static void bench_single(fi_runtime *rt, double copy) {
  (void)copy;
  const double rd = bench_read(rt);
  printf("\n| L | heads | kv | split us | TB/s | of read | unsplit us | TB/s | speedup |\n"
         "|---|---|---|---|---|---|---|---|---|\n");
  enum { D = 128, MAX_SETS = 16 };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const scfg *c = &cases[i];
    const int es = c->fp8 ? 1 : 2;
    const int64_t one = (int64_t)c->L * c->hkv * D * es; /* K (or V) of one set */
    int sets = (int)(((int64_t)256 << 20) / (2 * one)) + 1;
    sets = sets < 2 ? 2 : sets > MAX_SETS ? MAX_SETS : sets;
    CUdeviceptr kb, vb, q, out;
    CU_CHECK(&cu, cuMemAlloc(&kb, (size_t)(one * sets)));
    CU_CHECK(&cu, cuMemAlloc(&vb, (size_t)(one * sets)));
    CU_CHECK(&cu, cuMemsetD8(kb, 0x3c, (size_t)(one * sets)));
    CU_CHECK(&cu, cuMemsetD8(vb, 0x3c, (size_t)(one * sets)));
    const size_t qbytes = (size_t)c->hq * D * 2;
    CU_CHECK(&cu, cuMemAlloc(&q, qbytes));
    CU_CHECK(&cu, cuMemAlloc(&out, qbytes));
    CU_CHECK(&cu, cuMemsetD8(q, 0x3c, qbytes));
    int64_t qs[2] = {c->hq, D}, ks[3] = {c->L, c->hkv, D};
    DLTensor tq = tensor(q, 1, 2, qs), to = tensor(out, 1, 2, qs), tk[MAX_SETS], tv[MAX_SETS];
    for (int s = 0; s < sets; s++) {
      tk[s] = tensor(kb + (CUdeviceptr)(s * one), 1, 3, ks);
      tv[s] = tensor(vb + (CUdeviceptr)(s * one), 1, 3, ks);
      if (c->fp8) {
        tk[s].dtype.code = tv[s].dtype.code = 10; /* kDLFloat8_e4m3fn */
        tk[s].dtype.bits = tv[s].dtype.bits = 8;
      }
    }
    sctx x = {rt, &tq, tk, tv, &to, sets};
    const double bytes = 2.0 * (double)one + 2.0 * (double)qbytes;
    const char *was = getenv("FI_DECODE_SINGLE_SPLIT");
    char saved[16] = "";
    if (was) snprintf(saved, sizeof saved, "%s", was);
    /* FI_DECODE_SINGLE_SPLIT is read at fi_runtime_create: a runtime for each setting */
    unsetenv("FI_DECODE_SINGLE_SPLIT");
    x.rt = bench_env_runtime();
    const double us = time_case(&x, bytes);
    CU_CHECK(&cu, cuCtxSynchronize());
    fi_runtime_destroy(x.rt);
    setenv("FI_DECODE_SINGLE_SPLIT", "0", 1);
    x.rt = bench_env_runtime();
    const double un = time_case(&x, bytes);
    CU_CHECK(&cu, cuCtxSynchronize());
    fi_runtime_destroy(x.rt);
    x.rt = rt;
    if (was)
      setenv("FI_DECODE_SINGLE_SPLIT", saved, 1);
    else
      unsetenv("FI_DECODE_SINGLE_SPLIT");
    const double tbs = us > 0 ? bytes / (us * 1e-6) / 1e12 : 0, utbs = un > 0 ? bytes / (un * 1e-6) / 1e12 : 0;
    char heads[32];
    snprintf(heads, sizeof heads, "%d/%d", c->hq, c->hkv);
    printf("| %6d | %6s | %-4s | %8.1f | %5.2f | %5.1f%% | %8.1f | %5.2f | %5.2fx |\n", c->L, heads,
           c->fp8 ? "e4m3" : "bf16", us, tbs, rd > 0 ? 100.0 * tbs / rd : 0.0, un, utbs, us > 0 ? un / us : 0.0);
    if (json)
      fprintf(json,
              "{\"bench\":\"single_decode\",\"kv_len\":%d,\"qo_heads\":%d,\"kv_heads\":%d,\"kv\":\"%s\","
              "\"us\":%.3f,\"tbs\":%.4f,\"of_read\":%.4f,\"unsplit_us\":%.3f,\"unsplit_tbs\":%.4f}\n",
              c->L, c->hq, c->hkv, c->fp8 ? "e4m3" : "bf16", us, tbs, rd > 0 ? tbs / rd : 0.0, un, utbs);
    CUdeviceptr fr[4] = {kb, vb, q, out};
    for (int k = 0; k < 4; k++) CU_CHECK(&cu, cuMemFree(fr[k]));
  }
}

const bench_section bench_single_section = {
    "single",
    "single decode (fi_single_decode) of one request over contiguous K and V (NHD, bf16 q,\n"
    "D=128, bf16 or e4m3 cache), split over the SMs as by default and unsplit\n"
    "(FI_DECODE_SINGLE_SPLIT=0), against the read bandwidth; copies of K and V in turn so\n"
    "that the L2 holds nothing a run reads",
    1,
    bench_single,
};
