/* test_rope_args.c: the RoPE entry points on a machine with no GPU: bad arguments refused
 * by name before any driver call, valid ones reaching the device layer, and the rope keys. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_runtime.h"
#include "ft.h"
#include "test_args_util.h"
#include "jit_registry.h"
#include "jit_render.h"
#include "ops_rope.h"
#include "rt_internal.h"

/* Fake device addresses, never dereferenced, 16 MiB apart. */
#define Q_ADDR ((void *)0x1000000)
#define K_ADDR ((void *)0x2000000)
#define QO_ADDR ((void *)0x3000000)
#define KO_ADDR ((void *)0x4000000)
#define POS_ADDR ((void *)0x5000000)
#define CACHE_ADDR ((void *)0x6000000)
#define NO_SUCH_DEVICE 63

typedef struct tens {
  DLTensor t;
  int64_t shape[3];
  int64_t strides[3];
} tens;

static void tens_make(tens *x, void *data, DLDataTypeCode code, int bits, int ndim, int64_t s0,
                      int64_t s1, int64_t s2) {
  memset(x, 0, sizeof *x);
  x->shape[0] = s0;
  x->shape[1] = s1;
  x->shape[2] = s2;
  x->t.data = data;
  x->t.device.device_type = kDLCUDA;
  x->t.ndim = ndim;
  x->t.dtype.code = (uint8_t)code;
  x->t.dtype.bits = (uint8_t)bits;
  x->t.dtype.lanes = 1;
  x->t.shape = x->shape;
}

static void tens_strides(tens *x, int64_t s0, int64_t s1, int64_t s2) {
  x->t.strides = x->strides;
  x->strides[0] = s0;
  x->strides[1] = s1;
  x->strides[2] = s2;
}

/* A valid call: q [nnz, 32, D], k [nnz, 8, D] bf16, outputs apart, int32
 * pos_ids, a [4096, rotary_dim] cache, Llama 3.1's factors. */
typedef struct call {
  tens q, k, qo, ko, pos, cache;
  int rotary_dim, interleave;
  double scale, theta, low, high, old;
} call;

static void call_make(call *c, int64_t nnz, int64_t d) {
  memset(c, 0, sizeof *c);
  tens_make(&c->q, Q_ADDR, kDLBfloat, 16, 3, nnz, 32, d);
  tens_make(&c->k, K_ADDR, kDLBfloat, 16, 3, nnz, 8, d);
  tens_make(&c->qo, QO_ADDR, kDLBfloat, 16, 3, nnz, 32, d);
  tens_make(&c->ko, KO_ADDR, kDLBfloat, 16, 3, nnz, 8, d);
  tens_make(&c->pos, POS_ADDR, kDLInt, 32, 1, nnz, 0, 0);
  tens_make(&c->cache, CACHE_ADDR, kDLFloat, 32, 2, 4096, d, 0);
  c->rotary_dim = (int)d;
  c->scale = 8;
  c->theta = 500000;
  c->low = 1;
  c->high = 4;
  c->old = 8192;
}

static void fix(tens *x) {
  x->t.shape = x->shape;
  if (x->t.strides) x->t.strides = x->strides;
}
static void call_copy(call *dst, const call *src) {
  *dst = *src;
  fix(&dst->q);
  fix(&dst->k);
  fix(&dst->qo);
  fix(&dst->ko);
  fix(&dst->pos);
  fix(&dst->cache);
}

static const char *const fn_names[3] = {"fi_apply_rope_pos_ids", "fi_apply_llama31_rope_pos_ids",
                                        "fi_apply_rope_with_cos_sin_cache"};

static fi_status call_fn(fi_runtime *rt, int f, call *c) {
  if (f == 0)
    return fi_apply_rope_pos_ids(rt, &c->q.t, &c->k.t, &c->qo.t, &c->ko.t, &c->pos.t,
                                 c->rotary_dim, c->interleave, c->scale, c->theta, NULL);
  if (f == 1)
    return fi_apply_llama31_rope_pos_ids(rt, &c->q.t, &c->k.t, &c->qo.t, &c->ko.t, &c->pos.t,
                                         c->rotary_dim, c->interleave, c->scale, c->theta, c->low,
                                         c->high, c->old, NULL);
  return fi_apply_rope_with_cos_sin_cache(rt, &c->q.t, &c->k.t, &c->qo.t, &c->ko.t, &c->cache.t,
                                          &c->pos.t, c->interleave, NULL);
}

/* Functions f0..f1-1 must refuse c with INVALID_ARGUMENT, naming themselves and names. */
#define EXPECT_INVALID_IN(rt, c, f0, f1, what, names)                                         \
  do {                                                                                        \
    for (int f_ = (f0); f_ < (f1); f_++) {                                                    \
      poison_error();                                                                         \
      fi_status st_ = call_fn((rt), f_, (c));                                                 \
      FT_CHECK(st_ == FI_ERR_INVALID_ARGUMENT, "%s: %s: got %s (%s)", fn_names[f_], what,     \
               fi_status_string(st_), fi_last_error());                                       \
      FT_CHECK(names_all(fi_last_error(), names) && strstr(fi_last_error(), fn_names[f_]),    \
               "%s: %s: message does not name the argument: %s", fn_names[f_], what,         \
               fi_last_error());                                                              \
    }                                                                                         \
  } while (0)
#define EXPECT_INVALID(rt, c, what, names) EXPECT_INVALID_IN(rt, c, 0, 3, what, names)

/* Valid: every function gets past validation to the device layer. */
#define EXPECT_VALID(rt, c, what)                                                              \
  do {                                                                                         \
    (c)->q.t.device.device_id = (c)->k.t.device.device_id = NO_SUCH_DEVICE;                    \
    (c)->qo.t.device.device_id = (c)->ko.t.device.device_id = NO_SUCH_DEVICE;                  \
    (c)->pos.t.device.device_id = (c)->cache.t.device.device_id = NO_SUCH_DEVICE;              \
    for (int f_ = 0; f_ < 3; f_++) {                                                           \
      fi_status st_ = call_fn((rt), f_, (c));                                                  \
      FT_CHECK(st_ == FI_ERR_NO_DEVICE, "%s: %s: got %s (%s)", fn_names[f_], what,             \
               fi_status_string(st_), fi_last_error());                                        \
    }                                                                                          \
  } while (0)

FT_TEST(rope_null_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, 16, 128);
  for (int f = 0; f < 3; f++) {
    poison_error();
    fi_status st = call_fn(NULL, f, &c);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "rt is NULL"), "%s: %s",
             fn_names[f], fi_last_error());
  }
  const char *names[6] = {"q", "k", "q_out", "k_out", "pos_ids", "cos_sin_cache"};
  for (int i = 0; i < 6; i++) {
    call_copy(&d, &c);
    tens *t[6] = {&d.q, &d.k, &d.qo, &d.ko, &d.pos, &d.cache};
    t[i]->t.data = NULL;
    char what[64];
    snprintf(what, sizeof what, "%s data NULL", names[i]);
    EXPECT_INVALID_IN(rt, &d, i == 5 ? 2 : 0, 3, what, NAMES(names[i], "data"));
  }
  poison_error();
  fi_status st = fi_apply_rope_with_cos_sin_cache(rt, &c.q.t, &c.k.t, &c.qo.t, &c.ko.t, NULL,
                                                  &c.pos.t, 0, NULL);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "cos_sin_cache is NULL"),
           "%s", fi_last_error());
  poison_error();
  st = fi_apply_rope_pos_ids(rt, &c.q.t, NULL, &c.qo.t, &c.ko.t, &c.pos.t, 128, 0, 1, 1e4, NULL);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "k is NULL"), "%s",
           fi_last_error());
  poison_error();
  st = fi_apply_rope_pos_ids(rt, &c.q.t, &c.k.t, &c.qo.t, &c.ko.t, NULL, 128, 0, 1, 1e4, NULL);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "pos_ids is NULL"), "%s",
           fi_last_error());
  fi_runtime_destroy(rt);
}

FT_TEST(rope_devices_and_dtypes) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, 16, 128);
  call_copy(&d, &c);
  d.q.t.device.device_type = kDLCPU;
  EXPECT_INVALID(rt, &d, "q on CPU", NAMES("q", "kDLCPU"));
  call_copy(&d, &c);
  d.ko.t.device.device_id = 1;
  EXPECT_INVALID(rt, &d, "k_out on another device", NAMES("k_out"));
  call_copy(&d, &c);
  d.pos.t.device.device_id = 2;
  EXPECT_INVALID(rt, &d, "pos_ids on another device", NAMES("pos_ids"));
  call_copy(&d, &c);
  d.cache.t.device.device_type = kDLCPU;
  EXPECT_INVALID_IN(rt, &d, 2, 3, "cache on CPU", NAMES("cos_sin_cache", "kDLCPU"));
  call_copy(&d, &c);
  d.q.t.dtype.bits = 32;
  d.q.t.dtype.code = kDLFloat;
  EXPECT_INVALID(rt, &d, "q float32", NAMES("q", "float32"));
  call_copy(&d, &c);
  d.k.t.dtype.code = kDLFloat;
  EXPECT_INVALID(rt, &d, "k float16 with q bfloat16", NAMES("k", "float16", "bfloat16"));
  call_copy(&d, &c);
  d.qo.t.dtype.code = kDLFloat;
  EXPECT_INVALID(rt, &d, "q_out float16", NAMES("q_out", "float16"));
  call_copy(&d, &c);
  d.pos.t.dtype.code = kDLFloat;
  EXPECT_INVALID(rt, &d, "pos_ids float32", NAMES("pos_ids", "int32 or int64"));
  call_copy(&d, &c);
  d.pos.t.dtype.bits = 16;
  EXPECT_INVALID(rt, &d, "pos_ids int16", NAMES("pos_ids", "int16"));
  call_copy(&d, &c);
  d.cache.t.dtype.bits = 16;
  EXPECT_INVALID_IN(rt, &d, 2, 3, "cache float16", NAMES("cos_sin_cache", "float32"));
  /* Valid: int64 pos_ids, float16 q/k. */
  call_copy(&d, &c);
  d.pos.t.dtype.bits = 64;
  EXPECT_VALID(rt, &d, "int64 pos_ids");
  call_copy(&d, &c);
  d.q.t.dtype.code = d.k.t.dtype.code = d.qo.t.dtype.code = d.ko.t.dtype.code = kDLFloat;
  EXPECT_VALID(rt, &d, "float16");
  fi_runtime_destroy(rt);
}

FT_TEST(rope_shapes_and_strides) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, 16, 128);
  EXPECT_VALID(rt, &c, "the base call");
  call_copy(&d, &c);
  d.q.t.ndim = 2;
  EXPECT_INVALID(rt, &d, "q 2-D", NAMES("q", "dimensions"));
  call_copy(&d, &c);
  d.k.shape[0] = 15;
  d.ko.shape[0] = 15;
  EXPECT_INVALID(rt, &d, "k tokens", NAMES("k", "tokens"));
  call_copy(&d, &c);
  d.k.shape[2] = d.ko.shape[2] = 64;
  EXPECT_INVALID(rt, &d, "k head_dim", NAMES("k", "head_dim"));
  call_copy(&d, &c);
  d.qo.shape[1] = 31;
  EXPECT_INVALID(rt, &d, "q_out heads", NAMES("q_out", "shape", "[16, 32, 128]"));
  call_copy(&d, &c);
  d.ko.shape[2] = 64;
  EXPECT_INVALID(rt, &d, "k_out head_dim", NAMES("k_out", "shape"));
  call_copy(&d, &c);
  d.pos.shape[0] = 17;
  EXPECT_INVALID(rt, &d, "pos_ids length", NAMES("pos_ids", "17"));
  call_copy(&d, &c);
  d.pos.t.ndim = 2;
  EXPECT_INVALID(rt, &d, "pos_ids 2-D", NAMES("pos_ids", "dimensions"));
  call_copy(&d, &c);
  tens_strides(&d.pos, 2, 0, 0);
  EXPECT_INVALID(rt, &d, "pos_ids stride 2", NAMES("pos_ids", "stride"));
  call_copy(&d, &c);
  tens_strides(&d.q, 32 * 256, 256, 2);
  EXPECT_INVALID(rt, &d, "q head_dim stride 2", NAMES("q", "stride"));
  call_copy(&d, &c);
  tens_strides(&d.ko, 8 * 128, 64, 1);
  EXPECT_INVALID(rt, &d, "k_out heads overlapping", NAMES("k_out", "overlap"));
  call_copy(&d, &c);
  tens_strides(&d.qo, 128, 128, 1);
  EXPECT_INVALID(rt, &d, "q_out tokens overlapping heads", NAMES("q_out", "overlap"));
  call_copy(&d, &c);
  tens_strides(&d.q, -32 * 128, 128, 1);
  EXPECT_INVALID(rt, &d, "negative stride", NAMES("q", "negative"));
  /* Valid: padded tokens and heads (a q view of a fused qkv tensor) and
   * head-major output; 0 tokens launches nothing and needs no device. */
  call_copy(&d, &c);
  tens_strides(&d.q, (32 + 8 + 8) * 128, 128, 1);
  tens_strides(&d.k, (32 + 8 + 8) * 128, 136, 1);
  tens_strides(&d.qo, 128, 16 * 128, 1);
  EXPECT_VALID(rt, &d, "strided views");
  call_make(&d, 0, 128);
  for (int f = 0; f < 3; f++)
    FT_CHECK(call_fn(rt, f, &d) == FI_OK, "%s 0 tokens: %s", fn_names[f], fi_last_error());
  d.k.shape[2] = 64;
  EXPECT_INVALID(rt, &d, "0 tokens, bad k", NAMES("k", "head_dim"));
  fi_runtime_destroy(rt);
}

FT_TEST(rope_scalars_and_cache) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, 16, 128);
  const int bad_rd[] = {0, 1, 3, 127, 130, -2};
  for (int i = 0; i < 6; i++) {
    call_copy(&d, &c);
    d.rotary_dim = bad_rd[i];
    char what[32];
    snprintf(what, sizeof what, "rotary_dim %d", bad_rd[i]);
    EXPECT_INVALID_IN(rt, &d, 0, 2, what, NAMES("rotary_dim"));
  }
  call_make(&d, 16, 1024);
  d.cache.shape[1] = 1024;
  d.rotary_dim = 1024;
  EXPECT_INVALID_IN(rt, &d, 0, 2, "rotary_dim 1024", NAMES("rotary_dim", "512"));
  d.q.t.device.device_id = d.k.t.device.device_id = d.qo.t.device.device_id = NO_SUCH_DEVICE;
  d.ko.t.device.device_id = d.pos.t.device.device_id = d.cache.t.device.device_id = NO_SUCH_DEVICE;
  FT_CHECK(call_fn(rt, 2, &d) == FI_ERR_NO_DEVICE, "cache with rotary_dim 1024: %s",
           fi_last_error());
  call_copy(&d, &c);
  d.interleave = 2;
  EXPECT_INVALID(rt, &d, "interleave 2", NAMES("interleave"));
  const double bad[] = {0, -1, 1.0 / 0.0, 0.0 / 0.0};
  for (int i = 0; i < 4; i++) {
    call_copy(&d, &c);
    d.theta = bad[i];
    EXPECT_INVALID_IN(rt, &d, 0, 2, "theta", NAMES("rope_theta"));
    call_copy(&d, &c);
    d.scale = bad[i];
    EXPECT_INVALID_IN(rt, &d, 0, 2, "scale", NAMES("rope_scale"));
    call_copy(&d, &c);
    d.low = bad[i];
    EXPECT_INVALID_IN(rt, &d, 1, 2, "low", NAMES("low_freq_factor"));
    call_copy(&d, &c);
    d.old = bad[i];
    EXPECT_INVALID_IN(rt, &d, 1, 2, "old_context_len", NAMES("old_context_len"));
  }
  call_copy(&d, &c);
  d.high = d.low;
  EXPECT_INVALID_IN(rt, &d, 1, 2, "high == low", NAMES("high_freq_factor"));
  /* Plain RoPE ignores the Llama factors. */
  call_copy(&d, &c);
  d.high = d.low = d.old = -1;
  d.q.t.device.device_id = d.k.t.device.device_id = d.qo.t.device.device_id = NO_SUCH_DEVICE;
  d.ko.t.device.device_id = d.pos.t.device.device_id = NO_SUCH_DEVICE;
  FT_CHECK(call_fn(rt, 0, &d) == FI_ERR_NO_DEVICE, "%s", fi_last_error());
  /* The cache: 2-D float32, contiguous, rotary_dim columns even and <= D. */
  call_copy(&d, &c);
  d.cache.shape[1] = 130;
  EXPECT_INVALID_IN(rt, &d, 2, 3, "cache 130 columns", NAMES("cos_sin_cache", "rotary_dim"));
  call_copy(&d, &c);
  d.cache.shape[1] = 63;
  EXPECT_INVALID_IN(rt, &d, 2, 3, "cache 63 columns", NAMES("cos_sin_cache", "63"));
  call_copy(&d, &c);
  d.cache.shape[0] = 0;
  EXPECT_INVALID_IN(rt, &d, 2, 3, "cache no rows", NAMES("cos_sin_cache", "max_pos"));
  call_copy(&d, &c);
  tens_strides(&d.cache, 256, 1, 0);
  EXPECT_INVALID_IN(rt, &d, 2, 3, "cache padded", NAMES("cos_sin_cache", "contiguous"));
  call_copy(&d, &c);
  d.cache.t.ndim = 3;
  EXPECT_INVALID_IN(rt, &d, 2, 3, "cache 3-D", NAMES("cos_sin_cache", "dimensions"));
  /* Valid: rotary_dim D/2 (cache of 64 columns), interleaved. */
  call_copy(&d, &c);
  d.rotary_dim = 64;
  d.cache.shape[1] = 64;
  d.interleave = 1;
  EXPECT_VALID(rt, &d, "rotary_dim 64 interleaved");
  fi_runtime_destroy(rt);
}

FT_TEST(rope_in_place_and_overlap) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, 16, 128);
  call_copy(&d, &c);
  d.qo.t.data = Q_ADDR;
  d.ko.t.data = K_ADDR;
  EXPECT_VALID(rt, &d, "in place");
  call_copy(&d, &c);
  d.qo.t.data = Q_ADDR;
  EXPECT_INVALID(rt, &d, "only q in place", NAMES("q_out", "k_out", "both"));
  call_copy(&d, &c);
  d.ko.t.data = K_ADDR;
  EXPECT_INVALID(rt, &d, "only k in place", NAMES("q_out", "k_out", "both"));
  call_copy(&d, &c);
  d.qo.t.data = Q_ADDR;
  d.qo.t.byte_offset = 256;
  EXPECT_INVALID(rt, &d, "q_out shifted into q", NAMES("q_out", "overlaps", "q"));
  call_copy(&d, &c);
  d.ko.t.data = Q_ADDR;
  EXPECT_INVALID(rt, &d, "k_out on q", NAMES("k_out", "overlaps", "q"));
  call_copy(&d, &c);
  d.ko.t.data = QO_ADDR;
  d.ko.t.byte_offset = 16 * 32 * 128 * 2 - 2;
  EXPECT_INVALID(rt, &d, "k_out on q_out's last element", NAMES("k_out", "q_out"));
  call_copy(&d, &c);
  d.qo.t.data = Q_ADDR;
  d.ko.t.data = K_ADDR;
  tens_strides(&d.qo, 32 * 128, 128, 1);
  EXPECT_VALID(rt, &d, "in place with explicit compact strides");
  call_copy(&d, &c);
  d.ko.t.data = QO_ADDR;
  d.ko.t.byte_offset = 16 * 32 * 128 * 2;
  EXPECT_VALID(rt, &d, "k_out right after q_out");
  fi_runtime_destroy(rt);
}

/* ---- the op's keys ---- */

FT_TEST(rope_selection_is_registered) {
  FT_CHECK(jit_registry_find("rope") == &jit_op_rope);
  const int n = jit_op_rope.config_count();
  FT_CHECK(n > 0 && n <= 60, "%d configurations", n);
  const int dts[2] = {JIT_DT_F16, JIT_DT_BF16}, pdts[2] = {JIT_DT_I32, JIT_DT_I64};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      for (int m = 0; m < JIT_ROPE_MODE_COUNT; m++)
        for (int il = 0; il < 2; il++)
          for (int vec = 1; vec <= 8; vec *= 2) {
            jit_key k;
            jit_rope_select(dts[a], pdts[b], m, il, vec, &k);
            FT_CHECK(op_registers(&jit_op_rope, &k) && jit_rope_valid(&k), "%d %d %d %d %d", a, b, m, il, vec);
            FT_CHECK(k.v[ROPE_P_VEC] <= vec && k.v[ROPE_P_VEC] * 2 > (vec == 2 ? 1 : vec - 1),
                     "vec %d gave %lld", vec, (long long)k.v[ROPE_P_VEC]);
          }
  for (int i = 0; i < n; i++) {
    jit_key k;
    jit_op_rope.config(i, &k);
    FT_CHECK(jit_rope_valid(&k), "configuration %d invalid", i);
    for (int j = 0; j < i; j++) {
      jit_key r;
      jit_op_rope.config(j, &r);
      FT_CHECK(memcmp(r.v, k.v, sizeof r.v) != 0, "configurations %d and %d are the same", j, i);
    }
  }
}

FT_TEST(rope_key_canonical_and_render) {
  jit_key k;
  jit_rope_select(JIT_DT_BF16, JIT_DT_I64, JIT_ROPE_CACHE, 1, 8, &k);
  char canon[256];
  FT_REQUIRE(jit_key_canonical(&k, canon, sizeof canon) > 0);
  FT_CHECK(strcmp(canon, "op=rope;dtype=bf16;pos=i64;mode=1;interleave=1;vec=8;threads=256") == 0,
           "%s", canon);
  jit_key back;
  FT_REQUIRE(jit_key_parse(canon, &back) == 0, "%s does not parse", canon);
  FT_CHECK(back.op == k.op && memcmp(back.v, k.v, sizeof k.v) == 0, "round trip of %s", canon);
  char *src = NULL, err[256];
  FT_REQUIRE(jit_render(&k, "fi_rope_0011223344556677", &src, err, sizeof err) == 0, "%s", err);
  FT_CHECK(strstr(src, "#include \"rope.cuh\"") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi_rope_0011223344556677(fi_rope_params p)") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi::rope<fi_bf16, int64_t, 1, 1, 8, 256>(p);") != NULL, "%s", src);
  free(src);
  jit_key bad = k;
  bad.v[ROPE_P_DTYPE] = JIT_DT_F32;
  FT_CHECK(!jit_rope_valid(&bad), "f32 accepted");
  bad = k;
  bad.v[ROPE_P_POS] = JIT_DT_F16;
  FT_CHECK(!jit_rope_valid(&bad), "f16 positions accepted");
  bad = k;
  bad.v[ROPE_P_MODE] = 2;
  FT_CHECK(!jit_rope_valid(&bad), "mode 2 accepted");
  bad = k;
  bad.v[ROPE_P_VEC] = 2;
  FT_CHECK(!jit_rope_valid(&bad), "vec 2 accepted");
}
