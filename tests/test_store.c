/* test_store.c: tests of the SQLite kernel store (cache/cache_store.c): round
 * trips, integrity checks, refusal of foreign files, modes, threads and processes. */
#include <ftw.h>
#include <grp.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache_store.h"
#include "ft.h"

/* ---- helpers ---- */

/* FT_REQUIRE evaluates its condition twice; conditions here have side
 * effects (open, fork, pthread_create), so this one evaluates it once. */
#define REQUIRE(cond, ...)                              \
  do {                                                  \
    int req_ok_ = 0;                                    \
    FT_CHECK((req_ok_ = !!(cond)), __VA_ARGS__);        \
    if (!req_ok_) return;                               \
  } while (0)

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

/* A fresh directory under /tmp; td_end removes it with everything in it. */
static void td_begin(char dir[64]) {
  strcpy(dir, "/tmp/fi_store_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(2);
  }
}
static void td_end(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Fills a record whose every field derives from (n, compiler); the strings
 * live in buf, the binary (bytes long) in bin. */
typedef struct test_rec {
  cache_record r;
  char op[32], key[96], arch[16], compiler[32], options[64], entry[48], source[128];
  uint8_t *bin;
} test_rec;

static void fill_hash(uint8_t h[16], uint64_t a, uint64_t b) {
  for (int i = 0; i < 8; i++) {
    h[i] = (uint8_t)(a >> (56 - 8 * i));
    h[8 + i] = (uint8_t)(b >> (56 - 8 * i));
  }
}

static void rec_make(test_rec *t, int n, const char *op, const char *arch, const char *compiler,
                     size_t bytes) {
  memset(t, 0, sizeof *t);
  snprintf(t->op, sizeof t->op, "%s", op);
  /* op last, so that ordering by key alone differs from ordering by op, key. */
  snprintf(t->key, sizeof t->key, "dtype=bf16;head_dim=%d;op=%s", 64 + n, op);
  snprintf(t->arch, sizeof t->arch, "%s", arch);
  snprintf(t->compiler, sizeof t->compiler, "%s", compiler);
  snprintf(t->options, sizeof t->options, "--gpu-architecture=%s -O3 -DN=%d", arch, n);
  snprintf(t->entry, sizeof t->entry, "fi_%s_kernel_%d", op, n);
  snprintf(t->source, sizeof t->source, "extern \"C\" __global__ void fi_%s_kernel_%d() {}", op,
           n);
  XXH128_hash_t kh = XXH3_128bits(t->key, strlen(t->key));
  XXH128_hash_t full = XXH3_128bits_withSeed(t->key, strlen(t->key), XXH3_64bits(
      t->compiler, strlen(t->compiler)) ^ XXH3_64bits(arch, strlen(arch)));
  fill_hash(t->r.key_hash, kh.high64, kh.low64);
  fill_hash(t->r.hash, full.high64, full.low64);
  t->bin = malloc(bytes);
  uint64_t x = 0x12345678u + (uint64_t)n;
  for (size_t i = 0; i < bytes; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t->bin[i] = (uint8_t)(x >> 56);
  }
  t->r.op = t->op;
  t->r.key = t->key;
  t->r.arch = t->arch;
  t->r.compiler = t->compiler;
  t->r.options = t->options;
  t->r.entry = t->entry;
  t->r.source = t->source;
  t->r.binary = t->bin;
  t->r.bytes = bytes;
  t->r.compile_ms = 12.5 + n;
}
static void rec_done(test_rec *t) { free(t->bin); }

static int streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* Compares a stored record with the test_rec it came from. */
static int rec_same(const cache_record *got, const test_rec *want) {
  return memcmp(got->hash, want->r.hash, 16) == 0 &&
         memcmp(got->key_hash, want->r.key_hash, 16) == 0 && streq(got->op, want->op) &&
         streq(got->key, want->key) && streq(got->arch, want->arch) &&
         streq(got->compiler, want->compiler) && streq(got->options, want->options) &&
         streq(got->entry, want->entry) && got->bytes == want->r.bytes && got->binary &&
         memcmp(got->binary, want->bin, got->bytes) == 0 &&
         got->checksum == cache_row_checksum(want->r.hash, want->r.key_hash, want->arch, want->entry,
                                             want->bin, want->r.bytes);
}

static int64_t file_size(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* Runs SQL on the file through a separate connection, bypassing the store. */
static int raw_exec(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
  }
  sqlite3_close(db);
  return rc;
}

/* ---- tests ---- */

FT_TEST(store_roundtrip) {
  char dir[64], path[128], err[256] = "";
  td_begin(dir);
  snprintf(path, sizeof path, "%s/sub/dir/kernels.db", dir);
  cache_store *s = NULL;
  int64_t t0 = (int64_t)time(NULL);
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(streq(cache_store_path(s), path), "path %s", cache_store_path(s));
  test_rec a, b;
  rec_make(&a, 1, "rmsnorm", "sm_90", "nvrtc-13.0", 5000);
  rec_make(&b, 2, "rmsnorm", "sm_90", "nvrtc-13.0", 1);
  b.r.source = NULL;
  a.r.templates = "tmpl-3f2a";
  a.r.abi = "1.1";
  FT_CHECK(cache_store_put(s, &a.r, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(cache_store_put(s, &b.r, err, sizeof err) == CACHE_OK, "%s", err);

  cache_record got;
  FT_CHECK(cache_store_find(s, a.r.key_hash, NULL, &got, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(rec_same(&got, &a), "find returned a different record");
  FT_CHECK(streq(got.source, a.source), "source %s", got.source ? got.source : "(null)");
  FT_CHECK(streq(got.templates, "tmpl-3f2a") && streq(got.abi, "1.1"), "templates %s abi %s",
           got.templates ? got.templates : "(null)", got.abi ? got.abi : "(null)");
  FT_CHECK(got.compile_ms == a.r.compile_ms, "compile_ms %f", got.compile_ms);
  FT_CHECK(got.created >= t0 && got.created <= (int64_t)time(NULL), "created %lld",
           (long long)got.created);
  FT_CHECK(got.last_used == got.created && got.hits == 0, "last_used %lld hits %lld",
           (long long)got.last_used, (long long)got.hits);
  cache_record_free(&got);
  FT_CHECK(got.op == NULL && got.binary == NULL && got.bytes == 0, "record_free must zero");

  FT_CHECK(cache_store_get(s, b.r.hash, &got, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(rec_same(&got, &b) && got.source == NULL, "get of b differs");
  /* NULL templates and abi are stored as "". */
  FT_CHECK(streq(got.templates, "") && streq(got.abi, ""), "NULL templates/abi read back");
  cache_record_free(&got);

  uint8_t none[16] = {0};
  FT_CHECK(cache_store_get(s, none, &got, err, sizeof err) == CACHE_NOT_FOUND, "get none");
  FT_CHECK(cache_store_find(s, none, "x", &got, err, sizeof err) == CACHE_NOT_FOUND, "find none");
  /* Errors with no buffer must not crash. */
  FT_CHECK(cache_store_get_prefix(s, "zz", &got, NULL, 0) == CACHE_ERR, "bad prefix, no buffer");

  /* Replacing a row keeps one row per hash. */
  FT_CHECK(cache_store_put(s, &a.r, err, sizeof err) == CACHE_OK, "%s", err);
  int64_t n = -1, bytes = -1, fb = -1;
  FT_CHECK(cache_store_totals(s, &n, &bytes, &fb, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(n == 2 && bytes == 5001 && fb > 0, "totals %lld %lld %lld", (long long)n,
           (long long)bytes, (long long)fb);
  cache_store_close(s);

  /* Survives a reopen. */
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(cache_store_get(s, a.r.hash, &got, err, sizeof err) == CACHE_OK && rec_same(&got, &a),
           "after reopen: %s", err);
  cache_record_free(&got);
  cache_store_close(s);

  char hex[33];
  uint8_t h[16];
  for (int i = 0; i < 16; i++) h[i] = (uint8_t)(i * 17);
  cache_hash_hex(h, hex);
  FT_CHECK(streq(hex, "00112233445566778899aabbccddeeff"), "hex %s", hex);
  rec_done(&a);
  rec_done(&b);
  td_end(dir);
}

FT_TEST(store_find_prefers_compiler) {
  char err[256] = "";
  cache_store *s = NULL;
  REQUIRE(cache_store_open(":memory:", 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  const char *compilers[3] = {"nvrtc-12.8", "nvrtc-13.0", "nvrtc-12.0"};
  test_rec t[3];
  for (int i = 0; i < 3; i++) {
    rec_make(&t[i], 7, "decode", "sm_90", compilers[i], 100 + i);
    FT_CHECK(cache_store_put(s, &t[i].r, err, sizeof err) == CACHE_OK, "%s", err);
  }
  FT_CHECK(memcmp(t[0].r.key_hash, t[2].r.key_hash, 16) == 0 &&
               memcmp(t[0].r.hash, t[2].r.hash, 16) != 0,
           "test setup: one key_hash, three hashes");
  cache_record got;
  for (int i = 0; i < 3; i++) {
    FT_CHECK(cache_store_find(s, t[0].r.key_hash, compilers[i], &got, err, sizeof err) ==
                     CACHE_OK &&
                 rec_same(&got, &t[i]),
             "prefer %s got %s", compilers[i], got.compiler ? got.compiler : "(none)");
    cache_record_free(&got);
  }
  /* No preference, or one that matches nothing: the newest. */
  FT_CHECK(cache_store_find(s, t[0].r.key_hash, NULL, &got, err, sizeof err) == CACHE_OK &&
               rec_same(&got, &t[2]),
           "newest got %s", got.compiler ? got.compiler : "(none)");
  cache_record_free(&got);
  FT_CHECK(cache_store_find(s, t[0].r.key_hash, "hiprtc-5.2", &got, err, sizeof err) ==
                   CACHE_OK &&
               rec_same(&got, &t[2]),
           "unmatched preference got %s", got.compiler ? got.compiler : "(none)");
  cache_record_free(&got);
  /* Storing the first one again makes it the newest. */
  FT_CHECK(cache_store_put(s, &t[0].r, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(cache_store_find(s, t[0].r.key_hash, NULL, &got, err, sizeof err) == CACHE_OK &&
               rec_same(&got, &t[0]),
           "re-put not newest: got %s", got.compiler ? got.compiler : "(none)");
  cache_record_free(&got);
  for (int i = 0; i < 3; i++) rec_done(&t[i]);
  cache_store_close(s);
}

FT_TEST(store_checksum_mismatch) {
  char dir[64], path[128], err[256] = "", sql[256], hex[33];
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec t[3];
  for (int i = 0; i < 3; i++) {
    rec_make(&t[i], i, "rope", "sm_80", "nvrtc-13.0", 3000);
    FT_CHECK(cache_store_put(s, &t[i].r, err, sizeof err) == CACHE_OK, "%s", err);
  }
  cache_record got;
  /* Same length, other content, written behind the store's back. */
  cache_hash_hex(t[0].r.hash, hex);
  snprintf(sql, sizeof sql,
           "UPDATE kernels SET binary = zeroblob(3000) WHERE hash = x'%s'", hex);
  REQUIRE(raw_exec(path, sql) == SQLITE_OK, "raw update");
  err[0] = '\0';
  FT_CHECK(cache_store_get(s, t[0].r.hash, &got, err, sizeof err) == CACHE_ERR_CORRUPT,
           "damaged binary not detected");
  FT_CHECK(strstr(err, hex) != NULL, "message should name the hash: %s", err);
  FT_CHECK(got.binary == NULL && got.op == NULL, "no record on failure");
  FT_CHECK(cache_store_get(s, t[0].r.hash, &got, err, sizeof err) == CACHE_NOT_FOUND,
           "damaged row should be removed");

  /* A length that disagrees with bytes, found through find. */
  cache_hash_hex(t[1].r.hash, hex);
  snprintf(sql, sizeof sql, "UPDATE kernels SET bytes = bytes + 1 WHERE hash = x'%s'", hex);
  REQUIRE(raw_exec(path, sql) == SQLITE_OK, "raw update");
  FT_CHECK(cache_store_find(s, t[1].r.key_hash, NULL, &got, err, sizeof err) ==
               CACHE_ERR_CORRUPT,
           "length mismatch not detected");
  FT_CHECK(cache_store_get(s, t[1].r.hash, &got, err, sizeof err) == CACHE_NOT_FOUND,
           "row should be removed");
  cache_store_close(s);

  /* Read-only: detected, but the row stays. */
  cache_hash_hex(t[2].r.hash, hex);
  snprintf(sql, sizeof sql, "UPDATE kernels SET checksum = checksum + 1 WHERE hash = x'%s'", hex);
  REQUIRE(raw_exec(path, sql) == SQLITE_OK, "raw update");
  REQUIRE(cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) == CACHE_OK, "%s",
             err);
  FT_CHECK(cache_store_get_prefix(s, hex, &got, err, sizeof err) == CACHE_ERR_CORRUPT,
           "checksum mismatch via prefix not detected");
  FT_CHECK(cache_store_get(s, t[2].r.hash, &got, err, sizeof err) == CACHE_ERR_CORRUPT,
           "read-only store must not delete");
  int64_t n = 0;
  FT_CHECK(cache_store_totals(s, &n, NULL, NULL, err, sizeof err) == CACHE_OK && n == 1,
           "entries %lld", (long long)n);
  cache_store_close(s);
  for (int i = 0; i < 3; i++) rec_done(&t[i]);
  td_end(dir);
}

static int read_all(const char *p, char *buf, size_t cap) {
  FILE *f = fopen(p, "rb");
  if (!f) return -1;
  int n = (int)fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

FT_TEST(store_refuses_foreign_files) {
  char dir[64], path[128], err[256] = "";
  td_begin(dir);
  cache_store *s = NULL;

  /* Random bytes: refused, and left as they were for the caller to move. */
  snprintf(path, sizeof path, "%s/random.db", dir);
  static char before[8192], after[8192];
  uint64_t x = 42;
  for (size_t i = 0; i < sizeof before; i++) {
    x = x * 6364136223846793005ull + 1;
    before[i] = (char)(x >> 56);
  }
  FILE *f = fopen(path, "wb");
  REQUIRE(f && fwrite(before, 1, sizeof before, f) == sizeof before, "write");
  fclose(f);
  FT_CHECK(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_ERR_CORRUPT, "random: %s",
           err);
  FT_CHECK(s == NULL && strlen(err) > 0, "no store, a message");
  FT_CHECK(cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) ==
               CACHE_ERR_CORRUPT,
           "random read-only: %s", err);
  FT_CHECK(read_all(path, after, sizeof after) == (int)sizeof after &&
               memcmp(before, after, sizeof after) == 0,
           "random file was modified");

  /* A newer schema. */
  snprintf(path, sizeof path, "%s/newer.db", dir);
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  s = NULL;
  REQUIRE(raw_exec(path, "UPDATE meta SET v = '99' WHERE k = 'schema_version'") == SQLITE_OK,
             "raw update");
  err[0] = '\0';
  FT_CHECK(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_ERR_CORRUPT && s == NULL,
           "schema 99 accepted");
  FT_CHECK(strstr(err, "99") != NULL && strstr(err, "newer") != NULL, "message: %s", err);
  FT_CHECK(cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) ==
               CACHE_ERR_CORRUPT,
           "schema 99 accepted read-only");

  /* An older schema (version 1, before claims): refused so that the
   * runtime moves it aside, and left untouched. */
  snprintf(path, sizeof path, "%s/older.db", dir);
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  s = NULL;
  REQUIRE(raw_exec(path, "UPDATE meta SET v = '1' WHERE k = 'schema_version'") == SQLITE_OK,
          "raw update");
  err[0] = '\0';
  FT_CHECK(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_ERR_CORRUPT && s == NULL,
           "schema 1 accepted");
  FT_CHECK(strstr(err, "older schema") != NULL, "message: %s", err);
  FT_CHECK(cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) ==
               CACHE_ERR_CORRUPT && strstr(err, "older schema") != NULL,
           "schema 1 read-only: %s", err);

  /* Someone else's SQLite database is not ours to write into. */
  snprintf(path, sizeof path, "%s/foreign.db", dir);
  REQUIRE(raw_exec(path, "") != SQLITE_OK, "setup: file should not exist yet");
  sqlite3 *db = NULL;
  REQUIRE(sqlite3_open(path, &db) == SQLITE_OK, "sqlite3_open");
  REQUIRE(sqlite3_exec(db, "CREATE TABLE notes(x)", NULL, NULL, NULL) == SQLITE_OK, "create");
  sqlite3_close(db);
  FT_CHECK(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_ERR_CORRUPT,
           "foreign database accepted: %s", err);
  td_end(dir);
}

FT_TEST(store_readonly) {
  char dir[64], path[128], err[256] = "";
  td_begin(dir);
  snprintf(path, sizeof path, "%s/missing.db", dir);
  cache_store *s = NULL;
  FT_CHECK(cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) == CACHE_ERR &&
               s == NULL,
           "missing file opened read-only");
  FT_CHECK(file_size(path) < 0, "read-only open created the file");

  snprintf(path, sizeof path, "%s/k.db", dir);
  test_rec a, b;
  rec_make(&a, 1, "silu", "sm_90", "nvrtc-13.0", 700);
  rec_make(&b, 2, "silu", "sm_90", "nvrtc-13.0", 700);
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(cache_store_put(s, &a.r, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  static char before[1 << 16], after[1 << 16];
  int nb = read_all(path, before, sizeof before);
  /* Opening an existing store writes nothing either (a write there cost
   * every process 10+ ms of fsync at start). */
  FT_CHECK(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  FT_CHECK(read_all(path, after, sizeof after) == nb && memcmp(before, after, (size_t)nb) == 0,
           "a writable open and close changed the file");

  REQUIRE(cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) == CACHE_OK, "%s",
             err);
  cache_record got;
  FT_CHECK(cache_store_find(s, a.r.key_hash, NULL, &got, err, sizeof err) == CACHE_OK &&
               rec_same(&got, &a),
           "read-only find: %s", err);
  cache_record_free(&got);
  FT_CHECK(cache_store_put(s, &b.r, err, sizeof err) == CACHE_ERR, "read-only put succeeded");
  const uint8_t(*hs)[16] = (const uint8_t(*)[16])&a.r.hash;
  FT_CHECK(cache_store_touch(s, hs, 1, err, sizeof err) == CACHE_ERR, "read-only touch");
  int64_t removed = -1;
  FT_CHECK(cache_store_delete(s, NULL, NULL, &removed, err, sizeof err) == CACHE_ERR &&
               removed == 0,
           "read-only delete");
  cache_store_close(s);
  FT_CHECK(read_all(path, after, sizeof after) == nb && memcmp(before, after, (size_t)nb) == 0,
           "read-only session changed the file");

  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(cache_store_get(s, b.r.hash, &got, err, sizeof err) == CACHE_NOT_FOUND,
           "read-only put left a row");
  FT_CHECK(cache_store_get(s, a.r.hash, &got, err, sizeof err) == CACHE_OK && got.hits == 0,
           "hits %lld", (long long)got.hits);
  cache_record_free(&got);
  cache_store_close(s);
  rec_done(&a);
  rec_done(&b);
  td_end(dir);
}

/* The child of store_readonly_dir: as a user who cannot write the directory. */
static int readonly_dir_child(const char *path, const test_rec *want, int had_shm) {
  if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
    return 3;
  char err[256] = "", shm[160];
  cache_store *s = NULL;
  if (cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) != CACHE_OK) {
    fprintf(stderr, "  child: open: %s\n", err);
    return 4;
  }
  int64_t n = 0;
  cache_record got;
  int ok = cache_store_totals(s, &n, NULL, NULL, err, sizeof err) == CACHE_OK && n == 1 &&
           cache_store_get(s, want->r.hash, &got, err, sizeof err) == CACHE_OK &&
           rec_same(&got, want);
  if (!ok) fprintf(stderr, "  child: read: n=%lld %s\n", (long long)n, err);
  cache_record_free(&got);
  cache_store_close(s);
  snprintf(shm, sizeof shm, "%s-shm", path);
  /* The child may read a -shm the writer left, but must never create one. */
  return ok ? (had_shm || file_size(shm) < 0 ? 0 : 6) : 5;
}

FT_TEST(store_readonly_dir) {
  char dir[64], sub[96], path[128], err[256] = "";
  td_begin(dir);
  snprintf(sub, sizeof sub, "%s/ro", dir);
  snprintf(path, sizeof path, "%s/k.db", sub);
  cache_store *s = NULL;
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec t;
  rec_make(&t, 1, "merge", "sm_90", "nvrtc-13.0", 900);
  FT_CHECK(cache_store_put(s, &t.r, err, sizeof err) == CACHE_OK, "%s", err);
  cache_store_close(s);
  /* A WAL-mode file shipped in a directory nobody may write (an image):
   * first as the writer left it (-wal and -shm kept), then as a clean copy. */
  char side[160];
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      chmod(sub, 0700);
      snprintf(side, sizeof side, "%s-shm", path);
      unlink(side);
      snprintf(side, sizeof side, "%s-wal", path);
      unlink(side);
    }
    snprintf(side, sizeof side, "%s-shm", path);
    int had_shm = file_size(side) >= 0;
    FT_CHECK(chmod(dir, 0755) == 0 && chmod(sub, 0555) == 0 && chmod(path, 0444) == 0, "chmod");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(readonly_dir_child(path, &t, had_shm));
    int status = -1;
    FT_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status), "child status %d",
             status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
      fprintf(stderr, "  note: cannot drop root here; read-only directory not exercised\n");
    else
      FT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "read-only directory (pass %d): child status %d", pass, status);
  }
  chmod(sub, 0700);
  rec_done(&t);
  td_end(dir);
}

typedef struct list_acc {
  int n, bad, stop_after;
  char last[160];
} list_acc;

static int list_fn(const cache_record *r, void *user) {
  list_acc *acc = user;
  char cur[160];
  snprintf(cur, sizeof cur, "%s\x01%s", r->op, r->key);
  int head_dim = 0;
  if (sscanf(r->key, "dtype=bf16;head_dim=%d;", &head_dim) != 1) acc->bad++;
  if (r->binary != NULL || r->bytes != 100 + (size_t)(head_dim - 64)) acc->bad++;
  if (!r->templates || !r->abi) acc->bad++;
  if (acc->n > 0 && strcmp(acc->last, cur) > 0) acc->bad++; /* out of order */
  snprintf(acc->last, sizeof acc->last, "%s", cur);
  acc->n++;
  return acc->stop_after && acc->n >= acc->stop_after;
}

/* Calls back into the store from inside the walk, as fi-cache show would. */
typedef struct nested_acc {
  cache_store *s;
  int n, ok;
} nested_acc;

static int nested_fn(const cache_record *r, void *user) {
  nested_acc *acc = user;
  cache_record got;
  char err[256];
  uint8_t hash[16];
  memcpy(hash, r->hash, 16);
  if (r->source == NULL && cache_store_get(acc->s, hash, &got, err, sizeof err) == CACHE_OK &&
      got.source != NULL && got.binary != NULL && got.bytes == r->bytes &&
      streq(got.key, r->key))
    acc->ok++;
  cache_record_free(&got);
  acc->n++;
  return 0;
}

static int list_count(cache_store *s, const char *op, const char *arch, int *bad, int stop) {
  list_acc acc = {0, 0, stop, ""};
  char err[256];
  if (cache_store_list(s, op, arch, list_fn, &acc, err, sizeof err) != CACHE_OK) return -1;
  *bad += acc.bad;
  return acc.n;
}

FT_TEST(store_list) {
  char err[256] = "";
  cache_store *s = NULL;
  REQUIRE(cache_store_open(":memory:", 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  const char *ops[3] = {"rmsnorm", "decode", "append"}, *archs[2] = {"sm_90", "sm_80"};
  /* Inserted in an order unlike the listing order; key ends in n, bytes = 100 + n. */
  for (int n = 5; n >= 0; n--)
    for (int o = 0; o < 3; o++)
      for (int a = 0; a < 2; a++) {
        test_rec t;
        rec_make(&t, n, ops[o], archs[a], "nvrtc-13.0", 100 + (size_t)n);
        /* rec_make derives hash from key + arch, so the key is shared across archs. */
        FT_CHECK(cache_store_put(s, &t.r, err, sizeof err) == CACHE_OK, "%s", err);
        rec_done(&t);
      }
  int bad = 0;
  FT_CHECK(list_count(s, NULL, NULL, &bad, 0) == 36, "all");
  FT_CHECK(list_count(s, "decode", NULL, &bad, 0) == 12, "by op");
  FT_CHECK(list_count(s, NULL, "sm_80", &bad, 0) == 18, "by arch");
  FT_CHECK(list_count(s, "append", "sm_90", &bad, 0) == 6, "by op and arch");
  FT_CHECK(list_count(s, "nosuch", NULL, &bad, 0) == 0, "no match");
  FT_CHECK(list_count(s, NULL, NULL, &bad, 4) == 4, "stop early");
  FT_CHECK(bad == 0, "%d records with a binary, wrong bytes or out of order", bad);
  nested_acc acc = {s, 0, 0};
  FT_CHECK(cache_store_list(s, "decode", "sm_90", nested_fn, &acc, err, sizeof err) == CACHE_OK,
           "%s", err);
  FT_CHECK(acc.n == 6 && acc.ok == 6, "nested get from the callback: %d of %d", acc.ok, acc.n);
  cache_store_close(s);
}

FT_TEST(store_get_prefix) {
  char err[256] = "";
  cache_store *s = NULL;
  REQUIRE(cache_store_open(":memory:", 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  /* Hashes chosen to share prefixes: ab12..., ab34..., ab35..., cd00... */
  uint64_t hi[4] = {0xab12000000000000ull, 0xab34000000000000ull, 0xab35000000000000ull,
                    0xcd00000000000000ull};
  test_rec t[4];
  for (int i = 0; i < 4; i++) {
    rec_make(&t[i], i, "norm", "sm_90", "nvrtc-13.0", 64);
    fill_hash(t[i].r.hash, hi[i], 0x0123456789abcdefull);
    FT_CHECK(cache_store_put(s, &t[i].r, err, sizeof err) == CACHE_OK, "%s", err);
  }
  struct {
    const char *prefix;
    int want_rc, want_idx;
  } cases[] = {
      {"ab1", CACHE_OK, 0},        {"AB12", CACHE_OK, 0},      {"ab34", CACHE_OK, 1},
      {"ab35", CACHE_OK, 2},       {"c", CACHE_OK, 3},         {"ab3", CACHE_ERR, -1},
      {"a", CACHE_ERR, -1},        {"ee", CACHE_NOT_FOUND, -1}, {"ab2", CACHE_NOT_FOUND, -1},
      {"ab1g", CACHE_ERR, -1},     {"", CACHE_ERR, -1},        {"xyz", CACHE_ERR, -1},
      {"ab35000000000000", CACHE_OK, 2},
      {"ab350000000000000123456789abcdef", CACHE_OK, 2},
      {"ab350000000000000123456789abcdee", CACHE_NOT_FOUND, -1},
      {"ab350000000000000123456789abcdef0", CACHE_ERR, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cache_record got;
    err[0] = '\0';
    int rc = cache_store_get_prefix(s, cases[i].prefix, &got, err, sizeof err);
    FT_CHECK(rc == cases[i].want_rc, "prefix '%s': rc %d want %d (%s)", cases[i].prefix, rc,
             cases[i].want_rc, err);
    if (rc == CACHE_OK && cases[i].want_idx >= 0)
      FT_CHECK(rec_same(&got, &t[cases[i].want_idx]), "prefix '%s': wrong row", cases[i].prefix);
    cache_record_free(&got);
  }
  cache_record got;
  FT_CHECK(cache_store_get_prefix(s, "ab3", &got, err, sizeof err) == CACHE_ERR &&
               strstr(err, "ambiguous") != NULL,
           "message: %s", err);
  FT_CHECK(cache_store_get_prefix(s, "q", &got, err, sizeof err) == CACHE_ERR &&
               strstr(err, "ambiguous") == NULL,
           "non-hex message: %s", err);
  for (int i = 0; i < 4; i++) rec_done(&t[i]);
  cache_store_close(s);
}

FT_TEST(store_delete_shrinks) {
  char dir[64], path[128], err[256] = "";
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  const char *ops[2] = {"decode", "prefill"}, *archs[2] = {"sm_90", "sm_80"};
  /* 40 entries of 256 KiB: 10 MiB of binaries. */
  for (int n = 0; n < 10; n++)
    for (int o = 0; o < 2; o++)
      for (int a = 0; a < 2; a++) {
        test_rec t;
        rec_make(&t, n, ops[o], archs[a], "nvrtc-13.0", 256 * 1024);
        FT_CHECK(cache_store_put(s, &t.r, err, sizeof err) == CACHE_OK, "%s", err);
        rec_done(&t);
      }
  int64_t n = 0, bytes = 0, fb0 = 0, fb = 0, removed = -1;
  FT_CHECK(cache_store_totals(s, &n, &bytes, &fb0, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(n == 40 && bytes == 40 * 256 * 1024 && fb0 >= bytes, "totals %lld %lld %lld",
           (long long)n, (long long)bytes, (long long)fb0);

  FT_CHECK(cache_store_delete(s, "decode", NULL, &removed, err, sizeof err) == CACHE_OK &&
               removed == 20,
           "by op: %lld %s", (long long)removed, err);
  FT_CHECK(cache_store_delete(s, NULL, "sm_80", &removed, err, sizeof err) == CACHE_OK &&
               removed == 10,
           "by arch: %lld %s", (long long)removed, err);
  FT_CHECK(cache_store_delete(s, "prefill", "sm_70", &removed, err, sizeof err) == CACHE_OK &&
               removed == 0,
           "no match: %lld", (long long)removed);
  FT_CHECK(cache_store_totals(s, &n, &bytes, &fb, err, sizeof err) == CACHE_OK && n == 10 &&
               fb < fb0 / 2,
           "after partial delete: %lld entries, file %lld of %lld", (long long)n, (long long)fb,
           (long long)fb0);
  FT_CHECK(cache_store_delete(s, NULL, NULL, &removed, err, sizeof err) == CACHE_OK &&
               removed == 10,
           "all: %lld", (long long)removed);
  FT_CHECK(cache_store_totals(s, &n, &bytes, &fb, err, sizeof err) == CACHE_OK && n == 0 &&
               bytes == 0 && fb < 64 * 1024,
           "after delete all: %lld entries, %lld bytes, file %lld", (long long)n,
           (long long)bytes, (long long)fb);
  /* The file on disk shrinks too, not only the page count. */
  FT_CHECK(file_size(path) < 64 * 1024, "file on disk %lld", (long long)file_size(path));
  cache_store_close(s);
  FT_CHECK(file_size(path) < 64 * 1024, "file after close %lld", (long long)file_size(path));
  td_end(dir);
}

FT_TEST(store_touch) {
  char dir[64], path[128], err[256] = "", sql[128], hex[33];
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec a, b;
  rec_make(&a, 1, "topk", "sm_90", "nvrtc-13.0", 300);
  rec_make(&b, 2, "topk", "sm_90", "nvrtc-13.0", 300);
  FT_CHECK(cache_store_put(s, &a.r, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(cache_store_put(s, &b.r, err, sizeof err) == CACHE_OK, "%s", err);
  /* Backdate a's last use so that a touch visibly moves it. */
  cache_hash_hex(a.r.hash, hex);
  snprintf(sql, sizeof sql, "UPDATE kernels SET last_used = 1000 WHERE hash = x'%s'", hex);
  REQUIRE(raw_exec(path, sql) == SQLITE_OK, "raw update");
  int64_t t0 = (int64_t)time(NULL);
  uint8_t hs[3][16];
  memcpy(hs[0], a.r.hash, 16);
  memcpy(hs[1], b.r.hash, 16);
  memcpy(hs[2], a.r.hash, 16);
  FT_CHECK(cache_store_touch(s, (const uint8_t(*)[16])hs, 3, err, sizeof err) == CACHE_OK, "%s",
           err);
  FT_CHECK(cache_store_touch(s, (const uint8_t(*)[16])hs, 1, err, sizeof err) == CACHE_OK, "%s",
           err);
  FT_CHECK(cache_store_touch(s, NULL, 0, err, sizeof err) == CACHE_OK, "empty touch");
  cache_record got;
  FT_CHECK(cache_store_get(s, a.r.hash, &got, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(got.hits == 3 && got.last_used >= t0, "a: hits %lld last_used %lld",
           (long long)got.hits, (long long)got.last_used);
  cache_record_free(&got);
  FT_CHECK(cache_store_get(s, b.r.hash, &got, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(got.hits == 1, "b: hits %lld", (long long)got.hits);
  cache_record_free(&got);
  /* A touch of an unknown hash changes nothing and is not an error. */
  uint8_t unknown[1][16] = {{1}};
  FT_CHECK(cache_store_touch(s, (const uint8_t(*)[16])unknown, 1, err, sizeof err) == CACHE_OK,
           "%s", err);
  cache_store_close(s);
  rec_done(&a);
  rec_done(&b);
  td_end(dir);
}

FT_TEST(store_modes) {
  char dir[64], path[160], sub[128], err[256] = "";
  td_begin(dir);
  mode_t old = umask(022);
  snprintf(sub, sizeof sub, "%s/a", dir);
  snprintf(path, sizeof path, "%s/a/b/kernels.db", dir);
  cache_store *s = NULL;
  int rc = cache_store_open(path, 0, &s, err, sizeof err);
  FT_CHECK(rc == CACHE_OK, "%s", err);
  struct stat st;
  FT_CHECK(stat(sub, &st) == 0 && (st.st_mode & 07777) == 0700, "dir a mode %o",
           (unsigned)(st.st_mode & 07777));
  snprintf(sub, sizeof sub, "%s/a/b", dir);
  FT_CHECK(stat(sub, &st) == 0 && (st.st_mode & 07777) == 0700, "dir a/b mode %o",
           (unsigned)(st.st_mode & 07777));
  FT_CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0600, "file mode %o",
           (unsigned)(st.st_mode & 07777));
  if (s) {
    test_rec t;
    rec_make(&t, 1, "gelu", "sm_90", "nvrtc-13.0", 100);
    FT_CHECK(cache_store_put(s, &t.r, err, sizeof err) == CACHE_OK, "%s", err);
    rec_done(&t);
    char wal[200];
    snprintf(wal, sizeof wal, "%s-wal", path);
    FT_CHECK(stat(wal, &st) == 0 && (st.st_mode & 07777) == 0600, "wal mode %o",
             (unsigned)(st.st_mode & 07777));
    cache_store_close(s);
  }
  /* The top directory existed: its mode is left alone. */
  FT_CHECK(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0700, "mkdtemp dir %o",
           (unsigned)(st.st_mode & 07777));
  umask(old);
  td_end(dir);
}

/* ---- concurrency ---- */

typedef struct thr_arg {
  cache_store *s;
  int id, fails;
  char err[256];
} thr_arg;

static void *thr_main(void *p) {
  thr_arg *a = p;
  test_rec t;
  for (int i = 0; i < 50; i++) {
    rec_make(&t, a->id * 1000 + i, "thread", "sm_90", "nvrtc-13.0", 1000 + (size_t)i);
    if (cache_store_put(a->s, &t.r, a->err, sizeof a->err) != CACHE_OK) a->fails++;
    rec_done(&t);
  }
  for (int i = 0; i < 50; i++) {
    rec_make(&t, a->id * 1000 + i, "thread", "sm_90", "nvrtc-13.0", 1000 + (size_t)i);
    cache_record got;
    if (cache_store_get(a->s, t.r.hash, &got, a->err, sizeof a->err) != CACHE_OK ||
        !rec_same(&got, &t))
      a->fails++;
    cache_record_free(&got);
    if (cache_store_find(a->s, t.r.key_hash, "nvrtc-13.0", &got, a->err, sizeof a->err) !=
            CACHE_OK ||
        !rec_same(&got, &t))
      a->fails++;
    cache_record_free(&got);
    rec_done(&t);
  }
  return NULL;
}

FT_TEST(store_threads) {
  char dir[64], path[128], err[256] = "";
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  pthread_t th[4];
  thr_arg args[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (thr_arg){s, i + 1, 0, ""};
    REQUIRE(pthread_create(&th[i], NULL, thr_main, &args[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++)
    FT_CHECK(args[i].fails == 0, "thread %d: %d failures, last: %s", i, args[i].fails,
             args[i].err);
  int64_t n = 0;
  FT_CHECK(cache_store_totals(s, &n, NULL, NULL, err, sizeof err) == CACHE_OK && n == 200,
           "entries %lld", (long long)n);
  cache_store_close(s);
  td_end(dir);
}

/* A child: opens the (possibly not yet existing) file and puts 25 entries. */
static int child_main(const char *path, int id) {
  char err[256];
  cache_store *s = NULL;
  if (cache_store_open(path, 0, &s, err, sizeof err) != CACHE_OK) {
    fprintf(stderr, "  child %d: open: %s\n", id, err);
    return 1;
  }
  int fails = 0;
  for (int i = 0; i < 25; i++) {
    test_rec t;
    rec_make(&t, 100 * id + i, "proc", "sm_90", "nvrtc-13.0", 20000 + 7 * (size_t)i);
    if (cache_store_put(s, &t.r, err, sizeof err) != CACHE_OK) {
      fprintf(stderr, "  child %d: put: %s\n", id, err);
      fails++;
    }
    rec_done(&t);
  }
  cache_store_close(s);
  return fails ? 1 : 0;
}

FT_TEST(store_processes) {
  char dir[64], path[128], err[256] = "";
  td_begin(dir);
  snprintf(path, sizeof path, "%s/new/k.db", dir);
  /* The children race to create the file and its schema. */
  pid_t pids[4];
  for (int i = 0; i < 4; i++) {
    fflush(NULL);
    pids[i] = fork();
    REQUIRE(pids[i] >= 0, "fork");
    if (pids[i] == 0) _exit(child_main(path, i + 1));
  }
  for (int i = 0; i < 4; i++) {
    int status = 0;
    FT_CHECK(waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) &&
                 WEXITSTATUS(status) == 0,
             "child %d status %d", i, status);
  }
  cache_store *s = NULL;
  REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  int64_t n = 0;
  FT_CHECK(cache_store_totals(s, &n, NULL, NULL, err, sizeof err) == CACHE_OK && n == 100,
           "entries %lld", (long long)n);
  int ok = 0;
  for (int id = 1; id <= 4; id++)
    for (int i = 0; i < 25; i++) {
      test_rec t;
      rec_make(&t, 100 * id + i, "proc", "sm_90", "nvrtc-13.0", 20000 + 7 * (size_t)i);
      cache_record got;
      if (cache_store_get(s, t.r.hash, &got, err, sizeof err) == CACHE_OK && rec_same(&got, &t))
        ok++;
      cache_record_free(&got);
      rec_done(&t);
    }
  FT_CHECK(ok == 100, "%d of 100 entries read back and verified (%s)", ok, err);
  cache_store_close(s);
  td_end(dir);
}

FT_TEST(store_memory) {
  char err[256] = "";
  cache_store *s1 = NULL, *s2 = NULL;
  REQUIRE(cache_store_open(":memory:", 0, &s1, err, sizeof err) == CACHE_OK, "%s", err);
  REQUIRE(cache_store_open(":memory:", 0, &s2, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec t;
  rec_make(&t, 3, "sample", "sm_90", "nvrtc-13.0", 4096);
  FT_CHECK(cache_store_put(s1, &t.r, err, sizeof err) == CACHE_OK, "%s", err);
  cache_record got;
  FT_CHECK(cache_store_get(s1, t.r.hash, &got, err, sizeof err) == CACHE_OK && rec_same(&got, &t),
           "get: %s", err);
  cache_record_free(&got);
  FT_CHECK(cache_store_get(s2, t.r.hash, &got, err, sizeof err) == CACHE_NOT_FOUND,
           "two :memory: stores must be distinct");
  int64_t removed = 0;
  FT_CHECK(cache_store_delete(s1, NULL, NULL, &removed, err, sizeof err) == CACHE_OK &&
               removed == 1,
           "delete: %s", err);
  cache_store *s3 = NULL;
  FT_CHECK(cache_store_open(":memory:", CACHE_OPEN_READONLY, &s3, err, sizeof err) == CACHE_ERR &&
               s3 == NULL,
           "read-only :memory:");
  cache_store_close(s1);
  cache_store_close(s2);
  rec_done(&t);
}
