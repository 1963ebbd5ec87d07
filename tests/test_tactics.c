/* test_tactics.c: stored tactics (issue 43, the CPU half): token buckets; the merge of
 * measurements into one row a key; 8 processes storing one bucket at once; a tactic found
 * invalid never returned; a fresh process finding a stored tactic (counted); the system
 * layer used when the user cache has none; rows of another device, SM count, driver,
 * compiler or runtime not used; a tampered row ignored and reported by verify. Rows are
 * planted with fi_admin_tactic_put: measuring a tactic needs a GPU. */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache_ops.h"
#include "ft.h"
#include "rt_autotune.h"
#include "rt_tune.h"
#include "test_tactics_util.h"

#define SHAPE "dtype=bf16;heads=32/8;head_dim=128"

/* ---- buckets ---- */

FT_TEST(bucket_properties) {
  const struct {
    int64_t tokens, bucket;
  } fixed[] = {{-5, 0},       {0, 0},         {1, 1},         {2, 2},         {3, 4},
               {255, 256},    {256, 256},     {257, 512},     {300, 512},     {512, 512},
               {513, 768},    {1000, 1024},   {4095, 4096},   {4096, 4096},   {4097, 8192},
               {8192, 8192},  {8193, 16384},  {16384, 16384}, {16385, 32768}, {32768, 32768},
               {(int64_t)1 << 40, (int64_t)1 << 40}, {((int64_t)1 << 40) + 1, (int64_t)1 << 41},
               {(int64_t)1 << 62, (int64_t)1 << 62}, {((int64_t)1 << 62) + 1, INT64_MAX},
               {INT64_MAX, INT64_MAX}};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    FT_CHECK_EQ_INT(fi_tune_bucket(fixed[i].tokens), fixed[i].bucket, "tokens %lld",
                    (long long)fixed[i].tokens);
  /* Monotone, rounding up, idempotent on its values, over every count to 70000. */
  int64_t prev = 0, distinct = 0;
  int bad_mono = 0, bad_up = 0, bad_idem = 0, bad_grid = 0;
  for (int64_t t = 1; t <= 70000; t++) {
    int64_t b = fi_tune_bucket(t);
    bad_mono += b < prev;
    bad_up += b < t;
    bad_idem += fi_tune_bucket(b) != b;
    /* Every bucket value is a power of two, or a multiple of 256 up to 4096. */
    bad_grid += !((b & (b - 1)) == 0 || (b > 256 && b <= 4096 && b % 256 == 0));
    distinct += b != prev;
    prev = b;
  }
  FT_CHECK(!bad_mono && !bad_up && !bad_idem && !bad_grid,
           "not monotone %d, below the count %d, not idempotent %d, off the grid %d", bad_mono,
           bad_up, bad_idem, bad_grid);
  /* 1..256: 9 powers of two; 512..4096: 15 steps; 8192..65536 and 131072: 5 more. */
  FT_CHECK_EQ_INT(distinct, 9 + 15 + 5, "buckets up to 70000 tokens");
  /* No cap: the powers of two go on past the 8192 FlashInfer's buckets stopped at. */
  FT_CHECK(fi_tune_bucket(16384) != fi_tune_bucket(32768) && fi_tune_bucket(16384) != fi_tune_bucket(8192));
  for (int k = 13; k <= 62; k++) {
    const int64_t b = (int64_t)1 << k;
    FT_CHECK(fi_tune_bucket(b) == b && fi_tune_bucket(b + 1) == (k == 62 ? INT64_MAX : 2 * b),
             "bucket of 2^%d", k);
  }
}

/* ---- the merge (a pure function) ---- */

static cache_tactic measured(const char *params, int valid, double us, const char *runner,
                             double runner_us, int64_t now) {
  cache_tactic key, row;
  memset(&key, 0, sizeof key);
  snprintf(key.op, sizeof key.op, "batch_decode");
  snprintf(key.shape, sizeof key.shape, SHAPE);
  snprintf(key.arch, sizeof key.arch, "sm_90");
  snprintf(key.device, sizeof key.device, "NVIDIA H100 80GB HBM3");
  snprintf(key.driver, sizeof key.driver, "cuda-12.4");
  snprintf(key.compiler, sizeof key.compiler, "nvrtc-13.0");
  snprintf(key.runtime, sizeof key.runtime, "0.1.0/test");
  key.bucket = 512;
  key.sms = 132;
  char why[256] = "";
  if (cache_tactic_measurement(&row, &key, params, valid, us, 2 * us, runner, runner_us, now, why,
                               sizeof why) != 0) {
    fprintf(stderr, "measurement: %s\n", why);
    abort();
  }
  return row;
}

FT_TEST(merge_keeps_the_fastest_valid) {
  char why[256];
  cache_tactic r = measured("warps=4;split=1", 1, 10, "warps=2;split=1", 12, 100);
  cache_tactic m = measured("warps=8;split=2", 1, 9, "warps=4;split=1", 9.5, 200);
  FT_REQUIRE(cache_tactic_merge(&r, &m, why, sizeof why) == 0, "%s", why);
  FT_CHECK_EQ_STR(r.params, "warps=8;split=2");
  FT_CHECK(r.time_us == 9 && r.default_us == 18, "time %g default %g (the default of the winner's run)",
           r.time_us, r.default_us);
  FT_CHECK_EQ_STR(r.runner_up, "warps=4;split=1", "the faster of its two times");
  FT_CHECK(r.runner_up_us == 9.5 && r.samples == 2 && r.measured == 100 && r.updated == 200);
  /* A slower measurement of the winner keeps its faster time. */
  cache_tactic slow = measured("warps=8;split=2", 1, 30, "", 0, 300);
  FT_REQUIRE(cache_tactic_merge(&r, &slow, why, sizeof why) == 0, "%s", why);
  FT_CHECK(strcmp(r.params, "warps=8;split=2") == 0 && r.time_us == 9 && r.samples == 3);
  /* Found invalid: the winner is never chosen again; the runner-up takes its place. */
  cache_tactic bad = measured("warps=8;split=2", 0, 0, "", 0, 400);
  FT_REQUIRE(cache_tactic_merge(&r, &bad, why, sizeof why) == 0, "%s", why);
  FT_CHECK_EQ_STR(r.params, "warps=4;split=1");
  FT_CHECK_EQ_STR(r.invalid, "warps=8;split=2");
  FT_CHECK(r.valid == 1 && r.runner_up[0] == 0, "valid %d runner-up '%s'", r.valid, r.runner_up);
  /* ... even measured valid and faster later: invalid stays invalid. */
  cache_tactic again = measured("warps=8;split=2", 1, 1, "", 0, 500);
  FT_REQUIRE(cache_tactic_merge(&r, &again, why, sizeof why) == 0, "%s", why);
  FT_CHECK_EQ_STR(r.params, "warps=4;split=1");
  cache_tactic bad2 = measured("warps=4;split=1", 0, 0, "", 0, 600);
  FT_REQUIRE(cache_tactic_merge(&r, &bad2, why, sizeof why) == 0, "%s", why);
  FT_CHECK(r.valid == 0 && r.params[0] == 0 && strcmp(r.invalid, "warps=8;split=2|warps=4;split=1") == 0,
           "valid %d params '%s' invalid '%s'", r.valid, r.params, r.invalid);
  FT_CHECK(cache_tactic_check(&r, 1, why, sizeof why) == 0, "merged row fails its check: %s", why);
  /* Malformed measurements are refused, never stored. */
  cache_tactic key = r, out;
  const char *bad_params[] = {"", "warps", "warps=", "=4", "Warps=4", "warps=4;", "a=1|b=2", "a=1;;b=2", "a=\x01"};
  for (size_t i = 0; i < sizeof bad_params / sizeof bad_params[0]; i++)
    FT_CHECK(cache_tactic_measurement(&out, &key, bad_params[i], 1, 1, 1, "", 0, 1, why, sizeof why) != 0,
             "params '%s' accepted", bad_params[i]);
  FT_CHECK(cache_tactic_measurement(&out, &key, "a=1", 1, NAN, 1, "", 0, 1, why, sizeof why) != 0 &&
               cache_tactic_measurement(&out, &key, "a=1", 1, -1, 1, "", 0, 1, why, sizeof why) != 0 &&
               cache_tactic_measurement(&out, &key, "a=1", 2, 1, 1, "", 0, 1, why, sizeof why) != 0,
           "a NaN or negative time, or valid 2, accepted");
}

/* ---- 8 processes, one bucket ---- */

FT_TEST(eight_writers_one_bucket_one_row) {
  tt_dir dirs;
  fi_runtime *rt = tt_open(&dirs);
  const char *path = dirs.a;
  FT_REQUIRE(rt, "%s", fi_last_error()); /* creates the file: the children race only to write */
  int64_t dummy = 0;
  FT_REQUIRE(fi_admin_tactic_clear(rt, NULL, NULL, &dummy) == FI_OK, "%s", fi_last_error());
  fi_runtime_destroy(rt);
  enum { PROCS = 8, PUTS = 6 };
  int go[2];
  FT_REQUIRE(pipe(go) == 0);
  pid_t pids[PROCS];
  for (int p = 0; p < PROCS; p++) {
    fflush(NULL);
    if ((pids[p] = fork()) == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) != 0) _exit(90); /* all start when the parent closes the pipe */
      fi_runtime *r = tt_rt(path, NULL);
      if (!r) _exit(91);
      for (int i = 0; i < PUTS; i++) {
        /* Process p's tactic; its time falls with i, so each put improves on its last. */
        char params[64], runner[64];
        snprintf(params, sizeof params, "warps=%d;split=%d", 1 << (p % 4), p);
        snprintf(runner, sizeof runner, "warps=%d;split=%d", 1 << (p % 4), p + 100);
        double us = 100.0 + 10.0 * p - i;
        if (tt_put(r, "batch_decode", SHAPE, 512, &TT_H100, params, 1, us, 200, runner, us + 0.5) != FI_OK) {
          fprintf(stderr, "child %d put %d: %s\n", p, i, fi_last_error());
          _exit(92);
        }
      }
      fi_runtime_destroy(r);
      _exit(0);
    }
  }
  close(go[0]);
  close(go[1]);
  int failed = 0;
  for (int p = 0; p < PROCS; p++) {
    int status = -1;
    waitpid(pids[p], &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) fprintf(stderr, "child %d: status %d\n", p, status);
  }
  FT_CHECK_EQ_INT(failed, 0, "processes whose puts failed");
  FT_CHECK_EQ_INT(raw_int(path, "SELECT count(*) FROM tactics"), 1, "rows for one bucket");
  /* No lost update: every put is counted, and the fastest of all 48 won. */
  rt = tt_rt(path, NULL);
  FT_REQUIRE(rt);
  tt_found f;
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", SHAPE, 512, &TT_H100, &f), "warps=1;split=0");
  FT_CHECK(f.time_us == 100.0 - (PUTS - 1), "time %g", f.time_us);
  FT_CHECK_EQ_INT(f.samples, PROCS * PUTS, "samples");
  /* The runner-up: process 0's own runner-up (0.5 us behind) beats process 1's winner. */
  FT_CHECK_EQ_INT(raw_int(path, "SELECT runner_up = 'warps=1;split=100' FROM tactics"), 1, "runner-up");
  fi_verify_report vr;
  FT_CHECK(fi_admin_verify(rt, 0, &vr) == FI_OK && vr.tactic_rows == 1 && vr.tactic_bad_rows == 0,
           "verify: %lld tactic rows, %lld bad", (long long)vr.tactic_rows, (long long)vr.tactic_bad_rows);
  fi_runtime_destroy(rt);
  td_end(dirs.dir);
}

/* ---- lookups ---- */

FT_TEST(invalid_tactic_never_returned) {
  tt_dir dirs;
  fi_runtime *rt = tt_open(&dirs);
  FT_REQUIRE(rt);
  tt_found f;
  FT_REQUIRE(tt_put(rt, "batch_prefill", SHAPE, 4096, &TT_H100, "wg=2x128;stages=4", 0, 0, 0, NULL, 0) == FI_OK,
             "%s", fi_last_error());
  FT_CHECK_EQ_STR(tt_find(rt, "batch_prefill", SHAPE, 4096, &TT_H100, &f), "", "a planted invalid tactic");
  /* Measured valid and fast afterwards: still refused. */
  FT_REQUIRE(tt_put(rt, "batch_prefill", SHAPE, 4096, &TT_H100, "wg=2x128;stages=4", 1, 1, 50, NULL, 0) == FI_OK);
  FT_CHECK_EQ_STR(tt_find(rt, "batch_prefill", SHAPE, 4096, &TT_H100, &f), "");
  /* Another tactic, valid: used, though slower. */
  FT_REQUIRE(tt_put(rt, "batch_prefill", SHAPE, 4096, &TT_H100, "wg=1x64;stages=2", 1, 40, 50,
                    "wg=2x64;stages=2", 45) == FI_OK);
  FT_CHECK_EQ_STR(tt_find(rt, "batch_prefill", SHAPE, 4096, &TT_H100, &f), "wg=1x64;stages=2");
  /* Found invalid in its turn: its runner-up is chosen. */
  FT_REQUIRE(tt_put(rt, "batch_prefill", SHAPE, 4096, &TT_H100, "wg=1x64;stages=2", 0, 0, 0, NULL, 0) == FI_OK);
  FT_CHECK_EQ_STR(tt_find(rt, "batch_prefill", SHAPE, 4096, &TT_H100, &f), "wg=2x64;stages=2");
  fi_admin_stats st;
  FT_REQUIRE(fi_admin_stats_get(rt, &st) == FI_OK);
  FT_CHECK(st.tactic_hits == 2 && st.tactic_misses == 2 && st.tactics == 1, "hits %lld misses %lld rows %lld",
           (long long)st.tactic_hits, (long long)st.tactic_misses, (long long)st.tactics);
  fi_runtime_destroy(rt);
  td_end(dirs.dir);
}

FT_TEST(fresh_process_finds_a_stored_tactic) {
  tt_dir dirs;
  fi_runtime *rt = tt_open(&dirs);
  const char *path = dirs.a;
  FT_REQUIRE(rt);
  FT_REQUIRE(tt_put(rt, "batch_decode", SHAPE, 16384, &TT_H100, "warps=4;pipeline=2", 1, 20, 25, NULL, 0) == FI_OK,
             "%s", fi_last_error());
  fi_runtime_destroy(rt);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) { /* a process that never saw the row written: its own runtime, its own connection */
    fi_runtime *r = tt_rt(path, NULL);
    tt_found f;
    int ok = r && strcmp(tt_find(r, "batch_decode", SHAPE, 16384, &TT_H100, &f), "warps=4;pipeline=2") == 0 &&
             strcmp(f.layer, "user") == 0;
    /* 16384 is not 8192's bucket, nor 32768's: neither finds the row. */
    ok = ok && !tt_find(r, "batch_decode", SHAPE, 8192, &TT_H100, &f)[0] &&
         !tt_find(r, "batch_decode", SHAPE, 32768, &TT_H100, &f)[0];
    fi_admin_stats st;
    ok = ok && fi_admin_stats_get(r, &st) == FI_OK && st.tactic_hits == 1 && st.tactic_misses == 2;
    /* The ops' seam without a GPU: no device identity, so no tactic, and a miss counted. */
    char params[64] = "untouched";
    ok = ok && rt_tactic_find(r, "batch_decode", SHAPE, 16384, 2 /* kDLCUDA */, 0, params, sizeof params) == 0 &&
         strcmp(params, "untouched") == 0 && fi_admin_stats_get(r, &st) == FI_OK && st.tactic_misses == 3;
    fi_runtime_destroy(r);
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  FT_CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the fresh process did not find and count the tactic (status %d)", status);
  td_end(dirs.dir);
}

FT_TEST(system_layer_then_user) {
  tt_dir dirs;
  tt_dir_begin(&dirs);
  const char *a = dirs.a, *b = dirs.b, *ship = dirs.ship;
  fi_runtime *rt = tt_rt(a, NULL);
  FT_REQUIRE(rt);
  FT_REQUIRE(tt_put(rt, "moe_gemm", "dtype=bf16;experts=128;n=768;k=2048", 256, &TT_H100, "tile=64;stages=3", 1,
                    30, 40, "tile=128;stages=2", 33) == FI_OK, "%s", fi_last_error());
  int64_t kernels = -1, tactics = -1;
  FT_REQUIRE(fi_admin_export(rt, ship, NULL, NULL, &kernels, &tactics) == FI_OK, "%s", fi_last_error());
  FT_CHECK(kernels == 0 && tactics == 1, "exported %lld kernels, %lld tactics", (long long)kernels,
           (long long)tactics);
  fi_runtime_destroy(rt);
  rt = tt_rt(b, ship);
  FT_REQUIRE(rt);
  tt_found f;
  const char *shape = "dtype=bf16;experts=128;n=768;k=2048";
  FT_CHECK_EQ_STR(tt_find(rt, "moe_gemm", shape, 256, &TT_H100, &f), "tile=64;stages=3", "user cache empty");
  FT_CHECK_EQ_STR(f.layer, "system");
  /* A user row of the same key: the system layer's is still first, as for kernels. */
  FT_REQUIRE(tt_put(rt, "moe_gemm", shape, 256, &TT_H100, "tile=128;stages=4", 1, 29, 40, NULL, 0) == FI_OK);
  FT_CHECK_EQ_STR(tt_find(rt, "moe_gemm", shape, 256, &TT_H100, &f), "tile=64;stages=3");
  /* The user cache found the system's tactic invalid: never chosen, the user's winner is. */
  FT_REQUIRE(tt_put(rt, "moe_gemm", shape, 256, &TT_H100, "tile=64;stages=3", 0, 0, 0, NULL, 0) == FI_OK);
  FT_CHECK_EQ_STR(tt_find(rt, "moe_gemm", shape, 256, &TT_H100, &f), "tile=128;stages=4");
  FT_CHECK_EQ_STR(f.layer, "user");
  fi_runtime_destroy(rt);
  td_end(dirs.dir);
}

FT_TEST(row_of_another_device_not_used) {
  char err[512];
  tt_dir dirs;
  fi_runtime *rt = tt_open(&dirs);
  const char *path = dirs.a;
  FT_REQUIRE(rt);
  FT_REQUIRE(tt_put(rt, "batch_decode", SHAPE, 64, &TT_H100, "warps=2", 1, 5, 6, NULL, 0) == FI_OK);
  tt_found f;
  fi_tactic_device d = TT_H100;
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", SHAPE, 64, &d, &f), "warps=2", "the same card");
  d.name = "NVIDIA H200";
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", SHAPE, 64, &d, &f), "", "another device name");
  d = TT_H100, d.sms = 114;
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", SHAPE, 64, &d, &f), "", "another SM count");
  d = TT_H100, d.driver = "cuda-12.8";
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", SHAPE, 64, &d, &f), "", "another driver");
  d = TT_H100, d.arch = "sm_90a";
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", SHAPE, 64, &d, &f), "", "another arch");
  d = TT_H100, d.compiler = "nvrtc-12.8";
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", SHAPE, 64, &d, &f), "", "another compiler");
  d = TT_H100, d.compiler = NULL;
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", SHAPE, 64, &d, &f), "warps=2", "no compiler loaded: any");
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", "dtype=f16;heads=32/8;head_dim=128", 64, &TT_H100, &f), "",
                  "another shape");
  /* Another runtime's row (planted behind the API, which writes this runtime's version). */
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  cache_tactic key, row;
  memset(&key, 0, sizeof key);
  snprintf(key.op, sizeof key.op, "batch_decode");
  snprintf(key.shape, sizeof key.shape, SHAPE);
  snprintf(key.arch, sizeof key.arch, "sm_90");
  snprintf(key.device, sizeof key.device, "%s", TT_H100.name);
  snprintf(key.driver, sizeof key.driver, "cuda-12.4");
  snprintf(key.compiler, sizeof key.compiler, "nvrtc-13.0");
  snprintf(key.runtime, sizeof key.runtime, "0.0.1/000000000000");
  key.bucket = 128;
  key.sms = 132;
  FT_REQUIRE(cache_tactic_measurement(&row, &key, "warps=8", 1, 1, 2, NULL, 0, 1, err, sizeof err) == 0, "%s", err);
  FT_REQUIRE(cache_tactic_put(s, &row, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", SHAPE, 128, &TT_H100, &f), "", "another runtime version");
  fi_runtime_destroy(rt);
  td_end(dirs.dir);
}

/* ---- damage ---- */

FT_TEST(tampered_row_ignored_and_reported) {
  tt_dir dirs;
  fi_runtime *rt = tt_open(&dirs);
  const char *path = dirs.a;
  FT_REQUIRE(rt);
  const char *shapes[] = {"s=1", "s=2", "s=3", "s=4", "s=5"};
  for (int i = 0; i < 5; i++)
    FT_REQUIRE(tt_put(rt, "sampling", shapes[i], 32, &TT_H100, "cluster=1", 1, 7, 9, NULL, 0) == FI_OK, "%s",
               fi_last_error());
  tt_found f;
  FT_REQUIRE_EQ_STR(tt_find(rt, "sampling", "s=1", 32, &TT_H100, &f), "cluster=1");
  /* A faster time written by hand (the checksum not recomputed). */
  FT_REQUIRE(raw_exec(path, "UPDATE tactics SET time_us = 0.5 WHERE shape = 's=1'") == SQLITE_OK);
  /* The row moved to another device by hand: the hash no longer its key's. */
  FT_REQUIRE(raw_exec(path, "UPDATE tactics SET device = 'NVIDIA H200' WHERE shape = 's=2'") == SQLITE_OK);
  /* Bad input of every kind: a short hash, a NUL in a text, text for a number, a huge text. */
  FT_REQUIRE(raw_exec(path, "UPDATE tactics SET hash = x'0102' WHERE shape = 's=3';"
                            "UPDATE tactics SET params = CAST(x'636c75737465723d00' AS TEXT) WHERE shape = 's=4';"
                            "UPDATE tactics SET bucket = 'lots', invalid = printf('%.5000c', 'x') WHERE shape = 's=5'")
                 == SQLITE_OK);
  for (int i = 0; i < 5; i++)
    FT_CHECK_EQ_STR(tt_find(rt, "sampling", shapes[i], 32, &TT_H100, &f), "", "tampered row %s used", shapes[i]);
  fi_verify_report vr;
  FT_REQUIRE(fi_admin_verify(rt, 0, &vr) == FI_OK, "%s", fi_last_error());
  FT_CHECK(vr.tactic_rows == 5 && vr.tactic_bad_rows == 5 && vr.bad_rows == 5, "tactic rows %lld bad %lld",
           (long long)vr.tactic_rows, (long long)vr.tactic_bad_rows);
  FT_CHECK_STR_HAS(vr.detail, "checksum mismatch");
  FT_CHECK_STR_HAS(vr.detail, "not the hash of its key");
  FT_CHECK_STR_HAS(vr.detail, "tactic ");
  FT_REQUIRE(fi_admin_verify(rt, 1, &vr) == FI_OK, "%s", fi_last_error());
  FT_CHECK_EQ_INT(vr.repaired, 5);
  FT_REQUIRE(fi_admin_verify(rt, 0, &vr) == FI_OK);
  FT_CHECK(vr.tactic_rows == 0 && vr.bad_rows == 0, "after repair: %lld rows", (long long)vr.tactic_rows);
  /* A new measurement stores afresh. */
  FT_REQUIRE(tt_put(rt, "sampling", "s=1", 32, &TT_H100, "cluster=0", 1, 8, 9, NULL, 0) == FI_OK);
  FT_CHECK_EQ_STR(tt_find(rt, "sampling", "s=1", 32, &TT_H100, &f), "cluster=0");
  fi_runtime_destroy(rt);
  td_end(dirs.dir);
}

FT_TEST(bad_arguments_refused) {
  tt_dir dirs;
  fi_runtime *rt = tt_open(&dirs);
  FT_REQUIRE(rt);
  fi_tactic_device d = TT_H100;
  FT_CHECK(fi_admin_tactic_put(rt, NULL) == FI_ERR_INVALID_ARGUMENT && fi_admin_tactic_put(NULL, NULL) == FI_ERR_INVALID_ARGUMENT);
  FT_CHECK(tt_put(rt, NULL, SHAPE, 1, &d, "a=1", 1, 1, 1, NULL, 0) == FI_ERR_INVALID_ARGUMENT, "no op");
  FT_CHECK(tt_put(rt, "op", "", 1, &d, "a=1", 1, 1, 1, NULL, 0) == FI_ERR_INVALID_ARGUMENT, "empty shape");
  FT_CHECK(tt_put(rt, "op", SHAPE, 1, &d, NULL, 1, 1, 1, NULL, 0) == FI_ERR_INVALID_ARGUMENT, "no params");
  FT_CHECK(tt_put(rt, "op", SHAPE, 1, &d, "a=1", 1, INFINITY, 1, NULL, 0) == FI_ERR_INVALID_ARGUMENT, "infinite");
  FT_CHECK(tt_put(rt, "op", SHAPE, 1, &d, "a=1", 1, 1, 1, "b", 1) == FI_ERR_INVALID_ARGUMENT, "runner-up");
  FT_CHECK(tt_put(rt, "Op!", SHAPE, 1, &d, "a=1", 1, 1, 1, NULL, 0) == FI_ERR_INVALID_ARGUMENT, "op name");
  FT_CHECK(tt_put(rt, "op", SHAPE, -1, &d, "a=1", 1, 1, 1, NULL, 0) == FI_ERR_INVALID_ARGUMENT, "bucket");
  d.sms = 0;
  FT_CHECK(tt_put(rt, "op", SHAPE, 1, &d, "a=1", 1, 1, 1, NULL, 0) == FI_ERR_INVALID_ARGUMENT, "no SMs");
  d = TT_H100, d.compiler = "";
  FT_CHECK(tt_put(rt, "op", SHAPE, 1, &d, "a=1", 1, 1, 1, NULL, 0) == FI_ERR_INVALID_ARGUMENT, "no compiler");
  d = TT_H100, d.name = "tab\there";
  FT_CHECK(tt_put(rt, "op", SHAPE, 1, &d, "a=1", 1, 1, 1, NULL, 0) == FI_ERR_INVALID_ARGUMENT, "control byte");
  char big[600];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = 0;
  FT_CHECK(tt_put(rt, "op", big, 1, &TT_H100, "a=1", 1, 1, 1, NULL, 0) == FI_ERR_INVALID_ARGUMENT, "long shape");
  fi_admin_stats st;
  FT_CHECK(fi_admin_stats_get(rt, &st) == FI_OK && st.tactics == 0, "%lld rows stored", (long long)st.tactics);
  /* Lookups with bad arguments find nothing and fail nothing. */
  tt_found f;
  int found = 7;
  FT_CHECK(fi_admin_tactic_find(rt, "op", SHAPE, 1, NULL, &found, NULL, NULL) == FI_ERR_INVALID_ARGUMENT && found == 0);
  FT_CHECK_EQ_STR(tt_find(rt, NULL, NULL, 1, &TT_H100, &f), "");
  FT_CHECK_EQ_STR(tt_find(rt, "op", big, 1, &TT_H100, &f), "");
  fi_tactic_device none = {0};
  FT_CHECK_EQ_STR(tt_find(rt, "op", SHAPE, 1, &none, &f), "");
  fi_runtime_destroy(rt);
  td_end(dirs.dir);
}

/* fi_autotune's options are checked before any device is touched, each bad one named;
 * valid options on a machine with no usable CUDA device say so (no GPU here) rather than
 * storing anything. Measuring itself: tests/gpu/gpu_autotune.c. */
FT_TEST(autotune_options_checked_before_the_device) {
  tt_dir dirs;
  fi_runtime *rt = tt_open(&dirs);
  FT_REQUIRE(rt);
  static const char *const good = "dtype=bf16;k=128;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64";
  struct {
    const char *op, *shape;
    int64_t tokens;
    int repeats, fault;
    const char *named;
  } bad[] = {
      {NULL, good, 16, 0, 0, "o->op is NULL"},
      {"prefill", good, 16, 0, 0, "moe_gemm, batch_decode"},
      {"batch_decode", "q=bf16;kv=f16;heads=32/8;head_dim=128;page=16;rope=0;len=4096", 16, 0, 0, "differ"},
      {"batch_decode", "q=bf16;kv=bf16;heads=32/5;head_dim=128;page=16;rope=0;len=4096", 16, 0, 0, "heads=32/5"},
      {"batch_decode", "q=bf16;kv=bf16;heads=32/8;head_dim=96;page=16;rope=0;len=4096", 16, 0, 0, "head_dim=96"},
      {"batch_decode", "q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0;len=0", 16, 0, 0, "len=0"},
      {"batch_decode", "q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0", 16, 0, 0, "has no len"},
      {"batch_decode", "q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0;len=9;x=1", 16, 0, 0, "unknown"},
      {"batch_prefill", "q=bf16;heads=32/8;head_dim=96;causal=1;cap=0", 16, 0, 0, "head_dim=96"},
      {"batch_prefill", "q=bf16;heads=64/3;head_dim=128;causal=1;cap=0", 16, 0, 0, "heads=64/3"},
      {"batch_prefill", "q=e4m3;heads=32/8;head_dim=128;causal=1;cap=0", 16, 0, 0, "q=e4m3"},
      {"batch_prefill", "q=bf16;heads=32/8;head_dim=128;causal=2;cap=0", 16, 0, 0, "causal=2"},
      {"batch_prefill", "q=bf16;heads=32/8;head_dim=128;causal=1", 16, 0, 0, "has no cap"},
      {"batch_prefill", "q=bf16;heads=32/8;head_dim=128;causal=1;cap=0;page=16", 16, 0, 0, "unknown"},
      {"sampling", "op=softmax;dtype=f32;vocab=1000", 16, 0, 0, "op=softmax"},
      {"sampling", "op=top_k;dtype=f64;vocab=1000", 16, 0, 0, "dtype=f64"},
      {"sampling", "op=top_k;dtype=f32;vocab=0", 16, 0, 0, "vocab=0"},
      {"sampling", "op=top_k;dtype=f32", 16, 0, 0, "has no vocab"},
      {"moe_gemm", NULL, 16, 0, 0, "o->shape is NULL"},
      {"moe_gemm", good, 0, 0, 0, "o->tokens"},
      {"moe_gemm", good, (int64_t)1 << 40, 0, 0, "o->tokens"},
      {"moe_gemm", good, 16, -1, 0, "o->repeats"},
      {"moe_gemm", good, 16, 0, 1, "fault_tactic"},
      {"moe_gemm", "dtype=bf16;k=100;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64", 16, 0, 0, "check k"},
      {"moe_gemm", "dtype=bf16;k=128;n=128;experts=300;top_k=1;gated=0;gather=0;tile=64", 16, 0, 0, "experts"},
      {"moe_gemm", "dtype=bf16;k=128;n=128;experts=4;top_k=5;gated=0;gather=0;tile=64", 16, 0, 0, "top_k"},
      {"moe_gemm", "dtype=bf16;k=128;n=128;experts=4;top_k=1;gated=2;gather=0;tile=64", 16, 0, 0, "gated"},
      {"moe_gemm", "dtype=bf16;k=128;n=128;experts=4;top_k=1;gated=0;gather=0;tile=32", 16, 0, 0, "tile"},
      {"moe_gemm", "dtype=bf16;k=128;n=128;experts=4;top_k=1;gated=0;gather=0", 16, 0, 0, "has no tile"},
      {"moe_gemm", "dtype=fp8;k=128;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64", 16, 0, 0, "dtype=fp8"},
      {"moe_gemm", "dtype=bf16;k=x;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64", 16, 0, 0, "not an integer"},
      {"moe_gemm", "dtype=bf16;k=128;k=128;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64", 16, 0, 0, "twice"},
      {"moe_gemm", "dtype=bf16;bm=16;k=128;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64", 16, 0, 0, "unknown"},
  };
  fi_autotune_options o;
  fi_autotune_result r;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    fi_autotune_options_init(&o);
    o.op = bad[i].op, o.shape = bad[i].shape, o.tokens = bad[i].tokens, o.repeats = bad[i].repeats;
    o.fault_tactic = bad[i].fault;
    FT_CHECK_EQ_INT(fi_autotune(rt, &o, &r), FI_ERR_INVALID_ARGUMENT, "case %zu", i);
    FT_CHECK_STR_HAS(fi_last_error(), bad[i].named, "case %zu", i);
  }
  FT_CHECK_EQ_INT(fi_autotune(rt, NULL, &r), FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_EQ_INT(fi_autotune(rt, &o, NULL), FI_ERR_INVALID_ARGUMENT);
  fi_autotune_options_init(&o);
  o.struct_size = 16;
  FT_CHECK_EQ_INT(fi_autotune(rt, &o, &r), FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_STR_HAS(fi_last_error(), "struct_size");
  /* Valid options, no GPU on this machine: a device error, and no row. */
  fi_autotune_options_init(&o);
  o.op = "moe_gemm", o.shape = good, o.tokens = 16;
  fi_status st = fi_autotune(rt, &o, &r);
  FT_CHECK(st == FI_ERR_NO_DEVICE || st == FI_ERR_DEVICE, "got %s: %s", fi_status_string(st), fi_last_error());
  fi_admin_stats s;
  FT_CHECK(fi_admin_stats_get(rt, &s) == FI_OK && s.tactics == 0);
  fi_runtime_destroy(rt);
  td_end(dirs.dir);
}

/* fi-cache tune --preset's jobs: a mixture-of-experts model's two expert GEMMs, then batch
 * decode (CUDA-graph plans, up to 512 requests) and batch prefill where the attention is
 * this library's (not DeepSeek-V3's MLA); every job's shape is one fi_autotune takes (on
 * this machine without a GPU: a device error, not a bad argument). */
FT_TEST(preset_tune_jobs_are_shapes_the_tuner_takes) {
  tt_dir dirs;
  fi_runtime *rt = tt_open(&dirs);
  FT_REQUIRE(rt);
  static const struct {
    const char *preset, *ops[5];
  } want[] = {
      {"llama3-8b", {"batch_decode", "batch_prefill", "sampling"}},
      {"qwen3-30b-a3b", {"moe_gemm", "moe_gemm", "batch_decode", "batch_prefill", "sampling"}},
      {"deepseek-v3", {"moe_gemm", "moe_gemm", "sampling"}},
  };
  for (size_t p = 0; p < sizeof want / sizeof *want; p++) {
    int j = 0;
    const char *op;
    char shape[256];
    for (; fi_admin_preset_tune_job(want[p].preset, j, 64, &op, shape, sizeof shape) == 0; j++) {
      FT_REQUIRE(j < 5 && want[p].ops[j], "%s: job %d is %s", want[p].preset, j, op);
      FT_CHECK_EQ_STR(op, want[p].ops[j], "%s job %d", want[p].preset, j);
      fi_autotune_options o;
      fi_autotune_result r;
      fi_autotune_options_init(&o);
      o.op = op, o.shape = shape, o.tokens = 64;
      const fi_status st = fi_autotune(rt, &o, &r);
      FT_CHECK(st == FI_ERR_NO_DEVICE || st == FI_ERR_DEVICE, "%s %s: %s", op, shape, fi_last_error());
    }
    FT_CHECK(j == 5 || !want[p].ops[j], "%s: %d jobs", want[p].preset, j);
  }
  const char *op;
  char shape[256];
  FT_CHECK_EQ_STR((fi_admin_preset_tune_job("llama3-8b", 0, 64, &op, shape, sizeof shape), shape),
                  "q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0;len=graph");
  FT_CHECK_EQ_STR((fi_admin_preset_tune_job("llama3-8b", 1, 64, &op, shape, sizeof shape), shape),
                  "q=bf16;heads=32/8;head_dim=128;causal=1;cap=0");
  /* decode past 512 requests: nothing at that count, the jobs after it still there */
  FT_CHECK_EQ_INT(fi_admin_preset_tune_job("llama3-8b", 0, 1024, &op, shape, sizeof shape), 1);
  FT_CHECK_EQ_INT(fi_admin_preset_tune_job("llama3-8b", 1, 1024, &op, shape, sizeof shape), 0);
  FT_CHECK_EQ_STR((fi_admin_preset_tune_job("llama3-8b", 2, 64, &op, shape, sizeof shape), shape),
                  "op=top_k_top_p_logits;dtype=f32;vocab=128256");
  FT_CHECK_EQ_INT(fi_admin_preset_tune_job("llama3-8b", 2, 1024, &op, shape, sizeof shape), 1);
  FT_CHECK_EQ_INT(fi_admin_preset_tune_job("llama3-8b", 3, 64, &op, shape, sizeof shape), -1);
  FT_CHECK_EQ_INT(fi_admin_preset_tune_job("llama-9", 0, 64, &op, shape, sizeof shape), -1);
  FT_CHECK_EQ_INT(fi_admin_preset_tune_job("llama3-8b", 0, 64, &op, shape, 8), -1, "too small a buffer");
  fi_runtime_destroy(rt);
  td_end(dirs.dir);
}


/* FI_AUTOTUNE=1 at plan time, on this machine without a GPU: the key's first lookup that
 * finds no row tries to measure it, cannot, says why once (a warning naming FI_AUTOTUNE and
 * the key), and leaves the choice to the rule; the key's next lookup is the memo's (no
 * second try), and nothing is stored. Measuring for real: tests/gpu/gpu_autotune.c. */
FT_TEST(autotune_at_plan_time_without_a_gpu_leaves_the_rule) {
  setenv("FI_AUTOTUNE", "1", 1);
  setenv("FI_LOG_LEVEL", "warn", 1);
  tt_dir dirs;
  fi_runtime *rt = tt_open(&dirs);
  unsetenv("FI_AUTOTUNE");
  unsetenv("FI_LOG_LEVEL");
  FT_REQUIRE(rt);
  char logp[256];
  snprintf(logp, sizeof logp, "%s/log.txt", dirs.dir);
  const int fd = open(logp, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  FT_REQUIRE(fd >= 0);
  fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  const int64_t f[RT_DECODE_TACTIC_FIELDS] = {JIT_DT_BF16, JIT_DT_BF16, 32, 8, 128, 16, 0, -1};
  const char *params = NULL;
  const int r1 = rt_tactic_plan(rt, "batch_decode", f, RT_DECODE_TACTIC_FIELDS, 8, kDLCUDA, 0, rt_decode_tactic_shape,
                                NULL, &params);
  const int r2 = rt_tactic_plan(rt, "batch_decode", f, RT_DECODE_TACTIC_FIELDS, 8, kDLCUDA, 0, rt_decode_tactic_shape,
                                NULL, &params);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  FT_CHECK(r1 == 0 && r2 == 0, "%d %d", r1, r2);
  char log[4096] = {0};
  FILE *lf = fopen(logp, "r");
  FT_REQUIRE(lf);
  const size_t got = fread(log, 1, sizeof log - 1, lf);
  fclose(lf);
  log[got] = 0;
  int tries = 0;
  for (const char *s = log; (s = strstr(s, "FI_AUTOTUNE:")); s++) tries++;
  FT_CHECK_EQ_INT(tries, 1, "one warning for two lookups: %s", log);
  FT_CHECK_STR_HAS(log, "q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0;len=graph bucket 8 not measured");
  fi_admin_stats s;
  FT_CHECK(fi_admin_stats_get(rt, &s) == FI_OK && s.tactics == 0);
  fi_runtime_destroy(rt);
  td_end(dirs.dir);
}

/* A tuning variable that sets what an op's tactics choose makes fi_autotune refuse that op
 * (its rule would be the variable's kernel, stored as if it were the rule's), naming the
 * variable; the other ops still go on to the device. */
FT_TEST(autotune_refuses_under_a_tuning_variable) {
  static const struct {
    const char *var, *value, *op, *shape;
  } c[] = {
      {"FI_PREFILL_QTILE", "16", "batch_prefill", "q=bf16;heads=32/8;head_dim=128;causal=1;cap=0"},
      {"FI_DECODE_WARPS", "2", "batch_decode", "q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0;len=graph"},
      {"FI_SAMPLING_SELECT", "radix", "sampling", "op=top_k;dtype=f32;vocab=1000"},
      {"FI_MOE_WGMMA", "0", "moe_gemm", "dtype=bf16;k=128;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64"},
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    setenv(c[i].var, c[i].value, 1);
    tt_dir dirs;
    fi_runtime *rt = tt_open(&dirs);
    unsetenv(c[i].var);
    FT_REQUIRE(rt);
    fi_autotune_options o;
    fi_autotune_result r;
    fi_autotune_options_init(&o);
    o.op = c[i].op, o.shape = c[i].shape, o.tokens = 64;
    FT_CHECK_EQ_INT(fi_autotune(rt, &o, &r), FI_ERR_INVALID_ARGUMENT, "%s", c[i].var);
    FT_CHECK_STR_HAS(fi_last_error(), c[i].var);
    /* another op: on to the device (none here) */
    o.op = i ? "batch_prefill" : "sampling";
    o.shape = i ? c[0].shape : c[2].shape;
    const fi_status st = fi_autotune(rt, &o, &r);
    FT_CHECK(st == FI_ERR_NO_DEVICE || st == FI_ERR_DEVICE, "%s with %s set: %s", o.op, c[i].var, fi_last_error());
    fi_runtime_destroy(rt);
    td_end(dirs.dir);
  }
}
