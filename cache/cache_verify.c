/* cache_verify.c: checking a cache file (SQLite's integrity check, every row's
 * length and checksum) and repairing it: bad rows deleted, a damaged file rebuilt. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache_internal.h"
#include "cache_ops.h"

/* Appends one line to the report's detail while it has room. */
static void note(cache_verify_report *rep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(cache_verify_report *rep, const char *fmt, ...) {
  size_t used = strlen(rep->detail), cap = sizeof rep->detail;
  if (used + 2 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rep->detail + used, cap - used, fmt, ap);
  va_end(ap);
  used = strlen(rep->detail);
  if (used + 1 < cap) strcpy(rep->detail + used, "\n");
}

/* A growable list of rowids. */
typedef struct rowids {
  int64_t *v;
  size_t n, cap;
} rowids;

static int rowids_add(rowids *r, int64_t id) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 256;
    int64_t *v = realloc(r->v, cap * sizeof *v);
    if (!v) return 0;
    r->v = v;
    r->cap = cap;
  }
  r->v[r->n++] = id;
  return 1;
}

/* An error that is the file's damage showing, as opposed to one of the
 * moment (memory, I/O, locks) that must stop a repair rather than cost rows. */
static int is_damage(int rc) {
  return (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB ||
         rc == SQLITE_IOERR_SHORT_READ;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* PRAGMA integrity_check: "ok", or up to 100 lines of problems. A file too
 * damaged to answer is not ok either. */
static int verify_integrity(cache_store *s, cache_verify_report *rep, char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, "PRAGMA integrity_check", -1, &st, NULL);
  int lines = 0, ok = 0;
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *msg = (const char *)sqlite3_column_text(st, 0);
    if (lines++ == 0 && msg && strcmp(msg, "ok") == 0)
      ok = 1;
    else if (lines <= 5)
      note(rep, "integrity: %s", msg ? msg : "?");
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  if (rc == SQLITE_DONE || is_damage(rc)) {
    rep->integrity_ok = ok && lines == 1 && rc == SQLITE_DONE;
    if (rc != SQLITE_DONE) note(rep, "integrity: %s", sqlite3_errmsg(s->db));
    return CACHE_OK;
  }
  return cache_sqerr(s, rc, "verify: integrity_check", err, errlen);
}

/* Reads every row back: hashes well formed, binary as long as recorded and
 * matching its checksum. Bad rows go to bad; a read that fails on a damaged
 * page ends the walk and marks the file damaged. */
static int verify_rows(cache_store *s, cache_verify_report *rep, rowids *bad, int *damaged,
                       char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db,
                              "SELECT rowid, hash, key_hash, bytes, checksum, binary FROM kernels",
                              -1, &st, NULL);
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    rc = SQLITE_OK;
    rep->rows++;
    const void *hash = sqlite3_column_blob(st, 1);
    int hash_ok = hash && sqlite3_column_bytes(st, 1) == 16 && sqlite3_column_bytes(st, 2) == 16;
    const void *bin = sqlite3_column_blob(st, 5);
    size_t n = (size_t)sqlite3_column_bytes(st, 5);
    size_t want = (size_t)sqlite3_column_int64(st, 3);
    uint64_t sum = (uint64_t)sqlite3_column_int64(st, 4);
    const char *why = !hash_ok        ? "malformed hash"
                      : n != want || !bin ? "length mismatch"
                      : XXH3_64bits(bin, n) != sum ? "checksum mismatch"
                                                   : NULL;
    if (!why) continue;
    rep->bad_rows++;
    char hex[33] = "?";
    if (hash_ok) cache_hash_hex(hash, hex);
    note(rep, "kernel %s: %s", hex, why);
    if (!rowids_add(bad, sqlite3_column_int64(st, 0))) {
      rc = SQLITE_NOMEM;
      break;
    }
  }
  if (rc == SQLITE_DONE || rc == SQLITE_OK) {
    rc = SQLITE_OK;
  } else if (is_damage(rc)) {
    *damaged = 1;
    rep->bad_rows++;
    note(rep, "rows: reading stopped after %lld rows: %s", (long long)rep->rows,
         sqlite3_errmsg(s->db));
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc == SQLITE_OK ? CACHE_OK : cache_sqerr(s, rc, "verify: reading rows", err, errlen);
}

/* Deletes the bad rows found by verify_rows, in the open write transaction. */
static int verify_delete(cache_store *s, const rowids *bad, int64_t *deleted, char *err,
                         size_t errlen) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, "DELETE FROM kernels WHERE rowid = ?1", -1, &st, NULL);
  for (size_t i = 0; i < bad->n && rc == SQLITE_OK; i++) {
    rc = sqlite3_bind_int64(st, 1, bad->v[i]);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
      *deleted += sqlite3_changes(s->db);
      rc = sqlite3_reset(st);
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_OK) return cache_sqerr(s, rc, "repair: deleting bad rows", err, errlen);
  return cache_exec(s, "PRAGMA incremental_vacuum", "repair: incremental_vacuum", err, errlen);
}

/* Adds the rowids one query yields, as far as it reads: the table and both
 * indexes each list the rows, so a damaged page in one leaves the others.
 * Damage just ends the list (so does an index missing from the schema). */
static int collect(cache_store *s, const char *sql, rowids *out, char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(st);
    return (rc & 0xff) == SQLITE_NOMEM ? cache_sqerr(s, rc, "rebuild", err, errlen) : CACHE_OK;
  }
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    if (!rowids_add(out, sqlite3_column_int64(st, 0))) {
      rc = SQLITE_NOMEM;
      break;
    }
  sqlite3_finalize(st);
  if (rc == SQLITE_DONE || is_damage(rc)) return CACHE_OK;
  if (rc != SQLITE_NOMEM) return cache_sqerr(s, rc, "rebuild: listing rows", err, errlen);
  cache_seterr(err, errlen, "out of memory");
  return CACHE_ERR;
}

/* Copies every row of s that reads back whole into the fresh store n; each
 * is fetched by rowid, so one damaged leaf costs only its own rows. */
static int rebuild_copy(cache_store *s, cache_store *n, int64_t *found, int64_t *copied,
                        char *err, size_t errlen) {
  rowids ids = {0};
  int ret = collect(s, "SELECT rowid FROM kernels NOT INDEXED", &ids, err, errlen);
  if (ret == CACHE_OK)
    ret = collect(s, "SELECT rowid FROM kernels INDEXED BY kernels_key_hash", &ids, err, errlen);
  if (ret == CACHE_OK)
    ret = collect(s, "SELECT rowid FROM kernels ORDER BY hash", &ids, err, errlen);
  if (ret != CACHE_OK) {
    free(ids.v);
    return ret;
  }
  if (ids.n) qsort(ids.v, ids.n, sizeof *ids.v, cmp_i64);
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, "SELECT " REC_COLS " FROM kernels WHERE rowid = ?1", -1,
                              &st, NULL);
  ret = rc == SQLITE_OK ? cache_exec(n, "BEGIN IMMEDIATE", "rebuild: begin", err, errlen)
                        : cache_sqerr(s, rc, "rebuild: prepare", err, errlen);
  for (size_t i = 0; ret == CACHE_OK && i < ids.n; i++) {
    if (i > 0 && ids.v[i] == ids.v[i - 1]) continue;
    (*found)++;
    rc = sqlite3_bind_int64(st, 1, ids.v[i]);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    int inserted = 0;
    if (rc == SQLITE_ROW && cache_row_intact(st)) {
      ret = cache_copy_row(n, st, &inserted, err, errlen);
      *copied += inserted;
    } else if (rc != SQLITE_ROW && rc != SQLITE_DONE && !is_damage(rc)) {
      ret = cache_sqerr(s, rc, "rebuild: reading a row", err, errlen);
    }
    /* A row that reads back damaged, or not at all, is lost to the damage. */
    cache_stmt_done(st);
  }
  if (ret == CACHE_OK) ret = cache_exec(n, "COMMIT", "rebuild: commit", err, errlen);
  if (ret != CACHE_OK) cache_rollback(n);
  sqlite3_finalize(st);
  free(ids.v);
  return ret;
}

/* The file itself is damaged: every row that still reads back goes into a
 * new file, which then replaces the old one, and s is reopened on it. */
static int verify_rebuild(cache_store *s, cache_verify_report *rep, char *err, size_t errlen) {
  if (s->memory) {
    cache_seterr(err, errlen, "repair: an in-memory store cannot be rebuilt");
    return CACHE_ERR;
  }
  size_t len = strlen(s->path) + 16;
  char *tmp = malloc(len);
  if (!tmp) {
    cache_seterr(err, errlen, "out of memory");
    return CACHE_ERR;
  }
  snprintf(tmp, len, "%s.rebuild", s->path);
  /* A rebuild that died half way left these: they are not ours to keep. */
  int ret = CACHE_OK;
  if (unlink(tmp) != 0 && errno != ENOENT) {
    cache_seterr(err, errlen, "repair: cannot remove %s: %s", tmp, strerror(errno));
    ret = CACHE_ERR;
  }
  if (ret == CACHE_OK) ret = cache_unlink_sidecars(tmp, err, errlen);
  cache_store *n = NULL;
  if (ret == CACHE_OK) ret = cache_store_open(tmp, CACHE_OPEN_ROLLBACK, &n, err, errlen);
  int64_t found = 0, copied = 0;
  if (ret == CACHE_OK) {
    cache_lock(n);
    ret = rebuild_copy(s, n, &found, &copied, err, errlen);
    cache_unlock(n);
  }
  cache_store_close(n);
  /* The new file gets the old one's mode: a shared or shipped cache stays so. */
  struct stat st;
  if (ret == CACHE_OK && stat(s->path, &st) == 0 && chmod(tmp, st.st_mode & 0777) != 0) {
    cache_seterr(err, errlen, "repair: chmod %s: %s", tmp, strerror(errno));
    ret = CACHE_ERR;
  }
  if (ret != CACHE_OK) {
    unlink(tmp);
    free(tmp);
    return ret;
  }
  /* Closed before the swap, and the old file's -wal and -shm removed: SQLite
   * would apply that WAL to the new file. */
  cache_rollback(s);
  cache_disconnect(s);
  ret = cache_unlink_sidecars(s->path, err, errlen);
  if (ret == CACHE_OK && rename(tmp, s->path) != 0) {
    cache_seterr(err, errlen, "repair: cannot rename %s to %s: %s", tmp, s->path,
                 strerror(errno));
    ret = CACHE_ERR;
  }
  if (ret != CACHE_OK) unlink(tmp);
  free(tmp);
  char err2[512] = "";
  int rc = cache_reconnect(s, err2, sizeof err2);
  if (ret == CACHE_OK && rc != CACHE_OK) {
    cache_seterr(err, errlen, "repair: reopening after the rebuild: %s", err2);
    ret = rc;
  }
  if (ret != CACHE_OK) return ret;
  if (found > rep->rows) rep->rows = found;
  rep->bad_rows = found - copied;
  rep->repaired = found - copied + 1; /* the rows left behind, and the rebuild */
  note(rep, "rebuilt: %lld of %lld rows kept", (long long)copied, (long long)found);
  return CACHE_OK;
}

int cache_store_verify(cache_store *s, int repair, cache_verify_report *rep, char *err,
                       size_t errlen) {
  if (!s || !rep) {
    cache_seterr(err, errlen, "verify: NULL argument");
    return CACHE_ERR;
  }
  memset(rep, 0, sizeof *rep);
  if (repair && !cache_writable(s, "repair", err, errlen)) return CACHE_ERR;
  cache_lock(s);
  rowids bad = {0};
  int damaged = 0;
  /* Repair holds the write lock from the check to the fix: the rows it
   * deletes are the rows it checked. */
  int ret = cache_exec(s, repair ? "BEGIN IMMEDIATE" : "BEGIN", "verify: begin", err, errlen);
  if (ret == CACHE_OK) ret = verify_integrity(s, rep, err, errlen);
  if (ret == CACHE_OK) ret = verify_rows(s, rep, &bad, &damaged, err, errlen);
  if (ret == CACHE_OK && !rep->integrity_ok) damaged = 1;
  if (ret == CACHE_OK && repair && damaged) {
    ret = verify_rebuild(s, rep, err, errlen); /* ends the transaction */
  } else if (ret == CACHE_OK && repair && bad.n > 0) {
    ret = verify_delete(s, &bad, &rep->repaired, err, errlen);
    if (ret == CACHE_OK) ret = cache_exec(s, "COMMIT", "repair: commit", err, errlen);
    if (ret != CACHE_OK) rep->repaired = 0;
    if (ret == CACHE_OK) ret = cache_checkpoint(s, err, errlen);
  }
  cache_rollback(s);
  cache_unlock(s);
  free(bad.v);
  return ret;
}
