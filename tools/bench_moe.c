/* bench_moe.c: fi-bench's moe section. The experts' grouped GEMMs (fi_moe_grouped_gemm: the
 * first with the gather and SwiGLU fused, the second plain) at prefill sizes for Mixtral-8x7B,
 * Qwen3-30B-A3B and DeepSeek-V3 shapes, all experts on this GPU (EP=1) and a rank's eighth
 * (EP=8: the routes to other ranks' experts are skipped), against the tensor-core probes of
 * the same run; at decode sizes against the read bandwidth (the expert weights the routes
 * touch, read once); routing + sort for DeepSeek-V3. FLOPs count live rows only: 2 x local
 * routes x n x k. The peer, torch._grouped_mm on the same shapes, is lab/moe/torch_peer.py
 * (run beside this in one device call: it needs torch). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct mshape {
  const char *model;
  int E, k;
  int64_t H, I;
} mshape;

static const mshape shapes[] = {
    {"mixtral-8x7b", 8, 2, 4096, 14336},
    {"qwen3-30b-a3b", 128, 8, 2048, 768},
    {"deepseek-v3", 256, 8, 7168, 2048},
};

/* d gets n bytes of random bf16: a 64 MiB random block repeated. */
static void fill_big(CUdeviceptr d, size_t n) {
  const size_t blk = (size_t)64 << 20;
  fill_random(d, n < blk ? n : blk);
  for (size_t o = blk; o < n; o += blk) CU_CHECK(&cu, cuMemcpyDtoDAsync(d + o, d, n - o < blk ? n - o : blk, NULL));
  CU_CHECK(&cu, cuCtxSynchronize());
}

/* d gets n float32 router logits, normal (mean 0, sd 2): ties as rare as in a real router
 * (the routing breaks ties to the smaller index, so bf16 uniform logits would favour the
 * low experts, those a rank's eighth holds at EP=8). */
static void fill_logits(CUdeviceptr d, int64_t n) {
  float *h = malloc((size_t)n * 4);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double v = (double)(s >> 11) / 9007199254740992.0;
    h[i] = (float)(2.0 * sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
  }
  CU_CHECK(&cu, cuMemcpyHtoD(d, h, (size_t)n * 4));
  free(h);
}

static void check(fi_status st, const char *what) {
  if (st != FI_OK) {
    fprintf(stderr, "fi-bench moe: %s: %s: %s\n", what, fi_status_string(st), fi_last_error());
    exit(1);
  }
}

/* One layer's device state: inputs, the routing and the sort's tables, the GEMMs' outputs. */
typedef struct layer {
  fi_runtime *rt;
  int64_t T, MT, rows;
  int L, tile;
  CUdeviceptr x, logits, ids, wts, ws, te, mn, e2p, p2e, nt, w13, w2, h, y;
  int64_t s_x[2], s_l[2], s_ids[2], s_t[1], s_rows[1], s_one[1], s_ws[1], s_w13[3], s_w2[3], s_h[2], s_y[2];
  DLTensor t_x, t_l, t_ids, t_wts, t_ws, t_te, t_mn, t_e2p, t_p2e, t_nt, t_tp, t_w13, t_w2, t_h, t_y;
  fi_moe_sort_outputs so;
  fi_moe_routing_params rp;
  fi_moe_sort_params sp;
  fi_moe_gemm_params g1, g2;
  int64_t local_routes, experts_touched;
} layer;

static CUdeviceptr alloc(size_t n) {
  CUdeviceptr p;
  CU_CHECK(&cu, cuMemAlloc(&p, n ? n : 16));
  return p;
}

static void layer_make(layer *l, fi_runtime *rt, const mshape *m, int64_t T, int ep, int tile) {
  memset(l, 0, sizeof *l);
  l->rt = rt, l->T = T, l->L = m->E / ep, l->tile = tile;
  l->MT = fi_moe_max_tiles(T, m->k, l->L, tile), l->rows = l->MT * tile;
  fi_moe_routing_params_init(&l->rp);
  l->rp.method = FI_MOE_ROUTING_SOFTMAX_TOPK_RENORM, l->rp.top_k = m->k;
  l->sp = (fi_moe_sort_params){m->E, 0, l->L, tile};
  size_t wsb = 0;
  check(fi_moe_sort_workspace_size(rt, T, m->k, &l->sp, &wsb), "fi_moe_sort_workspace_size");
  l->x = alloc((size_t)(T * m->H) * 2), l->logits = alloc((size_t)(T * m->E) * 4);
  l->ids = alloc((size_t)(T * m->k) * 4), l->wts = alloc((size_t)(T * m->k) * 4), l->ws = alloc(wsb);
  l->te = alloc((size_t)l->MT * 4), l->mn = alloc((size_t)l->MT * 4), l->e2p = alloc((size_t)(T * m->k) * 4);
  l->p2e = alloc((size_t)l->rows * 4), l->nt = alloc(8);
  l->w13 = alloc((size_t)(l->L * 2 * m->I * m->H) * 2), l->w2 = alloc((size_t)(l->L * m->H * m->I) * 2);
  l->h = alloc((size_t)(l->rows * m->I) * 2), l->y = alloc((size_t)(l->rows * m->H) * 2);
  fill_big(l->x, (size_t)(T * m->H) * 2), fill_logits(l->logits, T * m->E);
  fill_big(l->w13, (size_t)(l->L * 2 * m->I * m->H) * 2), fill_big(l->w2, (size_t)(l->L * m->H * m->I) * 2);
  l->s_x[0] = T, l->s_x[1] = m->H, l->s_l[0] = T, l->s_l[1] = m->E, l->s_ids[0] = T, l->s_ids[1] = m->k;
  l->s_t[0] = l->MT, l->s_rows[0] = l->rows, l->s_one[0] = 1, l->s_ws[0] = (int64_t)wsb;
  l->s_w13[0] = l->L, l->s_w13[1] = 2 * m->I, l->s_w13[2] = m->H;
  l->s_w2[0] = l->L, l->s_w2[1] = m->H, l->s_w2[2] = m->I;
  l->s_h[0] = l->rows, l->s_h[1] = m->I, l->s_y[0] = l->rows, l->s_y[1] = m->H;
  l->t_x = tensor(l->x, 1, 2, l->s_x), l->t_l = tensor(l->logits, 2, 2, l->s_l);
  l->t_ids = tensor(l->ids, 2, 2, l->s_ids), l->t_wts = tensor(l->wts, 2, 2, l->s_ids);
  l->t_ws = tensor(l->ws, 2, 1, l->s_ws), l->t_te = tensor(l->te, 2, 1, l->s_t), l->t_mn = tensor(l->mn, 2, 1, l->s_t);
  l->t_e2p = tensor(l->e2p, 2, 2, l->s_ids), l->t_p2e = tensor(l->p2e, 2, 1, l->s_rows);
  l->t_nt = tensor(l->nt, 2, 1, l->s_one), l->t_tp = tensor(l->nt + 4, 2, 1, l->s_one);
  l->t_w13 = tensor(l->w13, 1, 3, l->s_w13), l->t_w2 = tensor(l->w2, 1, 3, l->s_w2);
  l->t_h = tensor(l->h, 1, 2, l->s_h), l->t_y = tensor(l->y, 1, 2, l->s_y);
  DLTensor *i32[] = {&l->t_ids, &l->t_te, &l->t_mn, &l->t_e2p, &l->t_p2e, &l->t_nt, &l->t_tp};
  for (size_t i = 0; i < sizeof i32 / sizeof *i32; i++) i32[i]->dtype = (DLDataType){kDLInt, 32, 1};
  l->t_ws.dtype = (DLDataType){kDLUInt, 8, 1};
  l->so = (fi_moe_sort_outputs){&l->t_te, &l->t_mn, &l->t_e2p, &l->t_p2e, &l->t_nt, &l->t_tp};
  fi_moe_gemm_params_init(&l->g1);
  l->g1.tile_size = tile, l->g1.activation = FI_MOE_GEMM_SWIGLU, l->g1.gather = 1;
  l->g2 = l->g1;
  l->g2.activation = FI_MOE_GEMM_PLAIN, l->g2.gather = 0;
  /* One routing and sort for the GEMMs, then what they touch. */
  check(fi_moe_routing(rt, &l->t_l, NULL, &l->rp, &l->t_ids, &l->t_wts, NULL), "fi_moe_routing");
  check(fi_moe_sort(rt, &l->t_ids, &l->sp, &l->t_ws, &l->so, NULL), "fi_moe_sort");
  CU_CHECK(&cu, cuCtxSynchronize());
  int32_t *ids = malloc((size_t)(T * m->k) * 4);
  char *seen = calloc((size_t)l->L, 1);
  CU_CHECK(&cu, cuMemcpyDtoH(ids, l->ids, (size_t)(T * m->k) * 4));
  for (int64_t i = 0; i < T * m->k; i++)
    if (ids[i] >= 0 && ids[i] < l->L) {
      l->local_routes++;
      if (!seen[ids[i]]) seen[ids[i]] = 1, l->experts_touched++;
    }
  free(ids), free(seen);
}

static void layer_free(layer *l) {
  CUdeviceptr ps[] = {l->x, l->logits, l->ids, l->wts, l->ws, l->te, l->mn, l->e2p, l->p2e, l->nt, l->w13, l->w2, l->h, l->y};
  for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) CU_CHECK(&cu, cuMemFree(ps[i]));
}

static void run_g1(void *ctx, int call) {
  (void)call;
  layer *l = ctx;
  check(fi_moe_grouped_gemm(l->rt, &l->t_x, &l->t_w13, &l->so, &l->g1, &l->t_h, NULL), "gemm1");
}
static void run_g2(void *ctx, int call) {
  (void)call;
  layer *l = ctx;
  check(fi_moe_grouped_gemm(l->rt, &l->t_h, &l->t_w2, &l->so, &l->g2, &l->t_y, NULL), "gemm2");
}
static fi_fused_moe_params fused_p;
static DLTensor fused_ws, fused_out;
static void run_fused(void *ctx, int call) {
  (void)call;
  layer *l = ctx;
  check(fi_fused_moe(l->rt, &l->t_x, &l->t_l, NULL, NULL, NULL, &l->t_w13, &l->t_w2, &fused_p, &fused_ws, &fused_out,
                     NULL),
        "fi_fused_moe");
}
static void run_route(void *ctx, int call) {
  (void)call;
  layer *l = ctx;
  check(fi_moe_routing(l->rt, &l->t_l, NULL, &l->rp, &l->t_ids, &l->t_wts, NULL), "fi_moe_routing");
}
static void run_sort(void *ctx, int call) {
  (void)call;
  layer *l = ctx;
  check(fi_moe_sort(l->rt, &l->t_ids, &l->sp, &l->t_ws, &l->so, NULL), "fi_moe_sort");
}
static void run_route_sort(void *ctx, int call) {
  run_route(ctx, call);
  run_sort(ctx, call);
}

/* Routing + sort for DeepSeek-V3 (256 experts, top 8, 8 groups keep 4, no bias; tile 128) at
 * each of the n token counts Tr, EP 1 (and 8 with split), 20 calls back to back, us a call;
 * split: routing and the sort alone too (the moe_route section). */
static void route_sort_rows(fi_runtime *rt, const int64_t *Tr, int n, int reps, int split) {
  printf("\nrouting + sort (DeepSeek-V3: 256 experts, top 8, 8 groups keep 4, no bias; tile 128):\n%s",
         split ? "| T | EP | us | routing us | sort us |\n|---|---|---|---|---|\n" : "| T | us |\n|---|---|\n");
  for (int ti = 0; ti < n; ti++)
    for (int ep = 1; ep <= (split ? 8 : 1); ep += 7) {
      const mshape m = {"deepseek-v3-router", 256, 8, 64, 64}; /* tiny H, I: only the tables matter */
      layer l;
      layer_make(&l, rt, &m, Tr[ti], ep, 128);
      l.rp.method = FI_MOE_ROUTING_DEEPSEEK_V3, l.rp.n_group = 8, l.rp.topk_group = 4, l.rp.routed_scaling_factor = 2.5;
      run_route_sort(&l, 0);
      const double ms = time_runs(run_route_sort, &l, 20, reps);
      if (!split) {
        printf("| %lld | %.1f |\n", (long long)Tr[ti], ms * 1e3);
        if (json) fprintf(json, "{\"bench\":\"moe_route_sort\",\"T\":%lld,\"us\":%.3f}\n", (long long)Tr[ti], ms * 1e3);
      } else {
        const double mr = time_runs(run_route, &l, 20, reps), msort = time_runs(run_sort, &l, 20, reps);
        printf("| %lld | %d | %.1f | %.1f | %.1f |\n", (long long)Tr[ti], ep, ms * 1e3, mr * 1e3, msort * 1e3);
        if (json)
          fprintf(json, "{\"bench\":\"moe_route_split\",\"T\":%lld,\"ep\":%d,\"us\":%.3f,\"route_us\":%.3f,\"sort_us\":%.3f}\n",
                  (long long)Tr[ti], ep, ms * 1e3, mr * 1e3, msort * 1e3);
      }
      layer_free(&l);
    }
}

static void run_moe(fi_runtime *rt, double copy) {
  (void)copy;
  const double mma = bench_probe(rt, fi_admin_mma_probe, 1 << 14, "mma.sync bf16 m16n8k16 (registers only)", "mma_probe");
  const double wg = bench_probe(rt, fi_admin_wgmma_probe, 1 << 13, "wgmma bf16 m64n128k16 (shared-memory operands)", "wgmma_probe");
  const double rd = bench_read(rt);
  const int reps = quick ? 3 : 7;
  printf("\nprefill sizes (bf16; GEMM1 = gather + x.W13^T + SwiGLU, GEMM2 = h.W2^T; tile 128):\n"
         "| model | T | EP | local routes | GEMM | ms | TFLOP/s | of mma.sync | of wgmma |\n"
         "|---|---|---|---|---|---|---|---|---|\n");
  char layers[4096] = "";
  size_t used = 0;
  const int64_t Ts[] = {4096, 16384};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int ep = 1; ep <= 8; ep += 7)
      for (size_t ti = 0; ti < (quick ? 1u : 2u); ti++) {
        const mshape *m = &shapes[s];
        layer l;
        layer_make(&l, rt, m, Ts[ti], ep, 128);
        double gsum = 0;
        for (int g = 0; g < 2; g++) {
          run_fn fn = g ? run_g2 : run_g1;
          fn(&l, 0);
          const double ms = time_runs(fn, &l, 3, reps);
          gsum += ms;
          const double flops = 2.0 * (double)l.local_routes * (double)(g ? m->H : 2 * m->I) * (double)(g ? m->I : m->H);
          const double tf = flops / (ms * 1e-3) / 1e12;
          printf("| %s | %lld | %d | %lld | %s | %.3f | %.1f | %.2f | %.2f |\n", m->model, (long long)l.T, ep,
                 (long long)l.local_routes, g ? "GEMM2" : "GEMM1+SwiGLU", ms, tf, mma > 0 ? tf / mma : 0,
                 wg > 0 ? tf / wg : 0);
          if (json)
            fprintf(json,
                    "{\"bench\":\"moe_gemm\",\"model\":\"%s\",\"T\":%lld,\"ep\":%d,\"gemm\":%d,\"routes\":%lld,\"ms\":%.5f,"
                    "\"tflops\":%.3f,\"of_mma\":%.4f,\"of_wgmma\":%.4f}\n",
                    m->model, (long long)l.T, ep, g + 1, (long long)l.local_routes, ms, tf, mma > 0 ? tf / mma : 0,
                    wg > 0 ? tf / wg : 0);
        }
        /* The whole layer in one call (routing from the logits included), against its GEMMs. */
        fi_fused_moe_params_init(&fused_p);
        fused_p.routing = l.rp, fused_p.num_experts = m->E, fused_p.local_num_experts = l.L, fused_p.tile_size = 128;
        size_t wsb = 0;
        check(fi_fused_moe_workspace_size(rt, l.T, m->H, m->I, &fused_p, &wsb), "fi_fused_moe_workspace_size");
        const CUdeviceptr dws = alloc(wsb), dout = alloc((size_t)(l.T * m->H) * 2);
        int64_t s_ws[1] = {(int64_t)wsb};
        fused_ws = tensor(dws, 2, 1, s_ws), fused_ws.dtype = (DLDataType){kDLUInt, 8, 1};
        fused_out = tensor(dout, 1, 2, l.s_x);
        run_fused(&l, 0);
        const double fms = time_runs(run_fused, &l, 3, reps);
        used += (size_t)snprintf(layers + used, used < sizeof layers ? sizeof layers - used : 0,
                                 "| %s | %lld | %d | %.3f | %.3f | %.3f |\n", m->model, (long long)l.T, ep, fms, gsum,
                                 fms / gsum);
        if (json)
          fprintf(json, "{\"bench\":\"fused_moe\",\"model\":\"%s\",\"T\":%lld,\"ep\":%d,\"ms\":%.5f,\"gemms_ms\":%.5f}\n",
                  m->model, (long long)l.T, ep, fms, gsum);
        CU_CHECK(&cu, cuMemFree(dws));
        CU_CHECK(&cu, cuMemFree(dout));
        layer_free(&l);
      }
  printf("\nthe whole layer (fi_fused_moe: routing, sort, GEMM1, GEMM2, finalize) against its two GEMMs:\n"
         "| model | T | EP | layer ms | GEMMs ms | ratio |\n|---|---|---|---|---|---|\n%s", layers);
  printf("\ndecode sizes (bf16, EP=1, fi_fused_moe's tile; bytes: the touched experts' W13 and W2, read once; read "
         "probe %.2f TB/s):\n"
         "| model | T | experts touched | ms (GEMM1 + GEMM2) | TB/s | of read |\n|---|---|---|---|---|---|\n",
         rd);
  const int64_t Td[] = {1, 8, 64};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (size_t ti = 0; ti < 3; ti++) {
      const mshape *m = &shapes[s];
      layer l;
      /* the tile fi_fused_moe takes at this size (64 here), as a serving engine runs it,
       * so that tactics tuned for the preset's jobs (fi-cache tune --preset) apply */
      layer_make(&l, rt, m, Td[ti], 1, fi_moe_default_tile(Td[ti], m->k, m->E));
      run_g1(&l, 0), run_g2(&l, 0);
      const double ms = time_runs(run_g1, &l, 5, reps) + time_runs(run_g2, &l, 5, reps);
      const double bytes = (double)l.experts_touched * 3.0 * (double)m->H * (double)m->I * 2.0;
      const double tbs = bytes / (ms * 1e-3) / 1e12;
      printf("| %s | %lld | %lld | %.4f | %.2f | %.2f |\n", m->model, (long long)l.T, (long long)l.experts_touched, ms,
             tbs, rd > 0 ? tbs / rd : 0);
      if (json)
        fprintf(json, "{\"bench\":\"moe_decode\",\"model\":\"%s\",\"T\":%lld,\"experts\":%lld,\"ms\":%.5f,\"tbs\":%.3f,\"of_read\":%.4f}\n",
                m->model, (long long)l.T, (long long)l.experts_touched, ms, tbs, rd > 0 ? tbs / rd : 0);
      layer_free(&l);
    }
  const int64_t Tr[] = {64, 4096, 16384};
  route_sort_rows(rt, Tr, 3, reps, 0);
  /* Whether the GEMMs ran stored tactics (fi-bench --cache on a file fi-cache tune filled)
   * or their rule: the lookups of this section's runtime. */
  fi_admin_stats st;
  if (fi_admin_stats_get(rt, &st) == FI_OK) {
    printf("\nstored tactics: %lld lookups found one, %lld found none (the rule chose)\n", (long long)st.tactic_hits,
           (long long)st.tactic_misses);
    if (json)
      fprintf(json, "{\"bench\":\"moe_tactics\",\"hits\":%lld,\"misses\":%lld}\n", (long long)st.tactic_hits,
              (long long)st.tactic_misses);
  }
}

const bench_section bench_moe_section = {
    "moe",
    "the experts' grouped GEMMs (Mixtral, Qwen3-30B-A3B, DeepSeek-V3 shapes; EP 1\n"
    "and 8; 4096 and 16384 tokens) against the tensor-core probes, decode sizes\n"
    "against the read probe, routing + sort; peer: lab/moe/torch_peer.py",
    0, run_moe};

static void run_moe_route(fi_runtime *rt, double copy) {
  (void)copy;
  const int64_t Tr[] = {1, 64, 512, 4096, 16384, 65536};
  route_sort_rows(rt, Tr, 6, quick ? 3 : 7, 1);
}

const bench_section bench_moe_route_section = {
    "moe_route",
    "routing + sort alone (DeepSeek-V3, 1 to 65536 tokens, EP 1 and 8), and each\n"
    "of the two alone: the moe section's last table without its GEMMs",
    0, run_moe_route};
