/* test_decode_args.c: decode attention on a machine with no GPU: the batch planner on
 * ragged batches (every token covered once, chunks in bounds, workspace large enough),
 * kernel keys against the registry, and bad arguments refused by name. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_params.h"
#include "fi_admin.h"
#include "fi_runtime.h"
#include "ft.h"
#include "test_args_util.h"
#include "jit_registry.h"
#include "jit_render.h"
#include "ops_decode.h"
#include "rt_decode.h"
#include "rt_decode_args.h"
#include "rt_decode_choose.h"
#include "rt_internal.h"

#define IW FI_DECODE_ITEM_WORDS
#define ADDR(i) ((void *)(uintptr_t)(0x10000000u * (unsigned)((i) + 1)))

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

/* ---- the planner ---- */


/* Checks one partition of a batch against its definition; returns failures. */
static int check_partition(int B, const int32_t *indptr, const int32_t *last, int ps, int wl,
                           int64_t target, int64_t cap, const int32_t *items, int64_t n, int chunk) {
  int bad = 0;
  if (n < B || n > cap) {
    fprintf(stderr, "  %lld items for %d requests, capacity %lld\n", (long long)n, B, (long long)cap);
    return 1;
  }
  if (B >= target && n != B) bad++;
  if (B < target && n > target && n != B) bad++;
  int64_t i = 0;
  for (int b = 0; b < B; b++) {
    const int64_t np = indptr[b + 1] - indptr[b];
    const int64_t L = np > 0 ? (np - 1) * ps + last[b] : 0;
    const int64_t start = wl >= 0 && L - 1 - wl > 0 ? L - 1 - wl : 0;
    if (i >= n || items[IW * i] != b) {
      fprintf(stderr, "  request %d has no item at %lld\n", b, (long long)i);
      return bad + 1;
    }
    const int nc = items[IW * i + 3] >> 16;
    int64_t at = L > 0 ? start : 0;
    for (int k = 0; k < nc; k++, i++) {
      const int32_t *it = items + IW * i;
      if (i >= n || it[0] != b || (it[3] & 0xffff) != k || (it[3] >> 16) != nc) {
        fprintf(stderr, "  request %d chunk %d: item %lld is (%d, %d, %d, %#x)\n", b, k,
                (long long)i, it[0], it[1], it[2], it[3]);
        return bad + 1;
      }
      if (it[1] != at || it[2] < it[1] || it[2] > L || (L > 0 && it[2] == it[1])) bad++;
      if (it[4] != indptr[b] || it[5] != L) bad++;
      if (k > 0 && it[1] % ps != 0) bad++;         /* chunks start on page boundaries */
      if (nc > 1 && it[2] - it[1] > (int64_t)chunk * ps) bad++; /* within the chunk size */
      at = it[2];
    }
    if (at != L) {
      fprintf(stderr, "  request %d covered up to %lld of %lld\n", b, (long long)at, (long long)L);
      bad++;
    }
  }
  if (i != n) bad++;
  return bad;
}

FT_TEST(planner_ragged_batches_cover_every_token_once) {
  int cases = 0, fails = 0;
  for (int rep = 0; rep < 400; rep++) {
    const int B = rep % 7 == 0 ? 1 + (int)(rnd() % 3) : (int)(rnd() % 300);
    const int ps = (int[]){1, 2, 3, 7, 8, 16, 32, 64}[rnd() % 8];
    const int hkv = (int[]){1, 2, 4, 8, 32}[rnd() % 5], group = 1 + (int)(rnd() % 16);
    const int sms = (int[]){1, 8, 108, 132}[rnd() % 4];
    const int wl = rnd() % 4 == 0 ? (int)(rnd() % 3000) : -1;
    const int maxb = rnd() % 3 == 0 ? B + (int)(rnd() % 50) : B;
    int32_t *indptr = malloc(sizeof(int32_t) * (size_t)(B + 1)), *last = malloc(sizeof(int32_t) * (size_t)(B + 1));
    indptr[0] = (int32_t)(rnd() % 5);
    for (int b = 0; b < B; b++) {
      const int len = rnd() % 9 == 0 ? 0 : rnd() % 5 == 0 ? 1 + (int)(rnd() % (20000 / ps + 1)) * ps
                                                            : 1 + (int)(rnd() % 9000);
      const int np = (len + ps - 1) / ps;
      indptr[b + 1] = indptr[b] + np;
      last[b] = np ? len - (np - 1) * ps : 0;
    }
    char err[256];
    FT_REQUIRE(rt_decode_check_pages(B, indptr, last, ps, err, sizeof err) == 0, "%s", err);
    rt_decode_layout l;
    rt_decode_layout_for(maxb, sms, hkv * group, hkv, 128, &l);
    const int resident = sms * (1 + (int)(rnd() % RT_DECODE_MAX_BLOCKS_PER_SM));
    const int64_t target = rt_decode_target_items(resident, hkv);
    int32_t *items = malloc((size_t)l.capacity * IW * 4);
    int chunk = 0;
    const int64_t n = rt_decode_partition(B, indptr, last, ps, wl, target, items, l.capacity, &chunk);
    const int bad = check_partition(B, indptr, last, ps, wl, target, l.capacity, items, n, chunk);
    if (bad) {
      fprintf(stderr, "  B=%d ps=%d hkv=%d sms=%d wl=%d: %d problems\n", B, ps, hkv, sms, wl, bad);
      fails++;
    }
    /* The workspace regions hold what the kernels write and do not overlap. */
    FT_CHECK(l.items_off >= FI_DECODE_HDR_WORDS * 4);
    FT_CHECK(l.counters_off >= l.items_off + n * IW * 4);
    FT_CHECK(l.partial_o_off >= l.counters_off + (int64_t)B * hkv * 4);
    FT_CHECK(l.partial_lse_off >= l.partial_o_off + n * hkv * group * 128 * 2); /* fp16/bf16 */
    FT_CHECK(l.bytes >= l.partial_lse_off + n * hkv * group * 4);
    FT_CHECK(l.counters_off % 256 == 0 && l.partial_o_off % 256 == 0 && l.partial_lse_off % 256 == 0);
    cases++;
    free(indptr);
    free(last);
    free(items);
  }
  fprintf(stderr, "  %d batches planned, %d with problems\n", cases, fails);
  FT_CHECK(fails == 0);
}

/* A batch of one long request is split over the device; many requests are not split. */
FT_TEST(planner_splits_small_batches_only) {
  int32_t indptr[2] = {0, 512}, last[1] = {16};
  int32_t items[IW * 1024];
  int chunk;
  const int64_t target = rt_decode_target_items(132 * 2, 8); /* 33 */
  int64_t n = rt_decode_partition(1, indptr, last, 16, -1, target, items, 1024, &chunk);
  FT_CHECK(n > 16 && n <= target, "B=1 L=8192: %lld items", (long long)n);
  FT_CHECK(chunk * 16 >= 128, "chunk %d pages", chunk);
  /* A sliding window covers only its tokens. */
  n = rt_decode_partition(1, indptr, last, 16, 99, target, items, 1024, &chunk);
  FT_CHECK(n == 1 && items[1] == 8192 - 100 && items[2] == 8192 && items[5] == 8192, "window: %lld items [%d, %d)",
           (long long)n, items[1], items[2]);
  int32_t ip[65], lp[64];
  ip[0] = 0;
  for (int b = 0; b < 64; b++) {
    ip[b + 1] = ip[b] + 256;
    lp[b] = 16;
  }
  n = rt_decode_partition(64, ip, lp, 16, -1, target, items, 1024, &chunk);
  FT_CHECK(n == 64, "B=64: %lld items", (long long)n);
  /* Lengths ending exactly on a page boundary, length 1, and an empty request. */
  int32_t ip2[4] = {0, 1, 3, 3}, lp2[3] = {1, 16, 0};
  n = rt_decode_partition(3, ip2, lp2, 16, -1, 2, items, 1024, &chunk);
  FT_CHECK(n == 3 && items[1] == 0 && items[2] == 1 && items[IW + 2] == 32 && items[2 * IW + 1] == 0 &&
               items[2 * IW + 2] == 0 && items[2 * IW + 4] == 3,
           "edge lengths: %lld items", (long long)n);
}

/* One-warp blocks when a request per block nearly fills a wave of them (H200: 132 SMs,
 * eight an SM), two-warp blocks when it fills a wave of four-warp ones, four-warp
 * blocks (and a split) otherwise. */
FT_TEST(planner_picks_block_size_by_waves) {
  const int64_t wide = 132 * 4;
  FT_CHECK(rt_decode_pick_warps(JIT_DT_BF16, 128, 8, wide) == DECODE_WARPS_ONE);   /* 1024 of 1056 */
  FT_CHECK(rt_decode_pick_warps(JIT_DT_BF16, 64, 32, wide) == DECODE_WARPS_ONE);
  FT_CHECK(rt_decode_pick_warps(JIT_DT_BF16, 256, 8, wide) == DECODE_WARPS_ONE);
  FT_CHECK(rt_decode_pick_warps(JIT_DT_BF16, 120, 8, wide) == DECODE_WARPS_WIDE);  /* 960 < 990 */
  FT_CHECK(rt_decode_pick_warps(JIT_DT_BF16, 64, 8, wide) == DECODE_WARPS_WIDE);   /* 512 blocks */
  FT_CHECK(rt_decode_pick_warps(JIT_DT_BF16, 33, 8, wide) == DECODE_WARPS_WIDE);   /* 264: a 4-warp wave */
  FT_CHECK(rt_decode_pick_warps(JIT_DT_BF16, 32, 8, wide) == DECODE_WARPS_SPLIT);
  FT_CHECK(rt_decode_pick_warps(JIT_DT_BF16, 16, 8, wide) == DECODE_WARPS_SPLIT);
  FT_CHECK(rt_decode_pick_warps(JIT_DT_BF16, 1, 8, wide) == DECODE_WARPS_SPLIT);
  FT_CHECK(rt_decode_pick_warps(JIT_DT_BF16, 0, 8, wide) == DECODE_WARPS_SPLIT);
  /* an fp8 cache: no 1-warp blocks */
  FT_CHECK(rt_decode_pick_warps(JIT_DT_E4M3, 128, 8, wide) == DECODE_WARPS_WIDE);
  FT_CHECK(rt_decode_pick_warps(JIT_DT_E5M2, 64, 8, wide) == DECODE_WARPS_WIDE);
  FT_CHECK(rt_decode_pick_warps(JIT_DT_E4M3, 33, 8, wide) == DECODE_WARPS_WIDE);
  FT_CHECK(rt_decode_pick_warps(JIT_DT_E4M3, 16, 8, wide) == DECODE_WARPS_SPLIT);
}

/* The mean and the longest of the tokens the requests read: full pages plus the last
 * page's length, within a sliding window; empty requests count in the batch's mean. */
FT_TEST(planner_token_stats) {
  const int32_t indptr[4] = {0, 3, 3, 4}, last[3] = {5, 0, 16};
  int64_t mean = -1, mx = -1;
  rt_decode_token_stats(3, indptr, last, 16, -1, &mean, &mx);
  FT_CHECK(mean == (2 * 16 + 5 + 16) / 3 && mx == 37, "mean %lld max %lld", (long long)mean, (long long)mx);
  rt_decode_token_stats(1, indptr, last, 16, -1, &mean, &mx);
  FT_CHECK(mean == 37 && mx == 37);
  rt_decode_token_stats(0, indptr, last, 16, -1, &mean, &mx);
  FT_CHECK(mean == 0 && mx == 0);
  const int32_t none[3] = {0, 0, 0};
  rt_decode_token_stats(2, none, last, 16, -1, &mean, &mx);
  FT_CHECK(mean == 1 && mx == 0);
  /* a sliding window: the last window_left + 1 tokens of each request */
  rt_decode_token_stats(3, indptr, last, 16, 9, &mean, &mx);
  FT_CHECK(mean == (10 + 0 + 10) / 3 && mx == 10, "mean %lld max %lld", (long long)mean, (long long)mx);
}

/* The capped one-buffer kernel unless a split would cut each request into more than 16
 * chunks (H200: 132 SMs, 4 blocks an SM, over the KV heads: 66 work items at 8 heads). */
FT_TEST(planner_keeps_two_buffers_for_a_few_long_requests) {
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 64, 132, 8, 0, 0) == DECODE_PIPE_CAPPED);
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 16, 132, 8, 0, 0) == DECODE_PIPE_CAPPED); /* 4 chunks */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 5, 132, 8, 0, 0) == DECODE_PIPE_CAPPED);  /* 80 >= 66 */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 4, 132, 8, 0, 0) == 1);                   /* 64 < 66 */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 1, 132, 8, 0, 0) == 1);
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 33, 132, 1, 0, 0) == DECODE_PIPE_CAPPED); /* 528 */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 32, 132, 1, 0, 0) == 1);
  /* blocks filling 80-100% of a wave of two-buffer blocks (264 on 132 SMs), short
   * requests: two buffers; out of the window, long requests or an unknown mean: capped */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 32, 132, 8, 1024, 1024) == 1);   /* 256 blocks */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 33, 132, 8, 2048, 2048) == 1);   /* 264 */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 27, 132, 8, 512, 512) == 1);    /* 216 >= 211.2 */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 64, 132, 4, 1024, 1024) == 1);
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 26, 132, 8, 1024, 1024) == DECODE_PIPE_CAPPED); /* 208 */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 34, 132, 8, 1024, 1024) == DECODE_PIPE_CAPPED); /* 272 */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 32, 132, 8, 2049, 2049) == DECODE_PIPE_CAPPED);
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 32, 132, 8, 0, 0) == DECODE_PIPE_CAPPED);
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 16, 66, 8, 1024, 1024) == 1);   /* scales with SMs */
  /* near-equal lengths only: the longest within 5/4 of the mean, and at most 2048 */
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 32, 132, 8, 1600, 2000) == 1);
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 32, 132, 8, 1600, 2001) == DECODE_PIPE_CAPPED);
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 32, 132, 8, 1900, 2100) == DECODE_PIPE_CAPPED);
  FT_CHECK(rt_decode_pick_pipeline(DECODE_PIPE_CAPPED, 32, 132, 8, 1972, 60000) == DECODE_PIPE_CAPPED);
  /* the switched plan's block: 2 warps for groups up to 4, from the requests whose blocks
   * give at most ~33 chunks each (blocks x 33 >= 528 on 132 SMs) to the capped wave */
  FT_CHECK(rt_decode_switched_warps(1, 132, 8, 4) == DECODE_WARPS_SPLIT); /* 66 chunks */
  FT_CHECK(rt_decode_switched_warps(2, 132, 8, 4) == DECODE_WARPS_WIDE);
  FT_CHECK(rt_decode_switched_warps(4, 132, 8, 4) == DECODE_WARPS_WIDE);
  FT_CHECK(rt_decode_switched_warps(4, 132, 8, 2) == DECODE_WARPS_WIDE);
  FT_CHECK(rt_decode_switched_warps(2, 132, 8, 8) == DECODE_WARPS_SPLIT); /* group 8 */
  FT_CHECK(rt_decode_switched_warps(5, 132, 8, 4) == DECODE_WARPS_SPLIT); /* 80 >= 66: not switched by it */
  FT_CHECK(rt_decode_switched_warps(32, 132, 8, 4) == DECODE_WARPS_SPLIT); /* the wave window */
  FT_CHECK(rt_decode_switched_warps(3, 132, 4, 4) == DECODE_WARPS_SPLIT); /* 12 blocks: 44 chunks */
  FT_CHECK(rt_decode_switched_warps(4, 132, 4, 4) == DECODE_WARPS_WIDE);  /* 16 blocks */
  FT_CHECK(rt_decode_switched_warps(8, 132, 4, 4) == DECODE_WARPS_WIDE);  /* 128 < 132 */
  FT_CHECK(rt_decode_switched_warps(9, 132, 4, 4) == DECODE_WARPS_SPLIT);
  FT_CHECK(rt_decode_switched_warps(1, 66, 8, 4) == DECODE_WARPS_WIDE);  /* scales with SMs */
  /* capped plans over short chunks: two buffers in 2-warp blocks (132 SMs: a wave of 528) */
  FT_CHECK(rt_decode_short_chunks(64, 16, 256, 8, 132, 4));      /* B=16 L=1024 */
  FT_CHECK(rt_decode_short_chunks(24, 6, 128, 8, 132, 4));       /* 192 blocks, 128 tokens */
  FT_CHECK(rt_decode_short_chunks(64, 16, 1024, 8, 132, 4));     /* 512 blocks >= 475.2 */
  FT_CHECK(rt_decode_short_chunks(64, 16, 256, 8, 132, 1));
  FT_CHECK(!rt_decode_short_chunks(64, 16, 256, 8, 132, 8));     /* group 8 */
  FT_CHECK(!rt_decode_short_chunks(48, 24, 1024, 8, 132, 4));    /* 384 blocks: 73% */
  FT_CHECK(!rt_decode_short_chunks(64, 16, 2048, 8, 132, 4));    /* long chunks */
  FT_CHECK(!rt_decode_short_chunks(48, 48, 256, 8, 132, 4));     /* no split */
  FT_CHECK(rt_decode_short_chunks(48, 24, 256, 8, 132, 4));      /* 73%, 256 tokens */
  FT_CHECK(!rt_decode_short_chunks(48, 24, 512, 8, 132, 4));     /* 73%, 512 tokens */
  FT_CHECK(rt_decode_short_chunks(128, 32, 512, 4, 132, 4));     /* 16/4: 512 blocks */
  FT_CHECK(!rt_decode_short_chunks(60, 12, 1040, 8, 132, 4));
  FT_CHECK(rt_decode_short_chunks(60, 12, 832, 8, 132, 4));      /* 480 blocks */
  /* other kernels are left as selected */
  FT_CHECK(rt_decode_pick_pipeline(0, 32, 132, 8, 1024, 1024) == 0);
  FT_CHECK(rt_decode_pick_pipeline(1, 1, 132, 8, 0, 0) == 1);
  FT_CHECK(rt_decode_pick_pipeline(0, 1, 132, 8, 0, 0) == 0);
  /* the default it applies to: a 16-bit cache at head_dim 128, 8 rows, no RoPE */
  jit_key k;
  jit_decode_select(0, JIT_DT_BF16, JIT_DT_BF16, 128, 4, 0, DECODE_WARPS_WIDE, &k);
  FT_CHECK(k.v[DECODE_P_PIPELINE] == DECODE_PIPE_CAPPED);
  jit_decode_select(0, JIT_DT_BF16, JIT_DT_E4M3, 128, 4, 0, DECODE_WARPS_WIDE, &k);
  FT_CHECK(k.v[DECODE_P_PIPELINE] == 1);
  jit_decode_select(1, JIT_DT_BF16, JIT_DT_BF16, 128, 4, 0, 0, &k); /* single decode */
  FT_CHECK(k.v[DECODE_P_PIPELINE] == 1);
  jit_decode_select(0, JIT_DT_F16, JIT_DT_F16, 128, 4, 1, DECODE_WARPS_WIDE, &k);
  FT_CHECK(k.v[DECODE_P_PIPELINE] == 1);
  jit_decode_select(0, JIT_DT_F16, JIT_DT_F16, 64, 4, 0, DECODE_WARPS_WIDE, &k);
  FT_CHECK(k.v[DECODE_P_PIPELINE] == 1);
  /* 16 rows: two buffers in batch decode without RoPE; one buffer with RoPE, in single
   * decode and at head_dim 256 */
  jit_decode_select(0, JIT_DT_F16, JIT_DT_F16, 128, 12, 0, DECODE_WARPS_WIDE, &k);
  FT_CHECK(k.v[DECODE_P_PIPELINE] == 1);
  jit_decode_select(0, JIT_DT_BF16, JIT_DT_E4M3, 64, 16, 0, DECODE_WARPS_WIDE, &k);
  FT_CHECK(k.v[DECODE_P_PIPELINE] == 1);
  jit_decode_select(0, JIT_DT_F16, JIT_DT_F16, 128, 16, 1, DECODE_WARPS_WIDE, &k);
  FT_CHECK(k.v[DECODE_P_PIPELINE] == 0);
  jit_decode_select(1, JIT_DT_F16, JIT_DT_F16, 128, 16, 0, 0, &k);
  FT_CHECK(k.v[DECODE_P_PIPELINE] == 0);
  jit_decode_select(0, JIT_DT_F16, JIT_DT_F16, 256, 16, 0, DECODE_WARPS_WIDE, &k);
  FT_CHECK(k.v[DECODE_P_PIPELINE] == 0);
}

/* FI_DECODE_PIPELINE=3 (the CUDA-core kernel, kernels/decode_simt.cuh) applies only where
 * that kernel can be built (16-bit cache, group <= 4, no RoPE), with rows rounded up to 1, 2
 * or 4, and renders an entry that includes its header; batch decode only. */
FT_TEST(simt_override_only_where_the_kernel_exists) {
  setenv("FI_DECODE_PIPELINE", "3", 1);
  unsetenv("FI_DECODE_WARPS");
  const struct {
    int kv, dim, group, rope, applied, rows;
  } cases[] = {{JIT_DT_BF16, 128, 1, 0, 1, 1}, {JIT_DT_F16, 64, 2, 0, 1, 2},   {JIT_DT_BF16, 256, 3, 0, 1, 4},
               {JIT_DT_BF16, 128, 4, 0, 1, 4}, {JIT_DT_BF16, 128, 5, 0, 0, 8},  {JIT_DT_E4M3, 128, 1, 0, 0, 8},
               {JIT_DT_F16, 128, 1, 1, 0, 8}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    jit_key k;
    const int q = cases[i].kv == JIT_DT_E4M3 ? JIT_DT_BF16 : cases[i].kv;
    jit_decode_select(0, q, cases[i].kv, cases[i].dim, cases[i].group, cases[i].rope, DECODE_WARPS_SPLIT, &k);
    const int64_t pipe = k.v[DECODE_P_PIPELINE];
    const rt_tuning t = env_tuning();
    const int forced = rt_dec_tune_key(&t, &k, cases[i].group);
    FT_CHECK(!!(forced & RT_DEC_TUNED_PIPELINE) == cases[i].applied, "case %zu: forced %d", i, forced);
    FT_CHECK(k.v[DECODE_P_PIPELINE] == (cases[i].applied ? DECODE_PIPE_SIMT : pipe), "case %zu: pipeline %lld", i,
             (long long)k.v[DECODE_P_PIPELINE]);
    FT_CHECK(k.v[DECODE_P_ROWS] == cases[i].rows, "case %zu: rows %lld", i, (long long)k.v[DECODE_P_ROWS]);
    char *src = NULL, err[256];
    FT_CHECK(jit_render(&k, "entry", &src, err, sizeof err) == 0, "case %zu: %s", i, err);
    if (src && cases[i].applied) {
      char want[96];
      snprintf(want, sizeof want, "decode_simt<%s, %s, %d, %d, 4>", q == JIT_DT_F16 ? "fi_half" : "fi_bf16",
               q == JIT_DT_F16 ? "fi_half" : "fi_bf16", cases[i].dim, cases[i].rows);
      FT_CHECK(strstr(src, "#include \"decode_simt.cuh\"") && strstr(src, want), "case %zu: %s", i, src);
    }
    free(src);
  }
  /* a single-decode key with it cannot be rendered (a batch kernel) */
  jit_key k;
  jit_decode_select(1, JIT_DT_BF16, JIT_DT_BF16, 128, 1, 0, 0, &k);
  k.v[DECODE_P_PIPELINE] = DECODE_PIPE_SIMT;
  k.v[DECODE_P_ROWS] = 1;
  char *src = NULL, err[256];
  FT_CHECK(jit_render(&k, "entry", &src, err, sizeof err) != 0);
  free(src);
  unsetenv("FI_DECODE_PIPELINE");
}

/* Batch decode's default for MHA over a 16-bit cache at head_dim 128: the CUDA-core kernel
 * in place of the capped one, at group 1 only, and never where the capped kernel was not
 * chosen (a few requests on two buffers, fp8, RoPE, other head_dims). */
FT_TEST(planner_takes_the_cuda_core_kernel_for_mha) {
  FT_CHECK(rt_dec_pick_simt(DECODE_PIPE_CAPPED, JIT_DT_BF16, 128, 1, 0));
  FT_CHECK(rt_dec_pick_simt(DECODE_PIPE_CAPPED, JIT_DT_F16, 128, 1, 0));
  FT_CHECK(!rt_dec_pick_simt(DECODE_PIPE_CAPPED, JIT_DT_BF16, 128, 2, 0));
  FT_CHECK(!rt_dec_pick_simt(DECODE_PIPE_CAPPED, JIT_DT_BF16, 128, 4, 0));
  FT_CHECK(!rt_dec_pick_simt(DECODE_PIPE_CAPPED, JIT_DT_E4M3, 128, 1, 0));
  FT_CHECK(!rt_dec_pick_simt(DECODE_PIPE_CAPPED, JIT_DT_BF16, 128, 1, 1));
  FT_CHECK(!rt_dec_pick_simt(1, JIT_DT_BF16, 128, 1, 0));
  FT_CHECK(!rt_dec_pick_simt(0, JIT_DT_BF16, 256, 1, 0));
  /* through the planner (rt_decode_device_model: 132 SMs, 8 warps an SM): B=64 L=4096 at 32/32
   * heads and 8/8 take it; 32/8 keeps the capped kernel; one request at 8 KV heads switches to
   * two buffers (and keeps them), one at 32 fills enough blocks to stay capped, so takes it */
  unsetenv("FI_DECODE_PIPELINE");
  unsetenv("FI_DECODE_WARPS");
  const rt_tuning tune = env_tuning();
  const rt_decode_device dev = rt_decode_device_model(132);
  static int32_t ip[65], lp[64];
  for (int i = 0; i <= 64; i++) ip[i] = i * 256;
  for (int i = 0; i < 64; i++) lp[i] = 16;
  const struct {
    int batch, hq, hkv, kv, simt;
  } cases[] = {{64, 32, 32, JIT_DT_BF16, 1}, {64, 8, 8, JIT_DT_F16, 1}, {64, 32, 8, JIT_DT_BF16, 0},
               {1, 8, 8, JIT_DT_BF16, 0},    {64, 32, 32, JIT_DT_E4M3, 0}, {1, 32, 32, JIT_DT_BF16, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fi_batch_decode_info info;
    memset(&info, 0, sizeof info);
    info.batch = cases[i].batch;
    info.num_qo_heads = cases[i].hq;
    info.num_kv_heads = cases[i].hkv;
    info.head_dim = 128;
    info.page_size = 16;
    info.q_dtype = (DLDataType){kDLBfloat, 16, 1};
    info.kv_dtype = cases[i].kv == JIT_DT_E4M3 ? (DLDataType){RT_DL_E4M3FN, 8, 1}
                    : cases[i].kv == JIT_DT_F16 ? (DLDataType){kDLFloat, 16, 1}
                                                : (DLDataType){kDLBfloat, 16, 1};
    if (cases[i].kv == JIT_DT_F16) info.q_dtype = info.kv_dtype;
    info.indptr = ip;
    info.last_page_len = lp;
    fi_attention_params prm;
    fi_attention_params_init(&prm);
    rt_decode_choice c;
    FT_REQUIRE(rt_decode_choose("test", &info, &prm, INT64_MAX, &tune, &dev, NULL, &c) == FI_OK, "case %zu: %s", i,
               fi_last_error());
    const jit_key *k = &c.key;
    FT_CHECK((k->v[DECODE_P_PIPELINE] == DECODE_PIPE_SIMT) == cases[i].simt, "case %zu: pipeline %lld", i,
             (long long)k->v[DECODE_P_PIPELINE]);
    FT_CHECK(k->v[DECODE_P_ROWS] == (cases[i].simt ? 1 : 8), "case %zu: rows %lld", i, (long long)k->v[DECODE_P_ROWS]);
    free(c.tab);
  }
}

/* KV head pairs only where kernels/decode.cuh's decode() takes them (fp8, head_dim 128,
 * 8-row kernel, no RoPE): a pair planned elsewhere would run the one-head path on half
 * the grid and leave half the heads unwritten. Group <= 4 keeps a pair's rows within 8. */
FT_TEST(planner_pairs_kv_heads_only_where_the_kernel_can) {
  unsetenv("FI_DECODE_KV_PAIR");
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 128, 32, 8, 0) == 2); /* the default: on */
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E5M2, 128, 8, 8, 0) == 2);
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 128, 2, 2, 0) == 2);
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_BF16, 128, 32, 8, 0) == 1);  /* 16-bit cache */
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_F16, 128, 32, 8, 0) == 1);
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 64, 32, 8, 0) == 1);   /* head_dim */
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 256, 32, 8, 0) == 1);
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 128, 32, 8, 1) == 1);  /* RoPE */
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 128, 40, 8, 0) == 1);  /* group 5 */
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 128, 12, 3, 0) == 1);  /* odd H_kv */
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 128, 4, 1, 0) == 1);   /* one KV head */
  setenv("FI_DECODE_KV_PAIR", "0", 1);
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 128, 32, 8, 0) == 1);
  setenv("FI_DECODE_KV_PAIR", "1", 1);
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 128, 32, 8, 0) == 2);
  FT_CHECK(rt_decode_kv_pair(env_tuning().decode_kv_pair, JIT_DT_E4M3, 128, 32, 8, 1) == 1);
  unsetenv("FI_DECODE_KV_PAIR");
}

/* The KV cache's L2 policy (fi_decode_params.kv_evict): evict-first by default (every
 * call's scalars, rt_dec_fill_scalars), FI_DECODE_EVICT=0 / 1 at a batch plan
 * (rt_dec_kv_evict). */
FT_TEST(kv_cache_read_evict_first_unless_turned_off) {
  fi_attention_params ap;
  memset(&ap, 0, sizeof ap);
  ap.window_left = -1;
  ap.k_scale = ap.v_scale = 1.0f;
  fi_decode_params k;
  unsetenv("FI_DECODE_EVICT");
  memset(&k, 0x5a, sizeof k);
  rt_dec_fill_scalars(&k, &ap, 128, JIT_DT_BF16);
  FT_CHECK(k.kv_evict == 1, "default %d", k.kv_evict);
  FT_CHECK(rt_dec_kv_evict(env_tuning_p()) == 1);
  setenv("FI_DECODE_EVICT", "0", 1);
  FT_CHECK(rt_dec_kv_evict(env_tuning_p()) == 0, "FI_DECODE_EVICT=0 gave %d", rt_dec_kv_evict(env_tuning_p()));
  rt_dec_fill_scalars(&k, &ap, 128, JIT_DT_BF16);
  FT_CHECK(k.kv_evict == 1, "the per-call scalars read the environment: %d", k.kv_evict);
  setenv("FI_DECODE_EVICT", "1", 1);
  FT_CHECK(rt_dec_kv_evict(env_tuning_p()) == 1, "FI_DECODE_EVICT=1 gave %d", rt_dec_kv_evict(env_tuning_p()));
  unsetenv("FI_DECODE_EVICT");
}

/* The pre-wait prefetch (fi_decode_params.pre_prefetch, rt_dec_pre_prefetch): on by
 * default, FI_DECODE_PRE_PREFETCH sets it (clamped to 0..65536), and FI_PDL=0 turns it
 * off whatever that says, since without an early start it only holds blocks up. */
FT_TEST(pre_wait_prefetch_follows_env_and_pdl) {
  unsetenv("FI_PDL");
  unsetenv("FI_DECODE_PRE_PREFETCH");
  const int def = rt_dec_pre_prefetch(env_tuning_p());
  FT_CHECK(def > 0 && def <= 65536, "default %d", def);
  setenv("FI_DECODE_PRE_PREFETCH", "128", 1);
  FT_CHECK(rt_dec_pre_prefetch(env_tuning_p()) == 128, "%d", rt_dec_pre_prefetch(env_tuning_p()));
  setenv("FI_DECODE_PRE_PREFETCH", "0", 1);
  FT_CHECK(rt_dec_pre_prefetch(env_tuning_p()) == 0, "%d", rt_dec_pre_prefetch(env_tuning_p()));
  setenv("FI_DECODE_PRE_PREFETCH", "-5", 1);
  FT_CHECK(rt_dec_pre_prefetch(env_tuning_p()) == 0, "%d", rt_dec_pre_prefetch(env_tuning_p()));
  setenv("FI_DECODE_PRE_PREFETCH", "9999999", 1);
  FT_CHECK(rt_dec_pre_prefetch(env_tuning_p()) == 65536, "%d", rt_dec_pre_prefetch(env_tuning_p()));
  setenv("FI_PDL", "0", 1);
  FT_CHECK(rt_dec_pre_prefetch(env_tuning_p()) == 0, "FI_PDL=0 gave %d", rt_dec_pre_prefetch(env_tuning_p()));
  unsetenv("FI_DECODE_PRE_PREFETCH");
  FT_CHECK(rt_dec_pre_prefetch(env_tuning_p()) == 0, "FI_PDL=0, default gave %d", rt_dec_pre_prefetch(env_tuning_p()));
  setenv("FI_PDL", "1", 1);
  FT_CHECK(rt_dec_pre_prefetch(env_tuning_p()) == def, "FI_PDL=1 gave %d", rt_dec_pre_prefetch(env_tuning_p()));
  unsetenv("FI_PDL");
}

/* fi_single_decode's split (runtime/rt_decode_single.c): chunks of whole 32-token steps,
 * at least 128 tokens, within one wave of blocks, covering the tokens once with no empty
 * chunk; none below 512 tokens or where a wave has no room for two chunks a head. */
FT_TEST(single_decode_split_chunks_cover_the_tokens) {
  int chunk = -1;
  /* as batch decode of one request: 8 KV heads on 132 SMs x 2 blocks -> 32 chunks of 256 */
  FT_CHECK(rt_single_decode_chunks(8192, 8, 264, &chunk) == 32 && chunk == 256, "8192/8/264: chunk %d", chunk);
  FT_CHECK(rt_single_decode_chunks(511, 8, 264, &chunk) == 1 && chunk == 511, "511 tokens: chunk %d", chunk);
  FT_CHECK(rt_single_decode_chunks(512, 8, 264, &chunk) == 4 && chunk == 128, "512 tokens: chunk %d", chunk);
  FT_CHECK(rt_single_decode_chunks(0, 8, 264, &chunk) == 1 && chunk == 0, "0 tokens");
  FT_CHECK(rt_single_decode_chunks(100000, 200, 264, &chunk) == 1, "a wave with room for one block a head");
  const int big = rt_single_decode_chunks((int64_t)INT32_MAX, 1, 1 << 30, &chunk);
  FT_CHECK(big <= 0x7fff && big > 0x7f00, "chunk count capped at 0x7fff: %d", big);
  for (int i = 0; i < 20000; i++) {
    const int64_t t = i < 10 ? 506 + i : (int64_t)(rnd() % 200000);
    const int hkv = 1 + (int)(rnd() % 64);
    const int64_t res = 1 + rnd() % 2000;
    const int n = rt_single_decode_chunks(t, hkv, res, &chunk);
    FT_REQUIRE(n >= 1 && n <= 0x7fff, "t %lld: %d chunks", (long long)t, n);
    if (n == 1) {
      FT_REQUIRE(t < 512 || res / hkv < 2, "t %lld hkv %d resident %lld: not split", (long long)t, hkv, (long long)res);
      continue;
    }
    FT_REQUIRE(chunk % 32 == 0 && chunk >= 128, "t %lld: chunk %d", (long long)t, chunk);
    FT_REQUIRE((int64_t)n * hkv <= res, "t %lld: %d chunks x %d heads past %lld resident", (long long)t, n, hkv,
               (long long)res);
    FT_REQUIRE((int64_t)(n - 1) * chunk < t && t <= (int64_t)n * chunk, "t %lld: %d chunks of %d", (long long)t, n,
               chunk);
  }
}

FT_TEST(planner_refuses_bad_page_tables) {
  char err[256];
  int32_t ip[3] = {0, 4, 2}, lp[2] = {3, 3};
  FT_CHECK(rt_decode_check_pages(2, ip, lp, 16, err, sizeof err) != 0 && strstr(err, "monotone"), "%s", err);
  int32_t ip2[3] = {0, 4, 6}, lp2[2] = {17, 3};
  FT_CHECK(rt_decode_check_pages(2, ip2, lp2, 16, err, sizeof err) != 0 && strstr(err, "last_page_len[0]"), "%s", err);
  int32_t lp3[2] = {16, 0};
  FT_CHECK(rt_decode_check_pages(2, ip2, lp3, 16, err, sizeof err) != 0 && strstr(err, "last_page_len[1]"), "%s", err);
  int32_t ip4[2] = {-1, 3}, lp4[1] = {1};
  FT_CHECK(rt_decode_check_pages(1, ip4, lp4, 16, err, sizeof err) != 0 && strstr(err, "indptr[0]"), "%s", err);
}

/* ---- keys ---- */

FT_TEST(every_selected_key_is_registered) {
  const jit_op *ops[2] = {jit_registry_find("single_decode"), jit_registry_find("batch_decode")};
  FT_REQUIRE(ops[0] && ops[1] && jit_registry_find("decode_upload"));
  const int qs[2] = {JIT_DT_F16, JIT_DT_BF16}, kvs[3] = {0, JIT_DT_E4M3, JIT_DT_E5M2};
  const int dims[3] = {64, 128, 256};
  int checked = 0, simt = 0;
  /* Single decode with the default block; batch decode with every block a plan picks
   * (1, 2 or 4 warps over a 16-bit cache, 2 or 4 over fp8). */
  const int warps[4] = {0, DECODE_WARPS_SPLIT, DECODE_WARPS_WIDE, DECODE_WARPS_ONE};
  for (int s = 0; s < 4; s++)
    for (int q = 0; q < 2; q++)
      for (int kv = 0; kv < 3; kv++)
        for (int d = 0; d < 3; d++)
          for (int g = 1; g <= 16; g++)
            for (int rope = 0; rope < 2; rope++) {
              jit_key k;
              const int w = warps[s];
              if (kvs[kv] && s > 2) continue;
              jit_decode_select(s == 0, qs[q], kvs[kv] ? kvs[kv] : qs[q], dims[d], g, rope, w, &k);
              /* a plan of a few requests: the two-buffer kernel, 4 warps for one request
               * and 2 for two */
              if ((s == 1 || s == 2) && dims[d] == 128 && ((g + rope + q + kv) & 1)) {
                const int64_t sel = k.v[DECODE_P_PIPELINE];
                k.v[DECODE_P_PIPELINE] = rt_decode_pick_pipeline((int)sel, s, 132, 8, 0, 0);
                if (k.v[DECODE_P_PIPELINE] != sel) k.v[DECODE_P_WARPS] = rt_decode_switched_warps(s, 132, 8, g);
              }
              /* a capped plan over short chunks: two buffers, 2 warps */
              if (s == 2 && k.v[DECODE_P_PIPELINE] == DECODE_PIPE_CAPPED && g <= 4 && !((g + rope + q + kv) & 1))
                k.v[DECODE_P_PIPELINE] = 1;
              /* the rest of MHA's capped plans: the CUDA-core kernel, in any block size */
              if (s > 0 && rt_dec_pick_simt((int)k.v[DECODE_P_PIPELINE], kvs[kv] ? kvs[kv] : qs[q], dims[d], g,
                                               rope)) {
                k.v[DECODE_P_PIPELINE] = DECODE_PIPE_SIMT;
                k.v[DECODE_P_ROWS] = jit_decode_simt_rows(g);
                simt++;
              }
              int found = 0;
              for (int i = 0; i < k.op->config_count() && !found; i++) {
                jit_key r;
                k.op->config(i, &r);
                found = memcmp(r.v, k.v, sizeof r.v) == 0 && r.op == k.op;
              }
              FT_CHECK(found, "%s q=%d kv=%d d=%d g=%d rope=%d not registered", k.op->name, q, kv,
                       dims[d], g, rope);
              checked++;
            }
  FT_CHECK(simt == 3, "%d selections took the CUDA-core kernel; 3 wanted", simt);
  /* and the CUDA-core kernel at group 1 in every block size, over both 16-bit dtypes */
  for (int q = 0; q < 2; q++)
    for (int s = 1; s < 4; s++) {
      jit_key k;
      jit_decode_select(0, qs[q], qs[q], 128, 1, 0, warps[s], &k);
      FT_REQUIRE(rt_dec_pick_simt((int)k.v[DECODE_P_PIPELINE], qs[q], 128, 1, 0));
      k.v[DECODE_P_PIPELINE] = DECODE_PIPE_SIMT;
      k.v[DECODE_P_ROWS] = jit_decode_simt_rows(1);
      int found = 0;
      for (int i = 0; i < k.op->config_count() && !found; i++) {
        jit_key r;
        k.op->config(i, &r);
        found = memcmp(r.v, k.v, sizeof r.v) == 0 && r.op == k.op;
      }
      FT_CHECK(found, "CUDA-core q=%d warps=%d not registered", q, warps[s]);
    }
  fprintf(stderr, "  %d selections (%d CUDA-core), %d + %d registered configurations\n", checked, simt,
          ops[0]->config_count(), ops[1]->config_count());
}

/* ---- bad arguments ---- */

/* The plan fi_batch_decode_plan makes, made on the host (rt_decode_plan_host): 132 SMs of
 * the device model, the default tuning, the workspace at ADDR(9); so that the run's checks
 * can be reached without a device. */
static fi_status host_plan(const fi_batch_decode_info *info, const fi_attention_params *prm, fi_decode_plan **plan) {
  const rt_decode_device dev = rt_decode_device_model(132);
  const rt_tuning t = rt_tuning_default();
  return rt_decode_plan_host(&dev, &t, info, prm, ADDR(9), kDLCUDA, plan);
}

typedef struct tens {
  DLTensor t;
  int64_t shape[4], strides[4];
} tens;
static void mk(tens *x, void *data, uint8_t code, int bits, int ndim, int64_t a, int64_t b, int64_t c,
               int64_t d) {
  memset(x, 0, sizeof *x);
  x->shape[0] = a, x->shape[1] = b, x->shape[2] = c, x->shape[3] = d;
  x->t.data = data;
  x->t.device.device_type = kDLCUDA;
  x->t.ndim = ndim;
  x->t.dtype.code = code;
  x->t.dtype.bits = (uint8_t)bits;
  x->t.dtype.lanes = 1;
  x->t.shape = x->shape;
}

static fi_runtime *rt_make(void) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  fi_runtime *rt = NULL;
  fi_runtime_create(&o, &rt);
  return rt;
}

#define EXPECT_BAD(call, needle)                                                             \
  do {                                                                                       \
    fi_status s_ = (call);                                                                   \
    FT_CHECK(s_ == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), needle),              \
             "%s: status %d, message: %s (wanted \"%s\")", #call, s_, fi_last_error(), needle); \
  } while (0)

FT_TEST(single_decode_bad_arguments_named) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  tens q, k, v, o, l;
  mk(&q, ADDR(0), kDLBfloat, 16, 2, 32, 128, 0, 0);
  mk(&k, ADDR(1), kDLBfloat, 16, 3, 100, 8, 128, 0);
  mk(&v, ADDR(2), kDLBfloat, 16, 3, 100, 8, 128, 0);
  mk(&o, ADDR(3), kDLBfloat, 16, 2, 32, 128, 0, 0);
  mk(&l, ADDR(4), kDLFloat, 32, 1, 32, 0, 0, 0);
  /* Valid: gets past validation to the missing device. */
  fi_status st = fi_single_decode(rt, &q.t, &k.t, &v.t, &o.t, &l.t, FI_KV_LAYOUT_NHD, NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid call refused: %s", fi_last_error());
  tens x = k;
  x.t.shape = x.shape;
  x.shape[1] = 6; /* 32 heads over 6 */
  EXPECT_BAD(fi_single_decode(rt, &q.t, &x.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, NULL), "num_kv_heads");
  tens q96 = q;
  q96.t.shape = q96.shape;
  q96.shape[1] = 96;
  EXPECT_BAD(fi_single_decode(rt, &q96.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, NULL), "head_dim");
  tens q32 = q;
  q32.t.shape = q32.shape;
  q32.t.dtype.bits = 32;
  q32.t.dtype.code = kDLFloat;
  EXPECT_BAD(fi_single_decode(rt, &q32.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, NULL), "q has dtype");
  tens kf = k;
  kf.t.shape = kf.shape;
  kf.t.dtype.code = kDLFloat;
  EXPECT_BAD(fi_single_decode(rt, &q.t, &kf.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, NULL), "v has dtype");
  tens of = o;
  of.t.shape = of.shape;
  of.shape[0] = 16;
  EXPECT_BAD(fi_single_decode(rt, &q.t, &k.t, &v.t, &of.t, NULL, FI_KV_LAYOUT_NHD, NULL, NULL), "out has shape");
  tens lb = l;
  lb.t.shape = lb.shape;
  lb.t.dtype.bits = 16;
  EXPECT_BAD(fi_single_decode(rt, &q.t, &k.t, &v.t, &o.t, &lb.t, FI_KV_LAYOUT_NHD, NULL, NULL), "lse has dtype");
  EXPECT_BAD(fi_single_decode(rt, &q.t, &k.t, &v.t, &o.t, NULL, (fi_kv_layout)5, NULL, NULL), "layout");
  fi_attention_params p;
  fi_attention_params_init(&p);
  p.window_left = -3;
  EXPECT_BAD(fi_single_decode(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, &p, NULL), "window_left");
  fi_attention_params_init(&p);
  p.logits_soft_cap = -1;
  EXPECT_BAD(fi_single_decode(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, &p, NULL), "logits_soft_cap");
  tens ks = k;
  ks.t.shape = ks.shape;
  ks.t.strides = ks.strides;
  ks.strides[0] = 8 * 128 + 4, ks.strides[1] = 128, ks.strides[2] = 1;
  EXPECT_BAD(fi_single_decode(rt, &q.t, &ks.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, NULL), "stride");
  tens oq = o;
  oq.t.shape = oq.shape;
  oq.t.data = q.t.data;
  EXPECT_BAD(fi_single_decode(rt, &q.t, &k.t, &v.t, &oq.t, NULL, FI_KV_LAYOUT_NHD, NULL, NULL), "overlaps");
  fi_runtime_destroy(rt);
}

/* fi_attention_extras (sinks): every defect named, on single decode and on each other
 * entry point that takes extras (the batch runs refuse their NULL plan first, so only the
 * checks shared by all five, rt_check_extras, are reached through single decode/prefill). */
FT_TEST(attention_extras_bad_sinks_named) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  tens q, k, v, o, l, sk;
  mk(&q, ADDR(0), kDLBfloat, 16, 2, 32, 128, 0, 0);
  mk(&k, ADDR(1), kDLBfloat, 16, 3, 100, 8, 128, 0);
  mk(&v, ADDR(2), kDLBfloat, 16, 3, 100, 8, 128, 0);
  mk(&o, ADDR(3), kDLBfloat, 16, 2, 32, 128, 0, 0);
  mk(&l, ADDR(4), kDLFloat, 32, 1, 32, 0, 0, 0);
  mk(&sk, ADDR(5), kDLFloat, 32, 1, 32, 0, 0, 0);
  fi_attention_extras x;
  fi_attention_extras_init(&x);
  FT_CHECK_EQ_INT((long long)x.struct_size, (long long)sizeof x);
  FT_CHECK(x.sinks == NULL, "init leaves sinks NULL");
  x.sinks = &sk.t;
  /* Valid: past validation to the missing device. */
  fi_status st = fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, &l.t, FI_KV_LAYOUT_NHD, NULL, &x, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid sinks refused: %s", fi_last_error());
  fi_attention_extras small = x;
  small.struct_size = 4;
  EXPECT_BAD(fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, &small, NULL),
             "struct_size");
  tens b = sk;
  b.t.shape = b.shape;
  b.shape[0] = 8; /* one a KV head, not a query head */
  x.sinks = &b.t;
  EXPECT_BAD(fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, &x, NULL), "sinks has 8");
  b = sk, b.t.shape = b.shape, b.t.dtype.code = kDLBfloat, b.t.dtype.bits = 16;
  EXPECT_BAD(fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, &x, NULL),
             "sinks has dtype");
  b = sk, b.t.shape = b.shape, b.t.strides = b.strides, b.strides[0] = 2;
  EXPECT_BAD(fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, &x, NULL),
             "sinks has stride");
  b = sk, b.t.shape = b.shape, b.t.byte_offset = 2;
  EXPECT_BAD(fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, &x, NULL),
             "sinks starts at");
  b = sk, b.t.shape = b.shape, b.t.device.device_id = 1;
  EXPECT_BAD(fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, &x, NULL), "sinks");
  b = sk, b.t.shape = b.shape, b.t.ndim = 2;
  EXPECT_BAD(fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, &x, NULL), "sinks has 2");
  b = sk, b.t.shape = b.shape, b.t.data = o.t.data; /* written over by out while read */
  EXPECT_BAD(fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, &x, NULL),
             "out overlaps sinks");
  b = sk, b.t.shape = b.shape, b.t.data = l.t.data;
  EXPECT_BAD(fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, &l.t, FI_KV_LAYOUT_NHD, NULL, &x, NULL),
             "lse overlaps sinks");
  /* Single prefill: the same checker, q [L_q, H_qo, D]. */
  tens q3, o3;
  mk(&q3, ADDR(0), kDLBfloat, 16, 3, 4, 32, 128, 0);
  mk(&o3, ADDR(3), kDLBfloat, 16, 3, 4, 32, 128, 0);
  b = sk, b.t.shape = b.shape, b.shape[0] = 31;
  EXPECT_BAD(fi_single_prefill_ex(rt, &q3.t, &k.t, &v.t, &o3.t, NULL, FI_KV_LAYOUT_NHD, NULL, &x, NULL),
             "sinks has 31");
  x.sinks = &sk.t;
  st = fi_single_prefill_ex(rt, &q3.t, &k.t, &v.t, &o3.t, NULL, FI_KV_LAYOUT_NHD, NULL, &x, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid prefill sinks refused: %s", fi_last_error());
  /* custom_mask: single prefill only; packed uint8 bits, ceil(L_q * L_kv / 8) bytes (4 x 100
   * here: 50), contiguous, apart from out and lse. */
  tens mk8;
  mk(&mk8, ADDR(6), kDLUInt, 8, 1, 50, 0, 0, 0);
  fi_attention_extras xm;
  fi_attention_extras_init(&xm);
  xm.custom_mask = &mk8.t;
  st = fi_single_prefill_ex(rt, &q3.t, &k.t, &v.t, &o3.t, NULL, FI_KV_LAYOUT_NHD, NULL, &xm, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid custom mask refused: %s", fi_last_error());
  EXPECT_BAD(fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, &xm, NULL),
             "custom masks are taken by prefill only");
  tens mb = mk8;
  mb.t.shape = mb.shape, mb.shape[0] = 49;
  xm.custom_mask = &mb.t;
  EXPECT_BAD(fi_single_prefill_ex(rt, &q3.t, &k.t, &v.t, &o3.t, NULL, FI_KV_LAYOUT_NHD, NULL, &xm, NULL),
             "custom_mask has 49 bytes; ceil(L_q * L_kv / 8) = 50");
  mb = mk8, mb.t.shape = mb.shape, mb.t.dtype.code = kDLInt;
  EXPECT_BAD(fi_single_prefill_ex(rt, &q3.t, &k.t, &v.t, &o3.t, NULL, FI_KV_LAYOUT_NHD, NULL, &xm, NULL),
             "custom_mask has dtype");
  mb = mk8, mb.t.shape = mb.shape, mb.t.strides = mb.strides, mb.strides[0] = 2;
  EXPECT_BAD(fi_single_prefill_ex(rt, &q3.t, &k.t, &v.t, &o3.t, NULL, FI_KV_LAYOUT_NHD, NULL, &xm, NULL),
             "custom_mask has stride");
  mb = mk8, mb.t.shape = mb.shape, mb.t.data = o3.t.data;
  EXPECT_BAD(fi_single_prefill_ex(rt, &q3.t, &k.t, &v.t, &o3.t, NULL, FI_KV_LAYOUT_NHD, NULL, &xm, NULL),
             "out overlaps custom_mask");
  /* init writes only the caller's size (the header it was built with): a first-version
   * struct (struct_size and sinks) leaves what follows it alone */
  struct {
    fi_attention_extras x;
    uint64_t canary;
  } old;
  memset(&old, 0xab, sizeof old);
  const size_t v1size = offsetof(fi_attention_extras, custom_mask);
  fi_attention_extras_init_sized(&old.x, v1size);
  FT_CHECK_EQ_INT((long long)old.x.struct_size, (long long)v1size);
  FT_CHECK(old.x.sinks == NULL, "init zeroes the caller's members");
  FT_CHECK(old.canary == 0xababababababababull && ((unsigned char *)&old.x)[v1size] == 0xab,
           "init wrote past the caller's size");
  /* a caller's first-version struct (no custom_mask member) is read as such */
  fi_attention_extras v1 = xm;
  v1.struct_size = offsetof(fi_attention_extras, custom_mask);
  v1.sinks = NULL;
  st = fi_single_decode_ex(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, &v1, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "a version-1 extras struct refused: %s", fi_last_error());
  /* The batch runs with extras refuse a NULL plan by name, as the plain ones. */
  EXPECT_BAD(fi_batch_decode_run_ex(rt, NULL, &q.t, NULL, NULL, NULL, NULL, NULL, FI_KV_LAYOUT_NHD, &o.t, NULL, &x,
                                    NULL),
             "plan");
  EXPECT_BAD(fi_batch_prefill_ragged_run_ex(rt, NULL, &q3.t, &k.t, &v.t, FI_KV_LAYOUT_NHD, &o3.t, NULL, &x, NULL),
             "plan");
  EXPECT_BAD(fi_batch_prefill_paged_run_ex(rt, NULL, &q3.t, NULL, NULL, NULL, FI_KV_LAYOUT_NHD, &o3.t, NULL, &x,
                                           NULL),
             "plan");
  fi_runtime_destroy(rt);
}

/* Two requests of 3 and 2 pages (bf16, 32/8 heads, head_dim 128, pages of 16). */
static fi_batch_decode_info small_info(int32_t *indptr, int32_t *last) {
  fi_batch_decode_info info;
  memset(&info, 0, sizeof info);
  info.batch = 2;
  info.indptr = indptr;
  info.last_page_len = last;
  info.num_qo_heads = 32;
  info.num_kv_heads = 8;
  info.head_dim = 128;
  info.page_size = 16;
  info.q_dtype = (DLDataType){kDLBfloat, 16, 1};
  info.kv_dtype = (DLDataType){kDLBfloat, 16, 1};
  return info;
}

/* The run's tensors for small_info's batch: q and out of `rows` rows (B, or max_batch in
 * CUDA-graph mode), bf16 caches of 10 pages of 16 tokens x 8 heads x 128, indptr and
 * last_page_len for `rows` requests, indices of the batch's 5 pages. */
static void small_run_tensors(int rows, tens *q, tens *kc, tens *vc, tens *ip, tens *ix, tens *lp, tens *o) {
  mk(q, ADDR(0), kDLBfloat, 16, 3, rows, 32, 128, 0);
  mk(kc, ADDR(1), kDLBfloat, 16, 4, 10, 16, 8, 128);
  mk(vc, ADDR(2), kDLBfloat, 16, 4, 10, 16, 8, 128);
  mk(ip, ADDR(3), kDLInt, 32, 1, rows + 1, 0, 0, 0);
  mk(ix, ADDR(4), kDLInt, 32, 1, 5, 0, 0, 0);
  mk(lp, ADDR(5), kDLInt, 32, 1, rows, 0, 0, 0);
  mk(o, ADDR(6), kDLBfloat, 16, 3, rows, 32, 128, 0);
}

FT_TEST(batch_decode_plan_and_run_bad_arguments_named) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  int32_t indptr[3] = {0, 3, 5}, last[2] = {16, 1};
  fi_batch_decode_info info = small_info(indptr, last);
  tens ws;
  mk(&ws, ADDR(9), kDLUInt, 8, 1, 1 << 24, 0, 0, 0);
  fi_decode_plan *plan = NULL;
  fi_batch_decode_info bad = info;
  bad.num_kv_heads = 5;
  EXPECT_BAD(fi_batch_decode_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "num_kv_heads");
  bad = info;
  bad.head_dim = 80;
  EXPECT_BAD(fi_batch_decode_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "head_dim");
  bad = info;
  bad.num_qo_heads = 8 * 129; /* group 129: past the 128 a plan takes */
  EXPECT_BAD(fi_batch_decode_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "group");
  /* the workspace size refuses the shapes the plan refuses, before it asks the device */
  size_t wsb = 0;
  const DLDevice dev = {kDLCUDA, 0};
  EXPECT_BAD(fi_batch_decode_workspace_size(rt, dev, 8, 8 * 129, 8, 128, &wsb), "group");
  EXPECT_BAD(fi_batch_decode_workspace_size(rt, dev, 8, 32, 5, 128, &wsb), "num_kv_heads");
  EXPECT_BAD(fi_batch_decode_workspace_size(rt, dev, 8, 32, 8, 80, &wsb), "head_dim");
  EXPECT_BAD(fi_batch_decode_workspace_size(rt, dev, -1, 32, 8, 128, &wsb), "max_batch");
  bad = info;
  bad.kv_dtype = (DLDataType){kDLFloat, 16, 1};
  EXPECT_BAD(fi_batch_decode_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "KV cache has dtype");
  bad = info;
  bad.q_dtype = (DLDataType){kDLFloat, 32, 1};
  EXPECT_BAD(fi_batch_decode_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "q has dtype");
  int32_t ip_bad[3] = {0, 3, 2};
  bad = info;
  bad.indptr = ip_bad;
  EXPECT_BAD(fi_batch_decode_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "indptr is not monotone");
  int32_t last_bad[2] = {16, 17};
  bad = info;
  bad.last_page_len = last_bad;
  EXPECT_BAD(fi_batch_decode_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "last_page_len[1]");
  bad = info;
  bad.page_size = 0;
  EXPECT_BAD(fi_batch_decode_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "page_size");
  bad = info;
  bad.max_batch = 1;
  EXPECT_BAD(fi_batch_decode_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "max_batch");
  tens wsm;
  mk(&wsm, (char *)ADDR(9) + 16, kDLUInt, 8, 1, 1 << 24, 0, 0, 0);
  EXPECT_BAD(fi_batch_decode_plan(rt, &info, NULL, &wsm.t, NULL, &plan), "workspace");
  FT_CHECK(plan == NULL);

  /* run, on a plan made without a device */
  fi_attention_params prm;
  fi_attention_params_init(&prm);
  FT_REQUIRE(host_plan(&info, &prm, &plan) == FI_OK, "%s", fi_last_error());
  tens q, kc, vc, ip, ix, lp, o, l;
  small_run_tensors(2, &q, &kc, &vc, &ip, &ix, &lp, &o);
  mk(&l, ADDR(7), kDLFloat, 32, 2, 2, 32, 0, 0);
  fi_status st = fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t,
                                     FI_KV_LAYOUT_NHD, &o.t, &l.t, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid run refused: %s", fi_last_error());
  /* FlashInfer's interleaved [pages, 2, page_size, H, D] buffer: K and V views. */
  tens ki = kc, vi = vc;
  ki.t.shape = ki.shape, vi.t.shape = vi.shape;
  ki.t.strides = ki.strides, vi.t.strides = vi.strides;
  ki.strides[0] = vi.strides[0] = 2 * 16 * 8 * 128;
  ki.strides[1] = vi.strides[1] = 8 * 128;
  ki.strides[2] = vi.strides[2] = 128;
  ki.strides[3] = vi.strides[3] = 1;
  vi.t.data = ki.t.data, vi.t.byte_offset = 16 * 8 * 128 * 2;
  st = fi_batch_decode_run(rt, plan, &q.t, &ki.t, &vi.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD,
                           &o.t, NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "interleaved run refused: %s", fi_last_error());
  tens x = q;
  x.t.shape = x.shape;
  x.shape[1] = 16;
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &x.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t, NULL, NULL), "q has shape");
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_HND, &o.t, NULL, NULL), "paged_k_cache has shape");
  tens kf = kc;
  kf.t.shape = kf.shape;
  kf.t.dtype.code = kDLFloat;
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &q.t, &kf.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t, NULL, NULL), "paged_k_cache has dtype");
  tens ipx = ip;
  ipx.t.shape = ipx.shape;
  ipx.shape[0] = 2;
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ipx.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t, NULL, NULL), "indptr has 2 entries");
  tens ix64 = ix;
  ix64.t.shape = ix64.shape;
  ix64.t.dtype.bits = 64;
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ip.t, &ix64.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t, NULL, NULL), "indices has dtype");
  tens vs = vc;
  vs.t.shape = vs.shape;
  vs.t.strides = vs.strides;
  vs.strides[0] = 2 * 16 * 8 * 128, vs.strides[1] = 8 * 128, vs.strides[2] = 128, vs.strides[3] = 1;
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vs.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t, NULL, NULL), "equal strides");
  tens lb = l;
  lb.t.shape = lb.shape;
  lb.shape[1] = 8;
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t, &lb.t, NULL), "lse has shape");
  fi_batch_decode_plan_destroy(plan);
  fi_runtime_destroy(rt);
}

/* ---- found in review: each failed before its fix ---- */

/* The kernel reads indices[indptr[b] ..] for every page of the plan's requests (no bound
 * in its main loop): an indices tensor shorter than the plan's indptr[B] is read past its
 * end, so the run refuses it, in CUDA-graph mode too (against the plan it runs). */
FT_TEST(batch_decode_run_refuses_indices_shorter_than_the_plan) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  int32_t indptr[3] = {0, 3, 5}, last[2] = {16, 1};
  fi_batch_decode_info info = small_info(indptr, last);
  fi_attention_params prm;
  fi_attention_params_init(&prm);
  for (int graph = 0; graph < 2; graph++) {
    info.max_batch = graph ? 4 : 0;
    const int rows = graph ? 4 : 2;
    fi_decode_plan *plan = NULL;
    FT_REQUIRE(host_plan(&info, &prm, &plan) == FI_OK, "%s", fi_last_error());
    tens q, kc, vc, ip, ix, lp, o;
    small_run_tensors(rows, &q, &kc, &vc, &ip, &ix, &lp, &o);
    ix.shape[0] = 4; /* indptr[2] = 5 pages */
    EXPECT_BAD(fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t,
                                   NULL, NULL),
               "indices has 4 entries");
    ix.shape[0] = 5;
    fi_status st = fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD,
                                       &o.t, NULL, NULL);
    FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "graph %d: indices of indptr[B] entries refused: %s", graph,
             fi_last_error());
    fi_batch_decode_plan_destroy(plan);
  }
  fi_runtime_destroy(rt);
}

/* In CUDA-graph mode a replay after a re-plan for a larger batch reads indptr and
 * last_page_len up to max_batch through the pointers the captured run was given, so that
 * run refuses tables sized for its own batch only, as it does q (found in review). */
FT_TEST(graph_run_needs_max_batch_index_tables) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  int32_t indptr[3] = {0, 3, 5}, last[2] = {16, 1};
  fi_batch_decode_info info = small_info(indptr, last);
  info.max_batch = 4;
  fi_attention_params prm;
  fi_attention_params_init(&prm);
  fi_decode_plan *plan = NULL;
  FT_REQUIRE(host_plan(&info, &prm, &plan) == FI_OK, "%s", fi_last_error());
  tens q, kc, vc, ip, ix, lp, o;
  small_run_tensors(4, &q, &kc, &vc, &ip, &ix, &lp, &o);
  fi_status st = fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t,
                                     NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "max_batch-sized tables refused: %s", fi_last_error());
  ip.shape[0] = 3; /* B + 1 */
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t, NULL,
                                 NULL),
             "indptr has 3 entries; at least 5");
  ip.shape[0] = 6; /* more than max_batch + 1: allowed */
  lp.shape[0] = 2; /* B */
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t, NULL,
                                 NULL),
             "last_page_len has 2 entries; at least 4");
  lp.shape[0] = 4;
  st = fi_batch_decode_run(rt, plan, &q.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &o.t, NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "longer indptr refused: %s", fi_last_error());
  fi_batch_decode_plan_destroy(plan);
  fi_runtime_destroy(rt);
}

/* An fp8 cache is read in 16-byte loads (16 elements, kernels/decode.cuh's K loads):
 * starts and strides that are multiples of 8 elements but not of 16 bytes would fault
 * on a misaligned address, so they are refused by name. */
FT_TEST(fp8_cache_rows_need_16_bytes) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  const DLDataType e4m3 = {RT_DL_E4M3FN, 8, 1};
  /* single decode */
  tens q, k, v, o;
  mk(&q, ADDR(0), kDLBfloat, 16, 2, 32, 128, 0, 0);
  mk(&k, ADDR(1), 0, 8, 3, 100, 8, 128, 0);
  mk(&v, ADDR(2), 0, 8, 3, 100, 8, 128, 0);
  k.t.dtype = v.t.dtype = e4m3;
  mk(&o, ADDR(3), kDLBfloat, 16, 2, 32, 128, 0, 0);
  fi_status st = fi_single_decode(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid fp8 call refused: %s", fi_last_error());
  k.t.byte_offset = v.t.byte_offset = 8;
  EXPECT_BAD(fi_single_decode(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, NULL), "k starts at");
  k.t.byte_offset = v.t.byte_offset = 0;
  k.t.strides = k.strides, v.t.strides = v.strides;
  k.strides[0] = v.strides[0] = 8 * 136, k.strides[1] = v.strides[1] = 136, k.strides[2] = v.strides[2] = 1;
  EXPECT_BAD(fi_single_decode(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_NHD, NULL, NULL),
             "k has stride 136 in dimension 1");
  /* batch decode */
  int32_t indptr[3] = {0, 3, 5}, last[2] = {16, 1};
  fi_batch_decode_info info = small_info(indptr, last);
  info.kv_dtype = e4m3;
  fi_attention_params prm;
  fi_attention_params_init(&prm);
  fi_decode_plan *plan = NULL;
  FT_REQUIRE(host_plan(&info, &prm, &plan) == FI_OK, "%s", fi_last_error());
  tens bq, kc, vc, ip, ix, lp, bo;
  small_run_tensors(2, &bq, &kc, &vc, &ip, &ix, &lp, &bo);
  kc.t.dtype = vc.t.dtype = e4m3;
  st = fi_batch_decode_run(rt, plan, &bq.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &bo.t, NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid fp8 run refused: %s", fi_last_error());
  kc.t.strides = kc.strides, vc.t.strides = vc.strides;
  kc.strides[0] = vc.strides[0] = 16 * 8 * 128 + 8; /* pages 8 bytes apart from 16 */
  kc.strides[1] = vc.strides[1] = 8 * 128, kc.strides[2] = vc.strides[2] = 128, kc.strides[3] = vc.strides[3] = 1;
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &bq.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &bo.t, NULL,
                                 NULL),
             "paged_k_cache has stride 16392 in dimension 0");
  kc.t.strides = vc.t.strides = NULL;
  kc.t.byte_offset = vc.t.byte_offset = 24;
  EXPECT_BAD(fi_batch_decode_run(rt, plan, &bq.t, &kc.t, &vc.t, &ip.t, &ix.t, &lp.t, FI_KV_LAYOUT_NHD, &bo.t, NULL,
                                 NULL),
             "paged_k_cache starts at");
  fi_batch_decode_plan_destroy(plan);
  fi_runtime_destroy(rt);
}

/* A layout past 2^63 bytes (max_batch 2^31 - 1 with 2^30 query heads) is reported as such
 * (bytes -1), not as the wrapped product; a large one that fits is unchanged. */
FT_TEST(workspace_layout_past_2_63_bytes_is_no_size) {
  rt_decode_layout l;
  rt_decode_layout_for(INT32_MAX, 132, 1 << 30, 1 << 26, 256, &l);
  FT_CHECK(l.bytes == -1, "bytes %lld", (long long)l.bytes);
  rt_decode_layout_for(INT32_MAX, 132, 128, 8, 256, &l);
  const int64_t cap = INT32_MAX;
  FT_CHECK(l.bytes > 0 && l.bytes >= l.partial_lse_off + cap * 128 * 4 && l.partial_lse_off >= cap * 128 * 256 * 2,
           "bytes %lld", (long long)l.bytes);
}

/* The workspace's byte count (shape x element bytes) past 2^63 is refused by name,
 * before the device is asked, not wrapped into a small count. */
FT_TEST(batch_decode_plan_refuses_a_workspace_past_2_63_bytes) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  int32_t indptr[3] = {0, 3, 5}, last[2] = {16, 1};
  fi_batch_decode_info info = small_info(indptr, last);
  tens ws;
  mk(&ws, ADDR(9), kDLInt, 32, 1, ((int64_t)1 << 62) + (1 << 20), 0, 0, 0); /* x 4: 2^64 + 4 MiB */
  fi_decode_plan *plan = NULL;
  EXPECT_BAD(fi_batch_decode_plan(rt, &info, NULL, &ws.t, NULL, &plan), "workspace");
  FT_CHECK(plan == NULL);
  fi_runtime_destroy(rt);
}

/* fi_admin_read_probe (fi-bench's read roofline) refuses a buffer whose size in bytes
 * passes 2^63, which would wrap to a small count of 16-byte loads; and one 8 bytes long. */
FT_TEST(read_probe_refuses_a_buffer_past_2_63_bytes) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  tens b;
  mk(&b, ADDR(9), kDLInt, 32, 1, ((int64_t)1 << 62) + 4, 0, 0, 0); /* x 4: 2^64 + 16, wraps to 16 */
  EXPECT_BAD(fi_admin_read_probe(rt, &b.t, 1, NULL), "buf has");
  mk(&b, ADDR(9), kDLInt, 32, 1, 2, 0, 0, 0);
  EXPECT_BAD(fi_admin_read_probe(rt, &b.t, 1, NULL), "buf must be");
  fi_runtime_destroy(rt);
}

/* A request of more than 2^31 - 1 tokens is refused naming the arguments that make it. */
FT_TEST(plan_names_indptr_for_a_request_past_2_31_tokens) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  int32_t indptr[3] = {0, 3, 4099}, last[2] = {16, 1};
  fi_batch_decode_info info = small_info(indptr, last);
  info.page_size = 1 << 20;
  tens ws;
  mk(&ws, ADDR(9), kDLUInt, 8, 1, 1 << 24, 0, 0, 0);
  fi_decode_plan *plan = NULL;
  EXPECT_BAD(fi_batch_decode_plan(rt, &info, NULL, &ws.t, NULL, &plan), "info->indptr[1..2]");
  FT_CHECK(strstr(fi_last_error(), "last_page_len[1]"), "%s", fi_last_error());
  fi_runtime_destroy(rt);
}

/* page_size near 2^31: the split's smallest chunk (128 tokens in pages) is computed
 * without int overflow (undefined behaviour; SAN=1 stops on it). */
FT_TEST(planner_page_size_near_int_max) {
  const int ps = INT32_MAX - 126;
  int32_t indptr[2] = {0, 2}, last[1] = {1};
  char err[256];
  FT_REQUIRE(rt_decode_check_pages(1, indptr, last, ps, err, sizeof err) == 0, "%s", err);
  int32_t items[IW * 64];
  int chunk = 0;
  const int64_t n = rt_decode_partition(1, indptr, last, ps, -1, 64, items, 64, &chunk);
  FT_CHECK(check_partition(1, indptr, last, ps, -1, 64, 64, items, n, chunk) == 0, "%lld items, chunk %d",
           (long long)n, chunk);
}

/* A stored tactic (issue 43) replaces the rule's warps, pipeline and split where no variable
 * set them, and a variable still wins; the workspace layout stays the caller's; its text
 * reads back; the key: the batch's bucket (max_batch's in CUDA-graph mode), the mean
 * length's bucket (none in CUDA-graph mode). */
/* The tuning of no FI_DECODE_* variable, and 8 requests of 4096 tokens (pages of 16),
 * hq/hkv heads of 128, bf16, for the planner tests below. */
static rt_tuning plain_tuning(void) {
  unsetenv("FI_DECODE_PIPELINE");
  unsetenv("FI_DECODE_WARPS");
  unsetenv("FI_DECODE_SPLIT");
  return env_tuning();
}
static fi_batch_decode_info eight_requests(int hq, int hkv) {
  static int32_t ip[9], lp[8];
  for (int i = 0; i <= 8; i++) ip[i] = i * 256;
  for (int i = 0; i < 8; i++) lp[i] = 16;
  fi_batch_decode_info info;
  memset(&info, 0, sizeof info);
  info.batch = 8, info.num_qo_heads = hq, info.num_kv_heads = hkv, info.head_dim = 128, info.page_size = 16;
  info.q_dtype = info.kv_dtype = (DLDataType){kDLBfloat, 16, 1};
  info.indptr = ip, info.last_page_len = lp;
  return info;
}

FT_TEST(planner_takes_a_stored_tactic) {
  rt_tuning tune = plain_tuning();
  const rt_decode_device dev = rt_decode_device_model(132);
  fi_batch_decode_info info = eight_requests(32, 8);
  fi_attention_params prm;
  fi_attention_params_init(&prm);
  rt_decode_choice rule, tuned, env;
  FT_REQUIRE(rt_decode_choose("test", &info, &prm, INT64_MAX, &tune, &dev, NULL, &rule) == FI_OK, "%s",
             fi_last_error());
  /* a tactic unlike the rule's in all three */
  rt_decode_tactic t = {rule.key.v[DECODE_P_WARPS] == 8 ? 2 : 8,
                        rule.key.v[DECODE_P_PIPELINE] == DECODE_PIPE_TWO_BUFFER ? DECODE_PIPE_K_ONLY
                                                                                : DECODE_PIPE_TWO_BUFFER,
                        4.0};
  FT_REQUIRE(rt_decode_choose("test", &info, &prm, INT64_MAX, &tune, &dev, &t, &tuned) == FI_OK, "%s",
             fi_last_error());
  FT_CHECK_EQ_INT(tuned.key.v[DECODE_P_WARPS], t.warps);
  FT_CHECK_EQ_INT(tuned.key.v[DECODE_P_PIPELINE], t.pipeline);
  FT_CHECK(tuned.num_items > rule.num_items, "split x4: %lld items, the rule's %lld", (long long)tuned.num_items,
           (long long)rule.num_items);
  FT_CHECK(memcmp(&tuned.lay, &rule.lay, sizeof rule.lay) == 0, "the workspace layout is the caller's");
  /* FI_DECODE_WARPS set: it wins over the stored warps, the rest of the tactic stands */
  tune.decode_warps = 1;
  FT_REQUIRE(rt_decode_choose("test", &info, &prm, INT64_MAX, &tune, &dev, &t, &env) == FI_OK);
  FT_CHECK_EQ_INT(env.key.v[DECODE_P_WARPS], 1);
  FT_CHECK_EQ_INT(env.key.v[DECODE_P_PIPELINE], t.pipeline);
  free(rule.tab), free(tuned.tab), free(env.tab);
  /* text */
  char text[64];
  rt_decode_tactic back;
  FT_REQUIRE(rt_decode_tactic_format(&t, text, sizeof text) == 0);
  FT_REQUIRE(rt_decode_tactic_parse(text, &back) == 0, "%s", text);
  FT_CHECK(back.warps == t.warps && back.pipeline == t.pipeline && back.split == t.split, "%s", text);
  const char *bad[] = {"warps=3;pipeline=1;split=1", "warps=4;pipeline=9;split=1", "warps=4;pipeline=1;split=0",
                       "warps=4;pipeline=1;split=100", "warps=4;pipeline=1", "warps=4;pipeline=1;split=1;x=2", ""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    FT_CHECK(rt_decode_tactic_parse(bad[i], &back) == -1, "'%s'", bad[i]);
  /* the key */
  int64_t f[RT_DECODE_TACTIC_FIELDS], bucket;
  char shape[256];
  rt_decode_tactic_key(&info, &prm, f, &bucket);
  rt_decode_tactic_shape(f, shape, sizeof shape);
  FT_CHECK_EQ_INT(bucket, 8);
  FT_CHECK_EQ_STR(shape, "q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0;len=4096");
  info.max_batch = 100;
  rt_decode_tactic_key(&info, &prm, f, &bucket);
  rt_decode_tactic_shape(f, shape, sizeof shape);
  FT_CHECK_EQ_INT(bucket, 128);
  FT_CHECK_EQ_STR(shape, "q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0;len=graph");
}

/* Groups above 16 query heads a KV head (MQA, wide GQA; issue 45 item 5): each KV head's
 * group is cut into the fewest grid heads of at most 16 rows that divide it, and the plan
 * counts grid heads where it counted KV heads: its workspace (counters a grid head), a
 * key of 16 rows (or the CUDA-core kernel's few), no head pairs; up to 128, beyond refused
 * by name. The kernel's side (grid head y reading KV head y / chunks) runs in the
 * emulator (test_decode_emu) and on the GPU (gpu_decode). */
FT_TEST(planner_cuts_groups_above_16_into_grid_heads) {
  static const int g[][2] = {{1, 1}, {8, 1}, {16, 1}, {17, 17}, {24, 2}, {32, 2}, {34, 17}, {48, 3},
                             {64, 4}, {96, 6}, {128, 8}};
  for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
    FT_CHECK_EQ_INT(rt_decode_group_chunks(g[i][0] * 2, 2), g[i][1], "group %d", g[i][0]);
    FT_CHECK(g[i][0] % g[i][1] == 0 && g[i][0] / g[i][1] <= 16);
  }
  fi_attention_params prm;
  fi_attention_params_init(&prm);
  const DLDataType bf = {kDLBfloat, 16, 1}, e4 = {RT_DL_E4M3FN, 8, 1};
  FT_CHECK_EQ_INT(rt_dec_check_common("t", 64, 1, 128, JIT_DT_BF16, JIT_DT_BF16, bf, bf, &prm), FI_OK);
  FT_CHECK_EQ_INT(rt_dec_check_common("t", 128, 1, 128, JIT_DT_BF16, JIT_DT_BF16, bf, bf, &prm), FI_OK);
  FT_CHECK_EQ_INT(rt_dec_check_common("t", 256, 1, 128, JIT_DT_BF16, JIT_DT_BF16, bf, bf, &prm),
                  FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_STR_HAS(fi_last_error(), "1..128");
  /* a plan of 64/1 (an fp8 cache, which would take head pairs at a small group) against
   * one of 64/4: the same grid of 4 heads of 16 rows, layout, kernel and items */
  rt_tuning tune = plain_tuning();
  const rt_decode_device dev = rt_decode_device_model(132);
  fi_batch_decode_info info = eight_requests(64, 1);
  info.kv_dtype = e4;
  rt_decode_choice mqa, four;
  FT_REQUIRE(rt_decode_choose("t", &info, &prm, INT64_MAX, &tune, &dev, NULL, &mqa) == FI_OK, "%s", fi_last_error());
  info.num_kv_heads = 4; /* group 16: what the MQA plan's grid heads are */
  FT_REQUIRE(rt_decode_choose("t", &info, &prm, INT64_MAX, &tune, &dev, NULL, &four) == FI_OK, "%s",
             fi_last_error());
  FT_CHECK(memcmp(&mqa.lay, &four.lay, sizeof mqa.lay) == 0, "the layout of 4 grid heads");
  FT_CHECK(mqa.key.op == four.key.op && memcmp(mqa.key.v, four.key.v, sizeof mqa.key.v) == 0, "the kernel of 16 rows");
  FT_CHECK_EQ_INT(mqa.num_items, four.num_items);
  FT_CHECK_EQ_INT(mqa.kv_pair, 1, "no head pairs");
  FT_CHECK_EQ_INT(mqa.key.v[DECODE_P_ROWS], 16);
  free(mqa.tab), free(four.tab);
  /* 34/2 over fp8: group 17, cut into 17 grid heads of 1 row a KV head; 34 grid heads of
   * group 1 would take head pairs, but a pair must be two of the cache's heads */
  rt_decode_choice odd;
  info.num_qo_heads = 34, info.num_kv_heads = 2;
  FT_REQUIRE(rt_decode_choose("t", &info, &prm, INT64_MAX, &tune, &dev, NULL, &odd) == FI_OK, "%s", fi_last_error());
  FT_CHECK_EQ_INT(odd.kv_pair, 1, "no head pairs across grid heads of one KV head");
  free(odd.tab);
}

/* The tensor-core route's rule (rt_decode_use_tc): groups above 16 at RT_DECODE_TC_UNITS
 * requests x KV heads or more (FI_DECODE_TC 1: always, 0: never); q 16-bit with its own
 * dtype's cache, or an fp8 one (the prefill kernels' *_fp8kv) without RoPE. */
FT_TEST(tensor_core_route_rule) {
  rt_tuning t = rt_tuning_default();
  const int F16 = JIT_DT_F16, BF = JIT_DT_BF16, E4 = JIT_DT_E4M3, E5 = JIT_DT_E5M2, F32 = JIT_DT_F32;
  FT_CHECK(rt_decode_use_tc(&t, 64, 64, BF, BF, 0), "64/1 at 64 units");
  FT_CHECK(!rt_decode_use_tc(&t, 64, 63, BF, BF, 0), "below the units");
  FT_CHECK(!rt_decode_use_tc(&t, 16, 4096, BF, BF, 0), "group 16");
  FT_CHECK(rt_decode_use_tc(&t, 32, 64, F16, E4, 0), "an e4m3 cache");
  FT_CHECK(rt_decode_use_tc(&t, 32, 64, BF, E5, 0), "an e5m2 cache");
  FT_CHECK(!rt_decode_use_tc(&t, 32, 64, BF, E4, 1), "fp8 with RoPE: the prefill kernels refuse it");
  FT_CHECK(rt_decode_use_tc(&t, 32, 64, BF, BF, 1), "16-bit with RoPE");
  FT_CHECK(!rt_decode_use_tc(&t, 32, 64, BF, F16, 0), "mixed 16-bit dtypes");
  FT_CHECK(!rt_decode_use_tc(&t, 32, 64, F32, F32, 0), "f32");
  t.decode_tc = 1;
  FT_CHECK(rt_decode_use_tc(&t, 4, 1, BF, E4, 0), "FI_DECODE_TC=1: group 4, one request, e4m3");
  t.decode_tc = 0;
  FT_CHECK(!rt_decode_use_tc(&t, 64, 4096, BF, BF, 0), "FI_DECODE_TC=0");
}
