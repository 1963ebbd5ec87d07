/* test_api.c: the public API on a machine with no GPU: versions and status names,
 * options, argument validation of fi_rmsnorm and the admin API, the thread-local
 * error message, and what libfi_runtime.so exports and links. */
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fi_admin.h"
#include "fi_runtime.h"
#include "ft.h"
#include "test_args_util.h"
#include "ops_norm.h"
#include "rt_internal.h"

/* ---- helpers ---- */

/* Fake device addresses: validation must refuse bad arguments before any
 * driver sees them, so the pointers are never dereferenced. The three
 * buffers are 16 MiB apart, more than any tensor here spans. */
#define IN_ADDR ((void *)0x1000000)
#define W_ADDR ((void *)0x2000000)
#define OUT_ADDR ((void *)0x3000000)

typedef struct tens {
  DLTensor t;
  int64_t shape[3];
  int64_t strides[3];
} tens;

/* A compact tensor of ndim dims (shape s0[, s1]) of dtype (code, bits) on (devtype, 0). */
static void tens_make(tens *x, void *data, int devtype, DLDataTypeCode code, int bits, int ndim,
                      int64_t s0, int64_t s1) {
  memset(x, 0, sizeof *x);
  x->shape[0] = s0;
  x->shape[1] = s1;
  x->shape[2] = 2;
  x->t.data = data;
  x->t.device.device_type = (DLDeviceType)devtype;
  x->t.device.device_id = 0;
  x->t.ndim = ndim;
  x->t.dtype.code = (uint8_t)code;
  x->t.dtype.bits = (uint8_t)bits;
  x->t.dtype.lanes = 1;
  x->t.shape = x->shape;
  x->t.strides = NULL;
  x->t.byte_offset = 0;
}

/* Valid arguments: input and out [rows, hidden], weight [hidden], all of one
 * dtype on device 0 of devtype, in three separate buffers. */
typedef struct call {
  tens in, w, out;
  double eps;
} call;

static void call_make(call *c, int devtype, DLDataTypeCode code, int bits, int64_t rows,
                      int64_t hidden) {
  tens_make(&c->in, IN_ADDR, devtype, code, bits, 2, rows, hidden);
  tens_make(&c->w, W_ADDR, devtype, code, bits, 1, hidden, 0);
  tens_make(&c->out, OUT_ADDR, devtype, code, bits, 2, rows, hidden);
  c->eps = 1e-6;
}

/* The tensors of c point into c itself: a copy must re-point them. */
static void call_copy(call *dst, const call *src) {
  *dst = *src;
  dst->in.t.shape = dst->in.shape;
  dst->w.t.shape = dst->w.shape;
  dst->out.t.shape = dst->out.shape;
  if (src->in.t.strides) dst->in.t.strides = dst->in.strides;
  if (src->w.t.strides) dst->w.t.strides = dst->w.strides;
  if (src->out.t.strides) dst->out.t.strides = dst->out.strides;
}

/* fi_rmsnorm(rt, c) must fail with INVALID_ARGUMENT naming every one of names. */
#define EXPECT_INVALID(rt, c, what, names)                                                    \
  do {                                                                                        \
    poison_error();                                                                           \
    fi_status st_ = fi_rmsnorm((rt), &(c)->in.t, &(c)->w.t, (c)->eps, &(c)->out.t, NULL);     \
    FT_CHECK(st_ == FI_ERR_INVALID_ARGUMENT, "%s: got %s (%s)", what, fi_status_string(st_),  \
             fi_last_error());                                                                \
    FT_CHECK(names_all(fi_last_error(), names), "%s: message does not name the argument: %s", \
             what, fi_last_error());                                                          \
  } while (0)

/* ---- helper mode: calls that may take the process down run in a fresh
 * process (this program re-executed with FI_TEST_API_HELPER set), which
 * prints "<status> <message>" on stdout. ---- */

static int helper_call(const char *mode, const char *arg) {
  fi_runtime *rt = mem_runtime();
  if (!rt) return 2;
  fi_status st = FI_ERR_INTERNAL;
  if (strcmp(mode, "prewarm") == 0) {
    fi_prewarm_result r;
    st = fi_admin_prewarm(rt, "rmsnorm", 0, arg, &r, NULL);
  } else if (strcmp(mode, "stride") == 0) {
    /* input's row stride (elements) is arg; 4 rows of 4096 float32. */
    call c;
    call_make(&c, kDLCUDA, kDLFloat, 32, 4, 4096);
    c.in.t.strides = c.in.strides;
    c.in.strides[0] = strtoll(arg, NULL, 0), c.in.strides[1] = 1;
    st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
  } else if (strcmp(mode, "shape") == 0) {
    /* rows = hidden = arg, float32. */
    int64_t n = strtoll(arg, NULL, 0);
    call c;
    call_make(&c, kDLCUDA, kDLFloat, 32, n, n);
    st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
  } else {
    return 3;
  }
  printf("%d %s\n", (int)st, fi_last_error());
  fflush(stdout);
  fi_runtime_destroy(rt);
  return 0;
}

__attribute__((constructor)) static void helper_mode(void) {
  /* No test here needs a cache file: runtimes made with default options
   * must not touch the caller's ~/.cache. */
  setenv("FI_CACHE_PATH", ":memory:", 1);
  unsetenv("FI_CACHE_SYSTEM_PATH");
  unsetenv("FI_LOG_LEVEL");
  const char *mode = getenv("FI_TEST_API_HELPER");
  if (!mode) return;
  _exit(helper_call(mode, getenv("FI_TEST_API_ARG")));
}

/* Runs helper mode in a new process; *st and msg get what it printed.
 * Returns its wait status, or -1. */
static int run_helper(const char *mode, const char *arg, fi_status *st, char *msg, size_t msglen) {
  int fd[2];
  *st = (fi_status)1;
  msg[0] = 0;
  if (pipe(fd) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    setenv("FI_TEST_API_HELPER", mode, 1);
    setenv("FI_TEST_API_ARG", arg, 1);
    execl("/proc/self/exe", "test_api", "__helper__", (char *)NULL);
    _exit(98);
  }
  close(fd[1]);
  char buf[4096];
  size_t n = 0;
  ssize_t got;
  while (n < sizeof buf - 1 && (got = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)got;
  buf[n] = 0;
  close(fd[0]);
  int status;
  if (waitpid(pid, &status, 0) != pid) return -1;
  int code = 0, off = 0;
  if (sscanf(buf, "%d %n", &code, &off) >= 1) {
    *st = (fi_status)code;
    snprintf(msg, msglen, "%s", buf + off);
    char *nl = strrchr(msg, '\n');
    if (nl) *nl = 0;
  }
  return status;
}

static const char *how_it_ended(int status, char *buf, size_t n) {
  if (status == -1)
    snprintf(buf, n, "could not run");
  else if (WIFSIGNALED(status))
    snprintf(buf, n, "killed by signal %d", WTERMSIG(status));
  else
    snprintf(buf, n, "exit code %d", WEXITSTATUS(status));
  return buf;
}

/* ---- versions, status names, options ---- */

FT_TEST(version_is_major_minor_patch) {
  const char *v = fi_version();
  FT_REQUIRE(v != NULL && v[0], "empty version");
  const char *p = v;
  for (int part = 0; part < 3; part++) {
    FT_REQUIRE(isdigit((unsigned char)*p), "'%s': part %d is not a number", v, part);
    while (isdigit((unsigned char)*p)) p++;
    if (part < 2) {
      FT_REQUIRE(*p == '.', "'%s': no '.' after part %d", v, part);
      p++;
    }
  }
  FT_CHECK(*p == 0, "'%s': trailing text", v);
  FT_CHECK(strcmp(v, FI_VERSION_STRING) == 0, "'%s' vs build's '%s'", v, FI_VERSION_STRING);
}

FT_TEST(status_strings_distinct_and_named) {
  const fi_status all[] = {FI_OK,           FI_ERR_INVALID_ARGUMENT, FI_ERR_UNSUPPORTED,
                           FI_ERR_NO_DEVICE, FI_ERR_COMPILE,         FI_ERR_CACHE,
                           FI_ERR_DEVICE,   FI_ERR_OUT_OF_MEMORY,    FI_ERR_INTERNAL};
  const int n = (int)(sizeof all / sizeof all[0]);
  FT_CHECK(FI_OK == 0, "FI_OK is %d", (int)FI_OK);
  for (int i = 0; i < n; i++) {
    const char *s = fi_status_string(all[i]);
    FT_REQUIRE(s != NULL, "status %d: NULL", (int)all[i]);
    FT_CHECK(strncmp(s, "FI_", 3) == 0, "status %d: '%s'", (int)all[i], s);
    for (int j = 0; j < i; j++)
      FT_CHECK(strcmp(s, fi_status_string(all[j])) != 0, "%d and %d both '%s'", (int)all[i],
               (int)all[j], s);
  }
  FT_CHECK(strcmp(fi_status_string(FI_ERR_INVALID_ARGUMENT), "FI_ERR_INVALID_ARGUMENT") == 0);
  FT_CHECK(strcmp(fi_status_string(FI_OK), "FI_OK") == 0);
  const int unknown[] = {1, 42, -9, -1000, INT32_MIN};
  for (int i = 0; i < 5; i++) {
    const char *s = fi_status_string((fi_status)unknown[i]);
    FT_CHECK(s != NULL && s[0], "unknown status %d: NULL or empty", unknown[i]);
    for (int j = 0; s && j < n; j++)
      FT_CHECK(strcmp(s, fi_status_string(all[j])) != 0, "unknown %d reads as '%s'", unknown[i],
               s);
  }
}

FT_TEST(options_init_defaults) {
  fi_options o;
  memset(&o, 0xab, sizeof o);
  fi_options_init(&o);
  FT_CHECK(o.struct_size == sizeof(fi_options), "struct_size %zu", o.struct_size);
  FT_CHECK(o.log_level == -1, "log_level %d", o.log_level);
  FT_CHECK(o.cache_path == NULL, "cache_path not NULL");
  FT_CHECK(o.system_cache_path == NULL, "system_cache_path not NULL");
  fi_options_init(NULL); /* harmless */
}

FT_TEST(runtime_create_and_destroy) {
  fi_runtime *rt = (fi_runtime *)0x1;
  fi_status st = fi_runtime_create(NULL, &rt);
  FT_REQUIRE(st == FI_OK, "create(NULL opts): %s %s", fi_status_string(st), fi_last_error());
  FT_CHECK(rt != NULL && rt != (fi_runtime *)0x1);
  fi_runtime_destroy(rt);
  fi_runtime_destroy(NULL); /* harmless */

  poison_error();
  FT_CHECK(fi_runtime_create(NULL, NULL) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(strstr(fi_last_error(), "out") != NULL, "%s", fi_last_error());

  fi_options o;
  const size_t bad[] = {0, sizeof(fi_options) + 1, sizeof(fi_options) * 100, (size_t)-1};
  for (int i = 0; i < 4; i++) {
    fi_options_init(&o);
    o.struct_size = bad[i];
    rt = (fi_runtime *)0x1;
    poison_error();
    st = fi_runtime_create(&o, &rt);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "struct_size %zu: %s", bad[i], fi_status_string(st));
    FT_CHECK(strstr(fi_last_error(), "struct_size") != NULL, "struct_size %zu: '%s'", bad[i],
             fi_last_error());
    FT_CHECK(rt == NULL, "struct_size %zu: *out not cleared", bad[i]);
    if (st == FI_OK) fi_runtime_destroy(rt);
  }

  /* An older caller's smaller struct: the fields it has are read, later ones default. */
  fi_options_init(&o);
  o.cache_path = ":memory:";
  o.system_cache_path = "/nonexistent/should/not/be/read";
  o.log_level = 4;
  o.struct_size = offsetof(fi_options, system_cache_path);
  st = fi_runtime_create(&o, &rt);
  FT_REQUIRE(st == FI_OK, "old struct_size: %s %s", fi_status_string(st), fi_last_error());
  FT_CHECK(strcmp(rt->cache_path, ":memory:") == 0, "cache_path '%s'", rt->cache_path);
  FT_CHECK(rt->log_level != 4, "log_level read beyond struct_size");
  fi_runtime_destroy(rt);

  /* An explicit level is used as given. */
  fi_options_init(&o);
  o.cache_path = ":memory:";
  o.log_level = 3;
  FT_REQUIRE(fi_runtime_create(&o, &rt) == FI_OK);
  FT_CHECK(rt->log_level == 3, "log_level %d", rt->log_level);
  fi_runtime_destroy(rt);
}

/* ---- fi_rmsnorm argument validation ---- */

FT_TEST(rmsnorm_null_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);

  poison_error();
  fi_status st = fi_rmsnorm(NULL, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "rt NULL: %s", fi_status_string(st));
  FT_CHECK(strstr(fi_last_error(), "rt") != NULL, "rt NULL: %s", fi_last_error());

  poison_error();
  st = fi_rmsnorm(rt, NULL, &c.w.t, c.eps, &c.out.t, NULL);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "input"), "input NULL: %s %s",
           fi_status_string(st), fi_last_error());
  poison_error();
  st = fi_rmsnorm(rt, &c.in.t, NULL, c.eps, &c.out.t, NULL);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "weight"),
           "weight NULL: %s %s", fi_status_string(st), fi_last_error());
  poison_error();
  st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, NULL, NULL);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "out"), "out NULL: %s %s",
           fi_status_string(st), fi_last_error());

  call d;
  call_copy(&d, &c);
  d.in.t.data = NULL;
  EXPECT_INVALID(rt, &d, "input data NULL", NAMES("input", "data"));
  call_copy(&d, &c);
  d.w.t.data = NULL;
  EXPECT_INVALID(rt, &d, "weight data NULL", NAMES("weight", "data"));
  call_copy(&d, &c);
  d.out.t.data = NULL;
  EXPECT_INVALID(rt, &d, "out data NULL", NAMES("out", "data"));
  call_copy(&d, &c);
  d.in.t.shape = NULL;
  EXPECT_INVALID(rt, &d, "input shape NULL", NAMES("input", "shape"));
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_device_type_and_id) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);

  call_copy(&d, &c);
  d.in.t.device.device_type = kDLCPU;
  EXPECT_INVALID(rt, &d, "input on CPU", NAMES("input", "kDLCPU"));
  call_copy(&d, &c);
  d.in.t.device.device_type = kDLCUDAHost;
  EXPECT_INVALID(rt, &d, "input kDLCUDAHost", NAMES("input", "kDLCUDAHost"));
  call_copy(&d, &c);
  d.w.t.device.device_type = kDLCPU;
  EXPECT_INVALID(rt, &d, "weight on CPU", NAMES("weight", "kDLCPU"));
  call_copy(&d, &c);
  d.out.t.device.device_type = kDLCUDAHost;
  EXPECT_INVALID(rt, &d, "out kDLCUDAHost", NAMES("out", "kDLCUDAHost"));
  /* All three on the CPU: the first argument is named. */
  call_make(&d, kDLCPU, kDLBfloat, 16, 4, 4096);
  EXPECT_INVALID(rt, &d, "all on CPU", NAMES("input"));

  call_copy(&d, &c);
  d.w.t.device.device_id = 1;
  EXPECT_INVALID(rt, &d, "weight on device 1", NAMES("weight", "input"));
  call_copy(&d, &c);
  d.out.t.device.device_id = 1;
  EXPECT_INVALID(rt, &d, "out on device 1", NAMES("out", "input"));
  call_copy(&d, &c);
  d.w.t.device.device_type = kDLROCM;
  EXPECT_INVALID(rt, &d, "weight on ROCm, input on CUDA", NAMES("weight"));
  call_copy(&d, &c);
  d.in.t.device.device_id = -1;
  EXPECT_INVALID(rt, &d, "input device_id -1", NAMES("input", "device_id"));
  call_copy(&d, &c);
  d.in.t.device.device_id = d.w.t.device.device_id = d.out.t.device.device_id = 1 << 20;
  EXPECT_INVALID(rt, &d, "device_id 2^20", NAMES("input", "device_id"));
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_ndim_and_dtype) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLFloat, 16, 4, 4096);

  call_copy(&d, &c);
  d.in.t.ndim = 3;
  EXPECT_INVALID(rt, &d, "input 3-D", NAMES("input", "dimensions"));
  call_copy(&d, &c);
  d.in.t.ndim = 1;
  EXPECT_INVALID(rt, &d, "input 1-D", NAMES("input", "dimensions"));
  call_copy(&d, &c);
  d.w.t.ndim = 2;
  EXPECT_INVALID(rt, &d, "weight 2-D", NAMES("weight", "dimensions"));
  call_copy(&d, &c);
  d.out.t.ndim = 3;
  EXPECT_INVALID(rt, &d, "out 3-D", NAMES("out", "dimensions"));

  call_make(&d, kDLCUDA, kDLFloat, 64, 4, 4096);
  EXPECT_INVALID(rt, &d, "float64", NAMES("input", "dtype", "float64"));
  call_make(&d, kDLCUDA, kDLInt, 32, 4, 4096);
  EXPECT_INVALID(rt, &d, "int32", NAMES("input", "dtype", "int32"));
  call_make(&d, kDLCUDA, kDLFloat, 16, 4, 4096);
  d.in.t.dtype.lanes = d.w.t.dtype.lanes = d.out.t.dtype.lanes = 2;
  EXPECT_INVALID(rt, &d, "float16 x2 lanes", NAMES("input", "dtype", "float16x2"));
  call_copy(&d, &c);
  d.w.t.dtype.code = kDLBfloat;
  EXPECT_INVALID(rt, &d, "weight bf16, input f16", NAMES("weight", "bfloat16", "float16"));
  call_copy(&d, &c);
  d.out.t.dtype.bits = 32;
  EXPECT_INVALID(rt, &d, "out f32, input f16", NAMES("out", "float32", "float16"));
  call_copy(&d, &c);
  d.out.t.dtype.lanes = 4;
  EXPECT_INVALID(rt, &d, "out f16 x4", NAMES("out"));
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_shapes_and_strides) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);

  call_copy(&d, &c);
  d.w.shape[0] = 4095;
  EXPECT_INVALID(rt, &d, "weight length", NAMES("weight", "4095"));
  call_copy(&d, &c);
  d.out.shape[0] = 3;
  EXPECT_INVALID(rt, &d, "out rows", NAMES("out"));
  call_copy(&d, &c);
  d.out.shape[1] = 4095;
  EXPECT_INVALID(rt, &d, "out cols", NAMES("out"));
  call_make(&d, kDLCUDA, kDLBfloat, 16, 4, 0);
  EXPECT_INVALID(rt, &d, "hidden 0", NAMES("input", "hidden"));
  call_copy(&d, &c);
  d.in.shape[0] = -1;
  EXPECT_INVALID(rt, &d, "negative rows", NAMES("input", "negative"));
  call_copy(&d, &c);
  d.w.shape[0] = -4096;
  EXPECT_INVALID(rt, &d, "negative weight length", NAMES("weight", "negative"));
  call_copy(&d, &c);
  d.in.shape[1] = (int64_t)1 << 32;
  d.w.shape[0] = d.out.shape[1] = d.in.shape[1];
  EXPECT_INVALID(rt, &d, "hidden 2^32", NAMES("input"));

  /* Column stride 2 (every other element of a wider tensor). */
  call_copy(&d, &c);
  d.in.t.strides = d.in.strides;
  d.in.strides[0] = 8192, d.in.strides[1] = 2;
  EXPECT_INVALID(rt, &d, "input column stride 2", NAMES("input", "stride"));
  call_copy(&d, &c);
  d.out.t.strides = d.out.strides;
  d.out.strides[0] = 8192, d.out.strides[1] = 2;
  EXPECT_INVALID(rt, &d, "out column stride 2", NAMES("out", "stride"));
  call_copy(&d, &c);
  d.w.t.strides = d.w.strides;
  d.w.strides[0] = 2;
  EXPECT_INVALID(rt, &d, "weight stride 2", NAMES("weight", "stride"));
  /* Rows that overlap. */
  call_copy(&d, &c);
  d.in.t.strides = d.in.strides;
  d.in.strides[0] = 2048, d.in.strides[1] = 1;
  EXPECT_INVALID(rt, &d, "input row stride < hidden", NAMES("input", "row stride"));
  call_copy(&d, &c);
  d.out.t.strides = d.out.strides;
  d.out.strides[0] = 0, d.out.strides[1] = 1;
  EXPECT_INVALID(rt, &d, "out row stride 0", NAMES("out", "row stride"));
  call_copy(&d, &c);
  d.in.t.strides = d.in.strides;
  d.in.strides[0] = -4096, d.in.strides[1] = 1;
  EXPECT_INVALID(rt, &d, "negative row stride", NAMES("input", "stride"));
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_eps_and_overlap) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);
  const double bad_eps[] = {__builtin_nan(""), -1.0, __builtin_inf(), -__builtin_inf(), -1e-30};
  for (int i = 0; i < 5; i++) {
    call_copy(&d, &c);
    d.eps = bad_eps[i];
    char what[64];
    snprintf(what, sizeof what, "eps %g", bad_eps[i]);
    EXPECT_INVALID(rt, &d, what, NAMES("eps"));
  }

  /* out is input shifted by one row: a block would overwrite a row another
   * block has not read yet. */
  call_copy(&d, &c);
  d.out.t.data = d.in.t.data;
  d.out.t.byte_offset = 4096 * 2;
  EXPECT_INVALID(rt, &d, "out = input + 1 row", NAMES("out", "input", "overlap"));
  /* ... and the other way round. */
  call_copy(&d, &c);
  d.in.t.data = d.out.t.data;
  d.in.t.byte_offset = 4096 * 2;
  EXPECT_INVALID(rt, &d, "input = out + 1 row", NAMES("out", "input", "overlap"));
  /* Same start, different row stride. */
  call_copy(&d, &c);
  d.out.t.data = d.in.t.data;
  d.out.t.strides = d.out.strides;
  d.out.strides[0] = 8192, d.out.strides[1] = 1;
  EXPECT_INVALID(rt, &d, "aliased, different row stride", NAMES("out", "input"));
  fi_runtime_destroy(rt);
}

/* Strides and shapes that no memory could hold are invalid arguments, and
 * checking them must not overflow: rt_extent_bytes computes
 * (shape - 1) * stride in int64_t, which UBSan (the test-asan build) stops
 * on, and which in a plain build wraps and lets the call through. In a
 * separate process, since UBSan ends the one it finds it in. */
FT_TEST(rmsnorm_huge_stride_rejected_without_overflow) {
  const char *strides[] = {"0x4000000000000000", "0x2000000000000000", "0x7fffffffffffffff"};
  for (int i = 0; i < 3; i++) {
    fi_status st;
    char msg[2048], how[64];
    int status = run_helper("stride", strides[i], &st, msg, sizeof msg);
    FT_CHECK(status == 0, "row stride %s: helper %s (%s)", strides[i],
             how_it_ended(status, how, sizeof how), msg);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(msg, "input"), "row stride %s: %s: %s",
             strides[i], fi_status_string(st), msg);
  }
  /* [2^31-1, 2^31-1] float32: 16 EiB, past int64_t in bytes. */
  fi_status st;
  char msg[2048], how[64];
  int status = run_helper("shape", "0x7fffffff", &st, msg, sizeof msg);
  FT_CHECK(status == 0, "shape 2^31-1: helper %s (%s)", how_it_ended(status, how, sizeof how), msg);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && !strstr(msg, "overlap"),
           "shape 2^31-1: %s: %s (separate buffers reported as overlapping)", fi_status_string(st),
           msg);
}

/* out overwriting the weight is the same hazard as out partly overlapping
 * input: a block writes its row while other blocks still read the weight. */
FT_TEST(rmsnorm_out_overlapping_weight) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);
  /* Control: the weight inside input (both only read) is fine. */
  call_copy(&d, &c);
  d.w.t.data = d.in.t.data;
  d.w.t.byte_offset = 4096 * 2;
  fi_status st = fi_rmsnorm(rt, &d.in.t, &d.w.t, d.eps, &d.out.t, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "weight inside input: %s: %s", fi_status_string(st),
           fi_last_error());
  /* The weight is row 1 of out. */
  call_copy(&d, &c);
  d.w.t.data = d.out.t.data;
  d.w.t.byte_offset = 4096 * 2;
  EXPECT_INVALID(rt, &d, "weight inside out", NAMES("weight", "out"));
  /* In place, and the weight is row 3 of the tensor being normalized. */
  call_copy(&d, &c);
  d.out.t.data = d.in.t.data;
  d.w.t.data = d.in.t.data;
  d.w.t.byte_offset = 3 * 4096 * 2;
  EXPECT_INVALID(rt, &d, "weight inside in-place out", NAMES("weight", "out"));
  fi_runtime_destroy(rt);
}

/* ---- valid arguments on a machine with no GPU ---- */

FT_TEST(rmsnorm_valid_arguments_no_cuda_device) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c, d;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);
  for (int rep = 0; rep < 2; rep++) {
    poison_error();
    fi_status st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
    FT_CHECK(st == FI_ERR_NO_DEVICE, "rep %d: %s: %s", rep, fi_status_string(st), fi_last_error());
    FT_CHECK(strstr(fi_last_error(), "CUDA") != NULL, "rep %d: %s", rep, fi_last_error());
    FT_CHECK(strstr(fi_last_error(), "libcuda") != NULL, "rep %d: %s", rep, fi_last_error());
  }
  /* Every dtype, in place, and strided rows reach the device layer too. */
  const int codes[3] = {kDLFloat, kDLBfloat, kDLFloat}, bits[3] = {16, 16, 32};
  for (int i = 0; i < 3; i++) {
    call_make(&d, kDLCUDA, (DLDataTypeCode)codes[i], bits[i], 7, 4099);
    d.out.t.data = d.in.t.data; /* in place */
    fi_status st = fi_rmsnorm(rt, &d.in.t, &d.w.t, 0.0, &d.out.t, (void *)0x1234);
    FT_CHECK(st == FI_ERR_NO_DEVICE, "dtype %d/%d in place: %s: %s", codes[i], bits[i],
             fi_status_string(st), fi_last_error());
  }
  call_copy(&d, &c);
  d.in.t.strides = d.in.strides;
  d.in.strides[0] = 3 * 4096, d.in.strides[1] = 1;
  fi_status st = fi_rmsnorm(rt, &d.in.t, &d.w.t, d.eps, &d.out.t, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "strided rows: %s: %s", fi_status_string(st), fi_last_error());
  /* One row may have any row stride. */
  call_make(&d, kDLCUDA, kDLBfloat, 16, 1, 4096);
  d.in.t.strides = d.in.strides;
  d.in.strides[0] = 1, d.in.strides[1] = 1;
  st = fi_rmsnorm(rt, &d.in.t, &d.w.t, d.eps, &d.out.t, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "1 row: %s: %s", fi_status_string(st), fi_last_error());

  /* The admin entry that shares the checks. */
  void *fn = NULL;
  unsigned grid[3], block[3], smem;
  st = fi_admin_rmsnorm_kernel(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, &fn, grid, block, &smem);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "rmsnorm_kernel: %s: %s", fi_status_string(st),
           fi_last_error());
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_valid_arguments_no_rocm_device) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  call_make(&c, kDLROCM, kDLFloat, 16, 4, 4096);
  for (int rep = 0; rep < 2; rep++) {
    poison_error();
    fi_status st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
    FT_CHECK(st == FI_ERR_NO_DEVICE, "rep %d: %s: %s", rep, fi_status_string(st), fi_last_error());
    FT_CHECK(strstr(fi_last_error(), "hip") != NULL || strstr(fi_last_error(), "HIP") != NULL,
             "rep %d: %s", rep, fi_last_error());
  }
  /* Where libamdhip64 is installed (Debian's 5.2 here) it loads, and hipInit
   * is what fails: there is no AMD GPU. */
  void *hip = dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_NOLOAD);
  if (!hip) hip = dlopen("libamdhip64.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (hip) {
    FT_CHECK(strstr(fi_last_error(), "hipInit") != NULL, "libamdhip64 loaded: %s", fi_last_error());
    dlclose(hip);
  } else {
    fprintf(stderr, "  libamdhip64 not installed: %s\n", fi_last_error());
  }
  /* A failed HIP does not spoil CUDA, nor the other way round. */
  call d;
  call_make(&d, kDLCUDA, kDLFloat, 16, 4, 4096);
  fi_status st = fi_rmsnorm(rt, &d.in.t, &d.w.t, d.eps, &d.out.t, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE && strstr(fi_last_error(), "CUDA"), "%s: %s",
           fi_status_string(st), fi_last_error());
  fi_runtime_destroy(rt);
}

FT_TEST(rmsnorm_zero_tokens_is_ok) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  const int types[2] = {kDLCUDA, kDLROCM};
  for (int i = 0; i < 2; i++) {
    call c;
    call_make(&c, types[i], kDLBfloat, 16, 0, 4096);
    fi_status st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
    FT_CHECK(st == FI_OK, "device type %d: %s: %s", types[i], fi_status_string(st),
             fi_last_error());
    /* 0 tokens still validates the rest. */
    c.w.shape[0] = 17;
    st = fi_rmsnorm(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "0 tokens, bad weight: %s", fi_status_string(st));
    c.w.shape[0] = 4096;
    st = fi_rmsnorm(rt, &c.in.t, &c.w.t, -1.0, &c.out.t, NULL);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "0 tokens, eps -1: %s", fi_status_string(st));
  }
  /* Nothing was launched, so no device layer was even loaded. */
  for (int i = 0; i < rt_device_count(); i++)
    FT_CHECK(rt->dev[i].loaded == 0, "backend %s touched: %d", rt_device_at(i)->name, rt->dev[i].loaded);
  fi_runtime_destroy(rt);
}

/* ---- fi_last_error ---- */

typedef struct err_thread {
  fi_runtime *rt;
  pthread_barrier_t *bar;
  int which; /* 0: eps NaN, 1: weight length */
  int bad, initial_not_empty;
  char seen[256];
} err_thread;

static void *err_worker(void *arg) {
  err_thread *e = arg;
  e->initial_not_empty = fi_last_error()[0] != 0;
  call c;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);
  if (e->which == 0)
    c.eps = __builtin_nan("");
  else
    c.w.shape[0] = 1234;
  pthread_barrier_wait(e->bar);
  for (int i = 0; i < 20000; i++) {
    fi_status st = fi_rmsnorm(e->rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
    const char *m = fi_last_error();
    int ok = st == FI_ERR_INVALID_ARGUMENT &&
             (e->which == 0 ? strstr(m, "eps") && !strstr(m, "1234")
                            : strstr(m, "1234") && !strstr(m, "eps"));
    if (!ok && !e->bad++) snprintf(e->seen, sizeof e->seen, "%s", m);
  }
  return NULL;
}

FT_TEST(last_error_is_thread_local) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  poison_error();
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  err_thread e[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    memset(&e[i], 0, sizeof e[i]);
    e[i].rt = rt, e[i].bar = &bar, e[i].which = i;
    FT_REQUIRE(pthread_create(&t[i], NULL, err_worker, &e[i]) == 0);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  for (int i = 0; i < 2; i++) {
    FT_CHECK(!e[i].initial_not_empty, "thread %d: a new thread's message is not empty", i);
    FT_CHECK(e[i].bad == 0, "thread %d: %d wrong messages, first: %s", i, e[i].bad, e[i].seen);
  }
  /* The main thread's message was not touched by either. */
  FT_CHECK(strcmp(fi_last_error(), "(poison: no call failed)") == 0, "main thread: %s",
           fi_last_error());
  fi_runtime_destroy(rt);
}

FT_TEST(last_error_kept_by_successful_calls) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);
  FT_REQUIRE(fi_rmsnorm(rt, &c.in.t, &c.w.t, -3.0, &c.out.t, NULL) == FI_ERR_INVALID_ARGUMENT);
  char before[512];
  snprintf(before, sizeof before, "%s", fi_last_error());
  FT_REQUIRE(strstr(before, "eps") != NULL, "%s", before);

  c.in.shape[0] = c.out.shape[0] = 0;
  FT_CHECK(fi_rmsnorm(rt, &c.in.t, &c.w.t, 1e-5, &c.out.t, NULL) == FI_OK);
  FT_CHECK(strcmp(fi_last_error(), before) == 0, "after fi_rmsnorm OK: '%s'", fi_last_error());
  fi_runtime *rt2 = mem_runtime();
  FT_CHECK(rt2 != NULL);
  fi_runtime_destroy(rt2);
  FT_CHECK(strcmp(fi_last_error(), before) == 0, "after create OK: '%s'", fi_last_error());
  char key[256];
  FT_CHECK(fi_admin_config_key("rmsnorm", 0, key, sizeof key) == FI_OK);
  fi_admin_stats s;
  FT_CHECK(fi_admin_stats_get(rt, &s) == FI_OK);
  FT_CHECK(strcmp(fi_last_error(), before) == 0, "after admin calls OK: '%s'", fi_last_error());
  fi_runtime_destroy(rt);
}

/* ---- the admin API's arguments ---- */

FT_TEST(admin_registry_arguments) {
  int nops = fi_admin_op_count();
  FT_REQUIRE(nops >= 1, "%d ops", nops);
  FT_CHECK(fi_admin_op_name(-1) == NULL);
  FT_CHECK(fi_admin_op_name(nops) == NULL);
  FT_CHECK(fi_admin_op_name(1 << 30) == NULL);
  int found = 0;
  for (int i = 0; i < nops; i++) {
    const char *n = fi_admin_op_name(i);
    FT_REQUIRE(n != NULL && n[0], "op %d", i);
    found |= strcmp(n, "rmsnorm") == 0;
    FT_CHECK(fi_admin_config_count(n) > 0, "%s: %d configurations", n, fi_admin_config_count(n));
  }
  FT_CHECK(found, "no rmsnorm op");
  FT_CHECK(fi_admin_config_count("nope") == -1);
  FT_CHECK(fi_admin_config_count(NULL) == -1);
  FT_CHECK(fi_admin_config_count("") == -1);
  FT_CHECK(fi_admin_config_count("RMSNORM") == -1);

  char buf[512];
  int n = fi_admin_config_count("rmsnorm");
  FT_CHECK(fi_admin_config_key("rmsnorm", 0, buf, sizeof buf) == FI_OK, "%s", fi_last_error());
  FT_CHECK(strncmp(buf, "op=rmsnorm;", 11) == 0, "%s", buf);
  FT_CHECK(fi_admin_config_key("rmsnorm", n - 1, buf, sizeof buf) == FI_OK, "%s", fi_last_error());
  struct {
    const char *op;
    int idx;
    char *buf;
    size_t len;
    const char *name;
  } bad[] = {
      {"nope", 0, buf, sizeof buf, "op"},   {NULL, 0, buf, sizeof buf, "op"},
      {"rmsnorm", -1, buf, sizeof buf, "idx"}, {"rmsnorm", n, buf, sizeof buf, "idx"},
      {"rmsnorm", 0, NULL, 64, "buf"},      {"rmsnorm", 0, buf, 8, "buflen"},
      {"rmsnorm", 0, buf, 0, "buflen"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    poison_error();
    fi_status st = fi_admin_config_key(bad[i].op, bad[i].idx, bad[i].buf, bad[i].len);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "config_key case %zu: %s", i, fi_status_string(st));
    FT_CHECK(strstr(fi_last_error(), bad[i].name) != NULL, "config_key case %zu: %s", i,
             fi_last_error());
  }
}

static const char *const bad_archs[] = {"sm_1",  "gfx",    "",      "sm_90; rm -rf /",
                                        "sm_",   "sm_69",  "sm_9",  "sm_9000",
                                        "SM_90", " sm_90", "sm_90 ", "sm_90b",
                                        "gfx90", "gfx90a:", "gfx90a:xnack", "gfx12345",
                                        "cuda",  "sm_90\n", "../../etc/passwd", "gfx90g"};
#define NBAD_ARCHS ((int)(sizeof bad_archs / sizeof bad_archs[0]))

FT_TEST(admin_arch_strings) {
  const char *good[] = {"sm_75", "sm_80", "sm_90", "sm_90a", "gfx90a", "gfx942", "gfx1100",
                        "gfx90a:xnack-"};
  for (int i = 0; i < 8; i++) FT_CHECK(fi_admin_arch_supported(good[i]) == 1, "%s", good[i]);
  FT_CHECK(fi_admin_arch_supported(NULL) == 0);
  for (int i = 0; i < NBAD_ARCHS; i++)
    FT_CHECK(fi_admin_arch_supported(bad_archs[i]) == 0, "'%s' reported supported", bad_archs[i]);
}

FT_TEST(admin_prewarm_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  fi_prewarm_result r;
  double ms;
  int n = fi_admin_config_count("rmsnorm");
  poison_error();
  FT_CHECK(fi_admin_prewarm(NULL, "rmsnorm", 0, "sm_90", &r, &ms) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(strstr(fi_last_error(), "rt") != NULL, "%s", fi_last_error());
  struct {
    const char *op;
    int idx;
    const char *name;
  } bad[] = {{"nope", 0, "op"}, {NULL, 0, "op"}, {"", 0, "op"}, {"rmsnorm", -1, "idx"},
             {"rmsnorm", n, "idx"}, {"rmsnorm", 1 << 30, "idx"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    poison_error();
    fi_status st = fi_admin_prewarm(rt, bad[i].op, bad[i].idx, "sm_90", &r, &ms);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "case %zu: %s", i, fi_status_string(st));
    FT_CHECK(strstr(fi_last_error(), bad[i].name) != NULL, "case %zu: %s", i, fi_last_error());
  }
  for (int i = 0; i <= NBAD_ARCHS; i++) {
    const char *a = i < NBAD_ARCHS ? bad_archs[i] : NULL;
    poison_error();
    fi_status st = fi_admin_prewarm(rt, "rmsnorm", 0, a, NULL, NULL);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "arch '%s': %s", a ? a : "(null)",
             fi_status_string(st));
    FT_CHECK(strstr(fi_last_error(), "arch") != NULL, "arch '%s': %s", a ? a : "(null)",
             fi_last_error());
  }
  /* Well formed but no compiler targets it: refused, documented as UNSUPPORTED
   * (this loads NVRTC, which is installed here, and compiles nothing). */
  poison_error();
  fi_status st = fi_admin_prewarm(rt, "rmsnorm", 0, "sm_990", &r, &ms);
  FT_CHECK(st == FI_ERR_UNSUPPORTED, "sm_990: %s: %s", fi_status_string(st), fi_last_error());
  FT_CHECK(strstr(fi_last_error(), "sm_990") != NULL, "%s", fi_last_error());
  fi_admin_stats s;
  FT_REQUIRE(fi_admin_stats_get(rt, &s) == FI_OK);
  FT_CHECK(s.entries == 0 && s.compiles == 0, "entries %lld compiles %lld",
           (long long)s.entries, (long long)s.compiles);
  fi_runtime_destroy(rt);
}

/* Arch strings that look like targets but are not ones this compiler knows:
 * refused up front (INVALID_ARGUMENT or UNSUPPORTED), never passed to the
 * compiler. hiprtc 5.2 aborts the process on an unknown target feature, so
 * these run in a separate process. */
FT_TEST(admin_prewarm_unknown_target_variants_refused) {
  const char *archs[] = {"gfx90a:bogus+", "gfx90a:xnack+:xnack-", "sm_90f", "sm_80f"};
  for (int i = 0; i < 4; i++) {
    fi_status st;
    char msg[2048], how[64];
    int status = run_helper("prewarm", archs[i], &st, msg, sizeof msg);
    FT_CHECK(status == 0, "%s: the process died: %s", archs[i], how_it_ended(status, how, sizeof how));
    FT_CHECK(status != 0 || st == FI_ERR_INVALID_ARGUMENT || st == FI_ERR_UNSUPPORTED,
             "%s: %s (a compile was attempted): %.300s", archs[i], fi_status_string(st), msg);
  }
}

static int count_cb(const fi_cache_entry *e, void *user) {
  (void)e;
  ++*(int *)user;
  return 0;
}

FT_TEST(admin_store_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  int n = 0;
  poison_error();
  FT_CHECK(fi_admin_list(NULL, NULL, NULL, count_cb, &n) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(strstr(fi_last_error(), "rt") != NULL, "%s", fi_last_error());
  poison_error();
  FT_CHECK(fi_admin_list(rt, NULL, NULL, NULL, &n) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(strstr(fi_last_error(), "fn") != NULL, "%s", fi_last_error());
  FT_CHECK(fi_admin_list(rt, "rmsnorm", "sm_90", count_cb, &n) == FI_OK && n == 0);

  void *bin = (void *)0x1;
  size_t bytes = 0;
  char *src = (char *)0x1;
  FT_CHECK(fi_admin_get(NULL, "ab", NULL, NULL, &bin, &bytes, &src) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(bin == NULL && src == NULL, "outputs not cleared on failure");
  FT_CHECK(fi_admin_get(rt, NULL, NULL, NULL, &bin, &bytes, &src) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(fi_admin_get(rt, "", NULL, NULL, &bin, &bytes, &src) == FI_ERR_INVALID_ARGUMENT);
  poison_error();
  FT_CHECK(fi_admin_get(rt, "0123abcd", NULL, NULL, &bin, &bytes, &src) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(strstr(fi_last_error(), "0123abcd") != NULL, "%s", fi_last_error());
  poison_error();
  fi_status st = fi_admin_get(rt, "'; DROP TABLE kernels; --", NULL, NULL, NULL, NULL, NULL);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "SQL in prefix: %s", fi_status_string(st));
  FT_CHECK(fi_admin_list(rt, NULL, NULL, count_cb, &n) == FI_OK, "store unusable after: %s",
           fi_last_error());
  fi_admin_free(NULL);

  int64_t removed = -1;
  FT_CHECK(fi_admin_clear(NULL, NULL, NULL, &removed) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(fi_admin_clear(rt, "nope", "sm_1", &removed) == FI_OK && removed == 0);
  FT_CHECK(fi_admin_clear(rt, NULL, NULL, NULL) == FI_OK);

  fi_admin_stats s;
  FT_CHECK(fi_admin_stats_get(NULL, &s) == FI_ERR_INVALID_ARGUMENT);
  poison_error();
  FT_CHECK(fi_admin_stats_get(rt, NULL) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(strstr(fi_last_error(), "st") != NULL, "%s", fi_last_error());
  FT_REQUIRE(fi_admin_stats_get(rt, &s) == FI_OK, "%s", fi_last_error());
  FT_CHECK(s.entries == 0 && s.fallback == 0, "entries %lld fallback %d", (long long)s.entries,
           s.fallback);
  FT_CHECK(s.path != NULL && strcmp(s.path, ":memory:") == 0, "path %s", s.path ? s.path : "NULL");
  fi_runtime_destroy(rt);
}

/* fi_admin_rmsnorm_with_key: the key is an argument like the tensors, so a key
 * that does not fit is FI_ERR_INVALID_ARGUMENT naming "key", found before any
 * driver is asked (README: "Bad arguments return FI_ERR_INVALID_ARGUMENT before
 * anything touches a driver or the cache"); on this machine, with no driver,
 * any other order shows up as FI_ERR_NO_DEVICE. */
FT_TEST(admin_rmsnorm_with_key_bad_key) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  /* hidden 4100 with 16-byte aligned rows allows 4 bf16 at a time (4100 % 8 != 0). */
  call c;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4100);
  jit_key k;
  char ok_key[256], f16_key[256], wide_key[256];
  jit_rmsnorm_select(JIT_DT_BF16, 4, 4100, &k);
  FT_REQUIRE(jit_key_canonical(&k, ok_key, sizeof ok_key) > 0);
  jit_rmsnorm_select(JIT_DT_F16, 4, 4100, &k);
  FT_REQUIRE(jit_key_canonical(&k, f16_key, sizeof f16_key) > 0);
  jit_rmsnorm_select(JIT_DT_BF16, 8, 4100, &k);
  FT_REQUIRE(jit_key_canonical(&k, wide_key, sizeof wide_key) > 0);

  /* A good key passes the checks and reaches the (missing) driver. */
  fi_status st = fi_admin_rmsnorm_with_key(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL, ok_key);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "good key %s: %s: %s", ok_key, fi_status_string(st),
           fi_last_error());

  const char *bad[] = {NULL,         "",          "op=rmsnorm;garbage", "not a key at all",
                       "op=nope;dtype=bf16", f16_key, wide_key};
  const char *why[] = {"NULL", "empty", "malformed", "malformed", "unknown op",
                       "wrong dtype", "vec wider than the tensors allow"};
  for (int i = 0; i < 7; i++) {
    poison_error();
    st = fi_admin_rmsnorm_with_key(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL, bad[i]);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "%s key '%s': %s: %s", why[i],
             bad[i] ? bad[i] : "(null)", fi_status_string(st), fi_last_error());
    FT_CHECK(strstr(fi_last_error(), "key") != NULL, "%s key: %s", why[i], fi_last_error());
  }
  /* Bad tensors are still named first. */
  c.eps = -1;
  poison_error();
  st = fi_admin_rmsnorm_with_key(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL, ok_key);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "eps"), "%s: %s",
           fi_status_string(st), fi_last_error());
  fi_runtime_destroy(rt);
}

/* With 0 tokens nothing is launched, but a key that cannot be right is still
 * an invalid argument rather than FI_OK. */
FT_TEST(admin_rmsnorm_with_key_bad_key_zero_tokens) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 0, 4096);
  poison_error();
  fi_status st =
      fi_admin_rmsnorm_with_key(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL, "op=rmsnorm;garbage");
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "malformed key, 0 tokens: %s", fi_status_string(st));
  FT_CHECK(strstr(fi_last_error(), "key") != NULL, "%s", fi_last_error());
  fi_runtime_destroy(rt);
}

/* ---- what the shared library exports and links ---- */

static void build_dir(char *out, size_t n) {
  const char *b = getenv("FI_BUILD");
  if (b && b[0]) {
    snprintf(out, n, "%s", b);
    return;
  }
  /* This program is <build>/tests/test_api: its grandparent directory. */
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = 0;
    for (int up = 0; up < 2; up++) {
      char *s = strrchr(exe, '/');
      if (s) *s = 0;
    }
    snprintf(out, n, "%s", exe);
    return;
  }
  snprintf(out, n, "build");
}

FT_TEST(exports_only_fi_symbols) {
  char dir[4096], lib[4200], cmd[4400];
  build_dir(dir, sizeof dir);
  snprintf(lib, sizeof lib, "%s/libfi_runtime.so", dir);
  struct stat sb;
  FT_REQUIRE(stat(lib, &sb) == 0, "%s missing: build it (make %s)", lib, lib);
  snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s' 2>&1", lib);
  FILE *p = popen(cmd, "r");
  FT_REQUIRE(p != NULL, "popen %s", cmd);
  char line[1024];
  int nsyms = 0, bad = 0, has_rmsnorm = 0, has_create = 0, has_last_error = 0, has_prewarm = 0;
  while (fgets(line, sizeof line, p)) {
    /* "0000000000012340 T fi_rmsnorm" */
    char addr[64], type[8], name[512];
    if (sscanf(line, "%63s %7s %511s", addr, type, name) != 3) {
      FT_CHECK(0, "unexpected nm line: %s", line);
      bad++;
      continue;
    }
    nsyms++;
    char *at = strchr(name, '@');
    if (at) *at = 0; /* version suffix */
    if (strncmp(name, "fi_", 3) != 0) {
      if (bad++ < 20) FT_CHECK(0, "exported symbol '%s' (%s) is not fi_*", name, type);
    }
    has_rmsnorm |= strcmp(name, "fi_rmsnorm") == 0;
    has_create |= strcmp(name, "fi_runtime_create") == 0;
    has_last_error |= strcmp(name, "fi_last_error") == 0;
    has_prewarm |= strcmp(name, "fi_admin_prewarm") == 0;
  }
  int rc = pclose(p);
  FT_CHECK(rc == 0, "nm exited with %d", rc);
  FT_CHECK(nsyms >= 10, "only %d symbols", nsyms);
  FT_CHECK(has_rmsnorm && has_create && has_last_error && has_prewarm,
           "public functions missing (rmsnorm %d create %d last_error %d prewarm %d)", has_rmsnorm,
           has_create, has_last_error, has_prewarm);
  FT_CHECK(bad == 0, "%d symbols outside fi_*", bad);
}

FT_TEST(links_no_vendor_library) {
  char dir[4096], lib[4200], cmd[4400];
  build_dir(dir, sizeof dir);
  snprintf(lib, sizeof lib, "%s/libfi_runtime.so", dir);
  struct stat sb;
  FT_REQUIRE(stat(lib, &sb) == 0, "%s missing: build it (make %s)", lib, lib);
  snprintf(cmd, sizeof cmd, "ldd '%s' 2>&1", lib);
  FILE *p = popen(cmd, "r");
  FT_REQUIRE(p != NULL, "popen %s", cmd);
  char line[1024];
  int lines = 0, sqlite = 0;
  const char *vendor[] = {"libcuda", "libnvrtc", "libamdhip64", "libhiprtc", "libamd_comgr",
                          "libcudart"};
  while (fgets(line, sizeof line, p)) {
    lines++;
    sqlite |= strstr(line, "libsqlite3") != NULL;
    for (int i = 0; i < 6; i++)
      FT_CHECK(strstr(line, vendor[i]) == NULL, "links %s: %s", vendor[i], line);
    FT_CHECK(strstr(line, "not found") == NULL, "unresolved: %s", line);
  }
  int rc = pclose(p);
  FT_CHECK(rc == 0, "ldd exited with %d", rc);
  FT_CHECK(lines >= 2 && sqlite, "ldd output has %d lines, sqlite %d: not what was expected", lines,
           sqlite);
}

/* ---- issue 47 items 16, 17 ---- */

/* A device tensor at a fake address (never dereferenced: the calls below must be refused
 * before anything reads it). */
static DLTensor dev_tensor(uintptr_t addr, uint64_t byte_offset, int code, int bits, int ndim, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)addr;
  t.byte_offset = byte_offset;
  t.device.device_type = kDLCUDA;
  t.ndim = ndim;
  t.dtype.code = (uint8_t)code;
  t.dtype.bits = (uint8_t)bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

/* Misaligned data pointers (an odd address or byte_offset 1 for a 16-bit type, 2 for
 * float32) are refused as FI_ERR_INVALID_ARGUMENT naming the tensor, whether or not a
 * driver is there: the checks come before the device lookup, and no kernel is launched
 * on an address its loads cannot use. Each op is tried with the misaligned tensor in
 * every position, and the same call aligned reaches the device lookup. */
FT_TEST(misaligned_data_refused_before_the_device) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  o.log_level = 0;
  fi_runtime *rt = NULL;
  FT_REQUIRE(fi_runtime_create(&o, &rt) == FI_OK);
  static const struct {
    int code, bits;
    uint64_t off;   /* byte_offset that breaks an element */
    uintptr_t odd;  /* an address that does */
  } dts[] = {{kDLBfloat, 16, 1, 0x1000001}, {kDLFloat, 16, 1, 0x1000003}, {kDLFloat, 32, 2, 0x1000002}};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    const int code = dts[d].code, bits = dts[d].bits;
    for (int bad = 0; bad < 2; bad++) {     /* 0: byte_offset, 1: the address */
      for (int which = -1; which < 3; which++) { /* -1: none misaligned (the control) */
        const uintptr_t base[3] = {0x1000000, 0x2000000, 0x3000000};
        uintptr_t a[3];
        uint64_t off[3];
        for (int i = 0; i < 3; i++) {
          a[i] = which == i && bad ? dts[d].odd - 0x1000000 + base[i] : base[i];
          off[i] = which == i && !bad ? dts[d].off : 0;
        }
        /* fi_rmsnorm: input, weight, out */
        int64_t s2[2] = {4, 64}, s1[1] = {64};
        DLTensor in = dev_tensor(a[0], off[0], code, bits, 2, s2), w = dev_tensor(a[1], off[1], code, bits, 1, s1),
                 out = dev_tensor(a[2], off[2], code, bits, 2, s2);
        static const char *const norm_names[3] = {"input", "weight", "out"};
        fi_status st = fi_rmsnorm(rt, &in, &w, 1e-6, &out, NULL);
        if (which < 0)
          FT_CHECK(st == FI_ERR_NO_DEVICE, "rmsnorm aligned %s%d: %s", bits == 32 ? "f" : "x", bits, fi_last_error());
        else
          FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), norm_names[which]) &&
                       strstr(fi_last_error(), "multiple of"),
                   "rmsnorm %s misaligned (dtype %d/%d, %s): %s: %s", norm_names[which], code, bits,
                   bad ? "address" : "byte_offset", fi_status_string(st), fi_last_error());
        /* fi_silu_and_mul: input [4, 128], out [4, 64] (no weight: which 1 tries nothing) */
        if (which < 1) {
          int64_t si[2] = {4, 128}, so[2] = {4, 64};
          DLTensor ain = dev_tensor(a[0], off[0], code, bits, 2, si), aout = dev_tensor(a[2], off[2], code, bits, 2, so);
          st = fi_silu_and_mul(rt, &ain, &aout, NULL);
          if (which < 0)
            FT_CHECK(st == FI_ERR_NO_DEVICE, "silu_and_mul aligned: %s", fi_last_error());
          else if (which == 0)
            FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "input") &&
                         strstr(fi_last_error(), "multiple of"),
                     "silu_and_mul input misaligned: %s: %s", fi_status_string(st), fi_last_error());
        }
        if (which == 2 || which < 0) {
          int64_t si[2] = {4, 128}, so[2] = {4, 64};
          DLTensor ain = dev_tensor(base[0], 0, code, bits, 2, si), aout = dev_tensor(a[2], off[2], code, bits, 2, so);
          st = fi_silu_and_mul(rt, &ain, &aout, NULL);
          if (which == 2)
            FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "out") &&
                         strstr(fi_last_error(), "multiple of"),
                     "silu_and_mul out misaligned: %s: %s", fi_status_string(st), fi_last_error());
        }
        /* fi_softmax (float32 only): logits, out */
        if (bits == 32 && which != 1) {
          int64_t sl[2] = {4, 1000};
          DLTensor lg = dev_tensor(a[0], off[0], code, bits, 2, sl), so = dev_tensor(a[2], off[2], code, bits, 2, sl);
          st = fi_softmax(rt, &lg, NULL, 1.0, &so, NULL);
          if (which < 0)
            FT_CHECK(st == FI_ERR_NO_DEVICE, "softmax aligned: %s", fi_last_error());
          else
            FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), which == 0 ? "logits" : "out") &&
                         strstr(fi_last_error(), "multiple of"),
                     "softmax %d misaligned: %s: %s", which, fi_status_string(st), fi_last_error());
        }
        /* fi_apply_rope_pos_ids (16-bit): q, k, and q_out */
        if (bits == 16) {
          int64_t sq[3] = {4, 8, 128}, sk[3] = {4, 2, 128}, sp[1] = {4};
          DLTensor q = dev_tensor(a[0], off[0], code, bits, 3, sq), k = dev_tensor(a[1], off[1], code, bits, 3, sk);
          DLTensor qo = dev_tensor(a[2], off[2], code, bits, 3, sq), ko = dev_tensor(0x4000000, 0, code, bits, 3, sk);
          DLTensor pos = dev_tensor(0x5000000, 0, kDLInt, 32, 1, sp);
          static const char *const rope_names[3] = {"q", "k", "q_out"};
          st = fi_apply_rope_pos_ids(rt, &q, &k, &qo, &ko, &pos, 128, 0, 1.0, 1e4, NULL);
          if (which < 0)
            FT_CHECK(st == FI_ERR_NO_DEVICE, "rope aligned: %s", fi_last_error());
          else
            FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), rope_names[which]) &&
                         strstr(fi_last_error(), "multiple of"),
                     "rope %s misaligned: %s: %s", rope_names[which], fi_status_string(st), fi_last_error());
        }
      }
    }
  }
  fi_runtime_destroy(rt);
}

/* fi_batch_decode_workspace_size on a CPU device is a bad argument (not "no device", nor a
 * size), and fi_runtime_create takes only an options struct_size it knows. */
FT_TEST(workspace_size_cpu_device_and_options_struct_size) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  o.log_level = 0;
  fi_runtime *rt = NULL;
  FT_REQUIRE(fi_runtime_create(&o, &rt) == FI_OK);
  static const DLDeviceType bad[] = {kDLCPU, kDLCUDAHost, kDLCUDAManaged, kDLVulkan};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t bytes = 12345;
    DLDevice dev = {bad[i], 0};
    fi_status st = fi_batch_decode_workspace_size(rt, dev, 8, 32, 8, 128, &bytes);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "device") && bytes == 12345,
             "device type %d: %s: %s (bytes %zu)", (int)bad[i], fi_status_string(st), fi_last_error(), bytes);
  }
  DLDevice gpu = {kDLCUDA, 0};
  size_t bytes = 0;
  fi_status st = fi_batch_decode_workspace_size(rt, gpu, 8, 32, 8, 128, &bytes);
  FT_CHECK(st == FI_ERR_NO_DEVICE || (st == FI_OK && bytes > 0), "a CUDA device: %s", fi_last_error());
  fi_runtime_destroy(rt);

  /* (runtime_create_and_destroy checks 0 and sizes above fi_options'; a size that ends
   * where a field starts is an older caller's, taken there) */
  static const size_t sizes[] = {1, 3, sizeof(size_t), offsetof(fi_options, system_cache_path) + 1,
                                 offsetof(fi_options, log_level) + 4, sizeof(fi_options) - 1};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    fi_options bad_o;
    fi_options_init(&bad_o);
    bad_o.cache_path = ":memory:";
    bad_o.struct_size = sizes[i];
    rt = (fi_runtime *)0x1;
    st = fi_runtime_create(&bad_o, &rt);
    FT_CHECK(st == FI_ERR_INVALID_ARGUMENT && rt == NULL && strstr(fi_last_error(), "struct_size"),
             "struct_size %zu: %s: %s", sizes[i], fi_status_string(st), fi_last_error());
    if (st == FI_OK) fi_runtime_destroy(rt);
  }
  fi_options good;
  fi_options_init(&good);
  good.cache_path = ":memory:";
  good.log_level = 0;
  FT_CHECK(fi_runtime_create(&good, &rt) == FI_OK, "%s", fi_last_error());
  fi_runtime_destroy(rt);
}
