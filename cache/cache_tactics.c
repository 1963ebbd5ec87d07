/* cache_tactics.c: the tactics table of a store: reading rows (each checked), the merging
 * write one transaction a measurement, lookup by key, listing, show by hash prefix,
 * deletion and the count. */
#include <assert.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "cache_internal.h"
#include "cache_tactics.h"

/* One text column into dst (cap bytes): 0 when NULL, too long or holding a NUL. */
static int col_text(sqlite3_stmt *st, int col, char *dst, size_t cap) {
  const unsigned char *p = sqlite3_column_text(st, col);
  int n = sqlite3_column_bytes(st, col);
  if (!p || n < 0 || (size_t)n >= cap || memchr(p, 0, (size_t)n)) return 0;
  memcpy(dst, p, (size_t)n);
  memset(dst + n, 0, cap - (size_t)n);
  return 1;
}

/* Every field is read, a bad one left empty, so that a listing shows what is there; the
 * first problem is the reason. */
int cache_tactic_read(sqlite3_stmt *st, cache_tactic *t, char *why, size_t whylen) {
  memset(t, 0, sizeof *t);
  int bad = 0;
  const void *h = sqlite3_column_blob(st, 0);
  if (h && sqlite3_column_bytes(st, 0) == 16)
    memcpy(t->hash, h, 16);
  else
    bad = snprintf(why, whylen, "malformed hash") > 0;
  struct {
    int col;
    char *dst;
    size_t cap;
  } texts[] = {{1, t->op, sizeof t->op},           {3, t->shape, sizeof t->shape},
               {4, t->arch, sizeof t->arch},       {5, t->device, sizeof t->device},
               {7, t->driver, sizeof t->driver},   {8, t->compiler, sizeof t->compiler},
               {9, t->runtime, sizeof t->runtime}, {10, t->params, sizeof t->params},
               {14, t->runner_up, sizeof t->runner_up}, {16, t->invalid, sizeof t->invalid}};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
    if (!col_text(st, texts[i].col, texts[i].dst, texts[i].cap) && !bad++)
      snprintf(why, whylen, "column %s missing, too long or holding a NUL",
               sqlite3_column_name(st, texts[i].col));
  t->bucket = sqlite3_column_int64(st, 2);
  t->sms = sqlite3_column_int64(st, 6);
  t->valid = (int)sqlite3_column_int64(st, 11);
  t->time_us = sqlite3_column_double(st, 12);
  t->default_us = sqlite3_column_double(st, 13);
  t->runner_up_us = sqlite3_column_double(st, 15);
  t->measured = sqlite3_column_int64(st, 17);
  t->updated = sqlite3_column_int64(st, 18);
  t->samples = sqlite3_column_int64(st, 19);
  t->checksum = (uint64_t)sqlite3_column_int64(st, 20);
  return bad ? -1 : cache_tactic_check(t, 1, why, whylen);
}

int cache_tactic_bind(sqlite3_stmt *st, const cache_tactic *t) {
  int rc = sqlite3_bind_blob(st, 1, t->hash, 16, SQLITE_STATIC);
  const struct {
    int i;
    const char *s;
  } texts[] = {{2, t->op},        {4, t->shape},    {5, t->arch},    {6, t->device},
               {8, t->driver},    {9, t->compiler}, {10, t->runtime}, {11, t->params},
               {15, t->runner_up}, {17, t->invalid}};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0] && rc == SQLITE_OK; i++)
    rc = sqlite3_bind_text(st, texts[i].i, texts[i].s, -1, SQLITE_STATIC);
  const struct {
    int i;
    int64_t v;
  } ints[] = {{3, t->bucket}, {7, t->sms}, {12, t->valid}, {18, t->measured}, {19, t->updated},
              {20, t->samples}, {21, (int64_t)t->checksum}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0] && rc == SQLITE_OK; i++)
    rc = sqlite3_bind_int64(st, ints[i].i, ints[i].v);
  if (rc == SQLITE_OK) rc = sqlite3_bind_double(st, 13, t->time_us);
  if (rc == SQLITE_OK) rc = sqlite3_bind_double(st, 14, t->default_us);
  if (rc == SQLITE_OK) rc = sqlite3_bind_double(st, 16, t->runner_up_us);
  return rc;
}

/* Runs a prepared, bound INSERT OR REPLACE of row `t` on s (in its open transaction). */
static int write_row(cache_store *s, const cache_tactic *t, char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, SQL_TACTIC_REPLACE, -1, &st, NULL);
  if (rc == SQLITE_OK) rc = cache_tactic_bind(st, t);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? CACHE_OK : cache_sqerr(s, rc, "storing a tactic", err, errlen);
}

int cache_tactic_merge_into(cache_store *s, const cache_tactic *in, int *outcome, char *err,
                            size_t errlen) {
  assert(cache_locked(s));
  sqlite3_stmt *st = NULL;
  cache_tactic cur;
  int have = 0, rc = sqlite3_prepare_v2(s->db, "SELECT " TACTIC_COLS " FROM tactics WHERE hash = ?1",
                                        -1, &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 1, in->hash, 16, SQLITE_STATIC);
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    char why[256];
    /* A stored row that fails its check is no measurement to keep: replaced. */
    have = cache_tactic_read(st, &cur, why, sizeof why) == 0;
    rc = SQLITE_DONE;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return cache_sqerr(s, rc, "reading a tactic", err, errlen);
  /* Both rows passed their checks: equal checksums over every field are equal rows. */
  if (have && cur.checksum == in->checksum) {
    *outcome = CACHE_TACTIC_SAME;
    return CACHE_OK;
  }
  *outcome = have ? CACHE_TACTIC_MERGED : CACHE_TACTIC_NEW;
  if (have) {
    char why[256];
    if (cache_tactic_merge(&cur, in, why, sizeof why) != 0) {
      cache_seterr(err, errlen, "tactic of %s: %s", in->op, why);
      return CACHE_ERR;
    }
  }
  return write_row(s, have ? &cur : in, err, errlen);
}

int cache_tactic_put(cache_store *s, const cache_tactic *in, char *err, size_t errlen) {
  if (!cache_writable(s, "tactic put", err, errlen)) return CACHE_ERR;
  char why[256];
  if (!in || cache_tactic_check(in, 1, why, sizeof why) != 0) {
    cache_seterr(err, errlen, "tactic put: %s", in ? why : "NULL row");
    return CACHE_ERR;
  }
  cache_lock(s);
  /* IMMEDIATE: the read, the merge and the write under the write lock, so that
   * processes storing the same key at once each merge into the other's result. */
  int outcome, ret = cache_exec(s, "BEGIN IMMEDIATE", "tactic put: begin", err, errlen);
  if (ret == CACHE_OK) ret = cache_tactic_merge_into(s, in, &outcome, err, errlen);
  if (ret == CACHE_OK) ret = cache_exec(s, "COMMIT", "tactic put: commit", err, errlen);
  if (ret != CACHE_OK) cache_rollback(s);
  if (ret == CACHE_OK) ret = cache_checkpoint(s, err, errlen);
  cache_unlock(s);
  return ret;
}

int cache_tactic_find(cache_store *s, const cache_tactic *key, cache_tactic *out, char *err,
                      size_t errlen) {
  if (!s || !key || !out) {
    cache_seterr(err, errlen, "tactic find: NULL argument");
    return CACHE_ERR;
  }
  cache_lock(s);
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db,
                              "SELECT " TACTIC_COLS " FROM tactics WHERE op = ?1 AND bucket = ?2"
                              " AND shape = ?3 AND arch = ?4 AND device = ?5 AND sms = ?6"
                              " AND driver = ?7 AND (?8 = '' OR compiler = ?8) AND runtime = ?9",
                              -1, &st, NULL);
  const char *texts[] = {key->op, NULL, key->shape, key->arch, key->device, NULL, key->driver,
                         key->compiler, key->runtime};
  for (int i = 0; i < 9 && rc == SQLITE_OK; i++)
    rc = texts[i] ? sqlite3_bind_text(st, i + 1, texts[i], -1, SQLITE_STATIC)
                  : sqlite3_bind_int64(st, i + 1, i == 1 ? key->bucket : key->sms);
  int found = 0, bad = 0;
  cache_tactic t;
  char why[1024] = "";
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    rc = SQLITE_OK;
    char w[256];
    if (cache_tactic_read(st, &t, w, sizeof w) != 0) {
      if (!bad++) {
        char hex[33] = "?";
        const void *h = sqlite3_column_blob(st, 0);
        if (h && sqlite3_column_bytes(st, 0) == 16) cache_hash_hex(h, hex);
        snprintf(why, sizeof why, "tactic %s in %s: %s (ignored)", hex, s->path, w);
      }
      continue;
    }
    /* Of several compilers' rows (a lookup that names none), the latest measured. */
    if (!found || t.updated > out->updated) *out = t;
    found = 1;
  }
  int ret = rc == SQLITE_DONE || rc == SQLITE_OK ? CACHE_OK : cache_sqerr(s, rc, "tactic find", err, errlen);
  sqlite3_finalize(st);
  cache_unlock(s);
  if (ret != CACHE_OK) return ret;
  if (found) return CACHE_OK;
  if (bad) {
    cache_seterr(err, errlen, "%s", why);
    return CACHE_ERR_CORRUPT;
  }
  return CACHE_NOT_FOUND;
}

int cache_tactic_list(cache_store *s, const char *op, const char *arch, cache_tactic_fn fn,
                      void *user, char *err, size_t errlen) {
  if (!s || !fn) {
    cache_seterr(err, errlen, "tactic list: NULL argument");
    return CACHE_ERR;
  }
  cache_lock(s);
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db,
                              "SELECT " TACTIC_COLS " FROM tactics" CACHE_FILTER_SQL
                              " ORDER BY op, shape, bucket, arch, device",
                              -1, &st, NULL);
  if (rc == SQLITE_OK) rc = cache_bind_filter(st, op, arch);
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    rc = SQLITE_OK;
    cache_tactic t;
    char why[256];
    int bad = cache_tactic_read(st, &t, why, sizeof why) != 0;
    if (fn(&t, bad ? why : NULL, user)) break;
  }
  int ret = rc == SQLITE_OK || rc == SQLITE_DONE ? CACHE_OK : cache_sqerr(s, rc, "tactic list", err, errlen);
  sqlite3_finalize(st);
  cache_unlock(s);
  return ret;
}

int cache_tactic_get_prefix(cache_store *s, const char *hex_prefix, cache_tactic *out,
                            char *why_bad, size_t whylen, char *err, size_t errlen) {
  size_t len = hex_prefix ? strlen(hex_prefix) : 0;
  if (!s || !out || len == 0 || len > 32 || strspn(hex_prefix, "0123456789abcdefABCDEF") != len) {
    cache_seterr(err, errlen, "tactic hash prefix '%s': want 1 to 32 hex digits",
                 hex_prefix ? hex_prefix : "");
    return CACHE_ERR;
  }
  cache_lock(s);
  sqlite3_stmt *st = NULL;
  /* Few rows: a scan comparing hex text is simple and fast enough. */
  int rc = sqlite3_prepare_v2(s->db,
                              "SELECT " TACTIC_COLS " FROM tactics WHERE substr(lower(hex(hash)), 1, ?2) = lower(?1)"
                              " ORDER BY hash LIMIT 2",
                              -1, &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 1, hex_prefix, -1, SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int(st, 2, (int)len);
  int ret = CACHE_NOT_FOUND;
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    char why[256];
    int bad = cache_tactic_read(st, out, why, sizeof why) != 0;
    /* A bad row is still shown (with its reason): its hash at least is the stored one. */
    const void *h = sqlite3_column_blob(st, 0);
    if (h && sqlite3_column_bytes(st, 0) == 16) memcpy(out->hash, h, 16);
    if (why_bad) snprintf(why_bad, whylen, "%s", bad ? why : "");
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
      cache_seterr(err, errlen, "tactic hash prefix '%s' is ambiguous", hex_prefix);
      ret = CACHE_ERR;
    } else {
      ret = CACHE_OK;
    }
  }
  if (rc != SQLITE_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
    ret = cache_sqerr(s, rc, "tactic show", err, errlen);
  sqlite3_finalize(st);
  cache_unlock(s);
  return ret;
}

int cache_tactic_delete(cache_store *s, const char *op, const char *arch, int64_t *removed,
                        char *err, size_t errlen) {
  const char *texts[2] = {op, arch};
  return cache_delete_where(s, "tactic delete", "DELETE FROM tactics" CACHE_FILTER_SQL, texts, 2,
                            removed, err, errlen);
}

int cache_tactic_count(cache_store *s, int64_t *n, char *err, size_t errlen) {
  if (!s || !n) {
    cache_seterr(err, errlen, "tactic count: NULL argument");
    return CACHE_ERR;
  }
  cache_lock(s);
  int ret = cache_int_query(s, "SELECT count(*) FROM tactics", "tactic count", n, NULL, err, errlen);
  cache_unlock(s);
  return ret;
}
