/* test_moe_args.c: fi_moe_routing's argument checks on a machine with no GPU (each bad
 * argument refused with FI_ERR_INVALID_ARGUMENT naming it, before any device is touched),
 * and its kernel choice: every key it can pick is a registered configuration. */
#include <stdint.h>
#include <string.h>

#include "ft.h"
#include "ops_moe.h"
#include "test_args_util.h"

#define ADDR ((void *)(uintptr_t)0x100000)

typedef struct tens {
  DLTensor t;
  int64_t shape[2], strides[2];
} tens;

static void mk(tens *x, void *data, uint8_t code, uint8_t bits, int ndim, int64_t d0, int64_t d1, int devtype) {
  memset(x, 0, sizeof *x);
  x->t.data = data;
  x->t.device.device_type = devtype;
  x->t.ndim = ndim;
  x->t.dtype = (DLDataType){code, bits, 1};
  x->shape[0] = d0, x->shape[1] = d1;
  x->strides[0] = ndim == 2 ? d1 : 1, x->strides[1] = 1;
  x->t.shape = x->shape;
  x->t.strides = x->strides;
}

typedef struct call {
  tens logits, bias, ids, w;
  fi_moe_routing_params p;
  int use_bias;
} call;

/* A valid DeepSeek-V3 call: 16 tokens, 256 experts, top 8 of 4 of 8 groups. */
static void good(call *c) {
  mk(&c->logits, ADDR, kDLFloat, 32, 2, 16, 256, kDLCUDA);
  mk(&c->bias, (char *)ADDR + 65536, kDLFloat, 32, 1, 256, 0, kDLCUDA);
  mk(&c->ids, (char *)ADDR + 131072, kDLInt, 32, 2, 16, 8, kDLCUDA);
  mk(&c->w, (char *)ADDR + 196608, kDLFloat, 32, 2, 16, 8, kDLCUDA);
  fi_moe_routing_params_init(&c->p);
  c->p.method = FI_MOE_ROUTING_DEEPSEEK_V3;
  c->p.top_k = 8, c->p.n_group = 8, c->p.topk_group = 4, c->p.routed_scaling_factor = 2.5;
  c->use_bias = 1;
}

static fi_status go(fi_runtime *rt, call *c) {
  poison_error();
  return fi_moe_routing(rt, &c->logits.t, c->use_bias ? &c->bias.t : NULL, &c->p, &c->ids.t, &c->w.t, NULL);
}

#define EXPECT_BAD(rt, c, ...)                                                                     \
  do {                                                                                             \
    fi_status st_ = go(rt, c);                                                                     \
    FT_CHECK(st_ == FI_ERR_INVALID_ARGUMENT && names_all(fi_last_error(), NAMES(__VA_ARGS__)),      \
             "%s: %s", fi_status_string(st_), fi_last_error());                                    \
  } while (0)

FT_TEST(moe_routing_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt);
  call c;
  good(&c);
  /* Valid arguments get past every check to the device, which is not here. */
  fi_status st = go(rt, &c);
  FT_CHECK(st == FI_ERR_NO_DEVICE || st == FI_ERR_DEVICE, "%s: %s", fi_status_string(st), fi_last_error());
  /* ... and no tokens means nothing to do. */
  good(&c), c.logits.shape[0] = c.ids.shape[0] = c.w.shape[0] = 0;
  FT_CHECK(go(rt, &c) == FI_OK, "%s", fi_last_error());

  good(&c);
  poison_error();
  FT_CHECK(fi_moe_routing(NULL, &c.logits.t, NULL, &c.p, &c.ids.t, &c.w.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "rt"));
  FT_CHECK(fi_moe_routing(rt, &c.logits.t, NULL, NULL, &c.ids.t, &c.w.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "p is NULL"));
  good(&c), c.logits.t.device.device_type = kDLCPU;
  EXPECT_BAD(rt, &c, "logits", "kDLCPU");
  good(&c), c.logits.t.dtype = (DLDataType){kDLFloat, 16, 1};
  EXPECT_BAD(rt, &c, "logits", "dtype");
  good(&c), c.logits.shape[1] = c.logits.strides[0] = 513;
  EXPECT_BAD(rt, &c, "logits", "513 experts");
  good(&c), c.logits.strides[1] = 2;
  EXPECT_BAD(rt, &c, "logits", "column stride");
  good(&c), c.logits.strides[0] = 100;
  EXPECT_BAD(rt, &c, "logits", "row stride");
  good(&c), c.logits.t.byte_offset = 2;
  EXPECT_BAD(rt, &c, "logits", "multiple of 4 bytes"); /* the shared check: element alignment */
  good(&c), c.p.method = 5;
  EXPECT_BAD(rt, &c, "p->method");
  good(&c), c.p.top_k = 0;
  EXPECT_BAD(rt, &c, "p->top_k");
  good(&c), c.p.top_k = 33;
  EXPECT_BAD(rt, &c, "p->top_k");
  good(&c), c.p.routed_scaling_factor = 1.0 / 0.0;
  EXPECT_BAD(rt, &c, "routed_scaling_factor");
  good(&c), c.p.n_group = 7;
  EXPECT_BAD(rt, &c, "p->n_group");
  good(&c), c.p.n_group = 64;
  EXPECT_BAD(rt, &c, "p->n_group");
  good(&c), c.p.topk_group = 9;
  EXPECT_BAD(rt, &c, "p->topk_group");
  good(&c), c.p.topk_group = 0;
  EXPECT_BAD(rt, &c, "p->topk_group");
  good(&c), c.p.n_group = 64 / 2, c.p.topk_group = 1; /* one group of 8 experts holds top_k 8: fine... */
  c.p.top_k = 9, c.ids.shape[1] = c.w.shape[1] = 9, c.ids.strides[0] = c.w.strides[0] = 9;
  EXPECT_BAD(rt, &c, "p->topk_group", "top_k (9)"); /* ...but not 9 */
  good(&c), c.p.method = FI_MOE_ROUTING_RENORMALIZE;
  EXPECT_BAD(rt, &c, "correction_bias", "DeepSeek");
  good(&c), c.bias.shape[0] = 255;
  EXPECT_BAD(rt, &c, "correction_bias");
  good(&c), c.bias.t.dtype = (DLDataType){kDLBfloat, 16, 1};
  EXPECT_BAD(rt, &c, "correction_bias");
  good(&c), c.ids.t.dtype = (DLDataType){kDLInt, 64, 1};
  EXPECT_BAD(rt, &c, "expert_ids", "int32");
  good(&c), c.ids.shape[1] = 7;
  EXPECT_BAD(rt, &c, "expert_ids", "shape");
  good(&c), c.w.shape[0] = 15;
  EXPECT_BAD(rt, &c, "weights", "shape");
  good(&c), c.w.t.data = (char *)c.ids.t.data + 64;
  EXPECT_BAD(rt, &c, "expert_ids", "weights", "overlap");
  good(&c), c.w.t.byte_offset = 2;
  EXPECT_BAD(rt, &c, "weights", "multiple of 4 bytes");
  good(&c), c.w.t.device.device_id = 1;
  EXPECT_BAD(rt, &c, "weights");
  fi_runtime_destroy(rt);
}

/* Every key the choice can make, for 1 to 512 experts on 32- and 64-lane warps, every
 * dtype and method, is one prewarm compiles. */
FT_TEST(moe_routing_keys_registered) {
  const int dts[2] = {JIT_DT_F32, JIT_DT_BF16};
  for (int d = 0; d < 2; d++)
    for (int m = 0; m < 5; m++)
      for (int warp = 32; warp <= 64; warp *= 2)
        for (int e = 1; e <= 512; e++) {
          jit_key k;
          jit_moe_routing_select(dts[d], m, e, warp, &k);
          FT_CHECK((int)k.v[MOE_ROUTE_P_EPL] * warp >= e, "E=%d warp %d: epl %d", e, warp,
                   (int)k.v[MOE_ROUTE_P_EPL]);
          FT_REQUIRE(op_registers(&jit_op_moe_routing, &k), "E=%d warp %d dtype %d method %d", e, warp, dts[d], m);
        }
}

/* fi_moe_max_tiles: the closed form, by brute force over small cases: the most tiles any
 * split of R routes over L experts needs is reached and never passed. */
FT_TEST(moe_max_tiles_is_the_tight_bound) {
  for (int L = 1; L <= 9; L++)
    for (int T = 1; T <= 4; T *= 2)
      for (int R = 0; R <= 40; R++) {
        /* the most tiles: as many experts as possible with one route past a multiple of T */
        int64_t best = 0;
        for (int n = 1; n <= L && n <= R; n++) { /* n nonempty experts */
          const int64_t rest = R - n; /* n routes of 1, then whole tiles of T spread as they fit */
          const int64_t tiles = n + rest / T;
          if (tiles > best) best = tiles;
        }
        FT_CHECK(fi_moe_max_tiles(R, 1, L, T) == best, "R=%d L=%d T=%d: %lld vs %lld", R, L, T,
                 (long long)fi_moe_max_tiles(R, 1, L, T), (long long)best);
      }
  FT_CHECK(fi_moe_max_tiles(4096, 8, 256, 128) == (32768 + 127 * 256) / 128);
  FT_CHECK(fi_moe_max_tiles(3, 2, 32, 64) == 6);
  FT_CHECK(fi_moe_max_tiles(-1, 8, 256, 128) == -1 && fi_moe_max_tiles(8, 0, 256, 128) == -1 &&
           fi_moe_max_tiles(8, 8, 0, 128) == -1 && fi_moe_max_tiles(8, 8, 8, 0) == -1);
}

FT_TEST(moe_sort_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt);
  const int64_t T = 100, K = 8, MT = fi_moe_max_tiles(T, 8, 32, 128);
  tens ids, ws, te, mn, e2p, p2e, nt, tp;
  char *a = (char *)ADDR;
  mk(&ids, a, kDLInt, 32, 2, T, K, kDLCUDA);
  mk(&ws, a + (1 << 20), kDLUInt, 8, 1, 1 << 16, 0, kDLCUDA);
  mk(&te, a + (2 << 20), kDLInt, 32, 1, MT, 0, kDLCUDA);
  mk(&mn, a + (3 << 20), kDLInt, 32, 1, MT, 0, kDLCUDA);
  mk(&e2p, a + (4 << 20), kDLInt, 32, 2, T, K, kDLCUDA);
  mk(&p2e, a + (5 << 20), kDLInt, 32, 1, MT * 128, 0, kDLCUDA);
  mk(&nt, a + (6 << 20), kDLInt, 32, 1, 1, 0, kDLCUDA);
  mk(&tp, a + (6 << 20) + 256, kDLInt, 32, 1, 1, 0, kDLCUDA);
  fi_moe_sort_outputs o = {&te.t, &mn.t, &e2p.t, &p2e.t, &nt.t, &tp.t};
  fi_moe_sort_params p = {256, 64, 32, 128};
  poison_error();
  fi_status st = fi_moe_sort(rt, &ids.t, &p, &ws.t, &o, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE || st == FI_ERR_DEVICE, "%s: %s", fi_status_string(st), fi_last_error());
#define SORT_BAD(...)                                                                               \
  do {                                                                                              \
    poison_error();                                                                                 \
    fi_status s_ = fi_moe_sort(rt, &ids.t, &p, &ws.t, &o, NULL);                                    \
    FT_CHECK(s_ == FI_ERR_INVALID_ARGUMENT && names_all(fi_last_error(), NAMES(__VA_ARGS__)), "%s: %s", \
             fi_status_string(s_), fi_last_error());                                                \
  } while (0)
  p.tile_size = 100;
  SORT_BAD("tile_size");
  p.tile_size = 128, p.local_num_experts = 257;
  SORT_BAD("local_num_experts");
  p.local_num_experts = 32, p.local_expert_offset = 240;
  SORT_BAD("local_expert_offset", "num_experts");
  p.local_expert_offset = 64;
  mn.shape[0] = MT - 1;
  SORT_BAD("tile_idx_to_mn_limit", "shape");
  mn.shape[0] = MT;
  p2e.shape[0] = MT * 64;
  SORT_BAD("permuted_idx_to_expanded_idx");
  p2e.shape[0] = MT * 128;
  e2p.t.dtype = (DLDataType){kDLInt, 64, 1};
  SORT_BAD("expanded_idx_to_permuted_idx", "int32");
  e2p.t.dtype = (DLDataType){kDLInt, 32, 1};
  tp.t.data = nt.t.data;
  SORT_BAD("num_non_exiting_tiles", "total_num_padded_tokens", "overlap");
  tp.t.data = a + (6 << 20) + 256;
  ws.shape[0] = 16;
  SORT_BAD("workspace", "fi_moe_sort_workspace_size");
  ws.shape[0] = 1 << 16;
  ws.t.byte_offset = 8;
  SORT_BAD("workspace", "aligned");
  ws.t.byte_offset = 0;
  ids.t.device.device_type = kDLCPU;
  SORT_BAD("expert_ids", "kDLCPU");
  ids.t.device.device_type = kDLCUDA;
  poison_error();
  FT_CHECK(fi_moe_sort(rt, &ids.t, &p, &ws.t, NULL, NULL) == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "out"));
  size_t bytes = 0;
  FT_CHECK(fi_moe_sort_workspace_size(rt, 16384, 8, &p, &bytes) == FI_OK && bytes >= 32 * 32 * 4 && bytes % 256 == 0,
           "%zu", bytes);
  FT_CHECK(fi_moe_sort_workspace_size(rt, 16384, 8, &p, NULL) == FI_ERR_INVALID_ARGUMENT);
  fi_runtime_destroy(rt);
}

FT_TEST(moe_permute_and_finalize_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt);
  char *a = (char *)ADDR;
  tens x, p2e, nt, out, y, e2p, w, fo;
  mk(&x, a, kDLBfloat, 16, 2, 100, 2048, kDLCUDA);
  mk(&p2e, a + (1 << 20), kDLInt, 32, 1, 8 * 128, 0, kDLCUDA);
  mk(&nt, a + (2 << 20), kDLInt, 32, 1, 1, 0, kDLCUDA);
  mk(&out, a + (4 << 20), kDLBfloat, 16, 2, 8 * 128, 2048, kDLCUDA);
  poison_error();
  fi_status st = fi_moe_permute(rt, &x.t, &p2e.t, &nt.t, 8, 128, &out.t, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE || st == FI_ERR_DEVICE, "%s: %s", fi_status_string(st), fi_last_error());
  poison_error();
  FT_CHECK(fi_moe_permute(rt, &x.t, &p2e.t, &nt.t, 8, 100, &out.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "tile_size"), "%s", fi_last_error());
  out.t.dtype = (DLDataType){kDLFloat, 16, 1};
  FT_CHECK(fi_moe_permute(rt, &x.t, &p2e.t, &nt.t, 8, 128, &out.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "out"), "%s", fi_last_error());
  out.t.dtype = (DLDataType){kDLBfloat, 16, 1};
  out.shape[0] = 8 * 128 - 1;
  FT_CHECK(fi_moe_permute(rt, &x.t, &p2e.t, &nt.t, 8, 128, &out.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "out"), "%s", fi_last_error());
  out.shape[0] = 8 * 128;
  out.t.data = a + 1000; /* over x */
  FT_CHECK(fi_moe_permute(rt, &x.t, &p2e.t, &nt.t, 8, 128, &out.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "overlaps"), "%s", fi_last_error());
  out.t.data = a + (4 << 20);

  mk(&y, a + (4 << 20), kDLBfloat, 16, 2, 8 * 128, 2048, kDLCUDA);
  mk(&e2p, a + (12 << 20), kDLInt, 32, 2, 100, 8, kDLCUDA);
  mk(&w, a + (13 << 20), kDLFloat, 32, 2, 100, 8, kDLCUDA);
  mk(&fo, a, kDLBfloat, 16, 2, 100, 2048, kDLCUDA);
  poison_error();
  st = fi_moe_finalize(rt, &y.t, &e2p.t, &w.t, 0, &fo.t, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE || st == FI_ERR_DEVICE, "%s: %s", fi_status_string(st), fi_last_error());
  FT_CHECK(fi_moe_finalize(rt, &y.t, &e2p.t, &w.t, 2, &fo.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "accumulate"), "%s", fi_last_error());
  w.t.dtype = (DLDataType){kDLBfloat, 16, 1};
  FT_CHECK(fi_moe_finalize(rt, &y.t, &e2p.t, &w.t, 0, &fo.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "weights"), "%s", fi_last_error());
  w.t.dtype = (DLDataType){kDLFloat, 32, 1};
  fo.shape[0] = 99;
  FT_CHECK(fi_moe_finalize(rt, &y.t, &e2p.t, &w.t, 0, &fo.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "out"), "%s", fi_last_error());
  fo.shape[0] = 100;
  fo.t.data = a + (4 << 20) + 64; /* over y */
  FT_CHECK(fi_moe_finalize(rt, &y.t, &e2p.t, &w.t, 0, &fo.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
           strstr(fi_last_error(), "overlaps"), "%s", fi_last_error());
  fi_runtime_destroy(rt);
}

/* fi_moe_grouped_gemm: a valid call reaches the device (none here); each bad argument is
 * refused naming it. */
FT_TEST(moe_grouped_gemm_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt);
  char *m = (char *)ADDR;
  const int64_t T = 100, K = 8, L = 16, H = 512, I = 256, TS = 128, MT = fi_moe_max_tiles(T, (int)K, (int)L, (int)TS);
  tens x, e2p, te, mn, nt, p2e, h;
  mk(&x, m, kDLBfloat, 16, 2, T, H, kDLCUDA);
  mk(&e2p, m + (1 << 20), kDLInt, 32, 2, T, K, kDLCUDA);
  mk(&te, m + (2 << 20), kDLInt, 32, 1, MT, 0, kDLCUDA);
  mk(&mn, m + (3 << 20), kDLInt, 32, 1, MT, 0, kDLCUDA);
  mk(&nt, m + (4 << 20), kDLInt, 32, 1, 1, 0, kDLCUDA);
  mk(&p2e, m + (5 << 20), kDLInt, 32, 1, MT * TS, 0, kDLCUDA);
  mk(&h, m + (8 << 20), kDLBfloat, 16, 2, MT * TS, I, kDLCUDA);
  int64_t ws[3] = {L, 2 * I, H}, wst[3] = {2 * I * H, H, 1};
  DLTensor w;
  memset(&w, 0, sizeof w);
  w.data = m + (64 << 20), w.device.device_type = kDLCUDA, w.ndim = 3, w.dtype = (DLDataType){kDLBfloat, 16, 1};
  w.shape = ws, w.strides = wst;
  fi_moe_sort_outputs so = {&te.t, &mn.t, &e2p.t, &p2e.t, &nt.t, &nt.t};
  fi_moe_gemm_params p;
  fi_moe_gemm_params_init(&p);
  p.tile_size = (int)TS, p.activation = FI_MOE_GEMM_SWIGLU, p.gather = 1;
#define GEMM_BAD(what)                                                                                      \
  do {                                                                                                      \
    poison_error();                                                                                         \
    fi_status st_ = fi_moe_grouped_gemm(rt, &x.t, &w, &so, &p, &h.t, NULL);                                 \
    FT_CHECK(st_ == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), what), "%s: %s", fi_status_string(st_), \
             fi_last_error());                                                                              \
  } while (0)
  poison_error();
  fi_status st = fi_moe_grouped_gemm(rt, &x.t, &w, &so, &p, &h.t, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE || st == FI_ERR_DEVICE, "%s: %s", fi_status_string(st), fi_last_error());
  p.tile_size = 100;
  GEMM_BAD("tile_size");
  p.tile_size = (int)TS, p.activation = 7;
  GEMM_BAD("activation");
  p.activation = FI_MOE_GEMM_SWIGLU, p.gather = 2;
  GEMM_BAD("gather");
  p.gather = 1, p.gate_first = -1;
  GEMM_BAD("gate_first");
  p.gate_first = 0, p.block_m = 32;
  GEMM_BAD("block_m");
  p.block_m = 0;
  x.shape[1] = H - 8; /* k not a multiple of 64 */
  GEMM_BAD("k = 504");
  x.shape[1] = H, ws[1] = 2 * I + 2; /* 2n with n not a multiple of 64 */
  GEMM_BAD("rows an expert");
  ws[1] = 2 * I, ws[0] = L + 1; /* the tables were sorted for other experts */
  GEMM_BAD("fi_moe_max_tiles");
  ws[0] = L, w.dtype = (DLDataType){kDLFloat, 16, 1};
  GEMM_BAD("weights has dtype");
  w.dtype = (DLDataType){kDLBfloat, 16, 1}, x.shape[0] = T + 1; /* gather: a's rows are the tokens */
  GEMM_BAD("a has 101 rows");
  x.shape[0] = T, x.strides[0] = H + 4; /* rows not 16-byte aligned */
  GEMM_BAD("a row stride");
  x.strides[0] = H, h.shape[1] = I + 64;
  GEMM_BAD("out");
  h.shape[1] = I, h.t.data = m + (64 << 20) + 128; /* over the weights */
  GEMM_BAD("overlaps");
  h.t.data = m + (8 << 20), te.t.dtype = (DLDataType){kDLInt, 64, 1};
  GEMM_BAD("tile_idx_to_expert_idx");
  te.t.dtype = (DLDataType){kDLInt, 32, 1}, p2e.t.device.device_id = 1;
  GEMM_BAD("permuted_idx_to_expanded_idx");
  p.gather = 0; /* the table is not read without the gather, but a is then [rows, k] */
  GEMM_BAD("a has 100 rows");
  p2e.t.device.device_id = 0;
  FT_CHECK(fi_moe_grouped_gemm(rt, &x.t, &w, NULL, &p, &h.t, NULL) == FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "tables"),
           "%s", fi_last_error());
#undef GEMM_BAD
  fi_runtime_destroy(rt);
}

/* Every key the GEMM's choice can make is one prewarm compiles, and its shape divides the
 * problem: block rows divide the tile, columns divide n, stages fit the shared memory. */
FT_TEST(moe_gemm_keys_registered) {
  const int dts[2] = {JIT_DT_F16, JIT_DT_BF16}, tiles[3] = {64, 128, 256}, bms[4] = {0, 16, 64, 128};
  const int smem[8] = {64, 99, 163, 227, 64, 99, 163, 227};
  const int64_t routes[4] = {1, 100, 5000, 1 << 20}, ns[3] = {64, 768, 7168};
  int checked = 0, wg_keys = 0;
  for (int d = 0; d < 2; d++)
    for (int t = 0; t < 3; t++)
      for (int b = 0; b < 4; b++)
        for (int g = 0; g < 4; g++)
          for (int r = 0; r < 4; r++)
            for (int n = 0; n < 3; n++)
              for (int s = 0; s < 8; s++) {
                const int wg = s >= 4;
                if (bms[b] > tiles[t]) continue;
                jit_key k;
                jit_moe_gemm_choose(dts[d], routes[r], 32, tiles[t], bms[b], g & 1, g >> 1, ns[n], smem[s], wg, &k);
                if (k.op == &jit_op_moe_gemm_sm90) {
                  FT_CHECK(wg && tiles[t] % 128 == 0 && ns[n] % 128 == 0 && (bms[b] == 0 || bms[b] == 128),
                           "wgmma at tile %d n %lld block_m %d", tiles[t], (long long)ns[n], bms[b]);
                  FT_REQUIRE(op_registers(&jit_op_moe_gemm_sm90, &k));
                  wg_keys++;
                  continue;
                }
                const int bm = (int)k.v[MOE_GEMM_P_BM], bn = (int)k.v[MOE_GEMM_P_BN];
                const int st = (int)k.v[MOE_GEMM_P_STAGES], nb = (g & 1) ? 2 : 1;
                FT_CHECK(tiles[t] % bm == 0 && ns[n] % bn == 0, "tile %d bm %d n %lld bn %d", tiles[t], bm,
                         (long long)ns[n], bn);
                FT_CHECK(st * (bm + nb * bn) * 128 <= smem[s] * 1024, "stages %d of bm %d bn %d over %d KiB", st, bm,
                         bn, smem[s]);
                FT_REQUIRE(op_registers(&jit_op_moe_gemm, &k), "tile %d bm %d gated %d n %lld smem %d", tiles[t],
                           bms[b], g & 1, (long long)ns[n], smem[s]);
                checked++;
              }
  FT_CHECK(checked > 1000 && wg_keys > 50, "%d mma.sync keys, %d wgmma keys", checked, wg_keys);
}

/* fi_fused_moe: the workspace size follows the tile rule and grows with the tokens; a
 * valid call reaches the device (none here); bad arguments are refused naming them. */
FT_TEST(fused_moe_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt);
  fi_fused_moe_params p;
  fi_fused_moe_params_init(&p);
  p.routing.method = FI_MOE_ROUTING_SOFTMAX_TOPK_RENORM, p.routing.top_k = 8;
  p.num_experts = 128, p.local_num_experts = 128;
  size_t small = 0, big = 0, b128 = 0;
  FT_REQUIRE(fi_fused_moe_workspace_size(rt, 4, 2048, 768, &p, &small) == FI_OK, "%s", fi_last_error());
  FT_REQUIRE(fi_fused_moe_workspace_size(rt, 4096, 2048, 768, &p, &big) == FI_OK, "%s", fi_last_error());
  p.tile_size = 128;
  FT_REQUIRE(fi_fused_moe_workspace_size(rt, 4, 2048, 768, &p, &b128) == FI_OK, "%s", fi_last_error());
  FT_CHECK(small > 0 && big > small && b128 > small && small % 256 == 0, "%zu %zu %zu", small, big, b128);
  /* 4 tokens: 32 routes, at most 32 tiles of 64 rows, h and y bf16 */
  FT_CHECK(small >= (size_t)32 * 64 * (2048 + 768) * 2, "%zu", small);
  p.tile_size = 0;
  poison_error();
  FT_CHECK(fi_fused_moe_workspace_size(rt, 4, 2048, 768, NULL, &small) == FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "p is NULL"),
           "%s", fi_last_error());
  p.tile_size = 96;
  FT_CHECK(fi_fused_moe_workspace_size(rt, 4, 2048, 768, &p, &small) == FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "tile_size"),
           "%s", fi_last_error());
  p.tile_size = 0, p.local_num_experts = 0;
  FT_CHECK(fi_fused_moe_workspace_size(rt, 4, 2048, 768, &p, &small) == FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "local_num_experts"),
           "%s", fi_last_error());
  p.local_num_experts = 128;

  char *m = (char *)ADDR;
  const int64_t T = 4, H = 2048, I = 768;
  tens x, lg, out, ws, ids, wts;
  mk(&x, m, kDLBfloat, 16, 2, T, H, kDLCUDA);
  mk(&lg, m + (1 << 20), kDLFloat, 32, 2, T, 128, kDLCUDA);
  mk(&out, m + (2 << 20), kDLBfloat, 16, 2, T, H, kDLCUDA);
  mk(&ids, m + (3 << 20), kDLInt, 32, 2, T, 8, kDLCUDA);
  mk(&wts, m + (3 << 20) + 4096, kDLFloat, 32, 2, T, 8, kDLCUDA);
  FT_REQUIRE(fi_fused_moe_workspace_size(rt, T, H, I, &p, &small) == FI_OK);
  mk(&ws, m + (1LL << 32), kDLUInt, 8, 1, (int64_t)small, 0, kDLCUDA);
  int64_t s13[3] = {128, 2 * I, H}, s2[3] = {128, H, I};
  DLTensor w13, w2;
  memset(&w13, 0, sizeof w13);
  w13.data = m + (1LL << 34), w13.device.device_type = kDLCUDA, w13.ndim = 3, w13.dtype = (DLDataType){kDLBfloat, 16, 1};
  w2 = w13;
  w13.shape = s13, w2.shape = s2, w2.data = m + (1LL << 35);
  poison_error();
  fi_status st = fi_fused_moe(rt, &x.t, &lg.t, NULL, NULL, NULL, &w13, &w2, &p, &ws.t, &out.t, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE || st == FI_ERR_DEVICE, "%s: %s", fi_status_string(st), fi_last_error());
  FT_CHECK(fi_fused_moe(rt, &x.t, &lg.t, NULL, &ids.t, &wts.t, &w13, &w2, &p, &ws.t, &out.t, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "not both"),
           "%s", fi_last_error());
  FT_CHECK(fi_fused_moe(rt, &x.t, NULL, NULL, &ids.t, NULL, &w13, &w2, &p, &ws.t, &out.t, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "expert_weights"),
           "%s", fi_last_error());
  ws.shape[0] = (int64_t)small - 256;
  FT_CHECK(fi_fused_moe(rt, &x.t, &lg.t, NULL, NULL, NULL, &w13, &w2, &p, &ws.t, &out.t, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "workspace has"),
           "%s", fi_last_error());
  ws.shape[0] = (int64_t)small, ws.t.data = m; /* over x */
  FT_CHECK(fi_fused_moe(rt, &x.t, &lg.t, NULL, NULL, NULL, &w13, &w2, &p, &ws.t, &out.t, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "overlaps"),
           "%s", fi_last_error());
  ws.t.data = m + (1LL << 32);
  /* Checked before anything is read or queued: a NULL tensor, the experts of the weights. */
  FT_CHECK(fi_fused_moe(rt, &x.t, &lg.t, NULL, NULL, NULL, &w13, &w2, &p, &ws.t, NULL, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "out"),
           "%s", fi_last_error());
  FT_CHECK(fi_fused_moe(rt, &x.t, &lg.t, NULL, NULL, NULL, NULL, &w2, &p, &ws.t, &out.t, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "w13"),
           "%s", fi_last_error());
  s13[0] = 64;
  FT_CHECK(fi_fused_moe(rt, &x.t, &lg.t, NULL, NULL, NULL, &w13, &w2, &p, &ws.t, &out.t, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "w13 has 64 experts"),
           "%s", fi_last_error());
  s13[0] = 128, s2[1] = H + 64;
  FT_CHECK(fi_fused_moe(rt, &x.t, &lg.t, NULL, NULL, NULL, &w13, &w2, &p, &ws.t, &out.t, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "w2 [128, 2112, 768]"),
           "%s", fi_last_error());
  s2[1] = H;
  FT_CHECK(fi_fused_moe(rt, &x.t, NULL, &lg.t, &ids.t, &wts.t, &w13, &w2, &p, &ws.t, &out.t, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "correction_bias"),
           "%s", fi_last_error());
  p.accumulate = 3;
  FT_CHECK(fi_fused_moe(rt, &x.t, &lg.t, NULL, NULL, NULL, &w13, &w2, &p, &ws.t, &out.t, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "accumulate"),
           "%s", fi_last_error());
  fi_runtime_destroy(rt);
}

/* The grouped GEMM's tactics (the autotuner's list): the rule's first, each one's kernel
 * registered (prewarm covers it) and within the device's shared memory, no repeats, the
 * text form read back to the same tactic; tactics that cannot run a call are refused. */
FT_TEST(moe_gemm_tactics_listed_registered_and_parsed) {
  const int tiles[3] = {64, 128, 256}, smem[4] = {64, 99, 163, 227};
  const int64_t routes[3] = {8, 5000, 1 << 20}, ns[3] = {64, 768, 7168};
  int lists = 0, with_wg = 0;
  for (int t = 0; t < 3; t++)
    for (int g = 0; g < 2; g++)
      for (int r = 0; r < 3; r++)
        for (int n = 0; n < 3; n++)
          for (int s = 0; s < 4; s++)
            for (int wg = 0; wg < 2; wg++) {
              jit_moe_gemm_tactic ts[32];
              const int c = jit_moe_gemm_tactics(routes[r], 32, tiles[t], g, ns[n], smem[s], wg, ts, 32);
              FT_REQUIRE(c >= 1 && c < 32, "%d tactics", c);
              jit_moe_gemm_tactic rule;
              jit_moe_gemm_rule(routes[r], 32, tiles[t], g, ns[n], smem[s], wg, &rule);
              FT_CHECK(memcmp(&ts[0], &rule, sizeof rule) == 0, "the rule's tactic first");
              jit_key rk, ck;
              jit_moe_gemm_choose(JIT_DT_BF16, routes[r], 32, tiles[t], 0, g, 1, ns[n], smem[s], wg, &ck);
              FT_REQUIRE(jit_moe_gemm_tactic_key(&rule, JIT_DT_BF16, tiles[t], g, 1, ns[n], smem[s], wg, &rk) == 0);
              FT_CHECK(rk.op == ck.op && memcmp(rk.v, ck.v, sizeof rk.v) == 0, "the rule's tactic is the chooser's");
              for (int i = 0; i < c; i++) {
                jit_key k;
                char text[64];
                jit_moe_gemm_tactic back;
                FT_REQUIRE(jit_moe_gemm_tactic_key(&ts[i], JIT_DT_F16, tiles[t], g, 0, ns[n], smem[s], wg, &k) == 0);
                FT_REQUIRE(op_registers(k.op, &k), "tactic %d of tile %d gated %d", i, tiles[t], g);
                if (!ts[i].wgmma)
                  FT_CHECK(ts[i].stages * (ts[i].bm + (g ? 2 : 1) * ts[i].bn) * 128 <= smem[s] * 1024);
                FT_REQUIRE(jit_moe_gemm_tactic_format(&ts[i], text, sizeof text) == 0);
                FT_REQUIRE(jit_moe_gemm_tactic_parse(text, &back) == 0, "%s", text);
                jit_key k2;
                FT_REQUIRE(jit_moe_gemm_tactic_key(&back, JIT_DT_F16, tiles[t], g, 0, ns[n], smem[s], wg, &k2) == 0);
                FT_CHECK(k2.op == k.op && memcmp(k2.v, k.v, sizeof k.v) == 0, "%s read back", text);
                for (int j = 0; j < i; j++) FT_CHECK(memcmp(&ts[i], &ts[j], sizeof ts[i]) != 0, "repeat %s", text);
                with_wg += ts[i].wgmma;
              }
              lists++;
            }
  FT_CHECK(lists == 432 && with_wg > 20, "%d lists, %d with wgmma", lists, with_wg);
  /* Refused: rows over the tile, a gated block of 128 columns, an unregistered stage
   * count, more shared memory than the device has, wgmma where it cannot run. */
  const jit_moe_gemm_tactic no[5] = {{0, 128, 64, 3}, {0, 64, 128, 3}, {0, 64, 64, 5}, {0, 128, 128, 3},
                                     {1, 128, 64, 4}};
  jit_key k;
  FT_CHECK(jit_moe_gemm_tactic_key(&no[0], JIT_DT_BF16, 64, 1, 1, 768, 227, 1, &k) == -1, "bm 128 over tile 64");
  FT_CHECK(jit_moe_gemm_tactic_key(&no[1], JIT_DT_BF16, 128, 1, 1, 768, 227, 1, &k) == -1, "gated bn 128");
  FT_CHECK(jit_moe_gemm_tactic_key(&no[2], JIT_DT_BF16, 128, 1, 1, 768, 227, 1, &k) == -1, "5 stages");
  FT_CHECK(jit_moe_gemm_tactic_key(&no[3], JIT_DT_BF16, 128, 0, 0, 768, 64, 0, &k) == -1, "3 stages in 64 KiB");
  FT_CHECK(jit_moe_gemm_tactic_key(&no[4], JIT_DT_BF16, 128, 1, 1, 768, 227, 0, &k) == -1, "wgmma not allowed");
  FT_CHECK(jit_moe_gemm_tactic_key(&no[4], JIT_DT_BF16, 64, 1, 1, 768, 227, 1, &k) == -1, "wgmma at tile 64");
  jit_moe_gemm_tactic t;
  const char *texts[5] = {"", "kernel=mma;bm=16", "kernel=mma;bm=16;bn=64;stages=2;x=1", "kernel=wgmma;", "bm=16"};
  for (int i = 0; i < 5; i++) FT_CHECK(jit_moe_gemm_tactic_parse(texts[i], &t) == -1, "'%s'", texts[i]);
}
