/* fi_bench.c: fi-bench, the GPU benchmarks: the copy bandwidth every figure is set
 * against, the runtime's own costs, and the sections of bench_*.c in one run. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "fi_params.h"

cu_api cu;
CUcontext ctx;
FILE *json;
int quick;
const char *bench_self;
static const char *bench_cache = ":memory:"; /* --cache PATH */

fi_runtime *bench_env_runtime(void) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = bench_cache;
  fi_runtime *rt;
  if (fi_runtime_create(&o, &rt) != FI_OK) {
    fprintf(stderr, "fi-bench: fi_runtime_create: %s\n", fi_last_error());
    exit(1);
  }
  return rt;
}

double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One event pair for the process, made at the first call and kept for the next ones. */
double time_runs(run_fn run, void *ctx, int n, int reps) {
  static CUevent e0, e1;
  if (!e0) {
    CU_CHECK(&cu, cuEventCreate(&e0, 0));
    CU_CHECK(&cu, cuEventCreate(&e1, 0));
  }
  double t[64];
  if (reps > 64) reps = 64;
  for (int r = 0; r < reps; r++) {
    CU_CHECK(&cu, cuEventRecord(e0, NULL));
    for (int k = 0; k < n; k++) run(ctx, r * n + k);
    CU_CHECK(&cu, cuEventRecord(e1, NULL));
    CU_CHECK(&cu, cuEventSynchronize(e1));
    float ms;
    CU_CHECK(&cu, cuEventElapsedTime(&ms, e0, e1));
    t[r] = ms / n;
  }
  return median(t, reps);
}

DLTensor tensor(CUdeviceptr p, int dt, int ndim, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)(uintptr_t)p;
  t.device.device_type = kDLCUDA;
  t.ndim = ndim;
  t.dtype.code = dt == 1 ? kDLBfloat : kDLFloat;
  t.dtype.bits = dt == 2 ? 32 : 16;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

DLTensor bench_workspace(size_t bytes, CUdeviceptr *ws, int64_t shape[1]) {
  CU_CHECK(&cu, cuMemAlloc(ws, bytes ? bytes : 256));
  shape[0] = (int64_t)bytes;
  DLTensor t = tensor(*ws, 1, 1, shape);
  t.dtype = (DLDataType){kDLUInt, 8, 1};
  return t;
}

void bench_sinks_make(bench_sinks *s, int hq) {
  float *h = malloc(sizeof(float) * (size_t)hq);
  if (!h) exit(1);
  for (int i = 0; i < hq; i++) h[i] = 0.5f;
  CU_CHECK(&cu, cuMemAlloc(&s->dev, sizeof(float) * (size_t)hq));
  CU_CHECK(&cu, cuMemcpyHtoD(s->dev, h, sizeof(float) * (size_t)hq));
  free(h);
  s->shape[0] = hq;
  s->t = tensor(s->dev, 1, 1, s->shape);
  s->t.dtype = (DLDataType){kDLFloat, 32, 1};
  fi_attention_extras_init(&s->x);
  s->x.sinks = &s->t;
}
void bench_sinks_free(bench_sinks *s) { CU_CHECK(&cu, cuMemFree(s->dev)); }

const char *dtname(int dt) { return dt == 0 ? "f16" : dt == 1 ? "bf16" : "f32"; }

/* In the order they run. copy always runs first: it is the roofline. */
static const bench_section *const sections[] = {
    &bench_rmsnorm_section, &bench_norms_section, &bench_act_section,  &bench_cascade_section,
    &bench_page_section,    &bench_rope_section,  &bench_tune_section, &bench_decode_section, &bench_single_section, &bench_prefill_section, &bench_mla_section, &bench_sampling_section, &bench_moe_section, &bench_moe_route_section, &bench_tactics_section, &bench_runtime_section,
};
#define NSECTIONS ((int)(sizeof sections / sizeof sections[0]))

static void usage(FILE *f) {
  fprintf(f,
          "usage: fi-bench [--json FILE] [--quick] [--cache PATH] [SECTION...]\n"
          "\n"
          "Measures on GPU 0, in one run:\n"
          "  copy      device-to-device copy bandwidth (cuMemcpyDtoDAsync; bytes read + written);\n"
          "            always measured first, the roofline the other figures are set against\n");
  for (int i = 0; i < NSECTIONS; i++) {
    fprintf(f, "  %-9s ", sections[i]->name);
    for (const char *h = sections[i]->help; *h; h++) {
      fputc(*h, f);
      if (*h == '\n') fputs("            ", f);
    }
    fputs(sections[i]->by_default ? "\n" : " (not by default)\n", f);
  }
  fprintf(f,
          "With no SECTION, every section not marked otherwise. Times are medians over repetitions,\n"
          "taken with CUDA events after warm-up, rotating among input sets larger than the L2 cache.\n"
          "  --json FILE  also write every measurement as one JSON object per line\n"
          "  --quick      fewer repetitions (for a smoke test)\n"
          "  --cache PATH run the sections on this cache file (default: an in-memory cache,\n"
          "               so every kernel is compiled once and no stored tactic is used): a\n"
          "               file that fi-cache tune filled makes the ops use its tactics\n");
}

/* ---------------------------------------------------------------- copy */
static double bench_copy(void) {
  const size_t bytes = (size_t)1 << 30;
  CUdeviceptr a, b;
  CU_CHECK(&cu, cuMemAlloc(&a, bytes));
  CU_CHECK(&cu, cuMemAlloc(&b, bytes));
  CU_CHECK(&cu, cuMemsetD8(a, 1, bytes));
  CUevent e0, e1;
  CU_CHECK(&cu, cuEventCreate(&e0, 0));
  CU_CHECK(&cu, cuEventCreate(&e1, 0));
  for (int i = 0; i < 3; i++) CU_CHECK(&cu, cuMemcpyDtoDAsync(b, a, bytes, NULL));
  int reps = quick ? 5 : 20;
  double t[64];
  for (int i = 0; i < reps; i++) {
    CU_CHECK(&cu, cuEventRecord(e0, NULL));
    CU_CHECK(&cu, cuMemcpyDtoDAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, NULL));
    CU_CHECK(&cu, cuEventRecord(e1, NULL));
    CU_CHECK(&cu, cuEventSynchronize(e1));
    float ms;
    CU_CHECK(&cu, cuEventElapsedTime(&ms, e0, e1));
    t[i] = ms;
  }
  double ms = median(t, reps);
  CU_CHECK(&cu, cuEventDestroy(e0));
  CU_CHECK(&cu, cuEventDestroy(e1));
  double tbs = 2.0 * (double)bytes / (ms * 1e-3) / 1e12;
  printf("copy: %.2f TB/s (1 GiB device-to-device, %.3f ms, bytes read + written)\n", tbs, ms);
  if (json) fprintf(json, "{\"bench\":\"copy\",\"bytes\":%zu,\"ms\":%.5f,\"tbs\":%.4f}\n", bytes, ms, tbs);
  CU_CHECK(&cu, cuMemFree(a));
  CU_CHECK(&cu, cuMemFree(b));
  return tbs;
}

/* ------------------------------------------------------------- runtime */
/* The child of the first-call measurement: the driver and context are set
 * up first (every CUDA program pays that once), then the clock runs over
 * fi_runtime_create and the first fi_rmsnorm, up to the return of its launch. */
static int first_call_child(const char *cache) {
  char err[256];
  if (cu_min_init(&cu, &ctx, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  const int64_t rows = 64, hidden = 4096;
  CUdeviceptr x, w;
  CU_CHECK(&cu, cuMemAlloc(&x, (size_t)(rows * hidden * 2)));
  CU_CHECK(&cu, cuMemAlloc(&w, (size_t)hidden * 2));
  CU_CHECK(&cu, cuMemsetD8(x, 0x3c, (size_t)(rows * hidden * 2)));
  CU_CHECK(&cu, cuMemsetD8(w, 0x3c, (size_t)hidden * 2));
  CU_CHECK(&cu, cuCtxSynchronize());
  int64_t shape[2] = {rows, hidden}, wshape[1] = {hidden};
  DLTensor tx = tensor(x, 1, 2, shape), tw = tensor(w, 1, 1, wshape);
  fi_options o;
  fi_options_init(&o);
  o.cache_path = cache;
  double t0 = now_us();
  fi_runtime *rt;
  fi_status st = fi_runtime_create(&o, &rt);
  double t1 = now_us();
  if (st == FI_OK) st = fi_rmsnorm(rt, &tx, &tw, 1e-6, &tx, NULL);
  double t2 = now_us();
  if (st != FI_OK) {
    fprintf(stderr, "child: %s\n", fi_last_error());
    return 1;
  }
  CU_CHECK(&cu, cuCtxSynchronize());
  fi_admin_stats s;
  fi_admin_stats_get(rt, &s);
  /* A second first call, on a different shape, so a different kernel: the
   * store is open now, so this is lookup + module load + launch alone. */
  const int64_t hidden2 = 2048;
  int64_t shape2[2] = {rows, hidden2}, wshape2[1] = {hidden2};
  DLTensor tx2 = tensor(x, 1, 2, shape2), tw2 = tensor(w, 1, 1, wshape2);
  double t3 = now_us();
  st = fi_rmsnorm(rt, &tx2, &tw2, 1e-6, &tx2, NULL);
  double t4 = now_us();
  if (st != FI_OK) {
    fprintf(stderr, "child: %s\n", fi_last_error());
    return 1;
  }
  CU_CHECK(&cu, cuCtxSynchronize());
  fi_admin_stats_get(rt, &s);
  printf("%.1f %.1f %lld %lld %.1f %.1f %.1f %.1f\n", t1 - t0, t2 - t1, (long long)s.cache_hits,
         (long long)s.compiles, s.store_open_ms * 1e3, s.lookup_ms * 1e3, s.module_load_ms * 1e3,
         t4 - t3);
  fi_runtime_destroy(rt);
  return 0;
}

static int run_child(const char *self, const char *cache, double *create_us, double *call_us,
                     long long *hits, long long *compiles, double br[4]) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    execl(self, self, "--first-call-child", cache, (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  char buf[256] = "";
  ssize_t n = read(fd[0], buf, sizeof buf - 1);
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  buf[n] = 0;
  return sscanf(buf, "%lf %lf %lld %lld %lf %lf %lf %lf", create_us, call_us, hits, compiles,
                &br[0], &br[1], &br[2], &br[3]) == 8
             ? 0
             : -1;
}

static void first_call_batch(const char *self, const char *cache, const char *label) {
  int nchild = quick ? 3 : 11;
  double cr[32], ca[32], tot[32], bo[32], bl[32], bm[32], b2[32];
  int got = 0;
  long long hits = 0, compiles = 0;
  for (int i = 0; i < nchild; i++) {
    double a, b, br[4];
    if (run_child(self, cache, &a, &b, &hits, &compiles, br) == 0) {
      cr[got] = a;
      ca[got] = b;
      tot[got] = a + b;
      bo[got] = br[0];
      bl[got] = br[1];
      bm[got] = br[2];
      b2[got] = br[3];
      got++;
    }
  }
  if (got == 0) {
    fprintf(stderr, "first-call children failed\n");
    exit(1);
  }
  double mcr = median(cr, got), mca = median(ca, got), mt = median(tot, got);
  printf("  fresh process, prewarmed cache, %s: fi_runtime_create %.1f us + first fi_rmsnorm "
         "%.1f us = %.3f ms in the runtime (median of %d; last child: %lld cache hits, %lld "
         "compiles)\n",
         label, mcr, mca, mt / 1e3, got, hits, compiles);
  printf("    of which: opening the cache %.1f us, lookups (2) %.1f us, module loads (2) %.1f us; "
         "a second new kernel's first call %.1f us\n",
         median(bo, got), median(bl, got), median(bm, got), median(b2, got));
  if (json)
    fprintf(json,
            "{\"bench\":\"first_call\",\"journal\":\"%s\",\"create_us\":%.1f,\"call_us\":%.1f,"
            "\"total_ms\":%.4f,\"open_us\":%.1f,\"second_kernel_us\":%.1f}\n",
            label, mcr, mca, mt / 1e3, median(bo, got), median(b2, got));
}

static void bench_runtime(const char *self) {
  char dir[] = "/tmp/fi-bench-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(1);
  }
  char cache[300];
  snprintf(cache, sizeof cache, "%s/kernels.db", dir);

  /* 1. Cold compile: an empty cache, the first call compiles. */
  fi_options o;
  fi_options_init(&o);
  o.cache_path = cache;
  fi_runtime *rt;
  if (fi_runtime_create(&o, &rt) != FI_OK) exit(1);
  const int64_t rows = 64, hidden = 4096;
  CUdeviceptr x, w;
  CU_CHECK(&cu, cuMemAlloc(&x, (size_t)(rows * hidden * 2)));
  CU_CHECK(&cu, cuMemAlloc(&w, (size_t)hidden * 2));
  CU_CHECK(&cu, cuMemsetD8(x, 0x3c, (size_t)(rows * hidden * 2)));
  CU_CHECK(&cu, cuMemsetD8(w, 0x3c, (size_t)hidden * 2));
  int64_t shape[2] = {rows, hidden}, wshape[1] = {hidden};
  DLTensor tx = tensor(x, 1, 2, shape), tw = tensor(w, 1, 1, wshape);
  double t0 = now_us();
  fi_status st = fi_rmsnorm(rt, &tx, &tw, 1e-6, &tx, NULL);
  double cold_ms = (now_us() - t0) / 1e3;
  if (st != FI_OK) {
    fprintf(stderr, "cold call: %s\n", fi_last_error());
    exit(1);
  }
  CU_CHECK(&cu, cuCtxSynchronize());
  fi_admin_stats s;
  fi_admin_stats_get(rt, &s);
  printf("\nruntime costs (bf16 rmsnorm 64 x 4096)\n");
  printf("  cold first call (NVRTC load + compile + store + load): %.1f ms, of which compile %.1f ms\n",
         cold_ms, s.compile_ms);

  /* 2. Fresh processes on the now-prewarmed cache, in both journal modes. */
  {
    int64_t shape2[2] = {rows, 2048}, wshape2[1] = {2048};
    DLTensor a = tensor(x, 1, 2, shape2), b = tensor(w, 1, 1, wshape2);
    if (fi_rmsnorm(rt, &a, &b, 1e-6, &a, NULL) != FI_OK) exit(1);
    fi_runtime_destroy(rt); /* like a process that exits: the cache file is closed */
  }
  first_call_batch(self, cache, "WAL (default)");
  char cache2[320];
  snprintf(cache2, sizeof cache2, "%s/kernels-delete.db", dir);
  setenv("FI_CACHE_JOURNAL", "delete", 1);
  if (fi_runtime_create(&o, &rt) != FI_OK) exit(1);
  {
    /* Prewarm the same two kernels into a rollback-journal file. */
    fi_options o2 = o;
    o2.cache_path = cache2;
    fi_runtime *rt2;
    if (fi_runtime_create(&o2, &rt2) != FI_OK) exit(1);
    int64_t shape2[2] = {rows, 2048}, wshape2[1] = {2048};
    DLTensor a = tensor(x, 1, 2, shape2), b = tensor(w, 1, 1, wshape2);
    if (fi_rmsnorm(rt2, &tx, &tw, 1e-6, &tx, NULL) != FI_OK ||
        fi_rmsnorm(rt2, &a, &b, 1e-6, &a, NULL) != FI_OK)
      exit(1);
    fi_runtime_destroy(rt2);
  }
  first_call_batch(self, cache2, "rollback journal (FI_CACHE_JOURNAL=delete)");
  unsetenv("FI_CACHE_JOURNAL");
  unlink(cache2);

  /* 3. Memo-hit dispatch against a bare cuLaunchKernel of the same function. */
  void *fn;
  unsigned grid[3], block[3], smem;
  if (fi_admin_rmsnorm_kernel(rt, &tx, &tw, 1e-6, &tx, &fn, grid, block, &smem) != FI_OK) {
    fprintf(stderr, "%s\n", fi_last_error());
    exit(1);
  }
  fi_rmsnorm_params p;
  memset(&p, 0, sizeof p);
  p.input = p.out = (void *)(uintptr_t)x;
  p.weight = (void *)(uintptr_t)w;
  p.input_row_stride = p.out_row_stride = hidden;
  p.rows = (int32_t)rows;
  p.hidden = (int32_t)hidden;
  p.eps = 1e-6f;
  void *args[1] = {&p};
  const int batch = 200, reps = quick ? 10 : 60;
  double tr[128], tb[128];
  for (int r = 0; r < reps; r++) {
    /* Alternate the two so clock or queue drift hits both alike. */
    double a = now_us();
    for (int i = 0; i < batch; i++) fi_rmsnorm(rt, &tx, &tw, 1e-6, &tx, NULL);
    tr[r] = (now_us() - a) / batch;
    CU_CHECK(&cu, cuCtxSynchronize());
    a = now_us();
    for (int i = 0; i < batch; i++)
      CU_CHECK(&cu, cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                   smem, NULL, args, NULL));
    tb[r] = (now_us() - a) / batch;
    CU_CHECK(&cu, cuCtxSynchronize());
  }
  double mr = median(tr, reps), mb = median(tb, reps);
  printf("  dispatch: fi_rmsnorm %.3f us per call, bare cuLaunchKernel %.3f us: +%.3f us "
         "(median of %d batches of %d)\n",
         mr, mb, mr - mb, reps, batch);
  if (json) {
    fprintf(json, "{\"bench\":\"cold_compile\",\"ms\":%.2f,\"compile_ms\":%.2f}\n", cold_ms, s.compile_ms);
    fprintf(json, "{\"bench\":\"dispatch\",\"fi_us\":%.4f,\"bare_us\":%.4f,\"extra_us\":%.4f}\n",
            mr, mb, mr - mb);
  }
  fi_runtime_destroy(rt);
  CU_CHECK(&cu, cuMemFree(x));
  CU_CHECK(&cu, cuMemFree(w));
  unlink(cache);
  char side[320];
  snprintf(side, sizeof side, "%s-wal", cache);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", cache);
  unlink(side);
  rmdir(dir);
}

static void run_runtime(fi_runtime *rt, double copy) {
  (void)rt, (void)copy; /* it starts fresh processes, each with its own runtime */
  bench_runtime(bench_self);
}
const bench_section bench_runtime_section = {
    "runtime",
    "cold compile of one kernel, a fresh process's first call on a prewarmed\n"
    "cache, and memo-hit dispatch against a bare cuLaunchKernel",
    1, run_runtime};

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--first-call-child") == 0) return first_call_child(argv[2]);
  int want[NSECTIONS] = {0}, any = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--quick")) {
      quick = 1;
    } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
      /* Never written through a link someone else put at that name. */
      int fd = open(argv[++i], O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
      json = fd >= 0 ? fdopen(fd, "w") : NULL;
      if (!json) {
        if (fd >= 0) close(fd);
        fprintf(stderr, "fi-bench: %s: %s\n", argv[i], strerror(errno));
        return 1;
      }
      /* A line at a time: a run cut off by a timeout keeps every row it measured. */
      setvbuf(json, NULL, _IOLBF, 0);
    } else if (!strcmp(argv[i], "--cache") && i + 1 < argc) {
      bench_cache = argv[++i];
    } else if (!strcmp(argv[i], "copy")) {
      any = 1;
    } else {
      int s = 0;
      while (s < NSECTIONS && strcmp(argv[i], sections[s]->name) != 0) s++;
      if (s == NSECTIONS) {
        fprintf(stderr, "fi-bench: unknown argument '%s'\n", argv[i]);
        usage(stderr);
        return 2;
      }
      want[s] = any = 1;
    }
  }
  if (!any)
    for (int s = 0; s < NSECTIONS; s++) want[s] = sections[s]->by_default;
  char err[256];
  if (cu_min_init(&cu, &ctx, err, sizeof err) != 0) {
    fprintf(stderr, "fi-bench: needs a CUDA GPU: %s\n", err);
    return 1;
  }
  char name[256] = "";
  cu.cuDeviceGetName(name, sizeof name, 0);
  printf("fi-bench %s on %s\n", fi_version(), name);
  double copy = bench_copy(); /* always: the roofline every figure is set against */
  static char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = 0;
  bench_self = self;
  for (int s = 0; s < NSECTIONS; s++) {
    if (!want[s]) continue;
    fi_options o;
    fi_options_init(&o);
    o.cache_path = bench_cache;
    fi_runtime *rt;
    if (fi_runtime_create(&o, &rt) != FI_OK) {
      fprintf(stderr, "fi-bench: fi_runtime_create: %s\n", fi_last_error());
      return 1;
    }
    sections[s]->run(rt, copy);
    fi_runtime_destroy(rt);
  }
  if (json) fclose(json);
  return 0;
}
