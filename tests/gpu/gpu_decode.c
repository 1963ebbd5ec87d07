/* gpu_decode.c: fi_single_decode and fi_batch_decode_plan/run on the GPU against a float64
 * CPU reference: fresh random inputs, pages in random order, poisoned outputs, every dtype,
 * head_dim and layout, several page and group sizes, ragged batches, split-KV or not, every
 * block size (1, 2, 4 warps), RoPE, soft cap, sliding window, an interleaved K/V buffer and
 * CUDA-graph replays after re-plans. */
#include <dlfcn.h>
#include <math.h>
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

static g_graph_api gr;

static int setup(void) {
  if (rt) return 0;
  if (g_setup(&cu, &ctx, &rt, &seed) != 0) return -1;
  if (g_load_graph_api(&gr) != 0) return -1;
  return 0;
}

/* The tuning variables are read at fi_runtime_create: after setting one, a test runs on
 * a runtime made then (env_rt_begin), and goes back to the one before after its work on
 * the device is done (env_rt_end: the variant's modules are unloaded). They nest (run_case
 * makes its own variants inside a test's): a stack of the runtimes to go back to. */
static fi_runtime *saved_rt[4];
static int saved_n;
static int env_rt_begin(void) {
  if (setup() != 0 || saved_n == 4) return -1;
  fi_runtime *v = g_runtime();
  if (!v) return -1;
  saved_rt[saved_n++] = rt;
  rt = v;
  return 0;
}
static void env_rt_end(void) {
  if (saved_n == 0) return;
  fi_runtime_destroy(rt);
  rt = saved_rt[--saved_n];
}

/* ---- element types: 0 f16, 1 bf16, 10 e4m3, 12 e5m2 ---- */
enum { T_F16 = 0, T_BF16 = 1, T_E4M3 = 10, T_E5M2 = 12 };
static int tbytes(int t) { return t == T_E4M3 || t == T_E5M2 ? 1 : 2; }
static DLDataType tdl(int t) {
  DLDataType d;
  d.lanes = 1;
  if (t == T_E4M3 || t == T_E5M2) {
    d.code = (uint8_t)t;
    d.bits = 8;
  } else {
    d.code = t == T_BF16 ? kDLBfloat : kDLFloat;
    d.bits = 16;
  }
  return d;
}
static const char *tname(int t) {
  return t == T_F16 ? "f16" : t == T_BF16 ? "bf16" : t == T_E4M3 ? "e4m3" : "e5m2";
}
static double fp8_value(int t, uint8_t b) { return g_fp8_value(t, b); }
/* A random value of type t stored at element i of buf; returns what was stored. */
static double put_random(void *buf, int t, int64_t i, double scale) {
  if (t == T_E4M3 || t == T_E5M2) {
    const uint8_t b = g_fp8_random(t, &seed);
    ((uint8_t *)buf)[i] = b;
    return fp8_value(t, b);
  }
  return g_put(buf, t, i, scale * g_normal(&seed));
}
static double get_val(const void *buf, int t, int64_t i) {
  if (t == T_E4M3 || t == T_E5M2) return fp8_value(t, ((const uint8_t *)buf)[i]);
  return g_get(buf, t, i);
}

/* ---- one test case ---- */
typedef struct dcase {
  const char *name;
  int qt, kvt, D, hq, hkv, ps, hnd, B;
  int maxlen;          /* lengths drawn in [1, maxlen] (some exactly on a page boundary) */
  const int *lens;     /* or these B lengths */
  double soft_cap;
  int window;          /* -1 off */
  int rope;
  double k_scale, v_scale, sm_scale, qscale;
  int interleaved;     /* K and V views of one [pages, 2, ...] buffer */
  double tol;
  int sinks;           /* attention sinks (fi_attention_extras) on every run of the case */
  int lse2;            /* lse in base 2 (fi_attention_extras.lse_base2) on every run */
} dcase;

/* The case's sinks (c->sinks) and the extras every run of run_case passes (NULL
 * without sinks). */
static g_sinks g_sk;
static const fi_attention_extras *g_xp;
static fi_attention_extras g_xl; /* the extras of a case with lse2 */

typedef struct host_kv {
  int64_t pages;
  int64_t pstride, sstride, hstride; /* elements, of the K (or V) view */
  int64_t v_off;                     /* V view's first element, from the buffer's start */
  void *buf;                         /* K and V (interleaved) or K then V in one buffer */
  int64_t elems;
} host_kv;

static double dot_ref(const double *q, const double *k, int D) {
  double s = 0;
  for (int i = 0; i < D; i++) s += q[i] * k[i];
  return s;
}
static void rope_ref(double *x, int D, double pos, const dcase *c) {
  const double th = 1e4, sc = 1.0;
  (void)c;
  for (int i = 0; i < D / 2; i++) {
    const float f = (float)(1.0 / (sc * pow(th, 2.0 * i / D)));
    const double a = pos * (double)f, cs = cos(a), sn = sin(a);
    const double x1 = x[i], x2 = x[i + D / 2];
    x[i] = x1 * cs - x2 * sn;
    x[i + D / 2] = x2 * cs + x1 * sn;
  }
}

/* Reference for request of length L: qv [hq][D], K/V gathered [L][hkv][D]; writes out
 * [hq][D] and lse [hq] (natural log). */
static void reference(const dcase *c, int L, const double *qv, const double *kk, const double *vv,
                      double *out, double *lse) {
  const int D = c->D, G = c->hq / c->hkv;
  const double sm = c->sm_scale > 0 ? c->sm_scale : 1.0 / sqrt((double)D);
  const int start = c->window >= 0 && L - 1 - c->window > 0 ? L - 1 - c->window : 0;
  double *s = malloc(sizeof(double) * (size_t)(L > 0 ? L : 1));
  double *qr = malloc(sizeof(double) * (size_t)D), *kr = malloc(sizeof(double) * (size_t)D);
  for (int h = 0; h < c->hq; h++) {
    const int kh = h / G;
    memcpy(qr, qv + (int64_t)h * D, sizeof(double) * (size_t)D);
    if (c->rope) rope_ref(qr, D, L - 1, c);
    double m = -INFINITY;
    for (int t = start; t < L; t++) {
      memcpy(kr, kk + ((int64_t)t * c->hkv + kh) * D, sizeof(double) * (size_t)D);
      if (c->rope) rope_ref(kr, D, t, c);
      double x = dot_ref(qr, kr, D) * c->k_scale * sm;
      if (c->soft_cap > 0) x = c->soft_cap * tanh(x / c->soft_cap);
      s[t] = x;
      if (x > m) m = x;
    }
    /* A sink joins the denominator (and the max) with no value. */
    const double sk = c->sinks ? (double)g_sk.host[h] : -INFINITY;
    if (sk > m) m = sk;
    double den = sk > -INFINITY ? exp(sk - m) : 0.0;
    for (int t = start; t < L; t++) den += exp(s[t] - m);
    for (int d = 0; d < D; d++) {
      double acc = 0;
      for (int t = start; t < L; t++) acc += exp(s[t] - m) * vv[((int64_t)t * c->hkv + kh) * D + d];
      out[(int64_t)h * D + d] = den > 0 ? acc / den * c->v_scale : 0.0;
    }
    lse[h] = den > 0 ? (m + log(den)) / (c->lse2 ? 0.6931471805599453 : 1.0) : -INFINITY;
  }
  free(s);
  free(qr);
  free(kr);
}

typedef struct errs {
  double on, od, ln, ld;
  int64_t nan_out, bad_lse_inf;
} errs;
static void acc_out(errs *e, double got, double ref) {
  if (got != got) {
    e->nan_out++;
    return;
  }
  e->on += (got - ref) * (got - ref);
  e->od += ref * ref;
}
static void acc_lse(errs *e, double got, double ref) {
  if (isinf(ref) || isinf(got)) {
    e->bad_lse_inf += !(isinf(ref) && isinf(got) && ref < 0 && got < 0);
    return;
  }
  if (got != got) {
    e->nan_out++;
    return;
  }
  e->ln += (got - ref) * (got - ref);
  e->ld += ref * ref;
}
static double relerr(double n, double d) { return d > 0 ? sqrt(n / d) : sqrt(n); }

/* Lengths of the batch, some on page boundaries, 1, and (rarely) empty. */
static void draw_lengths(const dcase *c, int *len) {
  for (int b = 0; b < c->B; b++) {
    if (c->lens) {
      len[b] = c->lens[b];
      continue;
    }
    const uint64_t r = g_rand(&seed) % 10;
    if (r == 0)
      len[b] = 1;
    else if (r <= 2)
      len[b] = c->ps * (1 + (int)(g_rand(&seed) % (uint64_t)(c->maxlen / c->ps > 0 ? c->maxlen / c->ps : 1)));
    else
      len[b] = 1 + (int)(g_rand(&seed) % (uint64_t)c->maxlen);
  }
}

typedef struct batch_data {
  int *len;
  int32_t *indptr, *last, *indices;
  int64_t npages_used, total_pages;
  host_kv kv;
  void *q;        /* [B][hq][D] */
  double *qd;
  double **kd, **vd; /* per request gathered [L][hkv][D] with scales */
} batch_data;

/* Builds random paged data for c (pages in random order, spare pages between). */
static void make_batch(const dcase *c, batch_data *bd) {
  const int B = c->B, D = c->D, H = c->hkv, ps = c->ps;
  bd->len = calloc((size_t)B + 1, sizeof(int));
  draw_lengths(c, bd->len);
  bd->indptr = calloc((size_t)B + 1, sizeof(int32_t));
  bd->last = calloc((size_t)B + 1, sizeof(int32_t));
  for (int b = 0; b < B; b++) {
    const int np = (bd->len[b] + ps - 1) / ps;
    bd->indptr[b + 1] = bd->indptr[b] + np;
    bd->last[b] = np ? bd->len[b] - (np - 1) * ps : 0;
  }
  const int64_t used = bd->indptr[B];
  bd->npages_used = used;
  bd->total_pages = used + used / 4 + 3;
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)bd->total_pages);
  for (int64_t i = 0; i < bd->total_pages; i++) perm[i] = i;
  for (int64_t i = bd->total_pages - 1; i > 0; i--) {
    const int64_t j = (int64_t)(g_rand(&seed) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  bd->indices = malloc(sizeof(int32_t) * (size_t)(used + 1));
  for (int64_t i = 0; i < used; i++) bd->indices[i] = (int32_t)perm[i];
  free(perm);
  /* The cache buffer: [pages][2][...] interleaved, or K pages then V pages. */
  host_kv *kv = &bd->kv;
  const int64_t page_elems = (int64_t)ps * H * D;
  kv->pages = bd->total_pages;
  if (c->interleaved) {
    kv->pstride = 2 * page_elems;
    kv->v_off = page_elems;
  } else {
    kv->pstride = page_elems;
    kv->v_off = bd->total_pages * page_elems;
  }
  kv->sstride = c->hnd ? D : (int64_t)H * D;
  kv->hstride = c->hnd ? (int64_t)ps * D : D;
  kv->elems = 2 * bd->total_pages * page_elems;
  kv->buf = malloc((size_t)kv->elems * (size_t)tbytes(c->kvt));
  /* Every element random, used or not (finite: a masked token must not leak NaN). */
  for (int64_t i = 0; i < kv->elems; i++) put_random(kv->buf, c->kvt, i, 1.0);
  bd->q = malloc((size_t)B * c->hq * D * 2 + 16);
  bd->qd = malloc(sizeof(double) * (size_t)B * c->hq * D + 8);
  for (int64_t i = 0; i < (int64_t)B * c->hq * D; i++) bd->qd[i] = put_random(bd->q, c->qt, i, c->qscale);
  bd->kd = calloc((size_t)B, sizeof(double *));
  bd->vd = calloc((size_t)B, sizeof(double *));
  for (int b = 0; b < B; b++) {
    const int L = bd->len[b];
    bd->kd[b] = malloc(sizeof(double) * (size_t)(L > 0 ? L : 1) * H * D);
    bd->vd[b] = malloc(sizeof(double) * (size_t)(L > 0 ? L : 1) * H * D);
    for (int t = 0; t < L; t++) {
      const int64_t page = bd->indices[bd->indptr[b] + t / ps], slot = t % ps;
      for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++) {
          const int64_t e = page * kv->pstride + slot * kv->sstride + h * kv->hstride + d;
          bd->kd[b][((int64_t)t * H + h) * D + d] = get_val(kv->buf, c->kvt, e);
          bd->vd[b][((int64_t)t * H + h) * D + d] = get_val(kv->buf, c->kvt, e + kv->v_off);
        }
    }
  }
}
static void free_batch(const dcase *c, batch_data *bd) {
  for (int b = 0; b < c->B; b++) {
    free(bd->kd[b]);
    free(bd->vd[b]);
  }
  free(bd->kd);
  free(bd->vd);
  free(bd->len);
  free(bd->indptr);
  free(bd->last);
  free(bd->indices);
  free(bd->kv.buf);
  free(bd->q);
  free(bd->qd);
}

static fi_attention_params params_of(const dcase *c) {
  fi_attention_params p;
  fi_attention_params_init(&p);
  p.sm_scale = c->sm_scale;
  p.logits_soft_cap = c->soft_cap;
  p.window_left = c->window;
  p.pos_encoding = c->rope ? FI_POS_ROPE_LLAMA : FI_POS_NONE;
  p.k_scale = c->k_scale;
  p.v_scale = c->v_scale;
  return p;
}

/* Checks rows [0, B) of out/lse (device images) against the reference. */
static void check_rows(const dcase *c, const char *what, const batch_data *bd, int B, const void *out,
                       const float *lse) {
  errs e;
  memset(&e, 0, sizeof e);
  const int D = c->D;
  double *ro = malloc(sizeof(double) * (size_t)c->hq * D), *rl = malloc(sizeof(double) * (size_t)c->hq);
  int maxL = 0;
  for (int b = 0; b < B; b++) {
    reference(c, bd->len[b], bd->qd + (int64_t)b * c->hq * D, bd->kd[b], bd->vd[b], ro, rl);
    if (bd->len[b] > maxL) maxL = bd->len[b];
    for (int64_t i = 0; i < (int64_t)c->hq * D; i++)
      acc_out(&e, g_get(out, c->qt, (int64_t)b * c->hq * D + i), ro[i]);
    if (lse)
      for (int h = 0; h < c->hq; h++) acc_lse(&e, lse[(int64_t)b * c->hq + h], rl[h]);
  }
  free(ro);
  free(rl);
  const double oe = relerr(e.on, e.od), le = relerr(e.ln, e.ld);
  fprintf(stderr, "  %-34s %s: q %s kv %s D=%d %d/%d ps=%d %s B=%d maxL=%d: out err %.3g (tol %.1g), lse err %.3g\n",
          c->name, what, tname(c->qt), tname(c->kvt), D, c->hq, c->hkv, c->ps, c->hnd ? "HND" : "NHD",
          B, maxL, oe, c->tol, le);
  FT_CHECK(e.nan_out == 0, "%s %s: %lld outputs NaN or never written", c->name, what, (long long)e.nan_out);
  FT_CHECK(oe < c->tol, "%s %s: out relative error %.3g over %.1g", c->name, what, oe, c->tol);
  FT_CHECK(!lse || le < 1e-3, "%s %s: lse relative error %.3g over 1e-3", c->name, what, le);
  FT_CHECK(e.bad_lse_inf == 0, "%s %s: %lld lse wrongly -inf or not", c->name, what, (long long)e.bad_lse_inf);
}

typedef struct dev_batch {
  CUdeviceptr q, kv, indptr, indices, last, out, lse, ws;
  size_t ws_bytes, out_bytes;
  int64_t qshape[3], kshape[4], kstr[4], ishape[1], xshape[1], lshape[1], lsshape[2], wshape[1];
  DLTensor tq, tk, tv, tip, tix, tlp, to, tl, tw;
} dev_batch;

static void upload_batch(const dcase *c, const batch_data *bd, dev_batch *d, int rows) {
  const int D = c->D, H = c->hkv;
  const size_t qbytes = (size_t)rows * c->hq * D * 2;
  memset(d, 0, sizeof *d);
  CU_CHECK(&cu, cuMemAlloc(&d->q, qbytes));
  CU_CHECK(&cu, cuMemcpyHtoD(d->q, bd->q, (size_t)c->B * c->hq * D * 2));
  const size_t kvbytes = (size_t)bd->kv.elems * (size_t)tbytes(c->kvt);
  CU_CHECK(&cu, cuMemAlloc(&d->kv, kvbytes));
  CU_CHECK(&cu, cuMemcpyHtoD(d->kv, bd->kv.buf, kvbytes));
  CU_CHECK(&cu, cuMemAlloc(&d->indptr, sizeof(int32_t) * (size_t)(rows + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(d->indptr, bd->indptr, sizeof(int32_t) * (size_t)(c->B + 1)));
  CU_CHECK(&cu, cuMemAlloc(&d->last, sizeof(int32_t) * (size_t)(rows + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(d->last, bd->last, sizeof(int32_t) * (size_t)(c->B + 1)));
  CU_CHECK(&cu, cuMemAlloc(&d->indices, sizeof(int32_t) * (size_t)(bd->npages_used + 1) * 4));
  CU_CHECK(&cu, cuMemcpyHtoD(d->indices, bd->indices, sizeof(int32_t) * (size_t)(bd->npages_used + 1)));
  d->out_bytes = qbytes;
  CU_CHECK(&cu, cuMemAlloc(&d->out, qbytes));
  CU_CHECK(&cu, cuMemAlloc(&d->lse, (size_t)rows * c->hq * 4));
  CU_CHECK(&cu, cuMemsetD8(d->out, 0xff, qbytes));
  CU_CHECK(&cu, cuMemsetD8(d->lse, 0xff, (size_t)rows * c->hq * 4));
  d->qshape[0] = rows, d->qshape[1] = c->hq, d->qshape[2] = D;
  d->tq = g_tensor(d->q, 0, c->qt, 3, d->qshape, NULL);
  d->tq.dtype = tdl(c->qt);
  d->to = d->tq;
  d->to.data = (void *)(uintptr_t)d->out;
  d->kshape[0] = bd->kv.pages;
  d->kshape[1] = c->hnd ? H : c->ps;
  d->kshape[2] = c->hnd ? c->ps : H;
  d->kshape[3] = D;
  d->kstr[0] = bd->kv.pstride;
  d->kstr[1] = c->hnd ? bd->kv.hstride : bd->kv.sstride;
  d->kstr[2] = c->hnd ? bd->kv.sstride : bd->kv.hstride;
  d->kstr[3] = 1;
  d->tk = g_tensor(d->kv, 0, 0, 4, d->kshape, d->kstr);
  d->tk.dtype = tdl(c->kvt);
  d->tv = d->tk;
  d->tv.byte_offset = (uint64_t)(bd->kv.v_off * tbytes(c->kvt));
  d->ishape[0] = rows + 1;
  d->tip = g_tensor(d->indptr, 0, 0, 1, d->ishape, NULL);
  d->tip.dtype = (DLDataType){kDLInt, 32, 1};
  d->lshape[0] = rows;
  d->tlp = g_tensor(d->last, 0, 0, 1, d->lshape, NULL);
  d->tlp.dtype = (DLDataType){kDLInt, 32, 1};
  d->xshape[0] = bd->npages_used + 1;
  d->tix = g_tensor(d->indices, 0, 0, 1, d->xshape, NULL);
  d->tix.dtype = (DLDataType){kDLInt, 32, 1};
  d->lsshape[0] = rows, d->lsshape[1] = c->hq;
  d->tl = g_tensor(d->lse, 0, 2, 2, d->lsshape, NULL);
  size_t wsb;
  FT_CHECK(fi_batch_decode_workspace_size(rt, d->tq.device, rows, c->hq, c->hkv, D, &wsb) == FI_OK, "%s",
           fi_last_error());
  d->ws_bytes = wsb;
  CU_CHECK(&cu, cuMemAlloc(&d->ws, wsb));
  d->wshape[0] = (int64_t)wsb;
  d->tw = g_tensor(d->ws, 0, 0, 1, d->wshape, NULL);
  d->tw.dtype = (DLDataType){kDLUInt, 8, 1};
}
static void free_dev(dev_batch *d) {
  CUdeviceptr ps[8] = {d->q, d->kv, d->indptr, d->indices, d->last, d->out, d->lse, d->ws};
  for (int i = 0; i < 8; i++)
    if (ps[i]) CU_CHECK(&cu, cuMemFree(ps[i]));
}

static fi_batch_decode_info info_of(const dcase *c, const batch_data *bd, int max_batch) {
  fi_batch_decode_info in;
  memset(&in, 0, sizeof in);
  in.batch = c->B;
  in.indptr = bd->indptr;
  in.last_page_len = bd->last;
  in.num_qo_heads = c->hq;
  in.num_kv_heads = c->hkv;
  in.head_dim = c->D;
  in.page_size = c->ps;
  in.q_dtype = tdl(c->qt);
  in.kv_dtype = tdl(c->kvt);
  in.max_batch = max_batch;
  return in;
}

/* Batch decode of c, then single decode of a few requests (contiguous copies). */
static void run_case(const dcase *c) {
  FT_REQUIRE(setup() == 0);
  g_xp = NULL;
  if (c->sinks) {
    FT_REQUIRE(g_sinks_make(&cu, &g_sk, c->hq, &seed) == 0);
    g_xp = &g_sk.x;
  }
  if (c->lse2) {
    if (g_xp) g_xl = *g_xp;
    else fi_attention_extras_init(&g_xl);
    g_xl.lse_base2 = 1;
    g_xp = &g_xl;
  }
  batch_data bd;
  make_batch(c, &bd);
  dev_batch d;
  upload_batch(c, &bd, &d, c->B);
  const fi_attention_params p = params_of(c);
  fi_batch_decode_info in = info_of(c, &bd, 0);
  fi_decode_plan *plan = NULL;
  fi_status st = fi_batch_decode_plan(rt, &in, &p, &d.tw, NULL, &plan);
  FT_CHECK(st == FI_OK, "%s: plan: %s", c->name, fi_last_error());
  if (st == FI_OK) {
    st = fi_batch_decode_run_ex(rt, plan, &d.tq, &d.tk, &d.tv, &d.tip, &d.tix, &d.tlp,
                             c->hnd ? FI_KV_LAYOUT_HND : FI_KV_LAYOUT_NHD, &d.to, &d.tl, g_xp, NULL);
    FT_CHECK(st == FI_OK, "%s: run: %s", c->name, fi_last_error());
    CU_CHECK(&cu, cuCtxSynchronize());
    void *out = malloc(d.out_bytes);
    float *lse = malloc((size_t)c->B * c->hq * 4 + 4);
    CU_CHECK(&cu, cuMemcpyDtoH(out, d.out, d.out_bytes));
    CU_CHECK(&cu, cuMemcpyDtoH(lse, d.lse, (size_t)c->B * c->hq * 4));
    check_rows(c, "batch", &bd, c->B, out, lse);
    /* A second run of the same plan (the merge counters reset themselves). */
    CU_CHECK(&cu, cuMemsetD8(d.out, 0xff, d.out_bytes));
    st = fi_batch_decode_run_ex(rt, plan, &d.tq, &d.tk, &d.tv, &d.tip, &d.tix, &d.tlp,
                             c->hnd ? FI_KV_LAYOUT_HND : FI_KV_LAYOUT_NHD, &d.to, NULL, g_xp, NULL);
    FT_CHECK(st == FI_OK, "%s: run 2: %s", c->name, fi_last_error());
    CU_CHECK(&cu, cuCtxSynchronize());
    CU_CHECK(&cu, cuMemcpyDtoH(out, d.out, d.out_bytes));
    check_rows(c, "batch rerun", &bd, c->B, out, NULL);

    /* Single decode of the first and the longest request, from contiguous copies:
     * equal to the batch's rows (and to the reference). */
    int longest = 0;
    for (int b = 0; b < c->B; b++)
      if (bd.len[b] > bd.len[longest]) longest = b;
    for (int pass = 0; pass < 2; pass++) {
      const int b = pass ? longest : 0, L = bd.len[b];
      if (L == 0 || (pass && longest == 0)) continue;
      const int D = c->D, H = c->hkv, es = tbytes(c->kvt);
      const int64_t n = (int64_t)L * H * D;
      unsigned char *k1 = malloc((size_t)n * (size_t)es), *v1 = malloc((size_t)n * (size_t)es);
      for (int t = 0; t < L; t++) {
        const int64_t page = bd.indices[bd.indptr[b] + t / c->ps], slot = t % c->ps;
        for (int h = 0; h < H; h++) {
          const int64_t src = page * bd.kv.pstride + slot * bd.kv.sstride + h * bd.kv.hstride;
          const int64_t dst = c->hnd ? ((int64_t)h * L + t) * D : ((int64_t)t * H + h) * D;
          memcpy(k1 + dst * es, (unsigned char *)bd.kv.buf + src * es, (size_t)D * (size_t)es);
          memcpy(v1 + dst * es, (unsigned char *)bd.kv.buf + (src + bd.kv.v_off) * es, (size_t)D * (size_t)es);
        }
      }
      CUdeviceptr dk, dv, dq, dout, dl;
      CU_CHECK(&cu, cuMemAlloc(&dk, (size_t)n * es));
      CU_CHECK(&cu, cuMemAlloc(&dv, (size_t)n * es));
      CU_CHECK(&cu, cuMemAlloc(&dq, (size_t)c->hq * D * 2));
      CU_CHECK(&cu, cuMemAlloc(&dout, (size_t)c->hq * D * 2));
      CU_CHECK(&cu, cuMemAlloc(&dl, (size_t)c->hq * 4));
      CU_CHECK(&cu, cuMemcpyHtoD(dk, k1, (size_t)n * es));
      CU_CHECK(&cu, cuMemcpyHtoD(dv, v1, (size_t)n * es));
      CU_CHECK(&cu, cuMemcpyHtoD(dq, (unsigned char *)bd.q + (size_t)b * c->hq * D * 2, (size_t)c->hq * D * 2));
      CU_CHECK(&cu, cuMemsetD8(dout, 0xff, (size_t)c->hq * D * 2));
      CU_CHECK(&cu, cuMemsetD8(dl, 0xff, (size_t)c->hq * 4));
      int64_t qs[2] = {c->hq, D}, ks[3] = {c->hnd ? H : L, c->hnd ? L : H, D}, ls[1] = {c->hq};
      DLTensor tq = g_tensor(dq, 0, c->qt, 2, qs, NULL), to = g_tensor(dout, 0, c->qt, 2, qs, NULL);
      tq.dtype = to.dtype = tdl(c->qt);
      DLTensor tk = g_tensor(dk, 0, 0, 3, ks, NULL), tv = g_tensor(dv, 0, 0, 3, ks, NULL);
      tk.dtype = tv.dtype = tdl(c->kvt);
      DLTensor tl = g_tensor(dl, 0, 2, 1, ls, NULL);
      st = fi_single_decode_ex(rt, &tq, &tk, &tv, &to, &tl, c->hnd ? FI_KV_LAYOUT_HND : FI_KV_LAYOUT_NHD, &p, g_xp, NULL);
      FT_CHECK(st == FI_OK, "%s: single decode: %s", c->name, fi_last_error());
      CU_CHECK(&cu, cuCtxSynchronize());
      void *so = malloc((size_t)c->hq * D * 2);
      float *sl = malloc((size_t)c->hq * 4);
      CU_CHECK(&cu, cuMemcpyDtoH(so, dout, (size_t)c->hq * D * 2));
      CU_CHECK(&cu, cuMemcpyDtoH(sl, dl, (size_t)c->hq * 4));
      /* Against the reference (request b alone), then against the batch's row b. */
      batch_data one = bd;
      one.len = bd.len + b;
      one.qd = bd.qd + (int64_t)b * c->hq * D;
      one.kd = bd.kd + b;
      one.vd = bd.vd + b;
      check_rows(c, pass ? "single (longest)" : "single (first)", &one, 1, so, sl);
      double num = 0, den = 0;
      for (int64_t i = 0; i < (int64_t)c->hq * D; i++) {
        const double x = g_get(so, c->qt, i), y = g_get(out, c->qt, (int64_t)b * c->hq * D + i);
        num += (x - y) * (x - y);
        den += y * y;
      }
      const double diff = relerr(num, den);
      fprintf(stderr, "  %-34s single vs batch row %d (L=%d): rel diff %.3g\n", c->name, b, L, diff);
      FT_CHECK(diff < c->tol, "%s: single decode differs from batch row %d by %.3g", c->name, b, diff);
      free(so);
      free(sl);
      free(k1);
      free(v1);
      CUdeviceptr fr[5] = {dk, dv, dq, dout, dl};
      for (int i = 0; i < 5; i++) CU_CHECK(&cu, cuMemFree(fr[i]));
    }
    free(out);
    free(lse);
    fi_batch_decode_plan_destroy(plan);
  }
  /* The same batch with every block size a plan can take (a block of 1, 2 or 4 warps,
   * split as the planner does for that block) and unsplit (the plan's own block). */
  static const struct {
    const char *var, *val;
  } v[] = {{"FI_DECODE_WARPS", "1"}, {"FI_DECODE_WARPS", "2"}, {"FI_DECODE_WARPS", "4"}, {"FI_DECODE_SPLIT", "0.001"}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    /* (decode_tuning_variants sets these too: theirs comes back after.) */
    const char *was = getenv(v[i].var);
    char saved[32] = "";
    if (was) snprintf(saved, sizeof saved, "%s", was);
    setenv(v[i].var, v[i].val, 1);
    FT_REQUIRE(env_rt_begin() == 0);
    char what[64];
    snprintf(what, sizeof what, "batch %s=%s", v[i].var + 10, v[i].val);
    plan = NULL;
    CU_CHECK(&cu, cuMemsetD8(d.out, 0xff, d.out_bytes));
    CU_CHECK(&cu, cuMemsetD8(d.lse, 0xff, (size_t)c->B * c->hq * 4));
    st = fi_batch_decode_plan(rt, &in, &p, &d.tw, NULL, &plan);
    FT_CHECK(st == FI_OK, "%s %s: plan: %s", c->name, what, fi_last_error());
    if (st == FI_OK) {
      st = fi_batch_decode_run_ex(rt, plan, &d.tq, &d.tk, &d.tv, &d.tip, &d.tix, &d.tlp,
                               c->hnd ? FI_KV_LAYOUT_HND : FI_KV_LAYOUT_NHD, &d.to, &d.tl, g_xp, NULL);
      FT_CHECK(st == FI_OK, "%s %s: run: %s", c->name, what, fi_last_error());
      CU_CHECK(&cu, cuCtxSynchronize());
      void *out = malloc(d.out_bytes);
      float *lse = malloc((size_t)c->B * c->hq * 4 + 4);
      CU_CHECK(&cu, cuMemcpyDtoH(out, d.out, d.out_bytes));
      CU_CHECK(&cu, cuMemcpyDtoH(lse, d.lse, (size_t)c->B * c->hq * 4));
      check_rows(c, what, &bd, c->B, out, lse);
      free(out);
      free(lse);
      fi_batch_decode_plan_destroy(plan);
    }
    CU_CHECK(&cu, cuCtxSynchronize());
    env_rt_end();
    if (was)
      setenv(v[i].var, saved, 1);
    else
      unsetenv(v[i].var);
  }
  free_dev(&d);
  free_batch(c, &bd);
  if (c->sinks) g_sinks_free(&cu, &g_sk);
  g_xp = NULL;
}

static dcase base(const char *name, int qt, int kvt, int D, int hq, int hkv, int ps, int hnd, int B, int maxlen) {
  dcase c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.qt = qt;
  c.kvt = kvt;
  c.D = D;
  c.hq = hq;
  c.hkv = hkv;
  c.ps = ps;
  c.hnd = hnd;
  c.B = B;
  c.maxlen = maxlen;
  c.window = -1;
  c.k_scale = c.v_scale = 1.0;
  c.qscale = 1.0;
  /* fp16 1e-3 and bf16 1e-2 (outputs and P rounded to them); an fp8 cache computes in
   * f16 with the output in q's dtype: the same bounds, doubled for margin. */
  const int fp8 = kvt == T_E4M3 || kvt == T_E5M2;
  c.tol = (qt == T_F16 ? 1e-3 : 1e-2) * (fp8 ? 2 : 1);
  return c;
}

FT_TEST(decode_bf16_gqa_split) {
  dcase c = base("bf16 32/8 split", T_BF16, T_BF16, 128, 32, 8, 16, 0, 5, 3000);
  run_case(&c);
}
FT_TEST(decode_bf16_gqa_no_split) {
  dcase c = base("bf16 32/8 B=80 no split", T_BF16, T_BF16, 128, 32, 8, 16, 0, 80, 600);
  run_case(&c);
}
/* 30 requests x 8 KV heads fill 240 of the 264 two-buffer blocks an H200 holds, with
 * near-equal lengths of at most 2048 tokens: the plan takes two buffers without a split
 * (rt_decode_pick_pipeline). */
FT_TEST(decode_bf16_two_buffer_window) {
  dcase c = base("bf16 32/8 B=30 two-buffer window", T_BF16, T_BF16, 128, 32, 8, 16, 0, 30, 0);
  int lens[30];
  for (int b = 0; b < 30; b++) lens[b] = 1200 + (b * 37) % 301; /* 1200-1500, some on a page end */
  c.lens = lens;
  run_case(&c);
}
/* Groups of up to 4 with too few requests for the capped kernel's wave (2 to 4 at 8 KV
 * heads, 4 to 8 at 4): two buffers in 2-warp blocks, each request split
 * (rt_decode_switched_warps). */
FT_TEST(decode_few_requests_two_warps) {
  dcase c = base("bf16 32/8 B=3", T_BF16, T_BF16, 128, 32, 8, 16, 0, 3, 3000);
  run_case(&c);
  c = base("f16 16/4 HND B=5 ps32", T_F16, T_F16, 128, 16, 4, 32, 1, 5, 5000);
  run_case(&c);
  c = base("bf16 16/8 B=4 ps16", T_BF16, T_BF16, 128, 16, 8, 16, 0, 4, 2000);
  run_case(&c);
}
/* Mid-size batches of groups up to 4 cut into short chunks: the capped plan's partition
 * on two buffers in 2-warp blocks (rt_decode_short_chunks). */
FT_TEST(decode_short_chunks_two_warps) {
  dcase c = base("bf16 32/8 B=12", T_BF16, T_BF16, 128, 32, 8, 16, 0, 12, 1000);
  run_case(&c);
  c = base("f16 16/8 HND B=16 ps8", T_F16, T_F16, 128, 16, 8, 8, 1, 16, 900);
  run_case(&c);
  c = base("bf16 8/8 B=20", T_BF16, T_BF16, 128, 8, 8, 16, 0, 20, 600);
  run_case(&c);
}
FT_TEST(decode_f16_mha_hnd) {
  dcase c = base("f16 MHA 32/32 HND", T_F16, T_F16, 128, 32, 32, 16, 1, 3, 1500);
  c.qscale = 2.0;
  run_case(&c);
}
FT_TEST(decode_bf16_d64_group8_page1) {
  dcase c = base("bf16 D64 8/1 ps1", T_BF16, T_BF16, 64, 8, 1, 1, 0, 4, 900);
  run_case(&c);
}
FT_TEST(decode_f16_d256_group16_page7_hnd) {
  dcase c = base("f16 D256 16/1 ps7 HND", T_F16, T_F16, 256, 16, 1, 7, 1, 3, 700);
  run_case(&c);
}
FT_TEST(decode_bf16_group12_page64) {
  dcase c = base("bf16 12/1 ps64", T_BF16, T_BF16, 128, 12, 1, 64, 0, 6, 2000);
  run_case(&c);
}
FT_TEST(decode_f16_d64_group3_page3) {
  dcase c = base("f16 D64 6/2 ps3", T_F16, T_F16, 64, 6, 2, 3, 0, 5, 500);
  run_case(&c);
}
/* Groups above 16 (MQA and wide GQA, issue 45 item 5): each KV head's group cut into grid
 * heads of at most 16 rows reading the same KV head: 64/1 (four of 16), 32/1 HND (two),
 * 48/2 over e4m3 (two of 12 a KV head), 34/2 at head_dim 64 (seventeen of one row a
 * KV head: the CUDA-core kernel); batch and single decode (run_case), split or not. */
FT_TEST(decode_groups_above_16) {
  dcase c = base("bf16 MQA 64/1", T_BF16, T_BF16, 128, 64, 1, 16, 0, 6, 2000);
  run_case(&c);
  c = base("f16 32/1 HND", T_F16, T_F16, 128, 32, 1, 16, 1, 3, 1500);
  run_case(&c);
  c = base("e4m3 bf16 48/2", T_BF16, T_E4M3, 128, 48, 2, 16, 0, 4, 1200);
  run_case(&c);
  c = base("bf16 D64 34/2 ps5", T_BF16, T_BF16, 64, 34, 2, 5, 0, 3, 700);
  run_case(&c);
}
/* One plan re-planned for 64, 8 and 64 requests (64/1, L <= 300): the default route
 * switches between the prefill kernels and the decode kernel (not in CUDA-graph mode);
 * each run against the reference. */
static void replan_switches_route(void) {
  static const int sizes[3] = {64, 8, 64};
  dcase c = base("route switch 64/1", T_BF16, T_BF16, 128, 64, 1, 16, 0, 64, 300);
  batch_data bd;
  make_batch(&c, &bd);
  dev_batch d;
  upload_batch(&c, &bd, &d, 64);
  const fi_attention_params p = params_of(&c);
  fi_decode_plan *plan = NULL;
  void *out = malloc(d.out_bytes);
  float *lse = malloc((size_t)64 * c.hq * 4 + 4);
  for (int r = 0; r < 3; r++) {
    c.B = sizes[r];
    fi_batch_decode_info in = info_of(&c, &bd, 0);
    fi_status st = fi_batch_decode_plan(rt, &in, &p, &d.tw, NULL, &plan);
    FT_CHECK(st == FI_OK, "re-plan for %d requests: %s", c.B, fi_last_error());
    if (st != FI_OK) break;
    d.qshape[0] = d.lsshape[0] = d.lshape[0] = c.B; /* q, out, lse and last_page_len: B rows */
    d.ishape[0] = c.B + 1;
    CU_CHECK(&cu, cuMemsetD8(d.out, 0xff, d.out_bytes));
    CU_CHECK(&cu, cuMemsetD8(d.lse, 0xff, (size_t)64 * c.hq * 4));
    st = fi_batch_decode_run(rt, plan, &d.tq, &d.tk, &d.tv, &d.tip, &d.tix, &d.tlp, FI_KV_LAYOUT_NHD, &d.to, &d.tl,
                             NULL);
    FT_CHECK(st == FI_OK, "run for %d requests: %s", c.B, fi_last_error());
    CU_CHECK(&cu, cuCtxSynchronize());
    CU_CHECK(&cu, cuMemcpyDtoH(out, d.out, d.out_bytes));
    CU_CHECK(&cu, cuMemcpyDtoH(lse, d.lse, (size_t)c.B * c.hq * 4));
    char what[48];
    snprintf(what, sizeof what, "re-plan %d requests", c.B);
    check_rows(&c, what, &bd, c.B, out, lse);
  }
  free(out);
  free(lse);
  fi_batch_decode_plan_destroy(plan);
  free_dev(&d);
  c.B = 64;
  free_batch(&c, &bd);
}

/* Tensor-core decode (rt_decode_use_tc: the batch prefill kernels, one query token a
 * request): FI_DECODE_TC=0 keeps the decode kernel's grid heads for the groups above 16
 * (the default too below 64 requests x KV heads, as above); FI_DECODE_TC=1 puts every
 * batch on the prefill kernels: groups above 16, and of 16 and fewer with lengths 0 and
 * 1 and sinks, soft cap and window over HND, RoPE and an interleaved buffer (run_case's
 * batch runs); then the default's switch between the routes on re-plans (64/1: 64
 * requests the prefill kernels, 8 the decode kernel, and back). */
FT_TEST(decode_tensor_core_route) {
  setenv("FI_DECODE_TC", "0", 1);
  FT_REQUIRE(env_rt_begin() == 0);
  dcase c = base("TC=0 bf16 MQA 64/1", T_BF16, T_BF16, 128, 64, 1, 16, 0, 6, 2000);
  run_case(&c);
  c = base("TC=0 f16 32/1 HND", T_F16, T_F16, 128, 32, 1, 16, 1, 3, 1500);
  run_case(&c);
  c = base("TC=0 bf16 D64 34/2 ps5", T_BF16, T_BF16, 64, 34, 2, 5, 0, 3, 700);
  run_case(&c);
  env_rt_end();
  setenv("FI_DECODE_TC", "1", 1);
  FT_REQUIRE(env_rt_begin() == 0);
  static const int lens[6] = {16, 1, 256, 0, 33, 48};
  c = base("TC=1 sinks bf16 64/8 D=64 lens", T_BF16, T_BF16, 64, 64, 8, 16, 0, 6, 0);
  c.lens = lens;
  c.sinks = 1;
  run_case(&c);
  c = base("TC=1 f16 soft cap, window HND", T_F16, T_F16, 128, 32, 8, 16, 1, 4, 1500);
  c.soft_cap = 30.0;
  c.window = 100;
  c.qscale = 3.0;
  run_case(&c);
  c = base("TC=1 bf16 RoPE 32/8", T_BF16, T_BF16, 128, 32, 8, 16, 0, 3, 2000);
  c.rope = 1;
  run_case(&c);
  c = base("TC=1 bf16 interleaved D256 16/2", T_BF16, T_BF16, 256, 16, 2, 7, 0, 5, 3000);
  c.interleaved = 1;
  run_case(&c);
  c = base("TC=1 bf16 MQA 64/1", T_BF16, T_BF16, 128, 64, 1, 16, 0, 6, 2000);
  run_case(&c);
  /* fp8 caches on the route (the prefill kernels' *_fp8kv: q staged as f16) */
  c = base("TC=1 e4m3 32/8 scales", T_BF16, T_E4M3, 128, 32, 8, 16, 0, 5, 2500);
  c.k_scale = 0.5, c.v_scale = 2.0;
  run_case(&c);
  c = base("TC=1 e5m2 f16 MQA 64/1", T_F16, T_E5M2, 128, 64, 1, 16, 0, 4, 1500);
  run_case(&c);
  env_rt_end();
  unsetenv("FI_DECODE_TC");
  replan_switches_route();
}
FT_TEST(decode_e4m3_bf16_scales) {
  dcase c = base("e4m3 bf16 32/8 scales", T_BF16, T_E4M3, 128, 32, 8, 16, 0, 4, 2500);
  c.k_scale = 0.5;
  c.v_scale = 2.0;
  run_case(&c);
}
/* KV head pairs (the default, forced with FI_DECODE_KV_PAIR=1; an fp8 cache at head_dim 128, group <= 4,
 * adjacent heads): groups 4, 2 and 1, a page of 5; HND plans them too but runs a block a
 * head (the heads' rows are not adjacent there); 64 requests of at most 8 pages (the
 * shortest chunk a split takes) are one item each. */
FT_TEST(decode_fp8_kv_head_pairs) {
  setenv("FI_DECODE_KV_PAIR", "1", 1);
  FT_REQUIRE(env_rt_begin() == 0);
  dcase c = base("e4m3 bf16 32/8 pairs", T_BF16, T_E4M3, 128, 32, 8, 16, 0, 4, 2500);
  c.k_scale = 0.5;
  run_case(&c);
  c = base("e5m2 f16 32/16 pairs", T_F16, T_E5M2, 128, 32, 16, 16, 0, 5, 3000);
  run_case(&c);
  c = base("e4m3 f16 8/8 ps5 pairs", T_F16, T_E4M3, 128, 8, 8, 5, 0, 6, 700);
  c.v_scale = 0.5;
  run_case(&c);
  c = base("e4m3 bf16 12/4 HND", T_BF16, T_E4M3, 128, 12, 4, 16, 1, 3, 1000);
  run_case(&c);
  c = base("e4m3 bf16 32/8 pairs B=64", T_BF16, T_E4M3, 128, 32, 8, 16, 0, 64, 128);
  run_case(&c);
  /* Pairs are the default; the block-a-head kernel they replace stays reachable. */
  env_rt_end();
  setenv("FI_DECODE_KV_PAIR", "0", 1);
  FT_REQUIRE(env_rt_begin() == 0);
  c = base("e4m3 bf16 32/8 a head a block", T_BF16, T_E4M3, 128, 32, 8, 16, 0, 4, 2500);
  c.k_scale = 0.5;
  run_case(&c);
  env_rt_end();
  unsetenv("FI_DECODE_KV_PAIR");
}
FT_TEST(decode_e5m2_f16_d256_hnd) {
  dcase c = base("e5m2 f16 D256 8/2 ps8 HND", T_F16, T_E5M2, 256, 8, 2, 8, 1, 3, 900);
  c.k_scale = 0.25;
  run_case(&c);
}
FT_TEST(decode_e4m3_f16_d64_mha_page32) {
  dcase c = base("e4m3 f16 D64 16/16 ps32", T_F16, T_E4M3, 64, 16, 16, 32, 0, 3, 800);
  run_case(&c);
}
FT_TEST(decode_e5m2_bf16_group16) {
  dcase c = base("e5m2 bf16 16/1 ps16", T_BF16, T_E5M2, 128, 16, 1, 16, 0, 3, 700);
  run_case(&c);
}
/* Groups of 9 to 16 (16 rows) take two register buffers in batch decode: head dims 64
 * and 128, both layouts, 16-bit and fp8 caches, many requests. */
FT_TEST(decode_group16_two_buffers) {
  dcase c = base("bf16 128/8 B=20", T_BF16, T_BF16, 128, 128, 8, 16, 0, 20, 1200);
  run_case(&c);
  c = base("f16 D64 64/4 B=24 ps8", T_F16, T_F16, 64, 64, 4, 8, 0, 24, 900);
  run_case(&c);
  c = base("bf16 48/4 HND B=9", T_BF16, T_BF16, 128, 48, 4, 16, 1, 9, 1500);
  run_case(&c);
  c = base("e4m3 f16 D64 40/4 B=7", T_F16, T_E4M3, 64, 40, 4, 16, 0, 7, 1000);
  run_case(&c);
}
FT_TEST(decode_soft_cap_window) {
  dcase c = base("bf16 soft cap 30, window 100", T_BF16, T_BF16, 128, 32, 8, 16, 0, 4, 1500);
  c.soft_cap = 30.0;
  c.window = 100;
  c.qscale = 3.0;
  run_case(&c);
}
FT_TEST(decode_f16_window_sm_scale) {
  dcase c = base("f16 window 37 sm_scale 0.2", T_F16, T_F16, 64, 8, 4, 5, 1, 6, 400);
  c.window = 37;
  c.sm_scale = 0.2;
  run_case(&c);
}
FT_TEST(decode_rope_bf16) {
  dcase c = base("bf16 RoPE 32/8", T_BF16, T_BF16, 128, 32, 8, 16, 0, 3, 2000);
  c.rope = 1;
  run_case(&c);
  c = base("f16 RoPE D64 4/4 HND", T_F16, T_F16, 64, 4, 4, 8, 1, 3, 1200);
  c.rope = 1;
  c.tol = 2e-3; /* k and q rotated in fp32, rounded to f16 for the mma */
  run_case(&c);
}
FT_TEST(decode_rope_e4m3) {
  dcase c = base("e4m3 f16 RoPE D128 8/1", T_F16, T_E4M3, 128, 8, 1, 16, 0, 3, 1500);
  c.rope = 1;
  c.tol = 3e-3;
  run_case(&c);
}
FT_TEST(decode_interleaved_kv_buffer) {
  dcase c = base("bf16 interleaved [pages,2,...]", T_BF16, T_BF16, 128, 32, 8, 16, 0, 6, 1200);
  c.interleaved = 1;
  run_case(&c);
  c = base("f16 interleaved HND", T_F16, T_F16, 128, 16, 4, 16, 1, 3, 900);
  c.interleaved = 1;
  run_case(&c);
}
FT_TEST(decode_page_boundaries_len1_empty) {
  static const int lens[6] = {16, 1, 256, 0, 33, 48};
  dcase c = base("page-boundary lengths, 1 and 0", T_BF16, T_BF16, 128, 32, 8, 16, 0, 6, 0);
  c.lens = lens;
  run_case(&c);
}
/* Attention sinks (gpt-oss: head_dim 64, 64/8): split and not, with requests of 0 and 1
 * tokens (out 0 and lse = the sink for the empty one); the CUDA-core kernel (group 1); an
 * fp8 cache; every run of run_case (rerun, single decode split and not, block sizes). */
FT_TEST(decode_sinks) {
  static const int lens[6] = {16, 1, 256, 0, 33, 48};
  dcase c = base("sinks bf16 64/8 D=64 lens", T_BF16, T_BF16, 64, 64, 8, 16, 0, 6, 0);
  c.lens = lens;
  c.sinks = 1;
  run_case(&c);
  c = base("sinks bf16 64/8 D=64 split", T_BF16, T_BF16, 64, 64, 8, 16, 0, 3, 4000);
  c.sinks = 1;
  run_case(&c);
  c = base("sinks f16 MHA (CUDA cores)", T_F16, T_F16, 128, 8, 8, 16, 0, 5, 2000);
  c.sinks = 1;
  run_case(&c);
  c = base("sinks e4m3 32/8 soft cap", T_BF16, T_E4M3, 128, 32, 8, 16, 0, 4, 3000);
  c.sinks = 1;
  c.soft_cap = 30.0;
  run_case(&c);
}
/* lse in base 2 (extras.lse_base2): the 16-bit kernel unsplit and split (its merge writes
 * it), the CUDA-core kernel, fp8 head pairs with sinks, the tensor-core route (prefill's
 * kernels), single decode (run_case's single-decode passes) */
FT_TEST(decode_lse_base2) {
  static const int lens[6] = {16, 1, 256, 0, 33, 48};
  dcase c = base("lse2 bf16 32/8 lens", T_BF16, T_BF16, 128, 32, 8, 16, 0, 6, 0);
  c.lens = lens;
  c.lse2 = 1;
  run_case(&c);
  c = base("lse2 bf16 64/8 D=64 split", T_BF16, T_BF16, 64, 64, 8, 16, 0, 3, 4000);
  c.lse2 = 1;
  run_case(&c);
  c = base("lse2 f16 MHA (CUDA cores)", T_F16, T_F16, 128, 8, 8, 16, 0, 5, 2000);
  c.lse2 = 1;
  run_case(&c);
  c = base("lse2 e4m3 32/8 sinks", T_BF16, T_E4M3, 128, 32, 8, 16, 0, 4, 3000);
  c.lse2 = c.sinks = 1;
  run_case(&c);
  setenv("FI_DECODE_TC", "1", 1);
  FT_REQUIRE(env_rt_begin() == 0);
  c = base("lse2 tensor-core route 64/1", T_BF16, T_BF16, 128, 64, 1, 16, 0, 8, 1500);
  c.lse2 = 1;
  run_case(&c);
  env_rt_end();
  unsetenv("FI_DECODE_TC");
}

FT_TEST(decode_b1_long_split_all_sms) {
  static const int lens[1] = {8192};
  dcase c = base("B=1 L=8192 32/8", T_BF16, T_BF16, 128, 32, 8, 16, 0, 1, 0);
  c.lens = lens;
  run_case(&c);
}
/* One KV head: the split target is a whole wave of blocks, so two long requests are cut
 * into about 250 chunks, whose partials (rounded to f16) one block a request merges in
 * ten batches: the merge's rounding at its widest, under f16's 1e-3. */
FT_TEST(decode_f16_many_chunks_one_kv_head) {
  static const int lens[2] = {32768, 20000};
  dcase c = base("f16 8/1 B=2 many chunks", T_F16, T_F16, 128, 8, 1, 16, 0, 2, 0);
  c.lens = lens;
  run_case(&c);
}

/* fi_single_decode splits a long request over the SMs with its partials in scratch memory
 * from a stream-ordered pool (runtime/rt_decode_single.c): against a float64 reference, split
 * and with FI_DECODE_SINGLE_SPLIT=0; the two differ in their last bits (the partials are
 * rounded to bf16), which shows the split ran; and a run captured in a CUDA graph (global
 * capture mode, as PyTorch's default) runs unsplit, with no allocation node: its two
 * replays give the unsplit call's bits. */
FT_TEST(decode_single_split_and_graph) {
  FT_REQUIRE(setup() == 0);
  FT_REQUIRE(gr.begin && gr.end && gr.inst && gr.launch, "graph API missing");
  enum { HQ = 32, HKV = 8, D = 128, L = 8192 };
  const int64_t nkv = (int64_t)L * HKV * D, nq = (int64_t)HQ * D;
  uint16_t *hk = malloc((size_t)nkv * 2), *hv = malloc((size_t)nkv * 2), *hq = malloc((size_t)nq * 2);
  FT_REQUIRE(hk && hv && hq);
  for (int64_t i = 0; i < nkv; i++) {
    put_random(hk, T_BF16, i, 1.0);
    put_random(hv, T_BF16, i, 1.0);
  }
  for (int64_t i = 0; i < nq; i++) put_random(hq, T_BF16, i, 1.0);
  /* float64 reference (NHD), lse in natural log */
  double *ref = calloc((size_t)nq, sizeof(double)), *rlse = calloc(HQ, sizeof(double)), *sc = malloc(L * sizeof(double));
  FT_REQUIRE(ref && rlse && sc);
  for (int h = 0; h < HQ; h++) {
    const int kh = h / (HQ / HKV);
    double mx = -INFINITY, sum = 0;
    for (int t = 0; t < L; t++) {
      double a = 0;
      for (int d = 0; d < D; d++)
        a += g_get(hq, T_BF16, (int64_t)h * D + d) * g_get(hk, T_BF16, ((int64_t)t * HKV + kh) * D + d);
      sc[t] = a / sqrt((double)D);
      if (sc[t] > mx) mx = sc[t];
    }
    for (int t = 0; t < L; t++) {
      const double w = exp(sc[t] - mx);
      sum += w;
      for (int d = 0; d < D; d++) ref[(int64_t)h * D + d] += w * g_get(hv, T_BF16, ((int64_t)t * HKV + kh) * D + d);
    }
    for (int d = 0; d < D; d++) ref[(int64_t)h * D + d] /= sum;
    rlse[h] = mx + log(sum);
  }
  CUdeviceptr dk, dv, dq, dout, dl;
  CU_CHECK(&cu, cuMemAlloc(&dk, (size_t)nkv * 2));
  CU_CHECK(&cu, cuMemAlloc(&dv, (size_t)nkv * 2));
  CU_CHECK(&cu, cuMemAlloc(&dq, (size_t)nq * 2));
  CU_CHECK(&cu, cuMemAlloc(&dout, (size_t)nq * 2));
  CU_CHECK(&cu, cuMemAlloc(&dl, HQ * 4));
  CU_CHECK(&cu, cuMemcpyHtoD(dk, hk, (size_t)nkv * 2));
  CU_CHECK(&cu, cuMemcpyHtoD(dv, hv, (size_t)nkv * 2));
  CU_CHECK(&cu, cuMemcpyHtoD(dq, hq, (size_t)nq * 2));
  int64_t qs[2] = {HQ, D}, ks[3] = {L, HKV, D}, ls[1] = {HQ};
  DLTensor tq = g_tensor(dq, 0, 0, 2, qs, NULL), to = g_tensor(dout, 0, 0, 2, qs, NULL);
  DLTensor tk = g_tensor(dk, 0, 0, 3, ks, NULL), tv = g_tensor(dv, 0, 0, 3, ks, NULL);
  tq.dtype = to.dtype = tk.dtype = tv.dtype = tdl(T_BF16);
  DLTensor tl = g_tensor(dl, 0, 2, 1, ls, NULL);
  CUstream s;
  CU_CHECK(&cu, cuStreamCreate(&s, 1));
  uint16_t *got[4];
  float lse[4][HQ];
  /* 0: split (default), 1: FI_DECODE_SINGLE_SPLIT=0, 2 and 3: graph replays */
  CUgraph g = NULL;
  CUgraphExec ge = NULL;
  for (int r = 0; r < 4; r++) {
    got[r] = malloc((size_t)nq * 2);
    FT_REQUIRE(got[r]);
    CU_CHECK(&cu, cuMemsetD8(dout, 0xff, (size_t)nq * 2));
    CU_CHECK(&cu, cuMemsetD8(dl, 0xff, HQ * 4));
    CU_CHECK(&cu, cuCtxSynchronize());
    fi_status st = FI_OK;
    if (r == 1) {
      setenv("FI_DECODE_SINGLE_SPLIT", "0", 1);
      FT_REQUIRE(env_rt_begin() == 0);
    }
    if (r < 2) {
      st = fi_single_decode(rt, &tq, &tk, &tv, &to, &tl, FI_KV_LAYOUT_NHD, NULL, s);
    } else {
      if (r == 2) {
        FT_REQUIRE(gr.begin(s, 0 /* global */) == 0);
        st = fi_single_decode(rt, &tq, &tk, &tv, &to, &tl, FI_KV_LAYOUT_NHD, NULL, s);
        FT_REQUIRE(gr.end(s, &g) == 0);
        FT_REQUIRE(st == FI_OK, "captured single decode: %s", fi_last_error());
        FT_REQUIRE(gr.inst(&ge, g, 0) == 0);
      }
      FT_CHECK(gr.launch(ge, s) == 0);
    }
    unsetenv("FI_DECODE_SINGLE_SPLIT");
    FT_CHECK(st == FI_OK, "single decode %d: %s", r, fi_last_error());
    CU_CHECK(&cu, cuStreamSynchronize(s));
    if (r == 1) env_rt_end();
    CU_CHECK(&cu, cuMemcpyDtoH(got[r], dout, (size_t)nq * 2));
    CU_CHECK(&cu, cuMemcpyDtoH(lse[r], dl, HQ * 4));
    double num = 0, den = 0, lerr = 0;
    for (int64_t i = 0; i < nq; i++) {
      const double x = g_get(got[r], T_BF16, i);
      num += (x - ref[i]) * (x - ref[i]);
      den += ref[i] * ref[i];
    }
    for (int h = 0; h < HQ; h++) lerr = fmax(lerr, fabs(lse[r][h] - rlse[h]));
    fprintf(stderr, "  single decode L=%d 32/8 bf16, %s: rel err %.3g, lse err %.3g\n", L,
            r == 0 ? "split" : r == 1 ? "unsplit" : "graph replay", relerr(num, den), lerr);
    FT_CHECK(relerr(num, den) < 1e-2 && lerr < 1e-3, "single decode %d: rel err %.3g, lse err %.3g", r,
             relerr(num, den), lerr);
  }
  FT_CHECK(memcmp(got[0], got[1], (size_t)nq * 2) != 0, "split and unsplit outputs are bitwise equal: no split ran");
  FT_CHECK(memcmp(got[1], got[2], (size_t)nq * 2) == 0 && memcmp(got[1], got[3], (size_t)nq * 2) == 0,
           "graph replays differ from the unsplit direct call");
  if (ge) gr.exec_destroy(ge);
  if (g) gr.destroy(g);
  CU_CHECK(&cu, cuStreamDestroy(s));
  CUdeviceptr fr[5] = {dk, dv, dq, dout, dl};
  for (int i = 0; i < 5; i++) CU_CHECK(&cu, cuMemFree(fr[i]));
  for (int r = 0; r < 4; r++) free(got[r]);
  free(hk), free(hv), free(hq), free(ref), free(rlse), free(sc);
}

/* The tuning overrides (read at fi_runtime_create: a runtime made after each) select other kernels and paths: each must
 * be as correct as the default. */
FT_TEST(decode_tuning_variants) {
  static const struct {
    const char *var, *val;
  } v[] = {{"FI_DECODE_WARPS", "2"},     {"FI_DECODE_WARPS", "8"},     {"FI_DECODE_PIPELINE", "0"},
           {"FI_DECODE_PREFETCH", "2"},  {"FI_DECODE_PREFETCH", "-2"}, {"FI_DECODE_SPLIT", "3"},
           {"FI_DECODE_HEAD_PREFETCH", "-100000"}, {"FI_DECODE_PRE_PREFETCH", "384"}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    setenv(v[i].var, v[i].val, 1);
    FT_REQUIRE(env_rt_begin() == 0);
    char name[3][64];
    snprintf(name[0], sizeof name[0], "%s=%s no split", v[i].var + 10, v[i].val);
    snprintf(name[1], sizeof name[1], "%s=%s split", v[i].var + 10, v[i].val);
    snprintf(name[2], sizeof name[2], "%s=%s e4m3 G16", v[i].var + 10, v[i].val);
    dcase c = base(name[0], T_BF16, T_BF16, 128, 32, 8, 16, 0, 40, 700);
    run_case(&c);
    c = base(name[1], T_F16, T_F16, 128, 32, 8, 16, 1, 4, 3000);
    run_case(&c);
    c = base(name[2], T_BF16, T_E4M3, 128, 16, 1, 16, 0, 3, 2000);
    run_case(&c);
    env_rt_end();
    unsetenv(v[i].var);
  }
}

/* FI_DECODE_PRE_PREFETCH: decode's blocks prefetch KV into L2 before their PDL wait, while
 * the previous kernel in the stream may still be writing it. Here that kernel is
 * fi_append_paged_kv_cache rewriting every token of a poisoned cache right before the
 * decode, on one stream without a sync between: the decode must see what the append
 * wrote. Short requests, so the prefetch covers whole items; three rounds, the poison
 * different each time. */
FT_TEST(decode_pre_prefetch_after_cache_writer) {
  FT_REQUIRE(setup() == 0);
  setenv("FI_DECODE_PRE_PREFETCH", "384", 1);
  FT_REQUIRE(env_rt_begin() == 0);
  dcase c = base("pre-wait prefetch after append", T_BF16, T_BF16, 128, 32, 8, 16, 0, 24, 380);
  batch_data bd;
  make_batch(&c, &bd);
  dev_batch d;
  upload_batch(&c, &bd, &d, c.B);
  const int D = c.D, H = c.hkv;
  int64_t ntok = 0;
  for (int b = 0; b < c.B; b++) ntok += bd.len[b];
  /* Every token's K and V rows, token-major [ntok][H][D], and where each goes. */
  uint16_t *ak = malloc(sizeof(uint16_t) * (size_t)(ntok * H * D + 1));
  uint16_t *av = malloc(sizeof(uint16_t) * (size_t)(ntok * H * D + 1));
  int32_t *bi = malloc(sizeof(int32_t) * (size_t)(ntok + 1)), *pos = malloc(sizeof(int32_t) * (size_t)(ntok + 1));
  int64_t i = 0;
  for (int b = 0; b < c.B; b++)
    for (int t = 0; t < bd.len[b]; t++, i++) {
      bi[i] = b;
      pos[i] = t;
      const int64_t page = bd.indices[bd.indptr[b] + t / c.ps], slot = t % c.ps;
      for (int h = 0; h < H; h++) {
        const int64_t e = page * bd.kv.pstride + slot * bd.kv.sstride + h * bd.kv.hstride;
        memcpy(ak + (i * H + h) * D, (uint16_t *)bd.kv.buf + e, sizeof(uint16_t) * (size_t)D);
        memcpy(av + (i * H + h) * D, (uint16_t *)bd.kv.buf + e + bd.kv.v_off, sizeof(uint16_t) * (size_t)D);
      }
    }
  CUdeviceptr dak, dav, dbi, dpos;
  const size_t rows = sizeof(uint16_t) * (size_t)(ntok * H * D);
  CU_CHECK(&cu, cuMemAlloc(&dak, rows));
  CU_CHECK(&cu, cuMemAlloc(&dav, rows));
  CU_CHECK(&cu, cuMemAlloc(&dbi, sizeof(int32_t) * (size_t)ntok));
  CU_CHECK(&cu, cuMemAlloc(&dpos, sizeof(int32_t) * (size_t)ntok));
  CU_CHECK(&cu, cuMemcpyHtoD(dak, ak, rows));
  CU_CHECK(&cu, cuMemcpyHtoD(dav, av, rows));
  CU_CHECK(&cu, cuMemcpyHtoD(dbi, bi, sizeof(int32_t) * (size_t)ntok));
  CU_CHECK(&cu, cuMemcpyHtoD(dpos, pos, sizeof(int32_t) * (size_t)ntok));
  int64_t ashape[3] = {ntok, H, D}, nshape[1] = {ntok};
  DLTensor tak = g_tensor(dak, 0, 1, 3, ashape, NULL), tav = g_tensor(dav, 0, 1, 3, ashape, NULL);
  DLTensor tbi = g_tensor(dbi, 0, 0, 1, nshape, NULL), tpos = g_tensor(dpos, 0, 0, 1, nshape, NULL);
  tbi.dtype = tpos.dtype = (DLDataType){kDLInt, 32, 1};
  CUstream s;
  CU_CHECK(&cu, cuStreamCreate(&s, 1));
  const fi_attention_params p = params_of(&c);
  fi_batch_decode_info in = info_of(&c, &bd, 0);
  fi_decode_plan *plan = NULL;
  FT_REQUIRE(fi_batch_decode_plan(rt, &in, &p, &d.tw, s, &plan) == FI_OK, "%s", fi_last_error());
  void *out = malloc(d.out_bytes);
  static const unsigned char poison[3] = {0x7f, 0xc3, 0x00};
  for (int r = 0; r < 3; r++) {
    const size_t kvbytes = (size_t)bd.kv.elems * 2;
    CU_CHECK(&cu, cuMemsetD8(d.kv, poison[r], kvbytes));
    CU_CHECK(&cu, cuMemsetD8(d.out, 0xff, d.out_bytes));
    CU_CHECK(&cu, cuCtxSynchronize());
    fi_status st = fi_append_paged_kv_cache(rt, &tak, &tav, &tbi, &tpos, &d.tk, &d.tv, &d.tix, &d.tip, &d.tlp,
                                            FI_KV_LAYOUT_NHD, 1.0, 1.0, s);
    FT_CHECK(st == FI_OK, "append: %s", fi_last_error());
    st = fi_batch_decode_run(rt, plan, &d.tq, &d.tk, &d.tv, &d.tip, &d.tix, &d.tlp, FI_KV_LAYOUT_NHD, &d.to,
                             NULL, s);
    FT_CHECK(st == FI_OK, "run: %s", fi_last_error());
    CU_CHECK(&cu, cuStreamSynchronize(s));
    CU_CHECK(&cu, cuMemcpyDtoH(out, d.out, d.out_bytes));
    char what[32];
    snprintf(what, sizeof what, "round %d, poison 0x%02x", r, poison[r]);
    check_rows(&c, what, &bd, c.B, out, NULL);
  }
  unsetenv("FI_DECODE_PRE_PREFETCH");
  fi_batch_decode_plan_destroy(plan);
  CU_CHECK(&cu, cuStreamDestroy(s));
  CU_CHECK(&cu, cuCtxSynchronize());
  env_rt_end();
  CUdeviceptr fr[4] = {dak, dav, dbi, dpos};
  for (int k = 0; k < 4; k++) CU_CHECK(&cu, cuMemFree(fr[k]));
  free(out);
  free(ak);
  free(av);
  free(bi);
  free(pos);
  free_dev(&d);
  free_batch(&c, &bd);
}

/* The capped kernel's split and merge outside CUDA-graph mode: the plans' own rules move
 * small and mid-size split batches to the two-buffer kernel (rt_decode_pick_pipeline,
 * rt_decode_short_chunks), so FI_DECODE_PIPELINE=2 keeps them capped here. */
FT_TEST(decode_capped_split_forced) {
  setenv("FI_DECODE_PIPELINE", "2", 1);
  FT_REQUIRE(env_rt_begin() == 0);
  dcase c = base("capped bf16 32/8 B=6 split", T_BF16, T_BF16, 128, 32, 8, 16, 0, 6, 3000);
  run_case(&c);
  c = base("capped f16 MHA 32/32 HND B=3 split", T_F16, T_F16, 128, 32, 32, 16, 1, 3, 1500);
  run_case(&c);
  c = base("capped bf16 16/8 B=2 split", T_BF16, T_BF16, 128, 16, 8, 16, 0, 2, 5000);
  run_case(&c);
  env_rt_end();
  unsetenv("FI_DECODE_PIPELINE");
}

/* CUDA-graph mode: plan for a maximum batch, capture one run, re-plan other batches
 * into the same workspace and replay the graph. */
/* CUDA-graph mode: a graph captured once replays after re-plans of 12, 3, 7 and 1
 * requests; hq / hkv above 16 runs the tensor-core route (the batch prefill plan in
 * CUDA-graph mode), else the decode kernel, whose re-plan under a changed FI_DECODE_SPLIT
 * is then refused (the tail). */
static void graph_replay(int hq, int hkv) {
  FT_REQUIRE(setup() == 0);
  FT_REQUIRE(gr.begin && gr.end && gr.inst && gr.launch, "graph API missing");
  enum { MAXB = 12, NB = 4 };
  const int sizes[NB] = {MAXB, 3, 7, 1}, maxlens[NB] = {900, 4000, 300, 6000};
  dcase c = base(hq / hkv > 16 ? "graph, tensor cores" : "graph", T_BF16, T_BF16, 128, hq, hkv, 16, 0, MAXB, 900);
  c.interleaved = 1; /* one page stride and V offset for every batch */
  batch_data all[NB];
  int64_t max_elems = 0, max_used = 0;
  for (int r = 0; r < NB; r++) {
    c.B = sizes[r];
    c.maxlen = maxlens[r];
    make_batch(&c, &all[r]);
    if (all[r].kv.elems > max_elems) max_elems = all[r].kv.elems;
    if (all[r].npages_used > max_used) max_used = all[r].npages_used;
  }
  c.B = MAXB;
  dev_batch d;
  /* A workspace large enough for FI_DECODE_SPLIT=2's layout too (see the end). */
  setenv("FI_DECODE_SPLIT", "2", 1);
  FT_REQUIRE(env_rt_begin() == 0);
  upload_batch(&c, &all[0], &d, MAXB);
  env_rt_end();
  unsetenv("FI_DECODE_SPLIT");
  CU_CHECK(&cu, cuMemFree(d.kv));
  CU_CHECK(&cu, cuMemAlloc(&d.kv, (size_t)max_elems * 2));
  CU_CHECK(&cu, cuMemcpyHtoD(d.kv, all[0].kv.buf, (size_t)all[0].kv.elems * 2));
  d.tk.data = d.tv.data = (void *)(uintptr_t)d.kv;
  CU_CHECK(&cu, cuMemFree(d.indices));
  CU_CHECK(&cu, cuMemAlloc(&d.indices, sizeof(int32_t) * (size_t)(max_used + 1)));
  CU_CHECK(&cu, cuMemcpyHtoD(d.indices, all[0].indices, sizeof(int32_t) * (size_t)(all[0].npages_used + 1)));
  d.tix.data = (void *)(uintptr_t)d.indices;
  d.xshape[0] = max_used + 1;
  CUstream s;
  CU_CHECK(&cu, cuStreamCreate(&s, 1));
  const fi_attention_params p = params_of(&c);
  fi_batch_decode_info in = info_of(&c, &all[0], MAXB);
  fi_decode_plan *plan = NULL;
  FT_REQUIRE(fi_batch_decode_plan(rt, &in, &p, &d.tw, s, &plan) == FI_OK, "%s", fi_last_error());
  CU_CHECK(&cu, cuStreamSynchronize(s));
  CUgraph g;
  CUgraphExec ge;
  FT_REQUIRE(gr.begin(s, 2 /* relaxed */) == 0);
  fi_status st = fi_batch_decode_run(rt, plan, &d.tq, &d.tk, &d.tv, &d.tip, &d.tix, &d.tlp,
                                     FI_KV_LAYOUT_NHD, &d.to, &d.tl, s);
  FT_REQUIRE(gr.end(s, &g) == 0);
  FT_REQUIRE(st == FI_OK, "%s", fi_last_error());
  FT_REQUIRE(gr.inst(&ge, g, 0) == 0);
  void *out = malloc(d.out_bytes);
  float *lse = malloc((size_t)MAXB * c.hq * 4);
  for (int r = 0; r < NB; r++) {
    c.B = sizes[r];
    c.maxlen = maxlens[r];
    batch_data *bd = &all[r];
    if (r > 0) {
      CU_CHECK(&cu, cuMemcpyHtoD(d.q, bd->q, (size_t)c.B * c.hq * c.D * 2));
      CU_CHECK(&cu, cuMemcpyHtoD(d.indptr, bd->indptr, sizeof(int32_t) * (size_t)(c.B + 1)));
      CU_CHECK(&cu, cuMemcpyHtoD(d.last, bd->last, sizeof(int32_t) * (size_t)(c.B + 1)));
      CU_CHECK(&cu, cuMemcpyHtoD(d.kv, bd->kv.buf, (size_t)bd->kv.elems * 2));
      CU_CHECK(&cu, cuMemcpyHtoD(d.indices, bd->indices, sizeof(int32_t) * (size_t)(bd->npages_used + 1)));
      in = info_of(&c, bd, MAXB);
      st = fi_batch_decode_plan(rt, &in, &p, &d.tw, s, &plan);
      FT_CHECK(st == FI_OK, "re-plan %d: %s", r, fi_last_error());
    }
    CU_CHECK(&cu, cuMemsetD8(d.out, 0xff, d.out_bytes));
    CU_CHECK(&cu, cuMemsetD8(d.lse, 0xff, (size_t)MAXB * c.hq * 4));
    /* The poison goes out on the legacy stream, which the non-blocking s does not wait
     * for: without this the replay could write before the memset lands (seen once as
     * outputs "never written" on a loaded GPU). */
    CU_CHECK(&cu, cuCtxSynchronize());
    FT_CHECK(gr.launch(ge, s) == 0);
    CU_CHECK(&cu, cuStreamSynchronize(s));
    CU_CHECK(&cu, cuMemcpyDtoH(out, d.out, d.out_bytes));
    CU_CHECK(&cu, cuMemcpyDtoH(lse, d.lse, (size_t)MAXB * c.hq * 4));
    char what[64];
    snprintf(what, sizeof what, "graph replay B=%d", c.B);
    check_rows(&c, what, bd, c.B, out, lse);
  }
  if (hq / hkv <= 16) {
    /* A changed FI_DECODE_SPLIT moves the plan's tables in the workspace: a re-plan under
     * the captured graph refuses it (the workspace is large enough, so the layout check
     * answers, not the size check), and the plan still replays after the refusal. */
    setenv("FI_DECODE_SPLIT", "2", 1);
    FT_REQUIRE(env_rt_begin() == 0);
    in = info_of(&c, &all[NB - 1], MAXB);
    st = fi_batch_decode_plan(rt, &in, &p, &d.tw, s, &plan);
    CU_CHECK(&cu, cuStreamSynchronize(s));
    env_rt_end();
    unsetenv("FI_DECODE_SPLIT");
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "re-plan must keep"),
             "a graph re-plan under a changed FI_DECODE_SPLIT: status %d, %s", (int)st, fi_last_error());
    st = fi_batch_decode_plan(rt, &in, &p, &d.tw, s, &plan);
    FT_CHECK(st == FI_OK, "re-plan after the refusal: %s", fi_last_error());
    CU_CHECK(&cu, cuMemsetD8(d.out, 0xff, d.out_bytes));
    CU_CHECK(&cu, cuMemsetD8(d.lse, 0xff, (size_t)MAXB * c.hq * 4));
    CU_CHECK(&cu, cuCtxSynchronize());
    FT_CHECK(gr.launch(ge, s) == 0);
    CU_CHECK(&cu, cuStreamSynchronize(s));
    CU_CHECK(&cu, cuMemcpyDtoH(out, d.out, d.out_bytes));
    CU_CHECK(&cu, cuMemcpyDtoH(lse, d.lse, (size_t)MAXB * c.hq * 4));
    check_rows(&c, "graph replay after a refused re-plan", &all[NB - 1], c.B, out, lse);
  }
  free(out);
  free(lse);
  gr.exec_destroy(ge);
  gr.destroy(g);
  fi_batch_decode_plan_destroy(plan);
  CU_CHECK(&cu, cuStreamDestroy(s));
  free_dev(&d);
  for (int r = 0; r < NB; r++) {
    c.B = sizes[r];
    free_batch(&c, &all[r]);
  }
}
FT_TEST(decode_cuda_graph_replay_after_replan) { graph_replay(32, 8); }
FT_TEST(decode_cuda_graph_replay_tensor_cores) { /* (12 requests: the route by FI_DECODE_TC=1) */
  setenv("FI_DECODE_TC", "1", 1);
  FT_REQUIRE(env_rt_begin() == 0);
  graph_replay(64, 1);
  env_rt_end();
  unsetenv("FI_DECODE_TC");
}
