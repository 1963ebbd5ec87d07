/* test_sampling_args.c: the sampling entry points on a machine with no GPU: bad arguments
 * refused by name before any driver call, valid ones reaching the device layer, and the
 * sampling keys and registry. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_runtime.h"
#include "ft.h"
#include "test_args_util.h"
#include "jit_registry.h"
#include "jit_render.h"
#include "ops_sampling.h"
#include "rt_internal.h"
#include "rt_sampling.h"
#include "sampling_params.h"

/* Fake device addresses, never dereferenced, 64 MiB apart. */
#define IN_ADDR ((void *)0x10000000)
#define OUT_ADDR ((void *)0x14000000)
#define SAMPLES_ADDR ((void *)0x18000000)
#define K_ADDR ((void *)0x1c000000)
#define P_ADDR ((void *)0x20000000)
#define NO_SUCH_DEVICE 63

typedef struct tens {
  DLTensor t;
  int64_t shape[2];
  int64_t strides[2];
} tens;

static void tens_make(tens *x, void *data, DLDataTypeCode code, int bits, int ndim, int64_t s0,
                      int64_t s1) {
  memset(x, 0, sizeof *x);
  x->shape[0] = s0;
  x->shape[1] = s1;
  x->t.data = data;
  x->t.device.device_type = kDLCUDA;
  x->t.ndim = ndim;
  x->t.dtype.code = (uint8_t)code;
  x->t.dtype.bits = (uint8_t)bits;
  x->t.dtype.lanes = 1;
  x->t.shape = x->shape;
}

/* One call's tensors: in [B, V], out [B, V] (softmax: float32), samples int32 [B], the
 * per-row arrays (used when the flags say so) and the scalars. */
typedef struct call {
  tens in, out, samples, karr, parr;
  int use_karr, use_parr;
  int top_k;
  double top_p, min_p;
} call;

static void call_make(call *c, DLDataTypeCode code, int bits, int64_t b, int64_t v) {
  memset(c, 0, sizeof *c);
  tens_make(&c->in, IN_ADDR, code, bits, 2, b, v);
  tens_make(&c->out, OUT_ADDR, code, bits, 2, b, v);
  tens_make(&c->samples, SAMPLES_ADDR, kDLInt, 32, 1, b, 0);
  tens_make(&c->karr, K_ADDR, kDLInt, 32, 1, b, 0);
  tens_make(&c->parr, P_ADDR, kDLFloat, 32, 1, b, 0);
  c->top_k = 50;
  c->top_p = 0.9;
  c->min_p = 0.05;
}

static void fix(tens *x, const tens *src) {
  x->t.shape = x->shape;
  if (src->t.strides) x->t.strides = x->strides;
}
static void call_copy(call *d, const call *s) {
  *d = *s;
  fix(&d->in, &s->in);
  fix(&d->out, &s->out);
  fix(&d->samples, &s->samples);
  fix(&d->karr, &s->karr);
  fix(&d->parr, &s->parr);
}
static void set_strides(tens *x, int64_t s0, int64_t s1) {
  x->t.strides = x->strides;
  x->strides[0] = s0;
  x->strides[1] = s1;
}

enum { SOFTMAX, SAMPLE, TOPK, TOPP, MINP, KPL, KRENORM, PRENORM, KMASK, KPP, SLOG, NOPS };
static const char *const names[NOPS] = {"fi_softmax",
                                        "fi_sampling_from_probs",
                                        "fi_top_k_sampling_from_probs",
                                        "fi_top_p_sampling_from_probs",
                                        "fi_min_p_sampling_from_probs",
                                        "fi_top_k_top_p_sampling_from_logits",
                                        "fi_top_k_renorm_probs",
                                        "fi_top_p_renorm_probs",
                                        "fi_top_k_mask_logits",
                                        "fi_top_k_top_p_sampling_from_probs",
                                        "fi_sampling_from_logits"};

static fi_status run_op(fi_runtime *rt, int op, call *c) {
  const DLTensor *ka = c->use_karr ? &c->karr.t : NULL, *pa = c->use_parr ? &c->parr.t : NULL;
  switch (op) {
    case SOFTMAX: {
      /* softmax writes float32 */
      c->out.t.dtype.code = kDLFloat;
      c->out.t.dtype.bits = 32;
      return fi_softmax(rt, &c->in.t, pa, c->use_parr ? 1.0 : 0.7, &c->out.t, NULL);
    }
    case SAMPLE:
      return fi_sampling_from_probs(rt, &c->in.t, &c->samples.t, 1, 2, NULL);
    case TOPK:
      return fi_top_k_sampling_from_probs(rt, &c->in.t, ka, c->top_k, &c->samples.t, 1, 2, NULL);
    case TOPP:
      return fi_top_p_sampling_from_probs(rt, &c->in.t, pa, c->top_p, &c->samples.t, 1, 2, NULL);
    case MINP:
      return fi_min_p_sampling_from_probs(rt, &c->in.t, pa, c->min_p, &c->samples.t, 1, 2, NULL);
    case KPL:
      return fi_top_k_top_p_sampling_from_logits(rt, &c->in.t, ka, c->top_k, pa, c->top_p,
                                                 &c->samples.t, 1, 2, NULL);
    case KRENORM:
      return fi_top_k_renorm_probs(rt, &c->in.t, ka, c->top_k, &c->out.t, NULL);
    case PRENORM:
      return fi_top_p_renorm_probs(rt, &c->in.t, pa, c->top_p, &c->out.t, NULL);
    case KMASK:
      return fi_top_k_mask_logits(rt, &c->in.t, ka, c->top_k, &c->out.t, NULL);
    case KPP:
      return fi_top_k_top_p_sampling_from_probs(rt, &c->in.t, ka, c->top_k, pa, c->top_p, &c->samples.t, 1, 2,
                                                NULL);
    default:
      return fi_sampling_from_logits(rt, &c->in.t, &c->samples.t, 1, 2, NULL);
  }
}

static const int is_sampler[NOPS] = {0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1};
static const int uses_k[NOPS] = {0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0};
static const int uses_p[NOPS] = {1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 0}; /* parr: temperature/top_p/min_p */

/* op refuses c with INVALID_ARGUMENT and a message naming op and every one of nm. */
#define EXPECT_INVALID_OP(rt, op, c, what, nm)                                                    \
  do {                                                                                            \
    call d_;                                                                                      \
    call_copy(&d_, (c));                                                                          \
    poison_error();                                                                               \
    fi_status st_ = run_op((rt), (op), &d_);                                                      \
    FT_CHECK(st_ == FI_ERR_INVALID_ARGUMENT, "%s: %s: got %s (%s)", names[op], what,              \
             fi_status_string(st_), fi_last_error());                                             \
    FT_CHECK(names_all(fi_last_error(), nm) && strstr(fi_last_error(), names[op]),                \
             "%s: %s: message does not name the argument: %s", names[op], what, fi_last_error()); \
  } while (0)

/* Valid: every op gets past validation to the device layer (no such device here). */
static void expect_valid(fi_runtime *rt, const call *c, int op, const char *what) {
  call d;
  call_copy(&d, c);
  d.in.t.device.device_id = d.out.t.device.device_id = d.samples.t.device.device_id =
      d.karr.t.device.device_id = d.parr.t.device.device_id = NO_SUCH_DEVICE;
  fi_status st = run_op(rt, op, &d);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "%s: %s: got %s (%s)", names[op], what, fi_status_string(st),
           fi_last_error());
}

FT_TEST(sampling_valid_calls_reach_the_device) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  const int codes[3][2] = {{kDLFloat, 32}, {kDLFloat, 16}, {kDLBfloat, 16}};
  for (int d = 0; d < 3; d++) {
    call_make(&c, (DLDataTypeCode)codes[d][0], codes[d][1], 64, 128256);
    for (int op = 0; op < NOPS; op++) expect_valid(rt, &c, op, "scalars");
    c.use_karr = c.use_parr = 1;
    for (int op = 0; op < NOPS; op++) expect_valid(rt, &c, op, "arrays");
  }
  /* Odd vocab, strided rows, one row, k = 0 (no limit), top_p = 1, min_p = 0. */
  call_make(&c, kDLFloat, 32, 3, 1001);
  set_strides(&c.in, 1003, 1);
  c.top_k = 0;
  c.top_p = 1.0;
  c.min_p = 0.0;
  for (int op = 0; op < NOPS; op++) expect_valid(rt, &c, op, "odd vocab, strided");
  call_make(&c, kDLFloat, 32, 1, 1);
  for (int op = 0; op < NOPS; op++) expect_valid(rt, &c, op, "1 x 1");
  /* In place: out is the input itself (softmax: float32 logits). */
  call_make(&c, kDLFloat, 32, 8, 4096);
  c.out.t.data = IN_ADDR;
  for (int op = 0; op < NOPS; op++)
    if (!is_sampler[op]) expect_valid(rt, &c, op, "in place");
  fi_runtime_destroy(rt);
}

FT_TEST(sampling_empty_batch_launches_nothing) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  call_make(&c, kDLFloat, 32, 0, 4096);
  for (int op = 0; op < NOPS; op++) {
    fi_status st = run_op(rt, op, &c);
    FT_CHECK(st == FI_OK, "%s: batch 0: %s (%s)", names[op], fi_status_string(st), fi_last_error());
  }
  fi_runtime_destroy(rt);
}

FT_TEST(sampling_null_and_devices) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLFloat, 32, 4, 1000);
  for (int op = 0; op < NOPS; op++) {
    poison_error();
    FT_CHECK(run_op(NULL, op, &c) == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "rt"),
             "%s: NULL rt: %s", names[op], fi_last_error());
    const char *in = op == SOFTMAX || op == KPL || op == KMASK || op == SLOG ? "logits" : "probs";
    call_copy(&d, &c);
    d.in.t.data = NULL;
    EXPECT_INVALID_OP(rt, op, &d, "input data NULL", NAMES(in));
    call_copy(&d, &c);
    d.in.t.device.device_type = kDLCPU;
    EXPECT_INVALID_OP(rt, op, &d, "input on the CPU", NAMES(in, "kDLCPU"));
    call_copy(&d, &c);
    const char *out = is_sampler[op] ? "samples" : "out";
    (is_sampler[op] ? &d.samples : &d.out)->t.device.device_id = 1;
    EXPECT_INVALID_OP(rt, op, &d, "output on another device", NAMES(out));
    call_copy(&d, &c);
    (is_sampler[op] ? &d.samples : &d.out)->t.data = NULL;
    EXPECT_INVALID_OP(rt, op, &d, "output data NULL", NAMES(out));
    if (uses_k[op]) {
      call_copy(&d, &c);
      d.use_karr = 1;
      d.karr.t.device.device_type = kDLCPU;
      EXPECT_INVALID_OP(rt, op, &d, "top_k_arr on the CPU", NAMES("top_k_arr"));
    }
    if (uses_p[op]) {
      call_copy(&d, &c);
      d.use_parr = 1;
      d.parr.t.device.device_id = 2;
      const char *pn = op == SOFTMAX ? "temperature_arr" : op == MINP ? "min_p_arr" : "top_p_arr";
      EXPECT_INVALID_OP(rt, op, &d, "parameter array on another device", NAMES(pn));
    }
  }
  fi_runtime_destroy(rt);
}

FT_TEST(sampling_dtypes_and_shapes) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLFloat, 32, 4, 1000);
  for (int op = 0; op < NOPS; op++) {
    const char *in = op == SOFTMAX || op == KPL || op == KMASK || op == SLOG ? "logits" : "probs";
    call_make(&d, kDLInt, 32, 4, 1000);
    EXPECT_INVALID_OP(rt, op, &d, "int32 input", NAMES(in, "int32"));
    call_make(&d, kDLFloat, 64, 4, 1000);
    EXPECT_INVALID_OP(rt, op, &d, "float64 input", NAMES(in, "float64"));
    call_copy(&d, &c);
    d.in.t.ndim = 1;
    EXPECT_INVALID_OP(rt, op, &d, "1-D input", NAMES(in));
    call_copy(&d, &c);
    d.in.shape[1] = d.out.shape[1] = 0;
    EXPECT_INVALID_OP(rt, op, &d, "vocab 0", NAMES(in, "vocab"));
    call_copy(&d, &c);
    d.in.shape[1] = d.out.shape[1] = ((int64_t)1 << 30) + 1;
    EXPECT_INVALID_OP(rt, op, &d, "vocab 2^30 + 1", NAMES(in, "vocab"));
    call_copy(&d, &c);
    set_strides(&d.in, 2000, 2);
    EXPECT_INVALID_OP(rt, op, &d, "column stride 2", NAMES(in, "column stride"));
    call_copy(&d, &c);
    set_strides(&d.in, 999, 1);
    EXPECT_INVALID_OP(rt, op, &d, "row stride < vocab", NAMES(in, "row stride"));
    if (is_sampler[op]) {
      call_copy(&d, &c);
      d.samples.t.dtype.bits = 64;
      EXPECT_INVALID_OP(rt, op, &d, "int64 samples", NAMES("samples", "int64", "int32"));
      call_copy(&d, &c);
      d.samples.shape[0] = 5;
      EXPECT_INVALID_OP(rt, op, &d, "samples [5]", NAMES("samples", "[5]", "[4]"));
      call_copy(&d, &c);
      d.samples.t.ndim = 2;
      d.samples.shape[1] = 1;
      EXPECT_INVALID_OP(rt, op, &d, "2-D samples", NAMES("samples"));
      call_copy(&d, &c);
      d.samples.t.data = (char *)IN_ADDR + 400;
      EXPECT_INVALID_OP(rt, op, &d, "samples inside the input", NAMES("samples", in));
    } else {
      call_copy(&d, &c);
      d.out.shape[1] = 999;
      EXPECT_INVALID_OP(rt, op, &d, "out [4, 999]", NAMES("out", "shape"));
      call_copy(&d, &c);
      d.out.shape[0] = 3;
      EXPECT_INVALID_OP(rt, op, &d, "out [3, 1000]", NAMES("out", "shape"));
      call_copy(&d, &c);
      set_strides(&d.out, 1000, 3);
      EXPECT_INVALID_OP(rt, op, &d, "out column stride 3", NAMES("out", "column stride"));
      call_copy(&d, &c);
      set_strides(&d.out, 500, 1);
      EXPECT_INVALID_OP(rt, op, &d, "out row stride 500", NAMES("out", "row stride"));
      call_copy(&d, &c);
      d.out.t.data = (char *)IN_ADDR + 4 * 10;
      EXPECT_INVALID_OP(rt, op, &d, "out shifted over the input", NAMES("out", in, "overlaps"));
      if (op != SOFTMAX) {
        call_copy(&d, &c);
        d.out.t.dtype.code = kDLBfloat;
        d.out.t.dtype.bits = 16;
        EXPECT_INVALID_OP(rt, op, &d, "out bf16, input f32", NAMES("out", "bfloat16", "float32"));
      } else {
        call_make(&d, kDLFloat, 16, 4, 1000);
        d.out.t.dtype.bits = 16; /* run_op resets softmax's out to float32: test through the API */
        poison_error();
        fi_status st = fi_softmax(rt, &d.in.t, NULL, 1.0, &d.out.t, NULL);
        FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "out") &&
                     strstr(fi_last_error(), "float32"),
                 "softmax f16 out: %s", fi_last_error());
      }
    }
    if (uses_k[op]) {
      call_copy(&d, &c);
      d.use_karr = 1;
      d.karr.t.dtype.code = kDLFloat;
      EXPECT_INVALID_OP(rt, op, &d, "float top_k_arr", NAMES("top_k_arr", "int32"));
      call_copy(&d, &c);
      d.use_karr = 1;
      d.karr.shape[0] = 3;
      EXPECT_INVALID_OP(rt, op, &d, "top_k_arr [3]", NAMES("top_k_arr", "[3]", "[4]"));
      call_copy(&d, &c);
      d.use_karr = 1;
      d.karr.t.data = is_sampler[op] ? SAMPLES_ADDR : OUT_ADDR;
      EXPECT_INVALID_OP(rt, op, &d, "output over top_k_arr", NAMES("top_k_arr", "overlaps"));
    }
    if (uses_p[op]) {
      const char *pn = op == SOFTMAX ? "temperature_arr" : op == MINP ? "min_p_arr" : "top_p_arr";
      call_copy(&d, &c);
      d.use_parr = 1;
      d.parr.t.dtype.code = kDLBfloat;
      d.parr.t.dtype.bits = 16;
      EXPECT_INVALID_OP(rt, op, &d, "bf16 parameter array", NAMES(pn, "float32"));
      call_copy(&d, &c);
      d.use_parr = 1;
      d.parr.shape[0] = 8;
      EXPECT_INVALID_OP(rt, op, &d, "parameter array [8]", NAMES(pn, "[8]"));
    }
  }
  fi_runtime_destroy(rt);
}

FT_TEST(sampling_scalars) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLFloat, 32, 4, 1000);
  const int kops[5] = {TOPK, KPL, KRENORM, KMASK, KPP};
  for (int i = 0; i < 5; i++) {
    call_copy(&d, &c);
    d.top_k = -1;
    EXPECT_INVALID_OP(rt, kops[i], &d, "top_k -1", NAMES("top_k", "-1"));
    d.use_karr = 1; /* with an array the scalar is not used */
    expect_valid(rt, &d, kops[i], "top_k -1 with an array");
  }
  const int pops[4] = {TOPP, KPL, PRENORM, KPP};
  const double badp[4] = {0.0, -0.5, 1.5, NAN};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      call_copy(&d, &c);
      d.top_p = badp[j];
      EXPECT_INVALID_OP(rt, pops[i], &d, "top_p out of (0, 1]", NAMES("top_p"));
      d.use_parr = 1;
      expect_valid(rt, &d, pops[i], "bad top_p with an array");
    }
  const double badm[3] = {-0.01, 1.01, NAN};
  for (int j = 0; j < 3; j++) {
    call_copy(&d, &c);
    d.min_p = badm[j];
    EXPECT_INVALID_OP(rt, MINP, &d, "min_p out of [0, 1]", NAMES("min_p"));
  }
  const double badt[4] = {0.0, -1.0, INFINITY, NAN};
  call_make(&d, kDLFloat, 32, 4, 1000);
  for (int j = 0; j < 4; j++) {
    poison_error();
    fi_status st = fi_softmax(rt, &d.in.t, NULL, badt[j], &d.out.t, NULL);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "temperature") &&
                 strstr(fi_last_error(), "fi_softmax"),
             "temperature %g: %s", badt[j], fi_last_error());
  }
  fi_runtime_destroy(rt);
}

/* ---- keys ---- */

FT_TEST(sampling_selection_is_registered) {
  FT_CHECK(jit_registry_find("sampling") == &jit_op_sampling);
  const int n = jit_op_sampling.config_count();
  /* each op x dtype x access width x cluster, and the key-range search of the ops that
   * search, on float32 */
  int searching = 0;
  for (int op = 0; op < FI_SMP_OP_COUNT; op++) searching += jit_sampling_has_select(op);
  FT_CHECK_EQ_INT(n, FI_SMP_OP_COUNT * 3 * 2 * 3 + searching * 2 * 3, "configurations");
  const int dts[3] = {JIT_DT_F16, JIT_DT_BF16, JIT_DT_F32};
  const int cls[3] = {1, 4, 8};
  for (int op = 0; op < FI_SMP_OP_COUNT; op++)
    for (int sel = 0; sel < 2; sel++)
      for (int d = 0; d < 3; d++)
        for (int vec = 1; vec <= 4; vec *= 4)
          for (int c = 0; c < 3; c++) {
            jit_key k;
            jit_sampling_select(op, dts[d], vec, cls[c], sel, &k);
            FT_CHECK(op_registers(&jit_op_sampling, &k) && jit_sampling_valid(&k),
                     "op %d sel %d dtype %d vec %d cluster %d", op, sel, dts[d], vec, cls[c]);
            FT_CHECK(k.v[SMP_P_SEL] == (sel && jit_sampling_has_select(op) && dts[d] == JIT_DT_F32),
                     "op %d sel %d dtype %d", op, sel, dts[d]);
          }
  for (int i = 0; i < n; i++) {
    jit_key k;
    jit_op_sampling.config(i, &k);
    FT_CHECK(jit_sampling_valid(&k), "configuration %d invalid", i);
    for (int j = 0; j < i; j++) {
      jit_key r;
      jit_op_sampling.config(j, &r);
      FT_CHECK(memcmp(r.v, k.v, sizeof r.v) != 0, "configurations %d and %d are the same", j, i);
    }
  }
}

FT_TEST(sampling_key_canonical_and_render) {
  jit_key k;
  jit_sampling_select(FI_SMP_TOPK, JIT_DT_F32, 4, 8, 1, &k);
  char canon[256];
  FT_REQUIRE(jit_key_canonical(&k, canon, sizeof canon) > 0);
  FT_CHECK(strcmp(canon, "op=sampling;kind=2;dtype=f32;vec=4;threads=256;cluster=8;sel=1") == 0,
           "%s", canon);
  jit_key back;
  FT_REQUIRE(jit_key_parse(canon, &back) == 0, "%s does not parse", canon);
  FT_CHECK(back.op == k.op && memcmp(back.v, k.v, sizeof k.v) == 0, "round trip of %s", canon);
  char *src = NULL, err[256];
  FT_REQUIRE(jit_render(&k, "fi_sampling_0011223344556677", &src, err, sizeof err) == 0, "%s", err);
  FT_CHECK(strstr(src, "#include \"sampling.cuh\"") && strstr(src, "__cluster_dims__(8, 1, 1)") &&
               strstr(src, "sampling_op<2, float, 4, 256, 8, 1>") &&
               strstr(src, "fi::smp::no_clusters()"),
           "%s", src);
  free(src);
  jit_sampling_select(FI_SMP_SAMPLE, JIT_DT_BF16, 1, 1, 1, &k);
  FT_REQUIRE(jit_render(&k, "fi_sampling_0011223344556677", &src, err, sizeof err) == 0, "%s", err);
  FT_CHECK(!strstr(src, "__cluster_dims__") && strstr(src, "sampling_op<1, fi_bf16, 1, 256, 1, 0>"),
           "%s", src);
  free(src);
}

/* Stored tactics (issue 43): "cluster=C;select=S" round-trips, anything else is refused;
 * the key's text names the op as the shape text spells it. The tuner measuring them and a
 * call taking one: tests/gpu/gpu_autotune.c. */
FT_TEST(sampling_tactics_parse_and_name_their_key) {
  static const int cl[3] = {1, 4, 8};
  for (int c = 0; c < 3; c++)
    for (int s = 0; s < 2; s++) {
      const rt_sampling_tactic t = {cl[c], s};
      rt_sampling_tactic back;
      char text[64];
      FT_REQUIRE(rt_sampling_tactic_format(&t, text, sizeof text) == 0);
      FT_CHECK(rt_sampling_tactic_parse(text, &back) == 0 && back.cluster == t.cluster && back.select == t.select,
               "%s", text);
    }
  static const char *const bad[] = {"cluster=2;select=0", "cluster=8;select=2", "cluster=8", "cluster=8;select=1;x=1",
                                    "select=1;cluster=8", ""};
  rt_sampling_tactic t;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    FT_CHECK(rt_sampling_tactic_parse(bad[i], &t) == -1, "'%s'", bad[i]);
  FT_CHECK(rt_sampling_tactic_parse(NULL, &t) == -1);
  for (int op = 0; op < FI_SMP_OP_COUNT; op++) {
    FT_REQUIRE(rt_sampling_op_name(op));
    FT_CHECK_EQ_INT(rt_sampling_op_of(rt_sampling_op_name(op)), op);
  }
  FT_CHECK(!rt_sampling_op_name(FI_SMP_OP_COUNT) && rt_sampling_op_of("top_q") == -1);
  /* the samplers take stored tactics; softmax, renorm and mask keep the rule */
  for (int op = 0; op < FI_SMP_OP_COUNT; op++)
    FT_CHECK_EQ_INT(rt_sampling_tuned(op), op == FI_SMP_SAMPLE || op == FI_SMP_TOPK || op == FI_SMP_TOPP ||
                                               op == FI_SMP_MINP || op == FI_SMP_TOPK_TOPP_LOGITS ||
                                               op == FI_SMP_TOPK_TOPP_PROBS,
                    "%s", rt_sampling_op_name(op));
  char shape[128];
  rt_sampling_tactic_shape((const int64_t[RT_SAMPLING_TACTIC_FIELDS]){FI_SMP_TOPK, JIT_DT_F32, 128256}, shape,
                           sizeof shape);
  FT_CHECK_EQ_STR(shape, "op=top_k;dtype=f32;vocab=128256");
}


/* fi_chain_speculative_sampling's checks: valid calls (with and without the counters, S 0,
 * batch 0) reach the device layer; every bad tensor is refused naming it. The kernel itself:
 * tests/test_spec_emu.cc (emulator), tests/gpu/gpu_sampling.c. */
typedef struct spec_call {
  DLTensor dp, ids, tp, out, acc, emit;
  int64_t s_dp[3], s_ids[2], s_tp[3], s_out[2], s_cnt[1], st_dp[3];
} spec_call;

static void spec_make(spec_call *c, int64_t B, int64_t S, int64_t V, int dev) {
  memset(c, 0, sizeof *c);
  c->s_dp[0] = B, c->s_dp[1] = S, c->s_dp[2] = V;
  c->s_ids[0] = B, c->s_ids[1] = S;
  c->s_tp[0] = B, c->s_tp[1] = S + 1, c->s_tp[2] = V;
  c->s_out[0] = B, c->s_out[1] = S + 1;
  c->s_cnt[0] = B;
  DLTensor *t[6] = {&c->dp, &c->ids, &c->tp, &c->out, &c->acc, &c->emit};
  int64_t *shape[6] = {c->s_dp, c->s_ids, c->s_tp, c->s_out, c->s_cnt, c->s_cnt};
  const int nd[6] = {3, 2, 3, 2, 1, 1}, f32[6] = {1, 0, 1, 0, 0, 0};
  for (int i = 0; i < 6; i++) {
    t[i]->data = (void *)(uintptr_t)(0x10000000ull * (uint64_t)(i + 1));
    t[i]->device.device_type = kDLCUDA;
    t[i]->device.device_id = dev;
    t[i]->ndim = nd[i];
    t[i]->dtype = (DLDataType){(uint8_t)(f32[i] ? kDLFloat : kDLInt), 32, 1};
    t[i]->shape = shape[i];
  }
}

static fi_status spec_run(fi_runtime *rt, spec_call *c, int counters) {
  return fi_chain_speculative_sampling(rt, &c->dp, &c->ids, &c->tp, &c->out, counters ? &c->acc : NULL,
                                       counters ? &c->emit : NULL, 1, 2, NULL);
}

FT_TEST(spec_sampling_arguments_named) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  spec_call c;
  static const int64_t shapes[3][3] = {{32, 4, 128256}, {1, 0, 7}, {3, 1024, 16}};
  for (int s = 0; s < 3; s++)
    for (int counters = 0; counters < 2; counters++) {
      spec_make(&c, shapes[s][0], shapes[s][1], shapes[s][2], NO_SUCH_DEVICE);
      FT_CHECK_EQ_INT(spec_run(rt, &c, counters), FI_ERR_NO_DEVICE, "shape %d counters %d: %s", s, counters,
                      fi_last_error());
    }
  spec_make(&c, 0, 4, 100, NO_SUCH_DEVICE);
  FT_CHECK_EQ_INT(spec_run(rt, &c, 1), FI_OK, "batch 0 launches nothing: %s", fi_last_error());
  /* no draft tokens as a framework gives them: no data, strides of max(size, 1) */
  spec_make(&c, 4, 0, 100, NO_SUCH_DEVICE);
  int64_t dp_strides[3] = {100, 100, 1}, id_strides[2] = {1, 1};
  c.dp.data = c.ids.data = NULL;
  c.dp.strides = dp_strides, c.ids.strides = id_strides;
  FT_CHECK_EQ_INT(spec_run(rt, &c, 1), FI_ERR_NO_DEVICE, "S 0 from a framework: %s", fi_last_error());
  struct {
    const char *what, *named;
  } bad[] = {{"target_probs' second dimension S", "target_probs"},
             {"draft_token_ids as float32", "draft_token_ids"},
             {"output_token_ids strided", "output_token_ids"},
             {"accepted_num of batch + 1", "accepted_num"},
             {"emitted_num overlapping output_token_ids", "emitted_num"},
             {"output_token_ids overlapping draft_probs", "output_token_ids"},
             {"draft_probs as float16", "draft_probs"},
             {"1025 draft tokens", "draft_probs"},
             {"target_probs on another device", "target_probs"},
             {"accepted_num with stride 0 (every request one element)", "accepted_num"},
             {"rt NULL", "rt"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    spec_make(&c, 8, 3, 1000, 0);
    int64_t strided[2] = {8, 2}, acc_shape[1] = {9}, zero[1] = {0};
    fi_runtime *r = rt;
    switch (i) {
      case 0: c.s_tp[1] = 3; break;
      case 1: c.ids.dtype = (DLDataType){kDLFloat, 32, 1}; break;
      case 2: c.out.strides = strided; break;
      case 3: c.acc.shape = acc_shape; break;
      case 4: c.emit.data = c.out.data; break;
      case 5: c.out.data = (char *)c.dp.data + 64; break;
      case 6: c.dp.dtype = (DLDataType){kDLFloat, 16, 1}; break;
      case 7: spec_make(&c, 2, 1025, 8, 0); break;
      case 8: c.tp.device.device_id = 1; break;
      case 9: c.acc.strides = zero; break;
      default: r = NULL;
    }
    FT_CHECK_EQ_INT(spec_run(r, &c, 1), FI_ERR_INVALID_ARGUMENT, "%s", bad[i].what);
    FT_CHECK_STR_HAS(fi_last_error(), bad[i].named, "%s", bad[i].what);
  }
  fi_runtime_destroy(rt);
}
