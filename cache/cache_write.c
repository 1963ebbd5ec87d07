/* cache_write.c: writing the store: a compiled binary put (its claim released in the
 * same transaction), hit counts touched, WAL checkpoints. */
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

int cache_writable(cache_store *s, const char *what, char *err, size_t errlen) {
  if (!s) {
    cache_seterr(err, errlen, "%s: NULL store", what);
    return 0;
  }
  if (s->readonly) {
    cache_seterr(err, errlen, "%s: %s is opened read-only", what, s->path);
    return 0;
  }
  return 1;
}

/* Best effort, and never the caller's failure: it runs after a commit, whose
 * rows are in the WAL and read back from there whatever happens here. A
 * checkpoint that fails (BUSY: a reader or another checkpointer in the way;
 * FULL: no room to grow the main file) leaves the frames for the next one;
 * reporting it as an error made a stored row count as a failed store. */
int cache_checkpoint(cache_store *s, char *err, size_t errlen) {
  (void)err, (void)errlen;
  int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  if (rc != SQLITE_OK) s->last_rc = rc;
  return CACHE_OK;
}

int cache_store_put(cache_store *s, const cache_record *rec, char *err, size_t errlen) {
  if (!cache_writable(s, "put", err, errlen)) return CACHE_ERR;
  if (!rec || !rec->op || !rec->key || !rec->arch || !rec->compiler || !rec->options ||
      !rec->entry || !rec->binary || rec->bytes == 0) {
    cache_seterr(err, errlen, "put: a required field is NULL or the binary is empty");
    return CACHE_ERR;
  }
  uint64_t sum = cache_row_checksum(rec->hash, rec->key_hash, rec->arch, rec->entry, rec->binary,
                                    rec->bytes);
  cache_lock(s);
  sqlite3_stmt *st = cache_stmt(s, ST_PUT, err, errlen);
  sqlite3_stmt *unclaim = st ? cache_stmt(s, ST_PUT_UNCLAIM, err, errlen) : NULL;
  int ret = unclaim ? cache_exec(s, "BEGIN IMMEDIATE", "put: begin", err, errlen) : CACHE_ERR;
  if (ret == CACHE_OK) {
    int rc = sqlite3_bind_blob(st, 1, rec->hash, 16, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 2, rec->key_hash, 16, SQLITE_STATIC);
    const char *texts[] = {rec->op, rec->key, rec->arch, rec->compiler, rec->options, rec->entry};
    for (int i = 0; i < 6 && rc == SQLITE_OK; i++)
      rc = sqlite3_bind_text(st, 3 + i, texts[i], -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 9, (sqlite3_int64)rec->bytes);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 10, (sqlite3_int64)sum);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(st, 11, rec->compile_ms);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 12, cache_now());
    if (rc == SQLITE_OK)
      rc = sqlite3_bind_text(st, 13, rec->templates ? rec->templates : "", -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
      rc = sqlite3_bind_text(st, 14, rec->abi ? rec->abi : "", -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
      rc = rec->source ? sqlite3_bind_text(st, 15, rec->source, -1, SQLITE_STATIC)
                       : sqlite3_bind_null(st, 15);
    if (rc == SQLITE_OK) rc = sqlite3_bind_blob64(st, 16, rec->binary, rec->bytes, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) ret = cache_sqerr(s, rc, "put", err, errlen);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    /* The binary and the end of the claim on its key commit together: a
     * waiter sees either the claim or the row, never neither. */
    if (ret == CACHE_OK) {
      rc = sqlite3_bind_blob(unclaim, 1, rec->key_hash, 16, SQLITE_STATIC);
      if (rc == SQLITE_OK) rc = sqlite3_step(unclaim);
      if (rc != SQLITE_DONE) ret = cache_sqerr(s, rc, "put: releasing the claim", err, errlen);
      cache_stmt_done(unclaim);
    }
    if (ret == CACHE_OK) ret = cache_exec(s, "COMMIT", "put: commit", err, errlen);
    if (ret != CACHE_OK) cache_rollback(s);
  }
  if (ret == CACHE_OK) ret = cache_checkpoint(s, err, errlen);
  cache_unlock(s);
  return ret;
}

int cache_store_touch(cache_store *s, const uint8_t (*hashes)[16], int n, char *err,
                      size_t errlen) {
  if (!cache_writable(s, "touch", err, errlen)) return CACHE_ERR;
  if (n < 0 || (n > 0 && !hashes)) {
    cache_seterr(err, errlen, "touch: bad hash array");
    return CACHE_ERR;
  }
  if (n == 0) return CACHE_OK;
  int64_t now = cache_now();
  cache_lock(s);
  sqlite3_stmt *st = cache_stmt(s, ST_TOUCH, err, errlen);
  int ret = st ? cache_exec(s, "BEGIN IMMEDIATE", "touch: begin", err, errlen) : CACHE_ERR;
  for (int i = 0; i < n && ret == CACHE_OK; i++) {
    int rc = sqlite3_bind_blob(st, 1, hashes[i], 16, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, now);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) ret = cache_sqerr(s, rc, "touch", err, errlen);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
  if (ret == CACHE_OK) ret = cache_exec(s, "COMMIT", "touch: commit", err, errlen);
  if (ret != CACHE_OK) cache_rollback(s);
  if (ret == CACHE_OK) ret = cache_checkpoint(s, err, errlen);
  cache_unlock(s);
  return ret;
}
