/* gpu_moe.c: fi_moe_routing on the GPU against a float64 reference, every method, fresh
 * random logits (and logits full of exact ties), outputs poisoned first: every token's ids
 * written, distinct and the reference's top k (a swap only between scores equal to float32
 * precision), weights within 1e-5 of the reference computed for the ids the GPU chose, and
 * nothing written past top_k in a wider row. */
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

static int setup(void) {
  if (rt) return 0;
  return g_setup(&cu, &ctx, &rt, &seed);
}

typedef struct rcase {
  const char *what;
  int method, dt; /* dt: 1 bf16, 2 f32 (gpu_util's codes) */
  int64_t T, E, lstride, ostride;
  int k, n_group, topk_group;
  double scale;
  int ties; /* logits from {-1, 0, 1} and no bias: exact ties everywhere */
} rcase;

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Runs one case; returns the number of problems (each printed). */
static int run(const rcase *c) {
  const int64_t T = c->T, E = c->E, K = c->k, ls = c->lstride, os = c->ostride;
  const int es = g_esize(c->dt), ds = c->method == FI_MOE_ROUTING_DEEPSEEK_V3;
  double *x = malloc(sizeof(double) * (size_t)(T * E)), *bias = calloc((size_t)E, sizeof(double));
  unsigned char *hl = malloc((size_t)(T * ls * es) + 4);
  float *hb = calloc((size_t)E, sizeof(float));
  for (int64_t i = 0; i < T * ls; i++) g_put(hl, c->dt, i, 1e30); /* the gaps: never read */
  for (int64_t t = 0; t < T; t++)
    for (int64_t e = 0; e < E; e++) {
      const double v = c->ties ? (double)((int)(g_uniform(&seed) * 3.0) - 1) : g_normal(&seed) * 2.0;
      x[t * E + e] = g_put(hl, c->dt, t * ls + e, v);
    }
  if (ds && !c->ties)
    for (int64_t e = 0; e < E; e++) bias[e] = hb[e] = (float)(g_normal(&seed) * 0.1);
  CUdeviceptr dl, db, di, dw;
  const size_t obytes = (size_t)(T * os) * 4;
  CU_CHECK(&cu, cuMemAlloc(&dl, (size_t)(T * ls * es) + 4));
  CU_CHECK(&cu, cuMemAlloc(&db, (size_t)E * 4));
  CU_CHECK(&cu, cuMemAlloc(&di, obytes));
  CU_CHECK(&cu, cuMemAlloc(&dw, obytes));
  CU_CHECK(&cu, cuMemcpyHtoD(dl, hl, (size_t)(T * ls * es)));
  CU_CHECK(&cu, cuMemcpyHtoD(db, hb, (size_t)E * 4));
  CU_CHECK(&cu, cuMemsetD8(di, 0xff, obytes)); /* ids -1, weights NaN */
  CU_CHECK(&cu, cuMemsetD8(dw, 0xff, obytes));
  CU_CHECK(&cu, cuCtxSynchronize());
  int64_t sl[2] = {T, E}, stl[2] = {ls, 1}, sb[1] = {E}, stb[1] = {1}, so[2] = {T, K}, sto[2] = {os, 1};
  DLTensor tl = g_tensor(dl, 0, c->dt, 2, sl, stl), tb = g_tensor(db, 0, 2, 1, sb, stb);
  DLTensor ti = g_tensor(di, 0, 2, 2, so, sto), tw = g_tensor(dw, 0, 2, 2, so, sto);
  ti.dtype = (DLDataType){kDLInt, 32, 1};
  fi_moe_routing_params p;
  fi_moe_routing_params_init(&p);
  p.method = c->method;
  p.top_k = c->k;
  p.n_group = c->n_group;
  p.topk_group = c->topk_group;
  p.routed_scaling_factor = c->scale;
  int bad = 0;
  fi_status st = fi_moe_routing(rt, &tl, ds && !c->ties ? &tb : NULL, &p, &ti, &tw, NULL);
  if (st != FI_OK) {
    fprintf(stderr, "  %s: %s: %s\n", c->what, fi_status_string(st), fi_last_error());
    return 1;
  }
  CU_CHECK(&cu, cuCtxSynchronize());
  int32_t *ids = malloc(obytes);
  float *w = malloc(obytes);
  CU_CHECK(&cu, cuMemcpyDtoH(ids, di, obytes));
  CU_CHECK(&cu, cuMemcpyDtoH(w, dw, obytes));
  double *s = malloc(sizeof(double) * (size_t)E);
  int *order = malloc(sizeof(int) * (size_t)E), *elig = malloc(sizeof(int) * (size_t)E);
  double num = 0, den = 0, maxerr = 0;
  int64_t swaps = 0;
  for (int64_t t = 0; t < T && bad < 10; t++) {
    const double *xl = x + t * E;
    for (int64_t e = 0; e < E; e++) s[e] = ds ? sigm(xl[e]) + bias[e] : xl[e], elig[e] = 1;
    if (ds) { /* the groups: top-2 sums, topk_group kept, ties to the smaller group */
      const int64_t G = E / c->n_group;
      double gs[32];
      int kept[32] = {0};
      for (int g = 0; g < c->n_group; g++) {
        double a1 = -INFINITY, a2 = -INFINITY;
        for (int64_t e = g * G; e < (g + 1) * G; e++)
          if (s[e] > a1) a2 = a1, a1 = s[e];
          else if (s[e] > a2) a2 = s[e];
        gs[g] = G > 1 ? a1 + a2 : a1;
      }
      for (int r = 0; r < c->topk_group; r++) {
        int b = -1;
        for (int g = 0; g < c->n_group; g++)
          if (!kept[g] && (b < 0 || gs[g] > gs[b])) b = g;
        kept[b] = 1;
      }
      for (int64_t e = 0; e < E; e++) elig[e] = kept[e / G];
    }
    /* the reference's top k: eligible experts by score, ties to the smaller index */
    int n = 0;
    for (int64_t e = 0; e < E; e++)
      if (elig[e]) order[n++] = (int)e;
    for (int i = 0; i < K; i++)
      for (int j = i + 1; j < n; j++)
        if (s[order[j]] > s[order[i]] || (s[order[j]] == s[order[i]] && order[j] < order[i])) {
          int tmp = order[i];
          order[i] = order[j], order[j] = tmp;
        }
    const int32_t *gi = ids + t * os;
    const float *gw = w + t * os;
    for (int i = 0; i < K; i++) {
      const int e = gi[i];
      if (e < 0 || e >= E || !elig[e] || gw[i] != gw[i]) {
        fprintf(stderr, "  %s: token %lld pick %d: id %d weight %g (unwritten, out of range or excluded)\n",
                c->what, (long long)t, i, e, gw[i]);
        bad++;
        break;
      }
      for (int j = 0; j < i; j++)
        if (gi[j] == e) fprintf(stderr, "  %s: token %lld: expert %d twice\n", c->what, (long long)t, e), bad++;
      if (e != order[i]) { /* equal scores go to the smaller index; others may swap by float32 rounding */
        const double d = fabs(s[e] - s[order[i]]);
        if (d == 0 || d > 1e-5 * fmax(1.0, fabs(s[e]))) {
          fprintf(stderr, "  %s: token %lld pick %d: expert %d (score %.9g), the reference's %d (%.9g)\n", c->what,
                  (long long)t, i, e, s[e], order[i], s[order[i]]);
          bad++;
        }
        swaps++;
      }
    }
    if (os > K) /* the rest of a wider row stays poisoned */
      for (int64_t j = K; j < os; j++)
        if (gi[j] != -1 || gw[j] == gw[j]) {
          fprintf(stderr, "  %s: token %lld column %lld written past top_k\n", c->what, (long long)t, (long long)j);
          bad++;
          break;
        }
    /* the weights for the ids the GPU chose */
    double ref[32], m = -INFINITY, all = 0, sel = 0;
    for (int64_t e = 0; e < E; e++) m = fmax(m, xl[e]);
    for (int64_t e = 0; e < E; e++) all += exp(xl[e] - m);
    double m1 = -INFINITY;
    for (int i = 0; i < K; i++) m1 = fmax(m1, xl[gi[i]]);
    for (int i = 0; i < K; i++) {
      const double l = xl[gi[i]];
      switch (c->method) {
        case FI_MOE_ROUTING_SOFTMAX_TOPK: ref[i] = exp(l - m) / all; break;
        case FI_MOE_ROUTING_RENORMALIZE:
        case FI_MOE_ROUTING_SOFTMAX_TOPK_RENORM: ref[i] = exp(l - m1); break;
        default: ref[i] = sigm(l); break;
      }
      sel += ref[i];
    }
    for (int i = 0; i < K; i++) {
      double r = ref[i];
      if (c->method == FI_MOE_ROUTING_RENORMALIZE || c->method == FI_MOE_ROUTING_SOFTMAX_TOPK_RENORM) r /= sel;
      if (ds) r /= sel + 1e-20;
      r *= c->scale;
      num += (gw[i] - r) * (gw[i] - r), den += r * r;
      maxerr = fmax(maxerr, fabs(gw[i] - r));
    }
  }
  const double err = den > 0 ? sqrt(num / den) : 0;
  fprintf(stderr, "  %-34s T=%lld E=%lld k=%d: weight err %.2e (max %.2e), %lld near-tie swaps\n", c->what,
          (long long)T, (long long)E, c->k, err, maxerr, (long long)swaps);
  if (!(err < 1e-5) || !(maxerr < 1e-5 * fmax(1.0, c->scale))) {
    fprintf(stderr, "  %s: weights off: %.3e (max %.3e)\n", c->what, err, maxerr);
    bad++;
  }
  /* The logits were only read. */
  unsigned char *back = malloc((size_t)(T * ls * es) + 4);
  CU_CHECK(&cu, cuMemcpyDtoH(back, dl, (size_t)(T * ls * es)));
  if (memcmp(back, hl, (size_t)(T * ls * es))) fprintf(stderr, "  %s: logits changed\n", c->what), bad++;
  free(back);
  CU_CHECK(&cu, cuMemFree(dl));
  CU_CHECK(&cu, cuMemFree(db));
  CU_CHECK(&cu, cuMemFree(di));
  CU_CHECK(&cu, cuMemFree(dw));
  free(x), free(bias), free(hl), free(hb), free(ids), free(w), free(s), free(order), free(elig);
  return bad;
}

FT_TEST(moe_routing_every_method) {
  FT_REQUIRE(setup() == 0);
  const rcase cases[] = {
      {"mixtral renormalize f32", FI_MOE_ROUTING_RENORMALIZE, 2, 1000, 8, 8, 2, 2, 0, 0, 1.0, 0},
      {"mixtral renormalize bf16", FI_MOE_ROUTING_RENORMALIZE, 1, 999, 8, 8, 2, 2, 0, 0, 1.0, 0},
      {"qwen3 softmax-topk-renorm bf16", FI_MOE_ROUTING_SOFTMAX_TOPK_RENORM, 1, 777, 128, 128, 8, 8, 0, 0, 1.0, 0},
      {"softmax-topk f32, strided", FI_MOE_ROUTING_SOFTMAX_TOPK, 2, 301, 64, 80, 9, 6, 0, 0, 1.0, 0},
      {"deepseek-v3 f32", FI_MOE_ROUTING_DEEPSEEK_V3, 2, 513, 256, 256, 8, 8, 8, 4, 2.5, 0},
      {"deepseek-v3 bf16, strided", FI_MOE_ROUTING_DEEPSEEK_V3, 1, 257, 256, 264, 11, 8, 8, 4, 2.5, 0},
      {"deepseek-v3 ep-style 64 experts", FI_MOE_ROUTING_DEEPSEEK_V3, 2, 100, 64, 64, 6, 6, 8, 3, 1.0, 0},
      {"llama4 top-1 bf16", FI_MOE_ROUTING_LLAMA4, 1, 500, 16, 16, 1, 1, 0, 0, 1.0, 0},
      {"512 experts, k 32", FI_MOE_ROUTING_SOFTMAX_TOPK, 2, 65, 512, 512, 32, 32, 0, 0, 1.0, 0},
      {"3 experts, k 3", FI_MOE_ROUTING_RENORMALIZE, 2, 33, 3, 3, 3, 3, 0, 0, 1.0, 0},
      {"one token, 200 experts", FI_MOE_ROUTING_SOFTMAX_TOPK_RENORM, 2, 1, 200, 200, 4, 4, 0, 0, 1.0, 0},
      {"ties: qwen3 bf16", FI_MOE_ROUTING_SOFTMAX_TOPK_RENORM, 1, 400, 128, 128, 8, 8, 0, 0, 1.0, 1},
      {"ties: deepseek-v3 bf16", FI_MOE_ROUTING_DEEPSEEK_V3, 1, 400, 256, 256, 8, 8, 8, 4, 2.5, 1},
      {"ties: llama4 f32", FI_MOE_ROUTING_LLAMA4, 2, 300, 16, 16, 2, 2, 0, 0, 1.0, 1},
      /* DeepSeek-V3 group layouts of the routing kernel (P lanes a group): one group (Kimi-K2,
       * nothing excluded), 32 groups, 5 groups, every group kept */
      {"kimi-k2 384 experts, 1 group", FI_MOE_ROUTING_DEEPSEEK_V3, 2, 301, 384, 384, 8, 8, 1, 1, 2.827, 0},
      {"deepseek-v3 512 experts, 32 groups", FI_MOE_ROUTING_DEEPSEEK_V3, 1, 129, 512, 512, 8, 8, 32, 4, 1.0, 0},
      {"deepseek-v3 160 experts, 5 groups", FI_MOE_ROUTING_DEEPSEEK_V3, 2, 129, 160, 160, 6, 6, 5, 2, 1.0, 0},
      {"deepseek-v3 all 8 groups kept", FI_MOE_ROUTING_DEEPSEEK_V3, 2, 129, 256, 256, 8, 8, 8, 8, 1.0, 0},
      {"ties: deepseek-v3 f32, 16 groups", FI_MOE_ROUTING_DEEPSEEK_V3, 2, 200, 128, 128, 6, 6, 16, 3, 1.0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) FT_CHECK(run(&cases[i]) == 0, "%s", cases[i].what);
}

/* Bad arguments are refused before anything runs, naming the argument. */
FT_TEST(moe_routing_refuses_bad_arguments) {
  FT_REQUIRE(setup() == 0);
  CUdeviceptr d;
  CU_CHECK(&cu, cuMemAlloc(&d, 1 << 16));
  int64_t sl[2] = {4, 256}, so[2] = {4, 8}, sb[1] = {256};
  DLTensor tl = g_tensor(d, 0, 2, 2, sl, NULL), ti = g_tensor(d, 8192, 2, 2, so, NULL);
  DLTensor tw = g_tensor(d, 12288, 2, 2, so, NULL), tb = g_tensor(d, 16384, 2, 1, sb, NULL);
  ti.dtype = (DLDataType){kDLInt, 32, 1};
  fi_moe_routing_params p;
  fi_moe_routing_params_init(&p);
  p.top_k = 8;
  p.method = FI_MOE_ROUTING_DEEPSEEK_V3;
  p.n_group = 8, p.topk_group = 4;
  FT_CHECK(fi_moe_routing(rt, &tl, &tb, &p, &ti, &tw, NULL) == FI_OK, "%s", fi_last_error());
  p.n_group = 7;
  FT_CHECK(fi_moe_routing(rt, &tl, &tb, &p, &ti, &tw, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "n_group"));
  p.n_group = 8, p.topk_group = 0;
  FT_CHECK(fi_moe_routing(rt, &tl, &tb, &p, &ti, &tw, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "topk_group"));
  p.topk_group = 4, p.top_k = 9;
  FT_CHECK(fi_moe_routing(rt, &tl, &tb, &p, &ti, &tw, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "expert_ids"));
  p.top_k = 8, p.method = 9;
  FT_CHECK(fi_moe_routing(rt, &tl, &tb, &p, &ti, &tw, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "method"));
  p.method = FI_MOE_ROUTING_RENORMALIZE;
  FT_CHECK(fi_moe_routing(rt, &tl, &tb, &p, &ti, &tw, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "correction_bias"));
  FT_CHECK(fi_moe_routing(rt, &tl, NULL, &p, &ti, &ti, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "weights"));
  DLTensor mis = tl;
  mis.byte_offset = 2;
  FT_CHECK(fi_moe_routing(rt, &mis, NULL, &p, &ti, &tw, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "multiple of 4"));
  CU_CHECK(&cu, cuMemFree(d));
}

/* ---- the sort ---- */

typedef struct scase {
  const char *what;
  int64_t T;
  int K, E, off, L, tile;
  int pattern; /* 0 random, 1 all to expert 0 (global), 2 every route to its own expert, 3 the bound:
                  every local expert c = 1 + tile routes (K = 1) */
} scase;

/* The tables on the CPU: the same stable sort, to compare with the GPU's bit for bit. */
static int run_sort(const scase *c) {
  const int64_t T = c->T, K = c->K, R = T * K, L = c->L, TS = c->tile;
  const int64_t MT = fi_moe_max_tiles(T, c->K, c->L, c->tile);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(R ? R : 1));
  for (int64_t x = 0; x < R; x++) {
    if (c->pattern == 0) { /* distinct experts within a token, as routing gives */
      for (;;) {
        int e = (int)(g_uniform(&seed) * c->E), dup = 0;
        for (int64_t j = x - x % K; j < x; j++) dup |= ids[j] == e;
        if (!dup) { ids[x] = e; break; }
      }
    } else if (c->pattern == 1) {
      ids[x] = (int32_t)(x % K == 0 ? c->off : c->off + (x % K) % c->L);
    } else if (c->pattern == 2) {
      ids[x] = (int32_t)(c->off + x);
    } else {
      ids[x] = (int32_t)(c->off + x / (1 + TS));
    }
  }
  /* reference */
  int64_t *cnt = calloc((size_t)L, sizeof(int64_t)), *start = calloc((size_t)L + 1, sizeof(int64_t));
  for (int64_t x = 0; x < R; x++)
    if (ids[x] >= c->off && ids[x] < c->off + L) cnt[ids[x] - c->off]++;
  for (int64_t e = 0; e < L; e++) start[e + 1] = start[e] + (cnt[e] + TS - 1) / TS;
  const int64_t used = start[L];
  int32_t *r_te = malloc(4 * (size_t)MT), *r_mn = malloc(4 * (size_t)MT), *r_e2p = malloc(4 * (size_t)(R ? R : 1));
  int32_t *r_p2e = malloc(4 * (size_t)(MT * TS > 0 ? MT * TS : 1));
  for (int64_t t = 0; t < MT; t++) r_te[t] = -1, r_mn[t] = (int32_t)(t * TS);
  for (int64_t r = 0; r < MT * TS; r++) r_p2e[r] = -1;
  int64_t *fill = calloc((size_t)L, sizeof(int64_t));
  for (int64_t x = 0; x < R; x++) {
    const int64_t e = ids[x] - c->off;
    if (e < 0 || e >= L) { r_e2p[x] = -1; continue; }
    const int64_t row = start[e] * TS + fill[e]++;
    r_e2p[x] = (int32_t)row, r_p2e[row] = (int32_t)x;
  }
  for (int64_t e = 0; e < L; e++)
    for (int64_t t = start[e]; t < start[e + 1]; t++) {
      r_te[t] = (int32_t)e;
      const int64_t end = start[e] * TS + cnt[e];
      r_mn[t] = (int32_t)((t + 1) * TS < end ? (t + 1) * TS : end);
    }
  /* GPU, every output poisoned */
  fi_moe_sort_params p = {c->E, c->off, c->L, c->tile};
  size_t wsb = 0;
  FT_CHECK(fi_moe_sort_workspace_size(rt, T, c->K, &p, &wsb) == FI_OK, "%s", fi_last_error());
  const size_t b_ids = 4 * (size_t)(R ? R : 1), b_t = 4 * (size_t)MT, b_rows = 4 * (size_t)(MT * TS > 0 ? MT * TS : 1);
  CUdeviceptr d_ids, d_ws, d_te, d_mn, d_e2p, d_p2e, d_n;
  CU_CHECK(&cu, cuMemAlloc(&d_ids, b_ids));
  CU_CHECK(&cu, cuMemAlloc(&d_ws, wsb));
  CU_CHECK(&cu, cuMemAlloc(&d_te, b_t ? b_t : 4));
  CU_CHECK(&cu, cuMemAlloc(&d_mn, b_t ? b_t : 4));
  CU_CHECK(&cu, cuMemAlloc(&d_e2p, b_ids));
  CU_CHECK(&cu, cuMemAlloc(&d_p2e, b_rows));
  CU_CHECK(&cu, cuMemAlloc(&d_n, 8));
  if (R) CU_CHECK(&cu, cuMemcpyHtoD(d_ids, ids, (size_t)R * 4));
  CU_CHECK(&cu, cuMemsetD8(d_ws, 0x5a, wsb));
  CU_CHECK(&cu, cuMemsetD8(d_te, 0x7b, b_t ? b_t : 4));
  CU_CHECK(&cu, cuMemsetD8(d_mn, 0x7b, b_t ? b_t : 4));
  CU_CHECK(&cu, cuMemsetD8(d_e2p, 0x7b, b_ids));
  CU_CHECK(&cu, cuMemsetD8(d_p2e, 0x7b, b_rows));
  CU_CHECK(&cu, cuMemsetD8(d_n, 0x7b, 8));
  CU_CHECK(&cu, cuCtxSynchronize());
  int64_t s_ids[2] = {T, K}, s_t[1] = {MT}, s_rows[1] = {MT * TS}, s_one[1] = {1}, s_ws[1] = {(int64_t)wsb};
  DLTensor t_ids = g_tensor(d_ids, 0, 2, 2, s_ids, NULL), t_ws = g_tensor(d_ws, 0, 2, 1, s_ws, NULL);
  DLTensor t_te = g_tensor(d_te, 0, 2, 1, s_t, NULL), t_mn = g_tensor(d_mn, 0, 2, 1, s_t, NULL);
  DLTensor t_e2p = g_tensor(d_e2p, 0, 2, 2, s_ids, NULL), t_p2e = g_tensor(d_p2e, 0, 2, 1, s_rows, NULL);
  DLTensor t_nt = g_tensor(d_n, 0, 2, 1, s_one, NULL), t_tp = g_tensor(d_n, 4, 2, 1, s_one, NULL);
  DLTensor *all[] = {&t_ids, &t_te, &t_mn, &t_e2p, &t_p2e, &t_nt, &t_tp};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) all[i]->dtype = (DLDataType){kDLInt, 32, 1};
  t_ws.dtype = (DLDataType){kDLUInt, 8, 1};
  fi_moe_sort_outputs o = {&t_te, &t_mn, &t_e2p, &t_p2e, &t_nt, &t_tp};
  int bad = 0;
  fi_status st = fi_moe_sort(rt, &t_ids, &p, &t_ws, &o, NULL);
  if (st != FI_OK) {
    fprintf(stderr, "  %s: %s: %s\n", c->what, fi_status_string(st), fi_last_error());
    return 1;
  }
  CU_CHECK(&cu, cuCtxSynchronize());
  int32_t *g_te = malloc(b_t ? b_t : 4), *g_mn = malloc(b_t ? b_t : 4), *g_e2p = malloc(b_ids), *g_p2e = malloc(b_rows), g_n[2];
  CU_CHECK(&cu, cuMemcpyDtoH(g_te, d_te, b_t ? b_t : 4));
  CU_CHECK(&cu, cuMemcpyDtoH(g_mn, d_mn, b_t ? b_t : 4));
  CU_CHECK(&cu, cuMemcpyDtoH(g_e2p, d_e2p, b_ids));
  CU_CHECK(&cu, cuMemcpyDtoH(g_p2e, d_p2e, b_rows));
  CU_CHECK(&cu, cuMemcpyDtoH(g_n, d_n, 8));
  if (g_n[0] != used || g_n[1] != used * TS)
    fprintf(stderr, "  %s: tiles %d padded %d; expected %lld, %lld\n", c->what, g_n[0], g_n[1], (long long)used,
            (long long)(used * TS)), bad++;
  if (used > MT) fprintf(stderr, "  %s: %lld tiles past the bound %lld\n", c->what, (long long)used, (long long)MT), bad++;
  if (memcmp(g_te, r_te, (size_t)MT * 4) || memcmp(g_mn, r_mn, (size_t)MT * 4))
    fprintf(stderr, "  %s: tile tables differ\n", c->what), bad++;
  if (memcmp(g_e2p, r_e2p, (size_t)R * 4)) fprintf(stderr, "  %s: expanded_idx_to_permuted_idx differs\n", c->what), bad++;
  if (memcmp(g_p2e, r_p2e, (size_t)(MT * TS) * 4)) fprintf(stderr, "  %s: permuted_idx_to_expanded_idx differs\n", c->what), bad++;
  /* The invariants, on the GPU's tables themselves. */
  int64_t live = 0, local = 0;
  for (int64_t x = 0; x < R; x++) {
    const int isl = ids[x] >= c->off && ids[x] < c->off + L;
    local += isl;
    if (isl != (g_e2p[x] >= 0)) { bad++; break; }
    if (isl && (g_e2p[x] >= MT * TS || g_p2e[g_e2p[x]] != x)) { bad++; break; }
  }
  for (int64_t t = 0; t < MT; t++)
    for (int64_t r = t * TS; r < (t + 1) * TS; r++) {
      const int in = r < g_mn[t];
      if (in != (g_p2e[r] >= 0)) { bad++; t = MT; break; }
      if (in) {
        live++;
        if (ids[g_p2e[r]] - c->off != g_te[t]) { bad++; t = MT; break; }
      }
    }
  if (live != local) fprintf(stderr, "  %s: %lld live rows, %lld local routes\n", c->what, (long long)live, (long long)local), bad++;
  fprintf(stderr, "  %-30s T=%lld K=%d E=%d L=%d@%d tile %d: %lld tiles of %lld at most%s\n", c->what, (long long)T,
          c->K, c->E, c->L, c->off, c->tile, (long long)used, (long long)MT, used == MT ? " (the bound)" : "");
  if (c->pattern >= 2 && used != MT) fprintf(stderr, "  %s: the bound was not reached\n", c->what), bad++;
  CUdeviceptr ds[] = {d_ids, d_ws, d_te, d_mn, d_e2p, d_p2e, d_n};
  for (size_t i = 0; i < sizeof ds / sizeof *ds; i++) CU_CHECK(&cu, cuMemFree(ds[i]));
  free(ids), free(cnt), free(start), free(fill), free(r_te), free(r_mn), free(r_e2p), free(r_p2e);
  free(g_te), free(g_mn), free(g_e2p), free(g_p2e);
  return bad;
}

FT_TEST(moe_sort_tables_and_invariants) {
  FT_REQUIRE(setup() == 0);
  const scase cases[] = {
      {"deepseek 4096 tokens", 4096, 8, 256, 0, 256, 128, 0},
      {"deepseek 16384 tokens", 16384, 8, 256, 0, 256, 256, 0},
      {"deepseek 64 tokens, tile 64", 64, 8, 256, 0, 256, 64, 0},
      {"qwen3 777 tokens", 777, 8, 128, 0, 128, 64, 0},
      {"mixtral 1000 tokens", 1000, 2, 8, 0, 8, 128, 0},
      {"ep rank 0 of 8", 3000, 8, 256, 0, 32, 128, 0},
      {"ep rank 3 of 8", 3000, 8, 256, 96, 32, 64, 0},
      {"ep rank 7 of 8", 3000, 8, 256, 224, 32, 256, 0},
      {"all to one expert", 5000, 1, 64, 0, 64, 128, 1},
      {"one expert, k 4", 2000, 4, 64, 8, 16, 64, 1},
      {"T < L", 5, 2, 256, 0, 256, 128, 0},
      {"T x K < L: the bound R", 3, 2, 64, 0, 32, 64, 2},
      {"the bound (R + (tile-1) L) / tile", 8 * 65, 1, 8, 0, 8, 64, 3},
      {"the bound, tile 256", 16 * 257, 1, 32, 16, 16, 256, 3},
      {"no tokens", 0, 8, 256, 0, 256, 128, 0},
      /* the sort's grids: one block (<= 4096 routes), several, and the 128-block cap (chunks
       * past 4096); a hot expert across many blocks; EP at prefill size */
      {"one block, 512 tokens x 8", 512, 8, 256, 0, 256, 128, 0},
      {"two blocks, 513 tokens x 8", 513, 8, 256, 0, 256, 128, 0},
      {"128 blocks of 5120, 70000 tokens", 70000, 8, 256, 0, 256, 128, 0},
      {"all to one expert, 40000 tokens", 40000, 1, 64, 0, 64, 128, 1},
      {"ep rank 5 of 8, 16384 tokens", 16384, 8, 256, 160, 32, 128, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) FT_CHECK(run_sort(&cases[i]) == 0, "%s", cases[i].what);
}
