/* wgmma_attn: correctness and speed of kernels/prefill_wgmma.cuh (Hopper wgmma prefill)
 * outside the runtime: renders the entry points, compiles them with NVRTC for sm_90a
 * (-I kernels, -Xptxas -v), runs random single-request cases (contiguous and paged KV,
 * causal and not, GQA packed rows, ragged last tiles) against a float64 CPU reference,
 * then times the bench shape (one request, L = 8192, 32 / 8 heads, d = 128, bf16; 256
 * random rows checked). Every case runs both variants: OV=0 (S, softmax, P V in order)
 * and OV=1 (softmax overlapped with the previous tile's P V).
 *
 * Build (from the repository root):
 *   make build/tests/wgmma_attn
 * Run (from the repository root, on the H200):
 *   build/wgmma_attn                      all cases + bench (defaults: KT 128, 2 warpgroups)
 *   build/wgmma_attn --kt 64 --nwg 1      another tile configuration
 *   build/wgmma_attn --kdesc N --vdesc N  other descriptor encodings (the defaults pass on the H200)
 *   build/wgmma_attn --no-bench | --bench-only | --bench-len L
 *   build/wgmma_attn --compile-only       no GPU: compile every variant and exit
 * Exit status: 0 all cases pass, 1 a case failed, 2 set-up / compile error.
 * Only the every-thread-loads variant (WS 0, two K/V stages): the producer's variants and
 * three consumers (head_dim 64, which need the producer) are measured with
 * lab/prefill_trace and fi-bench, which launch them as the runtime does.
 */
#include <stdint.h>

#include "prefill_params.h"
#include "wgmma_host.h"

static int g_kt = 128, g_nwg = 2, g_kdesc = 0, g_vdesc = 0;

/* prefill_wgmma_unit.cuh's smem_size for WS 0: one Q tile, two K/V stages, three offset tables,
 * the mbarriers and the unit slot, the alignment slack (no P tiles: those need three
 * consumers) */
static int smem_bytes(int D) { return (g_nwg * 64 * D + 4 * g_kt * D) * 2 + 3 * g_kt * 8 + 128 + 1024; }

typedef struct {
  const char *name;
  int dt, D, Lq, Lkv, Hq, Hkv, causal, page; /* page: 0 contiguous, else page size */
  double cap;                                 /* soft cap (0: none): logit = cap tanh(s / cap) */
} tcase;

static CUfunction g_fn[2][2][2]; /* [ov][dt][D == 128] */
static int g_ov = 0;               /* the variant run_case uses */
static cu_api cu;
static wh_mod md;

static void fill_params(fi_prefill_kparams *p, const tcase *c, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v,
                        CUdeviceptr o, CUdeviceptr lse, CUdeviceptr idx) {
  memset(p, 0, sizeof *p);
  p->q = (const void *)(uintptr_t)q;
  p->out = (void *)(uintptr_t)o;
  p->lse = (float *)(uintptr_t)lse;
  p->k = (const void *)(uintptr_t)k;
  p->v = (const void *)(uintptr_t)v;
  p->indices = (const int32_t *)(uintptr_t)idx;
  p->q_stride_tok = (int64_t)c->Hq * c->D;
  p->q_stride_head = c->D;
  p->out_stride_tok = (int64_t)c->Hq * c->D;
  p->out_stride_head = c->D;
  p->lse_stride_tok = c->Hq;
  p->lse_stride_head = 1;
  p->kv_stride_slot = (int64_t)c->Hkv * c->D;
  p->kv_stride_head = c->D;
  p->kv_stride_page = c->page ? (int64_t)c->page * c->Hkv * c->D : 0;
  p->page_size = c->page;
  p->num_items = 0;
  p->num_kv_heads = c->Hkv;
  p->group = c->Hq / c->Hkv;
  p->q_len = c->Lq;
  p->kv_len = c->Lkv;
  p->causal = c->causal;
  p->window_left = -1;
  p->scale_log2 = (float)(1.0 / sqrt((double)c->D) * 1.4426950408889634);
  if (c->cap > 0) {
    p->cap_pre = (float)(1.0 / sqrt((double)c->D) / c->cap);
    p->cap_log2 = (float)(c->cap * 1.4426950408889634);
  }
  p->v_scale = 1.0f;
}

static CUresult launch(const tcase *c, fi_prefill_kparams *p) {
  const int QT = 64 * g_nwg, G = c->Hq / c->Hkv;
  const unsigned gx = (unsigned)((c->Lq * G + QT - 1) / QT);
  void *args[] = {p};
  return cu.cuLaunchKernel(g_fn[g_ov][c->dt][c->D == 128], gx, (unsigned)c->Hkv, 1, (unsigned)(128 * g_nwg), 1, 1,
                           (unsigned)smem_bytes(c->D), NULL, args, NULL);
}

/* Reference row (token t, head h) in float64; returns the natural-log LSE. */
static double ref_row(const tcase *c, const double *q, const double *k, const double *v, int t, int h, double *out,
                      double *sc) {
  const int D = c->D, G = c->Hq / c->Hkv, hk = h / G, off = c->Lkv - c->Lq;
  const int hi = c->causal && t + off + 1 < c->Lkv ? t + off + 1 : c->Lkv;
  const double scale = 1.0 / sqrt((double)D);
  const double *qr = q + ((size_t)t * c->Hq + h) * D;
  double mx = -INFINITY;
  for (int j = 0; j < hi; j++) {
    const double *kr = k + ((size_t)j * c->Hkv + hk) * D;
    double s = 0;
    for (int d = 0; d < D; d++) s += qr[d] * kr[d];
    sc[j] = c->cap > 0 ? c->cap * tanh(s * scale / c->cap) : s * scale;
    if (sc[j] > mx) mx = sc[j];
  }
  double sum = 0;
  for (int d = 0; d < D; d++) out[d] = 0;
  for (int j = 0; j < hi; j++) {
    const double w = exp(sc[j] - mx);
    sum += w;
    const double *vr = v + ((size_t)j * c->Hkv + hk) * D;
    for (int d = 0; d < D; d++) out[d] += w * vr[d];
  }
  for (int d = 0; d < D; d++) out[d] /= sum;
  return mx + log(sum);
}

/* Runs one case; `rows_checked` < 0: every (token, head) row, else that many random rows.
 * Returns 1 on pass. */
static int run_case(const tcase *c, uint64_t *seed, int rows_checked, int bench_iters) {
  const int D = c->D, dt = c->dt;
  const size_t nq = (size_t)c->Lq * c->Hq * D, nkv = (size_t)c->Lkv * c->Hkv * D;
  const int npages = c->page ? (c->Lkv + c->page - 1) / c->page : 0;
  const size_t nkv_alloc = c->page ? (size_t)npages * c->page * c->Hkv * D : nkv;
  uint16_t *hq = malloc(2 * nq), *hk = malloc(2 * nkv_alloc), *hv = malloc(2 * nkv_alloc), *ho = malloc(2 * nq);
  double *q = malloc(8 * nq), *k = malloc(8 * nkv), *v = malloc(8 * nkv);
  float *hl = malloc(4 * (size_t)c->Lq * c->Hq);
  int32_t *idx = npages ? malloc(4 * (size_t)npages) : NULL;
  for (size_t i = 0; i < nq; i++) q[i] = wh_put(hq, dt, i, wh_normal(seed));
  /* logical token j's element; paged: the page idx[j / page] holds it */
  if (npages) {
    for (int i = 0; i < npages; i++) idx[i] = i;
    for (int i = npages - 1; i > 0; i--) {
      const int j = (int)(wh_rand(seed) % (uint64_t)(i + 1)), tmp = idx[i];
      idx[i] = idx[j];
      idx[j] = tmp;
    }
    for (size_t i = 0; i < nkv_alloc; i++) hk[i] = hv[i] = 0;
  }
  for (size_t i = 0; i < nkv; i++) {
    const size_t tok = i / ((size_t)c->Hkv * D), rest = i % ((size_t)c->Hkv * D);
    const size_t phys = npages ? ((size_t)idx[tok / c->page] * c->page + tok % c->page) * c->Hkv * D + rest : i;
    k[i] = wh_put(hk, dt, phys, wh_normal(seed));
    v[i] = wh_put(hv, dt, phys, wh_normal(seed));
  }
  CUdeviceptr dq, dk, dv, dout, dl, didx = 0;
  CU_CHECK(&cu, cuMemAlloc(&dq, 2 * nq));
  CU_CHECK(&cu, cuMemAlloc(&dk, 2 * nkv_alloc));
  CU_CHECK(&cu, cuMemAlloc(&dv, 2 * nkv_alloc));
  CU_CHECK(&cu, cuMemAlloc(&dout, 2 * nq));
  CU_CHECK(&cu, cuMemAlloc(&dl, 4 * (size_t)c->Lq * c->Hq));
  CU_CHECK(&cu, cuMemcpyHtoD(dq, hq, 2 * nq));
  CU_CHECK(&cu, cuMemcpyHtoD(dk, hk, 2 * nkv_alloc));
  CU_CHECK(&cu, cuMemcpyHtoD(dv, hv, 2 * nkv_alloc));
  if (npages) {
    CU_CHECK(&cu, cuMemAlloc(&didx, 4 * (size_t)npages));
    CU_CHECK(&cu, cuMemcpyHtoD(didx, idx, 4 * (size_t)npages));
  }
  fi_prefill_kparams p;
  fill_params(&p, c, dq, dk, dv, dout, dl, didx);

  /* the reference rows, once for both variants */
  const long total = (long)c->Lq * c->Hq, nrows = rows_checked < 0 ? total : rows_checked;
  long *rowid = malloc(sizeof(long) * (size_t)nrows);
  double *ro = malloc(8 * (size_t)D * (size_t)nrows), *rl = malloc(8 * (size_t)nrows),
         *sc = malloc(8 * (size_t)c->Lkv);
  for (long i = 0; i < nrows; i++) {
    rowid[i] = rows_checked < 0 ? i : (long)(wh_rand(seed) % (uint64_t)total);
    rl[i] = ref_row(c, q, k, v, (int)(rowid[i] / c->Hq), (int)(rowid[i] % c->Hq), ro + (size_t)i * D, sc);
  }
  int all_ok = 1;
  for (g_ov = 0; g_ov < 2; g_ov++) {
    CU_CHECK(&cu, cuMemsetD8(dout, 0xff, 2 * nq)); /* NaN in f16 and bf16 */
    CU_CHECK(&cu, cuMemsetD8(dl, 0xff, 4 * (size_t)c->Lq * c->Hq));
    CUresult r = launch(c, &p);
    if (!r) r = cu.cuCtxSynchronize();
    if (r) {
      const char *s = "";
      cu.cuGetErrorString(r, &s);
      printf("%-36s OV=%d LAUNCH/EXEC ERROR %d %s\n", c->name, g_ov, r, s);
      exit(1); /* the context is gone */
    }
    CU_CHECK(&cu, cuMemcpyDtoH(ho, dout, 2 * nq));
    CU_CHECK(&cu, cuMemcpyDtoH(hl, dl, 4 * (size_t)c->Lq * c->Hq));

    /* every element written (no NaN left from the poison) */
    size_t nan = 0;
    for (size_t i = 0; i < nq; i++) {
      const double x = wh_get(ho, dt, i);
      if (x != x) nan++;
    }
    for (size_t i = 0; i < (size_t)c->Lq * c->Hq; i++)
      if (hl[i] != hl[i]) nan++;
    double en = 0, rn = 0, lse_err = 0;
    for (long i = 0; i < nrows; i++) {
      const long row = rowid[i];
      for (int d = 0; d < D; d++) {
        const double x = wh_get(ho, dt, (size_t)row * D + d), e = x - ro[(size_t)i * D + d];
        en += e * e;
        rn += ro[(size_t)i * D + d] * ro[(size_t)i * D + d];
      }
      const double le = fabs(hl[row] - rl[i]);
      if (lse_err == lse_err && !(le <= lse_err)) lse_err = le; /* NaN sticks */
    }
    const double rel = sqrt(en / (rn > 0 ? rn : 1));
    const double tol = dt ? 1e-2 : 2e-3;
    const int ok = !nan && rel < tol && lse_err < 1e-2;
    all_ok &= ok;
    printf("%-36s OV=%d rel %.2e (tol %.0e) lse %.1e unwritten %zu  %s\n", c->name, g_ov, rel, tol, lse_err, nan,
           ok ? "PASS" : "FAIL");
    fflush(stdout);

    if (bench_iters > 0) {
      CUevent e0, e1;
      CU_CHECK(&cu, cuEventCreate(&e0, 0));
      CU_CHECK(&cu, cuEventCreate(&e1, 0));
      for (int i = 0; i < 3; i++)
        if (launch(c, &p)) {
          printf("%s: launch failed\n", c->name);
          exit(1);
        }
      CU_CHECK(&cu, cuCtxSynchronize());
      float ms[64];
      const int n = bench_iters < 64 ? bench_iters : 64;
      for (int i = 0; i < n; i++) {
        CU_CHECK(&cu, cuEventRecord(e0, NULL));
        if (launch(c, &p)) {
          printf("%s: launch failed\n", c->name);
          exit(1);
        }
        CU_CHECK(&cu, cuEventRecord(e1, NULL));
        CU_CHECK(&cu, cuEventSynchronize(e1));
        CU_CHECK(&cu, cuEventElapsedTime(&ms[i], e0, e1));
      }
      for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
          const float t = ms[j];
          ms[j] = ms[j - 1];
          ms[j - 1] = t;
        }
      const double med = ms[n / 2];
      double flops = 4.0 * c->Hq * (double)c->Lq * c->Lkv * D;
      if (c->causal) flops *= 0.5;
      printf("%-36s OV=%d median %.3f ms (min %.3f, %d runs)  %.1f TFLOP/s\n", c->name, g_ov, med, ms[0], n,
             flops / (med * 1e-3) / 1e12);
      fflush(stdout);
    }
  }
  free(hq), free(hk), free(hv), free(ho), free(q), free(k), free(v), free(hl), free(idx), free(ro), free(sc), free(rl), free(rowid);
  cu.cuMemFree(dq), cu.cuMemFree(dk), cu.cuMemFree(dv), cu.cuMemFree(dout), cu.cuMemFree(dl);
  if (didx) cu.cuMemFree(didx);
  return all_ok;
}

int main(int argc, char **argv) {
  int compile_only = 0, bench = 1, tests = 1, bench_len = 8192;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--compile-only"))
      compile_only = 1;
    else if (!strcmp(argv[i], "--no-bench"))
      bench = 0;
    else if (!strcmp(argv[i], "--bench-only"))
      tests = 0;
    else if (!strcmp(argv[i], "--bench-len") && i + 1 < argc)
      bench_len = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--kt") && i + 1 < argc)
      g_kt = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--nwg") && i + 1 < argc)
      g_nwg = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--kdesc") && i + 1 < argc)
      g_kdesc = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--vdesc") && i + 1 < argc)
      g_vdesc = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--compile-only] [--no-bench|--bench-only] [--bench-len L] [--kt 64|128] "
                      "[--nwg 1|2] [--kdesc 0-3] [--vdesc 0-1]\n", argv[0]);
      return 2;
    }
  }
  if ((g_kt != 64 && g_kt != 128) || g_nwg < 1 || g_nwg > 2) {
    fprintf(stderr, "--kt 64|128, --nwg 1|2 (three consumers need the producer warpgroup: lab/prefill_trace)\n");
    return 2;
  }
  char src[8192];
  int n = snprintf(src, sizeof src, "#include \"fi_port.cuh\"\n#include \"prefill_wgmma.cuh\"\n");
  static const char *const tn[2] = {"fi_half", "fi_bf16"}, *const ts[2] = {"f16", "bf16"};
  for (int ov = 0; ov < 2; ov++)
    for (int dt = 0; dt < 2; dt++)
      for (int D = 64; D <= 128; D += 64)
        n += snprintf(src + n, sizeof src - n,
                      "extern \"C\" __global__ void __launch_bounds__(%d, 1) wg_attn%s_%s_d%d(const fi_prefill_kparams p) "
                      "{ fi::wg::prefill_wgmma<%s, %d, %d, %d, 1, %d, 0>(p); }\n",
                      128 * g_nwg, ov ? "_ov" : "", ts[dt], D, tn[dt], D, g_kt, g_nwg, ov);
  char o1[64], o2[64];
  snprintf(o1, sizeof o1, "-DFI_WG_KDESC=%d", g_kdesc);
  snprintf(o2, sizeof o2, "-DFI_WG_VDESC=%d", g_vdesc);
  const char *extra[] = {o1, o2, NULL};
  printf("prefill_wgmma: KT %d, %d warpgroups (q tile %d), FI_WG_KDESC %d, FI_WG_VDESC %d, smem %d B (d128)\n",
         g_kt, g_nwg, 64 * g_nwg, g_kdesc, g_vdesc, smem_bytes(128));
  fflush(stdout);
  wh_nvrtc nv;
  if (wh_nvrtc_load(&nv)) return 2;
  size_t bin_size = 0;
  char *log = NULL;
  char *bin = wh_compile(&nv, src, "wgmma_attn.cu", extra, 1, &bin_size, &log);
  if (!bin) return 2;
  for (const char *q = log; q && (q = strstr(q, " bytes spill stores")) != NULL; q++) {
    const char *b = q;
    while (b > log && b[-1] >= '0' && b[-1] <= '9') b--;
    if (atoi(b) > 0) {
      printf("WARNING: the ptxas log reports spills (see above)\n");
      break;
    }
  }
  if (compile_only) {
    printf("compile-only: cubin %zu bytes\n", bin_size);
    return 0;
  }

  CUcontext ctx;
  char err[256];
  if (cu_min_init(&cu, &ctx, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 2;
  }
  if (wh_mod_load(&md)) return 2;
  CUmodule mod;
  CU_CHECK(&md, load(&mod, bin));
  for (int ov = 0; ov < 2; ov++)
    for (int dt = 0; dt < 2; dt++)
      for (int d = 0; d < 2; d++) {
        char name[64];
        snprintf(name, sizeof name, "wg_attn%s_%s_d%d", ov ? "_ov" : "", ts[dt], d ? 128 : 64);
        CUfunction f;
        CU_CHECK(&md, get(&f, mod, name));
        g_fn[ov][dt][d] = f;
        CU_CHECK(&md, set_attr(f, WH_ATTR_MAX_DYNAMIC_SHARED, smem_bytes(d ? 128 : 64)));
        int regs = 0, local = 0;
        md.get_attr(&regs, WH_ATTR_NUM_REGS, f);
        md.get_attr(&local, WH_ATTR_LOCAL_BYTES, f);
        printf("%-22s %d registers, %d bytes local memory\n", name, regs, local);
      }

  uint64_t seed = (uint64_t)time(NULL) * 2654435761u + 1;
  printf("seed %llu\n", (unsigned long long)seed);
  int fails = 0;
  if (tests) {
    static const tcase cases[] = {
        {"bf16 d128 L512 8/2 causal", 1, 128, 512, 512, 8, 2, 1, 0, 0},
        {"bf16 d128 L512 8/2", 1, 128, 512, 512, 8, 2, 0, 0, 0},
        {"f16  d128 L512 8/2 causal", 0, 128, 512, 512, 8, 2, 1, 0, 0},
        {"f16  d128 L512 8/2", 0, 128, 512, 512, 8, 2, 0, 0, 0},
        {"bf16 d128 L1000 4/4 causal", 1, 128, 1000, 1000, 4, 4, 1, 0, 0},
        {"bf16 d128 L1000 4/4", 1, 128, 1000, 1000, 4, 4, 0, 0, 0},
        {"f16  d128 L1000 4/4 causal", 0, 128, 1000, 1000, 4, 4, 1, 0, 0},
        {"f16  d128 L1000 4/4", 0, 128, 1000, 1000, 4, 4, 0, 0, 0},
        {"bf16 d128 Lq300 Lkv1000 8/1 causal", 1, 128, 300, 1000, 8, 1, 1, 0, 0},
        {"bf16 d128 Lq7 Lkv7 3/1 causal", 1, 128, 7, 7, 3, 1, 1, 0, 0},
        {"bf16 d64 L777 8/2 causal", 1, 64, 777, 777, 8, 2, 1, 0, 0},
        {"f16  d64 L777 8/2", 0, 64, 777, 777, 8, 2, 0, 0, 0},
        {"bf16 d128 L700 8/2 causal paged16", 1, 128, 700, 700, 8, 2, 1, 16, 0},
        {"f16  d128 L700 8/2 paged1", 0, 128, 700, 700, 8, 2, 0, 1, 0},
        {"bf16 d128 L600 8/2 causal cap 2", 1, 128, 600, 600, 8, 2, 1, 0, 2.0},
    };
    /* OV=0: S, softmax, P V in order; OV=1: softmax overlapped with the previous P V */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fails += !run_case(&cases[i], &seed, -1, 0);
  }
  if (bench) {
    for (int causal = 0; causal < 2; causal++) {
      char name[64];
      snprintf(name, sizeof name, "bench bf16 d128 L%d 32/8%s", bench_len, causal ? " causal" : "");
      tcase c = {name, 1, 128, bench_len, bench_len, 32, 8, causal, 0, 0};
      fails += !run_case(&c, &seed, 256, 20);
    }
  }
  printf("%s\n", fails ? "FAIL" : "PASS: every case");
  return fails ? 1 : 0;
}
