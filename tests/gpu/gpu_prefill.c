/* gpu_prefill.c: fi_single_prefill and fi_batch_prefill_{ragged,paged}_{plan,run} on the GPU
 * against a float64 CPU reference: fresh random inputs, poisoned outputs (every element
 * must be written), f16 and bf16, head_dim 64/128/256, causal or not, NHD and HND, page
 * sizes 1..64, groups 1..24, ragged batches with L_q = 0 and 1, split-KV, RoPE, soft cap,
 * sliding window, LSE; L_q = 1 against batch decode; a cascade (prefix + suffix merged
 * with fi_merge_state) against one full prefill; CUDA-graph replays after re-plans; 128k
 * tokens (the reference on sampled rows).
 * Every case prints its errors, so one run tells everything. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fi_admin.h"
#include "ft.h"
#include "gpu_util.h"

static cu_api cu;
static CUcontext ctx;
static fi_runtime *rt;
static uint64_t seed;

static g_graph_api gr;

static int setup(void) {
  if (rt) return 0;
  if (g_setup(&cu, &ctx, &rt, &seed) != 0) return -1;
  if (g_load_graph_api(&gr) != 0) return -1;
  return 0;
}

enum { M_SINGLE = 0, M_RAGGED = 1, M_PAGED = 2 };

typedef struct pcase {
  const char *name;
  int mode, dt, D, hq, hkv, hnd, ps, causal, window, rope;
  double cap, sm_scale;
  int B;
  const int *lq, *lkv; /* or drawn: lq in [0, maxq], lkv in [lq, lq + maxextra] */
  int maxq, maxextra;
  double tol;
} pcase;

/* Attention sinks on every run of the cases run while g_sinks_on is set, and the extras
 * run_once passes (NULL without sinks). */
static int g_sinks_on;
static g_sinks g_sk;
/* A custom mask on the single-prefill cases run while g_mask_on is set: packed bits of
 * [L_q][L_kv] (little-endian within a byte), host copy g_hmask, on the device g_dmask. */
static int g_mask_on;
static uint8_t *g_hmask;
static int64_t g_hmask_off[64]; /* request b's segment (byte), segment_packbits' layout */
static fi_attention_extras g_xplan; /* a batch plan's extras: the mask */
static CUdeviceptr g_dmask;
static int64_t g_mshape[1];
static DLTensor g_tmask;
static fi_attention_extras g_xm;
static const fi_attention_extras *g_xp;
/* Set: every run asks for lse in base 2 (extras.lse_base2) and the reference gives log2. */
static int g_lse2_on;
static fi_attention_extras g_xl;
/* An fp8 cache on the cases run while g_kvt is set (10 e4m3, 12 e5m2; 0: q's dtype): K and
 * V random codes holding value / scale, k_scale G_KS and v_scale G_VS. */
static int g_kvt;
#define G_KS 0.5
#define G_VS 2.0
/* > 0: the reference only for tokens t % ref_sample == 0 and each request's last (the
 * others NaN there, and only checked for being written). */
static int ref_sample;

/* ---- the batch on the host ---- */
typedef struct hbatch {
  int B, *lq, *lkv;
  int32_t *qo, *kvp, *last, *indices; /* qo_indptr; kv_indptr (tokens or pages); pages */
  int64_t nq, nkv, pages_used, pages;
  uint16_t *q;        /* q [nq][hq][D] */
  void *kv;           /* K then V (2-byte elements, or fp8 codes): ragged [nkv][hkv][D] or HND
                         [hkv][nkv][D]; paged [pages][ps][hkv][D] or [pages][hkv][ps][D] */
  uint8_t *kc, *vc;   /* fp8: the codes of the logical K and V */
  int64_t kv_elems;   /* of K (V follows) */
  double *qd, *kd, *vd; /* logical q [nq][hq][D], K/V [nkv][hkv][D] (request-contiguous) */
  int32_t *kstart;      /* request b's first logical KV row */
} hbatch;

static void draw(const pcase *c, hbatch *h) {
  h->B = c->B;
  h->lq = calloc((size_t)c->B + 1, sizeof(int));
  h->lkv = calloc((size_t)c->B + 1, sizeof(int));
  for (int b = 0; b < c->B; b++) {
    if (c->lq) {
      h->lq[b] = c->lq[b];
      h->lkv[b] = c->lkv[b];
      continue;
    }
    const uint64_t r = g_rand(&seed) % 8;
    h->lq[b] = r == 0 ? 0 : r == 1 ? 1 : (int)(g_rand(&seed) % (uint64_t)(c->maxq + 1));
    h->lkv[b] = h->lq[b] + (int)(g_rand(&seed) % (uint64_t)(c->maxextra + 1));
    if (!c->causal && g_rand(&seed) % 4 == 0) h->lkv[b] = (int)(g_rand(&seed) % (uint64_t)(c->maxextra + 1));
  }
}

/* Logical K / V element li into the device image at di (V at kv_elems + di). */
static void kv_store(const pcase *c, hbatch *h, int64_t di, int64_t li) {
  if (g_kvt) {
    ((uint8_t *)h->kv)[di] = h->kc[li];
    ((uint8_t *)h->kv)[h->kv_elems + di] = h->vc[li];
    return;
  }
  g_put(h->kv, c->dt, di, h->kd[li]);
  g_put(h->kv, c->dt, h->kv_elems + di, h->vd[li]);
}

static void build(const pcase *c, hbatch *h) {
  const int B = c->B, D = c->D, H = c->hkv, ps = c->mode == M_PAGED ? c->ps : 1;
  h->qo = calloc((size_t)B + 1, 4);
  h->kvp = calloc((size_t)B + 1, 4);
  h->last = calloc((size_t)B + 1, 4);
  h->kstart = calloc((size_t)B + 1, 4);
  for (int b = 0; b < B; b++) {
    h->qo[b + 1] = h->qo[b] + h->lq[b];
    h->kstart[b + 1] = h->kstart[b] + h->lkv[b];
    const int np = (h->lkv[b] + ps - 1) / ps;
    h->kvp[b + 1] = c->mode == M_PAGED ? h->kvp[b] + np : h->kstart[b + 1];
    h->last[b] = np ? h->lkv[b] - (np - 1) * ps : 0;
  }
  h->nq = h->qo[B];
  h->nkv = h->kstart[B];
  const int64_t nqe = h->nq * c->hq * D, nke = h->nkv * H * D;
  h->q = malloc((size_t)(nqe + 8) * 2);
  h->qd = malloc((size_t)(nqe + 8) * sizeof(double));
  for (int64_t i = 0; i < nqe; i++) h->qd[i] = g_put(h->q, c->dt, i, g_normal(&seed));
  h->kd = malloc((size_t)(nke + 8) * sizeof(double));
  h->vd = malloc((size_t)(nke + 8) * sizeof(double));
  uint16_t tmp;
  const int es = g_kvt ? 1 : 2;
  h->kc = g_kvt ? malloc((size_t)nke + 8) : NULL;
  h->vc = g_kvt ? malloc((size_t)nke + 8) : NULL;
  for (int64_t i = 0; i < nke; i++) { /* values rounded to the dtype (fp8: codes times the scales) */
    if (g_kvt) {
      h->kc[i] = g_fp8_random(g_kvt, &seed);
      h->vc[i] = g_fp8_random(g_kvt, &seed);
      h->kd[i] = g_fp8_value(g_kvt, h->kc[i]) * G_KS;
      h->vd[i] = g_fp8_value(g_kvt, h->vc[i]) * G_VS;
      continue;
    }
    h->kd[i] = g_put(&tmp, c->dt, 0, g_normal(&seed));
    h->vd[i] = g_put(&tmp, c->dt, 0, g_normal(&seed));
  }
  /* Device images. */
  if (c->mode != M_PAGED) {
    h->kv_elems = nke;
    h->kv = malloc((size_t)(2 * nke + 8) * (size_t)es);
    for (int64_t t = 0; t < h->nkv; t++)
      for (int k = 0; k < H; k++)
        for (int d = 0; d < D; d++) {
          const int64_t li = (t * H + k) * D + d;
          const int64_t di = c->hnd ? ((int64_t)k * h->nkv + t) * D + d : li;
          kv_store(c, h, di, li);
        }
    return;
  }
  /* Paged: pages in random order with spares, every element random. */
  h->pages_used = h->kvp[B];
  h->pages = h->pages_used + h->pages_used / 4 + 3;
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)h->pages);
  for (int64_t i = 0; i < h->pages; i++) perm[i] = i;
  for (int64_t i = h->pages - 1; i > 0; i--) {
    const int64_t j = (int64_t)(g_rand(&seed) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  h->indices = malloc(sizeof(int32_t) * (size_t)(h->pages_used + 1));
  for (int64_t i = 0; i < h->pages_used; i++) h->indices[i] = (int32_t)perm[i];
  free(perm);
  const int64_t pe = (int64_t)ps * H * D;
  h->kv_elems = h->pages * pe;
  h->kv = malloc((size_t)(2 * h->kv_elems + 8) * (size_t)es);
  for (int64_t i = 0; i < 2 * h->kv_elems; i++) {
    if (g_kvt)
      ((uint8_t *)h->kv)[i] = g_fp8_random(g_kvt, &seed);
    else
      g_put(h->kv, c->dt, i, g_normal(&seed));
  }
  for (int b = 0; b < B; b++)
    for (int t = 0; t < h->lkv[b]; t++) {
      const int64_t page = h->indices[h->kvp[b] + t / ps], slot = t % ps;
      for (int k = 0; k < H; k++)
        for (int d = 0; d < D; d++) {
          const int64_t li = (((int64_t)h->kstart[b] + t) * H + k) * D + d;
          const int64_t di = page * pe + (c->hnd ? ((int64_t)k * ps + slot) * D : (slot * H + k) * D) + d;
          kv_store(c, h, di, li);
        }
    }
}

static void hfree(hbatch *h) {
  free(h->lq), free(h->lkv), free(h->qo), free(h->kvp), free(h->last), free(h->indices);
  free(h->q), free(h->kv), free(h->qd), free(h->kd), free(h->vd), free(h->kstart), free(h->kc), free(h->vc);
}

/* ---- the reference ---- */
static void rope_ref(double *x, int D, double pos) {
  for (int i = 0; i < D / 2; i++) {
    const float f = (float)(1.0 / pow(1e4, 2.0 * i / D));
    const double a = pos * (double)f, cs = cos(a), sn = sin(a);
    const double x1 = x[i], x2 = x[i + D / 2];
    x[i] = x1 * cs - x2 * sn;
    x[i + D / 2] = x2 * cs + x1 * sn;
  }
}

/* out [nq][hq][D], lse [nq][hq] (natural log; -inf and 0 for a row with nothing to attend). */
static void reference(const pcase *c, const hbatch *h, double *out, double *lse) {
  const int D = c->D, H = c->hkv, G = c->hq / c->hkv;
  const double sm = c->sm_scale > 0 ? c->sm_scale : 1.0 / sqrt((double)D);
  int maxkv = 1;
  for (int b = 0; b < h->B; b++)
    if (h->lkv[b] > maxkv) maxkv = h->lkv[b];
  double *s = malloc(sizeof(double) * (size_t)maxkv), *qr = malloc(sizeof(double) * (size_t)D);
  double *acc = malloc(sizeof(double) * (size_t)D);
  double *kr = malloc(sizeof(double) * (size_t)maxkv * H * D);
  for (int b = 0; b < h->B; b++) {
    const int lq = h->lq[b], lkv = h->lkv[b];
    const double *kb = h->kd + (int64_t)h->kstart[b] * H * D, *vb = h->vd + (int64_t)h->kstart[b] * H * D;
    memcpy(kr, kb, sizeof(double) * (size_t)lkv * H * D);
    if (c->rope)
      for (int j = 0; j < lkv; j++)
        for (int k = 0; k < H; k++) rope_ref(kr + ((int64_t)j * H + k) * D, D, j);
    for (int t = 0; t < lq; t++) {
      if (ref_sample > 0 && t % ref_sample != 0 && t != lq - 1) {
        for (int hh = 0; hh < c->hq; hh++) {
          const int64_t row = ((int64_t)h->qo[b] + t) * c->hq + hh;
          for (int d = 0; d < D; d++) out[row * D + d] = NAN;
          lse[row] = NAN;
        }
        continue;
      }
      const int64_t pos = (int64_t)t + lkv - lq;
      int64_t hi = c->causal ? (pos + 1 < lkv ? pos + 1 : lkv) : lkv;
      const int64_t lo = c->window >= 0 && pos - c->window > 0 ? pos - c->window : 0;
      if (hi < lo) hi = lo;
      for (int hh = 0; hh < c->hq; hh++) {
        const int64_t row = ((int64_t)h->qo[b] + t) * c->hq + hh;
        memcpy(qr, h->qd + row * D, sizeof(double) * (size_t)D);
        if (c->rope) rope_ref(qr, D, (double)pos);
        const int k = hh / G;
        double m = -INFINITY;
        for (int64_t j = lo; j < hi; j++) {
          double x = 0;
          const double *kj = kr + (j * H + k) * D;
          for (int d = 0; d < D; d++) x += qr[d] * kj[d];
          x *= sm;
          if (c->cap > 0) x = c->cap * tanh(x / c->cap);
          if (g_hmask) {
            const int64_t bit = 8 * g_hmask_off[b] + (int64_t)t * lkv + j;
            if (!((g_hmask[bit >> 3] >> (bit & 7)) & 1)) x = -INFINITY;
          }
          s[j] = x;
          if (x > m) m = x;
        }
        /* P once a KV token, then O row by row of V (the sums in the same order as a
         * column at a time, with an exp a column: 5x the test's CPU time at 20000 tokens) */
        /* A sink joins the denominator (and the max) with no value. */
        const double sk = g_sinks_on ? (double)g_sk.host[hh] : -INFINITY;
        if (sk > m) m = sk;
        double den = sk > -INFINITY ? exp(sk - m) : 0.0;
        for (int64_t j = lo; j < hi; j++) {
          s[j] = m > -INFINITY ? exp(s[j] - m) : 0.0; /* (every key masked: out 0, lse -inf) */
          den += s[j];
        }
        for (int d = 0; d < D; d++) acc[d] = 0;
        for (int64_t j = lo; j < hi; j++) {
          const double pj = s[j], *vj = vb + (j * H + k) * D;
          for (int d = 0; d < D; d++) acc[d] += pj * vj[d];
        }
        for (int d = 0; d < D; d++) out[row * D + d] = den > 0 ? acc[d] / den : 0.0;
        lse[row] = den > 0 ? (m + log(den)) / (g_lse2_on ? 0.6931471805599453 : 1.0) : -INFINITY;
      }
    }
  }
  free(s), free(qr), free(kr), free(acc);
}

/* ---- comparisons ---- */
typedef struct errs {
  double on, od, lmax;
  int64_t nan_out, bad_inf;
} errs;
static void compare(const pcase *c, const char *what, const hbatch *h, const void *out, const float *lse,
                    const double *ro, const double *rl, double tol) {
  errs e;
  memset(&e, 0, sizeof e);
  const int64_t n = h->nq * c->hq * c->D;
  for (int64_t i = 0; i < n; i++) {
    const double g = g_get(out, c->dt, i);
    if (g != g) {
      e.nan_out++;
      continue;
    }
    if (ro[i] != ro[i]) continue; /* a row the sampled reference skipped */
    e.on += (g - ro[i]) * (g - ro[i]);
    e.od += ro[i] * ro[i];
  }
  if (lse)
    for (int64_t i = 0; i < h->nq * c->hq; i++) {
      if (rl[i] != rl[i]) { /* skipped by the sampled reference: written, at least */
        e.bad_inf += lse[i] != lse[i];
        continue;
      }
      if (isinf(rl[i]) || isinf(lse[i]) || lse[i] != lse[i]) {
        e.bad_inf += !(isinf(rl[i]) && isinf(lse[i]) && lse[i] < 0);
        continue;
      }
      const double d = fabs(lse[i] - rl[i]);
      if (d > e.lmax) e.lmax = d;
    }
  double oe = e.od > 0 ? sqrt(e.on / e.od) : sqrt(e.on);
  if (ref_sample > 0) {
    /* Sampled rows differ in size by orders (token 0 attends itself alone, token 10^5 is
     * a mean of 10^5 rows): the worst row's own relative error, not the norm's. */
    oe = 0;
    for (int64_t r = 0; r < h->nq * c->hq; r++) {
      double rn = 0, rd = 0;
      if (ro[r * c->D] != ro[r * c->D]) continue;
      for (int d = 0; d < c->D; d++) {
        const double g = g_get(out, c->dt, r * c->D + d), x = ro[r * c->D + d];
        rn += (g - x) * (g - x);
        rd += x * x;
      }
      const double re = rd > 0 ? sqrt(rn / rd) : sqrt(rn);
      if (re > oe || re != re) oe = re != re ? INFINITY : re;
    }
  }
  int maxq = 0, maxkv = 0;
  for (int b = 0; b < h->B; b++) {
    if (h->lq[b] > maxq) maxq = h->lq[b];
    if (h->lkv[b] > maxkv) maxkv = h->lkv[b];
  }
  fprintf(stderr,
          "  %-30s %-8s %s D=%d %d/%d %s ps=%d causal=%d win=%d rope=%d cap=%g B=%d maxLq=%d maxLkv=%d: "
          "out err %.3g (tol %.1g), lse max err %.3g, unwritten/NaN %lld, lse inf mismatches %lld\n",
          c->name, what, g_dtname(c->dt), c->D, c->hq, c->hkv, c->hnd ? "HND" : "NHD", c->ps, c->causal, c->window,
          c->rope, c->cap, h->B, maxq, maxkv, oe, tol, e.lmax, (long long)e.nan_out, (long long)e.bad_inf);
  FT_CHECK(oe < tol && e.nan_out == 0, "%s %s: out error %.3g, %lld NaN (unwritten)", c->name, what, oe,
           (long long)e.nan_out);
  FT_CHECK(!lse || (e.lmax < 2e-2 && e.bad_inf == 0), "%s %s: lse error %.3g, %lld inf mismatches", c->name,
           what, e.lmax, (long long)e.bad_inf);
}

static fi_prefill_params params_of(const pcase *c) {
  fi_prefill_params p;
  fi_prefill_params_init(&p);
  p.causal = c->causal;
  p.attn.window_left = c->window;
  p.attn.logits_soft_cap = c->cap;
  p.attn.sm_scale = c->sm_scale;
  p.attn.pos_encoding = c->rope ? FI_POS_ROPE_LLAMA : FI_POS_NONE;
  if (g_kvt) {
    p.attn.k_scale = G_KS;
    p.attn.v_scale = G_VS;
  }
  return p;
}

/* ---- device buffers of a batch ---- */
typedef struct dbatch {
  CUdeviceptr q, kv, out, lse, ws, idx;
  size_t ws_bytes;
  int64_t qshape[3], kshape[4], oshape[3], lshape[2], ishape[1], wshape[1];
  DLTensor tq, tk, tv, to, tl, ti, tw;
} dbatch;

static void upload(const pcase *c, const hbatch *h, dbatch *d, int max_batch, int max_qo) {
  const int D = c->D;
  const int64_t nq = max_qo > h->nq ? max_qo : h->nq;
  const size_t qb = (size_t)(nq * c->hq * D + 8) * 2;
  memset(d, 0, sizeof *d);
  CU_CHECK(&cu, cuMemAlloc(&d->q, qb));
  CU_CHECK(&cu, cuMemcpyHtoD(d->q, h->q, (size_t)(h->nq * c->hq * D) * 2 + 2));
  CU_CHECK(&cu, cuMemAlloc(&d->out, qb));
  CU_CHECK(&cu, cuMemsetD8(d->out, 0xff, qb)); /* poison: NaN in f16 and bf16 */
  CU_CHECK(&cu, cuMemAlloc(&d->lse, (size_t)(nq * c->hq + 8) * 4));
  CU_CHECK(&cu, cuMemsetD8(d->lse, 0xff, (size_t)(nq * c->hq + 8) * 4));
  const int es = g_kvt ? 1 : 2;
  CU_CHECK(&cu, cuMemAlloc(&d->kv, (size_t)(2 * h->kv_elems + 8) * (size_t)es));
  CU_CHECK(&cu, cuMemcpyHtoD(d->kv, h->kv, (size_t)(2 * h->kv_elems) * (size_t)es + 2));
  d->qshape[0] = nq, d->qshape[1] = c->hq, d->qshape[2] = D;
  d->tq = g_tensor(d->q, 0, c->dt, 3, d->qshape, NULL);
  memcpy(d->oshape, d->qshape, sizeof d->oshape);
  d->to = g_tensor(d->out, 0, c->dt, 3, d->oshape, NULL);
  d->lshape[0] = nq, d->lshape[1] = c->hq;
  d->tl = g_tensor(d->lse, 0, 2, 2, d->lshape, NULL);
  if (c->mode == M_PAGED) {
    d->kshape[0] = h->pages;
    d->kshape[1] = c->hnd ? c->hkv : c->ps;
    d->kshape[2] = c->hnd ? c->ps : c->hkv;
    d->kshape[3] = D;
    d->tk = g_tensor(d->kv, 0, c->dt, 4, d->kshape, NULL);
    d->tv = g_tensor(d->kv, h->kv_elems * es, c->dt, 4, d->kshape, NULL);
    CU_CHECK(&cu, cuMemAlloc(&d->idx, (size_t)(h->pages_used + 1) * 4));
    CU_CHECK(&cu, cuMemcpyHtoD(d->idx, h->indices, (size_t)(h->pages_used + 1) * 4));
    d->ishape[0] = h->pages_used;
    d->ti = g_tensor(d->idx, 0, 2, 1, d->ishape, NULL);
    d->ti.dtype = (DLDataType){kDLInt, 32, 1};
  } else {
    d->kshape[0] = c->hnd ? c->hkv : h->nkv;
    d->kshape[1] = c->hnd ? h->nkv : c->hkv;
    d->kshape[2] = D;
    d->tk = g_tensor(d->kv, 0, c->dt, 3, d->kshape, NULL);
    d->tv = g_tensor(d->kv, h->kv_elems * es, c->dt, 3, d->kshape, NULL);
  }
  if (g_kvt) d->tk.dtype = d->tv.dtype = (DLDataType){(uint8_t)g_kvt, 8, 1};
  if (c->mode != M_SINGLE) {
    DLDevice dev = {kDLCUDA, 0};
    FT_CHECK(fi_batch_prefill_workspace_size(rt, dev, max_batch > 0 ? max_batch : h->B,
                                             max_qo > 0 ? max_qo : (int)h->nq, c->hq, c->hkv, D,
                                             &d->ws_bytes) == FI_OK,
             "%s", fi_last_error());
    CU_CHECK(&cu, cuMemAlloc(&d->ws, d->ws_bytes + 256));
    d->wshape[0] = (int64_t)d->ws_bytes;
    d->tw = g_tensor(d->ws, 0, 0, 1, d->wshape, NULL);
    d->tw.dtype = (DLDataType){kDLUInt, 8, 1};
  }
}
static void dfree(dbatch *d) {
  cu.cuMemFree(d->q), cu.cuMemFree(d->kv), cu.cuMemFree(d->out), cu.cuMemFree(d->lse);
  if (d->ws) cu.cuMemFree(d->ws);
  if (d->idx) cu.cuMemFree(d->idx);
}

static fi_batch_prefill_info info_of(const pcase *c, const hbatch *h) {
  fi_batch_prefill_info in;
  memset(&in, 0, sizeof in);
  in.batch = h->B;
  in.qo_indptr = h->qo;
  in.kv_indptr = h->kvp;
  in.kv_last_page_len = c->mode == M_PAGED ? h->last : NULL;
  in.num_qo_heads = c->hq;
  in.num_kv_heads = c->hkv;
  in.head_dim = c->D;
  in.page_size = c->mode == M_PAGED ? c->ps : 0;
  in.q_dtype = in.kv_dtype = g_dl(c->dt);
  if (g_kvt) in.kv_dtype = (DLDataType){(uint8_t)g_kvt, 8, 1};
  return in;
}

/* Plans (batch modes) and runs once on stream s. */
static fi_status run_once(const pcase *c, const hbatch *h, dbatch *d, fi_prefill_plan **plan,
                          const fi_batch_prefill_info *info, CUstream s) {
  const fi_prefill_params p = params_of(c);
  const fi_kv_layout lay = c->hnd ? FI_KV_LAYOUT_HND : FI_KV_LAYOUT_NHD;
  fi_status st;
  const fi_attention_extras *xp = g_mask_on ? &g_xplan : NULL; /* a batch plan's mask */
  if (c->mode == M_SINGLE) {
    DLTensor q1 = d->tq, o1 = d->to, l1 = d->tl;
    int64_t qs[3] = {h->nq, c->hq, c->D}, ls[2] = {h->nq, c->hq};
    q1.shape = qs, o1.shape = qs, l1.shape = ls;
    return fi_single_prefill_ex(rt, &q1, &d->tk, &d->tv, &o1, &l1, lay, &p, g_xp, s);
  }
  if (c->mode == M_RAGGED) {
    if ((st = fi_batch_prefill_ragged_plan_ex(rt, info, &p, xp, &d->tw, s, plan)) != FI_OK) return st;
    return fi_batch_prefill_ragged_run_ex(rt, *plan, &d->tq, &d->tk, &d->tv, lay, &d->to, &d->tl, g_xp, s);
  }
  if ((st = fi_batch_prefill_paged_plan_ex(rt, info, &p, xp, &d->tw, s, plan)) != FI_OK) return st;
  return fi_batch_prefill_paged_run_ex(rt, *plan, &d->tq, &d->tk, &d->tv, &d->ti, lay, &d->to, &d->tl, g_xp, s);
}

static void fetch(const pcase *c, const hbatch *h, const dbatch *d, void **out, float **lse) {
  const size_t ob = (size_t)(h->nq * c->hq * c->D) * 2, lb = (size_t)(h->nq * c->hq) * 4;
  *out = malloc(ob + 16);
  *lse = malloc(lb + 16);
  CU_CHECK(&cu, cuMemcpyDtoH(*out, d->out, ob + 2));
  CU_CHECK(&cu, cuMemcpyDtoH(*lse, d->lse, lb + 4));
}

/* One case end to end; returns 0 when the call itself succeeded. */
static int run_case(const pcase *c) {
  g_xp = NULL;
  if (g_sinks_on) {
    if (g_sinks_make(&cu, &g_sk, c->hq, &seed) != 0) {
      FT_CHECK(0, "%s: %d heads: more than g_sinks holds", c->name, c->hq);
      return -1;
    }
    g_xp = &g_sk.x;
  }
  if (g_lse2_on) {
    if (g_xp) g_xl = *g_xp;
    else fi_attention_extras_init(&g_xl);
    g_xl.lse_base2 = 1;
    g_xp = &g_xl;
  }
  hbatch h;
  memset(&h, 0, sizeof h);
  draw(c, &h);
  build(c, &h);
  if (g_mask_on) {
    /* every request's segment, padded to a byte: about 70% of the pairs attended, every
     * 7th query token nothing */
    int64_t nb = 1;
    for (int b = 0; b < h.B && b < 64; b++) g_hmask_off[b] = nb - 1, nb += ((int64_t)h.lq[b] * h.lkv[b] + 7) / 8;
    if (h.B > 64 || !(g_hmask = calloc((size_t)nb, 1))) {
      FT_CHECK(0, "%s: more than 64 requests, or out of memory", c->name);
      return -1;
    }
    for (int b = 0; b < h.B; b++)
      for (int64_t i = 0; i < (int64_t)h.lq[b] * h.lkv[b]; i++)
        if ((i / (h.lkv[b] ? h.lkv[b] : 1)) % 7 != 3 && g_uniform(&seed) < 0.7) {
          const int64_t bit = 8 * g_hmask_off[b] + i;
          g_hmask[bit >> 3] |= (uint8_t)(1u << (bit & 7));
        }
    CU_CHECK(&cu, cuMemAlloc(&g_dmask, (size_t)nb));
    CU_CHECK(&cu, cuMemcpyHtoD(g_dmask, g_hmask, (size_t)nb));
    g_mshape[0] = nb;
    memset(&g_tmask, 0, sizeof g_tmask);
    g_tmask.data = (void *)(uintptr_t)g_dmask;
    g_tmask.device.device_type = kDLCUDA;
    g_tmask.ndim = 1;
    g_tmask.dtype.code = kDLUInt, g_tmask.dtype.bits = 8, g_tmask.dtype.lanes = 1;
    g_tmask.shape = g_mshape;
    fi_attention_extras_init(&g_xplan);
    g_xplan.custom_mask = &g_tmask;
    if (c->mode == M_SINGLE) { /* a single prefill takes both at the call */
      if (g_xp) g_xm = *g_xp;
      else fi_attention_extras_init(&g_xm);
      g_xm.custom_mask = &g_tmask;
      g_xp = &g_xm;
    }
  }
  dbatch d;
  upload(c, &h, &d, 0, 0);
  fi_batch_prefill_info info = info_of(c, &h);
  fi_prefill_plan *plan = NULL;
  fi_status st = run_once(c, &h, &d, &plan, &info, NULL);
  FT_CHECK(st == FI_OK, "%s: %s", c->name, fi_last_error());
  CU_CHECK(&cu, cuCtxSynchronize());
  if (st == FI_OK) {
    double *ro = malloc(sizeof(double) * (size_t)(h.nq * c->hq * c->D + 8));
    double *rl = malloc(sizeof(double) * (size_t)(h.nq * c->hq + 8));
    reference(c, &h, ro, rl);
    void *out;
    float *lse;
    fetch(c, &h, &d, &out, &lse);
    compare(c, c->mode == M_SINGLE ? "single" : c->mode == M_RAGGED ? "ragged" : "paged", &h, out, lse, ro, rl,
            c->tol);
    /* A second run into the poisoned outputs (out and LSE) gives the same bits (no race). */
    CU_CHECK(&cu, cuMemsetD8(d.out, 0xff, (size_t)(h.nq * c->hq * c->D) * 2));
    CU_CHECK(&cu, cuMemsetD8(d.lse, 0xff, (size_t)(h.nq * c->hq) * 4));
    st = run_once(c, &h, &d, &plan, &info, NULL);
    FT_CHECK(st == FI_OK, "%s: second run (batch forms re-plan): %s", c->name, fi_last_error());
    CU_CHECK(&cu, cuCtxSynchronize());
    void *out2;
    float *lse2;
    fetch(c, &h, &d, &out2, &lse2);
    if (st == FI_OK && memcmp(out, out2, (size_t)(h.nq * c->hq * c->D) * 2) != 0) {
      /* where: how many elements, how many still poisoned (a row never written), the first */
      const uint16_t *a = out, *b = out2;
      const int64_t n = h.nq * c->hq * c->D;
      int64_t ndiff = 0, npois = 0, first = -1;
      for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
          ndiff++, npois += b[i] == 0xffff;
          if (first < 0) first = i;
        }
      compare(c, "second run", &h, out2, lse2, ro, rl, c->tol);
      FT_CHECK(0, "%s: a second run differs (race?): %lld of %lld elements, %lld poisoned; first at token %lld head %lld dim %lld",
               c->name, (long long)ndiff, (long long)n, (long long)npois, (long long)(first / (c->hq * c->D)),
               (long long)(first / c->D % c->hq), (long long)(first % c->D));
    }
    if (st == FI_OK && memcmp(lse, lse2, (size_t)(h.nq * c->hq) * 4) != 0) {
      int64_t ndiff = 0, first = -1;
      for (int64_t i = 0; i < h.nq * c->hq; i++)
        if (memcmp(&lse[i], &lse2[i], 4) != 0) {
          ndiff++;
          if (first < 0) first = i;
        }
      FT_CHECK(0, "%s: a second run's LSE differs (race?): %lld of %lld values; first at token %lld head %lld (%g, then %g)",
               c->name, (long long)ndiff, (long long)(h.nq * c->hq), (long long)(first / c->hq),
               (long long)(first % c->hq), (double)lse[first], (double)lse2[first]);
    }
    free(out), free(lse), free(out2), free(lse2), free(ro), free(rl);
  }
  fi_batch_prefill_plan_destroy(plan);
  dfree(&d);
  hfree(&h);
  if (g_sinks_on) g_sinks_free(&cu, &g_sk);
  if (g_mask_on) {
    CU_CHECK(&cu, cuMemFree(g_dmask));
    free(g_hmask);
    g_hmask = NULL;
  }
  g_xp = NULL;
  return st == FI_OK ? 0 : -1;
}

static double tol_of(int dt) { return dt == 0 ? 3e-3 : 2e-2; }

static int count_entry(const fi_cache_entry *e, void *user) {
  (void)e;
  ++*(int *)user;
  return 0;
}

/* ---- the cases ---- */

FT_TEST(single_prefill_every_dtype_dim_mask_layout) {
  FT_REQUIRE(setup() == 0);
  static const int lq[3] = {37, 128, 200}, lkv[3] = {300, 128, 333};
  for (int dt = 0; dt < 2; dt++)
    for (int di = 0; di < 3; di++)
      for (int causal = 0; causal < 2; causal++)
        for (int hnd = 0; hnd < 2; hnd++) {
          const int D = (int[]){64, 128, 256}[di];
          pcase c = {"single", M_SINGLE, dt, D, 8, 2, hnd, 1, causal, -1, 0, 0, 0, 1,
                     &lq[(dt + di + hnd) % 3], &lkv[(dt + di + hnd) % 3], 0, 0, tol_of(dt)};
          run_case(&c);
        }
  /* Which kernel ran. With this process's own (in-memory) cache the wgmma binaries are
   * there iff the device is an sm_90 and FI_PREFILL_WGMMA is not 0: the cases above have
   * head_dim 64 and 128 without RoPE and more than 16 rows. A shared FI_TEST_CACHE or a
   * system layer (FI_CACHE_SYSTEM_PATH) holds whatever was prewarmed, so the check needs
   * the in-memory cache alone. */
  if (!getenv("FI_TEST_CACHE") && !getenv("FI_CACHE_SYSTEM_PATH")) {
    int major = 0, minor = 0, n = 0;
    FT_CHECK(cu.cuDeviceGetAttribute(&major, 75 /* COMPUTE_CAPABILITY_MAJOR */, 0) == 0 &&
             cu.cuDeviceGetAttribute(&minor, 76 /* COMPUTE_CAPABILITY_MINOR */, 0) == 0);
    const char *e = getenv("FI_PREFILL_WGMMA"), *q = getenv("FI_PREFILL_QTILE");
    const int want = major == 9 && minor == 0 && !(e && strcmp(e, "0") == 0) && !(q && *q);
    FT_CHECK(fi_admin_list(rt, "single_prefill_sm90", NULL, count_entry, &n) == FI_OK, "%s", fi_last_error());
    FT_CHECK((n > 0) == want, "%d single_prefill_sm90 kernels compiled on sm_%d%d with FI_PREFILL_WGMMA %s",
             n, major, minor, e ? e : "unset");
    fprintf(stderr, "  kernels: %d wgmma (sm_%d%d, FI_PREFILL_WGMMA %s)\n", n, major, minor, e ? e : "unset");
  }
}

FT_TEST(single_prefill_groups_tiles_and_options) {
  FT_REQUIRE(setup() == 0);
  static const int lq1[1] = {1}, lkv1[1] = {777}, lq2[1] = {300}, lkv2[1] = {700}, lq3[1] = {64}, lkv3[1] = {64};
  const struct {
    const char *name;
    int hq, hkv, causal, window, rope;
    double cap, sm;
    const int *lq, *lkv;
  } v[] = {
      {"group 1", 4, 4, 1, -1, 0, 0, 0, lq2, lkv2},
      {"group 3", 6, 2, 1, -1, 0, 0, 0, lq2, lkv2},
      {"group 8 L_q=1", 32, 4, 1, -1, 0, 0, 0, lq1, lkv1},
      {"group 16", 16, 1, 1, -1, 0, 0, 0, lq3, lkv3},
      {"group 24", 48, 2, 0, -1, 0, 0, 0, lq3, lkv2},
      {"window 100", 8, 2, 1, 100, 0, 0, 0, lq2, lkv2},
      {"window 0", 8, 2, 1, 0, 0, 0, 0, lq3, lkv3},
      {"window non-causal", 8, 2, 0, 37, 0, 0, 0, lq2, lkv2},
      {"soft cap 30", 8, 2, 1, -1, 0, 30, 0, lq2, lkv2},
      {"sm_scale 0.3", 8, 2, 1, -1, 0, 0, 0.3, lq2, lkv2},
      {"rope", 8, 2, 1, -1, 1, 0, 0, lq2, lkv2},
      {"rope window cap", 8, 2, 1, 64, 1, 20, 0, lq2, lkv2},
  };
  for (int dt = 0; dt < 2; dt++)
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
      for (int di = 0; di < 3; di++) {
        const int D = (int[]){64, 128, 256}[di];
        pcase c = {v[i].name, M_SINGLE, dt, D, v[i].hq, v[i].hkv, (int)(i % 2), 1, v[i].causal, v[i].window,
                   v[i].rope, v[i].cap, v[i].sm, 1, v[i].lq, v[i].lkv, 0, 0, tol_of(dt) * (v[i].rope ? 1.5 : 1)};
        run_case(&c);
      }
}

FT_TEST(batch_prefill_ragged) {
  FT_REQUIRE(setup() == 0);
  for (int dt = 0; dt < 2; dt++)
    for (int di = 0; di < 3; di++)
      for (int causal = 0; causal < 2; causal++) {
        const int D = (int[]){64, 128, 256}[di];
        pcase c = {"ragged", M_RAGGED, dt, D, 8, 2, (di + causal) % 2, 1, causal, -1, 0, 0, 0, 6,
                   NULL, NULL, 150, 600, tol_of(dt)};
        run_case(&c);
      }
  /* Options on a ragged batch. */
  pcase w = {"ragged window rope", M_RAGGED, 1, 128, 12, 4, 0, 1, 1, 200, 1, 0, 0, 5, NULL, NULL, 300, 900, 3e-2};
  run_case(&w);
  pcase cap = {"ragged cap group 5", M_RAGGED, 0, 128, 10, 2, 1, 1, 1, -1, 0, 25, 0, 5, NULL, NULL, 200, 500, 3e-3};
  run_case(&cap);
  /* head_dim 64 with more than 2048 packed rows (group 4): its default there, the
   * three-consumer kernel (q tile 192, the ping-pong, three stages), ragged and paged,
   * causal and not, and with a window and the soft cap */
  static const int lq64[4] = {700, 1, 600, 1000}, lkv64[4] = {900, 300, 600, 1500};
  for (int dt = 0; dt < 2; dt++) {
    pcase l = {"D=64 long", dt ? M_PAGED : M_RAGGED, dt, 64, 8, 2, dt, 16, dt, -1, 0, 0, 0, 4, lq64, lkv64, 0, 0,
               tol_of(dt)};
    run_case(&l);
  }
  pcase lw = {"D=64 long window cap", M_PAGED, 1, 64, 8, 2, 0, 16, 1, 300, 0, 30, 0, 4, lq64, lkv64, 0, 0, 2e-2};
  run_case(&lw);
}

FT_TEST(batch_prefill_paged_page_sizes) {
  FT_REQUIRE(setup() == 0);
  const int pss[5] = {1, 3, 16, 17, 64};
  for (int dt = 0; dt < 2; dt++)
    for (int i = 0; i < 5; i++)
      for (int hnd = 0; hnd < 2; hnd++) {
        const int D = (int[]){64, 128, 256}[(i + hnd) % 3];
        pcase c = {"paged", M_PAGED, dt, D, 8, 2, hnd, pss[i], (i + dt) % 2 ? 0 : 1, -1, 0, 0, 0, 5,
                   NULL, NULL, 130, 700, tol_of(dt)};
        run_case(&c);
      }
}

/* fp8 caches (issue 45 item 1: e4m3 and e5m2 codes holding value / scale, k_scale 0.5,
 * v_scale 2; the mma.sync kernel of *_prefill_fp8kv, q staged as f16): single f16 / bf16 x
 * head_dim 64 / 128 / 256 x NHD / HND, causal or not; ragged; paged pages 1, 16, 17 and
 * split at 6000 KV tokens; window and soft cap; sinks; q tile 128 (many rows). */
FT_TEST(prefill_fp8_kv) {
  FT_REQUIRE(setup() == 0);
  static const int lq[3] = {37, 128, 200}, lkv[3] = {300, 128, 333}, lqs[2] = {3, 40}, lkvs[2] = {6000, 2500};
  for (int f = 0; f < 2; f++) {
    g_kvt = f ? 12 : 10;
    for (int dt = 0; dt < 2; dt++)
      for (int di = 0; di < 3; di++)
        for (int hnd = 0; hnd < 2; hnd++) {
          const int D = (int[]){64, 128, 256}[di];
          pcase c = {f ? "single e5m2" : "single e4m3", M_SINGLE, dt, D, 8, 2, hnd, 1, (di + hnd) % 2, -1, 0, 0, 0, 1,
                     &lq[(dt + di + hnd) % 3], &lkv[(dt + di + hnd) % 3], 0, 0, tol_of(dt)};
          run_case(&c);
        }
    pcase r = {"ragged fp8", M_RAGGED, f, 128, 8, 2, 0, 1, 1, -1, 0, 0, 0, 6, NULL, NULL, 150, 600, tol_of(f)};
    run_case(&r);
    const int pss[3] = {1, 16, 17};
    for (int i = 0; i < 3; i++) {
      pcase pg = {"paged fp8", M_PAGED, (i + f) % 2, (int[]){64, 128, 256}[i], 8, 2, i % 2, pss[i], 1, -1, 0, 0, 0, 5,
                  NULL, NULL, 130, 700, tol_of((i + f) % 2)};
      run_case(&pg);
    }
    pcase sp = {"paged fp8 split", M_PAGED, 1 - f, 128, 32, 8, 0, 16, 1, -1, 0, 0, 0, 2, lqs, lkvs, 0, 0, tol_of(1 - f)};
    run_case(&sp);
    pcase wc = {"fp8 window cap", M_PAGED, f, 128, 8, 2, 1, 16, 1, 200, 0, 30, 0, 4, NULL, NULL, 300, 900,
                tol_of(f) * 1.5};
    run_case(&wc);
    g_sinks_on = 1;
    pcase sk = {"fp8 sinks", M_PAGED, f, 64, 64, 8, 0, 16, 1, -1, 0, 0, 0, 3, NULL, NULL, 100, 800, tol_of(f)};
    run_case(&sk);
    g_sinks_on = 0;
    static const int lql[1] = {900}, lkvl[1] = {1500};
    pcase big = {"fp8 q tile 128", M_RAGGED, f, 128, 16, 2, 0, 1, 1, -1, 0, 0, 0, 1, lql, lkvl, 0, 0, tol_of(f)};
    run_case(&big);
  }
  g_kvt = 0;
}

FT_TEST(batch_prefill_split_kv) {
  FT_REQUIRE(setup() == 0);
  /* A few query tokens over long KVs: the planner splits them (partials + merge). */
  static const int lq[2] = {16, 3}, lkv[2] = {30000, 12000};
  for (int dt = 0; dt < 2; dt++)
    for (int mode = M_RAGGED; mode <= M_PAGED; mode++) {
      pcase c = {"split-KV", mode, dt, 128, 8, 8, mode == M_PAGED, 16, 1, -1, 0, 0, 0, 2, lq, lkv, 0, 0,
                 tol_of(dt)};
      run_case(&c);
    }
  pcase wc = {"split-KV window", M_PAGED, 1, 64, 4, 4, 0, 16, 1, 5000, 0, 0, 0, 2, lq, lkv, 0, 0, 2e-2};
  run_case(&wc);
  /* Split tiles of more than 128 packed rows (160: the q tile 192 of FI_PREFILL_WG=3x128 at
   * head_dim 64; partial slots hold 192 rows). */
  static const int lq4[2] = {40, 3}, lkv4[2] = {20000, 9000};
  pcase w4 = {"split-KV 160 rows", M_PAGED, 1, 64, 8, 2, 0, 16, 1, -1, 0, 0, 0, 2, lq4, lkv4, 0, 0, 2e-2};
  run_case(&w4);
}

/* Attention sinks (gpt-oss: head_dim 64, 64/8) on every path: single (mma.sync or wgmma as
 * chosen), ragged and paged batches with an empty query run, the long head_dim 64 batch
 * (the wgmma kernel with a producer, its staged epilogue), split KV (the merge folds them),
 * a window with the soft cap, f16 and bf16; and on mma.sync alone (FI_PREFILL_WGMMA=0 is
 * the prefill-mma job of make gpu-test). */
FT_TEST(prefill_sinks) {
  FT_REQUIRE(setup() == 0);
  g_sinks_on = 1;
  static const int lq[4] = {0, 1, 77, 300}, lkv[4] = {50, 200, 77, 900};
  for (int dt = 0; dt < 2; dt++) {
    pcase s1 = {"sinks single", M_SINGLE, dt, 64, 64, 8, 0, 1, 1, -1, 0, 0, 0, 1, NULL, NULL, 200, 300, tol_of(dt)};
    run_case(&s1);
    pcase r = {"sinks ragged", M_RAGGED, dt, 64, 64, 8, dt, 1, 1, -1, 0, 0, 0, 4, lq, lkv, 0, 0, tol_of(dt)};
    run_case(&r);
    pcase pg = {"sinks paged D=128", M_PAGED, dt, 128, 32, 8, 0, 16, 1, -1, 0, 0, 0, 4, lq, lkv, 0, 0, tol_of(dt)};
    run_case(&pg);
  }
  static const int lq64[4] = {700, 1, 600, 1000}, lkv64[4] = {900, 300, 600, 1500};
  pcase l = {"sinks D=64 long", M_PAGED, 1, 64, 8, 2, 0, 16, 1, -1, 0, 0, 0, 4, lq64, lkv64, 0, 0, 2e-2};
  run_case(&l);
  static const int lqs[2] = {16, 3}, lkvs[2] = {30000, 12000};
  pcase sp = {"sinks split-KV", M_PAGED, 1, 64, 64, 8, 0, 16, 1, -1, 0, 0, 0, 2, lqs, lkvs, 0, 0, 2e-2};
  run_case(&sp);
  pcase wc = {"sinks window cap", M_RAGGED, 0, 64, 16, 4, 0, 1, 1, 100, 0, 30, 0, 3, NULL, NULL, 200, 600, 3e-3};
  run_case(&wc);
  g_sinks_on = 0;
}

/* lse in base 2 (extras.lse_base2: FlashInfer's and TVM's convention) on every kernel that
 * writes it: single prefill, ragged, paged D=128 32/8 (wgmma on sm_90), a split paged
 * batch (the merge writes it), with sinks. */
FT_TEST(prefill_lse_base2) {
  FT_REQUIRE(setup() == 0);
  g_lse2_on = 1;
  static const int lq[4] = {0, 1, 77, 300}, lkv[4] = {50, 200, 77, 900};
  pcase s1 = {"lse2 single", M_SINGLE, 1, 128, 8, 2, 0, 1, 1, -1, 0, 0, 0, 1, NULL, NULL, 200, 300, tol_of(1)};
  run_case(&s1);
  pcase r = {"lse2 ragged", M_RAGGED, 0, 64, 8, 8, 1, 1, 1, -1, 0, 0, 0, 4, lq, lkv, 0, 0, tol_of(0)};
  run_case(&r);
  pcase pg = {"lse2 paged D=128", M_PAGED, 1, 128, 32, 8, 0, 16, 1, -1, 0, 0, 0, 4, lq, lkv, 0, 0, tol_of(1)};
  run_case(&pg);
  static const int lqs[2] = {16, 3}, lkvs[2] = {30000, 12000};
  g_sinks_on = 1;
  pcase sp = {"lse2 split-KV sinks", M_PAGED, 1, 64, 64, 8, 0, 16, 1, -1, 0, 0, 0, 2, lqs, lkvs, 0, 0, 2e-2};
  run_case(&sp);
  g_sinks_on = 0;
  g_lse2_on = 0;
}

/* Custom masks (packed bits): single prefill in f16 and bf16, head_dims 64, 128, 256,
 * causal and not, a window, with sinks; batch plans (ragged, paged, split KV, tree-verify
 * shapes); every 7th query token attends nothing (out 0). */
FT_TEST(prefill_custom_mask) {
  FT_REQUIRE(setup() == 0);
  g_mask_on = 1;
  static const int lq[1] = {77}, lkv[1] = {300}, lq2[1] = {300}, lkv2[1] = {300};
  for (int dt = 0; dt < 2; dt++)
    for (int di = 0; di < 3; di++) {
      const int D = (int[]){64, 128, 256}[di];
      pcase c = {"mask single", M_SINGLE, dt, D, 8, 2, di == 1, 1, (dt + di) % 2, -1, 0, 0, 0, 1, lq, lkv, 0, 0,
                 tol_of(dt)};
      run_case(&c);
    }
  pcase w = {"mask single window", M_SINGLE, 1, 128, 32, 8, 0, 1, 1, 100, 0, 0, 0, 1, lq2, lkv2, 0, 0, 2e-2};
  run_case(&w);
  /* batches: the plan lays the requests' segments (ragged and paged, split KV, a tree-verify
   * shape of 8 query tokens a request over 600-token caches) */
  static const int tq[6] = {8, 8, 8, 8, 8, 8}, tkv[6] = {600, 608, 650, 700, 9, 1200};
  pcase r = {"mask ragged", M_RAGGED, 0, 128, 32, 8, 0, 1, 1, -1, 0, 0, 0, 5, NULL, NULL, 100, 300, 3e-3};
  run_case(&r);
  pcase pg = {"mask paged tree", M_PAGED, 1, 64, 64, 8, 0, 16, 1, -1, 0, 0, 0, 6, tq, tkv, 0, 0, 2e-2};
  run_case(&pg);
  static const int lqs[2] = {16, 3}, lkvs[2] = {30000, 12000};
  pcase sp = {"mask split-KV", M_PAGED, 1, 128, 8, 8, 0, 16, 1, -1, 0, 0, 0, 2, lqs, lkvs, 0, 0, 2e-2};
  run_case(&sp);
  g_sinks_on = 1;
  pcase sk = {"mask single sinks", M_SINGLE, 0, 64, 64, 8, 0, 1, 1, -1, 0, 0, 0, 1, lq2, lkv2, 0, 0, 3e-3};
  run_case(&sk);
  g_sinks_on = 0;
  g_mask_on = 0;
}

/* The upper length, 128k tokens: a whole 131072-token causal prefill (2^20 packed
 * rows at group 8, 2^27 elements of q) and an append of a few tokens onto 128k cached
 * ones over pages of 16 (2^13 page ids a request); the reference for every 4093rd (7th)
 * token and each request's last (strides prime to the 16-token q tile, so the sampled
 * rows fall on every warp and every offset of the diagonal in a K/V tile), every element
 * checked for being written. */
FT_TEST(prefill_128k_tokens) {
  FT_REQUIRE(setup() == 0);
  static const int lq[1] = {131072}, lkv[1] = {131072};
  pcase c = {"128k", M_SINGLE, 1, 128, 8, 1, 0, 1, 1, -1, 0, 0, 0, 1, lq, lkv, 0, 0, 2e-2};
  ref_sample = 4093;
  run_case(&c);
  static const int lq2[2] = {64, 3}, lkv2[2] = {131072, 100003};
  pcase a = {"128k append", M_PAGED, 0, 128, 8, 2, 0, 16, 1, -1, 0, 0, 0, 2, lq2, lkv2, 0, 0, 3e-3};
  ref_sample = 7;
  run_case(&a);
  ref_sample = 0;
}

/* L_q = 1 over a paged cache: prefill equals batch decode on the same data. */
FT_TEST(prefill_with_one_query_token_equals_decode) {
  FT_REQUIRE(setup() == 0);
  static const int lq[4] = {1, 1, 1, 1}, lkv[4] = {1, 300, 2049, 77};
  for (int dt = 0; dt < 2; dt++)
    for (int di = 0; di < 3; di++) {
      const int D = (int[]){64, 128, 256}[di];
      pcase c = {"L_q=1 vs decode", M_PAGED, dt, D, 32, 8, di == 1, 16, 1, -1, 0, 0, 0, 4, lq, lkv, 0, 0, tol_of(dt)};
      hbatch h;
      memset(&h, 0, sizeof h);
      draw(&c, &h);
      build(&c, &h);
      dbatch d;
      upload(&c, &h, &d, 0, 0);
      fi_batch_prefill_info info = info_of(&c, &h);
      fi_prefill_plan *plan = NULL;
      FT_CHECK(run_once(&c, &h, &d, &plan, &info, NULL) == FI_OK, "%s", fi_last_error());
      CU_CHECK(&cu, cuCtxSynchronize());
      void *pout;
      float *plse;
      fetch(&c, &h, &d, &pout, &plse);
      /* decode on the same cache */
      fi_batch_decode_info di2;
      memset(&di2, 0, sizeof di2);
      di2.batch = 4;
      di2.indptr = h.kvp;
      di2.last_page_len = h.last;
      di2.num_qo_heads = c.hq;
      di2.num_kv_heads = c.hkv;
      di2.head_dim = D;
      di2.page_size = c.ps;
      di2.q_dtype = di2.kv_dtype = g_dl(dt);
      size_t wsb;
      DLDevice dev = {kDLCUDA, 0};
      FT_REQUIRE(fi_batch_decode_workspace_size(rt, dev, 4, c.hq, c.hkv, D, &wsb) == FI_OK);
      CUdeviceptr dws, dip, dlp;
      CU_CHECK(&cu, cuMemAlloc(&dws, wsb));
      CU_CHECK(&cu, cuMemAlloc(&dip, 5 * 4));
      CU_CHECK(&cu, cuMemAlloc(&dlp, 4 * 4));
      CU_CHECK(&cu, cuMemcpyHtoD(dip, h.kvp, 5 * 4));
      CU_CHECK(&cu, cuMemcpyHtoD(dlp, h.last, 4 * 4));
      int64_t ws_shape[1] = {(int64_t)wsb}, ip_shape[1] = {5}, lp_shape[1] = {4};
      DLTensor tws = g_tensor(dws, 0, 0, 1, ws_shape, NULL), tip = g_tensor(dip, 0, 0, 1, ip_shape, NULL),
               tlp = g_tensor(dlp, 0, 0, 1, lp_shape, NULL);
      tws.dtype = (DLDataType){kDLUInt, 8, 1};
      tip.dtype = tlp.dtype = (DLDataType){kDLInt, 32, 1};
      fi_decode_plan *dp = NULL;
      FT_REQUIRE(fi_batch_decode_plan(rt, &di2, NULL, &tws, NULL, &dp) == FI_OK, "%s", fi_last_error());
      CU_CHECK(&cu, cuMemsetD8(d.out, 0xff, (size_t)(h.nq * c.hq * D) * 2));
      FT_REQUIRE(fi_batch_decode_run(rt, dp, &d.tq, &d.tk, &d.tv, &tip, &d.ti, &tlp,
                                     c.hnd ? FI_KV_LAYOUT_HND : FI_KV_LAYOUT_NHD, &d.to, &d.tl, NULL) == FI_OK,
                 "%s", fi_last_error());
      CU_CHECK(&cu, cuCtxSynchronize());
      void *dout;
      float *dlse;
      fetch(&c, &h, &d, &dout, &dlse);
      double num = 0, den = 0, lmax = 0;
      for (int64_t i = 0; i < h.nq * c.hq * D; i++) {
        const double a = g_get(pout, dt, i), b = g_get(dout, dt, i);
        num += (a - b) * (a - b);
        den += b * b;
      }
      for (int64_t i = 0; i < h.nq * c.hq; i++)
        if (fabs(plse[i] - dlse[i]) > lmax) lmax = fabs(plse[i] - dlse[i]);
      const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
      fprintf(stderr, "  L_q=1 %s D=%d 32/8: prefill vs decode out %.3g, lse max %.3g\n", g_dtname(dt), D, rel, lmax);
      FT_CHECK(rel < tol_of(dt) && lmax < 1e-2, "prefill and decode differ: %.3g, lse %.3g", rel, lmax);
      /* and both against the reference */
      double *ro = malloc(sizeof(double) * (size_t)(h.nq * c.hq * D)), *rl = malloc(sizeof(double) * (size_t)(h.nq * c.hq));
      reference(&c, &h, ro, rl);
      compare(&c, "prefill", &h, pout, plse, ro, rl, c.tol);
      compare(&c, "decode", &h, dout, dlse, ro, rl, c.tol);
      free(ro), free(rl), free(pout), free(plse), free(dout), free(dlse);
      fi_batch_decode_plan_destroy(dp);
      fi_batch_prefill_plan_destroy(plan);
      cu.cuMemFree(dws), cu.cuMemFree(dip), cu.cuMemFree(dlp);
      dfree(&d);
      hfree(&h);
    }
}

/* Cascade: a shared prefix (non-causal for the new tokens) and the request's own suffix
 * (causal), merged by fi_merge_state, equal one causal prefill over the whole KV. */
FT_TEST(cascade_prefix_and_suffix_merge_to_the_full_prefill) {
  FT_REQUIRE(setup() == 0);
  for (int dt = 0; dt < 2; dt++) {
    const int D = 128, hq = 8, hkv = 2, P = 1000, S = 300, Lq = 200, L = P + S;
    static int lqv[1], lkvv[1];
    lqv[0] = Lq, lkvv[0] = L;
    pcase full = {"cascade full", M_SINGLE, dt, D, hq, hkv, 0, 1, 1, -1, 0, 0, 0, 1, lqv, lkvv, 0, 0, tol_of(dt)};
    hbatch h;
    memset(&h, 0, sizeof h);
    draw(&full, &h);
    build(&full, &h);
    dbatch d;
    upload(&full, &h, &d, 0, 0);
    fi_prefill_params p = params_of(&full);
    FT_REQUIRE(fi_single_prefill(rt, &d.tq, &d.tk, &d.tv, &d.to, &d.tl, FI_KV_LAYOUT_NHD, &p, NULL) == FI_OK,
               "%s", fi_last_error());
    /* prefix [0, P) non-causal, suffix [P, L) causal: views of the same K/V */
    const size_t ob = (size_t)Lq * hq * D * 2, lb = (size_t)Lq * hq * 4;
    CUdeviceptr o1, l1, o2, l2, om, lm;
    CU_CHECK(&cu, cuMemAlloc(&o1, ob));
    CU_CHECK(&cu, cuMemAlloc(&o2, ob));
    CU_CHECK(&cu, cuMemAlloc(&om, ob));
    CU_CHECK(&cu, cuMemAlloc(&l1, lb));
    CU_CHECK(&cu, cuMemAlloc(&l2, lb));
    CU_CHECK(&cu, cuMemAlloc(&lm, lb));
    CU_CHECK(&cu, cuMemsetD8(om, 0xff, ob));
    int64_t os[3] = {Lq, hq, D}, ls[2] = {Lq, hq}, kp[3] = {P, hkv, D}, ks[3] = {S, hkv, D};
    DLTensor to1 = g_tensor(o1, 0, dt, 3, os, NULL), to2 = g_tensor(o2, 0, dt, 3, os, NULL),
             tom = g_tensor(om, 0, dt, 3, os, NULL);
    DLTensor tl1 = g_tensor(l1, 0, 2, 2, ls, NULL), tl2 = g_tensor(l2, 0, 2, 2, ls, NULL),
             tlm = g_tensor(lm, 0, 2, 2, ls, NULL);
    DLTensor kpre = g_tensor(d.kv, 0, dt, 3, kp, NULL), vpre = g_tensor(d.kv, h.kv_elems * 2, dt, 3, kp, NULL);
    DLTensor ksuf = g_tensor(d.kv, (int64_t)P * hkv * D * 2, dt, 3, ks, NULL),
             vsuf = g_tensor(d.kv, h.kv_elems * 2 + (int64_t)P * hkv * D * 2, dt, 3, ks, NULL);
    fi_prefill_params pp = p;
    pp.causal = 0;
    FT_CHECK(fi_single_prefill(rt, &d.tq, &kpre, &vpre, &to1, &tl1, FI_KV_LAYOUT_NHD, &pp, NULL) == FI_OK, "%s",
             fi_last_error());
    FT_CHECK(fi_single_prefill(rt, &d.tq, &ksuf, &vsuf, &to2, &tl2, FI_KV_LAYOUT_NHD, &p, NULL) == FI_OK, "%s",
             fi_last_error());
    FT_CHECK(fi_merge_state(rt, &to1, &tl1, &to2, &tl2, &tom, &tlm, NULL) == FI_OK, "%s", fi_last_error());
    CU_CHECK(&cu, cuCtxSynchronize());
    void *fout, *mout = malloc(ob);
    float *flse, *mlse = malloc(lb);
    fetch(&full, &h, &d, &fout, &flse);
    CU_CHECK(&cu, cuMemcpyDtoH(mout, om, ob));
    CU_CHECK(&cu, cuMemcpyDtoH(mlse, lm, lb));
    double *ro = malloc(sizeof(double) * (size_t)Lq * hq * D), *rl = malloc(sizeof(double) * (size_t)Lq * hq);
    reference(&full, &h, ro, rl);
    compare(&full, "full", &h, fout, flse, ro, rl, full.tol);
    compare(&full, "merged", &h, mout, mlse, ro, rl, full.tol * 1.5);
    free(ro), free(rl), free(fout), free(flse), free(mout), free(mlse);
    cu.cuMemFree(o1), cu.cuMemFree(o2), cu.cuMemFree(om), cu.cuMemFree(l1), cu.cuMemFree(l2), cu.cuMemFree(lm);
    dfree(&d);
    hfree(&h);
  }
}

/* CUDA-graph mode: a captured run replays correctly after re-plans of other batches. */
FT_TEST(cuda_graph_replays_after_replans) {
  FT_REQUIRE(setup() == 0);
  if (!gr.begin || !gr.inst) {
    fprintf(stderr, "  no graph API in libcuda: skipped\n");
    return;
  }
  const int maxB = 6, maxQ = 1200;
  for (int mode = M_RAGGED; mode <= M_PAGED; mode++) {
    pcase c = {"graph", mode, 1, 128, 8, 2, 0, 16, 1, -1, 0, 0, 0, maxB, NULL, NULL, 190, 1000, 2e-2};
    /* one data set large enough for every re-plan: draw the biggest batch first */
    hbatch h;
    memset(&h, 0, sizeof h);
    draw(&c, &h);
    build(&c, &h);
    dbatch d;
    upload(&c, &h, &d, maxB, maxQ);
    CUstream s;
    CU_CHECK(&cu, cuStreamCreate(&s, 1));
    fi_batch_prefill_info info = info_of(&c, &h);
    info.max_batch = maxB;
    info.max_qo_tokens = maxQ;
    fi_prefill_plan *plan = NULL;
    /* upload()'s pageable copies and memsets are on the legacy stream, which s does not wait for */
    CU_CHECK(&cu, cuCtxSynchronize());
    FT_REQUIRE(run_once(&c, &h, &d, &plan, &info, s) == FI_OK, "%s", fi_last_error());
    CU_CHECK(&cu, cuStreamSynchronize(s));
    /* capture the run only */
    CUgraph g;
    CUgraphExec ge;
    const fi_kv_layout lay = FI_KV_LAYOUT_NHD;
    CU_CHECK(&cu, cuStreamSynchronize(s));
    FT_REQUIRE(gr.begin(s, 0) == 0);
    fi_status st = mode == M_RAGGED ? fi_batch_prefill_ragged_run(rt, plan, &d.tq, &d.tk, &d.tv, lay, &d.to, &d.tl, s)
                                    : fi_batch_prefill_paged_run(rt, plan, &d.tq, &d.tk, &d.tv, &d.ti, lay, &d.to, &d.tl, s);
    FT_REQUIRE(gr.end(s, &g) == 0 && st == FI_OK, "%s", fi_last_error());
    FT_REQUIRE(gr.inst(&ge, g, 0) == 0);
    /* re-plan smaller batches (prefixes of the data: the same tensors) and replay */
    for (int B = maxB; B >= 1; B -= 2) {
      hbatch hb = h;
      hb.B = B;
      hb.nq = h.qo[B];
      fi_batch_prefill_info ib = info;
      ib.batch = B;
      const fi_prefill_params p = params_of(&c);
      st = mode == M_RAGGED ? fi_batch_prefill_ragged_plan(rt, &ib, &p, &d.tw, s, &plan)
                            : fi_batch_prefill_paged_plan(rt, &ib, &p, &d.tw, s, &plan);
      FT_CHECK(st == FI_OK, "re-plan B=%d: %s", B, fi_last_error());
      CU_CHECK(&cu, cuMemsetD8(d.out, 0xff, (size_t)(h.nq * c.hq * c.D) * 2));
      CU_CHECK(&cu, cuCtxSynchronize()); /* the poison is on the legacy stream; s does not wait for it */
      FT_REQUIRE(gr.launch(ge, s) == 0);
      CU_CHECK(&cu, cuStreamSynchronize(s));
      double *ro = malloc(sizeof(double) * (size_t)(hb.nq * c.hq * c.D + 8)),
             *rl = malloc(sizeof(double) * (size_t)(hb.nq * c.hq + 8));
      reference(&c, &hb, ro, rl);
      void *out;
      float *lse;
      fetch(&c, &hb, &d, &out, &lse);
      compare(&c, mode == M_RAGGED ? "graph ragged" : "graph paged", &hb, out, lse, ro, rl, c.tol);
      free(ro), free(rl), free(out), free(lse);
    }
    gr.exec_destroy(ge);
    gr.destroy(g);
    cu.cuStreamDestroy(s);
    fi_batch_prefill_plan_destroy(plan);
    dfree(&d);
    hfree(&h);
  }
}

/* V's head_dim apart from q's and k's (192 / 128: DeepSeek's MHA prefill, the dvo kernels):
 * q [T, H, 192], k [T, H_kv, 192] and V as the last 128 columns of a [T, H_kv, 256] buffer
 * (kv_b_proj's output: V strided, its own strides), out [T, H, 128] poisoned first; single
 * prefill (causal and not) and a ragged batch (an empty request, one of one token, a long
 * one that splits), f16 and bf16, against float64; lse too. */
static void dvo_case(int dt, int hq, int hkv, int B, const int *lq, const int *lkv, int causal, int single) {
  const int D = 192, DV = 128, DW = 256, G = hq / hkv;
  int64_t nq = 0, nkv = 0;
  int32_t qo[9] = {0}, kvi[9] = {0};
  for (int b = 0; b < B; b++) qo[b + 1] = qo[b] + lq[b], kvi[b + 1] = kvi[b] + lkv[b];
  nq = qo[B], nkv = kvi[B];
  const int es = 2;
  void *hq_ = malloc((size_t)(nq * hq * D + 1) * es), *hk = malloc((size_t)(nkv * hkv * D + 1) * es),
       *hw = malloc((size_t)(nkv * hkv * DW + 1) * es), *ho = malloc((size_t)(nq * hq * DV + 1) * es);
  float *hl = malloc(sizeof(float) * (size_t)(nq * hq + 1));
  double *qd = malloc(sizeof(double) * (size_t)(nq * hq * D + 1)), *kd = malloc(sizeof(double) * (size_t)(nkv * hkv * D + 1)),
         *vd = malloc(sizeof(double) * (size_t)(nkv * hkv * DV + 1));
  for (int64_t i = 0; i < nq * hq * D; i++) qd[i] = g_put(hq_, dt, i, g_normal(&seed));
  for (int64_t i = 0; i < nkv * hkv * D; i++) kd[i] = g_put(hk, dt, i, g_normal(&seed));
  for (int64_t t = 0; t < nkv * hkv; t++)
    for (int e = 0; e < DW; e++) {
      const double x = g_put(hw, dt, t * DW + e, g_normal(&seed));
      if (e >= DW - DV) vd[t * DV + e - (DW - DV)] = x;
    }
  CUdeviceptr dq, dk, dw, dout, dl, dws = 0;
  CU_CHECK(&cu, cuMemAlloc(&dq, (size_t)(nq * hq * D + 8) * es));
  CU_CHECK(&cu, cuMemAlloc(&dk, (size_t)(nkv * hkv * D + 8) * es));
  CU_CHECK(&cu, cuMemAlloc(&dw, (size_t)(nkv * hkv * DW + 8) * es));
  CU_CHECK(&cu, cuMemAlloc(&dout, (size_t)(nq * hq * DV + 8) * es));
  CU_CHECK(&cu, cuMemAlloc(&dl, sizeof(float) * (size_t)(nq * hq + 8)));
  CU_CHECK(&cu, cuMemcpyHtoD(dq, hq_, (size_t)(nq * hq * D) * es));
  CU_CHECK(&cu, cuMemcpyHtoD(dk, hk, (size_t)(nkv * hkv * D) * es));
  CU_CHECK(&cu, cuMemcpyHtoD(dw, hw, (size_t)(nkv * hkv * DW) * es));
  CU_CHECK(&cu, cuMemsetD8(dout, 0xff, (size_t)(nq * hq * DV) * es));
  CU_CHECK(&cu, cuMemsetD8(dl, 0xff, sizeof(float) * (size_t)(nq * hq)));
  int64_t qs[3] = {nq, hq, D}, ks[3] = {nkv, hkv, D}, vs[3] = {nkv, hkv, DV}, vst[3] = {(int64_t)hkv * DW, DW, 1},
          os[3] = {nq, hq, DV}, ls[2] = {nq, hq};
  DLTensor tq = g_tensor(dq, 0, dt, 3, qs, NULL), tk = g_tensor(dk, 0, dt, 3, ks, NULL),
           tv = g_tensor(dw, (DW - DV) * es, dt, 3, vs, vst), to = g_tensor(dout, 0, dt, 3, os, NULL),
           tl = g_tensor(dl, 0, 2, 2, ls, NULL);
  fi_prefill_params p;
  fi_prefill_params_init(&p);
  p.causal = causal;
  fi_status st;
  fi_prefill_plan *plan = NULL;
  if (single) {
    st = fi_single_prefill(rt, &tq, &tk, &tv, &to, &tl, FI_KV_LAYOUT_NHD, &p, NULL);
  } else {
    fi_batch_prefill_info in;
    memset(&in, 0, sizeof in);
    in.batch = B, in.qo_indptr = qo, in.kv_indptr = kvi;
    in.num_qo_heads = hq, in.num_kv_heads = hkv, in.head_dim = D;
    in.q_dtype = in.kv_dtype = g_dl(dt);
    size_t wsb = 0;
    st = fi_batch_prefill_workspace_size(rt, tq.device, B, (int)nq, hq, hkv, D, &wsb);
    if (st == FI_OK) CU_CHECK(&cu, cuMemAlloc(&dws, wsb));
    int64_t wshape[1] = {(int64_t)wsb};
    DLTensor tw = g_tensor(dws, 0, 1, 1, wshape, NULL);
    tw.dtype = (DLDataType){kDLUInt, 8, 1};
    fi_attention_extras x;
    fi_attention_extras_init(&x);
    x.head_dim_vo = DV;
    if (st == FI_OK) st = fi_batch_prefill_ragged_plan_ex(rt, &in, &p, &x, &tw, NULL, &plan);
    if (st == FI_OK) st = fi_batch_prefill_ragged_run(rt, plan, &tq, &tk, &tv, FI_KV_LAYOUT_NHD, &to, &tl, NULL);
  }
  FT_CHECK(st == FI_OK, "dvo %s %s: %s", single ? "single" : "ragged", g_dtname(dt), fi_last_error());
  CU_CHECK(&cu, cuCtxSynchronize());
  CU_CHECK(&cu, cuMemcpyDtoH(ho, dout, (size_t)(nq * hq * DV) * es));
  CU_CHECK(&cu, cuMemcpyDtoH(hl, dl, sizeof(float) * (size_t)(nq * hq)));
  /* float64 reference */
  const double sm = 1.0 / sqrt((double)D);
  double num = 0, den = 0, lmax = 0;
  int64_t nan = 0;
  double *s = malloc(sizeof(double) * (size_t)(nkv + 1)), *acc = malloc(sizeof(double) * DV);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < lq[b]; t++)
      for (int h = 0; h < hq; h++) {
        const int kh = h / G;
        const int64_t row = (int64_t)(qo[b] + t) * hq + h;
        const int hi = causal ? t + lkv[b] - lq[b] + 1 : lkv[b];
        double m = -INFINITY;
        for (int j = 0; j < hi; j++) {
          double x = 0;
          for (int e = 0; e < D; e++) x += qd[row * D + e] * kd[((int64_t)(kvi[b] + j) * hkv + kh) * D + e];
          s[j] = x * sm;
          if (s[j] > m) m = s[j];
        }
        double dn = 0;
        for (int e = 0; e < DV; e++) acc[e] = 0;
        for (int j = 0; j < hi; j++) {
          const double w = exp(s[j] - m);
          dn += w;
          for (int e = 0; e < DV; e++) acc[e] += w * vd[((int64_t)(kvi[b] + j) * hkv + kh) * DV + e];
        }
        for (int e = 0; e < DV; e++) {
          const double ref = dn > 0 ? acc[e] / dn : 0.0, got = g_get(ho, dt, row * DV + e);
          if (got != got) nan++;
          else num += (got - ref) * (got - ref), den += ref * ref;
        }
        const double rl = dn > 0 ? m + log(dn) : -INFINITY;
        if (!(isinf(rl) && isinf(hl[row]))) lmax = fmax(lmax, fabs(rl - hl[row]));
      }
  const double err = den > 0 ? sqrt(num / den) : sqrt(num), tol = dt == 0 ? 3e-3 : 2e-2;
  printf("dvo %-6s %s %d/%d B=%d causal=%d: out err %.3g (tol %.1g), lse max err %.3g, NaN %lld\n",
         single ? "single" : "ragged", g_dtname(dt), hq, hkv, B, causal, err, tol, lmax, (long long)nan);
  FT_CHECK(err < tol && nan == 0 && lmax < 2e-2, "dvo %s %s: out err %.3g, lse err %.3g, %lld NaN",
           single ? "single" : "ragged", g_dtname(dt), err, lmax, (long long)nan);
  fi_batch_prefill_plan_destroy(plan);
  CUdeviceptr fr[6] = {dq, dk, dw, dout, dl, dws};
  for (int i = 0; i < 6; i++)
    if (fr[i]) CU_CHECK(&cu, cuMemFree(fr[i]));
  free(hq_), free(hk), free(hw), free(ho), free(hl), free(qd), free(kd), free(vd), free(s), free(acc);
}

FT_TEST(prefill_head_dim_vo) {
  FT_REQUIRE(setup() == 0);
  static const int l1q[1] = {77}, l1kv[1] = {300};
  static const int lq[4] = {0, 1, 40, 16}, lkv[4] = {20, 90, 40, 9000};
  for (int dt = 0; dt < 2; dt++) {
    dvo_case(dt, 16, 16, 1, l1q, l1kv, 1, 1);
    dvo_case(dt, 16, 4, 1, l1q, l1kv, 0, 1);
    dvo_case(dt, 16, 16, 4, lq, lkv, 1, 0);
  }
  static const int bq[2] = {200, 3}, bkv[2] = {200, 5000};
  dvo_case(1, 32, 32, 2, bq, bkv, 1, 0);
}
