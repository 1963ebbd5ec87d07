/* gpu_moe_gemm.c: a whole MoE layer on the GPU, op by op (fi_moe_routing, fi_moe_sort,
 * fi_moe_grouped_gemm with the gather and SwiGLU fused, fi_moe_grouped_gemm, fi_moe_finalize),
 * against a float64 reference per expert on fresh random inputs: out[t] = sum over the
 * token's routes of weight x W2[e] . (silu(W13_gate[e] . x) * (W13_up[e] . x)), computed from
 * the ids and weights the GPU's routing chose (routing itself: gpu_moe.c). Outputs poisoned
 * first; the first GEMM's padding rows must keep their poison (never written). fi_fused_moe on
 * the same inputs must give the same bits (routing itself, or given ids). bf16 and f16,
 * both W13 orders, every block_m, the decode rule (few routes an expert), expert parallelism
 * (a rank's experts: routes elsewhere contribute nothing). Relative norm error <= 1e-2. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct mcase {
  const char *what;
  int dt; /* 0 f16, 1 bf16 */
  int64_t T, H, I;
  int E, k, off, L, tile, gate_first, block_m;
} mcase;

static CUdeviceptr dalloc(size_t bytes, int fill) {
  CUdeviceptr p = 0;
  if (cu.cuMemAlloc(&p, bytes ? bytes : 16) != 0) return 0;
  if (cu.cuMemsetD8(p, (unsigned char)fill, bytes ? bytes : 16) != 0) return 0;
  return p;
}

#define TRY(call)                                                                          \
  do {                                                                                     \
    fi_status st_ = (call);                                                                \
    if (st_ != FI_OK) {                                                                    \
      fprintf(stderr, "  %s: %s: %s: %s\n", c->what, #call, fi_status_string(st_), fi_last_error()); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

static int run(const mcase *c) {
  const int64_t T = c->T, H = c->H, I = c->I, E = c->E, K = c->k, L = c->L, TS = c->tile;
  const int dt = c->dt;
  const int64_t MT = fi_moe_max_tiles(T, c->k, c->L, c->tile), rows = MT * TS;
  /* host inputs: x [T, H], logits [T, E] f32, W13 [L][2I][H], W2 [L][H][I] (rounded copies in double) */
  double *x = malloc(sizeof(double) * (size_t)(T * H)), *w13 = malloc(sizeof(double) * (size_t)(L * 2 * I * H));
  double *w2 = malloc(sizeof(double) * (size_t)(L * H * I));
  uint16_t *hx = malloc((size_t)(T * H) * 2), *hw13 = malloc((size_t)(L * 2 * I * H) * 2), *hw2 = malloc((size_t)(L * H * I) * 2);
  float *hl = malloc(sizeof(float) * (size_t)(T * E));
  for (int64_t i = 0; i < T * H; i++) x[i] = g_put(hx, dt, i, g_normal(&seed));
  for (int64_t i = 0; i < L * 2 * I * H; i++) w13[i] = g_put(hw13, dt, i, g_normal(&seed) / sqrt((double)H));
  for (int64_t i = 0; i < L * H * I; i++) w2[i] = g_put(hw2, dt, i, g_normal(&seed) / sqrt((double)I));
  for (int64_t i = 0; i < T * E; i++) hl[i] = (float)(g_normal(&seed) * 2.0);

  size_t wsb = 0;
  fi_moe_sort_params sp = {c->E, c->off, c->L, c->tile};
  TRY(fi_moe_sort_workspace_size(rt, T, c->k, &sp, &wsb));
  const CUdeviceptr d_x = dalloc((size_t)(T * H) * 2, 0), d_l = dalloc((size_t)(T * E) * 4, 0);
  const CUdeviceptr d_w13 = dalloc((size_t)(L * 2 * I * H) * 2, 0), d_w2 = dalloc((size_t)(L * H * I) * 2, 0);
  const CUdeviceptr d_ids = dalloc((size_t)(T * K) * 4, 0xff), d_wt = dalloc((size_t)(T * K) * 4, 0xff);
  const CUdeviceptr d_ws = dalloc(wsb, 0x5a), d_te = dalloc((size_t)MT * 4, 0x7b), d_mn = dalloc((size_t)MT * 4, 0x7b);
  const CUdeviceptr d_e2p = dalloc((size_t)(T * K) * 4, 0x7b), d_p2e = dalloc((size_t)rows * 4, 0x7b);
  const CUdeviceptr d_n = dalloc(8, 0x7b);
  const CUdeviceptr d_h = dalloc((size_t)(rows * I) * 2, 0x7f), d_y = dalloc((size_t)(rows * H) * 2, 0x7f);
  const CUdeviceptr d_out = dalloc((size_t)(T * H) * 2, 0x7f);
  if (!(d_x && d_l && d_w13 && d_w2 && d_ids && d_wt && d_ws && d_te && d_mn && d_e2p && d_p2e && d_n && d_h && d_y &&
        d_out)) {
    fprintf(stderr, "  %s: device allocation failed\n", c->what);
    return 1;
  }
  CU_CHECK(&cu, cuMemcpyHtoD(d_x, hx, (size_t)(T * H) * 2));
  CU_CHECK(&cu, cuMemcpyHtoD(d_l, hl, (size_t)(T * E) * 4));
  CU_CHECK(&cu, cuMemcpyHtoD(d_w13, hw13, (size_t)(L * 2 * I * H) * 2));
  CU_CHECK(&cu, cuMemcpyHtoD(d_w2, hw2, (size_t)(L * H * I) * 2));
  CU_CHECK(&cu, cuCtxSynchronize());

  int64_t s_x[2] = {T, H}, s_l[2] = {T, E}, s_ids[2] = {T, K}, s_t[1] = {MT}, s_rows[1] = {rows}, s_one[1] = {1};
  int64_t s_ws[1] = {(int64_t)wsb}, s_w13[3] = {L, 2 * I, H}, s_w2[3] = {L, H, I}, s_h[2] = {rows, I}, s_y[2] = {rows, H};
  DLTensor t_x = g_tensor(d_x, 0, dt, 2, s_x, NULL), t_l = g_tensor(d_l, 0, 2, 2, s_l, NULL);
  DLTensor t_ids = g_tensor(d_ids, 0, 2, 2, s_ids, NULL), t_wt = g_tensor(d_wt, 0, 2, 2, s_ids, NULL);
  DLTensor t_ws = g_tensor(d_ws, 0, 2, 1, s_ws, NULL), t_te = g_tensor(d_te, 0, 2, 1, s_t, NULL);
  DLTensor t_mn = g_tensor(d_mn, 0, 2, 1, s_t, NULL), t_e2p = g_tensor(d_e2p, 0, 2, 2, s_ids, NULL);
  DLTensor t_p2e = g_tensor(d_p2e, 0, 2, 1, s_rows, NULL), t_nt = g_tensor(d_n, 0, 2, 1, s_one, NULL);
  DLTensor t_tp = g_tensor(d_n, 4, 2, 1, s_one, NULL);
  DLTensor t_w13 = g_tensor(d_w13, 0, dt, 3, s_w13, NULL), t_w2 = g_tensor(d_w2, 0, dt, 3, s_w2, NULL);
  DLTensor t_h = g_tensor(d_h, 0, dt, 2, s_h, NULL), t_y = g_tensor(d_y, 0, dt, 2, s_y, NULL);
  DLTensor t_out = g_tensor(d_out, 0, dt, 2, s_x, NULL);
  DLTensor *i32[] = {&t_ids, &t_te, &t_mn, &t_e2p, &t_p2e, &t_nt, &t_tp};
  for (size_t i = 0; i < sizeof i32 / sizeof *i32; i++) i32[i]->dtype = (DLDataType){kDLInt, 32, 1};
  t_ws.dtype = (DLDataType){kDLUInt, 8, 1};

  fi_moe_routing_params rp;
  fi_moe_routing_params_init(&rp);
  rp.method = FI_MOE_ROUTING_SOFTMAX_TOPK_RENORM;
  rp.top_k = c->k;
  TRY(fi_moe_routing(rt, &t_l, NULL, &rp, &t_ids, &t_wt, NULL));
  fi_moe_sort_outputs so = {&t_te, &t_mn, &t_e2p, &t_p2e, &t_nt, &t_tp};
  TRY(fi_moe_sort(rt, &t_ids, &sp, &t_ws, &so, NULL));
  fi_moe_gemm_params gp;
  fi_moe_gemm_params_init(&gp);
  gp.tile_size = c->tile, gp.activation = FI_MOE_GEMM_SWIGLU, gp.gate_first = c->gate_first, gp.gather = 1;
  gp.block_m = c->block_m;
  TRY(fi_moe_grouped_gemm(rt, &t_x, &t_w13, &so, &gp, &t_h, NULL));
  gp.activation = FI_MOE_GEMM_PLAIN, gp.gather = 0;
  TRY(fi_moe_grouped_gemm(rt, &t_h, &t_w2, &so, &gp, &t_y, NULL));
  TRY(fi_moe_finalize(rt, &t_y, &t_e2p, &t_wt, 0, &t_out, NULL));
  CU_CHECK(&cu, cuCtxSynchronize());

  int32_t *ids = malloc((size_t)(T * K) * 4), *p2e = malloc((size_t)rows * 4);
  float *wt = malloc((size_t)(T * K) * 4);
  uint16_t *hh = malloc((size_t)(rows * I) * 2), *ho = malloc((size_t)(T * H) * 2);
  CU_CHECK(&cu, cuMemcpyDtoH(ids, d_ids, (size_t)(T * K) * 4));
  CU_CHECK(&cu, cuMemcpyDtoH(wt, d_wt, (size_t)(T * K) * 4));
  CU_CHECK(&cu, cuMemcpyDtoH(p2e, d_p2e, (size_t)rows * 4));
  CU_CHECK(&cu, cuMemcpyDtoH(hh, d_h, (size_t)(rows * I) * 2));
  CU_CHECK(&cu, cuMemcpyDtoH(ho, d_out, (size_t)(T * H) * 2));
  int bad = 0;
  for (int64_t r = 0; r < rows && bad < 5; r++)
    if (p2e[r] < 0)
      for (int64_t j = 0; j < I; j++)
        if (hh[r * I + j] != 0x7f7f) {
          fprintf(stderr, "  %s: padding row %lld of the first GEMM written\n", c->what, (long long)r), bad++;
          break;
        }
  double num = 0, den = 0, *hv = malloc(sizeof(double) * (size_t)I);
  int64_t routes = 0;
  for (int64_t t = 0; t < T; t++) {
    double *ref = calloc((size_t)H, sizeof(double));
    for (int64_t kk = 0; kk < K; kk++) {
      const int64_t e = ids[t * K + kk] - c->off;
      if (e < 0 || e >= L) continue;
      routes++;
      const double *xr = x + t * H;
      for (int64_t j = 0; j < I; j++) {
        const double *wu = w13 + (e * 2 * I + (c->gate_first ? I + j : j)) * H;
        const double *wg = w13 + (e * 2 * I + (c->gate_first ? j : I + j)) * H;
        double u = 0, g = 0;
        for (int64_t d = 0; d < H; d++) u += xr[d] * wu[d], g += xr[d] * wg[d];
        hv[j] = u * g / (1.0 + exp(-g));
      }
      for (int64_t d = 0; d < H; d++) {
        const double *w = w2 + (e * H + d) * I;
        double s = 0;
        for (int64_t j = 0; j < I; j++) s += hv[j] * w[j];
        ref[d] += wt[t * K + kk] * s;
      }
    }
    for (int64_t d = 0; d < H; d++) {
      const double got = g_get(ho, dt, t * H + d);
      if (!isfinite(got) && bad++ < 5) fprintf(stderr, "  %s: out[%lld, %lld] = %g\n", c->what, (long long)t, (long long)d, got);
      num += (got - ref[d]) * (got - ref[d]), den += ref[d] * ref[d];
    }
    free(ref);
  }
  const double rel = sqrt(num / (den > 0 ? den : 1));
  if (!(rel <= 1e-2)) bad++;

  /* fi_fused_moe on the same inputs and tiles: the same kernels in the same order, so the
   * same bits; once routing the logits itself, once given the GPU's ids and weights. */
  fi_fused_moe_params fp;
  fi_fused_moe_params_init(&fp);
  fp.routing = rp, fp.num_experts = c->E, fp.local_expert_offset = c->off, fp.local_num_experts = c->L;
  fp.tile_size = c->tile, fp.gate_first = c->gate_first, fp.block_m = c->block_m;
  size_t fwb = 0;
  TRY(fi_fused_moe_workspace_size(rt, T, H, I, &fp, &fwb));
  const CUdeviceptr d_fws = dalloc(fwb, 0x7f), d_fout = dalloc((size_t)(T * H) * 2, 0x7f);
  int64_t s_fws[1] = {(int64_t)fwb};
  DLTensor t_fws = g_tensor(d_fws, 0, 2, 1, s_fws, NULL), t_fout = g_tensor(d_fout, 0, dt, 2, s_x, NULL);
  t_fws.dtype = (DLDataType){kDLUInt, 8, 1};
  uint16_t *hf = malloc((size_t)(T * H) * 2);
  for (int given = 0; given < 2; given++) {
    CU_CHECK(&cu, cuMemsetD8(d_fout, 0x7f, (size_t)(T * H) * 2));
    TRY(fi_fused_moe(rt, &t_x, given ? NULL : &t_l, NULL, given ? &t_ids : NULL, given ? &t_wt : NULL, &t_w13, &t_w2,
                     &fp, &t_fws, &t_fout, NULL));
    CU_CHECK(&cu, cuCtxSynchronize());
    CU_CHECK(&cu, cuMemcpyDtoH(hf, d_fout, (size_t)(T * H) * 2));
    if (memcmp(hf, ho, (size_t)(T * H) * 2))
      fprintf(stderr, "  %s: fi_fused_moe (%s) differs from the ops one by one\n", c->what,
              given ? "given ids" : "routing the logits"), bad++;
  }
  CU_CHECK(&cu, cuMemFree(d_fws));
  CU_CHECK(&cu, cuMemFree(d_fout));
  free(hf);
  fprintf(stderr, "  %-28s %s T=%lld H=%lld I=%lld E=%d k=%d L=%d@%d tile %d block_m %d%s: %lld local routes, rel %.2e%s\n",
          c->what, g_dtname(dt), (long long)T, (long long)H, (long long)I, c->E, c->k, c->L, c->off, c->tile, c->block_m,
          c->gate_first ? " gate-first" : "", (long long)routes, rel, bad ? "  FAIL" : "");
  CUdeviceptr ds[] = {d_x, d_l, d_w13, d_w2, d_ids, d_wt, d_ws, d_te, d_mn, d_e2p, d_p2e, d_n, d_h, d_y, d_out};
  for (size_t i = 0; i < sizeof ds / sizeof *ds; i++) CU_CHECK(&cu, cuMemFree(ds[i]));
  free(x), free(w13), free(w2), free(hx), free(hw13), free(hw2), free(hl), free(ids), free(p2e), free(wt), free(hh);
  free(ho), free(hv);
  return bad;
}

FT_TEST(moe_layer_against_float64) {
  FT_REQUIRE(setup() == 0);
  const mcase cases[] = {
      {"qwen3-like", 1, 300, 256, 128, 32, 8, 0, 32, 64, 0, 0},
      {"mixtral-like, gate first", 1, 257, 512, 256, 8, 2, 0, 8, 128, 1, 0},
      {"f16, tile 256", 0, 400, 256, 192, 4, 2, 0, 4, 256, 0, 0},
      {"block_m 16 forced", 1, 200, 256, 128, 8, 2, 0, 8, 128, 0, 16},
      {"block_m 64 of tile 128", 0, 200, 192, 128, 8, 2, 0, 8, 128, 1, 64},
      {"decode: 3 tokens", 1, 3, 512, 256, 64, 8, 0, 64, 64, 0, 0},
      {"ep rank 2 of 4", 1, 333, 256, 128, 32, 4, 16, 8, 128, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) FT_CHECK(run(&cases[i]) == 0, "%s", cases[i].what);
}

FT_TEST(moe_grouped_gemm_refuses_bad_arguments) {
  FT_REQUIRE(setup() == 0);
  /* Shapes only: the checks run before anything touches the (absent) data. */
  int64_t s_a[2] = {256, 100}, s_w[3] = {4, 128, 100}, s_o[2] = {256, 64}, s_t[1] = {4}, s_one[1] = {1};
  int64_t s_ids[2] = {10, 2}, s_rows[1] = {256};
  const CUdeviceptr d = dalloc(1 << 20, 0);
  FT_REQUIRE(d != 0);
  DLTensor a = g_tensor(d, 0, 1, 2, s_a, NULL), w = g_tensor(d, 0, 1, 3, s_w, NULL), o = g_tensor(d, 0, 1, 2, s_o, NULL);
  DLTensor te = g_tensor(d, 0, 2, 1, s_t, NULL), mn = g_tensor(d, 0, 2, 1, s_t, NULL), nt = g_tensor(d, 0, 2, 1, s_one, NULL);
  DLTensor e2p = g_tensor(d, 0, 2, 2, s_ids, NULL), p2e = g_tensor(d, 0, 2, 1, s_rows, NULL);
  DLTensor *i32[] = {&te, &mn, &nt, &e2p, &p2e};
  for (size_t i = 0; i < sizeof i32 / sizeof *i32; i++) i32[i]->dtype = (DLDataType){kDLInt, 32, 1};
  fi_moe_sort_outputs so = {&te, &mn, &e2p, &p2e, &nt, &nt};
  fi_moe_gemm_params p;
  fi_moe_gemm_params_init(&p);
  p.tile_size = 64;
  FT_CHECK(fi_moe_grouped_gemm(rt, &a, &w, &so, &p, &o, NULL) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(strstr(fi_last_error(), "k = 100") != NULL, "%s", fi_last_error());
  p.tile_size = 96;
  FT_CHECK(fi_moe_grouped_gemm(rt, &a, &w, &so, &p, &o, NULL) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(strstr(fi_last_error(), "tile_size") != NULL, "%s", fi_last_error());
  p.tile_size = 64, p.block_m = 128;
  FT_CHECK(fi_moe_grouped_gemm(rt, &a, &w, &so, &p, &o, NULL) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(strstr(fi_last_error(), "block_m") != NULL, "%s", fi_last_error());
  FT_CHECK(fi_moe_grouped_gemm(rt, &a, &w, NULL, &p, &o, NULL) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(strstr(fi_last_error(), "tables") != NULL, "%s", fi_last_error());
  CU_CHECK(&cu, cuMemFree(d));
}
