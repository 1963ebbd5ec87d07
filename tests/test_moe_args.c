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
  EXPECT_BAD(rt, &c, "logits", "aligned");
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
  EXPECT_BAD(rt, &c, "weights", "aligned");
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
