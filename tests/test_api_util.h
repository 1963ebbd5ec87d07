/* test_api_util.h: what the test_api_* programs share: fake device tensors for
 * fi_rmsnorm, a status comparison that prints both names, and the helper mode that
 * runs a call which may take the process down in a fresh process. */
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fi_admin.h"
#include "fi_runtime.h"
#include "ft.h"
#include "test_args_util.h"

/* A status compared with the one expected; a failure prints both by name:
 * "got FI_ERR_NO_DEVICE (-3), expected FI_ERR_INVALID_ARGUMENT (-1)". */
static inline const char *api_status_name(long long v) { return fi_status_string((fi_status)v); }
#define CHECK_ST(got, want, ...) FT_CHECK_EQ_NAMED(got, want, api_status_name, __VA_ARGS__)
#define REQUIRE_ST(got, want, ...) FT_REQUIRE_EQ_NAMED(got, want, api_status_name, __VA_ARGS__)

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
static inline void tens_make(tens *x, void *data, int devtype, DLDataTypeCode code, int bits,
                             int ndim, int64_t s0, int64_t s1) {
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

static inline void call_make(call *c, int devtype, DLDataTypeCode code, int bits, int64_t rows,
                             int64_t hidden) {
  tens_make(&c->in, IN_ADDR, devtype, code, bits, 2, rows, hidden);
  tens_make(&c->w, W_ADDR, devtype, code, bits, 1, hidden, 0);
  tens_make(&c->out, OUT_ADDR, devtype, code, bits, 2, rows, hidden);
  c->eps = 1e-6;
}

/* The tensors of c point into c itself: a copy must re-point them. */
static inline void call_copy(call *dst, const call *src) {
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
    CHECK_ST(st_, FI_ERR_INVALID_ARGUMENT, "%s (%s)", what, fi_last_error());                 \
    FT_CHECK(names_all(fi_last_error(), names), "%s: message does not name the argument: %s", \
             what, fi_last_error());                                                          \
  } while (0)

/* ---- helper mode: calls that may take the process down run in a fresh
 * process (this program re-executed with FI_TEST_API_HELPER set), which
 * prints "<status> <message>" on stdout. ---- */

static inline int helper_call(const char *mode, const char *arg) {
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
static inline int run_helper(const char *mode, const char *arg, fi_status *st, char *msg,
                             size_t msglen) {
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
    execl("/proc/self/exe", "test_api_helper", "__helper__", (char *)NULL);
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

static inline const char *how_it_ended(int status, char *buf, size_t n) {
  if (status == -1)
    snprintf(buf, n, "could not run");
  else if (WIFSIGNALED(status))
    snprintf(buf, n, "killed by signal %d", WTERMSIG(status));
  else
    snprintf(buf, n, "exit code %d", WEXITSTATUS(status));
  return buf;
}
