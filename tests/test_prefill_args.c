/* test_prefill_args.c: prefill attention on a machine with no GPU: the batch planner on
 * ragged batches (every packed query row in exactly one tile, every tile's KV range the
 * union of its rows' ranges and covered by its chunks exactly once, slots disjoint, the
 * workspace large enough), kernel keys against the registry, and bad arguments refused
 * by name. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_runtime.h"
#include "ft.h"
#include "test_args_util.h"
#include "jit_registry.h"
#include "ops_prefill.h"
#include "prefill_params.h"
#include "rt_internal.h"
#include "rt_prefill.h"
#include "rt_autotune.h"
#include "rt_prefill_args.h"

#define IW FI_PREFILL_ITEM_WORDS
#define ADDR(i) ((void *)(uintptr_t)(0x10000000u * (unsigned)((i) + 1)))

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

/* The KV range query token t attends, from the mask's definition. */
static void row_range(int64_t t, int64_t lq, int64_t lkv, int causal, int wl, int64_t *lo, int64_t *hi) {
  const int64_t pos = t + lkv - lq;
  *hi = causal ? (pos + 1 < lkv ? pos + 1 : lkv) : lkv;
  *lo = wl >= 0 && pos - wl > 0 ? pos - wl : 0;
  if (*hi < *lo) *hi = *lo;
}


/* Checks a partition against its definition; returns the number of problems. */
static int check_partition(const rt_prefill_batch *bt, int64_t target, const rt_prefill_layout *l,
                           const int32_t *items, int64_t n, int64_t chunk, int64_t slots) {
  int bad = 0;
  if (n < 0 || n > l->capacity) {
    fprintf(stderr, "  %lld items, capacity %lld\n", (long long)n, (long long)l->capacity);
    return 1;
  }
  if (slots > l->slots) bad++;
  if (chunk > 0 && n * bt->num_kv_heads > target) bad++;
  if (chunk % bt->kv_tile) bad++;
  char *slot_used = calloc((size_t)l->slots + 1, 1);
  int64_t i = 0;
  for (int b = 0; b < bt->batch; b++) {
    const int64_t lq = bt->qo_indptr[b + 1] - bt->qo_indptr[b], rows = lq * bt->group, lkv = bt->kv_len[b];
    /* Tiles from the last to the first. */
    int64_t r = rows > 0 ? (rows - 1) / bt->q_tile * bt->q_tile : -1;
    while (r >= 0) {
      if (i >= n) {
        fprintf(stderr, "  request %d: rows from %lld have no item\n", b, (long long)r);
        free(slot_used);
        return bad + 1;
      }
      const int32_t *it = items + IW * i;
      const int nc = it[5] >> 16;
      const int64_t nr = it[2];
      if (it[0] != b || it[1] != r || nr < 1 || nr > bt->q_tile || r + nr > rows || nc < 1 ||
          it[6] != bt->qo_indptr[b] || it[7] != lq || it[8] != bt->kv_base[b] || it[9] != lkv) {
        fprintf(stderr, "  request %d row %lld: item %lld is (%d, %d, %d, ...)\n", b, (long long)r,
                (long long)i, it[0], it[1], it[2]);
        free(slot_used);
        return bad + 1;
      }
      if (nr != (r + bt->q_tile <= rows ? bt->q_tile : rows - r)) bad++; /* only the last tile is partial */
      /* The union of the rows' ranges. */
      int64_t ulo = INT64_MAX, uhi = -1;
      for (int64_t x = r; x < r + nr; x++) {
        int64_t lo, hi;
        row_range(x / bt->group, lq, lkv, bt->causal, bt->window_left, &lo, &hi);
        if (hi > lo) {
          if (lo < ulo) ulo = lo;
          if (hi > uhi) uhi = hi;
        }
      }
      int64_t at = -1;
      for (int k = 0; k < nc; k++, i++) {
        const int32_t *c = items + IW * i;
        if (i >= n || c[0] != b || c[1] != r || c[2] != nr || (c[5] & 0xffff) != k || (c[5] >> 16) != nc) {
          fprintf(stderr, "  request %d row %lld chunk %d: bad item %lld\n", b, (long long)r, k, (long long)i);
          free(slot_used);
          return bad + 1;
        }
        if (k == 0) at = c[3];
        if (c[3] != at || c[4] < c[3] || (nc > 1 && c[4] == c[3])) bad++;
        if (nc > 1 && c[4] - c[3] > chunk) bad++;
        if (nc > 1) {
          const int64_t s = (int64_t)c[10] + k;
          if (s >= l->slots || slot_used[s]) bad++;
          else slot_used[s] = 1;
        }
        at = c[4];
      }
      const int32_t *first = items + IW * (i - nc);
      if (uhi >= 0 && (first[3] != ulo || at != uhi)) {
        fprintf(stderr, "  request %d rows %lld+%lld: range [%d, %lld) but the rows attend [%lld, %lld)\n", b,
                (long long)r, (long long)nr, first[3], (long long)at, (long long)ulo, (long long)uhi);
        bad++;
      }
      if (uhi < 0 && at != first[3]) bad++; /* rows that attend nothing: an empty range */
      r -= bt->q_tile;
    }
  }
  if (i != n) bad++;
  free(slot_used);
  return bad;
}

FT_TEST(planner_covers_every_row_and_kv_token_once) {
  int cases = 0, fails = 0, splits = 0;
  for (int rep = 0; rep < 300; rep++) {
    const int B = rep % 5 == 0 ? 1 + (int)(rnd() % 3) : (int)(rnd() % 80);
    const int hkv = (int[]){1, 2, 4, 8, 32}[rnd() % 5], group = (int[]){1, 2, 4, 5, 8, 16}[rnd() % 6];
    const int D = (int[]){64, 128, 256}[rnd() % 3];
    const int sms = (int[]){1, 8, 108, 132}[rnd() % 4];
    const int causal = (int)(rnd() % 2), wl = rnd() % 4 == 0 ? (int)(rnd() % 3000) : -1;
    int32_t *qo = malloc(sizeof(int32_t) * (size_t)(B + 1)), *base = malloc(sizeof(int32_t) * (size_t)(B + 1));
    int64_t *kvl = malloc(sizeof(int64_t) * (size_t)(B + 1));
    qo[0] = (int32_t)(rnd() % 5);
    int64_t maxrows = 0;
    for (int b = 0; b < B; b++) {
      const int64_t lkv = rnd() % 9 == 0 ? (causal ? 0 : (int64_t)(rnd() % 3)) : rnd() % 4 == 0 ? (int64_t)(1 + rnd() % 40000) : (int64_t)(1 + rnd() % 3000);
      int64_t lq = rnd() % 3 == 0 ? 1 : (int64_t)(rnd() % (lkv + 1));
      if (!causal && rnd() % 5 == 0) lq = 1 + rnd() % 700;
      if (causal && lq > lkv) lq = lkv;
      qo[b + 1] = qo[b] + (int32_t)lq;
      kvl[b] = lkv;
      base[b] = (int32_t)(rnd() % 1000);
      if (lq * group > maxrows) maxrows = lq * group;
    }
    char err[256];
    FT_REQUIRE(rt_prefill_check_batch(B, qo, kvl, causal, 0, err, sizeof err) == 0, "%s", err);
    rt_prefill_layout l;
    rt_prefill_layout_for(B, qo[B] - qo[0], sms, hkv * group, hkv, D, &l);
    const int qt = jit_prefill_q_tile(D, maxrows);
    const rt_prefill_batch bt = {B, qo, kvl, base, group, hkv, qt, jit_prefill_kv_tile(D), causal, wl};
    const int64_t target = (int64_t)sms * RT_PREFILL_BLOCKS_PER_SM;
    int32_t *items = malloc((size_t)l.capacity * IW * 4 + 4);
    int64_t chunk = -1, slots = -1;
    const int64_t n = rt_prefill_partition(&bt, target, items, l.capacity, l.slots, &chunk, &slots);
    const int bad = check_partition(&bt, target, &l, items, n, chunk, slots);
    if (bad) {
      fprintf(stderr, "  B=%d hkv=%d group=%d D=%d sms=%d causal=%d wl=%d: %d problems\n", B, hkv, group, D,
              sms, causal, wl, bad);
      fails++;
    }
    splits += chunk > 0;
    FT_CHECK(l.items_off >= FI_PREFILL_HDR_WORDS * 4);
    FT_CHECK(l.partial_o_off >= l.items_off + l.capacity * IW * 4);
    FT_CHECK(l.partial_lse_off >= l.partial_o_off + l.slots * hkv * RT_PREFILL_SLOT_ROWS * D * 4);
    FT_CHECK(l.bytes >= l.partial_lse_off + l.slots * hkv * RT_PREFILL_SLOT_ROWS * 4);
    FT_CHECK(l.partial_o_off % 256 == 0 && l.partial_lse_off % 256 == 0);
    cases++;
    free(qo);
    free(base);
    free(kvl);
    free(items);
  }
  fprintf(stderr, "  %d batches planned (%d split), %d with problems\n", cases, splits, fails);
  FT_CHECK(fails == 0);
  FT_CHECK(splits > 10, "only %d batches were split", splits);
}

/* One long causal request is split and its tiles above the diagonal skipped; a large
 * batch is not split; L_q = 1 is one tile of the group's rows over the whole KV. */
FT_TEST(planner_splits_small_batches_and_skips_the_upper_triangle) {
  int32_t qo[2] = {0, 8192}, base[2] = {0, 0};
  int64_t kvl[2] = {8192, 0};
  static int32_t items[IW * 20000];
  int64_t chunk, slots;
  rt_prefill_batch bt = {1, qo, kvl, base, 4, 8, 128, 64, 1, -1};
  int64_t n = rt_prefill_partition(&bt, 264, items, 20000, 33, &chunk, &slots);
  FT_CHECK(n == 256 && chunk == 0, "B=1 L=8192 group 4: %lld items, chunk %lld", (long long)n, (long long)chunk);
  /* Tile k (rows 128k .. 128k + 127: tokens 32k .. 32k + 31) attends [0, 32k + 32). */
  int ok = 1;
  for (int64_t k = 0; k < n; k++) ok &= items[IW * (n - 1 - k) + 3] == 0 && items[IW * (n - 1 - k) + 4] == 32 * k + 32;
  FT_CHECK(ok, "causal tile ranges");
  bt.group = 1;
  bt.num_kv_heads = 1;
  bt.q_tile = 128;
  int32_t qo2[2] = {0, 128};
  int64_t kvl2[1] = {100000};
  bt.qo_indptr = qo2;
  bt.kv_len = kvl2;
  n = rt_prefill_partition(&bt, 264, items, 20000, 264, &chunk, &slots);
  FT_CHECK(n > 100 && n <= 264 && chunk >= RT_PREFILL_MIN_CHUNK && slots == n,
           "append of 128 to 100000: %lld items, chunk %lld, slots %lld", (long long)n, (long long)chunk, (long long)slots);
  /* decode-like: L_q = 1, group 8: one tile of 8 rows over all 5000 tokens */
  int32_t qo3[2] = {0, 1};
  int64_t kvl3[1] = {5000};
  rt_prefill_batch b3 = {1, qo3, kvl3, base, 8, 64, 16, 64, 1, -1};
  n = rt_prefill_partition(&b3, 64, items, 20000, 1, &chunk, &slots);
  FT_CHECK(n == 1 && items[2] == 8 && items[3] == 0 && items[4] == 5000, "L_q=1: %lld items [%d, %d) rows %d",
           (long long)n, items[3], items[4], items[2]);
  /* A window: rows attend their last window_left + 1 tokens. */
  rt_prefill_batch b4 = {1, qo3, kvl3, base, 8, 64, 16, 64, 1, 99};
  n = rt_prefill_partition(&b4, 64, items, 20000, 1, &chunk, &slots);
  FT_CHECK(n == 1 && items[3] == 4900 && items[4] == 5000, "window: [%d, %d)", items[3], items[4]);
}

FT_TEST(planner_refuses_bad_batches) {
  char err[256];
  int32_t qo[3] = {0, 5, 3};
  int64_t kvl[2] = {10, 10};
  FT_CHECK(rt_prefill_check_batch(2, qo, kvl, 1, 0, err, sizeof err) != 0 && strstr(err, "monotone"), "%s", err);
  int32_t qo2[3] = {0, 5, 20};
  FT_CHECK(rt_prefill_check_batch(2, qo2, kvl, 1, 0, err, sizeof err) != 0 && strstr(err, "L_q <= L_kv"), "%s", err);
  FT_CHECK(rt_prefill_check_batch(2, qo2, kvl, 0, 0, err, sizeof err) == 0, "%s", err);
  FT_CHECK(rt_prefill_check_batch(2, qo2, kvl, 0, 19, err, sizeof err) != 0 && strstr(err, "max_qo_tokens"), "%s", err);
}

/* ---- keys ---- */

/* How many of its op's registered configurations equal the key. */
static int times_registered(const jit_key *k) {
  int n = 0;
  for (int i = 0; i < k->op->config_count(); i++) {
    jit_key c;
    k->op->config(i, &c);
    n += memcmp(c.v, k->v, sizeof c.v) == 0 && c.op == k->op;
  }
  return n;
}

FT_TEST(every_selected_key_is_registered) {
  const jit_op *ops[2] = {jit_registry_find("single_prefill"), jit_registry_find("batch_prefill")};
  FT_REQUIRE(ops[0] && ops[1] && jit_registry_find("prefill_merge") && jit_registry_find("mma_probe"));
  const int dts[2] = {JIT_DT_F16, JIT_DT_BF16}, dims[3] = {64, 128, 256};
  const int64_t rows[6] = {1, 16, 17, 64, 65, 1 << 20};
  int checked = 0;
  for (int s = 0; s < 2; s++)
    for (int q = 0; q < 2; q++)
      for (int d = 0; d < 3; d++)
        for (int r = 0; r < 6; r++)
          for (int rope = 0; rope < 2; rope++) {
            jit_key k;
            const int qt = jit_prefill_q_tile(dims[d], rows[r]);
            FT_CHECK(qt == 16 || qt == 64 || qt == 128);
            FT_CHECK(qt <= 2 * jit_prefill_kv_tile(dims[d]), "q tile %d over the staging buffer", qt);
            jit_prefill_select(s == 0, dts[q], dims[d], qt, rope, &k);
            FT_CHECK(times_registered(&k) > 0, "%s dt=%d d=%d q_tile=%d rope=%d not registered", k.op->name, dts[q], dims[d], qt, rope);
            checked++;
          }
  /* fp8 caches: the kernel a call picks (rt_prefill_pick_kernel, no device) is the fp8
   * op's, registered, for every q dtype, cache dtype, head_dim and row count */
  const int kvs[2] = {JIT_DT_E4M3, JIT_DT_E5M2};
  for (int s = 0; s < 2; s++)
    for (int q = 0; q < 2; q++)
      for (int f = 0; f < 2; f++)
        for (int d = 0; d < 3; d++)
          for (int r = 0; r < 6; r++) {
            jit_key k;
            const int qt = rt_prefill_pick_kernel(NULL, kDLCUDA, 0, s, dts[q], kvs[f], dims[d], rows[r], 4096, 0, 0, 0,
                                                  NULL, &k);
            FT_CHECK(strstr(k.op->name, "_fp8kv") && k.v[PREFILL_P_KV_DTYPE] == kvs[f] && qt == jit_prefill_q_tile(dims[d], rows[r]),
                     "%s kv=%d", k.op->name, kvs[f]);
            FT_CHECK(times_registered(&k) > 0, "%s dt=%d kv=%d d=%d not registered", k.op->name, dts[q], kvs[f], dims[d]);
            checked++;
          }
  for (int q = 0; q < 2; q++)
    for (int d = 0; d < 3; d++) {
      jit_key k;
      jit_prefill_merge_select(dts[q], dims[d], &k);
      FT_CHECK(times_registered(&k) > 0, "prefill_merge dt=%d d=%d not registered", dts[q], dims[d]);
    }
  /* Every registered configuration is distinct (no duplicate compile in prewarm). */
  for (int o = 0; o < 2; o++)
    for (int i = 0; i < ops[o]->config_count(); i++)
      for (int j = 0; j < i; j++) {
        jit_key a, b;
        ops[o]->config(i, &a);
        ops[o]->config(j, &b);
        FT_CHECK(memcmp(a.v, b.v, sizeof a.v) != 0, "%s configs %d and %d are equal", ops[o]->name, i, j);
      }
  fprintf(stderr, "  %d selections, %d + %d registered configurations\n", checked, ops[0]->config_count(),
          ops[1]->config_count());
}

/* The wgmma kernels (Hopper): every key the runtime can pick is registered, distinct,
 * compiled for sm_90a on an sm_90 device and for nothing off Hopper, with the q tile,
 * threads and shared memory the launcher relies on. */
FT_TEST(wgmma_keys_registered_and_hopper_only) {
  const jit_op *ops[2] = {jit_registry_find("single_prefill_sm90"), jit_registry_find("batch_prefill_sm90")};
  FT_REQUIRE(ops[0] && ops[1]);
  const int dts[2] = {JIT_DT_F16, JIT_DT_BF16}, dims[2] = {64, 128}, tiles[2] = {64, 128}, kvt[2] = {64, 128};
  for (int s = 0; s < 2; s++) {
    FT_CHECK(ops[s]->target_arch && ops[s]->dyn_smem, "%s: no arch or shared memory hook", ops[s]->name);
    if (!ops[s]->target_arch || !ops[s]->dyn_smem) continue;
    FT_CHECK(ops[s]->target_arch("sm_90") && strcmp(ops[s]->target_arch("sm_90"), "sm_90a") == 0);
    FT_CHECK(ops[s]->target_arch("sm_90a") && strcmp(ops[s]->target_arch("sm_90a"), "sm_90a") == 0);
    FT_CHECK(!ops[s]->target_arch("sm_80") && !ops[s]->target_arch("sm_100") && !ops[s]->target_arch("gfx90a"));
    for (int q = 0; q < 2; q++)
      for (int d = 0; d < 2; d++)
        for (int t = 0; t < 12; t++) {
          jit_key k;
          /* producer 2 (ping-pong) means 1 at q tile 64: one consumer warpgroup */
          const int ws = t / 4, kws = ws == 2 && tiles[t % 2] == 64 ? 1 : ws;
          jit_prefill_wgmma_select(s == 0, dts[q], dims[d], tiles[t % 2], kvt[t / 2 % 2], ws, &k);
          FT_CHECK(k.v[PREFILL_WG_P_KV_TILE] == kvt[t / 2 % 2] && k.v[PREFILL_WG_P_PRODUCER] == kws);
          FT_CHECK(k.op == ops[s] && jit_prefill_is_wgmma(&k));
          FT_CHECK(jit_prefill_key_q_tile(&k) == tiles[t % 2], "q tile %d", jit_prefill_key_q_tile(&k));
          /* a warpgroup per 64 rows, and the producer's */
          FT_CHECK(jit_prefill_threads(&k) == 2u * (unsigned)tiles[t % 2] + 128u * (unsigned)(ws > 0), "threads %u",
                   jit_prefill_threads(&k));
          const unsigned sm = ops[s]->dyn_smem(&k);
          /* Q (two buffers with a producer: the persistent grid's next unit), two K/V
           * stages, three offset tables, the mbarriers and the 1024-byte alignment slack;
           * the largest within an SM's 227 KB, and two blocks of one consumer and a
           * producer within its 228 KB (1 KB a block reserved). */
          const unsigned want = (unsigned)(((ws > 0 ? 2 : 1) * tiles[t % 2] * dims[d] + 4 * kvt[t / 2 % 2] * dims[d]) * 2 +
                                           3 * kvt[t / 2 % 2] * 8 + 128 + 1024);
          FT_CHECK(sm == want && sm <= 227u * 1024, "shared memory %u, expected %u", sm, want);
          const int pb = jit_prefill_persistent_blocks(&k);
          FT_CHECK(s == 1 && ws > 0 ? pb >= 1 && pb <= (tiles[t % 2] == 64 ? 2 : 1) && pb * (sm + 1024u) <= 228u * 1024
                                    : pb == 0, "%d persistent blocks of %u bytes", pb, sm);
          FT_CHECK(pb != 1 || tiles[t % 2] == 128 || 2 * (sm + 1024u) > 228u * 1024, "one block of %u bytes", sm);
          const int found = times_registered(&k);
          FT_CHECK(found == 1, "%s dt=%d d=%d tiles %d/%d ws %d registered %d times", k.op->name, dts[q],
                   dims[d], tiles[t % 2], kvt[t / 2 % 2], ws, found);
          /* select leaves the soft cap's code out; the shape with it is registered too,
           * and the two render different kernels (the template's CAP, last) */
          FT_CHECK(k.v[PREFILL_WG_P_SOFT_CAP] == 0);
          char src0[1024], src1[1024];
          FT_CHECK(k.op->render_entry(&k, "e", src0, sizeof src0) > 0);
          jit_prefill_wgmma_soft_cap(&k, 1);
          FT_CHECK(times_registered(&k) == 1, "%s with the soft cap registered %d times", k.op->name, times_registered(&k));
          FT_CHECK(k.op->render_entry(&k, "e", src1, sizeof src1) > 0);
          FT_CHECK(strstr(src0, ", 0>(p);") && strstr(src1, ", 1>(p);"), "entries:\n%s\n%s", src0, src1);
          FT_CHECK(ops[s]->dyn_smem(&k) == sm, "the soft cap changes no shared memory");
        }
    /* head_dim 256: one shape whatever is asked (two warpgroups, 64-token tiles, no
     * producer), registered once a dtype */
    for (int q = 0; q < 2; q++) {
      jit_key k;
      jit_prefill_wgmma_select(s == 0, dts[q], 256, 64, 128, 2, &k);
      FT_CHECK(k.v[PREFILL_WG_P_WARPGROUPS] == 2 && k.v[PREFILL_WG_P_KV_TILE] == 64 && k.v[PREFILL_WG_P_PRODUCER] == 0);
      FT_CHECK(jit_prefill_threads(&k) == 256u && ops[s]->dyn_smem(&k) <= 227u * 1024, "threads %u smem %u",
               jit_prefill_threads(&k), ops[s]->dyn_smem(&k));
      const int found = times_registered(&k);
      FT_CHECK(found == 1, "%s head_dim 256 dt=%d registered %d times", k.op->name, dts[q], found);
    }
    /* head_dim 64's three consumers (q tile 192, a producer), registered once each; other
     * head_dims, or no producer, get two */
    for (int q = 0; q < 2; q++)
      for (int t = 0; t < 4; t++) {
        jit_key k;
        jit_prefill_wgmma_select(s == 0, dts[q], 64, 192, kvt[t % 2], 1 + t / 2, &k);
        FT_CHECK(k.v[PREFILL_WG_P_WARPGROUPS] == 3 && jit_prefill_key_q_tile(&k) == 192 &&
                 jit_prefill_threads(&k) == 512u && k.v[PREFILL_WG_P_PRODUCER] == 1 + t / 2);
        /* with 128-token tiles each consumer's P goes through shared memory ([64][128]),
         * and P V's 8 columns of ones take 2048 bytes */
        FT_CHECK(ops[s]->dyn_smem(&k) == (unsigned)((2 * 192 * 64 + 4 * kvt[t % 2] * 64) * 2 + (kvt[t % 2] == 128 ? 3 * 64 * 128 * 2 + 2048 : 0) +
                                                    3 * kvt[t % 2] * 8 + 128 + 1024),
                 "smem %u", ops[s]->dyn_smem(&k));
        FT_CHECK(jit_prefill_persistent_blocks(&k) == (s == 1 ? 1 : 0));
        FT_CHECK(times_registered(&k) == 1, "three consumers dt=%d kv %d ws %d", dts[q], kvt[t % 2], 1 + t / 2);
        jit_prefill_wgmma_select(s == 0, dts[q], 128, 192, kvt[t % 2], 1 + t / 2, &k);
        FT_CHECK(k.v[PREFILL_WG_P_WARPGROUPS] == 2);
        jit_prefill_wgmma_select(s == 0, dts[q], 64, 192, kvt[t % 2], 0, &k);
        FT_CHECK(k.v[PREFILL_WG_P_WARPGROUPS] == 2);
      }
    /* four stages where wg_four_ok allows, three where wg_three_ok does (head_dim 64's
     * three consumers with 128-token tiles and the ping-pong: P's tiles still fit beside
     * the third stage, not a fourth), two kept elsewhere: {head_dim, q tile, kv tile,
     * producer, stages asked, stages given} */
    for (int q = 0; q < 2; q++) {
      static const int f[13][6] = {{64, 192, 64, 2, 4, 4},   {64, 128, 128, 2, 4, 4}, {128, 128, 64, 2, 4, 4},
                                   {128, 128, 128, 2, 4, 2}, {64, 192, 128, 1, 4, 2}, {64, 192, 128, 2, 4, 2},
                                   {64, 192, 64, 1, 4, 2},   {128, 128, 64, 1, 4, 2}, {64, 192, 128, 2, 3, 3},
                                   {64, 192, 128, 1, 3, 2},  {64, 192, 64, 2, 3, 2},  {64, 128, 128, 2, 3, 2},
                                   {128, 128, 128, 2, 3, 2}};
      for (int i = 0; i < 13; i++) {
        jit_key k;
        jit_prefill_wgmma_select(s == 0, dts[q], f[i][0], f[i][1], f[i][2], f[i][3], &k);
        jit_prefill_wgmma_stages(&k, f[i][4]);
        FT_CHECK(k.v[PREFILL_WG_P_STAGES] == f[i][5], "case %d: stages %d", i, (int)k.v[PREFILL_WG_P_STAGES]);
        FT_CHECK(times_registered(&k) == 1, "case %d registered %d times", i, times_registered(&k));
        FT_CHECK(ops[s]->dyn_smem(&k) <= 227u * 1024, "case %d: smem %u", i, ops[s]->dyn_smem(&k));
        if (f[i][5] == 3)
          FT_CHECK(ops[s]->dyn_smem(&k) == (unsigned)((2 * 192 * 64 + 6 * 128 * 64) * 2 + 3 * 64 * 128 * 2 + 2048 +
                                                      3 * 128 * 8 + 64 + 32 * 3 + 1024),
                   "three stages: smem %u", ops[s]->dyn_smem(&k));
      }
    }
    FT_CHECK(ops[s]->config_count() == 116, "%s: %d configurations", ops[s]->name, ops[s]->config_count());
  }
  /* An mma.sync key is not a wgmma one. */
  jit_key m;
  jit_prefill_select(0, JIT_DT_BF16, 128, 128, 0, &m);
  FT_CHECK(!jit_prefill_is_wgmma(&m) && jit_prefill_key_q_tile(&m) == 128 && jit_prefill_threads(&m) == 128u);
}

/* The shape rule (rt_prefill_wgmma_key) under every tuning variable: its keys are
 * registered, and a batch re-plan of the same rows gets its plan's key back whatever the
 * new requests' KV lengths (a re-plan whose key changed is refused: 9c89279 read the
 * plan's choice from its stages, and under FI_PREFILL_WS=0 or 1, which keep two stages,
 * same-rows re-plans at 512-2048 rows were refused; only the GPU tests caught it). */
FT_TEST(wgmma_shape_rule_keys_registered_and_kept_by_replans) {
  static const char *const wgs[] = {NULL, "1x64", "2x64", "2x128", "3x64", "3x128"};
  static const char *const wss[] = {NULL, "0", "1", "2"};
  static const char *const sts[] = {NULL, "2", "3", "4"};
  static const int dims[] = {64, 128, 256};
  static const int64_t rows[] = {17, 511, 512, 1024, 2048, 2049, 4096};
  static const int64_t kvs[] = {1, 512, 513, 2048, 2049, 100000};
  int checked = 0, bad_reg = 0, bad_keep = 0;
  for (int a = 0; a < 6; a++)
    for (int b = 0; b < 4; b++)
      for (int c = 0; c < 4; c++) {
        if (wgs[a]) setenv("FI_PREFILL_WG", wgs[a], 1); else unsetenv("FI_PREFILL_WG");
        if (wss[b]) setenv("FI_PREFILL_WS", wss[b], 1); else unsetenv("FI_PREFILL_WS");
        if (sts[c]) setenv("FI_PREFILL_STAGES", sts[c], 1); else unsetenv("FI_PREFILL_STAGES");
        const rt_tuning t = env_tuning(); /* as fi_runtime_create reads it */
        for (int d = 0; d < 3; d++)
          for (int r = 0; r < 7; r++)
            for (int graph = 0; graph < 2; graph++)
              for (int cap = 0; cap < 2; cap++)
                for (int k1 = 0; k1 < 6; k1++) {
                  jit_key key1;
                  rt_prefill_wgmma_key(&t, 0, JIT_DT_BF16, dims[d], rows[r], rt_prefill_kvsel(NULL, graph, kvs[k1]), cap, &key1);
                  if (times_registered(&key1) != 1 && bad_reg++ < 5)
                    FT_CHECK(0, "WG=%s WS=%s STAGES=%s D=%d rows=%lld kv=%lld: key not registered", wgs[a] ? wgs[a] : "-",
                             wss[b] ? wss[b] : "-", sts[c] ? sts[c] : "-", dims[d], (long long)rows[r], (long long)kvs[k1]);
                  for (int k2 = 0; k2 < 6; k2++) {
                    jit_key key2;
                    rt_prefill_wgmma_key(&t, 0, JIT_DT_BF16, dims[d], rows[r], rt_prefill_kvsel(&key1, graph, kvs[k2]), cap, &key2);
                    checked++;
                    if ((key2.op != key1.op || memcmp(key2.v, key1.v, sizeof key1.v) != 0) && bad_keep++ < 5)
                      FT_CHECK(0, "WG=%s WS=%s STAGES=%s D=%d rows=%lld graph=%d: kv %lld then %lld changes the key",
                               wgs[a] ? wgs[a] : "-", wss[b] ? wss[b] : "-", sts[c] ? sts[c] : "-", dims[d],
                               (long long)rows[r], graph, (long long)kvs[k1], (long long)kvs[k2]);
                  }
                }
      }
  unsetenv("FI_PREFILL_WG");
  unsetenv("FI_PREFILL_WS");
  unsetenv("FI_PREFILL_STAGES");
  FT_CHECK(bad_reg == 0 && bad_keep == 0 && checked == 6 * 4 * 4 * 3 * 7 * 2 * 2 * 36, "%d unregistered, %d changed of %d",
           bad_reg, bad_keep, checked);
  /* and the defaults themselves */
  jit_key k;
  /* head_dim 64 above 2048 rows: three consumers, the ping-pong and three stages, whatever
   * the KV lengths, in batch (fresh or re-planned), CUDA-graph mode and single prefill */
  const int64_t d64kv[4] = {100, 2048, 2049, 100000};
  for (int i = 0; i < 5; i++) {
    if (i < 4)
      rt_prefill_wgmma_key(env_tuning_p(), 0, JIT_DT_BF16, 64, 4096, d64kv[i], 0, &k);
    else
      rt_prefill_wgmma_key(env_tuning_p(), 1, JIT_DT_BF16, 64, 8192, -1, 0, &k);
    FT_CHECK(k.v[PREFILL_WG_P_WARPGROUPS] == 3 && k.v[PREFILL_WG_P_KV_TILE] == 128 && k.v[PREFILL_WG_P_PRODUCER] == 2 &&
                 k.v[PREFILL_WG_P_STAGES] == 3,
             "case %d: wg %lld kv %lld producer %lld stages %lld", i, (long long)k.v[PREFILL_WG_P_WARPGROUPS],
             (long long)k.v[PREFILL_WG_P_KV_TILE], (long long)k.v[PREFILL_WG_P_PRODUCER], (long long)k.v[PREFILL_WG_P_STAGES]);
  }
  jit_key k2;
  rt_prefill_wgmma_key(env_tuning_p(), 0, JIT_DT_BF16, 64, 8192, rt_prefill_kvsel(NULL, 1, 100), 0, &k2); /* CUDA-graph mode */
  FT_CHECK(k2.v[PREFILL_WG_P_WARPGROUPS] == 3 && k2.v[PREFILL_WG_P_PRODUCER] == 2 && k2.v[PREFILL_WG_P_STAGES] == 3,
           "CUDA-graph mode: producer %lld stages %lld", (long long)k2.v[PREFILL_WG_P_PRODUCER],
           (long long)k2.v[PREFILL_WG_P_STAGES]);
  /* FI_PREFILL_WS=1 (no ping-pong) and FI_PREFILL_STAGES=2 go back to two stages */
  setenv("FI_PREFILL_WS", "1", 1);
  rt_prefill_wgmma_key(env_tuning_p(), 0, JIT_DT_BF16, 64, 8192, 100, 0, &k);
  FT_CHECK(k.v[PREFILL_WG_P_PRODUCER] == 1 && k.v[PREFILL_WG_P_STAGES] == 2);
  unsetenv("FI_PREFILL_WS");
  setenv("FI_PREFILL_STAGES", "2", 1);
  rt_prefill_wgmma_key(env_tuning_p(), 0, JIT_DT_BF16, 64, 8192, 100, 0, &k);
  FT_CHECK(k.v[PREFILL_WG_P_PRODUCER] == 2 && k.v[PREFILL_WG_P_STAGES] == 2);
  unsetenv("FI_PREFILL_STAGES");
  rt_prefill_wgmma_key(env_tuning_p(), 0, JIT_DT_BF16, 128, 1024, 512, 0, &k);
  FT_CHECK(k.v[PREFILL_WG_P_WARPGROUPS] == 2 && k.v[PREFILL_WG_P_KV_TILE] == 64 && k.v[PREFILL_WG_P_PRODUCER] == 2 &&
           k.v[PREFILL_WG_P_STAGES] == 4);
  rt_prefill_wgmma_key(env_tuning_p(), 0, JIT_DT_BF16, 128, 1024, 513, 1, &k);
  FT_CHECK(k.v[PREFILL_WG_P_WARPGROUPS] == 2 && k.v[PREFILL_WG_P_KV_TILE] == 128 && k.v[PREFILL_WG_P_PRODUCER] == 2 &&
           k.v[PREFILL_WG_P_STAGES] == 2 && k.v[PREFILL_WG_P_SOFT_CAP] == 1);
  rt_prefill_wgmma_key(env_tuning_p(), 0, JIT_DT_BF16, 128, 1024, rt_prefill_kvsel(NULL, 1, 100000), 0, &k); /* CUDA-graph mode */
  FT_CHECK(k.v[PREFILL_WG_P_KV_TILE] == 64 && k.v[PREFILL_WG_P_STAGES] == 4);
  rt_prefill_wgmma_key(env_tuning_p(), 1, JIT_DT_BF16, 128, 1024, 512, 0, &k); /* single prefill: no mid rule */
  FT_CHECK(k.v[PREFILL_WG_P_WARPGROUPS] == 1 && k.v[PREFILL_WG_P_KV_TILE] == 64);
}

/* ---- bad arguments ---- */

typedef struct tens {
  DLTensor t;
  int64_t shape[4], strides[4];
} tens;
static void mk(tens *x, void *data, uint8_t code, int bits, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
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
/* name: a copy of x with shape[dim] = v. */
#define WITH(name, x, dim, v) \
  tens name = (x);            \
  name.t.shape = name.shape;  \
  name.shape[dim] = (v)

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

FT_TEST(single_prefill_bad_arguments_named) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  tens q, k, v, o, l;
  mk(&q, ADDR(0), kDLBfloat, 16, 3, 100, 32, 128, 0);
  mk(&k, ADDR(1), kDLBfloat, 16, 3, 300, 8, 128, 0);
  mk(&v, ADDR(2), kDLBfloat, 16, 3, 300, 8, 128, 0);
  mk(&o, ADDR(3), kDLBfloat, 16, 3, 100, 32, 128, 0);
  mk(&l, ADDR(4), kDLFloat, 32, 2, 100, 32, 0, 0);
  const fi_kv_layout NHD = FI_KV_LAYOUT_NHD;
  fi_status st = fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, &l.t, NHD, NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid call refused: %s", fi_last_error());
  /* a group of 24 (not a decode group) is fine for prefill */
  WITH(q24, q, 1, 24 * 8);
  WITH(o24, o, 1, 24 * 8);
  WITH(l24, l, 1, 24 * 8);
  st = fi_single_prefill(rt, &q24.t, &k.t, &v.t, &o24.t, &l24.t, NHD, NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "group 24 refused: %s", fi_last_error());
  WITH(k6, k, 1, 6);
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k6.t, &v.t, &o.t, NULL, NHD, NULL, NULL), "num_kv_heads");
  WITH(q96, q, 2, 96);
  EXPECT_BAD(fi_single_prefill(rt, &q96.t, &k.t, &v.t, &o.t, NULL, NHD, NULL, NULL), "head_dim");
  tens q32 = q;
  q32.t.dtype = (DLDataType){kDLFloat, 32, 1};
  EXPECT_BAD(fi_single_prefill(rt, &q32.t, &k.t, &v.t, &o.t, NULL, NHD, NULL, NULL), "q has dtype");
  tens k8 = k, v8 = v;
  k8.t.dtype = v8.t.dtype = (DLDataType){10, 8, 1};
  {  /* an fp8 cache (e4m3, with scales) is taken; with RoPE, or v of another dtype, refused */
    fi_prefill_params p8;
    fi_prefill_params_init(&p8);
    p8.attn.k_scale = 0.5;
    p8.attn.v_scale = 2.0;
    st = fi_single_prefill(rt, &q.t, &k8.t, &v8.t, &o.t, NULL, NHD, &p8, NULL);
    FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "an fp8 cache refused: %s", fi_last_error());
    p8.attn.pos_encoding = FI_POS_ROPE_LLAMA;
    EXPECT_BAD(fi_single_prefill(rt, &q.t, &k8.t, &v8.t, &o.t, NULL, NHD, &p8, NULL), "RoPE with an fp8 cache");
    EXPECT_BAD(fi_single_prefill(rt, &q.t, &k8.t, &v.t, &o.t, NULL, NHD, NULL, NULL), "v has dtype");
    tens k32 = k;
    k32.t.dtype = (DLDataType){kDLFloat, 32, 1};
    WITH(v32, v, 0, 100);
    v32.t.dtype = k32.t.dtype;
    EXPECT_BAD(fi_single_prefill(rt, &q.t, &k32.t, &v32.t, &o.t, NULL, NHD, NULL, NULL), "or fp8 (e4m3, e5m2)");
  }
  tens kf = k;
  kf.t.dtype.code = kDLFloat;
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &kf.t, &v.t, &o.t, NULL, NHD, NULL, NULL), "v has dtype");
  WITH(os, o, 0, 99);
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &os.t, NULL, NHD, NULL, NULL), "out has shape");
  WITH(ls, l, 1, 8);
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, &ls.t, NHD, NULL, NULL), "lse has shape");
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, NULL, (fi_kv_layout)3, NULL, NULL), "layout");
  /* HND reads [H_kv, L, D]: the same k is 300 heads of 8 tokens */
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, NULL, FI_KV_LAYOUT_HND, NULL, NULL), "num_kv_heads");
  /* causal with L_q > L_kv */
  WITH(kshort, k, 0, 99);
  WITH(vshort, v, 0, 99);
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &kshort.t, &vshort.t, &o.t, NULL, NHD, NULL, NULL), "L_q <= L_kv");
  fi_prefill_params p;
  fi_prefill_params_init(&p);
  FT_CHECK(p.causal == 1 && p.attn.window_left == -1);
  p.causal = 0;
  st = fi_single_prefill(rt, &q.t, &kshort.t, &vshort.t, &o.t, NULL, NHD, &p, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "non-causal L_q > L_kv refused: %s", fi_last_error());
  p.causal = 2;
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, NULL, NHD, &p, NULL), "causal");
  fi_prefill_params_init(&p);
  p.attn.window_left = -2;
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, NULL, NHD, &p, NULL), "window_left");
  fi_prefill_params_init(&p);
  p.attn.logits_soft_cap = -1;
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, NULL, NHD, &p, NULL), "logits_soft_cap");
  fi_prefill_params_init(&p);
  p.attn.sm_scale = -1;
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, NULL, NHD, &p, NULL), "sm_scale");
  fi_prefill_params_init(&p);
  p.attn.pos_encoding = (fi_pos_encoding)7;
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, NULL, NHD, &p, NULL), "pos_encoding");
  tens ks = k;
  ks.t.strides = ks.strides;
  ks.strides[0] = 8 * 128 + 4, ks.strides[1] = 128, ks.strides[2] = 1;
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &ks.t, &v.t, &o.t, NULL, NHD, NULL, NULL), "stride");
  tens vs = v;
  vs.t.strides = vs.strides;
  vs.strides[0] = 16 * 128, vs.strides[1] = 128, vs.strides[2] = 1;
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &vs.t, &o.t, NULL, NHD, NULL, NULL), "equal strides");
  tens oq = o;
  oq.t.data = q.t.data;
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &oq.t, NULL, NHD, NULL, NULL), "overlaps");
  EXPECT_BAD(fi_single_prefill(NULL, &q.t, &k.t, &v.t, &o.t, NULL, NHD, NULL, NULL), "rt");
  fi_runtime_destroy(rt);
}

/* A paged batch of B requests over pages of 16: bf16, 32/8 heads, head_dim 128. */
static fi_batch_prefill_info paged_info(int B, int32_t *qo, int32_t *kvp, int32_t *last) {
  fi_batch_prefill_info info;
  memset(&info, 0, sizeof info);
  info.batch = B;
  info.qo_indptr = qo;
  info.kv_indptr = kvp;
  info.kv_last_page_len = last;
  info.num_qo_heads = 32;
  info.num_kv_heads = 8;
  info.head_dim = 128;
  info.page_size = 16;
  info.q_dtype = info.kv_dtype = (DLDataType){kDLBfloat, 16, 1};
  return info;
}

FT_TEST(batch_prefill_plan_and_run_bad_arguments_named) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  int32_t qo[3] = {0, 100, 101}, kvp[3] = {0, 10, 13}, last[2] = {16, 5};
  fi_batch_prefill_info info = paged_info(2, qo, kvp, last);
  tens ws;
  mk(&ws, ADDR(9), kDLUInt, 8, 1, 1 << 26, 0, 0, 0);
  fi_prefill_plan *plan = NULL;
  fi_batch_prefill_info bad = info;
  bad.num_kv_heads = 5;
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "num_kv_heads");
  bad = info;
  bad.head_dim = 80;
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "head_dim");
  bad = info;
  bad.kv_dtype = (DLDataType){kDLFloat, 16, 1};
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "KV has dtype");
  int32_t qo_bad[3] = {0, 100, 99};
  bad = info;
  bad.qo_indptr = qo_bad;
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "monotone");
  int32_t last_bad[2] = {16, 17};
  bad = info;
  bad.kv_last_page_len = last_bad;
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "info->kv_last_page_len[1]");
  /* the paged checks name prefill's own fields (kv_indptr), not decode's (indptr) */
  int32_t kvp_bad[3] = {0, 10, 3};
  bad = info;
  bad.kv_indptr = kvp_bad;
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan),
             "info->kv_indptr is not monotone: kv_indptr[1]");
  bad = info;
  bad.page_size = 0;
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "page_size");
  /* request 1: 1 query token over 2 * 16 + 5 = 37 KV tokens; request 0: 100 over 160 */
  int32_t qo_long[3] = {0, 161, 162};
  bad = info;
  bad.qo_indptr = qo_long;
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "L_q <= L_kv");
  /* ragged: kv_indptr in tokens; request 0 has 10 KV tokens for 100 query tokens */
  EXPECT_BAD(fi_batch_prefill_ragged_plan(rt, &info, NULL, &ws.t, NULL, &plan), "L_q <= L_kv");
  bad = info;
  bad.max_batch = 1;
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "max_batch");
  bad = info;
  bad.max_batch = 4;
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "max_qo_tokens");
  bad.max_qo_tokens = 50;
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &bad, NULL, &ws.t, NULL, &plan), "max_qo_tokens");
  tens wsm;
  mk(&wsm, (char *)ADDR(9) + 16, kDLUInt, 8, 1, 1 << 26, 0, 0, 0);
  EXPECT_BAD(fi_batch_prefill_paged_plan(rt, &info, NULL, &wsm.t, NULL, &plan), "workspace");
  FT_CHECK(plan == NULL);

  /* run, on a plan made without a device */
  fi_prefill_params prm;
  fi_prefill_params_init(&prm);
  FT_REQUIRE(rt_prefill_plan_offline(&info, &prm, 1, ADDR(9), kDLCUDA, 132, &plan) == 0);
  int64_t n;
  const int32_t *items = rt_prefill_plan_items(plan, &n);
  FT_CHECK(n >= 2 && items[0] == 0 && items[IW * (n - 1)] == 1 && items[1] > 0, "%lld items", (long long)n);
  tens q, kc, vc, ix, o, l;
  mk(&q, ADDR(0), kDLBfloat, 16, 3, 101, 32, 128, 0);
  mk(&kc, ADDR(1), kDLBfloat, 16, 4, 20, 16, 8, 128);
  mk(&vc, ADDR(2), kDLBfloat, 16, 4, 20, 16, 8, 128);
  mk(&ix, ADDR(4), kDLInt, 32, 1, 13, 0, 0, 0);
  mk(&o, ADDR(6), kDLBfloat, 16, 3, 101, 32, 128, 0);
  mk(&l, ADDR(7), kDLFloat, 32, 2, 101, 32, 0, 0);
  const fi_kv_layout NHD = FI_KV_LAYOUT_NHD;
  fi_status st = fi_batch_prefill_paged_run(rt, plan, &q.t, &kc.t, &vc.t, &ix.t, NHD, &o.t, &l.t, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid run refused: %s", fi_last_error());
  WITH(qh, q, 1, 16);
  EXPECT_BAD(fi_batch_prefill_paged_run(rt, plan, &qh.t, &kc.t, &vc.t, &ix.t, NHD, &o.t, NULL, NULL), "q has shape");
  WITH(qr, q, 0, 100);
  WITH(orr, o, 0, 100);
  EXPECT_BAD(fi_batch_prefill_paged_run(rt, plan, &qr.t, &kc.t, &vc.t, &ix.t, NHD, &orr.t, NULL, NULL), "qo_indptr[B]");
  EXPECT_BAD(fi_batch_prefill_paged_run(rt, plan, &q.t, &kc.t, &vc.t, &ix.t, FI_KV_LAYOUT_HND, &o.t, NULL, NULL), "paged_k_cache has shape");
  WITH(ixs, ix, 0, 12);
  EXPECT_BAD(fi_batch_prefill_paged_run(rt, plan, &q.t, &kc.t, &vc.t, &ixs.t, NHD, &o.t, NULL, NULL), "kv_indices has 12 entries");
  tens kf = kc;
  kf.t.dtype.code = kDLFloat;
  EXPECT_BAD(fi_batch_prefill_paged_run(rt, plan, &q.t, &kf.t, &vc.t, &ix.t, NHD, &o.t, NULL, NULL), "paged_k_cache has dtype");
  WITH(lb, l, 1, 8);
  EXPECT_BAD(fi_batch_prefill_paged_run(rt, plan, &q.t, &kc.t, &vc.t, &ix.t, NHD, &o.t, &lb.t, NULL), "lse has shape");
  EXPECT_BAD(fi_batch_prefill_ragged_run(rt, plan, &q.t, &q.t, &q.t, NHD, &o.t, NULL, NULL), "paged plan");
  fi_batch_prefill_plan_destroy(plan);
  plan = NULL;

  /* a ragged plan and its run */
  int32_t kvr[3] = {0, 160, 197};
  fi_batch_prefill_info ri = info;
  ri.kv_indptr = kvr;
  ri.kv_last_page_len = NULL;
  FT_REQUIRE(rt_prefill_plan_offline(&ri, &prm, 0, ADDR(9), kDLCUDA, 132, &plan) == 0);
  tens k, v;
  mk(&k, ADDR(1), kDLBfloat, 16, 3, 197, 8, 128, 0);
  mk(&v, ADDR(2), kDLBfloat, 16, 3, 197, 8, 128, 0);
  st = fi_batch_prefill_ragged_run(rt, plan, &q.t, &k.t, &v.t, NHD, &o.t, &l.t, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid ragged run refused: %s", fi_last_error());
  WITH(ksh, k, 0, 196);
  WITH(vsh, v, 0, 196);
  EXPECT_BAD(fi_batch_prefill_ragged_run(rt, plan, &q.t, &ksh.t, &vsh.t, NHD, &o.t, NULL, NULL), "kv_indptr[B]");
  WITH(vsh2, v, 0, 198);
  EXPECT_BAD(fi_batch_prefill_ragged_run(rt, plan, &q.t, &k.t, &vsh2.t, NHD, &o.t, NULL, NULL), "v has shape");
  EXPECT_BAD(fi_batch_prefill_paged_run(rt, plan, &q.t, &kc.t, &vc.t, &ix.t, NHD, &o.t, NULL, NULL), "ragged plan");
  tens oq = o;
  oq.t.data = k.t.data;
  EXPECT_BAD(fi_batch_prefill_ragged_run(rt, plan, &q.t, &k.t, &v.t, NHD, &oq.t, NULL, NULL), "overlaps");
  fi_batch_prefill_plan_destroy(plan);
  fi_runtime_destroy(rt);
}

/* Stored tactics (issue 43): every registered batch prefill kernel (wgmma and mma.sync, RoPE
 * off) is a tactic whose text parses back to the same key; text that is no tactic, or a
 * tactic no registered kernel of the call is, is refused; the planner's choice takes a
 * tactic where it can run it, and the rule's otherwise. The tuner measuring them:
 * tests/gpu/gpu_autotune.c. */
FT_TEST(prefill_tactics_name_registered_kernels_and_the_planner_takes_them) {
  const char *ops[2] = {"batch_prefill_sm90", "batch_prefill"};
  int seen = 0;
  for (int o = 0; o < 2; o++) {
    const jit_op *op = jit_registry_find(ops[o]);
    FT_REQUIRE(op, "%s", ops[o]);
    for (int i = 0, n = op->config_count(); i < n; i++) {
      jit_key k, back;
      op->config(i, &k);
      const int wg = o == 0;
      if (!wg && k.v[PREFILL_P_ROPE]) continue;
      const int dt = (int)k.v[wg ? PREFILL_WG_P_DTYPE : PREFILL_P_DTYPE], D = (int)k.v[wg ? PREFILL_WG_P_HEAD_DIM : PREFILL_P_HEAD_DIM];
      const int cap = wg ? (int)k.v[PREFILL_WG_P_SOFT_CAP] : 0;
      rt_prefill_tactic t, parsed;
      char text[96];
      rt_prefill_tactic_of_key(&k, &t);
      FT_REQUIRE(rt_prefill_tactic_format(&t, text, sizeof text) == 0);
      FT_CHECK(rt_prefill_tactic_parse(text, &parsed) == 0 && memcmp(&parsed, &t, sizeof t) == 0, "%s", text);
      FT_CHECK(rt_prefill_tactic_key(&parsed, dt, D, 0, cap, &back) == 0 && back.op == k.op &&
                   memcmp(back.v, k.v, sizeof k.v) == 0,
               "%s #%d: %s", ops[o], i, text);
      /* a wgmma tactic never with RoPE */
      if (wg) FT_CHECK(rt_prefill_tactic_key(&parsed, dt, D, 1, cap, &back) == -1, "%s with RoPE", text);
      seen++;
    }
  }
  FT_CHECK(seen > 100, "%d kernels", seen);
  static const char *const bad[] = {"kernel=mma;q_tile=32", "kernel=mma;q_tile=64;x=1", "kernel=mma",
                                    "kernel=wgmma;q_tile=128;kv_tile=128;producer=2;stages=5",
                                    "kernel=wgmma;q_tile=128;kv_tile=96;producer=2;stages=2",
                                    "kernel=wgmma;q_tile=256;kv_tile=128;producer=2;stages=2",
                                    "kernel=wgmma;q_tile=128;kv_tile=128;producer=3;stages=2",
                                    "warps=4;pipeline=1;split=1", ""};
  rt_prefill_tactic t;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    FT_CHECK(rt_prefill_tactic_parse(bad[i], &t) == -1, "'%s'", bad[i]);
  FT_CHECK(rt_prefill_tactic_parse(NULL, &t) == -1);
  /* tactics that parse but name no kernel of the call: head_dim 256 has one wgmma shape;
   * q tile 128 on mma.sync only to head_dim 128; four stages only where registered */
  jit_key k;
  const rt_prefill_tactic wg256 = {1, 64, 64, 0, 2}, mma256 = {0, 128, 0, 0, 0}, four = {1, 64, 64, 1, 4};
  FT_CHECK(rt_prefill_tactic_key(&wg256, JIT_DT_BF16, 256, 0, 0, &k) == -1);
  FT_CHECK(rt_prefill_tactic_key(&mma256, JIT_DT_BF16, 256, 0, 0, &k) == -1);
  FT_CHECK(rt_prefill_tactic_key(&four, JIT_DT_BF16, 128, 0, 0, &k) == -1);
  /* The planner's choice without a device (rt NULL: mma.sync): an mma.sync tactic is
   * taken, its q tile and not the rule's; a wgmma one cannot run there and the rule
   * chooses; single prefill never takes one. */
  jit_key rule, tuned, wgk, single;
  const int qr = rt_prefill_pick_kernel(NULL, kDLCUDA, 0, 0, JIT_DT_BF16, JIT_DT_BF16, 128, 4096, 4096, 0, 0, 0, NULL, &rule);
  const rt_prefill_tactic m16 = {0, 16, 0, 0, 0}, w = {1, 128, 128, 2, 2};
  FT_CHECK(qr != 16, "the rule's q tile at 4096 rows is %d", qr);
  FT_CHECK_EQ_INT(rt_prefill_pick_kernel(NULL, kDLCUDA, 0, 0, JIT_DT_BF16, JIT_DT_BF16, 128, 4096, 4096, 0, 0, 0, &m16, &tuned), 16);
  FT_CHECK(tuned.op == rule.op && tuned.v[PREFILL_P_Q_TILE] == 16);
  FT_CHECK_EQ_INT(rt_prefill_pick_kernel(NULL, kDLCUDA, 0, 0, JIT_DT_BF16, JIT_DT_BF16, 128, 4096, 4096, 0, 0, 0, &w, &wgk), qr);
  FT_CHECK(memcmp(wgk.v, rule.v, sizeof rule.v) == 0 && wgk.op == rule.op, "a wgmma tactic without wgmma: the rule");
  rt_prefill_pick_kernel(NULL, kDLCUDA, 0, 1, JIT_DT_BF16, JIT_DT_BF16, 128, 4096, 4096, 0, 0, 0, &m16, &single);
  FT_CHECK(single.v[PREFILL_P_Q_TILE] != 16, "single prefill takes no stored tactic");
  /* the key's text */
  int64_t f[RT_PREFILL_TACTIC_FIELDS];
  char shape[128];
  rt_prefill_tactic_fields(JIT_DT_BF16, 32, 8, 128, 1, 0, f);
  rt_prefill_tactic_shape(f, shape, sizeof shape);
  FT_CHECK_EQ_STR(shape, "q=bf16;heads=32/8;head_dim=128;causal=1;cap=0");
}

/* A plan made from a tactic partitions the batch with the tactic's q tile, not the rule's
 * (offline: the mma.sync kernel, the tactic forced as a stored one would be): 160 packed rows
 * a request are 10 items at q tile 16 and 3 at q tile 64; a re-plan without it chooses by the rule again, which
 * changes the kernel, and is refused as any re-plan that would change it. */
FT_TEST(prefill_plan_partitions_with_its_tactic) {
  fi_prefill_params prm;
  fi_prefill_params_init(&prm);
  prm.causal = 0;
  int32_t qo[3] = {0, 40, 80}; /* 160 packed rows a request: the rule's q tile 128 */
  fi_batch_prefill_info info;
  memset(&info, 0, sizeof info);
  info.batch = 2, info.qo_indptr = qo, info.kv_indptr = qo;
  info.num_qo_heads = 32, info.num_kv_heads = 8, info.head_dim = 128;
  info.q_dtype = info.kv_dtype = (DLDataType){kDLBfloat, 16, 1};
  const rt_prefill_tactic m16 = {0, 16, 0, 0, 0}, m64 = {0, 64, 0, 0, 0};
  fi_prefill_plan *a = NULL, *b = NULL;
  FT_REQUIRE(rt_prefill_plan_offline_tactic(&info, &prm, 0, ADDR(9), kDLCUDA, 132, &a, &m16) == 0, "%s",
             fi_last_error());
  FT_REQUIRE(rt_prefill_plan_offline_tactic(&info, &prm, 0, ADDR(9), kDLCUDA, 132, &b, &m64) == 0, "%s",
             fi_last_error());
  int64_t na, nb;
  rt_prefill_plan_items(a, &na);
  rt_prefill_plan_items(b, &nb);
  FT_CHECK(na == 2 * 10 && nb == 2 * 3, "%lld items at q tile 16, %lld at 64", (long long)na, (long long)nb);
  rt_prefill_tactic got;
  rt_prefill_tactic_of_key(rt_prefill_plan_key(a), &got);
  FT_CHECK_EQ_INT(got.q_tile, 16);
  FT_CHECK(rt_prefill_plan_offline(&info, &prm, 0, ADDR(9), kDLCUDA, 132, &a) == -1 &&
               strstr(fi_last_error(), "re-plan"),
           "%s", fi_last_error());
  fi_batch_prefill_plan_destroy(a);
  fi_batch_prefill_plan_destroy(b);
}

/* A batch plan with a custom mask (fi_attention_extras at plan time): every item's word 11
 * is its request's segment, the requests' ceil(L_q * L_kv / 8) bytes one after the other;
 * a mask too short for the batch is refused naming the bytes; sinks given to the plan and a
 * mask given to a run are refused by name. */
FT_TEST(batch_prefill_plan_custom_mask_segments) {
  int32_t qo[4] = {0, 100, 101, 131}, kvp[4] = {0, 10, 13, 16}, last[3] = {16, 5, 9};
  fi_batch_prefill_info info = paged_info(3, qo, kvp, last);
  fi_prefill_params prm;
  fi_prefill_params_init(&prm);
  /* L_kv: 160, 37, 41; L_q: 100, 1, 30 -> 2000, 5 (37 bits), 154 (1230 bits) bytes */
  const int64_t seg[3] = {0, 2000, 2005}, total = 2005 + 154;
  fi_prefill_plan *plan = NULL;
  FT_REQUIRE(rt_prefill_plan_offline_mask(&info, &prm, 1, ADDR(9), kDLCUDA, 132, total, &plan) == 0,
             "%s", fi_last_error());
  int64_t n;
  const int32_t *items = rt_prefill_plan_items(plan, &n);
  int seen[3] = {0, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    const int b = items[IW * i];
    FT_REQUIRE(b >= 0 && b < 3);
    FT_CHECK_EQ_INT(items[IW * i + 11], seg[b]);
    seen[b] = 1;
  }
  FT_CHECK(seen[0] && seen[1] && seen[2], "every request has an item");
  FT_CHECK(!jit_prefill_is_wgmma(rt_prefill_plan_key(plan)), "a masked plan runs mma.sync");
  fi_batch_prefill_plan_destroy(plan);
  plan = NULL;
  FT_CHECK(rt_prefill_plan_offline_mask(&info, &prm, 1, ADDR(9), kDLCUDA, 132, total - 1, &plan) == -1);
  FT_CHECK_STR_HAS(fi_last_error(), "custom_mask has 2158 bytes; the batch's segments need 2159");
  /* through the API (no device here: a valid call gets past the checks) */
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  tens ws, m8, sk;
  mk(&ws, ADDR(9), kDLUInt, 8, 1, 1 << 26, 0, 0, 0);
  mk(&m8, ADDR(5), kDLUInt, 8, 1, total - 1, 0, 0, 0);
  mk(&sk, ADDR(6), kDLFloat, 32, 1, 32, 0, 0, 0);
  fi_attention_extras x;
  fi_attention_extras_init(&x);
  x.custom_mask = &m8.t;
  EXPECT_BAD(fi_batch_prefill_paged_plan_ex(rt, &info, NULL, &x, &ws.t, NULL, &plan), "need 2159");
  m8.shape[0] = total;
  fi_status st = fi_batch_prefill_paged_plan_ex(rt, &info, NULL, &x, &ws.t, NULL, &plan);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid masked plan refused: %s", fi_last_error());
  m8.t.dtype.code = kDLInt;
  EXPECT_BAD(fi_batch_prefill_paged_plan_ex(rt, &info, NULL, &x, &ws.t, NULL, &plan), "custom_mask has dtype");
  fi_attention_extras xs;
  fi_attention_extras_init(&xs);
  xs.sinks = &sk.t;
  EXPECT_BAD(fi_batch_prefill_paged_plan_ex(rt, &info, NULL, &xs, &ws.t, NULL, &plan), "sinks go to the run");
  /* a run given a mask: refused (batches take theirs at plan time) */
  m8.t.dtype.code = kDLUInt;
  FT_REQUIRE(rt_prefill_plan_offline(&info, &prm, 1, ADDR(9), kDLCUDA, 132, &plan) == 0);
  tens q, kc, vc, ix, o;
  mk(&q, ADDR(0), kDLBfloat, 16, 3, 131, 32, 128, 0);
  mk(&kc, ADDR(1), kDLBfloat, 16, 4, 20, 16, 8, 128);
  mk(&vc, ADDR(2), kDLBfloat, 16, 4, 20, 16, 8, 128);
  mk(&ix, ADDR(4), kDLInt, 32, 1, 16, 0, 0, 0);
  mk(&o, ADDR(7), kDLBfloat, 16, 3, 131, 32, 128, 0);
  EXPECT_BAD(fi_batch_prefill_paged_run_ex(rt, plan, &q.t, &kc.t, &vc.t, &ix.t, FI_KV_LAYOUT_NHD, &o.t, NULL, &x,
                                           NULL),
             "takes its mask at plan time");
  fi_batch_prefill_plan_destroy(plan);
  fi_runtime_destroy(rt);
}

/* V's head_dim apart from q's and k's (192 / 128, DeepSeek's MHA prefill): single prefill
 * takes it from v's shape, the ragged plan from extras->head_dim_vo; the dvo kernel keys
 * are registered and their merge is at V's head_dim; every other pair, a paged plan, RoPE,
 * an fp8 cache and a custom mask are refused by name. */
FT_TEST(prefill_head_dim_vo_192_128) {
  fi_runtime *rt = rt_make();
  FT_REQUIRE(rt);
  const fi_kv_layout NHD = FI_KV_LAYOUT_NHD;
  tens q, k, v, o;
  mk(&q, ADDR(0), kDLBfloat, 16, 3, 100, 16, 192, 0);
  mk(&k, ADDR(1), kDLBfloat, 16, 3, 300, 16, 192, 0);
  mk(&v, ADDR(2), kDLBfloat, 16, 3, 300, 16, 128, 0);
  mk(&o, ADDR(3), kDLBfloat, 16, 3, 100, 16, 128, 0);
  fi_status st = fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, NULL, NHD, NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid 192/128 single prefill refused: %s", fi_last_error());
  /* V strided out of a wider buffer (DeepSeek's kv_b_proj output: [T, H, 256], V its last 128) */
  tens vw = v;
  vw.t.shape = vw.shape;
  vw.t.strides = vw.strides;
  vw.strides[0] = 16 * 256, vw.strides[1] = 256, vw.strides[2] = 1;
  st = fi_single_prefill(rt, &q.t, &k.t, &vw.t, &o.t, NULL, NHD, NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "strided V refused: %s", fi_last_error());
  WITH(o192, o, 2, 192);
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &o192.t, NULL, NHD, NULL, NULL), "head_dim_vo");
  WITH(v64, v, 2, 64);
  WITH(o64, o, 2, 64);
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v64.t, &o64.t, NULL, NHD, NULL, NULL), "only as 192 with 128");
  tens q128, k128, v64b, o64b;
  mk(&q128, ADDR(0), kDLBfloat, 16, 3, 100, 16, 128, 0);
  mk(&k128, ADDR(1), kDLBfloat, 16, 3, 300, 16, 128, 0);
  mk(&v64b, ADDR(2), kDLBfloat, 16, 3, 300, 16, 64, 0);
  mk(&o64b, ADDR(3), kDLBfloat, 16, 3, 100, 16, 64, 0);
  EXPECT_BAD(fi_single_prefill(rt, &q128.t, &k128.t, &v64b.t, &o64b.t, NULL, NHD, NULL, NULL), "only as 192 with 128");
  fi_prefill_params rp;
  fi_prefill_params_init(&rp);
  rp.attn.pos_encoding = FI_POS_ROPE_LLAMA;
  EXPECT_BAD(fi_single_prefill(rt, &q.t, &k.t, &v.t, &o.t, NULL, NHD, &rp, NULL), "RoPE");

  /* the ragged plan */
  int32_t qo[4] = {0, 100, 101, 140}, kv[4] = {0, 300, 301, 1000};
  fi_batch_prefill_info info;
  memset(&info, 0, sizeof info);
  info.batch = 3, info.qo_indptr = qo, info.kv_indptr = kv;
  info.num_qo_heads = 16, info.num_kv_heads = 16, info.head_dim = 192;
  info.q_dtype = info.kv_dtype = (DLDataType){kDLBfloat, 16, 1};
  fi_prefill_params prm;
  fi_prefill_params_init(&prm);
  fi_prefill_plan *plan = NULL;
  FT_REQUIRE(rt_prefill_plan_offline_dvo(&info, &prm, ADDR(9), kDLCUDA, 132, 128, &plan) == 0, "%s", fi_last_error());
  const jit_key *key = rt_prefill_plan_key(plan);
  FT_CHECK(jit_prefill_is_dvo(key), "op %s", key->op->name);
  FT_CHECK_EQ_INT(key->v[PREFILL_P_HEAD_DIM], 192);
  FT_CHECK_EQ_INT(key->v[PREFILL_P_HEAD_DIM_VO], 128);
  FT_CHECK_EQ_INT(times_registered(key), 1);
  fi_batch_prefill_plan_destroy(plan);
  plan = NULL;
  tens ws;
  mk(&ws, ADDR(9), kDLUInt, 8, 1, 1 << 26, 0, 0, 0);
  fi_attention_extras x;
  fi_attention_extras_init(&x);
  x.head_dim_vo = 128;
  st = fi_batch_prefill_ragged_plan_ex(rt, &info, NULL, &x, &ws.t, NULL, &plan);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid 192/128 ragged plan refused: %s", fi_last_error());
  EXPECT_BAD(fi_batch_prefill_ragged_plan(rt, &info, NULL, &ws.t, NULL, &plan), "head_dim is 192");
  int32_t last[3] = {16, 1, 12};
  fi_batch_prefill_info pinfo = info;
  int32_t kvp[4] = {0, 19, 20, 64};
  pinfo.kv_indptr = kvp, pinfo.kv_last_page_len = last, pinfo.page_size = 16;
  EXPECT_BAD(fi_batch_prefill_paged_plan_ex(rt, &pinfo, NULL, &x, &ws.t, NULL, &plan), "ragged plan only");
  x.head_dim_vo = 96;
  EXPECT_BAD(fi_batch_prefill_ragged_plan_ex(rt, &info, NULL, &x, &ws.t, NULL, &plan), "extras->head_dim_vo 96");
  x.head_dim_vo = -1;
  EXPECT_BAD(fi_batch_prefill_ragged_plan_ex(rt, &info, NULL, &x, &ws.t, NULL, &plan), "0 or more");
  x.head_dim_vo = 128;
  EXPECT_BAD(fi_batch_prefill_ragged_plan_ex(rt, &info, &rp, &x, &ws.t, NULL, &plan), "RoPE");
  fi_batch_prefill_info f8 = info;
  f8.kv_dtype = (DLDataType){10, 8, 1}; /* DLPack 1.1 kDLFloat8_e4m3fn */
  EXPECT_BAD(fi_batch_prefill_ragged_plan_ex(rt, &f8, NULL, &x, &ws.t, NULL, &plan), "fp8 cache");
  /* an extras struct of the third version's size (no head_dim_vo): read as 0 */
  fi_attention_extras_init_sized(&x, offsetof(fi_attention_extras, head_dim_vo));
  x.head_dim_vo = 128; /* past the caller's struct: never read */
  EXPECT_BAD(fi_batch_prefill_ragged_plan_ex(rt, &info, NULL, &x, &ws.t, NULL, &plan), "head_dim is 192");
  /* the run: v and out at V's head_dim (checked before any device lookup) */
  FT_REQUIRE(rt_prefill_plan_offline_dvo(&info, &prm, ADDR(9), kDLCUDA, 132, 128, &plan) == 0, "%s", fi_last_error());
  tens rq, rk, rv, ro;
  mk(&rq, ADDR(0), kDLBfloat, 16, 3, 140, 16, 192, 0);
  mk(&rk, ADDR(1), kDLBfloat, 16, 3, 1000, 16, 192, 0);
  mk(&rv, ADDR(2), kDLBfloat, 16, 3, 1000, 16, 128, 0);
  mk(&ro, ADDR(3), kDLBfloat, 16, 3, 140, 16, 128, 0);
  WITH(rv192, rv, 2, 192);
  EXPECT_BAD(fi_batch_prefill_ragged_run(rt, plan, &rq.t, &rk.t, &rv192.t, NHD, &ro.t, NULL, NULL), "v has shape");
  WITH(ro192, ro, 2, 192);
  EXPECT_BAD(fi_batch_prefill_ragged_run(rt, plan, &rq.t, &rk.t, &rv.t, NHD, &ro192.t, NULL, NULL), "out has shape");
  st = fi_batch_prefill_ragged_run(rt, plan, &rq.t, &rk.t, &rv.t, NHD, &ro.t, NULL, NULL);
  FT_CHECK(st != FI_ERR_INVALID_ARGUMENT, "valid 192/128 ragged run refused: %s", fi_last_error());
  fi_batch_prefill_plan_destroy(plan);
  fi_runtime_destroy(rt);
}
