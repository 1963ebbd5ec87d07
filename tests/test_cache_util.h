/* test_cache_util.h: helpers shared by the tests of cache/'s operations: temp
 * directories, records derived from a number, SQL run behind the store's back. */
#ifndef TEST_CACHE_UTIL_H
#define TEST_CACHE_UTIL_H

#include <ftw.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache_store.h"

static inline int tcu_rm_entry(const char *p, const struct stat *sb, int flag,
                               struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

/* A fresh directory under /tmp; td_end removes it with everything in it. */
static inline void td_begin(char dir[64]) {
  strcpy(dir, "/tmp/fi_cacheops_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(2);
  }
}
static inline void td_end(const char *dir) {
  chmod(dir, 0700);
  nftw(dir, tcu_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A record whose every field derives from (n, op, arch, compiler); the
 * strings live in the struct, the binary (bytes long) in bin. */
typedef struct test_rec {
  cache_record r;
  char op[32], key[96], arch[16], compiler[32], options[64], entry[48], source[128];
  char templates[32], abi[16];
  uint8_t *bin;
} test_rec;

static inline void fill_hash(uint8_t h[16], uint64_t a, uint64_t b) {
  for (int i = 0; i < 8; i++) {
    h[i] = (uint8_t)(a >> (56 - 8 * i));
    h[8 + i] = (uint8_t)(b >> (56 - 8 * i));
  }
}

static inline void rec_make(test_rec *t, int n, const char *op, const char *arch,
                            const char *compiler, size_t bytes) {
  memset(t, 0, sizeof *t);
  snprintf(t->op, sizeof t->op, "%s", op);
  snprintf(t->key, sizeof t->key, "dtype=bf16;head_dim=%d;op=%s", 64 + n, op);
  snprintf(t->arch, sizeof t->arch, "%s", arch);
  snprintf(t->compiler, sizeof t->compiler, "%s", compiler);
  snprintf(t->options, sizeof t->options, "--gpu-architecture=%s -O3 -DN=%d", arch, n);
  snprintf(t->entry, sizeof t->entry, "fi_%s_kernel_%d", op, n);
  snprintf(t->source, sizeof t->source, "extern \"C\" __global__ void fi_%s_kernel_%d() {}", op,
           n);
  snprintf(t->templates, sizeof t->templates, "tmpl-1");
  snprintf(t->abi, sizeof t->abi, "1.1");
  /* key_hash from the key and arch; hash adds the compiler. */
  uint64_t seed = XXH3_64bits(arch, strlen(arch));
  XXH128_hash_t kh = XXH3_128bits_withSeed(t->key, strlen(t->key), seed);
  XXH128_hash_t full = XXH3_128bits_withSeed(t->key, strlen(t->key),
                                             seed ^ XXH3_64bits(compiler, strlen(compiler)));
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
  t->r.templates = t->templates;
  t->r.abi = t->abi;
  t->r.binary = t->bin;
  t->r.bytes = bytes;
  t->r.compile_ms = 12.5 + n;
}
static inline void rec_done(test_rec *t) { free(t->bin); }

static inline int streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* A stored record equals the test_rec it came from. */
static inline int rec_same(const cache_record *got, const test_rec *want) {
  return memcmp(got->hash, want->r.hash, 16) == 0 &&
         memcmp(got->key_hash, want->r.key_hash, 16) == 0 && streq(got->op, want->op) &&
         streq(got->key, want->key) && streq(got->arch, want->arch) &&
         streq(got->compiler, want->compiler) && streq(got->options, want->options) &&
         streq(got->entry, want->entry) &&
         streq(got->templates, want->r.templates ? want->r.templates : "") &&
         streq(got->abi, want->r.abi ? want->r.abi : "") && got->bytes == want->r.bytes &&
         got->binary && memcmp(got->binary, want->bin, got->bytes) == 0 &&
         got->checksum == cache_row_checksum(want->r.hash, want->r.key_hash, want->arch, want->entry,
                                             want->bin, want->r.bytes);
}

/* Whether the store holds t, whole. */
static inline int rec_stored(cache_store *s, const test_rec *t) {
  cache_record got;
  char err[256];
  int ok = cache_store_get(s, t->r.hash, &got, err, sizeof err) == CACHE_OK && rec_same(&got, t);
  cache_record_free(&got);
  return ok;
}

static inline int64_t file_size(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* Runs SQL on the file through a separate connection, bypassing the store. */
static inline int raw_exec(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
  }
  sqlite3_close(db);
  return rc;
}

/* The first column of the first row of sql, as an integer; -1 on failure. */
static inline int64_t raw_int(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int64_t v = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_busy_timeout(db, 5000) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

/* "x'<32 hex digits>'": a hash as an SQL blob literal. */
static inline const char *sql_blob(const uint8_t h[16], char out[40]) {
  char hex[33];
  cache_hash_hex(h, hex);
  snprintf(out, 40, "x'%s'", hex);
  return out;
}

/* Flips one byte of a stored binary in place (incremental blob I/O), as a
 * bad disk sector or a stray write would. */
static inline int flip_byte(const char *path, const uint8_t hash[16], int offset) {
  char sql[160], b[40];
  snprintf(sql, sizeof sql, "SELECT rowid FROM kernels WHERE hash = %s", sql_blob(hash, b));
  int64_t rowid = raw_int(path, sql);
  sqlite3 *db = NULL;
  sqlite3_blob *blob = NULL;
  unsigned char c = 0;
  int rc = rowid > 0 ? sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) : SQLITE_ERROR;
  if (rc == SQLITE_OK) rc = sqlite3_blob_open(db, "main", "kernels", "binary", rowid, 1, &blob);
  if (rc == SQLITE_OK) rc = sqlite3_blob_read(blob, &c, 1, offset);
  c ^= 0x40;
  if (rc == SQLITE_OK) rc = sqlite3_blob_write(blob, &c, 1, offset);
  sqlite3_blob_close(blob);
  sqlite3_close(db);
  return rc;
}

#endif /* TEST_CACHE_UTIL_H */
