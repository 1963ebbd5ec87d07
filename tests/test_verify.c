/* test_verify.c: tests of verify and repair (cache/cache_verify.c): bad rows
 * found and deleted, a file damaged at the page level rebuilt around the damage. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_ops.h"
#include "ft.h"
#include "test_cache_util.h"

static int64_t count_rows(const char *path) {
  return raw_int(path, "SELECT count(*) FROM kernels");
}

FT_TEST(verify_bad_rows) {
  char dir[64], path[128], err[256] = "", sql[200], b[40], hex[33];
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec t[5];
  for (int i = 0; i < 5; i++) {
    rec_make(&t[i], i, "gelu", "sm_90", "nvrtc-13.0", 5000);
    FT_CHECK(cache_store_put(s, &t[i].r, err, sizeof err) == CACHE_OK, "%s", err);
  }
  cache_verify_report rep;
  FT_CHECK(cache_store_verify(s, 0, &rep, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(rep.integrity_ok && rep.rows == 5 && rep.bad_rows == 0 && rep.repaired == 0,
           "clean: ok %d rows %lld bad %lld (%s)", rep.integrity_ok, (long long)rep.rows,
           (long long)rep.bad_rows, rep.detail);

  FT_REQUIRE(flip_byte(path, t[2].r.hash, 4000) == SQLITE_OK, "flip");
  FT_CHECK(cache_store_verify(s, 0, &rep, err, sizeof err) == CACHE_OK, "%s", err);
  cache_hash_hex(t[2].r.hash, hex);
  FT_CHECK(rep.integrity_ok && rep.rows == 5 && rep.bad_rows == 1 && rep.repaired == 0,
           "flipped: ok %d rows %lld bad %lld", rep.integrity_ok, (long long)rep.rows,
           (long long)rep.bad_rows);
  FT_CHECK(strstr(rep.detail, hex) && strstr(rep.detail, "checksum"), "detail: %s", rep.detail);
  FT_CHECK(count_rows(path) == 5, "verify without repair deleted a row");
  FT_CHECK(cache_store_verify(s, 1, &rep, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(rep.bad_rows == 1 && rep.repaired == 1 && count_rows(path) == 4,
           "repair: bad %lld repaired %lld rows %lld", (long long)rep.bad_rows,
           (long long)rep.repaired, (long long)count_rows(path));
  FT_CHECK(cache_store_verify(s, 0, &rep, err, sizeof err) == CACHE_OK && rep.integrity_ok &&
               rep.rows == 4 && rep.bad_rows == 0,
           "after repair: rows %lld bad %lld", (long long)rep.rows, (long long)rep.bad_rows);

  /* A length that disagrees with the binary. */
  snprintf(sql, sizeof sql, "UPDATE kernels SET bytes = bytes + 1 WHERE hash = %s",
           sql_blob(t[4].r.hash, b));
  FT_REQUIRE(raw_exec(path, sql) == SQLITE_OK, "raw update");
  FT_CHECK(cache_store_verify(s, 0, &rep, err, sizeof err) == CACHE_OK && rep.bad_rows == 1 &&
               strstr(rep.detail, "length"),
           "length: bad %lld detail %s", (long long)rep.bad_rows, rep.detail);
  cache_store_close(s);

  /* Read-only: checks, never repairs. */
  FT_REQUIRE(cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) == CACHE_OK, "%s",
             err);
  FT_CHECK(cache_store_verify(s, 0, &rep, err, sizeof err) == CACHE_OK && rep.bad_rows == 1,
           "read-only verify: %s", err);
  FT_CHECK(cache_store_verify(s, 1, &rep, err, sizeof err) == CACHE_ERR, "read-only repair");
  cache_store_close(s);
  FT_CHECK(count_rows(path) == 4, "read-only verify changed the file");
  for (int i = 0; i < 5; i++) rec_done(&t[i]);
  td_end(dir);
}

/* ---- page-level damage ---- */

static unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* SQLite's varint: 1 to 9 bytes, big-endian, 7 bits a byte (8 in the ninth). */
static uint64_t varint(const uint8_t *p, int *len) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) {
    v = (v << 7) | (p[i] & 0x7f);
    if (!(p[i] & 0x80)) {
      *len = i + 1;
      return v;
    }
  }
  *len = 9;
  return (v << 8) | p[8];
}

/* Picks a leaf page of the kernels table (a middle child of its root) and
 * lists the rowids on it; returns the page number, 0 on failure. */
static uint32_t pick_leaf(int fd, int page_size, uint32_t root, uint8_t *page, int64_t *ids,
                          int *nids, unsigned *cell_off) {
  if (pread(fd, page, (size_t)page_size, (off_t)(root - 1) * page_size) != page_size ||
      page[0] != 0x05)
    return 0; /* the root must be an interior table page */
  unsigned ncell = be16(page + 3);
  uint32_t leaf = be32(page + be16(page + 12 + 2 * (ncell / 2)));
  if (pread(fd, page, (size_t)page_size, (off_t)(leaf - 1) * page_size) != page_size ||
      page[0] != 0x0D)
    return 0;
  unsigned n = be16(page + 3);
  for (unsigned i = 0; i < n; i++) {
    int len = 0;
    const uint8_t *cell = page + be16(page + 8 + 2 * i);
    varint(cell, &len); /* payload size */
    ids[i] = (int64_t)varint(cell + len, &len);
  }
  *nids = (int)n;
  *cell_off = be16(page + 8 + 2 * (n / 2));
  return leaf;
}

enum { NROWS = 40 };

FT_TEST(verify_rebuilds_damaged_file) {
  char dir[64], path[128], side[160], err[256] = "", sql[200], b[40];
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec t[NROWS];
  int64_t rowid[NROWS];
  for (int i = 0; i < NROWS; i++) {
    rec_make(&t[i], i, "append", "sm_90", "nvrtc-13.0", 300);
    FT_CHECK(cache_store_put(s, &t[i].r, err, sizeof err) == CACHE_OK, "%s", err);
  }
  cache_store_close(s);
  for (int i = 0; i < NROWS; i++) {
    snprintf(sql, sizeof sql, "SELECT rowid FROM kernels WHERE hash = %s",
             sql_blob(t[i].r.hash, b));
    rowid[i] = raw_int(path, sql);
  }
  /* Everything in the main file, nothing left in a WAL. */
  FT_REQUIRE(raw_exec(path, "PRAGMA wal_checkpoint(TRUNCATE)") == SQLITE_OK, "checkpoint");
  int page_size = (int)raw_int(path, "PRAGMA page_size");
  uint32_t root =
      (uint32_t)raw_int(path, "SELECT rootpage FROM sqlite_schema WHERE name = 'kernels'");
  FT_REQUIRE(page_size >= 512 && root > 1, "page size %d root %u", page_size, root);

  int fd = open(path, O_RDWR);
  FT_REQUIRE(fd >= 0, "open %s", path);
  uint8_t *page = malloc((size_t)page_size);
  int64_t on_leaf[512];
  int nleaf = 0;
  unsigned cell_off = 0;
  uint32_t leaf = pick_leaf(fd, page_size, root, page, on_leaf, &nleaf, &cell_off);
  int wrote = 0;
  if (leaf) {
    /* Garbage over the header of a cell in the middle of the page: its
     * payload size and rowid become nonsense. */
    static const uint8_t junk[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    wrote = pwrite(fd, junk, sizeof junk, (off_t)(leaf - 1) * page_size + cell_off) ==
            (ssize_t)sizeof junk;
  }
  close(fd);
  free(page);
  FT_REQUIRE(leaf && wrote && nleaf > 0 && nleaf < NROWS / 2, "leaf %u with %d rows", leaf,
             nleaf);

  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  cache_verify_report rep;
  FT_CHECK(cache_store_verify(s, 0, &rep, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(!rep.integrity_ok && strstr(rep.detail, "integrity"), "damage unnoticed: %s",
           rep.detail);
  FT_CHECK(cache_store_verify(s, 1, &rep, err, sizeof err) == CACHE_OK, "repair: %s", err);
  FT_CHECK(rep.repaired >= 1 && strstr(rep.detail, "rebuilt"), "repaired %lld: %s",
           (long long)rep.repaired, rep.detail);
  FT_CHECK(cache_store_verify(s, 0, &rep, err, sizeof err) == CACHE_OK && rep.integrity_ok &&
               rep.bad_rows == 0,
           "after the rebuild: ok %d bad %lld %s", rep.integrity_ok, (long long)rep.bad_rows,
           rep.detail);
  /* Every row off the damaged page is there and whole. */
  int kept = 0, lost_elsewhere = 0;
  for (int i = 0; i < NROWS; i++) {
    int on = 0;
    for (int j = 0; j < nleaf; j++) on |= on_leaf[j] == rowid[i];
    int stored = rec_stored(s, &t[i]);
    kept += stored;
    if (!on && !stored) lost_elsewhere++;
  }
  FT_CHECK(lost_elsewhere == 0, "%d intact rows lost in the rebuild", lost_elsewhere);
  FT_CHECK(kept >= NROWS - nleaf && rep.rows == kept, "kept %d of %d (%d on the page), rows %lld",
           kept, NROWS, nleaf, (long long)rep.rows);
  /* The store works on the new file, which kept the old one's mode. */
  test_rec extra;
  rec_make(&extra, 99, "append", "sm_90", "nvrtc-13.0", 300);
  FT_CHECK(cache_store_put(s, &extra.r, err, sizeof err) == CACHE_OK && rec_stored(s, &extra),
           "put after the rebuild: %s", err);
  rec_done(&extra);
  cache_store_close(s);
  struct stat st;
  FT_CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "mode %o",
           (unsigned)(st.st_mode & 0777));
  snprintf(side, sizeof side, "%s.rebuild", path);
  FT_CHECK(file_size(side) < 0, "%s left behind", side);
  FT_CHECK(raw_int(path, "SELECT count(*) FROM kernels") == kept + 1, "reopened by another reader");
  for (int i = 0; i < NROWS; i++) rec_done(&t[i]);
  td_end(dir);
}
