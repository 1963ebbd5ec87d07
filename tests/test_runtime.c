/* test_runtime.c: the runtime with the real NVRTC and SQLite: where the cache lives
 * and with which modes, the fallback to memory, prewarm and cache hits (without
 * loading NVRTC), single flight in a process, two processes on one file, logging,
 * a compiler fault injected through the NVRTC entry-point table, and a store
 * that fails to write. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fi_admin.h"
#include "ft.h"
#include "jit_compiler.h"
#include "jit_fault.h"
#include "ops_norm.h"
#include "rt_internal.h"

/* ---- helpers ---- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

/* A fresh directory under /tmp; td_end removes it with everything in it. */
static void td_begin(char dir[64]) {
  strcpy(dir, "/tmp/fi_rt_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(2);
  }
}
static void td_end(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* The variables that steer the runtime, saved and restored around a test. */
static const char *const env_names[] = {"FI_CACHE_PATH", "XDG_CACHE_HOME", "HOME",
                                        "FI_LOG_LEVEL",  "FI_CACHE_JOURNAL"};
#define NENV 5
typedef struct env_saved {
  char *v[NENV];
} env_saved;

static void env_save(env_saved *e) {
  for (int i = 0; i < NENV; i++) {
    const char *v = getenv(env_names[i]);
    e->v[i] = v ? strdup(v) : NULL;
  }
}
static void env_restore(env_saved *e) {
  for (int i = 0; i < NENV; i++) {
    if (e->v[i])
      setenv(env_names[i], e->v[i], 1);
    else
      unsetenv(env_names[i]);
    free(e->v[i]);
    e->v[i] = NULL;
  }
}

/* stderr into an unlinked temporary file; capture_end gives back what was
 * written (malloc'ed). The library writes its log with write(2). */
typedef struct capture {
  int saved, fd;
} capture;

static int capture_begin(capture *c) {
  char path[] = "/tmp/fi_rt_stderr_XXXXXX";
  fflush(stderr);
  c->fd = mkstemp(path);
  if (c->fd < 0) return -1;
  unlink(path);
  c->saved = dup(2);
  if (c->saved < 0 || dup2(c->fd, 2) < 0) return -1;
  return 0;
}

static char *capture_end(capture *c) {
  fflush(stderr);
  dup2(c->saved, 2);
  close(c->saved);
  off_t n = lseek(c->fd, 0, SEEK_END);
  char *buf = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (!buf) abort();
  ssize_t got = n > 0 ? pread(c->fd, buf, (size_t)n, 0) : 0;
  buf[got > 0 ? got : 0] = 0;
  close(c->fd);
  return buf;
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

static fi_runtime *runtime_at(const char *path, int log_level) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = path;
  o.log_level = log_level;
  fi_runtime *rt = NULL;
  if (fi_runtime_create(&o, &rt) != FI_OK) return NULL;
  return rt;
}

static int file_mode(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (int)(sb.st_mode & 07777) : -1;
}
static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static int count_cb(const fi_cache_entry *e, void *user) {
  (void)e;
  ++*(int *)user;
  return 0;
}
static int list_count(fi_runtime *rt) {
  int n = 0;
  return fi_admin_list(rt, NULL, NULL, count_cb, &n) == FI_OK ? n : -1;
}

static const char *result_name(fi_prewarm_result r) {
  return r == FI_PREWARM_COMPILED ? "COMPILED"
         : r == FI_PREWARM_CACHED ? "CACHED"
         : r == FI_PREWARM_WAITED ? "WAITED"
                                  : "?";
}

/* Is any NVRTC library mapped into this process? */
static int nvrtc_loaded(void) {
  const char *names[] = {getenv("FI_NVRTC_LIBRARY"), "libnvrtc.so.13", "libnvrtc.so.12",
                         "libnvrtc.so"};
  for (int i = 0; i < 4; i++) {
    if (!names[i] || !names[i][0]) continue;
    void *h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
    if (h) {
      dlclose(h);
      return 1;
    }
  }
  return 0;
}

/* The key of the cache-hit test: what fi_rmsnorm picks for bf16 rows of 4096. */
static void hit_key(jit_key *k) { jit_rmsnorm_select(JIT_DT_BF16, 8, 4096, k); }

/* The tests set what they need; variables from the caller's environment
 * that change where kernels go or what is printed are removed first. */
__attribute__((constructor)) static void clean_environment(void) {
  const char *drop[] = {"FI_CACHE_SYSTEM_PATH", "FI_CACHE_JOURNAL", "FI_CACHE_MAX_BYTES",
                        "FI_CACHE_UMASK",       "FI_LOG_LEVEL",     "FI_CACHE_CLAIM_TIMEOUT"};
  for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) unsetenv(drop[i]);
}

/* ---- helper mode: this program re-executed with FI_TEST_RUNTIME_HELPER set ---- */

/* In a fresh process (nothing loaded yet): a cache hit through the runtime's
 * lookup must not load NVRTC. Returns an exit code (0: all good). */
static int helper_hit_without_nvrtc(const char *db) {
  if (!db) return 20;
  if (nvrtc_loaded()) return 21; /* the check below would mean nothing */
  fi_runtime *rt = runtime_at(db, 0);
  if (!rt) return 22;
  jit_key k;
  hit_key(&k);
  cache_record rec;
  memset(&rec, 0, sizeof rec);
  fi_prewarm_result r = (fi_prewarm_result)-1;
  fi_status st = rt_binary_ensure(rt, &k, "sm_90", 0, &r, NULL, &rec);
  if (st != FI_OK) {
    fprintf(stderr, "helper: rt_binary_ensure: %s: %s\n", fi_status_string(st), fi_last_error());
    return 23;
  }
  int rc = 0;
  fi_admin_stats s;
  if (r != FI_PREWARM_CACHED)
    rc = 24;
  else if (!rec.binary || rec.bytes == 0 || !rec.compiler || strncmp(rec.compiler, "nvrtc-", 6))
    rc = 25;
  else if (nvrtc_loaded())
    rc = 26; /* the bug this test is about */
  else if (fi_admin_stats_get(rt, &s) != FI_OK || s.compiles != 0 || s.cache_hits != 1)
    rc = 27;
  cache_record_free(&rec);
  fi_runtime_destroy(rt);
  if (rc) return rc;
  if (nvrtc_loaded()) return 28;
  /* Control: the check does see NVRTC once it is loaded. */
  char err[1024];
  if (jit_compiler_for_arch("sm_90")->load(getenv("FI_NVRTC_LIBRARY"), err, sizeof err) != 0) {
    fprintf(stderr, "helper: NVRTC cannot be loaded: %s\n", err);
    return 29;
  }
  return nvrtc_loaded() ? 0 : 30;
}

__attribute__((constructor)) static void helper_mode(void) {
  const char *mode = getenv("FI_TEST_RUNTIME_HELPER");
  if (!mode) return;
  int rc = 99;
  if (strcmp(mode, "hit_without_nvrtc") == 0) rc = helper_hit_without_nvrtc(getenv("FI_TEST_DB"));
  fflush(stderr);
  _exit(rc);
}

/* Runs this program again in helper mode; returns its exit status or -1. */
static int run_helper(const char *mode, const char *db) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setenv("FI_TEST_RUNTIME_HELPER", mode, 1);
    setenv("FI_TEST_DB", db, 1);
    execl("/proc/self/exe", "test_runtime", "__helper__", (char *)NULL);
    _exit(98);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- where the cache lives ---- */

/* One prewarm through a runtime whose options name no path; returns the
 * path stats reports (in out) and whether the prewarm compiled. */
static int prewarm_default_path(char *out, size_t n, fi_options *opts) {
  fi_runtime *rt = NULL;
  if (fi_runtime_create(opts, &rt) != FI_OK) return -1;
  fi_prewarm_result r = (fi_prewarm_result)-1;
  fi_status st = fi_admin_prewarm(rt, "rmsnorm", 0, "sm_90", &r, NULL);
  fi_admin_stats s;
  int ok = st == FI_OK && fi_admin_stats_get(rt, &s) == FI_OK && !s.fallback && s.entries == 1;
  if (ok) snprintf(out, n, "%s", s.path);
  if (!ok) fprintf(stderr, "  prewarm: %s: %s\n", fi_status_string(st), fi_last_error());
  fi_runtime_destroy(rt);
  return ok && r == FI_PREWARM_COMPILED ? 0 : -1;
}

FT_TEST(cache_path_resolution_and_modes) {
  char d[64], p[256], got[4096], q[256];
  td_begin(d);
  env_saved env;
  env_save(&env);
  mode_t old_umask = umask(022);
  unsetenv("FI_LOG_LEVEL");
  unsetenv("FI_CACHE_JOURNAL");
  snprintf(p, sizeof p, "%s/home", d);
  mkdir(p, 0755);
  chmod(p, 0755);

  char fip[256], xdg_db[256], home_db[256];
  snprintf(fip, sizeof fip, "%s/fip/sub/k.db", d);
  snprintf(xdg_db, sizeof xdg_db, "%s/xdg/fi_runtime/kernels.db", d);
  snprintf(home_db, sizeof home_db, "%s/home/.cache/fi_runtime/kernels.db", d);
  setenv("FI_CACHE_PATH", fip, 1);
  snprintf(p, sizeof p, "%s/xdg", d);
  setenv("XDG_CACHE_HOME", p, 1);
  snprintf(p, sizeof p, "%s/home", d);
  setenv("HOME", p, 1);

  /* 1. FI_CACHE_PATH wins (NULL options entirely). */
  FT_CHECK(prewarm_default_path(got, sizeof got, NULL) == 0, "FI_CACHE_PATH step");
  FT_CHECK(strcmp(got, fip) == 0, "stats path %s, want %s", got, fip);
  FT_CHECK(exists(fip) && file_mode(fip) == 0600, "%s mode %o", fip, file_mode(fip));
  snprintf(q, sizeof q, "%s/fip", d);
  FT_CHECK(file_mode(q) == 0700, "%s mode %o", q, file_mode(q));
  snprintf(q, sizeof q, "%s/fip/sub", d);
  FT_CHECK(file_mode(q) == 0700, "%s mode %o", q, file_mode(q));
  FT_CHECK(!exists(xdg_db) && !exists(home_db), "other candidates touched");

  /* 2. FI_CACHE_PATH empty counts as unset: $XDG_CACHE_HOME/fi_runtime/kernels.db. */
  setenv("FI_CACHE_PATH", "", 1);
  fi_options o;
  fi_options_init(&o);
  o.log_level = 0;
  FT_CHECK(prewarm_default_path(got, sizeof got, &o) == 0, "XDG step");
  FT_CHECK(strcmp(got, xdg_db) == 0, "stats path %s, want %s", got, xdg_db);
  FT_CHECK(exists(xdg_db) && file_mode(xdg_db) == 0600, "%s mode %o", xdg_db, file_mode(xdg_db));
  snprintf(q, sizeof q, "%s/xdg", d);
  FT_CHECK(file_mode(q) == 0700, "%s mode %o", q, file_mode(q));
  snprintf(q, sizeof q, "%s/xdg/fi_runtime", d);
  FT_CHECK(file_mode(q) == 0700, "%s mode %o", q, file_mode(q));
  /* SQLite's -wal and -shm follow the file's mode. */
  const char *sfx[2] = {"-wal", "-shm"};
  for (int i = 0; i < 2; i++) {
    snprintf(q, sizeof q, "%s%s", xdg_db, sfx[i]);
    FT_CHECK(!exists(q) || file_mode(q) == 0600, "%s mode %o", q, file_mode(q));
  }
  FT_CHECK(!exists(home_db), "HOME candidate touched");

  /* 3. Neither: $HOME/.cache/fi_runtime/kernels.db; $HOME itself keeps its mode. */
  unsetenv("FI_CACHE_PATH");
  unsetenv("XDG_CACHE_HOME");
  FT_CHECK(prewarm_default_path(got, sizeof got, &o) == 0, "HOME step");
  FT_CHECK(strcmp(got, home_db) == 0, "stats path %s, want %s", got, home_db);
  FT_CHECK(exists(home_db) && file_mode(home_db) == 0600, "%s mode %o", home_db,
           file_mode(home_db));
  snprintf(q, sizeof q, "%s/home/.cache", d);
  FT_CHECK(file_mode(q) == 0700, "%s mode %o", q, file_mode(q));
  snprintf(q, sizeof q, "%s/home/.cache/fi_runtime", d);
  FT_CHECK(file_mode(q) == 0700, "%s mode %o", q, file_mode(q));
  snprintf(q, sizeof q, "%s/home", d);
  FT_CHECK(file_mode(q) == 0755, "existing %s changed to mode %o", q, file_mode(q));

  /* 4. The option wins over every variable. */
  setenv("FI_CACHE_PATH", fip, 1);
  snprintf(q, sizeof q, "%s/given.db", d);
  o.cache_path = q;
  FT_CHECK(prewarm_default_path(got, sizeof got, &o) == 0, "option step");
  FT_CHECK(strcmp(got, q) == 0, "stats path %s, want %s", got, q);
  FT_CHECK(file_mode(q) == 0600, "%s mode %o", q, file_mode(q));

  umask(old_umask);
  env_restore(&env);
  td_end(d);
}

static int tree_entries;
static char tree_names[4][256];
static int count_tree_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  if (tree_entries < 4) snprintf(tree_names[tree_entries], sizeof tree_names[0], "%s", p);
  tree_entries++;
  return 0;
}

FT_TEST(memory_cache_creates_no_file) {
  char d[64], p[256], cwd[4096];
  td_begin(d);
  env_saved env;
  env_save(&env);
  FT_REQUIRE(getcwd(cwd, sizeof cwd) != NULL);
  snprintf(p, sizeof p, "%s/cwd", d);
  mkdir(p, 0700);
  FT_REQUIRE(chdir(p) == 0);
  snprintf(p, sizeof p, "%s/home", d);
  setenv("HOME", p, 1);
  snprintf(p, sizeof p, "%s/xdg", d);
  setenv("XDG_CACHE_HOME", p, 1);

  for (int way = 0; way < 2; way++) {
    /* way 0: FI_CACHE_PATH=":memory:" with no option; way 1: the option. */
    if (way == 0)
      setenv("FI_CACHE_PATH", ":memory:", 1);
    else
      unsetenv("FI_CACHE_PATH");
    fi_runtime *a = runtime_at(way == 0 ? NULL : ":memory:", 0);
    fi_runtime *b = runtime_at(way == 0 ? NULL : ":memory:", 0);
    FT_REQUIRE(a && b);
    fi_prewarm_result r1 = -1, r2 = -1, r3 = -1;
    FT_CHECK(fi_admin_prewarm(a, "rmsnorm", 0, "sm_90", &r1, NULL) == FI_OK, "%s", fi_last_error());
    FT_CHECK(fi_admin_prewarm(a, "rmsnorm", 0, "sm_90", &r2, NULL) == FI_OK, "%s", fi_last_error());
    /* Two memory caches are two caches. */
    FT_CHECK(fi_admin_prewarm(b, "rmsnorm", 0, "sm_90", &r3, NULL) == FI_OK, "%s", fi_last_error());
    FT_CHECK(r1 == FI_PREWARM_COMPILED && r2 == FI_PREWARM_CACHED && r3 == FI_PREWARM_COMPILED,
             "way %d: %s %s %s", way, result_name(r1), result_name(r2), result_name(r3));
    fi_admin_stats s;
    FT_REQUIRE(fi_admin_stats_get(a, &s) == FI_OK);
    FT_CHECK(strcmp(s.path, ":memory:") == 0 && !s.fallback && s.entries == 1,
             "way %d: path %s fallback %d entries %lld", way, s.path, s.fallback,
             (long long)s.entries);
    FT_CHECK(list_count(a) == 1, "way %d: %d listed", way, list_count(a));
    fi_runtime_destroy(a);
    fi_runtime_destroy(b);
  }
  FT_CHECK(chdir(cwd) == 0);
  /* Only d and d/cwd exist: no ":memory:" file, no -wal, nothing under HOME or XDG. */
  tree_entries = 0;
  nftw(d, count_tree_cb, 16, FTW_PHYS);
  FT_CHECK(tree_entries == 2, "%d entries under %s: %s, %s, %s, %s", tree_entries, d,
           tree_names[0], tree_names[1], tree_names[2], tree_names[3]);
  FT_CHECK(!exists(":memory:"), "a file named :memory: in %s", cwd);
  env_restore(&env);
  td_end(d);
}

/* Prewarms on a runtime over an unusable path; returns the captured stderr. */
static char *prewarm_unusable(const char *path, int log_level, int *fallback, int *ok) {
  capture c;
  if (capture_begin(&c) != 0) return NULL;
  fi_runtime *rt = runtime_at(path, log_level);
  fi_prewarm_result r1 = -1, r2 = -1, r3 = -1;
  fi_status s1 = FI_ERR_INTERNAL, s2 = FI_ERR_INTERNAL, s3 = FI_ERR_INTERNAL;
  fi_admin_stats s;
  memset(&s, 0, sizeof s);
  char msg[512] = "";
  if (rt) {
    s1 = fi_admin_prewarm(rt, "rmsnorm", 0, "sm_90", &r1, NULL);
    s2 = fi_admin_prewarm(rt, "rmsnorm", 0, "sm_90", &r2, NULL);
    s3 = fi_admin_prewarm(rt, "rmsnorm", 1, "sm_90", &r3, NULL);
    if (fi_admin_stats_get(rt, &s) != FI_OK) s.fallback = -1;
    snprintf(msg, sizeof msg, "%s", fi_last_error());
  }
  char *out = capture_end(&c);
  *fallback = s.fallback;
  *ok = rt && s1 == FI_OK && s2 == FI_OK && s3 == FI_OK && r1 == FI_PREWARM_COMPILED &&
        r2 == FI_PREWARM_CACHED && r3 == FI_PREWARM_COMPILED && s.entries == 2 &&
        s.path && strcmp(s.path, path) == 0;
  if (!*ok)
    fprintf(stderr, "  %s: %s %s %s / %s %s %s, entries %lld: %s\n", path, fi_status_string(s1),
            fi_status_string(s2), fi_status_string(s3), result_name(r1), result_name(r2),
            result_name(r3), (long long)s.entries, msg);
  fi_runtime_destroy(rt);
  return out;
}

FT_TEST(unusable_cache_falls_back_to_memory) {
  char d[64], file[128], path[256];
  td_begin(d);
  env_saved env;
  env_save(&env);
  unsetenv("FI_LOG_LEVEL");
  snprintf(file, sizeof file, "%s/file", d);
  FILE *f = fopen(file, "w");
  FT_REQUIRE(f != NULL);
  fputs("x", f);
  fclose(f);
  snprintf(path, sizeof path, "%s/kernels.db", file);

  int fallback = 0, ok = 0;
  char *err = prewarm_unusable(path, RT_LOG_WARN, &fallback, &ok);
  FT_REQUIRE(err != NULL);
  FT_CHECK(ok, "prewarms on the fallback store");
  FT_CHECK(fallback == 1, "stats.fallback %d", fallback);
  FT_CHECK(count_of(err, "memory") == 1, "'memory' %d times in: %s", count_of(err, "memory"), err);
  FT_CHECK(strstr(err, path) != NULL, "warning does not name %s: %s", path, err);
  FT_CHECK(count_of(err, "\n") == 1, "more than the one warning line: %s", err);
  free(err);
  struct stat sb;
  FT_CHECK(stat(file, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 1, "%s changed", file);

  env_restore(&env);
  td_end(d);
}

/* FI_LOG_LEVEL=off (or 0), or an explicit log_level 0: nothing on stderr, not
 * even the fallback warning or a failed compile's error. The compile failure
 * is injected (nvrtcGetCUBIN does not fail for real here): see
 * nvrtc_getcubin_fault_is_a_compile_error. */
static int fail_getcubin(void *prog, char *out) {
  (void)prog, (void)out;
  return 1; /* NVRTC_ERROR_OUT_OF_MEMORY */
}

FT_TEST(log_level_off_prints_nothing) {
  char d[64], file[128], path[256];
  td_begin(d);
  env_saved env;
  env_save(&env);
  snprintf(file, sizeof file, "%s/file", d);
  FILE *f = fopen(file, "w");
  FT_REQUIRE(f != NULL);
  fclose(f);
  snprintf(path, sizeof path, "%s/kernels.db", file);
  const char *levels[3] = {"off", "0", "debug"};
  for (int i = 0; i < 3; i++) {
    setenv("FI_LOG_LEVEL", levels[i], 1);
    int opt_level = i == 2 ? 0 : -1; /* the option wins over FI_LOG_LEVEL=debug */
    int fallback = 0, ok = 0;
    char *err = prewarm_unusable(path, opt_level, &fallback, &ok);
    FT_REQUIRE(err != NULL);
    FT_CHECK(ok && fallback == 1, "FI_LOG_LEVEL=%s: ok %d fallback %d", levels[i], ok, fallback);
    FT_CHECK(err[0] == 0, "FI_LOG_LEVEL=%s, option %d: printed: %s", levels[i], opt_level, err);
    free(err);

    /* A compile failure (NVRTC is loaded by now) is not logged either. */
    capture c;
    FT_REQUIRE(capture_begin(&c) == 0);
    fi_runtime *rt = runtime_at(path, opt_level);
    void *old = NULL;
    int hooked = rt && jit_nvrtc_fault("nvrtcGetCUBIN", (void *)fail_getcubin, &old) == 0;
    fi_status st = rt ? fi_admin_prewarm(rt, "rmsnorm", 2, "sm_90", NULL, NULL) : FI_ERR_INTERNAL;
    if (hooked) jit_nvrtc_fault("nvrtcGetCUBIN", old, NULL);
    fi_runtime_destroy(rt);
    err = capture_end(&c);
    FT_CHECK(hooked && st == FI_ERR_COMPILE, "FI_LOG_LEVEL=%s: %s", levels[i], fi_status_string(st));
    FT_CHECK(err[0] == 0, "FI_LOG_LEVEL=%s, option %d: printed: %s", levels[i], opt_level, err);
    free(err);
  }
  /* Control: at the default level the same fallback is reported. */
  unsetenv("FI_LOG_LEVEL");
  int fallback = 0, ok = 0;
  char *err = prewarm_unusable(path, -1, &fallback, &ok);
  FT_REQUIRE(err != NULL);
  FT_CHECK(count_of(err, "memory") == 1, "default level: %s", err);
  free(err);
  env_restore(&env);
  td_end(d);
}

FT_TEST(log_level_debug_logs_compile_with_key) {
  env_saved env;
  env_save(&env);
  const char *levels[3] = {"debug", "DEBUG", "4"};
  for (int i = 0; i < 3; i++) {
    setenv("FI_LOG_LEVEL", levels[i], 1);
    int idx = 3 + i;
    char key[512];
    FT_REQUIRE(fi_admin_config_key("rmsnorm", idx, key, sizeof key) == FI_OK);
    capture c;
    FT_REQUIRE(capture_begin(&c) == 0);
    fi_runtime *rt = runtime_at(":memory:", -1);
    fi_prewarm_result r1 = -1, r2 = -1;
    fi_status s1 = rt ? fi_admin_prewarm(rt, "rmsnorm", idx, "sm_90", &r1, NULL) : FI_ERR_INTERNAL;
    char *first = capture_end(&c);
    FT_REQUIRE(capture_begin(&c) == 0);
    fi_status s2 = rt ? fi_admin_prewarm(rt, "rmsnorm", idx, "sm_90", &r2, NULL) : FI_ERR_INTERNAL;
    fi_runtime_destroy(rt);
    char *second = capture_end(&c);
    FT_CHECK(s1 == FI_OK && r1 == FI_PREWARM_COMPILED, "%s: %s %s", levels[i],
             fi_status_string(s1), result_name(r1));
    FT_CHECK(s2 == FI_OK && r2 == FI_PREWARM_CACHED, "%s: %s %s", levels[i],
             fi_status_string(s2), result_name(r2));
    /* One line with both "compiled" and the canonical key. */
    int found = 0;
    for (char *line = strtok(first, "\n"); line; line = strtok(NULL, "\n"))
      if (strstr(line, "compiled") && strstr(line, key) && strstr(line, "sm_90")) found++;
    FT_CHECK(found == 1, "FI_LOG_LEVEL=%s: %d lines with 'compiled' and %s", levels[i], found, key);
    FT_CHECK(strstr(second, "compiled ") == NULL, "a cache hit logged a compile: %s", second);
    free(first);
    free(second);
  }
  env_restore(&env);
}

/* ---- prewarm and the cache ---- */

FT_TEST(prewarm_compiled_then_cached_across_runtimes) {
  char d[64], db[256], key[512];
  td_begin(d);
  snprintf(db, sizeof db, "%s/kernels.db", d);
  FT_REQUIRE(fi_admin_config_key("rmsnorm", 5, key, sizeof key) == FI_OK);
  fi_runtime *rt = runtime_at(db, 0);
  FT_REQUIRE(rt != NULL);
  fi_prewarm_result r = -1;
  double ms = -1;
  FT_CHECK(fi_admin_prewarm(rt, "rmsnorm", 5, "sm_90", &r, &ms) == FI_OK, "%s", fi_last_error());
  FT_CHECK(r == FI_PREWARM_COMPILED && ms > 0, "first: %s in %g ms", result_name(r), ms);
  FT_CHECK(fi_admin_prewarm(rt, "rmsnorm", 5, "sm_90", &r, &ms) == FI_OK, "%s", fi_last_error());
  FT_CHECK(r == FI_PREWARM_CACHED && ms == 0, "second: %s in %g ms", result_name(r), ms);
  fi_admin_stats s;
  FT_REQUIRE(fi_admin_stats_get(rt, &s) == FI_OK);
  FT_CHECK(s.compiles == 1 && s.entries == 1 && s.compile_failures == 0 && s.compile_ms > 0,
           "compiles %lld entries %lld failures %lld", (long long)s.compiles,
           (long long)s.entries, (long long)s.compile_failures);
  fi_runtime_destroy(rt);

  /* A new runtime (as a new process would) over the same file. */
  rt = runtime_at(db, 0);
  FT_REQUIRE(rt != NULL);
  r = -1;
  FT_CHECK(fi_admin_prewarm(rt, "rmsnorm", 5, "sm_90", &r, &ms) == FI_OK, "%s", fi_last_error());
  FT_CHECK(r == FI_PREWARM_CACHED, "new runtime: %s", result_name(r));
  FT_REQUIRE(fi_admin_stats_get(rt, &s) == FI_OK);
  FT_CHECK(s.compiles == 0 && s.entries == 1 && s.cache_hits == 1 && !s.fallback,
           "compiles %lld entries %lld hits %lld fallback %d", (long long)s.compiles,
           (long long)s.entries, (long long)s.cache_hits, s.fallback);
  /* Another arch is another entry. */
  FT_CHECK(fi_admin_prewarm(rt, "rmsnorm", 5, "sm_80", &r, &ms) == FI_OK, "%s", fi_last_error());
  FT_CHECK(r == FI_PREWARM_COMPILED, "sm_80: %s", result_name(r));
  FT_CHECK(list_count(rt) == 2, "%d listed", list_count(rt));
  fi_runtime_destroy(rt);
  td_end(d);
}

FT_TEST(cache_hit_does_not_load_nvrtc) {
  char d[64], db[256];
  td_begin(d);
  snprintf(db, sizeof db, "%s/kernels.db", d);
  fi_runtime *rt = runtime_at(db, 0);
  FT_REQUIRE(rt != NULL);
  jit_key k;
  hit_key(&k);
  fi_prewarm_result r = -1;
  fi_status st = rt_binary_ensure(rt, &k, "sm_90", 1, &r, NULL, NULL);
  fi_runtime_destroy(rt);
  FT_REQUIRE(st == FI_OK && r == FI_PREWARM_COMPILED, "prewarm: %s %s: %s", fi_status_string(st),
             result_name(r), fi_last_error());
  /* A fresh process (this program again): nothing has loaded NVRTC there. */
  int rc = run_helper("hit_without_nvrtc", db);
  FT_CHECK(rc != 26, "a cache hit loaded NVRTC");
  FT_CHECK(rc == 0, "helper exited with %d (see helper_hit_without_nvrtc)", rc);
  td_end(d);
}

typedef struct sf_thread {
  fi_runtime *rt;
  pthread_barrier_t *bar;
  fi_status st;
  fi_prewarm_result r;
  char err[256];
} sf_thread;

static void *sf_worker(void *arg) {
  sf_thread *t = arg;
  pthread_barrier_wait(t->bar);
  t->r = (fi_prewarm_result)-1;
  t->st = fi_admin_prewarm(t->rt, "rmsnorm", 9, "sm_90", &t->r, NULL);
  snprintf(t->err, sizeof t->err, "%s", t->st == FI_OK ? "" : fi_last_error());
  return NULL;
}

FT_TEST(single_flight_between_threads) {
  char d[64], db[256];
  td_begin(d);
  snprintf(db, sizeof db, "%s/kernels.db", d);
  fi_runtime *rt = runtime_at(db, 0);
  FT_REQUIRE(rt != NULL);
  enum { N = 8 };
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, N);
  sf_thread t[N];
  pthread_t tid[N];
  int started = 0;
  for (int i = 0; i < N; i++) {
    memset(&t[i], 0, sizeof t[i]);
    t[i].rt = rt, t[i].bar = &bar;
    if (pthread_create(&tid[i], NULL, sf_worker, &t[i]) == 0) started++;
  }
  FT_REQUIRE(started == N, "only %d threads", started); /* the barrier would hang */
  for (int i = 0; i < N; i++) pthread_join(tid[i], NULL);
  pthread_barrier_destroy(&bar);
  int compiled = 0, other = 0;
  for (int i = 0; i < N; i++) {
    FT_CHECK(t[i].st == FI_OK, "thread %d: %s: %s", i, fi_status_string(t[i].st), t[i].err);
    if (t[i].r == FI_PREWARM_COMPILED)
      compiled++;
    else if (t[i].r == FI_PREWARM_CACHED || t[i].r == FI_PREWARM_WAITED)
      other++;
  }
  FT_CHECK(compiled == 1 && other == N - 1, "%d compiled, %d cached or waited", compiled, other);
  fi_admin_stats s;
  FT_REQUIRE(fi_admin_stats_get(rt, &s) == FI_OK);
  FT_CHECK(s.compiles == 1 && s.entries == 1, "compiles %lld entries %lld", (long long)s.compiles,
           (long long)s.entries);
  fi_runtime_destroy(rt);
  td_end(d);
}

/* What each prewarming process reports back through shared memory. */
typedef struct proc_report {
  int done, created, failed, compiled, cached, waited, fallback;
  int64_t entries;
  char first_error[512];
} proc_report;

/* Both processes prewarm every configuration. The first SAME_ORDER ones in
 * the same order, so both compile the same keys at the same moment and store
 * them into the same rows; then process 0 goes on upwards and process 1 from
 * the last configuration downwards, which halves the time of the rest (each
 * finds most of the other's half cached) and keeps the test within budget
 * under ASan, where NVRTC's allocations are intercepted. */
#define SAME_ORDER 16

static void prewarm_all_child(const char *db, int go_fd, int which, proc_report *rep) {
  char b;
  ssize_t rr = read(go_fd, &b, 1); /* returns 0 when the parent closes its end: go */
  (void)rr;
  fi_runtime *rt = runtime_at(db, RT_LOG_ERROR);
  if (!rt) _exit(3);
  rep->created = 1;
  int n = fi_admin_config_count("rmsnorm");
  for (int step = 0; step < n; step++) {
    int i = step < SAME_ORDER || which == 0 ? step : n - 1 - (step - SAME_ORDER);
    fi_prewarm_result r = (fi_prewarm_result)-1;
    fi_status st = fi_admin_prewarm(rt, "rmsnorm", i, "sm_90", &r, NULL);
    if (st != FI_OK) {
      if (!rep->failed++)
        snprintf(rep->first_error, sizeof rep->first_error, "%d: %s", i, fi_last_error());
    } else if (r == FI_PREWARM_COMPILED) {
      rep->compiled++;
    } else if (r == FI_PREWARM_CACHED) {
      rep->cached++;
    } else {
      rep->waited++;
    }
  }
  fi_admin_stats s;
  if (fi_admin_stats_get(rt, &s) == FI_OK) {
    rep->fallback = s.fallback;
    rep->entries = s.entries;
  } else {
    rep->fallback = -1;
  }
  fi_runtime_destroy(rt);
  rep->done = 1;
  _exit(0);
}

typedef struct key_count {
  char key[256];
  int seen;
} key_count;

static int tally_cb(const fi_cache_entry *e, void *user) {
  key_count *kc = user;
  for (int i = 0; kc[i].key[0]; i++)
    if (strcmp(kc[i].key, e->key) == 0 && strcmp(e->arch, "sm_90") == 0) {
      kc[i].seen++;
      return 0;
    }
  fprintf(stderr, "  unexpected entry %s %s %s\n", e->hash, e->key, e->arch);
  return 0;
}

FT_TEST(two_processes_prewarm_one_file) {
  char d[64], db[256];
  td_begin(d);
  snprintf(db, sizeof db, "%s/shared/kernels.db", d); /* neither file nor directory exists */
  int n = fi_admin_config_count("rmsnorm");
  FT_REQUIRE(n > SAME_ORDER, "%d configurations", n);
  proc_report *rep = mmap(NULL, 2 * sizeof *rep, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  FT_REQUIRE(rep != MAP_FAILED);
  memset(rep, 0, 2 * sizeof *rep);
  int go[2];
  FT_REQUIRE(pipe(go) == 0);
  fflush(NULL);
  pid_t pid[2] = {-1, -1};
  for (int i = 0; i < 2; i++) {
    pid[i] = fork();
    if (pid[i] == 0) {
      close(go[1]);
      prewarm_all_child(db, go[0], i, &rep[i]);
    }
  }
  close(go[0]);
  close(go[1]); /* both start now */
  int status[2] = {-1, -1};
  for (int i = 0; i < 2; i++)
    if (pid[i] > 0) waitpid(pid[i], &status[i], 0);
  for (int i = 0; i < 2; i++) {
    FT_CHECK(pid[i] > 0 && WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0 && rep[i].done,
             "process %d: status 0x%x done %d", i, status[i], rep[i].done);
    FT_CHECK(rep[i].failed == 0, "process %d: %d failed; first: %s", i, rep[i].failed,
             rep[i].first_error);
    FT_CHECK(rep[i].compiled + rep[i].cached + rep[i].waited == n, "process %d: %d+%d+%d of %d", i,
             rep[i].compiled, rep[i].cached, rep[i].waited, n);
    FT_CHECK(rep[i].fallback == 0, "process %d fell back to memory (fallback %d)", i,
             rep[i].fallback);
    FT_CHECK(rep[i].entries == n, "process %d saw %lld entries at its end", i,
             (long long)rep[i].entries);
    fprintf(stderr, "  process %d: %d compiled, %d cached, %d waited\n", i, rep[i].compiled,
            rep[i].cached, rep[i].waited);
  }
  FT_CHECK(rep[0].compiled + rep[1].compiled >= n, "only %d compiles for %d keys",
           rep[0].compiled + rep[1].compiled, n);
  munmap(rep, 2 * sizeof *rep);

  /* Exactly one row per configuration. */
  fi_runtime *rt = runtime_at(db, 0);
  FT_REQUIRE(rt != NULL);
  key_count *kc = calloc((size_t)n + 1, sizeof *kc);
  FT_REQUIRE(kc != NULL);
  for (int i = 0; i < n; i++)
    FT_REQUIRE(fi_admin_config_key("rmsnorm", i, kc[i].key, sizeof kc[i].key) == FI_OK);
  FT_CHECK(fi_admin_list(rt, NULL, NULL, tally_cb, kc) == FI_OK, "%s", fi_last_error());
  int missing = 0, dup = 0;
  for (int i = 0; i < n; i++) {
    if (kc[i].seen == 0 && missing++ < 3) fprintf(stderr, "  missing %s\n", kc[i].key);
    if (kc[i].seen > 1 && dup++ < 3) fprintf(stderr, "  %d rows for %s\n", kc[i].seen, kc[i].key);
  }
  FT_CHECK(missing == 0 && dup == 0, "%d keys missing, %d duplicated", missing, dup);
  fi_admin_stats s;
  FT_REQUIRE(fi_admin_stats_get(rt, &s) == FI_OK);
  FT_CHECK(s.entries == n && list_count(rt) == n, "entries %lld, listed %d, configurations %d",
           (long long)s.entries, list_count(rt), n);
  free(kc);
  fi_runtime_destroy(rt);
  td_end(d);
}

/* ---- a compiler fault ---- */

/* NVRTC never fails nvrtcGetCUBIN after a successful compile on a healthy
 * host, so the failure cannot be produced for real here: the test replaces
 * the resolved entry point with one that returns NVRTC_ERROR_OUT_OF_MEMORY. */
FT_TEST(nvrtc_getcubin_fault_is_a_compile_error) {
  fi_runtime *rt = runtime_at(":memory:", 0);
  FT_REQUIRE(rt != NULL);
  fi_prewarm_result r = -1;
  /* Loads NVRTC, so that the entry below is resolved before it is replaced. */
  FT_REQUIRE(fi_admin_prewarm(rt, "rmsnorm", 0, "sm_90", &r, NULL) == FI_OK, "%s",
             fi_last_error());
  FT_CHECK(jit_nvrtc_fault("nvrtcNoSuchEntry", NULL, NULL) == -1, "unknown entry accepted");
  void *old = NULL;
  FT_REQUIRE(jit_nvrtc_fault("nvrtcGetCUBIN", (void *)fail_getcubin, &old) == 0);
  FT_CHECK(old != NULL && old != (void *)fail_getcubin, "old entry %p", old);
  r = -1;
  fi_status st = fi_admin_prewarm(rt, "rmsnorm", 7, "sm_90", &r, NULL);
  char msg[4096];
  snprintf(msg, sizeof msg, "%s", fi_last_error());
  jit_nvrtc_fault("nvrtcGetCUBIN", old, NULL); /* restore before anything can return */
  FT_CHECK(st == FI_ERR_COMPILE, "got %s: %s", fi_status_string(st), msg);
  FT_CHECK(strstr(msg, "nvrtcGetCUBIN") != NULL, "step not named: %s", msg);
  FT_CHECK(strstr(msg, "op=rmsnorm") != NULL && strstr(msg, "sm_90") != NULL,
           "key or arch not named: %s", msg);
  fi_admin_stats s;
  FT_REQUIRE(fi_admin_stats_get(rt, &s) == FI_OK);
  FT_CHECK(s.compile_failures == 1 && s.entries == 1, "failures %lld entries %lld",
           (long long)s.compile_failures, (long long)s.entries);
  /* Nothing of the failure was kept: the same prewarm now compiles. */
  st = fi_admin_prewarm(rt, "rmsnorm", 7, "sm_90", &r, NULL);
  FT_CHECK(st == FI_OK && r == FI_PREWARM_COMPILED, "after restore: %s %s: %s",
           fi_status_string(st), result_name(r), fi_last_error());
  FT_REQUIRE(fi_admin_stats_get(rt, &s) == FI_OK);
  FT_CHECK(s.entries == 2 && s.compiles == 2, "entries %lld compiles %lld", (long long)s.entries,
           (long long)s.compiles);
  fi_runtime_destroy(rt);
}

/* The store's write fails for real: a file size limit makes every write past
 * 1 KiB fail with EFBIG, as a full disk would. The header promises that
 * prewarm "ensures configuration idx of op is compiled for arch and stored in
 * the cache" (fi-cache prewarm builds files to ship), so a prewarm that
 * returns FI_OK must have put the entry into the file; a store that failed
 * has to be reported (FI_ERR_CACHE). Runs in a child so that the limit stays
 * there. */
typedef struct store_fail_report {
  int stage;
  fi_status st;
  fi_prewarm_result r;
  char err[512];
} store_fail_report;

static int has_key_cb(const fi_cache_entry *e, void *user) {
  if (strcmp(e->key, (const char *)user) == 0) ((char *)user)[0] = '!';
  return 0;
}

FT_TEST(prewarm_reports_a_failed_store) {
  char d[64], db[256], key[512];
  td_begin(d);
  snprintf(db, sizeof db, "%s/kernels.db", d);
  FT_REQUIRE(fi_admin_config_key("rmsnorm", 1, key, sizeof key) == FI_OK);
  store_fail_report *rep = mmap(NULL, sizeof *rep, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  FT_REQUIRE(rep != MAP_FAILED);
  memset(rep, 0, sizeof *rep);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    fi_runtime *rt = runtime_at(db, 0);
    if (!rt || fi_admin_prewarm(rt, "rmsnorm", 0, "sm_90", NULL, NULL) != FI_OK) _exit(3);
    rep->stage = 1;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1024, 1024};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(4);
    rep->r = (fi_prewarm_result)-1;
    rep->st = fi_admin_prewarm(rt, "rmsnorm", 1, "sm_90", &rep->r, NULL);
    snprintf(rep->err, sizeof rep->err, "%s", fi_last_error());
    rep->stage = 2;
    fi_runtime_destroy(rt);
    _exit(0);
  }
  int status = -1;
  FT_REQUIRE(pid > 0 && waitpid(pid, &status, 0) == pid);
  FT_REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0 && rep->stage == 2,
             "child status 0x%x stage %d", status, rep->stage);
  fi_status st = rep->st;
  fi_prewarm_result r = rep->r;
  char err[512];
  snprintf(err, sizeof err, "%s", rep->err);
  munmap(rep, sizeof *rep);
  if (st == FI_OK) {
    /* Success was claimed: the binary must be in the file. */
    fi_runtime *rt = runtime_at(db, 0);
    FT_REQUIRE(rt != NULL);
    FT_CHECK(fi_admin_list(rt, NULL, NULL, has_key_cb, key) == FI_OK, "%s", fi_last_error());
    FT_CHECK(key[0] == '!', "prewarm returned FI_OK (%s) but %s is not in %s", result_name(r),
             key, db);
    fi_runtime_destroy(rt);
  } else {
    FT_CHECK(st == FI_ERR_CACHE, "failed store reported as %s: %s", fi_status_string(st), err);
  }
  td_end(d);
}

/* The device registry: every backend once, each DLPack type to one backend, and what
 * differs between vendors read as capabilities (no GPU needed: arch_caps takes an arch
 * name, and the backends' static fields need no driver). */
FT_TEST(device_registry_and_capabilities) {
  FT_REQUIRE(rt_device_count() >= 2 && rt_device_count() <= RT_MAX_BACKENDS, "%d backends",
             rt_device_count());
  int seen_cuda = 0, seen_hip = 0;
  for (int i = 0; i < rt_device_count(); i++) {
    const rt_device_i *be = rt_device_at(i);
    FT_REQUIRE(be && be->iface_version == RT_DEVICE_IFACE_VERSION, "slot %d", i);
    FT_CHECK(rt_device_slot(be) == i, "%s at slot %d", be->name, rt_device_slot(be));
    FT_CHECK(rt_device_slot_for(be->dlpack_type) == i, "%s's type %d", be->name, be->dlpack_type);
    FT_CHECK(be->warp_size == 32 || be->warp_size == 64, "%s warp %d", be->name, be->warp_size);
    /* The members every backend must fill. */
    FT_CHECK(be->load && be->arch && be->module_load && be->launch && be->create && be->destroy,
             "%s lacks a required member", be->name);
    rt_device_caps c;
    if (strcmp(be->name, "cuda") == 0) {
      seen_cuda = 1;
      FT_CHECK(be->warp_size == 32 && be->scratch_alloc && be->arch_caps);
      be->arch_caps("sm_90", &c);
      FT_CHECK(c.clusters && c.pdl && c.wgmma, "sm_90: %d %d %d", c.clusters, c.pdl, c.wgmma);
      memset(&c, 0, sizeof c);
      be->arch_caps("sm_100", &c);
      FT_CHECK(c.clusters && c.pdl && !c.wgmma, "sm_100: %d %d %d", c.clusters, c.pdl, c.wgmma);
      memset(&c, 0, sizeof c);
      be->arch_caps("sm_80", &c);
      FT_CHECK(!c.clusters && !c.pdl && !c.wgmma, "sm_80: %d %d %d", c.clusters, c.pdl, c.wgmma);
    } else if (strcmp(be->name, "hip") == 0) {
      seen_hip = 1;
      FT_CHECK(be->warp_size == 64);
      /* No pool: the optional members are NULL and the dispatcher answers "go without". */
      FT_CHECK(!be->scratch_alloc && !be->scratch_free);
      void *p = NULL;
      char err[128] = "";
      FT_CHECK(rt_device_scratch_alloc(be, NULL, 0, 64, NULL, &p, err, sizeof err) == 1 && !p);
      FT_CHECK(rt_device_scratch_free(be, NULL, 0, NULL, NULL, err, sizeof err) == -1 && err[0]);
      /* Without arch_caps, the caps are the static fields alone, no device asked. */
      FT_CHECK(rt_device_caps_get(be, NULL, 0, &c, err, sizeof err) == 0);
      FT_CHECK(c.warp_size == 64 && !c.scratch_pool && !c.clusters && !c.pdl && !c.wgmma);
    }
  }
  FT_CHECK(seen_cuda && seen_hip);
  FT_CHECK(rt_device_slot_for(-12345) == -1);
  FT_CHECK(rt_device_at(rt_device_count()) == NULL && rt_device_at(-1) == NULL);
}
