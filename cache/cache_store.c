/* cache_store.c: the on-disk kernel store, one SQLite file (WAL journal) of compiled
 * binaries keyed by a 128-bit hash: opening, schema, connections and statements. */
#include "cache_store.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
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
/* The statements that make the schema, without IF NOT EXISTS (they run only
 * on a file with no table, checked in the same transaction), so that SQLite
 * keeps each one's text verbatim in sqlite_schema: the shape check compares
 * those texts. Changing one of them changes the schema: bump
 * CACHE_SCHEMA_VERSION with it. */
#define SQL_META "CREATE TABLE meta(k TEXT PRIMARY KEY, v TEXT)"
#define SQL_KERNELS                                                                        \
  "CREATE TABLE kernels("                                                                  \
  " hash BLOB PRIMARY KEY, key_hash BLOB NOT NULL, op TEXT NOT NULL, key TEXT NOT NULL,"  \
  " arch TEXT NOT NULL, compiler TEXT NOT NULL, options TEXT NOT NULL, entry TEXT NOT NULL," \
  " bytes INTEGER NOT NULL, checksum INTEGER NOT NULL, compile_ms REAL, created INTEGER,"   \
  " last_used INTEGER, hits INTEGER, templates TEXT NOT NULL DEFAULT '',"                  \
  " abi TEXT NOT NULL DEFAULT '', source TEXT, binary BLOB NOT NULL)"
#define SQL_KEY_INDEX "CREATE INDEX kernels_key_hash ON kernels(key_hash)"
#define SQL_CLAIMS                                                                         \
  "CREATE TABLE claims(key_hash BLOB PRIMARY KEY, pid INTEGER NOT NULL,"                   \
  " start INTEGER NOT NULL, host TEXT NOT NULL, started INTEGER NOT NULL) WITHOUT ROWID"
/* One row a tactic key (cache_tactics.h); found by its hash, which is the key's. */
#define SQL_TACTICS                                                                        \
  "CREATE TABLE tactics(hash BLOB PRIMARY KEY, op TEXT NOT NULL, bucket INTEGER NOT NULL," \
  " shape TEXT NOT NULL, arch TEXT NOT NULL, device TEXT NOT NULL, sms INTEGER NOT NULL,"   \
  " driver TEXT NOT NULL, compiler TEXT NOT NULL, runtime TEXT NOT NULL,"                   \
  " params TEXT NOT NULL, valid INTEGER NOT NULL, time_us REAL NOT NULL,"                   \
  " default_us REAL NOT NULL, runner_up TEXT NOT NULL, runner_up_us REAL NOT NULL,"         \
  " invalid TEXT NOT NULL, measured INTEGER NOT NULL, updated INTEGER NOT NULL,"            \
  " samples INTEGER NOT NULL, checksum INTEGER NOT NULL) WITHOUT ROWID"
static const char *const SCHEMA_SQL =
    SQL_META ";" SQL_KERNELS ";" SQL_KEY_INDEX ";" SQL_CLAIMS ";" SQL_TACTICS ";";
/* No index on (op, arch): listing scans a few thousand rows at most, while
 * every process that opens the file parses each index's schema once. */

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
  assert(cache_locked(s));
  if (!s->db) {
    cache_seterr(err, errlen, "%s: %s: this store was opened before fork()", s->path, what);
    return CACHE_ERR;
  }
  int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? CACHE_OK : cache_sqerr(s, rc, what, err, errlen);
}

void cache_rollback(cache_store *s) {
  assert(cache_locked(s));
  /* Fails harmlessly when SQLite already rolled back (e.g. after SQLITE_FULL). */
  if (s->db && sqlite3_get_autocommit(s->db) == 0)
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* The schema's objects and the text each was made from. A file whose
 * version is right but whose tables, columns or index differ (one dropped,
 * altered or made by hand) would fail every store: it counts as damaged. */
static const struct {
  const char *name, *sql;
} SHAPE[] = {
    {"meta", SQL_META},
    {"kernels", SQL_KERNELS},
    {"kernels_key_hash", SQL_KEY_INDEX},
    {"claims", SQL_CLAIMS},
    {"tactics", SQL_TACTICS},
};
enum { NSHAPE = sizeof SHAPE / sizeof SHAPE[0] };

/* One statement for the open's common case: each schema object's text, and
 * on every row meta's schema_version (its prepare fails without a meta table).
 * All of sqlite_schema's few rows: a WHERE on the names cost more to plan. */
#define SHAPE_SQL \
  "SELECT name, sql, (SELECT v FROM meta WHERE k = 'schema_version') FROM sqlite_schema"

/* Steps a prepared SHAPE_SQL and compares the file's schema with SCHEMA_SQL's,
 * object by object (and nothing more), from the schema SQLite has already
 * read (no page beyond the first). *version gets meta's schema_version (-1: none). CACHE_OK, or
 * CACHE_ERR_CORRUPT naming what differs (the version is for the caller). */
static int cache_shape_rows(cache_store *s, sqlite3_stmt *st, long *version, char *err,
                            size_t errlen) {
  int seen[NSHAPE] = {0}, ret = CACHE_OK, rc;
  *version = -1;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    const char *sql = (const char *)sqlite3_column_text(st, 1);
    const char *v = (const char *)sqlite3_column_text(st, 2);
    char *end = NULL;
    long ver = v ? strtol(v, &end, 10) : -1;
    *version = v && end != v && *end == 0 ? ver : -1;
    int known = 0;
    for (int i = 0; i < NSHAPE; i++) {
      if (!name || strcmp(name, SHAPE[i].name) != 0) continue;
      seen[i]++;
      known = 1;
      if (ret == CACHE_OK && (!sql || strcmp(sql, SHAPE[i].sql) != 0)) {
        cache_seterr(err, errlen, "%s: damaged schema: %s is '%.300s' (this runtime needs '%s')",
                     s->path, name, sql ? sql : "", SHAPE[i].sql);
        ret = CACHE_ERR_CORRUPT;
      }
    }
    /* Nothing else belongs there but the indexes of the primary keys: a
     * trigger or view added by hand would act on every store. */
    if (!known && ret == CACHE_OK && (!name || strncmp(name, "sqlite_autoindex_", 17) != 0)) {
      cache_seterr(err, errlen, "%s: damaged schema: unexpected object '%.100s'", s->path,
                   name ? name : "");
      ret = CACHE_ERR_CORRUPT;
    }
  }
  if (rc != SQLITE_DONE) return cache_sqerr(s, rc, "reading the schema", err, errlen);
  for (int i = 0; i < NSHAPE && ret == CACHE_OK; i++)
    if (seen[i] != 1) {
      cache_seterr(err, errlen, "%s: damaged schema: %s is missing", s->path, SHAPE[i].name);
      ret = CACHE_ERR_CORRUPT;
    }
  return ret;
}

static int cache_check_shape(cache_store *s, char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  long version;
  int rc = sqlite3_prepare_v2(s->db, SHAPE_SQL, -1, &st, NULL);
  int ret = rc == SQLITE_OK ? cache_shape_rows(s, st, &version, err, errlen)
                            : cache_sqerr(s, rc, "reading the schema", err, errlen);
  sqlite3_finalize(st);
  return ret;
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
  int ret = cache_check_shape(s, err, errlen);
  if (ret != CACHE_OK) return ret;
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
  if (sqlite3_prepare_v2(s->db, SHAPE_SQL, -1, &st, NULL) == SQLITE_OK) {
    long version = -1;
    char err2[1024];
    int shape = cache_shape_rows(s, st, &version, err2, sizeof err2);
    sqlite3_finalize(st);
    if (version == CACHE_SCHEMA_VERSION) {
      *found = 1;
      if (shape != CACHE_OK) cache_seterr(err, errlen, "%s", err2);
      return shape;
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
  assert(cache_locked(s));
  if (!s->db) {
    cache_seterr(err, errlen, "%s: this store was opened before fork(); open it again here",
                 s->path);
    return NULL;
  }
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

sqlite3_stmt *cache_stmt(cache_store *s, int which, char *err, size_t errlen) {
  return cache_stmt_sql(s, which, stmt_sql[which], err, errlen);
}

void cache_stmt_done(sqlite3_stmt *st) {
  if (!st) return;
  /* reset repeats the last step's error, already reported by the caller. */
  (void)sqlite3_reset(st);
  (void)sqlite3_clear_bindings(st);
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

/* "file:<path>?immutable=1" (malloc'ed): SQLite then reads the main file
 * alone, takes no lock and never opens a -wal, -shm or -journal beside it. */
static char *cache_immutable_name(const char *path) {
  size_t n = strlen(path), cap = 3 * n + 32;
  char *uri = malloc(cap);
  if (!uri) return NULL;
  char *o = uri + sprintf(uri, "file:");
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("/-._~", *p))
      *o++ = (char)*p;
    else
      o += sprintf(o, "%%%02X", *p);
  }
  strcpy(o, "?immutable=1");
  return uri;
}

/* A WAL file in a directory we cannot write (a system cache shipped in an
 * image, a user cache on a read-only filesystem) cannot be read normally:
 * SQLite needs to create its -shm file. With no WAL content pending, the
 * main file is complete and nobody can be writing it, so it may be opened
 * as immutable instead. Returns that URI (malloc'ed), or NULL when the
 * fallback does not apply. */
static char *cache_immutable_uri(cache_store *s) {
  int prim = s->last_rc & 0xff;
  if (prim != SQLITE_READONLY && prim != SQLITE_CANTOPEN) return NULL;
  char side[PATH_MAX + 8];
  struct stat st;
  snprintf(side, sizeof side, "%s-wal", s->path);
  if (stat(side, &st) == 0 && st.st_size > 0) return NULL;
  return cache_immutable_name(s->path);
}

void cache_store_close(cache_store *s) {
  if (!s) return;
  cache_lock(s);
  cache_disconnect(s);
  cache_fork_unregister(s);
  cache_unlock(s);
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
  int immutable = (flags & CACHE_OPEN_IMMUTABLE) != 0;
  int readonly = immutable || (flags & CACHE_OPEN_READONLY) != 0;
  int memory = strcmp(path, ":memory:") == 0;
  if (memory && readonly) {
    cache_seterr(err, errlen, "cache_store_open: a read-only :memory: store would be empty");
    return CACHE_ERR;
  }
  int rc, created = 0;
  struct stat pst;
  /* An existing file needs neither its directory nor itself created: one
   * stat instead of a mkdir per path component and an open. */
  if (!memory && !readonly && !(lstat(path, &pst) == 0 && S_ISREG(pst.st_mode))) {
    if ((rc = cache_make_parent(path, err, errlen)) != CACHE_OK) return rc;
    if ((rc = cache_create_file(path, err, errlen)) != CACHE_OK) return rc;
    created = 1;
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
  /* NOMUTEX (added by cache_connect): every use of the connection is under s->mu.
   * A file that was just created is not followed if a link took its place. */
  int oflags = readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (created) oflags |= SQLITE_OPEN_NOFOLLOW;
  char *uri = NULL;
  cache_lock(s);
  cache_fork_register(s);
  if (immutable) {
    if (!(uri = cache_immutable_name(path))) {
      rc = CACHE_ERR;
      cache_seterr(err, errlen, "out of memory");
    } else {
      rc = cache_connect(s, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, 0, err, errlen);
    }
    free(uri);
    uri = NULL;
  } else {
    rc = cache_connect(s, path, oflags, memory, err, errlen);
    uri = rc != CACHE_OK && readonly ? cache_immutable_uri(s) : NULL;
  }
  if (uri) {
    cache_disconnect(s);
    rc = cache_connect(s, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, 0, err, errlen);
    free(uri);
  }
  cache_unlock(s);
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
  assert(cache_locked(s));
  cache_disconnect(s);
  int oflags = s->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  return cache_connect(s, s->path, oflags, s->memory, err, errlen);
}

const char *cache_store_path(const cache_store *s) { return s ? s->path : NULL; }

int cache_store_readonly(const cache_store *s) { return s ? s->readonly : 0; }
