/* test_env.c: the environment read once (runtime/rt_env.c): the strict parsers' cases,
 * a warning naming the variable for every value refused, a relative XDG_CACHE_HOME
 * ignored, and values read at fi_runtime_create (a setenv afterwards changes nothing). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlpack/dlpack.h"
#include "fi_runtime.h"
#include "ft.h"
#include "rt_env.h"
#include "rt_internal.h"

/* Every variable these tests set, cleared before each. */
static const char *const vars[] = {
    "FI_LOG_LEVEL", "FI_CACHE_MAX_BYTES", "FI_CACHE_JOURNAL", "FI_CACHE_CLAIM_TIMEOUT", "FI_CACHE_UMASK",
    "FI_DECODE_WARPS", "FI_DECODE_PIPELINE", "FI_DECODE_SPLIT", "FI_DECODE_PRE_PREFETCH", "FI_PDL",
    "FI_PREFILL_WG", "FI_PREFILL_STAGES", "FI_PREFILL_PERSIST", "FI_SAMPLING_SELECT", "FI_SAMPLING_TOPP",
    "FI_CUDA_LIBRARY", "FI_CACHE_PATH", "XDG_CACHE_HOME", "FI_DECODE_KV_PAIR", "FI_PREFILL_QTILE", "FI_AUTOTUNE",
    "FI_DECODE_TC", "FI_MLA_STAGES"};
static void clear_vars(void) {
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

/* Field by field (a struct's padding is not compared). */
static int same_tuning(const rt_tuning *a, const rt_tuning *b) {
  return a->pdl == b->pdl && a->decode_warps == b->decode_warps && a->decode_pipeline == b->decode_pipeline &&
         a->decode_prefetch == b->decode_prefetch && a->decode_head_prefetch == b->decode_head_prefetch &&
         a->decode_pre_prefetch == b->decode_pre_prefetch && a->decode_evict == b->decode_evict &&
         a->decode_kv_pair == b->decode_kv_pair && a->decode_single_split == b->decode_single_split &&
         a->decode_split == b->decode_split && a->prefill_wgmma == b->prefill_wgmma &&
         a->prefill_qtile == b->prefill_qtile && a->prefill_wg_q == b->prefill_wg_q &&
         a->prefill_wg_kv == b->prefill_wg_kv && a->prefill_ws == b->prefill_ws &&
         a->prefill_stages == b->prefill_stages && a->prefill_persist == b->prefill_persist &&
         a->prefill_persist_cap == b->prefill_persist_cap && a->prefill_split == b->prefill_split &&
         a->sampling_select == b->sampling_select && a->sampling_topp_exact == b->sampling_topp_exact &&
         a->moe_wgmma == b->moe_wgmma && a->autotune == b->autotune && a->decode_tc == b->decode_tc &&
         a->mla_stages == b->mla_stages;
}

static int warned(const rt_env *e, const char *needle) {
  for (int i = 0; i < e->nwarnings; i++)
    if (strstr(e->warnings[i], needle)) return 1;
  return 0;
}

FT_TEST(size_parser_takes_sizes_and_nothing_else) {
  static const struct {
    const char *s;
    int64_t v;
  } ok[] = {{"0", 0},
            {"1048576", 1048576},
            {"2G", (int64_t)2 << 30},
            {"500M", (int64_t)500 << 20},
            {"1k", 1024},
            {"1KiB", 1024},
            {"1kb", 1024},
            {"3T", (int64_t)3 << 40},
            {"16B", 16},
            {"9223372036854775807", INT64_MAX}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    int64_t v = -7;
    FT_CHECK(rt_env_parse_size(ok[i].s, &v) == 0 && v == ok[i].v, "%s: got %lld", ok[i].s, (long long)v);
  }
  /* the cases (hex, fractions, exponents, nan) and their kin */
  static const char *const bad[] = {"0x10", "0.5", "1e-9", "1e30", "nan", "inf", "-1", "+5", " 5", "5 ", "",
                                    "G", "1Q", "1GG", "1iB", "010x", "9223372036854775808",
                                    "8388608T", "99999999999999999999K"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t v = -7;
    FT_CHECK(rt_env_parse_size(bad[i], &v) == -1 && v == -7, "'%s' taken as %lld", bad[i], (long long)v);
  }
  int64_t v = -7;
  FT_CHECK(rt_env_parse_size(NULL, &v) == -1 && v == -7);
}

FT_TEST(int_decimal_level_and_mode_parsers) {
  int64_t v = 0;
  FT_CHECK(rt_env_parse_int("-5", -8, 8, &v) == 0 && v == -5);
  FT_CHECK(rt_env_parse_int("+3", 0, 8, &v) == 0 && v == 3);
  static const char *const bad_int[] = {"9", "-9", "1.0", "0x1", "12a", "", "-", "1e3", " 1",
                                        "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad_int / sizeof bad_int[0]; i++) {
    v = 77;
    FT_CHECK(rt_env_parse_int(bad_int[i], -8, 8, &v) == -1 && v == 77, "'%s' taken", bad_int[i]);
  }
  double d = 0;
  FT_CHECK(rt_env_parse_decimal("1", &d) == 0 && d == 1.0);
  FT_CHECK(rt_env_parse_decimal("0.5", &d) == 0 && d == 0.5);
  FT_CHECK(rt_env_parse_decimal("2.", &d) == 0 && d == 2.0);
  static const char *const bad_dec[] = {"1e3", "-1", ".5", "nan", "inf", "0x1", "1.2.3", "", "1,5"};
  for (size_t i = 0; i < sizeof bad_dec / sizeof bad_dec[0]; i++) {
    d = 77;
    FT_CHECK(rt_env_parse_decimal(bad_dec[i], &d) == -1 && d == 77, "'%s' taken", bad_dec[i]);
  }
  static const struct {
    const char *s;
    int level;
  } lv[] = {{"off", 0}, {"ERROR", 1}, {"warn", 2}, {"Warning", 2}, {"info", 3}, {"debug", 4}, {"0", 0}, {"4", 4}};
  for (size_t i = 0; i < sizeof lv / sizeof lv[0]; i++) {
    int l = -9;
    FT_CHECK(rt_env_parse_level(lv[i].s, &l) == 0 && l == lv[i].level, "%s: %d", lv[i].s, l);
  }
  static const char *const bad_lv[] = {"-1", "5", "garbage", "", "2x", "de bug"};
  for (size_t i = 0; i < sizeof bad_lv / sizeof bad_lv[0]; i++) {
    int l = -9;
    FT_CHECK(rt_env_parse_level(bad_lv[i], &l) == -1 && l == -9, "'%s' taken", bad_lv[i]);
  }
  static const char *const modes[] = {"wal", "delete", NULL};
  int m = -1;
  FT_CHECK(rt_env_parse_mode("delete", modes, &m) == 0 && m == 1);
  m = -1;
  FT_CHECK(rt_env_parse_mode("WAL", modes, &m) == -1 && m == -1);
  FT_CHECK(rt_env_parse_mode("wal ", modes, &m) == -1 && m == -1);
}

/* Every value refused leaves the default and a warning naming its variable; values taken
 * leave none. */
FT_TEST(refused_values_warn_by_name_and_keep_the_default) {
  clear_vars();
  static rt_env e;
  rt_env_read(&e);
  const rt_tuning def = rt_tuning_default();
  FT_CHECK(e.nwarnings == 0, "%d warnings with nothing set: %s", e.nwarnings, e.nwarnings ? e.warnings[0] : "");
  FT_CHECK(e.log_level == -1 && e.max_bytes == -1 && e.claim_timeout_s == -1 && e.umask == -1 && e.journal == 0);
  FT_CHECK(same_tuning(&e.tune, &def));
  static const struct {
    const char *var, *val;
  } bad[] = {{"FI_CACHE_MAX_BYTES", "0x10"},   {"FI_LOG_LEVEL", "-1"},          {"FI_CACHE_JOURNAL", "WAL"},
             {"FI_CACHE_CLAIM_TIMEOUT", "0"},  {"FI_CACHE_UMASK", "008"},       {"FI_DECODE_WARPS", "3"},
             {"FI_DECODE_PIPELINE", "4"},      {"FI_DECODE_SPLIT", "1e30"},     {"FI_DECODE_PRE_PREFETCH", "lots"},
             {"FI_PDL", "off"},                {"FI_PREFILL_WG", "4x64"},       {"FI_PREFILL_STAGES", "four"},
             {"FI_PREFILL_PERSIST", "-2"},     {"FI_SAMPLING_SELECT", "bogus"}, {"FI_SAMPLING_TOPP", "EXACT"},
             {"FI_DECODE_KV_PAIR", "yes"},     {"FI_PREFILL_QTILE", "32"},      {"FI_DECODE_TC", "-1"},
             {"FI_MLA_STAGES", "3"}};
  const int n = (int)(sizeof bad / sizeof bad[0]);
  FT_REQUIRE(n <= RT_ENV_MAX_WARNINGS);
  for (int i = 0; i < n; i++) setenv(bad[i].var, bad[i].val, 1);
  rt_env_free(&e);
  rt_env_read(&e);
  FT_CHECK(e.nwarnings == n, "%d warnings for %d bad values", e.nwarnings, n);
  for (int i = 0; i < n; i++) {
    char needle[96];
    snprintf(needle, sizeof needle, "%s=%s ignored", bad[i].var, bad[i].val);
    FT_CHECK(warned(&e, needle), "no warning '%s'", needle);
  }
  FT_CHECK(e.log_level == -1 && e.max_bytes == -1 && e.claim_timeout_s == -1 && e.umask == -1 && e.journal == 0);
  FT_CHECK(same_tuning(&e.tune, &def), "a refused value changed the tuning");
  /* and good values are taken, silently */
  clear_vars();
  setenv("FI_CACHE_MAX_BYTES", "300K", 1);
  setenv("FI_LOG_LEVEL", "debug", 1);
  setenv("FI_CACHE_JOURNAL", "delete", 1);
  setenv("FI_CACHE_UMASK", "007", 1);
  setenv("FI_DECODE_WARPS", "4", 1);
  setenv("FI_DECODE_SPLIT", "2.5", 1);
  setenv("FI_DECODE_PRE_PREFETCH", "9999999", 1); /* clamped, as documented */
  setenv("FI_PDL", "0", 1);
  setenv("FI_PREFILL_WG", "3x128", 1);
  setenv("FI_PREFILL_STAGES", "7", 1); /* any other number: two stages (README) */
  setenv("FI_PREFILL_PERSIST", "3", 1);
  setenv("FI_SAMPLING_SELECT", "range", 1);
  setenv("FI_SAMPLING_TOPP", "exact", 1);
  setenv("FI_AUTOTUNE", "1", 1);
  setenv("FI_DECODE_TC", "0", 1);
  setenv("FI_MLA_STAGES", "2", 1);
  rt_env_free(&e);
  rt_env_read(&e);
  FT_CHECK(e.nwarnings == 0, "%d warnings: %s", e.nwarnings, e.nwarnings ? e.warnings[0] : "");
  FT_CHECK(e.max_bytes == 300 * 1024 && e.log_level == 4 && e.journal == RT_JOURNAL_DELETE && e.umask == 7);
  FT_CHECK(e.tune.decode_warps == 4 && e.tune.decode_split == 2.5 && e.tune.decode_pre_prefetch == 65536 &&
           e.tune.pdl == 0);
  FT_CHECK(e.tune.prefill_wg_q == 192 && e.tune.prefill_wg_kv == 128 && e.tune.prefill_stages == 2);
  FT_CHECK(e.tune.prefill_persist == RT_PERSIST_CAP && e.tune.prefill_persist_cap == 3);
  FT_CHECK(e.tune.sampling_select == 1 && e.tune.sampling_topp_exact == 1);
  FT_CHECK_EQ_INT(e.tune.autotune, 1);
  FT_CHECK_EQ_INT(rt_tuning_default().autotune, 0);
  FT_CHECK_EQ_INT(e.tune.decode_tc, 0);
  FT_CHECK_EQ_INT(rt_tuning_default().decode_tc, -1);
  FT_CHECK_EQ_INT(e.tune.mla_stages, 2);
  rt_env_free(&e);
  clear_vars();
}

/* A runtime logs each refused value at create, naming the variable (on stderr: the real
 * file descriptor 2, sent to a file for the call). */
FT_TEST(create_logs_a_warning_naming_the_variable) {
  clear_vars();
  setenv("FI_CACHE_MAX_BYTES", "0.5", 1);
  setenv("FI_LOG_LEVEL", "garbage", 1);
  char path[] = "/tmp/fi_test_env_XXXXXX";
  int fd = mkstemp(path);
  FT_REQUIRE(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  fi_runtime *rt = NULL;
  fi_status st = fi_runtime_create(&o, &rt);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char buf[4096] = "";
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  close(fd);
  unlink(path);
  buf[n > 0 ? n : 0] = 0;
  FT_REQUIRE(st == FI_OK, "%s", fi_last_error());
  FT_CHECK(strstr(buf, "FI_CACHE_MAX_BYTES=0.5 ignored"), "log: %s", buf);
  FT_CHECK(strstr(buf, "FI_LOG_LEVEL=garbage ignored"), "log: %s", buf);
  FT_CHECK(rt->max_bytes == (int64_t)2 << 30, "0.5 gave a cap of %lld", (long long)rt->max_bytes);
  fi_runtime_destroy(rt);
  clear_vars();
}

/* The XDG spec: a relative XDG_CACHE_HOME is ignored (the next candidate, HOME, applies). */
FT_TEST(relative_xdg_cache_home_is_ignored) {
  clear_vars();
  char home[] = "/tmp/fi_test_env_home_XXXXXX";
  FT_REQUIRE(mkdtemp(home) != NULL);
  const char *old_home = getenv("HOME");
  char *saved_home = old_home ? strdup(old_home) : NULL;
  setenv("HOME", home, 1);
  setenv("XDG_CACHE_HOME", "relative/cache", 1);
  fi_options o;
  fi_options_init(&o);
  o.log_level = 0;
  fi_runtime *rt = NULL;
  FT_REQUIRE(fi_runtime_create(&o, &rt) == FI_OK, "%s", fi_last_error());
  char want[1024];
  snprintf(want, sizeof want, "%s/.cache/fi_runtime/kernels.db", home);
  FT_CHECK(strcmp(rt->cache_path, want) == 0, "cache path %s, want %s", rt->cache_path, want);
  fi_runtime_destroy(rt);
  /* an absolute one still wins */
  char xdg[600];
  snprintf(xdg, sizeof xdg, "%s/xdg", home);
  setenv("XDG_CACHE_HOME", xdg, 1);
  FT_REQUIRE(fi_runtime_create(&o, &rt) == FI_OK, "%s", fi_last_error());
  snprintf(want, sizeof want, "%s/fi_runtime/kernels.db", xdg);
  FT_CHECK(strcmp(rt->cache_path, want) == 0, "cache path %s, want %s", rt->cache_path, want);
  fi_runtime_destroy(rt);
  if (saved_home) setenv("HOME", saved_home, 1); else unsetenv("HOME");
  free(saved_home);
  unsetenv("XDG_CACHE_HOME");
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", home); /* nothing was created, but be sure */
  FT_CHECK(system(cmd) == 0);
}

/* Values are read at fi_runtime_create: a setenv afterwards changes neither the runtime's
 * settings nor what it does (here: which CUDA driver library its first device use loads;
 * no driver is loaded before it in this process). */
FT_TEST(values_are_read_at_create_only) {
  clear_vars();
  setenv("FI_CACHE_MAX_BYTES", "300K", 1);
  setenv("FI_DECODE_SPLIT", "2", 1);
  setenv("FI_SAMPLING_SELECT", "radix", 1);
  setenv("FI_CUDA_LIBRARY", "/nonexistent/at_create/libcuda.so.1", 1);
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  o.log_level = 0;
  fi_runtime *rt = NULL;
  FT_REQUIRE(fi_runtime_create(&o, &rt) == FI_OK, "%s", fi_last_error());
  setenv("FI_CACHE_MAX_BYTES", "1M", 1);
  setenv("FI_DECODE_SPLIT", "4", 1);
  setenv("FI_SAMPLING_SELECT", "range", 1);
  setenv("FI_CUDA_LIBRARY", "/nonexistent/after_create/libcuda.so.1", 1);
  FT_CHECK(rt->max_bytes == 300 * 1024, "%lld", (long long)rt->max_bytes);
  FT_CHECK(rt->env.tune.decode_split == 2.0 && rt->env.tune.sampling_select == 0);
  /* a valid call, so that it reaches the device lookup */
  static uint16_t x[4 * 64], w[64];
  int64_t shape[2] = {4, 64}, wshape[1] = {64};
  DLTensor in = {x, {kDLCUDA, 0}, 2, {kDLBfloat, 16, 1}, shape, NULL, 0};
  DLTensor wt = {w, {kDLCUDA, 0}, 1, {kDLBfloat, 16, 1}, wshape, NULL, 0};
  DLTensor out = in;
  fi_status st = fi_rmsnorm(rt, &in, &wt, 1e-6, &out, NULL);
  FT_CHECK(st == FI_ERR_NO_DEVICE, "%s: %s", fi_status_string(st), fi_last_error());
  FT_CHECK(strstr(fi_last_error(), "at_create") && !strstr(fi_last_error(), "after_create"), "%s",
           fi_last_error());
  fi_runtime_destroy(rt);
  clear_vars();
}
