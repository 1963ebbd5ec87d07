/* test_copy.c: tests of copying between cache files and sealing one to ship
 * (cache/cache_copy.c), and of the file helpers (cache/cache_fs.c). */
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache_ops.h"
#include "ft.h"
#include "test_cache_util.h"

enum { NOPS = 2, NARCH = 2, NPER = 4, NSRC = NOPS * NARCH * NPER };
static const char *const ops[NOPS] = {"decode", "prefill"};
static const char *const archs[NARCH] = {"sm_90", "sm_80"};

static void make_src(test_rec t[NSRC]) {
  for (int o = 0; o < NOPS; o++)
    for (int a = 0; a < NARCH; a++)
      for (int n = 0; n < NPER; n++) {
        test_rec *r = &t[(o * NARCH + a) * NPER + n];
        rec_make(r, 10 * o + n, ops[o], archs[a], "nvrtc-13.0", 3000 + 100 * (size_t)n);
        snprintf(r->templates, sizeof r->templates, "tmpl-%d", n);
      }
}
#define SRC(o, a, n) (&src[((o) * NARCH + (a)) * NPER + (n)])

static int64_t entries(cache_store *s) {
  char err[256];
  int64_t n = -1;
  return cache_store_totals(s, &n, NULL, NULL, err, sizeof err) == CACHE_OK ? n : -1;
}

FT_TEST(copy_filters_and_skips) {
  char dir[64], spath[128], dpath[128], err[256] = "";
  td_begin(dir);
  snprintf(spath, sizeof spath, "%s/src.db", dir);
  snprintf(dpath, sizeof dpath, "%s/dst.db", dir);
  cache_store *s = NULL, *d = NULL;
  FT_REQUIRE(cache_store_open(spath, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  FT_REQUIRE(cache_store_open(dpath, 0, &d, err, sizeof err) == CACHE_OK, "%s", err);
  static test_rec src[NSRC];
  make_src(src);
  for (int i = 0; i < NSRC; i++)
    FT_CHECK(cache_store_put(s, &src[i].r, err, sizeof err) == CACHE_OK, "%s", err);
  const uint8_t(*hs)[16] = (const uint8_t(*)[16])SRC(0, 0, 2)->r.hash;
  FT_CHECK(cache_store_touch(s, hs, 1, err, sizeof err) == CACHE_OK, "%s", err);
  /* The destination has one of the rows already; the source has one damaged. */
  FT_CHECK(cache_store_put(d, &SRC(0, 0, 0)->r, err, sizeof err) == CACHE_OK, "%s", err);
  FT_REQUIRE(flip_byte(spath, SRC(0, 0, 1)->r.hash, 10) == SQLITE_OK, "flip");

  int64_t copied = -1, skipped = -1;
  FT_CHECK(cache_store_copy(s, d, "decode", "sm_90", &copied, &skipped, err, sizeof err) ==
               CACHE_OK,
           "%s", err);
  FT_CHECK(copied == 2 && skipped == 2, "decode/sm_90: copied %lld skipped %lld",
           (long long)copied, (long long)skipped);
  FT_CHECK(entries(d) == 3 && rec_stored(d, SRC(0, 0, 2)) && rec_stored(d, SRC(0, 0, 3)) &&
               rec_stored(d, SRC(0, 0, 0)) && !rec_stored(d, SRC(0, 0, 1)),
           "destination holds %lld rows", (long long)entries(d));
  /* Verbatim: the use history and the template set come along. */
  cache_record got;
  FT_CHECK(cache_store_get(d, SRC(0, 0, 2)->r.hash, &got, err, sizeof err) == CACHE_OK &&
               got.hits == 1 && streq(got.templates, "tmpl-2") && streq(got.abi, "1.1"),
           "copied row: hits %lld templates %s", (long long)got.hits,
           got.templates ? got.templates : "(null)");
  cache_record_free(&got);
  FT_CHECK(cache_store_copy(s, d, "decode", "sm_90", &copied, &skipped, err, sizeof err) ==
                   CACHE_OK &&
               copied == 0 && skipped == 4,
           "again: copied %lld skipped %lld", (long long)copied, (long long)skipped);
  FT_CHECK(cache_store_copy(s, d, NULL, "sm_80", &copied, &skipped, err, sizeof err) ==
                   CACHE_OK &&
               copied == 2 * NPER && skipped == 0 && entries(d) == 3 + 2 * NPER,
           "by arch: copied %lld skipped %lld", (long long)copied, (long long)skipped);
  FT_CHECK(cache_store_copy(s, d, NULL, NULL, &copied, &skipped, err, sizeof err) == CACHE_OK &&
               copied == NSRC - 3 - 2 * NPER - 1 && skipped == 3 + 2 * NPER + 1,
           "all: copied %lld skipped %lld", (long long)copied, (long long)skipped);
  FT_CHECK(cache_store_copy(s, s, NULL, NULL, &copied, &skipped, err, sizeof err) == CACHE_ERR,
           "copy onto itself");
  cache_store_close(s);
  cache_store_close(d);

  /* From a read-only source, into a read-only destination. */
  FT_REQUIRE(cache_store_open(spath, CACHE_OPEN_READONLY, &s, err, sizeof err) == CACHE_OK, "%s",
             err);
  snprintf(dpath, sizeof dpath, "%s/dst2.db", dir);
  FT_REQUIRE(cache_store_open(dpath, 0, &d, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(cache_store_copy(s, d, "prefill", NULL, &copied, &skipped, err, sizeof err) ==
                   CACHE_OK &&
               copied == NARCH * NPER,
           "from read-only: copied %lld (%s)", (long long)copied, err);
  FT_CHECK(cache_store_copy(d, s, NULL, NULL, &copied, &skipped, err, sizeof err) == CACHE_ERR,
           "into a read-only store");
  cache_store_close(s);
  cache_store_close(d);
  for (int i = 0; i < NSRC; i++) rec_done(&src[i]);
  td_end(dir);
}

/* The child of copy_seal_ships_readonly: as a user who cannot write there. */
static int sealed_child(const char *path, const test_rec *want) {
  if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
    return 3;
  char err[256] = "", side[200];
  cache_store *s = NULL;
  if (cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) != CACHE_OK) {
    fprintf(stderr, "  child: open: %s\n", err);
    return 4;
  }
  int ok = entries(s) == NSRC && rec_stored(s, want);
  cache_store_close(s);
  if (!ok) return 5;
  for (int i = 0; i < 2; i++) {
    snprintf(side, sizeof side, "%s%s", path, i ? "-shm" : "-wal");
    if (file_size(side) >= 0) return 6;
  }
  return 0;
}

FT_TEST(copy_seal_ships_readonly) {
  char dir[64], spath[128], sub[96], path[128], side[160], err[256] = "";
  td_begin(dir);
  snprintf(spath, sizeof spath, "%s/src.db", dir);
  snprintf(sub, sizeof sub, "%s/ship", dir);
  snprintf(path, sizeof path, "%s/kernels.db", sub);
  cache_store *s = NULL, *out = NULL, *other = NULL;
  FT_REQUIRE(cache_store_open(spath, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  static test_rec src[NSRC];
  make_src(src);
  for (int i = 0; i < NSRC; i++)
    FT_CHECK(cache_store_put(s, &src[i].r, err, sizeof err) == CACHE_OK, "%s", err);
  /* Written in WAL mode, as an ordinary store. */
  FT_REQUIRE(cache_store_open(path, 0, &out, err, sizeof err) == CACHE_OK, "%s", err);
  int64_t copied = 0, skipped = 0;
  FT_CHECK(cache_store_copy(s, out, NULL, NULL, &copied, &skipped, err, sizeof err) == CACHE_OK &&
               copied == NSRC,
           "copied %lld: %s", (long long)copied, err);
  cache_store_close(s);
  /* Not while another connection has the file. */
  FT_REQUIRE(cache_store_open(path, 0, &other, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(cache_store_seal(out, err, sizeof err) == CACHE_ERR, "sealed while shared");
  cache_store_close(other);
  FT_CHECK(cache_store_seal(out, err, sizeof err) == CACHE_OK, "seal: %s", err);
  FT_CHECK(rec_stored(out, &src[5]), "the store works after sealing");
  cache_store_close(out);
  for (int i = 0; i < 2; i++) {
    snprintf(side, sizeof side, "%s%s", path, i ? "-shm" : "-wal");
    FT_CHECK(file_size(side) < 0, "%s exists after sealing", side);
  }
  /* Bytes 18 and 19 of the header: 1 for a rollback journal, 2 for WAL. */
  unsigned char hdr[20] = {0};
  int fd = open(path, O_RDONLY);
  FT_CHECK(fd >= 0 && read(fd, hdr, sizeof hdr) == (ssize_t)sizeof hdr && hdr[18] == 1 &&
               hdr[19] == 1,
           "header versions %d %d", hdr[18], hdr[19]);
  if (fd >= 0) close(fd);
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int is_delete = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
                  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL) == SQLITE_OK &&
                  sqlite3_step(st) == SQLITE_ROW &&
                  streq((const char *)sqlite3_column_text(st, 0), "delete");
  sqlite3_finalize(st);
  sqlite3_close(db);
  FT_CHECK(is_delete, "journal_mode is not delete");

  FT_CHECK(chmod(path, 0444) == 0 && chmod(sub, 0555) == 0 && chmod(dir, 0755) == 0, "chmod");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) _exit(sealed_child(path, &src[7]));
  int status = -1;
  FT_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status), "child %d", status);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
    fprintf(stderr, "  note: cannot drop root here; read-only directory not exercised\n");
  else
    FT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "read-only child status %d",
             WEXITSTATUS(status));
  chmod(sub, 0700);
  for (int i = 0; i < NSRC; i++) rec_done(&src[i]);
  td_end(dir);
}

FT_TEST(fs_move_aside) {
  char dir[64], path[128], side[160], moved[256], moved2[256], err[256] = "";
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec t;
  rec_make(&t, 1, "topk", "sm_90", "nvrtc-13.0", 1000);
  FT_CHECK(cache_store_put(s, &t.r, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  snprintf(side, sizeof side, "%s-journal", path);
  FILE *f = fopen(side, "w");
  if (f) fclose(f);
  const char *sfx[3] = {"-wal", "-shm", "-journal"};
  for (int i = 0; i < 3; i++) {
    snprintf(side, sizeof side, "%s%s", path, sfx[i]);
    FT_CHECK(file_size(side) >= 0, "setup: %s missing", side);
  }
  int64_t size = file_size(path);
  FT_CHECK(cache_move_aside(path, moved, sizeof moved, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(strncmp(moved, path, strlen(path)) == 0 && strstr(moved, ".corrupt-"), "moved to %s",
           moved);
  FT_CHECK(file_size(moved) == size && file_size(path) < 0, "moved %lld, original %lld",
           (long long)file_size(moved), (long long)file_size(path));
  for (int i = 0; i < 3; i++) {
    snprintf(side, sizeof side, "%s%s", path, sfx[i]);
    FT_CHECK(file_size(side) < 0, "%s left behind", side);
  }
  /* Again within the second: both copies kept. */
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  FT_CHECK(cache_move_aside(path, moved2, sizeof moved2, err, sizeof err) == CACHE_OK &&
               strcmp(moved, moved2) != 0 && file_size(moved) == size && file_size(moved2) > 0,
           "second move: %s %s", moved2, err);
  FT_CHECK(cache_move_aside(path, moved, sizeof moved, err, sizeof err) == CACHE_ERR,
           "moving a missing file");
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  FT_CHECK(cache_move_aside(path, moved, 8, err, sizeof err) == CACHE_ERR && file_size(path) > 0,
           "a name that does not fit must not move the file");
  rec_done(&t);
  td_end(dir);
}

FT_TEST(fs_is_network) {
  FT_CHECK(cache_fs_is_network("/tmp") == 0, "/tmp");
  FT_CHECK(cache_fs_is_network("/tmp/fi-no-such-dir/a/b/kernels.db") == 0, "missing path");
  FT_CHECK(cache_fs_is_network("kernels-not-here.db") == 0, "relative path");
  FT_CHECK(cache_fs_is_network(":memory:") == 0, ":memory:");
  /* Where this machine has a network or FUSE mount, it must be seen as one,
   * through a file that does not exist yet. */
  FILE *m = fopen("/proc/mounts", "r");
  char dev[256], dirp[256], type[64], path[400];
  int checked = 0;
  while (m && fscanf(m, "%255s %255s %63s %*[^\n]", dev, dirp, type) == 3) {
    if (strcmp(type, "nfs") && strcmp(type, "nfs4") && strcmp(type, "cifs") &&
        strcmp(type, "smb3") && strcmp(type, "9p") && strcmp(type, "lustre") &&
        strcmp(type, "ceph") && strncmp(type, "fuse", 4))
      continue;
    snprintf(path, sizeof path, "%s/fi-no-such-file.db", dirp);
    struct stat st;
    if (stat(dirp, &st) != 0) continue;
    FT_CHECK(cache_fs_is_network(path) == 1, "%s (%s) not seen as network", dirp, type);
    checked++;
  }
  if (m) fclose(m);
  if (!checked) fprintf(stderr, "  note: no network or FUSE mount here to check against\n");
}

FT_TEST(fs_permissions) {
  char dir[64], sub[96], path[128], other[160], link[160], side[160], err[256] = "";
  td_begin(dir);
  snprintf(sub, sizeof sub, "%s/c", dir);
  snprintf(path, sizeof path, "%s/k.db", sub);
  FT_REQUIRE(mkdir(sub, 0700) == 0, "mkdir");
  /* Nothing there yet: passes. */
  FT_CHECK(cache_check_permissions(path, 0, err, sizeof err) == 0, "%s", err);
  snprintf(other, sizeof other, "%s/none/k.db", sub);
  FT_CHECK(cache_check_permissions(other, 0, err, sizeof err) == 0, "%s", err);
  FILE *f = fopen(path, "w");
  FT_REQUIRE(f != NULL, "create");
  fclose(f);
  struct {
    mode_t file, dir;
    int allow, want;
  } cases[] = {
      {0600, 0700, 0, 0},  {0644, 0755, 0, 0},  {0666, 0700, 0, -1}, {0666, 0700, 1, -1},
      {0620, 0700, 0, -1}, {0620, 0700, 1, 0},  {0600, 0777, 0, -1}, {0600, 0777, 1, -1},
      {0600, 01777, 0, -1}, {0600, 0770, 0, -1}, {0600, 0770, 1, 0},  {0602, 0700, 1, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    FT_CHECK(chmod(path, cases[i].file) == 0 && chmod(sub, cases[i].dir) == 0, "chmod");
    err[0] = '\0';
    int rc = cache_check_permissions(path, cases[i].allow, err, sizeof err);
    FT_CHECK(rc == cases[i].want, "file %o dir %o allow %d: %d (%s)", (unsigned)cases[i].file,
             (unsigned)cases[i].dir, cases[i].allow, rc, err);
    if (rc != 0) FT_CHECK(strstr(err, "writable") != NULL, "message: %s", err);
  }
  FT_CHECK(chmod(path, 0600) == 0 && chmod(sub, 0700) == 0, "chmod");
  /* A writable -wal beside a good file is as bad as the file. */
  snprintf(side, sizeof side, "%s-wal", path);
  f = fopen(side, "w");
  if (f) fclose(f);
  FT_CHECK(chmod(side, 0666) == 0 && cache_check_permissions(path, 1, err, sizeof err) == -1,
           "writable -wal accepted");
  unlink(side);
  /* A link is judged by its target. */
  snprintf(link, sizeof link, "%s/link.db", sub);
  FT_REQUIRE(symlink(path, link) == 0, "symlink");
  FT_CHECK(cache_check_permissions(link, 0, err, sizeof err) == 0, "link to a good file: %s",
           err);
  FT_CHECK(chmod(path, 0666) == 0 && cache_check_permissions(link, 1, err, sizeof err) == -1,
           "link to a 0666 file accepted");
  FT_CHECK(chmod(path, 0600) == 0, "chmod");
  snprintf(other, sizeof other, "%s/open", dir);
  FT_REQUIRE(mkdir(other, 0700) == 0 && chmod(other, 0777) == 0, "mkdir");
  snprintf(side, sizeof side, "%s/open/t.db", dir);
  f = fopen(side, "w");
  if (f) fclose(f);
  FT_CHECK(chmod(side, 0600) == 0, "chmod");
  unlink(link);
  FT_REQUIRE(symlink(side, link) == 0, "symlink");
  FT_CHECK(cache_check_permissions(link, 1, err, sizeof err) == -1,
           "link into a world-writable directory accepted");
  /* Someone else's file (needs root to make one). */
  if (geteuid() == 0) {
    FT_CHECK(chown(path, 65534, 65534) == 0, "chown");
    FT_CHECK(cache_check_permissions(path, 1, err, sizeof err) == -1 && strstr(err, "owned"),
             "another user's file: %s", err);
  } else {
    fprintf(stderr, "  note: not root; another user's file not exercised\n");
  }
  td_end(dir);
}
