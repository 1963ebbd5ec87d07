/* cache_store.c: the on-disk kernel store: one SQLite file (WAL journal) of
 * compiled binaries keyed by a 128-bit hash, each row checked by XXH3-64. */
#include "cache_store.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache_internal.h"

/* Small, mutable columns first and source/binary last, so that reading a
 * row's metadata (list) never walks the binary's overflow pages. claims is
 * WITHOUT ROWID: its rows are tiny and only ever found by key_hash, so one
 * b-tree instead of a table and its primary-key index. */
static const char *const SCHEMA_SQL =
    "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT);"
    "CREATE TABLE IF NOT EXISTS kernels("
    " hash BLOB PRIMARY KEY, key_hash BLOB NOT NULL, op TEXT NOT NULL, key TEXT NOT NULL,"
    " arch TEXT NOT NULL, compiler TEXT NOT NULL, options TEXT NOT NULL, entry TEXT NOT NULL,"
    " bytes INTEGER NOT NULL, checksum INTEGER NOT NULL, compile_ms REAL, created INTEGER,"
    " last_used INTEGER, hits INTEGER, templates TEXT NOT NULL DEFAULT '',"
    " abi TEXT NOT NULL DEFAULT '', source TEXT, binary BLOB NOT NULL);"
    "CREATE INDEX IF NOT EXISTS kernels_key_hash ON kernels(key_hash);"
    "CREATE TABLE IF NOT EXISTS claims(key_hash BLOB PRIMARY KEY, pid INTEGER NOT NULL,"
    " start INTEGER NOT NULL, host TEXT NOT NULL, started INTEGER NOT NULL) WITHOUT ROWID;";
/* No index on (op, arch): listing scans a few thousand rows at most, while
 * every process that opens the file parses each index's schema once. */

void cache_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  err[errlen - 1] = '\0';
}

/* A damaged or foreign file is CORRUPT so that the caller can move it aside;
 * anything else (locks, I/O, full disk) is a plain error worth retrying. */
static int cache_rc_status(int rc) {
  int prim = rc & 0xff;
  return (prim == SQLITE_NOTADB || prim == SQLITE_CORRUPT) ? CACHE_ERR_CORRUPT : CACHE_ERR;
}

int cache_sqerr(cache_store *s, int rc, const char *what, char *err, size_t errlen) {
  const char *msg = s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
  int st = cache_rc_status(rc);
  s->last_rc = rc;
  cache_seterr(err, errlen, "%s: %s%s (%s)", what, msg,
               st == CACHE_ERR_CORRUPT ? ": not a valid fi_runtime cache" : "", s->path);
  return st;
}

void cache_hash_hex(const uint8_t hash[16], char out[33]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = digits[hash[i] >> 4];
    out[2 * i + 1] = digits[hash[i] & 15];
  }
  out[32] = '\0';
}

int64_t cache_now(void) { return (int64_t)time(NULL); }

int cache_exec(cache_store *s, const char *sql, const char *what, char *err, size_t errlen) {
  int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? CACHE_OK : cache_sqerr(s, rc, what, err, errlen);
}

void cache_rollback(cache_store *s) {
  /* Fails harmlessly when SQLite already rolled back (e.g. after SQLITE_FULL). */
  if (s->db && sqlite3_get_autocommit(s->db) == 0)
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Reads meta.schema_version inside the current transaction: *found = 0 when
 * the database has no tables at all (a fresh file). */
static int cache_check_schema(cache_store *s, int *found, char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  int has_meta = 0, ntables = 0;
  int rc = sqlite3_prepare_v2(s->db,
                              "SELECT count(*), sum(name = 'meta') FROM sqlite_schema"
                              " WHERE type = 'table'",
                              -1, &st, NULL);
  if (rc != SQLITE_OK) return cache_sqerr(s, rc, "reading schema", err, errlen);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    ntables = sqlite3_column_int(st, 0);
    has_meta = sqlite3_column_int(st, 1);
    rc = SQLITE_DONE;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return cache_sqerr(s, rc, "reading schema", err, errlen);
  *found = 0;
  if (ntables == 0) return CACHE_OK;
  if (!has_meta) {
    cache_seterr(err, errlen, "%s: SQLite database without a meta table: not a fi_runtime cache",
                 s->path);
    return CACHE_ERR_CORRUPT;
  }
  rc = sqlite3_prepare_v2(s->db, "SELECT v FROM meta WHERE k = 'schema_version'", -1, &st, NULL);
  if (rc != SQLITE_OK) return cache_sqerr(s, rc, "reading schema version", err, errlen);
  rc = sqlite3_step(st);
  long version = -1;
  if (rc == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(st, 0);
    char *end = NULL;
    if (v) version = strtol(v, &end, 10);
    if (!v || end == v || *end != '\0') version = -1;
    rc = SQLITE_DONE;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return cache_sqerr(s, rc, "reading schema version", err, errlen);
  if (version != CACHE_SCHEMA_VERSION) {
    if (version > CACHE_SCHEMA_VERSION)
      cache_seterr(err, errlen, "%s: schema version %ld is newer than this runtime's %d",
                   s->path, version, CACHE_SCHEMA_VERSION);
    else if (version >= 1)
      /* No migration: the file is a cache, and a fresh one refills itself. */
      cache_seterr(err, errlen, "%s: older schema (version %ld, this runtime: %d): not usable",
                   s->path, version, CACHE_SCHEMA_VERSION);
    else
      cache_seterr(err, errlen, "%s: missing or unknown schema version (this runtime: %d)",
                   s->path, CACHE_SCHEMA_VERSION);
    return CACHE_ERR_CORRUPT;
  }
  *found = 1;
  return CACHE_OK;
}

/* Switching to WAL takes an exclusive lock and SQLite does not call the
 * busy handler for it: processes opening a fresh file together see
 * SQLITE_BUSY at once, so retry here for as long as busy_timeout would. */
static int cache_set_wal(cache_store *s, char *err, size_t errlen) {
  int rc, waited_ms = 0, step_ms = 1;
  for (;;) {
    rc = sqlite3_exec(s->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) break;
    if (waited_ms >= 10000) break;
    sqlite3_sleep(step_ms);
    waited_ms += step_ms;
    if (step_ms < 16) step_ms *= 2;
  }
  /* Where WAL is impossible SQLite keeps the old mode and says so in the
   * result row; the store still works then, so that is not checked. */
  return rc == SQLITE_OK ? CACHE_OK : cache_sqerr(s, rc, "journal_mode=WAL", err, errlen);
}

/* The schema check in a read transaction, so it sees one snapshot and
 * does not wait for writers. */
static int cache_read_schema(cache_store *s, int *found, char *err, size_t errlen) {
  /* The common case in one statement: a fi_runtime cache of our version.
   * Anything else (a fresh file, a foreign or newer one) gets the full check. */
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "SELECT v FROM meta WHERE k = 'schema_version'", -1, &st, NULL) ==
      SQLITE_OK) {
    int ok = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_TEXT &&
             atol((const char *)sqlite3_column_text(st, 0)) == CACHE_SCHEMA_VERSION;
    sqlite3_finalize(st);
    if (ok) {
      *found = 1;
      return CACHE_OK;
    }
  } else {
    sqlite3_finalize(st);
  }
  int rc = cache_exec(s, "BEGIN", "begin", err, errlen);
  if (rc != CACHE_OK) return rc;
  rc = cache_check_schema(s, found, err, errlen);
  cache_rollback(s);
  return rc;
}

static int cache_setup(cache_store *s, int memory, char *err, size_t errlen) {
  int rc = sqlite3_busy_timeout(s->db, 10000);
  if (rc != SQLITE_OK) return cache_sqerr(s, rc, "busy_timeout", err, errlen);
  int found = 0;
  if (s->readonly) {
    rc = cache_read_schema(s, &found, err, errlen);
    if (rc == CACHE_OK && !found) {
      cache_seterr(err, errlen, "%s: empty database: not a fi_runtime cache", s->path);
      rc = CACHE_ERR_CORRUPT;
    }
    return rc;
  }
  if ((rc = cache_read_schema(s, &found, err, errlen))) return rc;
  /* auto_vacuum must precede the first table. Not on an existing file:
   * there it rewrites the header in a synced transaction (10+ ms an open). */
  if (!found &&
      (rc = cache_exec(s, "PRAGMA auto_vacuum=INCREMENTAL", "auto_vacuum", err, errlen)))
    return rc;
  /* journal_mode is persistent in the file: a no-op once it is WAL. Leaving
   * WAL needs every other connection gone; if one is there, stay in WAL. */
  if (!memory && s->rollback)
    sqlite3_exec(s->db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL);
  else if (!memory && (rc = cache_set_wal(s, err, errlen)))
    return rc;
  if ((rc = cache_exec(s, "PRAGMA synchronous=NORMAL", "synchronous", err, errlen))) return rc;
  if ((rc = cache_exec(s, "PRAGMA journal_size_limit=1048576", "journal_size_limit", err,
                       errlen)))
    return rc;
  if (found) return CACHE_OK;
  /* IMMEDIATE, and check again: processes opening a fresh file at once
   * create the schema one at a time. */
  if ((rc = cache_exec(s, "BEGIN IMMEDIATE", "begin", err, errlen))) return rc;
  rc = cache_check_schema(s, &found, err, errlen);
  if (rc == CACHE_OK && !found) {
    rc = cache_exec(s, SCHEMA_SQL, "creating schema", err, errlen);
    if (rc == CACHE_OK) {
      char sql[128];
      snprintf(sql, sizeof sql, "INSERT INTO meta(k, v) VALUES('schema_version', '%d')",
               CACHE_SCHEMA_VERSION);
      rc = cache_exec(s, sql, "writing schema version", err, errlen);
    }
  }
  if (rc == CACHE_OK) rc = cache_exec(s, "COMMIT", "commit", err, errlen);
  if (rc != CACHE_OK) cache_rollback(s);
  return rc;
}

static const char *const stmt_sql[ST_COUNT] = {
    [ST_GET] = "SELECT " REC_COLS " FROM kernels WHERE hash = ?1",
    /* Chosen among in C (cache_find_best): planning an ORDER BY on an
     * expression cost more than the rest of a fresh process's lookup. */
    [ST_FIND] = "SELECT " REC_COLS " FROM kernels WHERE key_hash = ?1",
    [ST_PUT] = "INSERT OR REPLACE INTO kernels(hash, key_hash, op, key, arch, compiler,"
               " options, entry, bytes, checksum, compile_ms, created, last_used, hits,"
               " templates, abi, source, binary) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
               " ?10, ?11, ?12, ?12, 0, ?13, ?14, ?15, ?16)",
    [ST_TOUCH] = "UPDATE kernels SET hits = coalesce(hits, 0) + 1, last_used = ?2 WHERE hash = ?1",
    [ST_DEL] = "DELETE FROM kernels WHERE hash = ?1",
    [ST_PUT_UNCLAIM] = "DELETE FROM claims WHERE key_hash = ?1",
};

/* Statements are prepared at first use, under s->mu: planning them all at
 * open cost as much as parsing the schema, and a process that only looks
 * kernels up needs one. */
sqlite3_stmt *cache_stmt_sql(cache_store *s, int which, const char *sql, char *err,
                             size_t errlen) {
  if (!s->st[which]) {
    int rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->st[which], NULL);
    if (rc != SQLITE_OK) {
      cache_sqerr(s, rc, "preparing a statement", err, errlen);
      sqlite3_finalize(s->st[which]);
      s->st[which] = NULL;
    }
  }
  return s->st[which];
}

static sqlite3_stmt *cache_stmt(cache_store *s, int which, char *err, size_t errlen) {
  return cache_stmt_sql(s, which, stmt_sql[which], err, errlen);
}

void cache_stmt_done(sqlite3_stmt *st) {
  if (!st) return;
  /* reset repeats the last step's error, already reported by the caller. */
  (void)sqlite3_reset(st);
  (void)sqlite3_clear_bindings(st);
}

void cache_disconnect(cache_store *s) {
  for (int i = 0; i < ST_COUNT; i++) {
    sqlite3_finalize(s->st[i]);
    s->st[i] = NULL;
  }
  /* Every statement is finalized, so close cannot fail with SQLITE_BUSY. */
  sqlite3_close(s->db);
  s->db = NULL;
}

static int cache_connect(cache_store *s, const char *name, int oflags, int memory, char *err,
                         size_t errlen) {
  int rc = sqlite3_open_v2(name, &s->db, oflags | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) return cache_sqerr(s, rc, "cannot open cache", err, errlen);
  if ((rc = sqlite3_extended_result_codes(s->db, 1)) != SQLITE_OK)
    return cache_sqerr(s, rc, "extended result codes", err, errlen);
  /* Keep -wal and -shm when the last connection closes: the next process
   * then maps a valid WAL index instead of creating both files and
   * rebuilding it, which made most of a fresh process's first lookup. */
  int persist = 1;
  if (!memory) sqlite3_file_control(s->db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  return cache_setup(s, memory, err, errlen);
}

/* A WAL file in a directory we cannot write (a system cache shipped in an
 * image) cannot be read normally: SQLite needs to create its -shm file.
 * With no WAL content pending, the main file is complete and nobody can
 * be writing it, so it may be opened as immutable instead. Returns that
 * URI (malloc'ed), or NULL when the fallback does not apply. */
static char *cache_immutable_uri(cache_store *s) {
  int prim = s->last_rc & 0xff;
  if (prim != SQLITE_READONLY && prim != SQLITE_CANTOPEN) return NULL;
  size_t n = strlen(s->path), cap = 3 * n + 32;
  char *uri = malloc(cap);
  if (!uri) return NULL;
  struct stat st;
  snprintf(uri, cap, "%s-wal", s->path);
  if (stat(uri, &st) == 0 && st.st_size > 0) {
    free(uri);
    return NULL;
  }
  char *o = uri + sprintf(uri, "file:");
  for (const unsigned char *p = (const unsigned char *)s->path; *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("/-._~", *p))
      *o++ = (char)*p;
    else
      o += sprintf(o, "%%%02X", *p);
  }
  strcpy(o, "?immutable=1");
  return uri;
}

void cache_store_close(cache_store *s) {
  if (!s) return;
  cache_disconnect(s);
  pthread_mutex_destroy(&s->mu);
  free(s->path);
  free(s);
}

int cache_store_open(const char *path, int flags, cache_store **out, char *err, size_t errlen) {
  if (!out) {
    cache_seterr(err, errlen, "cache_store_open: out is NULL");
    return CACHE_ERR;
  }
  *out = NULL;
  if (!path || !*path) {
    cache_seterr(err, errlen, "cache_store_open: empty path");
    return CACHE_ERR;
  }
  int readonly = (flags & CACHE_OPEN_READONLY) != 0;
  int memory = strcmp(path, ":memory:") == 0;
  if (memory && readonly) {
    cache_seterr(err, errlen, "cache_store_open: a read-only :memory: store would be empty");
    return CACHE_ERR;
  }
  int rc;
  struct stat pst;
  /* An existing file needs neither its directory nor itself created: one
   * stat instead of a mkdir per path component and an open. */
  if (!memory && !readonly && !(stat(path, &pst) == 0 && S_ISREG(pst.st_mode))) {
    if ((rc = cache_make_parent(path, err, errlen)) != CACHE_OK) return rc;
    if ((rc = cache_create_file(path, err, errlen)) != CACHE_OK) return rc;
  }
  if (readonly && access(path, F_OK) != 0) {
    cache_seterr(err, errlen, "cannot open %s read-only: %s", path, strerror(errno));
    return CACHE_ERR;
  }
  cache_store *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path))) {
    free(s);
    cache_seterr(err, errlen, "out of memory");
    return CACHE_ERR;
  }
  s->readonly = readonly;
  s->rollback = (flags & CACHE_OPEN_ROLLBACK) != 0;
  s->memory = memory;
  pthread_mutexattr_t attr;
  int mrc = pthread_mutexattr_init(&attr);
  if (mrc == 0) {
    mrc = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    if (mrc == 0) mrc = pthread_mutex_init(&s->mu, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  if (mrc != 0) {
    free(s->path);
    free(s);
    cache_seterr(err, errlen, "cannot initialize mutex: %s", strerror(mrc));
    return CACHE_ERR;
  }
  /* NOMUTEX (added by cache_connect): every use of the connection is under s->mu. */
  int oflags = readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  rc = cache_connect(s, path, oflags, memory, err, errlen);
  char *uri = rc != CACHE_OK && readonly ? cache_immutable_uri(s) : NULL;
  if (uri) {
    cache_disconnect(s);
    rc = cache_connect(s, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, 0, err, errlen);
    free(uri);
  }
  if (rc != CACHE_OK) {
    cache_store_close(s);
    return rc;
  }
  *out = s;
  return CACHE_OK;
}

/* A failed connect keeps its handle (SQLite allocates one even then), so
 * later calls on the store fail with a message instead of a NULL db. */
int cache_reconnect(cache_store *s, char *err, size_t errlen) {
  cache_disconnect(s);
  int oflags = s->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  return cache_connect(s, s->path, oflags, s->memory, err, errlen);
}

const char *cache_store_path(const cache_store *s) { return s ? s->path : NULL; }

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

int cache_row_intact(sqlite3_stmt *st) {
  cache_record r;
  if (!cache_row_meta(st, &r)) return 0;
  const void *bin = sqlite3_column_blob(st, REC_COL_BINARY);
  size_t n = (size_t)sqlite3_column_bytes(st, REC_COL_BINARY);
  return bin && n == r.bytes && XXH3_64bits(bin, n) == r.checksum;
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
  if (n != r.bytes || !bin || XXH3_64bits(bin, n) != r.checksum) {
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
    cache_seterr(err, errlen, "kernel %s in %s: %s mismatch (%s)", hex, s->path,
                 n != r.bytes ? "length" : "checksum",
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
  pthread_mutex_lock(&s->mu);
  int ret;
  sqlite3_stmt *q = cache_stmt(s, ST_FIND, err, errlen);
  if (!q) {
    pthread_mutex_unlock(&s->mu);
    return CACHE_ERR;
  }
  int rc = sqlite3_bind_blob(q, 1, key_hash, 16, SQLITE_STATIC);
  if (rc == SQLITE_OK)
    ret = cache_find_best(s, q, prefer_compiler, rec, err, errlen);
  else
    ret = cache_sqerr(s, rc, "find: bind", err, errlen);
  pthread_mutex_unlock(&s->mu);
  return ret;
}

int cache_store_get(cache_store *s, const uint8_t hash[16], cache_record *rec, char *err,
                    size_t errlen) {
  if (!cache_args_ok(s, hash, rec, err, errlen)) return CACHE_ERR;
  pthread_mutex_lock(&s->mu);
  sqlite3_stmt *q = cache_stmt(s, ST_GET, err, errlen);
  int ret, rc = q ? sqlite3_bind_blob(q, 1, hash, 16, SQLITE_STATIC) : SQLITE_ERROR;
  if (!q)
    ret = CACHE_ERR;
  else if (rc == SQLITE_OK)
    ret = cache_lookup(s, q, rec, err, errlen);
  else
    ret = cache_sqerr(s, rc, "get: bind", err, errlen);
  pthread_mutex_unlock(&s->mu);
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
  pthread_mutex_lock(&s->mu);
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
  pthread_mutex_unlock(&s->mu);
  return ret;
}

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

/* Best effort: a PASSIVE checkpoint never waits, so BUSY (a reader or another
 * checkpointer in the way) is normal; the next write will try again. */
int cache_checkpoint(cache_store *s, char *err, size_t errlen) {
  int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  if (rc == SQLITE_OK || (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
    return CACHE_OK;
  return cache_sqerr(s, rc, "written, but WAL checkpoint failed", err, errlen);
}

int cache_store_put(cache_store *s, const cache_record *rec, char *err, size_t errlen) {
  if (!cache_writable(s, "put", err, errlen)) return CACHE_ERR;
  if (!rec || !rec->op || !rec->key || !rec->arch || !rec->compiler || !rec->options ||
      !rec->entry || !rec->binary || rec->bytes == 0) {
    cache_seterr(err, errlen, "put: a required field is NULL or the binary is empty");
    return CACHE_ERR;
  }
  uint64_t sum = XXH3_64bits(rec->binary, rec->bytes);
  pthread_mutex_lock(&s->mu);
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
  pthread_mutex_unlock(&s->mu);
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
  pthread_mutex_lock(&s->mu);
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
  pthread_mutex_unlock(&s->mu);
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
  pthread_mutex_lock(&s->mu);
  sqlite3_stmt *st = NULL;
  int ret = CACHE_OK;
  int rc = sqlite3_prepare_v2(s->db,
                              "SELECT " REC_META_COLS " FROM kernels"
                              " WHERE (?1 IS NULL OR op = ?1) AND (?2 IS NULL OR arch = ?2)"
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
  pthread_mutex_unlock(&s->mu);
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
  pthread_mutex_lock(&s->mu);
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
  pthread_mutex_unlock(&s->mu);
  if (ret != CACHE_OK) return ret;
  if (entries) *entries = n;
  if (bytes) *bytes = sum;
  if (file_bytes) *file_bytes = pages * page_size;
  return CACHE_OK;
}
