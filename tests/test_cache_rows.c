/* test_cache_rows.c: a row bound to its key (checksum, hashes, entry name and the
 * binary's own arch checked on load, by verify and by import), the schema checked
 * table by table, repair in place while another process writes, and a full disk:
 * clear and gc still usable, a committed row whose checkpoint failed counted as stored. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache_ops.h"
#include "fi_admin.h"
#include "fi_runtime.h"
#include "ft.h"
#include "jit_key.h"
#include "test_cache_util.h"

static fi_runtime *rt_at(const char *path) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = path;
  fi_runtime *rt = NULL;
  return fi_runtime_create(&o, &rt) == FI_OK ? rt : NULL;
}

/* One real kernel of each op (one configuration each), compiled by NVRTC
 * for sm_90 into the cache at path. 0 when NVRTC is missing. */
static int prewarm_two(const char *path) {
  fi_runtime *rt = rt_at(path);
  fi_prewarm_result r;
  int ok = rt && fi_admin_prewarm(rt, "batch_indices_positions", 0, "sm_90", &r, NULL) == FI_OK &&
           fi_admin_prewarm(rt, "decode_upload", 0, "sm_90", &r, NULL) == FI_OK;
  fi_runtime_destroy(rt);
  return ok;
}

/* Rewrites the row of op `op` with SQL set, then recomputes its checksum with
 * the runtime's own formula: what someone who may write the file can do. */
static int tamper(const char *path, const char *op, const char *set) {
  char sql[512];
  snprintf(sql, sizeof sql, "UPDATE kernels SET %s WHERE op = '%s'", set, op);
  if (raw_exec(path, sql) != SQLITE_OK) return -1;
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL, *up = NULL;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(db, "SELECT rowid, hash, key_hash, arch, entry, binary FROM kernels",
                            -1, &st, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(db, "UPDATE kernels SET checksum = ?1 WHERE rowid = ?2", -1, &up, NULL);
  while (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    uint64_t sum = cache_row_checksum(sqlite3_column_blob(st, 1), sqlite3_column_blob(st, 2),
                                      (const char *)sqlite3_column_text(st, 3),
                                      (const char *)sqlite3_column_text(st, 4),
                                      sqlite3_column_blob(st, 5), (size_t)sqlite3_column_bytes(st, 5));
    sqlite3_bind_int64(up, 1, (sqlite3_int64)sum);
    sqlite3_bind_int64(up, 2, sqlite3_column_int64(st, 0));
    if (sqlite3_step(up) != SQLITE_DONE) rc = SQLITE_ERROR;
    sqlite3_reset(up);
  }
  sqlite3_finalize(st);
  sqlite3_finalize(up);
  sqlite3_close(db);
  return rc == SQLITE_OK ? 0 : -1;
}

/* Issue 47 item 3: a row carrying another kernel's binary and entry, with a
 * checksum recomputed, is refused by the lookup, verify and import. */
FT_TEST(row_bound_to_key) {
  char dir[64], a[128], b[128], c[128], sql[600];
  td_begin(dir);
  snprintf(a, sizeof a, "%s/a.db", dir);
  snprintf(b, sizeof b, "%s/b.db", dir);
  snprintf(c, sizeof c, "%s/c.db", dir);
  if (!prewarm_two(a)) {
    printf("SKIP row_bound_to_key: NVRTC cannot compile here (%s)\n", fi_last_error());
    td_end(dir);
    return;
  }
  FT_REQUIRE(raw_exec(a, "PRAGMA wal_checkpoint(TRUNCATE)") == SQLITE_OK, "checkpoint");
  snprintf(sql, sizeof sql, "cp %s %s", a, b);
  FT_REQUIRE(system(sql) == 0, "copy");
  /* decode_upload's row gets batch_indices_positions' binary and entry. */
  FT_REQUIRE(tamper(b, "decode_upload",
                    "binary = (SELECT binary FROM kernels WHERE op = 'batch_indices_positions'),"
                    " entry = (SELECT entry FROM kernels WHERE op = 'batch_indices_positions'),"
                    " bytes = (SELECT bytes FROM kernels WHERE op = 'batch_indices_positions')") == 0,
             "tamper");
  /* Relabelled: batch_indices_positions' sm_90 cubin claims to be for sm_80,
   * with hashes and entry recomputed for that arch. Only the cubin's own
   * header can tell. */
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  FT_REQUIRE(sqlite3_open_v2(b, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK, "open");
  FT_REQUIRE(sqlite3_prepare_v2(db, "SELECT key, templates, options, abi, compiler FROM kernels"
                                    " WHERE op = 'batch_indices_positions'", -1, &st, NULL) == SQLITE_OK &&
                 sqlite3_step(st) == SQLITE_ROW, "read");
  uint8_t kh[16], h[16];
  char entry[128], hb[40], khb[40];
  jit_row_hashes((const char *)sqlite3_column_text(st, 0), (const char *)sqlite3_column_text(st, 1),
                 "sm_80", (const char *)sqlite3_column_text(st, 2),
                 (const char *)sqlite3_column_text(st, 3), (const char *)sqlite3_column_text(st, 4),
                 kh, h);
  sqlite3_finalize(st);
  sqlite3_close(db);
  jit_entry_name_op("batch_indices_positions", kh, entry, sizeof entry);
  snprintf(sql, sizeof sql, "arch = 'sm_80', hash = %s, key_hash = %s, entry = '%s'",
           sql_blob(h, hb), sql_blob(kh, khb), entry);
  FT_REQUIRE(tamper(b, "batch_indices_positions", sql) == 0, "relabel");

  /* Import: both refused, each named with its reason. */
  fi_runtime *rt = rt_at(c);
  FT_REQUIRE(rt, "runtime");
  fi_import_report rep;
  FT_CHECK(fi_admin_import(rt, b, &rep) == FI_OK, "import: %s", fi_last_error());
  FT_CHECK(rep.copied == 0 && rep.refused == 2, "import: copied %lld refused %lld (%s)",
           (long long)rep.copied, (long long)rep.refused, rep.detail);
  FT_CHECK(strstr(rep.detail, "its entry fi_batch_indices_positions_") &&
               strstr(rep.detail, "sm_90, not sm_80"),
           "import's reasons: %s", rep.detail);
  fi_runtime_destroy(rt);

  /* Verify: both rows bad, with the reasons. */
  rt = rt_at(b);
  FT_REQUIRE(rt, "runtime");
  fi_verify_report vr;
  FT_CHECK(fi_admin_verify(rt, 0, &vr) == FI_OK, "verify: %s", fi_last_error());
  FT_CHECK(vr.bad_rows == 2 && strstr(vr.detail, "not sm_80"), "verify: bad %lld (%s)",
           (long long)vr.bad_rows, vr.detail);
  /* The lookup: the swapped row is not taken for decode_upload's kernel;
   * it is dropped and the kernel compiled again. */
  fi_prewarm_result how = FI_PREWARM_CACHED;
  FT_CHECK(fi_admin_prewarm(rt, "decode_upload", 0, "sm_90", &how, NULL) == FI_OK, "%s",
           fi_last_error());
  FT_CHECK(how == FI_PREWARM_COMPILED, "the tampered row was used (result %d)", (int)how);
  fi_stats ps = {.struct_size = sizeof ps};
  FT_CHECK(fi_runtime_stats(rt, &ps) == FI_OK && ps.repairs >= 1, "repairs %lld",
           (long long)ps.repairs);
  fi_runtime_destroy(rt);
  /* The untouched file imports whole. */
  snprintf(c, sizeof c, "%s/d.db", dir);
  rt = rt_at(c);
  FT_CHECK(rt && fi_admin_import(rt, a, &rep) == FI_OK && rep.copied == 2 && rep.refused == 0,
           "clean import: copied %lld refused %lld (%s)", (long long)rep.copied,
           (long long)rep.refused, rep.detail);
  fi_runtime_destroy(rt);
  td_end(dir);
}

/* A 64-byte ELF64 header with the given machine, ABI version and flags. */
static void elf_make(uint8_t h[64], unsigned machine, unsigned abiver, uint32_t flags) {
  memset(h, 0, 64);
  memcpy(h, "\177ELF", 4);
  h[4] = 2, h[5] = 1, h[6] = 1, h[8] = (uint8_t)abiver;
  h[18] = (uint8_t)machine, h[19] = (uint8_t)(machine >> 8);
  for (int i = 0; i < 4; i++) h[48 + i] = (uint8_t)(flags >> (8 * i));
}

/* The binary's own arch, read from its header (issue 47 item 3). */
FT_TEST(binary_arch_from_header) {
  uint8_t h[64];
  char why[200];
  elf_make(h, 190, 8, 0x6005a04); /* NVRTC 13's sm_90 cubin */
  FT_CHECK(jit_binary_arch_check(h, 64, "sm_90", why, sizeof why) == 0, "%s", why);
  FT_CHECK(jit_binary_arch_check(h, 64, "sm_90a", why, sizeof why) == 0, "%s", why);
  FT_CHECK(jit_binary_arch_check(h, 64, "sm_80", why, sizeof why) != 0 && strstr(why, "sm_90"),
           "sm_90 cubin taken for sm_80: %s", why);
  elf_make(h, 190, 7, 0x50005a); /* older ELF ABI: the SM in the low byte */
  FT_CHECK(jit_binary_arch_check(h, 64, "sm_90", why, sizeof why) == 0, "%s", why);
  FT_CHECK(jit_binary_arch_check(h, 64, "sm_120", why, sizeof why) != 0, "abi 7 sm_90 as sm_120");
  FT_CHECK(jit_binary_arch_check(h, 64, "gfx90a", why, sizeof why) != 0, "a cubin taken for gfx90a");
  elf_make(h, 190, 9, 0x12345678); /* an ELF ABI not known here: the machine alone */
  FT_CHECK(jit_binary_arch_check(h, 64, "sm_90", why, sizeof why) == 0, "%s", why);
  elf_make(h, 224, 2, 0x53f); /* hiprtc's gfx90a code object */
  FT_CHECK(jit_binary_arch_check(h, 64, "gfx90a", why, sizeof why) == 0, "%s", why);
  FT_CHECK(jit_binary_arch_check(h, 64, "gfx90a:xnack-", why, sizeof why) == 0, "%s", why);
  FT_CHECK(jit_binary_arch_check(h, 64, "gfx942", why, sizeof why) != 0, "gfx90a taken for gfx942");
  FT_CHECK(jit_binary_arch_check(h, 64, "sm_90", why, sizeof why) != 0, "AMD code taken for sm_90");
  FT_CHECK(jit_binary_arch_check(h, 63, "gfx90a", why, sizeof why) != 0, "a short header");
  FT_CHECK(jit_binary_arch_check("not an elf at all, not at all, no, no, no, no, no, no", 56,
                                 "sm_90", why, sizeof why) != 0, "text taken for a cubin");
  /* An offload bundle holding a gfx942 code object. */
  uint8_t b[256];
  memset(b, 0, sizeof b);
  const char *id = "hipv4-amdgcn-amd-amdhsa--gfx942";
  size_t idl = strlen(id), pos = 24;
  memcpy(b, "__CLANG_OFFLOAD_BUNDLE__", 24);
  b[pos] = 1;
  pos += 8;
  uint64_t off = 128, size = 64;
  memcpy(b + pos, &off, 8), memcpy(b + pos + 8, &size, 8), memcpy(b + pos + 16, &idl, 8);
  memcpy(b + pos + 24, id, idl);
  elf_make(b + 128, 224, 2, 0x54c);
  FT_CHECK(jit_binary_arch_check(b, 192, "gfx942", why, sizeof why) == 0, "%s", why);
  FT_CHECK(jit_binary_arch_check(b, 192, "gfx90a", why, sizeof why) != 0, "bundle for gfx90a");
}

/* Issue 47 item 19: import keeps FI_CACHE_MAX_BYTES. */
FT_TEST(import_keeps_the_cap) {
  char dir[64], src[128], dst[128], err[256];
  td_begin(dir);
  snprintf(src, sizeof src, "%s/src.db", dir);
  snprintf(dst, sizeof dst, "%s/dst.db", dir);
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(src, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec big, small;
  rec_make(&big, 1, "gelu", "sm_90", "nvrtc-13.0", 3 << 20);
  rec_make(&small, 2, "gelu", "sm_90", "nvrtc-13.0", 4000);
  FT_REQUIRE(cache_store_put(s, &big.r, err, sizeof err) == CACHE_OK, "%s", err);
  FT_REQUIRE(cache_store_put(s, &small.r, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  cache_store *d = NULL;
  FT_REQUIRE(cache_store_open(dst, 0, &d, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_open(src, CACHE_OPEN_READONLY, &s, err, sizeof err);
  cache_copy_report rep;
  FT_CHECK(cache_store_copy_checked(s, d, NULL, NULL, 1 << 20, &rep, err, sizeof err) == CACHE_OK,
           "%s", err);
  FT_CHECK(rep.copied == 1 && rep.refused == 1 && strstr(rep.detail, "cap"),
           "copied %lld refused %lld (%s)", (long long)rep.copied, (long long)rep.refused,
           rep.detail);
  FT_CHECK(!rec_stored(d, &big) && rec_stored(d, &small), "which rows");
  cache_store_close(s);
  cache_store_close(d);
  /* Through the runtime, with the variable: real rows of 5680 and 8840 bytes
   * under a 6K cap (the file itself cannot get that small, so eviction then
   * empties it: the point is which rows went in). */
  char real[128];
  snprintf(real, sizeof real, "%s/real.db", dir);
  if (prewarm_two(real)) {
    setenv("FI_CACHE_MAX_BYTES", "6K", 1);
    snprintf(dst, sizeof dst, "%s/dst2.db", dir);
    fi_runtime *rt = rt_at(dst);
    fi_import_report ir;
    FT_CHECK(rt && fi_admin_import(rt, real, &ir) == FI_OK, "%s", fi_last_error());
    FT_CHECK(ir.copied == 1 && ir.refused == 1 && strstr(ir.detail, "cap"),
             "import under 6K: copied %lld refused %lld (%s)", (long long)ir.copied,
             (long long)ir.refused, ir.detail);
    fi_runtime_destroy(rt);
    unsetenv("FI_CACHE_MAX_BYTES");
  } else {
    printf("SKIP import_keeps_the_cap (runtime part): NVRTC cannot compile here\n");
  }
  free(big.bin);
  free(small.bin);
  td_end(dir);
}

/* Issue 47 item 13: the schema is checked table by table, not by its version
 * alone; a damaged one is moved aside and the cache starts again. */
FT_TEST(schema_shape_checked) {
  char dir[64], path[128], err[512];
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  FT_REQUIRE(raw_exec(path, "DROP TABLE claims") == SQLITE_OK, "drop");
  FT_CHECK(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_ERR_CORRUPT,
           "a file without its claims table opened");
  FT_CHECK(strstr(err, "claims"), "message: %s", err);
  cache_store_close(s);
  s = NULL;
  FT_REQUIRE(raw_exec(path, "CREATE TABLE claims(key_hash BLOB PRIMARY KEY, pid INTEGER NOT NULL,"
                            " start INTEGER NOT NULL, host TEXT NOT NULL, started INTEGER NOT NULL)"
                            " WITHOUT ROWID; ALTER TABLE kernels DROP COLUMN hits") == SQLITE_OK,
             "drop column");
  FT_CHECK(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_ERR_CORRUPT,
           "a file without kernels.hits opened");
  FT_CHECK(strstr(err, "kernels"), "message: %s", err);
  cache_store_close(s);
  /* An object added by hand (a trigger would act on every store). */
  char p2[128];
  snprintf(p2, sizeof p2, "%s/t.db", dir);
  FT_REQUIRE(cache_store_open(p2, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  s = NULL;
  FT_REQUIRE(raw_exec(p2, "CREATE TRIGGER t AFTER INSERT ON kernels BEGIN DELETE FROM kernels; END")
                 == SQLITE_OK, "trigger");
  FT_CHECK(cache_store_open(p2, 0, &s, err, sizeof err) == CACHE_ERR_CORRUPT && strstr(err, "'t'"),
           "a file with a trigger opened: %s", err);
  cache_store_close(s);
  /* The runtime moves it aside and stores into a new file. */
  fi_runtime *rt = rt_at(path);
  fi_admin_stats st;
  FT_REQUIRE(rt && fi_admin_stats_get(rt, &st) == FI_OK, "%s", fi_last_error());
  fi_stats ps = {.struct_size = sizeof ps};
  FT_CHECK(!st.fallback && fi_runtime_stats(rt, &ps) == FI_OK && ps.repairs == 1,
           "fallback %d repairs %lld", st.fallback, (long long)ps.repairs);
  fi_runtime_destroy(rt);
  FT_CHECK(raw_int(path, "SELECT count(*) FROM pragma_table_info('kernels') WHERE name = 'hits'") == 1,
           "the new file lacks the column");
  td_end(dir);
}

/* Overwrites page `page` (1-based) of the file with a pattern. */
static int smash_page(const char *path, int64_t page) {
  int fd = open(path, O_WRONLY);
  if (fd < 0) return -1;
  char junk[4096];
  memset(junk, 0xa5, sizeof junk);
  ssize_t w = pwrite(fd, junk, sizeof junk, (off_t)((page - 1) * 4096));
  close(fd);
  return w == (ssize_t)sizeof junk ? 0 : -1;
}

/* Issue 47 items 8 and 22: repair rebuilds a damaged file while another
 * process writes to it; every row that process reported stored is there after.
 * flags: the journal mode of both (0: WAL, or CACHE_OPEN_ROLLBACK). */
static void repair_with_writer(int flags) {
  char dir[64], path[128], flag[128], err[512];
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  snprintf(flag, sizeof flag, "%s/repaired", dir);
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(path, flags, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec t[40];
  for (int i = 0; i < 40; i++) {
    rec_make(&t[i], i, "gelu", "sm_90", "nvrtc-13.0", 3000);
    FT_REQUIRE(cache_store_put(s, &t[i].r, err, sizeof err) == CACHE_OK, "%s", err);
  }
  cache_store_close(s);
  if (!flags) FT_REQUIRE(raw_exec(path, "PRAGMA wal_checkpoint(TRUNCATE)") == SQLITE_OK, "checkpoint");
  /* A leaf of the table in the middle of the file: some rows are lost to it. */
  int64_t root = raw_int(path, "SELECT rootpage FROM sqlite_schema WHERE name = 'kernels'");
  int64_t pages = raw_int(path, "PRAGMA page_count");
  int64_t victim = pages / 2 == root ? pages / 2 + 1 : pages / 2;
  FT_REQUIRE(smash_page(path, victim) == 0, "smash");
  int fds[2];
  FT_REQUIRE(pipe(fds) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) { /* the writer: stores rows until 20 went in after the repair */
    close(fds[0]);
    cache_store *w = NULL;
    char e[512];
    if (cache_store_open(path, flags, &w, e, sizeof e) != CACHE_OK) _exit(3);
    int after = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int n = 1000; after < 20; n++) {
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (now.tv_sec - t0.tv_sec > 20) break;
      int repaired = access(flag, F_OK) == 0;
      test_rec r;
      rec_make(&r, n, "silu", "sm_90", "nvrtc-13.0", 2000);
      if (cache_store_put(w, &r.r, e, sizeof e) == CACHE_OK) {
        if (write(fds[1], &n, sizeof n) != (ssize_t)sizeof n) _exit(4);
        after += repaired;
      }
      free(r.bin);
      usleep(2000);
    }
    cache_store_close(w);
    _exit(after >= 20 ? 0 : 5);
  }
  close(fds[1]);
  usleep(100 * 1000);
  FT_REQUIRE(cache_store_open(path, flags, &s, err, sizeof err) == CACHE_OK, "%s", err);
  cache_verify_report rep;
  FT_CHECK(cache_store_verify(s, 1, &rep, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(rep.repaired >= 1 && strstr(rep.detail, "rebuilt"), "repair: %s", rep.detail);
  int fd = open(flag, O_CREAT | O_WRONLY, 0600);
  close(fd);
  int status = 0;
  waitpid(pid, &status, 0);
  FT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer exit %d", WEXITSTATUS(status));
  int n, stored = 0, missing = 0;
  while (read(fds[0], &n, sizeof n) == (ssize_t)sizeof n) {
    test_rec r;
    rec_make(&r, n, "silu", "sm_90", "nvrtc-13.0", 2000);
    stored++;
    if (!rec_stored(s, &r)) missing++;
    free(r.bin);
  }
  close(fds[0]);
  FT_CHECK(stored >= 20 && missing == 0, "%d of %d rows the writer stored are gone", missing,
           stored);
  FT_CHECK(cache_store_verify(s, 0, &rep, err, sizeof err) == CACHE_OK && rep.integrity_ok &&
               rep.bad_rows == 0,
           "after: %s", rep.detail);
  cache_store_close(s);
  for (int i = 0; i < 40; i++) free(t[i].bin);
  td_end(dir);
}

FT_TEST(repair_in_place_keeps_concurrent_writes) { repair_with_writer(0); }
FT_TEST(repair_in_place_keeps_concurrent_writes_rollback) { repair_with_writer(CACHE_OPEN_ROLLBACK); }

/* A small tmpfs at dir/mnt, 0700; 0 when mounting is not allowed here. */
static int mount_small(const char *dir, char mnt[128], const char *size) {
  snprintf(mnt, 128, "%s/mnt", dir);
  if (mkdir(mnt, 0700) != 0) return 0;
  char opts[64];
  snprintf(opts, sizeof opts, "size=%s,mode=0700", size);
  return mount("tmpfs", mnt, "tmpfs", 0, opts) == 0;
}

/* Fills what is left of the filesystem of dir with a file: a full disk. */
static void fill_disk(const char *dir) {
  char p[160];
  snprintf(p, sizeof p, "%s/filler", dir);
  int fd = open(p, O_CREAT | O_WRONLY | O_APPEND, 0600);
  char buf[4096];
  memset(buf, 1, sizeof buf);
  while (fd >= 0 && write(fd, buf, sizeof buf) > 0) {
  }
  while (fd >= 0 && write(fd, buf, 512) > 0) {
  }
  if (fd >= 0) close(fd);
}

/* Issue 47 item 11: on a full disk, a row whose commit went through but whose
 * checkpoint could not grow the main file is stored, and said to be. */
FT_TEST(full_disk_committed_row_counts) {
  char dir[64], mnt[128], path[160], err[512];
  td_begin(dir);
  if (!mount_small(dir, mnt, "4m")) {
    printf("SKIP full_disk_committed_row_counts: cannot mount a tmpfs here (%s)\n", strerror(errno));
    td_end(dir);
    return;
  }
  snprintf(path, sizeof path, "%s/k.db", mnt);
  cache_store *s = NULL;
  /* No FT_REQUIRE past the mount: a failure must still unmount it. */
  int opened = cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK;
  FT_CHECK(opened, "%s", err);
  if (!opened) goto out;
  /* A large row first: the WAL keeps its size, so a smaller commit later
   * needs no new space, while its checkpoint must grow the main file. */
  test_rec big, r;
  rec_make(&big, 1, "gelu", "sm_90", "nvrtc-13.0", 600 << 10);
  FT_CHECK(cache_store_put(s, &big.r, err, sizeof err) == CACHE_OK, "%s", err);
  fill_disk(mnt);
  rec_make(&r, 2, "gelu", "sm_90", "nvrtc-13.0", 100 << 10);
  FT_CHECK(cache_store_put(s, &r.r, err, sizeof err) == CACHE_OK,
           "the committed row counted as a failed store: %s", err);
  FT_CHECK(rec_stored(s, &r), "the row is not there");
  cache_store_close(s);
  free(big.bin);
  free(r.bin);
out:
  umount2(mnt, MNT_DETACH);
  td_end(dir);
}

/* Issue 47 item 10: on a full disk, clear still empties the cache and gc says
 * what to do. */
FT_TEST(full_disk_clear_and_gc) {
  char dir[64], mnt[128], path[160], err[512];
  td_begin(dir);
  if (!mount_small(dir, mnt, "4m")) {
    printf("SKIP full_disk_clear_and_gc: cannot mount a tmpfs here (%s)\n", strerror(errno));
    td_end(dir);
    return;
  }
  snprintf(path, sizeof path, "%s/k.db", mnt);
  cache_store *s = NULL;
  int n = 0;
  fi_runtime *rt = NULL;
  int opened = cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK;
  FT_CHECK(opened, "%s", err);
  if (!opened) goto out;
  for (; n < 200; n++) { /* rows until the disk takes no more */
    test_rec r;
    rec_make(&r, n, "gelu", "sm_90", "nvrtc-13.0", 64 << 10);
    int rc = cache_store_put(s, &r.r, err, sizeof err);
    free(r.bin);
    if (rc != CACHE_OK) break;
  }
  cache_store_close(s);
  fill_disk(mnt);
  FT_CHECK(n > 10, "only %d rows fit", n);
  rt = rt_at(path);
  FT_CHECK(rt, "runtime");
  if (!rt) goto out;
  int64_t evicted = 0, removed = 0;
  fi_status st = fi_admin_gc(rt, 1 << 20, 0, &evicted, NULL);
  if (st != FI_OK)
    FT_CHECK(strstr(fi_last_error(), "clear"), "gc failed without saying what to do: %s",
             fi_last_error());
  FT_CHECK(fi_admin_clear(rt, NULL, NULL, &removed) == FI_OK, "clear on a full disk: %s",
           fi_last_error());
  fi_admin_stats as;
  FT_CHECK(fi_admin_stats_get(rt, &as) == FI_OK && as.entries == 0, "entries %lld after clear",
           (long long)as.entries);
  fi_runtime_destroy(rt);
  FT_CHECK(file_size(path) < (256 << 10), "the file still has %lld bytes", (long long)file_size(path));
out:
  umount2(mnt, MNT_DETACH);
  td_end(dir);
}
