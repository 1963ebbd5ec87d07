/* gpu_rmsnorm.c: fi_rmsnorm on the GPU against a float64 CPU reference, on
 * fresh random inputs with the output poisoned first, across dtypes, sizes, strides and aliasing. */
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

/* One case: rows x hidden, row strides (elements), an element offset that
 * breaks 16-byte alignment, in place or not. Returns the relative error. */
static double run_case(int dt, int64_t rows, int64_t hidden, int64_t in_stride, int64_t out_stride,
                       int64_t elem_offset, int in_place, CUstream stream, int *unwritten,
                       int *pad_touched) {
  const int es = g_esize(dt);
  if (in_place) out_stride = in_stride;
  const int64_t in_elems = elem_offset + (rows ? (rows - 1) * in_stride + hidden : 0);
  const int64_t out_elems = elem_offset + (rows ? (rows - 1) * out_stride + hidden : 0);
  void *hin = malloc((size_t)(in_elems * es)), *hw = malloc((size_t)(hidden * es));
  void *hout = malloc((size_t)(out_elems * es));
  double *xin = malloc(sizeof(double) * (size_t)(rows * hidden));
  double *w = malloc(sizeof(double) * (size_t)hidden);
  memset(hin, 0x5a, (size_t)(in_elems * es));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < hidden; c++)
      xin[r * hidden + c] = g_put(hin, dt, elem_offset + r * in_stride + c, g_normal(&seed) * 3.0);
  for (int64_t c = 0; c < hidden; c++) w[c] = g_put(hw, dt, c, 0.5 + g_uniform(&seed));
  CUdeviceptr din, dw, dout;
  CU_CHECK(&cu, cuMemAlloc(&din, (size_t)(in_elems * es) + 16));
  CU_CHECK(&cu, cuMemAlloc(&dw, (size_t)(hidden * es) + 16));
  CU_CHECK(&cu, cuMemcpyHtoD(din, hin, (size_t)(in_elems * es)));
  CU_CHECK(&cu, cuMemcpyHtoD(dw, hw, (size_t)(hidden * es)));
  if (in_place) {
    dout = din;
  } else {
    CU_CHECK(&cu, cuMemAlloc(&dout, (size_t)(out_elems * es) + 16));
    CU_CHECK(&cu, cuMemsetD8(dout, 0xff, (size_t)(out_elems * es))); /* NaN in every dtype */
  }
  int64_t sin[2] = {rows, hidden}, stin[2] = {in_stride, 1}, sw[1] = {hidden};
  int64_t sout[2] = {rows, hidden}, stout[2] = {out_stride, 1};
  DLTensor tin = g_tensor(din, elem_offset * es, dt, 2, sin, stin);
  DLTensor tw = g_tensor(dw, 0, dt, 1, sw, NULL);
  DLTensor tout = g_tensor(dout, elem_offset * es, dt, 2, sout, stout);
  const double eps = 1e-6;
  /* Pageable uploads (and memsets) go out on the legacy stream and may still be in
   * flight: a non-blocking stream does not wait for them. */
  CU_CHECK(&cu, cuCtxSynchronize());
  fi_status st = fi_rmsnorm(rt, &tin, &tw, eps, in_place ? &tin : &tout, stream);
  if (st != FI_OK) {
    fprintf(stderr, "fi_rmsnorm: %s: %s\n", fi_status_string(st), fi_last_error());
    return 1e30;
  }
  CU_CHECK(&cu, cuStreamSynchronize(stream));
  CU_CHECK(&cu, cuMemcpyDtoH(hout, dout, (size_t)(out_elems * es)));
  double num = 0, den = 0;
  *unwritten = 0;
  *pad_touched = 0;
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t c = 0; c < hidden; c++) ss += xin[r * hidden + c] * xin[r * hidden + c];
    double inv = 1.0 / sqrt(ss / (double)hidden + eps);
    for (int64_t c = 0; c < hidden; c++) {
      double ref = xin[r * hidden + c] * inv * w[c];
      double got = g_get(hout, dt, elem_offset + r * out_stride + c);
      if (got != got) (*unwritten)++;
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
    /* The gap between rows must keep its poison (or its input bytes). */
    if (r + 1 < rows)
      for (int64_t c = hidden; c < out_stride; c++) {
        const unsigned char *b = (const unsigned char *)hout + (elem_offset + r * out_stride + c) * es;
        unsigned char want = in_place ? 0x5a : 0xff;
        for (int k = 0; k < es; k++)
          if (b[k] != want) (*pad_touched)++;
      }
  }
  CU_CHECK(&cu, cuMemFree(din));
  CU_CHECK(&cu, cuMemFree(dw));
  if (!in_place) CU_CHECK(&cu, cuMemFree(dout));
  free(hin);
  free(hw);
  free(hout);
  free(xin);
  free(w);
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double tol(int dt) { return dt == 0 ? 1e-3 : dt == 1 ? 1e-2 : 1e-5; }

static void check(int dt, int64_t rows, int64_t hidden, int64_t in_stride, int64_t out_stride,
                  int64_t off, int in_place, CUstream stream) {
  int unwritten, pad;
  double e = run_case(dt, rows, hidden, in_stride, out_stride, off, in_place, stream, &unwritten,
                      &pad);
  fprintf(stderr, "  %s rows=%lld hidden=%lld strides=%lld/%lld off=%lld inplace=%d: err %.3g\n",
          g_dtname(dt), (long long)rows, (long long)hidden, (long long)in_stride,
          (long long)out_stride, (long long)off, in_place, e);
  FT_CHECK(e < tol(dt), "%s %lldx%lld: relative error %.3g over %.1g", g_dtname(dt),
           (long long)rows, (long long)hidden, e, tol(dt));
  FT_CHECK(unwritten == 0, "%s %lldx%lld: %d outputs never written", g_dtname(dt), (long long)rows,
           (long long)hidden, unwritten);
  FT_CHECK(pad == 0, "%s %lldx%lld: %d bytes between rows overwritten", g_dtname(dt),
           (long long)rows, (long long)hidden, pad);
}

FT_TEST(rmsnorm_dtypes_and_sizes) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  static const int64_t hiddens[] = {1, 3, 8, 100, 127, 128, 1000, 2048, 4096, 5120, 8191, 8192, 16384, 20000, 20001, 40000, 65537};
  for (int dt = 0; dt < 3; dt++)
    for (size_t i = 0; i < sizeof hiddens / sizeof hiddens[0]; i++) {
      int64_t h = hiddens[i], rows = h > 10000 ? 7 : 33;
      check(dt, rows, h, h, h, 0, 0, NULL);
    }
}

FT_TEST(rmsnorm_strided_rows_and_misaligned) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  for (int dt = 0; dt < 3; dt++) {
    check(dt, 17, 4096, 4096 + 8, 4096 + 24, 0, 0, NULL);  /* padded rows, still 16-byte aligned */
    check(dt, 17, 4096, 4096 + 3, 4096 + 5, 0, 0, NULL);   /* odd strides force narrow access */
    check(dt, 9, 1024, 1024, 1024, 1, 0, NULL);            /* pointer off by one element */
    check(dt, 64, 768, 2 * 768, 768, 0, 0, NULL);          /* every other row of a bigger tensor */
  }
}

FT_TEST(rmsnorm_in_place_and_stream) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUstream s;
  CU_CHECK(&cu, cuStreamCreate(&s, 1 /* non-blocking */));
  for (int dt = 0; dt < 3; dt++) {
    check(dt, 50, 4096, 4096, 4096, 0, 1, s);
    check(dt, 5, 70000, 70000 + 8, 0, 0, 1, s); /* two-pass path in place */
  }
  CU_CHECK(&cu, cuStreamDestroy(s));
}

FT_TEST(rmsnorm_large_rows_many_tokens) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  check(1, 8192, 8192, 8192, 8192, 0, 0, NULL);
  check(0, 20000, 128, 128, 128, 0, 0, NULL);
}

/* A kernel that reads what the previous kernel's last blocks wrote, with no
 * sync between them: on sm_90 the runtime launches with programmatic
 * dependent launch, so the second kernel's blocks are scheduled while the
 * first one's last wave still runs, and only its entry wait keeps the order.
 * Each round poisons b (NaN), normalizes a [4096 rows] into b, then the last
 * 64 rows of b into c[round]; a read of b before the first kernel wrote it
 * shows as NaN or a wrong value. */
FT_TEST(dependent_launches_keep_stream_order) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  enum { ROUNDS = 24, TAIL = 64 };
  const int64_t rows = 4096, hidden = 8192, n = rows * hidden, nt = TAIL * hidden;
  float *h = malloc(sizeof(float) * (size_t)n), *hw = malloc(sizeof(float) * 2 * (size_t)hidden);
  float *hc = malloc(sizeof(float) * (size_t)(ROUNDS * nt));
  double *ref = malloc(sizeof(double) * (size_t)nt);
  FT_REQUIRE(h && hw && hc && ref, "out of host memory");
  for (int64_t i = 0; i < n; i++) h[i] = (float)(g_normal(&seed) * 2.0);
  for (int64_t i = 0; i < 2 * hidden; i++) hw[i] = (float)(0.5 + g_uniform(&seed));
  CUdeviceptr da, db, dc, dw;
  CU_CHECK(&cu, cuMemAlloc(&da, sizeof(float) * (size_t)n));
  CU_CHECK(&cu, cuMemAlloc(&db, sizeof(float) * (size_t)n));
  CU_CHECK(&cu, cuMemAlloc(&dc, sizeof(float) * (size_t)(ROUNDS * nt)));
  CU_CHECK(&cu, cuMemAlloc(&dw, sizeof(float) * 2 * (size_t)hidden));
  CU_CHECK(&cu, cuMemcpyHtoD(da, h, sizeof(float) * (size_t)n));
  CU_CHECK(&cu, cuMemcpyHtoD(dw, hw, sizeof(float) * 2 * (size_t)hidden));
  CU_CHECK(&cu, cuMemsetD8(dc, 0xff, sizeof(float) * (size_t)(ROUNDS * nt)));
  int64_t sx[2] = {rows, hidden}, st[2] = {TAIL, hidden}, sw[1] = {hidden};
  DLTensor ta = g_tensor(da, 0, 2, 2, sx, NULL), tb = g_tensor(db, 0, 2, 2, sx, NULL);
  DLTensor tail = g_tensor(db, (int64_t)sizeof(float) * (n - nt), 2, 2, st, NULL);
  DLTensor tw0 = g_tensor(dw, 0, 2, 1, sw, NULL);
  DLTensor tw1 = g_tensor(dw, (int64_t)sizeof(float) * hidden, 2, 1, sw, NULL);
  fi_status s = FI_OK;
  for (int r = 0; r < ROUNDS && s == FI_OK; r++) {
    CU_CHECK(&cu, cuMemsetD8(db, 0xff, sizeof(float) * (size_t)n)); /* ordered on the legacy stream */
    DLTensor tc = g_tensor(dc, (int64_t)sizeof(float) * r * nt, 2, 2, st, NULL);
    s = fi_rmsnorm(rt, &ta, &tw0, 1e-6, &tb, NULL);
    if (s == FI_OK) s = fi_rmsnorm(rt, &tail, &tw1, 1e-6, &tc, NULL);
  }
  FT_CHECK(s == FI_OK, "fi_rmsnorm: %s", fi_last_error());
  CU_CHECK(&cu, cuCtxSynchronize());
  CU_CHECK(&cu, cuMemcpyDtoH(hc, dc, sizeof(float) * (size_t)(ROUNDS * nt)));
  /* Both steps in float64, rounding to float32 in between as the GPU stores. */
  for (int64_t t = 0; t < TAIL; t++) {
    const float *x = h + (rows - TAIL + t) * hidden;
    double ss = 0, ss2 = 0;
    for (int64_t c = 0; c < hidden; c++) ss += (double)x[c] * x[c];
    const double inv = 1.0 / sqrt(ss / (double)hidden + 1e-6);
    for (int64_t c = 0; c < hidden; c++) {
      ref[t * hidden + c] = (float)(x[c] * inv * hw[c]);
      ss2 += ref[t * hidden + c] * ref[t * hidden + c];
    }
    const double inv2 = 1.0 / sqrt(ss2 / (double)hidden + 1e-6);
    for (int64_t c = 0; c < hidden; c++) ref[t * hidden + c] *= inv2 * hw[hidden + c];
  }
  int bad_rounds = 0;
  double worst = 0;
  for (int r = 0; r < ROUNDS; r++) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < nt; i++) {
      const double g = hc[(int64_t)r * nt + i];
      num += (g - ref[i]) * (g - ref[i]);
      den += ref[i] * ref[i];
    }
    const double e = sqrt(num / den);
    if (!(e < 1e-5)) bad_rounds++;
    if (!(e <= worst)) worst = e;
  }
  fprintf(stderr, "  %d rounds of rmsnorm then rmsnorm of its last %d rows: %d wrong, worst err %.3g\n",
          ROUNDS, TAIL, bad_rounds, worst);
  FT_CHECK(bad_rounds == 0, "%d of %d rounds read the first kernel's output early (worst err %.3g)",
           bad_rounds, ROUNDS, worst);
  CU_CHECK(&cu, cuMemFree(da));
  CU_CHECK(&cu, cuMemFree(db));
  CU_CHECK(&cu, cuMemFree(dc));
  CU_CHECK(&cu, cuMemFree(dw));
  free(h);
  free(hw);
  free(hc);
  free(ref);
}

FT_TEST(rmsnorm_zero_tokens_launches_nothing) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUdeviceptr d;
  CU_CHECK(&cu, cuMemAlloc(&d, 4096));
  int64_t s0[2] = {0, 64}, sw[1] = {64};
  DLTensor x = g_tensor(d, 0, 1, 2, s0, NULL), w = g_tensor(d, 0, 1, 1, sw, NULL);
  FT_CHECK(fi_rmsnorm(rt, &x, &w, 1e-6, &x, NULL) == FI_OK, "%s", fi_last_error());
  CU_CHECK(&cu, cuMemFree(d));
}

FT_TEST(rmsnorm_bad_device_id_is_an_error) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUdeviceptr d;
  CU_CHECK(&cu, cuMemAlloc(&d, 4096));
  int64_t s0[2] = {4, 64}, sw[1] = {64};
  /* Separate memory for x and w: a weight inside out is refused first. */
  DLTensor x = g_tensor(d, 0, 1, 2, s0, NULL), w = g_tensor(d, 2048, 1, 1, sw, NULL);
  x.device.device_id = w.device.device_id = 63;
  fi_status st = fi_rmsnorm(rt, &x, &w, 1e-6, &x, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "device 63: got %s", fi_status_string(st));
  FT_CHECK(strstr(fi_last_error(), "63") != NULL, "message: %s", fi_last_error());
  CU_CHECK(&cu, cuMemFree(d));
}

/* ---- the cache seen from the GPU ------------------------------------------------------- */

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

static double run_small(fi_runtime *r, fi_status *st) {
  const int64_t rows = 64, hidden = 4096;
  int64_t sx[2] = {rows, hidden}, sw[1] = {hidden};
  uint16_t *hx = malloc(rows * hidden * 2), *hw = malloc(hidden * 2), *hy = malloc(rows * hidden * 2);
  double *x = malloc(sizeof(double) * rows * hidden), *wd = malloc(sizeof(double) * hidden);
  for (int64_t i = 0; i < rows * hidden; i++) x[i] = g_put(hx, 1, i, g_normal(&seed));
  for (int64_t i = 0; i < hidden; i++) wd[i] = g_put(hw, 1, i, 1.0 + g_uniform(&seed));
  CUdeviceptr dx, dw;
  CU_CHECK(&cu, cuMemAlloc(&dx, rows * hidden * 2));
  CU_CHECK(&cu, cuMemAlloc(&dw, hidden * 2));
  CU_CHECK(&cu, cuMemcpyHtoD(dx, hx, rows * hidden * 2));
  CU_CHECK(&cu, cuMemcpyHtoD(dw, hw, hidden * 2));
  DLTensor tx = g_tensor(dx, 0, 1, 2, sx, NULL), tw = g_tensor(dw, 0, 1, 1, sw, NULL);
  *st = fi_rmsnorm(r, &tx, &tw, 1e-6, &tx, NULL);
  double num = 0, den = 0;
  if (*st == FI_OK) {
    CU_CHECK(&cu, cuCtxSynchronize());
    CU_CHECK(&cu, cuMemcpyDtoH(hy, dx, rows * hidden * 2));
    for (int64_t r0 = 0; r0 < rows; r0++) {
      double ss = 0;
      for (int64_t c = 0; c < hidden; c++) ss += x[r0 * hidden + c] * x[r0 * hidden + c];
      double inv = 1.0 / sqrt(ss / hidden + 1e-6);
      for (int64_t c = 0; c < hidden; c++) {
        double ref = x[r0 * hidden + c] * inv * wd[c], got = g_get(hy, 1, r0 * hidden + c);
        num += (got - ref) * (got - ref);
        den += ref * ref;
      }
    }
  }
  CU_CHECK(&cu, cuMemFree(dx));
  CU_CHECK(&cu, cuMemFree(dw));
  free(hx), free(hw), free(hy), free(x), free(wd);
  return den > 0 ? sqrt(num / den) : 1e30;
}

/* A stored binary with a valid checksum that the driver refuses (here: not
 * an ELF file at all, as a cubin for a newer driver would be refused) is
 * dropped and rebuilt, and the call succeeds. */
FT_TEST(rejected_binary_is_rebuilt) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  char dir[] = "/tmp/fi-gpu-XXXXXX", path[128];
  FT_REQUIRE(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/k.db", dir);
  fi_options o;
  fi_options_init(&o);
  o.cache_path = path;
  o.system_cache_path = "";  // the repair is the user file's: no system layer serving the kernel
  o.log_level = 1;
  fi_runtime *a;
  FT_REQUIRE(fi_runtime_create(&o, &a) == FI_OK);
  fi_status st;
  FT_REQUIRE(run_small(a, &st) < 1e-2 && st == FI_OK, "%s", fi_last_error());
  fi_runtime_destroy(a);
  sqlite3 *db;
  FT_REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
  static unsigned char junk[8192];
  memset(junk, 0x41, sizeof junk);
  sqlite3_stmt *q;
  FT_REQUIRE(sqlite3_prepare_v2(db, "UPDATE kernels SET binary = ?1, bytes = ?2, checksum = ?3", -1,
                                &q, NULL) == SQLITE_OK);
  sqlite3_bind_blob(q, 1, junk, sizeof junk, SQLITE_STATIC);
  sqlite3_bind_int64(q, 2, sizeof junk);
  sqlite3_bind_int64(q, 3, (sqlite3_int64)XXH3_64bits(junk, sizeof junk));
  FT_CHECK(sqlite3_step(q) == SQLITE_DONE && sqlite3_changes(db) >= 1, "%s", sqlite3_errmsg(db));
  sqlite3_finalize(q);
  sqlite3_close(db);
  fi_runtime *b;
  FT_REQUIRE(fi_runtime_create(&o, &b) == FI_OK);
  double e = run_small(b, &st);
  FT_CHECK(st == FI_OK && e < 1e-2, "after a rejected binary: %s, error %.3g", fi_last_error(), e);
  fi_stats s = {.struct_size = sizeof s};
  FT_CHECK(fi_runtime_stats(b, &s) == FI_OK && s.repairs == 1 && s.compiles == 1,
           "repairs %lld compiles %lld", (long long)s.repairs, (long long)s.compiles);
  fi_runtime_destroy(b);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  FT_CHECK(system(cmd) == 0);
}

/* CUDA cannot be used in a child of a process that initialized it: the
 * runtime must say so with a status, never crash or hang. */
FT_TEST(forked_child_gets_a_clear_error) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  fi_status st;
  FT_REQUIRE(run_small(rt, &st) < 1e-2 && st == FI_OK, "%s", fi_last_error());
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int64_t s0[2] = {4, 64}, sw[1] = {64};
    DLTensor x = g_tensor(0x10000, 0, 1, 2, s0, NULL), w = g_tensor(0x20000, 0, 1, 1, sw, NULL);
    fi_status cs = fi_rmsnorm(rt, &x, &w, 1e-6, &x, NULL);
    fprintf(stderr, "  child: %s: %s\n", fi_status_string(cs), fi_last_error());
    /* The message names the cause: the fork (README, "fork()"). */
    _exit(cs == FI_ERR_NO_DEVICE || cs == FI_ERR_DEVICE ? (strstr(fi_last_error(), "fork()") ? 0 : 2)
                                                        : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  FT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}
