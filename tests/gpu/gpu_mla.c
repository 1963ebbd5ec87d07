/* gpu_mla.c: fi_batch_mla_paged_{plan,run} on the GPU against a float64 CPU reference of
 * the absorbed form: fresh random inputs, poisoned outputs (every element must be
 * written), f16 and bf16, heads 16/32/64/128, page sizes 1/16/64 with shuffled pages,
 * ragged KV lengths, decode (one query token), MTP (2 and 4) and chunked prefill, causal or
 * not, empty requests, split-KV (B = 1, long context), LSE; the equivalence with the
 * non-absorbed form (per-head up-projections W_UK, W_UV) on a small case; and CUDA-graph
 * replays after re-plans. Every case prints its errors, so one run tells everything. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ft.h"
#include "gpu_util.h"

static cu_api cu;
static CUcontext ctx;
static fi_runtime *rt;
static uint64_t seed;
static g_graph_api gr;

static int setup(void) {
  if (rt) return 0;
  if (g_setup(&cu, &ctx, &rt, &seed) != 0) return -1;
  if (g_load_graph_api(&gr) != 0) return -1;
  return 0;
}

enum { DC = 512, DP = 64 };

typedef struct mcase {
  const char *name;
  int dt, H, ps, causal, B;
  const int *lq, *lkv;
  double tol;
  int fused; /* ckv and kpe the column ranges of one [pages, page_size, 576] buffer (vLLM's) */
} mcase;

/* One batch on the host (values as stored, dt) and on the device. */
typedef struct mbatch {
  int B;
  int32_t qo[65], kvp[65], kvl[64];
  int64_t N, pages, used;
  int fused, ps;
  void *qn, *qp, *ckv, *kpe;
  int32_t *idx;
  CUdeviceptr dqn, dqp, dckv, dkpe, didx, dout, dlse, dws;
  size_t ws_bytes;
  DLTensor tqn, tqp, tckv, tkpe, tidx, tout, tlse, tws;
  int64_t sqn[3], sqp[3], sckv[3], skpe[3], sidx[1], sout[3], slse[2], sws[1], fst[3];
} mbatch;

/* The caches on the device from / to host arrays [pages][ps][512] and [pages][ps][64]
 * (a fused batch interleaves them into rows of 576). */
static void put_cache(const mbatch *m, const void *ckv, const void *kpe) {
  const size_t rows = (size_t)(m->pages * m->ps);
  if (!m->fused) {
    CU_CHECK(&cu, cuMemcpyHtoD(m->dckv, ckv, rows * DC * 2));
    CU_CHECK(&cu, cuMemcpyHtoD(m->dkpe, kpe, rows * DP * 2));
    return;
  }
  uint16_t *f = malloc(rows * (DC + DP) * 2);
  for (size_t r = 0; r < rows; r++) {
    memcpy(f + r * (DC + DP), (const uint16_t *)ckv + r * DC, DC * 2);
    memcpy(f + r * (DC + DP) + DC, (const uint16_t *)kpe + r * DP, DP * 2);
  }
  CU_CHECK(&cu, cuMemcpyHtoD(m->dckv, f, rows * (DC + DP) * 2));
  free(f);
}
static void get_cache(const mbatch *m, void *ckv, void *kpe) {
  const size_t rows = (size_t)(m->pages * m->ps);
  if (!m->fused) {
    CU_CHECK(&cu, cuMemcpyDtoH(ckv, m->dckv, rows * DC * 2));
    CU_CHECK(&cu, cuMemcpyDtoH(kpe, m->dkpe, rows * DP * 2));
    return;
  }
  uint16_t *f = malloc(rows * (DC + DP) * 2);
  CU_CHECK(&cu, cuMemcpyDtoH(f, m->dckv, rows * (DC + DP) * 2));
  for (size_t r = 0; r < rows; r++) {
    memcpy((uint16_t *)ckv + r * DC, f + r * (DC + DP), DC * 2);
    memcpy((uint16_t *)kpe + r * DP, f + r * (DC + DP) + DC, DP * 2);
  }
  free(f);
}

static void make(const mcase *c, mbatch *m, int max_batch, int max_q) {
  memset(m, 0, sizeof *m);
  const int B = c->B, H = c->H, ps = c->ps, es = 2;
  m->B = B;
  for (int b = 0; b < B; b++) {
    m->qo[b + 1] = m->qo[b] + c->lq[b];
    m->kvl[b] = c->lkv[b];
    m->kvp[b + 1] = m->kvp[b] + (c->lkv[b] + ps - 1) / ps + (b % 3 == 1); /* some spare pages */
  }
  m->N = m->qo[B] > max_q ? m->qo[B] : max_q;
  if (m->N < 1) m->N = 1;
  m->used = m->kvp[B];
  m->pages = m->used + 7;
  m->qn = malloc((size_t)(m->N * H * DC) * es);
  m->qp = malloc((size_t)(m->N * H * DP) * es);
  m->ckv = malloc((size_t)(m->pages * ps * DC) * es);
  m->kpe = malloc((size_t)(m->pages * ps * DP) * es);
  m->idx = malloc((size_t)(m->used + 1) * 4);
  for (int64_t i = 0; i < m->N * H * DC; i++) g_put(m->qn, c->dt, i, g_normal(&seed));
  for (int64_t i = 0; i < m->N * H * DP; i++) g_put(m->qp, c->dt, i, g_normal(&seed));
  for (int64_t i = 0; i < m->pages * ps * DC; i++) g_put(m->ckv, c->dt, i, 0.5 * g_normal(&seed));
  for (int64_t i = 0; i < m->pages * ps * DP; i++) g_put(m->kpe, c->dt, i, g_normal(&seed));
  int32_t *perm = malloc((size_t)m->pages * 4);
  for (int64_t i = 0; i < m->pages; i++) perm[i] = (int32_t)i;
  for (int64_t i = m->pages - 1; i > 0; i--) {
    const int64_t j = (int64_t)(g_rand(&seed) % (uint64_t)(i + 1));
    const int32_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  memcpy(m->idx, perm, (size_t)m->used * 4);
  free(perm);
  CU_CHECK(&cu, cuMemAlloc(&m->dqn, (size_t)(m->N * H * DC) * es));
  CU_CHECK(&cu, cuMemAlloc(&m->dqp, (size_t)(m->N * H * DP) * es));
  m->fused = c->fused, m->ps = ps;
  if (m->fused) {
    CU_CHECK(&cu, cuMemAlloc(&m->dckv, (size_t)(m->pages * ps * (DC + DP)) * es));
    m->dkpe = m->dckv + DC * es;
  } else {
    CU_CHECK(&cu, cuMemAlloc(&m->dckv, (size_t)(m->pages * ps * DC) * es));
    CU_CHECK(&cu, cuMemAlloc(&m->dkpe, (size_t)(m->pages * ps * DP) * es));
  }
  CU_CHECK(&cu, cuMemAlloc(&m->didx, (size_t)(m->used + 1) * 4));
  CU_CHECK(&cu, cuMemAlloc(&m->dout, (size_t)(m->N * H * DC) * es));
  CU_CHECK(&cu, cuMemAlloc(&m->dlse, (size_t)(m->N * H) * 4));
  CU_CHECK(&cu, cuMemcpyHtoD(m->dqn, m->qn, (size_t)(m->N * H * DC) * es));
  CU_CHECK(&cu, cuMemcpyHtoD(m->dqp, m->qp, (size_t)(m->N * H * DP) * es));
  put_cache(m, m->ckv, m->kpe);
  CU_CHECK(&cu, cuMemcpyHtoD(m->didx, m->idx, (size_t)(m->used + 1) * 4));
  DLDevice dev = {kDLCUDA, 0};
  fi_status st = fi_batch_mla_workspace_size(rt, dev, max_batch > B ? max_batch : B, (int)m->N, H, &m->ws_bytes);
  if (st != FI_OK) {
    fprintf(stderr, "fi_batch_mla_workspace_size: %s\n", fi_last_error());
    exit(1);
  }
  CU_CHECK(&cu, cuMemAlloc(&m->dws, m->ws_bytes));
  m->sqn[0] = m->N, m->sqn[1] = H, m->sqn[2] = DC;
  m->sqp[0] = m->N, m->sqp[1] = H, m->sqp[2] = DP;
  m->sckv[0] = m->pages, m->sckv[1] = ps, m->sckv[2] = DC;
  m->skpe[0] = m->pages, m->skpe[1] = ps, m->skpe[2] = DP;
  m->sidx[0] = m->used;
  m->sout[0] = m->N, m->sout[1] = H, m->sout[2] = DC;
  m->slse[0] = m->N, m->slse[1] = H;
  m->sws[0] = (int64_t)m->ws_bytes;
  m->tqn = g_tensor(m->dqn, 0, c->dt, 3, m->sqn, NULL);
  m->tqp = g_tensor(m->dqp, 0, c->dt, 3, m->sqp, NULL);
  m->fst[0] = (int64_t)ps * (DC + DP), m->fst[1] = DC + DP, m->fst[2] = 1;
  m->tckv = g_tensor(m->dckv, 0, c->dt, 3, m->sckv, m->fused ? m->fst : NULL);
  m->tkpe = g_tensor(m->dkpe, 0, c->dt, 3, m->skpe, m->fused ? m->fst : NULL);
  m->tout = g_tensor(m->dout, 0, c->dt, 3, m->sout, NULL);
  m->tlse = g_tensor(m->dlse, 0, 2, 2, m->slse, NULL);
  m->tidx = g_tensor(m->didx, 0, 2, 1, m->sidx, NULL);
  m->tidx.dtype.code = kDLInt;
  m->tws = g_tensor(m->dws, 0, 2, 1, m->sws, NULL);
  m->tws.dtype.code = kDLUInt, m->tws.dtype.bits = 8;
}

static void mfree(mbatch *m) {
  CU_CHECK(&cu, cuMemFree(m->dqn));
  CU_CHECK(&cu, cuMemFree(m->dqp));
  CU_CHECK(&cu, cuMemFree(m->dckv));
  if (!m->fused) CU_CHECK(&cu, cuMemFree(m->dkpe));
  CU_CHECK(&cu, cuMemFree(m->didx));
  CU_CHECK(&cu, cuMemFree(m->dout));
  CU_CHECK(&cu, cuMemFree(m->dlse));
  CU_CHECK(&cu, cuMemFree(m->dws));
  free(m->qn), free(m->qp), free(m->ckv), free(m->kpe), free(m->idx);
}

static fi_batch_mla_info info_of(const mcase *c, const mbatch *m) {
  fi_batch_mla_info in;
  memset(&in, 0, sizeof in);
  in.batch = m->B;
  in.qo_indptr = m->qo;
  in.kv_indptr = m->kvp;
  in.kv_len = m->kvl;
  in.num_heads = c->H;
  in.head_dim_ckv = DC;
  in.head_dim_kpe = DP;
  in.page_size = c->ps;
  in.causal = c->causal;
  in.sm_scale = (float)(1.0 / sqrt(192.0));
  in.q_dtype = in.kv_dtype = g_dl(c->dt);
  return in;
}

static void poison(const mcase *c, const mbatch *m) {
  CU_CHECK(&cu, cuMemsetD8(m->dout, 0xff, (size_t)(m->N * c->H * DC) * 2));
  CU_CHECK(&cu, cuMemsetD8(m->dlse, 0xff, (size_t)(m->N * c->H) * 4));
  CU_CHECK(&cu, cuCtxSynchronize());
}

/* Key column col (< 576) of request b's token j. */
static double kv_at(const mcase *c, const mbatch *m, int b, int j, int col) {
  const int64_t page = m->idx[m->kvp[b] + j / c->ps], slot = j % c->ps;
  return col < DC ? g_get(m->ckv, c->dt, (page * c->ps + slot) * DC + col)
                  : g_get(m->kpe, c->dt, (page * c->ps + slot) * DP + col - DC);
}

/* Compares the device's out and lse with the float64 reference; rows: every (token, head)
 * of requests 0 .. B-1, or (when stride > 1) every stride-th row. */
static void compare(const mcase *c, const char *what, const mbatch *m, int B, int stride) {
  const int H = c->H;
  const int64_t N = m->qo[B];
  uint16_t *out = malloc((size_t)(N * H * DC + 1) * 2);
  float *lse = malloc((size_t)(N * H + 1) * 4);
  CU_CHECK(&cu, cuMemcpyDtoH(out, m->dout, (size_t)(N * H * DC) * 2));
  CU_CHECK(&cu, cuMemcpyDtoH(lse, m->dlse, (size_t)(N * H) * 4));
  const double sm = 1.0 / sqrt(192.0);
  double num = 0, den = 0, lmax = 0, amax = 0;
  long nan = 0, infbad = 0, rows = 0;
  for (int b = 0; b < B; b++) {
    const int lq = m->qo[b + 1] - m->qo[b], lkv = m->kvl[b];
    double *s = malloc(sizeof(double) * (size_t)(lkv + 1));
    double *kv = malloc(sizeof(double) * (size_t)(lkv + 1) * (DC + DP));
    for (int j = 0; j < lkv; j++)
      for (int i = 0; i < DC + DP; i++) kv[(int64_t)j * (DC + DP) + i] = kv_at(c, m, b, j, i);
    for (int t = 0; t < lq; t++)
      for (int h = 0; h < H; h++) {
        const int64_t row = ((int64_t)m->qo[b] + t) * H + h;
        if (stride > 1 && row % stride) continue;
        rows++;
        const int hi = c->causal ? t + lkv - lq + 1 : lkv;
        double mx = -INFINITY;
        for (int j = 0; j < hi; j++) {
          double x = 0;
          const double *k = kv + (int64_t)j * (DC + DP);
          for (int i = 0; i < DC; i++) x += g_get(m->qn, c->dt, row * DC + i) * k[i];
          for (int i = 0; i < DP; i++) x += g_get(m->qp, c->dt, row * DP + i) * k[DC + i];
          s[j] = x * sm;
          if (s[j] > mx) mx = s[j];
        }
        double dn = 0;
        for (int j = 0; j < hi; j++) dn += (s[j] = exp(s[j] - mx));
        for (int i = 0; i < DC; i++) {
          double a = 0;
          for (int j = 0; j < hi; j++) a += s[j] * kv[(int64_t)j * (DC + DP) + i];
          const double ref = dn > 0 ? a / dn : 0.0, got = g_get(out, c->dt, row * DC + i);
          if (got != got) {
            nan++;
            continue;
          }
          num += (got - ref) * (got - ref);
          den += ref * ref;
          if (fabs(got - ref) > amax) amax = fabs(got - ref);
        }
        const double rl = dn > 0 ? mx + log(dn) : -INFINITY, gl = lse[row];
        if (isinf(rl) || isinf(gl) || gl != gl)
          infbad += !(isinf(rl) && isinf(gl) && rl < 0 && gl < 0);
        else if (fabs(gl - rl) > lmax)
          lmax = fabs(gl - rl);
      }
    free(s), free(kv);
  }
  const double err = den > 0 ? sqrt(num / den) : sqrt(num);
  const int ok = err < c->tol && nan == 0 && infbad == 0 && lmax < 1e-2;
  fprintf(stderr, "  %s %-22s %s H=%d page=%d causal=%d B=%d rows=%ld: rel err %.3g (tol %.1g) max abs %.3g lse %.3g nan %ld inf %ld\n",
          ok ? "ok  " : "FAIL", what, g_dtname(c->dt), H, c->ps, c->causal, B, rows, err, c->tol, amax, lmax, nan, infbad);
  FT_CHECK(ok, "%s", what);
  free(out), free(lse);
}

static fi_status run(mbatch *m, fi_mla_plan **plan, const fi_batch_mla_info *in, CUstream s) {
  fi_status st = fi_batch_mla_paged_plan(rt, in, &m->tws, s, plan);
  if (st != FI_OK) return st;
  return fi_batch_mla_paged_run(rt, *plan, &m->tqn, &m->tqp, &m->tckv, &m->tkpe, &m->tidx, &m->tout, &m->tlse, s);
}

static void run_case(const mcase *c, int stride) {
  mbatch m;
  make(c, &m, 0, 0);
  poison(c, &m);
  const fi_batch_mla_info in = info_of(c, &m);
  fi_mla_plan *plan = NULL;
  fi_status st = run(&m, &plan, &in, NULL);
  FT_CHECK(st == FI_OK, "%s: %s", c->name, fi_last_error());
  if (st == FI_OK) {
    CU_CHECK(&cu, cuCtxSynchronize());
    compare(c, c->name, &m, c->B, stride);
  }
  fi_batch_mla_plan_destroy(plan);
  mfree(&m);
}

FT_TEST(mla_decode_heads_pages_dtypes) {
  FT_REQUIRE(setup() == 0);
  static const int q1[6] = {1, 1, 1, 1, 1, 1}, l1[6] = {1, 17, 300, 1000, 4097, 64};
  static const int pss[3] = {1, 16, 64}, hs[4] = {16, 32, 64, 128};
  for (int dt = 0; dt < 2; dt++)
    for (int p = 0; p < 3; p++) {
      const mcase c = {"decode", dt, 16, pss[p], 1, 6, q1, l1, dt ? 1.5e-2 : 3e-3, 0};
      run_case(&c, 1);
    }
  for (int i = 1; i < 4; i++) {
    const mcase c = {"decode heads", 1, hs[i], 16, 1, 4, q1, l1 + 1, 1.5e-2, 0};
    run_case(&c, 1);
  }
  const mcase f = {"decode, one 576 buffer", 1, 16, 64, 1, 6, q1, l1, 1.5e-2, 1};
  run_case(&f, 1);
}

FT_TEST(mla_mtp_and_chunked_prefill) {
  FT_REQUIRE(setup() == 0);
  static const int q2[4] = {2, 2, 2, 2}, l2[4] = {2, 100, 700, 33};
  static const int q4[3] = {4, 4, 0}, l4[3] = {4, 900, 0};
  static const int qp[3] = {37, 0, 5}, lp[3] = {300, 20, 5};
  const mcase cases[] = {
      {"mtp 2", 1, 16, 16, 1, 4, q2, l2, 1.5e-2, 0},      {"mtp 2", 0, 128, 64, 1, 4, q2, l2, 3e-3, 0},
      {"mtp 4", 1, 128, 1, 1, 3, q4, l4, 1.5e-2, 0},       {"chunked prefill", 1, 16, 16, 1, 3, qp, lp, 1.5e-2, 0},
      {"non-causal", 0, 32, 16, 0, 3, qp, lp, 3e-3, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], 1);
}

FT_TEST(mla_split_kv_long_context) {
  FT_REQUIRE(setup() == 0);
  static const int q1[2] = {1, 1}, l1[2] = {32768, 20000};
  const mcase a = {"split B=1 L=32768", 1, 16, 64, 1, 1, q1, l1, 1.5e-2, 0};
  run_case(&a, 1);
  const mcase b = {"split B=2 H=128", 0, 128, 16, 1, 2, q1, l1, 3e-3, 0};
  run_case(&b, 7); /* every 7th row of the 256 */
}

/* The absorbed form equals the non-absorbed one: with per-head up-projections W_UK [H][128]
 * [512] and W_UV [H][128][512] of the latent, k_nope = W_UK ckv and v = W_UV ckv; a query
 * q_nope0 [128] attends k_nope . q_nope0 + kpe . q_pe and its output is sum p v. The
 * absorbed query is W_UK^T q_nope0 and W_UV out_latent is the output. */
FT_TEST(mla_absorbed_equals_non_absorbed) {
  FT_REQUIRE(setup() == 0);
  static const int q[2] = {3, 1}, l[2] = {50, 129};
  const mcase c = {"absorbed", 1, 16, 16, 1, 2, q, l, 2e-2, 0};
  mbatch m;
  make(&c, &m, 0, 0);
  const int H = c.H, DN = 128;
  double *wuk = malloc(sizeof(double) * (size_t)H * DN * DC), *wuv = malloc(sizeof(double) * (size_t)H * DN * DC);
  double *q0 = malloc(sizeof(double) * (size_t)m.N * H * DN);
  for (int64_t i = 0; i < (int64_t)H * DN * DC; i++) wuk[i] = g_normal(&seed) / sqrt(DC), wuv[i] = g_normal(&seed) / sqrt(DC);
  for (int64_t i = 0; i < m.N * H * DN; i++) q0[i] = g_normal(&seed);
  /* the absorbed query, rounded to the dtype as an engine's would be */
  for (int64_t r = 0; r < m.N * H; r++) {
    const int h = (int)(r % H);
    for (int i = 0; i < DC; i++) {
      double a = 0;
      for (int d = 0; d < DN; d++) a += wuk[((int64_t)h * DN + d) * DC + i] * q0[r * DN + d];
      g_put(m.qn, c.dt, r * DC + i, a);
    }
  }
  CU_CHECK(&cu, cuMemcpyHtoD(m.dqn, m.qn, (size_t)(m.N * H * DC) * 2));
  poison(&c, &m);
  const fi_batch_mla_info in = info_of(&c, &m);
  fi_mla_plan *plan = NULL;
  FT_REQUIRE(run(&m, &plan, &in, NULL) == FI_OK, "%s", fi_last_error());
  CU_CHECK(&cu, cuCtxSynchronize());
  uint16_t *out = malloc((size_t)(m.N * H * DC) * 2);
  CU_CHECK(&cu, cuMemcpyDtoH(out, m.dout, (size_t)(m.N * H * DC) * 2));
  double num = 0, den = 0;
  for (int b = 0; b < c.B; b++) {
    const int lq = q[b], lkv = l[b];
    /* the non-absorbed keys and values of every head: k_nope = W_UK ckv, v = W_UV ckv */
    double *kn = malloc(sizeof(double) * (size_t)H * lkv * DN), *vv = malloc(sizeof(double) * (size_t)H * lkv * DN);
    double *lat = malloc(sizeof(double) * DC);
    for (int j = 0; j < lkv; j++) {
      for (int i = 0; i < DC; i++) lat[i] = kv_at(&c, &m, b, j, i);
      for (int h = 0; h < H; h++)
        for (int d = 0; d < DN; d++) {
          double a = 0, e = 0;
          for (int i = 0; i < DC; i++) {
            a += wuk[((int64_t)h * DN + d) * DC + i] * lat[i];
            e += wuv[((int64_t)h * DN + d) * DC + i] * lat[i];
          }
          kn[((int64_t)h * lkv + j) * DN + d] = a;
          vv[((int64_t)h * lkv + j) * DN + d] = e;
        }
    }
    for (int t = 0; t < lq; t++)
      for (int h = 0; h < H; h++) {
        const int64_t row = ((int64_t)m.qo[b] + t) * H + h;
        const int hi = t + lkv - lq + 1;
        double *s = malloc(sizeof(double) * (size_t)hi), mx = -INFINITY;
        for (int j = 0; j < hi; j++) {
          double x = 0;
          for (int d = 0; d < DN; d++) x += q0[row * DN + d] * kn[((int64_t)h * lkv + j) * DN + d];
          for (int i = 0; i < DP; i++) x += g_get(m.qp, c.dt, row * DP + i) * kv_at(&c, &m, b, j, DC + i);
          s[j] = x / sqrt(192.0);
          if (s[j] > mx) mx = s[j];
        }
        double dn = 0;
        for (int j = 0; j < hi; j++) dn += (s[j] = exp(s[j] - mx));
        for (int d = 0; d < DN; d++) {
          double ref = 0, got = 0;
          for (int j = 0; j < hi; j++) ref += s[j] / dn * vv[((int64_t)h * lkv + j) * DN + d];
          for (int i = 0; i < DC; i++) got += wuv[((int64_t)h * DN + d) * DC + i] * g_get(out, c.dt, row * DC + i);
          num += (got - ref) * (got - ref);
          den += ref * ref;
        }
        free(s);
      }
    free(kn), free(vv), free(lat);
  }
  const double err = sqrt(num / den);
  fprintf(stderr, "  %s absorbed vs non-absorbed (W_UK, W_UV per head, 128 of 512): rel err %.3g (tol %.1g)\n",
          err < c.tol ? "ok  " : "FAIL", err, c.tol);
  FT_CHECK(err < c.tol);
  free(out), free(wuk), free(wuv), free(q0);
  fi_batch_mla_plan_destroy(plan);
  mfree(&m);
}

/* CUDA-graph mode: a captured run replays correctly after re-plans of smaller batches. */
FT_TEST(mla_cuda_graph_replays_after_replans) {
  FT_REQUIRE(setup() == 0);
  static const int q[6] = {2, 1, 2, 1, 2, 1}, l[6] = {700, 40, 2, 1500, 90, 300};
  const mcase c = {"graph", 1, 64, 16, 1, 6, q, l, 1.5e-2, 0};
  mbatch m;
  make(&c, &m, 6, 12);
  CUstream s;
  CU_CHECK(&cu, cuStreamCreate(&s, 1));
  fi_batch_mla_info in = info_of(&c, &m);
  in.max_batch = 6;
  in.max_qo_tokens = 12;
  fi_mla_plan *plan = NULL;
  CU_CHECK(&cu, cuCtxSynchronize());
  FT_REQUIRE(run(&m, &plan, &in, s) == FI_OK, "%s", fi_last_error());
  CU_CHECK(&cu, cuStreamSynchronize(s));
  CUgraph g;
  CUgraphExec ge;
  FT_REQUIRE(gr.begin(s, 0) == 0);
  fi_status st = fi_batch_mla_paged_run(rt, plan, &m.tqn, &m.tqp, &m.tckv, &m.tkpe, &m.tidx, &m.tout, &m.tlse, s);
  FT_REQUIRE(gr.end(s, &g) == 0 && st == FI_OK, "%s", fi_last_error());
  FT_REQUIRE(gr.inst(&ge, g, 0) == 0);
  for (int B = 6; B >= 1; B -= 2) {
    fi_batch_mla_info ib = in;
    ib.batch = B;
    st = fi_batch_mla_paged_plan(rt, &ib, &m.tws, s, &plan);
    FT_CHECK(st == FI_OK, "re-plan B=%d: %s", B, fi_last_error());
    CU_CHECK(&cu, cuStreamSynchronize(s));
    poison(&c, &m);
    FT_REQUIRE(gr.launch(ge, s) == 0);
    CU_CHECK(&cu, cuStreamSynchronize(s));
    char what[32];
    snprintf(what, sizeof what, "graph replay B=%d", B);
    compare(&c, what, &m, B, 1);
  }
  gr.exec_destroy(ge);
  gr.destroy(g);
  CU_CHECK(&cu, cuStreamDestroy(s));
  fi_batch_mla_plan_destroy(plan);
  mfree(&m);
}

/* fi_append_paged_mla_kv_cache: new tokens of a ragged batch land in their page slots
 * (ckv and kpe, bit for bit), every other slot keeps its poison; then attention over the
 * appended cache matches the reference. */
FT_TEST(mla_append_then_attend) {
  FT_REQUIRE(setup() == 0);
  for (int v = 0; v < 3; v++) {
    const int dt = v > 0, fused = v == 2;
    static const int lq[4] = {1, 5, 1, 33}, lkv[4] = {40, 5, 129, 200};
    const mcase c = {fused ? "append, one 576 buffer" : "append", dt, 16, 16, 1, 4, lq, lkv, dt ? 1.5e-2 : 3e-3, fused};
    mbatch m;
    make(&c, &m, 0, 0);
    const int B = c.B, ps = c.ps;
    /* the appended tokens: the last lq[b] of each request, in order */
    int nnz = 0;
    for (int b = 0; b < B; b++) nnz += lq[b];
    int32_t *bi = malloc((size_t)nnz * 4), *pos = malloc((size_t)nnz * 4), *last = malloc((size_t)B * 4);
    uint16_t *ack = malloc((size_t)nnz * DC * 2), *akp = malloc((size_t)nnz * DP * 2);
    for (int b = 0, i = 0; b < B; b++) {
      const int np = m.kvp[b + 1] - m.kvp[b];
      last[b] = lkv[b] - (np - 1) * ps; /* (the spare page of request 1 makes it negative: unread) */
      for (int t = 0; t < lq[b]; t++, i++) {
        bi[i] = b;
        pos[i] = lkv[b] - lq[b] + t;
        const int64_t page = m.idx[m.kvp[b] + pos[i] / ps], slot = pos[i] % ps;
        memcpy(ack + (int64_t)i * DC, (uint16_t *)m.ckv + (page * ps + slot) * DC, DC * 2);
        memcpy(akp + (int64_t)i * DP, (uint16_t *)m.kpe + (page * ps + slot) * DP, DP * 2);
      }
    }
    /* the device cache: the host's with the appended slots poisoned (0xffff), then appended */
    uint16_t *ckv0 = malloc((size_t)(m.pages * ps * DC) * 2), *kpe0 = malloc((size_t)(m.pages * ps * DP) * 2);
    memcpy(ckv0, m.ckv, (size_t)(m.pages * ps * DC) * 2);
    memcpy(kpe0, m.kpe, (size_t)(m.pages * ps * DP) * 2);
    for (int i = 0; i < nnz; i++) {
      const int64_t page = m.idx[m.kvp[bi[i]] + pos[i] / ps], slot = pos[i] % ps;
      memset(ckv0 + (page * ps + slot) * DC, 0xff, DC * 2);
      memset(kpe0 + (page * ps + slot) * DP, 0xff, DP * 2);
    }
    put_cache(&m, ckv0, kpe0);
    CUdeviceptr dack, dakp, dbi, dpos, dkvp, dlast;
    CU_CHECK(&cu, cuMemAlloc(&dack, (size_t)nnz * DC * 2));
    CU_CHECK(&cu, cuMemAlloc(&dakp, (size_t)nnz * DP * 2));
    CU_CHECK(&cu, cuMemAlloc(&dbi, (size_t)nnz * 4));
    CU_CHECK(&cu, cuMemAlloc(&dpos, (size_t)nnz * 4));
    CU_CHECK(&cu, cuMemAlloc(&dkvp, (size_t)(B + 1) * 4));
    CU_CHECK(&cu, cuMemAlloc(&dlast, (size_t)B * 4));
    CU_CHECK(&cu, cuMemcpyHtoD(dack, ack, (size_t)nnz * DC * 2));
    CU_CHECK(&cu, cuMemcpyHtoD(dakp, akp, (size_t)nnz * DP * 2));
    CU_CHECK(&cu, cuMemcpyHtoD(dbi, bi, (size_t)nnz * 4));
    CU_CHECK(&cu, cuMemcpyHtoD(dpos, pos, (size_t)nnz * 4));
    CU_CHECK(&cu, cuMemcpyHtoD(dkvp, m.kvp, (size_t)(B + 1) * 4));
    CU_CHECK(&cu, cuMemcpyHtoD(dlast, last, (size_t)B * 4));
    int64_t sa[2] = {nnz, DC}, sp[2] = {nnz, DP}, sn[1] = {nnz}, sb1[1] = {B + 1}, sb[1] = {B};
    DLTensor tack = g_tensor(dack, 0, dt, 2, sa, NULL), takp = g_tensor(dakp, 0, dt, 2, sp, NULL);
    DLTensor tbi = g_tensor(dbi, 0, 2, 1, sn, NULL), tpos = g_tensor(dpos, 0, 2, 1, sn, NULL);
    DLTensor tkvp = g_tensor(dkvp, 0, 2, 1, sb1, NULL), tlast = g_tensor(dlast, 0, 2, 1, sb, NULL);
    tbi.dtype.code = tpos.dtype.code = tkvp.dtype.code = tlast.dtype.code = kDLInt;
    fi_status st = fi_append_paged_mla_kv_cache(rt, &tack, &takp, &tbi, &tpos, &m.tckv, &m.tkpe, &m.tidx, &tkvp,
                                                &tlast, NULL);
    FT_CHECK(st == FI_OK, "append: %s", fi_last_error());
    CU_CHECK(&cu, cuCtxSynchronize());
    get_cache(&m, ckv0, kpe0);
    const int same = memcmp(ckv0, m.ckv, (size_t)(m.pages * ps * DC) * 2) == 0 &&
                     memcmp(kpe0, m.kpe, (size_t)(m.pages * ps * DP) * 2) == 0;
    fprintf(stderr, "  %s %s %s: %d tokens into pages of %d: the cache %s\n", same ? "ok  " : "FAIL", c.name,
            g_dtname(dt), nnz, ps, same ? "equals the expected one bit for bit" : "differs");
    FT_CHECK(same);
    /* attention over the appended cache */
    poison(&c, &m);
    const fi_batch_mla_info in = info_of(&c, &m);
    fi_mla_plan *plan = NULL;
    FT_CHECK(run(&m, &plan, &in, NULL) == FI_OK, "%s", fi_last_error());
    CU_CHECK(&cu, cuCtxSynchronize());
    compare(&c, "attend after append", &m, B, 1);
    fi_batch_mla_plan_destroy(plan);
    CUdeviceptr fr[6] = {dack, dakp, dbi, dpos, dkvp, dlast};
    for (int i = 0; i < 6; i++) CU_CHECK(&cu, cuMemFree(fr[i]));
    free(bi), free(pos), free(last), free(ack), free(akp), free(ckv0), free(kpe0);
    mfree(&m);
  }
}
