/* cache_read.c: reading the store: rows checked against their checksum, lookup by
 * key hash (preferring this compiler), by hash or hash prefix, listing and totals. */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache_internal.h"
#include "cache_store.h"

void cache_record_free(cache_record *rec) {
  if (!rec) return;
  free((char *)rec->op);
  free((char *)rec->key);
  free((char *)rec->arch);
  free((char *)rec->compiler);
  free((char *)rec->options);
  free((char *)rec->entry);
  free((char *)rec->templates);
  free((char *)rec->abi);
  free((char *)rec->source);
  free((void *)rec->binary);
  memset(rec, 0, sizeof *rec);
}

static int cache_blob16(sqlite3_stmt *st, int col, uint8_t out[16]) {
  if (sqlite3_column_bytes(st, col) != 16) return 0;
  const void *b = sqlite3_column_blob(st, col);
  if (!b) return 0;
  memcpy(out, b, 16);
  return 1;
}

int cache_row_meta(sqlite3_stmt *st, cache_record *rec) {
  memset(rec, 0, sizeof *rec);
  if (!cache_blob16(st, 0, rec->hash) || !cache_blob16(st, 1, rec->key_hash)) return 0;
  const char **strs[] = {&rec->op, &rec->key, &rec->arch, &rec->compiler, &rec->options,
                         &rec->entry};
  for (int i = 0; i < 6; i++)
    if (!(*strs[i] = (const char *)sqlite3_column_text(st, 2 + i))) return 0;
  if (!(rec->templates = (const char *)sqlite3_column_text(st, 14)) ||
      !(rec->abi = (const char *)sqlite3_column_text(st, 15)))
    return 0;
  rec->bytes = (size_t)sqlite3_column_int64(st, 8);
  rec->checksum = (uint64_t)sqlite3_column_int64(st, 9);
  rec->compile_ms = sqlite3_column_double(st, 10);
  rec->created = sqlite3_column_int64(st, 11);
  rec->last_used = sqlite3_column_int64(st, 12);
  rec->hits = sqlite3_column_int64(st, 13);
  return 1;
}

uint64_t cache_row_checksum(const uint8_t hash[16], const uint8_t key_hash[16], const char *arch,
                            const char *entry, const void *binary, size_t bytes) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, hash, 16);
  XXH3_64bits_update(&st, key_hash, 16);
  /* Each string with its NUL, so that no two (arch, entry) pairs run together. */
  XXH3_64bits_update(&st, arch, strlen(arch) + 1);
  XXH3_64bits_update(&st, entry, strlen(entry) + 1);
  XXH3_64bits_update(&st, binary, bytes);
  return XXH3_64bits_digest(&st);
}

void cache_store_set_row_check(cache_store *s, cache_row_check_fn fn) {
  if (s) s->row_check = fn;
}

int cache_row_judge(const cache_store *s, sqlite3_stmt *st, char *why, size_t whylen) {
  char spare[8];
  if (!why || whylen == 0) why = spare, whylen = sizeof spare;
  why[0] = 0;
  cache_record r;
  if (!cache_row_meta(st, &r)) {
    snprintf(why, whylen, "malformed hash or missing text field");
    return 0;
  }
  const void *bin = sqlite3_column_blob(st, REC_COL_BINARY);
  size_t n = (size_t)sqlite3_column_bytes(st, REC_COL_BINARY);
  if (!bin || n != r.bytes) {
    snprintf(why, whylen, "length mismatch");
    return 0;
  }
  if (cache_row_checksum(r.hash, r.key_hash, r.arch, r.entry, bin, n) != r.checksum) {
    snprintf(why, whylen, "checksum mismatch");
    return 0;
  }
  if (s && s->row_check) {
    r.binary = bin;
    r.source = (const char *)sqlite3_column_text(st, REC_COL_SOURCE);
    if (s->row_check(&r, why, whylen) != 0) {
      if (!why[0]) snprintf(why, whylen, "refused by the row check");
      return 0;
    }
  }
  return 1;
}

/* After cache_row_meta failed: out of memory, or a row put there by hand. */
static int cache_bad_row(cache_store *s, char *err, size_t errlen) {
  if (sqlite3_errcode(s->db) == SQLITE_NOMEM) {
    cache_seterr(err, errlen, "out of memory");
    return CACHE_ERR;
  }
  cache_seterr(err, errlen, "%s: row with a malformed hash or missing text field", s->path);
  return CACHE_ERR_CORRUPT;
}

static char *cache_dup(const char *p) { return p ? strdup(p) : NULL; }

/* Reads the current row of a REC_COLS statement into caller-owned copies,
 * verifying length and checksum; a damaged row is deleted when writable. */
static int cache_read_row(cache_store *s, sqlite3_stmt *st, cache_record *rec, char *err,
                          size_t errlen) {
  cache_record r;
  if (!cache_row_meta(st, &r)) return cache_bad_row(s, err, errlen);
  const char *source = (const char *)sqlite3_column_text(st, REC_COL_SOURCE);
  const void *bin = sqlite3_column_blob(st, REC_COL_BINARY);
  size_t n = (size_t)sqlite3_column_bytes(st, REC_COL_BINARY);
  char why[256];
  if (!cache_row_judge(s, st, why, sizeof why)) {
    uint8_t hash[16];
    char hex[33];
    memcpy(hash, r.hash, 16);
    cache_hash_hex(hash, hex);
    int removed = 0;
    if (!s->readonly) {
      /* Reset first: the delete must not run under this statement's read. */
      sqlite3_reset(st);
      sqlite3_stmt *del = cache_stmt(s, ST_DEL, NULL, 0);
      int rc = del ? sqlite3_bind_blob(del, 1, hash, 16, SQLITE_STATIC) : SQLITE_ERROR;
      if (rc == SQLITE_OK) rc = sqlite3_step(del);
      removed = rc == SQLITE_DONE;
      if (del) {
        sqlite3_reset(del);
        sqlite3_clear_bindings(del);
      }
    }
    cache_seterr(err, errlen, "kernel %s in %s: %s (%s)", hex, s->path, why,
                 removed ? "row removed" : "row left in place");
    return CACHE_ERR_CORRUPT;
  }
  *rec = r;
  rec->op = cache_dup(r.op);
  rec->key = cache_dup(r.key);
  rec->arch = cache_dup(r.arch);
  rec->compiler = cache_dup(r.compiler);
  rec->options = cache_dup(r.options);
  rec->entry = cache_dup(r.entry);
  rec->templates = cache_dup(r.templates);
  rec->abi = cache_dup(r.abi);
  rec->source = cache_dup(source);
  void *b = malloc(n);
  if (b) memcpy(b, bin, n);
  rec->binary = b;
  if (!rec->op || !rec->key || !rec->arch || !rec->compiler || !rec->options || !rec->entry ||
      !rec->templates || !rec->abi || (source && !rec->source) || !b) {
    cache_record_free(rec);
    cache_seterr(err, errlen, "out of memory");
    return CACHE_ERR;
  }
  return CACHE_OK;
}

/* Steps a bound lookup statement once and reads its row. */
static int cache_lookup(cache_store *s, sqlite3_stmt *st, cache_record *rec, char *err,
                        size_t errlen) {
  int rc = sqlite3_step(st), ret;
  if (rc == SQLITE_ROW)
    ret = cache_read_row(s, st, rec, err, errlen);
  else if (rc == SQLITE_DONE)
    ret = CACHE_NOT_FOUND;
  else
    ret = cache_sqerr(s, rc, "lookup", err, errlen);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return ret;
}

static int cache_args_ok(cache_store *s, const void *p, cache_record *rec, char *err,
                         size_t errlen) {
  if (rec) memset(rec, 0, sizeof *rec);
  if (!s || !p || !rec) {
    cache_seterr(err, errlen, "cache store lookup: NULL argument");
    return 0;
  }
  return 1;
}

/* Walks the rows of one key_hash (almost always one) in rowid order and keeps
 * the row of the preferred compiler, else the newest (the later on a tie). */
static int cache_find_best(cache_store *s, sqlite3_stmt *q, const char *prefer, cache_record *rec,
                           char *err, size_t errlen) {
  int have = 0, have_pref = 0, ret = CACHE_NOT_FOUND;
  int64_t have_created = 0;
  for (;;) {
    int rc = sqlite3_step(q);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      if (have) cache_record_free(rec);
      have = 0;
      ret = cache_sqerr(s, rc, "find", err, errlen);
      break;
    }
    const char *comp = (const char *)sqlite3_column_text(q, 5);
    int64_t created = sqlite3_column_int64(q, 11);
    int pref = prefer && comp && strcmp(comp, prefer) == 0;
    if (have && (have_pref || (!pref && created < have_created))) continue;
    if (have) cache_record_free(rec);
    have = 0;
    ret = cache_read_row(s, q, rec, err, errlen);
    if (ret != CACHE_OK) break; /* a corrupt row was dropped; the statement was reset */
    have = 1;
    have_pref = pref;
    have_created = created;
    if (pref) break;
  }
  sqlite3_reset(q);
  sqlite3_clear_bindings(q);
  return have ? CACHE_OK : ret;
}

int cache_store_find(cache_store *s, const uint8_t key_hash[16], const char *prefer_compiler,
                     cache_record *rec, char *err, size_t errlen) {
  if (!cache_args_ok(s, key_hash, rec, err, errlen)) return CACHE_ERR;
  cache_lock(s);
  int ret;
  sqlite3_stmt *q = cache_stmt(s, ST_FIND, err, errlen);
  if (!q) {
    cache_unlock(s);
    return CACHE_ERR;
  }
  int rc = sqlite3_bind_blob(q, 1, key_hash, 16, SQLITE_STATIC);
  if (rc == SQLITE_OK)
    ret = cache_find_best(s, q, prefer_compiler, rec, err, errlen);
  else
    ret = cache_sqerr(s, rc, "find: bind", err, errlen);
  cache_unlock(s);
  return ret;
}

int cache_store_get(cache_store *s, const uint8_t hash[16], cache_record *rec, char *err,
                    size_t errlen) {
  if (!cache_args_ok(s, hash, rec, err, errlen)) return CACHE_ERR;
  cache_lock(s);
  sqlite3_stmt *q = cache_stmt(s, ST_GET, err, errlen);
  int ret, rc = q ? sqlite3_bind_blob(q, 1, hash, 16, SQLITE_STATIC) : SQLITE_ERROR;
  if (!q)
    ret = CACHE_ERR;
  else if (rc == SQLITE_OK)
    ret = cache_lookup(s, q, rec, err, errlen);
  else
    ret = cache_sqerr(s, rc, "get: bind", err, errlen);
  cache_unlock(s);
  return ret;
}

static int cache_hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int cache_store_get_prefix(cache_store *s, const char *hex_prefix, cache_record *rec, char *err,
                           size_t errlen) {
  if (!cache_args_ok(s, hex_prefix, rec, err, errlen)) return CACHE_ERR;
  size_t len = strlen(hex_prefix);
  if (len == 0 || len > 32) {
    cache_seterr(err, errlen, "hash prefix '%s': want 1 to 32 hex digits", hex_prefix);
    return CACHE_ERR;
  }
  /* The prefix becomes a range [lo, hi] of 16-byte blobs, which the primary
   * key index answers directly (hashes compare as memcmp). */
  uint8_t lo[16] = {0}, hi[16];
  memset(hi, 0xff, sizeof hi);
  for (size_t i = 0; i < len; i++) {
    int v = cache_hexval(hex_prefix[i]);
    if (v < 0) {
      cache_seterr(err, errlen, "hash prefix '%s': '%c' is not a hex digit", hex_prefix,
                   hex_prefix[i]);
      return CACHE_ERR;
    }
    int shift = (i % 2) ? 0 : 4;
    lo[i / 2] = (uint8_t)(lo[i / 2] | (v << shift));
    hi[i / 2] = (uint8_t)((hi[i / 2] & ~(0xf << shift)) | (v << shift));
  }
  cache_lock(s);
  sqlite3_stmt *st = NULL;
  int ret;
  int rc = sqlite3_prepare_v2(s->db,
                              "SELECT " REC_COLS " FROM kernels WHERE hash BETWEEN ?1 AND ?2"
                              " ORDER BY hash LIMIT 2",
                              -1, &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 1, lo, 16, SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 2, hi, 16, SQLITE_STATIC);
  if (rc != SQLITE_OK) {
    ret = cache_sqerr(s, rc, "get by prefix", err, errlen);
  } else if ((rc = sqlite3_step(st)) == SQLITE_DONE) {
    ret = CACHE_NOT_FOUND;
  } else if (rc != SQLITE_ROW) {
    ret = cache_sqerr(s, rc, "get by prefix", err, errlen);
  } else {
    uint8_t first[16];
    int ok = cache_blob16(st, 0, first);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
      char a[33];
      cache_hash_hex(ok ? first : lo, a);
      cache_seterr(err, errlen, "hash prefix '%s' is ambiguous: %s and others match", hex_prefix,
                   a);
      ret = CACHE_ERR;
    } else if (rc != SQLITE_DONE) {
      ret = cache_sqerr(s, rc, "get by prefix", err, errlen);
    } else {
      /* The only match: read it by full hash, which verifies the checksum. */
      sqlite3_finalize(st);
      st = NULL;
      sqlite3_stmt *q = cache_stmt(s, ST_GET, err, errlen);
      rc = !q ? SQLITE_ERROR : ok ? sqlite3_bind_blob(q, 1, first, 16, SQLITE_STATIC) : SQLITE_CORRUPT;
      ret = rc == SQLITE_OK ? cache_lookup(s, q, rec, err, errlen)
                            : cache_sqerr(s, rc, "get by prefix", err, errlen);
    }
  }
  sqlite3_finalize(st);
  cache_unlock(s);
  return ret;
}

int cache_bind_filter(sqlite3_stmt *st, const char *op, const char *arch) {
  int rc = op ? sqlite3_bind_text(st, 1, op, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 1);
  if (rc == SQLITE_OK)
    rc = arch ? sqlite3_bind_text(st, 2, arch, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 2);
  return rc;
}

int cache_store_list(cache_store *s, const char *op, const char *arch, cache_record_fn fn,
                     void *user, char *err, size_t errlen) {
  if (!s || !fn) {
    cache_seterr(err, errlen, "list: NULL argument");
    return CACHE_ERR;
  }
  cache_lock(s);
  sqlite3_stmt *st = NULL;
  int ret = CACHE_OK;
  int rc = sqlite3_prepare_v2(s->db,
                              "SELECT " REC_META_COLS " FROM kernels" CACHE_FILTER_SQL
                              " ORDER BY op, key",
                              -1, &st, NULL);
  if (rc == SQLITE_OK) rc = cache_bind_filter(st, op, arch);
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    cache_record r;
    if (!cache_row_meta(st, &r)) {
      ret = cache_bad_row(s, err, errlen);
      break;
    }
    if (fn(&r, user)) break;
    rc = SQLITE_OK;
  }
  if (ret == CACHE_OK && rc != SQLITE_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
    ret = cache_sqerr(s, rc, "list", err, errlen);
  sqlite3_finalize(st);
  cache_unlock(s);
  return ret;
}

int cache_int_query(cache_store *s, const char *sql, const char *what, int64_t *a, int64_t *b,
                    char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    *a = sqlite3_column_int64(st, 0);
    if (b) *b = sqlite3_column_int64(st, 1);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    rc = SQLITE_ERROR;
  }
  sqlite3_finalize(st);
  return rc == SQLITE_OK ? CACHE_OK : cache_sqerr(s, rc, what, err, errlen);
}

int cache_file_bytes(cache_store *s, int64_t *bytes, char *err, size_t errlen) {
  int64_t pages = 0, page_size = 0;
  int ret = cache_int_query(s, "PRAGMA page_count", "page_count", &pages, NULL, err, errlen);
  if (ret == CACHE_OK)
    ret = cache_int_query(s, "PRAGMA page_size", "page_size", &page_size, NULL, err, errlen);
  *bytes = pages * page_size;
  return ret;
}

int cache_store_totals(cache_store *s, int64_t *entries, int64_t *bytes, int64_t *file_bytes,
                       char *err, size_t errlen) {
  if (!s) {
    cache_seterr(err, errlen, "totals: NULL store");
    return CACHE_ERR;
  }
  int64_t n = 0, sum = 0, pages = 0, page_size = 0;
  cache_lock(s);
  /* One read transaction, so the three numbers describe the same snapshot. */
  int ret = cache_exec(s, "BEGIN", "totals: begin", err, errlen);
  if (ret == CACHE_OK)
    ret = cache_int_query(s, "SELECT count(*), coalesce(sum(bytes), 0) FROM kernels", "totals",
                          &n, &sum, err, errlen);
  if (ret == CACHE_OK)
    ret = cache_int_query(s, "PRAGMA page_count", "totals", &pages, NULL, err, errlen);
  if (ret == CACHE_OK)
    ret = cache_int_query(s, "PRAGMA page_size", "totals", &page_size, NULL, err, errlen);
  cache_rollback(s);
  cache_unlock(s);
  if (ret != CACHE_OK) return ret;
  if (entries) *entries = n;
  if (bytes) *bytes = sum;
  if (file_bytes) *file_bytes = pages * page_size;
  return CACHE_OK;
}
