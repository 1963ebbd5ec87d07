/* test_cascade_args.c: fi_merge_state, fi_merge_state_in_place and fi_merge_states on a machine
 * with no GPU: bad arguments refused by name before any driver call, and the kernel choice against the registry. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fi_runtime.h"
#include "ft.h"
#include "test_args_util.h"
#include "jit_registry.h"
#include "ops_cascade.h"
#include "rt_internal.h"

/* Fake device addresses, 16 MiB apart: validation must refuse bad arguments
 * before a driver sees them, so they are never dereferenced. */
#define ADDR(i) ((void *)(uintptr_t)(0x1000000u * (unsigned)((i) + 1)))

typedef struct tens {
  DLTensor t;
  int64_t shape[4];
  int64_t strides[4];
} tens;

/* A compact tensor of ndim dims on CUDA device 0. */
static void mk(tens *x, void *data, DLDataTypeCode code, int bits, int ndim, int64_t s0, int64_t s1,
               int64_t s2, int64_t s3) {
  memset(x, 0, sizeof *x);
  x->shape[0] = s0, x->shape[1] = s1, x->shape[2] = s2, x->shape[3] = s3;
  x->t.data = data;
  x->t.device.device_type = kDLCUDA;
  x->t.ndim = ndim;
  x->t.dtype.code = (uint8_t)code;
  x->t.dtype.bits = (uint8_t)bits;
  x->t.dtype.lanes = 1;
  x->t.shape = x->shape;
}
/* Gives x explicit strides. */
static void strided(tens *x, int64_t a, int64_t b, int64_t c, int64_t d) {
  x->strides[0] = a, x->strides[1] = b, x->strides[2] = c, x->strides[3] = d;
  x->t.strides = x->strides;
}

/* Valid arguments of fi_merge_state: v [4, 8, 128] bf16, s [4, 8] float32,
 * each in its own buffer; in place uses a, sa, b, sb and mask. */
typedef struct two {
  tens a, sa, b, sb, o, so, mask;
} two;
static void two_make(two *c) {
  mk(&c->a, ADDR(0), kDLBfloat, 16, 3, 4, 8, 128, 0);
  mk(&c->b, ADDR(1), kDLBfloat, 16, 3, 4, 8, 128, 0);
  mk(&c->o, ADDR(2), kDLBfloat, 16, 3, 4, 8, 128, 0);
  mk(&c->sa, ADDR(3), kDLFloat, 32, 2, 4, 8, 0, 0);
  mk(&c->sb, ADDR(4), kDLFloat, 32, 2, 4, 8, 0, 0);
  mk(&c->so, ADDR(5), kDLFloat, 32, 2, 4, 8, 0, 0);
  mk(&c->mask, ADDR(6), kDLUInt, 8, 1, 4, 0, 0, 0);
}
/* The DLTensors point into the struct: a copy must re-point them. */
static void two_copy(two *d, const two *s) {
  *d = *s;
  tens *dt[7] = {&d->a, &d->sa, &d->b, &d->sb, &d->o, &d->so, &d->mask};
  const tens *st[7] = {&s->a, &s->sa, &s->b, &s->sb, &s->o, &s->so, &s->mask};
  for (int i = 0; i < 7; i++) {
    dt[i]->t.shape = dt[i]->shape;
    if (st[i]->t.strides) dt[i]->t.strides = dt[i]->strides;
  }
}

/* Valid arguments of fi_merge_states: v [4, 3, 8, 128], s [4, 3, 8]. */
typedef struct many {
  tens v, s, o, so;
} many;
static void many_make(many *c) {
  mk(&c->v, ADDR(0), kDLFloat, 16, 4, 4, 3, 8, 128);
  mk(&c->s, ADDR(1), kDLFloat, 32, 3, 4, 3, 8, 0);
  mk(&c->o, ADDR(2), kDLFloat, 16, 3, 4, 8, 128, 0);
  mk(&c->so, ADDR(3), kDLFloat, 32, 2, 4, 8, 0, 0);
}
static void many_copy(many *d, const many *s) {
  *d = *s;
  tens *dt[4] = {&d->v, &d->s, &d->o, &d->so};
  const tens *st[4] = {&s->v, &s->s, &s->o, &s->so};
  for (int i = 0; i < 4; i++) {
    dt[i]->t.shape = dt[i]->shape;
    if (st[i]->t.strides) dt[i]->t.strides = dt[i]->strides;
  }
}

/* So a check reads the message of the call under test, not an older one. */
static fi_status call_two(fi_runtime *rt, two *c, int with_s_out) {
  return fi_merge_state(rt, &c->a.t, &c->sa.t, &c->b.t, &c->sb.t, &c->o.t,
                        with_s_out ? &c->so.t : NULL, NULL);
}
static fi_status call_in_place(fi_runtime *rt, two *c, int with_mask) {
  return fi_merge_state_in_place(rt, &c->a.t, &c->sa.t, &c->b.t, &c->sb.t,
                                 with_mask ? &c->mask.t : NULL, NULL);
}
static fi_status call_many(fi_runtime *rt, many *c, int with_s_out) {
  return fi_merge_states(rt, &c->v.t, &c->s.t, &c->o.t, with_s_out ? &c->so.t : NULL, NULL);
}

/* The call must fail with INVALID_ARGUMENT and a message naming every one of names. */
#define EXPECT_INVALID(expr, what, names)                                                    \
  do {                                                                                       \
    poison_error();                                                                          \
    fi_status st_ = (expr);                                                                  \
    FT_CHECK(st_ == FI_ERR_INVALID_ARGUMENT, "%s: got %s (%s)", what, fi_status_string(st_), \
             fi_last_error());                                                               \
    FT_CHECK(names_all(fi_last_error(), names), "%s: message does not name it: %s", what,    \
             fi_last_error());                                                               \
  } while (0)

/* Valid arguments get past validation to the device layer, which has no
 * GPU here: NO_DEVICE, naming CUDA. */
#define EXPECT_REACHES_DEVICE(expr, what)                                                   \
  do {                                                                                      \
    poison_error();                                                                         \
    fi_status st_ = (expr);                                                                 \
    FT_CHECK(st_ == FI_ERR_NO_DEVICE && strstr(fi_last_error(), "CUDA"), "%s: got %s (%s)", \
             what, fi_status_string(st_), fi_last_error());                                 \
  } while (0)

/* ---- fi_merge_state ---- */

FT_TEST(merge_state_nulls_and_devices) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  two c, d;
  two_make(&c);
  EXPECT_INVALID(call_two(NULL, &c, 1), "rt NULL", NAMES("fi_merge_state", "rt"));
  EXPECT_INVALID(fi_merge_state(rt, NULL, &c.sa.t, &c.b.t, &c.sb.t, &c.o.t, &c.so.t, NULL),
                 "v_a NULL", NAMES("v_a", "NULL"));
  EXPECT_INVALID(fi_merge_state(rt, &c.a.t, NULL, &c.b.t, &c.sb.t, &c.o.t, &c.so.t, NULL),
                 "s_a NULL", NAMES("s_a", "NULL"));
  EXPECT_INVALID(fi_merge_state(rt, &c.a.t, &c.sa.t, NULL, &c.sb.t, &c.o.t, &c.so.t, NULL),
                 "v_b NULL", NAMES("v_b", "NULL"));
  EXPECT_INVALID(fi_merge_state(rt, &c.a.t, &c.sa.t, &c.b.t, NULL, &c.o.t, &c.so.t, NULL),
                 "s_b NULL", NAMES("s_b", "NULL"));
  EXPECT_INVALID(fi_merge_state(rt, &c.a.t, &c.sa.t, &c.b.t, &c.sb.t, NULL, &c.so.t, NULL),
                 "v_out NULL", NAMES("v_out", "NULL"));
  two_copy(&d, &c);
  d.b.t.data = NULL;
  EXPECT_INVALID(call_two(rt, &d, 1), "v_b data NULL", NAMES("v_b", "data"));
  two_copy(&d, &c);
  d.so.t.shape = NULL;
  EXPECT_INVALID(call_two(rt, &d, 1), "s_out shape NULL", NAMES("s_out", "shape"));

  /* CPU tensors, each argument in turn. */
  const char *names[6] = {"v_a", "s_a", "v_b", "s_b", "v_out", "s_out"};
  for (int i = 0; i < 6; i++) {
    two_copy(&d, &c);
    tens *t[6] = {&d.a, &d.sa, &d.b, &d.sb, &d.o, &d.so};
    t[i]->t.device.device_type = kDLCPU;
    char what[64];
    snprintf(what, sizeof what, "%s on the CPU", names[i]);
    EXPECT_INVALID(call_two(rt, &d, 1), what, NAMES(names[i], "kDLCPU"));
    t[i]->t.device.device_type = kDLCUDA;
    t[i]->t.device.device_id = 1;
    snprintf(what, sizeof what, "%s on device 1", names[i]);
    if (i > 0) EXPECT_INVALID(call_two(rt, &d, 1), what, NAMES(names[i], "v_a"));
  }
  two_copy(&d, &c);
  d.sb.t.device.device_type = kDLROCM;
  EXPECT_INVALID(call_two(rt, &d, 1), "s_b on ROCm", NAMES("s_b"));
  fi_runtime_destroy(rt);
}

FT_TEST(merge_state_dtypes_and_dims) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  two c, d;
  two_make(&c);
  two_copy(&d, &c);
  d.a.t.dtype.bits = 64;
  d.a.t.dtype.code = kDLFloat;
  d.b.t.dtype = d.o.t.dtype = d.a.t.dtype;
  EXPECT_INVALID(call_two(rt, &d, 1), "v float64", NAMES("v_a", "float64"));
  two_copy(&d, &c);
  d.a.t.dtype.code = d.b.t.dtype.code = d.o.t.dtype.code = kDLInt;
  EXPECT_INVALID(call_two(rt, &d, 1), "v int16", NAMES("v_a", "int16"));
  two_copy(&d, &c);
  d.b.t.dtype.code = kDLFloat;
  EXPECT_INVALID(call_two(rt, &d, 1), "v_b float16, v_a bfloat16", NAMES("v_b", "float16", "bfloat16"));
  two_copy(&d, &c);
  d.o.t.dtype.bits = 32, d.o.t.dtype.code = kDLFloat;
  EXPECT_INVALID(call_two(rt, &d, 1), "v_out float32", NAMES("v_out", "float32"));
  /* LSEs must be float32, whatever v is. */
  const struct {
    DLDataTypeCode code;
    int bits;
    const char *name;
  } bad_s[] = {{kDLFloat, 16, "float16"}, {kDLBfloat, 16, "bfloat16"}, {kDLFloat, 64, "float64"},
               {kDLInt, 32, "int32"}};
  for (int i = 0; i < 4; i++) {
    two_copy(&d, &c);
    d.sa.t.dtype.code = (uint8_t)bad_s[i].code, d.sa.t.dtype.bits = (uint8_t)bad_s[i].bits;
    EXPECT_INVALID(call_two(rt, &d, 1), bad_s[i].name, NAMES("s_a", bad_s[i].name, "float32"));
    two_copy(&d, &c);
    d.sb.t.dtype.code = (uint8_t)bad_s[i].code, d.sb.t.dtype.bits = (uint8_t)bad_s[i].bits;
    EXPECT_INVALID(call_two(rt, &d, 1), bad_s[i].name, NAMES("s_b", bad_s[i].name));
    two_copy(&d, &c);
    d.so.t.dtype.code = (uint8_t)bad_s[i].code, d.so.t.dtype.bits = (uint8_t)bad_s[i].bits;
    EXPECT_INVALID(call_two(rt, &d, 1), bad_s[i].name, NAMES("s_out", bad_s[i].name));
  }
  two_copy(&d, &c);
  d.sa.t.dtype.lanes = 2;
  EXPECT_INVALID(call_two(rt, &d, 1), "s_a float32x2", NAMES("s_a", "float32x2"));
  /* Dimension counts. */
  two_copy(&d, &c);
  d.a.t.ndim = 2;
  EXPECT_INVALID(call_two(rt, &d, 1), "v_a 2-D", NAMES("v_a", "dimensions"));
  two_copy(&d, &c);
  d.o.t.ndim = 4;
  EXPECT_INVALID(call_two(rt, &d, 1), "v_out 4-D", NAMES("v_out", "dimensions"));
  two_copy(&d, &c);
  d.sb.t.ndim = 3;
  EXPECT_INVALID(call_two(rt, &d, 1), "s_b 3-D", NAMES("s_b", "dimensions"));
  two_copy(&d, &c);
  d.sa.t.ndim = 1;
  EXPECT_INVALID(call_two(rt, &d, 1), "s_a 1-D", NAMES("s_a", "dimensions"));
  fi_runtime_destroy(rt);
}

FT_TEST(merge_state_shape_mismatches) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  two c, d;
  two_make(&c);
  const struct {
    int which, dim;
    int64_t value;
    const char *name;
  } bad[] = {
      {1, 0, 5, "s_a"},   {1, 1, 7, "s_a"},   {2, 0, 3, "v_b"},   {2, 1, 9, "v_b"},
      {2, 2, 64, "v_b"},  {3, 0, 1, "s_b"},   {3, 1, 16, "s_b"},  {4, 1, 8 * 2, "v_out"},
      {4, 2, 127, "v_out"}, {5, 0, 8, "s_out"}, {5, 1, 1, "s_out"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    two_copy(&d, &c);
    tens *t[6] = {&d.a, &d.sa, &d.b, &d.sb, &d.o, &d.so};
    t[bad[i].which]->shape[bad[i].dim] = bad[i].value;
    char what[64], num[32];
    snprintf(what, sizeof what, "%s shape[%d] = %lld", bad[i].name, bad[i].dim, (long long)bad[i].value);
    snprintf(num, sizeof num, "%lld", (long long)bad[i].value);
    EXPECT_INVALID(call_two(rt, &d, 1), what, NAMES(bad[i].name, num, "shape"));
  }
  /* v_a's shape is the reference: a wrong v_a is reported against the others. */
  two_copy(&d, &c);
  d.a.shape[2] = 96;
  EXPECT_INVALID(call_two(rt, &d, 1), "v_a head_dim 96", NAMES("v_b", "96", "128"));
  two_copy(&d, &c);
  d.a.shape[2] = d.b.shape[2] = d.o.shape[2] = 0;
  EXPECT_INVALID(call_two(rt, &d, 1), "head_dim 0", NAMES("v_a", "head_dim"));
  two_copy(&d, &c);
  d.sa.shape[0] = -4;
  EXPECT_INVALID(call_two(rt, &d, 1), "negative seq", NAMES("s_a", "negative"));
  two_copy(&d, &c);
  d.a.shape[0] = d.b.shape[0] = d.o.shape[0] = d.sa.shape[0] = d.sb.shape[0] = d.so.shape[0] =
      (int64_t)1 << 28;
  EXPECT_INVALID(call_two(rt, &d, 1), "seq x heads 2^31", NAMES("v_a", "2^31"));
  fi_runtime_destroy(rt);
}

FT_TEST(merge_state_strides_and_overlaps) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  two c, d;
  two_make(&c);
  /* head_dim not contiguous. */
  two_copy(&d, &c);
  strided(&d.b, 8 * 256, 256, 2, 0);
  EXPECT_INVALID(call_two(rt, &d, 1), "v_b head_dim stride 2", NAMES("v_b", "stride"));
  two_copy(&d, &c);
  strided(&d.o, 8 * 256, 256, 2, 0);
  EXPECT_INVALID(call_two(rt, &d, 1), "v_out head_dim stride 2", NAMES("v_out", "stride"));
  /* Output rows that overlap each other; inputs may (stride 0 broadcasts). */
  two_copy(&d, &c);
  strided(&d.o, 8 * 128, 64, 1, 0);
  EXPECT_INVALID(call_two(rt, &d, 1), "v_out head stride 64 < 128", NAMES("v_out", "overlap"));
  two_copy(&d, &c);
  strided(&d.o, 4 * 128, 128, 1, 0);
  EXPECT_INVALID(call_two(rt, &d, 1), "v_out seq stride 4 heads", NAMES("v_out", "overlap"));
  two_copy(&d, &c);
  strided(&d.so, 0, 1, 0, 0);
  EXPECT_INVALID(call_two(rt, &d, 1), "s_out seq stride 0", NAMES("s_out", "overlap"));
  two_copy(&d, &c);
  strided(&d.a, 0, 128, 1, 0);
  strided(&d.sb, 0, 0, 0, 0);
  EXPECT_REACHES_DEVICE(call_two(rt, &d, 1), "broadcast inputs (stride 0)");
  /* [heads, seq, D] memory seen as [seq, heads, D]: no overlap. */
  two_copy(&d, &c);
  strided(&d.o, 128, 4 * 128, 1, 0);
  strided(&d.so, 1, 4, 0, 0);
  EXPECT_REACHES_DEVICE(call_two(rt, &d, 1), "transposed outputs");
  /* Negative stride, and a stride whose extent overflows. */
  two_copy(&d, &c);
  strided(&d.a, -1024, 128, 1, 0);
  EXPECT_INVALID(call_two(rt, &d, 1), "negative stride", NAMES("v_a", "negative"));
  two_copy(&d, &c);
  strided(&d.b, INT64_MAX / 2, 128, 1, 0);
  EXPECT_INVALID(call_two(rt, &d, 1), "huge stride", NAMES("v_b", "2^63"));

  /* Outputs against inputs: exactly the same tensor is in place... */
  two_copy(&d, &c);
  d.o.t.data = d.a.t.data;
  d.so.t.data = d.sb.t.data;
  EXPECT_REACHES_DEVICE(call_two(rt, &d, 1), "v_out is v_a, s_out is s_b");
  two_copy(&d, &c);
  d.o.t.data = d.b.t.data;
  EXPECT_REACHES_DEVICE(call_two(rt, &d, 0), "v_out is v_b");
  /* ... a shifted or restrided view of one is not. */
  two_copy(&d, &c);
  d.o.t.data = d.a.t.data;
  d.o.t.byte_offset = 128 * 2;
  EXPECT_INVALID(call_two(rt, &d, 1), "v_out = v_a + 1 row", NAMES("v_out", "v_a", "overlaps"));
  two_copy(&d, &c);
  d.o.t.data = d.b.t.data;
  strided(&d.o, 8 * 256, 256, 1, 0);
  EXPECT_INVALID(call_two(rt, &d, 1), "v_out restrides v_b", NAMES("v_out", "v_b"));
  two_copy(&d, &c);
  d.so.t.data = d.sa.t.data;
  d.so.t.byte_offset = 4;
  EXPECT_INVALID(call_two(rt, &d, 1), "s_out = s_a + 1", NAMES("s_out", "s_a"));
  /* An output over the other kind of tensor. */
  two_copy(&d, &c);
  d.so.t.data = d.a.t.data;
  EXPECT_INVALID(call_two(rt, &d, 1), "s_out inside v_a", NAMES("s_out", "v_a"));
  two_copy(&d, &c);
  d.o.t.data = d.sb.t.data;
  EXPECT_INVALID(call_two(rt, &d, 1), "v_out over s_b", NAMES("v_out", "s_b"));
  two_copy(&d, &c);
  d.so.t.data = d.o.t.data;
  d.so.t.byte_offset = 100;
  EXPECT_INVALID(call_two(rt, &d, 1), "s_out inside v_out", NAMES("v_out", "s_out"));
  /* Inputs may overlap each other. */
  two_copy(&d, &c);
  d.b.t.data = d.a.t.data;
  d.sb.t.data = d.sa.t.data;
  EXPECT_REACHES_DEVICE(call_two(rt, &d, 1), "v_b is v_a");
  fi_runtime_destroy(rt);
}

FT_TEST(merge_state_valid_arguments_reach_the_device) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  two c, d;
  two_make(&c);
  EXPECT_REACHES_DEVICE(call_two(rt, &c, 1), "bf16");
  EXPECT_REACHES_DEVICE(call_two(rt, &c, 0), "s_out NULL");
  const DLDataTypeCode codes[2] = {kDLFloat, kDLFloat};
  const int bits[2] = {16, 32};
  for (int i = 0; i < 2; i++) {
    two_copy(&d, &c);
    tens *v[3] = {&d.a, &d.b, &d.o};
    for (int k = 0; k < 3; k++) v[k]->t.dtype.code = (uint8_t)codes[i], v[k]->t.dtype.bits = (uint8_t)bits[i];
    EXPECT_REACHES_DEVICE(call_two(rt, &d, 1), bits[i] == 16 ? "f16" : "f32");
  }
  /* Odd head_dim, misaligned start. */
  two_copy(&d, &c);
  d.a.shape[2] = d.b.shape[2] = d.o.shape[2] = 72;
  d.a.t.byte_offset = 2;
  EXPECT_REACHES_DEVICE(call_two(rt, &d, 1), "head_dim 72, misaligned");
  fi_runtime_destroy(rt);
}

/* ---- fi_merge_state_in_place ---- */

FT_TEST(merge_state_in_place_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  two c, d;
  two_make(&c);
  EXPECT_REACHES_DEVICE(call_in_place(rt, &c, 0), "no mask");
  EXPECT_REACHES_DEVICE(call_in_place(rt, &c, 1), "uint8 mask");
  two_copy(&d, &c);
  d.mask.t.dtype.code = 6; /* kDLBool */
  EXPECT_REACHES_DEVICE(call_in_place(rt, &d, 1), "bool mask");
  two_copy(&d, &c);
  strided(&d.mask, 0, 0, 0, 0);
  EXPECT_REACHES_DEVICE(call_in_place(rt, &d, 1), "broadcast mask");

  EXPECT_INVALID(fi_merge_state_in_place(rt, &c.a.t, NULL, &c.b.t, &c.sb.t, NULL, NULL), "s NULL",
                 NAMES("fi_merge_state_in_place", "s", "NULL"));
  EXPECT_INVALID(fi_merge_state_in_place(rt, NULL, &c.sa.t, &c.b.t, &c.sb.t, NULL, NULL), "v NULL",
                 NAMES("v", "NULL"));
  EXPECT_INVALID(fi_merge_state_in_place(rt, &c.a.t, &c.sa.t, NULL, &c.sb.t, NULL, NULL),
                 "v_other NULL", NAMES("v_other", "NULL"));
  EXPECT_INVALID(fi_merge_state_in_place(rt, &c.a.t, &c.sa.t, &c.b.t, NULL, NULL, NULL),
                 "s_other NULL", NAMES("s_other", "NULL"));
  EXPECT_INVALID(fi_merge_state_in_place(NULL, &c.a.t, &c.sa.t, &c.b.t, &c.sb.t, NULL, NULL),
                 "rt NULL", NAMES("rt"));
  /* The mask: length, dtype, dims, device, data. */
  two_copy(&d, &c);
  d.mask.shape[0] = 5;
  EXPECT_INVALID(call_in_place(rt, &d, 1), "mask of 5", NAMES("mask", "5", "4"));
  two_copy(&d, &c);
  d.mask.shape[0] = 32;
  EXPECT_INVALID(call_in_place(rt, &d, 1), "mask of seq x heads", NAMES("mask", "32"));
  two_copy(&d, &c);
  d.mask.t.dtype.code = kDLInt, d.mask.t.dtype.bits = 32;
  EXPECT_INVALID(call_in_place(rt, &d, 1), "mask int32", NAMES("mask", "int32", "uint8"));
  two_copy(&d, &c);
  d.mask.t.dtype.code = kDLFloat, d.mask.t.dtype.bits = 32;
  EXPECT_INVALID(call_in_place(rt, &d, 1), "mask float32", NAMES("mask", "float32"));
  two_copy(&d, &c);
  d.mask.t.dtype.code = kDLInt, d.mask.t.dtype.bits = 8;
  EXPECT_INVALID(call_in_place(rt, &d, 1), "mask int8", NAMES("mask", "int8"));
  two_copy(&d, &c);
  d.mask.t.ndim = 2;
  d.mask.shape[1] = 8;
  EXPECT_INVALID(call_in_place(rt, &d, 1), "mask 2-D", NAMES("mask", "dimensions"));
  two_copy(&d, &c);
  d.mask.t.device.device_type = kDLCPU;
  EXPECT_INVALID(call_in_place(rt, &d, 1), "mask on the CPU", NAMES("mask", "kDLCPU"));
  two_copy(&d, &c);
  d.mask.t.device.device_id = 2;
  EXPECT_INVALID(call_in_place(rt, &d, 1), "mask on device 2", NAMES("mask"));
  two_copy(&d, &c);
  d.mask.t.data = NULL;
  EXPECT_INVALID(call_in_place(rt, &d, 1), "mask data NULL", NAMES("mask", "data"));
  /* Overlaps: the mask inside an output; v_other a shifted v; v over s. */
  two_copy(&d, &c);
  d.mask.t.data = d.sa.t.data;
  EXPECT_INVALID(call_in_place(rt, &d, 1), "mask inside s", NAMES("mask", "s"));
  two_copy(&d, &c);
  d.b.t.data = d.a.t.data;
  d.b.t.byte_offset = 256;
  EXPECT_INVALID(call_in_place(rt, &d, 0), "v_other = v + 1 row", NAMES("v", "v_other"));
  two_copy(&d, &c);
  d.sa.t.data = d.a.t.data;
  EXPECT_INVALID(call_in_place(rt, &d, 0), "s inside v", NAMES("v", "s"));
  /* Shapes and dtypes name the in-place arguments. */
  two_copy(&d, &c);
  d.sb.shape[1] = 9;
  EXPECT_INVALID(call_in_place(rt, &d, 0), "s_other shape", NAMES("s_other", "9"));
  two_copy(&d, &c);
  d.sa.t.dtype.bits = 16;
  EXPECT_INVALID(call_in_place(rt, &d, 0), "s float16", NAMES("s", "float16", "float32"));
  two_copy(&d, &c);
  d.b.t.dtype.code = kDLFloat;
  EXPECT_INVALID(call_in_place(rt, &d, 0), "v_other float16", NAMES("v_other", "float16"));
  fi_runtime_destroy(rt);
}

/* ---- fi_merge_states ---- */

FT_TEST(merge_states_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  many c, d;
  many_make(&c);
  EXPECT_REACHES_DEVICE(call_many(rt, &c, 1), "f16, N 3");
  EXPECT_REACHES_DEVICE(call_many(rt, &c, 0), "s_out NULL");
  many_copy(&d, &c);
  d.v.shape[1] = d.s.shape[1] = 1;
  EXPECT_REACHES_DEVICE(call_many(rt, &d, 1), "N 1");

  EXPECT_INVALID(call_many(NULL, &c, 1), "rt NULL", NAMES("fi_merge_states", "rt"));
  EXPECT_INVALID(fi_merge_states(rt, NULL, &c.s.t, &c.o.t, &c.so.t, NULL), "v NULL", NAMES("v", "NULL"));
  EXPECT_INVALID(fi_merge_states(rt, &c.v.t, NULL, &c.o.t, &c.so.t, NULL), "s NULL", NAMES("s", "NULL"));
  EXPECT_INVALID(fi_merge_states(rt, &c.v.t, &c.s.t, NULL, &c.so.t, NULL), "v_out NULL",
                 NAMES("v_out", "NULL"));
  /* N = 0. */
  many_copy(&d, &c);
  d.v.shape[1] = d.s.shape[1] = 0;
  EXPECT_INVALID(call_many(rt, &d, 1), "N 0", NAMES("v", "0 states"));
  /* Shapes. */
  many_copy(&d, &c);
  d.s.shape[1] = 4;
  EXPECT_INVALID(call_many(rt, &d, 1), "s has 4 states, v 3", NAMES("s", "4", "3"));
  many_copy(&d, &c);
  d.s.shape[2] = 7;
  EXPECT_INVALID(call_many(rt, &d, 1), "s heads", NAMES("s", "7"));
  many_copy(&d, &c);
  d.o.shape[2] = 64;
  EXPECT_INVALID(call_many(rt, &d, 1), "v_out head_dim", NAMES("v_out", "64", "128"));
  many_copy(&d, &c);
  d.o.shape[0] = 3;
  EXPECT_INVALID(call_many(rt, &d, 1), "v_out seq", NAMES("v_out", "3"));
  many_copy(&d, &c);
  d.so.shape[1] = 3;
  EXPECT_INVALID(call_many(rt, &d, 1), "s_out [4, 3]", NAMES("s_out", "3"));
  many_copy(&d, &c);
  d.v.shape[3] = d.o.shape[2] = 0;
  EXPECT_INVALID(call_many(rt, &d, 1), "head_dim 0", NAMES("v", "head_dim"));
  /* Dims and dtypes. */
  many_copy(&d, &c);
  d.v.t.ndim = 3;
  EXPECT_INVALID(call_many(rt, &d, 1), "v 3-D", NAMES("v", "dimensions", "expected 4"));
  many_copy(&d, &c);
  d.s.t.ndim = 2;
  EXPECT_INVALID(call_many(rt, &d, 1), "s 2-D", NAMES("s", "dimensions"));
  many_copy(&d, &c);
  d.s.t.dtype.bits = 16;
  EXPECT_INVALID(call_many(rt, &d, 1), "s float16", NAMES("s", "float16", "float32"));
  many_copy(&d, &c);
  d.so.t.dtype.bits = 64;
  EXPECT_INVALID(call_many(rt, &d, 1), "s_out float64", NAMES("s_out", "float64"));
  many_copy(&d, &c);
  d.o.t.dtype.code = kDLBfloat;
  EXPECT_INVALID(call_many(rt, &d, 1), "v_out bf16, v f16", NAMES("v_out", "bfloat16", "float16"));
  many_copy(&d, &c);
  d.v.t.dtype.code = d.o.t.dtype.code = kDLUInt;
  EXPECT_INVALID(call_many(rt, &d, 1), "v uint16", NAMES("v", "uint16"));
  /* Devices. */
  many_copy(&d, &c);
  d.s.t.device.device_type = kDLCPU;
  EXPECT_INVALID(call_many(rt, &d, 1), "s on the CPU", NAMES("s", "kDLCPU"));
  many_copy(&d, &c);
  d.o.t.device.device_id = 3;
  EXPECT_INVALID(call_many(rt, &d, 1), "v_out on device 3", NAMES("v_out"));
  many_copy(&d, &c);
  d.so.t.device.device_type = kDLCUDAHost;
  EXPECT_INVALID(call_many(rt, &d, 1), "s_out host memory", NAMES("s_out", "kDLCUDAHost"));
  /* Strides and overlaps. */
  many_copy(&d, &c);
  strided(&d.v, 3 * 8 * 256, 8 * 256, 256, 2);
  EXPECT_INVALID(call_many(rt, &d, 1), "v head_dim stride 2", NAMES("v", "stride"));
  many_copy(&d, &c);
  strided(&d.o, 128, 128, 1, 0);
  EXPECT_INVALID(call_many(rt, &d, 1), "v_out rows overlap", NAMES("v_out", "overlap"));
  many_copy(&d, &c);
  d.o.t.data = d.v.t.data;
  EXPECT_INVALID(call_many(rt, &d, 1), "v_out over v", NAMES("v_out", "v"));
  many_copy(&d, &c);
  d.so.t.data = d.s.t.data;
  EXPECT_INVALID(call_many(rt, &d, 1), "s_out over s", NAMES("s_out", "s"));
  many_copy(&d, &c);
  d.so.t.data = d.o.t.data;
  EXPECT_INVALID(call_many(rt, &d, 1), "s_out over v_out", NAMES("s_out", "v_out"));
  /* [N, seq, H, D] memory (each split its own tensor) is fine. */
  many_copy(&d, &c);
  strided(&d.v, 8 * 128, 4 * 8 * 128, 128, 1);
  strided(&d.s, 8, 4 * 8, 1, 0);
  EXPECT_REACHES_DEVICE(call_many(rt, &d, 1), "state-major layout");
  fi_runtime_destroy(rt);
}

/* No rows: nothing to launch, so OK without loading any backend, but the
 * arguments are still checked. */
FT_TEST(cascade_zero_rows) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  two c;
  two_make(&c);
  c.a.shape[0] = c.b.shape[0] = c.o.shape[0] = c.sa.shape[0] = c.sb.shape[0] = c.so.shape[0] =
      c.mask.shape[0] = 0;
  FT_CHECK(call_two(rt, &c, 1) == FI_OK, "%s", fi_last_error());
  FT_CHECK(call_in_place(rt, &c, 1) == FI_OK, "%s", fi_last_error());
  /* 0 heads: compact tensors then have seq stride 0, which is no overlap. */
  c.a.shape[0] = c.b.shape[0] = c.o.shape[0] = c.sa.shape[0] = c.sb.shape[0] = c.so.shape[0] =
      c.mask.shape[0] = 4;
  c.b.shape[1] = 0;
  c.a.shape[1] = c.o.shape[1] = c.sa.shape[1] = c.sb.shape[1] = c.so.shape[1] = 0;
  FT_CHECK(call_two(rt, &c, 1) == FI_OK, "%s", fi_last_error());
  FT_CHECK(call_in_place(rt, &c, 1) == FI_OK, "%s", fi_last_error());
  c.sb.shape[1] = 5;
  EXPECT_INVALID(call_two(rt, &c, 1), "0 rows, bad s_b", NAMES("s_b"));
  many m;
  many_make(&m);
  m.v.shape[0] = m.s.shape[0] = m.o.shape[0] = m.so.shape[0] = 0;
  FT_CHECK(call_many(rt, &m, 1) == FI_OK, "%s", fi_last_error());
  m.v.shape[1] = m.s.shape[1] = 0;
  EXPECT_INVALID(call_many(rt, &m, 1), "0 rows, N 0", NAMES("states"));
  for (int i = 0; i < rt_device_count(); i++)
    FT_CHECK(rt->dev[i].loaded == 0, "backend %s touched: %d", rt_device_at(i)->name, rt->dev[i].loaded);
  fi_runtime_destroy(rt);
}

/* ---- the kernel choice and the registry ---- */

static int registered(const jit_op *op, const jit_key *k) {
  for (int i = 0; i < op->config_count(); i++) {
    jit_key r;
    op->config(i, &r);
    if (r.op == k->op && memcmp(r.v, k->v, sizeof r.v) == 0) return 1;
  }
  return 0;
}

/* Every key the runtime can pick is registered (prewarm compiles it), and
 * holds the whole row in registers or takes the loop. */
FT_TEST(cascade_selection_is_always_registered) {
  const int dts[3] = {JIT_DT_F16, JIT_DT_BF16, JIT_DT_F32};
  int missing = 0;
  for (int op = 0; op < 2; op++)
    for (int d = 0; d < 3; d++)
      for (int vec = 1; vec <= (dts[d] == JIT_DT_F32 ? 4 : 8); vec *= 2)
        for (int hd = vec; hd <= 5000; hd += vec) {
          jit_key k;
          if (op == 0)
            jit_merge_state_select(dts[d], vec, hd, &k);
          else
            jit_merge_states_select(dts[d], vec, hd, &k);
          if (!registered(k.op, &k) && missing++ < 5)
            FT_CHECK(0, "op %d dtype %d vec %d head_dim %d not registered", op, dts[d], vec, hd);
          const int64_t g = k.v[CASCADE_P_GROUP], ch = k.v[CASCADE_P_CHUNKS];
          FT_CHECK(ch == 0 || g * ch * vec >= hd, "head_dim %d exceeds %lld", hd,
                   (long long)(g * ch * vec));
          FT_CHECK(g >= 1 && g <= 32 && (g & (g - 1)) == 0 && k.v[CASCADE_P_THREADS] % g == 0,
                   "group %lld", (long long)g);
        }
  FT_CHECK(missing == 0, "%d selections not registered", missing);
  /* The shape takes 8 lanes x 2 vectors of 16 bytes. */
  jit_key k;
  jit_merge_state_select(JIT_DT_BF16, 8, 128, &k);
  FT_CHECK(k.v[CASCADE_P_GROUP] == 8 && k.v[CASCADE_P_CHUNKS] == 2, "group %lld chunks %lld",
           (long long)k.v[CASCADE_P_GROUP], (long long)k.v[CASCADE_P_CHUNKS]);
}

FT_TEST(cascade_registry_small_and_round_trips) {
  const jit_op *ops[2] = {jit_registry_find("merge_state"), jit_registry_find("merge_states")};
  FT_REQUIRE(ops[0] == &jit_op_merge_state && ops[1] == &jit_op_merge_states);
  const int total = ops[0]->config_count() + ops[1]->config_count();
  FT_CHECK(total > 0 && total <= 60, "%d configurations: prewarm and make test compile them all", total);
  for (int o = 0; o < 2; o++)
    for (int i = 0; i < ops[o]->config_count(); i++) {
      jit_key k, back;
      char a[256], b[256];
      ops[o]->config(i, &k);
      FT_CHECK(jit_key_canonical(&k, a, sizeof a) > 0);
      FT_CHECK(jit_key_parse(a, &back) == 0, "parse of %s", a);
      jit_key_canonical(&back, b, sizeof b);
      FT_CHECK(strcmp(a, b) == 0, "%s != %s", a, b);
      for (int j = 0; j < i; j++) {
        jit_key r;
        ops[o]->config(j, &r);
        FT_CHECK(memcmp(r.v, k.v, sizeof r.v) != 0, "%s registered twice", a);
      }
    }
  jit_key k;
  char src[1024];
  jit_merge_state_select(JIT_DT_BF16, 8, 128, &k);
  FT_CHECK(k.op->render_entry(&k, "fi_x", src, sizeof src) > 0);
  FT_CHECK(strstr(src, "fi::merge_state<fi_bf16, 8, 128, 8, 2, 0, 1>(p);") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi_x(fi_merge_state_params p)") != NULL, "%s", src);
  jit_merge_states_select(JIT_DT_F32, 1, 100, &k);
  FT_CHECK(k.op->render_entry(&k, "fi_y", src, sizeof src) > 0);
  FT_CHECK(strstr(src, "fi::merge_states<float, 1, 128, 32, 0, 2, 0, 1>(p);") != NULL, "%s", src);
  jit_key_canonical(&k, src, sizeof src);
  FT_CHECK(strcmp(src, "op=merge_states;dtype=f32;vec=1;threads=128;group=32;chunks=0;prefetch=0;hint=1;states=2") == 0,
           "%s", src);
}
