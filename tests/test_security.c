/* test_security.c: the cache as a security boundary (issue 47): what another
 * user can plant or swap on the way to a cache file, the system layer's
 * sidecars, the modes FI_CACHE_UMASK may give, export's temporaries, fork()
 * while threads use the runtime, vendor library paths that are not files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache_ops.h"
#include "dlpack/dlpack.h"
#include "fi_admin.h"
#include "fi_runtime.h"
#include "ft.h"
#include "jit_compiler.h"
#include "jit_key.h"
#include "rt_internal.h"
#include "test_cache_util.h"

/* ---- helpers ---- */

static fi_runtime *make_rt(const char *path, const char *system_path) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = path;
  o.system_cache_path = system_path;
  o.log_level = 1; /* errors only: the refusals here are expected */
  fi_runtime *rt = NULL;
  return fi_runtime_create(&o, &rt) == FI_OK ? rt : NULL;
}

/* Puts t into a new store at path (WAL, or rollback with flags). */
static int store_with(const char *path, int flags, test_rec *t, int n) {
  cache_store *s = NULL;
  char err[512];
  if (cache_store_open(path, flags, &s, err, sizeof err) != CACHE_OK) {
    fprintf(stderr, "  open %s: %s\n", path, err);
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++)
    if (cache_store_put(s, &t[i].r, err, sizeof err) != CACHE_OK) {
      fprintf(stderr, "  put: %s\n", err);
      rc = -1;
    }
  cache_store_close(s);
  return rc;
}

/* The binary the runtime finds for t's hash through fi_admin_get: 1 when
 * it is t's own, 0 when another, -1 when none. */
/* A row the runtime's row check takes (its op leads its key; hashes, entry and the
 * cubin's ELF header follow from the row's own fields), so that what these tests
 * see is the path and file rules alone. */
static void rec_make_valid(test_rec *t, int n, size_t bytes) {
  rec_make(t, n, "rmsnorm", "sm_90", "nvrtc-13.0", bytes);
  snprintf(t->key, sizeof t->key, "op=rmsnorm;dtype=bf16;head_dim=%d", 64 + n);
  jit_row_hashes(t->key, t->templates, t->arch, t->options, t->abi, t->compiler, t->r.key_hash, t->r.hash);
  jit_entry_name_op(t->op, t->r.key_hash, t->entry, sizeof t->entry);
  uint8_t *h = t->bin; /* a 64-byte ELF64 header: EM_CUDA (190), ABI 8, sm_90 in e_flags */
  memset(h, 0, 64);
  memcpy(h, "\177ELF", 4);
  h[4] = 2, h[5] = 1, h[6] = 1, h[8] = 8, h[18] = 190;
  const uint32_t flags = 0x6005a04;
  for (int i = 0; i < 4; i++) h[48 + i] = (uint8_t)(flags >> (8 * i));
}

static int finds(fi_runtime *rt, const test_rec *t) {
  char hex[33];
  cache_hash_hex(t->r.hash, hex);
  void *bin = NULL;
  size_t n = 0;
  if (fi_admin_get(rt, hex, NULL, NULL, &bin, &n, NULL) != FI_OK) return -1;
  int same = n == t->r.bytes && memcmp(bin, t->bin, n) == 0;
  fi_admin_free(bin);
  return same;
}

static int copy_file(const char *from, const char *to) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
  return system(cmd) == 0 ? 0 : -1;
}

/* A second real user for the cross-user cases, made with useradd and removed
 * by other_user_end; 0 when this machine cannot (not root, no useradd). */
static const char *other_name = "fi_sec_other";
static uid_t other_uid;
static gid_t other_gid;
static int other_user_begin(void) {
  if (geteuid() != 0) return 0;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "userdel %s >/dev/null 2>&1; useradd -M -N -s /usr/sbin/nologin %s"
                            " >/dev/null 2>&1", other_name, other_name);
  if (system(cmd) != 0) return 0;
  struct passwd *pw = getpwnam(other_name);
  if (!pw) return 0;
  other_uid = pw->pw_uid;
  other_gid = pw->pw_gid;
  return 1;
}
static void other_user_end(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "userdel %s >/dev/null 2>&1", other_name);
  if (system(cmd) != 0) fprintf(stderr, "  note: userdel %s failed\n", other_name);
}

/* ---- 1: the system layer never applies a sidecar ---- */

/* A root-owned WAL-mode system file; beside it, the -wal of a copy whose row
 * was edited (binary and checksum) and never checkpointed, as a user who
 * can write that directory would plant it. */
FT_TEST(system_layer_ignores_a_planted_wal) {
  char dir[64], sys[128], work[128], copy[160], side[192];
  td_begin(dir);
  snprintf(sys, sizeof sys, "%s/shared", dir);
  snprintf(work, sizeof work, "%s/attacker", dir);
  FT_REQUIRE(mkdir(sys, 0755) == 0 && mkdir(work, 0700) == 0 && chmod(dir, 0755) == 0);
  snprintf(sys + strlen(sys), sizeof sys - strlen(sys), "/k.db");
  test_rec t;
  rec_make_valid(&t, 1, 4096);
  FT_REQUIRE(store_with(sys, 0, &t, 1) == 0);
  /* As shipped: the file alone, in WAL mode. */
  snprintf(side, sizeof side, "%s-wal", sys);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", sys);
  unlink(side);
  FT_REQUIRE(chmod(sys, 0644) == 0);
  /* The attacker's edit: same row, other bytes, a checksum that matches them. */
  snprintf(copy, sizeof copy, "%s/k.db", work);
  FT_REQUIRE(copy_file(sys, copy) == 0);
  sqlite3 *db = NULL;
  FT_REQUIRE(sqlite3_open(copy, &db) == SQLITE_OK);
  sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &(int){1});
  FT_REQUIRE(sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;", NULL, NULL,
                          NULL) == SQLITE_OK);
  uint8_t *evil = malloc(t.r.bytes);
  for (size_t i = 0; i < t.r.bytes; i++) evil[i] = (uint8_t)(0xA5 ^ i);
  sqlite3_stmt *st = NULL;
  FT_REQUIRE(sqlite3_prepare_v2(db, "UPDATE kernels SET binary = ?1, checksum = ?2", -1, &st,
                                NULL) == SQLITE_OK);
  sqlite3_bind_blob(st, 1, evil, (int)t.r.bytes, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)XXH3_64bits(evil, t.r.bytes));
  FT_REQUIRE(sqlite3_step(st) == SQLITE_DONE);
  sqlite3_finalize(st);
  /* Killed before any checkpoint: the edit is only in the -wal. */
  char wal[200];
  snprintf(wal, sizeof wal, "%s-wal", copy);
  snprintf(side, sizeof side, "%s-wal", sys);
  FT_REQUIRE(file_size(wal) > 0 && copy_file(wal, side) == 0, "no -wal to plant");
  sqlite3_close(db);

  /* 1. In a directory every user can write (sticky, like /tmp): refused. */
  char sysdir[128];
  snprintf(sysdir, sizeof sysdir, "%s/shared", dir);
  FT_REQUIRE(chmod(sysdir, 01777) == 0);
  fi_runtime *rt = make_rt(":memory:", sys);
  FT_REQUIRE(rt != NULL);
  int got = finds(rt, &t);
  FT_CHECK(got == -1, "a system layer in a 1777 directory was used (%s)",
           got == 0 ? "with the planted row" : "its own row");
  fi_runtime_destroy(rt);

  /* 2. In its owner's directory, a -wal there (the owner's, or left by
   * anything) is still never applied: the file is read alone. */
  FT_REQUIRE(chmod(sysdir, 0755) == 0);
  rt = make_rt(":memory:", sys);
  FT_REQUIRE(rt != NULL);
  got = finds(rt, &t);
  FT_CHECK(got == 1, "system layer row: %s",
           got == 0 ? "the planted -wal was applied" : "not found");
  fi_runtime_destroy(rt);
  struct stat sb;
  snprintf(side, sizeof side, "%s-shm", sys);
  FT_CHECK(stat(side, &sb) != 0, "reading the system layer created %s", side);
  free(evil);
  rec_done(&t);
  td_end(dir);
}

/* ---- 2: every component from the root, what was opened ---- */

/* Paths another user controls above the file: their link in a sticky
 * directory (the /tmp swap), their directory two levels up. */
FT_TEST(path_through_another_users_link_or_directory_is_refused) {
  if (!other_user_begin()) FT_SKIP("cannot create a second user here (needs root and useradd)");
  char dir[64], mine[128], sticky[128], link[160], path[256], theirs[128], deep[192];
  td_begin(dir);
  FT_REQUIRE(chmod(dir, 0755) == 0);
  snprintf(mine, sizeof mine, "%s/mine", dir);
  snprintf(sticky, sizeof sticky, "%s/tmp", dir);
  FT_REQUIRE(mkdir(mine, 0700) == 0 && mkdir(sticky, 0700) == 0 && chmod(sticky, 01777) == 0);
  test_rec t;
  rec_make_valid(&t, 2, 1024);
  snprintf(path, sizeof path, "%s/k.db", mine);
  FT_REQUIRE(store_with(path, 0, &t, 1) == 0);

  /* Through this user's own link in the sticky directory: fine. */
  snprintf(link, sizeof link, "%s/link", sticky);
  FT_REQUIRE(symlink(mine, link) == 0);
  snprintf(path, sizeof path, "%s/k.db", link);
  fi_runtime *rt = make_rt(path, NULL);
  fi_admin_stats as;
  FT_CHECK(rt && finds(rt, &t) == 1, "own link refused: %s", fi_last_error());
  fi_runtime_destroy(rt);

  /* The same link owned by the other user: refused. */
  FT_REQUIRE(lchown(link, other_uid, other_gid) == 0);
  rt = make_rt(path, NULL);
  FT_REQUIRE(rt != NULL);
  FT_CHECK(fi_admin_stats_get(rt, &as) == FI_OK && as.fallback, "another user's link was followed");
  FT_CHECK(as.fallback_reason && strstr(as.fallback_reason, "owned by uid"), "reason: %s",
           as.fallback_reason ? as.fallback_reason : "");
  FT_CHECK(finds(rt, &t) == -1, "a row was read through another user's link");
  fi_runtime_destroy(rt);

  /* A directory of the other user's two levels above the file. */
  snprintf(theirs, sizeof theirs, "%s/theirs", dir);
  snprintf(deep, sizeof deep, "%s/theirs/sub", dir);
  FT_REQUIRE(mkdir(theirs, 0755) == 0 && mkdir(deep, 0700) == 0);
  snprintf(path, sizeof path, "%s/k.db", deep);
  FT_REQUIRE(store_with(path, 0, &t, 1) == 0);
  FT_REQUIRE(chown(theirs, other_uid, other_gid) == 0);
  rt = make_rt(path, NULL);
  FT_REQUIRE(rt != NULL);
  FT_CHECK(fi_admin_stats_get(rt, &as) == FI_OK && as.fallback,
           "a cache under another user's directory was used");
  FT_CHECK(finds(rt, &t) == -1, "a row was read under another user's directory");
  fi_runtime_destroy(rt);
  rec_done(&t);
  td_end(dir);
  other_user_end();
}

/* A link in the file's place swapped by its owner after the check would
 * redirect a path-based open; the walk judges what it opened, so a link
 * where the file should be is followed only when this user or root owns it. */
FT_TEST(link_as_the_file_is_judged_by_its_owner) {
  if (!other_user_begin()) FT_SKIP("cannot create a second user here (needs root and useradd)");
  char dir[64], sub[96], real[128], link[128], err[512];
  td_begin(dir);
  snprintf(sub, sizeof sub, "%s/c", dir);
  FT_REQUIRE(mkdir(sub, 0700) == 0);
  snprintf(real, sizeof real, "%s/real.db", sub);
  snprintf(link, sizeof link, "%s/k.db", sub);
  FILE *f = fopen(real, "w");
  FT_REQUIRE(f != NULL);
  fclose(f);
  FT_REQUIRE(chmod(real, 0600) == 0 && symlink(real, link) == 0);
  FT_CHECK(cache_check_permissions(link, 0, err, sizeof err) == 0, "own link: %s", err);
  FT_REQUIRE(lchown(link, other_uid, other_gid) == 0);
  FT_CHECK(cache_check_permissions(link, 0, err, sizeof err) != 0 && strstr(err, "link"),
           "another user's link as the file was accepted (%s)", err);
  td_end(dir);
  other_user_end();
}

/* ---- 5: FI_CACHE_UMASK ---- */

FT_TEST(umask_that_opens_the_cache_to_everyone_creates_nothing) {
  char dir[64], path[160], top[128];
  td_begin(dir);
  snprintf(top, sizeof top, "%s/a", dir);
  snprintf(path, sizeof path, "%s/a/b/k.db", dir);
  setenv("FI_CACHE_UMASK", "000", 1);
  fi_runtime *rt = make_rt(path, NULL);
  FT_REQUIRE(rt != NULL);
  fi_admin_stats as;
  FT_CHECK(fi_admin_stats_get(rt, &as) == FI_OK && as.fallback, "umask 000 accepted");
  fi_runtime_destroy(rt);
  struct stat st;
  FT_CHECK(stat(top, &st) != 0, "umask 000: %s was created (mode %o)", top,
           (unsigned)(st.st_mode & 07777));

  /* 007: the cache's own directory and file shared with the group; the
   * directory created above it is not the cache's, and stays unwritable
   * by the group. */
  setenv("FI_CACHE_UMASK", "007", 1);
  rt = make_rt(path, NULL);
  FT_REQUIRE(rt != NULL);
  FT_CHECK(fi_admin_stats_get(rt, &as) == FI_OK && !as.fallback, "umask 007: %s",
           as.fallback_reason ? as.fallback_reason : "");
  fi_runtime_destroy(rt);
  unsetenv("FI_CACHE_UMASK");
  char own[160];
  snprintf(own, sizeof own, "%s/a/b", dir);
  FT_CHECK(stat(top, &st) == 0 && (st.st_mode & 0777) == 0750, "%s mode %o (want 0750)", top,
           (unsigned)(st.st_mode & 0777));
  FT_CHECK(stat(own, &st) == 0 && (st.st_mode & 0777) == 0770, "%s mode %o (want 0770)", own,
           (unsigned)(st.st_mode & 0777));
  FT_CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0660, "%s mode %o (want 0660)", path,
           (unsigned)(st.st_mode & 0777));
  td_end(dir);
}

/* ---- 4, 14: export's temporaries ---- */

static const char *build_dir(void) {
  const char *b = getenv("FI_BUILD");
  return b && b[0] ? b : "build";
}

/* `fi-cache export HASH -o FILE` with links planted at the temporary names
 * (the old FILE.tmp, and FILE.tmp-<pid> of the very process: exec keeps the
 * pid) pointing at a file that must not change. */
FT_TEST(export_binary_never_writes_through_a_planted_link) {
  char dir[64], cache[128], victim[128], out[128], tmp[192], tool[256];
  td_begin(dir);
  snprintf(tool, sizeof tool, "%s/fi-cache", build_dir());
  if (access(tool, X_OK) != 0) FT_SKIP("%s is not built", tool);
  snprintf(cache, sizeof cache, "%s/k.db", dir);
  test_rec t;
  rec_make_valid(&t, 3, 2048);
  FT_REQUIRE(store_with(cache, 0, &t, 1) == 0);
  snprintf(victim, sizeof victim, "%s/victim", dir);
  FILE *f = fopen(victim, "w");
  FT_REQUIRE(f && fputs("precious\n", f) >= 0 && fclose(f) == 0);
  snprintf(out, sizeof out, "%s/out.bin", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", out);
  FT_REQUIRE(symlink(victim, tmp) == 0);
  char hex[33];
  cache_hash_hex(t.r.hash, hex);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", out, (int)getpid());
    if (symlink(victim, tmp) != 0) _exit(97);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(tool, "fi-cache", "--cache", cache, "export", hex, "-o", out, (char *)NULL);
    _exit(98);
  }
  int status = -1;
  FT_REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) < 97,
             "status %d", status);
  f = fopen(victim, "r");
  char buf[64] = "";
  FT_CHECK(f && fgets(buf, sizeof buf, f) && strcmp(buf, "precious\n") == 0,
           "the link's target was overwritten");
  if (f) fclose(f);
  struct stat st;
  FT_CHECK(lstat(out, &st) != 0 || S_ISREG(st.st_mode), "FILE is not a plain file");
  rec_done(&t);
  td_end(dir);
}

/* Leftovers of an export killed before its rename: the directory export
 * builds in, and the plain temporary and journal of earlier versions. Those
 * of processes that are gone are removed by the next export to that FILE;
 * those of a live process are left alone. */
FT_TEST(export_removes_stale_temporaries_of_dead_processes) {
  char dir[64], cache[128], out[128], p[256];
  td_begin(dir);
  snprintf(cache, sizeof cache, "%s/c/k.db", dir);
  snprintf(out, sizeof out, "%s/ship.db", dir);
  fflush(NULL);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  FT_REQUIRE(dead > 0 && waitpid(dead, NULL, 0) == dead);
  /* The leftovers, as a kill -9 leaves them. */
  snprintf(p, sizeof p, "%s.tmp-%d", out, (int)dead);
  FT_REQUIRE(mkdir(p, 0700) == 0);
  snprintf(p, sizeof p, "%s.tmp-%d/ship.db", out, (int)dead);
  FILE *f = fopen(p, "w");
  FT_REQUIRE(f && fputs("half", f) >= 0 && fclose(f) == 0);
  snprintf(p, sizeof p, "%s.tmp-%d/ship.db-journal", out, (int)dead);
  f = fopen(p, "w");
  FT_REQUIRE(f && fputs("journal", f) >= 0 && fclose(f) == 0);
  snprintf(p, sizeof p, "%s.tmp-%d-journal", out, (int)dead + 1000000);
  f = fopen(p, "w"); /* an earlier version's journal of a pid that cannot exist */
  FT_REQUIRE(f && fclose(f) == 0);
  snprintf(p, sizeof p, "%s.tmp-1", out); /* pid 1 lives */
  f = fopen(p, "w");
  FT_REQUIRE(f && fclose(f) == 0);
  fi_runtime *rt = make_rt(cache, NULL);
  FT_REQUIRE(rt != NULL);
  int64_t n = -1;
  FT_CHECK(fi_admin_export_cache(rt, out, NULL, NULL, &n) == FI_OK && n == 0, "export: %s",
           fi_last_error());
  fi_runtime_destroy(rt);
  int stale = 0, live = 0, other = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "ship.db.tmp-", 12) != 0) continue;
    if (strcmp(e->d_name, "ship.db.tmp-1") == 0)
      live++;
    else if (atoi(e->d_name + 12) == (int)getpid())
      other++;
    else
      stale++;
  }
  if (d) closedir(d);
  FT_CHECK(stale == 0, "%d stale temporaries left", stale);
  FT_CHECK(other == 0, "this export's own temporary left behind");
  FT_CHECK(live == 1, "a live process's temporary was removed");
  struct stat st;
  FT_CHECK(stat(out, &st) == 0 && (st.st_mode & 0777) == 0644, "exported file mode %o",
           (unsigned)(st.st_mode & 0777));
  td_end(dir);
}

/* ---- 6, 7: fork() ---- */

typedef struct busy {
  fi_runtime *rt;
  const char *path;
  atomic_int stop;
  atomic_long calls;
} busy;

static int count_cb(const fi_cache_entry *e, void *user) {
  (void)e;
  (*(int *)user)++;
  return 0;
}

/* A thread of the parent that never stops using the runtime's stores, and
 * opening and closing stores of its own (SQLite's open path). */
static void *busy_main(void *arg) {
  busy *b = arg;
  char err[256];
  while (!atomic_load(&b->stop)) {
    int n = 0;
    fi_admin_list(b->rt, NULL, NULL, count_cb, &n);
    fi_admin_stats st;
    fi_admin_stats_get(b->rt, &st);
    cache_store *s = NULL;
    if (cache_store_open(b->path, 0, &s, err, sizeof err) == CACHE_OK) {
      int64_t e = 0;
      cache_store_totals(s, &e, NULL, NULL, err, sizeof err);
      cache_store_close(s);
    }
    atomic_fetch_add(&b->calls, 1);
  }
  return NULL;
}

/* Waits for pid at most ms; kills it (and counts it as hung) after. */
static int wait_or_kill(pid_t pid, int ms, int *status) {
  for (int waited = 0; waited < ms; waited += 5) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return 0;
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  return -1;
}

FT_TEST(fork_while_threads_use_the_runtime) {
#ifdef __SANITIZE_ADDRESS__
  /* GCC's libasan takes its allocator's own lock with no fork handler: a child forked while
   * another thread allocates can inherit it held and hang in its first malloc (seen: a
   * backtrace ending in SizeClassAllocator64::GetFromAllocator under cache_path_secure).
   * That is the sanitizer's limitation, not ours; the plain build (make test) runs it. */
  FT_SKIP("fork with busy threads: libasan's allocator is not fork-safe (make test runs this case)");
#endif
  char dir[64], path[128], err[256];
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  test_rec t[8];
  for (int i = 0; i < 8; i++) rec_make_valid(&t[i], 10 + i, 3000);
  FT_REQUIRE(store_with(path, 0, t, 8) == 0);
  fi_runtime *rt = make_rt(path, NULL);
  FT_REQUIRE(rt != NULL);
  busy b = {rt, path, 0, 0};
  pthread_t th[4];
  for (int i = 0; i < 4; i++) FT_REQUIRE(pthread_create(&th[i], NULL, busy_main, &b) == 0);
  int hung = 0, bad = 0;
  const int children = 30;
  for (int c = 0; c < children; c++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      /* The first call an admin call, as in the report; then a store of its own. */
      int n = 0;
      if (fi_admin_list(rt, NULL, NULL, count_cb, &n) != FI_OK || n != 8) _exit(2);
      cache_store *s = NULL;
      int64_t e = -1;
      if (cache_store_open(path, 0, &s, err, sizeof err) != CACHE_OK) _exit(3);
      if (cache_store_totals(s, &e, NULL, NULL, err, sizeof err) != CACHE_OK || e != 8) _exit(4);
      cache_store_close(s);
      _exit(0);
    }
    FT_REQUIRE(pid > 0, "fork");
    int status = -1;
    if (wait_or_kill(pid, 10000, &status) != 0)
      hung++;
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      bad++;
  }
  atomic_store(&b.stop, 1);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  FT_CHECK(hung == 0, "%d of %d children hung", hung, children);
  FT_CHECK(bad == 0, "%d of %d children failed", bad, children);
  FT_CHECK(atomic_load(&b.calls) > children, "the parent's threads made %ld calls",
           atomic_load(&b.calls));
  /* The parent goes on with the same connection. */
  int n = 0;
  FT_CHECK(fi_admin_list(rt, NULL, NULL, count_cb, &n) == FI_OK && n == 8, "parent after: %d", n);
  fi_runtime_destroy(rt);
  for (int i = 0; i < 8; i++) rec_done(&t[i]);
  td_end(dir);
}

/* An admin call in a child must not reuse the parent's connection: with
 * the file replaced in the child before its first call, the child sees the
 * new file, which only a connection of its own can. */
FT_TEST(admin_calls_in_a_forked_child_use_their_own_connection) {
  char dir[64], path[128], other[128];
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  snprintf(other, sizeof other, "%s/other.db", dir);
  test_rec t[3];
  for (int i = 0; i < 3; i++) rec_make_valid(&t[i], 20 + i, 512);
  FT_REQUIRE(store_with(path, 0, t, 1) == 0);
  FT_REQUIRE(store_with(other, CACHE_OPEN_ROLLBACK, t, 3) == 0);
  fi_runtime *rt = make_rt(path, NULL);
  FT_REQUIRE(rt != NULL);
  fi_admin_stats as;
  FT_REQUIRE(fi_admin_stats_get(rt, &as) == FI_OK && as.entries == 1 && !as.fallback);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    char side[160];
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
    if (rename(other, path) != 0) _exit(5);
    int ok = 1;
    fi_admin_stats cs;
    if (fi_admin_stats_get(rt, &cs) != FI_OK || cs.entries != 3) ok = 0;
    int n = 0;
    if (fi_admin_list(rt, NULL, NULL, count_cb, &n) != FI_OK || n != 3) ok = 0;
    fprintf(stderr, "  child: stats %lld entries, list %d\n", (long long)cs.entries, n);
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  FT_REQUIRE(pid > 0 && wait_or_kill(pid, 20000, &status) == 0, "child hung");
  FT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the child's admin calls read the parent's file (status %d)", status);
  fi_runtime_destroy(rt);
  for (int i = 0; i < 3; i++) rec_done(&t[i]);
  td_end(dir);
}

/* ---- 12: a user cache that can only be read ---- */

/* A complete cache in a directory its owner cannot write (what a read-only
 * filesystem does to everyone): its kernels are read, not recompiled. Root
 * writes anything, so the reading runs as the second user. */
FT_TEST(read_only_user_cache_is_read) {
  if (!other_user_begin()) FT_SKIP("cannot create a second user here (needs root and useradd)");
  char dir[64], sub[96], path[128];
  td_begin(dir);
  FT_REQUIRE(chmod(dir, 0711) == 0);
  snprintf(sub, sizeof sub, "%s/c", dir);
  snprintf(path, sizeof path, "%s/k.db", sub);
  test_rec t;
  rec_make_valid(&t, 30, 4096);
  FT_REQUIRE(store_with(path, 0, &t, 1) == 0);
  FT_REQUIRE(raw_int(path, "SELECT count(*) FROM kernels") == 1);
  /* As a read-only filesystem has it: no -shm can be made or written. */
  char side[160];
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "chown -R %u:%u '%s'", (unsigned)other_uid, (unsigned)other_gid, sub);
  FT_REQUIRE(system(cmd) == 0);
  FT_REQUIRE(chmod(path, 0400) == 0 && chmod(sub, 0500) == 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(other_gid) != 0 || setuid(other_uid) != 0) _exit(3);
    fi_runtime *rt = make_rt(path, NULL);
    if (!rt) _exit(4);
    fi_admin_stats as;
    int ok = fi_admin_stats_get(rt, &as) == FI_OK && !as.fallback;
    int got = finds(rt, &t);
    fprintf(stderr, "  child: fallback %d (%s), row %d\n", as.fallback,
            as.fallback_reason ? as.fallback_reason : "", got);
    fi_runtime_destroy(rt);
    _exit(ok && got == 1 ? 0 : 1);
  }
  int status = -1;
  FT_REQUIRE(pid > 0 && wait_or_kill(pid, 20000, &status) == 0, "child hung");
  FT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the read-only cache was not read (status %d)", status);
  struct stat st;
  FT_CHECK(stat(path, &st) == 0 && st.st_size > 0, "the file changed");
  rec_done(&t);
  chmod(sub, 0700);
  td_end(dir);
  other_user_end();
}

/* ---- 15: vendor library paths ---- */

/* FI_NVRTC_LIBRARY and FI_CUDA_LIBRARY naming a FIFO: the loader would
 * block on it forever; the runtime refuses it at once. */
FT_TEST(vendor_library_fifo_is_refused) {
  char dir[64], fifo[128];
  td_begin(dir);
  snprintf(fifo, sizeof fifo, "%s/libfake.so", dir);
  FT_REQUIRE(mkfifo(fifo, 0600) == 0);
  const char *vars[] = {"FI_NVRTC_LIBRARY", "FI_CUDA_LIBRARY"};
  for (int v = 0; v < 2; v++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      setenv(vars[v], fifo, 1);
      char err[1024] = "";
      int rc;
      /* What the runtime hands each loader: the variable's value, read once at create. */
      fi_runtime *rt = make_rt(":memory:", NULL);
      if (v == 0) {
        const jit_compiler *cc = jit_compiler_for_arch("sm_90"); /* NVRTC, through the registry */
        rc = cc && rt ? cc->load(rt_compiler_library(rt, cc), err, sizeof err) : 0;
      } else {
        const rt_device_i *be = rt_device_at(rt_device_slot_for(kDLCUDA));
        const rt_device_config cfg = {fifo, 1};
        void *st = be ? be->create(&cfg) : NULL;
        rc = st ? be->load(st, err, sizeof err) : 0;
      }
      fprintf(stderr, "  %s: rc %d: %s\n", vars[v], rc, err);
      _exit(rc != 0 && strstr(err, "FIFO") ? 0 : 1);
    }
    int status = -1;
    int r = wait_or_kill(pid, 5000, &status);
    FT_CHECK(r == 0, "%s=FIFO: the load hung", vars[v]);
    FT_CHECK(r != 0 || (WIFEXITED(status) && WEXITSTATUS(status) == 0),
             "%s=FIFO: not refused by name (status %d)", vars[v], status);
  }
  td_end(dir);
}

/* ---- 21: CUDA in a forked child ---- */

/* No GPU here: a stand-in driver library, built by this test, behaves as the
 * real one does in a child of a process that initialized it (every call
 * fails with CUDA_ERROR_NOT_INITIALIZED). It injects that fault only; the
 * message under test is the runtime's. */
static const char fake_cuda_src[] =
    "#include <unistd.h>\n"
    "static pid_t owner;\n"
    "#define CHK if (getpid() != owner) return 3\n"
    "int cuInit(unsigned f) { (void)f; if (!owner) owner = getpid(); CHK; return 0; }\n"
    "int cuDriverGetVersion(int *v) { *v = 12080; return 0; }\n"
    "int cuDeviceGetCount(int *n) { CHK; *n = 1; return 0; }\n"
    "int cuDeviceGet(int *d, int i) { CHK; *d = i; return 0; }\n"
    "int cuDeviceGetAttribute(int *v, int a, int d) { (void)d; CHK;\n"
    "  *v = a == 75 ? 9 : a == 76 ? 0 : 132; return 0; }\n"
    "int cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; CHK; *c = (void *)16; return 0; }\n"
    "int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }\n"
    "int cuCtxGetCurrent(void **c) { CHK; *c = 0; return 0; }\n"
    "int cuCtxPushCurrent_v2(void *c) { (void)c; CHK; return 0; }\n"
    "int cuCtxPopCurrent_v2(void **c) { (void)c; return 0; }\n"
    "int cuModuleLoadData(void **m, const void *b) { (void)m; (void)b; return 3; }\n"
    "int cuModuleUnload(void *m) { (void)m; return 0; }\n"
    "int cuModuleGetFunction(void **f, void *m, const char *n) { (void)f; (void)m; (void)n; return 3; }\n"
    "int cuFuncSetAttribute(void *f, int a, int v) { (void)f; (void)a; (void)v; return 3; }\n"
    "int cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int b, unsigned long s)\n"
    "{ (void)n; (void)f; (void)b; (void)s; return 3; }\n"
    "int cuLaunchKernel(void) { return 3; }\n"
    "int cuGetErrorName(int r, const char **s) { *s = r == 3 ? \"CUDA_ERROR_NOT_INITIALIZED\" : \"E\"; return 0; }\n"
    "int cuGetErrorString(int r, const char **s) { (void)r; *s = \"initialization error\"; return 0; }\n";

FT_TEST(cuda_error_in_a_forked_child_names_the_fork) {
  char dir[64], src[128], lib[128], cmd[512];
  td_begin(dir);
  snprintf(src, sizeof src, "%s/fake_cuda.c", dir);
  snprintf(lib, sizeof lib, "%s/libcuda.so.1", dir);
  FILE *f = fopen(src, "w");
  FT_REQUIRE(f && fputs(fake_cuda_src, f) >= 0 && fclose(f) == 0);
  snprintf(cmd, sizeof cmd, "cc -shared -fPIC -O1 -o '%s' '%s' 2>&1", lib, src);
  if (system(cmd) != 0) FT_SKIP("no C compiler to build the stand-in driver");
  fflush(NULL);
  pid_t outer = fork(); /* the driver library stays loaded: keep it out of this process */
  if (outer == 0) {
    setenv("FI_CUDA_LIBRARY", lib, 1);
    fi_runtime *rt = make_rt(":memory:", NULL);
    if (!rt) _exit(10);
    int64_t shape[2] = {4, 64}, wshape[1] = {64};
    DLTensor x = {(void *)0x10000, {kDLCUDA, 0}, 2, {kDLBfloat, 16, 1}, shape, NULL, 0};
    DLTensor w = {(void *)0x20000, {kDLCUDA, 0}, 1, {kDLBfloat, 16, 1}, wshape, NULL, 0};
    /* The parent initializes the driver: device 3 does not exist, which is
     * found out after cuInit and before any compile. */
    DLTensor xb = x, wb = w;
    xb.device.device_id = wb.device.device_id = 3;
    fi_status ps = fi_rmsnorm(rt, &xb, &wb, 1e-6, &xb, NULL);
    if (ps == FI_OK || !strstr(fi_last_error(), "device 3")) {
      fprintf(stderr, "  parent: %s\n", fi_last_error());
      _exit(11);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      fi_status cs = fi_rmsnorm(rt, &x, &w, 1e-6, &x, NULL);
      const char *m = fi_last_error();
      fprintf(stderr, "  child: %s: %s\n", fi_status_string(cs), m);
      _exit(cs != FI_OK && strstr(m, "fork()") && strstr(m, "CUDA_ERROR_NOT_INITIALIZED") ? 0 : 1);
    }
    int status = -1;
    if (pid < 0 || wait_or_kill(pid, 10000, &status) != 0) _exit(12);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 13);
  }
  int status = -1;
  FT_REQUIRE(outer > 0 && wait_or_kill(outer, 20000, &status) == 0, "hung");
  FT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the child's CUDA error does not name the fork (status %d)", status);
  td_end(dir);
}
