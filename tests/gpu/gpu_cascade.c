/* gpu_cascade.c: fi_merge_state, fi_merge_state_in_place and fi_merge_states on the GPU against a
 * float64 CPU reference: fresh random LSEs of wide range with empty (-inf) parts, poisoned outputs, strided layouts. */
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

static int setup(void) {
  if (rt) return 0;
  if (g_setup(&cu, &ctx, &rt, &seed) != 0) return -1;
  return 0;
}

/* ---- strided tensors: a host image of the whole buffer and its device copy ---- */

enum { DT_F16 = 0, DT_BF16 = 1, DT_F32 = 2, DT_U8 = 3, DT_BOOL = 4 };
static int esz(int dt) { return dt >= DT_U8 ? 1 : g_esize(dt); }

typedef struct gt {
  int dt, ndim;
  int64_t shape[4], strides[4], off, elems;
  unsigned char *h; /* the buffer: inputs as uploaded, outputs as read back */
  unsigned char *orig; /* the buffer as uploaded */
  CUdeviceptr d;
  DLTensor t;
} gt;

/* shape with strides (NULL: compact), starting off elements into a buffer
 * whose every byte is 0xff: NaN in f16, bf16 and f32, so an element never
 * written shows, and the gaps between rows must keep it. */
static void gt_make(gt *x, int dt, int ndim, const int64_t *shape, const int64_t *strides,
                    int64_t off) {
  memset(x, 0, sizeof *x);
  x->dt = dt;
  x->ndim = ndim;
  x->off = off;
  int64_t s = 1, last = 0, empty = 0;
  for (int i = ndim - 1; i >= 0; i--) {
    x->shape[i] = shape[i];
    x->strides[i] = strides ? strides[i] : s;
    s *= shape[i];
    last += (shape[i] - 1) * x->strides[i];
    empty |= shape[i] == 0;
  }
  x->elems = off + (empty ? 0 : last + 1);
  const size_t bytes = (size_t)(x->elems > 0 ? x->elems : 1) * (size_t)esz(dt);
  x->h = malloc(bytes);
  x->orig = malloc(bytes);
  memset(x->h, 0xff, bytes);
  CU_CHECK(&cu, cuMemAlloc(&x->d, bytes + 16));
  DLDataType t;
  t.code = dt == DT_U8 ? kDLUInt : dt == DT_BOOL ? 6 /* kDLBool */ : dt == DT_BF16 ? kDLBfloat : kDLFloat;
  t.bits = (uint8_t)(8 * esz(dt));
  t.lanes = 1;
  x->t = g_tensor(x->d, off * esz(dt), DT_F32, ndim, x->shape, x->strides);
  x->t.dtype = t;
}
static int64_t gt_at(const gt *x, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t ix[4] = {i0, i1, i2, i3};
  int64_t e = x->off;
  for (int i = 0; i < x->ndim; i++) e += ix[i] * x->strides[i];
  return e;
}
static void gt_upload(gt *x) {
  const size_t bytes = (size_t)(x->elems > 0 ? x->elems : 1) * (size_t)esz(x->dt);
  memcpy(x->orig, x->h, bytes);
  CU_CHECK(&cu, cuMemcpyHtoD(x->d, x->h, bytes));
  /* A pageable upload may still be in flight when the copy returns, and a non-blocking
   * stream (merge_state_in_place_with_and_without_mask) does not wait for it. */
  CU_CHECK(&cu, cuCtxSynchronize());
}
static void gt_download(gt *x) {
  const size_t bytes = (size_t)(x->elems > 0 ? x->elems : 1) * (size_t)esz(x->dt);
  CU_CHECK(&cu, cuMemcpyDtoH(x->h, x->d, bytes));
}
static void gt_free(gt *x) {
  if (!x->h) return;
  CU_CHECK(&cu, cuMemFree(x->d));
  free(x->h);
  free(x->orig);
  x->h = NULL;
}
/* Value of element e (an index into the buffer) of the uploaded or current image. */
static double gt_orig(const gt *x, int64_t e) { return g_get(x->orig, x->dt, e); }
static double gt_now(const gt *x, int64_t e) { return g_get(x->h, x->dt, e); }
/* Same bits, except that -0.0 may come back as +0.0 (the kernel sums from +0.0, as its
 * header says): random fp16 inputs round to -0.0 about once in 1e8 elements, which
 * failed one run in ten of the 8M-element case. */
static int gt_same_bits(const gt *x, int64_t e, const gt *y, int64_t f) {
  const int es = esz(x->dt);
  if (memcmp(x->h + e * es, y->orig + f * es, (size_t)es) == 0) return 1;
  return gt_now(x, e) == 0.0 && gt_orig(y, f) == 0.0;
}
/* Bytes outside the tensor's elements (the gaps of a strided layout) that
 * no longer hold the 0xff they were filled with. */
static int64_t gt_gaps_touched(const gt *x) {
  const int es = esz(x->dt);
  unsigned char *mine = calloc((size_t)(x->elems > 0 ? x->elems : 1), 1);
  const int64_t n1 = x->ndim > 1 ? x->shape[1] : 1, n2 = x->ndim > 2 ? x->shape[2] : 1,
                n3 = x->ndim > 3 ? x->shape[3] : 1;
  for (int64_t a = 0; a < x->shape[0]; a++)
    for (int64_t b = 0; b < n1; b++)
      for (int64_t c = 0; c < n2; c++)
        for (int64_t d = 0; d < n3; d++) mine[gt_at(x, a, b, c, d)] = 1;
  int64_t bad = 0;
  for (int64_t e = 0; e < x->elems; e++)
    if (!mine[e])
      for (int k = 0; k < es; k++) bad += x->h[e * es + k] != 0xff;
  free(mine);
  return bad;
}

static const double NEG_INF = -__builtin_inf();

/* An LSE: uniform in [lo, hi], or -inf (an empty part) with probability p_empty. */
static float rand_lse(double lo, double hi, double p_empty) {
  if (g_uniform(&seed) < p_empty) return (float)NEG_INF;
  return (float)(lo + (hi - lo) * g_uniform(&seed));
}

/* Fills row (i, h[, n]) of v with values in [-2, 2], or with NaN when the
 * part is empty and nan_if_empty: an empty part's v must never reach the result. */
static void fill_row(gt *v, int64_t e0, int64_t hd, int empty_nan) {
  for (int64_t k = 0; k < hd; k++)
    g_put(v->h, v->dt, e0 + k, empty_nan ? __builtin_nan("") : 4.0 * g_uniform(&seed) - 2.0);
}

static double tol(int dt) { return dt == DT_F16 ? 1e-3 : dt == DT_BF16 ? 1e-2 : 1e-5; }

/* What one case measured. */
typedef struct result {
  double v_err, s_err; /* relative norm errors */
  int64_t unwritten;   /* NaN where the reference is a number */
  int64_t not_exact;   /* rows with one non-empty part that differ from it in a bit */
  int64_t bad_inf;     /* -inf LSE expected but not given, or given but not expected */
  int64_t masked_changed; /* in place: bytes of masked rows that changed */
  int64_t gaps;        /* bytes between rows of outputs that changed */
  int64_t rows_empty, rows_one; /* how many rows had every part / all but one part empty */
  int ok_call;
} result;

static void check_result(const char *what, int dt, const result *r) {
  fprintf(stderr, "  %s: v err %.3g, s err %.3g (%lld rows all empty, %lld with one part)\n", what,
          r->v_err, r->s_err, (long long)r->rows_empty, (long long)r->rows_one);
  FT_CHECK(r->ok_call, "%s: the call failed: %s", what, fi_last_error());
  if (!r->ok_call) return;
  FT_CHECK(r->v_err < tol(dt), "%s: v relative error %.3g over %.1g", what, r->v_err, tol(dt));
  FT_CHECK(r->s_err < 1e-5, "%s: s relative error %.3g over 1e-5", what, r->s_err);
  FT_CHECK(r->unwritten == 0, "%s: %lld outputs never written (or NaN)", what,
           (long long)r->unwritten);
  FT_CHECK(r->not_exact == 0, "%s: %lld rows merged with empty parts differ from the non-empty part",
           what, (long long)r->not_exact);
  FT_CHECK(r->bad_inf == 0, "%s: %lld LSEs wrongly -inf or not", what, (long long)r->bad_inf);
  FT_CHECK(r->masked_changed == 0, "%s: %lld bytes of masked rows changed", what,
           (long long)r->masked_changed);
  FT_CHECK(r->gaps == 0, "%s: %lld bytes between output rows overwritten", what, (long long)r->gaps);
}

/* Accumulates one output element against its reference. */
static void acc_v(double got, double ref, double *num, double *den, int64_t *unwritten) {
  if (got != got) {
    (*unwritten)++;
    return;
  }
  *num += (got - ref) * (got - ref);
  *den += ref * ref;
}
static void acc_s(double got, double ref, double *num, double *den, int64_t *bad_inf,
                  int64_t *unwritten) {
  if (ref == NEG_INF) {
    *bad_inf += got != NEG_INF;
    return;
  }
  if (got != got) {
    (*unwritten)++;
    return;
  }
  if (got == NEG_INF) {
    (*bad_inf)++;
    return;
  }
  *num += (got - ref) * (got - ref);
  *den += ref * ref;
}
static double rel(double num, double den) { return den > 0 ? sqrt(num / den) : sqrt(num); }

/* ---- two states ---- */

typedef struct ms_case {
  int dt;
  int64_t seq, heads, hd;
  /* Strides in elements (NULL: compact) of v_a, v_b, v_out [seq, heads, head_dim]
   * and s_a, s_b, s_out [seq, heads]. */
  const int64_t *va_st, *vb_st, *vo_st, *sa_st, *sb_st, *so_st;
  int64_t voff;   /* element offset of every v (odd: not 16-byte aligned) */
  int no_s_out;   /* pass s_out = NULL */
  int alias;      /* fi_merge_state with v_out and s_out being 1: v_a, s_a; 2: v_b, s_b */
  int in_place;   /* fi_merge_state_in_place(v = v_a, s = s_a, v_b, s_b, mask) */
  int mask;       /* in place: 0 none, DT_U8 or DT_BOOL */
  double lo, hi;  /* LSE range */
  double p_empty; /* probability that a part is empty */
  CUstream stream;
} ms_case;

static result run_ms(const ms_case *c) {
  result r;
  memset(&r, 0, sizeof r);
  const int64_t v3[3] = {c->seq, c->heads, c->hd}, s2[2] = {c->seq, c->heads}, m1[1] = {c->seq};
  gt va, vb, vo, sa, sb, so, mk;
  memset(&vo, 0, sizeof vo);
  memset(&so, 0, sizeof so);
  memset(&mk, 0, sizeof mk);
  gt_make(&va, c->dt, 3, v3, c->va_st, c->voff);
  gt_make(&vb, c->dt, 3, v3, c->vb_st, c->voff);
  gt_make(&sa, DT_F32, 2, s2, c->sa_st, 0);
  gt_make(&sb, DT_F32, 2, s2, c->sb_st, 0);
  for (int64_t i = 0; i < c->seq; i++)
    for (int64_t h = 0; h < c->heads; h++) {
      const float a = rand_lse(c->lo, c->hi, c->p_empty), b = rand_lse(c->lo, c->hi, c->p_empty);
      ((float *)sa.h)[gt_at(&sa, i, h, 0, 0)] = a;
      ((float *)sb.h)[gt_at(&sb, i, h, 0, 0)] = b;
      const int coin = (int)(g_rand(&seed) & 1);
      fill_row(&va, gt_at(&va, i, h, 0, 0), c->hd, a == NEG_INF && coin);
      fill_row(&vb, gt_at(&vb, i, h, 0, 0), c->hd, b == NEG_INF && coin);
    }
  if (c->mask) {
    gt_make(&mk, c->mask, 1, m1, NULL, 0);
    for (int64_t i = 0; i < c->seq; i++) mk.h[i] = g_uniform(&seed) < 0.6;
    gt_upload(&mk);
  }
  gt_upload(&va);
  gt_upload(&vb);
  gt_upload(&sa);
  gt_upload(&sb);
  gt *out_v = &va, *out_s = &sa;
  fi_status st;
  if (c->in_place) {
    st = fi_merge_state_in_place(rt, &va.t, &sa.t, &vb.t, &sb.t, c->mask ? &mk.t : NULL, c->stream);
  } else if (c->alias) {
    out_v = c->alias == 1 ? &va : &vb;
    out_s = c->alias == 1 ? &sa : &sb;
    st = fi_merge_state(rt, &va.t, &sa.t, &vb.t, &sb.t, &out_v->t, c->no_s_out ? NULL : &out_s->t,
                        c->stream);
  } else {
    gt_make(&vo, c->dt, 3, v3, c->vo_st, c->voff);
    gt_make(&so, DT_F32, 2, s2, c->so_st, 0);
    gt_upload(&vo); /* all 0xff: poisoned */
    gt_upload(&so);
    out_v = &vo;
    out_s = &so;
    st = fi_merge_state(rt, &va.t, &sa.t, &vb.t, &sb.t, &vo.t, c->no_s_out ? NULL : &so.t,
                        c->stream);
  }
  r.ok_call = st == FI_OK;
  if (r.ok_call) {
    CU_CHECK(&cu, cuStreamSynchronize(c->stream));
    gt_download(out_v);
    gt_download(out_s);
    double vn = 0, vd = 0, sn = 0, sd = 0;
    for (int64_t i = 0; i < c->seq; i++)
      for (int64_t h = 0; h < c->heads; h++) {
        const int64_t ea = gt_at(&va, i, h, 0, 0), eb = gt_at(&vb, i, h, 0, 0);
        const int64_t eo = gt_at(out_v, i, h, 0, 0), eso = gt_at(out_s, i, h, 0, 0);
        const double a = gt_orig(&sa, gt_at(&sa, i, h, 0, 0)), b = gt_orig(&sb, gt_at(&sb, i, h, 0, 0));
        if (c->mask && !mk.h[i]) { /* left alone, bit for bit */
          for (int64_t k = 0; k < c->hd; k++) r.masked_changed += !gt_same_bits(out_v, eo + k, &va, ea + k);
          r.masked_changed += !gt_same_bits(out_s, eso, &sa, gt_at(&sa, i, h, 0, 0));
          continue;
        }
        const double m = fmax(a, b);
        const int empty = m == NEG_INF, one = !empty && (a == NEG_INF || b == NEG_INF);
        r.rows_empty += empty;
        r.rows_one += one;
        double wa = 0, wb = 0, sref = NEG_INF;
        if (!empty) {
          wa = a == NEG_INF ? 0 : exp(a - m);
          wb = b == NEG_INF ? 0 : exp(b - m);
          sref = m + log(wa + wb);
          const double sum = wa + wb;
          wa /= sum;
          wb /= sum;
        }
        for (int64_t k = 0; k < c->hd; k++) {
          double ref = 0;
          if (wa != 0) ref += wa * gt_orig(&va, ea + k);
          if (wb != 0) ref += wb * gt_orig(&vb, eb + k);
          acc_v(gt_now(out_v, eo + k), ref, &vn, &vd, &r.unwritten);
          if (one)
            r.not_exact += !gt_same_bits(out_v, eo + k, a == NEG_INF ? &vb : &va,
                                         (a == NEG_INF ? eb : ea) + k);
        }
        if (!c->no_s_out) {
          acc_s(gt_now(out_s, eso), sref, &sn, &sd, &r.bad_inf, &r.unwritten);
          if (one) r.not_exact += gt_now(out_s, eso) != (a == NEG_INF ? b : a);
        }
      }
    r.v_err = rel(vn, vd);
    r.s_err = rel(sn, sd);
    r.gaps = gt_gaps_touched(out_v) + (c->no_s_out ? 0 : gt_gaps_touched(out_s));
    if (c->no_s_out && !c->alias && !c->in_place) { /* s_out was not passed: still all poison */
      for (int64_t e = 0; e < so.elems * 4; e++) r.gaps += so.h[e] != 0xff;
    }
  }
  gt_free(&va);
  gt_free(&vb);
  gt_free(&sa);
  gt_free(&sb);
  gt_free(&vo);
  gt_free(&so);
  gt_free(&mk);
  return r;
}

static void check_ms(const char *label, const ms_case *c) {
  char what[256];
  snprintf(what, sizeof what, "%s %s %lldx%lldx%lld", label, g_dtname(c->dt), (long long)c->seq,
           (long long)c->heads, (long long)c->hd);
  result r = run_ms(c);
  check_result(what, c->dt, &r);
}

static const int64_t HDS[] = {64, 128, 256, 72};

FT_TEST(merge_state_dtypes_head_dims_sizes) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  static const int64_t sh[][2] = {{1, 1}, {1, 32}, {1237, 1}, {1029, 32}}; /* seq, heads */
  int64_t all_empty = 0, one = 0;
  for (int dt = 0; dt < 3; dt++)
    for (int d = 0; d < 4; d++)
      for (int s = 0; s < 4; s++) {
        ms_case c = {.dt = dt, .seq = sh[s][0], .heads = sh[s][1], .hd = HDS[d], .lo = -50,
                     .hi = 50, .p_empty = 0.1};
        result r = run_ms(&c);
        char what[128];
        snprintf(what, sizeof what, "merge_state %s %lldx%lldx%lld", g_dtname(dt),
                 (long long)c.seq, (long long)c.heads, (long long)c.hd);
        check_result(what, dt, &r);
        all_empty += r.rows_empty;
        one += r.rows_one;
      }
  /* The -inf cases were really exercised. */
  FT_CHECK(all_empty > 100 && one > 1000, "only %lld empty rows and %lld one-part rows",
           (long long)all_empty, (long long)one);
}

/* LSEs to +-100: exp(100) overflows float, so only a max-shifted merge works. */
FT_TEST(merge_state_lse_far_apart) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  for (int dt = 0; dt < 3; dt++) {
    ms_case c = {.dt = dt, .seq = 515, .heads = 8, .hd = 128, .lo = -100, .hi = 100, .p_empty = 0.05};
    check_ms("lse +-100", &c);
    ms_case d = {.dt = dt, .seq = 300, .heads = 4, .hd = 128, .lo = 85, .hi = 88, .p_empty = 0};
    check_ms("lse 85..88", &d);
    ms_case e = {.dt = dt, .seq = 300, .heads = 4, .hd = 128, .lo = -1, .hi = 0, .p_empty = 0.5};
    check_ms("half empty", &e);
    ms_case f = {.dt = dt, .seq = 64, .heads = 4, .hd = 128, .lo = -1, .hi = 0, .p_empty = 1.0};
    check_ms("all empty", &f);
  }
}

FT_TEST(merge_state_strided_layouts) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  const int64_t seq = 333, H = 32, D = 128;
  /* Padded heads and tokens, still 16-byte aligned. */
  const int64_t pad_a[3] = {H * (D + 16) + 64, D + 16, 1}, pad_o[3] = {H * (D + 8) + 8, D + 8, 1};
  /* [heads, seq, D] in memory, seen as [seq, heads, D]. */
  const int64_t tr_v[3] = {D, seq * D, 1}, tr_s[2] = {1, seq};
  const int64_t pad_s[2] = {H + 3, 1};
  /* Odd strides: 2-byte (f16/bf16) or 4-byte (f32) accesses. */
  const int64_t odd_v[3] = {H * (D + 3) + 1, D + 3, 1};
  for (int dt = 0; dt < 3; dt++) {
    ms_case c = {.dt = dt, .seq = seq, .heads = H, .hd = D, .va_st = pad_a, .vb_st = tr_v,
                 .vo_st = pad_o, .sa_st = pad_s, .sb_st = tr_s, .so_st = pad_s, .lo = -50,
                 .hi = 50, .p_empty = 0.1};
    check_ms("padded/transposed", &c);
    ms_case t = {.dt = dt, .seq = seq, .heads = H, .hd = D, .va_st = tr_v, .vb_st = tr_v,
                 .vo_st = tr_v, .sa_st = tr_s, .sb_st = tr_s, .so_st = tr_s, .lo = -50,
                 .hi = 50, .p_empty = 0.1};
    check_ms("all transposed", &t);
    ms_case o = {.dt = dt, .seq = seq, .heads = H, .hd = D, .va_st = odd_v, .vb_st = pad_a,
                 .vo_st = odd_v, .lo = -50, .hi = 50, .p_empty = 0.1};
    check_ms("odd strides", &o);
    ms_case m = {.dt = dt, .seq = 77, .heads = 5, .hd = D, .voff = 1, .lo = -50, .hi = 50,
                 .p_empty = 0.1};
    check_ms("misaligned start", &m);
    ms_case n = {.dt = dt, .seq = 77, .heads = 5, .hd = D, .no_s_out = 1, .vo_st = pad_o,
                 .lo = -50, .hi = 50, .p_empty = 0.1};
    check_ms("s_out NULL", &n);
  }
}

/* head_dim of every row shape the selection has: narrow accesses (100, 7, 1),
 * a full warp with 2 and 4 vectors per lane, and the loop past that. */
FT_TEST(merge_state_other_head_dims) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  static const int64_t hds[] = {1, 7, 8, 16, 32, 100, 512, 1024, 2048, 4104};
  for (int dt = 0; dt < 3; dt++)
    for (size_t i = 0; i < sizeof hds / sizeof hds[0]; i++) {
      ms_case c = {.dt = dt, .seq = 67, .heads = 6, .hd = hds[i], .lo = -50, .hi = 50,
                   .p_empty = 0.1};
      check_ms("head_dim", &c);
    }
}

FT_TEST(merge_state_output_is_an_input) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  for (int dt = 0; dt < 3; dt++)
    for (int alias = 1; alias <= 2; alias++) {
      ms_case c = {.dt = dt, .seq = 1029, .heads = 32, .hd = 128, .alias = alias, .lo = -50,
                   .hi = 50, .p_empty = 0.1};
      check_ms(alias == 1 ? "v_out = v_a" : "v_out = v_b", &c);
    }
}

FT_TEST(merge_state_in_place_with_and_without_mask) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUstream s;
  CU_CHECK(&cu, cuStreamCreate(&s, 1 /* non-blocking */));
  const int64_t pad_a[3] = {32 * (128 + 16), 128 + 16, 1};
  for (int dt = 0; dt < 3; dt++)
    for (int mask = 0; mask < 3; mask++) {
      const int mk = mask == 0 ? 0 : mask == 1 ? DT_U8 : DT_BOOL;
      ms_case c = {.dt = dt, .seq = 1029, .heads = 32, .hd = 128, .in_place = 1, .mask = mk,
                   .lo = -50, .hi = 50, .p_empty = 0.1, .stream = s};
      check_ms(mask == 0 ? "in place" : mask == 1 ? "in place, uint8 mask" : "in place, bool mask", &c);
      ms_case d = {.dt = dt, .seq = 40, .heads = 32, .hd = 72, .in_place = 1, .mask = mk,
                   .va_st = NULL, .lo = -50, .hi = 50, .p_empty = 0.2, .stream = s};
      check_ms("in place, head_dim 72", &d);
      ms_case e = {.dt = dt, .seq = 40, .heads = 32, .hd = 128, .in_place = 1, .mask = mk,
                   .va_st = pad_a, .lo = -50, .hi = 50, .p_empty = 0.2, .stream = s};
      check_ms("in place, padded", &e);
    }
  CU_CHECK(&cu, cuStreamDestroy(s));
}

/* ---- N states ---- */

typedef struct mss_case {
  int dt;
  int64_t seq, n, heads, hd;
  const int64_t *v_st, *s_st;   /* [seq, N, heads, head_dim], [seq, N, heads]; NULL: compact */
  const int64_t *vo_st, *so_st; /* [seq, heads, head_dim], [seq, heads] */
  int64_t voff;
  int no_s_out;
  double lo, hi, p_empty;
} mss_case;

static result run_mss(const mss_case *c) {
  result r;
  memset(&r, 0, sizeof r);
  const int64_t v4[4] = {c->seq, c->n, c->heads, c->hd}, s3[3] = {c->seq, c->n, c->heads};
  const int64_t v3[3] = {c->seq, c->heads, c->hd}, s2[2] = {c->seq, c->heads};
  gt v, s, vo, so;
  gt_make(&v, c->dt, 4, v4, c->v_st, c->voff);
  gt_make(&s, DT_F32, 3, s3, c->s_st, 0);
  gt_make(&vo, c->dt, 3, v3, c->vo_st, c->voff);
  gt_make(&so, DT_F32, 2, s2, c->so_st, 0);
  for (int64_t i = 0; i < c->seq; i++)
    for (int64_t n = 0; n < c->n; n++)
      for (int64_t h = 0; h < c->heads; h++) {
        const float x = rand_lse(c->lo, c->hi, c->p_empty);
        ((float *)s.h)[gt_at(&s, i, n, h, 0)] = x;
        fill_row(&v, gt_at(&v, i, n, h, 0), c->hd, x == NEG_INF && (g_rand(&seed) & 1));
      }
  gt_upload(&v);
  gt_upload(&s);
  gt_upload(&vo);
  gt_upload(&so);
  fi_status st = fi_merge_states(rt, &v.t, &s.t, &vo.t, c->no_s_out ? NULL : &so.t, NULL);
  r.ok_call = st == FI_OK;
  if (r.ok_call) {
    CU_CHECK(&cu, cuCtxSynchronize());
    gt_download(&vo);
    gt_download(&so);
    double vn = 0, vd = 0, sn = 0, sd = 0;
    double *w = malloc(sizeof(double) * (size_t)c->n);
    for (int64_t i = 0; i < c->seq; i++)
      for (int64_t h = 0; h < c->heads; h++) {
        double m = NEG_INF;
        int nonempty = 0, last = -1;
        for (int64_t n = 0; n < c->n; n++) {
          const double x = gt_orig(&s, gt_at(&s, i, n, h, 0));
          m = fmax(m, x);
          if (x != NEG_INF) nonempty++, last = (int)n;
        }
        const int empty = nonempty == 0, one = nonempty == 1;
        r.rows_empty += empty;
        r.rows_one += one && c->n > 1;
        double sum = 0, sref = NEG_INF;
        for (int64_t n = 0; n < c->n; n++) {
          const double x = gt_orig(&s, gt_at(&s, i, n, h, 0));
          w[n] = empty || x == NEG_INF ? 0 : exp(x - m);
          sum += w[n];
        }
        if (!empty) sref = m + log(sum);
        const int64_t eo = gt_at(&vo, i, h, 0, 0);
        for (int64_t k = 0; k < c->hd; k++) {
          double ref = 0;
          for (int64_t n = 0; n < c->n; n++)
            if (w[n] != 0) ref += w[n] / sum * gt_orig(&v, gt_at(&v, i, n, h, k));
          acc_v(gt_now(&vo, eo + k), ref, &vn, &vd, &r.unwritten);
          if (one) r.not_exact += !gt_same_bits(&vo, eo + k, &v, gt_at(&v, i, last, h, k));
        }
        if (!c->no_s_out) {
          const int64_t es = gt_at(&so, i, h, 0, 0);
          acc_s(gt_now(&so, es), sref, &sn, &sd, &r.bad_inf, &r.unwritten);
          if (one) r.not_exact += gt_now(&so, es) != gt_orig(&s, gt_at(&s, i, last, h, 0));
        }
      }
    free(w);
    r.v_err = rel(vn, vd);
    r.s_err = rel(sn, sd);
    r.gaps = gt_gaps_touched(&vo) + (c->no_s_out ? 0 : gt_gaps_touched(&so));
    if (c->no_s_out)
      for (int64_t e = 0; e < so.elems * 4; e++) r.gaps += so.h[e] != 0xff;
  }
  gt_free(&v);
  gt_free(&s);
  gt_free(&vo);
  gt_free(&so);
  return r;
}

static void check_mss(const char *label, const mss_case *c) {
  char what[256];
  snprintf(what, sizeof what, "%s %s seq %lld N %lld heads %lld head_dim %lld", label,
           g_dtname(c->dt), (long long)c->seq, (long long)c->n, (long long)c->heads,
           (long long)c->hd);
  result r = run_mss(c);
  check_result(what, c->dt, &r);
}

FT_TEST(merge_states_dtypes_n_head_dims) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  static const int64_t ns[] = {1, 2, 4, 7};
  static const int64_t sh[][2] = {{1, 1}, {1, 32}, {1100, 1}, {1029, 32}};
  int64_t all_empty = 0, one = 0;
  for (int dt = 0; dt < 3; dt++)
    for (int d = 0; d < 4; d++)
      for (int n = 0; n < 4; n++)
        for (int s = 0; s < 4; s++) {
          /* The biggest shape for head_dim 128 only: enough rows everywhere else. */
          if (s == 3 && HDS[d] != 128 && ns[n] > 2) continue;
          mss_case c = {.dt = dt, .seq = sh[s][0], .n = ns[n], .heads = sh[s][1], .hd = HDS[d],
                        .lo = -50, .hi = 50, .p_empty = 0.15};
          char what[160];
          snprintf(what, sizeof what, "merge_states %s seq %lld N %lld heads %lld head_dim %lld",
                   g_dtname(dt), (long long)c.seq, (long long)c.n, (long long)c.heads,
                   (long long)c.hd);
          result r = run_mss(&c);
          check_result(what, dt, &r);
          all_empty += r.rows_empty;
          one += r.rows_one;
        }
  FT_CHECK(all_empty > 100 && one > 1000, "only %lld empty rows and %lld one-state rows",
           (long long)all_empty, (long long)one);
}

FT_TEST(merge_states_layouts_and_head_dims) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  const int64_t seq = 211, N = 4, H = 8, D = 128;
  /* [N, seq, H, D] in memory (each split's output a tensor of its own). */
  const int64_t nmaj_v[4] = {H * D, seq * H * D, D, 1}, nmaj_s[3] = {H, seq * H, 1};
  /* Padded heads and tokens. */
  const int64_t pad_v[4] = {N * H * (D + 8) + 24, H * (D + 8), D + 8, 1};
  const int64_t pad_s[3] = {N * (H + 1) + 2, H + 1, 1};
  const int64_t pad_o[3] = {H * (D + 16) + 8, D + 16, 1}, pad_so[2] = {H + 5, 1};
  const int64_t odd_v[4] = {N * H * (D + 1), H * (D + 1), D + 1, 1};
  static const int64_t hds[] = {1, 7, 16, 100, 512, 1024, 2048, 4104};
  for (int dt = 0; dt < 3; dt++) {
    mss_case a = {.dt = dt, .seq = seq, .n = N, .heads = H, .hd = D, .v_st = nmaj_v,
                  .s_st = nmaj_s, .lo = -50, .hi = 50, .p_empty = 0.15};
    check_mss("state-major", &a);
    mss_case b = {.dt = dt, .seq = seq, .n = N, .heads = H, .hd = D, .v_st = pad_v,
                  .s_st = pad_s, .vo_st = pad_o, .so_st = pad_so, .lo = -50, .hi = 50,
                  .p_empty = 0.15};
    check_mss("padded", &b);
    mss_case c = {.dt = dt, .seq = seq, .n = 3, .heads = H, .hd = D, .v_st = NULL,
                  .no_s_out = 1, .vo_st = pad_o, .lo = -50, .hi = 50, .p_empty = 0.15};
    check_mss("s_out NULL", &c);
    mss_case m = {.dt = dt, .seq = 50, .n = 5, .heads = 3, .hd = D, .voff = 1, .lo = -50,
                  .hi = 50, .p_empty = 0.15};
    check_mss("misaligned start", &m);
    mss_case o = {.dt = dt, .seq = 50, .n = 2, .heads = H, .hd = D, .v_st = odd_v, .lo = -50,
                  .hi = 50, .p_empty = 0.15};
    check_mss("odd strides", &o);
    mss_case f = {.dt = dt, .seq = 100, .n = 6, .heads = 4, .hd = D, .lo = -100, .hi = 100,
                  .p_empty = 0.3};
    check_mss("lse +-100", &f);
    mss_case e = {.dt = dt, .seq = 30, .n = 5, .heads = 4, .hd = D, .lo = 0, .hi = 1,
                  .p_empty = 1.0};
    check_mss("all empty", &e);
    for (size_t i = 0; i < sizeof hds / sizeof hds[0]; i++) {
      mss_case h = {.dt = dt, .seq = 37, .n = i % 2 ? 3 : 5, .heads = 3, .hd = hds[i], .lo = -50,
                    .hi = 50, .p_empty = 0.15};
      check_mss("head_dim", &h);
    }
  }
}

FT_TEST(cascade_zero_rows_launch_nothing) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUdeviceptr d;
  CU_CHECK(&cu, cuMemAlloc(&d, 1 << 16));
  int64_t v3[3] = {0, 32, 128}, s2[2] = {0, 32}, v4[4] = {0, 4, 32, 128}, s3[3] = {0, 4, 32};
  DLTensor va = g_tensor(d, 0, DT_BF16, 3, v3, NULL), vb = g_tensor(d, 8192, DT_BF16, 3, v3, NULL);
  DLTensor vo = g_tensor(d, 16384, DT_BF16, 3, v3, NULL), sa = g_tensor(d, 24576, DT_F32, 2, s2, NULL);
  DLTensor sb = g_tensor(d, 32768, DT_F32, 2, s2, NULL), so = g_tensor(d, 40960, DT_F32, 2, s2, NULL);
  DLTensor v = g_tensor(d, 0, DT_BF16, 4, v4, NULL), s = g_tensor(d, 24576, DT_F32, 3, s3, NULL);
  FT_CHECK(fi_merge_state(rt, &va, &sa, &vb, &sb, &vo, &so, NULL) == FI_OK, "%s", fi_last_error());
  FT_CHECK(fi_merge_state_in_place(rt, &va, &sa, &vb, &sb, NULL, NULL) == FI_OK, "%s", fi_last_error());
  FT_CHECK(fi_merge_states(rt, &v, &s, &vo, &so, NULL) == FI_OK, "%s", fi_last_error());
  v3[0] = 4, v3[1] = 0, s2[0] = 4, s2[1] = 0; /* 0 heads */
  FT_CHECK(fi_merge_state(rt, &va, &sa, &vb, &sb, &vo, &so, NULL) == FI_OK, "%s", fi_last_error());
  CU_CHECK(&cu, cuCtxSynchronize());
  CU_CHECK(&cu, cuMemFree(d));
}
