/* bench_norm.c: fi-bench sections rmsnorm, norms and tune: the norm kernels'
 * bandwidth against the copy bandwidth, and rmsnorm's configuration sweep. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "fi_params.h"

/* key NULL: the configuration fi_rmsnorm picks; else that configuration. */
static fi_status run_rms(fi_runtime *rt, const char *key, DLTensor *in, DLTensor *w, DLTensor *out) {
  return key ? fi_admin_rmsnorm_with_key(rt, in, w, 1e-6, out, NULL, key)
             : fi_rmsnorm(rt, in, w, 1e-6, out, NULL);
}

/* Timed calls take the input/output pairs in turn, across repetitions too. */
typedef struct rms_ctx {
  fi_runtime *rt;
  const char *key;
  DLTensor *in, *out, *w;
  int sets;
} rms_ctx;
static void rms_run(void *c, int call) {
  rms_ctx *x = c;
  const int s = call % x->sets;
  run_rms(x->rt, x->key, &x->in[s], x->w, &x->out[s]);
}

static double bench_rmsnorm_one(fi_runtime *rt, int dt, int64_t rows, int64_t hidden, double copy,
                                const char *key) {
  const size_t es = dt == 2 ? 4 : 2, tbytes = (size_t)(rows * hidden) * es;
  /* Enough input/output pairs that one round over them exceeds the 60 MB L2
   * several times: otherwise the cache, not the memory, is measured. */
  int sets = (int)((256u << 20) / (2 * tbytes)) + 1;
  if (sets > 16) sets = 16;
  CUdeviceptr in[16], out[16], w;
  for (int s = 0; s < sets; s++) {
    CU_CHECK(&cu, cuMemAlloc(&in[s], tbytes));
    CU_CHECK(&cu, cuMemAlloc(&out[s], tbytes));
    CU_CHECK(&cu, cuMemsetD8(in[s], 0x3c, tbytes)); /* 1.0-ish in f16/bf16; finite in f32 */
  }
  CU_CHECK(&cu, cuMemAlloc(&w, (size_t)hidden * es));
  CU_CHECK(&cu, cuMemsetD8(w, 0x3c, (size_t)hidden * es));
  int64_t shape[2] = {rows, hidden}, wshape[1] = {hidden};
  DLTensor tw = tensor(w, dt, 1, wshape);
  DLTensor ti[16], to[16];
  for (int s = 0; s < sets; s++) {
    ti[s] = tensor(in[s], dt, 2, shape);
    to[s] = tensor(out[s], dt, 2, shape);
  }
  fi_status st = run_rms(rt, key, &ti[0], &tw, &to[0]);
  if (st != FI_OK) {
    fprintf(stderr, "fi_rmsnorm %s: %s\n", key ? key : "", fi_last_error());
    for (int s = 0; s < sets; s++) {
      CU_CHECK(&cu, cuMemFree(in[s]));
      CU_CHECK(&cu, cuMemFree(out[s]));
    }
    CU_CHECK(&cu, cuMemFree(w));
    return 0;
  }
  CU_CHECK(&cu, cuCtxSynchronize());
  rms_ctx rc = {rt, key, ti, to, &tw, sets};
  const double ms = time_runs(rms_run, &rc, 20, quick ? 3 : 9);
  double bytes = 2.0 * (double)tbytes + (double)hidden * (double)es;
  double tbs = bytes / (ms * 1e-3) / 1e12;
  printf("| rmsnorm | %-4s | %6lld x %-6lld | %8.1f | %5.2f | %5.1f%% |%s%s\n", dtname(dt),
         (long long)rows, (long long)hidden, ms * 1e3, tbs, 100.0 * tbs / copy, key ? " " : "",
         key ? key + strlen("op=rmsnorm;") : "");
  if (json)
    fprintf(json,
            "{\"bench\":\"rmsnorm\",\"dtype\":\"%s\",\"rows\":%lld,\"hidden\":%lld,\"us\":%.3f,"
            "\"tbs\":%.4f,\"of_copy\":%.4f,\"key\":\"%s\"}\n",
            dtname(dt), (long long)rows, (long long)hidden, ms * 1e3, tbs, tbs / copy,
            key ? key : "");
  for (int s = 0; s < sets; s++) {
    CU_CHECK(&cu, cuMemFree(in[s]));
    CU_CHECK(&cu, cuMemFree(out[s]));
  }
  CU_CHECK(&cu, cuMemFree(w));
  return tbs;
}

static void bench_rmsnorm(fi_runtime *rt, double copy) {
  static const struct {
    int dt;
    int64_t rows, hidden;
  } cases[] = {
      {1, 8192, 8192}, {0, 8192, 8192}, {2, 8192, 8192}, {1, 4096, 4096},  {1, 16384, 4096},
      {1, 1024, 8192}, {1, 8192, 5120}, {1, 8192, 7168}, {1, 4096, 16384}, {1, 8192, 8191},
      {1, 32768, 2048}, {1, 128, 8192},
  };
  printf("\n| op | dtype | tokens x hidden | us | TB/s | of copy |\n|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    bench_rmsnorm_one(rt, cases[i].dt, cases[i].rows, cases[i].hidden, copy, NULL);
}

/* --------------------------------------------------------------- norms */
/* fi_fused_add_rmsnorm, fi_gemma_rmsnorm, fi_gemma_fused_add_rmsnorm and
 * fi_layernorm. Bytes: the fused adds read input + residual + weight and
 * write input + residual; gemma_rmsnorm reads input + weight, writes out;
 * layernorm reads input + gamma + beta, writes out. */
enum { NB_FUSED, NB_GEMMA_FUSED, NB_GEMMA, NB_LAYERNORM };

typedef struct nb_set {
  CUdeviceptr a, b; /* input and residual (fused) or out */
  DLTensor ta, tb;
} nb_set;

static fi_status nb_call(fi_runtime *rt, int op, nb_set *s, DLTensor *w, DLTensor *beta) {
  switch (op) {
    case NB_FUSED: return fi_fused_add_rmsnorm(rt, &s->ta, &s->tb, w, 1e-6, NULL);
    case NB_GEMMA_FUSED: return fi_gemma_fused_add_rmsnorm(rt, &s->ta, &s->tb, w, 1e-6, NULL);
    case NB_GEMMA: return fi_gemma_rmsnorm(rt, &s->ta, w, 1e-6, &s->tb, NULL);
    default: return fi_layernorm(rt, &s->ta, w, beta, 1e-5, &s->tb, NULL);
  }
}

typedef struct nb_ctx {
  fi_runtime *rt;
  int op, sets;
  nb_set *set;
  DLTensor *w, *beta;
} nb_ctx;
static void nb_run(void *c, int call) {
  nb_ctx *x = c;
  nb_call(x->rt, x->op, &x->set[call % x->sets], x->w, x->beta);
}

/* wdt: layernorm's gamma/beta dtype (else the input's). */
static void bench_norm_one(fi_runtime *rt, int op, int dt, int wdt, int64_t rows, int64_t hidden,
                           double copy) {
  static const char *const names[4] = {"fused_add_rmsnorm", "gemma_fused_add_rmsnorm",
                                       "gemma_rmsnorm", "layernorm"};
  const size_t es = dt == 2 ? 4 : 2, wes = wdt == 2 ? 4 : 2, tbytes = (size_t)(rows * hidden) * es;
  const double wbytes = (double)hidden * (double)wes * (op == NB_LAYERNORM ? 2 : 1);
  const double bytes = (op == NB_FUSED || op == NB_GEMMA_FUSED ? 4.0 : 2.0) * (double)tbytes + wbytes;
  /* Sets rotated so that one round exceeds the 60 MB L2 several times. */
  int sets = (int)((256u << 20) / (2 * tbytes)) + 1;
  if (sets > 16) sets = 16;
  int64_t shape[2] = {rows, hidden}, wshape[1] = {hidden};
  nb_set set[16];
  for (int s = 0; s < sets; s++) {
    CU_CHECK(&cu, cuMemAlloc(&set[s].a, tbytes));
    CU_CHECK(&cu, cuMemAlloc(&set[s].b, tbytes));
    CU_CHECK(&cu, cuMemsetD8(set[s].a, 0x3c, tbytes)); /* 1.0-ish in f16, 0.01 in bf16/f32 */
    CU_CHECK(&cu, cuMemsetD8(set[s].b, 0x3c, tbytes));
    set[s].ta = tensor(set[s].a, dt, 2, shape);
    set[s].tb = tensor(set[s].b, dt, 2, shape);
  }
  CUdeviceptr w, b;
  CU_CHECK(&cu, cuMemAlloc(&w, (size_t)hidden * wes));
  CU_CHECK(&cu, cuMemAlloc(&b, (size_t)hidden * wes));
  CU_CHECK(&cu, cuMemsetD8(w, 0x3c, (size_t)hidden * wes));
  CU_CHECK(&cu, cuMemsetD8(b, 0x3c, (size_t)hidden * wes));
  DLTensor tw = tensor(w, wdt, 1, wshape), tbeta = tensor(b, wdt, 1, wshape);
  char dts[16];
  snprintf(dts, sizeof dts, op == NB_LAYERNORM && wdt != dt ? "%s/%s" : "%s", dtname(dt),
           dtname(wdt));
  fi_status st = nb_call(rt, op, &set[0], &tw, &tbeta);
  if (st != FI_OK) {
    fprintf(stderr, "fi_%s: %s\n", names[op], fi_last_error());
  } else {
    CU_CHECK(&cu, cuCtxSynchronize());
    nb_ctx nc = {rt, op, sets, set, &tw, &tbeta};
    const double ms = time_runs(nb_run, &nc, 20, quick ? 3 : 9);
    double tbs = bytes / (ms * 1e-3) / 1e12;
    printf("| %s | %-8s | %6lld x %-6lld | %8.1f | %5.2f | %5.1f%% |\n", names[op], dts,
           (long long)rows, (long long)hidden, ms * 1e3, tbs, 100.0 * tbs / copy);
    if (json)
      fprintf(json,
              "{\"bench\":\"%s\",\"dtype\":\"%s\",\"wdtype\":\"%s\",\"rows\":%lld,\"hidden\":%lld,"
              "\"us\":%.3f,\"tbs\":%.4f,\"of_copy\":%.4f}\n",
              names[op], dtname(dt), dtname(wdt), (long long)rows, (long long)hidden, ms * 1e3,
              tbs, tbs / copy);
  }
  for (int s = 0; s < sets; s++) {
    CU_CHECK(&cu, cuMemFree(set[s].a));
    CU_CHECK(&cu, cuMemFree(set[s].b));
  }
  CU_CHECK(&cu, cuMemFree(w));
  CU_CHECK(&cu, cuMemFree(b));
}

/* 8192 x 8192 bf16 first for each op (the targets), then the other
 * dtypes and model sizes; 8191 forces 2-byte accesses (two passes). */
static void bench_norms(fi_runtime *rt, double copy) {
  static const struct {
    int op, dt, wdt;
    int64_t rows, hidden;
  } cases[] = {
      {NB_FUSED, 1, 1, 8192, 8192},       {NB_FUSED, 0, 0, 8192, 8192},
      {NB_FUSED, 2, 2, 8192, 8192},       {NB_FUSED, 1, 1, 16384, 4096},
      {NB_FUSED, 1, 1, 8192, 5120},       {NB_FUSED, 1, 1, 4096, 16384},
      {NB_FUSED, 1, 1, 8192, 8191},       {NB_FUSED, 1, 1, 128, 8192},
      {NB_GEMMA_FUSED, 1, 1, 8192, 8192}, {NB_GEMMA_FUSED, 1, 1, 8192, 3584},
      {NB_GEMMA, 1, 1, 8192, 8192},       {NB_GEMMA, 0, 0, 8192, 8192},
      {NB_GEMMA, 1, 1, 8192, 3584},       {NB_GEMMA, 1, 1, 262144, 128},
      {NB_LAYERNORM, 1, 1, 8192, 8192},   {NB_LAYERNORM, 1, 2, 8192, 8192},
      {NB_LAYERNORM, 0, 2, 8192, 8192},   {NB_LAYERNORM, 2, 2, 8192, 8192},
      {NB_LAYERNORM, 1, 2, 16384, 4096},  {NB_LAYERNORM, 1, 2, 8192, 5120},
      {NB_LAYERNORM, 1, 2, 4096, 16384},  {NB_LAYERNORM, 1, 1, 8192, 8191},
  };
  printf("\n| op | dtype | tokens x hidden | us | TB/s | of copy |\n|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    bench_norm_one(rt, cases[i].op, cases[i].dt, cases[i].wdt, cases[i].rows, cases[i].hidden,
                   copy);
}

/* The configurations around the chosen one at 8192 x 8192, for tuning:
 * block shape, register cap (min blocks per SM), weight in registers or
 * not, streaming hints or not. */
static void bench_tune(fi_runtime *rt, double copy) {
  static const int shapes[][2] = {{128, 8}, {256, 4}, {512, 2}, {1024, 1}};
  static const int minb[] = {0, 2, 3, 4};
  printf("\n| op | dtype | tokens x hidden | us | TB/s | of copy | key |\n|---|---|---|---|---|---|---|\n");
  for (int dt = 1; dt >= 0; dt--)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (size_t m = 0; m < sizeof minb / sizeof minb[0]; m++)
        for (int wreg = 1; wreg >= 0; wreg--)
          for (int hint = 0; hint <= 1; hint++) {
            if (minb[m] * shapes[s][0] > 2048) continue;
            if (dt == 0 && (wreg == 0 || s != 1)) continue; /* f16: a few points only */
            char key[256];
            snprintf(key, sizeof key,
                     "op=rmsnorm;dtype=%s;vec=8;threads=%d;chunks=%d;minblocks=%d;wreg=%d;hint=%d",
                     dtname(dt), shapes[s][0], shapes[s][1], minb[m], wreg, hint);
            bench_rmsnorm_one(rt, dt, 8192, 8192, copy, key);
          }
}

/* ----------------------------------------------------------------- act */

const bench_section bench_rmsnorm_section = {"rmsnorm", "fi_rmsnorm bandwidth across sizes and dtypes, as a fraction of copy", 1, bench_rmsnorm};

const bench_section bench_norms_section = {"norms", "fi_fused_add_rmsnorm, fi_gemma_rmsnorm, fi_gemma_fused_add_rmsnorm, fi_layernorm\n"
    "bandwidth (fused adds: input + residual read and written) at 8192 x 8192 and around", 1, bench_norms};

const bench_section bench_tune_section = {"tune", "rmsnorm configurations around the chosen one at 8192 x 8192", 0, bench_tune};
