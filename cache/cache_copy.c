/* cache_copy.c: moving rows between cache files (fleet export and import, the
 * rebuild of a damaged file) and sealing a file to be shipped read-only. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cache_internal.h"
#include "cache_ops.h"
#include "cache_tactics.h"

/* Rows or binary bytes per transaction of a copy: a large import neither
 * grows the WAL without bound nor holds the write lock for its duration. */
enum { COPY_BATCH_ROWS = 256 };
#define COPY_BATCH_BYTES ((int64_t)64 << 20)

static const char *const SQL_INSERT =
    "INSERT OR IGNORE INTO kernels(" REC_COLS ")"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)";

/* Verbatim, created, last_used and hits included: an imported kernel keeps
 * its history. bind_value copies, so src may step on afterwards. */
int cache_copy_row(cache_store *to, sqlite3_stmt *src, int *inserted, char *err, size_t errlen) {
  *inserted = 0;
  sqlite3_stmt *ins = NULL;
  int rc = sqlite3_prepare_v2(to->db, SQL_INSERT, -1, &ins, NULL);
  for (int i = 0; i < REC_NCOLS && rc == SQLITE_OK; i++)
    rc = sqlite3_bind_value(ins, i + 1, sqlite3_column_value(src, i));
  if (rc == SQLITE_OK) rc = sqlite3_step(ins);
  sqlite3_finalize(ins);
  if (rc != SQLITE_DONE) return cache_sqerr(to, rc, "copying a row", err, errlen);
  *inserted = sqlite3_changes(to->db) == 1;
  return CACHE_OK;
}

/* Whether `to` has the row already: then its binary is not even read. */
static int copy_exists(cache_store *to, sqlite3_stmt *has, const void *hash, int *exists,
                       char *err, size_t errlen) {
  int rc = sqlite3_bind_blob(has, 1, hash, 16, SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_step(has);
  cache_stmt_done(has);
  *exists = rc == SQLITE_ROW;
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? CACHE_OK
                                               : cache_sqerr(to, rc, "copy: lookup", err, errlen);
}

/* Appends one line to the report's detail while it has room. */
#define copy_note(rep, ...) cache_note((rep)->detail, sizeof (rep)->detail, __VA_ARGS__)

/* The walk over `from`'s rows, in `to`'s batches of write transactions. */
static int copy_rows(cache_store *from, cache_store *to, const char *op, const char *arch,
                     int64_t max_row_bytes, cache_copy_report *rep, char *err, size_t errlen) {
  sqlite3_stmt *sel = NULL, *has = NULL;
  int rc = sqlite3_prepare_v2(from->db,
                              "SELECT " REC_COLS " FROM kernels" CACHE_FILTER_SQL,
                              -1, &sel, NULL);
  if (rc == SQLITE_OK) rc = cache_bind_filter(sel, op, arch);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(sel);
    return cache_sqerr(from, rc, "copy: reading", err, errlen);
  }
  rc = sqlite3_prepare_v2(to->db, "SELECT 1 FROM kernels WHERE hash = ?1", -1, &has, NULL);
  int ret = rc == SQLITE_OK ? CACHE_OK : cache_sqerr(to, rc, "copy: prepare", err, errlen);
  int64_t rows = 0, bytes = 0;
  int in_txn = 0;
  while (ret == CACHE_OK) {
    rc = sqlite3_step(sel);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      ret = cache_sqerr(from, rc, "copy: reading", err, errlen);
      break;
    }
    if (!in_txn) {
      if ((ret = cache_exec(to, "BEGIN IMMEDIATE", "copy: begin", err, errlen))) break;
      in_txn = 1;
    }
    int exists = 0, inserted = 0;
    const void *hash = sqlite3_column_blob(sel, 0);
    int hash_ok = hash && sqlite3_column_bytes(sel, 0) == 16;
    if (hash_ok && (ret = copy_exists(to, has, hash, &exists, err, errlen))) break;
    char why[256] = "", hex[33] = "?";
    if (hash_ok) cache_hash_hex(hash, hex);
    int64_t row_bytes = sqlite3_column_int64(sel, 8);
    if (exists) {
      rep->present++;
    } else if (!cache_row_judge(from, sel, why, sizeof why)) {
      /* A damaged or mislabelled row is left behind: the destination must not inherit it. */
      rep->refused++;
      copy_note(rep, "kernel %s refused: %s", hex, why);
    } else if (max_row_bytes > 0 && row_bytes > max_row_bytes) {
      rep->refused++;
      copy_note(rep, "kernel %s refused: its %lld-byte binary is larger than the cache's cap of "
                "%lld bytes", hex, (long long)row_bytes, (long long)max_row_bytes);
    } else {
      if ((ret = cache_copy_row(to, sel, &inserted, err, errlen))) break;
      bytes += row_bytes;
      if (inserted) rep->copied++;
      else rep->present++; /* written by another process meanwhile */
    }
    if (++rows % COPY_BATCH_ROWS == 0 || bytes >= COPY_BATCH_BYTES) {
      if ((ret = cache_exec(to, "COMMIT", "copy: commit", err, errlen))) break;
      in_txn = 0;
      bytes = 0;
      if ((ret = cache_checkpoint(to, err, errlen))) break;
    }
  }
  if (in_txn && ret == CACHE_OK) ret = cache_exec(to, "COMMIT", "copy: commit", err, errlen);
  if (ret != CACHE_OK) cache_rollback(to);
  sqlite3_finalize(has);
  sqlite3_finalize(sel);
  return ret;
}

/* The tactics of `from` matching op and arch, each checked and merged into `to`, in one
 * write transaction of `to` (tactic rows are small and few). */
static int copy_tactics(cache_store *from, cache_store *to, const char *op, const char *arch,
                        cache_copy_report *rep, char *err, size_t errlen) {
  sqlite3_stmt *sel = NULL;
  int rc = sqlite3_prepare_v2(from->db, "SELECT " TACTIC_COLS " FROM tactics" CACHE_FILTER_SQL,
                              -1, &sel, NULL);
  if (rc == SQLITE_OK) rc = cache_bind_filter(sel, op, arch);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(sel);
    return cache_sqerr(from, rc, "copy: reading tactics", err, errlen);
  }
  int ret = cache_exec(to, "BEGIN IMMEDIATE", "copy: begin", err, errlen);
  while (ret == CACHE_OK && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
    cache_tactic t;
    char why[256];
    if (cache_tactic_read(sel, &t, why, sizeof why) != 0) {
      char hex[33] = "?";
      const void *h = sqlite3_column_blob(sel, 0);
      if (h && sqlite3_column_bytes(sel, 0) == 16) cache_hash_hex(h, hex);
      rep->tactics_refused++;
      copy_note(rep, "tactic %s refused: %s", hex, why);
      continue;
    }
    int outcome = 0;
    ret = cache_tactic_merge_into(to, &t, &outcome, err, errlen);
    if (ret != CACHE_OK) break;
    if (outcome == CACHE_TACTIC_NEW) rep->tactics_copied++;
    else if (outcome == CACHE_TACTIC_MERGED) rep->tactics_merged++;
    else rep->tactics_present++;
  }
  if (ret == CACHE_OK && rc != SQLITE_DONE) ret = cache_sqerr(from, rc, "copy: reading tactics", err, errlen);
  if (ret == CACHE_OK) ret = cache_exec(to, "COMMIT", "copy: commit", err, errlen);
  if (ret != CACHE_OK) cache_rollback(to);
  sqlite3_finalize(sel);
  return ret;
}

int cache_store_copy_checked(cache_store *from, cache_store *to, const char *op,
                             const char *arch, int64_t max_row_bytes, cache_copy_report *rep,
                             char *err, size_t errlen) {
  cache_copy_report local;
  if (!rep) rep = &local;
  memset(rep, 0, sizeof *rep);
  if (!from) {
    cache_seterr(err, errlen, "copy: NULL source");
    return CACHE_ERR;
  }
  if (!cache_writable(to, "copy", err, errlen)) return CACHE_ERR;
  if (from == to) {
    cache_seterr(err, errlen, "copy: source and destination are the same store");
    return CACHE_ERR;
  }
  /* In address order, so two copies in opposite directions cannot deadlock. */
  cache_store *first = from < to ? from : to, *second = from < to ? to : from;
  cache_lock(first);
  cache_lock(second);
  /* One read transaction on the source: the copy is of one snapshot. */
  int ret = cache_exec(from, "BEGIN", "copy: begin", err, errlen);
  if (ret == CACHE_OK) {
    ret = copy_rows(from, to, op, arch, max_row_bytes, rep, err, errlen);
    if (ret == CACHE_OK) ret = copy_tactics(from, to, op, arch, rep, err, errlen);
    cache_rollback(from);
  }
  if (ret == CACHE_OK) ret = cache_checkpoint(to, err, errlen);
  cache_unlock(second);
  cache_unlock(first);
  return ret;
}

int cache_store_copy(cache_store *from, cache_store *to, const char *op, const char *arch,
                     int64_t *copied, int64_t *skipped, char *err, size_t errlen) {
  cache_copy_report rep;
  int ret = cache_store_copy_checked(from, to, op, arch, 0, &rep, err, errlen);
  if (copied) *copied = rep.copied;
  if (skipped) *skipped = rep.present + rep.refused;
  return ret;
}

int cache_store_seal(cache_store *s, char *err, size_t errlen) {
  if (!cache_writable(s, "seal", err, errlen)) return CACHE_ERR;
  cache_lock(s);
  int ret = CACHE_OK;
  if (!s->memory) {
    /* Everything into the main file; a no-op on a rollback-journal file. */
    int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    if (rc != SQLITE_OK)
      ret = cache_sqerr(s, rc, "seal: checkpoint (is another process using the file?)", err,
                        errlen);
    /* Leaving WAL deletes -wal and -shm only when they are not kept. */
    int persist = 0;
    if (ret == CACHE_OK &&
        (rc = sqlite3_file_control(s->db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist)) !=
            SQLITE_OK)
      ret = cache_sqerr(s, rc, "seal: persist_wal", err, errlen);
    sqlite3_stmt *st = NULL;
    if (ret == CACHE_OK) {
      rc = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode=DELETE", -1, &st, NULL);
      if (rc == SQLITE_OK) rc = sqlite3_step(st);
      /* SQLite answers with the mode in force: still "wal" when another
       * connection holds the file open. */
      const char *mode = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
      if (rc != SQLITE_ROW)
        ret = cache_sqerr(s, rc, "seal: leaving WAL (is another process using the file?)", err,
                          errlen);
      else if (!mode || strcmp(mode, "delete") != 0) {
        cache_seterr(err, errlen, "seal: %s stays in journal mode %s (another process has it open)",
                     s->path, mode ? mode : "?");
        ret = CACHE_ERR;
      }
      sqlite3_finalize(st);
    }
    if (ret == CACHE_OK) {
      s->rollback = 1; /* a reconnect keeps the rollback journal */
    } else {
      persist = 1; /* still in WAL: keep its files between processes as before */
      (void)sqlite3_file_control(s->db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    }
  }
  if (ret == CACHE_OK) ret = cache_exec(s, "VACUUM", "seal: vacuum", err, errlen);
  cache_unlock(s);
  return ret;
}
