/* test_mla_args.c: multi-head latent attention on a machine with no GPU: the planner (every
 * packed row, query token x head, in one tile; each tile's KV range its rows' causal union,
 * covered by its chunks once; the q tile and the split it chooses), its kernel keys against
 * the registry, and bad plan and run arguments refused by name. The kernel itself:
 * test_mla_emu.cc (host emulator) and tests/gpu/gpu_mla.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_runtime.h"
#include "ft.h"
#include "test_args_util.h"
#include "mla_params.h"
#include "ops_mla.h"
#include "rt_mla.h"

#define IW FI_PREFILL_ITEM_WORDS
#define ADDR(i) ((void *)(uintptr_t)(0x10000000u * (unsigned)((i) + 1)))

static fi_batch_mla_info info_of(int B, const int32_t *qo, const int32_t *kvp, const int32_t *kvl, int H, int ps) {
  fi_batch_mla_info in;
  memset(&in, 0, sizeof in);
  in.batch = B;
  in.qo_indptr = qo;
  in.kv_indptr = kvp;
  in.kv_len = kvl;
  in.num_heads = H;
  in.head_dim_ckv = 512;
  in.head_dim_kpe = 64;
  in.page_size = ps;
  in.causal = 1;
  in.sm_scale = 0.0722f;
  in.q_dtype = (DLDataType){kDLBfloat, 16, 1};
  in.kv_dtype = in.q_dtype;
  return in;
}

/* Checks a plan's items: every row of every request in exactly one tile (tiles from the last
 * to the first), each tile's chunks covering its rows' KV union exactly once. */
static int check_items(const fi_batch_mla_info *in, const fi_mla_plan *pl) {
  int64_t n;
  const jit_key *key;
  const int32_t *tab = rt_mla_plan_table(pl, &n, &key);
  const int32_t *items = tab + FI_PREFILL_HDR_WORDS;
  const int qt = (int)key->v[MLA_P_Q_TILE], H = in->num_heads;
  int bad = 0;
  int64_t i = 0;
  for (int b = 0; b < in->batch; b++) {
    const int64_t lq = in->qo_indptr[b + 1] - in->qo_indptr[b], rows = lq * H, lkv = in->kv_len[b];
    for (int64_t r = rows > 0 ? (rows - 1) / qt * qt : -1; r >= 0; r -= qt) {
      const int64_t nr = r + qt <= rows ? qt : rows - r;
      const int64_t hi = in->causal ? ((r + nr - 1) / H + lkv - lq + 1) : lkv;
      int64_t at = 0;
      for (;;) {
        if (i >= n) return bad + 1;
        const int32_t *it = items + IW * i++;
        if (it[0] != b || it[1] != r || it[2] != nr || it[3] != at || it[4] <= it[3] - (hi == 0) || it[9] != lkv ||
            it[8] != in->kv_indptr[b]) {
          fprintf(stderr, "  request %d rows %lld: item (%d %d %d %d %d)\n", b, (long long)r, it[0], it[1], it[2],
                  it[3], it[4]);
          return bad + 1;
        }
        at = it[4];
        if ((it[5] & 0xffff) + 1 == (it[5] >> 16)) break;
      }
      bad += at != hi;
    }
  }
  return bad + (i != n);
}

FT_TEST(mla_planner_tiles_rows_and_splits_long_kv) {
  /* decode: 3 requests x 1 token x 16 heads -> the 16-row tile, no split on 132 SMs */
  int32_t qo[4] = {0, 1, 2, 3}, kvp[4] = {0, 3, 9, 10}, kvl[3] = {40, 90, 16};
  fi_batch_mla_info in = info_of(3, qo, kvp, kvl, 16, 16);
  static char ws[1];
  fi_mla_plan *pl = NULL;
  FT_REQUIRE(rt_mla_plan_offline(&in, ws, 132, &pl) == 0, "%s", fi_last_error());
  int64_t n;
  const jit_key *key;
  rt_mla_plan_table(pl, &n, &key);
  FT_CHECK(key->v[MLA_P_Q_TILE] == 16 && n == 3, "q tile %lld, %lld items", (long long)key->v[MLA_P_Q_TILE],
           (long long)n);
  FT_CHECK(check_items(&in, pl) == 0);
  FT_CHECK(op_registers(&jit_op_batch_mla_paged, key));
  fi_batch_mla_plan_destroy(pl);

  /* B = 1, L = 32768: split into chunks that fill the SMs (at most one block each) */
  int32_t qo1[2] = {0, 1}, kvp1[2] = {0, 512}, kvl1[1] = {32768};
  in = info_of(1, qo1, kvp1, kvl1, 16, 64);
  pl = NULL;
  FT_REQUIRE(rt_mla_plan_offline(&in, ws, 132, &pl) == 0, "%s", fi_last_error());
  rt_mla_plan_table(pl, &n, &key);
  FT_CHECK(n > 64 && n <= 132, "%lld items", (long long)n);
  FT_CHECK(check_items(&in, pl) == 0);
  fi_batch_mla_plan_destroy(pl);

  /* MTP: 2 query tokens x 128 heads -> 64-row tiles, the causal diagonal per token; an
   * empty request; page size 1; a request with a spare page */
  int32_t qo2[5] = {0, 2, 4, 4, 6}, kvp2[5] = {0, 100, 301, 301, 302}, kvl2[4] = {100, 200, 0, 1};
  in = info_of(4, qo2, kvp2, kvl2, 128, 1);
  kvl2[2] = 0;
  int32_t qo3[5] = {0, 2, 4, 4, 5};
  in.qo_indptr = qo3;
  pl = NULL;
  FT_REQUIRE(rt_mla_plan_offline(&in, ws, 132, &pl) == 0, "%s", fi_last_error());
  rt_mla_plan_table(pl, &n, &key);
  FT_CHECK(key->v[MLA_P_Q_TILE] == 64);
  FT_CHECK(check_items(&in, pl) == 0);
  FT_CHECK(op_registers(&jit_op_batch_mla_paged, key));
  jit_key mk;
  jit_mla_merge_select(JIT_DT_BF16, &mk);
  FT_CHECK(op_registers(&jit_op_mla_merge, &mk));
  /* the workspace layout holds the plan's partials */
  rt_mla_layout l;
  rt_mla_layout_for(4, 5, 132, 128, &l);
  FT_CHECK(l.capacity >= n && l.slots == 132 && l.partial_lse_off >= l.partial_o_off + 132LL * FI_MLA_SLOT_ROWS * 512 * 4);
  fi_batch_mla_plan_destroy(pl);
}

FT_TEST(mla_replans_keep_what_a_plan_fixes) {
  static char ws[1];
  /* non-graph: a re-plan may change the batch and the q tile (decode, then MTP) */
  int32_t qo[3] = {0, 1, 2}, kvp[3] = {0, 2, 4}, kvl[2] = {20, 30};
  fi_batch_mla_info in = info_of(2, qo, kvp, kvl, 16, 16);
  fi_mla_plan *pl = NULL;
  FT_REQUIRE(rt_mla_plan_offline(&in, ws, 132, &pl) == 0, "%s", fi_last_error());
  int64_t n;
  const jit_key *key;
  rt_mla_plan_table(pl, &n, &key);
  FT_CHECK(key->v[MLA_P_Q_TILE] == 16);
  int32_t qo2[3] = {0, 2, 4};
  fi_batch_mla_info mtp = in;
  mtp.qo_indptr = qo2;
  FT_CHECK(rt_mla_plan_offline(&mtp, ws, 132, &pl) == 0, "%s", fi_last_error());
  rt_mla_plan_table(pl, &n, &key);
  FT_CHECK(key->v[MLA_P_Q_TILE] == 64 && check_items(&mtp, pl) == 0);
  fi_batch_mla_info bad = in;
  bad.num_heads = 32;
  poison_error();
  FT_CHECK(rt_mla_plan_offline(&bad, ws, 132, &pl) != 0 && strstr(fi_last_error(), "re-plan"), "%s", fi_last_error());
  bad = in;
  bad.sm_scale = 0.5f;
  FT_CHECK(rt_mla_plan_offline(&bad, ws, 132, &pl) != 0 && strstr(fi_last_error(), "re-plan"));
  fi_batch_mla_plan_destroy(pl);
  /* CUDA-graph mode: the grid is the capacity, the q tile and sizes fixed by the first plan */
  in.max_batch = 4;
  in.max_qo_tokens = 8;
  pl = NULL;
  FT_REQUIRE(rt_mla_plan_offline(&in, ws, 132, &pl) == 0, "%s", fi_last_error());
  rt_mla_plan_table(pl, &n, &key);
  FT_CHECK(key->v[MLA_P_Q_TILE] == 64 && n == 2, "q tile %lld (8 tokens x 16 heads), %lld items",
           (long long)key->v[MLA_P_Q_TILE], (long long)n);
  mtp = in;
  mtp.qo_indptr = qo2;
  FT_CHECK(rt_mla_plan_offline(&mtp, ws, 132, &pl) == 0, "%s", fi_last_error());
  bad = in;
  bad.max_qo_tokens = 16;
  poison_error();
  FT_CHECK(rt_mla_plan_offline(&bad, ws, 132, &pl) != 0 && strstr(fi_last_error(), "re-plan"), "%s", fi_last_error());
  int32_t qo9[3] = {0, 5, 9};
  bad = in;
  bad.qo_indptr = qo9;
  kvl[0] = 30;
  poison_error();
  FT_CHECK(rt_mla_plan_offline(&bad, ws, 132, &pl) != 0 && strstr(fi_last_error(), "max_qo_tokens"), "%s",
           fi_last_error());
  fi_batch_mla_plan_destroy(pl);
}

typedef struct tens {
  DLTensor t;
  int64_t shape[3];
} tens;
static void mk(tens *x, void *data, uint8_t code, int bits, int ndim, int64_t a, int64_t b, int64_t c) {
  memset(x, 0, sizeof *x);
  x->shape[0] = a, x->shape[1] = b, x->shape[2] = c;
  x->t.data = data;
  x->t.device.device_type = kDLCUDA;
  x->t.ndim = ndim;
  x->t.dtype.code = code;
  x->t.dtype.bits = (uint8_t)bits;
  x->t.dtype.lanes = 1;
  x->t.shape = x->shape;
}


FT_TEST(mla_plan_and_run_bad_arguments_named) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt);
  int32_t qo[3] = {0, 1, 3}, kvp[3] = {0, 3, 5}, kvl[2] = {40, 20};
  const fi_batch_mla_info in = info_of(2, qo, kvp, kvl, 16, 16);
  tens ws;
  mk(&ws, ADDR(9), kDLUInt, 8, 1, 1 << 28, 0, 0);
  fi_mla_plan *plan = NULL;
  fi_batch_mla_info bad = in;
  bad.num_heads = 0;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "num_heads");
  bad = in;
  bad.head_dim_ckv = 576;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "head_dim_ckv");
  bad = in;
  bad.page_size = 0;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "page_size");
  bad = in;
  bad.sm_scale = 0.0f / 0.0f;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "sm_scale");
  bad = in;
  bad.causal = 2;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "causal");
  bad = in;
  bad.kv_dtype = (DLDataType){kDLFloat, 16, 1};
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "kv_dtype");
  bad = in;
  bad.q_dtype = bad.kv_dtype = (DLDataType){kDLFloat, 32, 1};
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "q_dtype");
  int32_t kvl_bad[2] = {40, 33}; /* request 1 has 2 pages of 16 */
  bad = in;
  bad.kv_len = kvl_bad;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "kv_len[1]");
  int32_t kvp_bad[3] = {0, 3, 2};
  bad = in;
  bad.kv_indptr = kvp_bad;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "kv_indptr is not monotone");
  int32_t qo_bad[3] = {0, 1, 0};
  bad = in;
  bad.qo_indptr = qo_bad;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "monotone");
  int32_t qo_long[3] = {0, 41, 42}; /* 41 query tokens over 40 KV tokens, causal */
  bad = in;
  bad.qo_indptr = qo_long;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "L_q <= L_kv");
  bad = in;
  bad.max_batch = 1;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "max_batch");
  bad.max_batch = 4;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &bad, &ws.t, NULL, &plan), "max_qo_tokens");
  tens wsm;
  mk(&wsm, (char *)ADDR(9) + 16, kDLUInt, 8, 1, 1 << 28, 0, 0);
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &in, &wsm.t, NULL, &plan), "workspace");
  tens wsc = ws;
  wsc.t.shape = wsc.shape;
  wsc.t.device.device_type = kDLCPU;
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, &in, &wsc.t, NULL, &plan), "workspace");
  EXPECT_REFUSED(fi_batch_mla_paged_plan(rt, NULL, &ws.t, NULL, &plan), "info");
  FT_CHECK(plan == NULL);
  DLDevice dev = {kDLCPU, 0};
  size_t bytes = 0;
  EXPECT_REFUSED(fi_batch_mla_workspace_size(rt, dev, 4, 4, 16, &bytes), "GPU");
  dev.device_type = kDLCUDA;
  EXPECT_REFUSED(fi_batch_mla_workspace_size(rt, dev, -1, 4, 16, &bytes), "max_batch");
  EXPECT_REFUSED(fi_batch_mla_workspace_size(rt, dev, 4, 4, 2000, &bytes), "num_heads");

  /* run, on a plan made without a device */
  FT_REQUIRE(rt_mla_plan_offline(&in, ADDR(9), 132, &plan) == 0, "%s", fi_last_error());
  tens qn, qp, ckv, kpe, idx, out, lse;
  mk(&qn, ADDR(0), kDLBfloat, 16, 3, 3, 16, 512);
  mk(&qp, ADDR(1), kDLBfloat, 16, 3, 3, 16, 64);
  mk(&ckv, ADDR(2), kDLBfloat, 16, 3, 10, 16, 512);
  mk(&kpe, ADDR(3), kDLBfloat, 16, 3, 10, 16, 64);
  mk(&idx, ADDR(4), kDLInt, 32, 1, 5, 0, 0);
  mk(&out, ADDR(5), kDLBfloat, 16, 3, 3, 16, 512);
  mk(&lse, ADDR(6), kDLFloat, 32, 2, 3, 16, 0);
#define RUN(a, b, c, d, e, f, g) fi_batch_mla_paged_run(rt, plan, &(a).t, &(b).t, &(c).t, &(d).t, &(e).t, &(f).t, &(g).t, NULL)
  tens x = qn;
  x.t.shape = x.shape;
  x.t.dtype.code = kDLFloat;
  EXPECT_REFUSED(RUN(x, qp, ckv, kpe, idx, out, lse), "q_nope has dtype");
  x = qn, x.t.shape = x.shape, x.shape[0] = 2;
  EXPECT_REFUSED(RUN(x, qp, ckv, kpe, idx, out, lse), "q_nope has shape");
  x = qp, x.t.shape = x.shape, x.shape[1] = 8;
  EXPECT_REFUSED(RUN(qn, x, ckv, kpe, idx, out, lse), "q_pe has shape");
  x = out, x.t.shape = x.shape, x.shape[2] = 576;
  EXPECT_REFUSED(RUN(qn, qp, ckv, kpe, idx, x, lse), "out has shape");
  x = ckv, x.t.shape = x.shape, x.shape[1] = 32;
  EXPECT_REFUSED(RUN(qn, qp, x, kpe, idx, out, lse), "ckv_cache has shape");
  x = kpe, x.t.shape = x.shape, x.shape[2] = 128;
  EXPECT_REFUSED(RUN(qn, qp, ckv, x, idx, out, lse), "kpe_cache has shape");
  x = kpe, x.t.shape = x.shape, x.shape[0] = 9;
  EXPECT_REFUSED(RUN(qn, qp, ckv, x, idx, out, lse), "kpe_cache has 9 pages");
  x = idx, x.t.shape = x.shape, x.shape[0] = 4;
  EXPECT_REFUSED(RUN(qn, qp, ckv, kpe, x, out, lse), "kv_indices");
  x = lse, x.t.shape = x.shape, x.shape[1] = 8;
  EXPECT_REFUSED(RUN(qn, qp, ckv, kpe, idx, out, x), "lse");
  x = out, x.t.shape = x.shape, x.t.data = ADDR(0);
  EXPECT_REFUSED(RUN(qn, qp, ckv, kpe, idx, x, lse), "out overlaps q_nope");
  x = qn, x.t.shape = x.shape, x.t.byte_offset = 2;
  EXPECT_REFUSED(RUN(x, qp, ckv, kpe, idx, out, lse), "q_nope");
  x = qp, x.t.shape = x.shape, x.t.device.device_id = 1;
  EXPECT_REFUSED(RUN(qn, x, ckv, kpe, idx, out, lse), "q_pe");
  EXPECT_REFUSED(fi_batch_mla_paged_run(rt, NULL, &qn.t, &qp.t, &ckv.t, &kpe.t, &idx.t, &out.t, NULL, NULL), "plan");
#undef RUN
  fi_batch_mla_plan_destroy(plan);

  /* append: ckv and kpe as the two column ranges of one [pages, 16, 576] buffer pass the
   * overlap check (a launch then fails: no device here), overlapping views do not */
  tens ack, akp, bi, pos, last, kvp_t;
  mk(&ack, ADDR(7), kDLBfloat, 16, 2, 4, 512, 0);
  mk(&akp, ADDR(8), kDLBfloat, 16, 2, 4, 64, 0);
  mk(&bi, ADDR(10), kDLInt, 32, 1, 4, 0, 0);
  mk(&pos, ADDR(11), kDLInt, 32, 1, 4, 0, 0);
  mk(&kvp_t, ADDR(12), kDLInt, 32, 1, 3, 0, 0);
  mk(&last, ADDR(13), kDLInt, 32, 1, 2, 0, 0);
  int64_t st3[3] = {16 * 576, 576, 1};
  tens fc = ckv, fk = kpe;
  fc.t.shape = fc.shape, fk.t.shape = fk.shape;
  fc.t.strides = st3, fk.t.strides = st3;
  fc.t.data = ADDR(14), fk.t.data = (char *)ADDR(14) + 1024;
#define APPEND(c, k) fi_append_paged_mla_kv_cache(rt, &ack.t, &akp.t, &bi.t, &pos.t, &(c).t, &(k).t, &idx.t, &kvp_t.t, &last.t, NULL)
  poison_error();
  fi_status s = APPEND(fc, fk);
  FT_CHECK(s != FI_ERR_INVALID_ARGUMENT, "interleaved caches refused: %s", fi_last_error());
  fk.t.data = (char *)ADDR(14) + 512;
  EXPECT_REFUSED(APPEND(fc, fk), "ckv_cache overlaps kpe_cache");
  fk.t.data = (char *)ADDR(14) + 1024;
  x = ack, x.t.shape = x.shape, x.shape[1] = 576;
  EXPECT_REFUSED(fi_append_paged_mla_kv_cache(rt, &x.t, &akp.t, &bi.t, &pos.t, &fc.t, &fk.t, &idx.t, &kvp_t.t,
                                              &last.t, NULL),
                 "append_ckv has 576 columns");
  x = pos, x.t.shape = x.shape, x.shape[0] = 3;
  EXPECT_REFUSED(fi_append_paged_mla_kv_cache(rt, &ack.t, &akp.t, &bi.t, &x.t, &fc.t, &fk.t, &idx.t, &kvp_t.t,
                                              &last.t, NULL),
                 "positions has 3 entries");
  x = last, x.t.shape = x.shape, x.shape[0] = 3;
  EXPECT_REFUSED(fi_append_paged_mla_kv_cache(rt, &ack.t, &akp.t, &bi.t, &pos.t, &fc.t, &fk.t, &idx.t, &kvp_t.t,
                                              &x.t, NULL),
                 "kv_last_page_len has 3 entries");
#undef APPEND
  fi_runtime_destroy(rt);
}
