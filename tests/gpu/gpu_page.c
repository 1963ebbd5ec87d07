/* gpu_page.c: fi_append_paged_kv_cache and fi_get_batch_indices_positions on the GPU against a host
 * reference: ragged random batches, pages in random order, NHD/HND, interleaved K/V views, fp8
 * caches. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ft.h"
#include "gpu_util.h"

static cu_api cu;
static CUcontext ctx;
static fi_runtime *rt;
static uint64_t seed;

static int setup(void) {
  if (rt) return 0;
  if (g_setup(&cu, &ctx, &rt, &seed) != 0) return -1;
  return 0;
}

/* ---- host fp8, the same algorithms as fi_port.cuh's ---- */
static uint8_t h_e4m3(float f) {
  const uint32_t s = (g_f32_bits(f) >> 31) << 7;
  const float a = fabsf(f);
  if (a != a) return 0x7f;
  if (a >= 448.0f) return (uint8_t)(s | 0x7eu);
  int e = (int)((g_f32_bits(a) >> 23) & 0xffu) - 127;
  uint32_t code;
  if (e < -6) {
    code = (uint32_t)lrintf(a * 512.0f);
  } else {
    const uint32_t m23 = g_f32_bits(a) & 0x7fffffu;
    uint32_t m = (m23 + 0x7ffffu + ((m23 >> 20) & 1u)) >> 20;
    if (m == 8u) {
      m = 0u;
      e += 1;
    }
    code = ((uint32_t)(e + 7) << 3) | m;
    if (code > 0x7eu) code = 0x7eu;
  }
  return (uint8_t)(s | code);
}
static uint8_t h_e5m2(float f) {
  uint32_t h = g_f32_to_f16(f), lo = h & 0xffu, hi = h >> 8;
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) return (uint8_t)(hi | 0x02u);
  if (lo > 0x80u || (lo == 0x80u && (hi & 1u))) hi += 1u;
  return (uint8_t)hi;
}
/* An fp8 code's place on the number line (both formats are sign-magnitude
 * with magnitudes increasing with the code): neighbours differ by 1. */
static int fp8_ord(uint8_t c) { return c & 0x80 ? -(int)(c & 0x7f) : (int)(c & 0x7f); }

/* cache kinds: the input's dtype, e4m3, e5m2 (DLPack >= 1.0 codes). */
enum { C_SAME = 0, C_E4M3 = 1, C_E5M2 = 2 };
static const char *const cnames[3] = {"same", "e4m3", "e5m2"};
static DLDataType cache_dl(int ck, int in_dt) {
  DLDataType d;
  if (ck == C_SAME) return g_dl(in_dt);
  d.code = ck == C_E4M3 ? 10 : 12;
  d.bits = 8;
  d.lanes = 1;
  return d;
}

typedef struct pcase {
  int batch, page_size, layout, in_dt, ck, interleaved;
  int64_t H, D;
  int64_t ak_head_pad; /* extra elements between heads of append_k/v */
  int max_new;         /* new tokens per request: 1..max_new */
  double k_scale, v_scale;
  /* batch_indices/positions computed on the GPU by fi_get_batch_indices_positions,
   * as strided views (stride 2) of one interleaved [nnz, 2] int32 buffer. */
  int device_bip;
} pcase;

typedef struct presult {
  fi_status st;
  int64_t nnz, pages;
  int64_t wrong;      /* written slots that differ from the reference (16-bit: any bit) */
  int64_t off_by_one; /* fp8 slots one code from the reference (allowed) */
  int64_t untouched;  /* bytes outside the written slots that lost their poison */
  int64_t first_bad;
} presult;

static presult run_case(const pcase *pc, CUstream stream) {
  presult res;
  memset(&res, 0, sizeof res);
  res.first_bad = -1;
  const int B = pc->batch, ps = pc->page_size;
  const int64_t H = pc->H, D = pc->D;
  /* Requests: some tokens already cached, 1..max_new appended. */
  int32_t *indptr = malloc(sizeof(int32_t) * (size_t)(B + 1));
  int32_t *kv_indptr = malloc(sizeof(int32_t) * (size_t)(B + 1));
  int32_t *seq = malloc(sizeof(int32_t) * (size_t)B), *last = malloc(sizeof(int32_t) * (size_t)B);
  indptr[0] = kv_indptr[0] = 0;
  for (int b = 0; b < B; b++) {
    const int n = 1 + (int)(g_rand(&seed) % (uint64_t)pc->max_new);
    const int pre = (int)(g_rand(&seed) % 200);
    seq[b] = pre + n;
    indptr[b + 1] = indptr[b] + n;
    const int np = (seq[b] + ps - 1) / ps;
    kv_indptr[b + 1] = kv_indptr[b] + np;
    last[b] = seq[b] - (np - 1) * ps;
  }
  const int64_t nnz = indptr[B], used = kv_indptr[B];
  const int64_t pages = used + 3; /* a few pages nobody owns: must stay poisoned */
  res.nnz = nnz;
  res.pages = pages;
  /* Pages in random order: a shuffled permutation of all pages, the first `used` taken. */
  int32_t *perm = malloc(sizeof(int32_t) * (size_t)pages);
  for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
  for (int64_t i = pages - 1; i > 0; i--) {
    const int64_t j = (int64_t)(g_rand(&seed) % (uint64_t)(i + 1));
    const int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int32_t *bi = malloc(sizeof(int32_t) * (size_t)(nnz + 1)),
          *pos = malloc(sizeof(int32_t) * (size_t)(nnz + 1));
  for (int b = 0; b < B; b++)
    for (int32_t i = indptr[b]; i < indptr[b + 1]; i++) {
      bi[i] = b;
      pos[i] = seq[b] - (indptr[b + 1] - indptr[b]) + (i - indptr[b]);
    }
  /* Inputs [nnz, H, D] with optional padding between heads. */
  const int es = g_esize(pc->in_dt);
  const int64_t hs = D + pc->ak_head_pad, ts = H * hs, in_elems = nnz * ts;
  uint16_t *hk = malloc((size_t)(in_elems * 2) + 2), *hv = malloc((size_t)(in_elems * 2) + 2);
  for (int64_t i = 0; i < in_elems; i++) {
    g_put(hk, pc->in_dt, i, g_normal(&seed) * 2.0);
    g_put(hv, pc->in_dt, i, g_normal(&seed) * 2.0);
  }
  /* Caches: one page block is ps * H * D elements; interleaved means one
   * [pages, 2, block] buffer, K at 0 and V one block later. */
  const int ces = pc->ck == C_SAME ? es : 1;
  const int64_t block = (int64_t)ps * H * D;
  const int64_t page_stride = pc->interleaved ? 2 * block : block;
  const int64_t cache_bytes = pages * page_stride * ces; /* per buffer */
  const int nbuf = pc->interleaved ? 1 : 2;
  unsigned char *init = malloc((size_t)cache_bytes), *got[2], *want[2], *mask[2];
  memset(init, 0xff, (size_t)cache_bytes); /* NaN in f16, bf16, e4m3 and e5m2 */
  CUdeviceptr dcache[2], dk, dv, dbi, dpos, didx, diptr, dlast, daip = 0, dseq = 0;
  for (int i = 0; i < nbuf; i++) {
    CU_CHECK(&cu, cuMemAlloc(&dcache[i], (size_t)cache_bytes));
    CU_CHECK(&cu, cuMemcpyHtoD(dcache[i], init, (size_t)cache_bytes));
  }
  for (int i = 0; i < 2; i++) {
    got[i] = malloc((size_t)cache_bytes);
    want[i] = malloc((size_t)cache_bytes);
    mask[i] = calloc((size_t)cache_bytes, 1);
    memcpy(want[i], init, (size_t)cache_bytes);
  }
  CU_CHECK(&cu, cuMemAlloc(&dk, (size_t)(in_elems * es) + 16));
  CU_CHECK(&cu, cuMemAlloc(&dv, (size_t)(in_elems * es) + 16));
  CU_CHECK(&cu, cuMemAlloc(&dbi, sizeof(int32_t) * (size_t)(2 * nnz + 2)));
  CU_CHECK(&cu, cuMemAlloc(&dpos, sizeof(int32_t) * (size_t)(nnz + 1)));
  CU_CHECK(&cu, cuMemAlloc(&didx, sizeof(int32_t) * (size_t)pages));
  CU_CHECK(&cu, cuMemAlloc(&diptr, sizeof(int32_t) * (size_t)(B + 1)));
  CU_CHECK(&cu, cuMemAlloc(&dlast, sizeof(int32_t) * (size_t)B));
  if (in_elems) {
    CU_CHECK(&cu, cuMemcpyHtoD(dk, hk, (size_t)(in_elems * es)));
    CU_CHECK(&cu, cuMemcpyHtoD(dv, hv, (size_t)(in_elems * es)));
  }
  if (pc->device_bip)
    CU_CHECK(&cu, cuMemsetD8(dbi, 0xff, sizeof(int32_t) * (size_t)(2 * nnz + 2)));
  else
    CU_CHECK(&cu, cuMemcpyHtoD(dbi, bi, sizeof(int32_t) * (size_t)(nnz + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(dpos, pos, sizeof(int32_t) * (size_t)(nnz + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(didx, perm, sizeof(int32_t) * (size_t)pages));
  CU_CHECK(&cu, cuMemcpyHtoD(diptr, kv_indptr, sizeof(int32_t) * (size_t)(B + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(dlast, last, sizeof(int32_t) * (size_t)B));
  CU_CHECK(&cu, cuCtxSynchronize()); /* the memset above is on the legacy stream: done before a non-blocking run */

  int64_t sa[3] = {nnz, H, D}, sta[3] = {ts, hs, 1};
  DLTensor tk = g_tensor(dk, 0, pc->in_dt, 3, sa, sta), tv = g_tensor(dv, 0, pc->in_dt, 3, sa, sta);
  int64_t sc[4], stc[4];
  sc[0] = pages;
  sc[3] = D;
  stc[0] = page_stride;
  stc[3] = 1;
  if (pc->layout == FI_KV_LAYOUT_NHD) {
    sc[1] = ps, sc[2] = H, stc[1] = H * D, stc[2] = D;
  } else {
    sc[1] = H, sc[2] = ps, stc[1] = (int64_t)ps * D, stc[2] = D;
  }
  DLTensor tkc = g_tensor(dcache[0], 0, pc->in_dt, 4, sc, stc);
  DLTensor tvc = g_tensor(pc->interleaved ? dcache[0] : dcache[1],
                          pc->interleaved ? block * ces : 0, pc->in_dt, 4, sc, stc);
  tkc.dtype = tvc.dtype = cache_dl(pc->ck, pc->in_dt);
  int64_t s_nnz[1] = {nnz}, s_pages[1] = {pages}, s_b1[1] = {B + 1}, s_b[1] = {B};
  DLTensor tbi = g_tensor(dbi, 0, 0, 1, s_nnz, NULL), tpos = g_tensor(dpos, 0, 0, 1, s_nnz, NULL);
  DLTensor tidx = g_tensor(didx, 0, 0, 1, s_pages, NULL),
           tiptr = g_tensor(diptr, 0, 0, 1, s_b1, NULL);
  DLTensor tlast = g_tensor(dlast, 0, 0, 1, s_b, NULL);
  const DLDataType i32 = {kDLInt, 32, 1};
  tbi.dtype = tpos.dtype = tidx.dtype = tiptr.dtype = tlast.dtype = i32;

  int64_t st2[1] = {2};
  if (pc->device_bip) {
    tbi = g_tensor(dbi, 0, 0, 1, s_nnz, st2);
    tpos = g_tensor(dbi, 4, 0, 1, s_nnz, st2);
    tbi.dtype = tpos.dtype = i32;
    CU_CHECK(&cu, cuMemAlloc(&daip, sizeof(int32_t) * (size_t)(B + 1)));
    CU_CHECK(&cu, cuMemAlloc(&dseq, sizeof(int32_t) * (size_t)B));
    CU_CHECK(&cu, cuMemcpyHtoD(daip, indptr, sizeof(int32_t) * (size_t)(B + 1)));
    CU_CHECK(&cu, cuMemcpyHtoD(dseq, seq, sizeof(int32_t) * (size_t)B));
    CU_CHECK(&cu, cuCtxSynchronize()); /* these pageable copies may still be in flight */
    DLTensor taip = g_tensor(daip, 0, 0, 1, s_b1, NULL), tseq = g_tensor(dseq, 0, 0, 1, s_b, NULL);
    taip.dtype = tseq.dtype = i32;
    res.st = fi_get_batch_indices_positions(rt, &taip, &tseq, &tbi, &tpos, stream);
    if (res.st != FI_OK) {
      fprintf(stderr, "fi_get_batch_indices_positions: %s: %s\n", fi_status_string(res.st),
              fi_last_error());
      goto done;
    }
  }
  res.st = fi_append_paged_kv_cache(rt, &tk, &tv, &tbi, &tpos, &tkc, &tvc, &tidx, &tiptr, &tlast,
                                    (fi_kv_layout)pc->layout, pc->k_scale, pc->v_scale, stream);
  if (res.st != FI_OK) {
    fprintf(stderr, "fi_append_paged_kv_cache: %s: %s\n", fi_status_string(res.st),
            fi_last_error());
    goto done;
  }
  CU_CHECK(&cu, cuStreamSynchronize(stream));
  CU_CHECK(&cu, cuMemcpyDtoH(got[0], dcache[0], (size_t)cache_bytes));
  if (!pc->interleaved) CU_CHECK(&cu, cuMemcpyDtoH(got[1], dcache[1], (size_t)cache_bytes));
  /* The reference: each token's K and V in its page slot, in buffer b at element e. */
  {
    const float inv[2] = {(float)(1.0 / pc->k_scale), (float)(1.0 / pc->v_scale)};
    for (int64_t t = 0; t < nnz; t++) {
      const int b = bi[t], p = pos[t];
      const int64_t page = perm[kv_indptr[b] + p / ps], slot = p % ps;
      for (int64_t h = 0; h < H; h++) {
        const int64_t base =
            page * page_stride + (pc->layout == FI_KV_LAYOUT_NHD ? slot * H * D + h * D
                                                                 : h * (int64_t)ps * D + slot * D);
        for (int kv = 0; kv < 2; kv++) {
          const int buf = pc->interleaved ? 0 : kv;
          const int64_t e0 = base + (pc->interleaved && kv ? block : 0);
          const uint16_t *src = kv ? hv : hk;
          for (int64_t d = 0; d < D; d++) {
            const int64_t si = t * ts + h * hs + d, e = e0 + d;
            if (pc->ck == C_SAME) {
              memcpy(want[buf] + e * 2, &src[si], 2);
              mask[buf][e * 2] = mask[buf][e * 2 + 1] = 1;
            } else {
              const float x = (float)g_get(src, pc->in_dt, si) * inv[kv];
              want[buf][e] = pc->ck == C_E4M3 ? h_e4m3(x) : h_e5m2(x);
              mask[buf][e] = 1;
            }
          }
        }
      }
    }
  }
  for (int buf = 0; buf < nbuf; buf++)
    for (int64_t i = 0; i < cache_bytes; i++) {
      if (!mask[buf][i]) {
        if (got[buf][i] != init[i]) res.untouched++;
        continue;
      }
      if (got[buf][i] == want[buf][i]) continue;
      if (pc->ck != C_SAME && abs(fp8_ord(got[buf][i]) - fp8_ord(want[buf][i])) <= 1 &&
          got[buf][i] != 0xff && got[buf][i] != 0x7f) {
        res.off_by_one++;
        continue;
      }
      if (res.first_bad < 0) res.first_bad = i;
      res.wrong++;
    }
done:
  for (int i = 0; i < nbuf; i++) CU_CHECK(&cu, cuMemFree(dcache[i]));
  CU_CHECK(&cu, cuMemFree(dk));
  CU_CHECK(&cu, cuMemFree(dv));
  CU_CHECK(&cu, cuMemFree(dbi));
  CU_CHECK(&cu, cuMemFree(dpos));
  CU_CHECK(&cu, cuMemFree(didx));
  CU_CHECK(&cu, cuMemFree(diptr));
  CU_CHECK(&cu, cuMemFree(dlast));
  if (daip) CU_CHECK(&cu, cuMemFree(daip));
  if (dseq) CU_CHECK(&cu, cuMemFree(dseq));
  for (int i = 0; i < 2; i++) {
    free(got[i]);
    free(want[i]);
    free(mask[i]);
  }
  free(init);
  free(hk);
  free(hv);
  free(bi);
  free(pos);
  free(perm);
  free(indptr);
  free(kv_indptr);
  free(seq);
  free(last);
  return res;
}

static void check(const pcase *pc, CUstream stream) {
  presult r = run_case(pc, stream);
  char what[200];
  snprintf(what, sizeof what, "B=%d page=%d %s %s->%s H=%lld D=%lld pad=%lld %s scales %g/%g",
           pc->batch, pc->page_size, pc->layout ? "HND" : "NHD", g_dtname(pc->in_dt),
           cnames[pc->ck], (long long)pc->H, (long long)pc->D, (long long)pc->ak_head_pad,
           pc->interleaved ? "interleaved" : "separate", pc->k_scale, pc->v_scale);
  fprintf(stderr, "  %s: nnz %lld pages %lld, %lld wrong, %lld fp8 off by one\n", what,
          (long long)r.nnz, (long long)r.pages, (long long)r.wrong, (long long)r.off_by_one);
  FT_CHECK(r.st == FI_OK, "%s: %s", what, fi_status_string(r.st));
  if (r.st != FI_OK) return;
  FT_CHECK(r.wrong == 0, "%s: %lld cache bytes wrong (first at byte %lld)", what,
           (long long)r.wrong, (long long)r.first_bad);
  FT_CHECK(r.untouched == 0, "%s: %lld bytes outside the appended slots changed", what,
           (long long)r.untouched);
  /* fp8: the reference rounds the same product the same way; off by one
   * code would mean a different multiply, tolerated but rare. */
  FT_CHECK(r.off_by_one * 1000 <= r.nnz * pc->H * pc->D * 2, "%s: %lld fp8 codes off by one", what,
           (long long)r.off_by_one);
}

/* The brief's matrix: batches of 1, 7 and 64 ragged requests (1..150 new
 * tokens), page sizes 1, 5, 16, 64, both layouts, f16 and bf16 into their
 * own dtype and into e4m3/e5m2 with scales, every other case as K and V
 * views of one interleaved buffer. */
FT_TEST(page_append_matrix) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  static const int batches[] = {1, 7, 64}, psz[] = {1, 5, 16, 64};
  static const struct {
    int in_dt, ck;
    double ks, vs;
  } kinds[] = {{0, C_SAME, 1.0, 1.0},  {1, C_SAME, 1.0, 1.0}, {1, C_E4M3, 0.5, 3.0},
               {0, C_E5M2, 0.25, 1.5}, {0, C_E4M3, 1.0, 1.0}, {1, C_E5M2, 1.0, 0.125}};
  int n = 0;
  for (int bi = 0; bi < 3; bi++)
    for (int pi = 0; pi < 4; pi++)
      for (int layout = 0; layout < 2; layout++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++, n++) {
          pcase pc = {batches[bi], psz[pi], layout, kinds[k].in_dt, kinds[k].ck, n % 2, 8,
                      128,         0,       150,    kinds[k].ks,    kinds[k].vs, 0};
          check(&pc, NULL);
        }
}

/* Narrow accesses and odd shapes: head_dim 5 (1-element vectors), 100
 * (4), padded input heads, one head, a big page; and fp8 saturation (values
 * over 448 x scale clamp to 448 in e4m3). */
FT_TEST(page_append_odd_shapes) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUstream s;
  CU_CHECK(&cu, cuStreamCreate(&s, 1 /* non-blocking */));
  const pcase cases[] = {
      {7, 5, 0, 1, C_SAME, 0, 3, 5, 0, 150, 1.0, 1.0, 0},
      {7, 5, 1, 0, C_E4M3, 1, 3, 5, 0, 150, 0.5, 2.0, 0},
      {7, 16, 0, 1, C_SAME, 1, 2, 100, 0, 40, 1.0, 1.0, 0},
      {7, 16, 1, 1, C_E5M2, 0, 2, 100, 0, 40, 2.0, 0.5, 0},
      {9, 16, 0, 0, C_SAME, 0, 8, 64, 8, 60, 1.0, 1.0, 0},
      {9, 16, 1, 1, C_SAME, 1, 8, 64, 3, 60, 1.0, 1.0, 0},
      {3, 64, 1, 0, C_SAME, 0, 1, 256, 0, 150, 1.0, 1.0, 0},
      {5, 16, 0, 1, C_E4M3, 0, 4, 128, 0, 100, 0.001, 0.002, 0}, /* saturates */
      {64, 16, 0, 1, C_SAME, 0, 8, 128, 0, 150, 1.0, 1.0, 1},    /* indices from the GPU */
      {7, 5, 1, 0, C_E5M2, 1, 8, 128, 0, 150, 0.5, 0.5, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check(&cases[i], s);
  CU_CHECK(&cu, cuStreamDestroy(s));
}

/* ---- fi_get_batch_indices_positions ---- */
static void check_bip(int B, int max_new, int empty_every, CUstream stream) {
  int32_t *indptr = malloc(sizeof(int32_t) * (size_t)(B + 1)),
          *seq = malloc(sizeof(int32_t) * (size_t)B);
  indptr[0] = 0;
  for (int b = 0; b < B; b++) {
    const int n =
        empty_every && b % empty_every == 0 ? 0 : 1 + (int)(g_rand(&seed) % (uint64_t)max_new);
    seq[b] = n + (int)(g_rand(&seed) % 1000);
    indptr[b + 1] = indptr[b] + n;
  }
  const int64_t nnz = indptr[B];
  int32_t *bi = malloc(sizeof(int32_t) * (size_t)(nnz + 1)),
          *pos = malloc(sizeof(int32_t) * (size_t)(nnz + 1));
  int32_t *gbi = malloc(sizeof(int32_t) * (size_t)(nnz + 1)),
          *gpos = malloc(sizeof(int32_t) * (size_t)(nnz + 1));
  for (int b = 0; b < B; b++)
    for (int32_t i = indptr[b]; i < indptr[b + 1]; i++) {
      bi[i] = b;
      pos[i] = seq[b] - (indptr[b + 1] - indptr[b]) + (i - indptr[b]);
    }
  CUdeviceptr dip, dseq, dbi, dpos;
  CU_CHECK(&cu, cuMemAlloc(&dip, sizeof(int32_t) * (size_t)(B + 1)));
  CU_CHECK(&cu, cuMemAlloc(&dseq, sizeof(int32_t) * (size_t)B + 4));
  CU_CHECK(&cu, cuMemAlloc(&dbi, sizeof(int32_t) * (size_t)(nnz + 1)));
  CU_CHECK(&cu, cuMemAlloc(&dpos, sizeof(int32_t) * (size_t)(nnz + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(dip, indptr, sizeof(int32_t) * (size_t)(B + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(dseq, seq, sizeof(int32_t) * (size_t)B));
  CU_CHECK(&cu, cuMemsetD8(dbi, 0xff, sizeof(int32_t) * (size_t)(nnz + 1)));
  CU_CHECK(&cu, cuMemsetD8(dpos, 0xff, sizeof(int32_t) * (size_t)(nnz + 1)));
  CU_CHECK(&cu, cuCtxSynchronize()); /* the poison is on the legacy stream; a non-blocking one does not wait */
  int64_t s1[1] = {B + 1}, sb[1] = {B}, sn[1] = {nnz};
  const DLDataType i32 = {kDLInt, 32, 1};
  DLTensor tip = g_tensor(dip, 0, 0, 1, s1, NULL), tseq = g_tensor(dseq, 0, 0, 1, sb, NULL);
  DLTensor tbi = g_tensor(dbi, 0, 0, 1, sn, NULL), tpos = g_tensor(dpos, 0, 0, 1, sn, NULL);
  tip.dtype = tseq.dtype = tbi.dtype = tpos.dtype = i32;
  fi_status st = fi_get_batch_indices_positions(rt, &tip, &tseq, &tbi, &tpos, stream);
  FT_CHECK(st == FI_OK, "B=%d: %s (%s)", B, fi_status_string(st), fi_last_error());
  if (st == FI_OK) {
    CU_CHECK(&cu, cuStreamSynchronize(stream));
    CU_CHECK(&cu, cuMemcpyDtoH(gbi, dbi, sizeof(int32_t) * (size_t)(nnz + 1)));
    CU_CHECK(&cu, cuMemcpyDtoH(gpos, dpos, sizeof(int32_t) * (size_t)(nnz + 1)));
    int64_t bad = 0;
    for (int64_t i = 0; i < nnz; i++) bad += gbi[i] != bi[i] || gpos[i] != pos[i];
    fprintf(stderr, "  bip B=%d nnz=%lld: %lld wrong\n", B, (long long)nnz, (long long)bad);
    FT_CHECK(bad == 0, "B=%d nnz=%lld: %lld tokens wrong", B, (long long)nnz, (long long)bad);
    FT_CHECK(gbi[nnz] == -1 && gpos[nnz] == -1, "B=%d: written past nnz", B);
  }
  CU_CHECK(&cu, cuMemFree(dip));
  CU_CHECK(&cu, cuMemFree(dseq));
  CU_CHECK(&cu, cuMemFree(dbi));
  CU_CHECK(&cu, cuMemFree(dpos));
  free(indptr);
  free(seq);
  free(bi);
  free(pos);
  free(gbi);
  free(gpos);
}

FT_TEST(page_batch_indices_positions) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  check_bip(1, 150, 0, NULL);
  check_bip(7, 150, 3, NULL); /* empty requests in between */
  check_bip(64, 150, 0, NULL);
  check_bip(1000, 300, 7, NULL);
  check_bip(5, 1, 2, NULL);
  check_bip(2, 200000, 0, NULL); /* many grid steps */
}
