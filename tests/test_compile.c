/* test_compile.c: every registered configuration compiled with the real NVRTC
 * and hiprtc (gfx90a): in make test a sample covering every op x dtype x arch class (a
 * variant op's first configuration: first_only), in
 * make test-compile-all every configuration for sm_90 and a sample for sm_80, sm_90a and
 * gfx90a; unsupported targets refused cleanly. */
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
  const int *idx; /* the configurations to compile */
  int n;
  atomic_int next, compiled, failed, skipped; /* skipped: the op has no kernel for the arch */
  char first_error[2048];
  pthread_mutex_t mu;
} job;

static void *worker(void *arg) {
  job *j = arg;
  for (;;) {
    int k = atomic_fetch_add(&j->next, 1);
    if (k >= j->n) break;
    int i = j->idx[k];
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

/* Compiles the n configurations idx of op for arch; returns failures. */
static int compile_all(const char *op, const char *arch, const int *idx, int n, int *compiled,
                       int *skipped, char *err, size_t errlen) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  job j;
  memset(&j, 0, sizeof j);
  pthread_mutex_init(&j.mu, NULL);
  if (fi_runtime_create(&o, &j.rt) != FI_OK) return -1;
  j.op = op;
  j.arch = arch;
  j.idx = idx;
  j.n = n;
  /* One worker per online CPU (at most 32), at least 2: the single-flight claims run in parallel. */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int nt = cpus < 2 ? 2 : cpus > 32 ? 32 : (int)cpus;
  pthread_t t[32];
  for (int i = 0; i < nt; i++) pthread_create(&t[i], NULL, worker, &j);
  for (int i = 0; i < nt; i++) pthread_join(t[i], NULL);
  *compiled = atomic_load(&j.compiled);
  *skipped = atomic_load(&j.skipped);
  snprintf(err, errlen, "%s", j.first_error);
  fi_runtime_destroy(j.rt);
  pthread_mutex_destroy(&j.mu);
  return atomic_load(&j.failed);
}

/* make test compiles a covering sample; make test-compile-all (FI_TEST_COMPILE=all)
 * the whole matrix, where FI_TEST_COMPILE_SAMPLE=N keeps every N-th of it; make test-asan
 * (FI_TEST_COMPILE=first) one configuration an op and arch: the compilers are not
 * instrumented, only the host paths around them are, and those are the same for all. */
static int compile_mode(const char *mode) {
  const char *s = getenv("FI_TEST_COMPILE");
  return s && strcmp(s, mode) == 0;
}
static int compile_everything(void) { return compile_mode("all"); }

static int sample_scale(void) {
  const char *s = getenv("FI_TEST_COMPILE_SAMPLE");
  int n = s ? atoi(s) : 1;
  return n > 1 ? n : 1;
}

/* Does key (a canonical "f=v;f=v" string) hold a field=value pair that none of the
 * n keys in seen[] holds? Only the fields covers() accepts count. */
typedef int (*field_pred)(const char *field, size_t len);
static int dtype_field(const char *f, size_t len) {
  for (size_t i = 0; i + 5 <= len; i++)
    if (memcmp(f + i, "dtype", 5) == 0) return 1;
  return 0;
}
static int shape_field(const char *f, size_t len) {
  static const char *const more[] = {"head_dim", "kind", "act", "mode", "pos", "layout", "phase", "method", "epl"};
  if (dtype_field(f, len)) return 1;
  for (size_t i = 0; i < sizeof more / sizeof *more; i++)
    if (strlen(more[i]) == len && memcmp(f, more[i], len) == 0) return 1;
  return 0;
}
static int pair_in(const char *key, const char *pair, size_t len) {
  for (const char *p = key; p && *p; p = strchr(p, ';'), p = p ? p + 1 : NULL)
    if (strncmp(p, pair, len) == 0 && (p[len] == ';' || p[len] == 0)) return 1;
  return 0;
}
static int adds_pair(const char *key, char (*seen)[256], int n, field_pred pred) {
  for (const char *p = key; *p;) {
    const char *end = strchr(p, ';'), *eq = strchr(p, '=');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (eq && eq < p + len && pred(p, (size_t)(eq - p))) {
      int found = 0;
      for (int i = 0; i < n && !found; i++) found = pair_in(seen[i], p, len);
      if (!found) return 1;
    }
    p += len + (end != NULL);
  }
  return 0;
}

/* Ops whose covering sample is their first configuration: a variant of another op's
 * template whose dtypes that op's sample covers (make test's time; compile-all compiles
 * all of theirs). The *_dvo prefill kernels are prefill.cuh's with V's head_dim apart. */
static int first_only(const char *op) {
  return strcmp(op, "single_prefill_dvo") == 0 || strcmp(op, "batch_prefill_dvo") == 0;
}

/* The configurations of op to compile: the whole matrix (every stride-th), or the
 * first configuration and then each that brings a field value (a dtype; with
 * pred = shape_field also a head dim, kind, mode...) no earlier pick had. */
static int pick(const char *op, int stride, field_pred pred, int *idx) {
  if (!compile_everything() && first_only(op)) pred = NULL;
  int n = fi_admin_config_count(op), m = 0;
  char (*seen)[256] = calloc((size_t)n, sizeof *seen);
  if (!seen) return 0;
  for (int i = 0; i < n; i++) {
    if (compile_everything()) {
      if (i % stride == 0) idx[m++] = i;
      continue;
    }
    char key[256] = "";
    if (fi_admin_config_key(op, i, key, sizeof key) != FI_OK) continue;
    if (m == 0 || (pred && !compile_mode("first") && adds_pair(key, seen, m, pred))) {
      snprintf(seen[m], sizeof seen[m], "%s", key);
      idx[m++] = i;
    }
  }
  free(seen);
  return m;
}

static void check_op_arch(const char *arch, int stride, field_pred pred) {
  stride *= sample_scale();
  int total = 0;
  for (int i = 0; i < fi_admin_op_count(); i++) {
    const char *op = fi_admin_op_name(i);
    int n = fi_admin_config_count(op), compiled = 0, skipped = 0;
    int *idx = calloc((size_t)n, sizeof *idx);
    FT_REQUIRE(idx != NULL);
    int want = pick(op, stride, pred, idx);
    FT_CHECK(want >= 1, "%s: nothing picked", op);
    char err[2048];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int failed = compile_all(op, arch, idx, want, &compiled, &skipped, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(idx);
    total += want;
    /* The seconds say where CI's time goes (this test is most of it). */
    fprintf(stderr, "  %s %s: %d of %d compiled (of %d), %d skipped, %.1f s\n", op, arch, compiled, want, n,
            skipped, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    FT_CHECK(failed == 0, "%s for %s: %d failed; first: %s", op, arch, failed, err);
    FT_CHECK(compiled + skipped == want, "%s for %s: %d compiled and %d skipped, expected %d", op,
             arch, compiled, skipped, want);
    /* Only the wgmma ops (named *_sm90 or wgmma_*) skip, and only off Hopper. */
    const int hopper = strcmp(arch, "sm_90") == 0 || strcmp(arch, "sm_90a") == 0;
    const int wg_op = strstr(op, "_sm90") || strstr(op, "wgmma");
    FT_CHECK(skipped == 0 || (!hopper && wg_op), "%s for %s: %d skipped", op, arch, skipped);
    if (wg_op) FT_CHECK(hopper || compiled == 0, "%s compiled for %s", op, arch);
  }
  fprintf(stderr, "  %s: %d configurations (%s)\n", arch, total,
          compile_everything()    ? "the whole matrix"
          : compile_mode("first") ? "one an op (FI_TEST_COMPILE=first)"
                                  : "a covering sample; make test-compile-all for all");
}

/* sm_90 is the arch served: every config in the full run (hiprtc, several times slower a
 * kernel, every 6th for gfx90a), each dtype, head dim, phase, method, epl,
 * kind and mode of every op in the sample. The others: every dtype of every op. */
FT_TEST(nvrtc_sm90_every_config) { check_op_arch("sm_90", 1, shape_field); }
FT_TEST(nvrtc_sm80_sample) { check_op_arch("sm_80", 7, dtype_field); }
FT_TEST(nvrtc_sm90a_sample) { check_op_arch("sm_90a", 11, NULL); }
FT_TEST(hiprtc_gfx90a_sample) { check_op_arch("gfx90a", 6, dtype_field); }

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

/* Model presets: each resolves on every arch class to registered configurations, covers
 * every op family of a serving step, has no repeats, and refuses unknown names and arches.
 * make test-compile-all also compiles llama3-8b's for sm_90 (what make run prewarms). */
FT_TEST(presets_resolve_to_a_serving_step) {
  static const char *const archs[] = {"sm_90", "sm_80", "gfx90a"};
  static const char *const step[] = {"rmsnorm", "fused_add_rmsnorm", "rope", "append_paged_kv",
                                     "batch_indices_positions", "act_and_mul", "sampling", "batch_decode",
                                     "decode_upload", "prefill_merge"};
  FT_REQUIRE(fi_admin_preset_count() >= 3);
  for (int p = 0; p < fi_admin_preset_count(); p++) {
    const char *name = fi_admin_preset_name(p);
    FT_REQUIRE(name && fi_admin_preset_about(p));
    for (int a = 0; a < 3; a++) {
      fi_preset_config c[256];
      int n = -1;
      FT_REQUIRE(fi_admin_preset_configs(name, archs[a], c, 256, &n) == FI_OK, "%s %s: %s", name, archs[a],
                 fi_last_error());
      FT_CHECK(n > 10 && n <= 256, "%s %s: %d configurations", name, archs[a], n);
      /* DeepSeek-V3's attention is MLA, not this library's yet: its step has the rest. */
      const int mla = strcmp(name, "deepseek-v3") == 0;
      const char *op;
      char shape[256];
      const int moe = fi_admin_preset_tune_job(name, 0, 1, &op, shape, sizeof shape) == 0 && strcmp(op, "moe_gemm") == 0;
      for (size_t s = 0; s < sizeof step / sizeof *step; s++) {
        int found = 0;
        for (int i = 0; i < n; i++) found |= strcmp(c[i].op, step[s]) == 0;
        const int attention = s >= 2 && strcmp(step[s], "act_and_mul") && strcmp(step[s], "sampling");
        FT_CHECK(found == !(mla && attention), "%s %s: %s kernel %s", name, archs[a], step[s],
                 found ? "where none belongs" : "missing");
      }
      /* A mixture-of-experts model: routing, the sort's two, the expert GEMMs (wgmma among
       * them on Hopper), the finalize. */
      static const char *const moe_ops[] = {"moe_routing", "moe_sort", "moe_gemm", "moe_combine", "moe_gemm_sm90"};
      for (int s = 0; s < 5; s++) {
        int found = 0;
        for (int i = 0; i < n; i++) found += strcmp(c[i].op, moe_ops[s]) == 0;
        const int want = moe && (s < 4 || a == 0);
        FT_CHECK(want ? found >= (s == 1 ? 2 : 1) : !found, "%s %s: %d %s kernels", name, archs[a], found, moe_ops[s]);
      }
      /* prefill: the wgmma kernel on Hopper, mma.sync elsewhere */
      int wg = 0, mma = 0;
      for (int i = 0; i < n; i++) {
        wg += strcmp(c[i].op, "batch_prefill_sm90") == 0;
        mma += strcmp(c[i].op, "batch_prefill") == 0;
        FT_CHECK(c[i].idx >= 0 && c[i].idx < fi_admin_config_count(c[i].op), "%s idx %d", c[i].op, c[i].idx);
        for (int j = 0; j < i; j++)
          FT_CHECK(!(c[j].idx == c[i].idx && strcmp(c[j].op, c[i].op) == 0), "%s: %s #%d twice", name, c[i].op,
                   c[i].idx);
      }
      FT_CHECK(mla ? wg == 0 && mma == 0 : a == 0 ? wg > 0 : wg == 0 && mma > 0,
               "%s %s: %d wgmma and %d mma.sync prefill kernels", name, archs[a], wg, mma);
      /* the count alone, then too small a buffer: the count is still the whole */
      int m = -1;
      FT_CHECK(fi_admin_preset_configs(name, archs[a], NULL, 0, &m) == FI_OK && m == n, "count %d vs %d", m, n);
      FT_CHECK(fi_admin_preset_configs(name, archs[a], c, 3, &m) == FI_OK && m == n, "short buffer %d vs %d", m, n);
    }
  }
  int n;
  FT_CHECK(fi_admin_preset_configs("llama-9", "sm_90", NULL, 0, &n) == FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "llama-9"),
           "%s", fi_last_error());
  FT_CHECK(fi_admin_preset_configs("llama3-8b", "sm_1", NULL, 0, &n) == FI_ERR_INVALID_ARGUMENT &&
               strstr(fi_last_error(), "sm_1"),
           "%s", fi_last_error());
  FT_CHECK(fi_admin_preset_name(fi_admin_preset_count()) == NULL);
  if (!compile_everything()) return;
  fi_preset_config c[256];
  FT_REQUIRE(fi_admin_preset_configs("llama3-8b", "sm_90", c, 256, &n) == FI_OK);
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  fi_runtime *rt;
  FT_REQUIRE(fi_runtime_create(&o, &rt) == FI_OK);
  for (int i = 0; i < n; i++) {
    fi_prewarm_result r;
    double ms;
    FT_CHECK(fi_admin_prewarm(rt, c[i].op, c[i].idx, "sm_90", &r, &ms) == FI_OK, "%s #%d: %s", c[i].op,
             c[i].idx, fi_last_error());
  }
  fi_runtime_destroy(rt);
}
