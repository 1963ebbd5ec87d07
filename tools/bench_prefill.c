/* bench_prefill.c: fi-bench section prefill: batch prefill over a paged KV cache (page 16,
 * pages in random order, bf16) against the tensor-core rate measured in the same run with
 * a register-only mma.sync bf16 probe (the instruction the kernel uses). FLOPs:
 * 4 * B * H_qo * L^2 * D (Q K^T and P V), halved for causal. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static uint64_t brng = 0x9E3779B97F4A7C15ull;
static uint64_t brand(void) {
  brng ^= brng << 13;
  brng ^= brng >> 7;
  brng ^= brng << 17;
  return brng;
}

/* Each case (and probe) gets two rates. Isolated, the headline: one run between two
 * events, the GPU idle before it (the clock at its burst value). Sustained: after
 * FI_BENCH_PREFILL_WARMUP_MS (default 2000, 200 with --quick; 0: not measured) of runs
 * back to back, each timing n back-to-back runs (n filling 5 ms, at least 5, at most 64;
 * FI_BENCH_PREFILL_BATCH=n fixes it). They differ: after about a second of tensor-core
 * load the H200 reaches its 700 W cap and runs at ~1800-1900 MHz instead of 1980. */
static double warmup_ms(void) {
  const char *e = getenv("FI_BENCH_PREFILL_WARMUP_MS");
  const double w = e && *e ? atof(e) : quick ? 200.0 : 2000.0;
  return w > 0 ? w : 0;
}
static int sustained_runs(double ms_one) {
  const char *e = getenv("FI_BENCH_PREFILL_BATCH");
  int n = e && *e ? atoi(e) : (ms_one > 0 ? (int)ceil(5.0 / ms_one) : 64);
  if (!(e && *e) && n < 5) n = 5;
  return n < 1 ? 1 : n > 64 ? 64 : n;
}

typedef struct rates {
  double ms1, ms_s; /* isolated, sustained (0: not measured) */
  int n;            /* runs a sustained timing */
} rates;
static rates time_both(run_fn run, void *ctx, int reps) {
  rates r = {0, 0, 0};
  r.ms1 = time_runs(run, ctx, 1, reps);
  const double w = warmup_ms();
  if (w > 0 && r.ms1 > 0) {
    const double nw = ceil(w / r.ms1);
    const long warm = nw > 100000 ? 100000 : (long)nw;
    for (long i = 0; i < warm; i++) run(ctx, (int)i);
    r.n = sustained_runs(r.ms1);
    r.ms_s = time_runs(run, ctx, r.n, reps);
  }
  return r;
}


typedef struct pctx {
  probe_fn fn;
  fi_runtime *rt;
  DLDevice dev;
  int iters;
  double flops;
} pctx;
static void run_probe(void *ctx, int call) {
  (void)call; /* the same launch every call */
  pctx *c = ctx;
  c->fn(c->rt, c->dev, 0, c->iters, NULL, &c->flops);
}

/* A tensor-core rate: the mma.sync probe (resident blocks x 8 warps x iters x 8 mma of
 * 4096 FLOPs) or the wgmma one (Hopper; x 2 warpgroups x 4 wgmma of 262144 FLOPs). 0 when
 * the probe cannot run here. */
double bench_probe(fi_runtime *rt, probe_fn fn, int iters, const char *what, const char *jname) {
  DLDevice dev = {kDLCUDA, 0};
  double flops = 0;
  if (fn(rt, dev, 0, iters, NULL, &flops) != FI_OK) {
    printf("%s: not measured (%s)\n", what, fi_last_error());
    return 0;
  }
  pctx c = {fn, rt, dev, iters, 0};
  run_probe(&c, 0);
  const rates r = time_both(run_probe, &c, quick ? 3 : 11);
  flops = c.flops;
  const double tf = flops / (r.ms1 * 1e-3) / 1e12, tfs = r.ms_s > 0 ? flops / (r.ms_s * 1e-3) / 1e12 : 0;
  printf("%s: %.1f TFLOP/s (%.3g FLOPs in %.3f ms); sustained %.1f\n", what, tf, flops, r.ms1, tfs);
  if (json)
    fprintf(json, "{\"bench\":\"%s\",\"flops\":%.6g,\"ms\":%.5f,\"tflops\":%.3f,\"ms_sustained\":%.5f,\"tflops_sustained\":%.3f}\n",
            jname, flops, r.ms1, tf, r.ms_s, tfs);
  return tf;
}

typedef struct pcfg {
  const char *label;
  int B, L, hq, hkv, D, causal;
  int kv_fp8; /* 0: bf16 cache; DLPack's code of an fp8 cache (10 e4m3, 12 e5m2) */
} pcfg;

/* n bytes of random bf16 in [-1, 1) at d: random rather than constant inputs, since the
 * tensor cores draw more power (and the clock may drop) on toggling bits. */
void fill_random(CUdeviceptr d, size_t n) {
  uint16_t *h = malloc(n);
  if (!h) {
    CU_CHECK(&cu, cuMemsetD8(d, 0x3c, n));
    return;
  }
  for (size_t i = 0; i < n / 2; i++) {
    const float f = (float)((int)(brand() & 0xffff) - 32768) / 32768.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    h[i] = (uint16_t)(u >> 16); /* truncated to bf16 */
  }
  CU_CHECK(&cu, cuMemcpyHtoD(d, h, n));
  free(h);
}

/* n random fp8 codes (t: 10 e4m3, 12 e5m2) of magnitude below 1 at d: the sign bit and a
 * code under 1.0's (0x38 for e4m3, 0x3c for e5m2), so never NaN or inf. */
static void fill_random_fp8(CUdeviceptr d, size_t n, int t) {
  uint8_t *h = malloc(n);
  if (!h) {
    CU_CHECK(&cu, cuMemsetD8(d, 0x30, n));
    return;
  }
  const unsigned below = t == 10 ? 0x38u : 0x3cu;
  for (size_t i = 0; i < n; i++) {
    const uint64_t r = brand();
    h[i] = (uint8_t)((r >> 8 & 0x80u) | (unsigned)(r % below));
  }
  CU_CHECK(&cu, cuMemcpyHtoD(d, h, n));
  free(h);
}

/* Set while bench_one runs its case with attention sinks (fi_attention_extras). */
static int with_sinks;

typedef struct rctx {
  const fi_attention_extras *x; /* NULL: the plain run */
  fi_runtime *rt;
  fi_prefill_plan *plan;
  const DLTensor *q, *k, *v, *ix;
  DLTensor *out;
} rctx;
static void run_case(void *ctx, int call) {
  (void)call; /* the same inputs every call */
  const rctx *c = ctx;
  fi_batch_prefill_paged_run_ex(c->rt, c->plan, c->q, c->k, c->v, c->ix, FI_KV_LAYOUT_NHD, c->out, NULL, c->x, NULL);
}

static double bench_one(fi_runtime *rt, const pcfg *c, double mma_tf, double wg_tf) {
  const int ps = 16, B = c->B, L = c->L, D = c->D;
  const int64_t ppr = (L + ps - 1) / ps, pool = (int64_t)B * ppr + 7;
  const int64_t page_bytes = (int64_t)ps * c->hkv * D * (c->kv_fp8 ? 1 : 2);
  CUdeviceptr kc, vc, q, out, ix, ws;
  CU_CHECK(&cu, cuMemAlloc(&kc, (size_t)(pool * page_bytes)));
  CU_CHECK(&cu, cuMemAlloc(&vc, (size_t)(pool * page_bytes)));
  if (c->kv_fp8) {
    fill_random_fp8(kc, (size_t)(pool * page_bytes), c->kv_fp8);
    fill_random_fp8(vc, (size_t)(pool * page_bytes), c->kv_fp8);
  } else {
    fill_random(kc, (size_t)(pool * page_bytes));
    fill_random(vc, (size_t)(pool * page_bytes));
  }
  const size_t qbytes = (size_t)B * L * c->hq * D * 2;
  CU_CHECK(&cu, cuMemAlloc(&q, qbytes));
  CU_CHECK(&cu, cuMemAlloc(&out, qbytes));
  fill_random(q, qbytes);
  int32_t *qo = malloc(sizeof(int32_t) * (size_t)(B + 1)), *kvp = malloc(sizeof(int32_t) * (size_t)(B + 1));
  int32_t *last = malloc(sizeof(int32_t) * (size_t)B), *perm = malloc(sizeof(int32_t) * (size_t)pool);
  qo[0] = kvp[0] = 0;
  for (int b = 0; b < B; b++) {
    qo[b + 1] = qo[b] + L;
    kvp[b + 1] = kvp[b] + (int32_t)ppr;
    last[b] = L - (int)(ppr - 1) * ps;
  }
  for (int64_t i = 0; i < pool; i++) perm[i] = (int32_t)i;
  for (int64_t i = pool - 1; i > 0; i--) {
    const int64_t j = (int64_t)(brand() % (uint64_t)(i + 1));
    const int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  CU_CHECK(&cu, cuMemAlloc(&ix, sizeof(int32_t) * (size_t)pool));
  CU_CHECK(&cu, cuMemcpyHtoD(ix, perm, sizeof(int32_t) * (size_t)pool));
  int64_t qs[3] = {(int64_t)B * L, c->hq, D}, ks[4] = {pool, ps, c->hkv, D}, xs[1] = {kvp[B]};
  DLTensor tq = tensor(q, 1, 3, qs), to = tensor(out, 1, 3, qs), tk = tensor(kc, 1, 4, ks), tv = tensor(vc, 1, 4, ks);
  DLTensor tix = tensor(ix, 1, 1, xs);
  tix.dtype = (DLDataType){kDLInt, 32, 1};
  if (c->kv_fp8) tk.dtype = tv.dtype = (DLDataType){(uint8_t)c->kv_fp8, 8, 1};
  size_t wsb = 0;
  double tf = 0;
  fi_status st = fi_batch_prefill_workspace_size(rt, tq.device, B, B * L, c->hq, c->hkv, D, &wsb);
  int64_t wshape[1];
  DLTensor tw = bench_workspace(wsb, &ws, wshape);
  fi_batch_prefill_info in;
  memset(&in, 0, sizeof in);
  in.batch = B;
  in.qo_indptr = qo;
  in.kv_indptr = kvp;
  in.kv_last_page_len = last;
  in.num_qo_heads = c->hq;
  in.num_kv_heads = c->hkv;
  in.head_dim = D;
  in.page_size = ps;
  in.q_dtype = tq.dtype;
  in.kv_dtype = tk.dtype;
  fi_prefill_params p;
  fi_prefill_params_init(&p);
  p.causal = c->causal;
  if (c->kv_fp8) p.attn.k_scale = p.attn.v_scale = 0.5; /* any scale: the same work */
  bench_sinks sk;
  if (with_sinks) bench_sinks_make(&sk, c->hq);
  /* FI_BENCH_PREFILL_VARIANTS="V1;V2;...": each case once per variant, on the same inputs,
   * one after the other in this process; a variant is "-" (as set outside) or
   * "NAME=VALUE,NAME=VALUE" set with setenv before a runtime made for it (the knobs are
   * read at fi_runtime_create) and unset after. Each variant's output is compared with the first's (bitwise:
   * equal elements, and the largest difference), so a tuning knob that must not change
   * the result shows it at the benchmark's scale. */
  const char *ve = getenv("FI_BENCH_PREFILL_VARIANTS");
  char vbuf[1024];
  snprintf(vbuf, sizeof vbuf, "%s", ve && *ve ? ve : "-");
  uint16_t *first = NULL, *cur = NULL;
  char *vsave = NULL;
  int vi = 0;
  for (char *var = strtok_r(vbuf, ";", &vsave); var; var = strtok_r(NULL, ";", &vsave), vi++) {
    char names[8][64];
    int nn = 0;
    if (strcmp(var, "-") != 0) {
      char tmp[512], *ks = NULL;
      snprintf(tmp, sizeof tmp, "%s", var);
      for (char *kv = strtok_r(tmp, ",", &ks); kv && nn < 8; kv = strtok_r(NULL, ",", &ks)) {
        char *eq = strchr(kv, '=');
        if (!eq) continue;
        *eq = 0;
        snprintf(names[nn++], 64, "%s", kv);
        setenv(kv, eq + 1, 1);
      }
    }
    /* the variant's variables are read at fi_runtime_create: a runtime made now */
    fi_runtime *vrt = nn ? bench_env_runtime() : rt;
    fi_prefill_plan *plan = NULL;
    st = FI_OK;
    if (wsb == 0) st = FI_ERR_INVALID_ARGUMENT;
    if (st == FI_OK) st = fi_batch_prefill_paged_plan(vrt, &in, &p, &tw, NULL, &plan);
    if (st == FI_OK) CU_CHECK(&cu, cuMemsetD8(out, 0xff, qbytes));
    if (st == FI_OK)
      st = fi_batch_prefill_paged_run_ex(vrt, plan, &tq, &tk, &tv, &tix, FI_KV_LAYOUT_NHD, &to, NULL,
                                         with_sinks ? &sk.x : NULL, NULL);
    for (int i = 0; i < nn; i++) unsetenv(names[i]);
    if (st != FI_OK) {
      fprintf(stderr, "prefill %s [%s]: %s\n", c->label, var, fi_last_error());
      fi_batch_prefill_plan_destroy(plan);
      CU_CHECK(&cu, cuCtxSynchronize());
      if (vrt != rt) fi_runtime_destroy(vrt);
      continue;
    }
    CU_CHECK(&cu, cuCtxSynchronize());
    const double flops = 4.0 * B * c->hq * (double)L * L * D / (c->causal ? 2.0 : 1.0);
    rctx rc = {with_sinks ? &sk.x : NULL, vrt, plan, &tq, &tk, &tv, &tix, &to};
    const rates rr = time_both(run_case, &rc, quick ? 3 : 9);
    const double ms = rr.ms1;
    tf = flops / (ms * 1e-3) / 1e12;
    const double tfs = rr.ms_s > 0 ? flops / (rr.ms_s * 1e-3) / 1e12 : 0;
    char heads[32], cmp[96] = "";
    snprintf(heads, sizeof heads, "%d/%d%s", c->hq, c->hkv,
             c->kv_fp8 == 10 ? " e4m3" : c->kv_fp8 == 12 ? " e5m2" : "");
    if (ve && *ve) {
      uint16_t **dst = vi == 0 ? &first : &cur;
      if (!*dst) *dst = malloc(qbytes);
      if (*dst) {
        CU_CHECK(&cu, cuMemcpyDtoH(*dst, out, qbytes));
        if (vi > 0 && first) {
          size_t ndiff = 0;
          float mx = 0;
          for (size_t i = 0; i < qbytes / 2; i++)
            if (cur[i] != first[i]) {
              uint32_t a = (uint32_t)cur[i] << 16, b = (uint32_t)first[i] << 16;
              float fa, fb;
              memcpy(&fa, &a, 4);
              memcpy(&fb, &b, 4);
              const float d = fabsf(fa - fb);
              if (!(d <= mx)) mx = d; /* NaN counts */
              ndiff++;
            }
          snprintf(cmp, sizeof cmp, " vs first: %zu of %zu differ, max %.3g", ndiff, qbytes / 2, mx);
        }
      }
    }
    printf("| %-14s | %3d | %5d | %6s | %3d | %-6s | %9.3f | %6.1f | %5.1f%% | %5.1f%% | %2d | %6.1f |%s%s%s\n", c->label, B,
           L, heads, D, c->causal ? "causal" : "full", ms, tf, mma_tf > 0 ? 100.0 * tf / mma_tf : 0.0,
           wg_tf > 0 ? 100.0 * tf / wg_tf : 0.0, rr.n, tfs, ve && *ve ? " " : "", ve && *ve ? var : "", cmp);
    if (json)
      fprintf(json,
              "{\"bench\":\"prefill\",\"label\":\"%s\",\"batch\":%d,\"len\":%d,\"qo_heads\":%d,\"kv_heads\":%d,"
              "\"head_dim\":%d,\"causal\":%d,\"ms\":%.5f,\"tflops\":%.3f,\"of_mma\":%.4f,\"of_wgmma\":%.4f,"
              "\"runs_per_timing\":%d,\"ms_sustained\":%.5f,\"tflops_sustained\":%.3f,\"variant\":\"%s\","
              "\"kv_dtype\":\"%s\"}\n",
              c->label, B, L, c->hq, c->hkv, D, c->causal, ms, tf, mma_tf > 0 ? tf / mma_tf : 0.0,
              wg_tf > 0 ? tf / wg_tf : 0.0, rr.n, rr.ms_s, tfs, var,
              c->kv_fp8 == 10 ? "e4m3" : c->kv_fp8 == 12 ? "e5m2" : "bf16");
    fflush(stdout);
    fi_batch_prefill_plan_destroy(plan);
    CU_CHECK(&cu, cuCtxSynchronize());
    if (vrt != rt) fi_runtime_destroy(vrt);
  }
  free(first);
  free(cur);
  if (with_sinks) bench_sinks_free(&sk);
  CUdeviceptr fr[6] = {kc, vc, q, out, ix, ws};
  for (int i = 0; i < 6; i++) CU_CHECK(&cu, cuMemFree(fr[i]));
  free(qo), free(kvp), free(last), free(perm);
  return tf;
}

/* Ragged prefill with V's head_dim apart (192 / 128, DeepSeek's MHA prefill: the dvo
 * kernel, mma.sync) beside the same shape at 128 / 128 (the default kernel; issue 45:
 * within 10% per FLOP). FLOPs 2 B H L^2 (D_qk + D_vo), half causal. */
typedef struct dctx {
  fi_runtime *rt;
  fi_prefill_plan *plan;
  DLTensor *q, *k, *v, *out;
} dctx;
static void run_dvo(void *ctx, int call) {
  (void)call;
  const dctx *c = ctx;
  fi_batch_prefill_ragged_run(c->rt, c->plan, c->q, c->k, c->v, FI_KV_LAYOUT_NHD, c->out, NULL, NULL);
}
static void bench_dvo_one(fi_runtime *rt, int B, int L, int H, int dqk, int dvo, double mma_tf, double wg_tf) {
  const int64_t T = (int64_t)B * L;
  CUdeviceptr q, k, v, out, ws;
  CU_CHECK(&cu, cuMemAlloc(&q, (size_t)(T * H * dqk * 2)));
  CU_CHECK(&cu, cuMemAlloc(&k, (size_t)(T * H * dqk * 2)));
  CU_CHECK(&cu, cuMemAlloc(&v, (size_t)(T * H * dvo * 2)));
  CU_CHECK(&cu, cuMemAlloc(&out, (size_t)(T * H * dvo * 2)));
  fill_random(q, (size_t)(T * H * dqk * 2));
  fill_random(k, (size_t)(T * H * dqk * 2));
  fill_random(v, (size_t)(T * H * dvo * 2));
  int32_t *ip = malloc(sizeof(int32_t) * (size_t)(B + 1));
  for (int b = 0; b <= B; b++) ip[b] = b * L;
  int64_t qs[3] = {T, H, dqk}, vs[3] = {T, H, dvo};
  DLTensor tq = tensor(q, 1, 3, qs), tk = tensor(k, 1, 3, qs), tv = tensor(v, 1, 3, vs), to = tensor(out, 1, 3, vs);
  size_t wsb = 0;
  fi_status st = fi_batch_prefill_workspace_size(rt, tq.device, B, (int)T, H, H, dqk, &wsb);
  int64_t wshape[1];
  DLTensor tw = bench_workspace(wsb, &ws, wshape);
  fi_batch_prefill_info in;
  memset(&in, 0, sizeof in);
  in.batch = B, in.qo_indptr = ip, in.kv_indptr = ip;
  in.num_qo_heads = in.num_kv_heads = H, in.head_dim = dqk;
  in.q_dtype = in.kv_dtype = tq.dtype;
  fi_prefill_params p;
  fi_prefill_params_init(&p);
  fi_attention_extras x;
  fi_attention_extras_init(&x);
  x.head_dim_vo = dvo;
  fi_prefill_plan *plan = NULL;
  if (st == FI_OK) st = fi_batch_prefill_ragged_plan_ex(rt, &in, &p, &x, &tw, NULL, &plan);
  if (st == FI_OK) st = fi_batch_prefill_ragged_run(rt, plan, &tq, &tk, &tv, FI_KV_LAYOUT_NHD, &to, NULL, NULL);
  if (st != FI_OK) {
    fprintf(stderr, "prefill head_dim %d/%d: %s\n", dqk, dvo, fi_last_error());
  } else {
    CU_CHECK(&cu, cuCtxSynchronize());
    dctx c = {rt, plan, &tq, &tk, &tv, &to};
    const rates r = time_both(run_dvo, &c, quick ? 3 : 9);
    const double flops = 2.0 * B * H * (double)L * L * (dqk + dvo) / 2.0;
    const double tf = flops / (r.ms1 * 1e-3) / 1e12, tfs = r.ms_s > 0 ? flops / (r.ms_s * 1e-3) / 1e12 : 0;
    char label[32], heads[16];
    snprintf(label, sizeof label, "ragged %d/%d", dqk, dvo);
    snprintf(heads, sizeof heads, "%d/%d", H, H);
    printf("| %-14s | %3d | %5d | %6s | %3d | %-6s | %9.3f | %6.1f | %5.1f%% | %5.1f%% | %2d | %6.1f |\n", label, B, L,
           heads, dqk, "causal", r.ms1, tf, mma_tf > 0 ? 100.0 * tf / mma_tf : 0.0, wg_tf > 0 ? 100.0 * tf / wg_tf : 0.0,
           r.n, tfs);
    if (json)
      fprintf(json,
              "{\"bench\":\"prefill_dvo\",\"batch\":%d,\"len\":%d,\"heads\":%d,\"head_dim_qk\":%d,"
              "\"head_dim_vo\":%d,\"ms\":%.5f,\"tflops\":%.3f,\"ms_sustained\":%.5f,\"tflops_sustained\":%.3f}\n",
              B, L, H, dqk, dvo, r.ms1, tf, r.ms_s, tfs);
    fflush(stdout);
  }
  fi_batch_prefill_plan_destroy(plan);
  CU_CHECK(&cu, cuCtxSynchronize());
  CUdeviceptr fr[5] = {q, k, v, out, ws};
  for (int i = 0; i < 5; i++) CU_CHECK(&cu, cuMemFree(fr[i]));
  free(ip);
}

static void bench_prefill(fi_runtime *rt, double copy) {
  (void)copy;
  const double tf = bench_probe(rt, fi_admin_mma_probe, 1 << 14, "mma.sync bf16 m16n8k16 (registers only)", "mma_probe");
  const double wg = bench_probe(rt, fi_admin_wgmma_probe, 1 << 13, "wgmma bf16 m64n128k16 (shared-memory operands)", "wgmma_probe");
  const char *kernel = getenv("FI_PREFILL_WGMMA");
  printf("kernel: %s\n", kernel && strcmp(kernel, "0") == 0
                             ? "mma.sync everywhere (FI_PREFILL_WGMMA=0)"
                             : "wgmma (sm_90a) for head_dim 64, 128 and 256 on an sm_90 device, else mma.sync");
  static const pcfg cases[] = {
      {"target 380", 4, 8192, 32, 8, 128, 1, 0},  {"target 400", 4, 8192, 32, 8, 128, 0, 0},
      {"target 380", 4, 8192, 32, 32, 128, 1, 0}, {"target 400", 4, 8192, 32, 32, 128, 0, 0},
      {"target 320", 64, 1024, 32, 8, 128, 1, 0}, {"target 320", 64, 1024, 32, 32, 128, 1, 0},
      {"head_dim 64", 4, 8192, 32, 8, 64, 1, 0},  {"head_dim 64", 4, 8192, 32, 8, 64, 0, 0},
      {"head_dim 256", 4, 8192, 32, 8, 256, 1, 0}, {"head_dim 256", 4, 8192, 32, 8, 256, 0, 0},
      {"short", 16, 512, 32, 8, 128, 1, 0},       {"one request", 1, 16384, 32, 8, 128, 1, 0},
  };
  if (warmup_ms() > 0)
    printf("\nms, TFLOP/s: one run between two events, the GPU idle before it (the burst clock); sustained:\n"
           "after %.0f ms of runs back to back, n of them between two events (the clock at the power cap)\n",
           warmup_ms());
  printf("\n| case | B | L | heads | D | mask | ms | TFLOP/s | of mma.sync | of wgmma | n | sustained TFLOP/s |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  /* FI_BENCH_PREFILL_D=<head_dim>: only that head_dim's cases (A/B runs of a tuning knob), */
  const char *de = getenv("FI_BENCH_PREFILL_D");
  const int only_d = de && *de ? atoi(de) : 0;
  const char *be = getenv("FI_BENCH_PREFILL_B"); /* and/or only that batch size's */
  const int only_b = be && *be ? atoi(be) : 0;
  fflush(stdout);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (quick && i >= 6) break;
    if (only_d > 0 && cases[i].D != only_d) continue;
    if (only_b > 0 && cases[i].B != only_b) continue;
    bench_one(rt, &cases[i], tf, wg);
    fflush(stdout); /* a case that hangs is the one after the last line printed */
    if (json) fflush(json);
  }
  /* Attention sinks (issue 45: within 10% of the same shape without them): gpt-oss's
   * 64/8 at head_dim 64, 4 x 8192 causal, without then with (also under --quick). */
  static const pcfg sink_cases[] = {{"no sinks", 4, 8192, 64, 8, 64, 1, 0}, {"sinks", 4, 8192, 64, 8, 64, 1, 0}};
  if (!(only_d > 0 && only_d != 64) && !(only_b > 0 && only_b != 4))
    for (int i = 0; i < 2; i++) {
      with_sinks = i;
      bench_one(rt, &sink_cases[i], tf, wg);
      with_sinks = 0;
      fflush(stdout);
    }
  /* fp8 KV caches (issue 45: e4m3 >= 90% of the bf16 cache's TFLOP/s at 4 x 8192, D=128,
   * 32/8, causal): the bf16 row again beside them, so the ratio is of adjacent rows. */
  static const pcfg fp8_cases[] = {{"kv bf16", 4, 8192, 32, 8, 128, 1, 0},
                                   {"kv e4m3", 4, 8192, 32, 8, 128, 1, 10},
                                   {"kv e5m2", 4, 8192, 32, 8, 128, 1, 12}};
  if (!(only_d > 0 && only_d != 128) && !(only_b > 0 && only_b != 4))
    for (int i = 0; i < 3; i++) {
      if (quick && i == 2) break;
      bench_one(rt, &fp8_cases[i], tf, wg);
      fflush(stdout);
      if (json) fflush(json);
    }
  /* head_dim 192 with V's 128 (ragged, 16/16 heads: DeepSeek's 128 over TP 8), beside
   * 128 / 128 */
  if (!(only_d > 0 && only_d != 192) && !(only_b > 0 && only_b != 4)) {
    bench_dvo_one(rt, 4, 4096, 16, 128, 128, tf, wg);
    bench_dvo_one(rt, 4, 4096, 16, 192, 128, tf, wg);
  }
  /* FI_BENCH_PREFILL_EXTRA="B,L,H_qo,H_kv,D,causal;...": more cases (after the filtered
   * ones, not filtered themselves) */
  const char *xe = getenv("FI_BENCH_PREFILL_EXTRA");
  char xbuf[512], *xs = NULL;
  snprintf(xbuf, sizeof xbuf, "%s", xe ? xe : "");
  for (char *x = strtok_r(xbuf, ";", &xs); x; x = strtok_r(NULL, ";", &xs)) {
    pcfg c = {"extra", 0, 0, 0, 0, 0, 0, 0};
    if (sscanf(x, "%d,%d,%d,%d,%d,%d", &c.B, &c.L, &c.hq, &c.hkv, &c.D, &c.causal) != 6 || c.B < 1 || c.L < 1 ||
        c.hkv < 1 || c.hq < c.hkv || c.hq % c.hkv || (c.D != 64 && c.D != 128 && c.D != 256)) {
      fprintf(stderr, "FI_BENCH_PREFILL_EXTRA: skipping \"%s\" (B,L,H_qo,H_kv,D,causal; D 64, 128 or 256)\n", x);
      continue;
    }
    bench_one(rt, &c, tf, wg);
    fflush(stdout);
    if (json) fflush(json);
  }
}

const bench_section bench_prefill_section = {
    "prefill",
    "batch prefill over a paged KV cache (page 16, random page order, bf16) against the\n"
    "tensor-core rates of two probes (mma.sync from registers; wgmma from shared memory,\n"
    "Hopper): 32/8 and 32/32 heads, D=128, 4 x 8192 causal and not, 64 x 1024 causal;\n"
    "also D=64 and 256, sinks, fp8 (e4m3, e5m2) KV caches beside bf16, ragged head_dim 192\n"
    "with V's 128 beside 128 / 128 (FLOPs 4 B H L^2 D, 2 B H L^2 (D_qk + D_vo) for 192/128,\n"
    "half causal). FI_PREFILL_WGMMA=0: mma.sync only",
    1,
    bench_prefill,
};
