/* cache_evict.c: taking rows out of the store and giving the space back:
 * deletion by op/arch, least-recently-used eviction to a size cap, stale rows. */
#include <stdio.h>

#include "cache_internal.h"
#include "cache_ops.h"

/* Runs one DELETE whose parameters ?1..?n are texts (NULL binds NULL), then
 * reclaims the freed pages in the same transaction, so that the file
 * shrinks at once or not at all; the checkpoint after the commit is what
 * truncates the main file in WAL mode. */
int cache_delete_where(cache_store *s, const char *what, const char *sql,
                       const char *const *texts, int ntexts, int64_t *removed, char *err,
                       size_t errlen) {
  if (removed) *removed = 0;
  if (!cache_writable(s, what, err, errlen)) return CACHE_ERR;
  cache_lock(s);
  sqlite3_stmt *st = NULL;
  int64_t n = 0;
  int ret = cache_exec(s, "BEGIN IMMEDIATE", what, err, errlen);
  if (ret == CACHE_OK) {
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    for (int i = 0; i < ntexts && rc == SQLITE_OK; i++)
      rc = texts[i] ? sqlite3_bind_text(st, i + 1, texts[i], -1, SQLITE_STATIC)
                    : sqlite3_bind_null(st, i + 1);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc != SQLITE_DONE)
      ret = cache_sqerr(s, rc, what, err, errlen);
    else
      n = sqlite3_changes64(s->db);
    if (ret == CACHE_OK)
      ret = cache_exec(s, "PRAGMA incremental_vacuum", "incremental_vacuum", err, errlen);
    if (ret == CACHE_OK) ret = cache_exec(s, "COMMIT", "commit", err, errlen);
    if (ret != CACHE_OK) {
      cache_rollback(s);
      n = 0;
    }
  }
  sqlite3_finalize(st);
  if (ret == CACHE_OK) ret = cache_checkpoint(s, err, errlen);
  cache_unlock(s);
  if (removed) *removed = n;
  return ret;
}

int cache_store_delete(cache_store *s, const char *op, const char *arch, int64_t *removed,
                       char *err, size_t errlen) {
  const char *texts[2] = {op, arch};
  return cache_delete_where(s, "delete", "DELETE FROM kernels" CACHE_FILTER_SQL, texts, 2,
                            removed, err, errlen);
}

int cache_store_reset(cache_store *s, int64_t *removed, char *err, size_t errlen) {
  if (removed) *removed = 0;
  if (!cache_writable(s, "clear", err, errlen)) return CACHE_ERR;
  if (s->memory) return cache_store_delete(s, NULL, NULL, removed, err, errlen);
  /* An empty store in memory: creating it needs no disk, and copying its
   * few pages over the file's needs at most a few pages of journal. */
  cache_store *e = NULL;
  int ret = cache_store_open(":memory:", 0, &e, err, errlen);
  if (ret != CACHE_OK) return ret;
  cache_lock(s);
  int64_t n = 0;
  /* The count is for the report only: a damaged file may not give it. */
  if (cache_int_query(s, "SELECT count(*) FROM kernels", "count", &n, NULL, NULL, 0) != CACHE_OK)
    n = 0;
  ret = cache_store_replace_from(s, e, NULL, NULL, err, errlen);
  if (ret == CACHE_OK) {
    char err2[512];
    cache_disconnect(s);
    ret = cache_reconnect(s, err2, sizeof err2);
    if (ret != CACHE_OK) cache_seterr(err, errlen, "clear: reopening: %s", err2);
  }
  cache_unlock(s);
  cache_store_close(e);
  if (removed && ret == CACHE_OK) *removed = n;
  return ret;
}

int cache_store_remove(cache_store *s, const uint8_t hash[16], char *err, size_t errlen) {
  char hex[33];
  cache_hash_hex(hash, hex);
  const char *texts[1] = {hex};
  int64_t n = 0;
  return cache_delete_where(s, "remove", "DELETE FROM kernels WHERE hex(hash) = upper(?1)", texts,
                            1, &n, err, errlen);
}

int cache_store_remove_stale(cache_store *s, const char *nvrtc, const char *hiprtc,
                             const char *templates, const char *abi, int64_t *removed,
                             char *err, size_t errlen) {
  const char *texts[4] = {nvrtc, hiprtc, templates, abi};
  /* GLOB, not LIKE: case-sensitive, and '_' is no wildcard. */
  return cache_delete_where(s, "remove stale",
                            "DELETE FROM kernels WHERE"
                            " (?1 IS NOT NULL AND arch GLOB 'sm_*' AND compiler <> ?1)"
                            " OR (?2 IS NOT NULL AND arch GLOB 'gfx*' AND compiler <> ?2)"
                            " OR (?3 IS NOT NULL AND templates <> ?3)"
                            " OR (?4 IS NOT NULL AND abi <> ?4)",
                            texts, 4, removed, err, errlen);
}

/* Rows examined per write transaction: other processes' puts wait for at
 * most one batch. */
enum { EVICT_BATCH = 64 };

/* The file's size once the free pages are given back, inside the current
 * write transaction. */
static int evict_measure(cache_store *s, int64_t *size, char *err, size_t errlen) {
  int ret = cache_exec(s, "PRAGMA incremental_vacuum", "evict: incremental_vacuum", err, errlen);
  return ret == CACHE_OK ? cache_file_bytes(s, size, err, errlen) : ret;
}

/* One transaction: deletes least-recently-used rows one at a time, measuring
 * after each, so that no row goes that the cap did not require. *more is
 * set when the batch ended still over the cap with rows left. */
static int evict_batch(cache_store *s, int64_t max_bytes, int64_t *evicted, int *more, char *err,
                       size_t errlen) {
  int64_t rowids[EVICT_BATCH], size = 0, n = 0;
  int k = 0;
  sqlite3_stmt *st = NULL;
  *more = 0;
  int ret = cache_exec(s, "BEGIN IMMEDIATE", "evict: begin", err, errlen);
  if (ret == CACHE_OK) ret = evict_measure(s, &size, err, errlen);
  if (ret == CACHE_OK && size > max_bytes) {
    /* created breaks ties between rows used in the same second (or never),
     * rowid makes the order total. */
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT rowid FROM kernels ORDER BY last_used, created, rowid"
                                " LIMIT ?1",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(st, 1, EVICT_BATCH);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW && k < EVICT_BATCH) {
      rowids[k++] = sqlite3_column_int64(st, 0);
      rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (rc != SQLITE_DONE && rc != SQLITE_OK)
      ret = cache_sqerr(s, rc, "evict: select", err, errlen);
    if (ret == CACHE_OK && k > 0) {
      rc = sqlite3_prepare_v2(s->db, "DELETE FROM kernels WHERE rowid = ?1", -1, &st, NULL);
      if (rc != SQLITE_OK) ret = cache_sqerr(s, rc, "evict: prepare", err, errlen);
    }
    for (int i = 0; ret == CACHE_OK && i < k && size > max_bytes; i++) {
      rc = sqlite3_bind_int64(st, 1, rowids[i]);
      if (rc == SQLITE_OK) rc = sqlite3_step(st);
      cache_stmt_done(st);
      if (rc != SQLITE_DONE) {
        ret = cache_sqerr(s, rc, "evict: delete", err, errlen);
        break;
      }
      n += sqlite3_changes64(s->db);
      ret = evict_measure(s, &size, err, errlen);
    }
    sqlite3_finalize(st);
    *more = ret == CACHE_OK && size > max_bytes && k == EVICT_BATCH;
  }
  if (ret == CACHE_OK) ret = cache_exec(s, "COMMIT", "evict: commit", err, errlen);
  if (ret != CACHE_OK) {
    cache_rollback(s);
    *more = 0;
    n = 0;
  }
  *evicted += n;
  return ret;
}

int cache_store_evict(cache_store *s, int64_t max_bytes, int64_t *evicted, char *err,
                      size_t errlen) {
  if (evicted) *evicted = 0;
  if (!cache_writable(s, "evict", err, errlen)) return CACHE_ERR;
  if (max_bytes < 0) {
    cache_seterr(err, errlen, "evict: negative size cap %lld", (long long)max_bytes);
    return CACHE_ERR;
  }
  cache_lock(s);
  /* Called after every put: first a read, no write lock. The size before
   * the vacuum bounds the size after it. */
  int64_t size = 0, n = 0;
  int ret = cache_file_bytes(s, &size, err, errlen);
  int more = ret == CACHE_OK && size > max_bytes;
  while (ret == CACHE_OK && more) ret = evict_batch(s, max_bytes, &n, &more, err, errlen);
  /* Even with nothing deleted a vacuum may have shrunk the file. */
  if (ret == CACHE_OK && size > max_bytes) ret = cache_checkpoint(s, err, errlen);
  cache_unlock(s);
  if (evicted) *evicted = n;
  return ret;
}

int cache_store_limit_pages(cache_store *s, int64_t max_pages, char *err, size_t errlen) {
  if (!s || max_pages <= 0) {
    cache_seterr(err, errlen, "limit pages: NULL store or a limit below 1");
    return CACHE_ERR;
  }
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA max_page_count=%lld", (long long)max_pages);
  int64_t now_max = 0;
  cache_lock(s);
  int ret = cache_int_query(s, sql, "max_page_count", &now_max, NULL, err, errlen);
  cache_unlock(s);
  /* SQLite answers with the limit in force, never below the current size. */
  if (ret == CACHE_OK && now_max != max_pages) {
    cache_seterr(err, errlen, "limit pages: %s already has %lld pages", s->path,
                 (long long)now_max);
    ret = CACHE_ERR;
  }
  return ret;
}
