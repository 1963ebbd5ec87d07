/* rt_page.c: the paged KV cache entry points (fi_append_paged_kv_cache,
 * fi_get_batch_indices_positions): argument checks, the kernel choice, the launch. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fi_params.h"
#include "ops_page.h"
#include "rt_check.h"
#include "rt_internal.h"
#include "rt_tensor.h"

/* DLPack >= 1.0 type codes of the fp8 caches (dlpack.h here is older and
 * does not name them): kDLFloat8_e4m3fn and kDLFloat8_e5m2, 8 bits. */
#define PAGE_DL_E4M3FN 10
#define PAGE_DL_E5M2 12

static const char *const APPEND = "fi_append_paged_kv_cache";
static const char *const BIP = "fi_get_batch_indices_positions";

/* A cache's jit dtype: the 16-bit floats as usual, fp8 by its DLPack code. */
static int cache_dtype(const DLTensor *t) {
  if (t->dtype.lanes == 1 && t->dtype.bits == 8) {
    if (t->dtype.code == PAGE_DL_E4M3FN) return JIT_DT_E4M3;
    if (t->dtype.code == PAGE_DL_E5M2) return JIT_DT_E5M2;
  }
  return rt_tensor_dtype(t);
}

static const char *cache_dtype_string(DLDataType d, char *buf, size_t n) {
  if (d.lanes == 1 && d.bits == 8 && d.code == PAGE_DL_E4M3FN) return "float8_e4m3fn";
  if (d.lanes == 1 && d.bits == 8 && d.code == PAGE_DL_E5M2) return "float8_e5m2";
  return rt_dtype_string(d, buf, n);
}

/* Whether the byte extents of a and b (ae, be bytes; 0: empty) meet. */
static int ranges_meet(const DLTensor *a, int64_t ae, const DLTensor *b, int64_t be) {
  if (ae == 0 || be == 0) return 0;
  const uintptr_t x = (uintptr_t)rt_data(a), y = (uintptr_t)rt_data(b);
  return x < y + (uint64_t)be && y < x + (uint64_t)ae;
}

/* Whether two of t's slots (its first three dimensions over rows of D
 * contiguous elements) can share an element: the dimensions of size > 1,
 * sorted by stride, must each step past everything the smaller ones span. */
static int slots_alias(const DLTensor *t, int64_t D) {
  int64_t st[3], sz[3];
  int n = 0;
  for (int i = 0; i < 3; i++)
    if (t->shape[i] > 1) {
      st[n] = rt_stride(t, i);
      sz[n++] = t->shape[i];
    }
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && st[j] < st[j - 1]; j--) {
      int64_t x = st[j];
      st[j] = st[j - 1];
      st[j - 1] = x;
      x = sz[j];
      sz[j] = sz[j - 1];
      sz[j - 1] = x;
    }
  int64_t span = D; /* elements covered by one slot row, then by the dimensions so far */
  for (int i = 0; i < n; i++) {
    if (st[i] < span) return 1;
    span = st[i] * (sz[i] - 1) + span; /* no overflow: the extent fits 63 bits */
  }
  return 0;
}

/* Whether two 1-D int32 tensors share a byte. Exact when both have the same
 * stride (elements of one sit between elements of the other if the start
 * offset modulo the stride leaves room for them), by extents otherwise. */
static int ints_meet(const DLTensor *a, int64_t ae, const DLTensor *b, int64_t be) {
  if (!ranges_meet(a, ae, b, be)) return 0;
  const int64_t sa = rt_stride(a, 0), sb = rt_stride(b, 0);
  if (a->shape[0] < 2 || b->shape[0] < 2 || sa != sb || sa < 2) return 1;
  const uint64_t P = (uint64_t)sa * 4, x = (uintptr_t)rt_data(a), y = (uintptr_t)rt_data(b);
  const uint64_t o = y >= x ? (y - x) % P : (P - (x - y) % P) % P; /* b's start in a's period */
  return o < 4 || o + 4 > P;
}

static fi_status check_scale(const char *name, double s, int dt) {
  if (!isfinite(s) || !(s > 0))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s is %g; a finite scale > 0 is needed", APPEND,
                   name, s);
  /* The scale is the fp8 quantization's; a 16-bit cache is a bit copy. */
  if (dt != JIT_DT_E4M3 && dt != JIT_DT_E5M2 && s != 1.0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s is %g; it applies to fp8 caches only and must be 1.0 for a "
                   "16-bit cache",
                   APPEND, name, s);
  return FI_OK;
}

typedef struct page_call {
  jit_key key;
  fi_append_paged_kv_params p;
  int devtype, device;
  int64_t work; /* vectors */
} page_call;

static fi_status prepare(fi_runtime *rt, const DLTensor *ak, const DLTensor *av, const DLTensor *bi,
                         const DLTensor *pos, DLTensor *kc, DLTensor *vc,
                         const DLTensor *kv_indices, const DLTensor *kv_indptr,
                         const DLTensor *kv_last, fi_kv_layout layout, double k_scale,
                         double v_scale, page_call *c, int *empty) {
  const char *fn = APPEND;
  fi_status st;
  char b1[32], b2[32];
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if ((st = rt_check_tensor(fn, "append_k", ak, 3)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "append_v", av, 3)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "paged_k_cache", kc, 4)) != FI_OK) return st;
  if ((st = rt_check_tensor(fn, "paged_v_cache", vc, 4)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "append_k", ak, "append_v", av)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "append_k", ak, "paged_k_cache", kc)) != FI_OK) return st;
  if ((st = rt_check_same_device(fn, "append_k", ak, "paged_v_cache", vc)) != FI_OK) return st;
  if (layout != FI_KV_LAYOUT_NHD && layout != FI_KV_LAYOUT_HND)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: layout is %d; FI_KV_LAYOUT_NHD (0) or FI_KV_LAYOUT_HND (1) is needed", fn,
                   (int)layout);

  /* dtypes */
  const int dt = rt_tensor_dtype(ak);
  if (dt != JIT_DT_F16 && dt != JIT_DT_BF16)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: append_k has dtype %s; float16 or bfloat16 is needed", fn,
                   rt_dtype_string(ak->dtype, b1, sizeof b1));
  if (rt_tensor_dtype(av) != dt)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: append_v has dtype %s but append_k has %s", fn,
                   rt_dtype_string(av->dtype, b1, sizeof b1),
                   rt_dtype_string(ak->dtype, b2, sizeof b2));
  const int cdt = cache_dtype(kc);
  if (cdt != dt && cdt != JIT_DT_E4M3 && cdt != JIT_DT_E5M2)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: paged_k_cache has dtype %s; append_k's (%s), float8_e4m3fn or "
                   "float8_e5m2 is needed",
                   fn, cache_dtype_string(kc->dtype, b1, sizeof b1),
                   rt_dtype_string(ak->dtype, b2, sizeof b2));
  if (cache_dtype(vc) != cdt)
    return rt_fail(
        FI_ERR_INVALID_ARGUMENT, "%s: paged_v_cache has dtype %s but paged_k_cache has %s", fn,
        cache_dtype_string(vc->dtype, b1, sizeof b1), cache_dtype_string(kc->dtype, b2, sizeof b2));
  if ((st = check_scale("k_scale", k_scale, cdt)) != FI_OK) return st;
  if ((st = check_scale("v_scale", v_scale, cdt)) != FI_OK) return st;

  /* shapes */
  const int64_t nnz = ak->shape[0], H = ak->shape[1], D = ak->shape[2];
  if (av->shape[0] != nnz || av->shape[1] != H || av->shape[2] != D)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: append_v has shape [%lld, %lld, %lld] but append_k [%lld, %lld, %lld]", fn,
                   (long long)av->shape[0], (long long)av->shape[1], (long long)av->shape[2],
                   (long long)nnz, (long long)H, (long long)D);
  if (H == 0 || D == 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: append_k has shape [%lld, %lld, %lld]; heads and head_dim must be >= 1", fn,
                   (long long)nnz, (long long)H, (long long)D);
  if (nnz > INT32_MAX || H > INT32_MAX || D > INT32_MAX || nnz * H > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: append_k shape [%lld, %lld, %lld]: tokens x heads exceeds 2^31-1", fn,
                   (long long)nnz, (long long)H, (long long)D);
  const int hd = layout == FI_KV_LAYOUT_NHD ? 2 : 1, sd = 3 - hd; /* head, slot dimensions */
  const int64_t pages = kc->shape[0], page_size = kc->shape[sd];
  const char *lname = layout == FI_KV_LAYOUT_NHD ? "NHD [pages, page_size, heads, head_dim]"
                                                 : "HND [pages, heads, page_size, head_dim]";
  if (kc->shape[hd] != H || kc->shape[3] != D)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: paged_k_cache has shape [%lld, %lld, %lld, %lld]; layout %s needs "
                   "heads %lld and head_dim %lld as append_k",
                   fn, (long long)kc->shape[0], (long long)kc->shape[1], (long long)kc->shape[2],
                   (long long)kc->shape[3], lname, (long long)H, (long long)D);
  for (int i = 0; i < 4; i++)
    if (vc->shape[i] != kc->shape[i])
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: paged_v_cache has shape [%lld, %lld, %lld, %lld] but paged_k_cache "
                     "[%lld, %lld, %lld, %lld]",
                     fn, (long long)vc->shape[0], (long long)vc->shape[1], (long long)vc->shape[2],
                     (long long)vc->shape[3], (long long)kc->shape[0], (long long)kc->shape[1],
                     (long long)kc->shape[2], (long long)kc->shape[3]);
  if (page_size == 0 || page_size > INT32_MAX)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: paged_k_cache has page_size %lld (layout %s); 1 to 2^31-1 is needed", fn,
                   (long long)page_size, lname);
  if (pages == 0 && nnz > 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: paged_k_cache has no pages for %lld tokens", fn,
                   (long long)nnz);

  /* strides: head_dim contiguous; nothing else is constrained (a cache may
   * be a view of an interleaved [pages, 2, ...] buffer). */
  const DLTensor *t3[2] = {ak, av}, *t4[2] = {kc, vc};
  static const char *const n3[2] = {"append_k", "append_v"};
  static const char *const n4[2] = {"paged_k_cache", "paged_v_cache"};
  int64_t ext3[2], ext4[2];
  for (int i = 0; i < 2; i++) {
    if (D > 1 && rt_stride(t3[i], 2) != 1)
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: %s has head_dim stride %lld; head_dim must be contiguous (stride 1)", fn,
                     n3[i], (long long)rt_stride(t3[i], 2));
    if (D > 1 && rt_stride(t4[i], 3) != 1)
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: %s has head_dim stride %lld; head_dim must be contiguous (stride 1)", fn,
                     n4[i], (long long)rt_stride(t4[i], 3));
    if ((ext3[i] = rt_extent_bytes(t3[i])) < 0 || (ext4[i] = rt_extent_bytes(t4[i])) < 0)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes (shape or stride)",
                     fn, ext3[i] < 0 ? n3[i] : n4[i]);
    /* Two tokens' slots sharing memory would be written in any order. */
    if (ext4[i] > 0 && slots_alias(t4[i], D))
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: %s has strides under which two slots overlap (a stride smaller than "
                     "what the inner dimensions span)",
                     fn, n4[i]);
  }

  /* index tensors */
  if ((st = rt_check_ints(fn, "batch_indices", bi, "append_k", ak, nnz, "append_k's nnz")) != FI_OK) return st;
  if ((st = rt_check_ints(fn, "positions", pos, "append_k", ak, nnz, "append_k's nnz")) != FI_OK) return st;
  if ((st = rt_check_ints(fn, "kv_indices", kv_indices, "append_k", ak, -1, "")) != FI_OK) return st;
  if ((st = rt_check_ints(fn, "kv_indptr", kv_indptr, "append_k", ak, -1, "")) != FI_OK) return st;
  const int64_t B1 = kv_indptr->shape[0];
  if (B1 < 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: kv_indptr has 0 entries; batch + 1 (>= 1) are needed", fn);
  if ((st = rt_check_ints(fn, "kv_last_page_len", kv_last, "append_k", ak, B1 - 1, "kv_indptr's batch")) != FI_OK)
    return st;
  if (nnz > 0 && kv_indices->shape[0] == 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: kv_indices is empty but %lld tokens are appended",
                   fn, (long long)nnz);
  if (nnz > 0 && B1 == 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: kv_indptr has 1 entry (no request) but %lld tokens are appended", fn,
                   (long long)nnz);

  /* overlap: the caches are written while everything else is read. Extents
   * (conservative); k and v caches may interleave (one [pages, 2, ...]
   * buffer) but must not be the same view. */
  const DLTensor *ins[7] = {ak, av, bi, pos, kv_indices, kv_indptr, kv_last};
  static const char *const in_names[7] = {"append_k",   "append_v",  "batch_indices",   "positions",
                                          "kv_indices", "kv_indptr", "kv_last_page_len"};
  for (int w = 0; w < 2; w++)
    for (int i = 0; i < 7; i++) {
      const int64_t ie = i < 2 ? ext3[i] : rt_extent_bytes(ins[i]);
      if (ranges_meet(t4[w], ext4[w], ins[i], ie))
        return rt_fail(FI_ERR_INVALID_ARGUMENT,
                       "%s: %s overlaps %s; the caches need their own memory", fn, n4[w],
                       in_names[i]);
    }
  if (ext4[0] > 0 && rt_data(kc) == rt_data(vc)) {
    int same = 1;
    for (int i = 0; i < 4 && same; i++) same = rt_stride(kc, i) == rt_stride(vc, i);
    if (same)
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "%s: paged_v_cache is the same memory as paged_k_cache", fn);
  }

  *empty = nnz == 0;
  c->devtype = ak->device.device_type;
  c->device = ak->device.device_id;

  /* Vector width: the widest (<= 16 bytes of input) that head_dim, every
   * start address and every stride allow. */
  const int es = jit_dtype_bytes(dt), ces = jit_dtype_bytes(cdt);
  int vec = 16 / es;
  for (; vec > 1; vec /= 2) {
    int ok = D % vec == 0;
    for (int i = 0; ok && i < 2; i++) {
      ok = (uintptr_t)rt_data(t3[i]) % (uintptr_t)(vec * es) == 0 &&
           (uintptr_t)rt_data(t4[i]) % (uintptr_t)(vec * ces) == 0;
      for (int d = 0; ok && d < 2; d++) ok = rt_stride(t3[i], d) % vec == 0;
      for (int d = 0; ok && d < 3; d++) ok = rt_stride(t4[i], d) % vec == 0;
    }
    if (ok) break;
  }
  jit_page_select(dt, cdt, (int)layout, vec, &c->key);
  memset(&c->p, 0, sizeof c->p);
  fi_append_paged_kv_params *p = &c->p;
  p->append_k = rt_data(ak);
  p->append_v = rt_data(av);
  p->k_cache = rt_data(kc);
  p->v_cache = rt_data(vc);
  p->batch_indices = (const int32_t *)rt_data(bi);
  p->positions = (const int32_t *)rt_data(pos);
  p->kv_indices = (const int32_t *)rt_data(kv_indices);
  p->kv_indptr = (const int32_t *)rt_data(kv_indptr);
  for (int d = 0; d < 2; d++) {
    p->ak_stride[d] = rt_stride(ak, d);
    p->av_stride[d] = rt_stride(av, d);
  }
  for (int d = 0; d < 3; d++) {
    p->kc_stride[d] = rt_stride(kc, d);
    p->vc_stride[d] = rt_stride(vc, d);
  }
  p->bi_stride = rt_stride(bi, 0);
  p->pos_stride = rt_stride(pos, 0);
  p->indices_stride = rt_stride(kv_indices, 0);
  p->indptr_stride = rt_stride(kv_indptr, 0);
  p->nnz = (int32_t)nnz;
  p->heads = (int32_t)H;
  p->head_dim = (int32_t)D;
  p->page_size = (int32_t)page_size;
  /* Rounded to float once here: the kernel multiplies by it. */
  p->k_inv_scale = (float)(1.0 / k_scale);
  p->v_inv_scale = (float)(1.0 / v_scale);
  c->work = nnz * H * (D / vec);
  return FI_OK;
}

/* Like act_and_mul: a block per tile of THREADS x CHUNKS vectors (CHUNKS is
 * the kernel's, from the access width); an fp8 cache caps the grid at the
 * blocks resident at once. */
static fi_status launch_page(fi_runtime *rt, page_call *c, void *stream) {
  rt_kernel *k;
  fi_status st = rt_kernel_for(rt, c->devtype, c->device, &c->key, &k, NULL, NULL);
  if (st != FI_OK) return st;
  const int threads = (int)c->key.v[PAGE_P_THREADS];
  const int access = (int)c->key.v[PAGE_P_VEC] * jit_dtype_bytes((int)c->key.v[PAGE_P_IN_DTYPE]);
  const int cache_16bit = jit_dtype_bytes((int)c->key.v[PAGE_P_CACHE_DTYPE]) == 2;
  const int chunks = access >= 16 ? (cache_16bit ? 1 : 2) : 32 / access > 16 ? 16 : 32 / access;
  const int64_t tile = (int64_t)threads * chunks;
  int resident;
  if ((st = rt_kernel_resident(rt, k, threads, &resident)) != FI_OK) return st;
  int64_t grid = (c->work + tile - 1) / tile;
  /* A 16-bit cache: a block per tile (resident blocks looping measured
   * 75.8% of copy at 8192 tokens bf16, a block per tile with every chunk's
   * loads ahead of its page lookups 77.4-77.7% in the same run). An fp8
   * cache (8-byte stores, plain) keeps the cap: uncapped it went from 17.1
   * to 17.4-18.3 us. The kernel's 32-bit tile index caps the grid at 2^30
   * vectors; threads loop past that. */
  if (!cache_16bit && grid > resident) grid = resident;
  if (grid * tile > ((int64_t)1 << 30)) grid = ((int64_t)1 << 30) / tile;
  if (grid < 1) grid = 1;
  return rt_launch_1d(rt, k, grid, (unsigned)threads, stream, &c->p, sizeof c->p);
}

/* Page indices (kv_indices entries, kv_indptr offsets) and positions are
 * device data: the host cannot check them without a copy, so one out of
 * range is the caller's error, as in FlashInfer. */
FI_API fi_status fi_append_paged_kv_cache(fi_runtime *rt, const DLTensor *append_k,
                                          const DLTensor *append_v, const DLTensor *batch_indices,
                                          const DLTensor *positions, DLTensor *paged_k_cache,
                                          DLTensor *paged_v_cache, const DLTensor *kv_indices,
                                          const DLTensor *kv_indptr,
                                          const DLTensor *kv_last_page_len, fi_kv_layout layout,
                                          double k_scale, double v_scale, void *stream) {
  page_call c;
  int empty = 0;
  fi_status st =
      prepare(rt, append_k, append_v, batch_indices, positions, paged_k_cache, paged_v_cache,
              kv_indices, kv_indptr, kv_last_page_len, layout, k_scale, v_scale, &c, &empty);
  if (st != FI_OK || empty) return st;
  return launch_page(rt, &c, stream);
}

/* append_indptr's last entry must be nnz and its entries non-decreasing;
 * they are device data, not checked here (a copy would be needed). */
FI_API fi_status fi_get_batch_indices_positions(fi_runtime *rt, const DLTensor *append_indptr,
                                                const DLTensor *seq_lens, DLTensor *batch_indices,
                                                DLTensor *positions, void *stream) {
  const char *fn = BIP;
  fi_status st;
  char b1[32];
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  const DLTensor *ts[4] = {append_indptr, seq_lens, batch_indices, positions};
  static const char *const names[4] = {"append_indptr", "seq_lens", "batch_indices", "positions"};
  for (int i = 0; i < 4; i++) {
    if ((st = rt_check_tensor(fn, names[i], ts[i], 1)) != FI_OK) return st;
    if (i > 0 && (st = rt_check_same_device(fn, names[0], ts[0], names[i], ts[i])) != FI_OK)
      return st;
    if (rt_tensor_dtype(ts[i]) != JIT_DT_I32)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s; int32 is needed", fn, names[i],
                     rt_dtype_string(ts[i]->dtype, b1, sizeof b1));
    if (ts[i]->shape[0] > INT32_MAX)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s has %lld entries, more than 2^31-1", fn,
                     names[i], (long long)ts[i]->shape[0]);
  }
  const int64_t B1 = append_indptr->shape[0], nnz = batch_indices->shape[0];
  if (B1 < 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: append_indptr has 0 entries; batch + 1 (>= 1) are needed", fn);
  if (seq_lens->shape[0] != B1 - 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: seq_lens has %lld entries; append_indptr's batch needs %lld", fn,
                   (long long)seq_lens->shape[0], (long long)(B1 - 1));
  if (positions->shape[0] != nnz)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: positions has %lld entries but batch_indices %lld",
                   fn, (long long)positions->shape[0], (long long)nnz);
  if (nnz > 0 && B1 == 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: append_indptr has 1 entry (no request) but batch_indices %lld", fn,
                   (long long)nnz);
  int64_t ext[4];
  for (int i = 0; i < 4; i++)
    if ((ext[i] = rt_extent_bytes(ts[i])) < 0)
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s spans more than 2^63 bytes", fn, names[i]);
  /* Outputs apart from the inputs and from each other (exact for two
   * views of one interleaved buffer, such as [nnz, 2]). */
  for (int w = 2; w < 4; w++)
    for (int i = 0; i < w; i++)
      if (ints_meet(ts[w], ext[w], ts[i], ext[i]))
        return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s", fn, names[w], names[i]);
  if (nnz == 0) return FI_OK;

  jit_key key;
  jit_bip_select(&key);
  fi_batch_indices_positions_params p;
  memset(&p, 0, sizeof p);
  p.append_indptr = (const int32_t *)rt_data(append_indptr);
  p.seq_lens = (const int32_t *)rt_data(seq_lens);
  p.batch_indices = (int32_t *)rt_data(batch_indices);
  p.positions = (int32_t *)rt_data(positions);
  p.indptr_stride = rt_stride(append_indptr, 0);
  p.seq_lens_stride = rt_stride(seq_lens, 0);
  p.bi_stride = rt_stride(batch_indices, 0);
  p.pos_stride = rt_stride(positions, 0);
  p.batch = (int32_t)(B1 - 1);
  p.nnz = (int32_t)nnz;

  rt_kernel *k;
  if ((st = rt_kernel_for(rt, append_indptr->device.device_type, append_indptr->device.device_id, &key, &k, NULL,
                          NULL)) != FI_OK)
    return st;
  const int threads = (int)key.v[BIP_P_THREADS];
  int resident;
  if ((st = rt_kernel_resident(rt, k, threads, &resident)) != FI_OK) return st;
  int64_t grid = (nnz + threads - 1) / threads;
  if (grid > resident) grid = resident;
  if (grid < 1) grid = 1;
  return rt_launch_1d(rt, k, grid, (unsigned)threads, stream, &p, sizeof p);
}
