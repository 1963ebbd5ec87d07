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
#define note(rep, ...) cache_note((rep)->detail, sizeof (rep)->detail, __VA_ARGS__)

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
  if (rc == SQLITE_DONE || cache_is_damage(rc)) {
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
  int rc = sqlite3_prepare_v2(s->db, "SELECT " REC_COLS ", rowid FROM kernels", -1, &st, NULL);
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    rc = SQLITE_OK;
    rep->rows++;
    char why[256];
    if (cache_row_judge(s, st, why, sizeof why)) continue;
    rep->bad_rows++;
    char hex[33] = "?";
    const void *hash = sqlite3_column_blob(st, 0);
    if (hash && sqlite3_column_bytes(st, 0) == 16) cache_hash_hex(hash, hex);
    note(rep, "kernel %s: %s", hex, why);
    if (!rowids_add(bad, sqlite3_column_int64(st, REC_NCOLS))) {
      rc = SQLITE_NOMEM;
      break;
    }
  }
  if (rc == SQLITE_DONE || rc == SQLITE_OK) {
    rc = SQLITE_OK;
  } else if (cache_is_damage(rc)) {
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
  if (rc == SQLITE_DONE || cache_is_damage(rc)) return CACHE_OK;
  if (rc != SQLITE_NOMEM) return cache_sqerr(s, rc, "rebuild: listing rows", err, errlen);
  cache_seterr(err, errlen, "out of memory");
  return CACHE_ERR;
}

/* Copies every row of s that reads back whole into the fresh store n; each
 * is fetched by rowid, so one damaged leaf costs only its own rows. Then the
 * tactics that read back whole. */
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
    if (rc == SQLITE_ROW && cache_row_judge(s, st, NULL, 0)) {
      ret = cache_copy_row(n, st, &inserted, err, errlen);
      *copied += inserted;
    } else if (rc != SQLITE_ROW && rc != SQLITE_DONE && !cache_is_damage(rc)) {
      ret = cache_sqerr(s, rc, "rebuild: reading a row", err, errlen);
    }
    /* A row that reads back damaged, or not at all, is lost to the damage. */
    cache_stmt_done(st);
  }
  if (ret == CACHE_OK) ret = cache_exec(n, "COMMIT", "rebuild: commit", err, errlen);
  if (ret != CACHE_OK) cache_rollback(n);
  sqlite3_finalize(st);
  free(ids.v);
  if (ret == CACHE_OK) ret = cache_tactic_rebuild_copy(s, n, found, copied, err, errlen);
  return ret;
}

/* The journal mode in force on s's connection: 1 for WAL. */
static int is_wal(cache_store *s) {
  sqlite3_stmt *st = NULL;
  int wal = 0;
  if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    const char *m = (const char *)sqlite3_column_text(st, 0);
    wal = m && strcmp(m, "wal") == 0;
  }
  sqlite3_finalize(st);
  return wal;
}

/* A second, read-only connection to s's file, as a store that rebuild_copy
 * can read (the same path and row check; no statements, no mutex use). */
static int open_reader(cache_store *s, cache_store *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  r->path = s->path;
  r->readonly = 1;
  r->row_check = s->row_check;
  int rc = sqlite3_open_v2(s->path, &r->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_busy_timeout(r->db, 10000);
  if (rc != SQLITE_OK) return cache_sqerr(r, rc, "repair: a second connection", err, errlen);
  return CACHE_OK;
}

int cache_store_replace_from(cache_store *s, cache_store *src, int (*fill)(void *), void *user,
                             char *err, size_t errlen) {
  /* The new content is copied page by page into the file itself, through
   * s's connection and under SQLite's own write lock, so that every other
   * process with the file open keeps a valid connection and sees the new
   * content at its next transaction (replacing the file by a rename left
   * them writing into the old, unlinked one). The backup takes the write
   * lock at its first step and keeps it to the last: fill (which fills src)
   * runs in between, so that nothing another process commits meanwhile is
   * lost, and writers wait for the swap rather than write into what it
   * replaces. */
  cache_rollback(s);
  sqlite3_backup *b = sqlite3_backup_init(s->db, "main", src->db, "main");
  if (!b) return cache_sqerr(s, sqlite3_errcode(s->db), "replacing the file's content", err, errlen);
  int rc = sqlite3_backup_step(b, 0); /* takes the write lock, copies nothing */
  int ret = CACHE_OK;
  if (rc != SQLITE_OK && rc != SQLITE_DONE) {
    sqlite3_backup_finish(b);
    return cache_sqerr(s, rc, "replacing the file's content: taking the write lock", err, errlen);
  }
  if (fill && rc == SQLITE_OK) ret = fill(user);
  if (ret == CACHE_OK) {
    rc = sqlite3_backup_step(b, -1);
    if (rc != SQLITE_DONE) ret = cache_sqerr(s, rc, "replacing the file's content", err, errlen);
  }
  /* finish releases the lock; on an error it rolls the destination back. */
  int frc = sqlite3_backup_finish(b);
  if (ret == CACHE_OK && frc != SQLITE_OK)
    ret = cache_sqerr(s, frc, "replacing the file's content", err, errlen);
  if (ret == CACHE_OK) {
    /* Moves the new pages into the main file, which shrinks to their size. */
    sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  }
  return ret;
}

typedef struct rebuild_fill {
  cache_store *s, *n;
  int64_t found, copied;
  int wal;
  uint32_t counter; /* rollback journal: the file change counter the copy saw */
  char *err;
  size_t errlen;
} rebuild_fill;

enum { REBUILD_AGAIN = 2 }; /* a commit slipped in before the lock: copy again */

/* The file change counter (header bytes 24-27), which every commit in
 * rollback-journal mode increments, read through SQLite's own descriptor
 * (a descriptor of our own, once closed, would drop SQLite's POSIX locks). */
static int change_counter(cache_store *s, uint32_t *out) {
  sqlite3_file *f = NULL;
  unsigned char b[4];
  if (sqlite3_file_control(s->db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK || !f ||
      !f->pMethods || f->pMethods->xRead(f, b, 4, 24) != SQLITE_OK)
    return -1;
  *out = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
  return 0;
}

/* Under the held write lock. WAL: reads the damaged file through a second
 * connection (WAL readers do not wait for the writer) into n. Rollback
 * journal: the rows were copied before the lock (its writer excludes
 * readers); that copy stands only if no commit came in between. */
static int rebuild_fill_fn(void *user) {
  rebuild_fill *f = user;
  if (!f->wal) {
    uint32_t now = 0;
    if (change_counter(f->s, &now) != 0) {
      cache_seterr(f->err, f->errlen, "repair: cannot read the file change counter of %s",
                   f->s->path);
      return CACHE_ERR;
    }
    return now == f->counter ? CACHE_OK : REBUILD_AGAIN;
  }
  cache_store r;
  int ret = open_reader(f->s, &r, f->err, f->errlen);
  if (ret == CACHE_OK) {
    cache_lock(f->n);
    ret = rebuild_copy(&r, f->n, &f->found, &f->copied, f->err, f->errlen);
    cache_unlock(f->n);
  }
  sqlite3_close(r.db);
  return ret;
}

/* A fresh scratch store at tmp, whatever a rebuild that died half way left there. */
static int scratch_open(const char *tmp, cache_store **n, char *err, size_t errlen) {
  *n = NULL;
  if (unlink(tmp) != 0 && errno != ENOENT) {
    cache_seterr(err, errlen, "repair: cannot remove %s: %s", tmp, strerror(errno));
    return CACHE_ERR;
  }
  int ret = cache_unlink_sidecars(tmp, err, errlen);
  return ret == CACHE_OK ? cache_store_open(tmp, CACHE_OPEN_ROLLBACK, n, err, errlen) : ret;
}

/* The file itself is damaged: every row that still reads back is copied
 * into a scratch file, whose pages then replace the damaged file's in place
 * (cache_store_replace_from). Called inside verify's write transaction. */
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
  rebuild_fill f = {s, NULL, 0, 0, is_wal(s), 0, err, errlen};
  int ret = CACHE_OK;
  for (int attempt = 0; attempt < 8; attempt++) {
    f.found = f.copied = 0;
    ret = scratch_open(tmp, &f.n, err, errlen);
    if (ret == CACHE_OK && !f.wal) {
      /* Rollback journal: copied under a write transaction (other writers
       * wait), the change counter noted for rebuild_fill_fn. */
      if (attempt > 0) ret = cache_exec(s, "BEGIN IMMEDIATE", "repair: begin", err, errlen);
      if (ret == CACHE_OK && change_counter(s, &f.counter) != 0) {
        cache_seterr(err, errlen, "repair: cannot read the file change counter of %s", s->path);
        ret = CACHE_ERR;
      }
      if (ret == CACHE_OK) {
        cache_lock(f.n);
        ret = rebuild_copy(s, f.n, &f.found, &f.copied, err, errlen);
        cache_unlock(f.n);
      }
    }
    if (ret == CACHE_OK) ret = cache_store_replace_from(s, f.n, rebuild_fill_fn, &f, err, errlen);
    cache_rollback(s);
    cache_store_close(f.n);
    f.n = NULL;
    if (ret != REBUILD_AGAIN) break;
  }
  if (ret == REBUILD_AGAIN) {
    cache_seterr(err, errlen, "repair: %s kept changing under the rebuild; try again", s->path);
    ret = CACHE_ERR;
  }
  unlink(tmp);
  cache_unlink_sidecars(tmp, NULL, 0);
  free(tmp);
  if (ret != CACHE_OK) return ret;
  /* A fresh connection: nothing of the damaged file's schema or pages stays cached. */
  char err2[512] = "";
  cache_disconnect(s);
  ret = cache_reconnect(s, err2, sizeof err2);
  if (ret != CACHE_OK) {
    cache_seterr(err, errlen, "repair: reopening after the rebuild: %s", err2);
    return ret;
  }
  int64_t found = f.found, copied = f.copied;
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
  cache_tactic_bad tbad = {0};
  if (ret == CACHE_OK) ret = cache_tactic_verify_rows(s, rep, &tbad, &damaged, err, errlen);
  if (ret == CACHE_OK && !rep->integrity_ok) damaged = 1;
  if (ret == CACHE_OK && repair && damaged) {
    ret = verify_rebuild(s, rep, err, errlen); /* ends the transaction */
  } else if (ret == CACHE_OK && repair && (bad.n > 0 || tbad.n > 0)) {
    ret = verify_delete(s, &bad, &rep->repaired, err, errlen);
    if (ret == CACHE_OK) ret = cache_tactic_verify_delete(s, &tbad, &rep->repaired, err, errlen);
    if (ret == CACHE_OK) ret = cache_exec(s, "COMMIT", "repair: commit", err, errlen);
    if (ret != CACHE_OK) rep->repaired = 0;
    if (ret == CACHE_OK) ret = cache_checkpoint(s, err, errlen);
  }
  cache_rollback(s);
  cache_unlock(s);
  free(bad.v);
  cache_tactic_bad_free(&tbad);
  return ret;
}
