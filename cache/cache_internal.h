/* cache_internal.h: what the files of cache/ share and nothing outside sees:
 * the store's struct, its lazily prepared statements, error and row helpers. */
#ifndef CACHE_INTERNAL_H
#define CACHE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "cache_held.h"
#include "cache_store.h"

/* Statements kept prepared on the connection, each made at its first use. */
enum {
  ST_GET,
  ST_FIND,
  ST_PUT,
  ST_TOUCH,
  ST_DEL,
  ST_PUT_UNCLAIM, /* put's release of the claim on the key it stores */
  ST_CLAIM_READY,
  ST_CLAIM_GET,
  ST_CLAIM_SET,
  ST_CLAIM_DROP,
  ST_COUNT
};

/* Column order shared by every SELECT that fills a cache_record: small,
 * mutable columns first, source and binary last (as in the table). */
#define REC_META_COLS                                                                  \
  "hash, key_hash, op, key, arch, compiler, options, entry, bytes, checksum, compile_ms," \
  " created, last_used, hits, templates, abi"
#define REC_COLS REC_META_COLS ", source, binary"
#define REC_NCOLS 18
#define REC_COL_SOURCE 16
#define REC_COL_BINARY 17

struct cache_store {
  sqlite3 *db;
  /* Recursive so that a cache_store_list callback may call back into the store. */
  pthread_mutex_t mu;
  cache_held held; /* who holds mu: cache_lock / cache_unlock keep it, cache_locked reads it */
  int readonly;
  int rollback; /* CACHE_OPEN_ROLLBACK, or sealed since */
  int memory;   /* ":memory:" */
  int last_rc;  /* SQLite code behind the last error, for open's fallback */
  char *path;
  /* Each is reset and its bindings cleared before the function using it
   * returns, so SQLITE_STATIC bindings never outlive the caller's memory
   * and no read transaction stays open between calls. */
  sqlite3_stmt *st[ST_COUNT];
  /* cache_fork.c's list of open stores, under the gate. */
  struct cache_store *fork_prev, *fork_next;
  /* This process as a claim owner; recomputed when getpid() changes (fork). */
  int64_t self_pid, self_start;
  char host[256];
  cache_row_check_fn row_check; /* NULL: the checksum alone */
};

/* Every use of a store's connection is between cache_lock and cache_unlock
 * (nested freely). Besides the store's own mutex they hold the process's
 * fork gate for reading (cache_fork.c): fork() waits until no thread of this
 * process is inside SQLite, so a child never inherits SQLite's global
 * mutexes or a connection's state half changed. */
void cache_lock(cache_store *s);
void cache_unlock(cache_store *s);
/* Whether this thread is between cache_lock and cache_unlock of s: for assert(), which
 * says the rule where a comment used to ("under s->mu"); always 1 under NDEBUG. */
static inline int cache_locked(const cache_store *s) { return cache_held_by_me(&s->held); }
/* The open stores, for the child after fork() (called under cache_lock). */
void cache_fork_register(cache_store *s);
void cache_fork_unregister(cache_store *s);

void cache_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends one line (fmt, then a newline) to a report's detail text of cap bytes while it
 * has room; a line that does not fit is cut, and nothing is added once it is full. */
void cache_note(char *detail, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Message from the connection; CACHE_ERR_CORRUPT for a damaged file. */
int cache_sqerr(cache_store *s, int rc, const char *what, char *err, size_t errlen);
int cache_exec(cache_store *s, const char *sql, const char *what, char *err, size_t errlen);
/* Ends an open transaction, if any; never fails loudly. */
void cache_rollback(cache_store *s);
int64_t cache_now(void);
/* 0 with a message when s is NULL or read-only. */
int cache_writable(cache_store *s, const char *what, char *err, size_t errlen);
/* PASSIVE WAL checkpoint after a commit: always CACHE_OK (the commit stands). */
int cache_checkpoint(cache_store *s, char *err, size_t errlen);

/* The statement of slot `which` (prepared from sql at first use), or NULL
 * with a message. Callers hold s->mu and end with cache_stmt_done. */
sqlite3_stmt *cache_stmt_sql(cache_store *s, int which, const char *sql, char *err,
                             size_t errlen);
void cache_stmt_done(sqlite3_stmt *st);
/* The same for the store's own statements (ST_*), whose SQL cache_store.c holds. */
sqlite3_stmt *cache_stmt(cache_store *s, int which, char *err, size_t errlen);

/* The (op, arch) filter of ls, clear, export and import: ?1 the op, ?2 the arch, NULL
 * for any. An arch also matches its architecture-specific variant (sm_90: sm_90a too),
 * whose binaries run only on that arch's devices and are stored under the variant. */
#define CACHE_FILTER_SQL " WHERE (?1 IS NULL OR op = ?1) AND (?2 IS NULL OR arch = ?2 OR arch = ?2 || 'a')"

/* Binds ?1 = op and ?2 = arch (NULL: any) of CACHE_FILTER_SQL; returns the SQLite code. */
int cache_bind_filter(sqlite3_stmt *st, const char *op, const char *arch);

/* One row of one or two integers: a count, a PRAGMA. */
int cache_int_query(cache_store *s, const char *sql, const char *what, int64_t *a, int64_t *b,
                    char *err, size_t errlen);
/* page_count * page_size of the current snapshot or transaction. */
int cache_file_bytes(cache_store *s, int64_t *bytes, char *err, size_t errlen);

/* Fills rec from a row whose first columns are REC_META_COLS; the strings
 * point into the statement. 0 when a hash or a NOT NULL text is malformed. */
int cache_row_meta(sqlite3_stmt *st, cache_record *rec);
/* 1 when the current row of st (REC_COLS first) is whole: metadata well
 * formed, binary length and checksum as recorded, and s's row check passed;
 * else 0 with the reason in why (may be NULL). */
int cache_row_judge(const cache_store *s, sqlite3_stmt *st, char *why, size_t whylen);

/* Closes the connection (statements first) and opens s->path again with
 * s's flags: after the file was replaced underneath. On failure the store
 * can only be closed. */
void cache_disconnect(cache_store *s);
int cache_reconnect(cache_store *s, char *err, size_t errlen);

/* cache_copy.c: inserts the current REC_COLS row of src into `to` verbatim
 * (INSERT OR IGNORE by hash; to->mu held, a write transaction open).
 * *inserted is 1 when the row was new. */
int cache_copy_row(cache_store *to, sqlite3_stmt *src, int *inserted, char *err, size_t errlen);

/* cache_evict.c: runs one DELETE whose parameters ?1..?n are texts (NULL binds NULL) in
 * a write transaction that also reclaims the freed pages; *removed gets the count. */
int cache_delete_where(cache_store *s, const char *what, const char *sql,
                       const char *const *texts, int ntexts, int64_t *removed, char *err,
                       size_t errlen);

/* ---- the tactics table (cache_tactics.c; the row as a value: cache_tactics.h) ---- */
struct cache_tactic;
/* Column order of every SELECT that reads a tactic row (as in the table). */
#define TACTIC_COLS                                                                         \
  "hash, op, bucket, shape, arch, device, sms, driver, compiler, runtime, params, valid,"   \
  " time_us, default_us, runner_up, runner_up_us, invalid, measured, updated, samples,"    \
  " checksum"
#define SQL_TACTIC_REPLACE                                                                  \
  "INSERT OR REPLACE INTO tactics(" TACTIC_COLS ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"  \
  " ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"
/* Reads the current TACTIC_COLS row of st into *t and checks it (cache_tactic_check):
 * 0, or -1 with the reason in why. */
int cache_tactic_read(sqlite3_stmt *st, struct cache_tactic *t, char *why, size_t whylen);
/* Binds ?1..?21 of SQL_TACTIC_REPLACE (SQLITE_STATIC: t outlives the step). */
int cache_tactic_bind(sqlite3_stmt *st, const struct cache_tactic *t);
/* In s's open write transaction: merges the checked row `in` into the stored row of its
 * key (or stores it). *outcome: CACHE_TACTIC_NEW, _MERGED, or _SAME when the stored row
 * is `in` already (then nothing is written: an import twice adds no samples). */
enum { CACHE_TACTIC_NEW = 0, CACHE_TACTIC_MERGED = 1, CACHE_TACTIC_SAME = 2 };
int cache_tactic_merge_into(cache_store *s, const struct cache_tactic *in, int *outcome,
                            char *err, size_t errlen);

/* cache_tactic_verify.c: verify's walk over the tactics (counted into rep, bad keys
 * kept in bad for repair's delete), that delete, and the rebuild's copy of the good rows
 * into the fresh store n (in a transaction of its own). */
typedef struct cache_tactic_bad {
  sqlite3_value **v; /* the stored hash of each bad row, whatever it holds */
  size_t n, cap;
} cache_tactic_bad;
struct cache_verify_report;
int cache_tactic_verify_rows(cache_store *s, struct cache_verify_report *rep,
                             cache_tactic_bad *bad, int *damaged, char *err, size_t errlen);
int cache_tactic_verify_delete(cache_store *s, const cache_tactic_bad *bad, int64_t *deleted,
                               char *err, size_t errlen);
void cache_tactic_bad_free(cache_tactic_bad *b);
int cache_tactic_rebuild_copy(cache_store *s, cache_store *n, int64_t *found, int64_t *copied,
                              char *err, size_t errlen);

/* An error that is the file's damage showing, as opposed to one of the moment (memory,
 * I/O, locks) that must stop a repair rather than cost rows. */
static inline int cache_is_damage(int rc) {
  return (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB ||
         rc == SQLITE_IOERR_SHORT_READ;
}

/* cache_fs.c: mkdir -p of path's parent (new directories 0700); creation
 * of the file itself, 0600 whatever the umask (EEXIST is fine); removal of
 * "<path>-wal", "-shm" and "-journal" (missing is fine). */
int cache_make_parent(const char *path, char *err, size_t errlen);
int cache_create_file(const char *path, char *err, size_t errlen);
int cache_unlink_sidecars(const char *path, char *err, size_t errlen);

#endif /* CACHE_INTERNAL_H */
