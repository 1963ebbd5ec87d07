/* test_compile.c: every registered configuration compiled with the real NVRTC
 * (sm_90, a sample for sm_80 and sm_90a) and hiprtc (gfx90a); unsupported targets refused cleanly. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fi_admin.h"
#include "ft.h"
#include "jit_fault.h"
#include "rt_internal.h"

typedef struct job {
  fi_runtime *rt;
  const char *op, *arch;
  int stride; /* compile every stride-th configuration */
  atomic_int next, compiled, failed, skipped; /* skipped: the op has no kernel for the arch */
  char first_error[2048];
  pthread_mutex_t mu;
} job;

static void *worker(void *arg) {
  job *j = arg;
  int n = fi_admin_config_count(j->op);
  for (;;) {
    int i = atomic_fetch_add(&j->next, 1) * j->stride;
    if (i >= n) break;
    fi_prewarm_result r;
    double ms;
    fi_status st = fi_admin_prewarm(j->rt, j->op, i, j->arch, &r, &ms);
    if (st == FI_OK && r == FI_PREWARM_SKIPPED) {
      atomic_fetch_add(&j->skipped, 1);
    } else if (st == FI_OK) {
      atomic_fetch_add(&j->compiled, 1);
    } else {
      atomic_fetch_add(&j->failed, 1);
      pthread_mutex_lock(&j->mu);
      if (!j->first_error[0]) {
        char key[256] = "";
        fi_admin_config_key(j->op, i, key, sizeof key);
        snprintf(j->first_error, sizeof j->first_error, "%s: %s", key, fi_last_error());
      }
      pthread_mutex_unlock(&j->mu);
    }
  }
  return NULL;
}

/* Compiles op's configurations for arch on 2 threads; returns failures. */
static int compile_all(const char *op, const char *arch, int stride, int *compiled, int *skipped,
                       char *err, size_t errlen) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  job j;
  memset(&j, 0, sizeof j);
  pthread_mutex_init(&j.mu, NULL);
  if (fi_runtime_create(&o, &j.rt) != FI_OK) return -1;
  j.op = op;
  j.arch = arch;
  j.stride = stride;
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, &j);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  *compiled = atomic_load(&j.compiled);
  *skipped = atomic_load(&j.skipped);
  snprintf(err, errlen, "%s", j.first_error);
  /* Every stored binary is an ELF file of the right machine. */
  fi_runtime_destroy(j.rt);
  pthread_mutex_destroy(&j.mu);
  return atomic_load(&j.failed);
}

/* FI_TEST_COMPILE_SAMPLE=N compiles every N-th of what would be compiled: the
 * sanitizer run sets it, since the compilers are not instrumented and the full
 * set already compiled in the plain run; only our host paths differ. */
static int sample_scale(void) {
  const char *s = getenv("FI_TEST_COMPILE_SAMPLE");
  int n = s ? atoi(s) : 1;
  return n > 1 ? n : 1;
}

static void check_op_arch(const char *arch, int stride) {
  stride *= sample_scale();
  for (int i = 0; i < fi_admin_op_count(); i++) {
    const char *op = fi_admin_op_name(i);
    int n = fi_admin_config_count(op), compiled = 0, skipped = 0;
    char err[2048];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int failed = compile_all(op, arch, stride, &compiled, &skipped, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int want = (n + stride - 1) / stride;
    /* The seconds say where CI's time goes (this test is most of it). */
    fprintf(stderr, "  %s %s: %d of %d compiled, %d skipped, %.1f s\n", op, arch, compiled, want, skipped,
            (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    FT_CHECK(failed == 0, "%s for %s: %d failed; first: %s", op, arch, failed, err);
    FT_CHECK(compiled + skipped == want, "%s for %s: %d compiled and %d skipped, expected %d", op,
             arch, compiled, skipped, want);
    /* Only the wgmma ops (named *_sm90 or wgmma_*) skip, and only off Hopper. */
    const int hopper = strcmp(arch, "sm_90") == 0 || strcmp(arch, "sm_90a") == 0;
    const int wg_op = strstr(op, "_sm90") || strstr(op, "wgmma");
    FT_CHECK(skipped == 0 || (!hopper && wg_op), "%s for %s: %d skipped", op, arch, skipped);
    if (wg_op) FT_CHECK(hopper || compiled == 0, "%s compiled for %s", op, arch);
  }
}

FT_TEST(nvrtc_sm90_every_config) { check_op_arch("sm_90", 1); }
FT_TEST(nvrtc_sm80_sample) { check_op_arch("sm_80", 7); }
FT_TEST(nvrtc_sm90a_sample) { check_op_arch("sm_90a", 11); }
FT_TEST(hiprtc_gfx90a_sample) { check_op_arch("gfx90a", 3); }

static int elf_machine(const void *bin, size_t n) {
  const unsigned char *b = bin;
  if (n < 20 || memcmp(b, "\x7f" "ELF", 4) != 0) return -1;
  return b[18] | (b[19] << 8);
}

static int machine_cb(const fi_cache_entry *e, void *user) {
  snprintf(user, 40, "%s", e->hash);
  return 1;
}

/* A cubin is ELF with e_machine EM_CUDA (190); a code object EM_AMDGPU (224). */
FT_TEST(binaries_are_elf_of_the_target) {
  const char *archs[2] = {"sm_90", "gfx90a"};
  const int machines[2] = {190, 224};
  for (int a = 0; a < 2; a++) {
    fi_options o;
    fi_options_init(&o);
    o.cache_path = ":memory:";
    fi_runtime *rt;
    FT_REQUIRE(fi_runtime_create(&o, &rt) == FI_OK);
    fi_prewarm_result r;
    double ms;
    FT_REQUIRE(fi_admin_prewarm(rt, "rmsnorm", 0, archs[a], &r, &ms) == FI_OK, "%s", fi_last_error());
    char hash[40] = "";
    FT_REQUIRE(fi_admin_list(rt, NULL, NULL, machine_cb, hash) == FI_OK);
    void *bin;
    size_t n;
    FT_REQUIRE(fi_admin_get(rt, hash, NULL, NULL, &bin, &n, NULL) == FI_OK, "%s", fi_last_error());
    FT_CHECK(elf_machine(bin, n) == machines[a], "%s: e_machine %d", archs[a], elf_machine(bin, n));
    fi_admin_free(bin);
    fi_runtime_destroy(rt);
  }
}

/* hiprtc 5.2 aborts the process on targets it does not know; the runtime
 * must refuse them before calling it. Reaching the checks proves no abort. */
FT_TEST(hiprtc_unknown_target_refused_without_crash) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  fi_runtime *rt;
  FT_REQUIRE(fi_runtime_create(&o, &rt) == FI_OK);
  fi_prewarm_result r;
  double ms;
  fi_status st = fi_admin_prewarm(rt, "rmsnorm", 0, "gfx942", &r, &ms);
  if (st == FI_OK) {
    fprintf(stderr, "  this hiprtc knows gfx942\n"); /* ROCm >= 5.5 installed */
  } else {
    FT_CHECK(st == FI_ERR_UNSUPPORTED, "gfx942: %s", fi_status_string(st));
    FT_CHECK(strstr(fi_last_error(), "gfx942") != NULL, "%s", fi_last_error());
  }
  st = fi_admin_prewarm(rt, "rmsnorm", 0, "gfx999", &r, &ms);
  FT_CHECK(st == FI_ERR_UNSUPPORTED, "gfx999: %s", fi_status_string(st));
  st = fi_admin_prewarm(rt, "rmsnorm", 0, "sm_50", &r, &ms);
  FT_CHECK(st == FI_ERR_INVALID_ARGUMENT, "sm_50: %s", fi_status_string(st));
  fi_runtime_destroy(rt);
}

/* Fault injection: the real NVRTC is handed a broken program (by wrapping
 * nvrtcCreateProgram), so the compile error and its log are NVRTC's own. */
typedef int (*create_fn)(void *, const char *, const char *, int, const char *const *,
                         const char *const *);
static create_fn real_create;
static int broken_create(void *prog, const char *src, const char *name, int n,
                         const char *const *h, const char *const *hn) {
  (void)src;
  return real_create(prog, "extern \"C\" __global__ void k() { this_is_not_cuda; }\n", name, n, h, hn);
}

FT_TEST(compile_error_carries_compiler_log) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  o.log_level = 0;
  fi_runtime *rt;
  FT_REQUIRE(fi_runtime_create(&o, &rt) == FI_OK);
  fi_prewarm_result r;
  double ms;
  /* Load NVRTC through a first, good compile. */
  FT_REQUIRE(fi_admin_prewarm(rt, "rmsnorm", 1, "sm_90", &r, &ms) == FI_OK, "%s", fi_last_error());
  void *old;
  FT_REQUIRE(jit_nvrtc_fault("nvrtcCreateProgram", (void *)broken_create, &old) == 0);
  real_create = (create_fn)old;
  fi_status st = fi_admin_prewarm(rt, "rmsnorm", 2, "sm_90", &r, &ms);
  jit_nvrtc_fault("nvrtcCreateProgram", old, NULL);
  FT_CHECK(st == FI_ERR_COMPILE, "got %s", fi_status_string(st));
  FT_CHECK(strstr(fi_last_error(), "this_is_not_cuda") != NULL, "log missing: %s", fi_last_error());
  FT_CHECK(strstr(fi_last_error(), "op=rmsnorm") != NULL, "key missing: %s", fi_last_error());
  /* The failure is not cached: the same configuration compiles once NVRTC is healthy. */
  st = fi_admin_prewarm(rt, "rmsnorm", 2, "sm_90", &r, &ms);
  FT_CHECK(st == FI_OK && r == FI_PREWARM_COMPILED, "%s", fi_last_error());
  fi_admin_stats s;
  fi_admin_stats_get(rt, &s);
  FT_CHECK(s.compile_failures == 1, "failures %lld", (long long)s.compile_failures);
  fi_runtime_destroy(rt);
}
