/* cache_tactic_verify.c: the tactics table's part of verify and repair: every row read
 * back and checked (cache_tactic_check), bad ones deleted, good ones carried into a
 * rebuilt file. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"
#include "cache_ops.h"
#include "cache_tactics.h"

void cache_tactic_bad_free(cache_tactic_bad *b) {
  for (size_t i = 0; i < b->n; i++) sqlite3_value_free(b->v[i]);
  free(b->v);
  memset(b, 0, sizeof *b);
}

int cache_tactic_verify_rows(cache_store *s, cache_verify_report *rep, cache_tactic_bad *bad,
                             int *damaged, char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, "SELECT " TACTIC_COLS " FROM tactics", -1, &st, NULL);
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    rc = SQLITE_OK;
    rep->rows++;
    rep->tactic_rows++;
    cache_tactic t;
    char why[256];
    if (cache_tactic_read(st, &t, why, sizeof why) == 0) continue;
    rep->bad_rows++;
    rep->tactic_bad_rows++;
    char hex[33] = "?";
    const void *h = sqlite3_column_blob(st, 0);
    if (h && sqlite3_column_bytes(st, 0) == 16) cache_hash_hex(h, hex);
    cache_note(rep->detail, sizeof rep->detail, "tactic %s: %s", hex, why);
    /* The key as stored, whatever it holds, for the delete. */
    if (bad->n == bad->cap) {
      size_t cap = bad->cap ? 2 * bad->cap : 16;
      sqlite3_value **v = realloc(bad->v, cap * sizeof *v);
      if (!v) {
        rc = SQLITE_NOMEM;
        break;
      }
      bad->v = v;
      bad->cap = cap;
    }
    if (!(bad->v[bad->n] = sqlite3_value_dup(sqlite3_column_value(st, 0)))) {
      rc = SQLITE_NOMEM;
      break;
    }
    bad->n++;
  }
  if (rc == SQLITE_DONE) rc = SQLITE_OK;
  if (rc != SQLITE_OK && cache_is_damage(rc)) {
    *damaged = 1;
    rep->bad_rows++;
    rep->tactic_bad_rows++;
    cache_note(rep->detail, sizeof rep->detail, "tactics: reading stopped after %lld rows: %s",
               (long long)rep->tactic_rows, sqlite3_errmsg(s->db));
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc == SQLITE_OK ? CACHE_OK : cache_sqerr(s, rc, "verify: reading tactics", err, errlen);
}

int cache_tactic_verify_delete(cache_store *s, const cache_tactic_bad *bad, int64_t *deleted,
                               char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, "DELETE FROM tactics WHERE hash = ?1", -1, &st, NULL);
  for (size_t i = 0; i < bad->n && rc == SQLITE_OK; i++) {
    rc = sqlite3_bind_value(st, 1, bad->v[i]);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
      *deleted += sqlite3_changes(s->db);
      rc = sqlite3_reset(st);
    }
  }
  sqlite3_finalize(st);
  return rc == SQLITE_OK ? CACHE_OK
                         : cache_sqerr(s, rc, "repair: deleting bad tactics", err, errlen);
}

int cache_tactic_rebuild_copy(cache_store *s, cache_store *n, int64_t *found, int64_t *copied,
                              char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, "SELECT " TACTIC_COLS " FROM tactics", -1, &st, NULL);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(st);
    /* A tactics table the damage made unreadable: its rows are lost to it. */
    return cache_is_damage(rc) || (rc & 0xff) == SQLITE_ERROR ? CACHE_OK
                                                        : cache_sqerr(s, rc, "rebuild: tactics", err, errlen);
  }
  int ret = cache_exec(n, "BEGIN IMMEDIATE", "rebuild: begin", err, errlen);
  while (ret == CACHE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    (*found)++;
    cache_tactic t;
    char why[256];
    int outcome;
    if (cache_tactic_read(st, &t, why, sizeof why) != 0) continue; /* lost to the damage */
    ret = cache_tactic_merge_into(n, &t, &outcome, err, errlen);
    if (ret == CACHE_OK) (*copied)++;
  }
  if (ret == CACHE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW && !cache_is_damage(rc))
    ret = cache_sqerr(s, rc, "rebuild: reading tactics", err, errlen);
  if (ret == CACHE_OK) ret = cache_exec(n, "COMMIT", "rebuild: commit", err, errlen);
  if (ret != CACHE_OK) cache_rollback(n);
  sqlite3_finalize(st);
  return ret;
}
