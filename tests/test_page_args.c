/* test_page_args.c: fi_append_paged_kv_cache and fi_get_batch_indices_positions on a machine with
 * no GPU: bad arguments refused by name before any driver call, and the paged-KV keys and registry.
 */
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
#include "ops_page.h"
#include "rt_internal.h"

/* Fake device addresses, never dereferenced, 16 MiB apart (more than any
 * tensor here spans); device 63 does not exist. */
#define ADDR(i) ((void *)(uintptr_t)(0x1000000u * (uintptr_t)((i) + 1)))
#define NO_SUCH_DEVICE 63

typedef struct tens {
  DLTensor t;
  int64_t shape[4];
  int64_t strides[4];
} tens;

static void tens_make(tens *x, int slot, DLDataTypeCode code, int bits, int ndim, int64_t s0,
                      int64_t s1, int64_t s2, int64_t s3) {
  memset(x, 0, sizeof *x);
  x->shape[0] = s0;
  x->shape[1] = s1;
  x->shape[2] = s2;
  x->shape[3] = s3;
  x->t.data = ADDR(slot);
  x->t.device.device_type = kDLCUDA;
  x->t.ndim = ndim;
  x->t.dtype.code = (uint8_t)code;
  x->t.dtype.bits = (uint8_t)bits;
  x->t.dtype.lanes = 1;
  x->t.shape = x->shape;
}

/* The DLPack >= 1.0 codes of the fp8 caches. */
#define DL_E4M3FN 10
#define DL_E5M2 12

/* A valid append: nnz tokens of B requests, H heads of D, pages of P slots. */
enum { AK, AV, BI, POS, KC, VC, IDX, IPTR, LAST, NT };
static const char *const tnames[NT] = {"append_k",   "append_v",      "batch_indices",
                                       "positions",  "paged_k_cache", "paged_v_cache",
                                       "kv_indices", "kv_indptr",     "kv_last_page_len"};
typedef struct call {
  tens t[NT];
  fi_kv_layout layout;
  double ks, vs;
} call;

static void call_make(call *c, int cache_code, int cache_bits, fi_kv_layout layout, int64_t nnz,
                      int64_t B, int64_t H, int64_t D, int64_t pages, int64_t P) {
  memset(c, 0, sizeof *c);
  tens_make(&c->t[AK], AK, kDLBfloat, 16, 3, nnz, H, D, 0);
  tens_make(&c->t[AV], AV, kDLBfloat, 16, 3, nnz, H, D, 0);
  tens_make(&c->t[BI], BI, kDLInt, 32, 1, nnz, 0, 0, 0);
  tens_make(&c->t[POS], POS, kDLInt, 32, 1, nnz, 0, 0, 0);
  if (layout == FI_KV_LAYOUT_NHD) {
    tens_make(&c->t[KC], KC, (DLDataTypeCode)cache_code, cache_bits, 4, pages, P, H, D);
    tens_make(&c->t[VC], VC, (DLDataTypeCode)cache_code, cache_bits, 4, pages, P, H, D);
  } else {
    tens_make(&c->t[KC], KC, (DLDataTypeCode)cache_code, cache_bits, 4, pages, H, P, D);
    tens_make(&c->t[VC], VC, (DLDataTypeCode)cache_code, cache_bits, 4, pages, H, P, D);
  }
  tens_make(&c->t[IDX], IDX, kDLInt, 32, 1, pages, 0, 0, 0);
  tens_make(&c->t[IPTR], IPTR, kDLInt, 32, 1, B + 1, 0, 0, 0);
  tens_make(&c->t[LAST], LAST, kDLInt, 32, 1, B, 0, 0, 0);
  c->layout = layout;
  c->ks = c->vs = 1.0;
}

static void call_std(call *c) {
  call_make(c, kDLBfloat, 16, FI_KV_LAYOUT_NHD, 100, 4, 8, 128, 64, 16);
}

/* The tensors point into the struct: a copy must re-point them. */
static void call_copy(call *dst, const call *src) {
  *dst = *src;
  for (int i = 0; i < NT; i++) {
    dst->t[i].t.shape = dst->t[i].shape;
    if (src->t[i].t.strides) dst->t[i].t.strides = dst->t[i].strides;
  }
}

static void set_strides(tens *x, int64_t s0, int64_t s1, int64_t s2, int64_t s3) {
  x->t.strides = x->strides;
  x->strides[0] = s0;
  x->strides[1] = s1;
  x->strides[2] = s2;
  x->strides[3] = s3;
}

static fi_status do_call(fi_runtime *rt, call *c) {
  return fi_append_paged_kv_cache(rt, &c->t[AK].t, &c->t[AV].t, &c->t[BI].t, &c->t[POS].t,
                                  &c->t[KC].t, &c->t[VC].t, &c->t[IDX].t, &c->t[IPTR].t,
                                  &c->t[LAST].t, c->layout, c->ks, c->vs, NULL);
}

#define EXPECT_INVALID(rt, c, what, names)                                                        \
  do {                                                                                            \
    poison_error();                                                                               \
    fi_status st_ = do_call((rt), (c));                                                           \
    FT_CHECK(st_ == FI_ERR_INVALID_ARGUMENT, "%s: got %s (%s)", what, fi_status_string(st_),      \
             fi_last_error());                                                                    \
    FT_CHECK(                                                                                     \
        names_all(fi_last_error(), names) && strstr(fi_last_error(), "fi_append_paged_kv_cache"), \
        "%s: message does not name the argument: %s", what, fi_last_error());                     \
  } while (0)

/* Valid arguments get past validation to the device layer, which has no
 * such device (or no driver at all). */
#define EXPECT_VALID(rt, c, what)                                                     \
  do {                                                                                \
    for (int i_ = 0; i_ < NT; i_++) (c)->t[i_].t.device.device_id = NO_SUCH_DEVICE;   \
    fi_status st_ = do_call((rt), (c));                                               \
    FT_CHECK(st_ == FI_ERR_NO_DEVICE, "%s: got %s (%s)", what, fi_status_string(st_), \
             fi_last_error());                                                        \
  } while (0)

FT_TEST(page_null_and_devices) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_std(&c);
  poison_error();
  fi_status st = fi_append_paged_kv_cache(NULL, &c.t[AK].t, &c.t[AV].t, &c.t[BI].t, &c.t[POS].t,
                                          &c.t[KC].t, &c.t[VC].t, &c.t[IDX].t, &c.t[IPTR].t,
                                          &c.t[LAST].t, c.layout, 1.0, 1.0, NULL);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "rt is NULL"), "%s",
           fi_last_error());
  /* Every tensor: NULL, no data, on the CPU, on another device. */
  for (int i = 0; i < NT; i++) {
    const DLTensor *a[NT];
    for (int j = 0; j < NT; j++) a[j] = &c.t[j].t;
    a[i] = NULL;
    poison_error();
    st = fi_append_paged_kv_cache(rt, a[AK], a[AV], a[BI], a[POS], (DLTensor *)a[KC],
                                  (DLTensor *)a[VC], a[IDX], a[IPTR], a[LAST], c.layout, 1.0, 1.0,
                                  NULL);
    char want[64];
    snprintf(want, sizeof want, "%s is NULL", tnames[i]);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), want), "%s: %s", want,
             fi_last_error());
    call_copy(&d, &c);
    d.t[i].t.data = NULL;
    EXPECT_INVALID(rt, &d, "data NULL", NAMES(tnames[i], "data"));
    call_copy(&d, &c);
    d.t[i].t.device.device_type = kDLCPU;
    EXPECT_INVALID(rt, &d, "on the CPU", NAMES(tnames[i], "kDLCPU"));
    if (i != AK) {
      call_copy(&d, &c);
      d.t[i].t.device.device_id = 1;
      EXPECT_INVALID(rt, &d, "another device", NAMES(tnames[i], "append_k"));
    }
  }
  call_copy(&d, &c);
  d.layout = (fi_kv_layout)2;
  EXPECT_INVALID(rt, &d, "layout 2", NAMES("layout", "2"));
  call_copy(&d, &c);
  d.layout = (fi_kv_layout)-1;
  EXPECT_INVALID(rt, &d, "layout -1", NAMES("layout"));
  fi_runtime_destroy(rt);
}

FT_TEST(page_dtypes_and_scales) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_std(&c);
  call_copy(&d, &c);
  d.t[AK].t.dtype.bits = d.t[AV].t.dtype.bits = 32;
  d.t[AK].t.dtype.code = d.t[AV].t.dtype.code = kDLFloat;
  EXPECT_INVALID(rt, &d, "float32 input", NAMES("append_k", "float32"));
  call_copy(&d, &c);
  d.t[AV].t.dtype.code = kDLFloat;
  EXPECT_INVALID(rt, &d, "append_v f16, k bf16", NAMES("append_v", "float16", "bfloat16"));
  call_copy(&d, &c);
  d.t[KC].t.dtype.code = d.t[VC].t.dtype.code = kDLFloat; /* f16 cache for bf16 input */
  EXPECT_INVALID(rt, &d, "f16 cache, bf16 input", NAMES("paged_k_cache", "float16"));
  call_copy(&d, &c);
  d.t[KC].t.dtype.code = d.t[VC].t.dtype.code = kDLUInt;
  d.t[KC].t.dtype.bits = d.t[VC].t.dtype.bits = 8;
  EXPECT_INVALID(rt, &d, "uint8 cache", NAMES("paged_k_cache", "uint8"));
  call_copy(&d, &c);
  d.t[VC].t.dtype.code = DL_E4M3FN;
  d.t[VC].t.dtype.bits = 8;
  EXPECT_INVALID(rt, &d, "v cache e4m3, k bf16", NAMES("paged_v_cache", "float8_e4m3fn"));
  call_copy(&d, &c);
  d.t[BI].t.dtype.bits = 64;
  EXPECT_INVALID(rt, &d, "int64 batch_indices", NAMES("batch_indices", "int64"));
  call_copy(&d, &c);
  d.t[IPTR].t.dtype.code = kDLUInt;
  EXPECT_INVALID(rt, &d, "uint32 kv_indptr", NAMES("kv_indptr", "uint32"));
  /* Scales: 1.0 for a 16-bit cache; finite and > 0 always. */
  call_copy(&d, &c);
  d.ks = 2.0;
  EXPECT_INVALID(rt, &d, "k_scale 2 with bf16 cache", NAMES("k_scale", "fp8"));
  call_copy(&d, &c);
  d.vs = 0.5;
  EXPECT_INVALID(rt, &d, "v_scale 0.5 with bf16 cache", NAMES("v_scale"));
  const double bad[] = {0.0, -1.0, NAN, INFINITY};
  for (int i = 0; i < 4; i++) {
    call_make(&d, DL_E4M3FN, 8, FI_KV_LAYOUT_NHD, 100, 4, 8, 128, 64, 16);
    d.ks = bad[i];
    EXPECT_INVALID(rt, &d, "bad k_scale", NAMES("k_scale"));
    call_make(&d, DL_E5M2, 8, FI_KV_LAYOUT_HND, 100, 4, 8, 128, 64, 16);
    d.vs = bad[i];
    EXPECT_INVALID(rt, &d, "bad v_scale", NAMES("v_scale"));
  }
  /* Valid: fp8 caches with scales, both layouts; f16 into f16. */
  call_make(&d, DL_E4M3FN, 8, FI_KV_LAYOUT_NHD, 100, 4, 8, 128, 64, 16);
  d.ks = 0.25;
  d.vs = 3.0;
  EXPECT_VALID(rt, &d, "e4m3 NHD scaled");
  call_make(&d, DL_E5M2, 8, FI_KV_LAYOUT_HND, 100, 4, 8, 128, 64, 16);
  d.ks = 7.5;
  EXPECT_VALID(rt, &d, "e5m2 HND scaled");
  call_make(&d, kDLFloat, 16, FI_KV_LAYOUT_HND, 100, 4, 8, 128, 64, 16);
  d.t[AK].t.dtype.code = d.t[AV].t.dtype.code = kDLFloat;
  EXPECT_VALID(rt, &d, "f16 HND");
  fi_runtime_destroy(rt);
}

FT_TEST(page_shapes) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_std(&c);
  EXPECT_VALID(rt, &c, "the standard call");
  call_copy(&d, &c);
  d.t[AV].shape[1] = 4;
  EXPECT_INVALID(rt, &d, "append_v heads", NAMES("append_v", "shape"));
  call_copy(&d, &c);
  d.t[AK].shape[2] = d.t[AV].shape[2] = 0;
  EXPECT_INVALID(rt, &d, "head_dim 0", NAMES("append_k", "head_dim"));
  call_copy(&d, &c);
  d.t[AK].t.ndim = 2;
  EXPECT_INVALID(rt, &d, "append_k 2-D", NAMES("append_k", "dimensions"));
  call_copy(&d, &c);
  d.t[KC].t.ndim = 5;
  EXPECT_INVALID(rt, &d, "k cache 5-D", NAMES("paged_k_cache", "dimensions"));
  call_copy(&d, &c);
  d.t[KC].shape[2] = d.t[VC].shape[2] = 4; /* NHD heads */
  EXPECT_INVALID(rt, &d, "cache heads", NAMES("paged_k_cache", "heads", "NHD"));
  call_copy(&d, &c);
  d.t[KC].shape[3] = d.t[VC].shape[3] = 64;
  EXPECT_INVALID(rt, &d, "cache head_dim", NAMES("paged_k_cache", "head_dim"));
  /* An NHD cache passed as HND: heads where the page size should be. */
  call_copy(&d, &c);
  d.layout = FI_KV_LAYOUT_HND;
  EXPECT_INVALID(rt, &d, "NHD cache as HND", NAMES("paged_k_cache", "HND"));
  call_copy(&d, &c);
  d.t[VC].shape[0] = 63;
  EXPECT_INVALID(rt, &d, "v cache pages", NAMES("paged_v_cache", "paged_k_cache", "shape"));
  call_copy(&d, &c);
  d.t[KC].shape[1] = d.t[VC].shape[1] = 0;
  EXPECT_INVALID(rt, &d, "page_size 0", NAMES("paged_k_cache", "page_size"));
  call_copy(&d, &c);
  d.t[KC].shape[0] = d.t[VC].shape[0] = 0;
  EXPECT_INVALID(rt, &d, "no pages", NAMES("paged_k_cache", "pages"));
  /* Index lengths. */
  call_copy(&d, &c);
  d.t[BI].shape[0] = 99;
  EXPECT_INVALID(rt, &d, "batch_indices length", NAMES("batch_indices", "99", "100"));
  call_copy(&d, &c);
  d.t[POS].shape[0] = 101;
  EXPECT_INVALID(rt, &d, "positions length", NAMES("positions", "101"));
  call_copy(&d, &c);
  d.t[LAST].shape[0] = 5;
  EXPECT_INVALID(rt, &d, "kv_last_page_len length", NAMES("kv_last_page_len", "5", "4"));
  call_copy(&d, &c);
  d.t[IPTR].shape[0] = 0;
  EXPECT_INVALID(rt, &d, "kv_indptr empty", NAMES("kv_indptr"));
  call_copy(&d, &c);
  d.t[IPTR].shape[0] = 1;
  d.t[LAST].shape[0] = 0;
  EXPECT_INVALID(rt, &d, "no request", NAMES("kv_indptr", "no request"));
  call_copy(&d, &c);
  d.t[IDX].shape[0] = 0;
  EXPECT_INVALID(rt, &d, "kv_indices empty", NAMES("kv_indices"));
  call_copy(&d, &c);
  d.t[IDX].t.ndim = 2;
  EXPECT_INVALID(rt, &d, "kv_indices 2-D", NAMES("kv_indices", "dimensions"));
  call_copy(&d, &c);
  d.t[AK].shape[0] = d.t[AV].shape[0] = d.t[BI].shape[0] = d.t[POS].shape[0] = (int64_t)1 << 28;
  EXPECT_INVALID(rt, &d, "tokens x heads over 2^31", NAMES("append_k", "2^31"));
  /* Valid: kv_indices longer than needed; page size 1 and 64; one head of 1. */
  call_copy(&d, &c);
  d.t[IDX].shape[0] = 1000;
  EXPECT_VALID(rt, &d, "long kv_indices");
  call_make(&d, kDLBfloat, 16, FI_KV_LAYOUT_HND, 7, 7, 1, 1, 9, 1);
  EXPECT_VALID(rt, &d, "page size 1, one head of 1");
  call_make(&d, kDLBfloat, 16, FI_KV_LAYOUT_NHD, 3, 1, 2, 96, 1, 64);
  EXPECT_VALID(rt, &d, "page size 64, one page");
  fi_runtime_destroy(rt);
}

FT_TEST(page_strides_and_overlap) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_std(&c); /* NHD [64, 16, 8, 128] */
  call_copy(&d, &c);
  set_strides(&d.t[AK], 8 * 128 * 2, 128 * 2, 2, 0);
  EXPECT_INVALID(rt, &d, "append_k head_dim stride 2", NAMES("append_k", "head_dim stride"));
  call_copy(&d, &c);
  set_strides(&d.t[VC], 16 * 8 * 128 * 2, 8 * 128 * 2, 128 * 2, 2);
  EXPECT_INVALID(rt, &d, "v cache head_dim stride 2", NAMES("paged_v_cache", "head_dim stride"));
  call_copy(&d, &c);
  set_strides(&d.t[KC], INT64_MAX / 4, 1024, 128, 1);
  EXPECT_INVALID(rt, &d, "cache spanning 2^63 bytes", NAMES("paged_k_cache", "2^63"));
  /* Slots of one cache must not alias: page stride 0, head stride under D,
   * a page stride that lands inside the previous page. */
  call_copy(&d, &c);
  set_strides(&d.t[KC], 0, 8 * 128, 128, 1);
  EXPECT_INVALID(rt, &d, "k cache page stride 0", NAMES("paged_k_cache", "overlap"));
  call_copy(&d, &c);
  set_strides(&d.t[VC], 16 * 8 * 128, 8 * 128, 64, 1);
  EXPECT_INVALID(rt, &d, "v cache head stride 64 < D", NAMES("paged_v_cache", "overlap"));
  call_copy(&d, &c);
  set_strides(&d.t[KC], 16 * 8 * 128 - 128, 8 * 128, 128, 1);
  EXPECT_INVALID(rt, &d, "k cache pages overlapping", NAMES("paged_k_cache", "overlap"));
  call_copy(&d, &c);
  set_strides(&d.t[KC], 8 * 128, 8 * 128 * 64, 128, 1); /* [slot][page][head] order */
  set_strides(&d.t[VC], 8 * 128, 8 * 128 * 64, 128, 1);
  EXPECT_VALID(rt, &d, "permuted but disjoint cache strides");
  /* The caches are written while the inputs are read: no sharing. */
  call_copy(&d, &c);
  d.t[KC].t.data = d.t[AK].t.data;
  EXPECT_INVALID(rt, &d, "k cache = append_k", NAMES("paged_k_cache", "overlaps", "append_k"));
  call_copy(&d, &c);
  d.t[VC].t.data = d.t[IDX].t.data;
  d.t[VC].t.byte_offset = 128; /* inside kv_indices' 256 bytes */
  EXPECT_INVALID(rt, &d, "v cache over kv_indices", NAMES("paged_v_cache", "overlaps"));
  call_copy(&d, &c);
  d.t[AV].t.data = d.t[KC].t.data;
  d.t[AV].t.byte_offset = 64 * 16 * 8 * 128 * 2 - 2; /* on the cache's last element */
  EXPECT_INVALID(rt, &d, "append_v ends the k cache", NAMES("paged_k_cache", "append_v"));
  call_copy(&d, &c);
  d.t[VC].t.data = d.t[KC].t.data;
  EXPECT_INVALID(rt, &d, "v cache = k cache", NAMES("paged_v_cache", "paged_k_cache", "same"));
  /* Valid: one [pages, 2, page, H, D] buffer as a K and a V view (extents
   * interleave, elements do not); padded heads; input right after the cache. */
  call_copy(&d, &c);
  const int64_t page = 16 * 8 * 128;
  set_strides(&d.t[KC], 2 * page, 8 * 128, 128, 1);
  set_strides(&d.t[VC], 2 * page, 8 * 128, 128, 1);
  d.t[VC].t.data = d.t[KC].t.data;
  d.t[VC].t.byte_offset = (uint64_t)page * 2;
  EXPECT_VALID(rt, &d, "interleaved K/V views");
  call_copy(&d, &c);
  set_strides(&d.t[AK], 8 * 136, 136, 1, 0);
  EXPECT_VALID(rt, &d, "padded append_k heads");
  call_copy(&d, &c);
  d.t[AK].t.data = d.t[KC].t.data;
  d.t[AK].t.byte_offset = 64 * page * 2;
  EXPECT_VALID(rt, &d, "append_k right after the k cache");
  fi_runtime_destroy(rt);
}

FT_TEST(page_zero_tokens) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  call_make(&c, kDLBfloat, 16, FI_KV_LAYOUT_NHD, 0, 3, 8, 128, 0, 16);
  /* No token, no page: nothing launched, no driver needed. */
  FT_CHECK(do_call(rt, &c) == FI_OK, "%s", fi_last_error());
  c.ks = 2.0;
  EXPECT_INVALID(rt, &c, "0 tokens, bad scale", NAMES("k_scale"));
  fi_runtime_destroy(rt);
}

/* ---- fi_get_batch_indices_positions ---- */

typedef struct bcall {
  tens t[4];
} bcall;
static const char *const bnames[4] = {"append_indptr", "seq_lens", "batch_indices", "positions"};

static void bcall_make(bcall *c, int64_t B, int64_t nnz) {
  tens_make(&c->t[0], 0, kDLInt, 32, 1, B + 1, 0, 0, 0);
  tens_make(&c->t[1], 1, kDLInt, 32, 1, B, 0, 0, 0);
  tens_make(&c->t[2], 2, kDLInt, 32, 1, nnz, 0, 0, 0);
  tens_make(&c->t[3], 3, kDLInt, 32, 1, nnz, 0, 0, 0);
}
static fi_status bdo(fi_runtime *rt, bcall *c) {
  return fi_get_batch_indices_positions(rt, &c->t[0].t, &c->t[1].t, &c->t[2].t, &c->t[3].t, NULL);
}
#define BEXPECT_INVALID(rt, c, what, names)                                                  \
  do {                                                                                       \
    poison_error();                                                                          \
    fi_status st_ = bdo((rt), (c));                                                          \
    FT_CHECK(st_ == FI_ERR_INVALID_ARGUMENT, "%s: got %s (%s)", what, fi_status_string(st_), \
             fi_last_error());                                                               \
    FT_CHECK(names_all(fi_last_error(), names) &&                                            \
                 strstr(fi_last_error(), "fi_get_batch_indices_positions"),                  \
             "%s: message does not name the argument: %s", what, fi_last_error());           \
  } while (0)

FT_TEST(bip_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  bcall c;
  poison_error();
  bcall_make(&c, 4, 100);
  FT_CHECK(fi_get_batch_indices_positions(NULL, &c.t[0].t, &c.t[1].t, &c.t[2].t, &c.t[3].t, NULL) ==
                   FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "rt is NULL"),
           "%s", fi_last_error());
  for (int i = 0; i < 4; i++) {
    bcall_make(&c, 4, 100);
    c.t[i].t.dtype.bits = 64;
    BEXPECT_INVALID(rt, &c, "int64", NAMES(bnames[i], "int64"));
    bcall_make(&c, 4, 100);
    c.t[i].t.device.device_type = kDLCPU;
    BEXPECT_INVALID(rt, &c, "CPU", NAMES(bnames[i], "kDLCPU"));
    bcall_make(&c, 4, 100);
    c.t[i].t.ndim = 2;
    BEXPECT_INVALID(rt, &c, "2-D", NAMES(bnames[i], "dimensions"));
  }
  bcall_make(&c, 4, 100);
  c.t[1].shape[0] = 5;
  BEXPECT_INVALID(rt, &c, "seq_lens length", NAMES("seq_lens", "5", "4"));
  bcall_make(&c, 4, 100);
  c.t[3].shape[0] = 99;
  BEXPECT_INVALID(rt, &c, "positions length", NAMES("positions", "99", "100"));
  bcall_make(&c, 4, 100);
  c.t[0].shape[0] = 0;
  BEXPECT_INVALID(rt, &c, "empty indptr", NAMES("append_indptr"));
  bcall_make(&c, 0, 100);
  BEXPECT_INVALID(rt, &c, "tokens, no request", NAMES("append_indptr", "no request"));
  bcall_make(&c, 4, 100);
  c.t[3].t.data = c.t[2].t.data;
  c.t[3].t.byte_offset = 396;
  BEXPECT_INVALID(rt, &c, "positions over batch_indices",
                  NAMES("positions", "overlaps", "batch_indices"));
  bcall_make(&c, 4, 100);
  c.t[2].t.data = c.t[1].t.data;
  BEXPECT_INVALID(rt, &c, "batch_indices over seq_lens", NAMES("batch_indices", "seq_lens"));
  /* Interleaved [nnz, 2] outputs: disjoint with stride 2 (offset 4 bytes);
   * offset 2 bytes, or stride 1, overlaps. Offset 2 is also half an int32 off its
   * alignment, which the shared tensor check refuses first (naming positions). */
  bcall_make(&c, 4, 100);
  c.t[2].t.strides = c.t[2].strides;
  c.t[3].t.strides = c.t[3].strides;
  c.t[2].strides[0] = c.t[3].strides[0] = 2;
  c.t[3].t.data = c.t[2].t.data;
  c.t[3].t.byte_offset = 2;
  BEXPECT_INVALID(rt, &c, "interleaved, half an element apart", NAMES("positions", "a multiple of 4 bytes"));
  c.t[3].t.byte_offset = 4;
  for (int i = 0; i < 4; i++) c.t[i].t.device.device_id = NO_SUCH_DEVICE;
  fi_status st0 = bdo(rt, &c);
  FT_CHECK(st0 == FI_ERR_NO_DEVICE, "interleaved [nnz, 2] outputs: %s (%s)", fi_status_string(st0),
           fi_last_error());
  for (int i = 0; i < 4; i++) c.t[i].t.device.device_id = 0;
  c.t[2].strides[0] = c.t[3].strides[0] = 1;
  BEXPECT_INVALID(rt, &c, "stride 1, one element apart", NAMES("positions", "overlaps"));
  /* Zero tokens: FI_OK with no driver. Valid: stops at the device layer. */
  bcall_make(&c, 3, 0);
  FT_CHECK(bdo(rt, &c) == FI_OK, "%s", fi_last_error());
  bcall_make(&c, 4, 100);
  for (int i = 0; i < 4; i++) c.t[i].t.device.device_id = NO_SUCH_DEVICE;
  fi_status st = bdo(rt, &c);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "valid call: %s (%s)", fi_status_string(st), fi_last_error());
  fi_runtime_destroy(rt);
}

/* ---- the ops' keys ---- */

FT_TEST(page_selection_is_registered) {
  FT_CHECK(jit_registry_find("append_paged_kv") == &jit_op_append_paged_kv);
  FT_CHECK(jit_registry_find("batch_indices_positions") == &jit_op_batch_indices_positions);
  const int n = jit_op_append_paged_kv.config_count();
  FT_CHECK(n > 0 && n + jit_op_batch_indices_positions.config_count() <= 60, "%d configurations",
           n);
  const int ins[2] = {JIT_DT_F16, JIT_DT_BF16};
  int seen = 0;
  for (int i = 0; i < 2; i++) {
    const int caches[3] = {ins[i], JIT_DT_E4M3, JIT_DT_E5M2};
    for (int c = 0; c < 3; c++)
      for (int layout = 0; layout < 2; layout++)
        for (int vec = 1; vec <= 8; vec *= 2) {
          jit_key k;
          jit_page_select(ins[i], caches[c], layout, vec, &k);
          FT_CHECK(op_registers(&jit_op_append_paged_kv, &k), "in %d cache %d layout %d vec %d",
                   ins[i], caches[c], layout, vec);
          FT_CHECK(jit_page_valid(&k), "in %d cache %d layout %d vec %d invalid", ins[i], caches[c],
                   layout, vec);
          FT_CHECK(k.v[PAGE_P_LAYOUT] == layout && k.v[PAGE_P_VEC] == vec &&
                   k.v[PAGE_P_CACHE_DTYPE] == caches[c]);
          seen++;
        }
  }
  FT_CHECK(seen == n, "%d selectable keys, %d registered", seen, n);
  for (int i = 0; i < n; i++) {
    jit_key k;
    jit_op_append_paged_kv.config(i, &k);
    FT_CHECK(jit_page_valid(&k), "configuration %d invalid", i);
    for (int j = 0; j < i; j++) {
      jit_key r;
      jit_op_append_paged_kv.config(j, &r);
      FT_CHECK(memcmp(r.v, k.v, sizeof r.v) != 0, "configurations %d and %d are the same", j, i);
    }
  }
  jit_key b;
  jit_bip_select(&b);
  FT_CHECK(op_registers(&jit_op_batch_indices_positions, &b));
  /* Invalid keys. */
  jit_key k, bad;
  jit_page_select(JIT_DT_BF16, JIT_DT_BF16, 0, 8, &k);
  bad = k;
  bad.v[PAGE_P_CACHE_DTYPE] = JIT_DT_F16;
  FT_CHECK(!jit_page_valid(&bad), "bf16 into f16 accepted");
  bad = k;
  bad.v[PAGE_P_IN_DTYPE] = JIT_DT_F32;
  FT_CHECK(!jit_page_valid(&bad), "f32 input accepted");
  bad = k;
  bad.v[PAGE_P_LAYOUT] = 2;
  FT_CHECK(!jit_page_valid(&bad), "layout 2 accepted");
  bad = k;
  bad.v[PAGE_P_VEC] = 16;
  FT_CHECK(!jit_page_valid(&bad), "vec 16 accepted");
  bad = k;
  bad.v[PAGE_P_THREADS] = 96;
  FT_CHECK(!jit_page_valid(&bad), "96 threads accepted");
}

FT_TEST(page_key_canonical_and_render) {
  jit_key k;
  jit_page_select(JIT_DT_BF16, JIT_DT_E4M3, 1, 8, &k);
  char canon[256];
  FT_REQUIRE(jit_key_canonical(&k, canon, sizeof canon) > 0);
  FT_CHECK(
      strcmp(canon,
             "op=append_paged_kv;in_dtype=bf16;cache_dtype=e4m3;layout=1;vec=8;threads=256") == 0,
      "%s", canon);
  jit_key back;
  FT_REQUIRE(jit_key_parse(canon, &back) == 0, "%s does not parse", canon);
  FT_CHECK(back.op == k.op && memcmp(back.v, k.v, sizeof k.v) == 0, "round trip of %s", canon);
  char *src = NULL, err[256];
  FT_REQUIRE(jit_render(&k, "fi_append_paged_kv_0011223344556677", &src, err, sizeof err) == 0,
             "%s", err);
  FT_CHECK(strstr(src, "#include \"page.cuh\"") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi_append_paged_kv_0011223344556677(fi_append_paged_kv_params p)"), "%s",
           src);
  FT_CHECK(strstr(src, "fi::append_paged_kv<fi_bf16, fi_e4m3, 1, 8, 256>(p);") != NULL, "%s", src);
  free(src);
  jit_key b;
  jit_bip_select(&b);
  FT_REQUIRE(jit_key_canonical(&b, canon, sizeof canon) > 0);
  FT_CHECK(strcmp(canon, "op=batch_indices_positions;threads=256") == 0, "%s", canon);
  src = NULL;
  FT_REQUIRE(jit_render(&b, "fi_bip_0011", &src, err, sizeof err) == 0, "%s", err);
  FT_CHECK(strstr(src, "fi::batch_indices_positions<256>(p);") != NULL, "%s", src);
  free(src);
}
