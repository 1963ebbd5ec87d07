/* test_resilience.c: the runtime against bad files and hostile conditions: a
 * flipped byte, a truncated or foreign file, a newer schema, a full disk,
 * unsafe permissions, fork(), and a size cap; it keeps working and loses nothing valid. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache_ops.h"
#include "fi_admin.h"
#include "ft.h"
#include "jit_registry.h"
#include "rt_internal.h"

static char dir[64];

static void fresh_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/fi-res-XXXXXX");
  if (!mkdtemp(dir)) abort();
  chmod(dir, 0700);
}

static void rm_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
}

static fi_runtime *make_rt(const char *path) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = path;
  o.log_level = 1; /* errors only: the warnings are expected here */
  fi_runtime *rt = NULL;
  return fi_runtime_create(&o, &rt) == FI_OK ? rt : NULL;
}

/* Prewarms configurations [from, to) of rmsnorm for sm_90; returns failures. */
static int prewarm(fi_runtime *rt, int from, int to, int *compiled) {
  int failed = 0;
  if (compiled) *compiled = 0;
  for (int i = from; i < to; i++) {
    fi_prewarm_result r;
    double ms;
    if (fi_admin_prewarm(rt, "rmsnorm", i, "sm_90", &r, &ms) != FI_OK) {
      fprintf(stderr, "  prewarm %d: %s\n", i, fi_last_error());
      failed++;
    } else if (compiled && r == FI_PREWARM_COMPILED) {
      (*compiled)++;
    }
  }
  return failed;
}

static int64_t rows_in(const char *path) {
  sqlite3 *db;
  int64_t n = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM kernels", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return n;
}

static int exec_sql(const char *path, const char *sql) {
  sqlite3 *db;
  int rc = sqlite3_open(path, &db);
  if (rc == SQLITE_OK) rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
  sqlite3_close(db);
  return rc;
}

static int count_glob(const char *pattern) {
  glob_t g;
  int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
  if (n) globfree(&g);
  return n;
}

FT_TEST(flipped_byte_is_rebuilt_once) {
  fresh_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/k.db", dir);
  fi_runtime *rt = make_rt(path);
  FT_REQUIRE(rt && prewarm(rt, 0, 3, NULL) == 0);
  fi_runtime_destroy(rt);
  /* Flip one byte in the middle of one binary, leaving its checksum. */
  FT_REQUIRE(exec_sql(path, "UPDATE kernels SET binary = substr(binary, 1, 100) ||"
                            " x'5a' || substr(binary, 102) WHERE rowid = (SELECT min(rowid) FROM kernels)") ==
             SQLITE_OK);
  rt = make_rt(path);
  FT_REQUIRE(rt);
  int compiled = 0;
  FT_CHECK(prewarm(rt, 0, 3, &compiled) == 0, "prewarm after the flip failed");
  FT_CHECK(compiled == 1, "expected exactly the damaged kernel rebuilt, got %d compiles", compiled);
  fi_stats st = {.struct_size = sizeof st};
  FT_CHECK(fi_runtime_stats(rt, &st) == FI_OK && st.repairs == 1, "repairs %lld",
           (long long)st.repairs);
  fi_verify_report rep;
  FT_CHECK(fi_admin_verify(rt, 0, &rep) == FI_OK && rep.integrity_ok && rep.bad_rows == 0 &&
               rep.rows == 3,
           "after the rebuild: rows %lld bad %lld", (long long)rep.rows, (long long)rep.bad_rows);
  fi_runtime_destroy(rt);
  rm_dir();
}

/* A file that is not a cache is moved aside, never overwritten, and a new
 * cache starts in its place. */
static void bad_file_case(const char *name, void (*spoil)(const char *path)) {
  fresh_dir();
  char path[128], pattern[160];
  snprintf(path, sizeof path, "%s/k.db", dir);
  fi_runtime *rt = make_rt(path);
  FT_REQUIRE(rt && prewarm(rt, 0, 2, NULL) == 0);
  fi_runtime_destroy(rt);
  spoil(path);
  rt = make_rt(path);
  FT_REQUIRE(rt);
  FT_CHECK(prewarm(rt, 0, 4, NULL) == 0, "%s: prewarm failed", name);
  fi_admin_stats as;
  FT_CHECK(fi_admin_stats_get(rt, &as) == FI_OK && !as.fallback, "%s: fell back to memory", name);
  fi_runtime_destroy(rt);
  snprintf(pattern, sizeof pattern, "%s/k.db.corrupt-*", dir);
  FT_CHECK(count_glob(pattern) == 1, "%s: no file moved aside", name);
  FT_CHECK(rows_in(path) == 4, "%s: new cache has %lld rows", name, (long long)rows_in(path));
  rm_dir();
}

static void truncate_file(const char *p) {
  if (truncate(p, 5000) != 0) abort();
  char side[160];
  snprintf(side, sizeof side, "%s-wal", p);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", p);
  unlink(side);
}
static void random_bytes(const char *p) {
  FILE *f = fopen(p, "wb");
  for (int i = 0; i < 65536; i++) fputc(rand() & 255, f);
  fclose(f);
  truncate_file(p); /* drop -wal/-shm too; the size stays random garbage */
  f = fopen(p, "wb");
  for (int i = 0; i < 65536; i++) fputc(rand() & 255, f);
  fclose(f);
}
static void newer_schema(const char *p) {
  if (exec_sql(p, "UPDATE meta SET v = '99' WHERE k = 'schema_version'") != SQLITE_OK) abort();
}

FT_TEST(truncated_file_moved_aside) { bad_file_case("truncated", truncate_file); }
FT_TEST(random_bytes_file_moved_aside) { bad_file_case("random", random_bytes); }
FT_TEST(newer_schema_moved_aside) { bad_file_case("newer schema", newer_schema); }

FT_TEST(full_disk_keeps_serving_from_memory) {
  fresh_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/k.db", dir);
  fi_runtime *rt = make_rt(path);
  FT_REQUIRE(rt && prewarm(rt, 0, 3, NULL) == 0);
  char err[256];
  /* SQLite's page limit, set just above the current size, fails the next
   * writes with SQLITE_FULL exactly as a full filesystem would. */
  int64_t entries, bytes, file_bytes;
  FT_REQUIRE(cache_store_totals(rt->store, &entries, &bytes, &file_bytes, err, sizeof err) == 0);
  FT_REQUIRE(cache_store_limit_pages(rt->store, file_bytes / 4096 + 1, err, sizeof err) == 0, "%s",
             err);
  /* A kernel call's path: the binary is compiled and used from memory. */
  for (int i = 3; i < 12; i++) {
    jit_key k;
    jit_op_rmsnorm.config(i, &k);
    cache_record rec;
    fi_status st = rt_binary_ensure(rt, &k, "sm_90", 0, NULL, NULL, &rec);
    FT_CHECK(st == FI_OK && rec.binary && rec.bytes > 0, "config %d on a full disk: %s", i,
             fi_last_error());
    if (st == FI_OK) cache_record_free(&rec);
  }
  /* Prewarm's job is the file: it reports the failed write. */
  fi_prewarm_result r;
  double ms;
  FT_CHECK(fi_admin_prewarm(rt, "rmsnorm", 15, "sm_90", &r, &ms) == FI_ERR_CACHE,
           "prewarm on a full disk: %s", fi_last_error());
  fi_runtime_destroy(rt);
  FT_CHECK(rows_in(path) >= 3, "valid entries lost: %lld rows", (long long)rows_in(path));
  rt = make_rt(path);
  fi_verify_report rep;
  FT_CHECK(rt && fi_admin_verify(rt, 0, &rep) == FI_OK && rep.integrity_ok && rep.bad_rows == 0,
           "file damaged by the full disk");
  fi_runtime_destroy(rt);
  rm_dir();
}

FT_TEST(writable_by_others_is_refused) {
  fresh_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/k.db", dir);
  fi_runtime *rt = make_rt(path);
  FT_REQUIRE(rt && prewarm(rt, 0, 1, NULL) == 0);
  fi_runtime_destroy(rt);
  FT_REQUIRE(chmod(path, 0666) == 0);
  rt = make_rt(path);
  FT_REQUIRE(rt);
  int compiled = 0;
  FT_CHECK(prewarm(rt, 0, 1, &compiled) == 0 && compiled == 1,
           "a world-writable file must not be read (compiled %d)", compiled);
  fi_admin_stats as;
  FT_CHECK(fi_admin_stats_get(rt, &as) == FI_OK && as.fallback, "not refused");
  fi_runtime_destroy(rt);
  FT_REQUIRE(chmod(path, 0600) == 0 && chmod(dir, 0777) == 0);
  rt = make_rt(path);
  FT_CHECK(rt && fi_admin_stats_get(rt, &as) == FI_OK && as.fallback,
           "a world-writable directory must be refused");
  fi_runtime_destroy(rt);
  chmod(dir, 0700);
  rm_dir();
}

FT_TEST(child_after_fork_prewarms_same_file) {
  fresh_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/k.db", dir);
  fi_runtime *rt = make_rt(path);
  FT_REQUIRE(rt && prewarm(rt, 0, 4, NULL) == 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    /* The parent's connection is open and in use: the child must reopen. */
    int bad = prewarm(rt, 0, 12, NULL);
    _exit(bad == 0 ? 0 : 1);
  }
  int parent_bad = prewarm(rt, 12, 20, NULL);
  int status = -1;
  waitpid(pid, &status, 0);
  FT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status %d)", status);
  FT_CHECK(parent_bad == 0, "parent failed after the fork");
  fi_verify_report rep;
  FT_CHECK(fi_admin_verify(rt, 0, &rep) == FI_OK && rep.integrity_ok && rep.bad_rows == 0,
           "file corrupted: %s", rep.detail);
  FT_CHECK(rep.rows == 20, "rows %lld, expected 20", (long long)rep.rows);
  fi_runtime_destroy(rt);
  rm_dir();
}

FT_TEST(size_cap_evicts_least_recently_used) {
  fresh_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/k.db", dir);
  setenv("FI_CACHE_MAX_BYTES", "300K", 1);
  fi_runtime *rt = make_rt(path);
  unsetenv("FI_CACHE_MAX_BYTES");
  FT_REQUIRE(rt);
  int n = fi_admin_config_count("rmsnorm");
  FT_CHECK(prewarm(rt, 0, n, NULL) == 0);
  fi_admin_stats as;
  FT_REQUIRE(fi_admin_stats_get(rt, &as) == FI_OK);
  fi_stats st = {.struct_size = sizeof st};
  fi_runtime_stats(rt, &st);
  FT_CHECK(as.file_bytes <= 300 * 1024, "file %lld bytes over its 300K cap", (long long)as.file_bytes);
  FT_CHECK(st.evictions > 0 && as.entries < n, "evictions %lld entries %lld", (long long)st.evictions,
           (long long)as.entries);
  /* Each new entry was the most recently used: the last ones compiled stay. */
  int compiled = -1;
  prewarm(rt, n - 1, n, &compiled);
  FT_CHECK(compiled == 0, "the most recent entry was evicted");
  fi_runtime_destroy(rt);
  rm_dir();
}
