/* gpu_sampling.c: the sampling ops on the GPU. softmax, renorm and mask against a float64
 * reference (poisoned outputs, odd and strided shapes, ties); the samplers by statistics
 * (>= 1M draws: no draw outside the allowed set, chi-square against the renormalized
 * distribution), determinism (seed, offset; independent of the batch and so of the cluster
 * size), an exact host replay of fi_sampling_from_probs, and the 128256 vocabulary at batch
 * 64 (8-CTA clusters on an H200). Every case prints its statistics. */
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
static CUstream stream;

static int setup(void) {
  if (rt) return 0;
  if (g_setup(&cu, &ctx, &rt, &seed) != 0) return -1;
  CU_CHECK(&cu, cuStreamCreate(&stream, 0));
  return 0;
}

/* FI_SAMPLING_SELECT is read at fi_runtime_create: after setting it, a test runs on a
 * runtime made then (env_rt_begin), and goes back to the binary's own once the stream is
 * done (env_rt_end: the variant's modules are unloaded). */
static fi_runtime *own_rt;
static int env_rt_begin(void) {
  if (setup() != 0) return -1;
  fi_runtime *v = g_runtime();
  if (!v) return -1;
  own_rt = rt;
  rt = v;
  return 0;
}
static void env_rt_end(void) {
  if (!own_rt) return;
  CU_CHECK(&cu, cuStreamSynchronize(stream));
  fi_runtime_destroy(rt);
  rt = own_rt;
  own_rt = NULL;
}

/* The samplers; the loops over every op run the first NSOPS (the last two are checked by
 * their statistics only). */
enum { OP_SAMPLE, OP_TOPK, OP_TOPP, OP_MINP, OP_KPL, NSOPS, OP_KPP = NSOPS, OP_SLOG, NALL };
static const char *const sop_names[NALL] = {"sampling_from_probs", "top_k_sampling",
                                            "top_p_sampling", "min_p_sampling",
                                            "top_k_top_p_from_logits", "top_k_top_p_from_probs",
                                            "sampling_from_logits"};

/* ---- host helpers ---- */

static uint32_t key_prob(float x) { return x > 0.0f ? g_f32_bits(x) : 0u; }
static uint32_t key_logit(float x) {
  uint32_t b = g_f32_bits(x);
  if (x != x) b = 0xff800000u;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
static int cmp_u32_desc(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}
/* The k-th largest key (k in [1, n]). */
static uint32_t kth_key(const uint32_t *keys, int64_t n, int64_t k) {
  uint32_t *s = malloc(sizeof *s * (size_t)n);
  memcpy(s, keys, sizeof *s * (size_t)n);
  qsort(s, (size_t)n, sizeof *s, cmp_u32_desc);
  uint32_t r = s[k - 1];
  free(s);
  return r;
}
static uint64_t fxd(double w) { return (uint64_t)llrint(w * 68719476736.0); }

typedef struct kw {
  uint32_t key;
  double w;
} kw;
static int cmp_kw_desc(const void *a, const void *b) {
  const kw *x = a, *y = b;
  return x->key < y->key ? 1 : x->key > y->key ? -1 : 0;
}
/* top-p threshold over elements with key >= lower, weights w (fixed point as the kernel);
 * *margin: distance (in units of the total) of the target from the nearest cumulative
 * boundary, for callers whose weights differ slightly from the kernel's. */
static uint32_t topp_key(const uint32_t *keys, const double *w, int64_t n, uint32_t lower,
                         float top_p, double *margin) {
  kw *a = malloc(sizeof *a * (size_t)n);
  int64_t m = 0;
  uint64_t tot = 0;
  for (int64_t i = 0; i < n; i++)
    if (keys[i] >= lower) {
      a[m].key = keys[i];
      a[m++].w = w[i];
      tot += fxd(w[i]);
    }
  if (margin) *margin = 1.0;
  if (!(top_p < 1.0f) || tot == 0) {
    free(a);
    return lower;
  }
  qsort(a, (size_t)m, sizeof *a, cmp_kw_desc);
  double x = ceil((double)top_p * (double)tot);
  uint64_t need = x < 1 ? 1 : x > (double)tot ? tot : (uint64_t)x;
  uint64_t cum = 0;
  uint32_t tau = lower;
  for (int64_t i = 0; i < m;) {
    int64_t j = i;
    uint64_t grp = 0;
    while (j < m && a[j].key == a[i].key) grp += fxd(a[j++].w);
    if (margin) {
      double d1 = fabs((double)cum - (double)need) / (double)tot,
             d2 = fabs((double)(cum + grp) - (double)need) / (double)tot;
      if (d1 < *margin) *margin = d1;
      if (d2 < *margin) *margin = d2;
    }
    cum += grp;
    if (cum >= need) {
      tau = a[i].key;
      break;
    }
    i = j;
  }
  free(a);
  return tau;
}

/* Host Philox4x32-10, for the replay of fi_sampling_from_probs. */
typedef struct u4 {
  uint32_t x, y, z, w;
} u4;
static u4 philox(u4 c, uint32_t k0, uint32_t k1) {
  for (int i = 0; i < 10; i++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c.x, p1 = (uint64_t)0xCD9E8D57u * c.z;
    u4 n = {(uint32_t)(p1 >> 32) ^ c.y ^ k0, (uint32_t)p1, (uint32_t)(p0 >> 32) ^ c.w ^ k1,
            (uint32_t)p0};
    c = n;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

/* A row of probabilities: shape 0 Zipf (exponent 1.1, shuffled), 1 ties (8 levels),
 * 2 one dominant element plus noise, 3 Zipf with zeros (a third of the row). */
static void make_probs(double *p, int64_t v, int shape) {
  double s = 0;
  for (int64_t i = 0; i < v; i++) {
    double x;
    if (shape == 1)
      x = (double)(1 + g_rand(&seed) % 8);
    else if (shape == 2)
      x = g_uniform(&seed) * 0.01;
    else
      x = pow((double)(i + 1), -1.1);
    if (shape == 3 && g_rand(&seed) % 3 == 0) x = 0;
    p[i] = x;
    s += x;
  }
  if (shape == 2) {
    int64_t j = (int64_t)(g_rand(&seed) % (uint64_t)v);
    p[j] += s;
    s += s;
  }
  for (int64_t i = v - 1; i > 0; i--) { /* shuffle */
    int64_t j = (int64_t)(g_rand(&seed) % (uint64_t)(i + 1));
    double t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  for (int64_t i = 0; i < v; i++) p[i] /= s;
}

static fi_status sample_call(int op, DLTensor *in, DLTensor *karr, int k, DLTensor *parr, double tp,
                             double mp, DLTensor *out, uint64_t sd, uint64_t off) {
  switch (op) {
    case OP_SAMPLE:
      return fi_sampling_from_probs(rt, in, out, sd, off, stream);
    case OP_TOPK:
      return fi_top_k_sampling_from_probs(rt, in, karr, k, out, sd, off, stream);
    case OP_TOPP:
      return fi_top_p_sampling_from_probs(rt, in, parr, tp, out, sd, off, stream);
    case OP_MINP:
      return fi_min_p_sampling_from_probs(rt, in, parr, mp, out, sd, off, stream);
    case OP_KPP:
      return fi_top_k_top_p_sampling_from_probs(rt, in, karr, k, parr, tp, out, sd, off, stream);
    case OP_SLOG:
      return fi_sampling_from_logits(rt, in, out, sd, off, stream);
    default:
      return fi_top_k_top_p_sampling_from_logits(rt, in, karr, k, parr, tp, out, sd, off, stream);
  }
}

/* The renormalized distribution q over the allowed set of one row of stored values x
 * (probabilities, or logits for OP_KPL); in[i] says whether i is allowed; *amb: the
 * top-p boundary of the logits case is within rounding (then boundary draws are allowed). */
static void expected(int op, const double *x, int64_t v, int k, float tp, float mp, double *q,
                     int *in, int *amb) {
  uint32_t *keys = malloc(sizeof *keys * (size_t)v);
  double *w = malloc(sizeof *w * (size_t)v);
  *amb = 0;
  double mx = -INFINITY;
  for (int64_t i = 0; i < v; i++) {
    keys[i] = op == OP_KPL || op == OP_SLOG ? key_logit((float)x[i]) : key_prob((float)x[i]);
    mx = fmax(mx, x[i]);
  }
  for (int64_t i = 0; i < v; i++)
    w[i] = op == OP_KPL || op == OP_SLOG ? exp(x[i] - mx) : (x[i] > 0 ? x[i] : 0);
  uint32_t tau = 0;
  float thr = 0;
  if ((op == OP_TOPK || op == OP_KPL || op == OP_KPP) && k > 0 && k < v) tau = kth_key(keys, v, k);
  if (op == OP_TOPP) tau = topp_key(keys, w, v, 0, tp, NULL);
  if (op == OP_KPP) tau = topp_key(keys, w, v, tau, tp, NULL); /* top-p within the top-k set */
  if (op == OP_KPL) {
    double margin;
    tau = topp_key(keys, w, v, tau, tp, &margin);
    *amb = margin < 1e-5;
  }
  if (op == OP_MINP) thr = (mp > 0 ? (mp < 1 ? mp : 1.0f) : 0.0f) * (float)mx;
  double s = 0;
  for (int64_t i = 0; i < v; i++) {
    in[i] = op == OP_MINP ? (float)w[i] >= thr : keys[i] >= tau;
    q[i] = in[i] ? w[i] : 0;
    s += q[i];
  }
  for (int64_t i = 0; i < v; i++) q[i] /= s;
  free(keys);
  free(w);
}

typedef struct stat {
  int64_t draws, outside, bad_index, bins;
  double chi2, tv, limit;
} stat;

/* Chi-square of counts against q (bins of expected count >= 20), and total variation. */
static void chi_square(const int64_t *cnt, const double *q, int64_t v, int64_t n, stat *s) {
  int64_t *idx = malloc(sizeof *idx * (size_t)v);
  int64_t m = 0;
  for (int64_t i = 0; i < v; i++)
    if (q[i] > 0) idx[m++] = i;
  double chi = 0, eacc = 0, oacc = 0, tv = 0;
  int64_t bins = 0;
  for (int64_t j = 0; j < m; j++) {
    const int64_t i = idx[j];
    eacc += q[i] * (double)n;
    oacc += (double)cnt[i];
    tv += fabs((double)cnt[i] / (double)n - q[i]);
    if (eacc >= 20 || j == m - 1) {
      chi += (oacc - eacc) * (oacc - eacc) / (eacc > 0 ? eacc : 1);
      bins++;
      eacc = oacc = 0;
    }
  }
  s->chi2 = chi;
  s->bins = bins;
  s->tv = 0.5 * tv;
  const double df = bins > 1 ? (double)(bins - 1) : 1.0;
  s->limit = df + 6.0 * sqrt(2.0 * df) + 10.0;
  free(idx);
}

/* Runs op on `batch` identical rows of x (stored as dt) for enough calls to draw at least
 * ndraws, offsets off0, off0 + 1, ...; checks the draws against q. */
static void stats_case(const char *label, int op, int dt, const double *x, int64_t v, int64_t batch,
                       int k, float tp, float mp, int64_t ndraws) {
  const int es = g_esize(dt);
  unsigned char *h = malloc((size_t)(v * es));
  double *xs = malloc(sizeof *xs * (size_t)v);
  for (int64_t i = 0; i < v; i++) xs[i] = g_put(h, dt, i, x[i]);
  CUdeviceptr din, dout;
  CU_CHECK(&cu, cuMemAlloc(&din, (size_t)(batch * v * es)));
  for (int64_t b = 0; b < batch; b++)
    CU_CHECK(&cu, cuMemcpyHtoD(din + (size_t)(b * v * es), h, (size_t)(v * es)));
  const int64_t calls = (ndraws + batch - 1) / batch, n = calls * batch;
  CU_CHECK(&cu, cuMemAlloc(&dout, (size_t)n * 4));
  CU_CHECK(&cu, cuMemsetD8(dout, 0xee, (size_t)n * 4));
  int64_t shape[2] = {batch, v}, sshape[1] = {batch};
  DLTensor tin = g_tensor(din, 0, dt, 2, shape, NULL);
  fi_status st = FI_OK;
  const uint64_t sd = g_rand(&seed), off0 = g_rand(&seed);
  for (int64_t c = 0; c < calls && st == FI_OK; c++) {
    DLTensor to = g_tensor(dout, c * batch * 4, 2, 1, sshape, NULL);
    to.dtype.code = kDLInt;
    st = sample_call(op, &tin, NULL, k, NULL, tp, mp, &to, sd, off0 + (uint64_t)c);
  }
  FT_CHECK(st == FI_OK, "%s: %s", label, fi_last_error());
  CU_CHECK(&cu, cuStreamSynchronize(stream));
  int32_t *hs = malloc((size_t)n * 4);
  CU_CHECK(&cu, cuMemcpyDtoH(hs, dout, (size_t)n * 4));
  double *q = malloc(sizeof *q * (size_t)v);
  int *in = malloc(sizeof *in * (size_t)v);
  int amb = 0;
  expected(op, xs, v, k, tp, mp, q, in, &amb);
  int64_t *cnt = calloc((size_t)v, sizeof *cnt), setsize = 0;
  for (int64_t i = 0; i < v; i++) setsize += in[i];
  stat s = {n, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    if (hs[i] < 0 || hs[i] >= v) {
      s.bad_index++;
      continue;
    }
    if (!in[hs[i]] || q[hs[i]] == 0) s.outside++;
    cnt[hs[i]]++;
  }
  chi_square(cnt, q, v, n - s.bad_index, &s);
  fprintf(stderr,
          "  %-24s %-4s %-26s vocab %6lld batch %4lld: %lld draws, set %lld, outside %lld, bad "
          "%lld, chi2 %.1f over %lld bins (limit %.1f), TV %.4f%s\n",
          sop_names[op], g_dtname(dt), label, (long long)v, (long long)batch, (long long)n,
          (long long)setsize, (long long)s.outside, (long long)s.bad_index, s.chi2,
          (long long)s.bins, s.limit, s.tv, amb ? " (boundary within rounding)" : "");
  FT_CHECK(s.bad_index == 0, "%s %s: %lld draws out of range", sop_names[op], label,
           (long long)s.bad_index);
  FT_CHECK(s.outside == 0 || amb, "%s %s: %lld draws outside the allowed set", sop_names[op], label,
           (long long)s.outside);
  FT_CHECK(s.chi2 < s.limit, "%s %s: chi-square %.1f over %lld bins exceeds %.1f", sop_names[op],
           label, s.chi2, (long long)s.bins, s.limit);
  free(cnt);
  free(q);
  free(in);
  free(hs);
  free(h);
  free(xs);
  CU_CHECK(&cu, cuMemFree(din));
  CU_CHECK(&cu, cuMemFree(dout));
}

/* ---- tests ---- */

FT_TEST(smp_host_philox_known_answers) {
  u4 a = philox((u4){0, 0, 0, 0}, 0, 0);
  u4 b = philox((u4){~0u, ~0u, ~0u, ~0u}, ~0u, ~0u);
  fprintf(stderr, "  philox(0) = %08x %08x %08x %08x; philox(ff) = %08x %08x %08x %08x\n", a.x, a.y,
          a.z, a.w, b.x, b.y, b.z, b.w);
  FT_CHECK(a.x == 0x6627e8d5u && a.y == 0xe169c58du && a.z == 0xbc57ac4cu && a.w == 0x9b00dbd8u,
           "Random123 philox4x32_10 zero vector");
  FT_CHECK(b.x == 0x408f276du && b.y == 0x41c83b0eu && b.z == 0xa20bc7c6u && b.w == 0x6d5451fdu,
           "Random123 philox4x32_10 all-ones vector");
}

/* 1M+ draws per op at vocab 1000 (batch 1024: one CTA per row), several shapes. */
FT_TEST(smp_statistics_small_vocab) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  const int64_t v = 1000;
  double *p = malloc(sizeof *p * (size_t)v), *l = malloc(sizeof *l * (size_t)v);
  for (int shape = 0; shape < 4; shape++) {
    make_probs(p, v, shape);
    for (int64_t i = 0; i < v; i++) l[i] = log(p[i] > 0 ? p[i] : 1e-30) * 0.9 + 0.3;
    static const char *const sn[4] = {"zipf", "ties", "dominant", "zipf+zeros"};
    stats_case(sn[shape], OP_SAMPLE, 2, p, v, 1024, 0, 1, 0, 1000000);
    stats_case(sn[shape], OP_TOPK, 2, p, v, 1024, 50, 1, 0, 1000000);
    stats_case(sn[shape], OP_TOPP, 2, p, v, 1024, 0, 0.9f, 0, 1000000);
    stats_case(sn[shape], OP_MINP, 2, p, v, 1024, 0, 1, 0.05f, 1000000);
    stats_case(sn[shape], OP_KPL, 2, l, v, 1024, 50, 0.9f, 0, 1000000);
  }
  /* 16-bit inputs, and the filters at their extremes. */
  make_probs(p, v, 0);
  for (int64_t i = 0; i < v; i++) l[i] = log(p[i]);
  stats_case("zipf", OP_TOPK, 1, p, v, 1024, 10, 1, 0, 1000000);
  stats_case("zipf", OP_TOPP, 0, p, v, 1024, 0, 0.5f, 0, 1000000);
  stats_case("zipf", OP_KPL, 1, l, v, 1024, 20, 0.8f, 0, 1000000);
  stats_case("zipf k=1", OP_TOPK, 2, p, v, 1024, 1, 1, 0, 200000);
  stats_case("zipf k=999", OP_TOPK, 2, p, v, 1024, 999, 1, 0, 1000000);
  stats_case("zipf p=1e-6", OP_TOPP, 2, p, v, 1024, 0, 1e-6f, 0, 200000);
  stats_case("zipf p=0.999", OP_TOPP, 2, p, v, 1024, 0, 0.999f, 0, 1000000);
  stats_case("zipf no filters", OP_KPL, 2, l, v, 1024, 0, 1.0f, 0, 1000000);
  stats_case("zipf top-p only", OP_KPL, 2, l, v, 1024, 0, 0.7f, 0, 1000000);
  stats_case("zipf min_p=1", OP_MINP, 2, p, v, 1024, 0, 1, 1.0f, 200000);
  /* top-k then top-p over probabilities, and softmax-then-draw from logits (issue 45) */
  for (int shape = 0; shape < 4; shape++) {
    make_probs(p, v, shape);
    for (int64_t i = 0; i < v; i++) l[i] = log(p[i] > 0 ? p[i] : 1e-30) * 0.9 + 0.3;
    static const char *const sn[4] = {"zipf", "ties", "dominant", "zipf+zeros"};
    stats_case(sn[shape], OP_KPP, 2, p, v, 1024, 50, 0.9f, 0, 1000000);
    stats_case(sn[shape], OP_SLOG, 2, l, v, 1024, 0, 1, 0, 1000000);
  }
  make_probs(p, v, 0);
  for (int64_t i = 0; i < v; i++) l[i] = log(p[i]);
  stats_case("zipf", OP_KPP, 1, p, v, 1024, 20, 0.8f, 0, 1000000);
  stats_case("zipf top-p only", OP_KPP, 2, p, v, 1024, 0, 0.7f, 0, 1000000);
  stats_case("zipf top-k only", OP_KPP, 2, p, v, 1024, 30, 1.0f, 0, 1000000);
  stats_case("zipf", OP_SLOG, 0, l, v, 1024, 0, 1, 0, 1000000);
  free(p);
  free(l);
}

/* The benchmark's shape: vocab 128256 at batch 64 (8-CTA clusters on an H200), and batch
 * 100 (4-CTA clusters). */
FT_TEST(smp_statistics_large_vocab) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  const int64_t v = 128256;
  double *p = malloc(sizeof *p * (size_t)v), *l = malloc(sizeof *l * (size_t)v);
  make_probs(p, v, 0);
  for (int64_t i = 0; i < v; i++) l[i] = log(p[i]);
  stats_case("zipf", OP_SAMPLE, 2, p, v, 64, 0, 1, 0, 1000000);
  stats_case("zipf", OP_TOPK, 2, p, v, 64, 50, 1, 0, 1000000);
  stats_case("zipf", OP_TOPP, 2, p, v, 64, 0, 0.9f, 0, 1000000);
  stats_case("zipf", OP_MINP, 2, p, v, 64, 0, 1, 0.05f, 1000000);
  stats_case("zipf", OP_KPL, 2, l, v, 64, 50, 0.9f, 0, 1000000);
  stats_case("zipf", OP_KPP, 2, p, v, 64, 50, 0.9f, 0, 1000000);
  stats_case("zipf", OP_SLOG, 2, l, v, 64, 0, 1, 0, 1000000);
  stats_case("zipf batch 100", OP_TOPP, 2, p, v, 100, 0, 0.5f, 0, 1000000);
  stats_case("zipf batch 100", OP_TOPK, 1, p, v, 100, 1000, 1, 0, 1000000);
  make_probs(p, v, 1);
  stats_case("ties", OP_TOPK, 2, p, v, 64, 50, 1, 0, 300000);
  free(p);
  free(l);
}

/* Same seed and offset: the same draws, whatever the batch (so the cluster size: 1, 4
 * or 8 CTAs per row); another offset: other draws. And the exact host replay of
 * fi_sampling_from_probs (the algorithm of kernels/sampling.cuh in double-checked float). */
FT_TEST(smp_determinism_and_replay) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  const int64_t v = 128256, maxb = 600;
  double *p = malloc(sizeof *p * (size_t)v);
  float *hrow = malloc(sizeof *hrow * (size_t)(v * 8));
  for (int r = 0; r < 8; r++) {
    make_probs(p, v, r % 4);
    for (int64_t i = 0; i < v; i++) hrow[r * v + i] = (float)p[i];
  }
  CUdeviceptr din, dout;
  CU_CHECK(&cu, cuMemAlloc(&din, (size_t)(maxb * v * 4)));
  for (int64_t b = 0; b < maxb; b++)
    CU_CHECK(&cu, cuMemcpyHtoD(din + (size_t)(b * v * 4), hrow + (b % 8) * v, (size_t)v * 4));
  CU_CHECK(&cu, cuMemAlloc(&dout, (size_t)maxb * 4));
  const int64_t batches[3] = {8, 100, 600};
  const uint64_t sd = g_rand(&seed);
  int32_t ref[5][8], got[600];
  int64_t diff_geom = 0, diff_off = 0, same_off = 0, replay_ok = 0, replay_n = 0;
  for (int op = 0; op < NSOPS; op++) {
    for (int bi = 0; bi < 3; bi++) {
      int64_t shape[2] = {batches[bi], v}, sshape[1] = {batches[bi]};
      DLTensor tin = g_tensor(din, 0, 2, 2, shape, NULL);
      DLTensor to = g_tensor(dout, 0, 2, 1, sshape, NULL);
      to.dtype.code = kDLInt;
      for (int rep = 0; rep < 2; rep++) {
        CU_CHECK(&cu, cuMemsetD8(dout, 0xee, (size_t)maxb * 4));
        fi_status st =
            sample_call(op, &tin, NULL, 50, NULL, 0.9, 0.05, &to, sd, 77 + (uint64_t)rep);
        FT_CHECK(st == FI_OK, "%s: %s", sop_names[op], fi_last_error());
        CU_CHECK(&cu, cuStreamSynchronize(stream));
        CU_CHECK(&cu, cuMemcpyDtoH(got, dout, (size_t)batches[bi] * 4));
        for (int r = 0; r < 8; r++) {
          if (rep == 0 && bi == 0) ref[op][r] = got[r];
          if (rep == 0) diff_geom += got[r] != ref[op][r];
          if (rep == 1 && bi == 0) *(got[r] != ref[op][r] ? &diff_off : &same_off) += 1;
        }
      }
    }
  }
  /* Replay: the rows' draws of fi_sampling_from_probs at offset 77 from the host. */
  for (int r = 0; r < 8; r++) {
    const float *x = hrow + r * v;
    uint64_t best = ~0ull;
    for (int64_t tile = 0; tile * 512 < v; tile++)
      for (uint32_t lane = 0; lane < 32; lane++) {
        float w[16], S = 0;
        int last = 0;
        int64_t e[16];
        for (int i = 0; i < 16; i++) {
          e[i] = tile * 512 + (i >> 2) * 128 + lane * 4 + (i & 3);
          w[i] = e[i] < v && x[e[i]] > 0 ? x[e[i]] : 0.0f;
          S += w[i];
          if (w[i] > 0) last = i;
        }
        if (!(S > 0)) continue;
        u4 c = {(uint32_t)tile * 32u + lane, (uint32_t)r, 77, 0};
        u4 rr = philox(c, (uint32_t)sd, (uint32_t)(sd >> 32));
        float u = (float)(rr.x >> 8) * 5.9604644775390625e-8f;
        float ex = -logf((float)((rr.y >> 8) + 1u) * 5.9604644775390625e-8f);
        float t = u * S, cum = 0;
        int pick = last, found = 0;
        for (int i = 0; i < 16; i++) {
          cum += w[i];
          if (!found && cum > t) pick = i, found = 1;
        }
        float key = ex / S;
        uint32_t kb;
        memcpy(&kb, &key, 4);
        uint64_t cand = ((uint64_t)kb << 32) | (uint32_t)e[pick];
        if (cand < best) best = cand;
      }
    replay_n++;
    replay_ok += (int32_t)(uint32_t)best == ref[OP_SAMPLE][r];
    if ((int32_t)(uint32_t)best != ref[OP_SAMPLE][r])
      fprintf(stderr, "  replay row %d: host %d, device %d\n", r, (int)(uint32_t)best,
              ref[OP_SAMPLE][r]);
  }
  fprintf(stderr,
          "  determinism: %lld draws differ across batch 8/100/600 (want 0); offset 77 vs 78: "
          "%lld differ, %lld same; host replay %lld of %lld rows\n",
          (long long)diff_geom, (long long)diff_off, (long long)same_off, (long long)replay_ok,
          (long long)replay_n);
  FT_CHECK(diff_geom == 0, "%lld draws depend on the batch size", (long long)diff_geom);
  FT_CHECK(diff_off >= 10, "a new offset changed only %lld of 40 draws", (long long)diff_off);
  FT_CHECK(replay_ok == replay_n, "host replay matched %lld of %lld", (long long)replay_ok,
           (long long)replay_n);
  /* Same call twice on the whole batch of 600: identical. */
  {
    int64_t shape[2] = {600, v}, sshape[1] = {600};
    DLTensor tin = g_tensor(din, 0, 2, 2, shape, NULL), to = g_tensor(dout, 0, 2, 1, sshape, NULL);
    to.dtype.code = kDLInt;
    int32_t a[600], b[600];
    for (int op = 0; op < NSOPS; op++) {
      FT_CHECK(sample_call(op, &tin, NULL, 50, NULL, 0.9, 0.05, &to, 5, 9) == FI_OK, "%s",
               fi_last_error());
      CU_CHECK(&cu, cuMemcpyDtoH(a, dout, sizeof a));
      FT_CHECK(sample_call(op, &tin, NULL, 50, NULL, 0.9, 0.05, &to, 5, 9) == FI_OK, "%s",
               fi_last_error());
      CU_CHECK(&cu, cuMemcpyDtoH(b, dout, sizeof b));
      FT_CHECK(memcmp(a, b, sizeof a) == 0, "%s: two identical calls differ", sop_names[op]);
    }
  }
  free(p);
  free(hrow);
  CU_CHECK(&cu, cuMemFree(din));
  CU_CHECK(&cu, cuMemFree(dout));
}

/* Per-row parameters (arrays), edge rows (all zero: -1; one nonzero: that index), strided
 * and misaligned rows: every draw in its row's set, over 2000 offsets. */
FT_TEST(smp_per_row_parameters_and_edges) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  const int64_t v = 4099, B = 12, stride = 4103, off_el = 1;
  double *rows = malloc(sizeof *rows * (size_t)(B * v));
  for (int64_t b = 0; b < B; b++) make_probs(rows + b * v, v, (int)(b % 4));
  for (int64_t i = 0; i < v; i++) rows[0 * v + i] = 0;                   /* all zero */
  for (int64_t i = 0; i < v; i++) rows[1 * v + i] = i == 4098 ? 0.3 : 0; /* one nonzero, last */
  int32_t ks[12] = {5, 5, 1, 0, 4099, 5000, 50, 7, 100, -3, 2, 4098};
  float tps[12] = {0.9f, 0.5f, 0.0f, 1.0f, 2.0f, 0.3f, 0.99f, 0.1f, 0.95f, -1.0f, 0.6f, NAN};
  float mps[12] = {0.1f, 0.0f, 1.0f, 0.5f, 0.01f, -1.0f, 2.0f, 0.2f, 0.3f, 0.05f, 0.7f, NAN};
  for (int dt = 0; dt < 3; dt++) {
    const int es = g_esize(dt);
    const int64_t elems = off_el + (B - 1) * stride + v;
    unsigned char *h = malloc((size_t)(elems * es));
    double *xs = malloc(sizeof *xs * (size_t)(B * v));
    for (int64_t i = 0; i < elems; i++) g_put(h, dt, i, 0.5);
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < v; i++)
        xs[b * v + i] = g_put(h, dt, off_el + b * stride + i, rows[b * v + i]);
    CUdeviceptr din, dk, dp, dm, dout;
    CU_CHECK(&cu, cuMemAlloc(&din, (size_t)(elems * es)));
    CU_CHECK(&cu, cuMemcpyHtoD(din, h, (size_t)(elems * es)));
    CU_CHECK(&cu, cuMemAlloc(&dk, sizeof ks));
    CU_CHECK(&cu, cuMemAlloc(&dp, sizeof tps));
    CU_CHECK(&cu, cuMemAlloc(&dm, sizeof mps));
    CU_CHECK(&cu, cuMemcpyHtoD(dk, ks, sizeof ks));
    CU_CHECK(&cu, cuMemcpyHtoD(dp, tps, sizeof tps));
    CU_CHECK(&cu, cuMemcpyHtoD(dm, mps, sizeof mps));
    const int calls = 2000;
    CU_CHECK(&cu, cuMemAlloc(&dout, (size_t)(calls * B * 4)));
    int64_t shape[2] = {B, v}, strides[2] = {stride, 1}, bshape[1] = {B};
    DLTensor tin = g_tensor(din, off_el * es, dt, 2, shape, strides);
    DLTensor tk = g_tensor(dk, 0, 2, 1, bshape, NULL), tp = g_tensor(dp, 0, 2, 1, bshape, NULL),
             tm = g_tensor(dm, 0, 2, 1, bshape, NULL);
    tk.dtype.code = kDLInt;
    int32_t *hs = malloc((size_t)(calls * B * 4));
    for (int op = 0; op < NSOPS; op++) {
      fi_status st = FI_OK;
      for (int c = 0; c < calls && st == FI_OK; c++) {
        DLTensor to = g_tensor(dout, (int64_t)c * B * 4, 2, 1, bshape, NULL);
        to.dtype.code = kDLInt;
        st = op == OP_KPL ? fi_top_k_top_p_sampling_from_logits(rt, &tin, &tk, 0, &tp, 1.0, &to, 3,
                                                                (uint64_t)c, stream)
                          : sample_call(op, &tin, &tk, 0, op == OP_MINP ? &tm : &tp, 1.0, 0.0, &to,
                                        3, (uint64_t)c);
      }
      FT_CHECK(st == FI_OK, "%s %s: %s", sop_names[op], g_dtname(dt), fi_last_error());
      CU_CHECK(&cu, cuStreamSynchronize(stream));
      CU_CHECK(&cu, cuMemcpyDtoH(hs, dout, (size_t)(calls * B * 4)));
      int64_t outside = 0, wrong_edge = 0;
      double *q = malloc(sizeof *q * (size_t)v);
      int *in = malloc(sizeof *in * (size_t)v);
      for (int64_t b = 0; b < B; b++) {
        int amb = 0;
        /* For the logits sampler the same stored values are the logits. */
        const double *x = xs + b * v;
        expected(op, x, v, ks[b], tps[b], mps[b], q, in, &amb);
        int64_t setn = 0;
        for (int64_t i = 0; i < v; i++) setn += in[i] && q[i] > 0;
        for (int c = 0; c < calls; c++) {
          int32_t s = hs[(int64_t)c * B + b];
          if (b == 0 && op != OP_KPL) {
            wrong_edge += s != -1;
            continue;
          }
          if (b == 1 && op != OP_KPL) {
            wrong_edge += s != 4098;
            continue;
          }
          if (s < 0 || s >= v || (!(in[s] && q[s] > 0) && !amb)) outside++;
        }
        (void)setn;
      }
      fprintf(stderr,
              "  per-row %-24s %-4s: %d calls x %lld rows, %lld outside, %lld wrong edge rows\n",
              sop_names[op], g_dtname(dt), calls, (long long)B, (long long)outside,
              (long long)wrong_edge);
      FT_CHECK(outside == 0 && wrong_edge == 0, "%s %s: %lld outside, %lld wrong edge draws",
               sop_names[op], g_dtname(dt), (long long)outside, (long long)wrong_edge);
      free(q);
      free(in);
    }
    free(hs);
    free(h);
    free(xs);
    CU_CHECK(&cu, cuMemFree(din));
    CU_CHECK(&cu, cuMemFree(dk));
    CU_CHECK(&cu, cuMemFree(dp));
    CU_CHECK(&cu, cuMemFree(dm));
    CU_CHECK(&cu, cuMemFree(dout));
  }
  free(rows);
}

/* ---- softmax, renorm, mask against float64 ---- */

enum { D_SOFTMAX, D_KRENORM, D_PRENORM, D_KMASK };
static const char *const d_names[4] = {"softmax", "top_k_renorm_probs", "top_p_renorm_probs",
                                       "top_k_mask_logits"};

/* One case: B rows of v (row stride `stride`, `off` elements in), per-row parameters from
 * arrays when use_arr; out poisoned (0xff) including the gaps, which must stay poisoned. */
static void dense_case(int op, int dt, int64_t B, int64_t v, int64_t stride, int64_t off, int shape,
                       int use_arr, int k, double tp, double temp) {
  const int es = g_esize(dt), oes = op == D_SOFTMAX ? 4 : es, odt = op == D_SOFTMAX ? 2 : dt;
  const int64_t elems = off + (B - 1) * stride + v;
  unsigned char *h = malloc((size_t)(elems * es)), *ho = malloc((size_t)(elems * oes));
  double *x = malloc(sizeof *x * (size_t)(B * v)), *row = malloc(sizeof *row * (size_t)v);
  for (int64_t i = 0; i < elems; i++) g_put(h, dt, i, 0.25);
  int32_t *ks = malloc(sizeof *ks * (size_t)B);
  float *ps = malloc(sizeof *ps * (size_t)B);
  for (int64_t b = 0; b < B; b++) {
    make_probs(row, v, (int)((b + shape) % 4));
    for (int64_t i = 0; i < v; i++) {
      double val = row[i];
      if (op == D_SOFTMAX || op == D_KMASK) val = row[i] > 0 ? log(row[i]) * 1.3 : -INFINITY;
      if (op == D_SOFTMAX && row[i] == 0) val = -50.0;
      x[b * v + i] = g_put(h, dt, off + b * stride + i, val);
    }
    ks[b] = use_arr ? (int32_t)((b * 37) % (v + 3)) : k;
    ps[b] = use_arr ? (op == D_SOFTMAX ? (float)(0.3 + 0.2 * (double)b)
                                       : (float)((double)(b % 10) / 9.0))
                    : (float)(op == D_SOFTMAX ? temp : tp);
  }
  CUdeviceptr din, dout, darr;
  CU_CHECK(&cu, cuMemAlloc(&din, (size_t)(elems * es)));
  CU_CHECK(&cu, cuMemAlloc(&dout, (size_t)(elems * oes)));
  CU_CHECK(&cu, cuMemAlloc(&darr, (size_t)B * 4 + 4));
  CU_CHECK(&cu, cuMemcpyHtoD(din, h, (size_t)(elems * es)));
  CU_CHECK(&cu, cuMemsetD8(dout, 0xff, (size_t)(elems * oes)));
  if (op == D_KRENORM || op == D_KMASK)
    CU_CHECK(&cu, cuMemcpyHtoD(darr, ks, (size_t)B * 4));
  else
    CU_CHECK(&cu, cuMemcpyHtoD(darr, ps, (size_t)B * 4));
  int64_t shp[2] = {B, v}, str[2] = {stride, 1}, ashape[1] = {B};
  DLTensor tin = g_tensor(din, off * es, dt, 2, shp, str);
  DLTensor tout = g_tensor(dout, off * oes, odt, 2, shp, str);
  DLTensor tarr = g_tensor(darr, 0, 2, 1, ashape, NULL);
  if (op == D_KRENORM || op == D_KMASK) tarr.dtype.code = kDLInt;
  const DLTensor *arr = use_arr ? &tarr : NULL;
  fi_status st;
  if (op == D_SOFTMAX)
    st = fi_softmax(rt, &tin, arr, temp, &tout, stream);
  else if (op == D_KRENORM)
    st = fi_top_k_renorm_probs(rt, &tin, arr, k, &tout, stream);
  else if (op == D_PRENORM)
    st = fi_top_p_renorm_probs(rt, &tin, arr, tp, &tout, stream);
  else
    st = fi_top_k_mask_logits(rt, &tin, arr, k, &tout, stream);
  FT_CHECK(st == FI_OK, "%s: %s", d_names[op], fi_last_error());
  CU_CHECK(&cu, cuStreamSynchronize(stream));
  CU_CHECK(&cu, cuMemcpyDtoH(ho, dout, (size_t)(elems * oes)));
  double num = 0, den = 0;
  int64_t unwritten = 0, gaps = 0, set_wrong = 0;
  uint32_t *keys = malloc(sizeof *keys * (size_t)v);
  double *w = malloc(sizeof *w * (size_t)v);
  for (int64_t b = 0; b < B && st == FI_OK; b++) {
    const double *xr = x + b * v;
    double ref_s = 0, mx = -INFINITY;
    uint32_t tau = 0;
    const int kk = ks[b];
    for (int64_t i = 0; i < v; i++) {
      keys[i] = op == D_KMASK ? key_logit((float)xr[i]) : key_prob((float)xr[i]);
      w[i] = xr[i] > 0 ? xr[i] : 0;
      mx = fmax(mx, xr[i]);
    }
    if ((op == D_KRENORM || op == D_KMASK) && kk > 0 && kk < v) tau = kth_key(keys, v, kk);
    if (op == D_PRENORM) tau = topp_key(keys, w, v, 0, ps[b], NULL);
    const double it = op == D_SOFTMAX ? 1.0 / (double)ps[b] : 1.0;
    if (op == D_SOFTMAX)
      for (int64_t i = 0; i < v; i++) ref_s += exp((xr[i] - mx) * it);
    else
      for (int64_t i = 0; i < v; i++) ref_s += keys[i] >= tau ? w[i] : 0;
    for (int64_t i = 0; i < v; i++) {
      const double got = g_get(ho, odt, off + b * stride + i);
      double ref;
      if (op == D_SOFTMAX)
        ref = exp((xr[i] - mx) * it) / ref_s;
      else if (op == D_KMASK)
        ref = keys[i] >= tau ? xr[i] : -INFINITY;
      else
        ref = keys[i] >= tau && ref_s > 0 ? w[i] / ref_s : 0;
      if (got != got) {
        unwritten++;
        continue;
      }
      if (op == D_KMASK) {
        set_wrong += !(got == ref || (isinf(got) && isinf(ref) && got < 0 && ref < 0));
        continue;
      }
      if (op != D_SOFTMAX) set_wrong += (keys[i] >= tau) != (got != 0) && w[i] > 1e-3 * ref_s;
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
    if (b + 1 < B)
      for (int64_t i = v; i < stride; i++) {
        const int64_t e = off + b * stride + i;
        for (int q = 0; q < oes; q++) gaps += ho[e * oes + q] != 0xff;
      }
  }
  const double err = den > 0 ? sqrt(num / den) : 0;
  const double tol = op == D_SOFTMAX || dt == 2 ? 2e-5 : dt == 0 ? 2e-3 : 1e-2;
  fprintf(stderr,
          "  %-20s %-4s %4lld x %6lld stride %6lld off %lld arr %d k %d p %.2f: err %.3g, "
          "unwritten %lld, gaps changed %lld, set wrong %lld\n",
          d_names[op], g_dtname(dt), (long long)B, (long long)v, (long long)stride, (long long)off,
          use_arr, k, tp, err, (long long)unwritten, (long long)gaps, (long long)set_wrong);
  FT_CHECK(err < tol && unwritten == 0 && gaps == 0 && set_wrong == 0,
           "%s %s %lldx%lld: err %.3g, unwritten %lld, gaps %lld, set wrong %lld", d_names[op],
           g_dtname(dt), (long long)B, (long long)v, err, (long long)unwritten, (long long)gaps,
           (long long)set_wrong);
  free(keys);
  free(w);
  free(h);
  free(ho);
  free(x);
  free(row);
  free(ks);
  free(ps);
  CU_CHECK(&cu, cuMemFree(din));
  CU_CHECK(&cu, cuMemFree(dout));
  CU_CHECK(&cu, cuMemFree(darr));
}

FT_TEST(smp_softmax_renorm_mask) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  for (int op = 0; op < 4; op++)
    for (int dt = 0; dt < 3; dt++) {
      dense_case(op, dt, 1, 1, 1, 0, 0, 0, 1, 0.9, 1.0);
      dense_case(op, dt, 3, 1001, 1001, 0, 0, 0, 50, 0.9, 0.7);
      dense_case(op, dt, 7, 4097, 4100, 1, 1, 0, 7, 0.5, 1.3);
      dense_case(op, dt, 33, 32000, 32000, 0, 2, 1, 0, 0.0, 1.0);
      dense_case(op, dt, 64, 128256, 128256, 0, 0, 0, 50, 0.9, 1.0);
      dense_case(op, dt, 100, 128256, 128260, 0, 3, 1, 0, 0.0, 1.0);
    }
  /* Ties and the extremes of k and p on float32. */
  dense_case(D_KRENORM, 2, 64, 128256, 128256, 0, 1, 0, 1000, 0.9, 1.0);
  dense_case(D_KMASK, 2, 64, 128256, 128256, 0, 1, 0, 1, 0.9, 1.0);
  dense_case(D_KMASK, 2, 5, 1000, 1000, 0, 1, 0, 999, 0.9, 1.0);
  dense_case(D_PRENORM, 2, 64, 128256, 128256, 0, 1, 0, 1, 0.999, 1.0);
  dense_case(D_PRENORM, 2, 64, 128256, 128256, 0, 0, 0, 1, 1e-4, 1.0);
}

/* ---- the key-range threshold search (FI_SAMPLING_SELECT=range) against the radix one ----
 * Both must find the same thresholds, so every sampler draws the same tokens for the same
 * seed and offset, and renorm / mask write the same bits. Rows mix the shapes (ties,
 * zeros; -inf logits where a probability is 0), per-row k and p from arrays. */
static void select_variants_case(int dt, int64_t B, int64_t v, int arrays) {
  const int es = g_esize(dt);
  double *p = malloc(sizeof *p * (size_t)v);
  unsigned char *hp = malloc((size_t)(B * v * es)), *hl = malloc((size_t)(B * v * es));
  for (int64_t b = 0; b < B; b++) {
    make_probs(p, v, (int)(b % 4));
    for (int64_t i = 0; i < v; i++) {
      g_put(hp, dt, b * v + i, p[i]);
      g_put(hl, dt, b * v + i, p[i] > 0 ? log(p[i]) : -INFINITY);
    }
  }
  int32_t *ks = malloc(sizeof *ks * (size_t)B);
  float *ps = malloc(sizeof *ps * (size_t)B);
  for (int64_t b = 0; b < B; b++) {
    ks[b] = (int32_t)((b * 7919) % (v + 2)) - 1; /* -1 .. v */
    ps[b] = (float)((double)(b % 11) / 10.0);    /* 0 .. 1 */
  }
  CUdeviceptr dp, dl, dout, ds, dk, dpp;
  const size_t bytes = (size_t)(B * v * es);
  CU_CHECK(&cu, cuMemAlloc(&dp, bytes));
  CU_CHECK(&cu, cuMemAlloc(&dl, bytes));
  CU_CHECK(&cu, cuMemAlloc(&dout, bytes));
  CU_CHECK(&cu, cuMemAlloc(&ds, (size_t)B * 4));
  CU_CHECK(&cu, cuMemAlloc(&dk, (size_t)B * 4));
  CU_CHECK(&cu, cuMemAlloc(&dpp, (size_t)B * 4));
  CU_CHECK(&cu, cuMemcpyHtoD(dp, hp, bytes));
  CU_CHECK(&cu, cuMemcpyHtoD(dl, hl, bytes));
  CU_CHECK(&cu, cuMemcpyHtoD(dk, ks, (size_t)B * 4));
  CU_CHECK(&cu, cuMemcpyHtoD(dpp, ps, (size_t)B * 4));
  int64_t shape[2] = {B, v}, bshape[1] = {B};
  DLTensor tp = g_tensor(dp, 0, dt, 2, shape, NULL), tl = g_tensor(dl, 0, dt, 2, shape, NULL);
  DLTensor to = g_tensor(dout, 0, dt, 2, shape, NULL), ts = g_tensor(ds, 0, 2, 1, bshape, NULL);
  DLTensor tk = g_tensor(dk, 0, 2, 1, bshape, NULL), tpp = g_tensor(dpp, 0, 2, 1, bshape, NULL);
  ts.dtype.code = tk.dtype.code = kDLInt;
  const DLTensor *ka = arrays ? &tk : NULL, *pa = arrays ? &tpp : NULL;
  unsigned char *res[2][6];
  int64_t diff[6] = {0};
  static const char *const nm[6] = {"top_k_sampling", "top_p_sampling", "top_k_top_p_from_logits",
                                    "top_k_renorm",   "top_p_renorm",   "top_k_mask"};
  for (int mode = 0; mode < 2; mode++) {
    setenv("FI_SAMPLING_SELECT", mode ? "range" : "radix", 1);
    FT_REQUIRE(env_rt_begin() == 0);
    for (int o = 0; o < 6; o++) {
      const int sampler = o < 3;
      const size_t n = sampler ? (size_t)B * 4 : bytes;
      res[mode][o] = malloc(n);
      CU_CHECK(&cu, cuMemsetD8(sampler ? ds : dout, 0xee, n));
      fi_status st;
      {
        if (o == 0)
          st = fi_top_k_sampling_from_probs(rt, &tp, ka, 50, &ts, 11, 99, stream);
        else if (o == 1)
          st = fi_top_p_sampling_from_probs(rt, &tp, pa, 0.9, &ts, 11, 99, stream);
        else if (o == 2)
          st = fi_top_k_top_p_sampling_from_logits(rt, &tl, ka, 50, pa, 0.9, &ts, 11, 99, stream);
        else if (o == 3)
          st = fi_top_k_renorm_probs(rt, &tp, ka, 50, &to, stream);
        else if (o == 4)
          st = fi_top_p_renorm_probs(rt, &tp, pa, 0.9, &to, stream);
        else
          st = fi_top_k_mask_logits(rt, &tl, ka, 50, &to, stream);
        FT_CHECK(st == FI_OK, "%s mode %d: %s", nm[o], mode, fi_last_error());
      }
      CU_CHECK(&cu, cuStreamSynchronize(stream));
      CU_CHECK(&cu, cuMemcpyDtoH(res[mode][o], sampler ? ds : dout, n));
      if (mode == 1) {
        if (sampler) {
          for (int64_t b = 0; b < B; b++)
            diff[o] += ((int32_t *)res[0][o])[b] != ((int32_t *)res[1][o])[b];
        } else {
          for (size_t i = 0; i < n; i++) diff[o] += res[0][o][i] != res[1][o][i];
        }
      }
    }
    env_rt_end();
  }
  unsetenv("FI_SAMPLING_SELECT");
  fprintf(stderr,
          "  range vs radix %-4s %4lld x %6lld arrays %d: differing draws/bytes: top_k %lld, "
          "top_p %lld, top_k_top_p %lld, k_renorm %lld, p_renorm %lld, mask %lld\n",
          g_dtname(dt), (long long)B, (long long)v, arrays, (long long)diff[0], (long long)diff[1],
          (long long)diff[2], (long long)diff[3], (long long)diff[4], (long long)diff[5]);
  for (int o = 0; o < 6; o++) {
    FT_CHECK(diff[o] == 0, "%s %s %lldx%lld: the range search differs from the radix one in %lld",
             nm[o], g_dtname(dt), (long long)B, (long long)v, (long long)diff[o]);
    free(res[0][o]);
    free(res[1][o]);
  }
  free(p);
  free(hp);
  free(hl);
  free(ks);
  free(ps);
  CUdeviceptr all[6] = {dp, dl, dout, ds, dk, dpp};
  for (int i = 0; i < 6; i++) CU_CHECK(&cu, cuMemFree(all[i]));
}

FT_TEST(smp_range_select_matches_radix) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  select_variants_case(2, 64, 128256, 0); /* 8-CTA clusters */
  select_variants_case(2, 64, 128256, 1);
  select_variants_case(2, 100, 50000, 1); /* 4-CTA clusters */
  select_variants_case(2, 600, 4097, 1);  /* one CTA per row, odd vocab */
  select_variants_case(0, 64, 32000, 1);
  select_variants_case(1, 64, 151936, 0);
  select_variants_case(1, 3, 1, 1);
  /* and by statistics on its own */
  setenv("FI_SAMPLING_SELECT", "range", 1);
  FT_REQUIRE(env_rt_begin() == 0);
  const int64_t v = 128256;
  double *p = malloc(sizeof *p * (size_t)v), *l = malloc(sizeof *l * (size_t)v);
  make_probs(p, v, 0);
  for (int64_t i = 0; i < v; i++) l[i] = log(p[i]);
  stats_case("zipf, range search", OP_TOPK, 2, p, v, 64, 50, 1, 0, 1000000);
  stats_case("zipf, range search", OP_TOPP, 2, p, v, 64, 0, 0.9f, 0, 1000000);
  stats_case("zipf, range search", OP_KPL, 2, l, v, 64, 50, 0.9f, 0, 1000000);
  make_probs(p, v, 1);
  stats_case("ties, range search", OP_TOPK, 2, p, v, 64, 50, 1, 0, 300000);
  env_rt_end();
  unsetenv("FI_SAMPLING_SELECT");
  free(p);
  free(l);
}

/* Chain speculative sampling (fi_chain_speculative_sampling): over many requests of the same
 * target p and draft q, each with its own draft tokens drawn from q on the host, the first
 * output token is distributed as p_0 and a bonus token as p_S (chi-square), the mean count
 * of passed tests is sum_i sum_v min(p_i, q_i), and every row is the accepted drafts, one
 * drawn token, then -1, with the counters added in place. A vocabulary of several tiles, and
 * the benchmark's 128256 (rows checked, first tokens against p_0 in 64 bins). */
static double spec_chi2(const int64_t *cnt, const double *w, int V, int64_t n, int nb, double *e, double *ob,
                        int *used, double *lim) {
  for (int k = 0; k < nb; k++) e[k] = ob[k] = 0;
  for (int v = 0; v < V; v++) e[(int64_t)v * nb / V] += w[v] * (double)n, ob[(int64_t)v * nb / V] += (double)cnt[v];
  double chi = 0;
  *used = 0;
  for (int k = 0; k < nb; k++)
    if (e[k] >= 5) chi += (ob[k] - e[k]) * (ob[k] - e[k]) / e[k], (*used)++;
  const double df = *used > 1 ? *used - 1 : 1;
  *lim = df + 6 * sqrt(2 * df) + 10;
  return chi;
}

static void spec_case(const char *what, int B, int S, int V, int bins) {
  double *p = malloc(sizeof(double) * (size_t)(S + 1) * V), *q = malloc(sizeof(double) * (size_t)(S > 0 ? S : 1) * V);
  FT_REQUIRE(p && q);
  for (int r = 0; r <= S; r++) make_probs(p + (size_t)r * V, V, r % 4);
  for (int r = 0; r < S; r++) make_probs(q + (size_t)r * V, V, (r + 1) % 4);
  float *hd = malloc(sizeof(float) * (size_t)B * S * V), *ht = malloc(sizeof(float) * (size_t)B * (S + 1) * V);
  int32_t *hid = malloc(sizeof(int32_t) * (size_t)B * (S > 0 ? S : 1)), *ho = malloc(sizeof(int32_t) * (size_t)B * (S + 1));
  int32_t *hc = malloc(sizeof(int32_t) * (size_t)B * 2);
  FT_REQUIRE(hd && ht && hid && ho && hc);
  for (int b = 0; b < B; b++) {
    for (int64_t i = 0; i < (int64_t)S * V; i++) hd[(size_t)b * S * V + i] = (float)q[i];
    for (int64_t i = 0; i < (int64_t)(S + 1) * V; i++) ht[(size_t)b * (S + 1) * V + i] = (float)p[i];
    for (int i = 0; i < S; i++) { /* a draft token from q_i */
      double u = (double)(g_rand(&seed) >> 11) / 9007199254740992.0, c = 0;
      int t = V - 1;
      for (int v = 0; v < V; v++)
        if ((c += q[(size_t)i * V + v]) > u) { t = v; break; }
      hid[(size_t)b * S + i] = t;
    }
  }
  for (int i = 0; i < 2 * B; i++) hc[i] = 3;
  CUdeviceptr dd, dt, di, dout, dc;
  CU_CHECK(&cu, cuMemAlloc(&dd, sizeof(float) * (size_t)B * S * V + 4));
  CU_CHECK(&cu, cuMemAlloc(&dt, sizeof(float) * (size_t)B * (S + 1) * V));
  CU_CHECK(&cu, cuMemAlloc(&di, sizeof(int32_t) * (size_t)B * S + 4));
  CU_CHECK(&cu, cuMemAlloc(&dout, sizeof(int32_t) * (size_t)B * (S + 1)));
  CU_CHECK(&cu, cuMemAlloc(&dc, sizeof(int32_t) * (size_t)B * 2));
  if (S) CU_CHECK(&cu, cuMemcpyHtoD(dd, hd, sizeof(float) * (size_t)B * S * V));
  CU_CHECK(&cu, cuMemcpyHtoD(dt, ht, sizeof(float) * (size_t)B * (S + 1) * V));
  if (S) CU_CHECK(&cu, cuMemcpyHtoD(di, hid, sizeof(int32_t) * (size_t)B * S));
  CU_CHECK(&cu, cuMemsetD8(dout, 0xee, sizeof(int32_t) * (size_t)B * (S + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(dc, hc, sizeof(int32_t) * (size_t)B * 2));
  int64_t s_d[3] = {B, S, V}, s_i[2] = {B, S}, s_t[3] = {B, S + 1, V}, s_o[2] = {B, S + 1}, s_c[1] = {B};
  DLTensor td = g_tensor(dd, 0, 2, 3, s_d, NULL), tt = g_tensor(dt, 0, 2, 3, s_t, NULL),
           ti = g_tensor(di, 0, 2, 2, s_i, NULL), to = g_tensor(dout, 0, 2, 2, s_o, NULL),
           ta = g_tensor(dc, 0, 2, 1, s_c, NULL), te = g_tensor(dc, (int64_t)B * 4, 2, 1, s_c, NULL);
  ti.dtype = to.dtype = ta.dtype = te.dtype = (DLDataType){kDLInt, 32, 1};
  td.dtype = tt.dtype = (DLDataType){kDLFloat, 32, 1};
  FT_CHECK(fi_chain_speculative_sampling(rt, &td, &ti, &tt, &to, &ta, &te, g_rand(&seed), g_rand(&seed), stream) ==
               FI_OK,
           "%s: %s", what, fi_last_error());
  CU_CHECK(&cu, cuStreamSynchronize(stream));
  CU_CHECK(&cu, cuMemcpyDtoH(ho, dout, sizeof(int32_t) * (size_t)B * (S + 1)));
  CU_CHECK(&cu, cuMemcpyDtoH(hc, dc, sizeof(int32_t) * (size_t)B * 2));
  int64_t *first = calloc((size_t)V, sizeof(int64_t)), *bonus = calloc((size_t)V, sizeof(int64_t));
  int64_t nbonus = 0, bad = 0;
  double acc = 0;
  for (int b = 0; b < B; b++) {
    const int32_t *o = ho + (size_t)b * (S + 1);
    const int j = hc[B + b] - 3, a = hc[b] - 3;
    int ok = j >= 0 && j <= S && a >= j && a <= S;
    for (int i = 0; ok && i < j; i++) ok = o[i] == hid[(size_t)b * S + i];
    ok = ok && o[j] >= 0 && o[j] < V;
    for (int i = j + 1; ok && i <= S; i++) ok = o[i] == -1;
    if (!ok) {
      bad++;
      continue;
    }
    first[o[0]]++;
    if (j == S) bonus[o[S]]++, nbonus++;
    acc += a;
  }
  FT_CHECK(bad == 0, "%s: %lld rows or counters wrong", what, (long long)bad);
  /* chi-square of counts against n x w in `bins` bins of consecutive tokens (0: a bin a
   * token; the rows are shuffled, so any binning is fair); *used the bins of >= 5 expected */
  const int nb = bins ? bins : V;
  double *e = calloc((size_t)nb, sizeof(double)), *ob = calloc((size_t)nb, sizeof(double));
  int used = 0;
  double lim = 0;
  double chi = spec_chi2(first, p, V, B, nb, e, ob, &used, &lim);
  double mean = 0, var = 0;
  for (int i = 0; i < S; i++) {
    double m = 0;
    for (int v = 0; v < V; v++) m += fmin(p[(size_t)i * V + v], q[(size_t)i * V + v]);
    mean += m, var += m * (1 - m);
  }
  const double got = acc / B, sd = sqrt(var / B);
  fprintf(stderr, "  spec %-28s B %d S %d V %d: first-token chi2 %.1f over %d bins (limit %.1f); accepted %.4f, "
          "expected %.4f (sd %.4f); %lld bonus draws\n", what, B, S, V, chi, used, lim, got, mean, sd,
          (long long)nbonus);
  FT_CHECK(chi < lim, "%s: the first token is not distributed as p_0: chi2 %.1f > %.1f", what, chi, lim);
  if (nbonus >= 500) { /* the bonus tokens, after S acceptances, against p_S */
    int ub = 0;
    double bl = 0;
    const double bc = spec_chi2(bonus, p + (size_t)S * V, V, nbonus, nb, e, ob, &ub, &bl);
    fprintf(stderr, "  spec %-28s bonus chi2 %.1f over %d bins (limit %.1f)\n", what, bc, ub, bl);
    FT_CHECK(bc < bl, "%s: bonus tokens not distributed as p_S: chi2 %.1f > %.1f", what, bc, bl);
  }
  FT_CHECK(fabs(got - mean) < 5 * sd + 1e-3, "%s: mean acceptances %.4f, expected %.4f", what, got, mean);
  free(e), free(ob), free(first), free(bonus), free(p), free(q), free(hd), free(ht), free(hid), free(ho), free(hc);
  CUdeviceptr all[5] = {dd, dt, di, dout, dc};
  for (int i = 0; i < 5; i++) CU_CHECK(&cu, cuMemFree(all[i]));
}

FT_TEST(smp_chain_speculative_sampling) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  spec_case("small vocabulary", 20000, 3, 64, 0);
  spec_case("several tiles", 8000, 4, 1000, 50);
  spec_case("no draft tokens (bonus only)", 8000, 0, 100, 0);
  spec_case("128256, the benchmark's", 256, 4, 128256, 16);
}
