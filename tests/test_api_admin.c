/* test_api_admin.c: the admin API's arguments (fi_admin.h): the op registry, arch
 * strings, prewarm, the store's list / get / clear / stats, and the key that
 * fi_admin_rmsnorm_with_key is given. */
#include "ops_norm.h"
#include "test_api_util.h"

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
  FT_CHECK_EQ_INT(fi_admin_config_count("nope"), -1);
  FT_CHECK_EQ_INT(fi_admin_config_count(NULL), -1);
  FT_CHECK_EQ_INT(fi_admin_config_count(""), -1);
  FT_CHECK_EQ_INT(fi_admin_config_count("RMSNORM"), -1);

  char buf[512];
  int n = fi_admin_config_count("rmsnorm");
  CHECK_ST(fi_admin_config_key("rmsnorm", 0, buf, sizeof buf), FI_OK, "%s", fi_last_error());
  FT_CHECK(strncmp(buf, "op=rmsnorm;", 11) == 0, "%s", buf);
  CHECK_ST(fi_admin_config_key("rmsnorm", n - 1, buf, sizeof buf), FI_OK, "%s", fi_last_error());
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
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "config_key case %zu", i);
    FT_CHECK_STR_HAS(fi_last_error(), bad[i].name, "config_key case %zu", i);
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
  for (int i = 0; i < 8; i++) FT_CHECK_EQ_INT(fi_admin_arch_supported(good[i]), 1, "%s", good[i]);
  FT_CHECK_EQ_INT(fi_admin_arch_supported(NULL), 0);
  for (int i = 0; i < NBAD_ARCHS; i++)
    FT_CHECK_EQ_INT(fi_admin_arch_supported(bad_archs[i]), 0, "'%s' reported supported", bad_archs[i]);
}

FT_TEST(admin_prewarm_arguments) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  fi_prewarm_result r;
  double ms;
  int n = fi_admin_config_count("rmsnorm");
  poison_error();
  CHECK_ST(fi_admin_prewarm(NULL, "rmsnorm", 0, "sm_90", &r, &ms), FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_STR_HAS(fi_last_error(), "rt");
  struct {
    const char *op;
    int idx;
    const char *name;
  } bad[] = {{"nope", 0, "op"}, {NULL, 0, "op"}, {"", 0, "op"}, {"rmsnorm", -1, "idx"},
             {"rmsnorm", n, "idx"}, {"rmsnorm", 1 << 30, "idx"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    poison_error();
    fi_status st = fi_admin_prewarm(rt, bad[i].op, bad[i].idx, "sm_90", &r, &ms);
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "case %zu", i);
    FT_CHECK_STR_HAS(fi_last_error(), bad[i].name, "case %zu", i);
  }
  for (int i = 0; i <= NBAD_ARCHS; i++) {
    const char *a = i < NBAD_ARCHS ? bad_archs[i] : NULL;
    poison_error();
    fi_status st = fi_admin_prewarm(rt, "rmsnorm", 0, a, NULL, NULL);
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "arch '%s'", a ? a : "(null)");
    FT_CHECK_STR_HAS(fi_last_error(), "arch", "arch '%s'", a ? a : "(null)");
  }
  /* Well formed but no compiler targets it: refused, documented as UNSUPPORTED
   * (this loads NVRTC, which is installed here, and compiles nothing). */
  poison_error();
  fi_status st = fi_admin_prewarm(rt, "rmsnorm", 0, "sm_990", &r, &ms);
  CHECK_ST(st, FI_ERR_UNSUPPORTED, "sm_990: %s", fi_last_error());
  FT_CHECK_STR_HAS(fi_last_error(), "sm_990");
  fi_admin_stats s;
  REQUIRE_ST(fi_admin_stats_get(rt, &s), FI_OK, "%s", fi_last_error());
  FT_CHECK_EQ_INT(s.entries, 0);
  FT_CHECK_EQ_INT(s.compiles, 0);
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
  CHECK_ST(fi_admin_list(NULL, NULL, NULL, count_cb, &n), FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_STR_HAS(fi_last_error(), "rt");
  poison_error();
  CHECK_ST(fi_admin_list(rt, NULL, NULL, NULL, &n), FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_STR_HAS(fi_last_error(), "fn");
  CHECK_ST(fi_admin_list(rt, "rmsnorm", "sm_90", count_cb, &n), FI_OK, "%s", fi_last_error());
  FT_CHECK_EQ_INT(n, 0);

  void *bin = (void *)0x1;
  size_t bytes = 0;
  char *src = (char *)0x1;
  CHECK_ST(fi_admin_get(NULL, "ab", NULL, NULL, &bin, &bytes, &src), FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(bin == NULL && src == NULL, "outputs not cleared on failure");
  CHECK_ST(fi_admin_get(rt, NULL, NULL, NULL, &bin, &bytes, &src), FI_ERR_INVALID_ARGUMENT);
  CHECK_ST(fi_admin_get(rt, "", NULL, NULL, &bin, &bytes, &src), FI_ERR_INVALID_ARGUMENT);
  poison_error();
  CHECK_ST(fi_admin_get(rt, "0123abcd", NULL, NULL, &bin, &bytes, &src), FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_STR_HAS(fi_last_error(), "0123abcd");
  poison_error();
  fi_status st = fi_admin_get(rt, "'; DROP TABLE kernels; --", NULL, NULL, NULL, NULL, NULL);
  CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "SQL in prefix");
  CHECK_ST(fi_admin_list(rt, NULL, NULL, count_cb, &n), FI_OK, "store unusable after: %s",
           fi_last_error());
  fi_admin_free(NULL);

  int64_t removed = -1;
  CHECK_ST(fi_admin_clear(NULL, NULL, NULL, &removed), FI_ERR_INVALID_ARGUMENT);
  CHECK_ST(fi_admin_clear(rt, "nope", "sm_1", &removed), FI_OK, "%s", fi_last_error());
  FT_CHECK_EQ_INT(removed, 0);
  CHECK_ST(fi_admin_clear(rt, NULL, NULL, NULL), FI_OK);

  fi_admin_stats s;
  CHECK_ST(fi_admin_stats_get(NULL, &s), FI_ERR_INVALID_ARGUMENT);
  poison_error();
  CHECK_ST(fi_admin_stats_get(rt, NULL), FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_STR_HAS(fi_last_error(), "st");
  REQUIRE_ST(fi_admin_stats_get(rt, &s), FI_OK, "%s", fi_last_error());
  FT_CHECK_EQ_INT(s.entries, 0);
  FT_CHECK_EQ_INT(s.fallback, 0);
  FT_CHECK_EQ_STR(s.path, ":memory:");
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
  CHECK_ST(st, FI_ERR_NO_DEVICE, "good key %s: %s", ok_key, fi_last_error());

  const char *bad[] = {NULL,         "",          "op=rmsnorm;garbage", "not a key at all",
                       "op=nope;dtype=bf16", f16_key, wide_key};
  const char *why[] = {"NULL", "empty", "malformed", "malformed", "unknown op",
                       "wrong dtype", "vec wider than the tensors allow"};
  for (int i = 0; i < 7; i++) {
    poison_error();
    st = fi_admin_rmsnorm_with_key(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL, bad[i]);
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "%s key '%s': %s", why[i], bad[i] ? bad[i] : "(null)",
             fi_last_error());
    FT_CHECK_STR_HAS(fi_last_error(), "key", "%s key", why[i]);
  }
  /* Bad tensors are still named first. */
  c.eps = -1;
  poison_error();
  st = fi_admin_rmsnorm_with_key(rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL, ok_key);
  CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "%s", fi_last_error());
  FT_CHECK_STR_HAS(fi_last_error(), "eps");
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
  CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "malformed key, 0 tokens");
  FT_CHECK_STR_HAS(fi_last_error(), "key");
  fi_runtime_destroy(rt);
}
