/* gpu_norms.c: fi_fused_add_rmsnorm, fi_gemma_rmsnorm, fi_gemma_fused_add_rmsnorm and
 * fi_layernorm on the GPU against float64 CPU references, on fresh random inputs with
 * outputs poisoned first, across dtypes, hidden sizes, strided and misaligned rows, in place. */
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

enum { OP_FUSED, OP_GEMMA_FUSED, OP_GEMMA, OP_LAYERNORM };
static const char *op_name(int op) {
  return op == OP_FUSED ? "fused_add_rmsnorm" : op == OP_GEMMA_FUSED ? "gemma_fused_add_rmsnorm"
                        : op == OP_GEMMA ? "gemma_rmsnorm" : "layernorm";
}
static int is_fused(int op) { return op == OP_FUSED || op == OP_GEMMA_FUSED; }

/* One call. aux is the residual (fused ops) or out (the others); wdt is
 * layernorm's gamma/beta dtype. off shifts input and aux by that many
 * elements (breaking 16-byte alignment when odd); in_place: out is input. */
typedef struct ncase {
  int op, dt, wdt;
  int64_t rows, hidden, in_stride, aux_stride, off;
  int in_place;
  double mean; /* added to every input element (layernorm's mean, a residual's offset) */
  CUstream stream;
} ncase;

typedef struct nresult {
  double err, err_res;  /* relative norm errors of out and of the residual */
  long bad, bad_res;    /* elements off by more than a few roundings, or NaN (unwritten) */
  long gap;             /* bytes outside the rows' elements that changed */
  long input_changed;   /* out of place: input elements that changed */
  fi_status st;
} nresult;

static double tol(int dt) { return dt == 0 ? 1e-3 : dt == 1 ? 1e-2 : 1e-5; }

/* Per element: a few roundings of dt, scaled by the element and its row. */
static int close_enough(int dt, double got, double ref, double row_rms) {
  const double u = dt == 0 ? 1.0 / 512 : dt == 1 ? 1.0 / 64 : 1e-5;
  return fabs(got - ref) <= u * (fabs(ref) + row_rms); /* false for NaN */
}

static double g_round(int dt, double x) {
  float tmp;
  return g_put(&tmp, dt, 0, x);
}

static fi_status call(const ncase *c, DLTensor *in, DLTensor *aux, DLTensor *w, DLTensor *b) {
  const double eps = 1e-6;
  switch (c->op) {
    case OP_FUSED: return fi_fused_add_rmsnorm(rt, in, aux, w, eps, c->stream);
    case OP_GEMMA_FUSED: return fi_gemma_fused_add_rmsnorm(rt, in, aux, w, eps, c->stream);
    case OP_GEMMA: return fi_gemma_rmsnorm(rt, in, w, eps, c->in_place ? in : aux, c->stream);
    default: return fi_layernorm(rt, in, w, b, 1e-5, c->in_place ? in : aux, c->stream);
  }
}

/* Counts bytes of buf (n elements of es bytes, rows of `stride` from `off`)
 * outside the rows' first `hidden` elements that are not `fill`. */
static long gap_changes(const unsigned char *buf, int64_t n, int es, int64_t off, int64_t rows,
                        int64_t hidden, int64_t stride, unsigned char fill) {
  long changed = 0;
  for (int64_t e = 0; e < n; e++) {
    const int64_t rel = e - off;
    const int inside = rel >= 0 && rel / stride < rows && rel % stride < hidden;
    if (inside) continue;
    for (int k = 0; k < es; k++) changed += buf[e * es + k] != fill;
  }
  return changed;
}

static nresult run_case(const ncase *c) {
  nresult res;
  memset(&res, 0, sizeof res);
  const int dt = c->dt, es = g_esize(dt), fused = is_fused(c->op);
  const int wdt = c->op == OP_LAYERNORM ? c->wdt : dt, wes = g_esize(wdt);
  const int64_t rows = c->rows, hidden = c->hidden;
  const int64_t in_stride = c->in_stride, aux_stride = c->in_place ? c->in_stride : c->aux_stride;
  const int has_aux = fused || !c->in_place;
  const int64_t in_n = c->off + (rows - 1) * in_stride + hidden;
  const int64_t aux_n = has_aux ? c->off + (rows - 1) * aux_stride + hidden : 0;
  const unsigned char in_fill = 0x5a, aux_fill = fused ? 0x33 : 0xff; /* 0xff: NaN in every dtype */

  unsigned char *hin = malloc((size_t)(in_n * es)), *haux = malloc((size_t)(aux_n * es) + 1);
  void *hw = malloc((size_t)(hidden * wes)), *hb = malloc((size_t)(hidden * wes));
  double *x = malloc(sizeof(double) * (size_t)(rows * hidden));
  double *r = fused ? malloc(sizeof(double) * (size_t)(rows * hidden)) : NULL;
  double *w = malloc(sizeof(double) * (size_t)hidden), *bv = malloc(sizeof(double) * (size_t)hidden);
  memset(hin, in_fill, (size_t)(in_n * es));
  memset(haux, aux_fill, (size_t)(aux_n * es));
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < hidden; j++) {
      x[i * hidden + j] = g_put(hin, dt, c->off + i * in_stride + j, c->mean + 3.0 * g_normal(&seed));
      if (fused)
        r[i * hidden + j] = g_put(haux, dt, c->off + i * aux_stride + j, 2.0 * g_normal(&seed));
    }
  for (int64_t j = 0; j < hidden; j++) {
    /* Gemma's weights sit around 0 (the kernel adds 1); the others around 1. */
    w[j] = g_put(hw, wdt, j, c->op == OP_GEMMA || c->op == OP_GEMMA_FUSED ? g_uniform(&seed) - 0.5
                                                                           : 0.5 + g_uniform(&seed));
    bv[j] = g_put(hb, wdt, j, 0.5 * g_normal(&seed));
  }

  CUdeviceptr din, daux = 0, dw, db;
  CU_CHECK(&cu, cuMemAlloc(&din, (size_t)(in_n * es)));
  CU_CHECK(&cu, cuMemcpyHtoD(din, hin, (size_t)(in_n * es)));
  if (has_aux) {
    CU_CHECK(&cu, cuMemAlloc(&daux, (size_t)(aux_n * es)));
    CU_CHECK(&cu, cuMemcpyHtoD(daux, haux, (size_t)(aux_n * es)));
  }
  CU_CHECK(&cu, cuMemAlloc(&dw, (size_t)(hidden * wes)));
  CU_CHECK(&cu, cuMemAlloc(&db, (size_t)(hidden * wes)));
  CU_CHECK(&cu, cuMemcpyHtoD(dw, hw, (size_t)(hidden * wes)));
  CU_CHECK(&cu, cuMemcpyHtoD(db, hb, (size_t)(hidden * wes)));

  int64_t s_in[2] = {rows, hidden}, st_in[2] = {in_stride, 1};
  int64_t s_aux[2] = {rows, hidden}, st_aux[2] = {aux_stride, 1}, s_w[1] = {hidden};
  DLTensor tin = g_tensor(din, c->off * es, dt, 2, s_in, st_in);
  DLTensor taux = g_tensor(daux, c->off * es, dt, 2, s_aux, st_aux);
  DLTensor tw = g_tensor(dw, 0, wdt, 1, s_w, NULL), tb = g_tensor(db, 0, wdt, 1, s_w, NULL);
  /* Pageable uploads (and memsets) go out on the legacy stream and may still be in
   * flight: a non-blocking stream does not wait for them. */
  CU_CHECK(&cu, cuCtxSynchronize());
  res.st = call(c, &tin, &taux, &tw, &tb);
  if (res.st != FI_OK) {
    fprintf(stderr, "fi_%s: %s: %s\n", op_name(c->op), fi_status_string(res.st), fi_last_error());
    res.err = res.err_res = 1e30;
    goto done;
  }
  CU_CHECK(&cu, cuStreamSynchronize(c->stream));
  CU_CHECK(&cu, cuMemcpyDtoH(hin, din, (size_t)(in_n * es)));
  if (has_aux) CU_CHECK(&cu, cuMemcpyDtoH(haux, daux, (size_t)(aux_n * es)));

  /* Where the result is: over the input (fused, in place) or in out. */
  const unsigned char *hout = fused || c->in_place ? hin : haux;
  const int64_t out_stride = fused || c->in_place ? in_stride : aux_stride;
  double num = 0, den = 0, rnum = 0, rden = 0;
  double *ref = malloc(sizeof(double) * (size_t)hidden);
  for (int64_t i = 0; i < rows; i++) {
    const double *xi = x + i * hidden;
    double ss = 0, mean = 0, var = 0;
    if (fused) {
      /* residual = input + residual, summed exactly; the kernel normalizes
       * that sum (in float), not its rounding to dt. */
      for (int64_t j = 0; j < hidden; j++) {
        const double s = xi[j] + r[i * hidden + j];
        const double want = g_round(dt, s), got = g_get(haux, dt, c->off + i * aux_stride + j);
        rnum += (got - want) * (got - want);
        rden += want * want;
        if (!(got == want || fabs(got - want) <= 1e-6 * fabs(want))) res.bad_res++;
        ref[j] = s;
        ss += s * s;
      }
    } else {
      for (int64_t j = 0; j < hidden; j++) ref[j] = xi[j], ss += xi[j] * xi[j], mean += xi[j];
    }
    if (c->op == OP_LAYERNORM) {
      mean /= (double)hidden;
      for (int64_t j = 0; j < hidden; j++) var += (ref[j] - mean) * (ref[j] - mean);
      const double rstd = 1.0 / sqrt(var / (double)hidden + 1e-5);
      for (int64_t j = 0; j < hidden; j++) ref[j] = (ref[j] - mean) * rstd * w[j] + bv[j];
    } else {
      const double inv = 1.0 / sqrt(ss / (double)hidden + 1e-6);
      const int gemma = c->op != OP_FUSED;
      for (int64_t j = 0; j < hidden; j++) ref[j] = ref[j] * inv * (gemma ? 1.0 + w[j] : w[j]);
    }
    double row_ss = 0;
    for (int64_t j = 0; j < hidden; j++) row_ss += ref[j] * ref[j];
    const double row_rms = sqrt(row_ss / (double)hidden);
    for (int64_t j = 0; j < hidden; j++) {
      const double got = g_get(hout, dt, c->off + i * out_stride + j);
      num += (got - ref[j]) * (got - ref[j]);
      den += ref[j] * ref[j];
      if (!close_enough(dt, got, ref[j], row_rms)) res.bad++;
    }
  }
  free(ref);
  if (!fused && !c->in_place)
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < hidden; j++)
        res.input_changed += g_get(hin, dt, c->off + i * in_stride + j) != x[i * hidden + j];
  res.err = den > 0 ? sqrt(num / den) : sqrt(num);
  res.err_res = rden > 0 ? sqrt(rnum / rden) : sqrt(rnum);
  if (res.err != res.err) res.err = 1e30;
  if (res.err_res != res.err_res) res.err_res = 1e30;
  /* Nothing outside the rows' elements may change: row gaps, the
   * misaligning offset before the first row. */
  res.gap = gap_changes(hin, in_n, es, c->off, rows, hidden, in_stride, in_fill);
  if (has_aux) res.gap += gap_changes(haux, aux_n, es, c->off, rows, hidden, aux_stride, aux_fill);

done:
  CU_CHECK(&cu, cuMemFree(din));
  if (has_aux) CU_CHECK(&cu, cuMemFree(daux));
  CU_CHECK(&cu, cuMemFree(dw));
  CU_CHECK(&cu, cuMemFree(db));
  free(hin), free(haux), free(hw), free(hb), free(x), free(r), free(w), free(bv);
  return res;
}

static void check(ncase c) {
  if (!c.in_stride) c.in_stride = c.hidden;
  if (!c.aux_stride) c.aux_stride = c.hidden;
  nresult r = run_case(&c);
  fprintf(stderr,
          "  %s %s%s%s rows=%lld hidden=%lld strides=%lld/%lld off=%lld inplace=%d mean=%g: "
          "err %.3g (bad %ld)%s",
          op_name(c.op), g_dtname(c.dt), c.op == OP_LAYERNORM ? " gamma " : "",
          c.op == OP_LAYERNORM ? g_dtname(c.wdt) : "", (long long)c.rows, (long long)c.hidden,
          (long long)c.in_stride, (long long)c.aux_stride, (long long)c.off, c.in_place, c.mean,
          r.err, r.bad, is_fused(c.op) ? "" : "\n");
  if (is_fused(c.op)) fprintf(stderr, ", residual err %.3g (bad %ld)\n", r.err_res, r.bad_res);
  const char *what = op_name(c.op);
  FT_CHECK(r.st == FI_OK, "%s %s %lldx%lld: %s", what, g_dtname(c.dt), (long long)c.rows,
           (long long)c.hidden, fi_status_string(r.st));
  if (r.st != FI_OK) return;
  FT_CHECK(r.err < tol(c.dt), "%s %s %lldx%lld: relative error %.3g over %.1g", what,
           g_dtname(c.dt), (long long)c.rows, (long long)c.hidden, r.err, tol(c.dt));
  FT_CHECK(r.bad == 0, "%s %s %lldx%lld: %ld outputs wrong or never written", what,
           g_dtname(c.dt), (long long)c.rows, (long long)c.hidden, r.bad);
  FT_CHECK(r.gap == 0, "%s %s %lldx%lld: %ld bytes outside the rows changed", what,
           g_dtname(c.dt), (long long)c.rows, (long long)c.hidden, r.gap);
  FT_CHECK(r.input_changed == 0, "%s %s %lldx%lld: %ld input elements changed", what,
           g_dtname(c.dt), (long long)c.rows, (long long)c.hidden, r.input_changed);
  if (is_fused(c.op)) {
    /* The residual is input + residual rounded once: exact but for the
     * float sum of two f32 values (one rounding). */
    FT_CHECK(r.err_res < 1e-6, "%s %s %lldx%lld: residual error %.3g", what, g_dtname(c.dt),
             (long long)c.rows, (long long)c.hidden, r.err_res);
    FT_CHECK(r.bad_res == 0, "%s %s %lldx%lld: %ld residual elements wrong", what,
             g_dtname(c.dt), (long long)c.rows, (long long)c.hidden, r.bad_res);
  }
}

static const int64_t hiddens[] = {1, 127, 128, 4096, 5120, 8191, 16384, 40000};
#define NH (sizeof hiddens / sizeof hiddens[0])

static void sizes_for(int op) {
  for (int dt = 0; dt < 3; dt++)
    for (size_t i = 0; i < NH; i++) {
      const int64_t h = hiddens[i], rows = h > 10000 ? 7 : 33;
      if (op != OP_LAYERNORM) {
        check((ncase){.op = op, .dt = dt, .rows = rows, .hidden = h});
      } else {
        check((ncase){.op = op, .dt = dt, .wdt = dt, .rows = rows, .hidden = h});
        if (dt != 2) check((ncase){.op = op, .dt = dt, .wdt = 2, .rows = rows, .hidden = h});
      }
    }
}

FT_TEST(fused_add_rmsnorm_dtypes_and_sizes) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  sizes_for(OP_FUSED);
}
FT_TEST(gemma_fused_add_rmsnorm_dtypes_and_sizes) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  sizes_for(OP_GEMMA_FUSED);
}
FT_TEST(gemma_rmsnorm_dtypes_and_sizes) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  sizes_for(OP_GEMMA);
}
FT_TEST(layernorm_dtypes_and_sizes) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  sizes_for(OP_LAYERNORM);
}

/* Padded rows (16-byte aligned), odd strides (narrow accesses), a start off
 * by one element, every other row of a bigger tensor; in place where the op
 * allows it. */
FT_TEST(norms_strided_misaligned_in_place) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  const int ops[4] = {OP_FUSED, OP_GEMMA_FUSED, OP_GEMMA, OP_LAYERNORM};
  for (int o = 0; o < 4; o++)
    for (int dt = 0; dt < 3; dt++) {
      const int op = ops[o], wdt = dt == 0 ? 2 : dt; /* layernorm: f16 with f32 gamma here */
      check((ncase){.op = op, .dt = dt, .wdt = wdt, .rows = 17, .hidden = 4096,
                    .in_stride = 4096 + 8, .aux_stride = 4096 + 24});
      check((ncase){.op = op, .dt = dt, .wdt = wdt, .rows = 17, .hidden = 4096,
                    .in_stride = 4096 + 3, .aux_stride = 4096 + 5});
      check((ncase){.op = op, .dt = dt, .wdt = wdt, .rows = 9, .hidden = 1024, .off = 1});
      check((ncase){.op = op, .dt = dt, .wdt = wdt, .rows = 64, .hidden = 768,
                    .in_stride = 2 * 768, .aux_stride = 768});
      if (!is_fused(op)) {
        check((ncase){.op = op, .dt = dt, .wdt = wdt, .rows = 50, .hidden = 4096,
                      .in_stride = 4096 + 8, .in_place = 1});
        check((ncase){.op = op, .dt = dt, .wdt = wdt, .rows = 5, .hidden = 40000, .in_place = 1});
        check((ncase){.op = op, .dt = dt, .wdt = wdt, .rows = 9, .hidden = 8191,
                      .in_stride = 8191 + 2, .off = 1, .in_place = 1});
      }
    }
}

/* Many more rows than the persistent grid holds (each block walks rows and
 * prefetches the next), on a non-blocking stream. */
FT_TEST(norms_many_rows_and_stream) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUstream s;
  CU_CHECK(&cu, cuStreamCreate(&s, 1 /* non-blocking */));
  check((ncase){.op = OP_FUSED, .dt = 1, .rows = 8192, .hidden = 8192, .stream = s});
  check((ncase){.op = OP_GEMMA_FUSED, .dt = 0, .rows = 3000, .hidden = 5120, .stream = s});
  check((ncase){.op = OP_GEMMA, .dt = 1, .rows = 20000, .hidden = 128, .stream = s});
  check((ncase){.op = OP_LAYERNORM, .dt = 1, .wdt = 2, .rows = 4096, .hidden = 8192, .stream = s});
  check((ncase){.op = OP_LAYERNORM, .dt = 0, .wdt = 0, .rows = 3000, .hidden = 16384, .stream = s});
  check((ncase){.op = OP_FUSED, .dt = 2, .rows = 2000, .hidden = 12288, .stream = s});
  CU_CHECK(&cu, cuStreamDestroy(s));
}

/* LayerNorm of rows far from zero mean: a sum of squares minus a squared sum
 * would cancel; the kernel's shifted moments must not. */
FT_TEST(layernorm_offset_rows) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  for (int dt = 0; dt < 3; dt++) {
    const double mean = dt == 2 ? 16.0 : 64.0;
    check((ncase){.op = OP_LAYERNORM, .dt = dt, .wdt = dt, .rows = 33, .hidden = 4096, .mean = mean});
    check((ncase){.op = OP_LAYERNORM, .dt = dt, .wdt = 2, .rows = 7, .hidden = 40000, .mean = mean});
    check((ncase){.op = OP_LAYERNORM, .dt = dt, .wdt = dt, .rows = 9, .hidden = 8191, .mean = mean});
  }
}

FT_TEST(norms_zero_rows_launch_nothing) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUdeviceptr d;
  CU_CHECK(&cu, cuMemAlloc(&d, 8192));
  int64_t s0[2] = {0, 64}, sw[1] = {64};
  DLTensor x = g_tensor(d, 0, 1, 2, s0, NULL), r = g_tensor(d, 2048, 1, 2, s0, NULL);
  DLTensor w = g_tensor(d, 4096, 1, 1, sw, NULL), b = g_tensor(d, 6144, 1, 1, sw, NULL);
  FT_CHECK(fi_fused_add_rmsnorm(rt, &x, &r, &w, 1e-6, NULL) == FI_OK, "%s", fi_last_error());
  FT_CHECK(fi_gemma_fused_add_rmsnorm(rt, &x, &r, &w, 1e-6, NULL) == FI_OK, "%s", fi_last_error());
  FT_CHECK(fi_gemma_rmsnorm(rt, &x, &w, 1e-6, &x, NULL) == FI_OK, "%s", fi_last_error());
  FT_CHECK(fi_layernorm(rt, &x, &w, &b, 1e-5, &x, NULL) == FI_OK, "%s", fi_last_error());
  CU_CHECK(&cu, cuCtxSynchronize());
  CU_CHECK(&cu, cuMemFree(d));
}
